//! VolumeZone: a bound PersistentVolume's zone and region labels (`topology.kubernetes.io/zone`,
//! `topology.kubernetes.io/region` and the deprecated `failure-domain.beta.kubernetes.io` ones)
//! must match the node's (k/k `pkg/scheduler/framework/plugins/volumezone` at v1.36.3). Pure: the
//! PreFilter collects the topologies of the pod's bound volumes; the Filter compares them with a
//! node's labels.

use super::filters::{Code, Rejection};
use super::nodeinfo::NodeInfo;
use super::storage::{
    claim_class, claim_volume_name, class_not_found, pv_not_found, pvc_not_found, Storage,
    WAIT_FOR_FIRST_CONSUMER,
};
use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use std::collections::BTreeSet;

/// The plugin's name.
pub const PLUGIN: &str = "VolumeZone";
/// `ErrReasonConflict`.
pub const ERR_CONFLICT: &str = "node(s) had no available volume zone";

pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
pub const LABEL_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
pub const LABEL_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";

/// The labels compared, in Go's order (`topologyLabels`).
pub const TOPOLOGY_LABELS: [&str; 4] =
    [LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION];

/// A multi-zone label value separates its zones with this (`LabelMultiZoneDelimiter`).
pub const MULTI_ZONE_DELIMITER: &str = "__";

/// One topology label of a volume (`pvTopology`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvTopology {
    pub pv: String,
    pub key: String,
    pub values: BTreeSet<String>,
}

/// `translateToGALabel`: the GA label of a beta one.
fn ga_label(key: &str) -> &str {
    match key {
        LABEL_BETA_REGION => LABEL_REGION,
        LABEL_BETA_ZONE => LABEL_ZONE,
        k => k,
    }
}

/// `getPVTopologies`: the volume's topology labels, multi-zone values split on `__` (a value with
/// an empty zone is ignored, as Go logs and skips it).
pub fn pv_topologies(pv: &PersistentVolume) -> Vec<PvTopology> {
    let labels = pv.metadata.labels.as_ref();
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|key| {
            let value = labels?.get(*key)?;
            let zones: Vec<&str> = value.split(MULTI_ZONE_DELIMITER).map(str::trim).collect();
            if zones.iter().any(|z| z.is_empty()) {
                return None;
            }
            Some(PvTopology {
                pv: pv.metadata.name.clone().unwrap_or_default(),
                key: key.to_string(),
                values: zones.into_iter().map(str::to_string).collect(),
            })
        })
        .collect()
}

/// What the PreFilter decided.
#[derive(Debug, Clone, PartialEq)]
pub enum PreFilter {
    Skip,
    Reject(Rejection),
    Proceed(Vec<PvTopology>),
}

fn reject(msg: String) -> PreFilter {
    PreFilter::Reject(Rejection {
        plugin: PLUGIN,
        code: Code::UnschedulableAndUnresolvable,
        reasons: vec![msg],
    })
}

/// `VolumeZone.PreFilter` (`getPVbyPod`): for each `persistentVolumeClaim` volume, the bound
/// volume's topologies; an unbound claim of a WaitForFirstConsumer class is skipped, any other
/// unbound claim, or a missing claim, class or volume, rejects the pod.
pub fn pre_filter(pod: &Pod, storage: &Storage) -> PreFilter {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    let mut out = Vec::new();
    let claims = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref());
    for c in claims {
        if c.claim_name.is_empty() {
            return reject("PersistentVolumeClaim had no name".into());
        }
        let Some(pvc) = storage.pvc_api(namespace, &c.claim_name) else {
            return reject(pvc_not_found(&c.claim_name));
        };
        let pv_name = claim_volume_name(&pvc);
        if pv_name.is_empty() {
            let class_name = claim_class(&pvc);
            if class_name.is_empty() {
                return reject("PersistentVolumeClaim had no pv name and storageClass name".into());
            }
            let Some(class) = storage.classes.get(&class_name) else {
                return reject(class_not_found(&class_name));
            };
            match class.volume_binding_mode.as_deref() {
                None => {
                    return reject(format!(
                        "VolumeBindingMode not set for StorageClass {class_name:?}"
                    ))
                }
                Some(WAIT_FOR_FIRST_CONSUMER) => continue,
                Some(_) => return reject("PersistentVolume had no name".into()),
            }
        }
        let Some(pv) = storage.pvs.get_api(pv_name) else {
            return reject(pv_not_found(pv_name));
        };
        out.extend(pv_topologies(&pv));
    }
    if out.is_empty() {
        PreFilter::Skip
    } else {
        PreFilter::Proceed(out)
    }
}

