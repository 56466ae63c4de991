# shellcheck shell=bash
# hack/lib/vm.sh: Debian 12 VMs under QEMU on the harness's node bridge dh-nodes0: a node whose
# PID 1 is systemd, with the unified cgroup v2 hierarchy, which this machine (cgroup v1, no
# systemd) cannot be. TCG only (KVM does not work here: /work/shared/notes/vm-on-this-machine.md).
# The image comes from hack/build-vm-image.sh (cached; built on first use). Measured here (2-CPU
# host busy with a cargo and a Go build): QEMU start to ssh 50-62 s, to systemd running 58-70 s;
# vm_down 8-10 s; -accel tcg,thread=multi made no measurable difference against thread=single
# on that busy host (VM_ACCEL=tcg,thread=single keeps the VM to one host CPU).
#
# VM I (I = 1, 2, ...; every function takes I first):
#   name dh-vm-I, address 10.251.0.<VM_IP_BASE+I>/24 (dh-vm-1: 10.251.0.50), gateway 10.251.0.1
#   (the bridge's address on the host), MAC 52:54:00:fb:00:<the address's last byte in hex>
#   (dh-vm-1: 52:54:00:fb:00:32), tap device dhvmI on the bridge, QEMU daemonized with process
#   name dh-vm-I, -m VM_MEM -smp VM_CPUS, virtio disk (cache=unsafe) and NIC, -no-reboot (a
#   poweroff, reboot or panic inside ends QEMU).
#   State in $VM_STATE/dh-vm-I/ (_output/local-up/vm/dh-vm-I/): overlay.qcow2 (the VM's disk, a
#   qcow2 overlay on the image's read-only rootfs.img; kept across a crash or a poweroff inside,
#   while the image stays the same; removed by vm_down), qemu.pid, qemu.log (QEMU's own
#   messages), console.log (the serial console, everything the VM printed), console.sock
#   (vm_console), monitor.sock (QEMU's human monitor), cmdline (the kernel command line),
#   image (the image directory it boots: its key pair is the one vm_ssh uses), image-id,
#   machine-id, boot-started (epoch seconds), seed.img (with VM_SEED_DIR), console.log.1 (the
#   boot before). vm_up and vm_down of a VM hold /run/lock/deckhand-dh-vm-I.lock (machine-wide:
#   the name, tap and address are the machine's; a second checkout's vm_up refuses while the VM
#   runs from the first).
#   Kernel command line (the image's interface, see hack/build-vm-image.sh): root=/dev/vda rw
#   console=ttyS0 panic=-1 net.ifnames=0 mitigations=off systemd.unified_cgroup_hierarchy=1
#   systemd.firstboot=off systemd.machine_id=<random per VM> deckhand.ip=<address>/24
#   deckhand.gw=10.251.0.1 deckhand.hostname=dh-vm-I [deckhand.seed] VM_KERNEL_ARGS.
#   Passing files in: vm_scp (or vm_ssh with stdin) once it is up, or VM_SEED_DIR at vm_up: the
#   directory becomes a read-only ext4 disk (seed.img, made anew at each boot) that the VM mounts
#   at /run/deckhand/seed, running its setup.sh (if any) as root before containerd starts, at
#   every boot (start later units from it with `systemctl --no-block`).
#
# Shared by every VM:
#   - the bridge dh-nodes0 with 10.251.0.1/24, made as nodes_host_network (hack/lib/nodes.sh)
#     makes it when it is missing (and recorded in $VM_STATE/bridge.created: vm_down removes it
#     when the last VM goes and nothing else uses it; hack/local-up.sh down removes it anyway);
#   - the guard chains, rebuilt from the VMs present at every vm_up and vm_down and jumped to
#     first (removed with the last VM):
#       filter DECKHAND-GUARD-VM (FORWARD): nothing crosses between the bridge and the machine's
#         real interface (the default route's, as the harness finds it); a VM's forwarded
#         traffic may only leave by VM_FORWARD_TO (the bridge, and dh-cni0 for the main node's
#         pods), and only arrive from there;
#       filter DECKHAND-GUARD-VM-IN (INPUT): a VM reaches the host itself only at VM_HOST_PORTS
#         (TCP: the registry on the bridge, the API server), by ICMP at those addresses and the
#         bridge's, and with replies (the host's ssh into it);
#       nat DECKHAND-GUARD-VM (POSTROUTING): nothing of the bridge's is NATed to the real
#         interface, and a VM's traffic is never masqueraded (ACCEPT ends the nat table's walk);
#     the host's ip_forward is left as it is (hack/local-up.sh sets it).
#
# Functions: vm_up, vm_down, vm_status, vm_ssh, vm_scp, vm_console (the commands of hack/vm.sh);
# vm_wait_ready, vm_check, vm_stop, vm_pid, vm_present, vm_name/vm_ip/vm_mac/vm_tap/vm_dir,
# vm_image, vm_bridge, vm_guard, vm_unguard, vm_cmdline, vm_qemu_start (the steps of vm_up).
# Sourced by hack/vm.sh (the command front end); needs ROOT, and hack/lib/network.sh (ipt,
# real_iface, ensure_chain, ensure_jump) sourced first. It only defines functions and VM_*
# settings, so hack/local-up.sh or hack/test.sh can source it beside the other libraries.

