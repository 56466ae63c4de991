# shellcheck shell=bash
# hack/lib/vm-node.sh: a VM of hack/lib/vm.sh made a worker node of the running local cluster
# (either LOCAL_UP_MODE) the way a user makes a Debian host a kubeadm worker with deckhand as its
# kubelet: the binary, the units of systemd/ with the kubeadm drop-in, `systemctl enable`; then
# the real `kubeadm join` (built from the pinned modules, hack/build-k8s.sh kubeadm), which writes
# /var/lib/kubelet/config.yaml, kubeadm-flags.env and the kubeconfigs and runs `systemctl restart
# kubelet` (deckhand.service, through its Alias=kubelet.service).
#
# The node looks like a kind worker (kind's cluster config, kind/pkg/cluster/internal/kubeadm):
# the JoinConfiguration's kubeletExtraArgs carry --node-ip, --node-labels and a kind-style
# --provider-id (so kubeadm-flags.env has them), and a kubeadm patch of the kubelet configuration
# (/etc/kubernetes/patches/kubeletconfiguration+merge.yaml) sets what kind's KubeletConfiguration
# sets: cgroupDriver systemd, cgroupRoot /kubelet (the kubelet.slice unit kind's node image makes,
# started here), failSwapOn false, imageGCHighThresholdPercent 100 and kind's evictionHard (no
# nodefs or imagefs eviction), plus memory.available<$VM_EVICTION_MEMORY, so that memory pressure
# can be tested in a 2 GiB VM. containerd (Debian's 1.6 in the image) runs runc with SystemdCgroup
# = true and pulls every image from the harness's registry on the node bridge.
#
# Pod network: once kube-controller-manager gives the Node its podCIDR, the VM gets the
# harness's CNI config for it (bridge dh-cni0 inside the VM, no masquerade) and the host routes
# the CIDR via the VM's address, as hack/lib/nodes.sh does for the namespace nodes.
#
# Functions (each takes the VM index I first): vm_node_install, vm_node_join, vm_node_leave,
# vm_node_up (install + join + pod network + Ready). Needs hack/local-up.sh's libraries (sourced
# with LOCAL_UP_SOURCE_ONLY=1 by hack/vm.sh) and hack/lib/vm.sh.

