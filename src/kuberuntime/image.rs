//! Making sure a container's image is on the node before it starts: the Go kubelet's
//! `EnsureImageExists` (k/k `pkg/kubelet/images/image_manager.go`) and `PullImage` with pull
//! secrets (`kuberuntime_image.go`). What to do is the pure [`pull_step`]; [`ensure_image`]
//! carries it out with the events the Go kubelet records.

use super::SyncContext;
use crate::backoff::Backoff;
use crate::events::reason;
use crate::image::{self, PullDecision, PullPolicy};
use crate::pod::actions::{Waiting, WaitingReason};
use crate::pod::spec::ImageUser;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::Api;
use tokio::time::Instant;

/// What to do about a container's image ([`pull_step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullStep {
    /// The image is present and the policy allows it as is.
    UsePresent,
    /// Pull it (after looking up the pod's pull credentials).
    Pull,
    /// Pull it, but the pull back-off of this pod and image holds: the container waits with
    /// this state (the credentials are still looked up first, as in the Go kubelet).
    BackOff(Waiting),
    /// `imagePullPolicy: Never` and the image is missing: the container waits with this state.
    NeverPullMissing(Waiting),
}

/// The step for `image` (as requested: `requested`) under `policy`, given whether the runtime
/// has it, whether the pull back-off (key `<pod uid>_<image>`) holds, and the container's
/// previous waiting state: a back-off's message carries the previous pull error as the Go
/// kubelet's `prevPullErrMsg` does (`Back-off pulling image "x": ErrImagePull: <error>`).
pub fn pull_step(
    policy: PullPolicy,
    present: bool,
    in_backoff: bool,
    requested: &str,
    image: &str,
    previous: Option<&Waiting>,
) -> PullStep {
    match image::decide(policy, present) {
        PullDecision::UsePresent => PullStep::UsePresent,
        PullDecision::NeverPullMissing => PullStep::NeverPullMissing(Waiting::new(
            WaitingReason::ErrImageNeverPull,
            format!("Container image {requested:?} is not present with pull policy of Never"),
        )),
        PullDecision::Pull if !in_backoff => PullStep::Pull,
        PullDecision::Pull => {
            let mut msg = format!("Back-off pulling image {image:?}");
            if let Some(prev) = previous.filter(|w| w.reason.is_image_pull()) {
                let prev_msg = prev
                    .message
                    .split_once(": ErrImagePull: ")
                    .map(|(_, m)| m)
                    .unwrap_or(&prev.message);
                msg = format!("{msg}: ErrImagePull: {prev_msg}");
            }
            PullStep::BackOff(Waiting::new(WaitingReason::ImagePullBackOff, msg))
        }
    }
}

/// The pull back-off key of `image` for pod `uid` (k/k `backOffKey`).
pub fn pull_backoff_key(uid: &str, image: &str) -> String {
    format!("{uid}_{image}")
}

/// What to ensure: a container's image, or an image volume's (k/k `EnsureImageExists` is called
/// with either; events go on the container, or on the pod for a volume).
#[derive(Debug, Clone, Copy)]
pub struct ImageRequest<'a> {
    /// The container the events name; None for an image volume (events on the pod).
    pub container: Option<&'a str>,
    /// The image as the spec writes it.
    pub requested: &'a str,
    /// `imagePullPolicy` (container) or `pullPolicy` (image volume) as written; None defaults as
    /// the API server does (`Always` for `:latest` or no tag, else `IfNotPresent`).
    pub pull_policy: Option<&'a str>,
}

/// An image made sure of ([`ensure_image_ref`]): the reference to create the container with,
/// and the image's user when the image's status was read on the way (the Go kubelet asks the
/// runtime again for it, `getImageUser`; this saves that call on every container start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsuredImage {
    /// The image reference (the image ID when it was present, else what the pull returned).
    pub image_ref: String,
    /// The image's user, when its status is known ([`crate::pod::spec::ImageUser::of`]).
    pub user: Option<crate::pod::spec::ImageUser>,
}

/// The Go kubelet's `EnsureImageExists` for container `c` ([`ensure_image_ref`] with its image
/// and `imagePullPolicy`).
pub async fn ensure_image(
    ctx: &SyncContext,
    pod: &Pod,
    c: &Container,
    sandbox_config: &crate::cri::api::PodSandboxConfig,
    image_backoff: &mut Backoff,
    previous: Option<&Waiting>,
) -> Result<EnsuredImage, Waiting> {
    let requested = c.image.clone().unwrap_or_default();
    let req = ImageRequest {
        container: Some(&c.name),
        requested: &requested,
        pull_policy: c.image_pull_policy.as_deref(),
    };
    ensure_image_ref(ctx, pod, &req, sandbox_config, image_backoff, previous).await
}

