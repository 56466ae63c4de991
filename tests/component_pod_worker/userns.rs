//! User namespaces (`spec.hostUsers: false`, issue 17): the user namespace option every sandbox
//! and container is created with, the Go kubelet's error when the runtime cannot give a pod its
//! own user namespace, and one range of host IDs per pod.

use super::harness::*;
use deckhand::cri::api;
use serde_json::json;
use std::time::Duration;

fn userns_of(ns: Option<&api::NamespaceOption>) -> Option<api::UserNamespace> {
    ns?.userns_options.clone()
}

fn userns_of_sandbox(cfg: &api::PodSandboxConfig) -> Option<api::UserNamespace> {
    userns_of(
        cfg.linux
            .as_ref()?
            .security_context
            .as_ref()?
            .namespace_options
            .as_ref(),
    )
}

fn userns_of_container(cfg: &api::ContainerConfig) -> Option<api::UserNamespace> {
    userns_of(
        cfg.linux
            .as_ref()?
            .security_context
            .as_ref()?
            .namespace_options
            .as_ref(),
    )
}

/// A pod that does not set `hostUsers` (or sets it true) runs in the host's user namespace: mode
/// NODE on its sandbox and container, as the Go kubelet sends since user namespaces went GA.
#[tokio::test(start_paused = true)]
async fn pods_keep_the_host_user_namespace_unless_they_ask() {
    let h = Harness::start(fake_runtime()).await;
    let a = pod("plain", "Always", json!({}));
    let b = pod("hostusers", "Always", json!({"hostUsers": true}));
    h.apply(&a).await;
    h.apply(&b).await;
    for name in ["plain", "hostusers"] {
        h.status_in_phase(name, "Running", Duration::from_secs(10))
            .await;
    }
    let node = Some(api::UserNamespace {
        mode: api::NamespaceMode::Node as i32,
        ..Default::default()
    });
    for s in h.runtime.sandboxes() {
        assert_eq!(userns_of_sandbox(&s.config), node, "{}", s.id);
    }
    for c in h.runtime.containers() {
        assert_eq!(userns_of_container(&c.config), node, "{}", c.id);
    }
    h.stop().await;
}

/// `hostUsers: false` on a runtime that lists no runtime handler with user namespace support
/// (containerd 1.6; 2.x with an old runc): no sandbox, a `FailedCreatePodSandBox` warning with
/// the Go kubelet's message, the container waiting in `ContainerCreating`. Once the runtime
/// supports them, the pod starts in its own user namespace: mode POD, one range of 65536 host
/// IDs mapped to 0, the same on the sandbox and the container. A second pod gets another range.
#[tokio::test(start_paused = true)]
async fn host_users_false_needs_the_runtime_and_gets_its_own_range() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("userns", "Always", json!({"hostUsers": false}));
    h.apply(&p).await;
    h.event_recorded("FailedCreatePodSandBox", Duration::from_secs(10))
        .await;
    assert_eq!(
        h.runtime.count("RunPodSandbox"),
        0,
        "no sandbox without support"
    );
    let st = h
        .status_in_phase("userns", "Pending", Duration::from_secs(5))
        .await;
    assert_eq!(
        h.waiting("userns", "main").map(|w| w.0).as_deref(),
        Some("ContainerCreating"),
        "{st}"
    );

    h.runtime.set_user_namespaces(Some(true));
    keep_poking(&h, &p, Duration::from_secs(20)).await;
    h.status_in_phase("userns", "Running", Duration::from_secs(30))
        .await;
    let sb = h.runtime.sandboxes().into_iter().next().unwrap();
    let userns = userns_of_sandbox(&sb.config).expect("a user namespace option");
    assert_eq!(userns.mode, api::NamespaceMode::Pod as i32);
    assert_eq!(userns.uids, userns.gids);
    assert_eq!(userns.uids.len(), 1);
    let m = &userns.uids[0];
    assert_eq!((m.container_id, m.length), (0, 65536));
    assert!(m.host_id >= 65536 && m.host_id % 65536 == 0, "{m:?}");
    let c = h.runtime.running("main").unwrap();
    assert_eq!(userns_of_container(&c.config), Some(userns.clone()));

    let q = pod("userns2", "Always", json!({"hostUsers": false}));
    h.apply(&q).await;
    h.status_in_phase("userns2", "Running", Duration::from_secs(10))
        .await;
    let other = h
        .runtime
        .sandboxes()
        .into_iter()
        .find(|s| s.config.metadata.as_ref().unwrap().name == "userns2")
        .unwrap();
    let other = userns_of_sandbox(&other.config).unwrap();
    assert_ne!(other.uids[0].host_id, m.host_id, "each pod its own range");
    h.stop().await;
}
