//! Container garbage collection: dead containers beyond the per-container and global limits,
//! dead sandboxes with no containers left, log directories of pods that no longer exist
//! (k/k `pkg/kubelet/kuberuntime/kuberuntime_gc.go`, policy from
//! `pkg/kubelet/container/container_gc.go`).
//!
//! [`plan`] decides from a snapshot; [`ContainerGc`] takes the snapshot and carries the plan out.

use super::{
    ContainerState, EventSink, GcError, GcRuntime, PodStateProvider, RuntimeContainer,
    RuntimeSandbox,
};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How many dead containers are kept (k/k `kubecontainer.GCPolicy`; the flags
/// `--minimum-container-ttl-duration`, `--maximum-dead-containers-per-container`,
/// `--maximum-dead-containers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerGcPolicy {
    /// A dead container younger than this (since creation) is never collected. Default 0.
    pub min_age: Duration,
    /// Dead containers kept per (pod UID, container name), newest first; negative: no limit.
    /// Default 1 (the newest dead instance gives the status its `lastState`).
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node in all; negative: no limit. Default -1.
    pub max_containers: i32,
}

impl Default for ContainerGcPolicy {
    fn default() -> Self {
        Self {
            min_age: Duration::ZERO,
            max_per_pod_container: 1,
            max_containers: -1,
        }
    }
}

/// A container chosen for removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRemoval {
    /// Container id.
    pub id: String,
    /// Container name (for logs).
    pub name: String,
    /// The container is in an unknown state and is stopped first (Go: "Container is in unknown
    /// state, try killing it before removal").
    pub stop_first: bool,
}

/// What one collection removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// Containers, in removal order (per unit oldest first).
    pub containers: Vec<ContainerRemoval>,
    /// Sandbox ids.
    pub sandboxes: Vec<String>,
    /// Names of directories under the pod logs directory (`<ns>_<name>_<uid>`).
    pub log_dirs: Vec<String>,
}

#[derive(Debug, Clone)]
struct Dead {
    id: String,
    name: String,
    created: i64,
    unknown: bool,
}

fn removal(d: &Dead) -> ContainerRemoval {
    ContainerRemoval {
        id: d.id.clone(),
        name: d.name.clone(),
        stop_first: d.unknown,
    }
}

/// Go's `removeOldestN`: sorts newest first, appends the oldest `n` to `out`, keeps the rest.
fn remove_oldest_n(mut unit: Vec<Dead>, n: usize, out: &mut Vec<ContainerRemoval>) -> Vec<Dead> {
    let keep = unit.len().saturating_sub(n);
    unit.sort_by_key(|d| std::cmp::Reverse(d.created));
    for d in unit[keep..].iter().rev() {
        out.push(removal(d));
    }
    unit.truncate(keep);
    unit
}

/// The pod UID at the end of a pod log directory name (`<ns>_<name>_<uid>`; k/k
/// `parsePodUIDFromLogsDirectory`).
pub fn pod_uid_from_log_dir(name: &str) -> &str {
    name.rsplit('_').next().unwrap_or(name)
}

