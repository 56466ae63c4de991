#!/usr/bin/env bash
# README command 2: runs deckhand's unit tests and its end-to-end tests against a real local
# cluster (etcd, kube-apiserver, kube-controller-manager, containerd, registry, deckhand).
#
# On a fresh Debian machine (as root) it installs what it needs, builds the control plane from
# the pinned Kubernetes Go modules (cached), brings the cluster up with hack/local-up.sh, runs
# `cargo test --profile ci` (unit, component and e2e tests), then the upstream [sig-node] conformance
# tests (hack/conformance.sh; CONFORMANCE=0 leaves them out), and brings the cluster down again if
# it started it. If the cluster was already up, deckhand is restarted from the current source and
# the cluster is left up.  KEEP_CLUSTER=1 leaves a cluster this script started running.
# CONTAINERD=2 brings a cluster up on containerd 2.x instead of Debian's 1.6 (hack/local-up.sh);
# a cluster already up keeps the containerd it runs.
#
# Both runtimes (issue 17): when this script brought the cluster up itself, after the tests above
# it brings it up again on the other containerd (2.x after 1.6; 1.6 after 2.x) and runs the
# end-to-end test modules where the runtimes differ for deckhand ($OTHER_RUNTIME_TESTS below: a
# smoke set; OTHER_RUNTIME=full runs every module that exercises the runtime, by hand). The
# conformance suite runs on the first containerd only (time; `hack/conformance.sh --containerd 2`
# runs it on 2.x). OTHER_RUNTIME=0 leaves that phase out; a cluster that was already up is not
# switched.
#
# Several nodes (issue 16): after the conformance tests, NODES=3 hack/local-up.sh up adds two
# worker nodes to the cluster (each its own namespaces, containerd and deckhand) and
# tests/e2e/multinode.rs runs against the three; every other test module runs on one node.
# MULTINODE=0 leaves that phase out.
#
# kubeadm (issue 16): then `down` and LOCAL_UP_MODE=kubeadm up (kubeadm init and join, every kubelet
# deckhand) and tests/e2e/kubeadm.rs. KUBEADM=0 leaves that phase out.
#
# The real host (issue 47): in the kubeadm phase, the VM node dh-vm-1 (hack/vm.sh: Debian 12 under
# QEMU, systemd as PID 1, cgroup v2) boots beside the kubeadm cluster's start, then joins it with
# kubeadm join and deckhand as its kubelet.service, and tests/e2e/vm.rs runs on it. Its image is
# built beside the cargo build the first time (cached). VM=0 leaves it out.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# PHASE: the step running now, which the recap at the end names when the run fails
PHASE= PHASE_START=$(date +%s)
log() { PHASE=$*; PHASE_START=$(date +%s); printf '\n== %s ==\n' "$*"; }

# hack/local-up.sh with its output also in $UP_LOG, so that the recap can repeat why a failed
# `up` or `down` stopped (CI shows only the end of the output, and the deckhand log comes after
# local-up's own message). A process substitution, not a pipe: a daemon that kept the pipe open
# would otherwise hold the script.
UP_LOG="$ROOT/_output/local-up-last.log"
UP_FAILED=
local_up() {
  local rc=0
  hack/local-up.sh "$@" > >(tee "$UP_LOG") 2>&1 || rc=$?
  [ "$rc" = 0 ] || UP_FAILED="hack/local-up.sh $* (exit $rc)"
  return "$rc"
}

log "host packages"
if [ "${VM:-1}" != 0 ]; then hack/install-deps.sh harness vm; else hack/install-deps.sh harness; fi
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi

