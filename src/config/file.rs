//! The kubelet's configuration file: `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`
//! (k8s.io/kubelet `config/v1beta1/types.go`), what `kubeadm join` writes to
//! `/var/lib/kubelet/config.yaml`. YAML or JSON.
//!
//! Every field of the Go type has one of three fates here, decided by [`FIELDS`]:
//! - **honoured**: read into [`FileConfig`] and merged under the command-line flags
//!   ([`super::merge_file`]);
//! - **warned**: accepted, with a start-up warning when set to anything but its default,
//!   because deckhand's behaviour without it is harmless (the warning says why);
//! - **refused**: set to anything but its default, start-up fails with
//!   [`ConfigFileError::Unsupported`], because ignoring it would change what the node does.
//!
//! A field the Go type does not have is [`ConfigFileError::UnknownField`] (the Go kubelet decodes
//! v1beta1 leniently and only logs unknown fields; deckhand is stricter on purpose, so a typo
//! such as `clusterDns` cannot silently leave a setting at its default).
//!
//! Go's zero values mean "default" (kubeadm writes `syncFrequency: 0s`, `crashLoopBackOff: {}`,
//! `containerRuntimeEndpoint: ""`, ...), so null, `0`, `""`, `"0s"`, `false`, `{}` and `[]` count
//! as unset everywhere. Relative paths are resolved against the file's directory, as the Go
//! kubelet's `resolveRelativePaths` does for the fields of `KubeletConfigurationPathRefs`.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The API group/version the file must declare.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind the file must declare.
pub const KIND: &str = "KubeletConfiguration";

/// Errors reading a KubeletConfiguration file. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("failed to read kubelet config file {path:?}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is empty (the Go kubelet refuses that too).
    #[error("kubelet config file {path:?} was empty")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// Neither YAML nor JSON, or a field has the wrong type.
    #[error("kubelet config file {path:?}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        message: String,
    },
    /// `apiVersion`/`kind` are not `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`.
    #[error("kubelet config file {path:?}: apiVersion {api_version:?} kind {kind:?} is not {API_VERSION} {KIND}")]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// The apiVersion found.
        api_version: String,
        /// The kind found.
        kind: String,
    },
    /// A field the KubeletConfiguration type does not have.
    #[error("kubelet config file {path:?}: unknown field {field:?}")]
    UnknownField {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field, e.g. `authentication.x509.clientCaFile`.
        field: String,
    },
    /// A field deckhand does not implement, set to a value that would change behaviour.
    #[error("kubelet config file {path:?}: field {field:?} = {value} is not supported by deckhand: {why}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field.
        field: String,
        /// The value, as JSON.
        value: String,
        /// Why it cannot be ignored.
        why: &'static str,
    },
    /// An honoured field has a value deckhand cannot use (e.g. a bad duration).
    #[error("kubelet config file {path:?}: field {field:?}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// What deckhand does with one field of the Go type.
#[derive(Debug, Clone, Copy)]
pub enum Fate {
    /// Read into [`FileConfig`].
    Honoured,
    /// A nested object whose fields are listed under `<field>.`.
    Object,
    /// Accepted; a warning when set to anything but unset or a value `ok` accepts.
    Warn {
        /// Values that need no warning (besides unset ones).
        ok: fn(&Value) -> bool,
        /// Why ignoring it is harmless.
        why: &'static str,
    },
    /// Refused when set to anything but unset or a value `ok` accepts.
    Refuse {
        /// Values that are fine (besides unset ones).
        ok: fn(&Value) -> bool,
        /// Why it cannot be ignored.
        why: &'static str,
    },
}

fn none(_: &Value) -> bool {
    false
}
fn is_true(v: &Value) -> bool {
    v == &Value::Bool(true)
}
fn is_str<const N: usize>(v: &Value, ok: [&str; N]) -> bool {
    v.as_str().is_some_and(|s| ok.contains(&s))
}

use Fate::{Honoured, Object, Refuse, Warn};

