//! The kubelet's composition root (k/k `cmd/kubelet/app/server.go` `RunKubelet` and
//! `pkg/kubelet/kubelet.go` `Run`): from the configuration it builds the clients, registers the
//! node, and starts every loop (node status and lease, certificate rotation, pod sources, PLEG,
//! pod workers, status writer, eviction, garbage collection, the HTTPS and healthz servers, log
//! rotation) until told to stop. `src/bin/deckhand.rs` only parses the configuration, sets up
//! logging and hands over. Pods keep running when it stops; the next start adopts them.

use crate::certificate::csr::{Kind, Template};
use crate::certificate::manager::{
    bootstrap_client_cert, client_rotation, kubeconfig_client_pair, BootstrapConfig,
    ClientRotation, Installer, ReloadableClient, Rotator, ServingCertificate,
};
use crate::certificate::store::FileStore;
use crate::config::{Flags, KubeletConfiguration};
use crate::cri::CriClient;
use crate::events::{reason, EventRecorder};
use crate::node::hostinfo::HostInfo;
use crate::node::{parse_labels, NodeAgent, NodeConfig};
use crate::pleg::Pleg;
use crate::pod::workers::{PodWorkers, SyncContext};
use crate::status::StatusManager;
use crate::systemd::{Milestone, Notice, Notifier, SdNotifier, Startup};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Mutex};
use tokio_util::sync::CancellationToken;

/// How long shutdown waits for the tasks to end once they are told to stop.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// Why the kubelet could not start or went on no further: the step that failed and its cause.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct StartError {
    /// What was being done (`registering the node`, `--eviction-hard`, ...).
    pub step: String,
    /// The cause.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// An error without a cause of its own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

impl StartError {
    /// An error that is its own message.
    pub fn msg(m: impl std::fmt::Display) -> Self {
        StartError {
            step: "starting".into(),
            source: Box::new(Message(m.to_string())),
        }
    }
}

type Result<T> = std::result::Result<T, StartError>;

/// Names the step a fallible call belongs to.
trait Step<T> {
    fn step(self, step: &str) -> Result<T>;
    fn with_step(self, step: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<Box<dyn std::error::Error + Send + Sync>>> Step<T> for std::result::Result<T, E> {
    fn step(self, step: &str) -> Result<T> {
        self.map_err(|e| StartError {
            step: step.to_string(),
            source: e.into(),
        })
    }
    fn with_step(self, step: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| StartError {
            step: step(),
            source: e.into(),
        })
    }
}

/// A kubelet: the flag-only options (`--kubeconfig`, `--node-ip`, ...) and the merged
/// KubeletConfiguration ([`crate::config::load`]).
pub struct Kubelet {
    flags: Flags,
    kubelet: KubeletConfiguration,
}

impl Kubelet {
    /// A kubelet with this configuration; nothing runs before [`Kubelet::run`].
    pub fn new(flags: Flags, kubelet: KubeletConfiguration) -> Self {
        Kubelet { flags, kubelet }
    }

    /// Runs until `stop` is cancelled (SIGTERM or SIGINT in deckhand), then stops every task and
    /// waits for them up to [`SHUTDOWN_DEADLINE`]; those still running are named in a warning.
    ///
    /// Errors: a start-up step that failed (TLS bootstrap, registering the node, binding a
    /// server, an invalid setting); the error names the step.
    pub async fn run(self, cri: CriClient, stop: CancellationToken) -> Result<()> {
        let Kubelet { flags, kubelet } = self;
        let host = HostInfo::read(&flags.root_dir);
        let notifier = SdNotifier;
        let mut startup = Startup::default();
        notifier.notify(&Notice::Status(
            "starting: connecting to the API server and the runtime".into(),
        ));
        let node_name = flags.node_name();
        let node_ips =
            crate::node::address::detect(flags.node_ip.as_deref().unwrap_or(""), &node_name)
                .await
                .map_err(StartError::msg)?;
        let node_ip = node_ips[0];
        if flags.node_ip.as_deref().is_none_or(|a| {
            a.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_unspecified())
        }) {
            tracing::info!(node_ip = %node_ip, "no --node-ip: chose the node address as the Go kubelet does");
        }
        let node_ip_strings: Vec<String> = node_ips.iter().map(|i| i.to_string()).collect();
        let labels = parse_labels(&flags.node_labels).step("--node-labels")?;
        let taints = kubelet.register_with_taints.clone();
        std::fs::create_dir_all(&flags.root_dir)
            .with_step(|| format!("creating root dir {}", flags.root_dir.display()))?;
        std::fs::create_dir_all(&kubelet.pod_logs_dir)
            .with_step(|| format!("creating pod logs dir {}", kubelet.pod_logs_dir))?;

