//! Which pod to evict, what its status says, and which new pods to refuse under pressure (pure).
//!
//! Mirrors k/k `pkg/kubelet/eviction/helpers.go` (`rankMemoryPressure`, `rankDiskPressureFunc`,
//! `rankPIDPressure`, `evictionMessage`) and `eviction_manager.go` (`Admit`), as described on
//! the doc page "Node-pressure Eviction" (section "Pod selection for kubelet eviction").

use super::thresholds::{NodeCondition, Signal};
use crate::resource::{pod_requests, PodResourcesOptions, QosClass};
use k8s_openapi::api::core::v1::{Pod, Taint};
use std::cmp::Ordering;

/// Reason of an evicted or rejected pod's status and of the `Evicted` event.
pub const REASON_EVICTED: &str = "Evicted";
/// Priority from which a pod counts as critical and is never evicted
/// (`scheduling.SystemCriticalPriority`, 2×10⁹).
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// One container's usage, for the eviction message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerUsage {
    /// Container name.
    pub name: String,
    /// Working set, bytes.
    pub memory_bytes: Option<u64>,
    /// Writable layer + logs, bytes (what the Go kubelet blames a container for on disk).
    pub ephemeral_bytes: Option<u64>,
}

/// A pod's usage as the eviction manager measures it. `None` fields had no stats.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodUsage {
    /// Pod working set, bytes.
    pub memory_bytes: Option<u64>,
    /// Local ephemeral storage on the filesystem under pressure, bytes: logs and local volumes
    /// (emptyDir on disk, configMap, downwardAPI), plus the writable layers when they share it.
    pub disk_bytes: Option<u64>,
    /// Inodes used there.
    pub inodes: Option<u64>,
    /// Processes (tasks) in the pod.
    pub processes: Option<u64>,
    /// Per container, in stats order.
    pub containers: Vec<ContainerUsage>,
}

