//! Pod workers: one task per pod UID that owns that pod's lifecycle on this node (k/k
//! `pkg/kubelet/pod_workers.go`). A worker is fed the latest pod object through a `watch`
//! channel (latest wins), woken by PLEG when the runtime changes, and syncs: read the runtime
//! state, decide ([`super::actions`]), act through CRI, write the status. When the pod is
//! deleted it terminates the containers with the grace period, reports a terminal phase,
//! completes the deletion in the API server, and removes the sandbox.
//!
//! [`PodWorkers`] is the dispatcher: it owns the map of workers, routes pod updates and PLEG
//! events to them, and cleans up pods that vanished while deckhand was down.

pub use super::context::SyncContext;
use super::worker::{deleting, phase_is_terminal, PodWorker};

use crate::allocation::ResizeCondition;
use crate::backoff::Backoff;
use crate::prober::PodProbes;
use crate::source::PodEvent;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How often a worker syncs its pod without any trigger (the Go kubelet's resync,
/// `syncFrequency`, is 1 min). deckhand is woken by PLEG events, probe results, pod updates and
/// its own deadlines (back-off, active deadline), so this is a safety net and the pace of the
/// volume refresh ([`VOLUME_REFRESH_PERIOD`]). It was 10 s: on an idle node with two pods that
/// was 12 syncs a minute, about a third of deckhand's CRI calls at idle (issue 15).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(30);
/// Delay before retrying a sync that failed (Go kubelet `workerBackOffPeriod`, 10 s).
pub const WORKER_BACKOFF_PERIOD: Duration = Duration::from_secs(10);
pub use crate::kuberuntime::MINIMUM_GRACE_PERIOD_SECONDS;
/// How often a running pod's configMap, secret, downwardAPI and projected volumes are refreshed
/// (the Go kubelet: within its 1 min sync period plus the object cache's delay). Shorter than
/// [`RESYNC_PERIOD`], so that each periodic resync refreshes them: an update shows in the files
/// within about 30 s.
pub const VOLUME_REFRESH_PERIOD: Duration = Duration::from_secs(25);

/// What a worker is told about its pod.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    /// The latest pod object seen, shared with the pod manager (cloning an update copies no
    /// pod: a worker keeps one while it waits, issue 15).
    pub pod: Arc<Pod>,
    /// The object is gone from the API server (deleted, force-deleted, or vanished while
    /// deckhand was down): kill and clean up without writing status.
    pub removed: bool,
    /// The kubelet stops the pod on its own (eviction): kill it and report this status; the
    /// pod stays (Failed) until it is deleted. Sticky, like `removed`.
    pub evict: Option<Arc<crate::eviction::TerminalStatus>>,
    /// The `PodResizePending` condition when the spec asks for resources the kubelet has not
    /// allocated ([`crate::allocation::decide_resize`]); `pod` carries the allocation.
    pub resize_pending: Option<ResizeCondition>,
}

struct WorkerHandle {
    tx: watch::Sender<PodUpdate>,
    notify: Arc<Notify>,
}

/// The dispatcher of pod updates and runtime events to pod workers.
pub struct PodWorkers {
    pub(super) ctx: Arc<SyncContext>,
    workers: crate::heap::ShrinkingMap<String, WorkerHandle>,
    done_tx: mpsc::UnboundedSender<String>,
    done_rx: mpsc::UnboundedReceiver<String>,
    /// Workers report here when they have stopped a pod the eviction manager evicts.
    evicted_tx: mpsc::UnboundedSender<String>,
    evicted_rx: mpsc::UnboundedReceiver<String>,
    eviction_waiters: Vec<(String, tokio::sync::oneshot::Sender<bool>)>,
    monitor: crate::systemd::SyncLoopMonitor,
    pub(super) states: super::states::PodStates,
    /// Resizes not accepted yet, by UID: the pod as the API server has it and its condition
    /// (retried as other pods go away, k/k `podsWithPendingResizes`).
    pending_resizes: HashMap<String, (Arc<Pod>, ResizeCondition)>,
    /// The pods that exist, for the periodic orphan sweep ([`super::housekeeping`]).
    pub(super) pod_manager: Option<super::manager::PodManager>,
    /// When each orphan was last cleaned up (the sweep retries a stubborn one slowly).
    pub(super) orphan_retry: super::housekeeping::OrphanRetry,
    /// When pods were first and last active since the last heap trim.
    pub(super) heap_trim: super::housekeeping::HeapTrimClock,
    /// When a worker was last forgotten: the orphan sweep needs a sandbox list taken after it
    /// ([`super::housekeeping::sandbox_list_after`]).
    pub(super) last_worker_forgotten: Instant,
}

