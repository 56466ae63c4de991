//! End-to-end: deckhand through containerd restarts (issue 14, first fault), against the real
//! local cluster. containerd is stopped with `hack/local-up.sh stop-containerd` (SIGTERM, then in
//! a second round `--kill`, SIGKILL) and started again with `start-containerd`; its shims, and so
//! the containers, keep running, as they do when systemd restarts containerd on a node. This module
//! holds one test so that nothing else runs while containerd is away.
//!
//! What a user of the Go kubelet expects, and what is checked: no running container is restarted
//! because of the outage, no pod changes phase or readiness, a restart count never goes back,
//! crash-looping pods keep being restarted afterwards, a pod created during the outage starts
//! once containerd is back, deckhand stays the same process, and its log says so in a few lines
//! rather than a flood.

use crate::common::*;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long containerd stays away in each round.
const OUTAGE: Duration = Duration::from_secs(10);

/// Pods that run `sleep` and must keep their first container throughout.
const STEADY: &[&str] = &["steady-0", "steady-1", "steady-2", "steady-3"];
/// Pods whose container exits after a second, restarted with back-off.
const CRASHING: &[&str] = &["crash-0", "crash-1"];

/// Starts containerd again however the test ends, so later tests find the cluster up.
struct StartOnDrop(bool);

impl Drop for StartOnDrop {
    fn drop(&mut self) {
        if self.0 {
            local_up(&["start-containerd"]);
        }
    }
}

/// What the watch saw go wrong, per pod.
#[derive(Default)]
struct Seen {
    /// `pod: restartCount a → b` with b < a.
    went_back: Vec<String>,
    /// A steady pod seen in another phase, not ready, or with another container.
    steady_changed: Vec<String>,
    /// Highest restart count per crashing pod.
    max_restarts: BTreeMap<String, i32>,
}

fn restart_count(p: &Pod) -> i32 {
    container_status(p, "main").map_or(0, |c| c.restart_count)
}

fn main_container_id(p: &Pod) -> Option<String> {
    container_status(p, "main").and_then(|c| c.container_id.clone())
}

/// Lines of deckhand's log after byte `from` that mention containerd or the runtime at WARN or
/// ERROR.
fn runtime_complaints(from: u64) -> Vec<String> {
    let text = std::fs::read(env().get("DECKHAND_LOG")).unwrap_or_default();
    let tail = String::from_utf8_lossy(&text[(from as usize).min(text.len())..]).into_owned();
    tail.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .map(str::to_string)
        .collect()
}

fn log_len() -> u64 {
    std::fs::metadata(env().get("DECKHAND_LOG")).map_or(0, |m| m.len())
}

