//! The runtime state each pod worker last synced against, so that a relist wakes a worker only
//! for a change the worker has not seen.
//!
//! The relist compares two snapshots of the runtime and wakes the worker of every pod whose
//! sandboxes or containers changed. Most of those changes are the worker's own doing: the
//! sandbox it made, the container it created and started. The worker reads the runtime right
//! after carrying its actions out (for the status it writes), so by the time the relist sees
//! them the worker already knows; waking it costs a full runtime read (ListPodSandbox,
//! ListContainers, PodSandboxStatus, ContainerStatus per container) and finds nothing to do.
//!
//! The Go kubelet gets the same economy differently: its generic PLEG's relist reads each
//! changed pod's status once into the PLEG pod cache (`pkg/kubelet/pleg/generic.go`
//! updateCache), and the pod worker's sync reads that cache instead of the runtime.
//!
//! A worker records here the state it read when that state leaves it nothing to do
//! ([`crate::pod::actions::PodActions::changes_nothing`]); a relist then skips a pod whose
//! sandboxes and containers are exactly the recorded ones ([`relist_wakes`]). Anything else,
//! a state the worker did not see or a worker that recorded nothing, wakes it as before.

use crate::heap::ShrinkingMap;
use crate::pod::runtime::{ContainerState, PodRuntimeStatus};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The relist's view of one runtime object: the pod UID it belongs to and its state
/// (containers: the CRI `ContainerState` value; sandboxes: [`SANDBOX_STATE_BASE`] plus the CRI
/// `PodSandboxState` value), keyed by the object's id.
pub type Snapshot = HashMap<String, (String, i32)>;

/// Added to a sandbox's CRI state in a [`Snapshot`], so that sandbox and container states never
/// compare equal.
pub const SANDBOX_STATE_BASE: i32 = 100;

/// One pod's objects as a worker saw them: id → state, encoded as in [`Snapshot`].
pub type PodObjects = BTreeMap<String, i32>;

/// The runtime state each pod worker last synced against, by pod UID. Cheap to clone (one
/// shared map).
#[derive(Clone, Default)]
pub struct SyncedStates {
    inner: Arc<Mutex<ShrinkingMap<String, PodObjects>>>,
}

impl SyncedStates {
    /// Records that the worker of pod `uid` has acted on `rt` and has nothing left to do for it.
    pub fn record(&self, uid: &str, rt: &PodRuntimeStatus) {
        self.inner
            .lock()
            .unwrap()
            .insert(uid.to_string(), pod_objects(rt));
    }

    /// Forgets what the worker of pod `uid` saw: the next change the relist finds wakes it.
    pub fn forget(&self, uid: &str) {
        let mut g = self.inner.lock().unwrap();
        g.remove(uid);
    }

    /// What the worker of pod `uid` recorded, if anything.
    pub fn get(&self, uid: &str) -> Option<PodObjects> {
        self.inner.lock().unwrap().get(uid).cloned()
    }

    /// Keeps only the pods `keep` says yes to (the relist drops pods the runtime no longer
    /// holds anything of, so the map stays as small as the runtime's pod count).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut g = self.inner.lock().unwrap();
        g.retain(|uid, _| keep(uid));
    }

    /// How many pods have a record.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap().len()
    }

    /// Whether no pod has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `rt` encoded as the relist encodes the runtime ([`Snapshot`]).
pub fn pod_objects(rt: &PodRuntimeStatus) -> PodObjects {
    use crate::cri::api;
    let mut out = PodObjects::new();
    for s in &rt.sandboxes {
        let state = if s.ready {
            api::PodSandboxState::SandboxReady
        } else {
            api::PodSandboxState::SandboxNotready
        };
        out.insert(s.id.clone(), SANDBOX_STATE_BASE + state as i32);
    }
    for c in &rt.containers {
        let state = match c.state {
            ContainerState::Created => api::ContainerState::ContainerCreated,
            ContainerState::Running => api::ContainerState::ContainerRunning,
            ContainerState::Exited => api::ContainerState::ContainerExited,
            ContainerState::Unknown => api::ContainerState::ContainerUnknown,
        };
        out.insert(c.id.clone(), state as i32);
    }
    out
}

