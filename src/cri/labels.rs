//! The CRI labels and annotations the Go kubelet sets on sandboxes and containers
//! (k/k `pkg/kubelet/types/labels.go`, `pkg/kubelet/kuberuntime/labels.go`). Tools such as
//! crictl show pod and container names from these, and deckhand recovers its view of the node
//! from them after a restart (restart counts, grace periods).

/// Sandbox and container label: the pod's name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Sandbox and container label: the pod's namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Sandbox and container label: the pod's UID; deckhand's key for everything.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Container label: the container's name in the pod spec.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Container annotation: hex hash of the container spec (a changed spec restarts the container).
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
/// Container annotation: the restart count this container instance was created with.
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Container annotation: `terminationMessagePath` from the spec.
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
    "io.kubernetes.container.terminationMessagePath";
/// Container annotation: `terminationMessagePolicy` from the spec.
pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str =
    "io.kubernetes.container.terminationMessagePolicy";
/// Container annotation: the pod's `metadata.deletionGracePeriodSeconds`, when set.
pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
/// Container annotation: the pod's `spec.terminationGracePeriodSeconds`.
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Container annotation: the container's ports as JSON.
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// Container annotation: the container's preStop handler as JSON.
pub const CONTAINER_PRESTOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
