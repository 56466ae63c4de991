//! Which PersistentVolume a claim can take, as the PV controller and the scheduler both decide it
//! (`k8s.io/component-helpers/storage/volume` `FindMatchingVolume`, `CheckVolumeModeMismatches`,
//! `CheckAccessModes`, `IsVolumeBoundToClaim`, `GetBindVolumeToClaim` at v0.36.3, with
//! VolumeAttributesClass on as in v1.36).

use crate::scheduler::preemption::selector_matches;
use crate::scheduler::storage::{
    claim_class, claim_request, has_annotation, pv_node_affinity_matches, volume_capacity,
    volume_class, ANN_BOUND_BY_CONTROLLER,
};
use k8s_openapi::api::core::v1::{
    Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeSpec,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// `IsVolumeBoundToClaim`: the PV's `claimRef` names the claim (and, when it carries a UID,
/// that UID).
pub fn is_volume_bound_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name.as_deref() != pvc.metadata.name.as_deref()
        || r.namespace.as_deref() != pvc.metadata.namespace.as_deref()
    {
        return false;
    }
    let uid = r.uid.as_deref().unwrap_or("");
    uid.is_empty() || Some(uid) == pvc.metadata.uid.as_deref()
}

/// `CheckVolumeModeMismatches`: the claim's and the volume's `volumeMode` differ (unset reads as
/// `Filesystem`).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaimSpec, pv: &PersistentVolumeSpec) -> bool {
    let c = claim.volume_mode.as_deref().unwrap_or("Filesystem");
    let v = pv.volume_mode.as_deref().unwrap_or("Filesystem");
    c != v
}

/// `CheckAccessModes`: the volume offers every access mode the claim asks for.
pub fn access_modes_contained(pvc: &PersistentVolumeClaim, pv: &PersistentVolume) -> bool {
    let offered: BTreeSet<&str> = pv
        .spec
        .iter()
        .flat_map(|s| s.access_modes.iter().flatten())
        .map(String::as_str)
        .collect();
    pvc.spec
        .iter()
        .flat_map(|s| s.access_modes.iter().flatten())
        .all(|m| offered.contains(m.as_str()))
}

/// The claim's `spec.selector` against the volume's labels: `Ok(true)` when the claim has no
/// selector or an empty one (`labels.Everything()`), an error when it is invalid.
fn claim_selector_matches(
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> Result<bool, String> {
    let Some(sel) = pvc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return Ok(true);
    };
    let empty_sel = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
    if empty_sel {
        return Ok(true);
    }
    let labels = pv.metadata.labels.clone().unwrap_or_default();
    selector_matches(sel, &labels).ok_or_else(|| {
        format!(
            "error creating internal label selector for claim: {}/{}: invalid label selector",
            pvc.metadata.namespace.as_deref().unwrap_or(""),
            pvc.metadata.name.as_deref().unwrap_or("")
        )
    })
}

/// `FindMatchingVolume` on the scheduler's path (a node given, delayed binding): a volume
/// pre-bound to the claim wins outright (or, if its node affinity does not fit the node, nothing
/// matches); otherwise the smallest Available volume of the claim's class that is big enough, has
/// the claim's volume mode, attributes class and access modes, matches its selector, is not being
/// deleted, is not claimed by another claim, is not in `excluded`, and whose node affinity fits
/// the node. Ties go to the first volume in `volumes`.
pub fn find_matching_volume(
    pvc: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: &Node,
    excluded: &BTreeSet<String>,
) -> Result<Option<Arc<PersistentVolume>>, String> {
    let requested = claim_request(pvc);
    let requested_class = claim_class(pvc);
    let default_claim_spec = PersistentVolumeClaimSpec::default();
    let claim_spec = pvc.spec.as_ref().unwrap_or(&default_claim_spec);
    let claim_vac = claim_spec
        .volume_attributes_class_name
        .as_deref()
        .unwrap_or("");
    let default_pv_spec = PersistentVolumeSpec::default();
    let mut smallest: Option<(&Arc<PersistentVolume>, i128)> = None;
    for pv in volumes {
        let name = pv.metadata.name.as_deref().unwrap_or("");
        if excluded.contains(name) {
            continue;
        }
        let spec = pv.spec.as_ref().unwrap_or(&default_pv_spec);
        let bound_to_claim = is_volume_bound_to_claim(pv, pvc);
        if spec.claim_ref.is_some() && !bound_to_claim {
            continue;
        }
        let capacity = volume_capacity(pv);
        if capacity < requested {
            continue;
        }
        if volume_mode_mismatch(claim_spec, spec) {
            continue;
        }
        if spec.volume_attributes_class_name.as_deref().unwrap_or("") != claim_vac {
            continue;
        }
        if pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity_ok = pv_node_affinity_matches(pv, node);
        if bound_to_claim {
            return Ok(affinity_ok.then(|| pv.clone()));
        }
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Available") {
            continue;
        }
        if !claim_selector_matches(pvc, pv)? {
            continue;
        }
        if volume_class(pv) != requested_class {
            continue;
        }
        if !affinity_ok || !access_modes_contained(pvc, pv) {
            continue;
        }
        if smallest.is_none_or(|(_, q)| q > capacity) {
            smallest = Some((pv, capacity));
        }
    }
    Ok(smallest.map(|(pv, _)| pv.clone()))
}

/// `GetBindVolumeToClaim`: the volume with `claimRef` set to the claim (kind, API version,
/// namespace, name, UID and resource version, as `reference.GetReference` makes it) and the
/// bound-by-controller annotation unless the user pre-bound it; and whether anything changed.
pub fn bind_volume_to_claim(
    pv: &PersistentVolume,
    pvc: &PersistentVolumeClaim,
) -> (PersistentVolume, bool) {
    let set_bound_by_controller = !is_volume_bound_to_claim(pv, pvc);
    let mut out = pv.clone();
    let mut dirty = false;
    let current = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
    let same = current.is_some_and(|r| {
        r.name == pvc.metadata.name
            && r.namespace == pvc.metadata.namespace
            && r.uid.as_deref().unwrap_or("") == pvc.metadata.uid.as_deref().unwrap_or("")
    });
    if !same {
        out.spec.get_or_insert_with(Default::default).claim_ref = Some(ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            api_version: Some("v1".into()),
            namespace: pvc.metadata.namespace.clone(),
            name: pvc.metadata.name.clone(),
            uid: pvc.metadata.uid.clone(),
            resource_version: pvc.metadata.resource_version.clone(),
            ..Default::default()
        });
        dirty = true;
    }
    if set_bound_by_controller && !has_annotation(&out, ANN_BOUND_BY_CONTROLLER) {
        out.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
        dirty = true;
    }
    (out, dirty)
}
