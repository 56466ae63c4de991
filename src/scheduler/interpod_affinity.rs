//! InterPodAffinity: pod affinity and anti-affinity, as kube-scheduler's default plugin (k/k
//! `pkg/scheduler/framework/plugins/interpodaffinity` at v1.36.3, `AffinityTerm` in
//! `k8s.io/kube-scheduler/framework`; user docs: "Assigning Pods to Nodes", inter-pod affinity and
//! anti-affinity).
//!
//! - **Filter**: a node fits when, in its topology domain of each required affinity term, some pod
//!   matches all of the pod's required affinity terms (or, for the first pod of a group, no pod
//!   anywhere does and the pod matches its own terms); no pod in the domain of a required
//!   anti-affinity term matches it; and no pod already placed has a required anti-affinity term
//!   that matches the pod within the node's domain. kube-scheduler's three reasons.
//! - **Score** (weight 2): the preferred terms of the pod against the pods in each domain, the
//!   preferred terms of the pods placed against the pod, and their required affinity terms with
//!   `hardPodAffinityWeight` 1; normalized to 0..=100 between the lowest and highest node.
//!
//! A term's namespaces are its `namespaces`, or the pod's own when it names none and has no
//! `namespaceSelector`; a `namespaceSelector` adds the namespaces whose labels it matches (the
//! incoming pod's terms are resolved against the namespaces the scheduler watches, as
//! `mergeAffinityTermNamespacesIfNotEmpty`). Not carried over, as for topology spreading:
//! nominated pods are not counted in the filter's state.

use super::filters::{plugin, Code, Rejection, SchedPod};
use super::nodeinfo::NodeInfo;
use super::scores::MAX_NODE_SCORE;
use super::topology_spread::Selector;
use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// `ErrReasonAffinityRulesNotMatch`.
pub const ERR_AFFINITY_RULES: &str = "node(s) didn't match pod affinity rules";
/// `ErrReasonAntiAffinityRulesNotMatch`.
pub const ERR_ANTI_AFFINITY_RULES: &str = "node(s) didn't match pod anti-affinity rules";
/// `ErrReasonExistingAntiAffinityRulesNotMatch`.
pub const ERR_EXISTING_ANTI_AFFINITY_RULES: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// `InterPodAffinityArgs.hardPodAffinityWeight` default.
pub const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

/// Labels by name (namespaces' labels).
pub type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

/// One pod (anti-)affinity term (`fwk.AffinityTerm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    pub namespaces: BTreeSet<String>,
    pub namespace_selector: Selector,
    pub selector: Selector,
    pub topology_key: String,
}

impl AffinityTerm {
    /// `newAffinityTerm` for a term of a pod in `namespace`; an invalid selector selects nothing.
    pub fn of(namespace: &str, t: &PodAffinityTerm) -> Self {
        let names = t.namespaces.clone().unwrap_or_default();
        let namespaces = if names.is_empty() && t.namespace_selector.is_none() {
            BTreeSet::from([namespace.to_string()])
        } else {
            names.into_iter().collect()
        };
        Self {
            namespaces,
            namespace_selector: Selector::of(t.namespace_selector.as_ref())
                .unwrap_or(Selector::Nothing),
            selector: Selector::of(t.label_selector.as_ref()).unwrap_or(Selector::Nothing),
            topology_key: t.topology_key.clone(),
        }
    }

    /// `AffinityTerm.Matches`: the pod is in one of the term's namespaces (or its namespace's
    /// labels match the namespace selector) and the selector matches its labels.
    pub fn matches(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let in_namespace = self.namespaces.contains(namespace)
            || namespace_labels.is_some_and(|l| self.namespace_selector.matches(l));
        in_namespace && self.selector.matches(labels)
    }

    /// `mergeAffinityTermNamespacesIfNotEmpty`: a non-empty namespace selector becomes the names
    /// of the namespaces it matches now.
    fn resolve_namespaces(&mut self, all: &NamespaceLabels) {
        if self.namespace_selector.is_empty() || self.namespace_selector == Selector::Nothing {
            return;
        }
        for (name, labels) in all {
            if self.namespace_selector.matches(labels) {
                self.namespaces.insert(name.clone());
            }
        }
        self.namespace_selector = Selector::Nothing;
    }
}

/// A preferred term and its weight (1..=100).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedTerm {
    pub term: AffinityTerm,
    pub weight: i64,
}

/// A pod's pod affinity and anti-affinity, parsed (`PodInfo`'s term lists).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinityTerms {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedTerm>,
    pub preferred_anti_affinity: Vec<WeightedTerm>,
}