impl PodWorkers {
    /// A dispatcher over `ctx`.
    pub fn new(ctx: Arc<SyncContext>) -> Self {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let (evicted_tx, evicted_rx) = mpsc::unbounded_channel();
        Self {
            ctx,
            workers: Default::default(),
            done_tx,
            done_rx,
            evicted_tx,
            evicted_rx,
            eviction_waiters: Vec::new(),
            monitor: crate::systemd::SyncLoopMonitor::new(),
            states: super::states::PodStates::default(),
            pending_resizes: HashMap::new(),
            pod_manager: None,
            orphan_retry: Default::default(),
            heap_trim: Default::default(),
            last_worker_forgotten: Instant::now(),
        }
    }

    /// Forgets the finished worker of `uid` and what was kept for its pod.
    pub(super) fn forget_worker(&mut self, uid: &str) {
        if let Some(h) = self.workers.remove(uid) {
            if events_end_with_worker(&h.tx.borrow().pod) {
                self.ctx.recorder.forget_object(uid);
            }
            self.heap_trim.pod_activity(Instant::now());
            self.last_worker_forgotten = Instant::now();
        }
        self.states.remove(uid);
        self.ctx.synced.forget(uid);
        self.ctx.allocation.remove_pod(uid);
        self.pending_resizes.remove(uid);
    }

    /// The UIDs of finished workers kept for pods not removed yet (see [`Self::update`]).
    pub(super) fn finished_workers(&self) -> Vec<String> {
        self.workers
            .iter()
            .filter(|(_, h)| h.tx.is_closed())
            .map(|(u, _)| u.clone())
            .collect()
    }

    /// Whether a worker has the pod `uid`.
    pub(super) fn has_worker(&self, uid: &str) -> bool {
        self.workers.contains_key(uid)
    }

    /// The pods of the workers whose UID is not in `present` (as each worker last saw it).
    pub(super) fn worker_pods_not_in(&self, present: &HashSet<String>) -> Vec<Arc<Pod>> {
        self.workers
            .iter()
            .filter(|(u, _)| !present.contains(*u))
            .map(|(_, h)| h.tx.borrow().pod.clone())
            .collect()
    }

    /// Gives the dispatcher the pod manager, so it sweeps orphans every housekeeping period
    /// and not only after a full list of the pod sources.
    pub fn with_pod_manager(mut self, pods: super::manager::PodManager) -> Self {
        self.pod_manager = Some(pods);
        self
    }

    /// Each pod UID's stage in its worker, for the garbage collectors ([`crate::gc`]).
    pub fn pod_states(&self) -> super::states::PodStates {
        self.states.clone()
    }

    /// The heartbeat of this dispatcher's loop (for the systemd watchdog and `/healthz`).
    pub fn monitor(&self) -> crate::systemd::SyncLoopMonitor {
        self.monitor.clone()
    }

