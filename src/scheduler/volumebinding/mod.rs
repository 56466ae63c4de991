//! VolumeBinding: a pod's PersistentVolumeClaims must be bound, or bindable on the node (k/k
//! `pkg/scheduler/framework/plugins/volumebinding` at v1.36.3: `volume_binding.go` and the
//! decisions of `binder.go`). Pure: the PreFilter ([`pre_filter`]) sorts the pod's claims into
//! bound ones, unbound WaitForFirstConsumer ones and unbound immediate ones (which reject the
//! pod), with the volumes the latter could take; the Filter ([`find_pod_volumes`]) checks a node:
//! bound volumes' node affinity, a matching available volume for each unbound claim
//! ([`matching`]), else dynamic provisioning by the claim's class. Reserve assumes the choice in
//! the [`crate::scheduler::storage`] caches ([`assume`]); the runner's PreBind writes it to the
//! API server and waits for the PV controller ([`prebind`]).
//!
//! Not implemented: storage capacity (`CSIStorageCapacity`, the `did not have enough free
//! storage` reason: every provisioner is taken to have room), the in-tree to CSI translation of
//! bound volumes' node affinity, and the scoring of StorageCapacityScoring (alpha, off).

pub mod assume;
pub mod matching;
pub mod prebind;

#[cfg(test)]
mod reserve_tests;
#[cfg(test)]
pub(crate) mod tests;

use super::filters::{Code, Rejection};
use super::storage::{
    annotation, claim_class, claim_request, claim_volume_name, is_delay_binding, is_fully_bound,
    pod_claims, pv_node_affinity_matches, pvc_not_found, topology_terms_match, volume_class,
    volume_is_for_pod, Storage, ANN_SELECTED_NODE, NOT_SUPPORTED_PROVISIONER,
};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The plugin's name.
pub const PLUGIN: &str = "VolumeBinding";
/// `ErrReasonBindConflict`: an unbound claim has no volume to bind and cannot be provisioned.
pub const ERR_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// `ErrReasonNodeConflict`: a bound volume's node affinity does not match the node.
pub const ERR_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// `ErrReasonNotEnoughSpace` (storage capacity; not produced here).
pub const ERR_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
/// `ErrReasonPVNotExist`: a bound claim's volume does not exist.
pub const ERR_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// The PreFilter's rejection of a pod with unbound claims of immediate binding.
pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// The PreFilter's state: the pod's claims sorted (`PodVolumeClaims`), the volumes the unbound
/// ones may take, and what the Filter reads of classes and bound volumes.
#[derive(Debug, Clone, Default)]
pub struct BindingState {
    /// Fully bound claims, with their volume (`None` when it does not exist).
    pub bound: Vec<(Arc<PersistentVolumeClaim>, Option<Arc<PersistentVolume>>)>,
    /// Unbound claims of WaitForFirstConsumer classes (`unboundClaimsDelayBinding`).
    pub delay: Vec<Arc<PersistentVolumeClaim>>,
    /// The volumes of the delay claims' classes, assumed versions included
    /// (`unboundVolumesDelayBinding`), by class name in name order.
    pub volumes_by_class: BTreeMap<String, Vec<Arc<PersistentVolume>>>,
    /// The classes of the delay claims that exist.
    pub classes: BTreeMap<String, Arc<StorageClass>>,
}

/// What the PreFilter decided.
#[derive(Debug, Clone)]
pub enum PreFilter {
    /// The pod has no claim (`Skip`).
    Skip,
    /// The pod cannot be scheduled now.
    Reject(Rejection),
    /// Something is wrong that the pod's own data does not explain (`fwk.AsStatus(err)`): the
    /// attempt fails with this error.
    Error(String),
    Proceed(BindingState),
}

fn reject(msg: String) -> PreFilter {
    PreFilter::Reject(Rejection {
        plugin: PLUGIN,
        code: Code::UnschedulableAndUnresolvable,
        reasons: vec![msg],
    })
}

