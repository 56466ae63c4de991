//! Housekeeping of the pod workers: cleaning up what is left of pods that are gone (k/k
//! `kubelet_pods.go` `HandlePodCleanups`, which the Go kubelet's sync loop runs every 2 s).
//!
//! Two triggers:
//! - a full list from the pod sources ([`PodWorkers::reconcile`]): workers whose pod is no
//!   longer listed were deleted while the watch was down, and every orphan is cleaned up at
//!   once;
//! - every housekeeping period ([`crate::systemd::SyncLoopMonitor::BEAT`], 2 s, as in Go)
//!   ([`PodWorkers::sweep_orphans`]), against the pod manager's pods: an orphan that a worker
//!   failed to remove (its runtime was away longer than the worker waited, a busy mount) is
//!   taken up again without waiting for the next full list, which may be hours away. A
//!   stubborn orphan is retried every [`ORPHAN_RETRY_PERIOD`], and logged at info only the
//!   first time, so a leftover the node cannot remove does not flood the log.
//!
//! Orphans are: pod sandboxes in the runtime, pod directories under `<root-dir>/pods/` and pod
//! cgroups whose pod UID is neither a pod the sources deliver (static pods included) nor
//! handled by a worker.

use super::workers::PodWorkers;
use crate::cri::labels;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long the periodic sweep waits before cleaning up the same orphan again.
pub const ORPHAN_RETRY_PERIOD: Duration = Duration::from_secs(60);

/// When each orphan (keyed `sandbox/<uid>`, `dir/<uid>`, `cgroup/<uid>`) was last cleaned up.
#[derive(Debug, Default)]
pub struct OrphanRetry {
    last: HashMap<String, Instant>,
}

impl OrphanRetry {
    /// Whether to clean up the orphan `key` at `now`: `Some(true)` the first time it is seen,
    /// `Some(false)` when [`ORPHAN_RETRY_PERIOD`] has passed since the last attempt or `force`
    /// (after a full list everything is tried), `None` otherwise. A `Some` records the attempt.
    pub fn due(&mut self, key: &str, now: Instant, force: bool) -> Option<bool> {
        let first = match self.last.get(key) {
            None => true,
            Some(t) if force || now.duration_since(*t) >= ORPHAN_RETRY_PERIOD => false,
            Some(_) => return None,
        };
        self.last.insert(key.to_string(), now);
        Some(first)
    }

    /// Forgets the orphans not in `still` (gone since).
    pub fn retain(&mut self, still: &HashSet<String>) {
        self.last.retain(|k, _| still.contains(k));
    }
}

/// The oldest sandbox list the periodic orphan sweep uses: the PLEG's default relist period, so
/// that the sweep (every 2 s) takes the relist's list and does not call the runtime itself.
pub const SANDBOX_LIST_MAX_AGE: Duration = Duration::from_secs(5);

/// The sandbox list the orphan sweep at `now` may use: one started at or after the returned time
/// ([`crate::cri::CriClient::list_pod_sandboxes_since`]). At most [`SANDBOX_LIST_MAX_AGE`] old,
/// and taken after the last worker was forgotten (`last_forgotten`): an older list may still
/// show the sandbox that worker removed, which would be mistaken for an orphan. After a full
/// list of the pod sources (`force`) the runtime is asked again.
pub fn sandbox_list_after(now: Instant, last_forgotten: Instant, force: bool) -> Instant {
    if force {
        return now;
    }
    now.checked_sub(SANDBOX_LIST_MAX_AGE)
        .unwrap_or(now)
        .max(last_forgotten)
}

/// How long pods must have been quiet before the heap is trimmed: no pod worker forgotten, no
/// pod event from the sources (the watch echoes every status write, and a pod's worker starts
/// from one; an orphan's clean-up worker counts when it is forgotten) and no event from PLEG. The syncs a burst set off (sandboxes, containers, status
/// writes) are then done allocating ([`should_trim_heap`]).
pub const HEAP_TRIM_SETTLE: Duration = Duration::from_secs(20);

/// The longest a trim waits for pods to settle, from the first pod activity after the last
/// trim: a node whose pods keep changing still trims about this often ([`should_trim_heap`]).
pub const HEAP_TRIM_MAX_WAIT: Duration = Duration::from_secs(120);

