//! Pod start benchmark against the local cluster of hack/local-up.sh (run through hack/bench.sh or
//! `cargo bench --bench pod_start`). Not a test: it prints figures and asserts nothing about them.
//!
//! 1. deckhand's resident memory (VmRSS) while idle;
//! 2. N pods (default 30, BENCH_PODS) created at once in a fresh namespace; per pod the latency
//!    from the return of its create call to the first watch event showing it Running;
//! 3. deckhand's VmRSS with the N pods running;
//! 4. the time from the delete calls to the last pod gone from the API (watch), and to the last
//!    sandbox gone from containerd.

#[path = "../tests/e2e/common.rs"]
mod common;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const IMAGE: &str = "busybox:1.36";

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// VmRSS sampled `n` times, 500 ms apart; the median.
async fn rss_median(pid: i32, n: usize) -> u64 {
    let mut v = Vec::new();
    for i in 0..n {
        if i > 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        v.push(rss_kib(pid));
    }
    v.sort();
    v[v.len() / 2]
}

fn bench_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "deckhand-bench"}},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                // sleep, exiting at once on SIGTERM (PID 1 ignores signals it does not trap)
                "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
            }],
        },
    }))
    .unwrap()
}

enum Seen {
    Running(String, Instant),
    Deleted(String, Instant),
}

/// Watches the namespace's pods from `rv`, reporting each pod's first Running and its deletion.
fn spawn_watch(api: Api<Pod>, rv: String, tx: mpsc::UnboundedSender<Seen>) {
    tokio::spawn(async move {
        let mut running: HashMap<String, bool> = HashMap::new();
        let mut rv = rv;
        loop {
            let wp = WatchParams::default().timeout(290);
            let stream = match api.watch(&wp, &rv).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("watch: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let now = Instant::now();
                match ev {
                    Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                        rv = p.metadata.resource_version.clone().unwrap_or(rv);
                        let name = p.metadata.name.clone().unwrap_or_default();
                        if phase(&p) == "Running" && !running.contains_key(&name) {
                            running.insert(name.clone(), true);
                            let _ = tx.send(Seen::Running(name, now));
                        }
                    }
                    Ok(WatchEvent::Deleted(p)) => {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let _ = tx.send(Seen::Deleted(name, now));
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Ok(WatchEvent::Error(e)) => {
                        eprintln!("watch error event: {e:?}");
                        break;
                    }
                    Err(e) => {
                        eprintln!("watch stream: {e}");
                        break;
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let env = env();
    let client = client().await;
    let pid = deckhand_pid();
    println!(
        "deckhand pod start benchmark: node {}, deckhand pid {pid}, {n} pods of {IMAGE}",
        env.node_name()
    );

    // The image is present beforehand: the figures are deckhand's and the runtime's, not a pull.
    crictl(&["pull", IMAGE]);

    let idle = rss_median(pid, 5).await;
    println!("deckhand RSS idle:                  {}", mib(idle));

    let ns = TestNs::new(&client, "bench").await;
    let api = ns.pods();
    let rv = api
        .list(&ListParams::default())
        .await
        .expect("listing pods")
        .metadata
        .resource_version
        .unwrap_or_default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    spawn_watch(api.clone(), rv, tx);

    // Create all pods at once.
    let names: Vec<String> = (0..n).map(|i| format!("bench-{i:02}")).collect();
    let t_create = Instant::now();
    let created: HashMap<String, Instant> = futures::future::join_all(names.iter().map(|name| {
        let api = api.clone();
        let pod = bench_pod(name);
        async move {
            api.create(&PostParams::default(), &pod)
                .await
                .unwrap_or_else(|e| panic!("creating pod {name}: {e}"));
            (name.clone(), Instant::now())
        }
    }))
    .await
    .into_iter()
    .collect();
    println!(
        "create calls:                       {} for {n} pods",
        ms(t_create.elapsed())
    );

    let mut running_at: HashMap<String, Instant> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while running_at.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Seen::Running(name, t))) => {
                running_at.insert(name, t);
            }
            Ok(Some(Seen::Deleted(name, _))) => panic!("pod {name} was deleted during the run"),
            Ok(None) => panic!("the watch ended"),
            Err(_) => panic!(
                "only {}/{n} pods Running after 300 s; e.g.:\n{}",
                running_at.len(),
                names
                    .iter()
                    .find(|p| !running_at.contains_key(*p))
                    .map(|p| diagnose(&ns.name, p))
                    .unwrap_or_default()
            ),
        }
    }
    let all_running = running_at.values().max().unwrap().duration_since(t_create);
    let mut lat: Vec<Duration> = names
        .iter()
        .map(|p| running_at[p].saturating_duration_since(created[p]))
        .collect();
    lat.sort();
    println!(
        "create→Running latency ({n} pods):   p50 {}   p90 {}   p99 {}   max {}   (min {})",
        ms(percentile(&lat, 50.0)),
        ms(percentile(&lat, 90.0)),
        ms(percentile(&lat, 99.0)),
        ms(*lat.last().unwrap()),
        ms(lat[0])
    );
    println!(
        "all {n} pods Running after:          {} from the first create call",
        ms(all_running)
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy = rss_median(pid, 5).await;
    println!("deckhand RSS with {n} running pods:  {}", mib(busy));

    // Delete them all at once (grace period 5 s; the containers exit on SIGTERM).
    let t_delete = Instant::now();
    futures::future::join_all(names.iter().map(|name| {
        let api = api.clone();
        async move {
            api.delete(name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting pod {name}: {e}"));
        }
    }))
    .await;
    let mut gone = 0;
    let mut last_gone = t_delete;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while gone < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Seen::Deleted(_, t))) => {
                gone += 1;
                last_gone = last_gone.max(t);
            }
            Ok(Some(Seen::Running(..))) => {}
            Ok(None) => panic!("the watch ended"),
            Err(_) => panic!("only {gone}/{n} pods gone from the API after 300 s"),
        }
    }
    println!(
        "delete→all {n} pods gone (API):      {}",
        ms(last_gone.duration_since(t_delete))
    );
    let label = format!("io.kubernetes.pod.namespace={}", ns.name);
    loop {
        if crictl_ids(&["pods", "--label", &label, "-q"]).is_empty() {
            break;
        }
        assert!(
            t_delete.elapsed() < Duration::from_secs(300),
            "sandboxes left in containerd after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "delete→all sandboxes gone (CRI):    {}",
        ms(t_delete.elapsed())
    );
    drop(rx);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_median(pid, 5).await;
    println!("deckhand RSS after the deletion:    {}", mib(after));
    if deckhand_pid() != pid {
        println!("WARNING: deckhand restarted during the benchmark (pid changed)");
    }
    ns.delete().await;
}
