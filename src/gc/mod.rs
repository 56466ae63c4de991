//! Garbage collection of dead containers, sandboxes, pod log directories ([`containers`]) and
//! unused images ([`images`]), with the Go kubelet's policies: k/k
//! `pkg/kubelet/kuberuntime/kuberuntime_gc.go`, `pkg/kubelet/container/container_gc.go`,
//! `pkg/kubelet/images/image_gc_manager.go`, driven as `kubelet.go` `StartGarbageCollection`
//! drives them (containers every [`CONTAINER_GC_PERIOD`], images every [`IMAGE_GC_PERIOD`]).
//!
//! The decisions (which containers, sandboxes, directories and images go) are pure functions of
//! a snapshot ([`containers::plan`], [`images::eviction_order`], ...); the collectors
//! ([`ContainerGc`], [`ImageGcManager`]) read the snapshot through [`GcRuntime`], ask the pod
//! workers through [`PodStateProvider`], and report through [`EventSink`] — traits with CRI,
//! [`crate::pod::states::PodStates`] and [`crate::events::EventRecorder`] behind them in the
//! binary and fakes in the tests.

pub mod containers;
pub mod image_plan;
pub mod images;

pub use containers::{ContainerGc, ContainerGcPolicy};
pub use images::{ImageGcManager, ImageGcPolicy};

use crate::cri::{api, labels, CriClient, CriError};
use futures::future::BoxFuture;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often dead containers are collected (k/k `kubelet.go` `ContainerGCPeriod`, 1 minute).
pub const CONTAINER_GC_PERIOD: Duration = Duration::from_secs(60);
/// How often unused images are collected (k/k `kubelet.go` `ImageGCPeriod`, 5 minutes).
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);

/// Node event reasons of the collectors (k/k `pkg/kubelet/events/event.go`).
pub mod reason {
    /// Container garbage collection failed; the message is the error.
    pub const CONTAINER_GC_FAILED: &str = "ContainerGCFailed";
    /// Image garbage collection failed twice in a row; the message is the error.
    pub const IMAGE_GC_FAILED: &str = "ImageGCFailed";
    /// Image garbage collection could not free enough space.
    pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";
    /// The image filesystem reported a capacity of 0.
    pub const INVALID_DISK_CAPACITY: &str = "InvalidDiskCapacity";
}

/// Errors of the garbage collectors. Each names the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A CRI call failed (listing containers, sandboxes or images, ImageFsInfo).
    #[error("{op}: {source}")]
    Runtime {
        /// What was being done, e.g. `listing containers`.
        op: &'static str,
        /// The CRI error.
        #[source]
        source: CriError,
    },
    /// The pod logs directory could not be read.
    #[error("failed to read podLogsDirectory {path:?}: {source}")]
    ReadLogsDir {
        /// The directory (`/var/log/pods`).
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The image filesystem's size could not be read (statvfs of its mount point).
    #[error("failed to get image filesystem stats of {path:?}: {message}")]
    ImageFsStats {
        /// The mount point CRI ImageFsInfo names.
        path: String,
        /// What failed.
        message: String,
    },
    /// The image filesystem reported a capacity of 0 (Go: `invalid capacity 0 on image filesystem`).
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// Images were deleted but not enough space was freed; the message is the Go kubelet's
    /// `FreeDiskSpaceFailed` text (`Insufficient free disk space on the node's image filesystem ...`).
    #[error("{0}")]
    InsufficientSpace(String),
    /// Some image deletions failed (Go: `wanted to free N bytes, but freed M bytes space with
    /// errors in image deletion: [...]`, or the imageMaximumGCAge variant).
    #[error("{0}")]
    ImageDeletion(String),
    /// Several steps failed (Go's `utilerrors.NewAggregate` rendering `[a, b]`).
    #[error("{}", aggregate_message(.0))]
    Aggregate(Vec<GcError>),
}

/// Go's aggregate error text: one error as is, several as `[a, b]`.
fn aggregate_message(errs: &[GcError]) -> String {
    if errs.len() == 1 {
        return errs[0].to_string();
    }
    let parts: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// Go's `errors.NewAggregate` over strings: one as is, several as `[a, b]`.
pub(crate) fn aggregate_strings(errs: &[String]) -> String {
    if errs.len() == 1 {
        return errs[0].clone();
    }
    format!("[{}]", errs.join(", "))
}

/// A container's state as CRI reports it (the pod workers' type; garbage collection never
/// removes a running container and stops an unknown one first).
pub use crate::pod::runtime::ContainerState;

/// One container in the runtime (CRI `ListContainers` item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// Container id.
    pub id: String,
    /// Sandbox id.
    pub sandbox_id: String,
    /// Pod UID (label `io.kubernetes.pod.uid`); empty for containers not made by a kubelet.
    pub pod_uid: String,
    /// Container name (CRI metadata name = the name in the pod spec).
    pub name: String,
    /// State.
    pub state: ContainerState,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_at_ns: i64,
    /// The image the container runs, as the image ID (`sha256:...`; CRI `image_id`, else
    /// `image_ref`).
    pub image_id: String,
    /// The image as the container spec names it (CRI `image.image`).
    pub image: String,
}