/// The Go kubelet's `EnsureImageExists`: returns the image reference to create the container
/// (or mount the image volume) with and, when known, the image's user, or the waiting state
/// (`InvalidImageName`, `ImageInspectError`, `ErrImageNeverPull`, `ImagePullBackOff`,
/// `ErrImagePull`, or a pull secret's error). `image_backoff` is the worker's pull back-off
/// table; `previous` the container's last waiting state.
pub async fn ensure_image_ref(
    ctx: &SyncContext,
    pod: &Pod,
    req: &ImageRequest<'_>,
    sandbox_config: &crate::cri::api::PodSandboxConfig,
    image_backoff: &mut Backoff,
    previous: Option<&Waiting>,
) -> Result<EnsuredImage, Waiting> {
    let requested = req.requested.to_string();
    let name = req.container;
    let event = |warning: bool, why: &str, msg: String| {
        ctx.recorder.pod(pod, name, warning, why, msg);
    };
    let image = match image::apply_default_tag(&requested) {
        Ok(i) => i,
        Err(e) => {
            let msg = format!("Failed to apply default image tag {requested:?}: {e}");
            event(true, reason::INSPECT_FAILED, msg.clone());
            event(true, reason::FAILED, "Error: InvalidImageName".into());
            return Err(Waiting::new(WaitingReason::InvalidImageName, msg));
        }
    };
    let policy = PullPolicy::from_spec(req.pull_policy, &requested);
    let present = match ctx.cri.image_status(&image).await {
        Ok(p) => p,
        Err(e) => {
            let msg = format!("Failed to inspect image {image:?}: {}", e.user_message());
            event(true, reason::INSPECT_FAILED, msg.clone());
            return Err(Waiting::new(WaitingReason::ImageInspectError, msg));
        }
    };
    let key = pull_backoff_key(crate::pod::uid(pod), &image);
    let now = ctx.clock.now();
    let in_backoff = image_backoff.is_in_backoff_since_update(&key, now);
    let step = pull_step(
        policy,
        present.is_some(),
        in_backoff,
        &requested,
        &image,
        previous,
    );
    match step {
        PullStep::UsePresent => {
            event(
                false,
                reason::PULLED,
                format!("Container image {requested:?} already present on machine"),
            );
            return Ok(EnsuredImage {
                user: present.as_ref().map(ImageUser::of),
                image_ref: present.map(|i| i.id).unwrap_or(image),
            });
        }
        PullStep::NeverPullMissing(w) => {
            event(true, reason::ERR_IMAGE_NEVER_PULL, w.message.clone());
            event(true, reason::FAILED, "Error: ErrImageNeverPull".into());
            return Err(w);
        }
        PullStep::Pull | PullStep::BackOff(_) => {}
    }
    // Credentials from the pod's pull secrets, looked up once per pull as the Go kubelet's
    // makeLookupPullCredentialsFunc does; a secret that does not parse fails the start.
    let credentials = match pull_credentials(ctx, pod, &image).await {
        Ok(c) => c,
        Err(msg) => {
            event(true, reason::FAILED, format!("Error: {msg}"));
            return Err(Waiting::new(WaitingReason::Other(msg.clone()), msg));
        }
    };
    if let PullStep::BackOff(w) = step {
        event(
            false,
            reason::BACK_OFF,
            format!("Back-off pulling image {image:?}"),
        );
        event(true, reason::FAILED, "Error: ImagePullBackOff".into());
        return Err(w);
    }
    let uid = crate::pod::uid(pod);
    let latency = crate::pod::startup_latency::tracker();
    latency.record_image_started_pulling(uid, std::time::SystemTime::now());
    let waiting_started = Instant::now();
    let _guard = ctx.pull_lock.lock().await;
    event(false, reason::PULLING, format!("Pulling image {image:?}"));
    let pull_started = Instant::now();
    match pull_with_credentials(&ctx.cri, &image, &credentials, sandbox_config).await {
        Ok(image_ref) => {
            // as Go: a failed pull's session stays open and is never counted
            latency.record_image_finished_pulling(uid, std::time::SystemTime::now());
            let pull = crate::time::truncate_ms(pull_started.elapsed());
            let total = crate::time::truncate_ms(waiting_started.elapsed());
            let pulled = ctx.cri.image_status(&image_ref).await.ok().flatten();
            let size = pulled.as_ref().map(|i| i.size).unwrap_or(0);
            event(
                false,
                reason::PULLED,
                format!(
                    "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
                    crate::time::go_duration(pull),
                    crate::time::go_duration(total)
                ),
            );
            image_backoff.gc(ctx.clock.now());
            Ok(EnsuredImage {
                user: pulled.as_ref().map(ImageUser::of),
                image_ref,
            })
        }
        Err(msg) => {
            event(
                true,
                reason::FAILED,
                format!("Failed to pull image {image:?}: {msg}"),
            );
            event(true, reason::FAILED, "Error: ErrImagePull".into());
            image_backoff.next(&key, ctx.clock.now());
            Err(Waiting::new(WaitingReason::ErrImagePull, msg))
        }
    }
}

