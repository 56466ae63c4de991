//! End-to-end tests of in-place pod resize (KEP-1287, GA) against the real local cluster
//! (hack/local-up.sh): `kubectl patch --subresource resize` on a running pod, as the upstream
//! conformance tests "[sig-node] Pod InPlace Resize Container" do. The container is updated
//! through containerd's CRI UpdateContainerResources without a restart, its own cgroup files
//! show the new cpu quota and memory limit (cgroup v1 on this harness), and the status reports
//! the new `resources` and `allocatedResources` once the resize is done; a resize that does not
//! fit next to another pod stays `PodResizePending` `Deferred` until that pod is gone.

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use std::time::Duration;

fn guaranteed(name: &str, cpu: &str, mem: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": cpu, "memory": mem},
                              "limits": {"cpu": cpu, "memory": mem}},
            }],
        },
    }))
    .expect("a valid pod")
}

fn resize_patch(cpu: &str, mem: &str) -> String {
    serde_json::json!({"spec": {"containers": [{"name": "main", "resources": {
        "requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}}]}})
    .to_string()
}

/// `kubectl patch pod <pod> --subresource resize`: the container's requests and limits set to
/// `cpu` and `mem`.
fn resize(ns: &str, pod: &str, cpu: &str, mem: &str) {
    let patch = resize_patch(cpu, mem);
    kubectl(&[
        "-n",
        ns,
        "patch",
        "pod",
        pod,
        "--subresource",
        "resize",
        "--type",
        "strategic",
        "-p",
        &patch,
    ]);
}

/// The cgroup values the container itself sees (cgroup v1: cpu.cfs_quota_us, cpu.shares,
/// memory.limit_in_bytes), as the conformance tests read them with `kubectl exec`.
fn cgroup_values(ns: &str, pod: &str) -> (String, String, String) {
    let read = |f: &str| {
        kubectl(&["-n", ns, "exec", pod, "-c", "main", "--", "cat", f])
            .trim()
            .to_string()
    };
    (
        read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
        read("/sys/fs/cgroup/cpu/cpu.shares"),
        read("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    )
}

fn resize_conditions(p: &Pod) -> Vec<String> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_.starts_with("PodResize"))
        .map(|c| {
            format!(
                "{} {} {}",
                c.type_,
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_running_pod_is_resized_in_place_and_a_resize_that_does_not_fit_waits_for_room() {
    let client = client().await;
    let ns = TestNs::new(&client, "resize").await;
    let api = ns.pods();
    ns.create_pod(&guaranteed("r", "20m", "35Mi")).await;
    let before = wait_running(&api, "r").await;
    assert_eq!(
        cgroup_values(&ns.name, "r"),
        ("2000".into(), "20".into(), (35u64 << 20).to_string())
    );
    let id_before = container_status(&before, "main").and_then(|c| c.container_id.clone());

    resize(&ns.name, "r", "25m", "40Mi");
    let p = wait_pod(&api, "r", "the resize done", |p| {
        let st = p.status.as_ref();
        let cs = container_status(p, "main");
        st.and_then(|s| s.observed_generation) == Some(2)
            && resize_conditions(p).is_empty()
            && cs
                .and_then(|c| c.resources.as_ref())
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("cpu"))
                .map(|q| q.0.as_str())
                == Some("25m")
    })
    .await;
    let cs = container_status(&p, "main").unwrap();
    assert_eq!(cs.restart_count, 0, "resized in place");
    assert_eq!(cs.container_id, id_before, "the same container");
    let alloc = cs.allocated_resources.clone().unwrap_or_default();
    assert_eq!(alloc.get("cpu").map(|q| q.0.as_str()), Some("25m"));
    assert_eq!(alloc.get("memory").map(|q| q.0.as_str()), Some("40Mi"));
    assert_eq!(
        cgroup_values(&ns.name, "r"),
        ("2500".into(), "25".into(), (40u64 << 20).to_string()),
        "the container's own cgroup"
    );
    // events are posted apart from the status, and may come after it
    wait_event_containing(
        &ns.name,
        "r",
        "Normal ResizeStarted: Pod resize started: {\"containers\":[{\"name\":\"main\"",
    )
    .await;
    wait_event_containing(&ns.name, "r", "Normal ResizeCompleted").await;

    // fits the node but not next to another pod: deferred until that pod is gone (the API
    // server itself refuses a resize beyond the node's allocatable)
    ns.create_pod(&guaranteed("holder", "1500m", "16Mi")).await;
    wait_running(&api, "holder").await;
    resize(&ns.name, "r", "600m", "40Mi");
    let p = wait_pod(&api, "r", "the resize deferred", |p| {
        !resize_conditions(p).is_empty()
    })
    .await;
    let conds = resize_conditions(&p);
    assert!(
        conds.len() == 1
            && conds[0].starts_with(
                "PodResizePending Deferred Node didn't have enough resource: cpu, requested: 600, used: "
            ),
        "{conds:?}"
    );
    assert_eq!(cgroup_values(&ns.name, "r").0, "2500", "unchanged");
    wait_event_containing(&ns.name, "r", "Warning ResizeDeferred: Pod resize Deferred").await;
    // the holder goes: the pending resize is decided again and applied
    api.delete("holder", &Default::default()).await.unwrap();
    wait_pod(&api, "r", "the deferred resize applied", |p| {
        p.status.as_ref().and_then(|s| s.observed_generation) == Some(3)
            && resize_conditions(p).is_empty()
    })
    .await;
    poll(
        Duration::from_secs(60),
        Duration::from_millis(500),
        "cgroup at 600m",
        || (cgroup_values(&ns.name, "r").0 == "60000").then_some(()),
    )
    .await;
    ns.delete().await;
}
