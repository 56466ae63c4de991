//! End-to-end tests of deckhand against the local cluster of hack/local-up.sh (real etcd,
//! kube-apiserver, kube-controller-manager, containerd). Run with
//! `cargo test --profile ci --test e2e -- basics:: --nocapture` after `hack/local-up.sh`.
//!
//! Every test works in its own namespace `e2e-<test>-<random>` (so the tests run in parallel)
//! and deletes it at the end. The restart test SIGKILLs deckhand and starts it again; it holds
//! `common::DECKHAND_DISRUPTION` for writing, the lease test holds it for reading, and the other
//! tests ride out a few seconds of deckhand downtime with their generous timeouts.

use crate::common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

fn terminated_of(pod: &Pod) -> Option<(i32, String)> {
    let t = container_status(pod, "main")?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

/// Test 1: a pod runs, gets an IP of the pod network, reports a correct Running status, and its
/// first output line is in the CRI log file in CRI format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_runs_with_ip_and_cri_log() {
    let env = env();
    let client = client().await;
    let ns = TestNs::new(&client, "run").await;
    let pods = ns.pods();
    let t0 = Instant::now();
    ns.create_pod(&busybox_pod(
        "logger",
        "echo first-line; echo second-line; exec sleep 3600",
        "Always",
        Some(2),
    ))
    .await;
    let pod = wait_running(&pods, "logger").await;
    println!("[{}] logger Running after {:?}", ns.name, t0.elapsed());
    let diag = || diagnose(&ns.name, "logger");

    // The pod IP is in the node's pod CIDR 10.244.0.0/24 (not the network or gateway address).
    let ip_s = pod_ip(&pod);
    let ip: Ipv4Addr = ip_s
        .parse()
        .unwrap_or_else(|e| panic!("pod IP {ip_s:?} is not an IPv4 address ({e})\n{}", diag()));
    let o = ip.octets();
    assert!(
        o[0] == 10 && o[1] == 244 && o[2] == 0 && o[3] > 1 && o[3] < 255,
        "pod IP {ip} is not a host address in 10.244.0.0/24\n{}",
        diag()
    );
    let st = pod.status.as_ref().unwrap();
    let pod_ips: Vec<&str> = st.pod_ips.iter().flatten().map(|p| p.ip.as_str()).collect();
    assert_eq!(pod_ips, vec![ip_s.as_str()], "status.podIPs\n{}", diag());
    assert_eq!(
        st.host_ip.as_deref(),
        Some(env.node_ip()),
        "status.hostIP\n{}",
        diag()
    );
    assert!(
        st.start_time.is_some(),
        "status.startTime is unset\n{}",
        diag()
    );
    assert_eq!(
        st.qos_class.as_deref(),
        Some("BestEffort"),
        "status.qosClass"
    );
    for c in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(
            condition(&pod, c),
            Some("True"),
            "condition {c}\n{}",
            diag()
        );
    }
    let cs = container_status(&pod, "main").unwrap();
    assert_eq!(cs.restart_count, 0, "restartCount\n{}", diag());
    assert_eq!(cs.started, Some(true), "started\n{}", diag());
    assert!(
        cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some(),
        "container main is not running\n{}",
        diag()
    );
    let cid = cs.container_id.clone().unwrap_or_default();
    assert!(
        cid.starts_with("containerd://") && cid.len() > 20,
        "containerID {cid:?}"
    );
    assert!(!cs.image_id.is_empty(), "imageID is empty\n{}", diag());

    // The CRI log file holds the output, first line first, in CRI format.
    let path = cri_log_path(&pod, "main", 0);
    let lines = wait_log_message(&path, "second-line", Duration::from_secs(30)).await;
    let first = &lines[0];
    assert_eq!(
        (
            first.stream.as_str(),
            first.tag.as_str(),
            first.message.as_str()
        ),
        ("stdout", "F", "first-line"),
        "first line of {}: {:?}",
        path.display(),
        first.raw
    );
    chrono::DateTime::parse_from_rfc3339(&first.timestamp).unwrap_or_else(|e| {
        panic!(
            "timestamp {:?} of {:?} is not RFC 3339: {e}",
            first.timestamp, first.raw
        )
    });
    println!("[{}] {}: {:?}", ns.name, path.display(), first.raw);
    ns.delete().await;
}

