//! The scheduler at run time: watches of nodes and pods feed the cache and the queue
//! (`eventhandlers.go`), one loop pops pods and runs the pure algorithm over the cache
//! (`ScheduleOne`), and bindings, events and status updates go to the API server in background
//! tasks (`bindingCycle`, `DefaultBinder`, `handleSchedulingFailure`), so that the next pod is
//! scheduled while the previous one is being bound; the assumed-pod cache keeps the two apart.
//! The volume plugins' watches, Reserve and PreBind are in [`volume_io`].

mod volume_io;

use super::cache::Cache;
use super::events::{self, Recorder};
use super::filters::{run_filters, SchedPod};
use super::interpod_affinity;
use super::listers::{start as start_listers, Listers};
use super::nodeinfo::PodAccount;
use super::preemption::{Candidate, Nominator, Pdb};
use super::queue::{QueuedPod, SchedulingQueue};
use super::schedule_one::{schedule, ScheduleError, SearchState};
use super::storage::Storage;
use super::topology_spread::{default_selector, pod_change_may_help, SpreadConstraints};
use super::volumebinding::assume::Assumed;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
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
    /// How long PreBind waits for the pod's claims to be bound (kube-scheduler's
    /// `VolumeBindingArgs.bindTimeoutSeconds`, 600 s by default).
    pub volume_bind_timeout: Duration,
}

struct State {
    cache: Cache,
    queue: SchedulingQueue,
    search: SearchState,
    /// Pods that preempted, holding room on their nominated node.
    nominator: Nominator,
    /// PodDisruptionBudgets by `namespace/name`, and the same as a list for the algorithm.
    pdbs: BTreeMap<String, Pdb>,
    pdb_list: Vec<Pdb>,
    /// Claims, volumes and classes, with what Reserve assumed of them.
    storage: Storage,
}

/// Shared between the watch tasks, the loop and the binders.
struct Shared {
    cfg: Config,
    client: kube::Client,
    state: Mutex<State>,
    wake: Notify,
    recorder: Recorder,
    /// Selectors of Services and controllers, for default topology spreading.
    listers: Arc<Mutex<Listers>>,
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
            st.nominator.remove(&uid);
            let before = st.cache.pod_node(&uid).map(str::to_string);
            let before_req = before
                .as_ref()
                .and_then(|n| st.cache.node(n))
                .map(|ni| ni.requested.clone());
            st.cache.add_or_update_pod(&pod);
            st.queue.delete(&uid);
            // a new or terminating pod changes the counts of topology spreading
            let counts_changed = before.is_none() || pod.metadata.deletion_timestamp.is_some();
            let helps = |qp: &QueuedPod| {
                pod_change_may_help(&qp.pod, &pod)
                    || interpod_affinity::pod_change_may_help(&qp.pod, &pod)
            };
            if counts_changed && st.queue.unschedulable().any(helps) {
                st.queue.move_unschedulable(now, helps);
                self.wake.notify_one();
            }
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
            st.nominator.remove(&uid);
            return;
        }
        if st.cache.is_assumed(&uid) {
            // an older unbound version of a pod we already placed
            return;
        }
        let nominated = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty());
        st.nominator.observe(&uid, nominated, PodAccount::of(&pod));
        st.queue.add(Arc::new(pod), now);
        self.wake.notify_one();
    }

    fn on_pod_delete(&self, pod: &Pod) {
        let uid = uid_of(pod);
        let mut st = self.state.lock().unwrap();
        st.queue.delete(&uid);
        st.nominator.remove(&uid);
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

    fn on_pdb(&self, pdb: Option<&PodDisruptionBudget>, key: String) {
        let mut st = self.state.lock().unwrap();
        match pdb {
            Some(p) => st.pdbs.insert(key, Pdb::of(p)),
            None => st.pdbs.remove(&key),
        };
        st.pdb_list = st.pdbs.values().cloned().collect();
    }

    fn resync_pdbs(&self, seen: &HashSet<String>) {
        let mut st = self.state.lock().unwrap();
        st.pdbs.retain(|k, _| seen.contains(k));
        st.pdb_list = st.pdbs.values().cloned().collect();
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

/// What a failed attempt does to the pod's `status.nominatedNodeName` (`NominatingInfo`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nomination<'a> {
    /// Left as it is (no PostFilter result).
    Keep,
    /// Set to the node preemption made room on.
    Set(&'a str),
    /// Cleared (preemption found no node).
    Clear,
}

/// The API's time format at second precision, now.
fn now_seconds() -> String {
    Timestamp::from_second(Timestamp::now().as_second())
        .unwrap_or_else(|_| Timestamp::now())
        .to_string()
}

/// `PodScheduled=False` with `reason` and `message`, and the nomination, as a strategic-merge
/// patch of pods/status (`updatePod`); `None` when the pod already says exactly that
/// (`podutil.UpdatePodCondition`, and a nomination that is already there or already absent).
pub fn unschedulable_condition_patch(
    pod: &Pod,
    reason: &str,
    message: &str,
    nomination: Nomination<'_>,
) -> Option<serde_json::Value> {
    let status = pod.status.as_ref();
    let current = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty());
    let mut patch = serde_json::json!({"status": {}});
    match nomination {
        Nomination::Set(node) if nominated != Some(node) => {
            patch["status"]["nominatedNodeName"] = node.into();
        }
        Nomination::Clear if nominated.is_some() => {
            patch["status"]["nominatedNodeName"] = serde_json::Value::Null;
        }
        _ => {}
    }
    let same = current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
    });
    if !same {
        let mut cond = serde_json::json!({
            "type": "PodScheduled", "status": "False", "reason": reason, "message": message,
        });
        if let Some(g) = pod.metadata.generation {
            cond["observedGeneration"] = g.into();
        }
        if current.is_none_or(|c| c.status != "False") {
            cond["lastTransitionTime"] = now_seconds().into();
        }
        patch["status"]["conditions"] = serde_json::json!([cond]);
    }
    let empty = patch["status"].as_object().is_some_and(|m| m.is_empty());
    (!empty).then_some(patch)
}

