//! Score plugins: which feasible node is best? Pure functions of the pod and a [`NodeInfo`] with
//! kube-scheduler's formulas, normalisations and default weights (k/k
//! `pkg/scheduler/framework/plugins/noderesources/{least_allocated,balanced_allocation}.go`,
//! `nodeaffinity`, `tainttoleration`, `helper/normalize_score.go`, `apis/config/v1/default_plugins.go`;
//! PodTopologySpread's and InterPodAffinity's scores are in [`super::topology_spread`] and
//! [`super::interpod_affinity`]).

use super::filters::SchedPod;
use super::nodeinfo::NodeInfo;
use super::taints::intolerable_prefer_no_schedule;
use super::{interpod_affinity, topology_spread};
use rand::Rng;

/// The highest score a plugin gives a node (`fwk.MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// Default plugin weights (`getDefaultPlugins`).
pub const WEIGHT_TAINT_TOLERATION: i64 = 3;
pub const WEIGHT_NODE_AFFINITY: i64 = 2;
pub const WEIGHT_NODE_RESOURCES_FIT: i64 = 1;
pub const WEIGHT_BALANCED_ALLOCATION: i64 = 1;
pub const WEIGHT_POD_TOPOLOGY_SPREAD: i64 = 2;
pub const WEIGHT_INTER_POD_AFFINITY: i64 = 2;

fn least_requested(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// NodeResourcesFit with the default LeastAllocated strategy (cpu and memory, weight 1 each):
/// the free fraction after placing the pod, from the "non-zero" requests. 0..=100.
pub fn least_allocated(pod: &SchedPod, ni: &NodeInfo) -> i64 {
    let pairs = [
        (
            ni.non_zero_cpu + pod.non_zero_request.0,
            ni.allocatable.milli_cpu,
        ),
        (
            ni.non_zero_mem + pod.non_zero_request.1,
            ni.allocatable.memory,
        ),
    ];
    let (mut score, mut weights) = (0, 0);
    for (req, cap) in pairs {
        if cap == 0 {
            continue;
        }
        score += least_requested(req, cap);
        weights += 1;
    }
    if weights == 0 {
        0
    } else {
        score / weights
    }
}

fn balance(requested: &[i64], allocatable: &[i64]) -> i64 {
    let fractions: Vec<f64> = requested
        .iter()
        .zip(allocatable)
        .filter(|(_, a)| **a != 0)
        .map(|(r, a)| (*r as f64 / *a as f64).min(1.0))
        .collect();
    let std = match fractions.len() {
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n if n > 2 => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
        _ => 0.0,
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// NodeResourcesBalancedAllocation (v1.36: the change in cpu/memory balance the pod brings,
/// mapped to 50..=100 around 75). `None` for a pod that requests neither cpu nor memory: the
/// plugin skips best-effort pods.
pub fn balanced_allocation(pod: &SchedPod, ni: &NodeInfo) -> Option<i64> {
    let (cpu, mem) = pod.balanced_request;
    if cpu == 0 && mem == 0 {
        return None;
    }
    let alloc = [ni.allocatable.milli_cpu, ni.allocatable.memory];
    let before = [ni.requested.milli_cpu, ni.requested.memory];
    let mut after = [before[0] + cpu, before[1] + mem];
    let mut before = before;
    // a resource the node does not offer is left out of both
    for i in 0..2 {
        if alloc[i] == 0 {
            after[i] = 0;
            before[i] = 0;
        }
    }
    let with_pod = balance(&after, &alloc);
    let without_pod = balance(&before, &alloc);
    Some(MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with_pod - without_pod) / 2)
}

/// NodeAffinity's raw score: the summed weights of the matching preferred terms.
pub fn node_affinity(pod: &SchedPod, ni: &NodeInfo) -> i64 {
    pod.preferred.score(&ni.node)
}

/// TaintToleration's raw score: the number of intolerable PreferNoSchedule taints (reversed by
/// normalisation: fewer is better).
pub fn taint_toleration(pod: &SchedPod, ni: &NodeInfo) -> i64 {
    intolerable_prefer_no_schedule(ni.taints(), &pod.tolerations)
}

/// `helper.DefaultNormalizeScore`: scales to 0..=100 by the maximum; `reverse` flips it. All-zero
/// scores stay 0 (or become 100 when reversed).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0).max(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let v = MAX_NODE_SCORE * *s / max;
        *s = if reverse { MAX_NODE_SCORE - v } else { v };
    }
}

/// Weighted total score of each feasible node (same order as `nodes`); `all` is the whole
/// snapshot, over which topology spreading counts the pods.
pub fn score_nodes(pod: &SchedPod, nodes: &[&NodeInfo], all: &[&NodeInfo]) -> Vec<i64> {
    let zeros = || vec![0; nodes.len()];
    let spread = topology_spread::scores(pod, nodes, all).unwrap_or_else(zeros);
    let pod_affinity = interpod_affinity::scores(pod, nodes, all).unwrap_or_else(zeros);
    let mut taint: Vec<i64> = nodes.iter().map(|n| taint_toleration(pod, n)).collect();
    default_normalize(&mut taint, true);
    let mut affinity: Vec<i64> = if pod.preferred.is_empty() {
        vec![0; nodes.len()]
    } else {
        nodes.iter().map(|n| node_affinity(pod, n)).collect()
    };
    default_normalize(&mut affinity, false);
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            WEIGHT_TAINT_TOLERATION * taint[i]
                + WEIGHT_NODE_AFFINITY * affinity[i]
                + WEIGHT_NODE_RESOURCES_FIT * least_allocated(pod, n)
                + WEIGHT_BALANCED_ALLOCATION * balanced_allocation(pod, n).unwrap_or(0)
                + WEIGHT_POD_TOPOLOGY_SPREAD * spread[i]
                + WEIGHT_INTER_POD_AFFINITY * pod_affinity[i]
        })
        .collect()
}

