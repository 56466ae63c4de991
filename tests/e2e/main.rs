//! deckhand's end-to-end tests against the real local cluster (`hack/local-up.sh up`): etcd,
//! kube-apiserver, kube-controller-manager, containerd, the local registry, deckhand and
//! deckhand-scheduler.
//!
//! One test binary with one module per area, not one binary per file: every binary links the
//! whole crate and its dependencies again, and 25 of them took about 6.5 of the 12 minutes of
//! the ci-profile build on 2 cores (2026-12-07, `cargo test --timings`).
//!
//! The modules are run **one at a time**, each with its own filter, as they ran when each was
//! its own binary: some disturb the node for every other test (the API server stopped, containerd
//! restarted, disk pressure, image GC), and their tests are written to share their time only with
//! each other. hack/test.sh runs every module but `multinode` and `kubeadm` this way:
//!
//! ```text
//! cargo test --profile ci --test e2e -- exit:: --test-threads=4
//! ```
//!
//! `multinode` needs `NODES=3 hack/local-up.sh up`; `kubeadm` needs `LOCAL_UP_MODE=kubeadm
//! hack/local-up.sh up` and `--ignored`; `vm` needs `hack/vm.sh up` and `--ignored
//! --test-threads=1`. Running the binary with no filter runs every module at
//! once; do that only to list the tests (`-- --list`).

mod common;

mod apiserver_outage;
mod basics;
mod conformance_gaps;
mod containerd_restart;
mod defects;
mod dns;
mod ephemeral;
mod eviction;
mod exit;
mod fuzz;
mod gc;
mod hostile;
mod image_volume;
mod join;
mod kubeadm;
mod lifecycle;
mod multinode;
mod network;
mod podspec;
mod resize;
mod scheduler;
mod server;
mod standalone;
mod static_pods;
mod storage;
mod userns;
mod vm;
