//! The CertificateSigningRequest round trip (client-go `util/certificate/csr`
//! `RequestCertificate` and `WaitForCertificate`): create the CSR (reusing an earlier request
//! of the same digested name), then watch it until it is approved and the signer has put the
//! certificate into its status, or until it is denied or failed.

use super::CertError;
use futures::TryStreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use std::time::Duration;

/// Where a watched CSR stands (pure reading of its status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CsrState {
    /// Neither approved nor denied yet.
    Pending,
    /// Approved, the signer has not issued the certificate yet.
    ApprovedNotIssued,
    /// Approved and issued: the certificate chain (PEM).
    Issued(Vec<u8>),
    /// Denied (reason, message).
    Denied(String, String),
    /// Failed (reason, message).
    Failed(String, String),
}

/// Reads a CSR's status the way `WaitForCertificate` does: Denied and Failed win, then an
/// approved request with a certificate is done.
pub fn csr_state(csr: &CertificateSigningRequest) -> CsrState {
    let status = csr.status.clone().unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    let find = |t: &str| conds.iter().find(|c| c.type_ == t && c.status != "False");
    if let Some(c) = find("Denied") {
        return CsrState::Denied(
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        );
    }
    if let Some(c) = find("Failed") {
        return CsrState::Failed(
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        );
    }
    if find("Approved").is_some() {
        return match status.certificate {
            Some(ByteString(b)) if !b.is_empty() => CsrState::Issued(b),
            _ => CsrState::ApprovedNotIssued,
        };
    }
    CsrState::Pending
}

/// Creates the CSR. `name` given: a request of that name that already exists for the same
/// request is reused (a restarted bootstrap); none: `generateName: csr-`. Returns (name, uid).
pub async fn request_certificate(
    client: &kube::Client,
    csr_pem: &str,
    name: Option<&str>,
    signer: &str,
    usages: &[&str],
) -> Result<(String, String), CertError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            generate_name: name.is_none().then(|| "csr-".to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: signer.to_string(),
            usages: Some(usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let created = match api.create(&PostParams::default(), &csr).await {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 && name.is_some() => {
            let existing = api
                .get(name.unwrap_or_default())
                .await
                .map_err(|e| CertError::Api(e.to_string()))?;
            // the name digests the public key, subject and usages (the request bytes differ on every
            // signing: ECDSA signatures are randomized), so only the signer is left to compare
            if existing.spec.signer_name != signer {
                return Err(CertError::Api(format!(
                    "a different certificate signing request {} already exists",
                    name.unwrap_or_default()
                )));
            }
            tracing::info!(
                csr = name.unwrap_or_default(),
                "certificate signing request for this node already exists, reusing"
            );
            existing
        }
        Err(e) => {
            return Err(CertError::Api(format!(
                "creating the certificate signing request: {e}"
            )))
        }
    };
    let n = created.metadata.name.clone().unwrap_or_default();
    let uid = created.metadata.uid.clone().unwrap_or_default();
    tracing::info!(csr = %n, signer, "certificate signing request created");
    Ok((n, uid))
}

/// Watches the CSR until it is issued (returns the PEM chain), denied or failed, or `timeout`
/// passes (the Go kubelet waits up to an hour when bootstrapping, 15 minutes when rotating).
pub async fn wait_for_certificate(
    client: &kube::Client,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> Result<Vec<u8>, CertError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let wait = async {
        let mut said_approved = false;
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        while let Some(ev) = stream.try_next().await.map_err(|e| {
            CertError::Api(format!("watching certificate signing request {name}: {e}"))
        })? {
            let objs = match ev {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => vec![o],
                watcher::Event::Delete(_) => {
                    return Err(CertError::Api(format!(
                        "certificate signing request {name} was deleted"
                    )))
                }
                _ => continue,
            };
            for csr in objs {
                if csr.metadata.uid.as_deref() != Some(uid) {
                    return Err(CertError::Api(format!(
                        "certificate signing request {name} was replaced by another object"
                    )));
                }
                match csr_state(&csr) {
                    CsrState::Issued(pem) => return Ok(pem),
                    CsrState::Denied(r, m) => {
                        return Err(CertError::Denied {
                            name: name.into(),
                            reason: r,
                            message: m,
                        })
                    }
                    CsrState::Failed(r, m) => {
                        return Err(CertError::Failed {
                            name: name.into(),
                            reason: r,
                            message: m,
                        })
                    }
                    CsrState::ApprovedNotIssued if !said_approved => {
                        said_approved = true;
                        tracing::info!(
                            csr = name,
                            "certificate signing request is approved, waiting to be issued"
                        );
                    }
                    _ => {}
                }
            }
        }
        Err(CertError::Api(format!(
            "watch of certificate signing request {name} ended"
        )))
    };
    tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| CertError::Timeout {
            name: name.into(),
            after: timeout,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    fn with(conds: &[(&str, &str)], cert: Option<&[u8]>) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(
                    conds
                        .iter()
                        .map(|(t, s)| CertificateSigningRequestCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            reason: Some("R".into()),
                            message: Some("M".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                certificate: cert.map(|c| ByteString(c.to_vec())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn csr_states_follow_wait_for_certificate() {
        assert_eq!(
            csr_state(&CertificateSigningRequest::default()),
            CsrState::Pending
        );
        assert_eq!(
            csr_state(&with(&[("Approved", "True")], None)),
            CsrState::ApprovedNotIssued
        );
        assert_eq!(
            csr_state(&with(&[("Approved", "True")], Some(b""))),
            CsrState::ApprovedNotIssued
        );
        assert_eq!(
            csr_state(&with(&[("Approved", "True")], Some(b"PEM"))),
            CsrState::Issued(b"PEM".to_vec())
        );
        assert_eq!(
            csr_state(&with(
                &[("Approved", "True"), ("Denied", "True")],
                Some(b"PEM")
            )),
            CsrState::Denied("R".into(), "M".into())
        );
        assert_eq!(
            csr_state(&with(&[("Failed", "True")], None)),
            CsrState::Failed("R".into(), "M".into())
        );
        assert_eq!(
            csr_state(&with(&[("Approved", "False")], Some(b"PEM"))),
            CsrState::Pending
        );
    }
}
