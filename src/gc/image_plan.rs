//! The pure half of image garbage collection (k/k `pkg/kubelet/images/image_gc_manager.go`):
//! the policy and its validation, which images are in use, the detection records, the order
//! images go in, how much space to free, and the Go messages. [`super::images::ImageGcManager`]
//! carries the decisions out.

use super::{GcError, RuntimeContainer, RuntimeImage};
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The image collection policy (k/k `images.ImageGCPolicy`; KubeletConfiguration
/// `imageGCHighThresholdPercent`, `imageGCLowThresholdPercent`, `imageMinimumGCAge`,
/// `imageMaximumGCAge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// Disk usage (percent of the image filesystem) at or above which images are collected.
    /// Default 85; 100 (with no maximum age) disables the periodic collection.
    pub high_threshold_percent: u8,
    /// Disk usage the collection frees down to. Default 80; below the high threshold.
    pub low_threshold_percent: u8,
    /// An image first seen less than this long ago is never collected. Default 2 minutes.
    pub min_age: Duration,
    /// An unused image not used for longer than this is collected whatever the disk usage;
    /// zero disables it (the default).
    pub max_age: Duration,
}

impl Default for ImageGcPolicy {
    fn default() -> Self {
        Self {
            high_threshold_percent: 85,
            low_threshold_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

impl ImageGcPolicy {
    /// Checks the policy as `NewImageGCManager` and the KubeletConfiguration validation do.
    ///
    /// Errors: a threshold above 100, a low threshold not below the high one, a maximum age
    /// not above the minimum age; the texts name the flags, as Go's validation messages do.
    pub fn validate(&self) -> Result<(), String> {
        let (high, low) = (self.high_threshold_percent, self.low_threshold_percent);
        if high > 100 {
            return Err(format!("invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) {high} must be between 0 and 100, inclusive"));
        }
        if low > 100 {
            return Err(format!("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be between 0 and 100, inclusive"));
        }
        if low >= high {
            return Err(format!("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) {low} must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"));
        }
        if !self.max_age.is_zero() && self.max_age <= self.min_age {
            return Err(format!(
                "invalid configuration: imageMaximumGCAge {} must be greater than imageMinimumGCAge {}",
                crate::time::go_duration(self.max_age),
                crate::time::go_duration(self.min_age)
            ));
        }
        Ok(())
    }

    /// False when the periodic collection is off (high threshold 100 and no maximum age, as
    /// `StartGarbageCollection` stubs it).
    pub fn periodic_enabled(&self) -> bool {
        !(self.high_threshold_percent == 100 && self.max_age.is_zero())
    }
}

/// What is known about one image (k/k `imageRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRecord {
    /// When the image was first seen by this process.
    pub first_detected: Timestamp,
    /// When a container was last seen using it; `None`: never (Go's zero time, the oldest).
    pub last_used: Option<Timestamp>,
    /// Size in bytes.
    pub size: u64,
    /// Never collected.
    pub pinned: bool,
}

/// The images referenced by containers, running or not (Go: `GetPods(ctx, true)`, every
/// container's image ID): image IDs and the image names the containers were created with, and
/// `mounted`, the images the containers mount as image volumes (Go `handleImageVolumes`).
pub fn images_in_use(containers: &[RuntimeContainer], mounted: &[String]) -> HashSet<String> {
    let mut s: HashSet<String> = mounted.iter().cloned().collect();
    for c in containers {
        if !c.image_id.is_empty() {
            s.insert(c.image_id.clone());
        }
        if !c.image.is_empty() {
            s.insert(c.image.clone());
        }
    }
    s
}

/// True when a container references `image` by its ID, one of its tags or digests.
pub fn is_used(image: &RuntimeImage, in_use: &HashSet<String>) -> bool {
    in_use.contains(&image.id)
        || image
            .repo_tags
            .iter()
            .chain(image.repo_digests.iter())
            .any(|r| in_use.contains(r))
}

/// Updates the records from a listing (k/k `detectImages`): new images are first detected at
/// `detect_time`, used ones get `last_used = now`, sizes and pins are refreshed, images gone
/// from the runtime are forgotten. Returns the IDs of the images in use.
pub fn detect(
    records: &mut HashMap<String, ImageRecord>,
    images: &[RuntimeImage],
    in_use: &HashSet<String>,
    detect_time: Timestamp,
    now: Timestamp,
) -> HashSet<String> {
    let mut used = HashSet::new();
    let mut current = HashSet::new();
    for i in images {
        current.insert(i.id.clone());
        let r = records.entry(i.id.clone()).or_insert(ImageRecord {
            first_detected: detect_time,
            last_used: None,
            size: 0,
            pinned: false,
        });
        if is_used(i, in_use) {
            r.last_used = Some(now);
            used.insert(i.id.clone());
        }
        r.size = i.size;
        r.pinned = i.pinned;
    }
    records.retain(|id, _| current.contains(id));
    used
}

/// An image that may be collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Image ID.
    pub id: String,
    /// Its record.
    pub record: ImageRecord,
}

/// Unused, unpinned images in the order they are collected: least recently used first, ties
/// broken by first detection (k/k `imagesInEvictionOrder`, `byLastUsedAndDetected`).
pub fn eviction_order(
    records: &HashMap<String, ImageRecord>,
    used: &HashSet<String>,
) -> Vec<Candidate> {
    let mut v: Vec<Candidate> = records
        .iter()
        .filter(|(id, r)| !used.contains(*id) && !r.pinned)
        .map(|(id, r)| Candidate {
            id: id.clone(),
            record: *r,
        })
        .collect();
    v.sort_by(|a, b| {
        (a.record.last_used, a.record.first_detected, &a.id).cmp(&(
            b.record.last_used,
            b.record.first_detected,
            &b.id,
        ))
    });
    v
}

/// May `c` be deleted to free space at `free_time`? Not if it was used at or after
/// `free_time`, nor if it was first detected less than `min_age` before (it may just have been
/// pulled for a container about to start).
pub fn eligible_for_space(c: &Candidate, free_time: Timestamp, min_age: Duration) -> bool {
    if c.record.last_used.is_some_and(|u| u >= free_time) {
        return false;
    }
    since(free_time, c.record.first_detected) >= min_age
}

/// Is `c` unused for longer than `max_age` at `free_time`? Never before `max_age` has passed
/// since the collector began (`began`), nor with `max_age` zero (k/k `freeOldImages`).
pub fn older_than_max_age(
    c: &Candidate,
    free_time: Timestamp,
    began: Timestamp,
    max_age: Duration,
) -> bool {
    if max_age.is_zero() || since(free_time, began) <= max_age {
        return false;
    }
    match c.record.last_used {
        None => true,
        Some(u) => since(free_time, u) > max_age,
    }
}

fn since(later: Timestamp, earlier: Timestamp) -> Duration {
    let ns = later.as_nanosecond() - earlier.as_nanosecond();
    Duration::from_nanos(ns.max(0) as u64)
}

/// The decision of one collection by disk usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceDecision {
    /// Usage in percent as Go computes it: `100 - available*100/capacity` (integer division).
    pub usage_percent: i64,
    /// Bytes to free to reach the low threshold; `None` below the high threshold.
    pub bytes_to_free: Option<i64>,
}

