//! The scheduling queue: active (ordered by priority, then by time queued), back-off (per-pod
//! exponential, 1 s doubling to 10 s), unschedulable (parked until a cluster event could make the
//! pod fit, or for at most 5 minutes), and gated pods (`spec.schedulingGates`). Pure: every
//! method takes "now"; the scheduler's loop owns the clock and the waking.
//!
//! Mirrors k/k `pkg/scheduler/backend/queue` at v1.36.3 (`PriorityQueue`, `backoffQueue` with
//! `DefaultPodInitialBackoffDuration` 1 s and `DefaultPodMaxBackoffDuration` 10 s,
//! `DefaultPodMaxInUnschedulablePodsDuration` 5 min, the move-request cycle, and
//! SchedulerPopFromBackoffQ: a pod backing off after an unschedulable attempt may be popped when
//! the active queue is empty). Queueing hints are not per plugin here: the scheduler re-runs the
//! filters against the node an event touched and moves only the pods that now fit there.

use k8s_openapi::api::core::v1::Pod;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Initial back-off after a failed attempt (`DefaultPodInitialBackoffDuration`).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Back-off cap (`DefaultPodMaxBackoffDuration`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// An unschedulable pod is retried after this long even without an event
/// (`DefaultPodMaxInUnschedulablePodsDuration`).
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// Where a pod is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Where {
    Active,
    Backoff,
    /// Back-off after an error (API failure): never popped early.
    ErrorBackoff,
    Unschedulable,
    Gated,
    /// Popped and being scheduled in the given cycle.
    InFlight(u64),
}

/// A pod in the queue and its scheduling history (`framework.QueuedPodInfo`).
#[derive(Debug, Clone)]
pub struct QueuedPod {
    pub pod: Arc<Pod>,
    pub uid: String,
    /// Attempts so far (including the current one once popped).
    pub attempts: u32,
    pub unschedulable_count: u32,
    pub consecutive_errors: u32,
    /// When the pod was (re-)queued: back-off counts from here.
    pub timestamp: Instant,
    /// When the pod first entered the queue.
    pub initial: Instant,
    pub location: Where,
    /// The plugins that rejected the pod in its last attempt (`UnschedulablePlugins`), which
    /// the queueing hints of storage events consult; empty when unknown.
    pub unschedulable_plugins: Vec<&'static str>,
    seq: u64,
}

