#!/usr/bin/env bash
# Joins this machine to a kubeadm-built cluster (kind, or deckhand's hack/local-up.sh) as a worker
# node run by deckhand, the way `kubeadm join` sets up the Go kubelet: the same discovery (the
# kube-public/cluster-info ConfigMap, checked against the token's JWS signature and the CA key
# hash), the same files, and the same systemd drop-in, with deckhand in the kubelet's slot.
#
# Usage:
#   provision.sh token --kubeconfig ADMIN_KUBECONFIG [--ttl 24h] [--description TEXT]
#       Creates a bootstrap token (Secret kube-system/bootstrap-token-<id>, as `kubeadm token
#       create`) and prints it. Run where the cluster's admin kubeconfig is (the host).
#   provision.sh ca-cert-hash CA_FILE
#       Prints sha256:<hex> of the CA's public key (`--discovery-token-ca-cert-hash`).
#   provision.sh join --api-server HOST:PORT --token ID.SECRET --discovery-token-ca-cert-hash sha256:HEX
#                     [--node-name NAME] [--node-ip IP] [--deckhand-bin PATH] [--prefix DIR]
#                     [--cri-socket unix:///run/containerd/containerd.sock] [--extra-args "ARGS"]
#                     [--skip-phases packages,containerd,start] [--start systemd|exec|none]
#                     [--add-host NAME=IP ...]
#       Phases: packages (containerd, runc, CNI plugins, curl, jq, openssl from Debian),
#       containerd (config with the Debian CNI plugin directory and a bridge network), discovery,
#       files (what `kubeadm join` writes), install (deckhand binary, unit, drop-in), start.
#   provision.sh print-command [--prefix DIR] [--null]
#       Prints that command line, one argument a line.
#   provision.sh start [--prefix DIR]
#       Runs deckhand in the foreground exactly as the unit's ExecStart would (the env files and
#       the drop-in's Environment= lines expanded as systemd does); for machines without systemd.
#
# --prefix DIR puts every file under DIR (DIR/etc/kubernetes/..., DIR/var/lib/kubelet/...) and
# the paths inside the files point there: the tests use it so that nothing is written outside
# the harness's directories. Without it the files go where kubeadm puts them.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")

log() { printf '[provision] %s\n' "$*" >&2; }
die() { printf '[provision] ERROR: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# token / ca-cert-hash (run on the host)
# ---------------------------------------------------------------------------------------------
rand_chars() {  # N: lowercase letters and digits (the bootstrap token alphabet [a-z0-9])
  local out=""
  while [ ${#out} -lt "$1" ]; do
    out+=$(head -c 64 /dev/urandom | tr -dc 'a-z0-9')
  done
  printf '%s' "${out:0:$1}"
}

ttl_to_seconds() {
  local t=$1
  case "$t" in
    *h) echo $(( ${t%h} * 3600 )) ;; *m) echo $(( ${t%m} * 60 )) ;; *s) echo "${t%s}" ;;
    *) die "--ttl: use 24h, 90m or 600s" ;;
  esac
}

cmd_token() {
  local kubeconfig="" ttl=24h desc="deckhand join token (vagrant/provision.sh)" kubectl=${KUBECTL:-kubectl}
  while [ $# -gt 0 ]; do
    case "$1" in
      --kubeconfig) kubeconfig=$2; shift 2 ;;
      --ttl) ttl=$2; shift 2 ;;
      --description) desc=$2; shift 2 ;;
      *) die "token: unknown argument $1" ;;
    esac
  done
  [ -n "$kubeconfig" ] || die "token: --kubeconfig ADMIN_KUBECONFIG is required"
  local id secret exp
  id=$(rand_chars 6); secret=$(rand_chars 16)
  exp=$(date -u -d "@$(( $(date +%s) + $(ttl_to_seconds "$ttl") ))" +%Y-%m-%dT%H:%M:%SZ)
  # the Secret `kubeadm token create` makes (k8s.io/cluster-bootstrap/token/api)
  "$kubectl" --kubeconfig "$kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: "$desc"
  token-id: "$id"
  token-secret: "$secret"
  expiration: "$exp"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "system:bootstrappers:kubeadm:default-node-token"
