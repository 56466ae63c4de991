//! The static pod source: a directory of pod manifests (`staticPodPath`, `--pod-manifest-path`),
//! as the Go kubelet's `pkg/kubelet/config/file.go` and `common.go`.
//!
//! Each regular file not starting with `.` holds one pod, YAML or JSON. It becomes a static pod
//! named `<name>-<nodeName>`, in namespace `default` unless it says otherwise, bound to this
//! node, with the annotations `kubernetes.io/config.source: file`, `kubernetes.io/config.hash`
//! (= its UID) and a toleration of every NoExecute taint. Its UID is a hash of the file's content,
//! the node name and the file path, so an unchanged file keeps its UID across restarts (the
//! running pod is adopted) and an edited file gets a new UID (the pod is replaced). The Go kubelet
//! hashes the decoded object (MD5 of `DeepHashObject`); deckhand hashes the bytes (SHA-256, 128
//! bits kept, 32 hex digits like Go's).
//!
//! [`run`] watches the directory with inotify (the `notify` crate) and re-reads it every
//! `fileCheckFrequency` (20 s) as well, sending the complete set of static pods whenever it
//! changes (and once at the start). A malformed manifest is logged and reported as a Warning
//! event on the Node once per content; it never stops the source.

use k8s_openapi::api::core::v1::{Pod, PodStatus, Toleration};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// `kubernetes.io/config.source`: where a pod came from (`file`, `api`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// `kubernetes.io/config.hash`: a static pod's UID.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// `kubernetes.io/config.mirror`: on a mirror pod, the UID (hash) of its static pod.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// `kubernetes.io/config.seen`: when the kubelet first saw the pod (RFC 3339).
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// The source name of manifest files.
pub const FILE_SOURCE: &str = "file";

/// Why a manifest file is not a usable pod.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    /// Not YAML/JSON, or not shaped like a Pod.
    #[error("could not decode {path:?} as a pod: {message}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        message: String,
    },
    /// Decoded, but not a valid static pod.
    #[error("invalid static pod manifest {path:?}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Whether `pod` is a static pod (from a source other than the API server).
pub fn is_static(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s != "api")
}

/// Whether `pod` (from the API server) is a mirror pod.
pub fn is_mirror(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR_ANNOTATION).is_some()
}

/// An annotation's value.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The static pod UID for a manifest: SHA-256 over the content, `host:<node>` and
/// `file:<path>` (the inputs of the Go kubelet's `applyDefaults`), first 16 bytes as hex.
pub fn static_pod_uid(content: &[u8], node_name: &str, path: &Path) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(content);
    ctx.update(format!("host:{node_name}").as_bytes());
    ctx.update(format!("file:{}", path.display()).as_bytes());
    ctx.finish().as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn valid_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Decodes a pod from its JSON value. Through JSON text rather than `serde_json::from_value`:
/// the API client decodes every pod from text (`serde_json::from_str`), and a second decoder of
/// the Pod type (from a value) added 0.30 MB of code to the binary (issue 15's memory floor).
/// The error names the field's problem without a position (the text is not the manifest's own).
fn pod_from_json(value: &serde_json::Value) -> Result<Pod, String> {
    serde_json::from_str(&serde_json::to_string(value).map_err(|e| e.to_string())?).map_err(|e| {
        let message = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        message
            .strip_suffix(&position)
            .unwrap_or(&message)
            .to_owned()
    })
}

