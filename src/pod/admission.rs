//! The kubelet's own admission of a new pod against its node (k/k
//! `pkg/kubelet/lifecycle/predicate.go`, the predicate admit handler): even a pod bound by the
//! scheduler, or created with `spec.nodeName` set, is refused when the node cannot run it: the
//! OS label or field does not match, its requests do not fit next to the pods already admitted,
//! its required node affinity or node name does not match, a host port it asks for is taken, or
//! it does not tolerate a `NoExecute` taint. A refused pod goes to phase `Failed` with the
//! reason and `Pod was rejected: <message>`, so its controller replaces it.
//!
//! [`admit`] is pure: the node object and the other admitted pods come from the caller.

use crate::scheduler::filters::{ERR_AFFINITY, ERR_NODE_NAME, ERR_PORTS};
use crate::scheduler::nodeinfo::{NodeInfo, PodAccount};
use crate::scheduler::taints::{tolerates, NO_EXECUTE};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::sync::Arc;

/// `kubernetes.io/os` label mismatch (k/k `PodOSSelectorNodeLabelDoesNotMatch`).
pub const REASON_OS_SELECTOR: &str = "PodOSSelectorNodeLabelDoesNotMatch";
/// `spec.os.name` other than this node's OS (k/k `PodOSNotSupported`).
pub const REASON_OS_NOT_SUPPORTED: &str = "PodOSNotSupported";
/// The taint message of the kubelet's check (k/k `tainttoleration.ErrReasonNotMatch`; the
/// scheduler's filter words it differently).
pub const ERR_TAINTS_NOT_TOLERATED: &str = "node(s) had taints that the pod didn't tolerate";

/// This node's operating system, as `runtime.GOOS` names it.
pub const NODE_OS: &str = "linux";

/// Why the kubelet refused a pod: the pod's `status.reason` and the message after
/// `Pod was rejected: ` (k/k `PodAdmitResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `OutOfcpu`, `NodePorts`, `NodeAffinity`, `TaintToleration`, ...
    pub reason: String,
    /// The predicate's message.
    pub message: String,
}

impl Rejection {
    fn predicate(name: &str, desc: &str) -> Self {
        Self {
            reason: name.to_string(),
            message: format!("Predicate {name} failed: {desc}"),
        }
    }
}

