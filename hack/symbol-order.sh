#!/usr/bin/env bash
# Regenerates hack/release/deckhand.symbol-order.gz, the order in which the release build
# (hack/lib/release.sh) has the linker lay out deckhand's functions. Needs the local cluster up
# (hack/local-up.sh), root (ptrace), python3 and binutils (readelf, c++filt).
#
#   hack/symbol-order.sh [SECONDS [RUNS]]   trace RUNS runs (default 2) of SECONDS each (default 300)
#
# It builds deckhand as released, in its own target directory and with the linker's map written
# (the symbol names in the list carry hashes of each crate's metadata, which the flags and the
# profile go into, so the build is the release build itself, less the list), then
# RUNS times stops the running deckhand and starts that build with the same command line and
# environment under hack/lib/fntrace.py (a one-shot breakpoint on every function), lets it
# register, sync and idle for SECONDS, and restarts deckhand (hack/local-up.sh restart-deckhand).
# While it is traced, the node does what a node does after `hack/local-up.sh up` and in the
# benchmark (workload below): its DNS and kube-proxy pods are replaced, a pod is started, its
# container exits and is restarted after the back-off, and the pod is deleted; five pods start at
# once, end (Succeeded or Failed) and are deleted; then it idles. A
# trace of an idle restart alone misses that code, which an idle node then keeps resident (on 4 KiB
# folios each stray fault maps 64 KiB around it: 9.5 MiB idle after `up`, 7.6 after a restart).
# hack/lib/symbol_layout.py turns the union of the runs into the list: the functions that ran
# from the first 2 MiB boundary of the file inside the text, the ones most likely to run on some
# other run around them, the rest after. Why: README "Benchmarks" (the page cache keeps the binary
# in folios of up to 2 MiB and maps a folio whole on a fault, so an idle node's RSS follows how
# many 2 MiB ranges of the file its code touches). Run it again after large changes: a function
# the list lacks goes to the end of the text, and code or read-only data that grows or shrinks
# by more than the layout's margin (32 KiB) moves the functions that run across a boundary.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECS=${1:-300}
RUNS=${2:-2}
OUT="$ROOT/hack/release/deckhand.symbol-order.gz"
ENV_FILE="$ROOT/_output/local-up/env"
die() { echo "symbol-order: $*" >&2; exit 1; }
[ -f "$ENV_FILE" ] && "$ROOT/hack/local-up.sh" status >/dev/null 2>&1 ||
  die "the local cluster is not up and healthy (hack/local-up.sh up)"
# shellcheck disable=SC1090
. "$ENV_FILE"
for tool in python3 readelf c++filt gzip; do command -v "$tool" >/dev/null || die "$tool not found"; done

# shellcheck source=hack/lib/release.sh
. "$ROOT/hack/lib/release.sh"
target="${CARGO_TARGET_DIR:-$ROOT/target}/symbol-order"
map="$target/deckhand.map"
# without the current list: the names are the same, and a stale list cannot hide a function
CARGO_TARGET_DIR="$target" RELEASE_SYMBOL_ORDER=none RELEASE_LINK_MAP="$map" release_build --bin deckhand
bin="$target/$(release_triple)/release/deckhand"
[ -s "$map" ] || die "the link wrote no map ($map)"

# What the node does while it is traced (in the background; the trace goes on idle after it).
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
workload() {
  kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=180s
  sleep 10
  kc -n kube-system delete pod -l k8s-app=kube-dns --wait=false
  kc -n kube-system delete pod -l k8s-app=kube-proxy --wait=false
  kc -n default delete pod symbol-order-workload symbol-order-burst-{1..5} --ignore-not-found --wait=true
  kc -n default run symbol-order-workload --image=busybox:1.36 --restart=Always \
    --command -- sh -c 'echo started; sleep 5; exit 3'
  kc -n default wait --for=condition=Ready pod/symbol-order-workload --timeout=120s
  sleep 40  # exits, back-off, restarted
  kc -n default logs symbol-order-workload >/dev/null
  kc -n default delete pod symbol-order-workload --wait=true --timeout=120s
  # five at once that end on their own (restartPolicy Never): Succeeded or Failed, then deleted
  local burst=() i
  for i in 1 2 3 4 5; do
    burst+=("symbol-order-burst-$i")
    kc -n default run "symbol-order-burst-$i" --image=busybox:1.36 --restart=Never \
      --command -- sh -c "sleep 3; exit $((i % 2))" &
  done
  wait
  sleep 30
  kc -n default delete pod "${burst[@]}" --wait=true --timeout=120s
  kc -n kube-system wait --for=condition=Ready pod -l k8s-app=kube-dns --timeout=120s
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
traces=()
for run in $(seq "$RUNS"); do
  pid=$(cat "$DECKHAND_PIDFILE" 2>/dev/null || true)
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = deckhand ] ||
    die "deckhand is not running (hack/local-up.sh restart-deckhand)"
  mapfile -d '' argv < "/proc/$pid/cmdline"
  mapfile -d '' envv < "/proc/$pid/environ"
  cwd=$(readlink "/proc/$pid/cwd")
  kill "$pid"
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && die "deckhand (pid $pid) did not stop"
  echo "symbol-order: run $run of $RUNS: tracing $bin for ${SECS}s"
  workload >"$work/workload$run.log" 2>&1 &
  wl=$!
  status=0
  (cd "$cwd" && env -i "${envv[@]}" FNTRACE_MAP="$map" python3 "$ROOT/hack/lib/fntrace.py" "$SECS" "$work/trace$run" "$bin" "${argv[@]:1}") \
    >"$work/trace$run.log" 2>&1 || status=$?
  wait "$wl" || { echo "symbol-order: the workload of run $run failed (before the trace ended?):" >&2
    tail -n 5 "$work/workload$run.log" >&2; }
  "$ROOT/hack/local-up.sh" restart-deckhand >/dev/null 2>&1 ||
    echo "symbol-order: restarting deckhand failed: hack/local-up.sh restart-deckhand" >&2
  [ "$status" = 0 ] || { tail -n 20 "$work/trace$run.log" >&2; die "the trace failed"; }
  grep '^fntrace:' "$work/trace$run.log" || true
  traces+=("$work/trace$run")
done
python3 "$ROOT/hack/lib/symbol_layout.py" "$bin" "$map" "$work/order" "${traces[@]}"
mkdir -p "$(dirname "$OUT")"
gzip -9n < "$work/order" > "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "symbol-order: $(wc -l < "$work/order") names in $OUT"
