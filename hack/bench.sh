#!/usr/bin/env bash
# Benchmarks of deckhand against the local cluster (hack/local-up.sh must be up). They print
# figures and assert nothing about them.
#
#   hack/bench.sh                   deckhand alone: VmRSS idle; create→Running latency
#                                   (p50/p90/p99/max) of N pods created at once (BENCH_PODS,
#                                   default 30); VmRSS with them running; the time until all are
#                                   deleted (benches/pod_start.rs)
#   hack/bench.sh --peer go [--rounds N]
#                                   side by side with the Go kubelet of the pinned version
#                                   (benches/node.rs): N rounds (default 2) of deckhand then the
#                                   Go kubelet on the same node, containerd and API server, the
#                                   machine's limit measured before and after each round
#                                   (the same pods, with the requests a kubelet sends, straight
#                                   through CRI with no kubelet, one at a time and 30 at once;
#                                   the API server's write+watch round trip). Each round: idle RSS
#                                   / CPU / threads, 30 pods at once, 20 pods one at a time, 100
#                                   pods at 5/s (RSS, CPU, status writes per pod start, each CRI
#                                   operation's mean from the kubelet's own metrics), container
#                                   exit → phase Failed (exit time from containerd's /tasks/exit
#                                   event); then a table of the medians with the ratio
#                                   deckhand / Go, the load average before each round, the
#                                   issue-15 targets as multiples of the limits next to each round,
#                                   and each 30-pod burst's CPU work (the whole machine's busy
#                                   CPU seconds, of it the API server + etcd, the kubelet,
#                                   containerd + CNI) against the machine's CPUs.
#
# --peer go runs deckhand's release build (hack/build-release.sh: the binary you ship), builds
# the Go kubelet (hack/build-k8s.sh kubelet, cached), swaps the kubelets with
# hack/lib/go-kubelet.sh (deckhand is stopped while the Go kubelet is the node, and started again
# afterwards, also on failure or Ctrl-C), and leaves deckhand's release build running. Results:
# _output/bench/<time>/ (one JSON file per round, limit-<n>.json, report.txt).
# Environment: BENCH_SETTLE_S (20), BENCH_IDLE_S (60), BENCH_BUSY_S (20) set the idle and busy
# measurement windows; BENCH_QUIET_MAX_S (300) the longest wait, before the first round, for the
# load average to fall below the number of CPUs. BENCH_RAW_SANDBOXES_AT_ONCE (30) lets only that
# many of the limit's raw burst run RunPodSandbox at a time (an experiment: the limit itself is
# defined with all 30 at once).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENV_FILE="$ROOT/_output/local-up/env"
PEER=
ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --peer) PEER=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done

[ -f "$ENV_FILE" ] || { echo "the local cluster is not up: run hack/local-up.sh first" >&2; exit 1; }
if ! "$ROOT/hack/local-up.sh" status >/dev/null 2>&1; then
  "$ROOT/hack/local-up.sh" status >&2 || true
  echo "the local cluster is not healthy (hack/local-up.sh status); fix it first" >&2
  exit 1
fi
# shellcheck disable=SC1090
. "$ENV_FILE"
cd "$ROOT"

if [ -z "$PEER" ]; then
  pid=$(cat "$DECKHAND_PIDFILE" 2>/dev/null || true)
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = deckhand ] ||
    { echo "deckhand is not running (hack/local-up.sh restart-deckhand)" >&2; exit 1; }
  echo "deckhand: $(readlink "/proc/$pid/exe") (pid $pid), $(nproc) CPUs, kernel $(uname -r)"
  exec cargo bench --bench pod_start "$@"
fi
[ "$PEER" = go ] || { echo "bench: --peer go is the only peer" >&2; exit 2; }

log() { echo "bench [$(date -u +%H:%M:%S)]: $*"; }
die() { echo "bench: ERROR: $*" >&2; exit 1; }
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
export PATH=/usr/local/go/bin:$PATH
BIN="$ROOT/_output/bin"
OUT="$ROOT/_output/bench/$(date -u +%Y%m%dT%H%M%SZ)"
GO_DIR="$OUT/go-kubelet"
mkdir -p "$OUT" "$GO_DIR"
# shellcheck source=hack/lib/go-kubelet.sh
. "$ROOT/hack/lib/go-kubelet.sh"

