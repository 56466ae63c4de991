# shellcheck shell=bash
# hack/lib/node.sh: the node: deckhand (binary, kubeadm-style join files or a static kubeconfig,
# its KubeletConfiguration and tmpfs root dir, start/stop, waiting for Node Ready),
# deckhand-scheduler (binary, start), kube-proxy as kubeadm's DaemonSet
# (hack/manifests/kube-proxy.yaml, its host paths, waiting for its first sync), and CoreDNS as
# kubeadm's Deployment and kube-dns Service (hack/manifests/coredns.yaml, waiting until available).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

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
# 100 turns the periodic image GC off here (tests/e2e/gc.rs restarts deckhand with its own
# thresholds; the eviction manager's reclaim still deletes unused images under pressure)
IMAGE_GC_YAML='imageGCHighThresholdPercent: 100'
# at most 1024 tasks per pod (podPidsLimit; kubeadm leaves it unlimited): a fork bomb stays in
# its pod (tests/e2e/hostile.rs). Conformance needs far fewer.
POD_PIDS_YAML='podPidsLimit: 1024'

kubelet_config_yaml() {
  "$ROOT/vagrant/provision.sh" default-kubelet-config |
    sed -e 's/^cgroupDriver: systemd$/cgroupDriver: cgroupfs/' \
        -e "s/^evictionPressureTransitionPeriod: .*/evictionPressureTransitionPeriod: $EVICTION_TRANSITION/"
  printf '%s\n' "$EVICTION_HARD_YAML" "$IMAGE_GC_YAML" "$POD_PIDS_YAML"
}

# deckhand's root directory (pod volumes, the nodefs of eviction) is a tmpfs of
# $DECKHAND_ROOT_SIZE, so that filling it past the eviction threshold is cheap and never touches
# the machine's disk (tests/e2e/eviction.rs). `down` unmounts it.
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

# ---------------------------------------------------------------------------------------------
# kube-proxy, as kubeadm deploys it (cmd/kubeadm/app/phases/addons/proxy: the ServiceAccount,
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

remove_kube_proxy_host_paths() {
  if [ -f "$STATE/created-lib-modules" ]; then
    rmdir /lib/modules 2>/dev/null || warn "/lib/modules is not empty; left in place"
    rm -f "$STATE/created-lib-modules"
  fi
  if [ -f "$STATE/created-xtables-lock" ]; then
    rm -f /run/xtables.lock "$STATE/created-xtables-lock"
  fi
}

step_kube_proxy_objects() {
  ensure_kube_proxy_host_paths
  apply_manifest kube-proxy "$STATE/kube-proxy-objects.log" "kube-proxy objects" CLUSTER_CIDR NODE_IP NODES_CIDR API_SERVER KUBE_PROXY_IMAGE
  log "kube-proxy: ServiceAccount, kubeadm:node-proxier, ConfigMap and DaemonSet kube-system/kube-proxy applied"
}