        let cert_dir = if flags.cert_dir.is_empty() {
            flags.root_dir.join("pki")
        } else {
            std::path::PathBuf::from(&flags.cert_dir)
        };
        // TLS bootstrap (k/k bootstrap.LoadClientCert): a client certificate through a CSR when
        // --kubeconfig is missing or expired
        if let Some(bootstrap) = &flags.bootstrap_kubeconfig {
            let Some(kubeconfig) = flags.kubeconfig.clone() else {
                return Err(StartError::msg("--bootstrap-kubeconfig needs --kubeconfig: the path the node kubeconfig is written to"));
            };
            let cfg = BootstrapConfig {
                kubeconfig,
                bootstrap_kubeconfig: bootstrap.clone(),
                cert_dir: cert_dir.clone(),
                node_name: node_name.clone(),
            };
            tokio::select! {
                r = bootstrap_client_cert(&cfg) => { r.step("TLS bootstrap")?; }
                _ = stop.cancelled() => {
                    tracing::info!("stopped during TLS bootstrap");
                    return Ok(());
                }
            }
        }
        // Standalone mode (k/k server.go: no kubeconfig → "standalone mode, no API client"): static
        // pods only, no node, lease, mirror pods, events or status in the API server.
        let standalone = flags.kubeconfig.is_none() && flags.bootstrap_kubeconfig.is_none();
        let client_store = FileStore::new(&cert_dir, Kind::Client.store_prefix());
        let mut force_client_rotation = false;
        let (client, reloadable) = match &flags.kubeconfig {
            _ if standalone => {
                tracing::info!(
                    static_pod_path = %kubelet.static_pod_path,
                    "no --kubeconfig and no --bootstrap-kubeconfig: running standalone, static pods only, no API server"
                );
                if kubelet.static_pod_path.is_empty() {
                    tracing::warn!("standalone mode without staticPodPath / --pod-manifest-path: there is nothing to run");
                }
                (crate::standalone::offline_client(), None)
            }
            Some(kc) if kubelet.rotate_certificates => {
                let names = kubeconfig_names(kc, &client_store.current_path());
                let store_valid = matches!(client_store.current(),
                    Ok(Some(s)) if crate::certificate::validity::still_valid(&s.chain, chrono::Utc::now()));
                let pair = if names || store_valid {
                    None
                } else {
                    kubeconfig_client_pair(kc).with_step(|| {
                        format!("reading the client certificate of {}", kc.display())
                    })?
                };
                let plan = client_rotation(names, store_valid, pair.as_ref().map(|p| p.2));
                if let Some((cert, key, _)) = &pair {
                    // kubeadm init's kubelet.conf: its pair becomes the cert dir's current pem
                    // (kubeadm's kubelet-finalize phase then points kubelet.conf at it)
                    let file = client_store.update(cert, key).with_step(|| {
                        format!(
                            "storing the client certificate of {} in {}",
                            kc.display(),
                            cert_dir.display()
                        )
                    })?;
                    tracing::info!(kubeconfig = %kc.display(), cert = %file.display(), "client certificate rotation starts from the kubeconfig's certificate");
                }
                if plan == ClientRotation::Off {
                    tracing::warn!(kubeconfig = %kc.display(), cert_dir = %cert_dir.display(),
                        "client certificate rotation: no valid certificate in the cert dir and no client certificate and key in the kubeconfig; not rotating");
                    (kube_client(&flags).await?, None)
                } else {
                    let identity =
                        (plan != ClientRotation::Kubeconfig).then(|| client_store.current_path());
                    let (r, c) = ReloadableClient::new(kc, identity.as_deref())
                        .await
                        .with_step(|| format!("loading kubeconfig {}", kc.display()))?;
                    force_client_rotation = plan == ClientRotation::Seed { at_once: true };
                    (c, Some(r))
                }
            }
            _ => (kube_client(&flags).await?, None),
        };
        let version = {
            let mut delay = Duration::from_millis(200);
            loop {
                match cri.version().await {
                    Ok(v) => break v,
                    Err(e) => {
                        tracing::warn!(error = %e, "container runtime not answering yet");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
        };
        let image_volumes = crate::kuberuntime::image_volume::runtime_supports_image_volumes(
            &version.runtime_name,
            &version.runtime_version,
        );
        tracing::info!(node = %node_name, runtime = %version.runtime_name, runtime_version = %version.runtime_version, image_volumes, kubelet_version = %crate::kubelet_version(), "starting deckhand");
        let cgroup_driver = cgroup_driver(&kubelet, &cri).await?;
        let cgroup_layout = crate::cm::CgroupLayout::new(cgroup_driver, &kubelet.cgroup_root);

        let eviction_thresholds = kubelet.eviction_thresholds().step("--eviction-hard")?;
        let cancel = CancellationToken::new();
        let recorder = if standalone {
            EventRecorder::log_only()
        } else {
            EventRecorder::start(client.clone(), &node_name)
        };
        // The eviction manager: built before the node agent (pressure conditions) and the pod
        // workers (admission, eviction), started once they run.
        let (evict_tx, evict_rx) = mpsc::channel(8);
        let mut eviction = crate::eviction::EvictionManager::new(
            crate::eviction::EvictionConfig {
                thresholds: eviction_thresholds.clone(),
                pressure_transition_period: kubelet.eviction_pressure_transition_period,
                monitoring_interval: crate::eviction::MONITORING_INTERVAL,
                root_dir: flags.root_dir.clone(),
                pod_logs_dir: std::path::PathBuf::from(&kubelet.pod_logs_dir),
                node_name: node_name.clone(),
                pod_cgroups: kubelet.cgroups_per_qos.then(|| cgroup_layout.clone()),
            },
            cri.clone(),
            recorder.clone(),
            evict_tx,
            Box::new(crate::eviction::NoReclaim),
        );
        let pressure = eviction.pressure();
        let node_cfg = NodeConfig {
            name: node_name.clone(),
            node_ips: node_ip_strings.clone(),
            hostname: node_name.clone(),
            root_dir: flags.root_dir.clone(),
            max_pods: kubelet.max_pods,
            reserved_milli: kubelet.reserved_milli().map_err(StartError::msg)?,
            port: kubelet.port,
            labels,
            taints,
            provider_id: kubelet.provider_id.clone(),
            external_cloud_provider: flags.external_cloud_provider().map_err(StartError::msg)?,
            status_update_frequency: kubelet.node_status_update_frequency,
            status_report_frequency: kubelet.node_status_report_frequency,
            lease_duration_seconds: kubelet.node_lease_duration_seconds,
            eviction_thresholds: eviction_thresholds.clone(),
        };
        let (node_tx, node_rx) = tokio::sync::watch::channel(None);
        // The node is registered in the background, as the Go kubelet does (its
        // registerWithAPIServer runs in the node status loop): static pods must run before the
        // API server answers, for kubeadm's control plane is itself static pods of this node.
        // The node status, watch and lease loops start once it is registered; mirror pods wait
        // for the Node's UID (their owner reference).
        let agent = (!standalone).then(|| {
            Arc::new(
                NodeAgent::new(client.clone(), cri.clone(), node_cfg, recorder.clone())
                    .with_pressure(pressure.clone())
                    .with_node_publisher(node_tx),
            )
        });
        let (registered_tx, mut registered_rx) = tokio::sync::oneshot::channel::<()>();
        let mut registered_pending = !standalone;
        if standalone {
            recorder.node(
                &node_name,
                false,
                reason::STARTING,
                "Starting kubelet.".into(),
            );
            for n in startup.reach(Milestone::NodeRegistered) {
                notifier.notify(&n);
            }
        }

        // every long-lived task: the loops started here, and the pod workers, their probe tasks
        // and PLEG's handlers started by them
        let tasks = crate::tasks::Tasks::new();
        if let Some(r) = reloadable {
            let rotator = Rotator {
                kind: Kind::Client,
                store: client_store.clone(),
                template: Template::client(&node_name),
                client: client.clone(),
                installer: Installer::Client(r),
                force: force_client_rotation,
            };
            let c = cancel.clone();
            tasks.spawn("client certificate rotation", async move {
                rotator.run(c).await
            });
        }
        // serving certificate through kubernetes.io/kubelet-serving CSRs (serverTLSBootstrap)
        if standalone && kubelet.server_tls_bootstrap {
            tracing::warn!("standalone mode: no API server to request a serving certificate from; --rotate-server-certificates is not used");
        }
        let serving = if kubelet.server_tls_bootstrap && !standalone {
            let Some(template) = Template::serving(&node_name, &node_name, &node_ips) else {
                return Err(StartError::msg("--rotate-server-certificates: no node address to request a serving certificate for"));
            };
            if kubelet.tls_cert_file.is_some() {
                tracing::warn!("--rotate-server-certificates: the serving certificate comes from CSRs; --tls-cert-file is not used");
            }
            let sc = Arc::new(ServingCertificate::default());
            let rotator = Rotator {
                kind: Kind::Serving,
                store: FileStore::new(&cert_dir, Kind::Serving.store_prefix()),
                template,
                client: client.clone(),
                installer: Installer::Serving(sc.clone()),
                force: false,
            };
            if !rotator.load_current() {
                tracing::info!("no serving certificate yet: requesting one (kubernetes.io/kubelet-serving CSRs need an approver)");
            }
            let c = cancel.clone();
            tasks.spawn("serving certificate rotation", async move {
                rotator.run(c).await
            });
            Some(sc)
        } else {
            None
        };
        if let Some(agent) = agent {
            let c = cancel.clone();
            let t = tasks.clone();
            let rec = recorder.clone();
            let name = node_name.clone();
            tasks.spawn("node registration", async move {
                let Ok(node) = agent.register(&c).await else {
                    return; // cancelled
                };
                rec.node(&name, false, reason::STARTING, "Starting kubelet.".into());
                let _ = registered_tx.send(());
                let node_uid = node.metadata.uid.clone().unwrap_or_default();
                {
                    let agent = agent.clone();
                    let c = c.clone();
                    t.spawn("node status loop", async move {
                        agent.run_status_loop(node, c).await
                    });
                }
                {
                    let agent = agent.clone();
                    let c = c.clone();
                    t.spawn("node watch", async move { agent.run_node_watch(c).await });
                }
                t.spawn("node lease loop", async move {
                    agent.run_lease_loop(node_uid, c).await
                });
            });
        }
        let mirror_node = node_rx.clone();
        let ctx = Arc::new(SyncContext {
            client: client.clone(),
            cri: cri.clone(),
            status: if standalone {
                StatusManager::standalone()
            } else {
                StatusManager::new(client.clone())
            },
            recorder: recorder.clone(),
            node_name: node_name.clone(),
            node_ips: node_ip_strings.clone(),
            root_dir: flags.root_dir.clone(),
            pod_logs_dir: kubelet.pod_logs_dir.clone(),
            runtime_name: version.runtime_name.clone(),
            image_volumes,
            pull_lock: Mutex::new(()),
            services: (!standalone)
                .then(|| crate::source::ServiceLister::start(client.clone(), cancel.clone())),
            node_allocatable_milli: node_allocatable_milli(&kubelet, &host)?,
            dns: dns_settings(&kubelet, &node_ips),
            cgroups: qos_cgroups(&kubelet, &host, &cgroup_layout).await?,
            cgroup_layout: cgroup_layout.clone(),
            memory_capacity_bytes: host.memory_bytes as i64,
            container_oom_group: crate::cm::container_oom_group(
                cgroups_rs::hierarchies::is_cgroup2_unified_mode(),
                kubelet.single_process_oom_kill,
            ),
            pressure: Some(pressure.clone()),
            clock: Arc::new(crate::time::SystemClock),
            tasks: tasks.clone(),
            node: node_rx,
            allocation: crate::allocation::AllocationManager::load(Some(&flags.root_dir)),
            exits: crate::pleg::RecordedExits::default(),
            synced: crate::pleg::SyncedStates::default(),
            runtime_classes: if standalone {
                crate::runtimeclass::RuntimeClassManager::standalone()
            } else {
                crate::runtimeclass::RuntimeClassManager::new(client.clone())
            },
            // k/k MakeUserNsManager: ranges that cannot work stop the kubelet at start-up
            userns: crate::userns::UserNamespaceManager::from_config(
                &flags.root_dir,
                kubelet.user_namespaces.ids_per_pod,
                kubelet.max_pods,
            )
            .with_step(|| "setting up user namespaces for pods".to_string())?,
        });
        {
            // the status manager's writer task (k/k status_manager.go Start)
            let status = ctx.status.clone();
            let c = cancel.clone();
            tasks.spawn("status manager", async move { status.run(c).await });
        }
        let mirror_uids = ctx.status.mirror_uids();
        // The pod manager: every pod the merged sources delivered, for the kubelet server's
        // lookups and the pod workers' orphan sweep.
        let pod_manager = crate::pod::manager::PodManager::default();
        let status_manager = ctx.status.clone();
        let (pod_tx, pod_rx) = mpsc::channel(256);
        let (pleg_tx, pleg_rx) = mpsc::channel(1024);
        let (synced_tx, mut synced_rx) = tokio::sync::oneshot::channel();
        {
            // Pod sources: the API server, and the static pod directory when configured; merged
            // (mirror pods, start-up sync) before the pod workers.
            let api_rx = if standalone {
                None
            } else {
                let (api_tx, api_rx) = mpsc::channel(256);
                let c = cancel.clone();
                let client2 = client.clone();
                let name = node_name.clone();
                tasks.spawn("pod source (API server)", async move {
                    crate::source::run(client2, name, api_tx, c).await
                });
                Some(api_rx)
            };
            let static_rx = if kubelet.static_pod_path.is_empty() {
                None
            } else {
                let (static_tx, static_rx) = mpsc::channel(16);
                let dir = std::path::PathBuf::from(&kubelet.static_pod_path);
                tracing::info!(dir = %dir.display(), "watching the static pod directory");
                let rec = recorder.clone();
                let name = node_name.clone();
                let name2 = node_name.clone();
                let c = cancel.clone();
                let period = kubelet.file_check_frequency;
                tasks.spawn("pod source (static pod files)", async move {
                    crate::source::file::run(
                        dir,
                        name,
                        period,
                        static_tx,
                        move |msg| {
                            rec.node(
                                &name2,
                                true,
                                crate::source::file::REASON_FAILED_STATIC_POD,
                                msg,
                            )
                        },
                        c,
                    )
                    .await
                });
                Some(static_rx)
            };
            let mirror = (!standalone).then(|| crate::source::mux::MirrorContext {
                client: client.clone(),
                node_name: node_name.clone(),
                node: mirror_node,
                uids: mirror_uids,
            });
            let c = cancel.clone();
            let pm = pod_manager.clone();
            tasks.spawn("pod source merge", async move {
                crate::source::mux::run(api_rx, static_rx, pod_tx, mirror, pm, synced_tx, c).await
            });
        }
        {
            let pleg = Pleg::new(
                cri.clone(),
                flags.containerd_socket(&kubelet.container_runtime_endpoint),
                flags.pleg_relist_period,
                pleg_tx,
            )
            .with_tasks(tasks.clone())
            .with_exits(ctx.exits.clone())
            .with_synced_states(ctx.synced.clone())
            .with_pod_logs_dir(&kubelet.pod_logs_dir)
            .with_event_source(flags.pleg_event_source, &version.runtime_name);
            let c = cancel.clone();
            tasks.spawn("pleg", async move { pleg.run(c).await });
        }
        let workers = PodWorkers::new(ctx).with_pod_manager(pod_manager.clone());
        let monitor = workers.monitor();
        // Garbage collection (k/k kubelet.go StartGarbageCollection): dead containers every minute,
        // unused images every 5 minutes. The collectors are cheap to clone (the eviction manager's
        // disk reclaim calls delete_all_unused_containers / delete_unused_images on clones).
        let (container_gc, image_gc) = {
            use crate::gc::{
                ContainerGc, CriGcRuntime, EventSink, GcRuntime, ImageGcManager, NodeEvents,
            };
            let runtime: Arc<dyn GcRuntime> = Arc::new(CriGcRuntime::new(
                cri.clone(),
                Path::new(&kubelet.pod_logs_dir),
            ));
            let events: Arc<dyn EventSink> = Arc::new(NodeEvents {
                recorder: recorder.clone(),
                node_name: node_name.clone(),
            });
            let container_gc = ContainerGc::new(
                runtime.clone(),
                Arc::new(workers.pod_states()),
                events.clone(),
                flags.container_gc_policy(),
                std::path::PathBuf::from(&kubelet.pod_logs_dir),
            );
            let image_policy = kubelet.image_gc_policy().map_err(StartError::msg)?;
            let image_gc = ImageGcManager::new(
                runtime,
                events,
                Arc::new(crate::time::SystemClock),
                image_policy,
            )
            .map_err(StartError::msg)
            .step("image garbage collection policy")?;
            (container_gc, image_gc)
        };
        eviction.set_reclaim(Box::new(crate::eviction::GcReclaim {
            containers: container_gc.clone(),
            images: image_gc.clone(),
        }));
        {
            let c = cancel.clone();
            let gc = container_gc.clone();
            tasks.spawn("container gc", async move {
                gc.run(crate::gc::CONTAINER_GC_PERIOD, c).await
            });
            let c = cancel.clone();
            let gc = image_gc.clone();
            let period = flags.image_gc_period;
            tasks.spawn("image gc", async move { gc.run(period, c).await });
        }
        {
            let c = cancel.clone();
            tasks.spawn("pod workers dispatcher", async move {
                workers.run(pod_rx, pleg_rx, evict_rx, c).await
            });
        }
        {
            let c = cancel.clone();
            tasks.spawn("eviction manager", async move { eviction.run(c).await });
        }
        if kubelet.healthz_port > 0 {
            let addr = std::net::SocketAddr::new(
                kubelet.healthz_bind_address,
                u16::try_from(kubelet.healthz_port).step("--healthz-port")?,
            );
            let listener = crate::server::healthz::bind(addr)
                .await
                .with_step(|| format!("binding the healthz endpoint {addr}"))?;
            tracing::info!(%addr, "healthz endpoint listening");
            let c = cancel.clone();
            let monitor = monitor.clone();
            tasks.spawn("healthz server", async move {
                crate::server::healthz::run(listener, monitor, c).await
            });
        }
        if standalone {
            // Its authentication and authorization ask the API server (TokenReview,
            // SubjectAccessReview): not served without one.
            tracing::info!("standalone mode: the kubelet HTTPS server (logs, exec, stats) is not started; healthz still answers");
            for n in startup.reach(Milestone::ServerListening) {
                notifier.notify(&n);
            }
        }
        if !standalone {
            // The kubelet HTTPS server (logs, exec, attach, port-forward, stats, metrics): its own
            // tasks, no shared state with the pod workers.
            let server_cfg = crate::server::ServerConfig {
                address: kubelet.address,
                port: u16::try_from(kubelet.port).step("--port")?,
                tls_cert_file: kubelet.tls_cert_file.clone(),
                tls_private_key_file: kubelet.tls_private_key_file.clone(),
                cert_dir: cert_dir.clone(),
                client_ca_file: kubelet.authentication.x509.client_ca_file.clone(),
                anonymous_auth: kubelet.authentication.anonymous.enabled,
                token_webhook: kubelet.authentication.webhook.enabled,
                authorization_mode: kubelet.authorization.mode,
                node_name: node_name.clone(),
                node_ips: node_ip_strings.clone(),
                root_dir: flags.root_dir.clone(),
                serving,
                pod_cgroups: kubelet.cgroups_per_qos.then(|| cgroup_layout.clone()),
            };
            let lookup = crate::server::pods::PodLookup {
                pods: pod_manager.clone(),
                status: status_manager.clone(),
            };
            let server =
                crate::server::KubeletServer::bind(server_cfg, client.clone(), cri.clone(), lookup)
                    .await
                    .step("starting the kubelet server")?;
            let c = cancel.clone();
            tasks.spawn("kubelet server", async move { server.run(c).await });
            for n in startup.reach(Milestone::ServerListening) {
                notifier.notify(&n);
            }
        }
        {
            // container log rotation (CRI only; standalone too)
            let policy = crate::server::logrotate::Policy {
                max_size: crate::server::logrotate::parse_max_size(&kubelet.container_log_max_size)
                    .map_err(StartError::msg)
                    .step("--container-log-max-size")?,
                max_files: kubelet.container_log_max_files,
            };
            let c = cancel.clone();
            let cri = cri.clone();
            tasks.spawn("container log rotation", async move {
                crate::server::logrotate::run(cri, policy, c).await
            });
        }

        // The main loop: readiness once the pod sources are synced, watchdog pings while the pod
        // sync loop beats, until SIGTERM/SIGINT.
        let watchdog = crate::systemd::watchdog_interval();
        if let Some(w) = watchdog {
            tracing::info!(
                interval_ms = w.as_millis() as u64,
                "systemd watchdog enabled"
            );
        }
        let mut watchdog_tick =
            tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
        let shutdown = stop.cancelled();
        tokio::pin!(shutdown);
        let mut synced_pending = true;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                r = &mut registered_rx, if registered_pending => {
                    registered_pending = false;
                    if r.is_ok() {
                        for n in startup.reach(Milestone::NodeRegistered) {
                            notifier.notify(&n);
                        }
                    }
                }
                r = &mut synced_rx, if synced_pending => {
                    synced_pending = false;
                    if r.is_ok() {
                        tracing::info!("pod sources synced");
                        for n in startup.reach(Milestone::PodSourcesSynced) {
                            notifier.notify(&n);
                        }
                    }
                }
                _ = watchdog_tick.tick(), if watchdog.is_some() => {
                    let w = watchdog.unwrap_or_default();
                    if monitor.healthy(w.max(crate::systemd::SyncLoopMonitor::BEAT * 3)) {
                        notifier.notify(&Notice::Watchdog);
                    } else {
                        tracing::error!(since_ms = monitor.age().as_millis() as u64, "pod sync loop is stuck; not feeding the systemd watchdog");
                    }
                }
            }
        }
        notifier.notify(&Notice::Stopping);
        tracing::info!("shutting down; pods keep running");
        cancel.cancel();
        let left = tasks.shutdown(SHUTDOWN_DEADLINE).await;
        if !left.is_empty() {
            tracing::warn!(tasks = ?left, "tasks still running at shutdown");
        }
        Ok(())
    }
}

async fn kube_client(flags: &Flags) -> Result<kube::Client> {
    let config = crate::config::kubeconfig::client_config(flags.kubeconfig.as_deref())
        .await
        .step("loading the kubeconfig")?;
    kube::Client::try_from(config).step("building the API client")
}

/// Does the kubeconfig's user take its client certificate from `pem` (the file TLS bootstrap
/// names)?
fn kubeconfig_names(kubeconfig: &Path, pem: &Path) -> bool {
    crate::config::kubeconfig::read(kubeconfig)
        .ok()
        .map(|kc| {
            kc.auth_infos.iter().any(|a| {
                a.auth_info
                    .as_ref()
                    .and_then(|i| i.client_certificate.as_deref())
                    == Some(&*pem.to_string_lossy())
            })
        })
        .unwrap_or(false)
}

/// The node's allocatable resources in milli-units, for `resourceFieldRef` limits defaults.
fn node_allocatable_milli(
    kubelet: &KubeletConfiguration,
    host: &HostInfo,
) -> Result<std::collections::BTreeMap<String, i128>> {
    let reserved = kubelet.reserved_milli().map_err(StartError::msg)?;
    let thresholds = kubelet.eviction_thresholds().step("--eviction-hard")?;
    let (_, alloc) = crate::node::status::capacity_and_allocatable(
        host,
        kubelet.max_pods,
        &reserved,
        &thresholds,
    );
    Ok(alloc
        .into_iter()
        .filter_map(|(k, q)| crate::quantity::parse_milli(&q.0).ok().map(|v| (k, v)))
        .collect())
}

/// The cgroup driver pods are run with (k/k `cmd/kubelet/app/server.go`
/// getCgroupDriverFromCRI, decided by [`crate::cm::choose_cgroup_driver`]): the runtime's
/// answer to `RuntimeConfig` when it gives one (containerd 2.x), which wins over `cgroupDriver`,
/// else `cgroupDriver`. Other errors of the call are retried as Go does (3 calls, 2 s apart),
/// then fail the start. containerd 1.6 has no `RuntimeConfig`, so there its runc
/// `SystemdCgroup` option is read from the verbose `Status` instead and a disagreement is
/// warned about: pod sandboxes fail to start when the two differ.
async fn cgroup_driver(
    kubelet: &KubeletConfiguration,
    cri: &CriClient,
) -> Result<crate::cm::CgroupDriver> {
    use crate::cm::{
        choose_cgroup_driver, runtime_cgroup_driver, CgroupDriver, CgroupDriverSource,
    };
    let Some(configured) = CgroupDriver::parse(&kubelet.cgroup_driver) else {
        return Err(StartError::msg(format!(
            "cgroup driver {:?}: must be cgroupfs or systemd",
            kubelet.cgroup_driver
        )));
    };
    const ATTEMPTS: u32 = 3;
    let mut attempt = 0;
    let answer = loop {
        attempt += 1;
        match cri.runtime_config().await {
            Ok(a) => break a,
            Err(e) if attempt < ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "RuntimeConfig failed; retrying in 2 s");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => {
                return Err(StartError::msg(format!(
                    "asking the container runtime for its cgroup driver (RuntimeConfig, {ATTEMPTS} attempts): {e}"
                )))
            }
        }
    };
    let (driver, source) = choose_cgroup_driver(configured, answer)
        .map_err(|e| StartError::msg(format!("RuntimeConfig: {e}")))?;
    match source {
        CgroupDriverSource::Runtime => {
            if driver == configured {
                tracing::info!(cgroup_driver = %driver, "Using cgroup driver setting received from the CRI runtime");
            } else {
                tracing::info!(cgroup_driver = %driver, configured = %configured,
                    "Using cgroup driver setting received from the CRI runtime (it overrides cgroupDriver {configured})");
            }
            return Ok(driver);
        }
        CgroupDriverSource::ConfigRuntimeConfigUnimplemented => tracing::info!(
            "CRI implementation should be updated to support RuntimeConfig. Falling back to using cgroupDriver from kubelet config."
        ),
        CgroupDriverSource::ConfigNoLinuxSection => tracing::info!(
            cgroup_driver = %configured,
            "RuntimeConfig has no linux section; using cgroupDriver from kubelet config"
        ),
    }
    let runtime = match cri.status_info().await {
        Ok((_, info)) => info.get("config").and_then(|c| runtime_cgroup_driver(c)),
        Err(e) => {
            tracing::warn!(error = %e, "verbose runtime Status failed; cannot check the runtime's cgroup driver");
            None
        }
    };
    match runtime {
        Some(r) if r != configured => tracing::warn!(
            cgroup_driver = %configured,
            runtime_cgroup_driver = %r,
            "cgroupDriver is {configured} but containerd's runc runs with SystemdCgroup = {}: pod sandboxes will fail to start. Set SystemdCgroup = {} under [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options] in containerd's config.toml and restart containerd, or set cgroupDriver: {r}",
            r == CgroupDriver::Systemd,
            configured == CgroupDriver::Systemd,
        ),
        Some(_) => {
            tracing::info!(cgroup_driver = %configured, "the container runtime uses the same cgroup driver")
        }
        None => {
            tracing::info!(cgroup_driver = %configured, "could not tell the container runtime's cgroup driver; make sure it is the same")
        }
    }
    Ok(configured)
}

