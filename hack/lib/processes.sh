# shellcheck shell=bash
# hack/lib/processes.sh: the daemons of hack/local-up.sh as processes: pid files and start times
# (pid_of, proc_alive), which checkout owns the machine's cluster (check_owner), starting and
# stopping (start_daemon, stop_daemon, ensure_daemon: start unless running healthy with the same
# argv), waiting for health (wait_for) and TCP ports (port_owner, ensure_port_free).
# Sourced by hack/local-up.sh (never run on its own), after hack/lib/common.sh.

# ---------------------------------------------------------------------------------------------
# process management. pids/NAME.pid holds the pid, pids/NAME.start the process's start time (field
# 22 of /proc/PID/stat, so a reused pid is never mistaken for ours) and pids/NAME.cmd the argv it
# was started with (NUL-separated), so a changed command line is detected and restarted.
# ---------------------------------------------------------------------------------------------
proc_starttime() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

proc_alive() {
  local st
  [ -r "/proc/$1/stat" ] || return 1
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# pid of a running component we started, or nothing
pid_of() {
  local name=$1 pid
  [ -f "$PIDS/$name.pid" ] || return 0
  pid=$(cat "$PIDS/$name.pid" 2>/dev/null || true)
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  proc_alive "$pid" || return 0
  [ "$(proc_starttime "$pid")" = "$(cat "$PIDS/$name.start" 2>/dev/null)" ] || return 0
  echo "$pid"
}

# The checkout that runs the machine's one local cluster, if its cluster is alive: the owner file
# names it, and at least one of the daemons in its pids/ directory still runs (same pid, same start
# time). A session's processes end without `down` (the machine outlives them: /run is kept, the
# daemons are gone), so a stale owner file must not block the next checkout, e.g. CI's fresh clone.
live_foreign_owner() {
  local owner pidf pid
  owner=$(cat "$OWNER_FILE" 2>/dev/null || true)
  [ -n "$owner" ] && [ "$owner" != "$ROOT" ] && [ -d "$owner" ] || return 0
  for pidf in "$owner"/_output/local-up/pids/*.pid; do
    [ -f "$pidf" ] || continue
    pid=$(cat "$pidf" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] && proc_alive "$pid" || continue
    [ "$(proc_starttime "$pid")" = "$(cat "${pidf%.pid}.start" 2>/dev/null)" ] || continue
    echo "$owner"; return 0
  done
}

# up/down from another checkout: refuse while that checkout's cluster runs (LOCAL_UP_TAKE_OVER=1
# stops it with its own `down` first); a stale owner file (its daemons are gone) is taken over.
check_owner() {
  local owner stale
  owner=$(live_foreign_owner)
  if [ -n "$owner" ]; then
    if [ "${LOCAL_UP_TAKE_OVER:-0}" = 1 ]; then
      log "the local cluster is run from $owner: stopping it with its own down (LOCAL_UP_TAKE_OVER=1)"
      "$owner/hack/local-up.sh" down || die "$owner/hack/local-up.sh down failed"
    else
      die "the local cluster is run from $owner: run $owner/hack/local-up.sh down first (or set LOCAL_UP_TAKE_OVER=1)"
    fi
  fi
  stale=$(cat "$OWNER_FILE" 2>/dev/null || true)
  if [ -n "$stale" ] && [ "$stale" != "$ROOT" ]; then
    log "taking over from $stale: its local cluster no longer runs (stale $OWNER_FILE)"
    rm -f "$OWNER_FILE"
  fi
}

# is it running, started with exactly this argv?
running_as() {
  local name=$1; shift
  [ -n "$(pid_of "$name")" ] || return 1
  cmp -s "$PIDS/$name.cmd" <(printf '%s\0' "$@")
}

# start_daemon NAME [VAR=value ...] -- argv...   (detached: setsid, stdin /dev/null, log to logs/NAME.log)
start_daemon() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$LOGS" "$PIDS"
  [ -f "$LOGS/$name.log" ] && mv -f "$LOGS/$name.log" "$LOGS/$name.log.1"
  printf '%s\0' "$@" > "$PIDS/$name.cmd"
  (
    cd "$STATE"
    exec 8>&-   # the harness lock (see take_lock) must not live on in the daemon
    # nor may any other descriptor of the caller, e.g. the machine-wide cluster lock
    # (/tmp/deckhand-cluster.lock, conventionally fd 9): a daemon would hold it for its lifetime
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      { [ "$fd" -gt 2 ] && eval "exec $fd>&-"; } 2>/dev/null || true
    done
    exec env ${envs[@]+"${envs[@]}"} setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  ) &
  local pid=$!
  echo "$pid" > "$PIDS/$name.pid"
  proc_starttime "$pid" > "$PIDS/$name.start" || true
}

# stop_daemon NAME [TIMEOUT_SECONDS]: SIGTERM, wait, SIGKILL
stop_daemon() {
  local name=$1 timeout=${2:-} pid i
  # kube-apiserver can linger for a minute closing watch connections after it stopped listening
  [ -n "$timeout" ] || case $name in kube-apiserver) timeout=10 ;; *) timeout=20 ;; esac
  pid=$(pid_of "$name")
  if [ -n "$pid" ]; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 $((timeout * 10))); do
      proc_alive "$pid" || break
      sleep 0.1
    done
    if proc_alive "$pid"; then
      log "$name did not exit within ${timeout}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for i in $(seq 1 50); do proc_alive "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$PIDS/$name.pid" "$PIDS/$name.start" "$PIDS/$name.cmd"
}

# wait_for NAME TIMEOUT CHECK_FUNCTION: poll until healthy; die with the log tail otherwise
wait_for() {
  local name=$1 timeout=$2 check=$3 i pid
  for i in $(seq 1 $((timeout * 5))); do
    if "$check"; then return 0; fi
    pid=$(pid_of "$name")
    [ -n "$pid" ] && proc_alive "$pid" || die_log "$name" "$name exited during startup"
    sleep 0.2
  done
  die_log "$name" "$name did not become healthy within ${timeout}s"
}

# who listens on a TCP port (for clear errors)
port_owner() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:(\(.*\))$/\1/p' | head -1; }

ensure_port_free() {
  local name=$1 port=$2 owner
  owner=$(port_owner "$port")
  [ -z "$owner" ] || die "port $port (for $name) is already in use by: $owner; stop that process first"
}

# ensure_daemon NAME PORT HEALTHCHECK TIMEOUT [VAR=value ...] -- argv...
ensure_daemon() {
  local name=$1 port=$2 check=$3 timeout=$4; shift 4
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if running_as "$name" "$@"; then
    if "$check"; then log "$name: already running (pid $(pid_of "$name")), healthy"; return 0; fi
    log "$name: running (pid $(pid_of "$name")) but not healthy yet; waiting"
    local i
    for i in $(seq 1 $((timeout * 5))); do "$check" && break; sleep 0.2; done
    if "$check"; then log "$name: healthy"; return 0; fi
    warn "$name is running but unhealthy; restarting it"
    stop_daemon "$name"
  elif [ -n "$(pid_of "$name")" ]; then
    log "$name: configuration changed; restarting"
    stop_daemon "$name"
  fi
  [ -z "$port" ] || ensure_port_free "$name" "$port"
  log "$name: starting (log $LOGS/$name.log)"
  start_daemon "$name" ${envs[@]+"${envs[@]}"} -- "$@"
  wait_for "$name" "$timeout" "$check"
  log "$name: healthy (pid $(pid_of "$name"))"
}
