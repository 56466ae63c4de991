//! Property-based end-to-end test of the pod surface, against the real local cluster of
//! hack/local-up.sh: proptest generates random but valid pod specs (1-3 containers, 0-2 init
//! containers or sidecars, every command shape, restart policy, probe kind, volume kind, mount,
//! env source, resource notation and security setting this file knows, with odd names, Unicode
//! and special characters wherever the API allows them), each is sent through the real API
//! server to deckhand's node, and every pod the API server accepts must reach a state "with a
//! reason" within 90 s: Succeeded or Failed, or every container running, terminated, or waiting
//! with a non-transitional reason (CrashLoopBackOff, CreateContainerConfigError, ...), or a
//! repeated Warning event that says why it cannot start. A few status invariants hold at that
//! moment and after a random dwell (names of the container statuses, ready only when running or,
//! for an init container, exited 0, no restarts under `restartPolicy: Never`, Succeeded only
//! with every container exited 0, a pod IP when Running). Then the pod is deleted with grace 0
//! and must be gone from the API server, the runtime, deckhand's pod directory and the pod log
//! directory within 60 s.
//!
//! Across the run: deckhand's pid never changes, the part of its log written during the run
//! names no panic, the pod cgroups of the deleted pods are gone from every hierarchy within 30 s
//! of the last delete, and no entry whose name carries the run's marker (`fz` + 4 characters, in
//! every generated name and path) appears in the host directories a path escape would reach
//! (some containers plant symlinks named like their pod's subPaths, pointing there).
//! Specs the API server refuses are counted by cause and printed; the run fails if it refuses
//! more than a quarter of them (the generator has gone wrong).
//!
//! The cases are driven by hand (each is async and talks to the cluster): case `i` is drawn from
//! a proptest `TestRunner` seeded from the run's seed and `i`, so one case replays alone.
//! Knobs: `FUZZ_PODS` (default 40), `FUZZ_SEED` (default random, printed), `FUZZ_CASE` (only
//! this case index), `FUZZ_PARALLEL` (pods in flight, default 8).
//!
//! Run with `cargo test --profile ci --test e2e -- fuzz:: --nocapture` after `hack/local-up.sh`.

use crate::common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Event, Pod, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, LogParams, PostParams};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time a pod gets to reach a state with a reason.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Time a deleted pod gets to be gone from the API server, the runtime, and its directories.
const GONE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time the pod cgroups of the run's deleted pods get to be gone, at the end of the run (the Go
/// kubelet's housekeeping removes an orphaned pod cgroup within seconds).
const CGROUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Failures printed in full (spec and diagnostics); the others in one line each.
const FULL_REPORTS: usize = 5;
/// After this long, main containers that wait for a running sidecar are a state with a reason.
const SIDECAR_PATIENCE: Duration = Duration::from_secs(20);
/// After this long in a transitional state, the pod's Warning events are looked at too.
const EVENTS_AFTER: Duration = Duration::from_secs(8);

// ---------------------------------------------------------------------------------------------
// tables the generator picks from
// ---------------------------------------------------------------------------------------------

/// Literal env values and annotation values: Unicode, shell and expansion syntax, control
/// characters (never `'`-free assumptions: these go through the API, not through a script).
const ODD_VALUES: &[&str] = &[
    "",
    " ",
    "plain",
    "héllo wörld",
    "日本語のテキスト",
    "🙂🚀🌍",
    "family 👩\u{200d}👩\u{200d}👧 zwj",
    "rtl \u{202e}txet\u{202c} end",
    "quote ' double \" back \\ tick `",
    "$(FZ_A0)",
    "$$(FZ_A0)",
    "$(",
    "$(FZ_UNDEFINED)",
    "${HOME} $HOME",
    "%s %d %n %%",
    "line1\nline2\n",
    "tab\there",
    "trailing space ",
    "=",
    "a=b=c",
    "ctl \u{1}\u{7f}\u{1b}[31m",
    "../../../etc/passwd",
    "\u{feff}bom",
    "combining e\u{301}\u{301}",
    "🙂",
];

/// Env var names (a per-container index is appended). Dots and dashes are valid since
/// RelaxedEnvironmentVariableValidation (GA in 1.34).
const ENV_NAMES: &[&str] = &["FZ_A", "fz_lower", "_FZ_U", "FZ9_", "FZ.dot", "FZ-dash"];

/// `valueFrom.fieldRef` paths for env.
const ENV_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels['app']",
    "metadata.labels['fuzz-marker']",
    "metadata.annotations['fz-absent']",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// `fieldRef` paths a downwardAPI volume item may use.
const VOLUME_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.labels",
    "metadata.annotations",
    "metadata.labels['app']",
    "metadata.annotations['fz-absent']",
];

/// `resourceFieldRef` resources and whether each is a CPU one (its divisors differ).
const RESOURCE_FIELDS: &[(&str, bool)] = &[
    ("limits.cpu", true),
    ("requests.cpu", true),
    ("limits.memory", false),
    ("requests.memory", false),
    ("limits.ephemeral-storage", false),
    ("requests.ephemeral-storage", false),
];
const CPU_DIVISORS: &[&str] = &["1m", "1"];
const BYTE_DIVISORS: &[&str] = &["1", "1k", "1M", "1Ki", "1Mi", "1Gi"];

/// CPU quantities (notation, millicores): every one ≤ 100m.
const CPU: &[(&str, u64)] = &[
    ("1m", 1),
    ("5m", 5),
    ("0.01", 10),
    ("25m", 25),
    ("0.05", 50),
    ("5e-2", 50),
    ("50m", 50),
    ("100m", 100),
    ("0.1", 100),
];
/// Memory quantities (notation, bytes): every one in 16Mi..64Mi.
const MEMORY: &[(&str, u64)] = &[
    ("16Mi", 16 << 20),
    ("17M", 17_000_000),
    ("20Mi", 20 << 20),
    ("24e6", 24_000_000),
    ("32768Ki", 32 << 20),
    ("0.03125Gi", 32 << 20),
    ("50M", 50_000_000),
    ("48Mi", 48 << 20),
    ("64Mi", 64 << 20),
    ("67108864", 64 << 20),
];
/// Ephemeral storage quantities (notation, bytes): small, the node's root is a 1 GiB tmpfs.
const EPHEMERAL: &[(&str, u64)] = &[
    ("1Mi", 1 << 20),
    ("2M", 2_000_000),
    ("8Mi", 8 << 20),
    ("16Mi", 16 << 20),
];
/// emptyDir `sizeLimit`s.
const SIZE_LIMITS: &[&str] = &["1Mi", "64Mi", "1Gi", "500k", "100M"];
/// File modes (`defaultMode`, `items[].mode`), all within 0..=0777.
const MODES: &[i64] = &[
    0o400, 0o440, 0o444, 0o600, 0o644, 0o664, 0o700, 0o755, 0o777, 0o000, 0o111,
];
/// User and group ids.
const IDS: &[i64] = &[0, 1, 1000, 1001, 65534, 65535, 123_456, 2_147_483_647];

/// `exec` probe commands (`{m}` is the run's marker).
const EXEC_PROBES: &[&[&str]] = &[
    &["true"],
    &["false"],
    &["sh", "-c", "exit 0"],
    &["sh", "-c", "exit 3"],
    &["cat", "/etc/passwd"],
    &["cat", "/{m}-absent"],
    &["sh", "-c", "echo ünï; sleep 4"],
    &["/{m}-no-such-binary"],
];
/// httpGet probe paths (the servers are `httpd -h /etc`: `/passwd` answers 200).
const HTTP_PATHS: &[&str] = &[
    "/passwd",
    "/passwd",
    "/",
    "/nope",
    "/ünï/🙂?q=ä&x=1#frag",
    "/passwd?%zz",
    "//double//slash",
    "noslash",
    "/with space",
];
const HEADER_NAMES: &[&str] = &[
    "X-Fz",
    "x-lower",
    "Host",
    "User-Agent",
    "Accept",
    "X-A-B-C-1",
    "Connection",
];
const HEADER_VALUES: &[&str] = &[
    "v",
    "ünïcödé",
    "",
    " spaced ",
    "a\tb",
    "🙂",
    "line\r\nX-Injected: 1",
    "close",
];

/// Things a container prints before its tail.
const PRINTS: &[&str] = &[
    "echo 'fz: héllo wörld 日本語 🙂 \u{202e}rtl'",
    "printf 'no trailing newline ü'",
    "echo 'to stderr ✓' >&2",
    "env | sort | head -c 4000",
    "printf '\\377\\376\\000binary\\n'",
    "head -c 20000 /dev/zero | tr '\\0' x; echo",
    "i=0; while [ $i -lt 200 ]; do echo line $i; i=$((i+1)); done",
    "id; cat /etc/hostname /etc/hosts /etc/resolv.conf 2>&1 | head -50",
    "printf '\\033[31mansi\\033[0m\\r\\n'",
];

/// Relative paths for `subPath` and `items[].path` (`{m}` marker, `{k}` a unique index); none
/// has a `..` element or starts with `..`.
const REL_PATHS: &[&str] = &[
    "{m}-{k}",
    "{m}/ünï/çødé-{k}",
    "./{m}-dot-{k}",
    "{m} space {k}",
    "{m}...{k}",
    "{m}-{k}/..{m}-hidden",
    ".{m}-{k}",
    "{m}-{k}/a/b/c/d/e",
    "🙂{m}-{k}",
    "{m}-{k}-ßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßßß",
];
/// Only for `subPath`: a trailing slash.
const SUBPATH_ONLY: &str = "{m}-{k}/";
/// Mount paths (`{m}` marker, `{k}` the mount's index in its container).
const MOUNT_PATHS: &[&str] = &[
    "/{m}/m{k}",
    "/mnt/{m}-ünï-{k}",
    "/tmp/{m}-{k}",
    "/{m}-{k}/deep/er/path",
    "/var/{m} space {k}",
    "/{m}/m0/nested{k}",
    "/{m}-t{k}/",
    "//{m}//double{k}",
];
const WORKING_DIRS: &[&str] = &["/", "/tmp", "/{m}-wd", "/{m}-wd/ünï deep"];
/// Where a planted symlink points: the host directories the escape check lists.
const PLANT_TARGETS: &[&str] = &["/tmp", "/", "/etc", "/root", "/var/lib", "/var/tmp", "/run"];
/// Host directories listed (one level) before and after the run.
const HOST_DIRS: &[&str] = &[
    "/", "/tmp", "/etc", "/root", "/var", "/var/lib", "/var/log", "/var/tmp", "/run", "/dev/shm",
    "/home", "/mnt", "/opt", "/srv",
];

// ---------------------------------------------------------------------------------------------
// the generated shape of a pod
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum NameStyle {
    Short,
    Max63,
    DigitsFirst,
    Dashes,
    /// Pods only: a subdomain with dots.
    Dotted,
    /// Pods only: this many characters (64..=253), no dots.
    Long(usize),
}

#[derive(Debug, Clone)]
enum Tail {
    Exit(u8),
    Sleep,
    SleepThenExit(u8, u8),
    /// `httpd` on each of the container's ports, then sleep.
    Serve,
}

#[derive(Debug, Clone)]
struct ScriptGen {
    prints: Vec<usize>,
    write: bool,
    /// Plant symlinks named like the pod's subPaths, pointing at this target.
    plant: Option<usize>,
    tail: Tail,
    /// The tail of a (non-sidecar) init container.
    init_tail: Tail,
    /// command / args shape.
    form: usize,
}

#[derive(Debug, Clone)]
enum ValueGen {
    Table(usize),
    Random(String),
    Nul,
}

