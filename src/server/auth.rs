//! Authentication and authorization of requests to the kubelet server, as the Go kubelet does
//! it (k/k `pkg/kubelet/server/auth.go`, `cmd/kubelet/app/auth.go`, k8s.io/apiserver's
//! delegating authenticator and authorizer):
//!
//! - **authentication**: an x509 client certificate verified against the client CA (user = CN,
//!   groups = O), else a bearer token checked through a `TokenReview` (cached 2 minutes), else
//!   anonymous (`system:anonymous`) when `--anonymous-auth` allows it. Every authenticated user
//!   also gets the group `system:authenticated`. Failure → 401 `Unauthorized`.
//! - **authorization**: a `SubjectAccessReview` for resource `nodes`, name = this node, verb from
//!   the HTTP method, subresource(s) from the path ([`request_attributes`]); allowed decisions
//!   are cached 5 minutes, denied ones 30 seconds. Denied → 403; a review that fails → 500.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The group every authenticated user gets (k8s.io/apiserver `user.AllAuthenticated`).
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The anonymous user's name (`user.Anonymous`).
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The anonymous user's group (`user.AllUnauthenticated`).
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";

/// How long a TokenReview answer is reused (KubeletConfiguration
/// `authentication.webhook.cacheTTL` default).
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(120);
/// How long an allowed SubjectAccessReview is reused (`authorization.webhook.cacheAuthorizedTTL`).
pub const AUTHORIZED_CACHE_TTL: Duration = Duration::from_secs(300);
/// How long a denied SubjectAccessReview is reused (`authorization.webhook.cacheUnauthorizedTTL`).
pub const UNAUTHORIZED_CACHE_TTL: Duration = Duration::from_secs(30);
/// Cache entries kept at most per cache; older entries are dropped first when it is full.
const CACHE_MAX: usize = 1024;

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserInfo {
    /// User name (x509: the CN).
    pub name: String,
    /// UID (TokenReview only).
    pub uid: String,
    /// Groups (x509: the O values), always including `system:authenticated` for real users.
    pub groups: Vec<String>,
    /// Extra attributes from the TokenReview.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user from a client certificate's subject: CN is the name, each O a group.
    pub fn from_x509_subject(common_name: &str, organizations: &[String]) -> Self {
        let mut groups: Vec<String> = organizations.to_vec();
        if !groups.iter().any(|g| g == ALL_AUTHENTICATED) {
            groups.push(ALL_AUTHENTICATED.into());
        }
        UserInfo {
            name: common_name.into(),
            uid: String::new(),
            groups,
            extra: BTreeMap::new(),
        }
    }

    /// `system:anonymous` in group `system:unauthenticated`.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS_USER.into(),
            uid: String::new(),
            groups: vec![ALL_UNAUTHENTICATED.into()],
            extra: BTreeMap::new(),
        }
    }
}

/// The identity of a TLS client certificate, extracted at the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X509Identity {
    /// The subject's common name.
    pub common_name: String,
    /// The subject's organizations.
    pub organizations: Vec<String>,
}

/// Reads CN and O from a DER client certificate (already verified against the client CA by the
/// TLS layer). `None` when it cannot be parsed or has no CN (the Go authenticator rejects a
/// certificate without a common name: "x509: subject with cn=... is not in the allowed list"
/// does not apply here; an empty CN is simply not a user).
pub fn x509_identity(der: &[u8]) -> Option<X509Identity> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    if common_name.is_empty() {
        return None;
    }
    let organizations = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(String::from))
        .collect();
    Some(X509Identity {
        common_name,
        organizations,
    })
}

/// The bearer token of an `Authorization` header value (`Bearer <token>`, case-insensitive
/// scheme, as k8s.io/apiserver's bearertoken authenticator reads it). `None` when absent or empty.
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let v = authorization?.trim();
    let (scheme, token) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

/// One authorization check: the attributes of a `SubjectAccessReview`
/// (resource `nodes`, group "", version v1, name = node).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// API verb from the HTTP method (`get`, `create`, ...; empty for other methods).
    pub verb: String,
    /// `proxy`, `stats`, `metrics`, `log`, `checkpoint`, `pods`, `healthz`, `configz`, `statusz`.
    pub subresource: String,
    /// The node's name.
    pub node: String,
}

