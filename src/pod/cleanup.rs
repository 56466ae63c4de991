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

/// Of the pod directories (or pod cgroups) `dirs` (pod UIDs), sorted, those of pods that are not
/// in the API's list (`present`, which includes static pods): their pods are gone. Whether a
/// worker still handles one is the caller's check (`PodWorkers::orphan_due`).
pub fn orphaned_pod_dirs(dirs: &[String], present: &HashSet<String>) -> Vec<String> {
    let mut out: Vec<String> = dirs
        .iter()
        .filter(|u| !present.contains(*u))
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
    fn orphaned_pod_directories_are_those_of_pods_not_listed() {
        let dirs: Vec<String> = ["d", "a", "c", "b"].iter().map(|s| s.to_string()).collect();
        let cases: [(&str, &[&str], &[&str]); 4] = [
            ("all listed", &["a", "b", "c", "d"], &[]),
            ("none listed", &[], &["a", "b", "c", "d"]),
            ("some listed", &["a", "d"], &["b", "c"]),
            (
                "listed pods without a directory",
                &["x", "b"],
                &["a", "c", "d"],
            ),
        ];
        for (case, present, want) in cases {
            let present: HashSet<String> = present.iter().map(|s| s.to_string()).collect();
            assert_eq!(orphaned_pod_dirs(&dirs, &present), want.to_vec(), "{case}");
        }
    }
}
