//! Per-node aggregate the filters and scores read: the Node, its allocatable resources, the sum of
//! the requests of the pods on it (bound and assumed), their count and the host ports they use
//! (k/k `pkg/scheduler/framework/types.go` `NodeInfo`, and `HostPortInfo` from
//! `k8s.io/kube-scheduler/framework`).

use super::resources::{node_allocatable, pod_resource, PodResource, Resource};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The host IP meaning "all addresses".
pub const BIND_ALL_HOST_IP: &str = "0.0.0.0";

/// A host port a pod asks for: (host IP, protocol, port), with the empty IP read as `0.0.0.0` and
/// the empty protocol as `TCP`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

impl HostPort {
    pub fn new(ip: &str, protocol: &str, port: i32) -> Self {
        Self {
            ip: if ip.is_empty() { BIND_ALL_HOST_IP } else { ip }.to_string(),
            protocol: if protocol.is_empty() { "TCP" } else { protocol }.to_string(),
            port,
        }
    }
}

/// The host ports of a pod: those of its regular containers and of its sidecars (init containers
/// with `restartPolicy: Always`, which run for the pod's lifetime); `util.GetHostPorts`.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    sidecars
        .chain(spec.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| {
            HostPort::new(
                p.host_ip.as_deref().unwrap_or(""),
                p.protocol.as_deref().unwrap_or(""),
                p.host_port.unwrap_or(0),
            )
        })
        .collect()
}

/// Host ports in use on a node, counted (two pods bound by name to one port do not free it for a
/// third when one of them goes; kube-scheduler keeps a plain set here).
#[derive(Debug, Clone, Default)]
pub struct HostPortInfo {
    used: HashMap<String, HashMap<(String, i32), u32>>,
}

impl HostPortInfo {
    pub fn add(&mut self, p: &HostPort) {
        *self
            .used
            .entry(p.ip.clone())
            .or_default()
            .entry((p.protocol.clone(), p.port))
            .or_insert(0) += 1;
    }

    pub fn remove(&mut self, p: &HostPort) {
        if let Some(m) = self.used.get_mut(&p.ip) {
            let key = (p.protocol.clone(), p.port);
            if let Some(n) = m.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&key);
                }
            }
            if m.is_empty() {
                self.used.remove(&p.ip);
            }
        }
    }

    /// `HostPortInfo.CheckConflict`: a wildcard request conflicts with the same protocol and port
    /// on any IP; a specific IP conflicts with that IP and with the wildcard.
    pub fn conflicts(&self, p: &HostPort) -> bool {
        if p.port <= 0 {
            return false;
        }
        let key = (p.protocol.clone(), p.port);
        if p.ip == BIND_ALL_HOST_IP {
            return self.used.values().any(|m| m.contains_key(&key));
        }
        [BIND_ALL_HOST_IP, p.ip.as_str()]
            .iter()
            .any(|ip| self.used.get(*ip).is_some_and(|m| m.contains_key(&key)))
    }

    pub fn is_empty(&self) -> bool {
        self.used.is_empty()
    }
}

/// What one pod contributes to its node, kept so that removal does not need the pod object, and
/// what preemption needs to know of it as a possible victim.
#[derive(Debug, Clone)]
pub struct PodAccount {
    pub resource: PodResource,
    pub ports: Vec<HostPort>,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `metadata.generation`, for the observedGeneration of the DisruptionTarget condition.
    pub generation: Option<i64>,
    /// `status.startTime` (`util.GetPodStartTime`; `None` reads as "now", the youngest).
    pub start_time: Option<Timestamp>,
    /// Deleted (`deletionTimestamp` set) with `DisruptionTarget=True` reason
    /// `PreemptionByScheduler`: a victim of an earlier preemption still terminating
    /// (`podTerminatingByPreemption`).
    pub terminating_by_preemption: bool,
    /// `deletionTimestamp` is set: topology spreading does not count the pod (k/k #87621).
    pub terminating: bool,
    /// Pod affinity and anti-affinity terms (InterPodAffinity), `None` for most pods.
    pub affinity: Option<Arc<super::interpod_affinity::PodAffinityTerms>>,
    /// Claim names of its `persistentVolumeClaim` volumes (`NodeInfo.PVCRefCounts`).
    pub pvcs: Vec<String>,
    /// Its GCE PD, AWS EBS, iSCSI and RBD volumes (VolumeRestrictions), usually none.
    pub disks: Vec<k8s_openapi::api::core::v1::Volume>,
}

impl PodAccount {
    pub fn of(pod: &Pod) -> Self {
        let by_preemption = pod.metadata.deletion_timestamp.is_some()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
                .is_some_and(|c| {
                    c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler")
                });
        Self {
            resource: pod_resource(pod),
            ports: host_ports(pod),
            priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            generation: pod.metadata.generation,
            start_time: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0),
            terminating_by_preemption: by_preemption,
            terminating: pod.metadata.deletion_timestamp.is_some(),
            affinity: super::interpod_affinity::PodAffinityTerms::of(pod),
            pvcs: super::volume_restrictions::claim_names(pod),
            disks: super::volume_restrictions::disk_volumes(pod),
        }
    }
}