    pub(super) async fn update(
        &mut self,
        pod: Arc<Pod>,
        removed: bool,
        cancel: &CancellationToken,
    ) {
        let uid = super::uid(&pod).to_string();
        if uid.is_empty() {
            return;
        }
        if let Some(h) = self.workers.get(&uid) {
            if h.tx.is_closed() {
                // The worker finished (it terminated the pod and deleted it in the API) and
                // was kept so that a late update of the deleted pod does not start another.
                // Once the pod is gone from the sources it is forgotten (k/k
                // `SyncKnownPods`); before, every deleted pod's worker stayed for good.
                if removed {
                    self.forget_worker(&uid);
                }
                return;
            }
            // A removed pod stays removed even if a stale update arrives later.
            let (was_removed, evict) = {
                let b = h.tx.borrow();
                (b.removed, b.evict.clone())
            };
            self.states
                .set(&uid, worker_state(&pod, removed || was_removed));
            let (pod, resize_pending) = self.allocate(pod, removed || was_removed);
            if let Some(h) = self.workers.get(&uid) {
                let new = PodUpdate {
                    pod,
                    removed: removed || was_removed,
                    evict,
                    resize_pending,
                };
                // the worker always reads the newest object; it is woken only for a change it
                // acts on (not for the watch echoing its own status write)
                h.tx.send_if_modified(|cur| {
                    let wake = wakes_worker(cur, &new);
                    *cur = new;
                    wake
                });
            }
            return;
        }
        self.states.set(&uid, worker_state(&pod, removed));
        let evict = self.predicate_admission(&pod, removed).await;
        if evict.is_none() && !removed && self.ctx.allocation.allocated(&uid).is_none() {
            // admitted (or running since before a restart without a checkpoint): allocated
            // what its spec asks for (k/k allocation manager AddPod)
            self.ctx
                .allocation
                .set_allocated(&uid, crate::allocation::allocation_from_pod(&pod));
        }
        let (pod, resize_pending) = self.allocate(pod, removed);
        let (tx, rx) = watch::channel(PodUpdate {
            pod: pod.clone(),
            removed,
            evict,
            resize_pending,
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
            mounted_volumes: None,
            volume_refresh_failing: false,
            volume_setup_retry: None,
            retry_failed_sync_after: None,
            probe_rx,
            terminal_override: None,
            admitted: false,
            finished: false,
            evicted_tx: self.evicted_tx.clone(),
            resizing: false,
            resize_error: None,
            first_sync_list_after: Some(self.last_worker_forgotten),
        };
        let done = self.done_tx.clone();
        let span = super::span(&pod);
        let cancel = cancel.child_token();
        let uid2 = uid.clone();
        let name = format!(
            "pod worker {}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        self.ctx.tasks.spawn(
            name,
            async move {
                worker.run(cancel).await;
                let _ = done.send(uid2);
            }
            .instrument(span),
        );
        self.workers.insert(uid, WorkerHandle { tx, notify });
    }

    /// The kubelet's admission of a pod it sees for the first time ([`super::admission`], k/k
    /// `HandlePodAdditions` → `canAdmitPod`): decided here, one pod at a time in arrival order,
    /// against the pods already admitted, so two pods asking for the same host port cannot both
    /// be admitted. Pods already running or finished, and pods being deleted, are not judged
    /// again. A refused pod gets a Warning event with the reason and message, and its worker
    /// reports phase `Failed` with `Pod was rejected: <message>` and never starts it.
    async fn predicate_admission(
        &self,
        pod: &Pod,
        removed: bool,
    ) -> Option<Arc<crate::eviction::TerminalStatus>> {
        if removed || pod.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed" | "Running")) {
            return None;
        }
        let node = self.ctx.node.borrow().clone()?;
        let others = self.active_pods();
        let mut r = super::admission::admit(pod, &node, &others).err()?;
        if r.reason == crate::scheduler::filters::plugin::NODE_AFFINITY {
            // The node's labels may have changed since the status loop last read it (a label
            // added, then the pod bound): read the Node now and decide again (k/k
            // predicateAdmitHandler.generalFilter fetches the node synchronously).
            let api: kube::Api<k8s_openapi::api::core::v1::Node> =
                kube::Api::all(self.ctx.client.clone());
            let fresh =
                tokio::time::timeout(Duration::from_secs(5), api.get(&self.ctx.node_name)).await;
            if let Ok(Ok(fresh)) = fresh {
                r = super::admission::admit(pod, &fresh, &others).err()?;
            }
        }
        super::span(pod).in_scope(|| {
            tracing::warn!(reason = %r.reason, message = %r.message, "pod rejected at admission")
        });
        self.ctx
            .recorder
            .pod(pod, None, true, &r.reason, r.message.clone());
        Some(Arc::new(crate::eviction::TerminalStatus {
            reason: r.reason,
            message: format!("Pod was rejected: {}", r.message),
            condition: None,
            grace_seconds: 0,
            rejected: true,
        }))
    }

