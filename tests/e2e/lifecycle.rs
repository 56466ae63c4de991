//! End-to-end tests of pod lifecycle parity with the Go kubelet (issue 3), against the real
//! local cluster (hack/local-up.sh): crash back-off gaps, OnFailure restarts, init containers as
//! `kubectl get pods` shows them, probes, OOMKilled, preStop and the termination grace period.

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use std::time::{Duration, Instant};

fn pod_from(json: serde_json::Value) -> Pod {
    serde_json::from_value(json).expect("a valid pod")
}

fn started_at_secs(p: &Pod, name: &str) -> Option<i64> {
    let cs = container_status(p, name)?;
    cs.last_state
        .as_ref()?
        .terminated
        .as_ref()?
        .started_at
        .as_ref()
        .map(|t| t.0.as_second())
}

/// `kubectl get pod` STATUS column of one pod.
fn status_column(ns: &str, name: &str) -> String {
    let out = kubectl_raw(&["-n", ns, "get", "pod", name]);
    if out.stdout.trim().is_empty() {
        return String::new();
    }
    Table::parse(&out.stdout)
        .rows
        .first()
        .and_then(|r| r.get("STATUS").cloned())
        .unwrap_or_default()
}

async fn events_of(api_client: &kube::Client, ns: &str, uid: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(api_client.clone(), ns);
    let list = events
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .expect("listing events");
    list.items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn crash_loop_back_off_gaps_grow_ten_twenty_forty_seconds() {
    let client = client().await;
    let ns = TestNs::new(&client, "crashgaps").await;
    let api = ns.pods();
    ns.create_pod(&busybox_pod("crash", "exit 1", "Always", Some(1)))
        .await;
    // Record each instance's start time as it moves to lastState, until 4 restarts happened.
    let mut starts: std::collections::BTreeMap<i32, i64> = Default::default();
    let mut saw_crashloop = false;
    watch_pod_until(
        &api,
        "crash",
        Duration::from_secs(150),
        "four restarts",
        |p| {
            if waiting_reason(p, "main") == Some("CrashLoopBackOff") {
                saw_crashloop = true;
                let msg = container_status(p, "main")
                    .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.message.clone())
                    .unwrap_or_default();
                assert!(
                    msg.starts_with("back-off ")
                        && msg.contains("restarting failed container=main pod=crash_"),
                    "CrashLoopBackOff message has the Go kubelet's format: {msg}"
                );
            }
            if let Some(cs) = container_status(p, "main") {
                let st = cs.state.clone().unwrap_or_default();
                // While waiting (back-off), lastState is the newest instance; while running or
                // terminated, lastState is the one before it.
                if let Some(t) = started_at_secs(p, "main") {
                    let idx = if st.waiting.is_some() {
                        cs.restart_count
                    } else {
                        cs.restart_count - 1
                    };
                    if idx >= 0 {
                        starts.entry(idx).or_insert(t);
                    }
                }
                if let Some(t) = st.terminated.as_ref().and_then(|t| t.started_at.as_ref()) {
                    starts.entry(cs.restart_count).or_insert(t.0.as_second());
                }
                if let Some(t) = st.running.as_ref().and_then(|r| r.started_at.as_ref()) {
                    starts.entry(cs.restart_count).or_insert(t.0.as_second());
                }
            }
            (0..4).all(|i| starts.contains_key(&i))
        },
    )
    .await;
    assert!(saw_crashloop, "the container was shown in CrashLoopBackOff");
    let t: Vec<i64> = (0..4).filter_map(|i| starts.get(&i).copied()).collect();
    assert_eq!(t.len(), 4, "start times of instances 0..3: {starts:?}");
    let gaps: Vec<i64> = t.windows(2).map(|w| w[1] - w[0]).collect();
    println!("restart gaps (s): {gaps:?}");
    // Instance 1 starts at once; then 10 s, then 20 s of back-off (plus run time and sync slack).
    assert!(gaps[0] <= 3, "first restart is immediate: {gaps:?}");
    assert!(
        (9..=16).contains(&gaps[1]),
        "second gap about 10 s: {gaps:?}"
    );
    assert!(
        (19..=28).contains(&gaps[2]),
        "third gap about 20 s: {gaps:?}"
    );
    assert!(gaps[2] > gaps[1], "gaps grow: {gaps:?}");
    ns.delete().await;
}