/// Test 2: restartPolicy Never: exit 0 → Succeeded/Completed/0, exit 3 → Failed/Error/3, and
/// neither container is started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_restart_exit_codes() {
    let client = client().await;
    let ns = TestNs::new(&client, "exit").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod("exit0", "echo bye; exit 0", "Never", Some(2)))
        .await;
    ns.create_pod(&busybox_pod("exit3", "echo bye; exit 3", "Never", Some(2)))
        .await;
    for (name, want_phase, want_reason, want_code) in [
        ("exit0", "Succeeded", "Completed", 0),
        ("exit3", "Failed", "Error", 3),
    ] {
        let pod = wait_pod(&pods, name, &format!("phase {want_phase}"), |p| {
            matches!(phase(p), "Succeeded" | "Failed") && terminated_of(p).is_some()
        })
        .await;
        let diag = || diagnose(&ns.name, name);
        assert_eq!(phase(&pod), want_phase, "phase of {name}\n{}", diag());
        assert_eq!(
            terminated_of(&pod),
            Some((want_code, want_reason.to_string())),
            "terminated state of {name}\n{}",
            diag()
        );
        let cs = container_status(&pod, "main").unwrap();
        assert_eq!(cs.restart_count, 0, "restartCount of {name}");
        assert!(!cs.ready, "container of {name} is ready");
        let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert!(
            t.started_at.is_some() && t.finished_at.is_some(),
            "startedAt/finishedAt of {name}: {t:?}"
        );
        assert!(
            t.container_id
                .as_deref()
                .is_some_and(|c| c.starts_with("containerd://")),
            "terminated.containerID of {name}: {t:?}"
        );
        assert_eq!(condition(&pod, "Ready"), Some("False"), "Ready of {name}");
    }
    // A terminal pod is never restarted: still one container each a little later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for name in ["exit0", "exit3"] {
        let pod = pods.get(name).await.unwrap();
        let containers = containers_of(&uid(&pod));
        assert_eq!(
            containers.len(),
            1,
            "pod {name} (restartPolicy Never) has {} containers in the runtime\n{}",
            containers.len(),
            diagnose(&ns.name, name)
        );
        assert_eq!(container_status(&pod, "main").unwrap().restart_count, 0);
    }
    ns.delete().await;
}

fn os_release_pretty_name() -> String {
    let text = std::fs::read_to_string("/etc/os-release").expect("/etc/os-release");
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("PRETTY_NAME in /etc/os-release")
}