/// One pod sandbox in the runtime (CRI `ListPodSandbox` item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSandbox {
    /// Sandbox id.
    pub id: String,
    /// Pod UID (sandbox metadata uid).
    pub pod_uid: String,
    /// True for SANDBOX_READY.
    pub ready: bool,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_at_ns: i64,
}

/// One image in the runtime (CRI `ListImages` item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeImage {
    /// Image ID (`sha256:<config digest>` with containerd).
    pub id: String,
    /// Tags (`docker.io/library/busybox:latest`).
    pub repo_tags: Vec<String>,
    /// Digested references.
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// Never collected: CRI `pinned`, or the runtime's sandbox (pause) image.
    pub pinned: bool,
}

/// The image filesystem's size, in bytes (cadvisor's `FsStats` of the image filesystem as the
/// Go kubelet's `ImageFsStats` reports them: capacity and available from statfs, used from CRI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImageFsStats {
    /// Total size of the filesystem (`f_blocks * f_frsize`).
    pub capacity_bytes: u64,
    /// Bytes available to unprivileged users (`f_bavail * f_frsize`).
    pub available_bytes: u64,
    /// Bytes the runtime's images use (CRI ImageFsInfo `used_bytes`).
    pub used_bytes: u64,
}

/// The runtime operations garbage collection needs. [`CriGcRuntime`] implements it over CRI;
/// tests use fakes. Object-safe (boxed futures) so that collectors hold an `Arc<dyn GcRuntime>`.
pub trait GcRuntime: Send + Sync {
    /// Every container.
    fn list_containers(&self) -> BoxFuture<'_, Result<Vec<RuntimeContainer>, CriError>>;
    /// Every pod sandbox.
    fn list_sandboxes(&self) -> BoxFuture<'_, Result<Vec<RuntimeSandbox>, CriError>>;
    /// Stops a container (used before removing one in an unknown state).
    fn stop_container<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>>;
    /// Removes a container and its log files (the Go kubelet's `removeContainer` with
    /// `keepLogs` false: rotated and current log files, the legacy `/var/log/containers` link).
    fn remove_container<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>>;
    /// Stops a sandbox (a no-op for a stopped one).
    fn stop_sandbox<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>>;
    /// Removes a sandbox.
    fn remove_sandbox<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>>;
    /// Every image.
    fn list_images(&self) -> BoxFuture<'_, Result<Vec<RuntimeImage>, CriError>>;
    /// Removes an image by ID.
    fn remove_image<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>>;
    /// The image filesystem's capacity, availability and use.
    fn image_fs_stats(&self) -> BoxFuture<'_, Result<ImageFsStats, GcError>>;
    /// The images container `id` mounts as image volumes (CRI `ContainerStatus` mounts with
    /// `image` set: the image IDs deckhand created the mounts with), for the image garbage
    /// collector's in-use set (k/k `image_gc_manager.go` `handleImageVolumes`). None by default.
    fn container_image_mounts<'a>(
        &'a self,
        _id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, CriError>> {
        Box::pin(async move { Ok(Vec::new()) })
    }
}

/// What the pod workers know about pods (k/k `kuberuntime` `podStateProvider`, answered by
/// `pod_workers.go`).
pub trait PodStateProvider: Send + Sync {
    /// True once all pod sources have been seen (the Go kubelet's `sourcesReady.AllReady()`).
    fn sources_ready(&self) -> bool;
    /// The pod is gone (deleted and terminated, or unknown after the sources synced): all its
    /// dead containers, sandboxes and its log directory may go.
    fn should_pod_content_be_removed(&self, uid: &str) -> bool;
    /// The pod will not run anything again (terminal phase, or gone): with `evictNonDeletedPods`
    /// its dead containers and sandboxes may go too.
    fn should_pod_runtime_be_removed(&self, uid: &str) -> bool;
    /// The pod's worker is killing and cleaning it up; garbage collection keeps off its objects.
    fn is_pod_terminating(&self, uid: &str) -> bool;
}

