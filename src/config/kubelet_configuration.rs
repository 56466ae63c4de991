//! `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`, k8s.io/kubelet
//! `config/v1beta1/types.go` at Kubernetes v1.36): one typed struct, every field of the Go type
//! declared once below, with its fate, its Rust type and its Go default
//! (`pkg/kubelet/apis/config/v1beta1/defaults.go`).
//!
//! - **honoured**: typed, used by deckhand, overlaid by its command-line flag
//!   ([`super::flags::Flags`]); Go's zero values (`0`, `""`, `"0s"`, `false`, `[]`, `{}`) count
//!   as unset, except for the fields that are pointers in Go (`pointer`: only null is unset);
//! - **accepted**: kept as written and not used; set to anything but a Go zero value or an
//!   accepted value, a start-up warning says why ignoring it is harmless;
//! - **refused**: set to anything but a Go zero value or its default, start-up fails, because
//!   ignoring it would change what the node does.
//!
//! To honour a new field: turn its row into `honoured(Type = default, Codec)`, give it a flag in
//! [`super::flags`] if the Go kubelet has one, and use it.

use super::fields::{
    go_zero_deep, is_str, is_true, kubelet_section, none, AtLeastTwo, FilePath, GoDuration,
    IdsPerPod, Mode, Plain, Verbosity,
};
use super::file::{API_VERSION, KIND};
use super::ConfigError;
use crate::server::auth::AuthorizationMode;
use k8s_openapi::api::core::v1::Taint;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

