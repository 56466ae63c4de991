//! In-place pod resize, the runtime side (k/k `kuberuntime_manager.go`
//! `computePodResizeAction` and `doPodResizeAction`): bring each running container from the
//! resources the runtime was last given (actuated, [`crate::allocation::AllocationManager`])
//! to the ones allocated to it.
//!
//! - A container whose changed resource has `resizePolicy` `RestartContainer` is restarted
//!   (killed with `Container <c> resize requires restart`; the next sync starts it with the new
//!   resources); otherwise (`NotRequired`, the default) the runtime updates its cgroup in place
//!   through CRI `UpdateContainerResources`.
//! - The pod cgroup is raised to the larger of its old and new settings before any container
//!   is updated and set to the new ones after, and containers that shrink are updated before
//!   those that grow, so no container's limit is ever above its pod's on the way.
//!
//! [`plan`] decides (pure); [`actuate`] does it.

use super::SyncContext;
use crate::allocation::{self, resources_equal};
use crate::cri::api;
use crate::pod::reasons::{Kill, KillReason};
use crate::pod::runtime::{ContainerState, PodRuntimeStatus};
use crate::resource;
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

/// One container to update in place.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerUpdate {
    /// Runtime id of the running instance.
    pub id: String,
    /// Spec name.
    pub name: String,
    /// The allocated resources to apply.
    pub resources: ResourceRequirements,
    /// True when no cpu or memory amount goes down (applied after the shrinking ones).
    pub grows: bool,
}

/// What a resize needs from the runtime now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResizePlan {
    /// Containers to restart for their resize policy.
    pub restart: Vec<Kill>,
    /// Containers to update in place, shrinking ones first.
    pub update: Vec<ContainerUpdate>,
}

impl ResizePlan {
    /// Nothing to do: every running container runs with its allocation.
    pub fn is_empty(&self) -> bool {
        self.restart.is_empty() && self.update.is_empty()
    }
}

/// The amounts a resize compares (k/k `resourceRequirements`): memory limit and request in
/// bytes, cpu limit and request in millicores (0 when absent).
fn amounts(r: &ResourceRequirements) -> [(&'static str, i128); 4] {
    let get = |m: &Option<std::collections::BTreeMap<String, _>>, name: &str| {
        m.as_ref()
            .and_then(|m| m.get(name))
            .and_then(resource::quantity_milli)
            .unwrap_or(0)
    };
    [
        (resource::MEMORY, get(&r.limits, resource::MEMORY)),
        (resource::MEMORY, get(&r.requests, resource::MEMORY)),
        (resource::CPU, get(&r.limits, resource::CPU)),
        (resource::CPU, get(&r.requests, resource::CPU)),
    ]
}

fn restart_required(c: &Container, resource_name: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource_name && p.restart_policy == "RestartContainer")
}

/// The resize work for `pod` (its spec carrying the allocation) given what the runtime holds
/// and `actuated` (the resources each container was last given, by name). Only running
/// containers are resized; one without an actuated record is taken to run with its
/// allocation (created before deckhand kept the record).
pub fn plan(
    pod: &Pod,
    rt: &PodRuntimeStatus,
    actuated: impl Fn(&str) -> Option<ResourceRequirements>,
) -> ResizePlan {
    let mut out = ResizePlan::default();
    let mut grow = Vec::new();
    for c in allocation::resizable_containers(pod) {
        let Some(inst) = rt
            .latest(&c.name)
            .filter(|i| i.state == ContainerState::Running)
        else {
            continue;
        };
        let desired = c.resources.clone().unwrap_or_default();
        let Some(current) = actuated(&c.name) else {
            continue;
        };
        if resources_equal(&desired, &current) {
            continue;
        }
        let (d, cur) = (amounts(&desired), amounts(&current));
        let changed: Vec<(&str, i128, i128)> = d
            .iter()
            .zip(cur.iter())
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, b)| (a.0, a.1, b.1))
            .collect();
        if changed.is_empty() {
            // other resources only (e.g. ephemeral-storage): nothing for the runtime
            continue;
        }
        if changed.iter().any(|(r, _, _)| restart_required(c, r)) {
            out.restart.push(Kill {
                id: inst.id.clone(),
                name: c.name.clone(),
                reason: KillReason::ResizeRestart,
                restart: true,
            });
            continue;
        }
        let u = ContainerUpdate {
            id: inst.id.clone(),
            name: c.name.clone(),
            resources: desired,
            grows: changed.iter().all(|(_, new, old)| new >= old),
        };
        if u.grows {
            grow.push(u);
        } else {
            out.update.push(u);
        }
    }
    out.update.extend(grow);
    out
}

/// `pod` with each resizable container's resources as actuated (for the pod cgroup the
/// runtime has now).
fn actuated_pod(pod: &Pod, ctx: &SyncContext) -> Pod {
    let uid = crate::pod::uid(pod);
    let mut info = allocation::allocation_from_pod(pod);
    for (name, r) in info.containers.iter_mut() {
        if let Some(a) = ctx.allocation.actuated(uid, name) {
            *r = a;
        }
    }
    allocation::pod_with_allocation(pod, &info).0
}

