//! The scheduler's cache: every node and every pod bound (or assumed) to a node, folded into
//! per-node [`NodeInfo`]s that the filters and scores read as a snapshot. An assumed pod is counted
//! on its node as soon as the scheduler picks the node, before its binding is observed, so that a
//! burst of pods is not double-booked (k/k `pkg/scheduler/backend/cache`: `AssumePod`,
//! `ForgetPod`, `AddPod` confirming an assumed pod, pods on nodes not yet seen kept aside).

use super::nodeinfo::{NodeInfo, PodAccount};
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct PodState {
    node: String,
    assumed: bool,
}

#[derive(Debug)]
struct Entry {
    info: NodeInfo,
    /// False for a node only known from the pods that name it.
    present: bool,
}

/// Nodes and the pods on them.
#[derive(Debug, Default)]
pub struct Cache {
    nodes: HashMap<String, Entry>,
    /// Present nodes in the order they were added: the snapshot order.
    order: Vec<String>,
    pods: HashMap<String, PodState>,
}

fn placeholder(name: &str) -> Arc<Node> {
    let mut n = Node::default();
    n.metadata.name = Some(name.to_string());
    Arc::new(n)
}

impl Cache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a node; returns the previous Node object, if the node was known.
    pub fn set_node(&mut self, node: Arc<Node>) -> Option<Arc<Node>> {
        let name = node.metadata.name.clone().unwrap_or_default();
        match self.nodes.get_mut(&name) {
            Some(e) => {
                let old = e.present.then(|| e.info.node.clone());
                e.info.set_node(node);
                if !e.present {
                    e.present = true;
                    self.order.push(name);
                }
                old
            }
            None => {
                self.nodes.insert(
                    name.clone(),
                    Entry {
                        info: NodeInfo::new(node),
                        present: true,
                    },
                );
                self.order.push(name);
                None
            }
        }
    }

    /// Removes a node (its pods stay accounted until they go, as in kube-scheduler).
    pub fn remove_node(&mut self, name: &str) {
        if let Some(e) = self.nodes.get_mut(name) {
            e.present = false;
            e.info.set_node(placeholder(name));
            if e.info.pod_count() == 0 {
                self.nodes.remove(name);
            }
        }
        self.order.retain(|n| n != name);
    }

    /// The node's aggregate, if the node is present.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name).filter(|e| e.present).map(|e| &e.info)
    }

    /// Names of the present nodes.
    pub fn node_names(&self) -> &[String] {
        &self.order
    }

    /// The snapshot the algorithm runs on: present nodes in a stable order.
    pub fn snapshot(&self) -> Vec<&NodeInfo> {
        self.order
            .iter()
            .filter_map(|n| self.nodes.get(n).map(|e| &e.info))
            .collect()
    }

    pub fn node_count(&self) -> usize {
        self.order.len()
    }

    fn account(&mut self, uid: &str, node: &str, account: PodAccount) {
        let e = self.nodes.entry(node.to_string()).or_insert_with(|| Entry {
            info: NodeInfo::new(placeholder(node)),
            present: false,
        });
        e.info.add_pod(uid, account);
    }

    fn unaccount(&mut self, uid: &str, node: &str) {
        if let Some(e) = self.nodes.get_mut(node) {
            e.info.remove_pod(uid);
            if !e.present && e.info.pod_count() == 0 {
                self.nodes.remove(node);
            }
        }
    }

    /// Counts the pod on `node` before its binding is observed (`AssumePod`).
    pub fn assume(&mut self, pod: &Pod, node: &str) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.remove_pod(&uid);
        self.account(&uid, node, PodAccount::of(pod));
        self.pods.insert(
            uid,
            PodState {
                node: node.to_string(),
                assumed: true,
            },
        );
    }

    /// Undoes an assumption whose binding failed (`ForgetPod`); a pod already confirmed by the
    /// watch stays.
    pub fn forget(&mut self, uid: &str) {
        if self.pods.get(uid).is_some_and(|p| p.assumed) {
            self.remove_pod(uid);
        }
    }

    /// Whether the pod is assumed and not yet seen bound.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|p| p.assumed)
    }

    /// The node a pod is counted on (bound or assumed).
    pub fn pod_node(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid).map(|p| p.node.as_str())
    }

    /// A pod seen bound to `spec.nodeName` by the watch: confirms an assumption or adds it, and
    /// re-counts it if it changed (`AddPod`/`UpdatePod`). Returns the account it replaced.
    pub fn add_or_update_pod(&mut self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if node.is_empty() {
            return;
        }
        if let Some(old) = self.pods.get(&uid).cloned() {
            if old.node != node {
                self.unaccount(&uid, &old.node);
            }
        }
        self.account(&uid, &node, PodAccount::of(pod));
        self.pods.insert(
            uid,
            PodState {
                node,
                assumed: false,
            },
        );
    }

    /// The pod is gone (deleted or terminal); returns the node it was counted on.
    pub fn remove_pod(&mut self, uid: &str) -> Option<String> {
        let st = self.pods.remove(uid)?;
        self.unaccount(uid, &st.node);
        Some(st.node)
    }

    /// UIDs of every pod counted (bound or assumed).
    pub fn pod_uids(&self) -> impl Iterator<Item = &String> {
        self.pods.keys()
    }

    /// Number of pods counted.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}}))
            .unwrap(),
        )
    }

    fn pod(uid: &str, node: Option<&str>, cpu: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": cpu}}}]}}),
        )
        .unwrap()
    }

    #[test]
    fn assumed_pods_count_until_confirmed_or_forgotten() {
        let mut c = Cache::new();
        c.set_node(node("a"));
        c.assume(&pod("p", None, "500m"), "a");
        assert_eq!(c.node("a").unwrap().requested.milli_cpu, 500);
        assert!(c.is_assumed("p"));
        // the watch sees the binding: confirmed, still counted once
        c.add_or_update_pod(&pod("p", Some("a"), "500m"));
        assert!(!c.is_assumed("p"));
        assert_eq!(c.node("a").unwrap().requested.milli_cpu, 500);
        assert_eq!(c.node("a").unwrap().pod_count(), 1);
        c.forget("p");
        assert_eq!(
            c.node("a").unwrap().pod_count(),
            1,
            "confirmed pods are not forgotten"
        );

        c.assume(&pod("q", None, "1"), "a");
        c.forget("q");
        assert_eq!(c.node("a").unwrap().requested.milli_cpu, 500);
    }

    #[test]
    fn pods_on_unknown_nodes_are_kept_aside_until_the_node_appears() {
        let mut c = Cache::new();
        c.add_or_update_pod(&pod("p", Some("late"), "1"));
        assert!(c.node("late").is_none());
        assert!(c.snapshot().is_empty());
        c.set_node(node("late"));
        assert_eq!(c.node("late").unwrap().requested.milli_cpu, 1000);
        c.remove_node("late");
        assert!(c.snapshot().is_empty());
        assert_eq!(c.remove_pod("p").as_deref(), Some("late"));
    }

    #[test]
    fn snapshot_keeps_insertion_order_and_set_node_reports_the_old_object() {
        let mut c = Cache::new();
        assert!(c.set_node(node("b")).is_none());
        c.set_node(node("a"));
        assert!(c.set_node(node("b")).is_some());
        let names: Vec<&str> = c.snapshot().iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
    }
}