kubelet_section! {
    /// The kubelet's configuration (Go `KubeletConfiguration`, v1beta1). `Default` gives the Go
    /// defaults; [`super::file::parse`] reads one from a file, [`super::merge`] lays the flags over it.
    pub struct KubeletConfiguration {
        /// The API group/version: `kubelet.config.k8s.io/v1beta1`.
        api_version "apiVersion": honoured(String = API_VERSION.to_string(), Plain),
        /// The kind: `KubeletConfiguration`.
        kind "kind": honoured(String = KIND.to_string(), Plain),
        enable_server "enableServer": refused(is_true, "deckhand always runs the kubelet server"),
        /// Directory of static pod manifests (`--pod-manifest-path`); empty disables static pods.
        static_pod_path "staticPodPath": honoured(String = String::new(), FilePath),
        /// Directory of pod logs (`--pod-logs-dir`). Default `/var/log/pods`.
        pod_logs_dir "podLogsDir": honoured(String = "/var/log/pods".to_string(), FilePath),
        sync_frequency "syncFrequency": accepted(none, "deckhand re-syncs every pod every 30s and on every runtime event"),
        /// How often the static pod directory is re-read besides inotify
        /// (`--file-check-frequency`). Default 20s.
        file_check_frequency "fileCheckFrequency": honoured(Duration = Duration::from_secs(20), GoDuration),
        http_check_frequency "httpCheckFrequency": accepted(none, "only used with staticPodURL, which deckhand refuses"),
        static_pod_url "staticPodURL": refused(none, "static pods from a URL are not implemented (use staticPodPath)"),
        static_pod_url_header "staticPodURLHeader": refused(none, "static pods from a URL are not implemented"),
        /// IP address the kubelet server listens on (`--address`). Default `0.0.0.0`.
        address "address": honoured(IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED), Plain),
        /// Port of the kubelet server (`--port`), reported in `status.daemonEndpoints`. Default
        /// 10250.
        port "port": honoured(i32 = 10250, Plain),
        /// The unauthenticated read-only port (`--read-only-port`). deckhand has none: only 0 (the
        /// default) is accepted ([`KubeletConfiguration::validate`]).
        read_only_port "readOnlyPort": honoured(i32 = 0, Plain),
        /// Serving certificate (PEM, chain allowed) of the kubelet server (`--tls-cert-file`).
        /// Without it and `tlsPrivateKeyFile`, a self-signed one is made in `<root-dir>/pki`.
        tls_cert_file "tlsCertFile": honoured(Option<PathBuf> = None, FilePath),
        /// Private key (PEM) of `tlsCertFile` (`--tls-private-key-file`).
        tls_private_key_file "tlsPrivateKeyFile": honoured(Option<PathBuf> = None, FilePath),
        tls_cipher_suites "tlsCipherSuites": refused(none, "the server uses rustls' fixed set of modern cipher suites; a restricted list cannot be honoured"),
        tls_curve_preferences "tlsCurvePreferences": refused(none, "the server uses rustls' key-exchange groups; a restricted list cannot be honoured"),
        tls_min_version "tlsMinVersion": refused(|v| is_str(v, ["VersionTLS10", "VersionTLS11", "VersionTLS12"]), "the server negotiates TLS 1.2 or 1.3 (never lower); a TLS 1.3 minimum is not implemented"),
        /// Rotate the client certificate through new CSRs before it expires
        /// (`--rotate-certificates`). Default false.
        rotate_certificates "rotateCertificates": honoured(bool = false, Plain),
        /// Obtain (and rotate) the serving certificate through `kubernetes.io/kubelet-serving` CSRs
        /// (`--rotate-server-certificates`). Default false.
        server_tls_bootstrap "serverTLSBootstrap": honoured(bool = false, Plain),
        /// How kubelet server requests are authenticated.
        authentication "authentication": section(KubeletAuthentication),
        /// How kubelet server requests are authorized.
        authorization "authorization": section(KubeletAuthorization),
        registry_pull_qps "registryPullQPS": accepted(none, "image pulls are serialized, one at a time, with no other rate limit"),
        registry_burst "registryBurst": accepted(none, "image pulls are serialized, one at a time, with no other rate limit"),
        image_pull_credentials_verification_policy "imagePullCredentialsVerificationPolicy": refused(|v| is_str(v, ["NeverVerify"]), "deckhand does not verify pull credentials for images already on the node (behaves as NeverVerify)"),
        preloaded_images_verification_allowlist "preloadedImagesVerificationAllowlist": accepted(none, "only meaningful with an image credential verification policy, which deckhand does not implement"),
        event_record_qps "eventRecordQPS": accepted(none, "events are aggregated and sent by one task without a rate limit"),
        event_burst "eventBurst": accepted(none, "events are aggregated and sent by one task without a rate limit"),
        enable_debugging_handlers "enableDebuggingHandlers": refused(is_true, "deckhand always serves logs, exec, attach and port-forward (behind authentication and authorization)"),
        enable_contention_profiling "enableContentionProfiling": accepted(none, "there is no Go profiler in a Rust process"),
        /// Port of the plain-HTTP `/healthz` endpoint (`--healthz-port`); 0 disables it (a Go
        /// pointer: an explicit 0 is kept). Default 10248; `kubeadm join` waits on it.
        healthz_port "healthzPort": pointer(i32 = 10248, Plain),
        /// Address of the `/healthz` endpoint (`--healthz-bind-address`). Default `127.0.0.1`.
        healthz_bind_address "healthzBindAddress": honoured(IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST), Plain),
        oom_score_adj "oomScoreAdj": accepted(none, "deckhand leaves its own OOM score to the service manager (set OOMScoreAdjust= in the unit)"),
        /// Cluster domain (`--cluster-domain`), e.g. `cluster.local`: ClusterFirst pods get the
        /// search paths `<ns>.svc.<domain> svc.<domain> <domain>`.
        cluster_domain "clusterDomain": honoured(String = String::new(), Plain),
        /// DNS server IPs of ClusterFirst pods (`--cluster-dns`). Empty: they fall back to the
        /// node's resolv.conf, as the Go kubelet does (with a MissingClusterDNS event).
        cluster_dns "clusterDNS": honoured(Vec<IpAddr> = Vec::new(), Plain),
        streaming_connection_idle_timeout "streamingConnectionIdleTimeout": accepted(none, "exec/attach/port-forward streams end when either side closes them; there is no idle timeout"),
        /// How often node status is computed (`--node-status-update-frequency`). Default 10s.
        node_status_update_frequency "nodeStatusUpdateFrequency": honoured(Duration = Duration::from_secs(10), GoDuration),
        /// How often an unchanged node status is still written (`--node-status-report-frequency`).
        /// Default 5m.
        node_status_report_frequency "nodeStatusReportFrequency": honoured(Duration = Duration::from_secs(300), GoDuration),
        /// Lease duration in seconds (`--node-lease-duration-seconds`); renewed every quarter of
        /// it. Default 40.
        node_lease_duration_seconds "nodeLeaseDurationSeconds": honoured(i32 = 40, Plain),
        /// Minimum age of an unused image before it is garbage collected
        /// (`--minimum-image-ttl-duration`). Default 2m.
        image_minimum_gc_age "imageMinimumGCAge": honoured(Duration = Duration::from_secs(120), GoDuration),
        /// Unused images not used for longer than this are garbage collected whatever the disk
        /// usage (no flag, as in the Go kubelet). Default 0: off.
        image_maximum_gc_age "imageMaximumGCAge": honoured(Duration = Duration::ZERO, GoDuration),
        /// Image filesystem usage (percent, 0..=100) at or above which unused images are garbage
        /// collected (`--image-gc-high-threshold`); 100 disables image GC. Default 85 (a Go
        /// pointer: an explicit 0 is kept).
        image_gc_high_threshold_percent "imageGCHighThresholdPercent": pointer(i32 = 85, Plain),
        /// Image filesystem usage (percent) image garbage collection frees down to
        /// (`--image-gc-low-threshold`); below the high threshold. Default 80 (a Go pointer: an
        /// explicit 0 is kept).
        image_gc_low_threshold_percent "imageGCLowThresholdPercent": pointer(i32 = 80, Plain),
        volume_stats_agg_period "volumeStatsAggPeriod": accepted(none, "volume usage is measured when stats are requested"),
        kubelet_cgroups "kubeletCgroups": accepted(none, "deckhand stays in the cgroup its service manager gives it"),
        system_cgroups "systemCgroups": accepted(none, "deckhand does not move system processes between cgroups"),
        /// The cgroup the node's `kubepods` cgroup goes under (`--cgroup-root`), in cgroupfs form
        /// whatever the driver: kind's `/kubelet` puts pods under `/kubelet/kubepods` (cgroupfs)
        /// or `/kubelet.slice/kubelet-kubepods.slice` (systemd). It must exist
        /// ([`crate::cm::CgroupManager::validate_root`]). Default `/`.
        cgroup_root "cgroupRoot": honoured(String = "/".to_string(), Plain),
        /// Pod-level QoS cgroups (`kubepods/...`) are created and passed as cgroup parents
        /// (`--cgroups-per-qos`). Default true (a Go pointer: an explicit false is kept).
        cgroups_per_qos "cgroupsPerQOS": pointer(bool = true, Plain),
        /// Cgroup driver of the runtime, `cgroupfs` or `systemd` (`--cgroup-driver`). Default
        /// `cgroupfs`.
        cgroup_driver "cgroupDriver": honoured(String = "cgroupfs".to_string(), Plain),
        cpu_manager_policy "cpuManagerPolicy": refused(|v| is_str(v, ["none"]), "only the `none` CPU manager policy is implemented"),
        /// On cgroup v2, an OOM kill takes only the process the kernel picks instead of every
        /// process of the container (`memory.oom.group`, [`crate::cm::container_oom_group`]).
        /// Unset: false on cgroup v2 (a Go pointer: only null is unset).
        single_process_oom_kill "singleProcessOOMKill": pointer(Option<bool> = None, Plain),
        cpu_manager_policy_options "cpuManagerPolicyOptions": refused(none, "only the `none` CPU manager policy is implemented"),
        cpu_manager_reconcile_period "cpuManagerReconcilePeriod": accepted(none, "no CPU manager to reconcile (policy `none`)"),
        memory_manager_policy "memoryManagerPolicy": refused(|v| is_str(v, ["None"]), "only the `None` memory manager policy is implemented"),
        topology_manager_policy "topologyManagerPolicy": refused(|v| is_str(v, ["none"]), "only the `none` topology manager policy is implemented"),
        topology_manager_scope "topologyManagerScope": accepted(|v| is_str(v, ["container"]), "meaningless with topology manager policy `none`"),
        topology_manager_policy_options "topologyManagerPolicyOptions": refused(none, "only the `none` topology manager policy is implemented"),
        qos_reserved "qosReserved": refused(none, "memory QoS reservation is not implemented"),
        runtime_request_timeout "runtimeRequestTimeout": accepted(none, "CRI calls use deckhand's own per-call timeouts"),
        hairpin_mode "hairpinMode": accepted(none, "hairpin traffic is configured by the CNI plugin configuration"),
        /// Maximum number of pods (`--max-pods`), reported as the `pods` capacity. Default 110.
        max_pods "maxPods": honoured(u32 = 110, Plain),
        pod_cidr "podCIDR": accepted(none, "pod addresses come from the CNI configuration; the runtime's pod CIDR is not updated"),
        /// Maximum number of processes (tasks) in each pod's cgroup, written to its `pids.max`
        /// (`--pod-max-pids`); -1 or 0 leaves pods unlimited, as the Go kubelet's pod container
        /// manager does. Needs `cgroupsPerQOS`. Default -1.
        pod_pids_limit "podPidsLimit": honoured(i64 = -1, Plain),
        /// The node's resolv.conf (`--resolv-conf`), used for dnsPolicy Default and appended to
        /// ClusterFirst search paths; empty disables it (a Go pointer: an explicit "" is kept).
        /// Default `/etc/resolv.conf`.
        resolv_conf "resolvConf": pointer(String = "/etc/resolv.conf".to_string(), FilePath),
        run_once "runOnce": refused(none, "run-once mode is not implemented"),
        cpu_cfs_quota "cpuCFSQuota": refused(is_true, "CPU limits are always enforced with CFS quota"),
        cpu_cfs_quota_period "cpuCFSQuotaPeriod": refused(|v| is_str(v, ["100ms"]), "the CFS quota period is always 100ms"),
        node_status_max_images "nodeStatusMaxImages": accepted(none, "the node status lists at most 50 images, as the Go kubelet's default"),
        max_open_files "maxOpenFiles": accepted(none, "deckhand's open-file limit comes from its service manager (LimitNOFILE=)"),
        content_type "contentType": accepted(|v| is_str(v, ["application/json"]), "deckhand talks JSON to the API server"),
        kube_api_qps "kubeAPIQPS": accepted(none, "API requests are not rate-limited on the client side"),
        kube_api_burst "kubeAPIBurst": accepted(none, "API requests are not rate-limited on the client side"),
        serialize_image_pulls "serializeImagePulls": accepted(is_true, "image pulls are always serialized (safe, slower with many images)"),
        max_parallel_image_pulls "maxParallelImagePulls": accepted(|v| v.as_i64() == Some(1), "image pulls are always serialized (one at a time)"),
        /// Hard eviction thresholds by signal, `memory.available: 100Mi` (`--eviction-hard`);
        /// crossing one sets the node's pressure condition and evicts pods ([`crate::eviction`]).
        /// Default: the Go kubelet's five Linux thresholds ([`default_eviction_hard`]); a set map
        /// replaces them.
        eviction_hard "evictionHard": honoured(BTreeMap<String, String> = default_eviction_hard(), Plain),
        eviction_soft "evictionSoft": refused(none, "soft eviction thresholds are not implemented (use evictionHard)"),
        eviction_soft_grace_period "evictionSoftGracePeriod": refused(none, "soft eviction thresholds are not implemented"),
        /// How long a node pressure condition stays after its threshold was last crossed
        /// (`--eviction-pressure-transition-period`). Default 5m.
        eviction_pressure_transition_period "evictionPressureTransitionPeriod": honoured(Duration = Duration::from_secs(300), GoDuration),
        eviction_max_pod_grace_period "evictionMaxPodGracePeriod": accepted(none, "only used by soft eviction, which is refused"),
        eviction_minimum_reclaim "evictionMinimumReclaim": accepted(none, "eviction stops as soon as the hard threshold is no longer crossed"),
        merge_default_eviction_settings "mergeDefaultEvictionSettings": accepted(none, "evictionHard as given is passed on unchanged"),
        pods_per_core "podsPerCore": refused(none, "pod capacity is maxPods only"),
        enable_controller_attach_detach "enableControllerAttachDetach": accepted(none, "deckhand has no attachable volume plugins"),
        protect_kernel_defaults "protectKernelDefaults": refused(none, "kernel tunables are not checked at start-up"),
        make_iptables_util_chains "makeIPTablesUtilChains": accepted(none, "deprecated in the Go kubelet; deckhand creates no iptables chains"),
        iptables_masquerade_bit "iptablesMasqueradeBit": accepted(none, "deprecated in the Go kubelet; deckhand creates no iptables chains"),
        iptables_drop_bit "iptablesDropBit": accepted(none, "deprecated in the Go kubelet; deckhand creates no iptables chains"),
        feature_gates "featureGates": accepted(none, "deckhand has no feature gates; it implements one fixed feature set"),
        fail_swap_on "failSwapOn": accepted(none, "deckhand does not check for swap at start-up"),
        /// Swap for containers.
        memory_swap "memorySwap": section(MemorySwapConfiguration),
        /// A container log file is rotated when it reaches this size (`--container-log-max-size`, a
        /// quantity). Default `10Mi`.
        container_log_max_size "containerLogMaxSize": honoured(String = "10Mi".to_string(), Plain),
        /// How many log files a container keeps, the live one included
        /// (`--container-log-max-files`); at least 2. Default 5.
        container_log_max_files "containerLogMaxFiles": honoured(usize = 5, AtLeastTwo),
        container_log_max_workers "containerLogMaxWorkers": accepted(none, "one task rotates all container logs"),
        container_log_monitor_interval "containerLogMonitorInterval": accepted(none, "container logs are checked for rotation every 10s"),
        config_map_and_secret_change_detection_strategy "configMapAndSecretChangeDetectionStrategy": accepted(none, "ConfigMap and Secret volumes are read from the API server when a pod is set up"),
        /// Resources reserved for the OS by name, `cpu: 100m` (`--system-reserved`); subtracted
        /// from capacity to give allocatable.
        system_reserved "systemReserved": honoured(BTreeMap<String, String> = BTreeMap::new(), Plain),
        /// Resources reserved for Kubernetes daemons by name (`--kube-reserved`); subtracted from
        /// capacity to give allocatable.
        kube_reserved "kubeReserved": honoured(BTreeMap<String, String> = BTreeMap::new(), Plain),
        reserved_system_cpus "reservedSystemCPUs": refused(none, "CPU reservation by CPU list needs the static CPU manager, which is not implemented"),
        show_hidden_metrics_for_version "showHiddenMetricsForVersion": accepted(none, "deckhand has no hidden metrics"),
        system_reserved_cgroup "systemReservedCgroup": refused(none, "enforcing system-reserved on a cgroup is not implemented"),
        kube_reserved_cgroup "kubeReservedCgroup": refused(none, "enforcing kube-reserved on a cgroup is not implemented"),
        enforce_node_allocatable "enforceNodeAllocatable": refused(|v| v.as_array().is_some_and(|a| a.iter().all(|x| is_str(x, ["pods", "none"]))), "only `pods` (or `none`) allocatable enforcement is implemented"),
        allowed_unsafe_sysctls "allowedUnsafeSysctls": accepted(none, "pod sysctls are passed to the runtime as given"),
        volume_plugin_dir "volumePluginDir": accepted(none, "FlexVolume plugins are not supported; the directory is not read"),
        /// The node's ID in its cloud's machine database (`--provider-id`), written to
        /// `spec.providerID` when the Node is registered. Default empty.
        provider_id "providerID": honoured(String = String::new(), Plain),
        kernel_memcg_notification "kernelMemcgNotification": accepted(none, "memory pressure is observed by polling"),
        /// Logging (component-base `LoggingConfiguration`).
        logging "logging": section(LoggingConfiguration),
        enable_system_log_handler "enableSystemLogHandler": accepted(none, "deckhand does not serve the node's /var/log"),
        enable_system_log_query "enableSystemLogQuery": accepted(none, "deckhand does not serve node log queries"),
        shutdown_grace_period "shutdownGracePeriod": refused(none, "graceful node shutdown is not implemented"),
        shutdown_grace_period_critical_pods "shutdownGracePeriodCriticalPods": refused(none, "graceful node shutdown is not implemented"),
        shutdown_grace_period_by_pod_priority "shutdownGracePeriodByPodPriority": refused(none, "graceful node shutdown is not implemented"),
        /// Crash-loop back-off.
        crash_loop_back_off "crashLoopBackOff": section(CrashLoopBackOffConfig),
        reserved_memory "reservedMemory": refused(none, "NUMA memory reservation is not implemented"),
        enable_profiling_handler "enableProfilingHandler": accepted(none, "there is no Go profiler in a Rust process"),
        enable_debug_flags_handler "enableDebugFlagsHandler": accepted(none, "deckhand serves no /debug/flags"),
        seccomp_default "seccompDefault": refused(none, "RuntimeDefault seccomp for pods without a profile is not implemented"),
        memory_throttling_factor "memoryThrottlingFactor": accepted(none, "memory QoS (memory.high) is not implemented"),
        memory_reservation_policy "memoryReservationPolicy": accepted(|v| is_str(v, ["None"]), "memory QoS reservation is not implemented"),
        /// Taints the node registers with (`--register-with-taints`).
        register_with_taints "registerWithTaints": honoured(Vec<Taint> = Vec::new(), Plain),
        register_node "registerNode": refused(is_true, "deckhand always registers its Node when it has an API server"),
        tracing "tracing": accepted(none, "deckhand exports no OpenTelemetry traces"),
        local_storage_capacity_isolation "localStorageCapacityIsolation": accepted(is_true, "ephemeral-storage capacity is always reported"),
        /// CRI endpoint (`--container-runtime-endpoint`). Default
        /// `unix:///run/containerd/containerd.sock`.
        container_runtime_endpoint "containerRuntimeEndpoint": honoured(String = "unix:///run/containerd/containerd.sock".to_string(), Plain),
        /// CRI image service endpoint (`--image-service-endpoint`); only the runtime endpoint
        /// itself is accepted (deckhand uses one CRI connection).
        image_service_endpoint "imageServiceEndpoint": honoured(Option<String> = None, Plain),
        fail_cgroup_v1 "failCgroupV1": accepted(none, "deckhand does not check the cgroup version at start-up"),
        /// User namespaces.
        user_namespaces "userNamespaces": section(UserNamespaces),
    }
}

