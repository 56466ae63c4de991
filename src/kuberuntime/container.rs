//! Starting and killing one container: the Go kubelet's `startContainer` and `killContainer`
//! (k/k `pkg/kubelet/kuberuntime/kuberuntime_container.go`): image, environment, mounts,
//! CRI create and start, postStart; the `Killing` event, preStop, CRI stop.

use super::SyncContext;
use crate::events::reason;
use crate::pod::actions::{KillReason, PidTarget, Waiting, WaitingReason};
use crate::pod::spec;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::Api;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Instrument;

/// Minimum grace period for stopping a container (Go kubelet `minimumGracePeriodInSeconds`).
pub const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// Where a container starts: its pod's sandbox and what the worker prepared for it.
pub struct StartTarget<'a> {
    /// The sandbox's runtime id.
    pub sandbox_id: &'a str,
    /// The config the sandbox was created with.
    pub sandbox_config: &'a crate::cri::api::PodSandboxConfig,
    /// The pod IP (empty for host-network pods without one).
    pub pod_ip: &'a str,
    /// The pod's volumes on the host.
    pub volumes: &'a crate::volume::VolumePaths,
    /// The pod's image volumes as this sync pulled them.
    pub image_volumes: &'a super::image_volume::ImageVolumePulls,
    /// The managed `/etc/hosts` file, if any.
    pub etc_hosts: Option<&'a str>,
}

/// Fetches what container `c`'s environment refers to: its configMaps and secrets (NotFound
/// recorded as absent) and the service variables (k/k `makeEnvironmentVariables`).
///
/// Errors, as the message the container's `CreateContainerConfigError` shows: services not read
/// yet, or an API error other than NotFound.
async fn env_sources(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
) -> Result<crate::pod::envvars::EnvSources, String> {
    use crate::pod::envvars;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut src = envvars::EnvSources {
        node_allocatable_milli: ctx.node_allocatable_milli.clone(),
        ..Default::default()
    };
    if let Some(lister) = &ctx.services {
        // k/k makeEnvironmentVariables: only pods from the API server wait for the first list
        // of Services; a static pod may be the API server itself (kubeadm's control plane) and
        // runs with the Services known so far (none before the first list)
        if !lister.has_synced() && !crate::source::file::is_static(pod) {
            return Err(
                "services have not yet been read at least once, cannot construct envvars".into(),
            );
        }
        let enable = pod
            .spec
            .as_ref()
            .and_then(|s| s.enable_service_links)
            .unwrap_or(true);
        let all = lister.list();
        src.services = envvars::service_env(all.iter().map(|s| s.as_ref()), &ns, enable);
    }
    let (cms, secrets) = envvars::referenced_objects(c);
    let is_not_found = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404);
    let cm_api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    for name in cms {
        match cm_api.get(&name).await {
            Ok(cm) => {
                src.config_maps
                    .insert(name, Some(cm.data.unwrap_or_default()));
            }
            Err(e) if is_not_found(&e) => {
                src.config_maps.insert(name, None);
            }
            Err(e) => return Err(format!("couldn't get configMap {ns}/{name}: {e}")),
        }
    }
    let secret_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    for name in secrets {
        match secret_api.get(&name).await {
            Ok(s) => {
                let data = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                src.secrets.insert(name, Some(data));
            }
            Err(e) if is_not_found(&e) => {
                src.secrets.insert(name, None);
            }
            Err(e) => return Err(format!("couldn't get secret {ns}/{name}: {e}")),
        }
    }
    Ok(src)
}

/// Records the `Failed` event (`Error: <msg>`) of a container whose config could not be made and
/// returns its waiting state, `CreateContainerConfigError` with `msg` (k/k `startContainer`).
fn config_error(ctx: &SyncContext, pod: &Pod, name: &str, msg: String) -> Waiting {
    ctx.recorder.pod(
        pod,
        Some(name),
        true,
        reason::FAILED,
        format!("Error: {msg}"),
    );
    Waiting::new(WaitingReason::CreateContainerConfigError, msg)
}

/// A CRI create or start failure: the `Failed` event and the waiting state with `why`.
fn runtime_error(
    ctx: &SyncContext,
    pod: &Pod,
    name: &str,
    why: WaitingReason,
    e: &crate::cri::CriError,
) -> Waiting {
    ctx.recorder.pod(
        pod,
        Some(name),
        true,
        reason::FAILED,
        format!("Error: {}", e.desc()),
    );
    Waiting::new(why, e.desc())
}

/// The user of image `image_ref`, for `runAsNonRoot` (k/k `getImageUser`), asked of the runtime
/// when the image step did not learn it; an image that cannot be inspected runs as root.
async fn ask_image_user(ctx: &SyncContext, image_ref: &str) -> spec::ImageUser {
    let status = ctx.cri.image_status(image_ref).await.ok().flatten();
    status.as_ref().map(spec::ImageUser::of).unwrap_or_default()
}