#[derive(Debug, Clone)]
enum EnvGen {
    Literal {
        name: usize,
        value: ValueGen,
    },
    Field {
        name: usize,
        field: usize,
    },
    Resource {
        name: usize,
        res: usize,
        divisor: Option<usize>,
        own_name: bool,
    },
    Key {
        name: usize,
        secret: bool,
        missing_obj: bool,
        key: usize,
        missing_key: bool,
        optional: Option<bool>,
    },
}

#[derive(Debug, Clone)]
struct EnvFromGen {
    secret: bool,
    missing: bool,
    prefix: Option<usize>,
    optional: Option<bool>,
}

#[derive(Debug, Clone)]
struct ItemGen {
    key: usize,
    path: usize,
    mode: Option<usize>,
}

#[derive(Debug, Clone)]
enum DItemGen {
    Field {
        field: usize,
        path: usize,
        mode: Option<usize>,
    },
    Res {
        res: usize,
        divisor: Option<usize>,
        ctr: usize,
        path: usize,
        mode: Option<usize>,
    },
}

#[derive(Debug, Clone)]
enum SrcGen {
    ConfigMap {
        items: Option<Vec<ItemGen>>,
        optional: Option<bool>,
    },
    Secret {
        items: Option<Vec<ItemGen>>,
        optional: Option<bool>,
    },
    Downward(Vec<DItemGen>),
    Token {
        audience: bool,
        expiration: Option<i64>,
    },
}

#[derive(Debug, Clone)]
enum VolKind {
    Empty {
        medium: Option<bool>,
        size: Option<usize>,
    },
    ConfigMap {
        missing: bool,
        items: Option<Vec<ItemGen>>,
        mode: Option<usize>,
        optional: Option<bool>,
    },
    Secret {
        missing: bool,
        items: Option<Vec<ItemGen>>,
        mode: Option<usize>,
        optional: Option<bool>,
    },
    Projected {
        sources: Vec<SrcGen>,
        mode: Option<usize>,
    },
    Downward {
        items: Vec<DItemGen>,
        mode: Option<usize>,
    },
}

#[derive(Debug, Clone)]
struct VolGen {
    name: NameStyle,
    kind: VolKind,
}

#[derive(Debug, Clone)]
enum SubGen {
    None,
    Path(usize),
    /// A file of the volume (an item's path or a key), when it has one.
    Item(usize),
    /// `subPathExpr` from an env var: a literal relative path, or the pod's name.
    Expr {
        literal: Option<usize>,
    },
}

#[derive(Debug, Clone)]
struct MountGen {
    vol: usize,
    path: usize,
    sub: SubGen,
    read_only: Option<bool>,
    propagation: Option<bool>,
}

/// (request, limit) indices per resource.
#[derive(Debug, Clone)]
struct ResGen {
    cpu: (Option<usize>, Option<usize>),
    mem: (Option<usize>, Option<usize>),
    eph: (Option<usize>, Option<usize>),
}

#[derive(Debug, Clone)]
struct CtrScGen {
    user: Option<usize>,
    group: Option<usize>,
    /// Keep `runAsGroup` even without any `runAsUser` (containerd refuses that).
    lone_group: bool,
    non_root: Option<bool>,
    ro_root: Option<bool>,
    no_escalation: Option<bool>,
    drop_all: bool,
    add_net_admin: bool,
    seccomp: Option<bool>,
}

#[derive(Debug, Clone)]
struct PodScGen {
    user: Option<usize>,
    group: Option<usize>,
    /// Keep `runAsGroup` even without `runAsUser` (containerd refuses that).
    lone_group: bool,
    fs_group: Option<usize>,
    supplemental: Vec<usize>,
    non_root: Option<bool>,
    fs_group_always: Option<bool>,
    sysctls: bool,
}

#[derive(Debug, Clone)]
enum PortRef {
    OwnNamed(usize),
    Pod(usize),
    Unserved(u16),
}

#[derive(Debug, Clone)]
enum HandlerGen {
    Exec(usize),
    Http {
        port: PortRef,
        path: usize,
        headers: Vec<(usize, usize)>,
        https: bool,
    },
    Tcp(PortRef),
    Grpc(PortRef),
}

#[derive(Debug, Clone)]
struct ProbeGen {
    handler: HandlerGen,
    initial: i64,
    period: i64,
    timeout: i64,
    success: i64,
    failure: i64,
    grace: Option<i64>,
}

#[derive(Debug, Clone)]
struct CtrGen {
    name: NameStyle,
    script: ScriptGen,
    /// One entry per port: its name style, if named.
    ports: Vec<Option<usize>>,
    env: Vec<EnvGen>,
    env_from: Vec<EnvFromGen>,
    mounts: Vec<MountGen>,
    res: ResGen,
    sc: Option<CtrScGen>,
    /// liveness, readiness, startup
    probes: (Option<ProbeGen>, Option<ProbeGen>, Option<ProbeGen>),
    /// postStart, preStop
    hooks: (Option<usize>, Option<usize>),
    working_dir: Option<usize>,
    pull_policy: Option<usize>,
    /// Init containers only: a sidecar (`restartPolicy: Always`).
    sidecar: bool,
}

#[derive(Debug, Clone)]
struct PodExtras {
    dns: Option<usize>,
    host_aliases: bool,
    hostname: Option<usize>,
    service_links: Option<bool>,
    automount_token: Option<bool>,
    share_pid: Option<bool>,
}

#[derive(Debug, Clone)]
struct PodGen {
    name: NameStyle,
    restart: &'static str,
    grace: Option<i64>,
    deadline: Option<i64>,
    labels: Vec<(usize, usize)>,
    annotations: Vec<(usize, ValueGen, Option<usize>)>,
    sc: Option<PodScGen>,
    volumes: Vec<VolGen>,
    inits: Vec<CtrGen>,
    ctrs: Vec<CtrGen>,
    extras: PodExtras,
    /// How long the pod stays after it settled, before it is deleted.
    dwell_ms: u64,
    fetch_logs: bool,
    port_base: u16,
}

// ---------------------------------------------------------------------------------------------
// strategies
// ---------------------------------------------------------------------------------------------

fn idx(n: usize) -> std::ops::Range<usize> {
    0..n
}

fn name_style() -> BoxedStrategy<NameStyle> {
    prop_oneof![
        6 => Just(NameStyle::Short),
        2 => Just(NameStyle::Max63),
        1 => Just(NameStyle::DigitsFirst),
        1 => Just(NameStyle::Dashes),
    ]
    .boxed()
}

fn pod_name_style() -> BoxedStrategy<NameStyle> {
    prop_oneof![
        5 => Just(NameStyle::Short),
        2 => Just(NameStyle::Max63),
        1 => Just(NameStyle::DigitsFirst),
        1 => Just(NameStyle::Dashes),
        1 => Just(NameStyle::Dotted),
        1 => (64usize..=253).prop_map(NameStyle::Long),
    ]
    .boxed()
}

fn opt<T: std::fmt::Debug + Clone + 'static>(
    p: f64,
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop::option::weighted(p, s).boxed()
}

fn value_gen() -> BoxedStrategy<ValueGen> {
    prop_oneof![
        24 => idx(ODD_VALUES.len()).prop_map(ValueGen::Table),
        12 => proptest::string::string_regex("\\PC{0,24}")
            .unwrap()
            .prop_map(ValueGen::Random),
        1 => Just(ValueGen::Nul),
    ]
    .boxed()
}

fn tail(init: bool) -> BoxedStrategy<Tail> {
    if init {
        prop_oneof![
            8 => Just(Tail::Exit(0)),
            3 => (1u8..=2).prop_map(|s| Tail::SleepThenExit(s, 0)),
            1 => (1u8..=255).prop_map(Tail::Exit),
        ]
        .boxed()
    } else {
        prop_oneof![
            4 => Just(Tail::Sleep),
            4 => Just(Tail::Serve),
            2 => Just(Tail::Exit(0)),
            2 => (1u8..=255).prop_map(Tail::Exit),
            2 => (1u8..=5, 0u8..=3).prop_map(|(s, c)| Tail::SleepThenExit(s, c)),
        ]
        .boxed()
    }
}

fn script_gen() -> BoxedStrategy<ScriptGen> {
    (
        prop::collection::vec(idx(PRINTS.len()), 0..=3),
        prop::bool::weighted(0.6),
        opt(0.12, idx(PLANT_TARGETS.len())),
        tail(false),
        tail(true),
        idx(4),
    )
        .prop_map(|(prints, write, plant, tail, init_tail, form)| ScriptGen {
            prints,
            write,
            plant,
            tail,
            init_tail,
            form,
        })
        .boxed()
}

fn env_gen() -> BoxedStrategy<EnvGen> {
    let name = || idx(ENV_NAMES.len());
    prop_oneof![
        6 => (name(), value_gen()).prop_map(|(name, value)| EnvGen::Literal { name, value }),
        3 => (name(), idx(ENV_FIELDS.len())).prop_map(|(name, field)| EnvGen::Field { name, field }),
        2 => (name(), idx(RESOURCE_FIELDS.len()), opt(0.7, idx(6)), any::<bool>()).prop_map(
            |(name, res, divisor, own_name)| EnvGen::Resource { name, res, divisor, own_name }
        ),
        3 => (
            name(),
            any::<bool>(),
            prop::bool::weighted(0.06),
            idx(8),
            prop::bool::weighted(0.05),
            opt(0.6, any::<bool>()),
        )
            .prop_map(|(name, secret, missing_obj, key, missing_key, optional)| EnvGen::Key {
                name,
                secret,
                missing_obj,
                key,
                missing_key,
                optional,
            }),
    ]
    .boxed()
}

fn env_from_gen() -> BoxedStrategy<EnvFromGen> {
    (
        any::<bool>(),
        prop::bool::weighted(0.1),
        opt(0.6, idx(3)),
        opt(0.5, any::<bool>()),
    )
        .prop_map(|(secret, missing, prefix, optional)| EnvFromGen {
            secret,
            missing,
            prefix,
            optional,
        })
        .boxed()
}

fn item_gen() -> BoxedStrategy<ItemGen> {
    (idx(16), idx(REL_PATHS.len()), opt(0.4, idx(MODES.len())))
        .prop_map(|(key, path, mode)| ItemGen { key, path, mode })
        .boxed()
}

fn items_gen() -> BoxedStrategy<Option<Vec<ItemGen>>> {
    opt(0.5, prop::collection::vec(item_gen(), 1..=3))
}

fn ditem_gen() -> BoxedStrategy<DItemGen> {
    prop_oneof![
        3 => (idx(VOLUME_FIELDS.len()), idx(REL_PATHS.len()), opt(0.3, idx(MODES.len())))
            .prop_map(|(field, path, mode)| DItemGen::Field { field, path, mode }),
        1 => (
            idx(RESOURCE_FIELDS.len()),
            opt(0.7, idx(6)),
            idx(3),
            idx(REL_PATHS.len()),
            opt(0.3, idx(MODES.len())),
        )
            .prop_map(|(res, divisor, ctr, path, mode)| DItemGen::Res { res, divisor, ctr, path, mode }),
    ]
    .boxed()
}

fn src_gen() -> BoxedStrategy<SrcGen> {
    prop_oneof![
        2 => (items_gen(), opt(0.4, any::<bool>()))
            .prop_map(|(items, optional)| SrcGen::ConfigMap { items, optional }),
        2 => (items_gen(), opt(0.4, any::<bool>()))
            .prop_map(|(items, optional)| SrcGen::Secret { items, optional }),
        2 => prop::collection::vec(ditem_gen(), 1..=3).prop_map(SrcGen::Downward),
        1 => (any::<bool>(), opt(0.5, 600i64..=7200))
            .prop_map(|(audience, expiration)| SrcGen::Token { audience, expiration }),
    ]
    .boxed()
}

