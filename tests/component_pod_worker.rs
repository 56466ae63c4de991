//! Component tests (tier 2 of ../shared/DESIGN.md): the pod workers driven through whole
//! lifecycles with the fake runtime ([`deckhand::cri::fake::FakeRuntime`], reached through the
//! real CRI client) and an in-memory API server (a `tower` service behind `kube::Client` that
//! records pod status patches, events and deletions). No cluster, no containerd: these run in
//! seconds in README command 2. Time is tokio's paused clock: the fake runtime's timestamps
//! and the workers' clock are one [`TokioClock`], so a 10 s crash back-off takes no real time
//! and the timings asserted here are exact, not racy.

#[path = "component_pod_worker/cri_events.rs"]
mod cri_events;
#[path = "component_pod_worker/ephemeral.rs"]
mod ephemeral;
#[path = "component_pod_worker/exits.rs"]
mod exits;
#[path = "component_pod_worker/faults.rs"]
mod faults;
#[path = "component_pod_worker/harness.rs"]
mod harness;
#[path = "component_pod_worker/image_volume.rs"]
mod image_volume;
#[path = "component_pod_worker/pod_cache.rs"]
mod pod_cache;
#[path = "component_pod_worker/resize.rs"]
mod resize;
#[path = "component_pod_worker/runtime_class.rs"]
mod runtime_class;
#[path = "component_pod_worker/userns.rs"]
mod userns;

use harness::*;
use serde_json::{json, Value};
use std::time::Duration;

/// Issue 11 item 3: an OnFailure pod whose container exits 0 is Succeeded and keeps its one
/// sandbox, stopped; nothing is created again however often the worker is woken.
#[tokio::test(start_paused = true)]
async fn an_on_failure_pod_that_succeeded_keeps_its_one_sandbox() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("ok", "OnFailure", json!({}));
    h.apply(&p).await;
    exit_and_wait(&h, &p, "main", 0, "Succeeded").await;
    keep_poking(&h, &p, Duration::from_secs(2)).await;
    assert_eq!(
        h.runtime.count("RunPodSandbox"),
        1,
        "{:?}",
        h.runtime.calls()
    );
    let sandboxes = h.runtime.sandboxes();
    assert_eq!(sandboxes.len(), 1);
    assert!(!sandboxes[0].ready, "the finished pod's sandbox is stopped");
    assert_eq!(h.runtime.count("CreateContainer"), 1);
    h.stop().await;
}

/// A finished pod whose sandbox the runtime fails to stop (containerd 1.6 answered "ttrpc:
/// closed" while the container's shim was exiting, seen in README command 2): the worker tries
/// again after its back-off (Go's 10 s `workerBackOffPeriod`), not only when container GC comes
/// by a minute later, and the pod keeps its one sandbox.
#[tokio::test(start_paused = true)]
async fn a_finished_pods_sandbox_stop_that_failed_is_retried() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("stopfail", "OnFailure", json!({}));
    h.apply(&p).await;
    eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    h.runtime
        .inject_error("StopPodSandbox", tonic::Status::unknown("ttrpc: closed"));
    exit_and_wait(&h, &p, "main", 0, "Succeeded").await;
    eventually(Duration::from_secs(15), "the sandbox stopped", || {
        let sandboxes = h.runtime.sandboxes();
        (sandboxes.len() == 1 && !sandboxes[0].ready).then_some(())
    })
    .await;
    assert!(
        h.runtime.count("StopPodSandbox") >= 2,
        "{:?}",
        h.runtime.calls()
    );
    assert_eq!(h.runtime.count("RunPodSandbox"), 1);
    h.stop().await;
}