kubelet_section! {
    /// `authentication` (Go `KubeletAuthentication`).
    pub struct KubeletAuthentication {
        /// Client certificates.
        x509 "x509": section(KubeletX509Authentication),
        /// Bearer tokens, through TokenReview.
        webhook "webhook": section(KubeletWebhookAuthentication),
        /// Requests without credentials.
        anonymous "anonymous": section(KubeletAnonymousAuthentication),
    }
}

kubelet_section! {
    /// `authentication.x509` (Go `KubeletX509Authentication`).
    pub struct KubeletX509Authentication {
        /// CA bundle client certificates of kubelet server requests are verified against
        /// (`--client-ca-file`).
        client_ca_file "clientCAFile": honoured(Option<PathBuf> = None, FilePath),
    }
}

kubelet_section! {
    /// `authentication.webhook` (Go `KubeletWebhookAuthentication`).
    pub struct KubeletWebhookAuthentication {
        /// Bearer tokens are checked through TokenReview (`--authentication-token-webhook`).
        /// Default true (a Go pointer: an explicit false is kept).
        enabled "enabled": pointer(bool = true, Plain),
        cache_ttl "cacheTTL": accepted(|v| is_str(v, ["2m", "2m0s", "120s"]), "TokenReview results are cached for a fixed 2m (the Go default)"),
    }
}

