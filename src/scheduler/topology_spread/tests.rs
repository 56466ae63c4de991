use super::*;
use crate::scheduler::nodeinfo::PodAccount;
use crate::scheduler::schedule_one::{preemption_victims, schedule_fresh};
use serde_json::{json, Value};
use std::sync::Arc;

fn labels(v: Value) -> BTreeMap<String, String> {
    serde_json::from_value(v).unwrap()
}

fn pod_obj(meta: Value, spec: Value) -> Pod {
    let mut meta = meta;
    if meta["namespace"].is_null() {
        meta["namespace"] = json!("ns");
    }
    let mut spec = spec;
    if spec["containers"].is_null() {
        spec["containers"] = json!([{"name": "c"}]);
    }
    serde_json::from_value(json!({"metadata": meta, "spec": spec})).unwrap()
}

/// A node with `node_labels` and, for each `(namespace, labels, terminating)`, a pod on it.
fn node(name: &str, node_labels: Value, pods: &[(&str, Value, bool)]) -> NodeInfo {
    let n = json!({"metadata": {"name": name, "labels": node_labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}});
    let mut ni = NodeInfo::new(Arc::new(serde_json::from_value(n).unwrap()));
    for (i, (ns, l, terminating)) in pods.iter().enumerate() {
        let mut meta = json!({"name": format!("{name}-{i}"), "namespace": ns, "labels": l});
        if *terminating {
            meta["deletionTimestamp"] = json!("2026-12-05T00:00:00Z");
        }
        let p = pod_obj(meta, json!({"nodeName": name}));
        ni.add_pod(&format!("{name}-{i}"), PodAccount::of(&p));
    }
    ni
}

fn host(name: &str, zone: Option<&str>) -> Value {
    match zone {
        Some(z) => json!({LABEL_HOSTNAME: name, LABEL_ZONE: z}),
        None => json!({LABEL_HOSTNAME: name}),
    }
}

fn web(n: usize) -> Vec<(&'static str, Value, bool)> {
    (0..n)
        .map(|_| ("ns", json!({"app": "web"}), false))
        .collect()
}

fn spread_pod(constraints: Value) -> SchedPod {
    SchedPod::new(&pod_obj(
        json!({"name": "p", "labels": {"app": "web", "pod-template-hash": "abc"}}),
        json!({"topologySpreadConstraints": constraints}),
    ))
}

fn selector(v: Value) -> Selector {
    Selector::of(Some(&serde_json::from_value(v).unwrap())).unwrap()
}

