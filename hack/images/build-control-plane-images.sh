#!/usr/bin/env bash
# Builds the control-plane images a kubeadm cluster runs as static pods (issue 16: a kubeadm
# cluster whose kubelets are deckhand), from the binaries hack/build-k8s.sh builds from the pinned
# Kubernetes Go modules, without pulling anything from outside, and pushes them to the local
# registry under exactly the names and tags `kubeadm config images list` prints for KUBE_VERSION:
#   kube-apiserver, kube-controller-manager, kube-scheduler
#                 _output/bin/<name> as /usr/local/bin/<name> (where upstream's images have it)
#   etcd          _output/bin/etcd (go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes
#                 requires) as /usr/local/bin/etcd
# Each is one shared base layer (/etc/passwd+group with root, nobody and nonroot as in upstream's
# distroless base, /tmp) plus a layer with the static binary; ENTRYPOINT /usr/local/bin/<name>, PATH
# set: kubeadm's static pod manifests run the bare names (`command: [kube-apiserver, ...]`, `etcd`),
# and every probe they carry is an httpGet, so nothing else (no shell, no etcdctl) is needed.
# kube-proxy, coredns and pause come from hack/images/build-images.sh's layout (_output/images/oci);
# this script adds the tags kubeadm wants that it does not push (pause:3.10.2 where it pushes
# pause:3.10 for the harness's sandbox image).
#
# Tags come from the kubeadm binary itself (`kubeadm config images list --kubernetes-version
# KUBE_VERSION`, offline when the version is given), twice: with the default imageRepository
# (registry.k8s.io/X is served as $REGISTRY/X through the containerd mirror of hack/local-up.sh) and
# with imageRepository $REGISTRY (kubeadm then drops the coredns/ path element, so coredns is also
# pushed as coredns:<tag>). For KUBE_VERSION v1.36.3 that is:
#   kube-apiserver:v1.36.3 kube-controller-manager:v1.36.3 kube-scheduler:v1.36.3 kube-proxy:v1.36.3
#   coredns/coredns:v1.14.2 coredns:v1.14.2 pause:3.10.2 etcd:3.6.8-0
# kube-* tags must be KUBE_VERSION and coredns's COREDNS_VERSION (else the script stops: the binary
# would not be the version the tag names). etcd: the tag is the one kubeadm asks for, the binary the
# one built from the pinned module graph; if the versions differ (today they agree: 3.6.8 and
# 3.6.8-0, the -0 being registry.k8s.io's image revision) the script says so and pushes anyway, since
# kubeadm reads etcd's version only from the image tag (SupportedEtcdVersion, upgrade decisions) and
# kube-apiserver at KUBE_VERSION is built against the etcd client of that same module graph.
#
# etcd:<tag> and pause:<tag> are also pushed by hack/images/build-e2e-images.sh (the conformance
# suite names the same tags) with interchangeable images (etcd at /usr/local/bin/etcd on the PATH;
# pause.c). This script pushes those two only when the registry has no such tag (or with --force),
# so the two scripts do not keep replacing each other's manifests.
#
# Fast path: the OCI layout _output/images/cp-oci is rebuilt only when its inputs change (this
# script, the binaries, kubeadm's image list); a tag is pushed only when the registry does not
# already hold exactly the manifest the layout has.
#
# Usage: hack/images/build-control-plane-images.sh [--force]
#        (or CONTROL_PLANE_IMAGES=1 hack/images/build-images.sh, which runs it after its own images)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/hack/images"
REGISTRY=${REGISTRY:-127.0.0.1:5000}
. "$ROOT/hack/versions.env"
. "$HERE/lib.sh"
BIN="$ROOT/_output/bin"
WORK="$ROOT/_output/images"
LAYOUT="$WORK/cp-oci"
BASE_LAYOUT="$WORK/oci"   # hack/images/build-images.sh's: kube-proxy, coredns, pause
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { echo "build-control-plane-images: $*"; }
die() { echo "build-control-plane-images: ERROR: $*" >&2; exit 1; }

