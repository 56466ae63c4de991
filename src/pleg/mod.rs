//! The pod lifecycle event generator (k/k `pkg/kubelet/pleg`): tells pod workers when their
//! pod's containers or sandbox changed in the runtime.
//!
//! Two sources, as the Go kubelet's evented PLEG: a runtime event stream, and a periodic
//! relist of sandboxes and containers as the safety net for anything the stream missed (the
//! stream ends when the runtime restarts; it is re-subscribed with back-off, then relisted).
//! The event stream is containerd's native one (`/tasks/exit`, `/tasks/oom`; delivered within
//! milliseconds) or CRI's `GetContainerEvents` (any CRI runtime that serves it; what the Go
//! evented PLEG follows): [`source`] decides which (`--pleg-event-source`).
//! `/tasks/start` is not followed: every start is one the pod worker made itself and already
//! knows of, and a sync per start event doubled the runtime reads of a pod start.
//!
//! containerd's CRI state lags its exit event by 50–200 ms. The PLEG records each exit from the
//! event ([`exits`]) and wakes the pod worker at once, once the container's log file has stopped
//! growing (its last output is in the file); the worker sees the container exited through the
//! record until CRI confirms it.

pub mod exits;
pub mod source;
pub mod synced;

pub use exits::RecordedExits;
pub use source::EventSource;
pub use synced::SyncedStates;

use crate::cri::{labels, CriClient};
use containerd_client::events::{TaskExit, TaskOom};
use containerd_client::services::v1::events_client::EventsClient;
use containerd_client::services::v1::SubscribeRequest;
use futures::StreamExt;
use prost::Message;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// containerd namespace used by its CRI plugin.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The relist period while the runtime cannot be reached.
pub const UNREACHABLE_RELIST_PERIOD: Duration = Duration::from_millis(500);

use synced::Snapshot;

/// The PLEG. Sends the UID of each pod whose runtime state changed.
pub struct Pleg {
    cri: CriClient,
    containerd_socket: String,
    relist_period: Duration,
    tx: mpsc::Sender<String>,
    /// Runtime object id → its pod and log file, from the last relist.
    owners: Arc<Mutex<HashMap<String, Owner>>>,
    /// The kubelet's pod logs dir (`podLogsDir`), to name a listed container's log file
    /// ([`listed_log_path`]); None: ask the runtime for it on each exit.
    pod_logs_dir: Option<String>,
    /// Where the event stream and the per-event handlers run.
    tasks: crate::tasks::Tasks,
    /// Exits from the event stream that CRI may not show yet.
    exits: RecordedExits,
    /// What each pod worker last synced against ([`synced`]).
    synced: SyncedStates,
    /// Which event stream(s) to follow ([`source::choose_sources`]).
    event_source: EventSource,
    /// The runtime's name (CRI `Version`), for the choice.
    runtime_name: String,
    /// Asks the relist loop for a relist now (an event stream failed: events may be lost).
    relist_now: tokio::sync::Notify,
}

/// What the last relist tells of one runtime object (container or sandbox).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    /// The UID of the pod it belongs to.
    uid: String,
    /// A sandbox (its exit is the pause process's: no log file to wait for).
    sandbox: bool,
    /// A container's CRI log file ([`listed_log_path`]); None for a sandbox, or when it cannot be
    /// named from the list.
    log_path: Option<String>,
}

/// The CRI log file of a container as `ListContainers` shows it:
/// `<pod logs dir>/<ns>_<pod>_<uid>/<container>/<attempt>.log`, the sandbox's log directory the
/// kubelet made joined with the container's own log path (k/k `kuberuntime`
/// `BuildPodLogsDirectory`, `BuildContainerLogsDirectory`; what CRI `ContainerStatus.log_path`
/// answers for a container either kubelet created). None when a label or the metadata is missing.
fn listed_log_path(pod_logs_dir: &str, c: &crate::cri::api::Container) -> Option<String> {
    let label = |k: &str| c.labels.get(k).filter(|v| !v.is_empty());
    let meta = c.metadata.as_ref().filter(|m| !m.name.is_empty())?;
    let dir = crate::pod::spec::pod_log_dir_of(
        pod_logs_dir,
        label(labels::POD_NAMESPACE)?,
        label(labels::POD_NAME)?,
        label(labels::POD_UID)?,
    );
    Some(format!("{dir}/{}/{}.log", meta.name, meta.attempt))
}