    /// In-place resize, the allocation decision (k/k allocation manager
    /// `handlePodResourcesResize`): `pod` as its worker is to see it (each container's
    /// resources as allocated) and the `PodResizePending` condition when the spec asks for
    /// more than can be allocated now. A resize that fits next to the other active pods'
    /// allocations is accepted (allocation updated and checkpointed, `ResizeStarted` event);
    /// one that does not stays pending (`ResizeDeferred` Warning event once per reason and
    /// generation) and is retried as pods go away. A pod that is not admitted, removed, being
    /// deleted or finished gets no decision.
    fn allocate(&mut self, pod: Arc<Pod>, removed: bool) -> (Arc<Pod>, Option<ResizeCondition>) {
        use crate::allocation::{
            allocation_from_pod, decide_resize, pod_with_allocation, resize_event_message,
            ResizeDecision, POD_RESIZE_PENDING, REASON_INFEASIBLE,
        };
        use crate::events::reason;
        let uid = super::uid(&pod).to_string();
        let Some(alloc) = self.ctx.allocation.allocated(&uid) else {
            return (pod, None);
        };
        let (allocated, differs) = pod_with_allocation(&pod, &alloc);
        if !differs {
            self.pending_resizes.remove(&uid);
            return (pod, None);
        }
        if removed || pod.metadata.deletion_timestamp.is_some() || phase_is_terminal(&pod) {
            self.pending_resizes.remove(&uid);
            return (Arc::new(allocated), None);
        }
        let Some(node) = self.ctx.node.borrow().clone() else {
            let pending = self.pending_resizes.get(&uid).map(|(_, c)| c.clone());
            return (Arc::new(allocated), pending);
        };
        let others: Vec<Pod> = self
            .active_pods()
            .into_iter()
            .filter(|p| super::uid(p) != uid)
            .collect();
        match decide_resize(&pod, &alloc, &node, &others) {
            ResizeDecision::Unchanged => (pod, None),
            ResizeDecision::Accepted => {
                self.ctx
                    .allocation
                    .set_allocated(&uid, allocation_from_pod(&pod));
                self.pending_resizes.remove(&uid);
                super::span(&pod).in_scope(|| tracing::info!("in-place resize accepted"));
                let msg = resize_event_message("Pod resize started", &pod, "");
                self.ctx
                    .recorder
                    .pod(&pod, None, false, reason::RESIZE_STARTED, msg);
                (pod, None)
            }
            ResizeDecision::Pending {
                reason: why,
                message,
            } => {
                let cond = ResizeCondition {
                    type_: POD_RESIZE_PENDING,
                    reason: why,
                    message,
                    observed_generation: pod.metadata.generation,
                };
                if self.pending_resizes.get(&uid).map(|(_, c)| c) != Some(&cond) {
                    let event = if cond.reason == REASON_INFEASIBLE {
                        reason::RESIZE_INFEASIBLE
                    } else {
                        reason::RESIZE_DEFERRED
                    };
                    let prefix = format!("Pod resize {}", cond.reason);
                    let msg = resize_event_message(&prefix, &pod, &cond.message);
                    self.ctx.recorder.pod(&pod, None, true, event, msg);
                }
                self.pending_resizes
                    .insert(uid, (pod.clone(), cond.clone()));
                (Arc::new(allocated), Some(cond))
            }
        }
    }