/// With `--cgroups-per-qos` (the default), makes the kubepods hierarchy as the Go kubelet's
/// container manager does at start-up: `cgroupRoot` checked to exist, then `kubepods` under it
/// limited to capacity − reserved (node allocatable enforcement for pods), `kubepods/burstable`,
/// `kubepods/besteffort`, named for the driver; under the systemd driver on a systemd host, as
/// slice units through systemd's D-Bus API ([`crate::cm::CgroupManager`] says how).
async fn qos_cgroups(
    kubelet: &KubeletConfiguration,
    host: &HostInfo,
    layout: &crate::cm::CgroupLayout,
) -> Result<Option<crate::cm::CgroupManager>> {
    if !kubelet.cgroups_per_qos {
        return Ok(None);
    }
    let driver = layout.driver;
    let systemd = if driver == crate::cm::CgroupDriver::Systemd {
        match crate::cm::systemd::SystemdSlices::connect().await {
            Ok(s) => s.map(Arc::new),
            Err(e) => {
                // the Go kubelet fails here (libcontainer cannot reach systemd); the files
                // still work, as on a host without systemd
                tracing::warn!(error = %e, "systemd's D-Bus API does not answer; writing the pod slices' cgroup files without it");
                None
            }
        }
    } else {
        None
    };
    let reserved = kubelet.reserved_milli().map_err(StartError::msg)?;
    let cpu = (host.num_cores as i128 * 1000 - reserved.get("cpu").copied().unwrap_or(0)).max(0);
    let mem = host.memory_bytes as i128 - reserved.get("memory").copied().unwrap_or(0) / 1000;
    let cm = crate::cm::CgroupManager::new(layout.clone())
        .with_pod_pids_limit(kubelet.pod_pids_limit)
        .with_systemd(systemd);
    tracing::info!(cgroup_driver = %driver, cgroup_root = %layout.root.to_cgroupfs(), systemd_dbus = cm.uses_systemd_dbus(), "creating the kubepods cgroups");
    let made = cm.clone();
    tokio::task::spawn_blocking(move || {
        made.validate_root()?;
        made.ensure_qos_cgroups(cpu as i64, Some(mem.max(0) as i64))
    })
    .await
    .map_err(|e| StartError::msg(e.to_string()))?
    .with_step(|| format!("creating the kubepods cgroups ({driver} driver)"))?;
    Ok(Some(cm))
}

/// DNS settings for pod sandboxes from `--cluster-dns`, `--cluster-domain`, `--resolv-conf`.
fn dns_settings(
    kubelet: &KubeletConfiguration,
    node_ips: &[std::net::IpAddr],
) -> crate::pod::dns::DnsSettings {
    let host = (!kubelet.resolv_conf.is_empty()).then(|| {
        match std::fs::read_to_string(&kubelet.resolv_conf) {
            Ok(text) => crate::pod::dns::parse_resolv_conf(&text),
            Err(e) => {
                tracing::warn!(path = %kubelet.resolv_conf, error = %e, "reading the node's resolv.conf failed; pods with dnsPolicy Default get no nameserver");
                Default::default()
            }
        }
    });
    crate::pod::dns::DnsSettings {
        cluster_dns: kubelet.cluster_dns.clone(),
        cluster_domain: kubelet.cluster_domain.clone(),
        host,
        node_ips: node_ips.to_vec(),
    }
}
