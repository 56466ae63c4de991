//! The container manager's cgroup side (the Go kubelet's `pkg/kubelet/cm`): the `kubepods`
//! hierarchy split by QoS class, one cgroup per pod under it, and the pod-level limits the Go
//! kubelet sets (doc page "Node Allocatable", "Pod Quality of Service Classes"), under either
//! cgroup driver.
//!
//! Layout (driver-neutral [`CgroupName`]s, and their literal paths under each driver):
//! ```text
//! name                       cgroupfs                      systemd
//! kubepods                   /kubepods                     /kubepods.slice
//! kubepods/pod<uid>          /kubepods/pod<uid>            /kubepods.slice/kubepods-pod<uid_>.slice
//! kubepods/burstable         /kubepods/burstable           /kubepods.slice/kubepods-burstable.slice
//! kubepods/burstable/pod<u>  /kubepods/burstable/pod<u>    .../kubepods-burstable.slice/kubepods-burstable-pod<u_>.slice
//! kubepods/besteffort        /kubepods/besteffort          /kubepods.slice/kubepods-besteffort.slice
//! ```
//! (`<uid_>`: the pod UID with `-` replaced by `_`.) `/kubepods` gets cpu.shares = allocatable
//! cpu and memory limit = capacity − reserved, `besteffort` cpu.shares = 2. The pod cgroup is
//! made before RunPodSandbox (whose `cgroup_parent` names its literal path, as the Go kubelet's
//! `GetPodCgroupParent` does), with [`pod_resource_config`]'s limits; containerd/runc make the
//! container cgroups below it. It is removed when the pod is cleaned up.
//!
//! The decisions are pure ([`CgroupName`] conversions, [`pod_resource_config`],
//! [`milli_cpu_to_shares`], [`choose_cgroup_driver`], [`runtime_cgroup_driver`]); [`CgroupManager`] does the I/O with
//! cgroups-rs. Requests, limits and the QoS class come from [`crate::resource`].

use crate::resource::{self, qos_class, PodResourcesOptions, QosClass, CPU, MEMORY};
use k8s_openapi::api::core::v1::Pod;

mod manager;
pub use manager::CgroupManager;

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

/// The cgroup driver: how cgroup names map to paths, and who (the kubelet through cgroupfs, or
/// systemd) owns them (KubeletConfiguration `cgroupDriver`; the default is `cgroupfs`, `kubeadm`
/// writes `systemd`). The container runtime must use the same one (containerd: runc's
/// `SystemdCgroup` option), see [`runtime_cgroup_driver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupDriver {
    /// Plain cgroupfs paths (`/kubepods/burstable/pod<uid>`).
    #[default]
    Cgroupfs,
    /// systemd slices (`/kubepods.slice/kubepods-burstable.slice/...`).
    Systemd,
}

impl CgroupDriver {
    /// Parses the configuration value (`cgroupfs` or `systemd`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            "systemd" => Some(CgroupDriver::Systemd),
            _ => None,
        }
    }

    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }
}

impl std::fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// systemd's slice unit suffix (k/k `systemdSuffix`).
const SLICE_SUFFIX: &str = ".slice";

/// A driver-neutral cgroup name: its components from the root, e.g. `["kubepods", "burstable",
/// "pod<uid>"]` (k/k `cm.CgroupName`). The empty name is the root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupName(Vec<String>);

