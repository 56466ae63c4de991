//! Reserve, Unreserve and PreBind of VolumeBinding in the assume caches, and the queueing hints
//! of storage events.

use super::assume::{assume_pod_volumes, revert};
use super::prebind::{check_bindings, Check};
use super::tests::*;
use super::*;
use crate::scheduler::storage::Storage;
use crate::scheduler::volumes::{may_help, StorageEvent};
use serde_json::json;

#[test]
fn two_pods_in_a_row_get_different_volumes_and_unreserve_releases() {
    let nodes = three_nodes();
    let mut st = storage(vec![
        wffc(),
        pvc("c1", Some("local"), "1Gi"),
        pvc("c2", Some("local"), "1Gi"),
        pv("pv1", "local", "1Gi", None),
        pv("pv2", "local", "2Gi", None),
    ]);
    let reserve = |pod: &Pod, st: &mut Storage| {
        let b = binding_state(pod, st);
        let (v, reasons) = find_pod_volumes(&b, &nodes[0].node).unwrap();
        assert!(reasons.is_empty());
        assume_pod_volumes(pod, "a", &v, st).unwrap()
    };
    let p1 = pod_with("p1", &["c1"]);
    let a1 = reserve(&p1, &mut st);
    assert!(!a1.all_bound);
    let chosen = &a1.static_bindings[0].pv;
    assert_eq!(chosen.metadata.name.as_deref(), Some("pv1"));
    let r = chosen.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(
        (
            r.kind.as_deref(),
            r.api_version.as_deref(),
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.uid.as_deref(),
            r.resource_version.as_deref()
        ),
        (
            Some("PersistentVolumeClaim"),
            Some("v1"),
            Some("ns"),
            Some("c1"),
            Some("uid-c1"),
            Some("5")
        )
    );
    assert_eq!(
        chosen.metadata.annotations.as_ref().unwrap()["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    assert!(st.pvs.is_assumed("pv1"));
    // the next pod does not see pv1 as available
    let p2 = pod_with("p2", &["c2"]);
    let a2 = reserve(&p2, &mut st);
    assert_eq!(
        a2.static_bindings[0].pv.metadata.name.as_deref(),
        Some("pv2")
    );
    // Unreserve of the first pod: pv1 is free again
    revert(&a1, &mut st);
    assert!(!st.pvs.is_assumed("pv1"));
    revert(&a2, &mut st);
    let a3 = reserve(&p2, &mut st);
    assert_eq!(
        a3.static_bindings[0].pv.metadata.name.as_deref(),
        Some("pv1")
    );
}

#[test]
fn reserve_of_a_claim_to_provision_assumes_the_selected_node() {
    let mut st = storage(vec![
        class(
            "csi",
            "example.com/csi",
            Some("WaitForFirstConsumer"),
            json!({}),
        ),
        pvc("data", Some("csi"), "1Gi"),
    ]);
    let pod = pod_with("p", &["data"]);
    let b = binding_state(&pod, &st);
    let (v, _) = find_pod_volumes(&b, &three_nodes()[1].node).unwrap();
    let a = assume_pod_volumes(&pod, "b", &v, &mut st).unwrap();
    assert_eq!(
        a.provisions[0].metadata.annotations.as_ref().unwrap()
            ["volume.kubernetes.io/selected-node"],
        "b"
    );
    let seen = st.pvc("ns", "data").unwrap();
    assert_eq!(
        crate::scheduler::storage::annotation(seen.as_ref(), "volume.kubernetes.io/selected-node"),
        Some("b")
    );
    // the watch sees the claim updated: the assumed version goes
    let mut updated = pvc("data", Some("csi"), "1Gi");
    updated["metadata"]["resourceVersion"] = "6".into();
    st.pvcs.set(serde_json::from_value(updated).unwrap());
    assert!(!st.pvcs.is_assumed("ns/data"));
    // an object changed since it was read cannot be assumed
    let mut stale: PersistentVolumeClaim =
        serde_json::from_value(pvc("data", Some("csi"), "1Gi")).unwrap();
    stale.metadata.resource_version = Some("5".into());
    assert_eq!(
        st.pvcs.assume(stale),
        Err("\"ns/data\" is out of sync (stored: 6, assume: 5)".into())
    );
}

#[test]
fn pods_whose_claims_are_all_bound_need_no_binding() {
    let mut st = storage(vec![
        bound(pvc("data", None, "1Gi"), "pv1"),
        pv("pv1", "", "1Gi", None),
    ]);
    let pod = pod_with("p", &["data"]);
    let b = binding_state(&pod, &st);
    assert_eq!(b.bound.len(), 1);
    let (v, reasons) = find_pod_volumes(&b, &three_nodes()[0].node).unwrap();
    assert!(reasons.is_empty());
    assert!(
        assume_pod_volumes(&pod, "a", &v, &mut st)
            .unwrap()
            .all_bound
    );
}

#[test]
fn prebind_waits_for_the_pv_controller_and_fails_as_kube_scheduler_does() {
    let nodes = three_nodes();
    let mut st = storage(vec![
        wffc(),
        pvc("data", Some("local"), "1Gi"),
        pv("pv1", "local", "1Gi", Some("a")),
    ]);
    let pod = pod_with("p", &["data"]);
    let b = binding_state(&pod, &st);
    let (v, _) = find_pod_volumes(&b, &nodes[0].node).unwrap();
    let mut a = assume_pod_volumes(&pod, "a", &v, &mut st).unwrap();
    // what the API server returned for the PV update
    let mut sent: PersistentVolume = (*a.static_bindings[0].pv).clone();
    sent.metadata.resource_version = Some("11".into());
    a.static_bindings[0].pv = Arc::new(sent.clone());
    let node = Some(&*nodes[0].node);
    let check = |st: &Storage| check_bindings(&a, "a", node, "p", true, st);
    assert_eq!(check(&st), Check::Wait, "the update has not come back yet");
    st.pvs.set(sent.clone());
    assert_eq!(check(&st), Check::Wait, "the claim is not bound yet");
    st.pvcs
        .set(serde_json::from_value(bound(pvc("data", Some("local"), "1Gi"), "pv1")).unwrap());
    assert_eq!(check(&st), Check::Done);
    // the PV controller dropped the claimRef
    let mut reset = sent.clone();
    reset.metadata.resource_version = Some("12".into());
    reset.spec.as_mut().unwrap().claim_ref = None;
    st.pvs.set(reset);
    assert_eq!(
        check(&st),
        Check::Fail("ClaimRef got reset for pv \"pv1\"".into())
    );
    assert_eq!(
        check_bindings(&a, "a", node, "p", false, &st),
        Check::Fail("pod does not exist any more: pod \"p\" not found".into())
    );
    assert_eq!(
        check_bindings(&a, "a", None, "p", true, &st),
        Check::Fail("failed to get node \"a\": node \"a\" not found".into())
    );
}

#[test]
fn prebind_of_a_provisioned_claim_fails_when_the_provisioner_gives_up() {
    let mut st = storage(vec![
        class(
            "csi",
            "example.com/csi",
            Some("WaitForFirstConsumer"),
            json!({}),
        ),
        pvc("data", Some("csi"), "1Gi"),
    ]);
    let nodes = three_nodes();
    let pod = pod_with("p", &["data"]);
    let b = binding_state(&pod, &st);
    let (v, _) = find_pod_volumes(&b, &nodes[0].node).unwrap();
    let a = assume_pod_volumes(&pod, "a", &v, &mut st).unwrap();
    let node = Some(&*nodes[0].node);
    // the watch has the claim as it was (resource version 5 = what was sent): annotations gone
    assert_eq!(
        check_bindings(&a, "a", node, "p", true, &st),
        Check::Fail("selectedNode annotation reset for PVC \"data\"".into())
    );
    let mut other = pvc("data", Some("csi"), "1Gi");
    other["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "b"});
    st.pvcs.set(serde_json::from_value(other).unwrap());
    assert_eq!(
        check_bindings(&a, "a", node, "p", true, &st),
        Check::Fail("provisioning failed for PVC \"data\"".into())
    );
    let mut done = bound(pvc("data", Some("csi"), "1Gi"), "pvc-123");
    done["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = "a".into();
    st.pvcs.set(serde_json::from_value(done).unwrap());
    assert_eq!(
        check_bindings(&a, "a", node, "p", true, &st),
        Check::Wait,
        "PV not seen yet"
    );
    st.pvs
        .set(serde_json::from_value(pv("pvc-123", "csi", "1Gi", Some("a"))).unwrap());
    assert_eq!(check_bindings(&a, "a", node, "p", true, &st), Check::Done);
}

#[test]
fn storage_events_requeue_only_the_pods_they_may_help() {
    let pod = pod_with("p", &["data"]);
    let claim: PersistentVolumeClaim =
        serde_json::from_value(pvc("data", Some("local"), "1Gi")).unwrap();
    let mut foreign = claim.clone();
    foreign.metadata.namespace = Some("other".into());
    let unrelated: PersistentVolumeClaim =
        serde_json::from_value(pvc("x", Some("local"), "1Gi")).unwrap();
    let vb = [PLUGIN];
    assert!(may_help(&pod, &vb, StorageEvent::Claim(None, &claim)));
    assert!(may_help(
        &pod,
        &vb,
        StorageEvent::Claim(Some(&claim), &claim)
    ));
    assert!(!may_help(&pod, &vb, StorageEvent::Claim(None, &foreign)));
    assert!(!may_help(&pod, &vb, StorageEvent::Claim(None, &unrelated)));
    let nr = ["NodeResourcesFit"];
    assert!(
        !may_help(&pod, &nr, StorageEvent::Claim(None, &claim)),
        "not rejected by a volume plugin"
    );
    assert!(
        may_help(&pod, &[], StorageEvent::Claim(None, &unrelated)),
        "no rejector known"
    );
    // VolumeRestrictions: created claims only
    let vr = ["VolumeRestrictions"];
    assert!(may_help(&pod, &vr, StorageEvent::Claim(None, &claim)));
    assert!(!may_help(
        &pod,
        &vr,
        StorageEvent::Claim(Some(&claim), &claim)
    ));
    // volumes: any change for VolumeBinding; topology changes for VolumeZone
    let v1: PersistentVolume = serde_json::from_value(pv("pv", "local", "1Gi", None)).unwrap();
    let mut v2 = v1.clone();
    v2.metadata.resource_version = Some("11".into());
    assert!(may_help(&pod, &vb, StorageEvent::Volume(Some(&v1), &v2)));
    let vz = ["VolumeZone"];
    assert!(may_help(&pod, &vz, StorageEvent::Volume(None, &v1)));
    assert!(!may_help(&pod, &vz, StorageEvent::Volume(Some(&v1), &v2)));
    v2.metadata.labels =
        Some([("topology.kubernetes.io/zone".to_string(), "z1".to_string())].into());
    assert!(may_help(&pod, &vz, StorageEvent::Volume(Some(&v1), &v2)));
    // classes: created, or allowedTopologies changed
    let c1: StorageClass = serde_json::from_value(wffc()).unwrap();
    let mut c2 = c1.clone();
    c2.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    assert!(may_help(&pod, &vb, StorageEvent::Class(None, &c1)));
    assert!(!may_help(&pod, &vb, StorageEvent::Class(Some(&c1), &c2)));
    c2.allowed_topologies = Some(vec![Default::default()]);
    assert!(may_help(&pod, &vb, StorageEvent::Class(Some(&c1), &c2)));
}

#[test]
fn pods_without_claims_skip_the_volume_plugins() {
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "e", "emptyDir": {}}]}}))
    .unwrap();
    let sp = sched(&pod, &Storage::default(), &three_nodes());
    assert!(sp.volumes.is_none());
}
