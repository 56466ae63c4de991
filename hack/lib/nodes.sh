# shellcheck shell=bash
# hack/lib/nodes.sh: the extra nodes of NODES=N hack/local-up.sh up (N >= 2; NODES=1, the default,
# makes none and costs nothing): worker nodes dh-node-2 .. dh-node-N on this one machine, each a
# deckhand joined to the same API server the way the main node joins (bootstrap token, CSR).
#
# Each node is:
#   - a network namespace /run/netns/dh-node-<i> with eth0 = 10.251.0.<i>/24, a veth (host side
#     dhn<i>) on the host bridge dh-nodes0 (10.251.0.1/24), default route via the bridge; the API
#     server (10.250.0.1:6443, on the host) is reached through it, no new certificate SAN needed;
#   - mount, UTS and cgroup namespaces held by a holder process (hack/node-ns.sh holder, pid file
#     pids/dh-node-<i>-holder.pid) in the cgroup /dh-node-<i> of every hierarchy: inside, that
#     cgroup is the root, so the node's deckhand manages its own /kubepods (the host's
#     /dh-node-<i>/kubepods); the node's own directories ($NODES_STATE/dh-node-<i>/) are bound over
#     /run/containerd, /var/lib/containerd, /etc/cni/net.d, /var/lib/cni, /run/netns,
#     /var/log/pods, /var/log/containers and /etc/containerd/certs.d, and /var/lib/deckhand is a
#     tmpfs of DECKHAND_ROOT_SIZE;
#   - its own containerd (Debian's 1.6, the main node's config, whose paths are the node's own
#     inside its mount namespace; socket on the host at $NODES_STATE/dh-node-<i>/run-containerd/
#     containerd.sock), pulling through the mirror 10.251.0.1:5000 (a second docker-registry on
#     the bridge address, same storage as 127.0.0.1:5000, which a node's loopback cannot reach);
#   - its own deckhand (join files in $NODES_STATE/dh-node-<i>/join, serving certificate for its
#     node IP, log logs/dh-node-<i>-deckhand.log);
#   - its pod CIDR as kube-controller-manager allocates it (a /24 of 10.244.0.0/16; the main node
#     registers first and gets 10.244.0.0/24): once the Node has spec.podCIDR, the node's CNI
#     config (bridge dh-cni0 inside the node, no masquerade) is written and the host routes that
#     CIDR via the node's IP. Pods on other nodes are reached through the host (the node's default
#     route), which forwards between the bridge and dh-cni0; DECKHAND-POD-NAT keeps pod-to-pod
#     traffic from the main node un-masqueraded (the main node's CNI config masquerades).
# The host's DECKHAND-GUARD chains (hack/lib/network.sh) see every packet a node sends anywhere
# but its own bridge neighbours: nothing between dh-nodes0 and the machine's real interface.
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

# (LOCAL_UP_MODE=kubeadm: default 3, every node a namespace; hack/lib/kubeadm.sh)
NODES=${NODES:-$([ "${LOCAL_UP_MODE:-}" = kubeadm ] && echo 3 || echo 1)}
NODES_BRIDGE=dh-nodes0
NODES_GW=10.251.0.1
NODES_CIDR=10.251.0.0/24
NODES_STATE="$STATE/nodes"
NODES_REGISTRY=$NODES_GW:5000
POD_NAT=DECKHAND-POD-NAT
NODE_NS="$ROOT/hack/node-ns.sh"

