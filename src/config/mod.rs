//! deckhand's flags, named and defaulted as the Go kubelet's (k/k `cmd/kubelet/app/options`,
//! KubeletConfiguration defaults in `pkg/kubelet/apis/config/v1beta1/defaults.go`), so that a
//! kubeadm-style unit can start deckhand where it starts `/usr/bin/kubelet`.
//!
//! The flags may come with a KubeletConfiguration file (`--config`, [`file`]); as in the Go
//! kubelet (`cmd/kubelet/app/server.go`), a flag given on the command line wins over the file,
//! and the file wins over the flag defaults ([`merge_file`], pure; [`Flags::load`] does the I/O).

pub mod duration;
pub mod file;

pub use duration::parse_go_duration;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Command-line flags. Names match the Go kubelet's.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "deckhand",
    version,
    about = "A Kubernetes node agent (kubelet) driving containerd through CRI"
)]
pub struct Flags {
    /// Path to a kubeconfig with this node's credentials. Without it, in-cluster or default
    /// kubeconfig discovery applies.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Node name to register as, instead of the hostname (lower-cased).
    #[arg(long = "hostname-override")]
    pub hostname_override: Option<String>,

    /// IP address(es) of the node (reported as InternalIP): one address, a dual-stack pair
    /// `a,b`, or `0.0.0.0`/`::` to choose one of that family. Unset, the address is chosen as
    /// the Go kubelet does ([`crate::node::address`]: the node name in DNS, else the default
    /// route's interface). This project's harness always passes it.
    #[arg(long = "node-ip")]
    pub node_ip: Option<String>,

