//! End-to-end tests of the exit → status path (issue 15): deckhand decides a container's exit
//! from containerd's `/tasks/exit` event, before containerd's CRI plugin shows it. What it
//! writes must be what CRI shows afterwards, and the container's output must be complete in
//! `kubectl logs` the moment the phase changes. No timing is asserted here (the figures are in
//! `hack/bench.sh --peer go`).

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use std::time::Duration;

fn terminated(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    container_status(p, "main")?
        .state
        .as_ref()?
        .terminated
        .clone()
}

/// A Never pod that writes a burst of output and exits 3: the first watch event in phase Failed
/// carries exit code 3, reason Error and a finish time that agree with CRI's own view read
/// afterwards, and the log read right then ends with the last line written.
#[tokio::test]
async fn an_exit_decided_from_the_event_agrees_with_cri_and_the_log_is_complete() {
    let client = client().await;
    let ns = TestNs::new(&client, "exit").await;
    let api = ns.pods();
    let script =
        "sleep 2; i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done; echo LAST; exit 3";
    ns.create_pod(&busybox_pod("burst", script, "Never", Some(1)))
        .await;
    let failed = wait_pod(&api, "burst", "phase Failed", |p| phase(p) == "Failed").await;
    // read the log at once, as `kubectl logs` right after `kubectl get pods -w` shows Error
    let log = api
        .logs("burst", &LogParams::default())
        .await
        .expect("reading the log");
    let last = log.lines().last().unwrap_or_default().to_string();
    assert_eq!(
        last,
        "LAST",
        "the log read when the phase changed ends with the last line written ({} lines)",
        log.lines().count()
    );
    assert_eq!(log.lines().count(), 2001);
    let t = terminated(&failed).expect("a terminated state in the first Failed status");
    assert_eq!(t.exit_code, 3);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    // CRI's own view, once it caught up
    let id = t
        .container_id
        .as_deref()
        .and_then(|c| c.rsplit("://").next())
        .expect("a container id")
        .to_string();
    let cri = poll(
        Duration::from_secs(10),
        Duration::from_millis(100),
        "CRI shows the container exited",
        || {
            let out = crictl(&["inspect", "-o", "json", &id]);
            let v: serde_json::Value = serde_json::from_str(&out).ok()?;
            (v["status"]["state"] == "CONTAINER_EXITED").then_some(v)
        },
    )
    .await;
    assert_eq!(cri["status"]["exitCode"], 3);
    assert_eq!(cri["status"]["reason"], "Error");
    let finished: k8s_openapi::jiff::Timestamp = cri["status"]["finishedAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        t.finished_at.as_ref().map(|f| f.0.as_second()),
        Some(finished.as_second()),
        "finishedAt (the event's exited_at) is CRI's finishedAt"
    );
    // nothing changes once CRI catches up: the status stays as first written
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = api.get("burst").await.unwrap();
    assert_eq!(
        terminated(&now),
        Some(t),
        "the status written from the event stays"
    );
    ns.delete().await;
}
