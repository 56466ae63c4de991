//! Node selection by labels: `spec.nodeSelector`, required and preferred node affinity, parsed once
//! per pod and matched against nodes.
//!
//! Semantics of `k8s.io/component-helpers/scheduling/corev1/nodeaffinity` (`GetRequiredNodeAffinity`,
//! `NodeSelector`, `PreferredSchedulingTerms`) and `k8s.io/apimachinery/pkg/labels` requirements
//! at v1.36.3: terms are ORed, the expressions of a term ANDed; an empty term matches nothing and is
//! dropped; a term with an invalid requirement never matches; `NotIn` and `DoesNotExist` match nodes
//! without the label; `Gt`/`Lt` compare the label as a base-10 int64 and fail when it is not one.

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use std::collections::{BTreeMap, BTreeSet};

/// The field key node affinity's `matchFields` may use.
pub const NODE_NAME_FIELD: &str = "metadata.name";

#[derive(Debug, Clone, PartialEq)]
enum Op {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    /// `labels.NewRequirement` validation (operator and value counts); `None` when invalid.
    fn parse(r: &NodeSelectorRequirement) -> Option<Requirement> {
        let values = r.values.clone().unwrap_or_default();
        if r.key.is_empty() {
            return None;
        }
        let op = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => return None,
            "In" => Op::In(values.into_iter().collect()),
            "NotIn" => Op::NotIn(values.into_iter().collect()),
            "Exists" | "DoesNotExist" if !values.is_empty() => return None,
            "Exists" => Op::Exists,
            "DoesNotExist" => Op::DoesNotExist,
            "Gt" | "Lt" => {
                if values.len() != 1 {
                    return None;
                }
                let v = values[0].parse::<i64>().ok()?;
                if r.operator == "Gt" {
                    Op::Gt(v)
                } else {
                    Op::Lt(v)
                }
            }
            _ => return None,
        };
        Some(Requirement {
            key: r.key.clone(),
            op,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let v = labels.get(&self.key);
        match &self.op {
            Op::In(set) => v.is_some_and(|v| set.contains(v)),
            Op::NotIn(set) => v.is_none_or(|v| !set.contains(v)),
            Op::Exists => v.is_some(),
            Op::DoesNotExist => v.is_none(),
            Op::Gt(n) => v
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Op::Lt(n) => v
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum FieldReq {
    Eq(String, String),
    NotEq(String, String),
}

/// One parsed `NodeSelectorTerm`.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    labels: Vec<Requirement>,
    fields: Vec<FieldReq>,
    invalid: bool,
}

impl Term {
    fn is_empty(t: &NodeSelectorTerm) -> bool {
        t.match_expressions.as_ref().is_none_or(|e| e.is_empty())
            && t.match_fields.as_ref().is_none_or(|f| f.is_empty())
    }

    fn parse(t: &NodeSelectorTerm) -> Term {
        let mut invalid = false;
        let mut labels = Vec::new();
        for r in t.match_expressions.iter().flatten() {
            match Requirement::parse(r) {
                Some(r) => labels.push(r),
                None => invalid = true,
            }
        }
        let mut fields = Vec::new();
        for r in t.match_fields.iter().flatten() {
            let values = r.values.as_deref().unwrap_or_default();
            match (r.operator.as_str(), values) {
                ("In", [v]) => fields.push(FieldReq::Eq(r.key.clone(), v.clone())),
                ("NotIn", [v]) => fields.push(FieldReq::NotEq(r.key.clone(), v.clone())),
                _ => invalid = true,
            }
        }
        Term {
            labels,
            fields,
            invalid,
        }
    }

    /// Whether the node satisfies every expression and field of this term.
    pub fn matches(&self, node: &Node) -> bool {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        self.matches_parts(labels, node.metadata.name.as_deref().unwrap_or(""))
    }

    /// [`Term::matches`] on a node's labels and name ("" skips the field requirements).
    fn matches_parts(&self, labels: &BTreeMap<String, String>, name: &str) -> bool {
        if self.invalid {
            return false;
        }
        if !self.labels.iter().all(|r| r.matches(labels)) {
            return false;
        }
        // Field requirements are only checked when the node has a name (always, for real nodes).
        if name.is_empty() {
            return true;
        }
        let get = |k: &str| if k == NODE_NAME_FIELD { name } else { "" };
        self.fields.iter().all(|f| match f {
            FieldReq::Eq(k, v) => get(k) == v,
            FieldReq::NotEq(k, v) => get(k) != v,
        })
    }

    /// The node names this term pins through `metadata.name In [x]` fields (intersected), or
    /// `None` when it has none.
    fn pinned_node_names(t: &NodeSelectorTerm) -> Option<BTreeSet<String>> {
        let mut names: Option<BTreeSet<String>> = None;
        for r in t.match_fields.iter().flatten() {
            if r.key == NODE_NAME_FIELD && r.operator == "In" {
                let s: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                names = Some(match names {
                    None => s,
                    Some(prev) => prev.intersection(&s).cloned().collect(),
                });
            }
        }
        names
    }
}

/// The pod's hard node constraints: `spec.nodeSelector` and `requiredDuringScheduling...` node
/// affinity (`nodeaffinity.RequiredNodeAffinity`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequiredNodeAffinity {
    selector: Option<BTreeMap<String, String>>,
    terms: Option<Vec<Term>>,
}

fn required_selector(pod: &Pod) -> Option<&NodeSelector> {
    pod.spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

impl RequiredNodeAffinity {
    /// `nodeaffinity.GetRequiredNodeAffinity`.
    pub fn of(pod: &Pod) -> Self {
        let selector = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.clone())
            .filter(|s| !s.is_empty());
        let terms = required_selector(pod).map(|ns| {
            ns.node_selector_terms
                .iter()
                .filter(|t| !Term::is_empty(t))
                .map(Term::parse)
                .collect()
        });
        Self { selector, terms }
    }

    /// True if the node satisfies the node selector and at least one required term.
    pub fn matches(&self, node: &Node) -> bool {
        if let Some(sel) = &self.selector {
            let empty = BTreeMap::new();
            let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
            if !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                return false;
            }
        }
        match &self.terms {
            Some(terms) => terms.iter().any(|t| t.matches(node)),
            None => true,
        }
    }
}

/// A `NodeSelector` outside a pod (a PersistentVolume's `spec.nodeAffinity.required`): its
/// terms ORed, empty terms dropped, an invalid term matching nothing
/// (`nodeaffinity.NewLazyErrorNodeSelector`).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSelectorMatcher {
    terms: Vec<Term>,
}