    /// CRI endpoint (`unix:///run/containerd/containerd.sock`).
    #[arg(
        long = "container-runtime-endpoint",
        default_value = "unix:///run/containerd/containerd.sock"
    )]
    pub container_runtime_endpoint: String,

    /// Directory for deckhand's files (pod directories, checkpoints). Go kubelet: /var/lib/kubelet.
    #[arg(long = "root-dir", default_value = "/var/lib/deckhand")]
    pub root_dir: PathBuf,

    /// Directory for pod logs (KubeletConfiguration `podLogsDir`).
    #[arg(long = "pod-logs-dir", default_value = "/var/log/pods")]
    pub pod_logs_dir: String,

    /// How often node status is computed (KubeletConfiguration `nodeStatusUpdateFrequency`).
    #[arg(long = "node-status-update-frequency", default_value = "10s", value_parser = parse_go_duration)]
    pub node_status_update_frequency: Duration,

    /// How often an unchanged node status is still written (`nodeStatusReportFrequency`).
    #[arg(long = "node-status-report-frequency", default_value = "5m", value_parser = parse_go_duration)]
    pub node_status_report_frequency: Duration,

    /// Lease duration in seconds (`nodeLeaseDurationSeconds`); renewed every quarter of it.
    #[arg(long = "node-lease-duration-seconds", default_value_t = 40)]
    pub node_lease_duration_seconds: i32,

    /// Maximum number of pods (`maxPods`), reported as the `pods` capacity.
    #[arg(long = "max-pods", default_value_t = 110)]
    pub max_pods: u32,

    /// Port the kubelet server listens on, reported in `status.daemonEndpoints`.
    #[arg(long = "port", default_value_t = 10250)]
    pub port: i32,

    /// IP address the kubelet server listens on (KubeletConfiguration `address`).
    #[arg(long = "address", default_value = "0.0.0.0")]
    pub address: IpAddr,

    /// Serving certificate (PEM, chain allowed) of the kubelet server. Without it and
    /// `--tls-private-key-file`, a self-signed certificate is made in `<root-dir>/pki`.
    #[arg(long = "tls-cert-file")]
    pub tls_cert_file: Option<PathBuf>,

    /// Private key (PEM) of `--tls-cert-file`.
    #[arg(long = "tls-private-key-file")]
    pub tls_private_key_file: Option<PathBuf>,

    /// CA bundle that client certificates of kubelet server requests are verified against
    /// (`authentication.x509.clientCAFile`).
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,

    /// Bearer tokens of kubelet server requests are checked through TokenReview
    /// (`authentication.webhook.enabled`).
    #[arg(long = "authentication-token-webhook", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub authentication_token_webhook: bool,

    /// Requests without credentials are served as `system:anonymous` (`authentication.anonymous.enabled`).
    #[arg(long = "anonymous-auth", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,

    /// How kubelet server requests are authorized: `Webhook` (SubjectAccessReview) or
    /// `AlwaysAllow`.
    #[arg(long = "authorization-mode", value_enum, default_value = "Webhook")]
    pub authorization_mode: crate::server::auth::AuthorizationMode,

    /// A container log file is rotated when it reaches this size (`containerLogMaxSize`,
    /// a quantity such as `10Mi`).
    #[arg(long = "container-log-max-size", default_value = "10Mi")]
    pub container_log_max_size: String,

    /// How many log files a container keeps, the live one included (`containerLogMaxFiles`).
    #[arg(long = "container-log-max-files", default_value_t = 5)]
    pub container_log_max_files: usize,

    /// Labels to add at registration, `key=value,key2=value2`.
    #[arg(long = "node-labels", value_delimiter = ',')]
    pub node_labels: Vec<String>,

    /// Taints to register with, `key=value:Effect,...`.
    #[arg(long = "register-with-taints", value_delimiter = ',')]
    pub register_with_taints: Vec<String>,

    /// How often the runtime is relisted as a safety net behind containerd's event stream
    /// (the Go kubelet's evented PLEG relists every 300 s, the generic one every 1 s).
    #[arg(long = "pleg-relist-period", default_value = "5s", value_parser = parse_go_duration)]
    pub pleg_relist_period: Duration,

    /// Log verbosity, as the Go kubelet's `--v` (0 = info, 2+ = debug, 4+ = trace). RUST_LOG
    /// overrides it.
    #[arg(long = "v", short = 'v', default_value_t = 0)]
    pub verbosity: u8,

    /// containerd's socket for its native event stream (exit events). Defaults to the CRI socket.
    #[arg(long = "containerd-socket")]
    pub containerd_socket: Option<String>,

    /// DNS server IPs written into ClusterFirst pods' resolv.conf (KubeletConfiguration
    /// `clusterDNS`). Empty: ClusterFirst pods fall back to the node's resolv.conf, as the Go
    /// kubelet does (with a MissingClusterDNS event).
    #[arg(long = "cluster-dns", value_delimiter = ',')]
    pub cluster_dns: Vec<IpAddr>,

    /// Cluster domain (KubeletConfiguration `clusterDomain`), e.g. `cluster.local`; search paths
    /// `<ns>.svc.<domain> svc.<domain> <domain>` are written for ClusterFirst pods.
    #[arg(long = "cluster-domain", default_value = "")]
    pub cluster_domain: String,

    /// The node's resolv.conf, used for dnsPolicy Default and appended to ClusterFirst search
    /// paths (KubeletConfiguration `resolvConf`). Empty disables it.
    #[arg(long = "resolv-conf", default_value = "/etc/resolv.conf")]
    pub resolv_conf: String,

    /// Resources reserved for Kubernetes daemons, `cpu=100m,memory=256Mi` (`kubeReserved`);
    /// subtracted from capacity to give allocatable.
    #[arg(long = "kube-reserved", value_delimiter = ',')]
    pub kube_reserved: Vec<String>,

    /// Resources reserved for the OS (`systemReserved`); subtracted from capacity.
    #[arg(long = "system-reserved", value_delimiter = ',')]
    pub system_reserved: Vec<String>,

    /// Hard eviction thresholds, `memory.available<100Mi,nodefs.available<10%` (`evictionHard`);
    /// `memory.available` and `nodefs.available` are reserved from allocatable; crossing one sets the
    /// node's pressure condition and evicts pods (see [`crate::eviction`]). Empty: the Go
    /// kubelet's defaults (`memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,
    /// imagefs.available<15%,imagefs.inodesFree<5%`); a non-empty list replaces them.
    #[arg(long = "eviction-hard", value_delimiter = ',')]
    pub eviction_hard: Vec<String>,

    /// How long a node pressure condition stays after its threshold was last crossed
    /// (`evictionPressureTransitionPeriod`), so the node does not flap.
    #[arg(long = "eviction-pressure-transition-period", default_value = "5m", value_parser = parse_go_duration)]
    pub eviction_pressure_transition_period: Duration,

    /// Cgroup driver of the runtime: `cgroupfs` or `systemd` (`cgroupDriver`).
    #[arg(long = "cgroup-driver", default_value = "cgroupfs")]
    pub cgroup_driver: String,

    /// Whether pod-level QoS cgroups (`kubepods/...`) are created and passed as cgroup parents
    /// (`cgroupsPerQOS`).
    #[arg(long = "cgroups-per-qos", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub cgroups_per_qos: bool,

    /// KubeletConfiguration file (`kubelet.config.k8s.io/v1beta1`, what kubeadm writes to
    /// /var/lib/kubelet/config.yaml). Flags given on the command line override its fields.
    #[arg(long = "config")]
    pub config: Option<PathBuf>,

    /// Bootstrap kubeconfig (a bootstrap token) used to obtain a client certificate through a
    /// `kubernetes.io/kube-apiserver-client-kubelet` CSR when `--kubeconfig` is missing or
    /// unusable; the resulting kubeconfig is written to `--kubeconfig`.
    #[arg(long = "bootstrap-kubeconfig")]
    pub bootstrap_kubeconfig: Option<PathBuf>,

    /// Directory for the client and serving certificates (`kubelet-client-current.pem`, ...).
    /// Empty: `<root-dir>/pki`, as the Go kubelet's `/var/lib/kubelet/pki`.
    #[arg(long = "cert-dir", default_value = "")]
    pub cert_dir: String,

    /// Rotate the client certificate through new CSRs before it expires (`rotateCertificates`).
    #[arg(long = "rotate-certificates", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rotate_certificates: bool,

    /// Obtain (and rotate) the serving certificate through `kubernetes.io/kubelet-serving`
    /// CSRs (`serverTLSBootstrap`).
    #[arg(long = "rotate-server-certificates", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rotate_server_certificates: bool,

    /// Directory of static pod manifests (`staticPodPath`); empty disables static pods.
    #[arg(long = "pod-manifest-path", default_value = "")]
    pub pod_manifest_path: String,

    /// How often the static pod directory is re-read besides inotify (`fileCheckFrequency`).
    #[arg(long = "file-check-frequency", default_value = "20s", value_parser = parse_go_duration)]
    pub file_check_frequency: Duration,

    /// Port of the plain-HTTP `/healthz` endpoint (`healthzPort`); 0 disables it. `kubeadm join`
    /// waits on it.
    #[arg(long = "healthz-port", default_value_t = 10248)]
    pub healthz_port: i32,

    /// Address of the `/healthz` endpoint (`healthzBindAddress`).
    #[arg(long = "healthz-bind-address", default_value = "127.0.0.1")]
    pub healthz_bind_address: IpAddr,

    /// The unauthenticated read-only port (`readOnlyPort`). deckhand has none: only 0 is
    /// accepted.
    #[arg(long = "read-only-port", default_value_t = 0)]
    pub read_only_port: i32,

    /// CRI image service endpoint (`imageServiceEndpoint`); only the runtime endpoint itself is
    /// accepted (deckhand uses one CRI connection).
    #[arg(long = "image-service-endpoint")]
    pub image_service_endpoint: Option<String>,

    /// Deprecated in the Go kubelet (the sandbox image comes from the runtime's configuration);
    /// accepted with a warning and not used.
    #[arg(long = "pod-infra-container-image")]
    pub pod_infra_container_image: Option<String>,

    /// The Go kubelet refuses to start with swap on unless this is false. deckhand never checks
    /// for swap; accepted for compatibility.
    #[arg(long = "fail-swap-on", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub fail_swap_on: bool,

    /// Cgroup of the kubelet process (`kubeletCgroups`); accepted with a warning, deckhand stays
    /// where its service manager puts it.
    #[arg(long = "kubelet-cgroups")]
    pub kubelet_cgroups: Option<String>,

    /// Cgroup of the container runtime, for its stats (`--runtime-cgroups`); accepted with a
    /// warning and not used.
    #[arg(long = "runtime-cgroups")]
    pub runtime_cgroups: Option<String>,

    /// Disk usage of the image filesystem (percent) at or above which unused images are
    /// garbage collected (`imageGCHighThresholdPercent`); 100 disables image GC. 0..=100.
    #[arg(long = "image-gc-high-threshold", default_value_t = 85)]
    pub image_gc_high_threshold: i32,

    /// Disk usage (percent) image garbage collection frees down to
    /// (`imageGCLowThresholdPercent`); below the high threshold.
    #[arg(long = "image-gc-low-threshold", default_value_t = 80)]
    pub image_gc_low_threshold: i32,

    /// Minimum age of an unused image before it is garbage collected (`imageMinimumGCAge`).
    #[arg(long = "minimum-image-ttl-duration", default_value = "2m", value_parser = parse_go_duration)]
    pub minimum_image_ttl_duration: Duration,

    /// Unused images not used for longer than this are garbage collected whatever the disk
    /// usage (`imageMaximumGCAge`, KubeletConfiguration only, as in the Go kubelet); 0 = off.
    #[arg(skip)]
    pub image_maximum_gc_age: Duration,

    /// Deprecated in the Go kubelet: minimum age of a dead container before it is garbage
    /// collected.
    #[arg(long = "minimum-container-ttl-duration", default_value = "0s", value_parser = parse_go_duration)]
    pub minimum_container_ttl_duration: Duration,

    /// Deprecated in the Go kubelet: dead instances kept per container (negative: no limit).
    #[arg(
        long = "maximum-dead-containers-per-container",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub maximum_dead_containers_per_container: i32,

    /// Deprecated in the Go kubelet: dead containers kept on the node (negative: no limit).
    #[arg(long = "maximum-dead-containers", default_value_t = -1, allow_negative_numbers = true)]
    pub maximum_dead_containers: i32,

    /// deckhand only, for tests: how often image garbage collection runs. The Go kubelet has
    /// no flag for it (`ImageGCPeriod`, a 5m constant); leave it at 5m in production.
    #[arg(long = "image-gc-period", default_value = "5m", value_parser = parse_go_duration, hide = true)]
    pub image_gc_period: Duration,

    /// Subcommand (maintenance tools); none runs the node agent.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Maintenance subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Stops and removes every Kubernetes pod sandbox in the runtime (what `crictl rmp -af`
    /// does); used by the harness's `down`.
    CriCleanup,
}

