//! Time helpers shared by the pure decision code: a [`Clock`] that tests can fake, conversions
//! between CRI nanosecond timestamps and API `Time`, and Go's `time.Duration` formatting, which
//! the Go kubelet uses in user-visible messages (`back-off 1m20s restarting failed container ...`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// A source of wall-clock time. Decision logic takes a `&dyn Clock` so tests can pin "now".
pub trait Clock: Send + Sync {
    /// The current wall-clock time.
    fn now(&self) -> Timestamp;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Wall-clock time that follows tokio's clock: the wall time at creation plus the tokio time
/// elapsed since. With paused tokio time (component tests) "now" moves only when tokio's clock
/// advances, so back-off deadlines, container finish times and timers agree; in production it
/// runs with the monotonic clock (deckhand uses [`SystemClock`] there).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    wall: Timestamp,
    at: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads the system wall time now and follows tokio's clock from here.
    pub fn new() -> Self {
        TokioClock {
            wall: Timestamp::now(),
            at: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.at);
        self.wall
            .checked_add(jiff_span(elapsed))
            .unwrap_or(self.wall)
    }
}

fn jiff_span(d: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(d).unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

/// Converts a CRI timestamp (nanoseconds since the Unix epoch; 0 means unset) into an API time
/// truncated to whole seconds, as the API server stores `metav1.Time` (RFC 3339, second precision).
pub fn from_unix_nanos(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    Timestamp::from_second(ns / 1_000_000_000).ok().map(Time)
}

/// Converts a CRI timestamp (nanoseconds since the Unix epoch) to a [`Timestamp`] with full precision.
pub fn ts_from_unix_nanos(ns: i64) -> Option<Timestamp> {
    if ns <= 0 {
        return None;
    }
    Timestamp::from_nanosecond(ns as i128).ok()
}

/// "now" truncated to whole seconds, as an API `Time`.
pub fn now_seconds(clock: &dyn Clock) -> Time {
    truncate(clock.now())
}

/// Truncates a timestamp to whole seconds (the precision `metav1.Time` keeps).
pub fn truncate(ts: Timestamp) -> Time {
    Time(Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

/// Formats a duration the way Go's `time.Duration.String()` does: `10s`, `1m20s`, `5m0s`,
/// `1.561s`, `250ms`. The Go kubelet prints back-off delays and pull times this way.
pub fn go_duration(d: Duration) -> String {
    let total_ns = d.as_nanos();
    if total_ns == 0 {
        return "0s".to_string();
    }
    if total_ns < 1_000 {
        return format!("{total_ns}ns");
    }
    if total_ns < 1_000_000 {
        return trim_frac(total_ns as f64 / 1_000.0, "µs");
    }
    if total_ns < 1_000_000_000 {
        return trim_frac(total_ns as f64 / 1_000_000.0, "ms");
    }
    let hours = total_ns / 3_600_000_000_000;
    let rem = total_ns % 3_600_000_000_000;
    let mins = rem / 60_000_000_000;
    let sec_ns = rem % 60_000_000_000;
    let secs = go_seconds(sec_ns);
    if hours > 0 {
        format!("{hours}h{mins}m{secs}s")
    } else if mins > 0 {
        format!("{mins}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

fn go_seconds(ns: u128) -> String {
    let whole = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let mut f = format!("{frac:09}");
    while f.ends_with('0') {
        f.pop();
    }
    format!("{whole}.{f}")
}

fn trim_frac(v: f64, unit: &str) -> String {
    let mut s = format!("{v:.6}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    format!("{s}{unit}")
}

/// Truncates a duration to whole milliseconds, as the Go kubelet does before printing pull times.
pub fn truncate_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_moves_with_paused_time_only() {
        let c = TokioClock::new();
        let t0 = c.now();
        assert_eq!(c.now(), t0, "paused: no movement without tokio time");
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(c.now().as_second() - t0.as_second(), 90);
    }

    #[test]
    fn go_duration_matches_go_formatting() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(160)), "2m40s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_millis(1561)), "1.561s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn cri_nanos_convert_to_whole_seconds() {
        let t = from_unix_nanos(1_700_000_000_999_999_999).unwrap();
        assert_eq!(t.0.as_second(), 1_700_000_000);
        assert!(from_unix_nanos(0).is_none());
    }
}
