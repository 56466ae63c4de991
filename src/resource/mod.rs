//! Resource requests and limits, read in one place for the kubelet side (cgroups, CRI container
//! resources, downward API, eviction) and the scheduler: a container's request or limit of one
//! resource, a pod's effective requests and limits (init containers, sidecars, pod-level
//! resources, overhead), and (in [`qos`]) the pod's QoS class and a container's oom_score_adj.
//!
//! Mirrors `k8s.io/component-helpers/resource` (`PodRequests`, `PodLimits`,
//! `IsPodLevelRequestsSet`, `IsPodLevelResourcesSet`) and `pkg/api/v1/resource`
//! (`ExtractContainerResourceValue`) at v1.36.3 with its default feature gates
//! (PodLevelResources, SidecarContainers and InPlacePodVerticalScaling on).
//!
//! Units: every amount is in milli-units ([`ResourceList`]): `cpu` in millicores, memory,
//! ephemeral storage and hugepages in milli-bytes (bytes × 1000), counts (`pods`, extended
//! resources) in thousandths. That is exact for every quantity with at most milli precision;
//! [`milli_to_value`] gives whole units (bytes, cores rounded up) as `Quantity.Value()` does.

pub mod qos;

pub use qos::{oom_score_adj, qos_class, QosClass};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// `cpu` (millicores in a [`ResourceList`]).
pub const CPU: &str = "cpu";
/// `memory` (milli-bytes in a [`ResourceList`]).
pub const MEMORY: &str = "memory";
/// `ephemeral-storage` (milli-bytes in a [`ResourceList`]).
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// `pods` (a node's pod capacity; thousandths in a [`ResourceList`]).
pub const PODS: &str = "pods";
/// Prefix of the hugepages resources (`hugepages-2Mi`, `hugepages-1Gi`; milli-bytes).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// A resource list in milli-units keyed by resource name (see the module doc for the units).
pub type ResourceList = BTreeMap<String, i128>;

/// An API quantity in milli-units, rounded up (`Quantity.MilliValue()`); `None` when it does
/// not parse (the API server validates stored objects, so only hand-written pods get there).
pub fn quantity_milli(q: &Quantity) -> Option<i128> {
    crate::quantity::parse_milli(&q.0).ok()
}

/// Parses an API resource list into milli-units; unparsable quantities count as zero (the API
/// server validates them, so this does not happen for stored objects). An absent list is empty.
pub fn parse_list(list: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    list.map(|l| {
        l.iter()
            .map(|(k, q)| (k.clone(), quantity_milli(q).unwrap_or(0)))
            .collect()
    })
    .unwrap_or_default()
}

/// `Quantity.Value()` of a milli-unit amount: whole units (bytes, cores, counts), rounded up,
/// saturating at the `i64` range.
pub fn milli_to_value(m: i128) -> i64 {
    let v = if m >= 0 { (m + 999) / 1000 } else { m / 1000 };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// A container's `resources.requests` as the API object holds them.
pub fn container_requests(c: &Container) -> Option<&BTreeMap<String, Quantity>> {
    c.resources.as_ref()?.requests.as_ref()
}

/// A container's `resources.limits` as the API object holds them.
pub fn container_limits(c: &Container) -> Option<&BTreeMap<String, Quantity>> {
    c.resources.as_ref()?.limits.as_ref()
}

/// A container's request of resource `name`, in milli-units (`container.Resources.Requests[name]
/// .MilliValue()`); `None` when it requests none (or the quantity does not parse).
pub fn container_request(c: &Container, name: &str) -> Option<i128> {
    container_requests(c)?.get(name).and_then(quantity_milli)
}

/// A container's limit of resource `name`, in milli-units (`container.Resources.Limits[name]
/// .MilliValue()`); `None` when it sets none (or the quantity does not parse).
pub fn container_limit(c: &Container, name: &str) -> Option<i128> {
    container_limits(c)?.get(name).and_then(quantity_milli)
}

fn add_list(into: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_list(into: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        let e = into.entry(k.clone()).or_insert(*v);
        if *v > *e {
            *e = *v;
        }
    }
}

/// Resources a pod may set at pod level (`resource.IsSupportedPodLevelResource`): cpu, memory
/// and hugepages.
pub fn is_supported_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with(HUGEPAGES_PREFIX)
}

fn pod_level_requests(pod: &Pod) -> Option<&BTreeMap<String, Quantity>> {
    pod.spec.as_ref()?.resources.as_ref()?.requests.as_ref()
}

