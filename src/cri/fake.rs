//! An in-memory container runtime for component tests (as cri-api's `fake_runtime_service.go`
//! and `fake_image_service.go` are for the Go kubelet): [`FakeRuntime`] serves the CRI v1
//! RuntimeService and ImageService from memory, and [`FakeRuntime::client`] connects a real
//! [`CriClient`] to it over an in-process channel, so the code under test runs unchanged,
//! error mapping and deadlines included.
//!
//! What it models: sandboxes (ready or not, an IP from 10.88.0.0/16), containers (created,
//! running, exited, with exit codes and times), images (present or pulled), `StopContainer`
//! honouring its timeout for a container that ignores the stop signal, `ExecSync` that may hang
//! (a preStop hook that never returns), exit injection, per-method error injection, and a
//! record of every call. Calls deckhand does not make answer `Unimplemented`, as an older
//! runtime would.

use super::api::{self, image_service_server, runtime_service_server};
use super::CriClient;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::{Request, Response, Status};

/// One sandbox as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeSandbox {
    /// Runtime id.
    pub id: String,
    /// The config it was created with.
    pub config: api::PodSandboxConfig,
    /// SANDBOX_READY until stopped.
    pub ready: bool,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// Pod IP.
    pub ip: String,
}

/// One container as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeContainer {
    /// Runtime id.
    pub id: String,
    /// The sandbox it belongs to.
    pub sandbox_id: String,
    /// The config it was created with.
    pub config: api::ContainerConfig,
    /// CREATED, RUNNING or EXITED.
    pub state: api::ContainerState,
    /// Nanoseconds since the epoch (0: not yet).
    pub created_at: i64,
    /// Nanoseconds since the epoch (0: not yet).
    pub started_at: i64,
    /// Nanoseconds since the epoch (0: not yet).
    pub finished_at: i64,
    /// Exit code once exited.
    pub exit_code: i32,
    /// Why it exited (`Completed`, `Error`).
    pub reason: String,
    /// The process exited with this code at this time (nanoseconds) but the CRI view does not
    /// show it yet, as containerd's CRI plugin lags its own exit event
    /// ([`FakeRuntime::exit_unconfirmed`]); a stop then finds the task gone and the container
    /// keeps this exit.
    pub pending_exit: Option<(i32, i64)>,
}

impl FakeSandbox {
    /// The CRI state code.
    fn state(&self) -> i32 {
        if self.ready {
            api::PodSandboxState::SandboxReady as i32
        } else {
            api::PodSandboxState::SandboxNotready as i32
        }
    }
}

impl FakeContainer {
    /// The image reference CRI reports (the image as created).
    fn image_ref(&self) -> String {
        self.config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default()
    }

    /// The container's spec name (CRI metadata).
    pub fn name(&self) -> &str {
        self.config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or("")
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    sandboxes: BTreeMap<String, FakeSandbox>,
    containers: BTreeMap<String, FakeContainer>,
    images: BTreeMap<String, api::Image>,
    calls: Vec<String>,
    errors: HashMap<String, VecDeque<Status>>,
    /// CRI methods that take this long before answering.
    delays: HashMap<String, Duration>,
    /// Container names whose instances ignore the stop signal (they only die on SIGKILL, when
    /// StopContainer's timeout has run out).
    ignore_stop_signal: HashSet<String>,
    /// Container names whose ExecSync never returns by itself (it waits for its timeout).
    hanging_exec: HashSet<String>,
    /// Container names whose ExecSync commands exit with this code (0 when absent).
    exec_exit: HashMap<String, i32>,
}

/// The fake runtime. Cheap to clone (one shared state).
#[derive(Clone)]
pub struct FakeRuntime {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn crate::time::Clock>,
}

impl Default for FakeRuntime {
    fn default() -> Self {
        FakeRuntime {
            state: Arc::default(),
            clock: Arc::new(crate::time::SystemClock),
        }
    }
}

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

impl FakeRuntime {
    /// An empty runtime (no sandboxes, containers or images).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty runtime whose timestamps (created, started, finished) come from `clock`, e.g.
    /// a [`crate::time::TokioClock`] shared with the code under test, so paused time moves both.
    pub fn with_clock(clock: Arc<dyn crate::time::Clock>) -> Self {
        FakeRuntime {
            clock,
            ..Self::default()
        }
    }

