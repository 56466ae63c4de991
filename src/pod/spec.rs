//! From a pod spec to CRI configs: the Go kubelet's `generatePodSandboxConfig`
//! (k/k `pkg/kubelet/kuberuntime/kuberuntime_sandbox.go`) and `generateContainerConfig`
//! (`kuberuntime_container.go`), with the labels and annotations of
//! `kuberuntime/labels.go`.

use super::envvars::{expand, EnvError};
use crate::cri::{api, labels};
use crate::resource;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::HashMap;

pub use super::security::{apparmor_profile, seccomp_profile, verify_run_as_non_root, ImageUser};

/// Default `terminationGracePeriodSeconds` when the spec has none (API default, 30 s).
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// Default `terminationMessagePath`.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Where `Localhost` seccomp profiles are looked up: the Go kubelet's `<root-dir>/seccomp` with
/// its default root dir, so profiles placed for the Go kubelet work unchanged.
pub const SECCOMP_PROFILE_ROOT: &str = "/var/lib/kubelet/seccomp";

/// Errors turning a pod spec into CRI configs. Each becomes a `CreateContainerConfigError`
/// waiting reason with this text as its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The pod has no spec.
    #[error("pod has no spec")]
    NoSpec,
    /// A container named in the sync is not in the spec.
    #[error("container {0:?} is not in the pod spec")]
    NoSuchContainer(String),
    /// The container has no image.
    #[error("container {0:?} has no image")]
    NoImage(String),
    /// An environment variable uses a source deckhand does not handle.
    #[error("{0}")]
    Env(String),
    /// The security context cannot be honoured (e.g. runAsNonRoot with a root image).
    #[error("{0}")]
    Security(String),
}

impl From<EnvError> for SpecError {
    fn from(e: EnvError) -> Self {
        SpecError::Env(e.0)
    }
}

/// Where the pod's logs go: `<pod_logs_dir>/<namespace>_<name>_<uid>`
/// (k/k `kuberuntime/helpers.go` `BuildPodLogsDirectory`).
pub fn pod_log_dir(pod_logs_dir: &str, pod: &Pod) -> String {
    pod_log_dir_of(
        pod_logs_dir,
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or(""),
        super::uid(pod),
    )
}

/// [`pod_log_dir`] from the pod's namespace, name and UID (what a listed sandbox or container
/// carries in its labels).
pub fn pod_log_dir_of(pod_logs_dir: &str, namespace: &str, name: &str, uid: &str) -> String {
    format!(
        "{}/{namespace}_{name}_{uid}",
        pod_logs_dir.trim_end_matches('/')
    )
}

/// The sandbox hostname: `spec.hostname` or the pod name, at most 63 characters with trailing
/// `-`/`.` trimmed; empty for host-network pods (the runtime refuses a hostname there).
pub fn sandbox_hostname(pod: &Pod) -> String {
    if super::host_network(pod) {
        return String::new();
    }
    let h = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with('-') || h.ends_with('.') {
        h.pop();
    }
    h
}

/// The namespace modes for a pod's sandbox and containers (k/k `kuberuntime/util`
/// NamespacesForPod): network and IPC on the node for hostNetwork/hostIPC, else the pod's; PID on
/// the node for hostPID, the pod's with shareProcessNamespace, else the container's own.
pub fn namespace_options(spec: &k8s_openapi::api::core::v1::PodSpec) -> api::NamespaceOption {
    api::NamespaceOption {
        network: if spec.host_network.unwrap_or(false) {
            api::NamespaceMode::Node
        } else {
            api::NamespaceMode::Pod
        } as i32,
        pid: if spec.host_pid.unwrap_or(false) {
            api::NamespaceMode::Node
        } else if spec.share_process_namespace.unwrap_or(false) {
            api::NamespaceMode::Pod
        } else {
            api::NamespaceMode::Container
        } as i32,
        ipc: if spec.host_ipc.unwrap_or(false) {
            api::NamespaceMode::Node
        } else {
            api::NamespaceMode::Pod
        } as i32,
        ..Default::default()
    }
}

