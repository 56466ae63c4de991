//! Finding what a request names: the pod (from this kubelet's pod manager, [`PodLookup`]),
//! the container's runtime ID (from the pod's status, as the Go kubelet's
//! `validateContainerLogStatus` does, or from CRI labels for running containers), and the pod's
//! sandbox. Nothing here builds a file path from the request.

use crate::cri::{api, labels, CriClient, CriError};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// Errors looking up what a request names.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The runtime could not be asked.
    #[error(transparent)]
    Cri(#[from] CriError),
}

/// Where the server finds pods: this kubelet's pod manager and status manager, never the API
/// server (the Go kubelet's server asks its pod manager, `GetPodByName`, and takes the status
/// from its status manager, as `validateContainerLogStatus` does). A request therefore costs
/// no API round trip; 100 `kubectl logs -f` at once used to open ~25 pooled API connections
/// that stayed for their 90 s idle timeout.
#[derive(Clone)]
pub struct PodLookup {
    /// The pods of this node (API and static pods; a mirror pod's name finds its static pod).
    pub pods: crate::pod::manager::PodManager,
    /// The newest status of each pod (queued or written).
    pub status: crate::status::manager::StatusManager,
}

impl PodLookup {
    /// The pod `namespace/name` if this kubelet has it, with the newest status the kubelet
    /// produced for it (the watch's copy may lag a status just written). A name that cannot
    /// name a pod is "no such pod".
    pub fn get_pod(&self, namespace: &str, name: &str) -> Option<Pod> {
        if !is_dns_label(namespace) || !is_dns_subdomain(name) {
            return None;
        }
        self.pods
            .get(namespace, name)
            .map(|p| self.with_latest_status(&p))
    }

    /// Every pod of this kubelet (`/pods`: the Go kubelet's `GetPods`, static pods rather than
    /// their mirror pods), each with its newest status.
    pub fn node_pods(&self) -> Vec<Pod> {
        self.pods
            .pods()
            .iter()
            .map(|p| self.with_latest_status(p))
            .collect()
    }

    /// A copy of `pod` with the newest status the kubelet produced for it, if any.
    fn with_latest_status(&self, pod: &Pod) -> Pod {
        let mut pod = pod.clone();
        if let Some(status) = self.status.latest(crate::pod::uid(&pod)) {
            pod.status = Some(status);
        }
        pod
    }
}

/// A DNS-1123 label (namespace and container names): 1–63 of `[a-z0-9-]`, alphanumeric at
/// both ends. Anything else cannot name an object, so it is answered 404 without asking.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain (pod names): dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Whether the pod's spec has a container (regular, init or ephemeral) of this name
/// (`kubecontainer.GetContainerSpec`).
pub fn has_container(pod: &Pod, container: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.containers.iter().any(|c| c.name == container)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == container)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == container)
}

/// The container's `tty` setting in the pod spec.
pub fn container_tty(pod: &Pod, container: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == container)
        .map(|c| c.tty == Some(true))
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == container)
                .map(|c| c.tty == Some(true))
        })
        .unwrap_or(false)
}

/// Strips the `<runtime>://` prefix of a status container ID.
fn bare_id(id: &str) -> &str {
    id.split_once("://").map(|(_, i)| i).unwrap_or(id)
}

/// The runtime ID of the container instance whose logs to read, from the pod's status, with the
/// Go kubelet's errors (k/k `kubelet_pods.go` `validateContainerLogStatus`).
pub fn log_container_id(pod: &Pod, container: &str, previous: bool) -> Result<String, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let find = |list: Option<Vec<ContainerStatus>>| {
        list.unwrap_or_default()
            .into_iter()
            .find(|c| c.name == container)
    };
    let cs = find(status.container_statuses)
        .or_else(|| find(status.init_container_statuses))
        .or_else(|| find(status.ephemeral_container_statuses))
        .ok_or_else(|| format!("container {container:?} in pod {pod_name:?} is not available"))?;
    let last_terminated = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let state = cs.state.clone().unwrap_or_default();
    let id = if previous {
        match last_terminated.and_then(|t| t.container_id.as_deref()) {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => {
                return Err(format!(
                    "previous terminated container {container:?} in pod {pod_name:?} not found"
                ))
            }
        }
    } else if state.running.is_some() {
        cs.container_id.clone().unwrap_or_default()
    } else if let Some(t) = state.terminated.as_ref() {
        match t.container_id.as_deref() {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => match last_terminated.and_then(|t| t.container_id.as_deref()) {
                Some(id) if !id.is_empty() => id.to_string(),
                _ => {
                    return Err(format!(
                        "container {container:?} in pod {pod_name:?} is terminated"
                    ))
                }
            },
        }
    } else if let Some(t) = last_terminated {
        match t.container_id.as_deref() {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => {
                return Err(format!(
                    "container {container:?} in pod {pod_name:?} is terminated"
                ))
            }
        }
    } else if let Some(w) = state.waiting.as_ref() {
        let reason = w.reason.clone().unwrap_or_default();
        return Err(match reason.as_str() {
            "ErrImagePull" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
            ),
            _ => format!("container {container:?} in pod {pod_name:?} is waiting to start: {reason}"),
        });
    } else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        ));
    };
    Ok(bare_id(&id).to_string())
}

/// Whether a CRI container belongs to pod `uid` and is named `container` (so that a status
/// container ID is never trusted without the runtime agreeing).
pub fn belongs_to(
    labels_: &std::collections::HashMap<String, String>,
    uid: &str,
    container: &str,
) -> bool {
    labels_.get(labels::POD_UID).map(String::as_str) == Some(uid)
        && labels_.get(labels::CONTAINER_NAME).map(String::as_str) == Some(container)
}