impl PodStateProvider for crate::pod::states::PodStates {
    fn sources_ready(&self) -> bool {
        self.synced()
    }
    fn should_pod_content_be_removed(&self, uid: &str) -> bool {
        // Known pods keep their content: a deleted pod's worker removes it itself and forgets
        // the UID when done.
        self.get(uid).is_none() && self.synced()
    }
    fn should_pod_runtime_be_removed(&self, uid: &str) -> bool {
        use crate::pod::states::WorkerState;
        match self.get(uid) {
            Some(WorkerState::Terminal) => true,
            Some(_) => false,
            None => self.synced(),
        }
    }
    fn is_pod_terminating(&self, uid: &str) -> bool {
        self.get(uid) == Some(crate::pod::states::WorkerState::Terminating)
    }
}

/// Where the collectors' Node events go.
pub trait EventSink: Send + Sync {
    /// Records a Warning event on the Node with `reason` and `message`.
    fn warning(&self, reason: &'static str, message: String);
}

/// [`EventSink`] over the event recorder: events on this node's Node object.
#[derive(Clone)]
pub struct NodeEvents {
    /// The recorder.
    pub recorder: crate::events::EventRecorder,
    /// This node's name.
    pub node_name: String,
}

impl EventSink for NodeEvents {
    fn warning(&self, reason: &'static str, message: String) {
        self.recorder.node(&self.node_name, true, reason, message);
    }
}

/// [`GcRuntime`] over CRI.
#[derive(Clone)]
pub struct CriGcRuntime {
    cri: CriClient,
    /// `/var/log/containers`: the legacy container log links (`<pod>_<ns>_<container>-<id>.log`).
    legacy_log_dir: PathBuf,
}

impl CriGcRuntime {
    /// A runtime over `cri`; container log links live in the `containers` directory beside
    /// `pod_logs_dir` (`/var/log/pods` → `/var/log/containers`), as deckhand writes them.
    pub fn new(cri: CriClient, pod_logs_dir: &Path) -> Self {
        let legacy_log_dir = pod_logs_dir
            .parent()
            .unwrap_or(Path::new("/var/log"))
            .join("containers");
        Self {
            cri,
            legacy_log_dir,
        }
    }

    /// The image ID of the runtime's sandbox (pause) image. containerd 1.6 does not report
    /// `pinned` (1.7 pins the sandbox image), and a sandbox is not a container, so nothing else
    /// keeps the Go image collector off it; deckhand asks the runtime's verbose status for its
    /// `sandboxImage` and treats that image as pinned.
    async fn sandbox_image_id(&self) -> Option<String> {
        let (_, info) = self.cri.status_info().await.ok()?;
        let config: serde_json::Value = serde_json::from_str(info.get("config")?).ok()?;
        let image = config.get("sandboxImage")?.as_str()?.to_string();
        self.cri
            .image_status(&image)
            .await
            .ok()
            .flatten()
            .map(|i| i.id)
    }
}

fn container_state(s: i32) -> ContainerState {
    match api::ContainerState::try_from(s) {
        Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
        Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
        Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// Removes a container's log file and its rotated siblings (`<log>.<timestamp>`, `.gz`).
async fn remove_log_files(log_path: &str) {
    if log_path.is_empty() {
        return;
    }
    let path = Path::new(log_path);
    let _ = tokio::fs::remove_file(path).await;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!("{}.", name.to_string_lossy());
    if let Ok(mut rd) = tokio::fs::read_dir(dir).await {
        while let Ok(Some(e)) = rd.next_entry().await {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = tokio::fs::remove_file(e.path()).await;
            }
        }
    }
}

impl GcRuntime for CriGcRuntime {
    fn list_containers(&self) -> BoxFuture<'_, Result<Vec<RuntimeContainer>, CriError>> {
        Box::pin(async move {
            Ok(self
                .cri
                .list_containers(&[])
                .await?
                .into_iter()
                .map(|c| RuntimeContainer {
                    pod_uid: c.labels.get(labels::POD_UID).cloned().unwrap_or_default(),
                    name: c
                        .metadata
                        .as_ref()
                        .map(|m| m.name.clone())
                        .unwrap_or_default(),
                    state: container_state(c.state),
                    created_at_ns: c.created_at,
                    image_id: if c.image_id.is_empty() {
                        c.image_ref.clone()
                    } else {
                        c.image_id.clone()
                    },
                    image: c
                        .image
                        .as_ref()
                        .map(|i| i.image.clone())
                        .unwrap_or_default(),
                    sandbox_id: c.pod_sandbox_id,
                    id: c.id,
                })
                .collect())
        })
    }

    fn list_sandboxes(&self) -> BoxFuture<'_, Result<Vec<RuntimeSandbox>, CriError>> {
        Box::pin(async move {
            Ok(self
                .cri
                .list_pod_sandboxes(&[])
                .await?
                .into_iter()
                .map(|s| RuntimeSandbox {
                    pod_uid: s
                        .metadata
                        .as_ref()
                        .map(|m| m.uid.clone())
                        .unwrap_or_default(),
                    ready: s.state == api::PodSandboxState::SandboxReady as i32,
                    created_at_ns: s.created_at,
                    id: s.id,
                })
                .collect())
        })
    }

