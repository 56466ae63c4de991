//! Eviction manager: node pressure (MemoryPressure, DiskPressure, PIDPressure) from the hard
//! eviction thresholds, node-level reclaim (container and image garbage collection) and the
//! eviction of one pod per monitoring interval when a threshold stays crossed, with the Go
//! kubelet's reasons and messages; admission of new pods under pressure.
//!
//! Mirrors k/k `pkg/kubelet/eviction` (`eviction_manager.go` `synchronize`, `Admit`) and the
//! doc page "Node-pressure Eviction". The decisions are pure ([`thresholds`], [`rank`]); this
//! module observes the node (the Summary API figures of [`crate::server::stats`], statvfs,
//! `/proc`, walks of pod log and volume directories) and acts through the pod workers.
//!
//! Differences from the Go kubelet: hard thresholds only (`evictionSoft` is refused by the
//! config loader); no `evictionMinimumReclaim`; no memcg threshold notifier (memory is polled
//! every monitoring interval); `allocatableMemory.available` and `containerfs.*` are not
//! signals here.

pub mod rank;
pub mod thresholds;

use self::rank::{ContainerUsage, PodUsage};
use self::thresholds::{
    NodeCondition, Observation, Observations, PressureTracker, Signal, Threshold,
};
use crate::cri::CriClient;
use crate::events::EventRecorder;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How often the eviction manager observes the node (`evictionMonitoringPeriod`, 10 s).
pub const MONITORING_INTERVAL: Duration = Duration::from_secs(10);
/// Default `evictionPressureTransitionPeriod` (5 min).
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);
/// Grace period of a pod evicted for a hard threshold (`immediateEvictionGracePeriodSeconds`).
pub const IMMEDIATE_EVICTION_GRACE_SECONDS: i64 = 1;
/// How long the manager waits for an evicted pod to be killed before it goes on
/// (`podCleanupTimeout`, 30 s).
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Node event before reclaiming (`Attempting to reclaim <resource>`).
pub const REASON_EVICTION_THRESHOLD_MET: &str = "EvictionThresholdMet";
/// Pod condition reason of an eviction's `DisruptionTarget` condition.
pub const REASON_TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

/// What a pod that the kubelet stops on its own (eviction, admission refusal) reports: phase
/// `Failed` with this reason and message, and, for an eviction, a `DisruptionTarget` condition.
#[derive(Debug, Clone, PartialEq)]
pub struct TerminalStatus {
    /// `status.reason` (`Evicted`).
    pub reason: String,
    /// `status.message`.
    pub message: String,
    /// A condition to set (`DisruptionTarget`, True, `TerminationByKubelet`), if any.
    pub condition: Option<PodCondition>,
    /// Grace period for killing the containers, seconds.
    pub grace_seconds: i64,
    /// Refused at admission: nothing ever ran, and the status is only phase, reason, message,
    /// QoS class and start time (k/k `rejectPod`), with the conditions others set kept.
    pub rejected: bool,
}

impl TerminalStatus {
    /// The whole status of a pod refused at admission, from its current status `old`.
    pub fn rejected_status(
        &self,
        pod: &Pod,
        now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) -> k8s_openapi::api::core::v1::PodStatus {
        let old = pod.status.clone().unwrap_or_default();
        let conditions: Vec<PodCondition> = old
            .conditions
            .iter()
            .flatten()
            .filter(|c| !crate::status::generate::KUBELET_CONDITIONS.contains(&c.type_.as_str()))
            .cloned()
            .collect();
        k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Failed".into()),
            reason: Some(self.reason.clone()),
            message: Some(self.message.clone()),
            qos_class: Some(crate::resource::qos_class(pod).to_string()),
            start_time: old.start_time.clone().or(Some(now)),
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..Default::default()
        }
    }

    /// Applies this to a generated status: phase Failed, reason, message, the condition
    /// (replacing one of the same type, keeping its transition time when the status matches).
    pub fn apply(&self, status: &mut k8s_openapi::api::core::v1::PodStatus) {
        status.phase = Some("Failed".into());
        status.reason = Some(self.reason.clone());
        status.message = Some(self.message.clone());
        if let Some(c) = &self.condition {
            let conds = status.conditions.get_or_insert_with(Vec::new);
            match conds.iter_mut().find(|x| x.type_ == c.type_) {
                Some(x) if x.status == c.status => {
                    x.reason = c.reason.clone();
                    x.message = c.message.clone();
                }
                Some(x) => *x = c.clone(),
                None => conds.push(c.clone()),
            }
        }
    }
}