#[tokio::test]
async fn pods_survive_containerd_restarts() {
    let client = client().await;
    let ns = TestNs::new(&client, "containerd-restart").await;
    let api = ns.pods();
    for name in STEADY {
        ns.create_pod(&busybox_pod(name, "exec sleep 3600", "Always", Some(1)))
            .await;
    }
    for name in CRASHING {
        ns.create_pod(&busybox_pod(name, "sleep 1; exit 1", "Always", Some(1)))
            .await;
    }
    let mut first_ids = BTreeMap::new();
    for name in STEADY {
        let p = wait_running(&api, name).await;
        first_ids.insert(name.to_string(), main_container_id(&p).unwrap());
    }
    for name in CRASHING {
        wait_pod(&api, name, "a first restart", |p| restart_count(p) >= 1).await;
    }

    // Watch every pod of the namespace for the whole test.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watch = {
        let (api, seen, first_ids) = (api.clone(), seen.clone(), first_ids.clone());
        tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(stream);
            let mut last: BTreeMap<String, i32> = BTreeMap::new();
            while let Ok(Some(p)) = stream.try_next().await {
                let name = p.metadata.name.clone().unwrap_or_default();
                let n = restart_count(&p);
                let mut s = seen.lock().unwrap();
                if let Some(prev) = last.get(&name) {
                    if n < *prev {
                        s.went_back
                            .push(format!("{name}: restartCount {prev} → {n}"));
                    }
                }
                last.insert(name.clone(), n);
                if let Some(id) = first_ids.get(&name) {
                    let ready = container_status(&p, "main").is_some_and(|c| c.ready);
                    if phase(&p) != "Running"
                        || !ready
                        || main_container_id(&p).as_ref() != Some(id)
                    {
                        s.steady_changed.push(format!(
                            "{name}: phase {} ready {ready} container {:?} (first {id})",
                            phase(&p),
                            main_container_id(&p)
                        ));
                    }
                }
                if CRASHING.contains(&name.as_str()) {
                    let m = s.max_restarts.entry(name).or_default();
                    *m = (*m).max(n);
                }
            }
        })
    };

    let pid = deckhand_pid();
    let log_from = log_len();
    for (round, how) in [("term", None), ("kill", Some("--kill"))] {
        let restarts_before: BTreeMap<String, i32> = seen.lock().unwrap().max_restarts.clone();
        let mut stop = vec!["stop-containerd"];
        stop.extend(how);
        local_up(&stop);
        let mut guard = StartOnDrop(true);
        let during = format!("during-{round}");
        ns.create_pod(&busybox_pod(&during, "exec sleep 3600", "Always", Some(1)))
            .await;
        tokio::time::sleep(OUTAGE).await;
        local_up(&["start-containerd"]);
        guard.0 = false;
        let back = Instant::now();
        wait_running(&api, &during).await;
        let started = back.elapsed();
        println!("round {round}: {during} Running {started:?} after containerd was back");
        // The first answer from the runtime wakes every pod worker; without that, the pod waited
        // for its worker's 10 s failure back-off.
        assert!(
            started < Duration::from_secs(8),
            "{during} started {started:?} after containerd was back\n{}",
            diagnose(&ns.name, &during)
        );
        assert!(
            process_alive(pid) && deckhand_pid() == pid,
            "deckhand (pid {pid}) did not stay the same process through containerd's restart"
        );
        // crash-looping pods keep being restarted once containerd is back
        for name in CRASHING {
            let before = restarts_before.get(*name).copied().unwrap_or(0);
            watch_pod_until(
                &api,
                name,
                Duration::from_secs(90),
                "another restart after containerd came back",
                |p| restart_count(p) > before,
            )
            .await;
        }
    }

    // every steady pod still runs its first container
    for name in STEADY {
        let p = api.get(name).await.unwrap();
        let cs = container_status(&p, "main").unwrap();
        assert_eq!(
            cs.container_id.as_ref(),
            first_ids.get(*name),
            "{name} got another container\n{}",
            diagnose(&ns.name, name)
        );
        assert_eq!(cs.restart_count, 0, "{name} was restarted");
        assert_eq!(
            containers_of(&uid(&p)).len(),
            1,
            "{name}: more than one container in containerd\n{}",
            diagnose(&ns.name, name)
        );
        assert_eq!(sandboxes_of(&uid(&p)).len(), 1, "{name}: a second sandbox");
    }
    watch.abort();
    let seen = seen.lock().unwrap();
    assert!(
        seen.went_back.is_empty(),
        "restart counts went back: {:?}",
        seen.went_back
    );
    assert!(
        seen.steady_changed.is_empty(),
        "steady pods changed during the outages: {:?}",
        seen.steady_changed
    );
    // A few lines per outage (the event stream and the CRI calls that failed), not a flood.
    let complaints = runtime_complaints(log_from);
    println!(
        "deckhand WARN/ERROR lines during two outages: {}\n{}",
        complaints.len(),
        complaints.join("\n")
    );
    assert!(
        complaints.len() <= 16,
        "deckhand logged {} WARN/ERROR lines for two {OUTAGE:?} containerd outages",
        complaints.len()
    );
    ns.delete().await;
}
