# shellcheck shell=bash
# hack/lib/libvirt.sh: libvirtd and virtlogd started by hand (this machine has no systemd as PID
# 1), with the two isolated networks and the storage pool that vagrant/Vagrantfile's libvirt
# provider uses, a guard chain, and a stop that leaves nothing behind. Sourced by
# hack/vagrant-box.sh (its start, stop and status commands); needs ROOT, and hack/lib/network.sh
# (ipt, real_iface, ensure_chain, ensure_jump) sourced first.
#
# What lv_start makes (all of it transient: nothing is defined in /etc/libvirt, so a stopped
# libvirtd remembers none of it):
#   - virtlogd -d and libvirtd -d (pid files /run/virtlogd.pid and /run/libvirtd.pid, their pids
#     recorded in $LV_STATE: lv_stop stops only what lv_start started; a libvirtd that was
#     already running is used and left alone). libvirtd logs warnings and errors to
#     /var/log/libvirt/deckhand-libvirtd.log. The domains are type qemu (TCG: KVM does not work
#     here, /work/shared/notes/vm-on-this-machine.md), but /dev/kvm exists, root's only (0600
#     root:root), and libvirt 9.0 then finds at every call "KVM was enabled when probing
#     '/usr/bin/qemu-system-x86_64', but it is not available now" (its probe finds KVM, its
#     check that QEMU's user libvirt-qemu may open /dev/kvm does not) and probes QEMU again:
#     4 s a binary, `virsh capabilities` 8 s, a `vagrant up` 2 minutes longer. So lv_start gives
#     /dev/kvm the group and mode Debian's udev gives it (kvm, 0660; libvirt-qemu is in kvm)
#     while libvirtd runs, and lv_stop puts back what it was (recorded in $LV_STATE/kvm.orig).
#     libvirt's own NAT network `default` (Debian's libvirt-daemon-config-network) is never
#     started: lv_start turns its autostart off first
#     (`virsh net-autostart default --disable` done by hand: the link in
#     /etc/libvirt/qemu/networks/autostart/) and refuses to go on if it is active;
#   - the network dh-vagrant0 (bridge dh-vagrant0, 10.252.0.1/24): the management network of
#     vagrant-libvirt (the Vagrantfile's management_network_name/address). Isolated: no
#     <forward> element, so libvirt adds no NAT and rejects everything routed in or out of the
#     bridge (its LIBVIRT_FWI/FWO chains); DHCP 10.252.0.100-199 (vagrant-libvirt finds the VM's
#     address in the leases), no DNS (dnsmasq with port=0), no IPv6;
#   - the network dh-vagrant1 (bridge dh-vagrant1, 10.252.1.1/24): the node's private network
#     (the Vagrantfile's node IP 10.252.1.10, set by Vagrant in the guest), isolated the same
#     way, no DHCP, no DNS;
#   - the storage pool `default` (dir /var/lib/libvirt/images), where vagrant-libvirt uploads
#     the box image and makes each VM's disk (the files stay when the pool is stopped:
#     lv_stop --purge removes them);
#   - the guard chains DECKHAND-GUARD-VAGRANT (filter FORWARD and nat POSTROUTING, IPv4 and
#     IPv6 for FORWARD), jumped to first: nothing crosses between the dh-vagrant bridges and
#     the machine's real interface (the default route's), and nothing from 10.252.0.0/16 is
#     NATed to it, whatever libvirt adds.
# lv_stop: every running domain destroyed (a `vagrant destroy` should have done it: said so),
# every active network and pool stopped, libvirtd and virtlogd stopped (only if lv_start started
# them), libvirt's LIBVIRT_* chains and their jumps removed (libvirt leaves them once made), the
# guard chains removed; then it checks that no dh-vagrant*/virbr* bridge, vnet* tap, dnsmasq of
# libvirt's, QEMU of libvirt's or LIBVIRT_* chain is left, and says what is.

LV_STATE=${LV_STATE:-/run/deckhand-libvirt}
LV_URI=qemu:///system
LV_LOG=/var/log/libvirt/deckhand-libvirtd.log
LV_GUARD=DECKHAND-GUARD-VAGRANT
LV_SUPERNET=10.252.0.0/16
LV_BRIDGE_PREFIX=dh-vagrant
# name bridge address/prefix dhcp-range-start dhcp-range-end (- - for none)
LV_NETWORKS=("dh-vagrant0 dh-vagrant0 10.252.0.1 24 10.252.0.100 10.252.0.199"
             "dh-vagrant1 dh-vagrant1 10.252.1.1 24 - -")