impl QueuedPod {
    fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }

    /// `backoffQueue.calculateBackoffDuration` of the error count (if the last attempt failed
    /// with an error) or of the unschedulable count.
    pub fn backoff_duration(&self, initial: Duration, max: Duration) -> Duration {
        let count = if self.consecutive_errors > 0 {
            self.consecutive_errors
        } else {
            self.unschedulable_count
        };
        if count == 0 {
            return Duration::ZERO;
        }
        let shift = (count - 1).min(31);
        initial
            .checked_mul(1u32 << shift)
            .map_or(max, |d| d.min(max))
    }
}

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// Whether an update of an unschedulable pod may change the scheduling outcome: anything but its
/// status (`isPodUpdated` strips status and resource version).
fn scheduling_relevant_change(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

/// The queue. Heaps are lazily cleaned: an entry is valid while its sequence number matches the
/// pod's.
#[derive(Debug)]
pub struct SchedulingQueue {
    pods: HashMap<String, QueuedPod>,
    active: BinaryHeap<(i32, Reverse<Instant>, Reverse<u64>, String)>,
    backoff: BinaryHeap<(Reverse<Instant>, Reverse<u64>, String)>,
    seq: u64,
    scheduling_cycle: u64,
    move_request_cycle: u64,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub max_in_unschedulable: Duration,
}

impl Default for SchedulingQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl SchedulingQueue {
    pub fn new() -> Self {
        Self {
            pods: HashMap::new(),
            active: BinaryHeap::new(),
            backoff: BinaryHeap::new(),
            seq: 0,
            scheduling_cycle: 0,
            move_request_cycle: 0,
            initial_backoff: INITIAL_BACKOFF,
            max_backoff: MAX_BACKOFF,
            max_in_unschedulable: MAX_IN_UNSCHEDULABLE,
        }
    }

    /// Number of pods known to the queue (any state, in-flight included).
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Where the pod is, if queued.
    pub fn location(&self, uid: &str) -> Option<Where> {
        self.pods.get(uid).map(|p| p.location)
    }

    /// The queued pod, if any.
    pub fn get(&self, uid: &str) -> Option<&QueuedPod> {
        self.pods.get(uid)
    }

    /// UIDs of the parked unschedulable pods.
    pub fn unschedulable(&self) -> impl Iterator<Item = &QueuedPod> {
        self.pods
            .values()
            .filter(|p| p.location == Where::Unschedulable)
    }

    fn backoff_expiry(&self, p: &QueuedPod) -> Instant {
        p.timestamp + p.backoff_duration(self.initial_backoff, self.max_backoff)
    }

    fn place(&mut self, uid: &str, loc: Where) {
        self.seq += 1;
        let seq = self.seq;
        let Some(p) = self.pods.get_mut(uid) else {
            return;
        };
        p.location = loc;
        p.seq = seq;
        match loc {
            Where::Active => {
                let prio = p.priority();
                self.active
                    .push((prio, Reverse(p.timestamp), Reverse(seq), uid.to_string()));
            }
            Where::Backoff | Where::ErrorBackoff => {
                let p = p.clone();
                let exp = self.backoff_expiry(&p);
                self.backoff
                    .push((Reverse(exp), Reverse(seq), uid.to_string()));
            }
            _ => {}
        }
    }

    /// A new pending pod (or a re-listed one): active, or gated while it has scheduling gates.
    pub fn add(&mut self, pod: Arc<Pod>, now: Instant) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self.pods.contains_key(&uid) {
            self.update(pod, now);
            return;
        }
        let loc = if gated(&pod) {
            Where::Gated
        } else {
            Where::Active
        };
        self.pods.insert(
            uid.clone(),
            QueuedPod {
                pod,
                uid: uid.clone(),
                attempts: 0,
                unschedulable_count: 0,
                consecutive_errors: 0,
                timestamp: now,
                initial: now,
                location: loc,
                unschedulable_plugins: Vec::new(),
                seq: 0,
            },
        );
        self.place(&uid, loc);
    }

    /// A newer version of a pending pod. A gated pod whose gates are gone becomes active; an
    /// unschedulable pod whose spec, labels or annotations changed is retried (after its back-off).
    pub fn update(&mut self, pod: Arc<Pod>, now: Instant) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(p) = self.pods.get_mut(&uid) else {
            self.add(pod, now);
            return;
        };
        let old = std::mem::replace(&mut p.pod, pod.clone());
        match p.location {
            Where::Gated if !gated(&pod) => {
                p.timestamp = now;
                self.place(&uid, Where::Active);
            }
            Where::Unschedulable if scheduling_relevant_change(&old, &pod) => {
                self.requeue(&uid, now);
            }
            _ => {}
        }
    }

    /// The pod is gone or bound by someone else.
    pub fn delete(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    fn requeue(&mut self, uid: &str, now: Instant) {
        let Some(p) = self.pods.get(uid) else { return };
        let loc = if self.backoff_expiry(p) > now {
            Where::Backoff
        } else {
            Where::Active
        };
        self.place(uid, loc);
    }

    /// Moves back-off pods whose time has come, and pods parked unschedulable for longer than
    /// [`MAX_IN_UNSCHEDULABLE`], to the active queue (`flushBackoffQCompleted`,
    /// `flushUnschedulablePodsLeftover`).
    pub fn flush(&mut self, now: Instant) {
        while let Some((Reverse(exp), Reverse(seq), uid)) = self.backoff.peek().cloned() {
            let valid = self.pods.get(&uid).is_some_and(|p| {
                p.seq == seq && matches!(p.location, Where::Backoff | Where::ErrorBackoff)
            });
            if !valid {
                self.backoff.pop();
                continue;
            }
            if exp > now {
                break;
            }
            self.backoff.pop();
            self.place(&uid, Where::Active);
        }
        let stale: Vec<String> = self
            .pods
            .values()
            .filter(|p| {
                p.location == Where::Unschedulable
                    && now.saturating_duration_since(p.timestamp) > self.max_in_unschedulable
            })
            .map(|p| p.uid.clone())
            .collect();
        for uid in stale {
            self.requeue(&uid, now);
        }
    }

    /// The next time something in the queue becomes due (a back-off ends, an unschedulable pod
    /// reaches its 5 minutes), for the loop's sleep.
    pub fn next_due(&self) -> Option<Instant> {
        let backoff = self
            .pods
            .values()
            .filter(|p| matches!(p.location, Where::Backoff | Where::ErrorBackoff))
            .map(|p| self.backoff_expiry(p))
            .min();
        let parked = self
            .pods
            .values()
            .filter(|p| p.location == Where::Unschedulable)
            .map(|p| p.timestamp + self.max_in_unschedulable)
            .min();
        match (backoff, parked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next pod to schedule: the highest-priority, longest-waiting active pod, or, when none
    /// is active, the back-off pod (not error back-off) due first. Marks it in flight.
    pub fn pop(&mut self, now: Instant) -> Option<QueuedPod> {
        self.flush(now);
        let mut uid = None;
        while let Some((_, _, Reverse(seq), u)) = self.active.pop() {
            if self
                .pods
                .get(&u)
                .is_some_and(|p| p.seq == seq && p.location == Where::Active)
            {
                uid = Some(u);
                break;
            }
        }
        if uid.is_none() {
            // SchedulerPopFromBackoffQ: take a pod still backing off after an unschedulable
            // attempt rather than idling.
            let mut skipped = Vec::new();
            while let Some(e) = self.backoff.pop() {
                let (_, Reverse(seq), ref u) = e;
                match self.pods.get(u).map(|p| (p.seq == seq, p.location)) {
                    Some((true, Where::Backoff)) => {
                        uid = Some(u.clone());
                        break;
                    }
                    Some((true, Where::ErrorBackoff)) => skipped.push(e),
                    _ => {}
                }
            }
            self.backoff.extend(skipped);
        }
        let uid = uid?;
        self.scheduling_cycle += 1;
        let cycle = self.scheduling_cycle;
        let p = self.pods.get_mut(&uid)?;
        p.attempts += 1;
        p.location = Where::InFlight(cycle);
        Some(p.clone())
    }

    /// The attempt found no node. The pod is parked as unschedulable, or backs off if a move
    /// request (a cluster event that could help) arrived while it was being scheduled.
    pub fn done_unschedulable(&mut self, uid: &str, now: Instant) {
        self.done_unschedulable_by(uid, Vec::new(), now);
    }

    /// [`SchedulingQueue::done_unschedulable`], remembering the plugins that rejected the pod.
    pub fn done_unschedulable_by(&mut self, uid: &str, plugins: Vec<&'static str>, now: Instant) {
        let move_request_cycle = self.move_request_cycle;
        let Some(p) = self.pods.get_mut(uid) else {
            return;
        };
        let Where::InFlight(cycle) = p.location else {
            return;
        };
        p.unschedulable_plugins = plugins;
        p.unschedulable_count += 1;
        p.consecutive_errors = 0;
        p.timestamp = now;
        if move_request_cycle >= cycle {
            self.place(uid, Where::Backoff);
        } else {
            self.place(uid, Where::Unschedulable);
        }
    }

    /// The attempt or its binding failed with an error: error back-off. `pod` re-adds a pod that
    /// already left the queue (a failed binding).
    pub fn done_error(&mut self, uid: &str, pod: Option<Arc<Pod>>, now: Instant) {
        if !self.pods.contains_key(uid) {
            let Some(pod) = pod else { return };
            self.pods.insert(
                uid.to_string(),
                QueuedPod {
                    pod,
                    uid: uid.to_string(),
                    attempts: 1,
                    unschedulable_count: 0,
                    consecutive_errors: 0,
                    timestamp: now,
                    initial: now,
                    location: Where::InFlight(self.scheduling_cycle),
                    unschedulable_plugins: Vec::new(),
                    seq: 0,
                },
            );
        }
        let Some(p) = self.pods.get_mut(uid) else {
            return;
        };
        p.consecutive_errors += 1;
        p.unschedulable_plugins.clear();
        p.timestamp = now;
        self.place(uid, Where::ErrorBackoff);
    }

    /// The pod was assumed onto a node: it leaves the queue.
    pub fn done_scheduled(&mut self, uid: &str) -> Option<QueuedPod> {
        self.pods.remove(uid)
    }

    /// A cluster event that may make some unschedulable pods fit: those for which `helps`
    /// returns true go back to the active queue (or back-off, if theirs has not ended), and pods
    /// in flight will back off instead of parking (`MoveAllToActiveOrBackoffQueue`).
    pub fn move_unschedulable(
        &mut self,
        now: Instant,
        mut helps: impl FnMut(&QueuedPod) -> bool,
    ) -> usize {
        self.move_request_cycle = self.scheduling_cycle;
        let uids: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.location == Where::Unschedulable)
            .filter(|p| helps(p))
            .map(|p| p.uid.clone())
            .collect();
        for uid in &uids {
            self.requeue(uid, now);
        }
        uids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, priority: i32) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid},
                "spec": {"containers": [], "priority": priority}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn pops_by_priority_then_age() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("old", 0), t0);
        q.add(pod("young", 0), t0 + Duration::from_millis(1));
        q.add(pod("vip", 10), t0 + Duration::from_millis(2));
        let order: Vec<String> = (0..3).map(|_| q.pop(t0).unwrap().uid).collect();
        assert_eq!(order, ["vip", "old", "young"]);
        assert!(q.pop(t0).is_none());
    }

    #[test]
    fn backoff_doubles_from_one_second_to_ten() {
        let p = QueuedPod {
            pod: pod("p", 0),
            uid: "p".into(),
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors: 0,
            timestamp: Instant::now(),
            initial: Instant::now(),
            location: Where::Active,
            unschedulable_plugins: Vec::new(),
            seq: 0,
        };
        let d = |n: u32| {
            let mut p = p.clone();
            p.unschedulable_count = n;
            p.backoff_duration(INITIAL_BACKOFF, MAX_BACKOFF).as_secs()
        };
        assert_eq!(
            [d(0), d(1), d(2), d(3), d(4), d(5), d(40)],
            [0, 1, 2, 4, 8, 10, 10]
        );
    }

    #[test]
    fn unschedulable_pods_park_until_an_event_helps_them() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        q.add(pod("b", 0), t0);
        for _ in 0..2 {
            let p = q.pop(t0).unwrap();
            q.done_unschedulable(&p.uid, t0);
        }
        assert_eq!(q.location("a"), Some(Where::Unschedulable));
        // no hot loop: nothing to pop however often we ask
        for i in 0..100 {
            assert!(q.pop(t0 + Duration::from_secs(i)).is_none());
        }
        // an event that helps only "a"
        assert_eq!(
            q.move_unschedulable(t0 + Duration::from_secs(100), |p| p.uid == "a"),
            1
        );
        assert_eq!(q.pop(t0 + Duration::from_secs(100)).unwrap().uid, "a");
        assert_eq!(q.location("b"), Some(Where::Unschedulable));
    }

    #[test]
    fn moved_pods_still_back_off_but_may_be_popped_when_idle() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        let p = q.pop(t0).unwrap();
        q.done_unschedulable(&p.uid, t0);
        q.move_unschedulable(t0, |_| true);
        assert_eq!(
            q.location("a"),
            Some(Where::Backoff),
            "1 s back-off not over"
        );
        // active queue empty: popped from back-off anyway (SchedulerPopFromBackoffQ)
        assert_eq!(q.pop(t0).unwrap().uid, "a");
    }

    #[test]
    fn error_backoff_is_not_popped_early() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        let p = q.pop(t0).unwrap();
        q.done_error(&p.uid, None, t0);
        assert!(q.pop(t0 + Duration::from_millis(500)).is_none());
        assert_eq!(q.next_due(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(q.pop(t0 + Duration::from_secs(1)).unwrap().uid, "a");
    }

    #[test]
    fn event_during_the_attempt_means_back_off_not_park() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        let p = q.pop(t0).unwrap();
        q.move_unschedulable(t0, |_| true); // e.g. a node was added meanwhile
        q.done_unschedulable(&p.uid, t0);
        assert_eq!(q.location("a"), Some(Where::Backoff));
        q.add(pod("b", 0), t0);
        let p = q.pop(t0).unwrap();
        assert_eq!(p.uid, "b", "active pods go first");
        q.done_unschedulable(&p.uid, t0);
        assert_eq!(q.location("b"), Some(Where::Unschedulable));
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        let p = q.pop(t0).unwrap();
        q.done_unschedulable(&p.uid, t0);
        assert!(q.pop(t0 + Duration::from_secs(299)).is_none());
        assert_eq!(q.pop(t0 + Duration::from_secs(301)).unwrap().uid, "a");
    }

    #[test]
    fn gated_pods_wait_for_their_gates_to_go() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        let mut g: Pod = (*pod("g", 0)).clone();
        g.spec.as_mut().unwrap().scheduling_gates =
            Some(vec![serde_json::from_value(json!({"name": "x"})).unwrap()]);
        q.add(Arc::new(g.clone()), t0);
        assert!(q.pop(t0).is_none());
        g.spec.as_mut().unwrap().scheduling_gates = None;
        q.update(Arc::new(g), t0);
        assert_eq!(q.pop(t0).unwrap().uid, "g");
    }

    #[test]
    fn status_only_updates_do_not_requeue_but_spec_changes_do() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        let p = q.pop(t0).unwrap();
        q.done_unschedulable(&p.uid, t0);
        let mut with_status: Pod = (*pod("a", 0)).clone();
        with_status.status = Some(serde_json::from_value(json!({"phase": "Pending"})).unwrap());
        q.update(Arc::new(with_status.clone()), t0);
        assert_eq!(q.location("a"), Some(Where::Unschedulable));
        with_status.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
        q.update(Arc::new(with_status), t0 + Duration::from_secs(5));
        assert_eq!(q.location("a"), Some(Where::Active));
    }

    #[test]
    fn the_rejecting_plugins_are_kept_for_the_queueing_hints_and_cleared_by_an_error() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        let p = q.pop(t0).unwrap();
        q.done_unschedulable_by(&p.uid, vec!["VolumeBinding"], t0);
        assert_eq!(q.get("a").unwrap().unschedulable_plugins, ["VolumeBinding"]);
        let moved = q.move_unschedulable(t0 + Duration::from_secs(2), |qp| {
            qp.unschedulable_plugins.contains(&"VolumeBinding")
        });
        assert_eq!(moved, 1);
        let p = q.pop(t0 + Duration::from_secs(2)).unwrap();
        q.done_error(&p.uid, None, t0 + Duration::from_secs(2));
        assert!(q.get("a").unwrap().unschedulable_plugins.is_empty());
    }

    #[test]
    fn deleted_pods_are_never_popped() {
        let t0 = Instant::now();
        let mut q = SchedulingQueue::new();
        q.add(pod("a", 0), t0);
        q.delete("a");
        assert!(q.pop(t0).is_none());
        assert!(q.is_empty());
    }
}
