//! The scheduler at run time: watches of nodes and pods feed the cache and the queue
//! (`eventhandlers.go`), one loop pops pods and runs the pure algorithm over the cache
//! (`ScheduleOne`), and bindings, events and status updates go to the API server in background
//! tasks (`bindingCycle`, `DefaultBinder`, `handleSchedulingFailure`), so that the next pod is
//! scheduled while the previous one is being bound; the assumed-pod cache keeps the two apart.

use super::cache::Cache;
use super::events::{self, Recorder};
use super::filters::{run_filters, SchedPod};
use super::queue::SchedulingQueue;
use super::schedule_one::{schedule, ScheduleError, SearchState};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The pod watch skips terminal pods, as kube-scheduler's informer does: a pod that succeeds or
/// fails leaves the cache as if deleted.
pub const POD_FIELD_SELECTOR: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Run-time settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Pods with this `spec.schedulerName` are ours.
    pub scheduler_name: String,
    /// This machine's name (events' `reportingInstance` is `<scheduler_name>-<hostname>`).
    pub hostname: String,
    /// Bindings in flight at once.
    pub bind_concurrency: usize,
}

struct State {
    cache: Cache,
    queue: SchedulingQueue,
    search: SearchState,
}

/// Shared between the watch tasks, the loop and the binders.
struct Shared {
    cfg: Config,
    client: kube::Client,
    state: Mutex<State>,
    wake: Notify,
    recorder: Recorder,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// `NodeSchedulingPropertiesChange`: whether a node update may change scheduling decisions
/// (uncordon, allocatable, labels, taints, condition statuses, annotations). Heartbeats do not.
pub fn node_scheduling_properties_changed(old: &Node, new: &Node) -> bool {
    let uncordoned = {
        let o = old
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let n = new
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        o != n && !n
    };
    let allocatable = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    let taints = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
    };
    let conditions = |n: &Node| -> BTreeMap<String, String> {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .map(|c| (c.type_.clone(), c.status.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    uncordoned
        || allocatable(old) != allocatable(new)
        || old.metadata.labels != new.metadata.labels
        || taints(old) != taints(new)
        || conditions(old) != conditions(new)
        || old.metadata.annotations != new.metadata.annotations
}

impl State {
    /// Moves the unschedulable pods that now pass every filter on `node` back to the queue.
    fn move_pods_fitting(&mut self, node: &str, now: Instant) -> usize {
        let State { cache, queue, .. } = self;
        let Some(ni) = cache.node(node) else {
            return 0;
        };
        queue.move_unschedulable(now, |qp| run_filters(&SchedPod::new(&qp.pod), ni).is_none())
    }
}

impl Shared {
    fn ours(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or(super::DEFAULT_SCHEDULER_NAME);
        name == self.cfg.scheduler_name
    }

    fn on_node(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let node = Arc::new(node);
        let mut st = self.state.lock().unwrap();
        let old = st.cache.set_node(node.clone());
        let relevant = old
            .as_ref()
            .is_none_or(|o| node_scheduling_properties_changed(o, &node));
        if relevant {
            let moved = st.move_pods_fitting(&name, Instant::now());
            if moved > 0 {
                tracing::debug!(node = %name, moved, "node event: unschedulable pods moved to the active queue");
                self.wake.notify_one();
            }
        }
    }

    fn on_node_delete(&self, node: &Node) {
        let name = node.metadata.name.as_deref().unwrap_or("");
        self.state.lock().unwrap().cache.remove_node(name);
    }

    fn on_pod(&self, pod: Pod) {
        let uid = uid_of(&pod);
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        if node_name_of(&pod).is_some() {
            let before = st.cache.pod_node(&uid).map(str::to_string);
            let before_req = before
                .as_ref()
                .and_then(|n| st.cache.node(n))
                .map(|ni| ni.requested.clone());
            st.cache.add_or_update_pod(&pod);
            st.queue.delete(&uid);
            // a running pod scaled down (or moved) frees room on its old node
            if let (Some(node), Some(req)) = (before, before_req) {
                let shrunk = st.cache.node(&node).is_some_and(|ni| {
                    ni.requested.milli_cpu < req.milli_cpu || ni.requested.memory < req.memory
                });
                if shrunk && st.move_pods_fitting(&node, now) > 0 {
                    self.wake.notify_one();
                }
            }
            return;
        }
        let pending = self.ours(&pod) && pod.metadata.deletion_timestamp.is_none();
        if !pending {
            st.queue.delete(&uid);
            return;
        }
        if st.cache.is_assumed(&uid) {
            // an older unbound version of a pod we already placed
            return;
        }
        st.queue.add(Arc::new(pod), now);
        self.wake.notify_one();
    }

    fn on_pod_delete(&self, pod: &Pod) {
        let uid = uid_of(pod);
        let mut st = self.state.lock().unwrap();
        st.queue.delete(&uid);
        if let Some(node) = st.cache.remove_pod(&uid) {
            if st.move_pods_fitting(&node, Instant::now()) > 0 {
                self.wake.notify_one();
            }
        }
    }

    /// After a re-list: forgets the objects the list did not return.
    fn resync_nodes(&self, seen: &HashSet<String>) {
        let mut st = self.state.lock().unwrap();
        let gone: Vec<String> = st
            .cache
            .node_names()
            .iter()
            .filter(|n| !seen.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            st.cache.remove_node(&n);
        }
    }

    fn resync_pods(&self, seen: &HashSet<String>) {
        let mut st = self.state.lock().unwrap();
        let gone: Vec<String> = st
            .cache
            .pod_uids()
            .filter(|u| !seen.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            if !st.cache.is_assumed(&uid) {
                st.cache.remove_pod(&uid);
            }
        }
    }
}

async fn watch_nodes(shared: Arc<Shared>, synced: watch::Sender<bool>) {
    let api: Api<Node> = Api::all(shared.client.clone());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut seen = HashSet::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(n)) => {
                seen.insert(n.metadata.name.clone().unwrap_or_default());
                shared.on_node(n);
            }
            Ok(Event::InitDone) => {
                shared.resync_nodes(&seen);
                let _ = synced.send(true);
            }
            Ok(Event::Apply(n)) => shared.on_node(n),
            Ok(Event::Delete(n)) => shared.on_node_delete(&n),
            Err(e) => tracing::warn!(error = %e, "node watch failed; retrying"),
        }
    }
}

