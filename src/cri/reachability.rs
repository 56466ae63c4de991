//! Whether the container runtime answers, judged from the outcome of every CRI call.
//!
//! The Go kubelet keeps the same fact in its runtime state (k/k `pkg/kubelet/runtime.go`,
//! `runtimeState`) and, while the runtime is down, skips pod synchronization with one
//! "container runtime is down" error per attempt. deckhand's pod workers keep trying on their
//! own schedule; this tracker keeps the log to one line when the runtime goes away and one when
//! it is back, and lets the pod workers and the PLEG act at once when it is back (a pod created
//! during a containerd restart starts as soon as containerd answers, not at its worker's next
//! retry).

use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What one call's outcome changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing: the runtime was and is reachable, or was and is unreachable.
    None,
    /// The first failed call after the runtime had answered.
    WentDown,
    /// The first answer after calls had failed.
    CameBack,
}

/// The transition that a call's outcome (`unreachable`: the call failed because the runtime could
/// not be reached) makes from the current state (`down`).
pub fn transition(down: bool, unreachable: bool) -> Transition {
    match (down, unreachable) {
        (false, true) => Transition::WentDown,
        (true, false) => Transition::CameBack,
        _ => Transition::None,
    }
}

/// True when a gRPC status means the runtime's CRI service could not be reached or cannot
/// serve yet: the socket is missing or refuses (`Unavailable`), the connection broke during the
/// call (tonic reports `Unknown: transport error`), or containerd answers while its CRI plugin is
/// still starting (`Unknown: server is not initialized yet`, for a second or so after a restart).
/// Any other status is an answer from the runtime.
pub fn status_is_unreachable(code: tonic::Code, message: &str) -> bool {
    match code {
        tonic::Code::Unavailable => true,
        tonic::Code::Unknown => {
            message.contains("transport error") || message.contains("server is not initialized yet")
        }
        _ => false,
    }
}

/// The runtime's reachability, shared by every clone of a [`super::CriClient`].
#[derive(Debug)]
pub struct Reachability {
    down_since: Mutex<Option<Instant>>,
    /// Bumped each time the runtime answers again after being unreachable.
    back: watch::Sender<u64>,
}

impl Default for Reachability {
    fn default() -> Self {
        Self {
            down_since: Mutex::new(None),
            back: watch::channel(0).0,
        }
    }
}

impl Reachability {
    /// Records one call's outcome; logs and signals a change.
    pub fn observe(&self, unreachable: bool) {
        let mut down = self.down_since.lock().unwrap();
        match transition(down.is_some(), unreachable) {
            Transition::None => {}
            Transition::WentDown => {
                *down = Some(Instant::now());
                // not in the span of whichever pod's call saw it first
                tracing::warn!(
                    parent: None,
                    "container runtime unreachable; pod syncs retry until it answers again"
                );
            }
            Transition::CameBack => {
                let for_s = down.take().map_or(Duration::ZERO, |t| t.elapsed());
                tracing::info!(
                    parent: None,
                    unreachable_for_s = for_s.as_secs_f64(),
                    "container runtime reachable again"
                );
                self.back.send_modify(|n| *n += 1);
            }
        }
    }

    /// False from the first call that could not reach the runtime until the next answer.
    pub fn is_reachable(&self) -> bool {
        self.down_since.lock().unwrap().is_none()
    }

    /// A receiver that changes each time the runtime answers again after an outage.
    pub fn subscribe_back(&self) -> watch::Receiver<u64> {
        self.back.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions() {
        let table = [
            (false, false, Transition::None),
            (false, true, Transition::WentDown),
            (true, true, Transition::None),
            (true, false, Transition::CameBack),
        ];
        for (down, unreachable, want) in table {
            assert_eq!(transition(down, unreachable), want, "{down} {unreachable}");
        }
    }

    #[test]
    fn which_statuses_mean_unreachable() {
        use tonic::Code;
        let table = [
            (
                Code::Unavailable,
                "No such file or directory (os error 2)",
                true,
            ),
            (Code::Unavailable, "Connection refused (os error 111)", true),
            (Code::Unknown, "transport error", true),
            (Code::Unknown, "server is not initialized yet", true),
            (Code::Unknown, "failed to create containerd task", false),
            (
                Code::NotFound,
                "an error occurred when try to find container",
                false,
            ),
            (Code::DeadlineExceeded, "context deadline exceeded", false),
            (Code::Internal, "transport error", false),
        ];
        for (code, msg, want) in table {
            assert_eq!(status_is_unreachable(code, msg), want, "{code:?} {msg}");
        }
    }

    #[tokio::test]
    async fn one_signal_per_outage() {
        let r = Reachability::default();
        let mut back = r.subscribe_back();
        r.observe(false);
        assert!(r.is_reachable());
        r.observe(true);
        r.observe(true);
        assert!(!r.is_reachable());
        assert!(!back.has_changed().unwrap());
        r.observe(false);
        r.observe(false);
        assert!(r.is_reachable());
        assert!(back.has_changed().unwrap());
        assert_eq!(*back.borrow_and_update(), 1);
    }
}
