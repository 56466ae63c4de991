# shellcheck shell=bash
# hack/lib/common.sh: what every part of hack/local-up.sh shares: the settings (paths, addresses,
# CIDRs, names, and the environment variables of the usage text), logging (log, warn, die,
# die_log), small file helpers (write_if_changed, render_manifest/apply_manifest for
# hack/manifests/), the harness lock (take_lock), the host dependencies and control-plane
# binaries (step_deps), and the sourceable _output/local-up/env file (write_env).
# Sourced by hack/local-up.sh (never run on its own); the first of its libraries.
# ROOT (the repository) is set by hack/local-up.sh before this file is sourced.

. "$ROOT/hack/versions.env"

STATE="$ROOT/_output/local-up"
BIN="$ROOT/_output/bin"
PKI="$STATE/pki"
LOGS="$STATE/logs"
# which checkout runs the machine's one local cluster (written by up, removed by down)
OWNER_FILE=/run/deckhand-local-up.owner
PIDS="$STATE/pids"
# the Kubernetes objects local-up applies (see render_manifest)
MANIFESTS="$ROOT/hack/manifests"

NODE_NAME=${NODE_NAME:-$(hostname | tr '[:upper:]' '[:lower:]')}
NODE_IP=10.250.0.1
DUMMY_IF=deckhand0
SERVICE_CIDR=10.96.0.0/16
POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
CLUSTER_CIDR=10.244.0.0/16
CNI_BRIDGE=dh-cni0
CNI_NAME=deckhand
CNI_CONF_DIR=/etc/cni/net.d
CNI_CONF="$CNI_CONF_DIR/10-deckhand.conflist"
CNI_BIN_DIR=/usr/lib/cni
# containerd: Debian's 1.6 (the default) or 2.x (CONTAINERD=2: built by hack/build-containerd.sh,
# configured by hack/lib/containerd2.sh). The values below are 1.6's; use_containerd (hack/lib/
# containerd.sh) points CRI_SOCK, CRI_ENDPOINT, CONTAINERD_ROOT/STATE/CONFIG and CTR at the 2.x
# twins. `up` records the mode it runs in $CONTAINERD_MODE_FILE (removed by `down`): CONTAINERD_MODE
# is that recorded mode (what runs, or ran last), else CONTAINERD, else 1.6; CONTAINERD_WANTED is
# CONTAINERD, else the recorded mode, else 1.6, so a plain `up` keeps the mode the cluster runs in
# and a fresh one is 1.6, as before. Only `up` switches (CONTAINERD=1.6|2 hack/local-up.sh up).
CRI_SOCK=/run/containerd/containerd.sock
CRI_ENDPOINT="unix://$CRI_SOCK"
CONTAINERD_ROOT=/var/lib/containerd
CONTAINERD_STATE=/run/containerd
CONTAINERD_CONFIG="$STATE/containerd/config.toml"
CONTAINERD_MODE_FILE="$STATE/containerd-mode"
CERTS_D=/etc/containerd/certs.d
REGISTRY=127.0.0.1:5000
REGISTRY_AUTH=127.0.0.1:5001
REGISTRY_AUTH_DIR="$STATE/registry-auth"
REGISTRY_AUTH_CREDS_FILE="$REGISTRY_AUTH_DIR/creds"
REGISTRY_AUTH_USER=deckhand
KUBE_PROXY_IMAGE=registry.k8s.io/kube-proxy:$KUBE_VERSION
# cluster DNS (hack/manifests/coredns.yaml): the kube-dns Service's ClusterIP is the kubelet's
# clusterDNS, the tenth address of the Service CIDR as kubeadm picks it
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:$COREDNS_VERSION
# LOCAL_UP_DNS=0: no cluster DNS (no CoreDNS build, image, Deployment or wait; deckhand's
# clusterDNS still names $CLUSTER_DNS, as a kubeadm node's does before its DNS add-on runs)
LOCAL_UP_DNS=${LOCAL_UP_DNS:-1}
# LOCAL_UP_STORAGE=0: no local-path-provisioner (no build, image, Deployment or StorageClass
# `standard`); 1 (default): kind's default StorageClass, rancher's local-path-provisioner
LOCAL_UP_STORAGE=${LOCAL_UP_STORAGE:-1}
LOCAL_PATH_IMAGE=docker.io/rancher/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION
CLUSTER_DNS=10.96.0.10
CLUSTER_DOMAIN=cluster.local
SANDBOX_IMAGE=registry.k8s.io/pause:3.10
API_PORT=6443
API_SERVER="https://$NODE_IP:$API_PORT"
KUBECTL="$BIN/kubectl"
CRICTL="$BIN/crictl"
CRICTL_CONFIG=/etc/crictl.yaml
ADMIN_KUBECONFIG="$STATE/admin.kubeconfig"
KCM_KUBECONFIG="$STATE/controller-manager.kubeconfig"
DECKHAND_KUBECONFIG="$STATE/deckhand.kubeconfig"
DECKHAND_ROOT_DIR=/var/lib/deckhand
DECKHAND_ROOT_SIZE=${DECKHAND_ROOT_SIZE:-1g}
# deckhand's KubeletConfiguration file (--config): clusterDNS/clusterDomain as kubeadm configures
# them, and the static pod directory (staticPodPath, relative to the file: the Go kubelet's path
# resolution)
DECKHAND_CONFIG="$STATE/kubelet-config.yaml"
STATIC_POD_DIR="$STATE/manifests"
# deckhand joins as `kubeadm join` makes a kubelet join (see ensure_join_files); 0: a static
# node kubeconfig signed here
DECKHAND_JOIN=${DECKHAND_JOIN:-1}
JOIN_DIR="$STATE/join"
JOIN_KUBECONFIG="$JOIN_DIR/etc/kubernetes/kubelet.conf"
# joined the kubeadm way, the static pod directory is the one kubeadm's config.yaml names
[ "$DECKHAND_JOIN" != 1 ] || STATIC_POD_DIR="$JOIN_DIR/etc/kubernetes/manifests"
DECKHAND_LOG="$LOGS/deckhand.log"
DECKHAND_PIDFILE="$PIDS/deckhand.pid"
SCHEDULER_KUBECONFIG="$STATE/scheduler.kubeconfig"
SCHEDULER_LOG="$LOGS/deckhand-scheduler.log"
SCHEDULER_PIDFILE="$PIDS/deckhand-scheduler.pid"
DECKHAND_WAIT_NODE=${DECKHAND_WAIT_NODE:-1}
DECKHAND_WAIT_TIMEOUT=${DECKHAND_WAIT_TIMEOUT:-60}
MARKER="written by deckhand hack/local-up.sh"
# iptables chains of ours
GUARD_FWD=DECKHAND-GUARD
GUARD_OUT=DECKHAND-GUARD-OUT
GUARD_IN=DECKHAND-GUARD-IN
# registries whose names are redirected to the local registry. containerd 1.6 has no catch-all
# `_default` hosts directory (1.7 added it), so each name a test might use is listed; any other
# registry name would make containerd try the outside network: use only these in tests.
MIRRORED_REGISTRIES=(docker.io registry-1.docker.io index.docker.io registry.k8s.io k8s.gcr.io gcr.io
                     quay.io ghcr.io mcr.microsoft.com public.ecr.aws registry.gitlab.com)

