//! Shared helpers of the end-to-end tests: the local cluster's env file, API and CLI clients,
//! per-test namespaces, pod builders, waits with diagnostics, and a lock that keeps the tests
//! that disturb deckhand (SIGKILL + restart) apart from those that must see it undisturbed.
#![allow(dead_code)]

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Default time a pod gets to reach a state (generous: other tests run in parallel and one of
/// them restarts deckhand).
pub const POD_TIMEOUT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// env file
// ---------------------------------------------------------------------------------------------

/// `_output/local-up/env`, written by hack/local-up.sh.
pub struct Env {
    vars: BTreeMap<String, String>,
    pub root: PathBuf,
}

impl Env {
    /// A variable of the env file; panics if it is missing.
    pub fn get(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .unwrap_or_else(|| panic!("{key} is missing from the local cluster's env file"))
    }
    pub fn kubeconfig(&self) -> &str {
        self.get("KUBECONFIG")
    }
    pub fn kubectl_bin(&self) -> &str {
        self.get("KUBECTL")
    }
    pub fn crictl_bin(&self) -> &str {
        self.get("CRICTL")
    }
    pub fn node_name(&self) -> &str {
        self.get("NODE_NAME")
    }
    pub fn node_ip(&self) -> &str {
        self.get("NODE_IP")
    }
    /// Which containerd the cluster runs: `1.6` (Debian's, the default) or `2` (`CONTAINERD=2
    /// hack/local-up.sh up`); `1.6` for an env file written before it said.
    pub fn containerd_mode(&self) -> &str {
        self.vars.get("CONTAINERD").map_or("1.6", String::as_str)
    }
    /// The containerd the cluster runs, as the node's CONTAINER-RUNTIME column shows it (the Go
    /// kubelet's generic version: no `v`, no Debian suffix): `containerd://1.6.20` on Debian's
    /// 1.6, `containerd://2.4.2` with `CONTAINERD=2 hack/local-up.sh up`. From the env file's
    /// CONTAINERD_VERSION; `containerd://1.6` for an env file written before it had one.
    pub fn container_runtime_shown(&self) -> String {
        let version = match self.vars.get("CONTAINERD_VERSION") {
            Some(v) if !v.is_empty() => v
                .trim_start_matches('v')
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect::<String>(),
            _ => "1.6".to_string(),
        };
        format!("containerd://{}", version.trim_end_matches('.'))
    }
}

/// The parsed env file. Panics when the cluster is not up: these tests never pass silently.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let path = root.join("_output/local-up/env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "the local cluster is not up: run hack/local-up.sh first ({}: {e})",
                path.display()
            )
        });
        let vars = parse_env(&text);
        let env = Env { vars, root };
        if !Path::new(env.kubeconfig()).exists() {
            panic!(
                "the local cluster is not up: run hack/local-up.sh first ({} is missing)",
                env.kubeconfig()
            );
        }
        env
    })
}

fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// clients
// ---------------------------------------------------------------------------------------------

/// An API client for the admin kubeconfig (one per test: a client belongs to its runtime).
pub async fn client() -> kube::Client {
    let env = env();
    let kc = kube::config::Kubeconfig::read_from(env.kubeconfig())
        .unwrap_or_else(|e| panic!("reading {}: {e}", env.kubeconfig()));
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("loading {}: {e}", env.kubeconfig()));
    let client = kube::Client::try_from(cfg).expect("building the API client");
    // Fail early and clearly if the API server does not answer.
    if let Err(e) = client.apiserver_version().await {
        panic!("the local cluster is not up: run hack/local-up.sh first (API server: {e})");
    }
    client
}

