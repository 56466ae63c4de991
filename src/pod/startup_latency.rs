//! Pod startup latency, measured as the Go kubelet measures it for its pod-start histograms
//! (k/k `pkg/kubelet/util/pod_startup_latency_tracker.go`, the metrics in
//! `pkg/kubelet/metrics/metrics.go`; the SLI is defined in sig-scalability's
//! `slos/pod_startup_latency.md`).
//!
//! A pod is tracked from the first time the API watch shows it without `status.startTime` (not
//! started yet). Image pulls made for it are recorded as sessions. When a status write makes
//! every container of the pod Running (with `startedAt`), that time is kept; the next watch event
//! that shows the pod so gives the observation: pod creation timestamp → that watch event
//! (`kubelet_pod_start_total_duration_seconds`) and the same minus the time spent pulling images
//! (`kubelet_pod_start_sli_duration_seconds`, not for pods with volumes other than secret,
//! configMap, downwardAPI, emptyDir and projected). Pods that were unschedulable are left out.
//! As in Go 1.36, init container run time is not subtracted (Go records when an init container
//! starts, never when it finishes).
//!
//! Every method takes the time it should use, so the decisions are testable without a clock;
//! [`tracker`] is the process-wide instance the source, the image puller and the status manager
//! share.

use crate::heap::ShrinkingMap;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// One pod start, ready for the histograms.
#[derive(Debug, Clone, PartialEq)]
pub struct StartupObservation {
    /// Pod creation timestamp → the watch event that showed every container Running.
    pub total: Duration,
    /// `total` minus the image pulling time; `None` for a stateful pod (the SLI leaves it out).
    pub sli: Option<Duration>,
    /// The first pod on this node not in the host network namespace to be observed (Go's
    /// `kubelet_first_network_pod_start_sli_duration_seconds` gauge).
    pub first_network_pod: bool,
}

#[derive(Debug, Default)]
struct PerPod {
    /// Finished pulls: (start, end).
    pull_sessions: Vec<(SystemTime, SystemTime)>,
    /// Pulls started and not finished yet, oldest first.
    pull_starts: VecDeque<SystemTime>,
    /// When a status write first showed every container Running.
    observed_running: Option<SystemTime>,
    recorded: bool,
}

#[derive(Debug, Default)]
struct State {
    pods: ShrinkingMap<String, PerPod>,
    excluded: HashSet<String>,
    first_network_pod_seen: bool,
    /// When this kubelet first saw each pod (for `kubelet_pod_start_duration_seconds`).
    first_seen: ShrinkingMap<String, SystemTime>,
    /// The phase of the last status generated for each pod.
    last_phase: ShrinkingMap<String, String>,
}

/// The tracker (k/k `basicPodStartupLatencyTracker`).
#[derive(Debug, Default)]
pub struct PodStartupLatencyTracker {
    state: Mutex<State>,
}

/// The process-wide tracker.
pub fn tracker() -> &'static PodStartupLatencyTracker {
    static TRACKER: OnceLock<PodStartupLatencyTracker> = OnceLock::new();
    TRACKER.get_or_init(PodStartupLatencyTracker::default)
}

