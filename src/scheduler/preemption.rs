//! Preemption, pure: kube-scheduler's DefaultPreemption PostFilter plugin (k/k
//! `pkg/scheduler/framework/plugins/defaultpreemption` and `framework/preemption` at v1.36.3).
//! When no node fits a pod, find the nodes where evicting pods of lower priority would make it
//! fit, choose the fewest and least important victims on each (reprieving as many as possible,
//! pods whose PodDisruptionBudget would be violated first), pick one node, and say which pods to
//! evict. The runner evicts them (DisruptionTarget condition, delete, `Preempted` event) and sets
//! the preemptor's `status.nominatedNodeName`; until it is bound, the preemptor counts on that
//! node for pods of lower or equal priority ([`Nominator`], `RunFilterPluginsWithNominatedPods`),
//! so the room it made is not taken by the pods it displaced.

use super::filters::{run_filters, Code, Rejection, SchedPod};
use super::nodeinfo::{NodeInfo, PodAccount};
use super::schedule_one::FitError;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use rand::Rng;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Absent-node reason in the preemption part of the message.
pub const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// A node without lower-priority pods to evict.
pub const NO_PREEMPTION_VICTIMS: &str = "No preemption victims found for incoming pod";
/// The PostFilter message of a pod with `preemptionPolicy: Never`.
pub const NOT_ELIGIBLE_NEVER: &str = "preemption: not eligible due to preemptionPolicy=Never.";
/// The PostFilter message while victims of this pod's last preemption are still terminating.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "preemption: not eligible due to a terminating pod on the nominated node.";
/// The plugin name in statuses.
pub const PLUGIN: &str = "DefaultPreemption";

/// Pods that preempted and wait for their victims to go, by UID, with the node they were
/// nominated to (`PodNominator`, fed from the runner's own preemptions and from
/// `status.nominatedNodeName` of pending pods).
#[derive(Debug, Default, Clone)]
pub struct Nominator {
    pods: BTreeMap<String, Nominated>,
}

/// One nominated pod.
#[derive(Debug, Clone)]
pub struct Nominated {
    pub node: String,
    pub account: PodAccount,
    /// Seen in the pod's `status.nominatedNodeName` (not only in this scheduler's memory).
    pub from_status: bool,
}