/// Errors of [`Flags::load`] (the flags themselves are checked by clap).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file is unusable.
    #[error(transparent)]
    File(#[from] file::ConfigFileError),
    /// A flag or file value deckhand cannot honour.
    #[error("{0}")]
    Unsupported(String),
    /// A value out of its range (the Go kubelet's validation message).
    #[error("{0}")]
    Invalid(String),
}

/// Sets every honoured field of `file` on `flags` unless `explicit(flag_id)` says the flag was
/// given on the command line (the Go kubelet's precedence: command line, then file, then
/// defaults). `flag_id` is the clap id, i.e. the [`Flags`] field name.
pub fn merge_file(flags: &mut Flags, file: &file::FileConfig, explicit: &dyn Fn(&str) -> bool) {
    macro_rules! take {
        ($id:ident) => {
            if let Some(v) = &file.$id {
                if !explicit(stringify!($id)) {
                    flags.$id = v.clone();
                }
            }
        };
        ($id:ident, opt) => {
            if let Some(v) = &file.$id {
                if !explicit(stringify!($id)) {
                    flags.$id = Some(v.clone());
                }
            }
        };
        ($id:ident => $flag:ident) => {
            if let Some(v) = &file.$id {
                if !explicit(stringify!($flag)) {
                    flags.$flag = v.clone();
                }
            }
        };
    }
    take!(static_pod_path => pod_manifest_path);
    take!(pod_logs_dir);
    take!(file_check_frequency);
    take!(address);
    take!(port);
    take!(read_only_port);
    take!(tls_cert_file, opt);
    take!(tls_private_key_file, opt);
    take!(rotate_certificates);
    take!(server_tls_bootstrap => rotate_server_certificates);
    take!(client_ca_file, opt);
    take!(authentication_webhook => authentication_token_webhook);
    take!(anonymous_auth);
    take!(authorization_mode);
    take!(healthz_port);
    take!(healthz_bind_address);
    take!(cluster_domain);
    take!(cluster_dns);
    take!(node_status_update_frequency);
    take!(node_status_report_frequency);
    take!(node_lease_duration_seconds);
    take!(cgroups_per_qos);
    take!(cgroup_driver);
    take!(max_pods);
    take!(resolv_conf);
    take!(eviction_hard);
    take!(eviction_pressure_transition_period);
    take!(container_log_max_size);
    take!(container_log_max_files);
    take!(system_reserved);
    take!(kube_reserved);
    take!(verbosity);
    take!(register_with_taints);
    take!(container_runtime_endpoint);
    take!(image_service_endpoint, opt);
    take!(image_gc_high_threshold_percent => image_gc_high_threshold);
    take!(image_gc_low_threshold_percent => image_gc_low_threshold);
    take!(image_minimum_gc_age => minimum_image_ttl_duration);
    take!(image_maximum_gc_age);
}

