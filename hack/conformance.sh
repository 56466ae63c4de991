#!/usr/bin/env bash
# Runs the upstream Kubernetes conformance suite (k8s.io/kubernetes test/e2e at the version pinned in
# hack/versions.env) against the local cluster (hack/local-up.sh) with deckhand as its node, or the
# same selection with the Go kubelet of the same version as the node on the same containerd, so that
# every failure can be classified: deckhand's (passes with the Go kubelet) or the harness's (fails
# with both).
#
# Usage:
#   hack/conformance.sh [--kubelet deckhand|go] [--containerd 1.6|2] [--focus REGEX] [--skip REGEX]
#                       [--procs N] [--serial]
#   hack/conformance.sh --sig-node [...]      shortcut for --focus '\[sig-node\].*\[Conformance\]'
#   hack/conformance.sh --compare             both columns (deckhand vs go) from the two last summaries
#   hack/conformance.sh [--kubelet K] --summarize   rewrite summary.txt and results.tsv from the last
#                                             run's reports
#
#   --kubelet K   deckhand (default) or go: the Go kubelet (hack/build-k8s.sh kubelet) replaces
#                 deckhand as node $NODE_NAME for the run; deckhand and the machine (sysctls, iptables
#                 chains, the CSINode object, its root dir) are put back afterwards, also on failure
#                 or Ctrl-C
#   --containerd V  the runtime of the run: 1.6 (Debian's) or 2 (containerd 2.x built by
#                 hack/build-containerd.sh); default: $CONTAINERD, else the one the cluster runs, else
#                 1.6. A cluster that is down is brought up on it (CONTAINERD=V hack/local-up.sh up);
#                 one that runs the other containerd is refused (hack/local-up.sh down first). Results
#                 of a containerd 2 run go to _output/conformance/<kubelet>-containerd2/, and
#                 --compare with --containerd 2 compares those.
#   --focus R     ginkgo focus (default '\[Conformance\]')
#   --skip R      skipped in addition to the default skip below
#   --procs N     parallel ginkgo processes for the parallel phase (default 3)
#   --serial      run every selected test one at a time in one process (no parallel phase)
#   --timeout D   ginkgo's suite timeout per phase (default 24h): a time budget; the spec running
#                 when it expires counts as failed (timedout), the ones not reached as not-run
#   --known-failures FILE   exit 1 unless every failed test matches a line of FILE (extended
#                 regular expressions, # comments; hack/conformance-known-failures.txt lists the
#                 harness's; a line that starts with `containerd=1.6 ` or `containerd=2 ` applies
#                 to runs on that containerd only) and every selected test ran: what README command
#                 2 checks. A failure
#                 not on the list gets a second attempt (one at a time); if it passes then, it is
#                 reported as flaky and does not fail the run (--no-retry: no second attempt)
#
# Ctrl-C interrupts the running phase (ginkgo cleans up its namespaces), skips the rest and still
# writes the summary of what ran.
# Phases: the selected tests that are not [Serial] run with `ginkgo -p --procs N`, then the [Serial]
# ones in one process. Results land in _output/conformance/<kubelet>/: junit-parallel.xml,
# junit-serial.xml and report-*.json (ginkgo's reports), ginkgo-*.log (the run's output),
# results.tsv (state, test name, first line of the failure message; one line per test that ran),
# summary.txt (selected / passed / failed / skipped, wall time, each failure with the first line of
# its message). For --kubelet go also go-kubelet/ (its config and log).
#
# Everything stays on this machine: --provider=local, every image from the local registry (the
# mirror, hack/lib/registry.sh; the images are built here by hack/images/build-e2e-images.sh),
# invalidRegistry remapped to a path of the local registry that holds nothing (KUBE_TEST_REPO_LIST),
# and the default skip leaves out the tests that need outside names or the internet.
#
# Needs: the cluster up (brought up here when it is not: hack/local-up.sh up, with DECKHAND_BIN and
# SCHEDULER_BIN passed through). Builds (cached in /var/cache/deckhand/k8s/<version>/): e2e.test,
# ginkgo, agnhost, nonewprivs, sample-apiserver, and kubelet for --kubelet go.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$ROOT/hack/versions.env"
export PATH=/usr/local/go/bin:$PATH
BIN="$ROOT/_output/bin"
OUT_BASE="$ROOT/_output/conformance"
ENV_FILE="$ROOT/_output/local-up/env"

