#!/usr/bin/env bash
# Local one-node cluster for deckhand: etcd, kube-apiserver, kube-controller-manager (built from the
# Kubernetes Go modules by hack/build-k8s.sh), containerd with its own config, a local registry with
# images built here (and a second, password-protected one), deckhand itself as the node's kubelet,
# deckhand-scheduler as the scheduler (no kube-scheduler), and kube-proxy (iptables mode) as the
# kube-system/kube-proxy DaemonSet that kubeadm would create, running on deckhand's node from an
# image built here, and CoreDNS (built from its Go module by hack/build-coredns.sh) as kubeadm's
# kube-system/coredns Deployment behind the kube-dns Service at 10.96.0.10 (deckhand's clusterDNS).
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
#   hack/local-up.sh stop-apiserver [--etcd]  stop kube-apiserver only (an API server outage,
#                                      for tests), or etcd with it
#   hack/local-up.sh start-apiserver   start it (and etcd, if stopped) again and wait until ready
#   hack/local-up.sh stop-containerd [--kill]  stop containerd only (SIGTERM, or SIGKILL with
#                                      --kill; its shims and so the containers keep running)
#   hack/local-up.sh start-containerd  start it again and wait until its CRI plugin answers
#   hack/local-up.sh stop-node I       stop the deckhand of extra node dh-node-I only (its
#                                      containerd and pods keep running; the Node goes NotReady)
#   hack/local-up.sh start-node I      start it again and wait until the Node is Ready
#
# Environment:
#   NODE_NAME              node name (default: lowercased `hostname`)
#   LOCAL_UP_MODE          unset: this cluster (the default, fast path of the tests); kubeadm:
#                          a cluster made by `kubeadm init` in dh-node-1 and `kubeadm join` of
#                          dh-node-2..N, every kubelet deckhand, nothing on the host but the
#                          registries and the bridge (hack/lib/kubeadm.sh; README "A kubeadm
#                          cluster on deckhand"). Recorded by up; down and status follow it
#   NODES                  how many nodes (default 1: the main node only, as before). N >= 2
#                          adds worker nodes dh-node-2 .. dh-node-N after the main node is up:
#                          each its own network, mount, UTS and cgroup namespaces (node IP
#                          10.251.0.<i> on bridge dh-nodes0), its own containerd 1.6 and its own
#                          deckhand joined with a bootstrap token, pod CIDR from
#                          kube-controller-manager (hack/lib/nodes.sh says how). `up` with a
#                          smaller N removes the nodes above it; `down` removes them all
#   DECKHAND_BIN           use this deckhand binary instead of the release build (hack/build-release.sh)
#   DECKHAND_WAIT_NODE     0 = don't wait for the Node to become Ready, nor for CoreDNS (default 1)
#   DECKHAND_WAIT_TIMEOUT  seconds to wait for Node Ready (default 60)
#   LOCAL_UP_DNS           1 (default): cluster DNS (CoreDNS, see below; the first build of CoreDNS
#                          takes about a minute on 2 cores, then it is cached); 0: none (no
#                          CoreDNS build, image, Deployment or wait; objects of an earlier `up`
#                          stay; tests/e2e/dns.rs and the DNS conformance tests then fail)
#   COREDNS_WAIT_TIMEOUT   seconds to wait for the coredns Deployment to be available (default
#                          120; `up` fails after that, with the pod's description and log)
#   LOCAL_UP_STORAGE       1 (default): kind's default StorageClass `standard`, rancher's
#                          local-path-provisioner (built from its Go module by
#                          hack/build-local-path-provisioner.sh, cached; volumes in
#                          /var/local-path-provisioner on the node); 0: none
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
#   CONTAINERD             which containerd runs the cluster: 1.6 (Debian's, /usr/bin/containerd,
#                          socket /run/containerd/containerd.sock) or 2 (CONTAINERD2_VERSION of
#                          hack/versions.env, built from its Go module by hack/build-containerd.sh
#                          into _output/containerd2/bin, config hack/lib/containerd2.sh, root
#                          /var/lib/containerd2, state /run/containerd2, socket
#                          /run/containerd2/containerd.sock). Read by `up` only: a fresh cluster is
#                          1.6 unless CONTAINERD=2; `up` records the mode (_output/local-up/
#                          containerd-mode) and keeps it when CONTAINERD is unset; `up` with the
#                          other mode removes every pod from the old containerd, stops it and starts
#                          the new one (deckhand runs the pods again). down, status, restart-*,
#                          stop-/start-containerd follow the recorded mode; down cleans both
#                          modes' shims and mounts and removes 2.x's state dir (--purge: its root)
#   LOCAL_UP_STOP_FOREIGN_CONTAINERD=1  stop a containerd that this script did not start
#   LOCAL_UP_TAKE_OVER=1   stop a cluster that another checkout of the repository runs (with its
#                          own `down`) instead of refusing; a stale owner (daemons gone) is always
#                          taken over
#
# State lives in _output/local-up/ (pki/, logs/<name>.log, pids/<name>.pid, the kubeconfigs, and
# `env`, a sourceable KEY=value file with KUBECONFIG, KUBECTL, NODE_NAME, NODE_IP, CRI_ENDPOINT,
# CONTAINERD (1.6 or 2), CONTAINERD_VERSION, CTR (that containerd's ctr), DECKHAND_LOG,
# DECKHAND_PIDFILE, REGISTRY_AUTH, REGISTRY_AUTH_CREDS_FILE, ...).
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
# `down` removes every KUBE-* iptables chain it leaves.
#
# Cluster DNS: as kubeadm deploys it (cmd/kubeadm/app/phases/addons/dns: ServiceAccount
# kube-system/coredns, ClusterRole/Binding system:coredns, ConfigMap kube-system/coredns with the
# Corefile, Deployment kube-system/coredns with 1 replica, Service kube-system/kube-dns at
# 10.96.0.10 on 53/UDP, 53/TCP and 9153/TCP), image registry.k8s.io/coredns/coredns:<version>
# (mirrored) from hack/images, CoreDNS at the version kubeadm deploys (hack/versions.env). It
# serves cluster.local and the reverse zones from the API; it forwards nothing: every other name
# gets NXDOMAIN (a query never leaves the machine).
#
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

