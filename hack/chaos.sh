#!/usr/bin/env bash
# Faults and load too long for the tests (issue 14), against the local cluster (hack/local-up.sh
# must be up). Each mode prints what it did and its figures, and exits 1 when something was
# lost, duplicated or leaked.
#
#   hack/chaos.sh [kill] [--kills N] [--pods N]
#   hack/chaos.sh node-full
#   hack/chaos.sh outage [--seconds N]
#
# kill (the default): while a churn loop creates a pod a second in a namespace of its own (plain
# ones, ones with an init container, crash-looping ones and ones that ignore SIGTERM with a 15 s
# grace period) and deletes the oldest once N (default 30) exist, deckhand is killed with SIGKILL
# N times (default 20) at random moments 1 to 6 s apart, each time started again at once with
# `hack/local-up.sh restart-deckhand` (the same binary, without waiting for the Node). A kubectl
# watch records every restart count. Then:
#   during:  every pod has at most one ready sandbox and at most one running container per
#            container name; restart counts never went back; every pod not being deleted runs
#            (or crash-loops) within 90 s
#   after:   the leftover checks below
#
# node-full: the node filled to its pod capacity (maxPods, 110 by default, less the pods already
# on it) with busybox pods created at once; prints create→Running p50/p99/max, deckhand's RSS and
# CPU before, while they run and after; checks that one more pod is refused by the scheduler
# (Too many pods); then deletes them all and runs the leftover checks.
#
# outage: 16 steady pods, 4 crash-looping ones and 2 that exit (code 3, restartPolicy Never)
# during the outage, then (1) the API server and etcd stopped for N s (default 60), (2) containerd
# stopped with SIGTERM for 10 s, (3) with SIGKILL for 10 s, a pod created during each containerd
# outage. It prints the recovery figures (Lease renewed, node status posted and the exits
# reported after the API server is back; the new pod Running after containerd is back) and
# checks that no steady container was restarted or replaced, no restart count went back, no
# phase changed but the exiters', and deckhand stayed the same process.
#
# Leftover checks (every mode): the namespace is deleted; nothing of it is left in containerd;
# every address host-local reserved belongs to a live sandbox; no mount, pod directory or kubepods
# cgroup is left for a pod that no longer exists; deckhand never panicked.
# Results: _output/chaos/<time>/ (report.txt, the watch record, deckhand's log of the run).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENV_FILE="$ROOT/_output/local-up/env"
KILLS=20
PODS=30
MODE=kill
SECONDS_OUT=60
case "${1:-}" in kill|node-full|outage) MODE=$1; shift ;; esac
while [ $# -gt 0 ]; do
  case "$1" in
    --kills) KILLS=$2; shift 2 ;;
    --pods) PODS=$2; shift 2 ;;
    --seconds) SECONDS_OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown argument '$1' ([kill] --kills N --pods N | node-full | outage --seconds N)" >&2; exit 2 ;;
  esac
done
[ -f "$ENV_FILE" ] || { echo "the local cluster is not up: run hack/local-up.sh first" >&2; exit 1; }
"$ROOT/hack/local-up.sh" status >/dev/null 2>&1 ||
  { echo "the local cluster is not healthy (hack/local-up.sh status); fix it first" >&2; exit 1; }
# shellcheck disable=SC1090
. "$ENV_FILE"
cd "$ROOT"

log() { echo "chaos [$(date -u +%H:%M:%S)]: $*"; }
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
cri() { "$CRICTL" -r "$CRI_ENDPOINT" "$@"; }
OUT="$ROOT/_output/chaos/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
REPORT="$OUT/report.txt"
report() { echo "$*" | tee -a "$REPORT"; }
NS="chaos-$(date -u +%H%M%S)"
STOP="$OUT/stop"