/// The candidate credentials for pulling `image`: the pod's `imagePullSecrets` are read from
/// its namespace (a secret that cannot be read is skipped with the Go kubelet's
/// `FailedToRetrieveImagePullSecret` warning, k/k `kubelet_pods.go` `getPullSecretsForPod`)
/// and matched by [`crate::credentialprovider`]. Empty when the pod has no pull secrets or
/// none matches.
///
/// Errors: the text of a pull secret whose payload does not parse, or of an image reference
/// that does not parse.
async fn pull_credentials(
    ctx: &SyncContext,
    pod: &Pod,
    image: &str,
) -> Result<Vec<crate::credentialprovider::TrackedAuthConfig>, String> {
    use crate::credentialprovider as cp;
    let names = cp::pull_secret_names(pod);
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(ctx.client.clone(), ns);
    let mut secrets = Vec::new();
    let mut failed = Vec::new();
    for n in names {
        match api.get(&n).await {
            Ok(s) => secrets.push(s),
            Err(e) => {
                tracing::info!(secret = %n, error = %e, "Unable to retrieve pull secret, the image pull may not succeed.");
                failed.push(n);
            }
        }
    }
    if !failed.is_empty() {
        ctx.recorder.pod(
            pod,
            None,
            true,
            reason::FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
            cp::failed_pull_secrets_message(&failed),
        );
    }
    let repo =
        cp::repo_to_pull(image).map_err(|e| format!("couldn't parse image name {image:?}: {e}"))?;
    let keyring = cp::keyring_from_secrets(&secrets).map_err(|e| e.to_string())?;
    let found = keyring.lookup(&repo);
    tracing::debug!(image = %image, candidates = found.len(), "credentials from pull secrets");
    Ok(found)
}

/// Pulls `image`, with no credentials when `credentials` is empty, else trying each candidate in
/// turn until one succeeds (k/k `kuberuntime_image.go` `PullImage`; there is no anonymous attempt
/// after the candidates fail). Returns the image reference, or the error text as the Go kubelet
/// renders it (one error as is, several as an aggregate `[a, b]`). Credentials are never logged.
async fn pull_with_credentials(
    cri: &crate::cri::CriClient,
    image: &str,
    credentials: &[crate::credentialprovider::TrackedAuthConfig],
    sandbox_config: &crate::cri::api::PodSandboxConfig,
) -> Result<String, String> {
    if credentials.is_empty() {
        return cri
            .pull_image(image, None, Some(sandbox_config.clone()))
            .await
            .map_err(|e| e.user_message());
    }
    let mut errs = Vec::new();
    for c in credentials {
        match cri
            .pull_image(image, Some(c.auth.to_cri()), Some(sandbox_config.clone()))
            .await
        {
            Ok(r) => return Ok(r),
            Err(e) => {
                tracing::debug!(
                    image = %image,
                    secret = c.source.as_ref().map(|s| s.name.as_str()).unwrap_or(""),
                    "pull with these credentials failed"
                );
                errs.push(e.user_message());
            }
        }
    }
    Err(crate::credentialprovider::aggregate_messages(&errs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(policy: PullPolicy, present: bool, backoff: bool, prev: Option<&Waiting>) -> PullStep {
        pull_step(
            policy,
            present,
            backoff,
            "busybox",
            "localhost:5000/busybox:1.36",
            prev,
        )
    }

    #[test]
    fn pull_step_follows_the_policy_and_the_back_off() {
        use PullPolicy::*;
        assert_eq!(step(IfNotPresent, true, true, None), PullStep::UsePresent);
        assert_eq!(step(IfNotPresent, false, false, None), PullStep::Pull);
        assert_eq!(step(Always, true, false, None), PullStep::Pull);
        match step(Never, false, false, None) {
            PullStep::NeverPullMissing(w) => {
                assert_eq!(w.reason, WaitingReason::ErrImageNeverPull);
                assert_eq!(
                    w.message,
                    "Container image \"busybox\" is not present with pull policy of Never"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(step(Never, true, false, None), PullStep::UsePresent);
    }

    #[test]
    fn back_off_message_carries_the_previous_pull_error_once() {
        let first = Waiting::new(WaitingReason::ErrImagePull, "not found");
        let PullStep::BackOff(w) = step(PullPolicy::Always, false, true, Some(&first)) else {
            panic!()
        };
        assert_eq!(w.reason, WaitingReason::ImagePullBackOff);
        assert_eq!(
            w.message,
            "Back-off pulling image \"localhost:5000/busybox:1.36\": ErrImagePull: not found"
        );
        // a second back-off in a row does not nest the prefix
        let PullStep::BackOff(again) = step(PullPolicy::Always, false, true, Some(&w)) else {
            panic!()
        };
        assert_eq!(again.message, w.message);
        // an unrelated previous reason is not quoted
        let crash = Waiting::new(WaitingReason::CrashLoopBackOff, "x");
        let PullStep::BackOff(w) = step(PullPolicy::Always, false, true, Some(&crash)) else {
            panic!()
        };
        assert_eq!(
            w.message,
            "Back-off pulling image \"localhost:5000/busybox:1.36\""
        );
    }
}