/// Every field of `KubeletConfiguration` v1beta1 at Kubernetes v1.36 (dotted paths for nested
/// objects), with its fate.
pub const FIELDS: &[(&str, Fate)] = &[
    ("apiVersion", Honoured),
    ("kind", Honoured),
    ("enableServer", Refuse { ok: is_true, why: "deckhand always runs the kubelet server" }),
    ("staticPodPath", Honoured),
    ("podLogsDir", Honoured),
    ("syncFrequency", Warn { ok: none, why: "deckhand re-syncs every pod every 10s and on every runtime event" }),
    ("fileCheckFrequency", Honoured),
    ("httpCheckFrequency", Warn { ok: none, why: "only used with staticPodURL, which deckhand refuses" }),
    ("staticPodURL", Refuse { ok: none, why: "static pods from a URL are not implemented (use staticPodPath)" }),
    ("staticPodURLHeader", Refuse { ok: none, why: "static pods from a URL are not implemented" }),
    ("address", Honoured),
    ("port", Honoured),
    ("readOnlyPort", Honoured),
    ("tlsCertFile", Honoured),
    ("tlsPrivateKeyFile", Honoured),
    ("tlsCipherSuites", Refuse { ok: none, why: "the server uses rustls' fixed set of modern cipher suites; a restricted list cannot be honoured" }),
    ("tlsCurvePreferences", Refuse { ok: none, why: "the server uses rustls' key-exchange groups; a restricted list cannot be honoured" }),
    ("tlsMinVersion", Refuse { ok: |v| is_str(v, ["VersionTLS10", "VersionTLS11", "VersionTLS12"]), why: "the server negotiates TLS 1.2 or 1.3 (never lower); a TLS 1.3 minimum is not implemented" }),
    ("rotateCertificates", Honoured),
    ("serverTLSBootstrap", Honoured),
    ("authentication", Object),
    ("authentication.x509", Object),
    ("authentication.x509.clientCAFile", Honoured),
    ("authentication.webhook", Object),
    ("authentication.webhook.enabled", Honoured),
    ("authentication.webhook.cacheTTL", Warn { ok: |v| is_str(v, ["2m", "2m0s", "120s"]), why: "TokenReview results are cached for a fixed 2m (the Go default)" }),
    ("authentication.anonymous", Object),
    ("authentication.anonymous.enabled", Honoured),
    ("authorization", Object),
    ("authorization.mode", Honoured),
    ("authorization.webhook", Object),
    ("authorization.webhook.cacheAuthorizedTTL", Warn { ok: |v| is_str(v, ["5m", "5m0s", "300s"]), why: "allowed SubjectAccessReview results are cached for a fixed 5m (the Go default)" }),
    ("authorization.webhook.cacheUnauthorizedTTL", Warn { ok: |v| is_str(v, ["30s"]), why: "denied SubjectAccessReview results are cached for a fixed 30s (the Go default)" }),
    ("registryPullQPS", Warn { ok: none, why: "image pulls are serialized, one at a time, with no other rate limit" }),
    ("registryBurst", Warn { ok: none, why: "image pulls are serialized, one at a time, with no other rate limit" }),
    ("imagePullCredentialsVerificationPolicy", Refuse { ok: |v| is_str(v, ["NeverVerify"]), why: "deckhand does not verify pull credentials for images already on the node (behaves as NeverVerify)" }),
    ("preloadedImagesVerificationAllowlist", Warn { ok: none, why: "only meaningful with an image credential verification policy, which deckhand does not implement" }),
    ("eventRecordQPS", Warn { ok: none, why: "events are aggregated and sent by one task without a rate limit" }),
    ("eventBurst", Warn { ok: none, why: "events are aggregated and sent by one task without a rate limit" }),
    ("enableDebuggingHandlers", Refuse { ok: is_true, why: "deckhand always serves logs, exec, attach and port-forward (behind authentication and authorization)" }),
    ("enableContentionProfiling", Warn { ok: none, why: "there is no Go profiler in a Rust process" }),
    ("healthzPort", Honoured),
    ("healthzBindAddress", Honoured),
    ("oomScoreAdj", Warn { ok: none, why: "deckhand leaves its own OOM score to the service manager (set OOMScoreAdjust= in the unit)" }),
    ("clusterDomain", Honoured),
    ("clusterDNS", Honoured),
    ("streamingConnectionIdleTimeout", Warn { ok: none, why: "exec/attach/port-forward streams end when either side closes them; there is no idle timeout" }),
    ("nodeStatusUpdateFrequency", Honoured),
    ("nodeStatusReportFrequency", Honoured),
    ("nodeLeaseDurationSeconds", Honoured),
    ("imageMinimumGCAge", Honoured),
    ("imageMaximumGCAge", Honoured),
    ("imageGCHighThresholdPercent", Honoured),
    ("imageGCLowThresholdPercent", Honoured),
    ("volumeStatsAggPeriod", Warn { ok: none, why: "volume usage is measured when stats are requested" }),
    ("kubeletCgroups", Warn { ok: none, why: "deckhand stays in the cgroup its service manager gives it" }),
    ("systemCgroups", Warn { ok: none, why: "deckhand does not move system processes between cgroups" }),
    ("cgroupRoot", Refuse { ok: |v| is_str(v, ["/"]), why: "pod cgroups are always placed under the root cgroup" }),
    ("cgroupsPerQOS", Honoured),
    ("cgroupDriver", Honoured),
    ("cpuManagerPolicy", Refuse { ok: |v| is_str(v, ["none"]), why: "only the `none` CPU manager policy is implemented" }),
    ("singleProcessOOMKill", Warn { ok: none, why: "the runtime's default OOM-kill grouping applies" }),
    ("cpuManagerPolicyOptions", Refuse { ok: none, why: "only the `none` CPU manager policy is implemented" }),
    ("cpuManagerReconcilePeriod", Warn { ok: none, why: "no CPU manager to reconcile (policy `none`)" }),
    ("memoryManagerPolicy", Refuse { ok: |v| is_str(v, ["None"]), why: "only the `None` memory manager policy is implemented" }),
    ("topologyManagerPolicy", Refuse { ok: |v| is_str(v, ["none"]), why: "only the `none` topology manager policy is implemented" }),
    ("topologyManagerScope", Warn { ok: |v| is_str(v, ["container"]), why: "meaningless with topology manager policy `none`" }),
    ("topologyManagerPolicyOptions", Refuse { ok: none, why: "only the `none` topology manager policy is implemented" }),
    ("qosReserved", Refuse { ok: none, why: "memory QoS reservation is not implemented" }),
    ("runtimeRequestTimeout", Warn { ok: none, why: "CRI calls use deckhand's own per-call timeouts" }),
    ("hairpinMode", Warn { ok: none, why: "hairpin traffic is configured by the CNI plugin configuration" }),
    ("maxPods", Honoured),
    ("podCIDR", Warn { ok: none, why: "pod addresses come from the CNI configuration; the runtime's pod CIDR is not updated" }),
    ("podPidsLimit", Refuse { ok: |v| v.as_i64() == Some(-1), why: "a per-pod PID limit is not enforced" }),
    ("resolvConf", Honoured),
    ("runOnce", Refuse { ok: none, why: "run-once mode is not implemented" }),
    ("cpuCFSQuota", Refuse { ok: is_true, why: "CPU limits are always enforced with CFS quota" }),
    ("cpuCFSQuotaPeriod", Refuse { ok: |v| is_str(v, ["100ms"]), why: "the CFS quota period is always 100ms" }),
    ("nodeStatusMaxImages", Warn { ok: none, why: "the node status lists at most 50 images, as the Go kubelet's default" }),
    ("maxOpenFiles", Warn { ok: none, why: "deckhand's open-file limit comes from its service manager (LimitNOFILE=)" }),
    ("contentType", Warn { ok: |v| is_str(v, ["application/json"]), why: "deckhand talks JSON to the API server" }),
    ("kubeAPIQPS", Warn { ok: none, why: "API requests are not rate-limited on the client side" }),
    ("kubeAPIBurst", Warn { ok: none, why: "API requests are not rate-limited on the client side" }),
    ("serializeImagePulls", Warn { ok: is_true, why: "image pulls are always serialized (safe, slower with many images)" }),
    ("maxParallelImagePulls", Warn { ok: |v| v.as_i64() == Some(1), why: "image pulls are always serialized (one at a time)" }),
    ("evictionHard", Honoured),
    ("evictionSoft", Refuse { ok: none, why: "soft eviction thresholds are not implemented (use evictionHard)" }),
    ("evictionSoftGracePeriod", Refuse { ok: none, why: "soft eviction thresholds are not implemented" }),
    ("evictionPressureTransitionPeriod", Honoured),
    ("evictionMaxPodGracePeriod", Warn { ok: none, why: "only used by soft eviction, which is refused" }),
    ("evictionMinimumReclaim", Warn { ok: none, why: "eviction stops as soon as the hard threshold is no longer crossed" }),
    ("mergeDefaultEvictionSettings", Warn { ok: none, why: "evictionHard as given is passed on unchanged" }),
    ("podsPerCore", Refuse { ok: none, why: "pod capacity is maxPods only" }),
    ("enableControllerAttachDetach", Warn { ok: none, why: "deckhand has no attachable volume plugins" }),
    ("protectKernelDefaults", Refuse { ok: none, why: "kernel tunables are not checked at start-up" }),
    ("makeIPTablesUtilChains", Warn { ok: none, why: "deprecated in the Go kubelet; deckhand creates no iptables chains" }),
    ("iptablesMasqueradeBit", Warn { ok: none, why: "deprecated in the Go kubelet; deckhand creates no iptables chains" }),
    ("iptablesDropBit", Warn { ok: none, why: "deprecated in the Go kubelet; deckhand creates no iptables chains" }),
    ("featureGates", Warn { ok: none, why: "deckhand has no feature gates; it implements one fixed feature set" }),
    ("failSwapOn", Warn { ok: none, why: "deckhand does not check for swap at start-up" }),
    ("memorySwap", Object),
    ("memorySwap.swapBehavior", Refuse { ok: |v| is_str(v, ["NoSwap"]), why: "containers never get swap" }),
    ("containerLogMaxSize", Honoured),
    ("containerLogMaxFiles", Honoured),
    ("containerLogMaxWorkers", Warn { ok: none, why: "one task rotates all container logs" }),
    ("containerLogMonitorInterval", Warn { ok: none, why: "container logs are checked for rotation every 10s" }),
    ("configMapAndSecretChangeDetectionStrategy", Warn { ok: none, why: "ConfigMap and Secret volumes are read from the API server when a pod is set up" }),
    ("systemReserved", Honoured),
    ("kubeReserved", Honoured),
    ("reservedSystemCPUs", Refuse { ok: none, why: "CPU reservation by CPU list needs the static CPU manager, which is not implemented" }),
    ("showHiddenMetricsForVersion", Warn { ok: none, why: "deckhand has no hidden metrics" }),
    ("systemReservedCgroup", Refuse { ok: none, why: "enforcing system-reserved on a cgroup is not implemented" }),
    ("kubeReservedCgroup", Refuse { ok: none, why: "enforcing kube-reserved on a cgroup is not implemented" }),
    ("enforceNodeAllocatable", Refuse { ok: |v| v.as_array().is_some_and(|a| a.iter().all(|x| is_str(x, ["pods", "none"]))), why: "only `pods` (or `none`) allocatable enforcement is implemented" }),
    ("allowedUnsafeSysctls", Warn { ok: none, why: "pod sysctls are passed to the runtime as given" }),
    ("volumePluginDir", Warn { ok: none, why: "FlexVolume plugins are not supported; the directory is not read" }),
    ("providerID", Refuse { ok: none, why: "spec.providerID is not set on registration" }),
    ("kernelMemcgNotification", Warn { ok: none, why: "memory pressure is observed by polling" }),
    ("logging", Object),
    ("logging.format", Warn { ok: |v| is_str(v, ["text"]), why: "deckhand logs text to stderr, or structured entries to journald under systemd" }),
    ("logging.flushFrequency", Warn { ok: none, why: "log lines are written as they happen" }),
    ("logging.verbosity", Honoured),
    ("logging.vmodule", Warn { ok: none, why: "use RUST_LOG for per-module levels" }),
    ("logging.options", Warn { ok: |v| v.as_object().is_some_and(|o| o.values().all(go_zero_deep)), why: "klog output options do not apply" }),
    ("enableSystemLogHandler", Warn { ok: none, why: "deckhand does not serve the node's /var/log" }),
    ("enableSystemLogQuery", Warn { ok: none, why: "deckhand does not serve node log queries" }),
    ("shutdownGracePeriod", Refuse { ok: none, why: "graceful node shutdown is not implemented" }),
    ("shutdownGracePeriodCriticalPods", Refuse { ok: none, why: "graceful node shutdown is not implemented" }),
    ("shutdownGracePeriodByPodPriority", Refuse { ok: none, why: "graceful node shutdown is not implemented" }),
    ("crashLoopBackOff", Object),
    ("crashLoopBackOff.maxContainerRestartPeriod", Refuse { ok: |v| is_str(v, ["5m", "5m0s", "300s"]), why: "the crash-loop back-off ceiling is fixed at 5m" }),
    ("reservedMemory", Refuse { ok: none, why: "NUMA memory reservation is not implemented" }),
    ("enableProfilingHandler", Warn { ok: none, why: "there is no Go profiler in a Rust process" }),
    ("enableDebugFlagsHandler", Warn { ok: none, why: "deckhand serves no /debug/flags" }),
    ("seccompDefault", Refuse { ok: none, why: "RuntimeDefault seccomp for pods without a profile is not implemented" }),
    ("memoryThrottlingFactor", Warn { ok: none, why: "memory QoS (memory.high) is not implemented" }),
    ("memoryReservationPolicy", Warn { ok: |v| is_str(v, ["None"]), why: "memory QoS reservation is not implemented" }),
    ("registerWithTaints", Honoured),
    ("registerNode", Refuse { ok: is_true, why: "deckhand always registers its Node when it has an API server" }),
    ("tracing", Warn { ok: none, why: "deckhand exports no OpenTelemetry traces" }),
    ("localStorageCapacityIsolation", Warn { ok: is_true, why: "ephemeral-storage capacity is always reported" }),
    ("containerRuntimeEndpoint", Honoured),
    ("imageServiceEndpoint", Honoured),
    ("failCgroupV1", Warn { ok: none, why: "deckhand does not check the cgroup version at start-up" }),
    ("userNamespaces", Object),
    ("userNamespaces.idsPerPod", Refuse { ok: |v| v.as_i64() == Some(65536), why: "user namespaces for pods are not implemented" }),
];