fn uname_r() -> String {
    let out = std::process::Command::new("uname")
        .arg("-r")
        .output()
        .expect("uname -r");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Test 3: `kubectl get pods -o wide` and `kubectl get nodes -o wide`, read as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_wide_text() {
    let env = env();
    let client = client().await;
    let ns = TestNs::new(&client, "wide").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod("runner", "exec sleep 3600", "Always", Some(2)))
        .await;
    ns.create_pod(&busybox_pod("done", "exit 0", "Never", Some(2)))
        .await;
    ns.create_pod(&busybox_pod("broken", "exit 3", "Never", Some(2)))
        .await;
    let runner = wait_running(&pods, "runner").await;
    for name in ["done", "broken"] {
        wait_pod(&pods, name, "a terminal phase", |p| {
            matches!(phase(p), "Succeeded" | "Failed")
        })
        .await;
    }

    let text = kubectl(&["-n", &ns.name, "get", "pods", "-o", "wide"]);
    println!("[{}] kubectl get pods -o wide:\n{text}", ns.name);
    let t = Table::parse(&text);
    let r = t.row("runner");
    let expect = |row: &std::collections::BTreeMap<String, String>, col: &str, want: &str| {
        assert_eq!(
            row.get(col).map(String::as_str),
            Some(want),
            "column {col} in:\n{text}"
        );
    };
    expect(r, "READY", "1/1");
    expect(r, "STATUS", "Running");
    expect(r, "RESTARTS", "0");
    expect(r, "IP", &pod_ip(&runner));
    expect(r, "NODE", env.node_name());
    let d = t.row("done");
    expect(d, "READY", "0/1");
    expect(d, "STATUS", "Completed");
    expect(d, "RESTARTS", "0");
    expect(d, "NODE", env.node_name());
    let b = t.row("broken");
    expect(b, "READY", "0/1");
    expect(b, "STATUS", "Error");
    expect(b, "RESTARTS", "0");
    expect(b, "NODE", env.node_name());

    let text = kubectl(&["get", "nodes", "-o", "wide"]);
    println!("kubectl get nodes -o wide:\n{text}");
    let t = Table::parse(&text);
    let n = t.row(env.node_name());
    let col = |c: &str| {
        n.get(c)
            .cloned()
            .unwrap_or_else(|| panic!("no column {c} in:\n{text}"))
    };
    assert_eq!(col("STATUS"), "Ready", "node STATUS in:\n{text}");
    assert!(
        col("VERSION").starts_with("v1.36.3"),
        "node VERSION in:\n{text}"
    );
    assert_eq!(env.node_ip(), "10.250.0.1", "NODE_IP of the env file");
    assert_eq!(
        col("INTERNAL-IP"),
        "10.250.0.1",
        "node INTERNAL-IP in:\n{text}"
    );
    assert_eq!(
        col("OS-IMAGE"),
        os_release_pretty_name(),
        "node OS-IMAGE in:\n{text}"
    );
    let kernel = uname_r();
    assert!(
        col("KERNEL-VERSION").starts_with(&kernel),
        "node KERNEL-VERSION does not start with `uname -r` ({kernel}) in:\n{text}"
    );
    let runtime = env.container_runtime_shown();
    assert!(
        col("CONTAINER-RUNTIME").starts_with(&runtime),
        "node CONTAINER-RUNTIME (want {runtime}) in:\n{text}"
    );
    ns.delete().await;
}