#[test]
fn selectors_match_like_labels_selector() {
    let l = labels(json!({"app": "web", "tier": "front"}));
    let cases: Vec<(Selector, bool, bool)> = vec![
        // (selector, matches, empty)
        (Selector::Nothing, false, false),
        (selector(json!({})), true, true),
        (
            selector(json!({"matchLabels": {"app": "web"}})),
            true,
            false,
        ),
        (
            selector(json!({"matchLabels": {"app": "db"}})),
            false,
            false,
        ),
        (
            selector(
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "x"]}]}),
            ),
            true,
            false,
        ),
        (
            selector(
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}),
            ),
            false,
            false,
        ),
        (
            selector(
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
            ),
            true,
            false,
        ),
        (
            selector(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]})),
            true,
            false,
        ),
        (
            selector(json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})),
            false,
            false,
        ),
    ];
    for (s, matches, empty) in cases {
        assert_eq!(s.matches(&l), matches, "{s:?}");
        assert_eq!(s.is_empty(), empty, "{s:?}");
    }
    for bad in [
        json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
    ] {
        assert!(
            Selector::of(Some(&serde_json::from_value(bad.clone()).unwrap())).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn constraints_split_by_action_with_api_defaults_and_match_label_keys() {
    let p = spread_pod(json!([
        {"maxSkew": 1, "topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["pod-template-hash", "absent"]},
        {"maxSkew": 2, "topologyKey": LABEL_ZONE, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "web"}}, "minDomains": 3,
         "nodeAffinityPolicy": "Ignore", "nodeTaintsPolicy": "Honor"},
    ]));
    assert!(p.spread.explicit);
    assert_eq!(
        p.spread.hard,
        vec![Constraint {
            max_skew: 1,
            topology_key: LABEL_HOSTNAME.into(),
            selector: Selector::Match(vec![
                Requirement::In("app".into(), vec!["web".into()]),
                Requirement::In("pod-template-hash".into(), vec!["abc".into()]),
            ]),
            min_domains: 1,
            honor_node_affinity: true,
            honor_node_taints: false,
        }]
    );
    let soft = &p.spread.soft[0];
    assert_eq!(
        (
            soft.max_skew,
            soft.min_domains,
            soft.honor_node_affinity,
            soft.honor_node_taints
        ),
        (2, 3, false, true)
    );
    // a pod without constraints has none of its own
    let plain = SchedPod::new(&pod_obj(json!({"name": "q"}), json!({})));
    assert_eq!(plain.spread, SpreadConstraints::default());
}

#[test]
fn default_selector_merges_services_and_the_controllers_selector() {
    let mut src = Listers::default();
    let k = |ns: &str, n: &str| (ns.to_string(), n.to_string());
    src.services
        .insert(k("ns", "web"), labels(json!({"app": "web"})));
    src.services
        .insert(k("ns", "all"), labels(json!({"tier": "front"})));
    src.services
        .insert(k("ns", "other-app"), labels(json!({"app": "db"})));
    src.services
        .insert(k("other", "web"), labels(json!({"zone": "x"})));
    src.services
        .insert(k("ns", "headless-no-selector"), BTreeMap::new());
    src.replica_sets.insert(
        k("ns", "web-abc"),
        serde_json::from_value(json!({"matchLabels": {"pod-template-hash": "abc"}})).unwrap(),
    );
    src.stateful_sets.insert(
        k("ns", "db"),
        serde_json::from_value(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}))
            .unwrap(),
    );
    src.replication_controllers
        .insert(k("ns", "rc"), labels(json!({"rc": "1"})));
    let owned = |api: &str, kind: &str, name: &str, controller: bool| {
        pod_obj(
            json!({"name": "p", "labels": {"app": "web", "tier": "front", "pod-template-hash": "abc", "rc": "1"},
                "ownerReferences": [{"apiVersion": api, "kind": kind, "name": name, "uid": "u",
                    "controller": controller}]}),
            json!({}),
        )
    };
    let in_ = |k: &str, v: &str| Requirement::In(k.into(), vec![v.into()]);
    let services = vec![in_("app", "web"), in_("tier", "front")];
    let cases = vec![
        (
            "no owner",
            pod_obj(
                json!({"name": "p", "labels": {"app": "web", "tier": "front"}}),
                json!({}),
            ),
            services.clone(),
        ),
        (
            "ReplicaSet",
            owned("apps/v1", "ReplicaSet", "web-abc", true),
            [services.clone(), vec![in_("pod-template-hash", "abc")]].concat(),
        ),
        (
            "StatefulSet",
            owned("apps/v1", "StatefulSet", "db", true),
            [services.clone(), vec![Requirement::Exists("app".into())]].concat(),
        ),
        (
            "ReplicationController",
            owned("v1", "ReplicationController", "rc", true),
            vec![in_("app", "web"), in_("rc", "1"), in_("tier", "front")],
        ),
        (
            "unknown ReplicaSet",
            owned("apps/v1", "ReplicaSet", "gone", true),
            services.clone(),
        ),
        (
            "not the controller",
            owned("apps/v1", "ReplicaSet", "web-abc", false),
            services.clone(),
        ),
        (
            "a Job",
            owned("batch/v1", "Job", "web-abc", true),
            services.clone(),
        ),
    ];
    for (name, pod, want) in cases {
        assert_eq!(
            default_selector(&pod, &src),
            Selector::Match(want),
            "{name}"
        );
    }
    // nothing selects the pod: no default spreading
    let lonely = pod_obj(json!({"name": "p", "labels": {"x": "y"}}), json!({}));
    let sel = default_selector(&lonely, &src);
    assert!(sel.is_empty());
    assert_eq!(
        SpreadConstraints::system_defaults(sel),
        SpreadConstraints::default()
    );
    let d = SpreadConstraints::system_defaults(Selector::of_set(&labels(json!({"app": "web"}))));
    let keys: Vec<(&str, i32)> = d
        .soft
        .iter()
        .map(|c| (c.topology_key.as_str(), c.max_skew))
        .collect();
    assert_eq!(keys, vec![(LABEL_HOSTNAME, 3), (LABEL_ZONE, 5)]);
    assert!(d.hard.is_empty() && !d.explicit);
}

fn hard(key: &str, max_skew: i32, extra: Value) -> Value {
    let mut c = json!({"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}}});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            c[k] = v;
        }
    }
    c
}