for t in umoci skopeo curl jq sha256sum readelf; do
  command -v "$t" >/dev/null || die "$t not found (run hack/install-deps.sh)"
done
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler etcd)
for b in kubeadm "${COMPONENTS[@]}"; do
  [ -x "$BIN/$b" ] || die "$BIN/$b not found (run hack/build-k8s.sh $b)"
done
for b in "${COMPONENTS[@]}"; do
  if readelf -l "$BIN/$b" | grep -q 'program interpreter'; then
    die "$BIN/$b is dynamically linked; the image has no libc (hack/build-k8s.sh builds with CGO_ENABLED=0)"
  fi
done
[ -f "$BASE_LAYOUT/index.json" ] || die "$BASE_LAYOUT not found (run hack/images/build-images.sh first)"

case "$(uname -m)" in
  x86_64) ARCH=amd64 ;;
  aarch64) ARCH=arm64 ;;
  *) ARCH=$(uname -m) ;;
esac

# kubeadm's image list: one ref a line. With --kubernetes-version kubeadm does not look up a release
# (checked with no network at all: `unshare -n`); stderr only warns that there is no default route.
kubeadm_images() { # extra kubeadm flags...
  "$BIN/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" -o json "$@" 2>/dev/null |
    jq -r '.images[]'
}
default_list=$(kubeadm_images) || die "kubeadm config images list failed"
local_list=$(kubeadm_images --image-repository "$REGISTRY") || die "kubeadm config images list --image-repository failed"
[ -n "$default_list" ] && [ -n "$local_list" ] || die "kubeadm config images list printed no images"

# repo:tag (as served by $REGISTRY) -> "layout-dir image-name-in-layout mode"; mode exact: the
# registry must serve the layout's manifest; mode shared: any image already under the tag is kept
declare -A PUSH=()
add_ref() { # ref-with-registry-prefix prefix
  local ref=${1#"$2"/} repo tag name
  [ "$ref" != "$1" ] || die "kubeadm named $1, outside $2"
  repo=${ref%:*} tag=${ref##*:} name=${repo##*/}
  case "$name" in
    kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy)
      [ "$tag" = "$KUBE_VERSION" ] || die "kubeadm wants $ref, the binaries are $KUBE_VERSION"
      if [ "$name" = kube-proxy ]; then PUSH[$ref]="$BASE_LAYOUT kube-proxy exact"
      else PUSH[$ref]="$LAYOUT $name exact"; fi ;;
    coredns)
      [ "$tag" = "$COREDNS_VERSION" ] ||
        die "kubeadm deploys CoreDNS $tag, hack/versions.env builds COREDNS_VERSION=$COREDNS_VERSION: update it"
      PUSH[$ref]="$BASE_LAYOUT coredns exact" ;;
    pause) PUSH[$ref]="$BASE_LAYOUT pause shared" ;;
    etcd) PUSH[$ref]="$LAYOUT etcd shared"; ETCD_TAG=$tag ;;
    *) die "kubeadm wants $ref, which this script does not build" ;;
  esac
}
ETCD_TAG=
for r in $default_list; do add_ref "$r" registry.k8s.io; done
for r in $local_list; do add_ref "$r" "$REGISTRY"; done
[ -n "$ETCD_TAG" ] || die "kubeadm named no etcd image"

inputs_hash() {
  { sha256sum "$HERE/build-control-plane-images.sh" "$HERE/lib.sh" "${COMPONENTS[@]/#/$BIN/}" | awk '{print $1}'
    printf '%s\n' "$default_list" "$ARCH"; } | sha256sum | awk '{print $1}'
}
HASH=$(inputs_hash)

