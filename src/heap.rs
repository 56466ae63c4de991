//! Keeping deckhand's heap small after pods come and go (issue 15: RSS idle ≤ 10 MiB, also on a
//! node that has run many pods). glibc's allocator keeps what a burst allocated; the heap trim
//! ([`crate::pod::housekeeping::trim_heap`]) gives back only whole free pages, and a few
//! long-lived allocations left behind by a burst pin the pages around them.

use std::collections::HashMap;
use std::hash::Hash;

/// Maps smaller than this many slots are never shrunk: they cost less than a page.
pub const SHRINK_MIN_CAPACITY: usize = 64;

/// The capacity a map with `len` entries and room for `capacity` should shrink to, if any: when
/// at most a quarter of a map of [`SHRINK_MIN_CAPACITY`] slots or more is used, to twice its
/// length (so removing one entry at a time shrinks it only every time it halves). A `HashMap`
/// never gives back its table by itself: after 248 pods were deleted, the tables sized for them
/// (status manager, pod workers, startup-latency tracker, …) held ~0.7 MB (heaptrack,
/// 2026-12-06).
pub fn shrunk_capacity(len: usize, capacity: usize) -> Option<usize> {
    (capacity >= SHRINK_MIN_CAPACITY && len.saturating_mul(4) <= capacity).then(|| len * 2)
}

/// Shrinks `map` after removals if it is mostly empty ([`shrunk_capacity`]).
pub fn shrink_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if let Some(to) = shrunk_capacity(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mostly_empty_map_shrinks_to_twice_its_length() {
        // (len, capacity, expected)
        for (len, capacity, want) in [
            (0, 0, None),
            (0, 28, None), // small: never
            (0, 448, Some(0)),
            (16, 64, Some(32)),
            (17, 64, None),
            (56, 224, Some(112)),
            (57, 224, None),
            (248, 448, None), // full
        ] {
            assert_eq!(shrunk_capacity(len, capacity), want, "{len} of {capacity}");
        }
    }

    #[test]
    fn removing_entries_one_by_one_shrinks_the_table_a_few_times() {
        let mut m: HashMap<u32, [u8; 64]> = (0..248).map(|i| (i, [0; 64])).collect();
        let full = m.capacity();
        let mut shrinks = 0;
        for i in 0..248 {
            m.remove(&i);
            let before = m.capacity();
            shrink_sparse(&mut m);
            shrinks += usize::from(m.capacity() < before);
        }
        assert!(full >= 4 * SHRINK_MIN_CAPACITY, "{full}");
        assert!(m.capacity() < SHRINK_MIN_CAPACITY, "{}", m.capacity());
        assert!((1..=4).contains(&shrinks), "{shrinks} shrinks");
    }
}
