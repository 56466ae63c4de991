//! Events about pods and the node, as `kubectl describe` and `kubectl get events` show them.
//! Reasons and message formats are the Go kubelet's (k/k `pkg/kubelet/events/event.go` and the
//! call sites). Events are core/v1 Events with `source.component: kubelet`, aggregated the way
//! client-go's event correlator does: a repeat of the same (object, type, reason, message)
//! bumps `count` and `lastTimestamp` on the existing Event instead of creating a new one.
//!
//! Why not kube's `runtime::events::Recorder`: it keys repeats on (object, reason, action) and
//! not on the message, so "Failed to pull image …" and "Error: ImagePullBackOff" (both reason
//! `Failed`) would be merged into one series showing only the first message — not what a user
//! of the Go kubelet sees. Delivery runs in a background task, so a slow API server never
//! stalls a pod worker (the Go kubelet's broadcaster drops events under pressure the same way).

use crate::heap::ShrinkingMap;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

/// Event reasons the kubelet emits (k/k `pkg/kubelet/events/event.go`).
pub mod reason {
    /// Normal: a container was created.
    pub const CREATED: &str = "Created";
    /// Normal: a container was started.
    pub const STARTED: &str = "Started";
    /// Warning: an operation on a container failed (`Error: <msg>`).
    pub const FAILED: &str = "Failed";
    /// Normal: a container is being stopped.
    pub const KILLING: &str = "Killing";
    /// Normal: an image pull started.
    pub const PULLING: &str = "Pulling";
    /// Normal: an image was pulled or was already present.
    pub const PULLED: &str = "Pulled";
    /// Warning (container) / Normal (image): back-off.
    pub const BACK_OFF: &str = "BackOff";
    /// Normal: an in-place resize was accepted (k/k `events.ResizeStarted`).
    pub const RESIZE_STARTED: &str = "ResizeStarted";
    /// Normal: the runtime applied an in-place resize (k/k `events.ResizeCompleted`).
    pub const RESIZE_COMPLETED: &str = "ResizeCompleted";
    /// Warning: a resize does not fit now (k/k `events.ResizeDeferred`).
    pub const RESIZE_DEFERRED: &str = "ResizeDeferred";
    /// Warning: a resize can never fit (k/k `events.ResizeInfeasible`).
    pub const RESIZE_INFEASIBLE: &str = "ResizeInfeasible";
    /// Warning: applying a resize failed (k/k `events.ResizeError`).
    pub const RESIZE_ERROR: &str = "ResizeError";
    /// Warning: a pull was needed with policy Never.
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    /// Warning: the image reference is invalid.
    pub const INSPECT_FAILED: &str = "InspectFailed";
    /// Warning: RunPodSandbox failed.
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    /// The pod-level cgroup could not be made (k/k `events.FailedToCreatePodContainer`).
    pub const FAILED_CREATE_POD_CONTAINER: &str = "FailedCreatePodContainer";
    /// Normal: the sandbox changed and the pod will be re-created.
    pub const SANDBOX_CHANGED: &str = "SandboxChanged";
    /// Warning: a postStart hook failed.
    pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
    /// Warning: a preStop hook failed.
    pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";
    /// Warning: killing the pod failed.
    pub const FAILED_KILL_POD: &str = "FailedKillPod";
    /// Warning: a volume could not be set up.
    pub const FAILED_MOUNT: &str = "FailedMount";
    /// Warning: some of a pod's `imagePullSecrets` could not be read (Go `kubelet_pods.go`).
    pub const FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";
    /// Normal: the kubelet started.
    pub const STARTING: &str = "Starting";
    /// Normal: node conditions (`Node <n> status is now: <Reason>`).
    pub const NODE_READY: &str = "NodeReady";
    /// Normal: the node became not ready.
    pub const NODE_NOT_READY: &str = "NodeNotReady";
    /// Normal: memory pressure cleared.
    pub const NODE_HAS_SUFFICIENT_MEMORY: &str = "NodeHasSufficientMemory";
    /// Normal: no disk pressure.
    pub const NODE_HAS_NO_DISK_PRESSURE: &str = "NodeHasNoDiskPressure";
    /// Normal: enough PIDs.
    pub const NODE_HAS_SUFFICIENT_PID: &str = "NodeHasSufficientPID";
    /// Normal: memory pressure (the Go kubelet records these as Normal events).
    pub const NODE_HAS_INSUFFICIENT_MEMORY: &str = "NodeHasInsufficientMemory";
    /// Normal: disk pressure.
    pub const NODE_HAS_DISK_PRESSURE: &str = "NodeHasDiskPressure";
    /// Normal: PID pressure.
    pub const NODE_HAS_INSUFFICIENT_PID: &str = "NodeHasInsufficientPID";
}