/// Test 4: `kubectl delete pod` with the default grace period (30 s) of a container that exits
/// on SIGTERM returns quickly, the container exits through its TERM trap (exit code 0, not a
/// SIGKILL), and the sandbox and containers are then removed from containerd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_delete_removes_pod_from_runtime() {
    let client = client().await;
    let ns = TestNs::new(&client, "delete").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "trapper",
        "trap 'echo got-TERM; exit 0' TERM; echo trap-set; while true; do sleep 1; done",
        "Always",
        None,
    ))
    .await;
    let pod = wait_running(&pods, "trapper").await;
    let pod_uid = uid(&pod);
    let log = cri_log_path(&pod, "main", 0);
    wait_log_message(&log, "trap-set", Duration::from_secs(30)).await;
    assert_eq!(
        sandboxes_of(&pod_uid).len(),
        1,
        "sandboxes before the delete"
    );

    // Watch the pod through its deletion: the last status deckhand writes before removing the
    // object must show the container's exit through the trap.
    let rv = pod.metadata.resource_version.clone().unwrap();
    let wp = WatchParams::default()
        .fields("metadata.name=trapper")
        .timeout(120);
    let watch_api = pods.clone();
    let watch = tokio::spawn(async move {
        use futures::StreamExt;
        let mut last_terminated = None;
        let mut deleted = false;
        let stream = watch_api.watch(&wp, &rv).await.expect("watching the pod");
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(WatchEvent::Modified(p)) => {
                    if let Some(t) = terminated_of(&p) {
                        last_terminated = Some(t);
                    }
                }
                Ok(WatchEvent::Deleted(p)) => {
                    if let Some(t) = terminated_of(&p) {
                        last_terminated = Some(t);
                    }
                    deleted = true;
                    break;
                }
                _ => {}
            }
        }
        (last_terminated, deleted)
    });

    let t0 = Instant::now();
    let name = ns.name.clone();
    let out = tokio::task::spawn_blocking(move || {
        kubectl_raw(&["-n", &name, "delete", "pod", "trapper", "--timeout=60s"])
    })
    .await
    .unwrap();
    let took = t0.elapsed();
    println!("[{}] kubectl delete pod trapper took {took:?}", ns.name);
    assert!(
        out.status.success(),
        "kubectl delete pod failed: {}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        took < Duration::from_secs(15),
        "kubectl delete pod took {took:?}; the container traps TERM and exits within ~1 s, the grace period is 30 s"
    );
    let (last_terminated, deleted) = tokio::time::timeout(Duration::from_secs(30), watch)
        .await
        .expect("the watch did not see the deletion")
        .unwrap();
    assert!(deleted, "the watch ended without a Deleted event");
    assert_eq!(
        last_terminated,
        Some((0, "Completed".to_string())),
        "the container's final state before deletion (exit code 0 = exited through the TERM trap; 137 = SIGKILL)"
    );
    assert!(
        pods.get_opt("trapper").await.unwrap().is_none(),
        "the pod object still exists after kubectl delete returned"
    );

    // The runtime is cleaned up right after the object is gone.
    poll_with(
        Duration::from_secs(30),
        Duration::from_millis(500),
        || {
            format!(
                "sandboxes/containers of pod {pod_uid} still in containerd; deckhand log:\n{}",
                deckhand_log_tail(&pod_uid, 20)
            )
        },
        || (sandboxes_of(&pod_uid).is_empty() && containers_of(&pod_uid).is_empty()).then_some(()),
    )
    .await;
    let log_dir = log.parent().unwrap().parent().unwrap().to_path_buf();
    poll_with(
        Duration::from_secs(30),
        Duration::from_millis(500),
        || format!("pod log directory {} still exists", log_dir.display()),
        || (!log_dir.exists()).then_some(()),
    )
    .await;
    ns.delete().await;
}

