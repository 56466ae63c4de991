//! Resource arithmetic of the scheduler: a pod's requests as kube-scheduler accounts them (read
//! with [`crate::resource::pod_requests`], shared with the kubelet side) and what a node offers.
//!
//! Mirrors the scheduler's `framework.Resource`
//! (k/k `pkg/scheduler/framework/types.go`: `Resource.Add`, `SetMaxResource`,
//! `PodInfo.CalculateResource`) at v1.36.3 with its default feature gates (PodLevelResources and
//! InPlacePodVerticalScaling on).

use crate::resource::{
    is_pod_level_requests_set, milli_to_value, parse_list, pod_requests, PodResourcesOptions,
    ResourceList, CPU, EPHEMERAL_STORAGE, MEMORY, PODS,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::BTreeMap;

/// CPU assumed for a container that requests none, for scoring only (100 m;
/// k/k `pkg/scheduler/util/pod_resources.go` `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container that requests none, for scoring only (200 MiB;
/// `DefaultMemoryRequest`).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

fn milli_to_i64(m: i128) -> i64 {
    m.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// True for names whose requests the scheduler tracks as "scalar" resources: extended resources
/// (`example.com/gpu`), hugepages, `*kubernetes.io/*` native prefixed names and attachable volumes
/// (k/k `pkg/scheduler/util.IsScalarResourceName`).
pub fn is_scalar_resource_name(name: &str) -> bool {
    is_extended_resource_name(name)
        || name.starts_with("hugepages-")
        || name.contains("kubernetes.io/")
        || name.starts_with("attachable-volumes-")
}

/// An extended resource: a domain-qualified name outside `kubernetes.io/`, not starting with
/// `requests.` (k/k `pkg/apis/core/v1/helper.IsExtendedResourceName`).
pub fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    if native || name.starts_with("requests.") {
        return false;
    }
    is_qualified_name(&format!("requests.{name}"))
}

/// `k8s.io/apimachinery/pkg/util/validation.IsQualifiedName`: `[prefix/]name`, name at most 63
/// characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric, prefix a DNS subdomain.
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if name.contains('/') {
        return false;
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
}

/// Compute resources as the scheduler accounts them (`framework.Resource`): CPU in millicores,
/// memory and ephemeral storage in bytes, the node's pod capacity, and scalar resources in units.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pod_number: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// `framework.NewResource`: sums a resource list (unknown non-scalar names are ignored).
    pub fn from_list(list: &ResourceList) -> Resource {
        let mut r = Resource::default();
        r.add_list(list);
        r
    }

    /// `Resource.Add`.
    pub fn add_list(&mut self, list: &ResourceList) {
        for (name, m) in list {
            match name.as_str() {
                CPU => self.milli_cpu += milli_to_i64(*m),
                MEMORY => self.memory += milli_to_value(*m),
                PODS => self.allowed_pod_number += milli_to_value(*m),
                EPHEMERAL_STORAGE => self.ephemeral_storage += milli_to_value(*m),
                other if is_scalar_resource_name(other) => {
                    *self.scalar.entry(other.to_string()).or_insert(0) += milli_to_value(*m)
                }
                _ => {}
            }
        }
    }

    /// `Resource.SetMaxResource` on an empty resource: the pod's request as the fit filter uses it
    /// (the `pods` entry of a request list is ignored).
    pub fn request_from_list(list: &ResourceList) -> Resource {
        let mut r = Resource::default();
        for (name, m) in list {
            match name.as_str() {
                CPU => r.milli_cpu = r.milli_cpu.max(milli_to_i64(*m)),
                MEMORY => r.memory = r.memory.max(milli_to_value(*m)),
                EPHEMERAL_STORAGE => {
                    r.ephemeral_storage = r.ephemeral_storage.max(milli_to_value(*m))
                }
                other if is_scalar_resource_name(other) => {
                    let e = r.scalar.entry(other.to_string()).or_insert(0);
                    *e = (*e).max(milli_to_value(*m));
                }
                _ => {}
            }
        }
        r
    }

    /// Adds (`sign` = 1) or subtracts (`sign` = -1) another resource.
    pub fn add(&mut self, other: &Resource, sign: i64) {
        self.milli_cpu += sign * other.milli_cpu;
        self.memory += sign * other.memory;
        self.ephemeral_storage += sign * other.ephemeral_storage;
        self.allowed_pod_number += sign * other.allowed_pod_number;
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e += sign * v;
            if *e == 0 && sign < 0 {
                self.scalar.remove(k);
            }
        }
    }

    /// A scalar resource's amount (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar.get(name).copied().unwrap_or(0)
    }

    /// True when nothing at all is requested (cpu, memory, ephemeral storage, scalars).
    pub fn is_zero_request(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.scalar.is_empty()
    }
}

