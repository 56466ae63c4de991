//! Pure pod-status generation: phase (k/k `pkg/kubelet/kubelet_pods.go` `getPhase`), conditions
//! (`pkg/kubelet/status/generate.go`), container statuses (`convertToAPIContainerStatuses`).
//! Everything the user reads in `kubectl get pods` comes from here.

use super::container::{container_status, ephemeral_container_statuses, Kind};
pub use super::container::{status_resources, volume_mount_statuses};
use crate::pod::actions::Waiting;
use crate::pod::runtime::PodRuntimeStatus;
use crate::prober::ProbeView;
use k8s_openapi::api::core::v1::{ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeMap, HashMap};

/// Waiting reason of a container that has no instance yet in a pod without init containers.
pub const REASON_CONTAINER_CREATING: &str = "ContainerCreating";
/// Waiting reason of containers while init containers run.
pub const REASON_POD_INITIALIZING: &str = "PodInitializing";
/// Terminated reason for a container the runtime lost track of.
pub const REASON_CONTAINER_STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// Condition types the kubelet owns.
pub const KUBELET_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

/// The in-place resize condition types, owned by the kubelet too but carrying their own
/// `observedGeneration` (the generation of the resize they are about).
pub const RESIZE_CONDITIONS: [&str; 2] = [
    crate::allocation::POD_RESIZE_PENDING,
    crate::allocation::POD_RESIZE_IN_PROGRESS,
];

/// Everything status generation reads besides the pod itself.
#[derive(Debug, Clone)]
pub struct StatusInputs<'a> {
    /// What the runtime holds for the pod.
    pub runtime: &'a PodRuntimeStatus,
    /// Why containers are waiting (last sync's failures: `ErrImagePull`, `CrashLoopBackOff`,
    /// `CreateContainerConfigError`, ...), by container name.
    pub waiting: &'a BTreeMap<String, Waiting>,
    /// Runtime name for container IDs (`containerd`).
    pub runtime_name: &'a str,
    /// Node IPs, primary first.
    pub node_ips: &'a [String],
    /// True when the pod is being shut down on this node (deleted, or no container will run
    /// again): the phase is computed as terminal.
    pub terminal: bool,
    /// "now", truncated to seconds.
    pub now: Time,
    /// Probe results by container ID (readiness → `ready`, startup → `started`).
    pub probes: &'a HashMap<String, ProbeView>,
    /// The in-place resize conditions to report (`PodResizePending` from the allocation
    /// decision, `PodResizeInProgress` while the runtime catches up).
    pub resize: &'a [crate::allocation::ResizeCondition],
    /// The resources the runtime was last given, by container name: a running container's
    /// `status.containerStatuses[].resources`.
    pub actuated: &'a BTreeMap<String, k8s_openapi::api::core::v1::ResourceRequirements>,
}

