//! The kubelet's long-lived tasks, named and tracked in one place ([`Tasks`]), so that shutdown
//! waits for them with a deadline and says which are still running (the Go kubelet has no
//! single owner; its goroutines end with the process).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// A set of named tasks (cheap to clone; clones share the set). Each task runs in the tracing
/// span that was current when it was spawned.
#[derive(Clone, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    running: Arc<Mutex<BTreeMap<u64, String>>>,
    next: Arc<AtomicU64>,
}

/// Removes a task's name when it ends (normally, cancelled or panicking).
struct Running {
    id: u64,
    running: Arc<Mutex<BTreeMap<u64, String>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(&self.id);
        }
    }
}

impl Tasks {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `fut` as task `name` (e.g. `pod worker ns/name`, `liveness probe nginx`) in the
    /// current tracing span.
    pub fn spawn<F>(&self, name: impl Into<String>, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut r) = self.running.lock() {
            r.insert(id, name.into());
        }
        let guard = Running {
            id,
            running: self.running.clone(),
        };
        self.tracker.spawn(
            async move {
                let _guard = guard;
                fut.await;
            }
            .in_current_span(),
        );
    }

    /// The names of the tasks still running, sorted.
    pub fn running(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .running
            .lock()
            .map(|r| r.values().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Waits up to `deadline` for every task to end (they are expected to have been told to
    /// stop, e.g. through a cancellation token). Returns the names of those still running.
    pub async fn shutdown(&self, deadline: Duration) -> Vec<String> {
        self.tracker.close();
        let _ = tokio::time::timeout(deadline, self.tracker.wait()).await;
        self.running()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn shutdown_names_the_tasks_that_outlive_the_deadline() {
        let tasks = Tasks::new();
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tasks.spawn("pod worker ns/polite", async move { c.cancelled().await });
        tasks.spawn("pod worker ns/stuck", std::future::pending());
        tasks.spawn("done at once", async {});
        tokio::task::yield_now().await;
        assert_eq!(
            tasks.running(),
            ["pod worker ns/polite", "pod worker ns/stuck"]
        );
        cancel.cancel();
        let left = tasks.shutdown(Duration::from_secs(10)).await;
        assert_eq!(left, ["pod worker ns/stuck"]);
    }

    #[tokio::test]
    async fn shutdown_returns_at_once_when_everything_ended() {
        let tasks = Tasks::new();
        tasks.spawn("quick", async {});
        assert!(tasks.shutdown(Duration::from_secs(5)).await.is_empty());
    }
}
