//! `/metrics` (the kubelet's own Prometheus metrics, through prometheus-client) and
//! `/metrics/resource` (the resource metrics metrics-server scrapes), with the Go kubelet's
//! names and labels (k/k `pkg/kubelet/metrics/metrics.go`, `pkg/kubelet/server/metrics`,
//! `pkg/kubelet/metrics/collectors/resource_metrics.go`).
//!
//! Exposed on `/metrics`: `kubelet_node_name{node}`, `kubelet_running_pods`,
//! `kubelet_running_containers{container_state}` (both read from the runtime at scrape time),
//! `kubelet_runtime_operations_total{operation_type}`,
//! `kubelet_runtime_operations_errors_total{operation_type}`,
//! `kubelet_runtime_operations_duration_seconds{operation_type}` (every CRI call, through
//! [`crate::cri::CALL_OBSERVER`]), `kubelet_http_requests_total`,
//! `kubelet_http_inflight_requests` and `kubelet_http_requests_duration_seconds`
//! `{method,path,server_type,long_running}`, and the pod start histograms
//! `kubelet_pod_start_duration_seconds`, `kubelet_pod_start_sli_duration_seconds`,
//! `kubelet_pod_start_total_duration_seconds`, `kubelet_first_network_pod_start_sli_duration_seconds`,
//! `kubelet_pod_worker_duration_seconds{operation_type}` and
//! `kubelet_pod_worker_start_duration_seconds` (Go's buckets; see
//! [`crate::pod::startup_latency`]), and the PLEG's `kubelet_pleg_relist_duration_seconds`,
//! `kubelet_pleg_relist_interval_seconds`, `kubelet_pleg_last_seen_seconds` and the event
//! stream's `kubelet_evented_pleg_connection_{success,error}_count`, and the pod start counters
//! `kubelet_started_pods_total`, `kubelet_started_pods_errors_total`,
//! `kubelet_started_user_namespaced_pods_total` and
//! `kubelet_started_user_namespaced_pods_errors_total`.

use super::stats::Summary;
use crate::cri::{api, CriClient};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt::Write;
use std::sync::OnceLock;
use std::time::Duration;

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// The Go kubelet's runtime-operation buckets (`metrics.ExponentialBuckets(.005, 2.5, 14)`).
fn runtime_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.5, 14))
}

/// Prometheus' default buckets (`kubelet_http_requests_duration_seconds` uses them).
fn default_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// The kubelet's metrics.
pub struct Metrics {
    registry: Registry,
    node_name: Family<Labels, Gauge>,
    running_pods: Gauge,
    running_containers: Family<Labels, Gauge>,
    http_requests: Family<Labels, Counter>,
    http_inflight: Family<Labels, Gauge>,
    http_duration: HistogramFamily,
}

/// Runtime operation metrics, process-wide (CRI calls happen everywhere in deckhand).
struct RuntimeOps {
    total: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: HistogramFamily,
}

fn runtime_ops() -> &'static RuntimeOps {
    static OPS: OnceLock<RuntimeOps> = OnceLock::new();
    OPS.get_or_init(|| RuntimeOps {
        total: Family::default(),
        errors: Family::default(),
        duration: Family::new_with_constructor(runtime_histogram),
    })
}

/// The Go kubelet's pod startup buckets (`podStartupDurationBuckets`), in seconds.
const POD_STARTUP_BUCKETS: [f64; 25] = [
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Pod start and pod worker metrics, process-wide (observed by the pod workers, the source and
/// the status manager).
struct PodStart {
    start_duration: Histogram,
    sli_duration: Histogram,
    total_duration: Histogram,
    first_network_sli: Gauge<f64, std::sync::atomic::AtomicU64>,
    worker_duration: HistogramFamily,
    worker_start_duration: Histogram,
}

fn pod_start() -> &'static PodStart {
    static M: OnceLock<PodStart> = OnceLock::new();
    M.get_or_init(|| PodStart {
        start_duration: Histogram::new(POD_STARTUP_BUCKETS),
        sli_duration: Histogram::new(POD_STARTUP_BUCKETS),
        total_duration: Histogram::new(POD_STARTUP_BUCKETS),
        first_network_sli: Gauge::default(),
        worker_duration: Family::new_with_constructor(default_histogram),
        worker_start_duration: default_histogram(),
    })
}

/// Pod start counters, process-wide (k/k `kuberuntime_manager.go` SyncPod step 4).
struct StartedPods {
    total: Counter,
    errors: Counter,
    user_namespaced: Counter,
    user_namespaced_errors: Counter,
}

fn started_pods() -> &'static StartedPods {
    static M: OnceLock<StartedPods> = OnceLock::new();
    M.get_or_init(|| StartedPods {
        total: Counter::default(),
        errors: Counter::default(),
        user_namespaced: Counter::default(),
        user_namespaced_errors: Counter::default(),
    })
}

