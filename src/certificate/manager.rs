//! The I/O side of the node's certificates: TLS bootstrap (k/k
//! `pkg/kubelet/certificate/bootstrap.LoadClientCert`), the rotation loop of the client and
//! serving certificates (client-go `util/certificate` manager), the API client that switches to
//! a rotated client certificate, and the serving certificate source of the kubelet server.
//!
//! How the kube client picks up a rotated client certificate: deckhand's [`kube::Client`] is
//! built over a [`ReloadableClient`], a tower service that forwards every request to an inner
//! kube client. On rotation a new inner client (new TLS configuration, new connection pool) is
//! built from the kubeconfig, which names `kubelet-client-current.pem`, and swapped in: every
//! request from then on uses the new certificate. Requests already running (long watches)
//! finish on their old connection, which closes when its last user drops it (the API server
//! ends a watch after at most its timeout, kube-runtime's watcher asks for 290 s); the old
//! certificate is still valid then, as rotation happens at 70–90 % of its lifetime. The Go
//! kubelet instead force-closes all its connections on rotation (`transport.go`
//! `closeAllConns`); hyper's pool offers no such call, hence the swap.

use super::csr::{self, Kind, Template};
use super::request;
use super::store::{self, CaSource, FileStore, Stored};
use super::validity::{self, CertInfo};
use super::CertError;
use chrono::Utc;
use http::{Request, Response};
use kube::client::Body;
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a bootstrap waits for its certificate (`requestNodeCertificate`: 3600 s).
pub const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);
/// How long a rotation waits for its certificate (client-go `certificateWaitTimeout`).
pub const ROTATION_WAIT: Duration = Duration::from_secs(15 * 60);
/// The temporary key of a bootstrap in progress (`tmpPrivateKeyFile`), reused by a restart so
/// the earlier CSR (same digested name) is found again.
pub const TMP_KEY_FILE: &str = "kubelet-client.key.tmp";

fn kc_err(path: &Path) -> impl Fn(String) -> CertError + '_ {
    move |reason| CertError::Kubeconfig {
        path: path.to_path_buf(),
        reason,
    }
}

/// Builds a kube client from a kubeconfig file. With `identity` (a combined certificate and
/// key pem: the cert dir's current pem) the client presents that instead of whatever the
/// kubeconfig's user names, as the Go kubelet's rotating transport presents the certificate
/// manager's current certificate (k/k `cmd/kubelet/app/server.go buildKubeletClientConfig`).
pub async fn client_from_kubeconfig(
    path: &Path,
    identity: Option<&Path>,
) -> Result<kube::Client, CertError> {
    let kc = crate::config::kubeconfig::read(path).map_err(|e| kc_err(path)(e.reason))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .map_err(|e| kc_err(path)(e.to_string()))?;
    if let Some(pem) = identity {
        let pem = pem.to_string_lossy().into_owned();
        cfg.auth_info.client_certificate_data = None;
        cfg.auth_info.client_key_data = None;
        cfg.auth_info.client_certificate = Some(pem.clone());
        cfg.auth_info.client_key = Some(pem);
    }
    kube::Client::try_from(cfg).map_err(|e| kc_err(path)(e.to_string()))
}

/// The current context's user of a kubeconfig.
fn current_auth_info(path: &Path) -> Result<kube::config::AuthInfo, CertError> {
    let kc = crate::config::kubeconfig::read(path).map_err(|e| kc_err(path)(e.reason))?;
    let ctx_name = kc.current_context.clone().unwrap_or_default();
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.user.clone().unwrap_or_default())
        .ok_or_else(|| kc_err(path)(format!("no context {ctx_name:?}")))?;
    kc.auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.clone())
        .ok_or_else(|| kc_err(path)(format!("no user {user:?}")))
}

/// One of a kubeconfig user's pem items, from its `-data` field (base64) or else its file.
fn auth_pem(
    path: &Path,
    field: &str,
    data: Option<&str>,
    file: Option<&str>,
) -> Result<Option<Vec<u8>>, CertError> {
    use base64::Engine;
    if let Some(data) = data {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| kc_err(path)(format!("{field}-data: {e}")));
    }
    file.map(|f| std::fs::read(f).map_err(|e| kc_err(path)(format!("{f}: {e}"))))
        .transpose()
}