/// The same for a Never pod that failed and an OnFailure pod with an init container, and when
/// the stopped sandbox disappears afterwards (removed by someone else).
#[tokio::test(start_paused = true)]
async fn finished_pods_get_no_new_sandbox_even_when_theirs_disappears() {
    let h = Harness::start(fake_runtime()).await;
    let never = pod("never", "Never", json!({}));
    let init = pod(
        "init",
        "OnFailure",
        json!({"initContainers": [{"name": "setup", "image": "busybox:1.36",
               "imagePullPolicy": "IfNotPresent", "command": ["true"]}]}),
    );
    h.apply(&never).await;
    exit_and_wait(&h, &never, "main", 1, "Failed").await;
    h.apply(&init).await;
    exit_and_wait(&h, &init, "setup", 0, "Running").await;
    exit_and_wait(&h, &init, "main", 0, "Succeeded").await;
    let before = h.runtime.count("RunPodSandbox");
    assert_eq!(before, 2, "one sandbox per pod: {:?}", h.runtime.calls());
    // the stopped sandboxes vanish (as a runtime-side cleanup would do)
    let client = h.runtime.client().await;
    for sb in h.runtime.sandboxes() {
        client.remove_pod_sandbox(&sb.id).await.unwrap();
    }
    keep_poking(&h, &never, Duration::from_secs(1)).await;
    keep_poking(&h, &init, Duration::from_secs(1)).await;
    assert_eq!(
        h.runtime.count("RunPodSandbox"),
        before,
        "{:?}",
        h.runtime.calls()
    );
    h.stop().await;
}

/// A deckhand restart between the pod's end and its next sync: the new workers find the pod
/// Succeeded in the API (or the exited container with its sandbox stopped) and start nothing.
#[tokio::test(start_paused = true)]
async fn a_restart_after_a_pod_finished_starts_nothing() {
    let runtime = fake_runtime();
    let h = Harness::start(runtime.clone()).await;
    let p = pod("done", "OnFailure", json!({}));
    h.apply(&p).await;
    exit_and_wait(&h, &p, "main", 0, "Succeeded").await;
    let status = h.api.lock().unwrap().statuses["done"].clone();
    h.stop().await;
    // restart 1: the API copy says Succeeded
    let h = Harness::start(runtime.clone()).await;
    let mut finished = p.clone();
    finished.status = Some(serde_json::from_value(status).unwrap());
    h.apply(&finished).await;
    keep_poking(&h, &finished, Duration::from_secs(1)).await;
    h.stop().await;
    // restart 2: the status was never written (the API still says Pending)
    let h = Harness::start(runtime.clone()).await;
    h.apply(&p).await;
    keep_poking(&h, &p, Duration::from_secs(1)).await;
    eventually(
        Duration::from_secs(5),
        "Succeeded from the runtime state",
        || (h.phase("done").as_deref() == Some("Succeeded")).then_some(()),
    )
    .await;
    assert_eq!(runtime.count("RunPodSandbox"), 1, "{:?}", runtime.calls());
    assert_eq!(runtime.count("CreateContainer"), 1);
    h.stop().await;
}

pub(crate) fn deleted(p: &Pod, grace: i64) -> Pod {
    let mut d = p.clone();
    d.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    d.metadata.deletion_grace_period_seconds = Some(grace);
    d
}

/// Issue 11 item 4: deleted with an 86400 s grace period, a container that ignores SIGTERM
/// keeps running; a second delete with a 1 s grace period stops it within seconds and the pod
/// is removed.
#[tokio::test(start_paused = true)]
async fn a_later_shorter_grace_period_stops_the_pod_within_seconds() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.ignore_stop_signal("main");
    let p = pod(
        "stubborn",
        "Always",
        json!({"terminationGracePeriodSeconds": 86400}),
    );
    h.apply(&p).await;
    eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    h.apply(&deleted(&p, 86400)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        h.runtime.running("main").is_some(),
        "the long grace period runs"
    );
    assert!(!h.deleted("stubborn"));
    let shortened = Instant::now();
    h.apply(&deleted(&p, 1)).await;
    eventually(Duration::from_secs(6), "the pod deleted in the API", || {
        h.deleted("stubborn").then_some(())
    })
    .await;
    assert!(h.runtime.running("main").is_none());
    assert!(
        shortened.elapsed() < Duration::from_secs(5),
        "{:?}",
        shortened.elapsed()
    );
    // a longer grace period after that changes nothing (it only gets shorter)
    h.stop().await;
}