/// Records a pod sync that creates a sandbox (`kubelet_started_pods_total`, and
/// `kubelet_started_user_namespaced_pods_total` for a pod with `hostUsers: false`).
pub fn observe_pod_started(user_namespaced: bool) {
    let m = started_pods();
    m.total.inc();
    if user_namespaced {
        m.user_namespaced.inc();
    }
}

/// Records that such a sync failed: `kubelet_started_pods_errors_total` when the sandbox was
/// not created (`sandbox`), and `kubelet_started_user_namespaced_pods_errors_total` for a pod
/// with `hostUsers: false` whatever failed in that sync (sandbox, volumes or a container), as Go
/// counts any failed result of the sync.
pub fn observe_pod_start_failed(sandbox: bool, user_namespaced: bool) {
    let m = started_pods();
    if sandbox {
        m.errors.inc();
    }
    if user_namespaced {
        m.user_namespaced_errors.inc();
    }
}

/// PLEG metrics, process-wide (observed by [`crate::pleg`]).
struct PlegMetrics {
    relist_duration: Histogram,
    relist_interval: Histogram,
    last_seen: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Gauges that only go up: Go names these counters without `_total`, which an OpenMetrics
    /// counter would add.
    connections: Gauge,
    connection_errors: Gauge,
}

fn pleg() -> &'static PlegMetrics {
    static M: OnceLock<PlegMetrics> = OnceLock::new();
    M.get_or_init(|| PlegMetrics {
        relist_duration: default_histogram(),
        relist_interval: default_histogram(),
        last_seen: Gauge::default(),
        connections: Gauge::default(),
        connection_errors: Gauge::default(),
    })
}

