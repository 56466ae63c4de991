#!/usr/bin/env bash
# Builds the Debian 12 (bookworm) VM image that hack/vm.sh boots under QEMU: a root filesystem made
# by debootstrap (--variant=minbase, from the Debian mirror the host's apt is configured with, read
# at run time) and set up for a Kubernetes worker node (systemd as PID 1, the unified cgroup v2
# hierarchy, containerd, runc, the CNI plugins, iptables, sshd for root by key only), written as a
# sparse raw ext4 disk image without a loop device (mke2fs -d), beside the kernel and initrd that
# QEMU boots directly (no bootloader) and the ssh key pair of the VM's root.
#
# Usage:
#   hack/build-vm-image.sh              build the image unless it is cached; print its directory
#   hack/build-vm-image.sh --print-dir  print the directory only (exit 1 if it is not built yet)
#   hack/build-vm-image.sh --rebuild    build it again even if it is cached
# Progress goes to stderr; stdout is only the image directory, for callers (hack/lib/vm.sh).
#
# Output, in ${DECKHAND_CACHE:-/var/cache/deckhand}/vm/<key>/:
#   rootfs.img              raw ext4, sparse, IMAGE_SIZE; the base image a VM's qcow2 overlay
#                           uses read-only (mode 0444: never boot it directly)
#   vmlinuz, initrd.img     Debian's linux-image-cloud-amd64 and its initramfs
#   id_ed25519{,.pub}       root's key pair; the public key is /root/.ssh/authorized_keys inside
#   build-info              when and how long the build took, the versions inside, a build id
# <key> is a hash of GUEST_PKGS, SUITE, IMAGE_SIZE and the recipe: the text of every recipe_*
# function as bash prints it (comments are not part of it), so a changed package list or recipe
# builds a new image beside the old ones (which stay until removed by hand). Concurrent callers
# take the lock <key>.lock and wait; the image appears complete or not at all (built in
# <key>.tmp/, renamed when done). A build took 170-200 s here (debootstrap 155-175 s of it, on a
# 2-CPU host busy with a cargo and a Go build); the image is ~480 MB of a 6 GB sparse file.
#
# What the image does at boot (its interface to hack/lib/vm.sh), from the kernel command line:
#   deckhand.ip=ADDR/PREFIX  static address of the first ethernet interface (the lowest-named
#                            one with a device behind it, eth0 with net.ifnames=0), written as
#                            /run/systemd/network/10-deckhand.network before systemd-networkd
#                            starts (matched by MAC, so container veths are never touched)
#   deckhand.gw=ADDR         its default gateway          deckhand.dns=ADDR[,ADDR]  resolv.conf
#   deckhand.mac=MAC         configure that interface instead of the first one
#   deckhand.hostname=NAME   hostname (/etc/hostname, /etc/hosts maps it to deckhand.ip)
#   deckhand.seed            a seed disk (ext4 labelled dh-seed, hack/lib/vm.sh VM_SEED_DIR) is
#                            attached: mounted read-only at /run/deckhand/seed, and its setup.sh,
#                            if any, runs once per boot before containerd starts
#   systemd.machine_id=HEX   the VM's own machine id (the image's is shared by every VM)
# Also: /dev/vda is / (no swap); sshd takes root by key only, with a host key made at first boot;
# the serial console (ttyS0) logs root in; overlay and br_netfilter are loaded at boot,
# net.ipv4.ip_forward=1 and net.bridge.bridge-nf-call-iptables=1; containerd is enabled with
# Debian's /etc/containerd/config.toml (CRI plugin, CNI from /usr/lib/cni and /etc/cni/net.d,
# runc's SystemdCgroup false: a kubelet with the systemd cgroup driver needs it true); the
# journal is volatile; apt's timers and other periodic jobs a test VM does not need are masked.
# The image holds no apt source and no package lists: the VM reaches nothing but the project's
# bridge, and everything it runs is put into it from the host.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE_DIR="${DECKHAND_CACHE:-/var/cache/deckhand}/vm"