/// Requests from the eviction manager to the pod workers.
#[derive(Debug)]
pub enum PodWorkerCommand {
    /// The pods that may be evicted: admitted, not terminal, not being deleted.
    ActivePods(oneshot::Sender<Vec<Pod>>),
    /// Kill the pod (by UID) and report `status`; answers once the containers are stopped
    /// (false when the pod has no worker).
    Evict {
        /// Pod UID.
        uid: String,
        /// What the pod reports.
        status: TerminalStatus,
        /// Answered when done.
        done: oneshot::Sender<bool>,
    },
}

/// Node-level reclaim before evicting pods (`buildSignalToNodeReclaimFuncs`): for disk
/// signals, deleting dead containers and unused images; with a dedicated image filesystem,
/// nodefs pressure only deletes dead containers (their logs are on nodefs). Implemented over the
/// garbage collectors.
pub trait NodeReclaim: Send + Sync {
    /// Reclaims what it can for `signal` (errors are logged by the implementation).
    /// `dedicated_imagefs`: the image filesystem is not the root dir's filesystem.
    fn reclaim(
        &self,
        signal: Signal,
        dedicated_imagefs: bool,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// No node-level reclaim.
pub struct NoReclaim;

impl NodeReclaim for NoReclaim {
    fn reclaim(
        &self,
        _signal: Signal,
        _dedicated_imagefs: bool,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// Node-level reclaim through the garbage collectors: dead containers for every disk signal,
/// unused images for imagefs signals and for nodefs when images share its filesystem.
pub struct GcReclaim {
    /// Container garbage collection.
    pub containers: crate::gc::ContainerGc,
    /// Image garbage collection.
    pub images: crate::gc::ImageGcManager,
}

impl NodeReclaim for GcReclaim {
    fn reclaim(
        &self,
        signal: Signal,
        dedicated_imagefs: bool,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            if let Err(e) = self.containers.delete_all_unused_containers().await {
                tracing::warn!(error = %e, "eviction manager: unexpected error when attempting to reduce resource pressure (containers)");
            }
            if signal.is_imagefs() || !dedicated_imagefs {
                match self.images.delete_unused_images().await {
                    Ok(freed) => tracing::info!(
                        freed_bytes = freed,
                        "eviction manager: deleted unused images"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "eviction manager: unexpected error when attempting to reduce resource pressure (images)")
                    }
                }
            }
        })
    }
}

/// The pressure conditions currently in force, shared with the node status loop and pod
/// admission. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PressureHandle {
    conditions: Arc<RwLock<Vec<NodeCondition>>>,
}

impl PressureHandle {
    /// The conditions in force (sorted: MemoryPressure, DiskPressure, PIDPressure).
    pub fn conditions(&self) -> Vec<NodeCondition> {
        self.conditions.read().unwrap().clone()
    }

    fn set(&self, c: Vec<NodeCondition>) {
        *self.conditions.write().unwrap() = c;
    }

    /// Admission of a new pod under the current pressure ([`rank::admit`]).
    pub fn admit(&self, pod: &Pod) -> Result<(), String> {
        rank::admit(pod, &self.conditions())
    }
}

/// Settings of the eviction manager.
#[derive(Debug, Clone)]
pub struct EvictionConfig {
    /// Hard thresholds.
    pub thresholds: Vec<Threshold>,
    /// `evictionPressureTransitionPeriod`.
    pub pressure_transition_period: Duration,
    /// Observation period.
    pub monitoring_interval: Duration,
    /// The kubelet root directory (its filesystem is nodefs; pods' volumes are under it).
    pub root_dir: PathBuf,
    /// `/var/log/pods`.
    pub pod_logs_dir: PathBuf,
    /// The node name (events).
    pub node_name: String,
    /// Where pod cgroups are when pods have their own (`cgroupsPerQOS`): per-pod process
    /// counts for PID-pressure ranking are read from the pod cgroup's `pids.current`.
    pub pod_cgroups: Option<crate::cm::CgroupLayout>,
}

