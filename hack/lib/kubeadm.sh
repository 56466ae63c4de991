# shellcheck shell=bash
# hack/lib/kubeadm.sh: LOCAL_UP_MODE=kubeadm hack/local-up.sh up: a cluster made by kubeadm itself
# (issue 16), every kubelet of it deckhand. NODES=N (default 3 in this mode) node namespaces
# dh-node-1 .. dh-node-N, made exactly as the extra nodes of the default mode (hack/lib/nodes.sh:
# netns, holder, own containerd 1.6, own directories), at 10.251.0.<10+i> on the bridge dh-nodes0
# (10.251.0.1 is the bridge's own address, where the nodes reach the local registry). Nothing of
# the default mode's control plane runs on the host: no etcd, kube-apiserver,
# kube-controller-manager, deckhand-scheduler, host containerd or host deckhand.
#
#   - dh-node-1 is the control-plane node: `kubeadm init` runs inside it (hack/node-ns.sh enter)
#     with the config $KUBEADM_STATE/init.yaml. kubeadm writes /etc/kubernetes (certificates,
#     kubeconfigs, the static pod manifests) and /var/lib/kubelet (config.yaml,
#     kubeadm-flags.env), which are the node's own directories (node-ns.sh BINDS). Where systemd
#     would start kubelet.service after the kubelet-start phase, the harness starts deckhand with
#     the command line of systemd/deckhand.service.d/10-kubeadm.conf (vagrant/provision.sh
#     print-command, evaluated inside the node, so its EnvironmentFile= lines read the node's
#     kubeadm-flags.env). deckhand then runs etcd, kube-apiserver, kube-controller-manager and
#     kube-scheduler as static pods; kubeadm's waits and its addon phase (CoreDNS, kube-proxy)
#     run unchanged.
#   - dh-node-2..N: `kubeadm join` inside each, with the bootstrap token of init.yaml (made here,
#     as `kubeadm token generate` would) and the CA hash of the cluster kubeadm made; deckhand
#     started the same way once kubeadm's kubelet-start phase wrote its files; kubeadm waits for
#     the TLS bootstrap (kubelet.conf) as it does with the Go kubelet.
#   - pod network: as in the default mode, once kube-controller-manager gives a Node its pod CIDR
#     (kubeadm's podSubnet 10.244.0.0/16), the node's CNI config and a host route.
#   - the host's kubectl uses $KUBEADM_STATE/admin.conf (kubeadm's, copied out of dh-node-1), API
#     server https://10.251.0.11:6443.
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/nodes.sh.

LOCAL_UP_MODE_FILE="$STATE/local-up-mode"
# the mode of the cluster that runs (recorded by up), else the one asked for
if [ -z "${LOCAL_UP_MODE:-}" ] && [ -s "$LOCAL_UP_MODE_FILE" ] && [ "${1:-up}" != up ]; then
  LOCAL_UP_MODE=$(cat "$LOCAL_UP_MODE_FILE")
fi
LOCAL_UP_MODE=${LOCAL_UP_MODE:-default}
case "$LOCAL_UP_MODE" in default|kubeadm) ;; *) echo "LOCAL_UP_MODE=$LOCAL_UP_MODE: use kubeadm (or leave it unset)" >&2; exit 2 ;; esac
KUBEADM_STATE="$STATE/kubeadm"
KUBEADM_ADMIN="$KUBEADM_STATE/admin.conf"
KUBEADM_TIMEOUT=${KUBEADM_TIMEOUT:-300}
if [ "$LOCAL_UP_MODE" = kubeadm ]; then
  # node i at 10.251.0.<10+i>: .1 is the bridge
  NODE_IP_BASE=10
  KUBEADM_CP_IP=$(node_ip_of 1)
fi

kubeadm_bin() { echo "$BIN/kubeadm"; }

