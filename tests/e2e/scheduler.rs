//! End-to-end tests of deckhand-scheduler against the local cluster (hack/local-up.sh starts it as
//! the cluster's `default-scheduler`): the Deployment walk-through with deckhand running the pods,
//! kube-scheduler's failure messages and conditions, pods placed once a node that fits appears or
//! gets the missing label, taints and tolerations, and two replicas under leader election.
//!
//! Tests that count the cluster's nodes in a message, or add Node objects, hold `NODES` so their
//! counts stay exact. Added nodes carry a NoSchedule taint that only the test's own pods tolerate,
//! so no other pod ever lands on a node without a kubelet; they are deleted at the end.

use crate::common::{client, env, kubectl};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// VolumeRestrictions, VolumeBinding and VolumeZone with claims, volumes and classes.
mod volumes;

/// Serializes the tests that depend on the number of nodes.
static NODES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The taint every node added by these tests carries.
const FAKE_TAINT_KEY: &str = "deckhand.e2e/fake-node";

// ---------------------------------------------------------------------------------------------
// cluster access
// ---------------------------------------------------------------------------------------------

/// Panics unless hack/local-up.sh's deckhand-scheduler runs (its pid file names a live process).
fn require_scheduler() {
    let pidfile = env().get("SCHEDULER_PIDFILE");
    let pid = std::fs::read_to_string(pidfile).unwrap_or_else(|e| {
        panic!("deckhand-scheduler is not running ({pidfile}: {e}); run hack/local-up.sh")
    });
    let pid = pid.trim();
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "deckhand-scheduler (pid {pid} from {pidfile}) is not running; run hack/local-up.sh"
    );
}

fn suffix() -> String {
    format!("{:06x}", rand::random::<u32>() & 0xff_ffff)
}

struct TestNs {
    name: String,
    client: kube::Client,
}

impl TestNs {
    async fn new(client: &kube::Client, test: &str) -> TestNs {
        let name = format!("e2e-sched-{test}-{}", suffix());
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"deckhand-e2e": "true"}}}))
        .unwrap();
        api.create(&PostParams::default(), &ns)
            .await
            .expect("creating namespace");
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let deadline = Instant::now() + Duration::from_secs(60);
        while sas.get_opt("default").await.ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount in {name} after 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        TestNs {
            name,
            client: client.clone(),
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    async fn create_pod(&self, v: serde_json::Value) -> Pod {
        let pod: Pod = serde_json::from_value(v).expect("a valid pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("creating pod")
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        // pods on fake nodes never finish graceful deletion: force them, then drop the namespace
        let ns = self.name.clone();
        let _ = Command::new(env().get("KUBECTL"))
            .args([
                "--kubeconfig",
                env().get("KUBECONFIG"),
                "-n",
                &ns,
                "delete",
                "pods",
                "--all",
                "--grace-period=0",
                "--force",
                "--wait=false",
            ])
            .output();
        let _ = Command::new(env().get("KUBECTL"))
            .args([
                "--kubeconfig",
                env().get("KUBECONFIG"),
                "delete",
                "namespace",
                &ns,
                "--wait=false",
            ])
            .output();
    }
}

/// A Node object without a kubelet: Ready, with capacity, the fake-node taint, and `extra`
/// labels/taints. Deleted when dropped.
struct FakeNode {
    name: String,
    client: kube::Client,
}

impl FakeNode {
    async fn create(
        client: &kube::Client,
        name: &str,
        cpu: &str,
        labels: serde_json::Value,
        taints: serde_json::Value,
    ) -> FakeNode {
        let now = k8s_openapi::jiff::Timestamp::now();
        let now = k8s_openapi::jiff::Timestamp::from_second(now.as_second())
            .unwrap()
            .to_string();
        let mut all_taints = vec![
            serde_json::json!({"key": FAKE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}),
        ];
        all_taints.extend(taints.as_array().cloned().unwrap_or_default());
        let resources = serde_json::json!({"cpu": cpu, "memory": "8Gi", "pods": "110", "ephemeral-storage": "10Gi"});
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": all_taints},
            "status": {"capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "fake node of deckhand's e2e tests (no kubelet)",
                    "lastHeartbeatTime": now, "lastTransitionTime": now}]}
        }))
        .unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
        FakeNode {
            name: name.to_string(),
            client: client.clone(),
        }
    }

    async fn delete(self) {
        let _ = Api::<Node>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await;
    }
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        let _ = Command::new(env().get("KUBECTL"))
            .args([
                "--kubeconfig",
                env().get("KUBECONFIG"),
                "delete",
                "node",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .output();
    }
}

