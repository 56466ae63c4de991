//! Ephemeral containers (`kubectl debug`): which ones to start in a running pod and whose PID
//! namespace each joins (k/k `kuberuntime_manager.go` `computePodActions`,
//! `EphemeralContainersToStart`). An ephemeral container starts once, when the runtime holds no
//! instance of it, in a live sandbox (even while init containers run), and is never restarted,
//! whatever the restart policy; a pod being deleted starts none.

use super::runtime::PodRuntimeStatus;
use k8s_openapi::api::core::v1::Pod;

/// Whose PID namespace an ephemeral container joins (k/k `startSpec.getTargetID` and
/// `generateLinuxContainerConfig`: CRI `NamespaceMode::TARGET` with `target_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidTarget {
    /// No `targetContainerName`: the pod's usual PID namespace mode.
    None,
    /// The runtime id of the target container's newest instance.
    Container(String),
    /// `targetContainerName` names a container the runtime holds no instance of: the start
    /// fails with `CreateContainerConfigError` `unable to find target container <name>`.
    Missing(String),
}

impl PidTarget {
    /// The message of the `CreateContainerConfigError` for a missing target (k/k wording).
    pub fn missing_message(name: &str) -> String {
        format!("unable to find target container {name}")
    }
}

/// An ephemeral container to start (k/k `EphemeralContainersToStart`, by name here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EphemeralStart {
    /// Spec name (`spec.ephemeralContainers[].name`).
    pub name: String,
    /// The PID namespace it joins.
    pub pid_target: PidTarget,
}