/// True for Go's zero values, which the Go kubelet's defaulting treats as "not set": null, `0`,
/// `""`, `"0s"`, `"0"`, `false`, `{}`, `[]`.
pub fn go_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || s == "0s" || s == "0",
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// [`go_zero`], also for objects whose every member is a zero (kubeadm's
/// `logging.options.json.infoBufferSize: "0"`).
fn go_zero_deep(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.values().all(go_zero_deep),
        v => go_zero(v),
    }
}

/// A field's fate, by dotted path.
pub fn fate(path: &str) -> Option<Fate> {
    FIELDS.iter().find(|(p, _)| *p == path).map(|(_, f)| *f)
}

/// A start-up warning about an accepted but ignored setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Dotted field path.
    pub field: String,
    /// The value, as JSON.
    pub value: String,
    /// Why it is harmless.
    pub why: &'static str,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "field {:?} = {} is ignored: {}",
            self.field, self.value, self.why
        )
    }
}

/// The honoured fields of a KubeletConfiguration file, as the file has them (Go's zero values
/// already turned into `None`, relative paths already resolved).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileConfig {
    /// `staticPodPath`.
    pub static_pod_path: Option<String>,
    /// `podLogsDir`.
    pub pod_logs_dir: Option<String>,
    /// `fileCheckFrequency`.
    pub file_check_frequency: Option<std::time::Duration>,
    /// `address`.
    pub address: Option<std::net::IpAddr>,
    /// `port`.
    pub port: Option<i32>,
    /// `readOnlyPort`.
    pub read_only_port: Option<i32>,
    /// `tlsCertFile`.
    pub tls_cert_file: Option<PathBuf>,
    /// `tlsPrivateKeyFile`.
    pub tls_private_key_file: Option<PathBuf>,
    /// `rotateCertificates`.
    pub rotate_certificates: Option<bool>,
    /// `serverTLSBootstrap`.
    pub server_tls_bootstrap: Option<bool>,
    /// `authentication.x509.clientCAFile`.
    pub client_ca_file: Option<PathBuf>,
    /// `authentication.webhook.enabled`.
    pub authentication_webhook: Option<bool>,
    /// `authentication.anonymous.enabled`.
    pub anonymous_auth: Option<bool>,
    /// `authorization.mode`.
    pub authorization_mode: Option<crate::server::auth::AuthorizationMode>,
    /// `healthzPort`.
    pub healthz_port: Option<i32>,
    /// `healthzBindAddress`.
    pub healthz_bind_address: Option<std::net::IpAddr>,
    /// `clusterDomain`.
    pub cluster_domain: Option<String>,
    /// `clusterDNS`.
    pub cluster_dns: Option<Vec<std::net::IpAddr>>,
    /// `nodeStatusUpdateFrequency`.
    pub node_status_update_frequency: Option<std::time::Duration>,
    /// `nodeStatusReportFrequency`.
    pub node_status_report_frequency: Option<std::time::Duration>,
    /// `nodeLeaseDurationSeconds`.
    pub node_lease_duration_seconds: Option<i32>,
    /// `cgroupsPerQOS`.
    pub cgroups_per_qos: Option<bool>,
    /// `cgroupDriver`.
    pub cgroup_driver: Option<String>,
    /// `maxPods`.
    pub max_pods: Option<u32>,
    /// `resolvConf` (an explicit `""` disables it, so it is kept).
    pub resolv_conf: Option<String>,
    /// `evictionHard`, as `signal<quantity>` entries.
    pub eviction_hard: Option<Vec<String>>,
    /// `evictionPressureTransitionPeriod`.
    pub eviction_pressure_transition_period: Option<std::time::Duration>,
    /// `containerLogMaxSize`.
    pub container_log_max_size: Option<String>,
    /// `containerLogMaxFiles`.
    pub container_log_max_files: Option<usize>,
    /// `systemReserved`, as `name=quantity` entries.
    pub system_reserved: Option<Vec<String>>,
    /// `kubeReserved`, as `name=quantity` entries.
    pub kube_reserved: Option<Vec<String>>,
    /// `logging.verbosity`.
    pub verbosity: Option<u8>,
    /// `registerWithTaints`, as `key=value:Effect` entries.
    pub register_with_taints: Option<Vec<String>>,
    /// `containerRuntimeEndpoint`.
    pub container_runtime_endpoint: Option<String>,
    /// `imageServiceEndpoint`.
    pub image_service_endpoint: Option<String>,
    /// `imageGCHighThresholdPercent` (a pointer in Go: an explicit 0 is kept).
    pub image_gc_high_threshold_percent: Option<i32>,
    /// `imageGCLowThresholdPercent` (a pointer in Go: an explicit 0 is kept).
    pub image_gc_low_threshold_percent: Option<i32>,
    /// `imageMinimumGCAge` (0 means the 2m default, as Go's defaulting).
    pub image_minimum_gc_age: Option<std::time::Duration>,
    /// `imageMaximumGCAge` (0, the default, disables it).
    pub image_maximum_gc_age: Option<std::time::Duration>,
}

