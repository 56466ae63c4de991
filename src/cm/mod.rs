//! The container manager's cgroup side (the Go kubelet's `pkg/kubelet/cm`): the `kubepods`
//! hierarchy split by QoS class, one cgroup per pod under it, and the pod-level limits the Go
//! kubelet sets (doc page "Node Allocatable", "Pod Quality of Service Classes").
//!
//! Layout (cgroupfs driver, cgroup v1 or v2):
//! ```text
//! /kubepods                      cpu.shares = allocatable cpu, memory limit = capacity − reserved
//! /kubepods/pod<uid>             Guaranteed pods
//! /kubepods/burstable/pod<uid>   Burstable pods
//! /kubepods/besteffort           cpu.shares = 2
//! /kubepods/besteffort/pod<uid>  BestEffort pods (cpu.shares = 2)
//! ```
//! The pod cgroup is made before RunPodSandbox (whose `cgroup_parent` names it), with
//! [`pod_resource_config`]'s limits; containerd/runc make the container cgroups below it.
//! It is removed when the pod is cleaned up.
//!
//! The decisions are pure ([`pod_resource_config`], [`oom_score_adj`], [`milli_cpu_to_shares`]);
//! [`CgroupManager`] does the I/O with cgroups-rs.

use crate::pod::spec::{cgroup_parent, qos_class};
use crate::quantity::parse_milli;
use k8s_openapi::api::core::v1::{Container, Pod};

/// Smallest cpu.shares value (k/k `cm.MinShares`).
pub const MIN_SHARES: u64 = 2;
/// cpu.shares of one core (k/k `cm.SharesPerCPU`).
pub const SHARES_PER_CPU: u64 = 1024;
/// CFS period the Go kubelet uses, in µs (k/k `cm.QuotaPeriod`).
pub const QUOTA_PERIOD_US: u64 = 100_000;
/// Smallest CFS quota, in µs (k/k `cm.MinQuotaPeriod`).
pub const MIN_QUOTA_PERIOD_US: i64 = 1000;
/// The top of the pod cgroup hierarchy (k/k `defaultNodeAllocatableCgroupName`).
pub const KUBEPODS: &str = "kubepods";

/// Errors creating or removing cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// cgroups-rs refused (no such controller, permission, busy).
    #[error("cgroup {path}: {message}")]
    Cgroup {
        /// The cgroup path below the hierarchy root.
        path: String,
        /// What failed.
        message: String,
    },
}

/// Converts millicores to cpu.shares (k/k `cm.MilliCPUToShares`): 0 → 2, else
/// millicores·1024/1000, at least 2.
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64) * SHARES_PER_CPU / 1000).max(MIN_SHARES)
}

/// Converts a millicore limit to a CFS quota in µs for `period` µs (k/k `cm.MilliCPUToQuota`):
/// 0 → no quota (None), else millicores·period/1000, at least 1000 µs.
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> Option<i64> {
    if milli <= 0 {
        return None;
    }
    Some(((milli * period as i64) / 1000).max(MIN_QUOTA_PERIOD_US))
}

/// Pod-level cgroup settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceConfig {
    /// cpu.shares.
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs per [`ResourceConfig::cpu_period`].
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes.
    pub memory_limit: Option<i64>,
}

fn res(c: &Container, limits: bool, name: &str) -> Option<i128> {
    let r = c.resources.as_ref()?;
    let m = if limits {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    }?;
    m.get(name).and_then(|q| parse_milli(&q.0).ok())
}

/// The effective request or limit of a pod for one resource (k/k `resource.PodRequests` /
/// `PodLimits`): the larger of the sum over regular containers plus sidecars and the biggest
/// init container (plus the sidecars started before it), plus the pod overhead; limits count
/// only when every container sets one (`None` otherwise). In milli-units.
fn pod_total(pod: &Pod, limits: bool, name: &str) -> Option<i128> {
    let spec = pod.spec.as_ref()?;
    let mut sum: i128 = 0;
    let mut all_set = true;
    let mut sidecars: i128 = 0;
    let mut init_max: i128 = 0;
    for c in spec.init_containers.iter().flatten() {
        let v = res(c, limits, name);
        all_set &= v.is_some();
        let v = v.unwrap_or(0);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += v;
            init_max = init_max.max(sidecars);
        } else {
            init_max = init_max.max(sidecars + v);
        }
    }
    for c in &spec.containers {
        let v = res(c, limits, name);
        all_set &= v.is_some();
        sum += v.unwrap_or(0);
    }
    sum += sidecars;
    let mut total = sum.max(init_max);
    if let Some(o) = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get(name))
        .and_then(|q| parse_milli(&q.0).ok())
    {
        total += o;
    }
    if limits && !all_set {
        return None;
    }
    Some(total)
}

