//! Ephemeral containers (`kubectl debug`) through the pod workers.

use super::harness::*;
use crate::deleted;
use serde_json::{json, Value};
use std::time::Duration;

/// `p` as the ephemeralcontainers subresource leaves it after `kubectl debug`: only
/// `spec.ephemeralContainers` changed, the status is the API server's current copy.
fn with_ephemeral(h: &Harness, p: &Pod, ephemeral: Value) -> Pod {
    let name = p.metadata.name.clone().unwrap();
    let mut v = serde_json::to_value(p).unwrap();
    v["spec"]["ephemeralContainers"] = ephemeral;
    if let Some(st) = h.api.lock().unwrap().statuses.get(&name) {
        v["status"] = st.clone();
    }
    serde_json::from_value(v).unwrap()
}

/// All instances the runtime ever created of container `name`.
fn instances(h: &Harness, name: &str) -> Vec<deckhand::cri::fake::FakeContainer> {
    h.runtime
        .containers()
        .into_iter()
        .filter(|c| c.name() == name)
        .collect()
}

/// `kubectl debug -it --target=main`: an ephemeral container added to a running pod starts
/// once, in the target's PID namespace, and is reported in `ephemeralContainerStatuses`
/// (running, restartCount 0, containerID); when it exits it is reported terminated and is not
/// started again, although the pod's restartPolicy is Always; the pod stays Running and Ready.
#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_starts_once_is_reported_and_is_never_restarted() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("debugme", "Always", json!({}));
    h.apply(&p).await;
    eventually(Duration::from_secs(5), "Running", || {
        (h.phase("debugme").as_deref() == Some("Running")).then_some(())
    })
    .await;
    let main = h.runtime.running("main").unwrap();
    assert!(h.container_status("debugme", "debugger").is_none());

    let p2 = with_ephemeral(
        &h,
        &p,
        json!([{"name": "debugger", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                "command": ["sh"], "stdin": true, "tty": true, "targetContainerName": "main"}]),
    );
    h.apply(&p2).await;
    let dbg = eventually(Duration::from_secs(5), "the debugger runs", || {
        h.runtime.running("debugger")
    })
    .await;
    let ns = dbg
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap();
    assert_eq!(ns.pid, deckhand::cri::api::NamespaceMode::Target as i32);
    assert_eq!(ns.target_id, main.id, "the target's PID namespace");
    assert!(dbg.config.stdin && dbg.config.tty);
    let st = eventually(Duration::from_secs(5), "reported running", || {
        h.container_status("debugme", "debugger")
            .filter(|c| c["state"]["running"].is_object())
    })
    .await;
    assert_eq!(st["restartCount"], 0);
    assert_eq!(st["ready"], false);
    assert_eq!(st["containerID"], format!("fake://{}", dbg.id));
    let main_st = h.container_status("debugme", "main").unwrap();
    assert_eq!(st["image"], main_st["image"], "same image, same shape");
    assert_eq!(st["imageID"], main_st["imageID"]);
    assert!(st["imageID"].is_string(), "{st}");
    assert!(st.get("started").is_none(), "{st}");
    assert_eq!(
        h.runtime.running("main").unwrap().id,
        main.id,
        "main untouched"
    );

    // It exits: terminated, never restarted.
    h.runtime.exit(&dbg.id, 3);
    h.poke(&p2).await;
    let st = eventually(Duration::from_secs(5), "reported terminated", || {
        h.container_status("debugme", "debugger")
            .filter(|c| c["state"]["terminated"].is_object())
    })
    .await;
    assert_eq!(st["state"]["terminated"]["exitCode"], 3);
    keep_poking(&h, &p2, Duration::from_secs(30)).await;
    assert_eq!(
        instances(&h, "debugger").len(),
        1,
        "started once, never again"
    );
    assert_eq!(h.phase("debugme").as_deref(), Some("Running"));
    let st = h.container_status("debugme", "debugger").unwrap();
    assert_eq!(st["restartCount"], 0);
    assert!(st["state"]["terminated"].is_object(), "{st}");
    let ready = {
        let r = h.api.lock().unwrap();
        r.statuses["debugme"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .map(|c| c["status"].clone())
    };
    assert_eq!(
        ready,
        Some(json!("True")),
        "ephemeral containers do not affect Ready"
    );

    // A second one added later (the list only grows) starts too; the first stays exited.
    let p3 = with_ephemeral(
        &h,
        &p,
        json!([{"name": "debugger", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                "command": ["sh"], "stdin": true, "tty": true, "targetContainerName": "main"},
               {"name": "debugger2", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"]}]),
    );
    h.apply(&p3).await;
    eventually(
        Duration::from_secs(5),
        "the second debugger reported running",
        || {
            h.container_status("debugme", "debugger2")
                .filter(|c| c["state"]["running"].is_object())
        },
    )
    .await;
    assert_eq!(instances(&h, "debugger").len(), 1);
    let ns = h
        .runtime
        .running("debugger2")
        .unwrap()
        .config
        .linux
        .unwrap()
        .security_context
        .unwrap()
        .namespace_options
        .unwrap();
    assert_eq!(
        ns.pid,
        deckhand::cri::api::NamespaceMode::Container as i32,
        "no target"
    );
    h.stop().await;
}

/// An ephemeral container that shows up on a pod being deleted is not started: the worker is
/// terminating the pod (k/k: a terminating pod gets no SyncPod).
#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_is_not_started_on_a_terminating_pod() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.ignore_stop_signal("main");
    let p = pod(
        "leaving",
        "Always",
        json!({"terminationGracePeriodSeconds": 60}),
    );
    h.apply(&p).await;
    eventually(Duration::from_secs(5), "running", || {
        h.runtime.running("main")
    })
    .await;
    let d = deleted(&p, 60);
    h.apply(&d).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let d2 = with_ephemeral(
        &h,
        &d,
        json!([{"name": "debugger", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                "command": ["sh"]}]),
    );
    h.apply(&d2).await;
    keep_poking(&h, &d2, Duration::from_secs(5)).await;
    assert!(
        h.runtime.running("main").is_some(),
        "still in its grace period"
    );
    assert!(
        instances(&h, "debugger").is_empty(),
        "no ephemeral start while terminating"
    );
    eventually(
        Duration::from_secs(90),
        "the pod deleted in the API",
        || h.deleted("leaving").then_some(()),
    )
    .await;
    assert!(instances(&h, "debugger").is_empty());
    h.stop().await;
}

/// An ephemeral container whose image name is invalid gets `InvalidImageName` on its status,
/// nothing is created for it, and the pod runs on.
#[tokio::test(start_paused = true)]
async fn an_ephemeral_container_with_an_invalid_image_is_waiting_with_invalid_image_name() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("badimage", "Always", json!({}));
    h.apply(&p).await;
    eventually(Duration::from_secs(5), "Running", || {
        (h.phase("badimage").as_deref() == Some("Running")).then_some(())
    })
    .await;
    let p2 = with_ephemeral(
        &h,
        &p,
        json!([{"name": "debugger", "image": "Busybox:NOT@VALID", "imagePullPolicy": "IfNotPresent",
                "command": ["sh"]}]),
    );
    h.apply(&p2).await;
    let (reason, message) = eventually(Duration::from_secs(5), "InvalidImageName", || {
        h.waiting("badimage", "debugger")
            .filter(|(r, _)| r == "InvalidImageName")
    })
    .await;
    assert_eq!(reason, "InvalidImageName");
    assert!(
        message.contains("Failed to apply default image tag"),
        "{message}"
    );
    keep_poking(&h, &p2, Duration::from_secs(3)).await;
    assert!(instances(&h, "debugger").is_empty());
    assert_eq!(h.phase("badimage").as_deref(), Some("Running"));
    assert!(h.runtime.running("main").is_some());
    h.stop().await;
}
