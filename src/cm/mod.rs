//! The container manager's cgroup side (the Go kubelet's `pkg/kubelet/cm`): the `kubepods`
//! hierarchy split by QoS class under `cgroupRoot`, one cgroup per pod under it, and the pod-level
//! limits the Go kubelet sets (doc page "Node Allocatable", "Pod Quality of Service Classes"),
//! under either cgroup driver.
//!
//! Layout (driver-neutral [`CgroupName`]s, and their literal paths under each driver, with the
//! default `cgroupRoot: /`; kind's `/kubelet` puts `kubelet/` in front: `/kubelet/kubepods`,
//! `/kubelet.slice/kubelet-kubepods.slice`):
//! ```text
//! name                       cgroupfs                      systemd
//! kubepods                   /kubepods                     /kubepods.slice
//! kubepods/pod<uid>          /kubepods/pod<uid>            /kubepods.slice/kubepods-pod<uid_>.slice
//! kubepods/burstable         /kubepods/burstable           /kubepods.slice/kubepods-burstable.slice
//! kubepods/burstable/pod<u>  /kubepods/burstable/pod<u>    .../kubepods-burstable.slice/kubepods-burstable-pod<u_>.slice
//! kubepods/besteffort        /kubepods/besteffort          /kubepods.slice/kubepods-besteffort.slice
//! ```
//! (`<uid_>`: the pod UID with `-` replaced by `_`.) `kubepods` gets cpu.shares = allocatable
//! cpu and memory limit = capacity − reserved, `besteffort` cpu.shares = 2 (on cgroup v2, the
//! shares become `cpu.weight`, [`systemd::cpu_shares_to_weight`]). The pod cgroup is made before
//! RunPodSandbox (whose `cgroup_parent` names its literal path, as the Go kubelet's
//! `GetPodCgroupParent` does), with [`pod_resource_config`]'s limits; containerd/runc make the
//! container cgroups below it. It is removed when the pod is cleaned up. Under the systemd
//! driver on a systemd host, each is a slice unit systemd starts and stops ([`systemd`]).
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | errors, the runtime's driver, shares and quota, the pod's [`ResourceConfig`] |
//! | `name.rs` | [`CgroupName`], [`CgroupDriver`], [`CgroupLayout`] (pure) |
//! | [`systemd`] | slice units and their properties (pure), systemd's D-Bus API |
//! | `manager.rs` | [`CgroupManager`]: the I/O |

use crate::resource::{self, qos_class, PodResourcesOptions, QosClass, CPU, MEMORY};
use k8s_openapi::api::core::v1::Pod;

mod manager;
mod name;
pub mod systemd;
pub use manager::CgroupManager;
pub use name::{expand_slice, pod_uid_of_cgroup, CgroupDriver, CgroupLayout, CgroupName};

/// Smallest cpu.shares value (k/k `cm.MinShares`).
pub const MIN_SHARES: u64 = 2;
/// cpu.shares of one core (k/k `cm.SharesPerCPU`).
pub const SHARES_PER_CPU: u64 = 1024;
/// CFS period the Go kubelet uses, in µs (k/k `cm.QuotaPeriod`).
pub const QUOTA_PERIOD_US: u64 = 100_000;
/// Smallest CFS quota, in µs (k/k `cm.MinQuotaPeriod`).
pub const MIN_QUOTA_PERIOD_US: i64 = 1000;
/// The top of the pod cgroup hierarchy (k/k `defaultNodeAllocatableCgroupName`).
pub const KUBEPODS: &str = "kubepods";

/// Errors creating or removing cgroups.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A cgroup name component holds `/` or `_` (k/k `NewCgroupName` refuses them: `_` would
    /// not survive the systemd `-` → `_` escaping).
    #[error("invalid cgroup name component {component:?}")]
    InvalidName {
        /// The offending component.
        component: String,
    },
    /// A systemd slice name that systemd would refuse (libcontainer `ExpandSlice`).
    #[error("invalid slice name: {slice}")]
    InvalidSlice {
        /// The slice name as given.
        slice: String,
    },
    /// cgroups-rs refused (no such controller, permission, busy).
    #[error("cgroup {path}: {message}")]
    Cgroup {
        /// The cgroup path below the hierarchy root.
        path: String,
        /// What failed.
        message: String,
    },
}

