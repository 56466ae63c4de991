//! End-to-end tests of the pod network surface against the local cluster of hack/local-up.sh:
//! kube-proxy (the kubeadm-shaped DaemonSet that deckhand runs) makes ClusterIP Services and the
//! `kubernetes` Service work from inside pods, hostPort mappings reach their pod through the CNI
//! portmap plugin, and imagePullSecrets authenticate pulls from the password-protected registry.
//! Everything stays on the machine: the node IP 10.250.0.1, the pod bridge, the Service CIDR.
//!
//! Run with `cargo test --profile ci --test e2e -- network:: --test-threads=2` after
//! `hack/local-up.sh`.

use crate::common::*;
use base64::Engine;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event, Pod, Secret, Service};
use kube::api::{Api, ListParams, PostParams};
use std::io::{Read, Write};
use std::time::Duration;

fn pod_from(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).expect("a valid pod")
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

/// A busybox httpd serving `marker` as /index.html on `port`.
fn httpd_pod(name: &str, app: &str, marker: &str, port: i32, host_port: Option<i32>) -> Pod {
    let mut port_spec = serde_json::json!({"containerPort": port, "protocol": "TCP"});
    if let Some(hp) = host_port {
        port_spec["hostPort"] = hp.into();
    }
    pod_from(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": "busybox",
                "command": ["sh", "-c", format!(
                    "mkdir -p /www && echo {marker} > /www/index.html && exec httpd -f -p {port} -h /www")],
                "ports": [port_spec],
                "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
            }],
        },
    }))
}

/// A pod that runs `script` once (restartPolicy Never) and whose log the test reads.
fn job_pod(name: &str, image: &str, script: &str) -> Pod {
    pod_from(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", script]}],
        },
    }))
}

/// Waits for a run-once pod to finish; returns (phase, log).
async fn wait_finished(ns: &TestNs, name: &str) -> (String, String) {
    let pod = wait_pod(&ns.pods(), name, "phase Succeeded or Failed", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    let log = kubectl_raw(&["-n", &ns.name, "logs", name]).stdout;
    (phase(&pod).to_string(), log)
}

/// HTTP/1.0 GET of `/` at `addr`; the whole response, or the error.
fn http_get(addr: &str) -> Result<String, String> {
    let sa: std::net::SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut s = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(3))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .map_err(|e| format!("read: {e}"))?;
    Ok(out)
}

