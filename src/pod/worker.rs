//! One pod's worker (k/k `pod_workers.go` `podWorkerLoop`): the per-UID state machine
//! ([`PodWorker::run`]) and the state it keeps between syncs. The dispatcher that creates
//! workers and routes updates to them is [`super::workers::PodWorkers`]; the bodies of the
//! worker's states (sync, terminate, clean up) are in [`super::sync`].

use super::actions::Waiting;
use super::workers::{PodUpdate, SyncContext, RESYNC_PERIOD, WORKER_BACKOFF_PERIOD};
use crate::backoff::Backoff;
use crate::kuberuntime::SyncFailed;
use crate::prober::{PodProbes, ProbeUpdate};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One pod's worker: the per-UID state machine ([`PodWorker::run`]) and the state it keeps
/// between syncs. The bodies of its states are in [`super::sync`].
pub(super) struct PodWorker {
    pub(super) ctx: Arc<SyncContext>,
    pub(super) rx: watch::Receiver<PodUpdate>,
    pub(super) notify: Arc<Notify>,
    pub(super) crash_backoff: Backoff,
    pub(super) image_backoff: Backoff,
    /// Why containers are waiting after the last sync (the Go kubelet's reasonCache).
    pub(super) waiting: BTreeMap<String, Waiting>,
    /// Probe tasks and results of this pod's running containers.
    pub(super) probes: PodProbes,
    pub(super) probe_rx: mpsc::Receiver<(String, ProbeUpdate)>,
    /// When the pod's volumes were last set up or refreshed.
    pub(super) volumes_refreshed: Option<Instant>,
    /// Where the pod's volumes are, from their last successful set-up in this worker: once set
    /// up, a failed refresh no longer holds back a container start ([`super::sync::volumes_for_start`]).
    pub(super) mounted_volumes: Option<crate::volume::VolumePaths>,
    /// The last volume set-up or refresh failed (its warning was logged; repeats go to debug).
    pub(super) volume_refresh_failing: bool,
    /// The wait after the last of the volume set-ups that failed in a row before any container
    /// could start ([`crate::volume::setup_retry_delay`]); None after a set-up that worked.
    pub(super) volume_setup_retry: Option<Duration>,
    /// When the last sync failed, how soon to sync again if sooner than the pod worker's
    /// back-off (a volume set-up to retry); taken by the next failed sync.
    pub(super) retry_failed_sync_after: Option<Duration>,
    /// The kubelet stopped the pod on its own (evicted, or refused at admission): every status
    /// written from then on carries this.
    pub(super) terminal_override: Option<Arc<crate::eviction::TerminalStatus>>,
    /// Admission was decided (the first sync).
    pub(super) admitted: bool,
    /// The pod finished on this node (no container will run again, or the API says Succeeded or
    /// Failed): the worker no longer syncs it, so it never gets another sandbox; it waits for
    /// the deletion (k/k pod worker: terminated pods are not synced again).
    pub(super) finished: bool,
    /// Where to report a finished eviction.
    pub(super) evicted_tx: mpsc::UnboundedSender<String>,
    /// An in-place resize is being applied (for the `ResizeCompleted` event).
    pub(super) resizing: bool,
    /// Why applying the last resize failed (the `PodResizeInProgress` condition's message).
    pub(super) resize_error: Option<String>,
    /// Until the first sync: the PLEG relist that sync may start from instead of asking the
    /// runtime is one started at or after this (when the dispatcher last forgot a worker, which
    /// may have left this UID's sandboxes behind; [`super::sync`]'s `runtime_status`).
    pub(super) first_sync_list_after: Option<Instant>,
}

/// The API copy of the pod is in phase Succeeded or Failed.
pub(super) fn phase_is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub(super) fn deleting(u: &PodUpdate) -> bool {
    u.removed || u.pod.metadata.deletion_timestamp.is_some()
}

impl PodWorker {
    /// The pod with the start time this kubelet reported for it (the API copy may not show it
    /// yet), as the Go active deadline handler reads it from the status manager.
    fn with_reported_start_time(&self, pod: &Pod) -> Pod {
        let mut p = pod.clone();
        if let Some(t) = self
            .ctx
            .status
            .last_written(super::uid(pod))
            .and_then(|s| s.start_time)
        {
            p.status.get_or_insert_with(Default::default).start_time = Some(t);
        }
        p
    }

    /// The stop of a pod past its `activeDeadlineSeconds` ([`super::active_deadline`]): a Normal
    /// `DeadlineExceeded` event, and the status that kills it with its grace period.
    fn active_deadline_exceeded(&self, pod: &Pod) -> Option<Arc<crate::eviction::TerminalStatus>> {
        let p = self.with_reported_start_time(pod);
        if !super::active_deadline::exceeded(&p, self.ctx.clock.now()) {
            return None;
        }
        tracing::info!("pod is past its active deadline; stopping it");
        self.ctx.recorder.pod(
            pod,
            None,
            false,
            super::active_deadline::REASON,
            super::active_deadline::MESSAGE.into(),
        );
        Some(Arc::new(crate::eviction::TerminalStatus {
            reason: super::active_deadline::REASON.into(),
            message: super::active_deadline::MESSAGE.into(),
            condition: None,
            grace_seconds: super::grace::requested_grace_seconds(pod),
            rejected: false,
        }))
    }

