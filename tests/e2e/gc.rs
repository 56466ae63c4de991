//! End-to-end tests of garbage collection (issue 7) against the real local cluster
//! (hack/local-up.sh): container GC (k/k `kuberuntime_gc.go`, every minute) keeps one dead
//! instance per container of a crash-looping pod, and removes the dead containers, sandboxes and
//! log directory of a pod deckhand does not know; image GC (k/k `image_gc_manager.go`) removes an
//! unused image once the image filesystem is over the high threshold, and keeps in-use and
//! pinned (sandbox) images.
//!
//! The image test restarts deckhand with thresholds below the machine's disk usage
//! (`--image-gc-high-threshold=1 --image-gc-low-threshold=0`), a short
//! `--minimum-image-ttl-duration` and deckhand's test-only `--image-gc-period`, and restores the
//! original command line afterwards, whatever happened. With these thresholds deckhand deletes
//! every unused image of the node, as the Go kubelet would; the test pulls the tagged images
//! that were there before back again.

use crate::common::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Container GC runs every minute (k/k `ContainerGCPeriod`); one period plus slack.
const GC_WAIT: Duration = Duration::from_secs(80);

fn count_of(uid: &str) -> usize {
    containers_of(uid).len()
}

/// A crash-looping pod (restartPolicy Always, exits at once) keeps at most its newest dead
/// container (plus one just created) once container GC has run, and its status keeps
/// `lastState.terminated` and the restart count.
#[tokio::test]
async fn crash_looping_pod_keeps_one_dead_container() {
    // The image test restarts deckhand (which restarts the GC period): not meanwhile.
    let _shared = DECKHAND_DISRUPTION.read().await;
    let client = client().await;
    let ns = TestNs::new(&client, "gc-crash").await;
    let pods = ns.pods();
    ns.create_pod(&busybox_pod(
        "crasher",
        "echo crash; exit 1",
        "Always",
        Some(1),
    ))
    .await;
    let pod = wait_running_or_crashing(&pods, "crasher").await;
    let uid = uid(&pod);
    // Restarts at about 0, 10, 30, 70 s: wait until four instances were created, then for a
    // collection to leave one dead instance (and at most one new one).
    let p = watch_pod_until(
        &pods,
        "crasher",
        Duration::from_secs(150),
        "restartCount >= 3",
        |p| container_status(p, "main").is_some_and(|c| c.restart_count >= 3),
    )
    .await;
    let restarts = container_status(&p, "main").unwrap().restart_count;
    println!(
        "[{}] crasher restarted {restarts} times; {} containers in the runtime",
        ns.name,
        count_of(&uid)
    );
    poll_with(
        GC_WAIT,
        Duration::from_secs(2),
        || {
            format!(
                "the crash-looping pod still has more than 2 containers\n{}\n{}",
                crictl(&[
                    "ps",
                    "-a",
                    "--label",
                    &format!("io.kubernetes.pod.uid={uid}")
                ]),
                deckhand_log_tail("garbage", 10)
            )
        },
        || (count_of(&uid) <= 2).then_some(()),
    )
    .await;
    // Status still has the last termination and the restart count did not go back.
    let p = pods.get("crasher").await.unwrap();
    let cs = container_status(&p, "main").unwrap();
    assert!(cs.restart_count >= restarts, "{cs:?}");
    let has_last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 1);
    let terminated_now = cs
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some();
    assert!(
        has_last || terminated_now,
        "no terminated state left in {cs:?}"
    );
    // And the next restart still counts up from the kept instance.
    let next = restarts + 1;
    watch_pod_until(
        &pods,
        "crasher",
        Duration::from_secs(200),
        "one more restart",
        |p| container_status(p, "main").is_some_and(|c| c.restart_count >= next),
    )
    .await;
    ns.delete().await;
}