build_layout() {
  log "building images (inputs changed or no layout yet)"
  local tmp="$WORK/cp-build.$$" c v
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "'"$tmp"'"' EXIT

  # the binaries are the versions the tags name (etcd: see the header)
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    v=$("$BIN/$c" --version | awk '{print $2}')
    [ "$v" = "$KUBE_VERSION" ] || die "$BIN/$c is $v, not $KUBE_VERSION (run hack/build-k8s.sh $c)"
  done
  v=$("$BIN/etcd" --version | sed -n 's/^etcd Version: //p')
  [ "$v" = "${ETCD_TAG%-*}" ] ||
    log "note: kubeadm wants etcd:$ETCD_TAG, the etcd of the pinned module graph is $v; pushed as etcd:$ETCD_TAG"

  umoci init --layout "$tmp/oci"
  # the shared base layer
  umoci new --image "$tmp/oci:base"
  umoci unpack --image "$tmp/oci:base" "$tmp/bundle-base" >/dev/null
  local R="$tmp/bundle-base/rootfs"
  mkdir -p "$R"/{etc,tmp,usr/local/bin}
  chmod 1777 "$R/tmp"
  write_nonroot_accounts "$R"
  umoci repack --image "$tmp/oci:base" "$tmp/bundle-base"

  for c in "${COMPONENTS[@]}"; do
    umoci unpack --image "$tmp/oci:base" "$tmp/bundle-$c" >/dev/null
    cp "$BIN/$c" "$tmp/bundle-$c/rootfs/usr/local/bin/$c"
    chmod 0755 "$tmp/bundle-$c/rootfs/usr/local/bin/$c"
    umoci repack --image "$tmp/oci:$c" "$tmp/bundle-$c"
    umoci config --image "$tmp/oci:$c" --config.entrypoint "/usr/local/bin/$c" \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --config.workingdir / --architecture "$ARCH" --os linux
    rm -rf "$tmp/bundle-$c"
  done
  umoci rm --image "$tmp/oci:base"
  umoci gc --layout "$tmp/oci"
  rm -rf "$LAYOUT"
  mv "$tmp/oci" "$LAYOUT"
  echo "$HASH" > "$WORK/.cp-inputs-hash"
  rm -rf "$tmp"; trap - EXIT
}

layout_digest() { oci_layout_digest "$1" "$2"; } # layout name
registry_digest() { oci_registry_digest "$REGISTRY" "$1"; } # repo:tag

mkdir -p "$WORK"
curl -sf --max-time 5 "http://$REGISTRY/v2/" >/dev/null || die "registry http://$REGISTRY/v2/ does not answer"

if [ "$FORCE" = 1 ] || [ ! -f "$LAYOUT/index.json" ] || [ "$(cat "$WORK/.cp-inputs-hash" 2>/dev/null)" != "$HASH" ]; then
  build_layout
fi

pushed=0
for ref in $(printf '%s\n' "${!PUSH[@]}" | sort); do
  read -r layout name mode <<<"${PUSH[$ref]}"
  want=$(layout_digest "$layout" "$name")
  [ -n "$want" ] || die "layout $layout has no image $name (for $ref)"
  have=$(registry_digest "$ref")
  if [ "$FORCE" = 0 ] && { [ "$have" = "$want" ] || { [ "$mode" = shared ] && [ -n "$have" ]; }; }; then continue; fi
  log "pushing $name -> $REGISTRY/$ref"
  skopeo copy --quiet --dest-tls-verify=false "oci:$layout:$name" "docker://$REGISTRY/$ref"
  have=$(registry_digest "$ref")
  [ "$have" = "$want" ] || die "after pushing $REGISTRY/$ref the registry serves '$have', expected $want"
  pushed=$((pushed + 1))
done
if [ "$pushed" = 0 ]; then
  log "registry $REGISTRY already has every tag kubeadm $KUBE_VERSION wants (${#PUSH[@]})"
else
  log "pushed $pushed tag(s) to $REGISTRY"
fi
