//! One container's status (k/k `pkg/kubelet/kubelet_pods.go` `convertToAPIContainerStatuses`):
//! its state from what the runtime holds, or the reason it waits; `ready` and `started` from the
//! probes; `resources`, `allocatedResources` and `volumeMounts`; and the ephemeral containers'
//! statuses, which have the same shape.

use super::generate::{
    StatusInputs, REASON_CONTAINER_CREATING, REASON_CONTAINER_STATUS_UNKNOWN,
    REASON_POD_INITIALIZING,
};
use crate::pod::runtime::{ContainerState, ContainerStatus as RtContainer};
use k8s_openapi::api::core::v1::{
    Container, ContainerState as ApiState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, ResourceRequirements, VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

fn terminated_of(c: &RtContainer, runtime_name: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: (!c.reason.is_empty()).then(|| c.reason.clone()),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: crate::time::from_unix_nanos(c.started_at),
        finished_at: crate::time::from_unix_nanos(c.finished_at),
        container_id: Some(format!("{runtime_name}://{}", c.id)),
        signal: None,
    }
}

fn api_state(c: &RtContainer, runtime_name: &str) -> ApiState {
    match c.state {
        ContainerState::Running => ApiState {
            running: Some(ContainerStateRunning {
                started_at: crate::time::from_unix_nanos(c.started_at),
            }),
            ..Default::default()
        },
        ContainerState::Exited => ApiState {
            terminated: Some(terminated_of(c, runtime_name)),
            ..Default::default()
        },
        ContainerState::Created => ApiState {
            waiting: Some(ContainerStateWaiting::default()),
            ..Default::default()
        },
        ContainerState::Unknown => ApiState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                reason: Some(REASON_CONTAINER_STATUS_UNKNOWN.into()),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                container_id: Some(format!("{runtime_name}://{}", c.id)),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

fn waiting_state(reason: &str, message: Option<String>) -> ApiState {
    ApiState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    }
}

/// Which list of the pod spec a container comes from; it decides how `ready`, `started` and
/// the restart policy read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Regular,
    Init,
    /// `spec.ephemeralContainers`: never restarted, never ready, no `started` (the Go prober
    /// manager sets `started` and `ready` only for regular and init containers).
    Ephemeral,
}

pub(super) fn container_status(
    pod: &Pod,
    c: &Container,
    kind: Kind,
    default_reason: &str,
    inp: &StatusInputs,
) -> ContainerStatus {
    let init = kind == Kind::Init;
    let rt = inp.runtime;
    let latest = rt.latest(&c.name);
    let previous = rt.previous(&c.name);
    let mut st = ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        restart_count: 0,
        ready: false,
        started: Some(false),
        state: Some(waiting_state(default_reason, None)),
        volume_mounts: volume_mount_statuses(c),
        ..Default::default()
    };
    if let Some(l) = latest {
        let (resources, allocated) = status_resources(c, inp.actuated.get(&c.name));
        st.resources = Some(resources);
        st.allocated_resources = allocated;
        if !l.image.is_empty() {
            st.image = l.image.clone();
        }
        st.image_id = l.image_ref.clone();
        st.container_id = Some(format!("{}://{}", inp.runtime_name, l.id));
        st.restart_count = l.attempt as i32;
        st.state = Some(api_state(l, inp.runtime_name));
        // started: running and the startup probe (if any) succeeded; ready: started and the
        // readiness probe (if any) succeeded (k/k prober_manager.go UpdatePodStatus).
        let running = l.state == ContainerState::Running;
        let view = inp.probes.get(&l.id).copied().unwrap_or_default();
        let started = running && (c.startup_probe.is_none() || view.startup == Some(true));
        st.started = Some(started);
        st.ready = if init && !crate::pod::is_sidecar(c) {
            l.state == ContainerState::Exited && l.exit_code == 0
        } else {
            started && (c.readiness_probe.is_none() || view.readiness == Some(true))
        };
        if let Some(p) = previous.filter(|p| p.state == ContainerState::Exited) {
            st.last_state = Some(ApiState {
                terminated: Some(terminated_of(p, inp.runtime_name)),
                ..Default::default()
            });
        }
    }
    // A container that will be (re)started and whose last start failed is Waiting with that
    // reason; the terminated instance moves to lastState (convertToAPIContainerStatuses).
    let policy = if init && crate::pod::is_sidecar(c) {
        "Always"
    } else {
        crate::pod::restart_policy(pod)
    };
    let policy = if init && !crate::pod::is_sidecar(c) && policy == "Always" {
        "OnFailure"
    } else if kind == Kind::Ephemeral {
        "Never"
    } else {
        policy
    };
    if let Some(w) = inp.waiting.get(&c.name) {
        if crate::pod::actions::should_restart(latest, policy) || latest.is_none() {
            if let Some(s) = st.state.take() {
                if s.terminated.is_some() {
                    st.last_state = Some(s);
                }
            }
            st.state = Some(waiting_state(
                w.reason.as_str(),
                Some(w.message.clone()).filter(|m| !m.is_empty()),
            ));
            st.ready = false;
            st.started = Some(false);
        }
    }
    if kind == Kind::Ephemeral {
        st.ready = false;
        st.started = None;
    }
    st
}

