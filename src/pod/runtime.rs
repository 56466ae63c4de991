//! A pod as the runtime holds it: its sandboxes and containers, read back from CRI by the pod UID
//! label. This is the Go kubelet's `kubecontainer.PodStatus`; it is rebuilt from the runtime on
//! every sync, so nothing is lost when deckhand restarts (restart counts come from the
//! container metadata `attempt`, as the Go kubelet reads them from annotations).

use crate::cri::{api, labels, CriClient, CriError};
use crate::pleg::RecordedExits;

/// A container's state as CRI reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    /// Created, not started.
    Created,
    /// Running.
    Running,
    /// Exited (exit code and reason set).
    Exited,
    /// The runtime does not know.
    Unknown,
}

impl From<i32> for ContainerState {
    fn from(v: i32) -> Self {
        match api::ContainerState::try_from(v) {
            Ok(api::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(api::ContainerState::ContainerRunning) => ContainerState::Running,
            Ok(api::ContainerState::ContainerExited) => ContainerState::Exited,
            _ => ContainerState::Unknown,
        }
    }
}

/// One pod sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxStatus {
    /// Runtime id (64 hex).
    pub id: String,
    /// Sandbox attempt (0 for the first sandbox of the pod).
    pub attempt: u32,
    /// SANDBOX_READY.
    pub ready: bool,
    /// Pod IP from the CNI result, if any.
    pub ip: Option<String>,
    /// Additional pod IPs (other address families).
    pub additional_ips: Vec<String>,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
}

/// One container instance (one attempt of one spec container).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    /// Runtime id (64 hex).
    pub id: String,
    /// Sandbox it runs in.
    pub sandbox_id: String,
    /// Name in the pod spec.
    pub name: String,
    /// Attempt = restart count this instance was created with.
    pub attempt: u32,
    /// State.
    pub state: ContainerState,
    /// Nanoseconds since the epoch (0 = unset).
    pub created_at: i64,
    /// Nanoseconds since the epoch (0 = unset).
    pub started_at: i64,
    /// Nanoseconds since the epoch (0 = unset).
    pub finished_at: i64,
    /// Exit code (meaningful when exited).
    pub exit_code: i32,
    /// Runtime's reason (`Completed`, `Error`, `OOMKilled`, `StartError`).
    pub reason: String,
    /// Runtime's message.
    pub message: String,
    /// Image as the runtime reports it (`docker.io/library/busybox:latest`).
    pub image: String,
    /// Image reference as the runtime reports it (`docker.io/library/busybox@sha256:...`).
    pub image_ref: String,
    /// Spec hash annotation ([`labels::CONTAINER_HASH`]).
    pub hash: String,
}