/// Output of a finished command.
pub struct Output {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    Output {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs kubectl with the admin kubeconfig; returns its output whatever the exit status.
pub fn kubectl_raw(args: &[&str]) -> Output {
    let env = env();
    run(Command::new(env.kubectl_bin())
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args(args))
}

/// Runs kubectl; panics (with stderr) unless it succeeds; returns stdout.
pub fn kubectl(args: &[&str]) -> String {
    let out = kubectl_raw(args);
    assert!(
        out.status.success(),
        "kubectl {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Starts `kubectl -n ns args...` with the admin kubeconfig and stdout piped, for a session the
/// test reads while it runs (`logs -f`, `exec -i`, `attach`, `port-forward`); the test ends it
/// (kill, or close stdin). `stdin` piped keeps an `exec -i` session open; `stderr` as the caller
/// wants it.
pub fn kubectl_spawn(ns: &str, args: &[&str], stdin: Stdio, stderr: Stdio) -> Child {
    let env = env();
    Command::new(env.kubectl_bin())
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .arg("-n")
        .arg(ns)
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("starting kubectl")
}

/// Runs crictl against the cluster's CRI endpoint; panics unless it succeeds; returns stdout.
pub fn crictl(args: &[&str]) -> String {
    match try_crictl(args) {
        Ok(stdout) => stdout,
        Err(e) => panic!("{e}"),
    }
}

/// Runs crictl against the cluster's CRI endpoint; stdout, or an error that carries crictl's
/// exit status and output (for calls whose failure is an expected outcome, such as `inspect` of a
/// container the kubelet may already have collected).
pub fn try_crictl(args: &[&str]) -> Result<String, String> {
    let env = env();
    let out = run(Command::new(env.crictl_bin())
        .arg("--runtime-endpoint")
        .arg(env.get("CRI_ENDPOINT"))
        .arg("--timeout")
        .arg("10s")
        .args(args));
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "crictl {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            out.stdout,
            out.stderr
        ))
    }
}

/// IDs printed by a `crictl ... -q` command.
pub fn crictl_ids(args: &[&str]) -> Vec<String> {
    crictl(args)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// Sandbox IDs (all states) of the pod with this UID.
pub fn sandboxes_of(uid: &str) -> Vec<String> {
    let label = format!("io.kubernetes.pod.uid={uid}");
    crictl_ids(&["pods", "--label", &label, "-q"])
}

/// Container IDs (all states) of the pod with this UID.
pub fn containers_of(uid: &str) -> Vec<String> {
    let label = format!("io.kubernetes.pod.uid={uid}");
    crictl_ids(&["ps", "-a", "--label", &label, "-q"])
}

/// The last `n` lines of deckhand's log that mention `needle` (for failure messages).
pub fn deckhand_log_tail(needle: &str, n: usize) -> String {
    let path = env().get("DECKHAND_LOG");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// namespaces
// ---------------------------------------------------------------------------------------------

/// The events in namespace `ns` of the object `field_selector` picks (e.g.
/// `involvedObject.name=web`), one `<type> <reason>: <message>` line each.
pub fn event_lines(ns: &str, field_selector: &str) -> String {
    kubectl(&[
        "-n",
        ns,
        "get",
        "events",
        "--field-selector",
        field_selector,
        "-o",
        "jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}",
    ])
}

/// Waits up to a minute for an event of pod `pod` in `ns` whose line ([`event_lines`]) contains
/// `want`, and returns all its event lines.
pub async fn wait_event_containing(ns: &str, pod: &str, want: &str) -> String {
    let selector = format!("involvedObject.name={pod}");
    poll(
        Duration::from_secs(60),
        Duration::from_millis(500),
        &format!("an event of {pod} with {want:?}"),
        || {
            let e = event_lines(ns, &selector);
            e.contains(want).then_some(e)
        },
    )
    .await
}

/// A namespace of one test; deleted by [`TestNs::delete`] at the end of the test, or (without
/// waiting) when dropped, e.g. after a failed assertion.
pub struct TestNs {
    pub name: String,
    pub client: kube::Client,
    deleted: bool,
}

impl TestNs {
    /// Creates `e2e-<test>-<random>` and waits for its `default` ServiceAccount (pods are
    /// rejected by the ServiceAccount admission plugin until the controller-manager made it).
    pub async fn new(client: &kube::Client, test: &str) -> TestNs {
        Self::new_within(client, test, Duration::from_secs(60)).await
    }

    /// [`TestNs::new`], waiting up to `wait` for the ServiceAccount.
    pub async fn new_within(client: &kube::Client, test: &str, wait: Duration) -> TestNs {
        let suffix = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        let name = format!("e2e-{test}-{suffix}");
        let api: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"deckhand-e2e": "true"}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        let ns = TestNs {
            name,
            client: client.clone(),
            deleted: false,
        };
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns.name);
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(Some(_)) = sas.get_opt("default").await {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the default ServiceAccount of namespace {} did not appear within {wait:?} (is kube-controller-manager running?)",
                ns.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!("[{}] namespace ready", ns.name);
        ns
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates a pod in this namespace.
    pub async fn create_pod(&self, pod: &Pod) -> Pod {
        self.pods()
            .create(&PostParams::default(), pod)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "creating pod {}/{}: {e}",
                    self.name,
                    pod.metadata.name.as_deref().unwrap_or("")
                )
            })
    }