/// True when the argument `id` was given on the command line (or through its environment
/// variable), not taken from its default.
pub fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches
            .try_get_raw(id)
            .ok()
            .and_then(|_| matches.value_source(id)),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

impl Flags {
    /// Parses the command line (clap exits with its usage message on an unknown or malformed
    /// flag, and for `--help`/`--version`), then merges the `--config` file under it and checks
    /// the result. Returns the flags and the warnings to log once logging is set up.
    ///
    /// Errors: [`ConfigError`].
    pub fn load() -> Result<(Flags, Vec<String>), ConfigError> {
        let matches = Flags::command().get_matches();
        Self::from_matches(&matches)
    }

    /// [`Flags::load`] on already parsed arguments (for tests).
    ///
    /// Errors: [`ConfigError`].
    pub fn from_matches(matches: &ArgMatches) -> Result<(Flags, Vec<String>), ConfigError> {
        let mut flags = Flags::from_arg_matches(matches)
            .map_err(|e| ConfigError::Unsupported(e.to_string()))?;
        let mut warnings = Vec::new();
        if let Some(path) = flags.config.clone() {
            let (cfg, w) = file::load(&path)?;
            warnings.extend(
                w.into_iter()
                    .map(|w| format!("kubelet config file {}: {w}", path.display())),
            );
            merge_file(&mut flags, &cfg, &|id| given(matches, id));
        }
        warnings.extend(flags.check()?);
        Ok((flags, warnings))
    }

