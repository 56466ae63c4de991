//! Pods on this node: what the runtime holds for a pod ([`runtime`]), what to do next
//! ([`actions`], pure), how to turn a pod spec into CRI configs ([`spec`]), and the per-pod
//! workers that act ([`workers`]) — the Go kubelet's `pod_workers.go` and `kuberuntime_manager.go`.

pub mod active_deadline;
pub mod actions;
pub mod admission;
pub mod context;
pub mod dns;
pub mod envvars;
pub mod grace;
pub mod hosts;
pub mod mirror;
pub mod reasons;
pub mod runtime;
pub mod spec;
pub mod states;
mod sync;
pub mod workers;

use k8s_openapi::api::core::v1::{Container, Pod};

/// A pod's identity as the Go kubelet prints it in messages: `<name>_<namespace>(<uid>)`
/// (k/k `pkg/kubelet/util/format.Pod`).
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

/// The pod's UID (empty when absent, which the API server never sends).
pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// The pod's restart policy (`Always` when unset, as the API server defaults it).
pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// True for `hostNetwork: true` pods.
pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// True for an init container with `restartPolicy: Always` (a sidecar).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Finds a container (regular or init) of the pod by name.
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}