    /// Deletes the namespace (without waiting for its pods to be gone).
    pub async fn delete(mut self) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting namespace {}: {e}", self.name),
        }
        self.deleted = true;
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = kubectl_raw(&["delete", "namespace", &self.name, "--wait=false"]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// pods
// ---------------------------------------------------------------------------------------------

/// A one-container busybox pod bound to this node (no scheduler runs).
pub fn busybox_pod(name: &str, script: &str, restart_policy: &str, grace: Option<i64>) -> Pod {
    pod_with_image(name, "busybox", script, restart_policy, grace)
}

/// A one-container pod with `image`, running `sh -c script`, bound to this node.
pub fn pod_with_image(
    name: &str,
    image: &str,
    script: &str,
    restart_policy: &str,
    grace: Option<i64>,
) -> Pod {
    let mut spec = serde_json::json!({
        "nodeName": env().node_name(),
        "restartPolicy": restart_policy,
        "containers": [{
            "name": "main",
            "image": image,
            "command": ["sh", "-c", script],
        }],
    });
    if let Some(g) = grace {
        spec["terminationGracePeriodSeconds"] = g.into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "deckhand-e2e"}},
        "spec": spec,
    }))
    .expect("a valid pod")
}

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().expect("pod has a uid")
}

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// The status of container `name`, if reported.
pub fn container_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// The waiting reason of container `name`, if it is waiting.
pub fn waiting_reason<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    container_status(pod, name)?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .as_deref()
}

/// The pod condition `type_`'s status ("True"/"False"), if reported.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// Everything useful for a failure message: the pod's status, `kubectl describe`, the runtime's
/// view, and deckhand's log lines about the pod.
pub fn diagnose(ns: &str, name: &str) -> String {
    let status = kubectl_raw(&["-n", ns, "get", "pod", name, "-o", "jsonpath={.status}"]);
    let describe = kubectl_raw(&["-n", ns, "describe", "pod", name]);
    let uid = kubectl_raw(&[
        "-n",
        ns,
        "get",
        "pod",
        name,
        "-o",
        "jsonpath={.metadata.uid}",
    ])
    .stdout
    .trim()
    .to_string();
    let mut runtime = String::new();
    if !uid.is_empty() {
        let label = format!("io.kubernetes.pod.uid={uid}");
        let env = env();
        for args in [
            vec!["pods", "--label", label.as_str()],
            vec!["ps", "-a", "--label", label.as_str()],
        ] {
            let out = run(Command::new(env.crictl_bin())
                .arg("--runtime-endpoint")
                .arg(env.get("CRI_ENDPOINT"))
                .args(&args));
            runtime.push_str(&format!(
                "$ crictl {}\n{}{}",
                args.join(" "),
                out.stdout,
                out.stderr
            ));
        }
    }
    let mut container_logs = String::new();
    if !uid.is_empty() {
        let dir = PathBuf::from(format!("/var/log/pods/{ns}_{name}_{uid}"));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|c| std::fs::read_dir(c.path()).into_iter().flatten().flatten())
            .map(|f| f.path())
            .collect();
        files.sort();
        for f in files {
            let lines = read_cri_log(&f);
            let start = lines.len().saturating_sub(10);
            container_logs.push_str(&format!("== {} (last 10 lines)\n", f.display()));
            for l in &lines[start..] {
                container_logs.push_str(&l.raw);
                container_logs.push('\n');
            }
        }
    }
    let log = deckhand_log_tail(name, 25);
    format!(
        "----- pod {ns}/{name} status -----\n{}{}\n----- kubectl describe pod -----\n{}{}\n----- runtime -----\n{runtime}----- container logs -----\n{container_logs}----- deckhand log lines mentioning {name} (last 25) -----\n{log}\n-----",
        status.stdout, status.stderr, describe.stdout, describe.stderr
    )
}