/// The client certificate chain a kubeconfig's current user presents, parsed.
pub fn kubeconfig_client_chain(path: &Path) -> Result<Vec<CertInfo>, CertError> {
    let auth = current_auth_info(path)?;
    let pem = client_certificate_pem(path, &auth)?
        .ok_or_else(|| kc_err(path)("no client certificate".into()))?;
    validity::parse_certs_pem(&pem)
}

/// A kubeconfig user's client certificate pem, if it has one.
fn client_certificate_pem(
    path: &Path,
    auth: &kube::config::AuthInfo,
) -> Result<Option<Vec<u8>>, CertError> {
    auth_pem(
        path,
        "client-certificate",
        auth.client_certificate_data.as_deref(),
        auth.client_certificate.as_deref(),
    )
}

/// The client certificate and key pems a kubeconfig's current user presents, when it has both
/// (kubeadm init's `kubelet.conf` embeds them), and where they came from: what the Go kubelet's
/// certificate manager starts from when its cert dir holds no valid certificate (client-go
/// `util/certificate getCurrentCertificateOrBootstrap`).
pub fn kubeconfig_client_pair(
    path: &Path,
) -> Result<Option<(String, String, KubeconfigPair)>, CertError> {
    use secrecy::ExposeSecret;
    let auth = current_auth_info(path)?;
    let cert = client_certificate_pem(path, &auth)?;
    let key = auth_pem(
        path,
        "client-key",
        auth.client_key_data.as_ref().map(|s| s.expose_secret()),
        auth.client_key.as_deref(),
    )?;
    let text = |b: Vec<u8>, field: &str| {
        String::from_utf8(b).map_err(|e| kc_err(path)(format!("{field}: {e}")))
    };
    let source = if auth.client_certificate_data.is_some() && auth.client_key_data.is_some() {
        KubeconfigPair::Embedded
    } else {
        KubeconfigPair::Files
    };
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((
            text(c, "client-certificate")?,
            text(k, "client-key")?,
            source,
        ))),
        _ => Ok(None),
    }
}

/// Is the kubeconfig there, loadable, with a client certificate none of whose chain has
/// expired? (k/k `bootstrap.isClientConfigStillValid`; problems are logged and mean "no".)
pub fn kubeconfig_still_valid(path: &Path) -> bool {
    if !path.exists() {
        return false;
    }
    match kubeconfig_client_chain(path) {
        Ok(chain) => {
            let ok = validity::still_valid(&chain, Utc::now());
            if !ok {
                tracing::warn!(kubeconfig = %path.display(), "part of the existing client certificate is expired");
            }
            ok
        }
        Err(e) => {
            tracing::warn!(error = %e, "existing kubeconfig is not usable");
            false
        }
    }
}

/// Server URL and CA of a kubeconfig's current cluster (for the kubeconfig written after
/// bootstrapping).
fn cluster_of(path: &Path) -> Result<(String, CaSource), CertError> {
    use base64::Engine;
    let kc = crate::config::kubeconfig::read(path).map_err(|e| kc_err(path)(e.reason))?;
    let ctx_name = kc.current_context.clone().unwrap_or_default();
    let cluster_name = kc
        .contexts
        .iter()
        .find(|c| c.name == ctx_name)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .or_else(|| kc.clusters.first().map(|c| c.name.clone()))
        .ok_or_else(|| kc_err(path)("no cluster".into()))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| kc_err(path)(format!("no cluster {cluster_name:?}")))?;
    let server = cluster
        .server
        .clone()
        .ok_or_else(|| kc_err(path)("cluster has no server".into()))?;
    let ca = if let Some(f) = &cluster.certificate_authority {
        CaSource::File(f.clone())
    } else if let Some(d) = &cluster.certificate_authority_data {
        CaSource::Data(
            base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map_err(|e| kc_err(path)(format!("certificate-authority-data: {e}")))?,
        )
    } else if cluster.insecure_skip_tls_verify == Some(true) {
        CaSource::Insecure
    } else {
        return Err(kc_err(path)("cluster has no certificate authority".into()));
    };
    Ok((server, ca))
}

/// What TLS bootstrap needs.
#[derive(Debug, Clone)]
pub struct BootstrapConfig {
    /// `--kubeconfig`: read if usable, written after bootstrapping.
    pub kubeconfig: PathBuf,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: PathBuf,
    /// `--cert-dir`.
    pub cert_dir: PathBuf,
    /// The node name (CSR subject `system:node:<node>`).
    pub node_name: String,
}

