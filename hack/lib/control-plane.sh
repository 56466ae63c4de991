# shellcheck shell=bash
# hack/lib/control-plane.sh: etcd, kube-apiserver and kube-controller-manager (command lines and
# health checks), and the cluster objects `kubeadm init` would create for a joining kubelet
# (hack/manifests/cluster-objects.yaml: cluster-info, bootstrap-token RBAC, kubelet-config).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

etcd_healthy() { curl -sf --max-time 2 http://127.0.0.1:2379/health 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ready() {
  [ "$(curl -s --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$API_SERVER/readyz" 2>/dev/null)" = ok ]
}
kcm_healthy() { [ "$(curl -sk --max-time 3 https://127.0.0.1:10257/healthz 2>/dev/null)" = ok ]; }

step_etcd() {
  mkdir -p "$STATE/etcd"; chmod 700 "$STATE/etcd"
  ensure_daemon etcd 2379 etcd_healthy 60 -- "$BIN/etcd" \
    --name local-up \
    --data-dir "$STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster local-up=http://127.0.0.1:2380 \
    --initial-cluster-state new \
    --log-level warn
}

# --enable-aggregator-routing: the API server reaches admission and conversion webhooks and
# aggregated API servers at their Service's endpoints (pod IPs, through the CNI bridge) instead of
# the ClusterIP: this host has no route to the Service CIDR (hack/lib/network.sh), as on control
# planes that run no kube-proxy.
step_apiserver() {
  ensure_daemon kube-apiserver "$API_PORT" apiserver_ready 120 -- "$BIN/kube-apiserver" \
    --bind-address="$NODE_IP" \
    --advertise-address="$NODE_IP" \
    --secure-port="$API_PORT" \
    --etcd-servers=http://127.0.0.1:2379 \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --enable-bootstrap-token-auth \
    --allow-privileged=true \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    --cert-dir="$STATE/apiserver-certs" \
    --profiling=false \
    --v=1
}

step_controller_manager() {
  ensure_daemon kube-controller-manager 10257 kcm_healthy 60 -- "$BIN/kube-controller-manager" \
    --kubeconfig="$KCM_KUBECONFIG" \
    --authentication-kubeconfig="$KCM_KUBECONFIG" \
    --authorization-kubeconfig="$KCM_KUBECONFIG" \
    --bind-address=127.0.0.1 \
    --secure-port=10257 \
    --cert-dir="$STATE/controller-manager-certs" \
    '--controllers=*,bootstrapsigner,tokencleaner' \
    --use-service-account-credentials \
    --root-ca-file="$PKI/ca.crt" \
    --service-account-private-key-file="$PKI/sa.key" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --leader-elect=false \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --allocate-node-cidrs=true \
    --cluster-cidr="$CLUSTER_CIDR" \
    --node-cidr-mask-size=24 \
    --profiling=false \
    --v=1
}

# kubeadm-style objects for the TLS-bootstrap (join) flow: kube-public/cluster-info (signed by the
# bootstrapsigner controller for each bootstrap token) readable anonymously, the bindings that
# let bootstrap tokens create node CSRs that the csrapproving controller approves, and the
# kubelet-config ConfigMap with its Role (what `kubeadm init` creates: phases/bootstraptoken/node,
# phases/kubelet/config.go). Tests create the bootstrap-token-* Secrets themselves
# (vagrant/provision.sh token). The objects: hack/manifests/cluster-objects.yaml.
# the ClusterConfiguration kubeadm would have stored for this cluster (kubeadm join reads it)
cluster_config_yaml() {
  cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: deckhand
kubernetesVersion: $KUBE_VERSION
controlPlaneEndpoint: "$NODE_IP:$API_PORT"
certificatesDir: /etc/kubernetes/pki
imageRepository: registry.k8s.io
networking:
  podSubnet: $CLUSTER_CIDR
  serviceSubnet: $SERVICE_CIDR
  dnsDomain: $CLUSTER_DOMAIN
EOF
}

step_cluster_objects() {
  local CA_DATA KUBELET_CONFIG CLUSTER_CONFIG
  CA_DATA=$(base64 -w0 < "$PKI/ca.crt")
  KUBELET_CONFIG=$(kubelet_config_yaml)
  CLUSTER_CONFIG=$(cluster_config_yaml)
  apply_manifest cluster-objects "$STATE/cluster-objects.log" "bootstrap objects" CA_DATA API_SERVER KUBELET_CONFIG CLUSTER_CONFIG
  log "cluster objects: kube-public/cluster-info, kube-system/kubelet-config and kubeadm-config, bootstrap-token RBAC (kubeadm-style) applied"
}