    /// Decides the pending resizes again (other pods may have gone away) and tells the
    /// workers of those that were accepted or changed.
    fn retry_pending_resizes(&mut self) {
        let pending: Vec<(String, Arc<Pod>, ResizeCondition)> = self
            .pending_resizes
            .iter()
            .map(|(u, (p, c))| (u.clone(), p.clone(), c.clone()))
            .collect();
        for (uid, pod, before) in pending {
            let Some(h) = self.workers.get(&uid) else {
                self.pending_resizes.remove(&uid);
                continue;
            };
            let (removed, evict) = {
                let b = h.tx.borrow();
                (b.removed, b.evict.clone())
            };
            let (pod, resize_pending) = self.allocate(pod, removed);
            if resize_pending.as_ref() == Some(&before) {
                continue;
            }
            if let Some(h) = self.workers.get(&uid) {
                let _ = h.tx.send(PodUpdate {
                    pod,
                    removed,
                    evict,
                    resize_pending,
                });
            }
        }
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
                .then(|| Pod::clone(&u.pod))
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
        let mut runtime_back = self.ctx.cri.reachability().subscribe_back();
        loop {
            self.monitor.beat();
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = housekeeping.tick() => {
                    if !self.pending_resizes.is_empty() {
                        self.retry_pending_resizes();
                    }
                    self.sweep_orphans(&cancel).await;
                    self.trim_heap_after_pod_activity();
                }
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
                ev = pods.recv() => {
                    let Some(ev) = ev else { return };
                    self.heap_trim.pod_activity(Instant::now());
                    match ev {
                        PodEvent::Apply(pod) => {
                            let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.ctx.node_name.as_str());
                            self.update(pod, !on_node, &cancel).await;
                        }
                        PodEvent::Delete(pod) => self.update(pod, true, &cancel).await,
                        PodEvent::Synced(present) => self.reconcile(present, &cancel).await,
                    }
                }
                r = runtime_back.changed() => {
                    // The runtime answers again after an outage (e.g. containerd restarted):
                    // every worker syncs now rather than at the end of its failure back-off.
                    if r.is_ok() {
                        for h in self.workers.values() {
                            h.notify.notify_one();
                        }
                    }
                }
                uid = pleg.recv() => {
                    if let Some(uid) = uid {
                        self.heap_trim.pod_activity(Instant::now());
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
                            self.forget_worker(&uid);
                        }
                    }
                }
            }
        }
    }
}

