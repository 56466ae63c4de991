//! The fake runtime's test controls: what a component test sets up or injects (images, a
//! container the kubelet did not create, exits, delays, errors, stubborn stops and hanging execs)
//! and what it reads back (the recorded calls, sandboxes and containers).

use super::{FakeContainer, FakeRuntime, FakeSandbox};
use crate::cri::api;
use std::time::Duration;
use tonic::Status;

impl FakeRuntime {
    /// Makes every call of CRI method `method` take `d` before it answers (a runtime that hangs:
    /// the client's deadline runs out first when `d` is longer); `None` removes the delay.
    pub fn delay(&self, method: &str, d: Option<Duration>) {
        self.with(|s| match d {
            Some(d) => {
                s.delays.insert(method.into(), d);
            }
            None => {
                s.delays.remove(method);
            }
        });
    }

    /// What `Status` says of user namespaces: `None` lists no runtime handler (containerd 1.6),
    /// `Some(b)` lists the default handler with `user_namespaces: b` (containerd 2.x).
    pub fn set_user_namespaces(&self, support: Option<bool>) {
        self.with(|s| {
            s.runtime_handlers = support
                .map(|b| api::RuntimeHandler {
                    name: String::new(),
                    features: Some(api::RuntimeHandlerFeatures {
                        user_namespaces: b,
                        recursive_read_only_mounts: true,
                    }),
                })
                .into_iter()
                .collect();
        });
    }

    /// Sets sandbox `id`'s IP as `PodSandboxStatus` reports it (`""`: a sandbox without one).
    pub fn set_sandbox_ip(&self, id: &str, ip: &str) {
        self.with(|s| {
            if let Some(sb) = s.sandboxes.get_mut(id) {
                sb.ip = ip.to_string();
            }
        });
    }

    /// Puts a running container the kubelet did not create into sandbox `sandbox_id`, with the
    /// sandbox's pod labels and the container name `name` (one its pod spec may not know).
    /// Returns its id.
    pub fn add_foreign_container(&self, sandbox_id: &str, name: &str) -> String {
        let now = self.now_nanos();
        self.with(|s| {
            let id = Self::next_id(s);
            let labels = s
                .sandboxes
                .get(sandbox_id)
                .map(|sb| sb.config.labels.clone())
                .unwrap_or_default();
            let mut labels = labels;
            labels.insert(crate::cri::labels::CONTAINER_NAME.into(), name.into());
            s.containers.insert(
                id.clone(),
                FakeContainer {
                    id: id.clone(),
                    sandbox_id: sandbox_id.into(),
                    config: api::ContainerConfig {
                        metadata: Some(api::ContainerMetadata {
                            name: name.into(),
                            attempt: 0,
                        }),
                        labels,
                        ..Default::default()
                    },
                    state: api::ContainerState::ContainerRunning,
                    created_at: now,
                    started_at: now,
                    finished_at: 0,
                    exit_code: 0,
                    reason: String::new(),
                    pending_exit: None,
                    pending_oom: false,
                },
            );
            id
        })
    }

