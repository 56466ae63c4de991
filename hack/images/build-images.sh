#!/usr/bin/env bash
# Builds the cluster's images without pulling anything from outside, and pushes them to the
# local registries:
#   busybox     - Debian's static /bin/busybox, every applet linked in /bin, /etc/passwd+group
#                 with root and nobody, cmd /bin/sh, PATH set
#   pause       - hack/images/pause.c compiled with gcc -static (the sandbox image)
#   kube-proxy  - _output/bin/kube-proxy (hack/build-k8s.sh, the pinned Kubernetes version) in
#                 /usr/local/bin, plus the host's iptables (xtables-nft-multi as iptables,
#                 iptables-save, iptables-restore; the same nf_tables backend the host uses), its
#                 extension modules and every shared library they load (no IPv6 tools: kube-proxy
#                 then runs single-stack IPv4)
#   curl        - the busybox image plus Debian's /usr/bin/curl and its shared libraries (a TLS
#                 client for in-pod tests against the API server)
#   coredns     - _output/bin/coredns (hack/build-coredns.sh: static, CoreDNS at COREDNS_VERSION)
#                 as /coredns, the entrypoint, and /etc/passwd+group; nothing else (upstream's is
#                 distroless/static). It runs as root, where upstream's runs as nonroot with a
#                 cap_net_bind_service file capability: the Deployment drops every capability
#                 but NET_BIND_SERVICE, which root keeps across exec without file capabilities
#   local-path-provisioner - _output/bin/local-path-provisioner (hack/build-local-path-provisioner.sh:
#                 static, rancher's release at LOCAL_PATH_PROVISIONER_VERSION) in /usr/local/bin;
#                 its helper pods run the busybox image
# Tags pushed (REGISTRY defaults to 127.0.0.1:5000):
#   library/busybox:latest, library/busybox:1.36  (docker.io/library/busybox via the mirror)
#   busybox:latest                                (direct 127.0.0.1:5000/busybox refs)
#   pause:3.10                                    (registry.k8s.io/pause:3.10 via the mirror)
#   kube-proxy:$KUBE_VERSION                      (registry.k8s.io/kube-proxy:<v> via the mirror)
#   curl:latest                                   (direct 127.0.0.1:5000/curl refs)
#   coredns/coredns:$COREDNS_VERSION              (registry.k8s.io/coredns/coredns:<v> via the mirror)
#   rancher/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION (docker.io/rancher/... via the mirror)
# and, when AUTH_REGISTRY (e.g. 127.0.0.1:5001) and AUTH_CREDS_FILE (one line user:password) are
# set, to the password-protected registry:
#   private/busybox:latest
#
# CONTROL_PLANE_IMAGES=1 then also runs hack/images/build-control-plane-images.sh: kube-apiserver,
# kube-controller-manager, kube-scheduler and etcd, and every tag `kubeadm config images list` names
# (pause:3.10.2, coredns:<v>), for a kubeadm cluster (issue 16). Off by default: hack/local-up.sh's
# single node needs none of them.
#
# Fast path: the OCI layout in _output/images/oci is rebuilt only when its inputs change (this
# script, pause.c and the binaries copied in); a tag is pushed only when the registry does not
# already hold exactly the manifest the layout has.
#
# Usage: hack/images/build-images.sh [--force]     (--force rebuilds and re-pushes everything)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/hack/images"
REGISTRY=${REGISTRY:-127.0.0.1:5000}
AUTH_REGISTRY=${AUTH_REGISTRY:-}
AUTH_CREDS_FILE=${AUTH_CREDS_FILE:-}
. "$ROOT/hack/versions.env"
. "$HERE/lib.sh"
KUBE_PROXY_BIN=${KUBE_PROXY_BIN:-$ROOT/_output/bin/kube-proxy}
XTABLES_BIN=${XTABLES_BIN:-/usr/sbin/xtables-nft-multi}
CURL_BIN=${CURL_BIN:-/usr/bin/curl}
COREDNS_BIN=${COREDNS_BIN:-$ROOT/_output/bin/coredns}
# WITH_COREDNS=0: no coredns image (hack/local-up.sh with LOCAL_UP_DNS=0; no CoreDNS binary needed)
WITH_COREDNS=${WITH_COREDNS:-1}
LOCAL_PATH_BIN=${LOCAL_PATH_BIN:-$ROOT/_output/bin/local-path-provisioner}
# WITH_LOCAL_PATH=0: no local-path-provisioner image (hack/local-up.sh with LOCAL_UP_STORAGE=0)
WITH_LOCAL_PATH=${WITH_LOCAL_PATH:-1}
# CONTROL_PLANE_IMAGES=1: the kubeadm control-plane images too (hack/images/build-control-plane-images.sh)
CONTROL_PLANE_IMAGES=${CONTROL_PLANE_IMAGES:-0}
WORK="$ROOT/_output/images"
LAYOUT="$WORK/oci"
BUSYBOX_BIN=${BUSYBOX_BIN:-/bin/busybox}
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { echo "build-images: $*"; }
die() { echo "build-images: ERROR: $*" >&2; exit 1; }

