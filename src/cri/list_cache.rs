//! The last unfiltered `ListPodSandbox` and `ListContainers` answers, shared by every clone of a
//! [`super::CriClient`], so that the periodic loops that want the whole list (housekeeping's
//! orphan sweep every 2 s, log rotation every 10 s) reuse the PLEG's relist (every 5 s) instead
//! of asking the runtime again. This is what the Go kubelet's runtime cache
//! (k/k `pkg/kubelet/container/runtime_cache.go`, refreshed when older than 2 s) is for.
//!
//! A reader says how recent a list it accepts ([`fresh_enough`]): one *started* at or after
//! `after`. A list is stamped with the time its call started, so a list accepted for `after`
//! shows every change made before `after`.

use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// Whether a list whose call started at `taken` may answer a reader that needs one started at or
/// after `after`.
pub fn fresh_enough(taken: Instant, after: Instant) -> bool {
    taken >= after
}

/// The last whole list of `T` and when its call started.
#[derive(Debug)]
pub struct ListCache<T> {
    last: Mutex<Option<(Instant, Arc<Vec<T>>)>>,
}

impl<T> Default for ListCache<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
        }
    }
}

impl<T: Clone> ListCache<T> {
    /// The cached list if its call started at or after `after`.
    pub fn get(&self, after: Instant) -> Option<Vec<T>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((taken, list)) if fresh_enough(*taken, after) => Some(list.as_ref().clone()),
            _ => None,
        }
    }

    /// Whether any item of the cached list satisfies `pred`, if the list's call started at or
    /// after `after` (None: no such list; the caller asks the runtime). Reads the list in place.
    pub fn any(&self, after: Instant, pred: impl Fn(&T) -> bool) -> Option<bool> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match &*last {
            Some((taken, list)) if fresh_enough(*taken, after) => Some(list.iter().any(pred)),
            _ => None,
        }
    }

    /// Records a whole list whose call started at `taken`, unless a newer one is already kept
    /// (two calls may finish out of order).
    pub fn put(&self, taken: Instant, list: &[T]) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref().is_some_and(|(t, _)| *t > taken) {
            return;
        }
        *last = Some((taken, Arc::new(list.to_vec())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_list_answers_readers_that_need_one_started_no_later_than_it() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // (list started, reader needs one started at or after, answered from the cache)
        for (taken, after, want) in [
            (t0, t0, true),
            (t0 + s(3), t0, true),
            (t0, t0 + s(1), false),
        ] {
            assert_eq!(fresh_enough(taken, after), want, "{taken:?} {after:?}");
        }
    }

    #[test]
    fn the_newest_list_is_kept_when_calls_finish_out_of_order() {
        let t0 = Instant::now();
        let c = ListCache::default();
        assert_eq!(c.get(t0), None);
        c.put(t0 + Duration::from_secs(2), &[2]);
        c.put(t0 + Duration::from_secs(1), &[1]);
        assert_eq!(c.get(t0), Some(vec![2]));
        assert_eq!(c.get(t0 + Duration::from_secs(2)), Some(vec![2]));
        assert_eq!(c.get(t0 + Duration::from_secs(3)), None);
    }

    #[test]
    fn any_answers_only_from_a_list_recent_enough() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let c = ListCache::default();
        assert_eq!(c.any(t0, |_: &i32| true), None, "nothing listed yet");
        c.put(t0 + s(1), &[1, 2, 3]);
        // (reader needs a list started at or after, item wanted, answer)
        for (after, want_item, answer) in [
            (t0, 2, Some(true)),
            (t0, 7, Some(false)),
            (t0 + s(1), 3, Some(true)),
            (t0 + s(2), 2, None),
        ] {
            assert_eq!(
                c.any(after, |x| *x == want_item),
                answer,
                "{after:?} {want_item}"
            );
        }
        let empty = ListCache::<i32>::default();
        empty.put(t0, &[]);
        assert_eq!(
            empty.any(t0, |_| true),
            Some(false),
            "an empty list answers no"
        );
    }
}