/// How much to free (k/k `GarbageCollect`): with usage at or above the high threshold, enough
/// to bring it to the low threshold (`capacity*(100-low)/100 - available`). Available is capped
/// at capacity.
///
/// Errors: [`GcError::InvalidCapacity`] for a capacity of 0.
pub fn space_to_free(
    stats: &super::ImageFsStats,
    policy: &ImageGcPolicy,
) -> Result<SpaceDecision, GcError> {
    let capacity = stats.capacity_bytes as i64;
    let available = (stats.available_bytes as i64).min(capacity);
    if capacity == 0 {
        return Err(GcError::InvalidCapacity);
    }
    let usage_percent = 100 - (available as i128 * 100 / capacity as i128) as i64;
    let bytes_to_free = (usage_percent >= policy.high_threshold_percent as i64).then(|| {
        (capacity as i128 * (100 - policy.low_threshold_percent as i128) / 100) as i64 - available
    });
    Ok(SpaceDecision {
        usage_percent,
        bytes_to_free,
    })
}

/// A size as Go's `formatSize` prints it: `512 B`, `1.5 KiB`, `20.0 MiB`, `251.9 GiB`.
pub fn format_size(bytes: i64) -> String {
    const KIB: f64 = 1024.0;
    let size = bytes as f64;
    if size < KIB {
        format!("{bytes} B")
    } else if size < KIB * KIB {
        format!("{:.1} KiB", size / KIB)
    } else if size < KIB * KIB * KIB {
        format!("{:.1} MiB", size / (KIB * KIB))
    } else if size < KIB * KIB * KIB * KIB {
        format!("{:.1} GiB", size / (KIB * KIB * KIB))
    } else {
        format!("{:.1} TiB", size / (KIB * KIB * KIB * KIB))
    }
}