/// The raw shapes of the honoured fields (only for decoding).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Raw {
    api_version: Option<String>,
    kind: Option<String>,
    static_pod_path: Option<String>,
    pod_logs_dir: Option<String>,
    file_check_frequency: Option<String>,
    address: Option<String>,
    port: Option<i32>,
    read_only_port: Option<i32>,
    tls_cert_file: Option<String>,
    tls_private_key_file: Option<String>,
    rotate_certificates: Option<bool>,
    #[serde(rename = "serverTLSBootstrap")]
    server_tls_bootstrap: Option<bool>,
    authentication: RawAuthn,
    authorization: RawAuthz,
    healthz_port: Option<i32>,
    healthz_bind_address: Option<String>,
    cluster_domain: Option<String>,
    #[serde(rename = "clusterDNS")]
    cluster_dns: Option<Vec<String>>,
    node_status_update_frequency: Option<String>,
    node_status_report_frequency: Option<String>,
    node_lease_duration_seconds: Option<i32>,
    #[serde(rename = "cgroupsPerQOS")]
    cgroups_per_qos: Option<bool>,
    cgroup_driver: Option<String>,
    max_pods: Option<i64>,
    resolv_conf: Option<String>,
    eviction_hard: Option<BTreeMap<String, String>>,
    eviction_pressure_transition_period: Option<String>,
    container_log_max_size: Option<String>,
    container_log_max_files: Option<i64>,
    system_reserved: Option<BTreeMap<String, String>>,
    kube_reserved: Option<BTreeMap<String, String>>,
    logging: RawLogging,
    register_with_taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
    container_runtime_endpoint: Option<String>,
    image_service_endpoint: Option<String>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    image_gc_high_threshold_percent: Option<i32>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    image_gc_low_threshold_percent: Option<i32>,
    #[serde(rename = "imageMinimumGCAge")]
    image_minimum_gc_age: Option<String>,
    #[serde(rename = "imageMaximumGCAge")]
    image_maximum_gc_age: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawAuthn {
    x509: RawX509,
    webhook: RawEnabled,
    anonymous: RawEnabled,
}
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct RawX509 {
    #[serde(rename = "clientCAFile")]
    client_ca_file: Option<String>,
}
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawEnabled {
    enabled: Option<bool>,
}
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawAuthz {
    mode: Option<String>,
}
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawLogging {
    verbosity: Option<u32>,
}