/// The DisruptionTarget condition kube-scheduler puts on a victim before deleting it, as a
/// strategic-merge patch of pods/status (`Executor.PreemptPod`).
pub fn disruption_target_patch(scheduler_name: &str, generation: Option<i64>) -> serde_json::Value {
    let mut cond = serde_json::json!({
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
        "lastTransitionTime": now_seconds(),
    });
    if let Some(g) = generation {
        cond["observedGeneration"] = g.into();
    }
    serde_json::json!({"status": {"conditions": [cond]}})
}

fn report_failure(
    shared: &Arc<Shared>,
    pod: &Pod,
    reason: &'static str,
    message: String,
    nomination: Nomination<'_>,
) {
    shared.recorder.pod(
        pod,
        true,
        events::REASON_FAILED_SCHEDULING,
        events::ACTION_SCHEDULING,
        message.clone(),
    );
    let Some(patch) = unschedulable_condition_patch(pod, reason, &message, nomination) else {
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

async fn bind(shared: Arc<Shared>, pod: Arc<Pod>, node: String, volumes: Option<Assumed>) {
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
                if let Some(a) = &volumes {
                    // Unreserve
                    super::volumebinding::assume::revert(a, &mut st.storage);
                }
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
                    Nomination::Keep,
                );
            }
        }
    }
}

/// Evicts the victims of a preemption (`Executor.prepareCandidate`, run asynchronously as with
/// kube-scheduler's SchedulerAsyncPreemption): for each, the DisruptionTarget condition, then
/// the delete (with the victim's UID as precondition) and a `Preempted` event; then clears the
/// nomination of the less important pods that were nominated to the node.
async fn preempt_victims(
    shared: Arc<Shared>,
    preemptor: Arc<Pod>,
    candidate: Candidate,
    cleared: Vec<(String, String, String)>,
) {
    let preemptor_uid = uid_of(&preemptor);
    let node = &candidate.node;
    for v in &candidate.victims {
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), &v.namespace);
        let patch = disruption_target_patch(&shared.cfg.scheduler_name, v.generation);
        let gone =
            |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
        if let Err(e) = api
            .patch_status(&v.name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            if !gone(&e) {
                tracing::warn!(victim = %format!("{}/{}", v.namespace, v.name), error = %e,
                    "could not add the DisruptionTarget condition; not preempting it");
            }
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(v.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(e) = api.delete(&v.name, &params).await {
            if !gone(&e) {
                tracing::warn!(victim = %format!("{}/{}", v.namespace, v.name), error = %e,
                    "deleting the preempted pod failed");
            }
            continue;
        }
        tracing::info!(preemptor = %key(&preemptor), victim = %format!("{}/{}", v.namespace, v.name),
            node = %node, "preemptor pod preempted victim pod");
        let mut victim = Pod::default();
        victim.metadata.namespace = Some(v.namespace.clone());
        victim.metadata.name = Some(v.name.clone());
        victim.metadata.uid = Some(v.uid.clone());
        shared.recorder.pod(
            &victim,
            false,
            events::REASON_PREEMPTED,
            events::ACTION_PREEMPTING,
            format!("Preempted by pod {preemptor_uid} on node {node}"),
        );
    }
    for (_, ns, name) in cleared {
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
        let patch = serde_json::json!({"status": {"nominatedNodeName": null}});
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "clearing a nomination failed");
        }
    }
}

