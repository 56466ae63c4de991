//! Every flag of the Go kubelet at v1.36 that deckhand has no flag of its own for ([`GO_FLAGS`]),
//! so that a command line written for `/usr/bin/kubelet` (a kubeadm or kind worker's
//! `kubeadm-flags.env`, a cloud node's unit) starts deckhand too: no Go kubelet flag is unknown.
//!
//! Each row says what deckhand does with the flag:
//! - [`GoFlagFate::Field`]: the flag sets a KubeletConfiguration field (as in the Go kubelet,
//!   `cmd/kubelet/app/options` `AddKubeletConfigFlags`), and the field's own fate applies
//!   ([`super::kubelet_configuration`]): honoured, accepted with a warning, or refused with the
//!   reason;
//! - [`GoFlagFate::Ignored`]: a flag of the Go kubelet's process (`KubeletFlags`, cadvisor's
//!   leftovers) that means nothing to deckhand: a warning when set to anything but its default.
//!
//! The flags are parsed by clap as hidden arguments ([`add_to`]), with the Go value syntax of
//! their pflag type ([`GoFlagKind`]); [`given`] collects those on the command line and
//! [`patch`] turns them into a JSON merge patch over the configuration (the last layer before
//! deckhand's own flags, [`super::merge`]).

use serde_json::{json, Map, Value};

/// How a Go flag's value is written (its pflag type) and becomes JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoFlagKind {
    /// `--x` or `--x=true|false` (pflag `BoolVar`: a separate value is not taken).
    Bool,
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A Go duration (`10s`, `1m30s`).
    Duration,
    /// A comma-separated list (`StringSliceVar`); repeated flags append.
    List,
    /// `key=value,key2=value2` (`MapStringString`); repeated flags merge.
    Map,
    /// `key=value` per occurrence, commas kept in the value (`MapStringStringNoSplit`).
    MapNoSplit,
    /// `Name=true,Other=false` (`MapStringBool`: `--feature-gates`).
    BoolMap,
    /// `signal<quantity,...` (`LangleSeparatedMapStringString`: eviction thresholds).
    LangleMap,
    /// `name:value,...` with repeated names collected (`ColonSeparatedMultimapStringString`).
    ColonMultimap,
    /// `numa:resource=quantity,...` (`ReservedMemoryVar`).
    ReservedMemory,
}

/// What deckhand does with a Go flag of [`GO_FLAGS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoFlagFate {
    /// Sets the KubeletConfiguration field at this dotted JSON path; that field's fate applies.
    Field(&'static str),
    /// Accepted and not used: a warning saying why when the value is not `default`.
    Ignored {
        /// The Go default, as pflag prints it (no warning for it).
        default: &'static str,
        /// Why it means nothing to deckhand.
        why: &'static str,
    },
}

/// One flag of the Go kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoFlag {
    /// The flag's name, without `--`.
    pub name: &'static str,
    /// Its value syntax.
    pub kind: GoFlagKind,
    /// What deckhand does with it.
    pub fate: GoFlagFate,
}

const fn field(name: &'static str, kind: GoFlagKind, path: &'static str) -> GoFlag {
    GoFlag {
        name,
        kind,
        fate: GoFlagFate::Field(path),
    }
}

const fn ignored(
    name: &'static str,
    kind: GoFlagKind,
    default: &'static str,
    why: &'static str,
) -> GoFlag {
    GoFlag {
        name,
        kind,
        fate: GoFlagFate::Ignored { default, why },
    }
}

const CADVISOR: &str =
    "a cadvisor flag the Go kubelet keeps only for compatibility; deckhand has no cadvisor";

use GoFlagKind::*;

