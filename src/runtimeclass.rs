//! RuntimeClass: which runtime handler a pod's sandbox is made with (k/k
//! `pkg/kubelet/runtimeclass` `Manager.LookupRuntimeHandler`; docs:
//! concepts/containers/runtime-class). A pod without `runtimeClassName` gets the runtime's
//! default handler (the empty name); a pod with one gets the RuntimeClass's `handler`, passed to
//! CRI `RunPodSandbox`. A RuntimeClass that does not exist fails the sandbox with the Go
//! kubelet's `FailedCreatePodSandBox` message, and the pod worker retries at its next sync.
//!
//! The Go kubelet reads RuntimeClasses from an informer's cache; deckhand asks the API server
//! when it makes a sandbox for a pod that names one (rare, and never on the path of pods that do
//! not), so there is no watch to keep for them.

use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;

/// Why a pod's runtime handler could not be found. The texts are the Go kubelet's, which
/// `kubectl describe pod` shows in the `FailedCreatePodSandBox` event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeClassError {
    /// No RuntimeClass of that name (client-go's lister NotFound).
    #[error("runtimeclass.node.k8s.io {0:?} not found")]
    NotFound(String),
    /// The API server could not be asked.
    #[error("failed to lookup RuntimeClass {name}: {message}")]
    Lookup {
        /// The RuntimeClass name.
        name: String,
        /// What went wrong.
        message: String,
    },
}

/// Looks up runtime handlers by RuntimeClass name. Cheap to clone.
#[derive(Clone)]
pub struct RuntimeClassManager {
    /// None in standalone mode, where the Go kubelet has no RuntimeClass manager and every pod
    /// gets the default handler.
    client: Option<kube::Client>,
}

impl RuntimeClassManager {
    /// Reads RuntimeClasses through `client` (a node may read them: the `system:node` role).
    pub fn new(client: kube::Client) -> Self {
        Self {
            client: Some(client),
        }
    }

    /// No API server: every pod gets the runtime's default handler.
    pub fn standalone() -> Self {
        Self { client: None }
    }

    /// The runtime handler for `runtime_class_name` (`spec.runtimeClassName`): empty for none.
    ///
    /// Errors: [`RuntimeClassError`].
    pub async fn lookup_runtime_handler(
        &self,
        runtime_class_name: Option<&str>,
    ) -> Result<String, RuntimeClassError> {
        let (Some(name), Some(client)) =
            (runtime_class_name.filter(|n| !n.is_empty()), &self.client)
        else {
            return Ok(String::new());
        };
        let api: Api<RuntimeClass> = Api::all(client.clone());
        handler_of(name, api.get_opt(name).await.map_err(|e| e.to_string()))
    }
}

/// The handler of RuntimeClass `name` from the API server's answer `got` (`Ok(None)`: not
/// found).
///
/// Errors: [`RuntimeClassError::NotFound`], [`RuntimeClassError::Lookup`].
pub fn handler_of(
    name: &str,
    got: Result<Option<RuntimeClass>, String>,
) -> Result<String, RuntimeClassError> {
    match got {
        Ok(Some(rc)) => Ok(rc.handler),
        Ok(None) => Err(RuntimeClassError::NotFound(name.to_string())),
        Err(message) => Err(RuntimeClassError::Lookup {
            name: name.to_string(),
            message,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handler_comes_from_the_runtime_class_or_the_error_reads_as_the_go_kubelets() {
        let rc = |handler: &str| RuntimeClass {
            handler: handler.into(),
            ..Default::default()
        };
        type Case = (
            &'static str,
            Result<Option<RuntimeClass>, String>,
            Result<&'static str, &'static str>,
        );
        let cases: Vec<Case> = vec![
            ("found", Ok(Some(rc("runc"))), Ok("runc")),
            (
                "not found",
                Ok(None),
                Err(r#"runtimeclass.node.k8s.io "gvisor" not found"#),
            ),
            (
                "API server unreachable",
                Err("connection refused".into()),
                Err("failed to lookup RuntimeClass gvisor: connection refused"),
            ),
        ];
        for (name, got, want) in cases {
            let out = handler_of("gvisor", got).map_err(|e| e.to_string());
            assert_eq!(out.as_deref().map_err(|e| e.as_str()), want, "{name}");
        }
    }

    #[tokio::test]
    async fn no_runtime_class_or_no_api_server_is_the_default_handler() {
        let m = RuntimeClassManager::standalone();
        assert_eq!(m.lookup_runtime_handler(None).await.unwrap(), "");
        assert_eq!(m.lookup_runtime_handler(Some("gvisor")).await.unwrap(), "");
    }
}
