# shellcheck shell=bash
# hack/lib/pki.sh: the cluster's PKI under _output/local-up/pki (openssl: the CA, the
# front-proxy CA, every component's certificate, the service-account key pair) and the
# kubeconfigs that embed them (admin, controller-manager, scheduler, static node kubeconfig).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

# ---------------------------------------------------------------------------------------------
# PKI (openssl; generated once, reused; a cert is re-issued if invalid, expiring or renamed)
# ---------------------------------------------------------------------------------------------
gen_ca() {  # NAME CN
  local name=$1 cn=$2
  if [ -s "$PKI/$name.key" ] && [ -s "$PKI/$name.crt" ] &&
     openssl x509 -in "$PKI/$name.crt" -noout -checkend 2592000 >/dev/null 2>&1; then
    return 0
  fi
  log "pki: new CA $name ($cn)"
  # a new CA invalidates every certificate it signed before
  local f
  for f in "$PKI"/*.crt; do
    [ -e "$f" ] && [ "$(cat "${f%.crt}.ca" 2>/dev/null)" = "$name" ] && rm -f "$f"
  done
  printf '%s\n' "[req]" "distinguished_name = dn" "prompt = no" "[dn]" "CN = $cn" "[v3_ca]" \
    "basicConstraints = critical, CA:TRUE" "keyUsage = critical, keyCertSign, cRLSign, digitalSignature" \
    "subjectKeyIdentifier = hash" "authorityKeyIdentifier = keyid:always" > "$PKI/$name.cnf"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  chmod 600 "$PKI/$name.key"
  openssl req -x509 -new -key "$PKI/$name.key" -sha256 -days 3650 -config "$PKI/$name.cnf" -extensions v3_ca \
    -out "$PKI/$name.crt" 2>/dev/null
}

# gen_cert NAME SUBJECT EKU [SANS]   (signed by the CA named in $SIGNER, default "ca")
gen_cert() {
  local name=$1 subj=$2 eku=$3 sans=${4:-} ca=${SIGNER:-ca}
  local crt="$PKI/$name.crt" key="$PKI/$name.key"
  if [ -s "$crt" ] && [ -s "$key" ] &&
     openssl verify -CAfile "$PKI/$ca.crt" "$crt" >/dev/null 2>&1 &&
     openssl x509 -in "$crt" -noout -checkend 2592000 >/dev/null 2>&1 &&
     [ "$(openssl x509 -in "$crt" -noout -subject -nameopt compat 2>/dev/null)" = "subject=$subj" ] &&
     [ "$(openssl x509 -in "$crt" -noout -pubkey | sha256sum)" = "$(openssl pkey -in "$key" -pubout | sha256sum)" ]; then
    return 0
  fi
  log "pki: issuing $name ($subj)"
  {
    echo "basicConstraints = critical, CA:FALSE"
    echo "keyUsage = critical, digitalSignature, keyEncipherment"
    echo "extendedKeyUsage = $eku"
    echo "subjectKeyIdentifier = hash"
    echo "authorityKeyIdentifier = keyid"
    [ -z "$sans" ] || echo "subjectAltName = $sans"
  } > "$PKI/$name.ext"
  openssl genrsa -out "$key" 2048 2>/dev/null
  openssl req -new -key "$key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$crt" 2>/dev/null
  rm -f "$PKI/$name.csr"
  echo "$ca" > "$PKI/$name.ca"
  chmod 600 "$key"
}

step_pki() {
  mkdir -p "$PKI"; chmod 700 "$PKI"
  gen_ca ca deckhand-local-ca
  gen_ca front-proxy-ca deckhand-local-front-proxy-ca
  gen_cert apiserver "/CN=kube-apiserver" serverAuth \
    "IP:$NODE_IP, IP:127.0.0.1, IP:10.96.0.1, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local, DNS:localhost"
  gen_cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  gen_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
  # deckhand-scheduler: the built-in system:kube-scheduler RBAC (bindings, pods/status, events,
  # the kube-system/kube-scheduler Lease) applies to this user name, and so does the API server's
  # bootstrap ClusterRoleBinding system:volume-scheduler (persistentvolumes and
  # persistentvolumeclaims get/list/watch/update/patch, storageclasses get/list/watch), which
  # VolumeBinding's PreBind needs
  gen_cert scheduler "/CN=system:kube-scheduler" clientAuth
  gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  gen_cert node "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
  # serving certificate for deckhand's own HTTPS server (port 10250), signed by the cluster CA
  gen_cert node-serving "/O=system:nodes/CN=system:node:$NODE_NAME" serverAuth \
    "IP:$NODE_IP, IP:127.0.0.1, DNS:$NODE_NAME, DNS:localhost"
  # aggregation layer (kube-controller-manager and other delegated authenticators read this CA)
  SIGNER=front-proxy-ca gen_cert front-proxy-client "/CN=front-proxy-client" clientAuth
  if [ ! -s "$PKI/sa.key" ] || [ ! -s "$PKI/sa.pub" ]; then
    log "pki: service-account key pair"
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    chmod 600 "$PKI/sa.key"
  fi
  log "pki: ok ($PKI)"
}

# ---------------------------------------------------------------------------------------------
# kubeconfigs (certificates embedded, so they work from any directory)
# ---------------------------------------------------------------------------------------------
write_kubeconfig() {  # FILE USER CERT_NAME
  local file=$1 user=$2 cert=$3
  local tmp="$file.tmp.$$"
  cat > "$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: deckhand-local
  cluster:
    server: $API_SERVER
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 < "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 < "$PKI/$cert.key")
contexts:
- name: $user@deckhand-local
  context:
    cluster: deckhand-local
    user: $user
current-context: $user@deckhand-local
preferences: {}
EOF
  chmod 600 "$tmp"
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv -f "$tmp" "$file"; fi
}

step_kubeconfigs() {
  write_kubeconfig "$ADMIN_KUBECONFIG" kubernetes-admin admin
  write_kubeconfig "$KCM_KUBECONFIG" system:kube-controller-manager controller-manager
  write_kubeconfig "$SCHEDULER_KUBECONFIG" system:kube-scheduler scheduler
  write_kubeconfig "$DECKHAND_KUBECONFIG" "system:node:$NODE_NAME" node
  log "kubeconfigs: $ADMIN_KUBECONFIG, $(basename "$KCM_KUBECONFIG"), $(basename "$DECKHAND_KUBECONFIG"), $(basename "$SCHEDULER_KUBECONFIG")"
}