#[tokio::test]
async fn on_failure_restarts_until_success_then_pod_succeeds() {
    let client = client().await;
    let ns = TestNs::new(&client, "onfailure").await;
    let api = ns.pods();
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "retry"},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": "OnFailure",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "state", "emptyDir": {}}],
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; [ $n -ge 3 ] && exit 0; exit 1"],
                "volumeMounts": [{"name": "state", "mountPath": "/state"}],
            }],
        },
    }));
    ns.create_pod(&pod).await;
    let p = watch_pod_until(
        &api,
        "retry",
        Duration::from_secs(90),
        "phase Succeeded",
        |p| phase(p) == "Succeeded",
    )
    .await;
    let cs = container_status(&p, "main").expect("status");
    assert_eq!(cs.restart_count, 2, "two failures, then success");
    let t = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .expect("terminated");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert_eq!(status_column(&ns.name, "retry"), "Completed");
    ns.delete().await;
}

#[tokio::test]
async fn init_containers_show_init_progress_then_running() {
    let client = client().await;
    let ns = TestNs::new(&client, "inits").await;
    let api = ns.pods();
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "inits"},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "initContainers": [
                {"name": "first", "image": "busybox", "command": ["sleep", "4"]},
                {"name": "second", "image": "busybox", "command": ["sleep", "4"]},
            ],
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
        },
    }));
    ns.create_pod(&pod).await;
    let mut seen: Vec<String> = vec![];
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let s = status_column(&ns.name, "inits");
        if !s.is_empty() && seen.last() != Some(&s) {
            seen.push(s.clone());
        }
        if s == "Running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    println!("STATUS sequence: {seen:?}");
    let pos = |w: &str| seen.iter().position(|s| s == w);
    let (a, b, c) = (pos("Init:0/2"), pos("Init:1/2"), pos("Running"));
    assert!(
        a.is_some() && b.is_some() && c.is_some(),
        "saw Init:0/2, Init:1/2 and Running: {seen:?}\n{}",
        diagnose(&ns.name, "inits")
    );
    assert!(a < b && b < c, "in that order: {seen:?}");
    let p = api.get("inits").await.unwrap();
    let init = p
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .as_ref()
        .expect("initContainerStatuses");
    assert!(init.iter().all(|s| s
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0 && t.reason.as_deref() == Some("Completed"))));
    assert_eq!(condition(&p, "Initialized"), Some("True"));

    // A failing init container with restartPolicy Never fails the pod.
    let bad = pod_from(serde_json::json!({
        "metadata": {"name": "badinit"},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": "Never",
            "initContainers": [{"name": "first", "image": "busybox", "command": ["sh", "-c", "exit 2"]}],
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
        },
    }));
    ns.create_pod(&bad).await;
    let p = watch_pod_until(
        &api,
        "badinit",
        Duration::from_secs(60),
        "phase Failed",
        |p| phase(p) == "Failed",
    )
    .await;
    assert_eq!(status_column(&ns.name, "badinit"), "Init:Error");
    assert_eq!(condition(&p, "Initialized"), Some("False"));
    assert!(
        container_status(&p, "main")
            .and_then(|c| c.state.as_ref()?.running.as_ref())
            .is_none(),
        "the app container never ran"
    );
    ns.delete().await;
}

#[tokio::test]
async fn readiness_probe_gates_ready_and_failing_liveness_restarts() {
    let client = client().await;
    let ns = TestNs::new(&client, "probes").await;
    let api = ns.pods();
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "probes"},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main", "image": "busybox",
                    "command": ["sh", "-c", "mkdir -p /www; (sleep 8; echo ok > /www/ready) & exec httpd -f -p 8080 -h /www"],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1},
                },
                {
                    "name": "live", "image": "busybox",
                    "command": ["sleep", "3600"],
                    "livenessProbe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 1, "failureThreshold": 2},
                },
            ],
        },
    }));
    let created = ns.create_pod(&pod).await;
    let started = Instant::now();
    // Running but not Ready while /ready is missing.
    let p = watch_pod_until(
        &api,
        "probes",
        Duration::from_secs(60),
        "main running",
        |p| {
            container_status(p, "main")
                .and_then(|c| c.state.as_ref()?.running.as_ref())
                .is_some()
        },
    )
    .await;
    assert_eq!(
        condition(&p, "Ready"),
        Some("False"),
        "not Ready before the readiness probe passes"
    );
    let p = watch_pod_until(&api, "probes", Duration::from_secs(60), "main ready", |p| {
        container_status(p, "main").is_some_and(|c| c.ready)
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "ready only after the file appeared ({:?})",
        started.elapsed()
    );
    assert!(container_status(&p, "main").unwrap().ready);
    // The liveness probe keeps failing: the container is restarted.
    watch_pod_until(
        &api,
        "probes",
        Duration::from_secs(60),
        "live restarted",
        |p| container_status(p, "live").is_some_and(|c| c.restart_count >= 1),
    )
    .await;
    let events = events_of(&client, &ns.name, &uid(&created)).await;
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Unhealthy" && m.starts_with("Liveness probe failed: ")),
        "Unhealthy event names the liveness probe: {events:?}"
    );
    assert!(
        events.iter().any(|(r, m)| r == "Unhealthy"
            && m == "Readiness probe failed: HTTP probe failed with statuscode: 404"),
        "Unhealthy event names the readiness probe: {events:?}"
    );
    assert!(
        events.iter().any(|(r, m)| r == "Killing"
            && m == "Container live failed liveness probe, will be restarted"),
        "Killing event for the liveness failure: {events:?}"
    );
    ns.delete().await;
}

