//! User namespaces for pods (`spec.hostUsers: false`; KEP-127, GA and always on in Kubernetes
//! 1.36). Mirrors k/k `pkg/kubelet/userns` and `kuberuntime/util.NamespacesForPod`:
//!
//! - every sandbox and container config carries a user namespace option: mode `NODE` (the
//!   host's user namespace) unless the pod sets `hostUsers: false`;
//! - a pod with `hostUsers: false` gets mode `POD` with its own range of `idsPerPod` host user
//!   and group IDs (65536 by default), mapped to 0.. inside, provided the runtime handler says it
//!   supports user namespaces (CRI `Status` runtime handler features; containerd 2.x with a runc
//!   that has idmap mounts). Otherwise its sandbox is not created: `FailedCreatePodSandBox`
//!   with the Go kubelet's message (`can't set `spec.hostUsers: false`, runtime does not support
//!   user namespaces`), and the pod stays `ContainerCreating`;
//! - the ranges come from the IDs given to the `kubelet` user (`getsubids kubelet`, when both
//!   exist) or else every ID from `idsPerPod` up to 2^32, in `idsPerPod`-sized slots;
//! - a pod's range is kept in its pod directory (`<root-dir>/pods/<uid>/userns`, the Go
//!   kubelet's JSON), so the same pod keeps the same range across restarts of deckhand, and a
//!   range is free again only once its pod directory is gone.

use crate::cri::api;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The unit of `userNamespaces.idsPerPod` and its default: 65536 IDs (k/k `userNsUnitLength`).
pub const IDS_PER_POD_UNIT: u32 = 65536;

/// The file in a pod directory that holds the pod's ranges (k/k `mappingsFile`).
pub const MAPPINGS_FILE: &str = "userns";

/// The user whose subordinate IDs (`/etc/subuid`, `/etc/subgid`, read through `getsubids`)
/// bound the ranges given to pods (k/k `kubeletUser`).
pub const KUBELET_USER: &str = "kubelet";

/// Why a pod gets no user namespace, or the manager cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsernsError {
    /// The runtime handler does not report user namespace support; the detail (may be empty)
    /// says why it could not be told, as `: <reason>`.
    #[error("can't set `spec.hostUsers: false`, runtime does not support user namespaces{0}")]
    RuntimeUnsupported(String),
    /// Every slot of the range is taken.
    #[error("create user namespace: could not find an empty slot to allocate a user namespace")]
    Exhausted,
    /// A pod's mappings file cannot be read, written or understood.
    #[error("user namespace: {0}")]
    Mappings(String),
    /// The configured ranges cannot work (start-up).
    #[error("user namespaces: {0}")]
    Config(String),
}

/// One ID mapping as the Go kubelet writes it in the pod's `userns` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapping {
    /// First host ID.
    #[serde(rename = "hostId")]
    pub host_id: u32,
    /// First ID inside the namespace.
    #[serde(rename = "containerId")]
    pub container_id: u32,
    /// Number of IDs.
    pub length: u32,
}

/// The `userns` file of a pod directory (k/k `userNamespace`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MappingsFile {
    /// User ID mappings.
    #[serde(rename = "uidMappings")]
    pub uid_mappings: Vec<IdMapping>,
    /// Group ID mappings.
    #[serde(rename = "gidMappings")]
    pub gid_mappings: Vec<IdMapping>,
}

impl MappingsFile {
    /// The file for one range of `length` IDs from host ID `first`, mapped to 0.. for users and
    /// groups alike.
    pub fn single(first: u32, length: u32) -> Self {
        let m = IdMapping {
            host_id: first,
            container_id: 0,
            length,
        };
        Self {
            uid_mappings: vec![m],
            gid_mappings: vec![m],
        }
    }

    /// The range (first host ID, length) of a file the Go kubelet or deckhand wrote: one
    /// mapping, the same for users and groups, mapping ID 0 (k/k `parseUserNsFileAndRecord`).
    pub fn parse(content: &[u8]) -> Result<(u32, u32), String> {
        let f: MappingsFile = serde_json::from_slice(content)
            .map_err(|e| format!("invalid user namespace mappings file: {e}"))?;
        if f.uid_mappings.len() != 1 {
            return Err(
                "invalid user namespace configuration: no more than one mapping allowed.".into(),
            );
        }
        if f.gid_mappings.len() != 1 || f.uid_mappings[0] != f.gid_mappings[0] {
            return Err(
                "invalid user namespace configuration: GID and UID mappings should be identical"
                    .into(),
            );
        }
        let m = f.uid_mappings[0];
        if m.container_id != 0 {
            return Err("invalid user namespace configuration: UID 0 must be mapped".into());
        }
        Ok((m.host_id, m.length))
    }

