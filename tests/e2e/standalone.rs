//! End-to-end test of standalone mode (issue 7): deckhand with no `--kubeconfig` and no
//! `--bootstrap-kubeconfig` runs the static pods of `--pod-manifest-path` with no API server.
//!
//! A second deckhand cannot run beside the cluster's (they would share containerd, and each
//! cleans up the other's pods as orphans), so the test stops the cluster's deckhand under the
//! harness lock, runs this build's deckhand standalone against the cluster's containerd with a
//! temporary manifest directory and root directory, and restarts the cluster's deckhand exactly
//! as it was (the harness's `cmd_restart_deckhand`) however the test ends.
//!
//! Side effect, as with the Go kubelet: the standalone deckhand knows none of the cluster's
//! pods, so it removes their sandboxes as orphans; the restarted cluster deckhand creates them
//! again (the test waits for kube-proxy to run again before it returns).

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(90);

/// Stops the standalone deckhand, then restarts the cluster's deckhand, whatever the test's
/// outcome.
struct Restore {
    standalone: Option<Child>,
    restart: Option<HarnessRestart>,
    dir: PathBuf,
    /// Remove the kubepods.slice cgroups the systemd-driver run made.
    slices: bool,
}

/// Every `kubepods.slice` directory (and those below it) in the cgroup hierarchies, deepest
/// first.
fn slice_dirs() -> Vec<PathBuf> {
    fn walk(d: &std::path::Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), out);
            }
        }
        out.push(d.to_path_buf());
    }
    let mut out = vec![];
    let root = std::path::Path::new("/sys/fs/cgroup");
    for top in [root.to_path_buf()].into_iter().chain(
        std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path()),
    ) {
        let s = top.join("kubepods.slice");
        if s.is_dir() {
            walk(&s, &mut out);
        }
    }
    out
}