fn uid(pod: &Pod) -> String {
    crate::pod::uid(pod).to_string()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

impl PodStartupLatencyTracker {
    /// A watch event for `pod` arrived at `when` (Go `ObservedPodOnWatch`). Returns the
    /// observation when this event is the first to show a pod, whose start the kubelet saw,
    /// with every container Running.
    pub fn observed_pod_on_watch(&self, pod: &Pod, when: SystemTime) -> Option<StartupObservation> {
        let uid = uid(pod);
        let mut st = self.state.lock().unwrap();
        st.first_seen.get_or_insert_with(uid.clone(), || when);
        if matches!(phase(pod), "Failed" | "Succeeded") {
            st.pods.remove(&uid);
            return None;
        }
        let Some(state) = st.pods.get_mut(&uid) else {
            if st.excluded.contains(&uid) {
                return None;
            }
            let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref());
            if started.is_none() {
                if is_pod_unschedulable(pod) {
                    st.excluded.insert(uid);
                } else {
                    st.pods.insert(uid, PerPod::default());
                }
            }
            return None;
        };
        if is_pod_unschedulable(pod) {
            st.pods.remove(&uid);
            st.excluded.insert(uid);
            return None;
        }
        if state.observed_running.is_none() || state.recorded || !has_pod_started_slo(pod) {
            return None;
        }
        state.recorded = true;
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64))
            .unwrap_or(when);
        let total = when.duration_since(created).unwrap_or_default();
        let pulling = image_pulling_time(&state.pull_sessions);
        let sli = (!is_stateful_pod(pod)).then(|| total.saturating_sub(pulling));
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let first_network_pod = sli.is_some() && !host_network && !st.first_network_pod_seen;
        if first_network_pod {
            st.first_network_pod_seen = true;
        }
        Some(StartupObservation {
            total,
            sli,
            first_network_pod,
        })
    }

    /// An image pull for pod `uid` started at `now` (Go `RecordImageStartedPulling`).
    pub fn record_image_started_pulling(&self, uid: &str, now: SystemTime) {
        if let Some(p) = self.state.lock().unwrap().pods.get_mut(uid) {
            p.pull_starts.push_back(now);
        }
    }

    /// An image pull for pod `uid` ended at `now`, pairing with the oldest open start (Go
    /// `RecordImageFinishedPulling`).
    pub fn record_image_finished_pulling(&self, uid: &str, now: SystemTime) {
        if let Some(p) = self.state.lock().unwrap().pods.get_mut(uid) {
            if let Some(start) = p.pull_starts.pop_front() {
                p.pull_sessions.push((start, now));
            }
        }
    }

    /// The API server accepted a status for `pod` (the object it returned) at `now` (Go
    /// `RecordStatusUpdated`).
    pub fn record_status_updated(&self, pod: &Pod, now: SystemTime) {
        if let Some(p) = self.state.lock().unwrap().pods.get_mut(&uid(pod)) {
            if !p.recorded && p.observed_running.is_none() && has_pod_started_slo(pod) {
                p.observed_running = Some(now);
            }
        }
    }

    /// When this kubelet first saw pod `uid` (first watch event or first sync).
    pub fn first_seen(&self, uid: &str) -> Option<SystemTime> {
        self.state.lock().unwrap().first_seen.get(uid).copied()
    }

    /// Records the first sighting of pod `uid` at `now` unless one is known (static pods come
    /// from files, not the watch).
    pub fn record_first_seen(&self, uid: &str, now: SystemTime) {
        let mut st = self.state.lock().unwrap();
        st.first_seen.get_or_insert_with(uid.to_string(), || now);
    }

    /// A status with `phase` was generated for pod `uid`: returns the time since the pod was
    /// first seen when [`records_pod_start`] says this transition is observed.
    pub fn status_generated(&self, uid: &str, phase: &str) -> Option<Duration> {
        self.status_generated_at(uid, phase, SystemTime::now())
    }

    fn status_generated_at(&self, uid: &str, phase: &str, now: SystemTime) -> Option<Duration> {
        let mut st = self.state.lock().unwrap();
        let old = st.last_phase.insert(uid.to_string(), phase.to_string());
        if !records_pod_start(old.as_deref(), phase) {
            return None;
        }
        let seen = *st.first_seen.get(uid)?;
        Some(now.duration_since(seen).unwrap_or_default())
    }

    /// Forgets pod `uid` (its worker is gone).
    pub fn delete(&self, uid: &str) {
        let mut st = self.state.lock().unwrap();
        st.pods.remove(uid);
        st.excluded.remove(uid);
        st.first_seen.remove(uid);
        st.last_phase.remove(uid);
    }
}

