//! Table tests of the volume plugins with hand-built claims, volumes, classes and nodes: the
//! PreFilter decisions and their messages, the Filter per node, the choice of volume, and whole
//! failure messages as kube-scheduler prints them; the builders the other volume tests share.

use super::*;
use crate::scheduler::filters::SchedPod;
use crate::scheduler::nodeinfo::NodeInfo;
use crate::scheduler::schedule_one::{schedule_fresh, ScheduleError};
use crate::scheduler::storage::Storage;
use crate::scheduler::volumes;
use serde_json::{json, Value};

pub(crate) fn node(name: &str, labels: Value) -> NodeInfo {
    NodeInfo::new(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}))
        .unwrap(),
    ))
}

pub(crate) fn three_nodes() -> Vec<NodeInfo> {
    ["a", "b", "c"]
        .iter()
        .map(|n| {
            node(
                n,
                json!({"kubernetes.io/hostname": n, "topology.kubernetes.io/zone": format!("z-{n}")}),
            )
        })
        .collect()
}

/// A class; `mode` None leaves volumeBindingMode unset.
pub(crate) fn class(name: &str, provisioner: &str, mode: Option<&str>, extra: Value) -> Value {
    let mut v =
        json!({"kind": "StorageClass", "metadata": {"name": name}, "provisioner": provisioner});
    if let Some(m) = mode {
        v["volumeBindingMode"] = m.into();
    }
    if let Value::Object(m) = extra {
        for (k, x) in m {
            v[k] = x;
        }
    }
    v
}

/// An Available local volume of class `class`, `size` big, on node `host` (None: anywhere).
pub(crate) fn pv(name: &str, class: &str, size: &str, host: Option<&str>) -> Value {
    let mut v = json!({"kind": "PersistentVolume",
        "metadata": {"name": name, "resourceVersion": "10"},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": class, "local": {"path": "/mnt"}},
        "status": {"phase": "Available"}});
    if let Some(h) = host {
        v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions":
            [{"key": "kubernetes.io/hostname", "operator": "In", "values": [h]}]}]}});
    }
    v
}

/// An unbound claim in namespace `ns` asking for `size`.
pub(crate) fn pvc(name: &str, class: Option<&str>, size: &str) -> Value {
    let mut v = json!({"kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "5"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
        "status": {"phase": "Pending"}});
    if let Some(c) = class {
        v["spec"]["storageClassName"] = c.into();
    }
    v
}

/// `claim` bound to `volume` by the PV controller.
pub(crate) fn bound(mut claim: Value, volume: &str) -> Value {
    claim["spec"]["volumeName"] = volume.into();
    claim["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    claim["status"]["phase"] = "Bound".into();
    claim
}

pub(crate) fn storage(objs: Vec<Value>) -> Storage {
    let mut s = Storage::default();
    for o in objs {
        match o["kind"].as_str().unwrap() {
            "StorageClass" => {
                let c: StorageClass = serde_json::from_value(o).unwrap();
                s.classes
                    .insert(c.metadata.name.clone().unwrap(), Arc::new(c));
            }
            "PersistentVolume" => {
                s.pvs.set(serde_json::from_value(o).unwrap());
            }
            "PersistentVolumeClaim" => {
                s.pvcs.set(serde_json::from_value(o).unwrap());
            }
            k => panic!("{k}"),
        }
    }
    s
}

/// A pod in namespace `ns` with one `persistentVolumeClaim` volume per claim name.
pub(crate) fn pod_with(name: &str, claims: &[&str]) -> Pod {
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c"}], "volumes": volumes}}),
    )
    .unwrap()
}

pub(crate) fn sched(pod: &Pod, st: &Storage, nodes: &[NodeInfo]) -> SchedPod {
    let mut sp = SchedPod::new(pod);
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    sp.volumes = volumes::pre_filter(pod, &sp, st, &refs);
    sp
}

fn message(pod: &Pod, st: &Storage, nodes: &[NodeInfo]) -> String {
    schedule_fresh(&sched(pod, st, nodes), nodes)
        .unwrap_err()
        .message()
}

