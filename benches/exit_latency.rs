//! Exit → status latency benchmark (issue 3) against the local cluster of hack/local-up.sh.
//! Not a test: it prints figures and asserts nothing about them.
//!
//! N pods (default 10, BENCH_EXIT_PODS) each print a line and exit 0 a few seconds after start.
//! The exit time is the CRI log timestamp of that last line (containerd stamps it with
//! nanosecond precision as the process writes it, just before it exits); the status time is when
//! a watch on the API server first shows the container terminated. Prints p50/p99/max.
//!
//! Run: `cargo bench --bench exit_latency` (with the cluster up).

#[path = "../tests/e2e/common.rs"]
mod common;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn parse_rfc3339_nanos(ts: &str) -> Option<f64> {
    let t: k8s_openapi::jiff::Timestamp = ts.parse().ok()?;
    Some(t.as_nanosecond() as f64 / 1e9)
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("BENCH_EXIT_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let client = client().await;
    let ns = TestNs::new(&client, "bench-exit").await;
    let api: Api<Pod> = ns.pods();
    let mut watch = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    let mut uids: HashMap<String, String> = HashMap::new();
    for i in 0..n {
        let name = format!("exit-{i}");
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": env().node_name(),
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36",
                    "command": ["sh", "-c", format!("sleep {}; echo bye; exit 0", 3 + i % 3)]}],
            },
        }))
        .unwrap();
        let p = api
            .create(&PostParams::default(), &pod)
            .await
            .expect("create");
        uids.insert(name, p.metadata.uid.unwrap());
    }
    let mut seen: HashMap<String, f64> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < n {
        let ev = tokio::time::timeout_at(deadline, watch.next()).await;
        let Ok(Some(Ok(ev))) = ev else { break };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        if let WatchEvent::Modified(p) | WatchEvent::Added(p) = ev {
            let name = p.metadata.name.clone().unwrap_or_default();
            let done = container_status(&p, "main")
                .and_then(|c| c.state.as_ref()?.terminated.as_ref())
                .is_some();
            if done {
                seen.entry(name).or_insert(now);
            }
        }
    }
    let mut lat: Vec<f64> = vec![];
    for (name, seen_at) in &seen {
        let log = format!(
            "/var/log/pods/{}_{}_{}/main/0.log",
            ns.name, name, uids[name]
        );
        let Ok(text) = std::fs::read_to_string(&log) else {
            continue;
        };
        let Some(last) = text.lines().rev().find(|l| l.ends_with(" bye")) else {
            continue;
        };
        let Some(ts) = last.split(' ').next().and_then(parse_rfc3339_nanos) else {
            continue;
        };
        lat.push((seen_at - ts) * 1000.0);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "exit → terminated status seen through a watch, {} pods:",
        lat.len()
    );
    if !lat.is_empty() {
        println!(
            "  p50 {:.0} ms   p99 {:.0} ms   max {:.0} ms   min {:.0} ms",
            percentile(&lat, 50.0),
            percentile(&lat, 99.0),
            lat[lat.len() - 1],
            lat[0]
        );
    }
    ns.delete().await;
}