    /// Checks the merged values; returns warnings for accepted but unused settings.
    ///
    /// Errors: [`ConfigError::Unsupported`] for a read-only port, a separate image service
    /// endpoint, or an unknown cgroup driver.
    pub fn check(&self) -> Result<Vec<String>, ConfigError> {
        let mut w = Vec::new();
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
        if !matches!(self.cgroup_driver.as_str(), "cgroupfs" | "systemd") {
            return Err(ConfigError::Unsupported(format!(
                "cgroup driver {:?}: must be cgroupfs or systemd",
                self.cgroup_driver
            )));
        }
        self.image_gc_policy().map_err(ConfigError::Invalid)?;
        w.extend(self.container_gc_warnings());
        if let Some(img) = &self.pod_infra_container_image {
            w.push(format!("flag --pod-infra-container-image={img} is deprecated and not used: the pod sandbox image comes from the container runtime's configuration"));
        }
        if let Some(c) = &self.kubelet_cgroups {
            w.push(format!(
                "flag --kubelet-cgroups={c} is not used: deckhand stays in the cgroup its service manager gives it"
            ));
        }
        if let Some(c) = &self.runtime_cgroups {
            w.push(format!(
                "flag --runtime-cgroups={c} is not used: runtime cgroup stats are not reported"
            ));
        }
        Ok(w)
    }