/// The Go kubelet's flags (v1.36.3: `cmd/kubelet/app/options/options.go`, `globalflags*.go`,
/// component-base `logs/api/v1`) that [`super::Flags`] does not declare itself.
pub const GO_FLAGS: &[GoFlag] = &[
    // KubeletFlags: the process's own settings
    field("provider-id", Str, "providerID"),
    field("seccomp-default", Bool, "seccompDefault"),
    ignored("lock-file", Str, "", "deckhand takes no lock file: its service manager runs one deckhand per node"),
    ignored("exit-on-lock-contention", Bool, "false", "deckhand takes no lock file (--lock-file)"),
    ignored("experimental-mounter-path", Str, "", "deckhand mounts with the mount system call, not a mounter binary"),
    ignored("experimental-allocatable-ignore-eviction", Bool, "false", "allocatable always has the hard eviction thresholds taken off"),
    ignored("image-credential-provider-config", Str, "", "credential provider plugins are not implemented: an image whose registry needs one fails to pull with the registry's error (imagePullSecrets work)"),
    ignored("image-credential-provider-bin-dir", Str, "", "credential provider plugins are not implemented (--image-credential-provider-config)"),
    // KubeletConfiguration fields without a deckhand flag of their own
    field("enable-server", Bool, "enableServer"),
    field("sync-frequency", Duration, "syncFrequency"),
    field("http-check-frequency", Duration, "httpCheckFrequency"),
    field("manifest-url", Str, "staticPodURL"),
    field("manifest-url-header", ColonMultimap, "staticPodURLHeader"),
    field("fail-cgroupv1", Bool, "failCgroupV1"),
    field("authentication-token-webhook-cache-ttl", Duration, "authentication.webhook.cacheTTL"),
    field("authorization-webhook-cache-authorized-ttl", Duration, "authorization.webhook.cacheAuthorizedTTL"),
    field("authorization-webhook-cache-unauthorized-ttl", Duration, "authorization.webhook.cacheUnauthorizedTTL"),
    field("tls-cipher-suites", List, "tlsCipherSuites"),
    field("tls-min-version", Str, "tlsMinVersion"),
    field("registry-qps", Int, "registryPullQPS"),
    field("registry-burst", Int, "registryBurst"),
    field("event-qps", Int, "eventRecordQPS"),
    field("event-burst", Int, "eventBurst"),
    field("enable-debugging-handlers", Bool, "enableDebuggingHandlers"),
    field("contention-profiling", Bool, "enableContentionProfiling"),
    field("oom-score-adj", Int, "oomScoreAdj"),
    field("volume-plugin-dir", Str, "volumePluginDir"),
    field("streaming-connection-idle-timeout", Duration, "streamingConnectionIdleTimeout"),
    field("volume-stats-agg-period", Duration, "volumeStatsAggPeriod"),
    field("feature-gates", BoolMap, "featureGates"),
    field("system-cgroups", Str, "systemCgroups"),
    field("cgroup-root", Str, "cgroupRoot"),
    field("cpu-manager-policy", Str, "cpuManagerPolicy"),
    field("cpu-manager-policy-options", MapNoSplit, "cpuManagerPolicyOptions"),
    field("cpu-manager-reconcile-period", Duration, "cpuManagerReconcilePeriod"),
    field("qos-reserved", Map, "qosReserved"),
    field("topology-manager-policy", Str, "topologyManagerPolicy"),
    field("topology-manager-scope", Str, "topologyManagerScope"),
    field("topology-manager-policy-options", Map, "topologyManagerPolicyOptions"),
    field("runtime-request-timeout", Duration, "runtimeRequestTimeout"),
    field("hairpin-mode", Str, "hairpinMode"),
    field("pod-cidr", Str, "podCIDR"),
    field("runonce", Bool, "runOnce"),
    field("cpu-cfs-quota", Bool, "cpuCFSQuota"),
    field("cpu-cfs-quota-period", Duration, "cpuCFSQuotaPeriod"),
    field("enable-controller-attach-detach", Bool, "enableControllerAttachDetach"),
    field("make-iptables-util-chains", Bool, "makeIPTablesUtilChains"),
    field("allowed-unsafe-sysctls", List, "allowedUnsafeSysctls"),
    field("node-status-max-images", Int, "nodeStatusMaxImages"),
    field("kernel-memcg-notification", Bool, "kernelMemcgNotification"),
    field("local-storage-capacity-isolation", Bool, "localStorageCapacityIsolation"),
    field("max-open-files", Int, "maxOpenFiles"),
    field("kube-api-content-type", Str, "contentType"),
    field("kube-api-qps", Int, "kubeAPIQPS"),
    field("kube-api-burst", Int, "kubeAPIBurst"),
    field("serialize-image-pulls", Bool, "serializeImagePulls"),
    field("eviction-soft", LangleMap, "evictionSoft"),
    field("eviction-soft-grace-period", Map, "evictionSoftGracePeriod"),
    field("eviction-max-pod-grace-period", Int, "evictionMaxPodGracePeriod"),
    field("eviction-minimum-reclaim", Map, "evictionMinimumReclaim"),
    field("pods-per-core", Int, "podsPerCore"),
    field("protect-kernel-defaults", Bool, "protectKernelDefaults"),
    field("reserved-cpus", Str, "reservedSystemCPUs"),
    field("enforce-node-allocatable", List, "enforceNodeAllocatable"),
    field("system-reserved-cgroup", Str, "systemReservedCgroup"),
    field("kube-reserved-cgroup", Str, "kubeReservedCgroup"),
    field("memory-manager-policy", Str, "memoryManagerPolicy"),
    field("reserved-memory", ReservedMemory, "reservedMemory"),
    field("register-node", Bool, "registerNode"),
    // logging (component-base logs/api/v1 AddFlags, on the KubeletConfiguration's `logging`)
    field("logging-format", Str, "logging.format"),
    field("log-flush-frequency", Duration, "logging.flushFrequency"),
    field("vmodule", Str, "logging.vmodule"),
    field("log-text-split-stream", Bool, "logging.options.text.splitStream"),
    field("log-text-info-buffer-size", Str, "logging.options.text.infoBufferSize"),
    field("log-json-split-stream", Bool, "logging.options.json.splitStream"),
    field("log-json-info-buffer-size", Str, "logging.options.json.infoBufferSize"),
    // cadvisor's (globalflags_linux.go): the first kept, the others deprecated in Go
    ignored("housekeeping-interval", Duration, "10s", CADVISOR),
    ignored("application-metrics-count-limit", Int, "100", CADVISOR),
    ignored("boot-id-file", Str, "/proc/sys/kernel/random/boot_id", CADVISOR),
    ignored("container-hints", Str, "/etc/cadvisor/container_hints.json", CADVISOR),
    ignored("containerd", Str, "/run/containerd/containerd.sock", CADVISOR),
    ignored("containerd-namespace", Str, "k8s.io", CADVISOR),
    ignored("enable-load-reader", Bool, "false", CADVISOR),
    ignored("event-storage-age-limit", Str, "default=0", CADVISOR),
    ignored("event-storage-event-limit", Str, "default=0", CADVISOR),
    ignored("global-housekeeping-interval", Duration, "1m0s", CADVISOR),
    ignored("log-cadvisor-usage", Bool, "false", CADVISOR),
    ignored("machine-id-file", Str, "/etc/machine-id,/var/lib/dbus/machine-id", CADVISOR),
    ignored("storage-driver-user", Str, "root", CADVISOR),
    ignored("storage-driver-password", Str, "root", CADVISOR),
    ignored("storage-driver-host", Str, "localhost:8086", CADVISOR),
    ignored("storage-driver-db", Str, "cadvisor", CADVISOR),
    ignored("storage-driver-table", Str, "stats", CADVISOR),
    ignored("storage-driver-secure", Bool, "false", CADVISOR),
    ignored("storage-driver-buffer-duration", Duration, "1m0s", CADVISOR),
];