fn iptables(args: &[&str]) -> String {
    let out = std::process::Command::new("iptables")
        .args(["-w", "5"])
        .args(args)
        .output()
        .expect("running iptables");
    assert!(
        out.status.success(),
        "iptables {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `kubernetes` Service's ClusterIP and port (10.96.0.1:443 here).
async fn kubernetes_service(client: &kube::Client) -> (String, i32) {
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = svcs.get("kubernetes").await.expect("default/kubernetes");
    let spec = svc.spec.unwrap();
    (spec.cluster_ip.unwrap(), spec.ports.unwrap()[0].port)
}

/// Test 1: a ClusterIP Service in front of a busybox httpd pod answers from another pod (through
/// kube-proxy's iptables rules; the client uses busybox nc).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ip_service_answers_from_another_pod() {
    let client = client().await;
    let ns = TestNs::new(&client, "svc").await;
    let marker = format!("hello-from-web-{}", rand::random::<u32>());
    ns.create_pod(&httpd_pod("web", "web", &marker, 8080, None))
        .await;
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let cluster_ip = svc.spec.unwrap().cluster_ip.unwrap();
    assert!(cluster_ip.starts_with("10.96."), "ClusterIP {cluster_ip}");
    let web = wait_running(&ns.pods(), "web").await;
    println!(
        "[{}] web {} behind Service {cluster_ip}:80",
        ns.name,
        pod_ip(&web)
    );

    // The endpoints controller and kube-proxy need a moment: the client retries for 30 s.
    let script = format!(
        "for i in $(seq 1 30); do \
           out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 5 nc -w 3 {cluster_ip} 80 2>&1); \
           if echo \"$out\" | grep -q {marker}; then echo \"ANSWER after $i: $out\"; exit 0; fi; \
           echo \"attempt $i: $out\"; sleep 1; \
         done; exit 1"
    );
    ns.create_pod(&job_pod("client", "busybox", &script)).await;
    let (ph, log) = wait_finished(&ns, "client").await;
    assert_eq!(
        ph,
        "Succeeded",
        "the client pod did not reach {cluster_ip}:80\n{log}\n{}",
        diagnose(&ns.name, "client")
    );
    assert!(log.contains("ANSWER") && log.contains(&marker), "{log}");
    assert!(log.contains("200 OK"), "{log}");
    println!("[{}] {}", ns.name, log.lines().last().unwrap_or(""));
    ns.delete().await;
}

/// Test 2: containerPort.hostPort reaches its pod at the node IP (CRI port mappings, CNI
/// portmap), and the port mapping is gone when the pod is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_port_reaches_its_pod() {
    let env = env();
    let client = client().await;
    let ns = TestNs::new(&client, "hostport").await;
    let host_port = 20000 + (rand::random::<u16>() % 5000) as i32;
    let marker = format!("hello-via-hostport-{}", rand::random::<u32>());
    ns.create_pod(&httpd_pod("web", "web", &marker, 8080, Some(host_port)))
        .await;
    wait_running(&ns.pods(), "web").await;
    let addr = format!("{}:{host_port}", env.node_ip());
    let resp = poll_with(
        Duration::from_secs(30),
        Duration::from_millis(500),
        || {
            format!(
                "{addr} did not answer with the pod's page\n{}",
                diagnose(&ns.name, "web")
            )
        },
        || http_get(&addr).ok().filter(|r| r.contains(&marker)),
    )
    .await;
    assert!(
        resp.starts_with("HTTP/1.") && resp.contains("200 OK"),
        "{resp}"
    );
    println!(
        "[{}] {addr} -> pod: {}",
        ns.name,
        resp.lines().next().unwrap_or("")
    );
    // the DNAT rule is the portmap plugin's
    let nat = iptables(&["-t", "nat", "-S"]);
    assert!(
        nat.lines()
            .any(|l| l.contains(&format!("--dport {host_port}")) && l.contains("DNAT")),
        "no DNAT rule for hostPort {host_port}:\n{nat}"
    );

    // deleting the pod removes the mapping
    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "pod",
        "web",
        "--wait=true",
        "--timeout=60s",
    ]);
    poll(
        Duration::from_secs(30),
        Duration::from_millis(500),
        "the hostPort DNAT rule outlived its pod",
        || {
            let nat = iptables(&["-t", "nat", "-S"]);
            (!nat.contains(&format!("--dport {host_port} "))).then_some(())
        },
    )
    .await;
    assert!(
        http_get(&addr).is_err(),
        "{addr} still answers after the pod is gone"
    );
    ns.delete().await;
}

/// Test 3: from inside a pod, the `kubernetes` Service (KUBERNETES_SERVICE_HOST:PORT) reaches the
/// API server, and the pod's service-account token with the mounted ca.crt makes an
/// authenticated request there (curl image: Debian's curl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_service_reaches_the_api_server_with_the_pod_token() {
    let client = client().await;
    let ns = TestNs::new(&client, "apisvc").await;
    let (ip, port) = kubernetes_service(&client).await;
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    // The Service environment variables come from deckhand (enableServiceLinks); the test
    // connects to the Service's address as read from the API and reports the variables.
    let script = format!(
        "echo \"ENV host=${{KUBERNETES_SERVICE_HOST:-unset}} port=${{KUBERNETES_SERVICE_PORT:-unset}}\"; \
         if ! timeout 5 nc -w 3 {ip} {port} </dev/null; then echo TCP-FAILED; fi; echo TCP-DONE; \
         for i in $(seq 1 20); do \
           if curl -sS --fail --max-time 5 --cacert {sa}/ca.crt \
                -H \"Authorization: Bearer $(cat {sa}/token)\" -H 'Content-Type: application/json' \
                -X POST -d '{{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"SelfSubjectReview\"}}' \
                https://{ip}:{port}/apis/authentication.k8s.io/v1/selfsubjectreviews; then exit 0; fi; \
           sleep 1; \
         done; exit 1"
    );
    ns.create_pod(&job_pod("curl", "127.0.0.1:5000/curl:latest", &script))
        .await;
    let (ph, log) = wait_finished(&ns, "curl").await;
    assert_eq!(
        ph,
        "Succeeded",
        "no authenticated request from the pod to https://{ip}:{port}\n{log}\n{}",
        diagnose(&ns.name, "curl")
    );
    assert!(!log.contains("TCP-FAILED"), "{log}");
    let want_user = format!("system:serviceaccount:{}:default", ns.name);
    assert!(
        log.contains(&format!("\"username\":\"{want_user}\"")) || log.contains(&want_user),
        "the API server did not name the pod's service account {want_user}:\n{log}"
    );
    // when deckhand sets the Service variables, they must name this Service
    if let Some(line) = log.lines().find(|l| l.starts_with("ENV ")) {
        if !line.contains("host=unset") {
            assert_eq!(line, format!("ENV host={ip} port={port}"), "{log}");
        } else {
            println!(
                "[{}] note: KUBERNETES_SERVICE_HOST is not set in the pod",
                ns.name
            );
        }
    }
    println!("[{}] pod -> https://{ip}:{port} as {want_user}", ns.name);
    ns.delete().await;
}

