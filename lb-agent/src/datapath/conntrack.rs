//! The tc programs' connection tracking (`LB4_CT`, `LB6_CT`) and SNAT
//! (`LB4_NAT`, `LB6_NAT`) entries: read whole for `lb-agent dump
//! --conntrack`, and aged out by the agent. The maps are LRU, so they never fill up; the collector removes
//! what has expired or whose endpoint stopped serving, so that listings
//! and capacity show live flows.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use aya::maps::{HashMap as BpfHashMap, Map, MapData};
use lb_common::{
    CT_DIR_IN, CT_F_KERNEL, CT4, CT6, Ct4Key, Ct4Value, Ct6Key, Ct6Value, CtKey, CtValue,
    DatapathConfig, MapSpec, NAT4, NAT6, Nat4Key, Nat4Value, Nat6Key, Nat6Value, NatKey, NatValue,
    ct_dir_forward, ct_expired,
};
use rustix::time::{ClockId, clock_gettime};

use super::{
    batch::Typed,
    error::{Error, io_err, map_err},
};
use crate::model::{Frontend, Proto, Scope};

/// Every entry of the maps of both families.
#[derive(Debug, Default)]
pub struct Entries {
    pub ct: Vec<(Ct4Key, Ct4Value)>,
    pub nat: Vec<(Nat4Key, Nat4Value)>,
    pub ct6: Vec<(Ct6Key, Ct6Value)>,
    pub nat6: Vec<(Nat6Key, Nat6Value)>,
}

/// An address as a family's conntrack and SNAT entries hold it.
pub trait Addr: Copy + Eq + Hash + Default + 'static {
    /// The family's maps.
    const CT: MapSpec;
    const NAT: MapSpec;
    fn ip(&self) -> IpAddr;
    /// `ip` if it is of this family.
    fn of(ip: IpAddr) -> Option<Self>;
    /// The address this family's flows are SNATed to.
    fn snat(cfg: &DatapathConfig) -> Self;
}

impl Addr for [u8; 4] {
    const CT: MapSpec = CT4;
    const NAT: MapSpec = NAT4;
    fn ip(&self) -> IpAddr {
        Ipv4Addr::from(*self).into()
    }
    fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(ip) => Some(ip.octets()),
            IpAddr::V6(_) => None,
        }
    }
    fn snat(cfg: &DatapathConfig) -> Self {
        cfg.snat4_be
    }
}

impl Addr for [u8; 16] {
    const CT: MapSpec = CT6;
    const NAT: MapSpec = NAT6;
    fn ip(&self) -> IpAddr {
        Ipv6Addr::from(*self).into()
    }
    fn of(ip: IpAddr) -> Option<Self> {
        match ip {
            IpAddr::V4(_) => None,
            IpAddr::V6(ip) => Some(ip.octets()),
        }
    }
    fn snat(cfg: &DatapathConfig) -> Self {
        cfg.snat6_be
    }
}

/// The clock `expires` fields count in: `bpf_ktime_get_coarse_ns()` is
/// `CLOCK_MONOTONIC_COARSE`; in seconds.
pub fn now() -> u32 {
    clock_gettime(ClockId::MonotonicCoarse).tv_sec as u32
}

fn open(maps_dir: &Path, spec: &MapSpec) -> Result<MapData, Error> {
    let path = maps_dir.join(spec.pin);
    MapData::from_pin(&path).map_err(map_err(&path))
}

/// The map `spec` pinned in `maps_dir`, read whole.
fn read_all<K: aya::Pod, V: aya::Pod>(
    maps_dir: &Path,
    spec: &MapSpec,
) -> Result<Vec<(K, V)>, Error> {
    let path = maps_dir.join(spec.pin);
    Typed::new(open(maps_dir, spec)?)
        .map_err(map_err(&path))?
        .lookup_all()
        .map_err(io_err("reading", &path))
}

/// The maps of both families pinned in `maps_dir`, read whole.
pub fn read(maps_dir: &Path) -> Result<Entries, Error> {
    Ok(Entries {
        ct: read_all(maps_dir, &CT4)?,
        nat: read_all(maps_dir, &NAT4)?,
        ct6: read_all(maps_dir, &CT6)?,
        nat6: read_all(maps_dir, &NAT6)?,
    })
}

/// What a collection did and found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Entries removed.
    pub ct: usize,
    pub nat: usize,
    /// Entries left.
    pub ct_left: usize,
    pub nat_left: usize,
}

