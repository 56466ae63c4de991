//! Probes: startup, liveness and readiness (k/k `pkg/kubelet/prober`; docs:
//! tasks/configure-pod-container/configure-liveness-readiness-startup-probes).
//!
//! One task per (container instance, probe kind) runs the handler every `periodSeconds` after
//! `initialDelaySeconds`, with `timeoutSeconds`, and turns raw outcomes into a result with
//! `successThreshold`/`failureThreshold` ([`ResultCounter`], pure). Results go to the pod worker,
//! which folds them into the pod status (readiness → `ready`, startup → `started`) and into its
//! decisions (a liveness or startup failure kills and restarts the container). Startup gates the
//! other two: they do not run until the startup probe has succeeded.

pub mod handlers;

use crate::events::EventRecorder;
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Event reason for a failed probe (k/k `events.ContainerUnhealthy`).
pub const REASON_UNHEALTHY: &str = "Unhealthy";

/// The three probe kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// `livenessProbe`: failure restarts the container.
    Liveness,
    /// `readinessProbe`: drives `ready` and the Ready condition.
    Readiness,
    /// `startupProbe`: gates the others; failure restarts the container.
    Startup,
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        })
    }
}

/// A probe's settings with the API defaults applied (k/k `pkg/apis/core/v1/defaults.go`):
/// period 10 s, timeout 1 s, success threshold 1, failure threshold 3, no initial delay.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSettings {
    /// Seconds before the first probe, counted from the container's start.
    pub initial_delay: Duration,
    /// Seconds between probes.
    pub period: Duration,
    /// Seconds a probe may take.
    pub timeout: Duration,
    /// Consecutive successes to become successful (1 for liveness and startup).
    pub success_threshold: u32,
    /// Consecutive failures to become failed.
    pub failure_threshold: u32,
}

impl ProbeSettings {
    /// Settings from the spec, defaulted.
    pub fn from_probe(p: &Probe) -> Self {
        let secs =
            |v: Option<i32>, d: i32| Duration::from_secs(v.filter(|v| *v > 0).unwrap_or(d) as u64);
        Self {
            initial_delay: Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64),
            period: secs(p.period_seconds, 10),
            timeout: secs(p.timeout_seconds, 1),
            success_threshold: p.success_threshold.filter(|v| *v > 0).unwrap_or(1) as u32,
            failure_threshold: p.failure_threshold.filter(|v| *v > 0).unwrap_or(3) as u32,
        }
    }
}

/// Threshold accounting of one probe worker (k/k `prober/worker.go` doProbe): the result changes
/// only after `successThreshold` consecutive successes or `failureThreshold` consecutive failures.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultCounter {
    success_threshold: u32,
    failure_threshold: u32,
    last: Option<bool>,
    run: u32,
    /// The current result: `None` until a threshold is first met.
    pub result: Option<bool>,
}

impl ResultCounter {
    /// A counter with the probe's thresholds and an initial result.
    pub fn new(s: &ProbeSettings, initial: Option<bool>) -> Self {
        Self {
            success_threshold: s.success_threshold,
            failure_threshold: s.failure_threshold,
            last: None,
            run: 0,
            result: initial,
        }
    }

    /// Records one outcome; returns the new result if it changed.
    pub fn observe(&mut self, success: bool) -> Option<bool> {
        if self.last == Some(success) {
            self.run += 1;
        } else {
            self.last = Some(success);
            self.run = 1;
        }
        let needed = if success {
            self.success_threshold
        } else {
            self.failure_threshold
        };
        if self.run < needed {
            return None;
        }
        if self.result == Some(success) {
            return None;
        }
        self.result = Some(success);
        Some(success)
    }

    /// Starts counting over (after a liveness/startup failure the worker holds until a new
    /// container instance appears).
    pub fn reset_run(&mut self) {
        self.run = 0;
    }
}

/// A probe result for one container instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeUpdate {
    /// Which probe.
    pub kind: ProbeKind,
    /// Success or failure.
    pub success: bool,
}

