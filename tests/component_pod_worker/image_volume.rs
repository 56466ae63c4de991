//! Image volumes (KEP-4639) through the pod workers: the image is pulled per the volume's
//! `pullPolicy` and CreateContainer gets a CRI mount naming the image, with no host path; on a
//! runtime without image volume support the pod gets the clear volume error; a reference that does
//! not parse is the container's `InvalidImageName`, not a panic.

use super::harness::*;
use deckhand::cri::api;
use serde_json::json;
use std::time::Duration;

fn image_volume_pod(
    name: &str,
    reference: &str,
    pull_policy: &str,
) -> k8s_openapi::api::core::v1::Pod {
    pod(
        name,
        "Always",
        json!({
            "containers": [{"name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "img", "mountPath": "/volume"},
                                 {"name": "img", "mountPath": "/etc-of-image", "subPath": "etc"}]}],
            "volumes": [{"name": "img", "image": {"reference": reference, "pullPolicy": pull_policy}}],
        }),
    )
}

fn image_mounts(c: &deckhand::cri::fake::FakeContainer) -> Vec<api::Mount> {
    c.config
        .mounts
        .iter()
        .filter(|m| m.image.is_some())
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn image_volume_is_pulled_and_mounted_as_a_cri_image_mount() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.add_image("busybox:1.36");
    let p = image_volume_pod("iv", "kitten:1.8", "Always");
    h.apply(&p).await;
    h.status_in_phase("iv", "Running", Duration::from_secs(10))
        .await;
    let c = h.runtime.running("main").expect("main runs");
    let mounts = image_mounts(&c);
    assert_eq!(mounts.len(), 2, "{:?}", c.config.mounts);
    for (m, path, sub) in [
        (&mounts[0], "/volume", ""),
        (&mounts[1], "/etc-of-image", "etc"),
    ] {
        assert_eq!(m.container_path, path);
        assert_eq!(m.host_path, "", "an image mount has no host path");
        assert!(m.readonly, "image volumes are read-only");
        assert_eq!(m.image_sub_path, sub);
        let image = m.image.as_ref().unwrap();
        assert_eq!(image.user_specified_image, "kitten:1.8");
        assert!(
            image.image.starts_with("sha256:"),
            "the pulled image's ref: {image:?}"
        );
    }
    // pulled (policy Always) once for the volume; busybox was present
    assert_eq!(h.runtime.count("PullImage"), 1, "{:?}", h.runtime.calls());
    let events = h.events();
    assert!(events.iter().any(|e| e == "Pulling"), "{events:?}");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn image_volume_present_with_if_not_present_is_not_pulled() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.add_image("busybox:1.36");
    h.runtime.add_image("kitten:1.8");
    let p = image_volume_pod("iv", "kitten:1.8", "IfNotPresent");
    h.apply(&p).await;
    h.status_in_phase("iv", "Running", Duration::from_secs(10))
        .await;
    assert_eq!(h.runtime.count("PullImage"), 0, "{:?}", h.runtime.calls());
    let c = h.runtime.running("main").expect("main runs");
    assert_eq!(image_mounts(&c).len(), 2);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn image_volume_missing_with_never_keeps_the_container_waiting() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.add_image("busybox:1.36");
    let p = image_volume_pod("iv", "kitten:1.8", "Never");
    h.apply(&p).await;
    let w = eventually(Duration::from_secs(10), "ErrImageNeverPull", || {
        h.waiting("iv", "main")
            .filter(|(r, _)| r == "ErrImageNeverPull")
    })
    .await;
    assert!(w.1.contains("kitten:1.8"), "{w:?}");
    assert_eq!(h.runtime.count("CreateContainer"), 0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn image_volume_with_an_invalid_reference_is_invalid_image_name() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.add_image("busybox:1.36");
    let p = image_volume_pod("iv", "Not//A Valid:Ref", "Always");
    h.apply(&p).await;
    let w = eventually(Duration::from_secs(10), "InvalidImageName", || {
        h.waiting("iv", "main")
            .filter(|(r, _)| r == "InvalidImageName")
    })
    .await;
    assert!(w.1.contains("Not//A Valid:Ref"), "{w:?}");
    assert_eq!(h.runtime.count("CreateContainer"), 0);
    assert_eq!(h.runtime.count("PullImage"), 0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn image_volume_on_a_runtime_without_support_is_the_clear_pod_error() {
    let h = Harness::start_with(fake_runtime(), false).await;
    h.runtime.add_image("busybox:1.36");
    let p = image_volume_pod("iv", "kitten:1.8", "Always");
    h.apply(&p).await;
    h.event_recorded("FailedMount", Duration::from_secs(10))
        .await;
    keep_poking(&h, &p, Duration::from_secs(1)).await;
    assert_eq!(h.runtime.count("CreateContainer"), 0);
    assert_eq!(h.runtime.count("PullImage"), 0);
    assert_eq!(h.phase("iv").as_deref(), Some("Pending"));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn image_volume_pull_failure_backs_off_quoting_the_pull_error() {
    let h = Harness::start(fake_runtime()).await;
    h.runtime.add_image("busybox:1.36");
    h.runtime.inject_error(
        "PullImage",
        tonic::Status::not_found("kitten:1.8: not found"),
    );
    let p = image_volume_pod("iv", "kitten:1.8", "Always");
    h.apply(&p).await;
    let (_, msg) = eventually(Duration::from_secs(10), "ErrImagePull", || {
        h.waiting("iv", "main").filter(|(r, _)| r == "ErrImagePull")
    })
    .await;
    assert!(msg.contains("not found"), "{msg}");
    assert_eq!(h.runtime.count("CreateContainer"), 0);
    // the next sync inside the pull back-off: ImagePullBackOff quoting the pull error
    h.poke(&p).await;
    let (_, msg) = eventually(Duration::from_secs(5), "ImagePullBackOff", || {
        h.waiting("iv", "main")
            .filter(|(r, _)| r == "ImagePullBackOff")
    })
    .await;
    assert!(
        msg.starts_with("Back-off pulling image \"kitten:1.8\": ErrImagePull: ")
            && msg.contains("not found"),
        "{msg}"
    );
    assert!(h.events().iter().any(|e| e == "Failed"), "{:?}", h.events());
    // after the back-off the pull is tried again and the container starts
    h.status_in_phase("iv", "Running", Duration::from_secs(60))
        .await;
    let c = h.runtime.running("main").expect("main runs");
    assert_eq!(image_mounts(&c).len(), 2);
    h.stop().await;
}