/// The eviction manager.
pub struct EvictionManager {
    cfg: EvictionConfig,
    cri: CriClient,
    stats: crate::server::stats::StatsProvider,
    recorder: EventRecorder,
    pressure: PressureHandle,
    workers: mpsc::Sender<PodWorkerCommand>,
    reclaim: Box<dyn NodeReclaim>,
    tracker: PressureTracker,
    /// Whether the image filesystem is another filesystem than nodefs, found once
    /// (`HasDedicatedImageFs`, asked once by the Go kubelet too).
    dedicated_imagefs: Option<bool>,
}

/// Disk usage of a directory tree on one filesystem: (bytes allocated, inodes). Never follows
/// symlinks and does not cross into other filesystems (tmpfs mounts of memory-backed volumes).
pub fn du(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(root) = std::fs::symlink_metadata(path) else {
        return (0, 0);
    };
    let dev = root.dev();
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let mut stack = vec![path.to_path_buf()];
    let mut seen = std::collections::HashSet::new();
    while let Some(p) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if md.dev() != dev {
            continue;
        }
        if md.nlink() > 1 && !md.is_dir() && !seen.insert(md.ino()) {
            continue;
        }
        bytes += md.blocks() * 512;
        inodes += 1;
        if md.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    (bytes, inodes)
}

fn device_of(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| m.dev())
}

/// `kernel.pid_max` and the number of tasks (`sysinfo.procs`): the `pid.available` signal.
fn observe_pids() -> Option<Observation> {
    let max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    // /proc/loadavg's 4th field is running/total scheduling entities, as sysinfo counts them
    let total: u64 = std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .nth(3)?
        .split('/')
        .nth(1)?
        .parse()
        .ok()?;
    Some(Observation {
        available: max.saturating_sub(total),
        capacity: max,
    })
}

/// Local storage usage of a pod (logs, local volumes, and the writable layers when
/// `with_rootfs`), as `podDiskUsage` measures it. Walks directories: call it off the runtime
/// threads.
fn pod_disk_usage(
    root_dir: &Path,
    pod_logs_dir: &Path,
    pod: &Pod,
    stats: Option<&crate::server::stats::PodStats>,
    with_rootfs: bool,
) -> PodUsage {
    let uid = crate::pod::uid(pod);
    let log_dir = pod_logs_dir.join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or(""),
        uid
    ));
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let mut containers = vec![];
    let spec = pod.spec.clone().unwrap_or_default();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        let (lb, li) = du(&log_dir.join(&c.name));
        let rootfs = stats
            .and_then(|s| s.containers.iter().find(|x| x.name == c.name))
            .and_then(|x| x.rootfs.as_ref())
            .and_then(|r| r.used_bytes);
        bytes += lb;
        inodes += li;
        if with_rootfs {
            bytes += rootfs.unwrap_or(0);
        }
        containers.push(ContainerUsage {
            name: c.name.clone(),
            memory_bytes: stats
                .and_then(|s| s.containers.iter().find(|x| x.name == c.name))
                .and_then(|x| x.memory.as_ref())
                .and_then(|m| m.working_set_bytes),
            ephemeral_bytes: Some(lb + rootfs.unwrap_or(0)),
        });
    }
    let vol_root = crate::volume::pod_dir(root_dir, uid).join("volumes");
    for v in spec.volumes.iter().flatten() {
        // localVolumeNames: emptyDir on disk, configMap, gitRepo (downwardAPI too here:
        // it is written to disk as well)
        let dir = if let Some(e) = &v.empty_dir {
            if e.medium.as_deref() == Some("Memory") {
                continue;
            }
            "kubernetes.io~empty-dir"
        } else if v.config_map.is_some() {
            "kubernetes.io~configmap"
        } else if v.downward_api.is_some() {
            "kubernetes.io~downward-api"
        } else {
            continue;
        };
        let (b, i) = du(&vol_root.join(dir).join(&v.name));
        bytes += b;
        inodes += i;
    }
    PodUsage {
        memory_bytes: stats
            .and_then(|s| s.memory.as_ref())
            .and_then(|m| m.working_set_bytes),
        disk_bytes: Some(bytes),
        inodes: Some(inodes),
        processes: None,
        containers,
    }
}

