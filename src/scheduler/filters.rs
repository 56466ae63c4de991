//! Filter plugins: can this pod run on this node? Pure functions of the pod (pre-computed once per
//! scheduling attempt as a [`SchedPod`]) and a [`NodeInfo`], each returning kube-scheduler's reason
//! strings (k/k `pkg/scheduler/framework/plugins/{nodeunschedulable,nodename,tainttoleration,
//! nodeaffinity,nodeports,noderesources}` at v1.36.3). They run in kube-scheduler's default order
//! and the first that rejects a node decides that node's reasons.

use super::affinity::{prefilter_node_names, PreferredNodeAffinity, RequiredNodeAffinity};
use super::nodeinfo::{host_ports, HostPort, NodeInfo};
use super::resources::{fit_request, score_request, Resource};
use super::taints::{first_untolerated, tolerated, NO_SCHEDULE, TAINT_UNSCHEDULABLE};
use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

/// `node(s) were unschedulable` (NodeUnschedulable).
pub const ERR_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// `node(s) didn't match the requested node name` (NodeName).
pub const ERR_NODE_NAME: &str = "node(s) didn't match the requested node name";
/// `node(s) had untolerated taint(s)` (TaintToleration).
pub const ERR_TAINTS: &str = "node(s) had untolerated taint(s)";
/// `node(s) didn't match Pod's node affinity/selector` (NodeAffinity).
pub const ERR_AFFINITY: &str = "node(s) didn't match Pod's node affinity/selector";
/// `pod affinity terms conflict` (NodeAffinity PreFilter: required terms pin disjoint node names).
pub const ERR_AFFINITY_CONFLICT: &str = "pod affinity terms conflict";
/// `node(s) didn't have free ports for the requested pod ports` (NodePorts).
pub const ERR_PORTS: &str = "node(s) didn't have free ports for the requested pod ports";
/// `Too many pods` (NodeResourcesFit, pod count).
pub const ERR_TOO_MANY_PODS: &str = "Too many pods";

/// Plugin names, as kube-scheduler registers them.
pub mod plugin {
    pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
    pub const NODE_NAME: &str = "NodeName";
    pub const TAINT_TOLERATION: &str = "TaintToleration";
    pub const NODE_AFFINITY: &str = "NodeAffinity";
    pub const NODE_PORTS: &str = "NodePorts";
    pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
    pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
    pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
}

/// Status codes of a rejection (`fwk.Code`): `Unschedulable` may be resolved by preempting pods
/// on the node; `UnschedulableAndUnresolvable` may not; `Error` is a plugin failure, not a
/// rejection: the attempt fails with its message (`running "VolumeBinding" filter plugin: ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unschedulable,
    UnschedulableAndUnresolvable,
    Error,
}

/// Why a node was rejected: the plugin, its code and its reasons (NodeResourcesFit may give
/// several, one per insufficient resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub plugin: &'static str,
    pub code: Code,
    pub reasons: Vec<String>,
}

impl Rejection {
    fn new(plugin: &'static str, code: Code, reason: &str) -> Self {
        Self {
            plugin,
            code,
            reasons: vec![reason.to_string()],
        }
    }
}

/// The pod being scheduled, with everything the plugins need computed once.
#[derive(Debug, Clone)]
pub struct SchedPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub node_name: Option<String>,
    pub tolerations: Vec<Toleration>,
    pub required: RequiredNodeAffinity,
    /// Node names pinned by `matchFields metadata.name In` in every required term (the
    /// NodeAffinity PreFilter result); empty when the terms conflict.
    pub pinned_node_names: Option<std::collections::BTreeSet<String>>,
    pub preferred: PreferredNodeAffinity,
    pub host_ports: Vec<HostPort>,
    /// The fit filter's request.
    pub request: Resource,
    /// (millicores, bytes) for least-allocated scoring (with 100 m / 200 MiB defaults).
    pub non_zero_request: (i64, i64),
    /// (millicores, bytes) for balanced-allocation scoring (actual requests).
    pub balanced_request: (i64, i64),
    pub priority: i32,
    pub preemption_never: bool,
    /// `status.nominatedNodeName`: the node an earlier preemption made room on.
    pub nominated_node_name: Option<String>,
    /// Topology spread constraints: the pod's own; the runner sets the system defaults for a pod
    /// without any ([`super::topology_spread::SpreadConstraints::system_defaults`]).
    pub spread: super::topology_spread::SpreadConstraints,
    /// Pod affinity and anti-affinity; the runner resolves namespace selectors
    /// ([`super::interpod_affinity::PodAffinityTerms::resolved`]).
    pub pod_affinity: Option<std::sync::Arc<super::interpod_affinity::PodAffinityTerms>>,
    /// The labels of the pod's namespace (set by the runner), which placed pods' namespace
    /// selectors match.
    pub namespace_labels: std::collections::BTreeMap<String, String>,
    /// The pod's GCE PD, AWS EBS, iSCSI and RBD volumes (VolumeRestrictions' disk conflicts).
    pub disk_volumes: Vec<k8s_openapi::api::core::v1::Volume>,
    /// The volume plugins' PreFilter results (set by the runner, [`super::volumes::pre_filter`]);
    /// `None` skips their filters.
    pub volumes: Option<std::sync::Arc<super::volumes::PodVolumeState>>,
}

