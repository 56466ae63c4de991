#!/usr/bin/env bash
# Builds the images the upstream conformance suite (k8s.io/kubernetes test/e2e at the version in
# hack/versions.env; run by hack/conformance.sh) needs, from local parts only, and pushes them to the
# local registry under the path the mirror maps: registry.k8s.io/X resolves to $REGISTRY/X
# (hack/lib/registry.sh), so registry.k8s.io/e2e-test-images/agnhost:2.63.0 is pushed as
# $REGISTRY/e2e-test-images/agnhost:2.63.0. Tags are read from the module's
# test/utils/image/manifest.go, so they are exactly the ones the suite names.
#
#   busybox          the harness's busybox rootfs (Debian busybox-static, every applet in /bin) with
#                    Debian's bash-static as /bin/bash and hack/images/sh.c as /bin/sh: busybox
#                    1.35's ash drops environment variables whose names are not shell identifiers
#                    (data-1) when it starts a child, which the envFrom tests check, and bash's error
#                    messages differ from the ones other tests check word for word; sh.c runs ash,
#                    or bash when the environment holds such a name
#   agnhost          the static agnhost binary (hack/build-k8s.sh agnhost) as /agnhost, /agnhost-2
#                    linked to it, /uploads, porter's localhost.crt/.key from the agnhost source, on
#                    the plain busybox rootfs plus Debian's bash, curl, getent, nc
#                    (netcat-openbsd) and dig (bind9-dnsutils; the DNS tests' querier) with their
#                    libraries, and bash as /bin/sh (Debian's busybox ash prefers its own applets to
#                    the PATH: busybox's nc would stand in for netcat-openbsd); the users of its Dockerfile (uid 1000
#                    user-defined-in-image in gid 50000 group-defined-in-image); ENTRYPOINT /agnhost,
#                    CMD pause. The previous tag (AgnhostPrev) is the same image.
#   kitten, nautilus agnhost plus the files of their source dirs and upstream base's (alpine:3.21)
#                    /etc/os-release, which the ImageVolume conformance test reads; CMD test-webserver
#   glibc-dns-testing the DNS tests' second querier (formerly jessie-dnsutils: Debian with dnsutils):
#                    the plain busybox rootfs plus Debian's dig, nslookup and host (bind9-dnsutils)
#                    and getent with their libraries (glibc's resolver, where agnhost's busybox is
#                    the other libc path); upstream's also holds a CoreDNS binary that only the
#                    non-conformance dns_configmap tests run, left out
#   nonewprivs       the static nnp binary (hack/build-k8s.sh nonewprivs), setuid root, in busybox
#   nonroot          busybox, USER 1234
#   nginx            Debian's nginx binary and its libraries in busybox, port 80, the default page in
#                    /usr/share/nginx/html, logs to stdout/stderr, `daemon off;`, STOPSIGNAL SIGQUIT
#                    (both Nginx and NginxNew tags)
#   pause            hack/images/pause.c, static (as build-images.sh builds it)
#   etcd             the harness's etcd (hack/build-k8s.sh etcd) as /usr/local/bin/etcd in busybox
#   sample-apiserver the staging module's kube-sample-apiserver (hack/build-k8s.sh sample-apiserver) as
#                    /kube-sample-apiserver; left out (with a note) when that binary is not built
# Images the conformance tests do not use (node-perf, volume servers, apparmor-loader, perl, ...) are
# not built. The invalid-registry image is never pushed: hack/conformance.sh points invalidRegistry
# at a path of the local registry that holds nothing.
#
# Fast path: the OCI layout in _output/images/e2e-oci is rebuilt only when its inputs change (this
# script, pause.c and every binary or file copied in); a tag is pushed only when the registry does not
# already hold exactly the manifest the layout has.
#
# Usage: hack/images/build-e2e-images.sh [--force]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/hack/images"
REGISTRY=${REGISTRY:-127.0.0.1:5000}
. "$ROOT/hack/versions.env"
. "$HERE/lib.sh"
export PATH=/usr/local/go/bin:$PATH
BIN="$ROOT/_output/bin"
WORK="$ROOT/_output/images"
LAYOUT="$WORK/e2e-oci"
BUSYBOX_BIN=${BUSYBOX_BIN:-/bin/busybox}
BASH_STATIC=${BASH_STATIC:-/bin/bash-static}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
FORCE=0
[ "${1:-}" = "--force" ] && FORCE=1

