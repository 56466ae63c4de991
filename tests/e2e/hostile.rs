//! End-to-end tests of hostile workloads (issue 14): a fork bomb, a log flood, and a hundred
//! streaming sessions at once. Each checks that the harm stays inside the pod that causes it and
//! that deckhand itself (its process, memory, file descriptors and threads) is unchanged.
//!
//! The harness's KubeletConfiguration (hack/lib/node.sh) sets `podPidsLimit: 1024` and leaves
//! the container log defaults (`containerLogMaxSize: 10Mi`, `containerLogMaxFiles: 5`).

use crate::common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `containerLogMaxFiles` of the harness (the Go kubelet's default): the live file and four
/// rotated ones.
const LOG_MAX_FILES: usize = 5;

/// The pod cgroup directory of `uid` in the cgroup v1 `pids` hierarchy or the v2 tree (either
/// driver's name: `.../pod<uid>` or `.../kubepods-<qos>-pod<uid_>.slice`), below `kubepods`.
fn pod_pids_cgroup(uid: &str) -> Option<PathBuf> {
    let names = [
        format!("pod{uid}"),
        format!("pod{}.slice", uid.replace('-', "_")),
    ];
    fn walk(dir: &Path, depth: usize, names: &[String]) -> Option<PathBuf> {
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            let n = e.file_name().to_string_lossy().into_owned();
            if names
                .iter()
                .any(|want| n == *want || n.ends_with(&format!("-{want}")))
            {
                return Some(p);
            }
            if depth > 0 {
                if let Some(found) = walk(&p, depth - 1, names) {
                    return Some(found);
                }
            }
        }
        None
    }
    ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"]
        .iter()
        .flat_map(|r| {
            [
                Path::new(r).join("kubepods"),
                Path::new(r).join("kubepods.slice"),
            ]
        })
        .filter(|k| k.is_dir())
        .find_map(|k| walk(&k, 2, &names))
}

/// What a process's open file descriptors point at, counted by kind (sockets and pipes by their
/// inode-free names), for failure messages.
fn fd_summary(pid: i32) -> String {
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let target = std::fs::read_link(e.path())
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        let kind = target.split(":[").next().unwrap_or_default().to_string();
        *kinds.entry(kind).or_default() += 1;
    }
    format!("{kinds:?}")
}

fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .trim()
        .to_string()
}

/// Open file descriptors and threads of a process.
fn fds_and_tasks(pid: i32) -> (usize, usize) {
    let count = |d: String| std::fs::read_dir(d).map(|r| r.count()).unwrap_or(0);
    (
        count(format!("/proc/{pid}/fd")),
        count(format!("/proc/{pid}/task")),
    )
}

/// A fork bomb (a subshell that forks sleepers until the kernel refuses) stays inside its pod:
/// the pod cgroup's `pids.max` is the configured `podPidsLimit`, the bomb stops at it with
/// "can't fork", another pod still starts and runs commands, the node stays Ready, deckhand
/// keeps running, and deleting the bomb's pod removes its ~1000 processes and its cgroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stops_at_the_pod_pids_limit() {
    let client = client().await;
    let ns = TestNs::new(&client, "forkbomb").await;
    let api = ns.pods();
    let deckhand = deckhand_pid();
    // the subshell dies at the first refused fork; its sleepers stay, children of PID 1
    let bomb = ns
        .create_pod(&busybox_pod(
            "bomb",
            "(while :; do sleep 3600 & done); echo bomb stopped; exec sleep 3600",
            "Always",
            Some(1),
        ))
        .await;
    let bomb_uid = uid(&bomb);
    let bomb = wait_running(&api, "bomb").await;
    let log = cri_log_path(&bomb, "main", 0);
    let lines = wait_log_message(&log, "bomb stopped", Duration::from_secs(60)).await;
    assert!(
        lines.iter().any(|l| l.message.contains("can't fork")),
        "the bomb stopped without a refused fork: {:?}",
        lines.iter().map(|l| &l.message).collect::<Vec<_>>()
    );
    let cg = pod_pids_cgroup(&bomb_uid).expect("the bomb's pod cgroup in the pids hierarchy");
    let max: u64 = read_trimmed(&cg.join("pids.max"))
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "pids.max of {} is not a number (podPidsLimit not applied)",
                cg.display()
            )
        });
    let current: u64 = read_trimmed(&cg.join("pids.current")).parse().unwrap();
    println!(
        "[{}] bomb pod: pids.max {max}, pids.current {current}",
        ns.name
    );
    assert!(
        current <= max,
        "pids.current {current} above pids.max {max}"
    );
    assert!(
        current + 16 >= max,
        "the bomb stopped at {current} tasks, well below the limit {max}: something else refused it"
    );

    // the rest of the node is unharmed
    ns.create_pod(&busybox_pod(
        "neighbour",
        "exec sleep 3600",
        "Always",
        Some(0),
    ))
    .await;
    wait_running(&api, "neighbour").await;
    let out = kubectl_raw(&[
        "-n",
        &ns.name,
        "exec",
        "neighbour",
        "--",
        "sh",
        "-c",
        "echo $((6*7))",
    ]);
    assert!(
        out.status.success(),
        "exec in the neighbour: {}",
        out.stderr
    );
    assert_eq!(out.stdout.trim(), "42");
    wait_node_ready(&client, Duration::from_secs(10)).await;
    assert_eq!(
        deckhand_pid(),
        deckhand,
        "deckhand restarted during the fork bomb"
    );

    // deleting the bomb ends all of its processes and removes its cgroup
    let t0 = Instant::now();
    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "pod",
        "bomb",
        "--wait=true",
        "--timeout=60s",
    ]);
    println!("[{}] bomb pod deleted in {:?}", ns.name, t0.elapsed());
    poll(
        Duration::from_secs(30),
        Duration::from_millis(250),
        "the bomb's pod cgroup removed",
        || pod_pids_cgroup(&bomb_uid).is_none().then_some(()),
    )
    .await;
    assert!(
        containers_of(&bomb_uid).is_empty(),
        "containers of the bomb left in containerd"
    );
    ns.delete().await;
}