SUITE=bookworm
IMAGE_SIZE=6G
# Guest packages (debootstrap --include; minbase brings dpkg, apt, coreutils, util-linux, mount,
# ...). The first line is a booted systemd node with sshd; then what containerd, the CNI plugins,
# a kubelet and kube-proxy run on a worker, and what kubeadm join's preflight checks (v1.36:
# losetup and mount from mount, cp, swap off, ip_forward=1, the kernel config in /boot, cgroup v2
# controllers, the hostname resolving); then test tools (ping).
GUEST_PKGS=(systemd systemd-sysv udev dbus linux-image-cloud-amd64 initramfs-tools openssh-server
            iproute2 ca-certificates netbase
            containerd runc containernetworking-plugins iptables conntrack ethtool socat
            procps kmod util-linux mount curl
            iputils-ping)

T0=$SECONDS
log() { printf '[build-vm-image %3ss] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[build-vm-image %3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# host side
# ---------------------------------------------------------------------------------------------

# the Debian mirror of the host's apt sources (apt parses sources.list and *.sources alike):
# the site of the deb source for SUITE's main component
host_mirror() {
  apt-get indextargets --no-release-info --format '$(SITE) $(RELEASE) $(COMPONENT) $(TARGET_OF)' 2>/dev/null |
    awk -v s="$SUITE" '$2 == s && $3 == "main" && $4 == "deb" {print $1; exit}'
}

# an HTTP proxy the host's apt uses, for debootstrap too
host_apt_proxy() {
  local http_proxy=""
  eval "$(apt-config shell http_proxy Acquire::http::Proxy)"
  echo "$http_proxy"
}

image_key() {
  # shellcheck disable=SC2046  # (one function name per word)
  { declare -p SUITE IMAGE_SIZE GUEST_PKGS; declare -f $(compgen -A function recipe_); } | sha256sum | cut -c1-16
}

# ---------------------------------------------------------------------------------------------
# the recipe: every recipe_* function is part of the image key
# ---------------------------------------------------------------------------------------------

# recipe_put MODE PATH: stdin into $ROOTFS/PATH
recipe_put() {
  mkdir -p "$(dirname "$ROOTFS$2")"
  cat > "$ROOTFS$2"
  chmod "$1" "$ROOTFS$2"
}

recipe_debootstrap() {  # MIRROR
  local proxy
  proxy=$(host_apt_proxy)
  log "debootstrap $SUITE (minbase, ${#GUEST_PKGS[@]} packages and their dependencies) from the host's apt mirror"
  # debootstrap mounts /proc and /sys in the target while it installs (cleanup unmounts them
  # should it fail half way)
  if ! http_proxy=$proxy debootstrap --variant=minbase --components=main --merged-usr \
        --include="$(IFS=,; echo "${GUEST_PKGS[*]}")" "$SUITE" "$ROOTFS" "$1" > "$WORK/debootstrap.log" 2>&1; then
    tail -n 30 "$WORK/debootstrap.log" >&2
    [ ! -f "$ROOTFS/debootstrap/debootstrap.log" ] || tail -n 30 "$ROOTFS/debootstrap/debootstrap.log" >&2
    die "debootstrap failed (log $WORK/debootstrap.log)"
  fi
}

# identity and files debootstrap copied from the host (hostname, hosts, resolv.conf), fstab, apt
recipe_base() {
  echo dh-vm | recipe_put 0644 /etc/hostname
  recipe_put 0644 /etc/hosts <<'EOF'
127.0.0.1	localhost
::1		localhost ip6-localhost ip6-loopback
# deckhand-net-setup adds this VM's address and name at boot (deckhand.hostname=)
EOF
  recipe_put 0644 /etc/resolv.conf <<'EOF'
# no DNS server: the VM reaches only the project's bridge (deckhand.dns= on the kernel
# command line writes nameserver lines here at boot)
EOF
  recipe_put 0644 /etc/fstab <<'EOF'
# / is the VM's disk (a qcow2 overlay on the cached image); no swap (a kubelet wants none).
# noinit_itable: the image is sparse, so its inode tables read as zeros already.
/dev/vda  /  ext4  rw,noatime,noinit_itable,errors=remount-ro  0  0
EOF
  recipe_put 0644 /etc/apt/sources.list <<'EOF'
# No apt source: the VM reaches nothing but the project's bridge. hack/build-vm-image.sh installs
# its packages; copy anything else in from the host (hack/vm.sh scp, or a seed disk).
EOF
  # the image's machine id stays valid (so no boot counts as a first boot, with its presets);
  # each VM gets its own through systemd.machine_id= on the kernel command line
  [ -s "$ROOTFS/etc/machine-id" ] || tr -d - < /proc/sys/kernel/random/uuid | recipe_put 0444 /etc/machine-id
  recipe_put 0644 /etc/systemd/journald.conf.d/deckhand.conf <<'EOF'
# a test VM: the journal in memory only
[Journal]
Storage=volatile
RuntimeMaxUse=64M
EOF
}

# sshd: root by key only, one ed25519 host key made at first boot (not shared between VMs)
recipe_ssh() {  # PUBKEY_FILE
  install -d -m 0700 "$ROOTFS/root/.ssh"
  recipe_put 0600 /root/.ssh/authorized_keys < "$1"
  rm -f "$ROOTFS"/etc/ssh/ssh_host_*
  recipe_put 0644 /etc/ssh/sshd_config.d/deckhand.conf <<'EOF'
# hack/build-vm-image.sh: root logs in with the key of the image's cache directory only
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
HostKey /etc/ssh/ssh_host_ed25519_key
UseDNS no
EOF
  recipe_put 0644 /etc/systemd/system/deckhand-ssh-hostkey.service <<'EOF'
[Unit]
Description=deckhand: this VM's own ssh host key (the image has none)
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key

[Install]
WantedBy=ssh.service
EOF
}

# the network from the kernel command line (deckhand.ip= ...), so that one image serves any VM
recipe_network() {
  recipe_put 0755 /usr/local/sbin/deckhand-net-setup <<'EOF'
#!/bin/sh
# deckhand-net-setup (hack/build-vm-image.sh): hostname, /etc/hosts, resolv.conf and a
# systemd-networkd .network file for the first ethernet interface, from the kernel command line:
#   deckhand.ip=ADDR/PREFIX deckhand.gw=ADDR deckhand.dns=ADDR[,ADDR] deckhand.hostname=NAME
#   deckhand.mac=MAC (the interface to configure; default: the lowest-named ethernet interface
#   with a device behind it, i.e. not a veth or bridge)
# Runs once per boot, before systemd-networkd.
set -eu
ip= gw= dns= name= mac=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    deckhand.ip=*) ip=${arg#*=} ;;
    deckhand.gw=*) gw=${arg#*=} ;;
    deckhand.dns=*) dns=${arg#*=} ;;
    deckhand.hostname=*) name=${arg#*=} ;;
    deckhand.mac=*) mac=${arg#*=} ;;
  esac
done

if [ -n "$name" ]; then
  echo "$name" > /etc/hostname
  echo "$name" > /proc/sys/kernel/hostname
fi
{
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n'
  if [ -n "$name" ]; then
    if [ -n "$ip" ]; then printf '%s\t%s\n' "${ip%/*}" "$name"; else printf '127.0.1.1\t%s\n' "$name"; fi
  fi
} > /etc/hosts
if [ -n "$dns" ]; then
  echo "$dns" | tr ',' '\n' | sed 's/^/nameserver /' > /etc/resolv.conf
fi

[ -n "$ip" ] || { echo "deckhand-net-setup: no deckhand.ip= on the kernel command line: network left unconfigured"; exit 0; }
case "$ip" in */*) ;; *) echo "deckhand-net-setup: deckhand.ip=$ip needs a prefix length (ADDR/PREFIX)" >&2; exit 1 ;; esac

# the interface: udev loads the NIC's driver while this runs, so wait for it (up to 60 s)
mac=$(echo "$mac" | tr 'A-F' 'a-f')
found=
n=0
while [ -z "$found" ]; do
  for d in /sys/class/net/*; do
    [ -e "$d/device" ] && [ "$(cat "$d/type")" = 1 ] || continue
    a=$(cat "$d/address")
    if [ -z "$mac" ] || [ "$a" = "$mac" ]; then found=$a; iface=${d##*/}; break; fi
  done
  [ -n "$found" ] && break
  n=$((n + 1))
  [ "$n" -lt 600 ] || { echo "deckhand-net-setup: no ethernet interface${mac:+ with MAC $mac} after 60 s" >&2; exit 1; }
  sleep 0.1
done

mkdir -p /run/systemd/network
{
  echo "# deckhand-net-setup: from the kernel command line ($iface at boot)"
  echo "[Match]"
  echo "Type=ether"
  echo "MACAddress=$found"
  echo
  echo "[Network]"
  echo "Address=$ip"
  [ -z "$gw" ] || echo "Gateway=$gw"
  echo "LinkLocalAddressing=no"
  echo "IPv6AcceptRA=no"
} > /run/systemd/network/10-deckhand.network
echo "deckhand-net-setup: $iface ($found) $ip${gw:+ via $gw}${name:+, hostname $name}"
EOF
  recipe_put 0644 /etc/systemd/system/deckhand-net-setup.service <<'EOF'
[Unit]
Description=deckhand: network and hostname from the kernel command line (deckhand.*)
DefaultDependencies=no
# (not after systemd-udev-trigger, which takes seconds under TCG: the NIC's driver is loaded in
# the initramfs, and the script waits for the interface anyway)
After=systemd-remount-fs.service
Before=systemd-networkd.service network-pre.target
Wants=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/deckhand-net-setup

[Install]
WantedBy=systemd-networkd.service
EOF
  # networkd leaves alone what it does not configure: routes and rules that CNI plugins and
  # kube-proxy add (by default it would remove foreign routes on the links it manages)
  recipe_put 0644 /etc/systemd/networkd.conf.d/deckhand.conf <<'EOF'
[Network]
ManageForeignRoutes=no
ManageForeignRoutingPolicyRules=no
EOF
  # udev gives new virtual interfaces (bridges, veths) a MAC of its own choosing by default
  # (99-default.link: MACAddressPolicy=persistent), racing with what CNI plugins set
  recipe_put 0644 /etc/systemd/network/90-deckhand-virtual.link <<'EOF'
# CNI plugins own the MAC addresses of the bridges and veths they create
[Match]
Driver=bridge veth

[Link]
MACAddressPolicy=none
EOF
}

