//! Exits reported by containerd's event stream before CRI shows them (issue 15: exit → status
//! within 100 ms): the worker decides and writes from the PLEG's record, and CRI's later view
//! changes nothing.

use super::harness::*;
use deckhand::pleg::exits::OOM_GRACE;
use serde_json::{json, Value};
use std::time::Duration;

/// A Never pod whose container exits: the event's record alone makes it Failed with the exit
/// code, reason and finish time CRI will report; when CRI catches up the record is forgotten
/// and the status stays as written.
#[tokio::test(start_paused = true)]
async fn an_exit_from_the_event_stream_is_written_before_cri_shows_it() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("fast", "Never", json!({}));
    let c = h.start_running(&p).await;
    // the process exits; containerd's event says so, its CRI plugin does not yet
    let exited_at = h.runtime.exit_unconfirmed(&c.id, 3);
    h.exits.record_exit(&c.id, 3, exited_at);
    h.poke(&p).await;
    let st = h
        .status_in_phase("fast", "Failed", Duration::from_secs(5))
        .await;
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 3, "{st}");
    assert_eq!(term["reason"], "Error", "{st}");
    assert_eq!(term["finishedAt"], rfc3339(exited_at), "{st}");
    // (without the record the worker sees the container running and nothing changes: the
    // phase above came from the event alone)
    let writes = h.api.lock().unwrap().history.len();

    // CRI catches up with the same exit: the record goes, nothing new is written
    h.runtime.confirm_exit(&c.id);
    keep_poking(&h, &p, Duration::from_secs(1)).await;
    assert_eq!(
        h.exits.get(&c.id),
        None,
        "the record is forgotten once CRI shows the exit"
    );
    let st2 = h.api.lock().unwrap().statuses["fast"].clone();
    assert_eq!(
        st2["containerStatuses"][0]["state"],
        st["containerStatuses"][0]["state"]
    );
    assert_eq!(
        h.api.lock().unwrap().history.len(),
        writes,
        "no further status write"
    );
    h.stop().await;
}

/// An Always pod: the recorded exit restarts the container at once (the first restart has no
/// back-off), with the record's exit as its last state; an OOM event before it makes the
/// reason OOMKilled.
#[tokio::test(start_paused = true)]
async fn a_recorded_exit_restarts_the_container_with_its_last_state() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("again", "Always", json!({}));
    let c = h.start_running(&p).await;
    h.exits.record_oom(&c.id);
    let exited_at = h.runtime.exit_unconfirmed(&c.id, 137);
    h.exits.record_exit(&c.id, 137, exited_at);
    h.poke(&p).await;
    let cs = eventually(Duration::from_secs(5), "restartCount 1", || {
        h.container_status("again", "main")
            .filter(|c| c["restartCount"] == 1 && c["state"].get("running").is_some())
    })
    .await;
    let last = &cs["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{cs}");
    assert_eq!(last["reason"], "OOMKilled", "{cs}");
    assert_eq!(last["finishedAt"], rfc3339(exited_at), "{cs}");
    assert_eq!(h.runtime.count("CreateContainer"), 2);
    h.stop().await;
}

/// An RFC 3339 time with seconds, as the API shows a container's times.
fn rfc3339(nanos: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(nanos / 1_000_000_000)
        .unwrap()
        .to_string()
}

/// The terminal status is written before the pod's sandbox is stopped (k/k: syncPod sets the
/// status, then syncTerminatingPod kills): a slow StopPodSandbox (CNI teardown takes 100–200 ms
/// on this machine) does not hold back the phase change a watcher waits for.
#[tokio::test(start_paused = true)]
async fn the_terminal_phase_is_written_before_the_sandbox_is_stopped() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("quick", "Never", json!({}));
    let c = h.start_running(&p).await;
    h.runtime
        .delay("StopPodSandbox", Some(Duration::from_secs(2)));
    let exited_at = h.runtime.exit_unconfirmed(&c.id, 1);
    h.exits.record_exit(&c.id, 1, exited_at);
    h.poke(&p).await;
    let started = tokio::time::Instant::now();
    h.status_in_phase("quick", "Failed", Duration::from_secs(5))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "Failed was written after {:?}: it waited for StopPodSandbox",
        started.elapsed()
    );
    // the sandbox is still stopped afterwards
    eventually(Duration::from_secs(10), "StopPodSandbox called", || {
        h.runtime
            .calls()
            .iter()
            .any(|m| m == "StopPodSandbox")
            .then_some(())
    })
    .await;
    h.stop().await;
}

