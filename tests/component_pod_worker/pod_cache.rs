//! A new pod's first sync starts from the PLEG's last relist (the Go kubelet's pod worker reads
//! the PLEG's pod cache): when that relist is recent enough and shows nothing of the pod, the
//! worker asks the runtime nothing about it before making its sandbox. When the relist shows the
//! pod (deckhand restarted under a running pod) or there is no relist yet, it asks.

use super::harness::*;
use deckhand::pleg::EventSource;
use serde_json::json;
use std::time::Duration;

const RELIST: Duration = Duration::from_secs(1);

/// Where in the runtime's call log the first `method` call is.
fn first_call(h: &Harness, method: &str) -> usize {
    let calls = h.runtime.calls();
    calls
        .iter()
        .position(|c| c == method)
        .unwrap_or_else(|| panic!("no {method} call: {calls:?}"))
}

/// Starts `p` and waits until it is Running.
async fn run(h: &Harness, p: &Pod) {
    h.apply(p).await;
    h.status_in_phase(
        p.metadata.name.as_deref().unwrap(),
        "Running",
        Duration::from_secs(10),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_new_pods_first_sync_asks_the_runtime_nothing_after_a_relist() {
    let h = Harness::start_with_pleg(fake_runtime(), EventSource::Cri, RELIST).await;
    eventually(Duration::from_secs(5), "a relist", || {
        (h.runtime.count("ListPodSandbox") > 0 && h.runtime.count("ListContainers") > 0)
            .then_some(())
    })
    .await;
    let p = pod("fresh", "Always", json!({}));
    run(&h, &p).await;
    let sandbox = first_call(&h, "RunPodSandbox");
    let lists = h.runtime.pod_lists("uid-fresh");
    assert!(
        lists.iter().all(|i| *i > sandbox),
        "the pod's own lists {lists:?} come after RunPodSandbox (call {sandbox}): {:?}",
        h.runtime.calls()
    );
    assert!(
        !lists.is_empty(),
        "the status after the start reads the runtime"
    );
    assert_eq!(h.runtime.count("RunPodSandbox"), 1);
    h.stop().await;
}

/// The control: with no relist to start from, the first sync asks the runtime before it makes the
/// sandbox.
#[tokio::test(start_paused = true)]
async fn without_a_relist_the_first_sync_asks_the_runtime() {
    let h = Harness::start(fake_runtime()).await;
    let p = pod("unlisted", "Always", json!({}));
    run(&h, &p).await;
    let sandbox = first_call(&h, "RunPodSandbox");
    let lists = h.runtime.pod_lists("uid-unlisted");
    assert!(
        lists.iter().any(|i| *i < sandbox),
        "a list for the pod before RunPodSandbox (call {sandbox}): {lists:?}"
    );
    h.stop().await;
}

/// deckhand restarts under a running pod: the relist shows the pod, so the new worker's first
/// sync reads it from the runtime and adopts it (nothing created again).
#[tokio::test(start_paused = true)]
async fn a_pod_the_relist_shows_is_read_from_the_runtime_and_adopted() {
    let runtime = fake_runtime();
    let h = Harness::start(runtime.clone()).await;
    let p = pod("kept", "Always", json!({}));
    run(&h, &p).await;
    let status = h.api.lock().unwrap().statuses["kept"].clone();
    h.stop().await;
    let before = runtime.calls().len();
    let h = Harness::start_with_pleg(runtime.clone(), EventSource::Cri, RELIST).await;
    eventually(Duration::from_secs(5), "a relist", || {
        (runtime.calls()[before..]
            .iter()
            .any(|c| c == "ListContainers"))
        .then_some(())
    })
    .await;
    let mut running = p.clone();
    running.status = Some(serde_json::from_value(status).unwrap());
    h.apply(&running).await;
    eventually(
        Duration::from_secs(5),
        "the pod read from the runtime",
        || {
            runtime
                .pod_lists("uid-kept")
                .into_iter()
                .any(|i| i >= before)
                .then_some(())
        },
    )
    .await;
    keep_poking(&h, &running, Duration::from_secs(2)).await;
    assert_eq!(runtime.count("RunPodSandbox"), 1, "{:?}", runtime.calls());
    assert_eq!(runtime.count("CreateContainer"), 1);
    assert_eq!(runtime.count("StopContainer"), 0);
    assert_eq!(h.phase("kept").as_deref(), Some("Running"));
    h.stop().await;
}

/// A harness whose only news of the runtime is the relist (containerd's stream cannot be had
/// here and no CRI stream is followed), after its first relist.
async fn relist_only() -> Harness {
    let h = Harness::start_with_pleg_on(
        fake_runtime(),
        EventSource::Containerd,
        RELIST,
        "containerd",
    )
    .await;
    eventually(Duration::from_secs(5), "a relist", || {
        (h.runtime.count("ListContainers") > 0).then_some(())
    })
    .await;
    h
}

/// The relist finds the pod's new sandbox and container, which the worker made itself and read
/// back for its status: it wakes nobody, so the pod is read from the runtime no more after it
/// runs (the Go kubelet's pod worker reads the relist's pod cache instead).
#[tokio::test(start_paused = true)]
async fn the_relist_does_not_wake_a_worker_for_its_own_start() {
    let h = relist_only().await;
    let p = pod("own", "Always", json!({}));
    run(&h, &p).await;
    // the worker's read after the start may still be in flight when Running is written
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lists = h.runtime.pod_lists("uid-own").len();
    let statuses = h.runtime.count("ContainerStatus");
    tokio::time::sleep(5 * RELIST).await;
    assert!(
        h.runtime.count("ListContainers") >= 5,
        "the relist kept running"
    );
    assert_eq!(
        h.runtime.pod_lists("uid-own").len(),
        lists,
        "no runtime read of the pod after it runs: {:?}",
        h.runtime.calls()
    );
    assert_eq!(h.runtime.count("ContainerStatus"), statuses);
    h.stop().await;
}

/// The control: a change the worker has not seen (the container exits, and no event stream
/// tells) still wakes it from the relist, and the container is restarted.
#[tokio::test(start_paused = true)]
async fn the_relist_wakes_a_worker_for_a_change_it_has_not_seen() {
    let h = relist_only().await;
    let p = pod("unseen", "Always", json!({}));
    run(&h, &p).await;
    tokio::time::sleep(2 * RELIST).await;
    let c = h.runtime.running("main").expect("the container runs");
    h.runtime.exit(&c.id, 1);
    eventually(Duration::from_secs(30), "the container restarted", || {
        (h.runtime.count("StartContainer") == 2).then_some(())
    })
    .await;
    h.stop().await;
}