T0=$SECONDS
log() { printf '[local-up %3ss] %s\n' "$((SECONDS - T0))" "$*"; }
warn() { printf '[local-up %3ss] WARNING: %s\n' "$((SECONDS - T0))" "$*" >&2; }
die() { printf '[local-up %3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }
# die with the tail of a component's log
die_log() {
  local name=$1; shift
  printf '[local-up %3ss] ERROR: %s\n' "$((SECONDS - T0))" "$*" >&2
  if [ -f "$LOGS/$name.log" ]; then
    echo "----- last 40 lines of $LOGS/$name.log -----" >&2
    tail -n 40 "$LOGS/$name.log" >&2
    echo "-----" >&2
  fi
  exit 1
}

# the containerd mode a value of CONTAINERD names: 1.6 or 2 (nothing, and status 1, if neither)
containerd_mode_of() {
  case "$1" in
    1|1.6|1.6.*) echo 1.6 ;;
    2|2.*) echo 2 ;;
    *) return 1 ;;
  esac
}
[ -z "${CONTAINERD:-}" ] || containerd_mode_of "$CONTAINERD" >/dev/null ||
  die "CONTAINERD=$CONTAINERD: use 1.6 (Debian's containerd, the default) or 2 (containerd $CONTAINERD2_VERSION built by hack/build-containerd.sh)"