/// The cgroup driver containerd's CRI plugin uses, read from the `config` entry of a verbose
/// CRI `Status` (containerd 1.6 implements no `RuntimeConfig` call, which the Go kubelet asks
/// first, k/k `cmd/kubelet/app/server.go` getCgroupDriverFromCRI): the default runtime's runc
/// option `SystemdCgroup` (false when unset), or the legacy top-level `systemdCgroup`. `None`
/// when the JSON is not containerd's or the default runtime is not runc.
pub fn runtime_cgroup_driver(config_json: &str) -> Option<CgroupDriver> {
    let v: serde_json::Value = serde_json::from_str(config_json).ok()?;
    if v.get("systemdCgroup").and_then(|b| b.as_bool()) == Some(true) {
        return Some(CgroupDriver::Systemd);
    }
    let ctrd = v.get("containerd")?;
    let name = ctrd.get("defaultRuntimeName")?.as_str()?;
    let rt = ctrd.get("runtimes")?.get(name)?;
    let ty = rt.get("runtimeType").and_then(|t| t.as_str()).unwrap_or("");
    if ty != "io.containerd.runc.v2" && ty != "io.containerd.runc.v1" {
        return None;
    }
    let systemd = rt
        .get("options")
        .and_then(|o| o.get("SystemdCgroup"))
        .and_then(|b| b.as_bool())
        .unwrap_or(false);
    Some(if systemd {
        CgroupDriver::Systemd
    } else {
        CgroupDriver::Cgroupfs
    })
}

/// The runtime's answer to CRI `RuntimeConfig`, the input of [`choose_cgroup_driver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeConfigAnswer {
    /// `linux.cgroup_driver`, the raw CRI v1 enum value (`SYSTEMD` = 0, `CGROUPFS` = 1).
    CgroupDriver(i32),
    /// An answer without a `linux` section.
    NoLinux,
    /// gRPC UNIMPLEMENTED: the runtime predates the call (containerd 1.6 and 1.7; 2.0 has it).
    Unimplemented,
}

/// Where the cgroup driver [`choose_cgroup_driver`] picked comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriverSource {
    /// The runtime's `RuntimeConfig`; it overrides `cgroupDriver`, whatever that says.
    Runtime,
    /// `cgroupDriver`: the runtime does not implement `RuntimeConfig`.
    ConfigRuntimeConfigUnimplemented,
    /// `cgroupDriver`: the runtime's `RuntimeConfig` has no `linux` section.
    ConfigNoLinuxSection,
}

/// `RuntimeConfig` named a cgroup driver CRI v1 does not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("runtime returned an unknown cgroup driver {0}")]
pub struct UnknownCgroupDriver(pub i32);

/// The cgroup driver pods run with, from `cgroupDriver` (`configured`) and the runtime's answer
/// to `RuntimeConfig`, as the Go kubelet decides it (k/k `cmd/kubelet/app/server.go`
/// getCgroupDriverFromCRI; the KubeletCgroupDriverFromCRI feature gate, GA and locked on since
/// 1.34): a driver from the runtime wins over `cgroupDriver`, also when they disagree; no
/// `linux` section, or UNIMPLEMENTED, leaves `cgroupDriver`; a value CRI does not define is an
/// error (the kubelet does not start). (The Go kubelet's retries of other errors are the
/// caller's.)
pub fn choose_cgroup_driver(
    configured: CgroupDriver,
    answer: RuntimeConfigAnswer,
) -> Result<(CgroupDriver, CgroupDriverSource), UnknownCgroupDriver> {
    // CRI v1 LinuxRuntimeConfiguration.cgroup_driver
    const SYSTEMD: i32 = 0;
    const CGROUPFS: i32 = 1;
    match answer {
        RuntimeConfigAnswer::CgroupDriver(SYSTEMD) => {
            Ok((CgroupDriver::Systemd, CgroupDriverSource::Runtime))
        }
        RuntimeConfigAnswer::CgroupDriver(CGROUPFS) => {
            Ok((CgroupDriver::Cgroupfs, CgroupDriverSource::Runtime))
        }
        RuntimeConfigAnswer::CgroupDriver(other) => Err(UnknownCgroupDriver(other)),
        RuntimeConfigAnswer::NoLinux => Ok((configured, CgroupDriverSource::ConfigNoLinuxSection)),
        RuntimeConfigAnswer::Unimplemented => Ok((
            configured,
            CgroupDriverSource::ConfigRuntimeConfigUnimplemented,
        )),
    }
}

