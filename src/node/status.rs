//! Pure node-status generation: the Go kubelet's node status setters
//! (k/k `pkg/kubelet/nodestatus/setters.go`) over host facts, runtime status and the previous
//! status. Conditions come out in the Go kubelet's order (MemoryPressure, DiskPressure,
//! PIDPressure, Ready — Ready last), with heartbeat and transition times handled as it does.

use super::hostinfo::HostInfo;
use crate::quantity::{binary_si, cpu_millis};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;

/// Inputs of [`node_status`].
#[derive(Debug, Clone)]
pub struct NodeStatusInputs<'a> {
    /// Host facts.
    pub host: &'a HostInfo,
    /// InternalIP addresses, primary first.
    pub node_ips: &'a [String],
    /// Hostname address.
    pub hostname: &'a str,
    /// `pods` capacity.
    pub max_pods: u32,
    /// kube-reserved + system-reserved in milli-units, by resource.
    pub reserved_milli: &'a BTreeMap<String, i128>,
    /// Kubelet port (daemonEndpoints).
    pub port: i32,
    /// `<runtime>://<version>` or `Unknown`-style text when Version failed.
    pub container_runtime_version: &'a str,
    /// Reported kubelet version.
    pub kubelet_version: &'a str,
    /// Runtime errors that make the node not ready (empty when ready), e.g.
    /// `container runtime network not ready: NetworkReady=false reason:... message:...`.
    pub runtime_errors: &'a [String],
    /// The runtime handlers CRI `Status` lists ([`runtime_handlers`]).
    pub runtime_handlers: &'a [crate::cri::api::RuntimeHandler],
    /// The previous status (for transition times).
    pub previous: Option<&'a NodeStatus>,
    /// Now, seconds precision.
    pub now: Time,
    /// Pressure conditions in force (from the eviction manager).
    pub pressure: &'a [crate::eviction::thresholds::NodeCondition],
    /// Hard eviction thresholds (`memory.available` and `nodefs.available` are reserved from
    /// allocatable).
    pub eviction_thresholds: &'a [crate::eviction::thresholds::Threshold],
    /// `--cloud-provider=external`: addresses already on the Node (a cloud controller manager
    /// set them) are kept instead of `node_ips` (k/k nodestatus `NodeAddress`: "provider set
    /// addresses should take precedence").
    pub external_cloud_provider: bool,
    /// `status.volumesInUse`: the unique names of the volumes pods on the node have mounted
    /// that the attach/detach controller tracks ([`crate::volume::pv::volumes_in_use`]).
    pub volumes_in_use: &'a [String],
}

fn condition(
    prev: Option<&NodeStatus>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) -> NodeCondition {
    let s = if status { "True" } else { "False" };
    let ltt = prev
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_ && c.status == s))
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    NodeCondition {
        type_: type_.into(),
        status: s.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(ltt),
    }
}

fn hugepage_name(size: u64) -> String {
    format!("hugepages-{}", binary_si(size).0)
}

/// Capacity and allocatable (doc page "Reserve Compute Resources for System Daemons"):
/// allocatable = capacity − kube-reserved − system-reserved − hard eviction thresholds, each
/// hugepage reservation also subtracted from memory. `reserved_milli` is the sum of
/// `kubeReserved` and `systemReserved` per resource in milli-units (cpu millicores, memory and
/// ephemeral-storage milli-bytes).
pub fn capacity_and_allocatable(
    host: &HostInfo,
    max_pods: u32,
    reserved_milli: &BTreeMap<String, i128>,
    thresholds: &[crate::eviction::thresholds::Threshold],
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    use crate::eviction::thresholds::{allocatable_reservation, Signal};
    let reserved = |name: &str| reserved_milli.get(name).copied().unwrap_or(0).max(0);
    let reserved_bytes = |name: &str| (reserved(name) / 1000) as u64;
    let mut cap = BTreeMap::new();
    let mut alloc = BTreeMap::new();
    cap.insert("cpu".to_string(), cpu_millis(host.num_cores * 1000));
    alloc.insert(
        "cpu".to_string(),
        cpu_millis((host.num_cores * 1000).saturating_sub(reserved("cpu") as u64)),
    );
    cap.insert("memory".to_string(), binary_si(host.memory_bytes));
    let hugepages_total: u64 = host.hugepages.iter().map(|(_, t)| *t).sum();
    alloc.insert(
        "memory".to_string(),
        binary_si(
            host.memory_bytes
                .saturating_sub(reserved_bytes("memory"))
                .saturating_sub(allocatable_reservation(
                    thresholds,
                    Signal::MemoryAvailable,
                    host.memory_bytes,
                ))
                .saturating_sub(hugepages_total),
        ),
    );
    for (size, total) in &host.hugepages {
        cap.insert(hugepage_name(*size), binary_si(*total));
        alloc.insert(hugepage_name(*size), binary_si(*total));
    }
    cap.insert("pods".to_string(), Quantity(max_pods.to_string()));
    alloc.insert("pods".to_string(), Quantity(max_pods.to_string()));
    cap.insert(
        "ephemeral-storage".to_string(),
        binary_si(host.root_fs_bytes),
    );
    let reserve = allocatable_reservation(thresholds, Signal::NodeFsAvailable, host.root_fs_bytes);
    alloc.insert(
        "ephemeral-storage".to_string(),
        binary_si(
            host.root_fs_bytes
                .saturating_sub(reserve)
                .saturating_sub(reserved_bytes("ephemeral-storage")),
        ),
    );
    (cap, alloc)
}