# kernel modules and sysctls a kubelet node needs (kubeadm join's preflight checks ip_forward)
recipe_kernel() {
  recipe_put 0644 /etc/modules-load.d/deckhand.conf <<'EOF'
overlay
br_netfilter
EOF
  recipe_put 0644 /etc/sysctl.d/90-deckhand.conf <<'EOF'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
EOF
}

# the seed disk: files and a setup script from the host at boot (hack/lib/vm.sh VM_SEED_DIR)
recipe_seed() {
  recipe_put 0755 /usr/local/sbin/deckhand-seed <<'EOF'
#!/bin/sh
# deckhand-seed (hack/build-vm-image.sh): mounts the seed disk (ext4 labelled dh-seed, made by
# hack/lib/vm.sh from VM_SEED_DIR) read-only at /run/deckhand/seed and runs its setup.sh, if any,
# from there. Runs once per boot when the kernel command line says deckhand.seed, before
# containerd starts (setup.sh must start later units with systemctl --no-block).
set -eu
dir=/run/deckhand/seed dev=/dev/disk/by-label/dh-seed
# udev names the disk while this runs: wait for it (up to 60 s)
n=0
until [ -e "$dev" ]; do
  n=$((n + 1))
  [ "$n" -lt 600 ] || { echo "deckhand-seed: no $dev after 60 s" >&2; exit 1; }
  sleep 0.1
done
mkdir -p "$dir"
mountpoint -q "$dir" || mount -t ext4 -o ro,noload "$dev" "$dir"
if [ -f "$dir/setup.sh" ]; then
  echo "deckhand-seed: running $dir/setup.sh"
  cd "$dir"
  sh "$dir/setup.sh"
fi
EOF
  recipe_put 0644 /etc/systemd/system/deckhand-seed.service <<'EOF'
[Unit]
Description=deckhand: the seed disk's files and setup.sh (deckhand.seed)
ConditionKernelCommandLine=deckhand.seed
# (no Requires= on the disk's .device: that job would wait 90 s on a VM without a seed disk,
# condition or not; the script waits for the disk instead)
After=systemd-udev-trigger.service local-fs.target deckhand-net-setup.service
Before=containerd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/deckhand-seed

[Install]
WantedBy=multi-user.target
EOF
}