# The Go programs the cluster and the conformance step need (the control plane, CoreDNS, crictl,
# e2e.test and its helpers; cached, so a no-op after the first run) build in the background while
# cargo builds: on 2 cores each build leaves a core idle for long stretches (linking, the last
# crates), and the two together take little longer than the Rust build alone. local-up and
# hack/conformance.sh wait for them (each build script holds a lock while it builds).
mkdir -p _output
PREBUILD_LOG="$ROOT/_output/prebuild.log"
log "Go builds in the background (log: $PREBUILD_LOG)"
(
  set -e
  hack/build-k8s.sh etcd kube-apiserver kube-controller-manager kubectl kube-proxy \
    ginkgo agnhost nonewprivs sample-apiserver $([ "${CONFORMANCE:-1}" != 0 ] && echo e2e.test)
  [ "${LOCAL_UP_DNS:-1}" = 0 ] || hack/build-coredns.sh
  [ "${LOCAL_UP_STORAGE:-1}" = 0 ] || hack/build-local-path-provisioner.sh
  # CONTAINERD=2: the cluster runs containerd 2.x (hack/local-up.sh), built from its Go module
  # (and the second runtime phase below runs on it unless OTHER_RUNTIME=0)
  case "${CONTAINERD:-}" in 2|2.*) hack/build-containerd.sh ;; *) [ "${OTHER_RUNTIME:-1}" = 0 ] || hack/build-containerd.sh ;; esac
  hack/build-crictl.sh || true
) > "$PREBUILD_LOG" 2>&1 &
prebuild=$!
# the VM node's Debian image (debootstrap; cached in /var/cache/deckhand/vm), beside the rest
VM_IMAGE_LOG="$ROOT/_output/vm-image.log"
vm_image=""
if [ "${VM:-1}" != 0 ] && [ "${KUBEADM:-1}" != 0 ]; then
  hack/build-vm-image.sh > "$VM_IMAGE_LOG" 2>&1 &
  vm_image=$!
fi
trap 'kill "$prebuild" $vm_image 2>/dev/null || true' EXIT

# Tests and the binaries they run are built with the `ci` profile (Cargo.toml): release code,
# without LTO, unwinding, so that they share one build of every dependency.
PROFILE=ci
log "unit tests first (fast feedback, no cluster needed)"
cargo test --profile "$PROFILE" --lib --bins
log "the link order tools' tests (hack/lib/test_*.py)"
PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s "$ROOT/hack/lib" -p 'test_*.py'

# One build of the binaries for everything below: the end-to-end tests and the cluster run the
# deckhand and deckhand-scheduler that `cargo test` builds (with the dev-dependencies' features).
# Without this, local-up's `cargo build --bin deckhand` resolves features differently and the
# crate is compiled a third time (10-20 min on a 2-core machine).
log "building the end-to-end tests and the binaries they run"
cargo test --profile "$PROFILE" --tests --no-run
export DECKHAND_BIN="$ROOT/target/$PROFILE/deckhand" SCHEDULER_BIN="$ROOT/target/$PROFILE/deckhand-scheduler"

log "waiting for the background Go builds"
if ! wait "$prebuild"; then
  echo "--- the background Go builds failed (local-up builds again and says why); $PREBUILD_LOG ends:"
  tail -n 30 "$PREBUILD_LOG"
fi

started=0
if hack/local-up.sh status >/dev/null 2>&1; then
  log "cluster already up: restarting deckhand from this source"
  local_up restart-deckhand
else
  log "bringing the local cluster up"
  started=1
  local_up up
fi

# What failed, printed last (CI shows only the end of the output): the step that was running, why
# hack/local-up.sh stopped if it did, the cargo tests that failed (or did not build) and the
# conformance failures that are not on the known list.
CARGO_LOG="$ROOT/_output/cargo-tests.log"
recap() {
  echo
  echo "=== hack/test.sh FAILED: what failed ==="
  echo "failed during: $FAILED_PHASE"
  if [ -n "$UP_FAILED" ]; then
    echo "--- $UP_FAILED; its last lines ($UP_LOG) ---"
    tail -n 25 "$UP_LOG" 2>/dev/null || true
  fi
  if [ -s "$CARGO_LOG" ]; then
    grep -E '^test .* FAILED$|^     Running |panicked at' "$CARGO_LOG" |
      grep -B1 -E 'FAILED$|panicked at' | grep -v '^--$' | head -n 40 || true
    grep -E '^error' "$CARGO_LOG" | head -n 10 || true
  fi
  local summary="$ROOT/_output/conformance/deckhand/summary.txt"
  if [ "${CONFORMANCE_STARTED:-0}" = 1 ] && [ "${CONFORMANCE_PASSED:-0}" != 1 ] && [ -f "$summary" ]; then
    echo "--- conformance ($summary) ---"
    sed -n '/^selected/p;/^wall time/p;/^failures:/,$p;/^flaky/,$p' "$summary" | head -n 60
  fi
}

