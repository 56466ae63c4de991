//! A pod worker's part of an in-place resize (k/k `SyncPod` → `doPodResizeAction`, and the
//! status manager's resize conditions): actuating the allocation on the running containers, and
//! the conditions and actuated resources the pod's status reports. The plan itself is
//! [`crate::kuberuntime::resize`]; what is allocated is [`crate::allocation`].

use super::runtime::PodRuntimeStatus;
use super::worker::PodWorker;
use crate::events::reason;
use crate::kuberuntime::{self, KillTarget};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;

impl PodWorker {
    /// In-place resize (k/k SyncPod → `doPodResizeAction`): brings the running containers of
    /// `pod` (which carries the allocation) from what the runtime was last given to their
    /// allocation ([`kuberuntime::resize`]): restarts for a `RestartContainer` policy, CRI
    /// updates otherwise. A failure is kept for the `PodResizeInProgress` condition (reason
    /// `Error`) with a `ResizeError` event, and retried at the next sync; `ResizeCompleted` is
    /// recorded once nothing is left. Returns the runtime state read again when containers
    /// were restarted.
    pub(super) async fn resize(
        &mut self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
    ) -> Option<PodRuntimeStatus> {
        use crate::allocation::resize_event_message;
        let ctx = self.ctx.clone();
        let uid = super::uid(pod);
        let plan = kuberuntime::resize::plan(pod, rt, |n| ctx.allocation.actuated(uid, n));
        if plan.is_empty() {
            if std::mem::take(&mut self.resizing) {
                self.resize_error = None;
                let msg = resize_event_message("Pod resize completed", pod, "");
                ctx.recorder
                    .pod(pod, None, false, reason::RESIZE_COMPLETED, msg);
            }
            return None;
        }
        self.resizing = true;
        let grace = super::grace::requested_grace_seconds(pod);
        let pod_ip = rt
            .latest_sandbox()
            .and_then(|s| s.ip.clone())
            .unwrap_or_default();
        for k in &plan.restart {
            let target = KillTarget {
                id: &k.id,
                name: &k.name,
                reason: k.reason,
                restart: true,
            };
            kuberuntime::kill_container(&ctx, pod, &target, grace, &pod_ip).await;
        }
        match kuberuntime::resize::actuate(&ctx, pod, &plan).await {
            Ok(()) => self.resize_error = None,
            Err(m) => {
                tracing::warn!(error = %m, "in-place resize failed");
                if self.resize_error.as_deref() != Some(m.as_str()) {
                    let msg = resize_event_message("Pod resize error", pod, &m);
                    ctx.recorder.pod(pod, None, true, reason::RESIZE_ERROR, msg);
                }
                self.resize_error = Some(m);
            }
        }
        if plan.restart.is_empty() {
            if self.resize_error.is_none() {
                self.resizing = false;
                let msg = resize_event_message("Pod resize completed", pod, "");
                ctx.recorder
                    .pod(pod, None, false, reason::RESIZE_COMPLETED, msg);
            }
            return None;
        }
        PodRuntimeStatus::observe(&ctx.cri, &ctx.exits, uid)
            .await
            .ok()
    }

    /// The resize conditions of `pod` for runtime state `rt`: `PodResizePending` as the
    /// dispatcher decided it, `PodResizeInProgress` while a running container does not run
    /// with its allocation yet (reason `Error` with the message when applying it failed), and
    /// the actuated resources by container name (k/k status manager's resize conditions,
    /// `convertContainerStatusResources`).
    pub(super) fn resize_inputs(
        &self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        terminal: bool,
    ) -> (
        Vec<crate::allocation::ResizeCondition>,
        BTreeMap<String, k8s_openapi::api::core::v1::ResourceRequirements>,
    ) {
        use crate::allocation::{ResizeCondition, POD_RESIZE_IN_PROGRESS, REASON_ERROR};
        let uid = super::uid(pod);
        let actuated: BTreeMap<_, _> = crate::allocation::resizable_containers(pod)
            .filter_map(|c| {
                let r = self.ctx.allocation.actuated(uid, &c.name)?;
                Some((c.name.clone(), r))
            })
            .collect();
        let mut conditions = vec![];
        if terminal || self.terminal_override.is_some() {
            return (conditions, actuated);
        }
        {
            let latest = self.rx.borrow();
            if super::uid(&latest.pod) == uid {
                conditions.extend(latest.resize_pending.clone());
            }
        }
        let plan = kuberuntime::resize::plan(pod, rt, |n| actuated.get(n).cloned());
        if !plan.is_empty() || self.resize_error.is_some() {
            conditions.push(ResizeCondition {
                type_: POD_RESIZE_IN_PROGRESS,
                reason: if self.resize_error.is_some() {
                    REASON_ERROR.into()
                } else {
                    String::new()
                },
                message: self.resize_error.clone().unwrap_or_default(),
                observed_generation: pod.metadata.generation,
            });
        }
        (conditions, actuated)
    }
}
