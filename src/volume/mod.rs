//! Pod volumes, set up before a pod's containers start and torn down when the pod is removed
//! (the Go kubelet's `volumemanager` and `pkg/volume` plugins). Each volume lives under
//! `<root-dir>/pods/<uid>/volumes/<plugin>/<name>` with the Go kubelet's plugin directory names
//! (`kubernetes.io~empty-dir`, `kubernetes.io~projected`, ...).
//!
//! Kinds handled here: emptyDir (disk, or tmpfs for `medium: Memory`), configMap, secret (on
//! tmpfs, never on disk), downwardAPI, projected (serviceAccountToken through the TokenRequest
//! API bound to the pod, configMap, secret, downwardAPI) and hostPath. Files are written with
//! the atomic-writer layout (a timestamped directory, the `..data` symlink swapped over it, and
//! one symlink per top-level entry: k/k `pkg/volume/util/atomic_writer.go`). Paths that would
//! escape the volume (absolute, or with a `..` element) are refused.
//!
//! This file sets volumes up and tears them down, and resolves container mounts; the
//! service-account token manager is in [`token`], downwardAPI items in `downward`, the atomic
//! writer in [`writer`].

mod downward;
pub mod pv;
pub mod token;
pub mod writer;

pub use token::{
    token_refusal_is_transient, token_requires_refresh, tokens, TokenManager, TOKEN_RETRY_BUDGET,
    TOKEN_RETRY_INITIAL, TOKEN_RETRY_MAX,
};

mod retry;
pub use retry::{setup_retry_delay, SETUP_RETRY_INITIAL, SETUP_RETRY_MAX};

use downward::add_downward;
use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, Pod, Secret, Volume};
use kube::api::Api;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use writer::Payload;

