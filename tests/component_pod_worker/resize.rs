//! In-place pod resize (KEP-1287) through the pod workers: the allocation decision, the CRI
//! update of the running container, and what the status says on the way.

use super::harness::*;
use deckhand::cri::fake::FakeContainer;
use serde_json::{json, Value};
use std::time::Duration;

fn resources(cpu: &str, mem: &str) -> Value {
    json!({"requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}})
}

/// Pod `name` with one container `main` asking for `cpu`/`mem` (Guaranteed), at `generation`.
fn sized(name: &str, generation: i64, cpu: &str, mem: &str) -> Pod {
    let mut p = pod(
        name,
        "Always",
        json!({"containers": [{"name": "main", "image": "busybox:1.36",
            "command": ["sleep", "3600"], "resources": resources(cpu, mem)}]}),
    );
    p.metadata.generation = Some(generation);
    p
}

/// The Linux resources the fake runtime holds for container instance `c` (from its creation,
/// or the last UpdateContainerResources).
fn linux_resources(c: &FakeContainer) -> deckhand::cri::api::LinuxContainerResources {
    c.config
        .linux
        .as_ref()
        .and_then(|l| l.resources.clone())
        .expect("the container has Linux resources")
}

fn resize_conditions(st: &Value) -> Vec<Value> {
    st["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("PodResize"))
        })
        .cloned()
        .collect()
}

/// A resize that fits (`resize` subresource: the spec's resources change, generation 2) is
/// applied to the running container through CRI UpdateContainerResources: no restart, the
/// same container; the status then shows the new `resources` and `allocatedResources`,
/// `observedGeneration` 2 and no resize condition, with ResizeStarted and ResizeCompleted
/// events. A later resize beyond the node's allocatable cpu stays `PodResizePending` with
/// reason `Deferred` and the predicate's message; the container keeps what it has.
#[tokio::test(start_paused = true)]
async fn a_resize_is_applied_in_place_and_one_that_does_not_fit_is_deferred() {
    let h = Harness::start(fake_runtime()).await;
    let p = sized("r", 1, "20m", "35Mi");
    h.apply(&p).await;
    h.status_in_phase("r", "Running", Duration::from_secs(10))
        .await;
    let before = h.runtime.running("main").expect("main runs");

    h.apply(&sized("r", 2, "25m", "40Mi")).await;
    let st = eventually(Duration::from_secs(10), "the resize applied", || {
        let st = h.api.lock().unwrap().statuses.get("r")?.clone();
        let cs = &st["containerStatuses"][0];
        (st["observedGeneration"] == 2
            && resize_conditions(&st).is_empty()
            && cs["resources"] == resources("25m", "40Mi"))
        .then_some(st)
    })
    .await;
    let cs = &st["containerStatuses"][0];
    assert_eq!(
        cs["allocatedResources"],
        json!({"cpu": "25m", "memory": "40Mi"})
    );
    assert_eq!(cs["restartCount"], 0);
    let after = h.runtime.running("main").expect("main still runs");
    assert_eq!(after.id, before.id, "resized in place, not restarted");
    assert_eq!(h.runtime.count("UpdateContainerResources"), 1);
    let linux = linux_resources(&after);
    assert_eq!(
        (
            linux.cpu_quota,
            linux.cpu_period,
            linux.memory_limit_in_bytes
        ),
        (2500, 100_000, 40 << 20)
    );
    let events = h.events();
    for want in ["ResizeStarted", "ResizeCompleted"] {
        assert!(events.iter().any(|e| e == want), "{want}: {events:?}");
    }

    h.apply(&sized("r", 3, "5", "40Mi")).await;
    let st = eventually(Duration::from_secs(10), "the resize deferred", || {
        let st = h.api.lock().unwrap().statuses.get("r")?.clone();
        (!resize_conditions(&st).is_empty()).then_some(st)
    })
    .await;
    let conds = resize_conditions(&st);
    assert_eq!(conds.len(), 1, "{conds:?}");
    assert_eq!(conds[0]["type"], "PodResizePending");
    assert_eq!(conds[0]["reason"], "Deferred");
    assert_eq!(conds[0]["observedGeneration"], 3);
    assert_eq!(
        conds[0]["message"],
        "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 2000"
    );
    let cs = &st["containerStatuses"][0];
    assert_eq!(cs["resources"], resources("25m", "40Mi"), "unchanged");
    assert_eq!(
        cs["allocatedResources"],
        json!({"cpu": "25m", "memory": "40Mi"})
    );
    assert_eq!(h.runtime.count("UpdateContainerResources"), 1);
    assert!(h.events().iter().any(|e| e == "ResizeDeferred"));
    h.stop().await;
}

/// `resizePolicy: RestartContainer` for memory: a memory resize restarts the container (restart
/// count 1) with the new limit; the resize is reported in progress until it runs again.
#[tokio::test(start_paused = true)]
async fn a_restart_policy_restarts_the_container_with_its_new_resources() {
    let h = Harness::start(fake_runtime()).await;
    let with_policy = |generation, mem: &str| {
        let mut p = sized("rr", generation, "20m", mem);
        p.spec.as_mut().unwrap().containers[0].resize_policy = Some(vec![serde_json::from_value(
            json!({"resourceName": "memory", "restartPolicy": "RestartContainer"}),
        )
        .unwrap()]);
        p
    };
    h.apply(&with_policy(1, "35Mi")).await;
    h.status_in_phase("rr", "Running", Duration::from_secs(10))
        .await;
    let before = h.runtime.running("main").expect("main runs");
    h.apply(&with_policy(2, "40Mi")).await;
    let st = eventually(
        Duration::from_secs(30),
        "restarted with the new memory",
        || {
            let st = h.api.lock().unwrap().statuses.get("rr")?.clone();
            let cs = &st["containerStatuses"][0];
            (cs["restartCount"] == 1
                && cs["resources"] == resources("20m", "40Mi")
                && resize_conditions(&st).is_empty()
                && cs["state"]["running"].is_object())
            .then_some(st)
        },
    )
    .await;
    let after = h.runtime.running("main").expect("main runs again");
    assert_ne!(after.id, before.id, "a new instance");
    let linux = linux_resources(&after);
    assert_eq!(linux.memory_limit_in_bytes, 40 << 20);
    assert_eq!(h.runtime.count("UpdateContainerResources"), 0, "{st}");
    h.stop().await;
}
