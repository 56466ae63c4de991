# shellcheck shell=bash
# hack/lib/registry.sh: the two local registries (docker-registry: 127.0.0.1:5000, open, and
# 127.0.0.1:5001 with htpasswd basic auth and its credentials) and the images built here and
# pushed to them (hack/images/build-images.sh), pulled once through containerd as a check.
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

registry_healthy() { curl -sf --max-time 2 "http://$REGISTRY/v2/" >/dev/null 2>&1; }
# the password-protected registry answers, and asks for credentials
registry_auth_healthy() {
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$REGISTRY_AUTH/v2/" 2>/dev/null)" = 401 ]
}

step_registry() {
  mkdir -p "$STATE/registry/data"
  write_if_changed "$STATE/registry/config.yml" <<EOF || true
# $MARKER (Debian's default config wants htpasswd auth and listens on all interfaces)
version: 0.1
log:
  level: info
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $STATE/registry/data
  delete:
    enabled: true
http:
  addr: $REGISTRY
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  ensure_daemon registry 5000 registry_healthy 30 -- "$(command -v docker-registry)" serve "$STATE/registry/config.yml"
  step_registry_auth
}

# bcrypt hash for an htpasswd file (docker-registry accepts only bcrypt): htpasswd if installed,
# else the system python's crypt module (libxcrypt does bcrypt); the password comes on stdin
bcrypt_hash() {
  if command -v htpasswd >/dev/null; then
    htpasswd -niB x | sed -n 's/^x://p'
  else
    /usr/bin/python3 -W ignore -c 'import crypt, sys; print(crypt.crypt(sys.stdin.read().rstrip("\n"), crypt.mksalt(crypt.METHOD_BLOWFISH)))'
  fi
}

# the second registry: same binary, own storage, htpasswd basic auth (plain HTTP on loopback only)
step_registry_auth() {
  mkdir -p "$REGISTRY_AUTH_DIR/data"; chmod 700 "$REGISTRY_AUTH_DIR"
  if [ ! -s "$REGISTRY_AUTH_CREDS_FILE" ]; then
    log "registry-auth: new credentials ($REGISTRY_AUTH_CREDS_FILE)"
    ( umask 077; printf '%s:%s\n' "$REGISTRY_AUTH_USER" "$(openssl rand -hex 16)" > "$REGISTRY_AUTH_CREDS_FILE" )
  fi
  local htpasswd="$REGISTRY_AUTH_DIR/htpasswd"
  if [ ! -s "$htpasswd" ] || [ "$REGISTRY_AUTH_CREDS_FILE" -nt "$htpasswd" ]; then
    local hash
    hash=$(cut -d: -f2- "$REGISTRY_AUTH_CREDS_FILE" | bcrypt_hash) || die "cannot hash the registry password"
    [[ "$hash" == \$2* ]] || die "no bcrypt available (install apache2-utils for htpasswd)"
    ( umask 077; printf '%s:%s\n' "$REGISTRY_AUTH_USER" "$hash" > "$htpasswd" )
  fi
  write_if_changed "$REGISTRY_AUTH_DIR/config.yml" <<EOF || true
# $MARKER: the password-protected registry (htpasswd basic auth)
version: 0.1
log:
  level: info
  fields:
    service: registry-auth
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $REGISTRY_AUTH_DIR/data
  delete:
    enabled: true
auth:
  htpasswd:
    realm: deckhand-local
    path: $htpasswd
http:
  addr: $REGISTRY_AUTH
  headers:
    X-Content-Type-Options: [nosniff]
EOF
  ensure_daemon registry-auth "${REGISTRY_AUTH##*:}" registry_auth_healthy 30 -- "$(command -v docker-registry)" serve "$REGISTRY_AUTH_DIR/config.yml"
}

# ---------------------------------------------------------------------------------------------
# images
# ---------------------------------------------------------------------------------------------
step_images() {
  log "images: hack/images/build-images.sh"
  REGISTRY=$REGISTRY AUTH_REGISTRY=$REGISTRY_AUTH AUTH_CREDS_FILE=$REGISTRY_AUTH_CREDS_FILE \
    WITH_COREDNS=$LOCAL_UP_DNS WITH_LOCAL_PATH=$LOCAL_UP_STORAGE "$ROOT/hack/images/build-images.sh" 2>&1 | sed 's/^/    /'
  # prove the mirror mapping through the CRI plugin's own image store (namespace k8s.io)
  local img imgs=(docker.io/library/busybox:latest "$SANDBOX_IMAGE" "$KUBE_PROXY_IMAGE")
  [ "$LOCAL_UP_DNS" = 1 ] && imgs+=("$COREDNS_IMAGE")
  for img in "${imgs[@]}"; do
    "$CTR" --address "$CRI_SOCK" -n k8s.io images pull --hosts-dir "$CERTS_D" "$img" >/dev/null 2>"$STATE/pull.err" ||
      { cat "$STATE/pull.err" >&2; die "containerd could not pull $img from the local registry"; }
  done
  rm -f "$STATE/pull.err"
  log "images: ${imgs[*]} pull from $REGISTRY"
}
