//! In-place pod resize, the allocation side (k/k `pkg/kubelet/allocation`, KEP-1287, GA in
//! 1.35): the resources the kubelet has *allocated* to each container (what it admitted, and
//! what the pod worker runs the container with), the resources it has *actuated* (what the
//! runtime was last told), and the decision on a resize request (a `spec.containers[].resources`
//! change made through the pod's `resize` subresource).
//!
//! - A new pod is allocated its spec's resources when it is admitted.
//! - A resize whose new requests fit next to the other pods' allocations is accepted: the
//!   allocation follows the spec, a `ResizeStarted` event is recorded, and the pod worker
//!   actuates it ([`crate::kuberuntime::resize`]). One that does not fit stays
//!   `PodResizePending` with reason `Deferred` (retried when other pods go away) and the
//!   predicate's message, with a `ResizeDeferred` Warning event; the pod keeps running with its
//!   allocation.
//! - Everything the pod worker does (container configs, the pod cgroup, status) reads the pod
//!   with its allocation applied ([`pod_with_allocation`], k/k `UpdatePodFromAllocation`).
//!
//! Both records are checkpointed in the root directory (`allocated_pods_state`,
//! `actuated_pods_state`, as the Go kubelet names its files), so a restart of deckhand neither
//! re-decides a resize nor re-applies one.

use crate::resource;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodCondition, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Condition type of a resize the kubelet has not accepted (yet).
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
/// Condition type of an accepted resize the runtime has not fully applied.
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";
/// `PodResizePending` reason: it does not fit now; retried later (k/k `PodReasonDeferred`).
pub const REASON_DEFERRED: &str = "Deferred";
/// `PodResizePending` reason: it can never fit on this node (k/k `PodReasonInfeasible`).
pub const REASON_INFEASIBLE: &str = "Infeasible";
/// `PodResizeInProgress` reason when actuation failed (k/k `PodReasonError`).
pub const REASON_ERROR: &str = "Error";

/// Checkpoint file of the allocated resources, in the root directory.
pub const ALLOCATED_CHECKPOINT: &str = "allocated_pods_state";
/// Checkpoint file of the actuated resources, in the root directory.
pub const ACTUATED_CHECKPOINT: &str = "actuated_pods_state";

/// The resources of one pod's resizable containers, by container name (k/k
/// `state.PodResourceInfo`, without pod-level resources).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodResourceInfo {
    /// Container name → its resources.
    pub containers: BTreeMap<String, ResourceRequirements>,
}

/// The containers whose resources can be resized in place: the regular ones and the sidecars
/// (init containers with `restartPolicy: Always`) (k/k `IsResizableContainer`).
pub fn resizable_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let regular = spec.map(|s| s.containers.iter()).into_iter().flatten();
    inits.chain(regular)
}

/// The allocation a pod gets from its spec (k/k `allocationFromPod`).
pub fn allocation_from_pod(pod: &Pod) -> PodResourceInfo {
    PodResourceInfo {
        containers: resizable_containers(pod)
            .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
            .collect(),
    }
}

fn quantities_equal(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter().all(|(k, q)| {
            b.get(k).is_some_and(|p| {
                resource::quantity_milli(q).is_some()
                    && resource::quantity_milli(q) == resource::quantity_milli(p)
            })
        })
}

/// Whether two resource requirements are the same amounts (`1` cpu equals `1000m`; an absent
/// list equals an empty one), as `apiequality.Semantic.DeepEqual` compares them.
pub fn resources_equal(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    quantities_equal(a.requests.as_ref(), b.requests.as_ref())
        && quantities_equal(a.limits.as_ref(), b.limits.as_ref())
}

