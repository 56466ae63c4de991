#!/usr/bin/env bash
# Builds containerd 2.x (containerd, containerd-shim-runc-v2 and ctr) from its Go module
# github.com/containerd/containerd/v2 at CONTAINERD2_VERSION (hack/versions.env), and the runc it
# runs (below), so deckhand can be run and tested on containerd 2.x next to Debian's containerd 1.6
# (which stays the default runtime of hack/local-up.sh, with Debian's runc; the CNI plugins are
# Debian's for both).
#
# The module has no replace directives, so a plain `go install module/cmd/...@version` works (as
# for crictl). Build flags follow upstream's Makefile for Linux: -tags urfave_cli_no_docs, and the
# shim adds no_grpc (it speaks only ttrpc). The binaries are static (CGO_ENABLED=0, like every Go
# build of the project); without cgo the btrfs snapshotter (cgo, libbtrfs headers, which Debian ships
# in libbtrfs-dev and this machine does not have) is left out, and no_btrfs says so explicitly, as
# upstream's Makefile does where the headers are missing. The devmapper, zfs, erofs, blockfile,
# native and overlayfs snapshotters and the CRI plugin are pure Go and built in; the ones this host
# cannot use are skipped at startup, as with 1.6.
#
# runc: containerd 2.x's CRI says a runtime handler supports user namespaces (`hostUsers: false`)
# only when its runc can make idmapped mounts (`runc features`: mountExtensions.idmap), which
# Debian 12's runc 1.1.5 cannot. So runc is built too, from its Go module
# github.com/opencontainers/runc at RUNC_VERSION (hack/versions.env), and the 2.x runtime runs it
# (hack/lib/containerd2.sh); the 1.6 runtime keeps Debian's. runc needs cgo (its nsenter is C) and
# libseccomp (the seccomp build tag, as upstream builds it), so it links against Debian's
# libseccomp (libseccomp-dev and pkg-config, hack/install-deps.sh); -X main.version is what
# upstream's Makefile sets.
#
# Usage: hack/build-containerd.sh
# Binaries land in _output/containerd2/bin (a directory of their own: never on PATH, never mixed with
# Debian's 1.6 containerd/ctr/shim); a machine-wide copy keyed by version and build flags is kept in
# ${DECKHAND_CACHE:-/var/cache/deckhand}/containerd/<version>/ so a fresh clone skips the build.
# A second run with everything in place does nothing. The last line printed names the directory.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/hack/versions.env"
export PATH=/usr/local/go/bin:$PATH
VERSION=$CONTAINERD2_VERSION
BIN="$ROOT/_output/containerd2/bin"
CACHE="${DECKHAND_CACHE:-/var/cache/deckhand}/containerd/$VERSION"
MODULE=github.com/containerd/containerd/v2
TAGS="urfave_cli_no_docs no_btrfs"
SHIM_TAGS="$TAGS no_grpc"
LDFLAGS="-s -w -X $MODULE/version.Version=$VERSION -X $MODULE/version.Package=$MODULE"
RUNC_MODULE=github.com/opencontainers/runc
RUNC_TAGS="seccomp"
RUNC_LDFLAGS="-X main.version=${RUNC_VERSION#v}"
TARGETS=(containerd containerd-shim-runc-v2 ctr runc)
# what the binaries are built from; a change rebuilds them
KEY="$VERSION $(printf '%s|' "$TAGS" "$SHIM_TAGS" "$LDFLAGS" "${TARGETS[@]}" \
  "$RUNC_VERSION" "$RUNC_TAGS" "$RUNC_LDFLAGS" | sha256sum | cut -c1-16)"
mkdir -p "$BIN" "$CACHE" "$ROOT/_output"

# one build at a time (a later local-up mode and a person may both ask for it)
exec 9>"$ROOT/_output/.build-containerd.lock"
flock -w 3600 9 || { echo "build-containerd: timed out waiting for another build" >&2; exit 1; }

have_all() {  # DIR: every target there, built from KEY
  local t
  [ "$(cat "$1/.key" 2>/dev/null)" = "$KEY" ] || return 1
  for t in "${TARGETS[@]}"; do [ -x "$1/$t" ] || return 1; done
}

if have_all "$BIN"; then
  echo "build-containerd: containerd $VERSION and runc $RUNC_VERSION already built"
  echo "build-containerd: ${TARGETS[*]} in $BIN"
  exit 0
fi
if ! have_all "$CACHE"; then
  echo "build-containerd: building ${TARGETS[*]} $VERSION (several minutes the first time)"
  tmp="$CACHE/.build.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$tmp"
  go install -trimpath -tags "$TAGS" -ldflags "$LDFLAGS" \
    "$MODULE/cmd/containerd@$VERSION" "$MODULE/cmd/ctr@$VERSION"
  go install -trimpath -tags "$SHIM_TAGS" -ldflags "$LDFLAGS" \
    "$MODULE/cmd/containerd-shim-runc-v2@$VERSION"
  echo "build-containerd: building runc $RUNC_VERSION"
  CGO_ENABLED=1 go install -trimpath -tags "$RUNC_TAGS" -ldflags "$RUNC_LDFLAGS" \
    "$RUNC_MODULE@$RUNC_VERSION"
  rm -f "$CACHE/.key"
  for t in "${TARGETS[@]}"; do mv -f "$tmp/$t" "$CACHE/$t"; done
  rm -rf "$tmp"
  echo "$KEY" > "$CACHE/.key"
fi
rm -f "$BIN/.key"
for t in "${TARGETS[@]}"; do cp -f "$CACHE/$t" "$BIN/$t"; done
echo "$KEY" > "$BIN/.key"
echo "build-containerd: ${TARGETS[*]} $VERSION in $BIN (cached in $CACHE)"