async fn wait_running_or_crashing(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    name: &str,
) -> k8s_openapi::api::core::v1::Pod {
    wait_pod(pods, name, "a container started", |p| {
        container_status(p, "main").is_some_and(|c| c.container_id.is_some())
    })
    .await
}

/// Writes `value` as JSON into `dir/name`.
fn write_json(dir: &Path, name: &str, value: serde_json::Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    p
}

/// Runtime objects of a pod deckhand does not know (made with crictl, as if the pod had been
/// deleted while deckhand was down and its worker never ran): its exited container, its stopped
/// sandbox and its log directory are removed by container GC.
#[tokio::test]
async fn objects_of_unknown_pods_are_collected() {
    let _shared = DECKHAND_DISRUPTION.read().await;
    let fake_uid = format!("e2e-gc-{:08x}", rand::random::<u32>());
    let ns = "e2e-gc-orphan";
    let name = format!("orphan-{}", &fake_uid[7..]);
    let log_dir = PathBuf::from("/var/log/pods").join(format!("{ns}_{name}_{fake_uid}"));
    let tmp = std::env::temp_dir().join(format!("deckhand-e2e-gc-{fake_uid}"));
    std::fs::create_dir_all(&tmp).unwrap();
    let labels = serde_json::json!({
        "io.kubernetes.pod.uid": fake_uid,
        "io.kubernetes.pod.name": name,
        "io.kubernetes.pod.namespace": ns,
    });
    let sandbox = write_json(
        &tmp,
        "sandbox.json",
        serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": fake_uid, "attempt": 0},
            "labels": labels,
            "log_directory": log_dir,
            "linux": {},
        }),
    );
    let mut clabels = labels.clone();
    clabels["io.kubernetes.container.name"] = "c".into();
    let container = write_json(
        &tmp,
        "container.json",
        serde_json::json!({
            "metadata": {"name": "c", "attempt": 0},
            "image": {"image": "docker.io/library/busybox:latest"},
            "command": ["sh", "-c", "echo orphan; exit 0"],
            "labels": clabels,
            "log_path": "c/0.log",
            "linux": {},
        }),
    );
    let sandbox_s = sandbox.to_string_lossy().to_string();
    let container_s = container.to_string_lossy().to_string();
    let sid = crictl(&["runp", &sandbox_s]).trim().to_string();
    // deckhand's orphan sweep stops the sandbox of this unknown pod within seconds, as it should,
    // and may do so before crictl creates or starts the container (runc then finds no sandbox
    // process: "lstat /proc/<pid>/ns/ipc", seen in README command 2). The container is then
    // never started; its sandbox must be stopped or gone, and the collection below is the test.
    let started = try_crictl(&["create", &sid, &container_s, &sandbox_s])
        .map(|out| out.trim().to_string())
        .and_then(|cid| try_crictl(&["start", &cid]).map(|_| cid));
    match started {
        Ok(cid) => {
            poll(
                Duration::from_secs(30),
                Duration::from_millis(500),
                "the orphan container to exit",
                || {
                    // deckhand's container GC may remove the exited container of this unknown
                    // pod before the next poll sees it exited (as the Go kubelet's would): gone
                    // counts as exited.
                    let Ok(out) = try_crictl(&["inspect", "-o", "json", &cid]) else {
                        return (!containers_of(&fake_uid).contains(&cid)).then_some(());
                    };
                    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
                    (v["status"]["state"].as_str() == Some("CONTAINER_EXITED")).then_some(())
                },
            )
            .await;
        }
        Err(e) => {
            let state = try_crictl(&["inspectp", "-o", "json", &sid])
                .ok()
                .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
                .and_then(|v| v["status"]["state"].as_str().map(String::from));
            assert!(
                state.as_deref() != Some("SANDBOX_READY"),
                "the container of a ready sandbox could not be made or started: {e}"
            );
            println!(
                "the orphan sweep stopped sandbox {sid} before its container started ({state:?})"
            );
        }
    }
    // deckhand's orphan sweep may already have stopped and removed the sandbox of this unknown
    // pod (with its container): then there is nothing left to stop
    let _ = try_crictl(&["stopp", &sid]);
    std::fs::create_dir_all(log_dir.join("c")).unwrap();
    println!("made orphan sandbox {sid}, log dir {}", log_dir.display());
    poll_with(
        GC_WAIT,
        Duration::from_secs(2),
        || {
            format!(
                "the unknown pod's objects are still there: containers {:?}, sandboxes {:?}, log dir exists {}",
                containers_of(&fake_uid),
                sandboxes_of(&fake_uid),
                log_dir.exists()
            )
        },
        || {
            (containers_of(&fake_uid).is_empty()
                && sandboxes_of(&fake_uid).is_empty()
                && !log_dir.exists())
            .then_some(())
        },
    )
    .await;
    let _ = std::fs::remove_dir_all(&tmp);
}