VM_STATE=${VM_STATE:-$ROOT/_output/local-up/vm}
VM_BRIDGE=${NODES_BRIDGE:-dh-nodes0}
VM_GW=${NODES_GW:-10.251.0.1}
VM_PREFIX=24
# dh-vm-I at 10.251.0.<VM_IP_BASE+I>; the harness's extra nodes use 10.251.0.2..NODES (and
# 11..10+NODES in LOCAL_UP_MODE=kubeadm), so below NODES=50 they never meet
VM_IP_BASE=${VM_IP_BASE:-49}
VM_MEM=${VM_MEM:-2048}
VM_CPUS=${VM_CPUS:-2}
VM_ACCEL=${VM_ACCEL:-tcg,thread=multi}
VM_BOOT_TIMEOUT=${VM_BOOT_TIMEOUT:-300}
# how long vm_down lets a poweroff take before it kills QEMU: a joined node's containers (a
# `sleep` as PID 1 ignores SIGTERM) hold systemd's shutdown for DefaultTimeoutStopSec (90 s), and
# the disk is thrown away anyway
VM_SHUTDOWN_TIMEOUT=${VM_SHUTDOWN_TIMEOUT:-10}
VM_KERNEL_ARGS=${VM_KERNEL_ARGS:-}
VM_SEED_DIR=${VM_SEED_DIR:-}
# where a VM's forwarded traffic may go (interfaces), and what of the host it may reach
VM_FORWARD_TO=${VM_FORWARD_TO:-"$VM_BRIDGE dh-cni0"}
VM_HOST_PORTS=${VM_HOST_PORTS:-"$VM_GW:5000 10.250.0.1:6443"}
VM_GUARD=DECKHAND-GUARD-VM
VM_GUARD_IN=DECKHAND-GUARD-VM-IN
VM_BUILD_IMAGE="$ROOT/hack/build-vm-image.sh"

VM_T0=$SECONDS
vm_log() { printf '[vm %3ss] %s\n' "$((SECONDS - VM_T0))" "$*" >&2; }
vm_warn() { printf '[vm %3ss] WARNING: %s\n' "$((SECONDS - VM_T0))" "$*" >&2; }
vm_die() { printf '[vm %3ss] ERROR: %s\n' "$((SECONDS - VM_T0))" "$*" >&2; exit 1; }
# die with the end of the VM's serial console and QEMU's log
vm_die_console() {
  local d; d=$(vm_dir "$1"); shift
  printf '[vm %3ss] ERROR: %s\n' "$((SECONDS - VM_T0))" "$*" >&2
  [ ! -s "$d/qemu.log" ] || { echo "----- $d/qemu.log -----"; tail -n 20 "$d/qemu.log"; } >&2
  [ ! -s "$d/console.log" ] || { echo "----- last 40 lines of $d/console.log -----"; tail -n 40 "$d/console.log" | tr -d '\r'; echo "-----"; } >&2
  exit 1
}