fn vol_gen() -> BoxedStrategy<VolGen> {
    let kind = prop_oneof![
        4 => (opt(0.7, any::<bool>()), opt(0.4, idx(SIZE_LIMITS.len())))
            .prop_map(|(medium, size)| VolKind::Empty { medium, size }),
        2 => (prop::bool::weighted(0.1), items_gen(), opt(0.4, idx(MODES.len())), opt(0.5, any::<bool>()))
            .prop_map(|(missing, items, mode, optional)| VolKind::ConfigMap { missing, items, mode, optional }),
        2 => (prop::bool::weighted(0.1), items_gen(), opt(0.4, idx(MODES.len())), opt(0.5, any::<bool>()))
            .prop_map(|(missing, items, mode, optional)| VolKind::Secret { missing, items, mode, optional }),
        2 => (prop::collection::vec(src_gen(), 1..=3), opt(0.4, idx(MODES.len())))
            .prop_map(|(sources, mode)| VolKind::Projected { sources, mode }),
        1 => (prop::collection::vec(ditem_gen(), 1..=4), opt(0.4, idx(MODES.len())))
            .prop_map(|(items, mode)| VolKind::Downward { items, mode }),
    ];
    (name_style(), kind)
        .prop_map(|(name, kind)| VolGen { name, kind })
        .boxed()
}

fn mount_gen() -> BoxedStrategy<MountGen> {
    let sub = prop_oneof![
        4 => Just(SubGen::None),
        4 => idx(REL_PATHS.len() + 1).prop_map(SubGen::Path),
        2 => any::<usize>().prop_map(SubGen::Item),
        1 => opt(0.6, idx(REL_PATHS.len())).prop_map(|literal| SubGen::Expr { literal }),
    ];
    (
        any::<usize>(),
        idx(MOUNT_PATHS.len()),
        sub,
        opt(0.5, any::<bool>()),
        opt(0.1, any::<bool>()),
    )
        .prop_map(|(vol, path, sub, read_only, propagation)| MountGen {
            vol,
            path,
            sub,
            read_only,
            propagation,
        })
        .boxed()
}

fn res_gen() -> BoxedStrategy<ResGen> {
    let pair = |n: usize, p: f64| (opt(p, idx(n)), opt(p, idx(n)));
    (
        pair(CPU.len(), 0.5),
        pair(MEMORY.len(), 0.5),
        pair(EPHEMERAL.len(), 0.15),
    )
        .prop_map(|(cpu, mem, eph)| ResGen { cpu, mem, eph })
        .boxed()
}

fn ctr_sc_gen() -> BoxedStrategy<CtrScGen> {
    (
        (
            opt(0.5, idx(IDS.len())),
            opt(0.4, idx(IDS.len())),
            prop::bool::weighted(0.1),
        ),
        opt(0.15, any::<bool>()),
        opt(0.4, any::<bool>()),
        opt(0.5, prop::bool::weighted(0.8)),
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.25),
        opt(0.15, any::<bool>()),
    )
        .prop_map(
            |(
                (user, group, lone_group),
                non_root,
                ro_root,
                no_escalation,
                drop_all,
                add_net_admin,
                seccomp,
            )| {
                CtrScGen {
                    user,
                    group,
                    lone_group,
                    non_root,
                    ro_root,
                    no_escalation,
                    drop_all,
                    add_net_admin,
                    seccomp,
                }
            },
        )
        .boxed()
}

fn pod_sc_gen() -> BoxedStrategy<PodScGen> {
    (
        (
            opt(0.4, idx(IDS.len())),
            opt(0.3, idx(IDS.len())),
            prop::bool::weighted(0.1),
        ),
        opt(0.4, idx(IDS.len())),
        prop::collection::vec(idx(IDS.len()), 0..=2),
        opt(0.1, any::<bool>()),
        opt(0.2, any::<bool>()),
        prop::bool::weighted(0.15),
    )
        .prop_map(
            |(
                (user, group, lone_group),
                fs_group,
                supplemental,
                non_root,
                fs_group_always,
                sysctls,
            )| PodScGen {
                user,
                group,
                lone_group,
                fs_group,
                supplemental,
                non_root,
                fs_group_always,
                sysctls,
            },
        )
        .boxed()
}

fn port_ref() -> BoxedStrategy<PortRef> {
    prop_oneof![
        3 => any::<usize>().prop_map(PortRef::OwnNamed),
        3 => any::<usize>().prop_map(PortRef::Pod),
        1 => (1u16..=65535).prop_map(PortRef::Unserved),
    ]
    .boxed()
}

fn probe_gen() -> BoxedStrategy<ProbeGen> {
    let handler = prop_oneof![
        3 => idx(EXEC_PROBES.len()).prop_map(HandlerGen::Exec),
        3 => (
            port_ref(),
            idx(HTTP_PATHS.len()),
            prop::collection::vec((idx(HEADER_NAMES.len()), idx(HEADER_VALUES.len())), 0..=2),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(port, path, headers, https)| HandlerGen::Http { port, path, headers, https }),
        2 => port_ref().prop_map(HandlerGen::Tcp),
        1 => port_ref().prop_map(HandlerGen::Grpc),
    ];
    (
        handler,
        0i64..=3,
        1i64..=5,
        1i64..=3,
        1i64..=3,
        1i64..=5,
        opt(0.3, 1i64..=5),
    )
        .prop_map(
            |(handler, initial, period, timeout, success, failure, grace)| ProbeGen {
                handler,
                initial,
                period,
                timeout,
                success,
                failure,
                grace,
            },
        )
        .boxed()
}

fn ctr_gen() -> BoxedStrategy<CtrGen> {
    let a = (
        name_style(),
        script_gen(),
        prop::collection::vec(opt(0.6, idx(4)), 0..=2),
        prop::collection::vec(env_gen(), 0..=5),
        prop::collection::vec(env_from_gen(), 0..=1),
        prop::collection::vec(mount_gen(), 0..=3),
    );
    let b = (
        res_gen(),
        opt(0.45, ctr_sc_gen()),
        (
            opt(0.3, probe_gen()),
            opt(0.35, probe_gen()),
            opt(0.15, probe_gen()),
        ),
        (opt(0.1, idx(4)), opt(0.15, idx(3))),
        opt(0.12, idx(WORKING_DIRS.len())),
        opt(0.3, idx(3)),
        prop::bool::weighted(0.3),
    );
    (a, b)
        .prop_map(
            |(
                (name, script, ports, env, env_from, mounts),
                (res, sc, probes, hooks, working_dir, pull_policy, sidecar),
            )| CtrGen {
                name,
                script,
                ports,
                env,
                env_from,
                mounts,
                res,
                sc,
                probes,
                hooks,
                working_dir,
                pull_policy,
                sidecar,
            },
        )
        .boxed()
}

