//! The runner's side of the volume plugins: the watches of PersistentVolumeClaims,
//! PersistentVolumes and StorageClasses that feed the storage caches and move the pods the
//! volume plugins rejected back to the queue when a change may help them (queueing hints); and
//! the binding cycle of a pod whose volumes need binding: Reserve, PreBind (the API updates, then
//! the wait for the PV controller), Unreserve on failure (kube-scheduler's `bindingCycle` and
//! `handleBindingCycleError` with VolumeBinding's Reserve/PreBind/Unreserve).

use super::{bind, key, report_failure, uid_of, Nomination, Shared, State, Storage};
use crate::scheduler::filters::SchedPod;
use crate::scheduler::storage::Cached;
use crate::scheduler::volumebinding::assume::{assume_pod_volumes, revert, Assumed};
use crate::scheduler::volumebinding::prebind::{
    check_bindings, update_api, Check, ERR_DEADLINE, POLL_INTERVAL,
};
use crate::scheduler::volumebinding::{self, find_pod_volumes};
use crate::scheduler::volumes::{may_help, StorageEvent};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

impl State {
    /// Moves the unschedulable pods that `ev` may help (the volume plugins' queueing hints).
    fn move_for_storage(&mut self, ev: StorageEvent<'_>) -> usize {
        self.queue.move_unschedulable(Instant::now(), |qp| {
            may_help(&qp.pod, &qp.unschedulable_plugins, ev)
        })
    }
}

/// A storage object the scheduler watches.
trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    fn key(&self) -> String;
    /// A watch add or update.
    fn apply(self, st: &mut State) -> usize;
    /// A watch delete.
    fn delete(&self, st: &mut Storage);
    /// After a re-list, keeps only the objects it returned.
    fn retain(st: &mut Storage, seen: &HashSet<String>);
}

impl Watched for PersistentVolumeClaim {
    fn key(&self) -> String {
        self.cache_key()
    }
    fn apply(self, st: &mut State) -> usize {
        let old = st.storage.pvcs.set(self.clone());
        st.move_for_storage(StorageEvent::Claim(old.as_deref(), &self))
    }
    fn delete(&self, st: &mut Storage) {
        st.pvcs.remove(&self.key());
    }
    fn retain(st: &mut Storage, seen: &HashSet<String>) {
        st.pvcs.retain(|k| seen.contains(k));
    }
}

impl Watched for PersistentVolume {
    fn key(&self) -> String {
        self.cache_key()
    }
    fn apply(self, st: &mut State) -> usize {
        let old = st.storage.pvs.set(self.clone());
        st.move_for_storage(StorageEvent::Volume(old.as_deref(), &self))
    }
    fn delete(&self, st: &mut Storage) {
        st.pvs.remove(&self.key());
    }
    fn retain(st: &mut Storage, seen: &HashSet<String>) {
        st.pvs.retain(|k| seen.contains(k));
    }
}

impl Watched for StorageClass {
    fn key(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }
    fn apply(self, st: &mut State) -> usize {
        let class = Arc::new(self);
        let old = st.storage.classes.insert(class.key(), class.clone());
        st.move_for_storage(StorageEvent::Class(old.as_deref(), &class))
    }
    fn delete(&self, st: &mut Storage) {
        st.classes.remove(&self.key());
    }
    fn retain(st: &mut Storage, seen: &HashSet<String>) {
        st.classes.retain(|k, _| seen.contains(k));
    }
}

async fn watch_storage<K: Watched>(shared: Arc<Shared>, synced: watch::Sender<bool>) {
    let api: Api<K> = Api::all(shared.client.clone());
    let mut stream = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut seen = HashSet::new();
    let apply = |o: K| {
        if o.apply(&mut shared.state.lock().unwrap()) > 0 {
            shared.wake.notify_one();
        }
    };
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Init) => seen.clear(),
            Ok(Event::InitApply(o)) => {
                seen.insert(o.key());
                apply(o);
            }
            Ok(Event::InitDone) => {
                K::retain(&mut shared.state.lock().unwrap().storage, &seen);
                let _ = synced.send(true);
            }
            Ok(Event::Apply(o)) => apply(o),
            Ok(Event::Delete(o)) => o.delete(&mut shared.state.lock().unwrap().storage),
            Err(e) => tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying"),
        }
    }
}

