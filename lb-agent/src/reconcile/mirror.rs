//! What the maps hold, with the indexes that keep a partial reconcile
//! proportional to the frontends it touches rather than to the map size.

use std::collections::{BTreeSet, HashMap};

use lb_common::{Backend4, Service4Key, ServiceValue};

use super::MapState;

/// The reconciler's copy of the maps. All writes go through the methods
/// below so the indexes never drift from the content.
#[derive(Debug, Default)]
pub(super) struct Mirror {
    state: MapState,
    /// Backend address -> its id.
    id_of: HashMap<Backend4, u32>,
    /// Backend id -> how many slots (1..n) name it.
    refs: HashMap<u32, u32>,
    backend_ids: IdPool,
    svc_ids: IdPool,
}

impl Mirror {
    pub fn new(state: MapState) -> Self {
        let mut m = Mirror::default();
        for (id, b) in &state.backends {
            m.index_backend(*id, b);
        }
        for (k, v) in &state.services {
            m.index_service(k, v, 1);
        }
        m.state = state;
        m
    }

    pub fn state(&self) -> &MapState {
        &self.state
    }

    pub fn id_of(&self, b: &Backend4) -> Option<u32> {
        self.id_of.get(b).copied()
    }

    pub fn is_referenced(&self, id: u32) -> bool {
        self.refs.get(&id).is_some_and(|n| *n > 0)
    }

    pub fn backend_ids(&self) -> &IdPool {
        &self.backend_ids
    }

    pub fn svc_ids(&self) -> &IdPool {
        &self.svc_ids
    }

    pub fn put_backend(&mut self, id: u32, b: Backend4) {
        if let Some(old) = self.state.backends.insert(id, b) {
            self.unindex_backend(id, &old);
        }
        self.index_backend(id, &b);
    }

    pub fn remove_backend(&mut self, id: u32) {
        if let Some(old) = self.state.backends.remove(&id) {
            self.unindex_backend(id, &old);
        }
    }

    pub fn put_service(&mut self, k: Service4Key, v: ServiceValue) {
        if let Some(old) = self.state.services.insert(k, v) {
            self.index_service(&k, &old, -1);
        }
        self.index_service(&k, &v, 1);
    }

    pub fn remove_service(&mut self, k: &Service4Key) {
        if let Some(old) = self.state.services.remove(k) {
            self.index_service(k, &old, -1);
        }
    }

    fn index_backend(&mut self, id: u32, b: &Backend4) {
        self.id_of.insert(*b, id);
        self.backend_ids.take(id);
    }

    fn unindex_backend(&mut self, id: u32, b: &Backend4) {
        if self.id_of.get(b) == Some(&id) {
            self.id_of.remove(b);
        }
        self.backend_ids.release(id);
    }

    fn index_service(&mut self, k: &Service4Key, v: &ServiceValue, delta: i32) {
        if k.slot == 0 {
            if delta > 0 {
                self.svc_ids.take(v.svc_id);
            } else {
                self.svc_ids.release(v.svc_id);
            }
            return;
        }
        let n = self.refs.entry(v.backend_id).or_default();
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            self.refs.remove(&v.backend_id);
        }
    }
}

/// More ids than any map holds (the largest has 262,144 entries).
const MAX_INDEXED_GAP: u32 = 1 << 20;

/// The ids in use, for handing out the lowest free one (from 1) in O(log n).
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
    fn take(&mut self, id: u32) {
        if id >= self.next {
            // The agent hands out dense ids; a far larger one was written by
            // something else. It is set aside instead of indexing the gap
            // below it, so an adopted id near u32::MAX cannot exhaust memory.
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

    fn release(&mut self, id: u32) {
        if self.far.remove(&id) {
            return;
        }
        if id < self.next {
            self.free.insert(id);
        }
    }

    /// Hands out the lowest free id not below `floor`, and moves `floor` past
    /// it. Ids handed out earlier in a pass all lie below `floor`, so a pass
    /// never hands out one id twice, in O(log n) per id.
    pub fn lowest_free(&self, floor: &mut u32) -> u32 {
        let mut id = match self.free.range(*floor..).next() {
            Some(id) => *id,
            None => self.next.max(*floor),
        };
        while self.far.contains(&id) {
            id += 1;
        }
        *floor = id.checked_add(1).expect("fewer than 2^32 ids in use");
        id
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
        let mut floor = 1;
        assert_eq!(pool.lowest_free(&mut floor), 1);
        assert_eq!(pool.lowest_free(&mut floor), 3);
        pool.release(u32::MAX);
        assert!(pool.far.is_empty());
    }
}