/// All that the runtime holds for one pod, newest first in each list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodRuntimeStatus {
    /// Sandboxes, newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// Containers, newest first (by creation time).
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntimeStatus {
    /// The newest sandbox.
    pub fn latest_sandbox(&self) -> Option<&SandboxStatus> {
        self.sandboxes.first()
    }

    /// The newest instance of container `name`.
    pub fn latest(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The instance before the newest one of container `name` (its `lastState`).
    pub fn previous(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }

    /// Containers currently running.
    pub fn running(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    /// Reads the pod's sandboxes and containers from the runtime by the pod UID label. A
    /// container that CRI still shows running but whose exit containerd's event stream already
    /// reported (`exits`, recorded by the PLEG) is read as exited, as CRI will report it
    /// ([`crate::pleg::exits::overlay`]); once CRI shows the exit its record is forgotten.
    ///
    /// The status reads of the listed objects (PodSandboxStatus of each ready sandbox,
    /// ContainerStatus of each container) go out together, not one after another as in the Go
    /// kubelet's `GetPodStatus`: a sync, and the status after an exit, waits for one round trip
    /// to the runtime after the lists rather than one per object.
    ///
    /// Errors: any CRI error except NOT_FOUND on an object that vanished between list and status
    /// (the first in list order, sandboxes first).
    pub async fn observe(
        cri: &CriClient,
        exits: &RecordedExits,
        pod_uid: &str,
    ) -> Result<Self, CriError> {
        let sel = [(labels::POD_UID, pod_uid)];
        let (sandboxes, containers) =
            tokio::try_join!(cri.list_pod_sandboxes(&sel), cri.list_containers(&sel))?;
        let sandbox_reads = futures::future::join_all(sandboxes.iter().map(|s| async move {
            // a sandbox that is not ready has no network to read
            let ready = s.state == api::PodSandboxState::SandboxReady as i32;
            if ready {
                Some(cri.pod_sandbox_status(&s.id).await)
            } else {
                None
            }
        }));
        let container_reads =
            futures::future::join_all(containers.iter().map(|c| cri.container_status(&c.id)));
        let (sandbox_reads, container_reads) = tokio::join!(sandbox_reads, container_reads);
        let mut out = PodRuntimeStatus::default();
        for (s, read) in sandboxes.into_iter().zip(sandbox_reads) {
            let ready = read.is_some();
            let (ip, additional_ips) = match read {
                Some(Ok(st)) => {
                    let net = st.network.unwrap_or_default();
                    (
                        (!net.ip.is_empty()).then_some(net.ip),
                        net.additional_ips.into_iter().map(|i| i.ip).collect(),
                    )
                }
                Some(Err(e)) if e.is_not_found() => continue,
                Some(Err(e)) => return Err(e),
                None => (None, vec![]),
            };
            out.sandboxes.push(SandboxStatus {
                attempt: s.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                id: s.id,
                ready,
                ip,
                additional_ips,
                created_at: s.created_at,
            });
        }
        for (c, read) in containers.into_iter().zip(container_reads) {
            let mut st = match read {
                Ok(st) => st,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            if let Some((rec, age)) = exits.get_with_age(&c.id) {
                if st.state == api::ContainerState::ContainerExited as i32 {
                    exits.forget(&c.id);
                } else if !crate::pleg::exits::awaiting_oom(&rec, age) {
                    crate::pleg::exits::overlay(&mut st, &rec);
                }
            }
            let message = if ContainerState::from(st.state) == ContainerState::Exited {
                termination_message(&c.annotations, &st).await
            } else {
                st.message.clone()
            };
            out.containers.push(ContainerStatus {
                id: c.id.clone(),
                sandbox_id: c.pod_sandbox_id.clone(),
                name: c
                    .labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .unwrap_or_default(),
                attempt: st.metadata.as_ref().map(|m| m.attempt).unwrap_or(0),
                state: ContainerState::from(st.state),
                created_at: st.created_at,
                started_at: st.started_at,
                finished_at: st.finished_at,
                exit_code: st.exit_code,
                reason: st.reason,
                message,
                image: st.image.map(|i| i.image).unwrap_or_default(),
                image_ref: st.image_ref,
                hash: c
                    .annotations
                    .get(labels::CONTAINER_HASH)
                    .cloned()
                    .unwrap_or_default(),
            });
        }
        out.sort();
        Ok(out)
    }

    /// Orders sandboxes and containers newest first (creation time, then attempt).
    pub fn sort(&mut self) {
        self.sandboxes
            .sort_by(|a, b| (b.created_at, b.attempt).cmp(&(a.created_at, a.attempt)));
        self.containers
            .sort_by(|a, b| (b.created_at, b.attempt).cmp(&(a.created_at, a.attempt)));
    }
}

/// Most bytes read from a termination message file (k/k `kubecontainer.MaxContainerTerminationMessageLength`).
pub const MAX_TERMINATION_MESSAGE_BYTES: u64 = 4096;
/// Lines taken from the log for `FallbackToLogsOnError` (k/k `kubecontainer.MaxContainerTerminationMessageLogLines`).
pub const MAX_TERMINATION_MESSAGE_LOG_LINES: usize = 80;
/// Bytes taken from the log for `FallbackToLogsOnError` (`MaxContainerTerminationMessageLogLength`).
pub const MAX_TERMINATION_MESSAGE_LOG_BYTES: usize = 2048;

/// The terminated message of an exited container: the runtime's message, plus the contents of
/// the host file mounted at `terminationMessagePath` (at most 4096 bytes), or with policy
/// `FallbackToLogsOnError` and a non-zero exit and an empty file, the tail of the container's
/// log (k/k `kuberuntime_container.go` getTerminationMessage / readLastStringFromContainerLogs).
async fn termination_message(
    annotations: &std::collections::HashMap<String, String>,
    st: &api::ContainerStatus,
) -> String {
    let path = annotations
        .get(labels::CONTAINER_TERMINATION_MESSAGE_PATH)
        .cloned()
        .unwrap_or_default();
    let policy = annotations
        .get(labels::CONTAINER_TERMINATION_MESSAGE_POLICY)
        .cloned()
        .unwrap_or_default();
    let mut msg = String::new();
    if !path.is_empty() {
        if let Some(m) = st.mounts.iter().find(|m| m.container_path == path) {
            let host = m.host_path.clone();
            msg = tokio::task::spawn_blocking(move || {
                use std::io::Read;
                let mut buf = Vec::new();
                if let Ok(f) = std::fs::File::open(&host) {
                    let _ = f.take(MAX_TERMINATION_MESSAGE_BYTES).read_to_end(&mut buf);
                }
                String::from_utf8_lossy(&buf).to_string()
            })
            .await
            .unwrap_or_default();
        }
    }
    if msg.is_empty()
        && policy == "FallbackToLogsOnError"
        && st.exit_code != 0
        && st.reason != "ContainerCannotRun"
        && !st.log_path.is_empty()
    {
        msg = tail_log(&st.log_path).await;
    }
    let mut out = st.message.clone();
    if !msg.is_empty() {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&msg);
    }
    out
}

/// The fallback termination message read from a CRI log file (k/k `readLastStringFromContainerLogs`).
async fn tail_log(path: &str) -> String {
    let Ok(data) = tokio::fs::read(path).await else {
        return String::new();
    };
    let start = data.len().saturating_sub(64 * 1024);
    fallback_termination_message(&data[start..])
}

/// The tail of a CRI log as the Go kubelet builds the `FallbackToLogsOnError` message: the last
/// [`MAX_TERMINATION_MESSAGE_LOG_LINES`] records, each record's content followed by a newline
/// unless it is a partial (`P`) record, kept to the last [`MAX_TERMINATION_MESSAGE_LOG_BYTES`]
/// bytes (Go reads `TailLines: 80` into a 2048-byte ring buffer). `echo -n DONE` gives `DONE`.
pub fn fallback_termination_message(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    let records: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    let keep = &records[records
        .len()
        .saturating_sub(MAX_TERMINATION_MESSAGE_LOG_LINES)..];
    let mut s = String::new();
    for l in keep {
        let mut parts = l.splitn(4, ' ');
        let (_ts, _stream, tag, content) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next().unwrap_or(""),
        );
        s.push_str(content);
        if tag != Some("P") {
            s.push('\n');
        }
    }
    if s.len() > MAX_TERMINATION_MESSAGE_LOG_BYTES {
        let mut cut = s.len() - MAX_TERMINATION_MESSAGE_LOG_BYTES;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s = s[cut..].to_string();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_message_follows_the_cri_record_tags() {
        let ts = "2026-12-01T00:00:00.000000000Z";
        let cases: &[(&str, String, &str)] = &[
            (
                "echo -n: one partial record",
                format!("{ts} stdout P DONE\n"),
                "DONE",
            ),
            (
                "full record keeps its newline",
                format!("{ts} stdout F DONE\n"),
                "DONE\n",
            ),
            (
                "partial then full join",
                format!("{ts} stdout P ab\n{ts} stdout F cd\n"),
                "abcd\n",
            ),
            (
                "streams interleave in file order",
                format!("{ts} stdout F out\n{ts} stderr F err\n"),
                "out\nerr\n",
            ),
            ("empty log", String::new(), ""),
        ];
        for (name, log, want) in cases {
            assert_eq!(
                fallback_termination_message(log.as_bytes()),
                *want,
                "{name}"
            );
        }
    }

    #[test]
    fn fallback_message_keeps_the_last_80_records_and_2048_bytes() {
        let ts = "2026-12-01T00:00:00.000000000Z";
        let log: String = (0..100).map(|i| format!("{ts} stdout F {i}\n")).collect();
        let m = fallback_termination_message(log.as_bytes());
        assert!(m.starts_with("20\n21\n"), "{m}");
        assert!(m.ends_with("99\n"));
        let long = format!("{ts} stdout F {}\n", "x".repeat(3000));
        let m = fallback_termination_message(long.as_bytes());
        assert_eq!(m.len(), MAX_TERMINATION_MESSAGE_LOG_BYTES);
        assert!(m.ends_with("x\n"));
    }
}