/// Errors setting up or tearing down volumes. The message is what the pod shows
/// (`FailedMount` event, `CreateContainerConfigError` for sub-paths).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A referenced object is missing and the reference is not optional.
    #[error("{kind} {name:?} not found")]
    NotFound {
        /// `configmap`, `secret`.
        kind: &'static str,
        /// Object name.
        name: String,
    },
    /// A key is missing from a configMap or secret and the reference is not optional.
    #[error("configmap references non-existent config key: {key}")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A path would escape the volume.
    #[error("invalid path {path:?}: {why}")]
    InvalidPath {
        /// The path as written in the spec.
        path: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// An API call failed.
    #[error("{op}: {source}")]
    Api {
        /// What was attempted.
        op: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A filesystem or mount operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// Path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A volume kind deckhand does not handle yet.
    #[error("volume {name:?}: unsupported volume type")]
    Unsupported {
        /// Volume name.
        name: String,
    },
    /// An `image` volume (an OCI image mounted read-only, KEP-4639) on a runtime that cannot
    /// mount one: the CRI image mount needs containerd 2.1 or later (or CRI-O 1.31), which
    /// Debian's containerd 1.6 is not
    /// ([`crate::kuberuntime::image_volume::runtime_supports_image_volumes`]).
    #[error("volume {name:?}: image volumes are not supported: they need a container runtime with CRI image volume support (containerd 2.1 or later)")]
    ImageVolumeUnsupported {
        /// Volume name.
        name: String,
    },
    /// A downwardAPI item's `resourceFieldRef` cannot be read (unknown container or resource,
    /// bad divisor).
    #[error("downwardAPI item {path:?}: {why}")]
    DownwardApi {
        /// The item's path in the volume.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A PersistentVolumeClaim (or its PV) cannot be used yet, in the Go kubelet's words
    /// ([`pv::claim_error`]): not bound, being deleted, a PV bound elsewhere, ...
    #[error("{message}")]
    Claim {
        /// The whole message.
        message: String,
    },
    /// Something is still mounted in a pod's directory: it is left in place, never deleted
    /// through.
    #[error("volume paths are still present on disk: {path} is still a mount point; the pod directory is kept")]
    StillMounted {
        /// The mount point.
        path: String,
    },
    /// A hostPath type check failed.
    #[error("hostPath type check failed: {path} is not a {want}")]
    HostPathType {
        /// The host path.
        path: String,
        /// The expected type.
        want: String,
    },
}

impl VolumeError {
    /// The `FailedMount` event's text: the Go kubelet's volume manager wording for a claim that
    /// cannot be used (`Unable to attach or mount volumes: ...`), `MountVolume.SetUp failed:
    /// ...` for the rest.
    pub fn failed_mount_message(&self) -> String {
        match self {
            VolumeError::Claim { message } => {
                format!("Unable to attach or mount volumes: {message}")
            }
            e => format!("MountVolume.SetUp failed: {e}"),
        }
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> VolumeError + 'a {
    move |source| VolumeError::Io {
        op,
        path: path.display().to_string(),
        source,
    }
}

/// Validates a relative path from a spec (`items[].path`, `subPath`): not absolute, no `..`
/// element, not empty (k/k `pkg/apis/core/validation` validateLocalDescendingPath).
pub fn validate_relative(path: &str) -> Result<(), VolumeError> {
    if path.is_empty() {
        return Err(VolumeError::InvalidPath {
            path: path.into(),
            why: "must not be empty",
        });
    }
    let p = Path::new(path);
    if p.is_absolute() {
        return Err(VolumeError::InvalidPath {
            path: path.into(),
            why: "must be a relative path",
        });
    }
    if p.components().any(|c| matches!(c, Component::ParentDir))
        || path.split('/').any(|e| e == "..")
    {
        return Err(VolumeError::InvalidPath {
            path: path.into(),
            why: "must not contain '..'",
        });
    }
    Ok(())
}

/// The pod's directory under the root dir.
pub fn pod_dir(root_dir: &Path, uid: &str) -> PathBuf {
    root_dir.join("pods").join(uid)
}

fn plugin_dir(v: &Volume) -> Option<&'static str> {
    Some(if v.empty_dir.is_some() {
        "kubernetes.io~empty-dir"
    } else if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.projected.is_some() {
        "kubernetes.io~projected"
    } else if v.downward_api.is_some() {
        "kubernetes.io~downward-api"
    } else {
        return None;
    })
}

/// Where each volume of a pod is on the host, by volume name.
pub type VolumePaths = BTreeMap<String, PathBuf>;

/// Sets up the pod's volumes (idempotent: existing content is refreshed in place).
/// `node_allocatable_milli` (milli-units by resource name) is what a downwardAPI
/// `resourceFieldRef: limits.*` shows for a container without that limit. Image volumes have no
/// host directory (the runtime mounts the image; see [`container_mounts`]) and are left out of the
/// result when `image_volumes` says the runtime mounts them.
///
/// Errors: the first volume that cannot be set up ([`VolumeError::ImageVolumeUnsupported`] for an
/// image volume when `image_volumes` is false); nothing is written outside the volume.
pub async fn setup(
    client: &kube::Client,
    root_dir: &Path,
    pod: &Pod,
    node_allocatable_milli: &BTreeMap<String, i128>,
    image_volumes: bool,
) -> Result<VolumePaths, VolumeError> {
    let uid = crate::pod::uid(pod).to_string();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let fs_group = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok());
    let mut out = VolumePaths::new();
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some((claim, read_only)) = pv::claim_of(pod, v) {
            let path = pv::setup_claim(client, root_dir, pod, v, &claim, read_only).await?;
            out.insert(v.name.clone(), path);
            continue;
        }
        if let Some(hp) = &v.host_path {
            let (path, type_) = (hp.path.clone(), hp.type_.clone());
            let checked = blocking("check hostPath", Path::new(&hp.path), move || {
                check_host_path(&path, type_.as_deref())
            })
            .await?;
            out.insert(v.name.clone(), checked);
            continue;
        }
        if v.image.is_some() {
            if image_volumes {
                continue;
            }
            return Err(VolumeError::ImageVolumeUnsupported {
                name: v.name.clone(),
            });
        }
        let plugin = plugin_dir(v).ok_or_else(|| VolumeError::Unsupported {
            name: v.name.clone(),
        })?;
        validate_relative(&v.name)?;
        let dir = pod_dir(root_dir, &uid)
            .join("volumes")
            .join(plugin)
            .join(&v.name);
        let tmpfs = v.secret.is_some()
            || v.projected.is_some()
            || v.empty_dir
                .as_ref()
                .is_some_and(|e| e.medium.as_deref() == Some("Memory"));
        let size_limit = v
            .empty_dir
            .as_ref()
            .and_then(|e| e.size_limit.as_ref())
            .map(|q| q.0.clone());
        let existed = dir.exists();
        prepare_dir(&dir, tmpfs, size_limit).await?;
        let mut payload = Payload::new();
        if v.empty_dir.is_some() {
            if !existed {
                let d = dir.clone();
                blocking("set up emptyDir", &dir, move || {
                    // world-writable, as the Go kubelet's emptyDir (`setupDir`, perm 0777)
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777))
                        .map_err(io_err("chmod emptyDir", &d))?;
                    // once, when made: the pod's own files are the pod's business afterwards
                    match fs_group {
                        Some(gid) => set_volume_ownership(&d, gid, false),
                        None => Ok(()),
                    }
                })
                .await?;
            }
            out.insert(v.name.clone(), dir);
            continue;
        } else if let Some(cm) = &v.config_map {
            let optional = cm.optional.unwrap_or(false);
            let mode = cm.default_mode.unwrap_or(0o644);
            if let Some(data) = get_config_map(client, &ns, &cm.name, optional).await? {
                add_items(&mut payload, &data, cm.items.as_deref(), mode, optional)?;
            }
        } else if let Some(sec) = &v.secret {
            let name = sec.secret_name.clone().unwrap_or_default();
            let optional = sec.optional.unwrap_or(false);
            let mode = sec.default_mode.unwrap_or(0o644);
            if let Some(data) = get_secret(client, &ns, &name, optional).await? {
                add_items(&mut payload, &data, sec.items.as_deref(), mode, optional)?;
            }
        } else if let Some(d) = &v.downward_api {
            add_downward(
                &mut payload,
                pod,
                d.items.as_deref().unwrap_or(&[]),
                d.default_mode.unwrap_or(0o644),
                node_allocatable_milli,
            )?;
        } else if let Some(p) = &v.projected {
            let mode = p.default_mode.unwrap_or(0o644);
            for src in p.sources.iter().flatten() {
                if let Some(t) = &src.service_account_token {
                    validate_relative(&t.path)?;
                    let token = tokens()
                        .get(client, pod, t.audience.clone(), t.expiration_seconds)
                        .await?;
                    // The Go kubelet writes the token 0600 when an fsUser applies, else defaultMode.
                    payload.insert(t.path.clone(), (token.into_bytes(), mode));
                }
                if let Some(cm) = &src.config_map {
                    let optional = cm.optional.unwrap_or(false);
                    if let Some(data) = get_config_map(client, &ns, &cm.name, optional).await? {
                        add_items(&mut payload, &data, cm.items.as_deref(), mode, optional)?;
                    }
                }
                if let Some(sec) = &src.secret {
                    let optional = sec.optional.unwrap_or(false);
                    if let Some(data) = get_secret(client, &ns, &sec.name, optional).await? {
                        add_items(&mut payload, &data, sec.items.as_deref(), mode, optional)?;
                    }
                }
                if let Some(d) = &src.downward_api {
                    let items = d.items.as_deref().unwrap_or(&[]);
                    add_downward(&mut payload, pod, items, mode, node_allocatable_milli)?;
                }
            }
        }
        let d = dir.clone();
        blocking("write volume", &dir, move || {
            writer::write(&d, &payload)?;
            match fs_group {
                // configMap, secret, downwardAPI and projected volumes are read-only to the pod
                Some(gid) => set_volume_ownership(&d, gid, true),
                None => Ok(()),
            }
        })
        .await?;
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
}

