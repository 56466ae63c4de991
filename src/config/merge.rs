//! The one place deckhand's configuration is put together, as the Go kubelet's
//! `cmd/kubelet/app/server.go` does: the KubeletConfiguration file (or the Go defaults without
//! `--config`), then the `--config-dir` drop-ins merged onto it in order, then every flag given on
//! the command line (the Go kubelet's flags deckhand has no typed flag for, [`super::go_flags`],
//! then its own), the fates of the fields each layer sets checked and the result validated
//! ([`merge_layers`], pure); [`load`] does the I/O around it.

use super::fields::{flatten, go_zero, Fate, Section};
use super::file::{self, ConfigFile};
use super::go_flags::{self, GoFlagsPatch};
use super::{ConfigError, Flags, KubeletConfiguration};
use clap::{ArgMatches, FromArgMatches};
use serde_json::Value;
use std::path::Path;

/// What start-up runs with.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The command line (its KubeletConfiguration flags are already in `kubelet`; the others,
    /// `--kubeconfig`, `--node-ip`, `--root-dir`, ..., are read from here).
    pub flags: Flags,
    /// The merged configuration.
    pub kubelet: KubeletConfiguration,
    /// Warnings to log once logging is set up: the file's accepted-but-ignored fields, then the
    /// flags' deprecations and unused flags.
    pub warnings: Vec<String>,
}

/// Merges the configuration: `file`'s (its unset fields already hold the Go defaults), or the Go
/// defaults without a file; then every flag of `flags` that was given on the command line wins
/// over it, given with its default value or not (`cmd/kubelet/app/server.go`: flags, then file,
/// then defaults). Returns the configuration and the warnings, in the order they are logged.
///
/// Errors: [`ConfigError::File`] (`Unsupported`) for a refused field the file sets;
/// [`ConfigError::Invalid`] for a flag value that does not parse ([`Flags::overlay`]); what
/// [`KubeletConfiguration::validate`] refuses in the merged values.
pub fn merge(
    file: Option<&ConfigFile>,
    flags: &Flags,
) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
    merge_layers(file, &[], &GoFlagsPatch::default(), flags)
}

/// The fate of the field at dotted `path` (or of the nearest enclosing field that has one: a
/// flag setting `logging.options.json.splitStream` falls under `logging.options`), and that
/// field's path.
fn fate_at(path: &str) -> Option<(String, Fate)> {
    let all = flatten(KubeletConfiguration::FIELDS, "");
    let mut p = path.to_string();
    loop {
        if let Some((f, fate)) = all.iter().find(|(f, _)| *f == p) {
            return Some((f.clone(), *fate));
        }
        p = p.rsplit_once('.')?.0.to_string();
    }
}

/// The value at dotted `path` of a JSON object.
fn value_at<'a>(obj: &'a serde_json::Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut keys = path.split('.');
    let mut v = obj.get(keys.next()?)?;
    for k in keys {
        v = v.get(k)?;
    }
    Some(v)
}

