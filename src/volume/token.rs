//! Service-account tokens for projected volumes: TokenRequests bound to the pod, retried while
//! the node authorizer has not linked a new pod to this node yet, cached and refreshed as the Go
//! kubelet's token manager does (k/k `pkg/kubelet/token/token_manager.go`).

use super::VolumeError;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use std::collections::HashMap;
use std::time::Duration;

/// Service-account tokens for projected volumes, cached per pod and request and renewed as the
/// Go kubelet's token manager does (k/k `pkg/kubelet/token/token_manager.go`): a cached token is
/// reused until 80 % of its lifetime has passed or it is older than 24 h.
#[derive(Default)]
pub struct TokenManager {
    cache: std::sync::Mutex<HashMap<String, CachedToken>>,
}

#[derive(Clone)]
struct CachedToken {
    token: String,
    issued: std::time::SystemTime,
    expires: std::time::SystemTime,
}

/// Whether a token issued at `issued` and expiring at `expires` must be renewed at `now`
/// (k/k token manager `requiresRefresh`): after 80 % of its lifetime, or after 24 h.
pub fn token_requires_refresh(
    issued: std::time::SystemTime,
    expires: std::time::SystemTime,
    now: std::time::SystemTime,
) -> bool {
    let ttl = expires.duration_since(issued).unwrap_or_default();
    let age = now.duration_since(issued).unwrap_or_default();
    now >= expires || age.as_secs_f64() > ttl.as_secs_f64() * 0.8 || age.as_secs() > 24 * 3600
}

/// The process's token manager.
pub fn tokens() -> &'static TokenManager {
    static T: std::sync::OnceLock<TokenManager> = std::sync::OnceLock::new();
    T.get_or_init(TokenManager::default)
}

impl TokenManager {
    /// A token for `pod`'s service account with `audience` and `expiration` (seconds, default
    /// 3607 as the API server's admission sets), from the cache or a new TokenRequest bound to
    /// the pod.
    ///
    /// Errors: the TokenRequest failed.
    pub async fn get(
        &self,
        client: &kube::Client,
        pod: &Pod,
        audience: Option<String>,
        expiration: Option<i64>,
    ) -> Result<String, VolumeError> {
        let key = format!(
            "{}/{}/{:?}/{:?}",
            crate::pod::uid(pod),
            pod.spec
                .as_ref()
                .and_then(|s| s.service_account_name.as_deref())
                .unwrap_or("default"),
            audience,
            expiration
        );
        let now = std::time::SystemTime::now();
        if let Some(c) = self.cache.lock().unwrap().get(&key).cloned() {
            if !token_requires_refresh(c.issued, c.expires, now) {
                return Ok(c.token);
            }
        }
        let (token, expires) = request_token(client, pod, audience, expiration).await?;
        self.cache.lock().unwrap().insert(
            key,
            CachedToken {
                token: token.clone(),
                issued: now,
                expires,
            },
        );
        Ok(token)
    }

    /// Drops the cached tokens of pod `uid` (on pod removal).
    pub fn forget_pod(&self, uid: &str) {
        let prefix = format!("{uid}/");
        self.cache
            .lock()
            .unwrap()
            .retain(|k, _| !k.starts_with(&prefix));
    }
}

/// First wait before retrying a TokenRequest the node authorizer refused (doubling).
pub const TOKEN_RETRY_INITIAL: Duration = Duration::from_millis(50);
/// Longest wait between two TokenRequest retries.
pub const TOKEN_RETRY_MAX: Duration = Duration::from_millis(800);
/// How long a refused TokenRequest is retried before the volume setup fails (and the pod
/// worker's own retry takes over, `FailedMount`).
pub const TOKEN_RETRY_BUDGET: Duration = Duration::from_secs(10);

/// Whether a TokenRequest refusal means the API server does not yet know that the pod is on
/// this node: the node authorizer's graph (k/k `plugin/pkg/auth/authorizer/node`) is fed by an
/// informer and lags a new pod by a moment, answering 403 `no relationship found between node
/// ... and this object`, or `pod not found` (404 or 403) from the NodeRestriction admission.
pub fn token_refusal_is_transient(code: u16, message: &str) -> bool {
    matches!(code, 403 | 404)
        && (message.contains("no relationship found between node")
            || (message.contains("pod") && message.contains("not found")))
}

