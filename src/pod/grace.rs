//! The grace period a pod is terminated with (k/k `pkg/kubelet/pod_workers.go`
//! `calculateEffectiveGracePeriod`): it can only get shorter while the pod terminates, so a
//! second `kubectl delete --grace-period=1` cuts a long first one short.

use k8s_openapi::api::core::v1::Pod;

/// The grace period used when the pod gives none (`terminationGracePeriodSeconds` defaults to
/// 30 s in the API).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = super::spec::DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS;

/// The grace period asked for by the pod object alone, in seconds:
/// `metadata.deletionGracePeriodSeconds` (what the API server set on delete), else
/// `spec.terminationGracePeriodSeconds`, else 30 s.
pub fn requested_grace_seconds(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
}

/// The effective grace period in seconds for terminating `pod` now, given the one the
/// termination already runs with (`previous`, None before it started) and whether the pod
/// vanished from the API server without a graceful delete (force delete, or deleted while
/// deckhand was down: 1 s). The result never exceeds `previous` and is at least 1 s, as the Go
/// kubelet's ("no matter what, we always supply a grace period of 1").
pub fn effective_grace_period(previous: Option<i64>, pod: &Pod, removed_abruptly: bool) -> i64 {
    let requested = if removed_abruptly {
        1
    } else {
        requested_grace_seconds(pod)
    };
    let g = match previous {
        Some(p) => requested.min(p),
        None => requested,
    };
    g.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(spec_grace: Option<i64>, deletion_grace: Option<i64>) -> Pod {
        let mut p = Pod::default();
        p.spec = Some(PodSpec {
            termination_grace_period_seconds: spec_grace,
            ..Default::default()
        });
        p.metadata.deletion_grace_period_seconds = deletion_grace;
        p
    }

    #[test]
    fn the_grace_period_only_gets_shorter_while_terminating() {
        // (case, previous, spec, deletionGracePeriodSeconds, removed abruptly, want)
        let cases = [
            ("first delete, default", None, None, Some(30), false, 30),
            (
                "first delete, long spec",
                None,
                Some(86400),
                Some(86400),
                false,
                86400,
            ),
            (
                "no deletion grace: the spec",
                None,
                Some(45),
                None,
                false,
                45,
            ),
            ("nothing set: 30 s", None, None, None, false, 30),
            (
                "second delete --grace-period=1",
                Some(86400),
                Some(86400),
                Some(1),
                false,
                1,
            ),
            (
                "a longer one later is ignored",
                Some(5),
                Some(86400),
                Some(60),
                false,
                5,
            ),
            (
                "same update again",
                Some(86400),
                Some(86400),
                Some(86400),
                false,
                86400,
            ),
            (
                "force delete: 1 s",
                Some(86400),
                Some(86400),
                Some(0),
                false,
                1,
            ),
            ("vanished without a delete", None, Some(600), None, true, 1),
            (
                "zero spec grace: at least 1 s",
                None,
                Some(0),
                None,
                false,
                1,
            ),
        ];
        for (case, prev, spec, del, abrupt, want) in cases {
            assert_eq!(
                effective_grace_period(prev, &pod(spec, del), abrupt),
                want,
                "{case}"
            );
        }
    }
}