impl SchedPod {
    pub fn new(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            node_name: spec
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
            required: RequiredNodeAffinity::of(pod),
            pinned_node_names: prefilter_node_names(pod),
            preferred: PreferredNodeAffinity::of(pod),
            host_ports: host_ports(pod),
            request: fit_request(pod),
            non_zero_request: score_request(pod, true),
            balanced_request: score_request(pod, false),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            preemption_never: spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never"),
            nominated_node_name: pod
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone())
                .filter(|n| !n.is_empty()),
            spread: super::topology_spread::SpreadConstraints::of(pod),
            pod_affinity: super::interpod_affinity::PodAffinityTerms::of(pod),
            namespace_labels: Default::default(),
            disk_volumes: super::volume_restrictions::disk_volumes(pod),
            volumes: None,
        }
    }
}

/// NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only pods that tolerate the
/// `node.kubernetes.io/unschedulable:NoSchedule` taint.
pub fn node_unschedulable(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    let cordoned = ni.node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    if !cordoned {
        return None;
    }
    let taint = Taint {
        key: TAINT_UNSCHEDULABLE.into(),
        effect: NO_SCHEDULE.into(),
        ..Default::default()
    };
    (!tolerated(&pod.tolerations, &taint)).then(|| {
        Rejection::new(
            plugin::NODE_UNSCHEDULABLE,
            Code::UnschedulableAndUnresolvable,
            ERR_UNSCHEDULABLE,
        )
    })
}

/// NodeName: a pod that names a node fits only that node.
pub fn node_name(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    match &pod.node_name {
        Some(n) if *n != ni.name => Some(Rejection::new(
            plugin::NODE_NAME,
            Code::UnschedulableAndUnresolvable,
            ERR_NODE_NAME,
        )),
        _ => None,
    }
}

/// TaintToleration: every NoSchedule and NoExecute taint of the node (including the node
/// lifecycle controller's `not-ready` and `unreachable` taints) must be tolerated.
pub fn taint_toleration(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    first_untolerated(ni.taints(), &pod.tolerations).map(|_| {
        Rejection::new(
            plugin::TAINT_TOLERATION,
            Code::UnschedulableAndUnresolvable,
            ERR_TAINTS,
        )
    })
}

/// NodeAffinity: `spec.nodeSelector` and required node affinity.
pub fn node_affinity(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    (!pod.required.matches(&ni.node)).then(|| {
        Rejection::new(
            plugin::NODE_AFFINITY,
            Code::UnschedulableAndUnresolvable,
            ERR_AFFINITY,
        )
    })
}

/// NodePorts: no requested host port may be in use on the node.
pub fn node_ports(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    pod.host_ports
        .iter()
        .any(|p| ni.used_ports.conflicts(p))
        .then(|| Rejection::new(plugin::NODE_PORTS, Code::Unschedulable, ERR_PORTS))
}

/// One resource the node lacks (`noderesources.InsufficientResource`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insufficient {
    pub resource: String,
    pub reason: String,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
    /// The request exceeds the node's whole allocatable: preemption cannot help.
    pub unresolvable: bool,
}

