//! The volume plugins together: their PreFilters run once per attempt, in kube-scheduler's order
//! (VolumeRestrictions, VolumeBinding, VolumeZone; the first rejection or error stops), into a
//! [`PodVolumeState`] the runner puts on the [`SchedPod`]; their Filters are pure functions of that
//! state and a node, run after NodeResourcesFit as in kube-scheduler's default plugin order; and
//! the queueing hints that say which PersistentVolume, claim or StorageClass change may make a pod
//! they rejected schedulable (`EventsToRegister` of the three plugins).
//!
//! NodeVolumeLimits (the CSI attach limits of CSINode objects) is not implemented.

use super::filters::{Code, Rejection, SchedPod};
use super::nodeinfo::NodeInfo;
use super::storage::{pod_claims, Storage, WAIT_FOR_FIRST_CONSUMER};
use super::volume_restrictions::{self, RestrictionsState};
use super::volume_zone::{self, PvTopology};
use super::volumebinding::{self, BindingState};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use std::sync::Arc;

/// The volume plugins' PreFilter results for one attempt.
#[derive(Debug, Clone, Default)]
pub struct PodVolumeState {
    /// A PreFilter rejected the pod (or failed: [`Code::Error`], the message being the whole
    /// error, `running PreFilter plugin "VolumeBinding": ...`).
    pub rejection: Option<Rejection>,
    /// VolumeRestrictions' state; `None` when it skips.
    pub restrictions: Option<RestrictionsState>,
    /// VolumeBinding's state; `None` when the pod has no claim.
    pub binding: Option<BindingState>,
    /// VolumeZone's topologies; `None` when no bound volume has any.
    pub zone: Option<Vec<PvTopology>>,
}

fn error(plugin: &'static str, e: String) -> Rejection {
    Rejection {
        plugin,
        code: Code::Error,
        reasons: vec![format!("running PreFilter plugin {plugin:?}: {e}")],
    }
}

/// Runs the three PreFilters for `pod` (its [`SchedPod`] already built) over the storage caches
/// and the nodes of the snapshot; `None` when the pod has no claim and no disk volume (all three
/// skip).
pub fn pre_filter(
    pod: &Pod,
    sp: &SchedPod,
    storage: &Storage,
    nodes: &[&NodeInfo],
) -> Option<Arc<PodVolumeState>> {
    let has_disks = !sp.disk_volumes.is_empty();
    if !has_disks && pod_claims(pod).is_empty() {
        return None;
    }
    let mut st = PodVolumeState::default();
    let done = |mut st: PodVolumeState, r: Rejection| {
        st.rejection = Some(r);
        Some(Arc::new(st))
    };
    match volume_restrictions::pre_filter(pod, has_disks, storage, nodes) {
        volume_restrictions::PreFilter::Skip => {}
        volume_restrictions::PreFilter::Reject(r) => return done(st, r),
        volume_restrictions::PreFilter::Proceed(s) => st.restrictions = Some(s),
    }
    match volumebinding::pre_filter(pod, storage) {
        volumebinding::PreFilter::Skip => {}
        volumebinding::PreFilter::Reject(r) => return done(st, r),
        volumebinding::PreFilter::Error(e) => return done(st, error(volumebinding::PLUGIN, e)),
        volumebinding::PreFilter::Proceed(s) => st.binding = Some(s),
    }
    match volume_zone::pre_filter(pod, storage) {
        volume_zone::PreFilter::Skip => {}
        volume_zone::PreFilter::Reject(r) => return done(st, r),
        volume_zone::PreFilter::Proceed(t) => st.zone = Some(t),
    }
    Some(Arc::new(st))
}

/// The VolumeRestrictions Filter.
pub fn volume_restrictions(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    let st = pod.volumes.as_ref()?.restrictions.as_ref()?;
    volume_restrictions::filter(pod, st, ni)
}

/// The VolumeBinding Filter.
pub fn volume_binding(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    let st = pod.volumes.as_ref()?.binding.as_ref()?;
    volumebinding::filter(st, &ni.node)
}

/// The VolumeZone Filter.
pub fn volume_zone(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    let t = pod.volumes.as_ref()?.zone.as_ref()?;
    volume_zone::filter(t, ni)
}

/// A change to a storage object, as the watches see it (`None` old: created).
#[derive(Debug, Clone, Copy)]
pub enum StorageEvent<'a> {
    Claim(Option<&'a PersistentVolumeClaim>, &'a PersistentVolumeClaim),
    Volume(Option<&'a PersistentVolume>, &'a PersistentVolume),
    Class(Option<&'a StorageClass>, &'a StorageClass),
}

/// The queueing hints of the volume plugins: whether `ev` may make schedulable a pod that
/// `plugins` rejected (kube-scheduler's `isSchedulableAfter...` functions; a pod no plugin
/// rejected, e.g. after an error, is always worth retrying).
pub fn may_help(pod: &Pod, plugins: &[&'static str], ev: StorageEvent<'_>) -> bool {
    if plugins.is_empty() {
        return true;
    }
    let by = |p: &str| plugins.contains(&p);
    match ev {
        StorageEvent::Claim(old, pvc) => {
            if pvc.metadata.namespace != pod.metadata.namespace {
                return false;
            }
            let name = pvc.metadata.name.as_deref().unwrap_or("");
            let claims = pod_claims(pod);
            // VolumeBinding: the claim of a persistentVolumeClaim or ephemeral volume
            let any = claims.iter().any(|c| c.claim == name);
            // VolumeRestrictions (created only) and VolumeZone: persistentVolumeClaim volumes
            let direct = claims.iter().any(|c| !c.ephemeral && c.claim == name);
            (by(volumebinding::PLUGIN) && any)
                || (by(volume_restrictions::PLUGIN) && old.is_none() && direct)
                || (by(volume_zone::PLUGIN) && direct)
        }
        StorageEvent::Volume(old, pv) => {
            by(volumebinding::PLUGIN)
                || (by(volume_zone::PLUGIN)
                    && old.is_none_or(|o| {
                        volume_zone::pv_topologies(o) != volume_zone::pv_topologies(pv)
                    }))
        }
        StorageEvent::Class(old, class) => {
            let binding = match old {
                None => true,
                Some(o) => o.allowed_topologies != class.allowed_topologies,
            };
            let zone = old.is_none()
                && class.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER);
            (by(volumebinding::PLUGIN) && binding) || (by(volume_zone::PLUGIN) && zone)
        }
    }
}