/// Runs blocking file work `f` (stat, chmod, chown walks, the atomic writer) on tokio's
/// blocking pool, off the runtime threads; `what` and `path` name it if the task is lost.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    path: &Path,
    f: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, VolumeError> {
    let p = path.display().to_string();
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| VolumeError::Io {
            op: what,
            path: p,
            source: std::io::Error::other(e),
        })?
}

/// Gives the volume's files to group `gid` as the Go kubelet does for `fsGroup`
/// (k/k `pkg/volume/volume_linux.go` SetVolumeOwnership): every entry's group becomes `gid`
/// (symlinks themselves, not their targets), files get group read (and write unless
/// `read_only`), directories also group execute and the setgid bit so new files inherit the
/// group. Nothing outside `dir` is touched: symlinks are never followed.
///
/// Errors: an entry that cannot be changed.
pub fn set_volume_ownership(dir: &Path, gid: u32, read_only: bool) -> Result<(), VolumeError> {
    use std::os::unix::fs::PermissionsExt;
    let mask = if read_only { 0o440 } else { 0o660 };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let md = std::fs::symlink_metadata(&p).map_err(io_err("inspect volume entry", &p))?;
        std::os::unix::fs::lchown(&p, None, Some(gid)).map_err(io_err("chown volume entry", &p))?;
        if md.file_type().is_symlink() {
            continue;
        }
        let mut mode = md.permissions().mode() & 0o7777;
        mode |= mask;
        if md.is_dir() {
            mode |= 0o2000 | 0o110;
            for e in std::fs::read_dir(&p).map_err(io_err("read volume directory", &p))? {
                stack.push(e.map_err(io_err("read volume directory", &p))?.path());
            }
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(io_err("chmod volume entry", &p))?;
    }
    Ok(())
}

