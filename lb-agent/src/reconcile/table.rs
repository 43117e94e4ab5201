//! One map as the reconciler sees it: entries to read, write and delete.
//!
//! Every table (LB frontends, states, slots, backends today; affinity,
//! Maglev and NAT tables later) implements [`Table`] twice: over a pinned
//! BPF map (`datapath::table`) and in memory ([`super::mem`]), so the write
//! protocol is tested against the same interface it drives in production.

use std::{fmt::Debug, io};

/// A map key the reconciler can store: plain data, ordered.
pub trait MapKey: aya::Pod + Ord + Debug + Default {}
impl<T: aya::Pod + Ord + Debug + Default> MapKey for T {}

/// A map value the reconciler can store: plain data, comparable.
pub trait MapValue: aya::Pod + PartialEq + Debug + Default {}
impl<T: aya::Pod + PartialEq + Debug + Default> MapValue for T {}

/// Whether a table may hold what an earlier agent wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// Created by this agent just now: empty, so not read.
    Created,
    /// Pinned before: read whole and adopted.
    Pinned,
}

/// How a table's entries may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Insert only: the reconciler never writes a key the table holds. For
    /// hash maps whose elements a program may hold, where replacing a value
    /// swaps the element for a new one and recycles the old at once. The
    /// in-memory tables refuse such a write; the kernel's batch update takes
    /// no `BPF_NOEXIST`, so there the reconciler's mirror is the guarantee.
    Insert,
    /// In place under the value's spin lock (`BPF_F_LOCK`); deleting writes
    /// the all-zero (free) value. For the frontend state array.
    Locked,
}

/// A table's entries, as read.
pub(super) type Entries<T> = Vec<(<T as Table>::Key, <T as Table>::Value)>;

/// Entry-level access to one map.
pub trait Table {
    type Key: Copy + Ord + Debug;
    type Value: Copy + PartialEq + Debug;

    /// The map's name, for errors and logs.
    fn name(&self) -> &'static str;
    /// How writes behave.
    fn mode(&self) -> WriteMode;
    /// Highest number of entries; for an array, one past the highest index.
    fn capacity(&self) -> u32;
    /// Every entry (for an array, every entry that is not all zero).
    fn read(&self) -> Result<Entries<Self>, StoreError>;
    /// Writes `entries` in order; a reader may see any prefix of them. On
    /// failure, says how many were written.
    fn put(&mut self, entries: &[(Self::Key, Self::Value)]) -> Result<(), BatchError>;
    /// Deletes `keys` in order; a key that is already gone is not an error.
    fn delete(&mut self, keys: &[Self::Key]) -> Result<(), BatchError>;
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The map has no room for another entry (or, for an array, the index
    /// is past its end).
    #[error("map {map} is full")]
    Full { map: &'static str },
    /// An insert-only write found its key present: something other than
    /// this reconciler wrote the map.
    #[error("map {map} already holds a key this write inserts")]
    Exists { map: &'static str },
    /// A `bpf()` call this crate makes itself failed.
    #[error("{op} on map {map} failed")]
    Syscall {
        map: &'static str,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// An aya map operation failed.
    #[error("{op} on map {map} failed")]
    Map {
        map: &'static str,
        op: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// A batch write or delete that stopped early: the entries before `written`
/// took effect, the rest did not (`written` is below the batch's length).
#[derive(Debug)]
pub struct BatchError {
    pub written: usize,
    pub error: StoreError,
}
