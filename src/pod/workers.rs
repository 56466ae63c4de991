//! Pod workers: one task per pod UID that owns that pod's lifecycle on this node (k/k
//! `pkg/kubelet/pod_workers.go`). A worker is fed the latest pod object through a `watch`
//! channel (latest wins), woken by PLEG when the runtime changes, and syncs: read the runtime
//! state, decide ([`super::actions`]), act through CRI, write the status. When the pod is
//! deleted it terminates the containers with the grace period, reports a terminal phase,
//! completes the deletion in the API server, and removes the sandbox.
//!
//! [`PodWorkers`] is the dispatcher: it owns the map of workers, routes pod updates and PLEG
//! events to them, and cleans up pods that vanished while deckhand was down.

use super::actions::{compute_pod_actions, PodActions, Waiting};
use super::runtime::PodRuntimeStatus;
use super::spec;
use crate::backoff::Backoff;
use crate::cri::{labels, CriClient};
use crate::events::{reason, EventRecorder};
use crate::image::{self, PullDecision, PullPolicy};
use crate::prober::{PodProbes, ProbeEnv, ProbeUpdate};
use crate::source::PodEvent;
use crate::status::{generate_pod_status, StatusInputs, StatusManager};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Mutex, Notify};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How often a worker syncs its pod without any trigger (the Go kubelet's resync is ~1 min;
/// deckhand relies on PLEG events and re-checks every 10 s as a safety net).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(10);
/// Delay before retrying a sync that failed (Go kubelet `workerBackOffPeriod`, 10 s).
pub const WORKER_BACKOFF_PERIOD: Duration = Duration::from_secs(10);
/// Minimum grace period for stopping a container (Go kubelet `minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;
/// How often a running pod's configMap, secret, downwardAPI and projected volumes are refreshed
/// (the Go kubelet: within its 1 min sync period plus the object cache's delay).
pub const VOLUME_REFRESH_PERIOD: Duration = Duration::from_secs(30);

/// Fetches what container `c`'s environment refers to: its configMaps and secrets (NotFound
/// recorded as absent) and the service variables (k/k `makeEnvironmentVariables`).
///
/// Errors, as the message the container's `CreateContainerConfigError` shows: services not read
/// yet, or an API error other than NotFound.
async fn env_sources(
    ctx: &SyncContext,
    pod: &Pod,
    c: &k8s_openapi::api::core::v1::Container,
) -> Result<super::envvars::EnvSources, String> {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut src = super::envvars::EnvSources {
        node_allocatable_milli: ctx.node_allocatable_milli.clone(),
        ..Default::default()
    };
    if let Some(lister) = &ctx.services {
        if !lister.has_synced() {
            return Err(
                "services have not yet been read at least once, cannot construct envvars".into(),
            );
        }
        let enable = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        let all = lister.list();
        src.services = super::envvars::service_env(all.iter().map(|s| s.as_ref()), &ns, enable);
    }
    let (cms, secrets) = super::envvars::referenced_objects(c);
    let is_not_found = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    for name in cms {
        match cm_api.get(&name).await {
            Ok(cm) => {
                src.config_maps
                    .insert(name, Some(cm.data.unwrap_or_default()));
            }
            Err(e) if is_not_found(&e) => {
                src.config_maps.insert(name, None);
            }
            Err(e) => return Err(format!("couldn't get configMap {ns}/{name}: {e}")),
        }
    }
    let secret_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    for name in secrets {
        match secret_api.get(&name).await {
            Ok(s) => {
                let data = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                src.secrets.insert(name, Some(data));
            }
            Err(e) if is_not_found(&e) => {
                src.secrets.insert(name, None);
            }
            Err(e) => return Err(format!("couldn't get secret {ns}/{name}: {e}")),
        }
    }
    Ok(src)
}

/// Records the `Failed` event (`Error: <msg>`) of a container whose config could not be made and
/// returns its waiting state, `CreateContainerConfigError` with `msg` (k/k `startContainer`).
fn config_error(ctx: &SyncContext, pod: &Pod, name: &str, msg: String) -> Waiting {
    ctx.recorder.pod(
        pod,
        Some(name),
        true,
        reason::FAILED,
        format!("Error: {msg}"),
    );
    Waiting {
        reason: "CreateContainerConfigError".into(),
        message: msg,
    }
}

/// Everything a pod worker needs, shared by all workers.
pub struct SyncContext {
    /// API client.
    pub client: kube::Client,
    /// CRI client.
    pub cri: CriClient,
    /// The status writer.
    pub status: StatusManager,
    /// Events.
    pub recorder: EventRecorder,
    /// This node's name.
    pub node_name: String,
    /// This node's IPs (hostIP).
    pub node_ips: Vec<String>,
    /// Root dir (pod directories, volumes).
    pub root_dir: PathBuf,
    /// Pod logs dir (`/var/log/pods`).
    pub pod_logs_dir: String,
    /// Runtime name for container IDs (`containerd`).
    pub runtime_name: String,
    /// Image pulls are serialized, as the Go kubelet's default `serializeImagePulls: true`.
    pub pull_lock: Mutex<()>,
    /// All services, for service environment variables (None: no API server, no service
    /// variables, as the Go kubelet without a service lister).
    pub services: Option<crate::source::ServiceLister>,
    /// The node's allocatable resources in milli-units (`resourceFieldRef` limits default).
    pub node_allocatable_milli: BTreeMap<String, i128>,
    /// DNS settings for pod sandboxes (clusterDNS, clusterDomain, the node's resolv.conf).
    pub dns: crate::pod::dns::DnsSettings,
    /// Pod-level cgroups (`cgroupsPerQOS`); None leaves them to the runtime.
    pub cgroups: Option<crate::cm::CgroupManager>,
    /// The cgroup driver the sandboxes' cgroup parents are named for (`cgroupDriver`).
    pub cgroup_driver: crate::cm::CgroupDriver,
    /// The node's memory capacity in bytes (oom_score_adj of Burstable containers).
    pub memory_capacity_bytes: i64,
    /// Node pressure from the eviction manager, for admitting new pods (None: no eviction
    /// manager, every pod admitted).
    pub pressure: Option<crate::eviction::PressureHandle>,
}

/// What a worker is told about its pod.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    /// The latest pod object seen.
    pub pod: Pod,
    /// The object is gone from the API server (deleted, force-deleted, or vanished while
    /// deckhand was down): kill and clean up without writing status.
    pub removed: bool,
    /// The kubelet stops the pod on its own (eviction): kill it and report this status; the
    /// pod stays (Failed) until it is deleted. Sticky, like `removed`.
    pub evict: Option<Arc<crate::eviction::TerminalStatus>>,
}

struct WorkerHandle {
    tx: watch::Sender<PodUpdate>,
    notify: Arc<Notify>,
}

/// The dispatcher of pod updates and runtime events to pod workers.
pub struct PodWorkers {
    ctx: Arc<SyncContext>,
    workers: HashMap<String, WorkerHandle>,
    done_tx: mpsc::UnboundedSender<String>,
    done_rx: mpsc::UnboundedReceiver<String>,
    /// Workers report here when they have stopped a pod the eviction manager evicts.
    evicted_tx: mpsc::UnboundedSender<String>,
    evicted_rx: mpsc::UnboundedReceiver<String>,
    eviction_waiters: Vec<(String, tokio::sync::oneshot::Sender<bool>)>,
    monitor: crate::systemd::SyncLoopMonitor,
    states: super::states::PodStates,
}

fn span_for(pod: &Pod) -> tracing::Span {
    tracing::info_span!(
        "pod",
        pod.namespace = pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.name = pod.metadata.name.as_deref().unwrap_or(""),
        pod.uid = super::uid(pod)
    )
}

