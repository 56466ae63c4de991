//! End-to-end tests of static pods (issue 7) against the real local cluster (hack/local-up.sh,
//! whose deckhand reads `staticPodPath: manifests` from its `--config` file, i.e.
//! `_output/local-up/manifests`): a manifest file appears as a mirror pod that runs; editing the
//! file replaces the pod; deleting the file removes the pod, its containers and its mirror pod;
//! a mirror pod deleted through the API comes back; a malformed manifest is reported and changes
//! nothing else.

use crate::common::*;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use std::path::PathBuf;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(90);

fn static_dir() -> PathBuf {
    PathBuf::from(env().get("STATIC_POD_DIR"))
}

fn manifest(name: &str, ns: &str, message: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: deckhand-e2e-static}}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, 'echo {message}; exec sleep 3600']\n"
    )
}

/// Writes the file atomically (rename), as editors and config managers do.
fn write_manifest(path: &PathBuf, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn ann<'a>(p: &'a Pod, k: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(k))
        .map(String::as_str)
}

/// Waits until the mirror pod `name` exists, mirrors a static pod other than `not_hash`, and is
/// Running with its container ready; returns it.
async fn wait_mirror_running(api: &Api<Pod>, name: &str, not_hash: Option<&str>) -> Pod {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        if let Ok(Some(p)) = api.get_opt(name).await {
            let hash = ann(&p, "kubernetes.io/config.mirror");
            let fresh = hash.is_some() && hash != not_hash;
            let ready = container_status(&p, "main").is_some_and(|c| c.ready);
            if fresh && phase(&p) == "Running" && ready && p.metadata.deletion_timestamp.is_none() {
                return p;
            }
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "mirror pod {name} not Running within {TIMEOUT:?}\n{}\n{}",
                kubectl_raw(&["get", "pods", "-A", "-o", "wide"]).stdout,
                deckhand_log_tail("static", 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Polls an async check every 500 ms until it returns Some, panicking with `what` after
/// [`TIMEOUT`].
async fn poll_async<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {TIMEOUT:?}\n{}",
            deckhand_log_tail("static", 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_gone(api: &Api<Pod>, name: &str) {
    poll_async("mirror pod gone", || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// Removes the test's manifest files however the test ends, so a failed run leaves no static
/// pod behind on the shared cluster.
struct RemoveOnDrop(Vec<PathBuf>);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

#[tokio::test]
async fn static_pod_file_runs_as_mirror_pod_and_follows_edits_and_deletion() {
    let client = client().await;
    let ns = TestNs::new(&client, "static").await;
    let node = env().node_name().to_string();
    let dir = static_dir();
    assert!(
        dir.is_dir(),
        "{} is missing (is local-up's deckhand configured with staticPodPath?)",
        dir.display()
    );
    let file = dir.join(format!("{}-web.yaml", ns.name));
    let name = format!("web-{node}");
    let api = ns.pods();
    let _cleanup = RemoveOnDrop(vec![
        file.clone(),
        dir.join(format!("{}-bad.yaml", ns.name)),
    ]);

    // 1. A new file: a mirror pod named <name>-<node>, owned by the Node, Running.
    write_manifest(&file, &manifest("web", &ns.name, "first"));
    let m1 = wait_mirror_running(&api, &name, None).await;
    let hash1 = ann(&m1, "kubernetes.io/config.mirror").unwrap().to_string();
    assert_eq!(ann(&m1, "kubernetes.io/config.source"), Some("file"));
    assert_eq!(ann(&m1, "kubernetes.io/config.hash"), Some(hash1.as_str()));
    assert!(ann(&m1, "kubernetes.io/config.seen").is_some());
    assert_ne!(
        uid(&m1),
        hash1,
        "the mirror pod has its own UID; the static pod's is the hash"
    );
    let owner = &m1
        .metadata
        .owner_references
        .as_ref()
        .expect("owner references")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Node", node.as_str(), Some(true))
    );
    assert_eq!(
        m1.spec.as_ref().unwrap().node_name.as_deref(),
        Some(node.as_str())
    );
    // The containers run under the static pod's UID (the hash), not the mirror pod's.
    assert!(
        !containers_of(&hash1).is_empty(),
        "no container labelled with the static pod UID"
    );
    assert!(containers_of(&uid(&m1)).is_empty());
    let logs = kubectl(&["-n", &ns.name, "logs", &name]);
    assert!(logs.contains("first"), "logs: {logs}");

    // 2. A mirror pod deleted through the API comes back (same static pod, new mirror UID).
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    let m1b = poll_async("mirror pod re-created", || async {
        api.get_opt(&name)
            .await
            .ok()
            .flatten()
            .filter(|p| uid(p) != uid(&m1) && p.metadata.deletion_timestamp.is_none())
    })
    .await;
    assert_eq!(
        ann(&m1b, "kubernetes.io/config.mirror"),
        Some(hash1.as_str())
    );
    assert!(
        !containers_of(&hash1).is_empty(),
        "the static pod kept running"
    );
    let m1b = wait_mirror_running(&api, &name, None).await;
    assert_eq!(
        ann(&m1b, "kubernetes.io/config.mirror"),
        Some(hash1.as_str())
    );

    // 3. Editing the file replaces the pod: new hash, new containers, old ones removed.
    write_manifest(&file, &manifest("web", &ns.name, "second"));
    let m2 = wait_mirror_running(&api, &name, Some(&hash1)).await;
    let hash2 = ann(&m2, "kubernetes.io/config.mirror").unwrap().to_string();
    assert_ne!(hash1, hash2);
    poll(
        TIMEOUT,
        Duration::from_millis(500),
        "old static pod's sandboxes removed",
        || sandboxes_of(&hash1).is_empty().then_some(()),
    )
    .await;
    let logs = kubectl(&["-n", &ns.name, "logs", &name]);
    assert!(logs.contains("second"), "logs after the edit: {logs}");

    // 4. A malformed manifest: a Warning event on the Node, nothing else changes, deckhand lives.
    let pid = deckhand_pid();
    let bad = dir.join(format!("{}-bad.yaml", ns.name));
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: Not_Valid}\nspec: {containers: []}\n",
    )
    .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let bad_name = bad.display().to_string();
    poll_async("FailedStaticPodManifest event on the node", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("FailedStaticPodManifest")
                    && e.type_.as_deref() == Some("Warning")
                    && e.involved_object.kind.as_deref() == Some("Node")
                    && e.message.as_deref().unwrap_or("").contains(&bad_name)
            })
            .map(|_| ())
    })
    .await;
    std::fs::remove_file(&bad).unwrap();
    assert_eq!(deckhand_pid(), pid, "deckhand restarted on a bad manifest");
    let still = api.get(&name).await.unwrap();
    assert_eq!(
        ann(&still, "kubernetes.io/config.mirror"),
        Some(hash2.as_str())
    );

    // 5. Deleting the file removes the pod, its containers and its mirror pod.
    std::fs::remove_file(&file).unwrap();
    wait_gone(&api, &name).await;
    poll(
        TIMEOUT,
        Duration::from_millis(500),
        "static pod's sandboxes removed",
        || (sandboxes_of(&hash2).is_empty() && containers_of(&hash2).is_empty()).then_some(()),
    )
    .await;
    ns.delete().await;
}