fn pod_gen() -> BoxedStrategy<PodGen> {
    let a = (
        pod_name_style(),
        prop::sample::select(vec!["Always", "OnFailure", "Never"]),
        opt(0.85, 0i64..=5),
        opt(0.15, 1i64..=40),
        prop::collection::vec((idx(5), idx(7)), 0..=3),
        prop::collection::vec((idx(3), value_gen(), opt(0.1, 1usize..=2000)), 0..=3),
        opt(0.35, pod_sc_gen()),
    );
    let extras = (
        opt(0.3, idx(4)),
        prop::bool::weighted(0.2),
        opt(0.15, idx(3)),
        opt(0.3, any::<bool>()),
        opt(0.3, any::<bool>()),
        opt(0.15, any::<bool>()),
    )
        .prop_map(
            |(dns, host_aliases, hostname, service_links, automount_token, share_pid)| PodExtras {
                dns,
                host_aliases,
                hostname,
                service_links,
                automount_token,
                share_pid,
            },
        );
    let b = (
        prop::collection::vec(vol_gen(), 0..=4),
        prop::collection::vec(ctr_gen(), 0..=2),
        prop::collection::vec(ctr_gen(), 1..=3),
        extras,
        0u64..8000,
        prop::bool::weighted(0.4),
        1025u16..60000,
    );
    (a, b)
        .prop_map(
            |(
                (name, restart, grace, deadline, labels, annotations, sc),
                (volumes, inits, ctrs, extras, dwell_ms, fetch_logs, port_base),
            )| PodGen {
                name,
                restart,
                grace,
                deadline,
                labels,
                annotations,
                sc,
                volumes,
                inits,
                ctrs,
                extras,
                dwell_ms,
                fetch_logs,
                port_base,
            },
        )
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// rendering a generated shape into a pod spec
// ---------------------------------------------------------------------------------------------

/// The run's fixed objects and names.
struct Ctx {
    marker: String,
    node: String,
    ns: String,
    cm: String,
    /// Keys of the configMap's data, then its one binaryData key (volumes only: env reads data).
    cm_keys: Vec<String>,
    secret: String,
    secret_keys: Vec<String>,
}

/// Appends `[a-z0-9-]` characters to `s` up to `len` (never ending with `-`).
fn pad(mut s: String, len: usize) -> String {
    const FILL: &[u8] = b"abcdefghij0123456789-klmnopqrstuvwxyz";
    let mut k = 0;
    while s.len() < len {
        s.push(FILL[k % FILL.len()] as char);
        k += 1;
    }
    s.truncate(len);
    if s.ends_with('-') {
        s.pop();
        s.push('z');
    }
    s
}

/// A DNS label (≤ 63) carrying the marker and the unique `id`.
fn label_name(style: NameStyle, m: &str, id: &str) -> String {
    match style {
        NameStyle::Short => format!("{m}-{id}"),
        NameStyle::DigitsFirst => format!("9{id}-{m}"),
        NameStyle::Dashes => format!("{m}---{id}--9"),
        _ => pad(format!("{m}-{id}-"), 63),
    }
}

/// A pod name (DNS subdomain ≤ 253) carrying the marker and the case index.
fn pod_name(style: NameStyle, m: &str, i: usize) -> String {
    match style {
        NameStyle::Short => format!("{m}-{i}"),
        NameStyle::Max63 => pad(format!("{m}-{i}-"), 63),
        NameStyle::DigitsFirst => format!("0{i}-{m}"),
        NameStyle::Dashes => format!("{m}--{i}---z"),
        NameStyle::Dotted => format!("{m}-{i}.a-b.0.{m}"),
        NameStyle::Long(n) => pad(format!("{m}-{i}-"), n),
    }
}

fn port_name(style: usize, j: usize) -> String {
    match style {
        0 => format!("p{j}"),
        1 => format!("http-{j}"),
        2 => format!("{j}-a-b-c"),
        _ => pad(format!("x{j}-"), 15),
    }
}

fn rel_path(style: usize, m: &str, k: usize, subpath: bool) -> String {
    let t = if style >= REL_PATHS.len() {
        if subpath {
            SUBPATH_ONLY
        } else {
            REL_PATHS[0]
        }
    } else {
        REL_PATHS[style]
    };
    t.replace("{m}", m).replace("{k}", &k.to_string())
}

fn label_key(style: usize, m: &str, j: usize) -> String {
    match style {
        0 => format!("fz-k{j}"),
        1 => format!("fz.example.com/k-{j}"),
        2 => format!("{m}.io/a_b.c-{j}"),
        3 => pad(format!("k{j}-"), 63),
        _ => format!("a.b-c.d/{j}"),
    }
}

fn label_value(style: usize) -> String {
    match style {
        0 => String::new(),
        1 => "v".into(),
        2 => "A-b_c.d".into(),
        3 => "123".into(),
        4 => pad("x".into(), 63),
        5 => "UPPER_lower.9".into(),
        _ => "z".into(),
    }
}

fn annotation_key(style: usize, m: &str, j: usize) -> String {
    match style {
        0 => format!("fz.example.com/a-{j}"),
        1 => format!("{m}-a{j}"),
        _ => format!("x_{j}.y-z"),
    }
}

fn value(v: &ValueGen) -> String {
    match v {
        ValueGen::Table(i) => ODD_VALUES[*i].to_string(),
        ValueGen::Random(s) => s.clone(),
        ValueGen::Nul => "nul\u{0}byte".to_string(),
    }
}

fn mode(i: &Option<usize>) -> Option<i64> {
    i.map(|i| MODES[i])
}

/// A quantity pair (request, limit) with request ≤ limit.
fn quantities(
    table: &[(&'static str, u64)],
    pair: &(Option<usize>, Option<usize>),
) -> (Option<&'static str>, Option<&'static str>) {
    match *pair {
        (Some(r), Some(l)) if table[r].1 > table[l].1 => (Some(table[l].0), Some(table[r].0)),
        (r, l) => (r.map(|i| table[i].0), l.map(|i| table[i].0)),
    }
}

/// What a container's mount is, for its script.
struct MountInfo {
    path: String,
    vol: usize,
    empty_dir: bool,
    whole: bool,
    read_only: bool,
}

/// A container's volumeMount, what its script needs to know of it, and the env var its
/// `subPathExpr` uses.
type RenderedMount = (Value, MountInfo, Option<(String, Value)>);

/// The rendered pod and what the test needs to know about it.
struct Rendered {
    name: String,
    spec: Value,
}

fn render(g: &PodGen, i: usize, ctx: &Ctx) -> Rendered {
    let m = ctx.marker.as_str();
    let name = pod_name(g.name, m, i);
    let n_init = g.inits.len();
    let all: Vec<(&CtrGen, bool)> = g
        .inits
        .iter()
        .map(|c| (c, true))
        .chain(g.ctrs.iter().map(|c| (c, false)))
        .collect();
    let cnames: Vec<String> = all
        .iter()
        .enumerate()
        .map(|(k, (c, _))| label_name(c.name, m, &format!("c{k}")))
        .collect();
    let main_names = &cnames[n_init..];

    // volumes, and the files each has (for subPaths onto a file)
    let vnames: Vec<String> = g
        .volumes
        .iter()
        .enumerate()
        .map(|(j, v)| label_name(v.name, m, &format!("v{j}")))
        .collect();
    let mut vols_json = vec![];
    let mut vol_files: Vec<Vec<String>> = vec![];
    let path_k = std::cell::Cell::new(0usize);
    let next_k = || {
        path_k.set(path_k.get() + 1);
        path_k.get()
    };
    for (j, v) in g.volumes.iter().enumerate() {
        let mut files = vec![];
        let items = |items: &Option<Vec<ItemGen>>,
                     keys: &[String],
                     optional: bool,
                     prefix: &str,
                     files: &mut Vec<String>|
         -> Option<Value> {
            match items {
                None => {
                    files.extend(keys.iter().map(|k| format!("{prefix}{k}")));
                    None
                }
                Some(list) => Some(Value::Array(
                    list.iter()
                        .map(|it| {
                            // a key that does not exist only where the volume is optional
                            let key = if optional && it.key >= keys.len() {
                                format!("{m}-no-such-key")
                            } else {
                                keys[it.key % keys.len()].clone()
                            };
                            let path = format!("{prefix}{}", rel_path(it.path, m, next_k(), false));
                            files.push(path.clone());
                            let mut o = json!({"key": key, "path": path});
                            if let Some(md) = mode(&it.mode) {
                                o["mode"] = md.into();
                            }
                            o
                        })
                        .collect(),
                )),
            }
        };
        let ditems = |list: &[DItemGen], prefix: &str, files: &mut Vec<String>| -> Value {
            Value::Array(
                list.iter()
                    .map(|d| match d {
                        DItemGen::Field { field, path, mode: md } => {
                            let p = format!("{prefix}{}", rel_path(*path, m, next_k(), false));
                            files.push(p.clone());
                            let mut o = json!({"path": p, "fieldRef": {"fieldPath": VOLUME_FIELDS[*field]}});
                            if let Some(md) = mode(md) {
                                o["mode"] = md.into();
                            }
                            o
                        }
                        DItemGen::Res { res, divisor, ctr, path, mode: md } => {
                            let p = format!("{prefix}{}", rel_path(*path, m, next_k(), false));
                            files.push(p.clone());
                            let mut r = json!({
                                "containerName": main_names[ctr % main_names.len()],
                                "resource": RESOURCE_FIELDS[*res].0,
                            });
                            if let Some(d) = divisor {
                                r["divisor"] = divisor_for(*res, *d).into();
                            }
                            let mut o = json!({"path": p, "resourceFieldRef": r});
                            if let Some(md) = mode(md) {
                                o["mode"] = md.into();
                            }
                            o
                        }
                    })
                    .collect(),
            )
        };
        let mut o = json!({"name": vnames[j]});
        match &v.kind {
            VolKind::Empty { medium, size } => {
                let mut e = json!({});
                match medium {
                    Some(true) => e["medium"] = "Memory".into(),
                    Some(false) => e["medium"] = "".into(),
                    None => {}
                }
                if let Some(s) = size {
                    e["sizeLimit"] = SIZE_LIMITS[*s].into();
                }
                o["emptyDir"] = e;
            }
            VolKind::ConfigMap {
                missing,
                items: it,
                mode: md,
                optional,
            }
            | VolKind::Secret {
                missing,
                items: it,
                mode: md,
                optional,
            } => {
                let secret = matches!(v.kind, VolKind::Secret { .. });
                // a missing object only where it is optional (else the pod waits for it, with
                // FailedMount events, as upstream)
                let optional = if *missing { Some(true) } else { *optional };
                let (obj, keys) = if *missing {
                    (format!("{m}-missing"), vec![format!("{m}-k")])
                } else if secret {
                    (ctx.secret.clone(), ctx.secret_keys.clone())
                } else {
                    (ctx.cm.clone(), ctx.cm_keys.clone())
                };
                let mut c = if secret {
                    json!({"secretName": obj})
                } else {
                    json!({"name": obj})
                };
                if let Some(list) = items(it, &keys, optional == Some(true), "", &mut files) {
                    c["items"] = list;
                }
                if let Some(md) = mode(md) {
                    c["defaultMode"] = md.into();
                }
                if let Some(opt) = optional {
                    c["optional"] = opt.into();
                }
                if *missing {
                    files.clear();
                }
                o[if secret { "secret" } else { "configMap" }] = c;
            }
            VolKind::Projected { sources, mode: md } => {
                let mut srcs = vec![];
                for (s, src) in sources.iter().enumerate() {
                    // distinct prefixes: projected paths must not collide
                    let prefix = format!("s{s}/");
                    srcs.push(match src {
                        SrcGen::ConfigMap {
                            items: it,
                            optional,
                        }
                        | SrcGen::Secret {
                            items: it,
                            optional,
                        } => {
                            let secret = matches!(src, SrcGen::Secret { .. });
                            let keys = if secret {
                                &ctx.secret_keys
                            } else {
                                &ctx.cm_keys
                            };
                            // without items the keys land at the volume's root: only one
                            // such source may do that, so give the others items
                            let it = match it {
                                None if s > 0 => Some(vec![ItemGen {
                                    key: s,
                                    path: 0,
                                    mode: None,
                                }]),
                                other => other.clone(),
                            };
                            let pre = if it.is_some() { prefix.as_str() } else { "" };
                            let mut c = json!({"name": if secret { &ctx.secret } else { &ctx.cm }});
                            if let Some(list) =
                                items(&it, keys, optional == &Some(true), pre, &mut files)
                            {
                                c["items"] = list;
                            }
                            if let Some(opt) = optional {
                                c["optional"] = (*opt).into();
                            }
                            json!({(if secret { "secret" } else { "configMap" }): c})
                        }
                        SrcGen::Downward(list) => {
                            json!({"downwardAPI": {"items": ditems(list, &prefix, &mut files)}})
                        }
                        SrcGen::Token {
                            audience,
                            expiration,
                        } => {
                            let p = format!("{prefix}{m}-token");
                            files.push(p.clone());
                            let mut t = json!({"path": p});
                            if *audience {
                                t["audience"] = format!("{m}.example.com/ünï").into();
                            }
                            if let Some(e) = expiration {
                                t["expirationSeconds"] = (*e).into();
                            }
                            json!({"serviceAccountToken": t})
                        }
                    });
                }
                let mut p = json!({"sources": srcs});
                if let Some(md) = mode(md) {
                    p["defaultMode"] = md.into();
                }
                o["projected"] = p;
            }
            VolKind::Downward {
                items: list,
                mode: md,
            } => {
                let mut d = json!({"items": ditems(list, "", &mut files)});
                if let Some(md) = mode(md) {
                    d["defaultMode"] = md.into();
                }
                o["downwardAPI"] = d;
            }
        }
        vols_json.push(o);
        vol_files.push(files);
    }

    // ports: unique numbers across the pod
    let mut next_port = g.port_base;
    let ports: Vec<Vec<(u16, Option<String>)>> = all
        .iter()
        .map(|(c, _)| {
            c.ports
                .iter()
                .map(|style| {
                    let n = next_port;
                    next_port += 1;
                    (n, style.map(|s| port_name(s, (n - g.port_base) as usize)))
                })
                .collect()
        })
        .collect();
    let pod_ports: Vec<u16> = ports.iter().flatten().map(|(n, _)| *n).collect();

    // mounts, first (subPaths are needed by every container's script)
    let mut mounts: Vec<Vec<RenderedMount>> = vec![];
    let mut vol_subs: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (k, (c, _)) in all.iter().enumerate() {
        let mut list = vec![];
        if !g.volumes.is_empty() {
            for (mi, mg) in c.mounts.iter().enumerate() {
                let vol = mg.vol % g.volumes.len();
                let path = MOUNT_PATHS[mg.path]
                    .replace("{m}", m)
                    .replace("{k}", &mi.to_string());
                if list
                    .iter()
                    .any(|(_, info, _): &RenderedMount| info.path == path)
                {
                    continue;
                }
                let mut o = json!({"name": vnames[vol], "mountPath": path});
                let mut extra_env = None;
                let sub: Option<String> = match &mg.sub {
                    SubGen::None => None,
                    SubGen::Path(s) => Some(rel_path(*s, m, next_k(), true)),
                    SubGen::Item(f) => {
                        let files = &vol_files[vol];
                        if files.is_empty() {
                            Some(rel_path(0, m, next_k(), true))
                        } else {
                            Some(files[f % files.len()].clone())
                        }
                    }
                    SubGen::Expr { literal } => {
                        let var = format!("FZ_SUBPATH_{k}_{mi}");
                        let (env, expanded) = match literal {
                            Some(s) => {
                                let v = rel_path(*s, m, next_k(), true);
                                (json!({"name": var, "value": v}), v)
                            }
                            None => (
                                json!({"name": var, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
                                name.clone(),
                            ),
                        };
                        let suffix = format!("{m}-x{}", next_k());
                        o["subPathExpr"] = format!("$({var})/{suffix}").into();
                        extra_env = Some((var, env));
                        Some(format!("{expanded}/{suffix}"))
                    }
                };
                if let (Some(s), None) = (&sub, &extra_env) {
                    o["subPath"] = s.clone().into();
                }
                if let Some(s) = &sub {
                    if let Some(first) = s.split('/').find(|c| !c.is_empty() && *c != ".") {
                        vol_subs.entry(vol).or_default().insert(first.to_string());
                    }
                }
                if let Some(ro) = mg.read_only {
                    o["readOnly"] = ro.into();
                }
                if let Some(p) = mg.propagation {
                    o["mountPropagation"] = if p { "HostToContainer" } else { "None" }.into();
                }
                let info = MountInfo {
                    path,
                    vol,
                    empty_dir: matches!(g.volumes[vol].kind, VolKind::Empty { .. }),
                    whole: sub.is_none(),
                    read_only: mg.read_only == Some(true),
                };
                list.push((o, info, extra_env));
            }
        }
        mounts.push(list);
    }

    let grace = g.grace.unwrap_or(30);
    let mut containers = vec![];
    let mut init_containers = vec![];
    for (k, (c, init)) in all.iter().enumerate() {
        let sidecar = *init && c.sidecar;
        let cname = &cnames[k];
        let mut o = json!({"name": cname, "image": "busybox"});
        if let Some(p) = c.pull_policy {
            o["imagePullPolicy"] = ["IfNotPresent", "Always", "Never"][p].into();
        }
        // env
        let mut env = vec![];
        for (j, e) in c.env.iter().enumerate() {
            let n = |i: &usize| format!("{}{j}", ENV_NAMES[*i]);
            env.push(match e {
                EnvGen::Literal { name, value: v } => json!({"name": n(name), "value": value(v)}),
                EnvGen::Field { name, field } => {
                    json!({"name": n(name), "valueFrom": {"fieldRef": {"fieldPath": ENV_FIELDS[*field]}}})
                }
                EnvGen::Resource { name, res, divisor, own_name } => {
                    let mut r = json!({"resource": RESOURCE_FIELDS[*res].0});
                    if let Some(d) = divisor {
                        r["divisor"] = divisor_for(*res, *d).into();
                    }
                    if *own_name {
                        r["containerName"] = cname.clone().into();
                    }
                    json!({"name": n(name), "valueFrom": {"resourceFieldRef": r}})
                }
                EnvGen::Key { name, secret, missing_obj, key, missing_key, optional } => {
                    let keys = if *secret {
                        &ctx.secret_keys[..]
                    } else {
                        &ctx.cm_keys[..ctx.cm_keys.len() - 1]
                    };
                    let obj = if *missing_obj {
                        format!("{m}-missing")
                    } else if *secret {
                        ctx.secret.clone()
                    } else {
                        ctx.cm.clone()
                    };
                    let key = if *missing_key {
                        format!("{m}-no-such-key")
                    } else {
                        keys[key % keys.len()].clone()
                    };
                    let mut r = json!({"name": obj, "key": key});
                    if let Some(opt) = optional {
                        r["optional"] = (*opt).into();
                    }
                    let kind = if *secret { "secretKeyRef" } else { "configMapKeyRef" };
                    json!({"name": n(name), "valueFrom": {(kind): r}})
                }
            });
        }
        for (_, _, extra) in &mounts[k] {
            if let Some((_, e)) = extra {
                env.push(e.clone());
            }
        }
        let first_env = env
            .first()
            .and_then(|e| e["name"].as_str())
            .map(String::from);
        if !env.is_empty() {
            o["env"] = env.into();
        }
        if !c.env_from.is_empty() {
            o["envFrom"] = c
                .env_from
                .iter()
                .map(|f| {
                    let obj = if f.missing {
                        format!("{m}-missing")
                    } else if f.secret {
                        ctx.secret.clone()
                    } else {
                        ctx.cm.clone()
                    };
                    let mut r = json!({"name": obj});
                    if let Some(opt) = f.optional {
                        r["optional"] = opt.into();
                    }
                    let mut o = json!({(if f.secret { "secretRef" } else { "configMapRef" }): r});
                    if let Some(p) = f.prefix {
                        o["prefix"] = ["FZ_", "fz_", "X."][p].into();
                    }
                    o
                })
                .collect::<Vec<_>>()
                .into();
        }
        // ports
        if !ports[k].is_empty() {
            o["ports"] = ports[k]
                .iter()
                .map(|(n, name)| {
                    let mut p = json!({"containerPort": n, "protocol": "TCP"});
                    if let Some(name) = name {
                        p["name"] = name.clone().into();
                    }
                    p
                })
                .collect::<Vec<_>>()
                .into();
        }
        if !mounts[k].is_empty() {
            o["volumeMounts"] = mounts[k]
                .iter()
                .map(|(v, _, _)| v.clone())
                .collect::<Vec<_>>()
                .into();
        }
        // the script
        let script = {
            let sg = &c.script;
            let mut s = String::new();
            if sg.form == 3 {
                if let Some(v) = &first_env {
                    s.push_str(&format!("echo 'expanded: $({v}) $$({v})'; "));
                }
            }
            for p in &sg.prints {
                s.push_str(PRINTS[*p]);
                s.push_str("; ");
            }
            if sg.write {
                for (mi, (_, info, _)) in mounts[k].iter().enumerate() {
                    if info.empty_dir && !info.read_only {
                        s.push_str(&format!(
                            "echo fz > '{p}/{m}-w{k}-{mi}' 2>/dev/null; mkdir -p '{p}/{m}-d{k}-{mi}/ünï' 2>/dev/null; ",
                            p = info.path
                        ));
                    } else {
                        s.push_str(&format!("ls -laR '{}' >/dev/null 2>&1; ", info.path));
                    }
                }
            }
            if let Some(t) = sg.plant {
                let target = PLANT_TARGETS[t];
                for (_, info, _) in &mounts[k] {
                    if !(info.empty_dir && info.whole && !info.read_only) {
                        continue;
                    }
                    let names: Vec<String> = vol_subs
                        .get(&info.vol)
                        .map(|s| s.iter().cloned().collect())
                        .unwrap_or_else(|| vec![format!("{m}-planted")]);
                    for n in names {
                        s.push_str(&format!(
                            "rm -rf '{p}/{n}' 2>/dev/null; ln -s '{target}' '{p}/{n}' 2>/dev/null; ",
                            p = info.path
                        ));
                    }
                }
            }
            let tail = if *init && !sidecar {
                &sg.init_tail
            } else {
                &sg.tail
            };
            match tail {
                Tail::Exit(code) => s.push_str(&format!("exit {code}")),
                Tail::Sleep => s.push_str("exec sleep 3600"),
                Tail::SleepThenExit(t, code) => s.push_str(&format!("sleep {t}; exit {code}")),
                Tail::Serve => {
                    for (n, _) in &ports[k] {
                        s.push_str(&format!("httpd -f -p {n} -h /etc & "));
                    }
                    s.push_str("exec sleep 3600");
                }
            }
            s
        };
        match c.script.form {
            1 => {
                o["command"] = json!(["sh", "-c"]);
                o["args"] = json!([script]);
            }
            2 => o["args"] = json!(["sh", "-c", script]),
            _ => o["command"] = json!(["sh", "-c", script]),
        }
        // resources
        let mut req = serde_json::Map::new();
        let mut lim = serde_json::Map::new();
        for (res, table, pair) in [
            ("cpu", CPU, &c.res.cpu),
            ("memory", MEMORY, &c.res.mem),
            ("ephemeral-storage", EPHEMERAL, &c.res.eph),
        ] {
            let (r, l) = quantities(table, pair);
            if let Some(r) = r {
                req.insert(res.into(), r.into());
            }
            if let Some(l) = l {
                lim.insert(res.into(), l.into());
            }
        }
        if !req.is_empty() || !lim.is_empty() {
            let mut r = json!({});
            if !req.is_empty() {
                r["requests"] = req.into();
            }
            if !lim.is_empty() {
                r["limits"] = lim.into();
            }
            o["resources"] = r;
        }
        if let Some(sc) = &c.sc {
            let mut s = json!({});
            if let Some(u) = sc.user {
                s["runAsUser"] = IDS[u].into();
            }
            let has_user = sc.user.is_some() || g.sc.as_ref().is_some_and(|p| p.user.is_some());
            if let Some(gid) = sc.group.filter(|_| has_user || sc.lone_group) {
                s["runAsGroup"] = IDS[gid].into();
            }
            if let Some(b) = sc.non_root {
                s["runAsNonRoot"] = b.into();
            }
            if let Some(b) = sc.ro_root {
                s["readOnlyRootFilesystem"] = b.into();
            }
            if let Some(b) = sc.no_escalation {
                s["allowPrivilegeEscalation"] = (!b).into();
            }
            if sc.drop_all || sc.add_net_admin {
                let mut caps = json!({});
                if sc.drop_all {
                    caps["drop"] = json!(["ALL"]);
                }
                if sc.add_net_admin {
                    caps["add"] = json!(["NET_ADMIN"]);
                }
                s["capabilities"] = caps;
            }
            if let Some(u) = sc.seccomp {
                s["seccompProfile"] =
                    json!({"type": if u { "Unconfined" } else { "RuntimeDefault" }});
            }
            o["securityContext"] = s;
        }
        if let Some(w) = c.working_dir {
            o["workingDir"] = WORKING_DIRS[w].replace("{m}", m).into();
        }
        // probes and hooks: main containers and sidecars only
        if !*init || sidecar {
            let own_named: Vec<&String> = ports[k].iter().filter_map(|(_, n)| n.as_ref()).collect();
            let port_of = |r: &PortRef| -> Value {
                match r {
                    PortRef::OwnNamed(j) if !own_named.is_empty() => {
                        own_named[j % own_named.len()].clone().into()
                    }
                    PortRef::OwnNamed(j) | PortRef::Pod(j) if !pod_ports.is_empty() => {
                        pod_ports[j % pod_ports.len()].into()
                    }
                    PortRef::Unserved(n) => (*n).into(),
                    _ => 65535.into(),
                }
            };
            for (field, probe, liveness_like) in [
                ("livenessProbe", &c.probes.0, true),
                ("readinessProbe", &c.probes.1, false),
                ("startupProbe", &c.probes.2, true),
            ] {
                let Some(p) = probe else { continue };
                let mut o2 = match &p.handler {
                    HandlerGen::Exec(e) => json!({"exec": {"command": EXEC_PROBES[*e]
                        .iter()
                        .map(|a| a.replace("{m}", m))
                        .collect::<Vec<_>>()}}),
                    HandlerGen::Http {
                        port,
                        path,
                        headers,
                        https,
                    } => {
                        let mut h = json!({"port": port_of(port), "path": HTTP_PATHS[*path]});
                        if *https {
                            h["scheme"] = "HTTPS".into();
                        }
                        if !headers.is_empty() {
                            h["httpHeaders"] = headers
                                .iter()
                                .map(|(n, v)| json!({"name": HEADER_NAMES[*n], "value": HEADER_VALUES[*v]}))
                                .collect::<Vec<_>>()
                                .into();
                        }
                        json!({"httpGet": h})
                    }
                    HandlerGen::Tcp(port) => json!({"tcpSocket": {"port": port_of(port)}}),
                    HandlerGen::Grpc(port) => {
                        let n = match port_of(port) {
                            Value::Number(n) => n.as_u64().unwrap_or(65535),
                            _ => pod_ports.first().copied().unwrap_or(65535) as u64,
                        };
                        json!({"grpc": {"port": n}})
                    }
                };
                o2["initialDelaySeconds"] = p.initial.into();
                o2["periodSeconds"] = p.period.into();
                o2["timeoutSeconds"] = p.timeout.into();
                o2["successThreshold"] = if liveness_like { 1 } else { p.success }.into();
                o2["failureThreshold"] = p.failure.into();
                if liveness_like {
                    if let Some(gr) = p.grace {
                        o2["terminationGracePeriodSeconds"] = gr.into();
                    }
                }
                o[field] = o2;
            }
            let hook = |h: usize, pre: bool| -> Option<Value> {
                let sleep_ok = grace >= 1;
                Some(match (pre, h) {
                    (false, 0) => json!({"exec": {"command": ["true"]}}),
                    (false, 1) => json!({"exec": {"command": ["false"]}}),
                    (false, 2) => {
                        json!({"exec": {"command": ["sh", "-c", "echo posted ü > /dev/null"]}})
                    }
                    (true, 0) => json!({"exec": {"command": ["sh", "-c", "sleep 10"]}}),
                    (true, 1) => json!({"exec": {"command": ["true"]}}),
                    _ if sleep_ok => json!({"sleep": {"seconds": 1}}),
                    _ => return None,
                })
            };
            let mut lc = json!({});
            if let Some(h) = c.hooks.0.and_then(|h| hook(h, false)) {
                lc["postStart"] = h;
            }
            if let Some(h) = c.hooks.1.and_then(|h| hook(h, true)) {
                lc["preStop"] = h;
            }
            if lc.as_object().is_some_and(|o| !o.is_empty()) {
                o["lifecycle"] = lc;
            }
        }
        if sidecar {
            o["restartPolicy"] = "Always".into();
        }
        if *init {
            init_containers.push(o);
        } else {
            containers.push(o);
        }
    }

    // metadata
    let mut labels = serde_json::Map::new();
    labels.insert("app".into(), "deckhand-e2e-fuzz".into());
    labels.insert("fuzz-marker".into(), m.into());
    for (j, (k, v)) in g.labels.iter().enumerate() {
        labels.insert(label_key(*k, m, j), label_value(*v).into());
    }
    let mut annotations = serde_json::Map::new();
    for (j, (k, v, big)) in g.annotations.iter().enumerate() {
        let val = match big {
            Some(n) => "ü🙂".repeat(*n),
            None => value(v),
        };
        annotations.insert(annotation_key(*k, m, j), val.into());
    }
    let mut spec = json!({
        "nodeName": ctx.node,
        "tolerations": [{"operator": "Exists"}],
        "restartPolicy": g.restart,
        "containers": containers,
    });
    if !init_containers.is_empty() {
        spec["initContainers"] = init_containers.into();
    }
    if !vols_json.is_empty() {
        spec["volumes"] = vols_json.into();
    }
    if let Some(gr) = g.grace {
        spec["terminationGracePeriodSeconds"] = gr.into();
    }
    if let Some(d) = g.deadline {
        spec["activeDeadlineSeconds"] = d.into();
    }
    if let Some(sc) = &g.sc {
        let mut s = json!({});
        if let Some(u) = sc.user {
            s["runAsUser"] = IDS[u].into();
        }
        if let Some(gid) = sc.group.filter(|_| sc.user.is_some() || sc.lone_group) {
            s["runAsGroup"] = IDS[gid].into();
        }
        if let Some(f) = sc.fs_group {
            s["fsGroup"] = IDS[f].into();
        }
        if !sc.supplemental.is_empty() {
            s["supplementalGroups"] = sc
                .supplemental
                .iter()
                .map(|i| IDS[*i])
                .collect::<Vec<_>>()
                .into();
        }
        if let Some(b) = sc.non_root {
            s["runAsNonRoot"] = b.into();
        }
        if let Some(b) = sc.fs_group_always {
            s["fsGroupChangePolicy"] = if b { "Always" } else { "OnRootMismatch" }.into();
        }
        if sc.sysctls {
            s["sysctls"] = json!([
                {"name": "kernel.shm_rmid_forced", "value": "1"},
                {"name": "net.ipv4.ip_unprivileged_port_start", "value": "1024"},
            ]);
        }
        spec["securityContext"] = s;
    }
    let x = &g.extras;
    match x.dns {
        Some(0) => spec["dnsPolicy"] = "Default".into(),
        Some(1) => {
            spec["dnsPolicy"] = "None".into();
            spec["dnsConfig"] = json!({
                "nameservers": ["10.96.0.10", "127.0.0.53"],
                "searches": [format!("{m}.svc.cluster.local"), "a.b"],
                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
            });
        }
        Some(2) => {
            spec["dnsConfig"] = json!({
                "searches": [format!("x.{m}.example")],
                "options": [{"name": "timeout", "value": "1"}],
            });
        }
        Some(_) => spec["dnsPolicy"] = "ClusterFirstWithHostNet".into(),
        None => {}
    }
    if x.host_aliases {
        spec["hostAliases"] = json!([
            {"ip": "10.1.2.3", "hostnames": [format!("{m}.local"), format!("a.{m}")]},
            {"ip": "fd00::1", "hostnames": [format!("{m}-v6")]},
        ]);
    }
    match x.hostname {
        Some(0) => spec["hostname"] = format!("{m}-h").into(),
        Some(1) => spec["hostname"] = pad(format!("{m}-h-"), 63).into(),
        Some(_) => {
            spec["hostname"] = format!("{m}-h").into();
            spec["subdomain"] = format!("{m}-sub").into();
        }
        None => {}
    }
    if let Some(b) = x.service_links {
        spec["enableServiceLinks"] = b.into();
    }
    if let Some(b) = x.automount_token {
        spec["automountServiceAccountToken"] = b.into();
    }
    if let Some(b) = x.share_pid {
        spec["shareProcessNamespace"] = b.into();
    }
    let mut meta = json!({"name": name, "namespace": ctx.ns, "labels": labels});
    if !annotations.is_empty() {
        meta["annotations"] = annotations.into();
    }
    Rendered {
        name,
        spec: json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}),
    }
}

fn divisor_for(res: usize, d: usize) -> &'static str {
    if RESOURCE_FIELDS[res].1 {
        CPU_DIVISORS[d % CPU_DIVISORS.len()]
    } else {
        BYTE_DIVISORS[d % BYTE_DIVISORS.len()]
    }
}

// ---------------------------------------------------------------------------------------------
// seeds
// ---------------------------------------------------------------------------------------------

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Case `i` of the run with `seed`: its own proptest runner, so it replays alone.
fn generate(seed: u64, i: usize) -> PodGen {
    let mut s = seed ^ (i as u64).wrapping_mul(0xd6e8_feb8_6659_fd93);
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&splitmix(&mut s).to_le_bytes());
    }
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    pod_gen()
        .new_tree(&mut runner)
        .expect("generating a pod shape")
        .current()
}

