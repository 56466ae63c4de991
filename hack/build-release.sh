#!/usr/bin/env bash
# The binaries you ship: deckhand and deckhand-scheduler, cargo's release profile, linked
# statically (hack/lib/release.sh says why and how). Prints the directory they are in.
#
#   hack/build-release.sh [cargo build arguments]   default: --bins
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/release.sh
. "$ROOT/hack/lib/release.sh"
[ $# -gt 0 ] || set -- --bins
release_build "$@" >&2
release_dir
