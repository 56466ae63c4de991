//! End-to-end tests of the pod surface real workloads use (issue 5), against the real local
//! cluster of hack/local-up.sh: environment from the downward API, configMaps, secrets and
//! services; downwardAPI, configMap and secret volumes (updates reach running pods, secrets on
//! tmpfs); the service-account token (TokenReview accepts it); volumes that try to escape;
//! limits in the cgroups and QoS classes; runAsUser / runAsNonRoot; DNS; a DaemonSet shaped
//! like kube-proxy and a CNI agent.
//!
//! What the container sees is read with `kubectl exec` (deckhand's exec streaming, issue 6).
//!
//! Run with `cargo test --profile ci --test e2e -- podspec:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn pod_from(json: serde_json::Value) -> Pod {
    serde_json::from_value(json).expect("a valid pod")
}

/// Runs `sh -c script` in container `main` of pod `name`; panics unless it succeeds.
fn exec(ns: &str, name: &str, script: &str) -> String {
    kubectl(&[
        "-n", ns, "exec", name, "-c", "main", "--", "sh", "-c", script,
    ])
}

async fn create_config_map(ns: &TestNs, name: &str, data: &[(&str, &str)]) {
    let api: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    }))
    .unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .expect("creating configMap");
}

async fn create_secret(ns: &TestNs, name: &str, data: &[(&str, &str)]) {
    let api: Api<Secret> = Api::namespaced(ns.client.clone(), &ns.name);
    let s: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "stringData": data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    }))
    .unwrap();
    api.create(&PostParams::default(), &s)
        .await
        .expect("creating secret");
}