node_name_of() { echo "dh-node-$1"; }
# node I at 10.251.0.<NODE_IP_BASE+I> (LOCAL_UP_MODE=kubeadm: 10, hack/lib/kubeadm.sh)
NODE_IP_BASE=0
node_ip_of() { echo "10.251.0.$((NODE_IP_BASE + $1))"; }
# the extra nodes that have state here (indices), running or not
nodes_present() {
  local d
  for d in "$NODES_STATE"/dh-node-*; do [ -d "$d" ] && echo "${d##*-}"; done | sort -n
  return 0
}
node_holder() { pid_of "$(node_name_of "$1")-holder"; }
# pids of every running holder, containerd and deckhand of the extra nodes (one line)
node_daemon_pids() {
  local f n
  for f in "$PIDS"/dh-node-*.pid; do
    [ -f "$f" ] || continue
    n=${f##*/}; pid_of "${n%.pid}"
  done | tr '\n' ' '
}

registry_nodes_healthy() { curl -sf --max-time 2 "http://$NODES_REGISTRY/v2/" >/dev/null 2>&1; }
node_containerd_healthy() {
  local sock="$NODES_STATE/$(node_name_of "$NODE_I")/run-containerd/containerd.sock"
  [ -S "$sock" ] && timeout 5 ctr --address "$sock" --timeout 2s plugins ls 2>/dev/null |
    awk '$1=="io.containerd.grpc.v1" && $2=="cri" {print $NF}' | grep -qx ok
}

# the bridge, the pod NAT exception and the registry on the bridge address
nodes_host_network() {
  # the mount points the holders will create on the host (node-ns.sh mkdirs a missing one), for
  # nodes_host_cleanup to remove again
  if [ ! -e "$NODES_STATE/made-mountpoints" ]; then
    mkdir -p "$NODES_STATE"
    local mp
    for mp in $("$NODE_NS" mountpoints); do [ -e "$mp" ] || echo "$mp"; done > "$NODES_STATE/made-mountpoints"
  fi
  if ! ip link show "$NODES_BRIDGE" >/dev/null 2>&1; then
    # hack/vm.sh up may make it at the same moment (the VM boots beside this)
    ip link add "$NODES_BRIDGE" type bridge 2>/dev/null || ip link show "$NODES_BRIDGE" >/dev/null
  fi
  sysctl -qw "net.ipv6.conf.$NODES_BRIDGE.disable_ipv6=1" 2>/dev/null || true
  ip addr replace "$NODES_GW/24" dev "$NODES_BRIDGE"
  ip link set "$NODES_BRIDGE" up
  # pod-to-pod traffic keeps its pod IPs (the main node's CNI config masquerades everything that
  # leaves 10.244.0.0/24); kube-proxy's marked packets (hairpin, external) go on to its
  # KUBE-POSTROUTING
  ensure_chain nat "$POD_NAT"
  ipt -t nat -A "$POD_NAT" -m mark --mark 0x4000/0x4000 -j RETURN
  ipt -t nat -A "$POD_NAT" -s "$CLUSTER_CIDR" -d "$CLUSTER_CIDR" -m comment --comment "deckhand: pods reach pods on other nodes unmasqueraded" -j ACCEPT
  ensure_jump nat POSTROUTING "$POD_NAT"
  write_if_changed "$STATE/registry/config-nodes.yml" <<EOF || true
# $MARKER: the registry's storage served on the nodes' bridge (read by the extra nodes' containerd)
version: 0.1
log:
  level: info
  fields:
    service: registry-nodes
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $STATE/registry/data
http:
  addr: $NODES_REGISTRY
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  # (port check skipped: 127.0.0.1:5000 is the main registry's, on the same port)
  ensure_daemon registry-nodes "" registry_nodes_healthy 30 -- "$(command -v docker-registry)" serve "$STATE/registry/config-nodes.yml"
}

# a bootstrap token for the extra nodes: the main node's, while its Secret exists, else one of
# their own (kept in $NODES_STATE/token)
nodes_token() {
  local token="" f
  for f in "$JOIN_DIR/etc/kubernetes/bootstrap-kubelet.conf" "$NODES_STATE/token"; do
    [ -f "$f" ] || continue
    if [ "${f##*/}" = token ]; then token=$(cat "$f"); else token=$(awk '$1 == "token:" {print $2}' "$f"); fi
    [ -n "$token" ] && "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get secret "bootstrap-token-${token%%.*}" >/dev/null 2>&1 &&
      { echo "$token"; return 0; }
  done
  token=$(KUBECTL=$KUBECTL "$ROOT/vagrant/provision.sh" token --kubeconfig "$ADMIN_KUBECONFIG" --ttl 24h --description "hack/local-up.sh extra nodes") ||
    die "creating a bootstrap token for the extra nodes failed"
  ( umask 077; echo "$token" > "$NODES_STATE/token" )
  echo "$token"
}

# network namespace, veth and holder of node I (idempotent)
node_namespaces() {
  local i=$1 name ip dir veth
  name=$(node_name_of "$i"); ip=$(node_ip_of "$i"); dir="$NODES_STATE/$name"; veth="dhn$i"
  mkdir -p "$dir"
  [ -e "/run/netns/$name" ] || ip netns add "$name"
  if ! ip link show "$veth" >/dev/null 2>&1; then
    ip link add "$veth" type veth peer name eth0 netns "$name"
  fi
  sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1" 2>/dev/null || true
  ip link set "$veth" master "$NODES_BRIDGE" up
  ip -n "$name" link set lo up
  ip netns exec "$name" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv4.ip_forward=1
  ip -n "$name" addr replace "$ip/24" dev eth0
  ip -n "$name" link set eth0 up
  ip -n "$name" route replace default via "$NODES_GW" dev eth0
  if [ -z "$(node_holder "$i")" ]; then
    rm -f "$dir/ready"
    start_daemon "$name-holder" -- "$NODE_NS" holder "$name" "$dir" "$DECKHAND_ROOT_SIZE"
    local t; for t in $(seq 1 50); do [ -e "$dir/ready" ] && break; sleep 0.1; done
    [ -e "$dir/ready" ] || die_log "$name-holder" "the namespaces of $name did not come up"
    log "$name: namespaces held by pid $(node_holder "$i") (netns $name, $ip; cgroup /$name)"
  fi
}

# containerd of node I: the main node's config (its paths are the node's own inside the node's
# mount namespace) and hosts.toml files that send every mirrored name to the bridge's registry
node_containerd() {
  local i=$1 name dir r
  name=$(node_name_of "$i"); dir="$NODES_STATE/$name"
  for r in "${MIRRORED_REGISTRIES[@]}" "$REGISTRY"; do
    write_if_changed "$dir/certs.d/$r/hosts.toml" <<EOF || true
# $MARKER: $r resolves ONLY to the local registry, at $NODES_REGISTRY on the nodes' bridge
server = "http://$NODES_REGISTRY"

[host."http://$NODES_REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
  done
  NODE_I=$i ensure_daemon "$name-containerd" "" node_containerd_healthy 60 -- \
    "$NODE_NS" enter "$name" "$(node_holder "$i")" -- "$(command -v containerd)" --config "$CONTAINERD16_CONFIG"
}

# deckhand of node I, joined with the extra nodes' token (kubeadm join's files under the node's
# directory, as ensure_join_files does for the main node)
node_deckhand() {
  local i=$1 name ip dir prov="$ROOT/vagrant/provision.sh" argv=()
  name=$(node_name_of "$i"); ip=$(node_ip_of "$i"); dir="$NODES_STATE/$name"
  if [ ! -f "$dir/join/etc/kubernetes/bootstrap-kubelet.conf" ] && [ ! -f "$dir/join/etc/kubernetes/kubelet.conf" ] ||
     ! [ -f "$dir/join/etc/systemd/system/deckhand.service.d/10-kubeadm.conf" ]; then
    local extra="--address=$ip --root-dir=$DECKHAND_ROOT_DIR --tls-cert-file=$PKI/$name-serving.crt --tls-private-key-file=$PKI/$name-serving.key"
    "$prov" join --api-server "$NODE_IP:$API_PORT" --token "$NODES_JOIN_TOKEN" \
        --discovery-token-ca-cert-hash "$("$prov" ca-cert-hash "$PKI/ca.crt")" \
        --node-name "$name" --node-ip "$ip" --deckhand-bin "$(deckhand_bin)" \
        --cri-socket "unix://$CONTAINERD16_SOCK" --prefix "$dir/join" --skip-phases packages,containerd,start \
        --extra-args "$extra" > "$dir/join.log" 2>&1 ||
      { cat "$dir/join.log" >&2; die "$name: vagrant/provision.sh join failed (log $dir/join.log)"; }
  fi
  mapfile -d '' argv < <("$prov" print-command --prefix "$dir/join" --null)
  [ ${#argv[@]} -gt 0 ] || die "$name: no deckhand command line from $dir/join"
  # shellcheck disable=SC2206
  [ -z "${DECKHAND_ARGS:-}" ] || argv+=($DECKHAND_ARGS)
  local full=("$NODE_NS" enter "$name" "$(node_holder "$i")" -- "${argv[@]}")
  if running_as "$name-deckhand" "${full[@]}" &&
     [ "$(readlink "/proc/$(pid_of "$name-deckhand")/exe")" != "$(readlink -f "${argv[0]}") (deleted)" ]; then
    return 0
  fi
  [ -z "$(pid_of "$name-deckhand")" ] || stop_daemon "$name-deckhand" 30
  log "$name: deckhand starting (log $LOGS/$name-deckhand.log)"
  start_daemon "$name-deckhand" RUST_LOG="${RUST_LOG:-info}" NO_COLOR="${NO_COLOR:-1}" -- "${full[@]}"
}

node_field() {  # NAME JSONPATH
  "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" get node "$1" -o "jsonpath=$2" 2>/dev/null
}

# once kube-controller-manager gave node I its pod CIDR: the node's CNI config and the host route
node_pod_network() {
  local i=$1 name ip dir cidr
  name=$(node_name_of "$i"); ip=$(node_ip_of "$i"); dir="$NODES_STATE/$name"
  cidr=$(node_field "$name" '{.spec.podCIDR}')
  [ -n "$cidr" ] || return 1
  local gw="${cidr%.*/*}.1"
  mkdir -p "$dir/cni-net.d"
  cni_conflist "$cidr" "$gw" false | write_if_changed "$dir/cni-net.d/10-deckhand.conflist" || true
  ip route replace "$cidr" via "$ip" dev "$NODES_BRIDGE"
  echo "$cidr" > "$dir/pod-cidr"
}

# NODES=N: nodes 2..N up and Ready; nodes above N (of an earlier up) removed
step_nodes() {
  [[ "$NODES" =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || die "NODES=$NODES: use 1 to 200"
  local i extra=() present
  present=$(nodes_present)
  for i in $present; do [ "$i" -le "$NODES" ] || nodes_remove "$i"; done
  if [ "$NODES" -le 1 ]; then
    [ -z "$present" ] || nodes_host_cleanup
    return 0
  fi
  [ "$CONTAINERD_MODE" = 1.6 ] || die "NODES=$NODES: the extra nodes run containerd 1.6 only (this cluster runs $CONTAINERD_MODE)"
  local t0=$SECONDS
  log "nodes: $((NODES - 1)) extra node(s) dh-node-2..dh-node-$NODES on bridge $NODES_BRIDGE ($NODES_GW/24)"
  mkdir -p "$NODES_STATE"
  nodes_host_network
  NODES_JOIN_TOKEN=$(nodes_token)
  for i in $(seq 2 "$NODES"); do
    local name; name=$(node_name_of "$i")
    gen_cert "$name-serving" "/O=system:nodes/CN=system:node:$name" serverAuth \
      "IP:$(node_ip_of "$i"), IP:127.0.0.1, DNS:$name, DNS:localhost"
    node_namespaces "$i"
    extra+=("$i")
  done
  # containerd and deckhand of every node start side by side; then each gets its pod network
  for i in "${extra[@]}"; do node_containerd "$i" & done
  for i in "${extra[@]}"; do wait -n || die "an extra node's containerd did not come up"; done
  for i in "${extra[@]}"; do node_deckhand "$i"; done
  local pending=("${extra[@]}") left t
  for t in $(seq 1 "$DECKHAND_WAIT_TIMEOUT"); do
    left=()
    for i in "${pending[@]}"; do
      [ -e "$NODES_STATE/$(node_name_of "$i")/pod-cidr" ] && [ "$(cat "$NODES_STATE/$(node_name_of "$i")/pod-cidr")" = "$(node_field "$(node_name_of "$i")" '{.spec.podCIDR}')" ] ||
        node_pod_network "$i" || true
      [ "$(node_field "$(node_name_of "$i")" '{.status.conditions[?(@.type=="Ready")].status}')" = True ] || left+=("$i")
      [ -n "$(pid_of "$(node_name_of "$i")-deckhand")" ] || die_log "$(node_name_of "$i")-deckhand" "deckhand of $(node_name_of "$i") exited"
    done
    pending=(${left[@]+"${left[@]}"})
    [ ${#pending[@]} -gt 0 ] || break
    sleep 1
  done
  [ ${#pending[@]} = 0 ] || die_log "$(node_name_of "${pending[0]}")-deckhand" "node(s) ${pending[*]} not Ready within ${DECKHAND_WAIT_TIMEOUT}s"
  ensure_guard_first
  log "nodes: dh-node-2..dh-node-$NODES Ready in $((SECONDS - t0))s"
}

# the DaemonSet controller has seen every node (kube-proxy's desiredNumberScheduled is at least
# NODES), so that wait_kube_proxy's ready == desired covers the extra nodes too. (After a smaller
# NODES it stays above NODES until kube-controller-manager's pod GC deletes the removed nodes'
# pods, 40 s or more: the DaemonSet controller does not watch Node deletions.)
nodes_wait_daemonset() {
  local t d
  for t in $(seq 1 30); do
    d=$("$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" -n kube-system get daemonset kube-proxy \
          -o 'jsonpath={.status.desiredNumberScheduled}' 2>/dev/null || true)
    [[ "$d" =~ ^[0-9]+$ ]] && [ "$d" -ge "$NODES" ] && return 0
    sleep 1
  done
  warn "kube-proxy's DaemonSet does not count $NODES nodes after 30s"
}

# stop node I's deckhand only (its containerd and pods keep running): the node goes NotReady
node_stop_deckhand() { stop_daemon "$(node_name_of "$1")-deckhand" 30; }

# everything of node I: its Node object (while the API server answers), every process in its
# cgroups (holder, containerd, shims, containers), the cgroups, the netns (with it the veth and
# the pods' interfaces), its host route and its directory. Its mounts lived only in its mount
# namespace, which ends with its last process.
nodes_remove() {
  local i=$1 name dir d pids n
  name=$(node_name_of "$i"); dir="$NODES_STATE/$name"
  log "nodes: removing $name"
  if [ -n "$(pid_of kube-apiserver)" ] && apiserver_ready; then
    "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" delete node "$name" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  fi
  stop_daemon "$name-deckhand" 10
  stop_daemon "$name-containerd" 10
  for n in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(cat /sys/fs/cgroup/*/"$name"/cgroup.procs /dev/null 2>/dev/null; find /sys/fs/cgroup/*/"$name" -mindepth 2 -name cgroup.procs -exec cat {} + 2>/dev/null)
    pids=$(sort -u <<<"$pids" | tr '\n' ' ')
    [ -n "${pids// /}" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  stop_daemon "$name-holder" 2
  for d in /sys/fs/cgroup/*/"$name"; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$d" ] && warn "could not remove every cgroup under $d"
  done
  [ -f "$dir/pod-cidr" ] && ip route del "$(cat "$dir/pod-cidr")" 2>/dev/null || true
  ip link del "dhn$i" 2>/dev/null || true
  if [ -e "/run/netns/$name" ]; then ip netns del "$name" 2>/dev/null || warn "could not remove netns $name"; fi
  rm -rf --one-file-system "$dir" || warn "could not remove every file of $dir"
}

# the host side shared by all extra nodes: the registry on the bridge, the pod NAT exception,
# the bridge (and with it every route through it)
nodes_host_cleanup() {
  stop_daemon registry-nodes
  remove_chains "$POD_NAT" nat >/dev/null
  ip link show "$NODES_BRIDGE" >/dev/null 2>&1 && ip link del "$NODES_BRIDGE"
  local mp
  for mp in $(cat "$NODES_STATE/made-mountpoints" 2>/dev/null); do rmdir "$mp" 2>/dev/null || true; done
  rm -rf "$NODES_STATE"
  return 0
}

# down: every extra node, then the host side
nodes_down() {
  local i
  for i in $(nodes_present); do nodes_remove "$i"; done
  if [ -d "$NODES_STATE" ] || ip link show "$NODES_BRIDGE" >/dev/null 2>&1 || [ -n "$(pid_of registry-nodes)" ]; then
    nodes_host_cleanup
  fi
  return 0
}

# status lines of the extra nodes
nodes_status() {
  local i name
  for i in $(nodes_present); do
    name=$(node_name_of "$i")
    printf '%-24s %s\n' "$name" "$(node_ip_of "$i"), holder $(node_holder "$i" || true), containerd $(pid_of "$name-containerd" || true), deckhand $(pid_of "$name-deckhand" || true), pod CIDR $(cat "$NODES_STATE/$name/pod-cidr" 2>/dev/null || echo '?')"
  done
  [ -z "$(pid_of registry-nodes)" ] || printf '%-24s running (pid %s), %s\n' registry-nodes "$(pid_of registry-nodes)" "$NODES_REGISTRY"
  return 0
}

# The self-healing walk-through on several nodes, printed after up (NODES>=2 and the kubeadm
# mode); $1 says who spreads the pods.
nodes_print_walkthrough() {
  cat <<EOF

  The self-healing walk-through on several nodes:
    $KUBECTL create deployment web --image=busybox --replicas=6 -- sleep 3600
    $KUBECTL get pods -o wide                  ($1)
    $KUBECTL delete pod <one of them>          (a replacement runs within seconds)
    hack/local-up.sh stop-node <i>; $KUBECTL get nodes -w   (<i>: a worker, 2..N)
        (dh-node-<i> NotReady after about 50 s; its pods are replaced on the other nodes once
        their node.kubernetes.io/unreachable toleration ends: 300 s by default, tolerationSeconds
        in the pod template shortens it)
    hack/local-up.sh start-node <i>            (Ready again; its old pods are cleaned up there)
EOF
}
