//! The pod worker fed runtime answers it does not expect (issue 14): a container its spec does
//! not know, a sandbox without an IP, timestamps out of order, CRI errors and a runtime that
//! stops answering. In every case the worker keeps going (no panic, no stuck pod), reports what
//! it can with a reason, and gets the pod running once the runtime behaves.

use super::harness::*;
use deckhand::cri::api::ContainerState;
use serde_json::json;
use std::time::Duration;
use tonic::Status;

/// A running container in the pod's sandbox that the spec does not name (left by someone
/// else): the pod stays Running with only its own containers in the status, and deleting the
/// pod stops the stranger with the sandbox.
#[tokio::test(start_paused = true)]
async fn a_container_the_spec_does_not_know_is_left_out_and_stopped_with_the_pod() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("stranger", "Always", json!({}));
    h.apply(&p).await;
    let c = eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    let intruder = h.runtime.add_foreign_container(&c.sandbox_id, "intruder");
    keep_poking(&h, &p, Duration::from_secs(2)).await;
    let st = h
        .status_in_phase("stranger", "Running", Duration::from_secs(5))
        .await;
    let names: Vec<&str> = st["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["main"], "{st}");
    assert_eq!(h.runtime.count("CreateContainer"), 1, "nothing restarted");
    h.apply(&super::deleted(&p, 1)).await;
    eventually(Duration::from_secs(10), "the pod deleted", || {
        h.deleted("stranger").then_some(())
    })
    .await;
    assert!(
        h.runtime
            .containers()
            .iter()
            .all(|x| x.id != intruder || x.state != ContainerState::ContainerRunning),
        "the stranger went with the sandbox"
    );
    h.stop().await;
}

/// A ready sandbox that reports no IP (a network plugin that lost it): the Go kubelet's
/// `PodSandboxChanged` makes a new sandbox; the container starts again in it with the new IP.
#[tokio::test(start_paused = true)]
async fn a_sandbox_without_an_ip_is_replaced() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("noip", "Always", json!({}));
    h.apply(&p).await;
    let c0 = eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    h.status_in_phase("noip", "Running", Duration::from_secs(5))
        .await;
    h.runtime.set_sandbox_ip(&c0.sandbox_id, "");
    h.poke(&p).await;
    let c1 = eventually(Duration::from_secs(10), "running in a new sandbox", || {
        h.runtime
            .running("main")
            .filter(|c| c.sandbox_id != c0.sandbox_id)
    })
    .await;
    let new_ip = h
        .runtime
        .sandboxes()
        .into_iter()
        .find(|s| s.id == c1.sandbox_id)
        .unwrap()
        .ip;
    eventually(Duration::from_secs(5), "the new IP in the status", || {
        let st = h.api.lock().unwrap().statuses["noip"].clone();
        (st["podIP"] == new_ip.as_str()).then_some(())
    })
    .await;
    h.stop().await;
}

/// CRI errors on every step of a pod start, one at a time: each is reported (an event or a
/// waiting reason with the runtime's words), retried, and the pod ends Running with its one
/// container; nothing is started twice.
#[tokio::test(start_paused = true)]
async fn cri_errors_on_each_step_are_reported_and_retried() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.inject_error(
        "RunPodSandbox",
        Status::unknown("cni plugin not initialized"),
    );
    h.runtime
        .inject_error("ListContainers", Status::unavailable("connection refused"));
    h.runtime.inject_error(
        "CreateContainer",
        Status::unknown("failed to create containerd container: no space left"),
    );
    h.runtime.inject_error(
        "StartContainer",
        Status::unknown("failed to start: oci runtime"),
    );
    let p = pod("flaky", "Always", json!({}));
    h.apply(&p).await;
    let mut seen_create_error = false;
    let st = loop {
        if let Some((reason, msg)) = h.waiting("flaky", "main") {
            if reason == "CreateContainerError" {
                assert!(msg.contains("no space left"), "{msg}");
                seen_create_error = true;
            }
        }
        if h.phase("flaky").as_deref() == Some("Running") {
            break h.api.lock().unwrap().statuses["flaky"].clone();
        }
        h.poke(&p).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            h.runtime.count("RunPodSandbox") < 10,
            "no end of retries: {:?}",
            h.runtime.calls()
        );
    };
    assert!(seen_create_error, "CreateContainerError was shown");
    let events = h.events();
    assert!(
        events.iter().any(|e| e == "FailedCreatePodSandBox"),
        "{events:?}"
    );
    let running: Vec<_> = h
        .runtime
        .containers()
        .into_iter()
        .filter(|c| c.state == ContainerState::ContainerRunning)
        .collect();
    assert_eq!(running.len(), 1, "{running:?}");
    assert!(
        st["containerStatuses"][0]["state"]["running"].is_object(),
        "{st}"
    );
    h.stop().await;
}

