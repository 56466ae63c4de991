//! The storage objects the volume plugins read: PersistentVolumeClaims and PersistentVolumes in
//! assume caches (the API objects as the watches last saw them, with in-memory versions the
//! scheduler assumed on top), and StorageClasses; plus the small helpers of
//! `k8s.io/component-helpers/storage/volume` and `storage/ephemeral` that every volume plugin uses
//! (claim and volume class, PV node affinity, `IsDelayBindingMode`, the generic ephemeral claim
//! name). Mirrors k/k `pkg/scheduler/framework/plugins/volumebinding/{assume_cache.go,
//! passive_assume_cache.go}` at v1.36.3.

use super::affinity::NodeSelectorMatcher;
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, Pod, TopologySelectorTerm, Volume,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Resource;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// `pv.kubernetes.io/bind-completed`: the PV controller finished binding the claim.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `pv.kubernetes.io/bound-by-controller`: the binding was made by a controller (or the
/// scheduler), not pre-bound by the user.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// `volume.kubernetes.io/selected-node`: the node the scheduler chose for provisioning.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The provisioner of classes that cannot provision (`volume.NotSupportedProvisioner`).
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// The deprecated class annotation, read before `storageClassName`.
pub const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";
/// `volumeBindingMode: WaitForFirstConsumer`.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// An object in an assume cache: its key and resource version.
pub trait Cached: Resource + Clone {
    /// The resource, plural (`persistentvolumes`), for NotFound messages.
    const RESOURCE: &'static str;

    /// `namespace/name` for namespaced objects, `name` otherwise (`MetaNamespaceKeyFunc`).
    fn cache_key(&self) -> String {
        let m = self.meta();
        match m.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", m.name.as_deref().unwrap_or("")),
            _ => m.name.clone().unwrap_or_default(),
        }
    }

    fn resource_version(&self) -> &str {
        self.meta().resource_version.as_deref().unwrap_or("")
    }
}

impl Cached for PersistentVolume {
    const RESOURCE: &'static str = "persistentvolumes";
}
impl Cached for PersistentVolumeClaim {
    const RESOURCE: &'static str = "persistentvolumeclaims";
}

/// Objects as the watch sees them, and versions the scheduler assumed (`passiveAssumeCache`). An
/// assumed version is read in place of the watched one while both have the same resource
/// version; any watch event for the key with another version drops it (the API server's object
/// is newer).
#[derive(Debug, Clone)]
pub struct AssumeCache<T> {
    objects: BTreeMap<String, Arc<T>>,
    assumed: HashMap<String, Arc<T>>,
}

impl<T> Default for AssumeCache<T> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            assumed: HashMap::new(),
        }
    }
}

impl<T: Cached> AssumeCache<T> {
    /// Drops the assumed version of `key` unless the watched object has its resource version
    /// (`mayExpire`).
    fn may_expire(&mut self, key: &str) {
        let Some(a) = self.assumed.get(key) else {
            return;
        };
        let keep = self
            .objects
            .get(key)
            .is_some_and(|o| o.resource_version() == a.resource_version());
        if !keep {
            self.assumed.remove(key);
        }
    }

    /// A watch add or update; returns the previous watched object.
    pub fn set(&mut self, obj: T) -> Option<Arc<T>> {
        let key = obj.cache_key();
        let old = self.objects.insert(key.clone(), Arc::new(obj));
        self.may_expire(&key);
        old
    }

    /// A watch delete.
    pub fn remove(&mut self, key: &str) -> Option<Arc<T>> {
        let old = self.objects.remove(key);
        self.may_expire(key);
        old
    }