/// Ensures the image, then creates and starts instance `attempt` of container `name`, with the
/// Go kubelet's events (`Pulled`/`Pulling`, `Created`, `Started`, `Failed`), the legacy log
/// link and the postStart hook (its failure kills the container). `image_backoff` and
/// `previous` (the container's last waiting state) feed the image pull step.
///
/// `name` may be an ephemeral container (`kubectl debug`); `pid_target` is then where its PID
/// namespace comes from (k/k `startContainer` with an `ephemeralContainerStartSpec`: a missing
/// target is a `Failed` event and `CreateContainerConfigError`, after the image step, as in
/// Go). Regular and init containers pass [`PidTarget::None`].
///
/// Errors: the container's waiting state (reason and message for its status).
#[allow(clippy::too_many_arguments)]
pub async fn start_container(
    ctx: &SyncContext,
    pod: &Pod,
    name: &str,
    attempt: u32,
    target: &StartTarget<'_>,
    image_backoff: &mut crate::backoff::Backoff,
    previous: Option<&Waiting>,
    pid_target: &PidTarget,
) -> Result<(), Waiting> {
    let c = crate::pod::find_any_container(pod, name).ok_or_else(|| {
        Waiting::new(
            WaitingReason::CreateContainerConfigError,
            format!("container {name:?} is not in the pod spec"),
        )
    })?;
    let c: &Container = &c;
    let span = tracing::info_span!("container", container = %name);
    async {
        // image volumes first, then the container's own image (k/k SyncPod's `start`)
        let images =
            super::image_volume::container_image_volumes(ctx, pod, c, target.image_volumes)?;
        let super::image::EnsuredImage { image_ref, user } =
            super::image::ensure_image(ctx, pod, c, target.sandbox_config, image_backoff, previous)
                .await?;
        let pid_target_id = match pid_target {
            PidTarget::None => None,
            PidTarget::Container(id) => Some(id.clone()),
            PidTarget::Missing(t) => {
                return Err(config_error(ctx, pod, name, PidTarget::missing_message(t)));
            }
        };
        let image_user = match user {
            Some(user) => user,
            None => ask_image_user(ctx, &image_ref).await,
        };
        let host_ip = ctx.node_ips.first().cloned().unwrap_or_default();
        let env_result = match env_sources(ctx, pod, c).await {
            Ok(src) => crate::pod::envvars::make_environment(pod, c, target.pod_ip, &host_ip, &src)
                .map(|env| (env, src))
                .map_err(|e| e.to_string()),
            Err(msg) => Err(msg),
        };
        let (env, env_sources) = env_result.map_err(|msg| config_error(ctx, pod, name, msg))?;
        let read_only = crate::volume::read_only_volumes(pod);
        let mut mounts =
            crate::volume::container_mounts(c, target.volumes, &read_only, &images, &env)
                .map_err(|e| config_error(ctx, pod, name, e.to_string()))?;
        if let Some(m) = termination_message_mount(ctx, pod, c).await {
            mounts.push(m);
        }
        if let Some(h) = target.etc_hosts {
            if !mounts.iter().any(|m| m.container_path == "/etc/hosts") {
                mounts.push(crate::cri::api::Mount {
                    container_path: "/etc/hosts".into(),
                    host_path: h.into(),
                    ..Default::default()
                });
            }
        }
        let inputs = spec::ContainerRuntimeInputs {
            image_ref,
            attempt,
            pod_ip: target.pod_ip.into(),
            host_ip,
            mounts,
            env_sources,
            memory_capacity_bytes: ctx.memory_capacity_bytes,
            oom_group: ctx.container_oom_group,
            image_user,
            pid_target_id,
            userns: target
                .sandbox_config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
                .and_then(|sc| sc.namespace_options.as_ref())
                .and_then(|ns| ns.userns_options.clone()),
        };
        let cfg = spec::container_config(pod, name, &inputs)
            .map_err(|e| config_error(ctx, pod, name, e.to_string()))?;
        let id = ctx
            .cri
            .create_container(target.sandbox_id, cfg, target.sandbox_config.clone())
            .await
            .map_err(|e| runtime_error(ctx, pod, name, WaitingReason::CreateContainerError, &e))?;
        // What the runtime was given: the baseline of an in-place resize (k/k
        // `actuatedState.SetContainerResources` after CreateContainer).
        if let Some(c) = crate::allocation::resizable_containers(pod).find(|c| c.name == name) {
            ctx.allocation.set_actuated(
                crate::pod::uid(pod),
                name,
                c.resources.clone().unwrap_or_default(),
            );
        }
        ctx.recorder.pod(
            pod,
            Some(name),
            false,
            reason::CREATED,
            "Container created".into(),
        );
        ctx.cri
            .start_container(&id)
            .await
            .map_err(|e| runtime_error(ctx, pod, name, WaitingReason::RunContainerError, &e))?;
        ctx.recorder.pod(
            pod,
            Some(name),
            false,
            reason::STARTED,
            "Container started".into(),
        );
        // The legacy /var/log/containers symlink that log collectors read.
        super::logs::link_container_log(pod, name, &id, &ctx.pod_logs_dir, attempt).await;
        // postStart runs right after the start; its failure kills the container
        // (k/k kuberuntime_container.go startContainer).
        if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let grace = crate::pod::grace::requested_grace_seconds(pod);
            let timeout = Duration::from_secs(grace.max(MINIMUM_GRACE_PERIOD_SECONDS) as u64 + 120);
            if let Err(out) =
                crate::prober::handlers::run_hook(h, c, &ctx.cri, &id, target.pod_ip, timeout).await
            {
                tracing::info!(output = %out, "postStart hook failed");
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::FAILED_POST_START_HOOK,
                    "PostStartHook failed".into(),
                );
                let kill = KillTarget {
                    id: &id,
                    name,
                    reason: KillReason::PostStartHook,
                    restart: false,
                };
                kill_container(ctx, pod, &kill, grace, target.pod_ip).await;
                return Err(Waiting::new(WaitingReason::PostStartHookError, out));
            }
        }
        tracing::info!(container.id = %id, attempt, "container started");
        Ok(())
    }
    .instrument(span)
    .await
}

