//! Merging the pod sources (k/k `pkg/kubelet/config/config.go` PodConfig, and the mirror pod
//! handling of `kubelet.go` syncPod / HandlePodCleanups).
//!
//! The API server source and the static pod source (`file`) feed one stream of [`PodEvent`]s to
//! the pod workers:
//! - mirror pods from the API server are never run; they are kept aside to be matched with
//!   their static pods (and their UIDs handed to the status manager, which writes a static pod's
//!   status on its mirror pod);
//! - a static pod that appears is an `Apply`, one that disappears (file deleted or edited: an
//!   edit changes the UID) a `Delete` with its grace period;
//! - the API server's "full list done" ([`PodEvent::Synced`]) is held back until the static pod
//!   source has delivered its first list too, and carries the static pods' UIDs, so the orphan
//!   clean-up never kills a static pod (the Go kubelet waits for all sources to be seen);
//! - [`Merger::mirror_actions`] says which mirror pods to create (missing, or deleted through
//!   the API) and delete (stale hash, being deleted, or no static pod any more).
//!
//! [`Merger`] is pure; [`run`] is the task around it.

use super::file::{annotation, is_mirror, CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION};
use super::PodEvent;
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// What to do about one mirror pod.
#[derive(Debug, Clone, PartialEq)]
pub enum MirrorAction {
    /// Create the mirror pod of this static pod.
    Create(Box<Pod>),
    /// Delete this mirror pod (namespace, name, UID).
    Delete {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID (precondition).
        uid: String,
    },
}

fn key(p: &Pod) -> (String, String) {
    (
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

/// The merge state (pure).
#[derive(Debug)]
pub struct Merger {
    api_enabled: bool,
    statics: BTreeMap<String, Pod>,
    static_seen: bool,
    api_seen: bool,
    pending_synced: Option<HashSet<String>>,
    mirrors: BTreeMap<(String, String), Pod>,
}

impl Merger {
    /// A merger; a disabled source counts as seen.
    pub fn new(api_enabled: bool, static_enabled: bool) -> Self {
        Self {
            api_enabled,
            statics: BTreeMap::new(),
            static_seen: !static_enabled,
            api_seen: !api_enabled,
            pending_synced: None,
            mirrors: BTreeMap::new(),
        }
    }

    /// Whether every enabled source has delivered a complete list.
    pub fn all_synced(&self) -> bool {
        self.static_seen && self.api_seen
    }

    /// The static pods now.
    pub fn static_pods(&self) -> impl Iterator<Item = &Pod> {
        self.statics.values()
    }

    /// An event from the API server source: what to pass to the pod workers.
    pub fn on_api(&mut self, ev: PodEvent) -> Vec<PodEvent> {
        match ev {
            PodEvent::Apply(p) if is_mirror(&p) => {
                self.mirrors
                    .insert(key(&p), std::sync::Arc::unwrap_or_clone(p));
                vec![]
            }
            PodEvent::Delete(p) if is_mirror(&p) => {
                let k = key(&p);
                if self
                    .mirrors
                    .get(&k)
                    .is_some_and(|m| m.metadata.uid == p.metadata.uid)
                {
                    self.mirrors.remove(&k);
                }
                vec![]
            }
            PodEvent::Synced(mut present) => {
                self.api_seen = true;
                self.mirrors
                    .retain(|_, m| present.contains(crate::pod::uid(m)));
                present.extend(self.statics.keys().cloned());
                if self.static_seen {
                    vec![PodEvent::Synced(present)]
                } else {
                    self.pending_synced = Some(present);
                    vec![]
                }
            }
            ev => vec![ev],
        }
    }

    /// The complete list of static pods from the file source, at time `now`: what to pass to
    /// the pod workers (deletions first, then additions; an unchanged pod is not passed again).
    pub fn on_static(&mut self, pods: Vec<Pod>, now: Timestamp) -> Vec<PodEvent> {
        let mut out = Vec::new();
        let new: BTreeMap<String, Pod> = pods
            .into_iter()
            .map(|p| (crate::pod::uid(&p).to_string(), p))
            .collect();
        let gone: Vec<String> = self
            .statics
            .keys()
            .filter(|u| !new.contains_key(*u))
            .cloned()
            .collect();
        for uid in gone {
            let mut p = self.statics.remove(&uid).expect("listed");
            p.metadata.deletion_timestamp = Some(Time(now));
            p.metadata.deletion_grace_period_seconds = p
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds);
            out.push(PodEvent::Delete(std::sync::Arc::new(p)));
        }
        for (uid, mut p) in new {
            if self.statics.contains_key(&uid) {
                continue;
            }
            p.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    CONFIG_SEEN_ANNOTATION.into(),
                    crate::time::truncate(now).0.to_string(),
                );
            self.statics.insert(uid, p.clone());
            out.push(PodEvent::Apply(std::sync::Arc::new(p)));
        }
        let first = !self.static_seen;
        self.static_seen = true;
        if let Some(mut present) = self.pending_synced.take() {
            present.extend(self.statics.keys().cloned());
            out.push(PodEvent::Synced(present));
        } else if first && !self.api_enabled {
            // Standalone: the static list is the whole truth.
            out.push(PodEvent::Synced(self.statics.keys().cloned().collect()));
        }
        out
    }

    /// Which mirror pods to create and delete now (nothing before the API server's first
    /// complete list, or without an API server).
    pub fn mirror_actions(&self) -> Vec<MirrorAction> {
        if !self.api_enabled || !self.api_seen {
            return vec![];
        }
        let mut out = Vec::new();
        let mut wanted = HashSet::new();
        for s in self.statics.values() {
            let k = key(s);
            wanted.insert(k.clone());
            match self.mirrors.get(&k) {
                None => out.push(MirrorAction::Create(Box::new(s.clone()))),
                Some(m)
                    if annotation(m, CONFIG_MIRROR_ANNOTATION) != Some(crate::pod::uid(s))
                        || m.metadata.deletion_timestamp.is_some() =>
                {
                    out.push(delete_action(m))
                }
                Some(_) => {}
            }
        }
        for (k, m) in &self.mirrors {
            if !wanted.contains(k) {
                out.push(delete_action(m));
            }
        }
        out
    }

    /// Static pod UID → (its current mirror pod's UID, the mirror pod's status).
    pub fn mirror_uids(&self) -> HashMap<String, (String, PodStatus, Option<String>)> {
        self.statics
            .values()
            .filter_map(|s| {
                let m = self.mirrors.get(&key(s))?;
                (annotation(m, CONFIG_MIRROR_ANNOTATION) == Some(crate::pod::uid(s))
                    && m.metadata.deletion_timestamp.is_none())
                .then(|| {
                    (
                        crate::pod::uid(s).to_string(),
                        (
                            crate::pod::uid(m).to_string(),
                            m.status.clone().unwrap_or_default(),
                            m.metadata.resource_version.clone(),
                        ),
                    )
                })
            })
            .collect()
    }
}

