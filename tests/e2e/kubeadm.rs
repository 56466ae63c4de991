//! End-to-end check of the kubeadm mode (issue 16): `LOCAL_UP_MODE=kubeadm hack/local-up.sh up`
//! made a cluster with `kubeadm init` and `kubeadm join`, every kubelet of it deckhand. Asserts
//! that every node (NODES, default 3) is Ready and runs deckhand, that the control plane
//! (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) runs as static pods of
//! dh-node-1 with their mirror pods, and that kubeadm's add-ons (the kube-proxy DaemonSet on every
//! node, the CoreDNS Deployment) are ready.
//!
//! Ignored by default (the default mode has none of this):
//! `LOCAL_UP_MODE=kubeadm hack/local-up.sh up && cargo test --test e2e_kubeadm -- --ignored`.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn state() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("_output/local-up")
}

fn kubectl_json(args: &[&str]) -> Value {
    let admin = state().join("kubeadm/admin.conf");
    let out = Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("_output/bin/kubectl"))
        .arg("--kubeconfig")
        .arg(&admin)
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("kubectl's JSON")
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_str().unwrap_or("")
}

fn condition<'a>(v: &'a Value, type_: &str) -> &'a str {
    v["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

/// kubeadm's control-plane components, each a static pod of dh-node-1.
const CONTROL_PLANE: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

#[test]
#[ignore = "needs LOCAL_UP_MODE=kubeadm hack/local-up.sh up"]
fn kubeadm_cluster_runs_on_deckhand() {
    let mode = std::fs::read_to_string(state().join("local-up-mode")).unwrap_or_default();
    assert_eq!(
        mode.trim(),
        "kubeadm",
        "no kubeadm-mode cluster: run LOCAL_UP_MODE=kubeadm hack/local-up.sh up first"
    );
    let want: usize = std::env::var("NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);

    let nodes = kubectl_json(&["get", "nodes"]);
    let items = nodes["items"].as_array().expect("node list");
    let mut names: Vec<&str> = items.iter().map(|n| s(n, &["metadata", "name"])).collect();
    names.sort();
    let expected: Vec<String> = (1..=want).map(|i| format!("dh-node-{i}")).collect();
    assert_eq!(names, expected, "the cluster's nodes");
    for n in items {
        let name = s(n, &["metadata", "name"]);
        assert_eq!(condition(n, "Ready"), "True", "{name} is not Ready");
        let version = s(n, &["status", "nodeInfo", "kubeletVersion"]);
        assert!(
            version.contains("deckhand"),
            "{name}'s kubelet is not deckhand: {version}"
        );
    }
    let cp = items
        .iter()
        .find(|n| s(n, &["metadata", "name"]) == "dh-node-1")
        .unwrap();
    assert!(
        cp["metadata"]["labels"]
            .get("node-role.kubernetes.io/control-plane")
            .is_some(),
        "dh-node-1 has no control-plane role label (kubeadm's mark-control-plane phase)"
    );

    let pods = kubectl_json(&["-n", "kube-system", "get", "pods"]);
    let pods = pods["items"].as_array().expect("pod list");
    for component in CONTROL_PLANE {
        let name = format!("{component}-dh-node-1");
        let p = pods
            .iter()
            .find(|p| s(p, &["metadata", "name"]) == name)
            .unwrap_or_else(|| panic!("no mirror pod kube-system/{name}"));
        assert!(
            p["metadata"]["annotations"]
                .get("kubernetes.io/config.mirror")
                .is_some(),
            "{name} is not a mirror pod"
        );
        let owner = &p["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "Node", "{name}'s owner");
        assert_eq!(owner["name"], "dh-node-1", "{name}'s owner");
        assert_eq!(s(p, &["status", "phase"]), "Running", "{name}'s phase");
    }
    // While a node is NotReady the node lifecycle controller marks each pod of it that changes
    // Ready=False (MarkPodsNotReady); kubeadm init creates the mirror pods in that window. The
    // kubelet corrects a mirror pod's status within its 10 s reconcile pass, as the Go
    // kubelet's status manager does, so the check waits out two passes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
    loop {
        let pods = kubectl_json(&["-n", "kube-system", "get", "pods"]);
        let not_ready: Vec<String> = CONTROL_PLANE
            .iter()
            .map(|c| format!("{c}-dh-node-1"))
            .filter(|name| {
                pods["items"]
                    .as_array()
                    .and_then(|ps| ps.iter().find(|p| s(p, &["metadata", "name"]) == name))
                    .is_none_or(|p| condition(p, "Ready") != "True")
            })
            .collect();
        if not_ready.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mirror pods not Ready within 25 s: {not_ready:?}"
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }

    let ds = kubectl_json(&["-n", "kube-system", "get", "daemonset", "kube-proxy"]);
    assert_eq!(
        ds["status"]["numberReady"].as_u64(),
        Some(want as u64),
        "kube-proxy pods ready"
    );
    let dep = kubectl_json(&["-n", "kube-system", "get", "deployment", "coredns"]);
    assert!(
        dep["status"]["availableReplicas"].as_u64().unwrap_or(0) >= 1
            && dep["status"]["availableReplicas"] == dep["spec"]["replicas"],
        "coredns not available: {}",
        dep["status"]
    );
}

/// kubeadm init's kubelet.conf embeds dh-node-1's client certificate. As the Go kubelet does
/// (client-go `getCurrentCertificateOrBootstrap`), deckhand copies it into its cert dir as
/// `kubelet-client-current.pem` and requests a new one at once (a CSR by `system:node:dh-node-1`,
/// auto-approved through kubeadm's `kubeadm:node-autoapprove-certificate-rotation`); kubeadm's
/// kubelet-finalize phase finds the pem and points kubelet.conf at it.
#[test]
#[ignore = "needs LOCAL_UP_MODE=kubeadm hack/local-up.sh up"]
fn the_control_plane_nodes_client_certificate_is_rotated() {
    let node1 = state().join("nodes/dh-node-1");
    let kubelet_conf =
        std::fs::read_to_string(node1.join("etc-kubernetes/kubelet.conf")).expect("kubelet.conf");
    let pem = "/var/lib/kubelet/pki/kubelet-client-current.pem";
    assert!(
        kubelet_conf.contains(&format!("client-certificate: {pem}"))
            && !kubelet_conf.contains("client-certificate-data"),
        "kubeadm's kubelet-finalize did not point kubelet.conf at {pem}:\n{kubelet_conf}"
    );
    // the CSR is issued and its certificate is the one deckhand now presents: the cert dir's
    // current pem (kubelet.conf's pair was copied there first, then replaced)
    let current = node1.join("var-lib-kubelet/pki/kubelet-client-current.pem");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let csrs = kubectl_json(&["get", "csr"]);
        let issued: Vec<String> = csrs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| {
                s(c, &["spec", "signerName"]) == "kubernetes.io/kube-apiserver-client-kubelet"
                    && s(c, &["spec", "username"]) == "system:node:dh-node-1"
            })
            .filter_map(|c| {
                use base64::Engine;
                let b = base64::engine::general_purpose::STANDARD
                    .decode(s(c, &["status", "certificate"]))
                    .ok()?;
                String::from_utf8(b).ok().filter(|t| !t.is_empty())
            })
            .collect();
        // the link names the file by its path inside the node (/var/lib/kubelet/pki/...)
        let presented = std::fs::read_link(&current)
            .ok()
            .and_then(|t| t.file_name().map(|f| current.with_file_name(f)))
            .and_then(|f| std::fs::read_to_string(f).ok())
            .unwrap_or_default();
        if issued
            .iter()
            .any(|cert| presented.starts_with(cert.trim_end()))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "dh-node-1's current client certificate ({}) is not one issued to system:node:dh-node-1 (issued: {})",
            current.display(),
            issued.len()
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let admin = state().join("kubeadm/admin.conf");
    let mut child =
        Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("_output/bin/kubectl"))
            .arg("--kubeconfig")
            .arg(&admin)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running kubectl");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Pods on two workers reach each other by pod IP, and the control-plane node's pods (CoreDNS)
/// through the kube-dns Service (kube-proxy on every node, the harness's pod CIDR routes).
#[test]
#[ignore = "needs LOCAL_UP_MODE=kubeadm hack/local-up.sh up"]
fn pods_on_different_nodes_reach_each_other_and_cluster_dns() {
    let mode = std::fs::read_to_string(state().join("local-up-mode")).unwrap_or_default();
    assert_eq!(mode.trim(), "kubeadm", "no kubeadm-mode cluster");
    let ns = format!("e2e-kubeadm-{}", std::process::id());
    assert!(kubectl(&["create", "namespace", &ns], None).0);
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  nodeName: {node}\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: main, image: busybox, command: [sleep, '3600']}}\n"
        )
    };
    let manifest = format!("{}---\n{}", pod("a", "dh-node-2"), pod("b", "dh-node-3"));
    let (ok, out) = kubectl(&["apply", "-f", "-"], Some(&manifest));
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &[
            "-n",
            &ns,
            "wait",
            "--for=condition=Ready",
            "pod/a",
            "pod/b",
            "--timeout=90s",
        ],
        None,
    );
    assert!(ok, "pods not Ready: {out}");
    let (_, ip_b) = kubectl(
        &[
            "-n",
            &ns,
            "get",
            "pod",
            "b",
            "-o",
            "jsonpath={.status.podIP}",
        ],
        None,
    );
    let (ok, out) = kubectl(
        &[
            "-n", &ns, "exec", "a", "--", "ping", "-c", "2", "-W", "2", &ip_b,
        ],
        None,
    );
    let (ok2, dns) = kubectl(
        &[
            "-n",
            &ns,
            "exec",
            "a",
            "--",
            "nslookup",
            "kubernetes.default.svc.cluster.local",
            "10.96.0.10",
        ],
        None,
    );
    kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
    assert!(
        ok,
        "pod a (dh-node-2) cannot ping pod b (dh-node-3) at {ip_b}: {out}"
    );
    assert!(
        ok2 && dns.contains("10.96.0.1"),
        "cluster DNS from dh-node-2: {dns}"
    );
}
