//! Image references and pull policy, as the Go kubelet treats them (k/k
//! `pkg/kubelet/images/image_manager.go`, `pkg/util/parsers`): validate a reference with the
//! distribution reference grammar, append the default tag `latest` when there is neither tag nor
//! digest (without qualifying short names, so the CRI sees `busybox:latest`), and decide whether
//! to pull.

/// Why an image reference is invalid; the text matches docker/distribution's reference errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReferenceError {
    /// The reference does not match the grammar.
    #[error("invalid reference format")]
    Format,
    /// The repository path has upper-case letters.
    #[error("invalid reference format: repository name must be lowercase")]
    Uppercase,
    /// The repository name is longer than 255 characters.
    #[error("repository name must not be more than 255 characters")]
    NameTooLong,
}

/// The parts of an image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host (with port), if the reference names one.
    pub domain: Option<String>,
    /// Repository path (`library/busybox`, `busybox`).
    pub path: String,
    /// Tag, if any.
    pub tag: Option<String>,
    /// Digest (`sha256:...`), if any.
    pub digest: Option<String>,
}

fn is_alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// One path component: `[a-z0-9]+(?:(?:[._]|__|[-]*)[a-z0-9]+)*`.
fn valid_component(s: &str) -> bool {
    let b: Vec<char> = s.chars().collect();
    if b.is_empty() || !is_alnum_lower(b[0]) || !is_alnum_lower(*b.last().unwrap()) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum_lower(b[i]) {
            i += 1;
            continue;
        }
        // separator
        let start = i;
        if b[i] == '.' || b[i] == '_' {
            i += 1;
            if b[start] == '_' && i < b.len() && b[i] == '_' {
                i += 1;
            }
        } else if b[i] == '-' {
            while i < b.len() && b[i] == '-' {
                i += 1;
            }
        } else {
            return false;
        }
        if i >= b.len() || !is_alnum_lower(b[i]) {
            return false;
        }
    }
    true
}

/// A domain: host components (`[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?` separated by `.`), or a
/// bracketed IPv6 address, optionally with `:port`.
fn valid_domain(s: &str) -> bool {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip6, after)) => {
                if ip6.parse::<std::net::Ipv6Addr>().is_err() {
                    return false;
                }
                (None, after.strip_prefix(':'))
            }
            None => return false,
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(s), None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.chars().all(|c| c.is_ascii_digit()) {
            return false;
        }
    }
    if let Some(h) = host {
        if h.is_empty() {
            return false;
        }
        for part in h.split('.') {
            let c: Vec<char> = part.chars().collect();
            if c.is_empty()
                || !c[0].is_ascii_alphanumeric()
                || !c.last().unwrap().is_ascii_alphanumeric()
                || !c.iter().all(|x| x.is_ascii_alphanumeric() || *x == '-')
            {
                return false;
            }
        }
    }
    true
}

fn valid_tag(t: &str) -> bool {
    let c: Vec<char> = t.chars().collect();
    !c.is_empty()
        && c.len() <= 128
        && (c[0].is_ascii_alphanumeric() || c[0] == '_')
        && c.iter()
            .all(|x| x.is_ascii_alphanumeric() || matches!(x, '_' | '.' | '-'))
}

