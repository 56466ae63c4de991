//! The container runtime, reached through CRI v1 (`runtime.v1`, proto/api.proto from
//! k8s.io/cri-api at the pinned Kubernetes version) over containerd's unix socket.
//!
//! [`CriClient`] is a thin typed wrapper over the tonic clients; every `tonic::Status` is mapped to
//! a [`CriError`] in one place ([`CriError::from_status`]). The labels and annotations the Go
//! kubelet puts on sandboxes and containers (k/k `pkg/kubelet/kuberuntime/labels.go`) are named
//! in [`labels`]. [`fake::FakeRuntime`] is an in-memory runtime behind the same client, for
//! component tests.

pub mod fake;
pub mod labels;
pub mod list_cache;
pub mod reachability;
pub mod stuck_task;

use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::Channel;

/// Generated CRI v1 messages and clients (package `runtime.v1`).
#[allow(clippy::all, missing_docs)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

mod error;
pub use error::{CriError, Result};

use api::image_service_client::ImageServiceClient;
use api::runtime_service_client::RuntimeServiceClient;

/// Opens a gRPC channel to a `unix://` endpoint (or a bare socket path). The channel connects
/// lazily and reconnects by itself after a runtime restart.
pub fn channel(endpoint: &str) -> Result<Channel> {
    let path: PathBuf = endpoint.strip_prefix("unix://").unwrap_or(endpoint).into();
    if !path.is_absolute() {
        return Err(CriError::Connect {
            endpoint: endpoint.to_string(),
            reason: "only unix:// endpoints with an absolute path are supported".into(),
        });
    }
    let ep = tonic::transport::Endpoint::try_from("http://[::]")
        .map_err(|e| CriError::Connect {
            endpoint: endpoint.to_string(),
            reason: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(5));
    Ok(ep.connect_with_connector_lazy(tower::service_fn(move |_| {
        let path = path.clone();
        async move {
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                tokio::net::UnixStream::connect(path).await?,
            ))
        }
    })))
}

/// A CRI client: runtime and image services on one channel. Cheap to clone.
#[derive(Clone)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    image: ImageServiceClient<Channel>,
    /// The same channel, for containerd's own task service ([`stuck_task`]).
    channel: Channel,
    /// Default deadline for short calls (not pulls, not StopContainer).
    timeout: Duration,
    /// Whether the runtime answers, from every call's outcome.
    reachability: std::sync::Arc<reachability::Reachability>,
    /// The last unfiltered `ListPodSandbox` answer ([`Self::list_pod_sandboxes_since`]).
    sandboxes: std::sync::Arc<list_cache::ListCache<api::PodSandbox>>,
    /// The last unfiltered `ListContainers` answer ([`Self::list_containers_since`]).
    containers: std::sync::Arc<list_cache::ListCache<api::Container>>,
}

impl std::fmt::Debug for CriClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriClient").finish_non_exhaustive()
    }
}

