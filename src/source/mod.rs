//! The pod source: a watch on the API server for the pods bound to this node
//! (`spec.nodeName=<node>` field selector), as the Go kubelet's `config/apiserver.go`. kube's
//! [`watcher`] re-lists on watch expiry (410 Gone) and retries with back-off across API server
//! restarts; after each full list the set of listed pod UIDs is reported so pods deleted while
//! the watch was down are noticed.

pub mod file;
pub mod mux;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Api;
use std::collections::HashSet;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the source tells the pod workers.
#[derive(Debug, Clone)]
pub enum PodEvent {
    /// A pod was added or changed.
    Apply(Pod),
    /// A pod object was deleted from the API server.
    Delete(Pod),
    /// A full list completed; these UIDs exist. Anything else is gone.
    Synced(HashSet<String>),
}

/// Watches pods bound to `node_name` and sends [`PodEvent`]s until `cancel`.
pub async fn run(
    client: kube::Client,
    node_name: String,
    tx: mpsc::Sender<PodEvent>,
    cancel: CancellationToken,
) {
    let api: Api<Pod> = Api::all(client);
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    let stream = watcher::watcher(api, cfg).default_backoff();
    futures::pin_mut!(stream);
    let mut listing: HashSet<String> = HashSet::new();
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        let out = match ev {
            Ok(Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(Event::InitApply(p)) => {
                listing.insert(crate::pod::uid(&p).to_string());
                observe_startup(&p);
                PodEvent::Apply(p)
            }
            Ok(Event::InitDone) => PodEvent::Synced(std::mem::take(&mut listing)),
            Ok(Event::Apply(p)) => {
                observe_startup(&p);
                PodEvent::Apply(p)
            }
            Ok(Event::Delete(p)) => {
                crate::pod::startup_latency::tracker().delete(crate::pod::uid(&p));
                PodEvent::Delete(p)
            }
            Err(e) => {
                tracing::warn!(error = ?e, "pod watch error; retrying");
                continue;
            }
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

/// Hands a watch event to the pod startup latency tracker and records the pod start it
/// completes, if any (Go `ObservedPodOnWatch` in `config/config.go`, with its log line).
fn observe_startup(pod: &Pod) {
    let tracker = crate::pod::startup_latency::tracker();
    if let Some(obs) = tracker.observed_pod_on_watch(pod, std::time::SystemTime::now()) {
        crate::pod::span(pod).in_scope(|| {
            tracing::info!(
                pod_start_slo_duration_s = obs.sli.map(|d| d.as_secs_f64()),
                pod_start_e2e_duration_s = obs.total.as_secs_f64(),
                "Observed pod startup duration"
            )
        });
        crate::server::metrics::observe_pod_startup(&obs);
    }
}

/// A cache of all Services in the cluster, for service environment variables (the Go kubelet's
/// service lister, `pkg/kubelet/kubelet.go` `serviceLister` / `serviceHasSynced`). Kept current
/// by a kube reflector; [`ServiceLister::has_synced`] turns true after the first full list.
#[derive(Clone)]
pub struct ServiceLister {
    store: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Service>,
    synced: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ServiceLister {
    /// Starts the reflector on `client` (stops with `cancel`).
    pub fn start(client: kube::Client, cancel: CancellationToken) -> ServiceLister {
        use kube::runtime::reflector;
        let (reader, writer) = reflector::store();
        let api: Api<k8s_openapi::api::core::v1::Service> = Api::all(client);
        let stream = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let synced = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lister = ServiceLister {
            store: reader.clone(),
            synced: synced.clone(),
        };
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    ev = stream.next() => match ev {
                        None => return,
                        Some(Err(e)) => tracing::warn!(error = ?e, "service watch error; retrying"),
                        Some(Ok(_)) => {}
                    },
                }
            }
        });
        tokio::spawn(async move {
            if reader.wait_until_ready().await.is_ok() {
                synced.store(true, std::sync::atomic::Ordering::Release);
            }
        });
        lister
    }

    /// Whether the first full list has been read.
    pub fn has_synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// All services in the cache.
    pub fn list(&self) -> Vec<std::sync::Arc<k8s_openapi::api::core::v1::Service>> {
        self.store.state()
    }
}
