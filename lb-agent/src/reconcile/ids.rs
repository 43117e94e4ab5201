//! Handing out dense ids (frontend ids, backend ids) from 1, and counting
//! what names each.

use std::collections::BTreeSet;

use foldhash::HashMap;

/// More ids than any map holds. An id far above the dense range was written
/// by something else; it is set aside instead of indexing the gap below it.
const MAX_INDEXED_GAP: u32 = 1 << 20;

/// The ids in use, for handing out the lowest free one in O(log n).
#[derive(Debug)]
pub(super) struct IdPool {
    /// Free ids below `next`.
    free: BTreeSet<u32>,
    /// Every id from here up is free, but for those in `far`.
    next: u32,
    /// In-use ids far above `next`.
    far: BTreeSet<u32>,
}

impl Default for IdPool {
    fn default() -> Self {
        Self {
            free: BTreeSet::new(),
            next: 1,
            far: BTreeSet::new(),
        }
    }
}

impl IdPool {
    /// Marks `id` in use.
    pub(super) fn take(&mut self, id: u32) {
        if id >= self.next {
            if id - self.next > MAX_INDEXED_GAP {
                self.far.insert(id);
                return;
            }
            self.free.extend(self.next..id);
            self.next = id + 1;
        } else {
            self.free.remove(&id);
        }
    }

    /// Marks `id` free.
    pub(super) fn release(&mut self, id: u32) {
        if self.far.remove(&id) {
            return;
        }
        if id < self.next {
            self.free.insert(id);
        }
    }

    /// Takes the lowest free id below `limit`, if there is one.
    pub(super) fn allocate(&mut self, limit: u32) -> Option<u32> {
        let mut id = self.free.first().copied().unwrap_or(self.next);
        while self.far.contains(&id) {
            id += 1;
        }
        (id < limit).then(|| {
            self.take(id);
            id
        })
    }
}

/// How many things name each id: a vector over the dense ids the agent
/// hands out (4 bytes an id, where a hash map took about 18 at 1,000,000
/// backends), a map for ids far above them (written by something else).
#[derive(Debug, Default)]
pub(super) struct Counts {
    dense: Vec<u32>,
    far: HashMap<u32, u32>,
}

impl Counts {
    /// Whether anything names `id`.
    pub(super) fn named(&self, id: u32) -> bool {
        self.far.contains_key(&id) || self.dense.get(id as usize).is_some_and(|n| *n > 0)
    }

    /// Adds `delta` to `id`'s count: whether it went from or to zero.
    pub(super) fn bump(&mut self, id: u32, delta: i32) -> bool {
        // The vector grows over gaps of up to MAX_INDEXED_GAP, as `IdPool`
        // indexes them; an id counted far stays far until it is at zero.
        let far =
            self.far.contains_key(&id) || id as usize > self.dense.len() + MAX_INDEXED_GAP as usize;
        let n = if far {
            self.far.entry(id).or_default()
        } else {
            if self.dense.len() <= id as usize {
                self.dense.resize(id as usize + 1, 0);
            }
            &mut self.dense[id as usize]
        };
        let was_zero = *n == 0;
        *n = n.saturating_add_signed(delta);
        let is_zero = *n == 0;
        if is_zero && far {
            self.far.remove(&id);
        }
        was_zero != is_zero
    }

    pub(super) fn clear(&mut self) {
        self.dense.clear();
        self.far.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cross_zero_dense_and_far_alike() {
        let mut counts = Counts::default();
        for id in [5, u32::MAX] {
            assert!(!counts.named(id));
            assert!(counts.bump(id, 1), "{id}: from zero");
            assert!(!counts.bump(id, 1), "{id}: 1 to 2");
            assert!(counts.named(id));
            assert!(!counts.bump(id, -1), "{id}: 2 to 1");
            assert!(counts.bump(id, -1), "{id}: to zero");
            assert!(!counts.named(id));
            assert!(!counts.bump(id, -1), "{id}: stays at zero");
        }
        assert_eq!(counts.dense.len(), 6, "no room for the far id");
        assert!(counts.far.is_empty());

        // A far id that the vector then grows over is still counted once.
        let far = 3 * MAX_INDEXED_GAP;
        assert!(counts.bump(far, 1));
        for id in [MAX_INDEXED_GAP, 2 * MAX_INDEXED_GAP, far + 1] {
            counts.bump(id, 1);
        }
        assert!(counts.dense.len() > far as usize);
        assert!(counts.named(far));
        assert!(counts.bump(far, -1), "to zero");
        assert!(!counts.named(far));
        assert!(counts.far.is_empty());
    }

    #[test]
    fn a_foreign_huge_id_neither_exhausts_memory_nor_is_handed_out_twice() {
        let mut pool = IdPool::default();
        pool.take(2);
        pool.take(u32::MAX);
        assert!(
            pool.free.len() <= 1,
            "gap below a huge id must not be indexed"
        );
        assert_eq!(pool.allocate(u32::MAX), Some(1));
        assert_eq!(pool.allocate(u32::MAX), Some(3));
        pool.release(u32::MAX);
        assert!(pool.far.is_empty());
    }

    #[test]
    fn released_ids_come_back_lowest_first_and_the_limit_holds() {
        let mut pool = IdPool::default();
        assert_eq!(pool.allocate(4), Some(1));
        assert_eq!(pool.allocate(4), Some(2));
        assert_eq!(pool.allocate(4), Some(3));
        assert_eq!(pool.allocate(4), None, "ids below 4 only");
        pool.release(2);
        assert_eq!(pool.allocate(4), Some(2));
    }
}
