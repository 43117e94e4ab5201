//! The four load-balancing tables of one address family, mirrored, with the
//! indexes the write protocol needs. Every write goes through the methods
//! here, so the indexes never drift from the content.

use std::{
    collections::BTreeMap,
    hash::{Hash as _, Hasher as _},
    ops::RangeInclusive,
};

use foldhash::HashMap;

use lb_common::{FrontendId, MaglevChunk, MaglevKey, Member, MemberKey, Slot, SlotKey};

use crate::model::maglev::MaglevParams;

use super::{
    family::{Family, StateView},
    ids::{Counts, IdPool},
    mirror::Mirror,
    table::{BatchError, Found, MapKey, MapValue, StoreError, Table},
};

/// A kind of table: the pinned BPF maps, or memory.
pub trait Tables {
    type Table<K: MapKey, V: MapValue>: Table<Key = K, Value = V>;
}

/// The load-balancing tables of one family, as opened.
pub struct LbTables<F: Family, T: Tables> {
    pub frontends: T::Table<F::FrontendKey, FrontendId>,
    pub states: T::Table<u32, F::State>,
    pub slots: T::Table<SlotKey, Slot>,
    pub members: T::Table<MemberKey, Member>,
    pub backends: T::Table<u32, F::Backend>,
    pub maglev: T::Table<MaglevKey, MaglevChunk>,
}

/// Every slot key of revision `rev` of frontend `fe_id`.
///
/// Relies on `SlotKey`'s derived order, which compares `fe_id`, then `rev`,
/// then `slot` (field order); `tests::slot_keys_sort_by_frontend_then_revision`
/// checks it.
pub fn set_range(fe_id: u32, rev: u16) -> RangeInclusive<SlotKey> {
    SlotKey {
        fe_id,
        rev,
        slot: 0,
    }..=SlotKey {
        fe_id,
        rev,
        slot: u16::MAX,
    }
}

/// Every member key of revision `rev` of frontend `fe_id` (derived order:
/// `fe_id`, `rev`, padding, `backend_id`).
pub fn member_range(fe_id: u32, rev: u16) -> RangeInclusive<MemberKey> {
    MemberKey {
        fe_id,
        rev,
        _pad0: [0; 2],
        backend_id: 0,
    }..=MemberKey {
        fe_id,
        rev,
        _pad0: [u8::MAX; 2],
        backend_id: u32::MAX,
    }
}

/// Every chunk key of the Maglev table of revision `rev` of frontend
/// `fe_id` (derived order: `fe_id`, `rev`, `chunk`).
pub(super) fn chunk_range(fe_id: u32, rev: u16) -> RangeInclusive<MaglevKey> {
    MaglevKey {
        fe_id,
        rev,
        chunk: 0,
    }..=MaglevKey {
        fe_id,
        rev,
        chunk: u16::MAX,
    }
}

pub struct LbMaps<F: Family, T: Tables> {
    frontends: Mirror<T::Table<F::FrontendKey, FrontendId>>,
    states: Mirror<T::Table<u32, F::State>>,
    slots: Mirror<T::Table<SlotKey, Slot>>,
    members: Mirror<T::Table<MemberKey, Member>>,
    backends: Mirror<T::Table<u32, F::Backend>>,
    /// Maglev tables: each chunk's key and a digest of its content (a
    /// table is rebuilt from its revision's backends whenever needed; its
    /// content is not kept, only enough to tell whether the map holds the
    /// table this agent builds).
    maglev: T::Table<MaglevKey, MaglevChunk>,
    maglev_chunks: BTreeMap<MaglevKey, ChunkDigest>,
    /// What the tables are built with.
    params: MaglevParams,
    /// Backend address -> its id.
    id_of: HashMap<F::Backend, u32>,
    /// Backend id -> how many slots name it.
    backend_refs: Counts,
    /// (frontend id, revision) -> slots present.
    set_sizes: BTreeMap<(u32, u16), u32>,
    /// Frontend id -> frontend entries, states and revisions naming it. An
    /// id is free for reuse only when nothing names it.
    fe_uses: Counts,
    fe_ids: IdPool,
    backend_ids: IdPool,
}

impl<F: Family, T: Tables> LbMaps<F, T> {
    /// Reads all the tables (unless just created) and indexes them.
    pub fn adopt(
        tables: LbTables<F, T>,
        found: Found,
        params: MaglevParams,
    ) -> Result<Self, StoreError> {
        let maglev_chunks = match found {
            Found::Created => BTreeMap::new(),
            Found::Pinned => chunk_digests(&tables.maglev)?,
        };
        let mut maps = Self {
            frontends: Mirror::adopt(tables.frontends, found)?,
            states: Mirror::adopt(tables.states, found)?,
            slots: Mirror::adopt(tables.slots, found)?,
            members: Mirror::adopt(tables.members, found)?,
            backends: Mirror::adopt(tables.backends, found)?,
            maglev: tables.maglev,
            maglev_chunks,
            params,
            id_of: HashMap::default(),
            backend_refs: Counts::default(),
            set_sizes: BTreeMap::new(),
            fe_uses: Counts::default(),
            fe_ids: IdPool::default(),
            backend_ids: IdPool::default(),
        };
        maps.index_all();
        Ok(maps)
    }