    /// The CRI user namespace option (mode `POD`) for these mappings.
    pub fn to_cri(&self) -> api::UserNamespace {
        let cri = |ms: &[IdMapping]| {
            ms.iter()
                .map(|m| api::IdMapping {
                    host_id: m.host_id,
                    container_id: m.container_id,
                    length: m.length,
                })
                .collect()
        };
        api::UserNamespace {
            mode: api::NamespaceMode::Pod as i32,
            uids: cri(&self.uid_mappings),
            gids: cri(&self.gid_mappings),
        }
    }
}

/// The user namespace option of a pod that keeps the host's (`hostUsers` unset or true).
pub fn node_user_namespace() -> api::UserNamespace {
    api::UserNamespace {
        mode: api::NamespaceMode::Node as i32,
        ..Default::default()
    }
}

/// Whether the pod asks for its own user namespace (`spec.hostUsers: false`).
pub fn wants_user_namespace(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_users) == Some(false)
}

/// Whether runtime handler `handler` ("" is the default) supports user namespaces, from the
/// handlers CRI `Status` lists (k/k `Kubelet.HandlerSupportsUserNamespaces`): a runtime that
/// lists none (containerd 1.6) does not; a handler it does not list is an error.
pub fn handler_supports_user_namespaces(
    handlers: &[api::RuntimeHandler],
    handler: &str,
) -> Result<bool, String> {
    if handlers.is_empty() {
        return Ok(false);
    }
    handlers
        .iter()
        .find(|h| h.name == handler)
        .map(|h| h.features.as_ref().is_some_and(|f| f.user_namespaces))
        .ok_or_else(|| format!("the handler {handler:?} is not known"))
}

/// The error for a `hostUsers: false` pod when the runtime's answer is `support` (k/k
/// `GetOrCreateUserNamespaceMappings`): None when the handler supports user namespaces.
pub fn unsupported(support: Result<bool, String>) -> Option<UsernsError> {
    match support {
        Ok(true) => None,
        Ok(false) => Some(UsernsError::RuntimeUnsupported(String::new())),
        Err(e) => Some(UsernsError::RuntimeUnsupported(format!(": {e}"))),
    }
}

/// Parses `getsubids` output (`0: kubelet 65536 2147483648`): exactly one line of four fields,
/// the first ID and the count (k/k `parseGetSubIdsOutput`).
pub fn parse_getsubids(out: &str) -> Result<(u32, u32), String> {
    let lines: Vec<&str> = out.trim_matches('\n').split('\n').collect();
    if lines.len() != 1 {
        return Err(format!(
            "error parsing line {out:?}: it must contain only one line"
        ));
    }
    let parts: Vec<&str> = lines[0].split_whitespace().collect();
    if parts.len() != 4 {
        return Err(format!("invalid line {out:?}"));
    }
    let num = |s: &str| {
        s.parse::<u32>()
            .map_err(|e| format!("error parsing line {out:?}: {e}"))
    };
    Ok((num(parts[2])?, num(parts[3])?))
}

/// The slots of user namespace ranges and which pod holds each (k/k `UsernsManager`'s bitmap):
/// slot `i` is host IDs `(off + i) * ids_per_pod ..` for `ids_per_pod` IDs. Pure bookkeeping;
/// [`UserNamespaceManager`] adds the files.
#[derive(Debug, Clone)]
pub struct Allocations {
    ids_per_pod: u32,
    off: u32,
    len: u32,
    by_pod: HashMap<String, u32>,
    used: BTreeSet<u32>,
    /// Where the next search for a free slot starts: just after the last one given, so a range
    /// a pod just gave back is not handed to the next pod at once (the Go kubelet picks a
    /// random free slot for the same reason).
    next: u32,
}