/// Where the PLEG learns the pod and log file of a task that exited or ran out of memory: from
/// the last relist when it listed the task's container with its log file (and that file is
/// there: `log_exists`) or its sandbox, else from the runtime (CRI `ContainerStatus`, one call on
/// the exit's path). An OOM event and a sandbox's exit need no log file. Returns the pod UID and
/// log path when the relist tells enough.
fn known_from_relist(
    owner: Option<&Owner>,
    exited: bool,
    log_exists: impl Fn(&str) -> bool,
) -> Option<(String, Option<String>)> {
    let o = owner?;
    if !exited || o.sandbox {
        return Some((o.uid.clone(), None));
    }
    let path = o.log_path.as_deref().filter(|p| log_exists(p))?;
    Some((o.uid.clone(), Some(path.to_string())))
}

/// How containerd's native event stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NativeEnd {
    /// Shutdown.
    Cancelled,
    /// The socket does not serve containerd's events (`Unimplemented`), or is no usable
    /// endpoint: the stream will never be had.
    Unavailable,
}

/// One task event from containerd's stream that the PLEG acts on.
#[derive(Debug, Clone, PartialEq)]
enum TaskEvent {
    /// A container's own process exited (`/tasks/exit` with `id == container_id`).
    Exit {
        id: String,
        status: i32,
        exited_at_ns: i64,
    },
    /// A task ran out of memory.
    Oom { id: String },
}

/// Decodes one event envelope's payload by its topic; `None` for topics and payloads the PLEG
/// does not act on (an exec's exit has `id` = the exec id, not the container id).
fn decode_event(topic: &str, payload: &[u8]) -> Option<TaskEvent> {
    match topic {
        "/tasks/exit" => TaskExit::decode(payload)
            .ok()
            .filter(|e| e.id == e.container_id)
            .map(|e| TaskEvent::Exit {
                exited_at_ns: e
                    .exited_at
                    .map(|t| t.seconds.saturating_mul(1_000_000_000) + i64::from(t.nanos))
                    .unwrap_or(0),
                status: e.exit_status as i32,
                id: e.container_id,
            }),
        "/tasks/oom" => TaskOom::decode(payload)
            .ok()
            .map(|e| TaskEvent::Oom { id: e.container_id }),
        _ => None,
    }
}

/// How long the PLEG waits for an exited container's log file to stop growing (containerd copies
/// the last output from the container's pipe to the file as the process exits).
pub const LOG_QUIET_MAX_WAIT: Duration = Duration::from_millis(100);
/// The interval between the two sizes of the log file that must be equal.
pub const LOG_QUIET_INTERVAL: Duration = Duration::from_millis(4);

impl Pleg {
    /// A PLEG over `cri`, with containerd's event stream at `containerd_socket`.
    pub fn new(
        cri: CriClient,
        containerd_socket: String,
        relist_period: Duration,
        tx: mpsc::Sender<String>,
    ) -> Self {
        Self {
            cri,
            containerd_socket,
            relist_period,
            tx,
            owners: Arc::default(),
            pod_logs_dir: None,
            tasks: crate::tasks::Tasks::new(),
            exits: RecordedExits::default(),
            synced: SyncedStates::default(),
            event_source: EventSource::Auto,
            runtime_name: "containerd".into(),
            relist_now: tokio::sync::Notify::new(),
        }
    }

    /// Follows the event stream(s) [`source::choose_sources`] picks for `mode` on the runtime
    /// named `runtime_name` (CRI `Version`). Without it: `auto` on `containerd`.
    pub fn with_event_source(mut self, mode: EventSource, runtime_name: &str) -> Self {
        self.event_source = mode;
        self.runtime_name = runtime_name.to_string();
        self
    }

