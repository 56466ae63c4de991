//! Running under systemd: the service manager notifications of a `Type=notify` unit
//! (sd_notify(3): `READY=1`, `STATUS=...`, `WATCHDOG=1`, `STOPPING=1`), the sync loop heartbeat
//! the watchdog pings depend on, and whether stderr is the journal (then deckhand logs
//! structured entries to journald). The Go kubelet has no counterpart (its unit is
//! `Type=simple`); the heartbeat mirrors its `syncLoopMonitor` behind `/healthz/syncloop`.
//!
//! The order of notifications is decided by [`Startup`] (pure); [`Notifier`] is the seam between
//! it and the socket ([`SdNotifier`], the `sd-notify` crate), so the order is unit-tested.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One notification to the service manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// `STATUS=<text>`: one line shown by `systemctl status`.
    Status(String),
    /// `READY=1`: start-up finished, deckhand serves.
    Ready,
    /// `WATCHDOG=1`: still alive.
    Watchdog,
    /// `STOPPING=1`: shutting down.
    Stopping,
}

/// Where notifications go.
pub trait Notifier: Send + Sync {
    /// Sends one notification; errors are the notifier's to log (a missing socket is not one).
    fn notify(&self, notice: &Notice);
}

/// Notifies through `$NOTIFY_SOCKET` (nothing happens when deckhand does not run under
/// systemd, i.e. the variable is unset).
#[derive(Debug, Default, Clone, Copy)]
pub struct SdNotifier;

impl Notifier for SdNotifier {
    fn notify(&self, notice: &Notice) {
        use sd_notify::NotifyState;
        let state = match notice {
            Notice::Status(s) => NotifyState::Status(s),
            Notice::Ready => NotifyState::Ready,
            Notice::Watchdog => NotifyState::Watchdog,
            Notice::Stopping => NotifyState::Stopping,
        };
        if let Err(e) = sd_notify::notify(&[state]) {
            tracing::warn!(error = %e, "notifying the service manager failed");
        }
    }
}

/// A start-up milestone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Milestone {
    /// The Node object is registered with the API server (or there is no API server).
    NodeRegistered,
    /// The kubelet server listens.
    ServerListening,
    /// Every pod source (API server, static pod directory) delivered its first complete list.
    PodSourcesSynced,
}

impl Milestone {
    fn status(self) -> &'static str {
        match self {
            Milestone::NodeRegistered => "node registered",
            Milestone::ServerListening => "kubelet server listening",
            Milestone::PodSourcesSynced => "pod sources synced",
        }
    }
}

/// The start-up sequence: a `STATUS=` line per milestone and, once all three are reached,
/// `READY=1` (exactly once) followed by a running status. Pure.
#[derive(Debug, Default)]
pub struct Startup {
    reached: Vec<Milestone>,
    ready: bool,
}

impl Startup {
    /// The notices to send when `m` is reached (none when it was reached before).
    pub fn reach(&mut self, m: Milestone) -> Vec<Notice> {
        if self.reached.contains(&m) {
            return Vec::new();
        }
        self.reached.push(m);
        let mut out = Vec::new();
        if self.reached.len() == 3 && !self.ready {
            self.ready = true;
            out.push(Notice::Status(format!("{}; ready", m.status())));
            out.push(Notice::Ready);
            out.push(Notice::Status("running".into()));
        } else {
            out.push(Notice::Status(format!(
                "starting: {} ({}/3)",
                m.status(),
                self.reached.len()
            )));
        }
        out
    }

    /// Whether `READY=1` has been sent.
    pub fn is_ready(&self) -> bool {
        self.ready
    }
}

/// Heartbeat of the pod sync loop (the pod worker dispatcher): it beats on every iteration and
/// at least every [`SyncLoopMonitor::BEAT`]; the watchdog is only fed while it is fresh, so a
/// hung dispatcher gets deckhand restarted. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct SyncLoopMonitor {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Default for SyncLoopMonitor {
    fn default() -> Self {
        Self::new()
    }
}

