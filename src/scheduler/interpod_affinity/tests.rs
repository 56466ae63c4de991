use super::*;
use crate::scheduler::nodeinfo::PodAccount;
use crate::scheduler::schedule_one::{preemption_victims, schedule_fresh};
use serde_json::{json, Value};

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn pod_obj(name: &str, ns: &str, labels: Value, affinity: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "c"}]});
    if !affinity.is_null() {
        spec["affinity"] = affinity;
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": ns, "uid": name,
        "labels": labels}, "spec": spec}),
    )
    .unwrap()
}

/// A node with labels and pods (name, namespace, labels, affinity).
fn node(name: &str, labels: Value, pods: Vec<Pod>) -> NodeInfo {
    let n = json!({"metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}});
    let mut ni = NodeInfo::new(Arc::new(serde_json::from_value(n).unwrap()));
    for p in pods {
        let uid = p.metadata.name.clone().unwrap();
        ni.add_pod(&uid, PodAccount::of(&p));
    }
    ni
}

fn host(name: &str, zone: Option<&str>) -> Value {
    match zone {
        Some(z) => json!({HOST: name, ZONE: z}),
        None => json!({HOST: name}),
    }
}

fn term(key: &str, app: &str) -> Value {
    json!({"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}})
}

fn anti(key: &str, app: &str) -> Value {
    json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(key, app)]}})
}

fn web(name: &str) -> Pod {
    pod_obj(name, "ns", json!({"app": "web"}), Value::Null)
}

fn incoming(labels: Value, affinity: Value, namespaces: &NamespaceLabels) -> SchedPod {
    let p = pod_obj("p", "ns", labels, affinity);
    let mut sp = SchedPod::new(&p);
    if let Some(t) = &sp.pod_affinity {
        sp.pod_affinity = Some(Arc::new(t.resolved(namespaces)));
    }
    sp.namespace_labels = namespaces.get("ns").cloned().unwrap_or_default();
    sp
}

fn outcome(p: &SchedPod, nodes: &[NodeInfo]) -> Vec<&'static str> {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let st = FilterState::new(p, &refs);
    nodes
        .iter()
        .map(|n| match st.filter(p, n) {
            None => "fits",
            Some(r) if r.reasons[0] == ERR_AFFINITY_RULES => "affinity",
            Some(r) if r.reasons[0] == ERR_ANTI_AFFINITY_RULES => "anti",
            Some(r) if r.reasons[0] == ERR_EXISTING_ANTI_AFFINITY_RULES => "existing-anti",
            Some(r) => panic!("unexpected {r:?}"),
        })
        .collect()
}

fn namespaces() -> NamespaceLabels {
    serde_json::from_value(
        json!({"ns": {"team": "a"}, "other": {"team": "a"}, "third": {"team": "b"}}),
    )
    .unwrap()
}

#[test]
fn terms_take_the_pods_namespace_unless_they_name_or_select_some() {
    let t = |v: Value| AffinityTerm::of("ns", &serde_json::from_value(v).unwrap());
    let sel = json!({"matchLabels": {"app": "web"}});
    let own = t(json!({"topologyKey": HOST, "labelSelector": sel}));
    assert_eq!(own.namespaces, BTreeSet::from(["ns".to_string()]));
    let named = t(json!({"topologyKey": HOST, "labelSelector": sel, "namespaces": ["x", "y"]}));
    assert_eq!(named.namespaces.len(), 2);
    assert!(!named.namespaces.contains("ns"));
    let l = BTreeMap::from([("app".to_string(), "web".to_string())]);
    let team_a = Some(&namespaces()["other"]);
    let by_selector = t(
        json!({"topologyKey": HOST, "labelSelector": sel, "namespaceSelector": {"matchLabels": {"team": "a"}}}),
    );
    assert!(by_selector.namespaces.is_empty());
    assert!(by_selector.matches("other", &l, team_a));
    assert!(!by_selector.matches("third", &l, Some(&namespaces()["third"])));
    let all = t(json!({"topologyKey": HOST, "labelSelector": sel, "namespaceSelector": {}}));
    assert!(all.matches("third", &l, Some(&namespaces()["third"])));
    // resolving turns a selector into names, as kube-scheduler does for the incoming pod
    let mut resolved = by_selector.clone();
    resolved.resolve_namespaces(&namespaces());
    assert_eq!(
        resolved.namespaces,
        BTreeSet::from(["ns".into(), "other".into()])
    );
    assert!(resolved.matches("other", &l, None));
    // a pod without pod (anti-)affinity has no terms at all
    assert_eq!(PodAffinityTerms::of(&web("w")), None);
}

