//! Probe and hook handlers: exec (CRI ExecSync), httpGet, tcpSocket and grpc
//! (k/k `pkg/probe/{exec,http,tcp,grpc}`), with the Go kubelet's failure texts.

use crate::cri::CriClient;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::{HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::time::Duration;

/// The User-Agent the Go kubelet's probes send (`kube-probe/<major>.<minor>`).
pub fn user_agent() -> String {
    let minor = crate::KUBE_VERSION.split('.').nth(1).unwrap_or("0");
    format!("kube-probe/1.{minor}")
}

/// Runs one probe; returns (success, output for the event).
pub async fn run(
    p: &Probe,
    cri: &CriClient,
    container_id: &str,
    pod_ip: &str,
    timeout: Duration,
) -> (bool, String) {
    if let Some(e) = &p.exec {
        return exec(
            cri,
            container_id,
            e.command.clone().unwrap_or_default(),
            timeout,
        )
        .await;
    }
    if let Some(h) = &p.http_get {
        return http_get(h, pod_ip, None, timeout).await;
    }
    if let Some(t) = &p.tcp_socket {
        let host = t
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let port = match &t.port {
            IntOrString::Int(p) => *p,
            IntOrString::String(s) => s.parse().unwrap_or(0),
        };
        return tcp(&host, port, timeout).await;
    }
    if let Some(g) = &p.grpc {
        return grpc(
            pod_ip,
            g.port,
            g.service.clone().unwrap_or_default(),
            timeout,
        )
        .await;
    }
    (false, "probe has no handler".into())
}

/// Exec handler through CRI ExecSync: success when the command exits 0; the output is the
/// command's stdout and stderr.
pub async fn exec(
    cri: &CriClient,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> (bool, String) {
    let secs = timeout.as_secs().max(1) as i64;
    match cri.exec_sync(container_id, cmd.clone(), secs).await {
        Ok(r) => {
            let mut out = String::from_utf8_lossy(&r.stdout).to_string();
            out.push_str(&String::from_utf8_lossy(&r.stderr));
            (r.exit_code == 0, out)
        }
        Err(crate::cri::CriError::DeadlineExceeded { .. }) => (
            false,
            format!("command timed out: command {cmd:?} timed out"),
        ),
        Err(e) => (false, e.desc()),
    }
}

fn port_of(p: &IntOrString) -> i32 {
    match p {
        IntOrString::Int(p) => *p,
        IntOrString::String(s) => s.parse().unwrap_or(0),
    }
}

/// httpGet handler: GET `scheme://host:port/path` (host defaults to the pod IP); a status in
/// [200, 400) is success, else `HTTP probe failed with statuscode: <code>`.
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
    if h.scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"))
    {
        return (
            false,
            "HTTPS probes are not supported by deckhand yet".into(),
        );
    }
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
    let host_port = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let uri: hyper::Uri = match format!("http://{host_port}{path}").parse() {
        Ok(u) => u,
        Err(e) => return (false, format!("invalid probe URL: {e}")),
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<Bytes>>();
    let mut req = hyper::Request::get(uri.clone())
        .header("User-Agent", user_agent())
        .header("Accept", "*/*");
    for hd in h.http_headers.iter().flatten() {
        req = req.header(hd.name.as_str(), hd.value.as_str());
    }
    let req = match req.body(Empty::new()) {
        Ok(r) => r,
        Err(e) => return (false, e.to_string()),
    };
    match tokio::time::timeout(timeout, client.request(req)).await {
        Err(_) => (false, format!("Get \"{uri}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)")),
        Ok(Err(e)) => (false, format!("Get \"{uri}\": {}", root_cause(&e))),
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
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
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
            let (ok, out) = http_get(g, pod_ip, None, timeout).await;
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