LV_POOL=default
LV_POOL_DIR=/var/lib/libvirt/images

LV_T0=$SECONDS
lv_log() { printf '[libvirt %3ss] %s\n' "$((SECONDS - LV_T0))" "$*" >&2; }
lv_warn() { printf '[libvirt %3ss] WARNING: %s\n' "$((SECONDS - LV_T0))" "$*" >&2; }
lv_die() { printf '[libvirt %3ss] ERROR: %s\n' "$((SECONDS - LV_T0))" "$*" >&2; exit 1; }

lv_virsh() { virsh -q -c "$LV_URI" "$@"; }

# the pid in FILE if that process runs and is called NAME
lv_pid_of() {  # PIDFILE NAME
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] &&
    ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$pid/status" 2>/dev/null && echo "$pid"
  return 0
}
lv_libvirtd_pid() { lv_pid_of /run/libvirtd.pid libvirtd; }
lv_virtlogd_pid() { lv_pid_of /run/virtlogd.pid virtlogd; }

lv_up() { lv_virsh version >/dev/null 2>&1; }

# DAEMON: start it daemonized unless it runs; record its pid when we started it
lv_daemon_start() {  # NAME PIDFUNC ARGS...
  local name=$1 pidf=$2 pid _; shift 2
  pid=$($pidf)
  if [ -n "$pid" ]; then
    if [ "$(cat "$LV_STATE/$name.pid" 2>/dev/null)" = "$pid" ]; then
      lv_log "$name runs (pid $pid, started by hack/vagrant-box.sh start)"
    else
      lv_warn "$name already runs (pid $pid), not started by hack/vagrant-box.sh: using it; stop will leave it running"
    fi
    return 0
  fi
  rm -f "$LV_STATE/$name.pid"
  # no descriptor of ours (locks, the caller's pipes) lives on in the daemon
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      { [ "$fd" -gt 2 ] && eval "exec $fd>&-"; } 2>/dev/null || true
    done
    LIBVIRT_LOG_OUTPUTS="3:file:$LV_LOG" exec "$@" </dev/null >/dev/null 2>&1
  ) || lv_die "$name did not start (log $LV_LOG)"
  for _ in $(seq 1 100); do pid=$($pidf); [ -n "$pid" ] && break; sleep 0.1; done
  [ -n "$pid" ] || lv_die "$name started but wrote no pid file (log $LV_LOG)"
  echo "$pid" > "$LV_STATE/$name.pid"
  lv_log "$name started (pid $pid)"
}

lv_daemon_stop() {  # NAME PIDFUNC
  local name=$1 pidf=$2 pid _
  pid=$($pidf)
  if [ -z "$pid" ]; then rm -f "$LV_STATE/$name.pid"; return 0; fi
  if [ "$(cat "$LV_STATE/$name.pid" 2>/dev/null)" != "$pid" ]; then
    lv_warn "$name (pid $pid) was not started by hack/vagrant-box.sh start: left running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do [ -n "$($pidf)" ] || break; sleep 0.1; done
  if [ -n "$($pidf)" ]; then
    lv_warn "$name (pid $pid) still runs 10 s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -n "$($pidf)" ] || break; sleep 0.1; done
  fi
  [ -z "$($pidf)" ] || lv_die "$name (pid $pid) does not exit"
  rm -f "$LV_STATE/$name.pid"
  lv_log "$name stopped (pid $pid)"
}

lv_network_xml() {  # NAME BRIDGE ADDR PREFIX DHCP_START DHCP_END
  echo "<network ipv6='no'>"
  echo "  <name>$1</name>"
  echo "  <bridge name='$2' stp='off' delay='0'/>"
  echo "  <!-- no <forward>: isolated (nothing routed in or out of the bridge, no NAT) -->"
  echo "  <dns enable='no'/>"
  echo "  <ip address='$3' prefix='$4'>"
  [ "$5" = - ] || echo "    <dhcp><range start='$5' end='$6'/></dhcp>"
  echo "  </ip>"
  echo "</network>"
}

