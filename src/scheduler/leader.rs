//! Leader election on a coordination.k8s.io/v1 Lease, so that of several replicas only one
//! schedules (`client-go/tools/leaderelection` with a `LeaseLock`, kube-scheduler's defaults:
//! lease 15 s, renew deadline 10 s, retry period 2 s, Lease `kube-system/kube-scheduler`).
//!
//! A candidate takes the Lease when it does not exist, when it names no holder, or when the
//! holder's record has not changed for a whole lease duration as observed on the candidate's own
//! clock (so clock skew between machines does not matter). Writes carry the resourceVersion they
//! read, so two candidates never both win. The leader renews every retry period and gives up when
//! it could not renew within the renew deadline; on shutdown it releases the Lease (empty holder,
//! 1 s duration) so that another replica takes over at once.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Election parameters (`--leader-elect-*` flags).
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (`<hostname>_<random>`).
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// What this candidate last saw of the Lease, and when (on its own monotonic clock).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    record: Option<LeaseSpec>,
    at: Option<Instant>,
}

/// The decision for one try (`tryAcquireOrRenew`), pure.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write this spec (create or update the Lease).
    Write(LeaseSpec),
    /// Someone else holds a live lease.
    Wait { holder: String },
}

fn micro(t: Timestamp) -> MicroTime {
    MicroTime(Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t))
}

/// Decides from the Lease's current spec (`None`: no Lease) whether to write a new record.
/// `observed` is updated with the record and, when it changed, the time it was seen.
pub fn decide(
    cfg: &ElectionConfig,
    current: Option<&LeaseSpec>,
    observed: &mut Observed,
    now: Instant,
    wall: Timestamp,
) -> Decision {
    let me = cfg.identity.as_str();
    let fresh = |transitions: i32, acquire: Timestamp| LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(cfg.lease_duration.as_secs().max(1) as i32),
        acquire_time: Some(micro(acquire)),
        renew_time: Some(micro(wall)),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    let Some(cur) = current else {
        return Decision::Write(fresh(0, wall));
    };
    if observed.record.as_ref() != Some(cur) {
        observed.record = Some(cur.clone());
        observed.at = Some(now);
    }
    let holder = cur.holder_identity.clone().unwrap_or_default();
    let duration = cur
        .lease_duration_seconds
        .map(|s| Duration::from_secs(s.max(0) as u64))
        .unwrap_or(cfg.lease_duration);
    let expired = observed
        .at
        .is_none_or(|at| now.saturating_duration_since(at) >= duration);
    if !holder.is_empty() && holder != me && !expired {
        return Decision::Wait { holder };
    }
    let transitions = cur.lease_transitions.unwrap_or(0);
    if holder == me {
        let acquire = cur.acquire_time.as_ref().map(|t| t.0).unwrap_or(wall);
        Decision::Write(fresh(transitions, acquire))
    } else {
        Decision::Write(fresh(transitions + 1, wall))
    }
}

/// A Lease elector.
pub struct Elector {
    api: Api<Lease>,
    pub cfg: ElectionConfig,
    observed: Observed,
}

impl Elector {
    pub fn new(client: kube::Client, cfg: ElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: Observed::default(),
        }
    }

    /// One try; `Ok(true)` when this replica holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let current = self.api.get_opt(&self.cfg.name).await?;
        let decision = decide(
            &self.cfg,
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &mut self.observed,
            Instant::now(),
            Timestamp::now(),
        );
        let spec = match decision {
            Decision::Wait { holder } => {
                tracing::debug!(%holder, "lease held by another replica");
                return Ok(false);
            }
            Decision::Write(spec) => spec,
        };
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec.clone()),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec.clone());
                // resourceVersion from the read: a concurrent writer makes this fail with 409
                self.api
                    .replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => {
                self.observed = Observed {
                    record: Some(spec),
                    at: Some(Instant::now()),
                };
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease (`true`) or `cancel` fires (`false`).
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        let mut logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name),
                        identity = %self.cfg.identity, "successfully acquired lease");
                    return true;
                }
                Ok(false) => {
                    if !logged {
                        tracing::info!(lease = %format!("{}/{}", self.cfg.namespace, self.cfg.name),
                            "attempting to acquire leader lease (held by another replica)");
                        logged = true;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "error retrieving or updating the lease"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
            }
        }
    }

    /// Renews every retry period until renewal fails for longer than the renew deadline
    /// (returns [`HoldEnd::Lost`]) or `cancel` fires ([`HoldEnd::Cancelled`]; the caller stops its
    /// work, then calls [`Elector::release`]).
    pub async fn hold(&mut self, cancel: &CancellationToken) -> HoldEnd {
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return HoldEnd::Cancelled,
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
            }
            let attempt =
                tokio::time::timeout(self.cfg.renew_deadline, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Ok(true)) => last_renew = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::warn!("lease renewal refused (conflict or another holder)")
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "failed to renew lease"),
                Err(_) => tracing::warn!("lease renewal timed out"),
            }
            if last_renew.elapsed() >= self.cfg.renew_deadline {
                tracing::error!("failed to renew lease within the renew deadline");
                return HoldEnd::Lost;
            }
        }
    }

    /// Gives the Lease up (`ReleaseOnCancel`): no holder, 1 s duration.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        let now = micro(Timestamp::now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now.clone());
        spec.acquire_time = Some(now);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("released the leader lease"),
            Err(e) => tracing::warn!(error = %e, "failed to release the leader lease"),
        }
    }
}

