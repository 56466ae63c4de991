//! Probe and hook handlers: exec (CRI ExecSync), httpGet, tcpSocket and grpc
//! (k/k `pkg/probe/{exec,http,tcp,grpc}`), with the Go kubelet's failure texts.

use crate::cri::CriClient;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::Duration;

/// The User-Agent the Go kubelet's probes send (`kube-probe/<major>.<minor>`).
pub fn user_agent() -> String {
    let minor = crate::KUBE_VERSION.split('.').nth(1).unwrap_or("0");
    format!("kube-probe/1.{minor}")
}

/// The number a probe's `httpGet`/`tcpSocket` port names (k/k `probe.ResolveContainerPort`): a
/// number as it is; a name is looked up in the container's `ports`, else read as a number
/// written as a string. The port must be in 1..=65535.
pub fn resolve_probe_port(port: &IntOrString, container: &Container) -> Result<i32, String> {
    let p = match port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => match named_port(name, container) {
            Some(p) => p,
            None => name
                .parse()
                .map_err(|_| format!("strconv.Atoi: parsing {name:?}: invalid syntax"))?,
        },
    };
    if p > 0 && p < 65536 {
        Ok(p)
    } else {
        Err(format!("invalid port number: {p}"))
    }
}

/// The number a lifecycle hook's `httpGet` port names (k/k `lifecycle.resolvePort`): a number,
/// a number written as a string, or the name of one of the container's `ports`.
pub fn resolve_hook_port(port: &IntOrString, container: &Container) -> Result<i32, String> {
    match port {
        IntOrString::Int(p) => Ok(*p),
        IntOrString::String(name) => name
            .parse()
            .ok()
            .or_else(|| named_port(name, container))
            .ok_or_else(|| format!("couldn't find port: {name} in container {}", container.name)),
    }
}

fn named_port(name: &str, container: &Container) -> Option<i32> {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| p.container_port)
}

/// `h` with its port resolved to a number by `resolve`.
fn with_port(
    h: &HTTPGetAction,
    container: &Container,
    resolve: fn(&IntOrString, &Container) -> Result<i32, String>,
) -> Result<HTTPGetAction, String> {
    let port = resolve(&h.port, container)?;
    Ok(HTTPGetAction {
        port: IntOrString::Int(port),
        ..h.clone()
    })
}

/// The result of one probe run (k/k `probe.Result` and the runner's error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The check passed.
    Success(String),
    /// The check ran and failed, with its output.
    Failure(String),
    /// The check could not run (a port name the container does not declare, a runtime error
    /// other than a timeout): Go's `probe.Unknown` with an error, counted as a failure.
    Error(String),
}

impl ProbeOutcome {
    fn of((ok, out): (bool, String)) -> Self {
        if ok {
            ProbeOutcome::Success(out)
        } else {
            ProbeOutcome::Failure(out)
        }
    }

    /// Whether the probe succeeded.
    pub fn ok(&self) -> bool {
        matches!(self, ProbeOutcome::Success(_))
    }

    /// The `Unhealthy` Warning event's message for a `kind` probe (`Liveness`, ...), as the
    /// Go prober words it (k/k `prober.probe`): `<kind> probe failed: <output>`, or
    /// `<kind> probe errored and resulted in unknown state: <error>`; none on success.
    pub fn event_message(&self, kind: impl std::fmt::Display) -> Option<String> {
        match self {
            ProbeOutcome::Success(_) => None,
            ProbeOutcome::Failure(out) => Some(format!("{kind} probe failed: {out}")),
            ProbeOutcome::Error(e) => Some(format!(
                "{kind} probe errored and resulted in unknown state: {e}"
            )),
        }
    }
}

/// Runs one probe of `container`.
pub async fn run(
    p: &Probe,
    container: &Container,
    cri: &CriClient,
    container_id: &str,
    pod_ip: &str,
    timeout: Duration,
) -> ProbeOutcome {
    if let Some(e) = &p.exec {
        let cmd = e.command.clone().unwrap_or_default();
        return exec_outcome(cri, container_id, cmd, timeout).await;
    }
    if let Some(h) = &p.http_get {
        return match with_port(h, container, resolve_probe_port) {
            Ok(h) => ProbeOutcome::of(http_get(&h, pod_ip, None, timeout).await),
            Err(e) => ProbeOutcome::Error(e),
        };
    }
    if let Some(t) = &p.tcp_socket {
        let host = t
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        return match resolve_probe_port(&t.port, container) {
            Ok(port) => ProbeOutcome::of(tcp(&host, port, timeout).await),
            Err(e) => ProbeOutcome::Error(e),
        };
    }
    if let Some(g) = &p.grpc {
        return ProbeOutcome::of(
            grpc(
                pod_ip,
                g.port,
                g.service.clone().unwrap_or_default(),
                timeout,
            )
            .await,
        );
    }
    ProbeOutcome::Failure("probe has no handler".into())
}