# run COMMAND... inside node I
in_node() { local i=$1; shift; "$NODE_NS" enter "$(node_name_of "$i")" "$(node_holder "$i")" -- "$@"; }

# the PATH kubeadm sees inside a node: `kubelet` is deckhand (preflight runs `kubelet --version`)
kubeadm_path_dir() {
  mkdir -p "$KUBEADM_STATE/bin"
  ln -sfn "$(deckhand_bin)" "$KUBEADM_STATE/bin/kubelet"
  ln -sfn "$(kubeadm_bin)" "$KUBEADM_STATE/bin/kubeadm"
  echo "$KUBEADM_STATE/bin"
}

# preflight checks that fail for a reason of the harness, not of deckhand (each ignored check
# still prints its [WARNING]):
#   SystemVerification  this host's cgroup v1 (kubeadm wants v2 from 1.35 on; the
#                       KubeletConfiguration says failCgroupV1: false, which deckhand honours)
# Warnings that remain and need nothing: ContainerRuntimeVersion (containerd 1.6 has no CRI
# RuntimeConfig; cgroupDriver comes from the KubeletConfiguration), Hostname (dh-node-<i> is in no
# DNS; the lookup goes to the machine's resolver and the guard rejects it at dh-nodes0),
# Service-kubelet (no systemd).
KUBEADM_IGNORE=SystemVerification

kubeadm_token() {
  if [ ! -s "$KUBEADM_STATE/token" ]; then
    ( umask 077; "$(kubeadm_bin)" token generate > "$KUBEADM_STATE/token" )
  fi
  cat "$KUBEADM_STATE/token"
}

kubeadm_init_config() {
  local token=$1
  cat <<EOF
# $MARKER: kubeadm init of dh-node-1 (LOCAL_UP_MODE=kubeadm)
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: "$token"
  description: "hack/local-up.sh kubeadm mode"
  ttl: 24h0m0s
localAPIEndpoint:
  advertiseAddress: $KUBEADM_CP_IP
  bindPort: $API_PORT
nodeRegistration:
  name: $(node_name_of 1)
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
  - {name: node-ip, value: "$KUBEADM_CP_IP"}
  # the node namespace's scratch tmpfs (hack/node-ns.sh), not the default /var/lib/kubelet
  - {name: root-dir, value: /var/lib/deckhand}
timeouts:
  # two cores start etcd and kube-apiserver while every node pulls: more than the 1m default
  kubernetesAPICall: 2m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: deckhand-kubeadm
kubernetesVersion: $KUBE_VERSION
controlPlaneEndpoint: "$KUBEADM_CP_IP:$API_PORT"
# registry.k8s.io is kubeadm's default: the nodes' containerd resolves it (and every common
# registry name) only to the local registry at $NODES_REGISTRY
imageRepository: registry.k8s.io
networking:
  podSubnet: $CLUSTER_CIDR
  serviceSubnet: $SERVICE_CIDR
  dnsDomain: $CLUSTER_DOMAIN
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
conntrack:
  # kind: leave the host-wide conntrack table size and TCP timeouts alone
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
nodePortAddresses: ["$NODES_CIDR"]
EOF
}

kubeadm_join_config() {
  local i=$1 token=$2 hash=$3
  cat <<EOF
# $MARKER: kubeadm join of $(node_name_of "$i") (LOCAL_UP_MODE=kubeadm)
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "$KUBEADM_CP_IP:$API_PORT"
    token: "$token"
    caCertHashes: ["$hash"]
nodeRegistration:
  name: $(node_name_of "$i")
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
  ignorePreflightErrors: [${KUBEADM_IGNORE}]
  kubeletExtraArgs:
  - {name: node-ip, value: "$(node_ip_of "$i")"}
  - {name: root-dir, value: /var/lib/deckhand}
EOF
}