/// Tolerations of test pods that may land on fake nodes: the fake-node taint and the node
/// lifecycle controller's not-ready/unreachable NoSchedule taints (no kubelet renews them).
fn fake_node_tolerations() -> serde_json::Value {
    serde_json::json!([
        {"key": FAKE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoSchedule"},
    ])
}

async fn node_count(client: &kube::Client) -> usize {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("listing nodes")
        .items
        .len()
}

/// Waits until `check` holds for the pod (watching it); returns the pod.
async fn wait_pod(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Pod) -> bool,
) -> Pod {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(pods.clone(), cfg).applied_objects();
    let found = tokio::time::timeout(timeout, async {
        let mut stream = std::pin::pin!(stream);
        while let Some(p) = stream.next().await {
            if let Ok(p) = p {
                if check(&p) {
                    return p;
                }
            }
        }
        panic!("watch of pod {name} ended")
    })
    .await;
    match found {
        Ok(p) => p,
        Err(_) => {
            let cur = pods.get_opt(name).await.ok().flatten();
            panic!(
                "pod {name} did not reach {what} within {timeout:?}; now: {}",
                cur.map(|p| serde_json::to_string_pretty(&p.status).unwrap())
                    .unwrap_or("gone".into())
            )
        }
    }
}

fn condition<'a>(pod: &'a Pod, t: &str) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == t)
}

fn is_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Events about the pod with `reason`, as `kubectl describe` reads them (core/v1 view).
async fn events_of(client: &kube::Client, ns: &str, uid: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid},reason={reason}")))
        .await
        .expect("listing events")
        .items
}

/// Waits for a FailedScheduling event and the PodScheduled=False/Unschedulable condition, and
/// returns the condition's message after checking the event says the same.
async fn wait_unschedulable(client: &kube::Client, ns: &TestNs, name: &str) -> String {
    let pod = wait_pod(
        &ns.pods(),
        name,
        "PodScheduled=False",
        Duration::from_secs(30),
        |p| {
            condition(p, "PodScheduled").is_some_and(|c| {
                c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            })
        },
    )
    .await;
    assert_eq!(node_of(&pod), None, "pod {name} must stay unbound");
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    let msg = condition(&pod, "PodScheduled")
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let evs = events_of(client, &ns.name, &uid, "FailedScheduling").await;
        if let Some(e) = evs
            .iter()
            .find(|e| e.message.as_deref() == Some(msg.as_str()))
        {
            assert_eq!(e.type_.as_deref(), Some("Warning"));
            let from = e
                .reporting_component
                .clone()
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()));
            assert_eq!(
                from.as_deref(),
                Some("default-scheduler"),
                "event source: {e:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no FailedScheduling event with message {msg:?}; events: {evs:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    println!("[{}] {name}: {msg}", ns.name);
    msg
}

fn preemption_not_helpful(n: usize) -> String {
    format!("preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling.")
}

// ---------------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------------