fn auth_registry_creds() -> (String, String, String) {
    let env = env();
    let reg = env.get("REGISTRY_AUTH").to_string();
    let text = std::fs::read_to_string(env.get("REGISTRY_AUTH_CREDS_FILE"))
        .expect("reading the registry credentials file");
    let (u, p) = text.trim().split_once(':').expect("user:password");
    (reg, u.to_string(), p.to_string())
}

fn events_of(events: &[Event], pod: &str, reason: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(pod) && e.reason.as_deref() == Some(reason)
        })
        .map(|e| e.message.clone().unwrap_or_default())
        .collect()
}

/// Test 4: an image in the password-protected registry pulls with an imagePullSecret
/// (kubernetes.io/dockerconfigjson); without one the pull fails with ErrImagePull and the
/// registry's 401; a missing secret gives FailedToRetrieveImagePullSecret and the pull fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_secret_authenticates_to_the_private_registry() {
    let client = client().await;
    let ns = TestNs::new(&client, "pullsecret").await;
    let (reg, user, pass) = auth_registry_creds();
    let image = format!("{reg}/private/busybox:latest");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": serde_json::json!({"auths": {reg.clone(): {"auth": auth}}}).to_string()},
    }))
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let with_secret = |name: &str, secret: Option<&str>| {
        let mut p = job_pod(name, &image, "echo pulled-with-auth");
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0].image_pull_policy = Some("Always".into());
        if let Some(s) = secret {
            spec.image_pull_secrets =
                Some(vec![k8s_openapi::api::core::v1::LocalObjectReference {
                    name: s.into(),
                }]);
        }
        p
    };
    ns.create_pod(&with_secret("with-secret", Some("regcred")))
        .await;
    ns.create_pod(&with_secret("without-secret", None)).await;
    ns.create_pod(&with_secret("missing-secret", Some("no-such-secret")))
        .await;

    let (ph, log) = wait_finished(&ns, "with-secret").await;
    assert_eq!(
        ph,
        "Succeeded",
        "{log}\n{}",
        diagnose(&ns.name, "with-secret")
    );
    assert!(log.contains("pulled-with-auth"), "{log}");

    for name in ["without-secret", "missing-secret"] {
        let pod = wait_pod(&ns.pods(), name, "waiting reason ErrImagePull", |p| {
            waiting_reason(p, "main") == Some("ErrImagePull")
        })
        .await;
        let msg = container_status(&pod, "main")
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.message.clone())
            .unwrap_or_default();
        println!("[{}] {name}: ErrImagePull: {msg}", ns.name);
        // the runtime's error as the Go kubelet shows it: the gRPC status text, naming the image
        // and the registry's refusal (containerd 1.6: "401 Unauthorized"; 2.x: "pull access
        // denied, ...: authorization failed: no basic auth credentials")
        assert!(msg.starts_with("rpc error: code = "), "{msg}");
        assert!(msg.contains(&image), "{msg}");
        let lower = msg.to_lowercase();
        assert!(
            msg.contains("401")
                || lower.contains("unauthorized")
                || lower.contains("authorization failed"),
            "{msg}"
        );
        assert!(!msg.contains(&pass), "the password leaked into the status");
    }

    // events reach the API server asynchronously: wait until the expected ones are there
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let want_failed = format!("Failed to pull image \"{image}\": rpc error: ");
    let want_missing = "Unable to retrieve some image pull secrets (no-such-secret); attempting to pull the image may not succeed.";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let list = loop {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        let failed = events_of(&list, "without-secret", "Failed");
        let missing = events_of(&list, "missing-secret", "FailedToRetrieveImagePullSecret");
        let ok = failed.iter().any(|m| m.starts_with(&want_failed))
            && failed.iter().any(|m| m == "Error: ErrImagePull")
            && !missing.is_empty();
        if ok {
            assert!(missing.iter().all(|m| m == want_missing), "{missing:?}");
            break list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "expected events missing: Failed {failed:?}, FailedToRetrieveImagePullSecret {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for e in &list {
        assert!(
            !e.message.as_deref().unwrap_or("").contains(&pass),
            "an event carries the password"
        );
    }
    let log = std::fs::read_to_string(env().get("DECKHAND_LOG")).unwrap_or_default();
    assert!(!log.contains(&pass), "deckhand's log carries the password");
    ns.delete().await;
}