/// Watches pod `name` until `done` holds (it sees every status the API server stores, in
/// order); panics after `timeout` with diagnostics. `done` may record what it saw.
pub async fn watch_pod_until(
    api: &Api<Pod>,
    name: &str,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&Pod) -> bool,
) -> Pod {
    let ns = api_namespace(api);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api.clone(), cfg)
        .default_backoff()
        .applied_objects();
    futures::pin_mut!(stream);
    let r = tokio::time::timeout(timeout, async {
        loop {
            match stream.try_next().await {
                Ok(Some(pod)) => {
                    if done(&pod) {
                        return pod;
                    }
                }
                Ok(None) => panic!("the watch on pod {ns}/{name} ended"),
                // The watcher retries with back-off by itself (e.g. API server hiccups).
                Err(e) => eprintln!("[{ns}] watch on pod {name}: {e} (retrying)"),
            }
        }
    })
    .await;
    match r {
        Ok(pod) => pod,
        Err(_) => panic!(
            "pod {ns}/{name}: {what} did not happen within {timeout:?}\n{}",
            diagnose(&ns, name)
        ),
    }
}

/// [`watch_pod_until`] with the default timeout.
pub async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    what: &str,
    done: impl FnMut(&Pod) -> bool,
) -> Pod {
    watch_pod_until(api, name, POD_TIMEOUT, what, done).await
}

/// Waits until pod `name` is Running with its container running and ready.
pub async fn wait_running(api: &Api<Pod>, name: &str) -> Pod {
    wait_pod(
        api,
        name,
        "phase Running with a pod IP and container main ready",
        |p| {
            phase(p) == "Running"
                && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
                && container_status(p, "main").is_some_and(|c| c.ready)
        },
    )
    .await
}

fn api_namespace(api: &Api<Pod>) -> String {
    // Api has no namespace getter; the resource URL carries it.
    let url = api.resource_url();
    url.split("/namespaces/")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or("")
        .to_string()
}

/// Polls `check` every `every` until it returns Some, panicking with `what` after `timeout`.
pub async fn poll<T>(
    timeout: Duration,
    every: Duration,
    what: &str,
    check: impl FnMut() -> Option<T>,
) -> T {
    poll_with(timeout, every, || what.to_string(), check).await
}

/// [`poll`] whose failure message is built when the time is up (so it can carry diagnostics of
/// that moment).
pub async fn poll_with<T>(
    timeout: Duration,
    every: Duration,
    what: impl FnOnce() -> String,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("{}: not within {timeout:?}", what());
        }
        tokio::time::sleep(every).await;
    }
}

// ---------------------------------------------------------------------------------------------
// node, deckhand process
// ---------------------------------------------------------------------------------------------