/// The node's allocatable resources (`status.allocatable`).
pub fn node_allocatable(node: &Node) -> Resource {
    Resource::from_list(&parse_list(
        node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
    ))
}

/// The fit filter's view of a pod's request (`noderesources.computePodResourceRequest`).
pub fn fit_request(pod: &Pod) -> Resource {
    Resource::request_from_list(&pod_requests(pod, &PodResourcesOptions::default()))
}

/// What a pod on a node adds to the node's accounting (`PodInfo.CalculateResource`): its
/// requests, and its "non-zero" cpu and memory (100 m / 200 MiB per container that requests
/// none, used by the least-allocated score so that many request-less pods are still spread).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResource {
    pub resource: Resource,
    pub non0_cpu: i64,
    pub non0_mem: i64,
}

fn default_non_missing() -> ResourceList {
    let mut m = ResourceList::new();
    m.insert(CPU.into(), DEFAULT_MILLI_CPU_REQUEST as i128);
    m.insert(MEMORY.into(), DEFAULT_MEMORY_REQUEST as i128 * 1000);
    m
}

/// `PodInfo.CalculateResource` for a pod that is (or is assumed to be) on a node.
pub fn pod_resource(pod: &Pod) -> PodResource {
    let opts = PodResourcesOptions {
        use_status_resources: true,
        ..Default::default()
    };
    let requests = pod_requests(pod, &opts);
    let non_missing = if is_pod_level_requests_set(pod) {
        // Only resources that neither the pod nor any container requests get the default.
        default_non_missing()
            .into_iter()
            .filter(|(k, _)| !requests.contains_key(k))
            .collect()
    } else {
        default_non_missing()
    };
    let non0 = if non_missing.is_empty() {
        requests.clone()
    } else {
        pod_requests(
            pod,
            &PodResourcesOptions {
                use_status_resources: true,
                non_missing_container_requests: non_missing,
                ..Default::default()
            },
        )
    };
    PodResource {
        resource: Resource::from_list(&requests),
        non0_cpu: milli_to_i64(non0.get(CPU).copied().unwrap_or(0)),
        non0_mem: milli_to_value(non0.get(MEMORY).copied().unwrap_or(0)),
    }
}

