//! End-to-end tests of node features the upstream conformance suite found missing (issue 13),
//! against the real local cluster (hack/local-up.sh): the kubelet's own admission (a host port
//! already taken), `activeDeadlineSeconds` set on a running pod, `status.observedGeneration`,
//! and the `FallbackToLogsOnError` termination message. Each mirrors what the Go kubelet shows
//! through the API and `kubectl get pods`.

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use std::time::Duration;

fn pod_from(json: serde_json::Value) -> Pod {
    serde_json::from_value(json).expect("a valid pod")
}

/// `kubectl get pod` STATUS column of one pod.
fn status_column(ns: &str, name: &str) -> String {
    let out = kubectl_raw(&["-n", ns, "get", "pod", name]);
    Table::parse(&out.stdout)
        .rows
        .first()
        .and_then(|r| r.get("STATUS").cloned())
        .unwrap_or_default()
}

fn with_host_port(name: &str, port: i32) -> Pod {
    pod_from(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "ports": [{"containerPort": 8080, "hostPort": port, "protocol": "TCP"}],
            }],
        },
    }))
}

/// k/k `lifecycle/predicate.go`: a pod bound to the node whose host port an admitted pod holds
/// is refused by the kubelet (no sandbox), phase Failed, reason `NodePorts`, a Warning event;
/// `kubectl get pods` shows `NodePorts`. Once the holder is gone a new pod with the port runs
/// (what the StatefulSet "recreate evicted" conformance test relies on).
#[tokio::test]
async fn a_pod_whose_host_port_is_taken_is_rejected_by_the_kubelet() {
    let client = client().await;
    let ns = TestNs::new(&client, "hostport").await;
    let api = ns.pods();
    let port = 31000 + (rand::random::<u16>() % 700) as i32;
    ns.create_pod(&with_host_port("holder", port)).await;
    wait_running(&api, "holder").await;
    ns.create_pod(&with_host_port("second", port)).await;
    let p = wait_pod(&api, "second", "phase Failed", |p| phase(p) == "Failed").await;
    let st = p.status.as_ref().unwrap();
    assert_eq!(st.reason.as_deref(), Some("NodePorts"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
    );
    assert!(
        sandboxes_of(&uid(&p)).is_empty(),
        "a rejected pod gets no sandbox"
    );
    assert_eq!(status_column(&ns.name, "second"), "NodePorts");
    // events are posted apart from the status, and may come after it
    wait_event_containing(
        &ns.name,
        "second",
        "Warning NodePorts: Predicate NodePorts failed",
    )
    .await;

    api.delete("holder", &Default::default()).await.unwrap();
    poll(
        Duration::from_secs(60),
        Duration::from_millis(500),
        "the holder is gone",
        || {
            (!kubectl_raw(&["-n", &ns.name, "get", "pod", "holder"])
                .status
                .success())
            .then_some(())
        },
    )
    .await;
    ns.create_pod(&with_host_port("third", port)).await;
    wait_running(&api, "third").await;
    ns.delete().await;
}

/// k/k `active_deadline.go` and the conformance test "should allow activeDeadlineSeconds to be
/// updated": a running pod given `activeDeadlineSeconds` by an update fails with reason
/// `DeadlineExceeded` once it has been active that long; `status.observedGeneration` and each
/// kubelet condition's `observedGeneration` follow the pod's `metadata.generation`.
#[tokio::test]
async fn active_deadline_set_on_a_running_pod_fails_it_and_generation_is_observed() {
    let client = client().await;
    let ns = TestNs::new(&client, "deadline").await;
    let api = ns.pods();
    ns.create_pod(&busybox_pod("deadline", "sleep 3600", "Always", Some(1)))
        .await;
    let p = wait_running(&api, "deadline").await;
    let generation = p.metadata.generation.expect("pods have a generation");
    let p = wait_pod(&api, "deadline", "observedGeneration", |p| {
        p.status.as_ref().and_then(|s| s.observed_generation) == Some(generation)
    })
    .await;
    for c in p.status.as_ref().unwrap().conditions.iter().flatten() {
        assert_eq!(
            c.observed_generation,
            Some(generation),
            "condition {}",
            c.type_
        );
    }
    let patched = api
        .patch(
            "deadline",
            &PatchParams::default(),
            &Patch::Strategic(serde_json::json!({"spec": {"activeDeadlineSeconds": 5}})),
        )
        .await
        .expect("activeDeadlineSeconds may be set on a running pod");
    let new_generation = patched.metadata.generation.unwrap();
    assert!(
        new_generation > generation,
        "a spec update bumps the generation"
    );
    let p = watch_pod_until(
        &api,
        "deadline",
        Duration::from_secs(60),
        "phase Failed",
        |p| phase(p) == "Failed",
    )
    .await;
    let st = p.status.as_ref().unwrap();
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was active on the node longer than the specified deadline")
    );
    assert_eq!(st.observed_generation, Some(new_generation));
    let c = container_status(&p, "main").unwrap();
    let t = c
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap_or_else(|| panic!("the container was killed: {c:?}"));
    // kubectl's STATUS column shows the last container's terminated reason over the pod's
    // (k/k printers.go printPod), with the Go kubelet as well: the killed container's `Error`.
    assert_eq!(
        status_column(&ns.name, "deadline"),
        t.reason.unwrap_or_default()
    );
    ns.delete().await;
}