/// Decodes one manifest into a static pod for `node_name` (pure): checks it, applies the API
/// server's defaults deckhand relies on and the Go kubelet's static pod defaults
/// (`config/common.go` applyDefaults: name, namespace, node name, UID, hash annotation,
/// NoExecute toleration, phase Pending).
///
/// Errors: [`ManifestError`].
pub fn pod_from_manifest(
    content: &[u8],
    path: &Path,
    node_name: &str,
) -> Result<Pod, ManifestError> {
    let decode = |message: String| ManifestError::Decode {
        path: path.to_path_buf(),
        message,
    };
    let invalid = |message: String| ManifestError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let text = std::str::from_utf8(content).map_err(|e| decode(e.to_string()))?;
    let value = crate::config::file::yaml_value(text).map_err(decode)?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    if kind != "Pod" || api_version != "v1" {
        return Err(invalid(format!(
            "apiVersion {api_version:?} kind {kind:?} is not v1 Pod (one pod per file)"
        )));
    }
    let mut pod: Pod = pod_from_json(&value).map_err(decode)?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    if !valid_dns_subdomain(&name) {
        return Err(invalid(format!(
            "metadata.name {name:?} is not a valid DNS subdomain"
        )));
    }
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    let Some(spec) = pod.spec.as_mut() else {
        return Err(invalid("spec is missing".into()));
    };
    if spec.containers.is_empty() {
        return Err(invalid("spec.containers must not be empty".into()));
    }
    let mut names = std::collections::HashSet::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        if c.name.is_empty() || !names.insert(c.name.clone()) {
            return Err(invalid(format!(
                "container name {:?} is empty or repeated",
                c.name
            )));
        }
        if c.image.as_deref().unwrap_or("").is_empty() {
            return Err(invalid(format!("container {:?} has no image", c.name)));
        }
    }
    if spec
        .service_account_name
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        // NodeRestriction refuses mirror pods that reference API objects.
        return Err(invalid(
            "static pods may not use a service account (spec.serviceAccountName)".into(),
        ));
    }
    // API server defaults deckhand reads (k/k pkg/apis/core/v1/defaults.go).
    spec.restart_policy.get_or_insert_with(|| "Always".into());
    spec.dns_policy.get_or_insert_with(|| "ClusterFirst".into());
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.scheduler_name
        .get_or_insert_with(|| "default-scheduler".into());
    spec.enable_service_links.get_or_insert(true);
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        c.termination_message_path
            .get_or_insert_with(|| "/dev/termination-log".into());
        c.termination_message_policy
            .get_or_insert_with(|| "File".into());
        if c.image_pull_policy.is_none() {
            let image = c.image.clone().unwrap_or_default();
            let last = image.rsplit('/').next().unwrap_or("");
            let latest = !image.contains('@') && (!last.contains(':') || last.ends_with(":latest"));
            c.image_pull_policy = Some(if latest { "Always" } else { "IfNotPresent" }.into());
        }
    }
    // The Go kubelet's static pod defaults.
    let uid = static_pod_uid(content, node_name, path);
    spec.node_name = Some(node_name.to_string());
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let exists_noexecute = Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    if !tolerations.contains(&exists_noexecute) {
        tolerations.push(exists_noexecute);
    }
    pod.metadata.name = Some(format!("{name}-{}", node_name.to_lowercase()));
    pod.metadata.namespace = Some(namespace);
    pod.metadata.uid = Some(uid.clone());
    pod.metadata.resource_version = None;
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), FILE_SOURCE.into());
    annotations.remove(CONFIG_MIRROR_ANNOTATION);
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });
    Ok(pod)
}

/// The outcome of reading the directory once.
#[derive(Debug, Default)]
pub struct Scan {
    /// Good manifests' pods, by file.
    pub pods: BTreeMap<PathBuf, Pod>,
    /// Bad manifests, by file, with the content hash (to report each version once).
    pub errors: BTreeMap<PathBuf, (String, ManifestError)>,
}

/// Reads every manifest in `dir` (not recursing, skipping names starting with `.`, as the Go
/// kubelet). A missing directory is an empty scan.
pub fn scan_dir(dir: &Path, node_name: &str) -> std::io::Result<Scan> {
    let mut scan = Scan::default();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(scan),
        Err(e) => return Err(e),
    };
    let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    for path in names {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        if hidden || !path.is_file() {
            continue;
        }
        let content = match std::fs::read(&path) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "reading static pod manifest failed");
                continue;
            }
        };
        match pod_from_manifest(&content, &path, node_name) {
            Ok(pod) => {
                scan.pods.insert(path, pod);
            }
            Err(e) => {
                let h = static_pod_uid(&content, node_name, &path);
                scan.errors.insert(path, (h, e));
            }
        }
    }
    // Two files defining the same pod: the Go kubelet keeps the first (by file name).
    let mut seen = std::collections::HashSet::new();
    scan.pods.retain(|path, p| {
        let key = (p.metadata.namespace.clone(), p.metadata.name.clone());
        let first = seen.insert(key);
        if !first {
            tracing::warn!(path = %path.display(), pod = ?p.metadata.name, "static pod defined twice; this file is ignored");
        }
        first
    });
    Ok(scan)
}

