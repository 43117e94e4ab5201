//! [`Table`] over a pinned BPF map, with batched syscalls.

use std::{fmt::Debug, io, path::Path};

use aya::maps::MapData;
use lb_common::{MAP_TYPE_ARRAY, MapSpec};

use super::{
    batch::{BPF_F_LOCK, Typed},
    decode,
};
use crate::reconcile::{BatchError, MapKey, MapValue, StoreError, Table, Tables, WriteMode};

/// The pinned BPF maps as [`Tables`].
#[derive(Debug)]
pub enum Bpf {}

impl Tables for Bpf {
    type Table<K: MapKey, V: MapValue> = BpfTable<K, V>;
}

/// One pinned map, typed.
#[derive(Debug)]
pub struct BpfTable<K, V> {
    name: &'static str,
    map: Typed<K, V>,
    mode: WriteMode,
    array: bool,
    capacity: u32,
}

impl<K: MapKey, V: MapValue> BpfTable<K, V> {
    /// Opens the map pinned at `path`, which must be `spec`'s map.
    pub fn open(path: &Path, spec: &MapSpec, mode: WriteMode) -> Result<Self, StoreError> {
        let map_err = |op, source| StoreError::Map {
            map: spec.name,
            op,
            source,
        };
        let data = MapData::from_pin(path).map_err(|e| map_err("open pin", e))?;
        let info = data.info().map_err(|e| map_err("read info", e))?;
        // The batch commands fill buffers sized by `K` and `V`: a map of
        // other sizes is refused, in every build.
        let map = Typed::new(data).map_err(|e| map_err("check sizes", e))?;
        Ok(Self {
            name: spec.name,
            map,
            mode,
            array: spec.map_type == MAP_TYPE_ARRAY,
            capacity: info.max_entries(),
        })
    }

    fn error(&self, op: &'static str, e: io::Error) -> StoreError {
        match e.raw_os_error() {
            // A full hash map, or an index past an array's end.
            Some(libc::E2BIG) => StoreError::Full { map: self.name },
            Some(libc::EEXIST) => StoreError::Exists { map: self.name },
            _ => StoreError::Syscall {
                map: self.name,
                op,
                source: e,
            },
        }
    }

    /// The batch commands take no `BPF_NOEXIST`: insert-only writes rest on
    /// the reconciler, which writes only keys its mirror says are absent.
    fn elem_flags(&self) -> u64 {
        match self.mode {
            WriteMode::Insert => 0,
            WriteMode::Locked => BPF_F_LOCK,
        }
    }
}

impl<K: MapKey, V: MapValue> Table for BpfTable<K, V> {
    type Key = K;
    type Value = V;

    fn name(&self) -> &'static str {
        self.name
    }

    fn mode(&self) -> WriteMode {
        self.mode
    }

    fn capacity(&self) -> u32 {
        self.capacity
    }

    fn read(&self) -> Result<Vec<(K, V)>, StoreError> {
        let mut all = self
            .map
            .lookup_all()
            .map_err(|e| self.error("lookup batch", e))?;
        if self.array {
            decode::in_use(&mut all);
        }
        Ok(all)
    }

    fn put(&mut self, entries: &[(K, V)]) -> Result<(), BatchError> {
        let (keys, values): (Vec<K>, Vec<V>) = entries.iter().copied().unzip();
        self.map
            .update(&keys, &values, self.elem_flags())
            .map_err(|(written, e)| BatchError {
                written,
                error: self.error("update batch", e),
            })
    }

    fn delete(&mut self, keys: &[K]) -> Result<(), BatchError> {
        let result = if self.array {
            // An array element cannot go: free it by writing zeros in place.
            let zeros = vec![V::default(); keys.len()];
            self.map.update(keys, &zeros, self.elem_flags())
        } else {
            self.map.delete(keys)
        };
        result.map_err(|(written, e)| BatchError {
            written,
            error: self.error("delete batch", e),
        })
    }
}