/// `fz` and four characters from the seed: in every generated name and path.
fn marker(seed: u64) -> String {
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut s = seed;
    let x = splitmix(&mut s);
    let tail: String = (0..4)
        .map(|k| ALNUM[((x >> (k * 8)) % ALNUM.len() as u64) as usize] as char)
        .collect();
    format!("fz{tail}")
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} does not parse")),
        _ => default,
    }
}

// ---------------------------------------------------------------------------------------------
// what the pod's status says
// ---------------------------------------------------------------------------------------------

fn state_of(c: &ContainerStatus) -> (&'static str, String, Option<i32>) {
    match c.state.as_ref() {
        Some(s) if s.running.is_some() => ("running", String::new(), None),
        Some(s) if s.terminated.is_some() => {
            let t = s.terminated.as_ref().unwrap();
            (
                "terminated",
                t.reason.clone().unwrap_or_default(),
                Some(t.exit_code),
            )
        }
        Some(s) if s.waiting.is_some() => (
            "waiting",
            s.waiting
                .as_ref()
                .unwrap()
                .reason
                .clone()
                .unwrap_or_default(),
            None,
        ),
        _ => ("none", String::new(), None),
    }
}

fn transitional(reason: &str) -> bool {
    reason.is_empty() || reason == "ContainerCreating" || reason == "PodInitializing"
}

