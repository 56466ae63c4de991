//! Image garbage collection: unused images go, least recently used first, when the image
//! filesystem is fuller than the high threshold, until it is down to the low threshold; unused
//! images older than a maximum age go regardless (k/k `pkg/kubelet/images/image_gc_manager.go`).
//!
//! What is in use and when it was last used is tracked in memory ([`detect`]), as the Go
//! kubelet does: after a restart every image counts as first seen at the first detection.
//! The choices are pure ([`eviction_order`], [`space_to_free`], [`eligible_for_space`],
//! [`older_than_max_age`]); [`ImageGcManager`] carries them out.

use super::{aggregate_strings, EventSink, GcError, GcRuntime, RuntimeContainer, RuntimeImage};
use crate::time::Clock;
use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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
/// container's image ID): image IDs and the image names the containers were created with.
pub fn images_in_use(containers: &[RuntimeContainer]) -> HashSet<String> {
    let mut s = HashSet::new();
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

struct Inner {
    runtime: Arc<dyn GcRuntime>,
    events: Arc<dyn EventSink>,
    clock: Arc<dyn Clock>,
    policy: ImageGcPolicy,
    records: Mutex<HashMap<String, ImageRecord>>,
    /// When the collector was made (Go: `beganGC`, for imageMaximumGCAge).
    began: Timestamp,
    /// One collection at a time.
    lock: tokio::sync::Mutex<()>,
}

/// The image garbage collector (k/k `realImageGCManager`). Cheap to clone; clones share the
/// records.
#[derive(Clone)]
pub struct ImageGcManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ImageGcManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageGcManager")
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl ImageGcManager {
    /// A collector with `policy` (checked with [`ImageGcPolicy::validate`]).
    ///
    /// Errors: the policy's validation message.
    pub fn new(
        runtime: Arc<dyn GcRuntime>,
        events: Arc<dyn EventSink>,
        clock: Arc<dyn Clock>,
        policy: ImageGcPolicy,
    ) -> Result<Self, String> {
        policy.validate()?;
        let began = clock.now();
        Ok(Self {
            inner: Arc::new(Inner {
                runtime,
                events,
                clock,
                policy,
                records: Mutex::new(HashMap::new()),
                began,
                lock: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The policy in use.
    pub fn policy(&self) -> ImageGcPolicy {
        self.inner.policy
    }

    /// A copy of the image records (for tests and debugging).
    pub fn records(&self) -> HashMap<String, ImageRecord> {
        self.inner
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Lists images and containers, updates the records, and returns the collectable images in
    /// order (k/k `imagesInEvictionOrder`).
    async fn candidates(&self, free_time: Timestamp) -> Result<Vec<Candidate>, GcError> {
        let i = &*self.inner;
        let images = i
            .runtime
            .list_images()
            .await
            .map_err(|source| GcError::Runtime {
                op: "listing images",
                source,
            })?;
        let containers = i
            .runtime
            .list_containers()
            .await
            .map_err(|source| GcError::Runtime {
                op: "listing containers",
                source,
            })?;
        let in_use = images_in_use(&containers);
        let now = i.clock.now();
        let mut records = i.records.lock().unwrap_or_else(|e| e.into_inner());
        let used = detect(&mut records, &images, &in_use, free_time, now);
        Ok(eviction_order(&records, &used))
    }

    async fn free_image(&self, c: &Candidate) -> Result<(), String> {
        tracing::info!(image.id = %c.id, size = c.record.size, "Removing image to free bytes");
        self.inner
            .runtime
            .remove_image(&c.id)
            .await
            .map_err(|e| e.to_string())?;
        self.inner
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&c.id);
        Ok(())
    }

    /// k/k `freeSpace`: deletes eligible candidates in order until `bytes_to_free` are freed.
    /// Returns the bytes freed, also with the error of failed deletions.
    async fn free_space(
        &self,
        bytes_to_free: i64,
        free_time: Timestamp,
        candidates: &[Candidate],
    ) -> (i64, Option<GcError>) {
        let mut errors = Vec::new();
        let mut freed: i64 = 0;
        for c in candidates {
            if !eligible_for_space(c, free_time, self.inner.policy.min_age) {
                continue;
            }
            if let Err(e) = self.free_image(c).await {
                errors.push(e);
                continue;
            }
            freed = freed.saturating_add(c.record.size as i64);
            if freed >= bytes_to_free {
                break;
            }
        }
        let err = (!errors.is_empty()).then(|| {
            GcError::ImageDeletion(format!(
                "wanted to free {bytes_to_free} bytes, but freed {freed} bytes space with errors in image deletion: {}",
                aggregate_strings(&errors)
            ))
        });
        (freed, err)
    }

    /// k/k `freeOldImages`: deletes candidates unused for longer than the maximum age; returns
    /// the candidates left.
    async fn free_old_images(
        &self,
        candidates: Vec<Candidate>,
        free_time: Timestamp,
    ) -> Result<Vec<Candidate>, GcError> {
        let max_age = self.inner.policy.max_age;
        let mut left = Vec::new();
        let mut errors = Vec::new();
        for c in candidates {
            if older_than_max_age(&c, free_time, self.inner.began, max_age) {
                if let Err(e) = self.free_image(&c).await {
                    errors.push(e);
                    left.push(c);
                }
                continue;
            }
            left.push(c);
        }
        if !errors.is_empty() {
            return Err(GcError::ImageDeletion(format!(
                "wanted to free images older than {}, encountered errors in image deletion: {}",
                crate::time::go_duration(max_age),
                aggregate_strings(&errors)
            )));
        }
        Ok(left)
    }

    /// One collection (k/k `realImageGCManager.GarbageCollect`): images past the maximum age,
    /// then, with the image filesystem at or above the high threshold, unused images down to
    /// the low threshold. Records `InvalidDiskCapacity` and `FreeDiskSpaceFailed` Warning
    /// events on the Node as Go does.
    ///
    /// Errors: listing images or containers, the filesystem stats, a zero capacity, failed
    /// deletions, or not enough space freed ([`GcError::InsufficientSpace`]).
    pub async fn garbage_collect(&self) -> Result<(), GcError> {
        let i = &*self.inner;
        let _one = i.lock.lock().await;
        let free_time = i.clock.now();
        let candidates = self.candidates(free_time).await?;
        let candidates = self.free_old_images(candidates, free_time).await?;
        let stats = i.runtime.image_fs_stats().await?;
        if stats.available_bytes > stats.capacity_bytes {
            tracing::info!(
                available = stats.available_bytes,
                capacity = stats.capacity_bytes,
                "Availability is larger than capacity"
            );
        }
        let d = match space_to_free(&stats, &i.policy) {
            Ok(d) => d,
            Err(e) => {
                i.events
                    .warning(super::reason::INVALID_DISK_CAPACITY, e.to_string());
                return Err(e);
            }
        };
        let Some(amount) = d.bytes_to_free else {
            tracing::debug!(
                usage = d.usage_percent,
                "image filesystem below the high threshold"
            );
            return Ok(());
        };
        tracing::info!(
            usage = d.usage_percent,
            high_threshold = i.policy.high_threshold_percent,
            amount_to_free = amount,
            low_threshold = i.policy.low_threshold_percent,
            "Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let (freed, err) = self.free_space(amount, free_time, &candidates).await;
        if let Some(e) = err {
            return Err(e);
        }
        if freed < amount {
            let message =
                free_disk_space_failed_message(d.usage_percent, stats.capacity_bytes as i64, freed);
            i.events
                .warning(super::reason::FREE_DISK_SPACE_FAILED, message.clone());
            return Err(GcError::InsufficientSpace(message));
        }
        Ok(())
    }

    /// The eviction manager's disk reclaim (k/k `DeleteUnusedImages`): every unused, unpinned
    /// image past the minimum age goes, whatever the disk usage. Returns the bytes freed (the
    /// sizes the runtime reported for the deleted images).
    ///
    /// Errors: listing images or containers, or failed deletions (the images deleted before
    /// stay deleted).
    pub async fn delete_unused_images(&self) -> Result<u64, GcError> {
        tracing::info!("Attempting to delete unused images");
        let i = &*self.inner;
        let _one = i.lock.lock().await;
        let free_time = i.clock.now();
        let candidates = self.candidates(free_time).await?;
        let (freed, err) = self.free_space(i64::MAX, free_time, &candidates).await;
        match err {
            Some(e) => Err(e),
            None => Ok(freed.max(0) as u64),
        }
    }

    /// Collects every `period` (the first run at once) until `cancel`, unless the policy
    /// disables the periodic collection. A failure is logged; a second failure in a row is
    /// also an `ImageGCFailed` Warning event on the Node with the error as its message
    /// (k/k `StartGarbageCollection`).
    pub async fn run(self, period: Duration, cancel: CancellationToken) {
        if !self.inner.policy.periodic_enabled() {
            tracing::info!("ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC");
            return;
        }
        let mut prev_failed = false;
        loop {
            let span = tracing::info_span!("image_gc");
            let r = tracing::Instrument::instrument(self.garbage_collect(), span.clone()).await;
            {
                let _g = span.enter();
                match r {
                    Err(e) => {
                        if prev_failed {
                            tracing::error!(error = %e, "Image garbage collection failed multiple times in a row");
                            self.inner
                                .events
                                .warning(super::reason::IMAGE_GC_FAILED, e.to_string());
                        } else {
                            tracing::error!(error = %e, "Image garbage collection failed once. Stats initialization may not have completed yet");
                        }
                        prev_failed = true;
                    }
                    Ok(()) if prev_failed => {
                        tracing::info!("Image garbage collection succeeded");
                        prev_failed = false;
                    }
                    Ok(()) => tracing::debug!("Image garbage collection succeeded"),
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gc::testing::*;
    use crate::gc::{ContainerState, ImageFsStats};

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }
    fn img(id: &str, size: u64) -> RuntimeImage {
        RuntimeImage {
            id: id.into(),
            repo_tags: vec![format!("reg/{id}:latest")],
            repo_digests: vec![],
            size,
            pinned: false,
        }
    }
    fn ctr(id: &str, image_id: &str, state: ContainerState) -> RuntimeContainer {
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
    const GI: u64 = 1 << 30;

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
    fn images_used_by_any_container_running_or_not_are_in_use() {
        let images = vec![img("sha256:a", 1), img("sha256:b", 1), img("sha256:c", 1)];
        let mut byname = ctr("2", "", ContainerState::Exited);
        byname.image = "reg/sha256:c:latest".into();
        let cs = vec![ctr("1", "sha256:a", ContainerState::Exited), byname];
        let mut rec = HashMap::new();
        let used = detect(&mut rec, &images, &images_in_use(&cs), ts(0), ts(1));
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

    fn manager(
        rt: Arc<FakeRuntime>,
        clock: Arc<FakeClock>,
        policy: ImageGcPolicy,
    ) -> (ImageGcManager, Arc<FakeEvents>) {
        let ev = Arc::new(FakeEvents::default());
        (
            ImageGcManager::new(rt, ev.clone(), clock, policy).unwrap(),
            ev,
        )
    }

    #[tokio::test]
    async fn over_the_high_threshold_frees_lru_images_down_to_the_low_threshold() {
        let rt = Arc::new(FakeRuntime::default());
        {
            let mut s = rt.state.lock().unwrap();
            let mut pause = img("sha256:pause", GI);
            pause.pinned = true;
            s.images = vec![
                img("sha256:a", GI),
                img("sha256:b", GI),
                img("sha256:inuse", GI),
                pause,
                img("sha256:c", GI),
            ];
            s.containers = vec![ctr("1", "sha256:inuse", ContainerState::Running)];
            // 90% used; to reach 80%: free 10 GiB... only 3 unused unpinned GiB exist.
            s.fs = ImageFsStats {
                capacity_bytes: 100 * GI,
                available_bytes: 10 * GI,
                used_bytes: 0,
            };
        }
        let clock = Arc::new(FakeClock::at(ts(0)));
        let (m, ev) = manager(rt.clone(), clock.clone(), ImageGcPolicy::default());
        // First pass: everything is freshly detected, nothing may go.
        let e = m.garbage_collect().await.unwrap_err();
        assert!(matches!(e, GcError::InsufficientSpace(_)), "{e}");
        assert!(rt.state.lock().unwrap().removed_images.is_empty());
        // "b" gets used in between, so it is more recently used than a and c.
        rt.state
            .lock()
            .unwrap()
            .containers
            .push(ctr("2", "sha256:b", ContainerState::Exited));
        clock.set(ts(60));
        m.garbage_collect().await.unwrap_err();
        rt.state.lock().unwrap().containers.pop();
        clock.set(ts(180));
        let e = m.garbage_collect().await.unwrap_err();
        assert_eq!(
            e.to_string(),
            free_disk_space_failed_message(90, (100 * GI) as i64, (3 * GI) as i64)
        );
        assert_eq!(
            rt.state.lock().unwrap().removed_images,
            vec!["sha256:a", "sha256:c", "sha256:b"]
        );
        let ev = ev.events.lock().unwrap();
        assert!(ev.iter().all(|(r, _)| r == "FreeDiskSpaceFailed"), "{ev:?}");
        assert_eq!(ev.len(), 3);
    }

    #[tokio::test]
    async fn stops_once_enough_is_freed_and_below_threshold_does_nothing() {
        let rt = Arc::new(FakeRuntime::default());
        {
            let mut s = rt.state.lock().unwrap();
            s.images = vec![img("sha256:a", 6 * GI), img("sha256:b", 6 * GI)];
            s.fs = ImageFsStats {
                capacity_bytes: 100 * GI,
                available_bytes: 15 * GI,
                used_bytes: 0,
            };
        }
        let clock = Arc::new(FakeClock::at(ts(0)));
        let (m, ev) = manager(rt.clone(), clock.clone(), ImageGcPolicy::default());
        m.garbage_collect().await.unwrap_err(); // detect only (min age)
        clock.set(ts(600));
        m.garbage_collect().await.unwrap();
        // 5 GiB to free: the first image (a, first by id on a tie) suffices.
        assert_eq!(rt.state.lock().unwrap().removed_images, vec!["sha256:a"]);
        rt.state.lock().unwrap().fs.available_bytes = 50 * GI;
        m.garbage_collect().await.unwrap();
        assert_eq!(rt.state.lock().unwrap().removed_images.len(), 1);
        assert_eq!(
            ev.events.lock().unwrap().len(),
            1,
            "only the first pass's FreeDiskSpaceFailed"
        );
    }

    #[tokio::test]
    async fn delete_unused_images_frees_everything_eligible_and_reports_bytes() {
        let rt = Arc::new(FakeRuntime::default());
        {
            let mut s = rt.state.lock().unwrap();
            s.images = vec![
                img("sha256:a", 100),
                img("sha256:b", 200),
                img("sha256:used", 400),
            ];
            s.containers = vec![ctr("1", "sha256:used", ContainerState::Created)];
        }
        let clock = Arc::new(FakeClock::at(ts(0)));
        let (m, _) = manager(
            rt.clone(),
            clock.clone(),
            ImageGcPolicy {
                min_age: Duration::ZERO,
                ..Default::default()
            },
        );
        assert_eq!(m.delete_unused_images().await.unwrap(), 300);
        assert!(m.records().contains_key("sha256:used"));
        assert!(!m.records().contains_key("sha256:a"));
    }

    #[tokio::test]
    async fn failed_deletions_are_reported_with_go_wording() {
        let rt = Arc::new(FakeRuntime::default());
        {
            let mut s = rt.state.lock().unwrap();
            s.images = vec![img("sha256:a", 100), img("sha256:b", 200)];
            s.fail_remove_image.insert("sha256:a".into());
        }
        let (m, _) = manager(
            rt.clone(),
            Arc::new(FakeClock::at(ts(0))),
            ImageGcPolicy {
                min_age: Duration::ZERO,
                ..Default::default()
            },
        );
        let e = m.delete_unused_images().await.unwrap_err().to_string();
        assert!(e.starts_with(&format!("wanted to free {} bytes, but freed 200 bytes space with errors in image deletion: ", i64::MAX)), "{e}");
    }

    #[tokio::test]
    async fn max_age_removes_long_unused_images_below_the_threshold() {
        let rt = Arc::new(FakeRuntime::default());
        {
            let mut s = rt.state.lock().unwrap();
            s.images = vec![img("sha256:old", 1), img("sha256:used", 1)];
            s.containers = vec![ctr("1", "sha256:used", ContainerState::Running)];
            s.fs = ImageFsStats {
                capacity_bytes: 100,
                available_bytes: 90,
                used_bytes: 0,
            };
        }
        let clock = Arc::new(FakeClock::at(ts(0)));
        let policy = ImageGcPolicy {
            max_age: Duration::from_secs(600),
            ..Default::default()
        };
        let (m, _) = manager(rt.clone(), clock.clone(), policy);
        m.garbage_collect().await.unwrap();
        clock.set(ts(601));
        m.garbage_collect().await.unwrap();
        assert_eq!(rt.state.lock().unwrap().removed_images, vec!["sha256:old"]);
    }

    #[tokio::test]
    async fn zero_capacity_is_an_invalid_disk_capacity_event() {
        let rt = Arc::new(FakeRuntime::default());
        let (m, ev) = manager(rt, Arc::new(FakeClock::at(ts(0))), ImageGcPolicy::default());
        let e = m.garbage_collect().await.unwrap_err();
        assert_eq!(e.to_string(), "invalid capacity 0 on image filesystem");
        assert_eq!(ev.events.lock().unwrap()[0].0, "InvalidDiskCapacity");
    }

    #[tokio::test]
    async fn image_gc_failed_event_only_on_repeated_failure() {
        let rt = Arc::new(FakeRuntime::default());
        rt.state.lock().unwrap().fail_list = true;
        let (m, ev) = manager(rt, Arc::new(FakeClock::at(ts(0))), ImageGcPolicy::default());
        tokio::time::pause();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(m.clone().run(Duration::from_secs(300), cancel.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            ev.events.lock().unwrap().is_empty(),
            "one failure: no event"
        );
        tokio::time::sleep(Duration::from_secs(300)).await;
        cancel.cancel();
        task.await.unwrap();
        let ev = ev.events.lock().unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].0, "ImageGCFailed");
        assert!(ev[0].1.contains("listing images"), "{}", ev[0].1);
    }
}