fn placed(pod: &Pod, st: &Storage, nodes: &[NodeInfo]) -> String {
    schedule_fresh(&sched(pod, st, nodes), nodes).unwrap().node
}

pub(crate) fn binding_state(pod: &Pod, st: &Storage) -> BindingState {
    match pre_filter(pod, st) {
        PreFilter::Proceed(b) => b,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn wffc() -> Value {
    class(
        "local",
        "kubernetes.io/no-provisioner",
        Some("WaitForFirstConsumer"),
        json!({}),
    )
}

const NOT_HELPFUL_3: &str =
    " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.";

#[test]
fn unbound_immediate_claims_reject_the_pod_in_prefilter() {
    let nodes = three_nodes();
    let want = format!(
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.{NOT_HELPFUL_3}"
    );
    for (why, objs) in [
        (
            "Immediate class",
            vec![
                class("fast", "example.com/csi", Some("Immediate"), json!({})),
                pvc("data", Some("fast"), "1Gi"),
            ],
        ),
        ("no class", vec![pvc("data", None, "1Gi")]),
        ("missing class", vec![pvc("data", Some("nope"), "1Gi")]),
        (
            "pre-bound to a volume by name",
            vec![wffc(), {
                let mut c = pvc("data", Some("local"), "1Gi");
                c["spec"]["volumeName"] = "pv1".into();
                c
            }],
        ),
    ] {
        let st = storage(objs);
        assert_eq!(
            message(&pod_with("p", &["data"]), &st, &nodes),
            want,
            "{why}"
        );
        let sp = sched(&pod_with("p", &["data"]), &st, &nodes);
        let r = sp.volumes.as_ref().unwrap().rejection.clone().unwrap();
        assert_eq!(
            (r.plugin, r.code),
            (PLUGIN, Code::UnschedulableAndUnresolvable),
            "{why}"
        );
    }
}

#[test]
fn missing_deleted_lost_and_foreign_claims_have_kube_schedulers_messages() {
    let nodes = three_nodes();
    let msg = |objs: Vec<Value>, pod: &Pod| message(pod, &storage(objs), &nodes);
    assert_eq!(
        msg(vec![], &pod_with("p", &["data"])),
        format!(
            "0/3 nodes are available: persistentvolumeclaim \"data\" not found.{NOT_HELPFUL_3}"
        )
    );
    let mut deleting = pvc("data", Some("local"), "1Gi");
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
    assert_eq!(
        msg(vec![wffc(), deleting], &pod_with("p", &["data"])),
        format!("0/3 nodes are available: persistentvolumeclaim \"data\" is being deleted.{NOT_HELPFUL_3}")
    );
    let mut lost = pvc("data", Some("local"), "1Gi");
    lost["spec"]["volumeName"] = "gone".into();
    lost["status"]["phase"] = "Lost".into();
    assert_eq!(
        msg(vec![lost], &pod_with("p", &["data"])),
        format!("0/3 nodes are available: persistentvolumeclaim \"data\" bound to non-existent persistentvolume \"gone\".{NOT_HELPFUL_3}")
    );
    // a generic ephemeral volume's claim is <pod>-<volume>, made by the ephemeral controller
    let eph: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p"},
        "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "scratch", "ephemeral":
            {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}}}]}}),
    )
    .unwrap();
    assert_eq!(
        msg(vec![], &eph),
        format!("0/3 nodes are available: waiting for ephemeral volume controller to create the persistentvolumeclaim \"p-scratch\".{NOT_HELPFUL_3}")
    );
    assert_eq!(
        msg(vec![wffc(), pvc("p-scratch", Some("local"), "1Gi")], &eph),
        format!("0/3 nodes are available: PVC ns/p-scratch was not created for pod ns/p (pod is not owner).{NOT_HELPFUL_3}")
    );
    let mut owned = pvc("p-scratch", Some("local"), "1Gi");
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "p",
        "uid": "uid-p", "controller": true}]);
    let st = storage(vec![wffc(), owned, pv("pv1", "local", "1Gi", Some("b"))]);
    assert_eq!(placed(&eph, &st, &nodes), "b");
}