/// Test 5: deckhand killed with SIGKILL and started again adopts a running pod: same container,
/// no restart, no second sandbox; the node stays Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_adopts_running_pod() {
    let client = client().await;
    let ns = TestNs::new(&client, "adopt").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "survivor",
        "exec sleep 3600",
        "Always",
        Some(2),
    ))
    .await;
    let pod = wait_running(&pods, "survivor").await;
    let pod_uid = uid(&pod);
    let cid = container_status(&pod, "main")
        .unwrap()
        .container_id
        .clone()
        .unwrap();
    let sandboxes = sandboxes_of(&pod_uid);
    assert_eq!(sandboxes.len(), 1, "sandboxes before the restart");
    // A second pod, deleted while deckhand is down.
    ns.create_pod(&busybox_pod("doomed", "exec sleep 3600", "Always", Some(2)))
        .await;
    let doomed_uid = uid(&wait_running(&pods, "doomed").await);
    // A finished pod (restartPolicy Never) must not run again after the restart, and a
    // crash-looping one must keep its restart count.
    ns.create_pod(&busybox_pod("finished", "exit 0", "Never", Some(2)))
        .await;
    ns.create_pod(&busybox_pod("crasher", "exit 1", "Always", Some(2)))
        .await;
    let finished = wait_pod(&pods, "finished", "phase Succeeded", |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let finished_uid = uid(&finished);
    wait_pod(&pods, "crasher", "restartCount ≥ 1", |p| {
        container_status(p, "main").is_some_and(|c| c.restart_count >= 1)
    })
    .await;

    let _exclusive = DECKHAND_DISRUPTION.write().await;
    let harness_lock = lock_harness(Duration::from_secs(600)).await;
    let old_pid = deckhand_pid();
    let crasher_restarts = container_status(&pods.get("crasher").await.unwrap(), "main")
        .unwrap()
        .restart_count;
    // What the harness needs to start the very same deckhand again, read before the kill.
    let restart = HarnessRestart::capture(old_pid);
    println!("[{}] SIGKILL deckhand (pid {old_pid})", ns.name);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killing deckhand");
    poll_with(
        Duration::from_secs(10),
        Duration::from_millis(100),
        || "deckhand did not die after SIGKILL".to_string(),
        || (!process_alive(old_pid)).then_some(()),
    )
    .await;
    // Pods keep running without deckhand.
    assert_eq!(
        containers_of(&pod_uid).len(),
        1,
        "the pod's container while deckhand is down"
    );
    // While deckhand is down: delete one pod, create another.
    pods.delete("doomed", &Default::default())
        .await
        .expect("deleting pod doomed");
    ns.create_pod(&busybox_pod(
        "newcomer",
        "exec sleep 3600",
        "Always",
        Some(2),
    ))
    .await;

    // Start it again through the harness (same binary and command line: no rebuild).
    let t0 = Instant::now();
    let out = tokio::task::spawn_blocking(move || restart.run())
        .await
        .unwrap();
    drop(harness_lock);
    println!(
        "[{}] deckhand restarted through hack/local-up.sh ({:?}):\n{}",
        ns.name,
        t0.elapsed(),
        out.text
    );
    let new_pid = deckhand_pid();
    assert_ne!(new_pid, old_pid, "deckhand's pid did not change");
    wait_node_ready(&client, Duration::from_secs(60)).await;

    // The pod created while deckhand was down starts; the one deleted meanwhile goes away.
    wait_running(&pods, "newcomer").await;
    let t_gone = Instant::now();
    poll_with(
        Duration::from_secs(60),
        Duration::from_millis(500),
        || format!(
            "pod doomed (deleted while deckhand was down) still exists or still has sandboxes/containers\n{}",
            diagnose(&ns.name, "doomed")
        ),
        || {
            let in_api = kubectl_raw(&["-n", &ns.name, "get", "pod", "doomed", "-o", "name"])
                .status
                .success();
            (!in_api && sandboxes_of(&doomed_uid).is_empty() && containers_of(&doomed_uid).is_empty())
                .then_some(())
        },
    )
    .await;
    println!(
        "[{}] doomed gone {:?} after newcomer ran",
        ns.name,
        t_gone.elapsed()
    );

    // For 20 s (two resyncs of deckhand's pod workers) the pod stays as it was.
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let p = pods.get("survivor").await.expect("reading the pod");
        let diag = || diagnose(&ns.name, "survivor");
        let cs = container_status(&p, "main").expect("container status");
        assert_eq!(phase(&p), "Running", "phase after the restart\n{}", diag());
        assert_eq!(
            cs.container_id.as_deref(),
            Some(cid.as_str()),
            "containerID after the restart\n{}",
            diag()
        );
        assert_eq!(
            cs.restart_count,
            0,
            "restartCount after the restart\n{}",
            diag()
        );
        assert!(
            cs.ready,
            "container not ready after the restart\n{}",
            diag()
        );
        assert_eq!(
            sandboxes_of(&pod_uid),
            sandboxes,
            "sandboxes after the restart\n{}",
            diag()
        );
        let containers = containers_of(&pod_uid);
        assert_eq!(
            containers.len(),
            1,
            "containers after the restart: {containers:?}\n{}",
            diag()
        );
        assert!(
            cid.ends_with(&containers[0]),
            "runtime container {} is not {cid}",
            containers[0]
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let p = pods.get("finished").await.unwrap();
    assert_eq!(
        (
            phase(&p),
            container_status(&p, "main").unwrap().restart_count
        ),
        ("Succeeded", 0),
        "the finished pod after the restart\n{}",
        diagnose(&ns.name, "finished")
    );
    assert_eq!(
        containers_of(&finished_uid).len(),
        1,
        "the finished pod (restartPolicy Never) was run again after the restart\n{}",
        diagnose(&ns.name, "finished")
    );
    let p = pods.get("crasher").await.unwrap();
    let cs = container_status(&p, "main").unwrap();
    assert!(
        cs.restart_count >= crasher_restarts,
        "the crash-looping pod's restartCount went from {crasher_restarts} to {} across the restart\n{}",
        cs.restart_count,
        diagnose(&ns.name, "crasher")
    );
    println!(
        "[{}] crasher restartCount {crasher_restarts} before the restart, {} after",
        ns.name, cs.restart_count
    );
    assert_eq!(deckhand_pid(), new_pid, "deckhand exited after its restart");
    wait_node_ready(&client, Duration::from_secs(60)).await;
    drop(_exclusive);
    ns.delete().await;
}

/// Test 6: the node Lease is renewed (every 10 s with the default 40 s duration) for a minute
/// while the node's Ready condition stays True.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_renewed_and_node_ready() {
    let env = env();
    let client = client().await;
    let _shared = DECKHAND_DISRUPTION.read().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client.clone());
    let node_name = env.node_name();
    let mut renew_times = Vec::new();
    let start = Instant::now();
    for i in 0..7 {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        let lease = leases
            .get(node_name)
            .await
            .unwrap_or_else(|e| panic!("reading Lease kube-node-lease/{node_name}: {e}"));
        let spec = lease.spec.clone().expect("lease spec");
        assert_eq!(
            spec.holder_identity.as_deref(),
            Some(node_name),
            "holderIdentity"
        );
        let renew = spec.renew_time.clone().expect("renewTime").0;
        let now = k8s_openapi::jiff::Timestamp::now();
        let age = now.duration_since(renew);
        let node = nodes.get(node_name).await.expect("reading the node");
        let ready = node_ready_status(&node);
        println!(
            "lease sample {i} at {:>2}s: renewTime {renew} (age {:.1}s), node Ready={ready}",
            start.elapsed().as_secs(),
            age.as_secs_f64()
        );
        assert_eq!(ready, "True", "node Ready condition at sample {i}");
        assert!(
            age.as_secs_f64() < 25.0,
            "lease renewTime {renew} is {:.1}s old at sample {i} (renewed every 10 s)",
            age.as_secs_f64()
        );
        if let Some(prev) = renew_times.last() {
            assert!(renew >= *prev, "renewTime went backwards: {prev} → {renew}");
        }
        renew_times.push(renew);
    }
    let distinct: BTreeSet<_> = renew_times.iter().collect();
    let span = renew_times.last().unwrap().duration_since(renew_times[0]);
    assert!(
        distinct.len() >= 5 && span.as_secs_f64() >= 40.0,
        "renewTime advanced only {} times over {:.0}s: {renew_times:?}",
        distinct.len() - 1,
        span.as_secs_f64()
    );
}