fn delete_action(m: &Pod) -> MirrorAction {
    let (namespace, name) = key(m);
    MirrorAction::Delete {
        namespace,
        name,
        uid: crate::pod::uid(m).to_string(),
    }
}

/// Static pod UID → (mirror pod UID, mirror pod status and resourceVersion as last seen),
/// shared with the status manager.
pub type MirrorUids = Arc<Mutex<HashMap<String, (String, PodStatus, Option<String>)>>>;

/// What the merge task needs to manage mirror pods.
pub struct MirrorContext {
    /// API client.
    pub client: kube::Client,
    /// This node's name.
    pub node_name: String,
    /// This node as last registered or read (None before registration): its UID is the owner
    /// reference of mirror pods, so none is written before the node is registered.
    pub node: tokio::sync::watch::Receiver<Option<Arc<k8s_openapi::api::core::v1::Node>>>,
    /// Where the status manager looks up mirror pod UIDs.
    pub uids: MirrorUids,
}

/// The registered node's UID, if it is registered.
fn node_uid_of(
    node: &tokio::sync::watch::Receiver<Option<Arc<k8s_openapi::api::core::v1::Node>>>,
) -> Option<String> {
    node.borrow()
        .as_ref()
        .and_then(|n| n.metadata.uid.clone())
        .filter(|u| !u.is_empty())
}

/// How often mirror pods are re-checked without a trigger.
pub const MIRROR_RESYNC: Duration = Duration::from_secs(10);

