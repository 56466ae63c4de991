//! Scheduler benchmark (prints figures; not a test): throughput (pods/s) and per-pod latency
//! (pod create → binding seen through a watch, p50/p99) of deckhand-scheduler and of kube-scheduler
//! built from the same Kubernetes modules (`hack/build-k8s.sh kube-scheduler`), each scheduling
//! the same pods onto the same number of fake Node objects on the local cluster's real API server.
//!
//! Run it through `hack/bench-scheduler.sh` (builds both schedulers). Fake nodes are Ready Node
//! objects with no kubelet behind them, labelled and tainted `deckhand.bench/fake-node=true`; the
//! pods select that label and tolerate every taint, so they are bound only to fake nodes and never
//! run. Each scheduler runs alone with its own `schedulerName` (no leader election), on freshly
//! created nodes; nodes, pods and namespaces are deleted afterwards.
//!
//! Environment: SCHED_BENCH_PODS (default 1000), SCHED_BENCH_NODES (default "100,1000"),
//! SCHED_BENCH_SCHEDULERS (default "deckhand,kube,kube-unthrottled"), DECKHAND_SCHEDULER_BIN,
//! KUBE_SCHEDULER_BIN.

use futures::{stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LABEL: &str = "deckhand.bench/fake-node";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn env_file() -> BTreeMap<String, String> {
    let path = root().join("_output/local-up/env");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the local cluster is not up: run hack/local-up.sh first ({}: {e})",
            path.display()
        )
    });
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