    /// The clock the fake's timestamps come from (share it with the code under test).
    pub fn clock(&self) -> Arc<dyn crate::time::Clock> {
        self.clock.clone()
    }

    fn now_nanos(&self) -> i64 {
        self.clock.now().as_nanosecond() as i64
    }

    /// A [`CriClient`] connected to this runtime over an in-process channel.
    pub async fn client(&self) -> CriClient {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let runtime = runtime_service_server::RuntimeServiceServer::new(self.clone());
        let images = image_service_server::ImageServiceServer::new(self.clone());
        tokio::spawn(async move {
            let incoming = tokio_stream::once(Ok::<_, std::io::Error>(server_io));
            let _ = tonic::transport::Server::builder()
                .add_service(runtime)
                .add_service(images)
                .serve_with_incoming(incoming)
                .await;
        });
        let io = Arc::new(tokio::sync::Mutex::new(Some(client_io)));
        let channel = tonic::transport::Endpoint::from_static("http://fake.runtime")
            .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                let io = io.clone();
                async move {
                    let io = io.lock().await.take().ok_or_else(|| {
                        std::io::Error::other("the fake runtime's channel reconnects only once")
                    })?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(io))
                }
            }))
            .await
            .expect("connecting to the in-process fake runtime");
        CriClient::from_channel(channel)
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Records `method`, waits out a delay set for it ([`FakeRuntime::delay`]), and returns an
    /// injected error for it, if one is queued.
    async fn enter(&self, method: &str) -> Result<(), Status> {
        let delay = self.with(|s| {
            s.calls.push(method.to_string());
            s.delays.get(method).copied()
        });
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        self.with(
            |s| match s.errors.get_mut(method).and_then(VecDeque::pop_front) {
                Some(e) => Err(e),
                None => Ok(()),
            },
        )
    }

    /// Makes every call of CRI method `method` take `d` before it answers (a runtime that hangs:
    /// the client's deadline runs out first when `d` is longer); `None` removes the delay.
    pub fn delay(&self, method: &str, d: Option<Duration>) {
        self.with(|s| match d {
            Some(d) => {
                s.delays.insert(method.into(), d);
            }
            None => {
                s.delays.remove(method);
            }
        });
    }

    /// Sets sandbox `id`'s IP as `PodSandboxStatus` reports it (`""`: a sandbox without one).
    pub fn set_sandbox_ip(&self, id: &str, ip: &str) {
        self.with(|s| {
            if let Some(sb) = s.sandboxes.get_mut(id) {
                sb.ip = ip.to_string();
            }
        });
    }

    /// Puts a running container the kubelet did not create into sandbox `sandbox_id`, with the
    /// sandbox's pod labels and the container name `name` (one its pod spec may not know).
    /// Returns its id.
    pub fn add_foreign_container(&self, sandbox_id: &str, name: &str) -> String {
        let now = self.now_nanos();
        self.with(|s| {
            let id = Self::next_id(s);
            let labels = s
                .sandboxes
                .get(sandbox_id)
                .map(|sb| sb.config.labels.clone())
                .unwrap_or_default();
            let mut labels = labels;
            labels.insert(super::labels::CONTAINER_NAME.into(), name.into());
            s.containers.insert(
                id.clone(),
                FakeContainer {
                    id: id.clone(),
                    sandbox_id: sandbox_id.into(),
                    config: api::ContainerConfig {
                        metadata: Some(api::ContainerMetadata {
                            name: name.into(),
                            attempt: 0,
                        }),
                        labels,
                        ..Default::default()
                    },
                    state: api::ContainerState::ContainerRunning,
                    created_at: now,
                    started_at: now,
                    finished_at: 0,
                    exit_code: 0,
                    reason: String::new(),
                    pending_exit: None,
                },
            );
            id
        })
    }

    /// Overwrites container `id`'s timestamps (nanoseconds; a runtime reporting them out of
    /// order).
    pub fn set_container_times(&self, id: &str, created: i64, started: i64, finished: i64) {
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                c.created_at = created;
                c.started_at = started;
                c.finished_at = finished;
            }
        });
    }

    /// Makes the next call of CRI method `method` (e.g. `RunPodSandbox`) fail with `status`.
    pub fn inject_error(&self, method: &str, status: Status) {
        self.with(|s| s.errors.entry(method.into()).or_default().push_back(status));
    }

    /// Every CRI call so far, in order (method names such as `RunPodSandbox`).
    pub fn calls(&self) -> Vec<String> {
        self.with(|s| s.calls.clone())
    }

    /// How many times CRI method `method` was called.
    pub fn count(&self, method: &str) -> usize {
        self.with(|s| s.calls.iter().filter(|c| *c == method).count())
    }

    /// Every sandbox ever created and not removed, oldest first.
    pub fn sandboxes(&self) -> Vec<FakeSandbox> {
        let mut v: Vec<FakeSandbox> = self.with(|s| s.sandboxes.values().cloned().collect());
        v.sort_by_key(|s| s.created_at);
        v
    }

    /// Every container not removed, oldest first.
    pub fn containers(&self) -> Vec<FakeContainer> {
        let mut v: Vec<FakeContainer> = self.with(|s| s.containers.values().cloned().collect());
        v.sort_by_key(|c| c.created_at);
        v
    }

    /// The running instance of container `name`, if any.
    pub fn running(&self, name: &str) -> Option<FakeContainer> {
        self.containers()
            .into_iter()
            .find(|c| c.name() == name && c.state == api::ContainerState::ContainerRunning)
    }

    /// Makes image `name` present (as if pulled before).
    pub fn add_image(&self, name: &str) {
        self.with(|s| {
            s.images.insert(
                name.to_string(),
                api::Image {
                    id: format!("sha256:{:064x}", name.len()),
                    repo_tags: vec![name.to_string()],
                    size: 4096,
                    ..Default::default()
                },
            );
        });
    }

    /// The running container `id` exits with `code` now (the process ended by itself).
    pub fn exit(&self, id: &str, code: i32) {
        let now = self.now_nanos();
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                if c.state == api::ContainerState::ContainerRunning {
                    c.state = api::ContainerState::ContainerExited;
                    c.finished_at = now;
                    c.exit_code = code;
                    c.reason = if code == 0 { "Completed" } else { "Error" }.into();
                }
            }
        });
    }

    /// Container `id`'s process exits with `code` now, but CRI keeps showing it running until
    /// [`FakeRuntime::confirm_exit`] (containerd's CRI plugin lags its `/tasks/exit` event by
    /// 50–200 ms). Returns the exit time in nanoseconds, as the event carries it.
    pub fn exit_unconfirmed(&self, id: &str, code: i32) -> i64 {
        let now = self.now_nanos();
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                if c.state == api::ContainerState::ContainerRunning {
                    c.pending_exit = Some((code, now));
                }
            }
        });
        now
    }

    /// CRI shows the exit [`FakeRuntime::exit_unconfirmed`] made.
    pub fn confirm_exit(&self, id: &str) {
        let now = self.now_nanos();
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                if c.pending_exit.is_some() {
                    Self::kill(c, 0, now);
                }
            }
        });
    }

    /// Instances of container `name` ignore the stop signal: StopContainer kills them only when
    /// its timeout has run out (exit code 137).
    pub fn ignore_stop_signal(&self, name: &str) {
        self.with(|s| s.ignore_stop_signal.insert(name.to_string()));
    }

    /// ExecSync in instances of container `name` never finishes by itself (a hook that hangs):
    /// it answers DEADLINE_EXCEEDED when its timeout runs out, or never with timeout 0.
    pub fn hang_exec(&self, name: &str) {
        self.with(|s| s.hanging_exec.insert(name.to_string()));
    }

    /// ExecSync in instances of container `name` exits with `code` from now on (a failing exec
    /// probe when not 0; its stderr says so).
    pub fn exec_exit_code(&self, name: &str, code: i32) {
        self.with(|s| s.exec_exit.insert(name.to_string(), code));
    }

    fn next_id(s: &mut State) -> String {
        s.next_id += 1;
        format!("{:064x}", s.next_id)
    }

    fn kill(c: &mut FakeContainer, code: i32, now: i64) {
        if c.state == api::ContainerState::ContainerRunning {
            c.state = api::ContainerState::ContainerExited;
            if let Some((code, at)) = c.pending_exit.take() {
                // the process had exited already: the stop finds nothing to kill
                c.finished_at = at;
                c.exit_code = code;
                c.reason = if code == 0 { "Completed" } else { "Error" }.into();
                return;
            }
            c.finished_at = now;
            c.exit_code = code;
            c.reason = "Error".into();
        }
    }

    fn not_found(what: &str, id: &str) -> Status {
        Status::not_found(format!(
            "an error occurred when try to find {what} {id:?}: not found"
        ))
    }
}

