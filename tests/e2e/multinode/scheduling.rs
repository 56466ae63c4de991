//! deckhand-scheduler's choices that need several real nodes: a topology spread constraint,
//! node selectors and taints steering pods to different nodes, and host-port conflicts resolved
//! on another node, each with kube-scheduler's message for what cannot be placed. (A node going
//! NotReady and getting no pods is the node-loss test in the parent file.)

use super::*;

/// Undoes the node labels and taints a test put on, whatever happens to the test.
struct NodeChanges(Vec<Vec<String>>);

impl NodeChanges {
    /// `kubectl <args>` now, and `kubectl <undo>` at the end.
    fn apply(&mut self, args: &[&str], undo: &[&str]) {
        let out = kubectl_raw(args);
        assert!(out.status.success(), "kubectl {args:?}: {}", out.stderr);
        self.0.push(undo.iter().map(|s| s.to_string()).collect());
    }
}

impl Drop for NodeChanges {
    fn drop(&mut self) {
        for undo in self.0.drain(..).rev() {
            let args: Vec<&str> = undo.iter().map(String::as_str).collect();
            let _ = kubectl_raw(&args);
        }
    }
}

/// The cluster a test here runs on: three Ready nodes, held for this test alone.
struct Cluster {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    client: kube::Client,
    nodes: BTreeSet<String>,
}

async fn three_nodes() -> Cluster {
    let _serial = serial().await;
    let client = client().await;
    let nodes = ready_nodes(&client).await;
    assert_eq!(
        nodes.len(),
        3,
        "this test wants exactly 3 Ready nodes (NODES=3): {nodes:?}"
    );
    Cluster {
        _serial,
        client,
        nodes,
    }
}

/// A busybox pod that sleeps, not bound to a node, with `spec` merged over the defaults.
fn unbound_pod(name: &str, labels: serde_json::Value, spec: serde_json::Value) -> Pod {
    let mut s = serde_json::json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}],
    });
    if let serde_json::Value::Object(m) = spec {
        for (k, v) in m {
            s[k] = v;
        }
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": s,
    }))
    .expect("a valid pod")
}

/// Polls `check` every 200 ms for up to 30 s.
async fn within_30s<T, F: std::future::Future<Output = Option<T>>>(
    mut check: impl FnMut() -> F,
) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the pod is bound; returns its node.
async fn wait_bound(api: &Api<Pod>, name: &str) -> String {
    within_30s(|| async { api.get(name).await.ok()?.spec?.node_name })
        .await
        .unwrap_or_else(|| {
            panic!(
                "pod {name} not bound within 30 s: {}",
                kubectl_raw(&[
                    "get",
                    "pod",
                    "-A",
                    "--field-selector",
                    &format!("metadata.name={name}"),
                    "-o",
                    "jsonpath={.items[*].status.conditions}"
                ])
                .stdout
            )
        })
}

/// Waits until the pod's PodScheduled condition is False; returns its message.
async fn wait_unschedulable(api: &Api<Pod>, name: &str) -> String {
    within_30s(|| async {
        let c = api
            .get(name)
            .await
            .ok()?
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        c.message
    })
    .await
    .unwrap_or_else(|| panic!("pod {name}: no PodScheduled=False within 30 s"))
}