# The deckhand logs written during the step that failed: the main node's, or in the multinode and
# kubeadm steps every node's (_output/local-up/logs/dh-node-<i>-deckhand.log).
print_deckhand_logs() {
  local logs=() f n
  for f in "$ROOT"/_output/local-up/logs/deckhand.log "$ROOT"/_output/local-up/logs/dh-node-*-deckhand.log; do
    [ -f "$f" ] && [ "$(stat -c %Y "$f")" -ge "$PHASE_START" ] && logs+=("$f")
  done
  [ ${#logs[@]} -gt 0 ] || { echo "--- no deckhand log was written during: $FAILED_PHASE ---"; return 0; }
  n=$((80 / ${#logs[@]})); [ "$n" -ge 20 ] || n=20
  for f in "${logs[@]}"; do
    echo "--- last $n lines of $f ---"
    tail -n "$n" "$f"
  done
}

cleanup() {
  rc=$?
  FAILED_PHASE=$PHASE
  [ "$rc" -eq 0 ] || print_deckhand_logs
  if [ "$started" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    log "bringing the local cluster down"
    hack/local-up.sh down || true
  fi
  [ "$rc" -eq 0 ] || recap
  exit "$rc"
}
trap cleanup EXIT

# Runs the end-to-end test modules named after the log file (appending to it), one at a time (tests/e2e/main.rs:
# some disturb the node for every other test); arguments for the test binary come after `--`
# (--test-threads: how many of a module's own tests run at once). Every module runs even when one
# fails (as --no-fail-fast), and the call fails if any did.
run_e2e_modules() {
  local log=$1 m rc=0; shift
  local mods=() extra=()
  while [ $# -gt 0 ]; do
    [ "$1" = -- ] && { shift; extra=("$@"); break; }
    mods+=("$1"); shift
  done
  for m in "${mods[@]}"; do
    # a name with no module would match no test and pass
    [ -f "tests/e2e/$m.rs" ] || { echo "error: no test module tests/e2e/$m.rs (hack/test.sh)" | tee -a "$log"; rc=1; continue; }
    cargo test --profile "$PROFILE" --test e2e -- "$m::" "${extra[@]}" 2>&1 | tee -a "$log" || rc=1
  done
  return "$rc"
}

# every test module but the multi-node and kubeadm ones, which run below on their own clusters
log "all tests (unit, component, end-to-end against the real cluster)"
: > "$CARGO_LOG"
ONE_NODE_MODULES=()
for f in tests/e2e/*.rs; do
  m=$(basename "$f" .rs)
  case "$m" in main|common|multinode|kubeadm|vm) ;; *) ONE_NODE_MODULES+=("$m") ;; esac
done
one_node_rc=0
cargo test --profile "$PROFILE" --test component_pod_worker --test systemd_units --no-fail-fast 2>&1 |
  tee -a "$CARGO_LOG" || one_node_rc=1
run_e2e_modules "$CARGO_LOG" "${ONE_NODE_MODULES[@]}" -- --test-threads="${E2E_THREADS:-4}" || one_node_rc=1
[ "$one_node_rc" = 0 ]

# The upstream check (issue 13): the [sig-node] conformance tests of k8s.io/kubernetes test/e2e at
# the pinned version, in parallel, against this cluster. Any failure that is not on the commented
# list of harness-caused ones fails the run. e2e.test, ginkgo and the e2e images are built here the
# first time (cached). CONFORMANCE=0 leaves it out (a quick local iteration, not CI).
if [ "${CONFORMANCE:-1}" != 0 ]; then
  log "upstream conformance: the [sig-node] conformance tests (hack/conformance.sh --sig-node)"
  CONFORMANCE_STARTED=1
  hack/conformance.sh --sig-node --procs "${CONFORMANCE_PROCS:-3}" \
    --known-failures hack/conformance-known-failures.txt
  CONFORMANCE_PASSED=1
fi

# Several nodes (issue 16): two worker nodes join the running cluster, each in its own
# namespaces with its own containerd and deckhand (NODES=3 hack/local-up.sh up adds them to the
# running cluster in about 10 s), and tests/e2e/multinode.rs runs (spread, pod to pod across nodes,
# a deleted pod replaced, a stopped node's pods replaced elsewhere and cleaned up when it is back;
# about 2 minutes). The other containerd's phase below starts from `down`, which removes them.
# MULTINODE=0 leaves it out.
if [ "${MULTINODE:-1}" != 0 ]; then
  if [ "$started" != 1 ]; then
    log "several nodes: skipped (the cluster was up before this script; nodes are not added to it)"
  else
    log "several nodes: NODES=3 hack/local-up.sh up, then tests/e2e/multinode.rs"
    NODES=3 local_up up
    CARGO_LOG="$ROOT/_output/cargo-tests-multinode.log"
    : > "$CARGO_LOG"
    run_e2e_modules "$CARGO_LOG" multinode
    NODES=1 local_up up
  fi
fi

# The containerd the tests above ran on (the phase after next switches to the other one).
first=$(cat _output/local-up/containerd-mode 2>/dev/null || echo 1.6)

# A kubeadm cluster whose every kubelet is deckhand (issue 16): down, then LOCAL_UP_MODE=kubeadm up
# (kubeadm init in node namespace dh-node-1, kubeadm join of dh-node-2 and dh-node-3; about 50 s,
# kubeadm and the control-plane images built the first time), and tests/e2e/kubeadm.rs (Ready
# nodes, the control plane as mirror pods, kube-proxy and CoreDNS, pods across nodes; its tests are
# #[ignore]d so that no other run picks them up). The next
# phase starts from `down`, which removes it. KUBEADM=0 leaves it out.
if [ "${KUBEADM:-1}" != 0 ]; then
  if [ "$started" != 1 ]; then
    log "kubeadm mode: skipped (the cluster was up before this script; it is not replaced)"
  else
    log "kubeadm mode: hack/local-up.sh down; LOCAL_UP_MODE=kubeadm up; tests/e2e/kubeadm.rs"
    local_up down
    # the VM boots while kubeadm makes the cluster (two minutes of TCG emulation that need
    # nothing of the cluster yet)
    vm_boot=""
    if [ "${VM:-1}" != 0 ]; then
      if [ -n "$vm_image" ] && ! wait "$vm_image"; then
        echo "--- the VM image build failed; $VM_IMAGE_LOG ends:"; tail -n 30 "$VM_IMAGE_LOG"; exit 1
      fi
      vm_image=""
      VM_JOIN=0 hack/vm.sh up > "$ROOT/_output/vm-boot.log" 2>&1 &
      vm_boot=$!
    fi
    LOCAL_UP_MODE=kubeadm local_up up
    CARGO_LOG="$ROOT/_output/cargo-tests-kubeadm.log"
    : > "$CARGO_LOG"
    run_e2e_modules "$CARGO_LOG" kubeadm -- --ignored
    if [ -n "$vm_boot" ]; then
      log "the VM node: hack/vm.sh join (kubeadm join of dh-vm-1, deckhand as its kubelet.service); tests/e2e/vm.rs"
      if ! wait "$vm_boot"; then
        echo "--- hack/vm.sh up failed; _output/vm-boot.log ends:"; tail -n 30 "$ROOT/_output/vm-boot.log"; exit 1
      fi
      cat "$ROOT/_output/vm-boot.log"
      hack/vm.sh join
      CARGO_LOG="$ROOT/_output/cargo-tests-vm.log"
      : > "$CARGO_LOG"
      run_e2e_modules "$CARGO_LOG" vm -- --ignored --test-threads=1 --nocapture
    fi
  fi
fi

# The end-to-end tests again on the other containerd (see the top). Command 2 runs a smoke set:
# the modules where the two runtimes differ for deckhand (pod start and exit, restart of the
# runtime, CRI events, image volumes, user namespaces; about 3 minutes). OTHER_RUNTIME=full runs
# every module that exercises the runtime (the wide run, by hand: about 8 minutes more); left out
# even then: apiserver_outage, scheduler, fuzz, hostile and conformance_gaps (API server,
# scheduler, input handling and kubelet-server load, which do not depend on the runtime).
OTHER_RUNTIME_SMOKE=(basics exit lifecycle containerd_restart image_volume userns)
OTHER_RUNTIME_FULL=(basics exit lifecycle containerd_restart server standalone static_pods podspec
  resize network gc eviction defects dns ephemeral join image_volume userns)
if [ "${OTHER_RUNTIME:-1}" = full ]; then
  OTHER_RUNTIME_TESTS=("${OTHER_RUNTIME_FULL[@]}")
else
  OTHER_RUNTIME_TESTS=("${OTHER_RUNTIME_SMOKE[@]}")
fi
if [ "${OTHER_RUNTIME:-1}" != 0 ]; then
  if [ "$started" != 1 ]; then
    log "the other containerd: skipped (the cluster was up before this script; it is not switched)"
  else
    other=2; [ "$first" = 2 ] && other=1.6
    log "the end-to-end tests again on containerd $other (hack/local-up.sh down; CONTAINERD=$other up)"
    local_up down
    CONTAINERD=$other local_up up
    CARGO_LOG="$ROOT/_output/cargo-tests-containerd$other.log"
    : > "$CARGO_LOG"
    run_e2e_modules "$CARGO_LOG" "${OTHER_RUNTIME_TESTS[@]}" -- --test-threads="${E2E_THREADS:-4}"
  fi
fi