for t in umoci skopeo gcc strip curl jq sha256sum readelf ldd; do
  command -v "$t" >/dev/null || die "$t not found (run hack/install-deps.sh)"
done
[ -x "$BUSYBOX_BIN" ] || die "$BUSYBOX_BIN not found (apt-get install busybox-static)"
[ -x "$KUBE_PROXY_BIN" ] || die "$KUBE_PROXY_BIN not found (run hack/build-k8s.sh kube-proxy)"
[ -x "$XTABLES_BIN" ] || die "$XTABLES_BIN not found (apt-get install iptables)"
[ -x "$CURL_BIN" ] || die "$CURL_BIN not found (apt-get install curl)"
if [ "$WITH_COREDNS" = 1 ]; then
  [ -x "$COREDNS_BIN" ] || die "$COREDNS_BIN not found (run hack/build-coredns.sh)"
  if readelf -l "$COREDNS_BIN" | grep -q 'program interpreter'; then
    die "$COREDNS_BIN is dynamically linked; the image has no libc (build it with CGO_ENABLED=0)"
  fi
fi
if [ "$WITH_LOCAL_PATH" = 1 ]; then
  [ -x "$LOCAL_PATH_BIN" ] || die "$LOCAL_PATH_BIN not found (run hack/build-local-path-provisioner.sh)"
  if readelf -l "$LOCAL_PATH_BIN" | grep -q 'program interpreter'; then
    die "$LOCAL_PATH_BIN is dynamically linked; the image has no libc (build it with CGO_ENABLED=0)"
  fi
fi
if [ "$CONTROL_PLANE_IMAGES" = 1 ] && [ "$WITH_COREDNS" != 1 ]; then
  die "CONTROL_PLANE_IMAGES=1 needs the coredns image (WITH_COREDNS=1): kubeadm deploys CoreDNS"
fi
if readelf -l "$BUSYBOX_BIN" | grep -q 'program interpreter'; then
  die "$BUSYBOX_BIN is dynamically linked; the image needs busybox-static's binary"
fi

case "$(uname -m)" in
  x86_64) ARCH=amd64 ;;
  aarch64) ARCH=arm64 ;;
  *) ARCH=$(uname -m) ;;
esac

# name-in-layout -> space-separated list of repo:tag pushed from it
declare -A PUSH=(
  [busybox]="library/busybox:latest library/busybox:1.36 busybox:latest"
  [pause]="pause:3.10"
  [kube-proxy]="kube-proxy:$KUBE_VERSION"
  [curl]="curl:latest"
  [coredns]="coredns/coredns:$COREDNS_VERSION"
  [local-path-provisioner]="rancher/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION"
)
[ "$WITH_COREDNS" = 1 ] || unset 'PUSH[coredns]'
[ "$WITH_LOCAL_PATH" = 1 ] || unset 'PUSH[local-path-provisioner]'
# the same for the password-protected registry
declare -A PUSH_AUTH=(
  [busybox]="private/busybox:latest"
)
XTABLES_DIR=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/xtables

