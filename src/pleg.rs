//! The pod lifecycle event generator (k/k `pkg/kubelet/pleg`): tells pod workers when their
//! pod's containers or sandbox changed in the runtime.
//!
//! Two sources, as the Go kubelet's evented PLEG: containerd's native event stream
//! (`/tasks/exit`, `/tasks/start`, `/tasks/oom`; delivered within milliseconds), and a periodic
//! relist of sandboxes and containers as the safety net for anything the stream missed (the
//! stream ends when containerd restarts; it is re-subscribed with back-off, then relisted).
//!
//! containerd's CRI state lags its exit event by 50–200 ms, so on an exit the PLEG polls
//! `ContainerStatus` until CRI shows the container exited before waking the worker.

use crate::cri::{api, labels, CriClient};
use containerd_client::events::{TaskExit, TaskOom, TaskStart};
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

/// What the relist saw for one runtime object: pod UID and a state code.
type Snapshot = HashMap<String, (String, i32)>;

/// The PLEG. Sends the UID of each pod whose runtime state changed.
pub struct Pleg {
    cri: CriClient,
    containerd_socket: String,
    relist_period: Duration,
    tx: mpsc::Sender<String>,
    /// Runtime object id → pod UID, from the last relist.
    owners: Arc<Mutex<HashMap<String, String>>>,
    /// Where the event stream and the per-event handlers run.
    tasks: crate::tasks::Tasks,
}

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
            tasks: crate::tasks::Tasks::new(),
        }
    }

    /// Runs the event stream and the per-event handlers in `tasks` (the kubelet's set, so
    /// shutdown waits for them).
    pub fn with_tasks(mut self, tasks: crate::tasks::Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// Runs the event subscription and the relist loop until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let this = Arc::new(self);
        {
            let this2 = this.clone();
            let cancel = cancel.clone();
            this.tasks.spawn("pleg event stream", async move {
                this2.run_events(cancel).await
            });
        }
        this.run_relist(cancel).await;
    }

    async fn snapshot(&self) -> Option<Snapshot> {
        let (sandboxes, containers) = tokio::try_join!(
            self.cri.list_pod_sandboxes(&[]),
            self.cri.list_containers(&[])
        )
        .ok()?;
        let mut snap = Snapshot::new();
        for s in sandboxes {
            if let Some(uid) = s.labels.get(labels::POD_UID) {
                snap.insert(s.id, (uid.clone(), 100 + s.state));
            }
        }
        for c in containers {
            if let Some(uid) = c.labels.get(labels::POD_UID) {
                snap.insert(c.id, (uid.clone(), c.state));
            }
        }
        Some(snap)
    }

    async fn run_relist(&self, cancel: CancellationToken) {
        let mut prev: Snapshot = Snapshot::new();
        loop {
            if let Some(snap) = self.snapshot().await {
                let mut changed: Vec<String> = vec![];
                for (id, (uid, state)) in &snap {
                    if prev.get(id).map(|(_, s)| s) != Some(state) {
                        changed.push(uid.clone());
                    }
                }
                for (id, (uid, _)) in &prev {
                    if !snap.contains_key(id) {
                        changed.push(uid.clone());
                    }
                }
                changed.sort();
                changed.dedup();
                *self.owners.lock().unwrap() = snap
                    .iter()
                    .map(|(id, (uid, _))| (id.clone(), uid.clone()))
                    .collect();
                for uid in changed {
                    let _ = self.tx.send(uid).await;
                }
                prev = snap;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(self.relist_period) => {}
            }
        }
    }

    async fn run_events(self: Arc<Self>, cancel: CancellationToken) {
        let mut delay = Duration::from_millis(200);
        loop {
            let channel = match crate::cri::channel(&self.containerd_socket) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "containerd event stream unavailable");
                    return;
                }
            };
            let mut client = EventsClient::new(channel);
            let req = SubscribeRequest {
                filters: vec![
                    format!("topic==\"/tasks/exit\",namespace==\"{CRI_NAMESPACE}\""),
                    format!("topic==\"/tasks/start\",namespace==\"{CRI_NAMESPACE}\""),
                    format!("topic==\"/tasks/oom\",namespace==\"{CRI_NAMESPACE}\""),
                ],
            };
            // containerd sends the response headers with the first event only, so this await
            // lasts until something happens; it is cancelled with the rest.
            let sub = tokio::select! {
                _ = cancel.cancelled() => return,
                r = client.subscribe(req) => r,
            };
            match sub {
                Ok(resp) => {
                    delay = Duration::from_millis(200);
                    let mut stream = resp.into_inner();
                    loop {
                        let item = tokio::select! {
                            _ = cancel.cancelled() => return,
                            i = stream.next() => i,
                        };
                        match item {
                            Some(Ok(env)) => {
                                let Some(any) = env.event else { continue };
                                let id = match env.topic.as_str() {
                                    "/tasks/exit" => TaskExit::decode(any.value.as_slice())
                                        .ok()
                                        .filter(|e| e.id == e.container_id)
                                        .map(|e| (e.container_id, true)),
                                    "/tasks/start" => TaskStart::decode(any.value.as_slice())
                                        .ok()
                                        .map(|e| (e.container_id, false)),
                                    "/tasks/oom" => TaskOom::decode(any.value.as_slice())
                                        .ok()
                                        .map(|e| (e.container_id, false)),
                                    _ => None,
                                };
                                if let Some((id, exited)) = id {
                                    let this = self.clone();
                                    self.tasks.spawn("pleg event", async move {
                                        this.on_event(id, exited).await
                                    });
                                }
                            }
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "containerd event stream failed; resubscribing");
                                break;
                            }
                            None => break,
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "subscribing to containerd events failed"),
            }
            // Events may have been missed: the relist catches up; resubscribe after a pause.
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }

    /// Handles one task event for runtime object `id` (a container or a sandbox's pause).
    async fn on_event(&self, id: String, exited: bool) {
        let known = self.owners.lock().unwrap().get(&id).cloned();
        let mut uid = known;
        let mut is_container = true;
        if uid.is_none() {
            match self.cri.container_status(&id).await {
                Ok(st) => uid = st.labels.get(labels::POD_UID).cloned(),
                Err(_) => {
                    is_container = false;
                    if let Ok(st) = self.cri.pod_sandbox_status(&id).await {
                        uid = st.labels.get(labels::POD_UID).cloned();
                    }
                }
            }
        }
        let Some(uid) = uid else { return };
        if exited && is_container {
            // Wait (bounded) until CRI reflects the exit, so the worker reads the final state.
            for _ in 0..40 {
                match self.cri.container_status(&id).await {
                    Ok(st) if st.state == api::ContainerState::ContainerExited as i32 => break,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(25)).await,
                    Err(_) => break,
                }
            }
        }
        let _ = self.tx.send(uid).await;
    }
}
