//! The error of every CRI call ([`CriError`]): each `tonic::Status` is mapped to one in a single
//! place ([`CriError::from_status`]), with the texts the Go kubelet shows for it (grpc-go's
//! `rpc error: code = X desc = ...`).

/// Errors from CRI calls. `op` names the CRI method; `id` the sandbox, container or image.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    /// The endpoint is not a `unix://` path, or the socket cannot be reached.
    #[error("cannot connect to the container runtime at {endpoint}: {reason}")]
    Connect {
        /// The endpoint as configured (`unix:///run/containerd/containerd.sock`).
        endpoint: String,
        /// Why the connection failed.
        reason: String,
    },
    /// The runtime has no such object (gRPC NOT_FOUND).
    #[error("{op} {id}: not found: {message}")]
    NotFound {
        /// CRI method.
        op: &'static str,
        /// Object id or name.
        id: String,
        /// The runtime's message.
        message: String,
    },
    /// The call did not finish in time (gRPC DEADLINE_EXCEEDED).
    #[error("{op} {id}: deadline exceeded: {message}")]
    DeadlineExceeded {
        /// CRI method.
        op: &'static str,
        /// Object id or name.
        id: String,
        /// The runtime's message.
        message: String,
    },
    /// Any other gRPC error. `message` is formatted as the Go kubelet shows runtime errors:
    /// `rpc error: code = <Code> desc = <text>`.
    #[error("{message}")]
    Rpc {
        /// CRI method.
        op: &'static str,
        /// Object id or name.
        id: String,
        /// gRPC status code.
        code: tonic::Code,
        /// `rpc error: code = ... desc = ...`.
        message: String,
    },
}

impl CriError {
    /// Maps a gRPC status from CRI method `op` on object `id` to a typed error.
    pub fn from_status(op: &'static str, id: impl Into<String>, s: tonic::Status) -> Self {
        let id = id.into();
        match s.code() {
            tonic::Code::NotFound => CriError::NotFound {
                op,
                id,
                message: s.message().to_string(),
            },
            tonic::Code::DeadlineExceeded => CriError::DeadlineExceeded {
                op,
                id,
                message: s.message().to_string(),
            },
            code => CriError::Rpc {
                op,
                id,
                code,
                message: format!(
                    "rpc error: code = {} desc = {}",
                    go_code_name(code),
                    s.message()
                ),
            },
        }
    }

    /// True when the call failed because the runtime could not be reached at all (its socket is
    /// missing or refuses, or the connection broke): nothing about the object is known.
    pub fn is_unreachable(&self) -> bool {
        match self {
            CriError::Connect { .. } => true,
            CriError::Rpc { code, message, .. } => {
                super::reachability::status_is_unreachable(*code, message)
            }
            _ => false,
        }
    }

    /// True when the runtime does not implement the call (gRPC UNIMPLEMENTED), e.g.
    /// `GetContainerEvents` on containerd 1.6.
    pub fn is_unimplemented(&self) -> bool {
        matches!(
            self,
            CriError::Rpc {
                code: tonic::Code::Unimplemented,
                ..
            }
        )
    }

    /// True when the runtime reported that the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CriError::NotFound { .. })
    }

    /// The runtime's own text (the gRPC status message, `desc` in Go's rendering), which the Go
    /// kubelet puts in `Error: <desc>` events and in CreateContainerError/RunContainerError.
    pub fn desc(&self) -> String {
        match self {
            CriError::NotFound { message, .. } | CriError::DeadlineExceeded { message, .. } => {
                message.clone()
            }
            CriError::Rpc { message, .. } => message
                .split_once(" desc = ")
                .map(|(_, d)| d.to_string())
                .unwrap_or_else(|| message.clone()),
            CriError::Connect { .. } => self.to_string(),
        }
    }

    /// The error as the Go kubelet shows a runtime error in statuses and events
    /// (`rpc error: code = NotFound desc = ...`).
    pub fn user_message(&self) -> String {
        match self {
            CriError::NotFound { message, .. } => {
                format!("rpc error: code = NotFound desc = {message}")
            }
            CriError::DeadlineExceeded { message, .. } => {
                format!("rpc error: code = DeadlineExceeded desc = {message}")
            }
            CriError::Rpc { message, .. } => message.clone(),
            CriError::Connect { .. } => self.to_string(),
        }
    }
}

/// grpc-go's names for status codes (`codes.Code.String()`), used in `rpc error: code = X` texts.
fn go_code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Result alias for CRI calls.
pub type Result<T> = std::result::Result<T, CriError>;
