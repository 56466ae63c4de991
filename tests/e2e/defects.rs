//! End-to-end regression tests of the defects a new user met (issue 11), against the real local
//! cluster (hack/local-up.sh): the status a pod shows while deckhand works on it, a finished
//! pod's single sandbox, a later shorter grace period, downwardAPI volume limits, service-account
//! tokens for pods created in a burst, and the runtime version on the Node.
//! (The API server outage is `apiserver_outage.rs`: it must not share its time with others.)

use crate::common::*;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use std::time::{Duration, Instant};

fn pod_from(json: serde_json::Value) -> Pod {
    serde_json::from_value(json).expect("a valid pod")
}

fn has_condition(p: &Pod, type_: &str, status: &str) -> bool {
    condition(p, type_) == Some(status)
}

/// Item 2: while a postStart hook keeps the pod worker busy for 8 s, the pod already shows what
/// the Go kubelet shows: startTime, PodScheduled, Initialized, PodReadyToStartContainers once the
/// sandbox is up, and the container waiting in ContainerCreating (not a bare Pending).
#[tokio::test]
async fn a_starting_pod_shows_container_creating_with_start_time_and_conditions() {
    let client = client().await;
    let ns = TestNs::new(&client, "startstatus").await;
    let api = ns.pods();
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "hooked"},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "lifecycle": {"postStart": {"exec": {"command": ["sleep", "8"]}}}
            }]
        }
    }));
    let created = Instant::now();
    ns.create_pod(&pod).await;
    // the first status deckhand writes: accepted, containers waiting
    let early = wait_pod(&api, "hooked", "a status with startTime", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_some()
    })
    .await;
    let early_at = created.elapsed();
    assert!(
        early_at < Duration::from_secs(5),
        "the first status came {early_at:?} after creation (the hook takes 8 s)"
    );
    assert_eq!(phase(&early), "Pending");
    assert_eq!(waiting_reason(&early, "main"), Some("ContainerCreating"));
    assert!(has_condition(&early, "PodScheduled", "True"));
    assert!(has_condition(&early, "Initialized", "True"));
    assert!(has_condition(&early, "Ready", "False"));
    // the sandbox is ready while the hook still runs: PodReadyToStartContainers, a pod IP, and
    // still ContainerCreating (kubectl's STATUS column)
    let sandboxed = wait_pod(&api, "hooked", "PodReadyToStartContainers=True", |p| {
        has_condition(p, "PodReadyToStartContainers", "True")
    })
    .await;
    let sandboxed_at = created.elapsed();
    if phase(&sandboxed) == "Pending" {
        assert_eq!(
            waiting_reason(&sandboxed, "main"),
            Some("ContainerCreating")
        );
        assert!(sandboxed.status.as_ref().unwrap().pod_ip.is_some());
    }
    let table = Table::parse(&kubectl(&["-n", &ns.name, "get", "pod", "hooked"]));
    let column = table.row("hooked")["STATUS"].clone();
    let running = wait_running(&api, "hooked").await;
    let running_at = created.elapsed();
    println!(
        "first status {early_at:?}, sandbox ready {sandboxed_at:?}, Running {running_at:?}; STATUS column during the hook: {column}"
    );
    assert!(
        running_at >= early_at + Duration::from_secs(6),
        "the ContainerCreating status was visible during the hook ({early_at:?} → {running_at:?})"
    );
    assert!(sandboxed_at + Duration::from_secs(4) < running_at);
    if sandboxed_at + Duration::from_secs(2) < running_at {
        assert_eq!(column, "ContainerCreating");
    }
    // startTime is when the worker took the pod up, not when the container ran
    let st = running.status.as_ref().unwrap();
    assert_eq!(st.start_time, early.status.as_ref().unwrap().start_time);
    ns.delete().await;
}

