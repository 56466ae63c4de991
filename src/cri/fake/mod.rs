//! An in-memory container runtime for component tests (as cri-api's `fake_runtime_service.go`
//! and `fake_image_service.go` are for the Go kubelet): [`FakeRuntime`] serves the CRI v1
//! RuntimeService and ImageService from memory, and [`FakeRuntime::client`] connects a real
//! [`CriClient`] to it over an in-process channel, so the code under test runs unchanged,
//! error mapping and deadlines included.
//!
//! What it models: sandboxes (ready or not, an IP from 10.88.0.0/16), containers (created,
//! running, exited, with exit codes and times), images (present or pulled), `StopContainer`
//! honouring its timeout for a container that ignores the stop signal, `ExecSync` that may hang
//! (a preStop hook that never returns), exit injection, per-method error injection, a
//! `GetContainerEvents` stream (CREATED, STARTED, STOPPED, DELETED, each with the pod sandbox's
//! and the container's status, as containerd 2.x sends them; an injected `Unimplemented` makes
//! it containerd 1.6), and a record of every call. Calls deckhand does not make answer
//! `Unimplemented`, as an older runtime would.
//!
//! The CRI services are in `server`, the test controls ([`FakeRuntime::inject_error`],
//! [`FakeRuntime::exit`], ...) in `control`.

use super::api::{self, image_service_server, runtime_service_server};
use super::CriClient;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Status;

mod control;
mod server;

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
    /// The runtime handler it was made with (empty: the default).
    pub runtime_handler: String,
}

/// The runtime handlers the fake runtime has configured besides the default (the empty name),
/// as a containerd config names `runc`; `RunPodSandbox` with another one fails with containerd's
/// message.
pub const FAKE_RUNTIME_HANDLERS: &[&str] = &["runc"];

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
    /// The kernel's OOM killer ended the process ([`FakeRuntime::oom_unconfirmed`]): once CRI
    /// shows the exit, its reason is `OOMKilled`, as containerd's CRI plugin reports it after
    /// a `/tasks/oom` event.
    pub pending_oom: bool,
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

impl FakeSandbox {
    /// The sandbox as CRI's `PodSandboxStatus` reports it.
    fn cri_status(&self) -> api::PodSandboxStatus {
        api::PodSandboxStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state(),
            created_at: self.created_at,
            network: Some(api::PodSandboxNetworkStatus {
                ip: if self.ready {
                    self.ip.clone()
                } else {
                    String::new()
                },
                ..Default::default()
            }),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            ..Default::default()
        }
    }
}

impl FakeContainer {
    /// The container as CRI's `ContainerStatus` reports it.
    fn cri_status(&self) -> api::ContainerStatus {
        api::ContainerStatus {
            id: self.id.clone(),
            metadata: self.config.metadata.clone(),
            state: self.state as i32,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            exit_code: self.exit_code,
            image: self.config.image.clone(),
            image_ref: self.image_ref(),
            reason: self.reason.clone(),
            labels: self.config.labels.clone(),
            annotations: self.config.annotations.clone(),
            log_path: self.config.log_path.clone(),
            resources: self
                .config
                .linux
                .as_ref()
                .and_then(|l| l.resources.clone())
                .map(|r| api::ContainerResources {
                    linux: Some(r),
                    ..Default::default()
                }),
            ..Default::default()
        }
    }

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
    /// The filtered `ListPodSandbox` / `ListContainers` calls that asked for one pod's objects
    /// (the pod UID label in the selector): index into `calls`, pod UID.
    pod_lists: Vec<(usize, String)>,
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
    /// The runtime handlers `Status` lists: none by default (as containerd 1.6); see
    /// [`FakeRuntime::set_user_namespaces`].
    runtime_handlers: Vec<api::RuntimeHandler>,
    /// The open `GetContainerEvents` streams.
    event_streams:
        Vec<tokio::sync::mpsc::UnboundedSender<Result<api::ContainerEventResponse, Status>>>,
}

impl State {
    /// The ids of sandbox `sandbox`'s containers.
    fn container_ids_of(&self, sandbox: &str) -> Vec<String> {
        self.containers
            .values()
            .filter(|c| c.sandbox_id == sandbox)
            .map(|c| c.id.clone())
            .collect()
    }