/// One node and the pods on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    pub node: Arc<Node>,
    pub allocatable: Resource,
    /// Sum of the requests of the pods on the node.
    pub requested: Resource,
    /// Sum of the pods' cpu requests with 100 m for each container that requests none.
    pub non_zero_cpu: i64,
    /// Sum of the pods' memory requests with 200 MiB for each container that requests none.
    pub non_zero_mem: i64,
    pub used_ports: HostPortInfo,
    pods: HashMap<String, PodAccount>,
}

impl NodeInfo {
    /// The node's labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    /// The node's `spec.taints`.
    pub fn taints(&self) -> &[k8s_openapi::api::core::v1::Taint] {
        self.node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
    }

    pub fn new(node: Arc<Node>) -> Self {
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            allocatable: node_allocatable(&node),
            node,
            requested: Resource::default(),
            non_zero_cpu: 0,
            non_zero_mem: 0,
            used_ports: HostPortInfo::default(),
            pods: HashMap::new(),
        }
    }

    /// Replaces the Node object (labels, taints, allocatable may have changed), keeping the pods.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.allocatable = node_allocatable(&node);
        self.node = node;
    }

    /// Number of pods on the node.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Whether the pod with this UID is counted on the node.
    pub fn has_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The account of one pod on the node.
    pub fn pod(&self, uid: &str) -> Option<&PodAccount> {
        self.pods.get(uid)
    }

    /// The accounts of the pods on the node, by UID.
    pub fn pods(&self) -> impl Iterator<Item = (&String, &PodAccount)> {
        self.pods.iter()
    }

    /// Counts a pod on the node (replacing an earlier account of the same UID).
    pub fn add_pod(&mut self, uid: &str, account: PodAccount) {
        self.remove_pod(uid);
        self.requested.add(&account.resource.resource, 1);
        self.non_zero_cpu += account.resource.non0_cpu;
        self.non_zero_mem += account.resource.non0_mem;
        for p in &account.ports {
            self.used_ports.add(p);
        }
        self.pods.insert(uid.to_string(), account);
    }

    /// Stops counting a pod; returns whether it was counted.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(account) = self.pods.remove(uid) else {
            return false;
        };
        self.requested.add(&account.resource.resource, -1);
        self.non_zero_cpu -= account.resource.non0_cpu;
        self.non_zero_mem -= account.resource.non0_mem;
        for p in &account.ports {
            self.used_ports.remove(p);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wildcard_and_specific_host_ports_conflict_like_kube_scheduler() {
        let mut used = HostPortInfo::default();
        used.add(&HostPort::new("127.0.0.1", "TCP", 8080));
        assert!(
            used.conflicts(&HostPort::new("", "TCP", 8080)),
            "0.0.0.0 vs any IP"
        );
        assert!(
            used.conflicts(&HostPort::new("127.0.0.1", "", 8080)),
            "same IP, TCP default"
        );
        assert!(
            !used.conflicts(&HostPort::new("127.0.0.2", "TCP", 8080)),
            "other IP"
        );
        assert!(
            !used.conflicts(&HostPort::new("127.0.0.1", "UDP", 8080)),
            "other protocol"
        );
        used.add(&HostPort::new("", "UDP", 53));
        assert!(
            used.conflicts(&HostPort::new("10.0.0.1", "UDP", 53)),
            "specific vs wildcard"
        );
        used.remove(&HostPort::new("0.0.0.0", "UDP", 53));
        assert!(!used.conflicts(&HostPort::new("10.0.0.1", "UDP", 53)));
    }

    #[test]
    fn adding_and_removing_pods_keeps_sums() {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": "2", "memory": "2Gi", "pods": "10"}}}))
        .unwrap();
        let mut ni = NodeInfo::new(Arc::new(node));
        let pod: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "a",
            "resources": {"requests": {"cpu": "500m"}},
            "ports": [{"containerPort": 80, "hostPort": 8080}]}]}}))
        .unwrap();
        ni.add_pod("u1", PodAccount::of(&pod));
        ni.add_pod("u1", PodAccount::of(&pod));
        assert_eq!(ni.pod_count(), 1, "re-adding the same UID replaces it");
        assert_eq!(ni.requested.milli_cpu, 500);
        assert_eq!(
            ni.non_zero_mem,
            crate::scheduler::resources::DEFAULT_MEMORY_REQUEST
        );
        assert!(ni.used_ports.conflicts(&HostPort::new("", "TCP", 8080)));
        assert!(ni.remove_pod("u1"));
        assert_eq!(ni.requested, Resource::default());
        assert!(ni.used_ports.is_empty());
        assert!(!ni.remove_pod("u1"));
    }
}
