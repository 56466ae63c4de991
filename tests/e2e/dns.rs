//! End-to-end tests of cluster DNS against the local cluster of hack/local-up.sh: CoreDNS runs as
//! kubeadm's `kube-system/coredns` Deployment (on deckhand's node) behind the `kube-dns` Service
//! at deckhand's clusterDNS (10.96.0.10), and a pod with the default dnsPolicy (ClusterFirst)
//! resolves Services by name: the full name, the short name through the search path deckhand
//! writes into its resolv.conf, `kubernetes.default`, and the reverse name of a ClusterIP. A name
//! outside the cluster gets NXDOMAIN: CoreDNS forwards nothing (no query leaves the machine).
//!
//! The client is busybox (its `wget` crashes in pods here). Its `nslookup` (1.35) applies the
//! search path only to a name without a dot (the known busybox bug behind "kubernetes.default:
//! NXDOMAIN" with busybox > 1.28), so names with a dot that need the search path
//! (`kubernetes.default`, `web.<ns>`) are resolved through the C library's resolver, the one
//! applications use (ndots:5, the search list): `ping -c1` prints `PING <name> (<address>)` once
//! the name resolved (the ping itself is not the point and may fail).
//!
//! Run with `cargo test --profile ci --test e2e -- dns::` after `hack/local-up.sh`.

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use std::time::Duration;

/// The kube-dns Service's ClusterIP: deckhand's clusterDNS in the harness's KubeletConfiguration.
const CLUSTER_DNS: &str = "10.96.0.10";

/// Waits until `kube-system/coredns` is available (hack/local-up.sh waits for it too; this makes
/// a test run against a cluster whose CoreDNS broke since fail with the reason).
async fn wait_coredns(client: &kube::Client) {
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let available = deploys
            .get_opt("coredns")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        if available >= 1 {
            return;
        }
        if std::time::Instant::now() > deadline {
            let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
            let names: Vec<String> = pods
                .list(&ListParams::default().labels("k8s-app=kube-dns"))
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|p| p.metadata.name)
                        .collect()
                })
                .unwrap_or_default();
            let diag: String = names.iter().map(|n| diagnose("kube-system", n)).collect();
            panic!(
                "Deployment kube-system/coredns is not available within 120 s (hack/local-up.sh deploys it)\n{}\n{diag}",
                kubectl_raw(&["-n", "kube-system", "get", "deployment,pods", "-o", "wide"]).stdout
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The section of the client's log between `== name ==` and the next `== ` line.
fn section<'a>(log: &'a str, name: &str) -> &'a str {
    let start = format!("== {name} ==\n");
    let Some(i) = log.find(&start) else {
        return "";
    };
    let rest = &log[i + start.len()..];
    match rest.find("\n== ") {
        Some(j) => &rest[..j + 1],
        None => rest,
    }
}

/// Whether busybox ping's output says `name` resolved to `ip` (`PING <name> (<ip>): 56 data bytes`).
fn ping_resolved(out: &str, name: &str, ip: &str) -> bool {
    out.lines()
        .any(|l| l.starts_with(&format!("PING {name} ({ip})")))
}

/// Whether busybox nslookup's output has an answer line `Address: <ip>` (the server's own line,
/// `Address:\t10.96.0.10:53`, carries a port and never matches).
fn answers_with(out: &str, ip: &str) -> bool {
    out.lines().any(|l| {
        let mut w = l.split_whitespace();
        w.next().is_some_and(|k| k.starts_with("Address")) && w.last().is_some_and(|v| v == ip)
    })
}

