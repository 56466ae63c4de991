//! The node's own figures for the Summary API and the eviction manager, read from `/proc` and
//! the root cgroup (cAdvisor's root container for the Go kubelet): CPU time, memory with its
//! working set, network interfaces, filesystems. The parsers are pure; the readers are the
//! I/O around them.

use super::{meta_time, FsStats, InterfaceStats, MemoryStats};
use std::collections::HashMap;
use std::path::Path;

// ---------------------------------------------------------------------------------------------
// node figures from /proc and the root cgroup
// ---------------------------------------------------------------------------------------------

/// Parses `memory.stat`-style `key value` lines.
pub fn parse_kv(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?, it.next()?.parse().ok()?))
        })
        .collect()
}

/// `/proc/meminfo` values in bytes.
pub fn parse_meminfo(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(':')?;
            let mut it = rest.split_whitespace();
            let n: u64 = it.next()?.parse().ok()?;
            let mult = if it.next() == Some("kB") { 1024 } else { 1 };
            Some((k, n * mult))
        })
        .collect()
}

/// Cumulative non-idle CPU time in nanoseconds from the `cpu` line of `/proc/stat`
/// (USER_HZ = 100).
pub fn proc_stat_cpu_ns(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)? + v.get(7).unwrap_or(&0);
    Some(busy * 10_000_000)
}

/// The boot time (`btime` of `/proc/stat`), Unix seconds.
pub fn proc_stat_btime(text: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Interfaces of `/proc/net/dev` (without `lo`): name, rx bytes, rx errors, tx bytes, tx errors.
pub fn parse_net_dev(text: &str) -> Vec<InterfaceStats> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            if name == "lo" {
                return None;
            }
            let v: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            Some(InterfaceStats {
                name: name.into(),
                rx_bytes: v.first().copied(),
                rx_errors: v.get(2).copied(),
                tx_bytes: v.get(8).copied(),
                tx_errors: v.get(10).copied(),
            })
        })
        .collect()
}

pub(super) fn read(p: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// The node's cumulative CPU time (ns): the root cpuacct cgroup (v1), else `/proc/stat`.
pub(super) fn node_cpu_ns() -> Option<u64> {
    for p in [
        "/sys/fs/cgroup/cpuacct/cpuacct.usage",
        "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage",
    ] {
        if let Some(v) = read(p).and_then(|s| s.trim().parse().ok()) {
            return Some(v);
        }
    }
    if let Some(s) = read("/sys/fs/cgroup/cpu.stat") {
        if let Some(us) = parse_kv(&s).get("usage_usec") {
            return Some(us * 1000);
        }
    }
    read("/proc/stat").and_then(|s| proc_stat_cpu_ns(&s))
}

/// Node memory as cAdvisor computes it for the root container: usage, working set = usage −
/// inactive file, available = capacity − working set.
pub(super) fn node_memory(ts: i64) -> Option<MemoryStats> {
    let meminfo = read("/proc/meminfo")?;
    let mi = parse_meminfo(&meminfo);
    let total = *mi.get("MemTotal")?;
    let (usage, inactive_file, rss, pgfault, pgmajfault) = match (
        read("/sys/fs/cgroup/memory/memory.usage_in_bytes")
            .and_then(|s| s.trim().parse::<u64>().ok()),
        read("/sys/fs/cgroup/memory/memory.stat"),
    ) {
        (Some(usage), Some(stat)) => {
            let st = parse_kv(&stat);
            (
                usage,
                st.get("total_inactive_file").copied().unwrap_or(0),
                st.get("total_rss").copied(),
                st.get("total_pgfault").copied(),
                st.get("total_pgmajfault").copied(),
            )
        }
        _ => (
            total.saturating_sub(*mi.get("MemFree").unwrap_or(&0)),
            *mi.get("Inactive(file)").unwrap_or(&0),
            mi.get("AnonPages").copied(),
            None,
            None,
        ),
    };
    let ws = usage.saturating_sub(inactive_file);
    Some(MemoryStats {
        time: meta_time(ts),
        available_bytes: Some(total.saturating_sub(ws)),
        usage_bytes: Some(usage),
        working_set_bytes: Some(ws),
        rss_bytes: rss,
        page_faults: pgfault,
        major_page_faults: pgmajfault,
        time_ns: ts,
        psi: None,
    })
}

pub(super) fn statvfs_fs(path: &Path, ts: i64) -> Option<FsStats> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    let frsize = s.fragment_size() as u64;
    let capacity = s.blocks() as u64 * frsize;
    let avail = s.blocks_available() as u64 * frsize;
    let free = s.blocks_free() as u64 * frsize;
    Some(FsStats {
        time: meta_time(ts),
        available_bytes: Some(avail),
        capacity_bytes: Some(capacity),
        used_bytes: Some(capacity.saturating_sub(free)),
        inodes_free: Some(s.files_free() as u64),
        inodes: Some(s.files() as u64),
        inodes_used: Some((s.files() as u64).saturating_sub(s.files_free() as u64)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stat_and_meminfo_parse() {
        let kv = parse_kv("cache 10\ntotal_inactive_file 4096\nbad\n");
        assert_eq!(kv["total_inactive_file"], 4096);
        let mi = parse_meminfo("MemTotal:       1000 kB\nHugePages_Total:       0\n");
        assert_eq!(mi["MemTotal"], 1_024_000);
        assert_eq!(mi["HugePages_Total"], 0);
    }

    #[test]
    fn proc_stat_gives_busy_time_and_boot_time() {
        let s = "cpu  100 5 50 1000 7 1 2 3 0 0\ncpu0 1 2 3 4\nbtime 1700000000\n";
        assert_eq!(
            proc_stat_cpu_ns(s),
            Some((100 + 5 + 50 + 1 + 2 + 3) * 10_000_000)
        );
        assert_eq!(proc_stat_btime(s), Some(1_700_000_000));
    }

    #[test]
    fn net_dev_skips_loopback() {
        let t = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 10 1 0 0 0 0 0 0 10 1 0 0 0 0 0 0\n  eth0: 1000 10 2 0 0 0 0 0 2000 20 3 0 0 0 0 0\n";
        let v = parse_net_dev(t);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "eth0");
        assert_eq!(v[0].rx_bytes, Some(1000));
        assert_eq!(v[0].rx_errors, Some(2));
        assert_eq!(v[0].tx_bytes, Some(2000));
        assert_eq!(v[0].tx_errors, Some(3));
    }
}
