//! The kubelet HTTPS server (port 10250) that the API server calls for `kubectl logs`, `exec`,
//! `attach`, `port-forward` and `top`, and that Prometheus and metrics-server scrape (k/k
//! `pkg/kubelet/server/server.go`). Every request is authenticated and authorized
//! ([`auth`]); the server holds no pod state of its own: pods come from the API server (only
//! those bound to this node), containers and sandboxes from CRI, so a slow or stuck client can
//! only ever hold up its own request.
//!
//! | path | handler |
//! |---|---|
//! | `/healthz` | `ok` |
//! | `/pods` | the pods bound to this node (v1 PodList) |
//! | `/containerLogs/{ns}/{pod}/{container}` | [`logs`] |
//! | `/exec/...`, `/attach/...`, `/portForward/...` | [`streaming`] |
//! | `/stats/summary` | [`stats`] |
//! | `/metrics`, `/metrics/resource` | [`metrics`] |
//!
//! Container log rotation (the Go kubelet's container log manager) is in [`logrotate`].

pub mod auth;
pub mod flushing;
pub mod healthz;
pub mod logrotate;
pub mod logs;
pub mod metrics;
pub mod pods;
pub mod stats;
pub mod streaming;
pub mod tls;

use crate::cri::CriClient;
use auth::{Auth, AuthError, AuthorizationMode, X509Identity};
use bytes::Bytes;
use futures::StreamExt;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Response body type of every handler.
pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// A complete body.
pub(crate) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|e| match e {}).boxed_unsync()
}

/// An empty body.
pub(crate) fn empty() -> Body {
    Empty::new().map_err(|e| match e {}).boxed_unsync()
}

