//! The status manager: the single path by which pod statuses reach the API server
//! (k/k `pkg/kubelet/status/status_manager.go`). It skips statuses equal to the last one
//! written, sends a JSON merge patch computed against the API server's copy (so a field that
//! went away, such as `state.waiting` when a container starts, is removed), and carries the pod
//! UID in the patch so a pod deleted and re-created under the same name is never written to.

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Mutex;

/// Errors writing a pod status.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The PATCH of `pods/<name>/status` failed.
    #[error("patching status of pod {namespace}/{name} ({uid}): {source}")]
    Patch {
        /// Pod namespace.
        namespace: String,
        /// Pod name.
        name: String,
        /// Pod UID.
        uid: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Writes pod statuses; one per kubelet, shared by all pod workers (keyed by pod UID).
pub struct StatusManager {
    /// None in standalone mode: statuses are only kept here.
    client: Option<kube::Client>,
    /// Keyed by the UID written to (a static pod's mirror pod UID).
    last_written: Mutex<HashMap<String, PodStatus>>,
    mirrors: crate::source::mux::MirrorUids,
}

/// A JSON merge patch (RFC 7386) that turns `old` into `new`: changed keys are set, removed keys
/// are set to null, arrays are replaced whole. `None` when nothing differs.
pub fn merge_patch_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_patch_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        if !nv.is_null() {
                            out.insert(k.clone(), nv.clone());
                        }
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (o, n) if o == n => None,
        (_, n) => Some(n.clone()),
    }
}

impl StatusManager {
    /// A status manager writing through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client: Some(client),
            last_written: Mutex::new(HashMap::new()),
            mirrors: Default::default(),
        }
    }

    /// A status manager with no API server (standalone mode, as the Go status manager with a
    /// nil client: "Kubernetes client is nil, not starting status manager"): statuses are kept
    /// locally, keyed by the pod's own UID, and never sent.
    pub fn standalone() -> Self {
        Self {
            client: None,
            last_written: Mutex::new(HashMap::new()),
            mirrors: Default::default(),
        }
    }

    /// The static pod UID → mirror pod map this manager reads (filled by the source merge,
    /// [`crate::source::mux`]). A static pod's status is written on its mirror pod, as the Go
    /// status manager's `translatePodUID` does; without a mirror pod yet it is not written.
    pub fn mirror_uids(&self) -> crate::source::mux::MirrorUids {
        self.mirrors.clone()
    }

    /// Sends `status` for `pod` unless it equals the last status written for this UID.
    /// The patch is computed against the last written status, or the pod's status as the
    /// API server last showed it. Returns whether a write happened.
    ///
    /// Errors: [`StatusError::Patch`]; the caller retries on its next sync.
    pub async fn set_pod_status(&self, pod: &Pod, status: &PodStatus) -> Result<bool, StatusError> {
        let Some(client) = &self.client else {
            self.last_written
                .lock()
                .unwrap()
                .insert(crate::pod::uid(pod).to_string(), status.clone());
            return Ok(false);
        };
        let (uid, api_status) = if crate::source::file::is_static(pod) {
            match self.mirrors.lock().unwrap().get(crate::pod::uid(pod)) {
                Some((mirror_uid, mirror_status)) => (mirror_uid.clone(), mirror_status.clone()),
                None => return Ok(false),
            }
        } else {
            (
                crate::pod::uid(pod).to_string(),
                pod.status.clone().unwrap_or_default(),
            )
        };
        let base = {
            let cache = self.last_written.lock().unwrap();
            match cache.get(&uid) {
                Some(last) if last == status => return Ok(false),
                Some(last) => last.clone(),
                None => api_status,
            }
        };
        let old = serde_json::to_value(&base).unwrap_or(Value::Null);
        let new = serde_json::to_value(status).unwrap_or(Value::Null);
        let Some(diff) = merge_patch_diff(&old, &new) else {
            self.last_written
                .lock()
                .unwrap()
                .insert(uid, status.clone());
            return Ok(false);
        };
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::json!({ "metadata": { "uid": uid }, "status": diff });
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| {
                // Forget the cache so the next attempt diffs against the API server's copy.
                self.last_written.lock().unwrap().remove(&uid);
                StatusError::Patch {
                    namespace: ns.clone(),
                    name: name.clone(),
                    uid: uid.clone(),
                    source,
                }
            })?;
        self.last_written
            .lock()
            .unwrap()
            .insert(uid, status.clone());
        Ok(true)
    }

    /// The last status written for `uid`, if any.
    pub fn last_written(&self, uid: &str) -> Option<PodStatus> {
        self.last_written.lock().unwrap().get(uid).cloned()
    }

    /// Drops what is cached for a pod that is gone.
    pub fn forget(&self, uid: &str) {
        self.last_written.lock().unwrap().remove(uid);
        if let Some((mirror_uid, _)) = self.mirrors.lock().unwrap().get(uid) {
            self.last_written.lock().unwrap().remove(mirror_uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_removes_fields_that_went_away() {
        let old = json!({"phase": "Pending", "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}}]});
        let new = json!({"phase": "Running", "containerStatuses": [{"name": "a", "state": {"running": {"startedAt": "t"}}}]});
        let d = merge_patch_diff(&old, &new).unwrap();
        assert_eq!(d["phase"], "Running");
        assert_eq!(
            d["containerStatuses"][0]["state"]["running"]["startedAt"],
            "t"
        );
        assert!(
            d["containerStatuses"][0]["state"].get("waiting").is_none(),
            "arrays are replaced whole"
        );
        let old = json!({"a": {"b": 1, "c": 2}});
        let new = json!({"a": {"b": 1}});
        assert_eq!(
            merge_patch_diff(&old, &new).unwrap(),
            json!({"a": {"c": null}})
        );
        assert_eq!(merge_patch_diff(&new, &new), None);
    }
}
