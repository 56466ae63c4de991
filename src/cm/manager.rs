//! The cgroup manager (the Go kubelet's `pkg/kubelet/cm` cgroupManagerImpl and pod container
//! manager): the I/O that creates, updates, lists and removes the kubepods hierarchy and pod
//! cgroups through cgroups-rs (and, for the systemd driver on a systemd host, systemd's D-Bus
//! API: [`super::systemd`]), from the pure decisions in [`super`].

use super::systemd::{self as sd, SystemdSlices};
use super::{
    milli_cpu_to_shares, pod_pids_limit, pod_resource_config, pod_uid_of_cgroup, CgroupDriver,
    CgroupError, CgroupLayout, CgroupName, ResourceConfig, MIN_SHARES,
};
use crate::resource::QosClass;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc;

/// Every QoS class, each with its own level of pod cgroups.
const QOS_CLASSES: [QosClass; 3] = [
    QosClass::Guaranteed,
    QosClass::Burstable,
    QosClass::BestEffort,
];

/// Removes a cgroup directory and its child cgroups, deepest first (a cgroup directory can be
/// removed only once it has no processes and no children). A directory that does not exist is
/// not an error.
fn remove_empty_cgroup_tree(dir: &std::path::Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_empty_cgroup_tree(&e.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Creates, updates and removes the kubepods hierarchy and pod cgroups through cgroups-rs
/// (cgroup v1 or v2, detected by cgroups-rs), under either driver, below `cgroupRoot`
/// ([`CgroupLayout`]).
///
/// With the systemd driver the cgroups are the directories systemd gives the slices, laid out as
/// libcontainer's systemd managers address them (`<mount>/<expanded parent slice>/<unit>`, e.g.
/// `/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`).
/// Where systemd is the init system ([`Self::with_systemd`]) each is a transient slice unit
/// started, updated and stopped through systemd's D-Bus API with its limits as unit properties,
/// and the same limits are then written to the files, as the Go kubelet does through
/// libcontainer (`Apply(-1)`, `Set`, `Destroy`). Where it is not (this project's namespace
/// nodes), the files are written alone.
#[derive(Clone)]
pub struct CgroupManager {
    hierarchy: fn() -> Box<dyn cgroups_rs::Hierarchy>,
    layout: CgroupLayout,
    /// `pids.max` of every pod cgroup ([`pod_pids_limit`]).
    pod_pids_limit: Option<i64>,
    /// systemd's D-Bus API, for the systemd driver on a systemd host.
    systemd: Option<Arc<SystemdSlices>>,
}

impl std::fmt::Debug for CgroupManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CgroupManager")
            .field("layout", &self.layout)
            .field("pod_pids_limit", &self.pod_pids_limit)
            .field("systemd", &self.systemd.is_some())
            .finish()
    }
}

/// The host's cgroup hierarchy (`cgroups_rs::hierarchies::auto`), with cgroup v1's mount table
/// read once: `auto` parses `/proc/self/mountinfo` on every call, which every cgroup operation
/// made (about once a second on an idle node, from the housekeeping sweep and the eviction
/// manager), and the cgroup mounts do not change while deckhand runs.
fn host_hierarchy() -> Box<dyn cgroups_rs::Hierarchy> {
    use cgroups_rs::hierarchies::{is_cgroup2_unified_mode, V1, V2};
    static V1_MOUNTS: std::sync::OnceLock<V1> = std::sync::OnceLock::new();
    if is_cgroup2_unified_mode() {
        Box::new(V2::new())
    } else {
        Box::new(V1_MOUNTS.get_or_init(V1::new).clone())
    }
}

impl Default for CgroupManager {
    fn default() -> Self {
        CgroupManager::new(CgroupLayout::default())
    }
}

impl CgroupManager {
    /// A manager for `layout` on the host's cgroup hierarchy, writing the cgroup files itself.
    pub fn new(layout: CgroupLayout) -> Self {
        CgroupManager {
            hierarchy: host_hierarchy,
            layout,
            pod_pids_limit: None,
            systemd: None,
        }
    }

    /// The same manager, making its cgroups as systemd slices through `systemd` (ignored
    /// unless the driver is systemd).
    pub fn with_systemd(self, systemd: Option<Arc<SystemdSlices>>) -> Self {
        CgroupManager {
            systemd: systemd.filter(|_| self.layout.driver == CgroupDriver::Systemd),
            ..self
        }
    }

    /// Whether the slices go through systemd's D-Bus API.
    pub fn uses_systemd_dbus(&self) -> bool {
        self.systemd.is_some()
    }

    /// The same manager, limiting every pod cgroup to `podPidsLimit` tasks
    /// ([`pod_pids_limit`] says which values limit).
    pub fn with_pod_pids_limit(self, configured: i64) -> Self {
        CgroupManager {
            pod_pids_limit: pod_pids_limit(configured),
            ..self
        }
    }

    /// The driver the cgroup names are laid out for.
    pub fn driver(&self) -> CgroupDriver {
        self.layout.driver
    }

