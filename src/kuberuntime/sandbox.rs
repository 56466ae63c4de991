//! Pod sandboxes: create one with its cgroup, log directory and DNS, and name the config an
//! existing one was made with (k/k `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`
//! `createPodSandbox`).

use super::{SyncContext, SyncFailed};
use crate::events::reason;
use crate::pod::runtime::SandboxStatus;
use crate::pod::spec;
use k8s_openapi::api::core::v1::Pod;

/// A sandbox that was just created and is ready.
pub struct CreatedSandbox {
    /// Its status as the runtime reports it (id, attempt, IPs).
    pub status: SandboxStatus,
    /// The config it was created with (containers are created with it).
    pub config: crate::cri::api::PodSandboxConfig,
}

/// Creates sandbox `attempt` of `pod`: DNS config (with its warnings as events), the pod
/// cgroup, the pod log directory, CRI RunPodSandbox, then reads its network status.
///
/// Errors (already recorded on the pod): the pod cgroup cannot be named or made
/// (`FailedCreatePodContainer`), or the runtime refuses the sandbox
/// (`FailedCreatePodSandBox`).
pub async fn create_sandbox(
    ctx: &SyncContext,
    pod: &Pod,
    attempt: u32,
) -> Result<CreatedSandbox, SyncFailed> {
    let (dns, dns_warnings) = crate::pod::dns::pod_dns(pod, &ctx.dns);
    for (why, msg) in dns_warnings {
        ctx.recorder.pod(pod, None, true, why, msg);
    }
    // k/k: a pod cgroup that cannot be named or made is a FailedCreatePodContainer event and a
    // failed sync
    let cgroup_failed = |e: crate::cm::CgroupError, what: &str| {
        ctx.recorder.pod(
            pod,
            None,
            true,
            reason::FAILED_CREATE_POD_CONTAINER,
            format!("unable to ensure pod container exists: {e}"),
        );
        tracing::warn!(error = %e, "{what} the pod cgroup failed");
        SyncFailed
    };
    let parent = ctx
        .cgroup_layout
        .pod_parent(pod)
        .map_err(|e| cgroup_failed(e, "naming"))?;
    // k/k createPodSandbox / namespacesForPod: the RuntimeClass's handler, before the config
    let runtime_class = pod
        .spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref());
    let handler = match ctx
        .runtime_classes
        .lookup_runtime_handler(runtime_class)
        .await
    {
        Ok(h) => h,
        Err(e) => {
            return Err(sandbox_failed(
                ctx,
                pod,
                &e.to_string(),
                "look up the runtime handler",
            ))
        }
    };
    if !handler.is_empty() {
        tracing::debug!(runtime_handler = %handler, "running pod with runtime handler");
    }
    let userns = match pod_user_namespace(ctx, pod, &handler).await {
        Ok(u) => u,
        // k/k: the sandbox config cannot be made; SyncPod records the error as is
        Err(e) => {
            return Err(sandbox_failed(
                ctx,
                pod,
                &e.to_string(),
                "generate sandbox config",
            ))
        }
    };
    let config = spec::sandbox_config(pod, attempt, &ctx.pod_logs_dir, Some(dns), parent, userns);
    if let Some(cm) = ctx.cgroups.clone() {
        // cgroupfs writes are blocking file work: off the runtime threads
        let p = pod.clone();
        match tokio::task::spawn_blocking(move || cm.ensure_pod_cgroup(&p)).await {
            Ok(r) => r.map_err(|e| cgroup_failed(e, "creating"))?,
            Err(e) => {
                tracing::warn!(error = %e, "creating the pod cgroup did not finish");
                return Err(SyncFailed);
            }
        }
    }
    let log_dir = config.log_directory.clone();
    if let Err(e) = tokio::fs::create_dir_all(&log_dir).await {
        tracing::warn!(dir = %log_dir, error = %e, "creating pod log directory failed");
    }
    let id = match ctx.cri.run_pod_sandbox(config.clone(), &handler).await {
        Ok(id) => id,
        Err(e) => {
            return Err(sandbox_failed(
                ctx,
                pod,
                &e.user_message(),
                "create sandbox",
            ))
        }
    };
    let network = match ctx.cri.pod_sandbox_status(&id).await {
        Ok(st) => st.network,
        Err(_) => None,
    };
    let ip = network
        .as_ref()
        .map(|n| n.ip.clone())
        .filter(|ip| !ip.is_empty());
    let status = SandboxStatus {
        id,
        attempt,
        ready: true,
        ip,
        additional_ips: network
            .map(|n| n.additional_ips.into_iter().map(|i| i.ip).collect())
            .unwrap_or_default(),
        created_at: ctx.clock.now().as_nanosecond() as i64,
    };
    Ok(CreatedSandbox { status, config })
}

/// Records a sandbox that could not be made (`FailedCreatePodSandBox` with `message`, as k/k
/// SyncPod words it) and logs which step (`what`) failed.
fn sandbox_failed(ctx: &SyncContext, pod: &Pod, message: &str, what: &str) -> SyncFailed {
    ctx.recorder.pod(
        pod,
        None,
        true,
        reason::FAILED_CREATE_POD_SANDBOX,
        format!("Failed to create pod sandbox: {message}"),
    );
    tracing::warn!(error = %message, "Failed to {what} for pod {}", crate::pod::format_pod(pod));
    SyncFailed
}

/// The user namespace option of `pod`'s sandbox and containers ([`crate::userns`], k/k
/// `GetOrCreateUserNamespaceMappings`): the host's unless the pod sets `hostUsers: false`; then
/// its own range, once the runtime's `Status` says the pod's runtime handler (`handler`, empty
/// for the default) supports user namespaces.
pub async fn pod_user_namespace(
    ctx: &SyncContext,
    pod: &Pod,
    handler: &str,
) -> Result<crate::cri::api::UserNamespace, crate::userns::UsernsError> {
    use crate::userns;
    if !userns::wants_user_namespace(pod) {
        return Ok(userns::node_user_namespace());
    }
    let support = match ctx.cri.status().await {
        Ok(st) => userns::handler_supports_user_namespaces(&st.runtime_handlers, handler),
        Err(e) => Err(e.user_message()),
    };
    if let Some(e) = userns::unsupported(support) {
        return Err(e);
    }
    let manager = ctx.userns.clone();
    let uid = crate::pod::uid(pod).to_string();
    tokio::task::spawn_blocking(move || manager.get_or_create(&uid))
        .await
        .unwrap_or_else(|e| Err(userns::UsernsError::Mappings(e.to_string())))
}

/// The config an existing sandbox `s` of `pod` was created with (containers created in it
/// carry it).
pub fn existing_sandbox_config(
    ctx: &SyncContext,
    pod: &Pod,
    s: &SandboxStatus,
) -> crate::cri::api::PodSandboxConfig {
    spec::sandbox_config(
        pod,
        s.attempt,
        &ctx.pod_logs_dir,
        Some(crate::pod::dns::pod_dns(pod, &ctx.dns).0),
        ctx.cgroup_layout.pod_parent(pod).unwrap_or_default(),
        ctx.userns
            .existing(crate::pod::uid(pod))
            .filter(|_| crate::userns::wants_user_namespace(pod))
            .unwrap_or_else(crate::userns::node_user_namespace),
    )
}