#[test]
fn a_class_without_binding_mode_is_a_prefilter_error() {
    let nodes = three_nodes();
    let st = storage(vec![
        class("odd", "example.com/csi", None, json!({})),
        pvc("data", Some("odd"), "1Gi"),
    ]);
    let err = schedule_fresh(&sched(&pod_with("p", &["data"]), &st, &nodes), &nodes).unwrap_err();
    assert_eq!(
        err,
        ScheduleError::Error(
            "running PreFilter plugin \"VolumeBinding\": VolumeBindingMode not set for StorageClass \"odd\""
                .into()
        )
    );
}

#[test]
fn a_local_volume_fits_only_its_node_and_the_others_get_the_bind_conflict() {
    let nodes = three_nodes();
    let st = storage(vec![
        wffc(),
        pvc("data", Some("local"), "1Gi"),
        pv("pv-b", "local", "5Gi", Some("b")),
    ]);
    let pod = pod_with("p", &["data"]);
    let sp = sched(&pod, &st, &nodes);
    let rejected: Vec<(String, Vec<String>)> = nodes
        .iter()
        .filter_map(|ni| volumes::volume_binding(&sp, ni).map(|r| (ni.name.clone(), r.reasons)))
        .collect();
    let conflict = vec![ERR_BIND_CONFLICT.to_string()];
    assert_eq!(
        rejected,
        [
            ("a".to_string(), conflict.clone()),
            ("c".to_string(), conflict)
        ]
    );
    assert_eq!(placed(&pod, &st, &nodes), "b");
    let r = volumes::volume_binding(&sp, &nodes[0]).unwrap();
    assert_eq!(r.code, Code::UnschedulableAndUnresolvable);
}

#[test]
fn the_whole_message_when_no_node_has_a_volume_byte_for_byte() {
    let nodes = three_nodes();
    let st = storage(vec![wffc(), pvc("data", Some("local"), "1Gi")]);
    assert_eq!(
        message(&pod_with("p", &["data"]), &st, &nodes),
        "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
    // with other filters' reasons, counted and sorted together; the first failing filter of a
    // node decides its reason
    let mut nodes = three_nodes();
    nodes[0] = NodeInfo::new(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "a"},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}))
        .unwrap(),
    ));
    let st = storage(vec![
        wffc(),
        pvc("data", Some("local"), "1Gi"),
        pv("pv-a", "local", "1Gi", Some("a")),
    ]);
    assert_eq!(
        message(&pod_with("p", &["data"]), &st, &nodes),
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't find available persistent volumes to bind. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
}

#[test]
fn the_smallest_matching_volume_is_chosen() {
    let nodes = three_nodes();
    let st = storage(vec![
        wffc(),
        pvc("data", Some("local"), "2Gi"),
        pv("big", "local", "10Gi", None),
        pv("small", "local", "2Gi", None),
        pv("tiny", "local", "1Gi", None),
        pv("mid", "local", "3Gi", None),
    ]);
    let b = binding_state(&pod_with("p", &["data"]), &st);
    let (v, reasons) = find_pod_volumes(&b, &nodes[0].node).unwrap();
    assert!(reasons.is_empty());
    assert_eq!(v.static_bindings.len(), 1);
    assert_eq!(
        v.static_bindings[0].pv.metadata.name.as_deref(),
        Some("small")
    );
    assert!(v.provisions.is_empty());
}