/// The pod cgroup's settings (k/k `cm.ResourceConfigForPod`): cpu.shares from the cpu
/// requests; for a pod whose every container has a cpu limit, the CFS quota of their sum over a
/// 100 ms period; for a pod whose every container has a memory limit, that sum as the memory
/// limit. BestEffort pods get cpu.shares 2 and nothing else.
pub fn pod_resource_config(pod: &Pod) -> ResourceConfig {
    if qos_class(pod) == "BestEffort" {
        return ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        };
    }
    let cpu_req = pod_total(pod, false, "cpu").unwrap_or(0) as i64;
    let cpu_lim = pod_total(pod, true, "cpu").map(|v| v as i64);
    let mem_lim = pod_total(pod, true, "memory").map(|v| (v / 1000) as i64);
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(cpu_req)),
        cpu_quota: cpu_lim.and_then(|l| milli_cpu_to_quota(l, QUOTA_PERIOD_US)),
        cpu_period: cpu_lim.filter(|l| *l > 0).map(|_| QUOTA_PERIOD_US),
        memory_limit: mem_lim.filter(|m| *m > 0),
    }
}

/// The OOM score adjustment of a container (k/k `pkg/kubelet/qos/policy.go`
/// GetContainerOOMScoreAdjust): -997 for Guaranteed and node-critical pods, 1000 for BestEffort,
/// else `1000 − 1000·memoryRequest/memoryCapacity` clamped to [3, 999] (a sidecar no higher than
/// the pod's smallest regular container would get).
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity_bytes: i64) -> i64 {
    let spec = pod.spec.clone().unwrap_or_default();
    let node_critical = spec.priority_class_name.as_deref() == Some("system-node-critical")
        && spec.priority.unwrap_or(0) >= 2_000_000_000;
    let qos = qos_class(pod);
    if node_critical || qos == "Guaranteed" {
        return -997;
    }
    if qos == "BestEffort" {
        return 1000;
    }
    let cap = memory_capacity_bytes.max(1) as i128;
    let mem_req = |c: &Container| res(c, false, "memory").unwrap_or(0) / 1000;
    let mut adj = 1000 - (1000 * mem_req(c)) / cap;
    let is_sidecar = c.restart_policy.as_deref() == Some("Always")
        && spec
            .init_containers
            .iter()
            .flatten()
            .any(|i| i.name == c.name);
    if is_sidecar {
        let min_regular = spec.containers.iter().map(mem_req).min().unwrap_or(0);
        adj = adj.min(1000 - (1000 * min_regular) / cap);
    }
    if adj < 3 {
        3
    } else if adj == 1000 {
        999
    } else {
        adj as i64
    }
}

/// The cgroup path (below the hierarchy root, no leading `/`) of a pod.
pub fn pod_cgroup_path(pod: &Pod) -> String {
    cgroup_parent(pod).trim_start_matches('/').to_string()
}

/// Creates and removes the kubepods hierarchy and pod cgroups through cgroups-rs (cgroupfs
/// driver; v1 or v2 detected by cgroups-rs).
pub struct CgroupManager {
    hierarchy: fn() -> Box<dyn cgroups_rs::Hierarchy>,
}

impl Default for CgroupManager {
    fn default() -> Self {
        CgroupManager {
            hierarchy: cgroups_rs::hierarchies::auto,
        }
    }
}

impl CgroupManager {
    fn build(&self, path: &str, rc: &ResourceConfig) -> Result<(), CgroupError> {
        use cgroups_rs::cgroup_builder::CgroupBuilder;
        let mut b = CgroupBuilder::new(path);
        let mut cpu = b.cpu();
        if let Some(s) = rc.cpu_shares {
            cpu = cpu.shares(s);
        }
        if let Some(p) = rc.cpu_period {
            cpu = cpu.period(p);
        }
        if let Some(q) = rc.cpu_quota {
            cpu = cpu.quota(q);
        }
        b = cpu.done();
        if let Some(m) = rc.memory_limit {
            b = b.memory().memory_hard_limit(m).done();
        }
        b.build((self.hierarchy)())
            .map(|_| ())
            .map_err(|e| CgroupError::Cgroup {
                path: path.to_string(),
                message: e.to_string(),
            })
    }

    /// Creates `/kubepods` (cpu.shares of the allocatable cpu in millicores, memory limit
    /// `allocatable_memory` bytes when given), `/kubepods/burstable` and `/kubepods/besteffort`
    /// (cpu.shares 2), as the Go kubelet's node allocatable and QoS container managers do at
    /// start-up.
    pub fn ensure_qos_cgroups(
        &self,
        allocatable_milli_cpu: i64,
        allocatable_memory: Option<i64>,
    ) -> Result<(), CgroupError> {
        self.build(
            KUBEPODS,
            &ResourceConfig {
                cpu_shares: Some(milli_cpu_to_shares(allocatable_milli_cpu)),
                memory_limit: allocatable_memory,
                ..Default::default()
            },
        )?;
        self.build(&format!("{KUBEPODS}/burstable"), &ResourceConfig::default())?;
        self.build(
            &format!("{KUBEPODS}/besteffort"),
            &ResourceConfig {
                cpu_shares: Some(MIN_SHARES),
                ..Default::default()
            },
        )
    }

