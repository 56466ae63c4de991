//! deckhand's command line, named and defaulted as the Go kubelet's (k/k
//! `cmd/kubelet/app/options`), so that a kubeadm-style unit can start deckhand where it starts
//! `/usr/bin/kubelet`: the clap [`Flags`], the overlay of the flags that set KubeletConfiguration
//! fields ([`Flags::overlay`]), and what the other flags (the Go kubelet's `KubeletFlags`) mean.
//!
//! A flag that sets a KubeletConfiguration field is an `Option` in [`Flags`]: `None` when it is
//! not on the command line, so that the field keeps the file's value, else the Go default; its
//! default is the field's, shown in `--help` ([`Flags::command_with_defaults`]). The other flags
//! (`--kubeconfig`, `--node-ip`, `--root-dir`, ...) have their clap defaults.

use super::{ConfigError, KubeletConfiguration};
use crate::config::parse_go_duration;
use clap::{CommandFactory, Parser};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Command-line flags. Names match the Go kubelet's.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "deckhand",
    disable_version_flag = true,
    about = "A Kubernetes node agent (kubelet) driving containerd through CRI"
)]
pub struct Flags {
    /// `--version` (or `--version=true`) prints `Kubernetes <version>` and quits, as the Go
    /// kubelet does (component-base `verflag`); kubeadm's preflight runs `kubelet --version`
    /// and parses that line. `--version=raw` prints the version fields, `false` nothing.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "true|raw")]
    pub version: Option<String>,
    /// Path to a kubeconfig with this node's credentials. Without it, the first existing file of
    /// `$KUBECONFIG`, else `~/.kube/config`, else the in-cluster service account
    /// (`config::kubeconfig::client_config`).
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
    #[arg(long = "container-runtime-endpoint")]
    pub container_runtime_endpoint: Option<String>,

    /// Directory for deckhand's files (pod directories and their volumes, plugin sockets,
    /// certificates), the Go kubelet's: the place kubeadm, CSI drivers and node agents expect.
    #[arg(long = "root-dir", default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,

    /// Directory for pod logs (KubeletConfiguration `podLogsDir`).
    #[arg(long = "pod-logs-dir")]
    pub pod_logs_dir: Option<String>,

    /// How often node status is computed (KubeletConfiguration `nodeStatusUpdateFrequency`).
    #[arg(long = "node-status-update-frequency", value_parser = parse_go_duration)]
    pub node_status_update_frequency: Option<Duration>,

    /// How often an unchanged node status is still written (`nodeStatusReportFrequency`).
    #[arg(long = "node-status-report-frequency", value_parser = parse_go_duration)]
    pub node_status_report_frequency: Option<Duration>,

    /// Lease duration in seconds (`nodeLeaseDurationSeconds`); renewed every quarter of it.
    #[arg(long = "node-lease-duration-seconds")]
    pub node_lease_duration_seconds: Option<i32>,

    /// Maximum number of pods (`maxPods`), reported as the `pods` capacity.
    #[arg(long = "max-pods")]
    pub max_pods: Option<u32>,

    /// Maximum number of processes in each pod (`podPidsLimit`); -1 is unlimited.
    #[arg(long = "pod-max-pids", allow_negative_numbers = true)]
    pub pod_max_pids: Option<i64>,

    /// Port the kubelet server listens on, reported in `status.daemonEndpoints`.
    #[arg(long = "port")]
    pub port: Option<i32>,