/// A container that keeps failing with restartPolicy Always is restarted (restartCount 1,
/// lastState exit code 1) and then held back in CrashLoopBackOff; the pod stays Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashing_container_restarts_then_crash_loop_back_off() {
    let client = client().await;
    let ns = TestNs::new(&client, "crash").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "crasher",
        "echo crashing; exit 1",
        "Always",
        Some(2),
    ))
    .await;
    let pod = wait_pod(
        &pods,
        "crasher",
        "restartCount ≥ 1 with lastState exit code 1",
        |p| {
            container_status(p, "main").is_some_and(|c| {
                c.restart_count >= 1
                    && c.last_state
                        .as_ref()
                        .and_then(|l| l.terminated.as_ref())
                        .is_some_and(|t| t.exit_code == 1)
            })
        },
    )
    .await;
    let cs = container_status(&pod, "main").unwrap();
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        last.reason.as_deref(),
        Some("Error"),
        "lastState.terminated.reason"
    );
    let pod = wait_pod(&pods, "crasher", "waiting reason CrashLoopBackOff", |p| {
        waiting_reason(p, "main") == Some("CrashLoopBackOff")
    })
    .await;
    let diag = || diagnose(&ns.name, "crasher");
    assert_eq!(
        phase(&pod),
        "Running",
        "phase during CrashLoopBackOff\n{}",
        diag()
    );
    assert_eq!(condition(&pod, "Ready"), Some("False"), "Ready\n{}", diag());
    let cs = container_status(&pod, "main").unwrap();
    assert!(
        cs.restart_count >= 1,
        "restartCount during CrashLoopBackOff"
    );
    let msg = cs
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    assert!(msg.contains("back-off"), "CrashLoopBackOff message {msg:?}");
    let text = kubectl(&["-n", &ns.name, "get", "pod", "crasher"]);
    assert_eq!(
        Table::parse(&text).row("crasher")["STATUS"],
        "CrashLoopBackOff",
        "{text}"
    );
    ns.delete().await;
}