vm_name() { echo "dh-vm-$1"; }
vm_ip() { echo "${VM_GW%.*}.$((VM_IP_BASE + $1))"; }
vm_mac() { printf '52:54:00:fb:00:%02x\n' "$((VM_IP_BASE + $1))"; }
vm_tap() { echo "dhvm$1"; }
vm_dir() { echo "$VM_STATE/$(vm_name "$1")"; }
vm_now() { date +%s.%N; }
vm_since() { awk -v a="$1" -v b="$(vm_now)" 'BEGIN {printf "%.1f", b - a}'; }

# the VMs that have state here (indices), running or not
vm_present() {
  local d
  for d in "$VM_STATE"/dh-vm-*; do [ -d "$d" ] && echo "${d##*-}"; done | sort -n
  return 0
}

# is PID (still) the QEMU of the VM named NAME (not exited, not a zombie)?
vm_proc_is() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] &&
    ! grep -q '^State:[[:space:]]*[ZX]' "/proc/$1/status" 2>/dev/null
}

# pid of VM I's QEMU, or nothing (the pid file's process, if it is still that VM's QEMU; QEMU
# removes the file as it exits, so vm_stop waits on the pid itself)
vm_pid() {
  local pid
  pid=$(cat "$(vm_dir "$1")/qemu.pid" 2>/dev/null || true)
  ! vm_proc_is "$pid" "$(vm_name "$1")" || echo "$pid"
}

# the image directory (built if needed: hack/build-vm-image.sh prints it) into VM_IMAGE
vm_image() {
  VM_IMAGE=$("$VM_BUILD_IMAGE") || vm_die "hack/build-vm-image.sh failed"
  [ -f "$VM_IMAGE/rootfs.img" ] || vm_die "no image in $VM_IMAGE"
}

# ---------------------------------------------------------------------------------------------
# ssh
# ---------------------------------------------------------------------------------------------

# ssh options (VM_SSH_OPTS) with the key of the image VM I booted
vm_ssh_opts() {
  local d key
  d=$(vm_dir "$1")
  key="$(cat "$d/image" 2>/dev/null)/id_ed25519"
  [ -f "$key" ] || vm_die "$(vm_name "$1") has no key ($key): is it up?"
  VM_SSH_OPTS=(-i "$key" -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
               -o LogLevel=ERROR -o ConnectTimeout=5 -o ServerAliveInterval=10 -o ServerAliveCountMax=6)
}