impl Allocations {
    /// Slots for pods of `ids_per_pod` IDs within the `kubelet_len` IDs from `kubelet_first`,
    /// enough for `max_pods` pods; the checks are k/k `MakeUserNsManager`'s.
    pub fn new(
        ids_per_pod: u32,
        kubelet_first: u32,
        kubelet_len: u32,
        max_pods: u32,
    ) -> Result<Self, UsernsError> {
        let bad = |m: String| Err(UsernsError::Config(m));
        if ids_per_pod == 0 || ids_per_pod % IDS_PER_POD_UNIT != 0 {
            return bad(format!(
                "kubelet user namespace length {ids_per_pod} is not a multiple of {IDS_PER_POD_UNIT}"
            ));
        }
        if kubelet_first % ids_per_pod != 0 {
            return bad(format!(
                "kubelet user assigned ID {kubelet_first} is not a multiple of {ids_per_pod}"
            ));
        }
        if kubelet_first < ids_per_pod {
            // mapping host ID 0 into a pod would defeat the point
            return bad(format!(
                "kubelet user assigned ID {kubelet_first} must be greater or equal to {ids_per_pod}"
            ));
        }
        if kubelet_len % ids_per_pod != 0 {
            return bad(format!(
                "kubelet user assigned IDs length {kubelet_len} is not a multiple of {ids_per_pod}"
            ));
        }
        if kubelet_len / ids_per_pod < max_pods {
            return bad(format!(
                "kubelet user assigned IDs are not enough to support {max_pods} pods"
            ));
        }
        Ok(Self {
            ids_per_pod,
            off: kubelet_first / ids_per_pod,
            len: kubelet_len / ids_per_pod,
            by_pod: HashMap::new(),
            used: BTreeSet::new(),
            next: 0,
        })
    }

    /// IDs per pod.
    pub fn ids_per_pod(&self) -> u32 {
        self.ids_per_pod
    }

    /// The first host ID of pod `uid`'s range, if it has one.
    pub fn get(&self, uid: &str) -> Option<u32> {
        self.by_pod.get(uid).copied()
    }

    /// Gives pod `uid` a free slot and returns its first host ID (the pod's own if it has one).
    pub fn allocate(&mut self, uid: &str) -> Result<u32, UsernsError> {
        if let Some(first) = self.get(uid) {
            return Ok(first);
        }
        let free = (self.next..self.len)
            .chain(0..self.next)
            .find(|i| !self.used.contains(i))
            .ok_or(UsernsError::Exhausted)?;
        self.used.insert(free);
        self.next = (free + 1) % self.len;
        let first = (free + self.off) * self.ids_per_pod;
        self.by_pod.insert(uid.to_string(), first);
        Ok(first)
    }

    /// Records a range pod `uid` already holds (read back from its pod directory): it must be
    /// one slot, in range, and not another pod's (k/k `record`).
    pub fn record(&mut self, uid: &str, first: u32, length: u32) -> Result<(), UsernsError> {
        let bad = |m: String| Err(UsernsError::Mappings(m));
        if length != self.ids_per_pod {
            return bad(format!("wrong user namespace length {length}"));
        }
        if first % self.ids_per_pod != 0 {
            return bad(format!("wrong user namespace offset specified {first}"));
        }
        match self.get(uid) {
            Some(prev) if prev == first => return Ok(()),
            Some(_) => {
                return bad(format!(
                    "different user namespace range already used by pod {uid:?}"
                ))
            }
            None => {}
        }
        let index = (first / self.ids_per_pod).checked_sub(self.off);
        let Some(index) = index.filter(|i| *i < self.len) else {
            return bad(format!("id {first} is out of range"));
        };
        if self.used.contains(&index) {
            return bad(format!("range picked for pod {uid:?} already taken"));
        }
        self.used.insert(index);
        self.by_pod.insert(uid.to_string(), first);
        Ok(())
    }

    /// Frees pod `uid`'s slot; false when it had none.
    pub fn release(&mut self, uid: &str) -> bool {
        let Some(first) = self.by_pod.remove(uid) else {
            return false;
        };
        self.used.remove(&(first / self.ids_per_pod - self.off));
        true
    }

    /// The pods that hold a slot.
    pub fn pods(&self) -> Vec<String> {
        self.by_pod.keys().cloned().collect()
    }
}

/// Where [`kubelet_mappings`] looks the `kubelet` user up.
const PASSWD_FILE: &str = "/etc/passwd";

