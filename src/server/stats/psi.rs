//! Pressure stall information (PSI, the KubeletPSI feature, GA in v1.36) for the Summary API:
//! the `some`/`full` lines of cgroup v2's `cpu.pressure`, `memory.pressure` and `io.pressure`
//! for the node (the root cgroup), each pod (its pod cgroup) and each container (its cgroup
//! below the pod's), as the Go kubelet reports them through cAdvisor (k/k
//! `pkg/kubelet/stats/helper.go` `cadvisorPSIToStatsPSI`). Only on cgroup v2: cAdvisor reports
//! none on cgroup v1, so neither does deckhand.
//!
//! `total` is passed on as the kernel writes it, in microseconds, as cAdvisor and the Go kubelet
//! pass it on (the API's comment says nanoseconds).

use super::{meta_time, Summary};
use crate::cm::CgroupLayout;
use crate::resource::QosClass;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where the unified cgroup hierarchy is mounted.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// One line of a pressure file (stats/v1alpha1 `PSIData`).
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PsiData {
    /// Total stall time, µs (see the module doc).
    pub total: u64,
    /// Percent of the last 10 s some (or all) tasks stalled.
    pub avg10: f64,
    /// Over the last 60 s.
    pub avg60: f64,
    /// Over the last 300 s.
    pub avg300: f64,
}

/// A pressure file (stats/v1alpha1 `PSIStats`).
#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq)]
pub struct PsiStats {
    /// All non-idle tasks stalled at once.
    pub full: PsiData,
    /// Some task stalled.
    pub some: PsiData,
}

/// I/O stats: only its pressure (stats/v1alpha1 `IOStats`).
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct IoStats {
    /// Sample time (RFC 3339).
    pub time: String,
    /// `io.pressure`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
}

/// Parses a pressure file: `some avg10=0.12 avg60=0.05 avg300=0.00 total=123` and the same with
/// `full` (a missing `full` line, as older kernels' `cpu.pressure` has, stays zero). `None` when
/// there is no `some` line.
pub fn parse_psi(text: &str) -> Option<PsiStats> {
    let mut out = PsiStats::default();
    let mut some = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("some") => {
                some = true;
                &mut out.some
            }
            Some("full") => &mut out.full,
            _ => continue,
        };
        for kv in words {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            match k {
                "total" => slot.total = v.parse().ok()?,
                "avg10" => slot.avg10 = v.parse().ok()?,
                "avg60" => slot.avg60 = v.parse().ok()?,
                "avg300" => slot.avg300 = v.parse().ok()?,
                _ => {}
            }
        }
    }
    some.then_some(out)
}

/// The cpu, memory and io pressure of the cgroup v2 directory `dir` (each `None` when its file
/// is missing or unreadable).
pub fn cgroup_psi(dir: &Path) -> [Option<PsiStats>; 3] {
    ["cpu.pressure", "memory.pressure", "io.pressure"].map(|f| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .and_then(|t| parse_psi(&t))
    })
}

/// The directory of pod `uid`'s cgroup under `root`, whichever QoS class holds it.
fn pod_dir(root: &Path, layout: &CgroupLayout, uid: &str) -> Option<PathBuf> {
    [
        QosClass::Guaranteed,
        QosClass::Burstable,
        QosClass::BestEffort,
    ]
    .into_iter()
    .filter_map(|q| layout.pod_of(q, uid).ok())
    .map(|n| root.join(layout.literal(&n).trim_start_matches('/')))
    .find(|d| d.is_dir())
}

/// The directory of container `id`'s cgroup in its pod's: containerd names it
/// `cri-containerd-<id>.scope` under the systemd driver, `<id>` under cgroupfs.
fn container_dir(pod: &Path, id: &str) -> Option<PathBuf> {
    [pod.join(format!("cri-containerd-{id}.scope")), pod.join(id)]
        .into_iter()
        .find(|d| d.is_dir())
}

