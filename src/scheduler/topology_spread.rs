//! PodTopologySpread: spreading a pod's matching pods across topology domains (nodes, zones), as
//! kube-scheduler does by default (k/k `pkg/scheduler/framework/plugins/podtopologyspread` and
//! `plugins/helper/spread.go` at v1.36.3; user docs: "Pod Topology Spread Constraints").
//!
//! - **Filter** (`whenUnsatisfiable: DoNotSchedule`): on a node whose domain would then hold
//!   `matching + self - global minimum > maxSkew` pods, the pod does not fit (`node(s) didn't match
//!   pod topology spread constraints`); a node without the topology key does not fit either
//!   (`... (missing required label)`, unresolvable).
//! - **Score** (`ScheduleAnyway`, and the system defaults for a pod without constraints): fewer
//!   matching pods in the node's domains scores higher, weight 2.
//! - **System defaults**: a pod with no constraints of its own is spread with `maxSkew: 3` over
//!   `kubernetes.io/hostname` and `maxSkew: 5` over `topology.kubernetes.io/zone`, both
//!   `ScheduleAnyway`, selecting the pods the pod's Services and its controlling ReplicaSet,
//!   StatefulSet or ReplicationController select ([`default_selector`]).
//!
//! Everything here is pure: the constraints come from the pod and the selectors the scheduler
//! keeps of Services and controllers ([`Listers`]); counts come from the cache snapshot.
//! Not carried over: nominated pods are not counted in the filter's domain counts (kube-scheduler
//! adds them through the PreFilter extensions); preemption does count the victims it removes
//! ([`FilterState::with_node`]).

use super::filters::{plugin, Code, Rejection, SchedPod};
use super::listers::Listers;
use super::nodeinfo::NodeInfo;
use super::scores::MAX_NODE_SCORE;
use super::taints::first_untolerated;
use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// `ErrReasonConstraintsNotMatch`.
pub const ERR_CONSTRAINTS_NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
/// `ErrReasonNodeLabelNotMatch`.
pub const ERR_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
/// `v1.LabelHostname`.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// `v1.LabelTopologyZone`.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// One parsed label requirement (`labels.Requirement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A label selector as `labels.Selector`: `Nothing` (a nil `metav1.LabelSelector`) matches no
/// pod; `Match` with no requirements (an empty one) matches every pod but, as kube-scheduler's
/// `countPodsMatchSelector`, counts none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Nothing,
    Match(Vec<Requirement>),
}

impl Selector {
    /// `metav1.LabelSelectorAsSelector`; an invalid selector (unknown operator, `In` without
    /// values, `Exists` with values) is an error.
    pub fn of(sel: Option<&LabelSelector>) -> Result<Self, String> {
        let Some(sel) = sel else {
            return Ok(Selector::Nothing);
        };
        let mut reqs: Vec<Requirement> = sel
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
            .collect();
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let r = match (e.operator.as_str(), values.is_empty()) {
                ("In", false) => Requirement::In(e.key.clone(), values),
                ("NotIn", false) => Requirement::NotIn(e.key.clone(), values),
                ("Exists", true) => Requirement::Exists(e.key.clone()),
                ("DoesNotExist", true) => Requirement::DoesNotExist(e.key.clone()),
                (op, _) => {
                    return Err(format!(
                        "invalid label selector operator {op:?} for key {:?}",
                        e.key
                    ))
                }
            };
            reqs.push(r);
        }
        Ok(Selector::Match(reqs))
    }

    /// A selector of exactly these labels (`labels.Set.AsSelector`).
    pub fn of_set(set: &BTreeMap<String, String>) -> Self {
        Selector::Match(
            set.iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
        )
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Match(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }

    /// `labels.Selector.Empty()`: no requirements.
    pub fn is_empty(&self) -> bool {
        matches!(self, Selector::Match(r) if r.is_empty())
    }

    fn add(&mut self, more: impl IntoIterator<Item = Requirement>) {
        if let Selector::Match(reqs) = self {
            reqs.extend(more);
        }
    }
}

/// One constraint as the plugin uses it (`topologySpreadConstraint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub selector: Selector,
    /// `minDomains`, 1 when unset.
    pub min_domains: i32,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes matching the pod's node selector and
    /// required node affinity count.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default `Ignore`): only nodes whose NoSchedule/NoExecute taints
    /// the pod tolerates count.
    pub honor_node_taints: bool,
}