/// Exec through CRI ExecSync: success when the command exits 0, a failure otherwise or when it
/// times out (`command timed out`); the output is the command's stdout and stderr. Any other
/// runtime error is an error (k/k `execprobe`: `probe.Unknown` with the error).
async fn exec_outcome(
    cri: &CriClient,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> ProbeOutcome {
    let secs = timeout.as_secs().max(1) as i64;
    match cri.exec_sync(container_id, cmd.clone(), secs).await {
        Ok(r) => {
            let mut out = String::from_utf8_lossy(&r.stdout).to_string();
            out.push_str(&String::from_utf8_lossy(&r.stderr));
            ProbeOutcome::of((r.exit_code == 0, out))
        }
        Err(crate::cri::CriError::DeadlineExceeded { .. }) => {
            ProbeOutcome::Failure(format!("command timed out: command {cmd:?} timed out"))
        }
        Err(e) => ProbeOutcome::Error(e.desc()),
    }
}

/// Exec handler (probes and hooks): (success, output or error).
pub async fn exec(
    cri: &CriClient,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> (bool, String) {
    match exec_outcome(cri, container_id, cmd, timeout).await {
        ProbeOutcome::Success(o) => (true, o),
        ProbeOutcome::Failure(o) | ProbeOutcome::Error(o) => (false, o),
    }
}

/// The port of an action whose named port was resolved ([`resolve_probe_port`],
/// [`resolve_hook_port`]); a name left unresolved reads as a number or 0.
fn port_of(p: &IntOrString) -> i32 {
    match p {
        IntOrString::Int(p) => *p,
        IntOrString::String(s) => s.parse().unwrap_or(0),
    }
}

/// A TLS client for HTTPS probes and hooks that does not verify the server's certificate, as
/// the Go prober does (`InsecureSkipVerify: true`, k/k `pkg/probe/http/request.go`): a pod's
/// serving certificate is usually self-signed or issued for its Service name, not its IP.
fn insecure_tls() -> tokio_rustls::TlsConnector {
    use std::sync::{Arc, OnceLock};
    static CONNECTOR: OnceLock<tokio_rustls::TlsConnector> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .expect("the ring provider supports the default TLS versions")
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
                .with_no_client_auth();
            tokio_rustls::TlsConnector::from(Arc::new(config))
        })
        .clone()
}

/// Accepts any server certificate; handshake signatures are still checked.
#[derive(Debug)]
struct SkipVerify(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `host:port`, with an IPv6 host in brackets, as Go's `net.JoinHostPort`.
fn host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Sends `req` over one HTTP/1.1 connection to `host:port`, through TLS when `https`.
async fn send_once(
    host: &str,
    port: i32,
    https: bool,
    req: hyper::Request<Empty<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let addr = host_port(host, port);
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => {
                format!("dial tcp {addr}: connect: connection refused")
            }
            _ => format!("dial tcp {addr}: {e}"),
        })?;
    macro_rules! over {
        ($io:expr) => {{
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new($io))
                    .await
                    .map_err(|e| root_cause(&e))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            sender.send_request(req).await.map_err(|e| root_cause(&e))
        }};
    }
    if https {
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| format!("invalid host {host:?}: {e}"))?;
        let tls = insecure_tls()
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        over!(tls)
    } else {
        over!(tcp)
    }
}

