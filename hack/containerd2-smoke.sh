#!/usr/bin/env bash
# Smoke test of containerd 2.x (hack/build-containerd.sh) with its config (hack/lib/containerd2.sh),
# in isolation: it starts its own containerd 2.x with root, state and socket in a temp dir and an
# empty CNI config dir (so it never touches the cluster's bridge), next to whatever containerd the
# local cluster runs, and checks through crictl (hack/build-crictl.sh): version and status, pulls of
# registry.k8s.io/pause and docker.io/library/busybox through the cluster's hosts.toml files (they
# must resolve to the local registry, so hack/local-up.sh must have run), and one host-network pod
# (the 2.x shim and Debian's runc) whose container prints a line to its CRI log and exits 3. Its
# cgroups live under /<temp dir name>, never under kubepods or k8s.io. Everything it made is removed
# on exit, success or not.
#
# Usage: hack/containerd2-smoke.sh   (as root; prints each step; exit 0 when every check passed)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# the settings of local-up (registry, hosts.toml dir, sandbox image, CNI bin dir)
. "$ROOT/hack/lib/common.sh"
T0=$SECONDS
log() { printf '[containerd2-smoke %3ss] %s\n' "$((SECONDS - T0))" "$*"; }
die() { printf '[containerd2-smoke %3ss] FAIL: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root"

"$ROOT/hack/build-containerd.sh" >/dev/null
"$ROOT/hack/build-crictl.sh" >/dev/null
registry_up() { curl -sf --max-time 2 "http://$REGISTRY/v2/" >/dev/null; }
registry_up || die "no registry at $REGISTRY (run hack/local-up.sh up first)"
[ -f "$CERTS_D/registry.k8s.io/hosts.toml" ] || die "no $CERTS_D/registry.k8s.io/hosts.toml (run hack/local-up.sh up first)"

# short: the shim socket dir ($T/state/s) must stay within 42 characters
T=$(mktemp -d /tmp/ctrd2-smoke.XXXXXX)
CG="/${T##*/}"
export CONTAINERD2_ROOT="$T/root" CONTAINERD2_STATE="$T/state" CONTAINERD2_SOCK="$T/containerd.sock" \
       CONTAINERD2_CONFIG="$T/config.toml" CONTAINERD2_CNI_CONF_DIR="$T/cni"
. "$ROOT/hack/lib/containerd2.sh"
CRICTL=("$BIN/crictl" --runtime-endpoint "$CONTAINERD2_ENDPOINT" --image-endpoint "$CONTAINERD2_ENDPOINT" --timeout 30s)
PID=

cleanup() {
  set +e
  if [ -n "$PID" ]; then
    "${CRICTL[@]}" rmp -af >/dev/null 2>&1
    kill -TERM "$PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
  fi
  # shims of this containerd (their -address is our socket) that outlived it
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
    case "$cmd" in *containerd-shim*"-address $CONTAINERD2_SOCK "*) kill -KILL "${p#/proc/}" 2>/dev/null ;; esac
  done
  local d
  for d in /sys/fs/cgroup/*"$CG"; do
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  awk -v t="$T" '$5 == t || index($5, t "/") == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -rf "$T"
}
trap cleanup EXIT

mkdir -p "$T/cni" "$T/logs"
write_containerd2_config
log "containerd $("$CONTAINERD2_BIN/containerd" --version | awk '{print $3}') on $CONTAINERD2_SOCK (config $CONTAINERD2_CONFIG)"
setsid "$CONTAINERD2_BIN/containerd" --config "$CONTAINERD2_CONFIG" > "$T/containerd.log" 2>&1 < /dev/null &
PID=$!
for _ in $(seq 1 100); do
  "${CRICTL[@]}" version >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$T/containerd.log" >&2; die "containerd exited"; }
  sleep 0.1
done
"${CRICTL[@]}" version | sed 's/^/    /'
"${CRICTL[@]}" version | grep -qx "RuntimeVersion:  $CONTAINERD2_VERSION" || die "not containerd $CONTAINERD2_VERSION"

"${CRICTL[@]}" info > "$T/info.json"
cond() { jq -r --arg t "$1" '.status.conditions[] | select(.type == $t) | .status' "$T/info.json"; }
[ "$(cond RuntimeReady)" = true ] || die "RuntimeReady is not true"
# an empty CNI config dir on purpose
[ "$(cond NetworkReady)" = false ] || die "NetworkReady should be false with an empty CNI config dir"
[ "$(jq -r '.config.containerd.runtimes.runc.runtimePath' "$T/info.json")" = "$CONTAINERD2_BIN/containerd-shim-runc-v2" ] ||
  die "runc runtime_path is not the 2.x shim"
log "status: RuntimeReady=true NetworkReady=false (empty CNI dir), runc handler uses the 2.x shim"

for img in "$SANDBOX_IMAGE" docker.io/library/busybox:latest; do
  "${CRICTL[@]}" pull "$img" >/dev/null || { tail -20 "$T/containerd.log" >&2; die "pull of $img"; }
  log "pulled $img (through $CERTS_D to $REGISTRY)"
done

cat > "$T/pod.json" <<EOF
{ "metadata": {"name": "ctrd2-smoke", "namespace": "default", "uid": "ctrd2-smoke-${T##*.}", "attempt": 0},
  "log_directory": "$T/logs",
  "linux": { "cgroup_parent": "$CG",
             "security_context": { "namespace_options": { "network": 2, "pid": 1 } } } }
EOF
cat > "$T/ctr.json" <<'EOF'
{ "metadata": {"name": "hello", "attempt": 0},
  "image": {"image": "docker.io/library/busybox:latest"},
  "command": ["/bin/sh", "-c", "echo hello from containerd 2.x; exit 3"],
  "log_path": "hello/0.log",
  "linux": { "security_context": { "namespace_options": { "network": 2, "pid": 1 } } } }
EOF
pod=$("${CRICTL[@]}" runp "$T/pod.json") || { tail -20 "$T/containerd.log" >&2; die "RunPodSandbox"; }
ctr=$("${CRICTL[@]}" create "$pod" "$T/ctr.json" "$T/pod.json") || die "CreateContainer"
"${CRICTL[@]}" start "$ctr" >/dev/null || die "StartContainer"
state=
for _ in $(seq 1 100); do
  state=$("${CRICTL[@]}" inspect "$ctr" | jq -r '"\(.status.state) \(.status.exitCode)"')
  [ "$state" = "CONTAINER_EXITED 3" ] && break
  sleep 0.1
done
[ "$state" = "CONTAINER_EXITED 3" ] || die "container state: $state (want CONTAINER_EXITED 3)"
grep -q ' stdout F hello from containerd 2.x$' "$T/logs/hello/0.log" || die "CRI log: $(cat "$T/logs/hello/0.log")"
log "host-network pod: container exited 3 and its CRI log has the line (2.x shim, $(runc --version | head -1))"
"${CRICTL[@]}" rmp -af >/dev/null || die "removing the pod"
log "PASS"