/// `status.volumeMounts` of a container: its spec's mounts (the CRI does not know volume
/// names), read-only ones with `recursiveReadOnly: Disabled`, since no runtime deckhand runs on
/// reports recursive read-only support (k/k `convertToAPIContainerStatuses`,
/// RecursiveReadOnlyMounts, GA).
pub fn volume_mount_statuses(c: &Container) -> Option<Vec<VolumeMountStatus>> {
    let mounts: Vec<VolumeMountStatus> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            let ro = m.read_only == Some(true);
            VolumeMountStatus {
                name: m.name.clone(),
                mount_path: m.mount_path.clone(),
                read_only: ro.then_some(true),
                recursive_read_only: ro.then(|| "Disabled".to_string()),
                volume_status: None,
            }
        })
        .collect();
    (!mounts.is_empty()).then_some(mounts)
}

/// `resources` and `allocatedResources` of a container the runtime holds (k/k
/// `convertContainerStatusResources`, InPlacePodVerticalScaling, GA): `resources` are what the
/// runtime was last given (`actuated`; the allocation when there is no record), so during an
/// in-place resize they show the old amounts until the runtime has applied the new ones;
/// `allocatedResources` are the requests the kubelet allocated (`c` carries the allocation).
/// `resources: {}` for a container without any; `allocatedResources` left out without
/// requests.
pub fn status_resources(
    c: &Container,
    actuated: Option<&ResourceRequirements>,
) -> (ResourceRequirements, Option<BTreeMap<String, Quantity>>) {
    let allocated = c.resources.clone().unwrap_or_default();
    let requests = allocated.requests.clone().filter(|m| !m.is_empty());
    let strip = |r: &ResourceRequirements| ResourceRequirements {
        claims: None,
        limits: r.limits.clone().filter(|m| !m.is_empty()),
        requests: r.requests.clone().filter(|m| !m.is_empty()),
    };
    (strip(actuated.unwrap_or(&allocated)), requests)
}

