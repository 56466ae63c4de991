# shellcheck shell=bash
# hack/lib/go-kubelet.sh: the Go kubelet of the pinned version in deckhand's place as node
# $NODE_NAME, on the same containerd, API server and node, and back again; shared by
# hack/conformance.sh (--kubelet go) and hack/bench.sh (--peer go). What running it here needs
# and what it changes on the machine is in ../shared/notes/go-kubelet-side-by-side.md:
#   - cgroup v1, containerd 1.6 (no RuntimeConfig): failCgroupV1 false, cgroupDriver cgroupfs;
#   - servers on the node IP and loopback only; the harness's node serving certificate;
#   - it changes three sysctls, adds the iptables chains KUBE-KUBELET-CANARY and
#     KUBE-IPTABLES-HINT and a CSINode object: go_kubelet_restore puts all of it back, removes its
#     root dir, and starts deckhand again with hack/local-up.sh up (which also puts the guard
#     chains first again).
#
# Sourced after the local cluster's env file (_output/local-up/env). The caller sets:
#   GO_DIR     where its config, pki, pid file and log go
#   BIN        the directory holding the kubelet binary (hack/build-k8s.sh kubelet)
#   GO_KUBELET_EXTRA_CONFIG  (optional) more KubeletConfiguration lines (e.g. `maxPods: 250`)
# and has log/die functions and kc (kubectl with the admin kubeconfig).

GO_ROOT=/var/lib/deckhand-go-kubelet
GO_PIDFILE="$GO_DIR/kubelet.pid"
GO_SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)

deckhand_pid() {
  local p; p=$(cat "$DECKHAND_PIDFILE" 2>/dev/null || true)
  [ -n "$p" ] && [ -d "/proc/$p" ] && echo "$p" || true
}
go_kubelet_pid() {
  local p; p=$(cat "$GO_PIDFILE" 2>/dev/null || true)
  [ -n "$p" ] && [ -d "/proc/$p" ] && echo "$p" || true
}
wait_gone() { local i; for i in $(seq 1 "$2"); do [ -d "/proc/$1" ] || return 0; sleep 1; done; return 1; }

# the Node's kubelet version and Ready heartbeat
node_kubelet() {
  kc get node "$NODE_NAME" -o 'jsonpath={.status.nodeInfo.kubeletVersion} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null || true
}
# wait_node VERSION_REGEX SINCE_EPOCH TIMEOUT: Ready, heartbeat newer than SINCE, from that kubelet
wait_node() {
  local i v r hb
  for i in $(seq 1 "$3"); do
    read -r v r hb <<<"$(node_kubelet)"
    if [[ "$v" =~ $1 ]] && [ "$r" = True ] && [ -n "$hb" ] && [ "$(date -d "$hb" +%s)" -ge "$2" ]; then return 0; fi
    sleep 1
  done
  return 1
}

# stops deckhand (its pods keep running) and starts the Go kubelet as the node
go_kubelet_start() {
  mkdir -p "$GO_DIR/pki" "$GO_DIR/manifests"
  local s
  : > "$GO_DIR/sysctls.saved"
  for s in "${GO_SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")" >> "$GO_DIR/sysctls.saved"; done
  local pid; pid=$(deckhand_pid)
  if [ -n "$pid" ]; then
    log "stopping deckhand (pid $pid; its pods keep running)"
    kill -TERM "$pid"
    wait_gone "$pid" 30 || { kill -KILL "$pid" 2>/dev/null || true; wait_gone "$pid" 5 || true; }
    rm -f "$DECKHAND_PIDFILE" "${DECKHAND_PIDFILE%.pid}.start" "${DECKHAND_PIDFILE%.pid}.cmd"
  fi
  # its own root dir: a tmpfs of the size of deckhand's (the same eviction figures)
  local size; size=$(findmnt -no OPTIONS "$DECKHAND_ROOT_DIR" 2>/dev/null | tr ',' '\n' | sed -n 's/^size=//p')
  mkdir -p "$GO_ROOT"
  mountpoint -q "$GO_ROOT" || mount -t tmpfs -o "size=${size:-1048576k},mode=755" deckhand-go-kubelet "$GO_ROOT"
  cat > "$GO_DIR/config.yaml" <<EOF
# written by hack/lib/go-kubelet.sh: the Go kubelet as node $NODE_NAME in deckhand's place
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true, cacheTTL: 0s}
  x509: {clientCAFile: $CA_CERT}