/// The rotated files of a container's log directory (`0.log.<time>[.gz]`), without the `.tmp`
/// file of a compression in progress.
fn log_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A container that writes its log as fast as it can (about 50 MB/s through containerd here) for
/// 35 s: rotation keeps at most `containerLogMaxFiles` files at every moment (sampled every
/// 0.5 s), older rotated files are compressed, `kubectl logs --tail` answers during the flood,
/// deckhand's memory stays flat (the files are streamed, never read whole), and deleting the
/// pod removes its log directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_is_rotated_within_the_file_count_and_deckhands_memory_stays_flat() {
    let client = client().await;
    let ns = TestNs::new(&client, "logflood").await;
    let api = ns.pods();
    let deckhand = deckhand_pid();
    let rss0 = rss_kib(deckhand);
    let pod = ns
        .create_pod(&busybox_pod(
            "flood",
            "pad=$(printf '%0199d' 0); exec yes \"flood $pad\"",
            "Always",
            Some(0),
        ))
        .await;
    let pod_uid = uid(&pod);
    let pod = wait_running(&api, "flood").await;
    let dir = cri_log_path(&pod, "main", 0)
        .parent()
        .unwrap()
        .to_path_buf();
    let pod_log_dir = dir.parent().unwrap().to_path_buf();

    let t0 = Instant::now();
    let (mut most_files, mut rss_max, mut gz) = (0, rss0, 0);
    let mut tail_ok = false;
    while t0.elapsed() < Duration::from_secs(35) {
        let files = log_files(&dir);
        assert!(
            files.len() <= LOG_MAX_FILES,
            "{} log files after {:?} (containerLogMaxFiles {LOG_MAX_FILES}): {files:?}",
            files.len(),
            t0.elapsed()
        );
        most_files = most_files.max(files.len());
        gz = gz.max(files.iter().filter(|f| f.ends_with(".gz")).count());
        rss_max = rss_max.max(rss_kib(deckhand));
        if !tail_ok && t0.elapsed() > Duration::from_secs(12) {
            let out = kubectl_raw(&["-n", &ns.name, "logs", "flood", "--tail=1"]);
            assert!(
                out.status.success(),
                "kubectl logs during the flood: {}",
                out.stderr
            );
            assert!(out.stdout.starts_with("flood 000"), "{:?}", out.stdout);
            tail_ok = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let written: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "[{}] flood: at most {most_files} files, {gz} compressed, {} MiB on disk at the end; deckhand RSS {} -> max {} KiB",
        ns.name,
        written >> 20,
        rss0,
        rss_max
    );
    assert!(gz >= 1, "no rotated file was compressed in 35 s of flood");
    assert!(
        most_files >= 3,
        "rotation did not happen: at most {most_files} files"
    );
    assert!(
        rss_max <= rss0 + 16 * 1024,
        "deckhand's RSS grew from {rss0} KiB to {rss_max} KiB during the flood"
    );
    assert_eq!(
        deckhand_pid(),
        deckhand,
        "deckhand restarted during the flood"
    );

    kubectl(&[
        "-n",
        &ns.name,
        "delete",
        "pod",
        "flood",
        "--wait=true",
        "--timeout=60s",
    ]);
    poll(
        Duration::from_secs(30),
        Duration::from_millis(250),
        "the flood pod's log directory removed",
        || (!pod_log_dir.exists()).then_some(()),
    )
    .await;
    assert!(containers_of(&pod_uid).is_empty());
    ns.delete().await;
}

/// A kubectl session kept open: `logs -f` or `exec -i ... cat`; `ready` once its first output
/// arrived.
struct Session {
    child: Child,
    ready: Arc<AtomicBool>,
}