/// A mirror pod's status changed by another component is corrected, as the Go kubelet's status
/// manager reconciles a static pod's status against its mirror pod (k/k `needsReconcile`). The
/// node lifecycle controller does this to every pod of a node that was NotReady (Ready=False):
/// in a kubeadm cluster the control plane's mirror pods then stayed Ready=False for ever.
#[tokio::test]
async fn a_mirror_pod_status_changed_by_another_component_is_corrected() {
    let client = client().await;
    let ns = TestNs::new(&client, "static-reconcile").await;
    let node = env().node_name().to_string();
    let dir = static_dir();
    let file = dir.join(format!("{}-rec.yaml", ns.name));
    let name = format!("rec-{node}");
    let api = ns.pods();
    let _cleanup = RemoveOnDrop(vec![file.clone()]);
    write_manifest(&file, &manifest("rec", &ns.name, "reconcile"));
    let m = wait_mirror_running(&api, &name, None).await;
    poll_async("mirror pod Ready", || async {
        let p = api.get(&name).await.ok()?;
        (condition(&p, "Ready") == Some("True")).then_some(())
    })
    .await;
    // what the node lifecycle controller's MarkPodsNotReady writes
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = serde_json::json!({
        "metadata": {"uid": m.metadata.uid},
        "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}]}
    });
    kubectl(&[
        "-n",
        &ns.name,
        "patch",
        "pod",
        &name,
        "--subresource=status",
        "--type=strategic",
        "-p",
        &patch.to_string(),
    ]);
    let p = api.get(&name).await.unwrap();
    assert_eq!(
        condition(&p, "Ready"),
        Some("False"),
        "the patch did not apply"
    );
    let patched = std::time::Instant::now();
    poll_async("the mirror pod's Ready condition corrected", || async {
        let p = api.get(&name).await.ok()?;
        (condition(&p, "Ready") == Some("True")).then_some(())
    })
    .await;
    // the status manager's periodic pass (10 s, as the Go status manager's syncBatch) corrects
    // it, not the 30 s pod resync
    let took = patched.elapsed();
    assert!(
        took < deckhand::status::manager::MIRROR_RECONCILE_PERIOD + Duration::from_secs(8),
        "the mirror pod's status was corrected after {took:?}"
    );
    std::fs::remove_file(&file).unwrap();
    wait_gone(&api, &name).await;
    ns.delete().await;
}
