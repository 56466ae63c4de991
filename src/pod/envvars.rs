//! A container's environment, as the Go kubelet builds it (k/k `pkg/kubelet/kubelet_pods.go`
//! `makeEnvironmentVariables`, `getServiceEnvVarMap`; `pkg/kubelet/envvars`).
//!
//! Pure: the configMaps, secrets and services it needs are fetched by the caller
//! ([`referenced_objects`] says which) and passed in as [`EnvSources`]. Also owns `$(VAR)`
//! expansion ([`expand`], used for command, args and `subPathExpr` too) and the `fieldRef`
//! values ([`field_value`], shared with downwardAPI volumes); `resourceFieldRef` values come from
//! [`crate::resource::resource_field_value`].
//!
//! Order of resolution (the Go kubelet's):
//! 1. `envFrom` sources, in order, each key optionally prefixed (later sources win);
//! 2. `env` entries, in order: a plain `value` has its `$(VAR)` references expanded against the
//!    variables so far and the service variables; a `valueFrom` is resolved (fieldRef,
//!    resourceFieldRef, configMapKeyRef, secretKeyRef); an `env` entry replaces an `envFrom` key
//!    of the same name;
//! 3. the service variables not already set.

use k8s_openapi::api::core::v1::{Container, Pod, Service};
use std::collections::{BTreeMap, BTreeSet};

/// Errors building a container's environment. The message is what the pod shows
/// (`CreateContainerConfigError`, worded as the Go kubelet words it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvError(pub String);

/// What the environment of a container is built from, besides the pod itself.
#[derive(Debug, Clone, Default)]
pub struct EnvSources {
    /// ConfigMaps of the pod's namespace by name: `Some(data)` when found, `None` when the API
    /// server says it does not exist.
    pub config_maps: BTreeMap<String, Option<BTreeMap<String, String>>>,
    /// Secrets of the pod's namespace by name (values decoded), `None` when not found.
    pub secrets: BTreeMap<String, Option<BTreeMap<String, Vec<u8>>>>,
    /// Service variables for this pod ([`service_env`]).
    pub services: BTreeMap<String, String>,
    /// The node's allocatable resources in milli-units (`cpu` in millicores, `memory` in
    /// milli-bytes), used for `resourceFieldRef: limits.*` of a container without that limit
    /// (the Go kubelet's `defaultPodLimitsForDownwardAPI`).
    pub node_allocatable_milli: BTreeMap<String, i128>,
}

/// The configMaps and secrets a container's `env`/`envFrom` refer to: `(config_maps, secrets)`.
pub fn referenced_objects(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for f in c.env_from.iter().flatten() {
        if let Some(r) = &f.config_map_ref {
            cms.insert(r.name.clone());
        }
        if let Some(r) = &f.secret_ref {
            secrets.insert(r.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(from) = &e.value_from {
            if let Some(r) = &from.config_map_key_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &from.secret_key_ref {
                secrets.insert(r.name.clone());
            }
        }
    }
    (cms, secrets)
}

/// Upper-cases and replaces `-` by `_` (k/k `envvars.makeEnvVariableName`).
fn env_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

/// The service variables a pod in namespace `ns` sees (k/k `getServiceEnvVarMap` +
/// `envvars.FromServices`): the `kubernetes` service of `default` always, the services of `ns`
/// when `enableServiceLinks` is on. Services without a cluster IP (headless, `None`) are skipped.
///
/// For a service `my-svc` at 10.96.0.5 with port `http` 80/TCP: `MY_SVC_SERVICE_HOST=10.96.0.5`,
/// `MY_SVC_SERVICE_PORT=80`, `MY_SVC_SERVICE_PORT_HTTP=80`, `MY_SVC_PORT=tcp://10.96.0.5:80`,
/// `MY_SVC_PORT_80_TCP=tcp://10.96.0.5:80`, `MY_SVC_PORT_80_TCP_PROTO=tcp`,
/// `MY_SVC_PORT_80_TCP_PORT=80`, `MY_SVC_PORT_80_TCP_ADDR=10.96.0.5`.
pub fn service_env<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    ns: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for s in services {
        let Some(spec) = s.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.as_deref().unwrap_or("");
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let sns = s.metadata.namespace.as_deref().unwrap_or("");
        if sns == "default" && name == "kubernetes" {
            chosen.entry(name).or_insert(s);
        } else if sns == ns && enable_service_links {
            chosen.insert(name, s);
        }
    }
    let mut out = BTreeMap::new();
    for (name, s) in chosen {
        let spec = s.spec.as_ref().expect("checked above");
        let ports = spec.ports.clone().unwrap_or_default();
        let Some(first) = ports.first() else {
            continue;
        };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let prefix = env_name(&name);
        out.insert(format!("{prefix}_SERVICE_HOST"), ip.clone());
        out.insert(format!("{prefix}_SERVICE_PORT"), first.port.to_string());
        for p in &ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.insert(
                    format!("{prefix}_SERVICE_PORT_{}", env_name(pn)),
                    p.port.to_string(),
                );
            }
        }
        let host_port = |port: i32| {
            if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            }
        };
        for (i, p) in ports.iter().enumerate() {
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let lower = proto.to_lowercase();
            let url = format!("{lower}://{}", host_port(p.port));
            if i == 0 {
                out.insert(format!("{prefix}_PORT"), url.clone());
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.insert(format!("{pp}_PROTO"), lower.clone());
            out.insert(format!("{pp}_PORT"), p.port.to_string());
            out.insert(format!("{pp}_ADDR"), ip.clone());
            out.insert(pp, url);
        }
    }
    out
}

