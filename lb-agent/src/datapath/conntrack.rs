//! The tc programs' connection tracking (`LB4_CT`) and SNAT (`LB4_NAT`)
//! entries: read whole for `lb-agent dump --conntrack`, and aged out by the
//! agent. The maps are LRU, so they never fill up; the collector removes
//! what has expired or lost its backend, so that listings and capacity
//! show live flows.

use std::{hash::Hash, io, os::fd::AsFd as _, path::Path};

use aya::maps::{HashMap, Map, MapData, MapError};
use lb_common::{
    BACKENDS4, Backend4, CT_DIR_IN, CT4, Ct4Key, Ct4Value, MapSpec, NAT4, Nat4Key, Nat4Value,
    ct_expired,
};

use super::batch;

#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("opening {pin}")]
    Open {
        pin: &'static str,
        #[source]
        source: MapError,
    },
    #[error("reading {pin}")]
    Read {
        pin: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Every entry of both maps.
#[derive(Debug, Default)]
pub struct Entries {
    pub ct: Vec<(Ct4Key, Ct4Value)>,
    pub nat: Vec<(Nat4Key, Nat4Value)>,
}

/// The clock `expires` fields count in: `bpf_ktime_get_coarse_ns()` is
/// `CLOCK_MONOTONIC_COARSE`; in seconds.
pub fn now() -> u32 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is valid on
    // Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u32
}

fn open(maps_dir: &Path, spec: &MapSpec) -> Result<MapData, ConntrackError> {
    let pin = spec.pin;
    MapData::from_pin(maps_dir.join(pin)).map_err(|source| ConntrackError::Open { pin, source })
}

/// Both maps pinned in `maps_dir`, read whole.
pub fn read(maps_dir: &Path) -> Result<Entries, ConntrackError> {
    let read = |spec: &MapSpec| {
        let pin = spec.pin;
        move |source| ConntrackError::Read { pin, source }
    };
    let ct = open(maps_dir, &CT4)?;
    let nat = open(maps_dir, &NAT4)?;
    Ok(Entries {
        ct: batch::lookup_all(ct.fd().as_fd()).map_err(read(&CT4))?,
        nat: batch::lookup_all(nat.fd().as_fd()).map_err(read(&NAT4))?,
    })
}

/// How many entries a collection removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    pub ct: usize,
    pub nat: usize,
}

/// Deletes the entries of both maps that expired by `now`, and the
/// conntrack entries of flows whose backend is gone (its id no longer
/// names its address: the agent deletes an id a grace period after the
/// last revision naming it went), which the programs would move to a
/// current backend at their next packet anyway. An entry a packet
/// refreshes or moves between the read and the delete is kept: each is
/// looked up again, its backend too, right before it goes.
pub fn collect(maps_dir: &Path, now: u32) -> Result<Collected, ConntrackError> {
    let pin = BACKENDS4.pin;
    let backends: HashMap<MapData, u32, Backend4> =
        HashMap::try_from(Map::HashMap(open(maps_dir, &BACKENDS4)?))
            .map_err(|source| ConntrackError::Open { pin, source })?;
    let gone = |k: &Ct4Key, v: &Ct4Value| {
        let (addr_be, port_be) = if k.dir == CT_DIR_IN {
            (v.addr_be, v.port_be)
        } else {
            (k.saddr_be, k.sport_be)
        };
        // Id 0 is never a backend's: an entry that does not know its own.
        v.backend_id != 0
            && match backends.get(&v.backend_id, 0) {
                Ok(b) => (b.addr_be, b.port_be) != (addr_be, port_be),
                Err(MapError::KeyNotFound) => true,
                // Unreadable is not gone.
                Err(_) => false,
            }
    };
    Ok(Collected {
        ct: collect_map::<Ct4Key, Ct4Value>(maps_dir, &CT4, |k, v| {
            ct_expired(v.expires, now) || gone(k, v)
        })?,
        nat: collect_map::<Nat4Key, Nat4Value>(maps_dir, &NAT4, |_, v| ct_expired(v.expires, now))?,
    })
}

fn collect_map<K, V>(
    maps_dir: &Path,
    spec: &'static MapSpec,
    dead: impl Fn(&K, &V) -> bool,
) -> Result<usize, ConntrackError>
where
    K: aya::Pod + Eq + Hash,
    V: aya::Pod,
{
    let pin = spec.pin;
    let data = open(maps_dir, spec)?;
    let candidates: Vec<K> = batch::lookup_all::<K, V>(data.fd().as_fd())
        .map_err(|source| ConntrackError::Read { pin, source })?
        .into_iter()
        .filter(|(k, v)| dead(k, v))
        .map(|(k, _)| k)
        .collect();
    if candidates.is_empty() {
        return Ok(0);
    }
    let mut map: HashMap<MapData, K, V> = HashMap::try_from(Map::LruHashMap(data))
        .map_err(|source| ConntrackError::Open { pin, source })?;
    let mut removed = 0;
    for key in candidates {
        let still = map.get(&key, 0).is_ok_and(|v| dead(&key, &v));
        // Gone meanwhile (evicted, or deleted by another collector) is fine.
        if still && map.remove(&key).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}
