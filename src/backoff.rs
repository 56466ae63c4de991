//! Exponential back-off per key, with the semantics of client-go's `util/flowcontrol.Backoff`
//! as the Go kubelet uses it for crash loops (`CrashLoopBackOff`) and image pulls
//! (`ImagePullBackOff`): the first delay is 10 s, each further failure doubles it, the delay is
//! capped at 300 s, and an entry whose last update is older than twice the cap (10 min) starts
//! over at the initial delay (k/k `pkg/kubelet/kubelet.go`: `backOffPeriod`, `MaxContainerBackOff`;
//! `pkg/kubelet/images/image_manager.go`).

use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::time::Duration;

/// Initial crash-loop and image-pull back-off delay (Go kubelet `backOffPeriod`, 10 s).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// Maximum crash-loop and image-pull back-off delay (Go kubelet `MaxContainerBackOff`, 300 s).
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry {
    backoff: Duration,
    last_update: Timestamp,
}

/// A table of back-off entries keyed by string (`<pod>_<ns>_<uid>_<container>_<hash>` for crash
/// loops, `<uid>_<image>` for pulls). Pure: every method takes the event time or "now".
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, Entry>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(INITIAL_BACKOFF, MAX_BACKOFF)
    }
}

fn since(now: Timestamp, then: Timestamp) -> Duration {
    let ns = now.as_nanosecond() - then.as_nanosecond();
    if ns <= 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(ns.min(u64::MAX as i128) as u64)
    }
}

impl Backoff {
    /// A table with the given initial delay and cap.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            entries: HashMap::new(),
        }
    }

    fn expired(&self, event_time: Timestamp, last_update: Timestamp) -> bool {
        since(event_time, last_update) > self.max * 2
    }

    /// The current delay for `key` (zero when there is no entry).
    pub fn get(&self, key: &str) -> Duration {
        self.entries
            .get(key)
            .map(|e| e.backoff)
            .unwrap_or(Duration::ZERO)
    }

    /// Records one more failure at `event_time`: the delay starts at the initial value, doubles
    /// on each call, and is capped; an entry idle for more than twice the cap starts over.
    pub fn next(&mut self, key: &str, event_time: Timestamp) {
        let initial = self.initial;
        let max = self.max;
        let expired = self
            .entries
            .get(key)
            .map(|e| self.expired(event_time, e.last_update))
            .unwrap_or(true);
        let e = self.entries.entry(key.to_string()).or_insert(Entry {
            backoff: initial,
            last_update: event_time,
        });
        if expired {
            e.backoff = initial;
        } else {
            e.backoff = (e.backoff * 2).min(max);
        }
        e.last_update = event_time;
    }

    /// True while `now` is within the current delay counted from `event_time` (e.g. the failed
    /// container's `finishedAt`). An expired entry is never in back-off.
    pub fn is_in_backoff_since(&self, key: &str, event_time: Timestamp, now: Timestamp) -> bool {
        match self.entries.get(key) {
            None => false,
            Some(e) if self.expired(now, e.last_update) => false,
            Some(e) => since(now, event_time) < e.backoff,
        }
    }

    /// True while `now` is within the current delay counted from the entry's last update
    /// (`IsInBackOffSinceUpdate`, used for image pulls).
    pub fn is_in_backoff_since_update(&self, key: &str, now: Timestamp) -> bool {
        match self.entries.get(key) {
            None => false,
            Some(e) if self.expired(now, e.last_update) => false,
            Some(e) => since(now, e.last_update) < e.backoff,
        }
    }

    /// When the back-off counted from the last update ends, if there is an entry.
    pub fn ends_at_since_update(&self, key: &str) -> Option<Timestamp> {
        self.entries
            .get(key)
            .and_then(|e| e.last_update.checked_add(e.backoff).ok())
    }

    /// The earliest end, after `now`, of any entry's back-off counted from its last update.
    pub fn earliest_end_since_update(&self, now: Timestamp) -> Option<Timestamp> {
        self.entries
            .values()
            .filter_map(|e| e.last_update.checked_add(e.backoff).ok())
            .filter(|t| *t > now)
            .min()
    }

    /// When the back-off that started at `event_time` ends, if there is one.
    pub fn ends_at(&self, key: &str, event_time: Timestamp) -> Option<Timestamp> {
        self.entries
            .get(key)
            .and_then(|e| event_time.checked_add(e.backoff).ok())
    }

    /// Drops entries not updated within twice the cap (called periodically, like `GC()`).
    pub fn gc(&mut self, now: Timestamp) {
        let max2 = self.max * 2;
        self.entries
            .retain(|_, e| since(now, e.last_update) <= max2);
    }

    /// Drops every entry whose key starts with `prefix` (a removed pod's entries).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn crash_backoff_doubles_from_ten_seconds_and_is_capped_at_five_minutes() {
        let mut b = Backoff::default();
        let mut seen = vec![];
        let mut now = 0;
        for _ in 0..7 {
            b.next("k", t(now));
            seen.push(b.get("k").as_secs());
            now += b.get("k").as_secs() as i64 + 1;
        }
        assert_eq!(seen, vec![10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn backoff_window_counts_from_the_event_time() {
        let mut b = Backoff::default();
        b.next("k", t(0));
        assert!(b.is_in_backoff_since("k", t(0), t(9)));
        assert!(!b.is_in_backoff_since("k", t(0), t(10)));
        assert!(!b.is_in_backoff_since("other", t(0), t(1)));
        assert_eq!(b.ends_at("k", t(0)), Some(t(10)));
    }

    #[test]
    fn backoff_resets_after_running_longer_than_twice_the_cap() {
        let mut b = Backoff::default();
        b.next("k", t(0));
        b.next("k", t(30));
        assert_eq!(b.get("k").as_secs(), 20);
        // 601 s later than the last update: back to the initial delay.
        b.next("k", t(30 + 601));
        assert_eq!(b.get("k").as_secs(), 10);
    }

    #[test]
    fn gc_drops_idle_entries() {
        let mut b = Backoff::default();
        b.next("a", t(0));
        b.next("b", t(500));
        b.gc(t(700));
        assert_eq!(b.get("a"), Duration::ZERO);
        assert_eq!(b.get("b").as_secs(), 10);
    }
}