    /// When the worker must wake for the pod's active deadline (far in the future without one).
    fn active_deadline_wake(&self, pod: &Pod) -> Instant {
        let far = Instant::now() + Duration::from_secs(24 * 3600);
        let Some(at) = super::active_deadline::deadline(&self.with_reported_start_time(pod)) else {
            return far;
        };
        let d = at.as_nanosecond() - self.ctx.clock.now().as_nanosecond();
        Instant::now() + Duration::from_nanos(d.max(0) as u64)
    }

    /// Waits, in a state where nothing runs again (finished, evicted, rejected), for the next
    /// pod update; every [`RESYNC_PERIOD`] the terminal status is handed to the status manager
    /// again in case a write failed (it skips unchanged ones). False when the worker must stop.
    async fn wait_stopped(&mut self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = cancel.cancelled() => false,
            r = self.rx.changed() => r.is_ok(),
            _ = tokio::time::sleep(RESYNC_PERIOD) => {
                let latest = self.rx.borrow().pod.clone();
                self.write_status(&latest, true).await;
                true
            }
        }
    }

    /// The state machine of one pod UID (k/k `podWorkerLoop`): syncing while it lives, waiting
    /// once it finished or was stopped by the kubelet, terminating once it is deleted; it
    /// returns when the pod is cleaned up or deckhand shuts down.
    ///
    /// Each step (sync, terminate, evict, ...) is awaited through a `Box`: an idle worker's
    /// future then holds only this loop's own state, not the largest step's (about 34 KB of
    /// the pod worker's future was the inlined sync; one such future per pod, issue 15).
    pub(super) async fn run(mut self, cancel: CancellationToken) {
        let mut next_wake: Option<Instant> = None;
        // kubelet_pod_worker_duration_seconds's operation_type for the next sync (Go's
        // SyncPodType): the first sync creates, one after a change of the pod updates
        let mut sync_kind = "create";
        {
            let uid = super::uid(&self.rx.borrow().pod).to_string();
            let latency = super::startup_latency::tracker();
            latency.record_first_seen(&uid, std::time::SystemTime::now());
        }
        loop {
            let update = self.rx.borrow_and_update().clone();
            if deleting(&update) {
                Box::pin(self.terminate(update, &cancel)).await;
                return;
            }
            if !self.admitted {
                self.admitted = true;
                if let Some(status) = Box::pin(self.admission(&update.pod)).await {
                    self.terminal_override = Some(Arc::new(status));
                    Box::pin(self.write_status(&update.pod, true)).await;
                }
            }
            if let Some(ev) = update.evict.clone() {
                if self.terminal_override.is_none() {
                    Box::pin(self.evict(&update.pod, ev)).await;
                }
            }
            if self.terminal_override.is_some() {
                // Stopped by the kubelet: nothing runs again; wait for the deletion.
                // The status is re-written now and then in case a write failed (the status
                // manager skips unchanged ones).
                let _ = self.evicted_tx.send(super::uid(&update.pod).to_string());
                if !Box::pin(self.wait_stopped(&cancel)).await {
                    return;
                }
                continue;
            }
            if !self.finished && !phase_is_terminal(&update.pod) {
                if let Some(stop) = self.active_deadline_exceeded(&update.pod) {
                    Box::pin(self.evict(&update.pod, stop)).await;
                    continue;
                }
            }
            if self.finished || phase_is_terminal(&update.pod) {
                if !self.finished {
                    // The API copy says the pod finished (e.g. before deckhand restarted):
                    // nothing runs again; stop whatever is left (k/k UpdatePod of a pod whose
                    // status and runtime are terminal goes straight to terminated).
                    Box::pin(self.finish(&update.pod)).await;
                }
                if !Box::pin(self.wait_stopped(&cancel)).await {
                    return;
                }
                continue;
            }
            // Sync; abandon it if the pod is deleted meanwhile (e.g. during a long pull).
            let started = Instant::now();
            if sync_kind == "create" {
                let latency = super::startup_latency::tracker();
                if let Some(seen) = latency.first_seen(super::uid(&update.pod)) {
                    let waited = std::time::SystemTime::now().duration_since(seen);
                    crate::server::metrics::observe_pod_worker_start(waited.unwrap_or_default());
                }
            }
            let outcome = {
                let mut rx = self.rx.clone();
                let pod = update.pod.clone();
                let mut sync = Box::pin(self.sync(&pod));
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
            if outcome.is_some() {
                crate::server::metrics::observe_pod_worker(sync_kind, started.elapsed());
            }
            sync_kind = "sync";
            next_wake = match outcome {
                None => continue,
                Some(Ok(next)) => next.map(|t| {
                    let d = t.as_nanosecond() - self.ctx.clock.now().as_nanosecond();
                    Instant::now() + Duration::from_nanos(d.max(0) as u64)
                }),
                Some(Err(SyncFailed)) => Some(
                    Instant::now()
                        + self
                            .retry_failed_sync_after
                            .take()
                            .map_or(WORKER_BACKOFF_PERIOD, |d| d.min(WORKER_BACKOFF_PERIOD)),
                ),
            }
            .or(next_wake.filter(|w| *w > Instant::now()));
            let wake = next_wake
                .unwrap_or_else(|| Instant::now() + RESYNC_PERIOD)
                .min(Instant::now() + RESYNC_PERIOD)
                .min(self.active_deadline_wake(&self.rx.borrow().pod.clone()));
            tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.rx.changed() => {
                    if r.is_err() { return; }
                    sync_kind = "update";
                }
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
}
