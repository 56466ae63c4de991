//! Image garbage collection: unused images go, least recently used first, when the image
//! filesystem is fuller than the high threshold, until it is down to the low threshold; unused
//! images older than a maximum age go regardless (k/k `pkg/kubelet/images/image_gc_manager.go`).
//!
//! What is in use and when it was last used is tracked in memory ([`detect`]), as the Go
//! kubelet does: after a restart every image counts as first seen at the first detection.
//! The choices are pure ([`eviction_order`], [`space_to_free`], [`eligible_for_space`],
//! [`older_than_max_age`]); [`ImageGcManager`] carries them out.

pub use super::image_plan::*;

use super::{aggregate_strings, EventSink, GcError, GcRuntime};
use crate::time::Clock;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

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
        // image volumes count as in use (k/k handleImageVolumes: a failed status fails the
        // round, so an image is never removed because its user could not be asked)
        let mut mounted = Vec::new();
        for c in &containers {
            let m = i
                .runtime
                .container_image_mounts(&c.id)
                .await
                .map_err(|source| GcError::Runtime {
                    op: "getting a container's image volume mounts",
                    source,
                })?;
            mounted.extend(m);
        }
        let in_use = images_in_use(&containers, &mounted);
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
    use crate::gc::image_plan::tests::{ctr, img, ts, GI};
    use crate::gc::testing::*;
    use crate::gc::{ContainerState, ImageFsStats};

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
