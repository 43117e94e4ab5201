//! Where map entries are written: the pinned BPF maps, or memory in tests.

use std::collections::BTreeMap;

use lb_common::{Backend4, Service4Key, ServiceValue};

use super::MapState;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The map has no room for another entry.
    #[error("map {map} is full")]
    Full { map: &'static str },
    #[error("{op} on map {map}: {source}")]
    Io {
        map: &'static str,
        op: &'static str,
        source: std::io::Error,
    },
}

/// A batch write that stopped early: the entries before `written` are in
/// the map, the rest are not.
#[derive(Debug)]
pub struct BatchError {
    pub written: usize,
    pub error: StoreError,
}

/// Entry-level access to the two LB maps.
pub trait MapStore {
    /// Reads both maps in full.
    fn read(&self) -> Result<MapState, StoreError>;
    /// Writes the entries in order; a reader may see any prefix of them.
    fn put_backends(&mut self, entries: &[(u32, Backend4)]) -> Result<(), BatchError>;
    fn delete_backend(&mut self, id: u32) -> Result<(), StoreError>;
    /// Writes the entries in order; a reader may see any prefix of them.
    fn put_services(&mut self, entries: &[(Service4Key, ServiceValue)]) -> Result<(), BatchError>;
    fn delete_service(&mut self, key: &Service4Key) -> Result<(), StoreError>;
}

/// One write, as recorded by [`MemStore`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    PutBackend(u32, Backend4),
    DeleteBackend(u32),
    PutService(Service4Key, ServiceValue),
    DeleteService(Service4Key),
}

/// An in-memory store with the same capacity semantics as a BPF hash map,
/// recording every write so tests can check the order.
#[derive(Clone, Debug)]
pub struct MemStore {
    pub state: MapState,
    pub max_services: usize,
    pub max_backends: usize,
    pub log: Vec<Op>,
}

impl MemStore {
    pub fn new(max_services: usize, max_backends: usize) -> Self {
        Self {
            state: MapState::default(),
            max_services,
            max_backends,
            log: Vec::new(),
        }
    }
}

/// Writes `entries` in order as a BPF hash map of `max` entries would,
/// logging each write; stops at the first that does not fit.
fn put_all<K: Ord + Copy, V: Copy>(
    map: &mut BTreeMap<K, V>,
    max: usize,
    name: &'static str,
    entries: &[(K, V)],
    log: &mut Vec<Op>,
    op: fn(K, V) -> Op,
) -> Result<(), BatchError> {
    for (written, &(k, v)) in entries.iter().enumerate() {
        if !map.contains_key(&k) && map.len() >= max {
            let error = StoreError::Full { map: name };
            return Err(BatchError { written, error });
        }
        map.insert(k, v);
        log.push(op(k, v));
    }
    Ok(())
}

impl MapStore for MemStore {
    fn read(&self) -> Result<MapState, StoreError> {
        Ok(self.state.clone())
    }

    fn put_backends(&mut self, entries: &[(u32, Backend4)]) -> Result<(), BatchError> {
        let (map, max) = (&mut self.state.backends, self.max_backends);
        put_all(map, max, "backends", entries, &mut self.log, Op::PutBackend)
    }

    fn delete_backend(&mut self, id: u32) -> Result<(), StoreError> {
        self.state.backends.remove(&id);
        self.log.push(Op::DeleteBackend(id));
        Ok(())
    }

    fn put_services(&mut self, entries: &[(Service4Key, ServiceValue)]) -> Result<(), BatchError> {
        let (map, max) = (&mut self.state.services, self.max_services);
        put_all(map, max, "services", entries, &mut self.log, Op::PutService)
    }

    fn delete_service(&mut self, key: &Service4Key) -> Result<(), StoreError> {
        self.state.services.remove(key);
        self.log.push(Op::DeleteService(*key));
        Ok(())
    }
}