log() { echo "build-e2e-images: $*"; }
die() { echo "build-e2e-images: ERROR: $*" >&2; exit 1; }

for t in umoci skopeo gcc strip curl jq sha256sum readelf ldd go; do
  command -v "$t" >/dev/null || die "$t not found (run hack/install-deps.sh)"
done
DNSUTILS=(/usr/bin/dig /usr/bin/nslookup /usr/bin/host)
for f in "$BUSYBOX_BIN" "$BASH_STATIC" "$NGINX_BIN" /usr/bin/curl /usr/bin/getent /usr/bin/nc.openbsd /usr/bin/bash "${DNSUTILS[@]}"; do
  [ -x "$f" ] || die "$f not found (run hack/install-deps.sh)"
done
for b in agnhost nonewprivs etcd; do
  [ -x "$BIN/$b" ] || die "$BIN/$b not found (run hack/build-k8s.sh $b)"
done
SAMPLE_APISERVER="$BIN/sample-apiserver"

KMOD=$(cd "$ROOT" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go env GOMODCACHE)/k8s.io/kubernetes@$KUBE_VERSION
MANIFEST="$KMOD/test/utils/image/manifest.go"
[ -f "$MANIFEST" ] || die "$MANIFEST not found (hack/build-k8s.sh downloads the module)"
IMAGES_SRC="$KMOD/test/images"

case "$(uname -m)" in
  x86_64) ARCH=amd64 ;;
  aarch64) ARCH=arm64 ;;
  *) ARCH=$(uname -m) ;;
esac

# manifest.go: `configs[Agnhost] = Config{list.PromoterE2eRegistry, "agnhost", "2.63.0"}` -> the
# mirrored repo:tag (registry.k8s.io/<path>/<name>:<tag> is served as $REGISTRY/<path>/<name>:<tag>)
ref_of() {
  local id=$1 line reg name tag path
  line=$(grep -E "^[[:space:]]*configs\[$id\] = Config\{" "$MANIFEST") || die "manifest.go names no image $id"
  reg=$(sed -E 's/.*Config\{list\.([A-Za-z0-9]+),.*/\1/' <<<"$line")
  name=$(sed -E 's/.*Config\{[^,]+, "([^"]+)", "([^"]+)"\}.*/\1/' <<<"$line")
  tag=$(sed -E 's/.*Config\{[^,]+, "([^"]+)", "([^"]+)"\}.*/\2/' <<<"$line")
  case "$reg" in
    PromoterE2eRegistry) path=e2e-test-images/ ;;   # registry.k8s.io/e2e-test-images
    GcRegistry | GcEtcdRegistry) path= ;;            # registry.k8s.io
    *) die "image $id lives in $reg, which this script does not mirror" ;;
  esac
  echo "$path$name:$tag"
}

# name-in-layout -> the manifest.go image IDs pushed from it
declare -A IDS=(
  [busybox]="BusyBox"
  [agnhost]="Agnhost AgnhostPrev"
  [kitten]="Kitten"
  [nautilus]="Nautilus"
  [glibc-dns-testing]="GlibcDnsTesting"
  [nonewprivs]="Nonewprivs"
  [nonroot]="NonRoot"
  [nginx]="Nginx NginxNew"
  [pause]="Pause"
  [etcd]="Etcd"
)
[ -x "$SAMPLE_APISERVER" ] && IDS[sample-apiserver]="APIServer"
declare -A PUSH=()
for n in "${!IDS[@]}"; do
  refs=
  for id in ${IDS[$n]}; do refs+="$(ref_of "$id") "; done
  PUSH[$n]=$refs
