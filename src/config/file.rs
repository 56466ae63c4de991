//! The kubelet's configuration file: a `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`
//! document (YAML or JSON), what `kubeadm join` writes to `/var/lib/kubelet/config.yaml`:
//! reading it into a [`KubeletConfiguration`] ([`load`], [`parse`]) and checking the fates of
//! the fields it sets ([`ConfigFile::check`]).
//!
//! A field the Go type does not have is [`ConfigFileError::UnknownField`] (the Go kubelet decodes
//! v1beta1 leniently and only logs unknown fields; deckhand is stricter on purpose, so a typo
//! such as `clusterDns` cannot silently leave a setting at its default).
//!
//! Go's zero values mean "default" (kubeadm writes `syncFrequency: 0s`, `crashLoopBackOff: {}`,
//! `containerRuntimeEndpoint: ""`, ...), so null, `0`, `""`, `"0s"`, `false`, `{}` and `[]` count
//! as unset (see [`super::kubelet_configuration`] for the pointer fields). Relative paths are
//! resolved against the file's directory, as the Go kubelet's `resolveRelativePaths` does for the
//! fields of `KubeletConfigurationPathRefs`.

use super::fields::{go_zero, Context, DecodeError, Fate, Section};
use super::KubeletConfiguration;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The API group/version the file must declare.
pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The kind the file must declare.
pub const KIND: &str = "KubeletConfiguration";

/// Errors reading a KubeletConfiguration file. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("failed to read kubelet config file {path:?}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is empty (the Go kubelet refuses that too).
    #[error("kubelet config file {path:?} was empty")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// Neither YAML nor JSON, not a mapping, or a nested object given as something else.
    #[error("kubelet config file {path:?}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        message: String,
    },
    /// `apiVersion`/`kind` are not `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration`.
    #[error("kubelet config file {path:?}: apiVersion {api_version:?} kind {kind:?} is not {API_VERSION} {KIND}")]
    WrongKind {
        /// The file.
        path: PathBuf,
        /// The apiVersion found.
        api_version: String,
        /// The kind found.
        kind: String,
    },
    /// A field the KubeletConfiguration type does not have.
    #[error("kubelet config file {path:?}: unknown field {field:?}")]
    UnknownField {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field, e.g. `authentication.x509.clientCaFile`.
        field: String,
    },
    /// A field deckhand does not implement, set to a value that would change behaviour.
    #[error("kubelet config file {path:?}: field {field:?} = {value} is not supported by deckhand: {why}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field.
        field: String,
        /// The value, as JSON.
        value: String,
        /// Why it cannot be ignored.
        why: &'static str,
    },
    /// An honoured field has a value deckhand cannot use (a wrong type, a bad duration, IP,
    /// mode, ...).
    #[error("kubelet config file {path:?}: field {field:?}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// A start-up warning about an accepted but ignored setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Dotted field path.
    pub field: String,
    /// The value, as JSON.
    pub value: String,
    /// Why it is harmless.
    pub why: &'static str,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "field {:?} = {} is ignored: {}",
            self.field, self.value, self.why
        )
    }
}

/// A decoded KubeletConfiguration file: unset fields hold the Go defaults, relative paths are
/// resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFile {
    /// The file, for messages.
    pub path: PathBuf,
    /// What it says.
    pub config: KubeletConfiguration,
    /// The document as written (JSON), the base the `--config-dir` drop-ins are merged onto.
    pub doc: serde_json::Map<String, Value>,
}

impl ConfigFile {
    /// The fates of the accepted and refused fields the file sets, in key order: a [`Warning`]
    /// for each accepted one set to anything but a Go zero value or an accepted value.
    ///
    /// Errors: [`ConfigFileError::Unsupported`] for the first refused one so set.
    pub fn check(&self) -> Result<Vec<Warning>, ConfigFileError> {
        let mut settings = Vec::new();
        self.config.settings("", &mut settings);
        settings.sort_by(|a, b| a.field.cmp(&b.field));
        let mut warnings = Vec::new();
        for s in settings {
            match s.fate {
                Fate::Accepted { ok, why } if !go_zero(s.value) && !ok(s.value) => {
                    warnings.push(Warning {
                        field: s.field,
                        value: s.value.to_string(),
                        why,
                    })
                }
                Fate::Refused { ok, why } if !go_zero(s.value) && !ok(s.value) => {
                    return Err(ConfigFileError::Unsupported {
                        path: self.path.clone(),
                        field: s.field,
                        value: s.value.to_string(),
                        why,
                    })
                }
                _ => {}
            }
        }
        Ok(warnings)
    }
}