    /// Sends a `kind` event for container `id` to every open `GetContainerEvents` stream, with
    /// the container's and its sandbox's status as they are now (call it after the change, or
    /// before a removal).
    fn publish(&mut self, id: &str, kind: api::ContainerEventType, now: i64) {
        if self.event_streams.is_empty() {
            return;
        }
        let Some(c) = self.containers.get(id) else {
            return;
        };
        let ev = api::ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: now,
            pod_sandbox_status: self
                .sandboxes
                .get(&c.sandbox_id)
                .map(FakeSandbox::cri_status),
            containers_statuses: self
                .containers
                .values()
                .filter(|o| o.sandbox_id == c.sandbox_id)
                .map(FakeContainer::cri_status)
                .collect(),
        };
        self.event_streams
            .retain(|tx| tx.send(Ok(ev.clone())).is_ok());
    }
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
        self.enter_for(method, None).await
    }

    /// [`Self::enter`] for a list call with label selector `selector`, noting the pod it asks
    /// about ([`FakeRuntime::pod_lists`]).
    async fn enter_list(
        &self,
        method: &str,
        selector: &HashMap<String, String>,
    ) -> Result<(), Status> {
        let pod = selector.get(super::labels::POD_UID).map(String::as_str);
        self.enter_for(method, pod).await
    }

    async fn enter_for(&self, method: &str, pod_uid: Option<&str>) -> Result<(), Status> {
        let delay = self.with(|s| {
            if let Some(uid) = pod_uid {
                s.pod_lists.push((s.calls.len(), uid.to_string()));
            }
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

    fn next_id(s: &mut State) -> String {
        s.next_id += 1;
        format!("{:064x}", s.next_id)
    }

    /// Kills container `id` of `s` if it runs (exit `code` at `now`, unless its process had
    /// exited already) and publishes CONTAINER_STOPPED.
    fn kill(s: &mut State, id: &str, code: i32, now: i64) {
        let Some(c) = s.containers.get_mut(id) else {
            return;
        };
        if c.state != api::ContainerState::ContainerRunning {
            return;
        }
        c.state = api::ContainerState::ContainerExited;
        if let Some((code, at)) = c.pending_exit.take() {
            // the process had exited already: the stop finds nothing to kill
            c.finished_at = at;
            c.exit_code = code;
            c.reason = if c.pending_oom {
                "OOMKilled"
            } else if code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into();
        } else {
            c.finished_at = now;
            c.exit_code = code;
            c.reason = "Error".into();
        }
        s.publish(id, api::ContainerEventType::ContainerStoppedEvent, now);
    }

    fn not_found(what: &str, id: &str) -> Status {
        Status::not_found(format!(
            "an error occurred when try to find {what} {id:?}: not found"
        ))
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
        let sb = cri.run_pod_sandbox(sandbox_config("u1"), "").await.unwrap();
        cri.run_pod_sandbox(sandbox_config("u2"), "").await.unwrap();
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
        cri.reopen_container_log(&id).await.unwrap();
        assert!(cri
            .reopen_container_log("nope")
            .await
            .unwrap_err()
            .is_not_found());
        assert_eq!(fake.count("RunPodSandbox"), 2);
    }

    /// GetContainerEvents streams each container change with the pod's sandbox status (as
    /// containerd 2.x does); an injected Unimplemented (containerd 1.6) is the client's
    /// `is_unimplemented` error.
    #[tokio::test]
    async fn the_fake_streams_container_events_or_answers_unimplemented() {
        use api::ContainerEventType as T;
        use futures::StreamExt;
        let fake = FakeRuntime::new();
        let cri = fake.client().await;
        fake.inject_error(
            "GetContainerEvents",
            Status::unimplemented("unknown method"),
        );
        assert!(cri
            .get_container_events()
            .await
            .unwrap_err()
            .is_unimplemented());
        let sb = cri.run_pod_sandbox(sandbox_config("u1"), "").await.unwrap();
        // containerd 2.x sends the headers with the first event: subscribe alongside the calls
        let sub = tokio::spawn({
            let cri = cri.clone();
            async move { cri.get_container_events().await }
        });
        while fake.event_streams() == 0 {
            tokio::task::yield_now().await;
        }
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
        fake.exit(&id, 3);
        cri.remove_container(&id).await.unwrap();
        let mut stream = sub.await.unwrap().unwrap();
        let mut seen = vec![];
        for _ in 0..4 {
            let ev = stream.next().await.unwrap().unwrap();
            assert_eq!(ev.container_id, id);
            assert_eq!(ev.pod_sandbox_status.unwrap().metadata.unwrap().uid, "u1");
            seen.push((
                ev.container_event_type,
                ev.containers_statuses.first().map(|c| c.exit_code),
            ));
        }
        assert_eq!(
            seen,
            vec![
                (T::ContainerCreatedEvent as i32, Some(0)),
                (T::ContainerStartedEvent as i32, Some(0)),
                (T::ContainerStoppedEvent as i32, Some(3)),
                (T::ContainerDeletedEvent as i32, Some(3)),
            ]
        );
        fake.end_event_streams(None);
        assert!(stream.next().await.is_none(), "the stream ends");
    }

    /// A container that ignores the stop signal dies when StopContainer's timeout runs out.
    #[tokio::test(start_paused = true)]
    async fn a_stubborn_container_is_killed_when_the_stop_timeout_runs_out() {
        let fake = FakeRuntime::new();
        let cri = fake.client().await;
        fake.ignore_stop_signal("main");
        let sb = cri.run_pod_sandbox(sandbox_config("u1"), "").await.unwrap();
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
