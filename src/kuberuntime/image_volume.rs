//! Image volumes (KEP-4639, `volumes[].image: {reference, pullPolicy}`): an OCI image the runtime
//! mounts read-only into a container. Whether the runtime can do it is the pure
//! [`runtime_supports_image_volumes`]; [`ensure_image_volumes`] pulls a pod's image volumes once
//! per sync as the Go kubelet's `getImageVolumes` does (k/k
//! `pkg/kubelet/kuberuntime/kuberuntime_manager.go`), and [`container_image_volumes`] picks the
//! ones a container mounts (`toKubeContainerImageVolumes`). The CRI mounts themselves are built by
//! [`crate::volume::container_mounts`].

use super::SyncContext;
use crate::backoff::Backoff;
use crate::cri::api;
use crate::events::reason;
use crate::pod::actions::Waiting;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::BTreeMap;
use tracing::Instrument;

/// The first containerd release whose CRI plugin mounts image volumes (containerd 2.1).
const CONTAINERD_MIN: (u64, u64) = (2, 1);
/// The first CRI-O release that mounts image volumes (CRI-O 1.31, alpha with Kubernetes 1.31).
const CRIO_MIN: (u64, u64) = (1, 31);

/// Whether the runtime that answered CRI `Version` with `runtime_name` and `runtime_version`
/// mounts image volumes (CRI `Mount.image`): containerd 2.1 or later (`v2.4.2`, `2.1.0`), CRI-O
/// 1.31 or later. Anything else is a no, on purpose: a runtime that does not know `Mount.image`
/// sees a mount with an empty host path, which fails with a confusing runtime error or, worse,
/// mounts something else; refusing gives the pod the clear
/// [`crate::volume::VolumeError::ImageVolumeUnsupported`] instead. Versions are read as the Go
/// kubelet reads them ([`crate::node::status::parse_generic_version`]: a leading `v`, a Debian
/// suffix such as `1.6.20~ds1`); one that does not parse is a no.
///
/// The Go kubelet does not check: it always asks and lets the runtime fail the container. Deckhand
/// runs on Debian's containerd 1.6 too, which ignores the field.
pub fn runtime_supports_image_volumes(runtime_name: &str, runtime_version: &str) -> bool {
    let min = match runtime_name {
        "containerd" => CONTAINERD_MIN,
        "cri-o" => CRIO_MIN,
        _ => return false,
    };
    let Some(v) = crate::node::status::parse_generic_version(runtime_version) else {
        return false;
    };
    let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= min,
        _ => false,
    }
}

/// The outcome of ensuring each image volume of a pod, by volume name: the CRI image to mount, or
/// the waiting state a container mounting it gets (Go `imageVolumePulls`).
pub type ImageVolumePulls = BTreeMap<String, Result<api::ImageSpec, Waiting>>;

/// Ensures every image volume of `pod` is on the node, with the volume's `pullPolicy` and the
/// pod's pull secrets, through the same puller as container images (events `Pulling`, `Pulled`,
/// `Failed`, `BackOff` on the pod, the pull back-off keyed by pod and image): the Go kubelet's
/// `getImageVolumes`, called once per sync before containers start. A failed volume does not
/// stop the others; its result is the waiting state (`InvalidImageName`, `ErrImagePull`,
/// `ImagePullBackOff`, `ErrImageNeverPull`, ...). `waiting` holds the containers' last waiting
/// states by name: a back-off message quotes the previous pull error of a container mounting the
/// volume, as the Go puller's `prevPullErrMsg` does.
pub async fn ensure_image_volumes(
    ctx: &SyncContext,
    pod: &Pod,
    sandbox_config: &api::PodSandboxConfig,
    image_backoff: &mut Backoff,
    waiting: &BTreeMap<String, Waiting>,
) -> ImageVolumePulls {
    let mut out = ImageVolumePulls::new();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    for v in volumes.into_iter().flatten() {
        let Some(src) = &v.image else { continue };
        let reference = src.reference.clone().unwrap_or_default();
        let span = tracing::info_span!("image_volume", volume = %v.name, image = %reference);
        let req = super::image::ImageRequest {
            container: None,
            requested: &reference,
            pull_policy: src.pull_policy.as_deref(),
        };
        let previous = previous_pull_error(pod, &v.name, waiting);
        let res =
            super::image::ensure_image_ref(ctx, pod, &req, sandbox_config, image_backoff, previous)
                .instrument(span)
                .await
                .map(|ensured| api::ImageSpec {
                    image: ensured.image_ref,
                    user_specified_image: reference.clone(),
                    annotations: pod
                        .metadata
                        .annotations
                        .clone()
                        .unwrap_or_default()
                        .into_iter()
                        .collect(),
                    ..Default::default()
                });
        if let Err(w) = &res {
            tracing::info!(volume = %v.name, image = %reference, reason = %w.reason, "image volume not ready");
        }
        out.insert(v.name.clone(), res);
    }
    out
}

/// The last image pull error of a container that mounts volume `volume`, if any.
fn previous_pull_error<'a>(
    pod: &Pod,
    volume: &str,
    waiting: &'a BTreeMap<String, Waiting>,
) -> Option<&'a Waiting> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter(|c| c.volume_mounts.iter().flatten().any(|m| m.name == volume))
        .filter_map(|c| waiting.get(&c.name))
        .find(|w| w.reason.is_image_pull())
}

/// The image volumes container `c` mounts, by volume name, from the pod's `pulls`: the Go
/// kubelet's `toKubeContainerImageVolumes`. Each mount of a volume that failed is a `Failed`
/// warning (`Error: <reason>`) on the container.
///
/// Errors: the waiting state of the last failed volume the container mounts; the container is not
/// created.
pub fn container_image_volumes(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
    pulls: &ImageVolumePulls,
) -> Result<BTreeMap<String, api::ImageSpec>, Waiting> {
    let mut out = BTreeMap::new();
    let mut last_err = None;
    for m in c.volume_mounts.iter().flatten() {
        match pulls.get(&m.name) {
            None => {}
            Some(Ok(spec)) => {
                out.insert(m.name.clone(), spec.clone());
            }
            Some(Err(w)) => {
                ctx.recorder.pod(
                    pod,
                    Some(&c.name),
                    true,
                    reason::FAILED,
                    format!("Error: {}", w.reason),
                );
                last_err = Some(w.clone());
            }
        }
    }
    match last_err {
        Some(w) => Err(w),
        None => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_volume_support_follows_the_runtime_and_its_version() {
        let cases = [
            ("containerd", "v2.4.2", true),
            ("containerd", "2.1.0", true),
            ("containerd", "v2.1.0-rc.1", true),
            ("containerd", "v2.0.5", false),
            ("containerd", "1.6.20~ds1", false),
            ("containerd", "1.7.27", false),
            ("containerd", "v3.0.0", true),
            ("cri-o", "1.31.0", true),
            ("cri-o", "1.30.4", false),
            ("cri-o", "1.33.1", true),
            ("fake", "9.9.9", false),
            ("", "", false),
            ("containerd", "", false),
            ("containerd", "garbage", false),
            ("containerd", "v2", false),
        ];
        for (name, version, want) in cases {
            assert_eq!(
                runtime_supports_image_volumes(name, version),
                want,
                "{name} {version}"
            );
        }
    }
}