# the drop-in of systemd/ (only the binary's path changed) where print-command finds it
kubeadm_dropin() {
  local i=$1 dir; dir="$NODES_STATE/$(node_name_of "$i")/systemd"
  mkdir -p "$dir/etc/systemd/system/deckhand.service.d"
  sed "s|/usr/bin/deckhand|$(deckhand_bin)|g" "$ROOT/systemd/deckhand.service.d/10-kubeadm.conf" \
    > "$dir/etc/systemd/system/deckhand.service.d/10-kubeadm.conf"
  sed "s|/usr/bin/deckhand|$(deckhand_bin)|g" "$ROOT/systemd/deckhand.service" \
    > "$dir/etc/systemd/system/deckhand.service"
  echo "$dir"
}

# what systemd would do once kubeadm's kubelet-start phase wrote its files: start deckhand with the
# drop-in's command line (read inside node I, where /var/lib/kubelet is the node's)
kubeadm_start_deckhand() {
  local i=$1 name dir prefix argv=()
  name=$(node_name_of "$i"); dir="$NODES_STATE/$name"
  prefix=$(kubeadm_dropin "$i")
  mapfile -d '' argv < <(in_node "$i" "$ROOT/vagrant/provision.sh" print-command --prefix "$prefix" --null)
  [ ${#argv[@]} -gt 0 ] || die "$name: no deckhand command line from the drop-in"
  # shellcheck disable=SC2206
  [ -z "${DECKHAND_ARGS:-}" ] || argv+=($DECKHAND_ARGS)
  printf '%s\n' "${argv[*]}" > "$dir/deckhand.cmdline"
  log "$name: deckhand starting the drop-in way: ${argv[*]} (log $LOGS/$name-deckhand.log)"
  start_daemon "$name-deckhand" RUST_LOG="${RUST_LOG:-info}" NO_COLOR="${NO_COLOR:-1}" -- \
    "$NODE_NS" enter "$name" "$(node_holder "$i")" -- "${argv[@]}"
}

# KUBEADM_PID's kubeadm (init or join) in node I: start deckhand once its kubelet-start phase wrote
# config.yaml and kubeadm-flags.env, then wait for kubeadm to finish
kubeadm_run_with_deckhand() {
  local i=$1 kpid=$2 what=$3 name dir t started=0
  name=$(node_name_of "$i"); dir="$NODES_STATE/$name"
  for t in $(seq 1 $((KUBEADM_TIMEOUT * 5))); do
    if [ "$started" = 0 ] && [ -s "$dir/var-lib-kubelet/kubeadm-flags.env" ] && [ -s "$dir/var-lib-kubelet/config.yaml" ]; then
      sleep 0.2
      kubeadm_start_deckhand "$i"
      started=1
    fi
    kill -0 "$kpid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$kpid" 2>/dev/null; then
    kill "$kpid" 2>/dev/null || true
    die "$name: kubeadm $what did not finish within ${KUBEADM_TIMEOUT}s (log $dir/kubeadm-$what.log)"
  fi
  wait "$kpid" || { tail -n 30 "$dir/kubeadm-$what.log" >&2; die "$name: kubeadm $what failed (log $dir/kubeadm-$what.log)"; }
  [ "$started" = 1 ] || die "$name: kubeadm $what finished without writing the kubelet's files"
}

kubeadm_init() {
  local name dir path token
  name=$(node_name_of 1); dir="$NODES_STATE/$name"
  if [ -s "$dir/etc-kubernetes/admin.conf" ]; then
    log "$name: kubeadm init already done"
    KUBEADM_REUSED=1
    [ -n "$(pid_of "$name-deckhand")" ] || kubeadm_start_deckhand 1
    return 0
  fi
  path=$(kubeadm_path_dir); token=$(kubeadm_token)
  kubeadm_init_config "$token" > "$KUBEADM_STATE/init.yaml"
  log "$name: kubeadm init --config $KUBEADM_STATE/init.yaml --ignore-preflight-errors=$KUBEADM_IGNORE (log $dir/kubeadm-init.log)"
  in_node 1 env PATH="$path:$PATH" kubeadm init --config "$KUBEADM_STATE/init.yaml" \
      --ignore-preflight-errors="$KUBEADM_IGNORE" --v=1 > "$dir/kubeadm-init.log" 2>&1 &
  kubeadm_run_with_deckhand 1 $! init
  cp "$dir/etc-kubernetes/admin.conf" "$KUBEADM_ADMIN"
  chmod 600 "$KUBEADM_ADMIN"
  log "$name: kubeadm init done; admin kubeconfig $KUBEADM_ADMIN"
}

kubeadm_join() {
  local i=$1 name dir path token hash
  name=$(node_name_of "$i"); dir="$NODES_STATE/$name"
  if [ -s "$dir/etc-kubernetes/kubelet.conf" ]; then
    [ -n "$(pid_of "$name-deckhand")" ] || kubeadm_start_deckhand "$i"
    return 0
  fi
  path=$(kubeadm_path_dir); token=$(kubeadm_token)
  hash=$("$ROOT/vagrant/provision.sh" ca-cert-hash "$NODES_STATE/$(node_name_of 1)/etc-kubernetes/pki/ca.crt")
  kubeadm_join_config "$i" "$token" "$hash" > "$KUBEADM_STATE/join-$name.yaml"
  log "$name: kubeadm join --config $KUBEADM_STATE/join-$name.yaml (log $dir/kubeadm-join.log)"
  in_node "$i" env PATH="$path:$PATH" kubeadm join --config "$KUBEADM_STATE/join-$name.yaml" --v=1 \
      > "$dir/kubeadm-join.log" 2>&1 &
  kubeadm_run_with_deckhand "$i" $! join
  log "$name: kubeadm join done"
}

kubeadm_wait_ready() {
  local t i left
  for t in $(seq 1 "$KUBEADM_TIMEOUT"); do
    left=()
    for i in $(seq 1 "$NODES"); do
      [ -e "$NODES_STATE/$(node_name_of "$i")/pod-cidr" ] || node_pod_network "$i" || true
      [ "$(node_field "$(node_name_of "$i")" '{.status.conditions[?(@.type=="Ready")].status}')" = True ] || left+=("$i")
    done
    [ ${#left[@]} = 0 ] && return 0
    sleep 1
  done
  die "node(s) ${left[*]} not Ready within ${KUBEADM_TIMEOUT}s"
}

kubeadm_wait_addons() {
  local t ds dep
  for t in $(seq 1 "$KUBEADM_TIMEOUT"); do
    ds=$("$KUBECTL" --kubeconfig "$KUBEADM_ADMIN" -n kube-system get ds kube-proxy -o 'jsonpath={.status.numberReady}/{.status.desiredNumberScheduled}' 2>/dev/null || true)
    dep=$("$KUBECTL" --kubeconfig "$KUBEADM_ADMIN" -n kube-system get deploy coredns -o 'jsonpath={.status.availableReplicas}/{.spec.replicas}' 2>/dev/null || true)
    # every node's (NODES, or more when a VM of hack/vm.sh has joined)
    [ "${ds%/*}" = "${ds#*/}" ] && [ "${ds#*/}" -ge "$NODES" ] 2>/dev/null && [ -n "$dep" ] && [ "${dep%/*}" = "${dep#*/}" ] && { log "kube-proxy $ds ready, coredns $dep available"; return 0; }
    sleep 1
  done
  die "kube-proxy ($ds) or coredns ($dep) not ready within ${KUBEADM_TIMEOUT}s"
}

cmd_up_kubeadm() {
  [[ "$NODES" =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || die "NODES=$NODES: use 1 to 200"
  mkdir -p "$STATE" "$LOGS" "$PIDS" "$KUBEADM_STATE"
  if [ -s "$LOCAL_UP_MODE_FILE" ] && [ "$(cat "$LOCAL_UP_MODE_FILE")" != kubeadm ] || { [ ! -s "$LOCAL_UP_MODE_FILE" ] && [ -n "$(pid_of kube-apiserver)" ]; }; then
    die "a default-mode cluster runs: hack/local-up.sh down first"
  fi
  check_owner
  echo "$ROOT" > "$OWNER_FILE"
  echo kubeadm > "$LOCAL_UP_MODE_FILE"
  log "up (LOCAL_UP_MODE=kubeadm): $NODES node(s) dh-node-1..dh-node-$NODES, state in $STATE"
  step_deps
  # kubeadm, and kube-scheduler for its image (the default mode has deckhand-scheduler and never builds it)
  "$ROOT/hack/build-k8s.sh" kubeadm kube-scheduler || die "hack/build-k8s.sh kubeadm kube-scheduler failed"
  [ -x "$(kubeadm_bin)" ] || die "no $(kubeadm_bin)"
  step_network
  step_registry
  log "images: CONTROL_PLANE_IMAGES=1 hack/images/build-images.sh"
  REGISTRY=$REGISTRY AUTH_REGISTRY=$REGISTRY_AUTH AUTH_CREDS_FILE=$REGISTRY_AUTH_CREDS_FILE \
    WITH_COREDNS=1 WITH_LOCAL_PATH=$LOCAL_UP_STORAGE CONTROL_PLANE_IMAGES=1 "$ROOT/hack/images/build-images.sh" 2>&1 | sed 's/^/    /'
  [ "${PIPESTATUS[0]}" = 0 ] || die "hack/images/build-images.sh failed"
  build_deckhand
  # the node's containerd config is the default mode's (its paths are the node's own)
  write_containerd_config
  nodes_host_network
  local i
  for i in $(seq 1 "$NODES"); do node_namespaces "$i"; done
  for i in $(seq 1 "$NODES"); do node_containerd "$i" & done
  for i in $(seq 1 "$NODES"); do wait -n || die "a node's containerd did not come up"; done
  ensure_guard_first
  local t0=$SECONDS
  kubeadm_init
  ADMIN_KUBECONFIG=$KUBEADM_ADMIN
  local t_init=$((SECONDS - t0))
  # the workers join side by side
  local pids=()
  for i in $(seq 2 "$NODES"); do kubeadm_join "$i" & pids+=($!); done
  for i in ${pids[@]+"${pids[@]}"}; do wait "$i" || die "a kubeadm join failed"; done
  kubeadm_wait_ready
  local t_ready=$((SECONDS - t0))
  ensure_guard_first
  kubeadm_wait_addons
  step_storage
  if [ "${KUBEADM_REUSED:-0}" = 1 ]; then
    log "up (kubeadm): the cluster of an earlier up is Ready (timings of its kubeadm init: $(cat "$KUBEADM_STATE/timings" 2>/dev/null))"
  else
    echo "init=${t_init}s ready=${t_ready}s addons=$((SECONDS - t0))s" > "$KUBEADM_STATE/timings"
    log "up (kubeadm): kubeadm init took ${t_init}s; kubeadm init -> $NODES node(s) Ready ${t_ready}s; -> kube-proxy and coredns ready $((SECONDS - t0))s"
  fi
  log "up: done in $((SECONDS - T0))s"
  cat <<EOF

kubeadm cluster is up ($NODES deckhand node(s), API https://$KUBEADM_CP_IP:$API_PORT). Next:

  export KUBECONFIG=$KUBEADM_ADMIN
  $KUBECTL get nodes -o wide
  $KUBECTL get pods -A -o wide
  logs: $LOGS/dh-node-<i>-{deckhand,containerd}.log, $NODES_STATE/dh-node-<i>/kubeadm-{init,join}.log
  hack/local-up.sh down
EOF
  nodes_print_walkthrough "kube-scheduler spreads them"
}
