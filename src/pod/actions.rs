//! What to do next for a pod: the Go kubelet's `computePodActions`
//! (k/k `pkg/kubelet/kuberuntime/kuberuntime_manager.go`), as a pure function of the pod spec,
//! what the runtime holds ([`PodRuntimeStatus`]), the crash back-off table and "now".
//!
//! Rules mirrored:
//! - a new sandbox is needed when there is none, the newest is not ready, or it has no IP
//!   (non-host-network pods); on a restart-policy-`Never` pod whose containers already ran, the
//!   sandbox is not re-created;
//! - a container is (re)started per `kubecontainer.ShouldContainerBeRestarted`: created or
//!   unknown → yes; running → no; exited → per restart policy (`Always`; `OnFailure` when the
//!   exit code is not 0; `Never` → no);
//! - a restart waits out the crash back-off counted from the exited container's `finishedAt`
//!   (`doBackOff`), reported as waiting reason `CrashLoopBackOff`;
//! - init containers run one at a time, in order, before any regular container; a sidecar
//!   (`restartPolicy: Always`) keeps running and the next init container starts once it runs;
//! - when no container can run any more (terminal pod), the sandbox is stopped;
//! - an ephemeral container (`kubectl debug`) starts once, when the runtime holds no instance
//!   of it, in a live sandbox — even while init containers run — and is never restarted,
//!   whatever the restart policy (`EphemeralContainersToStart`); a pod being deleted starts
//!   none.

use super::runtime::{ContainerState, ContainerStatus, PodRuntimeStatus};
use crate::backoff::Backoff;
use crate::prober::ProbeView;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};

pub use super::reasons::{Kill, KillReason, Waiting, WaitingReason, REASON_CRASH_LOOP_BACK_OFF};

/// A container to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// Spec name.
    pub name: String,
    /// True for an init container.
    pub init: bool,
    /// The restart count (CRI attempt) the new instance gets.
    pub attempt: u32,
}

pub use super::ephemeral::{ephemeral_containers_to_start, EphemeralStart, PidTarget};

/// The result of [`compute_pod_actions`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodActions {
    /// Kill every container and sandbox before anything else (sandbox changed or pod done).
    pub kill_pod: bool,
    /// Create a new sandbox with this attempt number.
    pub create_sandbox: Option<u32>,
    /// Containers to kill individually.
    pub kill: Vec<Kill>,
    /// Containers to start, in order.
    pub start: Vec<Start>,
    /// Ephemeral containers to start (after [`Self::start`]; an init container that fails to
    /// start does not hold them back).
    pub start_ephemeral: Vec<EphemeralStart>,
    /// Containers held back, and why (crash back-off).
    pub waiting: BTreeMap<String, Waiting>,
    /// Crash back-off entries to advance, `(key, finishedAt of the exited instance)`: one per
    /// container restarted now. The caller applies them to its table ([`Backoff::next`]), so
    /// the decision stays a pure function of the table it was given.
    pub backoff_advances: Vec<(String, Timestamp)>,
    /// The earliest time a held-back container may start; the worker syncs again then.
    pub next_sync: Option<Timestamp>,
    /// No container will run again: the pod is finished on this node.
    pub pod_done: bool,
}

impl PodActions {
    /// Whether carrying these actions out changes nothing in the runtime (no sandbox to create
    /// or kill, no container to start or kill): the runtime state read before them is still
    /// the state to report.
    pub fn changes_nothing(&self) -> bool {
        !self.kill_pod
            && self.create_sandbox.is_none()
            && self.kill.is_empty()
            && self.start.is_empty()
            && self.start_ephemeral.is_empty()
    }
}

/// `kubecontainer.ShouldContainerBeRestarted` for one container instance under `policy`.
pub fn should_restart(status: Option<&ContainerStatus>, policy: &str) -> bool {
    let Some(s) = status else { return true };
    match s.state {
        ContainerState::Running => false,
        ContainerState::Created | ContainerState::Unknown => true,
        ContainerState::Exited => match policy {
            "Never" => false,
            "OnFailure" => s.exit_code != 0,
            _ => true,
        },
    }
}

/// The crash back-off key for a container: `<pod>_<ns>_<uid>_<container>` (the Go kubelet adds
/// the spec hash; a changed spec is a new container here as well since its hash changes).
pub fn backoff_key(pod: &Pod, container: &str) -> String {
    format!(
        "{}_{}_{}_{}",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        super::uid(pod),
        container
    )
}