/// A missing image tag: ErrImagePull first, then ImagePullBackOff; the pod stays Pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_image_err_image_pull_then_back_off() {
    let client = client().await;
    let ns = TestNs::new(&client, "pull").await;
    let pods = ns.pods();
    ns.create_pod(&pod_with_image(
        "nopull",
        "busybox:does-not-exist",
        "true",
        "Always",
        Some(2),
    ))
    .await;
    let mut seen: Vec<String> = Vec::new();
    let pod = wait_pod(
        &pods,
        "nopull",
        "ErrImagePull followed by ImagePullBackOff",
        |p| {
            if let Some(r) = waiting_reason(p, "main") {
                if seen.last().map(String::as_str) != Some(r) {
                    seen.push(r.to_string());
                }
            }
            let err = seen.iter().position(|r| r == "ErrImagePull");
            err.is_some_and(|i| seen[i..].iter().any(|r| r == "ImagePullBackOff"))
        },
    )
    .await;
    println!("[{}] waiting reasons seen: {seen:?}", ns.name);
    assert_eq!(
        phase(&pod),
        "Pending",
        "phase\n{}",
        diagnose(&ns.name, "nopull")
    );
    let msg = container_status(&pod, "main")
        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
        .unwrap_or_default();
    assert!(
        msg.contains("does-not-exist"),
        "ImagePullBackOff message does not name the image: {msg:?}"
    );
    assert!(
        containers_of(&uid(&pod)).is_empty(),
        "a container exists for an image that was never pulled"
    );
    ns.delete().await;
}

/// An invalid image reference: waiting reason InvalidImageName, no container created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_image_name() {
    let client = client().await;
    let ns = TestNs::new(&client, "badname").await;
    let pods = ns.pods();
    ns.create_pod(&pod_with_image(
        "badname",
        "BusyBox:Latest",
        "true",
        "Always",
        Some(2),
    ))
    .await;
    let pod = wait_pod(&pods, "badname", "waiting reason InvalidImageName", |p| {
        waiting_reason(p, "main") == Some("InvalidImageName")
    })
    .await;
    assert_eq!(
        phase(&pod),
        "Pending",
        "phase\n{}",
        diagnose(&ns.name, "badname")
    );
    assert!(
        containers_of(&uid(&pod)).is_empty(),
        "a container exists for an invalid image name"
    );
    ns.delete().await;
}

