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
use super::interpod_affinity;
use super::nodeinfo::{NodeInfo, PodAccount};
use super::schedule_one::FitError;
use super::topology_spread::FilterState;
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
    spread: &FilterState,
    pod_affinity: &interpod_affinity::FilterState,
) -> Result<(Vec<Victim>, usize), Rejection> {
    // the filters, and PodTopologySpread and InterPodAffinity with the node's counts as they are
    // in `trial`
    let fits = |trial: &NodeInfo| {
        run_filters_with_nominated(pod, trial, nominator)
            .or_else(|| spread.with_node(pod, ni, trial).filter(pod, trial))
            .or_else(|| pod_affinity.with_node(pod, ni, trial).filter(pod, trial))
    };
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
    if let Some(r) = fits(&trial) {
        return Err(r);
    }
    potential.sort_by(|a, b| importance(*a, *b));
    let (violating, non_violating) = split_by_pdb_violation(&potential, pdbs);
    let mut victims: Vec<(&str, &PodAccount)> = Vec::new();
    let mut num_violating = 0;
    for (group, is_violating) in [(&violating, true), (&non_violating, false)] {
        for &(uid, a) in group.iter() {
            trial.add_pod(uid, a.clone());
            if fits(&trial).is_some() {
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
    let spread = FilterState::new(pod, nodes);
    let pod_affinity = interpod_affinity::FilterState::new(pod, nodes);
    if !potential.is_empty() {
        // DryRunPreemption from a random offset, until enough candidates are found
        let want = num_preemption_candidates(potential.len());
        let offset = rng.random_range(0..potential.len());
        for i in 0..potential.len() {
            if !non_violating.is_empty() && non_violating.len() + violating.len() >= want {
                break;
            }
            let ni = potential[(offset + i) % potential.len()];
            match select_victims_on_node(pod, ni, nominator, pdbs, &spread, &pod_affinity) {
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
mod tests;
