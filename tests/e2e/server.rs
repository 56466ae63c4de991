//! End-to-end tests of deckhand's kubelet HTTPS server (port 10250) against the local cluster of
//! hack/local-up.sh, through the real API server (`kubectl logs/exec/attach/port-forward`,
//! `kubectl get --raw .../proxy/...`) and directly with curl (authentication and authorization).
//!
//! Expected log output is derived from the container's CRI log file, read independently here,
//! the way the Go kubelet renders it (records in file order, fixed-width timestamps, tail by
//! records, byte limit including prefixes).
//!
//! Run with `cargo test --profile ci --test e2e -- server:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/// `kubectl -n ns ...`, whatever its exit status.
fn k(ns: &str, args: &[&str]) -> Output {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    kubectl_raw(&all)
}

/// `kubectl -n ns ...` that must succeed; its stdout.
fn k_ok(ns: &str, args: &[&str]) -> String {
    let out = k(ns, args);
    assert!(
        out.status.success(),
        "kubectl -n {ns} {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Starts `kubectl -n ns args...` with stdout collected in the background.
fn k_spawn(ns: &str, args: &[&str]) -> (Child, Arc<Mutex<Vec<u8>>>) {
    let mut child = kubectl_spawn(ns, args, Stdio::null(), Stdio::piped());
    let buf = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 65536];
        while let Ok(n) = stdout.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (child, buf)
}

fn text_of(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
}

/// Waits until the collected output satisfies `done`; panics with it after `timeout`.
async fn wait_output(
    buf: &Arc<Mutex<Vec<u8>>>,
    timeout: Duration,
    what: &str,
    done: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let t = text_of(buf);
        if done(&t) {
            return;
        }
        if Instant::now() > deadline {
            let tail: String = t
                .chars()
                .rev()
                .take(2000)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            panic!("timed out after {timeout:?} waiting for {what}; output so far (tail):\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Ends a spawned process (ours) if it still runs.
fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The Go kubelet's fixed-width form of a CRI timestamp (`.000000000Z` nanoseconds).
fn fixed_width(ts: &str) -> String {
    let (main, zone) = ts.split_at(ts.len() - 1); // ...Z
    assert_eq!(zone, "Z", "CRI timestamps are UTC: {ts}");
    match main.split_once('.') {
        Some((secs, frac)) => format!("{secs}.{frac:0<9}Z"),
        None => format!("{main}.000000000Z"),
    }
}

/// What `kubectl logs` prints for these (full-line) records, optionally with timestamps.
fn render(lines: &[CriLogLine], timestamps: bool) -> String {
    let mut out = String::new();
    for l in lines {
        assert_eq!(l.tag, "F", "test containers write whole lines: {}", l.raw);
        if timestamps {
            out.push_str(&fixed_width(&l.timestamp));
            out.push(' ');
        }
        out.push_str(&l.message);
        out.push('\n');
    }
    out
}

/// curl to deckhand's server directly; returns (HTTP status, body). A failed connection
/// (other tests restart deckhand now and then) is retried for up to 20 s.
fn curl(path: &str, extra: &[&str]) -> (u16, String) {
    let env = env();
    let url = format!("https://{}:10250{path}", env.node_ip());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
            .args(extra)
            .arg(&url)
            .output()
            .expect("running curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        let code: u16 = code.trim().parse().unwrap_or(0);
        if code != 0 || Instant::now() > deadline {
            return (code, body.to_string());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// curl options authenticating as the cluster admin (O=system:masters) and verifying the
/// serving certificate against the cluster CA.
fn admin_tls() -> Vec<String> {
    let env = env();
    let pki = env.get("PKI_DIR");
    vec![
        "--cacert".into(),
        env.get("CA_CERT").into(),
        "--cert".into(),
        format!("{pki}/admin.crt"),
        "--key".into(),
        format!("{pki}/admin.key"),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// logs
// ---------------------------------------------------------------------------------------------

/// `kubectl logs` with and without --tail, --timestamps, --limit-bytes, --since and
/// --since-time prints what the Go kubelet prints for a container writing numbered lines to
/// stdout and stderr (compared with the CRI log file itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_with_each_flag() {
    let client = client().await;
    let ns = TestNs::new(&client, "logs").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "numbers",
        "for i in 1 2 3 4 5; do echo \"out $i\"; echo \"err $i\" >&2; done; sleep 5; \
         for i in 6 7 8; do echo \"out $i\"; echo \"err $i\" >&2; done; exec sleep 3600",
        "Always",
        Some(0),
    ))
    .await;
    let pod = wait_running(&pods, "numbers").await;
    let path = cri_log_path(&pod, "main", 0);
    let lines = poll(
        Duration::from_secs(30),
        Duration::from_millis(100),
        "16 records in the CRI log file",
        || Some(read_cri_log(&path)).filter(|l| l.len() >= 16),
    )
    .await;
    let batch2_seen = Instant::now();
    assert_eq!(lines.len(), 16, "16 records in {}", path.display());

    // --since: only the second batch (written ~5 s after the first) is younger than 4 s.
    let since = k_ok(&ns.name, &["logs", "numbers", "--since=4s"]);
    let took = batch2_seen.elapsed();
    if took < Duration::from_secs(3) {
        assert_eq!(
            since,
            render(&lines[10..], false),
            "--since=4s ({took:?} after the second batch)"
        );
    } else {
        println!(
            "[{}] --since check skipped: the machine took {took:?}",
            ns.name
        );
    }

    // plain: every record, stdout and stderr, in file order
    let all = k_ok(&ns.name, &["logs", "numbers"]);
    assert_eq!(all, render(&lines, false));
    for i in 1..=8 {
        assert!(all.contains(&format!("out {i}\n")) && all.contains(&format!("err {i}\n")));
    }

    // --tail counts records from the end
    assert_eq!(
        k_ok(&ns.name, &["logs", "numbers", "--tail=3"]),
        render(&lines[13..], false)
    );
    assert_eq!(k_ok(&ns.name, &["logs", "numbers", "--tail=0"]), "");
    assert_eq!(k_ok(&ns.name, &["logs", "numbers", "--tail=100"]), all);

    // --timestamps: fixed-width RFC3339Nano and a space before each line
    let ts = k_ok(&ns.name, &["logs", "numbers", "--timestamps"]);
    assert_eq!(ts, render(&lines, true));
    assert_eq!(
        k_ok(&ns.name, &["logs", "numbers", "--timestamps", "--tail=2"]),
        render(&lines[14..], true)
    );

    // --limit-bytes cuts the output, prefixes included
    assert_eq!(
        k_ok(&ns.name, &["logs", "numbers", "--limit-bytes=12"]),
        all[..12]
    );
    assert_eq!(
        k_ok(
            &ns.name,
            &["logs", "numbers", "--limit-bytes=40", "--timestamps"]
        ),
        ts[..40]
    );

    // --since-time (second precision through the API): a whole second after the first record
    // excludes the first batch and keeps the second.
    let first = chrono::DateTime::parse_from_rfc3339(&lines[0].timestamp).unwrap();
    let cut = (first + chrono::Duration::seconds(2))
        .with_timezone(&chrono::Utc)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let since_time = k_ok(
        &ns.name,
        &["logs", "numbers", &format!("--since-time={cut}")],
    );
    assert_eq!(
        since_time,
        render(&lines[10..], false),
        "--since-time={cut}"
    );

    // Unknown container: the API server refuses before reaching the kubelet; the kubelet's own
    // answer is checked in `direct_requests_are_authenticated_and_authorized`.
    assert!(!k(&ns.name, &["logs", "numbers", "-c", "nope"])
        .status
        .success());
    ns.delete().await;
}

/// `kubectl logs -f` streams lines as they are written and ends when the container exits;
/// `kubectl logs --previous` shows the instance before a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_and_previous() {
    let client = client().await;
    let ns = TestNs::new(&client, "logsf").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "ticker",
        "sleep 1; for i in $(seq 1 20); do echo \"tick $i\"; echo \"tock $i\" >&2; sleep 0.15; done",
        "Never",
        Some(0),
    ))
    .await;
    ns.create_pod(&busybox_pod(
        "crasher",
        "echo \"start $(cat /proc/sys/kernel/random/uuid)\"; echo line-a; echo line-b >&2; sleep 1; exit 1",
        "Always",
        Some(0),
    ))
    .await;

    // follow from the start: all lines arrive, and kubectl ends by itself after the exit.
    wait_pod(&pods, "ticker", "container main running", |p| {
        container_status(p, "main")
            .and_then(|c| c.state.as_ref())
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
    })
    .await;
    let (mut child, buf) = k_spawn(&ns.name, &["logs", "-f", "ticker"]);
    wait_output(&buf, Duration::from_secs(60), "tick 20 and tock 20", |t| {
        t.contains("tick 20\n") && t.contains("tock 20\n")
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl logs -f did not end after the container exited"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(status.success(), "kubectl logs -f: {status}");
    let pod = pods.get("ticker").await.unwrap();
    let lines = read_cri_log(&cri_log_path(&pod, "main", 0));
    assert_eq!(text_of(&buf), render(&lines, false));

    // previous: after the first restart, --previous shows attempt 0, the plain call attempt 1.
    let pod = wait_pod(&pods, "crasher", "a restart", |p| {
        container_status(p, "main").is_some_and(|c| {
            c.restart_count >= 1
                && c.last_state
                    .as_ref()
                    .and_then(|l| l.terminated.as_ref())
                    .is_some()
        })
    })
    .await;
    let _ = pod;
    // --previous reads the instance of lastState.terminated (in CrashLoopBackOff that is the
    // newest exited one); the expected text comes from that container's own log file. The
    // status is read before and after, and the check repeated if it moved in between.
    let last_terminated = |p: &k8s_openapi::api::core::v1::Pod| {
        container_status(p, "main")
            .and_then(|c| c.last_state.as_ref())
            .and_then(|l| l.terminated.as_ref())
            .and_then(|t| t.container_id.clone())
            .unwrap_or_default()
    };
    let mut checked = false;
    for _ in 0..5 {
        let before = last_terminated(&pods.get("crasher").await.unwrap());
        let prev = k_ok(&ns.name, &["logs", "crasher", "--previous"]);
        let after = last_terminated(&pods.get("crasher").await.unwrap());
        if before != after || before.is_empty() {
            continue;
        }
        let id = before.trim_start_matches("containerd://");
        let inspect: serde_json::Value =
            serde_json::from_str(&crictl(&["inspect", id])).expect("crictl inspect JSON");
        let log_path = inspect["status"]["logPath"].as_str().unwrap().to_string();
        let prev_lines = read_cri_log(Path::new(&log_path));
        assert_eq!(prev, render(&prev_lines, false), "--previous = {log_path}");
        assert!(prev.contains("start ") && prev.contains("line-a\n") && prev.contains("line-b\n"));
        checked = true;
        break;
    }
    assert!(
        checked,
        "the container's status kept changing under kubectl logs --previous"
    );
    // The current instance (running or exited again) is another one.
    let cur = k_ok(&ns.name, &["logs", "crasher"]);
    assert!(cur.contains("start ") && cur.contains("line-a\n"), "{cur}");
    stop(child);
    ns.delete().await;
}

/// The API server's websocket path for `pods/log` (`Upgrade: websocket`, protocol
/// `binary.k8s.io`; the conformance test "Pods should support retrieving logs from the container
/// over websockets") returns the log right after the container starts. The API server copies
/// the kubelet's body into websocket messages and drops a read that carries data and the end of
/// the body together, so deckhand must not send a short log and its end in one TLS record
/// (it lost the log about half the time before `server::flushing`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_over_a_websocket_right_after_start() {
    let client = client().await;
    let ns = TestNs::new(&client, "logsws").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "alive",
        "echo container is alive; exec sleep 3600",
        "Never",
        Some(0),
    ))
    .await;
    let pod = wait_running(&pods, "alive").await;
    wait_log_message(
        &cri_log_path(&pod, "main", 0),
        "container is alive",
        Duration::from_secs(30),
    )
    .await;
    let env = env();
    let url = format!(
        "{}/api/v1/namespaces/{}/pods/alive/log?container=main",
        env.get("API_SERVER"),
        ns.name
    );
    let tls = admin_tls();
    let mut empty = Vec::new();
    for i in 0..10 {
        let out = Command::new("curl")
            .args(["-sS", "--http1.1", "--max-time", "20"])
            .args(strs(&tls))
            .args(["-H", "Connection: Upgrade", "-H", "Upgrade: websocket"])
            .args(["-H", "Sec-WebSocket-Version: 13"])
            .args(["-H", "Sec-WebSocket-Key: x3JJHMbDL1EzLkh9GBhXDw=="])
            .args(["-H", "Sec-WebSocket-Protocol: binary.k8s.io"])
            .arg(&url)
            .output()
            .expect("running curl");
        // The raw websocket frames: the log text is the payload of one binary message.
        let frames = String::from_utf8_lossy(&out.stdout);
        if !frames.contains("container is alive\n") {
            empty.push(format!(
                "request {i}: {} bytes {frames:?} {}",
                out.stdout.len(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        empty.is_empty(),
        "the log did not come through the websocket:\n{}",
        empty.join("\n")
    );
    ns.delete().await;
}

/// `kubectl logs -f` keeps going when the log file is rotated (containerLogMaxSize, 10Mi by
/// default): the container writes a burst of more than 10 MiB, deckhand's log manager renames
/// the file and has containerd reopen it, and lines written afterwards still arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_survives_rotation() {
    let client = client().await;
    let ns = TestNs::new(&client, "logrot").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "big",
        "pad=$(printf '%0999d' 0); i=0; while true; do i=$((i+1)); echo \"seq $i\"; \
         if [ $i = 5 ]; then yes \"$pad\" | head -n 11000; fi; sleep 0.2; done",
        "Always",
        Some(0),
    ))
    .await;
    let pod = wait_running(&pods, "big").await;
    let (child, buf) = k_spawn(&ns.name, &["logs", "-f", "big"]);
    wait_output(&buf, Duration::from_secs(30), "seq 6", |t| {
        t.contains("seq 6\n")
    })
    .await;
    let log = cri_log_path(&pod, "main", 0);
    let dir = log.parent().unwrap().to_path_buf();
    let rotated = poll(
        Duration::from_secs(40),
        Duration::from_millis(250),
        "a rotated log file beside 0.log (rotation every 10 s)",
        || {
            std::fs::read_dir(&dir).ok().and_then(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .find(|n| n.starts_with("0.log."))
            })
        },
    )
    .await;
    println!("[{}] rotated to {rotated}", ns.name);
    // Lines written after the rotation (into the new file) must arrive too.
    let max_seq = |t: &str| -> u32 {
        t.lines()
            .filter_map(|l| l.strip_prefix("seq ").and_then(|n| n.parse().ok()))
            .max()
            .unwrap_or(0)
    };
    let live: Vec<String> = read_cri_log(&log).into_iter().map(|l| l.message).collect();
    let at_rotation = max_seq(&text_of(&buf)).max(max_seq(&live.join("\n")));
    let want = format!("seq {}\n", at_rotation + 10);
    wait_output(&buf, Duration::from_secs(30), &want.clone(), |t| {
        t.contains(&want)
    })
    .await;
    // No line was lost or doubled across the rotation.
    let text = text_of(&buf);
    let seqs: Vec<u32> = text
        .lines()
        .filter_map(|l| l.strip_prefix("seq ").and_then(|n| n.parse().ok()))
        .collect();
    let expected: Vec<u32> = (1..=*seqs.last().unwrap()).collect();
    assert_eq!(seqs, expected, "seq lines across the rotation");
    assert_eq!(text.lines().filter(|l| l.len() == 999).count(), 11000);
    stop(child);
    ns.delete().await;
}

// ---------------------------------------------------------------------------------------------
// exec, attach, port-forward
// ---------------------------------------------------------------------------------------------

/// `kubectl exec` runs a command and returns its exit code; `kubectl exec -i` passes stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_exit_code_and_stdin() {
    let client = client().await;
    let ns = TestNs::new(&client, "exec").await;
    ns.create_pod(&busybox_pod(
        "sleeper",
        "exec sleep 3600",
        "Always",
        Some(0),
    ))
    .await;
    wait_running(&ns.pods(), "sleeper").await;

    let out = k(
        &ns.name,
        &[
            "exec",
            "sleeper",
            "--",
            "sh",
            "-c",
            "echo to-out; echo to-err >&2; exit 3",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "exit code; stderr: {}",
        out.stderr
    );
    assert_eq!(out.stdout, "to-out\n");
    assert!(out.stderr.contains("to-err"), "{}", out.stderr);

    assert_eq!(
        k_ok(
            &ns.name,
            &["exec", "sleeper", "-c", "main", "--", "echo", "hi"]
        ),
        "hi\n"
    );

    // stdin through -i
    let mut child = kubectl_spawn(
        &ns.name,
        &[
            "exec",
            "-i",
            "sleeper",
            "--",
            "sh",
            "-c",
            "tr a-z A-Z; echo done",
        ],
        Stdio::piped(),
        Stdio::piped(),
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello stdin\nsecond line\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "HELLO STDIN\nSECOND LINE\ndone\n"
    );

    // A command that does not exist: non-zero, with the runtime's message.
    let out = k(&ns.name, &["exec", "sleeper", "--", "/no/such/binary"]);
    assert!(!out.status.success());
    ns.delete().await;
}

/// `kubectl attach` sees what the container's main process writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_sees_output() {
    let client = client().await;
    let ns = TestNs::new(&client, "attach").await;
    ns.create_pod(&busybox_pod(
        "talker",
        "i=0; while true; do i=$((i+1)); echo \"talk $i\"; sleep 0.3; done",
        "Always",
        Some(0),
    ))
    .await;
    wait_running(&ns.pods(), "talker").await;
    let (child, buf) = k_spawn(&ns.name, &["attach", "talker", "-c", "main"]);
    wait_output(&buf, Duration::from_secs(30), "two `talk N` lines", |t| {
        t.lines().filter(|l| l.starts_with("talk ")).count() >= 2
    })
    .await;
    stop(child);
    ns.delete().await;
}

/// `kubectl port-forward` reaches busybox httpd in the pod (fetched through 127.0.0.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_reaches_httpd() {
    let client = client().await;
    let ns = TestNs::new(&client, "pf").await;
    ns.create_pod(&busybox_pod(
        "web",
        "mkdir -p /www && echo hello-through-port-forward > /www/index.html && exec httpd -f -p 8080 -h /www",
        "Always",
        Some(0),
    ))
    .await;
    wait_running(&ns.pods(), "web").await;
    let mut child = kubectl_spawn(
        &ns.name,
        &["port-forward", "--address", "127.0.0.1", "pod/web", ":8080"],
        Stdio::null(),
        Stdio::piped(),
    );
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                let port: u16 = rest.split_whitespace().next().unwrap().parse().unwrap();
                let _ = tx.send(port);
            }
        }
    });
    let port = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(p) => p,
        Err(_) => {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "kubectl port-forward did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    };
    let body = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        resp
    })
    .await
    .unwrap();
    stop(child);
    assert!(
        body.starts_with("HTTP/1.") && body.contains(" 200 "),
        "{body}"
    );
    assert!(body.contains("hello-through-port-forward"), "{body}");
    ns.delete().await;
}

