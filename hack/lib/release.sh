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

# The linker's symbol ordering file for the release build (lld's --symbol-ordering-file), which
# build.rs hands to deckhand's link: hack/release/deckhand.symbol-order.gz (hack/symbol-order.sh
# writes it) or $RELEASE_SYMBOL_ORDER (a list, gzipped or not), unpacked under a name that carries
# a hash of the list (cargo relinks when the path changes); none when that is "none" or there is
# no list. Why (README "Benchmarks"): the page cache holds the binary in folios of up to 2 MiB and
# this kernel maps a folio whole on a fault, so an idle deckhand's RSS follows how many 2 MiB
# ranges of the file its code touches; the list lays the functions an idle deckhand runs out in as
# few of them as it can. A function the list lacks (new code) goes to the end of the text; names
# the list has and the binary lacks are skipped (--no-warn-symbol-ordering). The names carry
# hashes of each crate's metadata, which RUSTFLAGS and the profile go into: the list is made from
# a build with the same flags and profile (hack/symbol-order.sh), and build.rs, not RUSTFLAGS,
# passes it on.
release_symbol_order() {
  local list=${RELEASE_SYMBOL_ORDER:-$ROOT/hack/release/deckhand.symbol-order.gz} dir sum
  [ "$list" != none ] && [ -s "$list" ] || return 0
  dir="${CARGO_TARGET_DIR:-$ROOT/target}"
  sum=$(sha256sum "$list" | cut -c1-16)
  mkdir -p "$dir"
  if [ ! -f "$dir/symbol-order-$sum" ]; then
    case $list in
      *.gz) gzip -dc "$list" > "$dir/symbol-order-$sum.tmp" ;;
      *) cp "$list" "$dir/symbol-order-$sum.tmp" ;;
    esac
    mv "$dir/symbol-order-$sum.tmp" "$dir/symbol-order-$sum"
  fi
  echo "$(cd "$dir" && pwd)/symbol-order-$sum"
}

# release_build [cargo build arguments...], e.g. release_build --bin deckhand. With
# $RELEASE_LINK_MAP the linker writes its map of deckhand there (hack/symbol-order.sh).
release_build() {
  local triple order
  triple=$(release_triple)
  [ -n "$triple" ] || { echo "release_build: rustc -vV gave no host triple" >&2; return 1; }
  order=$(release_symbol_order)
  (cd "$ROOT" && DECKHAND_LINK_ORDER="$order" DECKHAND_LINK_MAP="${RELEASE_LINK_MAP:-}" \
    cargo build --release --target "$triple" \
    --config "target.$triple.rustflags=[\"-C\", \"target-feature=+crt-static\", \"-C\", \"relocation-model=static\"]" "$@")
}