pid=$(cat "$DECKHAND_PIDFILE")
[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = deckhand ] || { echo "deckhand is not running" >&2; exit 1; }
BIN=$(readlink "/proc/$pid/exe"); BIN=${BIN% (deleted)}  # rebuilt since it started: the new file
LOG_FROM=$(stat -c %s "$DECKHAND_LOG")
# restart-deckhand also keeps deckhand-scheduler current: keep the running one, never build
SCHED_BIN=$(readlink "/proc/$(cat "$SCHEDULER_PIDFILE" 2>/dev/null)/exe" 2>/dev/null || true)
SCHED_BIN=${SCHED_BIN% (deleted)}
[ -x "$SCHED_BIN" ] || { echo "deckhand-scheduler is not running" >&2; exit 1; }
restart_deckhand() {
  DECKHAND_BIN=$BIN SCHEDULER_BIN=$SCHED_BIN DECKHAND_WAIT_NODE=0 "$ROOT/hack/local-up.sh" restart-deckhand
}

pod_json() {  # NAME KIND
  local name=$1 kind=$2 script="exec sleep 3600" grace=1 init="" policy=Always
  case $kind in
    crash) script="sleep 2; exit 1" ;;
    exiter) script="sleep ${EXIT_AFTER:-25}; exit 3"; policy=Never ;;
    slow) grace=15 ;;  # sleep as PID 1 ignores SIGTERM: killed when the grace period ends
    init) init=',"initContainers":[{"name":"init","image":"busybox","command":["sh","-c","sleep 1"]}]' ;;
  esac
  cat <<EOF
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$name","labels":{"chaos":"$kind"}},
 "spec":{"terminationGracePeriodSeconds":$grace,"restartPolicy":"$policy"$init,
  "tolerations":[{"operator":"Exists"}],
  "containers":[{"name":"main","image":"busybox","command":["sh","-c","$script"]}]}}
EOF
}

churn() {
  local i=0 kinds=(plain init crash slow) live=()
  while [ ! -e "$STOP" ]; do
    local name="p$i" kind=${kinds[$((i % 4))]}
    if pod_json "$name" "$kind" | kc -n "$NS" create -f - >/dev/null 2>>"$OUT/churn.err"; then
      live+=("$name")
    fi
    if [ "${#live[@]}" -gt "$PODS" ]; then
      kc -n "$NS" delete pod "${live[0]}" --wait=false >/dev/null 2>>"$OUT/churn.err" || true
      live=("${live[@]:1}")
    fi
    i=$((i + 1))
    sleep 1
  done
  echo "$i" > "$OUT/created"
}

problems=0
problem() { report "PROBLEM: $*"; problems=$((problems + 1)); }
make_namespace() {
  kc create namespace "$NS" >/dev/null
  for _ in $(seq 1 30); do kc -n "$NS" get serviceaccount default >/dev/null 2>&1 && break; sleep 1; done
}