/// TLS bootstrap (k/k `bootstrap.LoadClientCert`): when `--kubeconfig` is missing or its
/// client certificate expired, request a client certificate with the bootstrap credentials
/// (CSR `node-csr-<digest>`, signer `kubernetes.io/kube-apiserver-client-kubelet`), wait for it,
/// store it as `kubelet-client-<ts>.pem` + `kubelet-client-current.pem`, and write
/// `--kubeconfig` naming that pem. Returns whether a bootstrap happened.
pub async fn bootstrap_client_cert(cfg: &BootstrapConfig) -> Result<bool, CertError> {
    if kubeconfig_still_valid(&cfg.kubeconfig) {
        tracing::info!(kubeconfig = %cfg.kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
        return Ok(false);
    }
    tracing::info!(bootstrap_kubeconfig = %cfg.bootstrap_kubeconfig.display(), "using the bootstrap kubeconfig to request a client certificate");
    let client = client_from_kubeconfig(&cfg.bootstrap_kubeconfig, None).await?;
    let store = FileStore::new(&cfg.cert_dir, Kind::Client.store_prefix());
    let tmp_key = cfg.cert_dir.join(TMP_KEY_FILE);
    // reuse the key of the current pair, else the key of an interrupted bootstrap, else a new one
    let key = match store.current().ok().flatten() {
        Some(s) => rcgen::KeyPair::from_pem(&s.key_pem).ok(),
        None => None,
    };
    let key = match key {
        Some(k) => k,
        None => match std::fs::read_to_string(&tmp_key)
            .ok()
            .and_then(|p| rcgen::KeyPair::from_pem(&p).ok())
        {
            Some(k) => k,
            None => {
                let k = csr::generate_key()?;
                store::write_private(&tmp_key, k.serialize_pem().as_bytes())?;
                k
            }
        },
    };
    wait_for_server(&client, Duration::from_secs(60)).await;
    let template = Template::client(&cfg.node_name);
    let usages = Kind::Client.usages();
    let csr_pem = csr::make_csr_pem(&key, &template)?;
    let name = csr::digested_name(&csr::spki_der(&key), &template, usages);
    let (name, uid) = request::request_certificate(
        &client,
        &csr_pem,
        Some(&name),
        Kind::Client.signer(),
        usages,
    )
    .await?;
    tracing::info!(csr = %name, "waiting for the client certificate to be issued");
    let cert = request::wait_for_certificate(&client, &name, &uid, BOOTSTRAP_WAIT).await?;
    let cert = String::from_utf8(cert).map_err(|e| CertError::Parse(e.to_string()))?;
    let file = store.update(&cert, &key.serialize_pem())?;
    let _ = std::fs::remove_file(&tmp_key);
    let (server, ca) = cluster_of(&cfg.bootstrap_kubeconfig)?;
    store::write_node_kubeconfig(&cfg.kubeconfig, &server, &ca, &store.current_path())?;
    tracing::info!(cert = %file.display(), kubeconfig = %cfg.kubeconfig.display(), "client certificate issued; kubeconfig written");
    Ok(true)
}

/// Waits (up to `deadline`) for the API server to answer, as the Go kubelet's `waitForServer`
/// does before its first CSR; a timeout is only logged.
async fn wait_for_server(client: &kube::Client, deadline: Duration) {
    let start = tokio::time::Instant::now();
    loop {
        match client.apiserver_version().await {
            Ok(_) => return,
            Err(e) if start.elapsed() < deadline => {
                tracing::info!(error = %e, "failed to connect to the API server");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(_) => {
                tracing::warn!("timed out waiting to connect to the API server");
                return;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the reloadable API client
// ---------------------------------------------------------------------------------------------

/// A tower service forwarding each request to the current inner [`kube::Client`]; see the
/// module doc for how rotation swaps it.
#[derive(Clone)]
pub struct ReloadableClient {
    inner: Arc<RwLock<kube::Client>>,
    kubeconfig: PathBuf,
    identity: Option<PathBuf>,
}

impl ReloadableClient {
    /// Loads the kubeconfig (presenting `identity` instead of its user's certificate when given:
    /// [`client_from_kubeconfig`]); returns the reloadable service and the [`kube::Client`]
    /// built over it (the one to hand to the rest of deckhand).
    pub async fn new(
        kubeconfig: &Path,
        identity: Option<&Path>,
    ) -> Result<(ReloadableClient, kube::Client), CertError> {
        let inner = client_from_kubeconfig(kubeconfig, identity).await?;
        let ns = inner.default_namespace().to_string();
        let r = ReloadableClient {
            inner: Arc::new(RwLock::new(inner)),
            kubeconfig: kubeconfig.to_path_buf(),
            identity: identity.map(Path::to_path_buf),
        };
        let outer = kube::Client::new(r.clone(), ns);
        Ok((r, outer))
    }

    /// Re-reads the kubeconfig (and so the current certificate) and swaps the inner client.
    pub async fn reload(&self) -> Result<(), CertError> {
        let fresh = client_from_kubeconfig(&self.kubeconfig, self.identity.as_deref()).await?;
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        tracing::info!(kubeconfig = %self.kubeconfig.display(), "API client switched to the rotated client certificate");
        Ok(())
    }

    fn current(&self) -> kube::Client {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl tower::Service<Request<Body>> for ReloadableClient {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let client = self.current();
        Box::pin(async move { client.send(req).await })
    }
}

// ---------------------------------------------------------------------------------------------
// the serving certificate source
// ---------------------------------------------------------------------------------------------

/// The kubelet server's serving certificate when it comes from `kubernetes.io/kubelet-serving`
/// CSRs: a rustls certificate resolver whose certificate is replaced on rotation (new
/// handshakes use the new one). Until the first certificate is issued handshakes fail, as with
/// the Go kubelet ("no serving certificate available for the kubelet").
#[derive(Debug, Default)]
pub struct ServingCertificate {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ServingCertificate {
    /// Installs a stored pair.
    pub fn set(&self, stored: &Stored) -> Result<(), CertError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(stored.cert_pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| CertError::Parse(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(stored.key_pem.as_bytes())
            .map_err(|e| CertError::Parse(e.to_string()))?;
        let provider = rustls::crypto::ring::default_provider();
        let ck = CertifiedKey::from_der(certs, key, &provider)
            .map_err(|e| CertError::Parse(e.to_string()))?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(ck));
        Ok(())
    }

    /// Whether a certificate is installed.
    pub fn ready(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

impl rustls::server::ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

// ---------------------------------------------------------------------------------------------
// rotation
// ---------------------------------------------------------------------------------------------

/// How the client certificate is presented and rotated when `rotateCertificates` is on (k/k
/// `cmd/kubelet/app/server.go buildKubeletClientConfig` with client-go `util/certificate
/// getCurrentCertificateOrBootstrap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRotation {
    /// The kubeconfig names the cert dir's current pem (TLS bootstrap, or kubeadm's
    /// kubelet-finalize phase, wrote it so): present it and rotate it at its deadline.
    Kubeconfig,
    /// The cert dir holds a valid certificate the kubeconfig does not name: present that one
    /// (the certificate manager's, not the kubeconfig's) and rotate it at its deadline.
    Store,
    /// No valid certificate in the cert dir, and the kubeconfig's user has a certificate and
    /// key: copy them into the cert dir and present them. `at_once` when they are embedded
    /// (`client-certificate-data`, as in kubeadm init's `kubelet.conf`): client-go takes them
    /// as bootstrap data and requests a new certificate at once. Files it takes as the store's
    /// current pair, rotated at their deadline.
    Seed {
        /// Request a new certificate now.
        at_once: bool,
    },
    /// Nothing to start from: the kubeconfig is used as it is, and nothing is rotated.
    Off,
}

/// Decides [`ClientRotation`] from whether the kubeconfig names the cert dir's current pem,
/// whether that pem holds a certificate still valid, and the kubeconfig user's certificate and
/// key ([`KubeconfigPair`]).
pub fn client_rotation(
    names_store: bool,
    store_valid: bool,
    kubeconfig_pair: Option<KubeconfigPair>,
) -> ClientRotation {
    match (names_store, store_valid, kubeconfig_pair) {
        (true, _, _) => ClientRotation::Kubeconfig,
        (false, true, _) => ClientRotation::Store,
        (false, false, Some(p)) => ClientRotation::Seed {
            at_once: p == KubeconfigPair::Embedded,
        },
        (false, false, None) => ClientRotation::Off,
    }
}

/// Where a kubeconfig user's client certificate and key are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeconfigPair {
    /// `client-certificate-data` and `client-key-data`.
    Embedded,
    /// `client-certificate` and `client-key` files (or one of each kind).
    Files,
}

/// What happens with a newly issued certificate.
pub enum Installer {
    /// The client certificate: the API client reloads the kubeconfig.
    Client(ReloadableClient),
    /// The serving certificate: the server's resolver gets it.
    Serving(Arc<ServingCertificate>),
}

/// One certificate's rotation loop (client-go `util/certificate` manager `run`/`rotateCerts`).
pub struct Rotator {
    /// Which certificate.
    pub kind: Kind,
    /// Its files.
    pub store: FileStore,
    /// What it must say.
    pub template: Template,
    /// The client CSRs are made with (the node's own credentials).
    pub client: kube::Client,
    /// Where a new certificate goes.
    pub installer: Installer,
    /// Request a new certificate at once, whatever the current one's deadline (client-go
    /// `forceRotation`: the current one was copied from the kubeconfig's embedded data,
    /// [`ClientRotation::Seed`]).
    pub force: bool,
}

impl Rotator {
    /// Installs the stored certificate if it is valid and matches the template (serving: so
    /// the server can answer at once after a restart). Returns whether it did.
    pub fn load_current(&self) -> bool {
        match self.store.current() {
            Ok(Some(s)) if validity::still_valid(&s.chain, Utc::now()) => {
                if let Installer::Serving(sc) = &self.installer {
                    if let Err(e) = sc.set(&s) {
                        tracing::warn!(error = %e, "stored serving certificate is not usable");
                        return false;
                    }
                }
                true
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(error = %e, "reading the stored certificate");
                false
            }
        }
    }

    /// Runs until cancelled: sleeps until the rotation deadline of the current certificate
    /// (70–90 % of its lifetime, at once when missing, expired or not matching the template),
    /// then requests a new one (retries: 2 s doubling five times, then every 32 s).
    pub async fn run(self, cancel: CancellationToken) {
        let kind = self.kind;
        let mut force = self.force;
        loop {
            let wait = match self.store.current() {
                Ok(Some(_)) if std::mem::take(&mut force) => {
                    tracing::info!(
                        ?kind,
                        "the certificate came from the kubeconfig: requesting a new one now"
                    );
                    Duration::ZERO
                }
                Ok(Some(s)) if validity::still_valid(&s.chain, Utc::now()) => {
                    let jitter: f64 = rand::random();
                    let leaf = &s.chain[0];
                    let w = validity::time_until_rotation(
                        leaf,
                        Some(&self.template),
                        jitter,
                        Utc::now(),
                    );
                    tracing::info!(?kind, expiration = %leaf.not_after, rotation_in = ?w, "waiting for the next certificate rotation");
                    w
                }
                _ => Duration::ZERO,
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            let mut delay = Duration::from_secs(2);
            let mut attempts = 0;
            loop {
                let r = tokio::select! {
                    _ = cancel.cancelled() => return,
                    r = self.rotate_once() => r,
                };
                match r {
                    Ok(()) => break,
                    Err(e) => {
                        attempts += 1;
                        tracing::warn!(?kind, error = %e, attempts, "certificate rotation failed");
                        let sleep = if attempts <= 5 {
                            delay
                        } else {
                            Duration::from_secs(32)
                        };
                        delay *= 2;
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(sleep) => {}
                        }
                    }
                }
            }
        }
    }

    /// One rotation: new key, CSR (`generateName: csr-`), wait, store, install.
    pub async fn rotate_once(&self) -> Result<(), CertError> {
        let key = csr::generate_key()?;
        let csr_pem = csr::make_csr_pem(&key, &self.template)?;
        let (name, uid) = request::request_certificate(
            &self.client,
            &csr_pem,
            None,
            self.kind.signer(),
            self.kind.usages(),
        )
        .await?;
        let cert = request::wait_for_certificate(&self.client, &name, &uid, ROTATION_WAIT).await?;
        let cert = String::from_utf8(cert).map_err(|e| CertError::Parse(e.to_string()))?;
        let file = self.store.update(&cert, &key.serialize_pem())?;
        match &self.installer {
            Installer::Client(r) => r.reload().await?,
            Installer::Serving(sc) => {
                let stored = self
                    .store
                    .current()?
                    .ok_or_else(|| CertError::Parse("stored certificate vanished".into()))?;
                sc.set(&stored)?;
            }
        }
        tracing::info!(kind = ?self.kind, csr = %name, cert = %file.display(), "certificate rotated");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_pem(not_after: (i32, u8, u8)) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.not_before = rcgen::date_time_ymd(2000, 1, 1);
        p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        format!(
            "{}{}",
            p.self_signed(&key).unwrap().pem(),
            key.serialize_pem()
        )
    }

    #[test]
    fn a_kubeconfig_is_usable_only_with_an_unexpired_client_certificate() {
        let dir = std::env::temp_dir().join(format!("deckhand-kcvalid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let kc = dir.join("kubelet.conf");
        assert!(!kubeconfig_still_valid(&kc), "missing");
        let pem = dir.join("kubelet-client-current.pem");
        store::write_node_kubeconfig(&kc, "https://10.250.0.1:6443", &CaSource::Insecure, &pem)
            .unwrap();
        assert!(!kubeconfig_still_valid(&kc), "certificate file missing");
        std::fs::write(&pem, cert_pem((2001, 1, 1))).unwrap();
        assert!(!kubeconfig_still_valid(&kc), "expired");
        std::fs::write(&pem, cert_pem((2999, 1, 1))).unwrap();
        assert!(kubeconfig_still_valid(&kc));
        let (server, ca) = cluster_of(&kc).unwrap();
        assert_eq!(server, "https://10.250.0.1:6443");
        assert!(matches!(ca, CaSource::Insecure));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// kubeadm init's kubelet.conf embeds the node's certificate and key; the Go kubelet copies
    /// them into its cert dir and rotates at once. A kubeconfig naming the current pem, or a
    /// valid pem already there, wins over the kubeconfig's own pair.
    #[test]
    fn client_rotation_follows_the_go_kubelets_rules() {
        use ClientRotation::*;
        use KubeconfigPair::*;
        let cases = [
            ((true, true, None), Kubeconfig, "TLS bootstrap's kubeconfig"),
            (
                (true, false, None),
                Kubeconfig,
                "named but expired: rotation requests at once",
            ),
            (
                (false, true, Some(Embedded)),
                Store,
                "a valid pem from an earlier start wins",
            ),
            (
                (false, true, None),
                Store,
                "a valid pem, kubeconfig without a pair",
            ),
            (
                (false, false, Some(Embedded)),
                Seed { at_once: true },
                "kubeadm init's embedded pair",
            ),
            (
                (false, false, Some(Files)),
                Seed { at_once: false },
                "files: the store's current pair",
            ),
            ((false, false, None), Off, "nothing to start from"),
        ];
        for ((names, valid, pair), want, what) in cases {
            assert_eq!(client_rotation(names, valid, pair), want, "{what}");
        }
    }

    #[test]
    fn a_kubeconfigs_embedded_pair_is_read() {
        use base64::Engine;
        let dir = std::env::temp_dir().join(format!("deckhand-kcpair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stored = store::split_pem(&cert_pem((2999, 1, 1))).unwrap();
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        let kc = dir.join("kubelet.conf");
        let write = |user: &str| {
            let yaml = format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: https://10.250.0.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user:\n{user}"
            );
            std::fs::write(&kc, yaml).unwrap();
        };
        write(&format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&stored.cert_pem),
            b64(&stored.key_pem)
        ));
        let (cert, key, from) = kubeconfig_client_pair(&kc).unwrap().expect("a pair");
        assert_eq!(
            (cert.as_str(), key.as_str()),
            (&*stored.cert_pem, &*stored.key_pem)
        );
        assert_eq!(from, KubeconfigPair::Embedded);
        // the same pair as files
        let (cf, kf) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&cf, &stored.cert_pem).unwrap();
        std::fs::write(&kf, &stored.key_pem).unwrap();
        write(&format!(
            "    client-certificate: {}\n    client-key: {}\n",
            cf.display(),
            kf.display()
        ));
        let (cert, _, from) = kubeconfig_client_pair(&kc).unwrap().expect("a pair");
        assert_eq!(
            (cert.as_str(), from),
            (&*stored.cert_pem, KubeconfigPair::Files)
        );
        // a certificate without a key is no pair
        write(&format!(
            "    client-certificate-data: {}\n",
            b64(&stored.cert_pem)
        ));
        assert_eq!(kubeconfig_client_pair(&kc).unwrap(), None);
        // bad base64 is an error naming the field
        write("    client-certificate-data: '!!'\n    client-key-data: '!!'\n");
        let err = kubeconfig_client_pair(&kc).unwrap_err().to_string();
        assert!(err.contains("client-certificate-data"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_serving_certificate_source_answers_only_once_set() {
        let sc = ServingCertificate::default();
        assert!(!sc.ready());
        let stored = store::split_pem(&cert_pem((2999, 1, 1))).unwrap();
        sc.set(&stored).unwrap();
        assert!(sc.ready());
    }
}