/// A preStop hook that hangs runs against the shortened grace period too.
#[tokio::test(start_paused = true)]
async fn a_hanging_pre_stop_hook_is_cut_short_by_a_shorter_grace_period() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.hang_exec("main");
    let p = pod(
        "prestop",
        "Always",
        json!({"terminationGracePeriodSeconds": 86400,
               "containers": [{"name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                               "command": ["sleep", "3600"],
                               "lifecycle": {"preStop": {"exec": {"command": ["sleep", "3600"]}}}}]}),
    );
    h.apply(&p).await;
    eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    h.apply(&deleted(&p, 86400)).await;
    eventually(Duration::from_secs(5), "the preStop hook runs", || {
        (h.runtime.count("ExecSync") >= 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.runtime.running("main").is_some());
    let shortened = Instant::now();
    h.apply(&deleted(&p, 1)).await;
    eventually(Duration::from_secs(8), "the pod deleted in the API", || {
        h.deleted("prestop").then_some(())
    })
    .await;
    assert!(h.runtime.running("main").is_none());
    println!(
        "terminated {:?} after the shorter grace period",
        shortened.elapsed()
    );
    assert!(shortened.elapsed() < Duration::from_secs(6));
    h.stop().await;
}

/// Issue 11 item 2: the first status goes out before the sandbox exists (ContainerCreating,
/// startTime, conditions), one with PodReadyToStartContainers before the container runs, and
/// startTime never moves.
#[tokio::test(start_paused = true)]
async fn a_starting_pod_shows_container_creating_before_it_runs() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("starting", "Always", json!({}));
    h.apply(&p).await;
    eventually(Duration::from_secs(5), "Running", || {
        (h.phase("starting").as_deref() == Some("Running")).then_some(())
    })
    .await;
    let history: Vec<Value> = h
        .api
        .lock()
        .unwrap()
        .history
        .iter()
        .filter(|(n, _)| n == "starting")
        .map(|(_, s)| s.clone())
        .collect();
    let cond = |st: &Value, t: &str| {
        st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .map(|c| c["status"].as_str().unwrap_or("").to_string())
    };
    let first = &history[0];
    assert_eq!(first["phase"], "Pending", "{history:#?}");
    assert!(first["startTime"].is_string(), "{first}");
    assert_eq!(
        first["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating",
        "{first}"
    );
    assert_eq!(cond(first, "PodScheduled").as_deref(), Some("True"));
    assert_eq!(cond(first, "Initialized").as_deref(), Some("True"));
    assert_eq!(
        cond(first, "PodReadyToStartContainers").as_deref(),
        Some("False")
    );
    assert!(
        history.iter().any(|st| st["phase"] == "Pending"
            && cond(st, "PodReadyToStartContainers").as_deref() == Some("True")
            && st["podIP"].is_string()),
        "a status with the sandbox ready before the container runs: {history:#?}"
    );
    let last = history.last().unwrap();
    assert!(
        history
            .iter()
            .all(|st| st["startTime"] == first["startTime"]),
        "{history:#?}"
    );
    assert_eq!(last["phase"], "Running");
    h.stop().await;
}

/// The newest instance of container `name` that is not `not`, running.
fn running_other(h: &Harness, name: &str, not: &str) -> Option<deckhand::cri::fake::FakeContainer> {
    h.runtime.running(name).filter(|c| c.id != not)
}

fn attempt(c: &deckhand::cri::fake::FakeContainer) -> u32 {
    c.config.metadata.as_ref().map(|m| m.attempt).unwrap_or(0)
}

/// create → running → crash → restart at once → crash → CrashLoopBackOff for 10 s (the Go
/// message) → restart → crash → 20 s: the Go kubelet's doubling back-off, counted from the
/// exited container's finishedAt.
#[tokio::test(start_paused = true)]
async fn a_crashing_container_restarts_with_the_doubling_back_off() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("crash", "Always", json!({}));
    h.apply(&p).await;
    let c0 = eventually(Duration::from_secs(10), "running", || {
        h.runtime.running("main")
    })
    .await;
    h.runtime.exit(&c0.id, 1);
    h.poke(&p).await;
    let c1 = eventually(Duration::from_secs(2), "restarted at once", || {
        running_other(&h, "main", &c0.id)
    })
    .await;
    assert_eq!(attempt(&c1), 1);
    let mut previous = c1;
    for (n, delay) in [(2u32, 10u64), (3, 20)] {
        let exited = Instant::now();
        h.runtime.exit(&previous.id, 1);
        h.poke(&p).await;
        let (reason, message) = eventually(Duration::from_secs(2), "CrashLoopBackOff", || {
            h.waiting("crash", "main")
                .filter(|(r, _)| r == "CrashLoopBackOff")
        })
        .await;
        assert_eq!(reason, "CrashLoopBackOff");
        assert_eq!(
            message,
            format!("back-off {delay}s restarting failed container=main pod=crash_ns(uid-crash)")
        );
        // pokes during the back-off start nothing
        keep_poking(&h, &p, Duration::from_secs(delay / 2)).await;
        assert!(
            h.runtime.running("main").is_none(),
            "restarted inside the back-off"
        );
        let next = eventually(
            Duration::from_secs(delay + 2),
            "restarted after the back-off",
            || running_other(&h, "main", &previous.id),
        )
        .await;
        let waited = exited.elapsed();
        assert!(
            waited >= Duration::from_secs(delay) && waited < Duration::from_secs(delay + 1),
            "restart {n} after {waited:?}, back-off {delay}s"
        );
        assert_eq!(attempt(&next), n);
        previous = next;
    }
    eventually(Duration::from_secs(2), "restartCount 3", || {
        h.container_status("crash", "main")
            .filter(|c| c["restartCount"] == 3 && c["state"]["running"].is_object())
    })
    .await;
    assert!(
        h.events().iter().any(|e| e == "BackOff"),
        "{:?}",
        h.events()
    );
    assert_eq!(h.runtime.count("RunPodSandbox"), 1);
    h.stop().await;
}