impl PodWorkers {
    /// A dispatcher over `ctx`.
    pub fn new(ctx: Arc<SyncContext>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (evicted_tx, evicted_rx) = mpsc::unbounded_channel();
        Self {
            ctx,
            workers: HashMap::new(),
            done_tx,
            done_rx,
            evicted_tx,
            evicted_rx,
            eviction_waiters: Vec::new(),
            monitor: crate::systemd::SyncLoopMonitor::new(),
            states: super::states::PodStates::default(),
        }
    }

    /// Each pod UID's stage in its worker, for the garbage collectors ([`crate::gc`]).
    pub fn pod_states(&self) -> super::states::PodStates {
        self.states.clone()
    }

    /// The heartbeat of this dispatcher's loop (for the systemd watchdog and `/healthz`).
    pub fn monitor(&self) -> crate::systemd::SyncLoopMonitor {
        self.monitor.clone()
    }

    fn update(&mut self, pod: Pod, removed: bool, cancel: &CancellationToken) {
        let uid = super::uid(&pod).to_string();
        if uid.is_empty() {
            return;
        }
        if let Some(h) = self.workers.get(&uid) {
            // A removed pod stays removed even if a stale update arrives later.
            let (was_removed, evict) = {
                let b = h.tx.borrow();
                (b.removed, b.evict.clone())
            };
            self.states
                .set(&uid, worker_state(&pod, removed || was_removed));
            let _ = h.tx.send(PodUpdate {
                pod,
                removed: removed || was_removed,
                evict,
            });
            return;
        }
        self.states.set(&uid, worker_state(&pod, removed));
        let (tx, rx) = watch::channel(PodUpdate {
            pod: pod.clone(),
            removed,
            evict: None,
        });
        let notify = Arc::new(Notify::new());
        let (probe_tx, probe_rx) = mpsc::channel(64);
        let worker = PodWorker {
            ctx: self.ctx.clone(),
            rx,
            notify: notify.clone(),
            crash_backoff: Backoff::default(),
            image_backoff: Backoff::default(),
            waiting: BTreeMap::new(),
            probes: PodProbes::new(probe_tx),
            volumes_refreshed: None,
            probe_rx,
            terminal_override: None,
            admitted: false,
            finished: false,
            evicted_tx: self.evicted_tx.clone(),
        };
        let done = self.done_tx.clone();
        let span = span_for(&pod);
        let cancel = cancel.child_token();
        let uid2 = uid.clone();
        tokio::spawn(
            async move {
                worker.run(cancel).await;
                let _ = done.send(uid2);
            }
            .instrument(span),
        );
        self.workers.insert(uid, WorkerHandle { tx, notify });
    }

    /// The pods the eviction manager may evict: not removed, not being deleted, not already
    /// stopped by the kubelet, not in a terminal phase (`activePods`).
    fn active_pods(&self) -> Vec<Pod> {
        self.workers
            .values()
            .filter_map(|h| {
                let u = h.tx.borrow();
                let phase = u.pod.status.as_ref().and_then(|s| s.phase.as_deref());
                (!deleting(&u)
                    && u.evict.is_none()
                    && !matches!(phase, Some("Succeeded") | Some("Failed")))
                .then(|| u.pod.clone())
            })
            .collect()
    }

    fn command(&mut self, cmd: crate::eviction::PodWorkerCommand) {
        use crate::eviction::PodWorkerCommand;
        match cmd {
            PodWorkerCommand::ActivePods(tx) => {
                let _ = tx.send(self.active_pods());
            }
            PodWorkerCommand::Evict { uid, status, done } => {
                let Some(h) = self.workers.get(&uid) else {
                    let _ = done.send(false);
                    return;
                };
                let mut u = h.tx.borrow().clone();
                u.evict = Some(Arc::new(status));
                let _ = h.tx.send(u);
                let notify = h.notify.clone();
                self.eviction_waiters.push((uid, done));
                notify.notify_one();
            }
        }
    }

    /// Runs until `cancel`: routes pod events from the source, pod UIDs from PLEG, and the
    /// eviction manager's commands.
    pub async fn run(
        mut self,
        mut pods: mpsc::Receiver<PodEvent>,
        mut pleg: mpsc::Receiver<String>,
        mut commands: mpsc::Receiver<crate::eviction::PodWorkerCommand>,
        cancel: CancellationToken,
    ) {
        let mut housekeeping = tokio::time::interval(crate::systemd::SyncLoopMonitor::BEAT);
        loop {
            self.monitor.beat();
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = housekeeping.tick() => {}
                cmd = commands.recv(), if !commands.is_closed() => {
                    if let Some(cmd) = cmd { self.command(cmd); }
                }
                uid = self.evicted_rx.recv() => {
                    if let Some(uid) = uid {
                        let (done, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.eviction_waiters).into_iter().partition(|(u, _)| *u == uid);
                        self.eviction_waiters = keep;
                        for (_, tx) in done { let _ = tx.send(true); }
                    }
                }
                ev = pods.recv() => match ev {
                    None => return,
                    Some(PodEvent::Apply(pod)) => {
                        let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.ctx.node_name.as_str());
                        self.update(pod, !on_node, &cancel);
                    }
                    Some(PodEvent::Delete(pod)) => self.update(pod, true, &cancel),
                    Some(PodEvent::Synced(present)) => self.reconcile(present, &cancel).await,
                },
                uid = pleg.recv() => {
                    if let Some(uid) = uid {
                        if let Some(h) = self.workers.get(&uid) {
                            h.notify.notify_one();
                        }
                    }
                }
                uid = self.done_rx.recv() => {
                    if let Some(uid) = uid {
                        // Keep a worker whose pod came back under the same UID (cannot happen
                        // in the API), else forget it.
                        if self.workers.get(&uid).is_some_and(|h| h.tx.borrow().removed) {
                            self.workers.remove(&uid);
                            self.states.remove(&uid);
                        }
                    }
                }
            }
        }
    }

    /// After a full list: pods with workers that are no longer listed were deleted while the
    /// watch was down; sandboxes in the runtime with no pod are orphans (deleted while deckhand
    /// was down). Both are killed and removed.
    async fn reconcile(&mut self, present: HashSet<String>, cancel: &CancellationToken) {
        let gone: Vec<String> = self
            .workers
            .keys()
            .filter(|u| !present.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            let pod = self.workers[&uid].tx.borrow().pod.clone();
            self.update(pod, true, cancel);
        }
        match self.ctx.cri.list_pod_sandboxes(&[]).await {
            Ok(sandboxes) => {
                for s in sandboxes {
                    let Some(uid) = s.labels.get(labels::POD_UID).cloned() else {
                        continue;
                    };
                    if present.contains(&uid) || self.workers.contains_key(&uid) {
                        continue;
                    }
                    let mut pod = Pod::default();
                    pod.metadata.uid = Some(uid.clone());
                    pod.metadata.name = s.labels.get(labels::POD_NAME).cloned();
                    pod.metadata.namespace = s.labels.get(labels::POD_NAMESPACE).cloned();
                    tracing::info!(pod.uid = %uid, pod.name = ?pod.metadata.name, "cleaning up orphaned pod sandbox");
                    self.update(pod, true, cancel);
                }
            }
            Err(e) => tracing::warn!(error = %e, "listing sandboxes for orphan cleanup failed"),
        }
        self.states.mark_synced();
    }
}

/// A pod's stage for [`super::states::PodStates`]: deleted or removed pods are terminating,
/// pods in phase Succeeded or Failed are terminal, the rest run.
fn worker_state(pod: &Pod, removed: bool) -> super::states::WorkerState {
    use super::states::WorkerState;
    if removed || pod.metadata.deletion_timestamp.is_some() {
        return WorkerState::Terminating;
    }
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Succeeded" | "Failed") => WorkerState::Terminal,
        _ => WorkerState::Running,
    }
}