/// The running container `container` of pod `uid` (newest if several), through CRI labels.
pub async fn running_container(
    cri: &CriClient,
    uid: &str,
    container: &str,
) -> Result<Option<String>, CriError> {
    let list = cri
        .list_containers(&[(labels::POD_UID, uid), (labels::CONTAINER_NAME, container)])
        .await?;
    Ok(list
        .into_iter()
        .filter(|c| c.state == api::ContainerState::ContainerRunning as i32)
        .max_by_key(|c| c.created_at)
        .map(|c| c.id))
}

/// The newest ready sandbox of pod `uid`.
pub async fn ready_sandbox(cri: &CriClient, uid: &str) -> Result<Option<String>, CriError> {
    let list = cri.list_pod_sandboxes(&[(labels::POD_UID, uid)]).await?;
    Ok(list
        .into_iter()
        .filter(|s| s.state == api::PodSandboxState::SandboxReady as i32)
        .max_by_key(|s| s.created_at)
        .map(|s| s.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, PodSpec, PodStatus,
    };

    fn pod_with(status: ContainerStatus) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    tty: Some(true),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                container_statuses: Some(vec![status]),
                ..Default::default()
            }),
        }
    }

    fn terminated(id: &str) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: (!id.is_empty()).then(|| id.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn running_container_logs_come_from_its_status_id() {
        let p = pod_with(ContainerStatus {
            name: "c".into(),
            container_id: Some("containerd://abc".into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            last_state: Some(terminated("containerd://old")),
            ..Default::default()
        });
        assert_eq!(log_container_id(&p, "c", false).unwrap(), "abc");
        assert_eq!(log_container_id(&p, "c", true).unwrap(), "old");
        assert!(has_container(&p, "c"));
        assert!(!has_container(&p, "d"));
        assert!(container_tty(&p, "c"));
        assert_eq!(
            log_container_id(&p, "d", false).unwrap_err(),
            r#"container "d" in pod "p" is not available"#
        );
    }

    #[test]
    fn previous_without_a_terminated_instance_is_an_error() {
        let p = pod_with(ContainerStatus {
            name: "c".into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            log_container_id(&p, "c", true).unwrap_err(),
            r#"previous terminated container "c" in pod "p" not found"#
        );
    }

    #[test]
    fn waiting_containers_explain_why_there_are_no_logs() {
        let waiting = |reason: &str| {
            pod_with(ContainerStatus {
                name: "c".into(),
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        assert_eq!(
            log_container_id(&waiting("ContainerCreating"), "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: ContainerCreating"#
        );
        assert_eq!(
            log_container_id(&waiting("ErrImagePull"), "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: image can't be pulled"#
        );
        assert_eq!(
            log_container_id(&waiting("ImagePullBackOff"), "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: trying and failing to pull image"#
        );
    }

    #[test]
    fn crash_looping_container_shows_its_last_instance() {
        let p = pod_with(ContainerStatus {
            name: "c".into(),
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            last_state: Some(terminated("containerd://last")),
            ..Default::default()
        });
        assert_eq!(log_container_id(&p, "c", false).unwrap(), "last");
        let t = pod_with(ContainerStatus {
            name: "c".into(),
            state: Some(terminated("")),
            ..Default::default()
        });
        assert_eq!(
            log_container_id(&t, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is terminated"#
        );
    }

    #[test]
    fn only_valid_object_names_are_looked_up() {
        assert!(is_dns_label("kube-system") && is_dns_label("a1"));
        assert!(
            !is_dns_label("..") && !is_dns_label("a/b") && !is_dns_label("-a") && !is_dns_label("")
        );
        assert!(!is_dns_label("Upper") && !is_dns_label(&"a".repeat(64)));
        assert!(
            is_dns_subdomain("web-0.x")
                && !is_dns_subdomain("..%2Fetc")
                && !is_dns_subdomain("a..b")
        );
    }

    #[test]
    fn runtime_labels_must_agree_with_the_pod() {
        let mut l = std::collections::HashMap::new();
        l.insert(labels::POD_UID.to_string(), "u1".to_string());
        l.insert(labels::CONTAINER_NAME.to_string(), "c".to_string());
        assert!(belongs_to(&l, "u1", "c"));
        assert!(!belongs_to(&l, "u2", "c"));
        assert!(!belongs_to(&l, "u1", "d"));
    }

    #[test]
    fn an_ephemeral_container_is_found_for_logs_attach_and_exec() {
        // `kubectl debug -it`: the container is in spec.ephemeralContainers and its status in
        // status.ephemeralContainerStatuses.
        let mut p = pod_with(ContainerStatus {
            name: "c".into(),
            ..Default::default()
        });
        p.spec.as_mut().unwrap().ephemeral_containers =
            Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debugger".into(),
                tty: Some(true),
                stdin: Some(true),
                target_container_name: Some("c".into()),
                ..Default::default()
            }]);
        p.status.as_mut().unwrap().ephemeral_container_statuses = Some(vec![ContainerStatus {
            name: "debugger".into(),
            container_id: Some("containerd://dbg".into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        assert!(has_container(&p, "debugger"));
        assert!(
            container_tty(&p, "debugger"),
            "attach uses the ephemeral container's tty"
        );
        assert_eq!(log_container_id(&p, "debugger", false).unwrap(), "dbg");
    }
}
