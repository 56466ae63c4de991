#!/usr/bin/env bash
# Pod start benchmark of deckhand against the local cluster (hack/local-up.sh must be up).
# Prints figures, asserts nothing about them:
#   deckhand's VmRSS idle; create→Running latency (p50/p90/p99/max) of N pods created at once,
#   each measured from the return of its create call to the first watch event with phase
#   Running; deckhand's VmRSS with the N pods running; the time until all are deleted.
#
# Usage: hack/bench.sh            (30 pods)
#        BENCH_PODS=50 hack/bench.sh
# Runs `cargo bench --bench pod_start` (benches/pod_start.rs); extra arguments go to cargo.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENV_FILE="$ROOT/_output/local-up/env"

[ -f "$ENV_FILE" ] || { echo "the local cluster is not up: run hack/local-up.sh first" >&2; exit 1; }
if ! "$ROOT/hack/local-up.sh" status >/dev/null 2>&1; then
  "$ROOT/hack/local-up.sh" status >&2 || true
  echo "the local cluster is not healthy (hack/local-up.sh status); fix it first" >&2
  exit 1
fi
# shellcheck disable=SC1090
. "$ENV_FILE"
pid=$(cat "$DECKHAND_PIDFILE" 2>/dev/null || true)
[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = deckhand ] ||
  { echo "deckhand is not running (hack/local-up.sh restart-deckhand)" >&2; exit 1; }

echo "deckhand: $(readlink "/proc/$pid/exe") (pid $pid), $(nproc) CPUs, kernel $(uname -r)"
cd "$ROOT"
exec cargo bench --bench pod_start "$@"