    fn stop_container<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
        Box::pin(async move { self.cri.stop_container(id, 0).await })
    }

    fn remove_container<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
        Box::pin(async move {
            // k/k removeContainerLog: the log files, then the legacy link, then the container.
            let status = self.cri.container_status(id).await?;
            remove_log_files(&status.log_path).await;
            let l = &status.labels;
            let get = |k: &str| l.get(k).map(String::as_str).unwrap_or("");
            let link = self.legacy_log_dir.join(format!(
                "{}_{}_{}-{}.log",
                get(labels::POD_NAME),
                get(labels::POD_NAMESPACE),
                get(labels::CONTAINER_NAME),
                id
            ));
            let _ = tokio::fs::remove_file(link).await;
            self.cri.remove_container(id).await
        })
    }

    fn stop_sandbox<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
        Box::pin(async move { self.cri.stop_pod_sandbox(id).await })
    }

    fn remove_sandbox<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
        Box::pin(async move { self.cri.remove_pod_sandbox(id).await })
    }

    fn list_images(&self) -> BoxFuture<'_, Result<Vec<RuntimeImage>, CriError>> {
        Box::pin(async move {
            let sandbox_image = self.sandbox_image_id().await;
            Ok(self
                .cri
                .list_images()
                .await?
                .into_iter()
                .map(|i| RuntimeImage {
                    pinned: i.pinned || sandbox_image.as_deref() == Some(i.id.as_str()),
                    id: i.id,
                    repo_tags: i.repo_tags,
                    repo_digests: i.repo_digests,
                    size: i.size,
                })
                .collect())
        })
    }

    fn remove_image<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
        Box::pin(async move { self.cri.remove_image(id).await })
    }

    fn container_image_mounts<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, CriError>> {
        Box::pin(async move {
            let status = self.cri.container_status(id).await?;
            Ok(status
                .mounts
                .into_iter()
                .filter_map(|m| m.image.map(|i| i.image))
                .filter(|i| !i.is_empty())
                .collect())
        })
    }

    fn image_fs_stats(&self) -> BoxFuture<'_, Result<ImageFsStats, GcError>> {
        Box::pin(async move {
            let info = self
                .cri
                .image_fs_info()
                .await
                .map_err(|source| GcError::Runtime {
                    op: "getting the image filesystem info",
                    source,
                })?;
            let fs = info
                .image_filesystems
                .first()
                .ok_or_else(|| GcError::ImageFsStats {
                    path: String::new(),
                    message: "the runtime reported no image filesystem".into(),
                })?;
            let used_bytes = fs.used_bytes.as_ref().map(|u| u.value).unwrap_or(0);
            let mountpoint = fs
                .fs_id
                .as_ref()
                .map(|f| f.mountpoint.clone())
                .unwrap_or_default();
            let mp = mountpoint.clone();
            let st = tokio::task::spawn_blocking(move || nix::sys::statvfs::statvfs(mp.as_str()))
                .await
                .map_err(|e| GcError::ImageFsStats {
                    path: mountpoint.clone(),
                    message: e.to_string(),
                })?
                .map_err(|e| GcError::ImageFsStats {
                    path: mountpoint.clone(),
                    message: e.to_string(),
                })?;
            let frsize = st.fragment_size() as u64;
            Ok(ImageFsStats {
                capacity_bytes: st.blocks() as u64 * frsize,
                available_bytes: st.blocks_available() as u64 * frsize,
                used_bytes,
            })
        })
    }
}

