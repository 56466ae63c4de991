//! Container log files and the legacy `/var/log/containers` links that log collectors read
//! (k/k `pkg/kubelet/kuberuntime/kuberuntime_container.go` `legacyLogSymlink`,
//! `removeContainerLog`). Names are pure functions; the link I/O is best effort.

use crate::pod::spec;
use k8s_openapi::api::core::v1::Pod;
use std::path::{Path, PathBuf};

/// The directory of the legacy links: `containers` next to the pod logs dir
/// (`/var/log/pods` → `/var/log/containers`); None for a pod logs dir without a parent.
pub fn legacy_log_dir(pod_logs_dir: &str) -> Option<PathBuf> {
    Path::new(pod_logs_dir)
        .parent()
        .map(|p| p.join("containers"))
}

/// The legacy link's file name: `<pod>_<namespace>_<container>-<container id>.log`.
pub fn legacy_log_link_name(pod: &Pod, container: &str, container_id: &str) -> String {
    format!(
        "{}{container}-{container_id}.log",
        legacy_log_link_prefix(pod)
    )
}

/// The prefix every legacy link of `pod` starts with: `<pod>_<namespace>_`.
pub fn legacy_log_link_prefix(pod: &Pod) -> String {
    format!(
        "{}_{}_",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("")
    )
}

/// The CRI log file of one container instance:
/// `<pod logs dir>/<ns>_<pod>_<uid>/<container>/<attempt>.log`.
pub fn container_log_path(pod_logs_dir: &str, pod: &Pod, container: &str, attempt: u32) -> String {
    format!(
        "{}/{container}/{attempt}.log",
        spec::pod_log_dir(pod_logs_dir, pod)
    )
}

/// Links the legacy name of container instance `id` to its CRI log file.
pub async fn link_container_log(
    pod: &Pod,
    container: &str,
    id: &str,
    pod_logs_dir: &str,
    attempt: u32,
) {
    let Some(dir) = legacy_log_dir(pod_logs_dir) else {
        return;
    };
    let link = dir.join(legacy_log_link_name(pod, container, id));
    let target = container_log_path(pod_logs_dir, pod, container, attempt);
    let _ = tokio::fs::create_dir_all(&dir).await;
    let _ = tokio::fs::symlink(target, link).await;
}

/// Removes the legacy links of `pod` that point into its own log directory (a pod of the same
/// name re-created with another UID keeps its links).
pub async fn remove_container_log_links(pod: &Pod, pod_logs_dir: &str) {
    let Some(dir) = legacy_log_dir(pod_logs_dir) else {
        return;
    };
    let prefix = legacy_log_link_prefix(pod);
    let target_prefix = spec::pod_log_dir(pod_logs_dir, pod);
    let Ok(mut rd) = tokio::fs::read_dir(&dir).await else {
        return;
    };
    while let Ok(Some(e)) = rd.next_entry().await {
        if !e.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        if let Ok(t) = tokio::fs::read_link(e.path()).await {
            if t.to_string_lossy().starts_with(&target_prefix) {
                let _ = tokio::fs::remove_file(e.path()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("shop".into());
        p.metadata.uid = Some("u-1".into());
        p
    }

    #[test]
    fn legacy_names_follow_the_go_kubelet() {
        assert_eq!(
            legacy_log_dir("/var/log/pods"),
            Some(PathBuf::from("/var/log/containers"))
        );
        assert_eq!(
            legacy_log_link_name(&pod(), "nginx", "abc123"),
            "web_shop_nginx-abc123.log"
        );
        assert_eq!(
            container_log_path("/var/log/pods/", &pod(), "nginx", 2),
            "/var/log/pods/shop_web_u-1/nginx/2.log"
        );
    }

    #[tokio::test]
    async fn links_are_made_and_removed_for_this_pod_only() {
        let tmp = std::env::temp_dir().join(format!("deckhand-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let logs = tmp.join("pods");
        let logs = logs.to_str().unwrap();
        link_container_log(&pod(), "nginx", "abc", logs, 0).await;
        let mut other = pod();
        other.metadata.uid = Some("u-2".into());
        link_container_log(&other, "nginx", "def", logs, 0).await;
        let dir = tmp.join("containers");
        let target = std::fs::read_link(dir.join("web_shop_nginx-abc.log")).unwrap();
        assert_eq!(
            target.to_str().unwrap(),
            format!("{logs}/shop_web_u-1/nginx/0.log")
        );
        remove_container_log_links(&pod(), logs).await;
        assert!(std::fs::symlink_metadata(dir.join("web_shop_nginx-abc.log")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("web_shop_nginx-def.log")).is_ok());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
