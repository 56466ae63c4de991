//! `spec.activeDeadlineSeconds` (k/k `pkg/kubelet/active_deadline.go`): once a pod has been
//! active on the node for that long, counted from its `status.startTime`, the kubelet stops it:
//! its containers are killed with the pod's grace period and it reports phase `Failed` with
//! reason `DeadlineExceeded`, with a Normal event of the same reason. The field may be set or
//! lowered on a running pod; the next sync after the update decides.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `status.reason` and the event reason.
pub const REASON: &str = "DeadlineExceeded";
/// `status.message` and the event message.
pub const MESSAGE: &str = "Pod was active on the node longer than the specified deadline";

/// When the pod's active deadline passes: `startTime` + `activeDeadlineSeconds`; None when
/// either is unset (the pod has not started on this node, or has no deadline).
pub fn deadline(pod: &Pod) -> Option<Timestamp> {
    let seconds = pod.spec.as_ref()?.active_deadline_seconds?;
    let start = pod.status.as_ref()?.start_time.as_ref()?.0;
    start.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// The pod has been active at least its deadline at `now` (Go `pastActiveDeadline`:
/// `now - startTime >= activeDeadlineSeconds`).
pub fn exceeded(pod: &Pod, now: Timestamp) -> bool {
    deadline(pod).is_some_and(|d| now >= d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(deadline: Option<i64>, start: Option<&str>) -> Pod {
        let mut v = json!({"metadata": {"name": "p"}, "spec": {"containers": []}, "status": {}});
        if let Some(d) = deadline {
            v["spec"]["activeDeadlineSeconds"] = json!(d);
        }
        if let Some(s) = start {
            v["status"]["startTime"] = json!(s);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn deadline_table() {
        let now: Timestamp = "2026-12-01T10:00:05Z".parse().unwrap();
        let cases = [
            (
                "no deadline",
                pod(None, Some("2026-12-01T10:00:00Z")),
                false,
            ),
            ("not started", pod(Some(1), None), false),
            ("before", pod(Some(6), Some("2026-12-01T10:00:00Z")), false),
            (
                "exactly at",
                pod(Some(5), Some("2026-12-01T10:00:00Z")),
                true,
            ),
            ("after", pod(Some(1), Some("2026-12-01T10:00:00Z")), true),
        ];
        for (name, p, want) in cases {
            assert_eq!(exceeded(&p, now), want, "{name}");
        }
        assert_eq!(
            deadline(&pod(Some(5), Some("2026-12-01T10:00:00Z"))),
            Some(now)
        );
    }
}