# vm_ssh I [--] [CMD...]: CMD as root in the VM, its exit status passed through (255: ssh
# failed). One argument is a shell command line (pipes and all); several are one command, each
# argument quoted as it is. No command: a login shell (a terminal if stdin is one).
vm_ssh() {
  local i=$1 cmd; shift
  [ "${1:-}" != -- ] || shift
  vm_ssh_opts "$i"
  if [ $# = 0 ]; then
    if [ -t 0 ]; then ssh -t "${VM_SSH_OPTS[@]}" "root@$(vm_ip "$i")"; else ssh "${VM_SSH_OPTS[@]}" "root@$(vm_ip "$i")"; fi
    return
  fi
  if [ $# = 1 ]; then cmd=$1; else cmd=$(printf '%q ' "$@"); fi
  ssh -o BatchMode=yes "${VM_SSH_OPTS[@]}" "root@$(vm_ip "$i")" -- "$cmd"
}

# vm_scp I SRC... DST: host files (or directories) to DST in the VM
vm_scp() {
  local i=$1; shift
  [ $# -ge 2 ] || vm_die "usage: vm_scp I SRC... DST (DST: a path in the VM)"
  local dst=${*: -1}
  vm_ssh_opts "$i"
  scp -q -r -p -o BatchMode=yes "${VM_SSH_OPTS[@]}" "${@:1:$#-1}" "root@$(vm_ip "$i"):$dst"
}

# does ssh answer (within a few seconds)?
vm_ssh_ok() {
  vm_ssh_opts "$1"
  timeout 20 ssh -n -o BatchMode=yes "${VM_SSH_OPTS[@]}" "root@$(vm_ip "$1")" true >/dev/null 2>&1
}

# ---------------------------------------------------------------------------------------------
# host network: bridge, tap, guards
# ---------------------------------------------------------------------------------------------

# the bridge, as hack/lib/nodes.sh's nodes_host_network makes it (either may come first; a
# concurrent `ip link add` by the harness makes ours fail and that is fine)
vm_bridge() {
  if ! ip link show "$VM_BRIDGE" >/dev/null 2>&1; then
    if ip link add "$VM_BRIDGE" type bridge 2>/dev/null; then
      touch "$VM_STATE/bridge.created"
      vm_log "bridge $VM_BRIDGE created ($VM_GW/$VM_PREFIX)"
    fi
    ip link show "$VM_BRIDGE" >/dev/null 2>&1 || vm_die "cannot create bridge $VM_BRIDGE"
  fi
  sysctl -qw "net.ipv6.conf.$VM_BRIDGE.disable_ipv6=1" 2>/dev/null || true
  ip addr replace "$VM_GW/$VM_PREFIX" dev "$VM_BRIDGE"
  ip link set "$VM_BRIDGE" up
}

# the bridge goes only if a VM made it, no VM is left, no port is on it, the harness has no
# extra nodes here, and nothing listens on its address (the harness's registry-nodes)
vm_bridge_cleanup() {
  [ -e "$VM_STATE/bridge.created" ] || return 0
  if ! ip link show "$VM_BRIDGE" >/dev/null 2>&1; then rm -f "$VM_STATE/bridge.created"; return 0; fi
  [ -z "$(vm_present)" ] || return 0
  [ -z "$(ls "/sys/class/net/$VM_BRIDGE/brif" 2>/dev/null)" ] || return 0
  [ ! -d "$ROOT/_output/local-up/nodes" ] || return 0
  [ -z "$(ss -Hltn "src $VM_GW" 2>/dev/null)" ] || return 0
  ip link del "$VM_BRIDGE" && rm -f "$VM_STATE/bridge.created" && vm_log "bridge $VM_BRIDGE removed (made by vm_up, unused)"
}

vm_tap_up() {
  local tap; tap=$(vm_tap "$1")
  ip link show "$tap" >/dev/null 2>&1 || ip tuntap add dev "$tap" mode tap
  sysctl -qw "net.ipv6.conf.$tap.disable_ipv6=1" 2>/dev/null || true
  ip link set "$tap" master "$VM_BRIDGE" up
}

vm_tap_del() {
  local tap; tap=$(vm_tap "$1")
  ! ip link show "$tap" >/dev/null 2>&1 || ip link del "$tap"
}

# the guard chains for the VMs present (see the header); none when no VM is present
vm_guard() {
  local present rif i ip o hp name
  present=$(vm_present)
  if [ -z "$present" ]; then vm_unguard; return 0; fi
  rif=$(real_iface)
  [ "$rif" != "$VM_BRIDGE" ] || rif=""

  ensure_chain filter "$VM_GUARD"
  if [ -n "$rif" ]; then
    ipt -A "$VM_GUARD" -i "$VM_BRIDGE" -o "$rif" -m comment --comment "deckhand: the node bridge never reaches the real network" -j REJECT --reject-with icmp-net-unreachable
    ipt -A "$VM_GUARD" -i "$rif" -o "$VM_BRIDGE" -m comment --comment "deckhand: the real network never reaches the node bridge" -j REJECT --reject-with icmp-net-unreachable
  fi
  for i in $present; do
    ip=$(vm_ip "$i"); name=$(vm_name "$i")
    for o in $VM_FORWARD_TO; do
      ipt -A "$VM_GUARD" -s "$ip" -i "$VM_BRIDGE" -o "$o" -j RETURN
      ipt -A "$VM_GUARD" -d "$ip" -i "$o" -o "$VM_BRIDGE" -j RETURN
    done
    ipt -A "$VM_GUARD" -s "$ip" -m comment --comment "deckhand: $name forwards only to the project's bridges" -j REJECT --reject-with icmp-net-unreachable
    ipt -A "$VM_GUARD" -d "$ip" -m comment --comment "deckhand: only the project's bridges reach $name" -j REJECT --reject-with icmp-net-unreachable
  done
  ensure_jump filter FORWARD "$VM_GUARD"

  ensure_chain filter "$VM_GUARD_IN"
  for i in $present; do
    ip=$(vm_ip "$i"); name=$(vm_name "$i")
    ipt -A "$VM_GUARD_IN" -s "$ip" -i "$VM_BRIDGE" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
    ipt -A "$VM_GUARD_IN" -s "$ip" -i "$VM_BRIDGE" -d "$VM_GW" -p icmp -j RETURN
    for hp in $VM_HOST_PORTS; do
      ipt -A "$VM_GUARD_IN" -s "$ip" -i "$VM_BRIDGE" -d "${hp%:*}" -p tcp --dport "${hp##*:}" -j RETURN
      [ "${hp%:*}" = "$VM_GW" ] || ipt -A "$VM_GUARD_IN" -s "$ip" -i "$VM_BRIDGE" -d "${hp%:*}" -p icmp -j RETURN
    done
    ipt -A "$VM_GUARD_IN" -s "$ip" -p tcp -m comment --comment "deckhand: $name reaches the host only at VM_HOST_PORTS" -j REJECT --reject-with tcp-reset
    ipt -A "$VM_GUARD_IN" -s "$ip" -m comment --comment "deckhand: $name reaches the host only at VM_HOST_PORTS" -j REJECT --reject-with icmp-admin-prohibited
  done
  ensure_jump filter INPUT "$VM_GUARD_IN"

  ensure_chain nat "$VM_GUARD"
  [ -z "$rif" ] || ipt -t nat -A "$VM_GUARD" -s "$VM_GW/$VM_PREFIX" -o "$rif" -m comment --comment "deckhand: the node bridge is never NATed to the real network" -j ACCEPT
  for i in $present; do
    ip=$(vm_ip "$i"); name=$(vm_name "$i")
    for o in $VM_FORWARD_TO; do ipt -t nat -A "$VM_GUARD" -s "$ip" -o "$o" -j RETURN; done
    ipt -t nat -A "$VM_GUARD" -s "$ip" -m comment --comment "deckhand: $name is never masqueraded" -j ACCEPT
  done
  ensure_jump nat POSTROUTING "$VM_GUARD"
}

vm_unguard() {
  local spec t h c
  for spec in "filter FORWARD $VM_GUARD" "filter INPUT $VM_GUARD_IN" "nat POSTROUTING $VM_GUARD"; do
    read -r t h c <<<"$spec"
    while ipt -t "$t" -D "$h" -j "$c" 2>/dev/null; do :; done
    ipt -t "$t" -F "$c" 2>/dev/null || true
    ipt -t "$t" -X "$c" 2>/dev/null || true
  done
}

# ---------------------------------------------------------------------------------------------
# the VM
# ---------------------------------------------------------------------------------------------

# one vm_up/vm_down per VM at a time, machine-wide (its name, tap and address are the machine's;
# the lock file is not in the state dir, which vm_down removes)
vm_lock() {
  exec {VM_LOCK_FD}>"/run/lock/deckhand-$(vm_name "$1").lock"
  flock -w 900 "$VM_LOCK_FD" || vm_die "timed out waiting for another vm_up/vm_down of $(vm_name "$1")"
}
vm_unlock() { [ -z "${VM_LOCK_FD:-}" ] || exec {VM_LOCK_FD}>&-; VM_LOCK_FD=; }

# the disk: an overlay on the image's rootfs.img, kept while the image is the same
vm_overlay() {
  local i=$1 d id
  d=$(vm_dir "$i")
  id=$(sed -n 's/^build_id=//p' "$VM_IMAGE/build-info")
  if [ -f "$d/overlay.qcow2" ] && [ "$(cat "$d/image-id" 2>/dev/null)" = "$id" ] && [ "$(cat "$d/image")" = "$VM_IMAGE" ]; then
    vm_log "$(vm_name "$i"): keeping its disk ($d/overlay.qcow2)"
    return 0
  fi
  rm -f "$d/overlay.qcow2"
  qemu-img create -q -f qcow2 -F raw -b "$VM_IMAGE/rootfs.img" "$d/overlay.qcow2"
  echo "$VM_IMAGE" > "$d/image"
  echo "$id" > "$d/image-id"
  tr -d - < /proc/sys/kernel/random/uuid > "$d/machine-id"
}

# VM_SEED_DIR as a read-only ext4 disk (label dh-seed), made anew at each boot
vm_seed() {
  local d kib; d=$(vm_dir "$1")
  rm -f "$d/seed.img"
  [ -n "$VM_SEED_DIR" ] || return 0
  [ -d "$VM_SEED_DIR" ] || vm_die "VM_SEED_DIR=$VM_SEED_DIR is not a directory"
  kib=$(du -sk "$VM_SEED_DIR" | cut -f1)
  mke2fs -q -F -t ext4 -L dh-seed -E root_owner=0:0 -d "$VM_SEED_DIR" "$d/seed.img" "$((kib + kib / 4 + 16384))k" > "$d/seed.log" 2>&1 ||
    { cat "$d/seed.log" >&2; vm_die "mke2fs of the seed disk from $VM_SEED_DIR failed"; }
  vm_log "$(vm_name "$1"): seed disk from $VM_SEED_DIR ($((kib / 1024)) MiB)"
}

vm_cmdline() {
  local i=$1 d; d=$(vm_dir "$i")
  echo "root=/dev/vda rw console=ttyS0 panic=-1 net.ifnames=0 mitigations=off" \
       "systemd.unified_cgroup_hierarchy=1 systemd.firstboot=off systemd.machine_id=$(cat "$d/machine-id")" \
       "deckhand.ip=$(vm_ip "$i")/$VM_PREFIX deckhand.gw=$VM_GW deckhand.hostname=$(vm_name "$i")" \
       "${VM_SEED_DIR:+deckhand.seed}" "$VM_KERNEL_ARGS" | tr -s ' ' | sed 's/ $//'
}

# QEMU, daemonized; no descriptor of the caller (locks) lives on in it
vm_qemu_start() {
  local i=$1 d name argv
  d=$(vm_dir "$i"); name=$(vm_name "$i")
  [ ${#d} -lt 90 ] || vm_die "state directory $d is too long for QEMU's unix sockets (108 bytes)"
  vm_cmdline "$i" > "$d/cmdline"
  # shellcheck disable=SC2054  # (commas: QEMU's option syntax)
  argv=(qemu-system-x86_64 -name "$name,process=$name" -machine q35 -accel "$VM_ACCEL" -cpu max
        -smp "$VM_CPUS" -m "$VM_MEM" -nodefaults -display none -no-reboot
        -kernel "$VM_IMAGE/vmlinuz" -initrd "$VM_IMAGE/initrd.img" -append "$(cat "$d/cmdline")"
        -drive "file=$d/overlay.qcow2,format=qcow2,if=none,id=disk0,cache=unsafe,discard=unmap"
        -device virtio-blk-pci,drive=disk0
        -netdev "tap,id=net0,ifname=$(vm_tap "$i"),script=no,downscript=no"
        -device "virtio-net-pci,netdev=net0,mac=$(vm_mac "$i")"
        -object rng-random,id=rng0,filename=/dev/urandom -device virtio-rng-pci,rng=rng0
        -chardev "socket,id=con0,path=$d/console.sock,server=on,wait=off,logfile=$d/console.log"
        -serial chardev:con0
        -monitor "unix:$d/monitor.sock,server=on,wait=off"
        -pidfile "$d/qemu.pid" -daemonize)
  if [ -f "$d/seed.img" ]; then
    # shellcheck disable=SC2054
    argv+=(-drive "file=$d/seed.img,format=raw,if=none,id=seed,readonly=on" -device virtio-blk-pci,drive=seed)
  fi
  rm -f "$d/qemu.pid" "$d/console.sock" "$d/monitor.sock"
  [ ! -f "$d/console.log" ] || mv -f "$d/console.log" "$d/console.log.1"
  vm_now > "$d/boot-started"
  if ! (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      { [ "$fd" -gt 2 ] && eval "exec $fd>&-"; } 2>/dev/null || true
    done
    exec "${argv[@]}" </dev/null
  ) > "$d/qemu.log" 2>&1; then
    vm_die_console "$i" "QEMU did not start"
  fi
  [ -n "$(vm_pid "$i")" ] || vm_die_console "$i" "QEMU started but its pid file names no process called $name"
}

# wait until ssh answers and systemd says running (or degraded: the failed units are printed);
# prints how long each took since QEMU started (and sets VM_T_SSH and VM_T_RUNNING, in seconds)
vm_wait_ready() {
  local i=$1 timeout=${2:-$VM_BOOT_TIMEOUT} d t0 t_ssh t_run state left name
  d=$(vm_dir "$i"); name=$(vm_name "$i")
  t0=$(cat "$d/boot-started")
  until vm_ssh_ok "$i"; do
    [ -n "$(vm_pid "$i")" ] || vm_die_console "$i" "$name: QEMU exited while booting"
    [ "$(vm_since "$t0" | cut -d. -f1)" -lt "$timeout" ] || vm_die_console "$i" "$name: no ssh within ${timeout}s"
    sleep 2
  done
  t_ssh=$(vm_since "$t0")
  left=$((timeout - ${t_ssh%.*})); [ "$left" -gt 10 ] || left=10
  state=$(vm_ssh "$i" -- "timeout $left systemctl is-system-running --wait" 2>/dev/null </dev/null) || true
  t_run=$(vm_since "$t0")
  case "$state" in
    running) vm_log "$name: ssh after ${t_ssh}s, systemd running after ${t_run}s (since QEMU started)" ;;
    degraded)
      vm_warn "$name: ssh after ${t_ssh}s, systemd DEGRADED after ${t_run}s; failed units:"
      vm_ssh "$i" -- systemctl --failed --no-legend --plain >&2 </dev/null || true ;;
    *) vm_die_console "$i" "$name: systemd is '$state' ${t_run}s after QEMU started (not running)" ;;
  esac
  # shellcheck disable=SC2034  # (for callers)
  VM_T_SSH=$t_ssh VM_T_RUNNING=$t_run
}

# a running VM I answers ssh and systemd runs (waits up to a minute for both)
vm_check() {
  local i=$1 name state _
  name=$(vm_name "$i")
  for _ in $(seq 1 30); do vm_ssh_ok "$i" && break; sleep 2; done
  vm_ssh_ok "$i" || vm_die_console "$i" "$name runs (pid $(vm_pid "$i")) but ssh does not answer"
  state=$(vm_ssh "$i" -- "timeout 60 systemctl is-system-running --wait" 2>/dev/null </dev/null) || true
  case "$state" in
    running) vm_log "$name: already running (pid $(vm_pid "$i"), $(vm_ssh "$i" -- uptime -p </dev/null)), systemd running" ;;
    degraded)
      vm_warn "$name: already running (pid $(vm_pid "$i")), systemd DEGRADED; failed units:"
      vm_ssh "$i" -- systemctl --failed --no-legend --plain >&2 </dev/null || true ;;
    *) vm_die_console "$i" "$name runs (pid $(vm_pid "$i")) but systemd is '$state'" ;;
  esac
}