kubelet_section! {
    /// `authentication.anonymous` (Go `KubeletAnonymousAuthentication`).
    pub struct KubeletAnonymousAuthentication {
        /// Requests without credentials are served as `system:anonymous` (`--anonymous-auth`).
        /// Default false.
        enabled "enabled": pointer(bool = false, Plain),
    }
}

kubelet_section! {
    /// `authorization` (Go `KubeletAuthorization`).
    pub struct KubeletAuthorization {
        /// `Webhook` (SubjectAccessReview) or `AlwaysAllow` (`--authorization-mode`). Default
        /// `Webhook`.
        mode "mode": honoured(AuthorizationMode = AuthorizationMode::Webhook, Mode),
        /// SubjectAccessReview caching.
        webhook "webhook": section(KubeletWebhookAuthorization),
    }
}

kubelet_section! {
    /// `authorization.webhook` (Go `KubeletWebhookAuthorization`).
    pub struct KubeletWebhookAuthorization {
        cache_authorized_ttl "cacheAuthorizedTTL": accepted(|v| is_str(v, ["5m", "5m0s", "300s"]), "allowed SubjectAccessReview results are cached for a fixed 5m (the Go default)"),
        cache_unauthorized_ttl "cacheUnauthorizedTTL": accepted(|v| is_str(v, ["30s"]), "denied SubjectAccessReview results are cached for a fixed 30s (the Go default)"),
    }
}