/// An extended resource name (k/k `v1helper.IsExtendedResourceName`): one with a domain
/// (`example.com/foo`) outside `kubernetes.io`, not a `requests.` quota name, and a valid
/// qualified name once prefixed with `requests.`.
pub fn is_extended_resource_name(name: &str) -> bool {
    let Some((domain, local)) = name.split_once('/') else {
        return false; // native: cpu, memory, pods, hugepages-*, ...
    };
    if name.contains("kubernetes.io/") || name.starts_with("requests.") {
        return false;
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let prefix = format!("requests.{domain}");
    let name_ok = !local.is_empty()
        && local.len() <= 63
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && local.as_bytes()[0].is_ascii_alphanumeric()
        && local.as_bytes()[local.len() - 1].is_ascii_alphanumeric();
    prefix.len() <= 253 && prefix.split('.').all(label_ok) && name_ok
}

/// Adds the extended resources someone else put in the Node's status (a device plugin's manager,
/// or an admin's patch as the scheduling conformance tests do) to the capacity and allocatable
/// deckhand computes, as the Go kubelet's `MachineInfo` setter does: it starts from the API
/// copy's capacity, and allocatable is capacity minus the reservation (none for extended
/// resources); an extended resource gone from the capacity is gone from allocatable too.
/// deckhand's status patch never carries them (a strategic merge leaves keys it does not name,
/// as Go's two-way patch does), so a removal between its read and its write is not undone;
/// this is for the Node that admission reads.
pub fn carry_extended_resources(
    previous: Option<&NodeStatus>,
    capacity: &mut BTreeMap<String, Quantity>,
    allocatable: &mut BTreeMap<String, Quantity>,
) {
    let Some(prev_cap) = previous.and_then(|p| p.capacity.as_ref()) else {
        return;
    };
    for (k, v) in prev_cap {
        if is_extended_resource_name(k) && !capacity.contains_key(k) {
            capacity.insert(k.clone(), v.clone());
            allocatable.insert(k.clone(), v.clone());
        }
    }
}

/// Computes the node status.
pub fn node_status(inp: &NodeStatusInputs) -> NodeStatus {
    let (capacity, allocatable) = capacity_and_allocatable(
        inp.host,
        inp.max_pods,
        inp.reserved_milli,
        inp.eviction_thresholds,
    );
    let now = &inp.now;
    let prev = inp.previous;
    let mut missing = vec![];
    if inp.host.num_cores == 0 {
        missing.push("cpu");
    }
    if inp.host.memory_bytes == 0 {
        missing.push("memory");
    }
    if inp.host.root_fs_bytes == 0 {
        missing.push("ephemeral-storage");
    }
    let mut errors: Vec<String> = inp.runtime_errors.to_vec();
    if !missing.is_empty() {
        errors.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let ready = if errors.is_empty() {
        condition(
            prev,
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status",
            now,
        )
    } else {
        condition(
            prev,
            "Ready",
            false,
            "KubeletNotReady",
            &errors.join(", "),
            now,
        )
    };
    use crate::eviction::thresholds::NodeCondition as P;
    let under = |c: P| inp.pressure.contains(&c);
    let pressure = |c: P, yes: (&str, &str), no: (&str, &str)| {
        let (r, m) = if under(c) { yes } else { no };
        condition(prev, c.type_name(), under(c), r, m, now)
    };
    let conditions = vec![
        pressure(
            P::MemoryPressure,
            (
                "KubeletHasInsufficientMemory",
                "kubelet has insufficient memory available",
            ),
            (
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
        ),
        pressure(
            P::DiskPressure,
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ),
        pressure(
            P::PidPressure,
            (
                "KubeletHasInsufficientPID",
                "kubelet has insufficient PID available",
            ),
            (
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        ),
        ready,
    ];
    let cloud_set = inp
        .previous
        .and_then(|p| p.addresses.clone())
        .filter(|a| inp.external_cloud_provider && !a.is_empty());
    let addresses = cloud_set.unwrap_or_else(|| {
        let mut addresses: Vec<NodeAddress> = inp
            .node_ips
            .iter()
            .map(|ip| NodeAddress {
                type_: "InternalIP".into(),
                address: ip.clone(),
            })
            .collect();
        addresses.push(NodeAddress {
            type_: "Hostname".into(),
            address: inp.hostname.into(),
        });
        addresses
    });
    NodeStatus {
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        conditions: Some(conditions),
        addresses: Some(addresses),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: inp.port }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: inp.host.machine_id.clone(),
            system_uuid: inp.host.system_uuid.clone(),
            boot_id: inp.host.boot_id.clone(),
            kernel_version: inp.host.kernel_version.clone(),
            os_image: inp.host.os_image.clone(),
            container_runtime_version: inp.container_runtime_version.into(),
            kubelet_version: inp.kubelet_version.into(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: inp.host.architecture.clone(),
            swap: None,
        }),
        runtime_handlers: runtime_handlers(inp.runtime_handlers),
        volumes_in_use: (!inp.volumes_in_use.is_empty()).then(|| inp.volumes_in_use.to_vec()),
        ..Default::default()
    }
}

/// `status.runtimeHandlers` (k/k `nodestatus.RuntimeHandlers`): each handler the runtime lists
/// with whether it supports user namespaces, as the runtime says ([`crate::userns`]), and
/// `recursiveReadOnlyMounts: false` whatever the runtime says, since deckhand does not make
/// read-only mounts recursive (`recursiveReadOnly: Enabled` is not implemented). None when the
/// runtime lists none (containerd 1.6), as Go's empty list is left out.
pub fn runtime_handlers(
    handlers: &[crate::cri::api::RuntimeHandler],
) -> Option<Vec<k8s_openapi::api::core::v1::NodeRuntimeHandler>> {
    use k8s_openapi::api::core::v1::{NodeRuntimeHandler, NodeRuntimeHandlerFeatures};
    (!handlers.is_empty()).then(|| {
        handlers
            .iter()
            .map(|h| NodeRuntimeHandler {
                name: Some(h.name.clone()),
                features: Some(NodeRuntimeHandlerFeatures {
                    recursive_read_only_mounts: Some(false),
                    user_namespaces: Some(h.features.as_ref().is_some_and(|f| f.user_namespaces)),
                }),
            })
            .collect()
    })
}

/// The body of deckhand's strategic-merge status patch: `new` in full, and `runtimeHandlers`
/// deleted (`null`) when the runtime lists none but the API copy `api` still has some, left by
/// another runtime or kubelet (containerd 2 before a move to 1.6, or the Go kubelet). The Go
/// kubelet's `RuntimeHandlers` setter always sets the list and its two-way patch from the API
/// copy deletes a list that became empty (k/k `nodestatus.RuntimeHandlers`,
/// `kubelet_node_status.go` `updateNodeStatus`); a patch that leaves the key out keeps the old one.
pub fn status_patch(api: Option<&NodeStatus>, new: &NodeStatus) -> serde_json::Value {
    let mut patch = serde_json::json!({ "status": new });
    let stale = api.is_some_and(|a| a.runtime_handlers.as_ref().is_some_and(|h| !h.is_empty()));
    if new.runtime_handlers.is_none() && stale {
        patch["status"]["runtimeHandlers"] = serde_json::Value::Null;
    }
    // the last volume unmounted: the list goes (an absent field would keep the old one)
    let in_use = api.is_some_and(|a| a.volumes_in_use.as_ref().is_some_and(|v| !v.is_empty()));
    if new.volumes_in_use.is_none() && in_use {
        patch["status"]["volumesInUse"] = serde_json::Value::Null;
    }
    patch
}

/// True when two statuses differ in anything but heartbeat times (the Go kubelet writes an
/// unchanged status only every `nodeStatusReportFrequency`).
pub fn changed_ignoring_heartbeats(a: &NodeStatus, b: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        if let Some(cs) = s.conditions.as_mut() {
            for c in cs.iter_mut() {
                c.last_heartbeat_time = None;
            }
            cs.sort_by(|x, y| x.type_.cmp(&y.type_));
        }
        s.images = None;
        s
    };
    strip(a) != strip(b)
}

/// Whether the node status loop writes `new` (k/k `nodeStatusHasChanged` and
/// `nodeStatusReportFrequency`): when the report period is `due`, when nothing was written
/// yet, when `new` differs from deckhand's `last` write in anything but heartbeat times, or when
/// the API server's copy (`api`) shows conditions other than `new`'s (type, status, reason,
/// message), as after the node lifecycle controller marked the node `Unknown` while deckhand
/// could not reach the server. Only the conditions of the API copy are compared: the server
/// adds fields deckhand never sets and prints quantities in canonical form.
pub fn should_write_node_status(
    api: Option<&NodeStatus>,
    last: Option<&NodeStatus>,
    new: &NodeStatus,
    due: bool,
) -> bool {
    let conditions = |s: &NodeStatus| {
        let mut cs: Vec<(String, String, Option<String>, Option<String>)> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect();
        cs.sort();
        cs
    };
    due || last.is_none_or(|l| changed_ignoring_heartbeats(l, new))
        || api.is_some_and(|a| conditions(a) != conditions(new))
}

/// A runtime version as the Go kubelet reads it: `utilversion.ParseGeneric` (k8s.io/apimachinery
/// `pkg/util/version`) keeps the leading numeric components (`v` prefix and surrounding text
/// dropped, at least two components, the first not zero-prefixed) and prints only those, so
/// containerd's `1.6.20~ds1` becomes `1.6.20`. None when the string does not parse as a generic
/// version.
pub fn parse_generic_version(raw: &str) -> Option<String> {
    let s = raw.trim_start();
    let s = s.strip_prefix('v').unwrap_or(s);
    let end = s
        .char_indices()
        .find(|(_, ch)| !(ch.is_ascii_digit() || *ch == '.'))
        .map_or(s.len(), |(i, _)| i);
    // the numeric part is `[0-9]+(\.[0-9]+)*`: a trailing or doubled dot ends it
    let mut numbers = &s[..end];
    while let Some(i) = numbers.find("..") {
        numbers = &numbers[..i];
    }
    let numbers = numbers.trim_end_matches('.');
    let comps: Vec<&str> = numbers.split('.').collect();
    if comps.len() < 2 || comps.iter().any(|c| c.is_empty()) {
        return None;
    }
    if comps[0].len() > 1 && comps[0].starts_with('0') {
        return None;
    }
    let parsed: Option<Vec<u64>> = comps.iter().map(|c| c.parse::<u64>().ok()).collect();
    Some(
        parsed?
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// `nodeInfo.containerRuntimeVersion`: `<runtime name>://<version>` with the version as
/// [`parse_generic_version`] prints it (k/k `nodestatus.VersionInfo`, kuberuntime `Version`).
/// A version that does not parse is shown as the runtime gave it.
pub fn container_runtime_version(runtime_name: &str, runtime_version: &str) -> String {
    let v = parse_generic_version(runtime_version).unwrap_or_else(|| runtime_version.to_string());
    format!("{runtime_name}://{v}")
}

#[cfg(test)]
mod tests {

    /// Issue 11 item 1: Ready `Unknown` set by the node lifecycle controller during an outage
    /// is a change to write, though deckhand's own last write equals the new status.
    #[test]
    fn node_status_is_written_when_the_api_copy_differs_in_conditions() {
        use k8s_openapi::api::core::v1::NodeCondition;
        let with_ready = |status: &str, reason: &str, hb: i64| NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                reason: Some(reason.into()),
                last_heartbeat_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(hb).unwrap(),
                )),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let ours = with_ready("True", "KubeletReady", 100);
        let new = with_ready("True", "KubeletReady", 110);
        let unknown = with_ready("Unknown", "NodeStatusUnknown", 100);
        let mut api_with_extras = with_ready("True", "KubeletReady", 100);
        api_with_extras.volumes_in_use = Some(vec!["x".into()]);
        // (case, api copy, last written, due, want)
        let cases = [
            (
                "nothing changed, not due",
                Some(&ours),
                Some(&ours),
                false,
                false,
            ),
            ("heartbeat only", Some(&ours), Some(&ours), false, false),
            ("report period due", Some(&ours), Some(&ours), true, true),
            (
                "controller set Unknown",
                Some(&unknown),
                Some(&ours),
                false,
                true,
            ),
            ("nothing written yet", Some(&ours), None, false, true),
            ("API copy unreadable", None, Some(&ours), false, false),
            (
                "server-side fields do not count",
                Some(&api_with_extras),
                Some(&ours),
                false,
                false,
            ),
        ];
        for (case, api, last, due, want) in cases {
            assert_eq!(
                should_write_node_status(api, last, &new, due),
                want,
                "{case}"
            );
        }
        let not_ready = with_ready("False", "KubeletNotReady", 110);
        assert!(should_write_node_status(
            Some(&ours),
            Some(&ours),
            &not_ready,
            false
        ));
    }

    #[test]
    fn runtime_version_is_printed_as_go_parse_generic_does() {
        let cases = [
            ("1.6.20~ds1", Some("1.6.20")),
            ("1.6.20", Some("1.6.20")),
            ("v2.1.4", Some("2.1.4")),
            ("  1.7.0-rc.1+git", Some("1.7.0")),
            ("1.06.3", Some("1.6.3")),
            ("01.6.3", None),
            ("1", None),
            ("", None),
            ("abc", None),
            ("1.2..3", Some("1.2")),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_generic_version(raw).as_deref(), want, "{raw:?}");
        }
        assert_eq!(
            container_runtime_version("containerd", "1.6.20~ds1"),
            "containerd://1.6.20"
        );
        // containerd 2.x reports its version with a v
        assert_eq!(
            container_runtime_version("containerd", "v2.4.2"),
            "containerd://2.4.2"
        );
        assert_eq!(container_runtime_version("x", "weird"), "x://weird");
    }
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn defaults() -> &'static [crate::eviction::thresholds::Threshold] {
        static T: std::sync::OnceLock<Vec<crate::eviction::thresholds::Threshold>> =
            std::sync::OnceLock::new();
        T.get_or_init(crate::eviction::thresholds::default_thresholds)
    }

    fn host() -> HostInfo {
        HostInfo {
            num_cores: 2,
            memory_bytes: 24563532 * 1024,
            root_fs_bytes: 263112772 * 1024,
            hugepages: vec![(2 << 20, 0)],
            machine_id: "m".into(),
            system_uuid: String::new(),
            boot_id: "b".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            architecture: "amd64".into(),
        }
    }

    static NO_RESERVED: BTreeMap<String, i128> = BTreeMap::new();

    fn inputs<'a>(
        h: &'a HostInfo,
        ips: &'a [String],
        errs: &'a [String],
        prev: Option<&'a NodeStatus>,
        t: i64,
    ) -> NodeStatusInputs<'a> {
        NodeStatusInputs {
            host: h,
            node_ips: ips,
            hostname: "node-a",
            max_pods: 110,
            reserved_milli: &NO_RESERVED,
            port: 10250,
            container_runtime_version: "containerd://1.6.20~ds1",
            kubelet_version: "v1.36.3",
            runtime_errors: errs,
            runtime_handlers: &[],
            previous: prev,
            now: Time(Timestamp::from_second(t).unwrap()),
            pressure: &[],
            eviction_thresholds: defaults(),
            external_cloud_provider: false,
            volumes_in_use: &[],
        }
    }

    #[test]
    fn volumes_in_use_are_reported_and_cleared_when_the_last_one_goes() {
        let with = |v: Option<Vec<&str>>| NodeStatus {
            volumes_in_use: v.map(|v| v.into_iter().map(String::from).collect()),
            ..Default::default()
        };
        let api = with(Some(vec!["kubernetes.io/local-volume/pv1"]));
        let p = status_patch(Some(&api), &with(None));
        assert!(p["status"]["volumesInUse"].is_null(), "{p}");
        assert!(
            p["status"]
                .as_object()
                .unwrap()
                .contains_key("volumesInUse"),
            "cleared: {p}"
        );
        let p = status_patch(Some(&with(None)), &with(None));
        assert!(
            !p["status"]
                .as_object()
                .unwrap()
                .contains_key("volumesInUse"),
            "{p}"
        );
        let p = status_patch(Some(&with(None)), &api);
        assert_eq!(
            p["status"]["volumesInUse"][0],
            "kubernetes.io/local-volume/pv1"
        );
    }

    #[test]
    fn the_status_patch_deletes_runtime_handlers_the_runtime_no_longer_lists() {
        use k8s_openapi::api::core::v1::NodeRuntimeHandler;
        let with = |names: &[&str]| NodeStatus {
            runtime_handlers: Some(
                names
                    .iter()
                    .map(|n| NodeRuntimeHandler {
                        name: Some(n.to_string()),
                        features: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        let none = NodeStatus::default();
        // (API copy, new status, expected runtimeHandlers in the patch; None: key left out)
        let cases: [(Option<NodeStatus>, NodeStatus, Option<serde_json::Value>); 5] = [
            // containerd 1.6 after containerd 2 or the Go kubelet: deleted
            (
                Some(with(&["", "runc"])),
                none.clone(),
                Some(serde_json::Value::Null),
            ),
            // nothing to delete
            (Some(none.clone()), none.clone(), None),
            (Some(with(&[])), none.clone(), None),
            (None, none.clone(), None),
            // the runtime lists some: written as they are
            (
                Some(with(&["runc"])),
                with(&[""]),
                Some(serde_json::json!([{"name": ""}])),
            ),
        ];
        for (api, new, want) in cases {
            let patch = status_patch(api.as_ref(), &new);
            assert_eq!(
                patch["status"].get("runtimeHandlers").cloned(),
                want,
                "api {api:?}, new {new:?}"
            );
        }
    }

    #[test]
    fn runtime_handlers_say_what_deckhand_supports_through_them() {
        use crate::cri::api::{RuntimeHandler, RuntimeHandlerFeatures};
        assert_eq!(runtime_handlers(&[]), None, "containerd 1.6 lists none");
        let h = |name: &str, userns: bool, rro: bool| RuntimeHandler {
            name: name.into(),
            features: Some(RuntimeHandlerFeatures {
                user_namespaces: userns,
                recursive_read_only_mounts: rro,
            }),
        };
        let got = runtime_handlers(&[
            h("", true, true),
            h("runc", false, true),
            RuntimeHandler {
                name: "kata".into(),
                features: None,
            },
        ])
        .unwrap();
        let seen: Vec<(String, Option<bool>, Option<bool>)> = got
            .into_iter()
            .map(|n| {
                let f = n.features.unwrap();
                (
                    n.name.unwrap(),
                    f.user_namespaces,
                    f.recursive_read_only_mounts,
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("".into(), Some(true), Some(false)),
                ("runc".into(), Some(false), Some(false)),
                ("kata".into(), Some(false), Some(false)),
            ]
        );
    }

    #[test]
    fn extended_resource_names_as_go_reads_them() {
        for (name, want) in [
            ("scheduling.k8s.io/foo", true),
            ("example.com/gpu", true),
            ("cpu", false),
            ("hugepages-2Mi", false),
            ("kubernetes.io/foo", false),
            ("requests.example.com/foo", false),
            ("example.com/", false),
            ("bad_domain/x", false),
            ("example.com/-x", false),
        ] {
            assert_eq!(is_extended_resource_name(name), want, "{name}");
        }
    }

    #[test]
    fn extended_resources_in_the_api_copy_stay_in_capacity_and_allocatable() {
        let q = |s: &str| Quantity(s.into());
        let prev = NodeStatus {
            capacity: Some(BTreeMap::from([
                ("cpu".into(), q("64")),
                ("scheduling.k8s.io/foo".into(), q("5")),
            ])),
            allocatable: Some(BTreeMap::from([("scheduling.k8s.io/foo".into(), q("3"))])),
            ..Default::default()
        };
        let mut cap = BTreeMap::from([("cpu".to_string(), q("2"))]);
        let mut alloc = BTreeMap::from([("cpu".to_string(), q("2"))]);
        carry_extended_resources(Some(&prev), &mut cap, &mut alloc);
        // the machine's own figures win; the extended one is kept, allocatable = capacity
        assert_eq!(cap["cpu"], q("2"));
        assert_eq!(cap["scheduling.k8s.io/foo"], q("5"));
        assert_eq!(alloc["scheduling.k8s.io/foo"], q("5"));
        // removed from the capacity (as RemoveExtendedResource does): gone from both
        let mut cap2 = BTreeMap::from([("cpu".to_string(), q("2"))]);
        let mut alloc2 = cap2.clone();
        let prev2 = NodeStatus {
            capacity: Some(BTreeMap::from([("cpu".into(), q("2"))])),
            ..Default::default()
        };
        carry_extended_resources(Some(&prev2), &mut cap2, &mut alloc2);
        assert!(!alloc2.contains_key("scheduling.k8s.io/foo"));
        carry_extended_resources(None, &mut cap2, &mut alloc2);
        assert_eq!(cap2.len(), 1);
    }

    #[test]
    fn capacity_and_allocatable_match_the_go_kubelet() {
        let (cap, alloc) = capacity_and_allocatable(&host(), 110, &BTreeMap::new(), defaults());
        assert_eq!(cap["cpu"].0, "2");
        assert_eq!(cap["memory"].0, "24563532Ki");
        assert_eq!(alloc["memory"].0, "24461132Ki");
        assert_eq!(cap["pods"].0, "110");
        let reserved = BTreeMap::from([
            ("cpu".to_string(), 500i128),
            ("memory".to_string(), 256i128 * 1024 * 1024 * 1000),
        ]);
        let (_, alloc_r) = capacity_and_allocatable(&host(), 110, &reserved, defaults());
        assert_eq!(alloc_r["cpu"].0, "1500m");
        assert_eq!(alloc_r["memory"].0, "24198988Ki");
        assert_eq!(cap["hugepages-2Mi"].0, "0");
        assert_eq!(cap["ephemeral-storage"].0, "263112772Ki");
        assert_eq!(
            alloc["ephemeral-storage"].0,
            // 10% through float32, as the Go kubelet's ThresholdValue.Percentage
            ((263112772u64 * 1024) - ((263112772u64 * 1024) as f64 * 0.1f32 as f64) as u64)
                .to_string()
        );
    }

    #[test]
    fn conditions_are_in_go_order_with_ready_last() {
        let h = host();
        let ips = vec!["10.250.0.1".to_string()];
        let s = node_status(&inputs(&h, &ips, &[], None, 100));
        let types: Vec<_> = s
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(
            types,
            vec!["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let ready = s.conditions.as_ref().unwrap().last().unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        let addrs: Vec<_> = s
            .addresses
            .as_ref()
            .unwrap()
            .iter()
            .map(|a| (a.type_.as_str(), a.address.as_str()))
            .collect();
        assert_eq!(
            addrs,
            vec![("InternalIP", "10.250.0.1"), ("Hostname", "node-a")]
        );
    }

    #[test]
    fn transition_time_kept_and_heartbeat_ignored_for_change_detection() {
        let h = host();
        let ips = vec!["10.250.0.1".to_string()];
        let s1 = node_status(&inputs(&h, &ips, &[], None, 100));
        let s2 = node_status(&inputs(&h, &ips, &[], Some(&s1), 200));
        assert!(!changed_ignoring_heartbeats(&s1, &s2));
        let ready = s2.conditions.as_ref().unwrap().last().unwrap();
        assert_eq!(
            ready.last_transition_time.as_ref().unwrap().0.as_second(),
            100
        );
        assert_eq!(
            ready.last_heartbeat_time.as_ref().unwrap().0.as_second(),
            200
        );
        let errs = vec!["container runtime is down".to_string()];
        let s3 = node_status(&inputs(&h, &ips, &errs, Some(&s2), 300));
        assert!(changed_ignoring_heartbeats(&s2, &s3));
        let ready = s3.conditions.as_ref().unwrap().last().unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("KubeletNotReady"))
        );
    }
}
