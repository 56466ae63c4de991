//! End-to-end test of image volumes (KEP-4639, issue 17) against the real local cluster of
//! hack/local-up.sh. On containerd 2.x (`CONTAINERD=2`, 2.1 or later) deckhand pulls the volume's
//! image and asks the runtime for a CRI image mount: the container reads the image's files at the
//! mount path and under a subPath, read-only. On Debian's containerd 1.6, which has no CRI image
//! volume support, the pod stays Pending with deckhand's clear `FailedMount` error and no
//! container is created.
//!
//! Run with `cargo test --profile ci --test e2e -- image_volume:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use k8s_openapi::api::core::v1::Pod;

/// The image mounted as a volume: the e2e tests' busybox from the local registry. Its rootfs has
/// every applet in /bin, so /bin/busybox is a file the mount must show.
const VOLUME_IMAGE: &str = "busybox:1.36";

fn image_volume_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "deckhand-e2e"}},
        "spec": {
            "nodeName": env().node_name(),
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": "busybox",
                "command": ["sh", "-c", "sleep 3600"],
                "volumeMounts": [
                    {"name": "img", "mountPath": "/volume"},
                    {"name": "img", "mountPath": "/image-bin", "subPath": "bin"},
                ],
            }],
            "volumes": [{"name": "img", "image": {"reference": VOLUME_IMAGE, "pullPolicy": "Always"}}],
        },
    }))
    .expect("a valid pod")
}

fn exec(ns: &str, name: &str, script: &str) -> Output {
    kubectl_raw(&[
        "-n", ns, "exec", name, "-c", "main", "--", "sh", "-c", script,
    ])
}

#[tokio::test]
async fn image_volume_is_mounted_on_containerd_2_and_refused_clearly_on_1_6() {
    let client = client().await;
    let ns = TestNs::new(&client, "imgvol").await;
    let api = ns.pods();
    ns.create_pod(&image_volume_pod("iv")).await;
    if env().containerd_mode() == "2" {
        wait_running(&api, "iv").await;
        let out = exec(
            &ns.name,
            "iv",
            "test -f /volume/bin/busybox && test -f /image-bin/busybox && echo both-there",
        );
        assert!(
            out.stdout.contains("both-there"),
            "the image's /bin/busybox at /volume and through subPath bin: {} {}\n{}",
            out.stdout,
            out.stderr,
            diagnose(&ns.name, "iv")
        );
        let out = exec(&ns.name, "iv", "touch /volume/x");
        assert!(
            !out.status.success(),
            "the image volume is read-only: {}",
            out.stdout
        );
        // pullPolicy Always pulls the volume's image (events may come after the status)
        wait_event_containing(
            &ns.name,
            "iv",
            &format!("Normal Pulling: Pulling image \"{VOLUME_IMAGE}\""),
        )
        .await;
    } else {
        // containerd 1.6: no CRI image volume support; the pod says so and nothing starts
        let want = "image volumes are not supported: they need a container runtime with CRI image volume support (containerd 2.1 or later)";
        let events = wait_event_containing(&ns.name, "iv", want).await;
        assert!(events.contains("Warning FailedMount"), "{events}");
        let p = api.get("iv").await.unwrap();
        assert_eq!(phase(&p), "Pending", "{}", diagnose(&ns.name, "iv"));
        assert_eq!(
            waiting_reason(&p, "main"),
            Some("ContainerCreating"),
            "{}",
            diagnose(&ns.name, "iv")
        );
        assert!(
            containers_of(&uid(&p)).is_empty(),
            "no container is created"
        );
    }
    ns.delete().await;
}