/// The ephemeral containers of `pod` to start now, in spec order (k/k computePodActions): each
/// one the runtime holds no instance of — one that ran, exited or failed to be created is never
/// started again (`Ephemeral Containers are never restarted`). None for a pod being deleted
/// (the Go pod worker runs no SyncPod for a terminating pod).
///
/// A `targetContainerName` resolves to the newest instance of that container in `rt`
/// ([`PidTarget`]).
pub fn ephemeral_containers_to_start(pod: &Pod, rt: &PodRuntimeStatus) -> Vec<EphemeralStart> {
    if pod.metadata.deletion_timestamp.is_some() {
        return vec![];
    }
    let Some(spec) = pod.spec.as_ref() else {
        return vec![];
    };
    spec.ephemeral_containers
        .iter()
        .flatten()
        .filter(|ec| rt.latest(&ec.name).is_none())
        .map(|ec| EphemeralStart {
            name: ec.name.clone(),
            pid_target: match ec.target_container_name.as_deref() {
                None | Some("") => PidTarget::None,
                Some(t) => match rt.latest(t) {
                    Some(c) => PidTarget::Container(c.id.clone()),
                    None => PidTarget::Missing(t.to_string()),
                },
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Backoff;
    use crate::pod::actions::compute_pod_actions;
    use crate::pod::actions::tests::{ctr, pod, sandbox, t};
    use crate::pod::runtime::{ContainerState, ContainerStatus};
    use std::collections::HashMap;

    fn with_ephemeral(mut p: Pod, name: &str, target: Option<&str>) -> Pod {
        p.spec
            .as_mut()
            .unwrap()
            .ephemeral_containers
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::EphemeralContainer {
                name: name.into(),
                image: Some("busybox".into()),
                target_container_name: target.map(str::to_string),
                ..Default::default()
            });
        p
    }

    #[test]
    fn ephemeral_containers_start_once_and_never_restart() {
        use ContainerState::*;
        let start = |n: &str, t: PidTarget| EphemeralStart {
            name: n.into(),
            pid_target: t,
        };
        // (case, restart policy, runtime containers, expected ephemeral starts)
        let cases: Vec<(&str, &str, Vec<ContainerStatus>, Vec<EphemeralStart>)> = vec![
            (
                "added to a running pod: started",
                "Always",
                vec![ctr("a", 0, Running, 0, 0)],
                vec![start("dbg", PidTarget::None)],
            ),
            (
                "running: left alone",
                "Always",
                vec![ctr("dbg", 0, Running, 0, 0), ctr("a", 0, Running, 0, 0)],
                vec![],
            ),
            (
                "exited 0 with restartPolicy Always: not restarted",
                "Always",
                vec![ctr("dbg", 0, Exited, 0, 50), ctr("a", 0, Running, 0, 0)],
                vec![],
            ),
            (
                "failed with restartPolicy OnFailure: not restarted",
                "OnFailure",
                vec![ctr("dbg", 0, Exited, 1, 50), ctr("a", 0, Running, 0, 0)],
                vec![],
            ),
            (
                "created but never started: not created again",
                "Always",
                vec![ctr("dbg", 0, Created, 0, 0), ctr("a", 0, Running, 0, 0)],
                vec![],
            ),
        ];
        for (case, policy, containers, want) in cases {
            let p = with_ephemeral(pod(policy, &["a"], &[]), "dbg", None);
            let rt = PodRuntimeStatus {
                sandboxes: vec![sandbox()],
                containers,
            };
            let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(100));
            assert_eq!(a.start_ephemeral, want, "{case}");
            assert!(a.start.is_empty(), "{case}: regular containers untouched");
            assert!(
                !a.pod_done,
                "{case}: an ephemeral container never ends the pod"
            );
        }
    }

    #[test]
    fn ephemeral_target_container_shares_its_pid_namespace() {
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr("a", 1, ContainerState::Running, 0, 0),
                ctr("a", 0, ContainerState::Exited, 1, 5),
            ],
        };
        // (target, expected)
        let cases = [
            (None, PidTarget::None),
            (Some(""), PidTarget::None),
            (Some("a"), PidTarget::Container("a-1".into())),
            (Some("gone"), PidTarget::Missing("gone".into())),
        ];
        for (target, want) in cases {
            let p = with_ephemeral(pod("Always", &["a"], &[]), "dbg", target);
            let got = ephemeral_containers_to_start(&p, &rt);
            assert_eq!(got.len(), 1, "{target:?}");
            assert_eq!(got[0].pid_target, want, "{target:?}");
        }
        assert_eq!(
            PidTarget::missing_message("gone"),
            "unable to find target container gone"
        );
    }

    #[test]
    fn no_ephemeral_start_without_a_live_sandbox_or_in_a_finished_or_deleted_pod() {
        use ContainerState::*;
        // No sandbox: the sandbox and the regular containers come first.
        let p = with_ephemeral(pod("Always", &["a"], &[]), "dbg", None);
        let a = compute_pod_actions(
            &p,
            &PodRuntimeStatus::default(),
            &HashMap::new(),
            &Backoff::default(),
            t(100),
        );
        assert_eq!(a.create_sandbox, Some(0));
        assert!(a.start_ephemeral.is_empty());
        // A Never pod whose containers all exited is done: the debugger is not started.
        let p = with_ephemeral(pod("Never", &["a"], &[]), "dbg", None);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, Exited, 0, 50)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(100));
        assert!(a.pod_done);
        assert!(a.start_ephemeral.is_empty());
        // A pod being deleted starts none.
        let mut p = with_ephemeral(pod("Always", &["a"], &[]), "dbg", None);
        p.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(90)));
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, Running, 0, 0)],
        };
        assert!(ephemeral_containers_to_start(&p, &rt).is_empty());
    }

    #[test]
    fn ephemeral_containers_may_start_while_init_containers_run() {
        let p = with_ephemeral(pod("Always", &["a"], &["init"]), "dbg", None);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("init", 0, ContainerState::Running, 0, 0)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(100));
        assert!(a.start.is_empty(), "waits for the init container");
        assert_eq!(
            a.start_ephemeral,
            vec![EphemeralStart {
                name: "dbg".into(),
                pid_target: PidTarget::None
            }]
        );
    }
}
