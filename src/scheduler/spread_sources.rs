//! Watches of the objects whose selectors kube-scheduler's default topology spreading reads
//! (Services, ReplicationControllers, ReplicaSets, StatefulSets: the listers PodTopologySpread
//! is built with), kept as selectors only, into a shared [`SpreadSources`].

use super::topology_spread::SpreadSources;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

type Key = (String, String);

/// An object kind whose selector default spreading reads.
pub trait SelectorSource:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    type Selector: Send;
    /// The object's selector; `None` leaves it out.
    fn selector(&self) -> Option<Self::Selector>;
    /// Where the selectors of this kind are kept.
    fn slot(s: &mut SpreadSources) -> &mut BTreeMap<Key, Self::Selector>;
}

impl SelectorSource for Service {
    type Selector = BTreeMap<String, String>;
    fn selector(&self) -> Option<Self::Selector> {
        self.spec.as_ref()?.selector.clone()
    }
    fn slot(s: &mut SpreadSources) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.services
    }
}

impl SelectorSource for ReplicationController {
    type Selector = BTreeMap<String, String>;
    fn selector(&self) -> Option<Self::Selector> {
        self.spec.as_ref()?.selector.clone()
    }
    fn slot(s: &mut SpreadSources) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.replication_controllers
    }
}

impl SelectorSource for ReplicaSet {
    type Selector = LabelSelector;
    fn selector(&self) -> Option<Self::Selector> {
        Some(self.spec.as_ref()?.selector.clone())
    }
    fn slot(s: &mut SpreadSources) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.replica_sets
    }
}

impl SelectorSource for StatefulSet {
    type Selector = LabelSelector;
    fn selector(&self) -> Option<Self::Selector> {
        Some(self.spec.as_ref()?.selector.clone())
    }
    fn slot(s: &mut SpreadSources) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.stateful_sets
    }
}

fn key_of<K: Resource>(o: &K) -> Key {
    let m = o.meta();
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
    )
}

fn apply<K: SelectorSource>(sources: &Mutex<SpreadSources>, o: &K) {
    let mut s = sources.lock().unwrap();
    match o.selector() {
        Some(sel) => K::slot(&mut s).insert(key_of(o), sel),
        None => K::slot(&mut s).remove(&key_of(o)),
    };
}

/// Watches every object of kind `K` into `sources` until the task is aborted; `synced` turns
/// true after the first full list.
pub async fn watch_selectors<K: SelectorSource>(
    client: kube::Client,
    sources: Arc<Mutex<SpreadSources>>,
    synced: watch::Sender<bool>,
) {
    let api: Api<K> = Api::all(client);
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut seen: HashSet<Key> = HashSet::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(o)) => {
                seen.insert(key_of(&o));
                apply(&sources, &o);
            }
            Ok(Event::InitDone) => {
                K::slot(&mut sources.lock().unwrap()).retain(|k, _| seen.contains(k));
                let _ = synced.send(true);
            }
            Ok(Event::Apply(o)) => apply(&sources, &o),
            Ok(Event::Delete(o)) => {
                K::slot(&mut sources.lock().unwrap()).remove(&key_of(&o));
            }
            Err(e) => tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying"),
        }
    }
}
