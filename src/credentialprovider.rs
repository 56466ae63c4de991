//! Registry credentials from a pod's `imagePullSecrets`, matched to an image the way the Go
//! kubelet does it (k/k `pkg/credentialprovider`: `keyring.go`, `config.go`, and
//! `secrets/secrets.go`).
//!
//! Everything here is pure: secrets come in as already-fetched [`Secret`] objects, and the result
//! is an ordered list of candidate credentials for one image. The pull path
//! (`pod::workers`) hands each candidate in turn to CRI `PullImage` as its `AuthConfig`, as
//! `kuberuntime_image.go` `PullImage` does.
//!
//! Matching rules (`BasicDockerKeyring`):
//! - a dockercfg entry key may carry a scheme (`https://`, `http://`, dropped), a port and a path;
//!   a `/v1/` or `/v2/` path prefix counts as the bare host (`https://index.docker.io/v1/` is the
//!   key `index.docker.io`);
//! - a key matches an image when the ports are equal, the hosts have the same number of
//!   dot-separated parts and each image part matches the key's part as a glob
//!   (`*.example.com` matches `a.example.com`, not `a.b.example.com`), and the key's path is a
//!   string prefix of the image's path;
//! - keys are tried in reverse lexical order, so the most specific path comes first
//!   (`quay.io/coreos` before `quay.io`); several credentials for one key keep secret order;
//! - when nothing matches and the image is on Docker Hub, credentials for `index.docker.io` are
//!   used.
//!
//! Credentials never reach logs: [`AuthConfig`]'s `Debug` shows only the user name.

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use std::collections::{BTreeMap, BTreeSet};

/// Secret type of a `~/.docker/config.json` secret (key [`DOCKER_CONFIG_JSON_KEY`]).
pub const SECRET_TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// Data key of a `kubernetes.io/dockerconfigjson` secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// Secret type of a legacy `~/.dockercfg` secret (key [`DOCKER_CONFIG_KEY`]).
pub const SECRET_TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
/// Data key of a `kubernetes.io/dockercfg` secret.
pub const DOCKER_CONFIG_KEY: &str = ".dockercfg";

const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";
const DEFAULT_DOMAIN: &str = "docker.io";

/// Why a pull secret could not be turned into credentials (the Go kubelet fails the image lookup,
/// and with it the container start, on such a secret).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CredentialError {
    /// The secret's payload is not the JSON its type promises (the text is the JSON parser's).
    #[error("{0}")]
    Json(String),
    /// An `auth` field is not base64 of `user:password`.
    #[error("unable to parse auth field, must be formatted as base64(username:password)")]
    AuthField,
    /// An `auth` field is not valid base64.
    #[error("illegal base64 data in auth field")]
    AuthBase64,
}

/// One credential for a registry, as CRI's `AuthConfig` carries it (only user name and password
/// come from pull secrets, as in the Go kubelet's `BasicDockerKeyring.Add`).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct AuthConfig {
    /// Registry user name.
    pub username: String,
    /// Registry password (never logged).
    pub password: String,
    /// The e-mail field of the entry (deprecated in docker; not sent to CRI).
    pub email: String,
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl AuthConfig {
    /// The CRI `AuthConfig` for `PullImage` (no `server_address`, like the Go kubelet, so the
    /// runtime uses it for whichever host the image resolves to).
    pub fn to_cri(&self) -> crate::cri::api::AuthConfig {
        crate::cri::api::AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            ..Default::default()
        }
    }
}

/// Where a credential came from (the Go kubelet's `SecretCoordinates`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SecretCoordinates {
    /// Secret UID.
    pub uid: String,
    /// Secret namespace.
    pub namespace: String,
    /// Secret name.
    pub name: String,
}

/// A credential and its source (Go `TrackedAuthConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedAuthConfig {
    /// The credential.
    pub auth: AuthConfig,
    /// The secret it was read from (`None` for node-wide credentials).
    pub source: Option<SecretCoordinates>,
}