#[test]
fn each_claim_of_a_pod_gets_its_own_volume_smallest_requests_first() {
    let nodes = three_nodes();
    let st = storage(vec![
        wffc(),
        pvc("big", Some("local"), "4Gi"),
        pvc("small", Some("local"), "1Gi"),
        pv("pv1", "local", "1Gi", None),
        pv("pv5", "local", "5Gi", None),
    ]);
    let b = binding_state(&pod_with("p", &["big", "small"]), &st);
    let (v, reasons) = find_pod_volumes(&b, &nodes[0].node).unwrap();
    assert!(reasons.is_empty());
    let got: Vec<(&str, &str)> = v
        .static_bindings
        .iter()
        .map(|b| {
            (
                b.pvc.metadata.name.as_deref().unwrap(),
                b.pv.metadata.name.as_deref().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("small", "pv1"), ("big", "pv5")]);
    // one volume for two claims: the second finds none
    let st = storage(vec![
        wffc(),
        pvc("c1", Some("local"), "1Gi"),
        pvc("c2", Some("local"), "1Gi"),
        pv("pv1", "local", "1Gi", None),
    ]);
    let b = binding_state(&pod_with("p", &["c1", "c2"]), &st);
    assert_eq!(
        find_pod_volumes(&b, &nodes[0].node).unwrap().1,
        [ERR_BIND_CONFLICT]
    );
}

#[test]
fn volumes_that_do_not_match_the_claim_are_skipped() {
    let nodes = three_nodes();
    let claim = pvc("data", Some("local"), "2Gi");
    let good = pv("pv", "local", "2Gi", None);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    let cases: Vec<(&str, Value, Value)> = vec![
        ("matches", claim.clone(), good.clone()),
        (
            "too small",
            claim.clone(),
            with(&|v| v["spec"]["capacity"]["storage"] = "1Gi".into()),
        ),
        (
            "other class",
            claim.clone(),
            with(&|v| v["spec"]["storageClassName"] = "other".into()),
        ),
        (
            "beta class annotation wins",
            claim.clone(),
            with(&|v| {
                v["metadata"]["annotations"] =
                    json!({"volume.beta.kubernetes.io/storage-class": "other"})
            }),
        ),
        (
            "access mode missing",
            {
                let mut c = claim.clone();
                c["spec"]["accessModes"] = json!(["ReadWriteMany"]);
                c
            },
            good.clone(),
        ),
        (
            "block volume for a filesystem claim",
            claim.clone(),
            with(&|v| v["spec"]["volumeMode"] = "Block".into()),
        ),
        (
            "selector does not match",
            {
                let mut c = claim.clone();
                c["spec"]["selector"] = json!({"matchLabels": {"tier": "gold"}});
                c
            },
            with(&|v| v["metadata"]["labels"] = json!({"tier": "silver"})),
        ),
        (
            "not Available",
            claim.clone(),
            with(&|v| v["status"]["phase"] = "Released".into()),
        ),
        (
            "being deleted",
            claim.clone(),
            with(&|v| v["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into()),
        ),
        (
            "claimed by another claim",
            claim.clone(),
            with(&|v| {
                v["spec"]["claimRef"] = json!({"namespace": "ns", "name": "other", "uid": "x"})
            }),
        ),
        (
            "other volume attributes class",
            claim.clone(),
            with(&|v| v["spec"]["volumeAttributesClassName"] = "gold".into()),
        ),
        (
            "node affinity elsewhere",
            claim.clone(),
            pv("pv", "local", "2Gi", Some("c")),
        ),
    ];
    for (why, c, v) in cases {
        let st = storage(vec![wffc(), c, v]);
        let b = binding_state(&pod_with("p", &["data"]), &st);
        let (_, reasons) = find_pod_volumes(&b, &nodes[0].node).unwrap();
        let want: &[&str] = if why == "matches" {
            &[]
        } else {
            &[ERR_BIND_CONFLICT]
        };
        assert_eq!(reasons, want, "{why}");
    }
    // a selector that matches, a Block claim on a Block volume
    let mut c = claim.clone();
    c["spec"]["selector"] =
        json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]});
    c["spec"]["volumeMode"] = "Block".into();
    let v = with(&|v| {
        v["metadata"]["labels"] = json!({"tier": "gold"});
        v["spec"]["volumeMode"] = "Block".into();
    });
    let st = storage(vec![wffc(), c, v]);
    let b = binding_state(&pod_with("p", &["data"]), &st);
    assert!(find_pod_volumes(&b, &nodes[0].node).unwrap().1.is_empty());
}

