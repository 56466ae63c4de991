//! When a failed volume set-up is tried again (k/k `pkg/volume/util/nestedpendingoperations`).

/// The first wait before a failed volume set-up is tried again (k/k
/// `pkg/volume/util/nestedpendingoperations`: `initialDurationBeforeRetry`, 500 ms).
pub const SETUP_RETRY_INITIAL: std::time::Duration = std::time::Duration::from_millis(500);
/// The longest wait between tries of a failing volume set-up (`maxDurationBeforeRetry`, 2 min 2 s).
pub const SETUP_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(122);

/// How long to wait before trying a failed volume set-up again, given the wait after the
/// previous failure in a row (`None`: this is the first): 500 ms, then twice the previous, at
/// most 2 min 2 s. The Go kubelet's volume manager retries a failed mount on this schedule
/// (`nestedpendingoperations` exponential back-off) while the pod worker waits for the mounts,
/// so a transient failure, e.g. the Node authorizer refusing a service-account token for a pod
/// whose binding it has not seen yet, costs half a second, not the pod worker's 10 s back-off.
pub fn setup_retry_delay(previous: Option<std::time::Duration>) -> std::time::Duration {
    match previous {
        None => SETUP_RETRY_INITIAL,
        Some(d) => (d * 2).clamp(SETUP_RETRY_INITIAL, SETUP_RETRY_MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_set_ups_are_retried_on_the_volume_managers_schedule() {
        use std::time::Duration;
        let ms = Duration::from_millis;
        let cases = [
            (None, ms(500)),
            (Some(ms(500)), ms(1000)),
            (Some(ms(1000)), ms(2000)),
            (Some(ms(64_000)), ms(122_000)),
            (Some(ms(122_000)), ms(122_000)),
        ];
        for (previous, want) in cases {
            assert_eq!(setup_retry_delay(previous), want, "{previous:?}");
        }
    }
}