/// [`merge`] with every layer the Go kubelet has: `file`, then the `--config-dir` `dropins` in
/// their order, each merged onto the document before it (RFC 7386, [`file::merge_patch`]), then
/// the Go kubelet flags deckhand has no typed flag for (`go`, [`go_flags::patch`]), then
/// `flags`. Each layer's accepted fields give warnings naming it (the file, the drop-in, the
/// flag), and its refused ones an error naming it.
///
/// Errors: as [`merge`], plus a refused field set by a drop-in or a Go flag, and a merged
/// document that does not decode.
pub fn merge_layers(
    file: Option<&ConfigFile>,
    dropins: &[ConfigFile],
    go: &GoFlagsPatch,
    flags: &Flags,
) -> Result<(KubeletConfiguration, Vec<String>), ConfigError> {
    let mut warnings = Vec::new();
    for f in file.into_iter().chain(dropins) {
        warnings.extend(
            f.check()?
                .into_iter()
                .map(|w| format!("kubelet config file {}: {w}", f.path.display())),
        );
    }
    for (flag, shown, path) in &go.fields {
        let Some((field, fate)) = fate_at(path) else {
            continue;
        };
        let Some(v) = value_at(&go.patch, &field) else {
            continue;
        };
        match fate {
            Fate::Accepted { ok, why } if !go_zero(v) && !ok(v) => {
                warnings.push(format!("flag --{flag}={shown} is ignored: {why}"))
            }
            Fate::Refused { ok, why } if !go_zero(v) && !ok(v) => {
                return Err(ConfigError::Unsupported(format!(
                    "flag --{flag}={shown} is not supported by deckhand: {why}"
                )))
            }
            _ => {}
        }
    }
    warnings.extend(go.warnings.iter().cloned());
    let mut config = if dropins.is_empty() && go.patch.is_empty() {
        file.map(|f| f.config.clone()).unwrap_or_default()
    } else {
        // one document, decoded once: relative paths against the file's directory
        let mut doc = file.map(|f| f.doc.clone()).unwrap_or_default();
        for d in dropins {
            file::merge_patch(&mut doc, &d.doc);
        }
        file::merge_patch(&mut doc, &go.patch);
        let (name, base) = match file {
            Some(f) => (
                f.path.clone(),
                f.path.parent().unwrap_or(Path::new("/")).to_path_buf(),
            ),
            None => ("the command line".into(), std::path::PathBuf::new()),
        };
        file::decode(&doc, &name, &base)?.config
    };
    flags.overlay(&mut config)?;
    config.validate()?;
    flags.external_cloud_provider()?;
    warnings.extend(flags.warnings());
    Ok((config, warnings))
}

/// Parses the command line (clap exits with its usage message on an unknown or malformed flag,
/// and for `--help`; `--version` prints [`super::flags::version_text`] and exits), reads the
/// `--config` file, and [`merge`]s them.
///
/// Errors: [`ConfigError`].
pub fn load() -> Result<Loaded, ConfigError> {
    let matches = Flags::command_with_defaults().get_matches();
    if let Some(v) = matches.get_one::<String>("version") {
        if let Some(text) = super::flags::version_text(v).map_err(ConfigError::Invalid)? {
            println!("{text}");
            std::process::exit(0);
        }
    }
    from_matches(&matches)
}

