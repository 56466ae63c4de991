# shellcheck shell=bash
# hack/lib/containerd.sh: containerd for the local cluster: its config.toml, the hosts.toml files
# that send every common registry name to the local registry, the CNI conflist (bridge dh-cni0,
# portmap), /etc/crictl.yaml, starting it (refusing a containerd it did not start), its health
# checks, and the CRI cleanup `down` does (sandboxes, tasks, shims, mounts, pod cgroups).
# The containerd is Debian's 1.6 (the default) or 2.x (CONTAINERD=2, hack/lib/containerd2.sh):
# use_containerd points the settings at one of them, switch_containerd moves a running cluster
# from one to the other (only one containerd serves the cluster's CNI config at a time).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

# 1.6's settings, as hack/lib/common.sh sets them (use_containerd 1.6 puts them back)
CONTAINERD16_SOCK=$CRI_SOCK
CONTAINERD16_ROOT=$CONTAINERD_ROOT
CONTAINERD16_STATE=$CONTAINERD_STATE
CONTAINERD16_CONFIG=$CONTAINERD_CONFIG
CTR=ctr

# use_containerd MODE (1.6 or 2): CRI_SOCK, CRI_ENDPOINT, CONTAINERD_ROOT/STATE/CONFIG, CTR (its
# ctr) and CONTAINERD_MODE for that containerd. 2.x's come from hack/lib/containerd2.sh, which
# must be sourced before it is used.
use_containerd() {
  case "$1" in
    1.6)
      CRI_SOCK=$CONTAINERD16_SOCK CONTAINERD_ROOT=$CONTAINERD16_ROOT
      CONTAINERD_STATE=$CONTAINERD16_STATE CONTAINERD_CONFIG=$CONTAINERD16_CONFIG CTR=ctr ;;
    2)
      CRI_SOCK=$CONTAINERD2_SOCK CONTAINERD_ROOT=$CONTAINERD2_ROOT
      CONTAINERD_STATE=$CONTAINERD2_STATE CONTAINERD_CONFIG=$CONTAINERD2_CONFIG CTR="$CONTAINERD2_BIN/ctr" ;;
    *) die "use_containerd: unknown containerd mode '$1' (1.6 or 2)" ;;
  esac
  CRI_ENDPOINT="unix://$CRI_SOCK"
  CONTAINERD_MODE=$1
}

# the containerd binary of the mode in use (Debian's from PATH, or the 2.x build)
containerd_bin() {
  if [ "$CONTAINERD_MODE" = 2 ]; then echo "$CONTAINERD2_BIN/containerd"; else command -v containerd || true; fi
}
# its version (1.6.20~ds1, v2.4.2), or nothing
containerd_version() {
  local b; b=$(containerd_bin)
  [ -n "$b" ] && [ -x "$b" ] && "$b" --version 2>/dev/null | awk '{print $3}'
  return 0
}

containerd_answers() { [ -S "$CRI_SOCK" ] && timeout 5 "$CTR" --address "$CRI_SOCK" --timeout 2s version >/dev/null 2>&1; }
cri_plugin_ok() {
  "$CTR" --address "$CRI_SOCK" --timeout 2s plugins ls 2>/dev/null |
    awk '$1=="io.containerd.grpc.v1" && $2=="cri" {print $NF}' | grep -qx ok
}
containerd_healthy() { containerd_answers && cri_plugin_ok; }

write_containerd_config() {
  write_if_changed "$CONTAINERD_CONFIG" <<EOF || true
# $MARKER: containerd 1.6 for the local cluster (cgroup v1, no systemd)
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
oom_score = 0

[grpc]
  address = "$CRI_SOCK"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$SANDBOX_IMAGE"
    # CRI streaming server (exec/attach/port-forward URLs) stays on loopback
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # this VM withholds CAP_SYS_RESOURCE: runc cannot set the sandbox's negative oom_score_adj
    restrict_oom_score_adj = true
    max_container_log_line_size = 16384
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      discard_unpacked_layers = false
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = "$(command -v runc)"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      # hosts.toml per registry (never combine with registry.mirrors: the CRI plugin would not load)
      config_path = "$CERTS_D"
EOF
}

