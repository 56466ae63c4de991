#!/usr/bin/env bash
# Memory per pod at the node's pod limit (issue 15: "≤ 0.1 MiB per running pod; measure up to
# 250 pods with maxPods: 250"), against the local cluster (hack/local-up.sh must be up). Prints
# figures and asserts nothing about them.
#
#   hack/bench-max-pods.sh [N]      default N = 250
#
# Restarts deckhand (the release build, or DECKHAND_BIN) with --max-pods=N, lets it idle
# BENCH_IDLE_S (60) and reads its RSS and anonymous memory (/proc/<pid>/smaps_rollup); creates a
# Deployment of N busybox pods, waits until every pod the node has room for is Running (N minus
# the pods already on it; the rest stay Pending with the scheduler's "Too many pods"), reads the
# memory again BENCH_SETTLE_S (60) later, deletes the Deployment and reads it once more
# BENCH_SETTLE_S after the last pod is gone. The MiB per pod is (with pods - idle) / pods
# Running. deckhand is started again without --max-pods at the end, also on failure or Ctrl-C.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENV_FILE="$ROOT/_output/local-up/env"
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
esac
N=${1:-250}
IDLE_S=${BENCH_IDLE_S:-60}
SETTLE_S=${BENCH_SETTLE_S:-60}
NAME=bench-max-pods

[ -f "$ENV_FILE" ] || { echo "the local cluster is not up: run hack/local-up.sh first" >&2; exit 1; }
# shellcheck disable=SC1090
. "$ENV_FILE"
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
say() { echo "$(date -u +%T) $*"; }
# RSS and anonymous memory of the running deckhand, in MiB: "rss anon"
memory() {
  local pid; pid=$(cat "$DECKHAND_PIDFILE")
  awk '/^Rss:/{r=$2} /^Anonymous:/{a=$2} END{printf "%.1f %.1f\n", r/1024, a/1024}' \
    "/proc/$pid/smaps_rollup"
}
restart_deckhand() { DECKHAND_ARGS="$1" "$ROOT/hack/local-up.sh" restart-deckhand >/dev/null; }
node_pods() {
  kc get pods -A --field-selector "spec.nodeName=$NODE_NAME" --no-headers 2>/dev/null | wc -l
}
running() {
  kc get pods -l "app=$NAME" --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l
}

NODE_NAME=$(kc get nodes -o jsonpath='{.items[0].metadata.name}')
cleanup() {
  kc delete deployment "$NAME" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  restart_deckhand "${DECKHAND_ARGS:-}" || true
}
trap cleanup EXIT

restart_deckhand "${DECKHAND_ARGS:-} --max-pods=$N"
say "deckhand restarted with --max-pods=$N; idle for $IDLE_S s"
sleep "$IDLE_S"
read -r idle_rss idle_anon < <(memory)
say "idle: RSS $idle_rss MiB (anonymous $idle_anon)"

room=$(( N - $(node_pods) ))
kc apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: $NAME, namespace: default}
spec:
  replicas: $N
  selector: {matchLabels: {app: $NAME}}
  template:
    metadata: {labels: {app: $NAME}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: main, image: busybox:1.36, command: [sleep, "86400"]}
YAML
t0=$(date +%s)
n=0
for _ in $(seq 180); do
  n=$(running)
  [ "$n" -ge "$room" ] && break
  sleep 5
done
say "$n of $N pods Running after $(( $(date +%s) - t0 )) s (room on the node: $room)"
[ "$n" -gt 0 ] || { echo "no pod became Running" >&2; exit 1; }
sleep "$SETTLE_S"
read -r pods_rss pods_anon < <(memory)
say "with $n pods, $SETTLE_S s later: RSS $pods_rss MiB (anonymous $pods_anon)"

t0=$(date +%s)
kc delete deployment "$NAME" --wait=true >/dev/null
for _ in $(seq 120); do
  [ "$(kc get pods -l "app=$NAME" --no-headers 2>/dev/null | wc -l)" = 0 ] && break
  sleep 5
done
say "deleted in $(( $(date +%s) - t0 )) s"
sleep "$SETTLE_S"
read -r after_rss after_anon < <(memory)
say "$SETTLE_S s after the deletion: RSS $after_rss MiB (anonymous $after_anon)"

awk -v n="$n" -v i="$idle_rss" -v p="$pods_rss" -v a="$after_rss" -v ia="$idle_anon" \
  -v pa="$pods_anon" -v aa="$after_anon" 'BEGIN {
  printf "\n%-34s %8s %10s\n", "deckhand, --max-pods", "RSS MiB", "anonymous"
  printf "%-34s %8.1f %10.1f\n", "idle", i, ia
  printf "%-34s %8.1f %10.1f\n", sprintf("with %d pods Running", n), p, pa
  printf "%-34s %8.1f %10.1f\n", "after they were deleted", a, aa
  printf "%-34s %8.3f %10.3f   (target: 0.1)\n", "MiB per pod", (p - i) / n, (pa - ia) / n
}'