/// Adds every flag of [`GO_FLAGS`] to `cmd` as a hidden argument with its Go value syntax.
pub fn add_to(mut cmd: clap::Command) -> clap::Command {
    use clap::{Arg, ArgAction};
    for f in GO_FLAGS {
        // the id is the flag name: deckhand's own ids are field names, with `_`
        let mut a = Arg::new(f.name)
            .long(f.name)
            .hide(true)
            .action(ArgAction::Append)
            .value_name("VALUE")
            .allow_hyphen_values(true);
        if f.kind == Bool {
            // Go bools take `--x` or `--x=v`, never a separate value
            a = a
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true");
        } else {
            a = a.num_args(1);
        }
        cmd = cmd.arg(a);
    }
    cmd
}

/// The Go flags given on the command line, with their values in order.
pub fn given(matches: &clap::ArgMatches) -> Vec<(&'static GoFlag, Vec<String>)> {
    GO_FLAGS
        .iter()
        .filter_map(|f| {
            let values: Vec<String> = matches.get_many::<String>(f.name)?.cloned().collect();
            Some((f, values))
        })
        .collect()
}

/// pflag's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

fn split_list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// The JSON value of `values` (every occurrence of the flag, in order) for `kind`, as the Go
/// flag would set the field.
///
/// Errors: a value that does not parse, in the Go flag's terms.
pub fn json_value(kind: GoFlagKind, values: &[String]) -> Result<Value, String> {
    let last = values.last().map(String::as_str).unwrap_or("");
    let pairs = |sep: char| -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for v in values {
            for e in split_list(v) {
                let (k, val) = e
                    .split_once(sep)
                    .ok_or_else(|| format!("{e:?}: expected key{sep}value"))?;
                out.push((k.trim().to_string(), val.trim().to_string()));
            }
        }
        Ok(out)
    };
    Ok(match kind {
        Bool => Value::Bool(parse_bool(last).ok_or_else(|| format!("{last:?}: not a boolean"))?),
        Str => Value::String(last.to_string()),
        Int => json!(last
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("{last:?}: not an integer"))?),
        Duration => {
            super::parse_go_duration(last)?;
            Value::String(last.to_string())
        }
        List => Value::Array(
            values
                .iter()
                .flat_map(|v| split_list(v))
                .map(|e| Value::String(e.to_string()))
                .collect(),
        ),
        Map => Value::Object(
            pairs('=')?
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        ),
        LangleMap => Value::Object(
            pairs('<')?
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect(),
        ),
        MapNoSplit => {
            let mut m = Map::new();
            for v in values {
                let (k, val) = v
                    .split_once('=')
                    .ok_or_else(|| format!("{v:?}: expected key=value"))?;
                m.insert(k.trim().to_string(), Value::String(val.trim().to_string()));
            }
            Value::Object(m)
        }
        BoolMap => {
            let mut m = Map::new();
            for (k, v) in pairs('=')? {
                let b = parse_bool(&v).ok_or_else(|| format!("{k}={v}: not a boolean"))?;
                m.insert(k, Value::Bool(b));
            }
            Value::Object(m)
        }
        ColonMultimap => {
            let mut m: Map<String, Value> = Map::new();
            for (k, v) in pairs(':')? {
                match m.entry(k).or_insert_with(|| Value::Array(Vec::new())) {
                    Value::Array(a) => a.push(Value::String(v)),
                    _ => unreachable!("only arrays are inserted"),
                }
            }
            Value::Object(m)
        }
        ReservedMemory => {
            let mut out = Vec::new();
            for v in values {
                let (numa, limits) = v.split_once(':').ok_or_else(|| {
                    format!("{v:?}: expected <NUMA node>:<resource>=<quantity>,...")
                })?;
                let numa: i64 = numa
                    .trim()
                    .parse()
                    .map_err(|_| format!("{numa:?}: not a NUMA node number"))?;
                let mut l = Map::new();
                for e in split_list(limits) {
                    let (k, q) = e
                        .split_once('=')
                        .ok_or_else(|| format!("{e:?}: expected <resource>=<quantity>"))?;
                    l.insert(k.trim().to_string(), Value::String(q.trim().to_string()));
                }
                out.push(json!({"numaNode": numa, "limits": l}));
            }
            Value::Array(out)
        }
    })
}