/// A ClusterIP Service and a busybox client pod in a test namespace: the pod's resolv.conf points
/// at kube-dns with the cluster search path; nslookup resolves the Service's full name, its short
/// name (search path), `kubernetes.default.svc.cluster.local` and the ClusterIP's reverse name;
/// the C library resolves `web.<ns>` and `kubernetes.default` (10.96.0.1) through the search
/// path; a name outside the cluster gets NXDOMAIN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_resolve_by_name_in_pods() {
    let client = client().await;
    wait_coredns(&client).await;
    let dns: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let kube_dns = dns
        .get("kube-dns")
        .await
        .expect("Service kube-system/kube-dns");
    assert_eq!(
        kube_dns.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
        Some(CLUSTER_DNS),
        "kube-dns's ClusterIP is deckhand's clusterDNS"
    );
    let default_svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let kubernetes_ip = default_svcs
        .get("kubernetes")
        .await
        .expect("default/kubernetes")
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("kubernetes has a ClusterIP");
    assert_eq!(
        kubernetes_ip, "10.96.0.1",
        "the kubernetes Service is the first address of the Service CIDR"
    );

    let ns = TestNs::new(&client, "dns").await;
    // A ClusterIP Service's A record is its ClusterIP whether or not it has endpoints.
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let svc = svcs.create(&PostParams::default(), &svc).await.unwrap();
    let cluster_ip = svc.spec.unwrap().cluster_ip.unwrap();
    let fqdn = format!("web.{}.svc.cluster.local", ns.name);
    println!("[{}] Service web at {cluster_ip}", ns.name);

    // CoreDNS learns of the Service through its watch: the client retries the full name for
    // 30 s, then runs each lookup once, each in its own section of the log.
    let script = format!(
        "echo '== resolv.conf =='; cat /etc/resolv.conf; \
         ok=0; for i in $(seq 1 30); do \
           if timeout 5 nslookup {fqdn} 2>&1 | grep -q '{cluster_ip}'; then ok=1; echo \"resolved after $i\"; break; fi; \
           sleep 1; \
         done; [ $ok = 1 ] || echo 'never resolved'; \
         for q in {fqdn} web kubernetes.default.svc.cluster.local {cluster_ip} no-such-name.invalid; do \
           echo \"== nslookup $q ==\"; timeout 10 nslookup $q 2>&1; echo \"rc=$?\"; \
         done; \
         for q in web.{ns} kubernetes.default; do \
           echo \"== ping $q ==\"; timeout 10 ping -c 1 -W 1 $q 2>&1; echo \"rc=$?\"; \
         done; echo '== end =='",
        ns = ns.name
    );
    ns.create_pod(&busybox_pod("client", &script, "Never", Some(1)))
        .await;
    let done = wait_pod(&ns.pods(), "client", "phase Succeeded or Failed", |p| {
        matches!(phase(p), "Succeeded" | "Failed")
    })
    .await;
    let log = kubectl_raw(&["-n", &ns.name, "logs", "client"]).stdout;
    assert_eq!(
        phase(&done),
        "Succeeded",
        "{log}\n{}",
        diagnose(&ns.name, "client")
    );
    println!("[{}] client log:\n{log}", ns.name);
    assert!(
        log.contains("== end =="),
        "the client's log is cut short:\n{log}"
    );

    // deckhand's resolv.conf for ClusterFirst (pkg/kubelet/network/dns)
    let rc = section(&log, "resolv.conf");
    assert!(
        rc.lines()
            .any(|l| l.trim() == format!("nameserver {CLUSTER_DNS}")),
        "resolv.conf does not point at kube-dns:\n{rc}"
    );
    let search = format!(
        "search {}.svc.cluster.local svc.cluster.local cluster.local",
        ns.name
    );
    assert!(
        rc.lines().any(|l| l.trim().starts_with(&search)),
        "resolv.conf lacks the cluster search path ({search}):\n{rc}"
    );
    assert!(
        rc.contains("ndots:5"),
        "resolv.conf lacks options ndots:5:\n{rc}"
    );
    assert!(
        log.contains("resolved after"),
        "{fqdn} never resolved to {cluster_ip} within 30 s:\n{log}\n{}",
        kubectl_raw(&[
            "-n",
            "kube-system",
            "logs",
            "deployment/coredns",
            "--tail=30"
        ])
        .stdout
    );

    // nslookup: the full names, and the short name through the search path (busybox queries
    // every search domain and exits 1 when any of them is NXDOMAIN, so only the answer counts)
    for (q, ip) in [
        (fqdn.as_str(), &cluster_ip),
        ("web", &cluster_ip),
        ("kubernetes.default.svc.cluster.local", &kubernetes_ip),
    ] {
        let out = section(&log, &format!("nslookup {q}"));
        assert!(
            answers_with(out, ip),
            "nslookup {q} did not answer {ip}:\n{out}"
        );
    }
    // the C library's resolver: names with a dot through the search path (ndots:5)
    for (q, ip) in [
        (format!("web.{}", ns.name), &cluster_ip),
        ("kubernetes.default".to_string(), &kubernetes_ip),
    ] {
        let out = section(&log, &format!("ping {q}"));
        assert!(
            ping_resolved(out, &q, ip),
            "{q} did not resolve to {ip} through the search path:\n{out}"
        );
    }
    // the reverse name of the ClusterIP (the kubernetes plugin serves in-addr.arpa)
    let out = section(&log, &format!("nslookup {cluster_ip}"));
    assert!(
        out.contains(&fqdn),
        "nslookup {cluster_ip} (PTR) did not name {fqdn}:\n{out}"
    );
    // nothing is forwarded: a name outside the cluster does not exist
    let out = section(&log, "nslookup no-such-name.invalid");
    assert!(
        out.contains("NXDOMAIN") && !out.contains("rc=0"),
        "nslookup no-such-name.invalid did not fail with NXDOMAIN:\n{out}"
    );
    ns.delete().await;
}
