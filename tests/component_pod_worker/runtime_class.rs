//! RuntimeClass (k/k `pkg/kubelet/runtimeclass`): a pod that names one gets its sandbox from the
//! RuntimeClass's handler; a RuntimeClass that does not exist, or a handler the runtime does not
//! have, leaves the pod `ContainerCreating` with a `FailedCreatePodSandBox` warning, and the pod
//! starts once the RuntimeClass appears.

use super::harness::*;
use serde_json::json;
use std::time::Duration;

fn runtime_class(h: &Harness, name: &str, handler: &str) {
    h.api.lock().unwrap().runtime_classes.insert(
        name.into(),
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": name}, "handler": handler}),
    );
}

async fn sandbox_failure(h: &Harness, name: &str) {
    h.event_recorded("FailedCreatePodSandBox", Duration::from_secs(10))
        .await;
    h.status_in_phase(name, "Pending", Duration::from_secs(5))
        .await;
    assert_eq!(
        h.waiting(name, "main").map(|w| w.0).as_deref(),
        Some("ContainerCreating")
    );
}

/// Without `runtimeClassName` the sandbox gets the default handler; with one, its handler.
#[tokio::test(start_paused = true)]
async fn the_sandbox_is_made_with_the_runtime_class_handler() {
    let h = Harness::start(fake_runtime()).await;
    runtime_class(&h, "plain", "runc");
    let a = pod("default-handler", "Always", json!({}));
    let b = pod(
        "runc-handler",
        "Always",
        json!({"runtimeClassName": "plain"}),
    );
    h.apply(&a).await;
    h.apply(&b).await;
    h.status_in_phase("default-handler", "Running", Duration::from_secs(10))
        .await;
    h.status_in_phase("runc-handler", "Running", Duration::from_secs(10))
        .await;
    let handler_of = |uid: &str| {
        h.runtime
            .sandboxes()
            .into_iter()
            .find(|s| s.config.metadata.as_ref().is_some_and(|m| m.uid == uid))
            .map(|s| s.runtime_handler)
    };
    assert_eq!(handler_of("uid-default-handler").as_deref(), Some(""));
    assert_eq!(handler_of("uid-runc-handler").as_deref(), Some("runc"));
    h.stop().await;
}

/// A RuntimeClass that does not exist: no sandbox, the Go kubelet's warning; once it is
/// created, the pod runs with its handler.
#[tokio::test(start_paused = true)]
async fn a_missing_runtime_class_holds_the_pod_until_it_exists() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("later", "Always", json!({"runtimeClassName": "late"}));
    h.apply(&p).await;
    sandbox_failure(&h, "later").await;
    assert_eq!(h.runtime.count("RunPodSandbox"), 0);
    runtime_class(&h, "late", "runc");
    keep_poking(&h, &p, Duration::from_secs(20)).await;
    h.status_in_phase("later", "Running", Duration::from_secs(30))
        .await;
    assert_eq!(h.runtime.sandboxes()[0].runtime_handler, "runc");
    h.stop().await;
}

/// A handler the runtime has not configured: the runtime refuses the sandbox, and the pod waits
/// with the warning.
#[tokio::test(start_paused = true)]
async fn a_handler_the_runtime_lacks_fails_the_sandbox() {
    let h = Harness::start(fake_runtime()).await;
    runtime_class(&h, "exotic", "kata");
    let p = pod("exotic", "Always", json!({"runtimeClassName": "exotic"}));
    h.apply(&p).await;
    sandbox_failure(&h, "exotic").await;
    assert!(h.runtime.sandboxes().is_empty());
    h.stop().await;
}