/// The pod's cpu and memory requests as the scoring plugins see them (`resourceAllocationScorer.
/// calculatePodResourceRequest`): with the 100 m / 200 MiB defaults (`non_zero`, least-allocated)
/// or without (balanced allocation). Returns `(millicores, bytes)`.
pub fn score_request(pod: &Pod, non_zero: bool) -> (i64, i64) {
    let opts = PodResourcesOptions {
        use_status_resources: true,
        non_missing_container_requests: if non_zero {
            default_non_missing()
        } else {
            ResourceList::new()
        },
        ..Default::default()
    };
    let r = pod_requests(pod, &opts);
    (
        milli_to_i64(r.get(CPU).copied().unwrap_or(0)),
        milli_to_value(r.get(MEMORY).copied().unwrap_or(0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn c(name: &str, cpu: &str, mem: &str) -> serde_json::Value {
        serde_json::json!({"name": name, "image": "x",
            "resources": {"requests": {"cpu": cpu, "memory": mem}}})
    }

    #[test]
    fn regular_containers_are_summed() {
        let p = pod(
            serde_json::json!({"spec": {"containers": [c("a", "100m", "1Gi"), c("b", "1", "1Gi")]}}),
        );
        let r = fit_request(&p);
        assert_eq!(r.milli_cpu, 1100);
        assert_eq!(r.memory, 2 << 30);
    }

    #[test]
    fn init_containers_count_as_their_maximum_when_bigger_than_the_sum() {
        let p = pod(serde_json::json!({"spec": {
            "initContainers": [c("i1", "2", "1Gi"), c("i2", "500m", "3Gi")],
            "containers": [c("a", "1", "1Gi")]}}));
        let r = fit_request(&p);
        assert_eq!(r.milli_cpu, 2000, "max(init 2, regular 1)");
        assert_eq!(r.memory, 3 << 30, "max(init 3Gi, regular 1Gi)");
    }

    #[test]
    fn sidecars_add_to_the_sum_and_to_later_init_steps() {
        // sidecar s (restartPolicy Always) runs beside later init container i and beside the app.
        let mut s = c("s", "500m", "100Mi");
        s["restartPolicy"] = "Always".into();
        let p = pod(serde_json::json!({"spec": {
            "initContainers": [s, c("i", "2", "100Mi")],
            "containers": [c("a", "1", "100Mi")]}}));
        let r = fit_request(&p);
        // regular + sidecar = 1.5; init step i = 2 + 0.5 = 2.5
        assert_eq!(r.milli_cpu, 2500);
        assert_eq!(r.memory, 200 << 20);
    }

    #[test]
    fn overhead_is_added() {
        let p = pod(
            serde_json::json!({"spec": {"containers": [c("a", "1", "1Gi")],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}}),
        );
        let r = fit_request(&p);
        assert_eq!(r.milli_cpu, 1250);
        assert_eq!(r.memory, (1 << 30) + (120 << 20));
    }

    #[test]
    fn pod_level_requests_replace_container_sums() {
        let p = pod(
            serde_json::json!({"spec": {"containers": [c("a", "1", "1Gi")],
            "resources": {"requests": {"cpu": "3"}}}}),
        );
        let r = fit_request(&p);
        assert_eq!(r.milli_cpu, 3000);
        assert_eq!(r.memory, 1 << 30);
    }

    #[test]
    fn extended_resources_are_scalar() {
        let p = pod(
            serde_json::json!({"spec": {"containers": [{"name": "a", "image": "x",
            "resources": {"requests": {"example.com/gpu": "2", "hugepages-2Mi": "4Mi"}}}]}}),
        );
        let r = fit_request(&p);
        assert_eq!(r.scalar("example.com/gpu"), 2);
        assert_eq!(r.scalar("hugepages-2Mi"), 4 << 20);
        assert!(is_extended_resource_name("example.com/gpu"));
        assert!(!is_extended_resource_name("kubernetes.io/foo"));
        assert!(!is_extended_resource_name("cpu"));
    }

    #[test]
    fn non_zero_requests_default_missing_cpu_and_memory_per_container() {
        let p = pod(serde_json::json!({"spec": {"containers": [
            {"name": "a", "image": "x"},
            {"name": "b", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}));
        let pr = pod_resource(&p);
        assert_eq!(pr.resource.milli_cpu, 1000);
        assert_eq!(pr.resource.memory, 0);
        assert_eq!(pr.non0_cpu, 1100);
        assert_eq!(pr.non0_mem, 2 * DEFAULT_MEMORY_REQUEST);
        assert_eq!(score_request(&p, false), (1000, 0));
    }

    #[test]
    fn running_pods_count_the_larger_of_spec_and_resized_status() {
        let p = pod(
            serde_json::json!({"spec": {"containers": [c("a", "1", "1Gi")]},
            "status": {"containerStatuses": [{"name": "a", "image": "x", "imageID": "",
                "ready": true, "restartCount": 0,
                "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                "allocatedResources": {"cpu": "2", "memory": "1Gi"}}]}}),
        );
        assert_eq!(pod_resource(&p).resource.milli_cpu, 2000);
        assert_eq!(
            fit_request(&p).milli_cpu,
            1000,
            "an unscheduled pod uses its spec"
        );
    }

    #[test]
    fn node_allocatable_reads_pods_and_scalars() {
        let n: Node = serde_json::from_value(serde_json::json!({"status": {"allocatable": {
            "cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "10Gi",
            "example.com/gpu": "1"}}}))
        .unwrap();
        let r = node_allocatable(&n);
        assert_eq!(
            (
                r.milli_cpu,
                r.memory,
                r.allowed_pod_number,
                r.ephemeral_storage
            ),
            (2000, 4 << 30, 110, 10 << 30)
        );
        assert_eq!(r.scalar("example.com/gpu"), 1);
    }
}