/// httpGet handler: GET `scheme://host:port/path` (host defaults to the pod IP; HTTPS without
/// verifying the certificate, as the Go prober); a status in [200, 400) is success, else
/// `HTTP probe failed with statuscode: <code>`.
pub async fn http_get(
    h: &HTTPGetAction,
    pod_ip: &str,
    default_host: Option<&str>,
    timeout: Duration,
) -> (bool, String) {
    let host = h
        .host
        .clone()
        .filter(|x| !x.is_empty())
        .or(default_host.map(str::to_string))
        .unwrap_or_else(|| pod_ip.to_string());
    let port = port_of(&h.port);
    let https = h
        .scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
    let path = h
        .path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".into());
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let authority = host_port(&host, port);
    let scheme = if https { "https" } else { "http" };
    let uri: hyper::Uri = match format!("{scheme}://{authority}{path}").parse() {
        Ok(u) => u,
        Err(e) => return (false, format!("invalid probe URL: {e}")),
    };
    let mut req = hyper::Request::get(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
    // httpHeaders replace the defaults of the same name (Go `headers.Set`; a Host header sets
    // the request's host)
    let given = |name: &str| {
        h.http_headers
            .iter()
            .flatten()
            .any(|hd| hd.name.eq_ignore_ascii_case(name))
    };
    let ua = user_agent();
    for (name, value) in [
        ("Host", authority.as_str()),
        ("User-Agent", ua.as_str()),
        ("Accept", "*/*"),
    ] {
        if !given(name) {
            req = req.header(name, value);
        }
    }
    for hd in h.http_headers.iter().flatten() {
        req = req.header(hd.name.as_str(), hd.value.as_str());
    }
    let req = match req.body(Empty::new()) {
        Ok(r) => r,
        Err(e) => return (false, e.to_string()),
    };
    match tokio::time::timeout(timeout, send_once(&host, port, https, req)).await {
        Err(_) => (false, format!("Get \"{uri}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)")),
        Ok(Err(e)) => (false, format!("Get \"{uri}\": {e}")),
        Ok(Ok(resp)) => {
            let code = resp.status().as_u16();
            let _ = tokio::time::timeout(timeout, resp.into_body().collect()).await;
            if (200..400).contains(&code) {
                (true, String::new())
            } else {
                (false, format!("HTTP probe failed with statuscode: {code}"))
            }
        }
    }
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cur: &dyn std::error::Error = e;
    while let Some(s) = cur.source() {
        cur = s;
    }
    let msg = cur.to_string();
    if msg.contains("Connection refused") {
        "dial tcp: connect: connection refused".into()
    } else {
        msg
    }
}

/// tcpSocket handler: success when a TCP connection opens within the timeout.
pub async fn tcp(host: &str, port: i32, timeout: Duration) -> (bool, String) {
    let addr = host_port(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_)) => (true, String::new()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => (
            false,
            format!("dial tcp {addr}: connect: connection refused"),
        ),
        Ok(Err(e)) => (false, format!("dial tcp {addr}: {e}")),
        Err(_) => (false, format!("dial tcp {addr}: i/o timeout")),
    }
}

/// grpc handler: the standard health check (`grpc.health.v1.Health/Check`), SERVING is success.
pub async fn grpc(host: &str, port: i32, service: String, timeout: Duration) -> (bool, String) {
    let addr = format!("{host}:{port}");
    let ep = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => e
            .connect_timeout(timeout)
            .timeout(timeout)
            .user_agent(user_agent())
            .ok(),
        Err(e) => {
            return (
                false,
                format!("error: failed to connect service at {addr:?}: {e}"),
            )
        }
    };
    let Some(ep) = ep else {
        return (
            false,
            format!("error: failed to connect service at {addr:?}"),
        );
    };
    let ch = match tokio::time::timeout(timeout, ep.connect()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return (
                false,
                format!("error: failed to connect service at {addr:?}: {e}"),
            )
        }
        Err(_) => {
            return (
                false,
                format!(
                    "timeout: failed to connect service {addr:?} within {}",
                    crate::time::go_duration(timeout)
                ),
            )
        }
    };
    let mut client = tonic_health::pb::health_client::HealthClient::new(ch);
    match tokio::time::timeout(timeout, client.check(tonic_health::pb::HealthCheckRequest { service })).await {
        Err(_) => (false, format!("timeout: health rpc did not complete within {}", crate::time::go_duration(timeout))),
        Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => (
            false,
            format!("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}", s.message()),
        ),
        Ok(Err(s)) => (false, format!("error: health rpc probe failed: {s}")),
        Ok(Ok(r)) => {
            let st = r.into_inner().status;
            if st == tonic_health::pb::health_check_response::ServingStatus::Serving as i32 {
                (true, "service healthy".into())
            } else {
                let name = tonic_health::pb::health_check_response::ServingStatus::try_from(st)
                    .map(|s| s.as_str_name().to_string())
                    .unwrap_or_else(|_| st.to_string());
                (false, format!("service unhealthy (responded with {name:?})"))
            }
        }
    }
}