/// Whether the status transition from `old_phase` (`None`: the kubelet has no status for the pod
/// yet) to `new_phase` is observed in `kubelet_pod_start_duration_seconds`. Go's condition in
/// `SyncPod` reads `!ok || existing.Phase == Pending && new.Phase == Running`, so a pod's first
/// status counts too, whatever its phase; this mirrors it.
pub fn records_pod_start(old_phase: Option<&str>, new_phase: &str) -> bool {
    match old_phase {
        None => true,
        Some(old) => old == "Pending" && new_phase == "Running",
    }
}

/// Every container Running with a start time (Go `hasPodStartedSLO`).
pub fn has_pod_started_slo(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| {
            cs.iter().all(|c| {
                c.state
                    .as_ref()
                    .and_then(|s| s.running.as_ref())
                    .is_some_and(|r| r.started_at.is_some())
            })
        })
        .unwrap_or(true)
}

/// A pod with a volume other than secret, configMap, downwardAPI, emptyDir or projected (Go
/// `isStatefulPod`): its start includes attaching storage, so the SLI leaves it out.
pub fn is_stateful_pod(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| {
            vs.iter().any(|v| {
                v.secret.is_none()
                    && v.config_map.is_none()
                    && v.downward_api.is_none()
                    && v.empty_dir.is_none()
                    && v.projected.is_none()
            })
        })
}

/// `PodScheduled` is False (Go `isPodUnschedulable`).
pub fn is_pod_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
}

