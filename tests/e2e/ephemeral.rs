//! End-to-end tests of ephemeral containers (`kubectl debug`) against the local cluster of
//! hack/local-up.sh, after the Go conformance tests (k/k `test/e2e/common/node/
//! ephemeral_containers.go`): the `ephemeralcontainers` subresource adds a container to a
//! running pod, deckhand starts it (in its target's PID namespace), reports it in
//! `status.ephemeralContainerStatuses`, and exec, logs and attach reach it; updating the list adds
//! a second one; one that exits is not restarted; a bad image name shows `InvalidImageName`.
//!
//! Run with `cargo test --profile ci --test e2e -- ephemeral:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use k8s_openapi::api::core::v1::{ContainerStatus, EphemeralContainer, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::time::Duration;

/// The status of ephemeral container `name`, if reported.
fn ephemeral_status<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    pod.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

fn ephemeral_running(pod: &Pod, name: &str) -> bool {
    ephemeral_status(pod, name)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

fn ephemeral_exit_code(pod: &Pod, name: &str) -> Option<i32> {
    ephemeral_status(pod, name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

/// `kubectl -n ns ...` that must succeed; its stdout (diagnostics of pod `target` if not).
fn k_ok(ns: &str, args: &[&str]) -> String {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    let out = kubectl_raw(&all);
    assert!(
        out.status.success(),
        "kubectl -n {ns} {} failed ({}):\n{}{}\n{}",
        args.join(" "),
        out.status,
        out.stdout,
        out.stderr,
        diagnose(ns, "target")
    );
    out.stdout
}

/// Container IDs (all states) of container `container` of the pod with this UID.
fn instances_of(uid: &str, container: &str) -> Vec<String> {
    let pod = format!("io.kubernetes.pod.uid={uid}");
    let name = format!("io.kubernetes.container.name={container}");
    crictl_ids(&["ps", "-a", "--label", &pod, "--label", &name, "-q"])
}

/// The conformance test "will start an ephemeral container in an existing pod" and "should
/// update the ephemeral containers in an existing pod", with the target's PID namespace, logs,
/// and an ephemeral container that exits and is not restarted.
#[tokio::test]
async fn ephemeral_containers_start_report_and_answer_exec() {
    let client = client().await;
    let ns = TestNs::new(&client, "ephemeral").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod("target", "exec sleep 3600", "Always", Some(1)))
        .await;
    let pod = wait_running(&pods, "target").await;
    let pod_uid = uid(&pod);

    // Add one through the ephemeralcontainers subresource (what `kubectl debug` patches).
    let patch = serde_json::json!({"spec": {"ephemeralContainers": [{
        "name": "debugger",
        "image": "busybox",
        "command": ["sh", "-c", "echo polo; exec sleep 3600"],
        "stdin": true,
        "tty": true,
        "targetContainerName": "main",
    }]}});
    pods.patch_subresource(
        "ephemeralcontainers",
        "target",
        &PatchParams::default(),
        &Patch::Strategic(&patch),
    )
    .await
    .expect("patching the ephemeralcontainers subresource");
    let pod = wait_pod(
        &pods,
        "target",
        "ephemeral container debugger running",
        |p| ephemeral_running(p, "debugger"),
    )
    .await;
    let st = ephemeral_status(&pod, "debugger").unwrap();
    assert_eq!(st.restart_count, 0);
    assert!(!st.ready);
    assert!(
        st.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://")),
        "{st:?}"
    );
    assert!(!st.image_id.is_empty(), "{st:?}");
    assert!(!st.image.is_empty(), "{st:?}");
    assert_eq!(phase(&pod), "Running");
    assert_eq!(
        condition(&pod, "Ready"),
        Some("True"),
        "ephemeral containers do not count for readiness"
    );

    // exec reaches it, and it sees the target's processes: PID 1 is main's `sleep 3600`.
    let out = k_ok(
        &ns.name,
        &[
            "exec",
            "target",
            "-c",
            "debugger",
            "--",
            "sh",
            "-c",
            "echo marco",
        ],
    );
    assert_eq!(out.trim(), "marco");
    let out = k_ok(
        &ns.name,
        &[
            "exec",
            "target",
            "-c",
            "debugger",
            "--",
            "cat",
            "/proc/1/cmdline",
        ],
    );
    assert_eq!(
        out.replace('\0', " ").trim(),
        "sleep 3600",
        "the target's PID namespace"
    );
    let logs = k_ok(&ns.name, &["logs", "target", "-c", "debugger"]);
    assert!(logs.contains("polo"), "{logs}");

    // Update the list (PUT of the subresource, as the conformance test does): a second one,
    // which exits at once and is not restarted although restartPolicy is Always.
    let mut pod = pods.get("target").await.unwrap();
    pod.spec
        .as_mut()
        .unwrap()
        .ephemeral_containers
        .get_or_insert_with(Vec::new)
        .push(EphemeralContainer {
            name: "debugger2".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into(), "-c".into(), "echo done".into()]),
            ..Default::default()
        });
    pods.replace_subresource(
        "ephemeralcontainers",
        "target",
        &PostParams::default(),
        &pod,
    )
    .await
    .expect("updating the ephemeralcontainers subresource");
    let pod = wait_pod(
        &pods,
        "target",
        "debugger2 terminated with exit code 0",
        |p| ephemeral_exit_code(p, "debugger2") == Some(0) && ephemeral_running(p, "debugger"),
    )
    .await;
    let first_id = ephemeral_status(&pod, "debugger2")
        .unwrap()
        .container_id
        .clone();
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pod = pods.get("target").await.unwrap();
    let st = ephemeral_status(&pod, "debugger2").unwrap();
    assert_eq!(st.restart_count, 0, "{st:?}");
    assert_eq!(st.container_id, first_id, "not started again: {st:?}");
    assert_eq!(ephemeral_exit_code(&pod, "debugger2"), Some(0));
    assert_eq!(
        instances_of(&pod_uid, "debugger2").len(),
        1,
        "one instance in the runtime\n{}",
        diagnose(&ns.name, "target")
    );
    assert!(ephemeral_running(&pod, "debugger"), "the first one runs on");
    assert_eq!(phase(&pod), "Running");
    assert_eq!(condition(&pod, "Ready"), Some("True"));
    ns.delete().await;
}

