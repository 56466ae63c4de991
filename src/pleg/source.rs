//! Which runtime event stream(s) the PLEG follows, and what it does with each CRI container
//! event: pure decisions, with table tests ([`choose_sources`], [`cri_event_action`]).
//!
//! Two streams can tell the PLEG a container changed:
//! - containerd's native event stream (`/tasks/exit`, `/tasks/oom`): containerd only, published
//!   within milliseconds of the exit and carrying the exit status and time, which the PLEG
//!   records ([`super::RecordedExits`]) so the status is written before containerd's CRI plugin
//!   has caught up (50–200 ms later);
//! - CRI's `RuntimeService.GetContainerEvents` (KEP-3386, the Go kubelet's evented PLEG,
//!   k/k `pkg/kubelet/pleg/evented.go`): any CRI runtime that implements it (containerd 1.7+ and
//!   2.x, CRI-O), sent after the runtime's CRI state shows the change. containerd 1.6 answers
//!   `Unimplemented`.
//!
//! The periodic relist runs whatever is chosen: it is the safety net behind both.

use crate::cri::api;

/// Which event stream the PLEG follows (`--pleg-event-source`).
///
/// deckhand's own flag, not the Go kubelet's `EventedPLEG` feature gate: the gate switches the
/// Go kubelet between a 1 s generic relist (off, its default) and the CRI stream with a 300 s
/// relist (on); deckhand is event-driven either way (the relist period is
/// `--pleg-relist-period`), and what there is to choose is the stream, which the gate cannot
/// express (deckhand accepts `featureGates` and ignores it, see
/// [`crate::config::KubeletConfiguration`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EventSource {
    /// containerd's native stream when the runtime is containerd, else CRI's
    /// `GetContainerEvents`; the CRI stream also when containerd's stream cannot be had.
    #[default]
    Auto,
    /// containerd's native stream only (and the relist).
    Containerd,
    /// CRI's `GetContainerEvents` only (and the relist), whatever the runtime.
    Cri,
}

/// The streams to run, from [`choose_sources`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sources {
    /// Follow containerd's native event stream.
    pub native: bool,
    /// Follow CRI's `GetContainerEvents` from the start.
    pub cri: bool,
    /// Follow CRI's `GetContainerEvents` once the native stream is found unavailable (the
    /// socket is not containerd's: it answers `Unimplemented`, or is not a usable endpoint).
    pub cri_after_native: bool,
}

/// Chooses the event streams for `mode` on the runtime named `runtime_name` (CRI `Version`'s
/// `runtime_name`, `containerd` for containerd).
///
/// `auto` on containerd follows the native stream only, not both: its exit events come first
/// and carry what the exit → status path needs, and a second stream would only wake each worker
/// once more per container change (containerd's CRI events carry the full pod sandbox status,
/// built for every event) for state the relist confirms anyway. On any other runtime the native
/// stream does not exist, so `auto` follows CRI's.
pub fn choose_sources(mode: EventSource, runtime_name: &str) -> Sources {
    let containerd = runtime_name == "containerd";
    match mode {
        EventSource::Containerd => Sources {
            native: true,
            cri: false,
            cri_after_native: false,
        },
        EventSource::Cri => Sources {
            native: false,
            cri: true,
            cri_after_native: false,
        },
        EventSource::Auto => Sources {
            native: containerd,
            cri: !containerd,
            cri_after_native: containerd,
        },
    }
}

/// What the PLEG does with one CRI container event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CriEventAction {
    /// Wake the worker of the pod with this UID.
    Wake(String),
    /// Nothing: the event is of no use to the workers.
    Ignore(IgnoreReason),
}

/// Why a CRI container event wakes no worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    /// CONTAINER_CREATED or CONTAINER_STARTED: every create and start is one the pod worker made
    /// itself and already knows of (as the native source skips `/tasks/start`). The Go evented
    /// PLEG also sends no lifecycle event for CREATED.
    OwnAction,
    /// No pod UID: neither the event's `pod_sandbox_status.metadata` nor the PLEG's
    /// owners (last relist) nor the container's labels name it (the Go evented PLEG logs and skips
    /// an event without `PodSandboxStatus.Metadata`; the relist syncs the pod in time).
    UnknownPod,
    /// A container event type this kubelet does not know.
    UnknownType,
}

