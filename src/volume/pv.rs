//! PersistentVolumeClaim volumes (and generic ephemeral ones, whose claim is `<pod>-<volume>`):
//! the claim resolved to its bound PersistentVolume as the Go kubelet's desired-state populator
//! does (k/k `pkg/kubelet/volumemanager/populator` `getPVCExtractPV`, `getPVSpec`, with its
//! messages), then the volume of the PV's kind: `hostPath` (used in place, with its type check,
//! as k/k `pkg/volume/hostpath`) or `local` (bind-mounted at
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv-name>`, read-only when the claim
//! is, `fsGroup` ownership with `fsGroupChangePolicy`, as k/k `pkg/volume/local`). Block volume
//! mode is not implemented: such a claim is an error on the pod.
//!
//! The decisions are pure ([`claim_volume_name`], [`check_bound_pv`], [`pv_source`],
//! [`volumes_in_use`], [`ownership_change_needed`]); [`setup_claim`] does the API reads and the
//! mount.

use super::{io_err, VolumeError};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use std::path::{Path, PathBuf};

/// The plugin directory of `local` PVs (k/k `localVolumePluginName`, escaped).
pub const LOCAL_VOLUME_DIR: &str = "kubernetes.io~local-volume";
/// The unique volume name prefix of `local` PVs in `node.status.volumesInUse`.
pub const LOCAL_VOLUME_PLUGIN: &str = "kubernetes.io/local-volume";
/// The finalizer that keeps a claim in use (k/k `util.PVCProtectionFinalizer`).
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

/// The claim a pod volume uses: `persistentVolumeClaim.claimName`, or for a generic `ephemeral`
/// volume `<pod name>-<volume name>` (k8s.io/component-helpers `ephemeral.VolumeClaimName`), and
/// whether the pod asks for it read-only. `None` for other volumes.
pub fn claim_of(pod: &Pod, v: &Volume) -> Option<(String, bool)> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some((c.claim_name.clone(), c.read_only.unwrap_or(false)));
    }
    v.ephemeral.as_ref().map(|_| {
        let pod_name = pod.metadata.name.as_deref().unwrap_or("");
        (format!("{pod_name}-{}", v.name), false)
    })
}

/// The PV a claim is bound to (k/k `getPVCExtractPV`): a claim being deleted without the
/// protection finalizer, one not Bound, or one with no volume name is an error with the Go
/// kubelet's text.
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> Result<String, String> {
    let deleting = pvc.metadata.deletion_timestamp.is_some();
    let protected = pvc
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == PVC_PROTECTION_FINALIZER);
    if deleting && !protected {
        return Err("PVC is being deleted".into());
    }
    if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    match pvc.spec.as_ref().and_then(|s| s.volume_name.clone()) {
        Some(n) if !n.is_empty() => Ok(n),
        _ => Err("PVC has empty pvc.Spec.VolumeName".into()),
    }
}

/// A generic ephemeral volume's claim must be owned by the pod (k8s.io/component-helpers
/// `ephemeral.VolumeIsForPod`): a claim of the same name made by someone else is not used.
pub fn ephemeral_claim_is_for_pod(pod: &Pod, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let owned = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true));
    if owned {
        Ok(())
    } else {
        Err(format!(
            "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
            pvc.metadata.namespace.as_deref().unwrap_or(""),
            pvc.metadata.name.as_deref().unwrap_or(""),
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        ))
    }
}

/// The PV must be bound to this claim (k/k `getPVSpec`), with the Go kubelet's text.
pub fn check_bound_pv(pv: &PersistentVolume, claim_uid: &str) -> Result<(), String> {
    let name = pv.metadata.name.as_deref().unwrap_or("");
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Err(format!(
            "found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let got = r.uid.as_deref().unwrap_or("");
    if got != claim_uid {
        return Err(format!(
            "found PV object {name} but its pv.Spec.ClaimRef.UID {got} does not point to claim.UID {claim_uid}"
        ));
    }
    Ok(())
}

/// What a bound PV gives the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PvSource {
    /// A host path, used in place (no mount), with its `type` check.
    HostPath {
        /// The path.
        path: String,
        /// `hostPath.type`.
        type_: Option<String>,
    },
    /// A local path, bind-mounted into the pod's volume directory.
    Local {
        /// The path on the node.
        path: String,
    },
}

/// The PV's source, or why deckhand cannot use it: a kind other than hostPath and local, or
/// `volumeMode: Block`.
pub fn pv_source(pv: &PersistentVolume) -> Result<PvSource, String> {
    let spec = pv.spec.as_ref().ok_or("the PV has no spec")?;
    if spec.volume_mode.as_deref() == Some("Block") {
        return Err(format!(
            "PV {}: volumeMode Block is not supported by deckhand",
            pv.metadata.name.as_deref().unwrap_or("")
        ));
    }
    if let Some(h) = &spec.host_path {
        return Ok(PvSource::HostPath {
            path: h.path.clone(),
            type_: h.type_.clone(),
        });
    }
    if let Some(l) = &spec.local {
        return Ok(PvSource::Local {
            path: l.path.clone(),
        });
    }
    Err(format!(
        "PV {}: unsupported volume type (deckhand mounts hostPath and local persistent volumes)",
        pv.metadata.name.as_deref().unwrap_or("")
    ))
}

/// The Go kubelet's wording for a claim that cannot be used (`WaitForAttachAndMount`, the
/// `FailedMount` event): `unmounted volumes=[v], unattached volumes=[v], failed to process
/// volumes=[v]: error processing PVC ns/claim: <why>`.
pub fn claim_error(volume: &str, ns: &str, claim: &str, why: &str) -> String {
    format!(
        "unmounted volumes=[{volume}], unattached volumes=[{volume}], failed to process volumes=[{volume}]: error processing PVC {ns}/{claim}: {why}"
    )
}