#[tokio::test]
async fn a_hard_spread_constraint_puts_two_of_six_on_each_of_three_nodes() {
    let Cluster {
        _serial,
        client,
        nodes,
    } = three_nodes().await;
    let ns = TestNs::new(&client, "spread").await;
    wait_schedulable(&client, &nodes).await;
    let api = ns.pods();
    // created together, before any is bound: the scheduler's own assumed pods must count
    let constraint = serde_json::json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}}}]});
    for i in 0..6 {
        let p = unbound_pod(
            &format!("spread-{i}"),
            serde_json::json!({"app": "spread"}),
            constraint.clone(),
        );
        api.create(&PostParams::default(), &p)
            .await
            .expect("creating a pod");
    }
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        *per_node
            .entry(wait_bound(&api, &format!("spread-{i}")).await)
            .or_insert(0) += 1;
    }
    println!("per node: {per_node:?}");
    assert_eq!(
        per_node.keys().cloned().collect::<BTreeSet<_>>(),
        nodes,
        "{per_node:?}"
    );
    assert!(
        per_node.values().all(|&n| n == 2),
        "maxSkew 1 over 6 pods and 3 nodes: {per_node:?}"
    );

    // a seventh pod whose spread no node can keep (minDomains 4 of 3 nodes: the global minimum
    // is 0, and every node holds 2 already)
    let strict = serde_json::json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "minDomains": 4, "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]});
    let p = unbound_pod(
        "spread-strict",
        serde_json::json!({"app": "spread"}),
        strict,
    );
    api.create(&PostParams::default(), &p)
        .await
        .expect("creating a pod");
    let msg = wait_unschedulable(&api, "spread-strict").await;
    assert_eq!(
        msg,
        "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints. \
         preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
        "kube-scheduler's message"
    );
    ns.delete().await;
}

#[tokio::test]
async fn node_selectors_and_taints_steer_pods_to_different_nodes() {
    let Cluster {
        _serial,
        client,
        nodes,
    } = three_nodes().await;
    let extra: Vec<&String> = nodes.iter().filter(|n| n.starts_with("dh-node-")).collect();
    let (tainted, labelled) = (extra[0].as_str(), extra[1].as_str());
    let mut changes = NodeChanges(Vec::new());
    changes.apply(
        &["taint", "node", tainted, "deckhand-e2e=only:NoSchedule"],
        &["taint", "node", tainted, "deckhand-e2e=only:NoSchedule-"],
    );
    changes.apply(
        &["label", "node", labelled, "deckhand-e2e-pool=b"],
        &["label", "node", labelled, "deckhand-e2e-pool-"],
    );
    let ns = TestNs::new(&client, "steer").await;
    wait_schedulable(&client, &nodes).await;
    let api = ns.pods();
    let on_tainted = serde_json::json!({"nodeSelector": {"kubernetes.io/hostname": tainted}});
    let mut tolerating = on_tainted.clone();
    tolerating["tolerations"] = serde_json::json!([{"key": "deckhand-e2e", "operator": "Equal",
        "value": "only", "effect": "NoSchedule"}]);
    let cases = [
        (
            "pool-b",
            serde_json::json!({"nodeSelector": {"deckhand-e2e-pool": "b"}}),
        ),
        ("tolerates", tolerating),
        (
            "preferred-pool-b",
            serde_json::json!({"affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference":
                {"matchExpressions": [{"key": "deckhand-e2e-pool", "operator": "In", "values": ["b"]}]}}]}}}),
        ),
        ("untolerated", on_tainted),
    ];
    for (name, spec) in &cases {
        let p = unbound_pod(name, serde_json::json!({"app": "steer"}), spec.clone());
        api.create(&PostParams::default(), &p)
            .await
            .expect("creating a pod");
    }
    assert_eq!(wait_bound(&api, "pool-b").await, labelled);
    assert_eq!(wait_bound(&api, "tolerates").await, tainted);
    assert_eq!(wait_bound(&api, "preferred-pool-b").await, labelled);
    let msg = wait_unschedulable(&api, "untolerated").await;
    assert_eq!(
        msg,
        "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 node(s) didn't match Pod's \
         node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful \
         for scheduling.",
        "kube-scheduler's message"
    );
    for name in ["pool-b", "tolerates"] {
        let pod = wait_running(&api, name).await;
        println!(
            "{name}: Running on {}",
            pod.spec.and_then(|s| s.node_name).unwrap_or_default()
        );
    }
    // taking the taint off lets the waiting pod in
    drop(changes);
    assert_eq!(wait_bound(&api, "untolerated").await, tainted);
    ns.delete().await;
}

