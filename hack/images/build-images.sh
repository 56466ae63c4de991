#!/usr/bin/env bash
# Builds the cluster's two images without pulling anything from outside, and pushes them to the
# local registry:
#   busybox  - Debian's static /bin/busybox, every applet linked in /bin, /etc/passwd+group with
#              root and nobody, cmd /bin/sh, PATH set
#   pause    - hack/images/pause.c compiled with gcc -static (the sandbox image)
# Tags pushed (REGISTRY defaults to 127.0.0.1:5000):
#   library/busybox:latest, library/busybox:1.36  (docker.io/library/busybox via the mirror)
#   busybox:latest                                (direct 127.0.0.1:5000/busybox refs)
#   pause:3.10                                    (registry.k8s.io/pause:3.10 via the mirror)
#
# Fast path: the OCI layout in _output/images/oci is rebuilt only when its inputs change (this
# script, pause.c, /bin/busybox); a tag is pushed only when the registry does not already hold
# exactly the manifest the layout has.
#
# Usage: hack/images/build-images.sh [--force]     (--force rebuilds and re-pushes everything)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/hack/images"
REGISTRY=${REGISTRY:-127.0.0.1:5000}
WORK="$ROOT/_output/images"
LAYOUT="$WORK/oci"
BUSYBOX_BIN=${BUSYBOX_BIN:-/bin/busybox}
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { echo "build-images: $*"; }
die() { echo "build-images: ERROR: $*" >&2; exit 1; }

for t in umoci skopeo gcc strip curl jq sha256sum readelf; do
  command -v "$t" >/dev/null || die "$t not found (run hack/install-deps.sh)"
done
[ -x "$BUSYBOX_BIN" ] || die "$BUSYBOX_BIN not found (apt-get install busybox-static)"
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
)

inputs_hash() {
  { sha256sum "$HERE/build-images.sh" "$HERE/pause.c" "$BUSYBOX_BIN" | awk '{print $1}'
    echo "$ARCH"; } | sha256sum | awk '{print $1}'
}
HASH=$(inputs_hash)

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
layout_digest() {
  jq -r --arg n "$1" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $n) | .digest' \
    "$LAYOUT/index.json"
}

# digest the registry serves for repo:tag (empty if absent)
registry_digest() {
  local repo=${1%%:*} tag=${1##*:}
  curl -sfI --max-time 5 \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY/v2/$repo/manifests/$tag" 2>/dev/null |
    tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}' || true
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
if [ "$pushed" = 0 ]; then
  log "registry $REGISTRY already has every tag (busybox $(layout_digest busybox | cut -c8-19), pause $(layout_digest pause | cut -c8-19))"
else
  log "pushed $pushed tag(s) to $REGISTRY"
fi