/// One pod's worker.
struct PodWorker {
    ctx: Arc<SyncContext>,
    rx: watch::Receiver<PodUpdate>,
    notify: Arc<Notify>,
    crash_backoff: Backoff,
    image_backoff: Backoff,
    /// Why containers are waiting after the last sync (the Go kubelet's reasonCache).
    waiting: BTreeMap<String, Waiting>,
    /// Probe tasks and results of this pod's running containers.
    probes: PodProbes,
    probe_rx: mpsc::Receiver<(String, ProbeUpdate)>,
    /// When the pod's volumes were last set up or refreshed.
    volumes_refreshed: Option<Instant>,
    /// The kubelet stopped the pod on its own (evicted, or refused at admission): every status
    /// written from then on carries this.
    terminal_override: Option<Arc<crate::eviction::TerminalStatus>>,
    /// Admission was decided (the first sync).
    admitted: bool,
    /// The pod finished on this node (no container will run again, or the API says Succeeded or
    /// Failed): the worker no longer syncs it, so it never gets another sandbox; it waits for
    /// the deletion (k/k pod worker: terminated pods are not synced again).
    finished: bool,
    /// Where to report a finished eviction.
    evicted_tx: mpsc::UnboundedSender<String>,
}

/// A failure of one sync, already reported on the pod.
#[derive(Debug)]
struct SyncFailed;

/// The API copy of the pod is in phase Succeeded or Failed.
fn phase_is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn deleting(u: &PodUpdate) -> bool {
    u.removed || u.pod.metadata.deletion_timestamp.is_some()
}

impl PodWorker {
    async fn run(mut self, cancel: CancellationToken) {
        let mut next_wake: Option<Instant> = None;
        loop {
            let update = self.rx.borrow_and_update().clone();
            if deleting(&update) {
                self.terminate(update, &cancel).await;
                return;
            }
            if !self.admitted {
                self.admitted = true;
                if let Some(status) = self.admission(&update.pod).await {
                    self.terminal_override = Some(Arc::new(status));
                    self.write_status(&update.pod, true).await;
                }
            }
            if let Some(ev) = update.evict.clone() {
                if self.terminal_override.is_none() {
                    self.evict(&update.pod, ev).await;
                }
            }
            if self.terminal_override.is_some() {
                // Stopped by the kubelet: nothing runs again; wait for the deletion.
                // The status is re-written now and then in case a write failed (the status
                // manager skips unchanged ones).
                let _ = self.evicted_tx.send(super::uid(&update.pod).to_string());
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = self.rx.changed() => { if r.is_err() { return; } }
                    _ = tokio::time::sleep(RESYNC_PERIOD) => {
                        let latest = self.rx.borrow().pod.clone();
                        self.write_status(&latest, true).await;
                    }
                }
                continue;
            }
            if self.finished || phase_is_terminal(&update.pod) {
                if !self.finished {
                    // The API copy says the pod finished (e.g. before deckhand restarted):
                    // nothing runs again; stop whatever is left (k/k UpdatePod of a pod whose
                    // status and runtime are terminal goes straight to terminated).
                    self.finish(&update.pod).await;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = self.rx.changed() => { if r.is_err() { return; } }
                    _ = tokio::time::sleep(RESYNC_PERIOD) => {
                        let latest = self.rx.borrow().pod.clone();
                        self.write_status(&latest, true).await;
                    }
                }
                continue;
            }
            // Sync; abandon it if the pod is deleted meanwhile (e.g. during a long pull).
            let outcome = {
                let mut rx = self.rx.clone();
                let pod = update.pod.clone();
                let sync = self.sync(&pod);
                tokio::pin!(sync);
                loop {
                    tokio::select! {
                        r = &mut sync => break Some(r),
                        _ = cancel.cancelled() => return,
                        changed = rx.changed() => {
                            if changed.is_err() { return; }
                            if deleting(&rx.borrow()) { break None; }
                        }
                    }
                }
            };
            next_wake = match outcome {
                None => continue,
                Some(Ok(next)) => next.map(|t| {
                    let d = t.as_nanosecond() - Timestamp::now().as_nanosecond();
                    Instant::now() + Duration::from_nanos(d.max(0) as u64)
                }),
                Some(Err(SyncFailed)) => Some(Instant::now() + WORKER_BACKOFF_PERIOD),
            }
            .or(next_wake.filter(|w| *w > Instant::now()));
            let wake = next_wake
                .unwrap_or_else(|| Instant::now() + RESYNC_PERIOD)
                .min(Instant::now() + RESYNC_PERIOD);
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.rx.changed() => { if r.is_err() { return; } }
                _ = self.notify.notified() => {}
                u = self.probe_rx.recv() => {
                    if let Some((cid, u)) = u {
                        self.probes.apply(&cid, u);
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => { next_wake = None; }
            }
        }
    }

