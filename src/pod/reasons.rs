//! Why a container waits ([`WaitingReason`], [`Waiting`]) and why it is killed
//! ([`KillReason`], [`Kill`]), with the Go kubelet's strings and messages; the decisions that
//! produce them are in [`super::actions`].

use k8s_openapi::api::core::v1::Container;

/// Waiting reason for a container in crash back-off.
pub const REASON_CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";

/// Why a container is waiting: the reasons the Go kubelet shows in
/// `status.containerStatuses[].state.waiting.reason` (k/k `pkg/kubelet/container/sync_result.go`,
/// `pkg/kubelet/images/types.go`, `kuberuntime_container.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitingReason {
    /// Being created (sandbox, volumes, image, create and start under way).
    ContainerCreating,
    /// A regular container waiting for the init containers.
    PodInitializing,
    /// Held back by the crash back-off.
    CrashLoopBackOff,
    /// The last pull failed.
    ErrImagePull,
    /// Held back by the image pull back-off.
    ImagePullBackOff,
    /// The image name does not parse.
    InvalidImageName,
    /// `imagePullPolicy: Never` and the image is missing.
    ErrImageNeverPull,
    /// The runtime could not say whether the image is present.
    ImageInspectError,
    /// The container's config could not be made (env, mounts, security context).
    CreateContainerConfigError,
    /// CRI CreateContainer failed.
    CreateContainerError,
    /// CRI StartContainer failed.
    RunContainerError,
    /// The postStart hook failed (the container was killed).
    PostStartHookError,
    /// An error's own text as the reason, as the Go kubelet's reason cache stores `err.Error()`
    /// for errors without a named reason (e.g. a pull secret that does not parse).
    Other(String),
}

impl WaitingReason {
    /// The Go string shown in the API.
    pub fn as_str(&self) -> &str {
        match self {
            WaitingReason::ContainerCreating => "ContainerCreating",
            WaitingReason::PodInitializing => "PodInitializing",
            WaitingReason::CrashLoopBackOff => REASON_CRASH_LOOP_BACK_OFF,
            WaitingReason::ErrImagePull => "ErrImagePull",
            WaitingReason::ImagePullBackOff => "ImagePullBackOff",
            WaitingReason::InvalidImageName => "InvalidImageName",
            WaitingReason::ErrImageNeverPull => "ErrImageNeverPull",
            WaitingReason::ImageInspectError => "ImageInspectError",
            WaitingReason::CreateContainerConfigError => "CreateContainerConfigError",
            WaitingReason::CreateContainerError => "CreateContainerError",
            WaitingReason::RunContainerError => "RunContainerError",
            WaitingReason::PostStartHookError => "PostStartHookError",
            WaitingReason::Other(s) => s,
        }
    }

    /// True for the two reasons of a failing image pull (`ErrImagePull`, `ImagePullBackOff`).
    pub fn is_image_pull(&self) -> bool {
        matches!(
            self,
            WaitingReason::ErrImagePull | WaitingReason::ImagePullBackOff
        )
    }
}

impl std::fmt::Display for WaitingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a container is waiting, with the Go kubelet's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Waiting reason.
    pub reason: WaitingReason,
    /// Message shown with it.
    pub message: String,
}

impl Waiting {
    /// A waiting state with `reason` and `message`.
    pub fn new(reason: WaitingReason, message: impl Into<String>) -> Self {
        Waiting {
            reason,
            message: message.into(),
        }
    }
}

/// Why a container is killed; decides the `Killing` event's message and the grace period
/// (k/k `computePodActions` and `killContainer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// The pod stops (deleted, evicted, finished, its sandbox changed): `Stopping container <c>`.
    Stopping,
    /// The container's spec changed (its hash): `Container <c> definition changed`.
    DefinitionChanged,
    /// The liveness probe failed: `Container <c> failed liveness probe`; the probe's
    /// `terminationGracePeriodSeconds` applies.
    LivenessProbe,
    /// The startup probe failed: `Container <c> failed startup probe`; as for liveness.
    StartupProbe,
    /// The postStart hook failed: `FailedPostStartHook`.
    PostStartHook,
    /// An in-place resize of a resource whose `resizePolicy` is `RestartContainer`:
    /// `Container <c> resize requires restart` (k/k computePodResizeAction).
    ResizeRestart,
}

impl KillReason {
    /// The `Killing` event's message for container `name`; `will_restart` adds the Go
    /// kubelet's `, will be restarted` to the spec-change and probe reasons.
    pub fn message(self, name: &str, will_restart: bool) -> String {
        let m = match self {
            KillReason::Stopping => return format!("Stopping container {name}"),
            KillReason::PostStartHook => return "FailedPostStartHook".into(),
            KillReason::ResizeRestart => {
                return format!("Container {name} resize requires restart")
            }
            KillReason::DefinitionChanged => format!("Container {name} definition changed"),
            KillReason::LivenessProbe => format!("Container {name} failed liveness probe"),
            KillReason::StartupProbe => format!("Container {name} failed startup probe"),
        };
        if will_restart {
            format!("{m}, will be restarted")
        } else {
            m
        }
    }

    /// The probe's own grace period for a kill it causes (`probe.terminationGracePeriodSeconds`),
    /// which then replaces the pod's.
    pub fn probe_grace_seconds(self, c: &Container) -> Option<i64> {
        let probe = match self {
            KillReason::LivenessProbe => c.liveness_probe.as_ref(),
            KillReason::StartupProbe => c.startup_probe.as_ref(),
            _ => None,
        };
        probe.and_then(|p| p.termination_grace_period_seconds)
    }
}

/// A container to kill, with the reason shown in the `Killing` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// Runtime id.
    pub id: String,
    /// Spec name.
    pub name: String,
    /// Why.
    pub reason: KillReason,
    /// It is started again afterwards (shown in the message).
    pub restart: bool,
}

impl Kill {
    /// The `Killing` event's message.
    pub fn message(&self) -> String {
        self.reason.message(&self.name, self.restart)
    }
}