    /// The image garbage collection policy from `--image-gc-high-threshold`,
    /// `--image-gc-low-threshold`, `--minimum-image-ttl-duration` and `imageMaximumGCAge`.
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
                self.image_gc_high_threshold,
                "imageGCHighThresholdPercent",
                "image-gc-high-threshold",
            )?,
            low_threshold_percent: pct(
                self.image_gc_low_threshold,
                "imageGCLowThresholdPercent",
                "image-gc-low-threshold",
            )?,
            min_age: self.minimum_image_ttl_duration,
            max_age: self.image_maximum_gc_age,
        };
        p.validate()?;
        Ok(p)
    }

    /// The container garbage collection policy from `--minimum-container-ttl-duration`,
    /// `--maximum-dead-containers-per-container` and `--maximum-dead-containers`.
    pub fn container_gc_policy(&self) -> crate::gc::ContainerGcPolicy {
        crate::gc::ContainerGcPolicy {
            min_age: self.minimum_container_ttl_duration,
            max_per_pod_container: self.maximum_dead_containers_per_container,
            max_containers: self.maximum_dead_containers,
        }
    }

    /// The Go kubelet's deprecation warnings for the container GC flags set to anything but
    /// their defaults (they are honoured).
    fn container_gc_warnings(&self) -> Vec<String> {
        let d = crate::gc::ContainerGcPolicy::default();
        let p = self.container_gc_policy();
        let mut w = Vec::new();
        let msg = |flag: &str| {
            format!("Flag --{flag} has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.")
        };
        if p.min_age != d.min_age {
            w.push(msg("minimum-container-ttl-duration"));
        }
        if p.max_per_pod_container != d.max_per_pod_container {
            w.push(msg("maximum-dead-containers-per-container"));
        }
        if p.max_containers != d.max_containers {
            w.push(msg("maximum-dead-containers"));
        }
        w
    }

    /// The node name: `--hostname-override`, else the hostname, lower-cased.
    pub fn node_name(&self) -> String {
        self.hostname_override
            .clone()
            .unwrap_or_else(hostname)
            .trim()
            .to_lowercase()
    }

    /// The containerd socket path for the event stream.
    pub fn containerd_socket(&self) -> String {
        self.containerd_socket.clone().unwrap_or_else(|| {
            self.container_runtime_endpoint
                .trim_start_matches("unix://")
                .to_string()
        })
    }
}

/// Parses `--kube-reserved` / `--system-reserved` entries (`cpu=100m`, `memory=256Mi`,
/// `ephemeral-storage=1Gi`, `pid=100`) into milli-units by resource.
///
/// Errors: an entry without `=`, an unknown resource, or an invalid quantity.
pub fn parse_reserved(
    entries: &[String],
) -> Result<std::collections::BTreeMap<String, i128>, String> {
    let mut out = std::collections::BTreeMap::new();
    for e in entries.iter().filter(|e| !e.trim().is_empty()) {
        let (k, v) = e
            .split_once('=')
            .ok_or_else(|| format!("{e:?}: expected <resource>=<quantity>"))?;
        let k = k.trim();
        if !matches!(k, "cpu" | "memory" | "ephemeral-storage" | "pid") {
            return Err(format!("{e:?}: unsupported resource {k:?}"));
        }
        let q = crate::quantity::parse_milli(v.trim())
            .map_err(|_| format!("{e:?}: invalid quantity {v:?}"))?;
        out.insert(k.to_string(), q);
    }
    Ok(out)
}

impl Flags {
    /// kube-reserved + system-reserved, in milli-units by resource.
    ///
    /// Errors: as [`parse_reserved`], naming the flag.
    pub fn reserved_milli(&self) -> Result<std::collections::BTreeMap<String, i128>, String> {
        let mut total =
            parse_reserved(&self.kube_reserved).map_err(|e| format!("--kube-reserved: {e}"))?;
        for (k, v) in
            parse_reserved(&self.system_reserved).map_err(|e| format!("--system-reserved: {e}"))?
        {
            *total.entry(k).or_insert(0) += v;
        }
        Ok(total)
    }
}