/// Creates the host file behind `terminationMessagePath` (mode 0666, under the pod
/// directory, a fresh name per container instance) and returns its mount.
async fn termination_message_mount(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
) -> Option<crate::cri::api::Mount> {
    use std::os::unix::fs::PermissionsExt;
    let path = c
        .termination_message_path
        .clone()
        .unwrap_or_else(|| spec::DEFAULT_TERMINATION_MESSAGE_PATH.into());
    if path.is_empty() {
        return None;
    }
    let dir = crate::volume::pod_dir(&ctx.root_dir, crate::pod::uid(pod))
        .join("containers")
        .join(&c.name);
    let file = dir.join(format!("{:08x}", rand::random::<u32>()));
    let r = async {
        tokio::fs::create_dir_all(&dir).await?;
        tokio::fs::write(&file, b"").await?;
        tokio::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).await
    }
    .await;
    match r {
        Ok(()) => Some(crate::cri::api::Mount {
            container_path: path,
            host_path: file.display().to_string(),
            ..Default::default()
        }),
        Err(e) => {
            tracing::warn!(error = %e, "creating the termination message file failed");
            None
        }
    }
}

/// A container instance to kill and why.
#[derive(Debug, Clone, Copy)]
pub struct KillTarget<'a> {
    /// Runtime id.
    pub id: &'a str,
    /// Spec name.
    pub name: &'a str,
    /// Why (the `Killing` message; a probe's own grace period).
    pub reason: KillReason,
    /// It is started again afterwards.
    pub restart: bool,
}

/// Kills one container as the Go kubelet's `killContainer` does: a `Killing` event, the preStop
/// hook (when the grace period is above zero; its time is taken from the grace period), then
/// CRI StopContainer with what is left of the grace period, at least
/// [`MINIMUM_GRACE_PERIOD_SECONDS`]. `grace` is the pod's, in seconds; a probe-caused kill uses
/// the probe's `terminationGracePeriodSeconds` when it has one.
pub async fn kill_container(
    ctx: &SyncContext,
    pod: &Pod,
    k: &KillTarget<'_>,
    grace: i64,
    pod_ip: &str,
) {
    let name = k.name;
    ctx.recorder.pod(
        pod,
        Some(name),
        false,
        reason::KILLING,
        k.reason.message(name, k.restart),
    );
    let container = crate::pod::find_any_container(pod, name);
    let container = container.as_deref();
    let mut grace = container
        .and_then(|c| k.reason.probe_grace_seconds(c))
        .unwrap_or(grace);
    let pre_stop = container
        .and_then(|c| c.lifecycle.as_ref())
        .and_then(|l| l.pre_stop.as_ref());
    if let (Some(h), Some(c), true) = (pre_stop, container, grace > 0) {
        let started = Instant::now();
        if let Err(out) = crate::prober::handlers::run_hook(
            h,
            c,
            &ctx.cri,
            k.id,
            pod_ip,
            Duration::from_secs(grace as u64),
        )
        .await
        {
            tracing::info!(container = %name, output = %out, "preStop hook failed");
            ctx.recorder.pod(
                pod,
                Some(name),
                true,
                reason::FAILED_PRE_STOP_HOOK,
                "PreStopHook failed".into(),
            );
        }
        grace -= started.elapsed().as_secs() as i64;
    }
    if let Err(e) = ctx
        .cri
        .stop_container(k.id, grace.max(MINIMUM_GRACE_PERIOD_SECONDS))
        .await
    {
        if !e.is_not_found() {
            if e.is_unreachable() {
                // said once for every pod by the CRI client's reachability tracker
                tracing::debug!(container = %name, error = %e, "stopping container failed");
            } else {
                tracing::warn!(container = %name, error = %e, "stopping container failed");
            }
        }
    }
}