fn check_host_path(path: &str, type_: Option<&str>) -> Result<PathBuf, VolumeError> {
    let p = PathBuf::from(path);
    if !p.is_absolute() {
        return Err(VolumeError::InvalidPath {
            path: path.into(),
            why: "hostPath must be absolute",
        });
    }
    let meta = std::fs::metadata(&p).ok();
    let fail = |want: &str| VolumeError::HostPathType {
        path: path.into(),
        want: want.into(),
    };
    match type_.unwrap_or("") {
        "" => {}
        "DirectoryOrCreate" => {
            if meta.is_none() {
                std::fs::create_dir_all(&p).map_err(io_err("create hostPath directory", &p))?;
                let _ = std::fs::set_permissions(
                    &p,
                    std::os::unix::fs::PermissionsExt::from_mode(0o755),
                );
            } else if !meta.unwrap().is_dir() {
                return Err(fail("directory"));
            }
        }
        "Directory" => {
            if !meta.is_some_and(|m| m.is_dir()) {
                return Err(fail("directory"));
            }
        }
        "FileOrCreate" => {
            if meta.is_none() {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                    .map_err(io_err("create hostPath file", &p))?;
            } else if !meta.unwrap().is_file() {
                return Err(fail("file"));
            }
        }
        "File" => {
            if !meta.is_some_and(|m| m.is_file()) {
                return Err(fail("file"));
            }
        }
        "Socket" | "CharDevice" | "BlockDevice" => {
            use std::os::unix::fs::FileTypeExt;
            let ok = meta.is_some_and(|m| match type_.unwrap() {
                "Socket" => m.file_type().is_socket(),
                "CharDevice" => m.file_type().is_char_device(),
                _ => m.file_type().is_block_device(),
            });
            if !ok {
                return Err(fail(&type_.unwrap().to_lowercase()));
            }
        }
        other => {
            return Err(VolumeError::HostPathType {
                path: path.into(),
                want: format!("known type (got {other:?})"),
            })
        }
    }
    Ok(p)
}

async fn prepare_dir(
    dir: &Path,
    tmpfs: bool,
    size_limit: Option<String>,
) -> Result<(), VolumeError> {
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&d).map_err(io_err("create volume directory", &d))?;
        if tmpfs && !is_mount_point(&d) {
            let mut opts = String::new();
            if let Some(l) = size_limit.and_then(|q| crate::quantity::parse_value(&q).ok()) {
                opts = format!("size={l}");
            }
            nix::mount::mount(
                Some("tmpfs"),
                &d,
                Some("tmpfs"),
                nix::mount::MsFlags::empty(),
                (!opts.is_empty()).then_some(opts.as_str()),
            )
            .map_err(|e| VolumeError::Io {
                op: "mount tmpfs",
                path: d.display().to_string(),
                source: e.into(),
            })?;
        }
        Ok(())
    })
    .await
    .map_err(|e| VolumeError::Io {
        op: "prepare volume",
        path: dir.display().to_string(),
        source: std::io::Error::other(e),
    })?
}