/// The API verb of an HTTP method (Go kubelet `GetRequestAttributes`).
pub fn api_verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// Go kubelet's `isSubpath`: `subpath` equals `path` (trailing slash ignored) or lies below it.
fn is_subpath(subpath: &str, path: &str) -> bool {
    let path = path.strip_suffix('/').unwrap_or(path);
    subpath == path
        || (subpath.starts_with(path) && subpath.as_bytes().get(path.len()) == Some(&b'/'))
}

/// The subresources to check, in order, for a request path; the request is allowed when any is
/// allowed (k/k `pkg/kubelet/server/auth.go` `GetRequestAttributes`, with
/// KubeletFineGrainedAuthz, GA and locked on in v1.36):
///
/// | path | subresources |
/// |---|---|
/// | `/pods`, `/runningpods/` | pods, proxy |
/// | `/healthz` | healthz, proxy |
/// | `/configz` | configz, proxy |
/// | `/stats/*` | stats |
/// | `/metrics`, `/metrics/*` | metrics |
/// | `/logs/*` | log |
/// | `/checkpoint/*` | checkpoint |
/// | `/statusz` | statusz |
/// | `/flagz` | configz |
/// | anything else (`/exec`, `/attach`, `/portForward`, `/containerLogs`, `/run`, ...) | proxy |
pub fn subresources_for_path(path: &str) -> Vec<&'static str> {
    let mut subs = Vec::with_capacity(2);
    if is_subpath(path, "/pods") {
        subs.push("pods");
    } else if is_subpath(path, "/healthz") {
        subs.push("healthz");
    } else if is_subpath(path, "/configz") {
        subs.push("configz");
    } else if is_subpath(path, "/runningpods/") {
        subs.push("pods");
    }
    let main = if is_subpath(path, "/stats/") {
        "stats"
    } else if is_subpath(path, "/metrics") {
        "metrics"
    } else if is_subpath(path, "/logs/") {
        "log"
    } else if is_subpath(path, "/checkpoint/") {
        "checkpoint"
    } else if is_subpath(path, "/statusz") {
        "statusz"
    } else if is_subpath(path, "/flagz") {
        "configz"
    } else {
        "proxy"
    };
    subs.push(main);
    subs
}

/// The authorization attributes of a request (one per subresource to try).
pub fn request_attributes(method: &str, path: &str, node: &str) -> Vec<Attributes> {
    let verb = api_verb(method);
    subresources_for_path(path)
        .into_iter()
        .map(|s| Attributes {
            verb: verb.into(),
            subresource: s.into(),
            node: node.into(),
        })
        .collect()
}

/// The 403 body, as the Go kubelet writes it:
/// `Forbidden (user=<u>, verb=<v>, resource=nodes, subresource(s)=[a b])\n`.
pub fn forbidden_message(user: &str, attrs: &[Attributes]) -> String {
    let subs: Vec<&str> = attrs.iter().map(|a| a.subresource.as_str()).collect();
    let verb = attrs.first().map(|a| a.verb.as_str()).unwrap_or("");
    format!(
        "Forbidden (user={user}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
        subs.join(" ")
    )
}

/// How requests are authorized (`--authorization-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// Every authenticated request is allowed.
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    /// SubjectAccessReview against the API server.
    #[value(name = "Webhook")]
    Webhook,
}

/// Why a request was not let through.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No usable credentials (401).
    #[error("Unauthorized")]
    Unauthenticated,
    /// The user may not do this (403); the message is the Go kubelet's.
    #[error("{0}")]
    Forbidden(String),
    /// The SubjectAccessReview could not be made (500).
    #[error("{0}")]
    AuthorizationError(String),
}

/// A small TTL cache (bounded; expired entries go first, then the oldest).
struct TtlCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    fn new() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }
    fn get(&mut self, k: &K, now: Instant) -> Option<V> {
        match self.entries.get(k) {
            Some((v, exp)) if *exp > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(k);
                None
            }
            None => None,
        }
    }
    fn insert(&mut self, k: K, v: V, ttl: Duration, now: Instant) {
        if self.entries.len() >= CACHE_MAX {
            self.entries.retain(|_, (_, exp)| *exp > now);
            if self.entries.len() >= CACHE_MAX {
                if let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, exp))| *exp)
                    .map(|(k, _)| k.clone())
                {
                    self.entries.remove(&oldest);
                }
            }
        }
        self.entries.insert(k, (v, now + ttl));
    }
}

/// Token cache key: a hash of the token, so that tokens themselves are not kept around.
fn token_key(token: &str) -> u64 {
    let mut h = DefaultHasher::new();
    token.hash(&mut h);
    h.finish()
}