/// A runtime that stops answering `ContainerStatus` (a hung containerd): the calls run into
/// the client's deadline, the worker neither panics nor writes a status it cannot know, and once
/// the runtime answers again the pod is Running with restartCount 0.
#[tokio::test(start_paused = true)]
async fn a_runtime_that_stops_answering_is_waited_out() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("hung", "Always", json!({}));
    h.apply(&p).await;
    h.status_in_phase("hung", "Running", Duration::from_secs(10))
        .await;
    let writes = h.api.lock().unwrap().history.len();
    h.runtime
        .delay("ContainerStatus", Some(Duration::from_secs(600)));
    keep_poking(&h, &p, Duration::from_secs(30)).await;
    assert_eq!(
        h.api.lock().unwrap().history.len(),
        writes,
        "no status written without the runtime's answer"
    );
    // the runtime answers again; the call in flight ends at the client's deadline (120 s), and
    // the worker then sees the container's crash and restarts it
    h.runtime.delay("ContainerStatus", None);
    let c = h.runtime.running("main").unwrap();
    h.runtime.exit(&c.id, 1);
    let cs = eventually(
        Duration::from_secs(300),
        "the crash seen and restarted",
        || {
            h.poke_now(&p);
            h.container_status("hung", "main")
                .filter(|c| c["restartCount"] == 1 && c["state"]["running"].is_object())
        },
    )
    .await;
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 1, "{cs}");
    assert_eq!(h.runtime.count("CreateContainer"), 2);
    h.stop().await;
}

/// A pod created while the runtime cannot be reached (containerd restarting): its first sync
/// fails, and it starts as soon as any CRI call gets an answer again (here the PLEG's relist),
/// not at its worker's 10 s retry.
#[tokio::test(start_paused = true)]
async fn a_pod_created_while_the_runtime_is_unreachable_starts_when_it_answers() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.inject_error(
        "ListPodSandbox",
        Status::unavailable("No such file or directory (os error 2)"),
    );
    let p = pod("during", "Always", json!({}));
    h.apply(&p).await;
    eventually(
        Duration::from_secs(1),
        "the first sync's failed read",
        || (!h.cri.reachability().is_reachable()).then_some(()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.runtime.count("RunPodSandbox"), 0);
    let back = Instant::now();
    h.cri
        .list_pod_sandboxes(&[])
        .await
        .expect("the runtime answers");
    assert!(h.cri.reachability().is_reachable());
    h.status_in_phase("during", "Running", Duration::from_secs(2))
        .await;
    assert!(
        back.elapsed() < Duration::from_secs(2),
        "started {:?} after the runtime answered",
        back.elapsed()
    );
    h.stop().await;
}