async fn client(kubeconfig: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("reading the kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("loading the kubeconfig");
    cfg.read_timeout = Some(Duration::from_secs(300));
    let c = kube::Client::try_from(cfg).expect("API client");
    c.apiserver_version().await.unwrap_or_else(|e| {
        panic!("the local cluster is not up: run hack/local-up.sh first ({e})")
    });
    c
}

fn suffix() -> String {
    format!("{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Creates `n` Ready fake nodes and waits until the node lifecycle controller removed the
/// `node.kubernetes.io/not-ready` taint that admission puts on new nodes.
async fn create_nodes(client: &kube::Client, prefix: &str, n: usize) -> Vec<String> {
    let api: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now();
    let now = k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .unwrap()
        .to_string();
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:04}")).collect();
    let t = Instant::now();
    stream::iter(names.clone())
        .map(|name| {
            let api = api.clone();
            let now = now.clone();
            async move {
                let res = serde_json::json!({"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"});
                let node: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": {LABEL: "true", "kubernetes.io/hostname": name}},
                    "spec": {"taints": [{"key": LABEL, "value": "true", "effect": "NoSchedule"}]},
                    "status": {"capacity": res, "allocatable": res,
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake node of deckhand's scheduler benchmark (no kubelet)",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}]}
                }))
                .unwrap();
                api.create(&PostParams::default(), &node)
                    .await
                    .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let created = t.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = api
            .list(&ListParams::default().labels(&format!("{LABEL}=true")))
            .await
            .expect("listing nodes");
        let tainted = list
            .items
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")))
            })
            .count();
        if tainted == 0 || Instant::now() > deadline {
            eprintln!(
                "  {n} fake nodes created in {:.1}s; not-ready taints cleared after {:.1}s ({tainted} left)",
                created.as_secs_f64(),
                t.elapsed().as_secs_f64()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    names
}

async fn delete_nodes(client: &kube::Client, names: &[String]) {
    let api: Api<Node> = Api::all(client.clone());
    stream::iter(names.to_vec())
        .map(|name| {
            let api = api.clone();
            async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

async fn namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns)
        .await
        .expect("creating the namespace");
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sas.get_opt("default").await.ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount in {name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn cleanup_namespace(client: &kube::Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

fn pod(name: &str, scheduler: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "nodeSelector": {LABEL: "true"},
            "tolerations": [{"operator": "Exists"}],
            "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    }))
    .unwrap()
}

struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_scheduler(kind: &str, scheduler_name: &str, kubeconfig: &str, workdir: &Path) -> Proc {
    let log = workdir.join(format!("{scheduler_name}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    let mut cmd = match kind {
        "deckhand" => {
            let bin = std::env::var("DECKHAND_SCHEDULER_BIN").unwrap_or_else(|_| {
                root()
                    .join("target/release/deckhand-scheduler")
                    .display()
                    .to_string()
            });
            let mut c = Command::new(bin);
            c.args([
                "--kubeconfig",
                kubeconfig,
                "--scheduler-name",
                scheduler_name,
                "--leader-elect=false",
            ]);
            c.env("RUST_LOG", "warn").env("NO_COLOR", "1");
            c
        }
        _ => {
            let bin = std::env::var("KUBE_SCHEDULER_BIN").unwrap_or_else(|_| {
                root()
                    .join("_output/bin/kube-scheduler")
                    .display()
                    .to_string()
            });
            // kube-scheduler's client defaults are qps 50 / burst 100; "kube-unthrottled" lifts them
            let (qps, burst) = if kind == "kube-unthrottled" {
                (5000, 5000)
            } else {
                (50, 100)
            };
            let config = workdir.join(format!("{scheduler_name}.yaml"));
            std::fs::write(
                &config,
                format!(
                    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                     clientConnection:\n  kubeconfig: {kubeconfig}\n  qps: {qps}\n  burst: {burst}\n\
                     leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {scheduler_name}\n"
                ),
            )
            .expect("writing the kube-scheduler config");
            let mut c = Command::new(bin);
            c.arg(format!("--config={}", config.display())).args([
                "--bind-address=127.0.0.1",
                "--secure-port=10259",
                "--v=0",
            ]);
            c
        }
    };
    let child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("starting the {kind} scheduler: {e}"));
    Proc { child, log }
}

struct Result_ {
    scheduler: String,
    nodes: usize,
    pods: usize,
    throughput: f64,
    p50: Duration,
    p99: Duration,
    create_secs: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[idx.clamp(1, sorted.len()) - 1]
}

async fn run_one(
    client: &kube::Client,
    kubeconfig: &str,
    kind: &str,
    nodes: usize,
    pods: usize,
    workdir: &Path,
) -> Option<Result_> {
    let sfx = suffix();
    let sched = format!("bench-{kind}-{sfx}");
    let ns = format!("bench-sched-{kind}-{nodes}-{sfx}");
    eprintln!("{kind} scheduler, {nodes} nodes, {pods} pods (namespace {ns}):");
    let node_names = create_nodes(client, &format!("bench-{sfx}"), nodes).await;
    namespace(client, &ns).await;
    let proc_ = start_scheduler(kind, &sched, kubeconfig, workdir);
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // bindings seen through a watch
    let bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let api = api.clone();
        let bound = bound.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let mut s = watcher::watcher(api, watcher::Config::default()).boxed();
            while let Some(ev) = s.next().await {
                let now = Instant::now();
                let pod = match ev {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => p,
                    _ => continue,
                };
                if pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some()
                {
                    bound
                        .lock()
                        .unwrap()
                        .entry(pod.metadata.name.clone().unwrap_or_default())
                        .or_insert(now);
                }
            }
        });
        let _ = ready_rx.await;
        handle
    };

    // warm-up: the scheduler is up once it binds this pod
    api.create(&PostParams::default(), &pod("warmup", &sched))
        .await
        .expect("warm-up pod");
    let deadline = Instant::now() + Duration::from_secs(90);
    while !bound.lock().unwrap().contains_key("warmup") {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(&proc_.log).unwrap_or_default();
            eprintln!(
                "  the {kind} scheduler did not bind the warm-up pod within 90 s; its log:\n{}",
                log.lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            proc_.stop();
            watch.abort();
            cleanup_namespace(client, &ns).await;
            delete_nodes(client, &node_names).await;
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let t0 = Instant::now();
    stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            let created = created.clone();
            let sched = sched.clone();
            async move {
                let name = format!("p-{i:05}");
                let p = pod(&name, &sched);
                let start = Instant::now();
                api.create(&PostParams::default(), &p)
                    .await
                    .unwrap_or_else(|e| panic!("creating pod {name}: {e}"));
                created.lock().unwrap().insert(name, start);
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let create_secs = t0.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let n = bound.lock().unwrap().len().saturating_sub(1);
        if n >= pods {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("  only {n} of {pods} pods bound after 10 minutes");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watch.abort();
    proc_.stop();
    let created = created.lock().unwrap().clone();
    let bound = bound.lock().unwrap().clone();
    let mut lat: Vec<Duration> = created
        .iter()
        .filter_map(|(n, c)| bound.get(n).map(|b| b.saturating_duration_since(*c)))
        .collect();
    lat.sort();
    let last = created
        .keys()
        .filter_map(|n| bound.get(n))
        .max()
        .copied()
        .unwrap_or(t0);
    let n_bound = lat.len();
    let res = Result_ {
        scheduler: kind.into(),
        nodes,
        pods: n_bound,
        throughput: n_bound as f64 / last.saturating_duration_since(t0).as_secs_f64().max(1e-9),
        p50: percentile(&lat, 50.0),
        p99: percentile(&lat, 99.0),
        create_secs,
    };
    eprintln!(
        "  {n_bound}/{pods} bound: {:.0} pods/s, latency p50 {:.0} ms, p99 {:.0} ms (creating the pods took {:.1}s)",
        res.throughput,
        res.p50.as_secs_f64() * 1e3,
        res.p99.as_secs_f64() * 1e3,
        create_secs
    );
    // bound pods never run (no kubelet): delete them without grace, then the nodes
    cleanup_namespace(client, &ns).await;
    delete_nodes(client, &node_names).await;
    Some(res)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes --bench; nothing else is accepted
    let env = env_file();
    let kubeconfig = env
        .get("KUBECONFIG")
        .expect("KUBECONFIG in the env file")
        .clone();
    let client = client(&kubeconfig).await;
    let pods: usize = std::env::var("SCHED_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let node_counts: Vec<usize> = std::env::var("SCHED_BENCH_NODES")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let kinds: Vec<String> = std::env::var("SCHED_BENCH_SCHEDULERS")
        .unwrap_or_else(|_| "deckhand,kube,kube-unthrottled".into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let workdir = root().join("_output/bench-scheduler");
    std::fs::create_dir_all(&workdir).expect("work dir");

    let mut results = Vec::new();
    for &n in &node_counts {
        for kind in &kinds {
            if let Some(r) = run_one(&client, &kubeconfig, kind, n, pods, &workdir).await {
                results.push(r);
            }
        }
    }

    println!();
    println!("scheduler benchmark: {pods} pods per run, create → bound seen through a watch (same API server, 2 cores)");
    println!(
        "{:<18} {:>6} {:>6} {:>10} {:>10} {:>10} {:>10}",
        "scheduler", "nodes", "bound", "pods/s", "p50 ms", "p99 ms", "create s"
    );
    for r in &results {
        println!(
            "{:<18} {:>6} {:>6} {:>10.0} {:>10.0} {:>10.0} {:>10.1}",
            r.scheduler,
            r.nodes,
            r.pods,
            r.throughput,
            r.p50.as_secs_f64() * 1e3,
            r.p99.as_secs_f64() * 1e3,
            r.create_secs
        );
    }
    println!();
    for &n in &node_counts {
        let Some(d) = results
            .iter()
            .find(|r| r.scheduler == "deckhand" && r.nodes == n)
        else {
            continue;
        };
        for k in results
            .iter()
            .filter(|r| r.scheduler != "deckhand" && r.nodes == n)
        {
            println!(
                "{n} nodes: deckhand / {}: throughput x{:.2}, p50 x{:.2}, p99 x{:.2} (latency ratios < 1: deckhand faster)",
                k.scheduler,
                d.throughput / k.throughput,
                d.p50.as_secs_f64() / k.p50.as_secs_f64().max(1e-9),
                d.p99.as_secs_f64() / k.p99.as_secs_f64().max(1e-9)
            );
        }
    }
}
