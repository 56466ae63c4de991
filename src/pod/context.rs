//! What every pod worker shares: the API and CRI clients, the status manager, events, the
//! node's identity and settings, and the clock ([`SyncContext`]).

use crate::cri::CriClient;
use crate::events::EventRecorder;
use crate::status::StatusManager;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Everything a pod worker needs, shared by all workers.
pub struct SyncContext {
    /// API client.
    pub client: kube::Client,
    /// CRI client.
    pub cri: CriClient,
    /// The status writer.
    pub status: StatusManager,
    /// Events.
    pub recorder: EventRecorder,
    /// This node's name.
    pub node_name: String,
    /// This node's IPs (hostIP).
    pub node_ips: Vec<String>,
    /// Root dir (pod directories, volumes).
    pub root_dir: PathBuf,
    /// Pod logs dir (`/var/log/pods`).
    pub pod_logs_dir: String,
    /// Runtime name for container IDs (`containerd`).
    pub runtime_name: String,
    /// The runtime mounts image volumes (CRI `Mount.image`;
    /// [`crate::kuberuntime::image_volume::runtime_supports_image_volumes`] of its `Version`);
    /// false keeps a pod with an image volume out with
    /// [`crate::volume::VolumeError::ImageVolumeUnsupported`].
    pub image_volumes: bool,
    /// Image pulls are serialized, as the Go kubelet's default `serializeImagePulls: true`.
    pub pull_lock: Mutex<()>,
    /// All services, for service environment variables (None: no API server, no service
    /// variables, as the Go kubelet without a service lister).
    pub services: Option<crate::source::ServiceLister>,
    /// The node's allocatable resources in milli-units (`resourceFieldRef` limits default).
    pub node_allocatable_milli: BTreeMap<String, i128>,
    /// DNS settings for pod sandboxes (clusterDNS, clusterDomain, the node's resolv.conf).
    pub dns: crate::pod::dns::DnsSettings,
    /// Pod-level cgroups (`cgroupsPerQOS`); None leaves them to the runtime.
    pub cgroups: Option<crate::cm::CgroupManager>,
    /// Where the sandboxes' cgroup parents are (`cgroupDriver`, `cgroupRoot`).
    pub cgroup_layout: crate::cm::CgroupLayout,
    /// The node's memory capacity in bytes (oom_score_adj of Burstable containers).
    pub memory_capacity_bytes: i64,
    /// Containers get `memory.oom.group = 1` ([`crate::cm::container_oom_group`]).
    pub container_oom_group: bool,
    /// Node pressure from the eviction manager, for admitting new pods (None: no eviction
    /// manager, every pod admitted).
    pub pressure: Option<crate::eviction::PressureHandle>,
    /// Wall-clock time for back-off decisions and status times: [`crate::time::SystemClock`]
    /// in deckhand, [`crate::time::TokioClock`] in component tests with paused time.
    pub clock: Arc<dyn crate::time::Clock>,
    /// The kubelet's long-lived tasks: pod workers and their probe tasks are spawned here, so
    /// shutdown waits for them and names the ones that do not stop.
    pub tasks: crate::tasks::Tasks,
    /// This node's Node object as the node status loop last read and wrote it (labels, taints,
    /// allocatable), for the kubelet's own admission of new pods ([`super::admission`]); None
    /// before registration and in standalone mode, where only the eviction manager admits.
    pub node: tokio::sync::watch::Receiver<Option<Arc<k8s_openapi::api::core::v1::Node>>>,
    /// The allocated and actuated resources of every pod (in-place resize).
    pub allocation: crate::allocation::AllocationManager,
    /// Container exits containerd's event stream reported before CRI shows them (filled by the
    /// PLEG, read through [`super::runtime::PodRuntimeStatus::observe`]).
    pub exits: crate::pleg::RecordedExits,
    /// The runtime state each worker last synced against with nothing left to do (read by the
    /// PLEG's relist, which then wakes a worker only for a change it has not seen).
    pub synced: crate::pleg::SyncedStates,
    /// Runtime handlers by RuntimeClass name, for the sandboxes of pods that name one.
    pub runtime_classes: crate::runtimeclass::RuntimeClassManager,
    /// The user namespace ranges of pods with `hostUsers: false`.
    pub userns: crate::userns::UserNamespaceManager,
}