async fn watch_pdbs(shared: Arc<Shared>, synced: watch::Sender<bool>) {
    let api: Api<PodDisruptionBudget> = Api::all(shared.client.clone());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let key = |p: &PodDisruptionBudget| {
        format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or("")
        )
    };
    let mut seen = HashSet::new();
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(p)) => {
                seen.insert(key(&p));
                shared.on_pdb(Some(&p), key(&p));
            }
            Ok(Event::InitDone) => {
                shared.resync_pdbs(&seen);
                let _ = synced.send(true);
            }
            Ok(Event::Apply(p)) => shared.on_pdb(Some(&p), key(&p)),
            Ok(Event::Delete(p)) => shared.on_pdb(None, key(&p)),
            Err(e) => tracing::warn!(error = %e, "PodDisruptionBudget watch failed; retrying"),
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
            nominator: Nominator::new(),
            pdbs: BTreeMap::new(),
            pdb_list: Vec::new(),
            storage: Storage::default(),
        }),
        wake: Notify::new(),
        recorder,
        listers: Arc::new(Mutex::new(Listers::default())),
    });
    let (nodes_tx, mut nodes_rx) = watch::channel(false);
    let (pods_tx, mut pods_rx) = watch::channel(false);
    let (pdbs_tx, mut pdbs_rx) = watch::channel(false);
    let (lister_tasks, listers_synced) =
        start_listers(shared.client.clone(), shared.listers.clone());
    let (storage_tasks, storage_synced) = volume_io::start_watches(&shared);
    let mut watchers = vec![
        tokio::spawn(watch_nodes(shared.clone(), nodes_tx)),
        tokio::spawn(watch_pods(shared.clone(), pods_tx)),
        tokio::spawn(watch_pdbs(shared.clone(), pdbs_tx)),
    ];
    watchers.extend(lister_tasks);
    watchers.extend(storage_tasks);
    let synced = async {
        let _ = nodes_rx.wait_for(|s| *s).await;
        let _ = pods_rx.wait_for(|s| *s).await;
        let _ = pdbs_rx.wait_for(|s| *s).await;
        listers_synced.await;
        storage_synced.await;
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
        let mut sp = SchedPod::new(&pod);
        {
            let listers = shared.listers.lock().unwrap();
            if !sp.spread.explicit {
                sp.spread = SpreadConstraints::system_defaults(default_selector(&pod, &listers));
            }
            if let Some(terms) = &sp.pod_affinity {
                sp.pod_affinity = Some(Arc::new(terms.resolved(&listers.namespaces)));
            }
            let ns = sp.namespace.clone();
            sp.namespace_labels = listers.namespaces.get(&ns).cloned().unwrap_or_default();
        }
        let started = Instant::now();
        let result = {
            let mut st = shared.state.lock().unwrap();
            let State {
                cache,
                search,
                nominator,
                pdb_list,
                storage,
                ..
            } = &mut *st;
            if sp.nominated_node_name.is_none() {
                sp.nominated_node_name = nominator.node_of(&uid).map(str::to_string);
            }
            let nodes = cache.snapshot();
            sp.volumes = super::volumes::pre_filter(&pod, &sp, storage, &nodes);
            schedule(&sp, &nodes, nominator, pdb_list, search, &mut rng)
        };
        match result {
            Ok(placement) => {
                let mut assumed = (*pod).clone();
                if let Some(spec) = assumed.spec.as_mut() {
                    spec.node_name = Some(placement.node.clone());
                }
                let reserved = {
                    let mut st = shared.state.lock().unwrap();
                    match volume_io::reserve(&sp, &pod, &placement.node, &mut st) {
                        Ok(v) => {
                            st.cache.assume(&assumed, &placement.node);
                            st.queue.done_scheduled(&uid);
                            st.nominator.remove(&uid);
                            Ok(v)
                        }
                        Err(e) => {
                            st.queue.done_error(&uid, None, Instant::now());
                            st.nominator.remove(&uid);
                            Err(e)
                        }
                    }
                };
                let volumes = match reserved {
                    Ok(v) => v,
                    Err(message) => {
                        tracing::warn!(pod = %key(&pod), node = %placement.node, err = %message,
                            "error scheduling pod; retrying");
                        report_failure(&shared, &pod, "SchedulerError", message, Nomination::Clear);
                        continue;
                    }
                };
                tracing::debug!(pod = %key(&pod), node = %placement.node,
                    evaluated = placement.evaluated, feasible = placement.feasible,
                    micros = started.elapsed().as_micros() as u64, "pod assumed");
                if let Some(a) = volumes {
                    // the volumes bind first (PreBind), for up to the bind timeout: no bind slot
                    // is held meanwhile
                    tracker.spawn(volume_io::binding_cycle(
                        shared.clone(),
                        bind_slots.clone(),
                        pod,
                        placement.node,
                        a,
                    ));
                    continue;
                }
                let permit = tokio::select! {
                    _ = cancel.cancelled() => break,
                    p = bind_slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
                };
                let shared = shared.clone();
                tracker.spawn(async move {
                    bind(shared, pod, placement.node, None).await;
                    drop(permit);
                });
            }
            Err(err) => {
                let message = err.message();
                if let ScheduleError::Error(_) = &err {
                    shared
                        .state
                        .lock()
                        .unwrap()
                        .queue
                        .done_error(&uid, None, Instant::now());
                    tracing::warn!(pod = %key(&pod), err = %message, "error scheduling pod; retrying");
                    report_failure(&shared, &pod, "SchedulerError", message, Nomination::Keep);
                    continue;
                }
                let (preemption, clear) = match &err {
                    ScheduleError::Fit(f) => (f.preemption.clone(), f.clear_nomination),
                    ScheduleError::NoNodes | ScheduleError::Error(_) => (None, true),
                };
                let rejectors = match &err {
                    ScheduleError::Fit(f) => f.plugins(),
                    _ => Vec::new(),
                };
                {
                    let mut st = shared.state.lock().unwrap();
                    st.queue
                        .done_unschedulable_by(&uid, rejectors, Instant::now());
                    if let Some(c) = &preemption {
                        let cleared = st.nominator.lower_priority_on(&c.node, sp.priority);
                        for (u, _, _) in &cleared {
                            st.nominator.remove(u);
                        }
                        st.nominator.add(&uid, &c.node, PodAccount::of(&pod));
                        tracker.spawn(preempt_victims(
                            shared.clone(),
                            pod.clone(),
                            c.clone(),
                            cleared,
                        ));
                    } else if clear {
                        st.nominator.remove(&uid);
                    }
                }
                let plugins = match &err {
                    ScheduleError::Fit(f) => f.plugins().join(","),
                    ScheduleError::NoNodes | ScheduleError::Error(_) => String::new(),
                };
                let nomination = match (&preemption, clear) {
                    (Some(c), _) => {
                        tracing::info!(pod = %key(&pod), node = %c.node,
                            victims = c.victims.len(), "preempting: pod nominated to node");
                        Nomination::Set(&c.node)
                    }
                    (None, true) => Nomination::Clear,
                    (None, false) => Nomination::Keep,
                };
                tracing::info!(pod = %key(&pod), attempts = qp.attempts, plugins = %plugins,
                    err = %message, "unable to schedule pod; no fit; waiting");
                report_failure(&shared, &pod, "Unschedulable", message, nomination);
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
        assert!(
            unschedulable_condition_patch(&pod, "Unschedulable", "m1", Nomination::Keep).is_none()
        );
        assert!(
            unschedulable_condition_patch(&pod, "Unschedulable", "m1", Nomination::Clear).is_none(),
            "nothing to clear"
        );
        let p =
            unschedulable_condition_patch(&pod, "Unschedulable", "m2", Nomination::Keep).unwrap();
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["message"], "m2");
        assert_eq!(c["observedGeneration"], 1);
        assert!(c.get("lastTransitionTime").is_none());
        let fresh: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        let p =
            unschedulable_condition_patch(&fresh, "Unschedulable", "m", Nomination::Keep).unwrap();
        assert!(p["status"]["conditions"][0]["lastTransitionTime"].is_string());
        assert!(p["status"].get("nominatedNodeName").is_none());
    }

    #[test]
    fn nomination_is_set_cleared_or_kept_with_the_condition() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "m"}]}}))
        .unwrap();
        let set = unschedulable_condition_patch(&pod, "Unschedulable", "m", Nomination::Set("vm"))
            .unwrap();
        assert_eq!(
            set,
            json!({"status": {"nominatedNodeName": "vm"}}),
            "only the nomination changes"
        );
        let mut nominated = pod.clone();
        nominated.status.as_mut().unwrap().nominated_node_name = Some("vm".into());
        assert!(unschedulable_condition_patch(
            &nominated,
            "Unschedulable",
            "m",
            Nomination::Set("vm")
        )
        .is_none());
        assert!(
            unschedulable_condition_patch(&nominated, "Unschedulable", "m", Nomination::Keep)
                .is_none()
        );
        let clear =
            unschedulable_condition_patch(&nominated, "Unschedulable", "m", Nomination::Clear)
                .unwrap();
        assert_eq!(clear, json!({"status": {"nominatedNodeName": null}}));
    }

    #[test]
    fn victims_get_kube_schedulers_disruption_condition() {
        let p = disruption_target_patch("default-scheduler", Some(3));
        let c = &p["status"]["conditions"][0];
        assert_eq!(c["type"], "DisruptionTarget");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "PreemptionByScheduler");
        assert_eq!(
            c["message"],
            "default-scheduler: preempting to accommodate a higher priority pod"
        );
        assert_eq!(c["observedGeneration"], 3);
        assert!(c["lastTransitionTime"].is_string());
    }
}