/// Tasks in the pod's cgroup (`pids.current`, cgroup v1 `pids` hierarchy or v2), if known.
fn pod_processes(pod: &Pod, layout: &crate::cm::CgroupLayout) -> Option<u64> {
    let path = layout.pod_parent(pod).ok()?;
    ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .find_map(|root| std::fs::read_to_string(format!("{root}{path}/pids.current")).ok())
        .and_then(|s| s.trim().parse().ok())
}

impl EvictionManager {
    /// Replaces the node-level reclaim (set once the garbage collectors exist).
    pub fn set_reclaim(&mut self, reclaim: Box<dyn NodeReclaim>) {
        self.reclaim = reclaim;
    }

    /// A manager observing with `cri`, killing through `workers`, reclaiming through `reclaim`.
    pub fn new(
        cfg: EvictionConfig,
        cri: CriClient,
        recorder: EventRecorder,
        workers: mpsc::Sender<PodWorkerCommand>,
        reclaim: Box<dyn NodeReclaim>,
    ) -> Self {
        let stats = crate::server::stats::StatsProvider::new(
            cri.clone(),
            cfg.node_name.clone(),
            cfg.root_dir.clone(),
        )
        .with_pod_cgroups(cfg.pod_cgroups.clone());
        Self {
            cfg,
            cri,
            stats,
            recorder,
            pressure: PressureHandle::default(),
            workers,
            reclaim,
            tracker: PressureTracker::default(),
            dedicated_imagefs: None,
        }
    }

    /// The shared pressure conditions (for node status and admission).
    pub fn pressure(&self) -> PressureHandle {
        self.pressure.clone()
    }

    /// Observes every signal from the node-level stats ([`crate::server::stats::StatsProvider::node_signals`], no
    /// per-pod CRI call). Returns the observations and whether the image filesystem is a
    /// different filesystem from nodefs. Pod stats are read only when a threshold is met
    /// ([`EvictionManager::pod_stats`]).
    async fn observe(&mut self) -> (Observations, bool) {
        let mut obs = Observations::new();
        let node = self.stats.node_signals().await;
        if let Some(m) = &node.memory {
            if let (Some(avail), Some(ws)) = (m.available_bytes, m.working_set_bytes) {
                obs.insert(
                    Signal::MemoryAvailable,
                    Observation {
                        available: avail,
                        capacity: avail + ws,
                    },
                );
            }
        }
        let fs_obs = |fs: &crate::server::stats::FsStats,
                      bytes: Signal,
                      inodes: Signal,
                      obs: &mut Observations| {
            if let (Some(a), Some(c)) = (fs.available_bytes, fs.capacity_bytes) {
                obs.insert(
                    bytes,
                    Observation {
                        available: a,
                        capacity: c,
                    },
                );
            }
            if let (Some(a), Some(c)) = (fs.inodes_free, fs.inodes) {
                obs.insert(
                    inodes,
                    Observation {
                        available: a,
                        capacity: c,
                    },
                );
            }
        };
        if let Some(fs) = &node.fs {
            fs_obs(
                fs,
                Signal::NodeFsAvailable,
                Signal::NodeFsInodesFree,
                &mut obs,
            );
        }
        if let Some(fs) = &node.image_fs {
            fs_obs(
                fs,
                Signal::ImageFsAvailable,
                Signal::ImageFsInodesFree,
                &mut obs,
            );
        }
        if let Some(p) = observe_pids() {
            obs.insert(Signal::PidAvailable, p);
        }
        let dedicated = match self.dedicated_imagefs {
            Some(d) => d,
            None => match self.cri.image_fs_info().await {
                Ok(info) => {
                    let d = info
                        .image_filesystems
                        .first()
                        .and_then(|f| f.fs_id.as_ref())
                        .map(|id| {
                            device_of(Path::new(&id.mountpoint)) != device_of(&self.cfg.root_dir)
                        })
                        .unwrap_or(false);
                    self.dedicated_imagefs = Some(d);
                    d
                }
                // asked again next time
                Err(_) => false,
            },
        };
        (obs, dedicated)
    }