/// Applies crash back-off to restarting container `c` whose newest instance is `last`:
/// `Ok(())` when it may start now (the back-off advance is recorded in `a`), `Err(waiting)`
/// while in back-off (the end of the back-off is recorded as `a.next_sync`).
fn check_backoff(
    pod: &Pod,
    c: &Container,
    last: Option<&ContainerStatus>,
    backoff: &Backoff,
    now: Timestamp,
    a: &mut PodActions,
) -> Result<(), Waiting> {
    let next_sync = &mut a.next_sync;
    let Some(last) = last.filter(|l| l.state == ContainerState::Exited) else {
        return Ok(());
    };
    let finished = crate::time::ts_from_unix_nanos(last.finished_at).unwrap_or(now);
    let key = backoff_key(pod, &c.name);
    if backoff.is_in_backoff_since(&key, finished, now) {
        let delay = backoff.get(&key);
        if let Some(end) = backoff.ends_at(&key, finished) {
            *next_sync = Some(next_sync.map_or(end, |n| n.min(end)));
        }
        return Err(Waiting {
            reason: WaitingReason::CrashLoopBackOff,
            message: format!(
                "back-off {} restarting failed container={} pod={}",
                crate::time::go_duration(delay),
                c.name,
                super::format_pod(pod)
            ),
        });
    }
    a.backoff_advances.push((key, finished));
    Ok(())
}

/// k/k `containerSucceeded`: the newest instance is not running and exited with code 0.
fn container_succeeded(last: Option<&ContainerStatus>) -> bool {
    last.is_some_and(|l| l.state != ContainerState::Running && l.exit_code == 0)
}

fn next_attempt(last: Option<&ContainerStatus>) -> u32 {
    last.map(|l| l.attempt + 1).unwrap_or(0)
}

/// Computes the next actions for `pod` (which is not being deleted) from the runtime state.
///
/// `probes` holds the probe results by container ID: a container whose liveness or startup
/// probe failed is killed (and restarted unless the restart policy is `Never`) with the Go
/// kubelet's message `Container <c> failed liveness probe, will be restarted`.
pub fn compute_pod_actions(
    pod: &Pod,
    rt: &PodRuntimeStatus,
    probes: &HashMap<String, ProbeView>,
    backoff: &Backoff,
    now: Timestamp,
) -> PodActions {
    let mut a = compute(pod, rt, probes, backoff, now);
    if a.pod_done {
        // A finished pod is stopped whole; nothing new starts in it, ephemeral or not.
        a.start_ephemeral.clear();
    }
    a
}

