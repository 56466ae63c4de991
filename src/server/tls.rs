//! TLS for the kubelet server (rustls, ring provider): the serving certificate from
//! `--tls-cert-file`/`--tls-private-key-file`, or a self-signed one kept in
//! `<cert-dir>/kubelet.crt|.key` (generated at the first start, as the Go kubelet does in
//! `cmd/kubelet/app/server.go` `InitializeTLS`); client certificates are requested and, when
//! presented, verified against `--client-ca-file` (clients without a certificate may still
//! authenticate with a bearer token).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// TLS set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read or parsed.
    #[error("reading {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The self-signed certificate could not be made or saved.
    #[error("self-signed serving certificate in {dir}: {reason}")]
    SelfSigned {
        /// The certificate directory.
        dir: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The client CA could not be used.
    #[error("client CA {path}: {reason}")]
    ClientCa {
        /// The CA file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::File {
            path: path.into(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.into(),
            reason: "no certificate in PEM file".into(),
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        path: path.into(),
        reason: e.to_string(),
    })
}

/// Loads `<dir>/kubelet.crt|.key`, creating them first (self-signed for the node's name and
/// addresses, plus localhost) when either is missing. Returns the two paths.
pub fn ensure_self_signed(
    dir: &Path,
    node_name: &str,
    addresses: &[String],
) -> Result<(PathBuf, PathBuf), TlsError> {
    let crt = dir.join("kubelet.crt");
    let key = dir.join("kubelet.key");
    if crt.exists() && key.exists() {
        return Ok((crt, key));
    }
    let err = |reason: String| TlsError::SelfSigned {
        dir: dir.into(),
        reason,
    };
    let mut sans: Vec<String> = vec![node_name.to_string()];
    sans.extend(addresses.iter().cloned());
    for extra in ["localhost", "127.0.0.1"] {
        if !sans.iter().any(|s| s == extra) {
            sans.push(extra.into());
        }
    }
    let mut params = rcgen::CertificateParams::new(sans).map_err(|e| err(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{node_name}@{}", chrono::Utc::now().timestamp()),
    );
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = {
        let now = time_now_plus_years(1);
        rcgen::date_time_ymd(now.0, now.1, now.2)
    };
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let signing_key = rcgen::KeyPair::generate().map_err(|e| err(e.to_string()))?;
    let cert = params
        .self_signed(&signing_key)
        .map_err(|e| err(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(|e| err(e.to_string()))?;
    std::fs::write(&crt, cert.pem()).map_err(|e| err(e.to_string()))?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key)
            .map_err(|e| err(e.to_string()))?;
        f.write_all(signing_key.serialize_pem().as_bytes())
            .map_err(|e| err(e.to_string()))?;
    }
    tracing::info!(cert = %crt.display(), "generated a self-signed serving certificate");
    Ok((crt, key))
}

/// (year, month, day) a number of years from now (UTC), for certificate validity.
fn time_now_plus_years(years: i32) -> (i32, u8, u8) {
    use chrono::Datelike;
    let now = chrono::Utc::now();
    let day = now.day().min(28) as u8;
    (now.year() + years, now.month() as u8, day)
}

/// What the TLS layer is built from.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Serving certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// CA bundle for client certificates (PEM); without it no client certificate is accepted.
    pub client_ca: Option<PathBuf>,
}

/// The rustls server configuration: HTTP/1.1 only (upgrades for exec/attach/port-forward need
/// it), client certificates optional but verified against the client CA.
pub fn server_config(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    build(files.client_ca.as_deref(), |b| {
        Ok(b.with_single_cert(certs, key)?)
    })
}

/// The same configuration with a serving certificate that changes at run time (from
/// `kubernetes.io/kubelet-serving` CSRs, `--rotate-server-certificates`): each handshake uses
/// the certificate the resolver holds then.
pub fn server_config_dynamic(
    serving: Arc<crate::certificate::manager::ServingCertificate>,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, TlsError> {
    build(client_ca, |b| Ok(b.with_cert_resolver(serving)))
}

type CertStep = rustls::ConfigBuilder<rustls::ServerConfig, rustls::server::WantsServerCert>;

fn build(
    client_ca: Option<&Path>,
    finish: impl FnOnce(CertStep) -> Result<rustls::ServerConfig, TlsError>,
) -> Result<rustls::ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut config = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in load_certs(ca)? {
                roots.add(c).map_err(|e| TlsError::ClientCa {
                    path: ca.into(),
                    reason: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::ClientCa {
                    path: ca.into(),
                    reason: e.to_string(),
                })?;
            finish(builder.with_client_cert_verifier(verifier))?
        }
        None => finish(builder.with_no_client_auth())?,
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_certificate_is_made_once_and_loads() {
        let dir = std::env::temp_dir().join(format!("deckhand-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (crt, key) = ensure_self_signed(&dir, "node-a", &["10.250.0.1".into()]).unwrap();
        let first = std::fs::read(&crt).unwrap();
        let (crt2, _) = ensure_self_signed(&dir, "node-a", &[]).unwrap();
        assert_eq!(
            first,
            std::fs::read(&crt2).unwrap(),
            "kept, not regenerated"
        );
        let cfg = server_config(&TlsFiles {
            cert: crt.clone(),
            key,
            client_ca: Some(crt),
        })
        .unwrap();
        assert_eq!(cfg.alpn_protocols, vec![b"http/1.1".to_vec()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_files_are_reported_with_their_path() {
        let e = server_config(&TlsFiles {
            cert: "/nonexistent/x.crt".into(),
            key: "/nonexistent/x.key".into(),
            client_ca: None,
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.crt"), "{e}");
    }
}
