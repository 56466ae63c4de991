//! One scheduling attempt, pure: filter the nodes of a snapshot (kube-scheduler's adaptive
//! "enough feasible nodes" search from a rotating start index), score the feasible ones, pick the
//! best (ties at random), or explain the failure with kube-scheduler's exact message
//! (`0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node
//! affinity/selector. preemption: ...`). Mirrors k/k `pkg/scheduler/schedule_one.go`
//! (`schedulePod`, `findNodesThatFitPod`, `numFeasibleNodesToFind`), `framework/types.go`
//! (`FitError.Error`) and the message part of `framework/preemption` (`Evaluator.Preempt`,
//! `DefaultPreemption.SelectVictimsOnNode`) at v1.36.3.
//!
//! When no node fits, [`preemption::preempt`] (DefaultPreemption) runs over the same snapshot:
//! either it names a node and the pods to evict there ([`FitError::preemption`]; the failure
//! message then has no `preemption:` part, as kube-scheduler's), or its message is appended.

use super::filters::{plugin, Code, Rejection, SchedPod, ERR_AFFINITY_CONFLICT};
use super::interpod_affinity;
use super::nodeinfo::NodeInfo;
use super::preemption::{self, run_filters_with_nominated, Candidate, Nominator, Pdb};
use super::scores::{score_nodes, select_host};
use super::topology_spread::FilterState;
use rand::Rng;
use std::collections::BTreeMap;

/// `no nodes available to schedule pods` (`ErrNoNodesAvailable`).
pub const ERR_NO_NODES: &str = "no nodes available to schedule pods";

/// Below this many nodes every node is filtered (`minFeasibleNodesToFind`).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this (`minFeasibleNodesPercentageToFind`).
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// How many feasible nodes are enough to stop filtering (`numFeasibleNodesToFind` with the
/// default adaptive `percentageOfNodesToScore`: 50 % minus 1 % per 125 nodes, at least 5 %, at
/// least 100 nodes).
pub fn num_feasible_nodes_to_find(num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let percentage = 50usize
        .saturating_sub(num_all_nodes / 125)
        .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    (num_all_nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Why no node fits (`framework.FitError` + `Diagnosis`).
#[derive(Debug, Clone, PartialEq)]
pub struct FitError {
    pub num_all_nodes: usize,
    /// Set when a PreFilter rejected the pod for every node.
    pub pre_filter_msg: Option<String>,
    /// The nodes that were filtered and rejected, with the rejection.
    pub statuses: Vec<(String, Rejection)>,
    /// The rejection of every node not in `statuses`.
    pub absent: Option<Rejection>,
    /// The PostFilter (preemption) part, e.g. `preemption: 0/1 nodes are available: 1
    /// Preemption is not helpful for scheduling.`
    pub post_filter_msg: Option<String>,
    /// The node and victims preemption chose (the PostFilter result's nominated node).
    pub preemption: Option<Candidate>,
    /// The pod's nominated node is cleared (preemption found no node; see
    /// [`preemption::NotHelpful`]).
    pub clear_nomination: bool,
}

fn histogram(
    num_all_nodes: usize,
    statuses: &[(String, Rejection)],
    absent: Option<&Rejection>,
) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, r) in statuses {
        for reason in &r.reasons {
            *counts.entry(reason).or_insert(0) += 1;
        }
    }
    if statuses.len() < num_all_nodes {
        if let Some(a) = absent {
            for reason in &a.reasons {
                *counts.entry(reason).or_insert(0) += num_all_nodes - statuses.len();
            }
        }
    }
    // kube-scheduler sorts the "<count> <reason>" strings themselves
    let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    parts.join(", ")
}

impl FitError {
    /// `FitError.Error()`: `0/<N> nodes are available: <prefilter msg | sorted reason histogram>.
    /// <postfilter msg>`.
    pub fn message(&self) -> String {
        let mut msg = format!("0/{} nodes are available:", self.num_all_nodes);
        match &self.pre_filter_msg {
            Some(m) => msg.push_str(&format!(" {m}.")),
            None => {
                let h = histogram(self.num_all_nodes, &self.statuses, self.absent.as_ref());
                if !h.is_empty() {
                    msg.push_str(&format!(" {h}."));
                }
            }
        }
        if let Some(p) = self.post_filter_msg.as_deref().filter(|p| !p.is_empty()) {
            msg.push_str(&format!(" {p}"));
        }
        msg
    }

