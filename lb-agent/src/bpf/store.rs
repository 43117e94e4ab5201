//! [`MapStore`] over the pinned BPF hash maps.

use std::{
    io,
    os::fd::{AsFd as _, OwnedFd},
    path::Path,
};

use aya::maps::{HashMap, Map, MapData, MapError};
use lb_common::{BACKENDS4_MAP, Backend4, SERVICES4_MAP, Service4Key, ServiceValue};

use super::{batch, pins::Pins};
use crate::reconcile::{BatchError, MapState, MapStore, StoreError};

/// The two LB maps, opened from their pins.
pub struct BpfStore {
    services: Pinned<Service4Key, ServiceValue>,
    backends: Pinned<u32, Backend4>,
}

/// One pinned hash map: aya's typed view, and the fd for batch writes.
struct Pinned<K, V> {
    map: HashMap<MapData, K, V>,
    fd: OwnedFd,
    name: &'static str,
}

impl<K: aya::Pod, V: aya::Pod> Pinned<K, V> {
    fn open(path: &Path, name: &'static str) -> Result<Self, StoreError> {
        let io_err = |e: io::Error| StoreError::Io {
            map: name,
            op: "open pin",
            source: e,
        };
        let data = MapData::from_pin(path).map_err(|e| io_err(io::Error::other(e)))?;
        let fd = data.fd().as_fd().try_clone_to_owned().map_err(io_err)?;
        let map = Map::from_map_data(data).map_err(|e| io_err(io::Error::other(e)))?;
        let map = HashMap::try_from(map).map_err(|e| io_err(io::Error::other(e)))?;
        Ok(Self { map, fd, name })
    }

    fn put(&self, entries: &[(K, V)]) -> Result<(), BatchError> {
        let (keys, values): (Vec<K>, Vec<V>) = entries.iter().copied().unzip();
        batch::update(self.fd.as_fd(), &keys, &values).map_err(|(written, e)| BatchError {
            written,
            error: io_error(self.name, "update", e),
        })
    }
}

/// Maps a failed write to the store's error; E2BIG is how a hash map says full.
fn io_error(map: &'static str, op: &'static str, e: io::Error) -> StoreError {
    if e.raw_os_error() == Some(libc::E2BIG) {
        StoreError::Full { map }
    } else {
        StoreError::Io { map, op, source: e }
    }
}

/// Maps a failed aya call to the store's error.
fn syscall_err(map: &'static str, op: &'static str, e: MapError) -> StoreError {
    match e {
        MapError::SyscallError(s) => io_error(map, op, s.io_error),
        other => io_error(map, op, io::Error::other(other)),
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
            services: Pinned::open(&pins.map(SERVICES4_MAP), SERVICES4_MAP)?,
            backends: Pinned::open(&pins.map(BACKENDS4_MAP), BACKENDS4_MAP)?,
        })
    }
}

impl MapStore for BpfStore {
    fn read(&self) -> Result<MapState, StoreError> {
        let mut state = MapState::default();
        for entry in self.services.map.iter() {
            let (k, v) = entry.map_err(|e| syscall_err(SERVICES4_MAP, "iterate", e))?;
            state.services.insert(k, v);
        }
        for entry in self.backends.map.iter() {
            let (k, v) = entry.map_err(|e| syscall_err(BACKENDS4_MAP, "iterate", e))?;
            state.backends.insert(k, v);
        }
        Ok(state)
    }

    fn put_backends(&mut self, entries: &[(u32, Backend4)]) -> Result<(), BatchError> {
        self.backends.put(entries)
    }

    fn delete_backend(&mut self, id: u32) -> Result<(), StoreError> {
        ignore_missing(self.backends.map.remove(&id))
            .map_err(|e| syscall_err(BACKENDS4_MAP, "delete", e))
    }

    fn put_services(&mut self, entries: &[(Service4Key, ServiceValue)]) -> Result<(), BatchError> {
        self.services.put(entries)
    }

    fn delete_service(&mut self, key: &Service4Key) -> Result<(), StoreError> {
        ignore_missing(self.services.map.remove(key))
            .map_err(|e| syscall_err(SERVICES4_MAP, "delete", e))
    }
}
