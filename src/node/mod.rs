//! This node in the API server: registration (k/k `pkg/kubelet/kubelet_node_status.go`),
//! the periodic status update, and the node Lease in `kube-node-lease` renewed every
//! quarter of its 40 s duration (k8s.io/component-helpers `apimachinery/lease/controller.go`).

pub mod address;
pub mod hostinfo;
pub mod status;

use crate::cri::CriClient;
use crate::events::{reason, EventRecorder};
use hostinfo::HostInfo;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Errors from node registration and updates.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// An API call failed.
    #[error("{op} node {node}: {source}")]
    Api {
        /// What was attempted.
        op: &'static str,
        /// Node name.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A `--node-labels` or `--register-with-taints` entry is malformed.
    #[error("invalid {what} {value:?}: {why}")]
    InvalidFlag {
        /// Which flag.
        what: &'static str,
        /// The entry.
        value: String,
        /// Why.
        why: &'static str,
    },
}

/// Static settings of the node agent.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Node name.
    pub name: String,
    /// InternalIP addresses.
    pub node_ips: Vec<String>,
    /// Hostname address (the node name).
    pub hostname: String,
    /// Root dir (for ephemeral-storage capacity).
    pub root_dir: PathBuf,
    /// `pods` capacity.
    pub max_pods: u32,
    /// kube-reserved + system-reserved in milli-units by resource (subtracted from allocatable).
    pub reserved_milli: BTreeMap<String, i128>,
    /// Kubelet port.
    pub port: i32,
    /// Extra labels (`--node-labels`).
    pub labels: BTreeMap<String, String>,
    /// Registration taints (`--register-with-taints`).
    pub taints: Vec<Taint>,
    /// `spec.providerID` at registration (`--provider-id`); empty: none.
    pub provider_id: String,
    /// `--cloud-provider=external`: registration adds the uninitialized taint and the
    /// provided-node-ip annotation, and addresses a cloud controller manager set are kept
    /// ([`registration_node`]).
    pub external_cloud_provider: bool,
    /// Status computation period (10 s).
    pub status_update_frequency: Duration,
    /// Unchanged-status write period (5 min).
    pub status_report_frequency: Duration,
    /// Lease duration (40 s).
    pub lease_duration_seconds: i32,
    /// Hard eviction thresholds (reserved from allocatable).
    pub eviction_thresholds: Vec<crate::eviction::thresholds::Threshold>,
}

