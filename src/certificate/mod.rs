//! The node's certificates: TLS bootstrap of the client certificate from a bootstrap
//! kubeconfig, client certificate rotation with a kube client that picks up the new
//! certificate without a restart, and the kubelet-serving certificate through CSRs (k/k
//! `pkg/kubelet/certificate`, `pkg/kubelet/certificate/bootstrap`, client-go
//! `util/certificate`). Keys and CSRs are made with rcgen (ECDSA P-256), certificates read with
//! x509-parser.
//!
//! Pure decisions (is a certificate usable, when is it rotated, does it match the template, what
//! a CSR's status means) live in [`validity`], [`csr`] and [`request::csr_state`], with tests;
//! [`manager`] does the I/O.

pub mod csr;
pub mod manager;
pub mod request;
pub mod store;
pub mod validity;

use std::path::PathBuf;
use std::time::Duration;

/// Certificate errors.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A key or CSR could not be made.
    #[error("generating a key or certificate request: {0}")]
    Crypto(String),
    /// A certificate, key or kubeconfig could not be parsed.
    #[error("parsing a certificate: {0}")]
    Parse(String),
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A kubeconfig could not be loaded or used.
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// An API call failed.
    #[error("{0}")]
    Api(String),
    /// The CSR was denied.
    #[error("certificate signing request {name} is denied, reason: {reason}, message: {message}")]
    Denied {
        /// The CSR.
        name: String,
        /// Its Denied condition's reason.
        reason: String,
        /// Its Denied condition's message.
        message: String,
    },
    /// The signer failed the CSR.
    #[error("certificate signing request {name} failed, reason: {reason}, message: {message}")]
    Failed {
        /// The CSR.
        name: String,
        /// Its Failed condition's reason.
        reason: String,
        /// Its Failed condition's message.
        message: String,
    },
    /// No certificate was issued in time.
    #[error(
        "timed out after {after:?} waiting for certificate signing request {name} to be issued"
    )]
    Timeout {
        /// The CSR.
        name: String,
        /// How long was waited.
        after: Duration,
    },
}