/// `status.ephemeralContainerStatuses` (k/k `convertStatusToAPIStatus`: the ephemeral
/// containers converted to `v1.Container` and run through `convertToAPIContainerStatuses`):
/// one status per `spec.ephemeralContainers` entry, the same shape as a regular container's
/// (waiting `ContainerCreating`, or `PodInitializing` in a pod with init containers, until it
/// has an instance; then running or terminated with `containerID`, `image`, `imageID`;
/// `restartCount` 0 as it never restarts; `ready` false), sorted by name. None when the pod has
/// no ephemeral containers. They count for neither the phase nor any condition.
pub fn ephemeral_container_statuses(pod: &Pod, inp: &StatusInputs) -> Option<Vec<ContainerStatus>> {
    let spec = pod.spec.as_ref()?;
    let ecs = spec
        .ephemeral_containers
        .as_ref()
        .filter(|e| !e.is_empty())?;
    let default_reason = if spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
        REASON_POD_INITIALIZING
    } else {
        REASON_CONTAINER_CREATING
    };
    let mut out: Vec<ContainerStatus> = ecs
        .iter()
        .map(|ec| {
            let c = crate::pod::ephemeral_as_container(ec);
            container_status(pod, &c, Kind::Ephemeral, default_reason, inp)
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::reasons::Waiting;
    use crate::status::generate::tests::{cond, gen, pod, rt, rtc};

    #[test]
    fn running_containers_report_resources_and_volume_mounts_like_the_go_kubelet() {
        let mut p = pod("Always", &["main", "plain", "later"]);
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0] = serde_json::from_value(serde_json::json!({
            "name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "20m", "memory": "35Mi"},
                          "limits": {"cpu": "30m", "memory": "45Mi"}},
            "volumeMounts": [{"name": "data", "mountPath": "/data"},
                             {"name": "token", "mountPath": "/var/run/secrets/x", "readOnly": true}],
        }))
        .unwrap();
        let r = rt(
            vec![
                rtc("main", ContainerState::Running, 0),
                rtc("plain", ContainerState::Running, 0),
            ],
            true,
        );
        let st = gen(&p, &r, &BTreeMap::new(), false);
        let cs = |n: &str| {
            st.container_statuses
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.name == n)
                .unwrap()
                .clone()
        };
        let v = serde_json::to_value(cs("main")).unwrap();
        assert_eq!(
            v["resources"],
            serde_json::json!({"requests": {"cpu": "20m", "memory": "35Mi"},
                               "limits": {"cpu": "30m", "memory": "45Mi"}})
        );
        assert_eq!(
            v["allocatedResources"],
            serde_json::json!({"cpu": "20m", "memory": "35Mi"})
        );
        assert_eq!(
            v["volumeMounts"],
            serde_json::json!([{"name": "data", "mountPath": "/data"},
                {"name": "token", "mountPath": "/var/run/secrets/x", "readOnly": true,
                 "recursiveReadOnly": "Disabled"}])
        );
        let v = serde_json::to_value(cs("plain")).unwrap();
        assert_eq!(
            v["resources"],
            serde_json::json!({}),
            "resources: {{}} without any"
        );
        assert!(v.get("allocatedResources").is_none());
        assert!(v.get("volumeMounts").is_none());
        let v = serde_json::to_value(cs("later")).unwrap();
        assert!(
            v.get("resources").is_none(),
            "a container the runtime does not hold yet has none"
        );
    }

    fn with_debugger(mut p: Pod) -> Pod {
        p.spec.as_mut().unwrap().ephemeral_containers =
            Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debugger".into(),
                image: Some("busybox".into()),
                target_container_name: Some("a".into()),
                ..Default::default()
            }]);
        p
    }

    #[test]
    fn ephemeral_container_statuses_have_the_regular_shape_and_never_count_for_readiness() {
        use crate::pod::actions::WaitingReason;
        let image_err = || {
            let mut w = BTreeMap::new();
            w.insert(
                "debugger".to_string(),
                Waiting {
                    reason: WaitingReason::InvalidImageName,
                    message: "Failed to apply default image tag".into(),
                },
            );
            w
        };
        // (case, policy, debugger instance, waiting, expected state[:reason or exit code])
        type Case = (
            &'static str,
            &'static str,
            Option<RtContainer>,
            BTreeMap<String, Waiting>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "not started yet",
                "Always",
                None,
                BTreeMap::new(),
                "waiting:ContainerCreating",
            ),
            (
                "bad image",
                "Always",
                None,
                image_err(),
                "waiting:InvalidImageName",
            ),
            (
                "running",
                "Always",
                Some(rtc("debugger", ContainerState::Running, 0)),
                BTreeMap::new(),
                "running",
            ),
            (
                "exited under restartPolicy Always: terminated, not waiting to restart",
                "Always",
                Some(rtc("debugger", ContainerState::Exited, 1)),
                BTreeMap::new(),
                "terminated:1",
            ),
        ];
        for (case, policy, dbg, waiting, want) in cases {
            let p = with_debugger(pod(policy, &["a"]));
            let mut cs = vec![rtc("a", ContainerState::Running, 0)];
            cs.extend(dbg.clone());
            let s = gen(&p, &rt(cs, true), &waiting, false);
            assert_eq!(s.phase.as_deref(), Some("Running"), "{case}");
            assert_eq!(
                cond(&s, "Ready").status,
                "True",
                "{case}: readiness ignores it"
            );
            assert_eq!(cond(&s, "ContainersReady").status, "True", "{case}");
            assert_eq!(s.container_statuses.as_ref().unwrap().len(), 1, "{case}");
            let es = s.ephemeral_container_statuses.as_ref().expect(case);
            assert_eq!(es.len(), 1, "{case}");
            let e = &es[0];
            assert_eq!(e.name, "debugger");
            assert_eq!(e.restart_count, 0, "{case}");
            assert!(!e.ready, "{case}");
            assert_eq!(e.started, None, "{case}");
            let st = e.state.clone().unwrap();
            let got = if let Some(w) = &st.waiting {
                format!("waiting:{}", w.reason.as_deref().unwrap_or(""))
            } else if st.running.is_some() {
                "running".to_string()
            } else {
                format!("terminated:{}", st.terminated.as_ref().unwrap().exit_code)
            };
            assert_eq!(got, want, "{case}");
            if dbg.is_some() {
                assert_eq!(
                    e.container_id.as_deref(),
                    Some("containerd://id-debugger"),
                    "{case}"
                );
                assert_eq!(e.image, "docker.io/library/busybox:latest", "{case}");
                assert_eq!(e.image_id, "docker.io/library/busybox@sha256:abc", "{case}");
            } else {
                assert_eq!(e.image, "busybox", "{case}");
                assert_eq!(e.container_id, None, "{case}");
            }
        }
        // No ephemeral containers: no list at all (the field stays absent).
        let s = gen(
            &pod("Always", &["a"]),
            &rt(vec![rtc("a", ContainerState::Running, 0)], true),
            &BTreeMap::new(),
            false,
        );
        assert_eq!(s.ephemeral_container_statuses, None);
    }

    #[test]
    fn an_ephemeral_container_does_not_change_the_phase_of_a_finished_pod() {
        let p = with_debugger(pod("Never", &["a"]));
        let s = gen(
            &p,
            &rt(
                vec![
                    rtc("a", ContainerState::Exited, 0),
                    rtc("debugger", ContainerState::Running, 0),
                ],
                true,
            ),
            &BTreeMap::new(),
            false,
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    }
}
