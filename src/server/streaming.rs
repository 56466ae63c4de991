//! `/exec`, `/attach` and `/portForward`: ask the runtime for a streaming session (CRI `Exec`,
//! `Attach`, `PortForward`), then proxy the client's upgraded connection (SPDY/3.1 or WebSocket,
//! whatever the client and containerd's streaming server agree on) to the URL the runtime
//! returned, splicing the two byte streams. This is what the Go kubelet does with
//! `proxy.NewUpgradeAwareHandler(url, ..., upgradeRequired=true)` (k/k
//! `pkg/kubelet/server/server.go` `getExec`, `getAttach`, `getPortForward`): stdin, stdout,
//! stderr, tty resize, the exit status (error stream) and port-forward data all travel inside the
//! proxied protocol, so they need no handling here.
//!
//! The Go kubelet also translates WebSocket v5 (`v5.channel.k8s.io`) to SPDY itself when the
//! node declares `ExtendWebSocketsToKubelet`; deckhand does not declare it, so the API server
//! does that translation and talks SPDY to deckhand.

use super::pods::{self, container_tty};
use super::{text, Body};
use crate::cri::{api, CriClient, CriError};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// Options of an exec or attach request (k8s.io/cri-streaming `remotecommand.NewOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Pass stdin.
    pub stdin: bool,
    /// Return stdout.
    pub stdout: bool,
    /// Return stderr (never with tty).
    pub stderr: bool,
    /// Allocate a terminal.
    pub tty: bool,
}

/// Reads `input`, `output`, `error` and `tty` (each `1` to enable; k8s.io/api
/// `ExecStdinParam`...). With a tty, stderr is dropped; at least one stream is required.
pub fn stream_options(query: &[(String, String)]) -> Result<StreamOptions, String> {
    let flag = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v == "1")
            .unwrap_or(false)
    };
    let tty = flag("tty");
    let stdin = flag("input");
    let stdout = flag("output");
    let mut stderr = flag("error");
    if tty && stderr {
        stderr = false;
    }
    if !stdin && !stdout && !stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(StreamOptions {
        stdin,
        stdout,
        stderr,
        tty,
    })
}

/// The values of the repeated `command` parameter.
pub fn command(query: &[(String, String)]) -> Vec<String> {
    query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect()
}

/// Ports of a `port` parameter list (WebSocket port-forward; SPDY clients name ports per stream).
pub fn ports(query: &[(String, String)]) -> Result<Vec<i32>, String> {
    let mut out = Vec::new();
    for (k, v) in query {
        if k != "port" {
            continue;
        }
        for p in v.split(',') {
            let n: i32 = p
                .trim()
                .parse()
                .map_err(|_| format!("unable to parse {p:?} as a port: invalid syntax"))?;
            if !(1..=65535).contains(&n) {
                return Err(format!("port {n:?} must be > 0 and <= 65535"));
            }
            out.push(n);
        }
    }
    Ok(out)
}

/// Whether the request asks for a protocol upgrade (`Connection: upgrade` + `Upgrade`).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONNECTION).iter().any(|v| {
        v.to_str()
            .map(|s| {
                s.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
            .unwrap_or(false)
    }) && headers.contains_key(header::UPGRADE)
}

/// Path parts of `/exec|attach/{ns}/{pod}[/{uid}]/{container}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPath {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Pod UID when given.
    pub uid: Option<String>,
    /// Container name.
    pub container: String,
}

/// Splits the part after `/exec/` or `/attach/`.
pub fn container_path(rest: &[&str]) -> Option<ContainerPath> {
    let ok = |s: &&str| !s.is_empty();
    match rest {
        [ns, pod, c] if [ns, pod, c].iter().all(|s| ok(s)) => Some(ContainerPath {
            namespace: ns.to_string(),
            pod: pod.to_string(),
            uid: None,
            container: c.to_string(),
        }),
        [ns, pod, uid, c] if [ns, pod, uid, c].iter().all(|s| ok(s)) => Some(ContainerPath {
            namespace: ns.to_string(),
            pod: pod.to_string(),
            uid: Some(uid.to_string()),
            container: c.to_string(),
        }),
        _ => None,
    }
}

fn cri_error_response(e: &CriError) -> Response<Body> {
    let code = if e.is_not_found() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    text(code, e.user_message())
}

/// Which streaming call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `/exec`.
    Exec,
    /// `/attach`.
    Attach,
}