# vm_up I: VM I running, reachable by ssh, systemd running (idempotent: a running VM is checked)
vm_up() {
  local i=$1 d name pid
  d=$(vm_dir "$i"); name=$(vm_name "$i")
  vm_lock "$i"
  pid=$(vm_pid "$i")
  if [ -n "$pid" ]; then
    # (hack/local-up.sh down removes the bridge, running VM or not: make it and plug in again)
    vm_bridge
    vm_guard
    vm_tap_up "$i"
    vm_check "$i"
    vm_unlock
    return 0
  fi
  # the same VM from another checkout would share its tap and address (a QEMU that just exited
  # may linger a moment as a zombie: not counted)
  for pid in $(pgrep -x "$name" || true); do vm_proc_is "$pid" "$name" && break; pid=""; done
  [ -z "$pid" ] || vm_die "$name already runs as pid $pid, not from $d: $(tr '\0' ' ' < "/proc/$pid/cmdline" | grep -o -- '-pidfile [^ ]*')"
  vm_image
  mkdir -p "$d"
  vm_bridge
  vm_guard
  vm_tap_up "$i"
  vm_overlay "$i"
  vm_seed "$i"
  vm_log "$name: booting $(vm_ip "$i") (image ${VM_IMAGE##*/}, $VM_ACCEL, $VM_CPUS CPUs, $VM_MEM MiB; console $d/console.log)"
  vm_qemu_start "$i"
  vm_wait_ready "$i"
  vm_unlock
}

