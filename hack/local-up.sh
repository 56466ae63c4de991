#!/usr/bin/env bash
# Local one-node cluster for deckhand: etcd, kube-apiserver, kube-controller-manager (built from the
# Kubernetes Go modules by hack/build-k8s.sh), containerd with its own config, a local registry with
# images built here (and a second, password-protected one), deckhand itself as the node's kubelet,
# deckhand-scheduler as the scheduler (no kube-scheduler), and kube-proxy (iptables mode) as the
# kube-system/kube-proxy DaemonSet that kubeadm would create, running on deckhand's node from an
# image built here.
#
# Usage:
#   hack/local-up.sh [up]              bring everything up (idempotent: healthy parts are kept,
#                                      parts whose command line changed are restarted)
#   hack/local-up.sh down [--purge]    stop everything and clean the host; --purge also wipes the
#                                      etcd data, the registry data and /var/lib/deckhand
#   hack/local-up.sh status            show what runs; exit 0 when the cluster (everything but
#                                      deckhand, which is reported but not counted) is up
#   hack/local-up.sh restart-deckhand  rebuild deckhand if needed, stop it, start it again (and
#                                      restart deckhand-scheduler if its binary was rebuilt)
#   hack/local-up.sh restart-scheduler rebuild deckhand-scheduler if needed, stop it, start it again
#   hack/local-up.sh stop-apiserver    stop kube-apiserver only (an API server outage, for tests)
#   hack/local-up.sh start-apiserver   start it again and wait until it is ready
#
# Environment:
#   NODE_NAME              node name (default: lowercased `hostname`)
#   DECKHAND_BIN           use this deckhand binary instead of `cargo build --release --bin deckhand`
#   DECKHAND_WAIT_NODE     0 = don't wait for the Node to become Ready (default 1)
#   DECKHAND_WAIT_TIMEOUT  seconds to wait for Node Ready (default 60)
#   DECKHAND_ARGS          extra arguments appended to deckhand's command line
#   DECKHAND_ROOT_SIZE     size of the tmpfs mounted on deckhand's root dir (default 1g)
#   DECKHAND_JOIN          1 (default): deckhand joins the kubeadm way, through a bootstrap token,
#                          with the files vagrant/provision.sh writes into _output/local-up/join/
#                          (bootstrap-kubelet.conf, config.yaml, kubeadm-flags.env, the drop-in)
#                          and the command line systemd would run from them; 0: a static node
#                          kubeconfig
#   SCHEDULER_BIN          use this deckhand-scheduler binary instead of cargo's
#   SCHEDULER_ARGS         extra arguments appended to deckhand-scheduler's command line
#   RUST_LOG               deckhand's log filter (default info)
#   LOCAL_UP_STOP_FOREIGN_CONTAINERD=1  stop a containerd that this script did not start
#   LOCAL_UP_TAKE_OVER=1   stop a cluster that another checkout of the repository runs (with its
#                          own `down`) instead of refusing; a stale owner (daemons gone) is always
#                          taken over
#
# State lives in _output/local-up/ (pki/, logs/<name>.log, pids/<name>.pid, the kubeconfigs, and
# `env`, a sourceable KEY=value file with KUBECONFIG, KUBECTL, NODE_NAME, NODE_IP, CRI_ENDPOINT,
# DECKHAND_LOG, DECKHAND_PIDFILE, REGISTRY_AUTH, REGISTRY_AUTH_CREDS_FILE, ...).
#
# Registries: 127.0.0.1:5000 (open; the mirror every common registry name resolves to) and
# 127.0.0.1:5001 (htpasswd basic auth, own storage, holds private/busybox:latest; user and password
# in _output/local-up/registry-auth/creds as user:password, mode 600).
#
# kube-proxy: as kubeadm deploys it (ServiceAccount kube-system/kube-proxy, ClusterRoleBinding
# kubeadm:node-proxier to system:node-proxier, ConfigMap kube-system/kube-proxy with config.conf and
# kubeconfig.conf, DaemonSet kube-system/kube-proxy: hostNetwork, privileged, hostPath /lib/modules
# and /run/xtables.lock, tolerate everything, priorityClassName system-node-critical), with kind's
# conntrack settings (no host conntrack sysctls are changed) and its NodePorts and health/metrics
# servers only on the node IP and loopback. Image registry.k8s.io/kube-proxy:<version> (mirrored)
# from hack/images. clusterCIDR 10.244.0.0/16, Services in 10.96.0.0/16 (10.96.0.1 is `kubernetes`).
# `down` removes every KUBE-* iptables chain it leaves.#
# Network (all removed by `down`): interface deckhand0 with 10.250.0.1/32, the node IP where the
# API server listens (a dummy device, or an ifb device where the kernel has no dummy driver); a
# blackhole route for the Service CIDR 10.96.0.0/16 (pods reach Services through kube-proxy's DNAT,
# which happens before routing; the host itself cannot use ClusterIPs); the CNI bridge dh-cni0 with
# pods in 10.244.0.0/24 (portmap plugin for hostPort); iptables guard chains (DECKHAND-GUARD*, kept
# as the first rule of INPUT, FORWARD and OUTPUT, ahead of kube-proxy's) so that pods never reach
# the machine's real network and the real network never reaches pods (hostPorts included). Every server binds 127.0.0.1 or 10.250.0.1. Image names of docker.io,
# registry.k8s.io and other common registries resolve only to the local registry 127.0.0.1:5000.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/hack/versions.env"

STATE="$ROOT/_output/local-up"
BIN="$ROOT/_output/bin"
PKI="$STATE/pki"
LOGS="$STATE/logs"
# which checkout runs the machine's one local cluster (written by up, removed by down)
OWNER_FILE=/run/deckhand-local-up.owner
PIDS="$STATE/pids"
# the Kubernetes objects local-up applies (see render_manifest)
MANIFESTS="$ROOT/hack/manifests"

NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
NODE_IP=10.250.0.1
DUMMY_IF=deckhand0
SERVICE_CIDR=10.96.0.0/16
POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
CLUSTER_CIDR=10.244.0.0/16
CNI_BRIDGE=dh-cni0
CNI_NAME=deckhand
CNI_CONF_DIR=/etc/cni/net.d
CNI_CONF="$CNI_CONF_DIR/10-deckhand.conflist"
CNI_BIN_DIR=/usr/lib/cni
CRI_SOCK=/run/containerd/containerd.sock
CRI_ENDPOINT="unix://$CRI_SOCK"
CONTAINERD_ROOT=/var/lib/containerd
CONTAINERD_STATE=/run/containerd
CONTAINERD_CONFIG="$STATE/containerd/config.toml"
CERTS_D=/etc/containerd/certs.d
REGISTRY=127.0.0.1:5000
REGISTRY_AUTH=127.0.0.1:5001
REGISTRY_AUTH_DIR="$STATE/registry-auth"
REGISTRY_AUTH_CREDS_FILE="$REGISTRY_AUTH_DIR/creds"
REGISTRY_AUTH_USER=deckhand
KUBE_PROXY_IMAGE=registry.k8s.io/kube-proxy:$KUBE_VERSION
SANDBOX_IMAGE=registry.k8s.io/pause:3.10
API_PORT=6443
API_SERVER="https://$NODE_IP:$API_PORT"
KUBECTL="$BIN/kubectl"
CRICTL="$BIN/crictl"
CRICTL_CONFIG=/etc/crictl.yaml
ADMIN_KUBECONFIG="$STATE/admin.kubeconfig"
KCM_KUBECONFIG="$STATE/controller-manager.kubeconfig"
DECKHAND_KUBECONFIG="$STATE/deckhand.kubeconfig"
DECKHAND_ROOT_DIR=/var/lib/deckhand
DECKHAND_ROOT_SIZE=${DECKHAND_ROOT_SIZE:-1g}
# deckhand's KubeletConfiguration file (--config): clusterDNS/clusterDomain as kubeadm configures
# them, and the static pod directory (staticPodPath, relative to the file: the Go kubelet's path
# resolution)
DECKHAND_CONFIG="$STATE/kubelet-config.yaml"
STATIC_POD_DIR="$STATE/manifests"
# deckhand joins as `kubeadm join` makes a kubelet join (see ensure_join_files); 0: a static
# node kubeconfig signed here
DECKHAND_JOIN=${DECKHAND_JOIN:-1}
JOIN_DIR="$STATE/join"
JOIN_KUBECONFIG="$JOIN_DIR/etc/kubernetes/kubelet.conf"
# joined the kubeadm way, the static pod directory is the one kubeadm's config.yaml names
[ "$DECKHAND_JOIN" != 1 ] || STATIC_POD_DIR="$JOIN_DIR/etc/kubernetes/manifests"
DECKHAND_LOG="$LOGS/deckhand.log"
DECKHAND_PIDFILE="$PIDS/deckhand.pid"
SCHEDULER_KUBECONFIG="$STATE/scheduler.kubeconfig"
SCHEDULER_LOG="$LOGS/deckhand-scheduler.log"
SCHEDULER_PIDFILE="$PIDS/deckhand-scheduler.pid"
DECKHAND_WAIT_NODE=${DECKHAND_WAIT_NODE:-1}
DECKHAND_WAIT_TIMEOUT=${DECKHAND_WAIT_TIMEOUT:-60}
MARKER="written by deckhand hack/local-up.sh"
# iptables chains of ours
GUARD_FWD=DECKHAND-GUARD
GUARD_OUT=DECKHAND-GUARD-OUT
GUARD_IN=DECKHAND-GUARD-IN
# registries whose names are redirected to the local registry. containerd 1.6 has no catch-all
# `_default` hosts directory (1.7 added it), so each name a test might use is listed; any other
# registry name would make containerd try the outside network: use only these in tests.
MIRRORED_REGISTRIES=(docker.io registry-1.docker.io index.docker.io registry.k8s.io k8s.gcr.io gcr.io
                     quay.io ghcr.io mcr.microsoft.com public.ecr.aws registry.gitlab.com)