/// The pod's constraints, split by `whenUnsatisfiable`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpreadConstraints {
    /// `DoNotSchedule`: the filter.
    pub hard: Vec<Constraint>,
    /// `ScheduleAnyway`: the score.
    pub soft: Vec<Constraint>,
    /// The pod named constraints of its own (else the system defaults apply, once
    /// [`SpreadConstraints::system_defaults`] gives them a selector).
    pub explicit: bool,
}

/// `filterTopologySpreadConstraints` for one `whenUnsatisfiable` action; `matchLabelKeys` add the
/// pod's values of those keys to the selector.
fn constraints_for(
    list: &[TopologySpreadConstraint],
    labels: &BTreeMap<String, String>,
    action: &str,
) -> Vec<Constraint> {
    list.iter()
        .filter(|c| c.when_unsatisfiable == action)
        .map(|c| {
            // an invalid selector matches nothing (the API server's validation refuses one)
            let mut selector = Selector::of(c.label_selector.as_ref()).unwrap_or(Selector::Nothing);
            let keyed: Vec<Requirement> = c
                .match_label_keys
                .iter()
                .flatten()
                .filter_map(|k| {
                    labels
                        .get(k)
                        .map(|v| Requirement::In(k.clone(), vec![v.clone()]))
                })
                .collect();
            if !keyed.is_empty() {
                if selector == Selector::Nothing {
                    selector = Selector::Match(Vec::new());
                }
                selector.add(keyed);
            }
            Constraint {
                max_skew: c.max_skew,
                topology_key: c.topology_key.clone(),
                selector,
                min_domains: c.min_domains.unwrap_or(1),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            }
        })
        .collect()
}

impl SpreadConstraints {
    /// The pod's own `topologySpreadConstraints` (empty when it has none).
    pub fn of(pod: &Pod) -> Self {
        let list = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or_default();
        if list.is_empty() {
            return Self::default();
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        Self {
            hard: constraints_for(list, &labels, "DoNotSchedule"),
            soft: constraints_for(list, &labels, "ScheduleAnyway"),
            explicit: true,
        }
    }

    /// kube-scheduler's system default constraints (`systemDefaultConstraints`, both
    /// `ScheduleAnyway`) over `selector`; none when the selector is empty, as for a pod no
    /// Service or controller selects (`buildDefaultConstraints`).
    pub fn system_defaults(selector: Selector) -> Self {
        if selector.is_empty() || selector == Selector::Nothing {
            return Self::default();
        }
        let c = |key: &str, max_skew| Constraint {
            max_skew,
            topology_key: key.to_string(),
            selector: selector.clone(),
            min_domains: 1,
            honor_node_affinity: true,
            honor_node_taints: false,
        };
        Self {
            hard: Vec::new(),
            soft: vec![c(LABEL_HOSTNAME, 3), c(LABEL_ZONE, 5)],
            explicit: false,
        }
    }
}

/// `helper.DefaultSelector`: the labels of every Service in the pod's namespace whose selector
/// matches the pod, plus the selector of the pod's controller when it is a ReplicationController,
/// ReplicaSet or StatefulSet (looked up by name).
pub fn default_selector(pod: &Pod, sources: &Listers) -> Selector {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    for ((sns, _), sel) in &sources.services {
        // a Service without a selector selects no pod (GetPodServices)
        if *sns == ns && !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            set.extend(sel.clone());
        }
    }
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let Some(owner) = owner else {
        return Selector::of_set(&set);
    };
    let group = owner
        .api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    let key = (ns, owner.name.clone());
    match (group, owner.kind.as_str()) {
        ("", "ReplicationController") => {
            if let Some(rc) = sources.replication_controllers.get(&key) {
                set.extend(rc.clone());
            }
            Selector::of_set(&set)
        }
        ("apps", "ReplicaSet") | ("apps", "StatefulSet") => {
            let mut selector = Selector::of_set(&set);
            let found = if owner.kind == "ReplicaSet" {
                sources.replica_sets.get(&key)
            } else {
                sources.stateful_sets.get(&key)
            };
            if let Some(Ok(Selector::Match(reqs))) = found.map(|s| Selector::of(Some(s))) {
                selector.add(reqs);
            }
            selector
        }
        _ => Selector::of_set(&set),
    }
}

