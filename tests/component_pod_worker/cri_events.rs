//! The PLEG following CRI's `GetContainerEvents` (KEP-3386, the Go kubelet's evented PLEG):
//! a container's exit in the runtime wakes its pod worker through the stream, well before the
//! relist or the worker's own resync would; a runtime without the stream (containerd 1.6) leaves
//! the relist in charge; a failed stream is subscribed again and a relist catches up.

use super::harness::*;
use deckhand::pleg::EventSource;
use serde_json::json;
use std::time::Duration;

/// Far beyond the test: only the event stream can wake the worker in time.
const LONG_RELIST: Duration = Duration::from_secs(300);

/// Starts a Never pod under a PLEG following `source`, and waits until it runs.
async fn running_pod(source: EventSource, relist: Duration, name: &str) -> (Harness, Pod, String) {
    let h = Harness::start_with_pleg(fake_runtime(), source, relist).await;
    let p = pod(name, "Never", json!({}));
    h.apply(&p).await;
    let c = eventually(Duration::from_secs(10), "the container runs", || {
        h.runtime.running("main")
    })
    .await;
    h.status_in_phase(name, "Running", Duration::from_secs(10))
        .await;
    (h, p, c.id)
}

/// The CRI source: the runtime's CONTAINER_STOPPED event wakes the worker, which writes Failed
/// with the exit code at once (no poke from the test, relist every 300 s).
#[tokio::test(start_paused = true)]
async fn a_stopped_event_on_the_cri_stream_wakes_the_pod_worker() {
    let (h, _p, id) = running_pod(EventSource::Cri, LONG_RELIST, "evented").await;
    eventually(Duration::from_secs(5), "subscribed to CRI events", || {
        (h.runtime.event_streams() > 0).then_some(())
    })
    .await;
    let t0 = Instant::now();
    h.runtime.exit(&id, 3);
    let st = h
        .status_in_phase("evented", "Failed", Duration::from_secs(5))
        .await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "Failed after {:?}: not woken by the event",
        t0.elapsed()
    );
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 3, "{st}");
    assert_eq!(term["reason"], "Error", "{st}");
    assert_eq!(h.runtime.count("GetContainerEvents"), 1);
    h.stop().await;
}

/// The control: with the native source forced and no containerd to give it events (and no
/// fallback when forced), the same exit is not seen within the time above (the worker waits for
/// its resync): the event made the difference.
#[tokio::test(start_paused = true)]
async fn without_an_event_the_exit_waits_for_the_resync() {
    let (h, _p, id) = running_pod(EventSource::Containerd, LONG_RELIST, "quiet").await;
    h.runtime.exit(&id, 3);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.phase("quiet").as_deref(), Some("Running"));
    assert_eq!(h.runtime.count("GetContainerEvents"), 0);
    h.stop().await;
}

/// containerd 1.6 answers GetContainerEvents with Unimplemented: the PLEG asks once, gives the
/// stream up, and the relist still brings the exit in.
#[tokio::test(start_paused = true)]
async fn an_unimplemented_event_stream_leaves_the_relist_in_charge() {
    let runtime = fake_runtime();
    runtime.inject_error(
        "GetContainerEvents",
        tonic::Status::unimplemented(
            "unknown method GetContainerEvents for service runtime.v1.RuntimeService",
        ),
    );
    let h = Harness::start_with_pleg(runtime, EventSource::Cri, Duration::from_secs(2)).await;
    let p = pod("older", "Never", json!({}));
    let c = h.start_running(&p).await;
    h.runtime.exit(&c.id, 3);
    // the relist (every 2 s here) sees the exit; the worker's resync (10 s) is not needed
    let st = h
        .status_in_phase("older", "Failed", Duration::from_secs(3))
        .await;
    assert_eq!(
        st["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        h.runtime.count("GetContainerEvents"),
        1,
        "an Unimplemented stream is not asked for again"
    );
    assert_eq!(h.runtime.event_streams(), 0);
    h.stop().await;
}

/// The stream fails (the runtime restarts): the PLEG relists at once and subscribes again, and
/// the next exit arrives through the new stream.
#[tokio::test(start_paused = true)]
async fn a_failed_event_stream_is_resubscribed_after_a_relist() {
    let (h, _p, id) = running_pod(EventSource::Cri, LONG_RELIST, "again").await;
    eventually(Duration::from_secs(5), "subscribed to CRI events", || {
        (h.runtime.event_streams() > 0).then_some(())
    })
    .await;
    let lists = h.runtime.count("ListContainers");
    h.runtime
        .end_event_streams(Some(tonic::Status::unavailable("containerd is restarting")));
    eventually(Duration::from_secs(5), "subscribed again", || {
        (h.runtime.count("GetContainerEvents") == 2 && h.runtime.event_streams() > 0).then_some(())
    })
    .await;
    assert!(
        h.runtime.count("ListContainers") > lists,
        "a relist follows the stream's failure"
    );
    let t0 = Instant::now();
    h.runtime.exit(&id, 7);
    let st = h
        .status_in_phase("again", "Failed", Duration::from_secs(5))
        .await;
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(
        st["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        7
    );
    h.stop().await;
}

/// `auto` on a runtime named containerd whose native stream cannot be had: the PLEG falls back
/// to CRI's stream, and an exit wakes the worker through it.
#[tokio::test(start_paused = true)]
async fn auto_falls_back_to_the_cri_stream_when_containerds_is_unavailable() {
    let h =
        Harness::start_with_pleg_on(fake_runtime(), EventSource::Auto, LONG_RELIST, "containerd")
            .await;
    let p = pod("fallback", "Never", json!({}));
    let c = h.start_running(&p).await;
    eventually(Duration::from_secs(5), "subscribed to CRI events", || {
        (h.runtime.event_streams() > 0).then_some(())
    })
    .await;
    let t0 = Instant::now();
    h.runtime.exit(&c.id, 3);
    h.status_in_phase("fallback", "Failed", Duration::from_secs(5))
        .await;
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    h.stop().await;
}
