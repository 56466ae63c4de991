#!/usr/bin/env bash
# Builds rancher's local-path-provisioner (the dynamic provisioner behind kind's default
# StorageClass `standard`) from its Go module at LOCAL_PATH_PROVISIONER_VERSION (hack/versions.env),
# static (CGO_ENABLED=0), for the image hack/images/build-images.sh makes of it. The binary lands in
# _output/bin/local-path-provisioner; a machine-wide copy keyed by version is kept in
# ${DECKHAND_CACHE:-/var/cache/deckhand}/local-path-provisioner/<version>/, so a fresh clone on the
# same machine skips the build (about 4 minutes of CPU on 2 cores the first time).
#
# Usage: hack/build-local-path-provisioner.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/hack/versions.env"
export PATH=/usr/local/go/bin:$PATH
V=$LOCAL_PATH_PROVISIONER_VERSION
BIN="$ROOT/_output/bin"
CACHE="${DECKHAND_CACHE:-/var/cache/deckhand}/local-path-provisioner/$V"
mkdir -p "$BIN" "$CACHE" "$ROOT/_output"

exec 9>"$ROOT/_output/.build-local-path-provisioner.lock"
flock -w 3600 9 || { echo "build-local-path-provisioner: timed out waiting for another build" >&2; exit 1; }

if [ -x "$BIN/local-path-provisioner" ] && [ "$(cat "$BIN/.local-path-provisioner.version" 2>/dev/null)" = "$V" ]; then
  echo "build-local-path-provisioner: $V already built"
  exit 0
fi
if [ ! -x "$CACHE/local-path-provisioner" ]; then
  echo "build-local-path-provisioner: building github.com/rancher/local-path-provisioner@$V"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-trimpath GOBIN="$tmp" \
    go install -ldflags '-s -w' "github.com/rancher/local-path-provisioner@$V"
  install -m 0755 "$tmp/local-path-provisioner" "$CACHE/local-path-provisioner"
fi
install -m 0755 "$CACHE/local-path-provisioner" "$BIN/local-path-provisioner"
echo "$V" > "$BIN/.local-path-provisioner.version"
echo "build-local-path-provisioner: $BIN/local-path-provisioner ($V)"