# Left out by default (each pattern with its reason):
DEFAULT_SKIP=(
  # [Disruptive] tests restart or break cluster components through a provider (ssh, cloud) that
  # --provider=local does not have
  '\[Disruptive\]'
  # "should provide Internet connection for containers" and the like reach addresses outside this
  # machine, which the harness's guard chains reject by design
  'Internet'
  # ExternalName Services resolve outside names (foo.example.com, ...) through DNS: the harness's
  # CoreDNS forwards nothing off the machine (hack/manifests/coredns.yaml), so they get NXDOMAIN
  'ExternalName'
)

KUBELET=deckhand
FOCUS='\[Conformance\]'
EXTRA_SKIP=
PROCS=3
SERIAL_ONLY=0
COMPARE=0
TIMEOUT=24h
SUMMARIZE=0
KNOWN_FAILURES=
RETRY=1
RUNTIME=${CONTAINERD:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --kubelet) KUBELET=$2; shift 2 ;;
    --kubelet=*) KUBELET=${1#*=}; shift ;;
    --containerd) RUNTIME=$2; shift 2 ;;
    --containerd=*) RUNTIME=${1#*=}; shift ;;
    --focus) FOCUS=$2; shift 2 ;;
    --focus=*) FOCUS=${1#*=}; shift ;;
    --skip) EXTRA_SKIP=$2; shift 2 ;;
    --skip=*) EXTRA_SKIP=${1#*=}; shift ;;
    --procs) PROCS=$2; shift 2 ;;
    --procs=*) PROCS=${1#*=}; shift ;;
    --serial) SERIAL_ONLY=1; shift ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --timeout=*) TIMEOUT=${1#*=}; shift ;;
    --known-failures) KNOWN_FAILURES=$2; shift 2 ;;
    --known-failures=*) KNOWN_FAILURES=${1#*=}; shift ;;
    --no-retry) RETRY=0; shift ;;
    --sig-node) FOCUS='\[sig-node\].*\[Conformance\]'; shift ;;
    --compare) COMPARE=1; shift ;;
    --summarize) SUMMARIZE=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "conformance: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
case "$KUBELET" in deckhand | go) ;; *) echo "conformance: --kubelet deckhand|go" >&2; exit 2 ;; esac
# the containerd of the run (1.6 or 2): asked for, or the one the cluster runs (or ran last)
MODE_FILE="$ROOT/_output/local-up/containerd-mode"
case "${RUNTIME:-$(cat "$MODE_FILE" 2>/dev/null || echo 1.6)}" in
  1 | 1.6 | 1.6.*) RUNTIME=1.6; SUFFIX= ;;
  2 | 2.*) RUNTIME=2; SUFFIX=-containerd2 ;;
  *) echo "conformance: --containerd 1.6|2 (got ${RUNTIME})" >&2; exit 2 ;;
esac