#[tonic::async_trait]
impl runtime_service_server::RuntimeService for FakeRuntime {
    async fn version(
        &self,
        _: Request<api::VersionRequest>,
    ) -> Result<Response<api::VersionResponse>, Status> {
        self.enter("Version").await?;
        Ok(Response::new(api::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "1.0.0~test".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn status(
        &self,
        _: Request<api::StatusRequest>,
    ) -> Result<Response<api::StatusResponse>, Status> {
        self.enter("Status").await?;
        let ready = |t: &str| api::RuntimeCondition {
            r#type: t.into(),
            status: true,
            ..Default::default()
        };
        Ok(Response::new(api::StatusResponse {
            status: Some(api::RuntimeStatus {
                conditions: vec![ready("RuntimeReady"), ready("NetworkReady")],
            }),
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        self.enter("RunPodSandbox").await?;
        let config = req.into_inner().config.unwrap_or_default();
        let now = self.now_nanos();
        let id = self.with(|s| {
            let id = Self::next_id(s);
            let ip = format!("10.88.{}.{}", (s.next_id / 250) % 250, s.next_id % 250 + 2);
            s.sandboxes.insert(
                id.clone(),
                FakeSandbox {
                    id: id.clone(),
                    config,
                    ready: true,
                    created_at: now,
                    ip,
                },
            );
            id
        });
        Ok(Response::new(api::RunPodSandboxResponse {
            pod_sandbox_id: id,
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<api::StopPodSandboxRequest>,
    ) -> Result<Response<api::StopPodSandboxResponse>, Status> {
        self.enter("StopPodSandbox").await?;
        let id = req.into_inner().pod_sandbox_id;
        let now = self.now_nanos();
        self.with(|s| {
            if let Some(sb) = s.sandboxes.get_mut(&id) {
                sb.ready = false;
            }
            for c in s.containers.values_mut().filter(|c| c.sandbox_id == id) {
                Self::kill(c, 137, now);
            }
        });
        Ok(Response::new(api::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<api::RemovePodSandboxRequest>,
    ) -> Result<Response<api::RemovePodSandboxResponse>, Status> {
        self.enter("RemovePodSandbox").await?;
        let id = req.into_inner().pod_sandbox_id;
        self.with(|s| {
            s.sandboxes.remove(&id);
            s.containers.retain(|_, c| c.sandbox_id != id);
        });
        Ok(Response::new(api::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<api::PodSandboxStatusRequest>,
    ) -> Result<Response<api::PodSandboxStatusResponse>, Status> {
        self.enter("PodSandboxStatus").await?;
        let id = req.into_inner().pod_sandbox_id;
        let sb = self
            .with(|s| s.sandboxes.get(&id).cloned())
            .ok_or_else(|| Self::not_found("sandbox", &id))?;
        Ok(Response::new(api::PodSandboxStatusResponse {
            status: Some(api::PodSandboxStatus {
                id: sb.id.clone(),
                metadata: sb.config.metadata.clone(),
                state: sb.state(),
                created_at: sb.created_at,
                network: Some(api::PodSandboxNetworkStatus {
                    ip: if sb.ready { sb.ip } else { String::new() },
                    ..Default::default()
                }),
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<api::ListPodSandboxRequest>,
    ) -> Result<Response<api::ListPodSandboxResponse>, Status> {
        self.enter("ListPodSandbox").await?;
        let selector = req
            .into_inner()
            .filter
            .map(|f| f.label_selector)
            .unwrap_or_default();
        let items = self
            .sandboxes()
            .into_iter()
            .filter(|sb| labels_match(&sb.config.labels, &selector))
            .map(|sb| api::PodSandbox {
                id: sb.id.clone(),
                metadata: sb.config.metadata.clone(),
                state: sb.state(),
                created_at: sb.created_at,
                labels: sb.config.labels.clone(),
                annotations: sb.config.annotations.clone(),
                runtime_handler: String::new(),
            })
            .collect();
        Ok(Response::new(api::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        req: Request<api::CreateContainerRequest>,
    ) -> Result<Response<api::CreateContainerResponse>, Status> {
        self.enter("CreateContainer").await?;
        let req = req.into_inner();
        let now = self.now_nanos();
        let id = self.with(|s| {
            if !s
                .sandboxes
                .get(&req.pod_sandbox_id)
                .is_some_and(|sb| sb.ready)
            {
                return Err(Status::unknown(format!(
                    "sandbox {:?} is not ready",
                    req.pod_sandbox_id
                )));
            }
            let id = Self::next_id(s);
            s.containers.insert(
                id.clone(),
                FakeContainer {
                    id: id.clone(),
                    sandbox_id: req.pod_sandbox_id.clone(),
                    config: req.config.clone().unwrap_or_default(),
                    state: api::ContainerState::ContainerCreated,
                    created_at: now,
                    started_at: 0,
                    finished_at: 0,
                    exit_code: 0,
                    reason: String::new(),
                    pending_exit: None,
                },
            );
            Ok(id)
        })?;
        Ok(Response::new(api::CreateContainerResponse {
            container_id: id,
        }))
    }

    async fn start_container(
        &self,
        req: Request<api::StartContainerRequest>,
    ) -> Result<Response<api::StartContainerResponse>, Status> {
        self.enter("StartContainer").await?;
        let id = req.into_inner().container_id;
        let now = self.now_nanos();
        self.with(|s| match s.containers.get_mut(&id) {
            Some(c) if c.state == api::ContainerState::ContainerCreated => {
                c.state = api::ContainerState::ContainerRunning;
                c.started_at = now;
                Ok(())
            }
            Some(_) => Err(Status::unknown(format!(
                "container {id:?} is not in state created"
            ))),
            None => Err(Self::not_found("container", &id)),
        })?;
        Ok(Response::new(api::StartContainerResponse {}))
    }

    async fn update_container_resources(
        &self,
        req: Request<api::UpdateContainerResourcesRequest>,
    ) -> Result<Response<api::UpdateContainerResourcesResponse>, Status> {
        self.enter("UpdateContainerResources").await?;
        let req = req.into_inner();
        let id = req.container_id;
        self.with(|s| match s.containers.get_mut(&id) {
            Some(c) if c.state != api::ContainerState::ContainerExited => {
                c.config
                    .linux
                    .get_or_insert_with(Default::default)
                    .resources = req.linux;
                Ok(())
            }
            Some(_) => Err(Status::unknown(format!("container {id:?} is not running"))),
            None => Err(Self::not_found("container", &id)),
        })?;
        Ok(Response::new(api::UpdateContainerResourcesResponse {}))
    }

    async fn stop_container(
        &self,
        req: Request<api::StopContainerRequest>,
    ) -> Result<Response<api::StopContainerResponse>, Status> {
        self.enter("StopContainer").await?;
        let req = req.into_inner();
        let id = req.container_id;
        let stubborn = self.with(|s| {
            let c = s.containers.get(&id)?;
            Some(
                c.state == api::ContainerState::ContainerRunning
                    && s.ignore_stop_signal.contains(c.name()),
            )
        });
        match stubborn {
            None => return Err(Self::not_found("container", &id)),
            Some(true) => {
                // the stop signal is ignored: SIGKILL when the timeout runs out
                tokio::time::sleep(Duration::from_secs(req.timeout.max(0) as u64)).await;
                let now = self.now_nanos();
                self.with(|s| s.containers.get_mut(&id).map(|c| Self::kill(c, 137, now)));
            }
            Some(false) => {
                let now = self.now_nanos();
                self.with(|s| s.containers.get_mut(&id).map(|c| Self::kill(c, 143, now)));
            }
        }
        Ok(Response::new(api::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        req: Request<api::RemoveContainerRequest>,
    ) -> Result<Response<api::RemoveContainerResponse>, Status> {
        self.enter("RemoveContainer").await?;
        let id = req.into_inner().container_id;
        self.with(|s| s.containers.remove(&id));
        Ok(Response::new(api::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        req: Request<api::ListContainersRequest>,
    ) -> Result<Response<api::ListContainersResponse>, Status> {
        self.enter("ListContainers").await?;
        let selector = req
            .into_inner()
            .filter
            .map(|f| f.label_selector)
            .unwrap_or_default();
        let containers = self
            .containers()
            .into_iter()
            .filter(|c| labels_match(&c.config.labels, &selector))
            .map(|c| api::Container {
                id: c.id.clone(),
                pod_sandbox_id: c.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.image_ref(),
                state: c.state as i32,
                created_at: c.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(api::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        req: Request<api::ContainerStatusRequest>,
    ) -> Result<Response<api::ContainerStatusResponse>, Status> {
        self.enter("ContainerStatus").await?;
        let id = req.into_inner().container_id;
        let c = self
            .with(|s| s.containers.get(&id).cloned())
            .ok_or_else(|| Self::not_found("container", &id))?;
        Ok(Response::new(api::ContainerStatusResponse {
            status: Some(api::ContainerStatus {
                id: c.id.clone(),
                metadata: c.config.metadata.clone(),
                state: c.state as i32,
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code: c.exit_code,
                image: c.config.image.clone(),
                image_ref: c.image_ref(),
                reason: c.reason.clone(),
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                log_path: c.config.log_path.clone(),
                resources: c
                    .config
                    .linux
                    .as_ref()
                    .and_then(|l| l.resources.clone())
                    .map(|r| api::ContainerResources {
                        linux: Some(r),
                        ..Default::default()
                    }),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn exec_sync(
        &self,
        req: Request<api::ExecSyncRequest>,
    ) -> Result<Response<api::ExecSyncResponse>, Status> {
        self.enter("ExecSync").await?;
        let req = req.into_inner();
        let (hangs, code) = self.with(|s| {
            let c = s.containers.get(&req.container_id);
            (
                c.map(|c| s.hanging_exec.contains(c.name())),
                c.and_then(|c| s.exec_exit.get(c.name()).copied())
                    .unwrap_or(0),
            )
        });
        match hangs {
            None => Err(Self::not_found("container", &req.container_id)),
            Some(true) if req.timeout > 0 => {
                tokio::time::sleep(Duration::from_secs(req.timeout as u64)).await;
                Err(Status::deadline_exceeded(format!(
                    "command {:?} timed out",
                    req.cmd
                )))
            }
            Some(true) => std::future::pending().await,
            Some(false) => Ok(Response::new(api::ExecSyncResponse {
                exit_code: code,
                stderr: if code == 0 {
                    Vec::new()
                } else {
                    format!("fake exec failure (exit {code})\n").into_bytes()
                },
                ..Default::default()
            })),
        }
    }
}

#[tonic::async_trait]
impl image_service_server::ImageService for FakeRuntime {
    async fn list_images(
        &self,
        _: Request<api::ListImagesRequest>,
    ) -> Result<Response<api::ListImagesResponse>, Status> {
        self.enter("ListImages").await?;
        let images = self.with(|s| s.images.values().cloned().collect());
        Ok(Response::new(api::ListImagesResponse { images }))
    }

    async fn image_status(
        &self,
        req: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        self.enter("ImageStatus").await?;
        let name = req.into_inner().image.map(|i| i.image).unwrap_or_default();
        let image = self.with(|s| {
            s.images
                .get(&name)
                .or_else(|| s.images.values().find(|i| i.id == name))
                .cloned()
        });
        Ok(Response::new(api::ImageStatusResponse {
            image,
            ..Default::default()
        }))
    }

    async fn pull_image(
        &self,
        req: Request<api::PullImageRequest>,
    ) -> Result<Response<api::PullImageResponse>, Status> {
        self.enter("PullImage").await?;
        let name = req.into_inner().image.map(|i| i.image).unwrap_or_default();
        self.add_image(&name);
        let id = self.with(|s| s.images[&name].id.clone());
        Ok(Response::new(api::PullImageResponse { image_ref: id }))
    }

    async fn remove_image(
        &self,
        req: Request<api::RemoveImageRequest>,
    ) -> Result<Response<api::RemoveImageResponse>, Status> {
        self.enter("RemoveImage").await?;
        let name = req.into_inner().image.map(|i| i.image).unwrap_or_default();
        self.with(|s| s.images.retain(|k, i| *k != name && i.id != name));
        Ok(Response::new(api::RemoveImageResponse {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox_config(uid: &str) -> api::PodSandboxConfig {
        api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: "p".into(),
                uid: uid.into(),
                namespace: "ns".into(),
                attempt: 0,
            }),
            labels: HashMap::from([(super::super::labels::POD_UID.to_string(), uid.to_string())]),
            ..Default::default()
        }
    }

    /// The real client reaches the fake: a sandbox and a container go through their states,
    /// label filters apply, injected errors come back as the client's typed errors, and calls
    /// the fake does not model answer Unimplemented.
    #[tokio::test]
    async fn the_cri_client_drives_the_fake_runtime() {
        let fake = FakeRuntime::new();
        let cri = fake.client().await;
        assert_eq!(cri.version().await.unwrap().runtime_name, "fake");
        let sb = cri.run_pod_sandbox(sandbox_config("u1")).await.unwrap();
        cri.run_pod_sandbox(sandbox_config("u2")).await.unwrap();
        let mine = cri
            .list_pod_sandboxes(&[(super::super::labels::POD_UID, "u1")])
            .await
            .unwrap();
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].id, sb);
        let cfg = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let id = cri
            .create_container(&sb, cfg, sandbox_config("u1"))
            .await
            .unwrap();
        cri.start_container(&id).await.unwrap();
        assert!(fake.running("main").is_some());
        fake.exit(&id, 3);
        let st = cri.container_status(&id).await.unwrap();
        assert_eq!(st.state, api::ContainerState::ContainerExited as i32);
        assert_eq!(st.exit_code, 3);
        fake.inject_error("StopPodSandbox", Status::unavailable("busy"));
        assert!(cri.stop_pod_sandbox(&sb).await.is_err());
        cri.stop_pod_sandbox(&sb).await.unwrap();
        let st = cri.pod_sandbox_status(&sb).await.unwrap();
        assert_eq!(st.state, api::PodSandboxState::SandboxNotready as i32);
        assert!(cri
            .container_status("nope")
            .await
            .unwrap_err()
            .is_not_found());
        assert!(
            cri.reopen_container_log(&id).await.is_err(),
            "not modelled: Unimplemented"
        );
        assert_eq!(fake.count("RunPodSandbox"), 2);
    }

    /// A container that ignores the stop signal dies when StopContainer's timeout runs out.
    #[tokio::test(start_paused = true)]
    async fn a_stubborn_container_is_killed_when_the_stop_timeout_runs_out() {
        let fake = FakeRuntime::new();
        let cri = fake.client().await;
        fake.ignore_stop_signal("main");
        let sb = cri.run_pod_sandbox(sandbox_config("u1")).await.unwrap();
        let cfg = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: "main".into(),
                attempt: 0,
            }),
            ..Default::default()
        };
        let id = cri
            .create_container(&sb, cfg, sandbox_config("u1"))
            .await
            .unwrap();
        cri.start_container(&id).await.unwrap();
        let started = tokio::time::Instant::now();
        cri.stop_container(&id, 30).await.unwrap();
        assert!(started.elapsed() >= Duration::from_secs(30));
        assert_eq!(cri.container_status(&id).await.unwrap().exit_code, 137);
    }
}