    /// The pods' stats from the full summary (memory usage for ranking), read when a threshold
    /// is met.
    async fn pod_stats(&self) -> Vec<crate::server::stats::PodStats> {
        match self.stats.summary(false).await {
            Ok(s) => s.pods,
            Err(e) => {
                tracing::warn!(error = %e, "eviction manager: failed to get summary stats");
                vec![]
            }
        }
    }

    /// One pass of the control loop (`synchronize`). Returns the evicted pod's name, if any.
    pub async fn synchronize(&mut self) -> Option<String> {
        let (obs, dedicated) = self.observe().await;
        let met = thresholds::thresholds_met(&self.cfg.thresholds, &obs);
        let conditions =
            self.tracker
                .update(&met, Instant::now(), self.cfg.pressure_transition_period);
        if conditions != self.pressure.conditions() {
            tracing::info!(conditions = ?conditions.iter().map(|c| c.type_name()).collect::<Vec<_>>(), "eviction manager: node conditions changed");
            self.pressure.set(conditions);
        }
        let threshold = thresholds::threshold_to_reclaim(&met)?;
        let signal = threshold.signal;
        let resource = signal.resource();
        tracing::info!(
            resource,
            signal = signal.name(),
            "eviction manager: attempting to reclaim"
        );
        self.recorder.node(
            &self.cfg.node_name,
            true,
            REASON_EVICTION_THRESHOLD_MET,
            format!("Attempting to reclaim {resource}"),
        );
        if signal != Signal::MemoryAvailable && signal != Signal::PidAvailable {
            self.reclaim.reclaim(signal, dedicated).await;
            let (after, _) = self.observe().await;
            if thresholds::thresholds_met(&self.cfg.thresholds, &after).is_empty() {
                tracing::info!(
                    resource,
                    "eviction manager: able to reduce resource pressure without evicting pods"
                );
                return None;
            }
        }
        tracing::info!(resource, "eviction manager: must evict pod(s) to reclaim");
        let (tx, rx) = oneshot::channel();
        if self
            .workers
            .send(PodWorkerCommand::ActivePods(tx))
            .await
            .is_err()
        {
            return None;
        }
        let active = rx.await.unwrap_or_default();
        if active.is_empty() {
            tracing::warn!("eviction manager: eviction thresholds have been met, but no pods are active to evict");
            return None;
        }
        let pod_stats = self.pod_stats().await;
        let by_uid: HashMap<&str, &crate::server::stats::PodStats> = pod_stats
            .iter()
            .map(|p| (p.pod_ref.uid.as_str(), p))
            .collect();
        // nodefs on its own filesystem holds logs and volumes; otherwise the writable layers too
        let with_rootfs = match signal {
            Signal::ImageFsAvailable | Signal::ImageFsInodesFree => true,
            Signal::NodeFsAvailable | Signal::NodeFsInodesFree => !dedicated,
            _ => true,
        };
        let root_dir_usage = {
            let pods: Vec<(Pod, Option<crate::server::stats::PodStats>)> = active
                .into_iter()
                .map(|p| {
                    let s = by_uid.get(crate::pod::uid(&p)).map(|s| (*s).clone());
                    (p, s)
                })
                .collect();
            let root_dir = self.cfg.root_dir.clone();
            let pod_logs_dir = self.cfg.pod_logs_dir.clone();
            let pod_cgroups = self.cfg.pod_cgroups.clone();
            // directory walks and cgroup reads are blocking file work: off the runtime threads
            let measured = tokio::task::spawn_blocking(move || {
                pods.into_iter()
                    .map(|(p, s)| {
                        let s = s.as_ref();
                        let u = match signal {
                            Signal::MemoryAvailable | Signal::PidAvailable => s.map(|s| PodUsage {
                                memory_bytes: s.memory.as_ref().and_then(|m| m.working_set_bytes),
                                processes: pod_cgroups.as_ref().and_then(|l| pod_processes(&p, l)),
                                containers: s
                                    .containers
                                    .iter()
                                    .map(|c| ContainerUsage {
                                        name: c.name.clone(),
                                        memory_bytes: c
                                            .memory
                                            .as_ref()
                                            .and_then(|m| m.working_set_bytes),
                                        ephemeral_bytes: None,
                                    })
                                    .collect(),
                                ..Default::default()
                            }),
                            _ => Some(pod_disk_usage(&root_dir, &pod_logs_dir, &p, s, with_rootfs)),
                        };
                        (p, u)
                    })
                    .collect::<Vec<_>>()
            })
            .await;
            match measured {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "measuring pod usage failed");
                    return None;
                }
            }
        };
        let mut ranked = root_dir_usage;
        rank::rank(signal, &mut ranked);
        let observed = obs.get(&signal).copied();
        for (pod, usage) in ranked {
            if rank::is_critical(&pod) {
                tracing::warn!(pod = %crate::pod::format_pod(&pod), "eviction manager: cannot evict a critical pod");
                continue;
            }
            let message = rank::eviction_message(
                signal,
                &pod,
                usage.as_ref(),
                observed.map(|o| (threshold.quantity(o.capacity), o.available)),
            );
            self.recorder
                .pod(&pod, None, true, rank::REASON_EVICTED, message.clone());
            let status = TerminalStatus {
                reason: rank::REASON_EVICTED.into(),
                message: message.clone(),
                condition: Some(PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some(REASON_TERMINATION_BY_KUBELET.into()),
                    message: Some(message.clone()),
                    last_transition_time: Some(crate::time::truncate(
                        k8s_openapi::jiff::Timestamp::now(),
                    )),
                    ..Default::default()
                }),
                grace_seconds: IMMEDIATE_EVICTION_GRACE_SECONDS,
                rejected: false,
            };
            let name = crate::pod::format_pod(&pod);
            tracing::info!(pod = %name, %message, "evicting pod");
            let (tx, rx) = oneshot::channel();
            let uid = crate::pod::uid(&pod).to_string();
            if self
                .workers
                .send(PodWorkerCommand::Evict {
                    uid,
                    status,
                    done: tx,
                })
                .await
                .is_err()
            {
                return None;
            }
            match tokio::time::timeout(POD_CLEANUP_TIMEOUT, rx).await {
                Ok(Ok(true)) => {
                    tracing::info!(pod = %name, "eviction manager: pod is evicted successfully")
                }
                Ok(_) => tracing::warn!(pod = %name, "eviction manager: pod failed to evict"),
                Err(_) => {
                    tracing::warn!(pod = %name, "eviction manager: timed out waiting for the pod to be cleaned up")
                }
            }
            return Some(name);
        }
        tracing::warn!("eviction manager: unable to evict any pods from the node");
        None
    }

    /// Runs the control loop every monitoring interval until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        tracing::info!(thresholds = ?self.cfg.thresholds.iter().map(|t| t.signal.name()).collect::<Vec<_>>(), "eviction manager: starting control loop");
        loop {
            let _ = self.synchronize().await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(self.cfg.monitoring_interval) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn du_counts_blocks_and_inodes_without_following_symlinks() {
        let dir = std::env::temp_dir().join(format!("deckhand-du-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        struct D(PathBuf);
        impl D {
            fn path(&self) -> &Path {
                &self.0
            }
        }
        impl Drop for D {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let d = D(dir);
        std::fs::write(d.path().join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/b"), vec![1u8; 5_000]).unwrap();
        std::os::unix::fs::symlink("/etc", d.path().join("out")).unwrap();
        let (bytes, inodes) = du(d.path());
        assert!(bytes >= 15_000, "{bytes}");
        assert!(bytes < 1 << 20, "{bytes}: followed the symlink?");
        assert_eq!(inodes, 5); // dir, a, sub, sub/b, the link itself
        assert_eq!(du(&d.path().join("missing")), (0, 0));
    }

    #[test]
    fn terminal_status_sets_failed_reason_and_condition() {
        let mut s = k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let t = TerminalStatus {
            reason: "Evicted".into(),
            message: "The node was low on resource: memory. ".into(),
            condition: Some(PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some(REASON_TERMINATION_BY_KUBELET.into()),
                ..Default::default()
            }),
            grace_seconds: 1,
            rejected: false,
        };
        t.apply(&mut s);
        t.apply(&mut s);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(s.reason.as_deref(), Some("Evicted"));
        assert_eq!(s.conditions.as_ref().unwrap().len(), 1);
    }
}
