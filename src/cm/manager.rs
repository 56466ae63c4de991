//! The cgroup manager (the Go kubelet's `pkg/kubelet/cm` cgroupManagerImpl and pod container
//! manager): the I/O that creates, updates, lists and removes the kubepods hierarchy and pod
//! cgroups through cgroups-rs, from the pure decisions in [`super`].

use super::{
    milli_cpu_to_shares, pod_cgroup_name, pod_pids_limit, pod_resource_config, pod_uid_of_cgroup,
    qos_cgroup_name, CgroupDriver, CgroupError, CgroupName, ResourceConfig, MIN_SHARES,
};
use crate::resource::QosClass;
use k8s_openapi::api::core::v1::Pod;

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
/// (cgroup v1 or v2, detected by cgroups-rs), under either driver.
///
/// With the systemd driver the cgroups are the directories systemd would give the slices, laid
/// out as libcontainer's systemd managers address them (`<mount>/<expanded parent
/// slice>/<unit>`, e.g. `/sys/fs/cgroup/memory/kubepods.slice/kubepods-burstable.slice/
/// kubepods-burstable-pod<uid_>.slice`), and deckhand writes them through cgroupfs itself
/// instead of asking systemd over D-Bus for transient slice units with the limits as properties
/// (what the Go kubelet does through libcontainer). So it works on hosts where PID 1 is not
/// systemd (this project's CI); where it is, systemd learns the slices when runc (with
/// `SystemdCgroup = true`) starts the containers' scopes in them, adopts the existing
/// directories, and leaves the limits written here in place unless a slice unit of the same
/// name sets its own.
#[derive(Clone, Copy)]
pub struct CgroupManager {
    hierarchy: fn() -> Box<dyn cgroups_rs::Hierarchy>,
    driver: CgroupDriver,
    /// `pids.max` of every pod cgroup ([`pod_pids_limit`]).
    pod_pids_limit: Option<i64>,
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
        CgroupManager::new(CgroupDriver::Cgroupfs)
    }
}

impl CgroupManager {
    /// A manager for `driver` on the host's cgroup hierarchy.
    pub fn new(driver: CgroupDriver) -> Self {
        CgroupManager {
            hierarchy: host_hierarchy,
            driver,
            pod_pids_limit: None,
        }
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
        self.driver
    }

    /// The path of `name` below the hierarchy root (no leading `/`), as cgroups-rs takes it.
    fn rel(&self, name: &CgroupName) -> String {
        name.literal(self.driver)
            .trim_start_matches('/')
            .to_string()
    }

    fn build(&self, name: &CgroupName, rc: &ResourceConfig) -> Result<(), CgroupError> {
        use cgroups_rs::cgroup_builder::CgroupBuilder;
        let path = self.rel(name);
        let mut b = CgroupBuilder::new(&path);
        let mut cpu = b.cpu();
        if let Some(s) = rc.cpu_shares {
            cpu = cpu.shares(s);
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
            &qos_cgroup_name(QosClass::Guaranteed),
            &ResourceConfig {
                cpu_shares: Some(milli_cpu_to_shares(allocatable_milli_cpu)),
                memory_limit: allocatable_memory,
                ..Default::default()
            },
        )?;
        self.build(
            &qos_cgroup_name(QosClass::Burstable),
            &ResourceConfig::default(),
        )?;
        self.build(
            &qos_cgroup_name(QosClass::BestEffort),
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
        self.build(&pod_cgroup_name(pod)?, &rc)
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
        self.build(&pod_cgroup_name(pod)?, &full)
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
            let dir = root.join(self.rel(&qos_cgroup_name(qos)));
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
            let Ok(name) = qos_cgroup_name(qos).child(&format!("pod{uid}")) else {
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
            let cg = cgroups_rs::Cgroup::load(h, path.as_str());
            cg.delete().map_err(|e| CgroupError::Cgroup {
                path: path.clone(),
                message: e.to_string(),
            })?;
        }
        // the pod's directory in the v2 tree of a hybrid host, which cgroups-rs does not manage
        if let Some(unified) = self.unified_root() {
            for qos in QOS_CLASSES {
                let Ok(name) = qos_cgroup_name(qos).child(&format!("pod{uid}")) else {
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
        let cm = CgroupManager::new(CgroupDriver::Cgroupfs);
        assert_eq!(cm.pod_pids_limit, None);
        assert_eq!(cm.with_pod_pids_limit(64).pod_pids_limit, Some(64));
        assert_eq!(cm.with_pod_pids_limit(-1).pod_pids_limit, None);
    }
}