/// Authenticates and authorizes requests for one node.
pub struct Auth {
    client: kube::Client,
    node: String,
    anonymous: bool,
    token_webhook: bool,
    mode: AuthorizationMode,
    token_cache: Mutex<TtlCache<u64, Option<UserInfo>>>,
    sar_cache: Mutex<TtlCache<(UserInfo, Attributes), bool>>,
}

impl Auth {
    /// An authenticator/authorizer for node `node`, asking the API server through `client`.
    pub fn new(
        client: kube::Client,
        node: String,
        anonymous: bool,
        token_webhook: bool,
        mode: AuthorizationMode,
    ) -> Self {
        Self {
            client,
            node,
            anonymous,
            token_webhook,
            mode,
            token_cache: Mutex::new(TtlCache::new()),
            sar_cache: Mutex::new(TtlCache::new()),
        }
    }

    /// Who sent the request: the verified client certificate first, then the bearer token, then
    /// anonymous (if enabled and no credentials at all were presented).
    pub async fn authenticate(
        &self,
        cert: Option<&X509Identity>,
        authorization: Option<&str>,
    ) -> Result<UserInfo, AuthError> {
        if let Some(id) = cert {
            return Ok(UserInfo::from_x509_subject(
                &id.common_name,
                &id.organizations,
            ));
        }
        if let Some(token) = bearer_token(authorization) {
            if !self.token_webhook {
                return Err(AuthError::Unauthenticated);
            }
            return self
                .review_token(token)
                .await?
                .ok_or(AuthError::Unauthenticated);
        }
        if authorization.is_none() && self.anonymous {
            return Ok(UserInfo::anonymous());
        }
        Err(AuthError::Unauthenticated)
    }