/// The namespace modes of one container: the pod's ([`namespace_options`]), and for an
/// ephemeral container with a target (`pid_target_id`, a runtime container id) the target's
/// PID namespace, CRI `NamespaceMode::TARGET` — only where the container would otherwise get
/// its own PID namespace; hostPID and shareProcessNamespace pods keep theirs (k/k
/// `generateLinuxContainerConfig`).
pub fn container_namespace_options(
    spec: &k8s_openapi::api::core::v1::PodSpec,
    pid_target_id: Option<&str>,
) -> api::NamespaceOption {
    let mut ns = namespace_options(spec);
    if let Some(id) = pid_target_id {
        if ns.pid == api::NamespaceMode::Container as i32 {
            ns.pid = api::NamespaceMode::Target as i32;
            ns.target_id = id.to_string();
        }
    }
    ns
}

/// Builds the `PodSandboxConfig` for `pod` (attempt `attempt`), logs under `pod_logs_dir`, with
/// the resolv.conf settings `dns` ([`super::dns::pod_dns`]), the pod cgroup's literal path
/// `cgroup_parent` ([`crate::cm::pod_cgroup_parent`]) and the user namespace option `userns`
/// ([`crate::kuberuntime::sandbox::pod_user_namespace`]).
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    pod_logs_dir: &str,
    dns: Option<api::DnsConfig>,
    cgroup_parent: String,
    userns: api::UserNamespace,
) -> api::PodSandboxConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut lbls: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    lbls.insert(
        labels::POD_NAME.into(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    lbls.insert(
        labels::POD_NAMESPACE.into(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    lbls.insert(labels::POD_UID.into(), super::uid(pod).into());
    let annotations: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut port_mappings = vec![];
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            if let Some(hp) = p.host_port.filter(|h| *h > 0) {
                port_mappings.push(api::PortMapping {
                    protocol: match p.protocol.as_deref() {
                        Some("UDP") => api::Protocol::Udp as i32,
                        Some("SCTP") => api::Protocol::Sctp as i32,
                        _ => api::Protocol::Tcp as i32,
                    },
                    container_port: p.container_port,
                    host_port: hp,
                    host_ip: p.host_ip.clone().unwrap_or_default(),
                });
            }
        }
    }
    let ns = api::NamespaceOption {
        userns_options: Some(userns),
        ..namespace_options(&spec)
    };
    let psc = spec.security_context.clone().unwrap_or_default();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: super::uid(pod).into(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: sandbox_hostname(pod),
        log_directory: pod_log_dir(pod_logs_dir, pod),
        dns_config: dns,
        port_mappings,
        labels: lbls,
        annotations,
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent,
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(ns),
                run_as_user: psc.run_as_user.map(|v| api::Int64Value { value: v }),
                run_as_group: psc.run_as_group.map(|v| api::Int64Value { value: v }),
                privileged: spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .any(|c| {
                        c.security_context
                            .as_ref()
                            .and_then(|s| s.privileged)
                            .unwrap_or(false)
                    }),
                seccomp: Some(seccomp_profile(
                    psc.seccomp_profile.as_ref(),
                    None,
                    SECCOMP_PROFILE_ROOT,
                )),
                supplemental_groups: psc
                    .fs_group
                    .into_iter()
                    .chain(psc.supplemental_groups.clone().unwrap_or_default())
                    .collect(),
                ..Default::default()
            }),
            sysctls: psc
                .sysctls
                .iter()
                .flatten()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect(),
            ..Default::default()
        }),
        windows: None,
    }
}

pub use super::find_container;

pub use super::hash::{container_hash, container_hash_matches};