async fn watch_pods(shared: Arc<Shared>, synced: watch::Sender<bool>) {
    let api: Api<Pod> = Api::all(shared.client.clone());
    let cfg = watcher::Config::default().fields(POD_FIELD_SELECTOR);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut seen = HashSet::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(p)) => {
                seen.insert(uid_of(&p));
                shared.on_pod(p);
            }
            Ok(Event::InitDone) => {
                shared.resync_pods(&seen);
                let _ = synced.send(true);
            }
            Ok(Event::Apply(p)) => shared.on_pod(p),
            Ok(Event::Delete(p)) => shared.on_pod_delete(&p),
            Err(e) => tracing::warn!(error = %e, "pod watch failed; retrying"),
        }
    }
}

/// `PodScheduled=False` with `reason` and `message`, as a strategic-merge patch of pods/status;
/// `None` when the pod already says exactly that (`podutil.UpdatePodCondition`).
pub fn unschedulable_condition_patch(
    pod: &Pod,
    reason: &str,
    message: &str,
) -> Option<serde_json::Value> {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    if current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
    }) {
        return None;
    }
    let mut cond = serde_json::json!({
        "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
    });
    if let Some(g) = pod.metadata.generation {
        cond["observedGeneration"] = g.into();
    }
    if current.is_none_or(|c| c.status != "False") {
        let now = Timestamp::from_second(Timestamp::now().as_second())
            .unwrap_or_else(|_| Timestamp::now());
        cond["lastTransitionTime"] = serde_json::Value::String(now.to_string());
    }
    Some(serde_json::json!({"status": {"conditions": [cond]}}))
}