/// `VolumeZone.Filter`: a node without any topology label takes any volume; otherwise each volume
/// topology's key (or its GA form) must be on the node with one of the volume's values.
pub fn filter(topologies: &[PvTopology], ni: &NodeInfo) -> Option<Rejection> {
    let labels = ni.labels();
    if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
        return None;
    }
    let fits = topologies.iter().all(|t| {
        labels
            .get(&t.key)
            .or_else(|| labels.get(ga_label(&t.key)))
            .is_some_and(|v| t.values.contains(v))
    });
    (!fits).then(|| Rejection {
        plugin: PLUGIN,
        code: Code::UnschedulableAndUnresolvable,
        reasons: vec![ERR_CONFLICT.into()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::schedule_one::schedule_fresh;
    use crate::scheduler::volumebinding::tests::{
        bound, class, node, pod_with, pv, pvc, sched, storage,
    };
    use serde_json::json;

    fn zoned_pv(labels: serde_json::Value) -> serde_json::Value {
        let mut v = pv("pv1", "", "1Gi", None);
        v["metadata"]["labels"] = labels;
        v["status"]["phase"] = "Bound".into();
        v
    }

    #[test]
    fn a_bound_volume_keeps_the_pod_in_its_zone() {
        let nodes = [
            node(
                "a",
                json!({"topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r"}),
            ),
            node(
                "b",
                json!({"topology.kubernetes.io/zone": "z2", "topology.kubernetes.io/region": "r"}),
            ),
            node(
                "c",
                json!({"topology.kubernetes.io/zone": "z3", "topology.kubernetes.io/region": "r"}),
            ),
        ];
        let pod = pod_with("p", &["data"]);
        let st = storage(vec![
            bound(pvc("data", None, "1Gi"), "pv1"),
            zoned_pv(
                json!({"topology.kubernetes.io/zone": "z2", "topology.kubernetes.io/region": "r"}),
            ),
        ]);
        let sp = sched(&pod, &st, &nodes);
        assert_eq!(schedule_fresh(&sp, &nodes).unwrap().node, "b");
        let st = storage(vec![
            bound(pvc("data", None, "1Gi"), "pv1"),
            zoned_pv(json!({"topology.kubernetes.io/zone": "z9"})),
        ]);
        assert_eq!(
            schedule_fresh(&sched(&pod, &st, &nodes), &nodes).unwrap_err().message(),
            "0/3 nodes are available: 3 node(s) had no available volume zone. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn zones_beta_labels_multi_zone_values_and_unlabelled_nodes() {
        let topo = |labels: serde_json::Value| {
            let v: PersistentVolume = serde_json::from_value(zoned_pv(labels)).unwrap();
            pv_topologies(&v)
        };
        // a beta label on the volume matches the GA label of the node
        let t = topo(json!({"failure-domain.beta.kubernetes.io/zone": "z1__z2"}));
        assert_eq!(t[0].values.len(), 2);
        assert!(filter(&t, &node("a", json!({"topology.kubernetes.io/zone": "z2"}))).is_none());
        assert_eq!(
            filter(&t, &node("a", json!({"topology.kubernetes.io/zone": "z3"})))
                .unwrap()
                .reasons,
            [ERR_CONFLICT]
        );
        // a node without any zone or region label takes any volume
        assert!(filter(&t, &node("a", json!({"kubernetes.io/hostname": "a"}))).is_none());
        // a node with a region but no zone label lacks the volume's zone
        assert!(filter(
            &t,
            &node("a", json!({"topology.kubernetes.io/region": "r"}))
        )
        .is_some());
        // an empty zone in the value: the label is ignored
        assert!(topo(json!({"topology.kubernetes.io/zone": "z1__"})).is_empty());
    }

    #[test]
    fn unbound_claims_skip_or_reject_as_in_go() {
        let pod = pod_with("p", &["data"]);
        let wffc = class(
            "local",
            "kubernetes.io/no-provisioner",
            Some("WaitForFirstConsumer"),
            json!({}),
        );
        let st = storage(vec![wffc, pvc("data", Some("local"), "1Gi")]);
        assert_eq!(pre_filter(&pod, &st), PreFilter::Skip);
        let imm = class("fast", "x", Some("Immediate"), json!({}));
        let st = storage(vec![imm, pvc("data", Some("fast"), "1Gi")]);
        let PreFilter::Reject(r) = pre_filter(&pod, &st) else {
            panic!()
        };
        assert_eq!(r.reasons, ["PersistentVolume had no name"]);
        let st = storage(vec![pvc("data", None, "1Gi")]);
        let PreFilter::Reject(r) = pre_filter(&pod, &st) else {
            panic!()
        };
        assert_eq!(
            r.reasons,
            ["PersistentVolumeClaim had no pv name and storageClass name"]
        );
    }
}
