//! The harness of the component tests: pod workers over the fake runtime and an in-memory
//! API server, and the helpers the scenarios share.

pub(crate) use deckhand::cri::fake::FakeRuntime;
use deckhand::pod::workers::{PodWorkers, SyncContext};
pub(crate) use deckhand::source::PodEvent;
use deckhand::status::StatusManager;
use deckhand::time::TokioClock;
pub(crate) use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
pub(crate) use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub(crate) const NODE: &str = "node-1";

/// What the in-memory API server was asked to do.
#[derive(Default)]
pub(crate) struct ApiRecord {
    /// The newest status of each pod (by name), merged from the status patches.
    pub(crate) statuses: BTreeMap<String, Value>,
    /// Every status patch's result (pod name, merged status), in order.
    pub(crate) history: Vec<(String, Value)>,
    /// Pods deleted (by name), in order.
    pub(crate) deleted: Vec<String>,
    /// Event reasons, in order.
    pub(crate) events: Vec<String>,
    /// ConfigMaps served by name (namespace ignored).
    pub(crate) configmaps: BTreeMap<String, Value>,
    /// RuntimeClasses served by name.
    pub(crate) runtime_classes: BTreeMap<String, Value>,
    /// The API server is away: every request fails to connect.
    pub(crate) down: bool,
}

/// RFC 7386 merge of `patch` into `target`.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

pub(crate) fn fake_api() -> (kube::Client, Arc<Mutex<ApiRecord>>) {
    let record = Arc::new(Mutex::new(ApiRecord::default()));
    let rec = record.clone();
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let rec = rec.clone();
        async move {
            use http_body_util::BodyExt;
            if rec.lock().unwrap().down {
                return Err::<http::Response<http_body_util::Full<bytes::Bytes>>, tower::BoxError>(
                    "connection refused (the fake API server is down)".into(),
                );
            }
            let method = req.method().clone();
            let path = req.uri().path().to_string();
            let body = req.into_body().collect().await?.to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            // api/v1/namespaces/<ns>/<resource>/<name>[/<sub>]
            let (ns, resource, name, sub) = (
                parts.get(3).copied().unwrap_or(""),
                parts.get(4).copied().unwrap_or(""),
                parts.get(5).copied().unwrap_or(""),
                parts.get(6).copied().unwrap_or(""),
            );
            let not_found = |what: &str| {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": format!("{what} not found"), "reason": "NotFound", "code": 404})
            };
            // cluster-scoped: apis/node.k8s.io/v1/runtimeclasses/<name>
            let runtime_class = path
                .strip_prefix("/apis/node.k8s.io/v1/runtimeclasses/")
                .map(|rc| match rec.lock().unwrap().runtime_classes.get(rc) {
                    Some(v) if method == "GET" => (200, v.clone()),
                    _ => (
                        404,
                        not_found(&format!("runtimeclasses.node.k8s.io {rc:?}")),
                    ),
                });
            let pod = |status: Value| {
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "namespace": ns}, "status": status})
            };
            let (code, out) = if let Some(answer) = runtime_class {
                answer
            } else {
                match (method.as_str(), resource, sub) {
                    ("PATCH", "pods", "status") => {
                        let mut r = rec.lock().unwrap();
                        let st = r.statuses.entry(name.to_string()).or_insert(json!({}));
                        merge(st, &body["status"]);
                        let st = st.clone();
                        r.history.push((name.to_string(), st.clone()));
                        (200, pod(st))
                    }
                    ("DELETE", "pods", "") => {
                        rec.lock().unwrap().deleted.push(name.to_string());
                        (200, pod(Value::Null))
                    }
                    ("POST", "events", _) => {
                        let reason = body["reason"].as_str().unwrap_or("").to_string();
                        rec.lock().unwrap().events.push(reason);
                        (201, body)
                    }
                    ("GET", "configmaps", "") => match rec.lock().unwrap().configmaps.get(name) {
                        Some(cm) => (200, cm.clone()),
                        None => (404, not_found(&format!("configmaps {name:?}"))),
                    },
                    ("PATCH", "events", _) => (
                        200,
                        json!({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": ns}, "involvedObject": {}}),
                    ),
                    _ => (404, not_found(&path)),
                }
            };
            let resp = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    serde_json::to_vec(&out).unwrap(),
                )))
                .unwrap();
            Ok::<_, tower::BoxError>(resp)
        }
    });
    (kube::Client::new(svc, "default"), record)
}