/// Decides one container garbage collection (k/k `containerGC.GarbageCollect`): pure.
///
/// - Evictable containers: not running, created at least `policy.min_age` before `now_ns`
///   (nanoseconds since the epoch), grouped by (pod UID, container name).
/// - With the sources ready, every evictable container of a pod whose content should be removed
///   (or, with `evict_non_deleted_pods`, whose runtime should be removed) goes.
/// - Then each group keeps its newest `max_per_pod_container`, and the node keeps at most
///   `max_containers` (an even share per group, at least 1, then the oldest overall go).
/// - Sandboxes that are not ready and have no container left go: all of them for a removed pod,
///   all but the newest sandbox for a pod that still exists.
/// - With the sources ready, log directories of removed pods go.
///
/// deckhand keeps off the objects of pods whose worker is terminating them (the worker removes
/// them itself); the Go collector still trims such a pod's dead containers to the per-container
/// limit.
pub fn plan(
    containers: &[RuntimeContainer],
    sandboxes: &[RuntimeSandbox],
    log_dirs: &[String],
    policy: &ContainerGcPolicy,
    pods: &dyn PodStateProvider,
    now_ns: i64,
    evict_non_deleted_pods: bool,
) -> GcPlan {
    let mut out = GcPlan::default();
    let sources_ready = pods.sources_ready();
    let removable = |uid: &str| {
        pods.should_pod_content_be_removed(uid)
            || (evict_non_deleted_pods && pods.should_pod_runtime_be_removed(uid))
    };

    // Containers.
    let newest_gc_time = now_ns.saturating_sub(policy.min_age.as_nanos() as i64);
    let mut units: HashMap<(String, String), Vec<Dead>> = HashMap::new();
    for c in containers {
        if c.state == ContainerState::Running || c.created_at_ns > newest_gc_time {
            continue;
        }
        if pods.is_pod_terminating(&c.pod_uid) {
            continue;
        }
        units
            .entry((c.pod_uid.clone(), c.name.clone()))
            .or_default()
            .push(Dead {
                id: c.id.clone(),
                name: c.name.clone(),
                created: c.created_at_ns,
                unknown: c.state == ContainerState::Unknown,
            });
    }
    // Deterministic order (HashMap iteration is not).
    let mut keys: Vec<(String, String)> = units.keys().cloned().collect();
    keys.sort();
    if sources_ready {
        for k in &keys {
            if removable(&k.0) {
                if let Some(unit) = units.remove(k) {
                    let n = unit.len();
                    remove_oldest_n(unit, n, &mut out.containers);
                }
            }
        }
    }
    keys.retain(|k| units.contains_key(k));
    let enforce_per_unit =
        |units: &mut HashMap<(String, String), Vec<Dead>>, max: usize, out: &mut GcPlan| {
            for k in &keys {
                let unit = units.remove(k).unwrap_or_default();
                let n = unit.len().saturating_sub(max);
                let kept = if n > 0 {
                    remove_oldest_n(unit, n, &mut out.containers)
                } else {
                    unit
                };
                units.insert(k.clone(), kept);
            }
        };
    if policy.max_per_pod_container >= 0 {
        enforce_per_unit(&mut units, policy.max_per_pod_container as usize, &mut out);
    }
    let total = |units: &HashMap<(String, String), Vec<Dead>>| -> usize {
        units.values().map(Vec::len).sum()
    };
    if policy.max_containers >= 0 && total(&units) > policy.max_containers as usize {
        let max = policy.max_containers as usize;
        let per_unit = (max / units.len().max(1)).max(1);
        enforce_per_unit(&mut units, per_unit, &mut out);
        let n = total(&units);
        if n > max {
            let flat: Vec<Dead> = keys
                .iter()
                .flat_map(|k| units.get(k).cloned().unwrap_or_default())
                .collect();
            remove_oldest_n(flat, n - max, &mut out.containers);
        }
    }

    // Sandboxes: active while ready or holding a container that stays.
    let removed: HashSet<&str> = out.containers.iter().map(|c| c.id.as_str()).collect();
    let in_use: HashSet<&str> = containers
        .iter()
        .filter(|c| !removed.contains(c.id.as_str()))
        .map(|c| c.sandbox_id.as_str())
        .collect();
    let mut by_pod: HashMap<&str, Vec<&RuntimeSandbox>> = HashMap::new();
    for s in sandboxes {
        by_pod.entry(s.pod_uid.as_str()).or_default().push(s);
    }
    let mut uids: Vec<&str> = by_pod.keys().copied().collect();
    uids.sort();
    for uid in uids {
        if pods.is_pod_terminating(uid) {
            continue;
        }
        let mut list = by_pod.remove(uid).unwrap_or_default();
        list.sort_by_key(|s| std::cmp::Reverse(s.created_at_ns));
        let keep = if removable(uid) { 0 } else { 1 };
        for s in list.iter().skip(keep).rev() {
            if !s.ready && !in_use.contains(s.id.as_str()) {
                out.sandboxes.push(s.id.clone());
            }
        }
    }

    // Log directories.
    if sources_ready {
        for d in log_dirs {
            if pods.should_pod_content_be_removed(pod_uid_from_log_dir(d)) {
                out.log_dirs.push(d.clone());
            }
        }
    }
    out
}