/// A pull that fails: ErrImagePull with the runtime's message, then ImagePullBackOff quoting it
/// while the 10 s pull back-off holds, then a new pull once it ends, and the pod runs.
#[tokio::test(start_paused = true)]
async fn a_failing_image_pull_backs_off_then_runs() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.inject_error(
        "PullImage",
        tonic::Status::not_found("pull access denied for localhost:5000/app"),
    );
    let p = pod(
        "pull",
        "Always",
        json!({"containers": [{"name": "main", "image": "localhost:5000/app:1",
                               "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}),
    );
    h.apply(&p).await;
    let (_, message) = eventually(Duration::from_secs(5), "ErrImagePull", || {
        h.waiting("pull", "main")
            .filter(|(r, _)| r == "ErrImagePull")
    })
    .await;
    assert!(message.contains("pull access denied"), "{message}");
    let failed_at = Instant::now();
    h.poke(&p).await;
    let (_, backoff) = eventually(Duration::from_secs(5), "ImagePullBackOff", || {
        h.waiting("pull", "main")
            .filter(|(r, _)| r == "ImagePullBackOff")
    })
    .await;
    assert_eq!(
        backoff,
        format!("Back-off pulling image \"localhost:5000/app:1\": ErrImagePull: {message}")
    );
    assert_eq!(
        h.runtime.count("PullImage"),
        1,
        "no pull inside the back-off"
    );
    eventually(Duration::from_secs(15), "Running", || {
        (h.phase("pull").as_deref() == Some("Running")).then_some(())
    })
    .await;
    assert!(
        failed_at.elapsed() >= Duration::from_secs(9),
        "{:?}",
        failed_at.elapsed()
    );
    assert_eq!(h.runtime.count("PullImage"), 2);
    let events = h.events();
    for e in [
        "Pulling", "Failed", "BackOff", "Pulled", "Created", "Started",
    ] {
        assert!(events.iter().any(|x| x == e), "{e} in {events:?}");
    }
    h.stop().await;
}

/// A sidecar (init container with restartPolicy Always) starts first and keeps running; the
/// next init container starts once it runs; the main container after that one succeeded; a
/// crashing sidecar is restarted while main runs on; when main finishes, the sidecar is
/// stopped with the sandbox and the pod Succeeds.
#[tokio::test(start_paused = true)]
async fn init_containers_and_a_sidecar_run_in_order() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod(
        "side",
        "OnFailure",
        json!({"initContainers": [
            {"name": "proxy", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
             "restartPolicy": "Always", "command": ["sleep", "3600"]},
            {"name": "setup", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
             "command": ["true"]}]}),
    );
    h.apply(&p).await;
    // PLEG reports the sidecar's start; the next sync starts the next init container
    keep_poking(&h, &p, Duration::from_secs(1)).await;
    let setup = eventually(Duration::from_secs(5), "setup runs", || {
        h.runtime.running("setup")
    })
    .await;
    assert!(
        h.runtime.running("proxy").is_some(),
        "the sidecar runs before setup"
    );
    assert!(h.runtime.running("main").is_none(), "main waits for setup");
    h.runtime.exit(&setup.id, 0);
    h.poke(&p).await;
    let main = eventually(Duration::from_secs(5), "main runs", || {
        h.runtime.running("main")
    })
    .await;
    let proxy = h
        .runtime
        .running("proxy")
        .expect("the sidecar keeps running");
    let order: Vec<String> = h
        .runtime
        .containers()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    assert_eq!(order, ["proxy", "setup", "main"]);
    // the sidecar crashes: restarted, main untouched
    h.runtime.exit(&proxy.id, 1);
    h.poke(&p).await;
    eventually(Duration::from_secs(5), "the sidecar restarted", || {
        running_other(&h, "proxy", &proxy.id)
    })
    .await;
    assert_eq!(
        h.runtime.running("main").map(|c| c.id),
        Some(main.id.clone())
    );
    exit_and_wait(&h, &p, "main", 0, "Succeeded").await;
    assert!(
        h.runtime.running("proxy").is_none(),
        "the sidecar is stopped"
    );
    assert_eq!(h.runtime.count("RunPodSandbox"), 1);
    h.stop().await;
}

/// deckhand restarts while a pod runs: the new workers adopt the running sandbox and container
/// (nothing created, nothing killed) and keep reporting it Running.
#[tokio::test(start_paused = true)]
async fn a_restart_adopts_the_running_pod() {
    let runtime = fake_runtime();
    let h = Harness::start(runtime.clone()).await;
    let p = pod("steady", "Always", json!({}));
    h.apply(&p).await;
    eventually(Duration::from_secs(5), "Running", || {
        (h.phase("steady").as_deref() == Some("Running")).then_some(())
    })
    .await;
    let c = runtime.running("main").unwrap();
    let status = h.api.lock().unwrap().statuses["steady"].clone();
    h.stop().await;
    let h = Harness::start(runtime.clone()).await;
    let mut running = p.clone();
    running.status = Some(serde_json::from_value(status).unwrap());
    h.apply(&running).await;
    keep_poking(&h, &running, Duration::from_secs(2)).await;
    assert_eq!(runtime.running("main").map(|x| x.id), Some(c.id));
    assert_eq!(runtime.count("RunPodSandbox"), 1, "{:?}", runtime.calls());
    assert_eq!(runtime.count("CreateContainer"), 1);
    assert_eq!(runtime.count("StopContainer"), 0);
    eventually(Duration::from_secs(2), "Running reported again", || {
        (h.phase("steady").as_deref() == Some("Running")).then_some(())
    })
    .await;
    h.stop().await;
}

/// The sandbox dies under a running container: the pod gets a new sandbox (attempt 1) with a
/// `SandboxChanged` event, its container starts again in it and counts one restart.
#[tokio::test(start_paused = true)]
async fn a_dead_sandbox_is_replaced_and_the_containers_restart_in_it() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("sandbox", "Always", json!({}));
    h.apply(&p).await;
    let c0 = eventually(Duration::from_secs(5), "running", || {
        h.runtime.running("main")
    })
    .await;
    let client = h.runtime.client().await;
    client.stop_pod_sandbox(&c0.sandbox_id).await.unwrap();
    assert!(
        h.runtime.running("main").is_none(),
        "the sandbox took its container with it"
    );
    h.poke(&p).await;
    let c1 = eventually(Duration::from_secs(5), "running in a new sandbox", || {
        running_other(&h, "main", &c0.id)
    })
    .await;
    assert_ne!(c1.sandbox_id, c0.sandbox_id);
    let sandboxes = h.runtime.sandboxes();
    assert_eq!(sandboxes.len(), 2);
    assert_eq!(
        sandboxes[1].config.metadata.as_ref().map(|m| m.attempt),
        Some(1)
    );
    h.event_recorded("SandboxChanged", Duration::from_secs(2))
        .await;
    eventually(Duration::from_secs(2), "restartCount 1", || {
        h.container_status("sandbox", "main")
            .filter(|c| c["restartCount"] == 1 && c["state"]["running"].is_object())
    })
    .await;
    h.stop().await;
}

/// A liveness probe that starts failing: after `failureThreshold` failures in a row the
/// container is killed (`Killing`, `Unhealthy` events) and started again, as the Go prober and
/// pod worker do; the initial delay counts from the container's start on the same clock.
#[tokio::test(start_paused = true)]
async fn a_failing_liveness_probe_restarts_the_container() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod(
        "live",
        "Always",
        json!({"containers": [{"name": "main", "image": "busybox:1.36",
               "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"],
               "livenessProbe": {"exec": {"command": ["false"]}, "initialDelaySeconds": 5,
                                 "periodSeconds": 2, "failureThreshold": 3,
                                 "terminationGracePeriodSeconds": 3}}]}),
    );
    h.apply(&p).await;
    let c0 = eventually(Duration::from_secs(5), "running", || {
        h.runtime.running("main")
    })
    .await;
    let started = Instant::now();
    h.runtime.exec_exit_code("main", 1);
    let c1 = eventually(Duration::from_secs(30), "restarted", || {
        running_other(&h, "main", &c0.id)
    })
    .await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(8) && took < Duration::from_secs(14),
        "killed {took:?} after the probe started failing (delay 5 s, 3 failures 2 s apart)"
    );
    assert_eq!(attempt(&c1), 1);
    assert!(h.runtime.count("ExecSync") >= 3);
    eventually(
        Duration::from_secs(2),
        "Unhealthy and Killing events",
        || {
            let e = h.events();
            (e.iter().any(|x| x == "Unhealthy") && e.iter().any(|x| x == "Killing")).then_some(())
        },
    )
    .await;
    h.stop().await;
}