/// Starts the watches of claims, volumes and classes; returns the tasks and a future that
/// completes once each has listed everything once.
pub(super) fn start_watches(
    shared: &Arc<Shared>,
) -> (Vec<JoinHandle<()>>, impl Future<Output = ()>) {
    let [pvcs, pvs, classes] = std::array::from_fn(|_| watch::channel(false));
    let tasks = vec![
        tokio::spawn(watch_storage::<PersistentVolumeClaim>(
            shared.clone(),
            pvcs.0,
        )),
        tokio::spawn(watch_storage::<PersistentVolume>(shared.clone(), pvs.0)),
        tokio::spawn(watch_storage::<StorageClass>(shared.clone(), classes.0)),
    ];
    let synced = async move {
        for mut rx in [pvcs.1, pvs.1, classes.1] {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    (tasks, synced)
}

/// VolumeBinding's Reserve for the pod placed on `node`: the volumes it needs bound, assumed
/// (`None`: nothing to bind); `Err` with kube-scheduler's message when the assumption fails.
pub(super) fn reserve(
    sp: &SchedPod,
    pod: &Pod,
    node: &str,
    st: &mut State,
) -> Result<Option<Assumed>, String> {
    let Some(b) = sp.volumes.as_ref().and_then(|v| v.binding.as_ref()) else {
        return Ok(None);
    };
    let Some(n) = st.cache.node(node).map(|ni| ni.node.clone()) else {
        return Ok(None);
    };
    let wrap = |e: String| format!("running Reserve plugin {:?}: {e}", volumebinding::PLUGIN);
    let (volumes, _) = find_pod_volumes(b, &n).map_err(wrap)?;
    let a = assume_pod_volumes(pod, node, &volumes, &mut st.storage).map_err(wrap)?;
    Ok((!a.all_bound).then_some(a))
}

/// PreBind: the nominated node is set (NominatedNodeNameForExpectation), the volumes and claims
/// are updated, then the claims are checked once a second until bound, failed, or the timeout.
async fn pre_bind(
    shared: &Arc<Shared>,
    pod: &Pod,
    node: &str,
    a: &mut Assumed,
) -> Result<(), String> {
    let uid = uid_of(pod);
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(
        shared.client.clone(),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
    );
    let patch = serde_json::json!({"status": {"nominatedNodeName": node}});
    if let Err(e) = api
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        tracing::debug!(pod = %key(pod), error = %e, "setting the nominated node before PreBind failed");
    }
    update_api(&shared.client, a).await?;
    let deadline = Instant::now() + shared.cfg.volume_bind_timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("binding volumes: {ERR_DEADLINE}"));
        }
        tokio::time::sleep(POLL_INTERVAL.min(left)).await;
        let check = {
            let st = shared.state.lock().unwrap();
            let n = st.cache.node(node).map(|ni| ni.node.clone());
            let exists = st.cache.pod_node(&uid).is_some();
            check_bindings(a, node, n.as_deref(), &name, exists, &st.storage)
        };
        match check {
            Check::Done => return Ok(()),
            Check::Wait => {}
            Check::Fail(e) => return Err(format!("binding volumes: {e}")),
        }
    }
}

/// The binding cycle of a pod with volumes to bind: PreBind, then the Binding (in a bind slot);
/// a failed PreBind unreserves the volumes, forgets the pod and retries it after back-off with
/// `running PreBind plugin "VolumeBinding": ...` as its condition's message.
pub(super) async fn binding_cycle(
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
    pod: Arc<Pod>,
    node: String,
    mut a: Assumed,
) {
    if let Err(e) = pre_bind(&shared, &pod, &node, &mut a).await {
        let message = format!("running PreBind plugin {:?}: {e}", volumebinding::PLUGIN);
        let uid = uid_of(&pod);
        let now = Instant::now();
        let exists = {
            let mut st = shared.state.lock().unwrap();
            revert(&a, &mut st.storage);
            let exists = st.cache.pod_node(&uid).is_some();
            st.cache.forget(&uid);
            if exists {
                st.queue.done_error(&uid, Some(pod.clone()), now);
            }
            st.move_pods_fitting(&node, now);
            exists
        };
        shared.wake.notify_one();
        tracing::warn!(pod = %key(&pod), node = %node, err = %message, "binding volumes failed; retrying");
        if exists {
            // the nomination PreBind set is cleared with the condition
            let mut p = (*pod).clone();
            p.status
                .get_or_insert_with(Default::default)
                .nominated_node_name = Some(node);
            report_failure(&shared, &p, "SchedulerError", message, Nomination::Clear);
        }
        return;
    }
    let Ok(permit) = slots.acquire_owned().await else {
        return;
    };
    bind(shared, pod, node, Some(a)).await;
    drop(permit);
}