/// The pod's priority (`spec.priority`, 0 when unset).
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Critical pods are never evicted and always admitted (`kubelettypes.IsCriticalPod`): static
/// pods, mirror pods, and pods at or above system-critical priority.
pub fn is_critical(pod: &Pod) -> bool {
    crate::source::file::is_static(pod)
        || crate::source::file::is_mirror(pod)
        || priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

/// The pod's request of `resource` in whole units (bytes for memory and ephemeral-storage),
/// as `GetResourceRequestQuantity` computes it.
pub fn request(pod: &Pod, resource: &str) -> u64 {
    let r = pod_requests(pod, &PodResourcesOptions::default());
    (r.get(resource).copied().unwrap_or(0).max(0) / 1000) as u64
}

fn usage_for(signal: Signal, u: &PodUsage) -> Option<u64> {
    match signal {
        Signal::MemoryAvailable => u.memory_bytes,
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => u.disk_bytes,
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => u.inodes,
        Signal::PidAvailable => u.processes,
    }
}

/// Orders `pods` (with their usage; `None` = no stats) for eviction under `signal`, first to
/// evict first:
/// - memory: pods using more than they request first, then lower priority, then larger
///   usage above request;
/// - disk (bytes or inodes): the same with local storage usage (`ephemeral-storage` requests);
/// - PIDs: lower priority first, then more processes.
///
/// Pods without stats go first, as the Go kubelet's comparators put them.
pub fn rank(signal: Signal, pods: &mut [(Pod, Option<PodUsage>)]) {
    let resource = match signal {
        Signal::MemoryAvailable => Some("memory"),
        Signal::NodeFsAvailable | Signal::ImageFsAvailable => Some("ephemeral-storage"),
        // inode requests do not exist: usage above zero counts as exceeding
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Some(""),
        Signal::PidAvailable => None,
    };
    pods.sort_by(|(a, ua), (b, ub)| {
        let (ua, ub) = match (ua, ub) {
            (Some(ua), Some(ub)) => (ua, ub),
            // pods without stats first
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
        };
        let prio = priority(a).cmp(&priority(b));
        let ua_v = usage_for(signal, ua).unwrap_or(0) as i128;
        let ub_v = usage_for(signal, ub).unwrap_or(0) as i128;
        match resource {
            None => prio.then(ub_v.cmp(&ua_v)),
            Some(res) => {
                let (ra, rb) = if res.is_empty() {
                    (0, 0)
                } else {
                    (request(a, res) as i128, request(b, res) as i128)
                };
                let exceeds_a = ua_v > ra;
                let exceeds_b = ub_v > rb;
                exceeds_b
                    .cmp(&exceeds_a)
                    .then(prio)
                    .then((ub_v - rb).cmp(&(ua_v - ra)))
            }
        }
    });
}

/// Decimal-SI canonical form of a count (`1k`, `2M`, or the plain number).
fn decimal_si(n: u64) -> String {
    if n == 0 {
        return "0".into();
    }
    for (suffix, size) in [
        ("E", 1_000_000_000_000_000_000u64),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ] {
        if n % size == 0 {
            return format!("{}{}", n / size, suffix);
        }
    }
    n.to_string()
}

/// The container's request of `resource` as written (`"0"` when it requests none); `None` for
/// a container the pod does not have.
fn container_request_text(pod: &Pod, container: &str, resource: &str) -> Option<String> {
    let c = crate::pod::find_container(pod, container)?;
    Some(
        crate::resource::container_requests(c)
            .and_then(|r| r.get(resource))
            .map(|q| q.0.clone())
            .unwrap_or_else(|| "0".into()),
    )
}

/// The eviction message (`evictionMessage`), e.g. `The node was low on resource:
/// ephemeral-storage. Threshold quantity: 107374182, available: 102396Ki. Container filler was
/// using 4Ki, request is 0, has larger consumption of ephemeral-storage. ` (the trailing space
/// is the Go kubelet's). `threshold` is `(threshold quantity, available)` of the signal
/// reclaimed, in its units.
pub fn eviction_message(
    signal: Signal,
    pod: &Pod,
    usage: Option<&PodUsage>,
    threshold: Option<(u64, u64)>,
) -> String {
    let resource = signal.resource();
    let mut m = format!("The node was low on resource: {resource}. ");
    if let Some((q, avail)) = threshold {
        let avail = match signal {
            Signal::MemoryAvailable | Signal::NodeFsAvailable | Signal::ImageFsAvailable => {
                crate::quantity::binary_si(avail).0
            }
            _ => decimal_si(avail),
        };
        m += &format!(
            "Threshold quantity: {}, available: {}. ",
            crate::quantity::binary_si(q).0,
            avail
        );
    }
    let Some(usage) = usage else {
        return m;
    };
    for c in &usage.containers {
        let used = match resource {
            "memory" => c.memory_bytes,
            "ephemeral-storage" => c.ephemeral_bytes,
            _ => None,
        };
        let (Some(used), Some(req_text)) = (used, container_request_text(pod, &c.name, resource))
        else {
            continue;
        };
        let req = crate::quantity::parse_value(&req_text).unwrap_or(0).max(0) as u64;
        if used > req {
            m += &format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                crate::quantity::binary_si(used).0,
                req_text,
                resource
            );
        }
    }
    m
}