/// Whether `passwd` (the text of an `/etc/passwd` file) has an entry for the user `name`, read as
/// Go's `os/user.Lookup` reads it without cgo, which is how the Go kubelet is built: lines that
/// are empty or start with `#` are skipped, an entry needs at least six `:`-separated fields, and
/// NIS compat entries (`+name`, `-name`) are not users. No NSS module is asked, so a user that
/// exists only in LDAP or systemd-userdb is not found, as with the Go kubelet.
pub fn passwd_has_user(passwd: &str, name: &str) -> bool {
    passwd.lines().map(str::trim_end).any(|line| {
        if line.is_empty() || line.starts_with('#') {
            return false;
        }
        let fields: Vec<&str> = line.splitn(7, ':').collect();
        fields.len() >= 6
            && !fields[0].is_empty()
            && !fields[0].starts_with(['+', '-'])
            && fields[0] == name
    })
}

/// The range of host IDs pods' user namespaces are taken from, as the Go kubelet finds it
/// (k/k `getKubeletMappings`): with a `kubelet` user and the `getsubids` program, the one
/// range `getsubids kubelet` prints (the same for `-g`); otherwise every ID from `ids_per_pod`
/// to 2^32.
pub fn kubelet_mappings(ids_per_pod: u32) -> Result<(u32, u32), UsernsError> {
    let default = (
        ids_per_pod,
        (u64::from(u32::MAX) + 1 - u64::from(ids_per_pod)) as u32,
    );
    match std::fs::read_to_string(PASSWD_FILE) {
        Ok(passwd) if passwd_has_user(&passwd, KUBELET_USER) => {}
        Ok(_) => return Ok(default),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(default),
        Err(e) => {
            return Err(UsernsError::Config(format!(
                "looking up user {KUBELET_USER}: reading {PASSWD_FILE}: {e}"
            )))
        }
    }
    let run = |args: &[&str]| -> Result<Option<String>, UsernsError> {
        match std::process::Command::new("getsubids").args(args).output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(UsernsError::Config(format!("running getsubids: {e}"))),
            Ok(o) if !o.status.success() => Err(UsernsError::Config(format!(
                "error retrieving additional ids for user {KUBELET_USER:?}: getsubids {}: {}",
                args.join(" "),
                o.status
            ))),
            Ok(o) => Ok(Some(String::from_utf8_lossy(&o.stdout).into_owned())),
        }
    };
    let Some(uids) = run(&[KUBELET_USER])? else {
        tracing::info!("user namespaces: getsubids not found, pods get ranges from all host IDs");
        return Ok(default);
    };
    let gids = run(&["-g", KUBELET_USER])?.unwrap_or_default();
    if uids != gids {
        return Err(UsernsError::Config(format!(
            "mismatched subuids and subgids for user {KUBELET_USER:?}"
        )));
    }
    parse_getsubids(&uids).map_err(UsernsError::Config)
}

/// The user namespace ranges of this node's pods, kept in their pod directories (k/k
/// `UsernsManager`). Cheap to clone.
#[derive(Clone)]
pub struct UserNamespaceManager {
    inner: Arc<Inner>,
}

struct Inner {
    pods_dir: PathBuf,
    alloc: Mutex<Allocations>,
}

