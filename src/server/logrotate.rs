//! Container log rotation by size and count, as the Go kubelet's container log manager does it
//! (k/k `pkg/kubelet/logs/container_log_manager.go`): every 10 seconds, each running
//! container's CRI log file (path from `ContainerStatus.log_path`) that has reached
//! `--container-log-max-size` is renamed to `<log>.<YYYYMMDD-hhmmss>` and the runtime is asked
//! to reopen it (`ReopenContainerLog`); rotated files are gzip-compressed and only
//! `--container-log-max-files` − 1 of them are kept beside the live file.
//!
//! [`plan`] is the pure decision over the rotated files; [`run`] is the loop.

use crate::cri::{api, CriClient};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often logs are checked (`containerLogMonitorInterval` default).
pub const MONITOR_PERIOD: Duration = Duration::from_secs(10);
const COMPRESS_SUFFIX: &str = ".gz";
const TMP_SUFFIX: &str = ".tmp";
/// Go's `timestampFormat` `20060102-150405`.
const TIMESTAMP_FORMAT: &str = "%Y%m%d-%H%M%S";

/// The rotation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Rotate when the live file reaches this many bytes.
    pub max_size: u64,
    /// Files kept per container, the live one included.
    pub max_files: usize,
}

/// What to do with the rotated files of one log, before rotating it again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Leftovers to delete: `.tmp` files and uncompressed files whose `.gz` exists.
    pub remove_unused: Vec<String>,
    /// The oldest rotated files beyond the count.
    pub remove_excess: Vec<String>,
    /// Rotated files to gzip.
    pub compress: Vec<String>,
}

/// Go `isInUse`: `.tmp` files are not, `.gz` files are, and an uncompressed file is unless its
/// compressed twin exists.
fn in_use(l: &str, all: &[String]) -> bool {
    if l.ends_with(TMP_SUFFIX) {
        return false;
    }
    if l.ends_with(COMPRESS_SUFFIX) {
        return true;
    }
    !all.iter().any(|a| *a == format!("{l}{COMPRESS_SUFFIX}"))
}

/// Decides over the rotated files (`<log>.*`, names sorted by time through their stamp):
/// clean up, keep the newest `max_files − 2` (the live file and the one about to be rotated make
/// up the count), compress the kept uncompressed ones (Go `rotateLog`).
pub fn plan(rotated: &[String], max_files: usize) -> Plan {
    let mut p = Plan::default();
    let mut inuse: Vec<String> = Vec::new();
    for l in rotated {
        if in_use(l, rotated) {
            inuse.push(l.clone());
        } else {
            p.remove_unused.push(l.clone());
        }
    }
    inuse.sort();
    let keep = max_files.saturating_sub(2);
    let excess = inuse.len().saturating_sub(keep);
    p.remove_excess = inuse[..excess].to_vec();
    p.compress = inuse[excess..]
        .iter()
        .filter(|l| !l.ends_with(COMPRESS_SUFFIX))
        .cloned()
        .collect();
    p
}

/// Rotated files of `log` (`<log>.*`) in its directory.
fn rotated_files(log: &Path) -> io::Result<Vec<String>> {
    let dir = log.parent().unwrap_or(Path::new("/"));
    let prefix = format!(
        "{}.",
        log.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    );
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) {
            out.push(dir.join(name).to_string_lossy().into_owned());
        }
    }
    out.sort();
    Ok(out)
}