/// The node's Ready condition status ("True"/"False"/"Unknown"), or "" if absent.
pub fn node_ready_status(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

/// Waits up to `timeout` for the node to be Ready.
pub async fn wait_node_ready(client: &kube::Client, timeout: Duration) {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = env().node_name();
    let deadline = Instant::now() + timeout;
    loop {
        match nodes.get_opt(name).await {
            Ok(Some(n)) if node_ready_status(&n) == "True" => return,
            other => {
                if Instant::now() > deadline {
                    panic!(
                        "node {name} is not Ready after {timeout:?}: {:?}\n{}",
                        other.map(|n| n.and_then(|n| n.status.and_then(|s| s.conditions))),
                        kubectl_raw(&["describe", "node", name]).stdout
                    );
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// deckhand's pid (from hack/local-up.sh's pid file), checked against /proc.
pub fn deckhand_pid() -> i32 {
    let pidfile = env().get("DECKHAND_PIDFILE");
    let pid: i32 = std::fs::read_to_string(pidfile)
        .unwrap_or_else(|e| {
            panic!(
                "deckhand's pid file {pidfile}: {e} (is deckhand running? hack/local-up.sh status)"
            )
        })
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("deckhand's pid file {pidfile}: {e}"));
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(
        comm.trim(),
        "deckhand",
        "pid {pid} from {pidfile} is not a running deckhand (comm {comm:?})"
    );
    pid
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// Tests that SIGKILL and restart deckhand take this lock for writing; tests that need deckhand
/// undisturbed for a while (the lease test) take it for reading. Other tests do not take it:
/// they tolerate a few seconds of deckhand downtime through their generous timeouts.
pub static DECKHAND_DISRUPTION: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

// ---------------------------------------------------------------------------------------------
// kubectl table output
// ---------------------------------------------------------------------------------------------

/// A `kubectl get` table parsed by the header's column positions (kubectl aligns columns with a
/// tabwriter, so every cell starts where its header starts; cells may contain single spaces,
/// e.g. OS-IMAGE or `1 (5s ago)`).
pub struct Table {
    pub text: String,
    pub headers: Vec<String>,
    pub rows: Vec<BTreeMap<String, String>>,
}

impl Table {
    pub fn parse(text: &str) -> Table {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header = lines
            .next()
            .unwrap_or_else(|| panic!("empty kubectl output"));
        // Header names are separated by at least two spaces ("NOMINATED NODE" has one).
        let mut starts = Vec::new();
        let mut headers = Vec::new();
        let bytes = header.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b' ' {
                let start = i;
                while i < bytes.len()
                    && !(bytes[i] == b' ' && (i + 1 >= bytes.len() || bytes[i + 1] == b' '))
                {
                    i += 1;
                }
                starts.push(start);
                headers.push(header[start..i].to_string());
            } else {
                i += 1;
            }
        }
        let rows = lines
            .map(|line| {
                let mut row = BTreeMap::new();
                for (k, h) in headers.iter().enumerate() {
                    let s = starts[k].min(line.len());
                    let e = starts
                        .get(k + 1)
                        .copied()
                        .unwrap_or(line.len())
                        .min(line.len());
                    row.insert(h.clone(), line[s..e].trim().to_string());
                }
                row
            })
            .collect();
        Table {
            text: text.to_string(),
            headers,
            rows,
        }
    }

    /// The row whose NAME is `name`.
    pub fn row(&self, name: &str) -> &BTreeMap<String, String> {
        self.rows
            .iter()
            .find(|r| r.get("NAME").map(String::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in:\n{}", self.text))
    }
}

// ---------------------------------------------------------------------------------------------
// CRI log files
// ---------------------------------------------------------------------------------------------

/// `/var/log/pods/<ns>_<name>_<uid>/<container>/<attempt>.log`, where the CRI runtime writes a
/// container's output.
pub fn cri_log_path(pod: &Pod, container: &str, attempt: u32) -> PathBuf {
    PathBuf::from(format!(
        "/var/log/pods/{}_{}_{}/{container}/{attempt}.log",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or(""),
        uid(pod)
    ))
}

/// One line of a CRI log file: `<RFC 3339 nano timestamp> <stream> <P|F> <message>`.
#[derive(Debug, Clone)]
pub struct CriLogLine {
    pub raw: String,
    pub timestamp: String,
    pub stream: String,
    pub tag: String,
    pub message: String,
}

/// The lines of a CRI log file (empty if it does not exist yet).
pub fn read_cri_log(path: &Path) -> Vec<CriLogLine> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|raw| {
            let mut it = raw.splitn(4, ' ');
            CriLogLine {
                raw: raw.to_string(),
                timestamp: it.next().unwrap_or("").to_string(),
                stream: it.next().unwrap_or("").to_string(),
                tag: it.next().unwrap_or("").to_string(),
                message: it.next().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// Waits until the CRI log file has a line with this message; returns all lines.
pub async fn wait_log_message(path: &Path, message: &str, timeout: Duration) -> Vec<CriLogLine> {
    let deadline = Instant::now() + timeout;
    loop {
        let lines = read_cri_log(path);
        if lines.iter().any(|l| l.message == message) {
            return lines;
        }
        if Instant::now() > deadline {
            panic!(
                "{} has no line with message {message:?} after {timeout:?}; it holds:\n{}",
                path.display(),
                lines
                    .iter()
                    .map(|l| l.raw.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// restarting deckhand through the harness
// ---------------------------------------------------------------------------------------------

/// Is the process alive (not gone, not a zombie)?
/// Runs `hack/local-up.sh <args>` (e.g. `stop-apiserver`, `start-containerd`) and panics with
/// its output when it fails.
pub fn local_up(args: &[&str]) {
    let script = Path::new(env().get("ROOT")).join("hack/local-up.sh");
    let out = Command::new(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", script.display()));
    assert!(
        out.status.success(),
        "hack/local-up.sh {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn process_alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    match stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()) {
        None | Some('Z') | Some('X') => false,
        Some(_) => true,
    }
}

fn read_environ(pid: i32) -> BTreeMap<String, String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Harness variables that shape how hack/local-up.sh starts deckhand (and, on
/// restart-deckhand, the scheduler); a restart passes on the values the running deckhand was
/// started with, so the restarted one is configured the same.
const HARNESS_VARS: &[&str] = &[
    "NODE_NAME",
    "DECKHAND_ARGS",
    "DECKHAND_JOIN",
    "DECKHAND_WAIT_NODE",
    "RUST_LOG",
    "NO_COLOR",
    "SCHEDULER_BIN",
    "SCHEDULER_ARGS",
    "LOCAL_UP_STOP_FOREIGN_CONTAINERD",
];

/// `hack/local-up.sh restart-deckhand` prepared from a running deckhand: its binary, the harness
/// variables of its environment, and its recorded command line (checked after the restart).
pub struct HarnessRestart {
    script: PathBuf,
    vars: BTreeMap<String, String>,
    cmd_file: PathBuf,
    old_cmd: Vec<u8>,
}

/// The result of a restart.
pub struct RestartOutput {
    pub text: String,
}

impl HarnessRestart {
    pub fn capture(pid: i32) -> HarnessRestart {
        let env = env();
        let pids_dir = Path::new(env.get("DECKHAND_PIDFILE"))
            .parent()
            .unwrap()
            .to_path_buf();
        let cmd_file = pids_dir.join("deckhand.cmd");
        let old_cmd =
            std::fs::read(&cmd_file).unwrap_or_else(|e| panic!("{}: {e}", cmd_file.display()));
        let argv0 = old_cmd
            .split(|b| *b == 0)
            .next()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| env.get("DECKHAND_BIN").to_string());
        let environ = read_environ(pid);
        let mut vars: BTreeMap<String, String> = HARNESS_VARS
            .iter()
            .filter_map(|k| environ.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect();
        // No rebuild: the binary deckhand runs from.
        vars.insert("DECKHAND_BIN".into(), argv0);
        vars.insert("DECKHAND_WAIT_TIMEOUT".into(), "60".into());
        if !vars.contains_key("SCHEDULER_BIN") {
            // restart-deckhand also (re)builds and starts deckhand-scheduler; keep a running
            // one as it is, and never build one from here.
            let sched_pid = std::fs::read_to_string(pids_dir.join("deckhand-scheduler.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
                .filter(|p| process_alive(*p));
            let sched_bin = sched_pid
                .and_then(|_| std::fs::read(pids_dir.join("deckhand-scheduler.cmd")).ok())
                .and_then(|c| {
                    c.split(|b| *b == 0)
                        .next()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                })
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| "/nonexistent/e2e-restart-starts-no-scheduler".into());
            vars.insert("SCHEDULER_BIN".into(), sched_bin);
        }
        HarnessRestart {
            script: Path::new(env.get("ROOT")).join("hack/local-up.sh"),
            vars,
            cmd_file,
            old_cmd,
        }
    }

    /// [`Self::run`] with `extra` (whitespace-separated flags) appended to deckhand's command
    /// line through `DECKHAND_ARGS`; the restarted command line must be the old one plus `extra`.
    /// Restore the original with another [`HarnessRestart`] captured before.
    pub fn run_with_args(mut self, extra: &str) -> RestartOutput {
        let args = match self.vars.get("DECKHAND_ARGS") {
            Some(a) if !a.trim().is_empty() => format!("{a} {extra}"),
            _ => extra.to_string(),
        };
        self.vars.insert("DECKHAND_ARGS".into(), args);
        let trailing_nul = self.old_cmd.last() == Some(&0);
        let mut parts: Vec<Vec<u8>> = self
            .old_cmd
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        parts.extend(extra.split_whitespace().map(|a| a.as_bytes().to_vec()));
        let mut expected = parts.join(&0u8);
        if trailing_nul {
            expected.push(0);
        }
        self.old_cmd = expected;
        self.run()
    }

    /// Runs the restart (blocking), with a clean environment: nothing of cargo's test
    /// environment leaks into the harness or into deckhand. The caller holds the harness lock
    /// ([`lock_harness`]), so this runs the script's `cmd_restart_deckhand` (what
    /// `hack/local-up.sh restart-deckhand` runs after taking that lock) with the script sourced.
    pub fn run(self) -> RestartOutput {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(concat!(
                "LOCAL_UP_SOURCE_ONLY=1; . \"$0\" || exit; ",
                "declare -F cmd_restart_deckhand >/dev/null || ",
                "{ echo \"$0 has no cmd_restart_deckhand function\" >&2; exit 3; }; ",
                "cmd_restart_deckhand"
            ))
            .arg(&self.script)
            .env_clear();
        for k in ["PATH", "HOME", "LANG"] {
            if let Ok(v) = std::env::var(k) {
                cmd.env(k, v);
            }
        }
        cmd.env("LOCAL_UP_SOURCE_ONLY", "1").envs(&self.vars);
        let out = run(&mut cmd);
        let text = format!("(env {:?})\n{}{}", self.vars, out.stdout, out.stderr);
        assert!(
            out.status.success(),
            "hack/local-up.sh cmd_restart_deckhand failed ({}):\n{text}",
            out.status
        );
        let new_cmd = std::fs::read(&self.cmd_file).unwrap_or_default();
        let show = |c: &[u8]| String::from_utf8_lossy(c).replace('\0', " ");
        assert_eq!(
            show(&new_cmd),
            show(&self.old_cmd),
            "deckhand was restarted with another command line"
        );
        RestartOutput { text }
    }
}

/// The harness's lock (`$STATE_DIR/.lock`, which every `hack/local-up.sh up | down |
/// restart-*` run holds): taken before deckhand is killed and kept until it runs again, so that
/// no other harness run (e.g. a rebuild) sits between the kill and the restart. Waits up to
/// `timeout` for a run in progress.
pub async fn lock_harness(timeout: Duration) -> nix::fcntl::Flock<std::fs::File> {
    use nix::fcntl::{Flock, FlockArg};
    let path = Path::new(env().get("STATE_DIR")).join(".lock");
    let start = Instant::now();
    let mut said = false;
    loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
            Err((_, e)) => panic!("flock {}: {e}", path.display()),
        }
        if !said {
            println!(
                "waiting for another hack/local-up.sh run (it holds {})",
                path.display()
            );
            said = true;
        }
        assert!(
            start.elapsed() < timeout,
            "another hack/local-up.sh run held {} for more than {timeout:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