#[test]
fn the_filter_applies_affinity_anti_affinity_and_placed_pods_anti_affinity() {
    let ns = namespaces();
    let db = |n: &str| pod_obj(n, "ns", json!({"app": "db"}), Value::Null);
    let cases: Vec<(&str, SchedPod, Vec<NodeInfo>, Vec<&str>)> = vec![
        (
            "anti-affinity by hostname keeps web pods apart",
            incoming(json!({"app": "web"}), anti(HOST, "web"), &ns),
            vec![
                node("a", host("a", None), vec![web("w1")]),
                node("b", host("b", None), vec![]),
            ],
            vec!["anti", "fits"],
        ),
        (
            "anti-affinity by zone rules out the whole zone",
            incoming(json!({"app": "web"}), anti(ZONE, "web"), &ns),
            vec![
                node("a", host("a", Some("x")), vec![web("w1")]),
                node("b", host("b", Some("x")), vec![]),
                node("c", host("c", Some("y")), vec![]),
                node("d", host("d", None), vec![]),
            ],
            vec!["anti", "anti", "fits", "fits"],
        ),
        (
            "anti-affinity ignores pods of other namespaces",
            incoming(json!({"app": "web"}), anti(HOST, "web"), &ns),
            vec![node(
                "a",
                host("a", None),
                vec![pod_obj("w", "other", json!({"app": "web"}), Value::Null)],
            )],
            vec!["fits"],
        ),
        (
            "affinity by zone: near a db pod, not in another zone, not on a node without zones",
            incoming(
                json!({"app": "web"}),
                json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, "db")]}}),
                &ns,
            ),
            vec![
                node("a", host("a", Some("x")), vec![db("d1")]),
                node("b", host("b", Some("x")), vec![]),
                node("c", host("c", Some("y")), vec![]),
                node("d", host("d", None), vec![]),
            ],
            vec!["fits", "fits", "affinity", "affinity"],
        ),
        (
            "affinity to its own kind: the first pod of the group goes anywhere with the key",
            incoming(
                json!({"app": "web"}),
                json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, "web")]}}),
                &ns,
            ),
            vec![
                node("a", host("a", Some("x")), vec![db("d1")]),
                node("b", host("b", None), vec![]),
            ],
            vec!["fits", "affinity"],
        ),
        (
            "affinity to a pod that is nowhere and that the pod itself is not: no node",
            incoming(
                json!({"app": "web"}),
                json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, "cache")]}}),
                &ns,
            ),
            vec![node("a", host("a", Some("x")), vec![db("d1")])],
            vec!["affinity"],
        ),
        (
            "a placed pod's anti-affinity keeps the pod off its node",
            incoming(json!({"app": "web"}), Value::Null, &ns),
            vec![
                node(
                    "a",
                    host("a", None),
                    vec![pod_obj(
                        "loner",
                        "ns",
                        json!({"app": "loner"}),
                        anti(HOST, "web"),
                    )],
                ),
                node("b", host("b", None), vec![db("d1")]),
            ],
            vec!["existing-anti", "fits"],
        ),
        (
            "a placed pod's anti-affinity with a namespace selector matching the pod's namespace",
            incoming(json!({"app": "web"}), Value::Null, &ns),
            vec![node(
                "a",
                host("a", None),
                vec![pod_obj(
                    "loner",
                    "third",
                    json!({}),
                    json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "web"}},
                     "namespaceSelector": {"matchLabels": {"team": "a"}}}]}}),
                )],
            )],
            vec!["existing-anti"],
        ),
        (
            "a placed pod's anti-affinity for its own namespace only",
            incoming(json!({"app": "web"}), Value::Null, &ns),
            vec![node(
                "a",
                host("a", None),
                vec![pod_obj("loner", "third", json!({}), anti(HOST, "web"))],
            )],
            vec!["fits"],
        ),
    ];
    for (name, p, nodes, want) in cases {
        assert_eq!(outcome(&p, &nodes), want, "{name}");
    }
}

