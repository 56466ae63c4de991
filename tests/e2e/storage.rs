//! Persistent volumes end to end (issue 48), on the local cluster's node with deckhand-scheduler:
//! a StatefulSet on kind's default StorageClass `standard` (rancher's local-path-provisioner,
//! deployed by hack/local-up.sh) keeps each replica's data across a replacement and its volumes
//! go with its claims; a hostPath PV and a `local` PV with WaitForFirstConsumer binding are
//! mounted where their claims are used (the local one bind-mounted at the Go kubelet's path and
//! reported in `node.status.volumesInUse`); an unbound claim is the Go kubelet's FailedMount; the
//! volumes of a pod deleted while deckhand is down are unmounted when it starts, their data
//! untouched.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root_dir() -> PathBuf {
    PathBuf::from(env().get("DECKHAND_ROOT_DIR"))
}

/// Applies a YAML document (several, `---` separated) in namespace `ns`.
fn apply(ns: &str, yaml: &str) {
    use std::io::Write;
    let env = env();
    let mut child = std::process::Command::new(env.kubectl_bin())
        .args([
            "--kubeconfig",
            env.kubeconfig(),
            "-n",
            ns,
            "apply",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("running kubectl apply");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success(), "kubectl apply of:\n{yaml}");
}

fn get(ns: &str, what: &str) -> Value {
    serde_json::from_str(&kubectl(&["-n", ns, "get", what, "-o", "json"])).expect("kubectl's JSON")
}

async fn wait_for<T>(timeout_s: u64, what: &str, check: impl FnMut() -> Option<T>) -> T {
    poll(
        Duration::from_secs(timeout_s),
        Duration::from_millis(500),
        what,
        check,
    )
    .await
}

fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or("")
}

async fn wait_pod_running(ns: &str, name: &str) -> Value {
    let what = format!("pod {ns}/{name} Running");
    poll_with(
        POD_TIMEOUT * 2,
        Duration::from_millis(500),
        || format!("{what}\n{}", diagnose(ns, name)),
        || {
            let out = kubectl_raw(&["-n", ns, "get", "pod", name, "-o", "json"]);
            let p: Value = serde_json::from_str(&out.stdout).ok()?;
            (phase(&p) == "Running" && p["status"]["containerStatuses"][0]["ready"] == true)
                .then_some(p)
        },
    )
    .await
}

fn exec(ns: &str, pod: &str, script: &str) -> String {
    kubectl(&["-n", ns, "exec", pod, "--", "sh", "-c", script])
}

/// The mount points of `/proc/self/mountinfo` under `prefix`.
fn mounts_under(prefix: &Path) -> Vec<String> {
    let p = prefix.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|m| m.starts_with(&p))
        .map(String::from)
        .collect()
}

fn volumes_in_use() -> Vec<String> {
    let node = get("default", &format!("node/{}", env().node_name()));
    node["status"]["volumesInUse"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_on_the_default_class_keeps_its_data_across_a_pod_replacement() {
    let _shared = DECKHAND_DISRUPTION.read().await;
    let client = client().await;
    let ns = TestNs::new(&client, "sts").await;
    apply(
        &ns.name,
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox
        command: [sh, -c, 'if [ ! -f /data/id ]; then hostname > /data/id; fi; exec sleep 3600']
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 64Mi}}
"#,
    );
    for i in 0..3 {
        let pod = format!("web-{i}");
        wait_pod_running(&ns.name, &pod).await;
        assert_eq!(exec(&ns.name, &pod, "cat /data/id").trim(), pod);
    }
    // every claim went through the default class's provisioner: a hostPath PV under
    // /var/local-path-provisioner, pinned to this node
    let mut dirs = Vec::new();
    for i in 0..3 {
        let pvc = get(&ns.name, &format!("pvc/data-web-{i}"));
        assert_eq!(pvc["spec"]["storageClassName"], "standard");
        assert_eq!(phase(&pvc), "Bound");
        let pv = get(
            "default",
            &format!("pv/{}", pvc["spec"]["volumeName"].as_str().unwrap()),
        );
        let dir = PathBuf::from(
            pv["spec"]["hostPath"]["path"]
                .as_str()
                .expect("a hostPath PV"),
        );
        assert!(
            dir.starts_with("/var/local-path-provisioner"),
            "{}",
            dir.display()
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("id")).unwrap().trim(),
            format!("web-{i}"),
            "the replica's data on the node"
        );
        dirs.push(dir);
    }
    // a replacement reads what its predecessor wrote
    let old_uid = get(&ns.name, "pod/web-1")["metadata"]["uid"].clone();
    kubectl(&["-n", &ns.name, "delete", "pod", "web-1", "--wait=false"]);
    wait_for(120, "web-1 replaced", || {
        let out = kubectl_raw(&["-n", &ns.name, "get", "pod", "web-1", "-o", "json"]);
        let p: Value = serde_json::from_str(&out.stdout).ok()?;
        (p["metadata"]["uid"] != old_uid).then_some(())
    })
    .await;
    wait_pod_running(&ns.name, "web-1").await;
    assert_eq!(exec(&ns.name, "web-1", "cat /data/id").trim(), "web-1");
    // the StatefulSet and its claims go: the provisioner removes the volumes (reclaim Delete)
    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "statefulset",
        "web",
        "--wait=true",
        "--timeout=120s",
    ]);
    wait_for(120, "the StatefulSet's pods gone", || {
        let out = kubectl(&["-n", &ns.name, "get", "pods", "-o", "name"]);
        out.trim().is_empty().then_some(())
    })
    .await;
    kubectl(&["-n", &ns.name, "delete", "pvc", "--all", "--wait=false"]);
    wait_for(
        180,
        "the provisioner removed the volumes' directories",
        || dirs.iter().all(|d| !d.exists()).then_some(()),
    )
    .await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostpath_pv_is_used_where_its_claim_is_mounted() {
    let _shared = DECKHAND_DISRUPTION.read().await;
    let client = client().await;
    let ns = TestNs::new(&client, "hostpv").await;
    let dir = format!("/var/tmp/deckhand-e2e-{}", ns.name);
    let _ = std::fs::remove_dir_all(&dir);
    apply(
        &ns.name,
        &format!(
            r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {ns}-pv}}
spec:
  storageClassName: manual-{ns}
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {{path: {dir}, type: DirectoryOrCreate}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: claim}}
spec:
  storageClassName: manual-{ns}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: writer}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo written-by-the-pod > /data/f; exec sleep 3600']
    volumeMounts: [{{name: d, mountPath: /data}}]
  volumes:
  - name: d
    persistentVolumeClaim: {{claimName: claim}}