/// Inputs of [`container_config`] that come from the sync rather than the spec.
#[derive(Debug, Clone, Default)]
pub struct ContainerRuntimeInputs {
    /// Image reference to create from (the image ID from the pull).
    pub image_ref: String,
    /// Restart count of the new instance (CRI attempt).
    pub attempt: u32,
    /// Pod IP (for env).
    pub pod_ip: String,
    /// Node IP (for env).
    pub host_ip: String,
    /// Mounts prepared by the volume manager.
    pub mounts: Vec<api::Mount>,
    /// The configMaps, secrets and services the environment is built from.
    pub env_sources: super::envvars::EnvSources,
    /// The node's memory capacity in bytes, for the container's oom_score_adj (0: not set).
    pub memory_capacity_bytes: i64,
    /// The image's user as the runtime reports it (ImageStatus `uid` / `username`): a numeric
    /// uid, or a user name, or neither (the image runs as root).
    pub image_user: ImageUser,
    /// For an ephemeral container with `targetContainerName`: the runtime id of the target's
    /// instance, whose PID namespace it joins ([`container_namespace_options`]).
    pub pid_target_id: Option<String>,
    /// The pod's user namespace option, as its sandbox was created with (k/k
    /// `NamespacesForPod` gives containers the same).
    pub userns: Option<api::UserNamespace>,
    /// Ask the kernel to kill every process of the container on OOM (`memory.oom.group = 1`
    /// in its unified settings): on cgroup v2 unless `singleProcessOOMKill` (k/k
    /// `generateLinuxContainerResources`; [`crate::cm::container_oom_group`]).
    pub oom_group: bool,
}

/// The container's mounts, each with the pod's ID mappings when it has a user namespace of its
/// own, so the runtime makes idmapped mounts and the volumes' files keep their owners inside
/// (root stays root, not the overflow user 65534) (k/k `applyPlatformSpecificContainerConfig`).
/// Unchanged for a pod in the host's user namespace (no mappings).
pub fn idmapped_mounts(
    mounts: &[api::Mount],
    userns: Option<&api::UserNamespace>,
) -> Vec<api::Mount> {
    let mut out = mounts.to_vec();
    if let Some(u) = userns {
        for m in &mut out {
            m.uid_mappings = u.uids.clone();
            m.gid_mappings = u.gids.clone();
        }
    }
    out
}

