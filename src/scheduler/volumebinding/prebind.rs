//! PreBind of VolumeBinding (`volumeBinder.BindPodVolumes` at v1.36.3): the assumed volumes and
//! claims are written to the API server (`bindAPIUpdate`: an update of each PersistentVolume with
//! its new `claimRef`, then of each claim with its selected-node annotation), then, once a second
//! for up to the bind timeout, [`check_bindings`] reads the watched objects until the PV
//! controller (or a provisioner) has bound every claim. The decision is pure; the two API writes
//! are the only I/O here.

use super::assume::Assumed;
use super::Binding;
use crate::scheduler::storage::{
    annotation, claim_volume_name, compare_resource_versions, is_fully_bound,
    pv_node_affinity_matches, Cached, Storage, ANN_SELECTED_NODE,
};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, PostParams};
use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// kube-scheduler's default `VolumeBindingArgs.bindTimeoutSeconds`.
pub const DEFAULT_BIND_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the bindings are checked (`wait.PollUntilContextTimeout` interval).
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// What a wait that reached the bind timeout fails with (`context.DeadlineExceeded`).
pub const ERR_DEADLINE: &str = "context deadline exceeded";

/// Where the binding stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Every claim is bound.
    Done,
    /// Not yet.
    Wait,
    /// The binding cannot complete (Go's error text); the pod is retried.
    Fail(String),
}

/// `checkBindings`: against the watched objects (never the assumed ones), whether the pod's
/// claims are fully bound on `node_name`; `node` is the node as the cache has it and
/// `pod_exists` whether the pod is still there.
pub fn check_bindings(
    a: &Assumed,
    node_name: &str,
    node: Option<&Node>,
    pod_name: &str,
    pod_exists: bool,
    storage: &Storage,
) -> Check {
    let Some(node) = node else {
        return Check::Fail(format!(
            "failed to get node {node_name:?}: node {node_name:?} not found"
        ));
    };
    if !pod_exists {
        return Check::Fail(format!(
            "pod does not exist any more: pod {pod_name:?} not found"
        ));
    }
    for Binding { pv: want, pvc } in &a.static_bindings {
        let Some(pv) = storage.pvs.get_api(&want.cache_key()) else {
            return Check::Fail(format!(
                "failed to check binding: persistentvolumes {:?} not found",
                want.cache_key()
            ));
        };
        let Some(claim) = storage.pvcs.get_api(&pvc.cache_key()) else {
            return Check::Fail(format!(
                "failed to check binding: persistentvolumeclaims {:?} not found",
                pvc.cache_key()
            ));
        };
        // the update we sent has not come back through the watch yet
        if compare_resource_versions(want.resource_version(), pv.resource_version())
            == Ordering::Greater
        {
            return Check::Wait;
        }
        if !pv_node_affinity_matches(&pv, node) {
            return Check::Fail(affinity_mismatch(&pv, node_name));
        }
        let reset = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .is_none_or(|r| r.uid.as_deref().unwrap_or("").is_empty());
        if reset {
            return Check::Fail(format!("ClaimRef got reset for pv {:?}", want.cache_key()));
        }
        if !is_fully_bound(&claim) {
            return Check::Wait;
        }
    }
    for want in &a.provisions {
        let Some(claim) = storage.pvcs.get_api(&want.cache_key()) else {
            return Check::Fail(format!(
                "failed to check provisioning pvc: persistentvolumeclaims {:?} not found",
                want.cache_key()
            ));
        };
        if compare_resource_versions(want.resource_version(), claim.resource_version())
            == Ordering::Greater
        {
            return Check::Wait;
        }
        let name = claim.metadata.name.as_deref().unwrap_or("");
        if claim.metadata.annotations.is_none() {
            return Check::Fail(format!("selectedNode annotation reset for PVC {name:?}"));
        }
        if annotation(claim.as_ref(), ANN_SELECTED_NODE) != Some(node_name) {
            // the provisioner gave up and removed the annotation
            return Check::Fail(format!("provisioning failed for PVC {name:?}"));
        }
        let volume = claim_volume_name(&claim);
        if !volume.is_empty() {
            let Some(pv) = storage.pvs.get_api(volume) else {
                return Check::Wait;
            };
            if !pv_node_affinity_matches(&pv, node) {
                return Check::Fail(affinity_mismatch(&pv, node_name));
            }
        }
        if !is_fully_bound(&claim) {
            return Check::Wait;
        }
    }
    Check::Done
}

fn affinity_mismatch(pv: &PersistentVolume, node: &str) -> String {
    format!(
        "pv {:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms",
        pv.metadata.name.as_deref().unwrap_or("")
    )
}

/// The text of an API error as Go's `err.Error()` gives it: the Status message.
pub fn api_error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        e => e.to_string(),
    }
}

/// `bindAPIUpdate`: updates each volume, then each claim, replacing the assumed objects in `a`
/// with what the API server returned (their new resource versions are what
/// [`check_bindings`] waits for). Stops at the first failure with its message.
pub async fn update_api(client: &kube::Client, a: &mut Assumed) -> Result<(), String> {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for b in a.static_bindings.iter_mut() {
        let name = b.pv.metadata.name.clone().unwrap_or_default();
        let updated = pvs
            .replace(&name, &PostParams::default(), &b.pv)
            .await
            .map_err(|e| api_error_message(&e))?;
        tracing::info!(pv = %name, pvc = %b.pvc.cache_key(),
            "updated PersistentVolume with claim; waiting for binding to complete");
        b.pv = Arc::new(updated);
    }
    for claim in a.provisions.iter_mut() {
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        let updated = api
            .replace(&name, &PostParams::default(), claim)
            .await
            .map_err(|e| api_error_message(&e))?;
        tracing::info!(pvc = %format!("{ns}/{name}"), "claim annotated with the selected node for provisioning");
        *claim = Arc::new(updated);
    }
    Ok(())
}
