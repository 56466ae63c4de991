#!/usr/bin/env bash
# Builds crictl (the CRI command-line client; Debian 12 does not package it) from its Go module into
# _output/bin/crictl. sigs.k8s.io/cri-tools has no replace directives, so a plain `go install
# module@version` works. A machine-wide copy keyed by version is kept in
# ${DECKHAND_CACHE:-/var/cache/deckhand}/crictl/<version>/ so a fresh clone skips the build.
#
# crictl is a convenience for people and a cleanup path for hack/local-up.sh (`crictl rmp -af`);
# nothing requires it, so callers treat a failed build as a warning.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CRICTL_VERSION=${CRICTL_VERSION:-v1.37.0}
BIN="$ROOT/_output/bin"
CACHE="${DECKHAND_CACHE:-/var/cache/deckhand}/crictl/$CRICTL_VERSION"
mkdir -p "$BIN" "$CACHE"

if [ -x "$BIN/crictl" ] && [ "$(cat "$BIN/.crictl.version" 2>/dev/null)" = "$CRICTL_VERSION" ]; then
  echo "build-crictl: crictl $CRICTL_VERSION already built"
  exit 0
fi
if [ ! -x "$CACHE/crictl" ]; then
  echo "build-crictl: building crictl $CRICTL_VERSION (about a minute)"
  rm -rf "$CACHE/gobin"
  GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$CACHE/gobin" \
    go install -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  mv -f "$CACHE/gobin/crictl" "$CACHE/crictl"
  rm -rf "$CACHE/gobin"
fi
cp -f "$CACHE/crictl" "$BIN/crictl"
echo "$CRICTL_VERSION" > "$BIN/.crictl.version"
echo "build-crictl: crictl $CRICTL_VERSION in $BIN/crictl"