/// Whether a change of the bound pod `changed` (added, relabelled, terminating) may let `waiting`,
/// rejected earlier, pass the spread filter now: it is in the same namespace and one of
/// `waiting`'s own `DoNotSchedule` constraints selects it (`isSchedulableAfterPodChange`).
pub fn pod_change_may_help(waiting: &Pod, changed: &Pod) -> bool {
    let has_constraints = waiting
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty());
    if !has_constraints || waiting.metadata.namespace != changed.metadata.namespace {
        return false;
    }
    let labels = changed.metadata.labels.clone().unwrap_or_default();
    SpreadConstraints::of(waiting)
        .hard
        .iter()
        .any(|c| c.selector.matches(&labels))
}

fn has_all_keys(ni: &NodeInfo, constraints: &[Constraint]) -> bool {
    let labels = ni.labels();
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// `matchNodeInclusionPolicies`.
fn node_included(c: &Constraint, pod: &SchedPod, ni: &NodeInfo) -> bool {
    if c.honor_node_affinity && !pod.required.matches(&ni.node) {
        return false;
    }
    if c.honor_node_taints && first_untolerated(ni.taints(), &pod.tolerations).is_some() {
        return false;
    }
    true
}

/// `countPodsMatchSelector`: the node's pods in the pod's namespace, not terminating, that the
/// selector matches (none for an empty selector).
fn count_matching(ni: &NodeInfo, selector: &Selector, namespace: &str) -> i64 {
    if selector.is_empty() {
        return 0;
    }
    ni.pods()
        .filter(|(_, a)| !a.terminating && a.namespace == namespace && selector.matches(&a.labels))
        .count() as i64
}

/// The filter's pre-computed state (`preFilterState`): for each hard constraint, the matching
/// pods per topology value over every eligible node.
#[derive(Debug, Clone, Default)]
pub struct FilterState {
    counts: Vec<HashMap<String, i64>>,
}

impl FilterState {
    /// `calPreFilterState` over all nodes of the snapshot.
    pub fn new(pod: &SchedPod, nodes: &[&NodeInfo]) -> Self {
        let cs = &pod.spread.hard;
        let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); cs.len()];
        if cs.is_empty() {
            return Self { counts };
        }
        for ni in nodes {
            for (i, nc) in Self::node_counts(pod, ni).into_iter().enumerate() {
                if let Some((value, n)) = nc {
                    *counts[i].entry(value).or_insert(0) += n;
                }
            }
        }
        Self { counts }
    }

    /// Each hard constraint's `(topology value, matching pods)` on one node, for the eligible
    /// nodes (`updateWithPod` works per pod; per node is the same sum).
    fn node_counts(pod: &SchedPod, ni: &NodeInfo) -> Vec<Option<(String, i64)>> {
        let cs = &pod.spread.hard;
        if !has_all_keys(ni, cs) {
            return vec![None; cs.len()];
        }
        let labels = ni.labels();
        cs.iter()
            .map(|c| {
                node_included(c, pod, ni).then(|| {
                    let n = count_matching(ni, &c.selector, &pod.namespace);
                    (labels[&c.topology_key].clone(), n)
                })
            })
            .collect()
    }

    /// The state once `before`'s pods are those of `after` (the same node): what preemption
    /// checks after removing or re-adding victims (the PreFilter extensions' `RemovePod` and
    /// `AddPod`).
    pub fn with_node(&self, pod: &SchedPod, before: &NodeInfo, after: &NodeInfo) -> Self {
        let mut counts = self.counts.clone();
        let old = Self::node_counts(pod, before);
        let new = Self::node_counts(pod, after);
        for (i, (o, n)) in old.into_iter().zip(new).enumerate() {
            if let Some((v, c)) = o {
                *counts[i].entry(v).or_insert(0) -= c;
            }
            if let Some((v, c)) = n {
                *counts[i].entry(v).or_insert(0) += c;
            }
        }
        Self { counts }
    }

    /// The global minimum of constraint `i`: 0 while fewer domains than `minDomains` exist;
    /// unbounded when no domain exists (every node then passes).
    fn min_match(&self, i: usize, min_domains: i32) -> i64 {
        let domains = &self.counts[i];
        if (domains.len() as i64) < min_domains as i64 {
            return 0;
        }
        domains.values().copied().min().unwrap_or(i32::MAX as i64)
    }

    /// `Filter`: `None` when the node keeps every hard constraint's skew.
    pub fn filter(&self, pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
        let labels = ni.labels();
        for (i, c) in pod.spread.hard.iter().enumerate() {
            let Some(value) = labels.get(&c.topology_key) else {
                return Some(Rejection {
                    plugin: plugin::POD_TOPOLOGY_SPREAD,
                    code: Code::UnschedulableAndUnresolvable,
                    reasons: vec![ERR_NODE_LABEL_NOT_MATCH.into()],
                });
            };
            let self_match = c.selector.matches(&pod.labels) as i64;
            let matching = self.counts[i].get(value).copied().unwrap_or(0);
            if matching + self_match - self.min_match(i, c.min_domains) > c.max_skew as i64 {
                return Some(Rejection {
                    plugin: plugin::POD_TOPOLOGY_SPREAD,
                    code: Code::Unschedulable,
                    reasons: vec![ERR_CONSTRAINTS_NOT_MATCH.into()],
                });
            }
        }
        None
    }
}