impl NodeSelectorMatcher {
    pub fn new(ns: &NodeSelector) -> Self {
        Self {
            terms: ns
                .node_selector_terms
                .iter()
                .filter(|t| !Term::is_empty(t))
                .map(Term::parse)
                .collect(),
        }
    }

    /// Matches a node that has only these labels (`corev1.MatchNodeSelectorTerms` on the node
    /// `volume.CheckNodeAffinity` builds: no name, so `matchFields` are not checked).
    pub fn matches_labels(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let empty = BTreeMap::new();
        let labels = labels.unwrap_or(&empty);
        self.terms.iter().any(|t| t.matches_parts(labels, ""))
    }
}

/// The NodeAffinity PreFilter's node restriction (`NodeAffinity.PreFilter`): `Some(names)` when
/// every required term pins node names with `matchFields metadata.name In`; an empty set means the
/// terms conflict and no node can match.
pub fn prefilter_node_names(pod: &Pod) -> Option<BTreeSet<String>> {
    let ns = required_selector(pod)?;
    let mut all: Option<BTreeSet<String>> = None;
    for t in &ns.node_selector_terms {
        let names = Term::pinned_node_names(t)?;
        all = Some(match all {
            None => names,
            Some(prev) => prev.union(&names).cloned().collect(),
        });
    }
    all
}

/// The pod's soft node preferences (`preferredDuringScheduling...`), terms with weight 0 or no
/// expressions dropped (`nodeaffinity.PreferredSchedulingTerms`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PreferredNodeAffinity {
    terms: Vec<(i64, Term)>,
}