"#,
            ns = ns.name
        ),
    );
    wait_pod_running(&ns.name, "writer").await;
    let f = Path::new(&dir).join("f");
    wait_for(30, "the pod's file in the host directory", || {
        std::fs::read_to_string(&f)
            .ok()
            .filter(|s| s.trim() == "written-by-the-pod")
    })
    .await;
    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "pod",
        "writer",
        "--wait=true",
        "--timeout=60s",
    ]);
    // a Retain PV's data is never touched by the pod's clean-up
    assert_eq!(
        std::fs::read_to_string(&f).unwrap().trim(),
        "written-by-the-pod"
    );
    kubectl(&["delete", "pv", &format!("{}-pv", ns.name), "--wait=false"]);
    ns.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_pv_waits_for_its_pod_and_is_bind_mounted_at_the_go_kubelets_path() {
    let _shared = DECKHAND_DISRUPTION.read().await;
    let client = client().await;
    let ns = TestNs::new(&client, "localpv").await;
    let (pv, class) = (format!("{}-local", ns.name), format!("local-{}", ns.name));
    let dir = format!("/var/tmp/deckhand-e2e-{}", ns.name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(Path::new(&dir).join("before"), "on the disk before the pod").unwrap();
    apply(
        &ns.name,
        &format!(
            r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {class}}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  storageClassName: {class}
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  local: {{path: {dir}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: kubernetes.io/hostname, operator: In, values: [{node}]}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: claim}}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"#,
            node = env().node_name()
        ),
    );
    // WaitForFirstConsumer: no binding before a pod uses the claim
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(phase(&get(&ns.name, "pvc/claim")), "Pending");
    apply(
        &ns.name,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: user}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'cat /data/before && echo from-the-pod > /data/after; exec sleep 3600']
    volumeMounts: [{name: d, mountPath: /data}]
  volumes:
  - name: d
    persistentVolumeClaim: {claimName: claim}
"#,
    );
    let p = wait_pod_running(&ns.name, "user").await;
    assert_eq!(phase(&get(&ns.name, "pvc/claim")), "Bound");
    assert_eq!(
        get(&ns.name, "pvc/claim")["spec"]["volumeName"],
        pv.as_str()
    );
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let mnt = root_dir().join(format!(
        "pods/{uid}/volumes/kubernetes.io~local-volume/{pv}"
    ));
    assert!(
        mounts_under(&mnt)
            .iter()
            .any(|m| *m == mnt.display().to_string()),
        "{} is not a mount point",
        mnt.display()
    );
    let after = Path::new(&dir).join("after");
    wait_for(30, "the pod's file on the local disk", || {
        std::fs::read_to_string(&after)
            .ok()
            .filter(|s| s.trim() == "from-the-pod")
    })
    .await;
    let name = format!("kubernetes.io/local-volume/{pv}");
    wait_for(40, "the local PV in node.status.volumesInUse", || {
        volumes_in_use().contains(&name).then_some(())
    })
    .await;
    // the claim mounted read-only by a second pod
    apply(
        &ns.name,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'exec sleep 3600']
    volumeMounts: [{name: d, mountPath: /data}]
  volumes:
  - name: d
    persistentVolumeClaim: {claimName: claim, readOnly: true}