/// A `text/plain` response.
pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(full(msg.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Go's `http.NotFound`.
pub(crate) fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found\n")
}

fn method_not_allowed() -> Response<Body> {
    text(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed")
}

fn json(value: &impl serde::Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(v) => {
            let mut r = Response::new(full(v));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// The server's settings (the Go kubelet's flags of the same names).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `--address` (default 0.0.0.0).
    pub address: IpAddr,
    /// `--port` (default 10250).
    pub port: u16,
    /// `--tls-cert-file` (with `--tls-private-key-file`); without them a self-signed
    /// certificate in `cert_dir` is used.
    pub tls_cert_file: Option<PathBuf>,
    /// `--tls-private-key-file`.
    pub tls_private_key_file: Option<PathBuf>,
    /// Where the self-signed certificate is kept (`<root-dir>/pki`).
    pub cert_dir: PathBuf,
    /// `--client-ca-file`: CA bundle for x509 client authentication.
    pub client_ca_file: Option<PathBuf>,
    /// `--anonymous-auth` (default false).
    pub anonymous_auth: bool,
    /// `--authentication-token-webhook` (default true): bearer tokens through TokenReview.
    pub token_webhook: bool,
    /// `--authorization-mode` (default Webhook).
    pub authorization_mode: AuthorizationMode,
    /// This node's name (authorization attributes, pod filter).
    pub node_name: String,
    /// This node's addresses (self-signed certificate SANs).
    pub node_ips: Vec<String>,
    /// The kubelet root directory (node filesystem stats).
    pub root_dir: PathBuf,
    /// Serving certificate from `kubernetes.io/kubelet-serving` CSRs
    /// (`--rotate-server-certificates`); when set, it replaces the certificate files.
    pub serving: Option<Arc<crate::certificate::manager::ServingCertificate>>,
    /// Where the pod cgroups are (`cgroupsPerQOS`), for the pods' and containers' pressure
    /// stall figures ([`stats::StatsProvider::with_pod_cgroups`]).
    pub pod_cgroups: Option<crate::cm::CgroupLayout>,
}

/// Server errors at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Only one of the certificate and key files was given.
    #[error("--tls-cert-file and --tls-private-key-file must be given together")]
    HalfTls,
    /// The listener could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

struct State {
    cri: CriClient,
    pods: pods::PodLookup,
    auth: Auth,
    metrics: metrics::Metrics,
    stats: stats::StatsProvider,
}

/// A bound, ready-to-run kubelet server.
pub struct KubeletServer {
    state: Arc<State>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
}

/// How long a client has to finish the TLS handshake and send its request headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long open connections get to finish after shutdown began.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

impl KubeletServer {
    /// Sets up TLS and binds the listener (errors here are start-up errors, as in the Go
    /// kubelet, which exits when it cannot serve).
    pub async fn bind(
        cfg: ServerConfig,
        client: kube::Client,
        cri: CriClient,
        pods: pods::PodLookup,
    ) -> Result<Self, ServerError> {
        let tls_config = match &cfg.serving {
            Some(serving) => {
                tls::server_config_dynamic(serving.clone(), cfg.client_ca_file.as_deref())?
            }
            None => {
                let (cert, key) = match (&cfg.tls_cert_file, &cfg.tls_private_key_file) {
                    (Some(c), Some(k)) => (c.clone(), k.clone()),
                    (None, None) => {
                        tls::ensure_self_signed(&cfg.cert_dir, &cfg.node_name, &cfg.node_ips)?
                    }
                    _ => return Err(ServerError::HalfTls),
                };
                tls::server_config(&tls::TlsFiles {
                    cert,
                    key,
                    client_ca: cfg.client_ca_file.clone(),
                })?
            }
        };
        let addr = SocketAddr::new(cfg.address, cfg.port);
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        let _ = crate::cri::CALL_OBSERVER.set(metrics::observe_runtime_call);
        let state = Arc::new(State {
            auth: Auth::new(
                client.clone(),
                cfg.node_name.clone(),
                cfg.anonymous_auth,
                cfg.token_webhook,
                cfg.authorization_mode,
            ),
            metrics: metrics::Metrics::new(&cfg.node_name),
            stats: stats::StatsProvider::new(
                cri.clone(),
                cfg.node_name.clone(),
                cfg.root_dir.clone(),
            )
            .with_pod_cgroups(cfg.pod_cgroups.clone()),
            cri,
            pods,
        });
        tracing::info!(%addr, client_ca = ?cfg.client_ca_file, authorization = ?cfg.authorization_mode, "kubelet server listening");
        Ok(KubeletServer {
            state,
            listener,
            acceptor: TlsAcceptor::from(Arc::new(tls_config)),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `cancel` fires, then gives open connections [`SHUTDOWN_GRACE`] to finish.
    pub async fn run(self, cancel: CancellationToken) {
        let tracker = TaskTracker::new();
        loop {
            let (tcp, peer) = tokio::select! {
                _ = cancel.cancelled() => break,
                r = self.listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let state = self.state.clone();
            let acceptor = self.acceptor.clone();
            let cancel = cancel.clone();
            tracker.spawn(async move {
                serve_connection(state, acceptor, tcp, peer, cancel).await;
            });
        }
        tracker.close();
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait()).await;
        tracing::info!("kubelet server stopped");
    }
}

async fn serve_connection(
    state: Arc<State>,
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    cancel: CancellationToken,
) {
    let _ = tcp.set_nodelay(true);
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let identity: Option<Arc<X509Identity>> = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| auth::x509_identity(c))
        .map(Arc::new);
    let svc = hyper::service::service_fn(move |req| {
        let state = state.clone();
        let identity = identity.clone();
        async move { Ok::<_, Infallible>(state.handle(req, identity.as_deref()).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(tls), svc)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        }
        _ = cancel.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
        }
    }
}

/// First value of each query parameter.
fn first_values(pairs: &[(String, String)]) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for (k, v) in pairs {
        m.entry(k.clone()).or_insert_with(|| v.clone());
    }
    m
}

impl State {
    async fn handle(
        &self,
        req: Request<Incoming>,
        identity: Option<&X509Identity>,
    ) -> Response<Body> {
        let started = Instant::now();
        let method = req.method().as_str().to_string();
        let path = req.uri().path().to_string();
        let (inflight, labels) = self.metrics.request_started(&method, &path);
        let resp = self.authorized(req, identity, &method, &path).await;
        self.metrics.request_finished(&labels, started.elapsed());
        drop(inflight);
        resp
    }

    async fn authorized(
        &self,
        req: Request<Incoming>,
        identity: Option<&X509Identity>,
        method: &str,
        path: &str,
    ) -> Response<Body> {
        let authorization = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("invalid").to_string());
        let user = match self
            .auth
            .authenticate(identity, authorization.as_deref())
            .await
        {
            Ok(u) => u,
            Err(_) => return text(StatusCode::UNAUTHORIZED, "Unauthorized"),
        };
        match self.auth.authorize(&user, method, path).await {
            Ok(()) => {}
            Err(AuthError::Forbidden(m)) => return text(StatusCode::FORBIDDEN, m),
            Err(AuthError::AuthorizationError(m)) => {
                return text(StatusCode::INTERNAL_SERVER_ERROR, m)
            }
            Err(AuthError::Unauthenticated) => {
                return text(StatusCode::UNAUTHORIZED, "Unauthorized")
            }
        }
        self.route(req, path).await
    }

    async fn route(&self, req: Request<Incoming>, path: &str) -> Response<Body> {
        let query: Vec<(String, String)> = req
            .uri()
            .query()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = req.method().clone();
        let get = method == Method::GET || method == Method::HEAD;
        match segs.as_slice() {
            ["healthz"] | ["healthz", "ping" | "log" | "syncloop"] => {
                if get {
                    text(StatusCode::OK, "ok")
                } else {
                    method_not_allowed()
                }
            }
            ["pods"] | ["pods", ""] => {
                if !get {
                    return method_not_allowed();
                }
                json(&serde_json::json!({
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {},
                    "items": self.pods.node_pods(),
                }))
            }
            ["stats", "summary"] | ["stats", "summary", ""] => {
                if !(get || method == Method::POST) {
                    return method_not_allowed();
                }
                let only = first_values(&query)
                    .get("only_cpu_and_memory")
                    .is_some_and(|v| v == "true");
                match self.stats.summary(only).await {
                    Ok(s) => json(&s),
                    Err(e) => text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("Internal Error: failed to get summary stats: {e}"),
                    ),
                }
            }
            ["metrics"] => {
                if !get {
                    return method_not_allowed();
                }
                let body = self.metrics.render(&self.cri).await;
                let mut r = text(StatusCode::OK, body);
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(metrics::OPENMETRICS_CONTENT_TYPE),
                );
                r
            }
            ["metrics", "resource"] => {
                if !get {
                    return method_not_allowed();
                }
                let summary = match self.stats.summary(true).await {
                    Ok(s) => Some(s),
                    Err(e) => {
                        tracing::warn!(error = %e, "resource metrics: summary failed");
                        None
                    }
                };
                let mut r = text(
                    StatusCode::OK,
                    metrics::render_resource_metrics(summary.as_ref()),
                );
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(metrics::PROMETHEUS_CONTENT_TYPE),
                );
                r
            }
            ["containerLogs", rest @ ..] => {
                if method != Method::GET {
                    return method_not_allowed();
                }
                self.container_logs(rest, &query).await
            }
            ["exec", rest @ ..] | ["attach", rest @ ..] => {
                if !streaming::method_allowed(&method) {
                    return method_not_allowed();
                }
                let kind = if segs[0] == "exec" {
                    streaming::Kind::Exec
                } else {
                    streaming::Kind::Attach
                };
                streaming::exec_or_attach(kind, &self.pods, &self.cri, req, rest, &query).await
            }
            ["portForward", rest @ ..] => {
                if !streaming::method_allowed(&method) {
                    return method_not_allowed();
                }
                streaming::port_forward(&self.pods, &self.cri, req, rest, &query).await
            }
            _ => not_found(),
        }
    }

    /// `/containerLogs/{ns}/{pod}/{container}` (Go `getContainerLogs` +
    /// `GetKubeletContainerLogs`).
    async fn container_logs(&self, rest: &[&str], query: &[(String, String)]) -> Response<Body> {
        let (ns, pod_name, container) = match rest {
            [ns, pod, c] => (*ns, *pod, *c),
            _ => return not_found(),
        };
        if pod_name.is_empty() {
            return text(StatusCode::BAD_REQUEST, r#"{"message": "Missing podID."}"#);
        }
        if container.is_empty() {
            return text(
                StatusCode::BAD_REQUEST,
                r#"{"message": "Missing container name."}"#,
            );
        }
        if ns.is_empty() {
            return text(
                StatusCode::BAD_REQUEST,
                r#"{"message": "Missing podNamespace."}"#,
            );
        }
        let opts = match logs::PodLogOptions::from_query(&first_values(query)) {
            Ok(o) => o,
            Err(e @ logs::QueryError::Invalid) => {
                return text(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
            Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
        };
        let Some(pod) = self.pods.get_pod(ns, pod_name) else {
            return text(
                StatusCode::NOT_FOUND,
                format!("pod {pod_name:?} does not exist"),
            );
        };
        if !pods::has_container(&pod, container) {
            return text(
                StatusCode::NOT_FOUND,
                format!("container {container:?} not found in pod {pod_name:?}"),
            );
        }
        let cid = match pods::log_container_id(&pod, container, opts.previous) {
            Ok(id) => id,
            Err(msg) => return text(StatusCode::BAD_REQUEST, msg),
        };
        let unable = || {
            text(
                StatusCode::BAD_REQUEST,
                format!("unable to retrieve container logs for containerd://{cid}"),
            )
        };
        let status = match self.cri.container_status(&cid).await {
            Ok(s) => s,
            Err(_) => return unable(),
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if !pods::belongs_to(&status.labels, uid, container) || status.log_path.is_empty() {
            return unable();
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let path = PathBuf::from(&status.log_path);
        let cri = self.cri.clone();
        tokio::spawn(async move {
            if let Err(e) = logs::read_logs(path, cid, opts, cri, tx.clone()).await {
                let _ = tx.send(Bytes::from(e.to_string())).await;
            }
        });
        // Written out chunk by chunk, as the Go kubelet's flushwriter does (see `flushing`).
        let body = flushing::FlushEachFrame::new(StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(rx).map(|b| Ok(Frame::data(b))),
        ));
        let mut r = Response::new(BodyExt::boxed_unsync(body));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        r
    }
}