impl Restore {
    /// SIGTERM, then up to 20 s for a clean exit (SIGKILL after); the exit status.
    fn stop_standalone(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.standalone.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        self.stop_standalone();
        if self.slices {
            for d in slice_dirs() {
                let _ = std::fs::remove_dir(&d);
            }
        }
        if let Some(r) = self.restart.take() {
            println!("restarting the cluster's deckhand");
            let out = r.run();
            println!("{}", out.text);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The scratch directories of one test: `<tmp>/deckhand-e2e-<tag>-<pid>/{manifests,root}` and
/// the log of the deckhand it starts.
struct Scratch {
    dir: PathBuf,
    manifests: PathBuf,
    root: PathBuf,
    log_path: PathBuf,
}

fn scratch(tag: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("deckhand-e2e-{tag}-{}", std::process::id()));
    let (manifests, root) = (dir.join("manifests"), dir.join("root"));
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    let log_path = dir.join("deckhand.log");
    Scratch {
        dir,
        manifests,
        root,
        log_path,
    }
}

/// Stops the cluster's deckhand (SIGTERM) and waits until it has exited.
async fn stop_cluster_deckhand(pid: i32) {
    println!("stopping the cluster's deckhand (pid {pid})");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("stopping deckhand");
    poll_with(
        Duration::from_secs(30),
        Duration::from_millis(100),
        || "the cluster's deckhand did not exit after SIGTERM".to_string(),
        || (!process_alive(pid)).then_some(()),
    )
    .await;
}

/// Starts this build's deckhand against the cluster's containerd with the static pods of
/// `manifests` and root directory `root`, on the node's address on the harness's dummy interface
/// (never the machine's real one), logging to `log`; `extra` adds flags.
fn start_deckhand(
    manifests: &std::path::Path,
    root: &std::path::Path,
    log: &std::path::Path,
    extra: &[&str],
    what: &str,
) -> Child {
    let env = env();
    let out = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_deckhand"))
        .args([
            "--container-runtime-endpoint",
            env.get("CRI_ENDPOINT"),
            "--pod-manifest-path",
            manifests.to_str().unwrap(),
            "--root-dir",
            root.to_str().unwrap(),
            "--node-ip",
            env.node_ip(),
            "--hostname-override",
            env.node_name(),
            "--healthz-port",
            "0",
        ])
        .args(extra)
        .env_remove("KUBECONFIG")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"))
}

/// Writes the static pod `<name>` (one busybox container running `sh -c script`) into
/// `manifests`.
fn write_static_pod(manifests: &std::path::Path, name: &str, namespace: &str, script: &str) {
    std::fs::write(
        manifests.join(format!("{name}.yaml")),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: busybox\n    command: [sh, -c, '{script}']\n"
        ),
    )
    .unwrap();
}

fn log_tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Polls `check` every 500 ms until it returns Some; panics with `what` and the standalone
/// deckhand's log after [`TIMEOUT`].
fn poll_sync<T>(what: &str, log: &std::path::Path, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check() {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "{what} within {TIMEOUT:?}\nstandalone deckhand log:\n{}",
                log_tail(log, 40)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn standalone_runs_static_pods_without_an_api_server() {
    let env = env();
    let client = client().await;
    let harness_lock = lock_harness(Duration::from_secs(600)).await;
    let old_pid = deckhand_pid();
    let Scratch {
        dir,
        manifests,
        root,
        log_path,
    } = scratch("standalone");
    let mut guard = Restore {
        standalone: None,
        restart: Some(HarnessRestart::capture(old_pid)),
        dir: dir.clone(),
        slices: false,
    };
    stop_cluster_deckhand(old_pid).await;
    let child = start_deckhand(
        &manifests,
        &root,
        &log_path,
        &["--file-check-frequency", "2s"],
        "the standalone deckhand",
    );
    guard.standalone = Some(child);

    let name = "standalone-e2e";
    let pod_name = format!("{name}-{}", env.node_name());
    write_static_pod(
        &manifests,
        name,
        "default",
        "echo standalone; exec sleep 3600",
    );

    let label = format!("io.kubernetes.pod.name={pod_name}");
    let running = poll_sync("the static pod's container not running", &log_path, || {
        let ids = crictl_ids(&["ps", "--state", "Running", "--label", &label, "-q"]);
        (ids.len() == 1).then(|| ids[0].clone())
    });
    println!("static pod {pod_name} runs container {running}");
    // No API server: no mirror pod (nor anything else) was written.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(
        pods.get_opt(&pod_name).await.unwrap().is_none(),
        "a mirror pod {pod_name} exists: standalone mode must not write to the API server"
    );
    let mirrors = pods
        .list(&ListParams::default().fields(&format!("metadata.name={pod_name}")))
        .await
        .unwrap();
    assert!(mirrors.items.is_empty());

    std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    poll_sync(
        "the removed static pod's sandbox not gone",
        &log_path,
        || {
            crictl_ids(&["pods", "--label", &label, "-q"])
                .is_empty()
                .then_some(())
        },
    );
    println!("static pod {pod_name} removed with its file");

    let status = guard
        .stop_standalone()
        .expect("the standalone deckhand's exit status");
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        status.success(),
        "standalone deckhand exited with {status}:\n{}",
        log_tail(&log_path, 40)
    );
    assert!(
        text.contains("running standalone"),
        "the log does not say standalone mode:\n{}",
        log_tail(&log_path, 40)
    );

    // cgroupDriver systemd: the kubepods slices are made through cgroupfs where systemd would
    // put them, and containerd's runc (SystemdCgroup = false here) is reported as disagreeing
    // (containerd 1.6, which has no RuntimeConfig; 2.x's answer overrides cgroupDriver).
    // No pod runs this way (runc's cgroupfs driver cannot take a slice parent).
    let log2 = dir.join("deckhand-systemd.log");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let child = start_deckhand(
        &empty,
        &root,
        &log2,
        &["--cgroup-driver", "systemd"],
        "the standalone deckhand with the systemd driver",
    );
    guard.standalone = Some(child);
    guard.slices = true;
    poll_sync("the systemd-driver deckhand not synced", &log2, || {
        std::fs::read_to_string(&log2)
            .unwrap_or_default()
            .contains("pod sources synced")
            .then_some(())
    });
    let text = std::fs::read_to_string(&log2).unwrap_or_default();
    if env.containerd_mode() == "2" {
        // containerd 2.x answers CRI RuntimeConfig (cgroupfs here): as the Go kubelet does
        // (getCgroupDriverFromCRI), deckhand takes the runtime's driver over cgroupDriver
        // systemd, so no slices are made and there is nothing to warn about
        assert!(
            text.contains("Using cgroup driver setting received from the CRI runtime (it overrides cgroupDriver systemd)"),
            "the runtime's cgroup driver did not override cgroupDriver systemd:\n{}",
            log_tail(&log2, 40)
        );
    } else {
        assert!(
            text.contains(
                "cgroupDriver is systemd but containerd's runc runs with SystemdCgroup = false"
            ),
            "no warning about containerd's cgroup driver:\n{}",
            log_tail(&log2, 40)
        );
        let slices = slice_dirs();
        assert!(
            slices
                .iter()
                .any(|d| d.ends_with("kubepods.slice/kubepods-besteffort.slice")),
            "no kubepods-besteffort.slice under /sys/fs/cgroup: {slices:?}"
        );
        assert!(slices
            .iter()
            .any(|d| d.ends_with("kubepods.slice/kubepods-burstable.slice")));
    }
    let status = guard.stop_standalone().expect("exit status");
    assert!(status.success(), "{}", log_tail(&log2, 40));

    // The cluster's deckhand as it was, then its pods again.
    drop(guard);
    drop(harness_lock);
    wait_node_ready(&client, Duration::from_secs(90)).await;
    let system: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let list = system
            .list(&ListParams::default().labels("k8s-app=kube-proxy"))
            .await
            .unwrap();
        if !list.items.is_empty()
            && list
                .items
                .iter()
                .all(|p| phase(p) == "Running" && condition(p, "Ready") == Some("True"))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "kube-proxy not Running again after the cluster's deckhand restarted\n{}",
            kubectl_raw(&["get", "pods", "-A", "-o", "wide"]).stdout
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// kubeadm's control plane is static pods of the node whose kubelet must reach it: deckhand with
/// a kubeconfig whose API server does not answer yet runs the static pods all the same (the node
/// is registered in the background, as the Go kubelet does), and stops promptly on SIGTERM
/// while it still retries the registration.
#[tokio::test(flavor = "multi_thread")]
async fn static_pods_run_while_the_api_server_is_unreachable() {
    let env = env();
    let harness_lock = lock_harness(Duration::from_secs(600)).await;
    let old_pid = deckhand_pid();
    let Scratch {
        dir,
        manifests,
        root,
        log_path,
    } = scratch("noapi");
    // port 1 on loopback: nothing listens, every connection is refused
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: not-a-token\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
    .unwrap();
    let mut guard = Restore {
        standalone: None,
        restart: Some(HarnessRestart::capture(old_pid)),
        dir: dir.clone(),
        slices: false,
    };
    stop_cluster_deckhand(old_pid).await;
    let kubeconfig_arg = kubeconfig.to_str().unwrap();
    let child = start_deckhand(
        &manifests,
        &root,
        &log_path,
        &[
            "--kubeconfig",
            kubeconfig_arg,
            "--file-check-frequency",
            "2s",
        ],
        "deckhand with an unreachable API server",
    );
    guard.standalone = Some(child);

    let name = "noapi-e2e";
    let pod_name = format!("{name}-{}", env.node_name());
    write_static_pod(&manifests, name, "kube-system", "exec sleep 3600");
    let label = format!("io.kubernetes.pod.name={pod_name}");
    let running = poll_sync(
        "the static pod's container not running while the API server is unreachable",
        &log_path,
        || {
            let ids = crictl_ids(&["ps", "--state", "Running", "--label", &label, "-q"]);
            (ids.len() == 1).then(|| ids[0].clone())
        },
    );
    println!("static pod {pod_name} runs container {running} with no API server");
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        text.contains("unable to register node"),
        "deckhand did not try to register the node:\n{}",
        log_tail(&log_path, 40)
    );
    std::fs::remove_file(manifests.join(format!("{name}.yaml"))).unwrap();
    poll_sync(
        "the removed static pod's sandbox not gone",
        &log_path,
        || {
            crictl_ids(&["pods", "--label", &label, "-q"])
                .is_empty()
                .then_some(())
        },
    );
    let t = Instant::now();
    let status = guard.stop_standalone().expect("exit status");
    assert!(
        status.success() && t.elapsed() < Duration::from_secs(15),
        "deckhand exited with {status} after {:?} while registering:\n{}",
        t.elapsed(),
        log_tail(&log_path, 40)
    );
    drop(guard);
    drop(harness_lock);
    wait_node_ready(&client().await, Duration::from_secs(90)).await;
}