/// The machine's hostname.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_flags_parse() {
        let f = Flags::try_parse_from([
            "deckhand",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--hostname-override=Node-A",
            "--node-ip=10.250.0.1",
            "--node-labels=a=b,c=d",
            "--v=2",
        ])
        .unwrap();
        assert_eq!(f.node_name(), "node-a");
        assert_eq!(f.node_labels, vec!["a=b", "c=d"]);
        assert_eq!(f.node_status_update_frequency, Duration::from_secs(10));
        assert!(Flags::try_parse_from(["deckhand", "--no-such-flag"]).is_err());
        let f = Flags::try_parse_from([
            "deckhand",
            "--kube-reserved=cpu=100m,memory=128Mi",
            "--system-reserved=cpu=150m",
        ])
        .unwrap();
        let r = f.reserved_milli().unwrap();
        assert_eq!(r["cpu"], 250);
        assert_eq!(r["memory"], 128 * 1024 * 1024 * 1000);
        assert!(parse_reserved(&["gpu=1".into()]).is_err());
    }

    fn load_args(args: &[&str]) -> Result<(Flags, Vec<String>), ConfigError> {
        let m = Flags::command().try_get_matches_from(args).unwrap();
        Flags::from_matches(&m)
    }

    fn temp_config(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("deckhand-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    const FILE: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
        clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nmaxPods: 50\nport: 10260\n\
        cgroupDriver: systemd\nstaticPodPath: /etc/kubernetes/manifests\n\
        authentication:\n  anonymous:\n    enabled: true\n\
        containerRuntimeEndpoint: unix:///run/other.sock\nlogging:\n  verbosity: 2\n";

    #[test]
    fn flags_only_keep_defaults() {
        let (f, w) = load_args(&["deckhand", "--max-pods=20"]).unwrap();
        assert!(w.is_empty());
        assert_eq!(f.max_pods, 20);
        assert_eq!(f.port, 10250);
        assert_eq!(f.cgroup_driver, "cgroupfs");
        assert!(f.cluster_dns.is_empty());
        assert_eq!(f.healthz_port, 10248);
    }

    #[test]
    fn file_only_sets_fields() {
        let p = temp_config("file-only.yaml", FILE);
        let (f, _) = load_args(&["deckhand", &format!("--config={}", p.display())]).unwrap();
        assert_eq!(f.cluster_dns, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(f.cluster_domain, "cluster.local");
        assert_eq!(f.max_pods, 50);
        assert_eq!(f.port, 10260);
        assert_eq!(f.cgroup_driver, "systemd");
        assert_eq!(f.pod_manifest_path, "/etc/kubernetes/manifests");
        assert!(f.anonymous_auth);
        assert_eq!(f.container_runtime_endpoint, "unix:///run/other.sock");
        assert_eq!(f.verbosity, 2);
        // Untouched by the file: flag defaults.
        assert_eq!(f.node_status_update_frequency, Duration::from_secs(10));
    }

    #[test]
    fn command_line_wins_over_file() {
        let p = temp_config("both.yaml", FILE);
        let (f, _) = load_args(&[
            "deckhand",
            &format!("--config={}", p.display()),
            "--max-pods=7",
            "--cgroup-driver=cgroupfs",
            "--anonymous-auth=false",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--v=4",
            "--cluster-dns=10.96.0.53",
        ])
        .unwrap();
        assert_eq!(f.max_pods, 7);
        assert_eq!(f.cgroup_driver, "cgroupfs");
        assert!(!f.anonymous_auth);
        assert_eq!(
            f.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
        assert_eq!(f.verbosity, 4);
        assert_eq!(f.cluster_dns, vec!["10.96.0.53".parse::<IpAddr>().unwrap()]);
        // From the file, not given on the command line.
        assert_eq!(f.port, 10260);
        assert_eq!(f.cluster_domain, "cluster.local");
        // A flag given with its default value still wins.
        let (f, _) = load_args(&[
            "deckhand",
            &format!("--config={}", p.display()),
            "--port=10250",
        ])
        .unwrap();
        assert_eq!(f.port, 10250);
    }

    #[test]
    fn merge_is_pure() {
        let mut f = Flags::try_parse_from(["deckhand"]).unwrap();
        let file = file::FileConfig {
            max_pods: Some(9),
            static_pod_path: Some("/m".into()),
            server_tls_bootstrap: Some(true),
            ..Default::default()
        };
        merge_file(&mut f, &file, &|id| id == "max_pods");
        assert_eq!(f.max_pods, 110, "explicit flag kept");
        assert_eq!(f.pod_manifest_path, "/m");
        assert!(f.rotate_server_certificates);
    }

    #[test]
    fn image_gc_flags_and_file_fields_are_honoured_and_validated() {
        let (f, w) = load_args(&["deckhand"]).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            f.image_gc_policy().unwrap(),
            crate::gc::ImageGcPolicy::default()
        );
        assert_eq!(
            f.container_gc_policy(),
            crate::gc::ContainerGcPolicy::default()
        );
        let (f, _) = load_args(&[
            "deckhand",
            "--image-gc-high-threshold=50",
            "--image-gc-low-threshold=40",
            "--minimum-image-ttl-duration=30s",
        ])
        .unwrap();
        let p = f.image_gc_policy().unwrap();
        assert_eq!(
            (p.high_threshold_percent, p.low_threshold_percent),
            (50, 40)
        );
        assert_eq!(p.min_age, Duration::from_secs(30));
        let e = load_args(&[
            "deckhand",
            "--image-gc-high-threshold=70",
            "--image-gc-low-threshold=70",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70"
            ),
            "{e}"
        );
        let e = load_args(&["deckhand", "--image-gc-high-threshold=101"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be between 0 and 100"), "{e}");
        let e = load_args(&["deckhand", "--image-gc-low-threshold=-1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("imageGCLowThresholdPercent"), "{e}");
        let file = temp_config(
            "gc.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 0\n\
             imageMinimumGCAge: 1m\nimageMaximumGCAge: 168h\n",
        );
        let (f, w) = load_args(&[
            "deckhand",
            &format!("--config={}", file.display()),
            "--image-gc-high-threshold=95",
        ])
        .unwrap();
        assert!(w.is_empty(), "honoured, not warned: {w:?}");
        let p = f.image_gc_policy().unwrap();
        assert_eq!(p.high_threshold_percent, 95, "flag wins");
        assert_eq!(
            p.low_threshold_percent, 0,
            "an explicit 0 is kept (a pointer field in Go)"
        );
        assert_eq!(p.min_age, Duration::from_secs(60));
        assert_eq!(p.max_age, Duration::from_secs(168 * 3600));
        let file = temp_config(
            "gc-bad.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageMinimumGCAge: 10m\nimageMaximumGCAge: 5m\n",
        );
        let e = load_args(&["deckhand", &format!("--config={}", file.display())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("imageMaximumGCAge 5m0s must be greater than imageMinimumGCAge 10m0s"),
            "{e}"
        );
    }

    #[test]
    fn container_gc_flags_are_honoured_with_deprecation_warnings() {
        let (f, w) = load_args(&[
            "deckhand",
            "--maximum-dead-containers-per-container=2",
            "--maximum-dead-containers=-1",
            "--minimum-container-ttl-duration=1m",
        ])
        .unwrap();
        let p = f.container_gc_policy();
        assert_eq!(p.max_per_pod_container, 2);
        assert_eq!(p.max_containers, -1);
        assert_eq!(p.min_age, Duration::from_secs(60));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("Flag --minimum-container-ttl-duration has been deprecated"),
            "{w:?}"
        );
    }

    #[test]
    fn bad_file_and_unsupported_values_are_errors() {
        let p = temp_config(
            "unknown.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPod: 3\n",
        );
        let e = load_args(&["deckhand", &format!("--config={}", p.display())]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("maxPod") && msg.contains("unknown.yaml"),
            "{msg}"
        );
        assert!(load_args(&["deckhand", "--config=/nonexistent/deckhand.yaml"]).is_err());
        assert!(load_args(&["deckhand", "--read-only-port=10255"]).is_err());
        assert!(load_args(&["deckhand", "--image-service-endpoint=unix:///other.sock"]).is_err());
        let (_, w) = load_args(&[
            "deckhand",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
        ])
        .unwrap();
        assert!(w[0].contains("deprecated"), "{w:?}");
        assert!(Flags::command()
            .try_get_matches_from(["deckhand", "--network-plugin=cni"])
            .is_err());
    }
}
