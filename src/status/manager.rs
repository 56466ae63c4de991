//! The status manager: the single path by which pod statuses reach the API server
//! (k/k `pkg/kubelet/status/status_manager.go`). It skips statuses equal to the last one
//! written, sends a JSON merge patch computed against the API server's copy (so a field that
//! went away, such as `state.waiting` when a container starts, is removed), and carries the pod
//! UID in the patch so a pod deleted and re-created under the same name is never written to.

use crate::heap::ShrinkingMap;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Errors writing a pod status.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The PATCH of `pods/<name>/status` failed.
    #[error("patching status of pod {namespace}/{name} ({uid}): {source}")]
    Patch {
        /// Pod namespace.
        namespace: String,
        /// Pod name.
        name: String,
        /// Pod UID.
        uid: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Writes pod statuses; one per kubelet, shared by all pod workers (keyed by pod UID). Cheap to
/// clone (one shared state).
///
/// Pod workers hand statuses over with [`StatusManager::queue`], which never waits for the API
/// server: the newest status per pod UID replaces an older one not written yet, and one writer
/// task per node ([`StatusManager::run`]) sends them, as the Go status manager's
/// `podStatusChannel` and `syncBatch` do, though those of different pods side by side (up to
/// [`WRITE_CONCURRENCY`] at once) where the Go one sends one at a time. A write that fails
/// stays queued (unless a newer status replaced it) and is retried with a back-off, so a status
/// produced while the API server is away is sent once it is back.
/// [`StatusManager::set_pod_status`] writes at once, ordered with the writer task, for the
/// terminal status that must land before the pod object is deleted.
#[derive(Clone)]
pub struct StatusManager {
    inner: Arc<Inner>,
}

/// Lock order, where more than one is held at a time: `statics`, `mirrors`, `last_written`,
/// `written_rv` (as `reconcile_mirrors` takes them); `pending` is never held with another.
struct Inner {
    /// None in standalone mode: statuses are only kept here.
    client: Option<kube::Client>,
    /// Keyed by the UID written to (a static pod's mirror pod UID).
    last_written: Mutex<ShrinkingMap<String, PodStatus>>,
    /// The pod's resourceVersion our last write produced, by the UID written to.
    written_rv: Mutex<ShrinkingMap<String, u64>>,
    mirrors: crate::source::mux::MirrorUids,
    /// Static pods by their own UID, as last handed to [`StatusManager::write`]: what the
    /// periodic mirror reconcile ([`StatusManager::reconcile_mirrors`]) writes for.
    statics: Mutex<HashMap<String, Pod>>,
    /// Statuses not written yet, by pod UID: the newest wins.
    pending: Mutex<HashMap<String, (Pod, PodStatus)>>,
    wake: tokio::sync::Notify,
    /// Held around every API write, so the writer task and [`StatusManager::set_pod_status`]
    /// never send two statuses of one pod out of order.
    writing: tokio::sync::Mutex<()>,
}

/// The part of a status the kubelet owns, as JSON: every field but the conditions of types
/// other components own (`DisruptionTarget`, readiness gates, ...).
fn kubelet_owned(s: &PodStatus) -> Value {
    let mut s = s.clone();
    if let Some(cs) = s.conditions.as_mut() {
        cs.retain(|c| crate::status::generate::KUBELET_CONDITIONS.contains(&c.type_.as_str()));
    }
    serde_json::to_value(&s).unwrap_or(Value::Null)
}

/// `status` with the conditions other components own taken from `api` (the API copy's win),
/// so that correcting the API copy never drops them.
fn with_foreign_conditions(status: &PodStatus, api: &PodStatus) -> PodStatus {
    let mut out = status.clone();
    let kubelet = |t: &str| crate::status::generate::KUBELET_CONDITIONS.contains(&t);
    let mut conditions: Vec<_> = api
        .conditions
        .iter()
        .flatten()
        .filter(|c| !kubelet(&c.type_))
        .cloned()
        .collect();
    conditions.extend(
        status
            .conditions
            .iter()
            .flatten()
            .filter(|c| kubelet(&c.type_))
            .cloned(),
    );
    out.conditions = (!conditions.is_empty()).then_some(conditions);
    out
}

/// Whether the API server's copy of a pod's status must be corrected although the status to
/// write equals the last one written (k/k status manager `needsReconcile`): the copy is newer
/// than our last write (`api_resource_version` > `written_resource_version`) and differs from
/// what we wrote in a field the kubelet writes (fields only the API copy has, and conditions
/// other components own, do not count). A copy not newer than our write is the watch lagging
/// behind it, not a change; unknown or non-numeric resource versions never reconcile.
pub fn needs_reconcile(
    api_status: &PodStatus,
    api_resource_version: Option<&str>,
    last_written: &PodStatus,
    written_resource_version: Option<u64>,
) -> bool {
    let (Some(api_rv), Some(ours)) = (
        api_resource_version.and_then(|v| v.parse::<u64>().ok()),
        written_resource_version,
    ) else {
        return false;
    };
    if api_rv <= ours {
        return false;
    }
    let api = kubelet_owned(api_status);
    let ours = kubelet_owned(last_written);
    match merge_patch_diff(&api, &ours) {
        Some(Value::Object(diff)) => diff.values().any(|v| !v.is_null()),
        Some(_) => true,
        None => false,
    }
}

/// How often the writer task compares each mirror pod's status with the last status written
/// for its static pod (k/k status manager `syncPeriod`, 10 s, whose `syncBatch(all)` runs
/// `needsReconcile`). A regular pod needs no tick: a change to its API copy reaches its pod
/// worker through the watch, and the worker's next write reconciles it. A mirror pod's does not.
pub const MIRROR_RECONCILE_PERIOD: Duration = Duration::from_secs(10);

/// The static pods (by their own UID) whose mirror pod's status must be corrected now: the
/// mirror's copy is newer than our last write on it and differs from it ([`needs_reconcile`]).
/// `mirrors` maps a static pod's UID to its mirror pod's UID, status and resourceVersion;
/// `last_written` and `written_rv` are keyed by the mirror pod's UID. A static pod with no
/// mirror pod, or nothing written on it yet, is left to its pod worker.
pub fn mirrors_to_reconcile<'a>(
    statics: impl IntoIterator<Item = &'a str>,
    mirrors: &HashMap<String, (String, PodStatus, Option<String>)>,
    last_written: &HashMap<String, PodStatus>,
    written_rv: &HashMap<String, u64>,
) -> Vec<String> {
    statics
        .into_iter()
        .filter(|uid| {
            let Some((mirror_uid, api_status, api_rv)) = mirrors.get(*uid) else {
                return false;
            };
            let Some(last) = last_written.get(mirror_uid) else {
                return false;
            };
            needs_reconcile(
                api_status,
                api_rv.as_deref(),
                last,
                written_rv.get(mirror_uid).copied(),
            )
        })
        .map(str::to_string)
        .collect()
}