    /// Where the cgroups go.
    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    /// The path of `name` below the hierarchy root (no leading `/`), as cgroups-rs takes it.
    fn rel(&self, name: &CgroupName) -> String {
        self.layout
            .literal(name)
            .trim_start_matches('/')
            .to_string()
    }

    /// Checks that `cgroupRoot` exists (k/k `NewContainerManager`: `cgroupManager.Validate`
    /// of the root before `kubepods` is made in it): its directory in the unified hierarchy,
    /// or in the `cpu` and `memory` ones of cgroup v1. The root itself always exists.
    ///
    /// Errors: [`CgroupError::Cgroup`] naming the missing directory.
    pub fn validate_root(&self) -> Result<(), CgroupError> {
        if self.layout.root.components().is_empty() {
            return Ok(());
        }
        let h = (self.hierarchy)();
        let rel = self.rel(&self.layout.root);
        let dirs: Vec<std::path::PathBuf> = if h.v2() {
            vec![h.root().join(&rel)]
        } else {
            ["cpu", "memory"]
                .iter()
                .map(|c| h.root().join(c).join(&rel))
                .collect()
        };
        match dirs.iter().find(|d| !d.is_dir()) {
            None => Ok(()),
            Some(d) => Err(CgroupError::Cgroup {
                path: rel.clone(),
                message: format!(
                    "cgroup-root {:?} doesn't exist ({} is missing); create it first (for the systemd driver: a slice unit, e.g. `systemctl start {}`)",
                    self.layout.root.to_cgroupfs(),
                    d.display(),
                    sd::slice_unit(&self.layout.root).0
                ),
            }),
        }
    }

    /// Makes cgroup `name` with `rc`: through systemd first when it manages the slices, then
    /// the files.
    fn build(&self, name: &CgroupName, rc: &ResourceConfig) -> Result<(), CgroupError> {
        let v2 = (self.hierarchy)().v2();
        let files = match &self.systemd {
            Some(systemd) => {
                let (unit, parent) = sd::slice_unit(name);
                systemd
                    .ensure(&unit, &parent, rc, v2)
                    .map_err(|e| CgroupError::Cgroup {
                        path: self.rel(name),
                        message: e.to_string(),
                    })?;
                sd::files_config(rc)
            }
            None => rc.clone(),
        };
        self.write_files(name, &files, v2)
    }

    /// Writes `rc` to the files of cgroup `name` (made if missing) through cgroups-rs; on
    /// cgroup v2 the shares become `cpu.weight` ([`sd::cpu_shares_to_weight`]).
    fn write_files(
        &self,
        name: &CgroupName,
        rc: &ResourceConfig,
        v2: bool,
    ) -> Result<(), CgroupError> {
        use cgroups_rs::cgroup_builder::CgroupBuilder;
        let path = self.rel(name);
        let mut b = CgroupBuilder::new(&path);
        let mut cpu = b.cpu();
        if let Some(s) = rc.cpu_shares {
            // cgroups-rs writes the number it is given to cpu.weight on v2
            cpu = cpu.shares(if v2 { sd::cpu_shares_to_weight(s) } else { s });
        }
        if let Some(p) = rc.cpu_period {
            cpu = cpu.period(p);
        }
        if let Some(q) = rc.cpu_quota {
            cpu = cpu.quota(q);
        }
        b = cpu.done();
        if let Some(m) = rc.memory_limit {
            b = b.memory().memory_hard_limit(m).done();
        }
        if let Some(n) = rc.pids_limit {
            let max = if n > 0 {
                cgroups_rs::MaxValue::Value(n)
            } else {
                cgroups_rs::MaxValue::Max
            };
            b = b.pid().maximum_number_of_processes(max).done();
        }
        b.build((self.hierarchy)())
            .map(|_| ())
            .map_err(|e| CgroupError::Cgroup {
                path,
                message: e.to_string(),
            })
    }

    /// Creates `kubepods` (cpu.shares of the allocatable cpu in millicores, memory limit
    /// `allocatable_memory` bytes when given), `kubepods/burstable` and `kubepods/besteffort`
    /// (cpu.shares 2), as the Go kubelet's node allocatable and QoS container managers do at
    /// start-up.
    pub fn ensure_qos_cgroups(
        &self,
        allocatable_milli_cpu: i64,
        allocatable_memory: Option<i64>,
    ) -> Result<(), CgroupError> {
        self.build(
            &self.layout.qos(QosClass::Guaranteed),
            &ResourceConfig {
                cpu_shares: Some(milli_cpu_to_shares(allocatable_milli_cpu)),
                memory_limit: allocatable_memory,
                ..Default::default()
            },
        )?;
        self.build(
            &self.layout.qos(QosClass::Burstable),
            &ResourceConfig::default(),
        )?;
        self.build(
            &self.layout.qos(QosClass::BestEffort),
            &ResourceConfig {
                cpu_shares: Some(MIN_SHARES),
                ..Default::default()
            },
        )
    }