/// [`load`] on already parsed arguments (of [`Flags::command_with_defaults`]).
///
/// Errors: [`ConfigError`].
pub fn from_matches(matches: &ArgMatches) -> Result<Loaded, ConfigError> {
    let flags =
        Flags::from_arg_matches(matches).map_err(|e| ConfigError::Unsupported(e.to_string()))?;
    let go = go_flags::patch(&go_flags::given(matches)).map_err(ConfigError::Invalid)?;
    let file = flags.config.as_deref().map(file::load).transpose()?;
    let mut skipped_warnings = Vec::new();
    let dropins = match &flags.config_dir {
        Some(dir) if !dir.as_os_str().is_empty() => {
            let (conf, skipped) = file::dropin_files(dir)?;
            skipped_warnings.extend(skipped.iter().map(|p| {
                format!(
                    "--config-dir: skipped {} (only *.conf files are read)",
                    p.display()
                )
            }));
            conf.iter()
                .map(|p| file::load_dropin(p))
                .collect::<Result<Vec<_>, _>>()?
        }
        _ => Vec::new(),
    };
    let (kubelet, mut warnings) = merge_layers(file.as_ref(), &dropins, &go, &flags)?;
    warnings.extend(skipped_warnings);
    Ok(Loaded {
        flags,
        kubelet,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};
    use serde_json::{json, Value};
    use std::net::IpAddr;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    /// One row: a file body (after apiVersion/kind; `None`: no `--config`), the command line,
    /// and either the fields expected in the merged configuration (dotted JSON paths, compared
    /// through its serde encoding) and the exact warnings, or an error containing `err`.
    struct Case {
        name: &'static str,
        file: Option<&'static str>,
        args: &'static [&'static str],
        want: Vec<(&'static str, Value)>,
        warnings: &'static [&'static str],
        err: Option<&'static str>,
    }

    fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
        path.split('.').fold(v, |v, k| &v[k])
    }

    #[test]
    fn merge_table() {
        let cases = [
            Case {
                name: "default when neither file nor flag",
                file: None,
                args: &[],
                want: vec![("maxPods", json!(110)), ("nodeStatusUpdateFrequency", json!("10s"))],
                warnings: &[],
                err: None,
            },
            Case {
                name: "file wins over the default",
                file: Some("maxPods: 50\nauthentication:\n  anonymous:\n    enabled: true\n"),
                args: &[],
                want: vec![("maxPods", json!(50)), ("authentication.anonymous.enabled", json!(true))],
                warnings: &[],
                err: None,
            },
            Case {
                name: "a flag given wins over the file",
                file: Some("maxPods: 50\nstaticPodPath: /file\nauthentication:\n  anonymous:\n    enabled: true\n"),
                args: &["--max-pods=7", "--pod-manifest-path=/flag", "--anonymous-auth=false"],
                want: vec![
                    ("maxPods", json!(7)),
                    ("staticPodPath", json!("/flag")),
                    ("authentication.anonymous.enabled", json!(false)),
                ],
                warnings: &[],
                err: None,
            },
            Case {
                name: "a flag given with its default value still wins",
                file: Some("port: 10260\n"),
                args: &["--port=10250"],
                want: vec![("port", json!(10250))],
                warnings: &[],
                err: None,
            },
            Case {
                name: "a flag not given leaves the file's value",
                file: Some("port: 10260\nclusterDomain: cluster.local\n"),
                args: &["--max-pods=7"],
                want: vec![("port", json!(10260)), ("clusterDomain", json!("cluster.local")), ("maxPods", json!(7))],
                warnings: &[],
                err: None,
            },
            Case {
                name: "a flag over the default",
                file: None,
                args: &["--v=3", "--eviction-hard=memory.available<1Gi"],
                want: vec![("logging.verbosity", json!(3)), ("evictionHard", json!({"memory.available": "1Gi"}))],
                warnings: &[],
                err: None,
            },
            Case {
                name: "a flag overrides a file value validation would refuse",
                file: Some("cgroupDriver: bogus\n"),
                args: &["--cgroup-driver=systemd"],
                want: vec![("cgroupDriver", json!("systemd"))],
                warnings: &[],
                err: None,
            },
            Case {
                name: "refused field: error naming file, field, value and reason",
                file: Some("cpuManagerPolicy: static\n"),
                args: &[],
                want: vec![],
                warnings: &[],
                err: Some("kubelet config file \"/etc/kubelet.yaml\": field \"cpuManagerPolicy\" = \"static\" is not supported by deckhand: only the `none` CPU manager policy is implemented"),
            },
            Case {
                name: "refused field at its default: fine",
                file: Some("cpuManagerPolicy: none\nenableServer: true\n"),
                args: &[],
                want: vec![],
                warnings: &[],
                err: None,
            },
            Case {
                name: "accepted field: warning text",
                file: Some("syncFrequency: 1m\n"),
                args: &[],
                want: vec![],
                warnings: &["kubelet config file /etc/kubelet.yaml: field \"syncFrequency\" = \"1m\" is ignored: deckhand re-syncs every pod every 30s and on every runtime event"],
                err: None,
            },
            Case {
                name: "accepted field at a Go zero value: no warning",
                file: Some("syncFrequency: 0s\nfeatureGates: {}\n"),
                args: &[],
                want: vec![],
                warnings: &[],
                err: None,
            },
            Case {
                name: "file warnings first, then the flags'",
                file: Some("kubeletCgroups: /file\n"),
                args: &["--kubelet-cgroups=/flag", "--maximum-dead-containers=10"],
                want: vec![],
                warnings: &[
                    "kubelet config file /etc/kubelet.yaml: field \"kubeletCgroups\" = \"/file\" is ignored: deckhand stays in the cgroup its service manager gives it",
                    "Flag --maximum-dead-containers has been deprecated, Use --eviction-hard or --eviction-soft instead. Will be removed in a future version.",
                    "flag --kubelet-cgroups=/flag is not used: deckhand stays in the cgroup its service manager gives it",
                ],
                err: None,
            },
            Case {
                name: "a value validation refuses, from a flag",
                file: None,
                args: &["--read-only-port=10255"],
                want: vec![],
                warnings: &[],
                err: Some("read-only port 10255 (readOnlyPort): deckhand serves no unauthenticated port; set it to 0"),
            },
            Case {
                name: "a value validation refuses, from the file",
                file: Some("imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 70\n"),
                args: &[],
                want: vec![],
                warnings: &[],
                err: Some("imageGCLowThresholdPercent (--image-gc-low-threshold) 70 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70"),
            },
            Case {
                name: "a flag value that does not parse",
                file: None,
                args: &["--kube-reserved=cpu"],
                want: vec![],
                warnings: &[],
                err: Some("--kube-reserved: \"cpu\": expected <resource>=<quantity>"),
            },
        ];
        for c in &cases {
            let file = c.file.map(|body| {
                file::parse(
                    &format!("{HEAD}{body}"),
                    Path::new("/etc/kubelet.yaml"),
                    Path::new("/etc"),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", c.name))
            });
            let args: Vec<&str> = std::iter::once("deckhand")
                .chain(c.args.iter().copied())
                .collect();
            let flags = Flags::try_parse_from(&args).unwrap_or_else(|e| panic!("{}: {e}", c.name));
            match (merge(file.as_ref(), &flags), c.err) {
                (Ok((config, warnings)), None) => {
                    let json = serde_json::to_value(&config).unwrap();
                    for (path, want) in &c.want {
                        assert_eq!(at(&json, path), want, "{}: {path}", c.name);
                    }
                    assert_eq!(warnings, c.warnings, "{}", c.name);
                }
                (Err(e), Some(want)) => {
                    assert!(e.to_string().contains(want), "{}: {e}", c.name)
                }
                (Ok(_), Some(want)) => panic!("{}: no error, want {want:?}", c.name),
                (Err(e), None) => panic!("{}: {e}", c.name),
            }
        }
    }

    /// What start-up gets from `args`: the flags, the merged configuration, the warnings.
    fn load_args(args: &[&str]) -> Result<(Flags, KubeletConfiguration, Vec<String>), ConfigError> {
        let m = Flags::command_with_defaults()
            .try_get_matches_from(args)
            .unwrap();
        let l = from_matches(&m)?;
        Ok((l.flags, l.kubelet, l.warnings))
    }

    /// A configuration file of one test, in a directory of its own that goes when it is dropped.
    struct TempConfig(PathBuf);

    impl std::ops::Deref for TempConfig {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for TempConfig {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    fn temp_config(name: &str, body: &str) -> TempConfig {
        let dir = std::env::temp_dir().join(format!(
            "deckhand-config-test-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        TempConfig(p)
    }

    const FILE: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
        clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nmaxPods: 50\nport: 10260\n\
        cgroupDriver: systemd\nstaticPodPath: /etc/kubernetes/manifests\n\
        authentication:\n  anonymous:\n    enabled: true\n\
        containerRuntimeEndpoint: unix:///run/other.sock\nlogging:\n  verbosity: 2\n";

    #[test]
    fn flags_only_keep_defaults() {
        let (_, f, w) = load_args(&["deckhand", "--max-pods=20"]).unwrap();
        assert!(w.is_empty());
        assert_eq!(f.max_pods, 20);
        assert_eq!(f.port, 10250);
        assert_eq!(f.cgroup_driver, "cgroupfs");
        assert!(f.cluster_dns.is_empty());
        assert_eq!(f.healthz_port, 10248);
    }

    #[test]
    fn file_only_sets_fields() {
        let p = temp_config("file-only.yaml", FILE);
        let (_, f, _) = load_args(&["deckhand", &format!("--config={}", p.display())]).unwrap();
        assert_eq!(f.cluster_dns, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
        assert_eq!(f.cluster_domain, "cluster.local");
        assert_eq!(f.max_pods, 50);
        assert_eq!(f.port, 10260);
        assert_eq!(f.cgroup_driver, "systemd");
        assert_eq!(f.static_pod_path, "/etc/kubernetes/manifests");
        assert!(f.authentication.anonymous.enabled);
        assert_eq!(f.container_runtime_endpoint, "unix:///run/other.sock");
        assert_eq!(f.logging.verbosity, 2);
        // Untouched by the file: flag defaults.
        assert_eq!(f.node_status_update_frequency, Duration::from_secs(10));
    }

    #[test]
    fn command_line_wins_over_file() {
        let p = temp_config("both.yaml", FILE);
        let (_, f, _) = load_args(&[
            "deckhand",
            &format!("--config={}", p.display()),
            "--max-pods=7",
            "--cgroup-driver=cgroupfs",
            "--anonymous-auth=false",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--v=4",
            "--cluster-dns=10.96.0.53",
        ])
        .unwrap();
        assert_eq!(f.max_pods, 7);
        assert_eq!(f.cgroup_driver, "cgroupfs");
        assert!(!f.authentication.anonymous.enabled);
        assert_eq!(
            f.container_runtime_endpoint,
            "unix:///run/containerd/containerd.sock"
        );
        assert_eq!(f.logging.verbosity, 4);
        assert_eq!(f.cluster_dns, vec!["10.96.0.53".parse::<IpAddr>().unwrap()]);
        // From the file, not given on the command line.
        assert_eq!(f.port, 10260);
        assert_eq!(f.cluster_domain, "cluster.local");
        // A flag given with its default value still wins.
        let (_, f, _) = load_args(&[
            "deckhand",
            &format!("--config={}", p.display()),
            "--port=10250",
        ])
        .unwrap();
        assert_eq!(f.port, 10250);
    }

    #[test]
    fn go_kubelet_flags_of_a_kind_or_cloud_node_are_accepted() {
        // kind's and a cloud node's kubeadm-flags.env, and kind's cluster-wide settings
        let (flags, c, w) = load_args(&[
            "deckhand",
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--node-ip=172.18.0.3",
            "--node-labels=role=worker,topology.kubernetes.io/zone=a",
            "--provider-id=kind://docker/kind/kind-worker",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            "--cloud-provider=external",
            "--feature-gates=KubeletPSI=true",
            "--runtime-request-timeout=15m",
            "--logging-format=json",
            "--cgroup-root=/kubelet",
            "--fail-swap-on=false",
            "--housekeeping-interval=10s",
        ])
        .unwrap();
        assert_eq!(c.provider_id, "kind://docker/kind/kind-worker");
        assert_eq!(c.cgroup_root, "/kubelet");
        assert_eq!(c.logging.format, "json");
        assert!(flags.external_cloud_provider().unwrap());
        assert_eq!(flags.node_labels.len(), 2);
        let want_warned = [
            "--feature-gates=KubeletPSI=true",
            "--runtime-request-timeout=15m",
        ];
        for flag in want_warned {
            assert!(
                w.iter()
                    .any(|x| x.starts_with(&format!("flag {flag} is ignored: "))),
                "{flag} not warned: {w:?}"
            );
        }
        // refused values name the flag and the reason
        let e = load_args(&["deckhand", "--cpu-manager-policy=static"])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "flag --cpu-manager-policy=static is not supported by deckhand: only the `none` CPU manager policy is implemented"
        );
        let e = load_args(&["deckhand", "--cloud-provider=aws"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("built-in cloud providers are disabled"), "{e}");
        let e = load_args(&["deckhand", "--logging-format=xml"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be text or json"), "{e}");
        let e = load_args(&["deckhand", "--cgroup-root=kubelet"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be an absolute cgroup path"), "{e}");
    }

    #[test]
    fn config_dir_drop_ins_merge_in_order_and_flags_still_win() {
        let main = temp_config(
            "with-dropins.yaml",
            &format!("{HEAD}maxPods: 50\nport: 10260\nevictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n"),
        );
        let dir = main.parent().unwrap().join("conf.d");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(
            dir.join("10-pods.conf"),
            format!("{HEAD}maxPods: 60\ncgroupRoot: /kubelet\n"),
        )
        .unwrap();
        // a later file wins; objects merge key by key; null removes a key
        std::fs::write(
            dir.join("20-eviction.conf"),
            format!("{HEAD}maxPods: 70\nevictionHard:\n  memory.available: 500Mi\n  nodefs.available: null\n"),
        )
        .unwrap();
        // subdirectories are read after the files that sort before them
        std::fs::write(dir.join("sub/30-port.conf"), format!("{HEAD}port: 10270\n")).unwrap();
        std::fs::write(dir.join("README"), "not a drop-in").unwrap();
        let (_, c, w) = load_args(&[
            "deckhand",
            &format!("--config={}", main.display()),
            &format!("--config-dir={}", dir.display()),
            "--max-pods=7",
        ])
        .unwrap();
        assert_eq!(c.max_pods, 7, "the flag wins over every drop-in");
        assert_eq!(c.cgroup_root, "/kubelet");
        assert_eq!(c.port, 10270);
        assert_eq!(
            c.eviction_hard.get("memory.available").map(String::as_str),
            Some("500Mi")
        );
        assert!(
            !c.eviction_hard.contains_key("nodefs.available"),
            "{:?}",
            c.eviction_hard
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("skipped") && w[0].contains("README"), "{w:?}");
        // a refused field in a drop-in names the drop-in
        std::fs::write(
            dir.join("40-cpu.conf"),
            format!("{HEAD}cpuManagerPolicy: static\n"),
        )
        .unwrap();
        let e = load_args(&[
            "deckhand",
            &format!("--config={}", main.display()),
            &format!("--config-dir={}", dir.display()),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("40-cpu.conf") && e.contains("cpuManagerPolicy"),
            "{e}"
        );
        // a drop-in must say what it is, as in Go
        std::fs::remove_file(dir.join("40-cpu.conf")).unwrap();
        std::fs::write(dir.join("50-bare.conf"), "maxPods: 3\n").unwrap();
        let e = load_args(&["deckhand", &format!("--config-dir={}", dir.display())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("50-bare.conf"), "{e}");
    }

    #[test]
    fn merge_is_pure() {
        let f = Flags::try_parse_from(["deckhand", "--max-pods=110"]).unwrap();
        let file = ConfigFile {
            path: "/etc/kubelet.yaml".into(),
            config: KubeletConfiguration {
                max_pods: 9,
                static_pod_path: "/m".into(),
                server_tls_bootstrap: true,
                ..Default::default()
            },
            doc: Default::default(),
        };
        let (c, _) = merge(Some(&file), &f).unwrap();
        assert_eq!(c.max_pods, 110, "explicit flag kept");
        assert_eq!(c.static_pod_path, "/m");
        assert!(c.server_tls_bootstrap);
    }

    #[test]
    fn image_gc_flags_and_file_fields_are_honoured_and_validated() {
        let (flags, f, w) = load_args(&["deckhand"]).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            f.image_gc_policy().unwrap(),
            crate::gc::ImageGcPolicy::default()
        );
        assert_eq!(
            flags.container_gc_policy(),
            crate::gc::ContainerGcPolicy::default()
        );
        let (_, f, _) = load_args(&[
            "deckhand",
            "--image-gc-high-threshold=50",
            "--image-gc-low-threshold=40",
            "--minimum-image-ttl-duration=30s",
        ])
        .unwrap();
        let p = f.image_gc_policy().unwrap();
        assert_eq!(
            (p.high_threshold_percent, p.low_threshold_percent),
            (50, 40)
        );
        assert_eq!(p.min_age, Duration::from_secs(30));
        let e = load_args(&[
            "deckhand",
            "--image-gc-high-threshold=70",
            "--image-gc-low-threshold=70",
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(
                "must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70"
            ),
            "{e}"
        );
        let e = load_args(&["deckhand", "--image-gc-high-threshold=101"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be between 0 and 100"), "{e}");
        let e = load_args(&["deckhand", "--image-gc-low-threshold=-1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("imageGCLowThresholdPercent"), "{e}");
        let file = temp_config(
            "gc.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 0\n\
             imageMinimumGCAge: 1m\nimageMaximumGCAge: 168h\n",
        );
        let (_, f, w) = load_args(&[
            "deckhand",
            &format!("--config={}", file.display()),
            "--image-gc-high-threshold=95",
        ])
        .unwrap();
        assert!(w.is_empty(), "honoured, not warned: {w:?}");
        let p = f.image_gc_policy().unwrap();
        assert_eq!(p.high_threshold_percent, 95, "flag wins");
        assert_eq!(
            p.low_threshold_percent, 0,
            "an explicit 0 is kept (a pointer field in Go)"
        );
        assert_eq!(p.min_age, Duration::from_secs(60));
        assert_eq!(p.max_age, Duration::from_secs(168 * 3600));
        let file = temp_config(
            "gc-bad.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             imageMinimumGCAge: 10m\nimageMaximumGCAge: 5m\n",
        );
        let e = load_args(&["deckhand", &format!("--config={}", file.display())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("imageMaximumGCAge 5m0s must be greater than imageMinimumGCAge 10m0s"),
            "{e}"
        );
    }

    #[test]
    fn container_gc_flags_are_honoured_with_deprecation_warnings() {
        let (f, _, w) = load_args(&[
            "deckhand",
            "--maximum-dead-containers-per-container=2",
            "--maximum-dead-containers=-1",
            "--minimum-container-ttl-duration=1m",
        ])
        .unwrap();
        let p = f.container_gc_policy();
        assert_eq!(p.max_per_pod_container, 2);
        assert_eq!(p.max_containers, -1);
        assert_eq!(p.min_age, Duration::from_secs(60));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("Flag --minimum-container-ttl-duration has been deprecated"),
            "{w:?}"
        );
    }

    #[test]
    fn bad_file_and_unsupported_values_are_errors() {
        let p = temp_config(
            "unknown.yaml",
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPod: 3\n",
        );
        let e = load_args(&["deckhand", &format!("--config={}", p.display())]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("maxPod") && msg.contains("unknown.yaml"),
            "{msg}"
        );
        assert!(load_args(&["deckhand", "--config=/nonexistent/deckhand.yaml"]).is_err());
        assert!(load_args(&["deckhand", "--read-only-port=10255"]).is_err());
        assert!(load_args(&["deckhand", "--image-service-endpoint=unix:///other.sock"]).is_err());
        let (_, _, w) = load_args(&[
            "deckhand",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
        ])
        .unwrap();
        assert!(w[0].contains("deprecated"), "{w:?}");
        assert!(Flags::command()
            .try_get_matches_from(["deckhand", "--network-plugin=cni"])
            .is_err());
    }
}