// ---------------------------------------------------------------------------------------------
// image GC
// ---------------------------------------------------------------------------------------------

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (id, tags) of every image the runtime holds.
fn images() -> Vec<(String, Vec<String>)> {
    let v: serde_json::Value = serde_json::from_str(&crictl(&["images", "-o", "json"])).unwrap();
    v["images"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|i| {
            let tags = i["repoTags"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            (i["id"].as_str().unwrap_or("").to_string(), tags)
        })
        .collect()
}

fn has_tag(tag: &str) -> bool {
    images()
        .iter()
        .any(|(_, tags)| tags.iter().any(|t| t == tag))
}

/// Restores deckhand's command line and the node's tagged images, however the test ends.
struct Restore {
    restart: Option<HarnessRestart>,
    tags_before: BTreeSet<String>,
    skip_tag: String,
    done: bool,
}

impl Restore {
    fn restore(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if let Some(r) = self.restart.take() {
            let out = r.run();
            println!(
                "deckhand restored:\n{}",
                out.text
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let now: BTreeSet<String> = images().into_iter().flat_map(|(_, t)| t).collect();
        for tag in self.tags_before.difference(&now) {
            if *tag == self.skip_tag {
                continue;
            }
            let env = env();
            let out = Command::new(env.crictl_bin())
                .arg("--runtime-endpoint")
                .arg(env.get("CRI_ENDPOINT"))
                .args(["pull", tag])
                .output();
            println!("re-pulled {tag}: {:?}", out.map(|o| o.status));
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        self.restore();
    }
}

/// deckhand restarted with an image GC high threshold below the disk usage deletes an unused
/// image pulled for the test once it is older than the minimum age, keeps the sandbox image
/// (pinned) and the images containers use, and reports FreeDiskSpaceFailed on the Node (the
/// other unused images cannot free the whole disk).
#[tokio::test]
async fn unused_image_is_collected_over_the_high_threshold() {
    let env = env();
    let registry = env.get("REGISTRY").to_string();
    let sandbox_image = env.get("SANDBOX_IMAGE").to_string();
    let kube_proxy_image = env.get("KUBE_PROXY_IMAGE").to_string();
    let client = client().await;
    let ns = TestNs::new(&client, "gc-image").await;
    let pods = ns.pods();

    // 1. A distinct image (its own config digest, busybox's layers) in the local registry.
    let tag = format!("{:08x}", rand::random::<u32>());
    let repo = format!("{registry}/e2e-gc");
    let image_ref = format!("{repo}:{tag}");
    let tmp = std::env::temp_dir().join(format!("deckhand-e2e-gc-image-{tag}"));
    std::fs::create_dir_all(&tmp).unwrap();
    let layout = format!("oci:{}:img", tmp.join("oci").display());
    run_ok(Command::new("skopeo").args([
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        &format!("docker://{registry}/busybox:latest"),
        &layout,
    ]));
    run_ok(Command::new("umoci").args([
        "config",
        "--image",
        &format!("{}:img", tmp.join("oci").display()),
        "--config.label",
        &format!("deckhand-e2e-gc={tag}"),
    ]));
    run_ok(Command::new("skopeo").args([
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        &layout,
        &format!("docker://{image_ref}"),
    ]));
    let _ = std::fs::remove_dir_all(&tmp);

    // 2. An in-use image: a running busybox pod.
    ns.create_pod(&busybox_pod("user", "sleep 3600", "Always", Some(1)))
        .await;
    wait_running(&pods, "user").await;

    // 3. deckhand restarted with thresholds below the disk usage, under the harness lock.
    let _exclusive = DECKHAND_DISRUPTION.write().await;
    let _lock = lock_harness(Duration::from_secs(600)).await;
    let pid = deckhand_pid();
    let mut restore = Restore {
        restart: Some(HarnessRestart::capture(pid)),
        tags_before: images().into_iter().flat_map(|(_, t)| t).collect(),
        skip_tag: image_ref.clone(),
        done: false,
    };
    let started = std::time::SystemTime::now();
    HarnessRestart::capture(pid).run_with_args(
        "--image-gc-high-threshold=1 --image-gc-low-threshold=0 --minimum-image-ttl-duration=20s --image-gc-period=5s",
    );
    wait_node_ready(&client, Duration::from_secs(60)).await;
    let gc_pid = deckhand_pid();
    // Pulled after the restart: first detected by this deckhand, so the minimum age counts.
    crictl(&["pull", &image_ref]);
    let image_id = images()
        .into_iter()
        .find(|(_, tags)| tags.contains(&image_ref))
        .map(|(id, _)| id)
        .expect("the pulled image is listed");
    let pulled_at = std::time::Instant::now();
    poll_with(
        Duration::from_secs(90),
        Duration::from_secs(1),
        || {
            format!(
                "{image_ref} was not collected\n{}",
                deckhand_log_tail("image", 15)
            )
        },
        || (!has_tag(&image_ref)).then_some(()),
    )
    .await;
    let age = pulled_at.elapsed();
    println!("{image_ref} ({image_id}) collected {age:?} after the pull");
    assert_eq!(
        deckhand_pid(),
        gc_pid,
        "deckhand was restarted by someone else during the test: the result says nothing"
    );
    let removed = deckhand_log_tail("Removing image to free bytes", 50);
    assert!(
        removed.contains(&image_id),
        "deckhand's log does not say it removed {image_id}:\n{removed}"
    );
    assert!(
        age >= Duration::from_secs(15),
        "collected after {age:?}, before the 20s minimum age (first detection is up to 5s after the pull)"
    );
    assert!(has_tag(&sandbox_image), "the sandbox image was collected");
    assert!(
        has_tag("docker.io/library/busybox:latest"),
        "an in-use image was collected"
    );
    assert!(
        has_tag(&kube_proxy_image),
        "kube-proxy's in-use image was collected"
    );
    wait_running(&pods, "user").await;

    // 4. FreeDiskSpaceFailed on the Node, with the Go kubelet's message.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let ev = poll_events(&events, started).await;
    assert!(
        ev.message
            .as_deref()
            .unwrap_or("")
            .starts_with("Insufficient free disk space on the node's image filesystem ("),
        "{ev:?}"
    );
    assert_eq!(ev.type_.as_deref(), Some("Warning"));

    restore.restore();
    assert!(has_tag("docker.io/library/busybox:latest"));
    ns.delete().await;
}

async fn poll_events(events: &Api<Event>, since: std::time::SystemTime) -> Event {
    let since_s = since
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let list = events
            .list(
                &ListParams::default()
                    .fields("reason=FreeDiskSpaceFailed,involvedObject.kind=Node"),
            )
            .await
            .unwrap();
        let recent = list.items.into_iter().find(|e| {
            let t = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second()))
                .unwrap_or(0);
            t >= since_s - 1
        });
        if let Some(e) = recent {
            return e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no FreeDiskSpaceFailed event on the Node since the restart"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
