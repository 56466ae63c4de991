//! Standalone mode (no `--kubeconfig`, no `--bootstrap-kubeconfig`): deckhand runs the static
//! pods of `staticPodPath` with no API server, as the Go kubelet does when it has no kube
//! client (k/k `cmd/kubelet/app/server.go` "standalone mode, no API client"; `kubelet.go`
//! skips node registration, the node lease and the status manager's sync, `mirror_client`
//! is nil, events only go to the log).
//!
//! The pieces that talk to the API server are switched off where they are built (the binary);
//! what remains (configMap/secret lookups for env and volumes, service links, pull secrets)
//! gets [`offline_client`], a client that refuses every request at once with
//! [`NO_API_SERVER`], so a static pod that needs the API fails with that message
//! (`CreateContainerConfigError`) instead of hanging.

/// The error every API request gets in standalone mode.
pub const NO_API_SERVER: &str =
    "no API server: deckhand runs standalone (no --kubeconfig and no --bootstrap-kubeconfig)";

/// A kube client that answers every request with the error [`NO_API_SERVER`], without any
/// network traffic. Must be made inside a tokio runtime (kube's request buffer spawns a task).
pub fn offline_client() -> kube::Client {
    let svc = tower::service_fn(|_req: http::Request<kube::client::Body>| async move {
        Err::<http::Response<http_body_util::Empty<bytes::Bytes>>, tower::BoxError>(
            NO_API_SERVER.into(),
        )
    });
    kube::Client::new(svc, "default")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;

    #[tokio::test]
    async fn the_offline_client_refuses_every_request_with_its_reason() {
        let api: Api<ConfigMap> = Api::namespaced(offline_client(), "default");
        let e = api.get("x").await.unwrap_err();
        assert!(e.to_string().contains("runs standalone"), "{e}");
    }
}