    /// IP address the kubelet server listens on (KubeletConfiguration `address`).
    #[arg(long = "address")]
    pub address: Option<IpAddr>,

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
    #[arg(
        long = "authentication-token-webhook",
        num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set,
    )]
    pub authentication_token_webhook: Option<bool>,

    /// Requests without credentials are served as `system:anonymous` (`authentication.anonymous.enabled`).
    #[arg(
        long = "anonymous-auth",
        num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set,
    )]
    pub anonymous_auth: Option<bool>,

    /// How kubelet server requests are authorized: `Webhook` (SubjectAccessReview) or
    /// `AlwaysAllow`.
    #[arg(long = "authorization-mode", value_enum)]
    pub authorization_mode: Option<crate::server::auth::AuthorizationMode>,

    /// A container log file is rotated when it reaches this size (`containerLogMaxSize`,
    /// a quantity such as `10Mi`).
    #[arg(long = "container-log-max-size")]
    pub container_log_max_size: Option<String>,

    /// How many log files a container keeps, the live one included (`containerLogMaxFiles`).
    #[arg(long = "container-log-max-files")]
    pub container_log_max_files: Option<usize>,

    /// Labels to add at registration, `key=value,key2=value2`.
    #[arg(long = "node-labels", value_delimiter = ',')]
    pub node_labels: Vec<String>,

    /// Taints to register with, `key=value:Effect,...`.
    #[arg(long = "register-with-taints", value_delimiter = ',')]
    pub register_with_taints: Option<Vec<String>>,

    /// How often the runtime is relisted as a safety net behind containerd's event stream
    /// (the Go kubelet's evented PLEG relists every 300 s, the generic one every 1 s).
    #[arg(long = "pleg-relist-period", default_value = "5s", value_parser = parse_go_duration)]
    pub pleg_relist_period: Duration,

    /// Which runtime event stream the PLEG follows besides the relist: `auto` (containerd's
    /// native stream on containerd, else CRI's `GetContainerEvents`), `containerd`, or `cri`
    /// (the stream the Go kubelet's `EventedPLEG` follows). deckhand's own flag: see
    /// [`crate::pleg::EventSource`] for the choice and why it is not the feature gate.
    #[arg(long = "pleg-event-source", value_enum, default_value = "auto")]
    pub pleg_event_source: crate::pleg::EventSource,

    /// Log verbosity, as the Go kubelet's `--v` (0 = info, 2+ = debug, 4+ = trace). RUST_LOG
    /// overrides it.
    #[arg(long = "v", short = 'v')]
    pub verbosity: Option<u8>,

    /// containerd's socket for its native event stream (exit events). Defaults to the CRI socket.
    #[arg(long = "containerd-socket")]
    pub containerd_socket: Option<String>,

    /// DNS server IPs written into ClusterFirst pods' resolv.conf (KubeletConfiguration
    /// `clusterDNS`). Empty: ClusterFirst pods fall back to the node's resolv.conf, as the Go
    /// kubelet does (with a MissingClusterDNS event).
    #[arg(long = "cluster-dns", value_delimiter = ',')]
    pub cluster_dns: Option<Vec<IpAddr>>,

    /// Cluster domain (KubeletConfiguration `clusterDomain`), e.g. `cluster.local`; search paths
    /// `<ns>.svc.<domain> svc.<domain> <domain>` are written for ClusterFirst pods.
    #[arg(long = "cluster-domain")]
    pub cluster_domain: Option<String>,

    /// The node's resolv.conf, used for dnsPolicy Default and appended to ClusterFirst search
    /// paths (KubeletConfiguration `resolvConf`). Empty disables it.
    #[arg(long = "resolv-conf")]
    pub resolv_conf: Option<String>,

    /// Resources reserved for Kubernetes daemons, `cpu=100m,memory=256Mi` (`kubeReserved`);
    /// subtracted from capacity to give allocatable.
    #[arg(long = "kube-reserved", value_delimiter = ',')]
    pub kube_reserved: Option<Vec<String>>,

    /// Resources reserved for the OS (`systemReserved`); subtracted from capacity.
    #[arg(long = "system-reserved", value_delimiter = ',')]
    pub system_reserved: Option<Vec<String>>,

    /// Hard eviction thresholds, `memory.available<100Mi,nodefs.available<10%` (`evictionHard`);
    /// `memory.available` and `nodefs.available` are reserved from allocatable; crossing one sets the
    /// node's pressure condition and evicts pods (see [`crate::eviction`]). Unset: the Go
    /// kubelet's defaults; a list replaces them (an empty `--eviction-hard=` turns hard eviction
    /// off).
    #[arg(long = "eviction-hard", value_delimiter = ',')]
    pub eviction_hard: Option<Vec<String>>,

    /// How long a node pressure condition stays after its threshold was last crossed
    /// (`evictionPressureTransitionPeriod`), so the node does not flap.
    #[arg(long = "eviction-pressure-transition-period", value_parser = parse_go_duration)]
    pub eviction_pressure_transition_period: Option<Duration>,

    /// Cgroup driver of the runtime: `cgroupfs` or `systemd` (`cgroupDriver`).
    #[arg(long = "cgroup-driver")]
    pub cgroup_driver: Option<String>,

    /// Whether pod-level QoS cgroups (`kubepods/...`) are created and passed as cgroup parents
    /// (`cgroupsPerQOS`).
    #[arg(
        long = "cgroups-per-qos",
        num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set,
    )]
    pub cgroups_per_qos: Option<bool>,

    /// KubeletConfiguration file (`kubelet.config.k8s.io/v1beta1`, what kubeadm writes to
    /// /var/lib/kubelet/config.yaml). Flags given on the command line override its fields.
    #[arg(long = "config")]
    pub config: Option<PathBuf>,

    /// Directory of KubeletConfiguration drop-ins (`*.conf`, this directory and those below it,
    /// in lexical order), each merged onto `--config` as a JSON merge patch; flags still win
    /// (the Go kubelet's `--config-dir`, GA).
    #[arg(long = "config-dir")]
    pub config_dir: Option<PathBuf>,

    /// The cloud provider: empty for none, or `external` for an out-of-tree cloud controller
    /// manager (the only cloud provider the Go kubelet has since v1.31). With `external` the Node
    /// registers with the `node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule` taint
    /// and the `alpha.kubernetes.io/provided-node-ip` annotation, and addresses the cloud
    /// controller manager set are kept, as the Go kubelet does.
    #[arg(long = "cloud-provider", default_value = "")]
    pub cloud_provider: String,

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
    #[arg(
        long = "rotate-certificates",
        num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set,
    )]
    pub rotate_certificates: Option<bool>,

    /// Obtain (and rotate) the serving certificate through `kubernetes.io/kubelet-serving`
    /// CSRs (`serverTLSBootstrap`).
    #[arg(
        long = "rotate-server-certificates",
        num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set,
    )]
    pub rotate_server_certificates: Option<bool>,

    /// Directory of static pod manifests (`staticPodPath`); empty disables static pods.
    #[arg(long = "pod-manifest-path")]
    pub pod_manifest_path: Option<String>,

    /// How often the static pod directory is re-read besides inotify (`fileCheckFrequency`).
    #[arg(long = "file-check-frequency", value_parser = parse_go_duration)]
    pub file_check_frequency: Option<Duration>,

    /// Port of the plain-HTTP `/healthz` endpoint (`healthzPort`); 0 disables it. `kubeadm join`
    /// waits on it.
    #[arg(long = "healthz-port")]
    pub healthz_port: Option<i32>,

    /// Address of the `/healthz` endpoint (`healthzBindAddress`).
    #[arg(long = "healthz-bind-address")]
    pub healthz_bind_address: Option<IpAddr>,

    /// The unauthenticated read-only port (`readOnlyPort`). deckhand has none: only 0 is
    /// accepted.
    #[arg(long = "read-only-port")]
    pub read_only_port: Option<i32>,

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
    #[arg(long = "image-gc-high-threshold")]
    pub image_gc_high_threshold: Option<i32>,

    /// Disk usage (percent) image garbage collection frees down to
    /// (`imageGCLowThresholdPercent`); below the high threshold.
    #[arg(long = "image-gc-low-threshold")]
    pub image_gc_low_threshold: Option<i32>,

    /// Minimum age of an unused image before it is garbage collected (`imageMinimumGCAge`).
    #[arg(long = "minimum-image-ttl-duration", value_parser = parse_go_duration)]
    pub minimum_image_ttl_duration: Option<Duration>,

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

