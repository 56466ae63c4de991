//! Housekeeping decisions about what is left on the node of pods that are gone (k/k
//! `kubelet_pods.go` `HandlePodCleanups`: `cleanupOrphanedPodDirs`, `cleanupOrphanedPodCgroups`).
//! The pod workers' housekeeping ([`super::housekeeping`]) acts on them.

use std::collections::HashSet;

/// The pod UIDs that have a directory under `<root-dir>/pods/`.
pub fn list_pod_dirs(root_dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(root_dir.join("pods"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Of the pod directories `dirs` (pod UIDs), those of pods that are neither in the API's list
/// (`present`, which includes static pods) nor handled by a worker: their pods are gone.
pub fn orphaned_pod_dirs(
    dirs: &[String],
    present: &HashSet<String>,
    has_worker: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out: Vec<String> = dirs
        .iter()
        .filter(|u| !present.contains(*u) && !has_worker(u))
        .cloned()
        .collect();
    out.sort();
    out
}

/// Removes, in one blocking task, the orphaned pod cgroups `orphans` (pod UID, and whether it
/// is the first attempt): pods with nothing else left (not listed, no worker: their sandbox
/// and directory are gone), e.g. those a removal that raced a container start left behind (k/k
/// `cleanupOrphanedPodCgroups`). A failure is a warning the first time, then debug.
pub fn remove_orphaned_pod_cgroups(cm: crate::cm::CgroupManager, orphans: Vec<(String, bool)>) {
    if orphans.is_empty() {
        return;
    }
    if orphans.iter().any(|(_, first)| *first) {
        tracing::info!(count = orphans.len(), "removing orphaned pod cgroups");
    }
    tokio::task::spawn_blocking(move || {
        for (uid, first) in orphans {
            match cm.remove_pod_cgroup(&uid) {
                Err(e) if first => {
                    tracing::warn!(pod.uid = %uid, error = %e, "removing an orphaned pod cgroup failed")
                }
                Err(e) => {
                    tracing::debug!(pod.uid = %uid, error = %e, "removing an orphaned pod cgroup failed again")
                }
                Ok(_) => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orphaned_pod_directories_are_those_of_pods_gone_and_without_a_worker() {
        let dirs: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let cases: [(&str, &[&str], &[&str], &[&str]); 4] = [
            ("all listed", &["a", "b", "c", "d"], &[], &[]),
            ("none listed, none handled", &[], &[], &["a", "b", "c", "d"]),
            ("listed or handled", &["a"], &["b"], &["c", "d"]),
            (
                "a worker still terminating it",
                &["a", "b", "c"],
                &["d"],
                &[],
            ),
        ];
        for (case, present, workers, want) in cases {
            let present: HashSet<String> = present.iter().map(|s| s.to_string()).collect();
            let got = orphaned_pod_dirs(&dirs, &present, |u| workers.contains(&u));
            assert_eq!(got, want.to_vec(), "{case}");
        }
    }
}
