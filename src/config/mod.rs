//! deckhand's configuration, as the Go kubelet's (k/k `cmd/kubelet/app`): one typed
//! [`KubeletConfiguration`] (`kubelet.config.k8s.io/v1beta1`, every field declared once with its
//! fate and Go default, [`kubelet_configuration`]), read from the `--config` file ([`file`]),
//! with the command-line [`Flags`] as an overlay of options on it ([`flags`]), merged in one pure
//! function ([`merge()`]): a flag given on the command line wins over the file, and the file wins
//! over the defaults. [`load`] does it for start-up.
//!
//! | file | owns |
//! |---|---|
//! | [`kubelet_configuration`] | the struct, its fields' fates and Go defaults, validation |
//! | [`fields`] | the macro and codecs behind it (fates, Go zero values, decoding) |
//! | [`file`] | reading a file, its errors and warnings |
//! | [`flags`] | the clap flags and their overlay |
//! | [`go_flags`] | every other Go kubelet flag: the field it sets, or why it is ignored |
//! | `merge` | [`merge()`], [`load`] |
//! | [`duration`] | Go durations |

pub mod duration;
pub mod fields;
pub mod file;
pub mod flags;
pub mod go_flags;
pub mod kubeconfig;
pub mod kubelet_configuration;
mod merge;

pub use duration::parse_go_duration;
pub use flags::{Command, Flags};
pub use kubelet_configuration::{
    default_eviction_hard, parse_reserved, CrashLoopBackOffConfig, KubeletAnonymousAuthentication,
    KubeletAuthentication, KubeletAuthorization, KubeletConfiguration,
    KubeletWebhookAuthentication, KubeletWebhookAuthorization, KubeletX509Authentication,
    LoggingConfiguration, MemorySwapConfiguration, UserNamespaces,
};
pub use merge::{from_matches, load, merge, merge_layers, Loaded};

/// Errors of [`load`] and [`merge()`] (malformed flags are clap's: it exits with its usage).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file is unusable, or sets a refused field.
    #[error(transparent)]
    File(#[from] file::ConfigFileError),
    /// A flag or file value deckhand cannot honour.
    #[error("{0}")]
    Unsupported(String),
    /// A value out of its range or malformed (the Go kubelet's validation message).
    #[error("{0}")]
    Invalid(String),
}

/// The machine's hostname.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}