/// Deletes the entries of the maps of both families that expired by
/// `now`, and those of flows whose endpoint no longer serves their
/// frontend (`serves(frontend, backend IP)`: kube-proxy's
/// `CleanStaleEntries`, for TCP too, since the programs keep sending a flow
/// to its endpoint; a terminating endpoint that still serves keeps its
/// flows), both directions and the SNAT mapping. A flow found in the
/// kernel's conntrack (`CT_F_KERNEL`) only expires. An entry a packet
/// refreshes or changes between the read and the delete is kept: each is
/// looked up again right before it goes.
pub fn collect(
    maps_dir: &Path,
    now: u32,
    serves: impl Fn(&Frontend, IpAddr) -> bool,
) -> Result<Collected, Error> {
    let v4 = collect_family::<[u8; 4]>(maps_dir, now, &serves)?;
    let v6 = collect_family::<[u8; 16]>(maps_dir, now, &serves)?;
    Ok(Collected {
        ct: v4.ct + v6.ct,
        nat: v4.nat + v6.nat,
        ct_left: v4.ct_left + v6.ct_left,
        nat_left: v4.nat_left + v6.nat_left,
    })
}

/// [`collect`] for the maps of the family of `A`.
fn collect_family<A: Addr>(
    maps_dir: &Path,
    now: u32,
    serves: &impl Fn(&Frontend, IpAddr) -> bool,
) -> Result<Collected, Error>
where
    CtKey<A>: aya::Pod + Eq + Hash,
    CtValue<A>: aya::Pod,
    NatKey<A>: aya::Pod + Eq + Hash,
    NatValue<A>: aya::Pod,
{
    let ct: Vec<(CtKey<A>, CtValue<A>)> = read_all(maps_dir, &A::CT)?;
    let nat: Vec<(NatKey<A>, NatValue<A>)> = read_all(maps_dir, &A::NAT)?;
    // A live inbound entry names its frontend (key) and endpoint (value).
    // A pod's flows (`CT_DIR_POD_*`, to cluster IPs) only expire.
    let stale = |k: &CtKey<A>, v: &CtValue<A>| {
        if k.dir != CT_DIR_IN || v.flags & CT_F_KERNEL != 0 {
            return false;
        }
        let Some(proto) = Proto::from_number(k.proto) else {
            return false;
        };
        let frontend = Frontend {
            vip: k.daddr_be.ip(),
            port: u16::from_be(k.dport_be),
            proto,
            scope: Scope::External,
        };
        !serves(&frontend, v.addr_be.ip())
    };
    let values: HashMap<CtKey<A>, CtValue<A>> = ct.iter().copied().collect();
    let mut dead_flows = HashSet::new();
    for (k, v) in &ct {
        if stale(k, v) {
            dead_flows.insert(*k);
            dead_flows.insert(k.partner(v));
        }
    }
    // The SNAT mapping of a stale flow, named by its outbound entry.
    let nat_of = |k: &CtKey<A>, v: &CtValue<A>| {
        (!ct_dir_forward(k.dir) && v.nat_port_be != 0).then_some(NatKey {
            saddr_be: k.saddr_be,
            daddr_be: v.nat_addr_be,
            sport_be: k.sport_be,
            dport_be: v.nat_port_be,
            proto: k.proto,
            _pad0: [0; 3],
        })
    };
    let dead_nat: HashSet<NatKey<A>> = dead_flows
        .iter()
        .filter_map(|k| nat_of(k, values.get(k)?))
        .collect();
    let ct_dead = |k: &CtKey<A>, v: &CtValue<A>| {
        ct_expired(v.expires, now)
            || (dead_flows.contains(k) && values.get(k).is_some_and(|old| old.addr_be == v.addr_be))
    };
    let nat_dead =
        |k: &NatKey<A>, v: &NatValue<A>| ct_expired(v.expires, now) || dead_nat.contains(k);
    let ct_gone = delete(maps_dir, &A::CT, &ct, ct_dead)?;
    let nat_gone = delete(maps_dir, &A::NAT, &nat, nat_dead)?;
    Ok(Collected {
        ct: ct_gone,
        nat: nat_gone,
        ct_left: ct.len() - ct_gone,
        nat_left: nat.len() - nat_gone,
    })
}

/// Deletes the `entries` of the map `spec` that are `dead`, each read again
/// right before it goes; how many went.
fn delete<K, V>(
    maps_dir: &Path,
    spec: &MapSpec,
    entries: &[(K, V)],
    dead: impl Fn(&K, &V) -> bool,
) -> Result<usize, Error>
where
    K: aya::Pod + Eq + Hash,
    V: aya::Pod,
{
    let candidates: Vec<&K> = entries
        .iter()
        .filter(|(k, v)| dead(k, v))
        .map(|(k, _)| k)
        .collect();
    if candidates.is_empty() {
        return Ok(0);
    }
    let mut map: BpfHashMap<MapData, K, V> =
        BpfHashMap::try_from(Map::LruHashMap(open(maps_dir, spec)?))
            .map_err(map_err(&maps_dir.join(spec.pin)))?;
    let mut removed = 0;
    for key in candidates {
        let still = map.get(key, 0).is_ok_and(|v| dead(key, &v));
        // Gone meanwhile (evicted, or deleted by another collector) is fine.
        if still && map.remove(key).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}