/// First wait before the writer retries statuses whose write failed (doubling).
pub const WRITE_RETRY_INITIAL: Duration = Duration::from_millis(500);
/// Longest wait between two retries of failed status writes.
pub const WRITE_RETRY_MAX: Duration = Duration::from_secs(5);
/// Deadline of one status PATCH, so a server that stops answering cannot hold the writer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How many status PATCHes of different pods the writer has in flight at once. The Go status
/// manager sends one at a time under client-side rate limits (`kubeAPIQPS` 50, `kubeAPIBurst`
/// 100); one at a time, 30 pods starting together left the last pod's Running status waiting
/// behind the other pods' writes (issue 15's 30-at-once figure), while the API server and etcd
/// take concurrent writes together (etcd commits them in one batch). Writes of one pod stay in
/// order: a pod is once in a batch, and the batch holds the write lock.
pub const WRITE_CONCURRENCY: usize = 8;

/// Carries over from the previous status of the same pod what a newer one must keep (k/k status
/// manager `updateStatusInternal`): `startTime` once set, and each condition's
/// `lastTransitionTime` while its status did not change. A pod worker generates statuses from
/// the pod object it started the sync with, which may not show the statuses queued since.
///
/// Also each container's `restartCount` never goes down (issue 14: "restartCount never goes
/// back"). The count comes from the newest container the runtime still has; when that is gone
/// and an older one is left (the garbage collector removed the newer ones of a terminating pod
/// while containerd kept a half-started first attempt it would not remove), the count read
/// from it is lower than the one already reported. The Go kubelet keeps the old count for
/// containers the runtime lost (`convertToAPIContainerStatuses`); this keeps it in every case.
pub fn carry_over(old: &PodStatus, new: &mut PodStatus) {
    if old.start_time.is_some() {
        new.start_time = old.start_time.clone();
    }
    for (old_list, new_list) in [
        (&old.container_statuses, &mut new.container_statuses),
        (
            &old.init_container_statuses,
            &mut new.init_container_statuses,
        ),
        (
            &old.ephemeral_container_statuses,
            &mut new.ephemeral_container_statuses,
        ),
    ] {
        for c in new_list.iter_mut().flatten() {
            if let Some(o) = old_list.iter().flatten().find(|o| o.name == c.name) {
                c.restart_count = c.restart_count.max(o.restart_count);
            }
        }
    }
    let old_conditions = old.conditions.as_deref().unwrap_or(&[]);
    for c in new.conditions.iter_mut().flatten() {
        if let Some(o) = old_conditions
            .iter()
            .find(|o| o.type_ == c.type_ && o.status == c.status)
        {
            if o.last_transition_time.is_some() {
                c.last_transition_time = o.last_transition_time.clone();
            }
        }
    }
}

