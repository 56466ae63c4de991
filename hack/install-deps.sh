#!/usr/bin/env bash
# Installs the Debian packages the harness, the build and the tests need. Idempotent: packages
# already present are skipped without touching apt.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins docker-registry skopeo umoci busybox-static
      iptables iproute2 openssl protobuf-compiler libc6-dev gcc curl jq kmod procps psmisc util-linux
      systemd vagrant)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian's packages may start services on install where an init system exists; the harness runs its
# own containerd and registry with its own configs, so stop packaged ones if they came up.
command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ] && {
  systemctl disable --now containerd docker-registry >/dev/null 2>&1 || true
}
true