    /// The plugins that rejected at least one node (`Diagnosis.UnschedulablePlugins`).
    pub fn plugins(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = self
            .statuses
            .iter()
            .map(|(_, r)| r.plugin)
            .chain(self.absent.iter().map(|r| r.plugin))
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

/// A failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleError {
    /// The cluster has no nodes at all.
    NoNodes,
    /// No node fits.
    Fit(FitError),
    /// A plugin failed (not a rejection): the pod backs off and is retried; the message is
    /// kube-scheduler's (`running PreFilter plugin "VolumeBinding": ...`).
    Error(String),
}

impl ScheduleError {
    /// The text of the FailedScheduling event and of the PodScheduled condition.
    pub fn message(&self) -> String {
        match self {
            ScheduleError::NoNodes => ERR_NO_NODES.to_string(),
            ScheduleError::Fit(f) => f.message(),
            ScheduleError::Error(e) => e.clone(),
        }
    }
}

/// A successful attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub node: String,
    /// Nodes filtered (feasible + rejected).
    pub evaluated: usize,
    pub feasible: usize,
}

/// The rotating start index of the node search (`Scheduler.nextStartNodeIndex`), so that every
/// node gets its turn across attempts when only part of a large cluster is filtered.
#[derive(Debug, Default, Clone)]
pub struct SearchState {
    pub next_start_node_index: usize,
}

/// Schedules one pod over `nodes` (the snapshot, in a stable order), counting the pods
/// `nominator` holds on their nodes; preempts (in the result) when nothing fits, honouring
/// `pdbs` where it can.
pub fn schedule(
    pod: &SchedPod,
    nodes: &[&NodeInfo],
    nominator: &Nominator,
    pdbs: &[Pdb],
    state: &mut SearchState,
    rng: &mut impl Rng,
) -> Result<Placement, ScheduleError> {
    if nodes.is_empty() {
        return Err(ScheduleError::NoNodes);
    }
    let n = nodes.len();
    let restrict = pod.pinned_node_names.as_ref();
    if let Some(names) = restrict {
        if names.is_empty() {
            let rej = Rejection {
                plugin: plugin::NODE_AFFINITY,
                code: Code::UnschedulableAndUnresolvable,
                reasons: vec![ERR_AFFINITY_CONFLICT.into()],
            };
            let mut fe = FitError {
                num_all_nodes: n,
                pre_filter_msg: Some(ERR_AFFINITY_CONFLICT.into()),
                statuses: Vec::new(),
                absent: Some(rej),
                post_filter_msg: None,
                preemption: None,
                clear_nomination: false,
            };
            post_filter(&mut fe, pod, nodes, nominator, pdbs, rng);
            return Err(ScheduleError::Fit(fe));
        }
    }
    // the volume plugins' PreFilters (after NodeAffinity's, before PodTopologySpread's)
    if let Some(rej) = pod.volumes.as_ref().and_then(|v| v.rejection.clone()) {
        if rej.code == Code::Error {
            return Err(ScheduleError::Error(rej.reasons.join(", ")));
        }
        let mut fe = FitError {
            num_all_nodes: n,
            pre_filter_msg: Some(rej.reasons.join(", ")),
            statuses: Vec::new(),
            absent: Some(rej),
            post_filter_msg: None,
            preemption: None,
            clear_nomination: false,
        };
        post_filter(&mut fe, pod, nodes, nominator, pdbs, rng);
        return Err(ScheduleError::Fit(fe));
    }
    let candidates: Vec<&NodeInfo> = match restrict {
        Some(names) => nodes
            .iter()
            .copied()
            .filter(|ni| names.contains(&ni.name))
            .collect(),
        None => nodes.to_vec(),
    };
    let absent = restrict.map(|_| Rejection {
        plugin: plugin::NODE_AFFINITY,
        code: Code::UnschedulableAndUnresolvable,
        reasons: vec![format!(
            "node(s) didn't satisfy plugin(s) [{}]",
            plugin::NODE_AFFINITY
        )],
    });

    // PodTopologySpread's and InterPodAffinity's PreFilters count over every node of the snapshot
    let spread = FilterState::new(pod, nodes);
    let pod_affinity = interpod_affinity::FilterState::new(pod, nodes);
    let to_find = num_feasible_nodes_to_find(candidates.len());
    let mut feasible: Vec<&NodeInfo> = Vec::with_capacity(to_find.min(candidates.len()));
    let mut statuses: Vec<(String, Rejection)> = Vec::new();
    let start = state.next_start_node_index;
    for i in 0..candidates.len() {
        if feasible.len() >= to_find {
            break;
        }
        let ni = candidates[(start + i) % candidates.len()];
        let rejection = run_filters_with_nominated(pod, ni, nominator)
            .or_else(|| spread.filter(pod, ni))
            .or_else(|| pod_affinity.filter(pod, ni));
        match rejection {
            None => feasible.push(ni),
            Some(r) => statuses.push((ni.name.clone(), r)),
        }
    }
    let processed = feasible.len() + statuses.len();
    state.next_start_node_index = (start + processed) % n;
    // a plugin error fails the attempt (`findNodesThatPassFilters` returns it)
    if let Some((_, r)) = statuses.iter().find(|(_, r)| r.code == Code::Error) {
        return Err(ScheduleError::Error(r.reasons.join(", ")));
    }

    if feasible.is_empty() {
        let mut fe = FitError {
            num_all_nodes: n,
            pre_filter_msg: None,
            statuses,
            absent,
            post_filter_msg: None,
            preemption: None,
            clear_nomination: false,
        };
        post_filter(&mut fe, pod, nodes, nominator, pdbs, rng);
        return Err(ScheduleError::Fit(fe));
    }
    let node = if feasible.len() == 1 {
        feasible[0].name.clone()
    } else {
        let totals = score_nodes(pod, &feasible, nodes);
        let i = select_host(&totals, rng).expect("feasible nodes are not empty");
        feasible[i].name.clone()
    };
    Ok(Placement {
        node,
        evaluated: processed,
        feasible: feasible.len(),
    })
}