# kind-style provider ID: kind://<provider>/<cluster>/<node>
VM_PROVIDER_ID_PREFIX=${VM_PROVIDER_ID_PREFIX:-kind://qemu/deckhand}
VM_NODE_LABELS=${VM_NODE_LABELS:-deckhand.dev/vm=true}
# hard eviction threshold on memory.available (kind sets none; a 2 GiB VM needs one to test
# eviction without the kernel's OOM killer coming first)
VM_EVICTION_MEMORY=${VM_EVICTION_MEMORY:-1Gi}
VM_JOIN_TIMEOUT=${VM_JOIN_TIMEOUT:-600}
VM_READY_TIMEOUT=${VM_READY_TIMEOUT:-300}

# the cluster the VM joins: its admin kubeconfig and API endpoint (host:port)
vm_cluster_admin() {
  if [ "$LOCAL_UP_MODE" = kubeadm ]; then echo "$KUBEADM_ADMIN"; else echo "$ADMIN_KUBECONFIG"; fi
}
vm_cluster_endpoint() {
  if [ "$LOCAL_UP_MODE" = kubeadm ]; then echo "$KUBEADM_CP_IP:$API_PORT"; else echo "$NODE_IP:$API_PORT"; fi
}
vm_kubectl() { "$KUBECTL" --kubeconfig "$(vm_cluster_admin)" "$@"; }
vm_cluster_up() { [ -s "$(vm_cluster_admin)" ] && vm_kubectl get --raw /readyz >/dev/null 2>&1; }

# what the VM's containerd runs with: Debian's CRI defaults, runc with the systemd cgroup driver,
# the CNI plugins where Debian puts them, registries from /etc/containerd/certs.d
vm_containerd_config() {
  cat <<EOF
# $MARKER: containerd 1.6 of a VM node (systemd cgroup driver, cgroup v2)
version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$SANDBOX_IMAGE"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
EOF
}

# the harness's registry name of every mirrored registry, on the node bridge
vm_hosts_toml() {
  cat <<EOF
# $MARKER: resolves ONLY to the local registry, at $NODES_REGISTRY on the node bridge
server = "http://$NODES_REGISTRY"

[host."http://$NODES_REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
}

# kind's KubeletConfiguration settings, as a kubeadm patch of the node's kubelet configuration.
# The default mode's API server checks kubelets' serving certificates against the cluster CA
# (--kubelet-certificate-authority, as a hardened cluster does; kubeadm's and kind's do not): there
# the node gets its serving certificate from a kubernetes.io/kubelet-serving CSR
# (serverTLSBootstrap), which vm_node_approve_serving approves as the cluster's admin would.
vm_kubelet_patch() {
  cat <<EOF
# $MARKER: what kind's KubeletConfiguration sets on its nodes, as kubeadm patches it in
cgroupDriver: systemd
cgroupRoot: /kubelet
failSwapOn: false
imageGCHighThresholdPercent: 100
evictionHard:
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  memory.available: "$VM_EVICTION_MEMORY"
EOF
  [ "$LOCAL_UP_MODE" = kubeadm ] || echo "serverTLSBootstrap: true"
}

# I: approve the node's pending kubernetes.io/kubelet-serving CSRs (serverTLSBootstrap), as
# `kubectl certificate approve` by the cluster's admin: the default mode only
vm_node_approve_serving() {
  local i=$1 name csr t
  [ "$LOCAL_UP_MODE" != kubeadm ] || return 0
  name=$(vm_name "$i")
  for t in $(seq 1 60); do
    for csr in $(vm_kubectl get csr -o jsonpath="{range .items[?(@.spec.signerName==\"kubernetes.io/kubelet-serving\")]}{.metadata.name} {.spec.username} {.status.certificate}{'\n'}{end}" 2>/dev/null |
                 awk -v u="system:node:$name" '$2 == u && $3 == "" {print $1}'); do
      vm_kubectl certificate approve "$csr" >/dev/null && vm_log "$name: serving certificate CSR $csr approved"
      return 0
    done
    sleep 1
  done
  vm_warn "$name: no kubelet-serving CSR within 60s (kubectl logs and exec to its pods will fail)"
}

vm_join_config() {  # I TOKEN CA_HASH
  local i=$1 name ip
  name=$(vm_name "$i"); ip=$(vm_ip "$i")
  cat <<EOF
# $MARKER: kubeadm join of $name (hack/vm.sh)
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "$(vm_cluster_endpoint)"
    token: "$2"
    caCertHashes: ["$3"]
nodeRegistration:
  name: $name
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
  - {name: node-ip, value: "$ip"}
  - {name: node-labels, value: "$VM_NODE_LABELS"}
  - {name: provider-id, value: "$VM_PROVIDER_ID_PREFIX/$name"}
patches:
  directory: /etc/kubernetes/patches
EOF
}

# I: deckhand, kubeadm and the units installed as a user installs them; containerd configured
vm_node_install() {
  local i=$1 name dir stage bin
  name=$(vm_name "$i"); dir=$(vm_dir "$i"); stage="$dir/install"
  bin=$(deckhand_bin)
  [ -x "$bin" ] || vm_die "no deckhand binary at $bin (DECKHAND_BIN, or hack/build-release.sh)"
  [ -x "$(kubeadm_bin)" ] || "$ROOT/hack/build-k8s.sh" kubeadm >&2 || vm_die "hack/build-k8s.sh kubeadm failed"
  rm -rf "$stage"; mkdir -p "$stage/certs.d" "$stage/patches"
  cp "$bin" "$stage/deckhand"
  cp "$(kubeadm_bin)" "$stage/kubeadm"
  cp "$ROOT/systemd/deckhand.service" "$stage/"
  cp "$ROOT/systemd/deckhand.service.d/10-kubeadm.conf" "$stage/"
  vm_containerd_config > "$stage/config.toml"
  vm_hosts_toml > "$stage/hosts.toml"
  vm_kubelet_patch > "$stage/patches/kubeletconfiguration+merge.yaml"
  printf '%s\n' "${MIRRORED_REGISTRIES[@]}" "$REGISTRY" > "$stage/registries"
  vm_log "$name: installing deckhand ($(basename "$bin"), $(du -h "$bin" | cut -f1)) and kubeadm $KUBE_VERSION"
  vm_ssh "$i" rm -rf /root/deckhand-install
  vm_scp "$i" "$stage" /root/deckhand-install
  # shellcheck disable=SC2016
  vm_ssh "$i" 'set -e; cd /root/deckhand-install
    install -m 0755 deckhand /usr/bin/deckhand
    ln -sfn deckhand /usr/bin/kubelet      # kubeadm preflight runs `kubelet --version`
    install -m 0755 kubeadm /usr/bin/kubeadm
    install -m 0644 deckhand.service /etc/systemd/system/deckhand.service
    mkdir -p /etc/systemd/system/deckhand.service.d
    install -m 0644 10-kubeadm.conf /etc/systemd/system/deckhand.service.d/10-kubeadm.conf
    install -m 0644 config.toml /etc/containerd/config.toml
    while read -r r; do mkdir -p "/etc/containerd/certs.d/$r"; install -m 0644 hosts.toml "/etc/containerd/certs.d/$r/hosts.toml"; done < registries
    mkdir -p /etc/kubernetes/patches
    install -m 0644 "patches/kubeletconfiguration+merge.yaml" /etc/kubernetes/patches/
    # kind'"'"'s cgroupRoot: /kubelet under the systemd driver is kubelet.slice (kind'"'"'s node image makes it)
    systemctl start kubelet.slice
    systemctl daemon-reload
    systemctl enable deckhand.service
    systemctl restart containerd'
}

# I: kubeadm join with a new bootstrap token; the pod network once the Node has its podCIDR
vm_node_join() {
  local i=$1 name ip dir token hash ca
  name=$(vm_name "$i"); ip=$(vm_ip "$i"); dir=$(vm_dir "$i")
  vm_cluster_up || vm_die "no local cluster answers (hack/local-up.sh up first, either LOCAL_UP_MODE)"
  if vm_kubectl get node "$name" >/dev/null 2>&1 || [ -s "$dir/pod-cidr" ]; then
    vm_log "$name: joined before; its Node and pod route go first (kubeadm refuses to join over a Ready Node)"
    vm_node_leave "$i"
    vm_kubectl wait --for=delete "node/$name" --timeout=60s >/dev/null 2>&1 || true
  fi
  token=$("$(kubeadm_bin)" token create --kubeconfig "$(vm_cluster_admin)" --ttl 1h --description "hack/vm.sh join of $name") ||
    vm_die "kubeadm token create failed"
  ca="$dir/ca.crt"
  vm_kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$ca"
  hash="sha256:$(openssl x509 -pubkey -noout < "$ca" | openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1)"
  if vm_ssh "$i" test -e /etc/kubernetes/kubelet.conf </dev/null; then
    vm_log "$name: joined before: kubeadm reset first, as on any node that joins again"
    vm_ssh "$i" kubeadm reset -f --cri-socket unix:///run/containerd/containerd.sock > "$dir/kubeadm-reset.log" 2>&1 </dev/null ||
      vm_warn "$name: kubeadm reset failed (log $dir/kubeadm-reset.log)"
    # what kubeadm reset leaves to the user: the CNI config and bridge of the old pod CIDR
    vm_ssh "$i" "rm -f /etc/cni/net.d/10-deckhand.conflist; rm -rf /var/lib/cni/networks/$CNI_NAME; ip link del $CNI_BRIDGE 2>/dev/null || true" </dev/null
  fi
  vm_join_config "$i" "$token" "$hash" > "$dir/join.yaml"
  vm_scp "$i" "$dir/join.yaml" /etc/kubernetes/join.yaml
  vm_log "$name: kubeadm join $(vm_cluster_endpoint) (log $dir/kubeadm-join.log)"
  local t0=$SECONDS
  if ! VM_INDEX=$i timeout "$VM_JOIN_TIMEOUT" "$ROOT/hack/vm.sh" ssh -- \
      kubeadm join --config /etc/kubernetes/join.yaml -v=1 > "$dir/kubeadm-join.log" 2>&1; then
    tail -n 30 "$dir/kubeadm-join.log" >&2
    vm_ssh "$i" journalctl -u deckhand --no-pager -n 40 >&2 || true
    vm_die "$name: kubeadm join failed (log $dir/kubeadm-join.log)"
  fi
  echo "$((SECONDS - t0))" > "$dir/join-seconds"
  vm_log "$name: kubeadm join done in $((SECONDS - t0))s"
}

# I: the CNI config for the Node's podCIDR in the VM, and the host's route to it
vm_node_pod_network() {
  local i=$1 name ip dir cidr t
  name=$(vm_name "$i"); ip=$(vm_ip "$i"); dir=$(vm_dir "$i")
  for t in $(seq 1 120); do
    cidr=$(vm_kubectl get node "$name" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null || true)
    [ -z "$cidr" ] || break
    sleep 1
  done
  [ -n "$cidr" ] || vm_die "$name: no podCIDR from kube-controller-manager within 120s"
  cni_conflist "$cidr" "${cidr%.*/*}.1" false > "$dir/10-deckhand.conflist"
  vm_scp "$i" "$dir/10-deckhand.conflist" /etc/cni/net.d/10-deckhand.conflist
  ip route replace "$cidr" via "$ip" dev "$VM_BRIDGE"
  echo "$cidr" > "$dir/pod-cidr"
  vm_log "$name: pod CIDR $cidr (CNI bridge $CNI_BRIDGE in the VM, host route via $ip)"
}

vm_node_wait_ready() {
  local i=$1 name t0=$SECONDS
  name=$(vm_name "$i")
  while [ $((SECONDS - t0)) -lt "$VM_READY_TIMEOUT" ]; do
    if [ "$(vm_kubectl get node "$name" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; then
      vm_log "$name: Ready"
      return 0
    fi
    sleep 2
  done
  vm_ssh "$i" journalctl -u deckhand --no-pager -n 40 >&2 || true
  vm_die "$name: not Ready within ${VM_READY_TIMEOUT}s"
}

# I: the Node deleted (its pods go with it) and the host's route removed; the VM keeps running
vm_node_leave() {
  local i=$1 name dir cidr
  name=$(vm_name "$i"); dir=$(vm_dir "$i")
  cidr=$(cat "$dir/pod-cidr" 2>/dev/null || true)
  [ -z "$cidr" ] || ip route del "$cidr" 2>/dev/null || true
  rm -f "$dir/pod-cidr"
  if vm_cluster_up && vm_kubectl get node "$name" >/dev/null 2>&1; then
    vm_log "$name: deleting Node $name"
    vm_kubectl delete node "$name" --wait=false >/dev/null 2>&1 || true
  fi
}

# I: install, join, pod network, Ready; prints the join and boot-to-Ready times
vm_node_up() {
  local i=$1 name dir
  name=$(vm_name "$i"); dir=$(vm_dir "$i")
  # the nodes' registry (the harness's registry on the node bridge) serves the VM's images
  nodes_host_network >/dev/null
  vm_node_install "$i"
  vm_node_join "$i"
  vm_node_approve_serving "$i"
  vm_node_pod_network "$i"
  vm_node_wait_ready "$i"
  local started; started=$(cat "$dir/boot-started" 2>/dev/null || echo "")
  [ -z "$started" ] || vm_log "$name: QEMU start -> Node Ready $(( $(date +%s) - ${started%.*} ))s"
}