log() { echo "conformance [$(date -u +%H:%M:%S)]: $*"; }
die() { echo "conformance: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------
# --compare: two columns from the last deckhand and go results
# ---------------------------------------------------------------------------------------------
if [ "$COMPARE" = 1 ]; then
  D="$OUT_BASE/deckhand$SUFFIX/results.tsv" G="$OUT_BASE/go$SUFFIX/results.tsv"
  [ -f "$D" ] || die "no $D (run hack/conformance.sh --containerd $RUNTIME first)"
  [ -f "$G" ] || die "no $G (run hack/conformance.sh --kubelet go --containerd $RUNTIME first)"
  for k in deckhand go; do
    echo "$k: $(sed -n 's/^focus: //p' "$OUT_BASE/$k$SUFFIX/summary.txt") | $(grep -m1 '^selected' "$OUT_BASE/$k$SUFFIX/summary.txt")"
  done
  echo
  # state<TAB>name<TAB>message, joined on the name
  awk -F'\t' '
    FNR == 1 { f++ }
    f == 1 { d[$2] = $1; dm[$2] = $3; names[$2] = 1 }
    f == 2 { g[$2] = $1; gm[$2] = $3; names[$2] = 1 }
    END {
      printf "%-9s %-9s %s\n", "deckhand", "go", "test"
      n = 0
      for (t in names) order[++n] = t
      # sort by name (insertion sort; a few hundred lines)
      for (i = 2; i <= n; i++) { v = order[i]; j = i - 1; while (j > 0 && order[j] > v) { order[j+1] = order[j]; j-- } order[j+1] = v }
      for (i = 1; i <= n; i++) {
        t = order[i]; a = (t in d) ? d[t] : "-"; b = (t in g) ? g[t] : "-"
        printf "%-9s %-9s %s\n", a, b, t
        if (a == "failed" && b == "passed") dk[++ndk] = t
        else if (a == "failed" && b == "failed") both[++nb] = t
        else if (a == "passed" && b == "failed") gk[++ngk] = t
        else if (a != b) other[++no] = t
      }
      printf "\nFail with deckhand, pass with the Go kubelet (deckhand'"'"'s): %d\n", ndk
      for (i = 1; i <= ndk; i++) printf "  %s\n      %s\n", dk[i], dm[dk[i]]
      printf "\nFail with both (the harness'"'"'s, or both kubelets'"'"'): %d\n", nb
      for (i = 1; i <= nb; i++) printf "  %s\n      deckhand: %s\n      go:       %s\n", both[i], dm[both[i]], gm[both[i]]
      printf "\nPass with deckhand, fail with the Go kubelet: %d\n", ngk
      for (i = 1; i <= ngk; i++) printf "  %s\n      go: %s\n", gk[i], gm[gk[i]]
      if (no) { printf "\nOther differences (skipped, or run in one column only): %d\n", no
        for (i = 1; i <= no; i++) printf "  %s\n", other[i] }
    }' "$D" "$G"
  exit 0
fi

for t in jq curl iptables sysctl findmnt mount umount setsid; do
  command -v "$t" >/dev/null || die "$t not found (run hack/install-deps.sh)"
done
SKIP=$(IFS='|'; echo "${DEFAULT_SKIP[*]}")
[ -z "$EXTRA_SKIP" ] || SKIP="$SKIP|$EXTRA_SKIP"
OUT="$OUT_BASE/$KUBELET$SUFFIX"
mkdir -p "$OUT"