    /// Records the exits it sees in `exits` (shared with the pod workers, which read the
    /// containers through it).
    pub fn with_exits(mut self, exits: RecordedExits) -> Self {
        self.exits = exits;
        self
    }

    /// Shares the runtime state the pod workers record after a sync ([`synced`]): a relist
    /// wakes a worker only for a change it has not seen.
    pub fn with_synced_states(mut self, synced: SyncedStates) -> Self {
        self.synced = synced;
        self
    }

    /// Names listed containers' log files under `dir` (the kubelet's `podLogsDir`), so that an
    /// exit of a container the last relist saw waits for its log without asking the runtime
    /// where the log is.
    pub fn with_pod_logs_dir(mut self, dir: &str) -> Self {
        self.pod_logs_dir = Some(dir.to_string());
        self
    }

    /// Runs the event stream and the per-event handlers in `tasks` (the kubelet's set, so
    /// shutdown waits for them).
    pub fn with_tasks(mut self, tasks: crate::tasks::Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// Runs the event subscription(s) and the relist loop until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        use tracing::Instrument;
        let this = Arc::new(self);
        let sources = source::choose_sources(this.event_source, &this.runtime_name);
        tracing::info!(
            mode = ?this.event_source,
            runtime = %this.runtime_name,
            native = sources.native,
            cri = sources.cri,
            "pleg event sources"
        );
        if sources.native {
            let this2 = this.clone();
            let cancel = cancel.clone();
            this.tasks.spawn(
                "pleg event stream",
                async move {
                    let end = this2.clone().run_events(cancel.clone()).await;
                    if end == NativeEnd::Unavailable && sources.cri_after_native {
                        tracing::info!("containerd's event stream is unavailable; following CRI's container events");
                        this2
                            .run_cri_events(cancel)
                            .instrument(tracing::info_span!("pleg", source = "cri"))
                            .await
                    }
                }
                .instrument(tracing::info_span!("pleg", source = "containerd")),
            );
        }
        if sources.cri {
            let this2 = this.clone();
            let cancel = cancel.clone();
            this.tasks.spawn(
                "pleg event stream (CRI)",
                async move { this2.run_cri_events(cancel).await }
                    .instrument(tracing::info_span!("pleg", source = "cri")),
            );
        }
        this.run_relist(cancel).await;
    }

    /// Lists sandboxes and containers: their states for [`synced::relist_wakes`], and what the
    /// exit handler needs to know of each ([`Owner`], kept for the next event).
    async fn snapshot(&self) -> Option<Snapshot> {
        let (sandboxes, containers) = tokio::try_join!(
            self.cri.list_pod_sandboxes(&[]),
            self.cri.list_containers(&[])
        )
        .ok()?;
        let mut snap = Snapshot::new();
        let mut owners = self.owners.lock().unwrap();
        // an object listed before keeps its entry: nothing of it changes while it exists
        let mut before = std::mem::take(&mut *owners);
        for s in sandboxes {
            if let Some(uid) = s.labels.get(labels::POD_UID) {
                let owner = before.remove(&s.id).unwrap_or_else(|| Owner {
                    uid: uid.clone(),
                    sandbox: true,
                    log_path: None,
                });
                owners.insert(s.id.clone(), owner);
                snap.insert(s.id, (uid.clone(), synced::SANDBOX_STATE_BASE + s.state));
            }
        }
        for c in containers {
            if let Some(uid) = c.labels.get(labels::POD_UID) {
                let owner = before.remove(&c.id).unwrap_or_else(|| Owner {
                    uid: uid.clone(),
                    sandbox: false,
                    log_path: self
                        .pod_logs_dir
                        .as_deref()
                        .and_then(|dir| listed_log_path(dir, &c)),
                });
                owners.insert(c.id.clone(), owner);
                snap.insert(c.id, (uid.clone(), c.state));
            }
        }
        Some(snap)
    }