/// `pod` with each resizable container's resources replaced by its allocation, and whether
/// anything differed (k/k `updatePodFromAllocation`). A container the allocation does not
/// list keeps its spec's resources.
pub fn pod_with_allocation(pod: &Pod, alloc: &PodResourceInfo) -> (Pod, bool) {
    let mut out = pod.clone();
    let mut changed = false;
    if let Some(spec) = out.spec.as_mut() {
        let all = spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut());
        for c in all {
            let Some(a) = alloc.containers.get(&c.name) else {
                continue;
            };
            if !resources_equal(&c.resources.clone().unwrap_or_default(), a) {
                c.resources = Some(a.clone());
                changed = true;
            }
        }
    }
    (out, changed)
}

/// What the kubelet decides on a pod's resources (k/k `handlePodResourcesResize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeDecision {
    /// The spec asks for what is allocated: nothing to decide.
    Unchanged,
    /// The new resources fit: allocate them.
    Accepted,
    /// Not now (`Deferred`) or never (`Infeasible`), with the reason and message of the
    /// `PodResizePending` condition.
    Pending {
        /// `Deferred` or `Infeasible`.
        reason: String,
        /// Why (the admission predicate's message).
        message: String,
    },
}

/// Decides a resize of `desired` (the pod as the API server has it now) whose containers are
/// allocated `alloc`, against `node` and the other pods' allocations `others` (`desired` itself
/// is skipped if listed): accepted when the pod, with the new resources, passes the kubelet's
/// admission next to them ([`crate::pod::admission::admit`], k/k `canAdmitPod` with
/// `ResizeOperation`); otherwise `Deferred` with the predicate's message (k/k
/// `SetPodResizePendingCondition`: every reason but `Infeasible` becomes `Deferred`).
pub fn decide_resize(
    desired: &Pod,
    alloc: &PodResourceInfo,
    node: &Node,
    others: &[Pod],
) -> ResizeDecision {
    if !pod_with_allocation(desired, alloc).1 {
        return ResizeDecision::Unchanged;
    }
    match crate::pod::admission::admit(desired, node, others) {
        Ok(()) => ResizeDecision::Accepted,
        Err(r) => ResizeDecision::Pending {
            reason: if r.reason == REASON_INFEASIBLE {
                REASON_INFEASIBLE.into()
            } else {
                REASON_DEFERRED.into()
            },
            message: r.message,
        },
    }
}

/// A resize condition the kubelet reports (`PodResizePending` or `PodResizeInProgress`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeCondition {
    /// `PodResizePending` or `PodResizeInProgress`.
    pub type_: &'static str,
    /// `Deferred`, `Infeasible`, `Error`, or empty (in progress).
    pub reason: String,
    /// Why, or the actuation error.
    pub message: String,
    /// The pod generation the condition is about.
    pub observed_generation: Option<i64>,
}

impl ResizeCondition {
    /// The pod condition, status `True`; its `lastTransitionTime` is kept from the same
    /// condition in `old` when reason, message and generation did not change (k/k
    /// `updatedPodResizeCondition`), else `now`.
    pub fn to_pod_condition(&self, old: &[PodCondition], now: &Time) -> PodCondition {
        let reason = (!self.reason.is_empty()).then(|| self.reason.clone());
        let message = (!self.message.is_empty()).then(|| self.message.clone());
        let same = old.iter().find(|c| {
            c.type_ == self.type_
                && c.status == "True"
                && c.reason == reason
                && c.message == message
                && c.observed_generation == self.observed_generation
        });
        let t = same
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        PodCondition {
            type_: self.type_.into(),
            status: "True".into(),
            reason,
            message,
            last_probe_time: Some(t.clone()),
            last_transition_time: Some(t),
            observed_generation: self.observed_generation,
        }
    }
}

#[derive(Serialize)]
struct ContainerAllocation<'a> {
    name: &'a str,
    resources: ResourceRequirements,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PodResourceSummary<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    init_containers: Vec<ContainerAllocation<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    containers: Vec<ContainerAllocation<'a>>,
    generation: i64,
    #[serde(skip_serializing_if = "str::is_empty")]
    error: &'a str,
}

