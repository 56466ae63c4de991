#!/usr/bin/env bash
# Builds CoreDNS (the cluster DNS server: the kube-system/coredns Deployment of hack/manifests/
# coredns.yaml) from its Go module at COREDNS_VERSION (hack/versions.env: the version kubeadm
# deploys at our Kubernetes version) into _output/bin/coredns, as upstream's Makefile builds it:
# static (CGO_ENABLED=0), every plugin of its plugin.cfg, -tags grpcnotrace, stripped.
# github.com/coredns/coredns has no replace directives, so a plain `go install module@version`
# works (as for crictl, see hack/build-crictl.sh). A machine-wide copy keyed by version is kept in
# ${DECKHAND_CACHE:-/var/cache/deckhand}/coredns/<version>/ so a fresh clone skips the build.
#
# hack/images/build-images.sh puts the binary in an image; hack/local-up.sh calls both.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/hack/versions.env"
BIN="$ROOT/_output/bin"
CACHE="${DECKHAND_CACHE:-/var/cache/deckhand}/coredns/$COREDNS_VERSION"
mkdir -p "$BIN" "$CACHE"

if [ -x "$BIN/coredns" ] && [ "$(cat "$BIN/.coredns.version" 2>/dev/null)" = "$COREDNS_VERSION" ]; then
  echo "build-coredns: coredns $COREDNS_VERSION already built"
  exit 0
fi
if [ ! -x "$CACHE/coredns" ]; then
  echo "build-coredns: building coredns $COREDNS_VERSION (a few minutes the first time: it has many plugins)"
  rm -rf "$CACHE/gobin"
  GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$CACHE/gobin" \
    go install -trimpath -tags grpcnotrace -ldflags "-s -w" \
    "github.com/coredns/coredns@$COREDNS_VERSION"
  mv -f "$CACHE/gobin/coredns" "$CACHE/coredns"
  rm -rf "$CACHE/gobin"
fi
cp -f "$CACHE/coredns" "$BIN/coredns"
echo "$COREDNS_VERSION" > "$BIN/.coredns.version"
echo "build-coredns: coredns $COREDNS_VERSION in $BIN/coredns"