# ready on every node it is scheduled to (1/1 with one node; NODES=N: N/N)
kube_proxy_ready() {
  local r
  r=$("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get daemonset kube-proxy \
        -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}' 2>/dev/null) || return 1
  [[ "$r" =~ ^([1-9][0-9]*)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
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
# cluster DNS: CoreDNS as kubeadm deploys it (cmd/kubeadm/app/phases/addons/dns: the
# ServiceAccount, ClusterRole/Binding system:coredns, the Corefile ConfigMap, the Deployment
# kube-system/coredns and the Service kube-dns at $CLUSTER_DNS, deckhand's clusterDNS), without
# forwarding outside the cluster; the objects: hack/manifests/coredns.yaml
# ---------------------------------------------------------------------------------------------

step_coredns_objects() {
  apply_manifest coredns "$STATE/coredns-objects.log" "CoreDNS objects" CLUSTER_DNS CLUSTER_DOMAIN COREDNS_IMAGE
  log "coredns: ServiceAccount, system:coredns, ConfigMap, Deployment kube-system/coredns and Service kube-dns ($CLUSTER_DNS) applied"
}

# kind's default StorageClass `standard`: rancher's local-path-provisioner (LOCAL_UP_STORAGE=1), its
# Deployment waited for (it runs on a node of this cluster)
step_storage() {
  [ "$LOCAL_UP_STORAGE" = 1 ] || { log "storage: no local-path-provisioner (LOCAL_UP_STORAGE=0)"; return 0; }
  apply_manifest local-path-storage "$STATE/local-path-storage.log" "local-path-provisioner objects" LOCAL_PATH_IMAGE
  log "storage: local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION and the default StorageClass standard (WaitForFirstConsumer) applied"
  local timeout=${STORAGE_WAIT_TIMEOUT:-120} i k=("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n local-path-storage)
  [ "$DECKHAND_WAIT_NODE" != 0 ] || return 0
  for i in $(seq 1 "$timeout"); do
    if [ "$("${k[@]}" get deployment local-path-provisioner -o 'jsonpath={.status.availableReplicas}' 2>/dev/null)" = 1 ]; then
      log "storage: local-path-provisioner available"
      return 0
    fi
    sleep 1
  done
  "${k[@]}" describe pods -l app=local-path-provisioner 2>&1 | tail -n 30 >&2 || true
  die "storage: Deployment local-path-storage/local-path-provisioner is not available within ${timeout}s"
}

# "available/wanted" replicas of the Deployment (empty if it cannot be read)
coredns_replicas() {
  "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get deployment coredns \
    -o 'jsonpath={.status.availableReplicas}/{.spec.replicas}' 2>/dev/null
}

coredns_available() {
  [ "$("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get deployment coredns \
        -o 'jsonpath={.status.conditions[?(@.type=="Available")].status}' 2>/dev/null)" = True ] &&
    [ "$(coredns_replicas)" = 1/1 ]
}

# wait until the Deployment is available (its pod Ready: the kubernetes plugin has synced with the
# API server through the kubernetes Service, so kube-proxy works too); on a timeout, fail with the
# pod's description and log
wait_coredns() {
  local timeout=${COREDNS_WAIT_TIMEOUT:-120} i k=("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system)
  if [ -z "$(pid_of deckhand)" ]; then
    warn "coredns: deckhand does not run; the Deployment's pod will start when it does"
    return 0
  fi
  if [ "$DECKHAND_WAIT_NODE" = 0 ]; then
    log "coredns: not waiting for the Deployment (DECKHAND_WAIT_NODE=0: the node may not be Ready yet)"
    return 0
  fi
  log "coredns: waiting up to ${timeout}s for Deployment kube-system/coredns to be available"
  for i in $(seq 1 "$timeout"); do
    coredns_available && { log "coredns: available; Service kube-dns answers on $CLUSTER_DNS:53"; return 0; }
    sleep 1
  done
  {
    echo "----- kubectl -n kube-system get deployment,pods -l k8s-app=kube-dns -o wide -----"
    "${k[@]}" get deployment coredns -o wide 2>&1 || true
    "${k[@]}" get pods -l k8s-app=kube-dns -o wide 2>&1 || true
    echo "----- kubectl -n kube-system describe pods -l k8s-app=kube-dns -----"
    "${k[@]}" describe pods -l k8s-app=kube-dns 2>&1 | tail -n 60 || true
    echo "----- kubectl -n kube-system logs -l k8s-app=kube-dns --tail=40 (and --previous) -----"
    "${k[@]}" logs -l k8s-app=kube-dns --tail=40 2>&1 || true
    "${k[@]}" logs -l k8s-app=kube-dns --tail=20 --previous 2>/dev/null || true
    echo "-----"
  } >&2
  die "coredns: Deployment kube-system/coredns is not available within ${timeout}s (available/wanted: $(coredns_replicas || true)); see above, and $DECKHAND_LOG"
}

# ---------------------------------------------------------------------------------------------
# deckhand
# ---------------------------------------------------------------------------------------------
deckhand_bin() {
  # A relative path is taken from the caller's directory; processes start elsewhere, so make it absolute.
  if [ -n "${DECKHAND_BIN:-}" ]; then realpath -m -- "$DECKHAND_BIN"; else echo "$(release_dir)/deckhand"; fi
}

build_deckhand() {
  if [ -n "${DECKHAND_BIN:-}" ]; then
    [ -x "$DECKHAND_BIN" ] || die "DECKHAND_BIN=$DECKHAND_BIN is not an executable file"
    log "deckhand: using DECKHAND_BIN=$DECKHAND_BIN"
    return 0
  fi
  command -v cargo >/dev/null || die "cargo not found (install Rust, or set DECKHAND_BIN)"
  log "deckhand: release build (hack/lib/release.sh) --bin deckhand"
  if ! release_build --bin deckhand > "$STATE/cargo-build.log" 2>&1; then
    echo "----- last 40 lines of $STATE/cargo-build.log -----" >&2
    tail -n 40 "$STATE/cargo-build.log" >&2
    die "the release build of deckhand failed"
  fi
  [ -x "$(release_dir)/deckhand" ] || die "the release build did not produce $(release_dir)/deckhand"
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

# deckhand processes this script did not start (e.g. one a developer runs by hand); the extra
# nodes' deckhands (hack/lib/nodes.sh) are ours
foreign_deckhand_pids() {
  local p a0 ours; ours=" $(pid_of deckhand) $(node_daemon_pids) "
  for p in /proc/[0-9]*; do
    a0=$(tr '\0' '\n' 2>/dev/null < "$p/cmdline" | head -1) || continue
    [ "$(basename -- "${a0:-x}")" = deckhand ] || continue
    [[ "$ours" == *" ${p#/proc/} "* ]] && continue
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
clusterDNS: [$CLUSTER_DNS]
clusterDomain: $CLUSTER_DOMAIN
evictionPressureTransitionPeriod: $EVICTION_TRANSITION
$EVICTION_HARD_YAML
$IMAGE_GC_YAML
$POD_PIDS_YAML
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
# deckhand-scheduler (stands in for kube-scheduler: schedulerName default-scheduler)
# ---------------------------------------------------------------------------------------------
scheduler_bin() {
  if [ -n "${SCHEDULER_BIN:-}" ]; then realpath -m -- "$SCHEDULER_BIN"; else echo "$(release_dir)/deckhand-scheduler"; fi
}

build_scheduler() {
  if [ -n "${SCHEDULER_BIN:-}" ]; then
    [ -x "$SCHEDULER_BIN" ] || { warn "SCHEDULER_BIN=$SCHEDULER_BIN is not an executable file"; return 1; }
    return 0
  fi
  command -v cargo >/dev/null || { warn "cargo not found (install Rust, or set SCHEDULER_BIN)"; return 1; }
  log "deckhand-scheduler: release build (hack/lib/release.sh) --bin deckhand-scheduler"
  if ! release_build --bin deckhand-scheduler > "$STATE/cargo-build-scheduler.log" 2>&1; then
    tail -n 40 "$STATE/cargo-build-scheduler.log" >&2
    warn "the release build of deckhand-scheduler failed (log $STATE/cargo-build-scheduler.log)"
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
