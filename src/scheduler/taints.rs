//! Taints and tolerations: whether a toleration tolerates a taint (`k8s.io/api/core/v1
//! Toleration.ToleratesTaint` with the alpha comparison operators off, as in v1.36.3 by default).

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// `node.kubernetes.io/not-ready`: the node lifecycle controller's taint for a node whose Ready
/// condition is False (NoSchedule, and NoExecute for eviction).
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// `node.kubernetes.io/unreachable`: the taint for a node whose Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// `node.kubernetes.io/unschedulable`: the taint equivalent of `spec.unschedulable` (cordon).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Effect `NoSchedule`.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// Effect `NoExecute`.
pub const NO_EXECUTE: &str = "NoExecute";
/// Effect `PreferNoSchedule`.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// Whether `t` tolerates `taint`: an empty effect matches every effect, an empty key (with
/// `Exists`) every key; `Equal` (or no operator) compares values, `Exists` ignores them. `Lt` and
/// `Gt` never match (feature gate TaintTolerationComparisonOperators is alpha and off).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect = t.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of the tolerations tolerates the taint.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The first NoSchedule or NoExecute taint none of the tolerations tolerates
/// (`FindMatchingUntoleratedTaint` with `DoNotScheduleTaintsFilterFunc`).
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE)
        .find(|t| !tolerated(tolerations, t))
}

/// Number of PreferNoSchedule taints not tolerated by the tolerations that apply to them
/// (those with effect PreferNoSchedule or no effect): `countIntolerableTaintsPreferNoSchedule`.
pub fn intolerable_prefer_no_schedule(taints: &[Taint], tolerations: &[Toleration]) -> i64 {
    let relevant: Vec<Toleration> = tolerations
        .iter()
        .filter(|t| {
            matches!(
                t.effect.as_deref(),
                None | Some("") | Some(PREFER_NO_SCHEDULE)
            )
        })
        .cloned()
        .collect();
    taints
        .iter()
        .filter(|t| t.effect == PREFER_NO_SCHEDULE && !tolerated(&relevant, t))
        .count() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        serde_json::from_value(json!({"key": key, "value": value, "effect": effect})).unwrap()
    }
    fn tol(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn toleration_matching_rules() {
        let t = taint("dedicated", "gpu", NO_SCHEDULE);
        let cases = [
            (
                json!({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}),
                true,
            ),
            (json!({"key": "dedicated", "value": "gpu"}), true),
            (json!({"key": "dedicated", "value": "cpu"}), false),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (
                json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
            (json!({"operator": "Exists"}), true),
            (json!({"key": "other", "operator": "Exists"}), false),
            (
                json!({"key": "dedicated", "operator": "Gt", "value": "1"}),
                false,
            ),
        ];
        for (v, want) in cases {
            assert_eq!(tolerates(&tol(v.clone()), &t), want, "{v}");
        }
    }

    #[test]
    fn only_no_schedule_and_no_execute_taints_filter() {
        let taints = vec![
            taint("a", "", PREFER_NO_SCHEDULE),
            taint(TAINT_NOT_READY, "", NO_EXECUTE),
        ];
        assert_eq!(
            first_untolerated(&taints, &[]).map(|t| t.key.as_str()),
            Some(TAINT_NOT_READY)
        );
        let tolerations = [tol(
            json!({"key": TAINT_NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
        )];
        assert!(first_untolerated(&taints, &tolerations).is_none());
    }

    #[test]
    fn prefer_no_schedule_counts_only_relevant_tolerations() {
        let taints = vec![
            taint("a", "", PREFER_NO_SCHEDULE),
            taint("b", "", PREFER_NO_SCHEDULE),
        ];
        assert_eq!(intolerable_prefer_no_schedule(&taints, &[]), 2);
        let tolerations = [
            tol(json!({"key": "a", "operator": "Exists", "effect": "PreferNoSchedule"})),
            // a NoSchedule toleration does not apply to PreferNoSchedule taints
            tol(json!({"key": "b", "operator": "Exists", "effect": "NoSchedule"})),
        ];
        assert_eq!(intolerable_prefer_no_schedule(&taints, &tolerations), 1);
    }
}