lv_networks() {
  local spec name bridge addr prefix s e xml
  for spec in "${LV_NETWORKS[@]}"; do
    read -r name bridge addr prefix s e <<<"$spec"
    if lv_virsh net-info "$name" >/dev/null 2>&1; then
      lv_virsh net-info "$name" | grep -q '^Active:[[:space:]]*yes' || lv_virsh net-start "$name" >/dev/null
      lv_log "network $name ($bridge, $addr/$prefix) active"
      continue
    fi
    xml="$LV_STATE/$name.xml"
    lv_network_xml "$name" "$bridge" "$addr" "$prefix" "$s" "$e" > "$xml"
    lv_virsh net-create "$xml" >/dev/null || lv_die "virsh net-create $xml failed"
    if [ "$s" = - ]; then s="no DHCP"; else s="DHCP $s-$e"; fi
    lv_log "network $name created: bridge $bridge $addr/$prefix, isolated, $s, no DNS"
  done
}

lv_pool() {
  if lv_virsh pool-info "$LV_POOL" >/dev/null 2>&1; then
    lv_virsh pool-info "$LV_POOL" | grep -q '^State:[[:space:]]*running' || lv_virsh pool-start "$LV_POOL" >/dev/null
    return 0
  fi
  mkdir -p "$LV_POOL_DIR"
  lv_virsh pool-create-as "$LV_POOL" dir --target "$LV_POOL_DIR" >/dev/null || lv_die "virsh pool-create-as $LV_POOL failed"
  lv_log "storage pool $LV_POOL ($LV_POOL_DIR) started"
}

lv_guard() {
  local rif; rif=$(real_iface)
  ensure_chain filter "$LV_GUARD"
  ip6tables -w 5 -N "$LV_GUARD" 2>/dev/null || ip6tables -w 5 -F "$LV_GUARD"
  if [ -n "$rif" ] && [[ "$rif" != "$LV_BRIDGE_PREFIX"* ]]; then
    ipt -A "$LV_GUARD" -i "$LV_BRIDGE_PREFIX+" -o "$rif" -m comment --comment "deckhand: the vagrant networks never reach the real network" -j REJECT --reject-with icmp-net-unreachable
    ipt -A "$LV_GUARD" -i "$rif" -o "$LV_BRIDGE_PREFIX+" -m comment --comment "deckhand: the real network never reaches the vagrant networks" -j REJECT --reject-with icmp-net-unreachable
    ipt -A "$LV_GUARD" -s "$LV_SUPERNET" -o "$rif" -m comment --comment "deckhand: the vagrant networks never reach the real network" -j REJECT --reject-with icmp-net-unreachable
    ip6tables -w 5 -A "$LV_GUARD" -i "$LV_BRIDGE_PREFIX+" -o "$rif" -m comment --comment "deckhand: the vagrant networks never reach the real network" -j REJECT
    ip6tables -w 5 -A "$LV_GUARD" -i "$rif" -o "$LV_BRIDGE_PREFIX+" -m comment --comment "deckhand: the real network never reaches the vagrant networks" -j REJECT
  fi
  ensure_jump filter FORWARD "$LV_GUARD"
  while ip6tables -w 5 -D FORWARD -j "$LV_GUARD" 2>/dev/null; do :; done
  ip6tables -w 5 -I FORWARD 1 -j "$LV_GUARD"
  ensure_chain nat "$LV_GUARD"
  [ -z "$rif" ] || ipt -t nat -A "$LV_GUARD" -s "$LV_SUPERNET" -o "$rif" -m comment --comment "deckhand: the vagrant networks are never NATed to the real network" -j ACCEPT
  ensure_jump nat POSTROUTING "$LV_GUARD"
}

lv_unguard() {
  local cmd t h
  for cmd in iptables ip6tables; do
    for t in filter nat; do
      [ "$cmd/$t" != ip6tables/nat ] || continue
      h=FORWARD; [ "$t" = filter ] || h=POSTROUTING
      while $cmd -w 5 -t "$t" -D "$h" -j "$LV_GUARD" 2>/dev/null; do :; done
      $cmd -w 5 -t "$t" -F "$LV_GUARD" 2>/dev/null || true
      $cmd -w 5 -t "$t" -X "$LV_GUARD" 2>/dev/null || true
    done
  done
}