/// Runs the PostFilter (preemption) for a failed attempt: a chosen candidate, or its message.
fn post_filter(
    fe: &mut FitError,
    pod: &SchedPod,
    nodes: &[&NodeInfo],
    nominator: &Nominator,
    pdbs: &[Pdb],
    rng: &mut impl Rng,
) {
    match preemption::preempt(pod, nodes, fe, nominator, pdbs, rng) {
        Ok(c) => fe.preemption = Some(c),
        Err(e) => {
            fe.post_filter_msg = Some(e.message);
            fe.clear_nomination = e.clear_nomination;
        }
    }
}

/// [`schedule`] with no nominated pods, no PodDisruptionBudgets and a fresh search: what most
/// tests of the plugins need.
#[cfg(test)]
pub(crate) fn schedule_fresh(
    pod: &SchedPod,
    nodes: &[NodeInfo],
) -> Result<Placement, ScheduleError> {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    schedule(
        pod,
        &refs,
        &Nominator::new(),
        &[],
        &mut SearchState::default(),
        &mut rand::rng(),
    )
}

/// The node and victims (by name) preemption chooses for a pod that fits nowhere.
#[cfg(test)]
pub(crate) fn preemption_victims(pod: &SchedPod, nodes: &[NodeInfo]) -> (String, Vec<String>) {
    let Err(ScheduleError::Fit(fe)) = schedule_fresh(pod, nodes) else {
        panic!("the pod fits no node")
    };
    let c = fe.preemption.expect("preemption finds a candidate");
    (c.node, c.victims.into_iter().map(|v| v.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::nodeinfo::PodAccount;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn node(name: &str, extra: Value) -> NodeInfo {
        let mut v = json!({"metadata": {"name": name}, "status": {"allocatable": {
            "cpu": "2", "memory": "4Gi", "pods": "110"}}});
        if let Value::Object(m) = extra {
            for (k, val) in m {
                match (k.as_str(), val) {
                    ("labels", l) => v["metadata"]["labels"] = l,
                    ("taints", t) => v["spec"]["taints"] = t,
                    ("allocatable", a) => v["status"]["allocatable"] = a,
                    (k, val) => v["spec"][k] = val,
                }
            }
        }
        NodeInfo::new(Arc::new(serde_json::from_value(v).unwrap()))
    }

    fn pod(spec: Value) -> SchedPod {
        let mut spec = spec;
        if spec["containers"].is_null() {
            spec["containers"] = json!([{"name": "c"}]);
        }
        SchedPod::new(
            &serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}),
            )
            .unwrap(),
        )
    }

    fn cpu_pod(cpu: &str) -> SchedPod {
        pod(json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}))
    }

    fn run(p: &SchedPod, nodes: &[NodeInfo]) -> Result<Placement, ScheduleError> {
        schedule_fresh(p, nodes)
    }

    fn msg(p: &SchedPod, nodes: &[NodeInfo]) -> String {
        run(p, nodes).unwrap_err().message()
    }

    #[test]
    fn feasible_search_size_is_adaptive() {
        assert_eq!(num_feasible_nodes_to_find(3), 3);
        assert_eq!(num_feasible_nodes_to_find(100), 100);
        assert_eq!(num_feasible_nodes_to_find(1000), 420);
        assert_eq!(num_feasible_nodes_to_find(5000), 500);
        assert_eq!(
            num_feasible_nodes_to_find(200),
            100,
            "49 % of 200 is below the minimum"
        );
    }

    #[test]
    fn too_much_cpu_on_the_only_node() {
        assert_eq!(
            msg(&cpu_pod("1000"), &[node("vm", json!({}))]),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn mixed_reasons_are_counted_and_sorted() {
        let p = pod(json!({"nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]}));
        let nodes = [
            node("a", json!({"labels": {"disk": "ssd"}})),
            node("b", json!({})),
            node("c", json!({})),
        ];
        assert_eq!(
            msg(&p, &nodes),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn node_selector_mismatch_message() {
        let p = pod(json!({"nodeSelector": {"disk": "ssd"}}));
        assert_eq!(
            msg(&p, &[node("vm", json!({}))]),
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn taint_and_cordon_messages() {
        let nodes = [
            node(
                "a",
                json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}),
            ),
            node("b", json!({"unschedulable": true})),
        ];
        assert_eq!(
            msg(&pod(json!({})), &nodes),
            "0/2 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn resolvable_failures_without_lower_priority_pods_have_no_victims() {
        let mut a = node("a", json!({}));
        let hog: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "2"}}}]}}))
        .unwrap();
        a.add_pod("hog", PodAccount::of(&hog));
        assert_eq!(
            msg(&cpu_pod("1"), &[a]),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
    }

    #[test]
    fn port_conflicts_are_resolvable() {
        let mut a = node("a", json!({}));
        let user: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"containerPort": 80, "hostPort": 80}]}]}}))
        .unwrap();
        a.add_pod("u", PodAccount::of(&user));
        let p = pod(
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
        );
        assert_eq!(
            msg(&p, &[a, node("b", json!({"labels": {}, "taints": [{"key": "x", "effect": "NoExecute"}]}))]),
            "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 1 node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn higher_priority_pod_would_preempt_so_no_preemption_part() {
        let mut a = node("a", json!({}));
        let hog: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "2"}}}]}}))
        .unwrap();
        a.add_pod("hog", PodAccount::of(&hog));
        let p = pod(
            json!({"priority": 1000, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}),
        );
        assert_eq!(
            msg(&p, &[a]),
            "0/1 nodes are available: 1 Insufficient cpu."
        );
    }

    #[test]
    fn preemption_policy_never() {
        let p = pod(
            json!({"preemptionPolicy": "Never", "containers": [{"name": "c", "resources": {"requests": {"cpu": "10"}}}]}),
        );
        assert_eq!(
            msg(&p, &[node("a", json!({}))]),
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
        );
    }

    #[test]
    fn no_nodes_at_all() {
        assert_eq!(
            run(&pod(json!({})), &[]).unwrap_err(),
            ScheduleError::NoNodes
        );
        assert_eq!(
            ScheduleError::NoNodes.message(),
            "no nodes available to schedule pods"
        );
    }

    #[test]
    fn conflicting_match_fields_fail_in_prefilter() {
        let p = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["a"]},
                {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}}),
        );
        assert_eq!(
            msg(&p, &[node("a", json!({})), node("b", json!({}))]),
            "0/2 nodes are available: pod affinity terms conflict. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn match_fields_restrict_the_search() {
        let p = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "5"}}}]}),
        );
        assert_eq!(
            msg(&p, &[node("a", json!({})), node("b", json!({})), node("c", json!({}))]),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        let ok = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}}),
        );
        assert_eq!(
            run(&ok, &[node("a", json!({})), node("b", json!({}))])
                .unwrap()
                .node,
            "b"
        );
    }

    #[test]
    fn picks_the_emptier_node_and_rotates_the_start_index() {
        let mut busy = node("busy", json!({}));
        let hog: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1500m", "memory": "3Gi"}}}]}}))
        .unwrap();
        busy.add_pod("hog", PodAccount::of(&hog));
        let nodes = [busy, node("idle", json!({}))];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let mut st = SearchState::default();
        let p = cpu_pod("100m");
        let placed =
            schedule(&p, &refs, &Nominator::new(), &[], &mut st, &mut rand::rng()).unwrap();
        assert_eq!(placed.node, "idle");
        assert_eq!((placed.evaluated, placed.feasible), (2, 2));
        assert_eq!(st.next_start_node_index, 0, "(0 + 2) % 2");
    }

    #[test]
    fn large_clusters_stop_after_enough_feasible_nodes() {
        let nodes: Vec<NodeInfo> = (0..1000)
            .map(|i| node(&format!("n{i}"), json!({})))
            .collect();
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let mut st = SearchState::default();
        let place = |st: &mut SearchState| {
            let (nominator, p) = (Nominator::new(), cpu_pod("100m"));
            schedule(&p, &refs, &nominator, &[], st, &mut rand::rng()).unwrap()
        };
        let placed = place(&mut st);
        assert_eq!(placed.evaluated, 420);
        assert_eq!(st.next_start_node_index, 420);
        place(&mut st);
        assert_eq!(st.next_start_node_index, 840);
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        struct NodeSpec {
            cpu_m: u32,
            mem_mi: u32,
            max_pods: u8,
            zone: u8,
            tainted: bool,
            cordoned: bool,
            used: Vec<(u32, u32, Option<u16>)>,
        }

        fn node_spec() -> impl Strategy<Value = NodeSpec> {
            (
                0u32..4000,
                0u32..4096,
                0u8..4,
                0u8..3,
                any::<bool>(),
                proptest::bool::weighted(0.2),
                proptest::collection::vec(
                    (0u32..1500, 0u32..1500, proptest::option::of(80u16..83)),
                    0..3,
                ),
            )
                .prop_map(
                    |(cpu_m, mem_mi, max_pods, zone, tainted, cordoned, used)| NodeSpec {
                        cpu_m,
                        mem_mi,
                        max_pods,
                        zone,
                        tainted,
                        cordoned,
                        used,
                    },
                )
        }

        fn build(i: usize, s: &NodeSpec) -> NodeInfo {
            let taints = if s.tainted {
                json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
            } else {
                json!([])
            };
            let mut ni = NodeInfo::new(Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": format!("n{i}"), "labels": {"zone": format!("z{}", s.zone)}},
                    "spec": {"taints": taints, "unschedulable": s.cordoned},
                    "status": {"allocatable": {"cpu": format!("{}m", s.cpu_m),
                        "memory": format!("{}Mi", s.mem_mi), "pods": s.max_pods.to_string()}}}))
                .unwrap(),
            ));
            for (j, (cpu, mem, port)) in s.used.iter().enumerate() {
                let ports = port
                    .map(|p| json!([{"containerPort": 1, "hostPort": p}]))
                    .unwrap_or(json!([]));
                let p: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
                    "ports": ports,
                    "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}}}]}}))
                .unwrap();
                ni.add_pod(&format!("u{j}"), PodAccount::of(&p));
            }
            ni
        }

        proptest! {
            /// Whatever the cluster, a chosen node has room for the pod's requests, a free pod
            /// slot, free host ports, matching labels and no untolerated taint or cordon; and a
            /// failure means no node qualifies.
            #[test]
            fn never_binds_to_a_node_that_does_not_fit(
                nodes in proptest::collection::vec(node_spec(), 0..8),
                cpu in 0u32..2500, mem in 0u32..2500,
                port in proptest::option::of(80u16..83),
                zone in proptest::option::of(0u8..3),
                tolerate in any::<bool>(),
            ) {
                let infos: Vec<NodeInfo> = nodes.iter().enumerate().map(|(i, s)| build(i, s)).collect();
                let mut spec = json!({"containers": [{"name": "c",
                    "ports": port.map(|p| json!([{"containerPort": 1, "hostPort": p}])).unwrap_or(json!([])),
                    "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}}}]});
                if let Some(z) = zone { spec["nodeSelector"] = json!({"zone": format!("z{z}")}); }
                if tolerate { spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]); }
                let p = pod(spec);
                // an oracle written independently of the filters
                let fits = |i: usize| {
                    let s = &nodes[i];
                    let used_cpu: u32 = s.used.iter().map(|u| u.0).sum();
                    let used_mem: u32 = s.used.iter().map(|u| u.1).sum();
                    let room = (cpu == 0 || cpu + used_cpu <= s.cpu_m)
                        && (mem == 0 || mem + used_mem <= s.mem_mi)
                        && s.used.len() < s.max_pods as usize;
                    let ports_free = port.is_none() || !s.used.iter().any(|u| u.2 == port);
                    room && ports_free && !s.cordoned && (tolerate || !s.tainted)
                        && zone.is_none_or(|z| z == s.zone)
                };
                match run(&p, &infos) {
                    Ok(placed) => {
                        let i: usize = placed.node[1..].parse().unwrap();
                        prop_assert!(fits(i), "placed on n{} which does not fit: {:?}", i, nodes[i]);
                    }
                    Err(e) => prop_assert!(
                        (0..nodes.len()).all(|i| !fits(i)),
                        "failed ({}) although a node fits", e.message()
                    ),
                }
            }
        }
    }
}
