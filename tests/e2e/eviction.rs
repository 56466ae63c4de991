//! End-to-end test of node-pressure eviction (issue 7) against the real local cluster of
//! hack/local-up.sh, where deckhand's root directory is a 1 GiB tmpfs (the nodefs of eviction,
//! threshold `nodefs.available<10%`, pressure transition period 20 s).
//!
//! 1. A BestEffort pod fills its emptyDir until the scratch filesystem is past the threshold:
//!    the node reports DiskPressure, deckhand evicts that pod with the Go kubelet's reason,
//!    message and DisruptionTarget condition, and a Burstable pod within its ephemeral-storage
//!    request is left running; the evicted pod's emptyDir is freed, so the pressure clears.
//! 2. With the filesystem filled from the host (nothing evictable holds the space), a new pod
//!    bound to the node is refused at admission: `Pod was rejected: The node had condition:
//!    [DiskPressure]. `.
//!
//! This binary has one test, so cargo runs it alone (test binaries run one after another):
//! pressure on the node would otherwise refuse or evict the pods of tests running beside it.
//!
//! Run with `cargo test --profile ci --test e2e -- eviction:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Filling and pressure: eviction runs every 10 s, node status every 10 s.
const PRESSURE_TIMEOUT: Duration = Duration::from_secs(90);

fn root_dir() -> PathBuf {
    PathBuf::from(env().get("DECKHAND_ROOT_DIR"))
}

/// (available, capacity) bytes of the root dir's filesystem.
fn fs_space(p: &Path) -> (u64, u64) {
    let s = nix::sys::statvfs::statvfs(p).expect("statvfs of deckhand's root dir");
    let f = s.fragment_size() as u64;
    (s.blocks_available() as u64 * f, s.blocks() as u64 * f)
}

async fn node_condition(client: &kube::Client, type_: &str) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get(env().node_name()).await.expect("get node");
    n.status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == type_))
        .map(|c| format!("{}/{}", c.status, c.reason.unwrap_or_default()))
        .unwrap_or_default()
}

