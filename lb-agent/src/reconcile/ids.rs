//! Handing out dense ids (frontend ids, backend ids) from 1.

use std::collections::BTreeSet;

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

#[cfg(test)]
mod tests {
    use super::*;

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