/// Decides what the PLEG does with `ev` (k/k `pleg/evented.go` processCRIEvent):
/// CONTAINER_STOPPED wakes the pod's worker (Go: `ContainerDied`), as containerd's `/tasks/exit`
/// does; CONTAINER_DELETED wakes it too (Go: `ContainerDied` + `ContainerRemoved`), a container
/// removed behind the kubelet's back; CREATED and STARTED wake nobody
/// ([`IgnoreReason::OwnAction`]).
///
/// The pod UID is the event's `pod_sandbox_status.metadata.uid` (what Go uses), else the owner
/// the last relist saw for the container (`owner`), else the pod UID label of the container's
/// status in the event.
pub fn cri_event_action(
    ev: &api::ContainerEventResponse,
    owner: impl Fn(&str) -> Option<String>,
) -> CriEventAction {
    use api::ContainerEventType as T;
    match T::try_from(ev.container_event_type) {
        Ok(T::ContainerStoppedEvent | T::ContainerDeletedEvent) => {}
        Ok(T::ContainerCreatedEvent | T::ContainerStartedEvent) => {
            return CriEventAction::Ignore(IgnoreReason::OwnAction)
        }
        Err(_) => return CriEventAction::Ignore(IgnoreReason::UnknownType),
    }
    let from_sandbox = ev
        .pod_sandbox_status
        .as_ref()
        .and_then(|s| s.metadata.as_ref())
        .map(|m| m.uid.clone())
        .filter(|u| !u.is_empty());
    let from_labels = || {
        ev.containers_statuses
            .iter()
            .find(|c| c.id == ev.container_id)
            .and_then(|c| c.labels.get(crate::cri::labels::POD_UID).cloned())
    };
    match from_sandbox
        .or_else(|| owner(&ev.container_id))
        .or_else(from_labels)
    {
        Some(uid) => CriEventAction::Wake(uid),
        None => CriEventAction::Ignore(IgnoreReason::UnknownPod),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::ContainerEventType as T;
    use std::collections::HashMap;

    #[test]
    fn the_source_choice_follows_the_mode_and_the_runtime() {
        let s = |native, cri, cri_after_native| Sources {
            native,
            cri,
            cri_after_native,
        };
        let cases = [
            (
                "auto on containerd: the native stream, CRI's if it is unavailable",
                EventSource::Auto,
                "containerd",
                s(true, false, true),
            ),
            (
                "auto on another runtime: CRI's stream",
                EventSource::Auto,
                "cri-o",
                s(false, true, false),
            ),
            (
                "containerd forced",
                EventSource::Containerd,
                "containerd",
                s(true, false, false),
            ),
            (
                "containerd forced on another runtime: tried anyway (the relist is behind it)",
                EventSource::Containerd,
                "cri-o",
                s(true, false, false),
            ),
            (
                "cri forced on containerd",
                EventSource::Cri,
                "containerd",
                s(false, true, false),
            ),
            (
                "cri forced elsewhere",
                EventSource::Cri,
                "fake",
                s(false, true, false),
            ),
        ];
        for (name, mode, runtime, want) in cases {
            assert_eq!(choose_sources(mode, runtime), want, "{name}");
        }
    }

    fn event(
        t: i32,
        id: &str,
        sandbox_uid: Option<&str>,
        label_uid: Option<&str>,
    ) -> api::ContainerEventResponse {
        api::ContainerEventResponse {
            container_id: id.into(),
            container_event_type: t,
            created_at: 1,
            pod_sandbox_status: sandbox_uid.map(|u| api::PodSandboxStatus {
                metadata: Some(api::PodSandboxMetadata {
                    uid: u.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            containers_statuses: label_uid
                .map(|u| {
                    vec![api::ContainerStatus {
                        id: id.into(),
                        labels: HashMap::from([(
                            crate::cri::labels::POD_UID.to_string(),
                            u.to_string(),
                        )]),
                        ..Default::default()
                    }]
                })
                .unwrap_or_default(),
        }
    }

    #[test]
    fn cri_events_map_to_what_the_pleg_does() {
        let owners = HashMap::from([("known".to_string(), "uid-owner".to_string())]);
        let owner = |id: &str| owners.get(id).cloned();
        let wake = |u: &str| CriEventAction::Wake(u.into());
        let stopped = T::ContainerStoppedEvent as i32;
        let cases = [
            (
                "stopped wakes the sandbox's pod",
                event(stopped, "c1", Some("uid-a"), None),
                wake("uid-a"),
            ),
            (
                "deleted wakes it too",
                event(T::ContainerDeletedEvent as i32, "c1", Some("uid-a"), None),
                wake("uid-a"),
            ),
            (
                "created is the worker's own",
                event(T::ContainerCreatedEvent as i32, "c1", Some("uid-a"), None),
                CriEventAction::Ignore(IgnoreReason::OwnAction),
            ),
            (
                "started is the worker's own",
                event(T::ContainerStartedEvent as i32, "c1", Some("uid-a"), None),
                CriEventAction::Ignore(IgnoreReason::OwnAction),
            ),
            (
                "the sandbox's uid comes first",
                event(stopped, "known", Some("uid-a"), Some("uid-label")),
                wake("uid-a"),
            ),
            (
                "no sandbox status: the relist's owner",
                event(stopped, "known", None, Some("uid-label")),
                wake("uid-owner"),
            ),
            (
                "no sandbox status, no owner: the container's label",
                event(stopped, "c2", None, Some("uid-label")),
                wake("uid-label"),
            ),
            (
                "an empty sandbox uid counts as none",
                event(stopped, "known", Some(""), None),
                wake("uid-owner"),
            ),
            (
                "no uid anywhere",
                event(stopped, "c3", None, None),
                CriEventAction::Ignore(IgnoreReason::UnknownPod),
            ),
            (
                "an unknown type",
                event(42, "c1", Some("uid-a"), None),
                CriEventAction::Ignore(IgnoreReason::UnknownType),
            ),
        ];
        for (name, ev, want) in cases {
            assert_eq!(cri_event_action(&ev, owner), want, "{name}");
        }
    }
}