fn compress(log: &str) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = std::fs::metadata(log)?.permissions().mode();
    let tmp = format!("{log}{TMP_SUFFIX}");
    let result = (|| {
        let mut r = std::fs::File::open(log)?;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        let mut w = flate2::write::GzEncoder::new(f, flate2::Compression::default());
        io::copy(&mut r, &mut w)?;
        w.finish()?;
        std::fs::rename(&tmp, format!("{log}{COMPRESS_SUFFIX}"))?;
        std::fs::remove_file(log)
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// Why one container's log was not rotated.
#[derive(Debug, thiserror::Error)]
enum RotateError {
    /// The runtime no longer knows the container: it was removed after the list was taken
    /// (pods deleted in a burst). Nothing to rotate, and no fault.
    #[error("the container is gone")]
    ContainerGone,
    /// A CRI call failed otherwise.
    #[error("{op}: {source}")]
    Runtime {
        op: &'static str,
        source: crate::cri::CriError,
    },
    /// A file operation on the log failed.
    #[error("{op} {path}: {source}")]
    File {
        op: &'static str,
        path: String,
        source: io::Error,
    },
    /// The blocking task that cleans up and compresses the rotated files panicked or was
    /// cancelled.
    #[error("the rotation task of {path} failed: {source}")]
    Task {
        path: String,
        source: tokio::task::JoinError,
    },
}

impl RotateError {
    /// Maps a CRI error: NotFound means the container is gone.
    fn runtime(op: &'static str) -> impl FnOnce(crate::cri::CriError) -> Self {
        move |source| {
            if source.is_not_found() {
                RotateError::ContainerGone
            } else {
                RotateError::Runtime { op, source }
            }
        }
    }

    fn file(op: &'static str, path: impl std::fmt::Display) -> impl FnOnce(io::Error) -> Self {
        move |source| RotateError::File {
            op,
            path: path.to_string(),
            source,
        }
    }
}

/// The log path of container `id` (`ContainerStatus.log_path`, empty when it has none), asked of
/// the runtime once per container: it does not change while the container exists.
async fn log_path(
    cri: &CriClient,
    id: &str,
    known: &mut HashMap<String, String>,
) -> Result<String, RotateError> {
    if let Some(p) = known.get(id) {
        return Ok(p.clone());
    }
    let status = cri
        .container_status(id)
        .await
        .map_err(RotateError::runtime("container status"))?;
    known.insert(id.to_string(), status.log_path.clone());
    Ok(status.log_path)
}

/// Cleans up, compresses and rotates one container's log (at `log_path`) when it is too big.
async fn rotate_if_needed(
    cri: &CriClient,
    id: &str,
    log_path: &str,
    policy: Policy,
) -> Result<(), RotateError> {
    if log_path.is_empty() {
        return Ok(());
    }
    let log = PathBuf::from(log_path);
    let size = match tokio::fs::metadata(&log).await {
        Ok(m) => m.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // The live file is gone (a failed rotation): have the runtime create it again. Or
            // the container and its log were removed since the list (pods deleted in a burst):
            // the runtime says so.
            return cri
                .reopen_container_log(id)
                .await
                .map_err(RotateError::runtime("reopen container log"));
        }
        Err(e) => return Err(RotateError::file("stat", log.display())(e)),
    };
    if size < policy.max_size {
        return Ok(());
    }
    let log2 = log.clone();
    tokio::task::spawn_blocking(move || -> Result<(), RotateError> {
        let rotated = rotated_files(&log2).map_err(RotateError::file(
            "listing rotated files of",
            log2.display(),
        ))?;
        let p = plan(&rotated, policy.max_files);
        for l in p.remove_unused.iter().chain(&p.remove_excess) {
            std::fs::remove_file(l).map_err(RotateError::file("removing", l))?;
        }
        for l in &p.compress {
            compress(l).map_err(RotateError::file("compressing", l))?;
        }
        Ok(())
    })
    .await
    .map_err(|source| RotateError::Task {
        path: log.display().to_string(),
        source,
    })??;
    let stamp = chrono::Local::now().format(TIMESTAMP_FORMAT).to_string();
    let rotated = PathBuf::from(format!("{}.{stamp}", log.display()));
    tokio::fs::rename(&log, &rotated)
        .await
        .map_err(RotateError::file("rotating", log.display()))?;
    if let Err(e) = cri.reopen_container_log(id).await {
        if !e.is_not_found() {
            // the container still writes to the renamed file: give it its name back
            let _ = tokio::fs::rename(&rotated, &log).await;
        }
        return Err(RotateError::runtime("reopen container log")(e));
    }
    tracing::debug!(container = %id, log = %log.display(), size, "rotated container log");
    Ok(())
}

/// Checks every running container's log every [`MONITOR_PERIOD`] until `cancel` fires. The
/// container list may be the PLEG's last relist when it is younger than the period
/// ([`CriClient::list_containers_since`]); each container's log path is asked once.
pub async fn run(cri: CriClient, policy: Policy, cancel: CancellationToken) {
    if policy.max_size == 0 {
        return;
    }
    let mut tick = tokio::time::interval(MONITOR_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut log_paths: HashMap<String, String> = HashMap::new();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let since = tokio::time::Instant::now()
            .checked_sub(MONITOR_PERIOD)
            .unwrap_or_else(tokio::time::Instant::now);
        let containers = match cri.list_containers_since(since).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "log rotation: listing containers failed");
                continue;
            }
        };
        let running: Vec<&api::Container> = containers
            .iter()
            .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
            .collect();
        log_paths.retain(|id, _| running.iter().any(|c| c.id == *id));
        for c in running {
            if cancel.is_cancelled() {
                return;
            }
            let result = async {
                let path = log_path(&cri, &c.id, &mut log_paths).await?;
                rotate_if_needed(&cri, &c.id, &path, policy).await
            }
            .await;
            if let Err(e) = result {
                if matches!(e, RotateError::ContainerGone) {
                    tracing::debug!(container = %c.id, "log rotation: the container is gone");
                    continue;
                }
                if !cri.reachability().is_reachable() {
                    // The runtime is down (the list may predate the outage): the CRI client's
                    // reachability tracker says so once; the next tick tries again.
                    tracing::debug!(error = %e, "log rotation: the runtime does not answer");
                    break;
                }
                tracing::warn!(container = %c.id, error = %e, "failed to rotate container log");
            }
        }
    }
}