/// Runs the merge until `cancel`: reads the sources, records each merged event in
/// `pod_manager` and feeds it to `out`, manages mirror pods, and fires `synced` once every
/// source has delivered its first complete list.
pub async fn run(
    mut api: Option<mpsc::Receiver<PodEvent>>,
    mut statics: Option<mpsc::Receiver<Vec<Pod>>>,
    out: mpsc::Sender<PodEvent>,
    mirror: Option<MirrorContext>,
    pod_manager: crate::pod::manager::PodManager,
    synced: oneshot::Sender<()>,
    cancel: CancellationToken,
) {
    let mut m = Merger::new(api.is_some(), statics.is_some());
    // Actions issued lately, not repeated until the watch has had time to show their effect.
    let mut issued: HashMap<String, std::time::Instant> = HashMap::new();
    let mut synced = Some(synced);
    let mut tick = tokio::time::interval(MIRROR_RESYNC);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let events = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = async { api.as_mut().unwrap().recv().await }, if api.is_some() => match ev {
                Some(ev) => m.on_api(ev),
                None => { api = None; continue; }
            },
            pods = async { statics.as_mut().unwrap().recv().await }, if statics.is_some() => match pods {
                Some(pods) => m.on_static(pods, Timestamp::now()),
                None => { statics = None; continue; }
            },
            _ = tick.tick() => vec![],
        };
        for ev in events {
            pod_manager.apply(&ev);
            if out.send(ev).await.is_err() {
                return;
            }
        }
        if m.all_synced() {
            if let Some(tx) = synced.take() {
                let _ = tx.send(());
            }
        }
        if let Some(ctx) = &mirror {
            *ctx.uids.lock().unwrap() = m.mirror_uids();
            issued.retain(|_, t| t.elapsed() < MIRROR_RESYNC / 2);
            let Some(node_uid) = node_uid_of(&ctx.node) else {
                // not registered yet: the next tick (or source event) tries again
                continue;
            };
            for a in m.mirror_actions() {
                let id = match &a {
                    MirrorAction::Create(p) => format!("create {}", crate::pod::uid(p)),
                    MirrorAction::Delete { uid, .. } => format!("delete {uid}"),
                };
                if issued.contains_key(&id) {
                    continue;
                }
                issued.insert(id, std::time::Instant::now());
                let client = ctx.client.clone();
                let node = ctx.node_name.clone();
                let node_uid = node_uid.clone();
                tokio::spawn(async move {
                    match a {
                        MirrorAction::Create(p) => {
                            let name = p.metadata.name.clone().unwrap_or_default();
                            match crate::pod::mirror::create(&client, &p, &node, &node_uid).await {
                                Ok(()) => {
                                    tracing::info!(pod.name = %name, pod.uid = %crate::pod::uid(&p), "mirror pod created")
                                }
                                Err(e) => {
                                    tracing::warn!(pod.name = %name, error = %e, "creating the mirror pod failed; will retry")
                                }
                            }
                        }
                        MirrorAction::Delete {
                            namespace,
                            name,
                            uid,
                        } => {
                            match crate::pod::mirror::delete(&client, &namespace, &name, &uid).await
                            {
                                Ok(()) => {
                                    tracing::info!(pod.namespace = %namespace, pod.name = %name, mirror.uid = %uid, "stale mirror pod deleted")
                                }
                                Err(e) => {
                                    tracing::warn!(pod.name = %name, error = %e, "deleting the mirror pod failed; will retry")
                                }
                            }
                        }
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::file::pod_from_manifest;
    use std::path::Path;

    fn static_pod(cmd: &str) -> Pod {
        let m = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: web}}\nspec: {{containers: [{{name: c, image: busybox, command: [{cmd}]}}]}}\n");
        pod_from_manifest(m.as_bytes(), Path::new("/m/web.yaml"), "n").unwrap()
    }

    fn api_pod(uid: &str, name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("default".into());
        p
    }

    fn mirror_of(s: &Pod, uid: &str) -> Pod {
        let mut m = crate::pod::mirror::mirror_pod_for(s, "n", "node-uid");
        m.metadata.uid = Some(uid.into());
        m
    }

    fn uids(evs: &[PodEvent]) -> Vec<String> {
        evs.iter()
            .map(|e| match e {
                PodEvent::Apply(p) => format!("apply {}", crate::pod::uid(p)),
                PodEvent::Delete(p) => format!("delete {}", crate::pod::uid(p)),
                PodEvent::Synced(s) => {
                    let mut v: Vec<_> = s.iter().cloned().collect();
                    v.sort();
                    format!("synced {}", v.join(","))
                }
            })
            .collect()
    }

    #[test]
    fn api_sync_waits_for_static_source_and_includes_static_uids() {
        let mut m = Merger::new(true, true);
        let now = Timestamp::now();
        assert_eq!(
            uids(&m.on_api(PodEvent::Apply(api_pod("a", "a").into()))),
            vec!["apply a"]
        );
        assert!(m
            .on_api(PodEvent::Synced(["a".to_string()].into()))
            .is_empty());
        assert!(!m.all_synced());
        let s = static_pod("sleep");
        let su = crate::pod::uid(&s).to_string();
        let evs = m.on_static(vec![s], now);
        let mut want = vec!["a".to_string(), su.clone()];
        want.sort();
        assert_eq!(
            uids(&evs),
            vec![format!("apply {su}"), format!("synced {}", want.join(","))]
        );
        assert!(m.all_synced());
        // config.seen is set on first sight.
        let PodEvent::Apply(p) = &evs[0] else {
            panic!()
        };
        assert!(annotation(p, CONFIG_SEEN_ANNOTATION).is_some());
        // A later API relist also carries the static UID.
        let evs = m.on_api(PodEvent::Synced(HashSet::new()));
        assert_eq!(uids(&evs), vec![format!("synced {su}")]);
    }

    #[test]
    fn edit_replaces_and_delete_removes() {
        let mut m = Merger::new(true, true);
        let now = Timestamp::now();
        let a = static_pod("sleep");
        let b = static_pod("echo");
        m.on_static(vec![a.clone()], now);
        assert!(
            m.on_static(vec![a.clone()], now).is_empty(),
            "unchanged list: nothing"
        );
        let evs = m.on_static(vec![b.clone()], now);
        assert_eq!(
            uids(&evs),
            vec![
                format!("delete {}", crate::pod::uid(&a)),
                format!("apply {}", crate::pod::uid(&b))
            ]
        );
        let PodEvent::Delete(d) = &evs[0] else {
            panic!()
        };
        assert!(d.metadata.deletion_timestamp.is_some());
        assert_eq!(d.metadata.deletion_grace_period_seconds, Some(30));
        let evs = m.on_static(vec![], now);
        assert_eq!(uids(&evs), vec![format!("delete {}", crate::pod::uid(&b))]);
    }

    #[test]
    fn mirror_pods_are_not_run_and_are_reconciled() {
        let mut m = Merger::new(true, true);
        let s = static_pod("sleep");
        m.on_static(vec![s.clone()], Timestamp::now());
        // Nothing before the API server's first list.
        assert!(m.mirror_actions().is_empty());
        m.on_api(PodEvent::Synced(HashSet::new()));
        assert!(
            matches!(&m.mirror_actions()[..], [MirrorAction::Create(p)] if crate::pod::uid(p) == crate::pod::uid(&s))
        );
        // The mirror pod appears: not passed to the workers, nothing more to do.
        assert!(m
            .on_api(PodEvent::Apply(mirror_of(&s, "m1").into()))
            .is_empty());
        assert!(m.mirror_actions().is_empty());
        assert_eq!(m.mirror_uids()[crate::pod::uid(&s)].0, "m1");
        // Deleted through the API: created again.
        assert!(m
            .on_api(PodEvent::Delete(mirror_of(&s, "m1").into()))
            .is_empty());
        assert!(matches!(&m.mirror_actions()[..], [MirrorAction::Create(_)]));
        // Being deleted (deletionTimestamp): deleted for good, then re-created.
        let mut dying = mirror_of(&s, "m2");
        dying.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        m.on_api(PodEvent::Apply(dying.into()));
        assert!(
            matches!(&m.mirror_actions()[..], [MirrorAction::Delete { uid, .. }] if uid == "m2")
        );
        assert!(m.mirror_uids().is_empty());
        // Stale hash (file edited): the old mirror pod is deleted.
        m.on_api(PodEvent::Apply(mirror_of(&s, "m3").into()));
        let edited = static_pod("echo");
        m.on_static(vec![edited.clone()], Timestamp::now());
        assert!(
            matches!(&m.mirror_actions()[..], [MirrorAction::Delete { uid, .. }] if uid == "m3")
        );
        // File gone: its mirror pod is an orphan.
        m.on_api(PodEvent::Apply(mirror_of(&edited, "m4").into()));
        m.on_static(vec![], Timestamp::now());
        assert!(
            matches!(&m.mirror_actions()[..], [MirrorAction::Delete { uid, .. }] if uid == "m4")
        );
    }

    #[test]
    fn standalone_syncs_on_first_static_list() {
        let mut m = Merger::new(false, true);
        let s = static_pod("sleep");
        let evs = m.on_static(vec![s.clone()], Timestamp::now());
        assert_eq!(
            uids(&evs),
            vec![
                format!("apply {}", crate::pod::uid(&s)),
                format!("synced {}", crate::pod::uid(&s))
            ]
        );
        assert!(m.all_synced());
        assert!(m.mirror_actions().is_empty());
    }
}