impl PreferredNodeAffinity {
    pub fn of(pod: &Pod) -> Self {
        let terms = pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|ts| {
                ts.iter()
                    .filter(|t| t.weight != 0 && !Term::is_empty(&t.preference))
                    .map(|t| (t.weight as i64, Term::parse(&t.preference)))
                    .collect()
            })
            .unwrap_or_default();
        Self { terms }
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Sum of the weights of the terms the node matches (`PreferredSchedulingTerms.Score`).
    pub fn score(&self, node: &Node) -> i64 {
        self.terms
            .iter()
            .filter(|(_, t)| t.matches(node))
            .map(|(w, _)| w)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    fn pod_with_required(exprs: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"spec": {"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": exprs}]}}}}}),
        )
        .unwrap()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> serde_json::Value {
        json!({"key": key, "operator": op, "values": values})
    }

    #[test]
    fn operators_follow_label_selector_semantics() {
        let n = node("n", json!({"zone": "a", "gen": "5"}));
        let bare = node("m", json!({}));
        let cases = [
            (req("zone", "In", &["a", "b"]), true, false),
            (req("zone", "In", &["b"]), false, false),
            (req("zone", "NotIn", &["b"]), true, true),
            (req("zone", "NotIn", &["a"]), false, true),
            (json!({"key": "zone", "operator": "Exists"}), true, false),
            (
                json!({"key": "zone", "operator": "DoesNotExist"}),
                false,
                true,
            ),
            (req("gen", "Gt", &["4"]), true, false),
            (req("gen", "Gt", &["5"]), false, false),
            (req("gen", "Lt", &["6"]), true, false),
            (req("zone", "Gt", &["1"]), false, false),
            // invalid requirements never match
            (req("gen", "Gt", &["x"]), false, false),
            (req("zone", "In", &[]), false, false),
            (req("zone", "Exists", &["a"]), false, false),
        ];
        for (expr, on_labelled, on_bare) in cases {
            let a = RequiredNodeAffinity::of(&pod_with_required(json!([expr.clone()])));
            assert_eq!(a.matches(&n), on_labelled, "{expr} on labelled node");
            assert_eq!(a.matches(&bare), on_bare, "{expr} on bare node");
        }
    }

    #[test]
    fn node_selector_and_affinity_are_anded_terms_ored() {
        let p: Pod = serde_json::from_value(json!({"spec": {"containers": [],
            "nodeSelector": {"disk": "ssd"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [req("zone", "In", &["a"])]},
                    {"matchExpressions": [req("zone", "In", &["b"])]}]}}}}}))
        .unwrap();
        let a = RequiredNodeAffinity::of(&p);
        assert!(a.matches(&node("n", json!({"disk": "ssd", "zone": "b"}))));
        assert!(!a.matches(&node("n", json!({"disk": "hdd", "zone": "b"}))));
        assert!(!a.matches(&node("n", json!({"disk": "ssd", "zone": "c"}))));
    }

    #[test]
    fn empty_terms_match_nothing() {
        let p: Pod = serde_json::from_value(json!({"spec": {"containers": [], "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{}]}}}}}))
        .unwrap();
        assert!(!RequiredNodeAffinity::of(&p).matches(&node("n", json!({}))));
    }

    #[test]
    fn match_fields_pin_node_names() {
        let p: Pod = serde_json::from_value(json!({"spec": {"containers": [], "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [req("metadata.name", "In", &["n1"])]}]}}}}}))
        .unwrap();
        let a = RequiredNodeAffinity::of(&p);
        assert!(a.matches(&node("n1", json!({}))));
        assert!(!a.matches(&node("n2", json!({}))));
        assert_eq!(
            prefilter_node_names(&p),
            Some(["n1".to_string()].into_iter().collect())
        );
        assert_eq!(
            prefilter_node_names(&pod_with_required(json!([req("a", "Exists", &[])]))),
            None
        );
    }

    #[test]
    fn preferred_terms_sum_matching_weights() {
        let p: Pod = serde_json::from_value(json!({"spec": {"containers": [], "affinity": {
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [req("zone", "In", &["a"])]}},
                {"weight": 3, "preference": {"matchExpressions": [req("disk", "Exists", &[])]}},
                {"weight": 0, "preference": {"matchExpressions": [req("zone", "In", &["a"])]}}]}}}}))
        .unwrap();
        let pref = PreferredNodeAffinity::of(&p);
        assert_eq!(
            pref.score(&node("n", json!({"zone": "a", "disk": "x"}))),
            13
        );
        assert_eq!(pref.score(&node("n", json!({"disk": "x"}))), 3);
        assert_eq!(pref.score(&node("n", json!({}))), 0);
    }
}