# vm_stop I: poweroff inside (ssh, else ACPI through the monitor), then SIGTERM/SIGKILL to QEMU
vm_stop() {
  local i=$1 d pid _ name
  d=$(vm_dir "$i"); name=$(vm_name "$i")
  pid=$(vm_pid "$i")
  [ -n "$pid" ] || return 0
  vm_log "$name: powering off (pid $pid)"
  vm_ssh_opts "$i"
  if ! timeout 20 ssh -n -o BatchMode=yes "${VM_SSH_OPTS[@]}" "root@$(vm_ip "$i")" systemctl poweroff --no-block >/dev/null 2>&1; then
    echo system_powerdown | timeout 5 socat - "UNIX-CONNECT:$d/monitor.sock" >/dev/null 2>&1 || true
  fi
  for _ in $(seq 1 $((VM_SHUTDOWN_TIMEOUT * 5))); do
    vm_proc_is "$pid" "$name" || break
    sleep 0.2
  done
  if vm_proc_is "$pid" "$name"; then
    vm_log "$name: still running ${VM_SHUTDOWN_TIMEOUT}s after poweroff (VM_SHUTDOWN_TIMEOUT); killing QEMU"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do vm_proc_is "$pid" "$name" || break; sleep 0.1; done
    ! vm_proc_is "$pid" "$name" || kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do vm_proc_is "$pid" "$name" || break; sleep 0.1; done
  fi
  ! vm_proc_is "$pid" "$name" || vm_die "$name: QEMU (pid $pid) does not exit"
  vm_log "$name: stopped"
}