/// The `FreeDiskSpaceFailed` event message and error text (k/k `GarbageCollect`).
pub fn free_disk_space_failed_message(usage_percent: i64, capacity: i64, freed: i64) -> String {
    format!(
        "Insufficient free disk space on the node's image filesystem ({usage_percent}% of {} used). \
         Failed to free sufficient space by deleting unused images (freed {freed} bytes). \
         Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
        format_size(capacity)
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gc::{ContainerState, ImageFsStats};

    pub(crate) fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }
    pub(crate) fn img(id: &str, size: u64) -> RuntimeImage {
        RuntimeImage {
            id: id.into(),
            repo_tags: vec![format!("reg/{id}:latest")],
            repo_digests: vec![],
            size,
            pinned: false,
        }
    }
    pub(crate) fn ctr(id: &str, image_id: &str, state: ContainerState) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            sandbox_id: "sb".into(),
            pod_uid: "u".into(),
            name: "c".into(),
            state,
            created_at_ns: 1,
            image_id: image_id.into(),
            image: String::new(),
        }
    }
    pub(crate) const GI: u64 = 1 << 30;

    #[test]
    fn policy_validation_matches_go_messages() {
        assert!(ImageGcPolicy::default().validate().is_ok());
        let p = |h, l| ImageGcPolicy {
            high_threshold_percent: h,
            low_threshold_percent: l,
            ..Default::default()
        };
        let e = p(80, 80).validate().unwrap_err();
        assert_eq!(e, "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 80 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80");
        assert!(p(101, 80)
            .validate()
            .unwrap_err()
            .contains("between 0 and 100"));
        assert!(p(100, 0).validate().is_ok());
        let e = ImageGcPolicy {
            max_age: Duration::from_secs(60),
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e, "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s");
        assert!(!p(100, 80).periodic_enabled());
        assert!(ImageGcPolicy {
            high_threshold_percent: 100,
            max_age: Duration::from_secs(600),
            ..Default::default()
        }
        .periodic_enabled());
    }

    #[test]
    fn images_a_container_mounts_as_image_volumes_are_in_use() {
        let images = vec![img("sha256:a", 1), img("sha256:vol", 1), img("sha256:c", 1)];
        let cs = vec![ctr("1", "sha256:a", ContainerState::Running)];
        let mut rec = HashMap::new();
        let in_use = images_in_use(&cs, &["sha256:vol".to_string()]);
        let used = detect(&mut rec, &images, &in_use, ts(0), ts(1));
        assert_eq!(
            used,
            HashSet::from(["sha256:a".to_string(), "sha256:vol".to_string()])
        );
        let order = eviction_order(&rec, &used);
        assert_eq!(
            order.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            vec!["sha256:c"],
            "only the unused image may be collected"
        );
    }

    #[test]
    fn images_used_by_any_container_running_or_not_are_in_use() {
        let images = vec![img("sha256:a", 1), img("sha256:b", 1), img("sha256:c", 1)];
        let mut byname = ctr("2", "", ContainerState::Exited);
        byname.image = "reg/sha256:c:latest".into();
        let cs = vec![ctr("1", "sha256:a", ContainerState::Exited), byname];
        let mut rec = HashMap::new();
        let used = detect(&mut rec, &images, &images_in_use(&cs, &[]), ts(0), ts(1));
        assert_eq!(
            used,
            HashSet::from(["sha256:a".to_string(), "sha256:c".to_string()])
        );
        assert_eq!(rec["sha256:a"].last_used, Some(ts(1)));
        assert_eq!(rec["sha256:b"].last_used, None);
        assert_eq!(rec["sha256:b"].first_detected, ts(0));
    }

    #[test]
    fn detection_keeps_first_detected_and_forgets_removed_images() {
        let mut rec = HashMap::new();
        detect(
            &mut rec,
            &[img("a", 1), img("b", 2)],
            &HashSet::new(),
            ts(0),
            ts(0),
        );
        let mut a2 = img("a", 5);
        a2.pinned = true;
        detect(&mut rec, &[a2], &HashSet::new(), ts(100), ts(100));
        assert_eq!(rec.len(), 1);
        assert_eq!(rec["a"].first_detected, ts(0));
        assert_eq!(rec["a"].size, 5);
        assert!(rec["a"].pinned);
    }

    #[test]
    fn eviction_order_is_least_recently_used_then_first_detected_skipping_used_and_pinned() {
        let r = |first, last: Option<i64>, pinned| ImageRecord {
            first_detected: ts(first),
            last_used: last.map(ts),
            size: 1,
            pinned,
        };
        let rec = HashMap::from([
            ("used".to_string(), r(0, Some(50), false)),
            ("pinned".to_string(), r(0, None, true)),
            ("recent".to_string(), r(0, Some(40), false)),
            ("stale".to_string(), r(0, Some(10), false)),
            ("never-new".to_string(), r(5, None, false)),
            ("never-old".to_string(), r(1, None, false)),
        ]);
        let used = HashSet::from(["used".to_string()]);
        let order: Vec<String> = eviction_order(&rec, &used)
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(order, vec!["never-old", "never-new", "stale", "recent"]);
    }

    #[test]
    fn min_age_protects_freshly_detected_images() {
        let c = Candidate {
            id: "x".into(),
            record: ImageRecord {
                first_detected: ts(0),
                last_used: None,
                size: 1,
                pinned: false,
            },
        };
        assert!(!eligible_for_space(&c, ts(119), Duration::from_secs(120)));
        assert!(eligible_for_space(&c, ts(120), Duration::from_secs(120)));
        let mut used_now = c.clone();
        used_now.record.last_used = Some(ts(200));
        assert!(!eligible_for_space(&used_now, ts(200), Duration::ZERO));
    }

    #[test]
    fn max_age_waits_for_the_collector_age_then_removes_long_unused() {
        let c = |last: Option<i64>| Candidate {
            id: "x".into(),
            record: ImageRecord {
                first_detected: ts(0),
                last_used: last.map(ts),
                size: 1,
                pinned: false,
            },
        };
        let max = Duration::from_secs(3600);
        assert!(
            !older_than_max_age(&c(None), ts(3600), ts(0), max),
            "collector too young"
        );
        assert!(older_than_max_age(&c(None), ts(3601), ts(0), max));
        assert!(!older_than_max_age(&c(Some(100)), ts(3700), ts(0), max));
        assert!(older_than_max_age(&c(Some(100)), ts(3701), ts(0), max));
        assert!(!older_than_max_age(
            &c(None),
            ts(99999),
            ts(0),
            Duration::ZERO
        ));
    }

    #[test]
    fn space_to_free_uses_available_bytes_like_go() {
        let p = ImageGcPolicy::default();
        // This machine's root filesystem: 252 GiB, 39.6 GiB available to users (big root
        // reserve) -> 85% used by Go's formula, although df says 57%.
        let s = ImageFsStats {
            capacity_bytes: 270_553_174_016,
            available_bytes: 42_570_190_848,
            used_bytes: 0,
        };
        let d = space_to_free(&s, &p).unwrap();
        assert_eq!(d.usage_percent, 85);
        assert_eq!(
            d.bytes_to_free,
            Some(270_553_174_016i64 * 20 / 100 - 42_570_190_848)
        );
        let s = ImageFsStats {
            capacity_bytes: 100 * GI,
            available_bytes: 50 * GI,
            used_bytes: 0,
        };
        assert_eq!(space_to_free(&s, &p).unwrap().bytes_to_free, None);
        // Available above capacity is capped.
        let s = ImageFsStats {
            capacity_bytes: 10,
            available_bytes: 20,
            used_bytes: 0,
        };
        assert_eq!(space_to_free(&s, &p).unwrap().usage_percent, 0);
        assert!(matches!(
            space_to_free(&ImageFsStats::default(), &p),
            Err(GcError::InvalidCapacity)
        ));
    }

    #[test]
    fn sizes_and_messages_read_as_go_prints_them() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(20 * 1024 * 1024), "20.0 MiB");
        assert_eq!(format_size(270_553_174_016), "252.0 GiB");
        assert_eq!(
            free_disk_space_failed_message(85, 270_553_174_016, 1234),
            "Insufficient free disk space on the node's image filesystem (85% of 252.0 GiB used). \
             Failed to free sufficient space by deleting unused images (freed 1234 bytes). \
             Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
        );
    }
}