"#,
    );
    wait_pod_running(&ns.name, "reader").await;
    assert_eq!(
        exec(&ns.name, "reader", "cat /data/after").trim(),
        "from-the-pod"
    );
    let out = kubectl_raw(&[
        "-n",
        &ns.name,
        "exec",
        "reader",
        "--",
        "sh",
        "-c",
        "echo x > /data/x",
    ]);
    assert!(!out.status.success(), "a read-only claim was writable");
    // the pods go: unmounted, the data stays, the volume is no longer in use
    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "pod",
        "user",
        "reader",
        "--wait=true",
        "--timeout=60s",
    ]);
    wait_for(30, "the local volume unmounted", || {
        mounts_under(&mnt).is_empty().then_some(())
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&after).unwrap().trim(),
        "from-the-pod"
    );
    wait_for(40, "the local PV out of node.status.volumesInUse", || {
        (!volumes_in_use().contains(&name)).then_some(())
    })
    .await;
    kubectl(&["delete", "pv", &pv, "--wait=false"]);
    kubectl(&["delete", "storageclass", &class, "--wait=false"]);
    ns.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_claim_is_a_failed_mount_in_the_go_kubelets_words() {
    let _shared = DECKHAND_DISRUPTION.read().await;
    let client = client().await;
    let ns = TestNs::new(&client, "unbound").await;
    apply(
        &ns.name,
        &format!(
            r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: c}}
spec:
  storageClassName: none-such-{ns}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - {{name: main, image: busybox, command: [sleep, "3600"], volumeMounts: [{{name: d, mountPath: /data}}]}}
  volumes:
  - {{name: d, persistentVolumeClaim: {{claimName: c}}}}
"#,
            ns = ns.name,
            node = env().node_name()
        ),
    );
    let want = format!(
        "Unable to attach or mount volumes: unmounted volumes=[d], unattached volumes=[d], failed to process volumes=[d]: error processing PVC {}/c: PVC is not bound",
        ns.name
    );
    wait_event_containing(&ns.name, "p", &want).await;
    let p = get(&ns.name, "pod/p");
    assert_eq!(phase(&p), "Pending");
    ns.delete().await;
}

/// The volumes of a pod deleted while deckhand is down (SIGKILL) are unmounted when it starts
/// again (the Go kubelet's reconstruction and orphaned-pod clean-up), and the data on the PV is
/// untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_volumes_of_a_pod_deleted_while_deckhand_is_down_are_unmounted_when_it_starts() {
    let client = client().await;
    let ns = TestNs::new(&client, "reconstruct").await;
    let (pv, class) = (format!("{}-local", ns.name), format!("local-{}", ns.name));
    let dir = format!("/var/tmp/deckhand-e2e-{}", ns.name);
    std::fs::create_dir_all(&dir).unwrap();
    apply(
        &ns.name,
        &format!(
            r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {class}}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  storageClassName: {class}
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  local: {{path: {dir}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: kubernetes.io/hostname, operator: In, values: [{node}]}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: claim}}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: user}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo kept > /data/kept; exec sleep 3600']
    volumeMounts: [{{name: d, mountPath: /data}}]
  volumes:
  - name: d
    persistentVolumeClaim: {{claimName: claim}}
"#,
            node = env().node_name()
        ),
    );
    let p = wait_pod_running(&ns.name, "user").await;
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let pod_dir = root_dir().join(format!("pods/{uid}"));
    let kept = Path::new(&dir).join("kept");
    wait_for(30, "the pod's file", || kept.exists().then_some(())).await;
    assert!(!mounts_under(&pod_dir).is_empty());

    let _exclusive = DECKHAND_DISRUPTION.write().await;
    let harness_lock = lock_harness(Duration::from_secs(600)).await;
    let old_pid = deckhand_pid();
    let restart = HarnessRestart::capture(old_pid);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killing deckhand");
    wait_for(10, "deckhand gone", || {
        (!process_alive(old_pid)).then_some(())
    })
    .await;
    // deleted for good while no kubelet runs: only the orphan clean-up can take its volume down
    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "pod",
        "user",
        "--grace-period=0",
        "--force",
    ]);
    assert!(
        !mounts_under(&pod_dir).is_empty(),
        "still mounted while deckhand is down"
    );
    tokio::task::spawn_blocking(move || restart.run())
        .await
        .unwrap();
    drop(harness_lock);
    wait_node_ready(&client, Duration::from_secs(60)).await;
    wait_for(
        90,
        "the orphaned pod's volume unmounted and its directory removed",
        || (mounts_under(&pod_dir).is_empty() && !pod_dir.exists()).then_some(()),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap().trim(),
        "kept",
        "the PV's data"
    );
    drop(_exclusive);
    kubectl(&["delete", "pv", &pv, "--wait=false"]);
    kubectl(&["delete", "storageclass", &class, "--wait=false"]);
    ns.delete().await;
    let _ = std::fs::remove_dir_all(&dir);
}