fn valid_digest(d: &str) -> bool {
    match d.split_once(':') {
        Some((alg, hex)) => {
            !alg.is_empty()
                && alg.chars().all(|c| {
                    c.is_ascii_lowercase()
                        || c.is_ascii_digit()
                        || matches!(c, '+' | '.' | '_' | '-')
                })
                && hex.len() >= 32
                && hex.chars().all(|c| c.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Parses an image reference (`[domain/]path[:tag][@digest]`) with the distribution grammar.
pub fn parse(reference: &str) -> Result<ImageRef, ReferenceError> {
    if reference.is_empty() || reference.chars().any(|c| c.is_whitespace()) {
        return Err(ReferenceError::Format);
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((r, d)) => {
            if !valid_digest(d) {
                return Err(ReferenceError::Format);
            }
            (r, Some(d.to_string()))
        }
        None => (reference, None),
    };
    // The tag follows the last ':' that comes after the last '/'.
    let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => {
            let t = &rest[last_slash + i + 1..];
            if !valid_tag(t) {
                return Err(ReferenceError::Format);
            }
            (&rest[..last_slash + i], Some(t.to_string()))
        }
        None => (rest, None),
    };
    if name.len() > 255 {
        return Err(ReferenceError::NameTooLong);
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    let domain = if parts.len() > 1 {
        let first = parts[0];
        if first.contains('.')
            || first.contains(':')
            || first == "localhost"
            || first.starts_with('[')
        {
            if !valid_domain(first) {
                return Err(ReferenceError::Format);
            }
            Some(parts.remove(0).to_string())
        } else {
            None
        }
    } else {
        None
    };
    for p in &parts {
        if !valid_component(p) {
            if valid_component(&p.to_ascii_lowercase()) {
                return Err(ReferenceError::Uppercase);
            }
            return Err(ReferenceError::Format);
        }
    }
    Ok(ImageRef {
        domain,
        path: parts.join("/"),
        tag,
        digest,
    })
}

/// Appends `:latest` to a reference that has neither tag nor digest, leaving short names short
/// (`busybox` → `busybox:latest`), as the Go kubelet's `applyDefaultImageTag` does.
///
/// Errors: the reference is invalid; the message matches the Go kubelet's
/// `couldn't parse image reference "<img>": invalid reference format`.
pub fn apply_default_tag(image: &str) -> Result<String, String> {
    match parse(image) {
        Ok(r) if r.tag.is_none() && r.digest.is_none() => Ok(format!("{image}:latest")),
        Ok(_) => Ok(image.to_string()),
        Err(e) => Err(format!("couldn't parse image reference {image:?}: {e}")),
    }
}

/// `imagePullPolicy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull on every container start.
    Always,
    /// Pull only when the image is absent.
    IfNotPresent,
    /// Never pull; a missing image is `ErrImageNeverPull`.
    Never,
}

impl PullPolicy {
    /// The policy from the spec field; an empty field gets the API server's default: `Always`
    /// when the tag is `latest` or there is no tag or digest, else `IfNotPresent`
    /// (k/k `pkg/apis/core/v1/defaults.go`).
    pub fn from_spec(policy: Option<&str>, image: &str) -> PullPolicy {
        match policy {
            Some("Always") => PullPolicy::Always,
            Some("Never") => PullPolicy::Never,
            Some("IfNotPresent") => PullPolicy::IfNotPresent,
            _ => match parse(image) {
                Ok(r) if r.digest.is_some() => PullPolicy::IfNotPresent,
                Ok(r) if r.tag.as_deref().unwrap_or("latest") == "latest" => PullPolicy::Always,
                _ => PullPolicy::IfNotPresent,
            },
        }
    }
}

/// What to do about an image before creating a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullDecision {
    /// Pull it.
    Pull,
    /// It is present and the policy does not ask for a pull.
    UsePresent,
    /// It is absent and the policy forbids pulling (`ErrImageNeverPull`).
    NeverPullMissing,
}

/// Decides whether to pull, from the policy and whether the image is present
/// (k/k `pkg/kubelet/images/image_manager.go` `shouldPullImage`).
pub fn decide(policy: PullPolicy, present: bool) -> PullDecision {
    match (policy, present) {
        (PullPolicy::Always, _) => PullDecision::Pull,
        (PullPolicy::IfNotPresent, true) | (PullPolicy::Never, true) => PullDecision::UsePresent,
        (PullPolicy::IfNotPresent, false) => PullDecision::Pull,
        (PullPolicy::Never, false) => PullDecision::NeverPullMissing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_get_latest_without_qualification() {
        assert_eq!(apply_default_tag("busybox").unwrap(), "busybox:latest");
        assert_eq!(apply_default_tag("busybox:1.36").unwrap(), "busybox:1.36");
        assert_eq!(
            apply_default_tag("127.0.0.1:5000/busybox").unwrap(),
            "127.0.0.1:5000/busybox:latest"
        );
        assert_eq!(
            apply_default_tag("registry.k8s.io/pause@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef").unwrap(),
            "registry.k8s.io/pause@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        );
    }

    #[test]
    fn invalid_references_are_rejected_with_the_go_message() {
        assert_eq!(
            apply_default_tag("Busybox").unwrap_err(),
            "couldn't parse image reference \"Busybox\": invalid reference format: repository name must be lowercase"
        );
        assert_eq!(
            apply_default_tag("busy box").unwrap_err(),
            "couldn't parse image reference \"busy box\": invalid reference format"
        );
        for bad in [
            "",
            "busybox:",
            ":tag",
            "a//b",
            "-x",
            "busybox@sha256:zz",
            "x:y:z",
            "../etc",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn parses_domains_ports_and_paths() {
        let r = parse("localhost:5000/a/b-c__d:v1.2").unwrap();
        assert_eq!(r.domain.as_deref(), Some("localhost:5000"));
        assert_eq!(r.path, "a/b-c__d");
        assert_eq!(r.tag.as_deref(), Some("v1.2"));
        let r = parse("docker.io/library/busybox").unwrap();
        assert_eq!(r.domain.as_deref(), Some("docker.io"));
        assert_eq!(r.tag, None);
    }

    #[test]
    fn default_pull_policy_follows_the_api_defaults() {
        assert_eq!(PullPolicy::from_spec(None, "busybox"), PullPolicy::Always);
        assert_eq!(
            PullPolicy::from_spec(None, "busybox:latest"),
            PullPolicy::Always
        );
        assert_eq!(
            PullPolicy::from_spec(None, "busybox:1.36"),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            PullPolicy::from_spec(Some("Never"), "busybox"),
            PullPolicy::Never
        );
        assert_eq!(
            decide(PullPolicy::Never, false),
            PullDecision::NeverPullMissing
        );
        assert_eq!(
            decide(PullPolicy::IfNotPresent, true),
            PullDecision::UsePresent
        );
    }
}