/// The kubelet's events of a pod start: Pulling, Pulled, Created, Started (in that order, from
/// component kubelet on this node), in the events API and in `kubectl describe pod`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_start_events() {
    let env = env();
    let client = client().await;
    let ns = TestNs::new(&client, "events").await;
    let pods = ns.pods();
    // `busybox` means `busybox:latest`: pull policy Always, so there is always a pull.
    ns.create_pod(&busybox_pod(
        "eventful",
        "exec sleep 3600",
        "Always",
        Some(2),
    ))
    .await;
    let pod = wait_running(&pods, "eventful").await;
    let pod_uid = uid(&pod);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let lp = ListParams::default().fields(&format!("involvedObject.uid={pod_uid}"));
    let wanted = ["Pulling", "Pulled", "Created", "Started"];
    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        let list = events.list(&lp).await.expect("listing events").items;
        let reasons: BTreeSet<&str> = list.iter().filter_map(|e| e.reason.as_deref()).collect();
        if wanted.iter().all(|w| reasons.contains(w)) {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "events of pod {}/eventful: have {reasons:?}, want {wanted:?}\n{}",
            ns.name,
            diagnose(&ns.name, "eventful")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut times = Vec::new();
    for w in wanted {
        let e = list
            .iter()
            .find(|e| e.reason.as_deref() == Some(w))
            .unwrap();
        assert_eq!(
            e.type_.as_deref(),
            Some("Normal"),
            "type of event {w}: {e:?}"
        );
        let component = e
            .reporting_component
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()));
        assert_eq!(
            component.as_deref(),
            Some("kubelet"),
            "reporting component of event {w}: {e:?}"
        );
        let host = e
            .reporting_instance
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| e.source.as_ref().and_then(|s| s.host.clone()));
        assert_eq!(
            host.as_deref(),
            Some(env.node_name()),
            "reporting instance of event {w}: {e:?}"
        );
        let field = e.involved_object.field_path.clone().unwrap_or_default();
        assert_eq!(
            field, "spec.containers{main}",
            "involvedObject.fieldPath of event {w}"
        );
        let t = e
            .event_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0));
        times.push((w, t));
    }
    let ordered = times.windows(2).all(|p| match (p[0].1, p[1].1) {
        (Some(a), Some(b)) => a <= b,
        _ => true,
    });
    assert!(ordered, "events out of order: {times:?}");

    let describe = kubectl(&["-n", &ns.name, "describe", "pod", "eventful"]);
    let section = describe
        .split_once("\nEvents:")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no Events section in kubectl describe:\n{describe}"));
    for w in wanted {
        assert!(
            section
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(w) && l.contains("kubelet")),
            "no {w} event from kubelet in kubectl describe:\n{describe}"
        );
    }
    ns.delete().await;
}

/// Pods reach each other over the pod network: a client pod fetches a page from an httpd pod
/// by its IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_to_pod_network() {
    let client = client().await;
    let ns = TestNs::new(&client, "net").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "server",
        "mkdir -p /tmp/www && echo hello-from-server > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www",
        "Always",
        Some(2),
    ))
    .await;
    let server = wait_running(&pods, "server").await;
    let ip = pod_ip(&server);
    ns.create_pod(&busybox_pod(
        "client",
        // nc, not wget: this busybox-static build's wget segfaults (glibc static getaddrinfo).
        &format!(
            "for i in 1 2 3 4 5; do printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 8080 | grep -q hello-from-server && echo fetched-hello && exit 0; sleep 1; done; exit 1"
        ),
        "Never",
        Some(2),
    ))
    .await;
    let pod = wait_pod(&pods, "client", "a terminal phase", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    assert_eq!(
        phase(&pod),
        "Succeeded",
        "the client could not fetch http://{ip}:8080/\n{}",
        diagnose(&ns.name, "client")
    );
    let lines = read_cri_log(&cri_log_path(&pod, "main", 0));
    assert!(
        lines.iter().any(|l| l.message == "fetched-hello"),
        "client output: {lines:?}"
    );
    ns.delete().await;
}

/// The ServiceAccount token volume (kube-api-access-*) is mounted: namespace, token and ca.crt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_volume_mounted() {
    let client = client().await;
    let ns = TestNs::new(&client, "sa").await;
    let pods = ns.pods();
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    ns.create_pod(&busybox_pod(
        "reader",
        &format!("cat {dir}/namespace; echo; test -s {dir}/token && test -s {dir}/ca.crt && echo token-and-ca-present"),
        "Never",
        Some(2),
    ))
    .await;
    let pod = wait_pod(&pods, "reader", "a terminal phase", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    let lines = read_cri_log(&cri_log_path(&pod, "main", 0));
    let messages: Vec<&str> = lines.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(
        phase(&pod),
        "Succeeded",
        "output {messages:?}\n{}",
        diagnose(&ns.name, "reader")
    );
    assert_eq!(
        messages,
        vec![ns.name.as_str(), "token-and-ca-present"],
        "output of the reader"
    );
    ns.delete().await;
}