    /// Overwrites container `id`'s timestamps (nanoseconds; a runtime reporting them out of
    /// order).
    pub fn set_container_times(&self, id: &str, created: i64, started: i64, finished: i64) {
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                c.created_at = created;
                c.started_at = started;
                c.finished_at = finished;
            }
        });
    }

    /// Makes the next call of CRI method `method` (e.g. `RunPodSandbox`) fail with `status`.
    pub fn inject_error(&self, method: &str, status: Status) {
        self.with(|s| s.errors.entry(method.into()).or_default().push_back(status));
    }

    /// Every CRI call so far, in order (method names such as `RunPodSandbox`).
    pub fn calls(&self) -> Vec<String> {
        self.with(|s| s.calls.clone())
    }

    /// The positions in [`Self::calls`] of the list calls that asked for pod `pod_uid`'s
    /// sandboxes or containers (a selector on its pod UID label).
    pub fn pod_lists(&self, pod_uid: &str) -> Vec<usize> {
        self.with(|s| {
            s.pod_lists
                .iter()
                .filter(|(_, u)| u == pod_uid)
                .map(|(i, _)| *i)
                .collect()
        })
    }

    /// How many times CRI method `method` was called.
    pub fn count(&self, method: &str) -> usize {
        self.with(|s| s.calls.iter().filter(|c| *c == method).count())
    }

    /// Every sandbox ever created and not removed, oldest first.
    pub fn sandboxes(&self) -> Vec<FakeSandbox> {
        let mut v: Vec<FakeSandbox> = self.with(|s| s.sandboxes.values().cloned().collect());
        v.sort_by_key(|s| s.created_at);
        v
    }

    /// Every container not removed, oldest first.
    pub fn containers(&self) -> Vec<FakeContainer> {
        let mut v: Vec<FakeContainer> = self.with(|s| s.containers.values().cloned().collect());
        v.sort_by_key(|c| c.created_at);
        v
    }

    /// The running instance of container `name`, if any.
    pub fn running(&self, name: &str) -> Option<FakeContainer> {
        self.containers()
            .into_iter()
            .find(|c| c.name() == name && c.state == api::ContainerState::ContainerRunning)
    }

    /// Makes image `name` present (as if pulled before).
    pub fn add_image(&self, name: &str) {
        self.with(|s| {
            s.images.insert(
                name.to_string(),
                api::Image {
                    id: format!("sha256:{:064x}", name.len()),
                    repo_tags: vec![name.to_string()],
                    size: 4096,
                    ..Default::default()
                },
            );
        });
    }

    /// Makes image `name` present with numeric user `uid` in its config (`USER 1000`).
    pub fn add_image_with_uid(&self, name: &str, uid: i64) {
        self.add_image(name);
        self.with(|s| {
            if let Some(i) = s.images.get_mut(name) {
                i.uid = Some(api::Int64Value { value: uid });
            }
        });
    }

    /// The running container `id` exits with `code` now (the process ended by itself).
    pub fn exit(&self, id: &str, code: i32) {
        let now = self.now_nanos();
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                if c.state == api::ContainerState::ContainerRunning {
                    c.state = api::ContainerState::ContainerExited;
                    c.finished_at = now;
                    c.exit_code = code;
                    c.reason = if code == 0 { "Completed" } else { "Error" }.into();
                    s.publish(id, api::ContainerEventType::ContainerStoppedEvent, now);
                }
            }
        });
    }

    /// Ends every open `GetContainerEvents` stream: with `status` as its last item, or cleanly
    /// with `None` (a runtime restart).
    pub fn end_event_streams(&self, status: Option<Status>) {
        self.with(|s| {
            for tx in s.event_streams.drain(..) {
                if let Some(st) = &status {
                    let _ = tx.send(Err(st.clone()));
                }
            }
        });
    }

    /// How many `GetContainerEvents` streams are open (their receivers may have gone since the
    /// last event).
    pub fn event_streams(&self) -> usize {
        self.with(|s| s.event_streams.len())
    }

    /// Container `id`'s process exits with `code` now, but CRI keeps showing it running until
    /// [`FakeRuntime::confirm_exit`] (containerd's CRI plugin lags its `/tasks/exit` event by
    /// 50–200 ms). Returns the exit time in nanoseconds, as the event carries it.
    pub fn exit_unconfirmed(&self, id: &str, code: i32) -> i64 {
        let now = self.now_nanos();
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                if c.state == api::ContainerState::ContainerRunning {
                    c.pending_exit = Some((code, now));
                }
            }
        });
        now
    }

    /// Container `id` was killed by the OOM killer (containerd's `/tasks/oom` event): when CRI
    /// shows its exit ([`FakeRuntime::exit_unconfirmed`] with 137), the reason is `OOMKilled`.
    pub fn oom_unconfirmed(&self, id: &str) {
        self.with(|s| {
            if let Some(c) = s.containers.get_mut(id) {
                c.pending_oom = true;
            }
        });
    }

    /// CRI shows the exit [`FakeRuntime::exit_unconfirmed`] made.
    pub fn confirm_exit(&self, id: &str) {
        let now = self.now_nanos();
        self.with(|s| {
            if s.containers
                .get(id)
                .is_some_and(|c| c.pending_exit.is_some())
            {
                Self::kill(s, id, 0, now);
            }
        });
    }

    /// Instances of container `name` ignore the stop signal: StopContainer kills them only when
    /// its timeout has run out (exit code 137).
    pub fn ignore_stop_signal(&self, name: &str) {
        self.with(|s| s.ignore_stop_signal.insert(name.to_string()));
    }

    /// ExecSync in instances of container `name` never finishes by itself (a hook that hangs):
    /// it answers DEADLINE_EXCEEDED when its timeout runs out, or never with timeout 0.
    pub fn hang_exec(&self, name: &str) {
        self.with(|s| s.hanging_exec.insert(name.to_string()));
    }

    /// ExecSync in instances of container `name` exits with `code` from now on (a failing exec
    /// probe when not 0; its stderr says so).
    pub fn exec_exit_code(&self, name: &str, code: i32) {
        self.with(|s| s.exec_exit.insert(name.to_string(), code));
    }
}