async fn set_pod_cgroup(
    ctx: &SyncContext,
    pod: &Pod,
    rc: crate::cm::ResourceConfig,
) -> Result<(), String> {
    let Some(cm) = ctx.cgroups.clone() else {
        return Ok(());
    };
    let p = pod.clone();
    match tokio::task::spawn_blocking(move || cm.set_pod_cgroup(&p, &rc)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Carries out the in-place updates of `plan` for `pod` (its spec carrying the allocation):
/// the pod cgroup raised to the larger of old and new, the containers updated through CRI
/// (each recorded as actuated once the runtime took it), then the pod cgroup set to the new
/// settings. Stops at the first failure and returns its message (the caller reports it as
/// the `PodResizeInProgress` error; the next sync retries).
pub async fn actuate(ctx: &SyncContext, pod: &Pod, plan: &ResizePlan) -> Result<(), String> {
    if plan.update.is_empty() {
        return Ok(());
    }
    let uid = crate::pod::uid(pod);
    let old = crate::cm::pod_resource_config(&actuated_pod(pod, ctx));
    let new = crate::cm::pod_resource_config(pod);
    let through = old.max(&new);
    if through != old {
        set_pod_cgroup(ctx, pod, through.clone()).await?;
    }
    for u in &plan.update {
        let Some(c) = allocation::resizable_containers(pod).find(|c| c.name == u.name) else {
            continue;
        };
        let mut linux: api::LinuxContainerResources = crate::pod::spec::linux_resources(c);
        if ctx.memory_capacity_bytes > 0 {
            linux.oom_score_adj = resource::oom_score_adj(pod, c, ctx.memory_capacity_bytes);
        }
        ctx.cri
            .update_container_resources(&u.id, linux)
            .await
            .map_err(|e| e.user_message())?;
        ctx.allocation
            .set_actuated(uid, &u.name, u.resources.clone());
    }
    if new != through {
        set_pod_cgroup(ctx, pod, new).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::runtime::{ContainerStatus, SandboxStatus};

    fn pod(policy: Option<&str>) -> Pod {
        let mut c1 = serde_json::json!({"name": "c1", "image": "busybox",
            "resources": {"requests": {"cpu": "25m", "memory": "40Mi"},
                          "limits": {"cpu": "25m", "memory": "40Mi"}}});
        if let Some(p) = policy {
            c1["resizePolicy"] =
                serde_json::json!([{"resourceName": "memory", "restartPolicy": p}]);
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [c1,
                {"name": "c2", "image": "busybox",
                 "resources": {"requests": {"cpu": "15m", "memory": "30Mi"},
                               "limits": {"cpu": "15m", "memory": "30Mi"}}},
                {"name": "c3", "image": "busybox"}]}
        }))
        .unwrap()
    }

    fn rr(cpu: &str, mem: &str) -> ResourceRequirements {
        serde_json::from_value(serde_json::json!({
            "requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}))
        .unwrap()
    }

    fn running(names: &[&str]) -> PodRuntimeStatus {
        PodRuntimeStatus {
            sandboxes: vec![SandboxStatus {
                id: "s".into(),
                attempt: 0,
                ready: true,
                ip: Some("10.244.0.2".into()),
                additional_ips: vec![],
                created_at: 1,
            }],
            containers: names
                .iter()
                .map(|n| ContainerStatus {
                    id: format!("{n}-id"),
                    sandbox_id: "s".into(),
                    name: n.to_string(),
                    attempt: 0,
                    state: ContainerState::Running,
                    created_at: 1,
                    started_at: 1,
                    finished_at: 0,
                    exit_code: 0,
                    reason: String::new(),
                    message: String::new(),
                    image: String::new(),
                    image_ref: String::new(),
                    hash: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn running_containers_move_to_their_allocation_shrinking_ones_first() {
        let p = pod(None);
        // c1 grows from 20m/35Mi, c2 shrinks from 20m/35Mi, c3 has nothing to change
        let act = |n: &str| match n {
            "c1" | "c2" => Some(rr("20m", "35Mi")),
            _ => Some(ResourceRequirements::default()),
        };
        let got = plan(&p, &running(&["c1", "c2", "c3"]), act);
        assert!(got.restart.is_empty());
        let order: Vec<(&str, bool)> = got
            .update
            .iter()
            .map(|u| (u.name.as_str(), u.grows))
            .collect();
        assert_eq!(order, vec![("c2", false), ("c1", true)]);
        assert_eq!(got.update[1].resources, rr("25m", "40Mi"));
        assert_eq!(got.update[1].id, "c1-id");
    }

    #[test]
    fn nothing_to_do_when_actuated_matches_or_the_container_does_not_run() {
        let p = pod(None);
        let same = |n: &str| match n {
            "c1" => Some(rr("25m", "40Mi")),
            "c2" => Some(rr("0.015", "30Mi")),
            _ => Some(ResourceRequirements::default()),
        };
        assert!(
            plan(&p, &running(&["c1", "c2", "c3"]), same).is_empty(),
            "equal amounts"
        );
        let old = |n: &str| (n != "c3").then(|| rr("20m", "35Mi"));
        assert!(
            plan(&p, &running(&["c3"]), old).is_empty(),
            "c1 and c2 do not run"
        );
        assert!(
            plan(&p, &running(&["c1", "c2"]), |_| None).is_empty(),
            "no record yet"
        );
    }

    #[test]
    fn a_restart_policy_on_a_changed_resource_restarts_the_container() {
        let act = |n: &str| match n {
            "c1" => Some(rr("25m", "35Mi")),
            _ => None,
        };
        let got = plan(&pod(Some("RestartContainer")), &running(&["c1"]), act);
        assert_eq!(got.restart.len(), 1);
        assert_eq!(
            got.restart[0].message(),
            "Container c1 resize requires restart"
        );
        assert!(got.update.is_empty());
        // only cpu changed: the memory policy does not apply
        let cpu_only = |n: &str| (n == "c1").then(|| rr("20m", "40Mi"));
        let got = plan(&pod(Some("RestartContainer")), &running(&["c1"]), cpu_only);
        assert!(got.restart.is_empty());
        assert_eq!(got.update.len(), 1);
    }
}
