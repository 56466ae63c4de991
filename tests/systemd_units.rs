//! The shipped systemd units pass `systemd-analyze verify`.
//!
//! The units are installed, as they are in the repository, into a temporary root
//! (`<root>/etc/systemd/system/`, the kubeadm-style drop-in in `deckhand.service.d/`), with the
//! binaries this build produced at `<root>/usr/bin/` and the host's own system units (targets
//! such as `network-online.target`) at `<root>/usr/lib/systemd/system/`; then
//! `systemd-analyze verify --root=<root>` checks them: every key and value, the ExecStart
//! binaries (executable, at the path the unit names), the dependencies, and the drop-in merged on
//! top. Any diagnostic output fails the test (systemd-analyze exits 0 on unknown keys, only
//! printing them). A copy with a deliberate typo in the drop-in must be reported, which proves the
//! drop-in is really read.
//!
//! Skipped (with a message) only when `systemd-analyze` is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

fn systemd_analyze() -> Option<PathBuf> {
    ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            copy_dir(&e.path(), &dst);
        } else if ty.is_symlink() {
            let target = std::fs::read_link(e.path()).unwrap();
            let _ = std::os::unix::fs::symlink(target, dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// A root with the repository's units, this build's binaries and the host's system units.
fn make_root(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("deckhand-units-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_dir(&repo.join("systemd"), &root.join("etc/systemd/system"));
    for host_units in ["/usr/lib/systemd/system", "/lib/systemd/system"] {
        if Path::new(host_units).is_dir() {
            copy_dir(Path::new(host_units), &root.join("usr/lib/systemd/system"));
            break;
        }
    }
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    for (bin, path) in [
        ("deckhand", env!("CARGO_BIN_EXE_deckhand")),
        (
            "deckhand-scheduler",
            env!("CARGO_BIN_EXE_deckhand-scheduler"),
        ),
    ] {
        std::fs::copy(path, root.join("usr/bin").join(bin)).unwrap();
    }
    root
}

fn verify(sa: &Path, root: &Path, units: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(sa);
    cmd.arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg("--man=no")
        .arg("--generators=no");
    for u in units {
        cmd.arg(root.join("etc/systemd/system").join(u));
    }
    let out = cmd.output().expect("running systemd-analyze");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn units_pass_systemd_analyze_verify() {
    let sa = systemd_analyze().expect(
        "systemd-analyze is not installed (hack/install-deps.sh installs the systemd package)",
    );
    let root = make_root("ok");
    for f in [
        "deckhand.service",
        "deckhand-scheduler.service",
        "deckhand.service.d/10-kubeadm.conf",
    ] {
        assert!(
            root.join("etc/systemd/system").join(f).is_file(),
            "{f} is shipped"
        );
    }
    let (ok, out) = verify(
        &sa,
        &root,
        &["deckhand.service", "deckhand-scheduler.service"],
    );
    assert!(ok && out.trim().is_empty(), "systemd-analyze verify: {out}");

    // The unit is Type=notify with a watchdog and restarts forever, like kubelet.service.
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/deckhand.service")).unwrap();
    for line in [
        "Type=notify",
        "WatchdogSec=",
        "Restart=always",
        "RestartSec=10",
        "KillMode=process",
    ] {
        assert!(unit.contains(line), "deckhand.service lacks {line}");
    }
    let dropin =
        std::fs::read_to_string(root.join("etc/systemd/system/deckhand.service.d/10-kubeadm.conf"))
            .unwrap();
    for line in [
        "KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf",
        "KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml",
        "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env",
        "EnvironmentFile=-/etc/default/kubelet",
        "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
    ] {
        assert!(dropin.contains(line), "10-kubeadm.conf lacks {line}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn verify_reads_the_dropin_and_the_binary() {
    let sa = systemd_analyze().expect(
        "systemd-analyze is not installed (hack/install-deps.sh installs the systemd package)",
    );
    // A typo in the drop-in is reported: the drop-in is part of what is verified.
    let root = make_root("typo");
    let dropin = root.join("etc/systemd/system/deckhand.service.d/10-kubeadm.conf");
    let text = std::fs::read_to_string(&dropin).unwrap();
    std::fs::write(&dropin, text.replace("EnvironmentFile=", "EnviromentFile=")).unwrap();
    let (_, out) = verify(&sa, &root, &["deckhand.service"]);
    assert!(out.contains("EnviromentFile"), "typo not reported: {out}");
    std::fs::remove_dir_all(&root).unwrap();

    // A missing binary is reported: ExecStart is checked inside the root.
    let root = make_root("nobin");
    std::fs::remove_file(root.join("usr/bin/deckhand")).unwrap();
    let (ok, out) = verify(&sa, &root, &["deckhand.service"]);
    assert!(!ok && out.contains("/usr/bin/deckhand"), "{out}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// The Vagrantfile is valid Ruby and a valid Vagrant configuration (`vagrant validate
/// --ignore-provider`: no VM is started, no box is fetched, and no provider such as VirtualBox
/// or libvirt needs to be installed; without the flag a machine with no provider fails with
/// "No usable default provider could be found for your system").
#[test]
fn vagrantfile_passes_vagrant_validate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vagrant");
    let out = Command::new("vagrant")
        .args(["validate", "--ignore-provider"])
        .current_dir(&dir)
        .env("VAGRANT_CHECKPOINT_DISABLE", "1")
        // the file provisioner's source must exist: this build's binary (the Vagrantfile's
        // default, the release build, exists only after hack/build-release.sh)
        .env("DECKHAND_BIN", env!("CARGO_BIN_EXE_deckhand"))
        .output()
        .expect("running vagrant (hack/install-deps.sh installs the vagrant package)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "vagrant validate failed:\n{text}");
    assert!(
        text.contains("Vagrantfile validated successfully"),
        "{text}"
    );
}