# vm_down I: VM I stopped and every trace of it gone (tap, state, its guard rules; the guard
# chains with the last VM, the bridge as vm_bridge_cleanup says)
vm_down() {
  local i=$1 d
  d=$(vm_dir "$i")
  vm_lock "$i"
  vm_stop "$i"
  vm_tap_del "$i"
  rm -rf --one-file-system "$d"
  vm_guard
  vm_bridge_cleanup
  rmdir "$VM_STATE" 2>/dev/null || true
  vm_log "$(vm_name "$i"): down"
  vm_unlock
}

vm_status() {
  local i=$1 d name pid
  d=$(vm_dir "$i"); name=$(vm_name "$i")
  pid=$(vm_pid "$i")
  if [ -z "$pid" ]; then
    if [ -d "$d" ]; then echo "$name: not running (state in $d)"; else echo "$name: not running"; fi
    return 1
  fi
  echo "$name: running, pid $pid, $(vm_ip "$i")/$VM_PREFIX on $VM_BRIDGE (tap $(vm_tap "$i"), MAC $(vm_mac "$i")), image $(cat "$d/image")"
  vm_ssh "$i" -- 'echo "  uptime: $(uptime -p) (booted $(uptime -s)); kernel $(uname -r)"
    echo "  /sys/fs/cgroup: $(stat -fc %T /sys/fs/cgroup) ($(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null))"
    echo "  PID 1: $(cat /proc/1/comm); systemd: $(systemctl is-system-running)"' </dev/null ||
    echo "  (ssh does not answer)"
}

# the serial console: interactive through its socket (Ctrl-] leaves), else its log
vm_console() {
  local d; d=$(vm_dir "$1")
  [ -n "$(vm_pid "$1")" ] || { [ -f "$d/console.log" ] && tr -d '\r' < "$d/console.log"; vm_die "$(vm_name "$1") is not running"; }
  if [ -t 0 ]; then
    echo "$(vm_name "$1") serial console (Ctrl-] leaves; the full log is $d/console.log)" >&2
    socat -,raw,echo=0,escape=0x1d "UNIX-CONNECT:$d/console.sock"
  else
    tr -d '\r' < "$d/console.log"
  fi
}
