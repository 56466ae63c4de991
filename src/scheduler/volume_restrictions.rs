//! VolumeRestrictions: a pod may not share a ReadWriteOncePod claim with any placed pod, nor
//! mount a GCE PD, AWS EBS, iSCSI or Ceph RBD disk read-write that a pod on the node already
//! mounts (k/k `pkg/scheduler/framework/plugins/volumerestrictions` at v1.36.3). Pure: the
//! PreFilter reads the claims and counts the ReadWriteOncePod claims in use over the snapshot; the
//! Filter rejects with `Unschedulable`, which preemption may resolve by evicting the pod holding
//! the claim or the disk.

use super::filters::{Code, Rejection, SchedPod};
use super::nodeinfo::{NodeInfo, PodAccount};
use super::storage::{pvc_not_found, Storage};
use k8s_openapi::api::core::v1::{Pod, Volume};
use std::collections::{BTreeSet, HashMap};

/// The plugin's name.
pub const PLUGIN: &str = "VolumeRestrictions";
/// `ErrReasonDiskConflict`.
pub const ERR_DISK_CONFLICT: &str = "node(s) had no available disk";
/// `ErrReasonReadWriteOncePodConflict`.
pub const ERR_RWOP_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";
/// The access mode that allows a single pod in the whole cluster.
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// `needsRestrictionsCheck`: the volume kinds whose same-disk conflicts are checked.
pub fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// The pod's volumes [`needs_restrictions_check`] selects (usually none).
pub fn disk_volumes(pod: &Pod) -> Vec<Volume> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter(|v| needs_restrictions_check(v))
        .cloned()
        .collect()
}

/// The claim names of a pod's `persistentVolumeClaim` volumes (not generic ephemeral ones), as
/// `NodeInfo.PVCRefCounts` counts them.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect()
}

/// `isVolumeConflict`: `v` and one of `existing` are the same disk, and not both read-only
/// (EBS: any two mounts conflict).
pub fn is_volume_conflict(v: &Volume, existing: &[Volume]) -> bool {
    existing.iter().any(|e| {
        if let (Some(a), Some(b)) = (&v.gce_persistent_disk, &e.gce_persistent_disk) {
            if a.pd_name == b.pd_name && !(a.read_only == Some(true) && b.read_only == Some(true)) {
                return true;
            }
        }
        if let (Some(a), Some(b)) = (&v.aws_elastic_block_store, &e.aws_elastic_block_store) {
            if a.volume_id == b.volume_id {
                return true;
            }
        }
        if let (Some(a), Some(b)) = (&v.iscsi, &e.iscsi) {
            if a.iqn == b.iqn && !(a.read_only == Some(true) && b.read_only == Some(true)) {
                return true;
            }
        }
        if let (Some(a), Some(b)) = (&v.rbd, &e.rbd) {
            let overlap = a.monitors.iter().any(|m| b.monitors.contains(m));
            if overlap
                && a.pool == b.pool
                && a.image == b.image
                && !(a.read_only == Some(true) && b.read_only == Some(true))
            {
                return true;
            }
        }
        false
    })
}

/// The PreFilter's state (`preFilterState`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RestrictionsState {
    /// Namespace of the pod (the claims are in it).
    pub namespace: String,
    /// Names of the pod's claims with the ReadWriteOncePod access mode.
    pub rwop_claims: BTreeSet<String>,
    /// How many of them placed pods use (`conflictingPVCRefCount`).
    pub conflicts: usize,
    /// References to those claims by the pods of each node when the state was made, so that a
    /// node with pods removed or added (preemption, nominated pods) adjusts the count as
    /// `AddPod`/`RemovePod` do.
    pub refs_by_node: HashMap<String, usize>,
}

impl RestrictionsState {
    fn refs_of(&self, a: &PodAccount) -> usize {
        if a.namespace != self.namespace {
            return 0;
        }
        a.pvcs
            .iter()
            .filter(|c| self.rwop_claims.contains(*c))
            .count()
    }

    fn refs_on(&self, ni: &NodeInfo) -> usize {
        if self.rwop_claims.is_empty() {
            return 0;
        }
        ni.pods().map(|(_, a)| self.refs_of(a)).sum()
    }
}

/// What the PreFilter decided.
#[derive(Debug, Clone, PartialEq)]
pub enum PreFilter {
    /// Nothing to check (`Skip`).
    Skip,
    /// The pod cannot be scheduled (a claim is missing).
    Reject(Rejection),
    Proceed(RestrictionsState),
}

/// `VolumeRestrictions.PreFilter`: every `persistentVolumeClaim` volume's claim must exist
/// (`persistentvolumeclaim "x" not found`, UnschedulableAndUnresolvable); the ReadWriteOncePod
/// ones are counted against the pods of `nodes`.
pub fn pre_filter(pod: &Pod, has_disks: bool, storage: &Storage, nodes: &[&NodeInfo]) -> PreFilter {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut rwop = BTreeSet::new();
    for name in claim_names(pod) {
        let Some(pvc) = storage.pvc_api(&namespace, &name) else {
            return PreFilter::Reject(Rejection {
                plugin: PLUGIN,
                code: Code::UnschedulableAndUnresolvable,
                reasons: vec![pvc_not_found(&name)],
            });
        };
        let modes = pvc.spec.as_ref().and_then(|s| s.access_modes.as_ref());
        if modes.is_some_and(|m| m.iter().any(|m| m == READ_WRITE_ONCE_POD)) {
            rwop.insert(name);
        }
    }
    let mut st = RestrictionsState {
        namespace,
        rwop_claims: rwop,
        ..Default::default()
    };
    if !st.rwop_claims.is_empty() {
        let mut used = BTreeSet::new();
        for ni in nodes {
            let mut refs = 0;
            for (_, a) in ni.pods() {
                if a.namespace != st.namespace {
                    continue;
                }
                for c in &a.pvcs {
                    if st.rwop_claims.contains(c) {
                        used.insert(c.clone());
                        refs += 1;
                    }
                }
            }
            if refs > 0 {
                st.refs_by_node.insert(ni.name.clone(), refs);
            }
        }
        st.conflicts = used.len();
    }
    if !has_disks && st.conflicts == 0 {
        return PreFilter::Skip;
    }
    PreFilter::Proceed(st)
}