/// Observer of every CRI call: (CRI method, duration, failed). Set once by whoever exports
/// runtime-operation metrics (the kubelet server's `/metrics`); unset, calls are not observed.
pub static CALL_OBSERVER: std::sync::OnceLock<fn(&'static str, Duration, bool)> =
    std::sync::OnceLock::new();

macro_rules! call {
    ($self:ident, $svc:ident, $method:ident, $op:literal, $id:expr, $req:expr, $timeout:expr) => {{
        let mut req = tonic::Request::new($req);
        req.set_timeout($timeout);
        let mut c = $self.$svc.clone();
        let started = std::time::Instant::now();
        let r = c.$method(req).await;
        if let Some(observe) = CALL_OBSERVER.get() {
            observe($op, started.elapsed(), r.is_err());
        }
        $self.reachability.observe(
            r.as_ref()
                .err()
                .is_some_and(|s| reachability::status_is_unreachable(s.code(), s.message())),
        );
        r.map(|r| r.into_inner())
            .map_err(|s| CriError::from_status($op, $id, s))
    }};
}

impl CriClient {
    /// Creates a client for `endpoint` (e.g. `unix:///run/containerd/containerd.sock`).
    pub fn new(endpoint: &str) -> Result<Self> {
        let ch = channel(endpoint)?;
        Ok(Self::from_channel(ch))
    }

    /// Creates a client on an existing channel.
    pub fn from_channel(ch: Channel) -> Self {
        Self {
            runtime: RuntimeServiceClient::new(ch.clone()),
            image: ImageServiceClient::new(ch.clone()),
            channel: ch,
            timeout: Duration::from_secs(120),
            reachability: Default::default(),
            sandboxes: Default::default(),
            containers: Default::default(),
        }
    }

    /// Whether the runtime answers (shared by every clone of this client).
    pub fn reachability(&self) -> &reachability::Reachability {
        &self.reachability
    }

    /// `Version`: runtime name and version, e.g. (`containerd`, `1.6.20~ds1`).
    pub async fn version(&self) -> Result<api::VersionResponse> {
        call!(
            self,
            runtime,
            version,
            "Version",
            "",
            api::VersionRequest {
                version: "v1".into()
            },
            Duration::from_secs(10)
        )
    }

    /// `Status`: the runtime conditions (RuntimeReady, NetworkReady) in `status`, the runtime
    /// handlers with their features (`runtime_handlers`: none from containerd 1.6) and the
    /// runtime's own features (`features`).
    pub async fn status(&self) -> Result<api::StatusResponse> {
        let r: api::StatusResponse = call!(
            self,
            runtime,
            status,
            "Status",
            "",
            api::StatusRequest { verbose: false },
            Duration::from_secs(10)
        )?;
        Ok(r)
    }

    /// `Status` with `verbose`: the conditions and the runtime's info map (containerd: `config`,
    /// the CRI plugin's configuration as JSON; `cniconfig`; `golang`).
    pub async fn status_info(
        &self,
    ) -> Result<(
        api::RuntimeStatus,
        std::collections::HashMap<String, String>,
    )> {
        let r: api::StatusResponse = call!(
            self,
            runtime,
            status,
            "Status",
            "",
            api::StatusRequest { verbose: true },
            Duration::from_secs(10)
        )?;
        Ok((r.status.unwrap_or_default(), r.info))
    }

    /// `RuntimeConfig`: what the runtime says about its cgroup driver, unparsed
    /// ([`crate::cm::choose_cgroup_driver`] decides). UNIMPLEMENTED (containerd before 2.0) is
    /// [`crate::cm::RuntimeConfigAnswer::Unimplemented`], not an error.
    pub async fn runtime_config(&self) -> Result<crate::cm::RuntimeConfigAnswer> {
        use crate::cm::RuntimeConfigAnswer;
        let r: Result<api::RuntimeConfigResponse> = call!(
            self,
            runtime,
            runtime_config,
            "RuntimeConfig",
            "",
            api::RuntimeConfigRequest {},
            Duration::from_secs(10)
        );
        match r {
            Ok(r) => Ok(match r.linux {
                Some(l) => RuntimeConfigAnswer::CgroupDriver(l.cgroup_driver),
                None => RuntimeConfigAnswer::NoLinux,
            }),
            Err(CriError::Rpc {
                code: tonic::Code::Unimplemented,
                ..
            }) => Ok(RuntimeConfigAnswer::Unimplemented),
            Err(e) => Err(e),
        }
    }

    /// `RunPodSandbox`: returns the new sandbox id.
    pub async fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let id = config
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        let r: api::RunPodSandboxResponse = call!(
            self,
            runtime,
            run_pod_sandbox,
            "RunPodSandbox",
            id,
            api::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: runtime_handler.to_string()
            },
            self.timeout
        )?;
        Ok(r.pod_sandbox_id)
    }

    /// `StopPodSandbox`: kills whatever still runs in the sandbox and tears down its network.
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        call!(
            self,
            runtime,
            stop_pod_sandbox,
            "StopPodSandbox",
            id,
            api::StopPodSandboxRequest {
                pod_sandbox_id: id.into()
            },
            self.timeout
        )
        .map(|_: api::StopPodSandboxResponse| ())
    }

    /// `RemovePodSandbox`: removes the sandbox and its containers (not their log files).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        call!(
            self,
            runtime,
            remove_pod_sandbox,
            "RemovePodSandbox",
            id,
            api::RemovePodSandboxRequest {
                pod_sandbox_id: id.into()
            },
            self.timeout
        )
        .map(|_: api::RemovePodSandboxResponse| ())
    }

    /// `PodSandboxStatus`.
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus> {
        let r: api::PodSandboxStatusResponse = call!(
            self,
            runtime,
            pod_sandbox_status,
            "PodSandboxStatus",
            id,
            api::PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false
            },
            self.timeout
        )?;
        r.status.ok_or_else(|| CriError::NotFound {
            op: "PodSandboxStatus",
            id: id.into(),
            message: "empty status".into(),
        })
    }

    /// `ListPodSandbox`, optionally filtered by label selector.
    pub async fn list_pod_sandboxes(
        &self,
        labels: &[(&str, &str)],
    ) -> Result<Vec<api::PodSandbox>> {
        let filter = (!labels.is_empty()).then(|| api::PodSandboxFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        });
        let started = tokio::time::Instant::now();
        let r: api::ListPodSandboxResponse = call!(
            self,
            runtime,
            list_pod_sandbox,
            "ListPodSandbox",
            "",
            api::ListPodSandboxRequest { filter },
            self.timeout
        )?;
        if labels.is_empty() {
            self.sandboxes.put(started, &r.items);
        }
        Ok(r.items)
    }

    /// Every pod sandbox, from a `ListPodSandbox` call that started at or after `after`: the last
    /// unfiltered one made through any clone of this client (the PLEG's relist) when it is that
    /// recent, else a new call ([`list_cache`], the Go kubelet's runtime cache).
    pub async fn list_pod_sandboxes_since(
        &self,
        after: tokio::time::Instant,
    ) -> Result<Vec<api::PodSandbox>> {
        match self.sandboxes.get(after) {
            Some(list) => Ok(list),
            None => self.list_pod_sandboxes(&[]).await,
        }
    }

    /// Whether the last unfiltered `ListPodSandbox` and `ListContainers` answers show anything of
    /// pod `pod_uid` (its [`labels::POD_UID`] label), when both calls started at or after
    /// `after`; None when either list is older or was never taken (the caller asks the runtime).
    /// No call is made. This is how a new pod's first sync starts from the PLEG's last relist
    /// instead of asking the runtime, as the Go kubelet's pod worker reads the PLEG's pod cache
    /// (k/k `pkg/kubelet/container/cache.go` `GetNewerThan`).
    pub fn cached_lists_show_pod(
        &self,
        after: tokio::time::Instant,
        pod_uid: &str,
    ) -> Option<bool> {
        let of_pod = |l: &std::collections::HashMap<String, String>| {
            l.get(labels::POD_UID).map(String::as_str) == Some(pod_uid)
        };
        let sandboxes = self.sandboxes.any(after, |s| of_pod(&s.labels))?;
        let containers = self.containers.any(after, |c| of_pod(&c.labels))?;
        Some(sandboxes || containers)
    }

    /// `ListContainers`, optionally filtered by label selector.
    pub async fn list_containers(&self, labels: &[(&str, &str)]) -> Result<Vec<api::Container>> {
        let filter = (!labels.is_empty()).then(|| api::ContainerFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        });
        let started = tokio::time::Instant::now();
        let r: api::ListContainersResponse = call!(
            self,
            runtime,
            list_containers,
            "ListContainers",
            "",
            api::ListContainersRequest { filter },
            self.timeout
        )?;
        if labels.is_empty() {
            self.containers.put(started, &r.containers);
        }
        Ok(r.containers)
    }

    /// Every container, from a `ListContainers` call that started at or after `after` (as
    /// [`Self::list_pod_sandboxes_since`]).
    pub async fn list_containers_since(
        &self,
        after: tokio::time::Instant,
    ) -> Result<Vec<api::Container>> {
        match self.containers.get(after) {
            Some(list) => Ok(list),
            None => self.list_containers(&[]).await,
        }
    }

    /// `CreateContainer` in sandbox `sandbox_id`; returns the container id.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String> {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let r: api::CreateContainerResponse = call!(
            self,
            runtime,
            create_container,
            "CreateContainer",
            name,
            api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            },
            self.timeout
        )?;
        Ok(r.container_id)
    }

    /// `UpdateContainerResources`: the runtime applies `linux` to the running container's
    /// cgroup at once (in-place resize).
    pub async fn update_container_resources(
        &self,
        id: &str,
        linux: api::LinuxContainerResources,
    ) -> Result<()> {
        call!(
            self,
            runtime,
            update_container_resources,
            "UpdateContainerResources",
            id,
            api::UpdateContainerResourcesRequest {
                container_id: id.into(),
                linux: Some(linux),
                ..Default::default()
            },
            self.timeout
        )
        .map(|_: api::UpdateContainerResourcesResponse| ())
    }

    /// `StartContainer`.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        call!(
            self,
            runtime,
            start_container,
            "StartContainer",
            id,
            api::StartContainerRequest {
                container_id: id.into()
            },
            self.timeout
        )
        .map(|_: api::StartContainerResponse| ())
    }

    /// `StopContainer`: the runtime sends the stop signal (SIGTERM unless the image says
    /// otherwise), waits `timeout_secs` seconds, then SIGKILL. `timeout_secs` 0 kills at once.
    pub async fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<()> {
        // Leave the runtime time to do its own SIGKILL after the grace period.
        let deadline = Duration::from_secs(timeout_secs.max(0) as u64 + 30);
        call!(
            self,
            runtime,
            stop_container,
            "StopContainer",
            id,
            api::StopContainerRequest {
                container_id: id.into(),
                timeout: timeout_secs
            },
            deadline
        )
        .map(|_: api::StopContainerResponse| ())
    }

    /// `RemoveContainer`. A container whose task containerd left half-started (see
    /// [`stuck_task`]) is refused with "cannot delete running task": its task is then killed
    /// and deleted through containerd's task service, and the removal tried once more.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        match self.remove_container_once(id).await {
            Err(CriError::Rpc { code, message, .. })
                if stuck_task::is_stuck_task(code, &message) =>
            {
                tracing::info!(container.id = %id, "the container's task was left half-started by the runtime; killing it");
                if let Err(s) = stuck_task::kill_task(self.channel.clone(), id).await {
                    tracing::warn!(container.id = %id, error = %s, "killing the half-started task failed");
                }
                self.remove_container_once(id).await
            }
            r => r,
        }
    }

    async fn remove_container_once(&self, id: &str) -> Result<()> {
        call!(
            self,
            runtime,
            remove_container,
            "RemoveContainer",
            id,
            api::RemoveContainerRequest {
                container_id: id.into()
            },
            self.timeout
        )
        .map(|_: api::RemoveContainerResponse| ())
    }

    /// `ContainerStatus`.
    pub async fn container_status(&self, id: &str) -> Result<api::ContainerStatus> {
        let r: api::ContainerStatusResponse = call!(
            self,
            runtime,
            container_status,
            "ContainerStatus",
            id,
            api::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false
            },
            self.timeout
        )?;
        r.status.ok_or_else(|| CriError::NotFound {
            op: "ContainerStatus",
            id: id.into(),
            message: "empty status".into(),
        })
    }

    /// `ExecSync`: runs `cmd` in container `id`, waiting at most `timeout` seconds (0 = no
    /// limit). A non-zero exit code is not an error; a timeout is [`CriError::DeadlineExceeded`].
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_secs: i64,
    ) -> Result<api::ExecSyncResponse> {
        let deadline = Duration::from_secs(timeout_secs.max(0) as u64 + 10);
        call!(
            self,
            runtime,
            exec_sync,
            "ExecSync",
            id,
            api::ExecSyncRequest {
                container_id: id.into(),
                cmd,
                timeout: timeout_secs
            },
            deadline
        )
    }

    /// `ImageStatus`: `None` when the image is not present (CRI answers OK with an empty image).
    pub async fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        let r: api::ImageStatusResponse = call!(
            self,
            image,
            image_status,
            "ImageStatus",
            image,
            api::ImageStatusRequest {
                image: Some(api::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: false
            },
            self.timeout
        )?;
        Ok(r.image.filter(|i| !i.id.is_empty()))
    }

    /// `PullImage`: returns the image reference (containerd: the image ID, `sha256:<config digest>`).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String> {
        let r: api::PullImageResponse = call!(
            self,
            image,
            pull_image,
            "PullImage",
            image,
            api::PullImageRequest {
                image: Some(api::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth,
                sandbox_config,
            },
            Duration::from_secs(600)
        )?;
        Ok(r.image_ref)
    }

    /// `ListImages`.
    pub async fn list_images(&self) -> Result<Vec<api::Image>> {
        let r: api::ListImagesResponse = call!(
            self,
            image,
            list_images,
            "ListImages",
            "",
            api::ListImagesRequest { filter: None },
            self.timeout
        )?;
        Ok(r.images)
    }

    /// `RemoveImage` of image `id` (an image ID, `sha256:...`, or a reference). The runtime
    /// answers OK when the image is already gone.
    pub async fn remove_image(&self, id: &str) -> Result<()> {
        call!(
            self,
            image,
            remove_image,
            "RemoveImage",
            id,
            api::RemoveImageRequest {
                image: Some(api::ImageSpec {
                    image: id.into(),
                    ..Default::default()
                })
            },
            self.timeout
        )
        .map(|_: api::RemoveImageResponse| ())
    }

    /// `ImageFsInfo`.
    pub async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse> {
        call!(
            self,
            image,
            image_fs_info,
            "ImageFsInfo",
            "",
            api::ImageFsInfoRequest {},
            self.timeout
        )
    }

    /// `Exec` (streaming): returns the URL of the runtime's streaming server that serves this
    /// exec session (containerd: `http://127.0.0.1:<port>/exec/<token>`).
    pub async fn exec(&self, req: api::ExecRequest) -> Result<String> {
        let id = req.container_id.clone();
        let r: api::ExecResponse = call!(
            self,
            runtime,
            exec,
            "Exec",
            id,
            req,
            Duration::from_secs(30)
        )?;
        Ok(r.url)
    }

    /// `Attach` (streaming): returns the streaming server URL for the attach session.
    pub async fn attach(&self, req: api::AttachRequest) -> Result<String> {
        let id = req.container_id.clone();
        let r: api::AttachResponse = call!(
            self,
            runtime,
            attach,
            "Attach",
            id,
            req,
            Duration::from_secs(30)
        )?;
        Ok(r.url)
    }

    /// `PortForward` (streaming): returns the streaming server URL for forwarding into sandbox
    /// `sandbox_id` (`ports` may be empty: SPDY clients name ports per stream).
    pub async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        let r: api::PortForwardResponse = call!(
            self,
            runtime,
            port_forward,
            "PortForward",
            sandbox_id,
            api::PortForwardRequest {
                pod_sandbox_id: sandbox_id.into(),
                port: ports
            },
            Duration::from_secs(30)
        )?;
        Ok(r.url)
    }

    /// `ContainerStats` of one container.
    pub async fn container_stats(&self, id: &str) -> Result<Option<api::ContainerStats>> {
        let r: api::ContainerStatsResponse = call!(
            self,
            runtime,
            container_stats,
            "ContainerStats",
            id,
            api::ContainerStatsRequest {
                container_id: id.into()
            },
            Duration::from_secs(30)
        )?;
        Ok(r.stats)
    }

    /// `ListContainerStats` of every container.
    pub async fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>> {
        let r: api::ListContainerStatsResponse = call!(
            self,
            runtime,
            list_container_stats,
            "ListContainerStats",
            "",
            api::ListContainerStatsRequest { filter: None },
            Duration::from_secs(30)
        )?;
        Ok(r.stats)
    }

    /// `PodSandboxStats` of one sandbox (pod-level CPU, memory, network).
    pub async fn pod_sandbox_stats(&self, id: &str) -> Result<Option<api::PodSandboxStats>> {
        let r: api::PodSandboxStatsResponse = call!(
            self,
            runtime,
            pod_sandbox_stats,
            "PodSandboxStats",
            id,
            api::PodSandboxStatsRequest {
                pod_sandbox_id: id.into()
            },
            Duration::from_secs(30)
        )?;
        Ok(r.stats)
    }

    /// `ListPodSandboxStats` of every sandbox.
    pub async fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>> {
        let r: api::ListPodSandboxStatsResponse = call!(
            self,
            runtime,
            list_pod_sandbox_stats,
            "ListPodSandboxStats",
            "",
            api::ListPodSandboxStatsRequest { filter: None },
            Duration::from_secs(30)
        )?;
        Ok(r.stats)
    }

    /// `GetContainerEvents`: the runtime's stream of container events (KEP-3386; what the Go
    /// kubelet's evented PLEG follows, k/k `pkg/kubelet/pleg/evented.go`). No deadline: the
    /// stream lasts until the runtime ends it. containerd 2.x sends the response headers with
    /// the first event, so this await lasts until something happens; containerd 1.6 answers at
    /// once with [`CriError::is_unimplemented`].
    pub async fn get_container_events(
        &self,
    ) -> Result<tonic::Streaming<api::ContainerEventResponse>> {
        let mut c = self.runtime.clone();
        let r = c.get_container_events(api::GetEventsRequest {}).await;
        self.reachability.observe(
            r.as_ref()
                .err()
                .is_some_and(|s| reachability::status_is_unreachable(s.code(), s.message())),
        );
        r.map(|r| r.into_inner())
            .map_err(|s| CriError::from_status("GetContainerEvents", "", s))
    }

    /// `ReopenContainerLog`: the runtime closes the container's log file and opens its
    /// `log_path` again (after the kubelet renamed it during rotation).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        call!(
            self,
            runtime,
            reopen_container_log,
            "ReopenContainerLog",
            id,
            api::ReopenContainerLogRequest {
                container_id: id.into()
            },
            Duration::from_secs(30)
        )
        .map(|_: api::ReopenContainerLogResponse| ())
    }
}