/// Handles `/exec/...` and `/attach/...`.
pub async fn exec_or_attach(
    kind: Kind,
    lookup: &pods::PodLookup,
    cri: &CriClient,
    req: Request<Incoming>,
    rest: &[&str],
    query: &[(String, String)],
) -> Response<Body> {
    let Some(p) = container_path(rest) else {
        return super::not_found();
    };
    let opts = match stream_options(query) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let Some(pod) = lookup.get_pod(&p.namespace, &p.pod) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let full_name = format!("{}_{}", p.pod, p.namespace);
    let not_found_msg = match kind {
        Kind::Exec => format!("container not found ({:?})", p.container),
        Kind::Attach => format!("container {} not found in pod {full_name}", p.container),
    };
    if p.uid.as_ref().is_some_and(|u| *u != uid) {
        return text(StatusCode::INTERNAL_SERVER_ERROR, not_found_msg);
    }
    let cid = match pods::running_container(cri, &uid, &p.container).await {
        Ok(Some(id)) => id,
        Ok(None) => return text(StatusCode::INTERNAL_SERVER_ERROR, not_found_msg),
        Err(e) => return cri_error_response(&e),
    };
    let url = match kind {
        Kind::Exec => {
            cri.exec(api::ExecRequest {
                container_id: cid,
                cmd: command(query),
                tty: opts.tty,
                stdin: opts.stdin,
                stdout: opts.stdout,
                stderr: opts.stderr,
            })
            .await
        }
        Kind::Attach => {
            // The tty setting must match the container's, which cannot change after start.
            cri.attach(api::AttachRequest {
                container_id: cid,
                stdin: opts.stdin,
                tty: container_tty(&pod, &p.container),
                stdout: opts.stdout,
                stderr: opts.stderr,
            })
            .await
        }
    };
    match url {
        Ok(url) => proxy_upgrade(req, &url).await,
        Err(e) => cri_error_response(&e),
    }
}

/// Handles `/portForward/{ns}/{pod}[/{uid}]`.
pub async fn port_forward(
    lookup: &pods::PodLookup,
    cri: &CriClient,
    req: Request<Incoming>,
    rest: &[&str],
    query: &[(String, String)],
) -> Response<Body> {
    let (ns, name, want_uid) = match rest {
        [ns, pod] if !ns.is_empty() && !pod.is_empty() => (*ns, *pod, None),
        [ns, pod, uid] if !ns.is_empty() && !pod.is_empty() && !uid.is_empty() => {
            (*ns, *pod, Some(*uid))
        }
        _ => return super::not_found(),
    };
    let ports = match ports(query) {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, e),
    };
    let Some(pod) = lookup.get_pod(ns, name) else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    if want_uid.is_some_and(|u| u != uid) {
        return text(StatusCode::NOT_FOUND, "pod not found");
    }
    let sandbox = match pods::ready_sandbox(cri, &uid).await {
        Ok(Some(id)) => id,
        Ok(None) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("pod not found (\"{name}_{ns}\")"),
            )
        }
        Err(e) => return cri_error_response(&e),
    };
    match cri.port_forward(&sandbox, ports).await {
        Ok(url) => proxy_upgrade(req, &url).await,
        Err(e) => cri_error_response(&e),
    }
}

/// Hop-by-hop or credential headers that are not passed to the runtime's streaming server.
const DROPPED_REQUEST_HEADERS: &[header::HeaderName] = &[
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
];

