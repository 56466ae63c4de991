#!/usr/bin/env bash
# The namespaces of one extra node of hack/local-up.sh (NODES=N; see hack/lib/nodes.sh), run as a
# process of its own so that start_daemon can record its pid:
#
#   node-ns.sh holder NAME NODE_DIR ROOT_SIZE
#       The node's long-lived holder: moves itself into the node's cgroup /NAME of every
#       hierarchy, enters the network namespace /run/netns/NAME (made by the harness), unshares
#       the mount, UTS and cgroup namespaces and, inside them, sets the hostname, mounts a sysfs of
#       the node's netns, remounts every cgroup hierarchy (so the node sees /NAME as its cgroup
#       root, as a kind node does), bind-mounts the node's own directories of NODE_DIR over the
#       fixed paths containerd, CNI and deckhand write, mounts a tmpfs of ROOT_SIZE on
#       /var/lib/deckhand, writes NODE_DIR/ready and sleeps. Its mounts are private: the host
#       never sees them, and they go away with the last process of the mount namespace.
#       (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd and /usr/libexec/kubernetes are the node's
#       own too: kubeadm writes the first two, its static pods use the last two as hostPaths.)
#   node-ns.sh enter NAME HOLDER_PID -- COMMAND...
#       Runs COMMAND (exec, same pid) in the node: moved into the node's cgroups first (entering a
#       cgroup namespace does not move a process, and a process outside the namespace's root would
#       see its cgroup as /..), then all four namespaces of the holder.
#   node-ns.sh mountpoints
#       The fixed paths the holder binds the node's directories over, one a line (the holder
#       creates those missing on the host; hack/lib/nodes.sh removes them again).
#
# Why the cgroup namespace: deckhand manages /kubepods and removes pod cgroups it does not know;
# two deckhands sharing the host's /kubepods would kill each other's pods. Inside the node,
# /kubepods is the host's /NAME/kubepods.
set -euo pipefail

SELF=$(readlink -f "${BASH_SOURCE[0]}")
die() { printf '[node-ns] ERROR: %s\n' "$*" >&2; exit 1; }

# the node's own directories (under NODE_DIR) and where they are mounted inside the node
BINDS=(run-containerd:/run/containerd var-lib-containerd:/var/lib/containerd
       cni-net.d:/etc/cni/net.d var-lib-cni:/var/lib/cni run-netns:/run/netns
       log-pods:/var/log/pods log-containers:/var/log/containers
       certs.d:/etc/containerd/certs.d
       etc-kubernetes:/etc/kubernetes var-lib-kubelet:/var/lib/kubelet var-lib-etcd:/var/lib/etcd
       usr-libexec-kubernetes:/usr/libexec/kubernetes)

# move this process into /NAME of every cgroup hierarchy of the host (created if missing; a new
# cpuset cgroup needs its cpus and mems before it takes a task)
cg_join() {
  local name=$1 d
  for d in /sys/fs/cgroup/*/; do
    d=${d%/}
    [ -e "$d/cgroup.procs" ] || continue
    if [ ! -d "$d/$name" ]; then
      mkdir "$d/$name"
      if [ -e "$d/cpuset.cpus" ]; then
        cat "$d/cpuset.cpus" > "$d/$name/cpuset.cpus"
        cat "$d/cpuset.mems" > "$d/$name/cpuset.mems"
      fi
    fi
    echo $$ > "$d/$name/cgroup.procs" || die "cannot move into $d/$name"
  done
}

# detach every mount at or below DIR (deepest first): the copies of the host's mounts that a new
# mount namespace starts with (the main node's task rootfs, pod netns and volume mounts), which
# would otherwise stay alive as long as the node does
umount_below() {
  local dir=$1 mp
  while IFS= read -r mp; do
    mp=$(printf '%b' "$mp")
    case "$mp" in "$dir"|"$dir"/*) umount -l "$mp" 2>/dev/null || true ;; esac
  done < <(awk '{print $5}' /proc/self/mountinfo | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2-)
}

cmd_holder() {
  local name=$1 dir=$2 size=$3
  [ -e "/run/netns/$name" ] || die "no network namespace $name"
  cg_join "$name"
  exec nsenter --net="/run/netns/$name" -- \
    unshare --mount --uts --cgroup --propagation private -- "$SELF" holder-inside "$name" "$dir" "$size"
}

cmd_holder_inside() {
  local name=$1 dir=$2 size=$3 line dev mp type opts b src dst
  hostname "$name"
  # the host's cgroup hierarchies, read before /sys is replaced
  local hier=()
  while read -r dev mp type opts _; do
    case "$type" in cgroup|cgroup2) hier+=("$type:${mp##*/}:$opts") ;; esac
  done < /proc/self/mounts
  [ ${#hier[@]} -gt 0 ] || die "no cgroup hierarchies mounted"
  # sysfs of this network namespace (/sys/class/net shows the node's interfaces), in place of the
  # host's /sys and every mount below it (cgroup code that reads mountinfo must not find the
  # host's hierarchies underneath the node's)
  umount -R /sys 2>/dev/null || umount -l /sys
  mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
  mount -t tmpfs -o nosuid,nodev,noexec,mode=755 cgroup /sys/fs/cgroup
  for line in "${hier[@]}"; do
    type=${line%%:*}; line=${line#*:}; mp=${line%%:*}; opts=${line#*:}
    mkdir -p "/sys/fs/cgroup/$mp"
    # mounted from inside the cgroup namespace, a hierarchy's root is the node's cgroup
    mount -t "$type" -o "$opts" cgroup "/sys/fs/cgroup/$mp" || die "mounting the $mp cgroup hierarchy failed"
  done
  for b in "${BINDS[@]}"; do
    src="$dir/${b%%:*}"; dst=${b#*:}
    mkdir -p "$src" "$dst"
    umount_below "$dst"
    mount --bind "$src" "$dst"
  done
  mkdir -p /var/lib/deckhand
  umount_below /var/lib/deckhand
  mount -t tmpfs -o "size=$size,mode=0755" deckhand-root /var/lib/deckhand
  : > "$dir/ready"
  exec sleep infinity
}

cmd_enter() {
  local name=$1 holder=$2; shift 2
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "enter: no command"
  [ -r "/proc/$holder/ns/mnt" ] || die "enter: holder pid $holder of $name is gone"
  cg_join "$name"
  exec nsenter --target "$holder" --mount --uts --net --cgroup -- "$@"
}

case "${1:-}" in
  holder) shift; [ $# = 3 ] || die "usage: holder NAME NODE_DIR ROOT_SIZE"; cmd_holder "$@" ;;
  holder-inside) shift; cmd_holder_inside "$@" ;;
  mountpoints) for b in "${BINDS[@]}"; do echo "${b#*:}"; done ;;
  enter) shift; [ $# -ge 3 ] || die "usage: enter NAME HOLDER_PID -- COMMAND..."; cmd_enter "$@" ;;
  *) sed -n '2,/^set -euo/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
