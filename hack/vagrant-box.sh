#!/usr/bin/env bash
# The Vagrant box deckhand/bookworm64 (provider libvirt) made from the project's VM image
# (hack/build-vm-image.sh), and libvirt run by hand on this machine (no systemd here), so that
# `vagrant up node --provider=libvirt` (vagrant/Vagrantfile) works with nothing downloaded.
#
# Usage:
#   hack/vagrant-box.sh [build]     build the box unless cached, and `vagrant box add` it (--force)
#   hack/vagrant-box.sh --rebuild   build it again even if cached, and add it
#   hack/vagrant-box.sh --print     print the box file's path (exit 1 if it is not built yet)
#   hack/vagrant-box.sh start       libvirtd and virtlogd, the isolated networks dh-vagrant0
#                                   (management, 10.252.0.0/24) and dh-vagrant1 (the node's,
#                                   10.252.1.0/24), the storage pool, the guard chain
#                                   (hack/lib/libvirt.sh says what exactly); builds and adds the
#                                   box first if it is not there
#   hack/vagrant-box.sh stop [--purge]  all of that stopped and removed (domains still running are
#                                   destroyed: `vagrant destroy` first); checks nothing is left;
#                                   --purge also removes the box's volumes from the storage pool
#   hack/vagrant-box.sh status
# Then:
#   cd vagrant && vagrant up node --provider=libvirt [--no-provision]
#   vagrant ssh node -c 'systemctl is-system-running'
#   vagrant destroy -f node && cd .. && hack/vagrant-box.sh stop
#
# The box (a tar: box.img, metadata.json, Vagrantfile, vmlinuz, initrd.img) is cached as
# ${DECKHAND_CACHE:-/var/cache/deckhand}/vagrant/<key>/deckhand-bookworm64.box, <key> a hash of
# the image's build id and this script's box_* functions. Its disk is the image's rootfs.img with
# what a Vagrant box needs on top, added in a chroot on a copy (loop mount), nothing else changed:
#   - user vagrant (sudo without a password; Vagrant's insecure public key, which Vagrant swaps
#     for a key of its own on the first `vagrant up`, as with any public box), and the packages
#     sudo, rsync (Vagrant's rsync synced folders) and jq (vagrant/provision.sh), with their
#     dependencies, from the host's apt (`apt-get download`: the same Debian release);
#   - DHCP on eth0 when the kernel command line has no deckhand.ip= (systemd-networkd,
#     /etc/systemd/network/80-vagrant-eth0.network, client id = MAC): vagrant-libvirt finds the
#     VM by its management network's DHCP lease; deckhand-net-setup's own file (10-deckhand)
#     wins when deckhand.ip= is given, so the image's interface is unchanged. Vagrant writes the
#     private network's static address itself (50-vagrant-eth1.network).
# The image has no bootloader: the box's Vagrantfile boots its kernel and initrd directly
# (vagrant-libvirt kernel/initrd/cmd_line: root=/dev/vda rw console=ttyS0 net.ifnames=0
# systemd.unified_cgroup_hierarchy=1 ...). QEMU runs as libvirt-qemu, which cannot read the box
# directory under /root/.vagrant.d: the kernel and initrd it boots are the copies beside the box
# file in the cache (world-readable), and the box's own copies when those are gone.
# After `vagrant box add --force`, the old box's volumes in the libvirt storage pool are removed
# (vagrant-libvirt uploads the new box as a new volume; the old ones would stay forever).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=/dev/null
source "$ROOT/hack/lib/network.sh"
# shellcheck source=/dev/null
source "$ROOT/hack/lib/libvirt.sh"