/// k/k `readLastStringFromContainerLogs`: with `FallbackToLogsOnError` and an empty message
/// file, a failed container's message is its log tail as written: `echo -n DONE` gives `DONE`
/// (no newline added after a partial CRI log line), full lines keep theirs.
#[tokio::test]
async fn termination_message_from_logs_is_the_log_tail_as_written() {
    let client = client().await;
    let ns = TestNs::new(&client, "termlog").await;
    let api = ns.pods();
    for (name, script, want) in [
        ("partial", "echo -n DONE; exit 1", "DONE"),
        ("lines", "echo one; echo two; exit 2", "one\ntwo\n"),
    ] {
        let mut p = busybox_pod(name, script, "Never", Some(1));
        p.spec.as_mut().unwrap().containers[0].termination_message_policy =
            Some("FallbackToLogsOnError".into());
        ns.create_pod(&p).await;
        let p = wait_pod(&api, name, "phase Failed", |p| phase(p) == "Failed").await;
        let t = container_status(&p, "main")
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.terminated.clone())
            .expect("terminated");
        assert_eq!(t.message.as_deref(), Some(want), "{name}");
    }
    ns.delete().await;
}

/// HTTPS `httpGet` probes (the webhook and aggregated-API conformance tests' readiness probes):
/// the kubelet probes over TLS without verifying the certificate, as the Go prober does. The
/// HTTPS server here is the cluster's own API server (its certificate is signed by the cluster
/// CA, which the prober does not trust, so verification would fail): `/readyz` answers 200 to
/// anyone, so the pod becomes Ready; a path anonymous users may not read answers 403 (401 with
/// anonymous authentication off), so a pod
/// probing it never does, and its events say why as the Go kubelet words it. The probes name
/// their port, as kubeadm's CoreDNS manifest and many charts do.
#[tokio::test]
async fn https_probes_skip_certificate_verification() {
    let client = client().await;
    let ns = TestNs::new(&client, "httpsprobe").await;
    let api = ns.pods();
    let url = env().get("API_SERVER").to_string();
    let hostport = url.trim_start_matches("https://");
    let (host, port) = hostport
        .rsplit_once(':')
        .expect("API_SERVER is https://host:port");
    let port: i32 = port.parse().unwrap();
    let probed = |name: &str, path: &str| {
        pod_from(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": env().node_name(),
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                    // the probe names its port (k/k ResolveContainerPort)
                    "ports": [{"name": "apiserver", "containerPort": port}],
                    "readinessProbe": {
                        "httpGet": {"scheme": "HTTPS", "host": host, "port": "apiserver", "path": path},
                        "periodSeconds": 1, "failureThreshold": 1,
                    },
                }],
            },
        }))
    };
    ns.create_pod(&probed("ready", "/readyz")).await;
    ns.create_pod(&probed("forbidden", "/api/v1/secrets")).await;
    wait_running(&api, "ready").await;
    let uid_forbidden = uid(&api.get("forbidden").await.unwrap());
    let events = poll(
        Duration::from_secs(60),
        Duration::from_millis(500),
        "a readiness probe failure event on the pod probing a forbidden path",
        || {
            let out = event_lines(&ns.name, &format!("involvedObject.uid={uid_forbidden}"));
            out.contains("Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 40")
                .then_some(out)
        },
    )
    .await;
    assert!(!events.contains("certificate"), "{events}");
    let p = api.get("forbidden").await.unwrap();
    assert!(!container_status(&p, "main").unwrap().ready);
    ns.delete().await;
}