/// Reads a KubeletConfiguration file: [`parse`] on its content, relative paths resolved against
/// its directory.
///
/// Errors: every [`ConfigFileError`] but `Unsupported` (that is [`ConfigFile::check`]).
pub fn load(path: &Path) -> Result<ConfigFile, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("/"));
    parse(&text, path, base)
}

/// Parses one YAML document (JSON is a subset) into a JSON value, as the Go kubelet reads its
/// config file and static pod manifests (sigs.k8s.io/yaml: YAML to JSON, then JSON decoding).
/// Duplicate keys are an error. The error names the line and column but does not quote the
/// document (a manifest may carry secrets in its env).
pub fn yaml_value(text: &str) -> Result<Value, String> {
    let options = serde_saphyr::options! { with_snippet: false, legacy_octal_numbers: true };
    serde_saphyr::from_str_with_options(text, options).map_err(|e| e.to_string())
}

/// Parses a KubeletConfiguration document (YAML, of which JSON is a subset). `path` names the
/// file in errors; relative paths are resolved against `base`.
///
/// Errors: every [`ConfigFileError`] but `Read` and `Unsupported`.
pub fn parse(text: &str, path: &Path, base: &Path) -> Result<ConfigFile, ConfigFileError> {
    let p = || path.to_path_buf();
    if text.trim().is_empty() {
        return Err(ConfigFileError::Empty { path: p() });
    }
    let doc: Value =
        yaml_value(text).map_err(|message| ConfigFileError::Syntax { path: p(), message })?;
    let Value::Object(obj) = &doc else {
        return Err(ConfigFileError::Syntax {
            path: p(),
            message: "the document is not a mapping".into(),
        });
    };
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version != API_VERSION || kind != KIND {
        return Err(ConfigFileError::WrongKind {
            path: p(),
            api_version: api_version.into(),
            kind: kind.into(),
        });
    }
    decode(obj, path, base)
}

/// Reads a `--config-dir` drop-in: a KubeletConfiguration document as [`load`] reads one, except
/// that a `null` (which removes a key when the drop-in is merged, [`merge_patch`]) is left out
/// of the drop-in's own decoding (its fates are checked on what it sets); the document itself
/// keeps it.
///
/// Errors: as [`load`].
pub fn load_dropin(path: &Path) -> Result<ConfigFile, ConfigFileError> {
    fn strip_nulls(m: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
        m.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::Object(o) => (k.clone(), Value::Object(strip_nulls(o))),
                v => (k.clone(), v.clone()),
            })
            .collect()
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("/"));
    if text.trim().is_empty() {
        return Err(ConfigFileError::Empty {
            path: path.to_path_buf(),
        });
    }
    let doc: Value = yaml_value(&text).map_err(|message| ConfigFileError::Syntax {
        path: path.to_path_buf(),
        message,
    })?;
    let Value::Object(obj) = doc else {
        return Err(ConfigFileError::Syntax {
            path: path.to_path_buf(),
            message: "the document is not a mapping".into(),
        });
    };
    // JSON is YAML: the stripped document goes through the same checks (kind, fields)
    let stripped = serde_json::to_string(&Value::Object(strip_nulls(&obj))).unwrap_or_default();
    let mut f = parse(&stripped, path, base)?;
    f.doc = obj;
    Ok(f)
}

/// Decodes a KubeletConfiguration document already read as JSON (`apiVersion`/`kind` not
/// checked). `path` names it in errors; relative paths are resolved against `base`.
///
/// Errors: [`ConfigFileError::UnknownField`], `Syntax` (a nested object given as something
/// else), `Invalid`.
pub fn decode(
    obj: &serde_json::Map<String, Value>,
    path: &Path,
    base: &Path,
) -> Result<ConfigFile, ConfigFileError> {
    let p = || path.to_path_buf();
    let config = KubeletConfiguration::decode(obj, "", &Context { base: Some(base) }).map_err(
        |e| match e {
            DecodeError::UnknownField { field } => {
                ConfigFileError::UnknownField { path: p(), field }
            }
            e @ DecodeError::NotAnObject { .. } => ConfigFileError::Syntax {
                path: p(),
                message: e.to_string(),
            },
            DecodeError::Invalid { field, message } => ConfigFileError::Invalid {
                path: p(),
                field,
                message,
            },
        },
    )?;
    Ok(ConfigFile {
        path: p(),
        config,
        doc: obj.clone(),
    })
}