/// What `--version=<value>` prints (`None`: nothing, carry on), as component-base's `verflag`
/// does for the Go kubelet: `true` prints `Kubernetes <version>` (here [`crate::kubelet_version`],
/// e.g. `Kubernetes v1.36.3-deckhand.0.1.0`, which kubeadm's `GetKubeletVersion` parses), `raw`
/// the version fields in Go's `%#v` layout, `false` nothing. Go's `--version=vX.Y.Z` (report
/// another version) is refused: deckhand reports only its own.
pub fn version_text(value: &str) -> Result<Option<String>, String> {
    let version = crate::kubelet_version();
    match value {
        "true" => Ok(Some(format!("Kubernetes {version}"))),
        "false" => Ok(None),
        "raw" => {
            let mut parts = crate::KUBE_VERSION.trim_start_matches('v').split('.');
            let (major, minor) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            Ok(Some(format!(
                "version.Info{{Major:\"{major}\", Minor:\"{minor}\", GitVersion:\"{version}\", Platform:\"{}/{}\"}}",
                std::env::consts::OS,
                match std::env::consts::ARCH {
                    "x86_64" => "amd64",
                    "aarch64" => "arm64",
                    other => other,
                }
            )))
        }
        other => Err(format!(
            "invalid value {other:?} for --version: true, false or raw (deckhand reports only its own version)"
        )),
    }
}