log "building: deckhand (release), the bench driver, the Go kubelet"
# shellcheck source=hack/lib/release.sh
. "$ROOT/hack/lib/release.sh"
release_build --bins
# The driver is built once and its executable run from then on: `cargo bench` for every limit
# and round would rebuild it, in the middle of the measurements, whenever a source file changed
# meanwhile (an edit during a bench made limit 1 wait for a build of deckhand's library).
NODE_BENCH=$(cargo bench --profile ci --bench node --no-run --message-format=json |
  python3 -c 'import json, sys
exes = [m["executable"] for m in map(json.loads, sys.stdin)
        if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "node"]
print(exes[-1] if exes else "")')
[ -x "$NODE_BENCH" ] || die "the bench driver (cargo bench --bench node) was not built"
"$ROOT/hack/build-k8s.sh" kubelet
DECKHAND_BIN="$(release_dir)/deckhand"
SCHEDULER_BIN=${SCHEDULER_BIN:-$(release_dir)/deckhand-scheduler}
export DECKHAND_BIN SCHEDULER_BIN
if [ "$(readlink "/proc/$(deckhand_pid)/exe" 2>/dev/null)" != "$DECKHAND_BIN" ]; then
  log "starting deckhand's release build ($DECKHAND_BIN)"
  "$ROOT/hack/local-up.sh" restart-deckhand >"$OUT/restart-deckhand.log" 2>&1 ||
    { tail -n 20 "$OUT/restart-deckhand.log" >&2; die "deckhand did not restart"; }
fi
trap 'go_kubelet_restore || true' EXIT
driver() { "$NODE_BENCH" --bench "$@"; }

{
  echo "host: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
  echo "runtime: $("$CRICTL" version 2>/dev/null | awk '/RuntimeName|RuntimeVersion/ {printf "%s ", $2}')"
  echo "deckhand: $DECKHAND_BIN ($(du -h "$DECKHAND_BIN" | cut -f1)), Go kubelet: $BIN/kubelet $KUBE_VERSION ($(du -h "$BIN/kubelet" | cut -f1))"
} | tee "$OUT/host.txt"

# The builds above (and whatever ran before the bench, e.g. hack/bench-max-pods.sh's 248 pods
# being torn down) leave the machine busy for minutes: a first round started at a load average
# of 18 came out 1.2x slower than the second. Wait until the 1-minute load average is below the
# number of CPUs, at most BENCH_QUIET_MAX_S (300) seconds, before the first limit.
wait_quiet() {
  local max=${BENCH_QUIET_MAX_S:-300} cpus waited=0
  cpus=$(nproc)
  while [ "$waited" -lt "$max" ] && awk -v c="$cpus" '{exit !($1 >= c)}' /proc/loadavg; do
    sleep 5; waited=$((waited + 5))
  done
  log "waited ${waited} s for the machine to be quiet (load average $(cut -d' ' -f1-3 /proc/loadavg))"
}
# The machine's pace drifts from round to round (containerd slows as the rounds go by), so the
# limit is measured before and after every round (always while deckhand is the node: the Go
# kubelet would kill the raw pods as unknown), and each round is held to the two next to it.
L=0
limit() { L=$((L + 1)); log "limit $L: the machine's limit (no kubelet involved)"; driver limit --index "$L" --out "$OUT/limit-$L.json"; }
wait_quiet
for r in $(seq 1 "$ROUNDS"); do
  [ -n "$(deckhand_pid)" ] || go_kubelet_restore
  limit
  log "round $r: deckhand (pid $(deckhand_pid))"
  driver round --kubelet deckhand --pid "$(deckhand_pid)" --round "$r" --out "$OUT/deckhand-$r.json"
  limit
  go_kubelet_start
  log "round $r: the Go kubelet (pid $(go_kubelet_pid))"
  driver round --kubelet go --pid "$(go_kubelet_pid)" --round "$r" --out "$OUT/go-$r.json"
  go_kubelet_restore
done
trap - EXIT
limit
driver report "$OUT"/deckhand-*.json "$OUT"/go-*.json "$OUT"/limit-*.json | tee "$OUT/report.txt"
cat "$OUT/host.txt" >> "$OUT/report.txt"
log "results: $OUT"