fn compute(
    pod: &Pod,
    rt: &PodRuntimeStatus,
    probes: &HashMap<String, ProbeView>,
    backoff: &Backoff,
    now: Timestamp,
) -> PodActions {
    let mut a = PodActions::default();
    let Some(spec) = pod.spec.as_ref() else {
        return a;
    };
    let policy = super::restart_policy(pod);
    let host_net = super::host_network(pod);
    let init_containers = spec.init_containers.as_deref().unwrap_or(&[]);

    // Sandbox.
    let ready_sandboxes = rt.sandboxes.iter().filter(|s| s.ready).count();
    let sandbox_ok = match rt.latest_sandbox() {
        Some(s) => s.ready && ready_sandboxes == 1 && (host_net || s.ip.is_some()),
        None => false,
    };
    if !sandbox_ok {
        let attempt = rt.latest_sandbox().map(|s| s.attempt + 1).unwrap_or(0);
        // k/k computePodActions: a pod whose sandbox is gone gets a new one only when something
        // will run in it. Kill (stop the old sandbox) either way.
        let finished = |mut a: PodActions| {
            a.kill_pod = true;
            a.pod_done = true;
            a
        };
        if policy == "Never" && !rt.containers.is_empty() {
            // A Never pod whose containers already ran is finished. (Go also asks for a
            // previous sandbox, `attempt != 0`, and relies on its pod worker's terminal state
            // when every sandbox was removed; here the decision alone keeps the pod finished.)
            return finished(a);
        }
        // The regular containers to start: all, less those OnFailure does not restart.
        let to_start: Vec<&Container> = spec
            .containers
            .iter()
            .filter(|c| !(policy == "OnFailure" && container_succeeded(rt.latest(&c.name))))
            .collect();
        let initialized = spec.containers.iter().any(|c| rt.latest(&c.name).is_some());
        if to_start.is_empty() && initialized {
            // Nothing left to start after initialization: no sandbox for a finished pod.
            return finished(a);
        }
        a.kill_pod = !rt.sandboxes.is_empty() || rt.running().next().is_some();
        a.create_sandbox = Some(attempt);
        // Everything starts again in the new sandbox; init containers first.
        if let Some(first) = init_containers.first() {
            a.start.push(Start {
                name: first.name.clone(),
                init: true,
                attempt: next_attempt(rt.latest(&first.name)),
            });
        } else {
            for c in to_start {
                a.start.push(Start {
                    name: c.name.clone(),
                    init: false,
                    attempt: next_attempt(rt.latest(&c.name)),
                });
            }
        }
        return a;
    }

    // Ephemeral containers may start even before initialization completes.
    a.start_ephemeral = ephemeral_containers_to_start(pod, rt);

    // Running containers are killed when their spec changed (the image is the only mutable
    // field) or a liveness or startup probe failed (k/k computePodActions).
    for c in init_containers.iter().chain(spec.containers.iter()) {
        let Some(last) = rt
            .latest(&c.name)
            .filter(|l| l.state == ContainerState::Running)
        else {
            continue;
        };
        let view = probes.get(&last.id).copied().unwrap_or_default();
        let why = if !last.hash.is_empty() && !super::spec::container_hash_matches(&last.hash, c) {
            Some(KillReason::DefinitionChanged)
        } else if view.liveness == Some(false) {
            Some(KillReason::LivenessProbe)
        } else if view.startup == Some(false) {
            Some(KillReason::StartupProbe)
        } else {
            None
        };
        if let Some(reason) = why {
            a.kill.push(Kill {
                id: last.id.clone(),
                name: c.name.clone(),
                reason,
                restart: policy != "Never" || super::is_sidecar(c),
            });
        }
    }

    // Init containers: done once any regular container exists in the runtime.
    let regular_started = spec.containers.iter().any(|c| rt.latest(&c.name).is_some());
    if !regular_started {
        for c in init_containers {
            let last = rt.latest(&c.name);
            let sidecar = super::is_sidecar(c);
            match last.map(|l| l.state) {
                None => {
                    a.start.push(Start {
                        name: c.name.clone(),
                        init: true,
                        attempt: 0,
                    });
                    return a;
                }
                Some(ContainerState::Running) if sidecar => continue,
                Some(ContainerState::Running) => return a, // wait for it to finish
                Some(ContainerState::Exited) if !sidecar && last.unwrap().exit_code == 0 => {
                    continue
                }
                Some(ContainerState::Exited) if !sidecar && policy == "Never" => {
                    // A failed init container with restartPolicy Never fails the pod.
                    a.kill_pod = true;
                    a.pod_done = true;
                    return a;
                }
                _ => {
                    match check_backoff(pod, c, last, backoff, now, &mut a) {
                        Ok(()) => a.start.push(Start {
                            name: c.name.clone(),
                            init: true,
                            attempt: next_attempt(last),
                        }),
                        Err(w) => {
                            a.waiting.insert(c.name.clone(), w);
                        }
                    }
                    return a;
                }
            }
        }
    } else {
        // Sidecars keep running after initialization, whatever the pod's restart policy.
        for c in init_containers.iter().filter(|c| super::is_sidecar(c)) {
            let last = rt.latest(&c.name);
            if should_restart(last, "Always") && !a.kill.iter().any(|k| k.name == c.name) {
                match check_backoff(pod, c, last, backoff, now, &mut a) {
                    Ok(()) => a.start.push(Start {
                        name: c.name.clone(),
                        init: true,
                        attempt: next_attempt(last),
                    }),
                    Err(w) => {
                        a.waiting.insert(c.name.clone(), w);
                    }
                }
            }
        }
    }

    // Regular containers.
    let mut will_run = 0usize;
    for c in &spec.containers {
        let last = rt.latest(&c.name);
        let killed = a.kill.iter().any(|k| k.name == c.name);
        if killed {
            if policy == "Never" {
                continue;
            }
            will_run += 1;
            // The restart after a kill honours the crash back-off of the instance that exited
            // before (doBackOff looks at the newest exited instance).
            let prev_exited = rt
                .containers
                .iter()
                .find(|x| x.name == c.name && x.state == ContainerState::Exited);
            match check_backoff(pod, c, prev_exited, backoff, now, &mut a) {
                Ok(()) => a.start.push(Start {
                    name: c.name.clone(),
                    init: false,
                    attempt: next_attempt(last),
                }),
                Err(w) => {
                    a.waiting.insert(c.name.clone(), w);
                }
            }
            continue;
        }
        if last.is_some_and(|l| l.state == ContainerState::Running) {
            will_run += 1;
            continue;
        }
        if !should_restart(last, policy) {
            continue;
        }
        will_run += 1;
        match check_backoff(pod, c, last, backoff, now, &mut a) {
            Ok(()) => a.start.push(Start {
                name: c.name.clone(),
                init: false,
                attempt: next_attempt(last),
            }),
            Err(w) => {
                a.waiting.insert(c.name.clone(), w);
            }
        }
    }
    let sidecars_running = init_containers
        .iter()
        .filter(|c| super::is_sidecar(c))
        .any(|c| {
            rt.latest(&c.name)
                .is_some_and(|l| l.state == ContainerState::Running)
        });
    if regular_started && will_run == 0 && !spec.containers.is_empty() {
        // Every regular container has exited for good; sidecars are stopped with the sandbox.
        let _ = sidecars_running;
        a.start.retain(|s| !s.init);
        a.waiting.clear();
        a.kill_pod = true;
        a.pod_done = true;
    }
    a
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pod::runtime::SandboxStatus;

    pub(crate) fn pod(policy: &str, containers: &[&str], inits: &[&str]) -> Pod {
        let mk = |n: &&str| Container {
            name: n.to_string(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u1".into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            restart_policy: Some(policy.into()),
            containers: containers.iter().map(mk).collect(),
            init_containers: (!inits.is_empty()).then(|| inits.iter().map(mk).collect()),
            ..Default::default()
        });
        p
    }

    pub(crate) fn sandbox() -> SandboxStatus {
        SandboxStatus {
            id: "s1".into(),
            attempt: 0,
            ready: true,
            ip: Some("10.244.0.5".into()),
            additional_ips: vec![],
            created_at: 1,
        }
    }

    pub(crate) fn ctr(
        name: &str,
        attempt: u32,
        state: ContainerState,
        exit: i32,
        finished_s: i64,
    ) -> ContainerStatus {
        ContainerStatus {
            id: format!("{name}-{attempt}"),
            sandbox_id: "s1".into(),
            name: name.into(),
            attempt,
            state,
            created_at: 10 + attempt as i64,
            started_at: 0,
            finished_at: finished_s * 1_000_000_000,
            exit_code: exit,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            hash: String::new(),
        }
    }

    pub(crate) fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn new_pod_gets_a_sandbox_and_all_containers() {
        let p = pod("Always", &["a", "b"], &[]);
        let a = compute_pod_actions(
            &p,
            &PodRuntimeStatus::default(),
            &HashMap::new(),
            &Backoff::default(),
            t(100),
        );
        assert_eq!(a.create_sandbox, Some(0));
        assert!(!a.kill_pod);
        assert_eq!(
            a.start.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            vec!["a", "b"]
        );
    }

    #[test]
    fn running_containers_are_left_alone() {
        let p = pod("Always", &["a"], &[]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, ContainerState::Running, 0, 0)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(100));
        assert_eq!(a, PodActions::default());
    }

    #[test]
    fn exited_container_restarts_then_waits_in_crash_loop_back_off() {
        let p = pod("Always", &["a"], &[]);
        let mut b = Backoff::default();
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, ContainerState::Exited, 1, 100)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &b, t(101));
        assert_eq!(a.backoff_advances, vec![(backoff_key(&p, "a"), t(100))]);
        for (k, at) in &a.backoff_advances {
            b.next(k, *at);
        }
        assert_eq!(
            a.start,
            vec![Start {
                name: "a".into(),
                init: false,
                attempt: 1
            }]
        );
        // The second instance exits too: now it waits 20 s from its finish time.
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr("a", 1, ContainerState::Exited, 1, 102),
                ctr("a", 0, ContainerState::Exited, 1, 100),
            ],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &b, t(103));
        assert!(a.start.is_empty());
        assert!(a.backoff_advances.is_empty());
        let w = &a.waiting["a"];
        assert_eq!(w.reason, WaitingReason::CrashLoopBackOff);
        assert_eq!(
            w.message,
            "back-off 10s restarting failed container=a pod=p_ns(u1)"
        );
        assert_eq!(a.next_sync, Some(t(112)));
        assert!(!a.pod_done);
    }

    #[test]
    fn restart_policy_never_finishes_the_pod() {
        let p = pod("Never", &["a"], &[]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, ContainerState::Exited, 3, 100)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(101));
        assert!(a.start.is_empty());
        assert!(a.pod_done && a.kill_pod);
    }

    /// Issue 11 item 3: once a pod is finished, no path asks for a new sandbox: OnFailure and
    /// Never, with and without init containers and sidecars, with the sandbox stopped (as the
    /// worker leaves it), dead under the finished containers, or still ready.
    #[test]
    fn a_finished_pod_never_gets_a_new_sandbox() {
        use ContainerState::{Exited, Running};
        let stopped = SandboxStatus {
            ready: false,
            ..sandbox()
        };
        let with_sidecar = |policy: &str| {
            let mut p = pod(policy, &["main"], &["side"]);
            p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].restart_policy =
                Some("Always".into());
            p
        };
        // (case, pod, sandboxes, containers)
        let cases: Vec<(&str, Pod, Vec<SandboxStatus>, Vec<ContainerStatus>)> = vec![
            (
                "OnFailure, exit 0, sandbox stopped",
                pod("OnFailure", &["a"], &[]),
                vec![stopped.clone()],
                vec![ctr("a", 0, Exited, 0, 100)],
            ),
            (
                "OnFailure, two containers both exit 0, sandbox stopped",
                pod("OnFailure", &["a", "b"], &[]),
                vec![stopped.clone()],
                vec![ctr("a", 0, Exited, 0, 100), ctr("b", 0, Exited, 0, 100)],
            ),
            (
                "OnFailure, exit 0 after a failed attempt, sandbox stopped",
                pod("OnFailure", &["a"], &[]),
                vec![stopped.clone()],
                vec![ctr("a", 1, Exited, 0, 120), ctr("a", 0, Exited, 1, 100)],
            ),
            (
                "OnFailure with an init container, sandbox stopped",
                pod("OnFailure", &["a"], &["i"]),
                vec![stopped.clone()],
                vec![ctr("i", 0, Exited, 0, 90), ctr("a", 0, Exited, 0, 100)],
            ),
            (
                "OnFailure with a sidecar, main exit 0, sandbox stopped",
                with_sidecar("OnFailure"),
                vec![stopped.clone()],
                vec![
                    ctr("side", 0, Exited, 137, 101),
                    ctr("main", 0, Exited, 0, 100),
                ],
            ),
            (
                "Never, exit 0, sandbox stopped",
                pod("Never", &["a"], &[]),
                vec![stopped.clone()],
                vec![ctr("a", 0, Exited, 0, 100)],
            ),
            (
                "Never, exit 1, no sandbox left at all",
                pod("Never", &["a"], &[]),
                vec![],
                vec![ctr("a", 0, Exited, 1, 100)],
            ),
            (
                "Never with an init container that failed, sandbox stopped",
                pod("Never", &["a"], &["i"]),
                vec![stopped.clone()],
                vec![ctr("i", 0, Exited, 1, 90)],
            ),
            (
                "Never with a sidecar, main exit 0, sandbox stopped",
                with_sidecar("Never"),
                vec![stopped.clone()],
                vec![
                    ctr("side", 0, Exited, 137, 101),
                    ctr("main", 0, Exited, 0, 100),
                ],
            ),
            (
                "OnFailure, exit 0, sandbox still ready",
                pod("OnFailure", &["a"], &[]),
                vec![sandbox()],
                vec![ctr("a", 0, Exited, 0, 100)],
            ),
            (
                "OnFailure with a sidecar still running, main exit 0",
                with_sidecar("OnFailure"),
                vec![sandbox()],
                vec![
                    ctr("side", 0, Running, 0, 0),
                    ctr("main", 0, Exited, 0, 100),
                ],
            ),
        ];
        for (case, p, sandboxes, containers) in cases {
            let rt = PodRuntimeStatus {
                sandboxes,
                containers,
            };
            let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(200));
            assert_eq!(a.create_sandbox, None, "{case}: no new sandbox");
            assert!(a.start.is_empty(), "{case}: nothing starts: {:?}", a.start);
            assert!(a.pod_done, "{case}: the pod is done");
        }
    }

    /// The other side of the rule: a sandbox that died under a pod with work left is
    /// re-created (an OnFailure container that failed; a pod that never ran a container).
    #[test]
    fn a_dead_sandbox_is_recreated_while_containers_have_work_left() {
        let stopped = SandboxStatus {
            ready: false,
            ..sandbox()
        };
        let rt = PodRuntimeStatus {
            sandboxes: vec![stopped.clone()],
            containers: vec![ctr("a", 0, ContainerState::Exited, 2, 100)],
        };
        let p = pod("OnFailure", &["a"], &[]);
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(200));
        assert_eq!(a.create_sandbox, Some(1));
        assert_eq!(a.start.len(), 1);
        let rt = PodRuntimeStatus {
            sandboxes: vec![stopped],
            containers: vec![],
        };
        let p = pod("Never", &["a"], &[]);
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(200));
        assert_eq!(
            a.create_sandbox,
            Some(1),
            "Never pod that never ran: retry the sandbox"
        );
    }

    #[test]
    fn on_failure_restarts_only_failed_containers() {
        let p = pod("OnFailure", &["ok", "bad"], &[]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![
                ctr("ok", 0, ContainerState::Exited, 0, 100),
                ctr("bad", 0, ContainerState::Exited, 2, 100),
            ],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(101));
        assert_eq!(
            a.start.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            vec!["bad"]
        );
        assert!(!a.pod_done);
    }

    #[test]
    fn init_containers_run_one_at_a_time_before_regular_ones() {
        let p = pod("Always", &["app"], &["i1", "i2"]);
        let mut rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(100));
        assert_eq!(
            a.start,
            vec![Start {
                name: "i1".into(),
                init: true,
                attempt: 0
            }]
        );
        rt.containers
            .push(ctr("i1", 0, ContainerState::Running, 0, 0));
        assert!(
            compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(100))
                .start
                .is_empty()
        );
        rt.containers[0] = ctr("i1", 0, ContainerState::Exited, 0, 100);
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(101));
        assert_eq!(
            a.start,
            vec![Start {
                name: "i2".into(),
                init: true,
                attempt: 0
            }]
        );
        rt.containers
            .insert(0, ctr("i2", 0, ContainerState::Exited, 0, 101));
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(102));
        assert_eq!(
            a.start,
            vec![Start {
                name: "app".into(),
                init: false,
                attempt: 0
            }]
        );
    }

    #[test]
    fn failed_init_container_with_never_fails_the_pod() {
        let p = pod("Never", &["app"], &["i1"]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("i1", 0, ContainerState::Exited, 1, 100)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(101));
        assert!(a.pod_done);
        assert!(a.start.is_empty());
    }

    #[test]
    fn sandbox_without_ip_is_recreated_with_next_attempt() {
        let p = pod("Always", &["a"], &[]);
        let mut s = sandbox();
        s.ready = false;
        let rt = PodRuntimeStatus {
            sandboxes: vec![s],
            containers: vec![ctr("a", 0, ContainerState::Exited, 137, 100)],
        };
        let a = compute_pod_actions(&p, &rt, &HashMap::new(), &Backoff::default(), t(101));
        assert_eq!(a.create_sandbox, Some(1));
        assert!(a.kill_pod);
        assert_eq!(
            a.start,
            vec![Start {
                name: "a".into(),
                init: false,
                attempt: 1
            }]
        );
    }

    #[test]
    fn failed_liveness_probe_kills_and_restarts_the_container() {
        let p = pod("Always", &["a"], &[]);
        let rt = PodRuntimeStatus {
            sandboxes: vec![sandbox()],
            containers: vec![ctr("a", 0, ContainerState::Running, 0, 0)],
        };
        let mut probes = HashMap::new();
        probes.insert(
            "a-0".to_string(),
            ProbeView {
                liveness: Some(false),
                ..Default::default()
            },
        );
        let a = compute_pod_actions(&p, &rt, &probes, &Backoff::default(), t(100));
        assert_eq!(a.kill.len(), 1);
        assert_eq!(
            a.kill[0].message(),
            "Container a failed liveness probe, will be restarted"
        );
        assert_eq!(
            a.start,
            vec![Start {
                name: "a".into(),
                init: false,
                attempt: 1
            }]
        );
        let never = pod("Never", &["a"], &[]);
        let a = compute_pod_actions(&never, &rt, &probes, &Backoff::default(), t(100));
        assert_eq!(a.kill[0].message(), "Container a failed liveness probe");
        assert!(a.start.is_empty());
    }
}