/// Maintenance subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Stops and removes every Kubernetes pod sandbox in the runtime (what `crictl rmp -af`
    /// does); used by the harness's `down`.
    CriCleanup,
}

/// Declares the flags that set one config field to their own value: `flag => field.path`.
/// Generates [`Flags::overlay_plain`] and the defaults `--help` shows.
macro_rules! overlay {
    ($( $flag:ident => $($field:ident).+ ),* $(,)?) => {
        impl Flags {
            /// Sets every given one-to-one flag on its field of `c`.
            fn overlay_plain(&self, c: &mut KubeletConfiguration) {
                $( if let Some(v) = &self.$flag { c.$($field).+ = v.clone().into(); } )*
            }
        }

        /// `(clap id, default as flag text)` of the one-to-one flags, from `d`.
        fn plain_defaults(d: &KubeletConfiguration) -> Vec<(&'static str, Option<String>)> {
            vec![$( (stringify!($flag), FlagText::flag_text(&d.$($field).+)) ),*]
        }
    };
}

overlay! {
    container_runtime_endpoint => container_runtime_endpoint,
    pod_logs_dir => pod_logs_dir,
    node_status_update_frequency => node_status_update_frequency,
    node_status_report_frequency => node_status_report_frequency,
    node_lease_duration_seconds => node_lease_duration_seconds,
    max_pods => max_pods,
    pod_max_pids => pod_pids_limit,
    port => port,
    address => address,
    tls_cert_file => tls_cert_file,
    tls_private_key_file => tls_private_key_file,
    client_ca_file => authentication.x509.client_ca_file,
    authentication_token_webhook => authentication.webhook.enabled,
    anonymous_auth => authentication.anonymous.enabled,
    authorization_mode => authorization.mode,
    container_log_max_size => container_log_max_size,
    container_log_max_files => container_log_max_files,
    verbosity => logging.verbosity,
    cluster_dns => cluster_dns,
    cluster_domain => cluster_domain,
    resolv_conf => resolv_conf,
    eviction_pressure_transition_period => eviction_pressure_transition_period,
    cgroup_driver => cgroup_driver,
    cgroups_per_qos => cgroups_per_qos,
    rotate_certificates => rotate_certificates,
    rotate_server_certificates => server_tls_bootstrap,
    pod_manifest_path => static_pod_path,
    file_check_frequency => file_check_frequency,
    healthz_port => healthz_port,
    healthz_bind_address => healthz_bind_address,
    read_only_port => read_only_port,
    image_service_endpoint => image_service_endpoint,
    image_gc_high_threshold => image_gc_high_threshold_percent,
    image_gc_low_threshold => image_gc_low_threshold_percent,
    minimum_image_ttl_duration => image_minimum_gc_age,
}