fn report_failure(shared: &Arc<Shared>, pod: &Pod, reason: &'static str, message: String) {
    shared.recorder.pod(
        pod,
        true,
        events::REASON_FAILED_SCHEDULING,
        events::ACTION_SCHEDULING,
        message.clone(),
    );
    let Some(patch) = unschedulable_condition_patch(pod, reason, &message) else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(
        shared.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let name = pod.metadata.name.clone().unwrap_or_default();
    tokio::spawn(async move {
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::warn!(pod = %name, error = %e, "updating the PodScheduled condition failed");
        }
    });
}

async fn bind(shared: Arc<Shared>, pod: Arc<Pod>, node: String) {
    let uid = uid_of(&pod);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    let binding = serde_json::json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let result: Result<serde_json::Value, kube::Error> = api
        .create_subresource("binding", &name, &PostParams::default(), &binding)
        .await;
    match result {
        Ok(_) => {
            tracing::info!(pod = %key(&pod), node = %node, "successfully bound pod to node");
            shared.recorder.pod(
                &pod,
                false,
                events::REASON_SCHEDULED,
                events::ACTION_BINDING,
                format!("Successfully assigned {ns}/{name} to {node}"),
            );
        }
        Err(e) => {
            let now = Instant::now();
            let gone = matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
            {
                let mut st = shared.state.lock().unwrap();
                st.cache.forget(&uid);
                if !gone {
                    st.queue.done_error(&uid, Some(pod.clone()), now);
                }
                st.move_pods_fitting(&node, now);
            }
            shared.wake.notify_one();
            if gone {
                tracing::info!(pod = %key(&pod), node = %node, error = %e, "binding not needed any more");
            } else {
                tracing::warn!(pod = %key(&pod), node = %node, error = %e, "binding failed; retrying after back-off");
                report_failure(
                    &shared,
                    &pod,
                    "SchedulerError",
                    format!("binding rejected: {e}"),
                );
            }
        }
    }
}