    /// After a re-list: forgets the objects the list did not return.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.objects.keys().filter(|k| !keep(k)).cloned().collect();
        for k in gone {
            self.remove(&k);
        }
    }

    /// The object, assumed version first (`Get`).
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        let obj = self.objects.get(key)?;
        match self.assumed.get(key) {
            Some(a) if a.resource_version() == obj.resource_version() => Some(a.clone()),
            _ => Some(obj.clone()),
        }
    }

    /// The watched object, never an assumed one (`GetAPIObj`).
    pub fn get_api(&self, key: &str) -> Option<Arc<T>> {
        self.objects.get(key).cloned()
    }

    /// Every object, assumed versions in place of the watched ones (`List` / `ByIndex`).
    pub fn list(&self) -> impl Iterator<Item = Arc<T>> + '_ {
        self.objects.keys().filter_map(|k| self.get(k))
    }

    /// Keeps `obj` as the in-memory version of its key (`Assume`); it must carry the watched
    /// object's resource version.
    pub fn assume(&mut self, obj: T) -> Result<(), String> {
        let key = obj.cache_key();
        let Some(stored) = self.objects.get(&key) else {
            return Err(format!("{} {key:?} not found", T::RESOURCE));
        };
        if stored.resource_version() != obj.resource_version() {
            return Err(format!(
                "{key:?} is out of sync (stored: {}, assume: {})",
                stored.resource_version(),
                obj.resource_version()
            ));
        }
        self.assumed.insert(key, Arc::new(obj));
        Ok(())
    }

    /// Drops the assumed version of `obj`'s key if it is `obj`'s resource version (`Restore`).
    pub fn restore(&mut self, obj: &T) {
        let key = obj.cache_key();
        if self
            .assumed
            .get(&key)
            .is_some_and(|a| a.resource_version() == obj.resource_version())
        {
            self.assumed.remove(&key);
        }
    }

    /// Whether `key` has an assumed version (tests, logs).
    pub fn is_assumed(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|o| self.assumed.get(key).is_some_and(|a| Arc::ptr_eq(a, &o)))
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// `persistentvolumeclaim "x" not found` (the PVC lister's NotFound error).
pub fn pvc_not_found(name: &str) -> String {
    format!("persistentvolumeclaim {name:?} not found")
}

/// `persistentvolume "x" not found` (the PV lister's NotFound error).
pub fn pv_not_found(name: &str) -> String {
    format!("persistentvolume {name:?} not found")
}

/// `storageclass.storage.k8s.io "x" not found` (the StorageClass lister's NotFound error).
pub fn class_not_found(name: &str) -> String {
    format!("storageclass.storage.k8s.io {name:?} not found")
}

/// What the volume plugins read: claims, volumes and classes.
#[derive(Debug, Clone, Default)]
pub struct Storage {
    pub pvcs: AssumeCache<PersistentVolumeClaim>,
    pub pvs: AssumeCache<PersistentVolume>,
    pub classes: BTreeMap<String, Arc<StorageClass>>,
}

impl Storage {
    /// A claim by namespace and name (assumed version first).
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.pvcs.get(&format!("{namespace}/{name}"))
    }

    /// A claim as the watch saw it (the listers of VolumeRestrictions and VolumeZone).
    pub fn pvc_api(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.pvcs.get_api(&format!("{namespace}/{name}"))
    }
}

/// How a pod volume refers to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// The pod volume's name.
    pub volume: String,
    /// The claim's name (for a generic ephemeral volume, `<pod>-<volume>`).
    pub claim: String,
    /// A generic ephemeral volume (`spec.volumes[].ephemeral`).
    pub ephemeral: bool,
}

/// `ephemeral.VolumeClaimName`: the claim of a generic ephemeral volume is `<pod>-<volume>`.
pub fn ephemeral_claim_name(pod_name: &str, volume: &Volume) -> String {
    format!("{pod_name}-{}", volume.name)
}