done

inputs_hash() {
  { sha256sum "$HERE/build-e2e-images.sh" "$HERE/lib.sh" "$HERE/pause.c" "$HERE/sh.c" "$BUSYBOX_BIN" "$BASH_STATIC" "$NGINX_BIN" \
      /usr/bin/curl /usr/bin/getent /usr/bin/nc.openbsd /usr/bin/bash "${DNSUTILS[@]}" "$BIN/agnhost" "$BIN/nonewprivs" \
      "$BIN/etcd" "$IMAGES_SRC"/agnhost/porter/localhost.* "$IMAGES_SRC"/kitten/html/* \
      "$IMAGES_SRC"/nautilus/html/* /etc/nginx/mime.types | awk '{print $1}'
    [ -x "$SAMPLE_APISERVER" ] && sha256sum "$SAMPLE_APISERVER" | awk '{print $1}'
    echo "$ARCH ${PUSH[*]}"; } | sha256sum | awk '{print $1}'
}
HASH=$(inputs_hash)

# copy_with_libs ROOTFS FILE...: each file at the same path under ROOTFS, with every shared library
# ldd resolves for it and the dynamic loader
copy_with_libs() {
  local R=$1; shift
  local f lib
  for f in "$@"; do
    mkdir -p "$R$(dirname "$f")"
    cp -L "$f" "$R$f"
    for lib in $(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
      [ -e "$R$lib" ] && continue
      mkdir -p "$R$(dirname "$lib")"
      cp -L "$lib" "$R$lib"
    done
  done
}

PATHENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# new_image NAME: an empty image in the layout, unpacked at $tmp/bundle-NAME (rootfs emptied)
new_image() {
  umoci new --image "$tmp/oci:$1"
  umoci unpack --image "$tmp/oci:$1" "$tmp/bundle-$1" >/dev/null
  rm -rf "$tmp/bundle-$1/rootfs"
}
# from_rootfs NAME BASE: new_image with a copy of the rootfs $tmp/rootfs-BASE
from_rootfs() {
  new_image "$1"
  cp -a "$tmp/rootfs-$2" "$tmp/bundle-$1/rootfs"
}
# finish NAME umoci-config-args...: repack and set the config
finish() {
  local n=$1; shift
  umoci repack --image "$tmp/oci:$n" "$tmp/bundle-$n"
  umoci config --image "$tmp/oci:$n" --config.env "$PATHENV" --config.workingdir / \
    --architecture "$ARCH" --os linux "$@"
}

build_layout() {
  log "building images (inputs changed or no layout yet)"
  tmp="$WORK/e2e-build.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  trap 'rm -rf "'"$tmp"'"' EXIT
  umoci init --layout "$tmp/oci"

  # the plain busybox rootfs (as hack/images/build-images.sh makes it)
  local R="$tmp/rootfs-plain" a
  mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,tmp,proc,sys,dev,root,var,home,run}
  chmod 1777 "$R/tmp"; chmod 700 "$R/root"
  cp "$BUSYBOX_BIN" "$R/bin/busybox"
  for a in $("$BUSYBOX_BIN" --list); do
    [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$R/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnogroup:x:65534:\n' > "$R/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$R/etc/nsswitch.conf"

  # busybox with bash, and sh.c as /bin/sh (see the header)
  cp -a "$R" "$tmp/rootfs-bash"
  cp "$BASH_STATIC" "$tmp/rootfs-bash/bin/bash"
  rm -f "$tmp/rootfs-bash/bin/sh"
  gcc -Os -static -Wall -Werror -o "$tmp/rootfs-bash/bin/sh" "$HERE/sh.c"
  strip "$tmp/rootfs-bash/bin/sh"
  from_rootfs busybox bash
  finish busybox --config.cmd /bin/sh

  # agnhost
  from_rootfs agnhost plain
  R="$tmp/bundle-agnhost/rootfs"
  cp "$BIN/agnhost" "$R/agnhost"
  ln -sf agnhost "$R/agnhost-2"
  mkdir -p "$R/uploads"
  cp "$IMAGES_SRC/agnhost/porter/localhost.crt" "$IMAGES_SRC/agnhost/porter/localhost.key" "$R/"
  copy_with_libs "$R" /usr/bin/curl /usr/bin/getent /usr/bin/bash
  copy_with_libs "$R" /usr/bin/nc.openbsd
  mv "$R/usr/bin/nc.openbsd" "$R/usr/bin/nc"
  copy_with_libs "$R" /usr/bin/dig
  rm -f "$R/bin/bash"; ln -sf /usr/bin/bash "$R/bin/bash"
  # /bin/sh is bash: Debian's busybox ash (FEATURE_SH_STANDALONE) runs its own applet for any name
  # it has, before the PATH, so `sh -c 'nc -v ...'` got busybox's nc (no -v) instead of
  # netcat-openbsd; upstream's agnhost (Alpine) has an ash that searches the PATH
  rm -f "$R/bin/sh"; ln -sf /usr/bin/bash "$R/bin/sh"
  echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >> "$R/etc/passwd"
  printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >> "$R/etc/group"
  mkdir -p "$R/home/user-defined-in-image"; chown 1000:1000 "$R/home/user-defined-in-image"
  cp -a "$R" "$tmp/rootfs-agnhost"
  finish agnhost --config.entrypoint /agnhost --config.cmd pause

  # kitten, nautilus: agnhost plus their html files, and the /etc/os-release of upstream's base
  # (alpine:3.21, test/images/agnhost/BASEIMAGE): the ImageVolume conformance test mounts kitten as
  # an image volume and reads <mount>/etc/os-release for "Alpine Linux". The stand-in is not Alpine
  # otherwise; the file only makes the image's layout match the one the test checks.
  local n
  for n in kitten nautilus; do
    from_rootfs "$n" agnhost
    cp "$IMAGES_SRC/$n"/html/* "$tmp/bundle-$n/rootfs/"
    printf '%s\n' 'NAME="Alpine Linux"' 'ID=alpine' 'VERSION_ID=3.21.0' \
      'PRETTY_NAME="Alpine Linux v3.21"' >"$tmp/bundle-$n/rootfs/etc/os-release"
    finish "$n" --config.entrypoint /agnhost --config.cmd test-webserver
  done

  # glibc-dns-testing: busybox's shell and seq, Debian's dnsutils and getent
  from_rootfs glibc-dns-testing plain
  copy_with_libs "$tmp/bundle-glibc-dns-testing/rootfs" "${DNSUTILS[@]}" /usr/bin/getent
  finish glibc-dns-testing --config.cmd /bin/sh

  # nonewprivs
  from_rootfs nonewprivs plain
  cp "$BIN/nonewprivs" "$tmp/bundle-nonewprivs/rootfs/usr/local/bin/nnp"
  chown 0:0 "$tmp/bundle-nonewprivs/rootfs/usr/local/bin/nnp"
  chmod 4755 "$tmp/bundle-nonewprivs/rootfs/usr/local/bin/nnp"
  finish nonewprivs --config.cmd nnp

  # nonroot
  from_rootfs nonroot plain
  finish nonroot --config.cmd /bin/sh --config.user 1234

  # nginx
  from_rootfs nginx plain
  R="$tmp/bundle-nginx/rootfs"
  copy_with_libs "$R" "$NGINX_BIN"
  mkdir -p "$R/etc/nginx" "$R/var/lib/nginx"/{body,proxy,fastcgi,uwsgi,scgi} "$R/var/log/nginx" \
    "$R/usr/share/nginx/html" "$R/run"
  cp /etc/nginx/mime.types "$R/etc/nginx/mime.types"
  ln -sf /dev/stdout "$R/var/log/nginx/access.log"
  ln -sf /dev/stderr "$R/var/log/nginx/error.log"
  cat > "$R/etc/nginx/nginx.conf" <<'EOF'
user nobody nogroup;
worker_processes 1;
daemon off;
error_log /dev/stderr notice;
pid /run/nginx.pid;
events { worker_connections 1024; }
http {
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log /dev/stdout;
  sendfile on;
  keepalive_timeout 65;
  server {
    listen 80;
    server_name localhost;
    location / { root /usr/share/nginx/html; index index.html index.htm; }
  }
}
EOF
  cat > "$R/usr/share/nginx/html/index.html" <<'EOF'
<!DOCTYPE html>
<html><head><title>Welcome to nginx!</title></head>
<body><h1>Welcome to nginx!</h1></body></html>
EOF
  finish nginx --config.entrypoint /usr/sbin/nginx --config.exposedports 80/tcp --config.stopsignal SIGQUIT

  # pause
  new_image pause
  mkdir -p "$tmp/bundle-pause/rootfs"
  gcc -Os -static -Wall -Werror -o "$tmp/bundle-pause/rootfs/pause" "$HERE/pause.c"
  strip "$tmp/bundle-pause/rootfs/pause"
  finish pause --config.entrypoint /pause --config.user 65535:65535

  # etcd
  from_rootfs etcd plain
  cp "$BIN/etcd" "$tmp/bundle-etcd/rootfs/usr/local/bin/etcd"
  finish etcd --config.cmd /usr/local/bin/etcd

  # sample-apiserver
  if [ -x "$SAMPLE_APISERVER" ]; then
    from_rootfs sample-apiserver plain
    cp "$SAMPLE_APISERVER" "$tmp/bundle-sample-apiserver/rootfs/kube-sample-apiserver"
    finish sample-apiserver --config.entrypoint /kube-sample-apiserver
  fi

  umoci gc --layout "$tmp/oci"
  rm -rf "$LAYOUT"
  mv "$tmp/oci" "$LAYOUT"
  echo "$HASH" > "$WORK/.e2e-inputs-hash"
  rm -rf "$tmp"; trap - EXIT
}

layout_digest() { oci_layout_digest "$LAYOUT" "$1"; }
registry_digest() { oci_registry_digest "$REGISTRY" "$1"; }

mkdir -p "$WORK"
curl -sf --max-time 5 "http://$REGISTRY/v2/" >/dev/null || die "registry http://$REGISTRY/v2/ does not answer (hack/local-up.sh up)"

if [ "$FORCE" = 1 ] || [ ! -f "$LAYOUT/index.json" ] || [ "$(cat "$WORK/.e2e-inputs-hash" 2>/dev/null)" != "$HASH" ]; then
  build_layout
fi

pushed=0
for name in "${!PUSH[@]}"; do
  want=$(layout_digest "$name")
  [ -n "$want" ] || die "layout $LAYOUT has no image $name"
  for ref in ${PUSH[$name]}; do
    have=$(registry_digest "$ref")
    if [ "$FORCE" = 0 ] && [ "$have" = "$want" ]; then continue; fi
    log "pushing $name -> $REGISTRY/$ref"
    skopeo copy --quiet --dest-tls-verify=false "oci:$LAYOUT:$name" "docker://$REGISTRY/$ref"
    have=$(registry_digest "$ref")
    [ "$have" = "$want" ] || die "after pushing $REGISTRY/$ref the registry serves '$have', expected $want"
    pushed=$((pushed + 1))
  done
done
[ -x "$SAMPLE_APISERVER" ] || log "note: no $SAMPLE_APISERVER (hack/build-k8s.sh sample-apiserver): the aggregator test will not find its image"
log "registry $REGISTRY has every conformance image ($pushed tag(s) pushed now)"