# what starts at boot: ours, networkd, sshd, containerd; masked: periodic jobs and first-boot
# prompts a disposable test VM has no use for (they only slow the boot or wake up under test)
recipe_services() {
  recipe_put 0644 /etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf <<'EOF'
# hack/vm.sh console: the serial console logs root in (only root on the host reaches it)
[Service]
ExecStart=
ExecStart=-/sbin/agetty -o '-p -f -- \\u' --keep-baud --autologin root 115200,57600,38400,9600 - $TERM
EOF
  chroot "$ROOTFS" systemctl enable --quiet deckhand-net-setup.service deckhand-ssh-hostkey.service \
    deckhand-seed.service systemd-networkd.service ssh.service containerd.service
  chroot "$ROOTFS" systemctl mask --quiet apt-daily.timer apt-daily-upgrade.timer apt-daily.service \
    apt-daily-upgrade.service dpkg-db-backup.timer dpkg-db-backup.service e2scrub_all.timer \
    e2scrub_all.service e2scrub_reap.service fstrim.timer man-db.timer logrotate.timer \
    systemd-firstboot.service getty@tty1.service
}

# what the image must not carry: build-time caches, the mirror's package lists, host keys
recipe_cleanup() {
  rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
         "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/bootstrap.log "$ROOTFS"/etc/ssh/ssh_host_*
  mkdir -p "$ROOTFS/var/lib/apt/lists/partial"
}