fn pod_level_limits(pod: &Pod) -> Option<&BTreeMap<String, Quantity>> {
    pod.spec.as_ref()?.resources.as_ref()?.limits.as_ref()
}

/// `resource.IsPodLevelRequestsSet`: the pod sets `spec.resources.requests` for cpu, memory or
/// hugepages.
pub fn is_pod_level_requests_set(pod: &Pod) -> bool {
    pod_level_requests(pod).is_some_and(|r| r.keys().any(|k| is_supported_pod_level_resource(k)))
}

/// `resource.IsPodLevelResourcesSet`: the pod sets `spec.resources.requests` or
/// `spec.resources.limits` for cpu, memory or hugepages.
pub fn is_pod_level_resources_set(pod: &Pod) -> bool {
    is_pod_level_requests_set(pod)
        || pod_level_limits(pod)
            .is_some_and(|l| l.keys().any(|k| is_supported_pod_level_resource(k)))
}

/// The pod-level limit of resource `name` (`spec.resources.limits[name]`), in milli-units;
/// `None` when unset or not a pod-level resource ([`is_supported_pod_level_resource`]).
pub fn pod_level_limit(pod: &Pod, name: &str) -> Option<i128> {
    if !is_supported_pod_level_resource(name) {
        return None;
    }
    pod_level_limits(pod)?.get(name).and_then(quantity_milli)
}

/// Options of [`pod_requests`] and [`pod_limits`] (`resource.PodResourcesOptions`, the parts
/// deckhand uses). The default reads the spec, with pod-level resources and overhead.
#[derive(Debug, Clone, Default)]
pub struct PodResourcesOptions {
    /// Requests only: use the larger of spec, actuated (`status.containerStatuses[].resources`)
    /// and allocated requests, for pods already running (in-place resize); `UseStatusResources`.
    pub use_status_resources: bool,
    /// Requests only: added to each container's requests for every resource the container does
    /// not list (the scheduler's "non-zero" requests used for spreading);
    /// `NonMissingContainerRequests`. Milli-units.
    pub non_missing_container_requests: ResourceList,
    /// Ignore `spec.resources` (`SkipPodLevelResources`, what a kubelet with the
    /// PodLevelResources gate off does).
    pub skip_pod_level_resources: bool,
}

/// The init-container arithmetic shared by requests and limits (`AggregateContainerRequests` /
/// `AggregateContainerLimits`): the sum over regular containers and sidecars, or the largest
/// init-container step if that is bigger (an init container runs beside the sidecars started
/// before it).
fn aggregate(pod: &Pod, per_container: impl Fn(&Container, bool) -> ResourceList) -> ResourceList {
    let Some(spec) = pod.spec.as_ref() else {
        return ResourceList::new();
    };
    let mut total = ResourceList::new();
    for c in &spec.containers {
        add_list(&mut total, &per_container(c, false));
    }
    let mut restartable = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = per_container(c, true);
        let step = if crate::pod::is_sidecar(c) {
            add_list(&mut total, &own);
            add_list(&mut restartable, &own);
            restartable.clone()
        } else {
            let mut tmp = own;
            add_list(&mut tmp, &restartable);
            tmp
        };
        max_list(&mut init_max, &step);
    }
    max_list(&mut total, &init_max);
    total
}

/// What a pod requests (`resource.PodRequests`), in milli-units: the sum over regular containers
/// and sidecars, or the largest init-container step if that is bigger (an init container runs
/// beside the sidecars started before it), replaced by pod-level requests where set (cpu,
/// memory, hugepages), plus the pod overhead.
pub fn pod_requests(pod: &Pod, opts: &PodResourcesOptions) -> ResourceList {
    let Some(spec) = pod.spec.as_ref() else {
        return ResourceList::new();
    };
    let status = pod.status.as_ref();
    let infeasible = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodResizePending"))
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"));
    let find_status = |name: &str, init: bool| {
        let list = if init {
            status.and_then(|s| s.init_container_statuses.as_ref())
        } else {
            status.and_then(|s| s.container_statuses.as_ref())
        };
        list.and_then(|l| l.iter().find(|cs| cs.name == name))
    };
    let container_reqs = |c: &Container, init: bool| -> ResourceList {
        let mut reqs = parse_list(container_requests(c));
        if opts.use_status_resources && (!init || crate::pod::is_sidecar(c)) {
            if let Some(cs) = find_status(&c.name, init) {
                if let Some(res) = cs.resources.as_ref() {
                    let actuated = parse_list(res.requests.as_ref());
                    let allocated = parse_list(cs.allocated_resources.as_ref());
                    let mut eff = if infeasible {
                        ResourceList::new()
                    } else {
                        reqs.clone()
                    };
                    max_list(&mut eff, &actuated);
                    max_list(&mut eff, &allocated);
                    reqs = eff;
                }
            }
        }
        for (k, v) in &opts.non_missing_container_requests {
            reqs.entry(k.clone()).or_insert(*v);
        }
        reqs
    };
    let mut reqs = aggregate(pod, container_reqs);
    if !opts.skip_pod_level_resources && is_pod_level_requests_set(pod) {
        for (k, v) in parse_list(pod_level_requests(pod)) {
            if is_supported_pod_level_resource(&k) {
                reqs.insert(k, v);
            }
        }
    }
    add_list(&mut reqs, &parse_list(spec.overhead.as_ref()));
    reqs
}

