# shellcheck shell=bash
# hack/images/lib.sh: what the image scripts (build-images.sh, build-e2e-images.sh,
# build-control-plane-images.sh) share: the digests that decide whether a tag must be pushed, and
# the account files of the distroless-shaped images. Sourced by them; each counts this file in its
# inputs hash, so a change here rebuilds their layouts.

# oci_layout_digest LAYOUT NAME: the digest of the manifest image NAME has in OCI layout LAYOUT
oci_layout_digest() {
  jq -r --arg n "$2" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $n) | .digest' \
    "$1/index.json"
}

# oci_registry_digest REGISTRY REPO:TAG [CURL_ARG...]: the digest REGISTRY serves for REPO:TAG
# (empty when it has none); CURL_ARGs go to curl (credentials for a protected registry)
oci_registry_digest() {
  local reg=$1 ref=$2
  shift 2
  local repo=${ref%:*} tag=${ref##*:}
  curl -sfI --max-time 5 "$@" \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$reg/v2/$repo/manifests/$tag" 2>/dev/null |
    tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}' || true
}

# write_nonroot_accounts ROOTFS: /etc/passwd and /etc/group with root, nobody and nonroot
# (65532), the accounts of the distroless base images upstream's coredns and control-plane
# images are built on
write_nonroot_accounts() {
  mkdir -p "$1/etc"
  cat > "$1/etc/passwd" <<'ACCOUNTS'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
ACCOUNTS
  cat > "$1/etc/group" <<'ACCOUNTS'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
ACCOUNTS
}