// ---------------------------------------------------------------------------------------------
// security, stats, metrics
// ---------------------------------------------------------------------------------------------

/// Without credentials: 401; a ServiceAccount token without RBAC: 403; the cluster admin's
/// client certificate (verified against the client CA): served. A path that is not a container
/// of a pod on this node is a 404, whatever it looks like.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_requests_are_authenticated_and_authorized() {
    let client = client().await;
    let ns = TestNs::new(&client, "authz").await;

    let (code, body) = curl("/pods", &["-k"]);
    assert_eq!((code, body.as_str()), (401, "Unauthorized"));
    let (code, _) = curl("/containerLogs/kube-system/x/y", &["-k"]);
    assert_eq!(code, 401);
    let (code, _) = curl("/pods", &["-k", "-H", "Authorization: Bearer not-a-token"]);
    assert_eq!(code, 401);

    k_ok(&ns.name, &["create", "serviceaccount", "nobody"]);
    let token = k_ok(&ns.name, &["create", "token", "nobody"])
        .trim()
        .to_string();
    let bearer = format!("Authorization: Bearer {token}");
    let (code, body) = curl("/pods", &["-k", "-H", &bearer]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        format!(
            "Forbidden (user=system:serviceaccount:{}:nobody, verb=get, resource=nodes, subresource(s)=[pods proxy])\n",
            ns.name
        )
    );
    let (code, body) = curl("/stats/summary", &["-k", "-H", &bearer]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("subresource(s)=[stats]"), "{body}");
    let (code, _) = curl(
        "/exec/kube-system/x/y?command=id&output=1",
        &["-k", "-X", "POST", "-H", &bearer],
    );
    assert_eq!(code, 403);

    // RBAC for nodes/proxy makes the same token work.
    kubectl(&[
        "create",
        "clusterrole",
        &format!("{}-proxy", ns.name),
        "--verb=get",
        "--resource=nodes/proxy",
    ]);
    kubectl(&[
        "create",
        "clusterrolebinding",
        &format!("{}-proxy", ns.name),
        &format!("--clusterrole={}-proxy", ns.name),
        &format!("--serviceaccount={}:nobody", ns.name),
    ]);
    // (Denied answers are cached for 30 s, so a path not asked before is used: /healthz needs
    // nodes/healthz or nodes/proxy.)
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = curl("/healthz", &["-k", "-H", &bearer]);
        if code == 200 {
            assert_eq!(body, "ok");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "RBAC grant not honoured: {code} {body}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    kubectl(&[
        "delete",
        "clusterrolebinding",
        &format!("{}-proxy", ns.name),
    ]);
    kubectl(&["delete", "clusterrole", &format!("{}-proxy", ns.name)]);

    // x509: the admin's certificate; the serving certificate verifies against the cluster CA.
    let tls = admin_tls();
    let (code, body) = curl("/pods", &strs(&tls));
    assert_eq!(code, 200, "{body}");
    let (code, body) = curl("/healthz", &strs(&tls));
    assert_eq!((code, body.as_str()), (200, "ok"));
    for bad in [
        format!("/containerLogs/{}/no-such-pod/main", ns.name),
        "/containerLogs/kube-system/..%2F..%2F..%2Fetc%2Fpasswd/main".to_string(),
        "/containerLogs/../../etc/passwd/x".to_string(),
        "/containerLogs/default/x/..%2F..%2Fetc%2Fshadow".to_string(),
    ] {
        let (code, body) = curl(&bad, &strs(&tls));
        assert_eq!(code, 404, "{bad}: {body}");
        assert!(!body.contains("root:"), "{bad}: {body}");
    }
    ns.create_pod(&busybox_pod("one", "exec sleep 3600", "Always", Some(0)))
        .await;
    wait_running(&ns.pods(), "one").await;
    let (code, body) = curl(&format!("/containerLogs/{}/one/nope", ns.name), &strs(&tls));
    assert_eq!(
        (code, body.as_str()),
        (404, "container \"nope\" not found in pod \"one\"")
    );
    let (code, body) = curl(
        &format!("/containerLogs/{}/one/main?tailLines=-1", ns.name),
        &strs(&tls),
    );
    assert_eq!(
        (code, body.as_str()),
        (422, r#"{"message": "Invalid request."}"#)
    );
    let (code, body) = curl(
        &format!("/containerLogs/{}/one/main?previous=true", ns.name),
        &strs(&tls),
    );
    assert_eq!(
        (code, body.as_str()),
        (
            400,
            "previous terminated container \"main\" in pod \"one\" not found"
        )
    );
    ns.delete().await;
}