/// Item 3: a pod that finished (OnFailure exit 0, Never exit 1, OnFailure with an init
/// container) keeps exactly one sandbox in its life, however long it stays.
#[tokio::test]
async fn a_finished_pod_has_exactly_one_sandbox() {
    let client = client().await;
    let ns = TestNs::new(&client, "onesandbox").await;
    let api = ns.pods();
    ns.create_pod(&busybox_pod("onfailure-ok", "exit 0", "OnFailure", Some(1)))
        .await;
    ns.create_pod(&busybox_pod("never-failed", "exit 1", "Never", Some(1)))
        .await;
    let mut with_init = busybox_pod("init-ok", "exit 0", "OnFailure", Some(1));
    with_init.spec.as_mut().unwrap().init_containers = Some(vec![serde_json::from_value(
        serde_json::json!({"name": "init", "image": "busybox", "command": ["true"]}),
    )
    .unwrap()]);
    ns.create_pod(&with_init).await;
    let mut uids = vec![];
    for (name, want) in [
        ("onfailure-ok", "Succeeded"),
        ("never-failed", "Failed"),
        ("init-ok", "Succeeded"),
    ] {
        let p = wait_pod(&api, name, want, |p| phase(p) == want).await;
        uids.push((name, uid(&p)));
    }
    // the old bug made a new sandbox about every second; give it time to show
    tokio::time::sleep(Duration::from_secs(15)).await;
    for (name, uid) in &uids {
        let sandboxes = sandboxes_of(uid);
        assert_eq!(
            sandboxes.len(),
            1,
            "pod {name} has {} sandboxes after it finished:\n{}",
            sandboxes.len(),
            crictl(&["pods", "--label", &format!("io.kubernetes.pod.uid={uid}")])
        );
        let ready = crictl(&[
            "pods",
            "--label",
            &format!("io.kubernetes.pod.uid={uid}"),
            "--state",
            "ready",
            "-q",
        ]);
        assert!(
            ready.trim().is_empty(),
            "pod {name}'s sandbox is stopped: {ready}"
        );
    }
    ns.delete().await;
}

/// Item 4: a pod whose container ignores SIGTERM, deleted with its 86400 s grace period, then
/// again with `--grace-period=1`, is gone within seconds; the same with a preStop hook that
/// hangs.
#[tokio::test]
async fn a_later_shorter_grace_period_cuts_the_termination_short() {
    let client = client().await;
    let ns = TestNs::new(&client, "shortgrace").await;
    let api = ns.pods();
    // `sleep` as PID 1 has no SIGTERM handler: the signal is ignored
    ns.create_pod(&busybox_pod(
        "stubborn",
        "exec sleep 3600",
        "Always",
        Some(86400),
    ))
    .await;
    ns.create_pod(&pod_from(serde_json::json!({
        "metadata": {"name": "hanging-prestop"},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 86400,
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sleep", "3600"],
                "lifecycle": {"preStop": {"exec": {"command": ["sleep", "3600"]}}}
            }]
        }
    })))
    .await;
    for name in ["stubborn", "hanging-prestop"] {
        wait_running(&api, name).await;
    }
    for name in ["stubborn", "hanging-prestop"] {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("first delete");
    }
    // the long termination is under way
    tokio::time::sleep(Duration::from_secs(4)).await;
    for name in ["stubborn", "hanging-prestop"] {
        let p = api
            .get(name)
            .await
            .expect("still there while its grace period runs");
        assert_eq!(p.metadata.deletion_grace_period_seconds, Some(86400));
    }
    let shortened = Instant::now();
    for name in ["stubborn", "hanging-prestop"] {
        api.delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("second delete");
    }
    for name in ["stubborn", "hanging-prestop"] {
        poll_with(
            Duration::from_secs(20),
            Duration::from_millis(250),
            || {
                format!(
                    "pod {name} gone after --grace-period=1\n{}",
                    diagnose(&ns.name, name)
                )
            },
            || {
                kubectl_raw(&["-n", &ns.name, "get", "pod", name])
                    .stdout
                    .trim()
                    .is_empty()
                    .then_some(())
            },
        )
        .await;
        println!(
            "{name} gone {:?} after the second delete",
            shortened.elapsed()
        );
    }
    assert!(shortened.elapsed() < Duration::from_secs(20));
    ns.delete().await;
}