/// What the pod worker knows about one container instance's probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeView {
    /// Readiness result (`None` while unknown; treated as not ready).
    pub readiness: Option<bool>,
    /// Startup result (`None` while unknown).
    pub startup: Option<bool>,
    /// Liveness result (`None` while unknown; treated as alive).
    pub liveness: Option<bool>,
}

/// The probes of one pod: tasks per running container instance and their latest results.
pub struct PodProbes {
    tasks: HashMap<String, (CancellationToken, watch::Sender<Option<bool>>)>,
    /// Results by container ID.
    pub results: HashMap<String, ProbeView>,
    tx: mpsc::Sender<(String, ProbeUpdate)>,
}

/// Everything a probe task needs to run handlers.
#[derive(Clone)]
pub struct ProbeEnv {
    /// CRI for exec probes.
    pub cri: crate::cri::CriClient,
    /// Events.
    pub recorder: EventRecorder,
    /// Where probe tasks are spawned (in the pod worker's tracing span).
    pub tasks: crate::tasks::Tasks,
    /// Wall-clock time (the initial delay counts from the container's start).
    pub clock: std::sync::Arc<dyn crate::time::Clock>,
}

impl PodProbes {
    /// A probe set whose results arrive on `tx` as (container ID, update).
    pub fn new(tx: mpsc::Sender<(String, ProbeUpdate)>) -> Self {
        Self {
            tasks: HashMap::new(),
            results: HashMap::new(),
            tx,
        }
    }

    /// Records an update; returns true when the view changed.
    pub fn apply(&mut self, container_id: &str, u: ProbeUpdate) -> bool {
        let v = self.results.entry(container_id.to_string()).or_default();
        let before = *v;
        match u.kind {
            ProbeKind::Readiness => v.readiness = Some(u.success),
            ProbeKind::Startup => {
                v.startup = Some(u.success);
                if u.success {
                    // Startup succeeded: let the gated probes run.
                    if let Some((_, gate)) = self.tasks.get(container_id) {
                        let _ = gate.send(Some(true));
                    }
                }
            }
            ProbeKind::Liveness => v.liveness = Some(u.success),
        }
        before != *v
    }

    /// Makes the probe tasks match the running containers: starts tasks for running instances
    /// that have probes, stops tasks of instances no longer running.
    /// `running` is (container ID, spec container, started_at nanos) for each running instance.
    pub fn reconcile(
        &mut self,
        pod: &Pod,
        pod_ip: &str,
        running: &[(String, Container, i64)],
        env: &ProbeEnv,
    ) {
        let ids: Vec<&String> = running.iter().map(|(id, _, _)| id).collect();
        self.tasks.retain(|id, (cancel, _)| {
            let keep = ids.contains(&id);
            if !keep {
                cancel.cancel();
            }
            keep
        });
        self.results.retain(|id, _| ids.contains(&id));
        for (id, c, started_at) in running {
            if self.tasks.contains_key(id) {
                continue;
            }
            let has_startup = c.startup_probe.is_some();
            let (gate_tx, gate_rx) = watch::channel(if has_startup { None } else { Some(true) });
            let cancel = CancellationToken::new();
            let view = self.results.entry(id.clone()).or_default();
            if c.readiness_probe.is_some() {
                view.readiness = Some(false);
            }
            let probes = [
                (ProbeKind::Startup, c.startup_probe.clone()),
                (ProbeKind::Liveness, c.liveness_probe.clone()),
                (ProbeKind::Readiness, c.readiness_probe.clone()),
            ];
            for (kind, probe) in probes {
                let Some(probe) = probe else { continue };
                let task = ProbeTask {
                    kind,
                    probe,
                    container: c.clone(),
                    container_id: id.clone(),
                    pod: pod.clone(),
                    pod_ip: pod_ip.to_string(),
                    started_at_nanos: *started_at,
                    env: env.clone(),
                    tx: self.tx.clone(),
                    gate: if kind == ProbeKind::Startup {
                        None
                    } else {
                        Some(gate_rx.clone())
                    },
                };
                let cancel = cancel.clone();
                let name = format!("{} probe {}", kind.to_string().to_lowercase(), c.name);
                env.tasks.spawn(name, async move { task.run(cancel).await });
            }
            self.tasks.insert(id.clone(), (cancel, gate_tx));
        }
    }