/// The walk-through: a Deployment of 3 busybox replicas is scheduled and runs; a deleted pod is
/// replaced, placed and Running again within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_walkthrough() {
    require_scheduler();
    let client = client().await;
    let ns = TestNs::new(&client, "walk").await;
    let node = env().get("NODE_NAME").to_string();
    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sleepers"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "sleepers"}},
            "template": {"metadata": {"labels": {"app": "sleepers"}},
                "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "busybox", "image": "busybox", "command": ["sleep", "3600"]}]}}}
    }))
    .unwrap();
    let t0 = Instant::now();
    Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &deploy)
        .await
        .expect("creating the deployment");
    let pods = ns.pods();
    let ready = wait_ready_count(&pods, 3, Duration::from_secs(120)).await;
    println!(
        "[{}] 3 replicas Running and Ready after {:.1}s",
        ns.name,
        t0.elapsed().as_secs_f64()
    );
    for p in &ready {
        assert_eq!(node_of(p), Some(node.as_str()));
        assert_eq!(
            condition(p, "PodScheduled").map(|c| c.status.as_str()),
            Some("True")
        );
        let evs = events_of(
            &client,
            &ns.name,
            p.metadata.uid.as_deref().unwrap(),
            "Scheduled",
        )
        .await;
        let want = format!(
            "Successfully assigned {}/{} to {node}",
            ns.name,
            p.metadata.name.as_deref().unwrap()
        );
        assert!(
            evs.iter()
                .any(|e| e.message.as_deref() == Some(want.as_str())),
            "no Scheduled event {want:?}: {evs:?}"
        );
    }

    let text = kubectl(&["-n", &ns.name, "get", "pods", "-o", "wide"]);
    println!("[{}] kubectl get pods -o wide:\n{text}", ns.name);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3, "3 pods in:\n{text}");
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column"))
    };
    for r in &rows {
        assert_eq!(r[col("READY")], "1/1", "{text}");
        assert_eq!(r[col("STATUS")], "Running", "{text}");
        assert_eq!(r[col("NODE")], node, "{text}");
    }

    // delete one: the ReplicaSet creates a replacement, the scheduler places it, deckhand runs it
    let victim = ready[0].metadata.name.clone().unwrap();
    let old: std::collections::BTreeSet<String> = ready
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    let t_del = Instant::now();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .expect("deleting a pod");
    let replacement = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let list = pods
                .list(&ListParams::default())
                .await
                .expect("listing pods");
            if let Some(p) = list
                .items
                .iter()
                .find(|p| !old.contains(p.metadata.name.as_deref().unwrap()) && is_ready(p))
            {
                return p.clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("no Ready replacement within 60 s of the deletion");
    let took = t_del.elapsed();
    println!(
        "[{}] deleted {victim}; replacement {} Running and Ready on {} {:.2}s after the deletion",
        ns.name,
        replacement.metadata.name.as_deref().unwrap(),
        node_of(&replacement).unwrap_or("?"),
        took.as_secs_f64()
    );
    assert_eq!(node_of(&replacement), Some(node.as_str()));
    let text = kubectl(&["-n", &ns.name, "get", "pods", "-o", "wide"]);
    println!("[{}] after the replacement:\n{text}", ns.name);
    assert!(
        text.lines()
            .filter(|l| l.contains("Running") && l.contains(" 1/1 "))
            .count()
            >= 3,
        "{text}"
    );
    drop(ns);
}