/// Whether to give the heap's free memory back to the OS now. Only after pod activity (see
/// [`HEAP_TRIM_SETTLE`]) since the last trim (`since_activity`: how long ago the first and the
/// last of it were; None if there was none), and once that activity stopped
/// [`HEAP_TRIM_SETTLE`] ago or began [`HEAP_TRIM_MAX_WAIT`] ago. An idle node never trims, and
/// the first pod after a quiet hour does not trim at once: it waits for its own activity to
/// settle. The last trim itself needs no spacing: the activity a trim waits for came after it.
///
/// glibc keeps what a burst allocated. RSS stayed at ~46 MiB after 107 pods came and went,
/// against ~21 MiB before them, and `malloc_trim` returned 16 MiB of it. With 248 pods running
/// (`--max-pods=250`, 2026-12-06) the workers all start within seconds of each other, but their
/// syncs run for most of a minute after that: a trim 20 s after the last worker started came
/// before the last pods were Running, and a trim by hand a minute later still took anonymous
/// memory from 28.6 to 21.5 MiB.
pub fn should_trim_heap(since_activity: Option<(Duration, Duration)>) -> bool {
    since_activity.is_some_and(|(since_first, since_last)| {
        since_last >= HEAP_TRIM_SETTLE || since_first >= HEAP_TRIM_MAX_WAIT
    })
}

/// When pods were first and last active after the last heap trim ([`should_trim_heap`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HeapTrimClock {
    activity: Option<(Instant, Instant)>,
}

impl HeapTrimClock {
    /// Pods were active at `now`: a pod worker was forgotten, the sources sent a pod event, or
    /// PLEG an event.
    pub fn pod_activity(&mut self, now: Instant) {
        let first = self.activity.map_or(now, |(first, _)| first);
        self.activity = Some((first, now));
    }

    /// Whether to trim the heap at `now` ([`should_trim_heap`]); if so, the activity so far
    /// counts as trimmed.
    pub fn take_due(&mut self, now: Instant) -> bool {
        let since = |t: Instant| now.saturating_duration_since(t);
        let due = should_trim_heap(
            self.activity
                .map(|(first, last)| (since(first), since(last))),
        );
        if due {
            self.activity = None;
        }
        due
    }
}

/// Gives free heap memory back to the OS (glibc's `malloc_trim(0)`; nothing elsewhere).
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it takes glibc's arena locks itself and only
    // releases memory that is free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The most malloc arenas deckhand's threads use ([`limit_heap_arenas`]).
pub const HEAP_ARENA_MAX: i32 = 2;

/// Caps glibc's malloc arenas at [`HEAP_ARENA_MAX`] (`mallopt(M_ARENA_MAX)`; the default is
/// eight per core). Call first thing in `main`, before any thread starts. Each tokio worker and
/// blocking thread otherwise gets an arena of its own, and a pod burst leaves each of them
/// fragmented: after 100 pods came and went, 15 arenas held 27 MB for 5.8 MB in use and RSS
/// grew with every burst (issue 15). deckhand's allocations are small and short, so two arenas
/// cost it no measurable contention.
pub fn limit_heap_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, HEAP_ARENA_MAX);
    }
}

/// Logs the clean-up of an orphan: at info the first time, then at debug.
fn log_cleanup(first: bool, uid: &str, what: &str) {
    if first {
        tracing::info!(pod.uid = %uid, "cleaning up orphaned {what}");
    } else {
        tracing::debug!(pod.uid = %uid, "cleaning up orphaned {what} again");
    }
}

impl PodWorkers {
    /// Called every housekeeping period: trims the heap once pod activity has settled
    /// ([`HeapTrimClock`]), in a blocking task (it walks every arena).
    pub(super) fn trim_heap_after_pod_activity(&mut self) {
        if self.heap_trim.take_due(Instant::now()) {
            tokio::task::spawn_blocking(trim_heap);
        }
    }