CONTAINERD_RECORDED=$(containerd_mode_of "$(cat "$CONTAINERD_MODE_FILE" 2>/dev/null)" || true)
CONTAINERD_WANTED=$(containerd_mode_of "${CONTAINERD:-}" || echo "${CONTAINERD_RECORDED:-1.6}")
CONTAINERD_MODE=${CONTAINERD_RECORDED:-$CONTAINERD_WANTED}

write_if_changed() {  # FILE (content on stdin); returns 0 if the file changed
  local file=$1 tmp="$1.tmp.$$"
  mkdir -p "$(dirname "$file")"
  cat > "$tmp"
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; return 1; fi
  mv -f "$tmp" "$file"
}

# Kubernetes objects live in hack/manifests/*.yaml. render_manifest FILE VAR...: the file with each
# ${VAR} of the list replaced by the value of the shell variable VAR, nothing else expanded
# ($(NODE_NAME) in a container's command stays as it is). A placeholder alone on its line takes a
# multi-line value, every line indented like the placeholder. The list must name exactly the
# placeholders the file has.
render_manifest() {
  local file=$1 name value line indent want have; shift
  [ -f "$file" ] || die "manifest $file is missing"
  have=$(grep -o '\${[A-Za-z_][A-Za-z0-9_]*}' "$file" | tr -d '${}' | sort -u | tr '\n' ' ')
  want=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')
  [ "$have" = "$want" ] || die "$file has the placeholders ${have:-(none) }but the list is ${want:-(none) }"
  while IFS= read -r line || [ -n "$line" ]; do
    for name in "$@"; do
      [[ "$line" == *"\${$name}"* ]] || continue
      value=${!name}
      if [[ "$value" == *$'\n'* && "$line" =~ ^([[:space:]]*)\$\{$name\}$ ]]; then
        indent=${BASH_REMATCH[1]}
        line=$indent${value//$'\n'/$'\n'$indent}
      else
        line=${line//"\${$name}"/"$value"}
      fi
    done
    printf '%s\n' "$line"
  done < "$file"
}

# apply_manifest NAME LOG WHAT [VAR...]: hack/manifests/NAME.yaml, rendered with the listed
# variables, applied server-side (field manager local-up); kubectl's output goes to LOG, and to
# stderr if the apply fails
apply_manifest() {
  local name=$1 logf=$2 what=$3 manifest; shift 3
  manifest=$(render_manifest "$MANIFESTS/$name.yaml" "$@") || exit 1
  "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" apply --server-side --force-conflicts --field-manager=local-up -f - > "$logf" 2>&1 <<<"$manifest" ||
    { cat "$logf" >&2; die "kubectl apply of the $what failed"; }
}

# one harness run at a time: tests may call restart-deckhand while someone else runs up or down
take_lock() {
  mkdir -p "$STATE"
  exec 8>"$STATE/.lock"
  if ! flock -n 8; then
    log "waiting for another hack/local-up.sh run to finish"
    flock -w 900 8 || die "another hack/local-up.sh run holds $STATE/.lock for more than 15 minutes"
  fi
}

# ---------------------------------------------------------------------------------------------
# dependencies and binaries
# ---------------------------------------------------------------------------------------------

step_deps() {
  log "checking host packages (hack/install-deps.sh)"
  "$ROOT/hack/install-deps.sh"
  log "control-plane binaries $KUBE_VERSION (hack/build-k8s.sh)"
  mkdir -p "$ROOT/_output"
  # (each build script takes its own lock: one build at a time per machine checkout)
  "$ROOT/hack/build-k8s.sh" || die "hack/build-k8s.sh failed"
  if [ "$LOCAL_UP_DNS" = 1 ]; then
    log "CoreDNS $COREDNS_VERSION (hack/build-coredns.sh; LOCAL_UP_DNS=0 skips cluster DNS)"
    "$ROOT/hack/build-coredns.sh" || die "hack/build-coredns.sh failed"
  fi
  if [ "$LOCAL_UP_STORAGE" = 1 ]; then
    log "local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION (hack/build-local-path-provisioner.sh; LOCAL_UP_STORAGE=0 skips it)"
    "$ROOT/hack/build-local-path-provisioner.sh" || die "hack/build-local-path-provisioner.sh failed"
  fi
  if [ "$CONTAINERD_WANTED" = 2 ]; then
    log "containerd $CONTAINERD2_VERSION (hack/build-containerd.sh; CONTAINERD=2)"
    "$ROOT/hack/build-containerd.sh" || die "hack/build-containerd.sh failed"
  fi
  # crictl is optional (debugging, and a CRI cleanup path for `down`)
  "$ROOT/hack/build-crictl.sh" || warn "crictl could not be built; continuing without it"
  local b
  for b in etcd kube-apiserver kube-controller-manager kubectl kube-proxy $([ "$LOCAL_UP_DNS" = 1 ] && echo coredns); do
    [ -x "$BIN/$b" ] || die "$BIN/$b is missing after hack/build-k8s.sh and hack/build-coredns.sh"
  done
}

# ---------------------------------------------------------------------------------------------
# the env file (sourced by tests and benchmarks)
# ---------------------------------------------------------------------------------------------

write_env() {
  write_if_changed "$STATE/env" <<EOF || true
# $MARKER; sourceable (KEY=value)
ROOT=$ROOT
STATE_DIR=$STATE
KUBECONFIG=$ADMIN_KUBECONFIG
KUBECTL=$KUBECTL
CRICTL=$CRICTL
KUBE_VERSION=$KUBE_VERSION
API_SERVER=$API_SERVER
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
NODES=$NODES
NODES_STATE=$NODES_STATE
CRI_ENDPOINT=$CRI_ENDPOINT
CONTAINERD=$CONTAINERD_MODE
CONTAINERD_VERSION=$(containerd_version)
CTR=$(command -v "$CTR" || echo "$CTR")
POD_CIDR=$POD_CIDR
CLUSTER_CIDR=$CLUSTER_CIDR
SERVICE_CIDR=$SERVICE_CIDR
REGISTRY=$REGISTRY
REGISTRY_AUTH=$REGISTRY_AUTH
REGISTRY_AUTH_CREDS_FILE=$REGISTRY_AUTH_CREDS_FILE
KUBE_PROXY_IMAGE=$KUBE_PROXY_IMAGE
COREDNS_IMAGE=$COREDNS_IMAGE
LOCAL_UP_DNS=$LOCAL_UP_DNS
LOCAL_UP_STORAGE=$LOCAL_UP_STORAGE
CLUSTER_DNS=$CLUSTER_DNS
CLUSTER_DOMAIN=$CLUSTER_DOMAIN
SANDBOX_IMAGE=$SANDBOX_IMAGE
CNI_CONF=$CNI_CONF
CA_CERT=$PKI/ca.crt
PKI_DIR=$PKI
DECKHAND_KUBECONFIG=$([ "$DECKHAND_JOIN" = 1 ] && echo "$JOIN_KUBECONFIG" || echo "$DECKHAND_KUBECONFIG")
DECKHAND_JOIN=$DECKHAND_JOIN
JOIN_DIR=$JOIN_DIR
DECKHAND_TLS_CERT=$PKI/node-serving.crt
DECKHAND_TLS_KEY=$PKI/node-serving.key
DECKHAND_ROOT_DIR=$DECKHAND_ROOT_DIR
DECKHAND_CONFIG=$DECKHAND_CONFIG
STATIC_POD_DIR=$STATIC_POD_DIR
DECKHAND_BIN=$(deckhand_bin)
DECKHAND_LOG=$DECKHAND_LOG
DECKHAND_PIDFILE=$DECKHAND_PIDFILE
SCHEDULER_BIN=$(scheduler_bin)
SCHEDULER_KUBECONFIG=$SCHEDULER_KUBECONFIG
SCHEDULER_LOG=$SCHEDULER_LOG
SCHEDULER_PIDFILE=$SCHEDULER_PIDFILE
EOF
}
