# shellcheck shell=bash
# hack/lib/release.sh: the release build, the binaries you ship (release_build, release_dir).
# Sourced by hack/build-release.sh, hack/local-up.sh (hack/lib/node.sh) and hack/bench.sh, after
# $ROOT is set.
#
# Cargo's release profile (built for size: opt-level "z", fat LTO), linked statically against
# glibc (`-C target-feature=+crt-static`) and not position-independent (`-C
# relocation-model=static`): a static executable at a fixed address, as the Go kubelet's release
# binaries are (Go's default build mode on linux/amd64; `readelf -h` on the one hack/build-k8s.sh
# builds says EXEC). Static: the binary runs on any glibc, and it maps no libc.so, libm.so, ld.so or
# NSS module, which an idle deckhand kept resident (2.4 MiB of its 14.6 MiB RSS, README
# "Benchmarks"). Not a PIE: a static PIE relocates itself at start, which writes every page of its
# 0.44 MB of vtables and other pointer tables (.data.rel.ro) into private anonymous memory and
# reads 0.6 MB of relocation records; without it those tables stay read-only file pages, shared
# and reclaimable (idle RSS 12.4 -> 11.6 MiB, anonymous 3.0 -> 2.5, README "Benchmarks"). The
# cost is the executable's own address: heap, stacks and mappings are still randomized, its code
# is not. Leave out `relocation-model=static` to build a static PIE instead. Name lookups still
# work statically: glibc's files and dns sources are built in (hosts: getaddrinfo), and the one
# user lookup (the `kubelet` user for user namespaces) reads /etc/passwd as the Go kubelet does.
# crt-static needs an explicit --target (so proc-macros and build scripts, built for the host,
# stay dynamic and position-independent), hence the target/<host triple>/release directory.

release_triple() { rustc -vV | sed -n 's/^host: //p'; }

# The directory the release binaries are in.
release_dir() { echo "${CARGO_TARGET_DIR:-$ROOT/target}/$(release_triple)/release"; }

# release_build [cargo build arguments...], e.g. release_build --bin deckhand
release_build() {
  local triple
  triple=$(release_triple)
  [ -n "$triple" ] || { echo "release_build: rustc -vV gave no host triple" >&2; return 1; }
  (cd "$ROOT" && cargo build --release --target "$triple" \
    --config "target.$triple.rustflags=[\"-C\", \"target-feature=+crt-static\", \"-C\", \"relocation-model=static\"]" "$@")
}