kubelet_section! {
    /// `logging` (component-base `LoggingConfiguration`).
    pub struct LoggingConfiguration {
        /// Log format (`--logging-format`): `text` (lines on stderr, or structured journal
        /// entries when stderr is the journal) or `json` (one JSON object a line on stderr, as
        /// the Go kubelet's JSON format). Default `text`.
        format "format": honoured(String = "text".to_string(), Plain),
        flush_frequency "flushFrequency": accepted(none, "log lines are written as they happen"),
        /// Log verbosity (`--v`): 0 = info, 2+ = debug, 4+ = trace; capped at 10. RUST_LOG
        /// overrides it.
        verbosity "verbosity": honoured(u8 = 0, Verbosity),
        vmodule "vmodule": accepted(none, "use RUST_LOG for per-module levels"),
        options "options": accepted(|v| v.as_object().is_some_and(|o| o.values().all(go_zero_deep)), "klog output options do not apply"),
    }
}

kubelet_section! {
    /// `memorySwap` (Go `MemorySwapConfiguration`).
    pub struct MemorySwapConfiguration {
        swap_behavior "swapBehavior": refused(|v| is_str(v, ["NoSwap"]), "containers never get swap"),
    }
}

kubelet_section! {
    /// `crashLoopBackOff` (Go `CrashLoopBackOffConfig`).
    pub struct CrashLoopBackOffConfig {
        max_container_restart_period "maxContainerRestartPeriod": refused(|v| is_str(v, ["5m", "5m0s", "300s"]), "the crash-loop back-off ceiling is fixed at 5m"),
    }
}