/// A fake runtime whose clock follows tokio's (paused) time.
pub(crate) fn fake_runtime() -> FakeRuntime {
    FakeRuntime::with_clock(Arc::new(TokioClock::new()))
}

/// The Node the workers admit pods against: 2 cores, 4 GiB, 110 pods, no taints.
pub(crate) fn node_object() -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(json!({
        "metadata": {"name": NODE, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": NODE}},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "10Gi"}},
    }))
    .unwrap()
}

/// A running set of pod workers over the fake runtime and the in-memory API server.
pub(crate) struct Harness {
    pub(crate) runtime: FakeRuntime,
    pub(crate) api: Arc<Mutex<ApiRecord>>,
    pub(crate) pods: mpsc::Sender<PodEvent>,
    pub(crate) pleg: mpsc::Sender<String>,
    /// The exits the PLEG would record from containerd's event stream.
    pub(crate) exits: deckhand::pleg::RecordedExits,
    pub(crate) cancel: CancellationToken,
    /// A clone of the workers' CRI client (it shares their view of the runtime's reachability).
    pub(crate) cri: deckhand::cri::CriClient,
    /// The pod manager the merged pod sources would fill ([`Harness::apply`] and
    /// [`Harness::remove`] keep it up to date).
    pub(crate) pod_manager: deckhand::pod::manager::PodManager,
    /// The workers' view of each pod UID (present while a worker has it).
    pub(crate) states: deckhand::pod::states::PodStates,
    pub(crate) _dir: TempDir,
}

