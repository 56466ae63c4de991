#!/usr/bin/env bash
# Scheduler benchmark: deckhand-scheduler vs kube-scheduler (built from the Kubernetes Go modules at
# the version pinned in hack/versions.env), 1000 pods onto 100 and onto 1000 fake nodes, on the
# running local cluster (hack/local-up.sh). Prints throughput (pods/s), latency p50/p99 (pod create →
# binding seen through a watch) and the ratios. Not a test; nothing here is pass/fail.
#
# Environment: SCHED_BENCH_PODS, SCHED_BENCH_NODES (e.g. "100,1000"), SCHED_BENCH_SCHEDULERS
# (e.g. "deckhand,kube,kube-unthrottled"; "kube" runs kube-scheduler with its default client
# limits of 50 QPS / burst 100, "kube-unthrottled" with 5000/5000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
hack/local-up.sh status >/dev/null 2>&1 || { echo "the local cluster is not up: run hack/local-up.sh first" >&2; exit 1; }
hack/build-k8s.sh kube-scheduler
# shellcheck source=hack/lib/release.sh
. "$ROOT/hack/lib/release.sh"
release_build --bin deckhand-scheduler
export DECKHAND_SCHEDULER_BIN="${DECKHAND_SCHEDULER_BIN:-$(release_dir)/deckhand-scheduler}"
exec cargo bench --bench scheduler