/// Records one PLEG relist: how long it took and the time since the previous one started
/// (`kubelet_pleg_relist_duration_seconds`, `kubelet_pleg_relist_interval_seconds`), and sets
/// `kubelet_pleg_last_seen_seconds` to now (k/k `pleg/generic.go` relist).
pub fn observe_pleg_relist(took: Duration, interval: Option<Duration>) {
    let m = pleg();
    m.relist_duration.observe(took.as_secs_f64());
    if let Some(i) = interval {
        m.relist_interval.observe(i.as_secs_f64());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    m.last_seen.set(now.as_secs_f64());
}

/// Records a subscription to containerd's event stream that succeeded or failed
/// (`kubelet_evented_pleg_connection_success_count`, `..._error_count`; the Go kubelet counts
/// its CRI event stream connections the same way).
pub fn observe_pleg_event_stream(connected: bool) {
    if connected {
        pleg().connections.inc();
    } else {
        pleg().connection_errors.inc();
    }
}

/// Records a pod start seen through the watch (`kubelet_pod_start_total_duration_seconds`,
/// `kubelet_pod_start_sli_duration_seconds`, `kubelet_first_network_pod_start_sli_duration_seconds`).
pub fn observe_pod_startup(obs: &crate::pod::startup_latency::StartupObservation) {
    let m = pod_start();
    m.total_duration.observe(obs.total.as_secs_f64());
    if let Some(sli) = obs.sli {
        m.sli_duration.observe(sli.as_secs_f64());
        if obs.first_network_pod {
            m.first_network_sli.set(sli.as_secs_f64());
        }
    }
}

/// Records first sight → the status that makes the pod Running (`kubelet_pod_start_duration_seconds`,
/// see [`crate::pod::startup_latency::records_pod_start`]).
pub fn observe_pod_start_duration(since_first_seen: Duration) {
    pod_start()
        .start_duration
        .observe(since_first_seen.as_secs_f64());
}

/// Records one pod sync (`kubelet_pod_worker_duration_seconds{operation_type}`:
/// `create` for a pod's first sync, `update` after a change of the pod, `sync` otherwise).
pub fn observe_pod_worker(operation_type: &str, took: Duration) {
    pod_start()
        .worker_duration
        .get_or_create(&vec![("operation_type".into(), operation_type.into())])
        .observe(took.as_secs_f64());
}

/// Records first sight → a pod's first sync (`kubelet_pod_worker_start_duration_seconds`).
pub fn observe_pod_worker_start(since_first_seen: Duration) {
    pod_start()
        .worker_start_duration
        .observe(since_first_seen.as_secs_f64());
}

/// The Go kubelet's `operation_type` for a CRI method name: snake case, with `PodSandbox` as
/// `podsandbox` (`ListPodSandbox` → `list_podsandbox`, `ExecSync` → `exec_sync`).
pub fn operation_type(op: &str) -> String {
    let op = op.replace("PodSandbox", "Podsandbox");
    let mut out = String::with_capacity(op.len() + 4);
    for (i, ch) in op.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// Records one CRI call (installed as [`crate::cri::CALL_OBSERVER`]).
pub fn observe_runtime_call(op: &'static str, took: Duration, failed: bool) {
    let ops = runtime_ops();
    let labels = vec![("operation_type".to_string(), operation_type(op))];
    ops.total.get_or_create(&labels).inc();
    ops.duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
    if failed {
        ops.errors.get_or_create(&labels).inc();
    }
}

/// The bucket of a request path for `kubelet_http_*` metrics (Go `getMetricBucket`): the first
/// path element, or `metrics/<x>`; unknown roots are `other`.
pub fn path_bucket(path: &str) -> String {
    const KNOWN: &[&str] = &[
        "healthz",
        "pods",
        "stats",
        "metrics",
        "metrics/cadvisor",
        "metrics/probes",
        "metrics/resource",
        "run",
        "exec",
        "attach",
        "portForward",
        "containerLogs",
        "configz",
        "runningpods",
        "logs",
        "debug",
        "checkpoint",
    ];
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(3, '/').collect();
    let root = if parts[0] == "metrics" && parts.len() > 1 {
        format!("metrics/{}", parts[1])
    } else {
        parts[0].to_string()
    };
    if KNOWN.contains(&root.as_str()) {
        root
    } else {
        "other".into()
    }
}

/// `long_running` label: exec, attach, portforward (lower-cased root, as Go checks it) and debug.
pub fn long_running(bucket: &str) -> bool {
    matches!(bucket, "exec" | "attach" | "debug") || bucket.eq_ignore_ascii_case("portforward")
}

/// The method bucket: known HTTP methods, else `other`.
pub fn method_bucket(m: &str) -> &str {
    match m {
        "OPTIONS" | "GET" | "HEAD" | "POST" | "PUT" | "DELETE" | "TRACE" | "CONNECT" => m,
        _ => "other",
    }
}

/// Tracks one HTTP request in the inflight gauge until dropped.
pub struct InflightGuard<'a> {
    gauge: &'a Family<Labels, Gauge>,
    labels: Labels,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.gauge.get_or_create(&self.labels).dec();
    }
}