/// `Ok(summary)` when the status gives the pod a state with a reason, `Err(what is missing)`;
/// `age` is the time since the pod was created.
fn reasoned(p: &Pod, age: Duration) -> Result<String, String> {
    let Some(st) = p.status.as_ref() else {
        return Err("no status".into());
    };
    let phase = st.phase.clone().unwrap_or_default();
    if phase.is_empty() {
        return Err("no phase".into());
    }
    if phase == "Succeeded" || phase == "Failed" {
        return Ok(match st.reason.as_deref() {
            Some(r) if !r.is_empty() => format!("{phase}/{r}"),
            _ => phase,
        });
    }
    let spec = p.spec.as_ref().unwrap();
    let inits = st.init_container_statuses.clone().unwrap_or_default();
    let mains = st.container_statuses.clone().unwrap_or_default();
    for c in spec.init_containers.iter().flatten() {
        if !inits.iter().any(|s| s.name == c.name) {
            return Err(format!(
                "phase {phase}, no status of init container {}",
                c.name
            ));
        }
    }
    for c in &spec.containers {
        if !mains.iter().any(|s| s.name == c.name) {
            return Err(format!("phase {phase}, no status of container {}", c.name));
        }
    }
    let sidecars: BTreeSet<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    // what keeps the main containers from starting, for as long as it lasts: an init container
    // that failed or cannot start; or, once the pod had time to get past it, a running sidecar
    // (its startup probe may never pass). A plain init container that runs is not it (the
    // generated ones end within seconds).
    let init_blocking = inits.iter().any(|c| {
        let (kind, reason, code) = state_of(c);
        (kind == "running" && sidecars.contains(c.name.as_str()) && age >= SIDECAR_PATIENCE)
            || (kind == "waiting" && !transitional(&reason))
            || (kind == "terminated" && code != Some(0))
    });
    let mut words = BTreeSet::new();
    for c in inits.iter().chain(mains.iter()) {
        let (kind, reason, _) = state_of(c);
        let ok = match kind {
            // a plain init container ends (the generated ones within seconds)
            "running" => {
                !inits.iter().any(|i| i.name == c.name) || sidecars.contains(c.name.as_str())
            }
            "terminated" => !reason.is_empty(),
            "waiting" => !transitional(&reason) || (reason == "PodInitializing" && init_blocking),
            _ => false,
        };
        if !ok {
            return Err(format!(
                "phase {phase}, container {} {kind} {reason:?}",
                c.name
            ));
        }
        words.insert(if reason.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}/{reason}")
        });
    }
    Ok(format!(
        "{phase}: {}",
        words.into_iter().collect::<Vec<_>>().join(", ")
    ))
}

/// The messages of the containers that do not run and of the pod, one line (for the log).
fn messages(p: &Pod) -> String {
    let Some(st) = p.status.as_ref() else {
        return String::new();
    };
    let mut out = vec![];
    if let Some(m) = st.message.as_deref().filter(|m| !m.is_empty()) {
        out.push(format!("pod: {m}"));
    }
    for c in st
        .init_container_statuses
        .iter()
        .flatten()
        .chain(st.container_statuses.iter().flatten())
    {
        let msg = c.state.as_ref().and_then(|s| {
            s.waiting
                .as_ref()
                .and_then(|w| w.message.clone())
                .or_else(|| s.terminated.as_ref().and_then(|t| t.message.clone()))
        });
        if let Some(m) = msg.filter(|m| !m.is_empty()) {
            let m: String = m.chars().take(240).collect();
            out.push(format!("{}: {m}", c.name));
        }
    }
    out.join(" | ")
}