/// `VolumeBinding.PreFilter`: `podHasPVCs` (each claim exists, is not lost, is not being deleted,
/// and a generic ephemeral volume's claim belongs to the pod), then `GetPodVolumeClaims` over the
/// assume cache; unbound claims that bind immediately (no class, a missing class, an Immediate
/// class, or pre-bound to a volume by name) reject the pod until the PV controller binds them.
pub fn pre_filter(pod: &Pod, storage: &Storage) -> PreFilter {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
    let claims = pod_claims(pod);
    if claims.is_empty() {
        return PreFilter::Skip;
    }
    for c in &claims {
        let Some(pvc) = storage.pvc_api(namespace, &c.claim) else {
            return reject(if c.ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim {:?}",
                    c.claim
                )
            } else {
                pvc_not_found(&c.claim)
            });
        };
        if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return reject(format!(
                "persistentvolumeclaim {:?} bound to non-existent persistentvolume {:?}",
                c.claim,
                claim_volume_name(&pvc)
            ));
        }
        if pvc.metadata.deletion_timestamp.is_some() {
            return reject(format!(
                "persistentvolumeclaim {:?} is being deleted",
                c.claim
            ));
        }
        if c.ephemeral {
            if let Err(e) = volume_is_for_pod(pod, &pvc) {
                return reject(e);
            }
        }
    }
    let mut st = BindingState::default();
    let mut immediate = false;
    for c in &claims {
        let Some(pvc) = storage.pvc(namespace, &c.claim) else {
            return PreFilter::Error(format!(
                "error getting PVC \"{namespace}/{}\": {}",
                c.claim,
                super::storage::pvc_not_found(&c.claim)
            ));
        };
        if c.ephemeral {
            if let Err(e) = volume_is_for_pod(pod, &pvc) {
                return PreFilter::Error(e);
            }
        }
        if is_fully_bound(&pvc) {
            let pv = storage.pvs.get(claim_volume_name(&pvc));
            st.bound.push((pvc, pv));
            continue;
        }
        match is_delay_binding(&pvc, &storage.classes) {
            Err(e) => return PreFilter::Error(e),
            Ok(true) if claim_volume_name(&pvc).is_empty() => st.delay.push(pvc),
            Ok(_) => immediate = true,
        }
    }
    if immediate {
        return reject(ERR_UNBOUND_IMMEDIATE.into());
    }
    for pvc in &st.delay {
        let class = claim_class(pvc);
        if st.volumes_by_class.contains_key(&class) {
            continue;
        }
        let volumes = storage
            .pvs
            .list()
            .filter(|pv| volume_class(pv) == class)
            .collect();
        st.volumes_by_class.insert(class.clone(), volumes);
        if let Some(c) = storage.classes.get(&class) {
            st.classes.insert(class, c.clone());
        }
    }
    PreFilter::Proceed(st)
}

/// A claim and the volume chosen for it (`BindingInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub pv: Arc<PersistentVolume>,
    pub pvc: Arc<PersistentVolumeClaim>,
}

/// What binding the pod's volumes on one node takes (`PodVolumes`): volumes to bind to claims,
/// and claims to provision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodVolumes {
    pub static_bindings: Vec<Binding>,
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

/// `checkVolumeProvisions`: whether each claim can be provisioned for the node (its class has a
/// provisioner and its `allowedTopologies` admit the node); `Err` for a claim without a class or
/// with a class that does not exist.
fn check_provisions(
    st: &BindingState,
    claims: &[Arc<PersistentVolumeClaim>],
    node: &Node,
) -> Result<Option<Vec<Arc<PersistentVolumeClaim>>>, String> {
    let mut out = Vec::new();
    for pvc in claims {
        let class_name = claim_class(pvc);
        if class_name.is_empty() {
            return Err(format!(
                "no class for claim \"{}/{}\"",
                pvc.metadata.namespace.as_deref().unwrap_or(""),
                pvc.metadata.name.as_deref().unwrap_or("")
            ));
        }
        let Some(class) = st.classes.get(&class_name) else {
            return Err(format!("failed to find storage class {class_name:?}"));
        };
        if class.provisioner.is_empty() || class.provisioner == NOT_SUPPORTED_PROVISIONER {
            return Ok(None);
        }
        if !topology_terms_match(
            class.allowed_topologies.as_deref(),
            node.metadata.labels.as_ref(),
        ) {
            return Ok(None);
        }
        out.push(pvc.clone());
    }
    Ok(Some(out))
}