async fn wait_ready_count(pods: &Api<Pod>, n: usize, timeout: Duration) -> Vec<Pod> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = pods
            .list(&ListParams::default())
            .await
            .expect("listing pods");
        let ready: Vec<Pod> = list
            .items
            .iter()
            .filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        if ready.len() >= n {
            return ready;
        }
        if Instant::now() > deadline {
            let summary: Vec<String> = list
                .items
                .iter()
                .map(|p| {
                    format!(
                        "{} {:?} node={:?} {:?}",
                        p.metadata.name.as_deref().unwrap_or(""),
                        p.status.as_ref().and_then(|s| s.phase.clone()),
                        node_of(p),
                        condition(p, "PodScheduled").and_then(|c| c.message.clone())
                    )
                })
                .collect();
            panic!(
                "only {} of {n} pods Running and Ready after {timeout:?}: {summary:#?}",
                ready.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A pod requesting more cpu than any node has stays Pending with kube-scheduler's message, and
/// is placed as soon as a node that fits is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_much_cpu_waits_for_a_node_that_fits() {
    require_scheduler();
    let client = client().await;
    let _nodes = NODES.lock().await;
    let ns = TestNs::new(&client, "cpu").await;
    let n = node_count(&client).await;
    ns.create_pod(serde_json::json!({
        "metadata": {"name": "big"},
        "spec": {"tolerations": fake_node_tolerations(), "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "1000"}}}]}
    }))
    .await;
    let msg = wait_unschedulable(&client, &ns, "big").await;
    assert_eq!(
        msg,
        format!(
            "0/{n} nodes are available: {n} Insufficient cpu. {}",
            preemption_not_helpful(n)
        )
    );

    let t = Instant::now();
    let big = FakeNode::create(
        &client,
        &format!("e2e-sched-big-{}", suffix()),
        "2000",
        serde_json::json!({}),
        serde_json::json!([]),
    )
    .await;
    let pod = wait_pod(&ns.pods(), "big", "bound", Duration::from_secs(30), |p| {
        node_of(p).is_some()
    })
    .await;
    println!(
        "[{}] bound to {} {:.2}s after the node was added",
        ns.name,
        node_of(&pod).unwrap(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(node_of(&pod), Some(big.name.as_str()));
    drop(ns);
    big.delete().await;
}

/// A pod whose nodeSelector no node matches stays Pending; labelling the node gets it scheduled
/// (and run by deckhand) without restarting anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selector_waits_for_the_label() {
    require_scheduler();
    let client = client().await;
    let _nodes = NODES.lock().await;
    let ns = TestNs::new(&client, "selector").await;
    let node = env().get("NODE_NAME").to_string();
    let key = format!("deckhand.e2e/disk-{}", suffix());
    let n = node_count(&client).await;
    ns.create_pod(serde_json::json!({
        "metadata": {"name": "picky"},
        "spec": {"nodeSelector": {key.clone(): "ssd"}, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))
    .await;
    let msg = wait_unschedulable(&client, &ns, "picky").await;
    assert_eq!(
        msg,
        format!(
            "0/{n} nodes are available: {n} node(s) didn't match Pod's node affinity/selector. {}",
            preemption_not_helpful(n)
        )
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let label = |v: Option<&str>| serde_json::json!({"metadata": {"labels": {key.clone(): v}}});
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(&label(Some("ssd"))),
        )
        .await
        .expect("labelling the node");
    let t = Instant::now();
    let pod = wait_pod(
        &ns.pods(),
        "picky",
        "Running",
        Duration::from_secs(60),
        is_ready,
    )
    .await;
    println!(
        "[{}] picky Running on {} {:.2}s after the label",
        ns.name,
        node_of(&pod).unwrap(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(node_of(&pod), Some(node.as_str()));
    nodes
        .patch(&node, &PatchParams::default(), &Patch::Merge(&label(None)))
        .await
        .expect("removing the label");
    drop(ns);
}

/// A NoSchedule taint keeps pods without a toleration off the node; a toleration lets them on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taints_keep_untolerating_pods_off() {
    require_scheduler();
    let client = client().await;
    let _nodes = NODES.lock().await;
    let ns = TestNs::new(&client, "taint").await;
    let sfx = suffix();
    let key = format!("deckhand.e2e/pool-{sfx}");
    let tainted = FakeNode::create(&client, &format!("e2e-sched-tainted-{sfx}"), "4",
        serde_json::json!({key.clone(): "gpu"}),
        serde_json::json!([{"key": "deckhand.e2e/dedicated", "value": "gpu", "effect": "NoSchedule"}])).await;
    let n = node_count(&client).await;
    let pod = |name: &str, tolerate: bool| {
        let mut tol = fake_node_tolerations();
        if tolerate {
            tol.as_array_mut().unwrap().push(serde_json::json!({"key": "deckhand.e2e/dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}));
        }
        serde_json::json!({"metadata": {"name": name},
            "spec": {"nodeSelector": {key.clone(): "gpu"}, "tolerations": tol, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox"}]}})
    };
    ns.create_pod(pod("plain", false)).await;
    let msg = wait_unschedulable(&client, &ns, "plain").await;
    // kube-scheduler sorts the "<count> <reason>" strings
    let mut parts = vec![
        "1 node(s) had untolerated taint(s)".to_string(),
        format!(
            "{} node(s) didn't match Pod's node affinity/selector",
            n - 1
        ),
    ];
    parts.sort();
    assert_eq!(
        msg,
        format!(
            "0/{n} nodes are available: {}. {}",
            parts.join(", "),
            preemption_not_helpful(n)
        )
    );
    ns.create_pod(pod("tolerant", true)).await;
    let p = wait_pod(
        &ns.pods(),
        "tolerant",
        "bound",
        Duration::from_secs(30),
        |p| node_of(p).is_some(),
    )
    .await;
    assert_eq!(node_of(&p), Some(tainted.name.as_str()));
    let plain = ns.pods().get("plain").await.unwrap();
    assert_eq!(node_of(&plain), None, "the untolerating pod stays off");
    drop(ns);
    tainted.delete().await;
}

struct Replica {
    child: Child,
    log: PathBuf,
}

impl Replica {
    fn start(name: &str, lease: &str, idx: usize) -> Replica {
        let log = std::env::temp_dir().join(format!("{lease}-{idx}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_deckhand-scheduler"))
            .args([
                "--kubeconfig",
                env().get("KUBECONFIG"),
                "--scheduler-name",
                name,
                "--leader-elect-resource-name",
                lease,
                "--leader-elect-resource-namespace",
                "kube-system",
                "--leader-elect-lease-duration",
                "6s",
                "--leader-elect-renew-deadline",
                "4s",
                "--leader-elect-retry-period",
                "1s",
            ])
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("starting deckhand-scheduler");
        Replica { child, log }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn binds(&self) -> usize {
        self.log().matches("successfully bound pod to node").count()
    }

    /// The binds this replica logged once `want` are logged, or after 5 s. A pod shows its node
    /// in a watch before the replica's log line for the bind is written (it follows the
    /// binding call's answer), so the count is polled, not read once.
    async fn binds_when(&self, want: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let n = self.binds();
            if n >= want || Instant::now() >= deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Two replicas: exactly one holds the Lease and binds; killing it hands over to the other; a
/// SIGTERM stops the survivor cleanly and releases the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_two_replicas() {
    let client = client().await;
    let ns = TestNs::new(&client, "leader").await;
    let sfx = suffix();
    let sched = format!("e2e-sched-{sfx}");
    let lease = format!("e2e-sched-{sfx}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let mut replicas = vec![
        Replica::start(&sched, &lease, 0),
        Replica::start(&sched, &lease, 1),
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let holder = loop {
        if let Some(h) = lease_holder(&leases, &lease).await {
            break h;
        }
        assert!(
            Instant::now() < deadline,
            "no replica took Lease kube-system/{lease}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // identities are logged when acquired
    tokio::time::sleep(Duration::from_millis(500)).await;
    let leader = replicas
        .iter()
        .position(|r| r.log().contains(&holder))
        .unwrap_or_else(|| {
            panic!(
                "holder {holder} not in either log:\n{}\n---\n{}",
                replicas[0].log(),
                replicas[1].log()
            )
        });
    let follower = 1 - leader;
    println!("[{}] replica {leader} holds the lease ({holder})", ns.name);

    let pod = |name: &str| {
        serde_json::json!({"metadata": {"name": name},
        "spec": {"schedulerName": sched, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}})
    };
    for i in 0..3 {
        ns.create_pod(pod(&format!("first-{i}"))).await;
    }
    for i in 0..3 {
        wait_pod(
            &ns.pods(),
            &format!("first-{i}"),
            "bound",
            Duration::from_secs(30),
            |p| node_of(p).is_some(),
        )
        .await;
    }
    assert_eq!(
        replicas[leader].binds_when(3).await,
        3,
        "leader log:\n{}",
        replicas[leader].log()
    );
    assert_eq!(
        replicas[follower].binds(),
        0,
        "follower log:\n{}",
        replicas[follower].log()
    );

    // kill the leader: no release, the follower takes over once the lease expires
    let t = Instant::now();
    replicas[leader].child.kill().expect("killing the leader");
    let _ = replicas[leader].child.wait();
    for i in 0..2 {
        ns.create_pod(pod(&format!("second-{i}"))).await;
    }
    for i in 0..2 {
        wait_pod(
            &ns.pods(),
            &format!("second-{i}"),
            "bound",
            Duration::from_secs(40),
            |p| node_of(p).is_some(),
        )
        .await;
    }
    println!(
        "[{}] after SIGKILL of the leader, the other replica bound the new pods {:.1}s later",
        ns.name,
        t.elapsed().as_secs_f64()
    );
    assert_eq!(
        replicas[follower].binds_when(2).await,
        2,
        "new leader log:\n{}",
        replicas[follower].log()
    );
    let new_holder = lease_holder(&leases, &lease).await.expect("a holder");
    assert_ne!(new_holder, holder);

    // SIGTERM: clean exit, lease released
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(replicas[follower].child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = replicas[follower].child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "deckhand-scheduler did not exit within 15 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        status.success(),
        "exit status {status}; log:\n{}",
        replicas[follower].log()
    );
    assert_eq!(
        lease_holder(&leases, &lease).await,
        None,
        "the lease is released on SIGTERM"
    );
    let _ = leases.delete(&lease, &DeleteParams::default()).await;
    drop(replicas);
    drop(ns);
}