# The parts live in hack/lib/*.sh (each file says what it owns) and the Kubernetes objects applied
# in hack/manifests/*.yaml; this file keeps the usage text, the subcommands and main.
for lib in common processes network pki containerd containerd2 registry control-plane release node nodes kubeadm; do
  # shellcheck source=/dev/null
  . "$ROOT/hack/lib/$lib.sh"
done
unset lib
# the containerd the cluster runs (or ran last): 1.6 or 2 (see CONTAINERD_MODE in hack/lib/common.sh)
use_containerd "$CONTAINERD_MODE"

# ---------------------------------------------------------------------------------------------
# hints
# ---------------------------------------------------------------------------------------------
print_hints() {
  cat <<EOF

Local cluster is up (node $NODE_NAME, API $API_SERVER). Next:

  export KUBECONFIG=$ADMIN_KUBECONFIG
  $KUBECTL get nodes -o wide
  $KUBECTL create deployment demo --image=busybox --replicas=3 -- sleep 3600
  $KUBECTL get pods -o wide -w          (deckhand-scheduler places them, deckhand runs them)
  $KUBECTL delete pod <one of them>; $KUBECTL get pods -o wide   (a replacement is placed and runs)

  $CRICTL pods; $CRICTL ps -a      (CRI view; /etc/crictl.yaml points at containerd $CONTAINERD_MODE, $CRI_SOCK)

  deckhand log: $DECKHAND_LOG       state: . $STATE/env
  deckhand-scheduler log: $SCHEDULER_LOG
  hack/local-up.sh status | restart-deckhand | restart-scheduler | down [--purge]
EOF
  [ "$NODES" -le 1 ] || cat <<EOF

  extra nodes dh-node-2..dh-node-$NODES: logs $LOGS/dh-node-<i>-{deckhand,containerd}.log;
    hack/local-up.sh stop-node <i> | start-node <i>; their containerd from the host:
    $CRICTL -r unix://$NODES_STATE/dh-node-<i>/run-containerd/containerd.sock ps
EOF
  [ "$NODES" -le 1 ] || nodes_print_walkthrough "spread over the nodes"
}