/// `FindPodVolumes`: the volumes to bind and claims to provision for the pod on `node`, and the
/// reasons the node does not fit (in Go's order: node conflict, bind conflict, not enough space,
/// volume missing); `Err` when a claim to provision has no class or a missing class.
pub fn find_pod_volumes(
    st: &BindingState,
    node: &Node,
) -> Result<(PodVolumes, Vec<&'static str>), String> {
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    let mut out = PodVolumes::default();
    let (mut bound_ok, mut pvs_found, mut unbound_ok) = (true, true, true);
    // checkBoundClaims stops at the first claim that fails
    for (_, pv) in &st.bound {
        match pv {
            None => {
                pvs_found = false;
                break;
            }
            Some(pv) if !pv_node_affinity_matches(pv, node) => {
                bound_ok = false;
                break;
            }
            Some(_) => {}
        }
    }
    let reasons = |bound_ok: bool, unbound_ok: bool, pvs_found: bool| {
        let mut r = Vec::new();
        if !bound_ok {
            r.push(ERR_NODE_CONFLICT);
        }
        if !unbound_ok {
            r.push(ERR_BIND_CONFLICT);
        }
        if !pvs_found {
            r.push(ERR_PV_NOT_EXIST);
        }
        r
    };
    if !st.delay.is_empty() {
        let mut to_provision = Vec::new();
        let mut to_match = Vec::new();
        for pvc in &st.delay {
            match annotation(pvc.as_ref(), ANN_SELECTED_NODE) {
                Some(selected) if selected != node_name => {
                    // provisioning was already started for another node
                    return Ok((out, reasons(bound_ok, false, pvs_found)));
                }
                Some(_) => to_provision.push(pvc.clone()),
                None => to_match.push(pvc.clone()),
            }
        }
        if !to_match.is_empty() {
            // the smallest requests first, so that each gets the smallest volume that fits
            to_match.sort_by_key(|p| claim_request(p));
            let mut chosen = BTreeSet::new();
            let none = Vec::new();
            for pvc in to_match {
                let volumes = st.volumes_by_class.get(&claim_class(&pvc)).unwrap_or(&none);
                match matching::find_matching_volume(&pvc, volumes, node, &chosen)? {
                    Some(pv) => {
                        chosen.insert(pv.metadata.name.clone().unwrap_or_default());
                        out.static_bindings.push(Binding { pv, pvc });
                    }
                    None => {
                        unbound_ok = false;
                        to_provision.push(pvc);
                    }
                }
            }
        }
        if !to_provision.is_empty() {
            match check_provisions(st, &to_provision, node)? {
                Some(p) => {
                    unbound_ok = true;
                    out.provisions = p;
                }
                None => unbound_ok = false,
            }
        }
    }
    let r = reasons(bound_ok, unbound_ok, pvs_found);
    Ok((out, r))
}

/// `VolumeBinding.Filter` as a rejection: the reasons with `UnschedulableAndUnresolvable`, or an
/// error (`running "VolumeBinding" filter plugin: ...`).
pub fn filter(st: &BindingState, node: &Node) -> Option<Rejection> {
    match find_pod_volumes(st, node) {
        Ok((_, reasons)) if reasons.is_empty() => None,
        Ok((_, reasons)) => Some(Rejection {
            plugin: PLUGIN,
            code: Code::UnschedulableAndUnresolvable,
            reasons: reasons.into_iter().map(str::to_string).collect(),
        }),
        Err(e) => Some(Rejection {
            plugin: PLUGIN,
            code: Code::Error,
            reasons: vec![format!("running {PLUGIN:?} filter plugin: {e}")],
        }),
    }
}