kubelet_section! {
    /// `userNamespaces` (Go `UserNamespaces`).
    pub struct UserNamespaces {
        /// Host user and group IDs given to each pod with `hostUsers: false`: a multiple of
        /// 65536, at least 65536 ([`crate::userns`]).
        ids_per_pod "idsPerPod": pointer(u32 = crate::userns::IDS_PER_POD_UNIT, IdsPerPod),
    }
}

/// The Go kubelet's default hard eviction thresholds on Linux (`DefaultEvictionHard`):
/// `memory.available<100Mi`, `nodefs.available<10%`, `nodefs.inodesFree<5%`,
/// `imagefs.available<15%`, `imagefs.inodesFree<5%`.
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Parses `--kube-reserved` / `--system-reserved` entries (`cpu=100m`, `memory=256Mi`,
/// `ephemeral-storage=1Gi`, `pid=100`) into milli-units by resource.
///
/// Errors: an entry without `=`, an unknown resource, or an invalid quantity.
pub fn parse_reserved(entries: &[String]) -> Result<BTreeMap<String, i128>, String> {
    let mut pairs = Vec::new();
    for e in entries.iter().filter(|e| !e.trim().is_empty()) {
        let (k, v) = e
            .split_once('=')
            .ok_or_else(|| format!("{e:?}: expected <resource>=<quantity>"))?;
        pairs.push((k.trim(), v.trim()));
    }
    reserved_of(pairs)
}

/// Milli-units by resource of `resource=quantity` pairs.
fn reserved_of<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<BTreeMap<String, i128>, String> {
    let mut out = BTreeMap::new();
    for (k, v) in pairs {
        let e = format!("{k}={v}");
        if !matches!(k, "cpu" | "memory" | "ephemeral-storage" | "pid") {
            return Err(format!("{e:?}: unsupported resource {k:?}"));
        }
        let q = crate::quantity::parse_milli(v)
            .map_err(|_| format!("{e:?}: invalid quantity {v:?}"))?;
        out.insert(k.to_string(), q);
    }
    Ok(out)
}

impl KubeletConfiguration {
    /// `kubeReserved` + `systemReserved`, in milli-units by resource (subtracted from capacity
    /// to give allocatable, as the Go kubelet's node allocatable).
    ///
    /// Errors: an unknown resource or an invalid quantity, naming the flag.
    pub fn reserved_milli(&self) -> Result<BTreeMap<String, i128>, String> {
        let pairs = |m: &'_ BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .collect::<Vec<_>>()
        };
        let (kube, system) = (pairs(&self.kube_reserved), pairs(&self.system_reserved));
        let mut total = reserved_of(kube.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| format!("--kube-reserved: {e}"))?;
        for (k, v) in reserved_of(system.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| format!("--system-reserved: {e}"))?
        {
            *total.entry(k).or_insert(0) += v;
        }
        Ok(total)
    }

    /// The hard eviction thresholds of `evictionHard` ([`crate::eviction::thresholds`]). An
    /// empty map (only an explicit `--eviction-hard=` gives one: an empty `evictionHard` in the
    /// file is unset) means no thresholds at all.
    ///
    /// Errors: a threshold that does not parse (the Go kubelet's `ParseThresholdConfig`
    /// messages).
    pub fn eviction_thresholds(
        &self,
    ) -> Result<
        Vec<crate::eviction::thresholds::Threshold>,
        crate::eviction::thresholds::ThresholdError,
    > {
        if self.eviction_hard.is_empty() {
            return Ok(Vec::new());
        }
        let entries: Vec<String> = self
            .eviction_hard
            .iter()
            .map(|(k, v)| format!("{k}<{v}"))
            .collect();
        crate::eviction::thresholds::parse_thresholds(&entries)
    }

    /// The image garbage collection policy (`imageGCHighThresholdPercent`,
    /// `imageGCLowThresholdPercent`, `imageMinimumGCAge`, `imageMaximumGCAge`).
    ///
    /// Errors: a threshold outside 0..=100, a low threshold not below the high one, or a
    /// maximum age not above the minimum age (the Go kubelet's validation messages).
    pub fn image_gc_policy(&self) -> Result<crate::gc::ImageGcPolicy, String> {
        let pct = |v: i32, field: &str, flag: &str| {
            u8::try_from(v).ok().filter(|p| *p <= 100).ok_or_else(|| {
                format!("invalid configuration: {field} (--{flag}) {v} must be between 0 and 100, inclusive")
            })
        };
        let p = crate::gc::ImageGcPolicy {
            high_threshold_percent: pct(
                self.image_gc_high_threshold_percent,
                "imageGCHighThresholdPercent",
                "image-gc-high-threshold",
            )?,
            low_threshold_percent: pct(
                self.image_gc_low_threshold_percent,
                "imageGCLowThresholdPercent",
                "image-gc-low-threshold",
            )?,
            min_age: self.image_minimum_gc_age,
            max_age: self.image_maximum_gc_age,
        };
        p.validate()?;
        Ok(p)
    }

    /// Checks the merged values deckhand can run with (what the Go kubelet's
    /// `ValidateKubeletConfiguration` checks, for the fields deckhand honours).
    ///
    /// Errors: [`ConfigError::Unsupported`] for a read-only port, a separate image service
    /// endpoint or an unknown cgroup driver; [`ConfigError::Invalid`] for an image GC policy,
    /// reserved resources or a taint effect that are wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.read_only_port != 0 {
            return Err(ConfigError::Unsupported(format!(
                "read-only port {} (readOnlyPort): deckhand serves no unauthenticated port; set it to 0",
                self.read_only_port
            )));
        }
        if let Some(ep) = &self.image_service_endpoint {
            if ep != &self.container_runtime_endpoint {
                return Err(ConfigError::Unsupported(format!(
                    "image service endpoint {ep:?} differs from the container runtime endpoint {:?}: deckhand uses one CRI endpoint for both",
                    self.container_runtime_endpoint
                )));
            }
        }
        if !matches!(self.logging.format.as_str(), "text" | "json") {
            return Err(ConfigError::Unsupported(format!(
                "logging format {:?} (--logging-format): must be text or json",
                self.logging.format
            )));
        }
        if !self.cgroup_root.is_empty() && !self.cgroup_root.starts_with('/') {
            return Err(ConfigError::Invalid(format!(
                "cgroupRoot (--cgroup-root) {:?} must be an absolute cgroup path such as /kubelet",
                self.cgroup_root
            )));
        }
        if !matches!(self.cgroup_driver.as_str(), "cgroupfs" | "systemd") {
            return Err(ConfigError::Unsupported(format!(
                "cgroup driver {:?}: must be cgroupfs or systemd",
                self.cgroup_driver
            )));
        }
        self.image_gc_policy().map_err(ConfigError::Invalid)?;
        self.reserved_milli().map_err(ConfigError::Invalid)?;
        if let Some(t) = self.register_with_taints.iter().find(|t| {
            !matches!(
                t.effect.as_str(),
                "NoSchedule" | "PreferNoSchedule" | "NoExecute"
            )
        }) {
            return Err(ConfigError::Invalid(format!(
                "registerWithTaints (--register-with-taints): taint {}: effect {:?} must be NoSchedule, PreferNoSchedule or NoExecute",
                t.key, t.effect
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fields::{flatten, Fate, Section};

    #[test]
    fn defaults_are_the_go_defaults() {
        let d = KubeletConfiguration::default();
        assert_eq!(d.port, 10250);
        assert_eq!(d.max_pods, 110);
        assert_eq!(d.healthz_port, 10248);
        assert_eq!(d.node_status_update_frequency, Duration::from_secs(10));
        assert_eq!(d.node_status_report_frequency, Duration::from_secs(300));
        assert_eq!(d.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(d.resolv_conf, "/etc/resolv.conf");
        assert!(d.authentication.webhook.enabled);
        assert!(!d.authentication.anonymous.enabled);
        assert_eq!(d.authorization.mode, AuthorizationMode::Webhook);
        assert!(d.cgroups_per_qos);
        assert_eq!(
            d.image_gc_policy().unwrap(),
            crate::gc::ImageGcPolicy::default()
        );
        d.validate().unwrap();
    }

    #[test]
    fn default_eviction_hard_is_the_eviction_modules_default() {
        let mut got = KubeletConfiguration::default()
            .eviction_thresholds()
            .unwrap();
        let mut want = crate::eviction::thresholds::default_thresholds();
        let key = |t: &crate::eviction::thresholds::Threshold| t.signal.name();
        got.sort_by_key(key);
        want.sort_by_key(key);
        assert_eq!(got, want);
    }

    #[test]
    fn every_field_is_declared_once() {
        let all = flatten(KubeletConfiguration::FIELDS, "");
        let mut names: Vec<_> = all.iter().map(|(p, _)| p.as_str()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a JSON name appears twice");
        // The Go type at v1.36, nested objects included.
        assert_eq!(n, 146);
        for (p, _) in &all {
            if let Some((parent, _)) = p.rsplit_once('.') {
                assert!(
                    all.iter()
                        .any(|(q, f)| q == parent && matches!(f, Fate::Section(_))),
                    "{p}: parent {parent} is not an object"
                );
            }
        }
    }

    #[test]
    fn serde_round_trips_through_the_go_json() {
        let d = KubeletConfiguration::default();
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["port"], 10250);
        assert_eq!(json["nodeStatusReportFrequency"], "5m0s");
        assert_eq!(json["authentication"]["webhook"]["enabled"], true);
        assert_eq!(json["evictionHard"]["memory.available"], "100Mi");
        assert!(
            json.get("syncFrequency").is_none(),
            "unset accepted fields are left out"
        );
        let back: KubeletConfiguration = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
        let mut c = d.clone();
        c.max_pods = 7;
        c.sync_frequency = Some(serde_json::json!("1m"));
        c.authentication.anonymous.enabled = true;
        c.tls_cert_file = Some("/tls.crt".into());
        let back: KubeletConfiguration =
            serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let e = serde_json::from_value::<KubeletConfiguration>(serde_json::json!({"maxPod": 3}))
            .unwrap_err();
        assert!(e.to_string().contains("maxPod"), "{e}");
    }

    #[test]
    fn validation_refuses_what_deckhand_cannot_run_with() {
        let ok = KubeletConfiguration::default();
        let cases: Vec<(&str, KubeletConfiguration, &str)> = vec![
            (
                "read-only port",
                KubeletConfiguration {
                    read_only_port: 10255,
                    ..ok.clone()
                },
                "read-only port 10255",
            ),
            (
                "image endpoint",
                KubeletConfiguration {
                    image_service_endpoint: Some("unix:///x.sock".into()),
                    ..ok.clone()
                },
                "image service endpoint",
            ),
            (
                "cgroup driver",
                KubeletConfiguration {
                    cgroup_driver: "none".into(),
                    ..ok.clone()
                },
                "cgroup driver \"none\"",
            ),
            (
                "reserved",
                KubeletConfiguration {
                    kube_reserved: [("gpu".to_string(), "1".to_string())].into(),
                    ..ok.clone()
                },
                "--kube-reserved: \"gpu=1\": unsupported resource",
            ),
            (
                "taint",
                KubeletConfiguration {
                    register_with_taints: vec![Taint {
                        key: "a".into(),
                        effect: "Sometimes".into(),
                        ..Default::default()
                    }],
                    ..ok.clone()
                },
                "effect \"Sometimes\"",
            ),
        ];
        for (name, c, want) in cases {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{name}: {e}");
        }
        let same = KubeletConfiguration {
            image_service_endpoint: Some(ok.container_runtime_endpoint.clone()),
            ..ok
        };
        same.validate().unwrap();
    }
}