/// A pod's limits (`resource.PodLimits`), in milli-units: the same init-container and sidecar
/// arithmetic as [`pod_requests`] over the containers' limits (a resource is listed when any
/// container limits it), replaced by pod-level limits where set, plus the pod overhead for every
/// non-zero limit. Reads the spec only: of the options, only `skip_pod_level_resources` applies.
pub fn pod_limits(pod: &Pod, opts: &PodResourcesOptions) -> ResourceList {
    let Some(spec) = pod.spec.as_ref() else {
        return ResourceList::new();
    };
    let mut limits = aggregate(pod, |c, _| parse_list(container_limits(c)));
    if !opts.skip_pod_level_resources && is_pod_level_resources_set(pod) {
        for (k, v) in parse_list(pod_level_limits(pod)) {
            if is_supported_pod_level_resource(&k) {
                limits.insert(k, v);
            }
        }
    }
    for (k, v) in parse_list(spec.overhead.as_ref()) {
        if let Some(l) = limits.get_mut(&k).filter(|l| **l != 0) {
            *l += v;
        }
    }
    limits
}

/// Errors reading a `resourceFieldRef` ([`resource_field_value`]); the messages are what the
/// pod's `CreateContainerConfigError` / `FailedMount` shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceFieldError {
    /// Not `requests.<r>` / `limits.<r>` of cpu, memory, ephemeral-storage or hugepages.
    #[error("unsupported container resource: {0}")]
    Unsupported(String),
    /// The selector names a container the pod does not have.
    #[error("container {0:?} not found")]
    NoSuchContainer(String),
    /// The divisor is not a quantity.
    #[error("invalid divisor {0:?}")]
    InvalidDivisor(String),
    /// The divisor is negative.
    #[error("divisor must be positive")]
    NegativeDivisor,
}

