//! Mirror pods: the API server's read-only copy of a static pod, so `kubectl get pods` shows it
//! and its status (k/k `pkg/kubelet/pod/mirror_client.go`). A mirror pod carries
//! `kubernetes.io/config.mirror: <static pod UID>` and is owned by the Node (controller
//! reference), which is what the NodeRestriction admission plugin lets a node create.

use crate::source::file::CONFIG_MIRROR_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

/// The mirror pod to create for `static_pod` (pure): a copy with the mirror annotation, an
/// owner reference to the Node, and no UID, resource version or status (the API server sets
/// them).
pub fn mirror_pod_for(static_pod: &Pod, node_name: &str, node_uid: &str) -> Pod {
    let mut m = static_pod.clone();
    let hash = crate::pod::uid(static_pod).to_string();
    m.metadata.uid = None;
    m.metadata.resource_version = None;
    m.metadata.creation_timestamp = None;
    m.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
    m.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.into(),
        uid: node_uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    m.status = None;
    m
}

/// Creates the mirror pod of `static_pod`. An existing mirror pod with the same hash is success.
///
/// Errors: the API error.
pub async fn create(
    client: &kube::Client,
    static_pod: &Pod,
    node_name: &str,
    node_uid: &str,
) -> Result<(), kube::Error> {
    let m = mirror_pod_for(static_pod, node_name, node_uid);
    let ns = m.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    match api.create(&PostParams::default(), &m).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes a mirror pod right away (grace period 0), only if it still has `uid`.
///
/// Errors: the API error (not found and UID conflicts are success: it is gone already).
pub async fn delete(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<(), kube::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_pod_has_annotation_owner_and_no_uid() {
        let s = crate::source::file::pod_from_manifest(
            b"apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec: {containers: [{name: c, image: busybox}]}\n",
            std::path::Path::new("/m/web.yaml"),
            "node-a",
        )
        .unwrap();
        let m = mirror_pod_for(&s, "node-a", "node-uid-1");
        assert_eq!(m.metadata.uid, None);
        assert_eq!(m.status, None);
        assert_eq!(
            crate::source::file::annotation(&m, CONFIG_MIRROR_ANNOTATION),
            Some(crate::pod::uid(&s))
        );
        let o = &m.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                o.kind.as_str(),
                o.name.as_str(),
                o.uid.as_str(),
                o.controller
            ),
            ("Node", "node-a", "node-uid-1", Some(true))
        );
        assert_eq!(m.metadata.name, s.metadata.name);
    }
}