/// The message of the resize events (k/k `events/resize.go` `podResizeMessage`):
/// `<prefix>: {"initContainers":[...],"containers":[{"name":..,"resources":{..}}],
/// "generation":N}`, with `"error"` when given; `prefix` is e.g. `Pod resize started`.
pub fn resize_event_message(prefix: &str, pod: &Pod, error: &str) -> String {
    let spec = pod.spec.as_ref();
    fn list(cs: Option<&Vec<Container>>) -> Vec<ContainerAllocation<'_>> {
        cs.into_iter()
            .flatten()
            .map(|c| ContainerAllocation {
                name: &c.name,
                resources: c.resources.clone().unwrap_or_default(),
            })
            .collect()
    }
    let summary = PodResourceSummary {
        init_containers: list(spec.and_then(|s| s.init_containers.as_ref())),
        containers: list(spec.map(|s| &s.containers)),
        generation: pod.metadata.generation.unwrap_or(0),
        error,
    };
    match serde_json::to_string(&summary) {
        Ok(j) => format!("{prefix}: {j}"),
        Err(_) => prefix.to_string(),
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    pods: BTreeMap<String, PodResourceInfo>,
}

#[derive(Debug, Default)]
struct State {
    dir: Option<PathBuf>,
    allocated: BTreeMap<String, PodResourceInfo>,
    actuated: BTreeMap<String, PodResourceInfo>,
}

fn read_checkpoint(path: &Path) -> BTreeMap<String, PodResourceInfo> {
    match std::fs::read(path) {
        Ok(b) => match serde_json::from_slice::<Checkpoint>(&b) {
            Ok(c) => c.pods,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring a malformed resource checkpoint");
                BTreeMap::new()
            }
        },
        Err(_) => BTreeMap::new(),
    }
}

fn write_checkpoint(dir: &Path, name: &str, pods: &BTreeMap<String, PodResourceInfo>) {
    let body = match serde_json::to_vec(&Checkpoint { pods: pods.clone() }) {
        Ok(b) => b,
        Err(_) => return,
    };
    let tmp = dir.join(format!(".{name}.tmp"));
    let res = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, body))
        .and_then(|_| std::fs::rename(&tmp, dir.join(name)));
    if let Err(e) = res {
        tracing::warn!(file = name, error = %e, "writing the resource checkpoint failed");
    }
}

/// The allocated and actuated resources of every pod on this node (k/k allocation
/// `manager` and the runtime's `actuatedState`), shared by the dispatcher and the pod workers.
/// Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct AllocationManager {
    state: Arc<Mutex<State>>,
}

