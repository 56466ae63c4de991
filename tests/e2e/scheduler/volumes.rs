//! deckhand-scheduler's volume plugins on the real cluster: a WaitForFirstConsumer claim keeps its
//! pod waiting with kube-scheduler's message until a PersistentVolume that fits a node appears;
//! then VolumeBinding pre-binds the volume (its `claimRef`), kube-controller-manager's PV
//! controller binds the claim, and the pod is bound to the volume's node. A claim of an Immediate
//! class that nothing binds, and a missing claim, stop the pod in PreFilter.
//!
//! deckhand does not mount PersistentVolumeClaim volumes yet: these tests check the scheduling
//! and the binding, not that the pod runs.

use super::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

/// Deletes cluster-scoped objects (a StorageClass, a PersistentVolume) when dropped.
struct ClusterObjects(Vec<(&'static str, String)>);

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        for (kind, name) in &self.0 {
            let _ = Command::new(env().get("KUBECTL"))
                .args([
                    "--kubeconfig",
                    env().get("KUBECONFIG"),
                    "delete",
                    kind,
                    name,
                    "--wait=false",
                    "--ignore-not-found",
                ])
                .output();
        }
    }
}

async fn create_class(client: &kube::Client, name: &str, mode: &str) {
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": mode}))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("creating the StorageClass");
}

async fn create_claim(ns: &TestNs, name: &str, class: &str) {
    let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("creating the claim");
}

async fn create_claim_user(ns: &TestNs, name: &str, claim: &str) {
    ns.create_pod(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}
    }))
    .await;
}

/// The WaitForFirstConsumer path: no volume, the bind conflict on every node; a volume on this
/// node appears, the pod is requeued by the PersistentVolume event, its volume is pre-bound and
/// the PV controller completes the binding before the pod is bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_claim_binds_a_local_volume_then_the_pod() {
    require_scheduler();
    let client = client().await;
    let _nodes = NODES.lock().await;
    let ns = TestNs::new(&client, "wffc").await;
    let node = env().get("NODE_NAME").to_string();
    let n = node_count(&client).await;
    let class = format!("e2e-wffc-{}", suffix());
    let pv_name = format!("e2e-local-{}", suffix());
    let _cleanup = ClusterObjects(vec![
        ("persistentvolume", pv_name.clone()),
        ("storageclass", class.clone()),
    ]);
    create_class(&client, &class, "WaitForFirstConsumer").await;
    create_claim(&ns, "data", &class).await;
    create_claim_user(&ns, "user", "data").await;
    let msg = wait_unschedulable(&client, &ns, "user").await;
    assert_eq!(
        msg,
        format!(
            "0/{n} nodes are available: {n} node(s) didn't find available persistent volumes to bind. {}",
            preemption_not_helpful(n)
        )
    );

    let hostname = Api::<Node>::all(client.clone())
        .get(&node)
        .await
        .expect("reading the node")
        .metadata
        .labels
        .and_then(|l| l.get("kubernetes.io/hostname").cloned())
        .unwrap_or_else(|| node.clone());
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": class,
            "hostPath": {"path": format!("/tmp/{pv_name}")},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}}}}))
    .unwrap();
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(&PostParams::default(), &pv)
        .await
        .expect("creating the PersistentVolume");
    let t = Instant::now();
    let pod = wait_pod(
        &ns.pods(),
        "user",
        "bound to a node",
        Duration::from_secs(90),
        |p| node_of(p).is_some(),
    )
    .await;
    println!(
        "[{}] user bound to {} {:.2}s after the PersistentVolume",
        ns.name,
        node_of(&pod).unwrap(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(node_of(&pod), Some(node.as_str()));
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns.name)
        .get("data")
        .await
        .expect("reading the claim");
    assert_eq!(
        claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some(pv_name.as_str()),
        "the claim is bound to the volume before the pod is bound"
    );
    assert!(claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("pv.kubernetes.io/bind-completed")));
    let pv = pvs.get(&pv_name).await.expect("reading the volume");
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone()).unwrap();
    assert_eq!(claim_ref.uid, claim.metadata.uid);
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(
        pv.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("pv.kubernetes.io/bound-by-controller"))
            .map(String::as_str),
        Some("yes")
    );
    drop(ns);
}

/// Claims the scheduler cannot bind: a claim of an Immediate class with no volume, and a claim
/// that does not exist, reject the pod in PreFilter with kube-scheduler's messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_immediate_and_missing_claims_stop_the_pod_in_prefilter() {
    require_scheduler();
    let client = client().await;
    let _nodes = NODES.lock().await;
    let ns = TestNs::new(&client, "immediate").await;
    let n = node_count(&client).await;
    let class = format!("e2e-immediate-{}", suffix());
    let _cleanup = ClusterObjects(vec![("storageclass", class.clone())]);
    create_class(&client, &class, "Immediate").await;
    create_claim(&ns, "data", &class).await;
    create_claim_user(&ns, "immediate", "data").await;
    create_claim_user(&ns, "missing", "nope").await;
    assert_eq!(
        wait_unschedulable(&client, &ns, "immediate").await,
        format!(
            "0/{n} nodes are available: pod has unbound immediate PersistentVolumeClaims. {}",
            preemption_not_helpful(n)
        )
    );
    assert_eq!(
        wait_unschedulable(&client, &ns, "missing").await,
        format!(
            "0/{n} nodes are available: persistentvolumeclaim \"nope\" not found. {}",
            preemption_not_helpful(n)
        )
    );
    drop(ns);
}
