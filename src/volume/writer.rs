//! The atomic writer (k/k `pkg/volume/util/atomic_writer.go`): a volume's files are written into
//! a fresh `..<timestamp>` directory, the `..data` symlink is swapped to it with a rename (one
//! atomic step, so readers never see a half-updated set), one symlink per top-level entry points
//! through `..data`, and the previous directory is removed.

use super::{validate_relative, VolumeError};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Relative path → (content, file mode).
pub type Payload = BTreeMap<String, (Vec<u8>, i32)>;

const DATA: &str = "..data";

fn io<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(std::io::Error) -> VolumeError + 'a {
    move |source| VolumeError::Io {
        op,
        path: p.display().to_string(),
        source,
    }
}

/// Writes `payload` into `dir` atomically. Skips the write when the content is unchanged.
///
/// Errors: a path that escapes the volume, or an I/O failure.
pub fn write(dir: &Path, payload: &Payload) -> Result<(), VolumeError> {
    for p in payload.keys() {
        validate_relative(p)?;
        if p.starts_with("..") {
            return Err(VolumeError::InvalidPath {
                path: p.clone(),
                why: "must not start with '..'",
            });
        }
    }
    let data_link = dir.join(DATA);
    let old_target = std::fs::read_link(&data_link).ok();
    if let Some(old) = &old_target {
        if unchanged(&dir.join(old), payload) {
            return Ok(());
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ts_name = format!("..{}_{:09}", now.as_secs(), now.subsec_nanos());
    let ts_dir = dir.join(&ts_name);
    std::fs::create_dir(&ts_dir).map_err(io("create", &ts_dir))?;
    std::fs::set_permissions(&ts_dir, std::fs::Permissions::from_mode(0o755))
        .map_err(io("chmod", &ts_dir))?;
    for (rel, (content, mode)) in payload {
        let f = ts_dir.join(rel);
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        std::fs::write(&f, content).map_err(io("write", &f))?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode((*mode as u32) & 0o7777))
            .map_err(io("chmod", &f))?;
    }
    // Swap ..data atomically: make a new link, rename it over the old one.
    let tmp_link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&ts_name, &tmp_link).map_err(io("symlink", &tmp_link))?;
    std::fs::rename(&tmp_link, &data_link).map_err(io("rename", &data_link))?;
    // Top-level entries point through ..data.
    let tops: std::collections::BTreeSet<String> = payload
        .keys()
        .map(|k| k.split('/').next().unwrap_or(k).to_string())
        .collect();
    for t in &tops {
        let link = dir.join(t);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("{DATA}/{t}"), &link)
                .map_err(io("symlink", &link))?;
        }
    }
    // Remove top-level links that are no longer in the payload, and the old directory.
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("..") {
                continue;
            }
            if !tops.contains(&name) && e.file_type().map(|t| t.is_symlink()).unwrap_or(false) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    if let Some(old) = old_target {
        let old_dir = dir.join(old);
        if old_dir.starts_with(dir) && old_dir != ts_dir {
            let _ = std::fs::remove_dir_all(old_dir);
        }
    }
    Ok(())
}

fn unchanged(dir: &Path, payload: &Payload) -> bool {
    payload
        .iter()
        .all(|(rel, (content, _))| std::fs::read(dir.join(rel)).is_ok_and(|c| &c == content))
        && count_files(dir) == payload.len()
}

fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => n += count_files(&e.path()),
                Ok(_) => n += 1,
                Err(_) => {}
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_with_data_symlink_and_swaps_on_update() {
        let dir = std::env::temp_dir().join(format!("deckhand-aw-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = Payload::new();
        p.insert("a".into(), (b"1".to_vec(), 0o644));
        p.insert("sub/b".into(), (b"2".to_vec(), 0o600));
        write(&dir, &p).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(dir.join("sub/b")).unwrap(), "2");
        assert!(std::fs::read_link(dir.join("..data"))
            .unwrap()
            .to_string_lossy()
            .starts_with(".."));
        let first = std::fs::read_link(dir.join("..data")).unwrap();
        p.insert("a".into(), (b"3".to_vec(), 0o644));
        p.remove("sub/b");
        write(&dir, &p).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "3");
        assert!(
            std::fs::symlink_metadata(dir.join("sub")).is_err(),
            "stale entry removed"
        );
        assert!(!dir.join(first).exists(), "old timestamped dir removed");
        let mut bad = Payload::new();
        bad.insert("../escape".into(), (vec![], 0o644));
        assert!(write(&dir, &bad).is_err());
        assert!(!dir.parent().unwrap().join("escape").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