/// The value of the sample `series` (name and labels exactly as printed) in a metrics text.
fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `kubectl get --raw /api/v1/nodes/<node>/proxy/stats/summary` shows non-zero CPU and memory
/// for a running pod; `/metrics/resource` has the series metrics-server reads; `/metrics` the
/// kubelet's own; `/healthz` answers through the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_metrics_through_the_api_server() {
    let client = client().await;
    let env = env();
    let node = env.node_name();
    let ns = TestNs::new(&client, "stats").await;
    ns.create_pod(&busybox_pod(
        "busy",
        "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo warmed; exec sleep 3600",
        "Always",
        Some(0),
    ))
    .await;
    let pod = wait_running(&ns.pods(), "busy").await;
    wait_log_message(
        &cri_log_path(&pod, "main", 0),
        "warmed",
        Duration::from_secs(60),
    )
    .await;

    let raw = |p: &str| kubectl(&["get", "--raw", &format!("/api/v1/nodes/{node}/proxy{p}")]);
    // Two scrapes so that rates exist.
    let _ = raw("/stats/summary");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let summary: serde_json::Value = serde_json::from_str(&raw("/stats/summary")).unwrap();
    assert_eq!(summary["node"]["nodeName"], node);
    assert!(
        summary["node"]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{}",
        summary["node"]
    );
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{}",
        summary["node"]
    );
    let p = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "busy" && p["podRef"]["namespace"] == ns.name.as_str())
        .unwrap_or_else(|| panic!("pod busy missing from the summary: {summary}"));
    assert_eq!(p["podRef"]["uid"], uid(&pod).as_str());
    assert!(
        p["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0,
        "{p}"
    );
    assert!(
        p["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0,
        "{p}"
    );
    let c = &p["containers"][0];
    assert_eq!(c["name"], "main");
    assert!(
        c["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap_or(0) > 0,
        "{c}"
    );
    assert!(
        c["memory"]["workingSetBytes"].as_u64().unwrap_or(0) > 0,
        "{c}"
    );

    let res = raw("/metrics/resource");
    let series = format!(
        "container_cpu_usage_seconds_total{{container=\"main\",namespace=\"{}\",pod=\"busy\"}} ",
        ns.name
    );
    assert!(res.contains(&series), "{res}");
    assert!(res.contains("node_memory_working_set_bytes "), "{res}");
    assert!(res.contains("pod_memory_working_set_bytes{"), "{res}");
    assert!(res.contains("resource_scrape_error 0"), "{res}");

    // The SLI is taken from the first watch event after the status write that made every
    // container Running (the write's own event may arrive before its response, as with the Go
    // kubelet): a label change makes one.
    kubectl(&["-n", &ns.name, "label", "pod", "busy", "observed=yes"]);
    let mut m = raw("/metrics");
    for _ in 0..40 {
        if metric_value(&m, "kubelet_pod_start_sli_duration_seconds_count").unwrap_or(0.0) >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        m = raw("/metrics");
    }
    assert!(
        m.contains(&format!("kubelet_node_name{{node=\"{node}\"}} 1")),
        "{m}"
    );
    assert!(m.contains("kubelet_running_pods "), "{m}");
    assert!(
        m.contains("kubelet_running_containers{container_state=\"running\"}"),
        "{m}"
    );
    assert!(
        m.contains("kubelet_runtime_operations_total{operation_type=\"list_containers\"}"),
        "{m}"
    );
    assert!(m.contains("kubelet_http_requests_total{"), "{m}");
    // The pod start histograms (Go's names): the pod above started through this kubelet and
    // was then seen Running through the watch.
    for series in [
        "kubelet_pod_start_total_duration_seconds_count",
        "kubelet_pod_start_sli_duration_seconds_count",
        "kubelet_pod_start_duration_seconds_count",
        "kubelet_pod_worker_start_duration_seconds_count",
        "kubelet_pod_worker_duration_seconds_count{operation_type=\"create\"}",
    ] {
        let n = metric_value(&m, series).unwrap_or_else(|| panic!("{series} missing:\n{m}"));
        assert!(n >= 1.0, "{series} = {n}");
    }
    let sli = metric_value(&m, "kubelet_pod_start_sli_duration_seconds_sum").unwrap();
    let total = metric_value(&m, "kubelet_pod_start_total_duration_seconds_sum").unwrap();
    assert!(sli > 0.0 && sli <= total, "sli {sli} total {total}");

    assert_eq!(raw("/healthz"), "ok");
    let pods: serde_json::Value = serde_json::from_str(&raw("/pods")).unwrap();
    assert!(
        pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "busy"
                && p["metadata"]["namespace"] == ns.name.as_str())
    );
    ns.delete().await;
}

/// Secret values, ConfigMap values and literal env values never reach deckhand's log: a pod
/// that takes each as env and as files (and one whose secret key is missing, which fails with
/// CreateContainerConfigError and is logged) runs, and deckhand's log of that time holds none of
/// the values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_and_env_values_never_reach_deckhands_log() {
    let client = client().await;
    let ns = TestNs::new(&client, "nolog").await;
    let from = std::fs::metadata(env().get("DECKHAND_LOG")).map_or(0, |m| m.len());
    let tag = format!("{:08x}", rand::random::<u32>());
    let secret_value = format!("s3cret-{tag}");
    let config_value = format!("cfg-{tag}");
    let literal_value = format!("literal-{tag}");
    k_ok(
        &ns.name,
        &[
            "create",
            "secret",
            "generic",
            "creds",
            &format!("--from-literal=password={secret_value}"),
        ],
    );
    k_ok(
        &ns.name,
        &[
            "create",
            "configmap",
            "conf",
            &format!("--from-literal=setting={config_value}"),
        ],
    );
    let pod = |name: &str, secret_key: &str| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": "busybox",
                    "command": ["sh", "-c", "cat /etc/creds/password /etc/conf/setting; exec sleep 3600"],
                    "env": [
                        {"name": "LITERAL", "value": literal_value},
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": secret_key}}},
                        {"name": "SETTING", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "setting"}}},
                    ],
                    "volumeMounts": [
                        {"name": "creds", "mountPath": "/etc/creds"},
                        {"name": "conf", "mountPath": "/etc/conf"},
                    ],
                }],
                "volumes": [
                    {"name": "creds", "secret": {"secretName": "creds"}},
                    {"name": "conf", "configMap": {"name": "conf"}},
                ],
            },
        }))
        .unwrap()
    };
    ns.create_pod(&pod("uses", "password")).await;
    ns.create_pod(&pod("missing-key", "nope")).await;
    let pods = ns.pods();
    wait_running(&pods, "uses").await;
    wait_pod(&pods, "missing-key", "CreateContainerConfigError", |p| {
        waiting_reason(p, "main") == Some("CreateContainerConfigError")
    })
    .await;
    let out = k_ok(
        &ns.name,
        &[
            "exec",
            "uses",
            "--",
            "sh",
            "-c",
            "echo $PASSWORD $SETTING $LITERAL",
        ],
    );
    assert_eq!(
        out.trim(),
        format!("{secret_value} {config_value} {literal_value}")
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = std::fs::read(env().get("DECKHAND_LOG")).unwrap_or_default();
    let log = String::from_utf8_lossy(&log[(from as usize).min(log.len())..]).into_owned();
    assert!(
        log.contains(&ns.name),
        "deckhand's log does not cover the test's pods"
    );
    for value in [&secret_value, &config_value, &literal_value] {
        let hits: Vec<&str> = log.lines().filter(|l| l.contains(value.as_str())).collect();
        assert!(
            hits.is_empty(),
            "{value} in deckhand's log:\n{}",
            hits.join("\n")
        );
    }
    ns.delete().await;
}