fn env_map(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn wait_waiting_reason(api: &Api<Pod>, name: &str, reason: &str) -> Pod {
    wait_pod(
        api,
        name,
        &format!("container main waiting with {reason}"),
        |p| waiting_reason(p, "main") == Some(reason),
    )
    .await
}

fn waiting_message(p: &Pod) -> String {
    container_status(p, "main")
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn environment_comes_from_the_downward_api_config_maps_secrets_and_services() {
    let client = client().await;
    let ns = TestNs::new(&client, "env").await;
    create_config_map(&ns, "app-config", &[("MODE", "fast"), ("LEVEL", "3")]).await;
    create_secret(&ns, "app-secret", &[("password", "s3cr3t")]).await;
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "envy", "labels": {"tier": "web"}},
        "spec": {
            "nodeName": env().node_name(),
            "containers": [{
                "name": "main", "image": "busybox",
                "command": ["sh", "-c", "echo started $(MY_NAME); exec sleep 3600"],
                "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
                "envFrom": [{"configMapRef": {"name": "app-config"}, "prefix": "CFG_"}],
                "env": [
                    {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "MY_TIER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}},
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "MODE"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "password"}}},
                    {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {"name": "no-such-secret", "key": "x", "optional": true}}},
                    {"name": "MEM_LIMIT_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPU_REQ_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
                    {"name": "COMPOSED", "value": "$(MY_NS)/$(MY_NAME) $$(MY_NAME) $(CFG_LEVEL)"},
                ],
                "volumeMounts": [{"name": "info", "mountPath": "/etc/podinfo"}],
            }],
            "volumes": [{"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            ]}}],
        }
    }));
    ns.create_pod(&pod).await;
    let p = wait_running(&ns.pods(), "envy").await;
    let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    let env = env_map(&exec(&ns.name, "envy", "env"));
    assert_eq!(env["MY_NAME"], "envy");
    assert_eq!(env["MY_NS"], ns.name);
    assert_eq!(env["MY_IP"], ip);
    assert_eq!(env["MY_TIER"], "web");
    assert_eq!(env["MODE"], "fast");
    assert_eq!(env["CFG_MODE"], "fast");
    assert_eq!(env["CFG_LEVEL"], "3");
    assert_eq!(env["PASSWORD"], "s3cr3t");
    assert!(!env.contains_key("OPTIONAL"));
    assert_eq!(env["MEM_LIMIT_MI"], "64");
    assert_eq!(env["CPU_REQ_M"], "100");
    assert_eq!(env["COMPOSED"], format!("{}/envy $(MY_NAME) 3", ns.name));
    // the master service, always (enableServiceLinks defaults to true)
    assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
    assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
    assert_eq!(env["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
    assert_eq!(env["KUBERNETES_PORT_443_TCP_PROTO"], "tcp");
    let files = exec(
        &ns.name,
        "envy",
        "cat /etc/podinfo/name; echo; cat /etc/podinfo/labels",
    );
    assert!(files.starts_with("envy\n"), "{files}");
    assert!(files.contains("tier=\"web\""), "{files}");
    // command expansion used the resolved env
    let log = read_cri_log(&cri_log_path(&p, "main", 0));
    assert!(log.iter().any(|l| l.message == "started envy"), "{log:?}");
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_config_map_is_create_container_config_error_until_it_exists() {
    let client = client().await;
    let ns = TestNs::new(&client, "envmissing").await;
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "waiter"},
        "spec": {
            "nodeName": env().node_name(),
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sh", "-c", "exec sleep 3600"],
                "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "x"}}}],
            }],
        }
    }));
    ns.create_pod(&pod).await;
    let p = wait_waiting_reason(&ns.pods(), "waiter", "CreateContainerConfigError").await;
    assert_eq!(waiting_message(&p), "configmap \"late\" not found");
    let table = Table::parse(&kubectl(&["-n", &ns.name, "get", "pod", "waiter"]));
    assert_eq!(table.row("waiter")["STATUS"], "CreateContainerConfigError");
    create_config_map(&ns, "late", &[("y", "1")]).await;
    let p = wait_pod(&ns.pods(), "waiter", "the missing-key message", |p| {
        waiting_message(p) == format!("couldn't find key x in ConfigMap {}/late", ns.name)
    })
    .await;
    assert_eq!(
        waiting_reason(&p, "main"),
        Some("CreateContainerConfigError")
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.patch(
        "late",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"x": "now"}})),
    )
    .await
    .unwrap();
    wait_running(&ns.pods(), "waiter").await;
    assert_eq!(exec(&ns.name, "waiter", "echo -n $X"), "now");
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn config_map_updates_reach_the_running_pod_and_secrets_are_on_tmpfs() {
    let client = client().await;
    let ns = TestNs::new(&client, "cmupdate").await;
    create_config_map(&ns, "live", &[("greeting", "hello")]).await;
    create_secret(&ns, "creds", &[("token", "abc")]).await;
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "reader"},
        "spec": {
            "nodeName": env().node_name(),
            "securityContext": {"fsGroup": 2345},
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sh", "-c", "exec sleep 3600"],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "sec", "mountPath": "/etc/sec"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "live"}},
                {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }
    }));
    ns.create_pod(&pod).await;
    let p = wait_running(&ns.pods(), "reader").await;
    assert_eq!(exec(&ns.name, "reader", "cat /etc/cfg/greeting"), "hello");
    assert_eq!(exec(&ns.name, "reader", "cat /etc/sec/token"), "abc");
    // the secret volume is a tmpfs, in the container and on the host
    let mounts = exec(&ns.name, "reader", "cat /proc/mounts");
    assert!(
        mounts
            .lines()
            .any(|l| l.contains(" /etc/sec ") && l.contains(" tmpfs ")),
        "{mounts}"
    );
    let host_mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let sec_dir = format!("/pods/{}/volumes/kubernetes.io~secret/sec", uid(&p));
    assert!(
        host_mounts
            .lines()
            .any(|l| l.contains(&sec_dir) && l.starts_with("tmpfs ")),
        "no tmpfs at ...{sec_dir} on the host"
    );
    // fsGroup: the volumes belong to the group; the secret file keeps 0400 plus group read
    let ls = exec(
        &ns.name,
        "reader",
        "stat -L -c '%g %a' /etc/sec/token /scratch",
    );
    assert_eq!(ls.trim(), "2345 440\n2345 2777".to_string(), "{ls}");
    let ids = exec(&ns.name, "reader", "id -G");
    assert!(ids.split_whitespace().any(|g| g == "2345"), "{ids}");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    cms.patch(
        "live",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"greeting": "updated"}})),
    )
    .await
    .unwrap();
    let t0 = std::time::Instant::now();
    let (ns_name, pod_name) = (ns.name.clone(), "reader");
    poll(
        Duration::from_secs(120),
        Duration::from_secs(2),
        "the configMap update to appear in the mounted file",
        || {
            let out = kubectl_raw(&[
                "-n",
                &ns_name,
                "exec",
                pod_name,
                "--",
                "cat",
                "/etc/cfg/greeting",
            ]);
            (out.stdout == "updated").then_some(())
        },
    )
    .await;
    println!(
        "configMap update visible in the pod after {:?}",
        t0.elapsed()
    );
    // the atomic writer's layout
    let layout = exec(&ns.name, "reader", "ls -la /etc/cfg");
    assert!(layout.contains("..data ->"), "{layout}");
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_account_token_is_valid_and_names_the_pods_account() {
    let client = client().await;
    let ns = TestNs::new(&client, "token").await;
    ns.create_pod(&busybox_pod("tok", "exec sleep 3600", "Always", Some(1)))
        .await;
    wait_running(&ns.pods(), "tok").await;
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let token = exec(&ns.name, "tok", &format!("cat {dir}/token"));
    assert_eq!(
        exec(&ns.name, "tok", &format!("cat {dir}/namespace")),
        ns.name
    );
    let ca = exec(&ns.name, "tok", &format!("cat {dir}/ca.crt"));
    assert!(ca.contains("BEGIN CERTIFICATE"));
    let perms = exec(&ns.name, "tok", &format!("stat -L -c '%a' {dir}/token"));
    assert_eq!(perms.trim(), "644");
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = reviews
        .create(
            &PostParams::default(),
            &TokenReview {
                metadata: Default::default(),
                spec: TokenReviewSpec {
                    token: token.trim().to_string(),
                    audiences: None,
                },
                status: None,
            },
        )
        .await
        .expect("TokenReview");
    let st = review.status.expect("a TokenReview status");
    assert_eq!(st.authenticated, Some(true), "{st:?}");
    let user = st.user.expect("a user");
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{}:default", ns.name).as_str())
    );
    // bound to the pod
    let extra = user.extra.unwrap_or_default();
    assert_eq!(
        extra
            .get("authentication.kubernetes.io/pod-name")
            .map(|v| v.as_slice()),
        Some(&["tok".to_string()][..])
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_that_try_to_escape_are_refused() {
    let client = client().await;
    let ns = TestNs::new(&client, "escape").await;
    create_config_map(&ns, "cm", &[("k", "v")]).await;
    // `..` in items[].path: the API server refuses it already, with a clear reason
    let bad = pod_from(serde_json::json!({
        "metadata": {"name": "dotdot"},
        "spec": {
            "nodeName": env().node_name(),
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
            "volumes": [{"name": "v", "configMap": {"name": "cm", "items": [{"key": "k", "path": "../escape"}]}}],
        }
    }));
    let err = ns
        .pods()
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("a `..` path must be refused");
    assert!(err.to_string().contains("must not contain '..'"), "{err}");
    // a subPath through a symlink the pod planted, pointing out of the volume
    let marker = format!("deckhand-escape-{}", ns.name);
    let pod = pod_from(serde_json::json!({
        "metadata": {"name": "planter"},
        "spec": {
            "nodeName": env().node_name(),
            "restartPolicy": "Never",
            "initContainers": [{
                "name": "plant", "image": "busybox",
                "command": ["sh", "-c", "ln -s /tmp /vol/link && ln -s /etc /vol/etc"],
                "volumeMounts": [{"name": "vol", "mountPath": "/vol"}],
            }],
            "containers": [{
                "name": "main", "image": "busybox", "command": ["sh", "-c", "touch /x/pwned; sleep 3600"],
                "volumeMounts": [{"name": "vol", "mountPath": "/x", "subPath": format!("link/{marker}")}],
            }],
            "volumes": [{"name": "vol", "emptyDir": {}}],
        }
    }));
    ns.create_pod(&pod).await;
    let p = wait_waiting_reason(&ns.pods(), "planter", "CreateContainerConfigError").await;
    let msg = waiting_message(&p);
    assert!(msg.contains("outside the volume"), "{msg}");
    // nothing was created outside the volume, on the host's /tmp
    assert!(!Path::new("/tmp").join(&marker).exists());
    // events are posted apart from the status, and may come after it
    wait_event_containing(&ns.name, "planter", "outside the volume").await;
    ns.delete().await;
}

fn cgroup_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(rel))
        .unwrap_or_else(|e| panic!("reading /sys/fs/cgroup/{rel}: {e}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_reach_the_cgroups_and_qos_classes_are_right() {
    let client = client().await;
    let ns = TestNs::new(&client, "qos").await;
    let mk = |name: &str, resources: serde_json::Value| {
        pod_from(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": env().node_name(),
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox",
                    "command": ["sh", "-c", "exec sleep 3600"], "resources": resources}],
            }
        }))
    };
    ns.create_pod(&mk(
        "guaranteed",
        serde_json::json!({"limits": {"cpu": "250m", "memory": "64Mi"}}),
    ))
    .await;
    ns.create_pod(&mk(
        "burstable",
        serde_json::json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "500m"}}),
    ))
    .await;
    ns.create_pod(&mk("besteffort", serde_json::json!({})))
        .await;
    let g = wait_running(&ns.pods(), "guaranteed").await;
    let b = wait_running(&ns.pods(), "burstable").await;
    let be = wait_running(&ns.pods(), "besteffort").await;
    let qos = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.qos_class.clone())
            .unwrap_or_default()
    };
    assert_eq!(qos(&g), "Guaranteed");
    assert_eq!(qos(&b), "Burstable");
    assert_eq!(qos(&be), "BestEffort");
    // pod-level cgroups under the QoS split, with the Go kubelet's values
    let gp = format!("kubepods/pod{}", uid(&g));
    assert_eq!(
        cgroup_file(&format!("memory/{gp}/memory.limit_in_bytes")),
        "67108864"
    );
    assert_eq!(cgroup_file(&format!("cpu/{gp}/cpu.cfs_quota_us")), "25000");
    assert_eq!(
        cgroup_file(&format!("cpu/{gp}/cpu.cfs_period_us")),
        "100000"
    );
    assert_eq!(cgroup_file(&format!("cpu/{gp}/cpu.shares")), "256");
    let bp = format!("kubepods/burstable/pod{}", uid(&b));
    assert_eq!(cgroup_file(&format!("cpu/{bp}/cpu.shares")), "102");
    assert_eq!(cgroup_file(&format!("cpu/{bp}/cpu.cfs_quota_us")), "50000");
    let bep = format!("kubepods/besteffort/pod{}", uid(&be));
    assert_eq!(cgroup_file(&format!("cpu/{bep}/cpu.shares")), "2");
    assert_eq!(cgroup_file("cpu/kubepods/besteffort/cpu.shares"), "2");
    // the container's own cgroup (one level below the pod's) carries its limits too
    let inside = exec(
        &ns.name,
        "guaranteed",
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    );
    assert_eq!(
        inside.split_whitespace().collect::<Vec<_>>(),
        vec!["67108864", "25000"]
    );
    // oom_score_adj: BestEffort 1000; Burstable 1000 - 1000*request/capacity; Guaranteed -997,
    // which this VM's containerd raises to its own 0 (restrict_oom_score_adj, see the notes)
    assert_eq!(
        exec(&ns.name, "besteffort", "cat /proc/1/oom_score_adj").trim(),
        "1000"
    );
    let node: k8s_openapi::api::core::v1::Node = Api::all(client.clone())
        .get(env().node_name())
        .await
        .unwrap();
    let cap = node.status.unwrap().capacity.unwrap()["memory"].0.clone();
    let cap_bytes: i128 = cap.trim_end_matches("Ki").parse::<i128>().unwrap() * 1024;
    let expect = 1000 - (1000 * 32 * 1024 * 1024) / cap_bytes;
    assert_eq!(
        exec(&ns.name, "burstable", "cat /proc/1/oom_score_adj").trim(),
        expect.clamp(3, 999).to_string()
    );
    assert_eq!(
        exec(&ns.name, "guaranteed", "cat /proc/1/oom_score_adj").trim(),
        "0"
    );
    // the pod cgroup goes away with the pod
    ns.pods()
        .delete("guaranteed", &Default::default())
        .await
        .unwrap();
    let gone = format!("/sys/fs/cgroup/memory/{gp}");
    poll(
        Duration::from_secs(60),
        Duration::from_millis(500),
        "the pod cgroup to be removed",
        || (!Path::new(&gone).exists()).then_some(()),
    )
    .await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_as_user_and_run_as_non_root() {
    let client = client().await;
    let ns = TestNs::new(&client, "users").await;
    let mut p = busybox_pod("uid1000", "exec sleep 3600", "Always", Some(1));
    p.spec.as_mut().unwrap().security_context = Some(
        serde_json::from_value(serde_json::json!({
            "runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000]
        }))
        .unwrap(),
    );
    ns.create_pod(&p).await;
    let mut nr = busybox_pod("nonroot", "exec sleep 3600", "Always", Some(1));
    nr.spec.as_mut().unwrap().containers[0].security_context =
        Some(serde_json::from_value(serde_json::json!({"runAsNonRoot": true})).unwrap());
    ns.create_pod(&nr).await;
    wait_running(&ns.pods(), "uid1000").await;
    assert_eq!(
        exec(&ns.name, "uid1000", "id -u; id -g")
            .split_whitespace()
            .collect::<Vec<_>>(),
        vec!["1000", "3000"]
    );
    assert!(exec(&ns.name, "uid1000", "id -G")
        .split_whitespace()
        .any(|g| g == "4000"));
    let p = wait_waiting_reason(&ns.pods(), "nonroot", "CreateContainerConfigError").await;
    assert_eq!(
        waiting_message(&p),
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"nonroot_{}({})\", container: main)",
            ns.name,
            uid(&p)
        )
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dns_policies_and_host_aliases_shape_resolv_conf_and_hosts() {
    let client = client().await;
    let ns = TestNs::new(&client, "dns").await;
    let mut cf = busybox_pod("clusterfirst", "exec sleep 3600", "Always", Some(1));
    cf.spec.as_mut().unwrap().host_aliases = Some(vec![serde_json::from_value(
        serde_json::json!({"ip": "10.250.0.9", "hostnames": ["foo.local", "bar.local"]}),
    )
    .unwrap()]);
    cf.spec.as_mut().unwrap().hostname = Some("web-0".into());
    cf.spec.as_mut().unwrap().subdomain = Some("web".into());
    ns.create_pod(&cf).await;
    let mut none = busybox_pod("custom", "exec sleep 3600", "Always", Some(1));
    let spec = none.spec.as_mut().unwrap();
    spec.dns_policy = Some("None".into());
    spec.dns_config = Some(
        serde_json::from_value(serde_json::json!({
            "nameservers": ["10.250.0.53"], "searches": ["example.internal"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]
        }))
        .unwrap(),
    );
    ns.create_pod(&none).await;
    wait_running(&ns.pods(), "clusterfirst").await;
    wait_running(&ns.pods(), "custom").await;
    let rc = exec(&ns.name, "clusterfirst", "cat /etc/resolv.conf");
    assert!(rc.lines().any(|l| l == "nameserver 10.96.0.10"), "{rc}");
    let search = rc
        .lines()
        .find(|l| l.starts_with("search "))
        .unwrap_or_default();
    assert!(
        search.starts_with(&format!(
            "search {}.svc.cluster.local svc.cluster.local cluster.local",
            ns.name
        )),
        "{rc}"
    );
    assert!(rc.lines().any(|l| l == "options ndots:5"), "{rc}");
    let hosts = exec(&ns.name, "clusterfirst", "cat /etc/hosts");
    assert_eq!(exec(&ns.name, "clusterfirst", "hostname").trim(), "web-0");
    let ip = ns
        .pods()
        .get("clusterfirst")
        .await
        .unwrap()
        .status
        .unwrap()
        .pod_ip
        .unwrap();
    assert!(
        hosts.contains(&format!(
            "{ip}\tweb-0.web.{}.svc.cluster.local\tweb-0\n",
            ns.name
        )),
        "{hosts}"
    );
    assert!(
        hosts.contains("# Entries added by HostAliases.\n10.250.0.9\tfoo.local\tbar.local"),
        "{hosts}"
    );
    let rc = exec(&ns.name, "custom", "cat /etc/resolv.conf");
    let lines: Vec<&str> = rc.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.contains(&"nameserver 10.250.0.53"), "{rc}");
    assert!(lines.contains(&"search example.internal"), "{rc}");
    assert!(lines.contains(&"options ndots:2 edns0"), "{rc}");
    assert!(!rc.contains("10.96.0.10"), "{rc}");
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kube_proxy_shaped_daemon_set_runs_ready_on_the_node() {
    let client = client().await;
    let ns = TestNs::new(&client, "ds").await;
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &ns.name);
    sa.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "node-agent"}})).unwrap(),
    )
    .await
    .unwrap();
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {
                "metadata": {"labels": {"app": "node-agent"}},
                "spec": {
                    "hostNetwork": true,
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": "node-agent",
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "main", "image": "busybox",
                        "command": ["sh", "-c", "touch /run/xtables.lock && ls /lib/modules >/dev/null && exec sleep 3600"],
                        "securityContext": {"privileged": true},
                        "readinessProbe": {"exec": {"command": ["sh", "-c", "test -e /run/xtables.lock && ip link show deckhand0"]}, "periodSeconds": 2},
                        "volumeMounts": [
                            {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                            {"name": "lib-modules", "mountPath": "/lib/modules", "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                        {"name": "lib-modules", "hostPath": {"path": "/lib/modules", "type": "DirectoryOrCreate"}},
                    ],
                }
            }
        }
    }))
    .unwrap();
    let dss: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::namespaced(client.clone(), &ns.name);
    dss.create(&PostParams::default(), &ds)
        .await
        .expect("creating the DaemonSet");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let ready = loop {
        let st = dss.get("node-agent").await.ok().and_then(|d| d.status);
        if let Some(st) = st.filter(|s| s.number_ready == 1 && s.desired_number_scheduled == 1) {
            break st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "DaemonSet node-agent not ready on the node within 120 s\n{}",
            kubectl(&["-n", &ns.name, "get", "ds,pods", "-o", "wide"])
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(ready.number_ready, 1);
    let pods = kubectl(&["-n", &ns.name, "get", "pods", "-o", "wide"]);
    let t = Table::parse(&pods);
    let row = t.rows.first().expect("one DaemonSet pod");
    assert_eq!(row["STATUS"], "Running");
    assert_eq!(row["READY"], "1/1");
    assert_eq!(
        row["IP"],
        env().node_ip(),
        "a hostNetwork pod shows the node IP"
    );
    assert_eq!(row["NODE"], env().node_name());
    ns.delete().await;
}

/// A pod that asks for an extended resource someone added to the Node's status (as device
/// plugins and the scheduling conformance tests do) is admitted by deckhand and runs, and the
/// resource stays on the Node through deckhand's status writes (the Go kubelet's admission reads
/// the Node from its informer; deckhand's from its node watch).
#[tokio::test]
async fn a_pod_asking_for_an_extended_resource_on_the_node_runs() {
    const RES: &str = "example.com/e2e-widget";
    let client = client().await;
    let env = env();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let add = serde_json::json!({"status": {"capacity": {RES: "2"}, "allocatable": {RES: "2"}}});
    nodes
        .patch_status(
            env.node_name(),
            &PatchParams::default(),
            &Patch::Strategic(&add),
        )
        .await
        .expect("adding the extended resource");
    let ns = TestNs::new(&client, "extended-resource").await;
    let mut pod = busybox_pod("widget", "exec sleep 3600", "Always", Some(0));
    let one = BTreeMap::from([(
        RES.to_string(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    )]);
    pod.spec.as_mut().unwrap().containers[0].resources =
        Some(k8s_openapi::api::core::v1::ResourceRequirements {
            requests: Some(one.clone()),
            limits: Some(one),
            ..Default::default()
        });
    ns.create_pod(&pod).await;
    let running = wait_running(&ns.pods(), "widget").await;
    assert_eq!(
        running.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    // after a node status round (10 s) the resource is still there
    tokio::time::sleep(Duration::from_secs(12)).await;
    let node = nodes.get(env.node_name()).await.unwrap();
    let status = node.status.unwrap_or_default();
    for (what, list) in [
        ("capacity", &status.capacity),
        ("allocatable", &status.allocatable),
    ] {
        assert_eq!(
            list.as_ref().and_then(|l| l.get(RES)).map(|q| q.0.as_str()),
            Some("2"),
            "{what} after a status round"
        );
    }
    let key = RES.replace('/', "~1");
    let remove = serde_json::json!([
        {"op": "remove", "path": format!("/status/capacity/{key}")},
        {"op": "remove", "path": format!("/status/allocatable/{key}")},
    ]);
    nodes
        .patch_status(
            env.node_name(),
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(remove).unwrap()),
        )
        .await
        .expect("removing the extended resource");
    ns.delete().await;
}

/// RuntimeClass: a pod that names one gets its sandbox from the RuntimeClass's handler. `runc`
/// (the handler the harness's containerd config defines) runs; a handler containerd does not have
/// leaves the pod `ContainerCreating` with the Go kubelet's `FailedCreatePodSandBox` warning
/// carrying containerd's refusal, which shows the handler reached `RunPodSandbox`.
#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_class_handler_reaches_the_runtime() {
    use k8s_openapi::api::node::v1::RuntimeClass;
    let client = client().await;
    let ns = TestNs::new(&client, "runtimeclass").await;
    let rcs: Api<RuntimeClass> = Api::all(client.clone());
    let runc = format!("{}-runc", ns.name);
    let absent = format!("{}-absent", ns.name);
    for (name, handler) in [(&runc, "runc"), (&absent, "deckhand-e2e-absent")] {
        let rc: RuntimeClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "handler": handler,
        }))
        .unwrap();
        rcs.create(&PostParams::default(), &rc).await.unwrap();
    }
    let pod = |name: &str, class: &str| {
        pod_from(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "nodeName": env().node_name(),
                "runtimeClassName": class,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox",
                                "command": ["sh", "-c", "exec sleep 3600"]}],
            }
        }))
    };
    ns.create_pod(&pod("with-runc", &runc)).await;
    ns.create_pod(&pod("with-absent", &absent)).await;
    let running = wait_running(&ns.pods(), "with-runc").await;
    let sandboxes = sandboxes_of(&uid(&running));
    assert_eq!(sandboxes.len(), 1, "{sandboxes:?}");
    let listed = crictl(&["pods", "--id", &sandboxes[0], "-o", "json"]);
    assert!(
        listed.contains(r#""runtimeHandler": "runc""#),
        "the sandbox was made with handler runc: {listed}"
    );
    let events = wait_event_containing(
        &ns.name,
        "with-absent",
        r#"no runtime for "deckhand-e2e-absent" is configured"#,
    )
    .await;
    assert!(events.contains("FailedCreatePodSandBox"), "{events}");
    let p = ns.pods().get("with-absent").await.unwrap();
    assert_eq!(phase(&p), "Pending");
    assert_eq!(waiting_reason(&p, "main"), Some("ContainerCreating"));
    assert!(sandboxes_of(&uid(&p)).is_empty());
    ns.delete().await;
    for name in [&runc, &absent] {
        let _ = rcs.delete(name, &Default::default()).await;
    }
}