write_hosts_toml() {
  local r
  for r in "${MIRRORED_REGISTRIES[@]}" "$REGISTRY"; do
    write_one_hosts_toml "$r" "$REGISTRY"
  done
  # the password-protected registry is only itself (plain HTTP on loopback)
  write_one_hosts_toml "$REGISTRY_AUTH" "$REGISTRY_AUTH"
}

write_one_hosts_toml() {  # NAME TARGET
  local r=$1 target=$2
  local f="$CERTS_D/$r/hosts.toml"
  if [ -f "$f" ] && ! grep -q "$MARKER" "$f"; then
    warn "replacing $f (not written by local-up; saved as $f.orig)"
    cp -f "$f" "$f.orig"
  fi
  write_if_changed "$f" <<EOF || true
# $MARKER: $r resolves ONLY to the local registry $target
server = "http://$target"

[host."http://$target"]
  capabilities = ["pull", "resolve"]
EOF
}

write_crictl_config() {
  if [ -f "$CRICTL_CONFIG" ] && ! grep -q "$MARKER" "$CRICTL_CONFIG"; then
    warn "replacing $CRICTL_CONFIG (not written by local-up; saved as $CRICTL_CONFIG.orig)"
    cp -f "$CRICTL_CONFIG" "$CRICTL_CONFIG.orig"
  fi
  write_if_changed "$CRICTL_CONFIG" <<EOF || true
# $MARKER
runtime-endpoint: $CRI_ENDPOINT
image-endpoint: $CRI_ENDPOINT
timeout: 30
EOF
}

write_cni_conf() {
  mkdir -p "$CNI_CONF_DIR"
  local f
  for f in "$CNI_CONF_DIR"/*; do
    [ -e "$f" ] || continue
    [ "$f" = "$CNI_CONF" ] && continue
    if grep -q '"deckhand' "$f" 2>/dev/null && grep -q "$CNI_BRIDGE" "$f" 2>/dev/null; then
      log "cni: removing our old config $f"; rm -f "$f"
    else
      warn "foreign CNI config $f present (left alone; containerd loads the first file in lexical order)"
    fi
  done
  cni_conflist "$POD_CIDR" "$POD_GATEWAY" true | write_if_changed "$CNI_CONF" || true
}

# pid of whatever serves a containerd socket (default: the one in use); the extra nodes'
# containerds (hack/lib/nodes.sh) serve the same path in their own mount namespaces and are left out
socket_owner_pid() {
  local ours p; ours=" $(node_daemon_pids) "
  for p in $(ss -Hlxp 2>/dev/null | awk -v s="${1:-$CRI_SOCK}" '$5 == s' | sed -n 's/.*pid=\([0-9]*\).*/\1/p'); do
    [[ "$ours" == *" $p "* ]] || { echo "$p"; return 0; }
  done
}

# containerd (the mode in use) with the cluster's config; `up` moves a cluster that runs the other
# mode to this one first (switch_containerd), and a containerd local-up did not start on either
# mode's socket is refused (or stopped: LOCAL_UP_STOP_FOREIGN_CONTAINERD=1), since it would serve
# the same CNI config
step_containerd() {
  [ "$CONTAINERD_WANTED" = "$CONTAINERD_MODE" ] || switch_containerd
  if [ "$CONTAINERD_MODE" = 2 ]; then
    [ -x "$CONTAINERD2_BIN/containerd" ] || die "no $CONTAINERD2_BIN/containerd (hack/build-containerd.sh builds it)"
    write_containerd2_config
  else
    write_containerd_config
  fi
  # what runs, for every later subcommand (down, status, restart-deckhand, stop/start-containerd)
  echo "$CONTAINERD_MODE" > "$CONTAINERD_MODE_FILE"
  write_hosts_toml
  write_cni_conf
  write_crictl_config
  local argv=("$(containerd_bin)" --config "$CONTAINERD_CONFIG")
  [ -n "${argv[0]}" ] || die "no containerd on PATH (hack/install-deps.sh installs Debian's)"
  if ! running_as containerd "${argv[@]}"; then
    local owner sock
    for sock in "$CONTAINERD16_SOCK" "$CONTAINERD2_SOCK"; do
      owner=$(socket_owner_pid "$sock")
      [ -n "$owner" ] && [ "$owner" != "$(pid_of containerd)" ] || continue
      local cmd; cmd=$(tr '\0' ' ' < "/proc/$owner/cmdline" 2>/dev/null || true)
      if [ "${LOCAL_UP_STOP_FOREIGN_CONTAINERD:-0}" = 1 ]; then
        log "containerd: stopping a containerd not started by local-up (pid $owner: $cmd)"
        kill -TERM "$owner"
        local i; for i in $(seq 1 100); do proc_alive "$owner" || break; sleep 0.1; done
        proc_alive "$owner" && die "containerd pid $owner did not stop"
      else
        die "a containerd not started by local-up serves $sock (pid $owner: $cmd). Stop it (kill $owner) or rerun with LOCAL_UP_STOP_FOREIGN_CONTAINERD=1"
      fi
    done
  fi
  ensure_daemon containerd "" containerd_healthy 60 -- "${argv[@]}"
  if ! cri_plugin_ok; then die_log containerd "containerd's CRI plugin did not load"; fi
  log "containerd: $CONTAINERD_MODE ($(containerd_version)) on $CRI_SOCK"
}