/// Kubelet admission (k/k `lifecycle/predicate.go`): a pod asking for a host port an admitted
/// pod holds is refused, Failed with reason `NodePorts`, never started; a pod whose requests do
/// not fit is refused with `OutOfcpu`; a pod that fits next to them runs.
#[tokio::test(start_paused = true)]
async fn pods_that_do_not_fit_the_node_are_rejected_at_admission() {
    let h = Harness::start(fake_runtime()).await;
    let port = json!({"containers": [{"name": "main", "image": "busybox:1.36",
        "command": ["sleep", "3600"], "ports": [{"containerPort": 80, "hostPort": 8080}]}]});
    let first = pod("first", "Always", port.clone());
    h.apply(&first).await;
    eventually(Duration::from_secs(10), "the first pod runs", || {
        (h.phase("first").as_deref() == Some("Running")).then_some(())
    })
    .await;
    let second = pod("second", "Always", port);
    h.apply(&second).await;
    let st = h
        .status_in_phase("second", "Failed", Duration::from_secs(10))
        .await;
    assert_eq!(st["reason"], "NodePorts");
    assert_eq!(
        st["message"],
        "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
    );
    let big = pod(
        "big",
        "Always",
        json!({"containers": [{"name": "main", "image": "busybox:1.36",
            "resources": {"requests": {"cpu": "3"}}}]}),
    );
    h.apply(&big).await;
    let st = h
        .status_in_phase("big", "Failed", Duration::from_secs(10))
        .await;
    assert_eq!(st["reason"], "OutOfcpu");
    assert!(
        h.events().iter().any(|e| e == "NodePorts"),
        "{:?}",
        h.events()
    );
    let third = pod("third", "Always", json!({}));
    h.apply(&third).await;
    eventually(Duration::from_secs(10), "a pod that fits runs", || {
        (h.phase("third").as_deref() == Some("Running")).then_some(())
    })
    .await;
    assert_eq!(
        h.runtime.count("RunPodSandbox"),
        2,
        "{:?}",
        h.runtime.calls()
    );
    h.stop().await;
}