/// A config value as a flag would spell it, for `--help`; `None` shows no default.
trait FlagText {
    fn flag_text(&self) -> Option<String>;
}
macro_rules! flag_text_display {
    ($($t:ty),*) => { $( impl FlagText for $t {
        fn flag_text(&self) -> Option<String> { Some(self.to_string()) }
    } )* };
}
flag_text_display!(i32, i64, u32, u8, usize, bool, IpAddr);
impl FlagText for String {
    fn flag_text(&self) -> Option<String> {
        Some(self.clone()).filter(|s| !s.is_empty())
    }
}
impl FlagText for Duration {
    fn flag_text(&self) -> Option<String> {
        Some(crate::time::go_duration(*self))
    }
}
impl FlagText for PathBuf {
    fn flag_text(&self) -> Option<String> {
        Some(self.display().to_string())
    }
}
impl FlagText for Vec<IpAddr> {
    fn flag_text(&self) -> Option<String> {
        let s: Vec<_> = self.iter().map(|i| i.to_string()).collect();
        Some(s.join(",")).filter(|s| !s.is_empty())
    }
}
impl FlagText for crate::server::auth::AuthorizationMode {
    fn flag_text(&self) -> Option<String> {
        clap::ValueEnum::to_possible_value(self).map(|p| p.get_name().to_string())
    }
}
impl<T: FlagText> FlagText for Option<T> {
    fn flag_text(&self) -> Option<String> {
        self.as_ref().and_then(FlagText::flag_text)
    }
}

/// `name=value` (or `name<value`) entries of a map flag, later entries winning (Go's
/// `MapStringString`).
///
/// Errors: an entry without `sep`.
fn map_flag(
    entries: &[String],
    sep: char,
    bad: impl Fn(&str) -> String,
) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let (k, v) = e.split_once(sep).ok_or_else(|| bad(e))?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