# kill mode: SIGKILLs during churn, then the checks made while the pods exist
mode_kill() {
  make_namespace
  report "chaos: namespace $NS, $KILLS SIGKILLs of deckhand ($BIN), churn keeps $PODS pods; results in $OUT"

  # every restart count the API server reports, one line per watch event: uid name=count...
  kc -n "$NS" get pods -w -o json 2>/dev/null |
    jq -r --unbuffered '.metadata.uid + ([.status.containerStatuses[]? | " \(.name)=\(.restartCount)"] | join(""))' \
    > "$OUT/restart-counts.txt" &
  watch_pid=$!
  churn &
  churn_pid=$!
  cleanup() {
    touch "$STOP"
    kill "$watch_pid" 2>/dev/null || true
    wait "$churn_pid" 2>/dev/null || true
    # deckhand must run whatever happened here
    if ! [ "$(cat "/proc/$(cat "$DECKHAND_PIDFILE" 2>/dev/null)/comm" 2>/dev/null)" = deckhand ]; then
      restart_deckhand >/dev/null 2>&1 || true
    fi
  }
  trap cleanup EXIT

  sleep 10
  restart_ms=()
  for k in $(seq 1 "$KILLS"); do
    sleep "$((1 + RANDOM % 6)).$((RANDOM % 10))"
    pid=$(cat "$DECKHAND_PIDFILE")
    kill -KILL "$pid"
    while [ -e "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = deckhand ]; do sleep 0.05; done
    # the restart moves the log to deckhand.log.1: keep this life's part
    tail -c "+$((LOG_FROM + 1))" "$DECKHAND_LOG" >> "$OUT/deckhand.log"; LOG_FROM=0
    t0=$(date +%s%N)
    restart_deckhand > "$OUT/restart-$k.log" 2>&1 ||
      { report "restart $k failed: $(tail -n 5 "$OUT/restart-$k.log")"; exit 1; }
    restart_ms+=($(( ($(date +%s%N) - t0) / 1000000 )))
    log "kill $k/$KILLS: deckhand pid $pid killed, running again after ${restart_ms[-1]} ms"
  done
  touch "$STOP"
  wait "$churn_pid" || true
  t0=$(date +%s)
  kc wait node "$NODE_NAME" --for=condition=Ready --timeout=60s >/dev/null
  report "node Ready $(( $(date +%s) - t0 )) s after the last restart; restart-deckhand took $(printf '%s\n' "${restart_ms[@]}" | sort -n | awk '{a[NR]=$1} END {print "p50 " a[int((NR+1)/2)] " ms, max " a[NR] " ms"}')"
  report "pods created by the churn: $(cat "$OUT/created" 2>/dev/null || echo ?)"


  # every pod that is not being deleted runs (crash-looping ones: restarted at least once)
  deadline=$(( $(date +%s) + 90 ))
  while :; do
    pending=$(kc -n "$NS" get pods -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null)
      | select((.status.containerStatuses // []) | map(select(.state.running != null or .restartCount > 0)) | length == 0)
      | .metadata.name')
    [ -z "$pending" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || { problem "pods not started 90 s after the last kill: $(echo $pending)"; break; }
    sleep 2
  done

  # at most one ready sandbox and one running container per container name, per pod
  live_pods=$(kc -n "$NS" get pods -o jsonpath='{range .items[*]}{.metadata.uid} {.metadata.name}{"\n"}{end}')
  checked=0
  while read -r uid name; do
    [ -n "$uid" ] || continue
    checked=$((checked + 1))
    n=$(cri pods --label "io.kubernetes.pod.uid=$uid" --state ready -q | wc -l)
    [ "$n" -le 1 ] || problem "$name: $n ready sandboxes"
    dup=$(cri ps --label "io.kubernetes.pod.uid=$uid" --state running -o json |
      jq -r '.containers[].metadata.name' | sort | uniq -d)
    [ -z "$dup" ] || problem "$name: more than one running container named $dup"
  done <<< "$live_pods"
  report "sandbox and container copies checked for $checked live pods"

  # restart counts never went back (per pod UID and container)
  kill "$watch_pid" 2>/dev/null || true
  back=$(awk '{for (i = 2; i <= NF; i++) {split($i, kv, "="); key = $1 " " kv[1];
    if ((key in last) && kv[2] + 0 < last[key]) print key ": " last[key] " -> " kv[2]; last[key] = kv[2] + 0}}' \
    "$OUT/restart-counts.txt")
  report "restart counts recorded: $(wc -l < "$OUT/restart-counts.txt") watch events"
  [ -z "$back" ] || problem "restart counts went back: $back"

}

# the leftover checks, once the namespace is deleted
leftover_checks() {
  # delete everything, then look for what is left
  t0=$(date +%s)
  kc delete namespace "$NS" --timeout=240s >/dev/null || problem "namespace $NS not gone within 240 s"
  report "namespace deleted in $(( $(date +%s) - t0 )) s"
  sleep 5
  left_sb=$(cri pods --namespace "^$NS\$" -q | wc -l)
  left_ct=$(cri ps -a --label "io.kubernetes.pod.namespace=$NS" -q | wc -l)
  [ "$left_sb" = 0 ] || problem "$left_sb sandboxes of $NS left in containerd"
  [ "$left_ct" = 0 ] || problem "$left_ct containers of $NS left in containerd"

  live_uids=$(kc get pods -A -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' | sort -u)
  # host-local: each reserved address must belong to a ready sandbox
  live_ips=$(for id in $(cri pods --state ready -q); do cri inspectp "$id" | jq -r '.status.network.ip // empty'; done | sort -u)
  cni_name=$(jq -r .name "$CNI_CONF")
  reserved=$(ls /var/lib/cni/networks/"$cni_name" 2>/dev/null | grep -E '^[0-9]+\.' | sort -u || true)
  leaked_ips=$(comm -23 <(echo "$reserved") <(echo "$live_ips") | grep . || true)
  report "CNI addresses reserved: $(echo "$reserved" | grep -c . || true), live sandbox addresses: $(echo "$live_ips" | grep -c . || true)"
  [ -z "$leaked_ips" ] || problem "host-local addresses with no sandbox: $(echo $leaked_ips)"

  # pod directories, mounts and cgroups of pods that no longer exist
  stale() { comm -23 <(sort -u) <(echo "$live_uids"); }
  dirs=$(ls "$DECKHAND_ROOT_DIR/pods" 2>/dev/null | stale | grep . || true)
  mounts=$(awk '{print $5}' /proc/self/mountinfo | sed -n "s#^$DECKHAND_ROOT_DIR/pods/\([^/]*\)/.*#\1#p" | stale | grep . || true)
  cgroups=$(find /sys/fs/cgroup/memory/kubepods* /sys/fs/cgroup/unified/kubepods* /sys/fs/cgroup/kubepods* -maxdepth 3 -type d -name 'pod*' 2>/dev/null |
    sed 's#.*/pod##; s#\.slice$##; s#_#-#g' | stale | grep . || true)
  report "left for pods that no longer exist: $(echo "$dirs" | grep -c . || true) pod directories, $(echo "$mounts" | grep -c . || true) mounts, $(echo "$cgroups" | grep -c . || true) kubepods cgroups"
  [ -z "$dirs" ] || problem "pod directories left: $(echo $dirs)"
  [ -z "$mounts" ] || problem "mounts left for pods: $(echo $mounts)"
  [ -z "$cgroups" ] || problem "kubepods cgroups left: $(echo $cgroups)"

  tail -c "+$((LOG_FROM + 1))" "$DECKHAND_LOG" >> "$OUT/deckhand.log"
  panics=$(grep -c 'panicked' "$OUT/deckhand.log" || true)
  report "deckhand log of the run ($OUT/deckhand.log): $(wc -l < "$OUT/deckhand.log") lines, $panics panics"
  [ "$panics" = 0 ] || problem "deckhand panicked: $(grep -m3 panicked "$OUT/deckhand.log")"

}

# deckhand's RSS in MiB, and its CPU in millicores over the next $1 seconds
rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$(cat "$DECKHAND_PIDFILE")/status"; }
cpu_millicores() {
  local pid ticks0 ticks1 hz
  pid=$(cat "$DECKHAND_PIDFILE"); hz=$(getconf CLK_TCK)
  ticks0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  sleep "$1"
  ticks1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  echo $(( (ticks1 - ticks0) * 1000 * 1000 / hz / ($1 * 1000) ))
}
# p50, p99 and max of the numbers on stdin, in ms
percentiles() {
  sort -n | awk '{a[NR] = $1} END {if (NR == 0) {print "none"; exit}
    i50 = int(NR * 0.50 + 0.999); i99 = int(NR * 0.99 + 0.999);
    printf "p50 %d ms, p99 %d ms, max %d ms (%d pods)", a[i50], a[i99], a[NR], NR}'
}

# node-full mode: maxPods pods at once, figures, one more refused, all deleted
mode_node_full() {
  make_namespace
  local cap existing n t0 t_all deadline seen
  cap=$(kc get node "$NODE_NAME" -o jsonpath='{.status.capacity.pods}')
  existing=$(kc get pods -A --field-selector "spec.nodeName=$NODE_NAME" -o json |
    jq '[.items[] | select(.status.phase != "Succeeded" and .status.phase != "Failed")] | length')
  n=$((cap - existing))
  report "node-full: node $NODE_NAME takes $cap pods (maxPods), $existing already on it: $n created at once in $NS; results in $OUT"
  report "idle before: deckhand RSS $(rss_mib) MiB, CPU $(cpu_millicores 20) millicores over 20 s"
  # the first time the watch shows each pod Running, with the time it was seen (jq's clock)
  kc -n "$NS" get pods -w -o json 2>/dev/null |
    jq -r --unbuffered 'select(.status.phase == "Running") | "\(.metadata.name) \(now)"' > "$OUT/running.txt" &
  watch_pid=$!
  trap 'kill "$watch_pid" 2>/dev/null || true' EXIT
  sleep 1
  {
    echo '{"apiVersion":"v1","kind":"List","items":['
    for i in $(seq 1 "$n"); do
      [ "$i" = 1 ] || echo ','
      cat <<POD
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"f$i","labels":{"chaos":"node-full"}},
 "spec":{"terminationGracePeriodSeconds":5,"tolerations":[{"operator":"Exists"}],
  "containers":[{"name":"main","image":"busybox","command":["sh","-c","trap 'exit 0' TERM; sleep 3600 & wait"]}]}}
POD
    done
    echo ']}'
  } > "$OUT/pods.json"
  t0=$(date +%s.%N)
  kc -n "$NS" create -f "$OUT/pods.json" >/dev/null
  deadline=$(( $(date +%s) + 300 ))
  while :; do
    seen=$(awk '{print $1}' "$OUT/running.txt" | sort -u | wc -l)
    [ "$seen" -ge "$n" ] && break
    [ "$(date +%s)" -lt "$deadline" ] || { problem "only $seen of $n pods Running 300 s after they were created"; break; }
    sleep 1
  done
  t_all=$(date +%s.%N)
  report "create→Running (all created in one call at once, Running as first seen in a watch): $(
    awk -v t0="$t0" '!($1 in first) {first[$1] = $2} END {for (p in first) printf "%d\n", (first[p] - t0) * 1000}' \
      "$OUT/running.txt" | percentiles)"
  report "all $n Running after $(awk -v a="$t0" -v b="$t_all" 'BEGIN {printf "%.1f", b - a}') s; pods on the node: $(
    kc get pods -A --field-selector "spec.nodeName=$NODE_NAME,status.phase=Running" --no-headers | wc -l)"
  report "with $n pods running: deckhand RSS $(rss_mib) MiB, CPU $(cpu_millicores 30) millicores over 30 s"
  # one more does not fit
  kc -n "$NS" run one-more --image=busybox --restart=Never -- sleep 3600 >/dev/null
  local msg=""
  for _ in $(seq 1 20); do
    msg=$(kc -n "$NS" get pod one-more -o jsonpath='{.status.conditions[?(@.type=="PodScheduled")].message}')
    [ -n "$msg" ] && break
    sleep 1
  done
  report "pod $((n + 1)): $(kc -n "$NS" get pod one-more -o jsonpath='{.status.phase}'): $msg"
  case $msg in *"Too many pods"*) ;; *) problem "the pod beyond maxPods was not refused with Too many pods" ;; esac
  # a pod of the node-full set on this node: at most one ready sandbox and one running container
  local dups=0 uid
  for uid in $(kc -n "$NS" get pods -l chaos=node-full -o jsonpath='{.items[*].metadata.uid}'); do
    [ "$(cri pods --label "io.kubernetes.pod.uid=$uid" --state ready -q | wc -l)" -le 1 ] || dups=$((dups + 1))
    [ "$(cri ps --label "io.kubernetes.pod.uid=$uid" --state running -q | wc -l)" -le 1 ] || dups=$((dups + 1))
  done
  report "pods with a second sandbox or container: $dups"
  [ "$dups" = 0 ] || problem "$dups pods with a second ready sandbox or running container"
  kill "$watch_pid" 2>/dev/null || true
}

