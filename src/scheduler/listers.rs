//! What kube-scheduler's plugins read through listers besides nodes and pods, kept as selectors
//! and labels only: the selectors of Services, ReplicationControllers, ReplicaSets and
//! StatefulSets (PodTopologySpread's default constraints) and the labels of Namespaces
//! (InterPodAffinity's namespace selectors); and the watches that keep them.

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Resource;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::JoinHandle;

type Key = (String, String);

/// The listers' contents, by namespace and name.
#[derive(Debug, Clone, Default)]
pub struct Listers {
    /// Services' `spec.selector`.
    pub services: BTreeMap<Key, BTreeMap<String, String>>,
    /// ReplicationControllers' `spec.selector`.
    pub replication_controllers: BTreeMap<Key, BTreeMap<String, String>>,
    /// ReplicaSets' `spec.selector`.
    pub replica_sets: BTreeMap<Key, LabelSelector>,
    /// StatefulSets' `spec.selector`.
    pub stateful_sets: BTreeMap<Key, LabelSelector>,
    /// Namespaces' labels, by name.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

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
    fn slot(s: &mut Listers) -> &mut BTreeMap<Key, Self::Selector>;
}

impl SelectorSource for Service {
    type Selector = BTreeMap<String, String>;
    fn selector(&self) -> Option<Self::Selector> {
        self.spec.as_ref()?.selector.clone()
    }
    fn slot(s: &mut Listers) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.services
    }
}

impl SelectorSource for ReplicationController {
    type Selector = BTreeMap<String, String>;
    fn selector(&self) -> Option<Self::Selector> {
        self.spec.as_ref()?.selector.clone()
    }
    fn slot(s: &mut Listers) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.replication_controllers
    }
}

impl SelectorSource for ReplicaSet {
    type Selector = LabelSelector;
    fn selector(&self) -> Option<Self::Selector> {
        Some(self.spec.as_ref()?.selector.clone())
    }
    fn slot(s: &mut Listers) -> &mut BTreeMap<Key, Self::Selector> {
        &mut s.replica_sets
    }
}

impl SelectorSource for StatefulSet {
    type Selector = LabelSelector;
    fn selector(&self) -> Option<Self::Selector> {
        Some(self.spec.as_ref()?.selector.clone())
    }
    fn slot(s: &mut Listers) -> &mut BTreeMap<Key, Self::Selector> {
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

fn apply<K: SelectorSource>(sources: &Mutex<Listers>, o: &K) {
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
    sources: Arc<Mutex<Listers>>,
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

/// Watches Namespaces' labels into `listers` until the task is aborted; `synced` turns true
/// after the first full list.
pub async fn watch_namespaces(
    client: kube::Client,
    listers: Arc<Mutex<Listers>>,
    synced: watch::Sender<bool>,
) {
    let api: Api<Namespace> = Api::all(client);
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let name = |n: &Namespace| n.metadata.name.clone().unwrap_or_default();
    let apply = |n: &Namespace| {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        listers.lock().unwrap().namespaces.insert(name(n), labels);
    };
    let mut seen: HashSet<String> = HashSet::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(n)) => {
                seen.insert(name(&n));
                apply(&n);
            }
            Ok(Event::InitDone) => {
                listers
                    .lock()
                    .unwrap()
                    .namespaces
                    .retain(|k, _| seen.contains(k));
                let _ = synced.send(true);
            }
            Ok(Event::Apply(n)) => apply(&n),
            Ok(Event::Delete(n)) => {
                listers.lock().unwrap().namespaces.remove(&name(&n));
            }
            Err(e) => tracing::warn!(kind = "Namespace", error = %e, "watch failed; retrying"),
        }
    }
}

/// Starts the watch of every lister; returns the tasks, and a future that completes once each has
/// listed everything once (kube-scheduler waits for its informers' caches before scheduling).
pub fn start(
    client: kube::Client,
    listers: Arc<Mutex<Listers>>,
) -> (Vec<JoinHandle<()>>, impl Future<Output = ()>) {
    let [services, rcs, rss, sss, nss] = std::array::from_fn(|_| watch::channel(false));
    let (c, l) = (&client, &listers);
    let tasks = vec![
        tokio::spawn(watch_selectors::<Service>(c.clone(), l.clone(), services.0)),
        tokio::spawn(watch_selectors::<ReplicationController>(
            c.clone(),
            l.clone(),
            rcs.0,
        )),
        tokio::spawn(watch_selectors::<ReplicaSet>(c.clone(), l.clone(), rss.0)),
        tokio::spawn(watch_selectors::<StatefulSet>(c.clone(), l.clone(), sss.0)),
        tokio::spawn(watch_namespaces(c.clone(), l.clone(), nss.0)),
    ];
    let synced = async move {
        for mut rx in [services.1, rcs.1, rss.1, sss.1, nss.1] {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    (tasks, synced)
}