/// The status after an exit reads the pod's sandbox and its container from the runtime together,
/// not one after the other (the Go kubelet's `GetPodStatus` reads them in turn): with each status
/// call taking half a second, Failed is written about half a second after the worker is woken,
/// not a second.
#[tokio::test(start_paused = true)]
async fn an_exits_status_reads_the_sandbox_and_the_container_together() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("together", "Never", json!({}));
    let c = h.start_running(&p).await;
    let call = Duration::from_millis(500);
    h.runtime.delay("PodSandboxStatus", Some(call));
    h.runtime.delay("ContainerStatus", Some(call));
    let exited_at = h.runtime.exit_unconfirmed(&c.id, 1);
    h.exits.record_exit(&c.id, 1, exited_at);
    let started = tokio::time::Instant::now();
    h.poke(&p).await;
    h.status_in_phase("together", "Failed", Duration::from_secs(10))
        .await;
    let took = started.elapsed();
    assert!(
        took >= call && took < 2 * call,
        "Failed was written {took:?} after the wake: the two status reads were not made together"
    );
    h.stop().await;
}

/// Starts a Never pod `name`, kills its container by SIGKILL as containerd's event stream
/// reports it (exit 137, CRI not caught up, no OOM event), wakes the worker, and checks at half
/// of [`OOM_GRACE`] that the exit is not reported yet. Returns the container and its exit time.
async fn sigkilled_inside_the_grace(
    h: &Harness,
    p: &Pod,
) -> (deckhand::cri::fake::FakeContainer, i64) {
    let c = h.start_running(p).await;
    let exited_at = h.runtime.exit_unconfirmed(&c.id, 137);
    h.exits.record_exit(&c.id, 137, exited_at);
    h.poke(p).await;
    tokio::time::sleep(OOM_GRACE / 2).await;
    let name = p.metadata.name.as_deref().unwrap();
    assert_eq!(
        h.phase(name).as_deref(),
        Some("Running"),
        "the SIGKILL exit was reported inside the OOM grace"
    );
    (c, exited_at)
}

/// A container killed by SIGKILL (status 137) whose OOM event has not come yet: the worker does
/// not report the exit within [`OOM_GRACE`] (containerd's `/tasks/oom` can follow `/tasks/exit`
/// by milliseconds), so the OOM event that comes inside it gives the terminal reason OOMKilled
/// and no status ever says Error.
#[tokio::test(start_paused = true)]
async fn a_sigkill_exit_is_held_for_its_oom_event() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("oom", "Never", json!({}));
    let (c, _) = sigkilled_inside_the_grace(&h, &p).await;
    // the OOM event arrives inside the grace (and CRI will say OOMKilled too)
    h.runtime.oom_unconfirmed(&c.id);
    h.exits.record_oom(&c.id);
    h.poke(&p).await;
    let st = h
        .status_in_phase("oom", "Failed", Duration::from_secs(5))
        .await;
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 137, "{st}");
    assert_eq!(term["reason"], "OOMKilled", "{st}");
    let reasons: Vec<Value> = h
        .api
        .lock()
        .unwrap()
        .history
        .iter()
        .map(|(_, s)| s["containerStatuses"][0]["state"]["terminated"]["reason"].clone())
        .collect();
    assert!(
        !reasons.contains(&json!("Error")),
        "a status said Error before OOMKilled: {reasons:?}"
    );
    h.stop().await;
}

/// A SIGKILL exit with no OOM event (a `kill -9` from outside): once [`OOM_GRACE`] has passed
/// the exit is reported with the reason Error, without waiting for CRI to catch up.
#[tokio::test(start_paused = true)]
async fn a_sigkill_exit_without_an_oom_event_is_reported_after_the_grace() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("killed", "Never", json!({}));
    let (_, exited_at) = sigkilled_inside_the_grace(&h, &p).await;
    // the PLEG wakes the worker again once the grace is over
    tokio::time::sleep(OOM_GRACE / 2).await;
    h.poke(&p).await;
    let st = h
        .status_in_phase("killed", "Failed", Duration::from_secs(5))
        .await;
    let term = &st["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(term["exitCode"], 137, "{st}");
    assert_eq!(term["reason"], "Error", "{st}");
    assert_eq!(term["finishedAt"], rfc3339(exited_at), "{st}");
    h.stop().await;
}