/// `activeDeadlineSeconds` (k/k `active_deadline.go`): a running pod is stopped once it has
/// been active that long, Failed with reason `DeadlineExceeded`, its container killed; the field
/// set later on a running pod (an update) counts from the same start time.
#[tokio::test(start_paused = true)]
async fn a_pod_past_its_active_deadline_is_stopped_and_failed() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("deadline", "Always", json!({"activeDeadlineSeconds": 5}));
    h.apply(&p).await;
    eventually(Duration::from_secs(10), "the pod runs", || {
        (h.phase("deadline").as_deref() == Some("Running")).then_some(())
    })
    .await;
    let started = Instant::now();
    let st = h
        .status_in_phase("deadline", "Failed", Duration::from_secs(20))
        .await;
    assert!(
        started.elapsed() <= Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(st["reason"], "DeadlineExceeded");
    assert_eq!(
        st["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    assert!(
        h.runtime.running("main").is_none(),
        "the container was killed"
    );
    assert!(
        h.events().iter().any(|e| e == "DeadlineExceeded"),
        "{:?}",
        h.events()
    );

    // set on a running pod through an update
    let later = pod("later", "Always", json!({}));
    h.apply(&later).await;
    eventually(Duration::from_secs(10), "the second pod runs", || {
        (h.phase("later").as_deref() == Some("Running")).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(h.phase("later").as_deref(), Some("Running"));
    let mut updated = pod("later", "Always", json!({"activeDeadlineSeconds": 2}));
    updated.metadata.generation = Some(2);
    h.pods.send(PodEvent::Apply(updated.into())).await.unwrap();
    let st = h
        .status_in_phase("later", "Failed", Duration::from_secs(5))
        .await;
    assert_eq!(st["reason"], "DeadlineExceeded");
    assert_eq!(st["observedGeneration"], 2, "{st}");
    h.stop().await;
}

/// The image's status is read once per container start, and its user decides `runAsNonRoot`
/// from that read (the Go kubelet reads it twice: `EnsureImageExists`, then `getImageUser`). A
/// pulled image is read once more after the pull, for the `Pulled` event's size; that read
/// gives the user too.
#[tokio::test(start_paused = true)]
async fn the_image_status_is_read_once_per_start_and_gives_run_as_non_root_its_user() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.add_image("busybox:1.36");
    h.runtime.add_image_with_uid("app:1", 1000);
    let non_root = |name: &str, image: &str| {
        pod(
            name,
            "Always",
            json!({"containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                                   "command": ["sleep", "3600"],
                                   "securityContext": {"runAsNonRoot": true}}]}),
        )
    };
    // the image runs as uid 1000: it starts, after one ImageStatus
    h.apply(&non_root("user", "app:1")).await;
    h.status_in_phase("user", "Running", Duration::from_secs(10))
        .await;
    assert_eq!(h.runtime.count("ImageStatus"), 1, "{:?}", h.runtime.calls());
    // busybox runs as root: refused, as the Go kubelet words it
    h.apply(&non_root("root", "busybox:1.36")).await;
    let (_, message) = eventually(Duration::from_secs(5), "CreateContainerConfigError", || {
        h.waiting("root", "main")
            .filter(|(r, _)| r == "CreateContainerConfigError")
    })
    .await;
    assert_eq!(
        message,
        "container has runAsNonRoot and image will run as root (pod: \"root_ns(uid-root)\", container: main)"
    );
    assert_eq!(h.runtime.count("ImageStatus"), 2, "{:?}", h.runtime.calls());
    // pulled: once before the pull, once after it (for the size), none for the user
    h.apply(&pod(
        "pulled",
        "Always",
        json!({"containers": [{"name": "main", "image": "new:1",
        "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}]}),
    ))
    .await;
    h.status_in_phase("pulled", "Running", Duration::from_secs(10))
        .await;
    assert_eq!(h.runtime.count("PullImage"), 1);
    assert_eq!(h.runtime.count("ImageStatus"), 4, "{:?}", h.runtime.calls());
    h.stop().await;
}