impl CgroupName {
    /// The name with `components` below the root; a component may hold neither `/` nor `_`
    /// (k/k `NewCgroupName`, which panics where this returns an error).
    pub fn new<I, S>(components: I) -> Result<Self, CgroupError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut v = vec![];
        for c in components {
            let c = c.into();
            if c.is_empty() || c.contains('/') || c.contains('_') {
                return Err(CgroupError::InvalidName { component: c });
            }
            v.push(c);
        }
        Ok(CgroupName(v))
    }

    /// This name with one more component.
    pub fn child(&self, component: &str) -> Result<Self, CgroupError> {
        CgroupName::new(self.0.iter().map(String::as_str).chain([component]))
    }

    /// The components.
    pub fn components(&self) -> &[String] {
        &self.0
    }

    /// The cgroupfs path: `/` + components joined by `/` (k/k `ToCgroupfs`).
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// The systemd form, expanded to the cgroupfs path systemd gives the slice (k/k `ToSystemd`):
    /// each component's `-` becomes `_`, the components are joined by `-` into one slice name,
    /// and [`expand_slice`] turns it into the path of nested slices:
    /// `["kubepods", "burstable", "pod12-34"]` →
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice`.
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() {
            return "/".into();
        }
        let slice = self
            .0
            .iter()
            .map(|p| p.replace('-', "_"))
            .collect::<Vec<_>>()
            .join("-")
            + SLICE_SUFFIX;
        // components are non-empty and hold no '/', so the slice is always valid
        expand_slice(&slice).unwrap_or_else(|_| "/".into())
    }

    /// The literal cgroupfs path under `driver` (k/k `cgroupCommon.Name`: a cgroupfs path even
    /// for the systemd driver).
    pub fn literal(&self, driver: CgroupDriver) -> String {
        match driver {
            CgroupDriver::Cgroupfs => self.to_cgroupfs(),
            CgroupDriver::Systemd => self.to_systemd(),
        }
    }

    /// The name of a cgroupfs path (k/k `ParseCgroupfsToCgroupName`).
    pub fn parse_cgroupfs(path: &str) -> Self {
        CgroupName(
            path.trim_start_matches('/')
                .split('/')
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect(),
        )
    }

    /// The name of a systemd slice or its expanded path (k/k `ParseSystemdToCgroupName`): the
    /// last path element without `.slice`, split at `-`, each `_` back to `-`.
    pub fn parse_systemd(name: &str) -> Self {
        let base = name.rsplit('/').next().unwrap_or(name);
        let base = base.strip_suffix(SLICE_SUFFIX).unwrap_or(base);
        if base.is_empty() || base == "-" {
            return CgroupName::default();
        }
        CgroupName(base.split('-').map(|p| p.replace('_', "-")).collect())
    }

    /// The name of a literal path under `driver` (k/k `cgroupCommon.CgroupName`).
    pub fn parse(driver: CgroupDriver, path: &str) -> Self {
        match driver {
            CgroupDriver::Cgroupfs => CgroupName::parse_cgroupfs(path),
            CgroupDriver::Systemd => CgroupName::parse_systemd(path),
        }
    }
}

/// Expands a slice name into the cgroupfs path of its nested slices, as systemd lays them out
/// (libcontainer `systemd.ExpandSlice`): `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice`,
/// `-.slice` → `/`. A name without the suffix, with `/`, or with an empty component (`a--b`,
/// `-a`) is refused.
pub fn expand_slice(slice: &str) -> Result<String, CgroupError> {
    let bad = || CgroupError::InvalidSlice {
        slice: slice.to_string(),
    };
    let name = slice
        .strip_suffix(SLICE_SUFFIX)
        .filter(|n| !n.is_empty() && !slice.contains('/'))
        .ok_or_else(bad)?;
    if name == "-" {
        return Ok("/".into());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for c in name.split('-') {
        if c.is_empty() {
            return Err(bad());
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(c);
        path.push_str(SLICE_SUFFIX);
        prefix.push_str(c);
        prefix.push('-');
    }
    Ok(path)
}

/// The name of the QoS class cgroup holding `qos` pods (k/k `qosContainersInfo`): `kubepods`
/// itself for Guaranteed, `kubepods/burstable`, `kubepods/besteffort`.
pub fn qos_cgroup_name(qos: QosClass) -> CgroupName {
    let mut v = vec![KUBEPODS.to_string()];
    match qos {
        QosClass::Guaranteed => {}
        QosClass::Burstable => v.push("burstable".into()),
        QosClass::BestEffort => v.push("besteffort".into()),
    }
    CgroupName(v)
}

/// The name of a pod's cgroup (k/k `GetPodContainerName`): `pod<uid>` under its QoS class
/// cgroup. A UID with `/` or `_` is refused.
pub fn pod_cgroup_name(pod: &Pod) -> Result<CgroupName, CgroupError> {
    qos_cgroup_name(qos_class(pod)).child(&format!("pod{}", crate::pod::uid(pod)))
}

/// The pod's cgroup parent as RunPodSandbox gets it: the literal path of
/// [`pod_cgroup_name`] under `driver` (k/k `GetPodCgroupParent`), e.g.
/// `/kubepods/burstable/pod1234-5678` or
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice`
/// (containerd, with `SystemdCgroup = true`, takes the last element as the slice).
pub fn pod_cgroup_parent(pod: &Pod, driver: CgroupDriver) -> Result<String, CgroupError> {
    Ok(pod_cgroup_name(pod)?.literal(driver))
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

/// The pod cgroup's `pids.max` for the configured `podPidsLimit`: a positive value is the
/// limit, anything else (the default -1, or 0) leaves pods unlimited (k/k
/// `podContainerManagerImpl.EnsureExists`, which sets `PidsLimit` only when `podPidsLimit > 0`).
pub fn pod_pids_limit(configured: i64) -> Option<i64> {
    (configured > 0).then_some(configured)
}

/// The pod UID a pod cgroup's directory name stands for: `pod<uid>` (cgroupfs) or
/// `kubepods-<qos>-pod<uid with _>.slice` / `kubepods-pod<uid>.slice` (systemd); `None` for
/// anything else (the QoS directories themselves, a container's scope).
pub fn pod_uid_of_cgroup(dir_name: &str) -> Option<String> {
    let systemd = dir_name.strip_suffix(".slice");
    let rest = match systemd {
        Some(slice) => slice.rsplit('-').next()?,
        None => dir_name,
    };
    let uid = rest.strip_prefix("pod")?;
    let uid = if systemd.is_some() {
        uid.replace('_', "-")
    } else {
        uid.to_string()
    };
    (!uid.is_empty() && uid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')).then_some(uid)
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
    fn pod_cgroup_directory_names_give_their_pod_uid() {
        let uid = "00babe0b-369b-4e7e-8e99-4d33c4bcf72b";
        for (name, want) in [
            (format!("pod{uid}"), Some(uid)),
            (
                format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_")),
                Some(uid),
            ),
            (
                format!("kubepods-pod{}.slice", uid.replace('-', "_")),
                Some(uid),
            ),
            ("burstable".to_string(), None),
            ("kubepods-besteffort.slice".to_string(), None),
            ("pod".to_string(), None),
            ("podnot-a/uid".to_string(), None),
            ("cri-containerd-abc.scope".to_string(), None),
        ] {
            assert_eq!(pod_uid_of_cgroup(&name).as_deref(), want, "{name}");
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
            pod_cgroup_parent(&g, CgroupDriver::Cgroupfs).unwrap(),
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
            pod_cgroup_parent(&b, CgroupDriver::Cgroupfs).unwrap(),
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
            pod_cgroup_parent(&be, CgroupDriver::Cgroupfs).unwrap(),
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
    fn systemd_names_expand_to_nested_slices_with_dashes_escaped() {
        let n = CgroupName::new(["kubepods", "burstable", "pod1234-abcd-5678-efgh"]).unwrap();
        assert_eq!(
            n.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
        );
        assert_eq!(
            n.to_cgroupfs(),
            "/kubepods/burstable/pod1234-abcd-5678-efgh"
        );
        assert_eq!(CgroupName::default().to_systemd(), "/");
        assert_eq!(CgroupName::default().to_cgroupfs(), "/");
        assert_eq!(
            CgroupName::new(["kubepods"]).unwrap().to_systemd(),
            "/kubepods.slice"
        );
        assert_eq!(
            CgroupName::new(["kubepods", "pod9-9"])
                .unwrap()
                .literal(CgroupDriver::Systemd),
            "/kubepods.slice/kubepods-pod9_9.slice"
        );
    }

    #[test]
    fn cgroup_names_round_trip_through_both_drivers() {
        for parts in [
            vec!["kubepods"],
            vec!["kubepods", "besteffort"],
            vec!["kubepods", "burstable", "pod1234-abcd-5678-efgh"],
            vec!["kubepods", "podf00d"],
        ] {
            let n = CgroupName::new(parts.clone()).unwrap();
            for d in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
                assert_eq!(CgroupName::parse(d, &n.literal(d)), n, "{parts:?} via {d}");
            }
        }
        // the bare slice name parses too (what containerd keeps of the parent)
        assert_eq!(
            CgroupName::parse_systemd("kubepods-burstable-pod1234_5678.slice"),
            CgroupName::new(["kubepods", "burstable", "pod1234-5678"]).unwrap()
        );
        assert_eq!(CgroupName::parse_systemd("/"), CgroupName::default());
        assert_eq!(CgroupName::parse_cgroupfs("/"), CgroupName::default());
    }

    #[test]
    fn cgroup_name_components_refuse_slash_and_underscore() {
        assert!(matches!(
            CgroupName::new(["kubepods", "a_b"]),
            Err(CgroupError::InvalidName { .. })
        ));
        assert!(CgroupName::new(["a/b"]).is_err());
        assert!(CgroupName::new([""]).is_err());
        let mut p = pod(vec![ctr("a", &[], &[])]);
        p.metadata.uid = Some("../../etc".into());
        assert!(pod_cgroup_parent(&p, CgroupDriver::Cgroupfs).is_err());
    }

    #[test]
    fn expand_slice_follows_libcontainer() {
        assert_eq!(expand_slice("-.slice").unwrap(), "/");
        assert_eq!(expand_slice("a.slice").unwrap(), "/a.slice");
        assert_eq!(
            expand_slice("a-b-c.slice").unwrap(),
            "/a.slice/a-b.slice/a-b-c.slice"
        );
        for bad in [
            ".slice",
            "a",
            "a--b.slice",
            "-a.slice",
            "a-.slice",
            "a/b.slice",
        ] {
            assert!(expand_slice(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_cgroup_parent_per_driver_and_qos_class() {
        let mut g = pod(vec![ctr(
            "a",
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1"), ("memory", "1Gi")],
        )]);
        g.metadata.uid = Some("1234-5678".into());
        let mut b = pod(vec![ctr("a", &[("cpu", "10m")], &[])]);
        b.metadata.uid = Some("1234-5678".into());
        let mut be = pod(vec![ctr("a", &[], &[])]);
        be.metadata.uid = Some("1234-5678".into());
        let sd = CgroupDriver::Systemd;
        assert_eq!(
            pod_cgroup_parent(&g, sd).unwrap(),
            "/kubepods.slice/kubepods-pod1234_5678.slice"
        );
        assert_eq!(
            pod_cgroup_parent(&b, sd).unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice"
        );
        assert_eq!(
            pod_cgroup_parent(&be, sd).unwrap(),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_5678.slice"
        );
        assert_eq!(
            pod_cgroup_parent(&be, CgroupDriver::Cgroupfs).unwrap(),
            "/kubepods/besteffort/pod1234-5678"
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