impl UserNamespaceManager {
    /// A manager for the pod directories under `<root_dir>/pods`, with `ids_per_pod` IDs per
    /// pod taken from `kubelet_mappings` (first ID, count) for up to `max_pods` pods. Reads back
    /// the ranges of the pods already on disk; a file it cannot take is an error, as in Go (the
    /// kubelet does not start rather than give one range to two pods).
    pub fn new(
        root_dir: &Path,
        ids_per_pod: u32,
        kubelet_mappings: (u32, u32),
        max_pods: u32,
    ) -> Result<Self, UsernsError> {
        let mut alloc = Allocations::new(
            ids_per_pod,
            kubelet_mappings.0,
            kubelet_mappings.1,
            max_pods,
        )?;
        let pods_dir = root_dir.join("pods");
        for uid in crate::pod::cleanup::list_pod_dirs(root_dir) {
            let path = pods_dir.join(&uid).join(MAPPINGS_FILE);
            let content = match std::fs::read(&path) {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(UsernsError::Mappings(format!(
                        "reading {}: {e}",
                        path.display()
                    )))
                }
            };
            if content.is_empty() {
                continue;
            }
            let (first, len) = MappingsFile::parse(&content).map_err(UsernsError::Mappings)?;
            alloc.record(&uid, first, len).map_err(|e| {
                UsernsError::Mappings(format!("record pod mappings for existing pod {uid:?}: {e}"))
            })?;
        }
        Ok(Self {
            inner: Arc::new(Inner {
                pods_dir,
                alloc: Mutex::new(alloc),
            }),
        })
    }

    /// The manager for `root_dir` from the kubelet configuration (`userNamespaces.idsPerPod`,
    /// `maxPods`) and the `kubelet` user's subordinate IDs.
    pub fn from_config(
        root_dir: &Path,
        ids_per_pod: u32,
        max_pods: u32,
    ) -> Result<Self, UsernsError> {
        let mappings = kubelet_mappings(ids_per_pod)?;
        Self::new(root_dir, ids_per_pod, mappings, max_pods)
    }

    fn alloc(&self) -> std::sync::MutexGuard<'_, Allocations> {
        self.inner
            .alloc
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The range pod `uid` holds, as the CRI option; None when it holds none.
    pub fn existing(&self, uid: &str) -> Option<api::UserNamespace> {
        let a = self.alloc();
        a.get(uid)
            .map(|first| MappingsFile::single(first, a.ids_per_pod()).to_cri())
    }

    /// Pod `uid`'s range, given now if it has none yet and written to its pod directory before
    /// it is used (k/k `GetOrCreateUserNamespaceMappings` after the runtime check). Blocking file
    /// work (a write and two fsyncs, the first time only).
    pub fn get_or_create(&self, uid: &str) -> Result<api::UserNamespace, UsernsError> {
        let mut a = self.alloc();
        if let Some(first) = a.get(uid) {
            return Ok(MappingsFile::single(first, a.ids_per_pod()).to_cri());
        }
        let first = a.allocate(uid)?;
        let file = MappingsFile::single(first, a.ids_per_pod());
        if let Err(e) = self.write(uid, &file) {
            a.release(uid);
            return Err(UsernsError::Mappings(format!("create user namespace: {e}")));
        }
        Ok(file.to_cri())
    }

    fn write(&self, uid: &str, file: &MappingsFile) -> std::io::Result<()> {
        let dir = self.inner.pods_dir.join(uid);
        std::fs::create_dir_all(&dir)?;
        let tmp = dir.join(format!(".{MAPPINGS_FILE}.tmp"));
        let data = serde_json::to_vec(file).map_err(std::io::Error::other)?;
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(MAPPINGS_FILE))?;
        // the rename is durable only once the directory is synced
        std::fs::File::open(&dir)?.sync_all()
    }

    /// Frees the ranges of pods whose directory is gone (`dirs`: the pod directories that
    /// exist, as [`crate::pod::cleanup::list_pod_dirs`] lists them). The pod directory goes
    /// last when a pod is cleaned up, so a range is given again only when nothing of its pod is
    /// left (k/k `CleanupOrphanedPodUsernsAllocations`).
    pub fn release_gone(&self, dirs: &[String]) {
        let mut a = self.alloc();
        for uid in a.pods() {
            if !dirs.contains(&uid) && a.release(&uid) {
                tracing::debug!(pod_uid = %uid, "released the pod's user namespace range");
            }
        }
    }

    /// The pods that hold a range.
    pub fn pods(&self) -> Vec<String> {
        self.alloc().pods()
    }
}