async fn request_token(
    client: &kube::Client,
    pod: &Pod,
    audience: Option<String>,
    expiration: Option<i64>,
) -> Result<(String, std::time::SystemTime), VolumeError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let req = TokenRequest {
        metadata: Default::default(),
        spec: Some(TokenRequestSpec {
            audiences: audience.filter(|a| !a.is_empty()).map(|a| vec![a]),
            expiration_seconds: Some(expiration.unwrap_or(3607)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        }),
        status: None,
    };
    // A pod the API server has only just bound here may not be in the node authorizer's graph
    // yet: the TokenRequest is then refused (403 "no relationship found between node ...", or
    // "pod not found"). Retry quietly with a short back-off before reporting a failure.
    let started = std::time::Instant::now();
    let mut delay = TOKEN_RETRY_INITIAL;
    let out: TokenRequest = loop {
        match api
            .create_subresource("token", &sa, &PostParams::default(), &req)
            .await
        {
            Ok(out) => break out,
            Err(kube::Error::Api(s))
                if token_refusal_is_transient(s.code, &s.message)
                    && started.elapsed() + delay <= TOKEN_RETRY_BUDGET =>
            {
                tracing::debug!(code = s.code, message = %s.message, retry_in = ?delay, "token request not authorized yet; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(TOKEN_RETRY_MAX);
            }
            Err(source) => {
                return Err(VolumeError::Api {
                    op: format!("request token for service account {ns}/{sa}"),
                    source,
                })
            }
        }
    };
    if started.elapsed() > TOKEN_RETRY_INITIAL {
        tracing::debug!(waited = ?started.elapsed(), "token issued after the node authorizer caught up");
    }
    let st = out.status.unwrap_or_default();
    let expires = match st.expiration_timestamp {
        Some(t) => {
            std::time::SystemTime::UNIX_EPOCH
                + std::time::Duration::from_secs(t.0.as_second().max(0) as u64)
        }
        None => {
            std::time::SystemTime::now()
                + std::time::Duration::from_secs(expiration.unwrap_or(3607).max(600) as u64)
        }
    };
    Ok((st.token.unwrap_or_default(), expires))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_refusals_before_the_node_authorizer_links_the_pod_are_retried() {
        let cases = [
            (403, "serviceaccounts \"default\" is forbidden: User \"system:node:n1\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"d\": no relationship found between node 'n1' and this object", true),
            (403, "pod \"p\" not found", true),
            (404, "pods \"p\" not found", true),
            (403, "serviceaccounts \"x\" is forbidden: User cannot create", false),
            (500, "no relationship found between node", false),
            (400, "invalid audience", false),
            (404, "serviceaccounts \"missing\" not found", false),
        ];
        for (code, msg, want) in cases {
            assert_eq!(token_refusal_is_transient(code, msg), want, "{code} {msg}");
        }
        assert!(TOKEN_RETRY_INITIAL < TOKEN_RETRY_MAX && TOKEN_RETRY_MAX < TOKEN_RETRY_BUDGET);
    }

    #[test]
    fn tokens_refresh_after_80_percent_of_their_lifetime_or_a_day() {
        use std::time::{Duration, UNIX_EPOCH};
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let exp = t0 + Duration::from_secs(3600);
        assert!(!token_requires_refresh(
            t0,
            exp,
            t0 + Duration::from_secs(2879)
        ));
        assert!(token_requires_refresh(
            t0,
            exp,
            t0 + Duration::from_secs(2881)
        ));
        assert!(token_requires_refresh(t0, exp, exp));
        let long = t0 + Duration::from_secs(7 * 24 * 3600);
        assert!(!token_requires_refresh(
            t0,
            long,
            t0 + Duration::from_secs(23 * 3600)
        ));
        assert!(token_requires_refresh(
            t0,
            long,
            t0 + Duration::from_secs(25 * 3600)
        ));
    }
}
