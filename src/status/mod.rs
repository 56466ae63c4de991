//! Pod status: pure generation from spec + runtime state ([`generate`]) and the writer that
//! sends it to the API server ([`manager`]) — the Go kubelet's `pkg/kubelet/status`.

pub mod container;
pub mod generate;
pub mod manager;

pub use generate::{generate_pod_status, StatusInputs};
pub use manager::StatusManager;