impl std::fmt::Debug for UserNamespaceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserNamespaceManager")
            .field("pods_dir", &self.inner.pods_dir)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwd_has_user_reads_etc_passwd_as_go_does() {
        let cases: &[(&str, &str, bool)] = &[
            ("root:x:0:0:root:/root:/bin/bash\nkubelet:x:999:999::/home/kubelet:/usr/sbin/nologin\n", "kubelet", true),
            ("root:x:0:0:root:/root:/bin/bash\n", "kubelet", false),
            ("", "kubelet", false),
            // a comment, a blank line and trailing spaces
            ("# kubelet:x:1:1::/:/bin/sh\n\nkubelet:x:999:999::/:/bin/sh   \n", "kubelet", true),
            ("# kubelet:x:1:1::/:/bin/sh\n", "kubelet", false),
            // fewer than six fields is not an entry
            ("kubelet:x:999:999\n", "kubelet", false),
            // six fields (no shell) is
            ("kubelet:x:999:999::/home/kubelet\n", "kubelet", true),
            // NIS compat entries are not users
            ("+kubelet:::::\n-kubelet:::::\n", "kubelet", false),
            ("+kubelet:::::\n", "+kubelet", false),
            // the name is the whole first field
            ("kubelet2:x:1:1::/:/bin/sh\nkube:x:1:1::/:/bin/sh\n", "kubelet", false),
            ("kubelet:x:1:1::/:/bin/sh\r\n", "kubelet", true),
        ];
        for (passwd, name, want) in cases {
            assert_eq!(
                super::passwd_has_user(passwd, name),
                *want,
                "{passwd:?} {name}"
            );
        }
    }

    use super::*;

    fn handler(name: &str, userns: Option<bool>) -> api::RuntimeHandler {
        api::RuntimeHandler {
            name: name.into(),
            features: userns.map(|u| api::RuntimeHandlerFeatures {
                user_namespaces: u,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn handler_support_is_read_from_the_runtime_handlers() {
        let both = [handler("", Some(true)), handler("kata", Some(false))];
        // (handlers, handler, expected)
        let cases: [(&[api::RuntimeHandler], &str, Result<bool, String>); 6] = [
            (&[], "", Ok(false)),
            (&both, "", Ok(true)),
            (&both, "kata", Ok(false)),
            (&[handler("", None)], "", Ok(false)),
            (
                &both,
                "gvisor",
                Err("the handler \"gvisor\" is not known".into()),
            ),
            (
                &[handler("runc", Some(true))],
                "",
                Err("the handler \"\" is not known".into()),
            ),
        ];
        for (hs, h, want) in cases {
            assert_eq!(handler_supports_user_namespaces(hs, h), want, "{h:?}");
        }
    }

    #[test]
    fn unsupported_runtimes_get_the_go_kubelets_message() {
        assert_eq!(unsupported(Ok(true)), None);
        assert_eq!(
            unsupported(Ok(false)).unwrap().to_string(),
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces"
        );
        assert_eq!(
            unsupported(Err("the handler \"\" is not known".into()))
                .unwrap()
                .to_string(),
            "can't set `spec.hostUsers: false`, runtime does not support user namespaces: the handler \"\" is not known"
        );
    }

    #[test]
    fn getsubids_output_is_one_line_of_four_fields() {
        let cases: [(&str, Result<(u32, u32), ()>); 6] = [
            ("0: kubelet 65536 2147483648\n", Ok((65536, 2147483648))),
            ("0: kubelet 65536 2147483648", Ok((65536, 2147483648))),
            ("0: kubelet 65536 2147483648\n1: kubelet 1 2\n", Err(())),
            ("0: kubelet 65536\n", Err(())),
            ("0: kubelet x 65536\n", Err(())),
            ("0: kubelet 65536 4294967296\n", Err(())),
        ];
        for (out, want) in cases {
            assert_eq!(parse_getsubids(out).map_err(|_| ()), want, "{out:?}");
        }
    }

    #[test]
    fn the_kubelet_range_is_checked_as_in_go() {
        let u = IDS_PER_POD_UNIT;
        let all = (u32::MAX - u) + 1;
        // (ids per pod, first, len, max pods, ok)
        let cases = [
            (u, u, all, 110, true),
            (2 * u, 2 * u, (u32::MAX - 2 * u) + 1, 110, true),
            (u, 0, all, 110, false),         // would map host ID 0
            (u, u + 1, all, 110, false),     // not slot-aligned
            (u, u, u * 100, 110, false),     // not enough for maxPods
            (u, u, u * 110 + 1, 110, false), // length not whole slots
            (u + 1, u + 1, all, 110, false), // not a multiple of 65536
            (u, 65536 * 32768, 65536 * 32768, 110, true), // getsubids' typical range
        ];
        for (ids, first, len, max, ok) in cases {
            assert_eq!(
                Allocations::new(ids, first, len, max).is_ok(),
                ok,
                "{ids} {first} {len} {max}"
            );
        }
    }

    #[test]
    fn slots_are_given_in_turn_kept_per_pod_and_reused_last() {
        let u = IDS_PER_POD_UNIT;
        let mut a = Allocations::new(u, u, 3 * u, 3).unwrap();
        assert_eq!(a.allocate("a"), Ok(u));
        assert_eq!(a.allocate("b"), Ok(2 * u));
        assert_eq!(a.allocate("a"), Ok(u), "a pod keeps its range");
        assert!(a.release("a"));
        assert!(!a.release("a"));
        // the slot a gave back is not the next one given
        assert_eq!(a.allocate("c"), Ok(3 * u));
        assert_eq!(a.allocate("d"), Ok(u));
        assert_eq!(a.allocate("e"), Err(UsernsError::Exhausted));
    }

    #[test]
    fn recorded_ranges_must_be_whole_free_slots_in_range() {
        let u = IDS_PER_POD_UNIT;
        let mut a = Allocations::new(u, u, 4 * u, 4).unwrap();
        assert_eq!(a.record("a", 2 * u, u), Ok(()));
        assert_eq!(a.record("a", 2 * u, u), Ok(()), "the same again is fine");
        for (uid, first, len) in [
            ("a", 3 * u, u),     // a different range for the same pod
            ("b", 2 * u, u),     // another pod's range
            ("b", 3 * u, 2 * u), // wrong length
            ("b", 3 * u + 1, u), // not aligned
            ("b", 0, u),         // below the range
            ("b", 5 * u, u),     // above it
        ] {
            assert!(a.record(uid, first, len).is_err(), "{uid} {first} {len}");
        }
        // allocation skips the recorded slot
        assert_eq!(a.allocate("c"), Ok(u));
        assert_eq!(a.allocate("d"), Ok(3 * u));
    }

    #[test]
    fn mappings_files_are_the_go_kubelets() {
        let go = br#"{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#;
        assert_eq!(MappingsFile::parse(go), Ok((131072, 65536)));
        assert_eq!(
            serde_json::to_vec(&MappingsFile::single(131072, 65536)).unwrap(),
            go.to_vec()
        );
        let bad: [&[u8]; 4] = [
            b"{",
            br#"{"uidMappings":[],"gidMappings":[]}"#,
            br#"{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}"#,
            br#"{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}"#,
        ];
        for b in bad {
            assert!(
                MappingsFile::parse(b).is_err(),
                "{}",
                String::from_utf8_lossy(b)
            );
        }
        let cri = MappingsFile::single(65536, 65536).to_cri();
        assert_eq!(cri.mode, api::NamespaceMode::Pod as i32);
        assert_eq!(cri.uids, cri.gids);
        assert_eq!(
            (
                cri.uids[0].host_id,
                cri.uids[0].container_id,
                cri.uids[0].length
            ),
            (65536, 0, 65536)
        );
    }

    #[test]
    fn ranges_survive_a_restart_and_are_freed_with_their_pod_directory() {
        let dir = std::env::temp_dir().join(format!("deckhand-userns-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        struct Tmp(PathBuf);
        impl Tmp {
            fn path(&self) -> &Path {
                &self.0
            }
        }
        impl Drop for Tmp {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let tmp = Tmp(dir);
        let u = IDS_PER_POD_UNIT;
        let m = UserNamespaceManager::new(tmp.path(), u, (u, 8 * u), 8).unwrap();
        let a = m.get_or_create("pod-a").unwrap();
        let b = m.get_or_create("pod-b").unwrap();
        assert_ne!(a.uids, b.uids);
        assert_eq!(m.get_or_create("pod-a").unwrap(), a);
        let file = tmp.path().join("pods/pod-a").join(MAPPINGS_FILE);
        assert!(file.exists());
        // a new manager (deckhand restarted) reads the ranges back
        let m2 = UserNamespaceManager::new(tmp.path(), u, (u, 8 * u), 8).unwrap();
        assert_eq!(m2.existing("pod-a"), Some(a.clone()));
        assert_eq!(m2.existing("pod-b"), Some(b.clone()));
        assert_eq!(m2.existing("pod-c"), None);
        // pod-a's directory is gone: its range is free, pod-b keeps its own
        std::fs::remove_dir_all(tmp.path().join("pods/pod-a")).unwrap();
        m2.release_gone(&crate::pod::cleanup::list_pod_dirs(tmp.path()));
        assert_eq!(m2.pods(), vec!["pod-b".to_string()]);
        // a file the manager cannot take stops it, rather than give one range to two pods
        std::fs::create_dir_all(tmp.path().join("pods/pod-c")).unwrap();
        std::fs::copy(
            tmp.path().join("pods/pod-b").join(MAPPINGS_FILE),
            tmp.path().join("pods/pod-c").join(MAPPINGS_FILE),
        )
        .unwrap();
        assert!(UserNamespaceManager::new(tmp.path(), u, (u, 8 * u), 8).is_err());
    }
}