BOX_NAME=${DECKHAND_VAGRANT_BOX:-deckhand/bookworm64}
BOX_CACHE="${DECKHAND_CACHE:-/var/cache/deckhand}/vagrant"
# packages added to the image (their dependencies are in it already; dpkg says otherwise)
BOX_DEBS=(sudo rsync libpopt0 jq libjq1 libonig5)
# the kernel command line (hack/lib/vm.sh's, without the per-VM parts: the machine id, the
# address, the hostname, the seed disk; without panic=-1, which with libvirt's default
# on_crash=destroy... would only reboot)
BOX_CMDLINE="root=/dev/vda rw console=ttyS0 net.ifnames=0 mitigations=off systemd.unified_cgroup_hierarchy=1 systemd.firstboot=off"

T0=$SECONDS
log() { printf '[vagrant-box %3ss] %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[vagrant-box %3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# the box recipe: every box_* function is part of the cache key
# ---------------------------------------------------------------------------------------------

box_put() {  # MODE PATH: stdin into $MNT/PATH
  mkdir -p "$(dirname "$MNT$2")"
  cat > "$MNT$2"
  chmod "$1" "$MNT$2"
}

box_packages() {  # DEB_DIR
  local debs
  debs=$(find "$1" -maxdepth 1 -name '*.deb' -printf '/tmp/box-debs/%f\n' | sort)
  mkdir -p "$MNT/tmp/box-debs"
  cp "$1"/*.deb "$MNT/tmp/box-debs/"
  # no service starts in the chroot
  printf '#!/bin/sh\nexit 101\n' | box_put 0755 /usr/sbin/policy-rc.d
  # shellcheck disable=SC2086
  chroot "$MNT" env DEBIAN_FRONTEND=noninteractive dpkg -i $debs > "$WORK/dpkg.log" 2>&1 ||
    { tail -n 30 "$WORK/dpkg.log" >&2; die "dpkg -i in the image failed (log $WORK/dpkg.log)"; }
  rm -rf "$MNT/tmp/box-debs" "$MNT/usr/sbin/policy-rc.d"
}

box_vagrant_user() {  # INSECURE_PUBKEY
  chroot "$MNT" useradd --create-home --shell /bin/bash --groups sudo,adm,systemd-journal vagrant
  install -d -m 0700 "$MNT/home/vagrant/.ssh"
  box_put 0600 /home/vagrant/.ssh/authorized_keys < "$1"
  chroot "$MNT" chown -R vagrant:vagrant /home/vagrant/.ssh
  box_put 0440 /etc/sudoers.d/vagrant <<'EOF'
# hack/vagrant-box.sh: Vagrant's user runs everything as root without a password (as in any box)
vagrant ALL=(ALL) NOPASSWD: ALL
Defaults:vagrant !requiretty
EOF
}

box_network() {
  box_put 0644 /etc/systemd/network/80-vagrant-eth0.network <<'EOF'
# hack/vagrant-box.sh: the first NIC (vagrant-libvirt's management network) by DHCP. Only when
# the kernel command line has no deckhand.ip=: deckhand-net-setup's 10-deckhand.network matches
# first then. The private networks are Vagrant's (50-vagrant-ethN.network, static).
[Match]
Name=eth0

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no

[DHCPv4]
ClientIdentifier=mac
UseDNS=no
UseNTP=no
UseDomains=no
EOF
}

box_metadata() {  # OUT_DIR VIRTUAL_SIZE_GB
  printf '{"provider":"libvirt","format":"qcow2","virtual_size":%s}\n' "$2" > "$1/metadata.json"
}

box_vagrantfile() {  # OUT_DIR BOOT_DIR
  cat > "$1/Vagrantfile" <<EOF
# deckhand/bookworm64 (hack/vagrant-box.sh): the project's Debian 12 VM image, booted without a
# bootloader: libvirt boots its kernel and initrd directly. QEMU (user libvirt-qemu) reads them
# from the box's cache (world-readable, unlike /root/.vagrant.d), or from the box's own copies
# when that is gone: $2
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    boot = "$2"
    boot = __dir__ unless File.readable?(File.join(boot, "vmlinuz")) && File.readable?(File.join(boot, "initrd.img"))
    lv.kernel = File.join(boot, "vmlinuz")
    lv.initrd = File.join(boot, "initrd.img")
    lv.cmd_line = "$BOX_CMDLINE"
    lv.disk_bus = "virtio"
    lv.nic_model_type = "virtio"
    # the serial console only (vagrant-libvirt adds a VNC display and a video card otherwise)
    lv.graphics_type = "none"
  end
end
EOF
}

# ---------------------------------------------------------------------------------------------
# the build
# ---------------------------------------------------------------------------------------------

cache_key() {  # IMAGE_DIR
  # shellcheck disable=SC2046
  { sed -n 's/^build_id=//p' "$1/build-info"; declare -p BOX_DEBS BOX_CMDLINE; declare -f $(compgen -A function box_); } |
    sha256sum | cut -c1-16
}

cleanup_work() {
  [ -n "${WORK:-}" ] && [ -d "$WORK" ] || return 0
  if [ -n "${MNT:-}" ] && mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
  rm -rf --one-file-system "$WORK"
}

build() {  # IMAGE_DIR OUT_DIR
  local img=$1 out=$2 t0=$SECONDS pubkey size_gb deb_dir
  pubkey=$(find /usr/share/rubygems-integration /usr/lib/ruby /usr/share/vagrant -path '*/vagrant*/keys/vagrant.pub' 2>/dev/null | head -1 || true)
  [ -f "$pubkey" ] || die "Vagrant's insecure public key (keys/vagrant.pub of the vagrant package) is not found"
  WORK="$out.tmp"
  cleanup_work
  mkdir -p "$WORK/out" "$WORK/mnt" "$WORK/debs"
  MNT="$WORK/mnt"
  trap cleanup_work EXIT
  log "packages ${BOX_DEBS[*]} from the host's apt (apt-get download)"
  if ! (cd "$WORK/debs" && apt-get download -q "${BOX_DEBS[@]}" > "$WORK/apt.log" 2>&1); then
    apt-get update -qq
    (cd "$WORK/debs" && apt-get download -q "${BOX_DEBS[@]}" > "$WORK/apt.log" 2>&1) ||
      { cat "$WORK/apt.log" >&2; die "apt-get download ${BOX_DEBS[*]} failed"; }
  fi
  deb_dir="$WORK/debs"
  log "copy of $img/rootfs.img, loop-mounted"
  cp --sparse=always "$img/rootfs.img" "$WORK/disk.raw"
  chmod 0644 "$WORK/disk.raw"
  mount -o loop "$WORK/disk.raw" "$MNT"
  box_packages "$deb_dir"
  box_vagrant_user "$pubkey"
  box_network
  umount "$MNT"
  e2fsck -fy "$WORK/disk.raw" > "$WORK/e2fsck.log" 2>&1 || [ $? -le 1 ] || { cat "$WORK/e2fsck.log" >&2; die "e2fsck of the box disk failed"; }
  log "qcow2 box.img"
  qemu-img convert -O qcow2 "$WORK/disk.raw" "$WORK/out/box.img"
  rm -f "$WORK/disk.raw"
  size_gb=$(( ($(qemu-img info --output=json "$WORK/out/box.img" | sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p') + (1 << 30) - 1) >> 30 ))
  cp "$img/vmlinuz" "$img/initrd.img" "$WORK/out/"
  chmod 0644 "$WORK/out/vmlinuz" "$WORK/out/initrd.img"
  box_metadata "$WORK/out" "$size_gb"
  box_vagrantfile "$WORK/out" "$out"
  log "tar into deckhand-bookworm64.box"
  tar -C "$WORK/out" -cf "$WORK/out/deckhand-bookworm64.box" metadata.json Vagrantfile box.img vmlinuz initrd.img
  rm -f "$WORK/out/box.img"
  {
    echo "image=$img"
    echo "image_build_id=$(sed -n 's/^build_id=//p' "$img/build-info")"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "packages=$(find "$deb_dir" -maxdepth 1 -name '*.deb' -printf '%f ' | sort)"
    echo "build_seconds=$((SECONDS - t0))"
  } > "$WORK/out/build-info"
  rm -rf "$out"
  mv "$WORK/out" "$out"
  chmod 0755 "$out"
  cleanup_work
  trap - EXIT
  log "box $out/deckhand-bookworm64.box built in $((SECONDS - t0))s ($(du -h "$out/deckhand-bookworm64.box" | cut -f1))"
}

# the box's volumes in the pool: vagrant-libvirt names them after the box, its version (0: none)
# and, for a box without a version, a timestamp of the box: a box added again gets a new one
pool_volume_prefix() { echo "${BOX_NAME//\//-VAGRANTSLASH-}_vagrant_box_image_0_"; }

add_box() {  # BOX_FILE
  local vol prefix t0=$SECONDS
  export VAGRANT_CHECKPOINT_DISABLE=1
  vagrant box add --name "$BOX_NAME" "$1" --force >&2 || die "vagrant box add failed"
  log "vagrant box add --name $BOX_NAME: $((SECONDS - t0))s"
  # the volumes of the boxes it replaces (a VM made from one would lose its disk's backing file)
  prefix=$(pool_volume_prefix)
  if lv_up; then
    for vol in $(lv_virsh vol-list --pool "$LV_POOL" 2>/dev/null | awk -v p="$prefix" 'index($1, p) == 1 {print $1}'); do
      lv_virsh vol-delete --pool "$LV_POOL" "$vol" >/dev/null && log "old box volume $vol removed from pool $LV_POOL"
    done
  else
    for vol in "$LV_POOL_DIR/$prefix"*; do
      [ -f "$vol" ] && rm -f "$vol" && log "old box volume $vol removed"
    done
  fi
  return 0
}

is_added() {  # BOX_DIR: is this build the box Vagrant has?
  local d
  d="${VAGRANT_HOME:-$HOME/.vagrant.d}/boxes/${BOX_NAME//\//-VAGRANTSLASH-}/0/libvirt"
  [ -f "$d/Vagrantfile" ] && grep -qF "\"$1\"" "$d/Vagrantfile"
}

main() {
  local mode=${1:-build} img key out
  case "$mode" in
    build|--rebuild|--print) ;;
    start) shift; [ "$(id -u)" = 0 ] || die "run as root"
      out=$("$0" build) || die "the box build failed"
      lv_start; return ;;
    stop) shift; lv_stop "${1:-}"; return ;;
    status) lv_status; return ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown command $mode (see --help)" ;;
  esac
  if [ "$mode" = --print ]; then
    img=$("$ROOT/hack/build-vm-image.sh" --print-dir) || exit 1
    out="$BOX_CACHE/$(cache_key "$img")"
    echo "$out/deckhand-bookworm64.box"
    [ -f "$out/build-info" ]; return
  fi
  [ "$(id -u)" = 0 ] || die "run as root (loop mount, chroot)"
  "$ROOT/hack/install-deps.sh" vagrant >&2
  img=$("$ROOT/hack/build-vm-image.sh") || die "hack/build-vm-image.sh failed"
  key=$(cache_key "$img")
  out="$BOX_CACHE/$key"
  mkdir -p "$BOX_CACHE"
  exec 9>"$BOX_CACHE/$key.lock"
  flock -w 1800 9 || die "timed out waiting for another build of $key"
  if [ "$mode" = --rebuild ] || [ ! -f "$out/build-info" ]; then
    build "$img" "$out"
  fi
  if [ "$mode" = --rebuild ] || ! is_added "$out"; then
    add_box "$out/deckhand-bookworm64.box"
  else
    log "box $BOX_NAME is $out/deckhand-bookworm64.box (cached, added)"
  fi
  echo "$out/deckhand-bookworm64.box"
}

main "$@"; exit