/// The pod UIDs whose workers a relist wakes, sorted: every pod with an object that is new,
/// gone or in another state since the previous snapshot `prev`, except a pod whose objects in
/// `snap` are exactly what its worker recorded in `synced` (its own sandbox and container
/// starts, already read back).
pub fn relist_wakes(prev: &Snapshot, snap: &Snapshot, synced: &SyncedStates) -> Vec<String> {
    let mut changed: Vec<String> = vec![];
    for (id, (uid, state)) in snap {
        if prev.get(id).map(|(_, s)| s) != Some(state) {
            changed.push(uid.clone());
        }
    }
    for (id, (uid, _)) in prev {
        if !snap.contains_key(id) {
            changed.push(uid.clone());
        }
    }
    changed.sort();
    changed.dedup();
    changed.retain(|uid| match synced.get(uid) {
        None => true,
        Some(seen) => {
            let now: PodObjects = snap
                .iter()
                .filter(|(_, (u, _))| u == uid)
                .map(|(id, (_, s))| (id.clone(), *s))
                .collect();
            now != seen
        }
    });
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::runtime::{ContainerStatus, SandboxStatus};

    const READY: i32 = SANDBOX_STATE_BASE;
    const NOT_READY: i32 = SANDBOX_STATE_BASE + 1;
    const CREATED: i32 = 0;
    const RUNNING: i32 = 1;
    const EXITED: i32 = 2;

    fn snap(objects: &[(&str, &str, i32)]) -> Snapshot {
        objects
            .iter()
            .map(|(id, uid, s)| (id.to_string(), (uid.to_string(), *s)))
            .collect()
    }

    fn synced(records: &[(&str, &[(&str, i32)])]) -> SyncedStates {
        let s = SyncedStates::default();
        for (uid, objects) in records {
            s.inner.lock().unwrap().insert(
                uid.to_string(),
                objects
                    .iter()
                    .map(|(id, st)| (id.to_string(), *st))
                    .collect(),
            );
        }
        s
    }

    #[test]
    fn a_relist_wakes_only_workers_that_have_not_seen_the_change() {
        let cases: &[(&str, Snapshot, Snapshot, SyncedStates, &[&str])] = &[
            (
                "nothing recorded: a new sandbox and container wake the worker",
                snap(&[]),
                snap(&[("s1", "a", READY), ("c1", "a", RUNNING)]),
                synced(&[]),
                &["a"],
            ),
            (
                "the worker read back its own start: no wake",
                snap(&[]),
                snap(&[("s1", "a", READY), ("c1", "a", RUNNING)]),
                synced(&[("a", &[("s1", READY), ("c1", RUNNING)])]),
                &[],
            ),
            (
                "the container exited after the worker's read: wake",
                snap(&[("s1", "a", READY), ("c1", "a", RUNNING)]),
                snap(&[("s1", "a", READY), ("c1", "a", EXITED)]),
                synced(&[("a", &[("s1", READY), ("c1", RUNNING)])]),
                &["a"],
            ),
            (
                "the relist caught the container between create and start: wake",
                snap(&[]),
                snap(&[("s1", "a", READY), ("c1", "a", CREATED)]),
                synced(&[("a", &[("s1", READY), ("c1", RUNNING)])]),
                &["a"],
            ),
            (
                "an object the worker did not see (made behind its back): wake",
                snap(&[("s1", "a", READY), ("c1", "a", RUNNING)]),
                snap(&[
                    ("s1", "a", READY),
                    ("c1", "a", RUNNING),
                    ("c9", "a", RUNNING),
                ]),
                synced(&[("a", &[("s1", READY), ("c1", RUNNING)])]),
                &["a"],
            ),
            (
                "an object gone that the worker still counted on: wake",
                snap(&[("s1", "a", READY), ("c1", "a", RUNNING)]),
                snap(&[("s1", "a", READY)]),
                synced(&[("a", &[("s1", READY), ("c1", RUNNING)])]),
                &["a"],
            ),
            (
                "the worker already saw the sandbox stopped and the container gone: no wake",
                snap(&[("s1", "a", READY), ("c1", "a", EXITED)]),
                snap(&[("s1", "a", NOT_READY)]),
                synced(&[("a", &[("s1", NOT_READY)])]),
                &[],
            ),
            (
                "one pod's record does not hold back another's wake",
                snap(&[]),
                snap(&[("s1", "a", READY), ("s2", "b", READY)]),
                synced(&[("a", &[("s1", READY)])]),
                &["b"],
            ),
            (
                "an unchanged pod wakes nobody, whatever its record",
                snap(&[("s1", "a", READY)]),
                snap(&[("s1", "a", READY)]),
                synced(&[("a", &[("s1", NOT_READY)])]),
                &[],
            ),
        ];
        for (name, prev, now, synced, want) in cases {
            assert_eq!(relist_wakes(prev, now, synced), *want, "{name}");
        }
    }

    #[test]
    fn a_runtime_status_is_encoded_as_the_relist_encodes_it() {
        let c = |id: &str, state| ContainerStatus {
            id: id.into(),
            sandbox_id: "s1".into(),
            name: id.into(),
            attempt: 0,
            state,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            hash: String::new(),
        };
        let s = |id: &str, ready| SandboxStatus {
            id: id.into(),
            attempt: 0,
            ready,
            ip: None,
            additional_ips: vec![],
            created_at: 0,
        };
        let rt = PodRuntimeStatus {
            sandboxes: vec![s("s2", true), s("s1", false)],
            containers: vec![
                c("c1", ContainerState::Created),
                c("c2", ContainerState::Running),
                c("c3", ContainerState::Exited),
                c("c4", ContainerState::Unknown),
            ],
        };
        let want: PodObjects = [
            ("s2", READY),
            ("s1", NOT_READY),
            ("c1", CREATED),
            ("c2", RUNNING),
            ("c3", EXITED),
            ("c4", 3),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(pod_objects(&rt), want);
    }
}