/// Decides whether `pod` may run on `node` next to `others` (the pods this kubelet already
/// admitted that are not terminal; `pod` itself is skipped if listed), in the Go order: OS
/// label, OS field, then the general predicates (resources, node affinity, node name, host
/// ports, and `NoExecute` taints for pods that are not static), the first failure deciding.
/// Resource units in the message are millicores for cpu and bytes otherwise, as Go prints them.
pub fn admit(pod: &Pod, node: &Node, others: &[Pod]) -> Result<(), Rejection> {
    if let Some(want) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"))
    {
        let have = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/os"))
            .map(String::as_str)
            .unwrap_or(NODE_OS);
        if want != have {
            return Err(Rejection {
                reason: REASON_OS_SELECTOR.into(),
                message:
                    "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                        .into(),
            });
        }
    }
    let spec = pod.spec.as_ref();
    if let Some(os) = spec.and_then(|s| s.os.as_ref()) {
        if os.name != NODE_OS {
            return Err(Rejection {
                reason: REASON_OS_NOT_SUPPORTED.into(),
                message: "Failed to admit pod as the OS field doesn't match node OS".into(),
            });
        }
    }
    let uid = super::uid(pod);
    let mut ni = NodeInfo::new(Arc::new(node.clone()));
    for (i, o) in others.iter().enumerate() {
        let ouid = super::uid(o);
        if ouid == uid {
            continue;
        }
        let key = if ouid.is_empty() {
            format!("#{i}")
        } else {
            ouid.to_string()
        };
        ni.add_pod(&key, PodAccount::of(o));
    }
    let sp = crate::scheduler::filters::SchedPod::new(pod);
    if let Some(i) = crate::scheduler::filters::insufficient_resources(&sp.request, &ni)
        .into_iter()
        .next()
    {
        let reason = match i.resource.as_str() {
            "cpu" => "OutOfcpu".to_string(),
            "memory" => "OutOfmemory".to_string(),
            other => format!("OutOf{other}"),
        };
        return Err(Rejection {
            reason,
            message: format!(
                "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
                i.resource, i.requested, i.used, i.capacity
            ),
        });
    }
    use crate::scheduler::filters::plugin;
    if !sp.required.matches(&ni.node) {
        return Err(Rejection::predicate(plugin::NODE_AFFINITY, ERR_AFFINITY));
    }
    if sp.node_name.as_deref().is_some_and(|n| n != ni.name) {
        return Err(Rejection::predicate(plugin::NODE_NAME, ERR_NODE_NAME));
    }
    if sp.host_ports.iter().any(|p| ni.used_ports.conflicts(p)) {
        return Err(Rejection::predicate(plugin::NODE_PORTS, ERR_PORTS));
    }
    if !crate::source::file::is_static(pod) {
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default();
        let untolerated = taints
            .iter()
            .filter(|t| t.effect == NO_EXECUTE)
            .any(|t| !sp.tolerations.iter().any(|tol| tolerates(tol, t)));
        if untolerated {
            return Err(Rejection::predicate(
                plugin::TAINT_TOLERATION,
                ERR_TAINTS_NOT_TOLERATED,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn node(extra: Value) -> Node {
        let mut v = json!({"metadata": {"name": "vm", "labels": {"kubernetes.io/os": "linux",
            "kubernetes.io/hostname": "vm", "disk": "ssd"}},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "3",
                "ephemeral-storage": "10Gi"}}});
        if let Some(spec) = extra.get("spec") {
            v["spec"] = spec.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod(uid: &str, spec: Value) -> Pod {
        let mut spec = spec;
        if spec["containers"].is_null() {
            spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
        }
        if spec["nodeName"].is_null() {
            spec["nodeName"] = json!("vm");
        }
        serde_json::from_value(
            json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": spec}),
        )
        .unwrap()
    }

    fn with_port(uid: &str, port: i32) -> Pod {
        pod(
            uid,
            json!({"containers": [{"name": "c", "image": "busybox",
            "ports": [{"containerPort": 80, "hostPort": port}]}]}),
        )
    }

    fn cpu(uid: &str, req: &str) -> Pod {
        pod(
            uid,
            json!({"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": req}}}]}),
        )
    }

    #[test]
    fn admission_table() {
        let plain = node(json!({}));
        let tainted = node(json!({"spec": {"taints": [
            {"key": "k", "value": "v", "effect": "NoExecute"},
            {"key": "soft", "effect": "NoSchedule"}]}}));
        let cases: Vec<(&str, Pod, &Node, Vec<Pod>, Option<(&str, &str)>)> = vec![
            ("fits", pod("a", json!({})), &plain, vec![], None),
            (
                "host port taken by an admitted pod",
                with_port("b", 8080),
                &plain,
                vec![with_port("a", 8080)],
                Some((
                    "NodePorts",
                    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports",
                )),
            ),
            (
                "other host port is free",
                with_port("b", 8081),
                &plain,
                vec![with_port("a", 8080)],
                None,
            ),
            (
                "its own earlier copy does not count",
                with_port("a", 8080),
                &plain,
                vec![with_port("a", 8080)],
                None,
            ),
            (
                "cpu does not fit next to the others",
                cpu("b", "1500m"),
                &plain,
                vec![cpu("a", "1")],
                Some((
                    "OutOfcpu",
                    "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000",
                )),
            ),
            (
                "pod count at allocatable",
                pod("d", json!({})),
                &plain,
                vec![pod("a", json!({})), pod("b", json!({})), pod("c", json!({}))],
                Some((
                    "OutOfpods",
                    "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
                )),
            ),
            (
                "node selector does not match",
                pod("a", json!({"nodeSelector": {"disk": "hdd"}})),
                &plain,
                vec![],
                Some((
                    "NodeAffinity",
                    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
                )),
            ),
            (
                "node selector matches",
                pod("a", json!({"nodeSelector": {"disk": "ssd"}})),
                &plain,
                vec![],
                None,
            ),
            (
                "NoExecute taint not tolerated (NoSchedule ones are the scheduler's)",
                pod("a", json!({})),
                &tainted,
                vec![],
                Some((
                    "TaintToleration",
                    "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
                )),
            ),
            (
                "NoExecute taint tolerated",
                pod(
                    "a",
                    json!({"tolerations": [{"key": "k", "operator": "Exists"}]}),
                ),
                &tainted,
                vec![],
                None,
            ),
            (
                "spec.os windows",
                pod("a", json!({"os": {"name": "windows"}})),
                &plain,
                vec![],
                Some((
                    "PodOSNotSupported",
                    "Failed to admit pod as the OS field doesn't match node OS",
                )),
            ),
        ];
        for (name, p, n, others, want) in cases {
            let got = admit(&p, n, &others).err();
            let want = want.map(|(r, m)| Rejection {
                reason: r.into(),
                message: m.into(),
            });
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn os_label_must_match_the_node() {
        let mut p = pod("a", json!({}));
        p.metadata.labels = Some([("kubernetes.io/os".to_string(), "windows".to_string())].into());
        let r = admit(&p, &node(json!({})), &[]).unwrap_err();
        assert_eq!(r.reason, REASON_OS_SELECTOR);
    }
}