#[tokio::test]
async fn pods_with_the_same_host_port_go_to_different_nodes_and_a_fourth_waits() {
    let Cluster {
        _serial,
        client,
        nodes,
    } = three_nodes().await;
    let ns = TestNs::new(&client, "hostport").await;
    wait_schedulable(&client, &nodes).await;
    let api = ns.pods();
    let spec = serde_json::json!({"containers": [{"name": "main", "image": "busybox",
        "command": ["sleep", "3600"], "ports": [{"containerPort": 8080, "hostPort": 28080}],
        "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]});
    let mut bound = BTreeSet::new();
    for i in 0..3 {
        let name = format!("hp-{i}");
        let p = unbound_pod(&name, serde_json::json!({"app": "hostport"}), spec.clone());
        api.create(&PostParams::default(), &p)
            .await
            .expect("creating a pod");
        // one after another: each must avoid the nodes whose port is taken
        bound.insert(wait_bound(&api, &name).await);
    }
    assert_eq!(bound, nodes, "one pod with host port 28080 per node");
    for i in 0..3 {
        wait_running(&api, &format!("hp-{i}")).await;
    }
    let p = unbound_pod("hp-3", serde_json::json!({"app": "hostport"}), spec);
    api.create(&PostParams::default(), &p)
        .await
        .expect("creating a pod");
    let msg = wait_unschedulable(&api, "hp-3").await;
    assert_eq!(
        msg,
        "0/3 nodes are available: 3 node(s) didn't have free ports for the requested pod ports. \
         preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
        "kube-scheduler's message"
    );
    // freeing one node's port lets the fourth in, on that node
    let freed = wait_bound(&api, "hp-0").await;
    api.delete("hp-0", &DeleteParams::default())
        .await
        .expect("deleting hp-0");
    assert_eq!(wait_bound(&api, "hp-3").await, freed);
    ns.delete().await;
}

#[tokio::test]
async fn anti_affine_replicas_take_one_node_each_and_a_fourth_waits() {
    let Cluster {
        _serial,
        client,
        nodes,
    } = three_nodes().await;
    let ns = TestNs::new(&client, "antiaffinity").await;
    wait_schedulable(&client, &nodes).await;
    let api = ns.pods();
    let spec = serde_json::json!({"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app": "solo"}}}]}}});
    for i in 0..3 {
        let p = unbound_pod(
            &format!("solo-{i}"),
            serde_json::json!({"app": "solo"}),
            spec.clone(),
        );
        api.create(&PostParams::default(), &p)
            .await
            .expect("creating a pod");
    }
    let mut placed = BTreeSet::new();
    for i in 0..3 {
        placed.insert(wait_bound(&api, &format!("solo-{i}")).await);
    }
    assert_eq!(placed, nodes, "one pod per node");
    let p = unbound_pod("solo-3", serde_json::json!({"app": "solo"}), spec);
    api.create(&PostParams::default(), &p)
        .await
        .expect("creating a pod");
    assert_eq!(
        wait_unschedulable(&api, "solo-3").await,
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 \
         nodes are available: 3 No preemption victims found for incoming pod.",
        "kube-scheduler's message"
    );
    // a pod that must sit next to one of them (relabelled to be told apart) lands on its node
    let target = wait_bound(&api, "solo-1").await;
    let out = kubectl_raw(&["-n", &ns.name, "label", "pod", "solo-1", "pick=me"]);
    assert!(out.status.success(), "labelling solo-1: {}", out.stderr);
    let near = unbound_pod(
        "near-1",
        serde_json::json!({"app": "near"}),
        serde_json::json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"pick": "me"}}}]}}}),
    );
    api.create(&PostParams::default(), &near)
        .await
        .expect("creating a pod");
    assert_eq!(wait_bound(&api, "near-1").await, target);
    ns.delete().await;
}