    /// Indexes what the mirrors hold, into empty indexes.
    fn index_all(&mut self) {
        let maps = self;
        let backends: Vec<_> = maps
            .backends
            .content()
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        for (id, b) in backends {
            maps.index_backend(id, &b, true);
        }
        let slots: Vec<_> = maps.slots.content().iter().map(|(k, v)| (*k, *v)).collect();
        for (k, s) in slots {
            maps.index_slot(&k, &s, true);
        }
        let ids: Vec<u32> = maps.states.content().keys().copied().collect();
        let fe: Vec<u32> = maps.frontends.content().values().map(|v| v.id).collect();
        for id in ids.into_iter().chain(fe) {
            maps.fe_use(id, 1);
        }
    }

    /// Reads all the tables again and rebuilds the indexes; on error
    /// nothing changes.
    pub fn reload(&mut self) -> Result<(), StoreError> {
        let frontends = self.frontends.reread()?;
        let states = self.states.reread()?;
        let slots = self.slots.reread()?;
        let members = self.members.reread()?;
        let backends = self.backends.reread()?;
        let maglev_chunks = chunk_digests(&self.maglev)?;
        self.maglev_chunks = maglev_chunks;
        self.frontends.set_content(frontends);
        self.states.set_content(states);
        self.slots.set_content(slots);
        self.members.set_content(members);
        self.backends.set_content(backends);
        self.id_of.clear();
        self.backend_refs.clear();
        self.set_sizes.clear();
        self.fe_uses.clear();
        self.fe_ids = IdPool::default();
        self.backend_ids = IdPool::default();
        self.index_all();
        Ok(())
    }

    /// The frontends table itself; see [`Mirror::table_mut`].
    #[cfg(test)]
    pub fn frontends_table_mut(&mut self) -> &mut T::Table<F::FrontendKey, FrontendId> {
        self.frontends.table_mut()
    }

    // ------------------------------------------------------------ queries

    pub fn frontends(&self) -> &BTreeMap<F::FrontendKey, FrontendId> {
        self.frontends.content()
    }

    pub fn states(&self) -> &BTreeMap<u32, F::State> {
        self.states.content()
    }

    pub fn slots(&self) -> &BTreeMap<SlotKey, Slot> {
        self.slots.content()
    }

    pub fn backends(&self) -> &BTreeMap<u32, F::Backend> {
        self.backends.content()
    }

    pub fn members(&self) -> &BTreeMap<MemberKey, Member> {
        self.members.content()
    }

    /// Every Maglev chunk in the map: its key and [`chunk_digest`].
    pub fn maglev_chunks(&self) -> &BTreeMap<MaglevKey, ChunkDigest> {
        &self.maglev_chunks
    }

    /// The Maglev map itself.
    #[cfg(test)]
    pub fn maglev_table(&self) -> &T::Table<MaglevKey, MaglevChunk> {
        &self.maglev
    }

    /// What Maglev tables are built with.
    pub fn params(&self) -> MaglevParams {
        self.params
    }

    /// Whether the map holds exactly the chunks whose digests are
    /// `digests`, in order, as revision `rev` of frontend `id`'s Maglev
    /// table (none: no table). A table built with other settings (another
    /// seed, after a restart) differs in content, not only in size.
    pub fn holds_table(&self, id: u32, rev: u16, digests: &[ChunkDigest]) -> bool {
        let held = self.maglev_chunks.range(chunk_range(id, rev));
        held.map(|(k, d)| (usize::from(k.chunk), *d))
            .eq(digests.iter().copied().enumerate())
    }

    /// The state of `id`, if it is not free.
    pub fn state(&self, id: u32) -> Option<StateView<F::FrontendKey>> {
        self.states.get(&id).map(F::view)
    }

    /// The id and state of frontend `key` when the two agree: the frontend
    /// entry names an id whose state names `key` back.
    pub fn live(&self, key: &F::FrontendKey) -> Option<(u32, StateView<F::FrontendKey>)> {
        let id = self.frontends.get(key)?.id;
        let state = self.state(id)?;
        (state.owner == *key).then_some((id, state))
    }