    async fn run_relist(&self, cancel: CancellationToken) {
        let mut prev: Snapshot = Snapshot::new();
        let mut last_start: Option<std::time::Instant> = None;
        loop {
            let started = std::time::Instant::now();
            let snap = self.snapshot().await;
            crate::server::metrics::observe_pleg_relist(
                started.elapsed(),
                last_start.map(|l| started.duration_since(l)),
            );
            last_start = Some(started);
            if let Some(snap) = snap {
                let changed = synced::relist_wakes(&prev, &snap, &self.synced);
                {
                    let held: std::collections::HashSet<&str> =
                        snap.values().map(|(uid, _)| uid.as_str()).collect();
                    self.synced.retain(|uid| held.contains(uid));
                }
                let exited = crate::cri::api::ContainerState::ContainerExited as i32;
                self.exits.prune(
                    |id| snap.contains_key(id),
                    |id| snap.get(id).is_some_and(|(_, s)| *s == exited),
                );
                for uid in changed {
                    let _ = self.tx.send(uid).await;
                }
                prev = snap;
            }
            // While the runtime cannot be reached, relist every half second: its first answer
            // wakes every pod worker (the CRI client's reachability tracker), so pods wait for
            // containerd's return, not for the period.
            let period = if self.cri.reachability().is_reachable() {
                self.relist_period
            } else {
                UNREACHABLE_RELIST_PERIOD.min(self.relist_period)
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
                _ = self.relist_now.notified() => {}
            }
        }
    }