# milliseconds since $1 (date +%s%N)
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
# the steady pods' container IDs and restart counts, one line each
steady_state() {
  kc -n "$NS" get pods -l chaos=plain -o json |
    jq -r '.items[] | "\(.metadata.name) \(.status.containerStatuses[0].containerID) \(.status.containerStatuses[0].restartCount)"' | sort
}
watch_restarts() {  # FILE: restart counts per watch event (the watch ends with the API server)
  kc -n "$NS" get pods -w -o json 2>/dev/null |
    jq -r --unbuffered '.metadata.uid + ([.status.containerStatuses[]? | " \(.name)=\(.restartCount)"] | join(""))' >> "$1" &
  watch_pid=$!
}

# the sum over the crash-looping pods of their newest container's attempt number in containerd
crash_attempts() {
  cri ps -a --label "io.kubernetes.pod.namespace=$NS" -o json |
    jq '[.containers[] | select(.labels["io.kubernetes.pod.name"] | test("^o(17|18|19|20)$"))]
        | group_by(.labels["io.kubernetes.pod.name"]) | map(map(.metadata.attempt) | max) | add // 0'
}

# outage mode: API server + etcd, then containerd (SIGTERM, SIGKILL), with recovery figures
mode_outage() {
  make_namespace
  local i kind pid0 before after t_back t ms lease_ms status_ms exit_ms
  # the exiters exit about halfway through the API server outage
  EXIT_AFTER=$((SECONDS_OUT / 2 + 25))
  for i in $(seq 1 22); do
    kind=plain; [ "$i" -gt 16 ] && kind=crash; [ "$i" -gt 20 ] && kind=exiter
    pod_json "o$i" "$kind" | kc -n "$NS" create -f - >/dev/null
  done
  kc -n "$NS" wait pod -l 'chaos in (plain,exiter)' --for=condition=Ready --timeout=120s >/dev/null ||
    problem "the steady pods did not all become Ready"
  report "outage: namespace $NS: 16 steady pods, 4 crash-looping, 2 exiting (code 3) during the API server outage; results in $OUT"
  pid0=$(cat "$DECKHAND_PIDFILE")
  before=$(steady_state)
  watch_restarts "$OUT/restart-counts.txt"
  trap 'kill "$watch_pid" 2>/dev/null || true' EXIT
  sleep 3

  # (1) the API server and etcd
  local crash_attempts0 crash_attempts1
  crash_attempts0=$(crash_attempts)
  "$ROOT/hack/local-up.sh" stop-apiserver --etcd >/dev/null
  log "API server and etcd stopped for $SECONDS_OUT s"
  sleep "$SECONDS_OUT"
  crash_attempts1=$(crash_attempts)
  [ "$(cat "/proc/$pid0/comm" 2>/dev/null)" = deckhand ] || problem "deckhand exited during the API server outage"
  "$ROOT/hack/local-up.sh" start-apiserver >/dev/null
  t_back=$(date +%s%N)
  local back_iso; back_iso=$(date -u -d "@$((t_back / 1000000000))" +%Y-%m-%dT%H:%M:%SZ)
  lease_ms=""; status_ms=""; exit_ms=""
  while [ -z "$lease_ms" ] || [ -z "$status_ms" ] || [ -z "$exit_ms" ]; do
    t=$(ms_since "$t_back")
    [ "$t" -lt 120000 ] || { problem "not recovered 120 s after the API server returned (lease ${lease_ms:-no}, status ${status_ms:-no}, exits ${exit_ms:-no})"; break; }
    if [ -z "$lease_ms" ]; then
      [[ "$(kc -n kube-node-lease get lease "$NODE_NAME" -o jsonpath='{.spec.renewTime}' 2>/dev/null)" > "$back_iso" ]] && lease_ms=$t
    fi
    if [ -z "$status_ms" ]; then
      [ "$(kc get node "$NODE_NAME" -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status} {.lastHeartbeatTime}{end}' 2>/dev/null |
        awk -v b="$back_iso" '{print ($1 == "True" && $2 >= b) ? "yes" : "no"}')" = yes ] && status_ms=$t
    fi
    if [ -z "$exit_ms" ]; then
      [ "$(kc -n "$NS" get pods -l chaos=exiter -o json 2>/dev/null |
        jq '[.items[] | select(.status.containerStatuses[0].state.terminated.exitCode == 3)] | length')" = 2 ] && exit_ms=$t
    fi
    sleep 0.2
  done
  watch_restarts "$OUT/restart-counts.txt"
  report "API server + etcd down $SECONDS_OUT s: crash-looping containers started meanwhile: $((crash_attempts1 - crash_attempts0)); after start-apiserver returned: Lease renewed in ${lease_ms:-?} ms, node status posted (Ready) in ${status_ms:-?} ms, both exits (code 3) reported in ${exit_ms:-?} ms"
  [ "$((crash_attempts1 - crash_attempts0))" -gt 0 ] || problem "no crash-looping container was restarted during the API server outage"

  # (2), (3) containerd, with SIGTERM then SIGKILL; a pod created meanwhile
  local how name
  for how in "" --kill; do
    name="new${how:+-kill}"
    "$ROOT/hack/local-up.sh" stop-containerd $how >/dev/null
    sleep 2
    pod_json "$name" late | kc -n "$NS" create -f - >/dev/null
    sleep 8
    [ "$(cat "/proc/$pid0/comm" 2>/dev/null)" = deckhand ] || problem "deckhand exited during the containerd outage"
    "$ROOT/hack/local-up.sh" start-containerd >/dev/null
    t_back=$(date +%s%N)
    ms=""
    while [ -z "$ms" ]; do
      t=$(ms_since "$t_back")
      [ "$t" -lt 60000 ] || { problem "$name not Running 60 s after containerd returned"; break; }
      [ "$(kc -n "$NS" get pod "$name" -o jsonpath='{.status.phase}')" = Running ] && ms=$t
      sleep 0.1
    done
    report "containerd stopped ${how:-(SIGTERM)} for 10 s: pod created during the outage Running ${ms:-?} ms after start-containerd returned"
  done
  sleep 5
  after=$(steady_state)
  [ "$before" = "$after" ] || problem "steady pods restarted or replaced: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -6 | tr '\n' ' ')"
  report "steady pods with the same container and restart count 0 throughout: $(echo "$after" | awk '$3 == 0' | wc -l) of 16"
  kill "$watch_pid" 2>/dev/null || true
  local back
  back=$(awk '{for (i = 2; i <= NF; i++) {split($i, kv, "="); key = $1 " " kv[1];
    if ((key in last) && kv[2] + 0 < last[key]) print key ": " last[key] " -> " kv[2]; last[key] = kv[2] + 0}}' \
    "$OUT/restart-counts.txt")
  [ -z "$back" ] || problem "restart counts went back: $back"
  local phases
  phases=$(kc -n "$NS" get pods -o json | jq -r '.items[] | "\(.metadata.labels.chaos) \(.status.phase)"' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  report "phases now:$phases"
  [ "$(cat "/proc/$pid0/comm" 2>/dev/null)" = deckhand ] && [ "$(cat "$DECKHAND_PIDFILE")" = "$pid0" ] ||
    problem "deckhand is not the process it was before the outages"
  # one clear line per failure and per recovery, not one per retry
  local noisy
  noisy=$(tail -c "+$((LOG_FROM + 1))" "$DECKHAND_LOG" | grep -cE '^\S+ +(WARN|ERROR) ' || true)
  report "deckhand WARN/ERROR lines during the three outages: $noisy"
  [ "$noisy" -le 60 ] || problem "$noisy WARN/ERROR lines in deckhand's log for three outages: a flood"
}

case $MODE in
  kill) mode_kill ;;
  outage) mode_outage ;;
  node-full) mode_node_full ;;
esac
leftover_checks
[ "$MODE" != node-full ] ||
  report "after the deletion: deckhand RSS $(rss_mib) MiB, CPU $(cpu_millicores 20) millicores over 20 s"

if [ "$problems" = 0 ]; then
  report "chaos ($MODE): nothing lost, duplicated or leaked"
else
  report "chaos ($MODE): $problems problems"
  exit 1
fi
