//! End-to-end: joining the local cluster the kubeadm way. vagrant/provision.sh (the script a
//! Vagrant VM runs) creates a bootstrap token, discovers the cluster through
//! kube-public/cluster-info, writes what `kubeadm join` writes (bootstrap-kubelet.conf,
//! config.yaml, kubeadm-flags.env, the drop-in) under a directory of the harness, and deckhand
//! is started with exactly the command line systemd would run from those files. deckhand must
//! get its client certificate through a CSR approved by kube-controller-manager, register, come
//! up Ready and run a pod, and be held to its node by the Node authorizer.
//!
//! Only one deckhand may drive the machine's containerd (a second one would remove the first
//! one's sandboxes as orphans), so the harness's deckhand is stopped for the test, under the
//! harness lock, and restarted afterwards, also when the test fails.

use crate::common::*;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn provision() -> PathBuf {
    env().root.join("vagrant/provision.sh")
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Stops the joined deckhand and gives the node back to the harness's deckhand, whatever
/// happened to the test.
struct Restore {
    child: Option<Child>,
    restart: Option<HarnessRestart>,
    token_id: String,
    prefix: PathBuf,
}

impl Restore {
    fn stop_child(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restore(&mut self) -> Option<RestartOutput> {
        self.stop_child();
        let out = self.restart.take().map(|r| r.run());
        let _ = kubectl_raw(&[
            "-n",
            "kube-system",
            "delete",
            "secret",
            &format!("bootstrap-token-{}", self.token_id),
            "--ignore-not-found",
        ]);
        out
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if self.restart.is_some() {
            eprintln!("e2e::join: restoring the harness's deckhand after a failure");
            let log = self.prefix.join("deckhand.log");
            if let Ok(text) = std::fs::read_to_string(&log) {
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("--- last lines of {} ---", log.display());
                for l in tail.into_iter().rev() {
                    eprintln!("{l}");
                }
            }
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.restore()));
        }
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[tokio::test]
async fn joins_with_a_bootstrap_token_and_kubeadm_files_and_comes_up_ready() {
    let env = env();
    let admin = client().await;
    let node_name = env.node_name().to_string();
    let prefix = Path::new(env.get("STATE_DIR")).join(format!("e2e-join-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(&prefix).unwrap();

    // 1. the token and the CA hash, as the host side of vagrant/README.md does it
    let token = sh(Command::new(provision())
        .args(["token", "--kubeconfig", env.kubeconfig(), "--ttl", "1h"])
        .env("KUBECTL", env.kubectl_bin()));
    let token_id = token.split('.').next().unwrap().to_string();
    assert_eq!(token.len(), 23, "token id.secret: {token}");
    let ca_hash = sh(Command::new(provision()).args(["ca-cert-hash", env.get("CA_CERT")]));
    assert!(
        ca_hash.starts_with("sha256:") && ca_hash.len() == 71,
        "{ca_hash}"
    );

    // 2. the files `kubeadm join` writes, under the harness's directory; packages and containerd
    // are the harness's own here (hack/install-deps.sh, hack/local-up.sh)
    let deckhand_bin = env.get("DECKHAND_BIN").to_string();
    let api = format!("{}:6443", env.node_ip());
    // --rotate-server-certificates: what `serverTLSBootstrap: true` gives
    let extra = format!(
        "--address={} --root-dir={} --rotate-server-certificates=true",
        env.node_ip(),
        env.get("DECKHAND_ROOT_DIR")
    );
    let joined = Command::new(provision())
        .args(["join", "--api-server", &api, "--token", &token])
        .args(["--discovery-token-ca-cert-hash", &ca_hash])
        .args(["--node-name", &node_name, "--node-ip", env.node_ip()])
        .args([
            "--deckhand-bin",
            &deckhand_bin,
            "--cri-socket",
            env.get("CRI_ENDPOINT"),
        ])
        .arg("--prefix")
        .arg(&prefix)
        .args(["--skip-phases", "packages,containerd", "--start", "none"])
        .args(["--extra-args", &extra])
        .output()
        .unwrap();
    let join_log = format!(
        "{}{}",
        String::from_utf8_lossy(&joined.stdout),
        String::from_utf8_lossy(&joined.stderr)
    );
    assert!(
        joined.status.success(),
        "provision.sh join failed:\n{join_log}"
    );
    assert!(join_log.contains("cluster-info verified"), "{join_log}");
    assert!(
        join_log.contains("config.yaml from kube-system/kubelet-config"),
        "{join_log}"
    );

    let bootstrap_conf = read(&prefix.join("etc/kubernetes/bootstrap-kubelet.conf"));
    assert!(bootstrap_conf.contains(&format!("token: {token}")));
    assert!(bootstrap_conf.contains("user: tls-bootstrap-token-user"));
    let config = read(&prefix.join("var/lib/kubelet/config.yaml"));
    for want in [
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "kind: KubeletConfiguration",
        "rotateCertificates: true",
        "staticPodPath: ",
        &format!("containerRuntimeEndpoint: {}", env.get("CRI_ENDPOINT")),
    ] {
        assert!(
            config.contains(want),
            "config.yaml lacks {want:?}:\n{config}"
        );
    }
    assert!(read(&prefix.join("var/lib/kubelet/kubeadm-flags.env"))
        .starts_with("KUBELET_KUBEADM_ARGS="));
    let kubeconfig = prefix.join("etc/kubernetes/kubelet.conf");
    assert!(!kubeconfig.exists(), "only the bootstrap token so far");
    let argv = sh(Command::new(provision())
        .arg("print-command")
        .arg("--prefix")
        .arg(&prefix));
    for want in [
        "--bootstrap-kubeconfig=".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--config=".to_string(),
    ] {
        assert!(
            argv.lines().any(|l| l.starts_with(&want)),
            "{want} not in\n{argv}"
        );
    }

    // 3. the harness's deckhand steps aside (under the harness lock), the joined one starts
    let _lock = lock_harness(Duration::from_secs(300)).await;
    let old_pid = deckhand_pid();
    let mut restore = Restore {
        child: None,
        restart: Some(HarnessRestart::capture(old_pid)),
        token_id: token_id.clone(),
        prefix: prefix.clone(),
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old_pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    poll(
        Duration::from_secs(40),
        Duration::from_millis(100),
        "harness deckhand to stop",
        || (!process_alive(old_pid)).then_some(()),
    )
    .await;
    let started = chrono::Utc::now();
    let log = std::fs::File::create(prefix.join("deckhand.log")).unwrap();
    restore.child = Some(
        Command::new(provision())
            .arg("start")
            .arg("--prefix")
            .arg(&prefix)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );

    // 4. TLS bootstrap: kubelet.conf appears, naming the current pem the CSR produced
    poll_with(
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            format!(
                "kubelet.conf after TLS bootstrap:\n{}",
                read(&prefix.join("deckhand.log"))
            )
        },
        || kubeconfig.exists().then_some(()),
    )
    .await;
    let pki = prefix.join("var/lib/kubelet/pki");
    let current = pki.join("kubelet-client-current.pem");
    let target = std::fs::read_link(&current).expect("kubelet-client-current.pem is a symlink");
    let fname = target.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        fname.starts_with("kubelet-client-")
            && fname.len() == "kubelet-client-2006-01-02-15-04-05.pem".len(),
        "{fname}"
    );
    let kc = read(&kubeconfig);
    assert!(
        kc.contains(&format!("client-certificate: {}", current.display())),
        "{kc}"
    );
    let subject = sh(Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in"])
        .arg(&current));
    assert!(
        subject.contains(&format!("CN=system:node:{node_name}"))
            && subject.contains("O=system:nodes"),
        "{subject}"
    );
    sh(Command::new("openssl")
        .args(["verify", "-CAfile", env.get("CA_CERT")])
        .arg(&current));

    // the CSR: the bootstrap token's user asked, kube-controller-manager approved, signed
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let csr = csrs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|c| c.spec.username.as_deref() == Some(&format!("system:bootstrap:{token_id}")))
        .expect("a CSR by the bootstrap token's user");
    assert!(csr
        .metadata
        .name
        .as_deref()
        .unwrap()
        .starts_with("node-csr-"));
    assert_eq!(
        csr.spec.signer_name,
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    let mut usages = csr.spec.usages.clone().unwrap_or_default();
    usages.sort();
    assert_eq!(usages, vec!["client auth", "digital signature"]);
    let approved = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Approved"))
        .expect("Approved condition");
    assert_eq!(
        approved.reason.as_deref(),
        Some("AutoApproved"),
        "{approved:?}"
    );
    assert!(csr.status.as_ref().unwrap().certificate.is_some());

    // 5. Ready, by this deckhand: its Lease is renewed after it started, the node is Ready, and a
    // pod runs
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    let leases2 = leases.clone();
    let name2 = node_name.clone();
    let renewed = async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let l = leases2.get(&name2).await.unwrap();
            let renew = l.spec.and_then(|s| s.renew_time).map(|t| t.0);
            if renew.is_some_and(|r| r.as_second() > started.timestamp()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "lease not renewed by the joined deckhand"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    renewed.await;
    wait_node_ready(&admin, Duration::from_secs(60)).await;
    let ns = TestNs::new(&admin, "join").await;
    ns.create_pod(&busybox_pod("joined", "sleep 3600", "Never", Some(1)))
        .await;
    wait_running(&ns.pods(), "joined").await;

    // 6. the Node authorizer: with its certificate it reads its pods, not an unrelated secret
    let node_client = deckhand::certificate::manager::client_from_kubeconfig(&kubeconfig, None)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::all(node_client.clone());
    let mine = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .expect("the node lists its pods");
    assert!(mine
        .items
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some("joined")));
    let nodes: Api<Node> = Api::all(node_client.clone());
    nodes
        .get(&node_name)
        .await
        .expect("the node reads its Node");
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns.name);
    let mut s = Secret::default();
    s.metadata.name = Some("unrelated".into());
    s.string_data = Some([("k".to_string(), "v".to_string())].into());
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let node_secrets: Api<Secret> = Api::namespaced(node_client.clone(), &ns.name);
    match node_secrets.get("unrelated").await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("the node read a secret no pod of it uses: {other:?}"),
    }
    let log = read(&prefix.join("deckhand.log"));
    assert!(
        log.contains("client certificate issued; kubeconfig written"),
        "{log}"
    );

    // 7. the serving certificate: a kubernetes.io/kubelet-serving CSR by the node (no built-in
    // approver: approved here, as an admin of a kubeadm cluster does), then served on :10250
    let serving_url = format!("https://{}:10250/pods", env.node_ip());
    let curl_code = || {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "3",
            ])
            .args(["--cacert", env.get("CA_CERT"), &serving_url])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let serving_csr = poll(
        Duration::from_secs(30),
        Duration::from_millis(250),
        "a kubelet-serving CSR by the node",
        || {
            let out = kubectl(&[
                "get",
                "csr",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}|{.spec.signerName}|{.spec.username}|{.status.conditions[*].type}{\"\\n\"}{end}",
            ]);
            let user = format!("system:node:{node_name}");
            out.lines()
                .map(|l| l.split('|').collect::<Vec<_>>())
                .find(|f| {
                    f.len() == 4
                        && f[1] == "kubernetes.io/kubelet-serving"
                        && f[2] == user
                        && f[3].is_empty()
                })
                .map(|f| f[0].to_string())
        },
    )
    .await;
    assert_eq!(
        curl_code(),
        "000",
        "no serving certificate before the CSR is approved"
    );
    kubectl(&["certificate", "approve", &serving_csr]);
    let code = poll(
        Duration::from_secs(30),
        Duration::from_millis(250),
        "the kubelet server with the issued serving certificate (verified against the cluster CA)",
        || Some(curl_code()).filter(|c| c != "000"),
    )
    .await;
    assert!(
        code.starts_with('4') || code.starts_with('2'),
        "HTTP {code}"
    );
    let served = pki.join("kubelet-server-current.pem");
    let sans = sh(Command::new("openssl")
        .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
        .arg(&served));
    assert!(
        sans.contains(&format!("DNS:{node_name}"))
            && sans.contains(&format!("IP Address:{}", env.node_ip())),
        "{sans}"
    );
    kubectl(&["delete", "csr", &serving_csr]);
    ns.delete().await;

    // 8. the harness's deckhand again
    let out = restore.restore().expect("restart output");
    println!("{}", out.text);
    wait_node_ready(&admin, Duration::from_secs(60)).await;
    let _ = std::fs::remove_dir_all(&prefix);
}