/// True when `dir` is a mount point (its device differs from its parent's).
pub fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Some(Ok(b))) = (std::fs::metadata(dir), dir.parent().map(std::fs::metadata)) else {
        return false;
    };
    a.dev() != b.dev()
}

/// The mount points at or below `dir` (from `/proc/self/mountinfo`), deepest first.
fn mounts_below(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    points
}

/// Removes `dir` and everything in it without ever leaving its filesystem: a directory on
/// another device (a mount not seen when the mounts were taken down) is refused, with nothing
/// below it touched; symlinks are removed, never followed. So a pod's clean-up cannot delete
/// data that is not the pod's (a persistent volume still mounted in it).
///
/// Errors: [`VolumeError::StillMounted`] at such a directory; I/O errors.
pub fn remove_tree_on_one_fs(dir: &Path) -> Result<(), VolumeError> {
    use std::os::unix::fs::MetadataExt;
    fn walk(p: &Path, dev: u64) -> Result<(), VolumeError> {
        let md = std::fs::symlink_metadata(p).map_err(io_err("inspect", p))?;
        if !md.is_dir() {
            return std::fs::remove_file(p).map_err(io_err("remove", p));
        }
        if md.dev() != dev || pv::mounted_at(p) {
            return Err(VolumeError::StillMounted {
                path: p.display().to_string(),
            });
        }
        for e in std::fs::read_dir(p).map_err(io_err("read directory", p))? {
            walk(&e.map_err(io_err("read directory", p))?.path(), dev)?;
        }
        std::fs::remove_dir(p).map_err(io_err("remove directory", p))
    }
    let dev = match std::fs::symlink_metadata(dir) {
        Ok(md) => md.dev(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("inspect", dir)(e)),
    };
    walk(dir, dev)
}

/// Unmounts every mount under the pod's directory (its volumes: tmpfs, local persistent
/// volumes) and removes it. A mount that is still there afterwards (one that could not be
/// unmounted, or appeared meanwhile) leaves the directory in place
/// ([`VolumeError::StillMounted`], as the Go kubelet keeps an orphaned pod's directory while
/// "volume paths are still present on disk"), and the removal never crosses into another
/// filesystem ([`remove_tree_on_one_fs`]).
pub async fn teardown(root_dir: &Path, uid: &str) -> Result<(), VolumeError> {
    let dir = pod_dir(root_dir, uid);
    tokio::task::spawn_blocking(move || {
        if !dir.exists() {
            return Ok(());
        }
        for p in mounts_below(&dir) {
            nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH).map_err(|e| {
                VolumeError::Io {
                    op: "unmount",
                    path: p.clone(),
                    source: e.into(),
                }
            })?;
        }
        if let Some(p) = mounts_below(&dir).into_iter().next() {
            return Err(VolumeError::StillMounted { path: p });
        }
        remove_tree_on_one_fs(&dir)
    })
    .await
    .map_err(|e| VolumeError::Io {
        op: "teardown",
        path: uid.into(),
        source: std::io::Error::other(e),
    })?
}

async fn get_config_map(
    client: &kube::Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(cm)) => {
            let mut m: BTreeMap<String, Vec<u8>> = cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            m.extend(
                cm.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            Ok(Some(m))
        }
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(VolumeError::NotFound {
            kind: "configmap",
            name: name.into(),
        }),
        Err(source) => Err(VolumeError::Api {
            op: format!("get configmap {ns}/{name}"),
            source,
        }),
    }
}

async fn get_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, VolumeError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(s)) => Ok(Some(
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        )),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(VolumeError::NotFound {
            kind: "secret",
            name: name.into(),
        }),
        Err(source) => Err(VolumeError::Api {
            op: format!("get secret {ns}/{name}"),
            source,
        }),
    }
}

