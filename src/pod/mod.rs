//! Pods on this node: what the runtime holds for a pod ([`runtime`]), what to do next
//! ([`actions`], pure), how to turn a pod spec into CRI configs ([`spec`]), and the per-pod
//! workers that act ([`workers`]) — the Go kubelet's `pod_workers.go` and `kuberuntime_manager.go`.

pub mod actions;
pub mod active_deadline;
pub mod admission;
pub mod cleanup;
pub mod context;
pub mod dns;
pub mod envvars;
pub mod ephemeral;
pub mod grace;
pub mod hash;
pub mod hosts;
pub mod housekeeping;
pub mod manager;
pub mod mirror;
pub mod reasons;
mod resize;
pub mod runtime;
pub mod security;
pub mod spec;
pub mod startup_latency;
pub mod states;
mod sync;
mod worker;
pub mod workers;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use std::borrow::Cow;

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

/// The tracing span of a pod's log lines: `pod{pod.namespace, pod.name, pod.uid}`.
pub fn span(pod: &Pod) -> tracing::Span {
    tracing::info_span!(
        "pod",
        pod.namespace = pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.name = pod.metadata.name.as_deref().unwrap_or(""),
        pod.uid = uid(pod)
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

/// Finds an ephemeral container of the pod by name (`spec.ephemeralContainers`).
pub fn find_ephemeral<'a>(pod: &'a Pod, name: &str) -> Option<&'a EphemeralContainer> {
    pod.spec
        .as_ref()?
        .ephemeral_containers
        .iter()
        .flatten()
        .find(|c| c.name == name)
}

/// True when `name` is one of the pod's ephemeral containers.
pub fn is_ephemeral(pod: &Pod, name: &str) -> bool {
    find_ephemeral(pod, name).is_some()
}

/// An ephemeral container as a [`Container`], the way the Go kubelet runs one: k/k converts
/// `EphemeralContainerCommon` to `v1.Container` (`ephemeralContainerStartSpec`,
/// `convertStatusToAPIStatus`); `targetContainerName` is the only field that does not carry
/// over (it selects the PID namespace, see [`actions::PidTarget`]).
pub fn ephemeral_as_container(ec: &EphemeralContainer) -> Container {
    let ec = ec.clone();
    Container {
        args: ec.args,
        command: ec.command,
        env: ec.env,
        env_from: ec.env_from,
        image: ec.image,
        image_pull_policy: ec.image_pull_policy,
        lifecycle: ec.lifecycle,
        liveness_probe: ec.liveness_probe,
        name: ec.name,
        ports: ec.ports,
        readiness_probe: ec.readiness_probe,
        resize_policy: ec.resize_policy,
        resources: ec.resources,
        restart_policy: ec.restart_policy,
        restart_policy_rules: ec.restart_policy_rules,
        security_context: ec.security_context,
        startup_probe: ec.startup_probe,
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        termination_message_path: ec.termination_message_path,
        termination_message_policy: ec.termination_message_policy,
        tty: ec.tty,
        volume_devices: ec.volume_devices,
        volume_mounts: ec.volume_mounts,
        working_dir: ec.working_dir,
    }
}

/// Finds any container of the pod by name: regular or init (borrowed), else ephemeral
/// (converted by [`ephemeral_as_container`]) — k/k `kubecontainer.GetContainerSpec`. For the
/// code that starts and stops containers; probes and readiness use [`find_container`], which
/// leaves ephemeral containers out (they have no probes and never count for readiness).
pub fn find_any_container<'a>(pod: &'a Pod, name: &str) -> Option<Cow<'a, Container>> {
    find_container(pod, name)
        .map(Cow::Borrowed)
        .or_else(|| find_ephemeral(pod, name).map(|ec| Cow::Owned(ephemeral_as_container(ec))))
}