/// A dockercfg: registry key (as written in the file) to credential, in file order.
pub type DockerConfig = Vec<(String, AuthConfig)>;

/// Looks up a JSON object member case-insensitively, as Go's `encoding/json` matches fields
/// (an exact match wins).
fn member<'a>(
    obj: &'a serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<&'a serde_json::Value> {
    obj.get(name).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn string_member(
    obj: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Result<String, CredentialError> {
    match member(obj, name) {
        None | Some(serde_json::Value::Null) => Ok(String::new()),
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(CredentialError::Json(format!(
            "json: cannot unmarshal non-string into Go struct field .{name} of type string"
        ))),
    }
}

/// Decodes an `auth` field: base64 (padded when it ends in `=`, else unpadded) of
/// `user:password` (Go `decodeDockerConfigFieldAuth`).
fn decode_auth_field(field: &str) -> Result<(String, String), CredentialError> {
    let decoded = if field.trim().ends_with('=') {
        base64::engine::general_purpose::STANDARD.decode(field)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(field)
    }
    .map_err(|_| CredentialError::AuthBase64)?;
    let s = String::from_utf8_lossy(&decoded);
    match s.split_once(':') {
        Some((u, p)) => Ok((u.to_string(), p.to_string())),
        None => Err(CredentialError::AuthField),
    }
}

/// One dockercfg entry (`{"username", "password", "email", "auth"}`; a non-empty `auth` wins
/// over username/password).
fn parse_entry(v: &serde_json::Value) -> Result<AuthConfig, CredentialError> {
    let obj = match v {
        serde_json::Value::Object(o) => o,
        serde_json::Value::Null => return Ok(AuthConfig::default()),
        _ => {
            return Err(CredentialError::Json(
                "json: cannot unmarshal non-object into Go value of type credentialprovider.dockerConfigEntryWithAuth".into(),
            ))
        }
    };
    let mut a = AuthConfig {
        username: string_member(obj, "username")?,
        password: string_member(obj, "password")?,
        email: string_member(obj, "email")?,
    };
    let auth = string_member(obj, "auth")?;
    if !auth.is_empty() {
        let (u, p) = decode_auth_field(&auth)?;
        a.username = u;
        a.password = p;
    }
    Ok(a)
}

fn parse_config_object(v: &serde_json::Value) -> Result<DockerConfig, CredentialError> {
    match v {
        serde_json::Value::Null => Ok(Vec::new()),
        serde_json::Value::Object(o) => o
            .iter()
            .map(|(k, e)| Ok((k.clone(), parse_entry(e)?)))
            .collect(),
        _ => Err(CredentialError::Json(
            "json: cannot unmarshal non-object into Go value of type credentialprovider.DockerConfig"
                .into(),
        )),
    }
}

/// Parses a `.dockerconfigjson` payload (`{"auths": {...}}`).
pub fn parse_docker_config_json(bytes: &[u8]) -> Result<DockerConfig, CredentialError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| CredentialError::Json(e.to_string()))?;
    match &v {
        serde_json::Value::Object(o) => match member(o, "auths") {
            Some(a) => parse_config_object(a),
            None => Ok(Vec::new()),
        },
        _ => Err(CredentialError::Json(
            "json: cannot unmarshal non-object into Go value of type credentialprovider.DockerConfigJSON".into(),
        )),
    }
}

/// Parses a legacy `.dockercfg` payload (the registry map itself).
pub fn parse_dockercfg(bytes: &[u8]) -> Result<DockerConfig, CredentialError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| CredentialError::Json(e.to_string()))?;
    parse_config_object(&v)
}