/// Whether a pod can have no more events once its worker is forgotten, so the event recorder
/// may drop what it aggregates for it ([`crate::events::EventRecorder::forget_object`]): a pod
/// of the API server (a worker is forgotten only once its pod is removed, and a UID is never
/// reused). Not an orphan the housekeeping found (no API object: a stubborn one gets a worker
/// under the same UID every retry, whose repeated `FailedKillPod` must keep counting up on one
/// Event), nor a static pod (its UID comes back with its manifest).
fn events_end_with_worker(pod: &Pod) -> bool {
    pod.metadata.resource_version.is_some() && !crate::source::file::is_static(pod)
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

/// Whether a new copy of a pod must wake its worker (k/k `config.checkAndUpdatePod`: an update
/// that changes only the status is a reconcile, not a sync). It wakes for anything the worker
/// acts on: removal, eviction, a pending resize, the spec, and the metadata (labels and
/// annotations for downward API volumes, deletion, generation) other than `resourceVersion` and
/// `managedFields`; and, for a pod with readiness gates, a change of the conditions others own
/// (Ready follows them, k/k `NeedToReconcilePodReadiness`). The watch echoing a status the
/// kubelet wrote wakes nothing: that was a sync (and a full runtime read) per status write.
pub fn wakes_worker(old: &PodUpdate, new: &PodUpdate) -> bool {
    if old.removed != new.removed
        || old.evict.is_some() != new.evict.is_some()
        || old.resize_pending != new.resize_pending
        || old.pod.spec != new.pod.spec
    {
        return true;
    }
    let meta = |p: &Pod| {
        let mut m = p.metadata.clone();
        m.resource_version = None;
        m.managed_fields = None;
        m
    };
    if meta(&old.pod) != meta(&new.pod) {
        return true;
    }
    let gated = new
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    if gated {
        let foreign = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default()
                .into_iter()
                .filter(|c| {
                    !crate::status::generate::KUBELET_CONDITIONS.contains(&c.type_.as_str())
                })
                .map(|c| (c.type_, c.status))
                .collect::<Vec<_>>()
        };
        return foreign(&old.pod) != foreign(&new.pod);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_api_pods_events_end_with_its_worker() {
        // (pod, expected)
        for (pod, want) in [
            (
                json!({"metadata": {"uid": "u", "resourceVersion": "7"}}),
                true,
            ),
            // an orphan the housekeeping found: only what the sandbox's labels tell
            (
                json!({"metadata": {"uid": "u", "name": "p", "namespace": "ns"}}),
                false,
            ),
            (
                json!({"metadata": {"uid": "u", "annotations": {"kubernetes.io/config.source": "file"}}}),
                false,
            ),
            (
                json!({"metadata": {"uid": "u", "resourceVersion": "7",
                                    "annotations": {"kubernetes.io/config.source": "api"}}}),
                true,
            ),
        ] {
            let p: Pod = serde_json::from_value(pod.clone()).unwrap();
            assert_eq!(events_end_with_worker(&p), want, "{pod}");
        }
    }

    fn update(pod: serde_json::Value) -> PodUpdate {
        PodUpdate {
            pod: Arc::new(serde_json::from_value(pod).unwrap()),
            removed: false,
            evict: None,
            resize_pending: None,
        }
    }

    fn base(extra_spec: serde_json::Value, status: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({"nodeName": "n", "containers": [{"name": "c", "image": "busybox"}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "1",
                         "generation": 1, "labels": {"a": "1"}},
            "spec": spec,
            "status": status,
        })
    }

    #[test]
    fn only_changes_the_worker_acts_on_wake_it() {
        let running =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        let old = base(json!({}), json!({"phase": "Pending"}));
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = old.clone();
            f(&mut v);
            v
        };
        let gates = json!({"readinessGates": [{"conditionType": "example.com/gate"}]});
        let cases: Vec<(&str, serde_json::Value, serde_json::Value, bool)> = vec![
            (
                "the watch echoing the kubelet's own status write",
                old.clone(),
                with(&|v| {
                    v["status"] = running.clone();
                    v["metadata"]["resourceVersion"] = json!("2");
                }),
                false,
            ),
            (
                "a label changed (downward API volumes)",
                old.clone(),
                with(&|v| v["metadata"]["labels"]["a"] = json!("2")),
                true,
            ),
            (
                "deletion",
                old.clone(),
                with(&|v| {
                    v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                    v["metadata"]["deletionGracePeriodSeconds"] = json!(30);
                }),
                true,
            ),
            (
                "the spec changed (image, activeDeadlineSeconds)",
                old.clone(),
                with(&|v| v["spec"]["containers"][0]["image"] = json!("busybox:2")),
                true,
            ),
            (
                "generation bumped",
                old.clone(),
                with(&|v| v["metadata"]["generation"] = json!(2)),
                true,
            ),
            (
                "a readiness gate's condition set by a controller",
                base(gates.clone(), json!({"phase": "Running"})),
                base(
                    gates.clone(),
                    json!({"phase": "Running", "conditions": [{"type": "example.com/gate", "status": "True"}]}),
                ),
                true,
            ),
            (
                "a gated pod whose kubelet conditions alone changed",
                base(gates.clone(), json!({"phase": "Pending"})),
                base(gates.clone(), running.clone()),
                false,
            ),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(wakes_worker(&update(a), &update(b)), want, "{name}");
        }
        let a = update(old.clone());
        let mut b = a.clone();
        b.removed = true;
        assert!(wakes_worker(&a, &b), "removal");
    }
}
