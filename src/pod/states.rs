//! What the pod workers know about each pod UID, shared read-only with the garbage collectors
//! (the Go kubelet's `podWorkers` answering `ShouldPodContentBeRemoved`,
//! `ShouldPodRuntimeBeRemoved`, `IsPodTerminationRequested`, k/k `pkg/kubelet/pod_workers.go`).
//!
//! [`PodStates`] is written only by the dispatcher ([`super::workers::PodWorkers`]): a pod UID is
//! present while it has a worker, and forgotten once that worker has finished cleaning the pod
//! up. After the first full sync of the pod sources, a UID that is absent belongs to a pod that
//! no longer exists.

use std::sync::{Arc, RwLock};

/// A pod's stage in its worker, as far as garbage collection cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// The pod should run (or is starting): its runtime objects are in use.
    Running,
    /// The pod reached a terminal phase (Succeeded or Failed) and is not deleted: nothing will
    /// run again, its containers are kept for status and logs (the Go kubelet's `IsTerminated`
    /// without `IsDeleted`).
    Terminal,
    /// The pod is deleted (or removed from the node) and its worker is killing it and cleaning
    /// up: garbage collection leaves its objects to the worker.
    Terminating,
}

#[derive(Debug, Default)]
struct Inner {
    pods: crate::heap::ShrinkingMap<String, WorkerState>,
    synced: bool,
}

/// The pod workers' view of every pod UID; cheap to clone (one shared map).
#[derive(Debug, Clone, Default)]
pub struct PodStates {
    inner: Arc<RwLock<Inner>>,
}

impl PodStates {
    /// Records `uid`'s stage.
    pub fn set(&self, uid: &str, state: WorkerState) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        g.pods.insert(uid.to_string(), state);
    }

    /// Forgets `uid` (its worker finished the clean-up).
    pub fn remove(&self, uid: &str) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        g.pods.remove(uid);
    }

    /// Marks that the pod sources delivered their first full list: from now on an unknown UID
    /// belongs to a pod that does not exist (the Go kubelet's `podsSynced`).
    pub fn mark_synced(&self) {
        let mut g = self.inner.write().unwrap_or_else(|e| e.into_inner());
        g.synced = true;
    }

    /// `uid`'s stage, `None` when no worker has it.
    pub fn get(&self, uid: &str) -> Option<WorkerState> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.pods.get(uid).copied()
    }

    /// True once the pod sources delivered their first full list.
    pub fn synced(&self) -> bool {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        g.synced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_shared_between_clones() {
        let a = PodStates::default();
        let b = a.clone();
        a.set("u1", WorkerState::Running);
        assert_eq!(b.get("u1"), Some(WorkerState::Running));
        assert!(!b.synced());
        a.mark_synced();
        assert!(b.synced());
        b.remove("u1");
        assert_eq!(a.get("u1"), None);
    }
}
