# shellcheck shell=bash
# hack/lib/containerd2.sh: containerd 2.x (hack/build-containerd.sh, CONTAINERD2_VERSION) for the
# local cluster: its settings and its config.toml in the 2.x format (version = 3). It is the 2.x
# twin of write_containerd_config (hack/lib/containerd.sh, Debian's 1.6, which stays the default)
# with the same registry hosts (config_path = $CERTS_D: the hosts.toml files write_hosts_toml
# writes), sandbox image, CNI bin/conf dirs, cgroup driver (cgroupfs), oom_score_adj clamp and
# streaming server, but a root, state, socket, runc state dir and shim socket dir of its own, so it
# can run next to the 1.6 one without sharing a file with it.
# Sourced after hack/lib/common.sh (never run on its own): by hack/local-up.sh, whose CONTAINERD=2
# mode runs it (use_containerd in hack/lib/containerd.sh points CRI_SOCK and the rest here), and by
# hack/containerd2-smoke.sh.
#
# Every setting can be overridden from the environment (a test points them at a temp dir):
#   CONTAINERD2_BIN           containerd, containerd-shim-runc-v2, ctr, runc (hack/build-containerd.sh)
#   CONTAINERD2_ROOT          persistent data (content store, snapshots, metadata)
#   CONTAINERD2_STATE         runtime state (tasks, fifos, runc state, shim sockets)
#   CONTAINERD2_SOCK          the gRPC (CRI) socket; the ttrpc one is the same path + .ttrpc
#   CONTAINERD2_CONFIG        where write_containerd2_config puts the file
#   CONTAINERD2_CNI_CONF_DIR  the CNI config dir (default: the cluster's, $CNI_CONF_DIR)

CONTAINERD2_BIN=${CONTAINERD2_BIN:-$ROOT/_output/containerd2/bin}
CONTAINERD2_ROOT=${CONTAINERD2_ROOT:-/var/lib/containerd2}
CONTAINERD2_STATE=${CONTAINERD2_STATE:-/run/containerd2}
CONTAINERD2_SOCK=${CONTAINERD2_SOCK:-$CONTAINERD2_STATE/containerd.sock}
CONTAINERD2_ENDPOINT="unix://$CONTAINERD2_SOCK"
CONTAINERD2_CONFIG=${CONTAINERD2_CONFIG:-$STATE/containerd2/config.toml}
CONTAINERD2_CNI_CONF_DIR=${CONTAINERD2_CNI_CONF_DIR:-$CNI_CONF_DIR}

# The config on stdout. Differences from the 1.6 file that are not only the new plugin names:
# - runtime_path: the 2.x shim by absolute path. containerd resolves io.containerd.runc.v2 to
#   containerd-shim-runc-v2 on PATH before it looks next to its own binary, so without it 2.x
#   would start Debian's 1.6 shim from /usr/bin.
# - runc options Root and the shim manager's socket_dir: runc's state and the shims' sockets are
#   /run/containerd/runc and /run/containerd/s by default whatever `state` says; here they live
#   under our state dir.
# - NRI is off: 1.6 has none, and 2.x would create /var/run/nri/nri.sock.
# - the opt plugin's directory (2.x and 1.6 default to /opt/containerd) lives under our root.
# - sandbox_image is pinned_images.sandbox of the images plugin; CNI bin_dir is bin_dirs (a list).
# Left at 2.x's defaults on purpose (what a 2.x node has): image pulls go through the transfer
# service (it honours config_path), enable_unprivileged_ports/icmp = true (1.6: false; pods get
# net.ipv4.ip_unprivileged_port_start=0 and ping_group_range), network namespaces in /run/netns
# (hack/lib/network.sh cleans /run/netns/cni-* there).
containerd2_config() {
  cat <<EOF
# $MARKER: containerd 2.x ($CONTAINERD2_VERSION) for the local cluster (cgroup v1, no systemd)
version = 3
root = "$CONTAINERD2_ROOT"
state = "$CONTAINERD2_STATE"
oom_score = 0

[grpc]
  address = "$CONTAINERD2_SOCK"

[debug]
  level = "info"

[plugins]
  [plugins.'io.containerd.grpc.v1.cri']
    # CRI streaming server (exec/attach/port-forward URLs) stays on loopback
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    discard_unpacked_layers = false
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$SANDBOX_IMAGE"
    [plugins.'io.containerd.cri.v1.images'.registry]
      # hosts.toml per registry (never combine with registry.mirrors: the CRI plugin would not load)
      config_path = "$CERTS_D"

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    # this VM withholds CAP_SYS_RESOURCE: runc cannot set the sandbox's negative oom_score_adj
    restrict_oom_score_adj = true
    max_container_log_line_size = 16384
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        runtime_path = "$CONTAINERD2_BIN/containerd-shim-runc-v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          # runc built from its Go module (hack/build-containerd.sh): Debian's 1.1.5 has no
          # idmapped mounts, so 2.x would not offer user namespaces
          BinaryName = "$CONTAINERD2_BIN/runc"
          Root = "$CONTAINERD2_STATE/runc"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CNI_BIN_DIR"]
      conf_dir = "$CONTAINERD2_CNI_CONF_DIR"
      max_conf_num = 1

  [plugins.'io.containerd.shim.v1.manager']
    # at most 42 characters (unix socket path limit)
    socket_dir = "$CONTAINERD2_STATE/s"

  [plugins.'io.containerd.nri.v1.nri']
    disable = true

  [plugins.'io.containerd.internal.v1.opt']
    path = "$CONTAINERD2_ROOT/opt"
EOF
}

write_containerd2_config() {
  containerd2_config | write_if_changed "$CONTAINERD2_CONFIG" || true
}