/// A schemeless URL split the way Go's `url.Parse("https://" + s)` would: host (with port) and
/// path (query and fragment dropped). `None` for what Go would refuse.
fn split_schemeless(s: &str) -> Option<(String, String)> {
    let end = s.find(['?', '#']).unwrap_or(s.len());
    let s = &s[..end];
    let (host, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    if host.chars().any(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '<' | '>' | '"' | '{' | '}' | '|' | '\\' | '^' | '`' | '%'
            )
    }) {
        return None;
    }
    if path.chars().any(|c| c.is_control()) {
        return None;
    }
    Some((host.to_string(), path.to_string()))
}

/// Host parts and port of a URL host (Go `SplitURL`: `net.SplitHostPort`, else no port).
fn split_host(host: &str) -> (Vec<String>, String) {
    let (h, port) = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once("]:") {
            Some((h, p)) => (h.to_string(), p.to_string()),
            None => (host.to_string(), String::new()),
        }
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_string(), p.to_string()),
            _ => (host.to_string(), String::new()),
        }
    };
    (h.split('.').map(str::to_string).collect(), port)
}

/// Go's `path/filepath.Match` for one name without separators: `*`, `?`, `[...]` classes with
/// ranges and `^` negation, `\` escapes. A malformed pattern is no match (the keyring ignores the
/// error).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    fn class(p: &[char], c: char) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, chars consumed including ']')
        let mut i = 0;
        let negate = p.first() == Some(&'^');
        if negate {
            i += 1;
        }
        let mut matched = false;
        let mut first = true;
        loop {
            if i >= p.len() {
                return None;
            }
            if p[i] == ']' && !first {
                i += 1;
                break;
            }
            first = false;
            let mut lo = p[i];
            if lo == '\\' {
                i += 1;
                lo = *p.get(i)?;
            }
            i += 1;
            let mut hi = lo;
            if p.get(i) == Some(&'-') && p.get(i + 1).is_some_and(|c| *c != ']') {
                i += 1;
                hi = p[i];
                if hi == '\\' {
                    i += 1;
                    hi = *p.get(i)?;
                }
                i += 1;
            }
            if lo <= c && c <= hi {
                matched = true;
            }
        }
        Some((matched != negate, i))
    }
    fn go(p: &[char], n: &[char]) -> Option<bool> {
        if p.is_empty() {
            return Some(n.is_empty());
        }
        match p[0] {
            '*' => {
                let rest = &p[1..];
                for k in 0..=n.len() {
                    if go(rest, &n[k..])? {
                        return Some(true);
                    }
                }
                Some(false)
            }
            '?' => {
                if n.is_empty() {
                    // still validate the rest of the pattern
                    go(&p[1..], n).map(|_| false)
                } else {
                    go(&p[1..], &n[1..])
                }
            }
            '[' => {
                let (ok, used) = class(&p[1..], *n.first().unwrap_or(&'\0'))?;
                if n.is_empty() || !ok {
                    go(&p[1 + used..], n.get(1..).unwrap_or(&[])).map(|_| false)
                } else {
                    go(&p[1 + used..], &n[1..])
                }
            }
            '\\' => {
                let c = *p.get(1)?;
                if n.first() == Some(&c) {
                    go(&p[2..], &n[1..])
                } else {
                    go(&p[2..], n.get(1..).unwrap_or(&[])).map(|_| false)
                }
            }
            c => {
                if n.first() == Some(&c) {
                    go(&p[1..], &n[1..])
                } else {
                    go(&p[1..], n.get(1..).unwrap_or(&[])).map(|_| false)
                }
            }
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n).unwrap_or(false)
}

/// Whether a keyring key (`glob`, schemeless, wildcards allowed in host parts) matches an image
/// repository (`target`, e.g. `127.0.0.1:5001/busybox`) (Go `URLsMatchStr`).
pub fn urls_match(glob: &str, target: &str) -> bool {
    let (Some((ghost, gpath)), Some((thost, tpath))) =
        (split_schemeless(glob), split_schemeless(target))
    else {
        return false;
    };
    let (gparts, gport) = split_host(&ghost);
    let (tparts, tport) = split_host(&thost);
    gport == tport
        && gparts.len() == tparts.len()
        && tpath.starts_with(&gpath)
        && gparts.iter().zip(&tparts).all(|(g, t)| glob_match(g, t))
}