fn filtered(p: &SchedPod, nodes: &[NodeInfo]) -> Vec<Option<&'static str>> {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let st = FilterState::new(p, &refs);
    nodes
        .iter()
        .map(|n| {
            st.filter(p, n).map(|r| match r.code {
                Code::Unschedulable => "skew",
                Code::UnschedulableAndUnresolvable => "label",
                Code::Error => "error",
            })
        })
        .collect()
}

#[test]
fn the_filter_keeps_each_domain_within_max_skew_of_the_global_minimum() {
    let mut other = web(1);
    other.push(("other-ns", json!({"app": "web"}), false));
    other.push(("ns", json!({"app": "web"}), true));
    other.push(("ns", json!({"app": "db"}), false));
    let cases: Vec<(&str, Value, Vec<NodeInfo>, Vec<Option<&str>>)> = vec![
        (
            "hostname, maxSkew 1: only the emptiest nodes",
            json!([hard(LABEL_HOSTNAME, 1, json!({}))]),
            vec![
                node("a", host("a", None), &web(2)),
                node("b", host("b", None), &web(1)),
                node("c", host("c", None), &web(1)),
            ],
            vec![Some("skew"), None, None],
        ),
        (
            "other namespaces, terminating and unselected pods do not count",
            json!([hard(LABEL_HOSTNAME, 1, json!({}))]),
            vec![
                node("a", host("a", None), &other),
                node("b", host("b", None), &web(1)),
            ],
            vec![None, None],
        ),
        (
            "zones: a node's domain is its zone",
            json!([hard(LABEL_ZONE, 1, json!({}))]),
            vec![
                node("a", host("a", Some("x")), &web(1)),
                node("b", host("b", Some("x")), &web(1)),
                node("c", host("c", Some("y")), &web(1)),
            ],
            vec![Some("skew"), Some("skew"), None],
        ),
        (
            "a node without the key is unresolvable, and not a domain",
            json!([hard(LABEL_ZONE, 1, json!({}))]),
            vec![
                node("a", host("a", Some("x")), &web(1)),
                node("b", host("b", None), &[]),
            ],
            vec![None, Some("label")],
        ),
        (
            "minDomains above the domains there are: the global minimum is 0",
            json!([hard(LABEL_ZONE, 1, json!({"minDomains": 3}))]),
            vec![
                node("a", host("a", Some("x")), &web(1)),
                node("b", host("b", Some("y")), &web(0)),
            ],
            vec![Some("skew"), None],
        ),
        (
            "nodes the pod's node selector excludes are no domain (nodeAffinityPolicy Honor)",
            json!([hard(LABEL_HOSTNAME, 1, json!({}))]),
            vec![
                node("a", json!({LABEL_HOSTNAME: "a", "pool": "x"}), &web(1)),
                node("b", json!({LABEL_HOSTNAME: "b", "pool": "y"}), &[]),
            ],
            vec![None, None],
        ),
    ];
    for (name, constraints, nodes, want) in cases {
        let mut p = spread_pod(constraints);
        if name.contains("node selector") {
            p = SchedPod::new(&pod_obj(
                json!({"name": "p", "labels": {"app": "web"}}),
                json!({"nodeSelector": {"pool": "x"}, "topologySpreadConstraints": [hard(LABEL_HOSTNAME, 1, json!({}))]}),
            ));
        }
        assert_eq!(filtered(&p, &nodes), want, "{name}");
    }
    // with nodeAffinityPolicy Ignore, the excluded empty node is the minimum
    let p = SchedPod::new(&pod_obj(
        json!({"name": "p", "labels": {"app": "web"}}),
        json!({"nodeSelector": {"pool": "x"}, "topologySpreadConstraints":
            [hard(LABEL_HOSTNAME, 1, json!({"nodeAffinityPolicy": "Ignore"}))]}),
    ));
    let nodes = vec![
        node("a", json!({LABEL_HOSTNAME: "a", "pool": "x"}), &web(1)),
        node("b", json!({LABEL_HOSTNAME: "b", "pool": "y"}), &[]),
    ];
    assert_eq!(filtered(&p, &nodes), vec![Some("skew"), None]);
}