/// Largest error body read back from the streaming server.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Forwards an upgrade request to the runtime's streaming URL and, once the streaming server has
/// switched protocols, splices the client's connection with it (the Go kubelet's upgrade-aware
/// proxy). Non-upgrade requests get 400; a refusal by the streaming server is passed back.
pub async fn proxy_upgrade(mut req: Request<Incoming>, url: &str) -> Response<Body> {
    if !is_upgrade_request(req.headers()) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let target: Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("invalid streaming URL from the runtime: {e}"),
            )
        }
    };
    if target.scheme_str() != Some("http") {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the runtime's streaming server must be plain HTTP on this host",
        );
    }
    let (Some(host), port) = (target.host(), target.port_u16().unwrap_or(80)) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "streaming URL without host",
        );
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let authority = target
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_default();
    let path = target
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());

    let tcp = match tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error dialing backend: {e}"),
            )
        }
        Err(_) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "error dialing backend: timeout",
            )
        }
    };
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(x) => x,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error dialing backend: {e}"),
            )
        }
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "streaming backend connection ended");
        }
    });

    let mut backend_req = Request::builder().method(req.method().clone()).uri(path);
    for (k, v) in req.headers() {
        if !DROPPED_REQUEST_HEADERS.contains(k) {
            backend_req = backend_req.header(k, v);
        }
    }
    backend_req = backend_req.header(
        header::HOST,
        HeaderValue::from_str(&authority).unwrap_or(HeaderValue::from_static("localhost")),
    );
    let backend_req = match backend_req.body(Full::new(Bytes::new())) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let client_upgrade = hyper::upgrade::on(&mut req);
    let resp = match sender.send_request(backend_req).await {
        Ok(r) => r,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("error proxying to the runtime's streaming server: {e}"),
            )
        }
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        // Pass the refusal back (status, headers, a bounded body).
        let (parts, body) = resp.into_parts();
        let bytes = Limited::new(body, MAX_ERROR_BODY)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        let mut out = Response::new(super::full(bytes));
        *out.status_mut() = parts.status;
        for (k, v) in &parts.headers {
            if k != header::CONTENT_LENGTH && k != header::TRANSFER_ENCODING {
                out.headers_mut().insert(k, v.clone());
            }
        }
        return out;
    }
    let headers = resp.headers().clone();
    let backend_upgrade = hyper::upgrade::on(resp);
    tokio::spawn(async move {
        let (client, backend) = match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(c), Ok(b)) => (c, b),
            (c, b) => {
                tracing::debug!(
                    client_ok = c.is_ok(),
                    backend_ok = b.is_ok(),
                    "upgrade failed"
                );
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut backend = TokioIo::new(backend);
        match tokio::io::copy_bidirectional(&mut client, &mut backend).await {
            Ok((up, down)) => tracing::debug!(up, down, "streaming session ended"),
            Err(e) => tracing::debug!(error = %e, "streaming session ended with an error"),
        }
    });
    let mut out = Response::new(super::empty());
    *out.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *out.headers_mut() = headers;
    out
}

/// The HTTP methods the streaming endpoints accept.
pub fn method_allowed(m: &Method) -> bool {
    m == Method::GET || m == Method::POST
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn stream_options_follow_remotecommand() {
        let o = stream_options(&q(&[("input", "1"), ("output", "1"), ("error", "1")])).unwrap();
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        // tty drops stderr
        let o = stream_options(&q(&[("output", "1"), ("error", "1"), ("tty", "1")])).unwrap();
        assert!(o.tty && o.stdout && !o.stderr);
        // "true" is not "1"
        assert!(stream_options(&q(&[("output", "true")])).is_err());
        assert_eq!(
            stream_options(&q(&[])).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }

    #[test]
    fn command_is_the_repeated_parameter_in_order() {
        assert_eq!(
            command(&q(&[
                ("command", "sh"),
                ("output", "1"),
                ("command", "-c"),
                ("command", "exit 3")
            ])),
            vec!["sh", "-c", "exit 3"]
        );
    }

    #[test]
    fn ports_are_validated() {
        assert_eq!(
            ports(&q(&[("port", "80"), ("port", "8080,9090")])).unwrap(),
            vec![80, 8080, 9090]
        );
        assert!(ports(&q(&[("port", "0")])).is_err());
        assert!(ports(&q(&[("port", "http")])).is_err());
        assert!(ports(&q(&[])).unwrap().is_empty());
    }

    #[test]
    fn container_paths_with_and_without_uid() {
        assert_eq!(
            container_path(&["ns", "p", "c"]).unwrap(),
            ContainerPath {
                namespace: "ns".into(),
                pod: "p".into(),
                uid: None,
                container: "c".into()
            }
        );
        assert_eq!(
            container_path(&["ns", "p", "u", "c"])
                .unwrap()
                .uid
                .as_deref(),
            Some("u")
        );
        assert!(container_path(&["ns", "p"]).is_none());
        assert!(container_path(&["ns", "", "c"]).is_none());
        assert!(container_path(&["a", "b", "c", "d", "e"]).is_none());
    }

    #[test]
    fn upgrade_requests_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        h.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        assert!(is_upgrade_request(&h));
        h.remove(header::UPGRADE);
        assert!(!is_upgrade_request(&h));
    }
}