/// The credentials of a set of dockercfgs, indexed by registry key (Go `BasicDockerKeyring`).
#[derive(Debug, Clone, Default)]
pub struct DockerKeyring {
    /// Keys, reverse-sorted (most specific first).
    index: Vec<String>,
    creds: BTreeMap<String, Vec<TrackedAuthConfig>>,
}

impl DockerKeyring {
    /// Adds the entries of one dockercfg, tagged with their source. Entries whose key is not a
    /// valid URL are skipped (the Go kubelet logs and ignores them).
    pub fn add(&mut self, source: Option<SecretCoordinates>, cfg: &DockerConfig) {
        for (loc, auth) in cfg {
            let value = loc
                .strip_prefix("https://")
                .or_else(|| loc.strip_prefix("http://"))
                .unwrap_or(loc);
            let Some((host, path)) = split_schemeless(value) else {
                tracing::warn!(entry = %loc, "dockercfg entry is not a valid URL; ignored");
                continue;
            };
            let effective = if path.starts_with("/v2/") || path.starts_with("/v1/") {
                &path[3..]
            } else {
                path.as_str()
            };
            let key = if !effective.is_empty() && effective != "/" {
                format!("{host}{effective}")
            } else {
                host
            };
            self.creds
                .entry(key.clone())
                .or_default()
                .push(TrackedAuthConfig {
                    auth: auth.clone(),
                    source: source.clone(),
                });
            self.index.push(key);
        }
        let set: BTreeSet<String> = self.index.drain(..).collect();
        self.index = set.into_iter().rev().collect();
    }

    /// The candidate credentials for an image repository (a normalized name without tag, see
    /// [`repo_to_pull`]), most specific key first; empty when nothing matches.
    pub fn lookup(&self, repo: &str) -> Vec<TrackedAuthConfig> {
        let mut ret = Vec::new();
        for k in &self.index {
            if urls_match(k, repo) {
                ret.extend(self.creds[k].iter().cloned());
            }
        }
        if ret.is_empty() && is_default_registry_match(repo) {
            if let Some(c) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                return c.clone();
            }
        }
        ret
    }

    /// Whether the keyring holds no credentials.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// Whether an image pulls from Docker Hub, judged by its name (Go `isDefaultRegistryMatch`).
fn is_default_registry_match(image: &str) -> bool {
    let mut parts = image.splitn(2, '/');
    let first = parts.next().unwrap_or("");
    if first.is_empty() {
        return false;
    }
    match parts.next() {
        None => true,
        Some(_) => {
            first == "docker.io" || first == "index.docker.io" || !first.contains(['.', ':'])
        }
    }
}

/// The repository an image is pulled from, fully qualified as docker's reference normalization
/// does (Go `parsers.ParseImageName`'s `repoToPull`): `busybox:1.36` →
/// `docker.io/library/busybox`, `127.0.0.1:5001/busybox:latest` → `127.0.0.1:5001/busybox`.
///
/// Errors: the reference is invalid.
pub fn repo_to_pull(image: &str) -> Result<String, crate::image::ReferenceError> {
    let r = crate::image::parse(image)?;
    let domain = match r.domain.as_deref() {
        None | Some("index.docker.io") => DEFAULT_DOMAIN,
        Some(d) => d,
    };
    if domain == DEFAULT_DOMAIN && !r.path.contains('/') {
        Ok(format!("{domain}/library/{}", r.path))
    } else {
        Ok(format!("{domain}/{}", r.path))
    }
}