/// Reflects the pod's `metadata.generation` in the status the kubelet writes (k/k
/// `PodObservedGenerationTracking`, on since 1.34): `status.observedGeneration` (never lower
/// than what `old` already reported) and `observedGeneration` on each condition the kubelet owns
/// (PodReadyToStartContainers, Initialized, Ready, ContainersReady, PodScheduled). A pod without
/// a generation (a static pod read from a file) is left as it is.
pub fn observe_generation(pod: &Pod, old: Option<&PodStatus>, new: &mut PodStatus) {
    let Some(generation) = pod.metadata.generation.filter(|g| *g > 0) else {
        return;
    };
    let previous = old.and_then(|o| o.observed_generation).unwrap_or(0);
    new.observed_generation = Some(generation.max(previous));
    for c in new.conditions.iter_mut().flatten() {
        if crate::status::generate::KUBELET_CONDITIONS.contains(&c.type_.as_str()) {
            c.observed_generation = Some(generation);
        }
    }
}

/// A JSON merge patch (RFC 7386) that turns `old` into `new`: changed keys are set, removed keys
/// are set to null, arrays are replaced whole. `None` when nothing differs.
pub fn merge_patch_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_patch_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        if !nv.is_null() {
                            out.insert(k.clone(), nv.clone());
                        }
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (o, n) if o == n => None,
        (_, n) => Some(n.clone()),
    }
}

impl StatusManager {
    fn with_client(client: Option<kube::Client>) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                last_written: Default::default(),
                written_rv: Default::default(),
                mirrors: Default::default(),
                statics: Mutex::new(HashMap::new()),
                pending: Mutex::new(HashMap::new()),
                wake: tokio::sync::Notify::new(),
                writing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// A status manager writing through `client` (its writer task is [`StatusManager::run`]).
    pub fn new(client: kube::Client) -> Self {
        Self::with_client(Some(client))
    }

    /// A status manager with no API server (standalone mode, as the Go status manager with a
    /// nil client: "Kubernetes client is nil, not starting status manager"): statuses are kept
    /// locally, keyed by the pod's own UID, and never sent.
    pub fn standalone() -> Self {
        Self::with_client(None)
    }

    /// The static pod UID → mirror pod map this manager reads (filled by the source merge,
    /// [`crate::source::mux`]). A static pod's status is written on its mirror pod, as the Go
    /// status manager's `translatePodUID` does; without a mirror pod yet it is not written.
    pub fn mirror_uids(&self) -> crate::source::mux::MirrorUids {
        self.inner.mirrors.clone()
    }