/// Converts millicores to cpu.shares (k/k `cm.MilliCPUToShares`): 0 → 2, else
/// millicores·1024/1000, at least 2.
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64) * SHARES_PER_CPU / 1000).max(MIN_SHARES)
}

/// Converts a millicore limit to a CFS quota in µs for `period` µs (k/k `cm.MilliCPUToQuota`):
/// 0 → no quota (None), else millicores·period/1000, at least 1000 µs.
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> Option<i64> {
    if milli <= 0 {
        return None;
    }
    Some(((milli * period as i64) / 1000).max(MIN_QUOTA_PERIOD_US))
}

/// Pod-level cgroup settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceConfig {
    /// cpu.shares.
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs per [`ResourceConfig::cpu_period`].
    pub cpu_quota: Option<i64>,
    /// CFS period in µs.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes.
    pub memory_limit: Option<i64>,
    /// Maximum number of tasks (`pids.max`); `None` leaves the current value.
    pub pids_limit: Option<i64>,
}

impl ResourceConfig {
    /// The larger of each setting of `self` and `other` (an absent quota or memory limit is
    /// unlimited, the largest): the pod cgroup an in-place resize passes through, so that no
    /// container's new limit is ever above its pod's (k/k doPodResizeAction raises the pod's
    /// limits before the containers' and lowers them after).
    pub fn max(&self, other: &ResourceConfig) -> ResourceConfig {
        let unlimited_max = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            _ => None,
        };
        // quota per µs of period: the cpu fraction the limit allows
        let fraction = |rc: &ResourceConfig| {
            rc.cpu_quota
                .map(|q| q as f64 / rc.cpu_period.unwrap_or(QUOTA_PERIOD_US).max(1) as f64)
        };
        let (cpu_quota, cpu_period) = match (fraction(self), fraction(other)) {
            (Some(a), Some(b)) if a >= b => (self.cpu_quota, self.cpu_period),
            (Some(_), Some(_)) => (other.cpu_quota, other.cpu_period),
            _ => (None, None),
        };
        ResourceConfig {
            cpu_shares: match (self.cpu_shares, other.cpu_shares) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
            cpu_quota,
            cpu_period,
            memory_limit: unlimited_max(self.memory_limit, other.memory_limit),
            pids_limit: unlimited_max(self.pids_limit, other.pids_limit),
        }
    }
}

/// True when every container (init and regular) sets a limit of `name` (deckhand reads each
/// container's own limit, where the Go kubelet's `ContainerFn` sees an init container's limit
/// together with the sidecars started before it).
fn every_container_limits(pod: &Pod, name: &str) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
            .all(|c| resource::container_limit(c, name).is_some())
    })
}