#[test]
fn scores_follow_preferred_terms_both_ways_and_placed_pods_required_affinity() {
    let ns = namespaces();
    let preferred_anti = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term(HOST, "web")}]}});
    let nodes = [
        node("a", host("a", None), vec![web("w1")]),
        node("b", host("b", None), vec![]),
        node("c", host("c", None), vec![web("w2"), web("w3")]),
    ];
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    // raw -100, 0, -200: normalized (s - min) / (max - min)
    let p = incoming(json!({"app": "web"}), preferred_anti, &ns);
    assert_eq!(scores(&p, &refs, &refs), Some(vec![50, 100, 0]));

    // a placed pod that prefers (weight 30) or requires (hardPodAffinityWeight 1) web pods near it
    let likes = pod_obj(
        "likes",
        "ns",
        json!({}),
        json!({"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 30, "podAffinityTerm": term(HOST, "web")}]}}),
    );
    let needs = pod_obj(
        "needs",
        "ns",
        json!({}),
        json!({"podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [term(HOST, "web")]}}),
    );
    let nodes = [
        node("a", host("a", None), vec![likes]),
        node("b", host("b", None), vec![needs]),
        node("c", host("c", None), vec![]),
    ];
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let plain = incoming(json!({"app": "web"}), Value::Null, &ns);
    // raw 30, 1, 0
    assert_eq!(scores(&plain, &refs, &refs), Some(vec![100, 3, 0]));
    // a pod no term applies to: the plugin skips
    let other = incoming(json!({"app": "db"}), Value::Null, &ns);
    assert_eq!(scores(&other, &refs, &refs), None);
}

#[test]
fn anti_affine_replicas_take_one_node_each_and_the_next_is_told_why_not() {
    let ns = namespaces();
    let p = incoming(json!({"app": "web"}), anti(HOST, "web"), &ns);
    let mut nodes = vec![
        node("a", host("a", None), vec![web("w1")]),
        node("b", host("b", None), vec![]),
        node("c", host("c", None), vec![web("w2")]),
    ];
    let run = |nodes: &[NodeInfo]| schedule_fresh(&p, nodes);
    assert_eq!(run(&nodes).unwrap().node, "b");
    nodes[1] = node("b", host("b", None), vec![web("w3")]);
    assert_eq!(
        run(&nodes).unwrap_err().message(),
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 \
         nodes are available: 3 No preemption victims found for incoming pod."
    );
}

#[test]
fn preemption_evicts_the_lower_priority_pod_an_anti_affinity_term_selects() {
    let ns = namespaces();
    let mut p = incoming(json!({"app": "web"}), anti(HOST, "web"), &ns);
    p.priority = 100;
    let nodes = [node(
        "a",
        host("a", None),
        vec![
            web("w1"),
            pod_obj("db", "ns", json!({"app": "db"}), Value::Null),
        ],
    )];
    let (_, victims) = preemption_victims(&p, &nodes);
    assert_eq!(victims, vec!["w1"]);
}

#[test]
fn an_arriving_pod_requeues_only_pods_whose_required_affinity_selects_it() {
    let wants_db = pod_obj(
        "w",
        "ns",
        json!({}),
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term(ZONE, "db")]}}),
    );
    let db = pod_obj("d", "ns", json!({"app": "db"}), Value::Null);
    assert!(pod_change_may_help(&wants_db, &db));
    assert!(!pod_change_may_help(&wants_db, &web("x")));
    assert!(!pod_change_may_help(&web("y"), &db));
}