struct Pending {
    warning: bool,
    reason: String,
    message: String,
    reference: ObjectReference,
    /// When the event was recorded: its timestamps and name come from this, not from when the
    /// publisher gets to it (client-go's `makeEvent` stamps at record time too).
    at: Timestamp,
}

/// How long an aggregated event keeps collecting repeats (client-go's correlator window, 10 min).
const AGGREGATION_WINDOW_SECONDS: i64 = 600;
/// Deadline of publishing one event (create or count update), in the spirit of client-go's
/// event broadcaster, which never blocks its callers on the API server.
pub const PUBLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How many distinct events are remembered for aggregation.
const MAX_REMEMBERED: usize = 4096;

#[derive(Clone)]
struct Seen {
    name: String,
    namespace: String,
    count: i32,
    first: Timestamp,
    last: Timestamp,
}

/// A cheap, cloneable handle that queues events for the background publisher.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Pending>,
    /// UIDs of objects gone for good ([`EventRecorder::forget_object`]); apart from the event
    /// queue, so that they never take the place of an event in it.
    forget_tx: mpsc::UnboundedSender<String>,
}

struct Publisher {
    client: kube::Client,
    node_name: String,
    seen: ShrinkingMap<String, Seen>,
}

impl Publisher {
    async fn publish(&mut self, p: Pending) {
        let at = p.at;
        let key = aggregation_key(&p);
        if self.seen.len() >= MAX_REMEMBERED {
            self.seen
                .retain(|_, s| at.as_second() - s.last.as_second() < AGGREGATION_WINDOW_SECONDS);
            if self.seen.len() >= MAX_REMEMBERED {
                self.seen.clear();
            }
        }
        if let Some(s) = self.seen.get_mut(&key).filter(|s| is_repeat(s, at)) {
            s.count += 1;
            s.last = at;
            let api: Api<Event> = Api::namespaced(self.client.clone(), &s.namespace);
            let patch = serde_json::json!({ "count": s.count, "lastTimestamp": Time(crate::time::truncate(at).0) });
            match api
                .patch(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                Err(e) => tracing::debug!(error = %e, "event update failed; creating a new event"),
            }
        }
        let mut ev = new_event(p, &self.node_name);
        let namespace = ev.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &ev).await {
            Ok(_) => {
                self.seen.insert(
                    key,
                    Seen {
                        name: ev.metadata.name.take().unwrap_or_default(),
                        namespace,
                        count: 1,
                        first: at,
                        last: at,
                    },
                );
            }
            Err(e) => {
                let reason = ev.reason.as_deref().unwrap_or_default();
                tracing::debug!(%reason, error = %e, "event not recorded")
            }
        }
    }
}

/// Whether an event recorded at `at` is a repeat to count on the Event `s` rather than a new
/// Event: within [`AGGREGATION_WINDOW_SECONDS`] of that Event's first occurrence.
fn is_repeat(s: &Seen, at: Timestamp) -> bool {
    at.as_second() - s.first.as_second() < AGGREGATION_WINDOW_SECONDS
}

/// The Event a first occurrence of `p` is posted as: named `<object>.<record time in hex
/// nanoseconds>`, both timestamps the record time in whole seconds, `count: 1`, `source` the
/// kubelet on `node_name` (client-go `tools/record` `makeEvent`; an object without a namespace,
/// such as the node, has its events in `default`).
fn new_event(p: Pending, node_name: &str) -> Event {
    let namespace = p
        .reference
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let name = format!(
        "{}.{:x}",
        p.reference.name.as_deref().unwrap_or("deckhand"),
        p.at.as_nanosecond()
    );
    let ts = crate::time::truncate(p.at);
    Event {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            ..Default::default()
        },
        involved_object: p.reference,
        reason: Some(p.reason),
        message: Some(p.message),
        type_: Some(if p.warning { "Warning" } else { "Normal" }.into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(node_name.to_string()),
        }),
        first_timestamp: Some(ts.clone()),
        last_timestamp: Some(ts),
        count: Some(1),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node_name.to_string()),
        ..Default::default()
    }
}

/// The key under which repeats of an event are aggregated: the involved object (UID first, for
/// [`forget_object`]), field path, type, reason and message (client-go's `getEventKey`).
fn aggregation_key(p: &Pending) -> String {
    format!(
        "{}/{}/{}/{}/{}/{}/{}",
        p.reference.uid.as_deref().unwrap_or(""),
        p.reference.namespace.as_deref().unwrap_or(""),
        p.reference.name.as_deref().unwrap_or(""),
        p.reference.field_path.as_deref().unwrap_or(""),
        p.warning,
        p.reason,
        p.message
    )
}