/// RFC 7386 JSON merge patch of `patch` onto `target`, as the Go kubelet merges each
/// `--config-dir` drop-in onto the configuration (`jsonpatch.MergePatch`): objects merge key by
/// key, `null` removes a key, anything else replaces.
pub fn merge_patch(
    target: &mut serde_json::Map<String, Value>,
    patch: &serde_json::Map<String, Value>,
) {
    for (k, v) in patch {
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(p) => match target.get_mut(k) {
                Some(Value::Object(t)) => merge_patch(t, p),
                _ => {
                    let mut t = serde_json::Map::new();
                    merge_patch(&mut t, p);
                    target.insert(k.clone(), Value::Object(t));
                }
            },
            v => {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The drop-in files of a `--config-dir` directory, as the Go kubelet walks it
/// (`mergeKubeletConfigurations`): every file named `*.conf` in it and its subdirectories, in
/// lexical order of their walk (`filepath.WalkDir`); other files are skipped (the second list).
///
/// Errors: [`ConfigFileError::Read`] when the directory (or one below it) cannot be read.
pub fn dropin_files(dir: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ConfigFileError> {
    fn walk(
        d: &Path,
        conf: &mut Vec<PathBuf>,
        skipped: &mut Vec<PathBuf>,
    ) -> Result<(), ConfigFileError> {
        let read = |source| ConfigFileError::Read {
            path: d.to_path_buf(),
            source,
        };
        let mut entries: Vec<_> = std::fs::read_dir(d)
            .map_err(read)?
            .collect::<Result<_, _>>()
            .map_err(read)?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            if e.file_type().map_err(read)?.is_dir() {
                walk(&p, conf, skipped)?;
            } else if p.extension().is_some_and(|x| x == "conf") {
                conf.push(p);
            } else {
                skipped.push(p);
            }
        }
        Ok(())
    }
    let (mut conf, mut skipped) = (Vec::new(), Vec::new());
    walk(dir, &mut conf, &mut skipped)?;
    Ok((conf, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Parses and checks the fates, as start-up does.
    fn parse_str(s: &str) -> Result<(KubeletConfiguration, Vec<Warning>), ConfigFileError> {
        let f = parse(s, Path::new("/etc/kubelet.yaml"), Path::new("/etc"))?;
        let w = f.check()?;
        Ok((f.config, w))
    }

    #[test]
    fn yaml_documents_read_as_json_and_errors_do_not_quote_the_text() {
        // (document, the JSON it reads as; None: an error)
        for (doc, want) in [
            (
                "a: 1\nb: [x, \"y\"]\n",
                Some(serde_json::json!({"a": 1, "b": ["x", "y"]})),
            ),
            ("{\"a\": true}", Some(serde_json::json!({"a": true}))),
            // YAML 1.1, as Go's YAML reader: 0644 is octal, yes and off are booleans
            (
                "mode: 0644\nyes: yes\nb: off\nn: 420\nf: 1.5\n",
                Some(serde_json::json!({"mode": 420, "yes": true, "b": false, "n": 420, "f": 1.5})),
            ),
            ("a: 1\na: 2\n", None),
            ("env:\n  - value: s3cr3t-token\n    name: [unclosed\n", None),
        ] {
            let got = yaml_value(doc);
            match want {
                Some(v) => assert_eq!(got.as_ref().ok(), Some(&v), "{doc:?}: {got:?}"),
                None => {
                    let e = got.expect_err(doc);
                    assert!(
                        !e.contains("s3cr3t"),
                        "{doc:?}: the error quotes the text: {e}"
                    );
                    assert!(e.contains("line"), "{doc:?}: no line in {e:?}");
                }
            }
        }
    }

    #[test]
    fn unknown_field_names_field_and_file() {
        let e = parse_str("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDns: [10.96.0.10]\n")
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, ConfigFileError::UnknownField { ref field, .. } if field == "clusterDns")
        );
        assert!(
            msg.contains("/etc/kubelet.yaml") && msg.contains("clusterDns"),
            "{msg}"
        );
        let e = parse_str("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nauthentication:\n  x509:\n    clientCaFile: /x\n")
            .unwrap_err();
        assert!(
            matches!(e, ConfigFileError::UnknownField { ref field, .. } if field == "authentication.x509.clientCaFile"),
            "{e}"
        );
    }

    #[test]
    fn wrong_kind_and_empty_are_errors() {
        assert!(matches!(
            parse_str("apiVersion: v1\nkind: Pod\n"),
            Err(ConfigFileError::WrongKind { .. })
        ));
        assert!(matches!(
            parse_str("  \n"),
            Err(ConfigFileError::Empty { .. })
        ));
        assert!(matches!(
            parse_str("[1, 2]"),
            Err(ConfigFileError::Syntax { .. })
        ));
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        assert!(matches!(
            parse_str(&format!("{head}authentication: yes\n")),
            Err(ConfigFileError::Syntax { .. })
        ));
    }

    #[test]
    fn user_namespace_ids_per_pod_are_whole_units_as_go_validates_them() {
        // (idsPerPod, accepted)
        for (ids, ok) in [
            ("65536", true),
            ("131072", true),
            ("4294901760", true),
            ("0", false),
            ("1000", false),
            ("65537", false),
            ("4294967296", false),
        ] {
            let text = format!(
                r#"{{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","userNamespaces":{{"idsPerPod":{ids}}}}}"#
            );
            match parse_str(&text) {
                Ok(c) => {
                    assert!(ok, "{ids} accepted");
                    assert_eq!(c.0.user_namespaces.ids_per_pod.to_string(), ids);
                }
                Err(e) => {
                    assert!(!ok, "{ids} refused: {e}");
                    assert!(
                        matches!(e, ConfigFileError::Invalid { ref field, .. } if field == "userNamespaces.idsPerPod"),
                        "{e}"
                    );
                }
            }
        }
        let c = parse_str(
            r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration"}"#,
        )
        .unwrap();
        assert_eq!(c.0.user_namespaces.ids_per_pod, 65536, "Go's default");
    }

    #[test]
    fn refused_and_warned_fields() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let e = parse_str(&format!("{head}cpuManagerPolicy: static\n")).unwrap_err();
        assert!(
            matches!(e, ConfigFileError::Unsupported { ref field, .. } if field == "cpuManagerPolicy"),
            "{e}"
        );
        // Defaults of refused fields are fine.
        let (_, w) = parse_str(&format!(
            "{head}cpuManagerPolicy: none\nenableServer: true\nshutdownGracePeriod: 0s\nmemorySwap: {{}}\n"
        ))
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        let (_, w) = parse_str(&format!(
            "{head}syncFrequency: 1m\nfeatureGates:\n  Foo: true\n"
        ))
        .unwrap();
        let fields: Vec<_> = w.iter().map(|w| w.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["featureGates", "syncFrequency"],
            "in key order"
        );
        assert!(w[0].to_string().contains("ignored"));
        // Nested ones, by dotted path.
        let e =
            parse_str(&format!("{head}memorySwap:\n  swapBehavior: LimitedSwap\n")).unwrap_err();
        assert!(
            matches!(e, ConfigFileError::Unsupported { ref field, .. } if field == "memorySwap.swapBehavior"),
            "{e}"
        );
    }

    #[test]
    fn honoured_fields_json_and_relative_paths() {
        let json = r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration",
          "clusterDNS":["10.96.0.10"],"clusterDomain":"cluster.local","staticPodPath":"manifests",
          "authentication":{"x509":{"clientCAFile":"/etc/kubernetes/pki/ca.crt"},"webhook":{"enabled":false},"anonymous":{"enabled":true}},
          "authorization":{"mode":"AlwaysAllow"},"evictionHard":{"memory.available":"200Mi"},
          "kubeReserved":{"cpu":"100m"},"maxPods":50,"port":10260,"nodeStatusUpdateFrequency":"20s",
          "resolvConf":"","registerWithTaints":[{"key":"a","value":"b","effect":"NoSchedule"},{"key":"c","effect":"NoExecute"}],
          "logging":{"verbosity":3},"containerLogMaxFiles":3}"#;
        let (c, w) = parse_str(json).unwrap();
        assert!(w.is_empty());
        assert_eq!(
            c.cluster_dns,
            vec!["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(c.static_pod_path, "/etc/manifests");
        assert!(!c.authentication.webhook.enabled);
        assert!(c.authentication.anonymous.enabled);
        assert_eq!(
            c.authorization.mode,
            crate::server::auth::AuthorizationMode::AlwaysAllow
        );
        assert_eq!(
            c.eviction_hard,
            [("memory.available".to_string(), "200Mi".to_string())].into()
        );
        assert_eq!(
            c.kube_reserved,
            [("cpu".to_string(), "100m".to_string())].into()
        );
        assert_eq!(c.max_pods, 50);
        assert_eq!(c.port, 10260);
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(20));
        assert_eq!(c.resolv_conf, "");
        let taints: Vec<_> = c
            .register_with_taints
            .iter()
            .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
            .collect();
        assert_eq!(
            taints,
            vec![("a", Some("b"), "NoSchedule"), ("c", None, "NoExecute")]
        );
        assert_eq!(c.logging.verbosity, 3);
        assert_eq!(c.container_log_max_files, 3);
        let e = parse_str(r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","nodeStatusUpdateFrequency":"10x"}"#).unwrap_err();
        assert!(matches!(e, ConfigFileError::Invalid { .. }), "{e}");
        let e = parse_str(r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","containerLogMaxFiles":1}"#).unwrap_err();
        assert!(
            matches!(e, ConfigFileError::Invalid { ref field, ref message, .. } if field == "containerLogMaxFiles" && message.contains("at least 2")),
            "{e}"
        );
        let e = parse_str(r#"{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","authorization":{"mode":"RBAC"}}"#).unwrap_err();
        assert!(
            matches!(e, ConfigFileError::Invalid { ref field, .. } if field == "authorization.mode"),
            "{e}"
        );
    }

    #[test]
    fn go_zero_values_keep_the_defaults_but_pointer_fields_keep_explicit_zeros() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let (c, _) = parse_str(&format!(
            "{head}port: 0\nmaxPods: 0\ncgroupDriver: \"\"\nfileCheckFrequency: 0s\nevictionHard: {{}}\n\
             healthzPort: 0\nimageGCLowThresholdPercent: 0\ncgroupsPerQOS: false\n"
        ))
        .unwrap();
        let d = KubeletConfiguration::default();
        assert_eq!(c.port, d.port);
        assert_eq!(c.max_pods, d.max_pods);
        assert_eq!(c.cgroup_driver, d.cgroup_driver);
        assert_eq!(c.file_check_frequency, d.file_check_frequency);
        assert_eq!(c.eviction_hard, d.eviction_hard);
        assert_eq!(c.healthz_port, 0);
        assert_eq!(c.image_gc_low_threshold_percent, 0);
        assert!(!c.cgroups_per_qos);
    }

    /// The KubeletConfiguration kubeadm v1.36.3 writes, produced by kubeadm's own defaulting and
    /// marshalling (`DefaultedStaticInitConfiguration` + the kubelet component config's
    /// `Marshal`; see tests/data/README.md).
    #[test]
    fn kubeadm_written_file_parses() {
        let text = include_str!("../../tests/data/kubeadm-kubelet-config.yaml");
        let f = parse(
            text,
            Path::new("/var/lib/kubelet/config.yaml"),
            Path::new("/var/lib/kubelet"),
        )
        .unwrap();
        let w = f.check().unwrap();
        let c = f.config;
        assert!(w.is_empty(), "kubeadm's defaults need no warning: {w:?}");
        assert_eq!(
            c.cluster_dns,
            vec!["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(c.cluster_domain, "cluster.local");
        assert_eq!(c.static_pod_path, "/etc/kubernetes/manifests");
        assert_eq!(
            c.authentication.x509.client_ca_file,
            Some(PathBuf::from("/etc/kubernetes/pki/ca.crt"))
        );
        assert_eq!(c.cgroup_driver, "systemd");
        assert!(c.rotate_certificates);
        assert!(!c.authentication.anonymous.enabled);
        assert!(c.authentication.webhook.enabled);
        assert_eq!(c.healthz_port, 10248);
        // Zero durations and empty strings mean "default".
        let d = KubeletConfiguration::default();
        assert_eq!(
            c.node_status_update_frequency,
            d.node_status_update_frequency
        );
        assert_eq!(c.container_runtime_endpoint, d.container_runtime_endpoint);
    }
}