    /// Creates (or updates) the pod's cgroup with [`pod_resource_config`].
    pub fn ensure_pod_cgroup(&self, pod: &Pod) -> Result<(), CgroupError> {
        self.build(&pod_cgroup_path(pod), &pod_resource_config(pod))
    }

    /// Removes the cgroup of pod `uid` under any QoS class, once it has no processes left.
    /// A cgroup that does not exist is not an error.
    pub fn remove_pod_cgroup(&self, uid: &str) -> Result<(), CgroupError> {
        for parent in [
            KUBEPODS.to_string(),
            format!("{KUBEPODS}/burstable"),
            format!("{KUBEPODS}/besteffort"),
        ] {
            let path = format!("{parent}/pod{uid}");
            let h = (self.hierarchy)();
            if !h.root().join("cpu").join(&path).exists()
                && !h.root().join(&path).exists()
                && !h.root().join("memory").join(&path).exists()
            {
                continue;
            }
            let cg = cgroups_rs::Cgroup::load(h, path.as_str());
            cg.delete().map_err(|e| CgroupError::Cgroup {
                path: path.clone(),
                message: e.to_string(),
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn ctr(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: m(req),
                limits: m(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(cs: Vec<Container>) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: cs,
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn shares_and_quota_convert_like_the_go_kubelet() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_shares(2000), 2048);
        assert_eq!(milli_cpu_to_quota(0, 100_000), None);
        assert_eq!(milli_cpu_to_quota(5, 100_000), Some(1000));
        assert_eq!(milli_cpu_to_quota(500, 100_000), Some(50_000));
    }

    #[test]
    fn pod_cgroup_limits_follow_resource_config_for_pod() {
        let g = pod(vec![
            ctr(
                "a",
                &[("cpu", "500m"), ("memory", "64Mi")],
                &[("cpu", "500m"), ("memory", "64Mi")],
            ),
            ctr(
                "b",
                &[("cpu", "250m"), ("memory", "32Mi")],
                &[("cpu", "250m"), ("memory", "32Mi")],
            ),
        ]);
        assert_eq!(
            pod_resource_config(&g),
            ResourceConfig {
                cpu_shares: Some(768),
                cpu_quota: Some(75_000),
                cpu_period: Some(100_000),
                memory_limit: Some(96 * 1024 * 1024),
            }
        );
        assert_eq!(pod_cgroup_path(&g), "kubepods/podu1");
        // one container without a memory limit: no pod memory limit
        let b = pod(vec![
            ctr(
                "a",
                &[("cpu", "100m")],
                &[("cpu", "200m"), ("memory", "64Mi")],
            ),
            ctr("b", &[("memory", "16Mi")], &[("cpu", "100m")]),
        ]);
        let rc = pod_resource_config(&b);
        assert_eq!(rc.cpu_shares, Some(102));
        assert_eq!(rc.cpu_quota, Some(30_000));
        assert_eq!(rc.memory_limit, None);
        assert_eq!(pod_cgroup_path(&b), "kubepods/burstable/podu1");
        let be = pod(vec![ctr("a", &[], &[])]);
        assert_eq!(
            pod_resource_config(&be),
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
        assert_eq!(pod_cgroup_path(&be), "kubepods/besteffort/podu1");
    }

    #[test]
    fn oom_score_adj_per_qos_class() {
        let cap = 4 * 1024 * 1024 * 1024i64;
        let g = pod(vec![ctr(
            "a",
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1"), ("memory", "1Gi")],
        )]);
        assert_eq!(
            oom_score_adj(&g, &g.spec.as_ref().unwrap().containers[0], cap),
            -997
        );
        let be = pod(vec![ctr("a", &[], &[])]);
        assert_eq!(
            oom_score_adj(&be, &be.spec.as_ref().unwrap().containers[0], cap),
            1000
        );
        let b = pod(vec![ctr("a", &[("memory", "1Gi")], &[])]);
        assert_eq!(
            oom_score_adj(&b, &b.spec.as_ref().unwrap().containers[0], cap),
            750
        );
        let tiny = pod(vec![ctr("a", &[("cpu", "10m")], &[])]);
        assert_eq!(
            oom_score_adj(&tiny, &tiny.spec.as_ref().unwrap().containers[0], cap),
            999
        );
        let huge = pod(vec![ctr("a", &[("memory", "8Gi")], &[])]);
        assert_eq!(
            oom_score_adj(&huge, &huge.spec.as_ref().unwrap().containers[0], cap),
            3
        );
    }
}