/// How `getPhase` counts one container.
fn phase(
    pod: &Pod,
    statuses: &[ContainerStatus],
    init_statuses: &[ContainerStatus],
    terminal: bool,
) -> &'static str {
    let spec = pod.spec.as_ref();
    let policy = crate::pod::restart_policy(pod);
    let inits = spec
        .and_then(|s| s.init_containers.as_ref())
        .map(|v| v.as_slice())
        .unwrap_or(&[]);
    let mut pending_init = 0;
    let mut failed_init = 0;
    for (c, st) in inits.iter().zip(init_statuses) {
        let s = st.state.clone().unwrap_or_default();
        if crate::pod::is_sidecar(c) {
            if s.running.is_some() && st.started != Some(true) {
                pending_init += 1;
            } else if s.waiting.is_some()
                && st
                    .last_state
                    .as_ref()
                    .and_then(|l| l.terminated.as_ref())
                    .is_none()
            {
                pending_init += 1;
            }
            continue;
        }
        if s.running.is_some() {
            pending_init += 1;
        } else if let Some(t) = &s.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if s.waiting.is_some() {
            match st.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        }
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for st in statuses {
        let s = st.state.clone().unwrap_or_default();
        if s.running.is_some() {
            running += 1;
        } else if let Some(t) = &s.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.waiting.is_some() {
            if let Some(t) = st.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    let regular_started = running + stopped > 0;
    if (pending_init > 0 && !regular_started) || waiting > 0 && !terminal {
        return "Pending";
    }
    if failed_init > 0 && !regular_started && !terminal {
        return "Pending";
    }
    if running > 0 && unknown == 0 && !terminal {
        return "Running";
    }
    let n = statuses.len();
    if terminal {
        // podIsTerminal: everything has stopped; succeeded only if every container exited 0.
        return if n > 0 && succeeded == n {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        return match policy {
            "Always" => "Running",
            "OnFailure" if stopped == succeeded => "Succeeded",
            "OnFailure" => "Running",
            _ if stopped == succeeded => "Succeeded",
            _ => "Failed",
        };
    }
    "Pending"
}

fn condition(
    old: &[PodCondition],
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &Time,
) -> PodCondition {
    let status_s = if status { "True" } else { "False" };
    let ltt = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status_s)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    PodCondition {
        type_: type_.into(),
        status: status_s.into(),
        reason: reason.map(str::to_string),
        message: message.filter(|m| !m.is_empty()),
        last_transition_time: Some(ltt),
        last_probe_time: None,
        observed_generation: None,
    }
}

/// Generates the pod's status from its spec, the runtime state and the last sync's failures.
/// Terminal phases are sticky: once the API copy says Succeeded or Failed, it stays.
pub fn generate_pod_status(pod: &Pod, inp: &StatusInputs) -> PodStatus {
    let old = pod.status.clone().unwrap_or_default();
    let old_conditions = old.conditions.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let inits = spec.init_containers.clone().unwrap_or_default();
    let has_init = !inits.is_empty();

    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| container_status(pod, c, Kind::Init, REASON_POD_INITIALIZING, inp))
        .collect();
    let default_reason = if has_init {
        REASON_POD_INITIALIZING
    } else {
        REASON_CONTAINER_CREATING
    };
    let mut statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(pod, c, Kind::Regular, default_reason, inp))
        .collect();

    let mut phase = phase(pod, &statuses, &init_statuses, inp.terminal).to_string();
    if matches!(old.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
        phase = old.phase.clone().unwrap();
    }
    statuses.sort_by(|a, b| a.name.cmp(&b.name));

    // Conditions.
    let sandbox_ready = inp
        .runtime
        .latest_sandbox()
        .is_some_and(|s| s.ready && (crate::pod::host_network(pod) || s.ip.is_some()));
    let regular_started = spec
        .containers
        .iter()
        .any(|c| inp.runtime.latest(&c.name).is_some());
    let incomplete: Vec<&str> = inits
        .iter()
        .zip(&init_statuses)
        .filter(|(c, s)| {
            if crate::pod::is_sidecar(c) {
                s.started != Some(true)
            } else {
                !s.ready
            }
        })
        .map(|(c, _)| c.name.as_str())
        .collect();
    let initialized = incomplete.is_empty() || regular_started;
    let unready: Vec<&str> = spec
        .containers
        .iter()
        .map(|c| statuses.iter().find(|s| s.name == c.name).unwrap())
        .chain(
            inits
                .iter()
                .zip(&init_statuses)
                .filter(|(c, _)| crate::pod::is_sidecar(c))
                .map(|(_, s)| s),
        )
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let now = &inp.now;
    let mut conditions: Vec<PodCondition> = old_conditions
        .iter()
        .filter(|c| {
            !KUBELET_CONDITIONS.contains(&c.type_.as_str())
                && !RESIZE_CONDITIONS.contains(&c.type_.as_str())
        })
        .cloned()
        .collect();
    conditions.push(condition(
        &old_conditions,
        "PodReadyToStartContainers",
        sandbox_ready && phase != "Succeeded" && phase != "Failed",
        None,
        None,
        now,
    ));
    conditions.push(if phase == "Succeeded" && initialized {
        condition(
            &old_conditions,
            "Initialized",
            true,
            Some("PodCompleted"),
            None,
            now,
        )
    } else if initialized {
        condition(&old_conditions, "Initialized", true, None, None, now)
    } else {
        condition(
            &old_conditions,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
            now,
        )
    });
    let (cr_status, cr_reason, cr_msg) = match phase.as_str() {
        "Succeeded" => (false, Some("PodCompleted"), None),
        "Failed" => (false, Some("PodFailed"), None),
        _ if unready.is_empty() => (true, None, None),
        _ => (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        ),
    };
    // Readiness gates: every gate's condition must be True for Ready.
    let mut ready = (cr_status, cr_reason.map(str::to_string), cr_msg.clone());
    if cr_status {
        for g in spec.readiness_gates.iter().flatten() {
            match old_conditions.iter().find(|c| c.type_ == g.condition_type) {
                None => {
                    ready = (
                        false,
                        Some("ReadinessGatesNotReady".into()),
                        Some(format!(
                            "corresponding condition of pod readiness gate {:?} does not exist.",
                            g.condition_type
                        )),
                    );
                    break;
                }
                Some(c) if c.status != "True" => {
                    ready = (
                        false,
                        Some("ReadinessGatesNotReady".into()),
                        Some(format!(
                            "the status of pod readiness gate {:?} is not \"True\", but {}",
                            g.condition_type, c.status
                        )),
                    );
                    break;
                }
                _ => {}
            }
        }
    }
    conditions.push(condition(
        &old_conditions,
        "Ready",
        ready.0,
        ready.1.as_deref(),
        ready.2,
        now,
    ));
    conditions.push(condition(
        &old_conditions,
        "ContainersReady",
        cr_status,
        cr_reason,
        cr_msg,
        now,
    ));
    conditions.push(
        old_conditions
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            .cloned()
            .unwrap_or_else(|| condition(&old_conditions, "PodScheduled", true, None, None, now)),
    );

    conditions.extend(
        inp.resize
            .iter()
            .map(|r| r.to_pod_condition(&old_conditions, now)),
    );

    // IPs.
    let host_net = crate::pod::host_network(pod);
    let mut pod_ips: Vec<String> = vec![];
    if host_net {
        pod_ips = inp.node_ips.to_vec();
    } else if let Some(s) = inp.runtime.latest_sandbox().filter(|s| s.ready) {
        pod_ips.extend(s.ip.iter().cloned());
        pod_ips.extend(s.additional_ips.iter().cloned());
    } else if let Some(ips) = old.pod_ips.as_ref() {
        // Keep the IPs of a finished pod whose sandbox was stopped, as the Go kubelet does.
        pod_ips = ips.iter().map(|p| p.ip.clone()).collect();
    }

    PodStatus {
        phase: Some(phase),
        conditions: Some(conditions),
        host_ip: inp.node_ips.first().cloned(),
        host_ips: (!inp.node_ips.is_empty()).then(|| {
            inp.node_ips
                .iter()
                .map(|ip| HostIP { ip: ip.clone() })
                .collect()
        }),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty())
            .then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: old.start_time.clone().or_else(|| Some(now.clone())),
        qos_class: old
            .qos_class
            .clone()
            .or_else(|| Some(crate::resource::qos_class(pod).to_string())),
        container_statuses: Some(statuses),
        init_container_statuses: has_init.then_some(init_statuses),
        ephemeral_container_statuses: ephemeral_container_statuses(pod, inp),
        reason: old.reason.clone(),
        message: old.message.clone(),
        nominated_node_name: old.nominated_node_name.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pod::runtime::SandboxStatus;
    use crate::pod::runtime::{ContainerState, ContainerStatus as RtContainer};
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::jiff::Timestamp;

    pub(crate) fn pod(policy: &str, names: &[&str]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u".into());
        p.spec = Some(PodSpec {
            restart_policy: Some(policy.into()),
            containers: names
                .iter()
                .map(|n| Container {
                    name: n.to_string(),
                    image: Some("busybox".into()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        p
    }

    pub(crate) fn rtc(name: &str, state: ContainerState, exit: i32) -> RtContainer {
        RtContainer {
            id: format!("id-{name}"),
            sandbox_id: "s".into(),
            name: name.into(),
            attempt: 0,
            state,
            created_at: 1,
            started_at: 2_000_000_000,
            finished_at: if state == ContainerState::Exited {
                3_000_000_000
            } else {
                0
            },
            exit_code: exit,
            reason: match (state, exit) {
                (ContainerState::Exited, 0) => "Completed".into(),
                (ContainerState::Exited, _) => "Error".into(),
                _ => String::new(),
            },
            message: String::new(),
            image: "docker.io/library/busybox:latest".into(),
            image_ref: "docker.io/library/busybox@sha256:abc".into(),
            hash: String::new(),
        }
    }

    pub(crate) fn rt(cs: Vec<RtContainer>, sandbox_ready: bool) -> PodRuntimeStatus {
        PodRuntimeStatus {
            sandboxes: vec![SandboxStatus {
                id: "s".into(),
                attempt: 0,
                ready: sandbox_ready,
                ip: sandbox_ready.then(|| "10.244.0.9".to_string()),
                additional_ips: vec![],
                created_at: 1,
            }],
            containers: cs,
        }
    }

    pub(crate) fn gen(
        p: &Pod,
        r: &PodRuntimeStatus,
        waiting: &BTreeMap<String, Waiting>,
        terminal: bool,
    ) -> PodStatus {
        let ips = vec!["10.250.0.1".to_string()];
        generate_pod_status(
            p,
            &StatusInputs {
                runtime: r,
                waiting,
                runtime_name: "containerd",
                node_ips: &ips,
                terminal,
                now: Time(Timestamp::from_second(100).unwrap()),
                probes: &HashMap::new(),
                resize: &[],
                actuated: &BTreeMap::new(),
            },
        )
    }

    pub(crate) fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn new_pod_is_pending_with_container_creating() {
        let p = pod("Always", &["a"]);
        let s = gen(&p, &PodRuntimeStatus::default(), &BTreeMap::new(), false);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let w = s.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(w.reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn running_pod_is_ready_with_ip_and_container_id() {
        let p = pod("Always", &["a"]);
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Running, 0)], true),
            &BTreeMap::new(),
            false,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.9"));
        assert_eq!(s.host_ip.as_deref(), Some("10.250.0.1"));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
        let cs = &s.container_statuses.unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some("containerd://id-a"));
        assert!(cs.ready);
        assert_eq!(cs.started, Some(true));
    }

    #[test]
    fn never_pod_exit_zero_succeeds_and_exit_three_fails() {
        let p = pod("Never", &["a"]);
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Exited, 0)], true),
            &BTreeMap::new(),
            false,
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        let t = s.container_statuses.as_ref().unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        assert_eq!(
            cond(&s, "Initialized").reason.as_deref(),
            Some("PodCompleted")
        );
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Exited, 3)], true),
            &BTreeMap::new(),
            false,
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(
            cond(&s, "ContainersReady").reason.as_deref(),
            Some("PodFailed")
        );
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state() {
        let p = pod("Always", &["a"]);
        let mut w = BTreeMap::new();
        w.insert(
            "a".to_string(),
            Waiting {
                reason: crate::pod::actions::WaitingReason::CrashLoopBackOff,
                message: "back-off 10s restarting failed container=a pod=p_ns(u)".into(),
            },
        );
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Exited, 1)], true),
            &w,
            false,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let cs = &s.container_statuses.unwrap()[0];
        assert_eq!(
            cs.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            cs.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            1
        );
    }

    #[test]
    fn terminal_phase_is_sticky_and_keeps_transition_times() {
        let p0 = pod("Always", &["a"]);
        let s1 = gen(
            &p0,
            &rt(vec![rtc("a", ContainerState::Running, 0)], true),
            &BTreeMap::new(),
            false,
        );
        let mut p = p0.clone();
        p.status = Some(s1.clone());
        let s2 = generate_pod_status(
            &p,
            &StatusInputs {
                runtime: &rt(vec![rtc("a", ContainerState::Running, 0)], true),
                waiting: &BTreeMap::new(),
                runtime_name: "containerd",
                node_ips: &["10.250.0.1".to_string()],
                terminal: false,
                now: Time(Timestamp::from_second(200).unwrap()),
                probes: &HashMap::new(),
                resize: &[],
                actuated: &BTreeMap::new(),
            },
        );
        assert_eq!(s1, s2, "an unchanged pod must produce an identical status");
        let mut p = p0;
        let mut st = s1;
        st.phase = Some("Failed".into());
        p.status = Some(st);
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Running, 0)], true),
            &BTreeMap::new(),
            false,
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
    }

    #[test]
    fn deleted_pod_becomes_terminal() {
        let p = pod("Always", &["a"]);
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Exited, 137)], false),
            &BTreeMap::new(),
            true,
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let s = gen(
            &p,
            &rt(vec![rtc("a", ContainerState::Exited, 0)], false),
            &BTreeMap::new(),
            true,
        );
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    }
}
