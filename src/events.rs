//! Events about pods and the node, as `kubectl describe` shows them. Reasons and message formats
//! are the Go kubelet's (k/k `pkg/kubelet/events/event.go` and the call sites); delivery goes
//! through kube's [`Recorder`] (events.k8s.io/v1, with series for repeats) from a background
//! task, so a slow API server never stalls a pod worker (the Go kubelet's broadcaster drops
//! events under pressure the same way).

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
    /// Warning: a pull was needed with policy Never.
    pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
    /// Warning: the image reference is invalid.
    pub const INSPECT_FAILED: &str = "InspectFailed";
    /// Warning: RunPodSandbox failed.
    pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
    /// Normal: the sandbox changed and the pod will be re-created.
    pub const SANDBOX_CHANGED: &str = "SandboxChanged";
    /// Warning: killing the pod failed.
    pub const FAILED_KILL_POD: &str = "FailedKillPod";
    /// Warning: a volume could not be set up.
    pub const FAILED_MOUNT: &str = "FailedMount";
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
}

struct Pending {
    event: Event,
    reference: ObjectReference,
}

/// A cheap, cloneable handle that queues events for the background publisher.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<Pending>,
}

impl EventRecorder {
    /// Starts the publisher task for reporting instance `node_name` (reporting controller
    /// `kubelet`, as the Go kubelet reports itself). At most 1000 events wait; beyond that new
    /// events are dropped with a log line.
    pub fn start(client: kube::Client, node_name: &str) -> Self {
        let reporter = Reporter {
            controller: "kubelet".into(),
            instance: Some(node_name.to_string()),
        };
        let recorder = Recorder::new(client, reporter);
        let (tx, mut rx) = mpsc::channel::<Pending>(1000);
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                if let Err(e) = recorder.publish(&p.event, &p.reference).await {
                    tracing::debug!(reason = %p.event.reason, error = %e, "event not recorded");
                }
            }
        });
        Self { tx }
    }

    /// A recorder that drops everything (for tools and unit tests).
    pub fn disabled() -> Self {
        let (tx, _rx) = mpsc::channel(1);
        Self { tx }
    }

    fn send(&self, warning: bool, reason: &str, message: String, reference: ObjectReference) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(truncate(message, 1024)),
            action: reason.to_string(),
            secondary: None,
        };
        if self.tx.try_send(Pending { event, reference }).is_err() {
            tracing::debug!(reason, "event queue full or closed; event dropped");
        }
    }

    /// Records an event about a pod, or about one of its containers when `container` is given
    /// (`fieldPath: spec.containers{<name>}` / `spec.initContainers{<name>}`).
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

    /// Records an event about the node.
    pub fn node(&self, node_name: &str, warning: bool, reason: &str, message: String) {
        let reference = ObjectReference {
            kind: Some("Node".into()),
            api_version: Some("v1".into()),
            name: Some(node_name.into()),
            uid: Some(node_name.into()),
            namespace: Some("default".into()),
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