/// Index of a node with the highest total, chosen uniformly at random among ties
/// (kube-scheduler orders equal totals by a random number per node).
pub fn select_host(totals: &[i64], rng: &mut impl Rng) -> Option<usize> {
    let best = *totals.iter().max()?;
    let mut chosen = None;
    let mut seen = 0u32;
    for (i, t) in totals.iter().enumerate() {
        if *t == best {
            seen += 1;
            if rng.random_range(0..seen) == 0 {
                chosen = Some(i);
            }
        }
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::nodeinfo::PodAccount;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn node(v: Value) -> NodeInfo {
        let mut v = v;
        if v["status"]["allocatable"].is_null() {
            v["status"]["allocatable"] = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
        }
        NodeInfo::new(Arc::new(serde_json::from_value(v).unwrap()))
    }

    fn pod(spec: Value) -> SchedPod {
        let mut spec = spec;
        if spec["containers"].is_null() {
            spec["containers"] = json!([{"name": "c"}]);
        }
        SchedPod::new(&serde_json::from_value(json!({"spec": spec})).unwrap())
    }

    fn req(cpu: &str, mem: &str) -> Value {
        json!([{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}])
    }

    #[test]
    fn least_allocated_prefers_emptier_nodes() {
        let p = pod(json!({"containers": req("1", "2Gi")}));
        let empty = node(json!({"metadata": {"name": "a"}}));
        // cpu (4-1)/4 = 75, memory (8-2)/8 = 75
        assert_eq!(least_allocated(&p, &empty), 75);
        let mut busy = node(json!({"metadata": {"name": "b"}}));
        let other: Pod =
            serde_json::from_value(json!({"spec": {"containers": req("2", "4Gi")}})).unwrap();
        busy.add_pod("o", PodAccount::of(&other));
        // cpu (4-3)/4 = 25, memory (8-6)/8 = 25
        assert_eq!(least_allocated(&p, &busy), 25);
    }

    #[test]
    fn least_allocated_counts_request_less_pods_as_100m_and_200mi() {
        let p = pod(json!({}));
        let n = node(
            json!({"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "1", "memory": "1000Mi", "pods": "10"}}}),
        );
        // cpu (1000-100)*100/1000 = 90, memory (1000-200)*100/1000 = 80 → 85
        assert_eq!(least_allocated(&p, &n), 85);
    }

    #[test]
    fn balanced_allocation_rewards_improving_balance_and_skips_best_effort() {
        let n = node(json!({"metadata": {"name": "a"}}));
        // even pod on an empty node: balance stays perfect → 50 + (50 + 100 - 100)/2 = 75
        assert_eq!(
            balanced_allocation(&pod(json!({"containers": req("2", "4Gi")})), &n),
            Some(75)
        );
        // cpu-only pod: fractions 0.5 / 0 → std 0.25 → with 75, without 100 → 50 + 25/2 = 62
        assert_eq!(
            balanced_allocation(
                &pod(
                    json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]})
                ),
                &n
            ),
            Some(62)
        );
        assert_eq!(balanced_allocation(&pod(json!({})), &n), None);
    }

    #[test]
    fn normalization_scales_and_reverses() {
        let mut s = vec![0, 5, 10];
        default_normalize(&mut s, false);
        assert_eq!(s, [0, 50, 100]);
        let mut s = vec![0, 1, 2];
        default_normalize(&mut s, true);
        assert_eq!(s, [100, 50, 0]);
        let mut s = vec![0, 0];
        default_normalize(&mut s, true);
        assert_eq!(s, [100, 100]);
        let mut s = vec![0, 0];
        default_normalize(&mut s, false);
        assert_eq!(s, [0, 0]);
    }

    #[test]
    fn preferred_affinity_and_prefer_no_schedule_taints_steer_placement() {
        let p = pod(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}}),
        );
        let a = node(json!({"metadata": {"name": "a", "labels": {"zone": "a"}}}));
        let b = node(json!({"metadata": {"name": "b", "labels": {"zone": "b"}}}));
        let t = score_nodes(&p, &[&a, &b], &[&a, &b]);
        assert_eq!(t[0] - t[1], WEIGHT_NODE_AFFINITY * 100);

        let p = pod(json!({}));
        let tainted = node(
            json!({"metadata": {"name": "t"}, "spec": {"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}}),
        );
        let clean = node(json!({"metadata": {"name": "c"}}));
        let t = score_nodes(&p, &[&tainted, &clean], &[&tainted, &clean]);
        assert_eq!(t[1] - t[0], WEIGHT_TAINT_TOLERATION * 100);
        let tolerant = pod(
            json!({"tolerations": [{"key": "k", "operator": "Exists", "effect": "PreferNoSchedule"}]}),
        );
        let t = score_nodes(&tolerant, &[&tainted, &clean], &[&tainted, &clean]);
        assert_eq!(t[0], t[1]);
    }

    #[test]
    fn ties_are_broken_at_random_among_the_best() {
        let mut rng = rand::rng();
        let mut seen = [0; 4];
        for _ in 0..400 {
            seen[select_host(&[5, 7, 7, 1], &mut rng).unwrap()] += 1;
        }
        assert_eq!(seen[0] + seen[3], 0);
        assert!(seen[1] > 100 && seen[2] > 100, "{seen:?}");
        assert_eq!(select_host(&[], &mut rng), None);
    }
}