    /// One sync of a live pod. Returns when the worker should sync again at the latest
    /// (the end of a back-off).
    async fn sync(&mut self, pod: &Pod) -> Result<Option<Timestamp>, SyncFailed> {
        let ctx = self.ctx.clone();
        let rt = match PodRuntimeStatus::observe(&ctx.cri, super::uid(pod)).await {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!(error = %e, "reading pod state from the runtime failed");
                return Err(SyncFailed);
            }
        };
        let now = Timestamp::now();
        let actions =
            compute_pod_actions(pod, &rt, &self.probes.results, &mut self.crash_backoff, now);
        self.crash_backoff.gc(now);
        let mut next = actions.next_sync;
        if actions.create_sandbox.is_some() || !actions.start.is_empty() {
            // The status as the worker takes up the work, before any sandbox, pull or start
            // (k/k SyncPod sets the status first): startTime, PodScheduled, Initialized or not,
            // containers waiting in ContainerCreating / PodInitializing.
            if let Some((base, status)) = self.status_to_write(pod, &rt, false) {
                self.ctx.status.queue(&base, &status);
            }
        }
        let result = self.execute(pod, &rt, &actions).await;
        if actions.pod_done {
            self.finished = true;
        }
        if let Some(t) = self.image_backoff_next() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        // Record crash back-off events for containers held back.
        for (name, w) in &actions.waiting {
            if w.reason == super::actions::REASON_CRASH_LOOP_BACK_OFF {
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::BACK_OFF,
                    format!(
                        "Back-off restarting failed container {} in pod {}",
                        name,
                        super::format_pod(pod)
                    ),
                );
            }
        }
        for (k, v) in &actions.waiting {
            self.waiting.insert(k.clone(), v.clone());
        }
        self.write_status(pod, actions.pod_done).await;
        result.map(|_| next)
    }

    /// When the earliest image-pull back-off of this pod ends, so the worker retries the pull
    /// then rather than at the next periodic sync.
    fn image_backoff_next(&self) -> Option<Timestamp> {
        let pulling = self
            .waiting
            .values()
            .any(|w| w.reason == "ImagePullBackOff" || w.reason == "ErrImagePull");
        if !pulling {
            return None;
        }
        self.image_backoff
            .earliest_end_since_update(Timestamp::now())
    }

    /// Hands the pod's current status to the status manager (which writes it in the background,
    /// newest first) and keeps the probe tasks in step with the running containers.
    async fn write_status(&mut self, pod: &Pod, terminal: bool) {
        if let Some((base, status)) = self.observe_status(pod, terminal).await {
            self.ctx.status.queue(&base, &status);
        }
    }

    /// Writes the pod's status now and waits for the API server (the terminal status that must
    /// land before the pod object is deleted).
    async fn write_status_now(&mut self, pod: &Pod, terminal: bool) {
        if let Some((base, status)) = self.observe_status(pod, terminal).await {
            if let Err(e) = self.ctx.status.set_pod_status(&base, &status).await {
                tracing::warn!(error = %e, "status update failed");
            }
        }
    }

    /// Reads the runtime and returns the status to write (see [`Self::status_to_write`]), after
    /// reconciling the probe tasks with the running containers.
    async fn observe_status(&mut self, pod: &Pod, terminal: bool) -> Option<(Pod, PodStatus)> {
        if self.terminal_override.as_ref().is_some_and(|o| o.rejected) {
            return self.status_to_write(pod, &PodRuntimeStatus::default(), terminal);
        }
        let rt = match PodRuntimeStatus::observe(&self.ctx.cri, super::uid(pod)).await {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!(error = %e, "reading pod state for status failed");
                return None;
            }
        };
        let out = self.status_to_write(pod, &rt, terminal);
        // Probe tasks follow the running container instances.
        if terminal || self.terminal_override.is_some() {
            self.probes.stop_all();
        } else {
            let pod_ip = rt
                .latest_sandbox()
                .and_then(|s| s.ip.clone())
                .unwrap_or_default();
            let running: Vec<(String, k8s_openapi::api::core::v1::Container, i64)> = rt
                .running()
                .filter_map(|c| {
                    spec::find_container(pod, &c.name)
                        .map(|sc| (c.id.clone(), sc.clone(), c.started_at))
                })
                .collect();
            let env = ProbeEnv {
                cri: self.ctx.cri.clone(),
                recorder: self.ctx.recorder.clone(),
            };
            self.probes.reconcile(pod, &pod_ip, &running, &env);
        }
        out
    }

    /// The status of `pod` for runtime state `rt`, and the pod object to write it on (the
    /// newest copy we have, so the status manager diffs against the newest API status).
    /// A pod refused at admission gets the minimal status the Go kubelet's rejectPod writes.
    fn status_to_write(
        &self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        terminal: bool,
    ) -> Option<(Pod, PodStatus)> {
        let latest = self.rx.borrow().pod.clone();
        let base = if super::uid(&latest) == super::uid(pod) {
            latest
        } else {
            pod.clone()
        };
        let now = crate::time::truncate(Timestamp::now());
        if let Some(o) = self.terminal_override.clone().filter(|o| o.rejected) {
            let status = o.rejected_status(&base, now);
            return Some((base, status));
        }
        let mut status = generate_pod_status(
            pod,
            &StatusInputs {
                runtime: rt,
                waiting: &self.waiting,
                runtime_name: &self.ctx.runtime_name,
                node_ips: &self.ctx.node_ips,
                terminal,
                now,
                probes: &self.probes.results,
            },
        );
        if let Some(o) = &self.terminal_override {
            o.apply(&mut status);
        }
        Some((base, status))
    }

    /// Stops what is left of a pod that finished and reports its terminal status; the worker
    /// syncs it no more.
    async fn finish(&mut self, pod: &Pod) {
        self.finished = true;
        match PodRuntimeStatus::observe(&self.ctx.cri, super::uid(pod)).await {
            Ok(rt) => {
                if rt.running().next().is_some() || rt.sandboxes.iter().any(|s| s.ready) {
                    tracing::info!("pod is finished; stopping what still runs");
                    self.kill_pod(pod, &rt, pod_grace_seconds(pod)).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the finished pod's runtime state failed"),
        }
        self.probes.stop_all();
        self.write_status(pod, true).await;
    }

    /// Carries out the actions. Failures are recorded on the pod (waiting reasons, events).
    async fn execute(
        &mut self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        a: &PodActions,
    ) -> Result<(), SyncFailed> {
        let ctx = self.ctx.clone();
        let grace = pod_grace_seconds(pod);
        if a.kill_pod {
            let anything_live =
                rt.running().next().is_some() || rt.sandboxes.iter().any(|s| s.ready);
            if anything_live {
                if a.create_sandbox.is_some() && !rt.sandboxes.is_empty() {
                    ctx.recorder.pod(
                        pod,
                        None,
                        false,
                        reason::SANDBOX_CHANGED,
                        "Pod sandbox changed, it will be killed and re-created.".into(),
                    );
                }
                self.kill_pod(pod, rt, grace).await;
            }
        }
        let pod_ip = rt
            .latest_sandbox()
            .and_then(|s| s.ip.clone())
            .unwrap_or_default();
        for k in &a.kill {
            // A probe may set its own grace period for the kill it causes.
            let probe_grace = spec::find_container(pod, &k.name).and_then(|c| {
                let p = if k.message.contains("liveness probe") {
                    c.liveness_probe.as_ref()
                } else if k.message.contains("startup probe") {
                    c.startup_probe.as_ref()
                } else {
                    None
                };
                p.and_then(|p| p.termination_grace_period_seconds)
            });
            kill_container(
                &ctx,
                pod,
                &k.id,
                &k.name,
                &k.message,
                probe_grace.unwrap_or(grace),
                &pod_ip,
            )
            .await;
        }
        if a.pod_done || (a.start.is_empty() && a.create_sandbox.is_none()) {
            if !a.pod_done && rt.latest_sandbox().is_some() {
                self.refresh_volumes(pod).await;
            }
            return Ok(());
        }

        // Volumes: set up before any container of the pod starts.
        let volumes = match crate::volume::setup(
            &ctx.client,
            &ctx.root_dir,
            pod,
            &ctx.node_allocatable_milli,
        )
        .await
        {
            Ok(v) => {
                self.volumes_refreshed = Some(Instant::now());
                v
            }
            Err(e) => {
                let msg = format!("MountVolume.SetUp failed: {e}");
                ctx.recorder.pod(pod, None, true, reason::FAILED_MOUNT, msg);
                tracing::warn!(error = %e, "volume setup failed");
                for s in &a.start {
                    self.waiting.insert(
                        s.name.clone(),
                        Waiting {
                            reason: if rt.latest(&s.name).is_some() {
                                "CreateContainerConfigError".into()
                            } else {
                                "ContainerCreating".into()
                            },
                            message: String::new(),
                        },
                    );
                }
                return Err(SyncFailed);
            }
        };

        let sandbox_id;
        let pod_ip;
        let sandbox_config;
        if let Some(attempt) = a.create_sandbox {
            let (dns, dns_warnings) = super::dns::pod_dns(pod, &ctx.dns);
            for (why, msg) in dns_warnings {
                ctx.recorder.pod(pod, None, true, why, msg);
            }
            // k/k: a pod cgroup that cannot be named or made is a FailedCreatePodContainer
            // event and a failed sync
            let cgroup_failed = |e: crate::cm::CgroupError, what: &str| {
                ctx.recorder.pod(
                    pod,
                    None,
                    true,
                    reason::FAILED_CREATE_POD_CONTAINER,
                    format!("unable to ensure pod container exists: {e}"),
                );
                tracing::warn!(error = %e, "{what} the pod cgroup failed");
                SyncFailed
            };
            let parent = crate::cm::pod_cgroup_parent(pod, ctx.cgroup_driver)
                .map_err(|e| cgroup_failed(e, "naming"))?;
            let cfg = spec::sandbox_config(pod, attempt, &ctx.pod_logs_dir, Some(dns), parent);
            if let Some(cm) = &ctx.cgroups {
                cm.ensure_pod_cgroup(pod)
                    .map_err(|e| cgroup_failed(e, "creating"))?;
            }
            let log_dir = cfg.log_directory.clone();
            if let Err(e) = tokio::fs::create_dir_all(&log_dir).await {
                tracing::warn!(dir = %log_dir, error = %e, "creating pod log directory failed");
            }
            match ctx.cri.run_pod_sandbox(cfg.clone()).await {
                Ok(id) => {
                    sandbox_id = id;
                    sandbox_config = cfg;
                }
                Err(e) => {
                    ctx.recorder.pod(
                        pod,
                        None,
                        true,
                        reason::FAILED_CREATE_POD_SANDBOX,
                        format!("Failed to create pod sandbox: {}", e.user_message()),
                    );
                    tracing::warn!(error = %e, "Failed to create sandbox for pod {}", super::format_pod(pod));
                    return Err(SyncFailed);
                }
            }
            let network = match ctx.cri.pod_sandbox_status(&sandbox_id).await {
                Ok(st) => st.network,
                Err(_) => None,
            };
            pod_ip = network.as_ref().map(|n| n.ip.clone()).unwrap_or_default();
            // The sandbox is ready: PodReadyToStartContainers and the pod IPs go out before any
            // image pull or container start.
            let mut with_sandbox = rt.clone();
            with_sandbox.sandboxes.insert(
                0,
                super::runtime::SandboxStatus {
                    id: sandbox_id.clone(),
                    attempt,
                    ready: true,
                    ip: (!pod_ip.is_empty()).then(|| pod_ip.clone()),
                    additional_ips: network
                        .map(|n| n.additional_ips.into_iter().map(|i| i.ip).collect())
                        .unwrap_or_default(),
                    created_at: Timestamp::now().as_nanosecond() as i64,
                },
            );
            if let Some((base, status)) = self.status_to_write(pod, &with_sandbox, false) {
                ctx.status.queue(&base, &status);
            }
        } else {
            let s = rt
                .latest_sandbox()
                .expect("a ready sandbox exists when none is created");
            sandbox_id = s.id.clone();
            pod_ip = s.ip.clone().unwrap_or_default();
            sandbox_config = spec::sandbox_config(
                pod,
                s.attempt,
                &ctx.pod_logs_dir,
                Some(super::dns::pod_dns(pod, &ctx.dns).0),
                crate::cm::pod_cgroup_parent(pod, ctx.cgroup_driver).unwrap_or_default(),
            );
        }
        let etc_hosts = self.write_etc_hosts(pod, &pod_ip).await;

        let mut failed = false;
        for s in &a.start {
            match self
                .start_container(
                    pod,
                    &s.name,
                    s.attempt,
                    &sandbox_id,
                    &sandbox_config,
                    &pod_ip,
                    &volumes,
                    etc_hosts.as_deref(),
                )
                .await
            {
                Ok(()) => {
                    self.waiting.remove(&s.name);
                }
                Err(w) => {
                    self.waiting.insert(s.name.clone(), w);
                    failed = true;
                    if s.init {
                        break;
                    }
                }
            }
        }
        if failed {
            Err(SyncFailed)
        } else {
            Ok(())
        }
    }

    /// Re-writes the pod's configMap, secret, downwardAPI and projected volumes (new data through
    /// the atomic writer; service-account tokens renewed by the token manager) at most every
    /// [`VOLUME_REFRESH_PERIOD`], as the Go kubelet's volume manager remounts them on its syncs.
    /// A failure is a `FailedMount` warning; the running containers are left alone.
    async fn refresh_volumes(&mut self, pod: &Pod) {
        if self
            .volumes_refreshed
            .is_some_and(|t| t.elapsed() < VOLUME_REFRESH_PERIOD)
        {
            return;
        }
        self.volumes_refreshed = Some(Instant::now());
        if let Err(e) = crate::volume::setup(
            &self.ctx.client,
            &self.ctx.root_dir,
            pod,
            &self.ctx.node_allocatable_milli,
        )
        .await
        {
            tracing::warn!(error = %e, "volume refresh failed");
            self.ctx.recorder.pod(
                pod,
                None,
                true,
                reason::FAILED_MOUNT,
                format!("MountVolume.SetUp failed: {e}"),
            );
        }
    }

    /// Writes the kubelet-managed /etc/hosts for the pod (k/k `kubelet_pods.go`), returning its
    /// path, or None for host-network pods and pods without an IP.
    async fn write_etc_hosts(&self, pod: &Pod, pod_ip: &str) -> Option<String> {
        if super::host_network(pod) || pod_ip.is_empty() {
            return None;
        }
        let host = spec::sandbox_hostname(pod);
        let mut content = String::from(
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
        );
        // with a subdomain, the FQDN `<hostname>.<subdomain>.<ns>.svc.<clusterDomain>` first
        // (k/k GeneratePodHostNameAndDomain, managedHostsFileContent)
        let subdomain = pod
            .spec
            .as_ref()
            .and_then(|s| s.subdomain.clone())
            .filter(|s| !s.is_empty());
        match subdomain {
            Some(sub) => {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("");
                let domain = &self.ctx.dns.cluster_domain;
                content.push_str(&format!(
                    "{pod_ip}\t{host}.{sub}.{ns}.svc.{domain}\t{host}\n"
                ));
            }
            None => content.push_str(&format!("{pod_ip}\t{host}\n")),
        }
        let aliases = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_aliases.clone())
            .unwrap_or_default();
        if !aliases.is_empty() {
            content.push_str("\n# Entries added by HostAliases.\n");
            for a in aliases {
                content.push_str(&format!(
                    "{}\t{}\n",
                    a.ip,
                    a.hostnames.unwrap_or_default().join("\t")
                ));
            }
        }
        let dir = crate::volume::pod_dir(&self.ctx.root_dir, super::uid(pod));
        let path = dir.join("etc-hosts");
        let r = async {
            tokio::fs::create_dir_all(&dir).await?;
            tokio::fs::write(&path, content).await?;
            tokio::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                .await
        }
        .await;
        match r {
            Ok(()) => Some(path.display().to_string()),
            Err(e) => {
                tracing::warn!(error = %e, "writing etc-hosts failed");
                None
            }
        }
    }

    /// Ensures the image, then creates and starts one container, with the Go kubelet's events.
    /// On failure returns the waiting reason and message for the container status.
    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &mut self,
        pod: &Pod,
        name: &str,
        attempt: u32,
        sandbox_id: &str,
        sandbox_config: &crate::cri::api::PodSandboxConfig,
        pod_ip: &str,
        volumes: &crate::volume::VolumePaths,
        etc_hosts: Option<&str>,
    ) -> Result<(), Waiting> {
        let ctx = self.ctx.clone();
        let c = spec::find_container(pod, name).ok_or_else(|| Waiting {
            reason: "CreateContainerConfigError".into(),
            message: format!("container {name:?} is not in the pod spec"),
        })?;
        let span = tracing::info_span!("container", container = %name);
        async {
            let image_ref = self.ensure_image(pod, c, sandbox_config).await?;
            // the image's user, for runAsNonRoot (k/k getImageUser)
            let image_user = match ctx.cri.image_status(&image_ref).await {
                Ok(Some(img)) => match (img.uid, img.username.as_str()) {
                    (Some(u), _) => spec::ImageUser::Uid(u.value),
                    (None, "") => spec::ImageUser::Root,
                    (None, n) => spec::ImageUser::Name(n.to_string()),
                },
                _ => spec::ImageUser::Root,
            };
            let host_ip = ctx.node_ips.first().cloned().unwrap_or_default();
            let env_result = match env_sources(&ctx, pod, c).await {
                Ok(src) => super::envvars::make_environment(pod, c, pod_ip, &host_ip, &src)
                    .map(|env| (env, src))
                    .map_err(|e| e.to_string()),
                Err(msg) => Err(msg),
            };
            let (env, env_sources) = match env_result {
                Ok(v) => v,
                Err(msg) => return Err(config_error(&ctx, pod, name, msg)),
            };
            let mut mounts = match crate::volume::container_mounts(c, volumes, &env) {
                Ok(m) => m,
                Err(e) => return Err(config_error(&ctx, pod, name, e.to_string())),
            };
            if let Some(m) = self.termination_message_mount(pod, c).await {
                mounts.push(m);
            }
            if let Some(h) = etc_hosts {
                if !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
                    mounts.push(crate::cri::api::Mount {
                        container_path: "/etc/hosts".into(),
                        host_path: h.into(),
                        ..Default::default()
                    });
                }
            }
            let inputs = spec::ContainerRuntimeInputs {
                image_ref,
                attempt,
                pod_ip: pod_ip.into(),
                host_ip,
                mounts,
                env_sources,
                memory_capacity_bytes: ctx.memory_capacity_bytes,
                image_user,
            };
            let cfg = match spec::container_config(pod, name, &inputs) {
                Ok(cfg) => cfg,
                Err(e) => return Err(config_error(&ctx, pod, name, e.to_string())),
            };
            let id = match ctx
                .cri
                .create_container(sandbox_id, cfg, sandbox_config.clone())
                .await
            {
                Ok(id) => id,
                Err(e) => {
                    ctx.recorder.pod(
                        pod,
                        Some(name),
                        true,
                        reason::FAILED,
                        format!("Error: {}", e.desc()),
                    );
                    return Err(Waiting {
                        reason: "CreateContainerError".into(),
                        message: e.desc(),
                    });
                }
            };
            ctx.recorder.pod(
                pod,
                Some(name),
                false,
                reason::CREATED,
                "Container created".into(),
            );
            if let Err(e) = ctx.cri.start_container(&id).await {
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED,
                    format!("Error: {}", e.desc()),
                );
                return Err(Waiting {
                    reason: "RunContainerError".into(),
                    message: e.desc(),
                });
            }
            ctx.recorder.pod(
                pod,
                Some(name),
                false,
                reason::STARTED,
                "Container started".into(),
            );
            // The legacy /var/log/containers symlink that log collectors read.
            link_container_log(pod, name, &id, &ctx.pod_logs_dir, attempt).await;
            // postStart runs right after the start; its failure kills the container
            // (k/k kuberuntime_container.go startContainer).
            if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
                let timeout = Duration::from_secs(
                    pod_grace_seconds(pod).max(MINIMUM_GRACE_PERIOD_SECONDS) as u64 + 120,
                );
                if let Err(out) =
                    crate::prober::handlers::run_hook(h, &ctx.cri, &id, pod_ip, timeout).await
                {
                    tracing::info!(output = %out, "postStart hook failed");
                    ctx.recorder.pod(
                        pod,
                        Some(name),
                        true,
                        reason::FAILED_POST_START_HOOK,
                        "PostStartHook failed".into(),
                    );
                    kill_container(
                        &ctx,
                        pod,
                        &id,
                        name,
                        "FailedPostStartHook",
                        pod_grace_seconds(pod),
                        pod_ip,
                    )
                    .await;
                    return Err(Waiting {
                        reason: "PostStartHookError".into(),
                        message: out,
                    });
                }
            }
            tracing::info!(container.id = %id, attempt, "container started");
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// Creates the host file behind `terminationMessagePath` (mode 0666, under the pod
    /// directory, a fresh name per container instance) and returns its mount.
    async fn termination_message_mount(
        &self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
    ) -> Option<crate::cri::api::Mount> {
        let path = c
            .termination_message_path
            .clone()
            .unwrap_or_else(|| spec::DEFAULT_TERMINATION_MESSAGE_PATH.into());
        if path.is_empty() {
            return None;
        }
        let dir = crate::volume::pod_dir(&self.ctx.root_dir, super::uid(pod))
            .join("containers")
            .join(&c.name);
        let file = dir.join(format!("{:08x}", rand::random::<u32>()));
        let r = async {
            tokio::fs::create_dir_all(&dir).await?;
            tokio::fs::write(&file, b"").await?;
            tokio::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666))
                .await
        }
        .await;
        match r {
            Ok(()) => Some(crate::cri::api::Mount {
                container_path: path,
                host_path: file.display().to_string(),
                ..Default::default()
            }),
            Err(e) => {
                tracing::warn!(error = %e, "creating the termination message file failed");
                None
            }
        }
    }

    /// The Go kubelet's `EnsureImageExists` (k/k `pkg/kubelet/images/image_manager.go`).
    async fn ensure_image(
        &mut self,
        pod: &Pod,
        c: &k8s_openapi::api::core::v1::Container,
        sandbox_config: &crate::cri::api::PodSandboxConfig,
    ) -> Result<String, Waiting> {
        let ctx = self.ctx.clone();
        let requested = c.image.clone().unwrap_or_default();
        let name = c.name.as_str();
        let image = match image::apply_default_tag(&requested) {
            Ok(i) => i,
            Err(e) => {
                let msg = format!("Failed to apply default image tag {requested:?}: {e}");
                ctx.recorder
                    .pod(pod, Some(name), true, reason::INSPECT_FAILED, msg.clone());
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED,
                    "Error: InvalidImageName".into(),
                );
                return Err(Waiting {
                    reason: "InvalidImageName".into(),
                    message: msg,
                });
            }
        };
        let policy = PullPolicy::from_spec(c.image_pull_policy.as_deref(), &requested);
        let present = match ctx.cri.image_status(&image).await {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("Failed to inspect image {image:?}: {}", e.user_message());
                ctx.recorder
                    .pod(pod, Some(name), true, reason::INSPECT_FAILED, msg.clone());
                return Err(Waiting {
                    reason: "ImageInspectError".into(),
                    message: msg,
                });
            }
        };
        match image::decide(policy, present.is_some()) {
            PullDecision::UsePresent => {
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    false,
                    reason::PULLED,
                    format!("Container image {requested:?} already present on machine"),
                );
                return Ok(present.map(|i| i.id).unwrap_or(image));
            }
            PullDecision::NeverPullMissing => {
                let msg = format!(
                    "Container image {requested:?} is not present with pull policy of Never"
                );
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::ERR_IMAGE_NEVER_PULL,
                    msg.clone(),
                );
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED,
                    "Error: ErrImageNeverPull".into(),
                );
                return Err(Waiting {
                    reason: "ErrImageNeverPull".into(),
                    message: msg,
                });
            }
            PullDecision::Pull => {}
        }
        // Credentials from the pod's pull secrets, looked up once per pull as the Go kubelet's
        // makeLookupPullCredentialsFunc does; a secret that does not parse fails the start.
        let credentials = match self.pull_credentials(pod, &image).await {
            Ok(c) => c,
            Err(msg) => {
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED,
                    format!("Error: {msg}"),
                );
                return Err(Waiting {
                    reason: msg.clone(),
                    message: msg,
                });
            }
        };
        let key = format!("{}_{}", super::uid(pod), image);
        let now = Timestamp::now();
        if self.image_backoff.is_in_backoff_since_update(&key, now) {
            let mut msg = format!("Back-off pulling image {image:?}");
            ctx.recorder
                .pod(pod, Some(name), false, reason::BACK_OFF, msg.clone());
            ctx.recorder.pod(
                pod,
                Some(name),
                true,
                reason::FAILED,
                "Error: ImagePullBackOff".into(),
            );
            if let Some(prev) = self
                .waiting
                .get(name)
                .filter(|w| w.reason == "ErrImagePull" || w.reason == "ImagePullBackOff")
            {
                let prev_msg = prev
                    .message
                    .split_once(": ErrImagePull: ")
                    .map(|(_, m)| m.to_string())
                    .unwrap_or_else(|| prev.message.clone());
                msg = format!("{msg}: ErrImagePull: {prev_msg}");
            }
            return Err(Waiting {
                reason: "ImagePullBackOff".into(),
                message: msg,
            });
        }
        let waiting_started = Instant::now();
        let _guard = ctx.pull_lock.lock().await;
        ctx.recorder.pod(
            pod,
            Some(name),
            false,
            reason::PULLING,
            format!("Pulling image {image:?}"),
        );
        let pull_started = Instant::now();
        match pull_with_credentials(&ctx.cri, &image, &credentials, sandbox_config).await {
            Ok(image_ref) => {
                let pull = crate::time::truncate_ms(pull_started.elapsed());
                let total = crate::time::truncate_ms(waiting_started.elapsed());
                let size = ctx
                    .cri
                    .image_status(&image_ref)
                    .await
                    .ok()
                    .flatten()
                    .map(|i| i.size)
                    .unwrap_or(0);
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    false,
                    reason::PULLED,
                    format!(
                        "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
                        crate::time::go_duration(pull),
                        crate::time::go_duration(total)
                    ),
                );
                self.image_backoff.gc(Timestamp::now());
                Ok(image_ref)
            }
            Err(msg) => {
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED,
                    format!("Failed to pull image {image:?}: {msg}"),
                );
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED,
                    "Error: ErrImagePull".into(),
                );
                self.image_backoff.next(&key, Timestamp::now());
                Err(Waiting {
                    reason: "ErrImagePull".into(),
                    message: msg,
                })
            }
        }
    }

    /// The candidate credentials for pulling `image`: the pod's `imagePullSecrets` are read from
    /// its namespace (a secret that cannot be read is skipped with the Go kubelet's
    /// `FailedToRetrieveImagePullSecret` warning, k/k `kubelet_pods.go` `getPullSecretsForPod`)
    /// and matched by [`crate::credentialprovider`]. Empty when the pod has no pull secrets or
    /// none matches.
    ///
    /// Errors: the text of a pull secret whose payload does not parse, or of an image reference
    /// that does not parse.
    async fn pull_credentials(
        &self,
        pod: &Pod,
        image: &str,
    ) -> Result<Vec<crate::credentialprovider::TrackedAuthConfig>, String> {
        use crate::credentialprovider as cp;
        let names = cp::pull_secret_names(pod);
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.ctx.client.clone(), ns);
        let mut secrets = Vec::new();
        let mut failed = Vec::new();
        for n in names {
            match api.get(&n).await {
                Ok(s) => secrets.push(s),
                Err(e) => {
                    tracing::info!(secret = %n, error = %e, "Unable to retrieve pull secret, the image pull may not succeed.");
                    failed.push(n);
                }
            }
        }
        if !failed.is_empty() {
            self.ctx.recorder.pod(
                pod,
                None,
                true,
                reason::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
                cp::failed_pull_secrets_message(&failed),
            );
        }
        let repo = cp::repo_to_pull(image)
            .map_err(|e| format!("couldn't parse image name {image:?}: {e}"))?;
        let keyring = cp::keyring_from_secrets(&secrets).map_err(|e| e.to_string())?;
        let found = keyring.lookup(&repo);
        tracing::debug!(
            image = %image,
            candidates = found.len(),
            "credentials from pull secrets"
        );
        Ok(found)
    }

    /// Stops all running containers (in parallel, each with the grace period, floored at 2 s)
    /// and then every sandbox of the pod.
    /// Admission of a pod this node has not started (no sandbox yet, not terminal): under node
    /// pressure the eviction manager may refuse it (k/k `rejectPod`: a Warning event with the
    /// reason and message, status Failed with `Pod was rejected: <message>`).
    async fn admission(&self, pod: &Pod) -> Option<crate::eviction::TerminalStatus> {
        let pressure = self.ctx.pressure.as_ref()?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded") | Some("Failed") | Some("Running")) {
            return None;
        }
        let msg = pressure.admit(pod).err()?;
        match PodRuntimeStatus::observe(&self.ctx.cri, super::uid(pod)).await {
            Ok(rt) if rt.sandboxes.is_empty() => {}
            _ => return None,
        }
        tracing::warn!(reason = crate::eviction::rank::REASON_EVICTED, message = %msg, "pod rejected at admission");
        self.ctx.recorder.pod(
            pod,
            None,
            true,
            crate::eviction::rank::REASON_EVICTED,
            msg.clone(),
        );
        let status = crate::eviction::TerminalStatus {
            reason: crate::eviction::rank::REASON_EVICTED.into(),
            message: format!("Pod was rejected: {msg}"),
            condition: None,
            grace_seconds: 0,
            rejected: true,
        };
        Some(status)
    }

    /// Stops a pod the eviction manager evicts: kill its containers with the eviction's grace
    /// period, tear down its volumes (so an emptyDir's space comes back at once), and report
    /// `Failed` with the eviction's reason, message and `DisruptionTarget` condition. The
    /// pod object stays until it is deleted (k/k `killPodNow` with a status function).
    async fn evict(&mut self, pod: &Pod, ev: Arc<crate::eviction::TerminalStatus>) {
        tracing::info!(message = %ev.message, "evicting pod");
        self.terminal_override = Some(ev.clone());
        match PodRuntimeStatus::observe(&self.ctx.cri, super::uid(pod)).await {
            Ok(rt) => self.kill_pod(pod, &rt, ev.grace_seconds).await,
            Err(e) => tracing::warn!(error = %e, "reading pod state for eviction failed"),
        }
        self.probes.stop_all();
        // volumes first, so the space of its emptyDirs is back when the pod shows Failed
        let uid = super::uid(pod).to_string();
        if let Err(e) = crate::volume::teardown(&self.ctx.root_dir, &uid).await {
            tracing::warn!(error = %e, "tearing down the evicted pod's volumes failed");
        }
        crate::volume::tokens().forget_pod(&uid);
        let latest = self.rx.borrow().pod.clone();
        self.write_status(&latest, true).await;
    }

    async fn kill_pod(&self, pod: &Pod, rt: &PodRuntimeStatus, grace: i64) {
        let ctx = self.ctx.clone();
        let pod_ip = rt
            .latest_sandbox()
            .and_then(|s| s.ip.clone())
            .unwrap_or_default();
        let stops = rt.running().map(|c| {
            let ctx = ctx.clone();
            let id = c.id.clone();
            let name = c.name.clone();
            let pod_ip = pod_ip.clone();
            async move {
                let msg = format!("Stopping container {name}");
                kill_container(&ctx, pod, &id, &name, &msg, grace, &pod_ip).await;
            }
        });
        futures::future::join_all(stops).await;
        for s in &rt.sandboxes {
            if let Err(e) = ctx.cri.stop_pod_sandbox(&s.id).await {
                if !e.is_not_found() {
                    ctx.recorder.pod(
                        pod,
                        None,
                        true,
                        reason::FAILED_KILL_POD,
                        format!("error killing pod: {}", e.user_message()),
                    );
                    tracing::warn!(sandbox = %s.id, error = %e, "stopping sandbox failed");
                }
            }
        }
    }

    /// Terminates a deleted or removed pod: kill with the grace period, report the terminal
    /// status, complete the deletion in the API server, then remove the sandbox, log and pod
    /// directories. A shorter grace period arriving meanwhile (a second delete with
    /// `--grace-period`, a force delete) re-issues the kill with it, as the Go pod worker
    /// cancels the running termination and starts it again with the effective grace period; a
    /// preStop hook that hangs counts against the shortened period too.
    async fn terminate(&mut self, update: PodUpdate, cancel: &CancellationToken) {
        let ctx = self.ctx.clone();
        let mut pod = update.pod;
        let mut removed = update.removed;
        let uid = super::uid(&pod).to_string();
        let abrupt =
            |removed: bool, pod: &Pod| removed && pod.metadata.deletion_timestamp.is_none();
        let mut grace = super::grace::effective_grace_period(None, &pod, abrupt(removed, &pod));
        tracing::info!(grace_seconds = grace, removed, "terminating pod");
        let mut rx = self.rx.clone();
        let mut delay = Duration::from_secs(1);
        loop {
            let rt = match PodRuntimeStatus::observe(&ctx.cri, &uid).await {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(error = %e, "reading runtime state for termination failed; retrying");
                    tokio::select! { _ = cancel.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
                    delay = (delay * 2).min(Duration::from_secs(30));
                    continue;
                }
            };
            let shorter = {
                let kill = self.kill_pod(&pod, &rt, grace);
                tokio::pin!(kill);
                loop {
                    tokio::select! {
                        _ = &mut kill => break None,
                        _ = cancel.cancelled() => return,
                        changed = rx.changed() => {
                            if changed.is_err() {
                                // no more updates can come: finish this kill
                                (&mut kill).await;
                                break None;
                            }
                            let u = rx.borrow_and_update().clone();
                            let g = super::grace::effective_grace_period(
                                Some(grace),
                                &u.pod,
                                abrupt(u.removed, &u.pod),
                            );
                            if g < grace {
                                break Some((g, u));
                            }
                        }
                    }
                }
            };
            match shorter {
                None => break,
                Some((g, u)) => {
                    tracing::info!(
                        grace_seconds = g,
                        previous_seconds = grace,
                        "grace period shortened; killing again"
                    );
                    grace = g;
                    removed = removed || u.removed;
                    pod = u.pod;
                }
            }
        }
        if !removed {
            // Report the terminal phase, then finish the deletion (status first, as the Go
            // kubelet requires a terminal phase before the object is removed).
            let latest = self.rx.borrow().pod.clone();
            self.write_status_now(&latest, true).await;
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &dp).await {
                Ok(_) => tracing::info!("Pod fully terminated and removed from etcd"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => tracing::warn!(error = %e, "deleting pod object failed"),
            }
        }
        self.cleanup(&pod).await;
    }

    /// Removes the pod's sandboxes (and with them its containers), log directory, pod directory
    /// and back-off entries.
    async fn cleanup(&mut self, pod: &Pod) {
        let ctx = self.ctx.clone();
        let uid = super::uid(pod).to_string();
        if let Ok(sandboxes) = ctx.cri.list_pod_sandboxes(&[(labels::POD_UID, &uid)]).await {
            for s in sandboxes {
                let _ = ctx.cri.stop_pod_sandbox(&s.id).await;
                if let Err(e) = ctx.cri.remove_pod_sandbox(&s.id).await {
                    tracing::warn!(sandbox = %s.id, error = %e, "removing sandbox failed");
                }
            }
        }
        // Containers left without a sandbox.
        if let Ok(cs) = ctx.cri.list_containers(&[(labels::POD_UID, &uid)]).await {
            for c in cs {
                let _ = ctx.cri.remove_container(&c.id).await;
            }
        }
        if pod.metadata.name.is_some() && pod.metadata.namespace.is_some() {
            let dir = spec::pod_log_dir(&ctx.pod_logs_dir, pod);
            remove_container_log_links(pod, &ctx.pod_logs_dir).await;
            let _ = tokio::fs::remove_dir_all(&dir).await;
        }
        if let Err(e) = crate::volume::teardown(&ctx.root_dir, &uid).await {
            tracing::warn!(error = %e, "tearing down pod volumes failed");
        }
        crate::volume::tokens().forget_pod(&uid);
        if let Some(cm) = &ctx.cgroups {
            if let Err(e) = cm.remove_pod_cgroup(&uid) {
                tracing::warn!(error = %e, "removing the pod cgroup failed");
            }
        }
        ctx.status.forget(&uid);
        self.crash_backoff.forget_prefix("");
        self.image_backoff.forget_prefix("");
        tracing::info!("pod cleaned up");
    }
}