/// Drops what the aggregation remembers about the object `uid`, and gives the map's spare room
/// back when it is mostly empty ([`ShrinkingMap`]). Only for an object that can
/// have no more events (a pod deleted from the API server whose worker is done): this changes
/// no event a user sees, and frees the pod's entries now rather than when 4096 others have
/// pushed them out (client-go's LRU), which kept ~0.5 MB of small strings spread over the heap
/// after 248 pods came and went (heaptrack, 2026-12-06).
fn forget_object<V>(seen: &mut ShrinkingMap<String, V>, uid: &str) {
    if uid.is_empty() {
        return;
    }
    seen.retain(|key, _| !(key.starts_with(uid) && key.as_bytes().get(uid.len()) == Some(&b'/')));
}

impl EventRecorder {
    /// Starts the publisher task for node `node_name` (events carry `source: {component:
    /// kubelet, host: <node>}`, as the Go kubelet's). At most 1000 events wait; beyond that new
    /// events are dropped with a debug log line.
    pub fn start(client: kube::Client, node_name: &str) -> Self {
        let (tx, mut rx) = mpsc::channel::<Pending>(1000);
        let (forget_tx, mut forget_rx) = mpsc::unbounded_channel::<String>();
        let mut publisher = Publisher {
            client,
            node_name: node_name.to_string(),
            seen: ShrinkingMap::new(),
        };
        tokio::spawn(async move {
            loop {
                // Events first: a UID is forgotten only once the events queued before it are
                // published.
                let p = tokio::select! {
                    biased;
                    p = rx.recv() => match p {
                        Some(p) => p,
                        None => return,
                    },
                    Some(uid) = forget_rx.recv() => {
                        forget_object(&mut publisher.seen, &uid);
                        continue;
                    }
                };
                // a deadline, so a server that stops answering cannot stall the publisher
                // (events recorded meanwhile are dropped when the queue is full)
                if tokio::time::timeout(PUBLISH_TIMEOUT, publisher.publish(p))
                    .await
                    .is_err()
                {
                    tracing::debug!("event not published: no answer within {PUBLISH_TIMEOUT:?}");
                }
            }
        });
        Self { tx, forget_tx }
    }