/// The node's own credentials (the kubeconfig deckhand joined with) read only what the Node
/// authorizer lets a kubelet read: the Secret of a pod bound to this node, not a Secret no pod of
/// the node uses, nor the Secrets of a namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_credentials_read_only_the_secrets_of_its_pods() {
    let client = client().await;
    let ns = TestNs::new(&client, "nodeauthz").await;
    k_ok(
        &ns.name,
        &["create", "secret", "generic", "used", "--from-literal=k=v"],
    );
    k_ok(
        &ns.name,
        &[
            "create",
            "secret",
            "generic",
            "unused",
            "--from-literal=k=v",
        ],
    );
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "user"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox",
                            "command": ["sh", "-c", "exec sleep 3600"],
                            "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
            "volumes": [{"name": "s", "secret": {"secretName": "used"}}],
        },
    }))
    .unwrap();
    ns.create_pod(&pod).await;
    wait_running(&ns.pods(), "user").await;
    let node_kubeconfig = env().get("DECKHAND_KUBECONFIG").to_string();
    let as_node = |args: &[&str]| {
        Command::new(env().kubectl_bin())
            .args(["--kubeconfig", &node_kubeconfig, "-n", &ns.name])
            .args(args)
            .output()
            .expect("running kubectl")
    };
    let who = as_node(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&who.stdout),
        format!("system:node:{}", env().node_name()),
        "{}",
        String::from_utf8_lossy(&who.stderr)
    );
    let used = as_node(&["get", "secret", "used", "-o", "name"]);
    assert!(
        used.status.success(),
        "the node cannot read its pod's secret: {}",
        String::from_utf8_lossy(&used.stderr)
    );
    for args in [&["get", "secret", "unused"][..], &["get", "secrets"][..]] {
        let out = as_node(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Forbidden"),
            "kubectl {args:?} as the node: {}{err}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    ns.delete().await;
}
