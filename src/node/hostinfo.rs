//! Facts about the host that go into the Node object, read the way cAdvisor reads them for the
//! Go kubelet (k/k `pkg/kubelet/cadvisor`, `nodestatus/setters.go` MachineInfo/VersionInfo).

use std::path::Path;

/// What the node status reports about the machine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostInfo {
    /// Online CPUs.
    pub num_cores: u64,
    /// `MemTotal` from /proc/meminfo, bytes.
    pub memory_bytes: u64,
    /// Size of the filesystem holding the root dir, bytes.
    pub root_fs_bytes: u64,
    /// Hugepage sizes present (bytes each) with their configured totals (bytes).
    pub hugepages: Vec<(u64, u64)>,
    /// /etc/machine-id.
    pub machine_id: String,
    /// /sys/class/dmi/id/product_uuid (empty on machines without DMI).
    pub system_uuid: String,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// PRETTY_NAME from /etc/os-release.
    pub os_image: String,
    /// Go-style architecture name (`amd64`, `arm64`).
    pub architecture: String,
}

fn read_trim(p: impl AsRef<Path>) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Go's GOARCH for the running architecture.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// Parses `MemTotal:  24563532 kB` from /proc/meminfo text, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Parses PRETTY_NAME from /etc/os-release text.
pub fn parse_os_pretty_name(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
}

impl HostInfo {
    /// Reads the host. Missing files give empty or zero fields, never an error: the Go kubelet
    /// reports what it can and flags missing capacity through the Ready condition.
    pub fn read(root_dir: &Path) -> HostInfo {
        let num_cores = std::thread::available_parallelism()
            .map(|n| n.get() as u64)
            .unwrap_or(0);
        let memory_bytes =
            parse_mem_total(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default())
                .unwrap_or(0);
        let root_fs_bytes = fs_size(root_dir);
        let mut hugepages = vec![];
        if let Ok(rd) = std::fs::read_dir("/sys/kernel/mm/hugepages") {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(kb) = name
                    .strip_prefix("hugepages-")
                    .and_then(|s| s.strip_suffix("kB"))
                    .and_then(|s| s.parse::<u64>().ok())
                {
                    let n: u64 = read_trim(e.path().join("nr_hugepages"))
                        .parse()
                        .unwrap_or(0);
                    hugepages.push((kb * 1024, n * kb * 1024));
                }
            }
        }
        hugepages.sort();
        let uts = nix::sys::utsname::uname().ok();
        HostInfo {
            num_cores,
            memory_bytes,
            root_fs_bytes,
            hugepages,
            machine_id: read_trim("/etc/machine-id"),
            system_uuid: read_trim("/sys/class/dmi/id/product_uuid"),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            kernel_version: uts
                .as_ref()
                .map(|u| u.release().to_string_lossy().to_string())
                .unwrap_or_default(),
            os_image: parse_os_pretty_name(
                &std::fs::read_to_string("/etc/os-release").unwrap_or_default(),
            )
            .unwrap_or_else(|| "Linux".into()),
            architecture: go_arch().to_string(),
        }
    }
}

/// Total size in bytes of the filesystem holding `path` (its nearest existing ancestor).
pub fn fs_size(path: &Path) -> u64 {
    let mut p = path.to_path_buf();
    loop {
        if p.exists() {
            break;
        }
        if !p.pop() {
            return 0;
        }
    }
    match nix::sys::statvfs::statvfs(&p) {
        Ok(s) => s.blocks() as u64 * s.fragment_size() as u64,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_and_os_release() {
        assert_eq!(
            parse_mem_total("MemTotal:       24563532 kB\nMemFree: 1 kB\n"),
            Some(24563532 * 1024)
        );
        assert_eq!(
            parse_os_pretty_name(
                "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
            )
            .as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }
}