#[test]
fn a_volume_pre_bound_to_the_claim_wins_and_its_node_affinity_decides() {
    let nodes = three_nodes();
    let mut prebound = pv("mine", "local", "100Gi", Some("c"));
    prebound["spec"]["claimRef"] = json!({"namespace": "ns", "name": "data"});
    prebound["status"]["phase"] = "Available".into();
    let st = storage(vec![
        wffc(),
        pvc("data", Some("local"), "1Gi"),
        pv("small", "local", "1Gi", None),
        prebound,
    ]);
    let b = binding_state(&pod_with("p", &["data"]), &st);
    let (v, _) = find_pod_volumes(&b, &nodes[2].node).unwrap();
    assert_eq!(
        v.static_bindings[0].pv.metadata.name.as_deref(),
        Some("mine")
    );
    // on another node the pre-bound volume does not fit, and no other volume is taken
    let (_, reasons) = find_pod_volumes(&b, &nodes[0].node).unwrap();
    assert_eq!(reasons, [ERR_BIND_CONFLICT]);
}

#[test]
fn a_provisioner_class_provisions_where_its_allowed_topologies_admit_the_node() {
    let nodes = three_nodes();
    let csi = class(
        "csi",
        "example.com/csi",
        Some("WaitForFirstConsumer"),
        json!({"allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["z-a", "z-c"]}]}]}),
    );
    let st = storage(vec![csi, pvc("data", Some("csi"), "1Gi")]);
    let pod = pod_with("p", &["data"]);
    let b = binding_state(&pod, &st);
    for (i, fits) in [(0, true), (1, false), (2, true)] {
        let (v, reasons) = find_pod_volumes(&b, &nodes[i].node).unwrap();
        assert_eq!(reasons.is_empty(), fits, "{}", nodes[i].name);
        assert_eq!(v.provisions.len(), usize::from(fits));
    }
    assert_ne!(placed(&pod, &st, &nodes), "b");
    // no allowedTopologies: anywhere
    let st = storage(vec![
        class(
            "csi",
            "example.com/csi",
            Some("WaitForFirstConsumer"),
            json!({}),
        ),
        pvc("data", Some("csi"), "1Gi"),
    ]);
    let b = binding_state(&pod, &st);
    assert!(nodes
        .iter()
        .all(|n| find_pod_volumes(&b, &n.node).unwrap().1.is_empty()));
    // a claim already being provisioned for node b stays there
    let mut selected = pvc("data", Some("csi"), "1Gi");
    selected["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "b"});
    let st = storage(vec![
        class(
            "csi",
            "example.com/csi",
            Some("WaitForFirstConsumer"),
            json!({}),
        ),
        selected,
    ]);
    assert_eq!(placed(&pod, &st, &nodes), "b");
}

#[test]
fn a_bound_volume_whose_node_affinity_excludes_the_node_conflicts() {
    let nodes = three_nodes();
    let mut v = pv("pv1", "local", "1Gi", Some("c"));
    v["status"]["phase"] = "Bound".into();
    let st = storage(vec![
        wffc(),
        bound(pvc("data", Some("local"), "1Gi"), "pv1"),
        v,
    ]);
    let pod = pod_with("p", &["data"]);
    assert_eq!(placed(&pod, &st, &nodes), "c");
    let sp = sched(&pod, &st, &nodes);
    assert_eq!(
        volumes::volume_binding(&sp, &nodes[0]).unwrap().reasons,
        ["node(s) didn't match PersistentVolume's node affinity"]
    );
    // only on a and b: both conflict
    assert_eq!(
        message(&pod, &st, &nodes[..2]),
        "0/2 nodes are available: 2 node(s) didn't match PersistentVolume's node affinity. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    // a bound claim whose volume is gone: VolumeZone's PreFilter says so first
    let st = storage(vec![
        wffc(),
        bound(pvc("data", Some("local"), "1Gi"), "pv1"),
    ]);
    assert_eq!(
        message(&pod, &st, &nodes),
        format!("0/3 nodes are available: persistentvolume \"pv1\" not found.{NOT_HELPFUL_3}")
    );
}