    /// The backend ids of revision `rev` of frontend `id`, if the revision
    /// has all its `count` slots and every backend they name exists with
    /// protocol `proto`: what a program reading this revision gets.
    pub fn complete_set(&self, id: u32, rev: u16, count: u16, proto: u8) -> Option<Vec<u32>> {
        (0..count)
            .map(|slot| {
                let b = self.slots.get(&SlotKey {
                    fe_id: id,
                    rev,
                    slot,
                })?;
                let backend = self.backends.get(&b.backend_id)?;
                (F::backend_proto(backend) == proto).then_some(b.backend_id)
            })
            .collect()
    }

    /// Revisions of frontend `id` with slots in the map.
    pub fn revs(&self, id: u32) -> impl Iterator<Item = u16> + '_ {
        self.set_sizes
            .range((id, 0)..=(id, u16::MAX))
            .map(|((_, rev), _)| *rev)
    }

    /// Every (frontend id, revision) with slots in the map.
    pub fn sets(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.set_sizes.keys().copied()
    }

    /// The revision after `rev` that has no slots in the map yet.
    pub fn next_rev(&self, id: u32, rev: u16) -> u16 {
        let mut next = rev.wrapping_add(1);
        // Terminates: a frontend holds far fewer than 2^16 revisions at once.
        while self.set_sizes.contains_key(&(id, next)) {
            next = next.wrapping_add(1);
        }
        next
    }

    pub fn id_of(&self, backend: &F::Backend) -> Option<u32> {
        self.id_of.get(backend).copied()
    }

    pub fn is_referenced(&self, backend_id: u32) -> bool {
        self.backend_refs.named(backend_id)
    }

    /// Whether anything names frontend id `id`.
    pub fn fe_id_in_use(&self, id: u32) -> bool {
        self.fe_uses.named(id)
    }

    /// Reserves the lowest unused frontend id the state array has room for.
    pub fn allocate_fe_id(&mut self) -> Option<u32> {
        self.fe_ids.allocate(self.states.table().capacity())
    }

    /// Reserves the lowest unused backend id.
    pub fn allocate_backend_id(&mut self) -> Option<u32> {
        self.backend_ids.allocate(u32::MAX)
    }

    /// Returns reserved ids that ended up unused.
    pub fn release_if_unused(&mut self, fe_ids: &[u32], backend_ids: &[u32]) {
        for id in fe_ids {
            if !self.fe_uses.named(*id) {
                self.fe_ids.release(*id);
            }
        }
        for id in backend_ids {
            if !self.backends.content().contains_key(id) {
                self.backend_ids.release(*id);
            }
        }
    }

    // ------------------------------------------------------------- writes

    pub fn put_backends(&mut self, entries: &[(u32, F::Backend)]) -> Result<(), BatchError> {
        let result = self.backends.put(entries);
        for (id, b) in &entries[..written(&result, entries.len())] {
            self.index_backend(*id, b, true);
        }
        result
    }

    pub fn delete_backends(&mut self, ids: &[u32]) -> Result<(), BatchError> {
        let olds: Vec<_> = ids
            .iter()
            .map(|id| self.backends.get(id).copied())
            .collect();
        let result = self.backends.delete(ids);
        for (id, old) in ids.iter().zip(olds).take(written(&result, ids.len())) {
            if let Some(b) = old {
                self.index_backend(*id, &b, false);
            }
        }
        result
    }

    pub fn put_slots(&mut self, entries: &[(SlotKey, Slot)]) -> Result<(), BatchError> {
        let result = self.slots.put(entries);
        for (k, s) in &entries[..written(&result, entries.len())] {
            self.index_slot(k, s, true);
        }
        result
    }

    pub fn delete_slots(&mut self, keys: &[SlotKey]) -> Result<(), BatchError> {
        let olds: Vec<_> = keys.iter().map(|k| self.slots.get(k).copied()).collect();
        let result = self.slots.delete(keys);
        for (k, old) in keys.iter().zip(olds).take(written(&result, keys.len())) {
            if let Some(s) = old {
                self.index_slot(k, &s, false);
            }
        }
        result
    }

    /// Members are no index's concern: they exist only beside the slots of
    /// their revision, which the indexes count.
    pub fn put_members(&mut self, entries: &[(MemberKey, Member)]) -> Result<(), BatchError> {
        self.members.put(entries)
    }

    pub fn delete_members(&mut self, keys: &[MemberKey]) -> Result<(), BatchError> {
        self.members.delete(keys)
    }

    /// Chunks, like members, are no index's concern.
    pub fn put_chunks(&mut self, entries: &[(MaglevKey, MaglevChunk)]) -> Result<(), BatchError> {
        let result = self.maglev.put(entries);
        let done = written(&result, entries.len());
        self.maglev_chunks
            .extend(entries[..done].iter().map(|(k, v)| (*k, chunk_digest(v))));
        result
    }

    pub fn delete_chunks(&mut self, keys: &[MaglevKey]) -> Result<(), BatchError> {
        let result = self.maglev.delete(keys);
        for k in &keys[..written(&result, keys.len())] {
            self.maglev_chunks.remove(k);
        }
        result
    }

    /// Writes states in place (under their locks).
    pub fn put_states(&mut self, entries: &[(u32, F::State)]) -> Result<(), BatchError> {
        let fresh: Vec<bool> = entries
            .iter()
            .map(|(id, _)| self.states.get(id).is_none())
            .collect();
        let result = self.states.put(entries);
        for ((id, _), fresh) in entries
            .iter()
            .zip(fresh)
            .take(written(&result, entries.len()))
        {
            if fresh {
                self.fe_use(*id, 1);
            }
        }
        result
    }

    /// Frees states: writes the all-zero value, whose owner no key matches.
    pub fn free_states(&mut self, ids: &[u32]) -> Result<(), BatchError> {
        let present: Vec<bool> = ids.iter().map(|id| self.states.get(id).is_some()).collect();
        let result = self.states.delete(ids);
        for (id, present) in ids.iter().zip(present).take(written(&result, ids.len())) {
            if present {
                self.fe_use(*id, -1);
            }
        }
        result
    }

    pub fn put_frontends(
        &mut self,
        entries: &[(F::FrontendKey, FrontendId)],
    ) -> Result<(), BatchError> {
        let result = self.frontends.put(entries);
        for (_, v) in &entries[..written(&result, entries.len())] {
            self.fe_use(v.id, 1);
        }
        result
    }

    pub fn delete_frontends(&mut self, keys: &[F::FrontendKey]) -> Result<(), BatchError> {
        let olds: Vec<_> = keys
            .iter()
            .map(|k| self.frontends.get(k).copied())
            .collect();
        let result = self.frontends.delete(keys);
        for old in olds
            .into_iter()
            .take(written(&result, keys.len()))
            .flatten()
        {
            self.fe_use(old.id, -1);
        }
        result
    }

    // ------------------------------------------------------------ indexes

    fn index_backend(&mut self, id: u32, b: &F::Backend, present: bool) {
        if present {
            self.id_of.entry(*b).or_insert(id);
            self.backend_ids.take(id);
        } else {
            if self.id_of.get(b) == Some(&id) {
                self.id_of.remove(b);
            }
            self.backend_ids.release(id);
        }
    }

    fn index_slot(&mut self, k: &SlotKey, s: &Slot, present: bool) {
        let delta = if present { 1 } else { -1 };
        self.backend_refs.bump(s.backend_id, delta);
        let set = (k.fe_id, k.rev);
        let before = self.set_sizes.get(&set).copied().unwrap_or(0);
        let after = before.saturating_add_signed(delta);
        if after == 0 {
            self.set_sizes.remove(&set);
        } else {
            self.set_sizes.insert(set, after);
        }
        match (before, after) {
            (0, 1..) => self.fe_use(k.fe_id, 1),
            (1.., 0) => self.fe_use(k.fe_id, -1),
            _ => {}
        }
    }

    fn fe_use(&mut self, id: u32, delta: i32) {
        if self.fe_uses.bump(id, delta) {
            if delta > 0 {
                self.fe_ids.take(id);
            } else {
                self.fe_ids.release(id);
            }
        }
    }
}

/// What the mirror keeps of a Maglev chunk's content: a 64-bit hash of
/// its entries, enough to tell a table built with other settings from
/// this agent's (a chance of 2^-64 per chunk to miss a difference).
pub(super) type ChunkDigest = u64;

/// The digest of `chunk`: SipHash with fixed keys, the same for the same
/// content within a run (never stored).
pub(super) fn chunk_digest(chunk: &MaglevChunk) -> ChunkDigest {
    let mut h = std::hash::DefaultHasher::new();
    chunk.backend_ids.hash(&mut h);
    h.finish()
}

/// The key and digest of every chunk `table` holds. Reads the chunks
/// whole (1 KiB each) and keeps only their keys and digests.
fn chunk_digests<T: Table<Key = MaglevKey, Value = MaglevChunk>>(
    table: &T,
) -> Result<BTreeMap<MaglevKey, ChunkDigest>, StoreError> {
    Ok(table
        .read()?
        .into_iter()
        .map(|(k, v)| (k, chunk_digest(&v)))
        .collect())
}

/// How many entries of a batch took effect.
fn written(result: &Result<(), BatchError>, all: usize) -> usize {
    result.as_ref().map_or_else(|e| e.written, |()| all)
}
