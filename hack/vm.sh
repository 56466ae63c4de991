#!/usr/bin/env bash
# A Debian 12 VM under QEMU (TCG) on the harness's node bridge dh-nodes0: dh-vm-1 at 10.251.0.50,
# systemd as PID 1, cgroup v2, containerd, sshd for root by key. Nothing of it reaches the
# machine's real network (guard chains DECKHAND-GUARD-VM*). Not joined to any cluster (yet).
# The command front end of hack/lib/vm.sh, which says what a VM is and where its state lives; the
# image comes from hack/build-vm-image.sh (built and cached on first use: a few minutes).
#
# Usage:
#   hack/vm.sh up                    build the image if needed, boot the VM, wait until ssh answers
#                                    and systemd is running (idempotent: a running VM is checked);
#                                    prints the boot-to-ssh and boot-to-running times
#   hack/vm.sh down                  poweroff (then kill), remove its tap, state and disk, the guard
#                                    chains with the last VM, a bridge only a VM made and nothing uses
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
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for lib in network vm; do
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
  up|down|console) [ "$(id -u)" = 0 ] || vm_die "run as root (tap device, iptables, QEMU)" ;;
esac
case "$cmd" in
  up) vm_up "$I" ;;
  down) vm_down "$I" ;;
  status) vm_status "$I" ;;
  ssh) vm_ssh "$I" "$@" ;;
  scp) vm_scp "$I" "$@" ;;
  console) vm_console "$I" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