    async fn review_token(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let key = token_key(token);
        let now = Instant::now();
        if let Some(hit) = self.token_cache.lock().unwrap().get(&key, now) {
            return Ok(hit);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let result = match api.create(&PostParams::default(), &review).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "TokenReview failed; request is unauthenticated");
                return Err(AuthError::Unauthenticated);
            }
        };
        let status = result.status.unwrap_or_default();
        let user = if status.authenticated == Some(true) {
            status.user.map(|u| {
                let mut groups = u.groups.unwrap_or_default();
                if !groups.iter().any(|g| g == ALL_AUTHENTICATED) {
                    groups.push(ALL_AUTHENTICATED.into());
                }
                UserInfo {
                    name: u.username.unwrap_or_default(),
                    uid: u.uid.unwrap_or_default(),
                    groups,
                    extra: u.extra.unwrap_or_default(),
                }
            })
        } else {
            None
        };
        self.token_cache
            .lock()
            .unwrap()
            .insert(key, user.clone(), TOKEN_CACHE_TTL, now);
        Ok(user)
    }

    /// Whether `user` may make a `method` request to `path`.
    pub async fn authorize(
        &self,
        user: &UserInfo,
        method: &str,
        path: &str,
    ) -> Result<(), AuthError> {
        let attrs = request_attributes(method, path, &self.node);
        if self.mode == AuthorizationMode::AlwaysAllow {
            return Ok(());
        }
        for a in &attrs {
            if self.review_access(user, a).await? {
                return Ok(());
            }
        }
        tracing::debug!(user = %user.name, verb = %attrs[0].verb, path, "forbidden");
        Err(AuthError::Forbidden(forbidden_message(&user.name, &attrs)))
    }

    async fn review_access(&self, user: &UserInfo, a: &Attributes) -> Result<bool, AuthError> {
        let key = (user.clone(), a.clone());
        let now = Instant::now();
        if let Some(hit) = self.sar_cache.lock().unwrap().get(&key, now) {
            return Ok(hit);
        }
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
                groups: Some(user.groups.clone()),
                extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(a.verb.clone()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(a.subresource.clone()),
                    name: Some(a.node.clone()),
                    namespace: Some(String::new()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let allowed = match api.create(&PostParams::default(), &sar).await {
            Ok(r) => r.status.map(|s| s.allowed).unwrap_or(false),
            Err(e) => {
                tracing::warn!(error = %e, user = %user.name, "SubjectAccessReview failed");
                return Err(AuthError::AuthorizationError(format!(
                    "Authorization error (user={}, verb={}, resource=nodes, subresource={})",
                    user.name, a.verb, a.subresource
                )));
            }
        };
        let ttl = if allowed {
            AUTHORIZED_CACHE_TTL
        } else {
            UNAUTHORIZED_CACHE_TTL
        };
        self.sar_cache
            .lock()
            .unwrap()
            .insert(key, allowed, ttl, now);
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_paths_need_nodes_proxy() {
        for p in [
            "/containerLogs/ns/pod/c",
            "/exec/ns/pod/c",
            "/attach/ns/pod/uid/c",
            "/portForward/ns/pod",
            "/run/ns/pod/c",
            "/",
            "/podsx",
            "/statsx",
        ] {
            assert_eq!(subresources_for_path(p), vec!["proxy"], "{p}");
        }
    }

    #[test]
    fn stats_metrics_and_logs_have_their_own_subresources() {
        assert_eq!(subresources_for_path("/stats/summary"), vec!["stats"]);
        assert_eq!(subresources_for_path("/stats"), vec!["stats"]);
        assert_eq!(subresources_for_path("/stats/"), vec!["stats"]);
        assert_eq!(subresources_for_path("/metrics"), vec!["metrics"]);
        assert_eq!(subresources_for_path("/metrics/resource"), vec!["metrics"]);
        assert_eq!(subresources_for_path("/metrics/cadvisor"), vec!["metrics"]);
        assert_eq!(subresources_for_path("/logs/"), vec!["log"]);
        assert_eq!(subresources_for_path("/logs/syslog"), vec!["log"]);
        assert_eq!(
            subresources_for_path("/checkpoint/a/b/c"),
            vec!["checkpoint"]
        );
        assert_eq!(subresources_for_path("/statusz"), vec!["statusz"]);
        assert_eq!(subresources_for_path("/flagz"), vec!["configz"]);
    }

    #[test]
    fn fine_grained_paths_fall_back_to_proxy() {
        assert_eq!(subresources_for_path("/pods"), vec!["pods", "proxy"]);
        assert_eq!(subresources_for_path("/pods/"), vec!["pods", "proxy"]);
        assert_eq!(
            subresources_for_path("/runningpods/"),
            vec!["pods", "proxy"]
        );
        assert_eq!(subresources_for_path("/healthz"), vec!["healthz", "proxy"]);
        assert_eq!(
            subresources_for_path("/healthz/ping"),
            vec!["healthz", "proxy"]
        );
        assert_eq!(subresources_for_path("/configz"), vec!["configz", "proxy"]);
    }

    #[test]
    fn verbs_come_from_http_methods() {
        assert_eq!(api_verb("GET"), "get");
        assert_eq!(api_verb("POST"), "create");
        assert_eq!(api_verb("PUT"), "update");
        assert_eq!(api_verb("PATCH"), "patch");
        assert_eq!(api_verb("DELETE"), "delete");
        assert_eq!(api_verb("HEAD"), "");
        let a = request_attributes("POST", "/exec/a/b/c", "node1");
        assert_eq!(
            a,
            vec![Attributes {
                verb: "create".into(),
                subresource: "proxy".into(),
                node: "node1".into()
            }]
        );
    }

    #[test]
    fn forbidden_message_matches_the_go_kubelet() {
        let a = request_attributes("GET", "/pods", "n");
        assert_eq!(
            forbidden_message("alice", &a),
            "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
        );
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), None);
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn x509_users_are_authenticated_members_of_their_organizations() {
        let u = UserInfo::from_x509_subject(
            "kube-apiserver-kubelet-client",
            &["system:masters".into()],
        );
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, vec!["system:masters", ALL_AUTHENTICATED]);
    }

    #[test]
    fn x509_identity_reads_cn_and_o() {
        let mut params = rcgen::CertificateParams::new(vec!["x".to_string()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let id = x509_identity(cert.der()).unwrap();
        assert_eq!(id.common_name, "system:node:n1");
        assert_eq!(id.organizations, vec!["system:nodes"]);
    }

    #[test]
    fn ttl_cache_expires_and_stays_bounded() {
        let mut c: TtlCache<u32, bool> = TtlCache::new();
        let t0 = Instant::now();
        c.insert(1, true, Duration::from_secs(10), t0);
        assert_eq!(c.get(&1, t0 + Duration::from_secs(5)), Some(true));
        assert_eq!(c.get(&1, t0 + Duration::from_secs(11)), None);
        for i in 0..(CACHE_MAX as u32 + 10) {
            c.insert(i, false, Duration::from_secs(i as u64 + 1), t0);
        }
        assert!(c.entries.len() <= CACHE_MAX);
    }
}