/// Parses a memory quantity as the API server prints allocatable (`123456Ki`, `16Gi`, bytes).
fn bytes_of(q: &str) -> i128 {
    let (num, mult) = [
        ("Ki", 1i128 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ]
    .iter()
    .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((q, 1));
    num.parse::<i128>().expect("an integer quantity") * mult
}

/// Item 5: a downwardAPI volume item with `resourceFieldRef: limits.memory` for a container
/// without a memory limit writes the node's allocatable memory, as the env path does.
#[tokio::test]
async fn downward_api_volume_limits_default_to_the_node_allocatable_like_env() {
    let client = client().await;
    let ns = TestNs::new(&client, "downwardlimits").await;
    let api = ns.pods();
    ns.create_pod(&pod_from(serde_json::json!({
        "metadata": {"name": "limits"},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "echo \"file=$(cat /info/mem) env=$MEM cpu=$(cat /info/cpu) envcpu=$CPU\""],
                "resources": {"requests": {"memory": "16Mi", "cpu": "10m"}},
                "env": [
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}
                ],
                "volumeMounts": [{"name": "info", "mountPath": "/info"}]
            }],
            "volumes": [{"name": "info", "downwardAPI": {"items": [
                {"path": "mem", "resourceFieldRef": {"containerName": "main", "resource": "limits.memory"}},
                {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu", "divisor": "1m"}}
            ]}}]
        }
    })))
    .await;
    wait_pod(&api, "limits", "Succeeded", |p| phase(p) == "Succeeded").await;
    let out = kubectl(&["-n", &ns.name, "logs", "limits"]);
    let field = |k: &str| {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} in {out:?}"))
            .to_string()
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(env().node_name()).await.unwrap();
    let alloc = node.status.unwrap().allocatable.unwrap();
    let mem = bytes_of(&alloc["memory"].0);
    assert_eq!(
        field("file"),
        mem.to_string(),
        "volume: the node's allocatable memory ({out})"
    );
    assert_eq!(field("file"), field("env"), "volume and env agree ({out})");
    assert_eq!(
        field("cpu"),
        field("envcpu"),
        "cpu: volume and env agree ({out})"
    );
    assert_ne!(field("cpu"), "0");
    ns.delete().await;
}

/// Item 7: 30 pods created at once all get their service-account token without a failed
/// mount: a TokenRequest the node authorizer refuses because it has not linked the new pod to
/// this node yet is retried quietly, not reported as FailedMount.
#[tokio::test]
async fn a_burst_of_pods_gets_tokens_without_failed_mounts() {
    let client = client().await;
    let ns = TestNs::new(&client, "tokenburst").await;
    let api = ns.pods();
    let names: Vec<String> = (0..30).map(|i| format!("burst-{i:02}")).collect();
    let creates = names.iter().map(|n| {
        let p = busybox_pod(n, "exec sleep 3600", "Always", Some(1));
        let api = api.clone();
        async move {
            api.create(&Default::default(), &p)
                .await
                .unwrap_or_else(|e| panic!("creating a pod: {e}"))
        }
    });
    futures::future::join_all(creates).await;
    for n in &names {
        let p = wait_running(&api, n).await;
        let mounted = p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| v.iter().any(|v| v.projected.is_some()));
        assert!(
            mounted,
            "pod {n} has the projected service-account token volume"
        );
    }
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let failed: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedMount"))
        .map(|e| e.message.unwrap_or_default())
        .collect();
    assert!(failed.is_empty(), "FailedMount events: {failed:#?}");
    ns.delete().await;
}

/// Item 8: `kubectl get nodes -o wide` shows the runtime version as the Go kubelet prints it
/// (`containerd://1.6.20`, not Debian's `1.6.20~ds1`; `containerd://2.4.2`, not `v2.4.2`).
#[tokio::test]
async fn node_shows_the_runtime_version_as_the_go_kubelet() {
    let version = crictl(&["version"]);
    let raw = version
        .lines()
        .find_map(|l| l.strip_prefix("RuntimeVersion:"))
        .map(str::trim)
        .expect("crictl version prints RuntimeVersion")
        .to_string();
    // containerd 2.x says v2.4.2, Debian's 1.6 says 1.6.20~ds1
    let numeric: String = raw
        .trim_start_matches('v')
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let table = Table::parse(&kubectl(&["get", "nodes", "-o", "wide"]));
    let column = table.row(env().node_name())["CONTAINER-RUNTIME"].clone();
    println!("runtime {raw:?} shown as {column:?}");
    assert_eq!(
        column,
        format!("containerd://{}", numeric.trim_end_matches('.'))
    );
}