#[test]
fn system_default_scores_prefer_nodes_with_fewer_matching_pods() {
    let mut p = SchedPod::new(&pod_obj(
        json!({"name": "p", "labels": {"app": "web"}}),
        json!({}),
    ));
    p.spread = SpreadConstraints::system_defaults(Selector::of_set(&labels(json!({"app": "web"}))));
    let nodes = [
        node("a", host("a", None), &web(2)),
        node("b", host("b", None), &[]),
        node("c", host("c", None), &web(1)),
    ];
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    // hostname weight ln(3 + 2); raw = count * weight + (3 - 1): 5.2 -> 5, 2, 3.6 -> 4; no zone
    // labels, so the zone constraint adds nothing; normalized 100 * (max + min - raw) / max
    assert_eq!(scores(&p, &refs, &refs), Some(vec![40, 100, 60]));
    // zones count across every node, including those not feasible
    let zoned = [
        node("a", host("a", Some("x")), &web(0)),
        node("b", host("b", Some("y")), &web(0)),
        node("c", host("c", Some("x")), &web(3)),
    ];
    let all: Vec<&NodeInfo> = zoned.iter().collect();
    let s = scores(&p, &all[..2], &all).unwrap();
    assert!(
        s[1] > s[0],
        "zone y (empty) beats zone x (3 pods on c): {s:?}"
    );
    // no constraints: the plugin skips
    let plain = SchedPod::new(&pod_obj(json!({"name": "p"}), json!({})));
    assert_eq!(scores(&plain, &refs, &refs), None);
}

#[test]
fn explicit_soft_constraints_ignore_nodes_missing_a_key() {
    let p = spread_pod(json!([{"maxSkew": 1, "topologyKey": LABEL_ZONE,
        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}]));
    let nodes = [
        node("a", host("a", Some("x")), &web(1)),
        node("b", host("b", Some("y")), &[]),
        node("c", host("c", None), &[]),
    ];
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    assert_eq!(scores(&p, &refs, &refs), Some(vec![0, 100, 0]));
}

#[test]
fn scheduling_spreads_and_explains_a_spread_failure() {
    let p = spread_pod(json!([hard(LABEL_HOSTNAME, 1, json!({}))]));
    let nodes = [
        node("a", host("a", None), &web(1)),
        node("b", host("b", None), &web(0)),
        node("c", host("c", None), &web(1)),
    ];
    for _ in 0..20 {
        assert_eq!(schedule_fresh(&p, &nodes).unwrap().node, "b");
    }
    let p2 = spread_pod(json!([hard(LABEL_ZONE, 1, json!({"minDomains": 2}))]));
    let nodes = [
        node("a", host("a", Some("x")), &web(1)),
        node("b", host("b", None), &[]),
    ];
    let err = schedule_fresh(&p2, &nodes).unwrap_err();
    assert!(
        err.message().starts_with(
            "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, \
             1 node(s) didn't match pod topology spread constraints (missing required label)."
        ),
        "{}",
        err.message()
    );
}

#[test]
fn preemption_evicts_the_matching_pods_that_break_the_skew() {
    // one zone where two are wanted (minDomains 2): the global minimum is 0, so the zone may hold
    // no more than maxSkew 1 pod, counting the new one; its lower-priority web pod must go
    let p = SchedPod::new(&pod_obj(
        json!({"name": "p", "uid": "p", "labels": {"app": "web"}}),
        json!({"priority": 100, "topologySpreadConstraints": [hard(LABEL_ZONE, 1, json!({"minDomains": 2}))]}),
    ));
    let mut pods = web(1);
    pods.push(("ns", json!({"app": "db"}), false));
    let nodes = [node("a", host("a", Some("x")), &pods)];
    let (node, victims) = preemption_victims(&p, &nodes);
    assert_eq!(node, "a");
    assert_eq!(victims, vec!["a-0"], "only the web pod, not the db pod");
}

#[test]
fn only_a_selected_pod_of_the_namespace_requeues_a_pod_waiting_on_spread() {
    let waiting = pod_obj(
        json!({"name": "w", "labels": {"app": "web"}}),
        json!({"topologySpreadConstraints": [hard(LABEL_HOSTNAME, 1, json!({}))]}),
    );
    let plain = pod_obj(json!({"name": "w", "labels": {"app": "web"}}), json!({}));
    let changed = |ns: &str, app: &str| {
        pod_obj(
            json!({"name": "x", "namespace": ns, "labels": {"app": app}}),
            json!({}),
        )
    };
    assert!(pod_change_may_help(&waiting, &changed("ns", "web")));
    assert!(!pod_change_may_help(&waiting, &changed("ns", "db")));
    assert!(!pod_change_may_help(&waiting, &changed("other", "web")));
    assert!(!pod_change_may_help(&plain, &changed("ns", "web")));
}
