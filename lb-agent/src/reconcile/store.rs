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

fn put<K: Ord, V>(
    map: &mut BTreeMap<K, V>,
    max: usize,
    name: &'static str,
    k: K,
    v: V,
) -> Result<(), StoreError> {
    if !map.contains_key(&k) && map.len() >= max {
        return Err(StoreError::Full { map: name });
    }
    map.insert(k, v);
    Ok(())
}

impl MapStore for MemStore {
    fn read(&self) -> Result<MapState, StoreError> {
        Ok(self.state.clone())
    }

    fn put_backends(&mut self, entries: &[(u32, Backend4)]) -> Result<(), BatchError> {
        for (written, (id, value)) in entries.iter().enumerate() {
            put(
                &mut self.state.backends,
                self.max_backends,
                "backends",
                *id,
                *value,
            )
            .map_err(|error| BatchError { written, error })?;
            self.log.push(Op::PutBackend(*id, *value));
        }
        Ok(())
    }

    fn delete_backend(&mut self, id: u32) -> Result<(), StoreError> {
        self.state.backends.remove(&id);
        self.log.push(Op::DeleteBackend(id));
        Ok(())
    }

    fn put_services(&mut self, entries: &[(Service4Key, ServiceValue)]) -> Result<(), BatchError> {
        for (written, (key, value)) in entries.iter().enumerate() {
            put(
                &mut self.state.services,
                self.max_services,
                "services",
                *key,
                *value,
            )
            .map_err(|error| BatchError { written, error })?;
            self.log.push(Op::PutService(*key, *value));
        }
        Ok(())
    }

    fn delete_service(&mut self, key: &Service4Key) -> Result<(), StoreError> {
        self.state.services.remove(key);
        self.log.push(Op::DeleteService(*key));
        Ok(())
    }
}
