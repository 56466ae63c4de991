//! Reserve and Unreserve of VolumeBinding: the volumes chosen for a pod on its node are assumed
//! in the storage caches before the API server hears of them, so that the next pod does not take
//! the same volume or provision the same claim elsewhere; a failed binding reverts them
//! (`volumeBinder.AssumePodVolumes`, `RevertAssumedPodVolumes` at v1.36.3).

use super::matching::bind_volume_to_claim;
use super::{Binding, PodVolumes};
use crate::scheduler::storage::{
    is_fully_bound, pod_claims, volume_is_for_pod, Storage, ANN_SELECTED_NODE,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use std::sync::Arc;

/// What Reserve assumed for a pod: the volumes bound to its claims (as the PV updates will send
/// them) and the claims annotated for provisioning on the node. `all_bound` means there is
/// nothing to do (PreBind is skipped).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assumed {
    pub all_bound: bool,
    pub static_bindings: Vec<Binding>,
    pub provisions: Vec<Arc<PersistentVolumeClaim>>,
}

/// `arePodVolumesBound`: every claim of the pod is fully bound in the (assumed) cache.
pub fn pod_volumes_bound(pod: &Pod, storage: &Storage) -> bool {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    pod_claims(pod).iter().all(|c| {
        storage.pvc(ns, &c.claim).is_some_and(|pvc| {
            (!c.ephemeral || volume_is_for_pod(pod, &pvc).is_ok()) && is_fully_bound(&pvc)
        })
    })
}

/// `AssumePodVolumes`: each chosen volume with its `claimRef` set to the claim, and each claim to
/// provision with `volume.kubernetes.io/selected-node: <node>`, assumed in `storage`. On an error
/// (an object changed since the PreFilter read it) nothing stays assumed.
pub fn assume_pod_volumes(
    pod: &Pod,
    node: &str,
    volumes: &PodVolumes,
    storage: &mut Storage,
) -> Result<Assumed, String> {
    if pod_volumes_bound(pod, storage) {
        return Ok(Assumed {
            all_bound: true,
            ..Default::default()
        });
    }
    let mut out = Assumed::default();
    for b in &volumes.static_bindings {
        let (pv, dirty) = bind_volume_to_claim(&b.pv, &b.pvc);
        if dirty {
            if let Err(e) = storage.pvs.assume(pv.clone()) {
                revert(&out, storage);
                return Err(e);
            }
        }
        out.static_bindings.push(Binding {
            pv: Arc::new(pv),
            pvc: b.pvc.clone(),
        });
    }
    for pvc in &volumes.provisions {
        let mut claim = (**pvc).clone();
        claim
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_SELECTED_NODE.into(), node.to_string());
        if let Err(e) = storage.pvcs.assume(claim.clone()) {
            revert(&out, storage);
            return Err(e);
        }
        out.provisions.push(Arc::new(claim));
    }
    Ok(out)
}

/// `RevertAssumedPodVolumes`: drops what [`assume_pod_volumes`] assumed (an object the API server
/// already returned in a newer version is left to the watch, which replaces it).
pub fn revert(a: &Assumed, storage: &mut Storage) {
    for b in &a.static_bindings {
        storage.pvs.restore(&b.pv);
    }
    for pvc in &a.provisions {
        storage.pvcs.restore(pvc);
    }
}