/// An ordered map: insertion order kept, a re-insert replaces the value in place.
#[derive(Default)]
struct OrderedEnv(Vec<(String, String)>);

impl OrderedEnv {
    fn set(&mut self, k: String, v: String) {
        match self.0.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 = v,
            None => self.0.push((k, v)),
        }
    }
    fn contains(&self, k: &str) -> bool {
        self.0.iter().any(|(n, _)| n == k)
    }
}

/// Expands `$(VAR)` references in `s` from `env` (k/k `third_party/forked/golang/expansion`):
/// `$$` escapes to `$`, unknown references are left as written.
pub fn expand(s: &str, env: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' && i + 1 < chars.len() {
            match chars[i + 1] {
                '$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                '(' => {
                    if let Some(end) = chars[i + 2..].iter().position(|c| *c == ')') {
                        let name: String = chars[i + 2..i + 2 + end].iter().collect();
                        match lookup(&name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&format!("$({name})")),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The downward-API field values the Go kubelet supports for `fieldRef` in env
/// (k/k `pkg/kubelet/kubelet_pods.go` `podFieldSelectorRuntimeValue`).
pub fn field_value(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Option<String> {
    let spec = pod.spec.as_ref();
    Some(match path {
        "metadata.name" => pod.metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => pod.metadata.namespace.clone().unwrap_or_default(),
        "metadata.uid" => super::uid(pod).to_string(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        p => {
            let key = p
                .strip_prefix("metadata.labels['")
                .or_else(|| p.strip_prefix("metadata.annotations['"))?;
            let key = key.strip_suffix("']")?;
            let map = if p.starts_with("metadata.labels") {
                &pod.metadata.labels
            } else {
                &pod.metadata.annotations
            };
            map.as_ref()
                .and_then(|m| m.get(key))
                .cloned()
                .unwrap_or_default()
        }
    })
}

fn not_found(kind: &str, name: &str) -> EnvError {
    // The Go kubelet's watch-based configMap/secret managers answer NotFound for the
    // singular group resource: `configmap "x" not found`, `secret "x" not found`.
    EnvError(format!("{kind} {name:?} not found"))
}

/// Builds the environment of container `c` of `pod` (see the module doc for the order).
///
/// Errors ([`EnvError`], shown as `CreateContainerConfigError` with this message, as the
/// Go kubelet): a required configMap or secret that does not exist (`configmap "x" not found`),
/// a required key missing (`couldn't find key k in ConfigMap ns/x`), a configMap or secret the
/// caller could not fetch, an unsupported `fieldPath`.
pub fn make_environment(
    pod: &Pod,
    c: &Container,
    pod_ip: &str,
    host_ip: &str,
    src: &EnvSources,
) -> Result<Vec<(String, String)>, EnvError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let mut env = OrderedEnv::default();
    let cm = |name: &str| -> Result<Option<&BTreeMap<String, String>>, EnvError> {
        match src.config_maps.get(name) {
            Some(Some(d)) => Ok(Some(d)),
            Some(None) => Ok(None),
            None => Err(EnvError(format!("couldn't get configMap {ns}/{name}"))),
        }
    };
    let secret = |name: &str| -> Result<Option<&BTreeMap<String, Vec<u8>>>, EnvError> {
        match src.secrets.get(name) {
            Some(Some(d)) => Ok(Some(d)),
            Some(None) => Ok(None),
            None => Err(EnvError(format!("couldn't get secret {ns}/{name}"))),
        }
    };

    for f in c.env_from.iter().flatten() {
        let prefix = f.prefix.clone().unwrap_or_default();
        if let Some(r) = &f.config_map_ref {
            match cm(&r.name)? {
                Some(data) => {
                    for (k, v) in data {
                        env.set(format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => return Err(not_found("configmap", &r.name)),
            }
        } else if let Some(r) = &f.secret_ref {
            match secret(&r.name)? {
                Some(data) => {
                    for (k, v) in data {
                        env.set(
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(v).into_owned(),
                        );
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => return Err(not_found("secret", &r.name)),
            }
        }
    }

    for e in c.env.iter().flatten() {
        let plain = e.value.clone().unwrap_or_default();
        let value = if !plain.is_empty() {
            // `$(VAR)` refers to the variables so far, then to the service variables.
            let mut scope: Vec<(String, String)> = src
                .services
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            scope.extend(env.0.iter().cloned());
            expand(&plain, &scope)
        } else if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field_value(pod, &f.field_path, pod_ip, host_ip).ok_or_else(|| {
                    EnvError(format!(
                        "unsupported fieldPath {:?} in environment variable {}",
                        f.field_path, e.name
                    ))
                })?
            } else if let Some(r) = &from.resource_field_ref {
                let container = r
                    .container_name
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| c.name.clone());
                crate::resource::resource_field_value(
                    pod,
                    &container,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    &src.node_allocatable_milli,
                )
                .map_err(|why| EnvError(format!("environment variable {}: {why}", e.name)))?
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional.unwrap_or(false);
                match cm(&r.name)? {
                    Some(data) => match data.get(&r.key) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError(format!(
                                "couldn't find key {} in ConfigMap {ns}/{}",
                                r.key, r.name
                            )))
                        }
                    },
                    None if optional => continue,
                    None => return Err(not_found("configmap", &r.name)),
                }
            } else if let Some(r) = &from.secret_key_ref {
                let optional = r.optional.unwrap_or(false);
                match secret(&r.name)? {
                    Some(data) => match data.get(&r.key) {
                        Some(v) => String::from_utf8_lossy(v).into_owned(),
                        None if optional => continue,
                        None => {
                            return Err(EnvError(format!(
                                "couldn't find key {} in Secret {ns}/{}",
                                r.key, r.name
                            )))
                        }
                    },
                    None if optional => continue,
                    None => return Err(not_found("secret", &r.name)),
                }
            } else {
                return Err(EnvError(format!(
                    "environment variable {}: this valueFrom source is not supported by deckhand",
                    e.name
                )));
            }
        } else {
            String::new()
        };
        env.set(e.name.clone(), value);
    }

    for (k, v) in &src.services {
        if !env.contains(k) {
            env.0.push((k.clone(), v.clone()));
        }
    }
    Ok(env.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, PodSpec,
        ResourceFieldSelector, ResourceRequirements, SecretKeySelector, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(Option<&str>, i32, Option<&str>)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p, proto)| ServicePort {
                            name: n.map(String::from),
                            port: *p,
                            protocol: proto.map(String::from),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let env = vec![("A".to_string(), "x".to_string())];
        assert_eq!(expand("$(A)-$(B)-$$(A)-$$", &env), "x-$(B)-$(A)-$");
        assert_eq!(expand("$(A", &env), "$(A");
    }

    #[test]
    fn service_variables_follow_envvars_from_services() {
        let svcs = vec![
            svc(
                "default",
                "kubernetes",
                "10.96.0.1",
                &[(Some("https"), 443, Some("TCP"))],
            ),
            svc(
                "app",
                "my-svc",
                "10.96.0.5",
                &[(Some("http"), 80, None), (None, 53, Some("UDP"))],
            ),
            svc("app", "headless", "None", &[(None, 80, None)]),
            svc("other", "elsewhere", "10.96.0.9", &[(None, 80, None)]),
        ];
        let m = service_env(&svcs, "app", true);
        assert_eq!(m["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(m["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(m["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(m["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        assert_eq!(m["KUBERNETES_PORT_443_TCP_ADDR"], "10.96.0.1");
        assert_eq!(m["MY_SVC_SERVICE_HOST"], "10.96.0.5");
        assert_eq!(m["MY_SVC_SERVICE_PORT"], "80");
        assert_eq!(m["MY_SVC_SERVICE_PORT_HTTP"], "80");
        assert_eq!(m["MY_SVC_PORT"], "tcp://10.96.0.5:80");
        assert_eq!(m["MY_SVC_PORT_53_UDP"], "udp://10.96.0.5:53");
        assert_eq!(m["MY_SVC_PORT_53_UDP_PROTO"], "udp");
        assert_eq!(m["MY_SVC_PORT_53_UDP_PORT"], "53");
        assert!(!m.keys().any(|k| k.starts_with("HEADLESS")));
        assert!(!m.keys().any(|k| k.starts_with("ELSEWHERE")));
        // enableServiceLinks: false keeps only the master service
        let m = service_env(&svcs, "app", false);
        assert!(m.contains_key("KUBERNETES_SERVICE_HOST"));
        assert!(!m.keys().any(|k| k.starts_with("MY_SVC")));
    }

    fn pod(c: Container) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns1".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![c],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn from(name: &str, src: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(src),
        }
    }

    #[test]
    fn env_from_prefix_env_override_and_expansion() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                prefix: Some("CFG_".into()),
                secret_ref: None,
            }]),
            env: Some(vec![
                var("CFG_A", "overridden"),
                var("B", "$(CFG_B)-$(KUBERNETES_SERVICE_HOST)-$(NOPE)-$$(CFG_B)"),
                from(
                    "KEY",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "s".into(),
                            key: "token".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "MISSING_OPT",
                    EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cfg".into(),
                            key: "zzz".into(),
                            optional: Some(true),
                        }),
                        ..Default::default()
                    },
                ),
            ]),
            ..Default::default()
        };
        let mut src = EnvSources::default();
        src.config_maps.insert(
            "cfg".into(),
            Some(BTreeMap::from([
                ("A".to_string(), "a".to_string()),
                ("B".to_string(), "b".to_string()),
            ])),
        );
        src.secrets.insert(
            "s".into(),
            Some(BTreeMap::from([("token".to_string(), b"sekret".to_vec())])),
        );
        src.services
            .insert("KUBERNETES_SERVICE_HOST".into(), "10.96.0.1".into());
        let p = pod(c.clone());
        let env = make_environment(&p, &c, "10.244.0.2", "10.250.0.1", &src).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CFG_A"), Some("overridden"));
        assert_eq!(get("CFG_B"), Some("b"));
        assert_eq!(get("B"), Some("b-10.96.0.1-$(NOPE)-$(CFG_B)"));
        assert_eq!(get("KEY"), Some("sekret"));
        assert_eq!(get("MISSING_OPT"), None);
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(env.iter().filter(|(n, _)| n == "CFG_A").count(), 1);
    }

    #[test]
    fn missing_required_sources_give_the_go_kubelet_messages() {
        let key_ref = |name: &str, key: &str| {
            from(
                "X",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: name.into(),
                        key: key.into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )
        };
        let mut src = EnvSources::default();
        src.config_maps.insert("gone".into(), None);
        src.config_maps
            .insert("there".into(), Some(BTreeMap::new()));
        let c = Container {
            name: "c".into(),
            env: Some(vec![key_ref("gone", "k")]),
            ..Default::default()
        };
        let err = make_environment(&pod(c.clone()), &c, "", "", &src).unwrap_err();
        assert_eq!(err.to_string(), "configmap \"gone\" not found");
        let c = Container {
            name: "c".into(),
            env: Some(vec![key_ref("there", "k")]),
            ..Default::default()
        };
        let err = make_environment(&pod(c.clone()), &c, "", "", &src).unwrap_err();
        assert_eq!(
            err.to_string(),
            "couldn't find key k in ConfigMap ns1/there"
        );
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                    name: "nosecret".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        src.secrets.insert("nosecret".into(), None);
        let err = make_environment(&pod(c.clone()), &c, "", "", &src).unwrap_err();
        assert_eq!(err.to_string(), "secret \"nosecret\" not found");
    }

    #[test]
    fn resource_field_refs_default_limits_to_allocatable() {
        let c = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("250m".into())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ])),
                ..Default::default()
            }),
            env: Some(vec![from(
                "CPU_LIMIT",
                EnvVarSource {
                    resource_field_ref: Some(ResourceFieldSelector {
                        resource: "limits.cpu".into(),
                        container_name: None,
                        divisor: None,
                    }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let p = pod(c.clone());
        let alloc = BTreeMap::from([("cpu".to_string(), 2000i128)]);
        let src = EnvSources {
            node_allocatable_milli: alloc,
            ..Default::default()
        };
        let env = make_environment(&p, &c, "", "", &src).unwrap();
        assert_eq!(env, vec![("CPU_LIMIT".to_string(), "2".to_string())]);
    }
}