impl PodAffinityTerms {
    /// The pod's terms; `None` for a pod with neither pod affinity nor anti-affinity (most pods).
    pub fn of(pod: &Pod) -> Option<Arc<Self>> {
        let affinity = pod.spec.as_ref()?.affinity.as_ref()?;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let required = |ts: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            ts.into_iter()
                .flatten()
                .map(|t| AffinityTerm::of(ns, t))
                .collect()
        };
        let preferred = |ts: Option<&Vec<WeightedPodAffinityTerm>>| -> Vec<WeightedTerm> {
            ts.into_iter()
                .flatten()
                .map(|w| WeightedTerm {
                    term: AffinityTerm::of(ns, &w.pod_affinity_term),
                    weight: w.weight as i64,
                })
                .collect()
        };
        let a = affinity.pod_affinity.as_ref();
        let anti = affinity.pod_anti_affinity.as_ref();
        let terms = Self {
            required_affinity: required(a.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            required_anti_affinity: required(anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: preferred(a.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: preferred(anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
        };
        (terms != Self::default()).then(|| Arc::new(terms))
    }

    /// The incoming pod's terms with their namespace selectors resolved against `namespaces`.
    pub fn resolved(&self, namespaces: &NamespaceLabels) -> Self {
        let mut t = self.clone();
        let terms = t
            .required_affinity
            .iter_mut()
            .chain(t.required_anti_affinity.iter_mut())
            .chain(t.preferred_affinity.iter_mut().map(|w| &mut w.term))
            .chain(t.preferred_anti_affinity.iter_mut().map(|w| &mut w.term));
        for term in terms {
            term.resolve_namespaces(namespaces);
        }
        t
    }
}

type TopologyPair = (String, String);
type Counts = HashMap<TopologyPair, i64>;

fn add(counts: &mut Counts, ni: &NodeInfo, key: &str, n: i64) {
    if let Some(v) = ni.labels().get(key) {
        *counts.entry((key.to_string(), v.clone())).or_insert(0) += n;
    }
}

/// Whether the pod (namespace, labels) matches every term (`podMatchesAllAffinityTerms`; false
/// for no terms).
fn matches_all(terms: &[AffinityTerm], namespace: &str, labels: &BTreeMap<String, String>) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(namespace, labels, None))
}

/// The filter's pre-computed state (`preFilterState`).
#[derive(Debug, Clone, Default)]
pub struct FilterState {
    /// Placed pods' required anti-affinity terms that match the pod, by their node's domain.
    existing_anti_affinity: Counts,
    /// Pods matching all of the pod's required affinity terms, by domain of each term.
    affinity: Counts,
    /// Pods matching one of the pod's required anti-affinity terms, by that term's domain.
    anti_affinity: Counts,
}

impl FilterState {
    /// One node's contribution to the three counts.
    fn node_counts(pod: &SchedPod, ni: &NodeInfo) -> (Counts, Counts, Counts) {
        let (mut existing, mut aff, mut anti) = Default::default();
        let own = pod.pod_affinity.as_deref();
        for (_, a) in ni.pods() {
            if let Some(theirs) = a.affinity.as_deref() {
                for t in &theirs.required_anti_affinity {
                    if t.matches(&pod.namespace, &pod.labels, Some(&pod.namespace_labels)) {
                        add(&mut existing, ni, &t.topology_key, 1);
                    }
                }
            }
            let Some(own) = own else { continue };
            if matches_all(&own.required_affinity, &a.namespace, &a.labels) {
                for t in &own.required_affinity {
                    add(&mut aff, ni, &t.topology_key, 1);
                }
            }
            for t in &own.required_anti_affinity {
                if t.matches(&a.namespace, &a.labels, None) {
                    add(&mut anti, ni, &t.topology_key, 1);
                }
            }
        }
        (existing, aff, anti)
    }

    /// `PreFilter` over every node of the snapshot.
    pub fn new(pod: &SchedPod, nodes: &[&NodeInfo]) -> Self {
        let mut s = Self::default();
        for ni in nodes {
            s.apply(pod, ni, 1);
        }
        s
    }

    fn apply(&mut self, pod: &SchedPod, ni: &NodeInfo, sign: i64) {
        let (e, a, n) = Self::node_counts(pod, ni);
        for (mine, theirs) in [
            (&mut self.existing_anti_affinity, e),
            (&mut self.affinity, a),
            (&mut self.anti_affinity, n),
        ] {
            for (k, v) in theirs {
                let c = mine.entry(k.clone()).or_insert(0);
                *c += sign * v;
                if *c == 0 {
                    mine.remove(&k);
                }
            }
        }
    }

    /// The state once `before`'s pods are those of `after` (the same node): what preemption
    /// checks after removing or re-adding victims (`AddPod` / `RemovePod`).
    pub fn with_node(&self, pod: &SchedPod, before: &NodeInfo, after: &NodeInfo) -> Self {
        let mut s = self.clone();
        s.apply(pod, before, -1);
        s.apply(pod, after, 1);
        s
    }