/// Runs the scheduler until `cancel` fires: watches, then the scheduling loop.
pub async fn run(client: kube::Client, cfg: Config, cancel: CancellationToken) {
    let recorder = Recorder::start(client.clone(), &cfg.scheduler_name, &cfg.hostname);
    let bind_slots = Arc::new(Semaphore::new(cfg.bind_concurrency.max(1)));
    let shared = Arc::new(Shared {
        cfg,
        client,
        state: Mutex::new(State {
            cache: Cache::new(),
            queue: SchedulingQueue::new(),
            search: SearchState::default(),
        }),
        wake: Notify::new(),
        recorder,
    });
    let (nodes_tx, mut nodes_rx) = watch::channel(false);
    let (pods_tx, mut pods_rx) = watch::channel(false);
    let watchers = [
        tokio::spawn(watch_nodes(shared.clone(), nodes_tx)),
        tokio::spawn(watch_pods(shared.clone(), pods_tx)),
    ];
    let synced = async {
        let _ = nodes_rx.wait_for(|s| *s).await;
        let _ = pods_rx.wait_for(|s| *s).await;
    };
    tokio::select! {
        _ = cancel.cancelled() => {
            watchers.iter().for_each(|w| w.abort());
            return;
        }
        _ = synced => {}
    }
    {
        let st = shared.state.lock().unwrap();
        tracing::info!(
            scheduler = %shared.cfg.scheduler_name,
            nodes = st.cache.node_count(),
            bound_pods = st.cache.pod_count(),
            pending = st.queue.len(),
            "caches synced; scheduling"
        );
    }

    let tracker = TaskTracker::new();
    let mut rng = StdRng::from_os_rng();
    loop {
        if cancel.is_cancelled() {
            break;
        }
        let popped = shared.state.lock().unwrap().queue.pop(Instant::now());
        let Some(qp) = popped else {
            let due = shared.state.lock().unwrap().queue.next_due();
            let sleep_for = due
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_secs(1))
                .clamp(Duration::from_millis(10), Duration::from_secs(1));
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(sleep_for) => {}
            }
            continue;
        };
        let pod = qp.pod.clone();
        let uid = qp.uid.clone();
        if pod.metadata.deletion_timestamp.is_some() {
            shared.state.lock().unwrap().queue.done_scheduled(&uid);
            continue;
        }
        let sp = SchedPod::new(&pod);
        let started = Instant::now();
        let result = {
            let mut st = shared.state.lock().unwrap();
            let State { cache, search, .. } = &mut *st;
            let nodes = cache.snapshot();
            schedule(&sp, &nodes, search, &mut rng)
        };
        match result {
            Ok(placement) => {
                let mut assumed = (*pod).clone();
                if let Some(spec) = assumed.spec.as_mut() {
                    spec.node_name = Some(placement.node.clone());
                }
                {
                    let mut st = shared.state.lock().unwrap();
                    st.cache.assume(&assumed, &placement.node);
                    st.queue.done_scheduled(&uid);
                }
                tracing::debug!(pod = %key(&pod), node = %placement.node,
                    evaluated = placement.evaluated, feasible = placement.feasible,
                    micros = started.elapsed().as_micros() as u64, "pod assumed");
                let permit = tokio::select! {
                    _ = cancel.cancelled() => break,
                    p = bind_slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
                };
                let shared = shared.clone();
                tracker.spawn(async move {
                    bind(shared, pod, placement.node).await;
                    drop(permit);
                });
            }
            Err(err) => {
                let message = err.message();
                shared
                    .state
                    .lock()
                    .unwrap()
                    .queue
                    .done_unschedulable(&uid, Instant::now());
                let plugins = match &err {
                    ScheduleError::Fit(f) => f.plugins().join(","),
                    ScheduleError::NoNodes => String::new(),
                };
                tracing::info!(pod = %key(&pod), attempts = qp.attempts, plugins = %plugins,
                    err = %message, "unable to schedule pod; no fit; waiting");
                report_failure(&shared, &pod, "Unschedulable", message);
            }
        }
    }
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(5), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("bindings still in flight at shutdown");
    }
    watchers.iter().for_each(|w| w.abort());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn heartbeats_are_not_scheduling_changes() {
        let a = node(json!({"metadata": {"name": "n", "labels": {"a": "b"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}}));
        let mut b = a.clone();
        b.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_heartbeat_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:10Z".parse().unwrap(),
            ));
        b.metadata.resource_version = Some("2".into());
        assert!(!node_scheduling_properties_changed(&a, &b));
        let mut c = b.clone();
        c.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("disk".into(), "ssd".into());
        assert!(node_scheduling_properties_changed(&b, &c));
        let mut d = b.clone();
        d.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(node_scheduling_properties_changed(&b, &d));
    }

    #[test]
    fn cordon_is_not_a_change_that_helps_but_uncordon_is() {
        let a = node(json!({"metadata": {"name": "n"}}));
        let cordoned = node(json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}));
        assert!(!node_scheduling_properties_changed(&a, &cordoned));
        assert!(node_scheduling_properties_changed(&cordoned, &a));
    }

    #[test]
    fn condition_patch_is_skipped_when_unchanged_and_keeps_the_transition_time_when_only_the_message_changes(
    ) {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "generation": 1},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "m1", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
        .unwrap();
        assert!(unschedulable_condition_patch(&pod, "Unschedulable", "m1").is_none());
        let p = unschedulable_condition_patch(&pod, "Unschedulable", "m2").unwrap();
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["message"], "m2");
        assert_eq!(c["observedGeneration"], 1);
        assert!(c.get("lastTransitionTime").is_none());
        let fresh: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        let p = unschedulable_condition_patch(&fresh, "Unschedulable", "m").unwrap();
        assert!(p["status"]["conditions"][0]["lastTransitionTime"].is_string());
    }
}