/// Kills one container as the Go kubelet's `killContainer` does: a `Killing` event with
/// `message`, the preStop hook (when the grace period is above zero; its time is taken from the
/// grace period), then CRI StopContainer with what is left of the grace period, at least 2 s.
async fn kill_container(
    ctx: &SyncContext,
    pod: &Pod,
    id: &str,
    name: &str,
    message: &str,
    grace: i64,
    pod_ip: &str,
) {
    ctx.recorder
        .pod(pod, Some(name), false, reason::KILLING, message.to_string());
    let mut grace = grace;
    let pre_stop = spec::find_container(pod, name)
        .and_then(|c| c.lifecycle.as_ref())
        .and_then(|l| l.pre_stop.as_ref());
    if let (Some(h), true) = (pre_stop, grace > 0) {
        let started = Instant::now();
        if let Err(out) = crate::prober::handlers::run_hook(
            h,
            &ctx.cri,
            id,
            pod_ip,
            Duration::from_secs(grace as u64),
        )
        .await
        {
            tracing::info!(container = %name, output = %out, "preStop hook failed");
            ctx.recorder.pod(
                pod,
                Some(name),
                true,
                reason::FAILED_PRE_STOP_HOOK,
                "PreStopHook failed".into(),
            );
        }
        grace -= started.elapsed().as_secs() as i64;
    }
    if let Err(e) = ctx
        .cri
        .stop_container(id, grace.max(MINIMUM_GRACE_PERIOD_SECONDS))
        .await
    {
        if !e.is_not_found() {
            tracing::warn!(container = %name, error = %e, "stopping container failed");
        }
    }
}

