//! The pods this kubelet knows, by namespace and name (the Go kubelet's pod manager,
//! k/k `pkg/kubelet/pod/pod_manager.go`): every pod the merged pod sources delivered and did not
//! delete since, the API server's pods and the static pods; never a mirror pod (the merge keeps
//! those aside, and a mirror pod's name finds its static pod here).
//!
//! Written only by the pod source merge ([`crate::source::mux`]) before it hands each event to
//! the pod workers; read by the kubelet server (`/pods`, logs, exec, attach, port-forward), so
//! that a request does not cost an API round trip (and a pooled API connection) as it did, and
//! by the pod workers' periodic orphan sweep (its "which pods exist" set).

use crate::source::PodEvent;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, RwLock};

/// The pure state: pods by (namespace, name).
#[derive(Debug, Default, Clone)]
pub struct PodSet {
    pods: BTreeMap<(String, String), Arc<Pod>>,
    synced: bool,
}

fn key(p: &Pod) -> (String, String) {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

impl PodSet {
    /// Applies one merged pod source event (k/k `kubelet.HandlePodAdditions`, `…Updates` and
    /// `…Removes` calling `podManager.AddPod`, `UpdatePod` and `RemovePod`):
    /// - `Apply` adds or replaces the pod of that namespace and name (a pod re-created under
    ///   the same name replaces the old one: the API server has only the new one);
    /// - `Delete` removes it, unless the name already belongs to a newer pod (another UID);
    /// - `Synced` (a full list) keeps only the listed UIDs and marks the set complete.
    pub fn apply(&mut self, ev: &PodEvent) {
        match ev {
            PodEvent::Apply(p) => {
                self.pods.insert(key(p), p.clone());
            }
            PodEvent::Delete(p) => {
                let k = key(p);
                if self
                    .pods
                    .get(&k)
                    .is_some_and(|known| known.metadata.uid == p.metadata.uid)
                {
                    self.pods.remove(&k);
                }
            }
            PodEvent::Synced(present) => {
                self.pods
                    .retain(|_, p| present.contains(crate::pod::uid(p)));
                self.synced = true;
            }
        }
    }

    /// The pod `namespace/name` (k/k `GetPodByName`).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every pod, ordered by namespace and name (k/k `GetPods`).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.values().cloned().collect()
    }

    /// The UIDs of every pod.
    pub fn uids(&self) -> HashSet<String> {
        self.pods
            .values()
            .map(|p| crate::pod::uid(p).to_string())
            .collect()
    }

    /// Whether every pod source has delivered a full list (before that, a pod that is missing
    /// here may still exist).
    pub fn synced(&self) -> bool {
        self.synced
    }
}

/// The shared pod manager: one [`PodSet`] behind a lock, cheap to clone.
#[derive(Debug, Default, Clone)]
pub struct PodManager {
    inner: Arc<RwLock<PodSet>>,
}

impl PodManager {
    /// Applies a merged pod source event (see [`PodSet::apply`]).
    pub fn apply(&self, ev: &PodEvent) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(ev);
    }

    /// The pod `namespace/name`, if this kubelet has it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.read().get(namespace, name)
    }

    /// Every pod this kubelet has.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.read().pods()
    }

    /// The UIDs of every pod this kubelet has, once the sources have synced (`None` before).
    pub fn uids_when_synced(&self) -> Option<HashSet<String>> {
        let g = self.read();
        g.synced().then(|| g.uids())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, PodSet> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(uid.into());
        p
    }

    fn names(s: &PodSet) -> Vec<String> {
        s.pods()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}={}",
                    p.metadata.namespace.as_deref().unwrap(),
                    p.metadata.name.as_deref().unwrap(),
                    crate::pod::uid(p)
                )
            })
            .collect()
    }

    #[test]
    fn events_add_replace_and_remove_pods() {
        struct Case {
            name: &'static str,
            events: Vec<PodEvent>,
            want: Vec<&'static str>,
            synced: bool,
        }
        let cases = [
            Case {
                name: "apply adds",
                events: vec![PodEvent::Apply(pod("a", "p", "u1").into())],
                want: vec!["a/p=u1"],
                synced: false,
            },
            Case {
                name: "the same name in two namespaces is two pods",
                events: vec![
                    PodEvent::Apply(pod("b", "p", "u2").into()),
                    PodEvent::Apply(pod("a", "p", "u1").into()),
                ],
                want: vec!["a/p=u1", "b/p=u2"],
                synced: false,
            },
            Case {
                name: "a re-created pod replaces the old one",
                events: vec![
                    PodEvent::Apply(pod("a", "p", "u1").into()),
                    PodEvent::Apply(pod("a", "p", "u2").into()),
                ],
                want: vec!["a/p=u2"],
                synced: false,
            },
            Case {
                name: "delete removes",
                events: vec![
                    PodEvent::Apply(pod("a", "p", "u1").into()),
                    PodEvent::Delete(pod("a", "p", "u1").into()),
                ],
                want: vec![],
                synced: false,
            },
            Case {
                name: "a late delete of the old UID keeps the new pod",
                events: vec![
                    PodEvent::Apply(pod("a", "p", "u1").into()),
                    PodEvent::Apply(pod("a", "p", "u2").into()),
                    PodEvent::Delete(pod("a", "p", "u1").into()),
                ],
                want: vec!["a/p=u2"],
                synced: false,
            },
            Case {
                name: "a full list drops what it does not name",
                events: vec![
                    PodEvent::Apply(pod("a", "p", "u1").into()),
                    PodEvent::Apply(pod("a", "q", "u2").into()),
                    PodEvent::Synced(["u2".to_string()].into()),
                ],
                want: vec!["a/q=u2"],
                synced: true,
            },
        ];
        for c in cases {
            let mut s = PodSet::default();
            for ev in &c.events {
                s.apply(ev);
            }
            assert_eq!(names(&s), c.want, "{}", c.name);
            assert_eq!(s.synced(), c.synced, "{}", c.name);
        }
    }

    #[test]
    fn the_shared_manager_answers_lookups_and_uids_only_once_synced() {
        let m = PodManager::default();
        let reader = m.clone();
        m.apply(&PodEvent::Apply(pod("a", "p", "u1").into()));
        assert_eq!(
            reader
                .get("a", "p")
                .map(|p| crate::pod::uid(&p).to_string()),
            Some("u1".into())
        );
        assert!(reader.get("a", "q").is_none());
        assert_eq!(reader.uids_when_synced(), None);
        m.apply(&PodEvent::Synced(["u1".to_string()].into()));
        assert_eq!(reader.uids_when_synced(), Some(["u1".to_string()].into()));
        assert_eq!(reader.pods().len(), 1);
    }
}