/// Status invariants of the Go kubelet's status manager; the broken ones.
fn invariants(p: &Pod) -> Vec<String> {
    let mut bad = vec![];
    let Some(st) = p.status.as_ref() else {
        return bad;
    };
    let spec = p.spec.as_ref().unwrap();
    let phase = st.phase.clone().unwrap_or_default();
    if phase.is_empty() {
        bad.push("the status has no phase".into());
    }
    let inits = st.init_container_statuses.clone().unwrap_or_default();
    let mains = st.container_statuses.clone().unwrap_or_default();
    let names = |v: &[ContainerStatus]| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    let mut want_main: Vec<String> = spec.containers.iter().map(|c| c.name.clone()).collect();
    let mut want_init: Vec<String> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    want_main.sort();
    want_init.sort();
    let (mut got_main, mut got_init) = (names(&mains), names(&inits));
    got_main.sort();
    got_init.sort();
    if !mains.is_empty() && got_main != want_main {
        bad.push(format!(
            "containerStatuses name {got_main:?}, the spec {want_main:?}"
        ));
    }
    if !inits.is_empty() && got_init != want_init {
        bad.push(format!(
            "initContainerStatuses name {got_init:?}, the spec {want_init:?}"
        ));
    }
    let sidecars: BTreeSet<&str> = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.as_str())
        .collect();
    // ready: a container (or sidecar) only while it runs; an init container once it exited 0
    // (the Go prober manager's UpdatePodStatus)
    for c in inits.iter().chain(mains.iter()) {
        let (kind, reason, code) = state_of(c);
        let init = inits.iter().any(|i| i.name == c.name) && !sidecars.contains(c.name.as_str());
        if c.ready && !init && kind != "running" {
            bad.push(format!(
                "container {} is ready while {kind} {reason:?}",
                c.name
            ));
        }
        if c.ready && init && code != Some(0) {
            bad.push(format!(
                "init container {} is ready while {kind} {reason:?} (exit {code:?})",
                c.name
            ));
        }
    }
    if spec.restart_policy.as_deref() == Some("Never") {
        for c in inits.iter().chain(mains.iter()) {
            if c.restart_count != 0 && !sidecars.contains(c.name.as_str()) {
                bad.push(format!(
                    "container {} restarted {} times under restartPolicy Never",
                    c.name, c.restart_count
                ));
            }
        }
    }
    if phase == "Succeeded" {
        for c in &mains {
            let (kind, _, code) = state_of(c);
            if kind != "terminated" || code != Some(0) {
                bad.push(format!(
                    "phase Succeeded but container {} is {kind} (exit {code:?})",
                    c.name
                ));
            }
        }
    }
    if phase == "Running" && st.pod_ip.as_deref().unwrap_or("").is_empty() {
        bad.push("phase Running without a pod IP".into());
    }
    bad
}

/// The Warning events of the pod with this UID that repeated (the node retried and failed
/// again), `reason: message (count)` each.
async fn repeated_warnings(client: &kube::Client, ns: &str, uid: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    match api.list(&lp).await {
        Ok(list) => list
            .items
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning") && e.count.unwrap_or(1) >= 2)
            .map(|e| {
                format!(
                    "{}: {} ({} times)",
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                    e.count.unwrap_or(1)
                )
            })
            .collect(),
        Err(_) => vec![],
    }
}

// ---------------------------------------------------------------------------------------------
// one case
// ---------------------------------------------------------------------------------------------

enum Outcome {
    Rejected {
        key: String,
        message: String,
    },
    Passed {
        summary: String,
        uid: String,
        spec: Value,
    },
    Failed {
        /// Case, seed, pod and problem, one line.
        headline: String,
        /// The generated spec and the diagnostics.
        details: String,
    },
    Skipped,
}

struct Run {
    /// Print every spec (a replay of one case).
    verbose: bool,
    client: kube::Client,
    ctx: Ctx,
    seed: u64,
    deckhand: i32,
    root_dir: PathBuf,
    stop: AtomicBool,
    pods_api: Api<Pod>,
    dyn_api: Api<DynamicObject>,
}

/// `field: reason` of each cause of a refusal, indices dropped, so equal mistakes count once.
fn rejection_key(s: &kube::core::Status) -> String {
    let strip = |f: &str| {
        let mut out = String::new();
        let mut in_brackets = false;
        for ch in f.chars() {
            match ch {
                '[' => {
                    in_brackets = true;
                    out.push('[');
                }
                ']' => {
                    in_brackets = false;
                    out.push(']');
                }
                _ if in_brackets => {}
                _ => out.push(ch),
            }
        }
        out
    };
    let causes: BTreeSet<String> = s
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| format!("{}: {}", strip(&c.field), c.reason))
                .collect()
        })
        .unwrap_or_default();
    if causes.is_empty() {
        format!("{} {}", s.code, s.reason)
    } else {
        causes.into_iter().collect::<Vec<_>>().join("; ")
    }
}

fn deckhand_alive(pid: i32) -> bool {
    process_alive(pid)
        && std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() == "deckhand")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