fn add_items(
    payload: &mut Payload,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
) -> Result<(), VolumeError> {
    match items {
        None => {
            for (k, v) in data {
                validate_relative(k)?;
                payload.insert(k.clone(), (v.clone(), default_mode));
            }
        }
        Some(items) => {
            for it in items {
                validate_relative(&it.path)?;
                match data.get(&it.key) {
                    Some(v) => {
                        payload.insert(
                            it.path.clone(),
                            (v.clone(), it.mode.unwrap_or(default_mode)),
                        );
                    }
                    None if optional => {}
                    None => {
                        return Err(VolumeError::MissingKey {
                            key: it.key.clone(),
                        })
                    }
                }
            }
        }
    }
    Ok(())
}

/// The pod's volumes that every container mounts read-only: claims the pod asks for read-only
/// (`persistentVolumeClaim.readOnly`, the volume's `ReadOnly` in the Go kubelet's `makeMounts`).
pub fn read_only_volumes(pod: &Pod) -> std::collections::BTreeSet<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| pv::claim_of(pod, v).is_some_and(|(_, ro)| ro))
        .map(|v| v.name.clone())
        .collect()
}

/// Resolves a container's volume mounts to CRI mounts. `subPath` must stay inside its volume:
/// it is validated, created when missing, and resolved without following a symlink out of the
/// volume.
///
/// A mount of an image volume (named in `images`, volume name to the pulled image) becomes a CRI
/// mount with `image` set, no host path, the sub-path (validated, not resolved: it is inside the
/// image) as `image_sub_path`, and always read-only, as the Go kubelet's `makeMounts` (k/k
/// `pkg/kubelet/kubelet_pods.go`; the image volume plugin's mounter is read-only).
///
/// Errors: an unknown volume, or a sub-path that escapes (`CreateContainerConfigError`).
/// `env` is the container's environment, for `subPathExpr` expansion. A mount of a volume in
/// `read_only` ([`read_only_volumes`]) is read-only whatever the mount says.
pub fn container_mounts(
    c: &Container,
    volumes: &VolumePaths,
    read_only: &std::collections::BTreeSet<String>,
    images: &BTreeMap<String, crate::cri::api::ImageSpec>,
    env: &[(String, String)],
) -> Result<Vec<crate::cri::api::Mount>, VolumeError> {
    let mut out = vec![];
    for m in c.volume_mounts.iter().flatten() {
        if let Some(image) = images.get(&m.name) {
            let sub = mount_sub_path(m, env);
            if let Some(s) = &sub {
                validate_relative(s)?;
            }
            out.push(crate::cri::api::Mount {
                container_path: m.mount_path.clone(),
                image: Some(image.clone()),
                image_sub_path: sub.unwrap_or_default(),
                readonly: true,
                ..Default::default()
            });
            continue;
        }
        let base = volumes
            .get(&m.name)
            .ok_or_else(|| VolumeError::InvalidPath {
                path: m.name.clone(),
                why: "volume mount refers to a volume that is not in the pod",
            })?;
        let sub = mount_sub_path(m, env);
        let host_path = match sub {
            Some(s) => {
                validate_relative(&s)?;
                resolve_subpath(base, &s)?
            }
            None => base.clone(),
        };
        out.push(crate::cri::api::Mount {
            container_path: m.mount_path.clone(),
            host_path: host_path.display().to_string(),
            readonly: m.read_only.unwrap_or(false) || read_only.contains(&m.name),
            ..Default::default()
        });
    }
    Ok(out)
}

/// A mount's `subPath`, or its `subPathExpr` expanded with `env`; None for neither (or empty).
fn mount_sub_path(
    m: &k8s_openapi::api::core::v1::VolumeMount,
    env: &[(String, String)],
) -> Option<String> {
    match (&m.sub_path, &m.sub_path_expr) {
        (Some(s), _) if !s.is_empty() => Some(s.clone()),
        (_, Some(e)) if !e.is_empty() => Some(crate::pod::envvars::expand(e, env)),
        _ => None,
    }
}

