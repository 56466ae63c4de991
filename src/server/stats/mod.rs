//! `/stats/summary` (Summary API, `stats/v1alpha1`) from CRI stats (`ListPodSandbox`,
//! `PodSandboxStats`, `ListContainers`, `ListContainerStats`, `ImageFsInfo`) and the node's root
//! cgroup, in the shape the Go kubelet serves and metrics-server reads (k8s.io/kubelet
//! `pkg/apis/stats/v1alpha1/types.go`; k/k `pkg/kubelet/stats/cri_stats_provider.go`).
//!
//! CPU rates (`usageNanoCores`) are computed here from the previous sample of the same object
//! when the runtime does not give one, as cAdvisor does for the node.

use crate::cri::{api, labels, CriClient, CriError};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod host;
mod psi;
use host::{node_cpu_ns, node_memory, read, statvfs_fs};
pub use host::{parse_kv, parse_meminfo, parse_net_dev, proc_stat_btime, proc_stat_cpu_ns};
pub use psi::{parse_psi, IoStats, PsiData, PsiStats};

/// RFC3339 at second precision, as `metav1.Time` serializes.
fn meta_time(ns: i64) -> String {
    DateTime::<Utc>::from_timestamp(
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) as u32,
    )
    .unwrap_or_default()
    .to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn now_ns() -> i64 {
    Utc::now().timestamp_nanos_opt().unwrap_or_default()
}

/// The Summary API document.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Summary {
    /// Node-level stats.
    pub node: NodeStats,
    /// One entry per pod.
    pub pods: Vec<PodStats>,
}

/// Node-level stats.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
}

/// Image filesystem stats.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

/// `podRef`.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// Pod-level stats.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: String,
    pub containers: Vec<ContainerStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(rename = "ephemeral-storage", skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<FsStats>,
}

/// Container-level stats.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    /// The runtime's container ID (its cgroup's name), not serialized.
    #[serde(skip)]
    pub runtime_id: String,
    /// Start time as Unix nanoseconds (for `/metrics/resource`), not serialized.
    #[serde(skip)]
    pub start_ns: i64,
}

/// CPU usage.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
    /// `cpu.pressure` (cgroup v2 only, [`psi`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
    /// Sample time as Unix nanoseconds, not serialized.
    #[serde(skip)]
    pub time_ns: i64,
}

/// Memory usage.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
    /// `memory.pressure` (cgroup v2 only, [`psi`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<PsiStats>,
    /// Sample time as Unix nanoseconds, not serialized.
    #[serde(skip)]
    pub time_ns: i64,
}

/// One interface's counters.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

/// Network stats: the default interface inline, plus all interfaces.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct NetworkStats {
    pub time: String,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

/// Filesystem stats.
#[allow(missing_docs)]
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

/// Previous CPU samples, to turn cumulative usage into a rate.
#[derive(Debug, Default)]
pub struct RateCache {
    prev: HashMap<String, (i64, u64)>,
}

impl RateCache {
    /// The rate in nanocores between the previous sample of `key` and this one (None on the
    /// first sample, a counter reset, or no time elapsed); records this sample.
    pub fn rate(&mut self, key: &str, time_ns: i64, usage_ns: u64) -> Option<u64> {
        let prev = self.prev.insert(key.to_string(), (time_ns, usage_ns));
        let (t0, u0) = prev?;
        let dt = time_ns - t0;
        if dt <= 0 || usage_ns < u0 {
            return None;
        }
        Some(((usage_ns - u0) as u128 * 1_000_000_000u128 / dt as u128) as u64)
    }

    /// Drops samples of objects not in `keep`.
    pub fn retain(&mut self, keep: &std::collections::HashSet<String>) {
        self.prev.retain(|k, _| keep.contains(k));
    }
}

fn value(v: &Option<api::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|v| v.value)
}

/// CRI CPU usage → Summary CPU stats (rate from the cache when the runtime gives none or 0
/// on a first sample).
pub fn cpu_from_cri(c: &api::CpuUsage, key: &str, rates: &mut RateCache) -> CpuStats {
    let usage = value(&c.usage_core_nano_seconds);
    let ts = if c.timestamp > 0 {
        c.timestamp
    } else {
        now_ns()
    };
    let own = usage.and_then(|u| rates.rate(key, ts, u));
    let nano = match value(&c.usage_nano_cores) {
        Some(n) if n > 0 => Some(n),
        other => own.or(other),
    };
    CpuStats {
        time: meta_time(ts),
        usage_nano_cores: nano,
        usage_core_nano_seconds: usage,
        time_ns: ts,
        psi: None,
    }
}

