//! End-to-end: deckhand through a one-minute API server outage (issue 11 item 1), against the
//! real local cluster. The API server is stopped with `hack/local-up.sh stop-apiserver` and
//! started again with `start-apiserver`; everything else keeps running. This module holds one
//! test so that nothing else runs while the API server is away.

use crate::common::{self, *};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use std::time::{Duration, Instant};

const OUTAGE: Duration = Duration::from_secs(60);

/// Starts the API server again however the test ends, so later tests find the cluster up.
struct RestartOnDrop(bool);

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if self.0 {
            local_up(&["start-apiserver"]);
        }
    }
}

/// The newest attempt number among the pod's containers in containerd.
fn newest_attempt(uid: &str) -> u64 {
    let out = crictl(&[
        "ps",
        "-a",
        "--label",
        &format!("io.kubernetes.pod.uid={uid}"),
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("crictl ps -o json");
    v["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["metadata"]["attempt"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Stop the API server and etcd for 60 s and start them again: deckhand keeps the pods running
/// and stays the same process, keeps restarting a crash-looping container meanwhile (its
/// projected service-account volume cannot be refreshed: the start goes ahead with it as it is),
/// reports a container exit that happened during the outage, posts Ready
/// again within 20 s even after the node lifecycle controller's `Unknown`, renews its Lease,
/// and runs a pod created afterwards.
#[tokio::test]
async fn deckhand_recovers_from_a_one_minute_api_server_outage() {
    let client = client().await;
    let ns = TestNs::new(&client, "outage").await;
    let api = ns.pods();
    ns.create_pod(&busybox_pod("steady", "exec sleep 3600", "Always", Some(1)))
        .await;
    ns.create_pod(&busybox_pod("exiter", "sleep 20; exit 3", "Never", Some(1)))
        .await;
    let crasher = ns
        .create_pod(&busybox_pod(
            "crasher",
            "sleep 1; exit 1",
            "Always",
            Some(0),
        ))
        .await;
    let steady = wait_running(&api, "steady").await;
    let steady_id = container_status(&steady, "main")
        .and_then(|c| c.container_id.clone())
        .unwrap();
    wait_running(&api, "exiter").await;
    let pid = deckhand_pid();

    let crasher_uid = uid(&crasher);
    let attempt_before = newest_attempt(&crasher_uid);
    local_up(&["stop-apiserver", "--etcd"]);
    let mut guard = RestartOnDrop(true);
    let stopped = Instant::now();
    println!("API server stopped; waiting {OUTAGE:?}");
    tokio::time::sleep(OUTAGE).await;
    let attempt_after = newest_attempt(&crasher_uid);
    local_up(&["start-apiserver"]);
    guard.0 = false;
    let back = Instant::now();
    println!("API server back after {:?}", stopped.elapsed());
    assert!(
        process_alive(pid),
        "deckhand (pid {pid}) did not survive the outage"
    );
    assert_eq!(deckhand_pid(), pid, "deckhand was not restarted");
    println!("crash-looping container: attempt {attempt_before} before the outage, {attempt_after} at its end");
    assert!(
        attempt_after > attempt_before,
        "the crash-looping container was not restarted during the {OUTAGE:?} outage (attempt {attempt_before})"
    );

    // The node lifecycle controller marks a node that stopped posting status Unknown; whether
    // its check ran during this outage is a race, so set it the way the controller does and
    // see deckhand put Ready back (the bug: it never did, its own last write looked current).
    let client = common::client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let unknown = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }]}});
    nodes
        .patch_status(
            env().node_name(),
            &PatchParams::default(),
            &Patch::Strategic(&unknown),
        )
        .await
        .expect("marking the node Unknown as the node lifecycle controller does");
    let marked = Instant::now();
    wait_node_ready(&client, Duration::from_secs(20)).await;
    println!(
        "node Ready again {:?} after it was marked Unknown ({:?} after the API server was back)",
        marked.elapsed(),
        back.elapsed()
    );

    // the Lease is renewed again
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let renewed = leases
            .get(env().node_name())
            .await
            .ok()
            .and_then(|l| l.spec?.renew_time)
            .map(|t| {
                k8s_openapi::jiff::Timestamp::now()
                    .duration_since(t.0)
                    .as_secs()
            });
        if renewed.is_some_and(|age| age < 15) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node Lease was not renewed after the outage ({renewed:?} s old)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // the exit that happened while the API server was away is reported
    let api = kube::Api::namespaced(client.clone(), &ns.name);
    let exited = watch_pod_until(
        &api,
        "exiter",
        Duration::from_secs(30),
        "Failed with exit code 3",
        |p| phase(p) == "Failed",
    )
    .await;
    let code = container_status(&exited, "main")
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(code, Some(3));

    // the steady pod kept its container
    let steady = api.get("steady").await.unwrap();
    let cs = container_status(&steady, "main").unwrap();
    assert_eq!(cs.container_id.as_deref(), Some(steady_id.as_str()));
    assert_eq!(cs.restart_count, 0);
    assert!(cs.ready);

    // and a pod created now runs
    let ns_api: Api<k8s_openapi::api::core::v1::Pod> = api.clone();
    ns_api
        .create(
            &Default::default(),
            &busybox_pod("after", "exec sleep 3600", "Always", Some(1)),
        )
        .await
        .expect("creating a pod after the outage");
    wait_running(&ns_api, "after").await;
    ns.delete().await;

    // The next test module finds a control plane that has caught up: kube-controller-manager's
    // informers can take over a minute to relist after the API server and etcd came back (a
    // README command 2 run saw four namespaces of the next file wait 60 s for their default
    // ServiceAccount). Wait, up to 3 minutes, until it makes one for a new namespace.
    let since = Instant::now();
    let probe = TestNs::new_within(&client, "outage-kcm", Duration::from_secs(180)).await;
    println!(
        "kube-controller-manager made a new namespace's ServiceAccount {:?} after the outage test's checks",
        since.elapsed()
    );
    probe.delete().await;
}