struct Inner {
    runtime: Arc<dyn GcRuntime>,
    pods: Arc<dyn PodStateProvider>,
    events: Arc<dyn EventSink>,
    policy: ContainerGcPolicy,
    pod_logs_dir: PathBuf,
    /// One collection at a time (the periodic loop and the eviction manager).
    lock: tokio::sync::Mutex<()>,
}

/// The container garbage collector (k/k `realContainerGC` over `kuberuntime` `containerGC`).
/// Cheap to clone; clones share one collector.
#[derive(Clone)]
pub struct ContainerGc {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ContainerGc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerGc")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl ContainerGc {
    /// A collector over `runtime` with `policy`; `pod_logs_dir` is `/var/log/pods`.
    pub fn new(
        runtime: Arc<dyn GcRuntime>,
        pods: Arc<dyn PodStateProvider>,
        events: Arc<dyn EventSink>,
        policy: ContainerGcPolicy,
        pod_logs_dir: PathBuf,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                runtime,
                pods,
                events,
                policy,
                pod_logs_dir,
                lock: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> ContainerGcPolicy {
        self.inner.policy
    }

    /// One periodic collection (k/k `GarbageCollect(ctx, policy, allSourcesReady, false)`).
    ///
    /// Errors: listing containers or sandboxes, or reading the pod logs directory, failed (one
    /// error, or [`GcError::Aggregate`]). Failed removals are logged, not returned, as in Go.
    pub async fn garbage_collect(&self) -> Result<(), GcError> {
        self.collect(false).await
    }

    /// The eviction manager's disk reclaim (k/k `DeleteAllUnusedContainers`, `evictNonDeletedPods`
    /// true): as [`Self::garbage_collect`], and every dead container and sandbox of pods that
    /// will not run again (terminal phase, or gone) goes, not only of deleted ones. Live pods
    /// keep their newest dead container per container name, as in Go.
    ///
    /// Errors: as [`Self::garbage_collect`].
    pub async fn delete_all_unused_containers(&self) -> Result<(), GcError> {
        tracing::info!("Attempting to delete unused containers");
        self.collect(true).await
    }

    async fn collect(&self, evict_non_deleted_pods: bool) -> Result<(), GcError> {
        let i = &*self.inner;
        let _one = i.lock.lock().await;
        let mut errors = Vec::new();
        let containers = i
            .runtime
            .list_containers()
            .await
            .map_err(|source| GcError::Runtime {
                op: "listing containers",
                source,
            })?;
        let sandboxes = match i.runtime.list_sandboxes().await {
            Ok(s) => s,
            Err(source) => {
                errors.push(GcError::Runtime {
                    op: "listing pod sandboxes",
                    source,
                });
                Vec::new()
            }
        };
        let log_dirs = if i.pods.sources_ready() {
            match read_dir_names(&i.pod_logs_dir).await {
                Ok(d) => d,
                Err(source) => {
                    errors.push(GcError::ReadLogsDir {
                        path: i.pod_logs_dir.clone(),
                        source,
                    });
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let now_ns = k8s_openapi::jiff::Timestamp::now().as_nanosecond() as i64;
        let p = plan(
            &containers,
            &sandboxes,
            &log_dirs,
            &i.policy,
            &*i.pods,
            now_ns,
            evict_non_deleted_pods,
        );
        self.apply(&p).await;
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(GcError::Aggregate(errors)),
        }
    }

    async fn apply(&self, p: &GcPlan) {
        let i = &*self.inner;
        for c in &p.containers {
            if c.stop_first {
                if let Err(e) = i.runtime.stop_container(&c.id).await {
                    tracing::warn!(container.id = %c.id, error = %e, "Failed to stop container");
                    continue;
                }
            }
            tracing::debug!(container.id = %c.id, container.name = %c.name, "Removing container");
            if let Err(e) = i.runtime.remove_container(&c.id).await {
                if !e.is_not_found() {
                    tracing::warn!(container.id = %c.id, error = %e, "Failed to remove container");
                }
            }
        }
        for id in &p.sandboxes {
            tracing::debug!(sandbox.id = %id, "Removing sandbox");
            // As Go: stop first (a no-op for a stopped sandbox), guarding against a sandbox
            // whose stop never happened.
            if let Err(e) = i.runtime.stop_sandbox(id).await {
                if !e.is_not_found() {
                    tracing::warn!(sandbox.id = %id, error = %e, "Failed to stop sandbox before removing");
                }
                continue;
            }
            if let Err(e) = i.runtime.remove_sandbox(id).await {
                if !e.is_not_found() {
                    tracing::warn!(sandbox.id = %id, error = %e, "Failed to remove sandbox");
                }
            }
        }
        for d in &p.log_dirs {
            tracing::debug!(dir = %d, "Removing pod logs");
            let path = i.pod_logs_dir.join(d);
            if let Err(e) = tokio::fs::remove_dir_all(&path).await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(path = %path.display(), error = %e, "Failed to remove pod logs directory");
                }
            }
        }
        if !p.containers.is_empty() || !p.sandboxes.is_empty() || !p.log_dirs.is_empty() {
            tracing::info!(
                containers = p.containers.len(),
                sandboxes = p.sandboxes.len(),
                log_dirs = p.log_dirs.len(),
                "container garbage collection removed dead objects"
            );
        }
    }

    /// Collects every `period` (the first run at once, as Go's `wait.Until`) until `cancel`;
    /// a failure is logged and recorded as a `ContainerGCFailed` Warning event on the Node with
    /// the error as its message (k/k `StartGarbageCollection`).
    pub async fn run(self, period: Duration, cancel: CancellationToken) {
        let mut failed_before = false;
        loop {
            let span = tracing::info_span!("container_gc");
            let r = tracing::Instrument::instrument(self.garbage_collect(), span.clone()).await;
            let _g = span.enter();
            match r {
                Err(e) => {
                    tracing::error!(error = %e, "Container garbage collection failed");
                    self.inner
                        .events
                        .warning(super::reason::CONTAINER_GC_FAILED, e.to_string());
                    failed_before = true;
                }
                Ok(()) if failed_before => {
                    tracing::info!("Container garbage collection succeeded");
                    failed_before = false;
                }
                Ok(()) => tracing::debug!("Container garbage collection succeeded"),
            }
            drop(_g);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
        }
    }
}

async fn read_dir_names(dir: &std::path::Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut rd = tokio::fs::read_dir(dir).await?;
    while let Some(e) = rd.next_entry().await? {
        out.push(e.file_name().to_string_lossy().into_owned());
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::testing::*;

    const S: i64 = 1_000_000_000;

    fn c(id: &str, uid: &str, name: &str, state: ContainerState, t: i64) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            sandbox_id: format!("sb-{uid}"),
            pod_uid: uid.into(),
            name: name.into(),
            state,
            created_at_ns: t * S,
            image_id: "sha256:img".into(),
            image: "busybox".into(),
        }
    }
    fn sb(id: &str, uid: &str, ready: bool, t: i64) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            pod_uid: uid.into(),
            ready,
            created_at_ns: t * S,
        }
    }
    fn ids(p: &GcPlan) -> Vec<&str> {
        p.containers.iter().map(|c| c.id.as_str()).collect()
    }
    use ContainerState::*;

    #[test]
    fn keeps_the_newest_dead_container_per_container_name() {
        let pods = FakePods::synced().with("p1", crate::pod::states::WorkerState::Running);
        let cs = vec![
            c("a1", "p1", "app", Exited, 10),
            c("a2", "p1", "app", Exited, 20),
            c("a3", "p1", "app", Exited, 30),
            c("a4", "p1", "app", Running, 40),
            c("s1", "p1", "side", Exited, 5),
        ];
        let p = plan(
            &cs,
            &[],
            &[],
            &ContainerGcPolicy::default(),
            &pods,
            100 * S,
            false,
        );
        assert_eq!(
            ids(&p),
            vec!["a1", "a2"],
            "oldest first, newest dead and running kept"
        );
    }

    #[test]
    fn running_containers_are_never_collected() {
        let pods = FakePods::synced();
        // Even for a pod that is gone.
        let cs = vec![
            c("r", "gone", "app", Running, 1),
            c("d", "gone", "app", Exited, 2),
        ];
        let p = plan(
            &cs,
            &[],
            &[],
            &ContainerGcPolicy::default(),
            &pods,
            100 * S,
            false,
        );
        assert_eq!(ids(&p), vec!["d"]);
    }

    #[test]
    fn containers_younger_than_min_age_stay() {
        let pods = FakePods::synced().with("p1", crate::pod::states::WorkerState::Running);
        let cs = vec![
            c("old", "p1", "app", Exited, 10),
            c("mid", "p1", "app", Exited, 50),
            c("young", "p1", "app", Exited, 95),
        ];
        let policy = ContainerGcPolicy {
            min_age: Duration::from_secs(10),
            ..Default::default()
        };
        let p = plan(&cs, &[], &[], &policy, &pods, 100 * S, false);
        // "young" is not evictable at all; of the two evictable ones the newest is kept.
        assert_eq!(ids(&p), vec!["old"]);
    }

    #[test]
    fn gone_pods_lose_every_dead_container_once_sources_are_ready() {
        let cs = vec![
            c("g1", "gone", "app", Exited, 10),
            c("g2", "gone", "app", Exited, 20),
        ];
        let p = plan(
            &cs,
            &[],
            &[],
            &ContainerGcPolicy::default(),
            &FakePods::synced(),
            100 * S,
            false,
        );
        assert_eq!(ids(&p), vec!["g1", "g2"]);
        // Before the sources synced, an unknown pod is only trimmed to the limit.
        let p = plan(
            &cs,
            &[],
            &[],
            &ContainerGcPolicy::default(),
            &FakePods::default(),
            100 * S,
            false,
        );
        assert_eq!(ids(&p), vec!["g1"]);
    }

    #[test]
    fn terminating_pods_are_left_to_their_worker() {
        let pods = FakePods::synced().with("t", crate::pod::states::WorkerState::Terminating);
        let cs = vec![
            c("t1", "t", "app", Exited, 10),
            c("t2", "t", "app", Exited, 20),
            c("t3", "t", "app", Exited, 30),
        ];
        let sbs = vec![sb("old", "t", false, 1), sb("new", "t", false, 2)];
        let p = plan(
            &cs,
            &sbs,
            &[],
            &ContainerGcPolicy::default(),
            &pods,
            100 * S,
            false,
        );
        assert_eq!(p, GcPlan::default());
    }

    #[test]
    fn terminal_pods_keep_containers_unless_evicting_non_deleted_pods() {
        let pods = FakePods::synced()
            .with("done", crate::pod::states::WorkerState::Terminal)
            .with("live", crate::pod::states::WorkerState::Running);
        let cs = vec![
            c("d1", "done", "app", Exited, 10),
            c("l1", "live", "app", Exited, 10),
            c("l2", "live", "app", Exited, 20),
        ];
        let sbs = vec![
            sb("sb-done", "done", false, 1),
            sb("sb-live", "live", true, 1),
        ];
        let p = plan(
            &cs,
            &sbs,
            &[],
            &ContainerGcPolicy::default(),
            &pods,
            100 * S,
            false,
        );
        assert_eq!(ids(&p), vec!["l1"]);
        assert!(p.sandboxes.is_empty(), "{p:?}");
        let p = plan(
            &cs,
            &sbs,
            &[],
            &ContainerGcPolicy::default(),
            &pods,
            100 * S,
            true,
        );
        assert_eq!(ids(&p), vec!["d1", "l1"]);
        assert_eq!(
            p.sandboxes,
            vec!["sb-done"],
            "its last container goes, so does the sandbox"
        );
    }

    #[test]
    fn global_limit_shares_evenly_then_removes_oldest() {
        let pods = FakePods::synced()
            .with("a", crate::pod::states::WorkerState::Running)
            .with("b", crate::pod::states::WorkerState::Running);
        let cs = vec![
            c("a1", "a", "x", Exited, 1),
            c("a2", "a", "x", Exited, 2),
            c("a3", "a", "x", Exited, 3),
            c("b1", "b", "y", Exited, 4),
            c("b2", "b", "y", Exited, 5),
        ];
        let policy = ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: -1,
            max_containers: 3,
        };
        // Share 3/2 = 1 per unit: a3 and b2 stay (2 <= 3).
        let p = plan(&cs, &[], &[], &policy, &pods, 100 * S, false);
        let mut got = ids(&p);
        got.sort();
        assert_eq!(got, vec!["a1", "a2", "b1"]);
        // Max 1 over 2 units: 1 each (at least 1), then the oldest overall goes.
        let policy = ContainerGcPolicy {
            max_containers: 1,
            ..policy
        };
        let p = plan(&cs, &[], &[], &policy, &pods, 100 * S, false);
        let mut got = ids(&p);
        got.sort();
        assert_eq!(got, vec!["a1", "a2", "a3", "b1"]);
    }

    #[test]
    fn no_limit_policies_keep_everything_of_live_pods() {
        let pods = FakePods::synced().with("p", crate::pod::states::WorkerState::Running);
        let cs = vec![c("1", "p", "x", Exited, 1), c("2", "p", "x", Exited, 2)];
        let policy = ContainerGcPolicy {
            min_age: Duration::ZERO,
            max_per_pod_container: -1,
            max_containers: -1,
        };
        assert_eq!(
            plan(&cs, &[], &[], &policy, &pods, 10 * S, false),
            GcPlan::default()
        );
    }

    #[test]
    fn unknown_state_containers_are_stopped_first() {
        let cs = vec![c("u", "gone", "app", Unknown, 1)];
        let p = plan(
            &cs,
            &[],
            &[],
            &ContainerGcPolicy::default(),
            &FakePods::synced(),
            10 * S,
            false,
        );
        assert_eq!(
            p.containers,
            vec![ContainerRemoval {
                id: "u".into(),
                name: "app".into(),
                stop_first: true
            }]
        );
    }

    #[test]
    fn live_pods_keep_their_newest_sandbox_and_active_ones() {
        let pods = FakePods::synced().with("p", crate::pod::states::WorkerState::Running);
        let sbs = vec![
            sb("s1", "p", false, 1),
            sb("s2", "p", false, 2),
            sb("s3", "p", false, 3),
            sb("s4", "p", false, 4),
        ];
        // s2 still holds a container that stays (the newest dead one).
        let mut cs = vec![c("c2", "p", "app", Exited, 2)];
        cs[0].sandbox_id = "s2".into();
        let p = plan(
            &cs,
            &sbs,
            &[],
            &ContainerGcPolicy::default(),
            &pods,
            10 * S,
            false,
        );
        assert_eq!(
            p.sandboxes,
            vec!["s1", "s3"],
            "oldest first; s4 newest, s2 in use"
        );
    }

    #[test]
    fn gone_pods_lose_all_inactive_sandboxes_but_not_ready_ones() {
        let sbs = vec![
            sb("dead", "gone", false, 1),
            sb("ready", "gone", true, 2),
            sb("newest-dead", "gone2", false, 3),
        ];
        let p = plan(
            &[],
            &sbs,
            &[],
            &ContainerGcPolicy::default(),
            &FakePods::synced(),
            10 * S,
            false,
        );
        assert_eq!(p.sandboxes, vec!["dead", "newest-dead"]);
    }

    #[test]
    fn sandbox_emptied_by_this_collection_goes_in_the_same_pass() {
        let cs = vec![c("c", "gone", "app", Exited, 1)];
        let sbs = vec![sb("sb-gone", "gone", false, 1)];
        let p = plan(
            &cs,
            &sbs,
            &[],
            &ContainerGcPolicy::default(),
            &FakePods::synced(),
            10 * S,
            false,
        );
        assert_eq!(ids(&p), vec!["c"]);
        assert_eq!(p.sandboxes, vec!["sb-gone"]);
    }

    #[test]
    fn log_dirs_of_gone_pods_go_once_sources_are_ready() {
        let dirs = vec![
            "default_web_uid-live".to_string(),
            "default_old_uid-gone".to_string(),
            "kube-system_my_pod_with_underscores_uid-t".to_string(),
        ];
        let pods = FakePods::synced()
            .with("uid-live", crate::pod::states::WorkerState::Running)
            .with("uid-t", crate::pod::states::WorkerState::Terminating);
        let p = plan(
            &[],
            &[],
            &dirs,
            &ContainerGcPolicy::default(),
            &pods,
            10 * S,
            false,
        );
        assert_eq!(p.log_dirs, vec!["default_old_uid-gone"]);
        let p = plan(
            &[],
            &[],
            &dirs,
            &ContainerGcPolicy::default(),
            &FakePods::default(),
            10 * S,
            false,
        );
        assert!(p.log_dirs.is_empty());
        assert_eq!(pod_uid_from_log_dir("ns_name_abc-123"), "abc-123");
    }

    #[tokio::test]
    async fn collector_removes_what_the_plan_says_and_the_log_dir() {
        let dir = std::env::temp_dir().join(format!("deckhand-gc-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ns_gone_uid-gone/app")).unwrap();
        std::fs::create_dir_all(dir.join("ns_live_uid-live/app")).unwrap();
        let rt = Arc::new(FakeRuntime::default());
        {
            let mut s = rt.state.lock().unwrap();
            s.containers = vec![
                c("g1", "uid-gone", "app", Exited, 1),
                c("l1", "uid-live", "app", Exited, 1),
                c("l2", "uid-live", "app", Exited, 2),
                c("l3", "uid-live", "app", Running, 3),
            ];
            s.sandboxes = vec![
                sb("sb-uid-gone", "uid-gone", false, 1),
                sb("sb-uid-live", "uid-live", true, 1),
            ];
        }
        let pods =
            Arc::new(FakePods::synced().with("uid-live", crate::pod::states::WorkerState::Running));
        let events = Arc::new(FakeEvents::default());
        let gc = ContainerGc::new(
            rt.clone(),
            pods,
            events.clone(),
            ContainerGcPolicy::default(),
            dir.clone(),
        );
        gc.clone().garbage_collect().await.unwrap();
        let s = rt.state.lock().unwrap();
        let mut left: Vec<&str> = s.containers.iter().map(|c| c.id.as_str()).collect();
        left.sort();
        assert_eq!(left, vec!["l2", "l3"]);
        assert_eq!(s.sandboxes.len(), 1);
        assert!(s.stopped_sandboxes.contains(&"sb-uid-gone".to_string()));
        assert!(!dir.join("ns_gone_uid-gone").exists());
        assert!(dir.join("ns_live_uid-live").exists());
        assert!(events.events.lock().unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_failed_listing_is_an_error_and_an_event() {
        let rt = Arc::new(FakeRuntime::default());
        rt.state.lock().unwrap().fail_list = true;
        let events = Arc::new(FakeEvents::default());
        let gc = ContainerGc::new(
            rt,
            Arc::new(FakePods::synced()),
            events.clone(),
            ContainerGcPolicy::default(),
            std::env::temp_dir(),
        );
        let e = gc.garbage_collect().await.unwrap_err();
        assert!(e.to_string().contains("listing containers"), "{e}");
        let cancel = CancellationToken::new();
        cancel.cancel();
        gc.run(Duration::from_secs(60), cancel).await;
        let ev = events.events.lock().unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].0, "ContainerGCFailed");
    }
}
