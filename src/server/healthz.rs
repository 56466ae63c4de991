//! The plain-HTTP health endpoint on `healthzBindAddress:healthzPort` (127.0.0.1:10248 by
//! default), as the Go kubelet's `healthz` server (k/k `pkg/kubelet/server`, `ListenAndServeHealthz`):
//! `kubeadm join` and `kubeadm init` wait on `http://127.0.0.1:10248/healthz` for the kubelet.
//!
//! `/healthz` and `/healthz/syncloop` answer `200 ok` while the pod sync loop beats
//! ([`crate::systemd::SyncLoopMonitor`]) and `500` when it has not for [`SYNC_LOOP_MAX_AGE`];
//! `/healthz/ping` always answers `ok`. No credentials are read and nothing else is served.

use crate::systemd::SyncLoopMonitor;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long the sync loop may go without beating before `/healthz` fails (the Go kubelet:
/// twice its 1 min resync interval).
pub const SYNC_LOOP_MAX_AGE: Duration = Duration::from_secs(120);

/// The status and body for a request path (pure).
pub fn respond(path: &str, loop_age: Duration) -> (StatusCode, String) {
    match path {
        "/healthz/ping" => (StatusCode::OK, "ok".into()),
        "/healthz" | "/healthz/syncloop" => {
            if loop_age <= SYNC_LOOP_MAX_AGE {
                (StatusCode::OK, "ok".into())
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "[-]syncloop failed: sync loop has not run for {}s\nhealthz check failed",
                        loop_age.as_secs()
                    ),
                )
            }
        }
        _ => (StatusCode::NOT_FOUND, "404 page not found".into()),
    }
}

/// Binds the endpoint.
///
/// Errors: the address is in use or not local.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves on `listener` until `cancel`.
pub async fn run(
    listener: tokio::net::TcpListener,
    monitor: SyncLoopMonitor,
    cancel: CancellationToken,
) {
    loop {
        let (tcp, _) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "healthz accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let monitor = monitor.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let (code, body) = respond(req.uri().path(), monitor.age());
                let mut resp = Response::new(Full::new(Bytes::from(body)));
                *resp.status_mut() = code;
                resp.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = tokio::time::timeout(
                Duration::from_secs(30),
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), svc),
            )
            .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_follows_the_sync_loop() {
        assert_eq!(
            respond("/healthz", Duration::from_secs(1)).0,
            StatusCode::OK
        );
        assert_eq!(
            respond("/healthz/syncloop", Duration::from_secs(300)).0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            respond("/healthz/ping", Duration::from_secs(300)).0,
            StatusCode::OK
        );
        assert_eq!(respond("/pods", Duration::ZERO).0, StatusCode::NOT_FOUND);
    }
}