/// How holding the Lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    Lost,
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(id: &str) -> ElectionConfig {
        ElectionConfig {
            namespace: "kube-system".into(),
            name: "kube-scheduler".into(),
            identity: id.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn held_by(id: &str, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(id.into()),
            lease_duration_seconds: Some(15),
            lease_transitions: Some(transitions),
            renew_time: Some(micro(Timestamp::now())),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_lease_is_created() {
        let mut o = Observed::default();
        let Decision::Write(s) = decide(&cfg("a"), None, &mut o, Instant::now(), Timestamp::now())
        else {
            panic!("expected a write")
        };
        assert_eq!(s.holder_identity.as_deref(), Some("a"));
        assert_eq!(
            (s.lease_duration_seconds, s.lease_transitions),
            (Some(15), Some(0))
        );
    }

    #[test]
    fn a_live_lease_of_another_replica_is_respected_until_it_expires_on_our_clock() {
        let t0 = Instant::now();
        let mut o = Observed::default();
        let other = held_by("b", 3);
        assert_eq!(
            decide(&cfg("a"), Some(&other), &mut o, t0, Timestamp::now()),
            Decision::Wait { holder: "b".into() }
        );
        // unchanged record for 14 s: still waiting
        assert!(matches!(
            decide(
                &cfg("a"),
                Some(&other),
                &mut o,
                t0 + Duration::from_secs(14),
                Timestamp::now()
            ),
            Decision::Wait { .. }
        ));
        // unchanged for 15 s: expired, taken over with one more transition
        let Decision::Write(s) = decide(
            &cfg("a"),
            Some(&other),
            &mut o,
            t0 + Duration::from_secs(15),
            Timestamp::now(),
        ) else {
            panic!("expected a takeover")
        };
        assert_eq!(
            (s.holder_identity.as_deref(), s.lease_transitions),
            (Some("a"), Some(4))
        );
    }

    #[test]
    fn a_renewed_lease_restarts_the_wait() {
        let t0 = Instant::now();
        let mut o = Observed::default();
        decide(
            &cfg("a"),
            Some(&held_by("b", 0)),
            &mut o,
            t0,
            Timestamp::now(),
        );
        let mut renewed = held_by("b", 0);
        renewed.renew_time = Some(micro(Timestamp::now() + Duration::from_secs(10)));
        assert!(matches!(
            decide(
                &cfg("a"),
                Some(&renewed),
                &mut o,
                t0 + Duration::from_secs(20),
                Timestamp::now()
            ),
            Decision::Wait { .. }
        ));
    }

    #[test]
    fn the_holder_renews_and_a_released_lease_is_free() {
        let mut o = Observed::default();
        let Decision::Write(s) = decide(
            &cfg("a"),
            Some(&held_by("a", 2)),
            &mut o,
            Instant::now(),
            Timestamp::now(),
        ) else {
            panic!()
        };
        assert_eq!(s.lease_transitions, Some(2), "renewal is not a transition");
        let mut released = held_by("b", 2);
        released.holder_identity = None;
        assert!(matches!(
            decide(
                &cfg("a"),
                Some(&released),
                &mut Observed::default(),
                Instant::now(),
                Timestamp::now()
            ),
            Decision::Write(_)
        ));
    }
}
