#!/usr/bin/env bash
# A Debian 12 VM under QEMU (TCG) on the harness's node bridge dh-nodes0: dh-vm-1 at 10.251.0.50,
# systemd as PID 1, cgroup v2, containerd, sshd for root by key. Nothing of it reaches the
# machine's real network (guard chains DECKHAND-GUARD-VM*). When a local cluster runs (either
# LOCAL_UP_MODE), `up` makes it a worker node of it as a user makes a kubeadm worker with deckhand:
# deckhand and the units of systemd/ installed and enabled, then `kubeadm join` (hack/lib/vm-node.sh
# says how the node is set up: kind's kubelet settings, cgroupRoot /kubelet, the systemd driver).
# The command front end of hack/lib/vm.sh and hack/lib/vm-node.sh; the image comes from
# hack/build-vm-image.sh (built and cached on first use: a few minutes).
#
# Usage:
#   hack/vm.sh up                    build the image if needed, boot the VM, wait until ssh answers
#                                    and systemd is running (idempotent: a running VM is checked);
#                                    prints the boot-to-ssh and boot-to-running times; then, if a
#                                    local cluster runs and VM_JOIN is not 0, join (below)
#   hack/vm.sh join                  install deckhand and kubeadm in the running VM, kubeadm join
#                                    the local cluster, set up its pod network, wait for Ready
#   hack/vm.sh leave                 delete the VM's Node and the host's route to its pods
#   hack/vm.sh down                  leave, then poweroff (then kill), remove its tap, state and
#                                    disk, the guard chains with the last VM, a bridge only a VM
#                                    made and nothing uses
#   hack/vm.sh status                running or not, pid, address, uptime, cgroup fs, systemd's state
#                                    (exit 1 when not running)
#   hack/vm.sh ssh [--] [CMD...]     CMD as root in the VM, exit status passed through (one argument:
#                                    a shell command line; several: one command, quoted as given);
#                                    no CMD: a shell
#   hack/vm.sh scp SRC... DST        copy host files or directories to DST in the VM
#   hack/vm.sh console               the serial console (interactive on a terminal, Ctrl-] leaves;
#                                    else its log)
#
# Environment (hack/lib/vm.sh has the rest):
#   VM_INDEX       which VM: dh-vm-<VM_INDEX> at 10.251.0.<49+VM_INDEX> (default 1)
#   VM_MEM VM_CPUS memory in MiB and CPUs (2048, 2)
#   VM_ACCEL       QEMU's -accel (tcg,thread=multi)
#   VM_BOOT_TIMEOUT seconds up waits for ssh and systemd (300: TCG is slow)
#   VM_SEED_DIR    a directory given to the VM at boot as a read-only disk, mounted at
#                  /run/deckhand/seed; its setup.sh runs as root before containerd starts
#   VM_KERNEL_ARGS more kernel command line
#   VM_JOIN        0: up only boots (default 1: up joins a running local cluster)
#   DECKHAND_BIN   the deckhand binary to install (default: the release build, hack/build-release.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# the harness's libraries (network, nodes, kubeadm, ...) for the cluster's settings and the
# guards, in the mode of the cluster that runs; then the VM's own
if [ -z "${LOCAL_UP_MODE:-}" ] && [ -s "$ROOT/_output/local-up/local-up-mode" ]; then
  LOCAL_UP_MODE=$(cat "$ROOT/_output/local-up/local-up-mode")
fi
# shellcheck source=/dev/null
LOCAL_UP_SOURCE_ONLY=1 . "$ROOT/hack/local-up.sh"
for lib in vm vm-node; do
  # shellcheck source=/dev/null
  . "$ROOT/hack/lib/$lib.sh"
done
unset lib

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

I=${VM_INDEX:-1}
[[ "$I" =~ ^[1-9][0-9]?$ ]] && [ "$((VM_IP_BASE + I))" -le 254 ] || vm_die "VM_INDEX=$I: use 1 to $((254 - VM_IP_BASE))"
[ $# -gt 0 ] || { usage >&2; exit 2; }
cmd=$1; shift
case "$cmd" in
  up|down|console|join|leave) [ "$(id -u)" = 0 ] || vm_die "run as root (tap device, iptables, QEMU)" ;;
esac
case "$cmd" in
  up)
    vm_up "$I"
    if [ "${VM_JOIN:-1}" != 0 ] && vm_cluster_up; then
      vm_node_up "$I"
    elif [ "${VM_JOIN:-1}" != 0 ]; then
      vm_log "no local cluster answers: $(vm_name "$I") is not joined (hack/local-up.sh up, then hack/vm.sh join)"
    fi ;;
  join) vm_check "$I" >/dev/null 2>&1 || vm_die "$(vm_name "$I") is not running (hack/vm.sh up)"; vm_node_up "$I" ;;
  leave) vm_node_leave "$I" ;;
  down) vm_node_leave "$I"; vm_down "$I" ;;
  status) vm_status "$I" ;;
  ssh) vm_ssh "$I" "$@" ;;
  scp) vm_scp "$I" "$@" ;;
  console) vm_console "$I" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