    /// Hands `status` of `pod` to the writer task and returns at once (k/k status manager
    /// `SetPodStatus`). A status for the same pod UID that was not written yet is replaced.
    pub fn queue(&self, pod: &Pod, status: &PodStatus) {
        let status = self.with_carry_over(pod, status);
        if self.inner.client.is_none() {
            self.keep_locally(pod, &status);
            return;
        }
        self.inner
            .pending
            .lock()
            .unwrap()
            .insert(crate::pod::uid(pod).to_string(), (pod.clone(), status));
        self.inner.wake.notify_one();
    }

    /// `status` with [`carry_over`] applied from the newest status known for the pod: queued,
    /// else last written (on the pod or its mirror pod), else the API copy.
    fn with_carry_over(&self, pod: &Pod, status: &PodStatus) -> PodStatus {
        let uid = crate::pod::uid(pod);
        let known = self.latest(uid).or_else(|| pod.status.clone());
        let mut status = status.clone();
        if let Some(old) = &known {
            carry_over(old, &mut status);
        }
        observe_generation(pod, known.as_ref(), &mut status);
        let phase = status.phase.as_deref().unwrap_or("Pending");
        if let Some(d) = crate::pod::startup_latency::tracker().status_generated(uid, phase) {
            crate::server::metrics::observe_pod_start_duration(d);
        }
        status
    }

    /// How many statuses wait for the writer (for tests and `/metrics`).
    pub fn pending_len(&self) -> usize {
        self.inner.pending.lock().unwrap().len()
    }