#[tokio::test]
async fn container_over_its_memory_limit_is_oom_killed() {
    let client = client().await;
    let ns = TestNs::new(&client, "oom").await;
    let api = ns.pods();
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "oom"},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "x=0123456789abcdef0123456789abcdef; while true; do x=$x$x; done"],
                "resources": {"limits": {"memory": "32Mi"}},
            }],
        },
    }));
    ns.create_pod(&pod).await;
    let p = watch_pod_until(&api, "oom", Duration::from_secs(60), "phase Failed", |p| {
        phase(p) == "Failed"
    })
    .await;
    let t = container_status(&p, "main")
        .and_then(|c| c.state.as_ref()?.terminated.clone())
        .expect("terminated");
    assert_eq!(t.reason.as_deref(), Some("OOMKilled"), "{t:?}");
    assert_eq!(t.exit_code, 137);
    assert_eq!(status_column(&ns.name, "oom"), "OOMKilled");
    ns.delete().await;
}

#[tokio::test]
async fn pre_stop_runs_before_sigterm_and_sigterm_ignorers_are_killed_after_the_grace_period() {
    let client = client().await;
    let ns = TestNs::new(&client, "prestop").await;
    let api = ns.pods();
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "hooks"},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "trap 'echo got-term; sleep 1; exit 0' TERM; echo up; while true; do sleep 0.2; done"],
                "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop-ran > /proc/1/fd/1; sleep 1"]}}},
            }],
        },
    }));
    let created = ns.create_pod(&pod).await;
    wait_running(&api, "hooks").await;
    let log = format!(
        "/var/log/pods/{}_hooks_{}/main/0.log",
        ns.name,
        uid(&created)
    );
    api.delete("hooks", &DeleteParams::default())
        .await
        .expect("delete");
    // Read the CRI log while the pod terminates (the directory goes when the pod is removed).
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match std::fs::read_to_string(&log) {
            Ok(s) => {
                last = s;
                if last.contains("got-term") {
                    break;
                }
            }
            Err(_) if !last.is_empty() => break,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pre = last.find("prestop-ran");
    let term = last.find("got-term");
    assert!(
        pre.is_some() && term.is_some(),
        "both the preStop line and the TERM line are in the log:\n{last}"
    );
    assert!(pre < term, "preStop ran before SIGTERM:\n{last}");

    // A process that ignores SIGTERM is SIGKILLed when the grace period runs out.
    let stubborn = busybox_pod(
        "stubborn",
        "trap '' TERM; while true; do sleep 0.2; done",
        "Always",
        Some(4),
    );
    ns.create_pod(&stubborn).await;
    wait_running(&api, "stubborn").await;
    let t0 = Instant::now();
    let out = kubectl_raw(&["-n", &ns.name, "delete", "pod", "stubborn", "--timeout=60s"]);
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "kubectl delete: {}{}",
        out.stdout,
        out.stderr
    );
    println!("delete of a SIGTERM-ignoring pod with grace 4 s took {took:?}");
    assert!(
        took >= Duration::from_millis(3500),
        "waited for the grace period: {took:?}"
    );
    assert!(
        took < Duration::from_secs(15),
        "killed soon after the grace period: {took:?}"
    );
    ns.delete().await;
}