# a small initramfs: only the virtio disk's and NIC's drivers (ext4 is built into the cloud
# kernel), not MODULES=most's hundreds (6 MB instead of 15; loading modules is slow under TCG)
recipe_initramfs() {
  recipe_put 0644 /etc/initramfs-tools/conf.d/deckhand.conf <<'EOF'
# hack/build-vm-image.sh: the VM boots from a virtio disk (QEMU), nothing else; no resume device
MODULES=list
RESUME=none
EOF
  recipe_put 0644 /etc/initramfs-tools/modules <<'EOF'
# hack/build-vm-image.sh (MODULES=list): what mounting /dev/vda needs, and the NIC's driver
# (loaded here, eth0 is there when deckhand-net-setup looks for it)
virtio_pci
virtio_blk
virtio_net
EOF
  mount -t proc proc "$ROOTFS/proc"
  chroot "$ROOTFS" update-initramfs -u -k all >&2 || { umount "$ROOTFS/proc"; die "update-initramfs failed"; }
  umount "$ROOTFS/proc"
}

# kernel and initrd out of /boot, then the disk image (sparse; no loop device)
recipe_disk() {  # OUT_DIR
  local kernel
  kernel=$(cd "$ROOTFS/boot" && ls vmlinuz-* | sort -V | tail -1)
  [ -n "$kernel" ] && [ -f "$ROOTFS/boot/initrd.img-${kernel#vmlinuz-}" ] || die "no kernel and initrd in $ROOTFS/boot"
  cp "$ROOTFS/boot/$kernel" "$1/vmlinuz"
  cp "$ROOTFS/boot/initrd.img-${kernel#vmlinuz-}" "$1/initrd.img"
  echo "${kernel#vmlinuz-}" > "$WORK/kernel-version"
  log "mke2fs -t ext4 -d (rootfs $(du -sh --one-file-system "$ROOTFS" | cut -f1)) into a $IMAGE_SIZE sparse image"
  # (mke2fs says "Creating regular file" on stdout even with -q: stdout is for the image dir)
  mke2fs -q -F -t ext4 -L dh-root -E root_owner=0:0 -d "$ROOTFS" "$1/rootfs.img" "$IMAGE_SIZE" >&2 ||
    die "mke2fs failed"
  chmod 0444 "$1/rootfs.img"
}