/// Resolves `sub` (already checked by [`validate_relative`]) inside the volume at `base`, one
/// component at a time: an existing component is resolved (symlinks followed) and must stay
/// inside the volume; a missing one is created as a directory inside the already-checked parent.
/// So a symlink planted in the volume can neither point the mount outside nor make deckhand
/// create directories outside (the hole behind CVE-2017-1002101 and CVE-2021-25741).
///
/// Errors: [`VolumeError::InvalidPath`] when a component resolves outside the volume; I/O errors.
pub fn resolve_subpath(base: &Path, sub: &str) -> Result<PathBuf, VolumeError> {
    let real_base = base
        .canonicalize()
        .map_err(io_err("resolve volume", base))?;
    let mut cur = real_base.clone();
    for comp in Path::new(sub).components() {
        let std::path::Component::Normal(name) = comp else {
            continue;
        };
        let next = cur.join(name);
        match std::fs::symlink_metadata(&next) {
            Ok(_) => {
                let real = next.canonicalize().map_err(|_| VolumeError::InvalidPath {
                    path: sub.to_string(),
                    why: "subPath resolves outside the volume",
                })?;
                if !real.starts_with(&real_base) {
                    return Err(VolumeError::InvalidPath {
                        path: sub.to_string(),
                        why: "subPath resolves outside the volume",
                    });
                }
                cur = real;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&next).map_err(io_err("create subPath", &next))?;
                cur = next;
            }
            Err(e) => return Err(io_err("resolve subPath", &next)(e)),
        }
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fs_group_ownership_sets_group_bits_without_following_symlinks() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let root = std::env::temp_dir().join(format!("dh-fsgroup-{}", std::process::id()));
        let vol = root.join("vol");
        std::fs::create_dir_all(vol.join("sub")).unwrap();
        std::fs::write(vol.join("sub/f"), b"x").unwrap();
        std::fs::set_permissions(vol.join("sub/f"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let outside = root.join("outside");
        std::fs::write(&outside, b"o").unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("link")).unwrap();
        set_volume_ownership(&vol, 4321, false).unwrap();
        let f = std::fs::metadata(vol.join("sub/f")).unwrap();
        assert_eq!(f.gid(), 4321);
        assert_eq!(f.mode() & 0o7777, 0o660);
        let d = std::fs::metadata(vol.join("sub")).unwrap();
        assert_eq!(d.mode() & 0o2070, 0o2070);
        assert_ne!(std::fs::metadata(&outside).unwrap().gid(), 4321);
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn image_mount_container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "c", "volumeMounts": mounts})).unwrap()
    }

    #[test]
    fn image_volume_mount_names_the_image_read_only_with_no_host_path() {
        let image = crate::cri::api::ImageSpec {
            image: "sha256:abc".into(),
            user_specified_image: "127.0.0.1:5000/kitten:1.8".into(),
            ..Default::default()
        };
        let images = BTreeMap::from([("vol".to_string(), image.clone())]);
        let env = vec![("DIR".to_string(), "etc".to_string())];
        let cases = [
            (serde_json::json!({"name": "vol", "mountPath": "/v"}), ""),
            (
                serde_json::json!({"name": "vol", "mountPath": "/v", "readOnly": false, "subPath": "etc/os-release"}),
                "etc/os-release",
            ),
            (
                serde_json::json!({"name": "vol", "mountPath": "/v", "subPathExpr": "$(DIR)"}),
                "etc",
            ),
        ];
        for (m, sub) in cases {
            let c = image_mount_container(serde_json::json!([m]));
            let got = container_mounts(&c, &VolumePaths::new(), &Default::default(), &images, &env)
                .unwrap();
            assert_eq!(
                got,
                vec![crate::cri::api::Mount {
                    container_path: "/v".into(),
                    host_path: String::new(),
                    image: Some(image.clone()),
                    image_sub_path: sub.into(),
                    readonly: true,
                    ..Default::default()
                }],
                "{m}"
            );
        }
    }

    #[test]
    fn image_volume_sub_path_that_is_absolute_or_climbs_is_refused() {
        let images = BTreeMap::from([("vol".to_string(), crate::cri::api::ImageSpec::default())]);
        let env = vec![("UP".to_string(), "..".to_string())];
        for m in [
            serde_json::json!({"name": "vol", "mountPath": "/v", "subPath": "/etc"}),
            serde_json::json!({"name": "vol", "mountPath": "/v", "subPath": "a/../../b"}),
            serde_json::json!({"name": "vol", "mountPath": "/v", "subPathExpr": "$(UP)/x"}),
        ] {
            let c = image_mount_container(serde_json::json!([m]));
            let err = container_mounts(&c, &VolumePaths::new(), &Default::default(), &images, &env)
                .unwrap_err();
            assert!(matches!(err, VolumeError::InvalidPath { .. }), "{m}: {err}");
        }
    }

    #[test]
    fn image_volume_without_runtime_support_is_the_clear_pod_error() {
        let err = VolumeError::ImageVolumeUnsupported { name: "vol".into() };
        assert_eq!(
            err.to_string(),
            "volume \"vol\": image volumes are not supported: they need a container runtime with CRI image volume support (containerd 2.1 or later)"
        );
    }

    #[test]
    fn subpath_through_a_symlink_out_of_the_volume_is_refused_and_creates_nothing() {
        let root = std::env::temp_dir().join(format!("dh-subpath-{}", std::process::id()));
        let vol = root.join("vol");
        let outside = root.join("outside");
        std::fs::create_dir_all(&vol).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("link")).unwrap();
        std::os::unix::fs::symlink("../outside", vol.join("rel")).unwrap();
        for sub in ["link", "link/newdir", "rel/x/y"] {
            let e = resolve_subpath(&vol, sub).unwrap_err();
            assert!(e.to_string().contains("outside the volume"), "{sub}: {e}");
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let ok = resolve_subpath(&vol, "a/b").unwrap();
        assert!(ok.ends_with("vol/a/b") && ok.is_dir());
        std::fs::create_dir_all(vol.join("inner")).unwrap();
        std::os::unix::fs::symlink("inner", vol.join("in-link")).unwrap();
        assert!(resolve_subpath(&vol, "in-link")
            .unwrap()
            .ends_with("vol/inner"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The data of a persistent volume still bind-mounted in a pod's directory survives the
    /// pod's clean-up: the removal stops at the mount (same filesystem, so only the mount table
    /// tells) and reports it.
    #[test]
    fn removing_a_pod_directory_never_deletes_through_a_mount() {
        let base = std::env::temp_dir().join(format!("deckhand-rm-test-{}", std::process::id()));
        let data = base.join("pv-data");
        let pod = base.join("pod");
        let mnt = pod.join("volumes/kubernetes.io~local-volume/pv1");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("precious"), "keep me").unwrap();
        std::fs::create_dir_all(&mnt).unwrap();
        std::fs::write(pod.join("other-file"), "x").unwrap();
        if let Err(e) = nix::mount::mount(
            Some(&data),
            &mnt,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        ) {
            eprintln!("skipped: cannot bind-mount here ({e})");
            let _ = std::fs::remove_dir_all(&base);
            return;
        }
        let r = remove_tree_on_one_fs(&pod);
        assert!(matches!(r, Err(VolumeError::StillMounted { .. })), "{r:?}");
        assert_eq!(
            std::fs::read_to_string(data.join("precious")).unwrap(),
            "keep me"
        );
        nix::mount::umount2(&mnt, nix::mount::MntFlags::MNT_DETACH).unwrap();
        remove_tree_on_one_fs(&pod).unwrap();
        assert!(!pod.exists());
        assert_eq!(
            std::fs::read_to_string(data.join("precious")).unwrap(),
            "keep me"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn paths_that_escape_are_refused() {
        for bad in ["..", "../x", "a/../../b", "/etc/passwd", "", "a/.."] {
            assert!(validate_relative(bad).is_err(), "{bad:?}");
        }
        for good in ["a", "a/b", "..data-not", "x..y"] {
            assert!(validate_relative(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn missing_required_key_is_an_error_and_optional_is_skipped() {
        let data: BTreeMap<String, Vec<u8>> = [("a".to_string(), b"1".to_vec())].into();
        let items = vec![KeyToPath {
            key: "b".into(),
            path: "b".into(),
            mode: None,
        }];
        let mut p = Payload::new();
        assert!(add_items(&mut p, &data, Some(&items), 0o644, false).is_err());
        assert!(add_items(&mut p, &data, Some(&items), 0o644, true).is_ok());
        let bad = vec![KeyToPath {
            key: "a".into(),
            path: "../x".into(),
            mode: None,
        }];
        assert!(add_items(&mut p, &data, Some(&bad), 0o644, false).is_err());
    }
}
