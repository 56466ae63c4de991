//! Cgroup names and where pods' cgroups go (the Go kubelet's `pkg/kubelet/cm` `CgroupName`,
//! `cgroupCommon.Name`, `NodeAllocatableRoot` and the QoS container names): the driver-neutral
//! [`CgroupName`], its literal paths under each [`CgroupDriver`] (systemd slices expanded as
//! libcontainer expands them), and the [`CgroupLayout`] that places `kubepods`, the QoS class
//! cgroups and each pod's cgroup under `cgroupRoot`. All pure.

use super::{CgroupError, KUBEPODS};
use crate::resource::{qos_class, QosClass};
use k8s_openapi::api::core::v1::Pod;

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
    /// The new component is checked as [`CgroupName::new`] checks each; the existing ones are
    /// taken as they are (k/k `NewCgroupName` checks only the new components, so a
    /// `cgroupRoot` such as `/my_root` stays usable under the cgroupfs driver).
    pub fn child(&self, component: &str) -> Result<Self, CgroupError> {
        let mut v = self.0.clone();
        v.extend(CgroupName::new([component])?.0);
        Ok(CgroupName(v))
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

/// Where a node's pod cgroups live: the cgroup driver that names them and the `cgroupRoot`
/// that the node allocatable cgroup `kubepods` sits under (k/k `NodeAllocatableRoot`,
/// `qosContainersInfo`, `GetPodContainerName`). With the default `cgroupRoot: /`:
/// `kubepods`, `kubepods/burstable`, `kubepods/besteffort/pod<uid>`; kind's `cgroupRoot:
/// /kubelet` puts them under `kubelet/` (`/kubelet/kubepods/...` for cgroupfs,
/// `/kubelet.slice/kubelet-kubepods.slice/...` for systemd).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupLayout {
    /// How names become paths.
    pub driver: CgroupDriver,
    /// `cgroupRoot` as a name (read in cgroupfs form whatever the driver, as the Go kubelet's
    /// `ParseCgroupfsToCgroupName(cgroupRoot)` does).
    pub root: CgroupName,
}

impl CgroupLayout {
    /// The layout for `driver` under `cgroup_root` (`cgroupRoot`; empty or `/`: the root).
    pub fn new(driver: CgroupDriver, cgroup_root: &str) -> Self {
        CgroupLayout {
            driver,
            root: CgroupName::parse_cgroupfs(cgroup_root),
        }
    }

    /// The node allocatable cgroup holding every pod: `<root>/kubepods`.
    pub fn kubepods(&self) -> CgroupName {
        let mut v = self.root.0.clone();
        v.push(KUBEPODS.to_string());
        CgroupName(v)
    }

    /// The cgroup holding `qos` pods: `kubepods` itself for Guaranteed, `kubepods/burstable`,
    /// `kubepods/besteffort`.
    pub fn qos(&self, qos: QosClass) -> CgroupName {
        let mut n = self.kubepods();
        match qos {
            QosClass::Guaranteed => {}
            QosClass::Burstable => n.0.push("burstable".into()),
            QosClass::BestEffort => n.0.push("besteffort".into()),
        }
        n
    }

    /// The cgroup of the pod with `uid` and QoS class `qos`: `pod<uid>` under [`Self::qos`].
    /// A UID with `/` or `_` is refused.
    pub fn pod_of(&self, qos: QosClass, uid: &str) -> Result<CgroupName, CgroupError> {
        self.qos(qos).child(&format!("pod{uid}"))
    }

    /// The pod's cgroup (its QoS class from [`qos_class`]).
    pub fn pod(&self, pod: &Pod) -> Result<CgroupName, CgroupError> {
        self.pod_of(qos_class(pod), crate::pod::uid(pod))
    }

    /// The pod's cgroup parent as RunPodSandbox gets it: the literal path of [`Self::pod`]
    /// (k/k `GetPodCgroupParent`), e.g. `/kubepods/burstable/pod1234-5678` or
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice`
    /// (containerd, with `SystemdCgroup = true`, takes the last element as the slice).
    pub fn pod_parent(&self, pod: &Pod) -> Result<String, CgroupError> {
        Ok(self.pod(pod)?.literal(self.driver))
    }

    /// The literal path of `name` under this layout's driver.
    pub fn literal(&self, name: &CgroupName) -> String {
        name.literal(self.driver)
    }
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
    use crate::resource::qos::tests::{ctr, pod};

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
        assert!(CgroupLayout::default().pod_parent(&p).is_err());
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
        let sd = CgroupLayout::new(CgroupDriver::Systemd, "/");
        assert_eq!(
            sd.pod_parent(&g).unwrap(),
            "/kubepods.slice/kubepods-pod1234_5678.slice"
        );
        assert_eq!(
            sd.pod_parent(&b).unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678.slice"
        );
        assert_eq!(
            sd.pod_parent(&be).unwrap(),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_5678.slice"
        );
        assert_eq!(
            CgroupLayout::default().pod_parent(&be).unwrap(),
            "/kubepods/besteffort/pod1234-5678"
        );
    }

    #[test]
    fn cgroup_root_puts_kubepods_under_it() {
        let mut b = pod(vec![ctr("a", &[("cpu", "10m")], &[])]);
        b.metadata.uid = Some("1234-5678".into());
        let cases = [
            ("/", CgroupDriver::Cgroupfs, "/kubepods", "/kubepods/burstable/pod1234-5678"),
            ("", CgroupDriver::Cgroupfs, "/kubepods", "/kubepods/burstable/pod1234-5678"),
            (
                "/kubelet",
                CgroupDriver::Cgroupfs,
                "/kubelet/kubepods",
                "/kubelet/kubepods/burstable/pod1234-5678",
            ),
            (
                "/kubelet",
                CgroupDriver::Systemd,
                "/kubelet.slice/kubelet-kubepods.slice",
                "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1234_5678.slice",
            ),
            (
                "/a/b",
                CgroupDriver::Cgroupfs,
                "/a/b/kubepods",
                "/a/b/kubepods/burstable/pod1234-5678",
            ),
            // a root with `_` is kept (only new components are checked), as in Go
            ("/my_root", CgroupDriver::Cgroupfs, "/my_root/kubepods", "/my_root/kubepods/burstable/pod1234-5678"),
        ];
        for (root, driver, kubepods, pod_parent) in cases {
            let l = CgroupLayout::new(driver, root);
            assert_eq!(l.literal(&l.kubepods()), kubepods, "{root} {driver}");
            assert_eq!(l.pod_parent(&b).unwrap(), pod_parent, "{root} {driver}");
            // the pod slice's directory name still gives the UID back
            let dir = pod_parent.rsplit('/').next().unwrap();
            assert_eq!(
                pod_uid_of_cgroup(dir).as_deref(),
                Some("1234-5678"),
                "{dir}"
            );
        }
    }
}