/// The claims of a pod's `persistentVolumeClaim` and `ephemeral` volumes, in volume order.
pub fn pod_claims(pod: &Pod) -> Vec<ClaimRef> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(p) = &v.persistent_volume_claim {
                Some(ClaimRef {
                    volume: v.name.clone(),
                    claim: p.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| ClaimRef {
                    volume: v.name.clone(),
                    claim: ephemeral_claim_name(name, v),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

/// `ephemeral.VolumeIsForPod`: the claim of a generic ephemeral volume must be controlled by the
/// pod; the error text is Go's.
pub fn volume_is_for_pod(pod: &Pod, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let pod_ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let pvc_ns = pvc.metadata.namespace.as_deref().unwrap_or("");
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or("");
    let controlled = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == pod_uid);
    if pvc_ns != pod_ns || !controlled {
        return Err(format!(
            "PVC {pvc_ns}/{} was not created for pod {pod_ns}/{} (pod is not owner)",
            pvc.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        ));
    }
    Ok(())
}

/// `GetPersistentVolumeClaimClass`: the beta annotation, else `spec.storageClassName`, else "".
pub fn claim_class(pvc: &PersistentVolumeClaim) -> String {
    if let Some(c) = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
    {
        return c.clone();
    }
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

/// `GetPersistentVolumeClass`: the beta annotation, else `spec.storageClassName`.
pub fn volume_class(pv: &PersistentVolume) -> String {
    if let Some(c) = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_STORAGE_CLASS_ANNOTATION))
    {
        return c.clone();
    }
    pv.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

/// `spec.volumeName`, "" when unset.
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("")
}

/// Whether the claim has annotation `key`.
pub fn has_annotation<T: Resource>(o: &T, key: &str) -> bool {
    o.meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
}

/// The claim's annotation `key`.
pub fn annotation<'a, T: Resource>(o: &'a T, key: &str) -> Option<&'a str> {
    o.meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// `isPVCFullyBound`: `spec.volumeName` set and the bind-completed annotation present.
pub fn is_fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(pvc).is_empty() && has_annotation(pvc, ANN_BIND_COMPLETED)
}

/// `volume.IsDelayBindingMode`: the claim's class exists and waits for the first consumer. A
/// claim without a class, or whose class does not exist, binds immediately; a class without a
/// binding mode is an error (the API server defaults it, so only hand-made objects lack it).
pub fn is_delay_binding(
    pvc: &PersistentVolumeClaim,
    classes: &BTreeMap<String, Arc<StorageClass>>,
) -> Result<bool, String> {
    let name = claim_class(pvc);
    if name.is_empty() {
        return Ok(false);
    }
    let Some(class) = classes.get(&name) else {
        return Ok(false);
    };
    match class.volume_binding_mode.as_deref() {
        None => Err(format!(
            "VolumeBindingMode not set for StorageClass {name:?}"
        )),
        Some(m) => Ok(m == WAIT_FOR_FIRST_CONSUMER),
    }
}

/// `volume.CheckNodeAffinity`: a PV without `spec.nodeAffinity.required` fits every node; with
/// it, one of its terms must match the node's labels (fields are not checked: Go matches against
/// a node that has only labels). An invalid term matches nothing.
pub fn pv_node_affinity_matches(pv: &PersistentVolume, node: &Node) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    NodeSelectorMatcher::new(required).matches_labels(node.metadata.labels.as_ref())
}

/// `v1helper.MatchTopologySelectorTerms`: no terms match every node; otherwise one non-empty term
/// whose every `matchLabelExpressions` key has one of its values on the node (a requirement
/// without values is invalid and fails its term).
pub fn topology_terms_match(
    terms: Option<&[TopologySelectorTerm]>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let terms = terms.unwrap_or_default();
    if terms.is_empty() {
        return true;
    }
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    terms.iter().any(|t| {
        let exprs = t.match_label_expressions.as_deref().unwrap_or_default();
        !exprs.is_empty()
            && exprs.iter().all(|e| {
                !e.values.is_empty()
                    && !e.key.is_empty()
                    && labels.get(&e.key).is_some_and(|v| e.values.contains(v))
            })
    })
}

/// A storage quantity (`resources.requests.storage`, `capacity.storage`) in milli-bytes; absent
/// or unparsable reads as zero (Go's zero `resource.Quantity`).
pub fn storage_milli(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i128 {
    q.and_then(crate::resource::quantity_milli).unwrap_or(0)
}

/// The claim's `resources.requests.storage`, milli-bytes.
pub fn claim_request(pvc: &PersistentVolumeClaim) -> i128 {
    storage_milli(
        pvc.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    )
}

/// The volume's `capacity.storage`, milli-bytes.
pub fn volume_capacity(pv: &PersistentVolume) -> i128 {
    storage_milli(
        pv.spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

/// Compares two resource versions as the API server's versioner does (integers); `Greater` when
/// `a` is newer. Unparsable versions compare equal.
pub fn compare_resource_versions(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => std::cmp::Ordering::Equal,
    }
}