/// Fakes behind the collectors' traits, for the unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::pod::states::{PodStates, WorkerState};
    use k8s_openapi::jiff::Timestamp;
    use std::collections::HashSet;
    use std::sync::Mutex;

    /// The pod workers' view, backed by the real [`PodStates`].
    #[derive(Default)]
    pub struct FakePods(pub PodStates);

    impl FakePods {
        pub fn synced() -> Self {
            let s = PodStates::default();
            s.mark_synced();
            Self(s)
        }
        pub fn with(self, uid: &str, state: WorkerState) -> Self {
            self.0.set(uid, state);
            self
        }
    }

    impl PodStateProvider for FakePods {
        fn sources_ready(&self) -> bool {
            self.0.sources_ready()
        }
        fn should_pod_content_be_removed(&self, uid: &str) -> bool {
            self.0.should_pod_content_be_removed(uid)
        }
        fn should_pod_runtime_be_removed(&self, uid: &str) -> bool {
            self.0.should_pod_runtime_be_removed(uid)
        }
        fn is_pod_terminating(&self, uid: &str) -> bool {
            self.0.is_pod_terminating(uid)
        }
    }

    #[derive(Default)]
    pub struct FakeState {
        pub containers: Vec<RuntimeContainer>,
        pub sandboxes: Vec<RuntimeSandbox>,
        pub images: Vec<RuntimeImage>,
        pub fs: ImageFsStats,
        pub fail_list: bool,
        pub fail_remove_image: HashSet<String>,
        pub removed_images: Vec<String>,
        pub stopped_sandboxes: Vec<String>,
    }

    /// A runtime held in memory.
    #[derive(Default)]
    pub struct FakeRuntime {
        pub state: Mutex<FakeState>,
    }

    fn failed(op: &'static str) -> CriError {
        CriError::Rpc {
            op,
            id: String::new(),
            code: tonic::Code::Unavailable,
            message: "rpc error: code = Unavailable desc = fake".into(),
        }
    }

    impl GcRuntime for FakeRuntime {
        fn list_containers(&self) -> BoxFuture<'_, Result<Vec<RuntimeContainer>, CriError>> {
            Box::pin(async move {
                let s = self.state.lock().unwrap();
                if s.fail_list {
                    return Err(failed("ListContainers"));
                }
                Ok(s.containers.clone())
            })
        }
        fn list_sandboxes(&self) -> BoxFuture<'_, Result<Vec<RuntimeSandbox>, CriError>> {
            Box::pin(async move { Ok(self.state.lock().unwrap().sandboxes.clone()) })
        }
        fn stop_container<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
            Box::pin(async move { Ok(()) })
        }
        fn remove_container<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
            Box::pin(async move {
                self.state.lock().unwrap().containers.retain(|c| c.id != id);
                Ok(())
            })
        }
        fn stop_sandbox<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
            Box::pin(async move {
                self.state
                    .lock()
                    .unwrap()
                    .stopped_sandboxes
                    .push(id.to_string());
                Ok(())
            })
        }
        fn remove_sandbox<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
            Box::pin(async move {
                self.state.lock().unwrap().sandboxes.retain(|s| s.id != id);
                Ok(())
            })
        }
        fn list_images(&self) -> BoxFuture<'_, Result<Vec<RuntimeImage>, CriError>> {
            Box::pin(async move {
                let s = self.state.lock().unwrap();
                if s.fail_list {
                    return Err(failed("ListImages"));
                }
                Ok(s.images.clone())
            })
        }
        fn remove_image<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), CriError>> {
            Box::pin(async move {
                let mut s = self.state.lock().unwrap();
                if s.fail_remove_image.contains(id) {
                    return Err(failed("RemoveImage"));
                }
                s.images.retain(|i| i.id != id);
                s.removed_images.push(id.to_string());
                Ok(())
            })
        }
        fn image_fs_stats(&self) -> BoxFuture<'_, Result<ImageFsStats, GcError>> {
            Box::pin(async move { Ok(self.state.lock().unwrap().fs) })
        }
    }

    /// Recorded Node events: (reason, message).
    #[derive(Default)]
    pub struct FakeEvents {
        pub events: Mutex<Vec<(String, String)>>,
    }

    impl EventSink for FakeEvents {
        fn warning(&self, reason: &'static str, message: String) {
            self.events
                .lock()
                .unwrap()
                .push((reason.to_string(), message));
        }
    }

    /// A clock the test sets.
    pub struct FakeClock(Mutex<Timestamp>);

    impl FakeClock {
        pub fn at(t: Timestamp) -> Self {
            Self(Mutex::new(t))
        }
        pub fn set(&self, t: Timestamp) {
            *self.0.lock().unwrap() = t;
        }
    }

    impl crate::time::Clock for FakeClock {
        fn now(&self) -> Timestamp {
            *self.0.lock().unwrap()
        }
    }
}