T0=$SECONDS
log() { printf '[local-up %3ss] %s\n' "$((SECONDS - T0))" "$*"; }
warn() { printf '[local-up %3ss] WARNING: %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[local-up %3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }
# die with the tail of a component's log
die_log() {
  local name=$1; shift
  printf '[local-up %3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2
  if [ -f "$LOGS/$name.log" ]; then
    echo "----- last 40 lines of $LOGS/$name.log -----" >&2
    tail -n 40 "$LOGS/$name.log" >&2
    echo "-----" >&2
  fi
  exit 1
}

ipt() { iptables -w 5 "$@"; }

# ---------------------------------------------------------------------------------------------
# process management. pids/NAME.pid holds the pid, pids/NAME.start the process's start time (field
# 22 of /proc/PID/stat, so a reused pid is never mistaken for ours) and pids/NAME.cmd the argv it
# was started with (NUL-separated), so a changed command line is detected and restarted.
# ---------------------------------------------------------------------------------------------
proc_starttime() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

proc_alive() {
  local st
  [ -r "/proc/$1/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# pid of a running component we started, or nothing
pid_of() {
  local name=$1 pid
  [ -f "$PIDS/$name.pid" ] || return 0
  pid=$(cat "$PIDS/$name.pid" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  proc_alive "$pid" || return 0
  [ "$(proc_starttime "$pid")" = "$(cat "$PIDS/$name.start" 2>/dev/null)" ] || return 0
  echo "$pid"
}

# The checkout that runs the machine's one local cluster, if its cluster is alive: the owner file
# names it, and at least one of the daemons in its pids/ directory still runs (same pid, same start
# time). A session's processes end without `down` (the machine outlives them: /run is kept, the
# daemons are gone), so a stale owner file must not block the next checkout, e.g. CI's fresh clone.
live_foreign_owner() {
  local owner pidf pid
  owner=$(cat "$OWNER_FILE" 2>/dev/null || true)
  [ -n "$owner" ] && [ "$owner" != "$ROOT" ] && [ -d "$owner" ] || return 0
  for pidf in "$owner"/_output/local-up/pids/*.pid; do
    [ -f "$pidf" ] || continue
    pid=$(cat "$pidf" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] && proc_alive "$pid" || continue
    [ "$(proc_starttime "$pid")" = "$(cat "${pidf%.pid}.start" 2>/dev/null)" ] || continue
    echo "$owner"; return 0
  done
}

# up/down from another checkout: refuse while that checkout's cluster runs (LOCAL_UP_TAKE_OVER=1
# stops it with its own `down` first); a stale owner file (its daemons are gone) is taken over.
check_owner() {
  local owner stale
  owner=$(live_foreign_owner)
  if [ -n "$owner" ]; then
    if [ "${LOCAL_UP_TAKE_OVER:-0}" = 1 ]; then
      log "the local cluster is run from $owner: stopping it with its own down (LOCAL_UP_TAKE_OVER=1)"
      "$owner/hack/local-up.sh" down || die "$owner/hack/local-up.sh down failed"
    else
      die "the local cluster is run from $owner: run $owner/hack/local-up.sh down first (or set LOCAL_UP_TAKE_OVER=1)"
    fi
  fi
  stale=$(cat "$OWNER_FILE" 2>/dev/null || true)
  if [ -n "$stale" ] && [ "$stale" != "$ROOT" ]; then
    log "taking over from $stale: its local cluster no longer runs (stale $OWNER_FILE)"
    rm -f "$OWNER_FILE"
  fi
}

# is it running, started with exactly this argv?
running_as() {
  local name=$1; shift
  [ -n "$(pid_of "$name")" ] || return 1
  cmp -s "$PIDS/$name.cmd" <(printf '%s\0' "$@")
}

# start_daemon NAME [VAR=value ...] -- argv...   (detached: setsid, stdin /dev/null, log to logs/NAME.log)
start_daemon() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$LOGS" "$PIDS"
  [ -f "$LOGS/$name.log" ] && mv -f "$LOGS/$name.log" "$LOGS/$name.log.1"
  printf '%s\0' "$@" > "$PIDS/$name.cmd"
  (
    cd "$STATE"
    exec 8>&-   # the harness lock (see take_lock) must not live on in the daemon
    # nor may any other descriptor of the caller, e.g. the machine-wide cluster lock
    # (/tmp/deckhand-cluster.lock, conventionally fd 9): a daemon would hold it for its lifetime
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      { [ "$fd" -gt 2 ] && eval "exec $fd>&-"; } 2>/dev/null || true
    done
    exec env ${envs[@]+"${envs[@]}"} setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  ) &
  local pid=$!
  echo "$pid" > "$PIDS/$name.pid"
  proc_starttime "$pid" > "$PIDS/$name.start" || true
}

# stop_daemon NAME [TIMEOUT_SECONDS]: SIGTERM, wait, SIGKILL
stop_daemon() {
  local name=$1 timeout=${2:-} pid i
  # kube-apiserver can linger for a minute closing watch connections after it stopped listening
  [ -n "$timeout" ] || case $name in kube-apiserver) timeout=10 ;; *) timeout=20 ;; esac
  pid=$(pid_of "$name")
  if [ -n "$pid" ]; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $((timeout * 10))); do
      proc_alive "$pid" || break
      sleep 0.1
    done
    if proc_alive "$pid"; then
      log "$name did not exit within ${timeout}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do proc_alive "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.start" "$PIDS/$name.cmd"
}

# wait_for NAME TIMEOUT CHECK_FUNCTION: poll until healthy; die with the log tail otherwise
wait_for() {
  local name=$1 timeout=$2 check=$3 i pid
  for i in $(seq 1 $((timeout * 5))); do
    if "$check"; then return 0; fi
    pid=$(pid_of "$name")
    [ -n "$pid" ] && proc_alive "$pid" || die_log "$name" "$name exited during startup"
    sleep 0.2
  done
  die_log "$name" "$name did not become healthy within ${timeout}s"
}

# who listens on a TCP port (for clear errors)
port_owner() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:(\(.*\))$/\1/p' | head -1; }

ensure_port_free() {
  local name=$1 port=$2 owner
  owner=$(port_owner "$port")
  [ -z "$owner" ] || die "port $port (for $name) is already in use by: $owner; stop that process first"
}

# ---------------------------------------------------------------------------------------------
# health checks
# ---------------------------------------------------------------------------------------------
etcd_healthy() { curl -sf --max-time 2 http://127.0.0.1:2379/health 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ready() {
  [ "$(curl -s --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$API_SERVER/readyz" 2>/dev/null)" = ok ]
}
kcm_healthy() { [ "$(curl -sk --max-time 3 https://127.0.0.1:10257/healthz 2>/dev/null)" = ok ]; }
registry_healthy() { curl -sf --max-time 2 "http://$REGISTRY/v2/" >/dev/null 2>&1; }
# the password-protected registry answers, and asks for credentials
registry_auth_healthy() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$REGISTRY_AUTH/v2/" 2>/dev/null)" = 401 ]
}
containerd_answers() { [ -S "$CRI_SOCK" ] && timeout 5 ctr --address "$CRI_SOCK" --timeout 2s version >/dev/null 2>&1; }
cri_plugin_ok() {
  ctr --address "$CRI_SOCK" --timeout 2s plugins ls 2>/dev/null |
    awk '$1=="io.containerd.grpc.v1" && $2=="cri" {print $NF}' | grep -qx ok
}
containerd_healthy() { containerd_answers && cri_plugin_ok; }

# ---------------------------------------------------------------------------------------------
# 1. dependencies and binaries
# ---------------------------------------------------------------------------------------------
step_deps() {
  log "checking host packages (hack/install-deps.sh)"
  "$ROOT/hack/install-deps.sh"
  log "control-plane binaries $KUBE_VERSION (hack/build-k8s.sh)"
  mkdir -p "$ROOT/_output"
  # one build at a time (a concurrent second run would fight over the module and build caches)
  (
    flock -w 3600 9 || die "timed out waiting for another hack/build-k8s.sh"
    "$ROOT/hack/build-k8s.sh"
  ) 9>"$ROOT/_output/.build-k8s.lock" || die "hack/build-k8s.sh failed"
  # crictl is optional (debugging, and a CRI cleanup path for `down`)
  "$ROOT/hack/build-crictl.sh" || warn "crictl could not be built; continuing without it"
  local b
  for b in etcd kube-apiserver kube-controller-manager kubectl kube-proxy; do
    [ -x "$BIN/$b" ] || die "$BIN/$b is missing after hack/build-k8s.sh"
  done
}

# ---------------------------------------------------------------------------------------------
# 2. network
# ---------------------------------------------------------------------------------------------
real_iface() { ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}'; }

ensure_chain() { ipt -t "$1" -N "$2" 2>/dev/null || ipt -t "$1" -F "$2"; }
ensure_jump() {  # TABLE HOOK CHAIN: make sure HOOK's first rule (and only that one) jumps to CHAIN
  local first
  first=$(ipt -t "$1" -S "$2" 2>/dev/null | sed -n '2p')
  [ "$first" = "-A $2 -j $3" ] && [ "$(ipt -t "$1" -S "$2" | grep -cx -- "-A $2 -j $3")" = 1 ] && return 0
  while ipt -t "$1" -D "$2" -j "$3" 2>/dev/null; do :; done
  ipt -t "$1" -I "$2" 1 -j "$3"
}

# the guard jumps go first in INPUT, FORWARD and OUTPUT, ahead of what kube-proxy and CNI insert
# (kube-proxy only checks that its own jumps exist, so it does not push ours down again)
ensure_guard_first() {
  ensure_jump filter FORWARD "$GUARD_FWD"
  ensure_jump filter OUTPUT "$GUARD_OUT"
  ensure_jump filter INPUT "$GUARD_IN"
}

step_network() {
  log "network: $DUMMY_IF $NODE_IP/32, blackhole $SERVICE_CIDR, guard chains"
  mkdir -p "$STATE"
  if ! ip link show "$DUMMY_IF" >/dev/null 2>&1; then
    # this kernel may lack the dummy driver (no modules); an ifb device behaves the same for a
    # local address (nothing is ever transmitted on it: local traffic goes through lo)
    ip link add "$DUMMY_IF" type dummy 2>/dev/null || ip link add "$DUMMY_IF" type ifb ||
      die "cannot create $DUMMY_IF (neither the dummy nor the ifb link type is available)"
  fi
  sysctl -qw "net.ipv6.conf.$DUMMY_IF.disable_ipv6=1" 2>/dev/null || true
  ip addr replace "$NODE_IP/32" dev "$DUMMY_IF"
  ip link set "$DUMMY_IF" up
  ip route replace blackhole "$SERVICE_CIDR"

  # remember ip_forward as it was before the first `up`; `down` restores it
  [ -s "$STATE/ip_forward.orig" ] || sysctl -n net.ipv4.ip_forward > "$STATE/ip_forward.orig"
  sysctl -qw net.ipv4.ip_forward=1

  local rif; rif=$(real_iface)
  # FORWARD: pods may talk to each other (dh-cni0), to the node IP (deckhand0) and loopback;
  # nothing from the pod network may leave through the machine's real interface, nothing from the
  # real interface may reach a pod (hostPort DNAT included), and nothing may go to the Service
  # CIDR untranslated (kube-proxy DNATs Service traffic in PREROUTING, before this chain sees it).
  ensure_chain filter "$GUARD_FWD"
  ipt -A "$GUARD_FWD" -d "$SERVICE_CIDR" -m comment --comment "deckhand: no untranslated Service traffic" -j REJECT --reject-with icmp-net-unreachable
  if [ -n "$rif" ] && [ "$rif" != "$CNI_BRIDGE" ] && [ "$rif" != "$DUMMY_IF" ]; then
    ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -o "$rif" -m comment --comment "deckhand: pods never reach the real network" -j REJECT --reject-with icmp-net-unreachable
    ipt -A "$GUARD_FWD" -i "$rif" -d "$CLUSTER_CIDR" -m comment --comment "deckhand: the real network never reaches pods" -j REJECT --reject-with icmp-net-unreachable
  fi
  ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -o "$CNI_BRIDGE" -j RETURN
  ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -o "$DUMMY_IF" -j RETURN
  ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -o lo -j RETURN
  ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -m comment --comment "deckhand: pods only reach local addresses" -j REJECT --reject-with icmp-net-unreachable
  ensure_jump filter FORWARD "$GUARD_FWD"

  # OUTPUT: the host itself never sends to the Service CIDR either (besides the blackhole route)
  ensure_chain filter "$GUARD_OUT"
  ipt -A "$GUARD_OUT" -d "$SERVICE_CIDR" -m comment --comment "deckhand: no untranslated Service traffic" -j REJECT --reject-with icmp-net-unreachable
  ensure_jump filter OUTPUT "$GUARD_OUT"

  # INPUT: from pods, the host accepts only traffic to the node IP and the pod network's gateway
  ensure_chain filter "$GUARD_IN"
  ipt -A "$GUARD_IN" -s "$CLUSTER_CIDR" -d "$NODE_IP" -j RETURN
  ipt -A "$GUARD_IN" -s "$CLUSTER_CIDR" -d "$CLUSTER_CIDR" -j RETURN
  ipt -A "$GUARD_IN" -s "$CLUSTER_CIDR" -m addrtype --dst-type BROADCAST,MULTICAST -j RETURN
  ipt -A "$GUARD_IN" -s "$CLUSTER_CIDR" -m comment --comment "deckhand: pods reach only the node IP" -j REJECT --reject-with icmp-host-prohibited
  ensure_jump filter INPUT "$GUARD_IN"
}

# ---------------------------------------------------------------------------------------------
# 3. PKI (openssl; generated once, reused; a cert is re-issued if invalid, expiring or renamed)
# ---------------------------------------------------------------------------------------------
gen_ca() {  # NAME CN
  local name=$1 cn=$2
  if [ -s "$PKI/$name.key" ] && [ -s "$PKI/$name.crt" ] &&
     openssl x509 -in "$PKI/$name.crt" -noout -checkend 2592000 >/dev/null 2>&1; then
    return 0
  fi
  log "pki: new CA $name ($cn)"
  # a new CA invalidates every certificate it signed before
  local f
  for f in "$PKI"/*.crt; do
    [ -e "$f" ] && [ "$(cat "${f%.crt}.ca" 2>/dev/null)" = "$name" ] && rm -f "$f"
  done
  printf '%s\n' "[req]" "distinguished_name = dn" "prompt = no" "[dn]" "CN = $cn" "[v3_ca]" \
    "basicConstraints = critical, CA:TRUE" "keyUsage = critical, keyCertSign, cRLSign, digitalSignature" \
    "subjectKeyIdentifier = hash" "authorityKeyIdentifier = keyid:always" > "$PKI/$name.cnf"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  chmod 600 "$PKI/$name.key"
  openssl req -x509 -new -key "$PKI/$name.key" -sha256 -days 3650 -config "$PKI/$name.cnf" -extensions v3_ca \
    -out "$PKI/$name.crt" 2>/dev/null
}

# gen_cert NAME SUBJECT EKU [SANS]   (signed by the CA named in $SIGNER, default "ca")
gen_cert() {
  local name=$1 subj=$2 eku=$3 sans=${4:-} ca=${SIGNER:-ca}
  local crt="$PKI/$name.crt" key="$PKI/$name.key"
  if [ -s "$crt" ] && [ -s "$key" ] &&
     openssl verify -CAfile "$PKI/$ca.crt" "$crt" >/dev/null 2>&1 &&
     openssl x509 -in "$crt" -noout -checkend 2592000 >/dev/null 2>&1 &&
     [ "$(openssl x509 -in "$crt" -noout -subject -nameopt compat 2>/dev/null)" = "subject=$subj" ] &&
     [ "$(openssl x509 -in "$crt" -noout -pubkey | sha256sum)" = "$(openssl pkey -in "$key" -pubout | sha256sum)" ]; then
    return 0
  fi
  log "pki: issuing $name ($subj)"
  {
    echo "basicConstraints = critical, CA:FALSE"
    echo "keyUsage = critical, digitalSignature, keyEncipherment"
    echo "extendedKeyUsage = $eku"
    echo "subjectKeyIdentifier = hash"
    echo "authorityKeyIdentifier = keyid"
    [ -z "$sans" ] || echo "subjectAltName = $sans"
  } > "$PKI/$name.ext"
  openssl genrsa -out "$key" 2048 2>/dev/null
  openssl req -new -key "$key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$crt" 2>/dev/null
  rm -f "$PKI/$name.csr"
  echo "$ca" > "$PKI/$name.ca"
  chmod 600 "$key"
}

step_pki() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  gen_ca ca deckhand-local-ca
  gen_ca front-proxy-ca deckhand-local-front-proxy-ca
  gen_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$NODE_IP, IP:127.0.0.1, IP:10.96.0.1, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local, DNS:localhost"
  gen_cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  gen_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  # deckhand-scheduler: the built-in system:kube-scheduler RBAC (bindings, pods/status, events,
  # the kube-system/kube-scheduler Lease) applies to this user name
  gen_cert scheduler "/CN=system:kube-scheduler" clientAuth
  gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  gen_cert node "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  # serving certificate for deckhand's own HTTPS server (port 10250), signed by the cluster CA
  gen_cert node-serving "/O=system:nodes/CN=system:node:$NODE_NAME" serverAuth \
    "IP:$NODE_IP, IP:127.0.0.1, DNS:$NODE_NAME, DNS:localhost"
  # aggregation layer (kube-controller-manager and other delegated authenticators read this CA)
  SIGNER=front-proxy-ca gen_cert front-proxy-client "/CN=front-proxy-client" clientAuth
  if [ ! -s "$PKI/sa.key" ] || [ ! -s "$PKI/sa.pub" ]; then
    log "pki: service-account key pair"
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    chmod 600 "$PKI/sa.key"
  fi
  log "pki: ok ($PKI)"
}

# ---------------------------------------------------------------------------------------------
# 4. kubeconfigs (certificates embedded, so they work from any directory)
# ---------------------------------------------------------------------------------------------
write_kubeconfig() {  # FILE USER CERT_NAME
  local file=$1 user=$2 cert=$3
  local tmp="$file.tmp.$$"
  cat > "$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: deckhand-local
  cluster:
    server: $API_SERVER
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 < "$PKI/$cert.key")
contexts:
- name: $user@deckhand-local
  context:
    cluster: deckhand-local
    user: $user
current-context: $user@deckhand-local
preferences: {}
EOF
  chmod 600 "$tmp"
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv -f "$tmp" "$file"; fi
}

step_kubeconfigs() {
  write_kubeconfig "$ADMIN_KUBECONFIG" kubernetes-admin admin
  write_kubeconfig "$KCM_KUBECONFIG" system:kube-controller-manager controller-manager
  write_kubeconfig "$SCHEDULER_KUBECONFIG" system:kube-scheduler scheduler
  write_kubeconfig "$DECKHAND_KUBECONFIG" "system:node:$NODE_NAME" node
  log "kubeconfigs: $ADMIN_KUBECONFIG, $(basename "$KCM_KUBECONFIG"), $(basename "$DECKHAND_KUBECONFIG"), $(basename "$SCHEDULER_KUBECONFIG")"
}

# ---------------------------------------------------------------------------------------------
# 5. etcd, kube-apiserver, kube-controller-manager
# ---------------------------------------------------------------------------------------------
# ensure_daemon NAME PORT HEALTHCHECK TIMEOUT [VAR=value ...] -- argv...
ensure_daemon() {
  local name=$1 port=$2 check=$3 timeout=$4; shift 4
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if running_as "$name" "$@"; then
    if "$check"; then log "$name: already running (pid $(pid_of "$name")), healthy"; return 0; fi
    log "$name: running (pid $(pid_of "$name")) but not healthy yet; waiting"
    local i
    for i in $(seq 1 $((timeout * 5))); do "$check" && break; sleep 0.2; done
    if "$check"; then log "$name: healthy"; return 0; fi
    warn "$name is running but unhealthy; restarting it"
    stop_daemon "$name"
  elif [ -n "$(pid_of "$name")" ]; then
    log "$name: configuration changed; restarting"
    stop_daemon "$name"
  fi
  [ -z "$port" ] || ensure_port_free "$name" "$port"
  log "$name: starting (log $LOGS/$name.log)"
  start_daemon "$name" ${envs[@]+"${envs[@]}"} -- "$@"
  wait_for "$name" "$timeout" "$check"
  log "$name: healthy (pid $(pid_of "$name"))"
}

step_etcd() {
  mkdir -p "$STATE/etcd"; chmod 700 "$STATE/etcd"
  ensure_daemon etcd 2379 etcd_healthy 60 -- "$BIN/etcd" \
    --name local-up \
    --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster local-up=http://127.0.0.1:2380 \
    --initial-cluster-state new \
    --log-level warn
}

step_apiserver() {
  ensure_daemon kube-apiserver "$API_PORT" apiserver_ready 120 -- "$BIN/kube-apiserver" \
    --bind-address="$NODE_IP" \
    --advertise-address="$NODE_IP" \
    --secure-port="$API_PORT" \
    --etcd-servers=http://127.0.0.1:2379 \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --enable-bootstrap-token-auth \
    --allow-privileged=true \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --cert-dir="$STATE/apiserver-certs" \
    --profiling=false \
    --v=1
}

step_controller_manager() {
  ensure_daemon kube-controller-manager 10257 kcm_healthy 60 -- "$BIN/kube-controller-manager" \
    --kubeconfig="$KCM_KUBECONFIG" \
    --authentication-kubeconfig="$KCM_KUBECONFIG" \
    --authorization-kubeconfig="$KCM_KUBECONFIG" \
    --bind-address=127.0.0.1 \
    --secure-port=10257 \
    --cert-dir="$STATE/controller-manager-certs" \
    '--controllers=*,bootstrapsigner,tokencleaner' \
    --use-service-account-credentials \
    --root-ca-file="$PKI/ca.crt" \
    --service-account-private-key-file="$PKI/sa.key" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --leader-elect=false \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=true \
    --cluster-cidr="$CLUSTER_CIDR" \
    --node-cidr-mask-size=24 \
    --profiling=false \
    --v=1
}

# the cluster's KubeletConfiguration as `kubeadm init` uploads it (kube-system/kubelet-config,
# cmd/kubeadm/app/componentconfigs/kubelet.go defaults), with the cgroup driver of this
# machine's containerd (cgroupfs: no systemd here), as a kubeadm config with
# `cgroupDriver: cgroupfs` would give
#
# Eviction settings for this harness (the defaults otherwise): the image filesystem is the
# machine's own disk, shared with everything else on it, so imagefs thresholds are switched off
# as kind does; nodefs is the scratch tmpfs on $DECKHAND_ROOT_DIR (see ensure_root_fs), where
# the default 10% applies; pressure conditions clear 20 s after the last crossing (default 5 min)
# so one test's pressure does not hold back the next.
EVICTION_HARD_YAML='evictionHard:
  memory.available: 100Mi
  nodefs.available: 10%
  nodefs.inodesFree: 5%
  imagefs.available: 0%
  imagefs.inodesFree: 0%'
EVICTION_TRANSITION=20s
# image GC: the machine's disk looks 85-90 % used to statfs (a large root reservation), so with
# the default 85 % the Go kubelet (and deckhand) would delete every unused image every 5 minutes;
# 100 turns the periodic image GC off here (tests/e2e_gc.rs restarts deckhand with its own
# thresholds; the eviction manager's reclaim still deletes unused images under pressure)
IMAGE_GC_YAML='imageGCHighThresholdPercent: 100'

kubelet_config_yaml() {
  "$ROOT/vagrant/provision.sh" default-kubelet-config |
    sed -e 's/^cgroupDriver: systemd$/cgroupDriver: cgroupfs/' \
        -e "s/^evictionPressureTransitionPeriod: .*/evictionPressureTransitionPeriod: $EVICTION_TRANSITION/"
  printf '%s\n' "$EVICTION_HARD_YAML" "$IMAGE_GC_YAML"
}

# deckhand's root directory (pod volumes, the nodefs of eviction) is a tmpfs of
# $DECKHAND_ROOT_SIZE, so that filling it past the eviction threshold is cheap and never touches
# the machine's disk (tests/e2e_eviction.rs). `down` unmounts it.
ensure_root_fs() {
  mkdir -p "$DECKHAND_ROOT_DIR"
  if [ "$(stat -f -c %T "$DECKHAND_ROOT_DIR")" = tmpfs ] && mountpoint -q "$DECKHAND_ROOT_DIR"; then
    return 0
  fi
  [ -z "$(ls -A "$DECKHAND_ROOT_DIR" 2>/dev/null)" ] ||
    warn "$DECKHAND_ROOT_DIR is not empty; its content is hidden under the tmpfs mounted on it"
  mount -t tmpfs -o "size=$DECKHAND_ROOT_SIZE,mode=0755" deckhand-root "$DECKHAND_ROOT_DIR" ||
    die "mounting a tmpfs on $DECKHAND_ROOT_DIR failed"
  log "deckhand: root dir $DECKHAND_ROOT_DIR is a tmpfs of $DECKHAND_ROOT_SIZE"
}

# Kubernetes objects live in hack/manifests/*.yaml. render_manifest FILE VAR...: the file with each
# ${VAR} of the list replaced by the value of the shell variable VAR, nothing else expanded
# ($(NODE_NAME) in a container's command stays as it is). A placeholder alone on its line takes a
# multi-line value, every line indented like the placeholder. The list must name exactly the
# placeholders the file has.
render_manifest() {
  local file=$1 name value line indent want have; shift
  [ -f "$file" ] || die "manifest $file is missing"
  have=$(grep -o '\${[A-Za-z_][A-Za-z0-9_]*}' "$file" | tr -d '${}' | sort -u | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')
  [ "$have" = "$want" ] || die "$file has the placeholders ${have:-(none) }but the list is ${want:-(none) }"
  while IFS= read -r line || [ -n "$line" ]; do
    for name in "$@"; do
      [[ "$line" == *"\${$name}"* ]] || continue
      value=${!name}
      if [[ "$value" == *$'\n'* && "$line" =~ ^([[:space:]]*)\$\{$name\}$ ]]; then
        indent=${BASH_REMATCH[1]}
        line=$indent${value//$'\n'/$'\n'$indent}
      else
        line=${line//"\${$name}"/"$value"}
      fi
    done
    printf '%s\n' "$line"
  done < "$file"
}

# apply_manifest NAME LOG WHAT [VAR...]: hack/manifests/NAME.yaml, rendered with the listed
# variables, applied server-side (field manager local-up); kubectl's output goes to LOG, and to
# stderr if the apply fails
apply_manifest() {
  local name=$1 logf=$2 what=$3 manifest; shift 3
  manifest=$(render_manifest "$MANIFESTS/$name.yaml" "$@") || exit 1
  "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" apply --server-side --force-conflicts --field-manager=local-up -f - > "$logf" 2>&1 <<<"$manifest" ||
    { cat "$logf" >&2; die "kubectl apply of the $what failed"; }
}

# kubeadm-style objects for the TLS-bootstrap (join) flow: kube-public/cluster-info (signed by the
# bootstrapsigner controller for each bootstrap token) readable anonymously, the bindings that
# let bootstrap tokens create node CSRs that the csrapproving controller approves, and the
# kubelet-config ConfigMap with its Role (what `kubeadm init` creates: phases/bootstraptoken/node,
# phases/kubelet/config.go). Tests create the bootstrap-token-* Secrets themselves
# (vagrant/provision.sh token). The objects: hack/manifests/cluster-objects.yaml.
step_cluster_objects() {
  local CA_DATA KUBELET_CONFIG
  CA_DATA=$(base64 -w0 < "$PKI/ca.crt")
  KUBELET_CONFIG=$(kubelet_config_yaml)
  apply_manifest cluster-objects "$STATE/cluster-objects.log" "bootstrap objects" CA_DATA API_SERVER KUBELET_CONFIG
  log "cluster objects: kube-public/cluster-info, kube-system/kubelet-config and bootstrap-token RBAC (kubeadm-style) applied"
}

# ---------------------------------------------------------------------------------------------
# 6. containerd + CNI, 7. registry
# ---------------------------------------------------------------------------------------------
write_if_changed() {  # FILE (content on stdin); returns 0 if the file changed
  local file=$1 tmp="$1.tmp.$$"
  mkdir -p "$(dirname "$file")"
  cat > "$tmp"
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; return 1; fi
  mv -f "$tmp" "$file"
}

write_containerd_config() {
  write_if_changed "$CONTAINERD_CONFIG" <<EOF || true
# $MARKER: containerd 1.6 for the local cluster (cgroup v1, no systemd)
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
oom_score = 0

[grpc]
  address = "$CRI_SOCK"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$SANDBOX_IMAGE"
    # CRI streaming server (exec/attach/port-forward URLs) stays on loopback
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # this VM withholds CAP_SYS_RESOURCE: runc cannot set the sandbox's negative oom_score_adj
    restrict_oom_score_adj = true
    max_container_log_line_size = 16384
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      discard_unpacked_layers = false
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$(command -v runc)"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      # hosts.toml per registry (never combine with registry.mirrors: the CRI plugin would not load)
      config_path = "$CERTS_D"
EOF
}

write_hosts_toml() {
  local r
  for r in "${MIRRORED_REGISTRIES[@]}" "$REGISTRY"; do
    write_one_hosts_toml "$r" "$REGISTRY"
  done
  # the password-protected registry is only itself (plain HTTP on loopback)
  write_one_hosts_toml "$REGISTRY_AUTH" "$REGISTRY_AUTH"
}

write_one_hosts_toml() {  # NAME TARGET
  local r=$1 target=$2
  local f="$CERTS_D/$r/hosts.toml"
  if [ -f "$f" ] && ! grep -q "$MARKER" "$f"; then
    warn "replacing $f (not written by local-up; saved as $f.orig)"
    cp -f "$f" "$f.orig"
  fi
  write_if_changed "$f" <<EOF || true
# $MARKER: $r resolves ONLY to the local registry $target
server = "http://$target"

[host."http://$target"]
  capabilities = ["pull", "resolve"]
EOF
}

write_crictl_config() {
  if [ -f "$CRICTL_CONFIG" ] && ! grep -q "$MARKER" "$CRICTL_CONFIG"; then
    warn "replacing $CRICTL_CONFIG (not written by local-up; saved as $CRICTL_CONFIG.orig)"
    cp -f "$CRICTL_CONFIG" "$CRICTL_CONFIG.orig"
  fi
  write_if_changed "$CRICTL_CONFIG" <<EOF || true
# $MARKER
runtime-endpoint: $CRI_ENDPOINT
image-endpoint: $CRI_ENDPOINT
timeout: 30
EOF
}

write_cni_conf() {
  mkdir -p "$CNI_CONF_DIR"
  local f
  for f in "$CNI_CONF_DIR"/*; do
    [ -e "$f" ] || continue
    [ "$f" = "$CNI_CONF" ] && continue
    if grep -q '"deckhand' "$f" 2>/dev/null && grep -q "$CNI_BRIDGE" "$f" 2>/dev/null; then
      log "cni: removing our old config $f"; rm -f "$f"
    else
      warn "foreign CNI config $f present (left alone; containerd loads the first file in lexical order)"
    fi
  done
  write_if_changed "$CNI_CONF" <<EOF || true
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true }
  ]
}
EOF
}

# pid of whatever serves the containerd socket
socket_owner_pid() {
  ss -Hlxp 2>/dev/null | awk -v s="$CRI_SOCK" '$5 == s' | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

step_containerd() {
  write_containerd_config
  write_hosts_toml
  write_cni_conf
  write_crictl_config
  local argv=(containerd --config "$CONTAINERD_CONFIG")
  argv[0]=$(command -v containerd)
  if ! running_as containerd "${argv[@]}"; then
    local owner; owner=$(socket_owner_pid)
    if [ -n "$owner" ] && [ "$owner" != "$(pid_of containerd)" ]; then
      local cmd; cmd=$(tr '\0' ' ' < "/proc/$owner/cmdline" 2>/dev/null || true)
      if [ "${LOCAL_UP_STOP_FOREIGN_CONTAINERD:-0}" = 1 ]; then
        log "containerd: stopping a containerd not started by local-up (pid $owner: $cmd)"
        kill -TERM "$owner"
        local i; for i in $(seq 1 100); do proc_alive "$owner" || break; sleep 0.1; done
        proc_alive "$owner" && die "containerd pid $owner did not stop"
      else
        die "a containerd not started by local-up serves $CRI_SOCK (pid $owner: $cmd). Stop it (kill $owner) or rerun with LOCAL_UP_STOP_FOREIGN_CONTAINERD=1"
      fi
    fi
  fi
  ensure_daemon containerd "" containerd_healthy 60 -- "${argv[@]}"
  if ! cri_plugin_ok; then die_log containerd "containerd's CRI plugin did not load"; fi
}

step_registry() {
  mkdir -p "$STATE/registry/data"
  write_if_changed "$STATE/registry/config.yml" <<EOF || true
# $MARKER (Debian's default config wants htpasswd auth and listens on all interfaces)
version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $STATE/registry/data
  delete:
    enabled: true
http:
  addr: $REGISTRY
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  ensure_daemon registry 5000 registry_healthy 30 -- "$(command -v docker-registry)" serve "$STATE/registry/config.yml"
  step_registry_auth
}

# bcrypt hash for an htpasswd file (docker-registry accepts only bcrypt): htpasswd if installed,
# else the system python's crypt module (libxcrypt does bcrypt); the password comes on stdin
bcrypt_hash() {
  if command -v htpasswd >/dev/null; then
    htpasswd -niB x | sed -n 's/^x://p'
  else
    /usr/bin/python3 -W ignore -c 'import crypt, sys; print(crypt.crypt(sys.stdin.read().rstrip("\n"), crypt.mksalt(crypt.METHOD_BLOWFISH)))'
  fi
}

# the second registry: same binary, own storage, htpasswd basic auth (plain HTTP on loopback only)
step_registry_auth() {
  mkdir -p "$REGISTRY_AUTH_DIR/data"; chmod 700 "$REGISTRY_AUTH_DIR"
  if [ ! -s "$REGISTRY_AUTH_CREDS_FILE" ]; then
    log "registry-auth: new credentials ($REGISTRY_AUTH_CREDS_FILE)"
    ( umask 077; printf '%s:%s\n' "$REGISTRY_AUTH_USER" "$(openssl rand -hex 16)" > "$REGISTRY_AUTH_CREDS_FILE" )
  fi
  local htpasswd="$REGISTRY_AUTH_DIR/htpasswd"
  if [ ! -s "$htpasswd" ] || [ "$REGISTRY_AUTH_CREDS_FILE" -nt "$htpasswd" ]; then
    local hash
    hash=$(cut -d: -f2- "$REGISTRY_AUTH_CREDS_FILE" | bcrypt_hash) || die "cannot hash the registry password"
    [[ "$hash" == \$2* ]] || die "no bcrypt available (install apache2-utils for htpasswd)"
    ( umask 077; printf '%s:%s\n' "$REGISTRY_AUTH_USER" "$hash" > "$htpasswd" )
  fi
  write_if_changed "$REGISTRY_AUTH_DIR/config.yml" <<EOF || true
# $MARKER: the password-protected registry (htpasswd basic auth)
version: 0.1
log:
  level: info
  fields:
    service: registry-auth
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $REGISTRY_AUTH_DIR/data
  delete:
    enabled: true
auth:
  htpasswd:
    realm: deckhand-local
    path: $htpasswd
http:
  addr: $REGISTRY_AUTH
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  ensure_daemon registry-auth "${REGISTRY_AUTH##*:}" registry_auth_healthy 30 -- "$(command -v docker-registry)" serve "$REGISTRY_AUTH_DIR/config.yml"
}

# ---------------------------------------------------------------------------------------------
# 8. images
# ---------------------------------------------------------------------------------------------
step_images() {
  log "images: hack/images/build-images.sh"
  REGISTRY=$REGISTRY AUTH_REGISTRY=$REGISTRY_AUTH AUTH_CREDS_FILE=$REGISTRY_AUTH_CREDS_FILE \
    "$ROOT/hack/images/build-images.sh" 2>&1 | sed 's/^/    /'
  # prove the mirror mapping through the CRI plugin's own image store (namespace k8s.io)
  local img
  for img in docker.io/library/busybox:latest "$SANDBOX_IMAGE" "$KUBE_PROXY_IMAGE"; do
    ctr --address "$CRI_SOCK" -n k8s.io images pull --hosts-dir "$CERTS_D" "$img" >/dev/null 2>"$STATE/pull.err" ||
      { cat "$STATE/pull.err" >&2; die "containerd could not pull $img from the local registry"; }
  done
  rm -f "$STATE/pull.err"
  log "images: docker.io/library/busybox:latest, $SANDBOX_IMAGE and $KUBE_PROXY_IMAGE pull from $REGISTRY"
}

# ---------------------------------------------------------------------------------------------
# 8b. kube-proxy, as kubeadm deploys it (cmd/kubeadm/app/phases/addons/proxy: the ServiceAccount,
# the node-proxier binding, the ConfigMap with config.conf + kubeconfig.conf, the DaemonSet), with
# kind's conntrack settings so that no host-wide conntrack sysctl is touched; the objects:
# hack/manifests/kube-proxy.yaml
# ---------------------------------------------------------------------------------------------
# /lib/modules and /run/xtables.lock are hostPath mounts of the DaemonSet; where this host lacks
# them, up creates them and down removes them again (only if it created them)
ensure_kube_proxy_host_paths() {
  if [ ! -e /lib/modules ]; then
    mkdir -p /lib/modules && touch "$STATE/created-lib-modules"
  fi
  if [ ! -e /run/xtables.lock ]; then
    touch /run/xtables.lock && touch "$STATE/created-xtables-lock"
  fi
}

step_kube_proxy_objects() {
  ensure_kube_proxy_host_paths
  apply_manifest kube-proxy "$STATE/kube-proxy-objects.log" "kube-proxy objects" CLUSTER_CIDR NODE_IP API_SERVER KUBE_PROXY_IMAGE
  log "kube-proxy: ServiceAccount, kubeadm:node-proxier, ConfigMap and DaemonSet kube-system/kube-proxy applied"
}

kube_proxy_ready() {
  [ "$("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get daemonset kube-proxy \
        -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}' 2>/dev/null)" = 1/1 ] &&
    ipt -t nat -S KUBE-SERVICES >/dev/null 2>&1
}

# wait for deckhand to run the DaemonSet's pod and for kube-proxy's first sync, then put the guard
# jumps back in front of the ones kube-proxy inserted
wait_kube_proxy() {
  local timeout=${KUBE_PROXY_WAIT_TIMEOUT:-120} i
  if [ -z "$(pid_of deckhand)" ]; then
    warn "kube-proxy: deckhand does not run; the DaemonSet's pod will start when it does"
    return 0
  fi
  log "kube-proxy: waiting up to ${timeout}s for the DaemonSet to be ready on $NODE_NAME and its first sync"
  for i in $(seq 1 "$timeout"); do
    kube_proxy_ready && break
    sleep 1
  done
  ensure_guard_first
  if kube_proxy_ready; then
    log "kube-proxy: ready (iptables mode); guard chains first in INPUT, FORWARD and OUTPUT"
  else
    warn "kube-proxy did not become ready within ${timeout}s (kubectl -n kube-system describe ds,pods -l k8s-app=kube-proxy)"
  fi
}

# ---------------------------------------------------------------------------------------------
# 9. deckhand
# ---------------------------------------------------------------------------------------------
deckhand_bin() {
  if [ -n "${DECKHAND_BIN:-}" ]; then echo "$DECKHAND_BIN"; else echo "$ROOT/target/release/deckhand"; fi
}

build_deckhand() {
  if [ -n "${DECKHAND_BIN:-}" ]; then
    [ -x "$DECKHAND_BIN" ] || die "DECKHAND_BIN=$DECKHAND_BIN is not an executable file"
    log "deckhand: using DECKHAND_BIN=$DECKHAND_BIN"
    return 0
  fi
  command -v cargo >/dev/null || die "cargo not found (install Rust, or set DECKHAND_BIN)"
  log "deckhand: cargo build --release --bin deckhand"
  if ! (cd "$ROOT" && cargo build --release --bin deckhand) > "$STATE/cargo-build.log" 2>&1; then
    echo "----- last 40 lines of $STATE/cargo-build.log -----" >&2
    tail -n 40 "$STATE/cargo-build.log" >&2
    die "cargo build --release --bin deckhand failed"
  fi
  [ -x "$ROOT/target/release/deckhand" ] || die "cargo build did not produce target/release/deckhand"
}

# kubeadm join's files for deckhand (DECKHAND_JOIN=1): vagrant/provision.sh writes them into
# $JOIN_DIR from a bootstrap token, exactly as it does on a Vagrant VM joining a kind cluster. A
# new token is made only when the one in bootstrap-kubelet.conf is gone (expired); a node
# kubeconfig whose certificate the current CA did not sign is dropped, so deckhand bootstraps
# again.
ensure_join_files() {
  local prov="$ROOT/vagrant/provision.sh" token="" id cert="$JOIN_DIR/var/lib/kubelet/pki/kubelet-client-current.pem"
  if [ -f "$JOIN_KUBECONFIG" ] && ! openssl verify -CAfile "$PKI/ca.crt" "$cert" >/dev/null 2>&1; then
    log "deckhand: the node certificate is not from this cluster's CA; TLS bootstrap again"
    rm -f "$JOIN_KUBECONFIG"
  fi
  if [ -f "$JOIN_DIR/etc/kubernetes/bootstrap-kubelet.conf" ]; then
    token=$(awk '$1 == "token:" {print $2}' "$JOIN_DIR/etc/kubernetes/bootstrap-kubelet.conf")
    id=${token%%.*}
    "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get secret "bootstrap-token-$id" >/dev/null 2>&1 || token=""
  fi
  if [ -z "$token" ]; then
    token=$(KUBECTL=$KUBECTL "$prov" token --kubeconfig "$ADMIN_KUBECONFIG" --ttl 24h --description "hack/local-up.sh join") ||
      die "creating a bootstrap token (vagrant/provision.sh token) failed"
    log "deckhand: bootstrap token ${token%%.*}.<secret> (kube-system/bootstrap-token-${token%%.*})"
  fi
  # the harness's own settings as the user's KUBELET_EXTRA_ARGS: the node IP and address, the
  # root dir, and the cluster-signed serving certificate (the API server verifies kubelets
  # against the cluster CA here: --kubelet-certificate-authority)
  local extra="--address=$NODE_IP --root-dir=$DECKHAND_ROOT_DIR --tls-cert-file=$PKI/node-serving.crt --tls-private-key-file=$PKI/node-serving.key"
  "$prov" join --api-server "$NODE_IP:$API_PORT" --token "$token" \
      --discovery-token-ca-cert-hash "$("$prov" ca-cert-hash "$PKI/ca.crt")" \
      --node-name "$NODE_NAME" --node-ip "$NODE_IP" --deckhand-bin "$(deckhand_bin)" \
      --cri-socket "$CRI_ENDPOINT" --prefix "$JOIN_DIR" --skip-phases packages,containerd,start \
      --extra-args "$extra" > "$STATE/join.log" 2>&1 ||
    { cat "$STATE/join.log" >&2; die "vagrant/provision.sh join failed (log $STATE/join.log)"; }
}

deckhand_argv() {
  if [ "$DECKHAND_JOIN" = 1 ]; then
    local argv=()
    mapfile -d '' argv < <("$ROOT/vagrant/provision.sh" print-command --prefix "$JOIN_DIR" --null)
    [ ${#argv[@]} -gt 0 ] || die "no deckhand command line from $JOIN_DIR"
    # shellcheck disable=SC2206
    [ -z "${DECKHAND_ARGS:-}" ] || argv+=($DECKHAND_ARGS)
    printf '%s\0' "${argv[@]}"
    return 0
  fi
  local argv=("$(deckhand_bin)"
    --kubeconfig "$DECKHAND_KUBECONFIG"
    --hostname-override "$NODE_NAME"
    --node-ip "$NODE_IP"
    --container-runtime-endpoint "$CRI_ENDPOINT"
    --root-dir "$DECKHAND_ROOT_DIR"
    --address "$NODE_IP"
    --tls-cert-file "$PKI/node-serving.crt"
    --tls-private-key-file "$PKI/node-serving.key"
    --client-ca-file "$PKI/ca.crt"
    --config "$DECKHAND_CONFIG")
  # shellcheck disable=SC2206
  [ -z "${DECKHAND_ARGS:-}" ] || argv+=($DECKHAND_ARGS)
  printf '%s\0' "${argv[@]}"
}

node_ready() {
  [ "$("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# deckhand processes this script did not start (e.g. one a developer runs by hand)
foreign_deckhand_pids() {
  local p a0 ours; ours=$(pid_of deckhand)
  for p in /proc/[0-9]*; do
    a0=$(tr '\0' '\n' 2>/dev/null < "$p/cmdline" | head -1) || continue
    [ "$(basename -- "${a0:-x}")" = deckhand ] || continue
    [ "${p#/proc/}" = "$ours" ] && continue
    proc_alive "${p#/proc/}" && echo "${p#/proc/}"
  done
  return 0
}

start_deckhand() {
  local argv=()
  local foreign; foreign=$(foreign_deckhand_pids | tr '\n' ' ')
  if [ -n "$foreign" ] && [ -z "$(pid_of deckhand)" ]; then
    warn "a deckhand not started by local-up is running (pid ${foreign% }); not starting a second kubelet for node $NODE_NAME"
    return 0
  fi
  [ "$DECKHAND_JOIN" != 1 ] || ensure_join_files
  mapfile -d '' argv < <(deckhand_argv)
  ensure_root_fs
  mkdir -p "$STATIC_POD_DIR"
  write_if_changed "$DECKHAND_CONFIG" <<EOF || true
# $MARKER: deckhand's KubeletConfiguration (flags on the command line override it)
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: manifests
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
evictionPressureTransitionPeriod: $EVICTION_TRANSITION
$EVICTION_HARD_YAML
$IMAGE_GC_YAML
EOF
  if running_as deckhand "${argv[@]}"; then
    # a rebuilt binary replaces the file; the running process then shows "(deleted)"
    if [ "$(readlink "/proc/$(pid_of deckhand)/exe")" != "$(readlink -f "${argv[0]}") (deleted)" ]; then
      log "deckhand: already running (pid $(pid_of deckhand))"
    else
      log "deckhand: binary changed; restarting"
      stop_deckhand
    fi
  elif [ -n "$(pid_of deckhand)" ]; then
    log "deckhand: command line changed; restarting"
    stop_deckhand
  fi
  if [ -z "$(pid_of deckhand)" ]; then
    log "deckhand: starting (log $DECKHAND_LOG)"
    # NO_COLOR: plain log lines (tracing-subscriber colours its output by default)
    start_daemon deckhand RUST_LOG="${RUST_LOG:-info}" NO_COLOR="${NO_COLOR:-1}" -- "${argv[@]}"
    sleep 1
    if ! proc_alive "$(cat "$DECKHAND_PIDFILE")"; then
      if [ "$DECKHAND_WAIT_NODE" = 0 ]; then
        warn "deckhand exited right after start (log $DECKHAND_LOG):"
        tail -n 10 "$DECKHAND_LOG" | sed 's/^/    /' >&2
        return 0
      fi
      die_log deckhand "deckhand exited right after start"
    fi
    log "deckhand: running (pid $(pid_of deckhand))"
  fi
  if [ "$DECKHAND_WAIT_NODE" != 0 ]; then
    log "deckhand: waiting up to ${DECKHAND_WAIT_TIMEOUT}s for Node $NODE_NAME to be Ready (DECKHAND_WAIT_NODE=0 skips)"
    local i
    for i in $(seq 1 "$DECKHAND_WAIT_TIMEOUT"); do
      node_ready && { log "deckhand: Node $NODE_NAME is Ready"; return 0; }
      proc_alive "$(cat "$DECKHAND_PIDFILE" 2>/dev/null || echo 0)" || die_log deckhand "deckhand exited"
      sleep 1
    done
    die_log deckhand "Node $NODE_NAME did not become Ready within ${DECKHAND_WAIT_TIMEOUT}s"
  fi
}

stop_deckhand() { stop_daemon deckhand 30; }

# ---------------------------------------------------------------------------------------------
# 9b. deckhand-scheduler (stands in for kube-scheduler: schedulerName default-scheduler)
# ---------------------------------------------------------------------------------------------
scheduler_bin() {
  if [ -n "${SCHEDULER_BIN:-}" ]; then echo "$SCHEDULER_BIN"; else echo "$ROOT/target/release/deckhand-scheduler"; fi
}

build_scheduler() {
  if [ -n "${SCHEDULER_BIN:-}" ]; then
    [ -x "$SCHEDULER_BIN" ] || { warn "SCHEDULER_BIN=$SCHEDULER_BIN is not an executable file"; return 1; }
    return 0
  fi
  command -v cargo >/dev/null || { warn "cargo not found (install Rust, or set SCHEDULER_BIN)"; return 1; }
  log "deckhand-scheduler: cargo build --release --bin deckhand-scheduler"
  if ! (cd "$ROOT" && cargo build --release --bin deckhand-scheduler) > "$STATE/cargo-build-scheduler.log" 2>&1; then
    tail -n 40 "$STATE/cargo-build-scheduler.log" >&2
    warn "cargo build --release --bin deckhand-scheduler failed (log $STATE/cargo-build-scheduler.log)"
    return 1
  fi
}

scheduler_argv() {
  local argv=("$(scheduler_bin)" --kubeconfig "$SCHEDULER_KUBECONFIG")
  # shellcheck disable=SC2206
  [ -z "${SCHEDULER_ARGS:-}" ] || argv+=($SCHEDULER_ARGS)
  printf '%s\0' "${argv[@]}"
}

# start deckhand-scheduler unless it already runs this binary with this command line
start_scheduler() {
  local argv=()
  mapfile -d '' argv < <(scheduler_argv)
  [ -x "${argv[0]}" ] || { warn "deckhand-scheduler binary ${argv[0]} is missing; not started"; return 1; }
  if running_as deckhand-scheduler "${argv[@]}"; then
    if [ "$(readlink "/proc/$(pid_of deckhand-scheduler)/exe")" != "$(readlink -f "${argv[0]}") (deleted)" ]; then
      log "deckhand-scheduler: already running (pid $(pid_of deckhand-scheduler))"
      return 0
    fi
    log "deckhand-scheduler: binary changed; restarting"
    stop_daemon deckhand-scheduler
  elif [ -n "$(pid_of deckhand-scheduler)" ]; then
    log "deckhand-scheduler: command line changed; restarting"
    stop_daemon deckhand-scheduler
  fi
  log "deckhand-scheduler: starting (log $SCHEDULER_LOG)"
  start_daemon deckhand-scheduler RUST_LOG="${SCHEDULER_RUST_LOG:-info}" NO_COLOR=1 -- "${argv[@]}"
  sleep 0.5
  proc_alive "$(cat "$SCHEDULER_PIDFILE" 2>/dev/null || echo 0)" || { tail -n 20 "$SCHEDULER_LOG" >&2; warn "deckhand-scheduler exited right after start"; return 1; }
  log "deckhand-scheduler: running (pid $(pid_of deckhand-scheduler))"
}

# ---------------------------------------------------------------------------------------------
# 10. env file, 11. hints
# ---------------------------------------------------------------------------------------------
write_env() {
  write_if_changed "$STATE/env" <<EOF || true
# $MARKER; sourceable (KEY=value)
ROOT=$ROOT
STATE_DIR=$STATE
KUBECONFIG=$ADMIN_KUBECONFIG
KUBECTL=$KUBECTL
CRICTL=$CRICTL
KUBE_VERSION=$KUBE_VERSION
API_SERVER=$API_SERVER
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
CRI_ENDPOINT=$CRI_ENDPOINT
POD_CIDR=$POD_CIDR
CLUSTER_CIDR=$CLUSTER_CIDR
SERVICE_CIDR=$SERVICE_CIDR
REGISTRY=$REGISTRY
REGISTRY_AUTH=$REGISTRY_AUTH
REGISTRY_AUTH_CREDS_FILE=$REGISTRY_AUTH_CREDS_FILE
KUBE_PROXY_IMAGE=$KUBE_PROXY_IMAGE
SANDBOX_IMAGE=$SANDBOX_IMAGE
CNI_CONF=$CNI_CONF
CA_CERT=$PKI/ca.crt
PKI_DIR=$PKI
DECKHAND_KUBECONFIG=$([ "$DECKHAND_JOIN" = 1 ] && echo "$JOIN_KUBECONFIG" || echo "$DECKHAND_KUBECONFIG")
DECKHAND_JOIN=$DECKHAND_JOIN
JOIN_DIR=$JOIN_DIR
DECKHAND_TLS_CERT=$PKI/node-serving.crt
DECKHAND_TLS_KEY=$PKI/node-serving.key
DECKHAND_ROOT_DIR=$DECKHAND_ROOT_DIR
DECKHAND_CONFIG=$DECKHAND_CONFIG
STATIC_POD_DIR=$STATIC_POD_DIR
DECKHAND_BIN=$(deckhand_bin)
DECKHAND_LOG=$DECKHAND_LOG
DECKHAND_PIDFILE=$DECKHAND_PIDFILE
SCHEDULER_BIN=$(scheduler_bin)
SCHEDULER_KUBECONFIG=$SCHEDULER_KUBECONFIG
SCHEDULER_LOG=$SCHEDULER_LOG
SCHEDULER_PIDFILE=$SCHEDULER_PIDFILE
EOF
}

print_hints() {
  cat <<EOF

Local cluster is up (node $NODE_NAME, API $API_SERVER). Next:

  export KUBECONFIG=$ADMIN_KUBECONFIG
  $KUBECTL get nodes -o wide
  $KUBECTL create deployment demo --image=busybox --replicas=3 -- sleep 3600
  $KUBECTL get pods -o wide -w          (deckhand-scheduler places them, deckhand runs them)
  $KUBECTL delete pod <one of them>; $KUBECTL get pods -o wide   (a replacement is placed and runs)

  $CRICTL pods; $CRICTL ps -a      (CRI view; /etc/crictl.yaml points at containerd)

  deckhand log: $DECKHAND_LOG       state: . $STATE/env
  deckhand-scheduler log: $SCHEDULER_LOG
  hack/local-up.sh status | restart-deckhand | restart-scheduler | down [--purge]
EOF
}

# ---------------------------------------------------------------------------------------------
# 12. down
# ---------------------------------------------------------------------------------------------
umount_under() {  # unmount every mount point below the given prefixes, deepest first
  local prefixes=("$@") mp p
  # mountinfo field 5 is the mount point with octal escapes (\040 = space)
  while IFS= read -r mp; do
    mp=$(printf '%b' "$mp")
    for p in "${prefixes[@]}"; do
      case "$mp" in
        "$p"|"$p"/*) umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || warn "cannot unmount $mp"; break ;;
      esac
    done
  done < <(awk '{print $5}' /proc/self/mountinfo | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-)
}

cri_cleanup() {
  local bin; bin=$(deckhand_bin)
  if containerd_answers; then
    if [ -x "$bin" ] && timeout 10 "$bin" cri-cleanup --help >/dev/null 2>&1; then
      log "down: deckhand cri-cleanup (stops and removes every sandbox through CRI)"
      timeout 120 "$bin" --container-runtime-endpoint "$CRI_ENDPOINT" cri-cleanup 2>&1 | sed 's/^/    /' ||
        warn "deckhand cri-cleanup failed; falling back to ctr"
    fi
    if [ -x "$CRICTL" ] && [ -n "$("$CRICTL" -r "$CRI_ENDPOINT" pods -q 2>/dev/null)" ]; then
      log "down: crictl rmp -af (stops and removes every sandbox through CRI)"
      timeout 120 "$CRICTL" -r "$CRI_ENDPOINT" rmp -af 2>&1 | sed 's/^/    /' || warn "crictl rmp -af failed; falling back to ctr"
    fi
    # fallback (and sweep): kill and delete every task and container in the CRI namespace
    local ctr=(ctr --address "$CRI_SOCK" -n k8s.io) ids id n=0
    ids=$("${ctr[@]}" tasks ls -q 2>/dev/null || true)
    for id in $ids; do "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $ids; do
      local i; for i in $(seq 1 50); do
        "${ctr[@]}" tasks ls 2>/dev/null | awk -v id="$id" '$1 == id {print $3}' | grep -q RUNNING || break
        sleep 0.1
      done
      "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $("${ctr[@]}" containers ls -q 2>/dev/null || true); do
      "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 && n=$((n + 1)) || true
    done
    [ "$n" = 0 ] || log "down: removed $n CRI container(s)/sandbox(es) with ctr"
  else
    log "down: containerd not answering; cleaning host state directly"
  fi
}

# kill every process left in the pod cgroups, then remove those cgroups depth-first
cleanup_cgroups() {
  local d pids
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [ -d "$d" ] || continue
    pids=$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  sleep 0.2
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$d" ] && warn "could not remove every cgroup under $d"
  done
  return 0
}

# shims of the k8s.io namespace that outlived containerd
kill_k8s_shims() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
    case "$cmd" in
      *containerd-shim*"-namespace k8s.io"*"-address $CRI_SOCK"*) kill -KILL "${p#/proc/}" 2>/dev/null || true ;;
    esac
  done
}

cleanup_cni_iptables() {
  local table chain rule
  for table in nat filter mangle; do
    # drop every rule that jumps to a CNI-* chain from a built-in chain, then the chains themselves
    ipt -t "$table" -S 2>/dev/null | { grep -E '^-A [A-Z]+ .*-j CNI-' || true; } | while IFS= read -r rule; do
      # shellcheck disable=SC2086
      eval "ipt -t $table -D ${rule#-A }" 2>/dev/null || true
    done
    for chain in $(ipt -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}'); do
      ipt -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(ipt -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^CNI-/ {print $2}'); do
      ipt -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}

# kube-proxy's chains (KUBE-*) in every table, with the jumps to them from the built-in chains
# (kube-proxy --cleanup would also try IPVS and nftables cleanup on the host; this is only what
# iptables mode leaves)
cleanup_kube_proxy_iptables() {
  local table chain rule
  for table in nat filter mangle raw; do
    ipt -t "$table" -S 2>/dev/null | { grep -E '^-A [A-Z]+ .*-j KUBE-' || true; } | while IFS= read -r rule; do
      # shellcheck disable=SC2086
      eval "ipt -t $table -D ${rule#-A }" 2>/dev/null || true
    done
    for chain in $(ipt -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      ipt -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(ipt -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      ipt -t "$table" -X "$chain" 2>/dev/null || true
    done
    [ -z "$(ipt -t "$table" -S 2>/dev/null | grep -E '^-N KUBE-' || true)" ] || warn "some KUBE-* chains in table $table could not be removed"
  done
}

cleanup_network() {
  local ns
  # pod network namespaces left by CNI
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  rm -rf "/var/lib/cni/networks/$CNI_NAME" "/var/lib/cni/results/$CNI_NAME"-* 2>/dev/null || true
  ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && ip link del "$CNI_BRIDGE"
  cleanup_cni_iptables
  cleanup_kube_proxy_iptables
  # guard chains
  local hook chain
  for hook in FORWARD:$GUARD_FWD OUTPUT:$GUARD_OUT INPUT:$GUARD_IN; do
    chain=${hook#*:}; hook=${hook%%:*}
    while ipt -D "$hook" -j "$chain" 2>/dev/null; do :; done
    ipt -F "$chain" 2>/dev/null || true
    ipt -X "$chain" 2>/dev/null || true
  done
  ip route del blackhole "$SERVICE_CIDR" 2>/dev/null || true
  ip link show "$DUMMY_IF" >/dev/null 2>&1 && ip link del "$DUMMY_IF"
  if [ -s "$STATE/ip_forward.orig" ]; then
    sysctl -qw net.ipv4.ip_forward="$(cat "$STATE/ip_forward.orig")"
    rm -f "$STATE/ip_forward.orig"
  fi
  return 0
}

cmd_down() {
  check_owner
  local purge=0
  [ "${1:-}" = "--purge" ] && purge=1
  log "down: stopping deckhand"
  stop_deckhand
  local foreign; foreign=$(foreign_deckhand_pids | tr '\n' ' ')
  [ -z "$foreign" ] || warn "a deckhand not started by local-up is still running (pid ${foreign% }); stop it yourself"
  # the CRI cleanup needs containerd; start it briefly if pods outlived it
  if ! containerd_answers && [ -f "$CONTAINERD_CONFIG" ] &&
     [ -n "$(ls -A "$CONTAINERD_STATE/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null)" ]; then
    log "down: starting containerd to remove leftover pods"
    start_daemon containerd -- "$(command -v containerd)" --config "$CONTAINERD_CONFIG"
    local i; for i in $(seq 1 50); do containerd_answers && break; sleep 0.2; done
  fi
  cri_cleanup
  stop_daemon deckhand-scheduler
  stop_daemon kube-controller-manager
  stop_daemon kube-apiserver
  stop_daemon etcd
  stop_daemon containerd
  stop_daemon registry
  stop_daemon registry-auth
  kill_k8s_shims
  log "down: cleaning mounts, netns, CNI state, cgroups, pod logs"
  cleanup_cgroups
  umount_under "$CONTAINERD_STATE/io.containerd.runtime.v2.task" "$CONTAINERD_STATE/io.containerd.grpc.v1.cri" \
    "$CONTAINERD_ROOT/io.containerd.grpc.v1.cri" "$DECKHAND_ROOT_DIR"
  rm -rf /var/log/pods/* 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname '/var/log/pods/*' -delete 2>/dev/null || true
  cleanup_network
  rm -f "$CNI_CONF"
  # host paths of the kube-proxy DaemonSet that up created
  if [ -f "$STATE/created-lib-modules" ]; then
    rmdir /lib/modules 2>/dev/null || warn "/lib/modules is not empty; left in place"
    rm -f "$STATE/created-lib-modules"
  fi
  if [ -f "$STATE/created-xtables-lock" ]; then
    rm -f /run/xtables.lock "$STATE/created-xtables-lock"
  fi
  if [ -f "$CRICTL_CONFIG" ] && grep -q "$MARKER" "$CRICTL_CONFIG"; then
    rm -f "$CRICTL_CONFIG"
    if [ -f "$CRICTL_CONFIG.orig" ]; then mv -f "$CRICTL_CONFIG.orig" "$CRICTL_CONFIG"; fi
  fi
  local r
  for r in "${MIRRORED_REGISTRIES[@]}" "$REGISTRY" "$REGISTRY_AUTH"; do
    local f="$CERTS_D/$r/hosts.toml"
    if [ -f "$f" ] && grep -q "$MARKER" "$f"; then
      rm -f "$f"
      if [ -f "$f.orig" ]; then mv -f "$f.orig" "$f"; fi
      rmdir "$CERTS_D/$r" 2>/dev/null || true
    fi
  done
  if [ "$purge" = 1 ]; then
    log "down --purge: removing etcd data, registry data and $DECKHAND_ROOT_DIR"
    rm -rf "$STATE/etcd" "$STATE/registry/data" "$REGISTRY_AUTH_DIR/data" "$JOIN_DIR"
    rm -rf --one-file-system "$DECKHAND_ROOT_DIR"
  fi
  rm -f "$OWNER_FILE"
  log "down: done (kept: PKI, kubeconfigs, built binaries$([ "$purge" = 1 ] || echo ", etcd and registry data"))"
}

# ---------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------
cmd_status() {
  local rc=0 name pid check
  for name in etcd kube-apiserver kube-controller-manager containerd registry registry-auth deckhand deckhand-scheduler; do
    pid=$(pid_of "$name")
    case $name in
      etcd) check=etcd_healthy ;; kube-apiserver) check=apiserver_ready ;;
      kube-controller-manager) check=kcm_healthy ;; containerd) check=containerd_healthy ;;
      registry) check=registry_healthy ;; registry-auth) check=registry_auth_healthy ;;
      deckhand|deckhand-scheduler) check=true ;;
    esac
    if [ -z "$pid" ]; then
      # deckhand is the component under test and comes and goes; it does not count for the exit code
      # (deckhand-scheduler likewise)
      printf '%-24s stopped\n' "$name"; [ "$name" = deckhand ] || [ "$name" = deckhand-scheduler ] || rc=1
    elif [ "$name" = deckhand ] || [ "$name" = deckhand-scheduler ]; then
      printf '%-24s running (pid %s)\n' "$name" "$pid"
    elif "$check"; then
      printf '%-24s running (pid %s), healthy\n' "$name" "$pid"
    else
      printf '%-24s running (pid %s), NOT healthy\n' "$name" "$pid"; rc=1
    fi
  done
  if ip link show "$DUMMY_IF" >/dev/null 2>&1; then
    printf '%-24s %s\n' network "$DUMMY_IF $(ip -br -4 addr show "$DUMMY_IF" | awk '{print $3}'), $(ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && echo "$CNI_BRIDGE up" || echo "no $CNI_BRIDGE yet")"
  else
    printf '%-24s down\n' network; rc=1
  fi
  if [ -n "$(pid_of kube-apiserver)" ] && apiserver_ready; then
    printf '%-24s %s\n' kube-proxy "DaemonSet kube-system/kube-proxy ready $("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get ds kube-proxy -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}' 2>/dev/null || echo '?')"
    "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" get nodes -o wide 2>/dev/null || true
  fi
  return $rc
}

cmd_up() {
  [[ "$NODE_NAME" =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] || die "NODE_NAME '$NODE_NAME' is not a valid node name"
  [[ "$ROOT" != *[[:space:]]* ]] || die "the repository path must not contain spaces: $ROOT"
  [ "$(id -u)" = 0 ] || die "must run as root"
  mkdir -p "$STATE" "$LOGS" "$PIDS"
  # one cluster per machine (ports, containerd, CNI are machine-wide): a second checkout of the
  # repository must not start another on top of a running one
  check_owner
  echo "$ROOT" > "$OWNER_FILE"
  log "up: node $NODE_NAME, state in $STATE"
  step_deps
  step_network
  step_pki
  step_kubeconfigs
  step_etcd
  step_apiserver
  step_controller_manager
  step_cluster_objects
  step_registry
  step_containerd
  step_images
  step_kube_proxy_objects
  write_env
  build_scheduler || die "deckhand-scheduler could not be built"
  start_scheduler || die_log deckhand-scheduler "deckhand-scheduler did not start"
  build_deckhand
  start_deckhand
  wait_kube_proxy
  log "up: done in $((SECONDS - T0))s"
  print_hints
}

cmd_restart_deckhand() {
  [ -n "$(pid_of kube-apiserver)" ] || die "the cluster is not up (run hack/local-up.sh first)"
  build_deckhand   # first, so a failed build leaves the running deckhand alone
  stop_deckhand
  start_deckhand
  ensure_guard_first
  # keep the scheduler current too (restarted only if its binary or command line changed)
  build_scheduler && start_scheduler || warn "deckhand-scheduler is not running from the current source"
}

cmd_restart_scheduler() {
  [ -n "$(pid_of kube-apiserver)" ] || die "the cluster is not up (run hack/local-up.sh first)"
  build_scheduler || die "deckhand-scheduler could not be built"
  stop_daemon deckhand-scheduler
  start_scheduler || die_log deckhand-scheduler "deckhand-scheduler did not start"
}

# an API server outage for the reliability tests: everything else (etcd, the controller-manager,
# containerd, deckhand, the scheduler, kube-proxy) keeps running
cmd_stop_apiserver() {
  [ -n "$(pid_of kube-apiserver)" ] || die "kube-apiserver is not running"
  stop_daemon kube-apiserver
}

cmd_start_apiserver() {
  [ -n "$(pid_of etcd)" ] || die "etcd is not running (run hack/local-up.sh first)"
  step_apiserver
}

# one harness run at a time: tests may call restart-deckhand while someone else runs up or down
take_lock() {
  mkdir -p "$STATE"
  exec 8>"$STATE/.lock"
  if ! flock -n 8; then
    log "waiting for another hack/local-up.sh run to finish"
    flock -w 900 8 || die "another hack/local-up.sh run holds $STATE/.lock for more than 15 minutes"
  fi
}

main() {
  local cmd=${1:-up}
  [ $# -gt 0 ] && shift
  case "$cmd" in
    up) take_lock; cmd_up "$@" ;;
    down) take_lock; cmd_down "$@" ;;
    status) cmd_status ;;
    restart-deckhand) take_lock; cmd_restart_deckhand ;;
    restart-scheduler) take_lock; cmd_restart_scheduler ;;
    stop-apiserver) take_lock; cmd_stop_apiserver ;;
    start-apiserver) take_lock; cmd_start_apiserver ;;
    -h|--help|help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (up | down [--purge] | status | restart-deckhand | restart-scheduler | stop-apiserver | start-apiserver)" ;;
  esac
}

[ "${LOCAL_UP_SOURCE_ONLY:-0}" = 1 ] || main "$@"