    /// After a full list (`present`: the UIDs the sources list, static pods included): pods
    /// with workers that are no longer listed were deleted while the watch was down, and
    /// orphans were left by pods deleted while deckhand was down. Both are killed and removed.
    pub(super) async fn reconcile(&mut self, present: HashSet<String>, cancel: &CancellationToken) {
        for pod in self.worker_pods_not_in(&present) {
            self.update(pod, true, cancel).await;
        }
        self.clean_up_orphans(&present, true, cancel).await;
        self.states.mark_synced();
    }

    /// The periodic sweep: orphans against the pod manager's pods, once the sources have
    /// synced.
    pub(super) async fn sweep_orphans(&mut self, cancel: &CancellationToken) {
        if !self.states.synced() {
            return;
        }
        let Some(present) = self.pod_manager.as_ref().and_then(|m| m.uids_when_synced()) else {
            return;
        };
        // Finished workers of pods the sources no longer have (their deletion was missed):
        // forgotten, as k/k `SyncKnownPods` does for pods the pod manager does not know.
        for uid in self.finished_workers() {
            if !present.contains(&uid) {
                self.forget_worker(&uid);
            }
        }
        self.clean_up_orphans(&present, false, cancel).await;
    }

    /// Whether to clean up the orphan `kind/uid` now ([`OrphanRetry::due`]). It is remembered
    /// in `seen` even while a worker removes it, so that a failed removal is retried after
    /// [`ORPHAN_RETRY_PERIOD`], not at the next sweep; a worker's orphan is left to it.
    fn orphan_due(
        &mut self,
        kind: &str,
        uid: &str,
        now: Instant,
        force: bool,
        seen: &mut HashSet<String>,
    ) -> Option<bool> {
        let key = format!("{kind}/{uid}");
        seen.insert(key.clone());
        if self.has_worker(uid) {
            return None;
        }
        self.orphan_retry.due(&key, now, force)
    }