impl Nominator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Nominates (or re-nominates) a pod to `node` after a preemption, before its status says so.
    pub fn add(&mut self, uid: &str, node: &str, account: PodAccount) {
        self.pods.insert(
            uid.to_string(),
            Nominated {
                node: node.to_string(),
                account,
                from_status: false,
            },
        );
    }

    /// A pending pod seen by the watch with `status.nominatedNodeName` = `nominated`
    /// (`updateNominatedPodUnlocked`): a node nominates it there; none removes a nomination the
    /// status had carried, and keeps one only made in memory (the status patch is on its way).
    pub fn observe(&mut self, uid: &str, nominated: Option<&str>, account: PodAccount) {
        match nominated {
            Some(node) => {
                self.pods.insert(
                    uid.to_string(),
                    Nominated {
                        node: node.to_string(),
                        account,
                        from_status: true,
                    },
                );
            }
            None => match self.pods.get_mut(uid) {
                Some(n) if n.from_status => {
                    self.pods.remove(uid);
                }
                Some(n) => n.account = account,
                None => {}
            },
        }
    }

    /// Drops a nomination (the pod was bound, deleted, or its nomination cleared).
    pub fn remove(&mut self, uid: &str) -> Option<Nominated> {
        self.pods.remove(uid)
    }

    /// The node a pod is nominated to.
    pub fn node_of(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid).map(|n| n.node.as_str())
    }

    /// The pods nominated to `node`, by UID.
    pub fn for_node<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Nominated)> {
        self.pods.iter().filter(move |(_, n)| n.node == node)
    }

    /// `getLowerPriorityNominatedPods`: pods nominated to `node` with a priority below
    /// `priority` (UID, namespace, name); a preemption on that node clears their nomination.
    pub fn lower_priority_on(&self, node: &str, priority: i32) -> Vec<(String, String, String)> {
        self.for_node(node)
            .filter(|(_, n)| n.account.priority < priority)
            .map(|(uid, n)| {
                (
                    uid.clone(),
                    n.account.namespace.clone(),
                    n.account.name.clone(),
                )
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

/// `RunFilterPluginsWithNominatedPods`: the filters run once with the pods nominated to the node
/// that are at least as important as `pod` counted on it, and, if any were added and the pod
/// passed, once more without them (a nominated pod may never arrive). The first rejection wins.
pub fn run_filters_with_nominated(
    pod: &SchedPod,
    ni: &NodeInfo,
    nominator: &Nominator,
) -> Option<Rejection> {
    let mut with: Option<NodeInfo> = None;
    for (uid, n) in nominator.for_node(&ni.name) {
        if *uid == pod.uid || n.account.priority < pod.priority || ni.has_pod(uid) {
            continue;
        }
        with.get_or_insert_with(|| ni.clone())
            .add_pod(uid, n.account.clone());
    }
    if let Some(w) = &with {
        if let Some(r) = run_filters(pod, w) {
            return Some(r);
        }
    }
    run_filters(pod, ni)
}

/// What preemption reads of a PodDisruptionBudget.
#[derive(Debug, Clone, PartialEq)]
pub struct Pdb {
    pub namespace: String,
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// `status.disruptedPods`: pod names whose eviction the API server already counted.
    pub disrupted_pods: BTreeSet<String>,
}

impl Pdb {
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        let status = pdb.status.as_ref();
        Pdb {
            namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
            selector: pdb.spec.as_ref().and_then(|s| s.selector.clone()),
            disruptions_allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Whether the budget covers a pod with these labels. A missing, empty or invalid selector
    /// covers nothing (`LabelSelectorAsSelector` + `selector.Empty()` in
    /// `filterPodsWithPDBViolation`).
    pub fn covers(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector
            .as_ref()
            .and_then(|s| selector_matches(s, labels))
            .unwrap_or(false)
    }
}

/// A metav1.LabelSelector against a label set: `Some(matches)`, or `None` when the selector is
/// empty (selects nothing here) or invalid (an unknown operator, `In`/`NotIn` without values,
/// `Exists`/`DoesNotExist` with values).
pub fn selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> Option<bool> {
    let match_labels = sel.match_labels.as_ref();
    let exprs = sel.match_expressions.as_deref().unwrap_or_default();
    if match_labels.is_none_or(|m| m.is_empty()) && exprs.is_empty() {
        return None;
    }
    let mut all = true;
    for (k, v) in match_labels.into_iter().flatten() {
        all &= labels.get(k) == Some(v);
    }
    for e in exprs {
        let values = e.values.as_deref().unwrap_or_default();
        let ok = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => return None,
            "Exists" | "DoesNotExist" if !values.is_empty() => return None,
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => return None,
        };
        all &= ok;
    }
    Some(all)
}

/// A pod to evict.
#[derive(Debug, Clone, PartialEq)]
pub struct Victim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub priority: i32,
    pub generation: Option<i64>,
    pub start_time: Option<Timestamp>,
}

impl Victim {
    fn of(uid: &str, a: &PodAccount) -> Self {
        Victim {
            uid: uid.to_string(),
            namespace: a.namespace.clone(),
            name: a.name.clone(),
            priority: a.priority,
            generation: a.generation,
            start_time: a.start_time,
        }
    }
}

/// A node where preemption makes room, and its victims, most important first.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub node: String,
    pub victims: Vec<Victim>,
    /// Victims whose eviction violates a PodDisruptionBudget.
    pub num_pdb_violations: usize,
}

/// `util.MoreImportantPod` as an ordering (more important first): higher priority, then the
/// earlier start (a pod not started yet is the youngest), then UID for a stable order.
fn importance(a: (&str, &PodAccount), b: (&str, &PodAccount)) -> Ordering {
    b.1.priority
        .cmp(&a.1.priority)
        .then_with(|| start_key(a.1.start_time).cmp(&start_key(b.1.start_time)))
        .then_with(|| a.0.cmp(b.0))
}

/// Start time as a sortable key; `None` ("now" in Go) after every real start time.
fn start_key(t: Option<Timestamp>) -> i128 {
    t.map(|t| t.as_nanosecond()).unwrap_or(i128::MAX)
}

/// `filterPodsWithPDBViolation`: splits the pods (kept in order) into those whose eviction would
/// take a budget below zero and the others.
fn split_by_pdb_violation<'a>(
    pods: &[(&'a str, &'a PodAccount)],
    pdbs: &[Pdb],
) -> (
    Vec<(&'a str, &'a PodAccount)>,
    Vec<(&'a str, &'a PodAccount)>,
) {
    let mut allowed: Vec<i32> = pdbs.iter().map(|p| p.disruptions_allowed).collect();
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for &(uid, a) in pods {
        let mut violated = false;
        if !a.labels.is_empty() {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.namespace != a.namespace || !pdb.covers(&a.labels) {
                    continue;
                }
                if pdb.disrupted_pods.contains(&a.name) {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push((uid, a));
        } else {
            non_violating.push((uid, a));
        }
    }
    (violating, non_violating)
}

/// `SelectVictimsOnNode`: removes every pod of lower priority; if the pod then fits, adds them
/// back one by one, most important first (those covered by a violated budget before the others),
/// keeping each that still leaves room. Returns the victims (most important first) and how many
/// of them violate a budget, or why the node cannot help.
pub fn select_victims_on_node(
    pod: &SchedPod,
    ni: &NodeInfo,
    nominator: &Nominator,
    pdbs: &[Pdb],
) -> Result<(Vec<Victim>, usize), Rejection> {
    let mut potential: Vec<(&str, &PodAccount)> = ni
        .pods()
        .filter(|(_, a)| a.priority < pod.priority)
        .map(|(uid, a)| (uid.as_str(), a))
        .collect();
    if potential.is_empty() {
        return Err(Rejection {
            plugin: PLUGIN,
            code: Code::UnschedulableAndUnresolvable,
            reasons: vec![NO_PREEMPTION_VICTIMS.into()],
        });
    }
    let mut trial = ni.clone();
    for (uid, _) in &potential {
        trial.remove_pod(uid);
    }
    if let Some(r) = run_filters_with_nominated(pod, &trial, nominator) {
        return Err(r);
    }
    potential.sort_by(|a, b| importance(*a, *b));
    let (violating, non_violating) = split_by_pdb_violation(&potential, pdbs);
    let mut victims: Vec<(&str, &PodAccount)> = Vec::new();
    let mut num_violating = 0;
    for (group, is_violating) in [(&violating, true), (&non_violating, false)] {
        for &(uid, a) in group.iter() {
            trial.add_pod(uid, a.clone());
            if run_filters_with_nominated(pod, &trial, nominator).is_some() {
                trial.remove_pod(uid);
                victims.push((uid, a));
                num_violating += usize::from(is_violating);
            }
        }
    }
    if !violating.is_empty() && !non_violating.is_empty() {
        victims.sort_by(|a, b| importance(*a, *b));
    }
    Ok((
        victims.iter().map(|(uid, a)| Victim::of(uid, a)).collect(),
        num_violating,
    ))
}

/// `pickOneNodeForPreemption`: the candidate with the fewest budget violations, then the lowest
/// highest victim priority, then the lowest sum of priorities, then the fewest victims, then the
/// latest start among its most important victims; the first of any remaining tie.
pub fn pick_one_node(candidates: &[Candidate]) -> usize {
    let scores: [fn(&Candidate) -> i128; 5] = [
        |c| -(c.num_pdb_violations as i128),
        |c| -(c.victims.first().map_or(0, |v| v.priority) as i128),
        |c| {
            -c.victims
                .iter()
                .map(|v| v.priority as i128 + i32::MAX as i128 + 1)
                .sum::<i128>()
        },
        |c| -(c.victims.len() as i128),
        |c| {
            // util.GetEarliestPodStartTime: the earliest start among the highest-priority victims
            let top = c.victims.first().map_or(0, |v| v.priority);
            c.victims
                .iter()
                .filter(|v| v.priority == top)
                .map(|v| start_key(v.start_time))
                .min()
                .unwrap_or(i128::MIN)
        },
    ];
    let mut left: Vec<usize> = (0..candidates.len()).collect();
    for score in scores {
        let best = left.iter().map(|&i| score(&candidates[i])).max();
        left.retain(|&i| Some(score(&candidates[i])) == best);
        if left.len() <= 1 {
            break;
        }
    }
    left.first().copied().unwrap_or(0)
}

/// `DefaultPreemption.calculateNumCandidates`: 10 % of the nodes, at least 100.
fn num_preemption_candidates(num_nodes: usize) -> usize {
    (num_nodes * 10 / 100).max(100).min(num_nodes)
}

/// Why preemption did not help.
#[derive(Debug, Clone, PartialEq)]
pub struct NotHelpful {
    /// The PostFilter message (`preemption: ...`) appended to the failure message.
    pub message: String,
    /// Whether the pod's nomination is cleared: yes when no node can be made to fit (the
    /// PostFilter result nominates ""), no when the pod was not eligible to preempt (no result;
    /// a pod waiting for its victims keeps its node).
    pub clear_nomination: bool,
}

impl NotHelpful {
    fn not_eligible(message: &str) -> Self {
        NotHelpful {
            message: message.into(),
            clear_nomination: false,
        }
    }
}

/// `Evaluator.Preempt` for a pod that fit no node (`fit`): the chosen candidate, or why
/// preemption cannot help.
pub fn preempt(
    pod: &SchedPod,
    nodes: &[&NodeInfo],
    fit: &FitError,
    nominator: &Nominator,
    pdbs: &[Pdb],
    rng: &mut impl Rng,
) -> Result<Candidate, NotHelpful> {
    // 1) PodEligibleToPreemptOthers
    if pod.preemption_never {
        return Err(NotHelpful::not_eligible(NOT_ELIGIBLE_NEVER));
    }
    let by_name: BTreeMap<&str, &NodeInfo> =
        nodes.iter().map(|ni| (ni.name.as_str(), *ni)).collect();
    if let Some(nominated) = pod.nominated_node_name.as_deref() {
        let code = fit
            .statuses
            .iter()
            .find(|(n, _)| n == nominated)
            .map(|(_, r)| r.code)
            .or(fit.absent.as_ref().map(|a| a.code));
        if code != Some(Code::UnschedulableAndUnresolvable) {
            if let Some(ni) = by_name.get(nominated) {
                if ni
                    .pods()
                    .any(|(_, a)| a.priority < pod.priority && a.terminating_by_preemption)
                {
                    return Err(NotHelpful::not_eligible(NOT_ELIGIBLE_TERMINATING));
                }
            }
        }
    }
    // 2) findCandidates: the nodes filters rejected in a way that evictions may fix
    let mut potential: Vec<&NodeInfo> = fit
        .statuses
        .iter()
        .filter(|(_, r)| r.code == Code::Unschedulable)
        .filter_map(|(name, _)| by_name.get(name.as_str()).copied())
        .collect();
    if fit
        .absent
        .as_ref()
        .is_some_and(|a| a.code == Code::Unschedulable)
    {
        let explicit: HashSet<&str> = fit.statuses.iter().map(|(n, _)| n.as_str()).collect();
        potential.extend(
            nodes
                .iter()
                .copied()
                .filter(|ni| !explicit.contains(ni.name.as_str())),
        );
    }
    let mut statuses: Vec<(String, Rejection)> = Vec::new();
    let (mut non_violating, mut violating): (Vec<Candidate>, Vec<Candidate>) = Default::default();
    if !potential.is_empty() {
        // DryRunPreemption from a random offset, until enough candidates are found
        let want = num_preemption_candidates(potential.len());
        let offset = rng.random_range(0..potential.len());
        for i in 0..potential.len() {
            if !non_violating.is_empty() && non_violating.len() + violating.len() >= want {
                break;
            }
            let ni = potential[(offset + i) % potential.len()];
            match select_victims_on_node(pod, ni, nominator, pdbs) {
                Ok((victims, _)) if victims.is_empty() => statuses.push((
                    ni.name.clone(),
                    Rejection {
                        plugin: PLUGIN,
                        code: Code::UnschedulableAndUnresolvable,
                        reasons: vec![format!(
                            "expected at least one victim pod on node {:?}",
                            ni.name
                        )],
                    },
                )),
                Ok((victims, num_pdb_violations)) => {
                    let c = Candidate {
                        node: ni.name.clone(),
                        victims,
                        num_pdb_violations,
                    };
                    if num_pdb_violations == 0 {
                        non_violating.push(c);
                    } else {
                        violating.push(c);
                    }
                }
                Err(r) => statuses.push((ni.name.clone(), r)),
            }
        }
    }
    let mut candidates = non_violating;
    candidates.append(&mut violating);
    if candidates.is_empty() {
        let inner = FitError {
            num_all_nodes: nodes.len(),
            pre_filter_msg: None,
            statuses,
            absent: Some(Rejection {
                plugin: PLUGIN,
                code: Code::UnschedulableAndUnresolvable,
                reasons: vec![PREEMPTION_NOT_HELPFUL.into()],
            }),
            post_filter_msg: None,
            preemption: None,
            clear_nomination: false,
        };
        return Err(NotHelpful {
            message: format!("preemption: {}", inner.message()),
            clear_nomination: true,
        });
    }
    // 4) SelectCandidate
    let i = if candidates.len() == 1 {
        0
    } else {
        pick_one_node(&candidates)
    };
    Ok(candidates.swap_remove(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::schedule_one::{schedule, ScheduleError, SearchState};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::{json, Value};
    use std::sync::Arc;

    const FOO: &str = "scheduling.k8s.io/foo";

    fn node(name: &str, foo: i64) -> NodeInfo {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", FOO: foo.to_string()}}}))
        .unwrap();
        NodeInfo::new(Arc::new(n))
    }

    /// A pod asking for `foo` units with `priority`; `extra` is merged into metadata / status.
    fn pod_obj(name: &str, priority: i32, foo: i64, extra: Value) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"priority": priority, "containers": [{"name": "c",
                "resources": {"requests": {FOO: foo.to_string()}, "limits": {FOO: foo.to_string()}}}]}});
        for (k, val) in extra.as_object().cloned().unwrap_or_default() {
            match k.as_str() {
                "labels" | "deletionTimestamp" => v["metadata"][k] = val,
                _ => v["status"][k] = val,
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn place(ni: &mut NodeInfo, p: &Pod) {
        ni.add_pod(p.metadata.uid.as_deref().unwrap(), PodAccount::of(p));
    }

    fn started(t: &str) -> Value {
        json!({"startTime": t})
    }

    fn names(c: &Candidate) -> Vec<&str> {
        c.victims.iter().map(|v| v.name.as_str()).collect()
    }

    /// Schedules `p`; expects preemption and returns the candidate.
    fn preempting(p: &Pod, nodes: &[NodeInfo], nominator: &Nominator, pdbs: &[Pdb]) -> Candidate {
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let sp = SchedPod::new(p);
        match schedule(
            &sp,
            &refs,
            nominator,
            pdbs,
            &mut SearchState::default(),
            &mut rand::rng(),
        ) {
            Err(ScheduleError::Fit(fe)) => {
                let c = fe
                    .preemption
                    .clone()
                    .unwrap_or_else(|| panic!("no preemption: {}", fe.message()));
                assert_eq!(fe.post_filter_msg, None);
                assert!(!fe.message().contains("preemption:"), "{}", fe.message());
                c
            }
            other => panic!("expected a failure with preemption, got {other:?}"),
        }
    }

    fn failure(p: &Pod, nodes: &[NodeInfo], nominator: &Nominator) -> String {
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let r = schedule(
            &SchedPod::new(p),
            &refs,
            nominator,
            &[],
            &mut SearchState::default(),
            &mut rand::rng(),
        );
        match r {
            Err(ScheduleError::Fit(fe)) => {
                assert_eq!(fe.preemption, None);
                fe.message()
            }
            other => panic!("expected a failure without preemption, got {other:?}"),
        }
    }

    #[test]
    fn more_important_victims_are_reprieved_first() {
        // The conformance test "validates basic preemption works": 5 units, a low (1) and a
        // medium (100) pod of 2 each; a high (1000) pod of 2 evicts the low one only.
        let mut n = node("vm", 5);
        place(
            &mut n,
            &pod_obj("low", 1, 2, started("2026-01-01T00:00:00Z")),
        );
        place(
            &mut n,
            &pod_obj("medium", 100, 2, started("2026-01-01T00:00:01Z")),
        );
        let c = preempting(
            &pod_obj("high", 1000, 2, json!({})),
            &[n],
            &Nominator::new(),
            &[],
        );
        assert_eq!(c.node, "vm");
        assert_eq!(names(&c), ["low"]);
        assert_eq!(c.num_pdb_violations, 0);
    }

    #[test]
    fn the_fewest_victims_that_make_room_and_no_more() {
        // "runs ReplicaSets to verify preemption running path": 1000 units, p1 200, p2 300,
        // p3 450 in use; p4 asks 500: p3 stays (450 + 500 fit), p2 and p1 go, p2 listed first.
        let mut n = node("vm", 1000);
        place(&mut n, &pod_obj("rs-pod1", 1, 200, json!({})));
        place(&mut n, &pod_obj("rs-pod2", 2, 300, json!({})));
        place(&mut n, &pod_obj("rs-pod3", 3, 450, json!({})));
        let c = preempting(
            &pod_obj("pod4", 4, 500, json!({})),
            &[n],
            &Nominator::new(),
            &[],
        );
        assert_eq!(names(&c), ["rs-pod2", "rs-pod1"]);
    }

    #[test]
    fn equal_priority_victims_older_one_is_kept() {
        let mut n = node("vm", 2);
        place(
            &mut n,
            &pod_obj("young", 1, 1, started("2026-01-02T00:00:00Z")),
        );
        place(
            &mut n,
            &pod_obj("old", 1, 1, started("2026-01-01T00:00:00Z")),
        );
        let c = preempting(
            &pod_obj("p", 10, 1, json!({})),
            &[n],
            &Nominator::new(),
            &[],
        );
        assert_eq!(names(&c), ["young"]);
    }

    #[test]
    fn a_pod_under_an_exhausted_budget_is_reprieved_before_others() {
        // Same as above, but the old pod is not covered and the young one is, by a budget that
        // allows no disruption: the young one is tried first and kept.
        let mut n = node("vm", 2);
        place(
            &mut n,
            &pod_obj(
                "young",
                1,
                1,
                json!({"labels": {"app": "db"}, "startTime": "2026-01-02T00:00:00Z"}),
            ),
        );
        place(
            &mut n,
            &pod_obj("old", 1, 1, started("2026-01-01T00:00:00Z")),
        );
        let pdb = Pdb {
            namespace: "ns".into(),
            selector: Some(serde_json::from_value(json!({"matchLabels": {"app": "db"}})).unwrap()),
            disruptions_allowed: 0,
            disrupted_pods: BTreeSet::new(),
        };
        let c = preempting(
            &pod_obj("p", 10, 1, json!({})),
            &[n.clone()],
            &Nominator::new(),
            &[pdb.clone()],
        );
        assert_eq!(names(&c), ["old"]);
        assert_eq!(c.num_pdb_violations, 0);
        // When the covered pod must go anyway, the violation is counted.
        let c = preempting(
            &pod_obj("p", 10, 2, json!({})),
            &[n.clone()],
            &Nominator::new(),
            &[pdb.clone()],
        );
        assert_eq!(
            names(&c),
            ["old", "young"],
            "both go, most important (older) first"
        );
        assert_eq!(c.num_pdb_violations, 1);
        // In another namespace, or with the pod already counted as disrupted, it does not apply.
        let other_ns = Pdb {
            namespace: "other".into(),
            ..pdb.clone()
        };
        let c = preempting(
            &pod_obj("p", 10, 1, json!({})),
            &[n.clone()],
            &Nominator::new(),
            &[other_ns],
        );
        assert_eq!(names(&c), ["young"]);
        let counted = Pdb {
            disrupted_pods: ["young".to_string()].into(),
            ..pdb
        };
        let c = preempting(
            &pod_obj("p", 10, 1, json!({})),
            &[n],
            &Nominator::new(),
            &[counted],
        );
        assert_eq!(names(&c), ["young"]);
    }

    fn cand(node: &str, violations: usize, victims: &[(i32, Option<&str>)]) -> Candidate {
        Candidate {
            node: node.into(),
            num_pdb_violations: violations,
            victims: victims
                .iter()
                .enumerate()
                .map(|(i, (prio, start))| Victim {
                    uid: format!("{node}-{i}"),
                    namespace: "ns".into(),
                    name: format!("{node}-{i}"),
                    priority: *prio,
                    generation: None,
                    start_time: start.map(|s| s.parse().unwrap()),
                })
                .collect(),
        }
    }

    #[test]
    fn node_choice_follows_kube_schedulers_criteria_in_order() {
        let t0 = Some("2026-01-01T00:00:00Z");
        let t1 = Some("2026-01-02T00:00:00Z");
        let cases: Vec<(&str, Vec<Candidate>, &str)> = vec![
            (
                "fewest budget violations",
                vec![cand("a", 1, &[(1, t0)]), cand("b", 0, &[(5, t0), (5, t0)])],
                "b",
            ),
            (
                "lowest highest priority",
                vec![cand("a", 0, &[(5, t0)]), cand("b", 0, &[(3, t0), (3, t0)])],
                "b",
            ),
            (
                "lowest priority sum",
                vec![
                    cand("a", 0, &[(3, t0), (3, t0)]),
                    cand("b", 0, &[(3, t0), (1, t0)]),
                ],
                "b",
            ),
            (
                "fewest victims",
                vec![
                    cand("a", 0, &[(3, t0), (-5, t0)]),
                    cand("b", 0, &[(3, t0), (-6, t0), (1, t0)]),
                ],
                "a",
            ),
            (
                "latest start of the top victims",
                vec![cand("a", 0, &[(3, t0)]), cand("b", 0, &[(3, t1)])],
                "b",
            ),
            (
                "not started counts as youngest",
                vec![cand("a", 0, &[(3, t1)]), cand("b", 0, &[(3, None)])],
                "b",
            ),
            (
                "a full tie takes the first",
                vec![cand("a", 0, &[(3, t0)]), cand("b", 0, &[(3, t0)])],
                "a",
            ),
        ];
        for (what, cands, want) in cases {
            assert_eq!(cands[pick_one_node(&cands)].node, want, "{what}");
        }
    }

    #[test]
    fn a_nominated_pod_holds_its_room_against_less_important_pods() {
        // pod4 (priority 4, 500) was nominated to vm after its victims were evicted; they are
        // gone, so 550 are free, but a replacement of priority 1 asking 200 must not take it.
        let mut n = node("vm", 1000);
        place(&mut n, &pod_obj("rs-pod3", 3, 450, json!({})));
        let preemptor = pod_obj("pod4", 4, 500, json!({"nominatedNodeName": "vm"}));
        let mut nominator = Nominator::new();
        nominator.add("uid-pod4", "vm", PodAccount::of(&preemptor));
        assert_eq!(
            failure(&pod_obj("rs-pod1-b", 1, 200, json!({})), &[n.clone()], &nominator),
            "0/1 nodes are available: 1 Insufficient scheduling.k8s.io/foo. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
        // The preemptor itself fits (its own nomination is not counted twice) ...
        let refs = [&n];
        let placed = schedule(
            &SchedPod::new(&preemptor),
            &refs,
            &nominator,
            &[],
            &mut SearchState::default(),
            &mut rand::rng(),
        );
        assert_eq!(placed.map(|p| p.node).ok().as_deref(), Some("vm"));
        // ... and so does a more important pod, which the nomination does not hold back.
        let refs = [&n];
        let vip = schedule(
            &SchedPod::new(&pod_obj("vip", 10, 500, json!({}))),
            &refs,
            &nominator,
            &[],
            &mut SearchState::default(),
            &mut rand::rng(),
        );
        assert!(vip.is_ok(), "{vip:?}");
    }

    #[test]
    fn no_second_preemption_while_victims_terminate() {
        let mut n = node("vm", 1);
        let victim = pod_obj(
            "victim",
            1,
            1,
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}),
        );
        place(&mut n, &victim);
        assert!(PodAccount::of(&victim).terminating_by_preemption);
        let nominated = pod_obj("p", 10, 1, json!({"nominatedNodeName": "vm"}));
        assert_eq!(
            failure(&nominated, &[n.clone()], &Nominator::new()),
            format!("0/1 nodes are available: 1 Insufficient {FOO}. {NOT_ELIGIBLE_TERMINATING}")
        );
        // Without a nomination (another pod) the terminating victim can be chosen again.
        let c = preempting(
            &pod_obj("q", 10, 1, json!({})),
            &[n.clone()],
            &Nominator::new(),
            &[],
        );
        assert_eq!(names(&c), ["victim"]);
        // A pod deleted for another reason does not block.
        let mut m = node("vm", 1);
        place(
            &mut m,
            &pod_obj(
                "deleted",
                1,
                1,
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
            ),
        );
        let c = preempting(&nominated, &[m], &Nominator::new(), &[]);
        assert_eq!(names(&c), ["deleted"]);
    }

    #[test]
    fn nodes_where_evictions_cannot_help_are_explained() {
        let mut n = node("vm", 1);
        place(&mut n, &pod_obj("equal", 10, 1, json!({})));
        assert_eq!(
            failure(&pod_obj("p", 10, 1, json!({})), &[n], &Nominator::new()),
            format!("0/1 nodes are available: 1 Insufficient {FOO}. preemption: 0/1 nodes are available: 1 {NO_PREEMPTION_VICTIMS}.")
        );
        // Evicting the low pod is not enough: the node says why.
        let mut small = node("vm", 3);
        place(&mut small, &pod_obj("low", 1, 1, json!({})));
        place(&mut small, &pod_obj("equal", 10, 1, json!({})));
        assert_eq!(
            failure(&pod_obj("big", 10, 3, json!({})), &[small], &Nominator::new()),
            format!("0/1 nodes are available: 1 Insufficient {FOO}. preemption: 0/1 nodes are available: 1 Insufficient {FOO}.")
        );
        // A request beyond what the node has at all cannot be helped.
        let mut tiny = node("vm", 1);
        place(&mut tiny, &pod_obj("low", 1, 1, json!({})));
        assert_eq!(
            failure(&pod_obj("huge", 10, 2, json!({})), &[tiny], &Nominator::new()),
            format!("0/1 nodes are available: 1 Insufficient {FOO}. preemption: 0/1 nodes are available: 1 {PREEMPTION_NOT_HELPFUL}.")
        );
    }

    #[test]
    fn label_selectors_match_like_metav1() {
        let labels: BTreeMap<String, String> = [("app", "db"), ("tier", "back")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let sel = |v: Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
        let cases = [
            (json!({}), None),
            (json!({"matchLabels": {}}), None),
            (json!({"matchLabels": {"app": "db"}}), Some(true)),
            (json!({"matchLabels": {"app": "web"}}), Some(false)),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "x"]}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}),
                Some(false),
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                Some(true),
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
                Some(false),
            ),
            (
                json!({"matchLabels": {"app": "db"}, "matchExpressions": [{"key": "zone", "operator": "Exists"}]}),
                Some(false),
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}),
                None,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["db"]}]}),
                None,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}),
                None,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(selector_matches(&sel(s.clone()), &labels), want, "{s}");
        }
    }

    #[test]
    fn lower_priority_nominations_on_the_node_are_listed_for_clearing() {
        let mut nominator = Nominator::new();
        nominator.add("a", "vm", PodAccount::of(&pod_obj("a", 1, 1, json!({}))));
        nominator.add("b", "vm", PodAccount::of(&pod_obj("b", 50, 1, json!({}))));
        nominator.add("c", "other", PodAccount::of(&pod_obj("c", 1, 1, json!({}))));
        let lower = nominator.lower_priority_on("vm", 10);
        assert_eq!(
            lower,
            [("a".to_string(), "ns".to_string(), "a".to_string())]
        );
        assert_eq!(nominator.node_of("c"), Some("other"));
        assert!(nominator.remove("a").is_some());
        assert_eq!(nominator.len(), 2);
    }

    #[test]
    fn watch_events_without_a_nomination_keep_one_made_in_memory_only() {
        let acc = || PodAccount::of(&pod_obj("p", 10, 1, json!({})));
        let mut n = Nominator::new();
        n.add("p", "vm", acc());
        n.observe("p", None, acc());
        assert_eq!(
            n.node_of("p"),
            Some("vm"),
            "an older version of the pod, before our patch"
        );
        n.observe("p", Some("vm"), acc());
        n.observe("p", None, acc());
        assert_eq!(n.node_of("p"), None, "the status nomination was cleared");
        n.observe("q", Some("other"), acc());
        assert_eq!(
            n.node_of("q"),
            Some("other"),
            "a nomination found in the status"
        );
    }
}
