#!/usr/bin/env bash
# Installs the Debian packages the harness, the build and the tests need. Idempotent: packages
# already present are skipped without touching apt.
#
# Usage: hack/install-deps.sh [GROUP...]
#   GROUP is harness (the default when none is named: the list below), vm (the VM list below) or
#   vagrant (the Vagrant list below); e.g. `hack/install-deps.sh vm` installs only what a VM
#   needs, `harness vm` both.
#
# Every program a test or the harness calls comes from this list (or from a build script of the
# project: hack/build-k8s.sh for etcd/kube-apiserver/kube-controller-manager/kubectl/kube-proxy,
# hack/build-crictl.sh for crictl, hack/build-coredns.sh for coredns: Go from the machine, modules
# from the Go module proxy); no test relies on what happens to be on the machine.
#   containerd runc containernetworking-plugins  the runtime and CNI (local-up; every e2e test)
#   docker-registry skopeo umoci busybox-static   the local registries and the images built here
#                                                 (local-up; e2e::gc and e2e::podspec call skopeo/umoci;
#                                                 busybox's nslookup is e2e::dns's client)
#   iptables iproute2 kmod                        network, guards, hostPort (local-up; e2e::network)
#   openssl                                       PKI (local-up); e2e::join and e2e::server certificates
#   curl                                          e2e::server (the :10250 server), local-up health checks
#   jq procps psmisc util-linux                   local-up (pids, mounts, tmpfs root dir, status)
#   protobuf-compiler libc6-dev gcc               the build (CRI protos, the pause image)
#   gzip                                          the release build (its link order list)
#   python3                                       hack/lib/test_symbol_layout.py (the tools that make
#                                                 that list: hack/symbol-order.sh)
#   libseccomp-dev pkg-config                     runc for the containerd 2.x runtime
#                                                 (hack/build-containerd.sh: cgo, seccomp)
#   systemd                                       tests/systemd_units.rs (systemd-analyze verify)
#   vagrant                                       tests/systemd_units.rs (`vagrant validate
#                                                 --ignore-provider`: no VM provider is needed)
#   bash-static netcat-openbsd nginx              the conformance images (hack/images/build-e2e-images.sh:
#   bind9-dnsutils                                busybox's /bin/sh, agnhost's nc, the nginx image's
#                                                 binary, dig/nslookup/host in agnhost and
#                                                 glibc-dns-testing for the DNS tests); nginx is
#                                                 installed with services held back (policy-rc.d)
#                                                 and never runs on the host
#
# The vm group: a Debian 12 VM under QEMU (hack/build-vm-image.sh, hack/vm.sh, hack/lib/vm.sh):
#   qemu-system-x86 qemu-utils                    QEMU (TCG: KVM does not work here) and qemu-img
#                                                 (the VM's qcow2 overlay on the cached image)
#   debootstrap                                   the VM's root filesystem, from the mirror the
#                                                 host's apt is configured with
#   e2fsprogs                                     mke2fs -d: the disk image without a loop device
#   openssh-client                                ssh, scp and ssh-keygen (the VM's root key)
#   socat                                         hack/vm.sh console (the serial console socket)
#                                                 and the QEMU monitor (hack/vm.sh down)
#   iproute2 iptables                             the VM's tap device and its guard chains
#   busybox-static                                the tiny image `ctr run` checks the VM with
#
# The vagrant group: `vagrant up` with the libvirt provider on this machine (vagrant/Vagrantfile,
# hack/vagrant-box.sh, hack/lib/libvirt.sh; the vm group comes along: the box is its image):
#   vagrant vagrant-libvirt                       Vagrant and its libvirt provider
#   libvirt-daemon-system                         libvirtd and virtlogd (started by hand by
#                                                 hack/lib/libvirt.sh: no systemd here); it brings
#                                                 libvirt-daemon-config-network, whose NAT network
#                                                 `default` hack/lib/libvirt.sh never starts
#   libvirt-clients                               virsh (networks, domains, the cleanup checks)
#   dnsmasq-base                                  DHCP on the isolated management network (no DNS)
#   qemu-system-x86 qemu-utils                    the domain's QEMU (type qemu: TCG) and qemu-img
#                                                 (the box's qcow2)
#   rsync                                         the Vagrantfile's rsync synced folders (host side)
#   openssh-client                                vagrant ssh
#   e2fsprogs                                     debugfs: the box's changes to the image's disk
#   iptables iproute2                             the guard chain, the bridges' checks
set -euo pipefail
harness_pkgs=(containerd runc containernetworking-plugins docker-registry skopeo umoci busybox-static
      iptables iproute2 openssl protobuf-compiler libc6-dev gcc libseccomp-dev pkg-config curl jq kmod
      procps psmisc util-linux gzip python3
      systemd vagrant bash-static netcat-openbsd nginx bind9-dnsutils)
vm_pkgs=(qemu-system-x86 qemu-utils debootstrap e2fsprogs openssh-client socat iproute2 iptables
         busybox-static)
vagrant_pkgs=(vagrant vagrant-libvirt libvirt-daemon-system libvirt-clients dnsmasq-base
              qemu-system-x86 qemu-utils rsync openssh-client e2fsprogs iptables iproute2)
pkgs=()
[ $# -gt 0 ] || set -- harness
for group in "$@"; do
  case "$group" in
    harness) pkgs+=("${harness_pkgs[@]}") ;;
    vm) pkgs+=("${vm_pkgs[@]}") ;;
    vagrant) pkgs+=("${vm_pkgs[@]}" "${vagrant_pkgs[@]}") ;;
    *) echo "install-deps: unknown group $group (use harness, vm or vagrant)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # no package starts a service on this machine while it installs (nginx would listen on :80)
  policy_rc=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; policy_rc=1
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  [ "$policy_rc" = 0 ] || rm -f /usr/sbin/policy-rc.d
fi
# Debian's packages may start services on install where an init system exists; the harness runs its
# own containerd and registry with its own configs, so stop packaged ones if they came up.
command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] && {
  systemctl disable --now containerd docker-registry nginx >/dev/null 2>&1 || true
}
true
