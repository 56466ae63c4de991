//! The side-by-side node benchmark (issue 15), driven by `hack/bench.sh --peer go`: the same
//! procedure against whichever kubelet is the node now (deckhand or the Go kubelet), the
//! machine's limits measured without any kubelet, and a report that puts them side by side.
//! Not a test: it prints figures and asserts nothing about them.
//!
//! ```text
//! cargo bench --bench node -- round  --kubelet NAME --pid PID --round N --out FILE.json
//! cargo bench --bench node -- limit  --out FILE.json
//! cargo bench --bench node -- report FILE.json...
//! ```
//!
//! A round (one kubelet): idle RSS, threads and CPU; 30 pods created at once; 20 pods one at a
//! time (each created once the previous one is Running); 100 pods at one every 200 ms (the
//! kubemark density pace; on a 2-core machine it saturates containerd for both kubelets) with RSS, CPU, API writes per pod start and the mean
//! of each CRI operation (from the kubelet's own `kubelet_runtime_operations_duration_seconds`,
//! which both kubelets export); container exit → phase Failed seen in a watch, where the exit
//! time is `exited_at` from containerd's own `/tasks/exit` event. Latencies run from a create
//! call's return to the first watch event showing the pod Running; percentiles are nearest-rank.
//!
//! The limit: the same pod (sandbox + busybox container) run straight through CRI with
//! deckhand's CRI client and no kubelet, one at a time and 30 at once; and the API server's
//! write + watch round trip (a ConfigMap created, its watch event seen).
//!
//! The bench pods do not mount a service account token (`automountServiceAccountToken: false`),
//! so the figures compare the kubelets' own work with the CRI floor, not token requests.

#[path = "../tests/e2e/common.rs"]
mod common;

use common::*;
use containerd_client::events::TaskExit;
use containerd_client::services::v1::events_client::EventsClient;
use containerd_client::services::v1::SubscribeRequest;
use deckhand::cri::{api as cri, CriClient};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use prost::Message;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

const IMAGE: &str = "busybox:1.36";
const BURST_PODS: usize = 30;
const PACED_PODS: usize = 100;
const PACE: Duration = Duration::from_millis(200);
const EXIT_PODS: usize = 10;
const RAW_SINGLE: usize = 20;
/// Pods started one after another (each created once the previous one is Running): the
/// kubemark pace of issue 15, compared with [`RAW_SINGLE`] pods straight through CRI.
const SINGLE_PODS: usize = 20;

fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Nearest-rank percentile of unsorted values (milliseconds).
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank.min(s.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    stat_seconds(pid, 11)
}

/// Two adjacent time fields of /proc/<pid>/stat summed, in seconds: `first` counts the fields
/// after the command name from 0 (11: utime + stime; 13: cutime + cstime).
fn stat_seconds(pid: i32, first: usize) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name (which may hold spaces) start after the last ')'
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(first).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(first + 1).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / clock_ticks()
}

/// Clock ticks per second, the unit of /proc/<pid>/stat's times.
fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// CPU seconds used so far by every process whose command name is `comm` (`kube-apiserver`,
/// `etcd`), with those of its children that exited.
fn cpu_seconds_of(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == comm)
        })
        .map(|pid| cpu_seconds(pid) + stat_seconds(pid, 13))
        .sum()
}

/// The number of CPUs the machine's work shares.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The control plane's CPU seconds so far: the API server and etcd.
fn control_plane_cpu_seconds() -> f64 {
    cpu_seconds_of("kube-apiserver") + cpu_seconds_of("etcd")
}

/// containerd's CPU seconds so far: its own, and its reaped children's (the CNI plugins it runs
/// for each sandbox).
fn containerd_cpu_seconds() -> f64 {
    cpu_seconds_of("containerd")
}

/// The CPU seconds the whole machine has been busy so far, over all CPUs (`/proc/stat`: user,
/// nice, system, irq, softirq and steal, in clock ticks like /proc/<pid>/stat).
fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    busy / clock_ticks()
}

fn threads(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Fields of one read of `/proc/<pid>/status` in MiB (`VmRSS`, `RssAnon`, `RssFile`), 0 if absent.
fn status_mib<const N: usize>(pid: i32, fields: [&str; N]) -> [f64; N] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    fields.map(|field| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    })
}

/// Median VmRSS in MiB of `n` samples `every` apart.
async fn rss_mib(pid: i32, n: usize, every: Duration) -> f64 {
    rss_parts_mib(pid, n, every).await.0
}

/// Medians in MiB of `n` samples `every` apart: VmRSS, and its two parts, RssAnon (heap and
/// stacks) and RssFile (the binary's code and read-only data, mapped from the page cache). How
/// much of the binary RssFile counts depends on the page cache's folio sizes: a binary just
/// written (built or installed) sits in large folios, each mapped whole.
async fn rss_parts_mib(pid: i32, n: usize, every: Duration) -> (f64, f64, f64) {
    let (mut rss, mut anon, mut file) = (vec![], vec![], vec![]);
    for i in 0..n {
        if i > 0 {
            tokio::time::sleep(every).await;
        }
        let [r, a, f] = status_mib(pid, ["VmRSS", "RssAnon", "RssFile"]);
        rss.push(r);
        anon.push(a);
        file.push(f);
    }
    (pct(&rss, 50.0), pct(&anon, 50.0), pct(&file, 50.0))
}

/// CPU of `pid` over `d`, in millicores.
async fn cpu_millicores(pid: i32, d: Duration) -> f64 {
    let c0 = cpu_seconds(pid);
    let t0 = Instant::now();
    tokio::time::sleep(d).await;
    (cpu_seconds(pid) - c0) / t0.elapsed().as_secs_f64() * 1000.0
}

fn bench_pod(name: &str, command: &str, restart_policy: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "deckhand-bench"}},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", command]}],
        },
    }))
    .unwrap()
}

/// What the namespace watch saw of one pod.
enum Seen {
    /// First Running with every container running, with its container IDs.
    Running(String, Instant, Vec<String>),
    /// First phase Failed (wall clock, seconds since the epoch).
    Failed(String, f64),
    Deleted,
}