/// Event reason for a manifest that cannot be used.
pub const REASON_FAILED_STATIC_POD: &str = "FailedStaticPodManifest";

/// Watches `dir` until `cancel`, sending the complete list of static pods at the start and
/// whenever it changes. `node_event` reports a bad manifest on the Node (reason
/// [`REASON_FAILED_STATIC_POD`]).
pub async fn run(
    dir: PathBuf,
    node_name: String,
    period: Duration,
    tx: mpsc::Sender<Vec<Pod>>,
    node_event: impl Fn(String) + Send + 'static,
    cancel: CancellationToken,
) {
    use notify::Watcher;
    let (wake_tx, mut wake_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher: Option<notify::RecommendedWatcher> = None;
    let mut last: Option<Vec<(String, String)>> = None;
    let mut reported: HashMap<PathBuf, String> = HashMap::new();
    let mut tick = tokio::time::interval(period.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if watcher.is_none() && dir.is_dir() {
            let wake = wake_tx.clone();
            match notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                if res.as_ref().map_or(true, |ev| changes_directory(&ev.kind)) {
                    let _ = wake.send(());
                }
            }) {
                Ok(mut w) => match w.watch(&dir, notify::RecursiveMode::NonRecursive) {
                    Ok(()) => watcher = Some(w),
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "watching the static pod directory failed; re-reading it periodically")
                    }
                },
                Err(e) => {
                    tracing::warn!(error = %e, "inotify unavailable; re-reading the static pod directory periodically")
                }
            }
        }
        let d = dir.clone();
        let n = node_name.clone();
        match tokio::task::spawn_blocking(move || scan_dir(&d, &n)).await {
            Ok(Ok(scan)) => {
                for (path, (hash, err)) in &scan.errors {
                    if reported.get(path) != Some(hash) {
                        tracing::error!(path = %path.display(), error = %err, "could not process static pod manifest");
                        node_event(err.to_string());
                        reported.insert(path.clone(), hash.clone());
                    }
                }
                reported.retain(|p, _| scan.errors.contains_key(p));
                let pods: Vec<Pod> = scan.pods.into_values().collect();
                let key: Vec<(String, String)> = pods
                    .iter()
                    .map(|p| {
                        (
                            crate::pod::uid(p).to_string(),
                            p.metadata.name.clone().unwrap_or_default(),
                        )
                    })
                    .collect();
                if last.as_ref() != Some(&key) {
                    tracing::info!(dir = %dir.display(), pods = pods.len(), "static pod manifests read");
                    if tx.send(pods).await.is_err() {
                        return;
                    }
                    last = Some(key);
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(dir = %dir.display(), error = %e, "reading the static pod directory failed");
                if last.is_none() {
                    // Deliver an empty first list so start-up is not held back.
                    if tx.send(Vec::new()).await.is_err() {
                        return;
                    }
                    last = Some(Vec::new());
                }
            }
            Err(e) => tracing::warn!(error = %e, "static pod scan task failed"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
            w = wake_rx.recv() => {
                if w.is_none() { return; }
                // Let an editor finish writing, then coalesce the burst of events.
                tokio::time::sleep(Duration::from_millis(200)).await;
                while wake_rx.try_recv().is_ok() {}
            }
        }
    }
}