impl SyncLoopMonitor {
    /// How often the sync loop beats when idle (the Go kubelet's housekeeping period, 2 s).
    pub const BEAT: Duration = Duration::from_secs(2);

    /// A monitor that has just beaten.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records an iteration of the sync loop.
    pub fn beat(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Time since the last beat.
    pub fn age(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// Whether the loop beat within `max_age`.
    pub fn healthy(&self, max_age: Duration) -> bool {
        self.age() <= max_age
    }
}

/// How often to send `WATCHDOG=1`: half of the unit's `WatchdogSec=` (sd_watchdog_enabled(3)),
/// or None when the watchdog is off.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|d| d / 2)
}

/// Whether `$JOURNAL_STREAM` (`<device>:<inode>`, set by systemd when stdout/stderr go to the
/// journal) names the file stderr is (`dev`, `ino` from fstat(2)). Pure.
pub fn journal_stream_matches(journal_stream: &str, dev: u64, ino: u64) -> bool {
    let Some((d, i)) = journal_stream.trim().split_once(':') else {
        return false;
    };
    d.parse::<u64>().ok() == Some(dev) && i.parse::<u64>().ok() == Some(ino)
}

/// Whether stderr is connected to the journal (systemd(1) `$JOURNAL_STREAM`).
pub fn stderr_is_journal() -> bool {
    let Ok(js) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr()) {
        Ok(st) => journal_stream_matches(&js, st.st_dev, st.st_ino),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<Notice>>);
    impl Notifier for Recorder {
        fn notify(&self, n: &Notice) {
            self.0.lock().unwrap().push(n.clone());
        }
    }

    #[test]
    fn ready_comes_once_after_all_milestones_in_any_order() {
        for order in [
            [
                Milestone::NodeRegistered,
                Milestone::ServerListening,
                Milestone::PodSourcesSynced,
            ],
            [
                Milestone::PodSourcesSynced,
                Milestone::NodeRegistered,
                Milestone::ServerListening,
            ],
        ] {
            let rec = Recorder::default();
            let mut s = Startup::default();
            for m in order {
                for n in s.reach(m) {
                    rec.notify(&n);
                }
                // A milestone reported twice sends nothing more.
                assert!(s.reach(m).is_empty());
            }
            let sent = rec.0.into_inner().unwrap();
            let ready_at = sent.iter().position(|n| *n == Notice::Ready).unwrap();
            assert_eq!(sent.iter().filter(|n| **n == Notice::Ready).count(), 1);
            // Three STATUS lines for the milestones before READY, "running" after.
            assert_eq!(ready_at, 3, "{sent:?}");
            assert!(sent[..ready_at]
                .iter()
                .all(|n| matches!(n, Notice::Status(_))));
            assert_eq!(sent[ready_at + 1], Notice::Status("running".into()));
            assert!(s.is_ready());
        }
    }

    #[test]
    fn no_ready_before_all_milestones() {
        let mut s = Startup::default();
        let mut sent = s.reach(Milestone::NodeRegistered);
        sent.extend(s.reach(Milestone::ServerListening));
        assert!(!sent.contains(&Notice::Ready));
        assert!(!s.is_ready());
        assert_eq!(
            sent[1],
            Notice::Status("starting: kubelet server listening (2/3)".into())
        );
    }

    #[test]
    fn monitor_goes_stale_without_beats() {
        let m = SyncLoopMonitor::new();
        m.beat();
        assert!(m.healthy(Duration::from_secs(1)));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!m.healthy(Duration::from_millis(10)));
        m.clone().beat();
        assert!(m.healthy(Duration::from_millis(10)));
    }

    #[test]
    fn journal_stream_parsing() {
        assert!(journal_stream_matches("8:12345", 8, 12345));
        assert!(!journal_stream_matches("8:12345", 8, 1));
        assert!(!journal_stream_matches("garbage", 8, 12345));
    }
}