/// The value of a `resourceFieldRef` (env or downwardAPI volume item) for `container` of `pod`
/// (k/k `pkg/api/v1/resource.ExtractContainerResourceValue` on the kubelet's pod whose missing
/// limits are defaulted to the node's allocatable, `kubelet_pods.go`
/// `containerResourceRuntimeValue`): `limits.cpu`/`requests.cpu` in units of `divisor` (default
/// 1 core), memory, ephemeral-storage and hugepages in units of `divisor` (default 1 byte), each
/// rounded up; a zero divisor (what the API server stores for an unset one) is the default. A
/// missing limit is `node_allocatable_milli[resource]` (milli-units), a missing request 0.
///
/// Errors: [`ResourceFieldError`] for an unsupported resource, an unknown container or a bad
/// divisor.
pub fn resource_field_value(
    pod: &Pod,
    container: &str,
    resource: &str,
    divisor: Option<&str>,
    node_allocatable_milli: &ResourceList,
) -> Result<String, ResourceFieldError> {
    let unsupported = || ResourceFieldError::Unsupported(resource.to_string());
    let (kind, name) = resource
        .split_once('.')
        .filter(|(k, _)| *k == "limits" || *k == "requests")
        .ok_or_else(unsupported)?;
    if !matches!(name, CPU | MEMORY | EPHEMERAL_STORAGE) && !name.starts_with(HUGEPAGES_PREFIX) {
        return Err(unsupported());
    }
    let c = crate::pod::find_any_container(pod, container)
        .ok_or_else(|| ResourceFieldError::NoSuchContainer(container.to_string()))?;
    let c: &Container = &c;
    let q = if kind == "limits" {
        container_limit(c, name).or_else(|| node_allocatable_milli.get(name).copied())
    } else {
        container_request(c, name)
    }
    .unwrap_or(0);
    let div = match divisor {
        None | Some("") => 1000,
        Some(d) => match crate::quantity::parse_milli(d)
            .map_err(|_| ResourceFieldError::InvalidDivisor(d.to_string()))?
        {
            0 => 1000,
            v => v,
        },
    };
    if div < 0 {
        return Err(ResourceFieldError::NegativeDivisor);
    }
    Ok(((q + div - 1) / div).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    /// A container with requests `req` and limits `lim` (JSON objects, `null` for none).
    fn c(name: &str, req: serde_json::Value, lim: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "image": "x", "resources": {"requests": req, "limits": lim}})
    }

    fn sidecar(mut v: serde_json::Value) -> serde_json::Value {
        v["restartPolicy"] = "Always".into();
        v
    }

    fn list(pairs: &[(&str, i128)]) -> ResourceList {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn quantities_read_in_milli_units_and_round_up_to_values() {
        let cases: &[(&str, Option<i128>, i64)] = &[
            ("100m", Some(100), 1),
            ("2", Some(2000), 2),
            ("1.5", Some(1500), 2),
            ("64Mi", Some((64 << 20) * 1000), 64 << 20),
            ("1k", Some(1_000_000), 1000),
            ("0", Some(0), 0),
            ("nope", None, 0),
        ];
        for (q, milli, value) in cases {
            assert_eq!(quantity_milli(&Quantity(q.to_string())), *milli, "{q}");
            assert_eq!(milli_to_value(milli.unwrap_or(0)), *value, "{q}");
        }
        let parsed = parse_list(Some(&BTreeMap::from([
            ("cpu".to_string(), Quantity("250m".into())),
            ("bad".to_string(), Quantity("x".into())),
        ])));
        assert_eq!(parsed, list(&[("cpu", 250), ("bad", 0)]));
        assert!(parse_list(None).is_empty());
    }

    #[test]
    fn container_requests_and_limits_of_one_resource() {
        let ctr: Container = serde_json::from_value(c(
            "a",
            json!({"cpu": "250m", "memory": "bad"}),
            json!({"memory": "1Gi"}),
        ))
        .unwrap();
        let cases: &[(&str, Option<i128>, Option<i128>)] = &[
            (CPU, Some(250), None),
            (MEMORY, None, Some((1 << 30) * 1000)),
            (EPHEMERAL_STORAGE, None, None),
        ];
        for (name, req, lim) in cases {
            assert_eq!(container_request(&ctr, name), *req, "request {name}");
            assert_eq!(container_limit(&ctr, name), *lim, "limit {name}");
        }
        assert_eq!(container_request(&Container::default(), CPU), None);
        assert_eq!(container_limit(&Container::default(), CPU), None);
    }

    #[test]
    fn pod_requests_follow_pod_requests_of_component_helpers() {
        let cases: Vec<(&str, serde_json::Value, PodResourcesOptions, ResourceList)> = vec![
            (
                "regular containers are summed",
                json!({"containers": [c("a", json!({"cpu": "100m", "memory": "1Gi"}), json!(null)),
                                      c("b", json!({"cpu": "1"}), json!(null))]}),
                Default::default(),
                list(&[(CPU, 1100), (MEMORY, (1 << 30) * 1000)]),
            ),
            (
                "the largest init container wins when bigger than the sum",
                json!({"initContainers": [c("i1", json!({"cpu": "2"}), json!(null)),
                                          c("i2", json!({"cpu": "500m", "memory": "3"}), json!(null))],
                       "containers": [c("a", json!({"cpu": "1", "memory": "1"}), json!(null))]}),
                Default::default(),
                list(&[(CPU, 2000), (MEMORY, 3000)]),
            ),
            (
                "sidecars add to the sum and to later init steps",
                json!({"initContainers": [sidecar(c("s", json!({"cpu": "500m"}), json!(null))),
                                          c("i", json!({"cpu": "2"}), json!(null))],
                       "containers": [c("a", json!({"cpu": "1"}), json!(null))]}),
                Default::default(),
                list(&[(CPU, 2500)]),
            ),
            (
                "overhead is added",
                json!({"containers": [c("a", json!({"cpu": "1"}), json!(null))],
                       "overhead": {"cpu": "250m", "memory": "120"}}),
                Default::default(),
                list(&[(CPU, 1250), (MEMORY, 120_000)]),
            ),
            (
                "pod-level requests replace the sums of cpu, memory and hugepages only",
                json!({"containers": [c("a", json!({"cpu": "1", "memory": "1", "ephemeral-storage": "5"}), json!(null))],
                       "resources": {"requests": {"cpu": "3", "ephemeral-storage": "9"}},
                       "overhead": {"cpu": "100m"}}),
                Default::default(),
                list(&[(CPU, 3100), (MEMORY, 1000), (EPHEMERAL_STORAGE, 5000)]),
            ),
            (
                "pod-level requests are skipped on request",
                json!({"containers": [c("a", json!({"cpu": "1"}), json!(null))],
                       "resources": {"requests": {"cpu": "3"}}}),
                PodResourcesOptions {
                    skip_pod_level_resources: true,
                    ..Default::default()
                },
                list(&[(CPU, 1000)]),
            ),
            (
                "pod-level limits alone do not change requests",
                json!({"containers": [c("a", json!({"cpu": "1"}), json!(null))],
                       "resources": {"limits": {"cpu": "3"}}}),
                Default::default(),
                list(&[(CPU, 1000)]),
            ),
            (
                "non-missing defaults fill what a container does not request",
                json!({"containers": [c("a", json!(null), json!(null)),
                                      c("b", json!({"cpu": "1"}), json!(null))]}),
                PodResourcesOptions {
                    non_missing_container_requests: list(&[(CPU, 100), (MEMORY, 7)]),
                    ..Default::default()
                },
                list(&[(CPU, 1100), (MEMORY, 14)]),
            ),
        ];
        for (what, spec, opts, want) in cases {
            assert_eq!(
                pod_requests(&pod(json!({ "spec": spec })), &opts),
                want,
                "{what}"
            );
        }
        assert!(pod_requests(&Pod::default(), &Default::default()).is_empty());
    }

    #[test]
    fn status_resources_count_for_running_pods_unless_the_resize_is_infeasible() {
        let status = |infeasible: bool| {
            json!({"containerStatuses": [{"name": "a", "image": "x", "imageID": "",
                    "ready": true, "restartCount": 0,
                    "resources": {"requests": {"cpu": "2"}},
                    "allocatedResources": {"cpu": "500m"}}],
                   "conditions": if infeasible {
                       json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}])
                   } else { json!([]) }})
        };
        let spec = json!({"containers": [c("a", json!({"cpu": "1", "memory": "1"}), json!(null))]});
        let with_status = PodResourcesOptions {
            use_status_resources: true,
            ..Default::default()
        };
        let p = pod(json!({"spec": spec, "status": status(false)}));
        assert_eq!(
            pod_requests(&p, &with_status),
            list(&[(CPU, 2000), (MEMORY, 1000)])
        );
        assert_eq!(
            pod_requests(&p, &Default::default()),
            list(&[(CPU, 1000), (MEMORY, 1000)])
        );
        // infeasible: the spec's requests do not count, only what was actuated and allocated
        let p = pod(json!({"spec": spec, "status": status(true)}));
        assert_eq!(pod_requests(&p, &with_status), list(&[(CPU, 2000)]));
    }

    #[test]
    fn pod_limits_follow_pod_limits_of_component_helpers() {
        let cases: Vec<(&str, serde_json::Value, PodResourcesOptions, ResourceList)> = vec![
            (
                "limits are summed, a resource listed when any container limits it",
                json!({"containers": [c("a", json!(null), json!({"cpu": "1", "memory": "1"})),
                                      c("b", json!(null), json!({"cpu": "500m"}))]}),
                Default::default(),
                list(&[(CPU, 1500), (MEMORY, 1000)]),
            ),
            (
                "init containers and sidecars as for requests",
                json!({"initContainers": [sidecar(c("s", json!(null), json!({"cpu": "500m"}))),
                                          c("i", json!(null), json!({"cpu": "2"}))],
                       "containers": [c("a", json!(null), json!({"cpu": "1"}))]}),
                Default::default(),
                list(&[(CPU, 2500)]),
            ),
            (
                "pod-level limits replace the sums; overhead goes to non-zero limits only",
                json!({"containers": [c("a", json!(null), json!({"cpu": "0", "memory": "1"}))],
                       "resources": {"limits": {"memory": "4"}},
                       "overhead": {"cpu": "250m", "memory": "1", "ephemeral-storage": "3"}}),
                Default::default(),
                list(&[(CPU, 0), (MEMORY, 5000)]),
            ),
            (
                "pod-level limits are skipped on request",
                json!({"containers": [c("a", json!(null), json!({"memory": "1"}))],
                       "resources": {"limits": {"memory": "4"}}}),
                PodResourcesOptions {
                    skip_pod_level_resources: true,
                    ..Default::default()
                },
                list(&[(MEMORY, 1000)]),
            ),
        ];
        for (what, spec, opts, want) in cases {
            assert_eq!(
                pod_limits(&pod(json!({ "spec": spec })), &opts),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn pod_level_resources_count_for_cpu_memory_and_hugepages() {
        let cases = [
            (json!(null), false, false),
            (json!({"requests": {"cpu": "1"}}), true, true),
            (json!({"limits": {"memory": "1Gi"}}), false, true),
            (json!({"limits": {"hugepages-2Mi": "2Mi"}}), false, true),
            (
                json!({"requests": {"ephemeral-storage": "1Gi"}}),
                false,
                false,
            ),
        ];
        for (res, requests, any) in cases {
            let p = pod(json!({"spec": {"containers": [], "resources": res}}));
            assert_eq!(is_pod_level_requests_set(&p), requests, "{res}");
            assert_eq!(is_pod_level_resources_set(&p), any, "{res}");
        }
        let p = pod(json!({"spec": {"containers": [],
            "resources": {"limits": {"cpu": "2", "ephemeral-storage": "1"}}}}));
        assert_eq!(pod_level_limit(&p, CPU), Some(2000));
        assert_eq!(pod_level_limit(&p, MEMORY), None);
        assert_eq!(pod_level_limit(&p, EPHEMERAL_STORAGE), None);
    }

    #[test]
    fn resource_field_refs_round_up_and_default_limits_to_allocatable() {
        let p = pod(json!({"spec": {"containers": [
            c("c", json!({"cpu": "250m", "memory": "64Mi"}), json!(null))]}}));
        let alloc = BTreeMap::from([("cpu".to_string(), 2000i128)]);
        let v = |res: &str, div: Option<&str>| resource_field_value(&p, "c", res, div, &alloc);
        assert_eq!(v("requests.cpu", None).unwrap(), "1");
        assert_eq!(v("requests.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(v("requests.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(v("limits.cpu", None).unwrap(), "2");
        assert!(v("limits.gpu", None).is_err());
    }

    #[test]
    fn resource_field_refs_refuse_what_the_go_kubelet_refuses() {
        let p = pod(json!({"spec": {"containers": [
            c("c", json!({"ephemeral-storage": "1Gi"}), json!({"hugepages-2Mi": "4Mi"}))]}}));
        let alloc = ResourceList::new();
        let cases: &[(&str, &str, Option<&str>, Result<&str, ResourceFieldError>)] = &[
            ("c", "requests.ephemeral-storage", Some("1Mi"), Ok("1024")),
            ("c", "limits.hugepages-2Mi", Some("1Mi"), Ok("4")),
            ("c", "limits.memory", None, Ok("0")),
            ("c", "requests.memory", Some("0"), Ok("0")),
            (
                "c",
                "requests.ephemeral-storage",
                Some(""),
                Ok("1073741824"),
            ),
            (
                "c",
                "limits.gpu",
                None,
                Err(ResourceFieldError::Unsupported("limits.gpu".into())),
            ),
            (
                "c",
                "cpu",
                None,
                Err(ResourceFieldError::Unsupported("cpu".into())),
            ),
            (
                "x",
                "limits.cpu",
                None,
                Err(ResourceFieldError::NoSuchContainer("x".into())),
            ),
            (
                "c",
                "limits.cpu",
                Some("1Q"),
                Err(ResourceFieldError::InvalidDivisor("1Q".into())),
            ),
            (
                "c",
                "limits.cpu",
                Some("-1"),
                Err(ResourceFieldError::NegativeDivisor),
            ),
        ];
        for (ctr, res, div, want) in cases {
            assert_eq!(
                resource_field_value(&p, ctr, res, *div, &alloc),
                want.clone().map(String::from),
                "{ctr} {res} {div:?}"
            );
        }
        assert_eq!(
            ResourceFieldError::Unsupported("limits.gpu".into()).to_string(),
            "unsupported container resource: limits.gpu"
        );
        assert_eq!(
            ResourceFieldError::NoSuchContainer("x".into()).to_string(),
            "container \"x\" not found"
        );
        assert_eq!(
            ResourceFieldError::InvalidDivisor("1Q".into()).to_string(),
            "invalid divisor \"1Q\""
        );
    }
}