/// Builds the keyring of a pod's pull secrets (Go `secrets.MakeDockerKeyring` without a node
/// keyring): `kubernetes.io/dockerconfigjson` secrets with a non-empty `.dockerconfigjson`, and
/// `kubernetes.io/dockercfg` secrets with a non-empty `.dockercfg`; other secrets are skipped.
///
/// Errors: a secret of one of those types whose payload does not parse (the whole lookup fails,
/// as in the Go kubelet).
pub fn keyring_from_secrets(secrets: &[Secret]) -> Result<DockerKeyring, CredentialError> {
    let mut k = DockerKeyring::default();
    for s in secrets {
        let data = |key: &str| {
            s.data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.as_slice())
                .filter(|b| !b.is_empty())
        };
        let ty = s.type_.as_deref().unwrap_or("");
        let cfg = if ty == SECRET_TYPE_DOCKER_CONFIG_JSON {
            match data(DOCKER_CONFIG_JSON_KEY) {
                Some(b) => parse_docker_config_json(b)?,
                None => continue,
            }
        } else if ty == SECRET_TYPE_DOCKERCFG {
            match data(DOCKER_CONFIG_KEY) {
                Some(b) => parse_dockercfg(b)?,
                None => continue,
            }
        } else {
            continue;
        };
        let src = SecretCoordinates {
            uid: s.metadata.uid.clone().unwrap_or_default(),
            namespace: s.metadata.namespace.clone().unwrap_or_default(),
            name: s.metadata.name.clone().unwrap_or_default(),
        };
        k.add(Some(src), &cfg);
    }
    Ok(k)
}