/// `VolumeRestrictions.Filter`: a same-disk conflict with a pod on the node, then a
/// ReadWriteOncePod claim in use anywhere (counted with `ni`'s pods as they are now).
pub fn filter(pod: &SchedPod, st: &RestrictionsState, ni: &NodeInfo) -> Option<Rejection> {
    let disk_conflict = pod
        .disk_volumes
        .iter()
        .any(|v| ni.pods().any(|(_, a)| is_volume_conflict(v, &a.disks)));
    if disk_conflict {
        return Some(Rejection {
            plugin: PLUGIN,
            code: Code::Unschedulable,
            reasons: vec![ERR_DISK_CONFLICT.into()],
        });
    }
    let before = st.refs_by_node.get(&ni.name).copied().unwrap_or(0) as isize;
    let conflicts = st.conflicts as isize + st.refs_on(ni) as isize - before;
    (conflicts > 0).then(|| Rejection {
        plugin: PLUGIN,
        code: Code::Unschedulable,
        reasons: vec![ERR_RWOP_CONFLICT.into()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::schedule_one::{preemption_victims, schedule_fresh};
    use crate::scheduler::volumebinding::tests::{bound, node, pod_with, pv, pvc, sched, storage};
    use serde_json::json;

    fn rwop_claim() -> serde_json::Value {
        let mut c = bound(pvc("data", None, "1Gi"), "pv1");
        c["spec"]["accessModes"] = json!(["ReadWriteOncePod"]);
        c
    }

    fn nodes_with_holder(priority: i32) -> Vec<NodeInfo> {
        let mut nodes = vec![
            node("a", json!({})),
            node("b", json!({})),
            node("c", json!({})),
        ];
        let mut holder = pod_with("holder", &["data"]);
        holder.spec.as_mut().unwrap().priority = Some(priority);
        nodes[1].add_pod("uid-holder", PodAccount::of(&holder));
        nodes
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_rejects_every_node() {
        let nodes = nodes_with_holder(0);
        let mut v = pv("pv1", "", "1Gi", None);
        v["spec"]["accessModes"] = json!(["ReadWriteOncePod"]);
        let st = storage(vec![rwop_claim(), v]);
        let pod = pod_with("p", &["data"]);
        let sp = sched(&pod, &st, &nodes);
        for ni in &nodes {
            let r = crate::scheduler::volumes::volume_restrictions(&sp, ni).unwrap();
            assert_eq!(
                (r.code, r.reasons.as_slice()),
                (
                    Code::Unschedulable,
                    [ERR_RWOP_CONFLICT.to_string()].as_slice()
                )
            );
        }
        assert_eq!(
            schedule_fresh(&sp, &nodes).unwrap_err().message(),
            "0/3 nodes are available: 3 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
        );
        // a more important pod preempts the holder, on the holder's node
        let nodes = nodes_with_holder(0);
        let mut vip = pod_with("vip", &["data"]);
        vip.spec.as_mut().unwrap().priority = Some(1000);
        let sp = sched(&vip, &st, &nodes);
        assert_eq!(
            preemption_victims(&sp, &nodes),
            ("b".to_string(), vec!["holder".to_string()])
        );
        // a claim without the mode, or one nobody uses, is no conflict
        let st = storage(vec![
            bound(pvc("data", None, "1Gi"), "pv1"),
            pv("pv1", "", "1Gi", None),
        ]);
        assert!(schedule_fresh(&sched(&pod, &st, &nodes), &nodes).is_ok());
        let st2 = storage(vec![rwop_claim(), pv("pv1", "", "1Gi", None)]);
        let empty = [node("a", json!({}))];
        assert!(schedule_fresh(&sched(&pod, &st2, &empty), &empty).is_ok());
    }

    #[test]
    fn the_same_disk_read_write_conflicts_on_a_node() {
        let disk = |ro: bool| {
            serde_json::from_value::<Pod>(
                json!({"metadata": {"name": "d", "namespace": "ns", "uid": "u"},
                "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "v",
                    "gcePersistentDisk": {"pdName": "disk1", "readOnly": ro}}]}}),
            )
            .unwrap()
        };
        let mut nodes = vec![node("a", json!({})), node("b", json!({}))];
        nodes[0].add_pod("u", PodAccount::of(&disk(false)));
        let st = crate::scheduler::storage::Storage::default();
        let mut p = disk(false);
        p.metadata.uid = Some("p".into());
        assert_eq!(
            schedule_fresh(&sched(&p, &st, &nodes), &nodes)
                .unwrap()
                .node,
            "b"
        );
        assert_eq!(
            schedule_fresh(&sched(&p, &st, &nodes[..1]), &nodes[..1]).unwrap_err().message(),
            "0/1 nodes are available: 1 node(s) had no available disk. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        );
        // both read-only: no conflict
        let mut ro = vec![node("a", json!({}))];
        ro[0].add_pod("u", PodAccount::of(&disk(true)));
        let mut q = disk(true);
        q.metadata.uid = Some("q".into());
        assert!(schedule_fresh(&sched(&q, &st, &ro), &ro).is_ok());
    }
}
