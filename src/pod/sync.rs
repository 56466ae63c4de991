//! The bodies of a pod worker's states (the Go kubelet's `SyncPod`, `SyncTerminatingPod` and
//! `SyncTerminatedPod` in k/k `pkg/kubelet/kubelet.go`): one sync of a live pod (decide with
//! [`super::actions`], act through [`crate::kuberuntime`], report), admission and eviction, the
//! termination with its grace period, and the clean-up afterwards. The state machine that calls
//! them is [`super::workers`]; the in-place resize steps are in [`super::resize`].

use super::actions::{compute_pod_actions, PidTarget, PodActions, Waiting, WaitingReason};
use super::runtime::PodRuntimeStatus;
use super::spec;
use super::worker::PodWorker;
use super::workers::{PodUpdate, VOLUME_REFRESH_PERIOD};
use crate::events::reason;
use crate::kuberuntime::{self, KillTarget, StartTarget, SyncFailed};
use crate::prober::ProbeEnv;
use crate::status::{generate_pod_status, StatusInputs};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

impl PodWorker {
    /// One sync of a live pod. Returns when the worker should sync again at the latest
    /// (the end of a back-off).
    pub(super) async fn sync(&mut self, pod: &Pod) -> Result<Option<Timestamp>, SyncFailed> {
        let ctx = self.ctx.clone();
        let rt = match self.runtime_status(pod).await {
            Ok(rt) => rt,
            Err(e) => {
                log_runtime_read_failure(&e, "reading pod state from the runtime failed");
                return Err(SyncFailed);
            }
        };
        let rt = match self.resize(pod, &rt).await {
            Some(again) => again,
            None => rt,
        };
        let now = ctx.clock.now();
        let actions = compute_pod_actions(pod, &rt, &self.probes.results, &self.crash_backoff, now);
        for (key, finished) in &actions.backoff_advances {
            self.crash_backoff.next(key, *finished);
        }
        self.crash_backoff.gc(now);
        let mut next = actions.next_sync;
        if actions.create_sandbox.is_some()
            || !actions.start.is_empty()
            || !actions.start_ephemeral.is_empty()
        {
            // The status as the worker takes up the work, before any sandbox, pull or start
            // (k/k SyncPod sets the status first): startTime, PodScheduled, Initialized or not,
            // containers waiting in ContainerCreating / PodInitializing.
            if let Some((base, status)) = self.status_to_write(pod, &rt, false) {
                self.ctx.status.queue(&base, &status);
            }
        }
        if actions.pod_done && actions.kill_pod && rt.running().next().is_none() {
            // Every container has exited: the terminal status goes out before the sandbox is
            // stopped (k/k: syncPod sets the status, syncTerminatingPod kills afterwards);
            // StopPodSandbox with its CNI teardown takes 100–200 ms, which a watcher waiting for
            // the phase should not wait for. (With containers still running, e.g. past the
            // active deadline, the status waits for them to be stopped.)
            self.write_status_for(pod, &rt, true);
        }
        let result = self.execute(pod, &rt, &actions).await;
        // finished once what ran is stopped; a failed stop is synced again after the back-off
        if actions.pod_done && result.is_ok() {
            self.finished = true;
        }
        if let Some(t) = self.image_backoff_next() {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        // Record crash back-off events for containers held back.
        for (name, w) in &actions.waiting {
            if w.reason == WaitingReason::CrashLoopBackOff {
                ctx.recorder.pod(
                    pod,
                    Some(name),
                    true,
                    reason::BACK_OFF,
                    format!(
                        "Back-off restarting failed container {} in pod {}",
                        name,
                        super::format_pod(pod)
                    ),
                );
            }
        }
        for (k, v) in &actions.waiting {
            self.waiting.insert(k.clone(), v.clone());
        }
        let after = if actions.changes_nothing() && result.is_ok() {
            // nothing was done: the state read at the start is the state to report (one runtime
            // read per sync instead of two)
            self.write_status_for(pod, &rt, actions.pod_done);
            Some(rt)
        } else {
            self.write_status_read(pod, actions.pod_done).await
        };
        self.note_synced(
            pod,
            after.as_ref().filter(|_| result.is_ok()),
            actions.pod_done,
        );
        result.map(|_| next)
    }

    /// Tells the PLEG's relist what this sync leaves behind ([`crate::pleg::synced`]): the
    /// runtime state `rt` read at its end when that state leaves the worker nothing to do (no
    /// sandbox, start or kill), so the relist does not wake the worker for its own sandbox and
    /// container starts; otherwise (a failed sync or read, a finished pod, more to do) nothing,
    /// and the next change the relist finds wakes the worker.
    fn note_synced(&self, pod: &Pod, rt: Option<&PodRuntimeStatus>, terminal: bool) {
        let uid = super::uid(pod);
        let settled = rt.filter(|_| !terminal && self.terminal_override.is_none());
        match settled {
            Some(rt)
                if compute_pod_actions(
                    pod,
                    rt,
                    &self.probes.results,
                    &self.crash_backoff,
                    self.ctx.clock.now(),
                )
                .changes_nothing() =>
            {
                self.ctx.synced.record(uid, rt)
            }
            _ => self.ctx.synced.forget(uid),
        }
    }

    /// The runtime's state of `pod` for a sync. A new worker's first sync starts from the PLEG's
    /// last relist when it is recent enough and shows nothing of the pod (a pod just bound to
    /// the node): no CRI call before its sandbox is made, as the Go kubelet's first sync of a
    /// new pod reads an empty entry from the PLEG's pod cache. Only this worker makes sandboxes
    /// and containers for this UID, so a relist that started after any earlier worker was
    /// forgotten shows all there is; otherwise, and at every later sync, the runtime is asked.
    async fn runtime_status(
        &mut self,
        pod: &Pod,
    ) -> Result<PodRuntimeStatus, crate::cri::CriError> {
        let uid = super::uid(pod);
        if let Some(after) = self.first_sync_list_after.take() {
            if self.ctx.cri.cached_lists_show_pod(after, uid) == Some(false) {
                tracing::debug!("new pod: nothing of it in the last relist");
                return Ok(PodRuntimeStatus::default());
            }
        }
        PodRuntimeStatus::observe(&self.ctx.cri, &self.ctx.exits, uid).await
    }

    /// When the earliest image-pull back-off of this pod ends, so the worker retries the pull
    /// then rather than at the next periodic sync.
    fn image_backoff_next(&self) -> Option<Timestamp> {
        let pulling = self.waiting.values().any(|w| w.reason.is_image_pull());
        if !pulling {
            return None;
        }
        self.image_backoff
            .earliest_end_since_update(self.ctx.clock.now())
    }

    /// Hands the pod's current status to the status manager (which writes it in the background,
    /// newest first) and keeps the probe tasks in step with the running containers.
    pub(super) async fn write_status(&mut self, pod: &Pod, terminal: bool) {
        if let Some((base, status)) = self.observe_status(pod, terminal).await {
            self.ctx.status.queue(&base, &status);
        }
    }

    /// Queues the status of `pod` for runtime state `rt` already read (see
    /// [`Self::status_for`]).
    fn write_status_for(&mut self, pod: &Pod, rt: &PodRuntimeStatus, terminal: bool) {
        if let Some((base, status)) = self.status_for(pod, rt, terminal) {
            self.ctx.status.queue(&base, &status);
        }
    }

    /// Writes the pod's status now and waits for the API server (the terminal status that must
    /// land before the pod object is deleted).
    async fn write_status_now(&mut self, pod: &Pod, terminal: bool) {
        if let Some((base, status)) = self.observe_status(pod, terminal).await {
            if let Err(e) = self.ctx.status.set_pod_status(&base, &status).await {
                tracing::warn!(error = %e, "status update failed");
            }
        }
    }

    /// [`Self::write_status`], returning the runtime state the status was made from (`None`
    /// when the read failed, or for a pod refused at admission, whose status reads nothing).
    async fn write_status_read(&mut self, pod: &Pod, terminal: bool) -> Option<PodRuntimeStatus> {
        if self.terminal_override.as_ref().is_some_and(|o| o.rejected) {
            self.write_status(pod, terminal).await;
            return None;
        }
        let rt = self.read_runtime_for_status(pod).await?;
        self.write_status_for(pod, &rt, terminal);
        Some(rt)
    }

    /// Reads the pod's runtime state for its status; `None` (logged) when the read fails.
    async fn read_runtime_for_status(&self, pod: &Pod) -> Option<PodRuntimeStatus> {
        match PodRuntimeStatus::observe(&self.ctx.cri, &self.ctx.exits, super::uid(pod)).await {
            Ok(rt) => Some(rt),
            Err(e) => {
                log_runtime_read_failure(&e, "reading pod state for status failed");
                None
            }
        }
    }

    /// Reads the runtime and returns the status to write (see [`Self::status_to_write`]), after
    /// reconciling the probe tasks with the running containers.
    async fn observe_status(&mut self, pod: &Pod, terminal: bool) -> Option<(Pod, PodStatus)> {
        if self.terminal_override.as_ref().is_some_and(|o| o.rejected) {
            return self.status_to_write(pod, &PodRuntimeStatus::default(), terminal);
        }
        let rt = self.read_runtime_for_status(pod).await?;
        self.status_for(pod, &rt, terminal)
    }

    /// The status to write for runtime state `rt` (see [`Self::status_to_write`]), after
    /// reconciling the probe tasks with the running containers.
    fn status_for(
        &mut self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        terminal: bool,
    ) -> Option<(Pod, PodStatus)> {
        let out = self.status_to_write(pod, rt, terminal);
        // Probe tasks follow the running container instances.
        if terminal || self.terminal_override.is_some() {
            self.probes.stop_all();
        } else {
            let pod_ip = rt
                .latest_sandbox()
                .and_then(|s| s.ip.clone())
                .unwrap_or_default();
            let running: Vec<(String, k8s_openapi::api::core::v1::Container, i64)> = rt
                .running()
                .filter_map(|c| {
                    spec::find_container(pod, &c.name)
                        .map(|sc| (c.id.clone(), sc.clone(), c.started_at))
                })
                .collect();
            let env = ProbeEnv {
                cri: self.ctx.cri.clone(),
                recorder: self.ctx.recorder.clone(),
                tasks: self.ctx.tasks.clone(),
                clock: self.ctx.clock.clone(),
            };
            self.probes.reconcile(pod, &pod_ip, &running, &env);
        }
        out
    }

    /// The status of `pod` for runtime state `rt`, and the pod object to write it on (the
    /// newest copy we have, so the status manager diffs against the newest API status).
    /// A pod refused at admission gets the minimal status the Go kubelet's rejectPod writes.
    fn status_to_write(
        &self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        terminal: bool,
    ) -> Option<(Pod, PodStatus)> {
        let latest = self.rx.borrow().pod.clone();
        let base = if super::uid(&latest) == super::uid(pod) {
            Arc::unwrap_or_clone(latest)
        } else {
            pod.clone()
        };
        let now = crate::time::truncate(self.ctx.clock.now());
        if let Some(o) = self.terminal_override.clone().filter(|o| o.rejected) {
            let status = o.rejected_status(&base, now);
            return Some((base, status));
        }
        let (resize, actuated) = self.resize_inputs(pod, rt, terminal);
        let mut status = generate_pod_status(
            pod,
            &StatusInputs {
                runtime: rt,
                waiting: &self.waiting,
                runtime_name: &self.ctx.runtime_name,
                node_ips: &self.ctx.node_ips,
                terminal,
                now,
                probes: &self.probes.results,
                resize: &resize,
                actuated: &actuated,
            },
        );
        if let Some(o) = &self.terminal_override {
            o.apply(&mut status);
        }
        Some((base, status))
    }

    /// Stops what is left of a pod that finished and reports its terminal status; the worker
    /// syncs it no more.
    pub(super) async fn finish(&mut self, pod: &Pod) {
        self.finished = true;
        match PodRuntimeStatus::observe(&self.ctx.cri, &self.ctx.exits, super::uid(pod)).await {
            Ok(rt) => {
                if rt.running().next().is_some() || rt.sandboxes.iter().any(|s| s.ready) {
                    tracing::info!("pod is finished; stopping what still runs");
                    let killed = kuberuntime::kill_pod(
                        &self.ctx,
                        pod,
                        &rt,
                        super::grace::requested_grace_seconds(pod),
                    )
                    .await;
                    // not finished until it is stopped: the worker comes back to it at its
                    // next wake-up (at most a resync period)
                    self.finished = killed.is_ok();
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the finished pod's runtime state failed"),
        }
        self.probes.stop_all();
        self.write_status(pod, true).await;
    }

    /// Carries out the actions (k/k `SyncPod`): kill, volumes, sandbox, /etc/hosts, starts.
    /// Failures are recorded on the pod (waiting reasons, events).
    async fn execute(
        &mut self,
        pod: &Pod,
        rt: &PodRuntimeStatus,
        a: &PodActions,
    ) -> Result<(), SyncFailed> {
        let ctx = self.ctx.clone();
        let grace = super::grace::requested_grace_seconds(pod);
        if a.create_sandbox.is_some() && !rt.sandboxes.is_empty() {
            // k/k SyncPod: a new sandbox where one existed, whether or not anything still runs
            ctx.recorder.pod(
                pod,
                None,
                false,
                reason::SANDBOX_CHANGED,
                "Pod sandbox changed, it will be killed and re-created.".into(),
            );
        }
        if a.kill_pod && (rt.running().next().is_some() || rt.sandboxes.iter().any(|s| s.ready)) {
            // k/k SyncPod: a pod that could not be killed is a failed sync, tried again after
            // the back-off
            kuberuntime::kill_pod(&ctx, pod, rt, grace).await?;
        }
        let pod_ip = rt
            .latest_sandbox()
            .and_then(|s| s.ip.clone())
            .unwrap_or_default();
        for k in &a.kill {
            let target = KillTarget {
                id: &k.id,
                name: &k.name,
                reason: k.reason,
                restart: k.restart,
            };
            kuberuntime::kill_container(&ctx, pod, &target, grace, &pod_ip).await;
        }
        if a.pod_done
            || (a.start.is_empty() && a.start_ephemeral.is_empty() && a.create_sandbox.is_none())
        {
            if !a.pod_done && rt.latest_sandbox().is_some() {
                self.refresh_volumes(pod).await;
            }
            return Ok(());
        }

        // Volumes: set up before any container of the pod starts.
        let setup = crate::volume::setup(
            &ctx.client,
            &ctx.root_dir,
            pod,
            &ctx.node_allocatable_milli,
            ctx.image_volumes,
        )
        .await;
        if setup.is_ok() {
            self.volume_setup_retry = None;
            self.volumes_refreshed = Some(Instant::now());
            if std::mem::take(&mut self.volume_refresh_failing) {
                tracing::info!("volumes refreshed again");
            }
        }
        let volumes = match volumes_for_start(setup, self.mounted_volumes.take()) {
            VolumesForStart::Fresh(v) => v,
            VolumesForStart::AsMounted(v, e) => {
                // A restart during an API server outage (or after a ConfigMap was deleted): the
                // volumes stay as they were last written, as the Go kubelet's volume manager
                // leaves a mounted volume in place when its remount fails.
                if !std::mem::replace(&mut self.volume_refresh_failing, true) {
                    tracing::warn!(error = %e, "volume refresh failed; containers start with the volumes as last set up");
                } else {
                    tracing::debug!(error = %e, "volume refresh failed again; starting with the volumes as last set up");
                }
                ctx.recorder.pod(
                    pod,
                    None,
                    true,
                    reason::FAILED_MOUNT,
                    e.failed_mount_message(),
                );
                v
            }
            VolumesForStart::Failed(e) => {
                let msg = e.failed_mount_message();
                ctx.recorder.pod(pod, None, true, reason::FAILED_MOUNT, msg);
                let retry = crate::volume::setup_retry_delay(self.volume_setup_retry);
                self.volume_setup_retry = Some(retry);
                self.retry_failed_sync_after = Some(retry);
                tracing::warn!(error = %e, retry_in = ?retry, "volume setup failed");
                let names = a
                    .start
                    .iter()
                    .map(|s| &s.name)
                    .chain(a.start_ephemeral.iter().map(|e| &e.name));
                for name in names {
                    let why = if rt.latest(name).is_some() {
                        WaitingReason::CreateContainerConfigError
                    } else {
                        WaitingReason::ContainerCreating
                    };
                    self.waiting.insert(name.clone(), Waiting::new(why, ""));
                }
                return Err(SyncFailed);
            }
        };
        self.mounted_volumes = Some(volumes.clone());

        // the pod start counters (k/k SyncPod step 4)
        let user_namespaced = crate::userns::wants_user_namespace(pod);
        let creating_sandbox = a.create_sandbox.is_some();
        let (sandbox_id, pod_ip, sandbox_config) = match a.create_sandbox {
            Some(attempt) => {
                crate::server::metrics::observe_pod_started(user_namespaced);
                let created = kuberuntime::sandbox::create_sandbox(&ctx, pod, attempt)
                    .await
                    .inspect_err(|_| {
                        crate::server::metrics::observe_pod_start_failed(true, user_namespaced)
                    })?;
                // The sandbox is ready: PodReadyToStartContainers and the pod IPs go out before
                // any image pull or container start.
                let mut with_sandbox = rt.clone();
                with_sandbox.sandboxes.insert(0, created.status.clone());
                if let Some((base, status)) = self.status_to_write(pod, &with_sandbox, false) {
                    ctx.status.queue(&base, &status);
                }
                let ip = created.status.ip.unwrap_or_default();
                (created.status.id, ip, created.config)
            }
            None => {
                let Some(s) = rt.latest_sandbox() else {
                    tracing::warn!("no sandbox to start containers in");
                    return Err(SyncFailed);
                };
                let cfg = kuberuntime::sandbox::existing_sandbox_config(&ctx, pod, s);
                (s.id.clone(), s.ip.clone().unwrap_or_default(), cfg)
            }
        };
        let etc_hosts = self.write_etc_hosts(pod, &pod_ip).await;
        // Image volumes: pulled once per sync, before any container starts (k/k SyncPod
        // `getImageVolumes`); a container mounting one that failed does not start.
        let image_volumes = if ctx.image_volumes {
            kuberuntime::image_volume::ensure_image_volumes(
                &ctx,
                pod,
                &sandbox_config,
                &mut self.image_backoff,
                &self.waiting,
            )
            .await
        } else {
            Default::default()
        };
        let target = StartTarget {
            sandbox_id: &sandbox_id,
            sandbox_config: &sandbox_config,
            pod_ip: &pod_ip,
            volumes: &volumes,
            image_volumes: &image_volumes,
            etc_hosts: etc_hosts.as_deref(),
        };
        let mut failed = false;
        for s in &a.start {
            let previous = self.waiting.get(&s.name).cloned();
            let started = kuberuntime::start_container(
                &ctx,
                pod,
                &s.name,
                s.attempt,
                &target,
                &mut self.image_backoff,
                previous.as_ref(),
                &PidTarget::None,
            )
            .await;
            match started {
                Ok(()) => {
                    self.waiting.remove(&s.name);
                }
                Err(w) => {
                    self.waiting.insert(s.name.clone(), w);
                    failed = true;
                    if s.init {
                        break;
                    }
                }
            }
        }
        // Ephemeral containers (k/k SyncPod step 6): one try each, never restarted; a failure
        // (bad image, missing target) stays on its status as the waiting reason. An init
        // container that failed to start does not hold them back.
        for e in &a.start_ephemeral {
            tracing::info!(container = %e.name, pid_target = ?e.pid_target, "starting ephemeral container");
            let previous = self.waiting.get(&e.name).cloned();
            let started = kuberuntime::start_container(
                &ctx,
                pod,
                &e.name,
                0,
                &target,
                &mut self.image_backoff,
                previous.as_ref(),
                &e.pid_target,
            )
            .await;
            match started {
                Ok(()) => {
                    self.waiting.remove(&e.name);
                }
                Err(w) => {
                    self.waiting.insert(e.name.clone(), w);
                    failed = true;
                }
            }
        }
        if failed {
            if creating_sandbox {
                crate::server::metrics::observe_pod_start_failed(false, user_namespaced);
            }
            Err(SyncFailed)
        } else {
            Ok(())
        }
    }

    /// Writes the kubelet-managed /etc/hosts ([`super::hosts`]) and returns its path, or None
    /// for host-network pods, pods without an IP, and a file that could not be written.
    async fn write_etc_hosts(&self, pod: &Pod, pod_ip: &str) -> Option<String> {
        let content = super::hosts::managed_hosts_file(pod, pod_ip, &self.ctx.dns.cluster_domain)?;
        let dir = crate::volume::pod_dir(&self.ctx.root_dir, super::uid(pod));
        match super::hosts::write(&dir, &content).await {
            Ok(path) => Some(path.display().to_string()),
            Err(e) => {
                tracing::warn!(error = %e, "writing etc-hosts failed");
                None
            }
        }
    }

    /// Re-writes the pod's configMap, secret, downwardAPI and projected volumes (new data through
    /// the atomic writer; service-account tokens renewed by the token manager) at most every
    /// [`VOLUME_REFRESH_PERIOD`], as the Go kubelet's volume manager remounts them on its syncs.
    /// A failure is a `FailedMount` warning; the running containers are left alone.
    async fn refresh_volumes(&mut self, pod: &Pod) {
        if self
            .volumes_refreshed
            .is_some_and(|t| t.elapsed() < VOLUME_REFRESH_PERIOD)
        {
            return;
        }
        self.volumes_refreshed = Some(Instant::now());
        let refreshed = crate::volume::setup(
            &self.ctx.client,
            &self.ctx.root_dir,
            pod,
            &self.ctx.node_allocatable_milli,
            self.ctx.image_volumes,
        )
        .await;
        if refreshed.is_ok() && std::mem::take(&mut self.volume_refresh_failing) {
            tracing::info!("volumes refreshed again");
        }
        if let Err(e) = refreshed {
            if !std::mem::replace(&mut self.volume_refresh_failing, true) {
                tracing::warn!(error = %e, "volume refresh failed; the volumes stay as they are until a refresh succeeds");
            } else {
                tracing::debug!(error = %e, "volume refresh failed again");
            }
            self.ctx.recorder.pod(
                pod,
                None,
                true,
                reason::FAILED_MOUNT,
                e.failed_mount_message(),
            );
        }
    }

    /// Admission of a pod this node has not started (no sandbox yet, not terminal): under node
    /// pressure the eviction manager may refuse it (k/k `rejectPod`: a Warning event with the
    /// reason and message, status Failed with `Pod was rejected: <message>`).
    pub(super) async fn admission(&self, pod: &Pod) -> Option<crate::eviction::TerminalStatus> {
        let pressure = self.ctx.pressure.as_ref()?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded") | Some("Failed") | Some("Running")) {
            return None;
        }
        let msg = pressure.admit(pod).err()?;
        match PodRuntimeStatus::observe(&self.ctx.cri, &self.ctx.exits, super::uid(pod)).await {
            Ok(rt) if rt.sandboxes.is_empty() => {}
            _ => return None,
        }
        tracing::warn!(reason = crate::eviction::rank::REASON_EVICTED, message = %msg, "pod rejected at admission");
        self.ctx.recorder.pod(
            pod,
            None,
            true,
            crate::eviction::rank::REASON_EVICTED,
            msg.clone(),
        );
        let status = crate::eviction::TerminalStatus {
            reason: crate::eviction::rank::REASON_EVICTED.into(),
            message: format!("Pod was rejected: {msg}"),
            condition: None,
            grace_seconds: 0,
            rejected: true,
        };
        Some(status)
    }

    /// Stops a pod the kubelet itself decided to stop (the eviction manager evicts it, it was
    /// refused at admission, it passed its active deadline): kill its containers with the eviction's grace
    /// period, tear down its volumes (so an emptyDir's space comes back at once), and report
    /// `Failed` with the eviction's reason, message and `DisruptionTarget` condition. The
    /// pod object stays until it is deleted (k/k `killPodNow` with a status function).
    pub(super) async fn evict(&mut self, pod: &Pod, ev: Arc<crate::eviction::TerminalStatus>) {
        tracing::info!(reason = %ev.reason, message = %ev.message, "stopping the pod on the kubelet's decision");
        self.terminal_override = Some(ev.clone());
        match PodRuntimeStatus::observe(&self.ctx.cri, &self.ctx.exits, super::uid(pod)).await {
            Ok(rt) => self.kill_pod(pod, &rt, ev.grace_seconds).await,
            Err(e) => tracing::warn!(error = %e, "reading pod state for eviction failed"),
        }
        self.probes.stop_all();
        // volumes first, so the space of its emptyDirs is back when the pod shows Failed
        let uid = super::uid(pod).to_string();
        if let Err(e) = crate::volume::teardown(&self.ctx.root_dir, &uid).await {
            tracing::warn!(error = %e, "tearing down the evicted pod's volumes failed");
        }
        crate::volume::tokens().forget_pod(&uid);
        let latest = self.rx.borrow().pod.clone();
        self.write_status(&latest, true).await;
    }

    /// Stops the pod's containers and sandboxes ([`kuberuntime::kill_pod`]).
    async fn kill_pod(&self, pod: &Pod, rt: &PodRuntimeStatus, grace: i64) {
        // termination retries on its own (remove_pod waits for what is left)
        let _ = kuberuntime::kill_pod(&self.ctx, pod, rt, grace).await;
    }

    /// Terminates a deleted or removed pod: kill with the grace period, report the terminal
    /// status, complete the deletion in the API server, then remove the sandbox, log and pod
    /// directories. A shorter grace period arriving meanwhile (a second delete with
    /// `--grace-period`, a force delete) re-issues the kill with it, as the Go pod worker
    /// cancels the running termination and starts it again with the effective grace period; a
    /// preStop hook that hangs counts against the shortened period too.
    pub(super) async fn terminate(&mut self, update: PodUpdate, cancel: &CancellationToken) {
        let ctx = self.ctx.clone();
        let mut pod = update.pod;
        let mut removed = update.removed;
        let uid = super::uid(&pod).to_string();
        let abrupt =
            |removed: bool, pod: &Pod| removed && pod.metadata.deletion_timestamp.is_none();
        let mut grace = super::grace::effective_grace_period(None, &pod, abrupt(removed, &pod));
        tracing::info!(grace_seconds = grace, removed, "terminating pod");
        let mut rx = self.rx.clone();
        let mut delay = Duration::from_secs(1);
        loop {
            let rt = match PodRuntimeStatus::observe(&ctx.cri, &ctx.exits, &uid).await {
                Ok(rt) => rt,
                Err(e) => {
                    log_runtime_read_failure(
                        &e,
                        "reading runtime state for termination failed; retrying",
                    );
                    tokio::select! { _ = cancel.cancelled() => return, _ = tokio::time::sleep(delay) => {} }
                    delay = (delay * 2).min(Duration::from_secs(30));
                    continue;
                }
            };
            let shorter = {
                let kill = self.kill_pod(&pod, &rt, grace);
                tokio::pin!(kill);
                loop {
                    tokio::select! {
                        _ = &mut kill => break None,
                        _ = cancel.cancelled() => return,
                        changed = rx.changed() => {
                            if changed.is_err() {
                                // no more updates can come: finish this kill
                                (&mut kill).await;
                                break None;
                            }
                            let u = rx.borrow_and_update().clone();
                            let g = super::grace::effective_grace_period(
                                Some(grace),
                                &u.pod,
                                abrupt(u.removed, &u.pod),
                            );
                            if g < grace {
                                break Some((g, u));
                            }
                        }
                    }
                }
            };
            match shorter {
                None => break,
                Some((g, u)) => {
                    tracing::info!(
                        grace_seconds = g,
                        previous_seconds = grace,
                        "grace period shortened; killing again"
                    );
                    grace = g;
                    removed = removed || u.removed;
                    pod = u.pod;
                }
            }
        }
        if !removed {
            // Report the terminal phase, reclaim the pod's resources (sandbox, volumes, cgroup),
            // then finish the deletion: the Go kubelet requires a terminal phase and reclaimed
            // resources before the object is removed (status manager `canBeDeleted`), so a
            // kubelet stopped in between finds the pod still listed and cleans it up.
            let latest = self.rx.borrow().pod.clone();
            self.write_status_now(&latest, true).await;
            self.cleanup(&pod).await;
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &dp).await {
                Ok(_) => tracing::info!("Pod fully terminated and removed from etcd"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => tracing::warn!(error = %e, "deleting pod object failed"),
            }
        } else {
            self.cleanup(&pod).await;
        }
    }

    /// Removes the pod's sandboxes (and with them its containers), log directory, pod directory
    /// and back-off entries.
    async fn cleanup(&mut self, pod: &Pod) {
        let ctx = self.ctx.clone();
        let uid = super::uid(pod).to_string();
        // A container the runtime is still starting cannot be removed yet ("container is in
        // starting state"), and its processes keep the pod cgroup busy: try again for a few
        // seconds before the pod object goes (the Go status manager deletes it only once the
        // pod's resources are reclaimed). What is still left then is swept up by the reconcile
        // after the next full list (orphaned sandboxes, pod directories and cgroups).
        // While the runtime cannot be reached nothing can be removed: each try first waits for
        // it (up to CLEANUP_RUNTIME_WAIT in all) rather than spend the tries, so that a pod
        // deleted during a containerd restart is not left running.
        let waiting_since = Instant::now();
        let mut back = ctx.cri.reachability().subscribe_back();
        for attempt in 1..=CLEANUP_ATTEMPTS {
            while !ctx.cri.reachability().is_reachable()
                && waiting_since.elapsed() < CLEANUP_RUNTIME_WAIT
            {
                let _ = tokio::time::timeout(CLEANUP_RETRY * 2, back.changed()).await;
            }
            let last = attempt == CLEANUP_ATTEMPTS;
            if kuberuntime::remove_pod(&ctx, pod, last).await || last {
                break;
            }
            tokio::time::sleep(CLEANUP_RETRY).await;
        }
        ctx.status.forget(&uid);
        self.crash_backoff.forget_prefix("");
        self.image_backoff.forget_prefix("");
        tracing::info!("pod cleaned up");
    }
}

/// How many times [`PodWorker::cleanup`] tries to reclaim a pod's resources.
const CLEANUP_ATTEMPTS: u32 = 5;
/// The pause between two tries.
const CLEANUP_RETRY: Duration = Duration::from_secs(1);
/// How long [`PodWorker::cleanup`] waits for an unreachable runtime before it tries anyway.
const CLEANUP_RUNTIME_WAIT: Duration = Duration::from_secs(120);

/// Logs a failed read of a pod's runtime state: a warning, or at debug level when the runtime
/// could not be reached at all (the CRI client's reachability tracker says that once for every
/// pod).
fn log_runtime_read_failure(e: &crate::cri::CriError, what: &str) {
    if e.is_unreachable() {
        tracing::debug!(error = %e, "{what}");
    } else {
        tracing::warn!(error = %e, "{what}");
    }
}

/// What a container start uses for the pod's volumes ([`volumes_for_start`]).
#[derive(Debug, PartialEq)]
pub enum VolumesForStart<E> {
    /// Set up (or refreshed) just now.
    Fresh(crate::volume::VolumePaths),
    /// The refresh failed with `E`, but the volumes were set up before: start with them as
    /// they are (and report the failure).
    AsMounted(crate::volume::VolumePaths, E),
    /// The first set-up failed: no container of the pod may start.
    Failed(E),
}

/// The volumes a container start goes ahead with: the result of this sync's set-up, or when that
/// failed, the volumes as last set up for the pod, if they ever were. The Go kubelet's volume
/// manager waits only for volumes that were never mounted (`WaitForAttachAndMount`); refreshing
/// the content of a mounted ConfigMap, Secret, downwardAPI or projected volume happens beside it
/// and a failure there never holds back a container, so a crash-looping container keeps being
/// restarted while the API server is away.
pub fn volumes_for_start<E>(
    setup: Result<crate::volume::VolumePaths, E>,
    mounted: Option<crate::volume::VolumePaths>,
) -> VolumesForStart<E> {
    match (setup, mounted) {
        (Ok(v), _) => VolumesForStart::Fresh(v),
        (Err(e), Some(v)) => VolumesForStart::AsMounted(v, e),
        (Err(e), None) => VolumesForStart::Failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_refresh_of_mounted_volumes_does_not_hold_back_a_start() {
        let paths = |p: &str| {
            crate::volume::VolumePaths::from([("cm".to_string(), std::path::PathBuf::from(p))])
        };
        let cases: Vec<(Result<_, &str>, Option<_>, VolumesForStart<&str>)> = vec![
            (
                Ok(paths("/new")),
                None,
                VolumesForStart::Fresh(paths("/new")),
            ),
            (
                Ok(paths("/new")),
                Some(paths("/old")),
                VolumesForStart::Fresh(paths("/new")),
            ),
            (
                Err("api down"),
                Some(paths("/old")),
                VolumesForStart::AsMounted(paths("/old"), "api down"),
            ),
            (Err("api down"), None, VolumesForStart::Failed("api down")),
        ];
        for (setup, mounted, want) in cases {
            assert_eq!(volumes_for_start(setup, mounted), want);
        }
    }
}