impl Metrics {
    /// Registers the metrics for node `node`.
    pub fn new(node: &str) -> Self {
        let mut registry = Registry::default();
        let node_name = Family::<Labels, Gauge>::default();
        node_name
            .get_or_create(&vec![("node".into(), node.into())])
            .set(1);
        registry.register(
            "kubelet_node_name",
            "[ALPHA] The node's name. The count is always 1.",
            node_name.clone(),
        );
        let running_pods = Gauge::default();
        registry.register(
            "kubelet_running_pods",
            "[ALPHA] Number of pods that have a running pod sandbox",
            running_pods.clone(),
        );
        let running_containers = Family::<Labels, Gauge>::default();
        registry.register(
            "kubelet_running_containers",
            "[ALPHA] Number of containers currently running",
            running_containers.clone(),
        );
        let ops = runtime_ops();
        registry.register(
            "kubelet_runtime_operations",
            "[ALPHA] Cumulative number of runtime operations by operation type.",
            ops.total.clone(),
        );
        registry.register(
            "kubelet_runtime_operations_errors",
            "[ALPHA] Cumulative number of runtime operation errors by operation type.",
            ops.errors.clone(),
        );
        registry.register(
            "kubelet_runtime_operations_duration_seconds",
            "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
            ops.duration.clone(),
        );
        let ps = pod_start();
        registry.register(
            "kubelet_pod_start_duration_seconds",
            "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
            ps.start_duration.clone(),
        );
        registry.register(
            "kubelet_pod_start_sli_duration_seconds",
            "[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            ps.sli_duration.clone(),
        );
        registry.register(
            "kubelet_pod_start_total_duration_seconds",
            "[ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            ps.total_duration.clone(),
        );
        registry.register(
            "kubelet_first_network_pod_start_sli_duration_seconds",
            "[INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
            ps.first_network_sli.clone(),
        );
        registry.register(
            "kubelet_pod_worker_duration_seconds",
            "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
            ps.worker_duration.clone(),
        );
        registry.register(
            "kubelet_pod_worker_start_duration_seconds",
            "[ALPHA] Duration in seconds from kubelet seeing a pod to starting a worker.",
            ps.worker_start_duration.clone(),
        );
        let pl = pleg();
        registry.register(
            "kubelet_pleg_relist_duration_seconds",
            "[ALPHA] Duration in seconds for relisting pods in PLEG.",
            pl.relist_duration.clone(),
        );
        registry.register(
            "kubelet_pleg_relist_interval_seconds",
            "[ALPHA] Interval in seconds between relisting in PLEG.",
            pl.relist_interval.clone(),
        );
        registry.register(
            "kubelet_pleg_last_seen_seconds",
            "[ALPHA] Timestamp in seconds when PLEG was last seen active.",
            pl.last_seen.clone(),
        );
        registry.register(
            "kubelet_evented_pleg_connection_success_count",
            "[ALPHA] The number of times a streaming client was obtained to receive CRI Events.",
            pl.connections.clone(),
        );
        registry.register(
            "kubelet_evented_pleg_connection_error_count",
            "[ALPHA] The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
            pl.connection_errors.clone(),
        );
        let sp = started_pods();
        registry.register(
            "kubelet_started_pods",
            "[ALPHA] Cumulative number of pods started",
            sp.total.clone(),
        );
        registry.register(
            "kubelet_started_pods_errors",
            "[ALPHA] Cumulative number of errors when starting pods",
            sp.errors.clone(),
        );
        registry.register(
            "kubelet_started_user_namespaced_pods",
            "[ALPHA] Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.",
            sp.user_namespaced.clone(),
        );
        registry.register(
            "kubelet_started_user_namespaced_pods_errors",
            "[ALPHA] Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.",
            sp.user_namespaced_errors.clone(),
        );
        let http_requests = Family::<Labels, Counter>::default();
        registry.register(
            "kubelet_http_requests",
            "[ALPHA] Number of the http requests received since the server started",
            http_requests.clone(),
        );
        let http_inflight = Family::<Labels, Gauge>::default();
        registry.register(
            "kubelet_http_inflight_requests",
            "[ALPHA] Number of the inflight http requests",
            http_inflight.clone(),
        );
        let http_duration: HistogramFamily = Family::new_with_constructor(default_histogram);
        registry.register(
            "kubelet_http_requests_duration_seconds",
            "[ALPHA] Duration in seconds to serve http requests",
            http_duration.clone(),
        );
        Metrics {
            registry,
            node_name,
            running_pods,
            running_containers,
            http_requests,
            http_inflight,
            http_duration,
        }
    }

    /// Counts a request and returns a guard that keeps it in the inflight gauge.
    pub fn request_started(&self, method: &str, path: &str) -> (InflightGuard<'_>, Labels) {
        let bucket = path_bucket(path);
        let labels = vec![
            ("method".to_string(), method_bucket(method).to_string()),
            ("path".to_string(), bucket.clone()),
            ("server_type".to_string(), "readwrite".to_string()),
            (
                "long_running".to_string(),
                long_running(&bucket).to_string(),
            ),
        ];
        self.http_requests.get_or_create(&labels).inc();
        self.http_inflight.get_or_create(&labels).inc();
        (
            InflightGuard {
                gauge: &self.http_inflight,
                labels: labels.clone(),
            },
            labels,
        )
    }

    /// Records how long a request took to be answered.
    pub fn request_finished(&self, labels: &Labels, took: Duration) {
        self.http_duration
            .get_or_create(labels)
            .observe(took.as_secs_f64());
    }