/// Reads and checks a KubeletConfiguration file: [`parse`] on its content, relative paths
/// resolved against its directory.
///
/// Errors: every [`ConfigFileError`].
pub fn load(path: &Path) -> Result<(FileConfig, Vec<Warning>), ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("/"));
    parse(&text, path, base)
}

fn resolve(base: &Path, p: Option<String>) -> Option<String> {
    p.filter(|s| !s.is_empty()).map(|s| {
        if Path::new(&s).is_absolute() {
            s
        } else {
            base.join(s).display().to_string()
        }
    })
}

/// Walks the document: every key must be a field of the Go type; warned and refused fields are
/// checked against their defaults. Maps with free keys (`evictionHard`, `featureGates`, ...) are
/// not descended into.
fn check_fields(
    obj: &serde_json::Map<String, Value>,
    prefix: &str,
    path: &Path,
    warnings: &mut Vec<Warning>,
) -> Result<(), ConfigFileError> {
    for (k, v) in obj {
        let field = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match fate(&field) {
            None => {
                return Err(ConfigFileError::UnknownField {
                    path: path.to_path_buf(),
                    field,
                })
            }
            Some(Honoured) => {}
            Some(Object) => match v {
                Value::Object(o) => check_fields(o, &field, path, warnings)?,
                Value::Null => {}
                _ => {
                    return Err(ConfigFileError::Syntax {
                        path: path.to_path_buf(),
                        message: format!("field {field:?} must be an object"),
                    })
                }
            },
            Some(Warn { ok, why }) => {
                if !go_zero(v) && !ok(v) {
                    warnings.push(Warning {
                        field,
                        value: v.to_string(),
                        why,
                    });
                }
            }
            Some(Refuse { ok, why }) => {
                if !go_zero(v) && !ok(v) {
                    return Err(ConfigFileError::Unsupported {
                        path: path.to_path_buf(),
                        field,
                        value: v.to_string(),
                        why,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Parses a KubeletConfiguration document (YAML, of which JSON is a subset). `path` names the
/// file in errors; relative paths are resolved against `base`.
///
/// Errors: every [`ConfigFileError`] but `Read`.
pub fn parse(
    text: &str,
    path: &Path,
    base: &Path,
) -> Result<(FileConfig, Vec<Warning>), ConfigFileError> {
    let p = || path.to_path_buf();
    if text.trim().is_empty() {
        return Err(ConfigFileError::Empty { path: p() });
    }
    let doc: Value = serde_yaml::from_str(text).map_err(|e| ConfigFileError::Syntax {
        path: p(),
        message: e.to_string(),
    })?;
    let Value::Object(obj) = &doc else {
        return Err(ConfigFileError::Syntax {
            path: p(),
            message: "the document is not a mapping".into(),
        });
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version != API_VERSION || kind != KIND {
        return Err(ConfigFileError::WrongKind {
            path: p(),
            api_version: api_version.into(),
            kind: kind.into(),
        });
    }
    let mut warnings = Vec::new();
    check_fields(obj, "", path, &mut warnings)?;
    let raw: Raw = serde_json::from_value(doc.clone()).map_err(|e| ConfigFileError::Syntax {
        path: p(),
        message: e.to_string(),
    })?;
    let invalid = |field: &str, message: String| ConfigFileError::Invalid {
        path: p(),
        field: field.into(),
        message,
    };
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let duration = |field: &str, s: Option<String>| -> Result<_, ConfigFileError> {
        match nonempty(s) {
            None => Ok(None),
            Some(s) => match super::parse_go_duration(&s) {
                Ok(d) if d.is_zero() => Ok(None),
                Ok(d) => Ok(Some(d)),
                Err(e) => Err(invalid(field, e)),
            },
        }
    };
    let ip = |field: &str, s: Option<String>| -> Result<_, ConfigFileError> {
        nonempty(s)
            .map(|s| {
                s.parse::<std::net::IpAddr>()
                    .map_err(|e| invalid(field, format!("{s:?}: {e}")))
            })
            .transpose()
    };
    let pairs = |m: Option<BTreeMap<String, String>>, sep: &str| {
        m.filter(|m| !m.is_empty())
            .map(|m| m.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect())
    };
    let positive = |n: Option<i32>| n.filter(|n| *n != 0);
    let cfg = FileConfig {
        static_pod_path: resolve(base, raw.static_pod_path),
        pod_logs_dir: resolve(base, raw.pod_logs_dir),
        file_check_frequency: duration("fileCheckFrequency", raw.file_check_frequency)?,
        address: ip("address", raw.address)?,
        port: positive(raw.port),
        read_only_port: positive(raw.read_only_port),
        tls_cert_file: resolve(base, raw.tls_cert_file).map(PathBuf::from),
        tls_private_key_file: resolve(base, raw.tls_private_key_file).map(PathBuf::from),
        rotate_certificates: raw.rotate_certificates,
        server_tls_bootstrap: raw.server_tls_bootstrap,
        client_ca_file: resolve(base, raw.authentication.x509.client_ca_file).map(PathBuf::from),
        authentication_webhook: raw.authentication.webhook.enabled,
        anonymous_auth: raw.authentication.anonymous.enabled,
        authorization_mode: nonempty(raw.authorization.mode)
            .map(|m| {
                <crate::server::auth::AuthorizationMode as clap::ValueEnum>::from_str(&m, false)
                    .map_err(|_| {
                        invalid(
                            "authorization.mode",
                            format!("{m:?} is not one of Webhook, AlwaysAllow"),
                        )
                    })
            })
            .transpose()?,
        healthz_port: raw.healthz_port,
        healthz_bind_address: ip("healthzBindAddress", raw.healthz_bind_address)?,
        cluster_domain: nonempty(raw.cluster_domain),
        cluster_dns: raw
            .cluster_dns
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.iter()
                    .map(|s| {
                        s.parse()
                            .map_err(|e| invalid("clusterDNS", format!("{s:?}: {e}")))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?,
        node_status_update_frequency: duration(
            "nodeStatusUpdateFrequency",
            raw.node_status_update_frequency,
        )?,
        node_status_report_frequency: duration(
            "nodeStatusReportFrequency",
            raw.node_status_report_frequency,
        )?,
        node_lease_duration_seconds: positive(raw.node_lease_duration_seconds),
        cgroups_per_qos: raw.cgroups_per_qos,
        cgroup_driver: nonempty(raw.cgroup_driver),
        max_pods: match raw.max_pods {
            None | Some(0) => None,
            Some(n) => Some(
                u32::try_from(n).map_err(|_| invalid("maxPods", format!("{n} is out of range")))?,
            ),
        },
        // Go: a nil resolvConf defaults to /etc/resolv.conf, an explicit "" disables it.
        resolv_conf: raw
            .resolv_conf
            .map(|s| resolve(base, Some(s)).unwrap_or_default()),
        eviction_hard: pairs(raw.eviction_hard, "<"),
        eviction_pressure_transition_period: duration(
            "evictionPressureTransitionPeriod",
            raw.eviction_pressure_transition_period,
        )?,
        container_log_max_size: nonempty(raw.container_log_max_size),
        container_log_max_files: match raw.container_log_max_files {
            None | Some(0) => None,
            Some(n) if n < 2 => {
                return Err(invalid(
                    "containerLogMaxFiles",
                    format!("{n}: must be at least 2"),
                ))
            }
            Some(n) => Some(n as usize),
        },
        system_reserved: pairs(raw.system_reserved, "="),
        kube_reserved: pairs(raw.kube_reserved, "="),
        verbosity: raw.logging.verbosity.map(|v| v.min(10) as u8),
        register_with_taints: raw.register_with_taints.filter(|t| !t.is_empty()).map(|t| {
            t.iter()
                .map(|t| {
                    let v = t.value.as_deref().unwrap_or("");
                    if v.is_empty() {
                        format!("{}:{}", t.key, t.effect)
                    } else {
                        format!("{}={}:{}", t.key, v, t.effect)
                    }
                })
                .collect()
        }),
        container_runtime_endpoint: nonempty(raw.container_runtime_endpoint),
        image_service_endpoint: nonempty(raw.image_service_endpoint),
        image_gc_high_threshold_percent: raw.image_gc_high_threshold_percent,
        image_gc_low_threshold_percent: raw.image_gc_low_threshold_percent,
        image_minimum_gc_age: duration("imageMinimumGCAge", raw.image_minimum_gc_age)?,
        image_maximum_gc_age: duration("imageMaximumGCAge", raw.image_maximum_gc_age)?,
    };
    let _ = (raw.api_version, raw.kind);
    Ok((cfg, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<(FileConfig, Vec<Warning>), ConfigFileError> {
        parse(s, Path::new("/etc/kubelet.yaml"), Path::new("/etc"))
    }

    #[test]
    fn every_nested_field_has_a_parent_object() {
        for (p, _) in FIELDS {
            if let Some((parent, _)) = p.rsplit_once('.') {
                assert!(
                    matches!(fate(parent), Some(Fate::Object)),
                    "{p}: parent {parent} is not an Object"
                );
            }
        }
    }

    #[test]
    fn unknown_field_names_field_and_file() {
        let e = parse_str("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDns: [10.96.0.10]\n")
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, ConfigFileError::UnknownField { ref field, .. } if field == "clusterDns")
        );
        assert!(
            msg.contains("/etc/kubelet.yaml") && msg.contains("clusterDns"),
            "{msg}"
        );
        let e = parse_str("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  x509:\n    clientCaFile: /x\n")
            .unwrap_err();
        assert!(
            matches!(e, ConfigFileError::UnknownField { ref field, .. } if field == "authentication.x509.clientCaFile"),
            "{e}"
        );
    }

    #[test]
    fn wrong_kind_and_empty_are_errors() {
        assert!(matches!(
            parse_str("apiVersion: v1\nkind: Pod\n"),
            Err(ConfigFileError::WrongKind { .. })
        ));
        assert!(matches!(
            parse_str("  \n"),
            Err(ConfigFileError::Empty { .. })
        ));
        assert!(matches!(
            parse_str("[1, 2]"),
            Err(ConfigFileError::Syntax { .. })
        ));
    }

    #[test]
    fn refused_and_warned_fields() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let e = parse_str(&format!("{head}cpuManagerPolicy: static\n")).unwrap_err();
        assert!(
            matches!(e, ConfigFileError::Unsupported { ref field, .. } if field == "cpuManagerPolicy"),
            "{e}"
        );
        // Defaults of refused fields are fine.
        let (_, w) = parse_str(&format!(
            "{head}cpuManagerPolicy: none\nenableServer: true\nshutdownGracePeriod: 0s\nmemorySwap: {{}}\n"
        ))
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        let (_, w) = parse_str(&format!(
            "{head}syncFrequency: 1m\nfeatureGates:\n  Foo: true\n"
        ))
        .unwrap();
        let fields: Vec<_> = w.iter().map(|w| w.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["featureGates", "syncFrequency"],
            "in key order"
        );
        assert!(w[0].to_string().contains("ignored"));
    }

    #[test]
    fn honoured_fields_json_and_relative_paths() {
        let json = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration",
          "clusterDNS":["10.96.0.10"],"clusterDomain":"cluster.local","staticPodPath":"manifests",
          "authentication":{"x509":{"clientCAFile":"/etc/kubernetes/pki/ca.crt"},"webhook":{"enabled":false},"anonymous":{"enabled":true}},
          "authorization":{"mode":"AlwaysAllow"},"evictionHard":{"memory.available":"200Mi"},
          "kubeReserved":{"cpu":"100m"},"maxPods":50,"port":10260,"nodeStatusUpdateFrequency":"20s",
          "resolvConf":"","registerWithTaints":[{"key":"a","value":"b","effect":"NoSchedule"},{"key":"c","effect":"NoExecute"}],
          "logging":{"verbosity":3},"containerLogMaxFiles":3}"#;
        let (c, w) = parse_str(json).unwrap();
        assert!(w.is_empty());
        assert_eq!(c.cluster_dns, Some(vec!["10.96.0.10".parse().unwrap()]));
        assert_eq!(c.static_pod_path.as_deref(), Some("/etc/manifests"));
        assert_eq!(c.authentication_webhook, Some(false));
        assert_eq!(c.anonymous_auth, Some(true));
        assert_eq!(
            c.authorization_mode,
            Some(crate::server::auth::AuthorizationMode::AlwaysAllow)
        );
        assert_eq!(c.eviction_hard, Some(vec!["memory.available<200Mi".into()]));
        assert_eq!(c.kube_reserved, Some(vec!["cpu=100m".into()]));
        assert_eq!(c.max_pods, Some(50));
        assert_eq!(c.port, Some(10260));
        assert_eq!(
            c.node_status_update_frequency,
            Some(std::time::Duration::from_secs(20))
        );
        assert_eq!(c.resolv_conf.as_deref(), Some(""));
        assert_eq!(
            c.register_with_taints,
            Some(vec!["a=b:NoSchedule".into(), "c:NoExecute".into()])
        );
        assert_eq!(c.verbosity, Some(3));
        assert_eq!(c.container_log_max_files, Some(3));
        let e = parse_str(r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","nodeStatusUpdateFrequency":"10x"}"#).unwrap_err();
        assert!(matches!(e, ConfigFileError::Invalid { .. }), "{e}");
    }

    /// The KubeletConfiguration kubeadm v1.36.3 writes, produced by kubeadm's own defaulting and
    /// marshalling (`DefaultedStaticInitConfiguration` + the kubelet component config's
    /// `Marshal`; see tests/data/README.md).
    #[test]
    fn kubeadm_written_file_parses() {
        let text = include_str!("../../tests/data/kubeadm-kubelet-config.yaml");
        let (c, w) = parse(
            text,
            Path::new("/var/lib/kubelet/config.yaml"),
            Path::new("/var/lib/kubelet"),
        )
        .unwrap();
        assert!(w.is_empty(), "kubeadm's defaults need no warning: {w:?}");
        assert_eq!(c.cluster_dns, Some(vec!["10.96.0.10".parse().unwrap()]));
        assert_eq!(c.cluster_domain.as_deref(), Some("cluster.local"));
        assert_eq!(
            c.static_pod_path.as_deref(),
            Some("/etc/kubernetes/manifests")
        );
        assert_eq!(
            c.client_ca_file,
            Some(PathBuf::from("/etc/kubernetes/pki/ca.crt"))
        );
        assert_eq!(c.cgroup_driver.as_deref(), Some("systemd"));
        assert_eq!(c.rotate_certificates, Some(true));
        assert_eq!(c.anonymous_auth, Some(false));
        assert_eq!(c.authentication_webhook, Some(true));
        assert_eq!(c.healthz_port, Some(10248));
        // Zero durations mean "default".
        assert_eq!(c.node_status_update_frequency, None);
        assert_eq!(c.container_runtime_endpoint, None);
    }
}