EOF
  echo "$id.$secret"
}

ca_hash() {  # CA PEM on stdin -> sha256:<hex of the SubjectPublicKeyInfo> (kubeadm pubkeypin)
  local h
  h=$(openssl x509 -pubkey -noout | openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1)
  echo "sha256:$h"
}

cmd_ca_cert_hash() { [ $# = 1 ] || die "usage: ca-cert-hash CA_FILE"; ca_hash < "$1"; }

# ---------------------------------------------------------------------------------------------
# join
# ---------------------------------------------------------------------------------------------
API="" TOKEN="" CA_HASH="" NODE_NAME="" NODE_IP="" DECKHAND_SRC="" PREFIX="" EXTRA_ARGS=""
CRI_SOCKET=unix:///run/containerd/containerd.sock SKIP="" START="" ADD_HOSTS=()

phase_on() { [[ ",$SKIP," != *",$1,"* ]]; }

# The cgroup driver for this machine: systemd when systemd runs it (kubeadm's default since
# v1.22, and containerd's runc then needs SystemdCgroup = true), else cgroupfs. DECKHAND_CGROUP_DRIVER
# overrides it.
host_cgroup_driver() {
  if [ -n "${DECKHAND_CGROUP_DRIVER:-}" ]; then echo "$DECKHAND_CGROUP_DRIVER"
  elif [ -d /run/systemd/system ]; then echo systemd
  else echo cgroupfs; fi
}

b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }

phase_packages() {
  local want=(containerd runc containernetworking-plugins curl jq openssl ca-certificates) missing=() p
  for p in "${want[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "packages: installing ${missing[*]} (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  else
    log "packages: containerd, runc, CNI plugins already installed"
  fi
}

phase_containerd() {
  # Debian's containernetworking-plugins live in /usr/lib/cni (not /opt/cni/bin); the cluster's
  # network add-on may later install its own config, which containerd then prefers (lexical order)
  mkdir -p /etc/containerd /etc/cni/net.d
  if [ ! -f /etc/containerd/config.toml ] || ! grep -q 'deckhand provision' /etc/containerd/config.toml; then
    local systemd_cgroup=false
    [ "$(host_cgroup_driver)" != systemd ] || systemd_cgroup=true
    log "containerd: writing /etc/containerd/config.toml ($(host_cgroup_driver) cgroups, CNI in /usr/lib/cni)"
    cat > /etc/containerd/config.toml <<EOF
# written by deckhand provision
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = $systemd_cgroup
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
EOF
  fi
  if [ -z "$(ls -A /etc/cni/net.d 2>/dev/null)" ]; then
    log "cni: bridge network ${POD_CIDR:-10.244.250.0/24} in /etc/cni/net.d/10-deckhand.conflist"
    cat > /etc/cni/net.d/10-deckhand.conflist <<EOF
{"cniVersion": "1.0.0", "name": "deckhand", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "${POD_CIDR:-10.244.250.0/24}"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  fi
  modprobe overlay 2>/dev/null || true
  modprobe br_netfilter 2>/dev/null || true
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  if [ -d /run/systemd/system ]; then
    systemctl restart containerd
    systemctl enable containerd >/dev/null 2>&1 || true
  fi
}

# kubeadm's token discovery (cmd/kubeadm/app/discovery/token): fetch kube-public/cluster-info
# without trusting the server, check the token's detached JWS over its kubeconfig, then pin the
# CA by the hash of its public key
DISC_DIR=""
phase_discovery() {
  local id=${TOKEN%%.*} secret=${TOKEN#*.}
  [[ "$TOKEN" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]] || die "--token must look like abcdef.0123456789abcdef"
  DISC_DIR=$(mktemp -d)
  local ci="$DISC_DIR/cluster-info.json" i
  # the bootstrapsigner controller signs cluster-info for a new token within a second or so
  for i in $(seq 1 30); do
    if curl -sfk --max-time 5 "https://$API/api/v1/namespaces/kube-public/configmaps/cluster-info" -o "$ci"; then
      [ -z "$(jq -r --arg k "jws-kubeconfig-$id" '.data[$k] // empty' "$ci")" ] || break
      log "discovery: cluster-info not signed for token id $id yet (attempt $i)"
    else
      log "discovery: cluster-info not readable yet from https://$API (attempt $i)"
    fi
    sleep 2
  done
  [ -s "$ci" ] || die "discovery: cannot read kube-public/cluster-info from https://$API"
  local kc jws header sig want
  # byte for byte (a command substitution would drop the trailing newline the JWS covers)
  jq -j '.data.kubeconfig // empty' "$ci" > "$DISC_DIR/kubeconfig"
  kc=$(cat "$DISC_DIR/kubeconfig")
  jws=$(jq -r --arg k "jws-kubeconfig-$id" '.data[$k] // empty' "$ci")
  [ -n "$kc" ] || die "discovery: cluster-info has no kubeconfig"
  [ -n "$jws" ] || die "discovery: no JWS for token id $id in cluster-info (unknown or expired token, or the bootstrapsigner controller is not running)"
  header=${jws%%..*}; sig=${jws##*..}
  want=$(printf '%s.%s' "$header" "$(b64url < "$DISC_DIR/kubeconfig")" |
         openssl dgst -sha256 -mac HMAC -macopt "key:$secret" -binary | b64url)
  [ "$want" = "$sig" ] || die "discovery: the cluster-info JWS does not match the token: refusing this API server"
  printf '%s' "$kc" | awk '/certificate-authority-data:/ {print $2; exit}' | base64 -d > "$DISC_DIR/ca.crt"
  [ -s "$DISC_DIR/ca.crt" ] || die "discovery: cluster-info has no certificate-authority-data"
  if [ -n "$CA_HASH" ]; then
    local got; got=$(ca_hash < "$DISC_DIR/ca.crt")
    [ "$got" = "$CA_HASH" ] || die "discovery: CA public key hash $got does not match --discovery-token-ca-cert-hash"
  else
    log "discovery: WARNING no --discovery-token-ca-cert-hash: the CA is trusted on the JWS alone (kubeadm's --discovery-token-unsafe-skip-ca-verification)"
  fi
  SERVER=$(printf '%s' "$kc" | awk '/server:/ {print $2; exit}')
  [ -n "$SERVER" ] || SERVER="https://$API"
  log "discovery: cluster-info verified (server $SERVER, CA $(ca_hash < "$DISC_DIR/ca.crt"))"
}

# kubeadm's defaults for a KubeletConfiguration (cmd/kubeadm/app/componentconfigs/kubelet.go),
# serialized as kubeadm serializes kubelet.config.k8s.io/v1beta1; cgroupDriver is kubeadm's
# systemd on a machine systemd runs, cgroupfs elsewhere (host_cgroup_driver)
default_kubelet_config() {
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: $(host_cgroup_driver)
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
EOF
}

P() { printf '%s%s' "$PREFIX" "$1"; }   # a kubeadm path under the prefix

# a top-level scalar of the kubelet config (`key: value`), or empty
cfg_get() { awk -v k="$1:" '$1 == k {print $2; exit}' "$(P /var/lib/kubelet/config.yaml)" | tr -d '"'; }

phase_files() {
  mkdir -p "$(P /etc/kubernetes/pki)" "$(P /etc/kubernetes/manifests)" "$(P /var/lib/kubelet/pki)"
  # 1. the cluster CA (kubeadm join writes it next to the bootstrap kubeconfig)
  install -m 0644 "$DISC_DIR/ca.crt" "$(P /etc/kubernetes/pki/ca.crt)"
  # 2. bootstrap-kubelet.conf (kubeconfigutil.CreateWithToken: cluster "kubernetes", user
  #    tls-bootstrap-token-user)
  umask 077
  cat > "$(P /etc/kubernetes/bootstrap-kubelet.conf)" <<EOF
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: $(base64 -w0 < "$DISC_DIR/ca.crt")
    server: $SERVER
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: tls-bootstrap-token-user
  name: tls-bootstrap-token-user@kubernetes
current-context: tls-bootstrap-token-user@kubernetes
kind: Config
preferences: {}
users:
- name: tls-bootstrap-token-user
  user:
    token: $TOKEN
EOF
  umask 022
  # 3. config.yaml: the cluster's kube-system/kubelet-config (readable with the bootstrap token
  #    through kubeadm's kubeadm:kubelet-config Role), else kubeadm's defaults; then the instance
  #    configuration (containerRuntimeEndpoint) patched in, as kubeadm v1.36 does
  local cm="$DISC_DIR/kubelet-config.json" cfg
  if curl -sf --max-time 10 --cacert "$DISC_DIR/ca.crt" -H "Authorization: Bearer $TOKEN" \
       "$SERVER/api/v1/namespaces/kube-system/configmaps/kubelet-config" -o "$cm" &&
     [ -n "$(jq -r '.data.kubelet // empty' "$cm")" ]; then
    cfg=$(jq -r '.data.kubelet' "$cm")
    log "files: config.yaml from kube-system/kubelet-config"
  else
    cfg=$(default_kubelet_config)
    log "files: no readable kube-system/kubelet-config; config.yaml from kubeadm's defaults"
  fi
  printf 'containerRuntimeEndpoint: "%s"\n' "$CRI_SOCKET" > "$(P /var/lib/kubelet/instance-config.yaml)"
  if grep -q '^containerRuntimeEndpoint:' <<<"$cfg"; then
    cfg=$(sed "s|^containerRuntimeEndpoint:.*|containerRuntimeEndpoint: $CRI_SOCKET|" <<<"$cfg")
  else
    cfg=$(printf '%s\ncontainerRuntimeEndpoint: %s\n' "$cfg" "$CRI_SOCKET")
  fi
  # the cluster's cgroupDriver must be the one containerd's runc uses on this machine (a
  # kubeadm user patches it per node): deckhand warns about a mismatch, and pods cannot start
  local driver; driver=$(host_cgroup_driver)
  if grep -q '^cgroupDriver:' <<<"$cfg"; then
    if ! grep -q "^cgroupDriver: $driver\$" <<<"$cfg"; then
      log "files: the cluster's cgroupDriver is $(awk '$1 == "cgroupDriver:" {print $2}' <<<"$cfg"); this machine's is $driver: config.yaml says $driver"
      cfg=$(sed "s|^cgroupDriver:.*|cgroupDriver: $driver|" <<<"$cfg")
    fi
  else
    cfg=$(printf '%s\ncgroupDriver: %s\n' "$cfg" "$driver")
  fi
  if [ -n "$PREFIX" ]; then
    # the files the configuration names live under the prefix too
    cfg=$(sed -e "s|\(clientCAFile: \)/etc/kubernetes|\1$PREFIX/etc/kubernetes|" \
              -e "s|\(staticPodPath: \)/etc/kubernetes|\1$PREFIX/etc/kubernetes|" <<<"$cfg")
  fi
  printf '%s\n' "$cfg" > "$(P /var/lib/kubelet/config.yaml)"
  # 4. kubeadm-flags.env (phases/kubelet/flags.go: the CRI socket moved to the instance config
  #    in v1.36; --hostname-override only when the node name is not the hostname)
  local args=""
  [ "$NODE_NAME" = "$(hostname | tr '[:upper:]' '[:lower:]')" ] || args="--hostname-override=$NODE_NAME"
  printf 'KUBELET_KUBEADM_ARGS="%s"\n' "$args" > "$(P /var/lib/kubelet/kubeadm-flags.env)"
  # 5. the user's extra arguments (/etc/default/kubelet, KUBELET_EXTRA_ARGS, which the drop-in
  #    reads last): only what is not in config.yaml, the node IP; deckhand reads every field of
  #    config.yaml itself
  local extra=("--node-ip=$NODE_IP")
  [ -z "$EXTRA_ARGS" ] || extra+=("$EXTRA_ARGS")
  mkdir -p "$(P /etc/default)"
  printf 'KUBELET_EXTRA_ARGS="%s"\n' "${extra[*]}" > "$(P /etc/default/kubelet)"
  log "files: $(P /etc/kubernetes/bootstrap-kubelet.conf), $(P /var/lib/kubelet/config.yaml), $(P /var/lib/kubelet/kubeadm-flags.env), $(P /etc/default/kubelet)"
}

phase_install() {
  local bin; bin=$(P /usr/bin/deckhand)
  mkdir -p "$(dirname "$bin")"
  if [ -n "$DECKHAND_SRC" ]; then
    [ -x "$DECKHAND_SRC" ] || die "--deckhand-bin $DECKHAND_SRC is not an executable"
    local src; src=$(readlink -f "$DECKHAND_SRC")
    if [ "$src" != "$(readlink -f "$bin" 2>/dev/null)" ]; then
      if [ -n "$PREFIX" ]; then
        # under a prefix (tests, the harness) the binary stays where it was built: a rebuild
        # is picked up by the next start
        ln -sfn "$src" "$bin"
      else
        install -m 0755 "$src" "$bin.new" && mv -f "$bin.new" "$bin"
      fi
    fi
  fi
  [ -x "$bin" ] || die "no deckhand binary at $bin (pass --deckhand-bin)"
  # the unit and the kubeadm-style drop-in of this repository (systemd/), the paths they name
  # moved under the prefix and to the binary's place
  local unit_src="$HERE/../systemd/deckhand.service" dropin_src="$HERE/../systemd/deckhand.service.d/10-kubeadm.conf"
  local unit dropin
  unit=$(P /etc/systemd/system/deckhand.service)
  dropin=$(P /etc/systemd/system/deckhand.service.d/10-kubeadm.conf)
  mkdir -p "$(dirname "$dropin")"
  [ -f "$unit_src" ] && [ -f "$dropin_src" ] ||
    die "systemd/deckhand.service and systemd/deckhand.service.d/10-kubeadm.conf not found next to $SELF"
  local f
  for f in "$unit_src:$unit" "$dropin_src:$dropin"; do
    sed -e "s|/usr/bin/deckhand|$bin|g" \
        -e "s|/var/lib/kubelet/|$(P /var/lib/kubelet/)|g" \
        -e "s|/etc/kubernetes/|$(P /etc/kubernetes/)|g" \
        -e "s|/etc/default/deckhand|$(P /etc/default/deckhand)|g" \
        -e "s|/etc/default/kubelet|$(P /etc/default/kubelet)|g" "${f%%:*}" > "${f#*:}"
  done
  log "install: $bin, $unit, $dropin"
}

# the command line systemd would run: Environment= and EnvironmentFile= of the unit and its
# drop-ins in order, then the last ExecStart= with unquoted $VARS split on whitespace
exec_command() {
  local unit dropin line
  unit=$(P /etc/systemd/system/deckhand.service)
  dropin=$(P /etc/systemd/system/deckhand.service.d/10-kubeadm.conf)
  [ -f "$dropin" ] || die "no $dropin: run join first"
  local exec_line=""
  local f
  for f in "$unit" "$dropin"; do
    [ -f "$f" ] || continue
    while IFS= read -r line; do
      case "$line" in
        Environment=*)
          line=${line#Environment=}; line=${line#\"}; line=${line%\"}
          export "${line%%=*}=${line#*=}" ;;
        EnvironmentFile=*)
          line=${line#EnvironmentFile=}; line=${line#-}
          if [ -f "$line" ]; then set -a; . "$line"; set +a; fi ;;
        ExecStart=*) exec_line=${line#ExecStart=} ;;
      esac
    done < "$f"
  done
  [ -n "$exec_line" ] || die "no ExecStart in $unit / $dropin"
  # shellcheck disable=SC2086
  eval "set -- $(sed 's/\$\([A-Z_]*\)/${\1-}/g' <<<"$exec_line")"
  printf '%s\0' "$@"
}

cmd_start() {
  while [ $# -gt 0 ]; do
    case "$1" in --prefix) PREFIX=$2; shift 2 ;; *) die "start: unknown argument $1" ;; esac
  done
  local argv=()
  mapfile -d '' argv < <(exec_command)
  [ ${#argv[@]} -gt 0 ] || die "start: empty command line"
  log "start: ${argv[*]}"
  exec "${argv[@]}"
}

phase_start() {
  local mode=$START
  if [ -z "$mode" ]; then
    if [ -z "$PREFIX" ] && [ -d /run/systemd/system ]; then mode=systemd; else mode=none; fi
  fi
  case "$mode" in
    systemd)
      [ -z "$PREFIX" ] || die "--start systemd needs the files in their real places (no --prefix)"
      systemctl daemon-reload
      systemctl enable --now deckhand.service
      log "start: deckhand.service started (journalctl -u deckhand -f)" ;;
    exec) cmd_start ${PREFIX:+--prefix "$PREFIX"} ;;
    none) log "start: not started; run: $SELF start${PREFIX:+ --prefix $PREFIX}" ;;
    *) die "--start: systemd, exec or none" ;;
  esac
}

cmd_join() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --api-server) API=${2#https://}; shift 2 ;;
      --token) TOKEN=$2; shift 2 ;;
      --discovery-token-ca-cert-hash) CA_HASH=$2; shift 2 ;;
      --node-name) NODE_NAME=$2; shift 2 ;;
      --node-ip) NODE_IP=$2; shift 2 ;;
      --deckhand-bin) DECKHAND_SRC=$2; shift 2 ;;
      --prefix) PREFIX=${2%/}; shift 2 ;;
      --cri-socket) CRI_SOCKET=$2; shift 2 ;;
      --extra-args) EXTRA_ARGS=$2; shift 2 ;;
      --skip-phases) SKIP=$2; shift 2 ;;
      --start) START=$2; shift 2 ;;
      --add-host) ADD_HOSTS+=("$2"); shift 2 ;;
      *) die "join: unknown argument $1" ;;
    esac
  done
  [ -n "$API" ] && [ -n "$TOKEN" ] || die "join: --api-server and --token are required"
  [ "$(id -u)" = 0 ] || die "join: must run as root"
  NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
  if [ -z "$NODE_IP" ]; then
    # the address this machine uses toward the API server
    NODE_IP=$(ip -4 route get "${API%:*}" 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')
    [ -n "$NODE_IP" ] || die "join: cannot tell the node IP; pass --node-ip"
  fi
  if [ -n "$PREFIX" ]; then mkdir -p "$PREFIX"; PREFIX=$(cd "$PREFIX" && pwd); fi
  trap '[ -z "$DISC_DIR" ] || rm -rf "$DISC_DIR"' EXIT
  local h
  for h in ${ADD_HOSTS[@]+"${ADD_HOSTS[@]}"}; do
    # e.g. kind's controlPlaneEndpoint (kind-control-plane:6443), named in cluster-info
    [ -z "$PREFIX" ] || die "--add-host edits /etc/hosts: not with --prefix"
    grep -q "[[:space:]]${h%%=*}\$" /etc/hosts || echo "${h#*=} ${h%%=*}" >> /etc/hosts
  done
  phase_on packages && phase_packages
  phase_on containerd && phase_containerd
  phase_discovery
  phase_files
  phase_install
  phase_on start && phase_start
  return 0
}

case "${1:-}" in
  token) shift; cmd_token "$@" ;;
  ca-cert-hash) shift; cmd_ca_cert_hash "$@" ;;
  join) shift; cmd_join "$@" ;;
  start) shift; cmd_start "$@" ;;
  default-kubelet-config) default_kubelet_config ;;
  print-command)
    # the command line systemd would run, one argument a line (--null: NUL-terminated)
    shift; nul=0
    while [ $# -gt 0 ]; do
      case "$1" in --prefix) PREFIX=${2%/}; shift 2 ;; --null) nul=1; shift ;; *) die "print-command: unknown argument $1" ;; esac
    done
    if [ "$nul" = 1 ]; then exec_command; else exec_command | tr '\0' '\n'; fi ;;
  *) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