/// CRI memory usage → Summary memory stats.
pub fn memory_from_cri(m: &api::MemoryUsage) -> MemoryStats {
    let ts = if m.timestamp > 0 {
        m.timestamp
    } else {
        now_ns()
    };
    MemoryStats {
        time: meta_time(ts),
        available_bytes: value(&m.available_bytes).filter(|&a| a > 0),
        usage_bytes: value(&m.usage_bytes),
        working_set_bytes: value(&m.working_set_bytes),
        rss_bytes: value(&m.rss_bytes),
        page_faults: value(&m.page_faults),
        major_page_faults: value(&m.major_page_faults),
        time_ns: ts,
        psi: None,
    }
}

fn iface_from_cri(i: &api::NetworkInterfaceUsage) -> InterfaceStats {
    InterfaceStats {
        name: i.name.clone(),
        rx_bytes: value(&i.rx_bytes),
        rx_errors: value(&i.rx_errors),
        tx_bytes: value(&i.tx_bytes),
        tx_errors: value(&i.tx_errors),
    }
}

fn network_from_cri(n: &api::NetworkUsage) -> Option<NetworkStats> {
    let default = n.default_interface.as_ref().map(iface_from_cri)?;
    let ts = if n.timestamp > 0 {
        n.timestamp
    } else {
        now_ns()
    };
    Some(NetworkStats {
        time: meta_time(ts),
        default,
        interfaces: n.interfaces.iter().map(iface_from_cri).collect(),
    })
}

fn fs_from_cri(f: &api::FilesystemUsage) -> FsStats {
    let ts = if f.timestamp > 0 {
        f.timestamp
    } else {
        now_ns()
    };
    FsStats {
        time: meta_time(ts),
        used_bytes: value(&f.used_bytes),
        inodes_used: value(&f.inodes_used),
        ..Default::default()
    }
}

/// Sums container CPU and memory into a pod figure (when the runtime has no pod-level stats).
pub fn sum_containers(containers: &[ContainerStats]) -> (Option<CpuStats>, Option<MemoryStats>) {
    let mut cpu: Option<CpuStats> = None;
    let mut mem: Option<MemoryStats> = None;
    for c in containers {
        if let Some(cc) = &c.cpu {
            let t = cpu.get_or_insert_with(|| CpuStats {
                time: cc.time.clone(),
                time_ns: cc.time_ns,
                usage_core_nano_seconds: Some(0),
                usage_nano_cores: Some(0),
                psi: None,
            });
            t.usage_core_nano_seconds = Some(
                t.usage_core_nano_seconds.unwrap_or(0) + cc.usage_core_nano_seconds.unwrap_or(0),
            );
            t.usage_nano_cores =
                Some(t.usage_nano_cores.unwrap_or(0) + cc.usage_nano_cores.unwrap_or(0));
        }
        if let Some(mm) = &c.memory {
            let t = mem.get_or_insert_with(|| MemoryStats {
                time: mm.time.clone(),
                time_ns: mm.time_ns,
                ..Default::default()
            });
            let add = |a: Option<u64>, b: Option<u64>| Some(a.unwrap_or(0) + b.unwrap_or(0));
            t.usage_bytes = add(t.usage_bytes, mm.usage_bytes);
            t.working_set_bytes = add(t.working_set_bytes, mm.working_set_bytes);
            t.rss_bytes = add(t.rss_bytes, mm.rss_bytes);
            t.page_faults = add(t.page_faults, mm.page_faults);
            t.major_page_faults = add(t.major_page_faults, mm.major_page_faults);
        }
    }
    (cpu, mem)
}

/// Builds summaries; keeps the previous CPU samples for rates.
pub struct StatsProvider {
    cri: CriClient,
    node_name: String,
    root_dir: PathBuf,
    /// Where pod cgroups are: their pressure files (cgroup v2).
    pod_cgroups: Option<crate::cm::CgroupLayout>,
    rates: Mutex<RateCache>,
    /// The image filesystem's mount point, as the runtime's `ImageFsInfo` named it once.
    image_fs_mountpoint: Mutex<Option<PathBuf>>,
}

