//! deckhand: a Kubernetes node agent (kubelet) that drives containerd through CRI.
//!
//! The module layout follows the Go kubelet's subsystems (k/k `pkg/kubelet`), so that someone who
//! knows the Go kubelet finds the same rooms by the same names:
//!
//! | concern | Go kubelet | here |
//! |---|---|---|
//! | flags and configuration | `cmd/kubelet/app/options` | [`config`] |
//! | the composition root: build and run every loop | `cmd/kubelet/app/server.go`, `kubelet.go Run` | [`kubelet`] |
//! | pod sources (API watch, static pod files) and their merge | `config/` | [`source`] |
//! | mirror pods of static pods | `pod/mirror_client.go` | [`pod::mirror`] |
//! | systemd notify, watchdog, journald | — | [`systemd`] |
//! | node registration, status, lease | `kubelet_node_status.go`, `nodestatus/`, `nodelease/` | [`node`] |
//! | pod workers, sync and termination | `pod_workers.go`, `kuberuntime_manager.go` | [`pod`] |
//! | what to run or kill next (pure) | `kuberuntime computePodActions` | [`pod::actions`] |
//! | carry out a sync: sandboxes, container start and kill, image pulls, log links | `kuberuntime/` | [`kuberuntime`] |
//! | runtime calls (tonic client, in-memory fake) | `cri-api` | [`cri`], [`cri::fake`] |
//! | pull-secret keyring (pure) | `pkg/credentialprovider` | [`credentialprovider`] |
//! | requests, limits, QoS class, oom_score_adj (shared by kubelet and scheduler) | component-helpers `resource`, `qos/` | [`resource`] |
//! | runtime change detection | `pleg/` | [`pleg`] |
//! | pod status (pure generation + writer) | `status/` | [`status`] |
//! | back-off | `client-go/util/flowcontrol` | [`backoff`] |
//! | events | `client-go/tools/record` | [`events`] |
//! | container and image garbage collection | `kuberuntime/kuberuntime_gc.go`, `images/image_gc_manager.go` | [`gc`] |
//! | HTTPS server (logs, exec, stats, metrics) | `server/` | [`server`] |
//! | scheduler (second binary, `deckhand-scheduler`) | `pkg/scheduler` | [`scheduler`] |

pub mod allocation;
pub mod backoff;
pub mod certificate;
pub mod cm;
pub mod config;
pub mod credentialprovider;
pub mod cri;
pub mod events;
pub mod eviction;
pub mod gc;
pub mod heap;
pub mod image;
pub mod kubelet;
pub mod kuberuntime;
pub mod node;
pub mod pleg;
pub mod pod;
pub mod prober;
pub mod quantity;
pub mod resource;
pub mod runtimeclass;
pub mod scheduler;
pub mod server;
pub mod source;
pub mod standalone;
pub mod status;
pub mod systemd;
pub mod tasks;
pub mod time;
pub mod userns;
pub mod volume;

/// The Kubernetes version whose kubelet behaviour deckhand mirrors (hack/versions.env pins the
/// control plane built for tests to the same version).
pub const KUBE_VERSION: &str = "v1.36.3";

/// The version deckhand reports as `status.nodeInfo.kubeletVersion`: the Kubernetes version it
/// mirrors, with deckhand's own version as a SemVer pre-release tag so that
/// `kubectl get nodes` shows which kubelet runs on the node (e.g. `v1.36.3-deckhand.0.1.0`).
pub fn kubelet_version() -> String {
    format!("{}-deckhand.{}", KUBE_VERSION, env!("CARGO_PKG_VERSION"))
}

/// Makes any panic, on any thread or tokio task, end the process after the panic message is
/// printed, whatever the build profile's `panic` setting. The release profile builds the binaries
/// with `panic = "abort"`; the `ci` profile (what hack/test.sh builds) unwinds so that tests and
/// binaries share their dependencies, and without this hook a panicking tokio task would die
/// alone while the process carried on. Called first thing in both binaries' `main`. The Go
/// kubelet behaves the same way: an unrecovered panic in any goroutine ends the process.
pub fn abort_on_panic() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
}