fn spawn_watch(api: Api<Pod>, rv: String, tx: mpsc::UnboundedSender<Seen>) {
    tokio::spawn(async move {
        let mut rv = rv;
        let mut running: std::collections::HashSet<String> = Default::default();
        let mut failed: std::collections::HashSet<String> = Default::default();
        loop {
            let stream = match api.watch(&WatchParams::default().timeout(290), &rv).await {
                Ok(s) => s,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let (now, wall) = (Instant::now(), now_unix());
                match ev {
                    Ok(WatchEvent::Added(p)) | Ok(WatchEvent::Modified(p)) => {
                        rv = p.metadata.resource_version.clone().unwrap_or(rv);
                        let name = p.metadata.name.clone().unwrap_or_default();
                        let st = p.status.clone().unwrap_or_default();
                        let cs = st.container_statuses.unwrap_or_default();
                        let all_running = !cs.is_empty()
                            && cs
                                .iter()
                                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
                        if st.phase.as_deref() == Some("Running")
                            && all_running
                            && running.insert(name.clone())
                        {
                            let ids = cs
                                .iter()
                                .filter_map(|c| c.container_id.clone())
                                .map(|id| id.rsplit("://").next().unwrap_or("").to_string())
                                .collect();
                            let _ = tx.send(Seen::Running(name.clone(), now, ids));
                        }
                        if st.phase.as_deref() == Some("Failed") && failed.insert(name.clone()) {
                            let _ = tx.send(Seen::Failed(name, wall));
                        }
                    }
                    Ok(WatchEvent::Deleted(_)) => {
                        let _ = tx.send(Seen::Deleted);
                    }
                    Ok(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    _ => break,
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
}

/// A namespace with a watch on its pods.
struct Run {
    ns: TestNs,
    api: Api<Pod>,
    rx: mpsc::UnboundedReceiver<Seen>,
}

impl Run {
    async fn new(client: &kube::Client, what: &str) -> Run {
        let ns = TestNs::new(client, what).await;
        let api = ns.pods();
        let rv = api
            .list(&ListParams::default())
            .await
            .expect("listing pods")
            .metadata
            .resource_version
            .unwrap_or_default();
        let (tx, rx) = mpsc::unbounded_channel();
        spawn_watch(api.clone(), rv, tx);
        Run { ns, api, rx }
    }

    async fn create(&self, pod: &Pod) -> Instant {
        self.api
            .create(&PostParams::default(), pod)
            .await
            .unwrap_or_else(|e| panic!("creating a bench pod: {e}"));
        Instant::now()
    }

    /// Waits until every pod of `names` was seen Running; their times and container IDs.
    async fn wait_running(&mut self, names: &[String]) -> HashMap<String, (Instant, Vec<String>)> {
        let mut out = HashMap::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        while names.iter().any(|n| !out.contains_key(n)) {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Seen::Running(n, t, ids))) => {
                    out.insert(n, (t, ids));
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!("the watch ended"),
                Err(_) => panic!(
                    "only {}/{} pods Running after 300 s; e.g.:\n{}",
                    out.len(),
                    names.len(),
                    names
                        .iter()
                        .find(|p| !out.contains_key(*p))
                        .map(|p| diagnose(&self.ns.name, p))
                        .unwrap_or_default()
                ),
            }
        }
        out
    }

    /// Deletes every pod and waits until they are gone from the API and their sandboxes from
    /// containerd.
    async fn delete_all(&mut self, names: &[String]) {
        futures::future::join_all(names.iter().map(|n| {
            let api = self.api.clone();
            async move {
                let _ = api.delete(n, &DeleteParams::default()).await;
            }
        }))
        .await;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let left = self
                .api
                .list(&ListParams::default())
                .await
                .map(|l| l.items.len())
                .unwrap_or(1);
            let label = format!("io.kubernetes.pod.namespace={}", self.ns.name);
            if left == 0 && crictl_ids(&["pods", "--label", &label, "-q"]).is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "bench pods left after 300 s");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        while self.rx.try_recv().is_ok() {}
    }
}

/// `name{labels} value` lines of a Prometheus text exposition whose name is `metric`, as
/// (label text, value).
fn samples<'a>(text: &'a str, metric: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(metric)?;
            let (labels, value) = if let Some(r) = rest.strip_prefix('{') {
                let (labels, v) = r.split_once('}')?;
                (labels, v)
            } else if rest.starts_with(' ') {
                ("", rest)
            } else {
                return None;
            };
            Some((labels, value.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

async fn raw_get(client: &kube::Client, path: &str) -> String {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    client.request_text(req).await.unwrap_or_default()
}

/// The API server's count of pod status writes (PATCH and PUT of pods/status).
async fn status_writes(client: &kube::Client) -> f64 {
    let text = raw_get(client, "/metrics").await;
    samples(&text, "apiserver_request_total")
        .into_iter()
        .filter(|(l, _)| {
            label(l, "resource") == Some("pods")
                && label(l, "subresource") == Some("status")
                && matches!(
                    label(l, "verb"),
                    Some("PATCH") | Some("PUT") | Some("APPLY")
                )
        })
        .map(|(_, v)| v)
        .sum()
}

/// Sums and counts of the kubelet's own histograms that tell where a pod start goes, read
/// through the API server's node proxy (as `kubectl get --raw` does): each CRI operation
/// (`kubelet_runtime_operations_duration_seconds{operation_type}`), the time from first seeing a
/// pod to its worker's first sync (`kubelet_pod_worker_start_duration_seconds`), first sight to
/// the status that makes it Running (`kubelet_pod_start_duration_seconds`), and the pod worker's
/// syncs (`kubelet_pod_worker_duration_seconds{operation_type}`, as `worker_<type>`). Both
/// kubelets export all of them under these names.
async fn runtime_ops(client: &kube::Client) -> BTreeMap<String, (f64, f64)> {
    let text = raw_get(
        client,
        &format!("/api/v1/nodes/{}/proxy/metrics", env().node_name()),
    )
    .await;
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let families: [(&str, Option<&str>); 4] = [
        ("kubelet_runtime_operations_duration_seconds", None),
        (
            "kubelet_pod_worker_start_duration_seconds",
            Some("pod_worker_start"),
        ),
        ("kubelet_pod_start_duration_seconds", Some("pod_start")),
        ("kubelet_pod_worker_duration_seconds", Some("worker_")),
    ];
    for (family, key) in families {
        for (suffix, slot) in [("_sum", 0), ("_count", 1)] {
            for (l, v) in samples(&text, &format!("{family}{suffix}")) {
                let name = match (key, label(l, "operation_type")) {
                    (None, Some(op)) => op.to_string(),
                    (Some(prefix), Some(op)) if prefix.ends_with('_') => format!("{prefix}{op}"),
                    (Some(k), _) => k.to_string(),
                    (None, None) => continue,
                };
                let e = out.entry(name).or_default();
                if slot == 0 {
                    e.0 += v
                } else {
                    e.1 += v
                }
            }
        }
    }
    out
}

/// Mean milliseconds and calls per pod of each CRI operation between two readings.
fn ops_delta(
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
    pods: usize,
) -> Value {
    let mut m = serde_json::Map::new();
    for (op, (s1, c1)) in after {
        let (s0, c0) = before.get(op).copied().unwrap_or_default();
        let (ds, dc) = (s1 - s0, c1 - c0);
        if dc >= 1.0 {
            m.insert(
                op.clone(),
                json!({"mean_ms": ds / dc * 1000.0, "per_pod": dc / pods as f64}),
            );
        }
    }
    Value::Object(m)
}

/// containerd's `/tasks/exit` events: container id → exited_at (seconds since the epoch).
fn spawn_exit_events(socket: String, tx: mpsc::UnboundedSender<(String, f64)>) {
    tokio::spawn(async move {
        let Ok(ch) = deckhand::cri::channel(&socket) else {
            return;
        };
        let mut c = EventsClient::new(ch);
        let req = SubscribeRequest {
            filters: vec!["topic==\"/tasks/exit\",namespace==\"k8s.io\"".into()],
        };
        let Ok(resp) = c.subscribe(req).await else {
            return;
        };
        let mut s = resp.into_inner();
        while let Some(Ok(env)) = s.next().await {
            let Some(any) = env.event else { continue };
            if let Ok(e) = TaskExit::decode(any.value.as_slice()) {
                if e.id == e.container_id {
                    let at = e
                        .exited_at
                        .map(|t| t.seconds as f64 + t.nanos as f64 / 1e9)
                        .unwrap_or(0.0);
                    if tx.send((e.container_id, at)).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

fn containerd_socket() -> String {
    let ep = env().get("CRI_ENDPOINT").to_string();
    ep.strip_prefix("unix://").unwrap_or(&ep).to_string()
}

// ---------------------------------------------------------------------------------------------
// round
// ---------------------------------------------------------------------------------------------

/// 30 pods created at once: create→Running in a watch, the kubelet's CPU time, and where the
/// time went from the kubelet's own histograms.
async fn burst(client: &kube::Client, kubelet: &str, pid: i32) -> Value {
    let mut run = Run::new(client, "bench-burst").await;
    let names: Vec<String> = (0..BURST_PODS).map(|i| format!("burst-{i:02}")).collect();
    let ops0 = runtime_ops(client).await;
    let (cpu0, control_plane0) = (cpu_seconds(pid), control_plane_cpu_seconds());
    let (containerd0, machine0) = (containerd_cpu_seconds(), machine_busy_seconds());
    let created: HashMap<String, Instant> = futures::future::join_all(names.iter().map(|n| {
        let pod = bench_pod(n, "trap 'exit 0' TERM; sleep 3600 & wait", "Always");
        let run = &run;
        async move { (n.clone(), run.create(&pod).await) }
    }))
    .await
    .into_iter()
    .collect();
    let seen = run.wait_running(&names).await;
    let cpu = cpu_seconds(pid) - cpu0;
    let control_plane = control_plane_cpu_seconds() - control_plane0;
    let containerd = containerd_cpu_seconds() - containerd0;
    let machine = machine_busy_seconds() - machine0;
    // the last status writes and PLEG events land in the histograms after Running is seen
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ops = ops_delta(&ops0, &runtime_ops(client).await, BURST_PODS);
    let times: Vec<f64> = names
        .iter()
        .map(|n| ms(seen[n].0.saturating_duration_since(created[n])))
        .collect();
    eprintln!(
        "[{kubelet}] {BURST_PODS} at once: p50 {:.0} ms, p99 {:.0} ms",
        pct(&times, 50.0),
        pct(&times, 99.0)
    );
    run.delete_all(&names).await;
    run.ns.delete().await;
    json!({"pods": BURST_PODS, "p50_ms": pct(&times, 50.0), "p99_ms": pct(&times, 99.0),
           "cpu_s": cpu, "control_plane_cpu_s": control_plane, "containerd_cpu_s": containerd,
           "machine_busy_s": machine, "cpus": cpus(), "runtime_ops": ops})
}

async fn round(kubelet: &str, pid: i32, round_no: u32) -> Value {
    let client = client().await;
    crictl(&["pull", IMAGE]);
    let load_before = loadavg();
    eprintln!("[{kubelet} round {round_no}] load average {load_before}");

    // 1. idle
    let settle = var("BENCH_SETTLE_S", 20u64);
    tokio::time::sleep(Duration::from_secs(settle)).await;
    let (idle_rss, idle_anon, idle_file) = rss_parts_mib(pid, 10, Duration::from_secs(1)).await;
    let idle_s = var("BENCH_IDLE_S", 60u64);
    let idle_cpu = cpu_millicores(pid, Duration::from_secs(idle_s)).await;
    let idle_threads = threads(pid);
    eprintln!("[{kubelet}] idle: RSS {idle_rss:.1} MiB ({idle_anon:.1} anonymous, {idle_file:.1} file), CPU {idle_cpu:.2} millicores, {idle_threads} threads");

    // 2. burst: 30 at once
    let burst = burst(&client, kubelet, pid).await;

    // 3. one at a time: each pod created once the previous one is Running
    let mut run = Run::new(&client, "bench-single").await;
    let names: Vec<String> = (0..SINGLE_PODS).map(|i| format!("single-{i:02}")).collect();
    let mut single = Vec::with_capacity(SINGLE_PODS);
    for n in &names {
        let pod = bench_pod(n, "trap 'exit 0' TERM; sleep 3600 & wait", "Always");
        let created = run.create(&pod).await;
        let seen = run.wait_running(std::slice::from_ref(n)).await;
        single.push(ms(seen[n].0.saturating_duration_since(created)));
    }
    eprintln!(
        "[{kubelet}] {SINGLE_PODS} one at a time: p50 {:.0} ms, p99 {:.0} ms",
        pct(&single, 50.0),
        pct(&single, 99.0)
    );
    run.delete_all(&names).await;
    run.ns.delete().await;

    // 4. paced: 100 at 5/s
    let mut run = Run::new(&client, "bench-paced").await;
    let names: Vec<String> = (0..PACED_PODS).map(|i| format!("paced-{i:03}")).collect();
    let writes0 = status_writes(&client).await;
    let ops0 = runtime_ops(&client).await;
    let mut created = HashMap::new();
    let mut tick = tokio::time::interval(PACE);
    for n in &names {
        tick.tick().await;
        let pod = bench_pod(n, "trap 'exit 0' TERM; sleep 3600 & wait", "Always");
        created.insert(n.clone(), run.create(&pod).await);
    }
    let seen = run.wait_running(&names).await;
    let paced: Vec<f64> = names
        .iter()
        .map(|n| ms(seen[n].0.saturating_duration_since(created[n])))
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let writes = status_writes(&client).await - writes0;
    let ops = ops_delta(&ops0, &runtime_ops(&client).await, PACED_PODS);
    let busy_rss = rss_mib(pid, 5, Duration::from_secs(1)).await;
    let busy_cpu = cpu_millicores(pid, Duration::from_secs(var("BENCH_BUSY_S", 20u64))).await;
    eprintln!(
        "[{kubelet}] {PACED_PODS} at 5/s: p50 {:.0} ms, p99 {:.0} ms; RSS {busy_rss:.1} MiB, CPU {busy_cpu:.2} millicores, {:.1} status writes per pod",
        pct(&paced, 50.0),
        pct(&paced, 99.0),
        writes / PACED_PODS as f64
    );
    run.delete_all(&names).await;
    run.ns.delete().await;

    // 5. exit → phase Failed
    let exit = exit_latency(&client, kubelet).await;

    json!({
        "kubelet": kubelet, "round": round_no, "load_before": load_before, "load_after": loadavg(),
        "idle": {"rss_mib": idle_rss, "rss_anon_mib": idle_anon, "rss_file_mib": idle_file,
                 "cpu_millicores": idle_cpu, "threads": idle_threads},
        "burst": burst,
        "single": {"pods": SINGLE_PODS, "p50_ms": pct(&single, 50.0), "p99_ms": pct(&single, 99.0)},
        "paced": {"pods": PACED_PODS, "p50_ms": pct(&paced, 50.0), "p99_ms": pct(&paced, 99.0),
                  "rss_mib": busy_rss, "cpu_millicores": busy_cpu,
                  "rss_per_pod_mib": (busy_rss - idle_rss) / PACED_PODS as f64,
                  "status_writes_per_pod": writes / PACED_PODS as f64, "runtime_ops": ops},
        "exit": {"matched": exit.len(), "p50_ms": pct(&exit, 50.0), "p99_ms": pct(&exit, 99.0),
                 "max_ms": pct(&exit, 100.0)},
    })
}

/// Containers exiting (restart policy Never): from containerd's `exited_at` to the first watch
/// event showing the pod Failed, in milliseconds, one value per pod.
async fn exit_latency(client: &kube::Client, kubelet: &str) -> Vec<f64> {
    let mut run = Run::new(client, "bench-exit").await;
    let (etx, mut erx) = mpsc::unbounded_channel();
    spawn_exit_events(containerd_socket(), etx);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let names: Vec<String> = (0..EXIT_PODS).map(|i| format!("exit-{i:02}")).collect();
    for (i, n) in names.iter().enumerate() {
        let cmd = format!("sleep {}; echo bye; exit 1", 3 + i % 3);
        run.create(&bench_pod(n, &cmd, "Never")).await;
    }
    let mut container_of: HashMap<String, String> = HashMap::new();
    let mut failed_at: HashMap<String, f64> = HashMap::new();
    let mut exited_at: HashMap<String, f64> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while failed_at.len() < EXIT_PODS || container_of.values().any(|c| !exited_at.contains_key(c)) {
        tokio::select! {
            ev = run.rx.recv() => match ev {
                Some(Seen::Running(n, _, ids)) => { if let Some(id) = ids.first() { container_of.insert(n, id.clone()); } }
                Some(Seen::Failed(n, t)) => { failed_at.insert(n, t); }
                Some(_) => {}
                None => panic!("the watch ended"),
            },
            ex = erx.recv() => if let Some((id, t)) = ex { exited_at.insert(id, t); },
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    let exit: Vec<f64> = names
        .iter()
        .filter_map(|n| {
            let id = container_of.get(n)?;
            Some((failed_at.get(n)? - exited_at.get(id)?) * 1000.0)
        })
        .collect();
    eprintln!(
        "[{kubelet}] exit → Failed ({} of {EXIT_PODS} matched): p50 {:.0} ms, p99 {:.0} ms",
        exit.len(),
        pct(&exit, 50.0),
        pct(&exit, 99.0)
    );
    run.delete_all(&names).await;
    run.ns.delete().await;

    exit
}

// ---------------------------------------------------------------------------------------------
// limit
// ---------------------------------------------------------------------------------------------

/// One raw pod started straight through CRI.
struct RawPod {
    sandbox_id: String,
    /// RunPodSandbox to StartContainer's return.
    total: Duration,
    /// Each call: RunPodSandbox, CreateContainer, StartContainer.
    ops: [Duration; 3],
}

/// Where raw pods keep their `/etc/hosts` and termination-log files and, below each cgroup
/// hierarchy, their pod cgroups; also their namespace (so their log directories are
/// `/var/log/pods/<RAW_DIR>_*`).
const RAW_DIR: &str = "deckhand-bench-raw";

/// What the raw pods' requests are built from, as a kubelet on this node has it: gathered once
/// per limit, outside the timing.
struct RawPodInputs {
    /// The node's DNS settings (the harness's clusterDNS and clusterDomain, /etc/resolv.conf).
    dns: deckhand::pod::dns::DnsSettings,
    /// The service environment of a pod in the raw pods' namespace.
    services: BTreeMap<String, String>,
    /// The node's IP.
    host_ip: String,
    /// The node's memory in bytes (for the container's OOM score).
    memory_capacity_bytes: i64,
}

async fn raw_pod_inputs(client: &kube::Client, ns: &str) -> RawPodInputs {
    let services = Api::<k8s_openapi::api::core::v1::Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("listing services")
        .items;
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let node_ip: std::net::IpAddr = env().get("NODE_IP").parse().expect("NODE_IP");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_bytes = deckhand::node::hostinfo::parse_mem_total(&meminfo).unwrap_or(0);
    RawPodInputs {
        dns: deckhand::pod::dns::DnsSettings {
            cluster_dns: vec![env().get("CLUSTER_DNS").parse().expect("CLUSTER_DNS")],
            cluster_domain: env().get("CLUSTER_DOMAIN").into(),
            host: Some(deckhand::pod::dns::parse_resolv_conf(&resolv)),
            node_ips: vec![node_ip],
        },
        services: deckhand::pod::envvars::service_env(&services, ns, true),
        host_ip: node_ip.to_string(),
        memory_capacity_bytes: memory_bytes as i64,
    }
}

/// One raw pod: RunPodSandbox, CreateContainer, StartContainer, each timed.
///
/// The requests are the ones deckhand sends for [`bench_pod`] ([`as_a_kubelet_sends_it`]). With
/// `BENCH_RAW_MINIMAL=1` the pod is a bare one instead (no DNS, cgroup, seccomp, environment or
/// mounts), as the limit was measured before 2026-12-05.
async fn raw_pod(
    cri_client: &CriClient,
    inputs: Option<&RawPodInputs>,
    ns: &str,
    name: &str,
    sandboxes_at_once: Option<&tokio::sync::Semaphore>,
) -> RawPod {
    let uid = format!("{:032x}", rand::random::<u128>());
    let (sandbox, config) = match inputs {
        Some(inputs) => as_a_kubelet_sends_it(inputs, &uid, ns, name),
        None => bare_requests(&uid, ns, name),
    };
    let t0 = Instant::now();
    let permit = match sandboxes_at_once {
        Some(s) => Some(s.acquire().await.expect("semaphore")),
        None => None,
    };
    let id = cri_client
        .run_pod_sandbox(sandbox.clone(), "")
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}"));
    drop(permit);
    let sandbox_done = t0.elapsed();
    let cid = cri_client
        .create_container(&id, config, sandbox)
        .await
        .unwrap_or_else(|e| panic!("CreateContainer: {e}"));
    let create_done = t0.elapsed();
    cri_client
        .start_container(&cid)
        .await
        .unwrap_or_else(|e| panic!("StartContainer: {e}"));
    let total = t0.elapsed();
    RawPod {
        sandbox_id: id,
        total,
        ops: [
            sandbox_done,
            create_done - sandbox_done,
            total - create_done,
        ],
    }
}

/// The label that marks the raw pods' sandboxes and containers.
const RAW_LABEL: &str = RAW_DIR;

/// A bare pod's requests (`BENCH_RAW_MINIMAL=1`).
fn bare_requests(uid: &str, ns: &str, name: &str) -> (cri::PodSandboxConfig, cri::ContainerConfig) {
    let labels = || [(RAW_LABEL.to_string(), "true".to_string())].into();
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: format!("/var/log/pods/{ns}_{name}_{uid}"),
        labels: labels(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption::default()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "main".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: format!("docker.io/library/{IMAGE}"),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into(), "sleep 3600".into()],
        log_path: "main/0.log".into(),
        labels: labels(),
        ..Default::default()
    };
    (sandbox, config)
}

/// The requests deckhand sends for [`bench_pod`], built by the functions its pod worker uses
/// (`pod::spec::sandbox_config`, `pod::spec::container_config`), so they stay in step with it:
/// the cluster DNS settings, seccomp `Unconfined`, a PID namespace per container, BestEffort's
/// CPU shares and OOM score, the service environment, and `/etc/hosts` and
/// `/dev/termination-log` bind-mounted from files (written here, untimed). Two differences keep
/// the raw pods out of a kubelet's way: the pod cgroup is three levels down outside `/kubepods`
/// (`/deckhand-bench-raw/besteffort/pod<uid>`: a kubelet removes unknown pod cgroups under
/// `/kubepods`), and the kubelet's pod-UID label is replaced by [`RAW_LABEL`] (deckhand's
/// orphan sweep stops the sandboxes that carry it). The Go kubelet stops sandboxes by their
/// metadata UID whatever the labels, so limits are measured while deckhand is the node.
fn as_a_kubelet_sends_it(
    inputs: &RawPodInputs,
    uid: &str,
    ns: &str,
    name: &str,
) -> (cri::PodSandboxConfig, cri::ContainerConfig) {
    use deckhand::pod::{dns, envvars, spec};
    let files = format!("/var/lib/{RAW_DIR}/{uid}");
    std::fs::create_dir_all(&files).expect("raw pod files");
    std::fs::write(
        format!("{files}/etc-hosts"),
        format!(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{name}\n"
        ),
    )
    .expect("raw pod hosts file");
    std::fs::write(format!("{files}/termination-log"), "").expect("raw pod termination log");
    let mut pod = bench_pod(name, "sleep 3600", "Always");
    pod.metadata.namespace = Some(ns.into());
    pod.metadata.uid = Some(uid.into());
    let mut sandbox = spec::sandbox_config(
        &pod,
        0,
        "/var/log/pods",
        Some(dns::pod_dns(&pod, &inputs.dns).0),
        format!("/{RAW_DIR}/besteffort/pod{uid}"),
        deckhand::userns::node_user_namespace(),
    );
    let mounts = ["termination-log", "etc-hosts"]
        .into_iter()
        .zip(["/dev/termination-log", "/etc/hosts"])
        .map(|(file, at)| cri::Mount {
            container_path: at.into(),
            host_path: format!("{files}/{file}"),
            ..Default::default()
        })
        .collect();
    let runtime = spec::ContainerRuntimeInputs {
        image_ref: format!("docker.io/library/{IMAGE}"),
        attempt: 0,
        pod_ip: String::new(),
        host_ip: inputs.host_ip.clone(),
        mounts,
        env_sources: envvars::EnvSources {
            services: inputs.services.clone(),
            ..Default::default()
        },
        memory_capacity_bytes: inputs.memory_capacity_bytes,
        image_user: Default::default(),
        pid_target_id: None,
        userns: None,
    };
    let mut config =
        spec::container_config(&pod, "main", &runtime).expect("the bench pod's container config");
    for labels in [&mut sandbox.labels, &mut config.labels] {
        labels.remove(deckhand::cri::labels::POD_UID);
        labels.insert(RAW_LABEL.into(), "true".into());
    }
    (sandbox, config)
}

async fn raw_cleanup(cri_client: &CriClient, ids: &[String]) {
    futures::future::join_all(ids.iter().map(|id| async move {
        let _ = cri_client.stop_pod_sandbox(id).await;
        let _ = cri_client.remove_pod_sandbox(id).await;
    }))
    .await;
    // the pod cgroups, deepest first, in each hierarchy (cgroup v1) or the one (v2)
    let _ = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "rm -rf /var/log/pods/{RAW_DIR}_* /var/lib/{RAW_DIR}; \
                 find /sys/fs/cgroup -maxdepth 2 -name {RAW_DIR} -type d | \
                 while read -r d; do find \"$d\" -depth -type d -exec rmdir {{}} + ; done"
            ),
        ])
        .status();
}

async fn limit(index: u32) -> Value {
    let client = client().await;
    crictl(&["pull", IMAGE]);
    let cri_client = CriClient::new(env().get("CRI_ENDPOINT")).expect("CRI client");
    let ns = RAW_DIR;
    let inputs = match var("BENCH_RAW_MINIMAL", 0u8) {
        1 => None,
        _ => Some(raw_pod_inputs(&client, ns).await),
    };
    let inputs = inputs.as_ref();
    // one at a time
    let mut single = vec![];
    let mut ids = vec![];
    for i in 0..RAW_SINGLE {
        let p = raw_pod(&cri_client, inputs, ns, &format!("single-{i:02}"), None).await;
        single.push(ms(p.total));
        ids.push(p.sandbox_id);
        tokio::time::sleep(PACE).await;
    }
    raw_cleanup(&cri_client, &ids).await;
    // 30 at once
    let at_once = tokio::sync::Semaphore::new(var("BENCH_RAW_SANDBOXES_AT_ONCE", BURST_PODS));
    let at_once = &at_once;
    let (containerd0, machine0) = (containerd_cpu_seconds(), machine_busy_seconds());
    let t0 = Instant::now();
    let burst: Vec<RawPod> = futures::future::join_all((0..BURST_PODS).map(|i| {
        let c = cri_client.clone();
        async move { raw_pod(&c, inputs, ns, &format!("burst-{i:02}"), Some(at_once)).await }
    }))
    .await;
    let wall = ms(t0.elapsed());
    let containerd = containerd_cpu_seconds() - containerd0;
    let machine = machine_busy_seconds() - machine0;
    let ids: Vec<String> = burst.iter().map(|p| p.sandbox_id.clone()).collect();
    let mean_op = |i: usize| burst.iter().map(|p| ms(p.ops[i])).sum::<f64>() / BURST_PODS as f64;
    let burst_ops = json!({
        "run_podsandbox": {"mean_ms": mean_op(0), "per_pod": 1.0},
        "create_container": {"mean_ms": mean_op(1), "per_pod": 1.0},
        "start_container": {"mean_ms": mean_op(2), "per_pod": 1.0},
    });
    let burst: Vec<f64> = burst.iter().map(|p| ms(p.total)).collect();
    raw_cleanup(&cri_client, &ids).await;

    // the API server's write + watch round trip
    let run = TestNs::new(&client, "bench-api").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &run.name);
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    let mut rtt = vec![];
    for i in 0..30 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("rtt-{i}")}})).unwrap();
        let t0 = Instant::now();
        cms.create(&PostParams::default(), &cm).await.unwrap();
        while let Some(ev) = stream.next().await {
            if let Ok(WatchEvent::Added(c)) = ev {
                if c.metadata.name.as_deref() == Some(&format!("rtt-{i}")) {
                    break;
                }
            }
        }
        rtt.push(ms(t0.elapsed()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    run.delete().await;
    let out = json!({
        "index": index,
        "load": loadavg(),
        "cri_single": {"pods": RAW_SINGLE, "p50_ms": pct(&single, 50.0), "p99_ms": pct(&single, 99.0)},
        "cri_burst": {"pods": BURST_PODS, "p50_ms": pct(&burst, 50.0), "p99_ms": pct(&burst, 99.0), "wall_ms": wall,
                      "containerd_cpu_s": containerd, "machine_busy_s": machine, "cpus": cpus(),
                      "runtime_ops": burst_ops},
        "api_rtt": {"p50_ms": pct(&rtt, 50.0), "p99_ms": pct(&rtt, 99.0)},
    });
    eprintln!("[limit] {out}");
    out
}

// ---------------------------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------------------------

fn get(v: &Value, path: &str) -> Option<f64> {
    path.split('.').try_fold(v, |v, k| v.get(k))?.as_f64()
}

/// The median of the rounds: with an even count, the mean of the middle two (not the lower
/// one, which the nearest-rank [`pct`] gives and which flattered both kubelets' two-round runs).
fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn report(files: &[String]) {
    let docs: Vec<Value> = files
        .iter()
        .filter_map(|f| serde_json::from_str(&std::fs::read_to_string(f).ok()?).ok())
        .collect();
    let rounds: Vec<&Value> = docs.iter().filter(|d| d.get("kubelet").is_some()).collect();
    let mut limits: Vec<&Value> = docs
        .iter()
        .filter(|d| d.get("cri_single").is_some())
        .collect();
    limits.sort_by_key(|l| l["index"].as_i64().unwrap_or(1));
    let kubelets: Vec<String> = {
        let mut k: Vec<String> = rounds
            .iter()
            .filter_map(|r| r["kubelet"].as_str().map(String::from))
            .collect();
        k.dedup();
        k.sort_by_key(|k| (k != "deckhand", k.clone()));
        k.dedup();
        k
    };
    println!("\nRounds (in order, with the load average before each):");
    for r in &rounds {
        println!(
            "  {} round {}: load {}",
            r["kubelet"].as_str().unwrap_or(""),
            r["round"],
            r["load_before"].as_str().unwrap_or("")
        );
    }
    let rows: &[(&str, &str, &str)] = &[
        ("RSS idle", "idle.rss_mib", "MiB"),
        ("  of it anonymous", "idle.rss_anon_mib", "MiB"),
        ("  of it file-backed (code)", "idle.rss_file_mib", "MiB"),
        ("CPU idle", "idle.cpu_millicores", "millicores"),
        ("threads idle", "idle.threads", ""),
        ("30 at once, create→Running p50", "burst.p50_ms", "ms"),
        ("30 at once, create→Running p99", "burst.p99_ms", "ms"),
        ("30 at once, kubelet CPU", "burst.cpu_s", "s"),
        (
            "30 at once, API server + etcd CPU",
            "burst.control_plane_cpu_s",
            "s",
        ),
        (
            "30 at once, containerd + CNI CPU",
            "burst.containerd_cpu_s",
            "s",
        ),
        ("30 at once, machine CPU busy", "burst.machine_busy_s", "s"),
        ("one at a time, create→Running p50", "single.p50_ms", "ms"),
        ("one at a time, create→Running p99", "single.p99_ms", "ms"),
        ("100 at 5/s, create→Running p50", "paced.p50_ms", "ms"),
        ("100 at 5/s, create→Running p99", "paced.p99_ms", "ms"),
        ("RSS with 100 pods", "paced.rss_mib", "MiB"),
        ("RSS per running pod", "paced.rss_per_pod_mib", "MiB"),
        ("CPU with 100 pods", "paced.cpu_millicores", "millicores"),
        (
            "status writes per pod start",
            "paced.status_writes_per_pod",
            "",
        ),
        ("exit → phase Failed p50", "exit.p50_ms", "ms"),
        ("exit → phase Failed p99", "exit.p99_ms", "ms"),
        ("exit → phase Failed max", "exit.max_ms", "ms"),
    ];
    let med = |k: &str, path: &str| -> f64 {
        let v: Vec<f64> = rounds
            .iter()
            .filter(|r| r["kubelet"] == k)
            .filter_map(|r| get(r, path))
            .collect();
        median(&v)
    };
    print!("\n{:<36}", "metric (median of rounds)");
    for k in &kubelets {
        print!(" {k:>12}");
    }
    if kubelets.len() == 2 {
        print!(" {:>8}", "ratio");
    }
    println!();
    for (name, path, unit) in rows {
        print!("{:<36}", format!("{name} ({unit})").replace(" ()", ""));
        let vals: Vec<f64> = kubelets.iter().map(|k| med(k, path)).collect();
        for v in &vals {
            print!(" {v:>12.2}");
        }
        if vals.len() == 2 {
            print!(" {:>8.2}", vals[0] / vals[1]);
        }
        println!();
    }
    // each kubelet's mean and count per pod of one operation in one phase
    let op_cells = |phase: &str, op: &str| {
        for k in &kubelets {
            let mean = med(k, &format!("{phase}.runtime_ops.{op}.mean_ms"));
            let per = med(k, &format!("{phase}.runtime_ops.{op}.per_pod"));
            print!(" {k}: {mean:>7.1} ms ×{per:<5.2}");
        }
    };
    // CRI operations per pod start, from each kubelet's own metrics
    println!("\nWhere the 100 paced pod starts went, from each kubelet's own histograms (mean ms / observations per pod;\npod_worker_start: first sight to the worker's first sync; pod_start: first sight to the Running status;\nworker_*: pod worker syncs; the rest: CRI operations):");
    let ops = op_names(&rounds, "paced");
    for op in &ops {
        print!("  {op:<28}");
        op_cells("paced", op);
        println!();
    }
    // where the 30 pods of the burst went, against the same calls in the limit's raw burst
    println!("\nWhere the 30 pods of the burst went (mean ms / observations per pod, as above; raw: the limit's\nraw burst, the limit measured next to each round):");
    let ops = op_names(&rounds, "burst");
    let raw_med = |path: &str| -> f64 {
        let v: Vec<f64> = limits.iter().filter_map(|l| get(l, path)).collect();
        median(&v)
    };
    for op in &ops {
        print!("  {op:<28}");
        op_cells("burst", op);
        let raw = raw_med(&format!("cri_burst.runtime_ops.{op}.mean_ms"));
        if !raw.is_nan() {
            print!(" raw: {raw:>7.1} ms");
        }
        println!();
    }
    if limits.is_empty() {
        println!("\n(no limit file: run `cargo bench --bench node -- limit`)");
        return;
    }
    println!("\nThe machine's limit (no kubelet), measured before and after each round:");
    for l in &limits {
        let f = |p: &str| get(l, p).unwrap_or(f64::NAN);
        println!(
            "  {}: one pod through CRI p50 {:.0} / p99 {:.0} ms; 30 at once p50 {:.0} / p99 {:.0} ms (all in {:.0} ms, machine CPU busy {:.2} s); API write+watch p50 {:.1} / p99 {:.1} ms (load {})",
            l.get("index").map_or("limit".to_string(), |i| format!("limit {i}")),
            f("cri_single.p50_ms"), f("cri_single.p99_ms"), f("cri_burst.p50_ms"), f("cri_burst.p99_ms"),
            f("cri_burst.wall_ms"), f("cri_burst.machine_busy_s"), f("api_rtt.p50_ms"), f("api_rtt.p99_ms"),
            l["load"].as_str().unwrap_or("")
        );
    }
    println!("\nTargets (issue 15): each round's figure against the mean of the bounds from the limits measured\njust before and just after it; median of the rounds:");
    type Bound = fn(&Value) -> f64;
    let targets: [(&str, &str, Bound); 6] = [
        ("exit → status p99 ≤ 100 ms", "exit.p99_ms", |_| 100.0),
        (
            "one at a time p99 ≤ 1.25 × (CRI p99 + API p99)",
            "single.p99_ms",
            |l| {
                1.25 * (get(l, "cri_single.p99_ms").unwrap_or(f64::NAN)
                    + get(l, "api_rtt.p99_ms").unwrap_or(f64::NAN))
            },
        ),
        (
            "30 at once p99 ≤ 1.1 × raw CRI burst p99",
            "burst.p99_ms",
            |l| 1.1 * get(l, "cri_burst.p99_ms").unwrap_or(f64::NAN),
        ),
        ("RSS idle ≤ 10 MiB", "idle.rss_mib", |_| 10.0),
        ("RSS per pod ≤ 0.1 MiB", "paced.rss_per_pod_mib", |_| 0.1),
        ("CPU idle ≤ 1 millicore", "idle.cpu_millicores", |_| 1.0),
    ];
    for k in &kubelets {
        println!("  {k}:");
        for (what, path, bound) in targets {
            let (mut vals, mut bounds, mut ratios) = (vec![], vec![], vec![]);
            for r in rounds.iter().filter(|r| r["kubelet"] == k.as_str()) {
                let near = limits_for(&limits, k, r["round"].as_u64().unwrap_or(1));
                let (Some(v), false) = (get(r, path), near.is_empty()) else {
                    continue;
                };
                // the mean of the bounds from the limits before and after the round
                let b = near.iter().map(|l| bound(l)).sum::<f64>() / near.len() as f64;
                vals.push(v);
                bounds.push(b);
                ratios.push(v / b);
            }
            let per_round: Vec<String> = ratios.iter().map(|r| format!("{r:.2}×")).collect();
            let ratio = median(&ratios);
            println!(
                "    {what:<48} {:>9.2} / {:>9.2} = {ratio:>5.2}×  {:<8} (rounds: {})",
                median(&vals),
                median(&bounds),
                if ratio <= 1.0 { "met" } else { "not met" },
                per_round.join(" ")
            );
        }
    }
    // The burst against the machine's CPUs: the least time its CPU work can take on them.
    let cpus = limits
        .iter()
        .filter_map(|l| get(l, "cri_burst.cpus"))
        .next()
        .unwrap_or(cpus() as f64);
    let raw_busy = raw_med("cri_burst.machine_busy_s");
    if !raw_busy.is_nan() {
        println!(
            "\n30 at once against the machine's {cpus} CPUs (CPU seconds the whole machine was busy during the\nburst, and that work spread over every CPU: the least time it can take; medians):"
        );
        println!(
            "  raw CRI burst: {raw_busy:.2} CPU-s → {:.2} s; all started in {:.2} s, p99 {:.2} s",
            raw_busy / cpus,
            raw_med("cri_burst.wall_ms") / 1000.0,
            raw_med("cri_burst.p99_ms") / 1000.0
        );
        for k in &kubelets {
            let busy = med(k, "burst.machine_busy_s");
            println!(
                "  {k}: {busy:.2} CPU-s → {:.2} s (API server + etcd {:.2}, {k} {:.2}, containerd + CNI {:.2}); p99 {:.2} s",
                busy / cpus,
                med(k, "burst.control_plane_cpu_s"),
                med(k, "burst.cpu_s"),
                med(k, "burst.containerd_cpu_s"),
                med(k, "burst.p99_ms") / 1000.0
            );
        }
    }
}

/// The operations of `phase`'s `runtime_ops` in any round, sorted.
fn op_names(rounds: &[&Value], phase: &str) -> Vec<String> {
    let mut ops: Vec<String> = rounds
        .iter()
        .filter_map(|r| r[phase]["runtime_ops"].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

/// The limits measured next to a kubelet's round `round`: one just before it and one just after
/// it (hack/bench.sh measures the limit before deckhand's round r, between it and the Go
/// kubelet's, and after that one: limits 2r-1, 2r and 2r+1, all while deckhand is the node, as
/// the Go kubelet would kill the raw pods as unknown). The nearest one when the run has fewer
/// (a single limit file serves every round).
fn limits_for<'a>(limits: &[&'a Value], kubelet: &str, round: u64) -> Vec<&'a Value> {
    let before = if kubelet == "deckhand" {
        2 * round - 1
    } else {
        2 * round
    } as i64;
    let at = |i: i64| {
        limits
            .iter()
            .find(|l| l["index"].as_i64() == Some(i))
            .copied()
    };
    match (at(before), at(before + 1)) {
        (Some(a), Some(b)) => vec![a, b],
        (Some(a), None) | (None, Some(a)) => vec![a],
        (None, None) => limits
            .iter()
            .min_by_key(|l| (l["index"].as_i64().unwrap_or(1) - before).abs())
            .copied()
            .into_iter()
            .collect(),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let out = flag("--out");
    let doc = match args.first().map(String::as_str) {
        Some("round") => {
            let kubelet = flag("--kubelet").unwrap_or_else(|| "deckhand".into());
            let pid: i32 = flag("--pid")
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(deckhand_pid);
            let n: u32 = flag("--round").and_then(|p| p.parse().ok()).unwrap_or(1);
            round(&kubelet, pid, n).await
        }
        Some("limit") => limit(flag("--index").and_then(|i| i.parse().ok()).unwrap_or(1)).await,
        Some("burst") => {
            let pid: i32 = flag("--pid")
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(deckhand_pid);
            let kubelet = flag("--kubelet").unwrap_or_else(|| "deckhand".into());
            json!({"burst": burst(&client().await, &kubelet, pid).await})
        }
        Some("exit") => {
            let client = client().await;
            let v = exit_latency(&client, "deckhand").await;
            json!({"exit": {"matched": v.len(), "p50_ms": pct(&v, 50.0), "p99_ms": pct(&v, 99.0),
                            "max_ms": pct(&v, 100.0), "all_ms": v}})
        }
        Some("report") => {
            let files: Vec<String> = args[1..].to_vec();
            report(&files);
            return;
        }
        _ => {
            eprintln!("usage: node round --kubelet NAME --pid PID [--round N] [--out F] | limit [--index N] [--out F] | burst [--kubelet NAME --pid PID] [--out F] | exit [--out F] | report F...");
            std::process::exit(2);
        }
    };
    let text = serde_json::to_string_pretty(&doc).unwrap();
    match out {
        Some(f) => std::fs::write(&f, text).unwrap_or_else(|e| panic!("writing {f}: {e}")),
        None => println!("{text}"),
    }
}