/// What the given Go flags do: the JSON merge patch of the fields they set (nested objects by
/// their dotted paths), the `(flag, value, field path)` of each, and the warnings of the
/// ignored ones set to anything but their default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GoFlagsPatch {
    /// A merge patch over the configuration document.
    pub patch: Map<String, Value>,
    /// `(flag name, value as written, field path)` of every field-setting flag.
    pub fields: Vec<(&'static str, String, &'static str)>,
    /// Warnings for ignored flags.
    pub warnings: Vec<String>,
}

/// Builds the [`GoFlagsPatch`] of `given` ([`given`]'s answer).
///
/// Errors: a value that does not parse, naming the flag.
pub fn patch(given: &[(&'static GoFlag, Vec<String>)]) -> Result<GoFlagsPatch, String> {
    let mut out = GoFlagsPatch::default();
    for (f, values) in given {
        let shown = values.join(",");
        match f.fate {
            GoFlagFate::Ignored { default, why } => {
                let is_default = match f.kind {
                    Bool => parse_bool(&shown) == parse_bool(default),
                    _ => shown == default,
                };
                if !is_default {
                    out.warnings
                        .push(format!("flag --{}={shown} is not used: {why}", f.name));
                }
            }
            GoFlagFate::Field(path) => {
                let v = json_value(f.kind, values)
                    .map_err(|e| format!("invalid argument for --{}: {e}", f.name))?;
                let mut keys: Vec<&str> = path.split('.').collect();
                let leaf = keys.pop().unwrap_or(path);
                let mut obj = &mut out.patch;
                for k in keys {
                    obj = obj
                        .entry(k.to_string())
                        .or_insert_with(|| Value::Object(Map::new()))
                        .as_object_mut()
                        .expect("only objects are inserted on the way to a leaf");
                }
                obj.insert(leaf.to_string(), v);
                out.fields.push((f.name, shown, path));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<GoFlagsPatch, String> {
        let cmd = add_to(clap::Command::new("t").no_binary_name(true));
        let m = cmd.try_get_matches_from(args).map_err(|e| e.to_string())?;
        patch(&given(&m))
    }

    #[test]
    fn every_go_flag_is_listed_once() {
        let mut names: Vec<&str> = GO_FLAGS.iter().map(|f| f.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a flag is listed twice");
    }

    #[test]
    fn values_become_the_fields_json_as_the_go_flag_types_parse_them() {
        let cases: &[(&str, &[&str], Value)] = &[
            (
                "bool alone",
                &["--seccomp-default"],
                json!({"seccompDefault": true}),
            ),
            (
                "bool =false",
                &["--register-node=false"],
                json!({"registerNode": false}),
            ),
            ("bool =F", &["--runonce=F"], json!({"runOnce": false})),
            (
                "string, separate value",
                &["--cgroup-root", "/kubelet"],
                json!({"cgroupRoot": "/kubelet"}),
            ),
            (
                "string with =",
                &["--provider-id=kind://docker/kind/kind-worker"],
                json!({"providerID": "kind://docker/kind/kind-worker"}),
            ),
            (
                "duration",
                &["--runtime-request-timeout=15m"],
                json!({"runtimeRequestTimeout": "15m"}),
            ),
            ("int", &["--kube-api-qps=50"], json!({"kubeAPIQPS": 50})),
            (
                "negative int",
                &["--oom-score-adj", "-999"],
                json!({"oomScoreAdj": -999}),
            ),
            (
                "list, repeated",
                &[
                    "--allowed-unsafe-sysctls=net.core.*,kernel.msg*",
                    "--allowed-unsafe-sysctls=kernel.shm*",
                ],
                json!({"allowedUnsafeSysctls": ["net.core.*", "kernel.msg*", "kernel.shm*"]}),
            ),
            (
                "feature gates",
                &["--feature-gates=KubeletPSI=true,SidecarContainers=false"],
                json!({"featureGates": {"KubeletPSI": true, "SidecarContainers": false}}),
            ),
            (
                "langle map",
                &["--eviction-soft=memory.available<1.5Gi"],
                json!({"evictionSoft": {"memory.available": "1.5Gi"}}),
            ),
            (
                "map",
                &["--eviction-soft-grace-period=memory.available=1m30s"],
                json!({"evictionSoftGracePeriod": {"memory.available": "1m30s"}}),
            ),
            (
                "colon multimap",
                &[
                    "--manifest-url-header=a:hello,b:again",
                    "--manifest-url-header=b:beautiful",
                ],
                json!({"staticPodURLHeader": {"a": ["hello"], "b": ["again", "beautiful"]}}),
            ),
            (
                "no-split map keeps commas",
                &["--cpu-manager-policy-options=full-pcpus-only=true,x"],
                json!({"cpuManagerPolicyOptions": {"full-pcpus-only": "true,x"}}),
            ),
            (
                "reserved memory",
                &["--reserved-memory", "0:memory=1Gi,hugepages-1M=2Gi"],
                json!({"reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi", "hugepages-1M": "2Gi"}}]}),
            ),
            (
                "nested logging fields",
                &["--logging-format=json", "--log-json-split-stream"],
                json!({"logging": {"format": "json", "options": {"json": {"splitStream": true}}}}),
            ),
        ];
        for (case, args, want) in cases {
            let p = parse(args).unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(&Value::Object(p.patch), want, "{case}");
            assert!(p.warnings.is_empty(), "{case}");
        }
    }

    #[test]
    fn bad_values_name_the_flag() {
        for (args, want) in [
            (
                &["--kube-api-qps=fast"][..],
                "invalid argument for --kube-api-qps: \"fast\": not an integer",
            ),
            (
                &["--sync-frequency=soon"],
                "invalid argument for --sync-frequency",
            ),
            (
                &["--feature-gates=A=maybe"],
                "invalid argument for --feature-gates: A=maybe: not a boolean",
            ),
            (
                &["--eviction-soft=memory.available"],
                "invalid argument for --eviction-soft",
            ),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(want), "{args:?}: {e}");
        }
        // a Go bool takes no separate value: the next word is not its value
        assert!(parse(&["--seccomp-default", "false"]).is_err());
    }

    #[test]
    fn ignored_flags_warn_only_away_from_their_default() {
        let p = parse(&[
            "--lock-file=/var/run/lock/kubelet.lock",
            "--exit-on-lock-contention=false",
            "--housekeeping-interval=10s",
        ])
        .unwrap();
        assert_eq!(
            p.warnings,
            vec!["flag --lock-file=/var/run/lock/kubelet.lock is not used: deckhand takes no lock file: its service manager runs one deckhand per node".to_string()]
        );
        assert!(p.patch.is_empty());
        let p = parse(&["--exit-on-lock-contention"]).unwrap();
        assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    }

    /// Every flag the Go kubelet's `--help` lists at the pinned version
    /// (tests/data/kubelet-v1.36.3-flags.txt) is known to deckhand's command line: a command
    /// line written for /usr/bin/kubelet never fails on a flag name.
    #[test]
    fn every_flag_of_the_go_kubelet_is_accepted() {
        let list = include_str!("../../tests/data/kubelet-v1.36.3-flags.txt");
        let mut checked = 0;
        for line in list
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        {
            let (name, ty) = line.split_once(' ').unwrap();
            let value = match (name, ty) {
                ("help" | "version", _) => continue,
                (_, "bool") => None,
                ("authorization-mode", _) => Some("Webhook"),
                ("cgroup-driver", _) => Some("cgroupfs"),
                (_, "ip") => Some("127.0.0.1"),
                (_, "duration") => Some("10s"),
                (_, "int" | "int32" | "Level") => Some("1"),
                (_, "mapStringString") => Some("cpu=1"),
                (_, "mapStringBool") => Some("A=true"),
                (_, "colonSeparatedMultimapStringString") => Some("a:b"),
                (_, "reserved") => Some("0:memory=1Gi"),
                (_, "quantity") => Some("10Mi"),
                _ => Some("x"),
            };
            let arg = match value {
                None => format!("--{name}"),
                Some(v) => format!("--{name}={v}"),
            };
            let r = super::super::Flags::command_with_defaults()
                .try_get_matches_from(["deckhand", arg.as_str()]);
            if let Err(e) = r {
                assert!(
                    e.kind() != clap::error::ErrorKind::UnknownArgument,
                    "{arg}: {e}"
                );
            }
            checked += 1;
        }
        assert!(checked > 140, "only {checked} flags in the list");
    }
}