    /// Stops every probe task.
    pub fn stop_all(&mut self) {
        for (_, (c, _)) in self.tasks.drain() {
            c.cancel();
        }
        self.results.clear();
    }
}

impl Drop for PodProbes {
    fn drop(&mut self) {
        self.stop_all();
    }
}

struct ProbeTask {
    kind: ProbeKind,
    probe: Probe,
    container: Container,
    container_id: String,
    pod: Pod,
    pod_ip: String,
    started_at_nanos: i64,
    env: ProbeEnv,
    tx: mpsc::Sender<(String, ProbeUpdate)>,
    gate: Option<watch::Receiver<Option<bool>>>,
}

impl ProbeTask {
    async fn run(mut self, cancel: CancellationToken) {
        let s = ProbeSettings::from_probe(&self.probe);
        // Wait for the startup probe to succeed before liveness/readiness run.
        if let Some(gate) = self.gate.as_mut() {
            loop {
                if *gate.borrow_and_update() == Some(true) {
                    break;
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = gate.changed() => if r.is_err() { return },
                }
            }
        }
        // Initial delay counts from the container's start.
        let started = crate::time::ts_from_unix_nanos(self.started_at_nanos);
        if let Some(st) = started {
            let elapsed = (self.env.clock.now().as_nanosecond() - st.as_nanosecond()).max(0) as u64;
            let elapsed = Duration::from_nanos(elapsed);
            if elapsed < s.initial_delay {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(s.initial_delay - elapsed) => {}
                }
            }
        }
        let initial = match self.kind {
            ProbeKind::Readiness => Some(false),
            _ => None,
        };
        let mut counter = ResultCounter::new(&s, initial);
        let mut ticker = tokio::time::interval(s.period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = ticker.tick() => {}
            }
            // boxed: the handler's future (HTTP client, exec stream) lives only while a probe
            // runs, instead of inside every probe task's future between probes (issue 15)
            let outcome = Box::pin(handlers::run(
                &self.probe,
                &self.container,
                &self.env.cri,
                &self.container_id,
                &self.pod_ip,
                s.timeout,
            ))
            .await;
            let ok = outcome.ok();
            if let Some(msg) = outcome.event_message(self.kind) {
                self.env.recorder.pod(
                    &self.pod,
                    Some(&self.container.name),
                    true,
                    REASON_UNHEALTHY,
                    msg,
                );
            }
            if let Some(result) = counter.observe(ok) {
                let _ = self
                    .tx
                    .send((
                        self.container_id.clone(),
                        ProbeUpdate {
                            kind: self.kind,
                            success: result,
                        },
                    ))
                    .await;
                if !result && self.kind != ProbeKind::Readiness {
                    // The container will be restarted; stop probing this instance.
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(success: u32, failure: u32) -> ProbeSettings {
        ProbeSettings {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn probe_defaults_follow_the_api() {
        let s = ProbeSettings::from_probe(&Probe::default());
        assert_eq!(s, settings(1, 3));
    }

    #[test]
    fn failure_needs_failure_threshold_consecutive_failures() {
        let mut c = ResultCounter::new(&settings(1, 3), None);
        assert_eq!(c.observe(false), None);
        assert_eq!(c.observe(false), None);
        assert_eq!(c.observe(true), Some(true));
        assert_eq!(c.observe(false), None);
        assert_eq!(c.observe(false), None);
        assert_eq!(c.observe(false), Some(false));
        assert_eq!(c.observe(false), None, "no repeated change");
    }

    #[test]
    fn readiness_needs_success_threshold_to_become_ready() {
        let mut c = ResultCounter::new(&settings(2, 1), Some(false));
        assert_eq!(c.observe(true), None);
        assert_eq!(c.observe(true), Some(true));
        assert_eq!(c.observe(false), Some(false));
    }
}