# libvirt's private chains (made with its first network, never removed by libvirt): their jumps
# and, once empty (no network left), the chains
lv_remove_libvirt_chains() {
  local cmd t c h left=""
  for cmd in iptables ip6tables; do
    for t in filter nat mangle; do
      for c in $($cmd -w 5 -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^LIBVIRT_/ {print $2}'); do
        if [ -n "$($cmd -w 5 -t "$t" -S "$c" | sed 1d)" ]; then left+=" $cmd/$t/$c"; continue; fi
        for h in INPUT OUTPUT FORWARD PREROUTING POSTROUTING; do
          while $cmd -w 5 -t "$t" -D "$h" -j "$c" 2>/dev/null; do :; done
        done
        $cmd -w 5 -t "$t" -X "$c" 2>/dev/null || left+=" $cmd/$t/$c"
      done
    done
  done
  [ -z "$left" ] || lv_warn "libvirt chains not empty, kept:$left"
}

# /dev/kvm as Debian's udev makes it (group kvm, 0660), the original recorded (see the header)
lv_kvm_device() {
  [ -c /dev/kvm ] && getent group kvm >/dev/null || return 0
  [ -s "$LV_STATE/kvm.orig" ] || stat -c '%u:%g %a' /dev/kvm > "$LV_STATE/kvm.orig"
  if [ "$(stat -c '%G %a' /dev/kvm)" != "kvm 660" ]; then
    chgrp kvm /dev/kvm && chmod 0660 /dev/kvm
    lv_log "/dev/kvm: group kvm, mode 0660 while libvirtd runs (was $(cat "$LV_STATE/kvm.orig"))"
  fi
}

lv_kvm_restore() {
  local owner mode
  [ -s "$LV_STATE/kvm.orig" ] && [ -c /dev/kvm ] || return 0
  read -r owner mode < "$LV_STATE/kvm.orig"
  chown "$owner" /dev/kvm && chmod "$mode" /dev/kvm && rm -f "$LV_STATE/kvm.orig"
  lv_log "/dev/kvm: owner and mode back to $owner $mode"
}

lv_start() {
  [ "$(id -u)" = 0 ] || lv_die "run as root"
  if ! command -v libvirtd >/dev/null || ! command -v virsh >/dev/null; then
    lv_die "libvirt is not installed: hack/install-deps.sh vagrant"
  fi
  mkdir -p "$LV_STATE" "$(dirname "$LV_LOG")"
  if [ -z "$(lv_libvirtd_pid)" ] && [ -e /etc/libvirt/qemu/networks/autostart/default.xml ]; then
    rm -f /etc/libvirt/qemu/networks/autostart/default.xml
    lv_log "libvirt's NAT network 'default' will not autostart (its autostart link removed)"
  fi
  lv_daemon_start virtlogd lv_virtlogd_pid virtlogd -d
  lv_kvm_device
  lv_daemon_start libvirtd lv_libvirtd_pid libvirtd -d
  local _
  for _ in $(seq 1 300); do lv_up && break; sleep 0.1; done
  lv_up || lv_die "libvirtd does not answer on $LV_URI (log $LV_LOG)"
  if lv_virsh net-info default 2>/dev/null | grep -q '^Active:[[:space:]]*yes'; then
    lv_die "libvirt's NAT network 'default' is active: it must not be (virsh net-destroy default)"
  fi
  lv_networks
  lv_pool
  lv_guard
  lv_check_isolated
}

# nothing of the vagrant networks can leave by the real interface: no route over a dh-vagrant
# bridge but their own subnets, no NAT rule naming them, no ACCEPT for them towards it
lv_check_isolated() {
  local rif bad=""
  rif=$(real_iface)
  if ip -4 route show | grep -E "dev ${LV_BRIDGE_PREFIX}[0-9]+" | grep -vqE '^10\.252\.[0-9]+\.0/24 '; then
    bad+=" unexpected routes: $(ip -4 route show | grep "dev $LV_BRIDGE_PREFIX" | tr '\n' ';')"
  fi
  if iptables -w 5 -t nat -S | grep -E 'MASQUERADE|SNAT' | grep -qE "10\.252\.|$LV_BRIDGE_PREFIX"; then
    bad+=" NAT rules: $(iptables -w 5 -t nat -S | grep -E 'MASQUERADE|SNAT' | grep -E "10\.252\.|$LV_BRIDGE_PREFIX" | tr '\n' ';')"
  fi
  if [ -n "$rif" ] && iptables -w 5 -S | grep -E -- "-j ACCEPT" | grep -E -- "-o $rif" | grep -qE "10\.252\.|$LV_BRIDGE_PREFIX"; then
    bad+=" ACCEPT rules towards $rif"
  fi
  [ -z "$bad" ] || lv_die "the vagrant networks are not isolated:$bad"
  [ "$(iptables -w 5 -S FORWARD | sed -n 2p)" = "-A FORWARD -j $LV_GUARD" ] || lv_die "$LV_GUARD is not FORWARD's first rule"
  lv_log "isolated: no route, NAT or ACCEPT from the dh-vagrant bridges towards ${rif:-the real interface}; $LV_GUARD first in FORWARD"
}

lv_stop() {
  local purge=${1:-} d n p left=""
  [ "$(id -u)" = 0 ] || lv_die "run as root"
  mkdir -p "$LV_STATE"
  if [ -n "$(lv_libvirtd_pid)" ] && lv_up; then
    for d in $(lv_virsh list --name); do
      lv_warn "domain $d still runs (vagrant destroy first): destroying it (its definition stays for vagrant)"
      lv_virsh destroy "$d" >/dev/null || true
    done
    for n in $(lv_virsh net-list --name); do
      lv_virsh net-destroy "$n" >/dev/null && lv_log "network $n stopped"
    done
    for p in $(lv_virsh pool-list --name); do
      lv_virsh pool-destroy "$p" >/dev/null && lv_log "storage pool $p stopped"
    done
  fi
  lv_daemon_stop libvirtd lv_libvirtd_pid
  lv_daemon_stop virtlogd lv_virtlogd_pid
  [ -n "$(lv_libvirtd_pid)" ] || lv_kvm_restore
  lv_remove_libvirt_chains
  lv_unguard
  if [ "$purge" = --purge ]; then
    rm -f "$LV_POOL_DIR"/deckhand-VAGRANTSLASH-*.img && lv_log "box volumes removed from $LV_POOL_DIR"
  fi
  rm -f "$LV_STATE"/*.xml
  rmdir "$LV_STATE" 2>/dev/null || true
  if lv_leftovers; then
    lv_log "stopped: no libvirt daemon, domain, network, bridge or chain of ours left"
  else
    lv_warn "left over:$LV_LEFT"
  fi
}

# what is still there (LV_LEFT); true when nothing
lv_leftovers() {
  LV_LEFT=""
  local l
  [ -z "$(lv_libvirtd_pid)" ] || LV_LEFT+=" libvirtd(pid $(lv_libvirtd_pid))"
  [ -z "$(lv_virtlogd_pid)" ] || LV_LEFT+=" virtlogd(pid $(lv_virtlogd_pid))"
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    case "$l" in "$LV_BRIDGE_PREFIX"*|virbr*|vnet*) LV_LEFT+=" link:$l" ;; esac
  done
  pgrep -u libvirt-dnsmasq dnsmasq >/dev/null 2>&1 && LV_LEFT+=" dnsmasq(pids $(pgrep -u libvirt-dnsmasq dnsmasq | tr '\n' ' '))"
  pgrep -f -- '-name guest=' >/dev/null 2>&1 && LV_LEFT+=" qemu(pids $(pgrep -f -- '-name guest=' | tr '\n' ' '))"
  iptables -w 5 -S 2>/dev/null | grep -q "LIBVIRT_\|$LV_GUARD" && LV_LEFT+=" iptables-filter-chains"
  iptables -w 5 -t nat -S 2>/dev/null | grep -q "LIBVIRT_\|$LV_GUARD" && LV_LEFT+=" iptables-nat-chains"
  iptables -w 5 -t mangle -S 2>/dev/null | grep -q "LIBVIRT_" && LV_LEFT+=" iptables-mangle-chains"
  ip6tables -w 5 -S 2>/dev/null | grep -q "LIBVIRT_\|$LV_GUARD" && LV_LEFT+=" ip6tables-chains"
  ip6tables -w 5 -t mangle -S 2>/dev/null | grep -q "LIBVIRT_" && LV_LEFT+=" ip6tables-mangle-chains"
  ip6tables -w 5 -t nat -S 2>/dev/null | grep -q "LIBVIRT_" && LV_LEFT+=" ip6tables-nat-chains"
  [ -z "$LV_LEFT" ]
}

lv_status() {
  local pid
  pid=$(lv_libvirtd_pid)
  if [ -z "$pid" ]; then
    echo "libvirtd: not running"
  else
    echo "libvirtd: running, pid $pid$([ "$(cat "$LV_STATE/libvirtd.pid" 2>/dev/null)" = "$pid" ] || echo ' (not started by hack/vagrant-box.sh)')"
    echo "virtlogd: $(lv_virtlogd_pid || true)"
    lv_up && {
      echo "domains:"; lv_virsh list --all | sed 's/^/  /'
      echo "networks:"; lv_virsh net-list --all | sed 's/^/  /'
      echo "pools:"; lv_virsh pool-list --all | sed 's/^/  /'
    }
  fi
  lv_leftovers || echo "present:$LV_LEFT"
}