/// Whether `fsGroup` ownership must be applied to a volume whose root has `root_gid` and mode
/// `root_mode` (k/k `pkg/volume/volume_linux.go`): always with `fsGroupChangePolicy: Always`
/// (the default); with `OnRootMismatch` only when the root's group is not `gid` or it lacks the
/// setgid bit or group read/write/execute.
pub fn ownership_change_needed(
    policy: Option<&str>,
    root_gid: u32,
    root_mode: u32,
    gid: u32,
) -> bool {
    if policy != Some("OnRootMismatch") {
        return true;
    }
    let wanted = 0o2000 | 0o070;
    root_gid != gid || root_mode & wanted != wanted
}

/// `node.status.volumesInUse` for the local PVs mounted in the pods' directories
/// (`<pod>/volumes/kubernetes.io~local-volume/<pv>` entries under `<root-dir>/pods`): the Go
/// kubelet's unique volume names `kubernetes.io/local-volume/<pv>`, sorted, without duplicates.
pub fn volumes_in_use(pv_names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut v: Vec<String> = pv_names
        .into_iter()
        .map(|n| format!("{LOCAL_VOLUME_PLUGIN}/{n}"))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The names of the local PVs that pods have directories for under `root_dir` (read from the
/// pods' volume directories, the kubelet's actual state on disk).
pub fn local_volumes_on_disk(root_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(pods) = std::fs::read_dir(root_dir.join("pods")) else {
        return out;
    };
    for p in pods.flatten() {
        let dir = p.path().join("volumes").join(LOCAL_VOLUME_DIR);
        if let Ok(rd) = std::fs::read_dir(dir) {
            out.extend(
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    out
}

/// True when something is mounted at `dir` (per `/proc/self/mountinfo`; a bind mount from the
/// same filesystem has the same device number, so comparing devices is not enough).
pub fn mounted_at(dir: &Path) -> bool {
    let want = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .any(|m| m.replace("\\040", " ") == want)
}

/// Bind-mounts the local PV path `src` at `dir` (made if missing), read-only when asked, unless
/// something is mounted there already (a restart of deckhand); applies `fs_group` ownership with
/// `policy` when writable. Blocking.
///
/// Errors: a missing local path (the Go kubelet's "path ... does not exist"), a failed mount.
pub fn mount_local(
    src: &Path,
    dir: &Path,
    read_only: bool,
    fs_group: Option<u32>,
    policy: Option<&str>,
) -> Result<(), VolumeError> {
    use nix::mount::{mount, MsFlags};
    if !src.exists() {
        return Err(VolumeError::Io {
            op: "local volume",
            path: src.display().to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "path does not exist"),
        });
    }
    std::fs::create_dir_all(dir).map_err(io_err("create volume directory", dir))?;
    if !mounted_at(dir) {
        mount(Some(src), dir, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(|e| {
            VolumeError::Io {
                op: "bind-mount local volume",
                path: dir.display().to_string(),
                source: e.into(),
            }
        })?;
        if read_only {
            mount(
                None::<&str>,
                dir,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
                None::<&str>,
            )
            .map_err(|e| VolumeError::Io {
                op: "remount local volume read-only",
                path: dir.display().to_string(),
                source: e.into(),
            })?;
        }
    }
    if let (Some(gid), false) = (fs_group, read_only) {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(dir).map_err(io_err("inspect volume", dir))?;
        if ownership_change_needed(policy, md.gid(), md.mode(), gid) {
            super::set_volume_ownership(dir, gid, false)?;
        }
    }
    Ok(())
}

/// Where a claim's volume is for the pod with `uid` under `root_dir`, given its PV: a hostPath
/// PV's path after its type check, or a local PV's mount directory (mounted). Blocking.
///
/// Errors: the type check, the local mount ([`mount_local`]).
pub fn set_up(
    root_dir: &Path,
    uid: &str,
    pv_name: &str,
    source: &PvSource,
    read_only: bool,
    fs_group: Option<u32>,
    policy: Option<&str>,
) -> Result<PathBuf, VolumeError> {
    match source {
        PvSource::HostPath { path, type_ } => super::check_host_path(path, type_.as_deref()),
        PvSource::Local { path } => {
            super::validate_relative(pv_name)?;
            let dir = super::pod_dir(root_dir, uid)
                .join("volumes")
                .join(LOCAL_VOLUME_DIR)
                .join(pv_name);
            mount_local(Path::new(path), &dir, read_only, fs_group, policy)?;
            Ok(dir)
        }
    }
}

/// Resolves the claim of pod volume `v` through the API (the claim, its PV), as the Go
/// kubelet's populator does, and sets the volume up ([`set_up`]). The error text is the Go
/// kubelet's ([`claim_error`]) for a claim or PV that cannot be used.
///
/// Errors: [`VolumeError::Claim`] for the claim and PV checks; set-up errors.
pub async fn setup_claim(
    client: &kube::Client,
    root_dir: &Path,
    pod: &Pod,
    v: &Volume,
    claim: &str,
    read_only: bool,
) -> Result<PathBuf, VolumeError> {
    use kube::api::Api;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let fail = |why: String| VolumeError::Claim {
        message: claim_error(&v.name, &ns, claim, &why),
    };
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc = pvcs
        .get(claim)
        .await
        .map_err(|e| fail(format!("failed to fetch PVC from API server: {e}")))?;
    if v.ephemeral.is_some() {
        ephemeral_claim_is_for_pod(pod, &pvc).map_err(|why| VolumeError::Claim { message: why })?;
    }
    let pv_name = claim_volume_name(&pvc).map_err(fail)?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs
        .get(&pv_name)
        .await
        .map_err(|e| fail(format!("failed to fetch PV {pv_name} from API server: {e}")))?;
    check_bound_pv(&pv, pvc.metadata.uid.as_deref().unwrap_or("")).map_err(fail)?;
    let source = pv_source(&pv).map_err(fail)?;
    let sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let fs_group = sc
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok());
    let policy = sc.and_then(|s| s.fs_group_change_policy.clone());
    let root = root_dir.to_path_buf();
    let uid = crate::pod::uid(pod).to_string();
    let path_for_err = root_dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        set_up(
            &root,
            &uid,
            &pv_name,
            &source,
            read_only,
            fs_group,
            policy.as_deref(),
        )
    })
    .await
    .map_err(|e| VolumeError::Io {
        op: "set up persistent volume",
        path: path_for_err.display().to_string(),
        source: std::io::Error::other(e),
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        HostPathVolumeSource, LocalVolumeSource, ObjectReference, PersistentVolumeClaimSpec,
        PersistentVolumeClaimStatus, PersistentVolumeSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pvc(
        phase: &str,
        volume: Option<&str>,
        deleting: bool,
        finalizer: bool,
    ) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        c.metadata.name = Some("data".into());
        c.metadata.namespace = Some("default".into());
        c.metadata.uid = Some("claim-uid".into());
        if deleting {
            c.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        if finalizer {
            c.metadata.finalizers = Some(vec![PVC_PROTECTION_FINALIZER.into()]);
        }
        c.spec = Some(PersistentVolumeClaimSpec {
            volume_name: volume.map(String::from),
            ..Default::default()
        });
        c.status = Some(PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        c
    }

    #[test]
    fn a_claim_resolves_to_its_pv_only_when_bound_and_not_being_deleted() {
        let cases: &[(&str, PersistentVolumeClaim, Result<&str, &str>)] = &[
            ("bound", pvc("Bound", Some("pv1"), false, true), Ok("pv1")),
            (
                "pending",
                pvc("Pending", None, false, true),
                Err("PVC is not bound"),
            ),
            (
                "bound, no volume name",
                pvc("Bound", None, false, true),
                Err("PVC has empty pvc.Spec.VolumeName"),
            ),
            (
                "deleted, unprotected",
                pvc("Bound", Some("pv1"), true, false),
                Err("PVC is being deleted"),
            ),
            // the protection finalizer keeps it usable until the pods using it are gone
            (
                "deleted, protected",
                pvc("Bound", Some("pv1"), true, true),
                Ok("pv1"),
            ),
        ];
        for (case, c, want) in cases {
            assert_eq!(
                claim_volume_name(c).as_deref().map_err(String::as_str),
                *want,
                "{case}"
            );
        }
        assert_eq!(
            claim_error("d", "default", "data", "PVC is not bound"),
            "unmounted volumes=[d], unattached volumes=[d], failed to process volumes=[d]: error processing PVC default/data: PVC is not bound"
        );
    }

    fn pv(claim_uid: Option<&str>, spec: PersistentVolumeSpec) -> PersistentVolume {
        let mut p = PersistentVolume::default();
        p.metadata.name = Some("pv1".into());
        p.spec = Some(PersistentVolumeSpec {
            claim_ref: claim_uid.map(|u| ObjectReference {
                uid: Some(u.into()),
                ..Default::default()
            }),
            ..spec
        });
        p
    }

    #[test]
    fn the_pv_must_point_back_at_the_claim_and_be_of_a_kind_deckhand_mounts() {
        let local = PersistentVolumeSpec {
            local: Some(LocalVolumeSource {
                path: "/mnt/disks/vol1".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            check_bound_pv(&pv(Some("claim-uid"), local.clone()), "claim-uid"),
            Ok(())
        );
        assert_eq!(
            check_bound_pv(&pv(None, local.clone()), "claim-uid").unwrap_err(),
            "found PV object pv1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        assert_eq!(
            check_bound_pv(&pv(Some("other"), local.clone()), "claim-uid").unwrap_err(),
            "found PV object pv1 but its pv.Spec.ClaimRef.UID other does not point to claim.UID claim-uid"
        );
        assert_eq!(
            pv_source(&pv(Some("u"), local.clone())),
            Ok(PvSource::Local {
                path: "/mnt/disks/vol1".into()
            })
        );
        let host = PersistentVolumeSpec {
            host_path: Some(HostPathVolumeSource {
                path: "/data".into(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            pv_source(&pv(Some("u"), host)),
            Ok(PvSource::HostPath {
                path: "/data".into(),
                type_: Some("DirectoryOrCreate".into())
            })
        );
        let block = PersistentVolumeSpec {
            volume_mode: Some("Block".into()),
            ..local
        };
        assert!(pv_source(&pv(Some("u"), block))
            .unwrap_err()
            .contains("volumeMode Block"));
        let nfs = pv(Some("u"), PersistentVolumeSpec::default());
        assert!(pv_source(&nfs)
            .unwrap_err()
            .contains("unsupported volume type"));
    }

    #[test]
    fn fs_group_on_root_mismatch_skips_a_volume_whose_root_is_already_right() {
        let cases = [
            ("Always by default", None, 1000, 0o2775, 1000, true),
            (
                "OnRootMismatch, matching",
                Some("OnRootMismatch"),
                1000,
                0o2775,
                1000,
                false,
            ),
            (
                "OnRootMismatch, other group",
                Some("OnRootMismatch"),
                0,
                0o2775,
                1000,
                true,
            ),
            (
                "OnRootMismatch, no setgid",
                Some("OnRootMismatch"),
                1000,
                0o0775,
                1000,
                true,
            ),
            (
                "OnRootMismatch, group not writable",
                Some("OnRootMismatch"),
                1000,
                0o2755,
                1000,
                true,
            ),
            ("Always", Some("Always"), 1000, 0o2775, 1000, true),
        ];
        for (case, policy, gid, mode, want_gid, want) in cases {
            assert_eq!(
                ownership_change_needed(policy, gid, mode, want_gid),
                want,
                "{case}"
            );
        }
    }

    #[test]
    fn volumes_in_use_are_the_go_kubelets_unique_names() {
        assert_eq!(
            volumes_in_use(["pv-b".to_string(), "pv-a".into(), "pv-b".into()]),
            vec![
                "kubernetes.io/local-volume/pv-a",
                "kubernetes.io/local-volume/pv-b"
            ]
        );
    }

    #[test]
    fn the_claim_of_an_ephemeral_volume_is_named_after_the_pod_and_must_be_owned_by_it() {
        let mut p = Pod::default();
        p.metadata.name = Some("web-0".into());
        p.metadata.uid = Some("pod-uid".into());
        let v: Volume = serde_json::from_value(serde_json::json!({
            "name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}
        }))
        .unwrap();
        assert_eq!(claim_of(&p, &v), Some(("web-0-scratch".into(), false)));
        let v: Volume = serde_json::from_value(serde_json::json!({
            "name": "d", "persistentVolumeClaim": {"claimName": "c", "readOnly": true}
        }))
        .unwrap();
        assert_eq!(claim_of(&p, &v), Some(("c".into(), true)));
        let mut c = pvc("Bound", Some("pv1"), false, true);
        assert!(ephemeral_claim_is_for_pod(&p, &c).is_err());
        c.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                uid: "pod-uid".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        assert!(ephemeral_claim_is_for_pod(&p, &c).is_ok());
    }
}