inputs_hash() {
  { sha256sum "$HERE/build-images.sh" "$HERE/lib.sh" "$HERE/pause.c" "$BUSYBOX_BIN" "$KUBE_PROXY_BIN" \
      "$XTABLES_BIN" "$CURL_BIN" | awk '{print $1}'
    if [ "$WITH_COREDNS" = 1 ]; then sha256sum "$COREDNS_BIN" | awk '{print $1}'; echo "coredns $COREDNS_VERSION"; fi
    if [ "$WITH_LOCAL_PATH" = 1 ]; then sha256sum "$LOCAL_PATH_BIN" | awk '{print $1}'; echo "local-path $LOCAL_PATH_PROVISIONER_VERSION"; fi
    echo "$ARCH"; } | sha256sum | awk '{print $1}'
}
HASH=$(inputs_hash)

# copy_with_libs ROOTFS FILE...: copies each file to the same path under ROOTFS, with every
# shared library ldd resolves for it (and the dynamic loader), so the binary runs in the image
copy_with_libs() {
  local R=$1; shift
  local f lib
  for f in "$@"; do
    mkdir -p "$R$(dirname "$f")"
    cp -L "$f" "$R$f"
    for lib in $(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
      [ -e "$R$lib" ] && continue
      mkdir -p "$R$(dirname "$lib")"
      cp -L "$lib" "$R$lib"
    done
  done
}

build_layout() {
  log "building images (inputs changed or no layout yet)"
  local tmp="$WORK/build.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "'"$tmp"'"' EXIT

  # pause: static, stripped
  gcc -Os -static -Wall -Werror -o "$tmp/pause" "$HERE/pause.c"
  strip "$tmp/pause"

  umoci init --layout "$tmp/oci"

  # busybox
  umoci new --image "$tmp/oci:busybox"
  umoci unpack --image "$tmp/oci:busybox" "$tmp/bundle-busybox" >/dev/null
  local R="$tmp/bundle-busybox/rootfs"
  mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,etc,tmp,proc,sys,dev,root,var,home,run}
  chmod 1777 "$R/tmp"; chmod 700 "$R/root"
  cp "$BUSYBOX_BIN" "$R/bin/busybox"
  local a
  for a in $("$BUSYBOX_BIN" --list); do
    [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"
  done
  cat > "$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
  cat > "$R/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nogroup:x:65534:
EOF
  umoci repack --image "$tmp/oci:busybox" "$tmp/bundle-busybox"
  umoci config --image "$tmp/oci:busybox" --config.cmd /bin/sh \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.workingdir / --architecture "$ARCH" --os linux

  # curl: busybox plus Debian's curl and its libraries
  umoci new --image "$tmp/oci:curl"
  umoci unpack --image "$tmp/oci:curl" "$tmp/bundle-curl" >/dev/null
  rm -rf "$tmp/bundle-curl/rootfs"
  cp -a "$tmp/bundle-busybox/rootfs" "$tmp/bundle-curl/rootfs"
  copy_with_libs "$tmp/bundle-curl/rootfs" "$CURL_BIN"
  umoci repack --image "$tmp/oci:curl" "$tmp/bundle-curl"
  umoci config --image "$tmp/oci:curl" --config.cmd /bin/sh \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.workingdir / --architecture "$ARCH" --os linux

  # kube-proxy: the binary, iptables (nf_tables backend, as on the host) and its extensions
  umoci new --image "$tmp/oci:kube-proxy"
  umoci unpack --image "$tmp/oci:kube-proxy" "$tmp/bundle-kube-proxy" >/dev/null
  R="$tmp/bundle-kube-proxy/rootfs"
  mkdir -p "$R"/{usr/local/bin,usr/sbin,etc,tmp,run,var/lib/kube-proxy,lib/modules}
  chmod 1777 "$R/tmp"
  cp "$KUBE_PROXY_BIN" "$R/usr/local/bin/kube-proxy"
  copy_with_libs "$R" "$XTABLES_BIN"
  local t
  for t in iptables iptables-save iptables-restore iptables-nft iptables-nft-save iptables-nft-restore; do
    ln -sf "$(basename "$XTABLES_BIN")" "$R/usr/sbin/$t"
  done
  if [ -d "$XTABLES_DIR" ]; then
    copy_with_libs "$R" "$XTABLES_DIR"/*.so
  fi
  for t in /etc/protocols /etc/ethertypes; do [ -f "$t" ] && cp "$t" "$R$t"; done
  cp "$tmp/bundle-busybox/rootfs/etc/passwd" "$tmp/bundle-busybox/rootfs/etc/group" "$R/etc/"
  umoci repack --image "$tmp/oci:kube-proxy" "$tmp/bundle-kube-proxy"
  umoci config --image "$tmp/oci:kube-proxy" --config.entrypoint /usr/local/bin/kube-proxy \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.workingdir / --architecture "$ARCH" --os linux

  # coredns: the static binary alone (its Corefile comes from the ConfigMap volume)
  if [ "$WITH_COREDNS" = 1 ]; then
    umoci new --image "$tmp/oci:coredns"
    umoci unpack --image "$tmp/oci:coredns" "$tmp/bundle-coredns" >/dev/null
    R="$tmp/bundle-coredns/rootfs"
    mkdir -p "$R/etc" "$R/tmp"
    chmod 1777 "$R/tmp"
    cp "$COREDNS_BIN" "$R/coredns"
    chmod 0755 "$R/coredns"
    write_nonroot_accounts "$R"
    umoci repack --image "$tmp/oci:coredns" "$tmp/bundle-coredns"
    umoci config --image "$tmp/oci:coredns" --config.entrypoint /coredns \
      --config.exposedports 53/tcp --config.exposedports 53/udp \
      --config.workingdir / --architecture "$ARCH" --os linux
  fi

  # local-path-provisioner: the static binary on the PATH (the Deployment runs
  # `local-path-provisioner start`), /etc/passwd+group and a /tmp
  if [ "$WITH_LOCAL_PATH" = 1 ]; then
    umoci new --image "$tmp/oci:local-path-provisioner"
    umoci unpack --image "$tmp/oci:local-path-provisioner" "$tmp/bundle-lpp" >/dev/null
    R="$tmp/bundle-lpp/rootfs"
    mkdir -p "$R/usr/local/bin" "$R/etc" "$R/tmp"
    chmod 1777 "$R/tmp"
    cp "$LOCAL_PATH_BIN" "$R/usr/local/bin/local-path-provisioner"
    chmod 0755 "$R/usr/local/bin/local-path-provisioner"
    cp "$tmp/bundle-busybox/rootfs/etc/passwd" "$tmp/bundle-busybox/rootfs/etc/group" "$R/etc/"
    umoci repack --image "$tmp/oci:local-path-provisioner" "$tmp/bundle-lpp"
    umoci config --image "$tmp/oci:local-path-provisioner" --config.entrypoint local-path-provisioner \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --config.workingdir / --architecture "$ARCH" --os linux
  fi

  # pause
  umoci new --image "$tmp/oci:pause"
  umoci unpack --image "$tmp/oci:pause" "$tmp/bundle-pause" >/dev/null
  cp "$tmp/pause" "$tmp/bundle-pause/rootfs/pause"
  umoci repack --image "$tmp/oci:pause" "$tmp/bundle-pause"
  umoci config --image "$tmp/oci:pause" --config.entrypoint /pause --config.user 65535:65535 \
    --config.workingdir / --architecture "$ARCH" --os linux

  umoci gc --layout "$tmp/oci"
  rm -rf "$LAYOUT"
  mv "$tmp/oci" "$LAYOUT"
  echo "$HASH" > "$WORK/.inputs-hash"
  rm -rf "$tmp"; trap - EXIT
}

# digest of the manifest a tag points at in the local layout
layout_digest() { oci_layout_digest "$LAYOUT" "$1"; }

# digest the registry (REGISTRY, or the protected one given as $2) serves for repo:tag
registry_digest() {
  local reg=${2:-$REGISTRY} auth=()
  [ "$reg" = "$REGISTRY" ] || auth=(--netrc-file "$NETRC")
  oci_registry_digest "$reg" "$1" ${auth[@]+"${auth[@]}"}
}

mkdir -p "$WORK"
curl -sf --max-time 5 "http://$REGISTRY/v2/" >/dev/null || die "registry http://$REGISTRY/v2/ does not answer"

if [ "$FORCE" = 1 ] || [ ! -f "$LAYOUT/index.json" ] || [ "$(cat "$WORK/.inputs-hash" 2>/dev/null)" != "$HASH" ]; then
  build_layout
fi

pushed=0
for name in "${!PUSH[@]}"; do
  want=$(layout_digest "$name")
  [ -n "$want" ] || die "layout $LAYOUT has no image $name"
  for ref in ${PUSH[$name]}; do
    have=$(registry_digest "$ref")
    if [ "$FORCE" = 0 ] && [ "$have" = "$want" ]; then continue; fi
    log "pushing $name -> $REGISTRY/$ref"
    skopeo copy --quiet --dest-tls-verify=false "oci:$LAYOUT:$name" "docker://$REGISTRY/$ref"
    have=$(registry_digest "$ref")
    [ "$have" = "$want" ] || die "after pushing $REGISTRY/$ref the registry serves '$have', expected $want"
    pushed=$((pushed + 1))
  done
done
if [ -n "$AUTH_REGISTRY" ]; then
  [ -r "$AUTH_CREDS_FILE" ] || die "AUTH_CREDS_FILE=$AUTH_CREDS_FILE is not readable"
  # credentials stay in files (never on a command line or in the log)
  NETRC="$WORK/.netrc-auth.$$"
  AUTHFILE="$WORK/.auth-$$.json"
  trap 'rm -f "$NETRC" "$AUTHFILE"' EXIT
  ( umask 077
    user=$(cut -d: -f1 "$AUTH_CREDS_FILE"); pass=$(cut -d: -f2- "$AUTH_CREDS_FILE")
    printf 'machine %s login %s password %s\n' "${AUTH_REGISTRY%%:*}" "$user" "$pass" > "$NETRC"
    printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$AUTH_REGISTRY" "$(printf '%s' "$user:$pass" | base64 -w0)" > "$AUTHFILE" )
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$AUTH_REGISTRY/v2/" || true)
  [ "$code" = 401 ] || die "registry http://$AUTH_REGISTRY/v2/ answers $code without credentials (want 401)"
  curl -sf --max-time 5 --netrc-file "$NETRC" "http://$AUTH_REGISTRY/v2/" >/dev/null ||
    die "registry http://$AUTH_REGISTRY/v2/ refuses the credentials in $AUTH_CREDS_FILE"
  for name in "${!PUSH_AUTH[@]}"; do
    want=$(layout_digest "$name")
    for ref in ${PUSH_AUTH[$name]}; do
      have=$(registry_digest "$ref" "$AUTH_REGISTRY")
      if [ "$FORCE" = 0 ] && [ "$have" = "$want" ]; then continue; fi
      log "pushing $name -> $AUTH_REGISTRY/$ref (with credentials)"
      skopeo copy --quiet --dest-tls-verify=false --dest-authfile "$AUTHFILE" "oci:$LAYOUT:$name" "docker://$AUTH_REGISTRY/$ref"
      have=$(registry_digest "$ref" "$AUTH_REGISTRY")
      [ "$have" = "$want" ] || die "after pushing $AUTH_REGISTRY/$ref the registry serves '$have', expected $want"
      pushed=$((pushed + 1))
    done
  done
  rm -f "$NETRC" "$AUTHFILE"; trap - EXIT
fi

if [ "$pushed" = 0 ]; then
  log "registry $REGISTRY already has every tag (busybox $(layout_digest busybox | cut -c8-19), pause $(layout_digest pause | cut -c8-19)$([ "$WITH_COREDNS" = 1 ] && echo ", coredns $(layout_digest coredns | cut -c8-19)"))"
else
  log "pushed $pushed tag(s) to $REGISTRY"
fi

if [ "$CONTROL_PLANE_IMAGES" = 1 ]; then
  force=(); [ "$FORCE" = 1 ] && force=(--force)
  REGISTRY=$REGISTRY "$HERE/build-control-plane-images.sh" ${force[@]+"${force[@]}"}
fi