authorization:
  mode: Webhook
  webhook: {cacheAuthorizedTTL: 0s, cacheUnauthorizedTTL: 0s}
tlsCertFile: $DECKHAND_TLS_CERT
tlsPrivateKeyFile: $DECKHAND_TLS_KEY
rotateCertificates: false
serverTLSBootstrap: false
containerRuntimeEndpoint: $CRI_ENDPOINT
staticPodPath: $GO_DIR/manifests
clusterDNS: [$CLUSTER_DNS]
clusterDomain: $CLUSTER_DOMAIN
evictionPressureTransitionPeriod: 20s
evictionHard:
  memory.available: 100Mi
  nodefs.available: 10%
  nodefs.inodesFree: 5%
  imagefs.available: 0%
  imagefs.inodesFree: 0%
imageGCHighThresholdPercent: 100
${GO_KUBELET_EXTRA_CONFIG:-}
EOF
  local since; since=$(date +%s)
  log "starting the Go kubelet ($BIN/kubelet $KUBE_VERSION; log $GO_DIR/kubelet.log)"
  setsid "$BIN/kubelet" --config="$GO_DIR/config.yaml" --kubeconfig="$DECKHAND_KUBECONFIG" \
    --root-dir="$GO_ROOT" --cert-dir="$GO_DIR/pki" --node-ip="$NODE_IP" \
    --hostname-override="$NODE_NAME" >"$GO_DIR/kubelet.log" 2>&1 </dev/null &
  echo $! > "$GO_PIDFILE"
  wait_node "^${KUBE_VERSION//./\\.}\$" "$since" 120 ||
    { tail -n 20 "$GO_DIR/kubelet.log" >&2; die "the Go kubelet did not make Node $NODE_NAME Ready within 120s"; }
  log "Node $NODE_NAME is Ready with the Go kubelet ($(node_kubelet | cut -d' ' -f1))"
}

# stops the Go kubelet, puts the machine back and starts deckhand again; safe to call more than once
go_kubelet_restore() {
  local pid; pid=$(go_kubelet_pid)
  if [ -n "$pid" ]; then
    log "stopping the Go kubelet (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 30 || { kill -KILL "$pid" 2>/dev/null || true; wait_gone "$pid" 5 || true; }
  fi
  rm -f "$GO_PIDFILE"
  if [ -f "$GO_DIR/sysctls.saved" ]; then
    local kv
    while read -r kv; do sysctl -qw "$kv" || true; done < "$GO_DIR/sysctls.saved"
    rm -f "$GO_DIR/sysctls.saved"
  fi
  local t c
  for t in filter nat mangle; do
    for c in KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      iptables -t "$t" -F "$c" 2>/dev/null && iptables -t "$t" -X "$c" 2>/dev/null || true
      ip6tables -t "$t" -F "$c" 2>/dev/null && ip6tables -t "$t" -X "$c" 2>/dev/null || true
    done
  done
  kc delete csinode "$NODE_NAME" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  # its root dir: pod volume mounts first (deepest first), then the tmpfs itself
  # (the tmpfs can stay busy for a moment while the containers that held its volumes go: retry)
  local m i
  for i in $(seq 1 10); do
    for m in $(findmnt -R -n -o TARGET "$GO_ROOT" 2>/dev/null | sort -r); do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    mountpoint -q "$GO_ROOT" 2>/dev/null || break
    sleep 1
  done
  if mountpoint -q "$GO_ROOT" 2>/dev/null; then
    echo "go-kubelet: WARNING: $GO_ROOT is still mounted" >&2
  else
    rm -rf --one-file-system "$GO_ROOT"
  fi
  if [ -z "$(deckhand_pid)" ]; then
    log "starting deckhand again (hack/local-up.sh up: it also puts the guard chains first again)"
    DECKHAND_BIN="$DECKHAND_BIN" SCHEDULER_BIN="$SCHEDULER_BIN" "$ROOT/hack/local-up.sh" up >"$GO_DIR/restore.log" 2>&1 ||
      { tail -n 20 "$GO_DIR/restore.log" >&2; echo "go-kubelet: ERROR: deckhand did not come back (see $GO_DIR/restore.log)" >&2; return 1; }
    log "deckhand is the node again: $(node_kubelet | cut -d' ' -f1)"
  fi
}