/// Fills the pressure figures of `s` from the cgroup v2 hierarchy at `root`: the node's from the
/// root cgroup, each pod's from its pod cgroup (`layout`; none without pod cgroups), each
/// container's from its cgroup below the pod's. Nothing on cgroup v1 (no `cgroup.controllers` at
/// the root).
pub fn attach(s: &mut Summary, root: &Path, layout: Option<&CgroupLayout>, ts: i64) {
    if !root.join("cgroup.controllers").exists() {
        return;
    }
    let time = meta_time(ts);
    let set = |cpu: &mut Option<super::CpuStats>,
               mem: &mut Option<super::MemoryStats>,
               io: &mut Option<IoStats>,
               dir: &Path| {
        let [c, m, i] = cgroup_psi(dir);
        if let Some(cpu) = cpu.as_mut() {
            cpu.psi = c;
        }
        if let Some(mem) = mem.as_mut() {
            mem.psi = m;
        }
        if i.is_some() {
            *io = Some(IoStats {
                time: time.clone(),
                psi: i,
            });
        }
    };
    let n = &mut s.node;
    set(&mut n.cpu, &mut n.memory, &mut n.io, root);
    let Some(layout) = layout else {
        return;
    };
    for p in &mut s.pods {
        let Some(dir) = pod_dir(root, layout, &p.pod_ref.uid) else {
            continue;
        };
        set(&mut p.cpu, &mut p.memory, &mut p.io, &dir);
        for c in &mut p.containers {
            if let Some(cdir) = container_dir(&dir, &c.runtime_id) {
                set(&mut c.cpu, &mut c.memory, &mut c.io, &cdir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_files_parse_as_the_kernel_writes_them() {
        let both = "some avg10=0.72 avg60=5.66 avg300=11.78 total=78217847\nfull avg10=0.10 avg60=0.00 avg300=0.01 total=195231\n";
        let p = parse_psi(both).unwrap();
        assert_eq!(
            p.some,
            PsiData {
                total: 78217847,
                avg10: 0.72,
                avg60: 5.66,
                avg300: 11.78
            }
        );
        assert_eq!(p.full.total, 195231);
        assert_eq!(p.full.avg10, 0.10);
        // an older kernel's cpu.pressure: `some` only
        let some_only = parse_psi("some avg10=1.00 avg60=0.50 avg300=0.25 total=7\n").unwrap();
        assert_eq!(some_only.full, PsiData::default());
        assert_eq!(some_only.some.total, 7);
        assert_eq!(parse_psi(""), None);
        assert_eq!(parse_psi("some avg10=x total=1"), None);
        let json = serde_json::to_value(p).unwrap();
        assert_eq!(json["some"]["avg60"], 5.66);
        assert_eq!(json["full"]["total"], 195231);
    }

    /// A fake cgroup v2 tree: the root, a burstable pod under kind's cgroupRoot (systemd
    /// driver) with one container scope; a pod without a cgroup gets nothing.
    #[test]
    fn pressure_comes_from_the_node_pod_and_container_cgroups_on_cgroup_v2() {
        use super::super::{
            ContainerStats, CpuStats, MemoryStats, NodeStats, PodReference, PodStats,
        };
        let root = std::env::temp_dir().join(format!("deckhand-psi-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let layout = CgroupLayout::new(crate::cm::CgroupDriver::Systemd, "/kubelet");
        let pod = root.join("kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1_2.slice");
        let ctr = pod.join("cri-containerd-abc.scope");
        std::fs::create_dir_all(&ctr).unwrap();
        let write = |dir: &Path, total: u64| {
            for f in ["cpu.pressure", "memory.pressure", "io.pressure"] {
                std::fs::write(
                    dir.join(f),
                    format!("some avg10=1.00 avg60=0.00 avg300=0.00 total={total}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
                )
                .unwrap();
            }
        };
        write(&root, 1);
        write(&pod, 2);
        write(&ctr, 3);
        let cpu = || Some(CpuStats::default());
        let mem = || Some(MemoryStats::default());
        let mut s = Summary {
            node: NodeStats {
                cpu: cpu(),
                memory: mem(),
                ..Default::default()
            },
            pods: vec![
                PodStats {
                    pod_ref: PodReference {
                        uid: "1-2".into(),
                        ..Default::default()
                    },
                    cpu: cpu(),
                    memory: mem(),
                    containers: vec![ContainerStats {
                        runtime_id: "abc".into(),
                        cpu: cpu(),
                        memory: mem(),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                PodStats {
                    pod_ref: PodReference {
                        uid: "9-9".into(),
                        ..Default::default()
                    },
                    cpu: cpu(),
                    ..Default::default()
                },
            ],
        };
        // cgroup v1: nothing
        attach(&mut s, &root, Some(&layout), 0);
        assert!(s.node.io.is_none());
        std::fs::write(root.join("cgroup.controllers"), "cpu memory io").unwrap();
        attach(&mut s, &root, Some(&layout), 0);
        let total = |p: &Option<PsiStats>| p.map(|p| p.some.total);
        assert_eq!(total(&s.node.cpu.as_ref().unwrap().psi), Some(1));
        assert_eq!(total(&s.node.io.as_ref().unwrap().psi), Some(1));
        let p = &s.pods[0];
        assert_eq!(total(&p.cpu.as_ref().unwrap().psi), Some(2));
        assert_eq!(total(&p.memory.as_ref().unwrap().psi), Some(2));
        assert_eq!(
            total(&p.containers[0].memory.as_ref().unwrap().psi),
            Some(3)
        );
        assert_eq!(total(&p.containers[0].io.as_ref().unwrap().psi), Some(3));
        assert_eq!(s.pods[1].cpu.as_ref().unwrap().psi, None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
