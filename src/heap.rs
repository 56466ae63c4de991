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
fn shrink_sparse<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if let Some(to) = shrunk_capacity(map.len(), map.capacity()) {
        map.shrink_to(to);
    }
}

/// A `HashMap` of what deckhand keeps per pod or per container, which gives its spare room back
/// by itself: every removal ([`Self::remove`], [`Self::retain`]) shrinks it when it is mostly
/// empty ([`shrunk_capacity`]). Reads go through `Deref` to the `HashMap`; there is no
/// `DerefMut`, so no removal can skip the shrink.
#[derive(Debug)]
pub struct ShrinkingMap<K, V>(HashMap<K, V>);

impl<K, V> Default for ShrinkingMap<K, V> {
    fn default() -> Self {
        Self(HashMap::new())
    }
}

impl<K, V> std::ops::Deref for ShrinkingMap<K, V> {
    type Target = HashMap<K, V>;
    fn deref(&self) -> &HashMap<K, V> {
        &self.0
    }
}

impl<K: Eq + Hash, V> FromIterator<(K, V)> for ShrinkingMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(HashMap::from_iter(iter))
    }
}

impl<K: Eq + Hash, V> ShrinkingMap<K, V> {
    /// An empty map (no allocation until the first insert).
    pub fn new() -> Self {
        Self::default()
    }

    /// `HashMap::insert`.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.0.insert(key, value)
    }

    /// The value of `key`, inserted from `make` first if there is none (`entry().or_insert_with`;
    /// the entry itself is not handed out, as its `remove` would skip the shrink).
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        self.0.entry(key).or_insert_with(make)
    }

    /// `HashMap::get_mut`.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.get_mut(key)
    }

    /// Removes `key`, then shrinks the map if it is mostly empty.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let removed = self.0.remove(key);
        if removed.is_some() {
            shrink_sparse(&mut self.0);
        }
        removed
    }

    /// Keeps the entries `keep` says yes to, then shrinks the map if it is mostly empty.
    pub fn retain(&mut self, keep: impl FnMut(&K, &mut V) -> bool) {
        self.0.retain(keep);
        shrink_sparse(&mut self.0);
    }

    /// Removes every entry and gives the whole table back.
    pub fn clear(&mut self) {
        self.0 = HashMap::new();
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
        let mut m: ShrinkingMap<u32, [u8; 64]> = (0..248).map(|i| (i, [0; 64])).collect();
        let full = m.capacity();
        let mut shrinks = 0;
        for i in 0..248 {
            let before = m.capacity();
            assert!(m.remove(&i).is_some());
            // A removal that leaves a tombstone lowers `capacity()` by one without giving any
            // room back (where it does depends on the random hash seed); a shrink lowers it by
            // far more.
            shrinks += usize::from(m.capacity() + 1 < before);
        }
        assert!(full >= 4 * SHRINK_MIN_CAPACITY, "{full}");
        assert!(m.capacity() < SHRINK_MIN_CAPACITY, "{}", m.capacity());
        assert!((1..=4).contains(&shrinks), "{shrinks} shrinks");
    }

    #[test]
    fn retain_and_clear_give_the_room_back() {
        let mut m: ShrinkingMap<u32, u32> = (0..1000).map(|i| (i, i)).collect();
        m.retain(|k, _| *k < 10);
        assert_eq!(m.len(), 10);
        assert!(m.capacity() < SHRINK_MIN_CAPACITY, "{}", m.capacity());
        // a removal of a key that is not there leaves the map as it is
        let mut small: ShrinkingMap<u32, u32> = (0..100).map(|i| (i, i)).collect();
        let cap = small.capacity();
        assert_eq!(small.remove(&1000), None);
        assert_eq!(small.capacity(), cap);
        small.clear();
        assert_eq!((small.len(), small.capacity()), (0, 0));
    }
}