/// The pod cgroup's settings (k/k `cm.ResourceConfigForPod` with CFS quota enforced):
/// cpu.shares from the pod's cpu request ([`resource::pod_requests`]); the CFS quota of the
/// pod's cpu limit ([`resource::pod_limits`]) over a 100 ms period when every container has a
/// cpu limit or the pod sets a pod-level one; the memory limit likewise. Pod-level
/// `spec.resources` (KEP-2837) replace the containers' sums, the overhead is added. BestEffort
/// pods get cpu.shares 2 and nothing else (the QoS class, [`qos_class`], reads the containers
/// only, so a pod whose only resources are pod-level ones is BestEffort here).
pub fn pod_resource_config(pod: &Pod) -> ResourceConfig {
    if qos_class(pod) == QosClass::BestEffort {
        return ResourceConfig {
            cpu_shares: Some(MIN_SHARES),
            ..Default::default()
        };
    }
    let opts = PodResourcesOptions::default();
    let requests = resource::pod_requests(pod, &opts);
    let limits = resource::pod_limits(pod, &opts);
    let declared = |name: &str| {
        every_container_limits(pod, name)
            || resource::pod_level_limit(pod, name).is_some_and(|l| l != 0)
    };
    let limit = |name: &str| declared(name).then(|| limits.get(name).copied().unwrap_or(0));
    let cpu_req = requests.get(CPU).copied().unwrap_or(0) as i64;
    let cpu_lim = limit(CPU).map(|v| v as i64);
    let mem_lim = limit(MEMORY).map(|v| (v / 1000) as i64);
    ResourceConfig {
        cpu_shares: Some(milli_cpu_to_shares(cpu_req)),
        cpu_quota: cpu_lim.and_then(|l| milli_cpu_to_quota(l, QUOTA_PERIOD_US)),
        cpu_period: cpu_lim.filter(|l| *l > 0).map(|_| QUOTA_PERIOD_US),
        memory_limit: mem_lim.filter(|m| *m > 0),
        pids_limit: None,
    }
}

/// Whether containers get `memory.oom.group = 1`, so that an OOM kill takes every process of the
/// container, not only the largest (k/k `kubelet.go` and `generateLinuxContainerResources`): on
/// cgroup v2 (`unified`) unless `singleProcessOOMKill` is true; never on cgroup v1, which has no
/// such setting.
pub fn container_oom_group(unified: bool, single_process_oom_kill: Option<bool>) -> bool {
    unified && !single_process_oom_kill.unwrap_or(false)
}