async fn run_case(run: Arc<Run>, i: usize) -> (usize, String, Outcome) {
    let g = generate(run.seed, i);
    let r = render(&g, i, &run.ctx);
    let name = r.name.clone();
    if run.stop.load(Ordering::SeqCst) {
        return (i, name, Outcome::Skipped);
    }
    let ns = run.ctx.ns.clone();
    if run.verbose {
        println!(
            "[{ns}] case {i}: {g:?}\n{}",
            serde_json::to_string_pretty(&r.spec).unwrap()
        );
    }
    let started = Instant::now();
    let fail = |problem: String, diag: String| Outcome::Failed {
        headline: format!(
            "case {i} (FUZZ_SEED={} FUZZ_CASE={i}), pod {ns}/{name}: {problem}",
            run.seed
        ),
        details: format!(
            "----- generated spec -----\n{}\n{diag}",
            serde_json::to_string_pretty(&r.spec).unwrap()
        ),
    };
    let obj: DynamicObject = serde_json::from_value(r.spec.clone()).expect("a DynamicObject");
    let created = match run.dyn_api.create(&PostParams::default(), &obj).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 || s.code == 403 => {
            return (
                i,
                name,
                Outcome::Rejected {
                    key: rejection_key(&s),
                    message: s.message.clone(),
                },
            )
        }
        Err(e) => {
            return (
                i,
                name.clone(),
                fail(format!("creating the pod: {e}"), String::new()),
            )
        }
    };
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let diagnose_now = || {
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            blocking(move || diagnose(&ns, &name))
                .await
                .unwrap_or_default()
        }
    };

    // 1. a state with a reason
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut last: String;
    let settled_messages;
    let mut last_events_check = Instant::now();
    let summary = loop {
        match run.pods_api.get_opt(&name).await {
            Ok(Some(p)) => {
                match reasoned(&p, started.elapsed()) {
                    Ok(s) => {
                        settled_messages = messages(&p);
                        let bad = invariants(&p);
                        if !bad.is_empty() {
                            let d = diagnose_now().await;
                            let _ = delete(&run, &name).await;
                            return (
                                i,
                                name.clone(),
                                fail(
                                    format!("status invariants broken when it settled: {bad:?}"),
                                    d,
                                ),
                            );
                        }
                        break s;
                    }
                    Err(why) => last = why,
                }
                // a pod that cannot start says why in a Warning event (FailedMount,
                // FailedCreatePodSandBox, ...), as upstream; one that repeats, so a transient
                // failure the node gets over is not taken for the pod's state
                if started.elapsed() > EVENTS_AFTER
                    && last_events_check.elapsed() > Duration::from_secs(3)
                    && p.status
                        .as_ref()
                        .and_then(|s| s.phase.as_deref())
                        .is_some_and(|p| !p.is_empty())
                {
                    last_events_check = Instant::now();
                    let w = repeated_warnings(&run.client, &ns, &uid).await;
                    if let Some(first) = w.first() {
                        let reason = first.split(':').next().unwrap_or_default().to_string();
                        settled_messages = first.chars().take(300).collect();
                        break format!("{last}; Warning {reason}");
                    }
                }
            }
            Ok(None) => {
                return (
                    i,
                    name.clone(),
                    fail("the pod vanished before it settled".into(), String::new()),
                )
            }
            Err(e) => last = format!("reading the pod: {e}"),
        }
        if !deckhand_alive(run.deckhand) {
            run.stop.store(true, Ordering::SeqCst);
            let d = diagnose_now().await;
            return (
                i,
                name.clone(),
                fail(
                    format!(
                        "deckhand (pid {}) died while this pod was starting",
                        run.deckhand
                    ),
                    d,
                ),
            );
        }
        if Instant::now() > deadline {
            let d = diagnose_now().await;
            let _ = delete(&run, &name).await;
            return (
                i,
                name.clone(),
                fail(
                    format!("no state with a reason within {SETTLE_TIMEOUT:?} (last: {last})"),
                    d,
                ),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let settled_after = started.elapsed();

    // 2. a while later, the invariants still hold
    tokio::time::sleep(Duration::from_millis(g.dwell_ms)).await;
    if let Ok(Some(p)) = run.pods_api.get_opt(&name).await {
        let bad = invariants(&p);
        if !bad.is_empty() {
            let d = diagnose_now().await;
            let _ = delete(&run, &name).await;
            return (
                i,
                name.clone(),
                fail(
                    format!(
                        "status invariants broken {} ms after it settled: {bad:?}",
                        g.dwell_ms
                    ),
                    d,
                ),
            );
        }
    }
    if g.fetch_logs {
        let container = r.spec["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let lp = LogParams {
            container: Some(container),
            tail_lines: Some(20),
            ..Default::default()
        };
        if tokio::time::timeout(Duration::from_secs(20), run.pods_api.logs(&name, &lp))
            .await
            .is_err()
        {
            let d = diagnose_now().await;
            let _ = delete(&run, &name).await;
            return (
                i,
                name.clone(),
                fail("a logs request got no answer within 20 s".into(), d),
            );
        }
    }

    // 3. deleted with grace 0, gone everywhere
    if let Err(e) = delete(&run, &name).await {
        return (
            i,
            name.clone(),
            fail(format!("deleting the pod: {e}"), String::new()),
        );
    }
    let pod_dir = run.root_dir.join("pods").join(&uid);
    let log_dir = PathBuf::from(format!("/var/log/pods/{ns}_{name}_{uid}"));
    let gone_deadline = Instant::now() + GONE_TIMEOUT;
    loop {
        let in_api = matches!(run.pods_api.get_opt(&name).await, Ok(Some(p)) if p.metadata.uid.as_deref() == Some(uid.as_str()));
        let u = uid.clone();
        let runtime = blocking(move || runtime_ids(&u))
            .await
            .unwrap_or_else(|| Err("crictl did not finish".into()));
        let mut left = vec![];
        if in_api {
            left.push("the API object".to_string());
        }
        match &runtime {
            Ok((0, 0)) => {}
            Ok((s, c)) => left.push(format!("{s} sandboxes and {c} containers")),
            Err(e) => left.push(format!("(the runtime could not be asked: {e})")),
        }
        if pod_dir.exists() {
            left.push(pod_dir.display().to_string());
        }
        if log_dir.exists() {
            left.push(log_dir.display().to_string());
        }
        if left.is_empty() {
            break;
        }
        if Instant::now() > gone_deadline {
            let log = deckhand_log_tail(&uid, 25);
            return (
                i,
                name.clone(),
                fail(
                    format!(
                        "still there {GONE_TIMEOUT:?} after the delete: {}",
                        left.join(", ")
                    ),
                    format!("----- deckhand log lines naming uid {uid} -----\n{log}"),
                ),
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "[{ns}] case {i} {name}: {summary} (settled in {:.1} s, whole case {:.1} s){}",
        settled_after.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        if settled_messages.is_empty() {
            String::new()
        } else {
            format!("\n    {settled_messages}")
        }
    );
    (
        i,
        name,
        Outcome::Passed {
            summary,
            uid,
            spec: r.spec,
        },
    )
}

/// How many sandboxes and containers (all states) the runtime has for pod `uid`; crictl's error
/// when it cannot say (unlike the common helpers, which panic).
fn runtime_ids(uid: &str) -> Result<(usize, usize), String> {
    let env = env();
    let label = format!("io.kubernetes.pod.uid={uid}");
    let count = |what: &str| -> Result<usize, String> {
        let mut args = vec![what];
        if what == "ps" {
            args.push("-a");
        }
        let out = std::process::Command::new(env.crictl_bin())
            .arg("--runtime-endpoint")
            .arg(env.get("CRI_ENDPOINT"))
            .arg("--timeout")
            .arg("10s")
            .args(&args)
            .args(["--label", &label, "-q"])
            .output()
            .map_err(|e| format!("running crictl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "crictl {what}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count())
    };
    Ok((count("pods")?, count("ps")?))
}

/// The pod cgroup directories of `uid` that exist, in every hierarchy (cgroup v1 controllers or
/// the v2 tree), for either cgroup driver (`kubepods/<qos>/pod<uid>` or
/// `kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice`).
fn pod_cgroups(uid: &str) -> Vec<PathBuf> {
    let u = uid.replace('-', "_");
    let base = Path::new("/sys/fs/cgroup");
    let roots: Vec<PathBuf> = std::iter::once(base.to_path_buf())
        .chain(
            std::fs::read_dir(base)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir()),
        )
        .collect();
    let rel = [
        format!("kubepods/pod{uid}"),
        format!("kubepods/burstable/pod{uid}"),
        format!("kubepods/besteffort/pod{uid}"),
        format!("kubepods.slice/kubepods-pod{u}.slice"),
        format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
        format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"),
    ];
    roots
        .iter()
        .flat_map(|r| rel.iter().map(move |p| r.join(p)))
        .filter(|p| p.is_dir())
        .collect()
}

async fn delete(run: &Run, name: &str) -> Result<(), kube::Error> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    match run.pods_api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------------------------------------
// run-wide checks
// ---------------------------------------------------------------------------------------------

/// Entries of the host directories (one level) whose name carries `marker`.
fn marked_host_entries(marker: &str, extra: &[PathBuf]) -> BTreeSet<String> {
    HOST_DIRS
        .iter()
        .map(PathBuf::from)
        .chain(extra.iter().cloned())
        .flat_map(|d| {
            std::fs::read_dir(&d)
                .into_iter()
                .flatten()
                .flatten()
                .map(move |e| d.join(e.file_name()))
        })
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(marker))
        })
        .map(|p| p.display().to_string())
        .collect()
}

/// What deckhand logged after `offset` (all of it if the file was truncated since).
fn log_since(path: &Path, offset: u64) -> String {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(_) => return String::new(),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = if len < offset { 0 } else { offset };
    let _ = f.seek(SeekFrom::Start(from));
    let mut buf = vec![];
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The configMap and secret the generated pods refer to: keys with the marker (they become
/// file names), a hidden key, an empty value, a 64 KiB value, binary data.
async fn create_fixtures(run: &Run) {
    let m = &run.ctx.marker;
    let cms: Api<ConfigMap> = Api::namespaced(run.client.clone(), &run.ctx.ns);
    let mut data = BTreeMap::new();
    data.insert(format!("{m}-a"), "alpha ünïcödé 🙂".to_string());
    data.insert(format!("{m}.b.txt"), "line1\nline2\n".to_string());
    data.insert(format!(".{m}-hidden"), "hidden".to_string());
    data.insert(format!("{m}_C"), String::new());
    data.insert(format!("{m}-json"), "{\"k\": [1, 2, 3]}".to_string());
    data.insert(format!("{m}-big"), "x".repeat(64 * 1024));
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": run.ctx.cm},
        "data": data,
        "binaryData": {format!("{m}-bin"): "AAEC//4="},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("creating the configMap");
    let secrets: Api<Secret> = Api::namespaced(run.client.clone(), &run.ctx.ns);
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": run.ctx.secret},
        "stringData": {
            format!("{m}-user"): "admin",
            format!("{m}-pass"): "p@ss w0rd ü'\"$`",
            format!(".{m}-dot"): "dot",
        },
        "data": {format!("{m}-bin"): "/woB"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("creating the secret");
}

/// Random valid pod specs through the real API server to deckhand: each accepted pod reaches a
/// state with a reason and leaves nothing behind when deleted; deckhand never panics or
/// restarts, and nothing is written outside its directories.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_valid_pod_specs_reach_a_state_with_a_reason_and_leave_nothing_behind() {
    let n: usize = env_or("FUZZ_PODS", 40);
    let seed: u64 = env_or("FUZZ_SEED", rand::random::<u64>());
    let only: Option<usize> = std::env::var("FUZZ_CASE")
        .ok()
        .and_then(|v| v.trim().parse().ok());
    let parallel: usize = env_or("FUZZ_PARALLEL", 8).max(1);
    let m = marker(seed);
    println!(
        "fuzz: seed {seed} (replay: FUZZ_SEED={seed} FUZZ_PODS={n}), marker {m}, {} cases, {parallel} in flight",
        if only.is_some() { 1 } else { n }
    );
    let t0 = Instant::now();
    let client = client().await;
    let deckhand = deckhand_pid();
    let log_path = PathBuf::from(env().get("DECKHAND_LOG"));
    let log_offset = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
    let root_dir = PathBuf::from(env().get("DECKHAND_ROOT_DIR"));
    let extra_dirs = vec![root_dir.clone()];
    let before = marked_host_entries(&m, &extra_dirs);
    let ns = TestNs::new(&client, "fuzz").await;
    let run = Arc::new(Run {
        verbose: only.is_some(),
        client: client.clone(),
        ctx: Ctx {
            marker: m.clone(),
            node: env().node_name().to_string(),
            ns: ns.name.clone(),
            cm: format!("{m}-cm"),
            cm_keys: ["-a", ".b.txt", "_C", "-json", "-big"]
                .iter()
                .map(|k| format!("{m}{k}"))
                .chain([format!(".{m}-hidden"), format!("{m}-bin")])
                .collect(),
            secret: format!("{m}-secret"),
            secret_keys: vec![
                format!("{m}-user"),
                format!("{m}-pass"),
                format!(".{m}-dot"),
                format!("{m}-bin"),
            ],
        },
        seed,
        deckhand,
        root_dir,
        stop: AtomicBool::new(false),
        pods_api: ns.pods(),
        dyn_api: Api::namespaced_with(client.clone(), &ns.name, &ApiResource::erase::<Pod>(&())),
    });
    create_fixtures(&run).await;

    let cases: Vec<usize> = match only {
        Some(i) => vec![i],
        None => (0..n).collect(),
    };
    let results: Vec<(usize, String, Outcome)> = futures::stream::iter(cases)
        .map(|i| run_case(run.clone(), i))
        .buffer_unordered(parallel)
        .collect()
        .await;

    // the report
    let mut rejected: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut passed: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = vec![];
    let mut skipped = 0;
    for (_, _, o) in &results {
        match o {
            Outcome::Rejected { key, message } => {
                let e = rejected.entry(key.clone()).or_insert((0, message.clone()));
                e.0 += 1;
            }
            Outcome::Passed { summary, .. } => *passed.entry(summary.clone()).or_default() += 1,
            Outcome::Failed { headline, details } => failures.push((headline, details)),
            Outcome::Skipped => skipped += 1,
        }
    }
    let total = results.len();
    let n_rejected: usize = rejected.values().map(|(c, _)| c).sum();
    println!("fuzz: states reached (pods per state):");
    for (s, c) in &passed {
        println!("  {c:3}  {s}");
    }
    if !rejected.is_empty() {
        println!("fuzz: refused by the API server (count, cause, one message):");
        for (k, (c, msg)) in &rejected {
            println!(
                "  {c:3}  {k}\n         {}",
                msg.chars().take(400).collect::<String>()
            );
        }
    }
    println!(
        "fuzz: {total} generated, {} accepted ({:.0} %), {n_rejected} refused, {} failed, {skipped} skipped, in {:.1} s (seed {seed})",
        total - n_rejected,
        100.0 * (total - n_rejected) as f64 / total.max(1) as f64,
        failures.len(),
        t0.elapsed().as_secs_f64()
    );

    // run-wide checks
    let mut problems = vec![];
    let alive = deckhand_alive(deckhand);
    let now_pid = std::fs::read_to_string(env().get("DECKHAND_PIDFILE"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok());
    if !alive || now_pid != Some(deckhand) {
        problems.push(format!(
            "deckhand's pid changed or it died: {deckhand} at the start, pid file now {now_pid:?}, {deckhand} alive: {alive}"
        ));
    }
    let log = log_since(&log_path, log_offset);
    let panics: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains("panicked")
                || (l.contains("ERROR") && l.to_ascii_lowercase().contains("panic"))
        })
        .collect();
    if !panics.is_empty() {
        problems.push(format!(
            "deckhand's log names a panic during the run:\n{}",
            panics.join("\n")
        ));
    }
    let errors = log.lines().filter(|l| l.contains(" ERROR ")).count();
    println!(
        "fuzz: deckhand logged {} lines during the run, {errors} at ERROR",
        log.lines().count()
    );
    // the pod cgroups of the deleted pods, in every hierarchy
    let deleted: Vec<(usize, &String, &String, &Value)> = results
        .iter()
        .filter_map(|(i, name, o)| match o {
            Outcome::Passed { uid, spec, .. } => Some((*i, name, uid, spec)),
            _ => None,
        })
        .collect();
    let cgroup_deadline = Instant::now() + CGROUP_TIMEOUT;
    let leftovers = loop {
        let left: Vec<(usize, &String, &String, &Value, Vec<PathBuf>)> = deleted
            .iter()
            .map(|(i, name, uid, spec)| (*i, *name, *uid, *spec, pod_cgroups(uid)))
            .filter(|l| !l.4.is_empty())
            .collect();
        if left.is_empty() || Instant::now() > cgroup_deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if let Some((i, name, uid, spec, paths)) = leftovers.first() {
        let mut per_hierarchy: BTreeMap<String, usize> = BTreeMap::new();
        for (_, _, _, _, ps) in &leftovers {
            for p in ps {
                let h = p
                    .strip_prefix("/sys/fs/cgroup")
                    .ok()
                    .and_then(|r| r.components().next())
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .filter(|c| !c.starts_with("kubepods"))
                    .unwrap_or_else(|| "(root)".into());
                *per_hierarchy.entry(h).or_default() += 1;
            }
        }
        problems.push(format!(
            "{} of the {} deleted pods left their pod cgroup behind, still there {CGROUP_TIMEOUT:?} after the run's last delete (directories per hierarchy: {per_hierarchy:?}); the first, case {i} (FUZZ_SEED={seed} FUZZ_CASE={i}) pod {}/{name} uid {uid}: {paths:?}\n----- its spec -----\n{}\n----- deckhand log lines naming uid {uid} -----\n{}",
            leftovers.len(),
            deleted.len(),
            ns.name,
            serde_json::to_string_pretty(spec).unwrap(),
            deckhand_log_tail(uid, 10)
        ));
    }
    let after = marked_host_entries(&m, &extra_dirs);
    let new: Vec<&String> = after.difference(&before).collect();
    if !new.is_empty() {
        problems.push(format!(
            "entries with the run's marker {m} appeared outside deckhand's pod directories: {new:?}"
        ));
    }
    for (k, (headline, details)) in failures.iter().enumerate() {
        if k < FULL_REPORTS {
            println!("\n===== FAILED {headline}\n{details}\n");
        } else {
            println!("===== FAILED {headline} (replay the case for its spec and diagnostics)");
        }
    }
    if total >= 20 && only.is_none() {
        assert!(
            (total - n_rejected) * 4 >= total * 3,
            "the API server refused {n_rejected} of {total} generated pods: the generator needs fixing (see the causes above)"
        );
    }
    assert!(
        failures.is_empty() && problems.is_empty(),
        "fuzz run with FUZZ_SEED={seed} failed: {} case(s) failed (printed above; the first {FULL_REPORTS} with spec and diagnostics){}{}",
        failures.len(),
        failures
            .iter()
            .map(|(h, _)| format!("\n- {h}"))
            .collect::<String>(),
        problems
            .iter()
            .map(|p| format!("\n- {p}"))
            .collect::<String>()
    );
    ns.delete().await;
}