/// Whether an inotify event on the static pod directory can change what it holds: a file
/// created, written, renamed or removed (or an event inotify could not classify). Opening and
/// reading files is not: the scan itself opens the directory and each manifest, and reacting to
/// those events re-scanned the directory about five times a second, for good, on every node
/// with a static pod path (most of deckhand's idle CPU).
pub fn changes_directory(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_that_change_the_directory_wake_the_scan() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, EventKind, ModifyKind, RemoveKind,
            RenameMode,
        };
        let cases = [
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), false),
            (EventKind::Access(AccessKind::Read), false),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                false,
            ),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                true,
            ),
            (EventKind::Create(CreateKind::File), true),
            (EventKind::Modify(ModifyKind::Data(DataChange::Any)), true),
            (EventKind::Modify(ModifyKind::Name(RenameMode::To)), true),
            (EventKind::Remove(RemoveKind::File), true),
            (EventKind::Any, true),
            (EventKind::Other, true),
        ];
        for (kind, want) in cases {
            assert_eq!(changes_directory(&kind), want, "{kind:?}");
        }
    }

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n    command: [sleep, '3600']\n";

    #[test]
    fn manifest_becomes_static_pod_with_go_naming() {
        let path = Path::new("/etc/kubernetes/manifests/web.yaml");
        let p = pod_from_manifest(MANIFEST.as_bytes(), path, "Node-A").unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-node-a"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = crate::pod::uid(&p).to_string();
        assert_eq!(uid.len(), 32);
        assert_eq!(annotation(&p, CONFIG_HASH_ANNOTATION), Some(uid.as_str()));
        assert_eq!(annotation(&p, CONFIG_SOURCE_ANNOTATION), Some("file"));
        assert!(is_static(&p) && !is_mirror(&p));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node-A"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        let t = &spec.tolerations.as_ref().unwrap()[0];
        assert_eq!(
            (t.operator.as_deref(), t.effect.as_deref()),
            (Some("Exists"), Some("NoExecute"))
        );
        // Same content, node and path: same UID; any of them changed: another UID.
        let again = pod_from_manifest(MANIFEST.as_bytes(), path, "Node-A").unwrap();
        assert_eq!(crate::pod::uid(&again), uid);
        let edited = MANIFEST.replace("3600", "3601");
        assert_ne!(
            crate::pod::uid(&pod_from_manifest(edited.as_bytes(), path, "Node-A").unwrap()),
            uid
        );
        assert_ne!(
            crate::pod::uid(&pod_from_manifest(MANIFEST.as_bytes(), path, "node-b").unwrap()),
            uid
        );
    }

    #[test]
    fn json_manifest_and_namespace() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j","namespace":"kube-system"},
            "spec":{"containers":[{"name":"c","image":"busybox"}]}}"#;
        let p = pod_from_manifest(json.as_bytes(), Path::new("/m/j.json"), "n").unwrap();
        assert_eq!(p.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(
            p.spec.unwrap().containers[0].image_pull_policy.as_deref(),
            Some("Always")
        );
    }

    #[test]
    fn malformed_manifests_are_errors_not_panics() {
        let path = Path::new("/m/bad.yaml");
        for bad in [
            "::: not yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: c, image: i}]}\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i, ports: oops}]}\n",
            "\u{0}\u{1}",
        ] {
            let e = pod_from_manifest(bad.as_bytes(), path, "n").unwrap_err();
            assert!(e.to_string().contains("/m/bad.yaml"), "{e}");
        }
    }

    #[test]
    fn a_pod_that_does_not_decode_is_named_by_its_problem_without_a_position() {
        let path = Path::new("/m/p.yaml");
        let cases = [
            // (spec, what the message says)
            (
                "{containers: [{name: c, image: i, ports: oops}]}",
                "invalid type: string \"oops\", expected a sequence",
            ),
            (
                "{containers: [{name: c, image: i}], priority: high}",
                "invalid type: string \"high\", expected i32",
            ),
        ];
        for (spec, want) in cases {
            let doc = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {spec}\n");
            let e = pod_from_manifest(doc.as_bytes(), path, "n").unwrap_err();
            let ManifestError::Decode { message, .. } = &e else {
                panic!("{spec}: {e}");
            };
            assert_eq!(message, want, "{spec}");
        }
    }

    #[test]
    fn scan_skips_hidden_and_reports_bad_files() {
        let dir = std::env::temp_dir().join(format!("deckhand-static-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("web.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.join(".web.yaml.swp"), MANIFEST).unwrap();
        std::fs::write(dir.join("bad.yaml"), "kind: Pod\n").unwrap();
        let s = scan_dir(&dir, "n").unwrap();
        assert_eq!(s.pods.len(), 1);
        assert_eq!(s.errors.len(), 1);
        assert!(scan_dir(&dir.join("missing"), "n").unwrap().pods.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
