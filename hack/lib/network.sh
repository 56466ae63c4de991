# shellcheck shell=bash
# hack/lib/network.sh: the harness's host network: the node IP's interface (deckhand0), the
# blackhole route for the Service CIDR, ip_forward, the iptables guard chains (DECKHAND-GUARD*)
# that keep pods and the machine's real network apart, and the cleanup `down` does (CNI bridge,
# netns and IPAM state, CNI-* and KUBE-* chains, the guards, the interface).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

ipt() { iptables -w 5 "$@"; }

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

# /run/netns as a shared mount point of its own, before containerd makes pod network namespaces
# in it (what `ip netns add` does the first time: iproute2 bind-mounts the directory onto itself,
# recursively, and makes it shared). containerd 1.6 bind-mounts each pod's netns straight onto
# /run/netns/cni-*; if the directory is not a mount point yet, the first `ip netns add` (an
# extra node's namespace) copies every such mount into its new bind mount, and containerd can
# never remove those pods' netns files again (it unmounts the copy, the original underneath
# keeps the file busy: "failed to remove netns: unlinkat ...: device or resource busy"). Seen on
# a freshly booted machine, whose /run/netns had never been a mount point.
netns_dir_shared() {
  mkdir -p /run/netns
  mountpoint -q /run/netns || mount --bind /run/netns /run/netns
  mount --make-shared /run/netns
}

step_network() {
  log "network: $DUMMY_IF $NODE_IP/32, blackhole $SERVICE_CIDR, guard chains"
  mkdir -p "$STATE"
  netns_dir_shared
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
    # the extra nodes (NODES=N, hack/lib/nodes.sh) sit on their bridge: nothing of theirs, node
    # IPs included, crosses to or from the real interface (no effect while the bridge is absent)
    [ "$rif" = "$NODES_BRIDGE" ] || {
      ipt -A "$GUARD_FWD" -i "$NODES_BRIDGE" -o "$rif" -m comment --comment "deckhand: extra nodes never reach the real network" -j REJECT --reject-with icmp-net-unreachable
      ipt -A "$GUARD_FWD" -i "$rif" -o "$NODES_BRIDGE" -m comment --comment "deckhand: the real network never reaches extra nodes" -j REJECT --reject-with icmp-net-unreachable
    }
  fi
  ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -o "$CNI_BRIDGE" -j RETURN
  # pods of the extra nodes, behind their node IPs on the bridge
  ipt -A "$GUARD_FWD" -s "$CLUSTER_CIDR" -o "$NODES_BRIDGE" -j RETURN
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
# cleanup (down)
# ---------------------------------------------------------------------------------------------

# the jumps from built-in chains to the chains named PREFIX*, then those chains, in each TABLE;
# prints the tables where some are left
remove_chains() {  # PREFIX TABLE...
  local prefix=$1 table chain rule
  shift
  for table in "$@"; do
    ipt -t "$table" -S 2>/dev/null | { grep -E "^-A [A-Z]+ .*-j ${prefix}" || true; } | while IFS= read -r rule; do
      # shellcheck disable=SC2086
      eval "ipt -t $table -D ${rule#-A }" 2>/dev/null || true
    done
    for chain in $(ipt -t "$table" -S 2>/dev/null | awk -v p="^$prefix" '$1 == "-N" && $2 ~ p {print $2}'); do
      ipt -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $(ipt -t "$table" -S 2>/dev/null | awk -v p="^$prefix" '$1 == "-N" && $2 ~ p {print $2}'); do
      ipt -t "$table" -X "$chain" 2>/dev/null || true
    done
    [ -z "$(ipt -t "$table" -S 2>/dev/null | grep -E "^-N ${prefix}" || true)" ] || echo "$table"
  done
}

# the CNI plugins' chains (CNI-*): drop every rule that jumps to one from a built-in chain, then
# the chains themselves
cleanup_cni_iptables() {
  remove_chains CNI- nat filter mangle >/dev/null
}

# kube-proxy's chains (KUBE-*) in every table, with the jumps to them from the built-in chains
# (kube-proxy --cleanup would also try IPVS and nftables cleanup on the host; this is only what
# iptables mode leaves)
cleanup_kube_proxy_iptables() {
  local table
  for table in $(remove_chains KUBE- nat filter mangle raw); do
    warn "some KUBE-* chains in table $table could not be removed"
  done
}

cleanup_network() {
  local ns
  # pod network namespaces left by CNI
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns" 2>/dev/null || true
  done
  # a netns file still busy has its mount hidden under the /run/netns bind mount (see
  # netns_dir_shared: made by an earlier harness version): with no node namespace left, that
  # bind goes, the hidden mounts are removed, and netns_dir_shared makes it again at the next up
  if compgen -G '/run/netns/cni-*' >/dev/null && mountpoint -q /run/netns && umount /run/netns 2>/dev/null; then
    for ns in /run/netns/cni-*; do
      [ -e "$ns" ] || continue
      umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
      rm -f "$ns" 2>/dev/null || true
    done
  fi
  if compgen -G '/run/netns/cni-*' >/dev/null; then
    warn "pod network namespaces left in /run/netns: $(cd /run/netns && echo cni-*)"
  fi
  rm -rf "/var/lib/cni/networks/$CNI_NAME" "/var/lib/cni/results/$CNI_NAME"-* 2>/dev/null || true
  ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && ip link del "$CNI_BRIDGE"
  # without iptables (a machine hack/install-deps.sh has not set up yet) no chain of ours can exist
  if command -v iptables >/dev/null 2>&1; then
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
  fi
  ip route del blackhole "$SERVICE_CIDR" 2>/dev/null || true
  ip link show "$DUMMY_IF" >/dev/null 2>&1 && ip link del "$DUMMY_IF"
  if [ -s "$STATE/ip_forward.orig" ]; then
    sysctl -qw net.ipv4.ip_forward="$(cat "$STATE/ip_forward.orig")"
    rm -f "$STATE/ip_forward.orig"
  fi
  return 0
}