# `up` in the other mode than the one the cluster runs (CONTAINERD=2 on a 1.6 cluster, or back):
# deckhand is stopped (start_deckhand starts it again on the new socket), every pod is removed from
# the old containerd through CRI (it is started briefly if pods outlived it), it is stopped, and
# its shims, pod cgroups and mounts are cleaned as `down` does. The API server's pods stay; deckhand
# runs them again on the new containerd.
switch_containerd() {
  log "containerd: switching from $CONTAINERD_MODE to $CONTAINERD_WANTED (stops deckhand, removes every pod from containerd $CONTAINERD_MODE)"
  stop_deckhand
  start_containerd_for_cleanup
  cri_cleanup
  stop_daemon containerd
  kill_k8s_shims
  cleanup_cgroups
  umount_containerd "$CONTAINERD_MODE"
  rm -f "$CONTAINERD_MODE_FILE"
  use_containerd "$CONTAINERD_WANTED"
}

# ---------------------------------------------------------------------------------------------
# cleanup (down)
# ---------------------------------------------------------------------------------------------

umount_under() {  # unmount every mount point below the given prefixes, deepest first
  local prefixes=("$@") mp p
  # mountinfo field 5 is the mount point with octal escapes (\040 = space)
  while IFS= read -r mp; do
    mp=$(printf '%b' "$mp")
    for p in "${prefixes[@]}"; do
      case "$mp" in
        "$p"|"$p"/*) umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || warn "cannot unmount $mp"; break ;;
      esac
    done
  done < <(awk '{print $5}' /proc/self/mountinfo | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-)
}

# the CRI cleanup needs containerd; start it briefly if pods outlived it
start_containerd_for_cleanup() {
  if ! containerd_answers && [ -f "$CONTAINERD_CONFIG" ] && [ -n "$(containerd_bin)" ] &&
     [ -n "$(ls -A "$CONTAINERD_STATE/io.containerd.runtime.v2.task/k8s.io" 2>/dev/null)" ]; then
    log "down: starting containerd to remove leftover pods"
    start_daemon containerd -- "$(containerd_bin)" --config "$CONTAINERD_CONFIG"
    local i; for i in $(seq 1 50); do containerd_answers && break; sleep 0.2; done
  fi
}

cri_cleanup() {
  local bin; bin=$(deckhand_bin)
  if containerd_answers; then
    if [ -x "$bin" ] && timeout 10 "$bin" cri-cleanup --help >/dev/null 2>&1; then
      log "down: deckhand cri-cleanup (stops and removes every sandbox through CRI)"
      timeout 120 "$bin" --container-runtime-endpoint "$CRI_ENDPOINT" cri-cleanup 2>&1 | sed 's/^/    /' ||
        warn "deckhand cri-cleanup failed; falling back to ctr"
    fi
    if [ -x "$CRICTL" ] && [ -n "$("$CRICTL" -r "$CRI_ENDPOINT" pods -q 2>/dev/null)" ]; then
      log "down: crictl rmp -af (stops and removes every sandbox through CRI)"
      timeout 120 "$CRICTL" -r "$CRI_ENDPOINT" rmp -af 2>&1 | sed 's/^/    /' || warn "crictl rmp -af failed; falling back to ctr"
    fi
    # fallback (and sweep): kill and delete every task and container in the CRI namespace
    local ctr=("$CTR" --address "$CRI_SOCK" -n k8s.io) ids id n=0
    ids=$("${ctr[@]}" tasks ls -q 2>/dev/null || true)
    for id in $ids; do "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $ids; do
      local i; for i in $(seq 1 50); do
        "${ctr[@]}" tasks ls 2>/dev/null | awk -v id="$id" '$1 == id {print $3}' | grep -q RUNNING || break
        sleep 0.1
      done
      "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
    done
    for id in $("${ctr[@]}" containers ls -q 2>/dev/null || true); do
      "${ctr[@]}" containers delete "$id" >/dev/null 2>&1 && n=$((n + 1)) || true
    done
    [ "$n" = 0 ] || log "down: removed $n CRI container(s)/sandbox(es) with ctr"
  else
    log "down: containerd not answering; cleaning host state directly"
  fi
}

# kill every process left in the pod cgroups, then remove those cgroups depth-first
cleanup_cgroups() {
  local d pids
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [ -d "$d" ] || continue
    pids=$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  done
  sleep 0.2
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$d" ] && warn "could not remove every cgroup under $d"
  done
  return 0
}

# shims of the k8s.io namespace that outlived containerd: those of the given sockets (default: the
# one in use)
kill_k8s_shims() {
  local p cmd sock
  [ $# -gt 0 ] || set -- "$CRI_SOCK"
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
    for sock in "$@"; do
      case "$cmd" in
        *containerd-shim*"-namespace k8s.io"*"-address $sock "*|*containerd-shim*"-namespace k8s.io"*"-address $sock")
          kill -KILL "${p#/proc/}" 2>/dev/null || true; break ;;
      esac
    done
  done
}

# the mounts a containerd of MODE leaves (task rootfs, sandbox /dev/shm); 2.x's state dir (runc
# state, shim sockets, mount manager) is removed with them, its root (images) is kept
umount_containerd() {
  case "$1" in
    1.6)
      umount_under "$CONTAINERD16_STATE/io.containerd.runtime.v2.task" "$CONTAINERD16_STATE/io.containerd.grpc.v1.cri" \
        "$CONTAINERD16_ROOT/io.containerd.grpc.v1.cri" ;;
    2)
      # every mount below its own root and state dirs is one of its own
      umount_under "$CONTAINERD2_STATE" "$CONTAINERD2_ROOT"
      if [ -d "$CONTAINERD2_STATE" ] && [ -z "$(pid_of containerd)" ]; then
        rm -rf --one-file-system "$CONTAINERD2_STATE" 2>/dev/null || warn "could not remove every file of $CONTAINERD2_STATE"
      fi ;;
  esac
}

# the client and registry configuration that up wrote (a file saved as .orig is put back)
remove_crictl_config() {
  if [ -f "$CRICTL_CONFIG" ] && grep -q "$MARKER" "$CRICTL_CONFIG"; then
    rm -f "$CRICTL_CONFIG"
    if [ -f "$CRICTL_CONFIG.orig" ]; then mv -f "$CRICTL_CONFIG.orig" "$CRICTL_CONFIG"; fi
  fi
}

remove_hosts_toml() {
  local r
  for r in "${MIRRORED_REGISTRIES[@]}" "$REGISTRY" "$REGISTRY_AUTH"; do
    local f="$CERTS_D/$r/hosts.toml"
    if [ -f "$f" ] && grep -q "$MARKER" "$f"; then
      rm -f "$f"
      if [ -f "$f.orig" ]; then mv -f "$f.orig" "$f"; fi
      rmdir "$CERTS_D/$r" 2>/dev/null || true
    fi
  done
}

# cni_conflist SUBNET GATEWAY IPMASQ: a node's CNI config, the bridge plugin on $CNI_BRIDGE with
# host-local addresses from SUBNET (gateway GATEWAY) and portmap for hostPorts. IPMASQ (true or
# false) says whether pod traffic leaving the node is masqueraded: the main node does it; the extra
# nodes (hack/lib/nodes.sh) do not, so pods see each other's addresses across nodes.
cni_conflist() {
  cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": $3,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$1", "gateway": "$2" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true }
  ]
}
EOF
}

