//! downwardAPI volume items (and the downwardAPI sources of projected volumes): pod fields,
//! labels and annotations, and container resources, written as the Go kubelet's downwardAPI
//! plugin writes them (k/k `pkg/volume/downwardapi`).

use super::writer::Payload;
use super::{validate_relative, VolumeError};
use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, Pod};
use std::collections::BTreeMap;

/// Adds the downwardAPI `items` to `payload` with file mode `mode` unless an item sets its own:
/// `fieldRef` values (labels and annotations as sorted `key="value"` lines), `resourceFieldRef`
/// values ([`crate::resource::resource_field_value`]; a missing limit is
/// `node_allocatable_milli`, milli-units).
///
/// Errors: a path that escapes the volume, a `resourceFieldRef` that cannot be read.
pub(super) fn add_downward(
    payload: &mut Payload,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    mode: i32,
    node_allocatable_milli: &BTreeMap<String, i128>,
) -> Result<(), VolumeError> {
    for it in items {
        validate_relative(&it.path)?;
        let value = if let Some(f) = &it.field_ref {
            match f.field_path.as_str() {
                "metadata.labels" => format_map(pod.metadata.labels.as_ref()),
                "metadata.annotations" => format_map(pod.metadata.annotations.as_ref()),
                p => crate::pod::envvars::field_value(pod, p, "", "").unwrap_or_default(),
            }
        } else if let Some(r) = &it.resource_field_ref {
            // the same reader as the env path, so both show the same figure (a missing limit
            // is the node's allocatable, k/k ExtractContainerResourceValue via the kubelet's
            // defaulted pod)
            crate::resource::resource_field_value(
                pod,
                r.container_name.as_deref().unwrap_or(""),
                &r.resource,
                r.divisor.as_ref().map(|d| d.0.as_str()),
                node_allocatable_milli,
            )
            .map_err(|e| VolumeError::DownwardApi {
                path: it.path.clone(),
                why: e.to_string(),
            })?
        } else {
            String::new()
        };
        payload.insert(
            it.path.clone(),
            (value.into_bytes(), it.mode.unwrap_or(mode)),
        );
    }
    Ok(())
}

/// `key="value"` lines sorted by key, as the downward API writes labels and annotations.
fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.map(|m| {
        m.iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    /// Issue 11 item 5: a downwardAPI volume item for a limit the container does not set shows
    /// the node's allocatable, as the env path does (both go through
    /// `resource::resource_field_value`).
    #[test]
    fn downward_volume_limits_without_a_limit_are_the_node_allocatable_as_in_env() {
        use k8s_openapi::api::core::v1::{
            DownwardAPIVolumeFile, PodSpec, ResourceFieldSelector, ResourceRequirements,
        };
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u".into());
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([("memory".into(), Quantity("32Mi".into()))])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        let alloc = BTreeMap::from([
            ("memory".to_string(), 4_000_000_000i128 * 1000),
            ("cpu".to_string(), 2000i128),
        ]);
        let item = |path: &str, res: &str, div: Option<&str>| DownwardAPIVolumeFile {
            path: path.into(),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("c".into()),
                resource: res.into(),
                divisor: div.map(|d| Quantity(d.into())),
            }),
            ..Default::default()
        };
        let items = [
            item("mem_limit", "limits.memory", None),
            item("cpu_limit", "limits.cpu", Some("1m")),
            item("mem_request", "requests.memory", Some("1Mi")),
            // what the API server stores for an item without a divisor
            item("mem_limit_zero_divisor", "limits.memory", Some("0")),
        ];
        let mut payload = Payload::new();
        add_downward(&mut payload, &pod, &items, 0o644, &alloc).unwrap();
        let text = |k: &str| String::from_utf8(payload[k].0.clone()).unwrap();
        assert_eq!(text("mem_limit"), "4000000000");
        assert_eq!(text("cpu_limit"), "2000");
        assert_eq!(text("mem_request"), "32");
        assert_eq!(text("mem_limit_zero_divisor"), "4000000000");
        for (path, res, div) in [
            ("mem_limit", "limits.memory", None),
            ("cpu_limit", "limits.cpu", Some("1m")),
            ("mem_request", "requests.memory", Some("1Mi")),
        ] {
            let env = crate::resource::resource_field_value(&pod, "c", res, div, &alloc).unwrap();
            assert_eq!(text(path), env, "{res}: the volume and env paths agree");
        }
        let bad = [item("x", "limits.nope", None)];
        assert!(matches!(
            add_downward(&mut Payload::new(), &pod, &bad, 0o644, &alloc),
            Err(VolumeError::DownwardApi { .. })
        ));
    }
}