/// Parses `containerLogMaxSize` as the Go kubelet does (a resource quantity: `10Mi`, `500Ki`,
/// `1G`, plain bytes).
pub fn parse_max_size(s: &str) -> Result<u64, String> {
    match crate::quantity::parse_value(s.trim()) {
        Ok(v) if v >= 0 => Ok(v as u64),
        _ => Err(format!("invalid container log max size {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn a_container_removed_since_the_list_is_told_apart_from_a_failure() {
        let fake = crate::cri::fake::FakeRuntime::new();
        let cri = fake.client().await;
        let mut known = HashMap::new();
        assert!(matches!(
            log_path(&cri, "gone", &mut known).await,
            Err(RotateError::ContainerGone)
        ));
        assert!(known.is_empty());
        // its path was asked before, and the container and its log went since
        // (no file is made: the path only has to be missing)
        let log = std::env::temp_dir().join(format!("deckhand-gone-{}/0.log", std::process::id()));
        let policy = Policy {
            max_size: 10,
            max_files: 2,
        };
        assert!(matches!(
            rotate_if_needed(&cri, "gone", log.to_str().unwrap(), policy).await,
            Err(RotateError::ContainerGone)
        ));
    }

    #[test]
    fn keeps_the_newest_rotated_files_and_compresses_them() {
        let rotated = v(&[
            "0.log.20260101-000001.gz",
            "0.log.20260101-000002.gz",
            "0.log.20260101-000003.gz",
            "0.log.20260101-000004",
        ]);
        // max 5 files: live + about-to-rotate + 3 rotated
        let p = plan(&rotated, 5);
        assert_eq!(p.remove_excess, v(&["0.log.20260101-000001.gz"]));
        assert_eq!(p.compress, v(&["0.log.20260101-000004"]));
        assert!(p.remove_unused.is_empty());
    }

    #[test]
    fn leftovers_of_an_interrupted_compression_are_removed() {
        let rotated = v(&[
            "0.log.20260101-000001",
            "0.log.20260101-000001.gz",
            "0.log.20260101-000002.tmp",
        ]);
        let p = plan(&rotated, 5);
        assert_eq!(
            p.remove_unused,
            v(&["0.log.20260101-000001", "0.log.20260101-000002.tmp"])
        );
        assert!(p.compress.is_empty());
    }

    #[test]
    fn two_files_keep_no_rotated_file() {
        let p = plan(&v(&["0.log.20260101-000001"]), 2);
        assert_eq!(p.remove_excess, v(&["0.log.20260101-000001"]));
        assert!(p.compress.is_empty());
    }

    #[test]
    fn sizes_parse_like_quantities() {
        assert_eq!(parse_max_size("10Mi").unwrap(), 10 << 20);
        assert_eq!(parse_max_size("500Ki").unwrap(), 500 << 10);
        assert_eq!(parse_max_size("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_max_size("4096").unwrap(), 4096);
        assert!(parse_max_size("lots").is_err());
    }

    #[test]
    fn compression_replaces_the_file_with_gzip() {
        let dir = std::env::temp_dir().join(format!("deckhand-rot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("0.log.20260101-000001");
        std::fs::write(&f, b"hello\n").unwrap();
        compress(f.to_str().unwrap()).unwrap();
        assert!(!f.exists());
        let gz = std::fs::read(dir.join("0.log.20260101-000001.gz")).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        let files = rotated_files(&dir.join("0.log")).unwrap();
        assert_eq!(files.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
