//! [`MapStore`] over the pinned BPF hash maps.

use std::{io, path::Path};

use aya::maps::{HashMap, Map, MapData, MapError};
use lb_common::{BACKENDS4_MAP, Backend4, SERVICES4_MAP, Service4Key, ServiceValue};

use super::pins::Pins;
use crate::reconcile::{MapState, MapStore, StoreError};

/// The two LB maps, opened from their pins.
pub struct BpfStore {
    services: HashMap<MapData, Service4Key, ServiceValue>,
    backends: HashMap<MapData, u32, Backend4>,
}

fn open<K: aya::Pod, V: aya::Pod>(
    path: &Path,
    name: &'static str,
) -> Result<HashMap<MapData, K, V>, StoreError> {
    let io_err = |op, e: MapError| StoreError::Io {
        map: name,
        op,
        source: io::Error::other(e),
    };
    let data = MapData::from_pin(path).map_err(|e| io_err("open pin", e))?;
    let map = Map::from_map_data(data).map_err(|e| io_err("open pin", e))?;
    HashMap::try_from(map).map_err(|e| io_err("open pin", e))
}

/// Maps a failed syscall to the store's error; E2BIG is how a hash map says full.
fn syscall_err(map: &'static str, op: &'static str, e: MapError) -> StoreError {
    match e {
        MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::E2BIG) => {
            StoreError::Full { map }
        }
        MapError::SyscallError(s) => StoreError::Io {
            map,
            op,
            source: s.io_error,
        },
        other => StoreError::Io {
            map,
            op,
            source: io::Error::other(other),
        },
    }
}

/// Deleting what is already gone is success: the writes must be idempotent.
fn ignore_missing(r: Result<(), MapError>) -> Result<(), MapError> {
    match r {
        Err(MapError::SyscallError(s)) if s.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(MapError::KeyNotFound) => Ok(()),
        other => other,
    }
}

impl BpfStore {
    pub fn open(pins: &Pins) -> Result<Self, StoreError> {
        Ok(Self {
            services: open(&pins.map(SERVICES4_MAP), SERVICES4_MAP)?,
            backends: open(&pins.map(BACKENDS4_MAP), BACKENDS4_MAP)?,
        })
    }
}

impl MapStore for BpfStore {
    fn read(&self) -> Result<MapState, StoreError> {
        let mut state = MapState::default();
        for entry in self.services.iter() {
            let (k, v) = entry.map_err(|e| syscall_err(SERVICES4_MAP, "iterate", e))?;
            state.services.insert(k, v);
        }
        for entry in self.backends.iter() {
            let (k, v) = entry.map_err(|e| syscall_err(BACKENDS4_MAP, "iterate", e))?;
            state.backends.insert(k, v);
        }
        Ok(state)
    }

    fn put_backend(&mut self, id: u32, value: &Backend4) -> Result<(), StoreError> {
        self.backends
            .insert(id, value, 0)
            .map_err(|e| syscall_err(BACKENDS4_MAP, "update", e))
    }

    fn delete_backend(&mut self, id: u32) -> Result<(), StoreError> {
        ignore_missing(self.backends.remove(&id))
            .map_err(|e| syscall_err(BACKENDS4_MAP, "delete", e))
    }

    fn put_service(&mut self, key: &Service4Key, value: &ServiceValue) -> Result<(), StoreError> {
        self.services
            .insert(key, value, 0)
            .map_err(|e| syscall_err(SERVICES4_MAP, "update", e))
    }

    fn delete_service(&mut self, key: &Service4Key) -> Result<(), StoreError> {
        ignore_missing(self.services.remove(key))
            .map_err(|e| syscall_err(SERVICES4_MAP, "delete", e))
    }
}