/// The pod cgroup's `pids.max` for the configured `podPidsLimit`: a positive value is the
/// limit, anything else (the default -1, or 0) leaves pods unlimited (k/k
/// `podContainerManagerImpl.EnsureExists`, which sets `PidsLimit` only when `podPidsLimit > 0`).
pub fn pod_pids_limit(configured: i64) -> Option<i64> {
    (configured > 0).then_some(configured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    use crate::resource::qos::tests::{ctr, pod};

    #[test]
    fn the_pod_cgroup_passes_through_the_larger_of_old_and_new_settings() {
        let rc = |shares, quota: Option<i64>, mem: Option<i64>| ResourceConfig {
            cpu_shares: Some(shares),
            cpu_quota: quota,
            cpu_period: quota.map(|_| QUOTA_PERIOD_US),
            memory_limit: mem,
            pids_limit: None,
        };
        let cases = [
            (
                "grow cpu, shrink memory",
                rc(20, Some(2000), Some(50)),
                rc(30, Some(3000), Some(40)),
                rc(30, Some(3000), Some(50)),
            ),
            (
                "limit added: unlimited before",
                rc(20, None, None),
                rc(20, Some(3000), Some(40)),
                rc(20, None, None),
            ),
            (
                "limit lifted: unlimited after",
                rc(20, Some(2000), Some(50)),
                rc(20, None, None),
                rc(20, None, None),
            ),
            (
                "same",
                rc(20, Some(2000), Some(50)),
                rc(20, Some(2000), Some(50)),
                rc(20, Some(2000), Some(50)),
            ),
        ];
        for (case, a, b, want) in cases {
            assert_eq!(a.max(&b), want, "{case}");
            assert_eq!(b.max(&a), want, "{case} (symmetric)");
        }
    }

    #[test]
    fn containers_are_oom_killed_as_a_group_on_cgroup_v2_unless_told_otherwise() {
        for (unified, single, want) in [
            (true, None, true),
            (true, Some(false), true),
            (true, Some(true), false),
            (false, None, false),
            (false, Some(false), false),
        ] {
            assert_eq!(
                container_oom_group(unified, single),
                want,
                "{unified} {single:?}"
            );
        }
    }

    #[test]
    fn shares_and_quota_convert_like_the_go_kubelet() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_shares(2000), 2048);
        assert_eq!(milli_cpu_to_quota(0, 100_000), None);
        assert_eq!(milli_cpu_to_quota(5, 100_000), Some(1000));
        assert_eq!(milli_cpu_to_quota(500, 100_000), Some(50_000));
    }

    #[test]
    fn pod_cgroup_limits_follow_resource_config_for_pod() {
        let g = pod(vec![
            ctr(
                "a",
                &[("cpu", "500m"), ("memory", "64Mi")],
                &[("cpu", "500m"), ("memory", "64Mi")],
            ),
            ctr(
                "b",
                &[("cpu", "250m"), ("memory", "32Mi")],
                &[("cpu", "250m"), ("memory", "32Mi")],
            ),
        ]);
        assert_eq!(
            pod_resource_config(&g),
            ResourceConfig {
                cpu_shares: Some(768),
                cpu_quota: Some(75_000),
                cpu_period: Some(100_000),
                memory_limit: Some(96 * 1024 * 1024),
                pids_limit: None,
            }
        );
        assert_eq!(
            CgroupLayout::default().pod_parent(&g).unwrap(),
            "/kubepods/podu1"
        );
        // one container without a memory limit: no pod memory limit
        let b = pod(vec![
            ctr(
                "a",
                &[("cpu", "100m")],
                &[("cpu", "200m"), ("memory", "64Mi")],
            ),
            ctr("b", &[("memory", "16Mi")], &[("cpu", "100m")]),
        ]);
        let rc = pod_resource_config(&b);
        assert_eq!(rc.cpu_shares, Some(102));
        assert_eq!(rc.cpu_quota, Some(30_000));
        assert_eq!(rc.memory_limit, None);
        assert_eq!(
            CgroupLayout::default().pod_parent(&b).unwrap(),
            "/kubepods/burstable/podu1"
        );
        let be = pod(vec![ctr("a", &[], &[])]);
        assert_eq!(
            pod_resource_config(&be),
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
        assert_eq!(
            CgroupLayout::default().pod_parent(&be).unwrap(),
            "/kubepods/besteffort/podu1"
        );
    }

    fn list(v: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            v.iter()
                .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                .collect(),
        )
    }

    /// KEP-2837: pod-level `spec.resources` set the pod cgroup, as the Go kubelet's
    /// ResourceConfigForPod does (deckhand ignored them before).
    #[test]
    fn pod_cgroup_honours_pod_level_resources() {
        let mut p = pod(vec![
            ctr("a", &[("cpu", "100m"), ("memory", "64Mi")], &[]),
            ctr("b", &[("cpu", "100m")], &[]),
        ]);
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(204),
                ..Default::default()
            },
            "the containers alone: shares of 200m, no limit"
        );
        p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            requests: list(&[("cpu", "1"), ("memory", "256Mi")]),
            limits: list(&[("cpu", "2"), ("memory", "512Mi")]),
            ..Default::default()
        });
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(1024),
                cpu_quota: Some(200_000),
                cpu_period: Some(100_000),
                memory_limit: Some(512 << 20),
                pids_limit: None,
            }
        );
        // a pod-level memory limit alone: the cpu quota stays off (no container limits cpu)
        p.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            limits: list(&[("memory", "512Mi")]),
            ..Default::default()
        });
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(204),
                memory_limit: Some(512 << 20),
                ..Default::default()
            }
        );
        // the overhead is added to the pod-level limit
        p.spec.as_mut().unwrap().overhead = list(&[("memory", "64Mi")]);
        assert_eq!(pod_resource_config(&p).memory_limit, Some(576 << 20));
    }

    /// `PodLimits` adds the overhead to non-zero limits only: containers that all limit cpu to 0
    /// get no CFS quota from the overhead alone (deckhand set the overhead's quota before).
    #[test]
    fn overhead_is_not_a_pod_limit_by_itself() {
        let mut p = pod(vec![ctr(
            "a",
            &[("memory", "64Mi")],
            &[("cpu", "0"), ("memory", "64Mi")],
        )]);
        p.spec.as_mut().unwrap().overhead = list(&[("cpu", "250m"), ("memory", "120Mi")]);
        assert_eq!(
            pod_resource_config(&p),
            ResourceConfig {
                cpu_shares: Some(256),
                cpu_quota: None,
                cpu_period: None,
                memory_limit: Some(184 << 20),
                pids_limit: None,
            }
        );
    }

    #[test]
    fn cgroup_driver_from_the_runtime_wins_over_the_configured_one() {
        use CgroupDriver::{Cgroupfs, Systemd};
        use CgroupDriverSource::*;
        use RuntimeConfigAnswer as A;
        #[rustfmt::skip]
        let cases: &[(&str, CgroupDriver, RuntimeConfigAnswer, Result<(CgroupDriver, CgroupDriverSource), UnknownCgroupDriver>)] = &[
            ("containerd 2.x, cgroupfs, agrees",      Cgroupfs, A::CgroupDriver(1), Ok((Cgroupfs, Runtime))),
            ("runtime systemd overrides cgroupfs",    Cgroupfs, A::CgroupDriver(0), Ok((Systemd, Runtime))),
            ("runtime cgroupfs overrides systemd",    Systemd,  A::CgroupDriver(1), Ok((Cgroupfs, Runtime))),
            ("runtime systemd, agrees",               Systemd,  A::CgroupDriver(0), Ok((Systemd, Runtime))),
            ("containerd 1.6: unimplemented",         Cgroupfs, A::Unimplemented,   Ok((Cgroupfs, ConfigRuntimeConfigUnimplemented))),
            ("unimplemented keeps systemd",           Systemd,  A::Unimplemented,   Ok((Systemd, ConfigRuntimeConfigUnimplemented))),
            ("no linux section keeps the config",     Systemd,  A::NoLinux,         Ok((Systemd, ConfigNoLinuxSection))),
            ("an unknown driver is an error",         Cgroupfs, A::CgroupDriver(2), Err(UnknownCgroupDriver(2))),
            ("a negative value is an error",          Systemd,  A::CgroupDriver(-1), Err(UnknownCgroupDriver(-1))),
        ];
        for (name, configured, answer, want) in cases {
            assert_eq!(&choose_cgroup_driver(*configured, *answer), want, "{name}");
        }
    }

    #[test]
    fn runtime_cgroup_driver_reads_containerds_runc_option() {
        let cfg = |opts: &str, ty: &str| {
            format!(
                r#"{{"containerd":{{"defaultRuntimeName":"runc","runtimes":{{"runc":{{"runtimeType":"{ty}","options":{opts}}}}}}},"systemdCgroup":false}}"#
            )
        };
        assert_eq!(
            runtime_cgroup_driver(&cfg(
                r#"{"BinaryName":"/usr/sbin/runc","SystemdCgroup":false}"#,
                "io.containerd.runc.v2"
            )),
            Some(CgroupDriver::Cgroupfs)
        );
        assert_eq!(
            runtime_cgroup_driver(&cfg(r#"{"SystemdCgroup":true}"#, "io.containerd.runc.v2")),
            Some(CgroupDriver::Systemd)
        );
        // runc's default when the option is not written
        assert_eq!(
            runtime_cgroup_driver(&cfg("null", "io.containerd.runc.v2")),
            Some(CgroupDriver::Cgroupfs)
        );
        assert_eq!(
            runtime_cgroup_driver(&cfg("null", "io.containerd.kata.v2")),
            None
        );
        assert_eq!(runtime_cgroup_driver("not json"), None);
        assert_eq!(
            runtime_cgroup_driver(r#"{"systemdCgroup":true}"#),
            Some(CgroupDriver::Systemd)
        );
    }
}