/// A crash-looping container with a ConfigMap volume keeps being restarted while the API server
/// is away: the volume's refresh fails (FailedMount), but it was set up before, so the start goes
/// ahead with it as it is, as the Go kubelet's volume manager does for a mounted volume. (Before
/// the fix, every restart was held back until the API server answered again.)
#[tokio::test(start_paused = true)]
async fn a_crash_looping_container_is_restarted_while_the_api_server_is_away() {
    let h = Harness::start(fake_runtime()).await;
    h.api.lock().unwrap().configmaps.insert(
        "settings".into(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "settings", "namespace": "ns"}, "data": {"k": "v"}}),
    );
    let p = pod(
        "crasher",
        "Always",
        json!({
            "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}],
            "containers": [{"name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", "exit 1"],
                            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        }),
    );
    h.apply(&p).await;
    h.status_in_phase("crasher", "Running", Duration::from_secs(5))
        .await;
    h.api.lock().unwrap().down = true;
    // three exits while the API server is away: each is followed by a restart (after the
    // crash-loop back-off: 10 s, 20 s, 40 s)
    let attempt = |c: &deckhand::cri::fake::FakeContainer| {
        c.config.metadata.as_ref().map_or(0, |m| m.attempt)
    };
    for n in 1..=3u32 {
        let c = eventually(Duration::from_secs(5), "a running attempt", || {
            h.runtime.running("main")
        })
        .await;
        assert_eq!(attempt(&c), n - 1, "attempt of the running container");
        h.runtime.exit(&c.id, 1);
        let exited = Instant::now();
        // PLEG relists and resyncs poke the worker meanwhile
        loop {
            h.poke(&p).await;
            if h.runtime.running("main").is_some_and(|c| attempt(&c) == n) {
                break;
            }
            assert!(
                exited.elapsed() < Duration::from_secs(90),
                "restart {n} with the API server away: not within 90 s ({:?})",
                h.runtime.calls().iter().rev().take(5).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        println!("restart {n} {:?} after the exit", exited.elapsed());
    }
    assert!(
        h.events().iter().all(|e| e != "FailedMount"),
        "events cannot be written while the API server is away"
    );
    h.api.lock().unwrap().down = false;
    h.stop().await;
}

/// Timestamps out of order (a container that finished before it started, one created in the
/// future): statuses are still written, with the runtime's times, and the restart count never
/// goes back.
#[tokio::test(start_paused = true)]
async fn timestamps_out_of_order_are_reported_as_given() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("clock", "Always", json!({}));
    h.apply(&p).await;
    let c0 = eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    h.runtime.exit(&c0.id, 1);
    let (created, started, finished) = (3_000_000_000_000_000_000, 2_000_000_000, 1_000_000_000);
    h.runtime
        .set_container_times(&c0.id, created, started, finished);
    let mut restart_counts = vec![];
    for _ in 0..40 {
        h.poke(&p).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Some(cs) = h.container_status("clock", "main") {
            restart_counts.push(cs["restartCount"].as_i64().unwrap_or(0));
        }
    }
    assert!(
        restart_counts.windows(2).all(|w| w[0] <= w[1]),
        "restartCount never goes back: {restart_counts:?}"
    );
    assert!(
        h.phase("clock").is_some(),
        "a status was written: {:?}",
        h.api.lock().unwrap().statuses
    );
    h.stop().await;
}

/// A deleted pod leaves the API only once its resources are reclaimed (sandbox removed, pod
/// directory gone), as the Go status manager's `canBeDeleted` requires: a kubelet stopped in
/// between still finds the pod listed and finishes the cleanup, instead of leaving its volumes,
/// mounts and cgroup behind (seen with hack/chaos.sh).
#[tokio::test(start_paused = true)]
async fn a_deleted_pod_leaves_the_api_after_its_sandbox_is_removed() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("reclaim", "Always", json!({}));
    h.apply(&p).await;
    h.status_in_phase("reclaim", "Running", Duration::from_secs(10))
        .await;
    h.runtime
        .delay("RemovePodSandbox", Some(Duration::from_secs(5)));
    h.apply(&super::deleted(&p, 1)).await;
    eventually(Duration::from_secs(10), "RemovePodSandbox called", || {
        (h.runtime.count("RemovePodSandbox") > 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !h.deleted("reclaim"),
        "the pod left the API while its sandbox was still being removed"
    );
    eventually(
        Duration::from_secs(10),
        "the pod deleted in the API",
        || h.deleted("reclaim").then_some(()),
    )
    .await;
    h.stop().await;
}

/// A sandbox the worker could not remove (every try failed) is not left for the next full list
/// of the pod sources, which may be hours away: the periodic orphan sweep (k/k
/// `HandlePodCleanups`, every 2 s) hands it to a new worker. One that fails again is retried
/// once a minute (ORPHAN_RETRY_PERIOD), not at every sweep.
#[tokio::test(start_paused = true)]
async fn a_sandbox_left_by_a_failed_cleanup_is_removed_by_the_orphan_sweep() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("leftover", "Always", json!({}));
    h.synced(&[]).await;
    h.apply(&p).await;
    h.status_in_phase("leftover", "Running", Duration::from_secs(10))
        .await;
    // the pod's worker tries 5 times, the sweep's first worker 5 more
    for _ in 0..10 {
        h.runtime.inject_error(
            "RemovePodSandbox",
            Status::internal("device or resource busy"),
        );
    }
    h.apply(&super::deleted(&p, 1)).await;
    eventually(
        Duration::from_secs(30),
        "the pod deleted in the API",
        || h.deleted("leftover").then_some(()),
    )
    .await;
    h.remove(&p).await;
    assert_eq!(h.runtime.count("RemovePodSandbox"), 5, "every try failed");
    assert_eq!(h.runtime.sandboxes().len(), 1, "the sandbox is left");
    eventually(
        Duration::from_secs(20),
        "the sweep's worker tried too",
        || (h.runtime.count("RemovePodSandbox") == 10).then_some(()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        h.runtime.count("RemovePodSandbox"),
        10,
        "not retried at every sweep"
    );
    assert_eq!(h.runtime.sandboxes().len(), 1);
    eventually(
        Duration::from_secs(60),
        "the orphan sandbox removed",
        || h.runtime.sandboxes().is_empty().then_some(()),
    )
    .await;
    assert_eq!(h.runtime.count("RemovePodSandbox"), 11);
    let uid = p.metadata.uid.clone().unwrap();
    eventually(
        Duration::from_secs(10),
        "the orphan's worker forgotten",
        || h.states.get(&uid).is_none().then_some(()),
    )
    .await;
    // the sweep goes on without finding anything more to do
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(h.runtime.count("RemovePodSandbox"), 11);
    h.stop().await;
}

/// A deleted pod's worker is forgotten once the pod object is gone from the API server. It
/// used to stay for good: the worker finishes when it has deleted the object, before the watch
/// reports the deletion, and the dispatcher kept every finished worker (its pod state and
/// resource allocation with it), so the kubelet grew with each pod ever deleted.
#[tokio::test(start_paused = true)]
async fn a_deleted_pods_worker_is_forgotten_when_the_pod_leaves_the_api() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("forgotten", "Always", json!({}));
    let uid = p.metadata.uid.clone().unwrap();
    h.apply(&p).await;
    h.status_in_phase("forgotten", "Running", Duration::from_secs(10))
        .await;
    h.apply(&super::deleted(&p, 1)).await;
    eventually(
        Duration::from_secs(30),
        "the pod deleted in the API",
        || h.deleted("forgotten").then_some(()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        h.states.get(&uid).is_some(),
        "kept until the watch says the pod is gone"
    );
    // a late copy of the deleted pod starts nothing
    h.apply(&super::deleted(&p, 1)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.runtime.count("RunPodSandbox"), 1);
    h.remove(&p).await;
    eventually(Duration::from_secs(5), "the worker forgotten", || {
        h.states.get(&uid).is_none().then_some(())
    })
    .await;
    h.stop().await;
}

/// A volume that cannot be set up yet (here a ConfigMap created a moment after the pod; on a
/// cluster, also the Node authorizer refusing a service-account token for a pod whose binding it
/// has not seen) is tried again after 500 ms, then 1 s, 2 s, ..., as the Go kubelet's volume
/// manager retries a mount, not after the pod worker's 10 s back-off. Nothing pokes the worker
/// here: only its own retry can start the pod.
#[tokio::test(start_paused = true)]
async fn a_volume_that_fails_to_set_up_is_retried_within_a_second() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod(
        "early",
        "Always",
        json!({
            "volumes": [{"name": "cfg", "configMap": {"name": "late"}}],
            "containers": [{"name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"],
                            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
        }),
    );
    h.apply(&p).await;
    h.event_recorded("FailedMount", Duration::from_secs(5))
        .await;
    h.api.lock().unwrap().configmaps.insert(
        "late".into(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "late", "namespace": "ns"}, "data": {"k": "v"}}),
    );
    let created = Instant::now();
    h.status_in_phase("early", "Running", Duration::from_secs(5))
        .await;
    assert!(
        created.elapsed() < Duration::from_secs(3),
        "Running {:?} after the ConfigMap appeared",
        created.elapsed()
    );
    h.stop().await;
}
