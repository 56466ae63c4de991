//! Table tests of the preemption decisions, with the conformance tests' scenarios.

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
