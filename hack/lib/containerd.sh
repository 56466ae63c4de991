# shellcheck shell=bash
# hack/lib/containerd.sh: containerd for the local cluster: its config.toml, the hosts.toml files
# that send every common registry name to the local registry, the CNI conflist (bridge dh-cni0,
# portmap), /etc/crictl.yaml, starting it (refusing a containerd it did not start), its health
# checks, and the CRI cleanup `down` does (sandboxes, tasks, shims, mounts, pod cgroups).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

containerd_answers() { [ -S "$CRI_SOCK" ] && timeout 5 ctr --address "$CRI_SOCK" --timeout 2s version >/dev/null 2>&1; }
cri_plugin_ok() {
  ctr --address "$CRI_SOCK" --timeout 2s plugins ls 2>/dev/null |
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
  write_if_changed "$CNI_CONF" <<EOF || true
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true }
  ]
}
EOF
}

# pid of whatever serves the containerd socket
socket_owner_pid() {
  ss -Hlxp 2>/dev/null | awk -v s="$CRI_SOCK" '$5 == s' | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

step_containerd() {
  write_containerd_config
  write_hosts_toml
  write_cni_conf
  write_crictl_config
  local argv=(containerd --config "$CONTAINERD_CONFIG")
  argv[0]=$(command -v containerd)
  if ! running_as containerd "${argv[@]}"; then
    local owner; owner=$(socket_owner_pid)
    if [ -n "$owner" ] && [ "$owner" != "$(pid_of containerd)" ]; then
      local cmd; cmd=$(tr '\0' ' ' < "/proc/$owner/cmdline" 2>/dev/null || true)
      if [ "${LOCAL_UP_STOP_FOREIGN_CONTAINERD:-0}" = 1 ]; then
        log "containerd: stopping a containerd not started by local-up (pid $owner: $cmd)"
        kill -TERM "$owner"
        local i; for i in $(seq 1 100); do proc_alive "$owner" || break; sleep 0.1; done
        proc_alive "$owner" && die "containerd pid $owner did not stop"
      else
        die "a containerd not started by local-up serves $CRI_SOCK (pid $owner: $cmd). Stop it (kill $owner) or rerun with LOCAL_UP_STOP_FOREIGN_CONTAINERD=1"
      fi
    fi
  fi
  ensure_daemon containerd "" containerd_healthy 60 -- "${argv[@]}"
  if ! cri_plugin_ok; then die_log containerd "containerd's CRI plugin did not load"; fi
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
    local ctr=(ctr --address "$CRI_SOCK" -n k8s.io) ids id n=0
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

# shims of the k8s.io namespace that outlived containerd
kill_k8s_shims() {
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
    case "$cmd" in
      *containerd-shim*"-namespace k8s.io"*"-address $CRI_SOCK"*) kill -KILL "${p#/proc/}" 2>/dev/null || true ;;
    esac
  done
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