/// `noderesources.fitsRequest`: the pod count, then cpu, memory, ephemeral storage and each
/// requested scalar resource against allocatable minus what the node's pods request.
pub fn insufficient_resources(req: &Resource, ni: &NodeInfo) -> Vec<Insufficient> {
    let mut out = Vec::new();
    let alloc = &ni.allocatable;
    let used = &ni.requested;
    let pods = ni.pod_count() as i64;
    if pods + 1 > alloc.allowed_pod_number {
        out.push(Insufficient {
            resource: "pods".into(),
            reason: ERR_TOO_MANY_PODS.into(),
            requested: 1,
            used: pods,
            capacity: alloc.allowed_pod_number,
            unresolvable: false,
        });
    }
    if req.is_zero_request() {
        return out;
    }
    let mut check = |name: &str, want: i64, have: i64, in_use: i64| {
        if want > 0 && want > have - in_use {
            out.push(Insufficient {
                resource: name.to_string(),
                reason: format!("Insufficient {name}"),
                requested: want,
                used: in_use,
                capacity: have,
                unresolvable: want > have,
            });
        }
    };
    check("cpu", req.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check("memory", req.memory, alloc.memory, used.memory);
    check(
        "ephemeral-storage",
        req.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, want) in &req.scalar {
        if *want == 0 {
            continue;
        }
        check(name, *want, alloc.scalar(name), used.scalar(name));
    }
    out
}

/// NodeResourcesFit: every reason is kept; unresolvable if any request exceeds allocatable.
pub fn node_resources_fit(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    let insufficient = insufficient_resources(&pod.request, ni);
    if insufficient.is_empty() {
        return None;
    }
    let code = if insufficient.iter().any(|i| i.unresolvable) {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    Some(Rejection {
        plugin: plugin::NODE_RESOURCES_FIT,
        code,
        reasons: insufficient.into_iter().map(|i| i.reason).collect(),
    })
}

type Filter = fn(&SchedPod, &NodeInfo) -> Option<Rejection>;

/// The filters in kube-scheduler's default order (`getDefaultPlugins`); PodTopologySpread and
/// InterPodAffinity, which follow, need per-attempt counts and run in
/// [`super::schedule_one::schedule`].
pub const FILTERS: [Filter; 9] = [
    node_unschedulable,
    node_name,
    taint_toleration,
    node_affinity,
    node_ports,
    node_resources_fit,
    super::volumes::volume_restrictions,
    super::volumes::volume_binding,
    super::volumes::volume_zone,
];

/// Runs the filters in order; the first rejection decides (`RunFilterPlugins`).
pub fn run_filters(pod: &SchedPod, ni: &NodeInfo) -> Option<Rejection> {
    FILTERS.iter().find_map(|f| f(pod, ni))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::nodeinfo::PodAccount;
    use serde_json::{json, Value};
    use std::sync::Arc;

    pub(crate) fn node(v: Value) -> NodeInfo {
        let mut v = v;
        if v["status"]["allocatable"].is_null() {
            v["status"]["allocatable"] = json!({"cpu": "2", "memory": "4Gi", "pods": "110",
                "ephemeral-storage": "10Gi"});
        }
        NodeInfo::new(Arc::new(serde_json::from_value(v).unwrap()))
    }

    fn pod(spec: Value) -> SchedPod {
        let mut spec = spec;
        if spec["containers"].is_null() {
            spec["containers"] = json!([{"name": "c"}]);
        }
        SchedPod::new(
            &serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}),
            )
            .unwrap(),
        )
    }

    fn reasons(r: Option<Rejection>) -> Vec<String> {
        r.map(|r| r.reasons).unwrap_or_default()
    }

    #[test]
    fn cordoned_node_rejects_unless_tolerated() {
        let n = node(json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}));
        let r = node_unschedulable(&pod(json!({})), &n).unwrap();
        assert_eq!(r.reasons, ["node(s) were unschedulable"]);
        assert_eq!(r.code, Code::UnschedulableAndUnresolvable);
        let tol = pod(
            json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}),
        );
        assert!(node_unschedulable(&tol, &n).is_none());
        assert!(
            node_unschedulable(&pod(json!({})), &node(json!({"metadata": {"name": "n"}})))
                .is_none()
        );
    }

    #[test]
    fn node_name_must_match() {
        let n = node(json!({"metadata": {"name": "n1"}}));
        assert_eq!(
            reasons(node_name(&pod(json!({"nodeName": "n2"})), &n)),
            ["node(s) didn't match the requested node name"]
        );
        assert!(node_name(&pod(json!({"nodeName": "n1"})), &n).is_none());
        assert!(node_name(&pod(json!({})), &n).is_none());
    }

    #[test]
    fn untolerated_no_schedule_and_no_execute_taints_reject() {
        let tainted = |effect: &str| {
            node(
                json!({"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "value": "v", "effect": effect}]}}),
            )
        };
        assert_eq!(
            reasons(taint_toleration(&pod(json!({})), &tainted("NoSchedule"))),
            ["node(s) had untolerated taint(s)"]
        );
        assert!(taint_toleration(&pod(json!({})), &tainted("NoExecute")).is_some());
        assert!(taint_toleration(&pod(json!({})), &tainted("PreferNoSchedule")).is_none());
        let tol = pod(json!({"tolerations": [{"key": "k", "operator": "Equal", "value": "v"}]}));
        assert!(taint_toleration(&tol, &tainted("NoSchedule")).is_none());
    }

    #[test]
    fn not_ready_and_unreachable_taints_keep_pods_off() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let n = node(
                json!({"metadata": {"name": "n"}, "spec": {"taints": [{"key": key, "effect": "NoSchedule"}]}}),
            );
            assert!(taint_toleration(&pod(json!({})), &n).is_some(), "{key}");
            // the DefaultTolerationSeconds admission tolerations are NoExecute only
            let p = pod(
                json!({"tolerations": [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}),
            );
            assert!(
                taint_toleration(&p, &n).is_some(),
                "{key} NoSchedule vs NoExecute toleration"
            );
        }
    }

    #[test]
    fn node_selector_mismatch_message() {
        let n = node(json!({"metadata": {"name": "n", "labels": {"disk": "hdd"}}}));
        let r = node_affinity(&pod(json!({"nodeSelector": {"disk": "ssd"}})), &n).unwrap();
        assert_eq!(
            r.reasons,
            ["node(s) didn't match Pod's node affinity/selector"]
        );
        assert_eq!(r.code, Code::UnschedulableAndUnresolvable);
        assert!(node_affinity(&pod(json!({"nodeSelector": {"disk": "hdd"}})), &n).is_none());
    }

    #[test]
    fn host_port_conflict_message() {
        let mut n = node(json!({"metadata": {"name": "n"}}));
        let user: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"containerPort": 80, "hostPort": 80}]}]}}))
        .unwrap();
        n.add_pod("u", PodAccount::of(&user));
        let p = pod(
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 8080, "hostPort": 80}]}]}),
        );
        let r = node_ports(&p, &n).unwrap();
        assert_eq!(
            r.reasons,
            ["node(s) didn't have free ports for the requested pod ports"]
        );
        assert_eq!(r.code, Code::Unschedulable);
        let other = pod(
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 81}]}]}),
        );
        assert!(node_ports(&other, &n).is_none());
    }

    fn req_pod(cpu: &str, mem: &str) -> SchedPod {
        pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]}),
        )
    }

    #[test]
    fn resources_fit_lists_every_insufficient_resource() {
        let mut n = node(json!({"metadata": {"name": "n"}}));
        let r = node_resources_fit(&req_pod("3", "5Gi"), &n).unwrap();
        assert_eq!(r.reasons, ["Insufficient cpu", "Insufficient memory"]);
        assert_eq!(
            r.code,
            Code::UnschedulableAndUnresolvable,
            "more than allocatable"
        );
        // used by other pods: resolvable by preemption
        let hog: Pod = serde_json::from_value(json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1500m"}}}]}}))
        .unwrap();
        n.add_pod("hog", PodAccount::of(&hog));
        let r = node_resources_fit(&req_pod("1", "1Gi"), &n).unwrap();
        assert_eq!(r.reasons, ["Insufficient cpu"]);
        assert_eq!(r.code, Code::Unschedulable);
        assert!(
            node_resources_fit(&req_pod("500m", "1Gi"), &n).is_none(),
            "exactly fits"
        );
    }

    #[test]
    fn resources_fit_checks_ephemeral_storage_extended_resources_and_pod_count() {
        let n = node(
            json!({"metadata": {"name": "n"}, "status": {"allocatable": {
            "cpu": "2", "memory": "4Gi", "pods": "0", "ephemeral-storage": "1Gi", "example.com/gpu": "1"}}}),
        );
        let p = pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {
            "ephemeral-storage": "2Gi", "example.com/gpu": "2", "example.com/fpga": "1"}}}]}),
        );
        let mut got = reasons(node_resources_fit(&p, &n));
        got.sort();
        assert_eq!(
            got,
            [
                "Insufficient ephemeral-storage",
                "Insufficient example.com/fpga",
                "Insufficient example.com/gpu",
                "Too many pods"
            ]
        );
        // a pod that requests nothing is only checked for the pod count
        assert_eq!(
            reasons(node_resources_fit(&pod(json!({})), &n)),
            ["Too many pods"]
        );
    }

    #[test]
    fn init_containers_and_overhead_count_in_the_fit() {
        let n = node(json!({"metadata": {"name": "n"}}));
        let p = pod(json!({
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2500m"}}}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}));
        assert_eq!(reasons(node_resources_fit(&p, &n)), ["Insufficient cpu"]);
        let p = pod(json!({"overhead": {"cpu": "1"},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}]}));
        assert_eq!(reasons(node_resources_fit(&p, &n)), ["Insufficient cpu"]);
    }

    #[test]
    fn first_failing_filter_decides_in_default_order() {
        let n = node(json!({"metadata": {"name": "n"},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}));
        let r = run_filters(&req_pod("10", "1Gi"), &n).unwrap();
        assert_eq!(
            r.plugin,
            plugin::TAINT_TOLERATION,
            "taints are checked before resources"
        );
        assert!(run_filters(
            &req_pod("1", "1Gi"),
            &node(json!({"metadata": {"name": "n"}}))
        )
        .is_none());
    }
}