    /// Hands each orphan sandbox and directory to a worker that removes it, and removes orphan
    /// cgroups (k/k `HandlePodCleanups`: `killPod` of runtime pods not known,
    /// `cleanupOrphanedPodDirs`, `cleanupOrphanedPodCgroups`).
    async fn clean_up_orphans(
        &mut self,
        present: &HashSet<String>,
        force: bool,
        cancel: &CancellationToken,
    ) {
        let now = Instant::now();
        let mut seen = HashSet::new();
        let after = sandbox_list_after(now, self.last_worker_forgotten, force);
        match self.ctx.cri.list_pod_sandboxes_since(after).await {
            Ok(sandboxes) => {
                for s in sandboxes {
                    let Some(uid) = s.labels.get(labels::POD_UID).cloned() else {
                        continue;
                    };
                    if present.contains(&uid) {
                        continue;
                    }
                    let Some(first) = self.orphan_due("sandbox", &uid, now, force, &mut seen)
                    else {
                        continue;
                    };
                    let mut pod = Pod::default();
                    pod.metadata.uid = Some(uid.clone());
                    pod.metadata.name = s.labels.get(labels::POD_NAME).cloned();
                    pod.metadata.namespace = s.labels.get(labels::POD_NAMESPACE).cloned();
                    log_cleanup(first, &uid, "pod sandbox");
                    self.update(Arc::new(pod), true, cancel).await;
                }
            }
            // During a runtime outage every sweep would fail: the outage is logged elsewhere.
            Err(e) if !force || e.is_unreachable() => {
                tracing::debug!(error = %e, "listing sandboxes for orphan cleanup failed")
            }
            Err(e) => tracing::warn!(error = %e, "listing sandboxes for orphan cleanup failed"),
        }
        // Pod directories (volumes, mounts) and with them the pod cgroups of pods that are gone
        // and have no sandbox left (deckhand stopped between removing a pod's sandbox and its
        // directory).
        let dirs = super::cleanup::list_pod_dirs(&self.ctx.root_dir);
        self.ctx.userns.release_gone(&dirs);
        for uid in super::cleanup::orphaned_pod_dirs(&dirs, present) {
            let Some(first) = self.orphan_due("dir", &uid, now, force, &mut seen) else {
                continue;
            };
            log_cleanup(first, &uid, "pod directory");
            let mut pod = Pod::default();
            pod.metadata.uid = Some(uid);
            self.update(Arc::new(pod), true, cancel).await;
        }
        if let Some(cm) = self.ctx.cgroups.clone() {
            let mut due = Vec::new();
            for uid in super::cleanup::orphaned_pod_dirs(&cm.list_pod_cgroups(), present) {
                if let Some(first) = self.orphan_due("cgroup", &uid, now, force, &mut seen) {
                    due.push((uid, first));
                }
            }
            super::cleanup::remove_orphaned_pod_cgroups(cm, due);
        }
        self.orphan_retry.retain(&seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_is_trimmed_once_pod_activity_has_settled() {
        let s = Duration::from_secs;
        // (times since the first and the last pod activity after the last trim if there was
        // some, expected)
        for (since_activity, want) in [
            (None, false), // idle: never
            (Some((s(20), s(20))), true),
            (Some((s(28), s(25))), true),  // deletions, settled
            (Some((s(14), s(5))), false),  // a burst of pod starts still going on
            (Some((s(39), s(19))), false), // ...
            (Some((s(39), s(20))), true),  // ... and over
            (Some((s(1), s(1))), false),   // the first pod after a quiet hour: not yet
            (Some((s(59), s(1))), false),  // a burst of 248 pods takes ~57 s
            (Some((s(119), s(1))), false),
            (Some((s(120), s(1))), true), // pods that never stop changing: every 2 min
        ] {
            assert_eq!(should_trim_heap(since_activity), want, "{since_activity:?}");
        }
    }

    #[test]
    fn a_burst_is_trimmed_after_its_last_pod_activity_not_after_its_last_worker_start() {
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        // Checked every 2 s (the housekeeping period) from t0 to 300 s; (pod activity at,
        // trims expected at).
        for (activity, want) in [
            (vec![], vec![]),
            // 248 workers start within 10 s, PLEG events and status echoes go on to 50 s
            // (2026-12-06): one trim when the last of it is 20 s old.
            ((0..=10).chain((12..=50).step_by(2)).collect(), vec![70]),
            // Pods that never stop changing: two minutes after the first activity since the
            // last trim.
            ((0..=300).step_by(4).collect::<Vec<_>>(), vec![120, 244]),
            // Two bursts: each settles on its own.
            (vec![100, 130], vec![120, 150]),
        ] {
            let mut clock = HeapTrimClock::default();
            let mut trims = vec![];
            for now in (0..=300).step_by(2) {
                if activity.contains(&now) {
                    clock.pod_activity(at(now));
                }
                if clock.take_due(at(now)) {
                    trims.push(now);
                }
            }
            assert_eq!(trims, want, "activity at {activity:?}");
        }
    }

    #[test]
    fn the_orphan_sweep_takes_a_recent_sandbox_list_taken_after_the_last_forget() {
        let t0 = Instant::now() + Duration::from_secs(100);
        let s = Duration::from_secs;
        // (now, last worker forgotten, force, the list must have started at or after)
        for (now, forgotten, force, want) in [
            (t0, t0 - s(60), false, t0 - SANDBOX_LIST_MAX_AGE),
            (t0, t0 - s(2), false, t0 - s(2)),
            (t0, t0 - s(60), true, t0),
            (t0, t0, false, t0),
        ] {
            assert_eq!(
                sandbox_list_after(now, forgotten, force),
                want,
                "{forgotten:?} {force}"
            );
        }
    }

    #[test]
    fn an_orphan_is_retried_once_a_period_unless_forced() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // (seconds after t0, force, expected)
        let steps: [(u64, bool, Option<bool>); 6] = [
            (0, false, Some(true)),
            (2, false, None),
            (59, false, None),
            (60, false, Some(false)),
            (62, true, Some(false)),
            (64, false, None),
        ];
        let mut r = OrphanRetry::default();
        for (at, force, want) in steps {
            assert_eq!(
                r.due("sandbox/u", t0 + s(at), force),
                want,
                "at {at} s, force {force}"
            );
        }
        // another orphan is independent
        assert_eq!(r.due("dir/u", t0 + s(64), false), Some(true));
        // gone and back: first again
        r.retain(&["dir/u".to_string()].into());
        assert_eq!(r.due("sandbox/u", t0 + s(65), false), Some(true));
        assert_eq!(r.due("dir/u", t0 + s(65), false), None);
    }
}