/// Parses `--node-labels` entries (`key=value`).
///
/// Errors: an entry without `=`.
pub fn parse_labels(entries: &[String]) -> Result<BTreeMap<String, String>, NodeError> {
    let mut out = BTreeMap::new();
    for e in entries.iter().filter(|e| !e.is_empty()) {
        let (k, v) = e.split_once('=').ok_or_else(|| NodeError::InvalidFlag {
            what: "node label",
            value: e.clone(),
            why: "want key=value",
        })?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Parses `--register-with-taints` entries (`key[=value]:Effect`).
///
/// Errors: a missing or unknown effect.
pub fn parse_taints(entries: &[String]) -> Result<Vec<Taint>, NodeError> {
    let mut out = vec![];
    for e in entries.iter().filter(|e| !e.is_empty()) {
        let (kv, effect) = e.rsplit_once(':').ok_or_else(|| NodeError::InvalidFlag {
            what: "taint",
            value: e.clone(),
            why: "want key[=value]:Effect",
        })?;
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(NodeError::InvalidFlag {
                what: "taint",
                value: e.clone(),
                why: "effect must be NoSchedule, PreferNoSchedule or NoExecute",
            });
        }
        let (k, v) = kv
            .split_once('=')
            .map(|(k, v)| (k, Some(v.to_string())))
            .unwrap_or((kv, None));
        out.push(Taint {
            key: k.into(),
            value: v,
            effect: effect.into(),
            time_added: None,
        });
    }
    Ok(out)
}

/// The taint an external cloud provider's node registers with until its cloud controller
/// manager initializes it (k8s.io/cloud-provider `TaintExternalCloudProvider`).
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The annotation holding `--node-ip` for an external cloud provider
/// (k8s.io/cloud-provider `AnnotationAlphaProvidedIPAddr`).
pub const ANNOTATION_PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

/// The Node deckhand registers (k/k `initialNode`): `labels`, the
/// controller-managed-attach-detach annotation, the registration taints (with the external
/// cloud provider's uninitialized taint after them), `spec.providerID`, the provided-node-ip
/// annotation for an external cloud provider with a node IP, and `status`.
pub fn registration_node(
    cfg: &NodeConfig,
    labels: BTreeMap<String, String>,
    status: NodeStatus,
) -> Node {
    let mut annotations = BTreeMap::new();
    annotations.insert(
        "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
        "true".to_string(),
    );
    let mut taints = cfg.taints.clone();
    if cfg.external_cloud_provider {
        taints.push(Taint {
            key: TAINT_EXTERNAL_CLOUD_PROVIDER.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        let ips: Vec<&str> = cfg
            .node_ips
            .iter()
            .map(String::as_str)
            .filter(|ip| !matches!(*ip, "0.0.0.0" | "::"))
            .collect();
        if !ips.is_empty() {
            annotations.insert(ANNOTATION_PROVIDED_NODE_IP.into(), ips.join(","));
        }
    }
    Node {
        metadata: ObjectMeta {
            name: Some(cfg.name.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            provider_id: (!cfg.provider_id.is_empty()).then(|| cfg.provider_id.clone()),
            ..Default::default()
        }),
        status: Some(status),
    }
}

/// Runtime facts for the node status, read from CRI `Version` and `Status`: the runtime
/// version, the errors that make the node not ready, and the runtime handlers.
async fn runtime_facts(
    cri: &CriClient,
) -> (String, Vec<String>, Vec<crate::cri::api::RuntimeHandler>) {
    let version = match cri.version().await {
        Ok(v) => status::container_runtime_version(&v.runtime_name, &v.runtime_version),
        Err(_) => "Unknown".to_string(),
    };
    let mut errors = vec![];
    let mut handlers = vec![];
    match cri.status().await {
        Ok(resp) => {
            handlers = resp.runtime_handlers;
            let st = resp.status.unwrap_or_default();
            for want in ["RuntimeReady", "NetworkReady"] {
                match st.conditions.iter().find(|c| c.r#type == want) {
                    Some(c) if c.status => {}
                    Some(c) => {
                        let prefix = if want == "NetworkReady" {
                            "container runtime network not ready"
                        } else {
                            "container runtime not ready"
                        };
                        errors.push(format!(
                            "{prefix}: {want}=false reason:{} message:{}",
                            c.reason, c.message
                        ));
                    }
                    None => errors.push(format!(
                        "container runtime status check may not have completed yet: {want} missing"
                    )),
                }
            }
        }
        Err(e) => errors.push(format!("container runtime is down: {}", e.user_message())),
    }
    (version, errors, handlers)
}

/// Keeps the Node object and its Lease up to date until `cancel` fires.
pub struct NodeAgent {
    client: kube::Client,
    cri: CriClient,
    cfg: NodeConfig,
    recorder: EventRecorder,
    pressure: Option<crate::eviction::PressureHandle>,
    node_tx: Option<tokio::sync::watch::Sender<Option<std::sync::Arc<Node>>>>,
    /// The node watch ([`NodeAgent::run_node_watch`]) has delivered the API copy: it publishes
    /// from then on.
    watching: std::sync::atomic::AtomicBool,
}

impl NodeAgent {
    /// A node agent.
    pub fn new(
        client: kube::Client,
        cri: CriClient,
        cfg: NodeConfig,
        recorder: EventRecorder,
    ) -> Self {
        Self {
            client,
            cri,
            cfg,
            recorder,
            pressure: None,
            node_tx: None,
            watching: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Publishes the Node object (as registered, then as each status round reads it, with the
    /// status it computed) for the pod workers' admission.
    pub fn with_node_publisher(
        mut self,
        tx: tokio::sync::watch::Sender<Option<std::sync::Arc<Node>>>,
    ) -> Self {
        self.node_tx = Some(tx);
        self
    }

    fn publish(&self, node: &Node) {
        if let Some(tx) = &self.node_tx {
            tx.send_replace(Some(std::sync::Arc::new(node.clone())));
        }
    }

    /// Reports the eviction manager's pressure conditions (MemoryPressure, DiskPressure,
    /// PIDPressure); without it they stay False.
    pub fn with_pressure(mut self, pressure: crate::eviction::PressureHandle) -> Self {
        self.pressure = Some(pressure);
        self
    }

    async fn compute_status(&self, host: &HostInfo, previous: Option<&NodeStatus>) -> NodeStatus {
        let (version, errors, handlers) = runtime_facts(&self.cri).await;
        let root = self.cfg.root_dir.clone();
        let in_use = tokio::task::spawn_blocking(move || {
            crate::volume::pv::volumes_in_use(crate::volume::pv::local_volumes_on_disk(&root))
        })
        .await
        .unwrap_or_default();
        let kubelet_version = crate::kubelet_version();
        status::node_status(&status::NodeStatusInputs {
            host,
            node_ips: &self.cfg.node_ips,
            hostname: &self.cfg.hostname,
            max_pods: self.cfg.max_pods,
            reserved_milli: &self.cfg.reserved_milli,
            port: self.cfg.port,
            container_runtime_version: &version,
            kubelet_version: &kubelet_version,
            runtime_errors: &errors,
            runtime_handlers: &handlers,
            previous,
            now: crate::time::truncate(Timestamp::now()),
            pressure: &self
                .pressure
                .as_ref()
                .map(|p| p.conditions())
                .unwrap_or_default(),
            eviction_thresholds: &self.cfg.eviction_thresholds,
            external_cloud_provider: self.cfg.external_cloud_provider,
            volumes_in_use: &in_use,
        })
    }

    fn default_labels(&self, host: &HostInfo) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        l.insert(
            "kubernetes.io/hostname".to_string(),
            self.cfg.hostname.clone(),
        );
        l.insert("kubernetes.io/os".to_string(), "linux".to_string());
        l.insert("kubernetes.io/arch".to_string(), host.architecture.clone());
        l
    }

    /// Registers the node, retrying with back-off from 100 ms doubling to 7 s, as the Go kubelet
    /// does. An existing Node is reconciled (default labels re-asserted), never re-created.
    pub async fn register(&self, cancel: &CancellationToken) -> Result<Node, NodeError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut delay = Duration::from_millis(100);
        loop {
            match self.try_register(&api).await {
                Ok(n) => {
                    self.publish(&n);
                    return Ok(n);
                }
                Err(e) => {
                    tracing::warn!(node = %self.cfg.name, error = %e, "unable to register node with API server");
                    tokio::select! {
                        _ = cancel.cancelled() => return Err(e),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(7));
                }
            }
        }
    }

    async fn try_register(&self, api: &Api<Node>) -> Result<Node, NodeError> {
        let host = HostInfo::read(&self.cfg.root_dir);
        let mut labels = self.default_labels(&host);
        labels.extend(self.cfg.labels.clone());
        let status = self.compute_status(&host, None).await;
        let node = registration_node(&self.cfg, labels, status);
        tracing::info!(node = %self.cfg.name, "Attempting to register node");
        match api.create(&PostParams::default(), &node).await {
            Ok(n) => {
                tracing::info!(node = %self.cfg.name, "Successfully registered node");
                Ok(n)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Already exists: reconcile the default labels, keep everything else.
                let patch =
                    serde_json::json!({ "metadata": { "labels": self.default_labels(&host) } });
                let n = api
                    .patch(
                        &self.cfg.name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|source| NodeError::Api {
                        op: "reconcile",
                        node: self.cfg.name.clone(),
                        source,
                    })?;
                tracing::info!(node = %self.cfg.name, "node already registered; reconciled");
                Ok(n)
            }
            Err(source) => Err(NodeError::Api {
                op: "register",
                node: self.cfg.name.clone(),
                source,
            }),
        }
    }

    /// The deadline of one heartbeat request (node status GET or PATCH, Lease renewal): the
    /// status update frequency, capped at the lease duration, as the Go kubelet's heartbeat
    /// client timeout. A server that stops answering cannot hold a loop longer than this.
    pub fn heartbeat_timeout(&self) -> Duration {
        self.cfg
            .status_update_frequency
            .min(Duration::from_secs(
                self.cfg.lease_duration_seconds.max(1) as u64
            ))
            .max(Duration::from_secs(1))
    }

    /// Runs the node status loop until `cancel`: every `status_update_frequency` it reads the
    /// Node from the API server, computes the status, and writes it when it differs from the
    /// API server's copy (heartbeats aside) or `status_report_frequency` has passed (k/k
    /// `tryUpdateNodeStatus`). Comparing with the API copy, not with what deckhand last wrote,
    /// is what brings the node back to Ready after the node lifecycle controller marked it
    /// `Unknown` during an API server outage. Records the node condition events on change.
    pub async fn run_status_loop(&self, node: Node, cancel: CancellationToken) {
        let api: Api<Node> = Api::all(self.client.clone());
        let timeout = self.heartbeat_timeout();
        let mut last_written: Option<NodeStatus> = node.status.clone();
        let mut last_write: Option<Instant> = None;
        let mut announced = false;
        let mut failing = false;
        loop {
            let result = async {
                let current = tokio::time::timeout(timeout, api.get(&self.cfg.name))
                    .await
                    .map_err(|_| format!("no answer within {timeout:?}"))?
                    .map_err(|e| e.to_string())?;
                let api_status = current.status.clone();
                let host = HostInfo::read(&self.cfg.root_dir);
                // transition times follow the API copy's conditions (Unknown → True is one)
                let previous = api_status.as_ref().or(last_written.as_ref());
                let new = self.compute_status(&host, previous).await;
                if !self.watching.load(std::sync::atomic::Ordering::Acquire) {
                    // until the node watch delivers the API copy: what this round read, with
                    // the status it computed
                    let mut seen = current.clone();
                    let mut published = new.clone();
                    status::carry_extended_resources(
                        api_status.as_ref(),
                        published.capacity.get_or_insert_with(Default::default),
                        published.allocatable.get_or_insert_with(Default::default),
                    );
                    seen.status = Some(published);
                    self.publish(&seen);
                }
                let due =
                    last_write.is_none_or(|t| t.elapsed() >= self.cfg.status_report_frequency);
                let last = last_write.and(last_written.as_ref());
                if !status::should_write_node_status(api_status.as_ref(), last, &new, due) {
                    return Ok::<_, String>(None);
                }
                let patch = status::status_patch(api_status.as_ref(), &new);
                tokio::time::timeout(
                    timeout,
                    api.patch_status(
                        &self.cfg.name,
                        &PatchParams::default(),
                        &Patch::Strategic(&patch),
                    ),
                )
                .await
                .map_err(|_| format!("no answer within {timeout:?}"))?
                .map_err(|e| e.to_string())?;
                Ok(Some((api_status, new)))
            }
            .await;
            match result {
                Ok(written) => {
                    if failing {
                        tracing::info!(node = %self.cfg.name, "node status updates succeed again");
                        failing = false;
                    }
                    if let Some((api_status, new)) = written {
                        let before = api_status.or(last_written.take());
                        self.record_condition_events(before.as_ref(), &new, !announced);
                        announced = true;
                        last_written = Some(new);
                        last_write = Some(Instant::now());
                    }
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(node = %self.cfg.name, error = %e, "error updating node status, will retry");
                    } else {
                        tracing::debug!(node = %self.cfg.name, error = %e, "node status update failed again");
                    }
                    failing = true;
                }
            }
            // Until the node is Ready (or while writes fail), retry quickly (the Go kubelet's
            // fast status update and its immediate retries).
            let ready = last_written
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            let period = if ready && !failing {
                self.cfg.status_update_frequency
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
        }
    }

    fn record_condition_events(&self, old: Option<&NodeStatus>, new: &NodeStatus, first: bool) {
        let get = |s: Option<&NodeStatus>, t: &str| {
            s.and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == t))
                .map(|c| c.status.clone())
        };
        let pairs = [
            (
                "MemoryPressure",
                "False",
                reason::NODE_HAS_SUFFICIENT_MEMORY,
            ),
            ("DiskPressure", "False", reason::NODE_HAS_NO_DISK_PRESSURE),
            ("PIDPressure", "False", reason::NODE_HAS_SUFFICIENT_PID),
            (
                "MemoryPressure",
                "True",
                reason::NODE_HAS_INSUFFICIENT_MEMORY,
            ),
            ("DiskPressure", "True", reason::NODE_HAS_DISK_PRESSURE),
            ("PIDPressure", "True", reason::NODE_HAS_INSUFFICIENT_PID),
        ];
        for (t, want, r) in pairs {
            if get(Some(new), t).as_deref() == Some(want)
                && (first || get(old, t).as_deref() != Some(want))
            {
                self.recorder.node(
                    &self.cfg.name,
                    false,
                    r,
                    format!("Node {} status is now: {}", self.cfg.name, r),
                );
            }
        }
        let (o, n) = (get(old, "Ready"), get(Some(new), "Ready"));
        if o != n || first {
            let r = if n.as_deref() == Some("True") {
                reason::NODE_READY
            } else {
                reason::NODE_NOT_READY
            };
            if first && r == reason::NODE_NOT_READY {
                return;
            }
            self.recorder.node(
                &self.cfg.name,
                false,
                r,
                format!("Node {} status is now: {}", self.cfg.name, r),
            );
        }
    }

    /// Watches this node's Node object and publishes every version of it for the pod workers'
    /// admission (the Go kubelet's node informer, `kl.nodeLister`): labels, taints and
    /// allocatable (with extended resources others add) as the API server has them, within
    /// milliseconds of a change. Survives API server restarts (kube's watcher re-lists with
    /// back-off).
    pub async fn run_node_watch(&self, cancel: CancellationToken) {
        use futures::StreamExt;
        use kube::runtime::{watcher, WatchStreamExt};
        let api: Api<Node> = Api::all(self.client.clone());
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", self.cfg.name));
        let stream = watcher::watcher(api, cfg).default_backoff();
        futures::pin_mut!(stream);
        loop {
            let ev = tokio::select! {
                _ = cancel.cancelled() => return,
                ev = stream.next() => ev,
            };
            match ev {
                None => return,
                Some(Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n))) => {
                    self.watching
                        .store(true, std::sync::atomic::Ordering::Release);
                    self.publish(&n);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => tracing::debug!(error = ?e, "node watch error; retrying"),
            }
        }
    }

    /// Renews the node Lease every `lease_duration/4` (10 s), creating it when missing, with
    /// the Node as owner.
    pub async fn run_lease_loop(&self, node_uid: String, cancel: CancellationToken) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let period = Duration::from_millis((self.cfg.lease_duration_seconds as u64 * 1000) / 4);
        let mut retry = Duration::from_millis(200);
        let timeout = self.heartbeat_timeout();
        let mut failing = false;
        loop {
            let renewed = tokio::time::timeout(timeout, self.renew_lease(&api, &node_uid))
                .await
                .map_err(|_| format!("no answer within {timeout:?}"))
                .and_then(|r| r.map_err(|e| e.to_string()));
            let ok = match renewed {
                Ok(()) => {
                    if failing {
                        tracing::info!(node = %self.cfg.name, "node lease renewed again");
                        crate::source::api_server_answers_again();
                    }
                    failing = false;
                    retry = Duration::from_millis(200);
                    true
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(node = %self.cfg.name, error = %e, "failed to renew node lease");
                    } else {
                        tracing::debug!(node = %self.cfg.name, error = %e, "failed to renew node lease again");
                    }
                    failing = true;
                    false
                }
            };
            let wait = if ok { period } else { retry };
            if !ok {
                retry = (retry * 2).min(Duration::from_secs(7));
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn renew_lease(&self, api: &Api<Lease>, node_uid: &str) -> Result<(), kube::Error> {
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(self.cfg.name.clone()),
            lease_duration_seconds: Some(self.cfg.lease_duration_seconds),
            renew_time: Some(now),
            ..Default::default()
        };
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.cfg.name.clone(),
            uid: node_uid.to_string(),
            ..Default::default()
        };
        match api.get_opt(&self.cfg.name).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some("kube-node-lease".into()),
                        owner_references: Some(vec![owner]),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                api.create(&PostParams::default(), &lease).await?;
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                if lease
                    .metadata
                    .owner_references
                    .as_ref()
                    .is_none_or(|o| o.is_empty())
                {
                    lease.metadata.owner_references = Some(vec![owner]);
                }
                api.replace(&self.cfg.name, &PostParams::default(), &lease)
                    .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> NodeConfig {
        NodeConfig {
            name: "dh-vm-1".into(),
            node_ips: vec!["10.251.0.50".into()],
            hostname: "dh-vm-1".into(),
            root_dir: "/var/lib/kubelet".into(),
            max_pods: 110,
            reserved_milli: BTreeMap::new(),
            port: 10250,
            labels: BTreeMap::new(),
            taints: parse_taints(&["dedicated=gpu:NoSchedule".into()]).unwrap(),
            provider_id: String::new(),
            external_cloud_provider: false,
            status_update_frequency: Duration::from_secs(10),
            status_report_frequency: Duration::from_secs(300),
            lease_duration_seconds: 40,
            eviction_thresholds: Vec::new(),
        }
    }

    #[test]
    fn registration_carries_provider_id_and_the_external_cloud_providers_taint() {
        let taint_keys = |n: &Node| -> Vec<String> {
            n.spec
                .as_ref()
                .unwrap()
                .taints
                .iter()
                .flatten()
                .map(|t| t.key.clone())
                .collect()
        };
        let annotations = |n: &Node| n.metadata.annotations.clone().unwrap();
        let plain = registration_node(&cfg(), BTreeMap::new(), NodeStatus::default());
        assert_eq!(taint_keys(&plain), vec!["dedicated"]);
        assert_eq!(plain.spec.as_ref().unwrap().provider_id, None);
        assert!(!annotations(&plain).contains_key(ANNOTATION_PROVIDED_NODE_IP));
        assert_eq!(
            annotations(&plain)["volumes.kubernetes.io/controller-managed-attach-detach"],
            "true"
        );
        let cloud = registration_node(
            &NodeConfig {
                provider_id: "kind://docker/kind/kind-worker".into(),
                external_cloud_provider: true,
                ..cfg()
            },
            BTreeMap::new(),
            NodeStatus::default(),
        );
        assert_eq!(
            taint_keys(&cloud),
            vec!["dedicated", TAINT_EXTERNAL_CLOUD_PROVIDER]
        );
        let t = &cloud.spec.as_ref().unwrap().taints.as_ref().unwrap()[1];
        assert_eq!(
            (t.value.as_deref(), t.effect.as_str()),
            (Some("true"), "NoSchedule")
        );
        assert_eq!(
            cloud.spec.as_ref().unwrap().provider_id.as_deref(),
            Some("kind://docker/kind/kind-worker")
        );
        assert_eq!(
            annotations(&cloud)[ANNOTATION_PROVIDED_NODE_IP],
            "10.251.0.50"
        );
        // an unspecified node IP is not announced
        let any = registration_node(
            &NodeConfig {
                external_cloud_provider: true,
                node_ips: vec!["0.0.0.0".into()],
                ..cfg()
            },
            BTreeMap::new(),
            NodeStatus::default(),
        );
        assert!(!annotations(&any).contains_key(ANNOTATION_PROVIDED_NODE_IP));
    }

    #[test]
    fn parses_node_labels_and_taints() {
        let l = parse_labels(&["a=b".into(), "node-role.kubernetes.io/worker=".into()]).unwrap();
        assert_eq!(l["a"], "b");
        assert_eq!(l["node-role.kubernetes.io/worker"], "");
        assert!(parse_labels(&["nope".into()]).is_err());
        let t = parse_taints(&["dedicated=gpu:NoSchedule".into(), "x:NoExecute".into()]).unwrap();
        assert_eq!(t[0].key, "dedicated");
        assert_eq!(t[0].value.as_deref(), Some("gpu"));
        assert_eq!(t[1].value, None);
        assert!(parse_taints(&["x:Sometimes".into()]).is_err());
    }
}