/// The node-level signals of the summary the eviction manager watches, read without any per-pod
/// CRI call ([`StatsProvider::node_signals`]).
#[derive(Debug, Clone, Default)]
pub struct NodeSignals {
    /// The node's memory (the root cgroup and /proc/meminfo).
    pub memory: Option<MemoryStats>,
    /// The node filesystem (the kubelet's root directory).
    pub fs: Option<FsStats>,
    /// The runtime's image filesystem.
    pub image_fs: Option<FsStats>,
}

impl StatsProvider {
    /// A provider for node `node_name` whose kubelet root directory is `root_dir` (node fs).
    pub fn new(cri: CriClient, node_name: String, root_dir: PathBuf) -> Self {
        Self {
            cri,
            node_name,
            root_dir,
            pod_cgroups: None,
            rates: Mutex::new(RateCache::default()),
            image_fs_mountpoint: Mutex::new(None),
        }
    }

    /// The same provider, reading the pods' and containers' pressure stall figures from their
    /// cgroups under `layout` (on cgroup v2; [`psi`]).
    pub fn with_pod_cgroups(self, layout: Option<crate::cm::CgroupLayout>) -> Self {
        StatsProvider {
            pod_cgroups: layout,
            ..self
        }
    }

    /// The node's memory, node filesystem and image filesystem, as [`StatsProvider::summary`]
    /// reports them in `node`, but with no per-pod work: the eviction manager reads these every
    /// [`crate::eviction::MONITORING_INTERVAL`] and needs pod stats only once a threshold is
    /// met. The runtime is asked for the image filesystem's mount point once
    /// (`ImageFsInfo`); after that this makes no CRI call at all.
    pub async fn node_signals(&self) -> NodeSignals {
        let known = self.image_fs_mountpoint.lock().unwrap().clone();
        let mountpoint = match known {
            Some(m) => Some(m),
            None => {
                let m = self.cri.image_fs_info().await.ok().and_then(|r| {
                    let f = r.image_filesystems.first()?;
                    f.fs_id.as_ref().map(|id| PathBuf::from(&id.mountpoint))
                });
                if let Some(m) = &m {
                    *self.image_fs_mountpoint.lock().unwrap() = Some(m.clone());
                }
                m
            }
        };
        let root = self.root_dir.clone();
        tokio::task::spawn_blocking(move || {
            let ts = now_ns();
            NodeSignals {
                memory: node_memory(ts),
                fs: statvfs_fs(&root, ts),
                image_fs: mountpoint.and_then(|m| statvfs_fs(&m, ts)),
            }
        })
        .await
        .unwrap_or_default()
    }