/// `kubectl debug -i`: kubectl adds the ephemeral container, waits for it to run and attaches
/// to it through deckhand's server; what is typed reaches the container's stdin and its output
/// comes back.
///
/// kubectl's stdin stays open while the session lasts, as a user's terminal does. (Closed at once,
/// e.g. `</dev/null`, the session ends at that EOF: containerd's CRI attach detaches stdout and
/// stderr when the attach's stdin ends unless the container is `stdinOnce` (kubectl debug does not
/// set it), whichever kubelet proxies the stream.)
///
/// The container waits a second between reading and answering: containerd 1.6's CRI attach
/// (`ContainerIO.Attach`) starts copying the session's stdin into the container before it adds the
/// session's stdout to the container's output, so an answer written within microseconds of
/// the typed line can miss the session and reach only the log, whichever kubelet proxies it. A
/// user who types after the prompt appears never meets this.
#[tokio::test]
async fn kubectl_debug_attaches_to_the_ephemeral_container() {
    let client = client().await;
    let ns = TestNs::new(&client, "ephemeral-debug").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod("target", "exec sleep 3600", "Always", Some(1)))
        .await;
    wait_running(&pods, "target").await;
    let env = env();
    let mut child = std::process::Command::new(env.kubectl_bin())
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args(["-n", &ns.name, "debug", "target", "-i", "--image=busybox"])
        .args(["--target=main", "-c", "dbg", "--", "sh", "-c"])
        // The output comes before a pause, not as the container's last act: containerd 2.x
        // (2.4.2 here) drops what a container writes just before it exits from an attach without
        // stdinOnce (kubectl debug's), when stderr reaches EOF first. containerd's
        // `ContainerIO.Attach` then closes the attach's stdin, which removes its stdout writer
        // before the last bytes are copied. Seen with strace on deckhand: containerd sends the
        // stdout stream's FIN without the data, about one run in four under pod churn. The same
        // happens under any kubelet, because the kubelet only relays the stream.
        .arg("read line; echo attached-output-$line; sleep 2")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl debug");
    // typed before the session starts: the pipe holds it until kubectl attaches and reads stdin
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, b"typed\n").expect("write to kubectl's stdin");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while child.try_wait().expect("kubectl debug").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl debug -i still running after 90 s\n{}",
            diagnose(&ns.name, "target")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(stdin);
    let out = child.wait_with_output().expect("kubectl debug");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{}: {stdout}{stderr}", out.status);
    assert!(
        stdout.contains("attached-output-typed"),
        "stdout: {stdout}\nstderr: {stderr}\n{}",
        diagnose(&ns.name, "target")
    );
    let pod = wait_pod(&pods, "target", "dbg terminated with exit code 0", |p| {
        ephemeral_exit_code(p, "dbg") == Some(0)
    })
    .await;
    assert_eq!(ephemeral_status(&pod, "dbg").unwrap().restart_count, 0);
    ns.delete().await;
}

/// An ephemeral container with an image name that cannot be parsed waits with
/// `InvalidImageName`; the pod runs on.
#[tokio::test]
async fn an_ephemeral_container_with_an_invalid_image_shows_invalid_image_name() {
    let client = client().await;
    let ns = TestNs::new(&client, "ephemeral-badimage").await;
    let pods: Api<Pod> = ns.pods();
    ns.create_pod(&busybox_pod("target", "exec sleep 3600", "Always", Some(1)))
        .await;
    wait_running(&pods, "target").await;
    let patch = serde_json::json!({"spec": {"ephemeralContainers": [{
        "name": "bad",
        "image": "Invalid/IMAGE:NAME",
        "command": ["sh"],
    }]}});
    pods.patch_subresource(
        "ephemeralcontainers",
        "target",
        &PatchParams::default(),
        &Patch::Strategic(&patch),
    )
    .await
    .expect("patching the ephemeralcontainers subresource");
    let pod = wait_pod(&pods, "target", "bad waiting with InvalidImageName", |p| {
        ephemeral_status(p, "bad")
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.as_deref())
            == Some("InvalidImageName")
    })
    .await;
    assert_eq!(phase(&pod), "Running");
    assert_eq!(condition(&pod, "Ready"), Some("True"));
    assert!(instances_of(&uid(&pod), "bad").is_empty());
    ns.delete().await;
}