    /// `Filter`.
    pub fn filter(&self, pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
        let reject = |code, reason: &str| {
            Some(Rejection {
                plugin: plugin::INTER_POD_AFFINITY,
                code,
                reasons: vec![reason.to_string()],
            })
        };
        let labels = ni.labels();
        let own = pod.pod_affinity.as_deref();
        let pair = |key: &str| labels.get(key).map(|v| (key.to_string(), v.clone()));
        // satisfyPodAffinity
        if let Some(own) = own.filter(|o| !o.required_affinity.is_empty()) {
            let mut pods_exist = true;
            for t in &own.required_affinity {
                match pair(&t.topology_key) {
                    None => return reject(Code::UnschedulableAndUnresolvable, ERR_AFFINITY_RULES),
                    Some(p) if self.affinity.get(&p).copied().unwrap_or(0) <= 0 => {
                        pods_exist = false
                    }
                    Some(_) => {}
                }
            }
            let first_of_group = self.affinity.is_empty()
                && matches_all(&own.required_affinity, &pod.namespace, &pod.labels);
            if !pods_exist && !first_of_group {
                return reject(Code::UnschedulableAndUnresolvable, ERR_AFFINITY_RULES);
            }
        }
        // satisfyPodAntiAffinity
        if let Some(own) = own.filter(|_| !self.anti_affinity.is_empty()) {
            let hit = own.required_anti_affinity.iter().any(|t| {
                pair(&t.topology_key)
                    .is_some_and(|p| self.anti_affinity.get(&p).is_some_and(|&c| c > 0))
            });
            if hit {
                return reject(Code::Unschedulable, ERR_ANTI_AFFINITY_RULES);
            }
        }
        // satisfyExistingPodsAntiAffinity
        if !self.existing_anti_affinity.is_empty() {
            let hit = labels.iter().any(|(k, v)| {
                self.existing_anti_affinity
                    .get(&(k.clone(), v.clone()))
                    .is_some_and(|&c| c > 0)
            });
            if hit {
                return reject(Code::Unschedulable, ERR_EXISTING_ANTI_AFFINITY_RULES);
            }
        }
        None
    }
}

/// The plugin's normalized scores (0..=100) of `feasible`, over the pods of `all` nodes
/// (`PreScore`, `Score`, `NormalizeScore`); `None` when the plugin skips (no term anywhere
/// applies).
pub fn scores(pod: &SchedPod, feasible: &[&NodeInfo], all: &[&NodeInfo]) -> Option<Vec<i64>> {
    // topology key -> value -> score
    let mut topology: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    let mut any = false;
    let own = pod.pod_affinity.as_deref();
    for ni in all {
        let labels = ni.labels();
        if labels.is_empty() {
            continue;
        }
        let mut term = |t: &AffinityTerm, weight: i64, matched: bool| {
            if matched {
                if let Some(v) = labels.get(&t.topology_key) {
                    *topology
                        .entry(t.topology_key.clone())
                        .or_default()
                        .entry(v.clone())
                        .or_insert(0) += weight;
                    any = true;
                }
            }
        };
        for (_, a) in ni.pods() {
            if let Some(own) = own {
                for w in &own.preferred_affinity {
                    term(
                        &w.term,
                        w.weight,
                        w.term.matches(&a.namespace, &a.labels, None),
                    );
                }
                for w in &own.preferred_anti_affinity {
                    term(
                        &w.term,
                        -w.weight,
                        w.term.matches(&a.namespace, &a.labels, None),
                    );
                }
            }
            let Some(theirs) = a.affinity.as_deref() else {
                continue;
            };
            let ns_labels = Some(&pod.namespace_labels);
            let incoming = |t: &AffinityTerm| t.matches(&pod.namespace, &pod.labels, ns_labels);
            for t in &theirs.required_affinity {
                term(t, HARD_POD_AFFINITY_WEIGHT, incoming(t));
            }
            for w in &theirs.preferred_affinity {
                term(&w.term, w.weight, incoming(&w.term));
            }
            for w in &theirs.preferred_anti_affinity {
                term(&w.term, -w.weight, incoming(&w.term));
            }
        }
    }
    if !any {
        return None;
    }
    let raw: Vec<i64> = feasible
        .iter()
        .map(|ni| {
            let labels = ni.labels();
            topology
                .iter()
                .filter_map(|(k, values)| values.get(labels.get(k)?))
                .sum()
        })
        .collect();
    let (min, max) = (
        raw.iter().copied().min().unwrap_or(0),
        raw.iter().copied().max().unwrap_or(0),
    );
    let diff = max - min;
    Some(
        raw.iter()
            .map(|s| {
                if diff > 0 {
                    (MAX_NODE_SCORE as f64 * ((s - min) as f64 / diff as f64)) as i64
                } else {
                    0
                }
            })
            .collect(),
    )
}

/// Whether a change of the bound pod `changed` (added) may let `waiting` pass the filter now: one
/// of `waiting`'s required affinity terms selects it (a pod it must be near has arrived; a term
/// with a namespace selector is taken to cover the pod's namespace). Deletions are handled by the
/// runner for every filter (the node's pods are re-checked).
pub fn pod_change_may_help(waiting: &Pod, changed: &Pod) -> bool {
    let Some(terms) = PodAffinityTerms::of(waiting) else {
        return false;
    };
    let ns = changed.metadata.namespace.as_deref().unwrap_or("");
    let labels = changed.metadata.labels.clone().unwrap_or_default();
    terms.required_affinity.iter().any(|t| {
        t.matches(ns, &labels, None)
            || (t.namespace_selector != Selector::Nothing && t.selector.matches(&labels))
    })
}

#[cfg(test)]
mod tests;