/// Builds the `ContainerConfig` for container `name` of `pod`.
///
/// Errors: [`SpecError`] for a spec deckhand cannot honour; the caller reports it as
/// `CreateContainerConfigError`.
pub fn container_config(
    pod: &Pod,
    name: &str,
    inp: &ContainerRuntimeInputs,
) -> Result<api::ContainerConfig, SpecError> {
    let spec = pod.spec.as_ref().ok_or(SpecError::NoSpec)?;
    let c = super::find_any_container(pod, name)
        .ok_or_else(|| SpecError::NoSuchContainer(name.into()))?;
    let c: &Container = &c;
    let user_image = c
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| SpecError::NoImage(name.into()))?;
    verify_run_as_non_root(pod, c, &inp.image_user)?;
    let env =
        super::envvars::make_environment(pod, c, &inp.pod_ip, &inp.host_ip, &inp.env_sources)?;
    let command: Vec<String> = c
        .command
        .iter()
        .flatten()
        .map(|s| expand(s, &env))
        .collect();
    let args: Vec<String> = c.args.iter().flatten().map(|s| expand(s, &env)).collect();

    let mut lbls = HashMap::new();
    lbls.insert(
        labels::POD_NAME.to_string(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    lbls.insert(
        labels::POD_NAMESPACE.to_string(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    lbls.insert(labels::POD_UID.to_string(), super::uid(pod).to_string());
    lbls.insert(labels::CONTAINER_NAME.to_string(), c.name.clone());

    let mut ann = HashMap::new();
    ann.insert(labels::CONTAINER_HASH.to_string(), container_hash(c));
    ann.insert(
        labels::CONTAINER_RESTART_COUNT.to_string(),
        inp.attempt.to_string(),
    );
    ann.insert(
        labels::CONTAINER_TERMINATION_MESSAGE_PATH.to_string(),
        c.termination_message_path
            .clone()
            .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.into()),
    );
    ann.insert(
        labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
        c.termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        ann.insert(labels::POD_DELETION_GRACE_PERIOD.to_string(), g.to_string());
    }
    ann.insert(
        labels::POD_TERMINATION_GRACE_PERIOD.to_string(),
        spec.termination_grace_period_seconds
            .unwrap_or(DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS)
            .to_string(),
    );
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        ann.insert(
            labels::CONTAINER_PORTS.to_string(),
            serde_json::to_string(ports).unwrap_or_default(),
        );
    }
    if let Some(pre) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        ann.insert(
            labels::CONTAINER_PRESTOP_HANDLER.to_string(),
            serde_json::to_string(pre).unwrap_or_default(),
        );
    }

    let sc = c.security_context.clone().unwrap_or_default();
    let psc = spec.security_context.clone().unwrap_or_default();
    let ns = api::NamespaceOption {
        userns_options: inp.userns.clone(),
        ..container_namespace_options(spec, inp.pid_target_id.as_deref())
    };
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            attempt: inp.attempt,
        }),
        image: Some(api::ImageSpec {
            image: if inp.image_ref.is_empty() {
                user_image.clone()
            } else {
                inp.image_ref.clone()
            },
            user_specified_image: user_image,
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env
            .into_iter()
            .map(|(key, value)| api::KeyValue {
                key,
                value: value.into_bytes(),
            })
            .collect(),
        mounts: idmapped_mounts(&inp.mounts, inp.userns.as_ref()),
        labels: lbls,
        annotations: ann,
        log_path: format!("{}/{}.log", c.name, inp.attempt),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some({
                let mut r = linux_resources(c);
                if inp.memory_capacity_bytes > 0 {
                    r.oom_score_adj = resource::oom_score_adj(pod, c, inp.memory_capacity_bytes);
                }
                if inp.oom_group {
                    r.unified.insert("memory.oom.group".into(), "1".into());
                }
                r
            }),
            security_context: Some(api::LinuxContainerSecurityContext {
                namespace_options: Some(ns),
                privileged: sc.privileged.unwrap_or(false),
                run_as_user: sc
                    .run_as_user
                    .or(psc.run_as_user)
                    .or(match &inp.image_user {
                        ImageUser::Uid(u) => Some(*u),
                        _ => None,
                    })
                    .map(|v| api::Int64Value { value: v }),
                run_as_username: match (&inp.image_user, sc.run_as_user.or(psc.run_as_user)) {
                    (ImageUser::Name(n), None) => n.clone(),
                    _ => String::new(),
                },
                run_as_group: sc
                    .run_as_group
                    .or(psc.run_as_group)
                    .map(|v| api::Int64Value { value: v }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                // k/k securitycontext.AddNoNewPrivileges: only an explicit false sets it
                no_new_privs: sc.allow_privilege_escalation == Some(false),
                supplemental_groups: psc
                    .fs_group
                    .into_iter()
                    .chain(psc.supplemental_groups.clone().unwrap_or_default())
                    .collect(),
                seccomp: Some(seccomp_profile(
                    psc.seccomp_profile.as_ref(),
                    sc.seccomp_profile.as_ref(),
                    SECCOMP_PROFILE_ROOT,
                )),
                apparmor: apparmor_profile(
                    psc.app_armor_profile.as_ref(),
                    sc.app_armor_profile.as_ref(),
                ),
                selinux_options: sc
                    .se_linux_options
                    .as_ref()
                    .or(psc.se_linux_options.as_ref())
                    .map(|o| api::SeLinuxOption {
                        user: o.user.clone().unwrap_or_default(),
                        role: o.role.clone().unwrap_or_default(),
                        r#type: o.type_.clone().unwrap_or_default(),
                        level: o.level.clone().unwrap_or_default(),
                    }),
                capabilities: sc.capabilities.as_ref().map(|cap| api::Capability {
                    add_capabilities: cap.add.clone().unwrap_or_default(),
                    drop_capabilities: cap.drop.clone().unwrap_or_default(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

/// Linux resources for a container from its requests and limits, with the Go kubelet's
/// conversions (k/k `pkg/kubelet/cm/helpers_linux.go`): cpu shares = millicores·1024/1000
/// (min 2, from the limit when there is no request), CFS period 100000 µs and quota =
/// millicores·100 (min 1000 µs) when a cpu limit is set, memory limit in bytes.
pub fn linux_resources(c: &Container) -> api::LinuxContainerResources {
    let req_cpu = resource::container_request(c, resource::CPU);
    let lim_cpu = resource::container_limit(c, resource::CPU);
    let lim_mem = resource::container_limit(c, resource::MEMORY).map(|m| m / 1000);
    let milli = req_cpu.or(lim_cpu).unwrap_or(0);
    let shares = (milli * 1024 / 1000).clamp(2, 262144) as i64;
    let (period, quota) = match lim_cpu {
        Some(l) if l > 0 => (100_000, ((l * 100_000) / 1000).max(1000) as i64),
        _ => (0, 0),
    };
    // hugepages-<size> limits, page size as the runtime names it (`2Mi` -> `2MB`)
    let hugepage_limits = resource::container_limits(c)
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| {
            let size = k.strip_prefix(resource::HUGEPAGES_PREFIX)?;
            let page_size = size
                .strip_suffix("Ki")
                .map(|n| format!("{n}KB"))
                .or_else(|| size.strip_suffix("Mi").map(|n| format!("{n}MB")))
                .or_else(|| size.strip_suffix("Gi").map(|n| format!("{n}GB")))?;
            let limit = (resource::quantity_milli(q)? / 1000) as u64;
            Some(api::HugepageLimit { page_size, limit })
        })
        .collect();
    api::LinuxContainerResources {
        cpu_shares: shares,
        cpu_period: period,
        cpu_quota: quota,
        memory_limit_in_bytes: lim_mem.unwrap_or(0) as i64,
        hugepage_limits,
        ..Default::default()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, PodSpec, ResourceRequirements};

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    pub(in crate::pod) fn pod_with(c: Container) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("web".into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some("uid-1".into());
        p.spec = Some(PodSpec {
            containers: vec![c],
            ..Default::default()
        });
        p
    }

    #[test]
    fn cpu_and_memory_convert_like_the_go_kubelet() {
        let mut c = Container {
            name: "c".into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        c.resources = Some(ResourceRequirements {
            requests: Some([("cpu".to_string(), Quantity("250m".into()))].into()),
            limits: Some(
                [
                    ("cpu".to_string(), Quantity("500m".into())),
                    ("memory".to_string(), Quantity("64Mi".into())),
                ]
                .into(),
            ),
            ..Default::default()
        });
        let r = linux_resources(&c);
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_period,
                r.cpu_quota,
                r.memory_limit_in_bytes
            ),
            (256, 100000, 50000, 64 << 20)
        );
        let r = linux_resources(&Container::default());
        assert_eq!(r.cpu_shares, 2);
    }

    #[test]
    fn container_config_carries_kubelet_labels_annotations_and_log_path() {
        let c = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into(), "-c".into(), "echo $(GREETING)".into()]),
            env: Some(vec![EnvVar {
                name: "GREETING".into(),
                value: Some("hi".into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let p = pod_with(c);
        let cfg = container_config(
            &p,
            "app",
            &ContainerRuntimeInputs {
                attempt: 2,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.command, vec!["sh", "-c", "echo hi"]);
        assert_eq!(cfg.labels[labels::POD_UID], "uid-1");
        assert_eq!(cfg.labels[labels::CONTAINER_NAME], "app");
        assert_eq!(cfg.annotations[labels::CONTAINER_RESTART_COUNT], "2");
        let ns = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.pid, api::NamespaceMode::Container as i32);
        let parent = crate::cm::CgroupLayout::default().pod_parent(&p).unwrap();
        let userns = crate::userns::MappingsFile::single(65536, 65536).to_cri();
        let sb = sandbox_config(&p, 0, "/var/log/pods", None, parent, userns.clone());
        assert_eq!(sb.log_directory, "/var/log/pods/default_web_uid-1");
        assert_eq!(sb.hostname, "web");
        let linux = sb.linux.unwrap();
        assert_eq!(linux.cgroup_parent, "/kubepods/besteffort/poduid-1");
        let sb_ns = linux.security_context.unwrap().namespace_options.unwrap();
        assert_eq!(sb_ns.userns_options, Some(userns.clone()));
        assert_eq!(sb_ns.network, api::NamespaceMode::Pod as i32);
        // containers get the user namespace option their sandbox was created with
        assert_eq!(ns.userns_options, None, "none given");
        let inp = ContainerRuntimeInputs {
            userns: Some(userns.clone()),
            ..Default::default()
        };
        let cfg = container_config(&p, "app", &inp).unwrap();
        let ns = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.userns_options, Some(userns));
    }

    #[test]
    fn mounts_are_idmapped_only_in_a_user_namespace_of_the_pods_own() {
        let m = api::Mount {
            container_path: "/cfg".into(),
            host_path: "/var/lib/kubelet/pods/u/volumes/cfg".into(),
            ..Default::default()
        };
        let own = crate::userns::MappingsFile::single(131072, 65536).to_cri();
        let node = crate::userns::node_user_namespace();
        // (user namespace option, mapped)
        for (u, mapped) in [(None, false), (Some(&node), false), (Some(&own), true)] {
            let out = idmapped_mounts(std::slice::from_ref(&m), u);
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].container_path, "/cfg");
            let want = if mapped { own.uids.clone() } else { vec![] };
            assert_eq!(out[0].uid_mappings, want, "{u:?}");
            let want = if mapped { own.gids.clone() } else { vec![] };
            assert_eq!(out[0].gid_mappings, want, "{u:?}");
        }
    }

    #[test]
    fn env_sources_that_were_not_fetched_are_an_error_not_ignored() {
        let c = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            env: Some(vec![EnvVar {
                name: "X".into(),
                value_from: Some(k8s_openapi::api::core::v1::EnvVarSource {
                    secret_key_ref: Some(Default::default()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let p = pod_with(c);
        assert!(container_config(&p, "app", &ContainerRuntimeInputs::default()).is_err());
    }

    #[test]
    fn an_ephemeral_container_gets_a_config_and_joins_its_target_pid_namespace() {
        let mut p = pod_with(Container {
            name: "app".into(),
            image: Some("busybox".into()),
            ..Default::default()
        });
        p.spec.as_mut().unwrap().ephemeral_containers =
            Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "debugger".into(),
                image: Some("busybox".into()),
                command: Some(vec!["sleep".into(), "3600".into()]),
                stdin: Some(true),
                tty: Some(true),
                target_container_name: Some("app".into()),
                ..Default::default()
            }]);
        let pid = |p: &Pod, target: Option<&str>| {
            let inp = ContainerRuntimeInputs {
                pid_target_id: target.map(str::to_string),
                ..Default::default()
            };
            let cfg = container_config(p, "debugger", &inp).unwrap();
            assert_eq!(cfg.labels[labels::CONTAINER_NAME], "debugger");
            assert_eq!(cfg.command, vec!["sleep", "3600"]);
            assert!(cfg.stdin && cfg.tty);
            let ns = cfg
                .linux
                .unwrap()
                .security_context
                .unwrap()
                .namespace_options
                .unwrap();
            (ns.pid, ns.target_id)
        };
        // (case, shareProcessNamespace, hostPID, target id, expected mode, expected target)
        let cases = [
            (
                "target",
                None,
                None,
                Some("cid-app"),
                api::NamespaceMode::Target,
                "cid-app",
            ),
            (
                "no target",
                None,
                None,
                None,
                api::NamespaceMode::Container,
                "",
            ),
            (
                "shared pod namespace wins",
                Some(true),
                None,
                Some("cid-app"),
                api::NamespaceMode::Pod,
                "",
            ),
            (
                "host PID wins",
                None,
                Some(true),
                Some("cid-app"),
                api::NamespaceMode::Node,
                "",
            ),
        ];
        for (case, share, host, target, mode, want_target) in cases {
            let mut p = p.clone();
            p.spec.as_mut().unwrap().share_process_namespace = share;
            p.spec.as_mut().unwrap().host_pid = host;
            assert_eq!(
                pid(&p, target),
                (mode as i32, want_target.to_string()),
                "{case}"
            );
        }
    }
}