    async fn run_events(self: Arc<Self>, cancel: CancellationToken) -> NativeEnd {
        let mut delay = Duration::from_millis(200);
        // Failures since the stream last delivered an event: the first one is logged as a
        // warning, the repeats of an outage at debug level (the CRI client's reachability
        // tracker says when containerd answers again).
        let mut failures = 0u32;
        let mut runtime_back = self.cri.reachability().subscribe_back();
        loop {
            let channel = match crate::cri::channel(&self.containerd_socket) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "containerd event stream unavailable");
                    return NativeEnd::Unavailable;
                }
            };
            let mut client = EventsClient::new(channel);
            let req = SubscribeRequest {
                filters: vec![
                    format!("topic==\"/tasks/exit\",namespace==\"{CRI_NAMESPACE}\""),
                    format!("topic==\"/tasks/oom\",namespace==\"{CRI_NAMESPACE}\""),
                ],
            };
            // containerd sends the response headers with the first event only, so this await
            // lasts until something happens; it is cancelled with the rest.
            let sub = tokio::select! {
                _ = cancel.cancelled() => return NativeEnd::Cancelled,
                r = client.subscribe(req) => r,
            };
            crate::server::metrics::observe_pleg_event_stream(sub.is_ok());
            match sub {
                Ok(resp) => {
                    delay = Duration::from_millis(200);
                    failures = 0;
                    let mut stream = resp.into_inner();
                    loop {
                        let item = tokio::select! {
                            _ = cancel.cancelled() => return NativeEnd::Cancelled,
                            i = stream.next() => i,
                        };
                        match item {
                            Some(Ok(env)) => {
                                failures = 0;
                                let Some(any) = env.event else { continue };
                                if let Some(ev) = decode_event(&env.topic, &any.value) {
                                    let this = self.clone();
                                    self.tasks.spawn("pleg event", async move {
                                        this.on_event(ev).await
                                    });
                                }
                            }
                            Some(Err(e)) => {
                                failures += 1;
                                log_stream_failure(failures, "containerd event stream", &e);
                                break;
                            }
                            None => break,
                        }
                    }
                }
                Err(e) if e.code() == tonic::Code::Unimplemented => {
                    // not containerd's socket (another CRI runtime)
                    tracing::info!(error = %e, "the runtime does not serve containerd's event stream");
                    return NativeEnd::Unavailable;
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %e, "subscribing to containerd events failed");
                    } else {
                        tracing::debug!(error = %e, "subscribing to containerd events failed");
                    }
                }
            }
            // Events may have been missed: the relist catches up; resubscribe after a pause, or
            // at once when CRI calls get answers again.
            tokio::select! {
                _ = cancel.cancelled() => return NativeEnd::Cancelled,
                _ = tokio::time::sleep(delay) => {
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
                _ = runtime_back.changed() => delay = Duration::from_millis(200),
            }
        }
    }

    /// Follows CRI's `GetContainerEvents` until `cancel` (k/k `pleg/evented.go`
    /// watchEventsChannel): each event goes through [`source::cri_event_action`]. When the
    /// stream fails or ends, it asks for a relist (Go: `e.Relist()`, events may be lost) and
    /// subscribes again after a back-off (200 ms doubling to 10 s, or at once when the runtime
    /// answers again). Go gives up after `eventedPlegMaxStreamRetries` and falls back to the
    /// generic PLEG; deckhand's relist runs all along, so it keeps retrying. A runtime that
    /// answers `Unimplemented` (containerd 1.6) never will: one info log, and the relist (and
    /// the native stream, if chosen) stand in.
    async fn run_cri_events(self: Arc<Self>, cancel: CancellationToken) {
        let mut delay = Duration::from_millis(200);
        let mut failures = 0u32;
        let mut runtime_back = self.cri.reachability().subscribe_back();
        loop {
            let sub = tokio::select! {
                _ = cancel.cancelled() => return,
                r = self.cri.get_container_events() => r,
            };
            crate::server::metrics::observe_pleg_event_stream(sub.is_ok());
            match sub {
                Ok(mut stream) => {
                    delay = Duration::from_millis(200);
                    failures = 0;
                    loop {
                        let item = tokio::select! {
                            _ = cancel.cancelled() => return,
                            i = stream.next() => i,
                        };
                        match item {
                            Some(Ok(ev)) => {
                                failures = 0;
                                self.on_cri_event(&ev).await;
                            }
                            Some(Err(s)) if s.code() == tonic::Code::Unimplemented => {
                                tracing::info!(error = %s, "the runtime does not serve CRI container events; relying on the relist");
                                return;
                            }
                            Some(Err(s)) => {
                                failures += 1;
                                log_stream_failure(failures, "CRI container event stream", &s);
                                break;
                            }
                            None => {
                                tracing::debug!("CRI container event stream ended; resubscribing");
                                break;
                            }
                        }
                    }
                }
                Err(e) if e.is_unimplemented() => {
                    tracing::info!(error = %e, "the runtime does not serve CRI container events (GetContainerEvents); relying on the relist");
                    return;
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(error = %e, "subscribing to CRI container events failed");
                    } else {
                        tracing::debug!(error = %e, "subscribing to CRI container events failed");
                    }
                }
            }
            self.relist_now.notify_one();
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
                _ = runtime_back.changed() => delay = Duration::from_millis(200),
            }
        }
    }

    /// Handles one CRI container event: wakes the pod's worker when
    /// [`source::cri_event_action`] says so. No exit is recorded: the runtime sends the event
    /// once its CRI state shows the change, so the worker reads it from CRI.
    async fn on_cri_event(&self, ev: &crate::cri::api::ContainerEventResponse) {
        let action = {
            let owners = self.owners.lock().unwrap();
            source::cri_event_action(ev, |id| owners.get(id).map(|o| o.uid.clone()))
        };
        tracing::debug!(
            container.id = %ev.container_id,
            event = ev.container_event_type,
            action = ?action,
            "CRI container event"
        );
        if let source::CriEventAction::Wake(uid) = action {
            let _ = self.tx.send(uid).await;
        }
    }

    /// Handles one task event: records an exit or OOM, then wakes the worker of the pod that owns
    /// the container or sandbox. On a container's exit it first waits (at most
    /// [`LOG_QUIET_MAX_WAIT`]) until the container's log file has stopped growing, so that the
    /// status written from the record never gets ahead of the container's last output
    /// (`kubectl logs` right after the phase changes shows it all).
    async fn on_event(&self, ev: TaskEvent) {
        let (id, exited) = match &ev {
            TaskEvent::Exit {
                id,
                status,
                exited_at_ns,
            } => {
                self.exits.record_exit(id, *status, *exited_at_ns);
                (id.clone(), true)
            }
            TaskEvent::Oom { id } => {
                self.exits.record_oom(id);
                (id.clone(), false)
            }
        };
        let owner = self.owners.lock().unwrap().get(&id).cloned();
        let known = known_from_relist(owner.as_ref(), exited, |p| std::path::Path::new(p).exists());
        let (uid, log_path) = match known {
            Some(k) => k,
            None => {
                let mut uid = owner.map(|o| o.uid);
                let mut log_path = None;
                match self.cri.container_status(&id).await {
                    Ok(st) => {
                        uid = uid.or_else(|| st.labels.get(labels::POD_UID).cloned());
                        log_path = Some(st.log_path).filter(|p| !p.is_empty());
                    }
                    Err(_) if uid.is_none() => {
                        // not a container: a sandbox's pause process
                        if let Ok(st) = self.cri.pod_sandbox_status(&id).await {
                            uid = st.labels.get(labels::POD_UID).cloned();
                        }
                    }
                    Err(_) => {}
                }
                let Some(uid) = uid else { return };
                (uid, log_path)
            }
        };
        if let Some(path) = log_path {
            wait_log_quiet(std::path::Path::new(&path)).await;
            // a container's SIGKILL exit is reported once its OOM event has come or cannot
            // come any more (exits::OOM_GRACE); the OOM event, if it comes, wakes the worker too
            while let Some((rec, age)) = self.exits.get_with_age(&id) {
                if !exits::awaiting_oom(&rec, age) {
                    break;
                }
                tokio::time::sleep(exits::OOM_GRACE.saturating_sub(age)).await;
            }
        }
        let _ = self.tx.send(uid).await;
    }
}