pub(crate) struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Harness {
    /// Pod workers on `runtime` (a new one, or one kept from a previous harness: a deckhand
    /// restart), a runtime that mounts image volumes.
    pub(crate) async fn start(runtime: FakeRuntime) -> Harness {
        Self::start_inner(runtime, None, true).await
    }

    /// [`Harness::start`], with `image_volumes` saying whether the runtime mounts image volumes
    /// (false: as on containerd 1.6).
    pub(crate) async fn start_with(runtime: FakeRuntime, image_volumes: bool) -> Harness {
        Self::start_inner(runtime, None, image_volumes).await
    }

    /// [`Harness::start`] with the PLEG running too, following `source`'s event stream and
    /// relisting every `relist_period` (the harness's own pokes still work). The runtime calls
    /// itself `fake`.
    pub(crate) async fn start_with_pleg(
        runtime: FakeRuntime,
        source: deckhand::pleg::EventSource,
        relist_period: Duration,
    ) -> Harness {
        Self::start_inner(runtime, Some((source, relist_period, "fake")), true).await
    }

    /// [`Harness::start_with_pleg`] with the PLEG told the runtime is named `runtime_name`
    /// (`containerd`: `auto` tries containerd's native stream first, which cannot be had here).
    pub(crate) async fn start_with_pleg_on(
        runtime: FakeRuntime,
        source: deckhand::pleg::EventSource,
        relist_period: Duration,
        runtime_name: &'static str,
    ) -> Harness {
        Self::start_inner(runtime, Some((source, relist_period, runtime_name)), true).await
    }

    async fn start_inner(
        runtime: FakeRuntime,
        pleg_source: Option<(deckhand::pleg::EventSource, Duration, &'static str)>,
        image_volumes: bool,
    ) -> Harness {
        let dir =
            std::env::temp_dir().join(format!("deckhand-component-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(dir.join("logs/pods")).unwrap();
        let (client, api) = fake_api();
        let exits = deckhand::pleg::RecordedExits::default();
        let status = StatusManager::new(client.clone());
        let cancel = CancellationToken::new();
        {
            let status = status.clone();
            let c = cancel.clone();
            tokio::spawn(async move { status.run(c).await });
        }
        let ctx = Arc::new(SyncContext {
            client: client.clone(),
            cri: runtime.client().await,
            status,
            recorder: deckhand::events::EventRecorder::start(client.clone(), NODE),
            node_name: NODE.into(),
            node_ips: vec!["10.250.0.1".into()],
            root_dir: dir.join("root"),
            pod_logs_dir: dir.join("logs/pods").display().to_string(),
            runtime_name: "fake".into(),
            image_volumes,
            pull_lock: tokio::sync::Mutex::new(()),
            services: None,
            node_allocatable_milli: BTreeMap::new(),
            dns: Default::default(),
            cgroups: None,
            cgroup_layout: deckhand::cm::CgroupLayout::default(),
            memory_capacity_bytes: 8 << 30,
            container_oom_group: false,
            pressure: None,
            clock: runtime.clock(),
            tasks: deckhand::tasks::Tasks::new(),
            node: tokio::sync::watch::channel(Some(Arc::new(node_object()))).1,
            allocation: deckhand::allocation::AllocationManager::load(Some(&dir.join("root"))),
            exits: exits.clone(),
            synced: deckhand::pleg::SyncedStates::default(),
            runtime_classes: deckhand::runtimeclass::RuntimeClassManager::new(client.clone()),
            userns: deckhand::userns::UserNamespaceManager::new(
                &dir.join("root"),
                deckhand::userns::IDS_PER_POD_UNIT,
                (
                    deckhand::userns::IDS_PER_POD_UNIT,
                    110 * deckhand::userns::IDS_PER_POD_UNIT,
                ),
                110,
            )
            .unwrap(),
        });
        let cri = ctx.cri.clone();
        let synced = ctx.synced.clone();
        let (pods, pods_rx) = mpsc::channel(16);
        let (pleg, pleg_rx) = mpsc::channel(16);
        let (commands, commands_rx) = mpsc::channel(1);
        drop(commands);
        let pod_manager = deckhand::pod::manager::PodManager::default();
        let workers = PodWorkers::new(ctx).with_pod_manager(pod_manager.clone());
        let states = workers.pod_states();
        let c = cancel.clone();
        tokio::spawn(async move { workers.run(pods_rx, pleg_rx, commands_rx, c).await });
        if let Some((source, period, runtime_name)) = pleg_source {
            // no containerd here: the native stream, if chosen, has no usable endpoint (a
            // relative path) and is given up at once
            // the workers' client, as in deckhand: its list cache is shared
            let pleg = deckhand::pleg::Pleg::new(
                cri.clone(),
                "no-containerd.sock".into(),
                period,
                pleg.clone(),
            )
            .with_exits(exits.clone())
            .with_synced_states(synced)
            .with_event_source(source, runtime_name);
            let c = cancel.clone();
            tokio::spawn(async move { pleg.run(c).await });
        }
        Harness {
            runtime,
            api,
            pods,
            pleg,
            exits,
            cancel,
            cri,
            pod_manager,
            states,
            _dir: TempDir(dir),
        }
    }

    /// Sends `pod` to the workers; the in-memory API server holds its status from then on (a
    /// status patch merges onto it, as on the real server).
    pub(crate) async fn apply(&self, pod: &Pod) {
        let name = pod.metadata.name.clone().unwrap();
        let status = serde_json::to_value(pod.status.clone().unwrap_or_default()).unwrap();
        self.api
            .lock()
            .unwrap()
            .statuses
            .entry(name)
            .or_insert(status);
        self.send(PodEvent::Apply(pod.clone().into())).await;
    }

    /// Tells the workers the pod object is gone from the API server (the watch's DELETED).
    pub(crate) async fn remove(&self, pod: &Pod) {
        self.send(PodEvent::Delete(pod.clone().into())).await;
    }

    /// Tells the workers the pod sources delivered a full list naming `pods`.
    pub(crate) async fn synced(&self, pods: &[&Pod]) {
        let uids = pods
            .iter()
            .map(|p| p.metadata.uid.clone().unwrap())
            .collect();
        self.send(PodEvent::Synced(uids)).await;
    }

    /// What the pod source merge does with each event: record it in the pod manager, then
    /// hand it to the workers.
    async fn send(&self, ev: PodEvent) {
        self.pod_manager.apply(&ev);
        self.pods.send(ev).await.unwrap();
    }

    /// Tells the workers the runtime changed for `pod` (what PLEG does on a container event).
    pub(crate) async fn poke(&self, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap();
        self.pleg.send(uid).await.unwrap();
    }

    /// [`Harness::poke`] without waiting (from a polling closure); a full channel drops it.
    pub(crate) fn poke_now(&self, pod: &Pod) {
        let _ = self.pleg.try_send(pod.metadata.uid.clone().unwrap());
    }

    pub(crate) fn phase(&self, name: &str) -> Option<String> {
        let r = self.api.lock().unwrap();
        r.statuses.get(name)?["phase"].as_str().map(String::from)
    }

    /// Waits (up to `timeout`) until pod `name`'s API status has phase `phase`, and returns it.
    pub(crate) async fn status_in_phase(
        &self,
        name: &str,
        phase: &str,
        timeout: Duration,
    ) -> Value {
        eventually(timeout, &format!("pod {name} in phase {phase}"), || {
            let r = self.api.lock().unwrap();
            let st = r.statuses.get(name)?.clone();
            (st["phase"] == phase).then_some(st)
        })
        .await
    }

    /// Applies `pod` and waits (up to 10 s each) until its container `main` runs and the pod's
    /// API status says Running; returns the container.
    pub(crate) async fn start_running(&self, pod: &Pod) -> deckhand::cri::fake::FakeContainer {
        self.apply(pod).await;
        let c = eventually(Duration::from_secs(10), "the container runs", || {
            self.runtime.running("main")
        })
        .await;
        let name = pod.metadata.name.as_deref().unwrap();
        self.status_in_phase(name, "Running", Duration::from_secs(10))
            .await;
        c
    }

    /// The API status of container `container` of pod `name` (regular, init or ephemeral).
    pub(crate) fn container_status(&self, name: &str, container: &str) -> Option<Value> {
        let r = self.api.lock().unwrap();
        let st = r.statuses.get(name)?;
        [
            "containerStatuses",
            "initContainerStatuses",
            "ephemeralContainerStatuses",
        ]
        .iter()
        .filter_map(|k| st[*k].as_array())
        .flatten()
        .find(|c| c["name"] == container)
        .cloned()
    }

    /// The waiting reason and message of container `container` of pod `name`.
    pub(crate) fn waiting(&self, name: &str, container: &str) -> Option<(String, String)> {
        let c = self.container_status(name, container)?;
        let w = c["state"].get("waiting")?;
        Some((
            w["reason"].as_str().unwrap_or("").into(),
            w["message"].as_str().unwrap_or("").into(),
        ))
    }

    pub(crate) fn events(&self) -> Vec<String> {
        self.api.lock().unwrap().events.clone()
    }

    pub(crate) fn deleted(&self, name: &str) -> bool {
        self.api.lock().unwrap().deleted.iter().any(|d| d == name)
    }

    /// Waits up to `timeout` for an event with `reason` to be recorded.
    pub(crate) async fn event_recorded(&self, reason: &str, timeout: Duration) {
        eventually(timeout, reason, || {
            self.events().iter().any(|e| e == reason).then_some(())
        })
        .await
    }

    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` every 20 ms for up to `timeout`.
pub(crate) async fn eventually<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn pod(name: &str, restart_policy: &str, extra: Value) -> Pod {
    let mut spec = json!({
        "nodeName": NODE,
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"]}],
    });
    merge(&mut spec, &extra);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
        "spec": spec,
        "status": {"phase": "Pending"},
    }))
    .unwrap()
}

/// Lets the runtime's container `name` of `h` exit with `code`, tells the worker, and waits for
/// the pod's phase to become `phase`.
pub(crate) async fn exit_and_wait(h: &Harness, p: &Pod, container: &str, code: i32, phase: &str) {
    let c = eventually(Duration::from_secs(10), "the container runs", || {
        h.runtime.running(container)
    })
    .await;
    h.runtime.exit(&c.id, code);
    h.poke(p).await;
    eventually(Duration::from_secs(10), &format!("phase {phase}"), || {
        (h.phase(p.metadata.name.as_deref().unwrap()).as_deref() == Some(phase)).then_some(())
    })
    .await;
}

/// Pokes the workers a few times over `d`, as PLEG relists and resyncs would.
pub(crate) async fn keep_poking(h: &Harness, p: &Pod, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        h.poke(p).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