# ---------------------------------------------------------------------------------------------
# the build
# ---------------------------------------------------------------------------------------------

# every mount below DIR (debootstrap's /proc and /sys, should it stop half way), deepest first
unmount_below() {
  local m
  for m in $(awk -v d="$1" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}

remove_work() {
  [ -n "${WORK:-}" ] && [ -d "$WORK" ] || return 0
  unmount_below "$WORK"
  rm -rf --one-file-system "$WORK"
}

# build-info (build_seconds is added last, when the image is complete)
build_info() {  # OUT_DIR DEBOOTSTRAP_SECONDS
  local admin="$ROOTFS/var/lib/dpkg" p
  {
    echo "build_id=$(cat /proc/sys/kernel/random/uuid)"
    echo "key=$KEY"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "debootstrap_seconds=$2"
    echo "suite=$SUITE"
    echo "kernel=$(cat "$WORK/kernel-version")"
    for p in systemd containerd runc containernetworking-plugins openssh-server iptables; do
      echo "pkg_$p=$(dpkg-query --admindir="$admin" -W -f='${Version}' "$p" 2>/dev/null || echo '?')"
    done
  } > "$1/build-info.tmp"
}

build() {  # OUT_DIR
  local out=$1 mirror t0=$SECONDS t1
  mirror=$(host_mirror)
  [ -n "$mirror" ] || die "no deb source for $SUITE main in the host's apt sources (apt-get indextargets)"
  WORK="$out.tmp"
  remove_work
  mkdir -p "$WORK/out"
  ROOTFS="$WORK/rootfs"
  trap remove_work EXIT
  recipe_debootstrap "$mirror"
  t1=$((SECONDS - t0))
  log "debootstrap done in ${t1}s; configuring"
  ssh-keygen -q -t ed25519 -N "" -C "root@dh-vm (hack/build-vm-image.sh $KEY)" -f "$WORK/out/id_ed25519"
  recipe_base
  recipe_ssh "$WORK/out/id_ed25519.pub"
  recipe_network
  recipe_kernel
  recipe_seed
  recipe_services
  recipe_initramfs
  recipe_cleanup
  recipe_disk "$WORK/out"
  build_info "$WORK/out" "$t1"
  rm -rf "$out"
  mv "$WORK/out" "$out"
  remove_work
  trap - EXIT
  # build-info last: its presence says the image is complete
  echo "build_seconds=$((SECONDS - t0))" >> "$out/build-info.tmp"
  mv "$out/build-info.tmp" "$out/build-info"
  log "image $out built in $((SECONDS - t0))s (debootstrap ${t1}s; kernel $(sed -n 's/^kernel=//p' "$out/build-info"))"
}

main() {
  local mode=build out
  case "${1:-}" in
    "") ;;
    --print-dir) mode=print ;;
    --rebuild) mode=rebuild ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  KEY=$(image_key)
  out="$CACHE_DIR/$KEY"
  if [ "$mode" = print ]; then
    echo "$out"
    [ -f "$out/build-info" ]; return
  fi
  if [ "$mode" = build ] && [ -f "$out/build-info" ]; then echo "$out"; return 0; fi
  [ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot)"
  "$ROOT/hack/install-deps.sh" vm >&2
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/$KEY.lock"
  if ! flock -n 9; then
    log "another build of $KEY runs; waiting for it"
    flock -w 1800 9 || die "timed out waiting for the other build of $KEY"
  fi
  if [ "$mode" = build ] && [ -f "$out/build-info" ]; then echo "$out"; return 0; fi
  build "$out"
  echo "$out"
}

# (exit on the same line: bash reads a script as it runs, so an edit during a build is harmless)
main "$@"; exit