/// The grace period for stopping a pod's containers, in seconds ([`super::grace::requested_grace_seconds`]:
/// `metadata.deletionGracePeriodSeconds`, else `spec.terminationGracePeriodSeconds`, else 30).
pub fn pod_grace_seconds(pod: &Pod) -> i64 {
    super::grace::requested_grace_seconds(pod)
}

/// `/var/log/containers/<pod>_<ns>_<container>-<id>.log` → the CRI log file, as the Go kubelet
/// links it for log collectors.
async fn link_container_log(
    pod: &Pod,
    container: &str,
    id: &str,
    pod_logs_dir: &str,
    attempt: u32,
) {
    let Some(parent) = std::path::Path::new(pod_logs_dir).parent() else {
        return;
    };
    let dir = parent.join("containers");
    let link = dir.join(format!(
        "{}_{}_{}-{}.log",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        container,
        id
    ));
    let target = format!(
        "{}/{}/{}.log",
        spec::pod_log_dir(pod_logs_dir, pod),
        container,
        attempt
    );
    let _ = tokio::fs::create_dir_all(&dir).await;
    let _ = tokio::fs::symlink(target, link).await;
}

async fn remove_container_log_links(pod: &Pod, pod_logs_dir: &str) {
    let Some(parent) = std::path::Path::new(pod_logs_dir).parent() else {
        return;
    };
    let dir = parent.join("containers");
    let prefix = format!(
        "{}_{}_",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("")
    );
    let target_prefix = spec::pod_log_dir(pod_logs_dir, pod);
    if let Ok(mut rd) = tokio::fs::read_dir(&dir).await {
        while let Ok(Some(e)) = rd.next_entry().await {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(&prefix) {
                if let Ok(t) = tokio::fs::read_link(e.path()).await {
                    if t.to_string_lossy().starts_with(&target_prefix) {
                        let _ = tokio::fs::remove_file(e.path()).await;
                    }
                }
            }
        }
    }
}