impl AllocationManager {
    /// A manager checkpointing into `dir` (the kubelet root directory), starting from the
    /// checkpoints found there; `None` keeps everything in memory (tests).
    pub fn load(dir: Option<&Path>) -> Self {
        let (allocated, actuated) = match dir {
            Some(d) => (
                read_checkpoint(&d.join(ALLOCATED_CHECKPOINT)),
                read_checkpoint(&d.join(ACTUATED_CHECKPOINT)),
            ),
            None => Default::default(),
        };
        Self {
            state: Arc::new(Mutex::new(State {
                dir: dir.map(Path::to_path_buf),
                allocated,
                actuated,
            })),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// The allocation of pod `uid`, if it was admitted.
    pub fn allocated(&self, uid: &str) -> Option<PodResourceInfo> {
        self.with(|s| s.allocated.get(uid).cloned())
    }

    /// Records (and checkpoints) the allocation of pod `uid`.
    pub fn set_allocated(&self, uid: &str, info: PodResourceInfo) {
        self.with(|s| {
            if s.allocated.get(uid) == Some(&info) {
                return;
            }
            s.allocated.insert(uid.to_string(), info);
            if let Some(d) = &s.dir {
                write_checkpoint(d, ALLOCATED_CHECKPOINT, &s.allocated);
            }
        })
    }

    /// The resources the runtime was last given for container `name` of pod `uid`.
    pub fn actuated(&self, uid: &str, name: &str) -> Option<ResourceRequirements> {
        self.with(|s| s.actuated.get(uid)?.containers.get(name).cloned())
    }

    /// Records (and checkpoints) what the runtime was given for container `name` of pod `uid`
    /// (at its creation, or by an in-place update).
    pub fn set_actuated(&self, uid: &str, name: &str, r: ResourceRequirements) {
        self.with(|s| {
            let e = s.actuated.entry(uid.to_string()).or_default();
            if e.containers.get(name) == Some(&r) {
                return;
            }
            e.containers.insert(name.to_string(), r);
            if let Some(d) = &s.dir {
                write_checkpoint(d, ACTUATED_CHECKPOINT, &s.actuated);
            }
        })
    }

    /// Forgets pod `uid` (its worker is done).
    pub fn remove_pod(&self, uid: &str) {
        self.with(|s| {
            let a = s.allocated.remove(uid).is_some();
            let b = s.actuated.remove(uid).is_some();
            if let Some(d) = &s.dir {
                if a {
                    write_checkpoint(d, ALLOCATED_CHECKPOINT, &s.allocated);
                }
                if b {
                    write_checkpoint(d, ACTUATED_CHECKPOINT, &s.actuated);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;

    fn rr(req: &[(&str, &str)], lim: &[(&str, &str)]) -> ResourceRequirements {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect()
            })
        };
        ResourceRequirements {
            requests: m(req),
            limits: m(lim),
            ..Default::default()
        }
    }

    fn pod(uid: &str, cpu: &str, mem: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "generation": 2},
            "spec": {
                "initContainers": [
                    {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "5m"}}},
                    {"name": "side", "image": "busybox", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "5m"}}}
                ],
                "containers": [{"name": "c1", "image": "busybox",
                    "resources": {"requests": {"cpu": cpu, "memory": mem},
                                  "limits": {"cpu": cpu, "memory": mem}}}]
            }
        }))
        .unwrap()
    }

    fn node(cpu: &str, mem: &str) -> Node {
        Node {
            status: Some(NodeStatus {
                allocatable: Some(
                    [
                        ("cpu".to_string(), Quantity(cpu.into())),
                        ("memory".to_string(), Quantity(mem.into())),
                        ("pods".to_string(), Quantity("110".into())),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_allocation_covers_regular_containers_and_sidecars_only() {
        let a = allocation_from_pod(&pod("u", "20m", "35Mi"));
        assert_eq!(
            a.containers.keys().collect::<Vec<_>>(),
            vec!["c1", "side"],
            "a plain init container is not resizable"
        );
        assert_eq!(
            a.containers["c1"],
            rr(
                &[("cpu", "20m"), ("memory", "35Mi")],
                &[("cpu", "20m"), ("memory", "35Mi")]
            )
        );
    }

    #[test]
    fn equal_amounts_in_other_units_are_the_same_resources() {
        let cases = [
            (rr(&[("cpu", "1")], &[]), rr(&[("cpu", "1000m")], &[]), true),
            (rr(&[], &[]), ResourceRequirements::default(), true),
            (
                rr(&[("memory", "1Gi")], &[]),
                rr(&[("memory", "1024Mi")], &[]),
                true,
            ),
            (rr(&[("cpu", "2m")], &[]), rr(&[("cpu", "1m")], &[]), false),
            (rr(&[("cpu", "1")], &[]), rr(&[], &[("cpu", "1")]), false),
            (
                rr(&[("cpu", "1")], &[]),
                rr(&[("cpu", "1"), ("memory", "1")], &[]),
                false,
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(resources_equal(&a, &b), want, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn the_pod_worker_sees_the_allocation_not_the_desired_spec() {
        let desired = pod("u", "25m", "40Mi");
        let alloc = allocation_from_pod(&pod("u", "20m", "35Mi"));
        let (p, changed) = pod_with_allocation(&desired, &alloc);
        assert!(changed);
        assert_eq!(
            p.spec.as_ref().unwrap().containers[0].resources,
            Some(alloc.containers["c1"].clone())
        );
        let (_, changed) = pod_with_allocation(&desired, &allocation_from_pod(&desired));
        assert!(!changed);
    }

    #[test]
    fn a_resize_is_accepted_when_it_fits_next_to_the_other_pods_and_deferred_otherwise() {
        let alloc = allocation_from_pod(&pod("u", "20m", "35Mi"));
        let other = pod("o", "900m", "100Mi");
        let cases = [
            ("same resources", pod("u", "20m", "35Mi"), ResizeDecision::Unchanged),
            ("fits", pod("u", "50m", "40Mi"), ResizeDecision::Accepted),
            (
                "does not fit next to the other pod",
                pod("u", "200m", "40Mi"),
                ResizeDecision::Pending {
                    reason: REASON_DEFERRED.into(),
                    message: "Node didn't have enough resource: cpu, requested: 205, used: 905, capacity: 1000".into(),
                },
            ),
        ];
        for (case, desired, want) in cases {
            let got = decide_resize(&desired, &alloc, &node("1", "1Gi"), &[other.clone()]);
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn the_resize_event_message_is_the_go_kubelets_resource_summary() {
        let mut p = pod("u", "25m", "40Mi");
        p.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(
            resize_event_message("Pod resize started", &p, ""),
            r#"Pod resize started: {"containers":[{"name":"c1","resources":{"limits":{"cpu":"25m","memory":"40Mi"},"requests":{"cpu":"25m","memory":"40Mi"}}}],"generation":2}"#
        );
        assert!(resize_event_message("Pod resize error", &p, "boom")
            .ends_with(r#""generation":2,"error":"boom"}"#));
    }

    #[test]
    fn a_resize_condition_keeps_its_transition_time_while_unchanged() {
        let c = ResizeCondition {
            type_: POD_RESIZE_PENDING,
            reason: REASON_DEFERRED.into(),
            message: "m".into(),
            observed_generation: Some(2),
        };
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(100).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(200).unwrap());
        let first = c.to_pod_condition(&[], &t0);
        assert_eq!(first.status, "True");
        assert_eq!(first.reason.as_deref(), Some("Deferred"));
        assert_eq!(first.observed_generation, Some(2));
        let again = c.to_pod_condition(std::slice::from_ref(&first), &t1);
        assert_eq!(again.last_transition_time, Some(t0));
        let newer = ResizeCondition {
            observed_generation: Some(3),
            ..c
        };
        assert_eq!(
            newer.to_pod_condition(&[first], &t1).last_transition_time,
            Some(t1)
        );
    }

    #[test]
    fn allocations_survive_a_restart_through_the_checkpoints() {
        let dir =
            std::env::temp_dir().join(format!("deckhand-alloc-{:08x}", rand::random::<u32>()));
        let m = AllocationManager::load(Some(&dir));
        let p = pod("u", "20m", "35Mi");
        m.set_allocated("u", allocation_from_pod(&p));
        m.set_actuated("u", "c1", rr(&[("cpu", "20m")], &[]));
        let again = AllocationManager::load(Some(&dir));
        assert_eq!(again.allocated("u"), Some(allocation_from_pod(&p)));
        assert_eq!(again.actuated("u", "c1"), Some(rr(&[("cpu", "20m")], &[])));
        again.remove_pod("u");
        let after = AllocationManager::load(Some(&dir));
        assert_eq!(after.allocated("u"), None);
        assert_eq!(after.actuated("u", "c1"), None);
        std::fs::write(dir.join(ALLOCATED_CHECKPOINT), b"{not json").unwrap();
        assert_eq!(
            AllocationManager::load(Some(&dir)).allocated("u"),
            None,
            "a malformed checkpoint is ignored"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
