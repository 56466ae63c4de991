//! End-to-end: the local cluster with several deckhand nodes (`NODES=3 hack/local-up.sh up`:
//! the main node plus dh-node-2.. in their own network, mount, UTS and cgroup namespaces, each
//! with its own containerd and deckhand; hack/lib/nodes.sh). deckhand-scheduler spreads a
//! Deployment over every Ready node, a pod reaches a pod on another node by its pod IP, a deleted
//! pod is replaced, and (node loss) a stopped node's pods are replaced on the others and cleaned
//! up on it once it is back.
//!
//! Needs at least two Ready nodes: with the default `NODES=1` every test here fails at once and
//! says so (these tests never pass silently). README command 2 (hack/test.sh) runs them in its
//! multi-node phase, on `NODES=3`. The scheduler's multi-node cases are in
//! `multinode/scheduling.rs`.

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

mod scheduling;

/// The tests of this module change what runs on the nodes (a Deployment over all of them, a node
/// stopped): one at a time.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::OnceLock<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

/// The Ready nodes (by name), failing clearly when there are fewer than two.
async fn ready_nodes(client: &kube::Client) -> BTreeSet<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .expect("listing nodes");
    let all: Vec<String> = list
        .items
        .iter()
        .map(|n| {
            format!(
                "{} ({})",
                n.metadata.name.as_deref().unwrap_or(""),
                node_ready_status(n)
            )
        })
        .collect();
    let ready: BTreeSet<String> = list
        .items
        .iter()
        .filter(|n| node_ready_status(n) == "True")
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert!(
        ready.len() >= 2,
        "e2e::multinode needs at least 2 Ready nodes: bring the cluster up with NODES=3 hack/local-up.sh up \
         (this cluster has {} Ready: {}; env NODES={})",
        ready.len(),
        all.join(", "),
        env().get("NODES")
    );
    ready
}

/// Waits (up to 60 s) until every node in `nodes` is Ready and carries none of the node
/// lifecycle controller's `node.kubernetes.io/*` NoSchedule or NoExecute taints. Those are taken
/// off one node-monitor period (5 s) after the node is Ready again, so a node that has just come
/// back (the node-loss test) is Ready before any pod may be scheduled on it.
async fn wait_schedulable(client: &kube::Client, nodes: &BTreeSet<String>) {
    let api: Api<Node> = Api::all(client.clone());
    let blocked = |n: &Node| -> Option<String> {
        let name = n.metadata.name.clone().unwrap_or_default();
        if node_ready_status(n) != "True" {
            return Some(format!("{name}: not Ready"));
        }
        let taints: Vec<String> = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key.starts_with("node.kubernetes.io/") && t.effect != "PreferNoSchedule")
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        (!taints.is_empty()).then(|| format!("{name}: {}", taints.join(", ")))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .expect("listing nodes");
        let waiting: Vec<String> = list
            .items
            .iter()
            .filter(|n| n.metadata.name.as_ref().is_some_and(|m| nodes.contains(m)))
            .filter_map(blocked)
            .collect();
        if waiting.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "nodes not schedulable after 60 s: {waiting:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A Deployment of busybox pods serving `hello from <pod name>` on port 8080, with the
/// node-lifecycle tolerations shortened to 10 s (a lost node's pods are replaced soon).
///
/// Each pod requests 100m cpu, as much as CoreDNS on the main node. The spreading comes from
/// PodTopologySpread's system defaults (the pods' ReplicaSet selects them: hostname, maxSkew 3,
/// ScheduleAnyway) with the least-allocated and balanced-allocation scores; before deckhand-scheduler
/// had topology spreading, 10m requests put 4 on dh-node-3, 2 on dh-node-2 and none on the main
/// node.
fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [
                        {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 10},
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 10}
                    ],
                    "containers": [{
                        "name": "web",
                        "image": "busybox",
                        "command": ["sh", "-c",
                            "mkdir -p /www && echo \"hello from $POD_NAME\" > /www/index.html && exec httpd -f -p 8080 -h /www"],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}}
                    }]
                }
            }
        }
    }))
    .expect("a valid Deployment")
}

/// The Deployment's pods that are Running and Ready and not being deleted: name -> (node, pod IP).
async fn running_pods(api: &Api<Pod>, app: &str) -> BTreeMap<String, (String, String)> {
    let list = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("listing pods");
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| phase(p) == "Running" && condition(p, "Ready") == Some("True"))
        .filter_map(|p| {
            let s = p.spec.as_ref()?;
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            Some((p.metadata.name.clone()?, (s.node_name.clone()?, ip)))
        })
        .collect()
}

