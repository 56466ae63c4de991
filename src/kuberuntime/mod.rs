//! Carrying out a pod's sync against the container runtime, as the Go kubelet's
//! `kubeGenericRuntimeManager` does (k/k `pkg/kubelet/kuberuntime`): sandboxes
//! ([`sandbox`]), containers ([`container`]: start with image, env and mounts; kill with
//! preStop), images ([`image`]: the pull step and pull secrets; [`image_volume`]: image
//! volumes) and log files ([`logs`]).
//!
//! What to do is decided elsewhere ([`crate::pod::actions`], pure); the pod worker
//! ([`crate::pod::workers`]) owns the per-pod state and calls in here to act.

pub mod container;
pub mod image;
pub mod image_volume;
pub mod logs;
pub mod resize;
pub mod sandbox;

pub use crate::pod::context::SyncContext;
pub use container::{
    kill_container, start_container, KillTarget, StartTarget, MINIMUM_GRACE_PERIOD_SECONDS,
};

use crate::cri::labels;
use crate::events::reason;
use crate::pod::actions::KillReason;
use crate::pod::runtime::PodRuntimeStatus;
use k8s_openapi::api::core::v1::Pod;

/// A failure of one sync step, already reported on the pod (event, waiting reason, log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncFailed;

/// Stops all running containers of `pod` (in parallel, each with `grace` seconds, floored at
/// [`MINIMUM_GRACE_PERIOD_SECONDS`], preStop hooks first) and then every sandbox (k/k
/// `killPodWithSyncResult`). A sandbox that cannot be stopped is a `FailedKillPod` warning and
/// an error, so the caller tries again (a sandbox already gone is not).
pub async fn kill_pod(
    ctx: &SyncContext,
    pod: &Pod,
    rt: &PodRuntimeStatus,
    grace: i64,
) -> Result<(), SyncFailed> {
    let pod_ip = rt
        .latest_sandbox()
        .and_then(|s| s.ip.clone())
        .unwrap_or_default();
    let stops = rt.running().map(|c| {
        let pod_ip = pod_ip.as_str();
        async move {
            let k = KillTarget {
                id: &c.id,
                name: &c.name,
                reason: KillReason::Stopping,
                restart: false,
            };
            kill_container(ctx, pod, &k, grace, pod_ip).await;
        }
    });
    futures::future::join_all(stops).await;
    let mut result = Ok(());
    for s in &rt.sandboxes {
        if let Err(e) = ctx.cri.stop_pod_sandbox(&s.id).await {
            if !e.is_not_found() {
                result = Err(SyncFailed);
                ctx.recorder.pod(
                    pod,
                    None,
                    true,
                    reason::FAILED_KILL_POD,
                    format!("error killing pod: {}", e.user_message()),
                );
                if e.is_unreachable() {
                    tracing::debug!(sandbox = %s.id, error = %e, "stopping sandbox failed");
                } else {
                    tracing::warn!(sandbox = %s.id, error = %e, "stopping sandbox failed");
                }
            }
        }
    }
    result
}

/// Removes what the runtime and the node hold for pod `uid` once it is terminated: its
/// sandboxes (and with them their containers), containers left without a sandbox, its log
/// directory and legacy log links, its volumes and service-account tokens, and its cgroup.
/// Returns whether all of it is gone (k/k `podResourcesAreReclaimed`); failures are warnings
/// when `last_try`, else debug lines for a retry.
pub async fn remove_pod(ctx: &SyncContext, pod: &Pod, last_try: bool) -> bool {
    let uid = crate::pod::uid(pod).to_string();
    // a failure is a warning on the last try only; earlier ones are retried
    // (an unreachable runtime is said once for every pod by the CRI client's reachability
    // tracker)
    let warn = |what: &str, e: &dyn std::fmt::Display| {
        if last_try && ctx.cri.reachability().is_reachable() {
            tracing::warn!(error = %e, "{what}");
        } else {
            tracing::debug!(error = %e, "{what}; retrying");
        }
    };
    let mut reclaimed = true;
    match ctx.cri.list_pod_sandboxes(&[(labels::POD_UID, &uid)]).await {
        Ok(sandboxes) => {
            for s in sandboxes {
                let _ = ctx.cri.stop_pod_sandbox(&s.id).await;
                if let Err(e) = ctx.cri.remove_pod_sandbox(&s.id).await {
                    warn(&format!("removing sandbox {} failed", s.id), &e);
                    reclaimed = false;
                }
            }
        }
        Err(e) => {
            warn("listing the pod's sandboxes failed", &e);
            reclaimed = false;
        }
    }
    if let Ok(cs) = ctx.cri.list_containers(&[(labels::POD_UID, &uid)]).await {
        for c in cs {
            if let Err(e) = ctx.cri.remove_container(&c.id).await {
                warn(&format!("removing container {} failed", c.id), &e);
                reclaimed = false;
            }
        }
    }
    if pod.metadata.name.is_some() && pod.metadata.namespace.is_some() {
        let dir = crate::pod::spec::pod_log_dir(&ctx.pod_logs_dir, pod);
        logs::remove_container_log_links(pod, &ctx.pod_logs_dir).await;
        let _ = tokio::fs::remove_dir_all(&dir).await;
    }
    if let Err(e) = crate::volume::teardown(&ctx.root_dir, &uid).await {
        warn("tearing down pod volumes failed", &e);
        reclaimed = false;
    }
    crate::volume::tokens().forget_pod(&uid);
    if let Some(cm) = ctx.cgroups.clone() {
        let u = uid.clone();
        match tokio::task::spawn_blocking(move || cm.remove_pod_cgroup(&u)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn("removing the pod cgroup failed", &e);
                reclaimed = false;
            }
            Err(e) => {
                warn("removing the pod cgroup did not finish", &e);
                reclaimed = false;
            }
        }
    }
    reclaimed
}