/// Pulls `image`, with no credentials when `credentials` is empty, else trying each candidate in
/// turn until one succeeds (k/k `kuberuntime_image.go` `PullImage`; there is no anonymous attempt
/// after the candidates fail). Returns the image reference, or the error text as the Go kubelet
/// renders it (one error as is, several as an aggregate `[a, b]`). Credentials are never logged.
async fn pull_with_credentials(
    cri: &CriClient,
    image: &str,
    credentials: &[crate::credentialprovider::TrackedAuthConfig],
    sandbox_config: &crate::cri::api::PodSandboxConfig,
) -> Result<String, String> {
    if credentials.is_empty() {
        return cri
            .pull_image(image, None, Some(sandbox_config.clone()))
            .await
            .map_err(|e| e.user_message());
    }
    let mut errs = Vec::new();
    for c in credentials {
        match cri
            .pull_image(image, Some(c.auth.to_cri()), Some(sandbox_config.clone()))
            .await
        {
            Ok(r) => return Ok(r),
            Err(e) => {
                tracing::debug!(
                    image = %image,
                    secret = c.source.as_ref().map(|s| s.name.as_str()).unwrap_or(""),
                    "pull with these credentials failed"
                );
                errs.push(e.user_message());
            }
        }
    }
    Err(crate::credentialprovider::aggregate_messages(&errs))
}