    /// The writer task: sends queued statuses until `cancel`, retrying failed writes with a
    /// back-off ([`WRITE_RETRY_INITIAL`] doubling to [`WRITE_RETRY_MAX`]). One warning per run
    /// of failures, not one per attempt.
    pub async fn run(&self, cancel: tokio_util::sync::CancellationToken) {
        let mut retry = WRITE_RETRY_INITIAL;
        let mut failing = false;
        let mut reconcile = tokio::time::interval_at(
            tokio::time::Instant::now() + MIRROR_RECONCILE_PERIOD,
            MIRROR_RECONCILE_PERIOD,
        );
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let failed = {
                // The lock is held from the drain to the last write, so a direct write
                // (set_pod_status) comes wholly before the batch (and drops its pod's queued
                // status) or wholly after it: an older status never lands after a newer one.
                let _w = self.inner.writing.lock().await;
                let batch: Vec<(String, (Pod, PodStatus))> =
                    self.inner.pending.lock().unwrap().drain().collect();
                // Up to WRITE_CONCURRENCY writes at once (each pod is once in the batch); after
                // a failure no further write of the batch is started.
                let stop = AtomicBool::new(false);
                // what stays queued: (uid, pod, status, the error if its write failed)
                let unwritten: Vec<(String, Pod, PodStatus, Option<StatusError>)> =
                    futures::stream::iter(batch)
                        .map(|(uid, (pod, status))| {
                            let stop = &stop;
                            async move {
                                if stop.load(Ordering::SeqCst) {
                                    return Some((uid, pod, status, None));
                                }
                                let e = self.write(&pod, &status).await.err()?;
                                stop.store(true, Ordering::SeqCst);
                                Some((uid, pod, status, Some(e)))
                            }
                        })
                        .buffer_unordered(WRITE_CONCURRENCY)
                        .filter_map(futures::future::ready)
                        .collect()
                        .await;
                let mut failed = 0usize;
                for (uid, pod, status, error) in unwritten {
                    if let Some(e) = error {
                        if failed == 0 && !failing {
                            tracing::warn!(error = %e, "status update failed; will retry");
                        } else {
                            tracing::debug!(error = %e, "status update failed again");
                        }
                        failed += 1;
                    }
                    // keep it (failed, or not started after a failure) for the retry, unless a
                    // newer status came meanwhile
                    self.inner
                        .pending
                        .lock()
                        .unwrap()
                        .entry(uid)
                        .or_insert((pod, status));
                }
                failed
            };
            if failed > 0 {
                failing = true;
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(WRITE_RETRY_MAX);
                continue;
            }
            if failing {
                tracing::info!("status updates succeed again");
                failing = false;
            }
            retry = WRITE_RETRY_INITIAL;
            if self.pending_len() > 0 {
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.inner.wake.notified() => {}
                _ = reconcile.tick() => self.reconcile_mirrors().await,
            }
        }
    }

    /// Rewrites the last status of each static pod whose mirror pod's status someone else
    /// changed (the node lifecycle controller's Ready=False, say): one pass of the Go status
    /// manager's periodic `syncBatch(true)` for mirror pods. A failed write is left to the
    /// next pass.
    pub async fn reconcile_mirrors(&self) {
        let _w = self.inner.writing.lock().await;
        let todo: Vec<(Pod, PodStatus)> = {
            let statics = self.inner.statics.lock().unwrap();
            let mirrors = self.inner.mirrors.lock().unwrap();
            let written = self.inner.last_written.lock().unwrap();
            let rvs = self.inner.written_rv.lock().unwrap();
            mirrors_to_reconcile(statics.keys().map(String::as_str), &mirrors, &written, &rvs)
                .into_iter()
                .filter_map(|uid| {
                    let pod = statics.get(&uid)?.clone();
                    let status = written.get(&mirrors.get(&uid)?.0)?.clone();
                    Some((pod, status))
                })
                .collect()
        };
        for (pod, status) in todo {
            if let Err(e) = self.write(&pod, &status).await {
                tracing::debug!(error = %e, "mirror pod status not reconciled; next pass retries");
            }
        }
    }

    /// Writes `status` for `pod` now, unless it equals the last status written for this UID; a
    /// queued older status of the pod is dropped. Returns whether a write happened.
    ///
    /// Errors: [`StatusError::Patch`]; the caller retries.
    pub async fn set_pod_status(&self, pod: &Pod, status: &PodStatus) -> Result<bool, StatusError> {
        let status = self.with_carry_over(pod, status);
        if self.inner.client.is_none() {
            self.keep_locally(pod, &status);
            return Ok(false);
        }
        let _w = self.inner.writing.lock().await;
        self.inner
            .pending
            .lock()
            .unwrap()
            .remove(crate::pod::uid(pod));
        self.write(pod, &status).await
    }

    fn keep_locally(&self, pod: &Pod, status: &PodStatus) {
        self.inner
            .last_written
            .lock()
            .unwrap()
            .insert(crate::pod::uid(pod).to_string(), status.clone());
    }

    /// The PATCH of one status. The patch is computed against the last written status, or the
    /// pod's status as the API server last showed it.
    async fn write(&self, pod: &Pod, status: &PodStatus) -> Result<bool, StatusError> {
        let Some(client) = &self.inner.client else {
            self.keep_locally(pod, status);
            return Ok(false);
        };
        // a static pod's status lives on its mirror pod: that is the API copy to reconcile with
        // (k/k needsReconcile)
        let (uid, api_status, api_rv) = if crate::source::file::is_static(pod) {
            self.inner
                .statics
                .lock()
                .unwrap()
                .insert(crate::pod::uid(pod).to_string(), pod.clone());
            match self.inner.mirrors.lock().unwrap().get(crate::pod::uid(pod)) {
                Some((mirror_uid, mirror_status, mirror_rv)) => {
                    (mirror_uid.clone(), mirror_status.clone(), mirror_rv.clone())
                }
                None => return Ok(false),
            }
        } else {
            (
                crate::pod::uid(pod).to_string(),
                pod.status.clone().unwrap_or_default(),
                pod.metadata.resource_version.clone(),
            )
        };
        let mut reconciled = None;
        let base = {
            let cache = self.inner.last_written.lock().unwrap();
            let written_rv = self.inner.written_rv.lock().unwrap().get(&uid).copied();
            match cache.get(&uid) {
                Some(last) if needs_reconcile(&api_status, api_rv.as_deref(), last, written_rv) => {
                    // someone else changed the status: patch against the API server's copy
                    tracing::info!(
                        "the API copy of the pod status differs from the last write; reconciling"
                    );
                    reconciled = Some(with_foreign_conditions(status, &api_status));
                    api_status
                }
                Some(last) if last == status => return Ok(false),
                Some(last) => last.clone(),
                None => api_status,
            }
        };
        let status = reconciled.as_ref().unwrap_or(status);
        let old = serde_json::to_value(&base).unwrap_or(Value::Null);
        let new = serde_json::to_value(status).unwrap_or(Value::Null);
        let Some(diff) = merge_patch_diff(&old, &new) else {
            self.inner
                .last_written
                .lock()
                .unwrap()
                .insert(uid, status.clone());
            return Ok(false);
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::json!({ "metadata": { "uid": uid }, "status": diff });
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let fail = |source: kube::Error| {
            // Forget the cache so the next attempt diffs against the API server's copy.
            self.inner.last_written.lock().unwrap().remove(&uid);
            StatusError::Patch {
                namespace: ns.clone(),
                name: name.clone(),
                uid: uid.clone(),
                source,
            }
        };
        let sent = tokio::time::timeout(
            WRITE_TIMEOUT,
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match sent {
            Ok(Ok(written)) => {
                crate::pod::startup_latency::tracker()
                    .record_status_updated(&written, std::time::SystemTime::now());
                let rv = written.metadata.resource_version.as_deref();
                let mut rvs = self.inner.written_rv.lock().unwrap();
                match rv.and_then(|v| v.parse::<u64>().ok()) {
                    Some(v) => rvs.insert(uid.clone(), v),
                    None => rvs.remove(&uid),
                };
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 || s.code == 409 => {
                // The pod is gone, or another pod now has its name (UID precondition): there is
                // nothing to write to; do not retry.
                tracing::debug!(code = s.code, "status not written: the pod object is gone");
                return Ok(false);
            }
            Ok(Err(source)) => return Err(fail(source)),
            Err(_) => {
                return Err(fail(kube::Error::Service(
                    format!("no answer within {WRITE_TIMEOUT:?}").into(),
                )))
            }
        }
        self.inner
            .last_written
            .lock()
            .unwrap()
            .insert(uid, status.clone());
        Ok(true)
    }

    /// The last status written for `uid`, if any.
    pub fn last_written(&self, uid: &str) -> Option<PodStatus> {
        self.inner.last_written.lock().unwrap().get(uid).cloned()
    }

    /// The newest status this kubelet produced for the pod `uid` (a static pod's own UID):
    /// queued, else last written on it or on its mirror pod (k/k status manager
    /// `GetPodStatus`). `None` when there is none yet.
    pub fn latest(&self, uid: &str) -> Option<PodStatus> {
        if let Some((_, s)) = self.inner.pending.lock().unwrap().get(uid) {
            return Some(s.clone());
        }
        if let Some(s) = self.inner.last_written.lock().unwrap().get(uid) {
            return Some(s.clone());
        }
        let mirror = self.mirror_uid(uid)?;
        self.inner
            .last_written
            .lock()
            .unwrap()
            .get(&mirror)
            .cloned()
    }

    /// The UID of the mirror pod of the static pod `uid`, if it has one. Takes the `mirrors`
    /// lock alone and releases it, so callers may take `last_written` afterwards without
    /// holding both in the wrong order (`reconcile_mirrors` takes `mirrors` first).
    fn mirror_uid(&self, uid: &str) -> Option<String> {
        self.inner
            .mirrors
            .lock()
            .unwrap()
            .get(uid)
            .map(|(m, _, _)| m.clone())
    }

    /// Drops what is cached or queued for a pod that is gone.
    pub fn forget(&self, uid: &str) {
        // `pending` is drained by every write batch: its size does not follow the pod count.
        self.inner.pending.lock().unwrap().remove(uid);
        self.inner.statics.lock().unwrap().remove(uid);
        let mirror = self.mirror_uid(uid);
        let mut last_written = self.inner.last_written.lock().unwrap();
        let mut written_rv = self.inner.written_rv.lock().unwrap();
        for uid in std::iter::once(uid).chain(mirror.as_deref()) {
            last_written.remove(uid);
            written_rv.remove(uid);
        }
    }
}

#[cfg(test)]
mod tests;