/// The time covered by the pull sessions, overlaps counted once (Go
/// `calculateImagePullingTime`: sessions in the order they finished, each merged with the run
/// before it when it started before that run ended).
pub fn image_pulling_time(sessions: &[(SystemTime, SystemTime)]) -> Duration {
    let mut total = Duration::ZERO;
    let mut current_end: Option<SystemTime> = None;
    for &(start, end) in sessions {
        match current_end {
            Some(ce) if start <= ce => {
                if end > ce {
                    total += end.duration_since(ce).unwrap_or_default();
                    current_end = Some(end);
                }
            }
            _ => {
                total += end.duration_since(start).unwrap_or_default();
                current_end = Some(end);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodSpec, PodStatus, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + s)
    }

    fn ts(s: u64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + s as i64).unwrap())
    }

    fn pod(running: bool, start_time: bool) -> Pod {
        let state = if running {
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(ts(5)),
                }),
                ..Default::default()
            }
        } else {
            ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ContainerCreating".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }
        };
        Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                creation_timestamp: Some(ts(0)),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some(if running { "Running" } else { "Pending" }.into()),
                start_time: start_time.then(|| ts(1)),
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    state: Some(state),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_pod_start_is_observed_once_from_creation_to_the_watch_event_minus_pulls() {
        let tr = PodStartupLatencyTracker::default();
        // first seen before it started: tracked
        assert_eq!(tr.observed_pod_on_watch(&pod(false, false), t(1)), None);
        tr.record_image_started_pulling("u1", t(2));
        tr.record_image_finished_pulling("u1", t(5));
        // the status write that makes it Running, then the watch event showing it
        tr.record_status_updated(&pod(true, true), t(6));
        let obs = tr.observed_pod_on_watch(&pod(true, true), t(7)).unwrap();
        assert_eq!(obs.total, Duration::from_secs(7));
        assert_eq!(obs.sli, Some(Duration::from_secs(4)));
        assert!(obs.first_network_pod);
        // later events do not count again
        assert_eq!(tr.observed_pod_on_watch(&pod(true, true), t(9)), None);
    }

    #[test]
    fn pods_are_not_observed_without_a_status_write_or_when_seen_already_started() {
        let tr = PodStartupLatencyTracker::default();
        tr.observed_pod_on_watch(&pod(false, false), t(1));
        // Running on the watch, but this kubelet never wrote such a status (yet)
        assert_eq!(tr.observed_pod_on_watch(&pod(true, true), t(2)), None);
        // a pod first seen with a startTime (e.g. after a kubelet restart) is not tracked
        let tr = PodStartupLatencyTracker::default();
        tr.observed_pod_on_watch(&pod(true, true), t(1));
        tr.record_status_updated(&pod(true, true), t(2));
        assert_eq!(tr.observed_pod_on_watch(&pod(true, true), t(3)), None);
    }

    #[test]
    fn unschedulable_and_finished_pods_are_left_out() {
        let tr = PodStartupLatencyTracker::default();
        let mut p = pod(false, false);
        p.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            ..Default::default()
        }]);
        tr.observed_pod_on_watch(&p, t(1));
        tr.record_status_updated(&pod(true, true), t(2));
        assert_eq!(tr.observed_pod_on_watch(&pod(true, true), t(3)), None);

        let tr = PodStartupLatencyTracker::default();
        tr.observed_pod_on_watch(&pod(false, false), t(1));
        let mut done = pod(false, true);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        tr.observed_pod_on_watch(&done, t(2));
        tr.record_status_updated(&pod(true, true), t(3));
        assert_eq!(tr.observed_pod_on_watch(&pod(true, true), t(4)), None);
    }

    #[test]
    fn stateful_pods_have_no_sli_and_the_first_network_pod_is_flagged_once() {
        let tr = PodStartupLatencyTracker::default();
        let mut pvc = pod(false, false);
        pvc.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(Default::default()),
            ..Default::default()
        }]);
        assert!(is_stateful_pod(&pvc));
        assert!(!is_stateful_pod(&pod(false, false)));
        tr.observed_pod_on_watch(&pvc, t(1));
        let mut running = pvc.clone();
        running.status = pod(true, true).status;
        tr.record_status_updated(&running, t(2));
        let obs = tr.observed_pod_on_watch(&running, t(3)).unwrap();
        assert_eq!(obs.sli, None);
        assert!(!obs.first_network_pod);
    }

    #[test]
    fn image_pulling_time_counts_overlaps_once() {
        let cases: &[(&[(u64, u64)], u64)] = &[
            (&[], 0),
            (&[(0, 3)], 3),
            (&[(0, 3), (5, 6)], 4),
            (&[(0, 4), (2, 6)], 6),
            (&[(0, 6), (1, 2)], 6),
        ];
        for (sessions, want) in cases {
            let s: Vec<_> = sessions.iter().map(|&(a, b)| (t(a), t(b))).collect();
            assert_eq!(
                image_pulling_time(&s),
                Duration::from_secs(*want),
                "{sessions:?}"
            );
        }
    }

    #[test]
    fn pod_start_duration_runs_from_first_sight_to_the_running_status() {
        let tr = PodStartupLatencyTracker::default();
        tr.observed_pod_on_watch(&pod(false, false), t(10));
        assert_eq!(
            tr.status_generated_at("u1", "Pending", t(11)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(tr.status_generated_at("u1", "Pending", t(12)), None);
        assert_eq!(
            tr.status_generated_at("u1", "Running", t(13)),
            Some(Duration::from_secs(3))
        );
        assert_eq!(tr.status_generated_at("u1", "Running", t(14)), None);
        // never seen: nothing to measure from
        assert_eq!(tr.status_generated_at("u2", "Running", t(14)), None);
    }

    #[test]
    fn pod_start_duration_is_recorded_as_go_records_it() {
        let cases = [
            (None, "Pending", true),
            (None, "Running", true),
            (Some("Pending"), "Running", true),
            (Some("Pending"), "Pending", false),
            (Some("Running"), "Running", false),
            (Some("Pending"), "Failed", false),
        ];
        for (old, new, want) in cases {
            assert_eq!(records_pod_start(old, new), want, "{old:?} -> {new}");
        }
    }
}
