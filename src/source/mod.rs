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
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What the source tells the pod workers.
#[derive(Debug, Clone)]
pub enum PodEvent {
    /// A pod was added or changed. Shared: the pod manager and the pod worker keep this one
    /// object rather than a copy each (about 13 KB a pod: issue 15).
    Apply(Arc<Pod>),
    /// A pod object was deleted from the API server.
    Delete(Arc<Pod>),
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
    // kube's default back-off, applied here rather than with `default_backoff()` so that an
    // expired watch is not held back by it (see `relist_at_once`)
    let stream = watcher::watcher(api, cfg);
    let mut backoff = watcher::DefaultBackoff::default();
    futures::pin_mut!(stream);
    let mut listing: HashSet<String> = HashSet::new();
    let mut failing = false;
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { return };
        match &ev {
            Ok(_) => {
                kube::runtime::utils::Backoff::reset(&mut backoff);
                if std::mem::take(&mut failing) {
                    tracing::info!("pod watch resumed");
                }
            }
            Err(e) if relist_at_once(e) => {
                tracing::info!(error = %e, "pod watch expired; listing the node's pods again");
                continue;
            }
            Err(e) => {
                let wait = backoff.next().unwrap_or(std::time::Duration::from_secs(30));
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "pod watch failed; retrying with back-off until the API server answers");
                } else {
                    tracing::debug!(error = ?e, retry_in_s = wait.as_secs_f64(), "pod watch failed again");
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                    _ = API_SERVER_BACK.notified() => {
                        tracing::debug!("the API server answers again: retrying the pod watch now");
                    }
                }
                continue;
            }
        }
        let out = match ev {
            Ok(Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(Event::InitApply(mut p)) => {
                trim(&mut p);
                listing.insert(crate::pod::uid(&p).to_string());
                observe_startup(&p);
                PodEvent::Apply(Arc::new(p))
            }
            Ok(Event::InitDone) => PodEvent::Synced(std::mem::take(&mut listing)),
            Ok(Event::Apply(mut p)) => {
                trim(&mut p);
                observe_startup(&p);
                PodEvent::Apply(Arc::new(p))
            }
            Ok(Event::Delete(mut p)) => {
                trim(&mut p);
                crate::pod::startup_latency::tracker().delete(crate::pod::uid(&p));
                PodEvent::Delete(Arc::new(p))
            }
            Err(_) => continue,
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

/// Drops what the kubelet never reads from a pod as it arrives from the API server, before the
/// pod manager and the pod worker keep it (one object, shared): `metadata.managedFields`
/// (server-side apply bookkeeping; one entry per field manager, each a JSON tree of the fields
/// it owns, about a third of a pod's size). Neither the downward API nor any kubelet decision
/// reads it, and the status manager writes statuses as merge patches, so nothing is sent back
/// without it. (The Go kubelet keeps it in its pod manager; its `/pods` endpoint shows it.)
///
/// The object kept is then a copy of what was decoded: serde fills each list by pushing, which
/// doubles its capacity (one container status takes room for four, five conditions for eight),
/// while a clone allocates each list at its length. With 248 busybox pods the decoded objects
/// held 16.2 KB a pod, a clone of them 13.3 KB (heaptrack, 2026-12-06; issue 15). The node
/// keeps one object per pod for as long as it runs, so the copy is made once per watch event.
pub fn trim(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    *pod = pod.clone();
}

/// Woken when the API server answers again after failures ([`api_server_answers_again`]).
static API_SERVER_BACK: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Tells the pod source that the API server answers again (the node lease loop calls it when a
/// renewal succeeds after failures, every ≤ 7 s during an outage): a pod watch waiting out its
/// back-off (up to 30 s after a minute's outage) retries at once, so pods created after an
/// outage are seen within seconds of its end.
pub fn api_server_answers_again() {
    API_SERVER_BACK.notify_waiters();
}

/// Whether a watch error is the API server saying the watch's resource version is too old (410
/// Gone / Expired): the watcher lists again on its own, and that list must not wait for the
/// back-off of earlier failures. Seen after an API server and etcd restart: the back-off, grown
/// to its 30 s cap during the outage, kept the pod source blind for almost a minute, so a pod
/// created meanwhile started only then. (Any other error is retried with kube's default
/// back-off: 0.8 s doubling to 30 s, reset by the first event.)
pub fn relist_at_once(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn status(code: u16, reason: &str) -> Box<Status> {
        Box::new(Status::failure("m", reason).with_code(code))
    }

    #[test]
    fn trim_drops_managed_fields_and_keeps_what_the_downward_api_reads() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"app": "a"},
                "annotations": {"note": "kept"},
                "managedFields": [{
                    "manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}
                }]
            },
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}
        }))
        .unwrap();
        let before = pod.clone();
        trim(&mut pod);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.labels, before.metadata.labels);
        assert_eq!(pod.metadata.annotations, before.metadata.annotations);
        assert_eq!(
            pod.metadata.resource_version,
            before.metadata.resource_version
        );
        assert_eq!(pod.spec, before.spec);
    }

    #[test]
    fn trim_keeps_each_list_at_its_length() {
        // from text, as the watch decodes it (a decoder given a JSON value knows each
        // list's length and allocates it exactly)
        let text = serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "tolerations": [{"key": "a"}, {"key": "b"}]
            },
            "status": {
                "conditions": [
                    {"type": "A", "status": "True"}, {"type": "B", "status": "True"},
                    {"type": "C", "status": "True"}, {"type": "D", "status": "True"},
                    {"type": "E", "status": "True"}
                ],
                "containerStatuses": [{
                    "name": "c", "image": "busybox", "imageID": "", "ready": true,
                    "restartCount": 0
                }]
            }
        })
        .to_string();
        let mut pod: Pod = serde_json::from_str(&text).unwrap();
        let before = pod.clone();
        trim(&mut pod);
        assert_eq!(pod, before);
        let spec = pod.spec.as_ref().unwrap();
        let status = pod.status.as_ref().unwrap();
        // (list, length, capacity)
        for (what, len, cap) in [
            (
                "tolerations",
                2,
                spec.tolerations.as_ref().unwrap().capacity(),
            ),
            (
                "conditions",
                5,
                status.conditions.as_ref().unwrap().capacity(),
            ),
            (
                "containerStatuses",
                1,
                status.container_statuses.as_ref().unwrap().capacity(),
            ),
        ] {
            assert_eq!(cap, len, "{what}");
        }
    }

    #[test]
    fn only_an_expired_watch_skips_the_back_off() {
        let cases = [
            (watcher::Error::WatchError(status(410, "Expired")), true),
            (watcher::Error::WatchError(status(410, "Gone")), true),
            (
                watcher::Error::WatchStartFailed(kube::Error::Api(status(410, "Gone"))),
                true,
            ),
            (
                watcher::Error::WatchError(status(500, "InternalError")),
                false,
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(403, "Forbidden"))),
                false,
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(410, "Expired"))),
                false,
            ),
            (watcher::Error::NoResourceVersion, false),
        ];
        for (e, want) in cases {
            assert_eq!(relist_at_once(&e), want, "{e}");
        }
    }
}