/// Waits until the log file at `path` has the same size twice [`LOG_QUIET_INTERVAL`] apart, or
/// [`LOG_QUIET_MAX_WAIT`] has passed (a missing file counts as quiet).
async fn wait_log_quiet(path: &std::path::Path) {
    let size = || std::fs::metadata(path).map(|m| m.len()).ok();
    let deadline = tokio::time::Instant::now() + LOG_QUIET_MAX_WAIT;
    let mut last = size();
    while last.is_some() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(LOG_QUIET_INTERVAL).await;
        let now = size();
        if now == last {
            return;
        }
        last = now;
    }
}

/// Logs an event stream's failure before it is resubscribed: at warn the first time in a row
/// (`failures` == 1), then at debug.
fn log_stream_failure(failures: u32, stream: &str, error: &dyn std::fmt::Display) {
    if failures == 1 {
        tracing::warn!(error = %error, "{stream} failed; resubscribing");
    } else {
        tracing::debug!(error = %error, "{stream} failed; resubscribing");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope<M: Message>(m: M) -> Vec<u8> {
        m.encode_to_vec()
    }

    #[test]
    fn events_decode_to_what_the_pleg_acts_on() {
        let exit = envelope(TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            pid: 7,
            exit_status: 137,
            exited_at: Some(prost_types::Timestamp {
                seconds: 2,
                nanos: 5,
            }),
        });
        let exec_exit = envelope(TaskExit {
            container_id: "c1".into(),
            id: "exec-1".into(),
            exit_status: 1,
            ..Default::default()
        });
        let oom = envelope(TaskOom {
            container_id: "c3".into(),
        });
        let cases: Vec<(&str, &str, Vec<u8>, Option<TaskEvent>)> = vec![
            (
                "a container's exit carries its status and time in nanoseconds",
                "/tasks/exit",
                exit,
                Some(TaskEvent::Exit {
                    id: "c1".into(),
                    status: 137,
                    exited_at_ns: 2_000_000_005,
                }),
            ),
            (
                "an exec's exit is not the container's",
                "/tasks/exit",
                exec_exit,
                None,
            ),
            ("starts are the worker's own", "/tasks/start", vec![], None),
            (
                "oom",
                "/tasks/oom",
                oom,
                Some(TaskEvent::Oom { id: "c3".into() }),
            ),
            ("other topics", "/tasks/delete", vec![], None),
        ];
        for (name, topic, payload, want) in cases {
            assert_eq!(decode_event(topic, &payload), want, "{name}");
        }
    }

    #[test]
    fn a_listed_container_s_log_path_is_the_one_the_runtime_was_given() {
        use crate::cri::api;
        use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("shop".into());
        p.metadata.uid = Some("uid-1".into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        let inputs = crate::pod::spec::ContainerRuntimeInputs {
            attempt: 3,
            ..Default::default()
        };
        let cfg = crate::pod::spec::container_config(&p, "app", &inputs).unwrap();
        let parent = crate::cm::CgroupLayout::default().pod_parent(&p).unwrap();
        let userns = crate::userns::MappingsFile::single(65536, 65536).to_cri();
        let sb = crate::pod::spec::sandbox_config(&p, 0, "/var/log/pods/", None, parent, userns);
        // what CRI ContainerStatus answers: the sandbox's log directory joined with the
        // container's log path
        let runtime_says = format!("{}/{}", sb.log_directory, cfg.log_path);
        let listed = api::Container {
            id: "c1".into(),
            metadata: cfg.metadata.clone(),
            labels: cfg.labels.clone(),
            ..Default::default()
        };
        assert_eq!(runtime_says, "/var/log/pods/shop_web_uid-1/app/3.log");
        assert_eq!(
            listed_log_path("/var/log/pods/", &listed).as_deref(),
            Some(runtime_says.as_str())
        );
        assert_eq!(
            listed_log_path("/var/log/pods", &listed).as_deref(),
            Some(runtime_says.as_str())
        );

        // a container another client made, without the kubelet's labels or metadata
        let mut no_uid = listed.clone();
        no_uid.labels.remove(labels::POD_UID);
        let mut no_ns = listed.clone();
        no_ns
            .labels
            .insert(labels::POD_NAMESPACE.into(), String::new());
        let no_meta = api::Container {
            metadata: None,
            ..listed.clone()
        };
        for c in [no_uid, no_ns, no_meta] {
            assert_eq!(listed_log_path("/var/log/pods", &c), None, "{c:?}");
        }
    }

    #[test]
    fn an_exit_asks_the_runtime_only_when_the_relist_cannot_tell_pod_and_log() {
        let container = |log: Option<&str>| Owner {
            uid: "u1".into(),
            sandbox: false,
            log_path: log.map(str::to_string),
        };
        let sandbox = Owner {
            uid: "u1".into(),
            sandbox: true,
            log_path: None,
        };
        let with_log = container(Some("/logs/a/0.log"));
        let without_log = container(None);
        let log_gone = container(Some("/logs/gone/0.log"));
        let exists = |p: &str| p == "/logs/a/0.log";
        let known = |uid: &str, log: Option<&str>| Some((uid.to_string(), log.map(str::to_string)));
        // (what, owner from the relist, an exit (else an OOM), what the relist tells)
        let cases = [
            (
                "a listed container's exit",
                Some(&with_log),
                true,
                known("u1", Some("/logs/a/0.log")),
            ),
            (
                "its OOM needs no log",
                Some(&with_log),
                false,
                known("u1", None),
            ),
            (
                "a sandbox's exit has no log",
                Some(&sandbox),
                true,
                known("u1", None),
            ),
            (
                "a log not named from the list: ask",
                Some(&without_log),
                true,
                None,
            ),
            ("a log file not there: ask", Some(&log_gone), true, None),
            ("a container younger than the relist: ask", None, true, None),
            ("an OOM of an unknown task: ask", None, false, None),
        ];
        for (what, owner, exited, want) in cases {
            assert_eq!(known_from_relist(owner, exited, exists), want, "{what}");
        }
    }

    #[tokio::test]
    async fn a_log_that_stops_growing_is_quiet_and_a_missing_one_is_too() {
        let dir = std::env::temp_dir().join(format!("deckhand-pleg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("0.log");
        std::fs::write(&path, b"x\n").unwrap();
        let t0 = tokio::time::Instant::now();
        wait_log_quiet(&path).await;
        assert!(
            t0.elapsed() < LOG_QUIET_MAX_WAIT,
            "a still file is quiet after one interval"
        );
        let t0 = tokio::time::Instant::now();
        wait_log_quiet(&dir.join("missing.log")).await;
        assert!(t0.elapsed() < LOG_QUIET_INTERVAL);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