/// Runs a lifecycle hook (postStart or preStop: exec, httpGet or sleep; k/k
/// `pkg/kubelet/lifecycle/handlers.go`), bounded by `timeout`. httpGet goes to the pod IP unless
/// the hook names a host. Errors carry the hook's output.
pub async fn run_hook(
    h: &k8s_openapi::api::core::v1::LifecycleHandler,
    container: &Container,
    cri: &CriClient,
    container_id: &str,
    pod_ip: &str,
    timeout: Duration,
) -> Result<(), String> {
    let work = async {
        if let Some(e) = &h.exec {
            let (ok, out) = exec(
                cri,
                container_id,
                e.command.clone().unwrap_or_default(),
                timeout,
            )
            .await;
            return if ok { Ok(()) } else { Err(out) };
        }
        if let Some(g) = &h.http_get {
            let g = with_port(g, container, resolve_hook_port)?;
            let (ok, out) = http_get(&g, pod_ip, None, timeout).await;
            return if ok { Ok(()) } else { Err(out) };
        }
        if let Some(s) = &h.sleep {
            tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
            return Ok(());
        }
        if h.tcp_socket.is_some() {
            // Deprecated and never run by the Go kubelet either.
            return Ok(());
        }
        Err("hook has no handler".to_string())
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "hook did not complete within {}",
            crate::time::go_duration(timeout)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_probe_that_cannot_run_errored_and_says_so_as_the_go_prober_does() {
        let c: Container = serde_json::from_value(serde_json::json!({"name": "web"})).unwrap();
        let p: Probe = serde_json::from_value(serde_json::json!({
            "tcpSocket": {"port": "grpc"}}))
        .unwrap();
        let cri = CriClient::from_channel(
            tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy(),
        );
        let out = run(&p, &c, &cri, "id", "127.0.0.1", Duration::from_secs(1)).await;
        assert!(!out.ok());
        assert_eq!(
            out.event_message("Liveness").as_deref(),
            Some("Liveness probe errored and resulted in unknown state: strconv.Atoi: parsing \"grpc\": invalid syntax")
        );
        let cases = [
            (ProbeOutcome::Success("ok".into()), None),
            (
                ProbeOutcome::Failure("HTTP probe failed with statuscode: 500".into()),
                Some("Readiness probe failed: HTTP probe failed with statuscode: 500"),
            ),
        ];
        for (o, want) in cases {
            assert_eq!(o.event_message("Readiness").as_deref(), want);
        }
    }

    #[test]
    fn named_ports_resolve_as_the_go_kubelet_resolves_them() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "web", "ports": [{"name": "http", "containerPort": 8080},
                                     {"name": "metrics", "containerPort": 9153}]}))
        .unwrap();
        let s = |v: &str| IntOrString::String(v.into());
        let probe_cases = [
            ("number", IntOrString::Int(80), Ok(80)),
            ("name", s("http"), Ok(8080)),
            ("number as a string", s("8181"), Ok(8181)),
            (
                "unknown name",
                s("grpc"),
                Err("strconv.Atoi: parsing \"grpc\": invalid syntax".to_string()),
            ),
            (
                "zero",
                IntOrString::Int(0),
                Err("invalid port number: 0".to_string()),
            ),
            (
                "too big",
                s("70000"),
                Err("invalid port number: 70000".to_string()),
            ),
        ];
        for (name, port, want) in probe_cases {
            assert_eq!(resolve_probe_port(&port, &c), want, "probe: {name}");
        }
        assert_eq!(resolve_hook_port(&s("metrics"), &c), Ok(9153));
        assert_eq!(resolve_hook_port(&s("9000"), &c), Ok(9000));
        assert_eq!(
            resolve_hook_port(&s("nope"), &c),
            Err("couldn't find port: nope in container web".to_string())
        );
    }
    use k8s_openapi::api::core::v1::HTTPHeader;

    /// A one-request-at-a-time HTTP server on 127.0.0.1 answering `status`, over TLS with a
    /// self-signed certificate when `tls`; returns its port and the requests' header lines.
    async fn server(
        tls: bool,
        status: u16,
    ) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let acceptor = tls.then(|| {
            let cert = rcgen::generate_simple_self_signed(vec!["pod.example".into()]).unwrap();
            let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der())
                .unwrap();
            let cfg = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
            tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg))
        });
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen2.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                    let mut buf = vec![0u8; 4096];
                    macro_rules! serve {
                        ($io:expr) => {{
                            let mut io = $io;
                            let n = io.read(&mut buf).await.unwrap_or(0);
                            let text = String::from_utf8_lossy(&buf[..n]).to_string();
                            seen.lock().unwrap().extend(text.lines().map(String::from));
                            let _ = io.write_all(reply.as_bytes()).await;
                            let _ = io.shutdown().await;
                        }};
                    }
                    match acceptor {
                        Some(a) => {
                            if let Ok(t) = a.accept(tcp).await {
                                serve!(t)
                            }
                        }
                        None => serve!(tcp),
                    }
                });
            }
        });
        (port, seen)
    }

    fn get(scheme: &str, port: u16, headers: &[(&str, &str)]) -> HTTPGetAction {
        HTTPGetAction {
            scheme: Some(scheme.into()),
            port: IntOrString::Int(port as i32),
            path: Some("/healthz".into()),
            http_headers: (!headers.is_empty()).then(|| {
                headers
                    .iter()
                    .map(|(n, v)| HTTPHeader {
                        name: n.to_string(),
                        value: v.to_string(),
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn https_probes_skip_certificate_verification_as_go_does() {
        let (port, seen) = server(true, 200).await;
        let (ok, out) = http_get(
            &get("HTTPS", port, &[]),
            "127.0.0.1",
            None,
            Duration::from_secs(5),
        )
        .await;
        assert!(ok, "{out}");
        let lines = seen.lock().unwrap().clone();
        assert_eq!(lines[0], "GET /healthz HTTP/1.1");
        assert!(
            lines
                .iter()
                .any(|l| l.eq_ignore_ascii_case(&format!("host: 127.0.0.1:{port}"))),
            "{lines:?}"
        );
        assert!(lines
            .iter()
            .any(|l| l.eq_ignore_ascii_case(&format!("user-agent: {}", user_agent()))));
    }

    #[tokio::test]
    async fn failures_read_as_the_go_prober_writes_them() {
        let (port, _) = server(false, 503).await;
        let (ok, out) = http_get(
            &get("HTTP", port, &[]),
            "127.0.0.1",
            None,
            Duration::from_secs(5),
        )
        .await;
        assert!(!ok);
        assert_eq!(out, "HTTP probe failed with statuscode: 503");
        // an HTTPS probe of a plain HTTP server fails in the handshake
        let (ok, out) = http_get(
            &get("HTTPS", port, &[]),
            "127.0.0.1",
            None,
            Duration::from_secs(5),
        )
        .await;
        assert!(
            !ok && out.starts_with(&format!("Get \"https://127.0.0.1:{port}/healthz\": ")),
            "{out}"
        );
        // nothing listening
        let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = free.local_addr().unwrap().port();
        drop(free);
        let (ok, out) = http_get(
            &get("HTTP", p, &[]),
            "127.0.0.1",
            None,
            Duration::from_secs(5),
        )
        .await;
        assert!(!ok);
        assert_eq!(
            out,
            format!("Get \"http://127.0.0.1:{p}/healthz\": dial tcp 127.0.0.1:{p}: connect: connection refused")
        );
    }

    #[tokio::test]
    async fn given_headers_replace_the_defaults() {
        let (port, seen) = server(false, 200).await;
        let h = get(
            "HTTP",
            port,
            &[
                ("Host", "svc.example"),
                ("User-Agent", "mine"),
                ("X-Extra", "1"),
            ],
        );
        let (ok, out) = http_get(&h, "127.0.0.1", None, Duration::from_secs(5)).await;
        assert!(ok, "{out}");
        let lines: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|l| l.to_lowercase())
            .collect();
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("host:")).count(),
            1,
            "{lines:?}"
        );
        assert!(
            lines.contains(&"host: svc.example".to_string()),
            "{lines:?}"
        );
        assert!(lines.contains(&"user-agent: mine".to_string()), "{lines:?}");
        assert!(lines.contains(&"x-extra: 1".to_string()));
    }
}
