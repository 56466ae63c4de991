//! End-to-end test of user namespaces (`spec.hostUsers: false`, KEP-127, GA in 1.36; issue 17)
//! against the real local cluster of hack/local-up.sh.
//!
//! - On containerd 2.x (`CONTAINERD=2`, which runs a runc with idmapped mounts built by
//!   hack/build-containerd.sh) the Node lists the default runtime handler with
//!   `userNamespaces: true`; a `hostUsers: false` pod runs in a user namespace of its own (its
//!   uid_map maps 0 to a range of 65536 host IDs from 65536 up, not the host's `0 0 4294967295`),
//!   its configMap volume's files still belong to root inside (the runtime's idmapped mount), and
//!   a second such pod gets another range.
//! - On Debian's containerd 1.6, which lists no runtime handler, the pod stays Pending with the
//!   Go kubelet's `FailedCreatePodSandBox` message and no sandbox is made.
//! - Either way a pod without `hostUsers` runs in the host's user namespace, and the Go
//!   kubelet's `kubelet_started_user_namespaced_pods_total` counts the attempts.
//!
//! Run with `cargo test --profile ci --test e2e -- userns:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, PostParams};

fn userns_pod(name: &str, host_users: Option<bool>) -> Pod {
    let mut spec = serde_json::json!({
        "nodeName": env().node_name(),
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "main",
            "image": "busybox",
            "command": ["sh", "-c", "sleep 3600"],
            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}],
        }],
        "volumes": [{"name": "cfg", "configMap": {"name": "userns-cfg"}}],
    });
    if let Some(h) = host_users {
        spec["hostUsers"] = serde_json::json!(h);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "deckhand-e2e"}},
        "spec": spec,
    }))
    .expect("a valid pod")
}

fn exec(ns: &str, name: &str, script: &str) -> String {
    let out = kubectl_raw(&[
        "-n", ns, "exec", name, "-c", "main", "--", "sh", "-c", script,
    ]);
    assert!(
        out.status.success(),
        "exec {script:?} in {name}: {} {}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// The one line of /proc/self/uid_map as (inside, host, length).
fn uid_map(ns: &str, name: &str) -> (u64, u64, u64) {
    let text = exec(ns, name, "cat /proc/self/uid_map");
    let fields: Vec<u64> = text
        .split_whitespace()
        .map(|f| f.parse().expect("numbers"))
        .collect();
    assert_eq!(fields.len(), 3, "one mapping: {text:?}");
    (fields[0], fields[1], fields[2])
}

fn started_user_namespaced_pods() -> f64 {
    let path = format!("/api/v1/nodes/{}/proxy/metrics", env().node_name());
    let text = kubectl(&["get", "--raw", &path]);
    text.lines()
        .find_map(|l| l.strip_prefix("kubelet_started_user_namespaced_pods_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no kubelet_started_user_namespaced_pods_total in /metrics"))
}

#[tokio::test]
async fn host_users_false_gets_its_own_user_namespace_where_the_runtime_can() {
    let client = client().await;
    let ns = TestNs::new(&client, "userns").await;
    let api = ns.pods();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "userns-cfg"},
        "data": {"key": "value"},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let started_before = started_user_namespaced_pods();

    // without hostUsers: the host's user namespace, on either runtime
    ns.create_pod(&userns_pod("host", None)).await;
    wait_running(&api, "host").await;
    assert_eq!(uid_map(&ns.name, "host"), (0, 0, 4294967295));

    let node: Node = Api::all(client.clone())
        .get(env().node_name())
        .await
        .unwrap();
    let handlers = node
        .status
        .as_ref()
        .and_then(|s| s.runtime_handlers.clone())
        .unwrap_or_default();

    ns.create_pod(&userns_pod("own", Some(false))).await;
    if env().containerd_mode() == "2" {
        let default = handlers
            .iter()
            .find(|h| h.name.as_deref() == Some(""))
            .unwrap_or_else(|| panic!("the default runtime handler on the Node: {handlers:?}"));
        assert_eq!(
            default.features.as_ref().and_then(|f| f.user_namespaces),
            Some(true),
            "{handlers:?}"
        );
        wait_running(&api, "own").await;
        let (inside, host, len) = uid_map(&ns.name, "own");
        assert_eq!((inside, len), (0, 65536), "0 mapped, 65536 IDs");
        assert!(
            host >= 65536 && host % 65536 == 0,
            "a range of its own, not the host's IDs: {host}"
        );
        // the configMap volume's files belong to root inside (an idmapped mount), not to
        // the overflow user 65534
        assert_eq!(
            exec(&ns.name, "own", "stat -L -c %u:%g /cfg/key; cat /cfg/key").trim(),
            "0:0\nvalue"
        );
        ns.create_pod(&userns_pod("own2", Some(false))).await;
        wait_running(&api, "own2").await;
        let (_, host2, _) = uid_map(&ns.name, "own2");
        assert_ne!(host2, host, "each pod its own range");
        assert!(started_user_namespaced_pods() >= started_before + 2.0);
    } else {
        assert!(
            handlers.is_empty(),
            "containerd 1.6 lists no runtime handler: {handlers:?}"
        );
        let want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces";
        let events = wait_event_containing(&ns.name, "own", want).await;
        assert!(
            events.contains("Warning FailedCreatePodSandBox"),
            "{events}"
        );
        let p = api.get("own").await.unwrap();
        assert_eq!(phase(&p), "Pending", "{}", diagnose(&ns.name, "own"));
        assert_eq!(
            waiting_reason(&p, "main"),
            Some("ContainerCreating"),
            "{}",
            diagnose(&ns.name, "own")
        );
        assert!(sandboxes_of(&uid(&p)).is_empty(), "no sandbox is made");
        assert!(started_user_namespaced_pods() >= started_before + 1.0);
    }
    ns.delete().await;
}