    /// The summary. `cpu_and_memory_only` leaves out network and filesystems
    /// (`only_cpu_and_memory=true`, and `/metrics/resource`).
    pub async fn summary(&self, cpu_and_memory_only: bool) -> Result<Summary, CriError> {
        let sandboxes = self.cri.list_pod_sandboxes(&[]).await?;
        let containers = self.cri.list_containers(&[]).await?;
        let cstats = self.cri.list_container_stats().await?;
        let mut psstats: HashMap<String, api::PodSandboxStats> = HashMap::new();
        for s in sandboxes
            .iter()
            .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
        {
            match self.cri.pod_sandbox_stats(&s.id).await {
                Ok(Some(st)) => {
                    psstats.insert(s.id.clone(), st);
                }
                Ok(None) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => tracing::debug!(sandbox = %s.id, error = %e, "PodSandboxStats failed"),
            }
        }
        let image_fs = if cpu_and_memory_only {
            None
        } else {
            self.cri.image_fs_info().await.ok()
        };
        let ts = now_ns();
        let node_cpu_ns = tokio::task::spawn_blocking(node_cpu_ns)
            .await
            .ok()
            .flatten();
        let node_mem = tokio::task::spawn_blocking(move || node_memory(ts))
            .await
            .ok()
            .flatten();
        let boot = read("/proc/stat")
            .and_then(|s| proc_stat_btime(&s))
            .unwrap_or(0);

        // the rate cache is held for this block only (not across the awaits below)
        let (node_cpu, mut pods) = {
            let mut rates = self.rates.lock().unwrap();
            let mut seen = std::collections::HashSet::new();
            let node_cpu = node_cpu_ns.map(|u| {
                seen.insert("node".to_string());
                CpuStats {
                    time: meta_time(ts),
                    usage_nano_cores: rates.rate("node", ts, u),
                    usage_core_nano_seconds: Some(u),
                    time_ns: ts,
                    psi: None,
                }
            });
            let running: HashMap<&str, &api::Container> = containers
                .iter()
                .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
                .map(|c| (c.id.as_str(), c))
                .collect();
            let mut by_sandbox: HashMap<&str, Vec<ContainerStats>> = HashMap::new();
            for st in &cstats {
                let Some(attr) = st.attributes.as_ref() else {
                    continue;
                };
                let Some(c) = running.get(attr.id.as_str()) else {
                    continue;
                };
                seen.insert(attr.id.clone());
                let name = c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
                    .unwrap_or_default();
                let cs = ContainerStats {
                    name,
                    start_time: meta_time(c.created_at),
                    cpu: st
                        .cpu
                        .as_ref()
                        .map(|u| cpu_from_cri(u, &attr.id, &mut rates)),
                    memory: st.memory.as_ref().map(memory_from_cri),
                    rootfs: if cpu_and_memory_only {
                        None
                    } else {
                        st.writable_layer.as_ref().map(fs_from_cri)
                    },
                    start_ns: c.created_at,
                    runtime_id: attr.id.clone(),
                    io: None,
                };
                by_sandbox
                    .entry(c.pod_sandbox_id.as_str())
                    .or_default()
                    .push(cs);
            }
            let mut pods = Vec::new();
            for s in sandboxes
                .iter()
                .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
            {
                let Some(md) = s.metadata.as_ref() else {
                    continue;
                };
                let mut containers = by_sandbox.remove(s.id.as_str()).unwrap_or_default();
                containers.sort_by(|a, b| a.name.cmp(&b.name));
                let linux = psstats.get(&s.id).and_then(|p| p.linux.as_ref());
                let key = format!("pod/{}", s.id);
                let mut cpu = linux
                    .and_then(|l| l.cpu.as_ref())
                    .map(|c| cpu_from_cri(c, &key, &mut rates));
                seen.insert(key);
                let mut memory = linux.and_then(|l| l.memory.as_ref()).map(memory_from_cri);
                let (sum_cpu, sum_mem) = sum_containers(&containers);
                if cpu
                    .as_ref()
                    .and_then(|c| c.usage_core_nano_seconds)
                    .unwrap_or(0)
                    == 0
                {
                    cpu = sum_cpu.or(cpu);
                }
                if memory
                    .as_ref()
                    .and_then(|m| m.working_set_bytes)
                    .unwrap_or(0)
                    == 0
                {
                    memory = sum_mem.or(memory);
                }
                let network = if cpu_and_memory_only {
                    None
                } else {
                    linux
                        .and_then(|l| l.network.as_ref())
                        .and_then(network_from_cri)
                };
                let ephemeral_storage = if cpu_and_memory_only {
                    None
                } else {
                    let used: u64 = containers
                        .iter()
                        .filter_map(|c| c.rootfs.as_ref().and_then(|r| r.used_bytes))
                        .sum();
                    Some(FsStats {
                        time: meta_time(ts),
                        used_bytes: Some(used),
                        ..Default::default()
                    })
                };
                pods.push(PodStats {
                    pod_ref: PodReference {
                        name: md.name.clone(),
                        namespace: md.namespace.clone(),
                        uid: md.uid.clone(),
                    },
                    start_time: meta_time(s.created_at),
                    containers,
                    cpu,
                    memory,
                    network,
                    ephemeral_storage,
                    io: None,
                });
            }
            rates.retain(&seen);
            (node_cpu, pods)
        };
        pods.sort_by(|a, b| {
            (&a.pod_ref.namespace, &a.pod_ref.name).cmp(&(&b.pod_ref.namespace, &b.pod_ref.name))
        });

        let (network, fs, runtime) = if cpu_and_memory_only {
            (None, None, None)
        } else {
            let ifaces = read("/proc/net/dev")
                .map(|t| parse_net_dev(&t))
                .unwrap_or_default();
            // The default interface: eth0 if there is one (cAdvisor's choice), else the
            // busiest.
            let default = ifaces
                .iter()
                .find(|i| i.name == "eth0")
                .or_else(|| ifaces.iter().max_by_key(|i| i.rx_bytes.unwrap_or(0)))
                .cloned();
            let network = default.map(|d| NetworkStats {
                time: meta_time(ts),
                default: d,
                interfaces: ifaces.clone(),
            });
            let fs = statvfs_fs(&self.root_dir, ts);
            let runtime = image_fs.and_then(|r| {
                let f = r.image_filesystems.first()?;
                let mut st = f
                    .fs_id
                    .as_ref()
                    .and_then(|id| statvfs_fs(Path::new(&id.mountpoint), ts))
                    .unwrap_or_default();
                st.time = meta_time(ts);
                st.used_bytes = value(&f.used_bytes).or(st.used_bytes);
                st.inodes_used = value(&f.inodes_used).or(st.inodes_used);
                Some(RuntimeStats { image_fs: Some(st) })
            });
            (network, fs, runtime)
        };
        let summary = Summary {
            node: NodeStats {
                node_name: self.node_name.clone(),
                system_containers: Vec::new(),
                start_time: meta_time(boot * 1_000_000_000),
                cpu: node_cpu,
                memory: node_mem,
                network,
                fs,
                runtime,
                io: None,
            },
            pods,
        };
        let layout = self.pod_cgroups.clone();
        Ok(tokio::task::spawn_blocking(move || {
            let mut summary = summary;
            psi::attach(
                &mut summary,
                Path::new(psi::CGROUP_ROOT),
                layout.as_ref(),
                ts,
            );
            summary
        })
        .await
        .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_need_two_samples_and_survive_resets() {
        let mut r = RateCache::default();
        assert_eq!(r.rate("a", 1_000_000_000, 100), None);
        // 0.5 s of CPU in 1 s = 500 millicores
        assert_eq!(r.rate("a", 2_000_000_000, 500_000_100), Some(500_000_000));
        assert_eq!(r.rate("a", 3_000_000_000, 5), None);
        assert_eq!(r.rate("a", 3_000_000_000, 10), None);
    }

    #[test]
    fn summary_serializes_in_the_stats_v1alpha1_shape() {
        let s = Summary {
            node: NodeStats {
                node_name: "n".into(),
                start_time: meta_time(0),
                cpu: Some(CpuStats {
                    time: meta_time(1_500_000_000),
                    usage_nano_cores: Some(5),
                    usage_core_nano_seconds: Some(7),
                    time_ns: 1_500_000_000,
                    psi: None,
                }),
                ..Default::default()
            },
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "p".into(),
                    namespace: "ns".into(),
                    uid: "u".into(),
                },
                start_time: meta_time(0),
                ephemeral_storage: Some(FsStats::default()),
                network: Some(NetworkStats {
                    time: meta_time(0),
                    default: InterfaceStats {
                        name: "eth0".into(),
                        rx_bytes: Some(1),
                        ..Default::default()
                    },
                    interfaces: vec![],
                }),
                ..Default::default()
            }],
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["node"]["nodeName"], "n");
        assert_eq!(v["node"]["startTime"], "1970-01-01T00:00:00Z");
        assert_eq!(v["node"]["cpu"]["time"], "1970-01-01T00:00:01Z");
        assert_eq!(v["node"]["cpu"]["usageNanoCores"], 5);
        assert_eq!(v["node"]["cpu"]["usageCoreNanoSeconds"], 7);
        assert!(v["node"]["cpu"].get("time_ns").is_none());
        assert_eq!(v["pods"][0]["podRef"]["namespace"], "ns");
        assert_eq!(v["pods"][0]["containers"], serde_json::json!([]));
        assert!(v["pods"][0].get("ephemeral-storage").is_some());
        assert_eq!(v["pods"][0]["network"]["name"], "eth0");
        assert_eq!(v["pods"][0]["network"]["rxBytes"], 1);
    }

    #[test]
    fn pod_figures_sum_containers() {
        let c = |cpu: u64, ws: u64| ContainerStats {
            cpu: Some(CpuStats {
                usage_core_nano_seconds: Some(cpu),
                usage_nano_cores: Some(cpu / 10),
                ..Default::default()
            }),
            memory: Some(MemoryStats {
                working_set_bytes: Some(ws),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (cpu, mem) = sum_containers(&[c(100, 10), c(50, 5)]);
        assert_eq!(cpu.unwrap().usage_core_nano_seconds, Some(150));
        assert_eq!(mem.unwrap().working_set_bytes, Some(15));
        let (cpu, mem) = sum_containers(&[]);
        assert!(cpu.is_none() && mem.is_none());
    }
}