    /// Creates (or updates) the pod's cgroup with [`pod_resource_config`] and the node's
    /// `podPidsLimit` ([`Self::with_pod_pids_limit`]).
    pub fn ensure_pod_cgroup(&self, pod: &Pod) -> Result<(), CgroupError> {
        let rc = ResourceConfig {
            pids_limit: self.pod_pids_limit,
            ..pod_resource_config(pod)
        };
        self.build(&self.layout.pod(pod)?, &rc)
    }

    /// Sets the pod's cgroup to `rc` during an in-place resize (k/k podContainerManager
    /// `SetPodCgroupConfig`): unlike [`Self::ensure_pod_cgroup`], an absent CFS quota or memory
    /// limit is written as unlimited (`-1`), so a limit can also be lifted.
    pub fn set_pod_cgroup(&self, pod: &Pod, rc: &ResourceConfig) -> Result<(), CgroupError> {
        let full = ResourceConfig {
            cpu_quota: Some(rc.cpu_quota.unwrap_or(-1)),
            memory_limit: Some(rc.memory_limit.unwrap_or(-1)),
            ..rc.clone()
        };
        self.build(&self.layout.pod(pod)?, &full)
    }

    /// The pod UIDs that have a pod cgroup under any QoS class (read from the `cpu` hierarchy on
    /// cgroup v1, the unified tree on v2), for the orphaned-cgroup sweep (k/k
    /// `cleanupOrphanedPodCgroups`).
    pub fn list_pod_cgroups(&self) -> Vec<String> {
        let h = (self.hierarchy)();
        let root = if h.root().join("cpu").is_dir() {
            h.root().join("cpu")
        } else {
            h.root()
        };
        let mut uids = Vec::new();
        let roots: Vec<std::path::PathBuf> =
            std::iter::once(root).chain(self.unified_root()).collect();
        for (root, qos) in roots.iter().flat_map(|r| QOS_CLASSES.map(|q| (r, q))) {
            let dir = root.join(self.rel(&self.layout.qos(qos)));
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            uids.extend(
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| pod_uid_of_cgroup(&e.file_name().to_string_lossy())),
            );
        }
        uids.sort();
        uids.dedup();
        uids
    }

    /// The cgroup v2 tree of a hybrid host (`/sys/fs/cgroup/unified`, next to the v1
    /// controllers), where runc also creates each container's cgroup and so the pod's
    /// directory; `None` on a pure v1 or v2 host.
    fn unified_root(&self) -> Option<std::path::PathBuf> {
        let h = (self.hierarchy)();
        let unified = h.root().join("unified");
        (!h.v2() && unified.join("cgroup.controllers").exists()).then_some(unified)
    }

    /// Removes the cgroup of pod `uid` under any QoS class, once it has no processes left.
    /// A cgroup that does not exist is not an error.
    pub fn remove_pod_cgroup(&self, uid: &str) -> Result<(), CgroupError> {
        for qos in QOS_CLASSES {
            let Ok(name) = self.layout.pod_of(qos, uid) else {
                continue;
            };
            let path = self.rel(&name);
            let h = (self.hierarchy)();
            if !h.root().join("cpu").join(&path).exists()
                && !h.root().join(&path).exists()
                && !h.root().join("memory").join(&path).exists()
            {
                continue;
            }
            if let Some(systemd) = &self.systemd {
                // systemd removes the slice's cgroup when it stops; the files below go after
                systemd
                    .stop(&sd::slice_unit(&name).0)
                    .map_err(|e| CgroupError::Cgroup {
                        path: path.clone(),
                        message: e.to_string(),
                    })?;
                if !h.root().join(&path).exists() {
                    continue;
                }
            }
            let cg = cgroups_rs::Cgroup::load(h, path.as_str());
            cg.delete().map_err(|e| CgroupError::Cgroup {
                path: path.clone(),
                message: e.to_string(),
            })?;
        }
        // the pod's directory in the v2 tree of a hybrid host, which cgroups-rs does not manage
        if let Some(unified) = self.unified_root() {
            for qos in QOS_CLASSES {
                let Ok(name) = self.layout.pod_of(qos, uid) else {
                    continue;
                };
                let dir = unified.join(self.rel(&name));
                remove_empty_cgroup_tree(&dir).map_err(|e| CgroupError::Cgroup {
                    path: dir.display().to_string(),
                    message: e.to_string(),
                })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_pids_limit_applies_only_a_positive_setting() {
        for (configured, want) in [
            (-1, None),
            (0, None),
            (-5, None),
            (1, Some(1)),
            (100, Some(100)),
        ] {
            assert_eq!(
                pod_pids_limit(configured),
                want,
                "podPidsLimit {configured}"
            );
        }
        let cm = CgroupManager::new(CgroupLayout::default());
        assert_eq!(cm.pod_pids_limit, None);
        assert_eq!(cm.clone().with_pod_pids_limit(64).pod_pids_limit, Some(64));
        assert_eq!(cm.with_pod_pids_limit(-1).pod_pids_limit, None);
    }
}