/// Admission under pressure (`managerImpl.Admit`): with no pressure, or for a critical pod, the
/// pod is admitted; under MemoryPressure alone, only BestEffort pods that do not tolerate the
/// `node.kubernetes.io/memory-pressure:NoSchedule` taint are refused; any other pressure refuses
/// every pod. The refusal is the message (`The node had condition: [DiskPressure]. `); the pod
/// gets reason [`REASON_EVICTED`] and message `Pod was rejected: <message>`.
pub fn admit(pod: &Pod, conditions: &[NodeCondition]) -> Result<(), String> {
    if conditions.is_empty() || is_critical(pod) {
        return Ok(());
    }
    if conditions == [NodeCondition::MemoryPressure] {
        if crate::resource::qos_class(pod) != QosClass::BestEffort {
            return Ok(());
        }
        let taint = Taint {
            key: "node.kubernetes.io/memory-pressure".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerations = pod
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default();
        if crate::scheduler::taints::tolerated(&tolerations, &taint) {
            return Ok(());
        }
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.type_name()).collect();
    Err(format!("The node had condition: [{}]. ", names.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, prio: i32, mem_req: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {
                "priority": prio,
                "containers": [{
                    "name": "c", "image": "busybox",
                    "resources": mem_req.map(|m| serde_json::json!({"requests": {"memory": m, "ephemeral-storage": m}, "limits": {"memory": m}})).unwrap_or(serde_json::json!({}))
                }]
            }
        }))
        .unwrap()
    }

    fn mem(bytes: u64) -> Option<PodUsage> {
        Some(PodUsage {
            memory_bytes: Some(bytes),
            disk_bytes: Some(bytes),
            processes: Some(bytes),
            ..Default::default()
        })
    }

    fn names(p: &[(Pod, Option<PodUsage>)]) -> Vec<String> {
        p.iter()
            .map(|(p, _)| p.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn memory_ranking_puts_pods_over_their_requests_first_then_priority_then_excess() {
        let mut pods = vec![
            // guaranteed, within request
            (pod("within", 0, Some("100Mi")), mem(50 << 20)),
            // best effort, small usage
            (pod("be-small", 0, None), mem(10 << 20)),
            // best effort, big usage
            (pod("be-big", 0, None), mem(80 << 20)),
            // best effort but high priority
            (pod("be-high", 1000, None), mem(500 << 20)),
        ];
        rank(Signal::MemoryAvailable, &mut pods);
        assert_eq!(
            names(&pods),
            vec!["be-big", "be-small", "be-high", "within"]
        );
    }

    #[test]
    fn disk_ranking_and_pods_without_stats_first() {
        let mut pods = vec![
            (pod("small", 0, None), mem(1 << 20)),
            (pod("nostats", 0, None), None),
            (pod("big", 0, None), mem(900 << 20)),
        ];
        rank(Signal::NodeFsAvailable, &mut pods);
        assert_eq!(names(&pods), vec!["nostats", "big", "small"]);
    }

    #[test]
    fn pid_ranking_is_priority_then_processes() {
        let mut pods = vec![
            (pod("many-high", 10, None), mem(100)),
            (pod("few", 0, None), mem(2)),
            (pod("many", 0, None), mem(50)),
        ];
        rank(Signal::PidAvailable, &mut pods);
        assert_eq!(names(&pods), vec!["many", "few", "many-high"]);
    }

    #[test]
    fn message_names_threshold_and_containers_over_request_like_go() {
        let p = pod("filler", 0, None);
        let u = PodUsage {
            disk_bytes: Some(300 << 20),
            containers: vec![ContainerUsage {
                name: "c".into(),
                ephemeral_bytes: Some(24 << 10),
                memory_bytes: Some(1 << 20),
            }],
            ..Default::default()
        };
        assert_eq!(
            eviction_message(Signal::NodeFsAvailable, &p, Some(&u), Some((107374182, 100 << 20))),
            "The node was low on resource: ephemeral-storage. Threshold quantity: 107374182, available: 100Mi. Container c was using 24Ki, request is 0, has larger consumption of ephemeral-storage. "
        );
        // within its request: not blamed
        let g = pod("g", 0, Some("64Mi"));
        let u = PodUsage {
            containers: vec![ContainerUsage {
                name: "c".into(),
                memory_bytes: Some(1 << 20),
                ephemeral_bytes: None,
            }],
            ..Default::default()
        };
        assert_eq!(
            eviction_message(
                Signal::MemoryAvailable,
                &g,
                Some(&u),
                Some((100 << 20, 50 << 20))
            ),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. "
        );
        assert_eq!(decimal_si(5000), "5k");
        assert_eq!(decimal_si(5001), "5001");
    }

    #[test]
    fn admission_under_pressure() {
        let be = pod("be", 0, None);
        let g = pod("g", 0, Some("64Mi"));
        assert!(admit(&be, &[]).is_ok());
        assert_eq!(
            admit(&be, &[NodeCondition::MemoryPressure]).unwrap_err(),
            "The node had condition: [MemoryPressure]. "
        );
        assert!(admit(&g, &[NodeCondition::MemoryPressure]).is_ok());
        assert_eq!(
            admit(
                &g,
                &[NodeCondition::MemoryPressure, NodeCondition::DiskPressure]
            )
            .unwrap_err(),
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        // tolerating the memory-pressure taint admits a BestEffort pod under memory pressure
        let mut tol = be.clone();
        tol.spec.as_mut().unwrap().tolerations =
            Some(vec![k8s_openapi::api::core::v1::Toleration {
                key: Some("node.kubernetes.io/memory-pressure".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }]);
        assert!(admit(&tol, &[NodeCondition::MemoryPressure]).is_ok());
        // critical pods always
        let mut crit = be.clone();
        crit.spec.as_mut().unwrap().priority = Some(SYSTEM_CRITICAL_PRIORITY);
        assert!(admit(&crit, &[NodeCondition::DiskPressure]).is_ok());
        assert!(is_critical(&crit));
    }
}