    /// A recorder that only logs (standalone mode: no API server to post events to; the Go
    /// kubelet's broadcaster then only logs them too, "No api server defined - no events will be
    /// sent to API server.").
    pub fn log_only() -> Self {
        let (tx, mut rx) = mpsc::channel::<Pending>(1000);
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                tracing::info!(
                    object.kind = p.reference.kind.as_deref().unwrap_or(""),
                    object.namespace = p.reference.namespace.as_deref().unwrap_or(""),
                    object.name = p.reference.name.as_deref().unwrap_or(""),
                    r#type = if p.warning { "Warning" } else { "Normal" },
                    reason = %p.reason,
                    message = %p.message,
                    "event"
                );
            }
        });
        Self {
            tx,
            forget_tx: mpsc::unbounded_channel().0,
        }
    }

    /// A recorder that drops everything (for tools and unit tests).
    pub fn disabled() -> Self {
        let (tx, _rx) = mpsc::channel(1);
        Self {
            tx,
            forget_tx: mpsc::unbounded_channel().0,
        }
    }

    fn send(&self, warning: bool, reason: &str, message: String, reference: ObjectReference) {
        let p = Pending {
            warning,
            reason: reason.to_string(),
            message: truncate(message, 1024),
            reference,
            at: Timestamp::now(),
        };
        if self.tx.try_send(p).is_err() {
            tracing::debug!(reason, "event queue full or closed; event dropped");
        }
    }

    /// The object with `uid` can have no more events (a pod deleted from the API server whose
    /// worker is done): what the aggregation remembers about it is dropped once the events
    /// queued before this call are published ([`forget_object`]).
    pub fn forget_object(&self, uid: &str) {
        let _ = self.forget_tx.send(uid.to_string());
    }

    /// Records an event about a pod, or about one of its containers when `container` is given
    /// (`fieldPath: spec.containers{<name>}` / `spec.initContainers{<name>}` /
    /// `spec.ephemeralContainers{<name>}`).
    pub fn pod(
        &self,
        pod: &Pod,
        container: Option<&str>,
        warning: bool,
        reason: &str,
        message: String,
    ) {
        self.send(warning, reason, message, pod_reference(pod, container));
    }

    /// Records an event about the node (involvedObject kind Node, uid = node name, as the Go
    /// kubelet's node reference).
    pub fn node(&self, node_name: &str, warning: bool, reason: &str, message: String) {
        let reference = ObjectReference {
            kind: Some("Node".into()),
            name: Some(node_name.into()),
            uid: Some(node_name.into()),
            ..Default::default()
        };
        self.send(warning, reason, message, reference);
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// The object reference for a pod, or for a container in it (k/k `pkg/kubelet/container/ref.go`).
pub fn pod_reference(pod: &Pod, container: Option<&str>) -> ObjectReference {
    let field_path = container.map(|c| {
        let init = pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|ics| ics.iter().any(|ic| ic.name == c));
        if init {
            format!("spec.initContainers{{{c}}}")
        } else if crate::pod::is_ephemeral(pod, c) {
            format!("spec.ephemeralContainers{{{c}}}")
        } else {
            format!("spec.containers{{{c}}}")
        }
    });
    ObjectReference {
        kind: Some("Pod".into()),
        api_version: Some("v1".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_objects_events_are_forgotten_and_no_others() {
        let pending = |uid: &str, reason: &str| Pending {
            warning: false,
            reason: reason.into(),
            message: "m".into(),
            reference: ObjectReference {
                uid: Some(uid.into()),
                namespace: Some("ns".into()),
                name: Some("p".into()),
                ..Default::default()
            },
            at: Timestamp::UNIX_EPOCH,
        };
        let mut seen: ShrinkingMap<String, ()> = ShrinkingMap::new();
        for (uid, reason) in [
            ("u1", "Pulled"),
            ("u1", "Started"),
            ("u10", "Started"),
            ("u2", "Killing"),
        ] {
            seen.insert(aggregation_key(&pending(uid, reason)), ());
        }
        forget_object(&mut seen, "u1");
        let mut left: Vec<_> = seen.keys().map(|k| k.split('/').next().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["u10", "u2"]);
        forget_object(&mut seen, ""); // an object without a UID: nothing
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn an_event_is_stamped_when_recorded_not_when_the_publisher_gets_to_it() {
        let (tx, mut rx) = mpsc::channel(1);
        let recorder = EventRecorder {
            tx,
            forget_tx: mpsc::unbounded_channel().0,
        };
        let before = Timestamp::now();
        recorder.node("n1", false, reason::STARTING, "Starting kubelet.".into());
        let after = Timestamp::now();
        let p = rx.try_recv().unwrap();
        assert!(
            before <= p.at && p.at <= after,
            "{} not in [{before}, {after}]",
            p.at
        );

        // however late it is published, the Event carries the record time
        let at: Timestamp = "2026-12-06T20:00:00.5Z".parse().unwrap();
        let ev = new_event(Pending { at, ..p }, "n1");
        assert_eq!(
            ev.metadata.name.as_deref(),
            Some(format!("n1.{:x}", at.as_nanosecond()).as_str())
        );
        assert_eq!(ev.metadata.namespace.as_deref(), Some("default"));
        let second = Time("2026-12-06T20:00:00Z".parse().unwrap());
        assert_eq!(ev.first_timestamp, Some(second.clone()));
        assert_eq!(ev.last_timestamp, Some(second));
        assert_eq!(ev.count, Some(1));
        assert_eq!(ev.type_.as_deref(), Some("Normal"));
        let source = ev.source.unwrap();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("n1"));
    }

    #[test]
    fn a_repeat_counts_on_the_same_event_for_ten_minutes_from_its_first() {
        let first: Timestamp = "2026-12-06T20:00:00Z".parse().unwrap();
        let seen = Seen {
            name: "p.1".into(),
            namespace: "ns".into(),
            count: 3,
            first,
            last: first,
        };
        // (seconds after the first occurrence, counted on the same Event)
        let cases = [
            (0, true),
            (1, true),
            (599, true),
            (600, false),
            (3600, false),
        ];
        for (after, want) in cases {
            let at = first + std::time::Duration::from_secs(after);
            assert_eq!(is_repeat(&seen, at), want, "{after} s after");
        }
    }

    #[test]
    fn container_events_name_the_spec_list_the_container_is_in() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "containers": [{"name": "main"}],
                "initContainers": [{"name": "init"}],
                "ephemeralContainers": [{"name": "debugger"}],
            },
        }))
        .unwrap();
        // (container, fieldPath) as k/k pkg/kubelet/container/ref.go fieldPath writes them
        let cases = [
            (Some("main"), Some("spec.containers{main}")),
            (Some("init"), Some("spec.initContainers{init}")),
            (Some("debugger"), Some("spec.ephemeralContainers{debugger}")),
            (None, None),
        ];
        for (c, want) in cases {
            assert_eq!(pod_reference(&pod, c).field_path.as_deref(), want, "{c:?}");
        }
    }
}