# ---------------------------------------------------------------------------------------------
# results and summary (from ginkgo's JSON reports)
# ---------------------------------------------------------------------------------------------
summarize() {
  local f
  for f in "$OUT"/report-*.json; do
    [ -s "$f" ] || continue
    # every It that ran, and any suite-level node (BeforeSuite, ...) that did not pass; the message
    # is its first line, with the next ones when the first says little ("Expected", "Timed out
    # after 300s.") and the panic for "Test Panicked"
    jq -r '
      def lines: split("\n") | map(gsub("^\\s+|\\s+$"; "")) | map(select(length > 0));
      def first_line:
        ((.Failure.Message // .State) | lines) as $l
        | (if ($l | length) == 0 then ""
           elif ($l[0] | test("^(Expected|Timed out after|Told to stop trying|Test Panicked)")) or ($l[0] | length) < 30
           then $l[0:3] | join(" ") else $l[0] end)
          + (if (.Failure.ForwardedPanic // "") != "" then ": " + ((.Failure.ForwardedPanic | lines)[0] // "") else "" end)
        | gsub("\t"; " ") | .[0:300];
      .[] | .SpecReports[]? | select(.LeafNodeType == "It" or (.State != "passed" and .State != "skipped")) |
      select(.State != "skipped" or (.Failure.Message // "") != "") |
      [ (if .State == "passed" then "passed" elif .State == "skipped" or .State == "pending" then "skipped" else "failed" end),
        ([.ContainerHierarchyTexts[]?, .LeafNodeText] | join(" ") | gsub("[\t\n]"; " ")),
        (if .State == "passed" then "" else first_line end) ] | @tsv' "$f"
  done > "$OUT/results.tsv"
  local selected=0
  for f in "$OUT"/report-*.json; do
    [ -s "$f" ] || continue
    selected=$(( selected + $(jq '[.[] | .PreRunStats.SpecsThatWillRun] | add // 0' "$f") ))
  done
  local passed failed skipped notrun wall
  passed=$(awk -F'\t' '$1=="passed"' "$OUT/results.tsv" | wc -l)
  failed=$(awk -F'\t' '$1=="failed"' "$OUT/results.tsv" | wc -l)
  skipped=$(awk -F'\t' '$1=="skipped"' "$OUT/results.tsv" | wc -l)
  notrun=$(( selected - passed - failed - skipped ))
  wall=$(awk '{s += $2} END {print s + 0}' "$OUT/phases.txt" 2>/dev/null || echo 0)
  {
    echo "kubelet: $KUBELET ($(cat "$OUT/kubelet-version.txt" 2>/dev/null))"
    echo "runtime: $(cat "$OUT/runtime-version.txt" 2>/dev/null || echo "containerd $RUNTIME")"
    echo "suite: k8s.io/kubernetes $KUBE_VERSION test/e2e ($(date -u -r "$OUT/results.tsv" +%Y-%m-%dT%H:%MZ))"
    echo "focus: $(cat "$OUT/focus.txt" 2>/dev/null)"
    echo "skip: $(cat "$OUT/skip.txt" 2>/dev/null)"
    echo "selected $selected passed $passed failed $failed skipped $skipped$([ "$notrun" -le 0 ] || echo " not-run $notrun")"
    echo "wall time: ${wall}s ($(awk '{printf "%s%s %ss (%s procs, ginkgo exit %s)", (NR>1?", ":""), $1, $2, $4, $3}' "$OUT/phases.txt" 2>/dev/null))"
    echo "failures:"
    awk -F'\t' '$1=="failed" {printf "  %s\n      %s\n", $2, $3}' "$OUT/results.tsv"
  } > "$OUT/summary.txt"
  cat "$OUT/summary.txt"
  log "results: $OUT (summary.txt, results.tsv, junit-*.xml)"
  NOT_RUN=$notrun
}

# --known-failures: the failures that are not on the list (and the tests that did not run) fail
# the script
check_known_failures() {
  local patterns unexpected
  # the lines for every containerd (no prefix) and for this one (prefix `containerd=$RUNTIME `)
  patterns=$(grep -v '^[[:space:]]*\(#\|$\)' "$KNOWN_FAILURES" |
    sed -n "s/^containerd=$RUNTIME //p;t;/^containerd=/!p" || true)
  unexpected=$(awk -F'\t' '$1=="failed" {print $2}' "$OUT/results.tsv" |
    if [ -n "$patterns" ]; then grep -v -E -f <(printf '%s\n' "$patterns") || true; else cat; fi)
  if [ -n "$unexpected" ] && [ "$RETRY" = 1 ] && [ "$INTERRUPTED" = 0 ]; then
    # A second attempt, one at a time, for each failure that is not on the list: one that passes
    # then is reported as flaky (in summary.txt and here) and does not fail the run; one that fails
    # again does. Upstream's own CI gives failing specs a second attempt the same way.
    local focus retry_dir="$OUT/retry" again
    rm -rf "$retry_dir"; mkdir -p "$retry_dir"
    focus=$(printf '%s\n' "$unexpected" | sed 's/[][\\.*^$+?(){}|]/\\&/g' | paste -sd'|')
    log "second attempt for $(printf '%s\n' "$unexpected" | wc -l) failure(s) not on the list"
    run_phase retry "$focus" "$SKIP" 1 "$retry_dir"
    again=$(jq -r '.[] | .SpecReports[]? | select(.LeafNodeType == "It" and .State == "passed") |
        [.ContainerHierarchyTexts[]?, .LeafNodeText] | join(" ") | gsub("[\t\n]"; " ")' \
        "$retry_dir/report-retry.json" 2>/dev/null || true)
    local flaky=() still=() t
    while IFS= read -r t; do
      [ -n "$t" ] || continue
      if printf '%s\n' "$again" | grep -qxF -- "$t"; then flaky+=("$t"); else still+=("$t"); fi
    done <<< "$unexpected"
    if [ ${#flaky[@]} -gt 0 ]; then
      { echo "flaky (failed, then passed on a second attempt):"; printf '  %s\n' "${flaky[@]}"; } | tee -a "$OUT/summary.txt"
    fi
    unexpected=$(printf '%s\n' ${still[@]+"${still[@]}"})
  fi
  if [ -n "$unexpected" ]; then
    echo "conformance: FAILED: failures not on $KNOWN_FAILURES:" >&2
    printf '  %s\n' "$unexpected" >&2
    return 1
  fi
  if [ "${NOT_RUN:-0}" -gt 0 ] || [ "$INTERRUPTED" = 1 ]; then
    echo "conformance: FAILED: $NOT_RUN selected test(s) did not run" >&2
    return 1
  fi
  log "every failure is on $KNOWN_FAILURES"
}
if [ "$SUMMARIZE" = 1 ]; then summarize; exit 0; fi

# ---------------------------------------------------------------------------------------------
# build (cached) and the cluster
# ---------------------------------------------------------------------------------------------
targets=(e2e.test ginkgo agnhost nonewprivs sample-apiserver etcd kubectl)
[ "$KUBELET" = go ] && targets+=(kubelet)
"$ROOT/hack/build-k8s.sh" "${targets[@]}"

if ! "$ROOT/hack/local-up.sh" status >/dev/null 2>&1; then
  log "the local cluster is not up: CONTAINERD=$RUNTIME hack/local-up.sh up"
  CONTAINERD=$RUNTIME "$ROOT/hack/local-up.sh" up
fi
running=$(cat "$MODE_FILE" 2>/dev/null || echo 1.6)
[ "$running" = "$RUNTIME" ] ||
  die "the cluster runs containerd $running, the run asks for $RUNTIME: hack/local-up.sh down first (or --containerd $running)"

# shellcheck disable=SC1090
. "$ENV_FILE"
export KUBECONFIG
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG" "$@"; }
"$ROOT/hack/images/build-e2e-images.sh"
# containerd keeps what it pulled under a tag: forget the conformance images the registry now serves
# with another digest (rebuilt), so the tests pull the new ones
"$CRICTL" images -o json | jq -r '.images[] | .repoTags[] as $t | "\($t) \(.repoDigests | join(","))"' |
  while read -r tag digests; do
    case "$tag" in registry.k8s.io/e2e-test-images/* | registry.k8s.io/pause:3.10.2 | registry.k8s.io/etcd:3.6.8-0) ;; *) continue ;; esac
    path=${tag#registry.k8s.io/}
    want=$(curl -sfI --max-time 5 -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://$REGISTRY/v2/${path%%:*}/manifests/${path##*:}" | tr -d '\r' |
      awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}' || true)
    [ -n "$want" ] && [[ ",$digests," != *"@$want,"* ]] || continue
    log "containerd holds an older $tag: removing it"
    "$CRICTL" rmi "$tag" >/dev/null 2>&1 || true
  done

# ---------------------------------------------------------------------------------------------
# the Go kubelet in deckhand's place (--kubelet go)
# ---------------------------------------------------------------------------------------------
GO_DIR="$OUT/go-kubelet"
# go_kubelet_start / go_kubelet_restore, deckhand_pid, node_kubelet
# shellcheck source=hack/lib/go-kubelet.sh
. "$ROOT/hack/lib/go-kubelet.sh"

# Ctrl-C reaches ginkgo from the terminal, SIGTERM is passed on to it as SIGINT: it stops the running
# specs and cleans up; the phases left are skipped and the summary is still written
INTERRUPTED=0
GPID=
trap 'INTERRUPTED=1' INT
trap 'INTERRUPTED=1; [ -z "$GPID" ] || kill -INT "$GPID" 2>/dev/null || true' TERM
if [ "$KUBELET" = go ]; then
  trap 'go_kubelet_restore' EXIT
  go_kubelet_start
  KUBELET_ROOT=$GO_ROOT
else
  [ -n "$(deckhand_pid)" ] || die "deckhand is not running (hack/local-up.sh restart-deckhand)"
  KUBELET_ROOT=$DECKHAND_ROOT_DIR
fi

# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
# invalidRegistry (the "pull from an invalid registry" tests) is a path of the local registry that
# holds nothing, so the pull fails here instead of resolving an outside name
cat > "$OUT/repo-list.yaml" <<EOF
invalidRegistry: $REGISTRY/invalid-registry-for-e2e
EOF
export KUBE_TEST_REPO_LIST="$OUT/repo-list.yaml"

E2E_ARGS=(--provider=local --kubeconfig="$KUBECONFIG" --kubectl-path="$KUBECTL"
  --dns-domain=cluster.local --cluster-ip-range="$SERVICE_CIDR" --kubelet-root-dir="$KUBELET_ROOT"
  --disable-log-dump=true --allowed-not-ready-nodes=0 --report-dir="$OUT/e2e-report")

rm -rf "$OUT/e2e-report" "$OUT"/report-*.json "$OUT"/junit-*.xml "$OUT"/ginkgo-*.log "$OUT/results.tsv" "$OUT/summary.txt" "$OUT/phases.txt"
echo "$FOCUS" > "$OUT/focus.txt"; echo "$SKIP" > "$OUT/skip.txt"
mkdir -p "$OUT/e2e-report"

# phase NAME FOCUS SKIP PROCS [OUTPUT_DIR]
run_phase() {
  local name=$1 focus=$2 skip=$3 procs=$4 dir=${5:-$OUT} par=() rc=0
  [ "$INTERRUPTED" = 0 ] || { log "phase $name: skipped (interrupted)"; return 0; }
  [ "$procs" -gt 1 ] && par=(-p "--procs=$procs")
  log "phase $name: focus '$focus', skip '$skip', $procs process(es); log $dir/ginkgo-$name.log"
  local t0; t0=$(date +%s)
  "$BIN/ginkgo" run ${par[@]+"${par[@]}"} --timeout="$TIMEOUT" --no-color --silence-skips \
    --focus="$focus" --skip="$skip" --output-dir="$dir" \
    --junit-report="junit-$name.xml" --json-report="report-$name.json" \
    "$BIN/e2e.test" -- "${E2E_ARGS[@]}" >"$dir/ginkgo-$name.log" 2>&1 &
  GPID=$!
  # wait returns early when a trapped signal arrives: wait again until ginkgo has exited
  while :; do
    if wait "$GPID"; then rc=0; else rc=$?; fi
    [ -d "/proc/$GPID" ] || break
  done
  GPID=
  echo "$name $(( $(date +%s) - t0 )) $rc $procs" >> "$dir/phases.txt"
  log "phase $name: done in $(( $(date +%s) - t0 ))s (ginkgo exit $rc)"
}

echo "node $NODE_NAME, kubeletVersion $(node_kubelet | cut -d' ' -f1)" > "$OUT/kubelet-version.txt"
kc get node "$NODE_NAME" -o jsonpath='{.status.nodeInfo.containerRuntimeVersion}' > "$OUT/runtime-version.txt" 2>/dev/null || true
if [ "$SERIAL_ONLY" = 1 ]; then
  run_phase serial "$FOCUS" "$SKIP" 1
else
  run_phase parallel "$FOCUS" "$SKIP|\[Serial\]" "$PROCS"
  # the [Serial] tests of the same selection, one at a time (RE2 has no lookahead: either order)
  run_phase serial "\[Serial\].*(?:$FOCUS)|(?:$FOCUS).*\[Serial\]" "$SKIP" 1
fi
summarize
if [ -n "$KNOWN_FAILURES" ]; then check_known_failures; fi
# a focus that selects nothing is a mistake, not a pass (e.g. one naming [Serial] itself: ginkgo
# matches the focus against the test's text, and the serial phase adds its own [Serial] to it)
if [ "$(sed -n 's/^selected \([0-9]*\).*/\1/p' "$OUT/summary.txt")" = 0 ]; then
  echo "conformance: FAILED: the focus selected no test" >&2
  exit 1
fi