    /// Refreshes the gauges read from the runtime, then renders everything as text.
    pub async fn render(&self, cri: &CriClient) -> String {
        if let Ok(sandboxes) = cri.list_pod_sandboxes(&[]).await {
            let n = sandboxes
                .iter()
                .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
                .count();
            self.running_pods.set(n as i64);
        }
        if let Ok(containers) = cri.list_containers(&[]).await {
            let mut counts = [0i64; 4];
            for c in &containers {
                let i = match api::ContainerState::try_from(c.state) {
                    Ok(api::ContainerState::ContainerCreated) => 0,
                    Ok(api::ContainerState::ContainerRunning) => 1,
                    Ok(api::ContainerState::ContainerExited) => 2,
                    _ => 3,
                };
                counts[i] += 1;
            }
            for (i, state) in ["created", "running", "exited", "unknown"]
                .iter()
                .enumerate()
            {
                self.running_containers
                    .get_or_create(&vec![("container_state".into(), state.to_string())])
                    .set(counts[i]);
            }
        }
        let _ = &self.node_name;
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Content type of [`Metrics::render`] (OpenMetrics text, which Prometheus reads).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text format of `/metrics/resource`.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn ms(ns: i64) -> i64 {
    ns / 1_000_000
}

/// `/metrics/resource` in the Prometheus text format, from a CPU-and-memory summary (or `None`
/// when it could not be had: then only the scrape error gauges, set to 1).
pub fn render_resource_metrics(summary: Option<&Summary>) -> String {
    let mut families: Vec<(&str, &str, &str, Vec<String>)> = Vec::new();
    let err = if summary.is_some() { 0 } else { 1 };
    let mut container_cpu = Vec::new();
    let mut container_mem = Vec::new();
    let mut container_start = Vec::new();
    let mut pod_cpu = Vec::new();
    let mut pod_mem = Vec::new();
    let mut node_cpu = Vec::new();
    let mut node_mem = Vec::new();
    if let Some(s) = summary {
        if let Some(c) = s.node.cpu.as_ref() {
            if let Some(u) = c.usage_core_nano_seconds {
                node_cpu.push(format!(
                    "node_cpu_usage_seconds_total {} {}",
                    u as f64 / 1e9,
                    ms(c.time_ns)
                ));
            }
        }
        if let Some(m) = s.node.memory.as_ref() {
            if let Some(w) = m.working_set_bytes {
                node_mem.push(format!(
                    "node_memory_working_set_bytes {} {}",
                    w,
                    ms(m.time_ns)
                ));
            }
        }
        for p in &s.pods {
            let (pod, ns) = (
                escape_label(&p.pod_ref.name),
                escape_label(&p.pod_ref.namespace),
            );
            for c in &p.containers {
                let cl = format!(
                    "{{container=\"{}\",namespace=\"{ns}\",pod=\"{pod}\"}}",
                    escape_label(&c.name)
                );
                if c.start_ns > 0 {
                    container_start.push(format!(
                        "container_start_time_seconds{cl} {}",
                        c.start_ns as f64 / 1e9
                    ));
                }
                if let Some(cpu) = c.cpu.as_ref() {
                    if let Some(u) = cpu.usage_core_nano_seconds {
                        container_cpu.push(format!(
                            "container_cpu_usage_seconds_total{cl} {} {}",
                            u as f64 / 1e9,
                            ms(cpu.time_ns)
                        ));
                    }
                }
                if let Some(m) = c.memory.as_ref() {
                    if let Some(w) = m.working_set_bytes {
                        container_mem.push(format!(
                            "container_memory_working_set_bytes{cl} {} {}",
                            w,
                            ms(m.time_ns)
                        ));
                    }
                }
            }
            let pl = format!("{{namespace=\"{ns}\",pod=\"{pod}\"}}");
            if let Some(cpu) = p.cpu.as_ref() {
                if let Some(u) = cpu.usage_core_nano_seconds {
                    pod_cpu.push(format!(
                        "pod_cpu_usage_seconds_total{pl} {} {}",
                        u as f64 / 1e9,
                        ms(cpu.time_ns)
                    ));
                }
            }
            if let Some(m) = p.memory.as_ref() {
                if let Some(w) = m.working_set_bytes {
                    pod_mem.push(format!(
                        "pod_memory_working_set_bytes{pl} {} {}",
                        w,
                        ms(m.time_ns)
                    ));
                }
            }
        }
    }
    families.push((
        "container_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
        "counter",
        container_cpu,
    ));
    families.push((
        "container_memory_working_set_bytes",
        "[STABLE] Current working set of the container in bytes",
        "gauge",
        container_mem,
    ));
    families.push((
        "container_start_time_seconds",
        "[STABLE] Start time of the container since unix epoch in seconds",
        "gauge",
        container_start,
    ));
    families.push((
        "node_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
        "counter",
        node_cpu,
    ));
    families.push((
        "node_memory_working_set_bytes",
        "[STABLE] Current working set of the node in bytes",
        "gauge",
        node_mem,
    ));
    families.push((
        "pod_cpu_usage_seconds_total",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
        pod_cpu,
    ));
    families.push((
        "pod_memory_working_set_bytes",
        "[STABLE] Current working set of the pod in bytes",
        "gauge",
        pod_mem,
    ));
    families.push((
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
        vec![format!("resource_scrape_error {err}")],
    ));
    families.push((
        "scrape_error",
        "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
        vec![format!("scrape_error {err}")],
    ));
    let mut out = String::new();
    for (name, help, kind, mut samples) in families {
        if samples.is_empty() {
            continue;
        }
        samples.sort();
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in samples {
            let _ = writeln!(out, "{s}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::stats::{ContainerStats, CpuStats, MemoryStats, PodReference, PodStats};
    use super::*;

    #[test]
    fn operation_types_match_the_go_kubelet() {
        assert_eq!(operation_type("ListPodSandbox"), "list_podsandbox");
        assert_eq!(operation_type("RunPodSandbox"), "run_podsandbox");
        assert_eq!(operation_type("PodSandboxStatus"), "podsandbox_status");
        assert_eq!(operation_type("ExecSync"), "exec_sync");
        assert_eq!(operation_type("ListContainers"), "list_containers");
        assert_eq!(operation_type("Version"), "version");
    }

    #[test]
    fn path_buckets_match_the_go_kubelet() {
        assert_eq!(path_bucket("/containerLogs/a/b/c"), "containerLogs");
        assert_eq!(path_bucket("/metrics/resource"), "metrics/resource");
        assert_eq!(path_bucket("/metrics"), "metrics");
        assert_eq!(path_bucket("/stats/summary"), "stats");
        assert_eq!(path_bucket("/nope"), "other");
        assert!(long_running("exec") && long_running("portForward") && !long_running("pods"));
        assert_eq!(method_bucket("BREW"), "other");
    }

    #[test]
    fn pod_start_metrics_have_the_go_names_and_buckets() {
        let m = Metrics::new("n1");
        observe_pod_startup(&crate::pod::startup_latency::StartupObservation {
            total: Duration::from_millis(1500),
            sli: Some(Duration::from_millis(700)),
            first_network_pod: true,
        });
        observe_pod_start_duration(Duration::from_millis(300));
        observe_pod_worker("create", Duration::from_millis(40));
        observe_pod_worker_start(Duration::from_millis(2));
        let mut out = String::new();
        encode(&mut out, &m.registry).unwrap();
        for want in [
            "kubelet_pod_start_total_duration_seconds_bucket{le=\"2.0\"}",
            "kubelet_pod_start_sli_duration_seconds_bucket{le=\"1.0\"}",
            "kubelet_pod_start_sli_duration_seconds_bucket{le=\"3600.0\"}",
            "kubelet_pod_start_duration_seconds_bucket{le=\"0.5\"}",
            "kubelet_first_network_pod_start_sli_duration_seconds 0.7",
            "operation_type=\"create\"",
            "kubelet_pod_worker_duration_seconds_bucket{",
            "kubelet_pod_worker_start_duration_seconds_count",
        ] {
            assert!(out.contains(want), "{want} missing:\n{out}");
        }
    }

    #[test]
    fn pleg_metrics_have_the_go_names() {
        let m = Metrics::new("n1");
        observe_pleg_relist(Duration::from_millis(4), Some(Duration::from_secs(5)));
        observe_pleg_event_stream(true);
        let mut out = String::new();
        encode(&mut out, &m.registry).unwrap();
        for want in [
            "kubelet_pleg_relist_duration_seconds_bucket{le=\"0.005\"}",
            "kubelet_pleg_relist_interval_seconds_bucket{le=\"5.0\"}",
            "kubelet_pleg_last_seen_seconds ",
            "kubelet_evented_pleg_connection_success_count 1",
        ] {
            assert!(out.contains(want), "{want} missing:\n{out}");
        }
    }

    #[test]
    fn metrics_text_has_kubelet_names() {
        let m = Metrics::new("n1");
        observe_runtime_call("ListContainers", Duration::from_millis(3), false);
        observe_runtime_call("ListContainers", Duration::from_millis(3), true);
        let (guard, labels) = m.request_started("GET", "/pods");
        m.request_finished(&labels, Duration::from_millis(2));
        drop(guard);
        let mut out = String::new();
        encode(&mut out, &m.registry).unwrap();
        assert!(out.contains("kubelet_node_name{node=\"n1\"} 1"), "{out}");
        assert!(
            out.contains("kubelet_runtime_operations_total{operation_type=\"list_containers\"}"),
            "{out}"
        );
        assert!(
            out.contains(
                "kubelet_runtime_operations_errors_total{operation_type=\"list_containers\"}"
            ),
            "{out}"
        );
        assert!(out.contains("kubelet_http_requests_total{method=\"GET\",path=\"pods\",server_type=\"readwrite\",long_running=\"false\"} 1"), "{out}");
        assert!(out.contains("kubelet_http_inflight_requests{method=\"GET\",path=\"pods\",server_type=\"readwrite\",long_running=\"false\"} 0"), "{out}");
    }

    #[test]
    fn resource_metrics_have_metrics_server_names_and_timestamps() {
        let s = Summary {
            node: super::super::stats::NodeStats {
                cpu: Some(CpuStats {
                    usage_core_nano_seconds: Some(2_500_000_000),
                    time_ns: 1_700_000_000_123_000_000,
                    ..Default::default()
                }),
                memory: Some(MemoryStats {
                    working_set_bytes: Some(1024),
                    time_ns: 1_700_000_000_123_000_000,
                    ..Default::default()
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                containers: vec![ContainerStats {
                    name: "c".into(),
                    start_ns: 1_600_000_000_000_000_000,
                    cpu: Some(CpuStats {
                        usage_core_nano_seconds: Some(500_000_000),
                        time_ns: 1_700_000_000_000_000_000,
                        ..Default::default()
                    }),
                    memory: Some(MemoryStats {
                        working_set_bytes: Some(4096),
                        time_ns: 1_700_000_000_000_000_000,
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                cpu: Some(CpuStats {
                    usage_core_nano_seconds: Some(500_000_000),
                    time_ns: 1_700_000_000_000_000_000,
                    ..Default::default()
                }),
                memory: Some(MemoryStats {
                    working_set_bytes: Some(8192),
                    time_ns: 1_700_000_000_000_000_000,
                    ..Default::default()
                }),
                ..Default::default()
            }],
        };
        let t = render_resource_metrics(Some(&s));
        assert!(t.contains("# TYPE node_cpu_usage_seconds_total counter\nnode_cpu_usage_seconds_total 2.5 1700000000123\n"), "{t}");
        assert!(
            t.contains("node_memory_working_set_bytes 1024 1700000000123\n"),
            "{t}"
        );
        assert!(t.contains("container_cpu_usage_seconds_total{container=\"c\",namespace=\"ns\",pod=\"p\"} 0.5 1700000000000\n"), "{t}");
        assert!(t.contains("container_memory_working_set_bytes{container=\"c\",namespace=\"ns\",pod=\"p\"} 4096 1700000000000\n"), "{t}");
        assert!(t.contains("container_start_time_seconds{container=\"c\",namespace=\"ns\",pod=\"p\"} 1600000000\n"), "{t}");
        assert!(
            t.contains(
                "pod_memory_working_set_bytes{namespace=\"ns\",pod=\"p\"} 8192 1700000000000\n"
            ),
            "{t}"
        );
        assert!(t.contains("resource_scrape_error 0\n"), "{t}");
        let e = render_resource_metrics(None);
        assert!(
            e.contains("scrape_error 1\n") && !e.contains("node_cpu"),
            "{e}"
        );
    }
}