/// The exec session: `ready` once started, then `cat` echoes what it is sent.
const EXEC_CAT: &[&str] = &[
    "exec",
    "-i",
    "talker",
    "--",
    "sh",
    "-c",
    "echo ready; exec cat",
];

fn open_session(ns: &str, args: &[&str], marker: &'static str) -> Session {
    let mut child = kubectl_spawn(ns, args, Stdio::piped(), Stdio::null());
    let ready = Arc::new(AtomicBool::new(false));
    let out = child.stdout.take().unwrap();
    let r = ready.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            match line {
                Ok(l) if l.contains(marker) => r.store(true, Ordering::SeqCst),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    Session { child, ready }
}

/// 50 `kubectl logs -f` and 50 `kubectl exec -i` sessions open at once, then closed by killing
/// the clients: every session works while they are open, and afterwards deckhand's open file
/// descriptors and threads return to where they were, and no exec'd process is left in the
/// container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_streaming_sessions_leave_no_descriptor_or_thread_behind() {
    let client = client().await;
    let ns = TestNs::new(&client, "sessions").await;
    let api = ns.pods();
    let deckhand = deckhand_pid();
    ns.create_pod(&busybox_pod(
        "talker",
        "while :; do echo tick; sleep 1; done",
        "Always",
        Some(0),
    ))
    .await;
    wait_running(&api, "talker").await;
    // one session of each kind first, so that connections deckhand keeps anyway are counted in
    // the baseline
    for mut s in [
        open_session(&ns.name, &["logs", "-f", "talker"], "tick"),
        open_session(&ns.name, EXEC_CAT, "ready"),
    ] {
        poll(
            Duration::from_secs(30),
            Duration::from_millis(100),
            "a first session",
            || s.ready.load(Ordering::SeqCst).then_some(()),
        )
        .await;
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    // idle blocking threads exit after 1 s (deckhand's BLOCKING_THREAD_KEEP_ALIVE)
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (fd0, task0) = fds_and_tasks(deckhand);

    let t0 = Instant::now();
    let mut sessions = Vec::new();
    for i in 0..100 {
        let s = if i % 2 == 0 {
            open_session(&ns.name, &["logs", "-f", "talker", "--tail=1"], "tick")
        } else {
            open_session(&ns.name, EXEC_CAT, "ready")
        };
        sessions.push(s);
    }
    poll(
        Duration::from_secs(120),
        Duration::from_millis(250),
        "100 sessions answering",
        || {
            sessions
                .iter()
                .all(|s| s.ready.load(Ordering::SeqCst))
                .then_some(())
        },
    )
    .await;
    // the exec sessions echo what they are sent
    for s in sessions.iter_mut().skip(1).step_by(2) {
        s.child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"hello\n")
            .unwrap();
    }
    let (fd1, task1) = fds_and_tasks(deckhand);
    let cats = kubectl(&[
        "-n",
        &ns.name,
        "exec",
        "talker",
        "--",
        "sh",
        "-c",
        "ps -o comm | grep -c '^cat$' || true",
    ]);
    println!(
        "[{}] 100 sessions open after {:?}: deckhand fds {fd0} -> {fd1}, threads {task0} -> {task1}; cat processes in the container: {}",
        ns.name,
        t0.elapsed(),
        cats.trim()
    );
    assert_eq!(cats.trim(), "50", "one cat per exec session");

    for s in sessions.iter_mut() {
        let _ = s.child.kill();
    }
    for s in sessions.iter_mut() {
        let _ = s.child.wait();
    }
    // Everything is released at once; threads within a few seconds (the blocking pool's
    // keep-alive). A session costs no API request (deckhand finds the pod in its pod manager,
    // as the Go kubelet does; it used to GET it, which left up to ~25 pooled API connections
    // open for their 90 s idle timeout after 100 sessions).
    let t1 = Instant::now();
    let (fd, task) = poll_with(
        Duration::from_secs(15),
        Duration::from_millis(500),
        || {
            format!(
                "deckhand's fds and threads back to their baseline (fds {fd0}, threads {task0}); now {:?}: {}",
                fds_and_tasks(deckhand),
                fd_summary(deckhand)
            )
        },
        || {
            let (fd, task) = fds_and_tasks(deckhand);
            (fd <= fd0 + 2 && task <= task0 + 2).then_some((fd, task))
        },
    )
    .await;
    println!(
        "[{}] {:?} after closing: fds {fd0} -> {fd}, threads {task0} -> {task}",
        ns.name,
        t1.elapsed()
    );
    poll(
        Duration::from_secs(30),
        Duration::from_millis(500),
        "no cat left in the container",
        || {
            let n = kubectl(&[
                "-n",
                &ns.name,
                "exec",
                "talker",
                "--",
                "sh",
                "-c",
                "ps -o comm | grep -c '^cat$' || true",
            ]);
            (n.trim() == "0").then_some(n)
        },
    )
    .await;
    assert_eq!(
        deckhand_pid(),
        deckhand,
        "deckhand restarted during the sessions"
    );
    ns.delete().await;
}