# ---------------------------------------------------------------------------------------------
# down
# ---------------------------------------------------------------------------------------------
cmd_down() {
  check_owner
  local purge=0
  [ "${1:-}" = "--purge" ] && purge=1
  # the VM nodes of hack/vm.sh first (their Node objects, their route, their tap on the node
  # bridge that nodes_down removes), then the extra nodes, while the API server still answers
  local vmd
  for vmd in "$STATE"/vm/dh-vm-*; do
    [ -d "$vmd" ] || continue
    log "down: VM ${vmd##*/} (hack/vm.sh down)"
    VM_INDEX=${vmd##*-} "$ROOT/hack/vm.sh" down || warn "hack/vm.sh down of ${vmd##*/} failed"
  done
  nodes_down
  log "down: stopping deckhand"
  stop_deckhand
  local foreign; foreign=$(foreign_deckhand_pids | tr '\n' ' ')
  [ -z "$foreign" ] || warn "a deckhand not started by local-up is still running (pid ${foreign% }); stop it yourself"
  # the containerd that runs (CONTAINERD_MODE: the one up recorded)
  log "down: containerd $CONTAINERD_MODE ($CRI_SOCK)"
  start_containerd_for_cleanup
  cri_cleanup
  stop_daemon deckhand-scheduler
  stop_daemon kube-controller-manager
  stop_daemon kube-apiserver
  stop_daemon etcd
  stop_daemon containerd
  stop_daemon registry
  stop_daemon registry-auth
  # the shims and mounts of both modes: the other one's are leftovers of an earlier cluster
  kill_k8s_shims "$CONTAINERD16_SOCK" "$CONTAINERD2_SOCK"
  log "down: cleaning mounts, netns, CNI state, cgroups, pod logs"
  cleanup_cgroups
  umount_containerd 1.6
  umount_containerd 2
  umount_under "$DECKHAND_ROOT_DIR"
  rm -rf /var/log/pods/* 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname '/var/log/pods/*' -delete 2>/dev/null || true
  cleanup_network
  rm -f "$CNI_CONF"
  remove_kube_proxy_host_paths
  remove_crictl_config
  remove_hosts_toml
  if [ "$purge" = 1 ]; then
    log "down --purge: removing etcd data, registry data, $DECKHAND_ROOT_DIR and containerd 2.x's $CONTAINERD2_ROOT"
    rm -rf "$STATE/etcd" "$STATE/registry/data" "$REGISTRY_AUTH_DIR/data" "$JOIN_DIR"
    rm -rf --one-file-system "$DECKHAND_ROOT_DIR" "$CONTAINERD2_ROOT"
  fi
  rm -f "$CONTAINERD_MODE_FILE"
  rm -rf "$KUBEADM_STATE" "$LOCAL_UP_MODE_FILE"
  rm -f "$OWNER_FILE"
  log "down: done (kept: PKI, kubeconfigs, built binaries$([ "$purge" = 1 ] || echo ", etcd and registry data"))"
}

# ---------------------------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------------------------
cmd_status() {
  local rc=0 name pid check
  if [ "$LOCAL_UP_MODE" = kubeadm ]; then
    nodes_status
    [ -s "$KUBEADM_ADMIN" ] && "$KUBECTL" --kubeconfig "$KUBEADM_ADMIN" get nodes -o wide 2>/dev/null || rc=1
    return $rc
  fi
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
  nodes_status
  printf '%-24s %s\n' containerd-mode "$CONTAINERD_MODE: containerd $(containerd_version) ($(containerd_bin)) on $CRI_SOCK$([ -n "$CONTAINERD_RECORDED" ] || echo ', not recorded (no up since the last down)')"
  if ip link show "$DUMMY_IF" >/dev/null 2>&1; then
    printf '%-24s %s\n' network "$DUMMY_IF $(ip -br -4 addr show "$DUMMY_IF" | awk '{print $3}'), $(ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && echo "$CNI_BRIDGE up" || echo "no $CNI_BRIDGE yet")"
  else
    printf '%-24s down\n' network; rc=1
  fi
  if [ -n "$(pid_of kube-apiserver)" ] && apiserver_ready; then
    printf '%-24s %s\n' kube-proxy "DaemonSet kube-system/kube-proxy ready $("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get ds kube-proxy -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}' 2>/dev/null || echo '?')"
    [ "$LOCAL_UP_DNS" = 1 ] && printf '%-24s %s\n' coredns "Deployment kube-system/coredns available $(coredns_replicas || true) $(coredns_available && echo "(Service kube-dns $CLUSTER_DNS)" || echo '(NOT available)')"
    "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" get nodes -o wide 2>/dev/null || true
  fi
  return $rc
}

cmd_up() {
  [ "$LOCAL_UP_MODE" != kubeadm ] || { cmd_up_kubeadm; return; }
  [ "$(cat "$LOCAL_UP_MODE_FILE" 2>/dev/null)" != kubeadm ] || die "a LOCAL_UP_MODE=kubeadm cluster runs: hack/local-up.sh down first"
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
  # add-ons that need a Ready node (start_deckhand waited for it) and working Services
  if [ "$LOCAL_UP_DNS" = 1 ]; then
    step_coredns_objects
    wait_coredns
  else
    log "coredns: no cluster DNS (LOCAL_UP_DNS=0)"
  fi
  step_storage
  # NODES=N: the extra nodes, after the main one (it registers first: 10.244.0.0/24 is its pod CIDR)
  step_nodes
  [ "$NODES" -le 1 ] || { nodes_wait_daemonset; wait_kube_proxy; }
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

# an API server outage for the reliability tests: everything else (etcd unless --etcd, the
# controller-manager, containerd, deckhand, the scheduler, kube-proxy) keeps running
cmd_stop_apiserver() {
  [ -n "$(pid_of kube-apiserver)" ] || die "kube-apiserver is not running"
  case "${1:-}" in
    --etcd|"") ;;
    *) die "stop-apiserver: unknown option '$1' (--etcd)" ;;
  esac
  stop_daemon kube-apiserver
  [ "${1:-}" != --etcd ] || stop_daemon etcd
}

cmd_stop_containerd() {
  local pid; pid=$(pid_of containerd)
  [ -n "$pid" ] || die "containerd is not running"
  case "${1:-}" in
    --kill)
      log "killing containerd (pid $pid) with SIGKILL"
      kill -KILL "$pid"
      local i; for i in $(seq 1 50); do proc_alive "$pid" || break; sleep 0.1; done
      rm -f "$PIDS/containerd.pid" "$PIDS/containerd.start" "$PIDS/containerd.cmd" ;;
    "") stop_daemon containerd ;;
    *) die "stop-containerd: unknown option '$1' (--kill)" ;;
  esac
}

cmd_start_containerd() { step_containerd; }

node_index_arg() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 2 ] || { [ "$LOCAL_UP_MODE" = kubeadm ] && [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ]; } || die "$2: give the index of an extra node (2 for dh-node-2)"
  [ -n "$(node_holder "$1")" ] || die "$2: node $(node_name_of "$1") does not run (NODES=$1 or more: hack/local-up.sh up)"
}

cmd_stop_node() { node_index_arg "${1:-}" stop-node; node_stop_deckhand "$1"; }

cmd_start_node() {
  node_index_arg "${1:-}" start-node
  if [ "$LOCAL_UP_MODE" = kubeadm ]; then
    # as systemd would start it again: the drop-in's command line
    [ -n "$(pid_of "$(node_name_of "$1")-deckhand")" ] || kubeadm_start_deckhand "$1"
    ADMIN_KUBECONFIG=$KUBEADM_ADMIN
  else
    NODES_JOIN_TOKEN=$(nodes_token)
    node_deckhand "$1"
  fi
  local name t; name=$(node_name_of "$1")
  for t in $(seq 1 "$DECKHAND_WAIT_TIMEOUT"); do
    [ "$(node_field "$name" '{.status.conditions[?(@.type=="Ready")].status}')" = True ] && { log "$name: Ready"; return 0; }
    [ -n "$(pid_of "$name-deckhand")" ] || die_log "$name-deckhand" "deckhand of $name exited"
    sleep 1
  done
  die_log "$name-deckhand" "$name did not become Ready within ${DECKHAND_WAIT_TIMEOUT}s"
}

cmd_start_apiserver() {
  [ -n "$(pid_of etcd)" ] || step_etcd
  step_apiserver
}

main() {
  local cmd=${1:-up}
  [ $# -gt 0 ] && shift
  # only up switches containerd; every other subcommand works on the one that runs
  if [ "$cmd" != up ] && [ "$CONTAINERD_WANTED" != "$CONTAINERD_MODE" ]; then
    case "$cmd" in -h|--help|help) ;; *)
      warn "the cluster runs containerd $CONTAINERD_MODE ($CONTAINERD_MODE_FILE): CONTAINERD=$CONTAINERD applies only to up" ;;
    esac
    CONTAINERD_WANTED=$CONTAINERD_MODE
  fi
  case "$cmd" in
    up) take_lock; cmd_up "$@" ;;
    down) take_lock; cmd_down "$@" ;;
    status) cmd_status ;;
    restart-deckhand) take_lock; cmd_restart_deckhand ;;
    restart-scheduler) take_lock; cmd_restart_scheduler ;;
    stop-apiserver) take_lock; cmd_stop_apiserver "$@" ;;
    start-apiserver) take_lock; cmd_start_apiserver ;;
    stop-containerd) take_lock; cmd_stop_containerd "$@" ;;
    start-containerd) take_lock; cmd_start_containerd ;;
    stop-node) take_lock; cmd_stop_node "$@" ;;
    start-node) take_lock; cmd_start_node "$@" ;;
    -h|--help|help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' ;;
    *) die "unknown command '$cmd' (up | down [--purge] | status | restart-deckhand | restart-scheduler | stop-apiserver [--etcd] | start-apiserver | stop-containerd [--kill] | start-containerd | stop-node I | start-node I)" ;;
  esac
}

[ "${LOCAL_UP_SOURCE_ONLY:-0}" = 1 ] || main "$@"
