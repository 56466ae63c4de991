#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kubectl, kube-proxy (and, for benchmarks,
# kubelet and kube-scheduler; for hack/conformance.sh, the upstream conformance suite e2e.test, the
# ginkgo CLI that runs it, and the agnhost, nonewprivs and sample-apiserver binaries its images carry;
# for a kubeadm cluster whose kubelets are deckhand (issue 16), kubeadm, whose control-plane images
# hack/images/build-control-plane-images.sh builds) from the Kubernetes Go modules at the version
# pinned in hack/versions.env.
#
# `go install k8s.io/kubernetes/cmd/...@vX` refuses modules with replace directives, so we
# generate a small module of our own (under _output/k8s-build) that requires k8s.io/kubernetes and
# replaces every staging module with its published v0.X.Y. etcd is built from the same module graph
# (k8s.io/kubernetes requires go.etcd.io/etcd/server/v3 at the version it supports).
#
# Usage: hack/build-k8s.sh [binary ...]   (default: etcd kube-apiserver kube-controller-manager kubectl
#                                          kube-proxy)
# Binaries land in _output/bin; a machine-wide copy keyed by version is kept in
# ${DECKHAND_CACHE:-/var/cache/deckhand}/k8s/<version>/ so a fresh clone on the same machine skips the build.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/versions.env"
OUT="$ROOT/_output"
BIN="$OUT/bin"
CACHE="${DECKHAND_CACHE:-/var/cache/deckhand}/k8s/$KUBE_VERSION"
mkdir -p "$BIN" "$CACHE"

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(etcd kube-apiserver kube-controller-manager kubectl kube-proxy)

declare -A pkg=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubeadm]=k8s.io/kubernetes/cmd/kubeadm
  # conformance (hack/conformance.sh): e2e.test is a test binary (go test -c)
  [e2e.test]=k8s.io/kubernetes/test/e2e
  [ginkgo]=github.com/onsi/ginkgo/v2/ginkgo
  [agnhost]=k8s.io/kubernetes/test/images/agnhost
  [nonewprivs]=k8s.io/kubernetes/test/images/nonewprivs
  [sample-apiserver]=k8s.io/sample-apiserver
)

# one build at a time: local-up, hack/conformance.sh and hack/test.sh's background build may all ask,
# and concurrent runs would fight over the generated module and compile the same packages twice
exec 9>"$OUT/.build-k8s.lock"
flock -w 3600 9 || { echo "build-k8s: timed out waiting for another build" >&2; exit 1; }

need=()
for t in "${targets[@]}"; do
  [ -n "${pkg[$t]:-}" ] || { echo "build-k8s: unknown binary $t" >&2; exit 2; }
  if [ -x "$BIN/$t" ] && [ "$(cat "$BIN/.$t.version" 2>/dev/null)" = "$KUBE_VERSION" ]; then continue; fi
  if [ -x "$CACHE/$t" ]; then
    cp -f "$CACHE/$t" "$BIN/$t"; echo "$KUBE_VERSION" > "$BIN/.$t.version"; continue
  fi
  need+=("$t")
done
[ ${#need[@]} -gt 0 ] || { echo "build-k8s: ${targets[*]} at $KUBE_VERSION already built"; exit 0; }

export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
MOD="$OUT/k8s-build"
mkdir -p "$MOD"
# the module is regenerated when the version or the package list changes
MODKEY="$KUBE_VERSION $(printf '%s\n' "${pkg[@]}" | sort | sha256sum | cut -c1-16)"
if [ ! -f "$MOD/go.sum" ] || [ "$(cat "$MOD/.version" 2>/dev/null)" != "$MODKEY" ]; then
  echo "build-k8s: generating the build module for k8s.io/kubernetes $KUBE_VERSION"
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  {
    echo "module deckhand.local/k8s-build"
    echo
    sed -n 's/^go \(.*\)/go \1/p' "$gomod"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # one replace per staging module, pointed at its published version
    grep -E '^[[:space:]]*k8s\.io/[^ ]+ => \./staging/' "$gomod" |
      awk -v v="$KUBE_STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
  } > "$MOD/go.mod"
  cat > "$MOD/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"

	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/nonewprivs"
	_ "k8s.io/sample-apiserver"
)
GO
  (cd "$MOD" && go mod tidy -e >/dev/null)
  echo "$MODKEY" > "$MOD/.version"
fi

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
install_built() { # target, file just built
  mv -f "$2" "$CACHE/$1"
  cp -f "$CACHE/$1" "$BIN/$1"
  echo "$KUBE_VERSION" > "$BIN/.$1.version"
}
# Every program but e2e.test in one `go build`: it compiles each shared package once and links the
# binaries in parallel (one `go build` per binary links one at a time, leaving a core idle).
# `go build -o DIR` names each binary after its package path (the element before a /vN suffix).
mains=() e2e=0
for t in "${need[@]}"; do
  if [ "$t" = e2e.test ]; then e2e=1; else mains+=("$t"); fi
done
if [ ${#mains[@]} -gt 0 ]; then
  echo "build-k8s: building ${mains[*]} ($KUBE_VERSION); the first build takes many minutes"
  tmp="$CACHE/.build.tmp"; rm -rf "$tmp"; mkdir -p "$tmp"
  pkgs=(); for t in "${mains[@]}"; do pkgs+=("${pkg[$t]}"); done
  (cd "$MOD" && go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  for t in "${mains[@]}"; do
    p=${pkg[$t]}; name=${p##*/}
    [[ "$name" =~ ^v[0-9]+$ ]] && { p=${p%/*}; name=${p##*/}; }
    install_built "$t" "$tmp/$name"
  done
  rm -rf "$tmp"
fi
if [ "$e2e" = 1 ]; then
  echo "build-k8s: building e2e.test ($KUBE_VERSION, go test -c); the first build takes many minutes"
  (cd "$MOD" && go test -c -trimpath -ldflags "$ldflags" -o "$CACHE/e2e.test.tmp" "${pkg[e2e.test]}")
  install_built e2e.test "$CACHE/e2e.test.tmp"
fi
echo "build-k8s: done (${need[*]})"