/// The names of a pod's `imagePullSecrets`, skipping empty names (which API validation once
/// allowed; the Go kubelet ignores them).
pub fn pull_secret_names(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .map(|v| {
            v.iter()
                .filter(|r| !r.name.is_empty())
                .map(|r| r.name.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The message of the Go kubelet's `FailedToRetrieveImagePullSecret` warning event.
pub fn failed_pull_secrets_message(names: &[String]) -> String {
    format!(
        "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
        names.join(", ")
    )
}

/// Joins the errors of several pull attempts as `k8s.io/apimachinery/pkg/util/errors`'
/// aggregate renders them: one distinct message as is, several as `[a, b]`.
pub fn aggregate_messages(msgs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for m in msgs {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen[0].to_string(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn creds(user: &str) -> AuthConfig {
        AuthConfig {
            username: user.into(),
            password: format!("{user}-pw"),
            email: String::new(),
        }
    }

    fn keyring(entries: &[(&str, &str)]) -> DockerKeyring {
        let mut k = DockerKeyring::default();
        let cfg: DockerConfig = entries
            .iter()
            .map(|(key, user)| (key.to_string(), creds(user)))
            .collect();
        k.add(None, &cfg);
        k
    }

    fn users(v: &[TrackedAuthConfig]) -> Vec<&str> {
        v.iter().map(|t| t.auth.username.as_str()).collect()
    }

    #[test]
    fn normalizes_the_repository_like_docker() {
        assert_eq!(
            repo_to_pull("busybox").unwrap(),
            "docker.io/library/busybox"
        );
        assert_eq!(
            repo_to_pull("busybox:1.36").unwrap(),
            "docker.io/library/busybox"
        );
        assert_eq!(repo_to_pull("foo/bar:1").unwrap(), "docker.io/foo/bar");
        assert_eq!(
            repo_to_pull("index.docker.io/busybox").unwrap(),
            "docker.io/library/busybox"
        );
        assert_eq!(
            repo_to_pull("127.0.0.1:5001/busybox:latest").unwrap(),
            "127.0.0.1:5001/busybox"
        );
        assert_eq!(
            repo_to_pull("localhost/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef").unwrap(),
            "localhost/a/b"
        );
        assert!(repo_to_pull("Busybox").is_err());
    }

    #[test]
    fn url_matching_follows_the_go_rules() {
        // wildcard host parts, same number of parts
        assert!(urls_match("*.docker.io", "blah.docker.io/x"));
        assert!(!urls_match("*.docker.io", "not.right.io/x"));
        assert!(!urls_match("*.docker.io", "a.b.docker.io/x"));
        assert!(urls_match("*.*.io", "a.b.io/x"));
        assert!(urls_match("f*.example.com", "foo.example.com/x"));
        assert!(urls_match("[a-c]x.example.com", "bx.example.com/x"));
        assert!(!urls_match("[^a-c]x.example.com", "bx.example.com/x"));
        assert!(!urls_match("[a-c.example.com", "a.example.com/x")); // bad pattern: no match
                                                                     // ports must be equal
        assert!(urls_match("127.0.0.1:5001", "127.0.0.1:5001/busybox"));
        assert!(!urls_match("127.0.0.1:5001", "127.0.0.1:5000/busybox"));
        assert!(!urls_match("127.0.0.1", "127.0.0.1:5001/busybox"));
        // the key's path is a string prefix of the image's
        assert!(urls_match("quay.io/coreos", "quay.io/coreos/etcd"));
        assert!(urls_match("quay.io/coreos", "quay.io/coreosx")); // plain prefix, as in Go
        assert!(!urls_match("quay.io/coreos", "quay.io/other/etcd"));
        assert!(urls_match("[::1]:5000", "[::1]:5000/a"));
    }

    #[test]
    fn glob_matches_like_filepath_match() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("\\*", "*"));
        assert!(!glob_match("\\*", "x"));
        assert!(glob_match("[0-9]", "7"));
        assert!(!glob_match("[", "["));
    }

    #[test]
    fn keys_normalize_scheme_and_v1_v2_paths() {
        let k = keyring(&[
            ("https://index.docker.io/v1/", "hub"),
            ("http://127.0.0.1:5001/v2/", "local"),
            ("registry.example.com/v2/team", "team"),
        ]);
        assert_eq!(
            k.index,
            vec![
                "registry.example.com/team",
                "index.docker.io",
                "127.0.0.1:5001"
            ]
        );
        assert_eq!(users(&k.lookup("127.0.0.1:5001/busybox")), ["local"]);
        assert_eq!(users(&k.lookup("registry.example.com/team/app")), ["team"]);
        assert!(k.lookup("registry.example.com/other/app").is_empty());
    }

    #[test]
    fn most_specific_key_comes_first_and_all_matches_are_candidates() {
        let k = keyring(&[
            ("quay.io", "host"),
            ("quay.io/coreos", "ns"),
            ("*.quay.io", "wild"),
        ]);
        assert_eq!(users(&k.lookup("quay.io/coreos/etcd")), ["ns", "host"]);
        assert_eq!(users(&k.lookup("quay.io/other/x")), ["host"]);
        assert_eq!(users(&k.lookup("eu.quay.io/x")), ["wild"]);
    }

    #[test]
    fn docker_hub_falls_back_to_index_docker_io() {
        let k = keyring(&[("https://index.docker.io/v1/", "hub")]);
        assert_eq!(users(&k.lookup("docker.io/library/busybox")), ["hub"]);
        let k = keyring(&[("docker.io", "d")]);
        assert_eq!(users(&k.lookup("docker.io/library/busybox")), ["d"]);
        let k = keyring(&[("https://index.docker.io/v1/", "hub")]);
        assert!(k.lookup("quay.io/x").is_empty());
    }

    #[test]
    fn several_secrets_for_one_key_keep_their_order() {
        let mut k = DockerKeyring::default();
        k.add(None, &vec![("r.example.com".into(), creds("first"))]);
        k.add(None, &vec![("r.example.com".into(), creds("second"))]);
        assert_eq!(users(&k.lookup("r.example.com/a")), ["first", "second"]);
    }

    #[test]
    fn parses_dockerconfigjson_and_dockercfg() {
        // auth wins over username/password; padded and unpadded base64; case-insensitive fields
        let j = br#"{"auths":{"127.0.0.1:5001":{"auth":"dXNlcjpwYTpzcw==","username":"x"},
                     "b.example.com":{"Username":"u","Password":"p"},
                     "c.example.com":{"auth":"dTpw"}}}"#;
        let cfg = parse_docker_config_json(j).unwrap();
        let get = |k: &str| cfg.iter().find(|(key, _)| key == k).unwrap().1.clone();
        assert_eq!(get("127.0.0.1:5001").username, "user");
        assert_eq!(get("127.0.0.1:5001").password, "pa:ss");
        assert_eq!(get("b.example.com").username, "u");
        assert_eq!(get("b.example.com").password, "p");
        assert_eq!(get("c.example.com").username, "u");
        let cfg =
            parse_dockercfg(br#"{"r.example.com":{"username":"a","password":"b","email":"e"}}"#)
                .unwrap();
        assert_eq!(cfg[0].1.email, "e");
        assert!(parse_docker_config_json(b"{").is_err());
        assert_eq!(
            parse_docker_config_json(br#"{"auths":{"x":{"auth":"bm9jb2xvbg=="}}}"#),
            Err(CredentialError::AuthField)
        );
        assert!(parse_docker_config_json(br#"{"auths":{"x":{"username":1}}}"#).is_err());
        assert!(parse_docker_config_json(br#"{}"#).unwrap().is_empty());
    }

    fn secret(name: &str, ty: &str, key: &str, payload: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.type_ = Some(ty.into());
        s.data = Some(
            [(key.to_string(), ByteString(payload.as_bytes().to_vec()))]
                .into_iter()
                .collect(),
        );
        s
    }

    #[test]
    fn keyring_from_secrets_takes_only_the_docker_types() {
        let secrets = vec![
            secret(
                "json",
                SECRET_TYPE_DOCKER_CONFIG_JSON,
                DOCKER_CONFIG_JSON_KEY,
                r#"{"auths":{"127.0.0.1:5001":{"username":"j","password":"p"}}}"#,
            ),
            secret(
                "cfg",
                SECRET_TYPE_DOCKERCFG,
                DOCKER_CONFIG_KEY,
                r#"{"127.0.0.1:5001":{"username":"c","password":"p"}}"#,
            ),
            // wrong type for the key: skipped, as in Go
            secret(
                "opaque",
                "Opaque",
                DOCKER_CONFIG_JSON_KEY,
                r#"{"auths":{"127.0.0.1:5001":{"username":"o","password":"p"}}}"#,
            ),
            secret(
                "empty",
                SECRET_TYPE_DOCKER_CONFIG_JSON,
                DOCKER_CONFIG_JSON_KEY,
                "",
            ),
        ];
        let k = keyring_from_secrets(&secrets).unwrap();
        let found = k.lookup("127.0.0.1:5001/busybox");
        assert_eq!(users(&found), ["j", "c"]);
        assert_eq!(found[0].source.as_ref().unwrap().name, "json");
        let bad = vec![secret(
            "bad",
            SECRET_TYPE_DOCKER_CONFIG_JSON,
            DOCKER_CONFIG_JSON_KEY,
            "not json",
        )];
        assert!(keyring_from_secrets(&bad).is_err());
    }

    #[test]
    fn debug_never_shows_the_password() {
        let a = creds("me");
        let s = format!("{a:?}");
        assert!(s.contains("me") && !s.contains("me-pw"), "{s}");
        let cri = a.to_cri();
        assert_eq!(cri.username, "me");
        assert!(cri.server_address.is_empty());
    }

    #[test]
    fn aggregate_renders_like_go() {
        assert_eq!(aggregate_messages(&["a".into()]), "a");
        assert_eq!(aggregate_messages(&["a".into(), "a".into()]), "a");
        assert_eq!(aggregate_messages(&["a".into(), "b".into()]), "[a, b]");
        assert_eq!(
            failed_pull_secrets_message(&["x".into(), "y".into()]),
            "Unable to retrieve some image pull secrets (x, y); attempting to pull the image may not succeed."
        );
    }
}