/// Waits until `want` pods of the Deployment run and are Ready; returns them.
async fn wait_replicas(
    api: &Api<Pod>,
    ns: &str,
    app: &str,
    want: usize,
    timeout: Duration,
) -> BTreeMap<String, (String, String)> {
    let deadline = Instant::now() + timeout;
    loop {
        let pods = running_pods(api, app).await;
        if pods.len() >= want {
            return pods;
        }
        if Instant::now() > deadline {
            panic!(
                "{want} pods of {app} not Running and Ready within {timeout:?} (have {pods:?})\n{}",
                kubectl_raw(&["-n", ns, "get", "pods", "-o", "wide"]).stdout
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// When the pod was created, scheduled, its container started, and it became Ready (API
/// timestamps, 1 s resolution), for the log.
fn milestones(pod: &Pod) -> String {
    let cond = |t: &str| {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == t))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.to_string())
            .unwrap_or_default()
    };
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    format!(
        "{}: created {}, scheduled {}, started {started}, ready {}",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
        cond("PodScheduled"),
        cond("Ready")
    )
}

fn per_node(pods: &BTreeMap<String, (String, String)>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for (node, _) in pods.values() {
        *m.entry(node.clone()).or_insert(0) += 1;
    }
    m
}

#[tokio::test]
async fn deployment_spreads_over_every_node_pods_reach_each_other_and_a_deleted_pod_is_replaced() {
    let _serial = serial().await;
    let client = client().await;
    let nodes = ready_nodes(&client).await;
    let ns = TestNs::new(&client, "multinode").await;
    wait_schedulable(&client, &nodes).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    deployments
        .create(&PostParams::default(), &deployment("web", 6))
        .await
        .expect("creating the Deployment");
    let api = ns.pods();
    let t0 = Instant::now();
    let pods = wait_replicas(&api, &ns.name, "web", 6, POD_TIMEOUT).await;
    let spread = per_node(&pods);
    println!(
        "6 replicas Running and Ready in {:?}, per node: {spread:?}",
        t0.elapsed()
    );
    for name in pods.keys() {
        println!(
            "  {}",
            milestones(&api.get(name).await.expect("reading a pod"))
        );
    }
    for n in &nodes {
        assert!(
            spread.contains_key(n),
            "node {n} got none of the 6 pods (per node: {spread:?})\n{}",
            kubectl_raw(&["-n", &ns.name, "get", "pods", "-o", "wide"]).stdout
        );
    }

    // one pod of each node fetches the page of a pod on the next node, by pod IP
    let mut by_node: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for (name, (node, ip)) in &pods {
        by_node
            .entry(node.as_str())
            .or_insert((name.as_str(), ip.as_str()));
    }
    let order: Vec<(&str, (&str, &str))> = by_node.iter().map(|(n, p)| (*n, *p)).collect();
    for k in 0..order.len() {
        let (from_node, (from_pod, _)) = order[k];
        let (to_node, (to_pod, to_ip)) = order[(k + 1) % order.len()];
        // (nc, as tests/e2e/network.rs: the static busybox's wget dies of SIGSEGV here)
        let url = format!("http://{to_ip}:8080/");
        let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {to_ip} 8080");
        let out = kubectl_raw(&["-n", &ns.name, "exec", from_pod, "--", "sh", "-c", &script]);
        assert!(
            out.status.success()
                && out.stdout.starts_with("HTTP/1.1 200")
                && out.stdout.trim_end().ends_with(&format!("hello from {to_pod}")),
            "pod {from_pod} on {from_node} could not fetch {url} from pod {to_pod} on {to_node}: {}\n{}{}",
            out.status,
            out.stdout,
            out.stderr
        );
        println!("{from_pod} ({from_node}) -> {to_pod} ({to_node}) at {to_ip}: ok");
    }

    // delete a pod on an extra node: a replacement runs within seconds
    let (victim, (victim_node, _)) = pods
        .iter()
        .find(|(_, (n, _))| n != env().node_name())
        .map(|(p, v)| (p.clone(), v.clone()))
        .expect("a pod on an extra node");
    let t0 = Instant::now();
    api.delete(&victim, &DeleteParams::default())
        .await
        .expect("deleting a pod");
    let deadline = t0 + Duration::from_secs(30);
    let replaced = loop {
        let now = running_pods(&api, "web").await;
        if now.len() >= 6 && !now.contains_key(&victim) {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "no replacement for {victim} (on {victim_node}) Running within 30 s: {now:?}\n{}",
            kubectl_raw(&["-n", &ns.name, "get", "pods", "-o", "wide"]).stdout
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let new: Vec<_> = replaced
        .iter()
        .filter(|(p, _)| !pods.contains_key(*p))
        .collect();
    println!(
        "deleted {victim} on {victim_node}: replacement {new:?} Running and Ready after {:?}",
        t0.elapsed()
    );
    for (name, _) in &new {
        println!(
            "  {}",
            milestones(&api.get(name).await.expect("reading the replacement"))
        );
    }
    ns.delete().await;
}

/// Which extra node to stop: the highest index among the Ready dh-node-<i>.
fn extra_node_index(nodes: &BTreeSet<String>) -> u32 {
    nodes
        .iter()
        .filter_map(|n| n.strip_prefix("dh-node-")?.parse::<u32>().ok())
        .max()
        .expect("an extra node dh-node-<i> (NODES>=2 hack/local-up.sh up)")
}

async fn node_ready(client: &kube::Client, name: &str) -> String {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|n| node_ready_status(&n))
        .unwrap_or_default()
}

/// crictl against another containerd (an extra node's socket, seen from the host).
fn try_crictl_at(endpoint: &str, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(env().crictl_bin())
        .args(["-r", endpoint, "-i", endpoint])
        .args(args)
        .output()
        .map_err(|e| format!("running crictl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Starts the node's deckhand again whatever happens to the test.
struct StartNodeAgain(Option<u32>);
impl Drop for StartNodeAgain {
    fn drop(&mut self) {
        if let Some(i) = self.0.take() {
            eprintln!("e2e::multinode: starting dh-node-{i} again after a failure");
            local_up(&["start-node", &i.to_string()]);
        }
    }
}

#[tokio::test]
async fn a_lost_node_s_pods_are_replaced_on_the_others_and_cleaned_up_when_it_is_back() {
    let _serial = serial().await;
    let client = client().await;
    let nodes = ready_nodes(&client).await;
    let i = extra_node_index(&nodes);
    let lost = format!("dh-node-{i}");
    let ns = TestNs::new(&client, "nodeloss").await;
    wait_schedulable(&client, &nodes).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let replicas = 2 * nodes.len();
    deployments
        .create(&PostParams::default(), &deployment("web", replicas as i32))
        .await
        .expect("creating the Deployment");
    let api = ns.pods();
    let pods = wait_replicas(&api, &ns.name, "web", replicas, POD_TIMEOUT).await;
    let on_lost: BTreeSet<String> = pods
        .iter()
        .filter(|(_, (n, _))| *n == lost)
        .map(|(p, _)| p.clone())
        .collect();
    assert!(
        !on_lost.is_empty(),
        "none of the {replicas} pods runs on {lost}: {:?}",
        per_node(&pods)
    );

    let t0 = Instant::now();
    local_up(&["stop-node", &i.to_string()]);
    let mut guard = StartNodeAgain(Some(i));
    // NotReady (Unknown) after kube-controller-manager's node-monitor-grace-period
    let deadline = t0 + Duration::from_secs(120);
    while node_ready(&client, &lost).await == "True" {
        assert!(
            Instant::now() < deadline,
            "{lost} still Ready 120 s after its deckhand stopped"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let t_notready = t0.elapsed();
    // its pods are evicted after their 10 s tolerations, replacements run on the other nodes
    let deadline = Instant::now() + Duration::from_secs(120);
    let replaced = loop {
        let now = running_pods(&api, "web").await;
        let elsewhere = now.iter().filter(|(_, (n, _))| *n != lost).count();
        if elsewhere >= replicas {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "{lost}'s pods not replaced on the other nodes within 120 s of NotReady ({} of {replicas} elsewhere)\n{}",
            elsewhere,
            kubectl_raw(&["-n", &ns.name, "get", "pods", "-o", "wide"]).stdout
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let t_replaced = t0.elapsed();
    println!(
        "{lost} stopped: NotReady after {t_notready:?}, {replicas} pods Running on the other nodes after {t_replaced:?} ({:?})",
        per_node(&replaced)
    );

    // back: Ready again, and the evicted pods are gone from the API and from the node
    guard.0 = None;
    local_up(&["start-node", &i.to_string()]);
    let t1 = Instant::now();
    let deadline = t1 + Duration::from_secs(90);
    loop {
        let left: Vec<String> = api
            .list(&ListParams::default().labels("app=web"))
            .await
            .expect("listing pods")
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| on_lost.contains(n))
            .collect();
        // and on the node itself: no sandbox of an old pod in its containerd
        let sock = format!(
            "unix://{}/{lost}/run-containerd/containerd.sock",
            env().get("NODES_STATE")
        );
        let on_node: Vec<&String> = on_lost
            .iter()
            .filter(|p| {
                try_crictl_at(&sock, &["pods", "-q", "--namespace", &ns.name, "--name", p])
                    .map(|o| !o.trim().is_empty())
                    .unwrap_or(true)
            })
            .collect();
        if left.is_empty() && on_node.is_empty() && node_ready(&client, &lost).await == "True" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{lost} back: Ready={}, old pods in the API {left:?}, on the node {on_node:?} after 90 s\n{}",
            node_ready(&client, &lost).await,
            kubectl_raw(&["-n", &ns.name, "get", "pods", "-o", "wide"]).stdout
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "{lost} started again: Ready and its old pods gone after {:?}",
        t1.elapsed()
    );
    // schedulable again (its unreachable taints gone), as the next test expects
    wait_schedulable(&client, &nodes).await;
    // nothing runs twice: exactly `replicas` pods of the Deployment
    let now = running_pods(&api, "web").await;
    assert_eq!(
        now.len(),
        replicas,
        "pods of web after the node came back: {now:?}"
    );
    // gone before the next test: terminating pods still count on their node for the scheduler
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("deleting the Deployment");
    let deadline = Instant::now() + Duration::from_secs(90);
    while !api
        .list(&ListParams::default())
        .await
        .map(|l| l.items.is_empty())
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "the Deployment's pods not gone after 90 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ns.delete().await;
}
