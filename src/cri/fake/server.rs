//! The fake runtime's CRI v1 RuntimeService and ImageService (cri-api's
//! `fake_runtime_service.go` and `fake_image_service.go`), served from its in-memory state.

use super::{FakeContainer, FakeRuntime, FakeSandbox};
use crate::cri::api::{self, image_service_server, runtime_service_server};
use std::collections::HashMap;
use std::time::Duration;
use tonic::{Request, Response, Status};

fn labels_match(labels: &HashMap<String, String>, selector: &HashMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
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
            runtime_handlers: self.with(|s| s.runtime_handlers.clone()),
            ..Default::default()
        }))
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        self.enter("RunPodSandbox").await?;
        let req = req.into_inner();
        let config = req.config.unwrap_or_default();
        let handler = req.runtime_handler;
        if !handler.is_empty() && !super::FAKE_RUNTIME_HANDLERS.contains(&handler.as_str()) {
            // containerd's words (pkg/cri/server/sandbox_run.go getSandboxRuntime)
            return Err(Status::unknown(format!(
                "failed to get sandbox runtime: no runtime for {handler:?} is configured"
            )));
        }
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
                    runtime_handler: handler,
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
            let ids = s.container_ids_of(&id);
            for c in ids {
                Self::kill(s, &c, 137, now);
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
        let now = self.now_nanos();
        self.with(|s| {
            let ids = s.container_ids_of(&id);
            for c in ids {
                s.publish(&c, api::ContainerEventType::ContainerDeletedEvent, now);
                s.containers.remove(&c);
            }
            s.sandboxes.remove(&id);
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
            status: Some(sb.cri_status()),
            ..Default::default()
        }))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<api::ListPodSandboxRequest>,
    ) -> Result<Response<api::ListPodSandboxResponse>, Status> {
        let selector = req
            .into_inner()
            .filter
            .map(|f| f.label_selector)
            .unwrap_or_default();
        self.enter_list("ListPodSandbox", &selector).await?;
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
                runtime_handler: sb.runtime_handler.clone(),
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
                    pending_oom: false,
                },
            );
            s.publish(&id, api::ContainerEventType::ContainerCreatedEvent, now);
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
                s.publish(&id, api::ContainerEventType::ContainerStartedEvent, now);
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
                self.with(|s| Self::kill(s, &id, 137, now));
            }
            Some(false) => {
                let now = self.now_nanos();
                self.with(|s| Self::kill(s, &id, 143, now));
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
        let now = self.now_nanos();
        self.with(|s| {
            s.publish(&id, api::ContainerEventType::ContainerDeletedEvent, now);
            s.containers.remove(&id)
        });
        Ok(Response::new(api::RemoveContainerResponse {}))
    }

    /// Reopens a container's log file (containerd's `ReopenContainerLog`): NotFound for a
    /// container the runtime does not hold. The fake writes no log files, so nothing else is
    /// modelled.
    async fn reopen_container_log(
        &self,
        req: Request<api::ReopenContainerLogRequest>,
    ) -> Result<Response<api::ReopenContainerLogResponse>, Status> {
        self.enter("ReopenContainerLog").await?;
        let id = req.into_inner().container_id;
        if !self.with(|s| s.containers.contains_key(&id)) {
            return Err(Self::not_found("container", &id));
        }
        Ok(Response::new(api::ReopenContainerLogResponse {}))
    }

    async fn list_containers(
        &self,
        req: Request<api::ListContainersRequest>,
    ) -> Result<Response<api::ListContainersResponse>, Status> {
        let selector = req
            .into_inner()
            .filter
            .map(|f| f.label_selector)
            .unwrap_or_default();
        self.enter_list("ListContainers", &selector).await?;
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
            status: Some(c.cri_status()),
            ..Default::default()
        }))
    }

    /// Opens a container event stream: every later create, start, stop (or exit) and removal,
    /// until [`FakeRuntime::end_event_streams`]. An injected error (`Unimplemented`: containerd
    /// 1.6) answers instead.
    async fn get_container_events(
        &self,
        _: Request<api::GetEventsRequest>,
    ) -> Result<Response<tonic::codegen::BoxStream<api::ContainerEventResponse>>, Status> {
        self.enter("GetContainerEvents").await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.with(|s| s.event_streams.push(tx));
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        )))
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