impl Flags {
    /// Sets every flag given on the command line on its KubeletConfiguration field of `c` (the
    /// Go kubelet's precedence, `cmd/kubelet/app/server.go`: command line, then file, then
    /// defaults). Flags not given leave `c` as it is.
    ///
    /// Errors: [`ConfigError::Invalid`] for a `--kube-reserved`/`--system-reserved` entry
    /// without `=`, an `--eviction-hard` entry without `<` or a signal given twice, or a
    /// `--register-with-taints` entry that is not `key[=value]:Effect`.
    pub fn overlay(&self, c: &mut KubeletConfiguration) -> Result<(), ConfigError> {
        self.overlay_plain(c);
        for (flag, given, field) in [
            ("kube-reserved", &self.kube_reserved, &mut c.kube_reserved),
            (
                "system-reserved",
                &self.system_reserved,
                &mut c.system_reserved,
            ),
        ] {
            if let Some(entries) = given {
                *field = map_flag(entries, '=', |e| {
                    format!("--{flag}: {e:?}: expected <resource>=<quantity>")
                })
                .map_err(ConfigError::Invalid)?;
            }
        }
        if let Some(entries) = &self.eviction_hard {
            use crate::eviction::thresholds::ThresholdError;
            let invalid = |e: ThresholdError| ConfigError::Invalid(format!("--eviction-hard: {e}"));
            let mut m = BTreeMap::new();
            for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
                let (k, v) = e
                    .split_once('<')
                    .ok_or_else(|| invalid(ThresholdError::Syntax(e.to_string())))?;
                if m.insert(k.trim().to_string(), v.trim().to_string())
                    .is_some()
                {
                    return Err(invalid(ThresholdError::Duplicate(k.trim().to_string())));
                }
            }
            c.eviction_hard = m;
        }
        if let Some(entries) = &self.register_with_taints {
            c.register_with_taints = crate::node::parse_taints(entries)
                .map_err(|e| ConfigError::Invalid(format!("--register-with-taints: {e}")))?;
        }
        Ok(())
    }

    /// The clap command of [`Flags`], with the KubeletConfiguration defaults of the overlay
    /// flags in their help (`[default: 10s]`), as the Go kubelet's `--help` shows them.
    pub fn command_with_defaults() -> clap::Command {
        let d = KubeletConfiguration::default();
        let mut defaults = plain_defaults(&d);
        let eviction: Vec<_> = d
            .eviction_hard
            .iter()
            .map(|(k, v)| format!("{k}<{v}"))
            .collect();
        defaults.push(("eviction_hard", Some(eviction.join(","))));
        let mut cmd = super::go_flags::add_to(<Flags as CommandFactory>::command());
        for (id, text) in defaults {
            let Some(text) = text else { continue };
            cmd = cmd.mut_arg(id, |a| {
                // As clap lays out its own defaults: inline in `-h`, a paragraph in `--help`.
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                let long = a.get_long_help().map_or(help.clone(), |h| h.to_string());
                a.help(format!("{help} [default: {text}]"))
                    .long_help(format!("{long}\n\n[default: {text}]"))
            });
        }
        cmd
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

    /// Warnings for flags that are accepted but deprecated or not used: the Go kubelet's
    /// deprecation warnings for the container GC flags set to anything but their defaults
    /// (they are honoured), then `--pod-infra-container-image`, `--kubelet-cgroups` and
    /// `--runtime-cgroups`.
    pub fn warnings(&self) -> Vec<String> {
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
        w
    }

    /// Whether the node runs with an external cloud provider (`--cloud-provider=external`).
    ///
    /// Errors: any other provider but none, as the Go kubelet refuses it since the in-tree
    /// cloud providers are gone (cloud-provider `ErrorForDisabledProvider`).
    pub fn external_cloud_provider(&self) -> Result<bool, ConfigError> {
        match self.cloud_provider.as_str() {
            "" => Ok(false),
            "external" => Ok(true),
            other => Err(ConfigError::Unsupported(format!(
                "cloud provider {other:?} was specified, but built-in cloud providers are disabled. Please set --cloud-provider=external and migrate to an external cloud provider"
            ))),
        }
    }

    /// The node name: `--hostname-override`, else the hostname, lower-cased.
    pub fn node_name(&self) -> String {
        self.hostname_override
            .clone()
            .unwrap_or_else(super::hostname)
            .trim()
            .to_lowercase()
    }

    /// The containerd socket path for the event stream: `--containerd-socket`, else the path of
    /// `runtime_endpoint` (the merged `containerRuntimeEndpoint`).
    pub fn containerd_socket(&self, runtime_endpoint: &str) -> String {
        self.containerd_socket
            .clone()
            .unwrap_or_else(|| runtime_endpoint.trim_start_matches("unix://").to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pleg_event_source_defaults_to_auto_and_parses() {
        use crate::pleg::EventSource;
        let parse = |args: &[&str]| {
            Flags::try_parse_from(std::iter::once("deckhand").chain(args.iter().copied()))
                .map(|f| f.pleg_event_source)
        };
        assert_eq!(parse(&[]).unwrap(), EventSource::Auto);
        assert_eq!(
            parse(&["--pleg-event-source=cri"]).unwrap(),
            EventSource::Cri
        );
        assert_eq!(
            parse(&["--pleg-event-source", "containerd"]).unwrap(),
            EventSource::Containerd
        );
        assert!(parse(&["--pleg-event-source=evented"]).is_err());
    }

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
        assert_eq!(f.verbosity, Some(2));
        assert_eq!(f.node_status_update_frequency, None, "not given");
        assert!(Flags::try_parse_from(["deckhand", "--no-such-flag"]).is_err());
        let f = Flags::try_parse_from([
            "deckhand",
            "--kube-reserved=cpu=100m,memory=128Mi",
            "--system-reserved=cpu=150m",
        ])
        .unwrap();
        let mut c = KubeletConfiguration::default();
        f.overlay(&mut c).unwrap();
        let r = c.reserved_milli().unwrap();
        assert_eq!(r["cpu"], 250);
        assert_eq!(r["memory"], 128 * 1024 * 1024 * 1000);
        assert!(super::super::parse_reserved(&["gpu=1".into()]).is_err());
    }

    #[test]
    fn bool_flags_take_an_optional_value() {
        let f = Flags::try_parse_from(["deckhand", "--anonymous-auth", "--cgroups-per-qos=false"])
            .unwrap();
        assert_eq!(f.anonymous_auth, Some(true));
        assert_eq!(f.cgroups_per_qos, Some(false));
        assert_eq!(f.rotate_certificates, None);
    }

    #[test]
    fn map_and_list_flags_overlay_their_fields() {
        let f = Flags::try_parse_from([
            "deckhand",
            "--eviction-hard=memory.available<200Mi,nodefs.available<5%",
            "--register-with-taints=a=b:NoSchedule,c:NoExecute",
            "--client-ca-file=/ca.crt",
        ])
        .unwrap();
        let mut c = KubeletConfiguration::default();
        f.overlay(&mut c).unwrap();
        assert_eq!(c.eviction_hard.len(), 2);
        assert_eq!(c.eviction_hard["nodefs.available"], "5%");
        assert_eq!(c.register_with_taints.len(), 2);
        assert_eq!(c.register_with_taints[0].value.as_deref(), Some("b"));
        assert_eq!(
            c.authentication.x509.client_ca_file,
            Some(PathBuf::from("/ca.crt"))
        );
        let bad = |args: &[&str]| {
            let f = Flags::try_parse_from(args).unwrap();
            f.overlay(&mut KubeletConfiguration::default())
                .unwrap_err()
                .to_string()
        };
        let e = bad(&["deckhand", "--eviction-hard=memory.available"]);
        assert!(e.contains("invalid eviction threshold syntax"), "{e}");
        let e = bad(&[
            "deckhand",
            "--eviction-hard=memory.available<1Gi,memory.available<2Gi",
        ]);
        assert!(e.contains("duplicate"), "{e}");
        let e = bad(&["deckhand", "--kube-reserved=cpu"]);
        assert!(e.contains("--kube-reserved: \"cpu\": expected"), "{e}");
        let e = bad(&["deckhand", "--register-with-taints=a=b"]);
        assert!(e.starts_with("--register-with-taints:"), "{e}");
        // An empty list turns hard eviction off.
        let f = Flags::try_parse_from(["deckhand", "--eviction-hard="]).unwrap();
        let mut c = KubeletConfiguration::default();
        f.overlay(&mut c).unwrap();
        assert!(c.eviction_thresholds().unwrap().is_empty());
    }

    #[test]
    fn help_shows_the_configuration_defaults() {
        let mut cmd = Flags::command_with_defaults();
        let help = cmd.render_help().to_string();
        for want in [
            "[default: 10s]",
            "[default: 110]",
            "[default: unix:///run/containerd/containerd.sock]",
            "[default: /var/lib/kubelet]",
            "[default: Webhook]",
            "memory.available<100Mi",
        ] {
            assert!(help.contains(want), "{want} missing from\n{help}");
        }
        cmd.clone().debug_assert();
    }

    #[test]
    fn version_prints_what_kubeadm_parses() {
        let v = crate::kubelet_version();
        let cases: &[(&str, Result<Option<String>, ()>)] = &[
            ("true", Ok(Some(format!("Kubernetes {v}")))),
            ("false", Ok(None)),
            ("v1.30.0", Err(())),
            ("yes", Err(())),
        ];
        for (value, want) in cases {
            assert_eq!(&version_text(value).map_err(|_| ()), want, "{value}");
        }
        let raw = version_text("raw").unwrap().unwrap();
        assert!(
            raw.starts_with("version.Info{Major:\"1\", Minor:\"36\""),
            "{raw}"
        );
        assert!(raw.contains(&format!("GitVersion:\"{v}\"")), "{raw}");
        // kubeadm's preflight (cmd/kubeadm/app/preflight/utils.go GetKubeletVersion) takes the
        // line `Kubernetes v<semver>`; its pre-release part is deckhand's own version
        let line = format!("Kubernetes {v}");
        let semver = line.strip_prefix("Kubernetes v").unwrap();
        let (core, pre) = semver.split_once('-').unwrap();
        assert_eq!(core.split('.').count(), 3);
        assert!(core.split('.').all(|n| n.parse::<u32>().is_ok()), "{core}");
        assert!(
            pre.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'),
            "{pre}"
        );
        for args in [
            &["deckhand", "--version"][..],
            &["deckhand", "--version=raw"],
        ] {
            let f = Flags::try_parse_from(args).unwrap();
            assert!(f.version.is_some(), "{args:?}");
        }
        assert!(Flags::try_parse_from(["deckhand"])
            .unwrap()
            .version
            .is_none());
    }
}