/// Test 5: kube-proxy runs as the kubeadm-shaped DaemonSet on deckhand's node and is Ready, its
/// rules translate the `kubernetes` Service, and the guard chains still come first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_proxy_daemonset_is_ready_and_the_guard_comes_first() {
    let env = env();
    let client = client().await;
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ds = loop {
        let ds = dss.get("kube-proxy").await.ok();
        let ready = ds
            .as_ref()
            .and_then(|d| d.status.as_ref())
            .is_some_and(|st| st.desired_number_scheduled == 1 && st.number_ready == 1);
        if ready {
            break ds.unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kube-system/kube-proxy is not ready:\n{}",
            kubectl_raw(&[
                "-n",
                "kube-system",
                "describe",
                "ds,pods",
                "-l",
                "k8s-app=kube-proxy"
            ])
            .stdout
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let tpl = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(tpl.host_network, Some(true));
    assert_eq!(
        tpl.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    assert_eq!(tpl.service_account_name.as_deref(), Some("kube-proxy"));
    assert_eq!(
        tpl.containers[0]
            .security_context
            .as_ref()
            .and_then(|s| s.privileged),
        Some(true)
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let list = pods
        .list(&ListParams::default().labels("k8s-app=kube-proxy"))
        .await
        .unwrap()
        .items;
    assert_eq!(list.len(), 1, "{list:?}");
    let pod = &list[0];
    let st = pod.status.as_ref().unwrap();
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some(env.node_name())
    );
    assert_eq!(condition(pod, "Ready"), Some("True"));
    assert_eq!(
        st.pod_ip.as_deref(),
        Some(env.node_ip()),
        "hostNetwork pod IP"
    );
    assert!(
        pod.spec.as_ref().unwrap().priority.unwrap_or(0) >= 2_000_001_000,
        "priority of system-node-critical"
    );

    // kube-proxy's rules for default/kubernetes DNAT to the API server
    let (ip, port) = kubernetes_service(&client).await;
    let nat = iptables(&["-t", "nat", "-S"]);
    assert!(
        nat.lines().any(|l| l.starts_with("-A KUBE-SERVICES")
            && l.contains(&format!("-d {ip}/32"))
            && l.contains(&format!("--dport {port}"))),
        "no KUBE-SERVICES rule for {ip}:{port}"
    );
    assert!(
        nat.lines().any(|l| l.starts_with("-A KUBE-SEP-")
            && l.contains(&format!("--to-destination {}:6443", env.node_ip()))),
        "no endpoint rule to the API server"
    );
    // the guard chains are the first rule of INPUT, FORWARD and OUTPUT, ahead of kube-proxy's
    for (hook, chain) in [
        ("INPUT", "DECKHAND-GUARD-IN"),
        ("FORWARD", "DECKHAND-GUARD"),
        ("OUTPUT", "DECKHAND-GUARD-OUT"),
    ] {
        let rules = iptables(&["-S", hook]);
        let first = rules.lines().nth(1).unwrap_or("");
        assert_eq!(first, format!("-A {hook} -j {chain}"), "{hook}:\n{rules}");
        assert!(
            rules.contains("KUBE-"),
            "kube-proxy's jumps are missing from {hook}:\n{rules}"
        );
    }
    let guard = iptables(&["-S", "DECKHAND-GUARD"]);
    assert!(
        guard.contains("pods only reach local addresses"),
        "FORWARD guard lost its final REJECT:\n{guard}"
    );
    println!(
        "kube-proxy {} Ready on {}; guard chains first",
        pod.metadata.name.as_deref().unwrap_or(""),
        env.node_name()
    );
}