/// The plugin's normalized scores (0..=100) of `feasible`, counting pods on `all` nodes
/// (`PreScore`, `Score`, `NormalizeScore`); `None` when the plugin skips (no soft constraints).
pub fn scores(pod: &SchedPod, feasible: &[&NodeInfo], all: &[&NodeInfo]) -> Option<Vec<i64>> {
    let cs = &pod.spread.soft;
    if cs.is_empty() || all.is_empty() {
        return None;
    }
    // the system defaults spread over whatever labels nodes have; explicit constraints need
    // every key on a node
    let require_all = pod.spread.explicit;
    let ignored: BTreeSet<&str> = feasible
        .iter()
        .filter(|ni| require_all && !has_all_keys(ni, cs))
        .map(|ni| ni.name.as_str())
        .collect();
    // domains of each non-hostname constraint, among the feasible nodes
    let mut domain_counts: Vec<BTreeMap<String, i64>> = vec![BTreeMap::new(); cs.len()];
    for ni in feasible
        .iter()
        .filter(|ni| !ignored.contains(ni.name.as_str()))
    {
        let labels = ni.labels();
        for (i, c) in cs.iter().enumerate() {
            if c.topology_key != LABEL_HOSTNAME {
                let v = labels.get(&c.topology_key).cloned().unwrap_or_default();
                domain_counts[i].entry(v).or_insert(0);
            }
        }
    }
    let weights: Vec<f64> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let size = if c.topology_key == LABEL_HOSTNAME {
                feasible.len() - ignored.len()
            } else {
                domain_counts[i].len()
            };
            ((size + 2) as f64).ln()
        })
        .collect();
    for ni in all {
        if require_all && !has_all_keys(ni, cs) {
            continue;
        }
        let labels = ni.labels();
        for (i, c) in cs.iter().enumerate() {
            if !node_included(c, pod, ni) {
                continue;
            }
            let v = labels.get(&c.topology_key).cloned().unwrap_or_default();
            if let Some(n) = domain_counts[i].get_mut(&v) {
                *n += count_matching(ni, &c.selector, &pod.namespace);
            }
        }
    }
    let raw: Vec<Option<i64>> = feasible
        .iter()
        .map(|ni| {
            if ignored.contains(ni.name.as_str()) {
                return None;
            }
            let labels = ni.labels();
            let mut score = 0f64;
            for (i, c) in cs.iter().enumerate() {
                let Some(v) = labels.get(&c.topology_key) else {
                    continue;
                };
                let cnt = if c.topology_key == LABEL_HOSTNAME {
                    count_matching(ni, &c.selector, &pod.namespace)
                } else {
                    domain_counts[i].get(v).copied().unwrap_or(0)
                };
                score += cnt as f64 * weights[i] + (c.max_skew - 1) as f64;
            }
            Some(score.round() as i64)
        })
        .collect();
    let present = raw.iter().flatten();
    let min = present.clone().copied().min().unwrap_or(0);
    let max = present.copied().max().unwrap_or(0);
    Some(
        raw.iter()
            .map(|s| match s {
                None => 0,
                Some(_) if max == 0 => MAX_NODE_SCORE,
                Some(s) => MAX_NODE_SCORE * (max + min - s) / max,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests;