async fn wait_node_condition(client: &kube::Client, type_: &str, want: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let got = node_condition(client, type_).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {type_} is {got:?}, wanted {want:?} within {timeout:?}\n{}",
            deckhand_log_tail("eviction", 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A file on the scratch filesystem, removed when dropped (also when the test fails), so a
/// failed run never leaves the node under pressure.
struct HostFill(PathBuf);

impl HostFill {
    fn new(bytes: u64) -> HostFill {
        let p = root_dir().join("e2e-eviction-fill");
        let f = std::fs::File::create(&p).expect("creating the fill file");
        // write real pages (tmpfs counts written pages, not the file size)
        use std::io::Write;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let chunk = vec![0x5au8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            w.write_all(&chunk[..n])
                .expect("filling the scratch filesystem");
            left -= n as u64;
        }
        w.flush().unwrap();
        HostFill(p)
    }
}

impl Drop for HostFill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn pod_json(name: &str, resources: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "echo started; exec sleep 3600"],
                "resources": resources,
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn disk_pressure_evicts_a_best_effort_pod_and_refuses_new_pods() {
    let client = client().await;
    let root = root_dir();
    let (avail, cap) = fs_space(&root);
    println!(
        "nodefs {}: {} MiB available of {} MiB",
        root.display(),
        avail >> 20,
        cap >> 20
    );
    assert!(
        cap <= 8 << 30,
        "deckhand's root dir {} is not the scratch tmpfs local-up mounts ({} MiB): refusing to fill it",
        root.display(),
        cap >> 20
    );
    wait_node_condition(
        &client,
        "DiskPressure",
        "False/KubeletHasNoDiskPressure",
        PRESSURE_TIMEOUT,
    )
    .await;

    let ns = TestNs::new(&client, "evict").await;
    let pods = ns.pods();
    // BestEffort: no requests, fills its emptyDir
    ns.create_pod(&pod_json("filler", serde_json::json!({})))
        .await;
    // Burstable, within its ephemeral-storage request: must not be chosen
    ns.create_pod(&pod_json(
        "bystander",
        serde_json::json!({"requests": {"cpu": "10m", "memory": "16Mi", "ephemeral-storage": "50Mi"}}),
    ))
    .await;
    wait_running(&pods, "filler").await;
    wait_running(&pods, "bystander").await;

    // 1. the pod fills the scratch filesystem to half the threshold's distance from empty
    let (avail, cap) = fs_space(&root);
    let threshold = (cap as f64 * 0.1f32 as f64) as u64;
    let fill_mib = (avail - threshold / 2) >> 20;
    println!(
        "filling {fill_mib} MiB from pod filler (threshold {} MiB)",
        threshold >> 20
    );
    let t0 = Instant::now();
    // dd may be killed by the eviction itself before kubectl returns: ignore its outcome
    let out = kubectl_raw(&[
        "-n",
        &ns.name,
        "exec",
        "filler",
        "--",
        "dd",
        "if=/dev/zero",
        "of=/scratch/fill",
        "bs=1048576",
        &format!("count={fill_mib}"),
    ]);
    println!("dd: {}", out.stderr.lines().last().unwrap_or(""));

    let evicted = watch_pod_until(
        &pods,
        "filler",
        PRESSURE_TIMEOUT,
        "eviction (Failed/Evicted)",
        |p| {
            phase(p) == "Failed"
                && p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
        },
    )
    .await;
    println!("filler evicted {:?} after the fill started", t0.elapsed());
    let st = evicted.status.clone().unwrap();
    let msg = st.message.clone().unwrap_or_default();
    println!("message: {msg}");
    assert!(
        msg.starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: "),
        "{msg}"
    );
    assert!(msg.contains(", available: "), "{msg}");
    assert!(
        msg.contains("Container main was using ")
            && msg.ends_with("request is 0, has larger consumption of ephemeral-storage. "),
        "{msg}"
    );
    let dt = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
        .expect("a DisruptionTarget condition");
    assert_eq!(dt.status, "True");
    assert_eq!(dt.reason.as_deref(), Some("TerminationByKubelet"));
    // the node went into DiskPressure (it may already be clearing: 20 s transition period)
    // events are posted apart from the status, and may come after it
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let deadline = Instant::now() + Duration::from_secs(30);
    let ev = loop {
        let evs = events.list(&ListParams::default()).await.unwrap();
        if let Some(ev) = evs
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("Evicted"))
        {
            break ev;
        }
        assert!(Instant::now() < deadline, "no Evicted event on the pod");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(ev.message.as_deref(), Some(msg.as_str()));
    // the node events: EvictionThresholdMet, and NodeHasDiskPressure once the node status
    // loop (every 10 s) has reported the condition
    let node_events = || async {
        let api: Api<Event> = Api::namespaced(client.clone(), "default");
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Node")
                    && e.involved_object.name.as_deref() == Some(env().node_name())
            })
            .filter_map(|e| Some(format!("{}: {}", e.reason?, e.message.unwrap_or_default())))
            .collect::<Vec<String>>()
    };
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let reasons = node_events().await;
        let met = reasons
            .iter()
            .any(|r| r == "EvictionThresholdMet: Attempting to reclaim ephemeral-storage");
        let pressure = reasons.iter().any(|r| {
            r.as_str()
                == format!(
                    "NodeHasDiskPressure: Node {} status is now: NodeHasDiskPressure",
                    env().node_name()
                )
        });
        if met && pressure {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node events (last 10): {:?}",
            &reasons[reasons.len().saturating_sub(10)..]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // the bystander within its request kept running
    let b = pods.get("bystander").await.unwrap();
    assert_eq!(
        phase(&b),
        "Running",
        "the Burstable pod within its request was evicted"
    );
    // the evicted pod's emptyDir is gone: the space came back
    let (avail_after, _) = fs_space(&root);
    assert!(
        avail_after > threshold,
        "after the eviction only {} MiB are free",
        avail_after >> 20
    );
    let table = kubectl(&["-n", &ns.name, "get", "pod", "filler", "--no-headers"]);
    println!("kubectl get pod filler: {table}");
    assert!(
        table.contains("Error") || table.contains("Evicted"),
        "{table}"
    );
    wait_node_condition(
        &client,
        "DiskPressure",
        "False/KubeletHasNoDiskPressure",
        PRESSURE_TIMEOUT,
    )
    .await;

    // 2. filled from the host: new pods are refused while the pressure lasts
    pods.delete("bystander", &DeleteParams::default())
        .await
        .unwrap();
    let (avail, _) = fs_space(&root);
    let fill = HostFill::new(avail - threshold / 2);
    wait_node_condition(
        &client,
        "DiskPressure",
        "True/KubeletHasDiskPressure",
        PRESSURE_TIMEOUT,
    )
    .await;
    ns.create_pod(&pod_json("late", serde_json::json!({})))
        .await;
    let late = watch_pod_until(
        &pods,
        "late",
        Duration::from_secs(60),
        "rejection at admission",
        |p| phase(p) == "Failed",
    )
    .await;
    let st = late.status.clone().unwrap();
    assert_eq!(st.reason.as_deref(), Some("Evicted"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: The node had condition: [DiskPressure]. ")
    );
    assert!(
        st.container_statuses.is_none(),
        "a rejected pod never ran: {:?}",
        st.container_statuses
    );
    assert!(
        sandboxes_of(&uid(&late)).is_empty(),
        "a rejected pod got a sandbox"
    );
    drop(fill);
    wait_node_condition(
        &client,
        "DiskPressure",
        "False/KubeletHasNoDiskPressure",
        PRESSURE_TIMEOUT,
    )
    .await;
    ns.delete().await;
}
