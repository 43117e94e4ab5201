//! The agent's pinned load-balancing maps read in-process with aya: what
//! the programs see for each frontend, and how many entries each map
//! holds. `lb-agent dump` shows the same, but a dump process costs
//! ~170 ms in a debug build, too slow to poll for convergence. Walks the
//! maps as a program does (ARCHITECTURE.md, "How a program picks a
//! backend"), independently of the agent's own reader.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4},
    path::Path,
};

use anyhow::Context as _;
use aya::{
    Pod,
    maps::{Array, HashMap, Map, MapData, MapError},
};
use lb_common::{
    AFFINITY4, AffinityKey, AffinityValue, BACKENDS4, BACKENDS6, Backend4, Backend6, FE_F_MAGLEV,
    FE_STATE4, FE_STATE6, FRONTENDS4, FRONTENDS6, Frontend4Key, Frontend4State, Frontend6Key,
    Frontend6State, FrontendId, MAGLEV_CHUNK, MAGLEV4, MAGLEV6, MEMBERS4, MaglevChunk, MaglevKey,
    MapSpec, Member, MemberKey, REVNAT4, RevNat4Key, RevNat4Value, SCOPE_EXTERNAL, SLOTS4, Slot,
    SlotKey,
};

/// `BPF_F_LOCK`: the state is copied under its spin lock, whole.
const BPF_F_LOCK: u64 = 4;

/// A frontend's key: address, port, IP protocol (0 and 0: the wildcard).
pub type FrontendKey = (Ipv4Addr, u16, u8);

/// One frontend as a program sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frontend {
    /// Its state names it: connections go to these backends, in slot
    /// order (none: refused).
    Serving(Vec<SocketAddrV4>),
    /// Its state does not name it (being removed): passed on untranslated.
    Removing,
    /// A slot or backend of its live revision is missing: the program
    /// would refuse (`refused_inconsistent`). Never, if the agent is right.
    Broken,
}

/// Every frontend of the pinned maps.
pub type View = BTreeMap<FrontendKey, Frontend>;

/// Entries per map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entries {
    pub frontends: usize,
    /// Non-free elements of the state array.
    pub states: usize,
    pub slots: usize,
    pub members: usize,
    pub backends: usize,
    pub affinity: usize,
    /// Counted only when asked: walking its up to 262,144 keys one by one
    /// takes about a second in a debug build.
    pub revnat: Option<usize>,
}

fn open(dir: &Path, spec: &MapSpec) -> anyhow::Result<Map> {
    let path = dir.join(spec.pin);
    let data = MapData::from_pin(&path).with_context(|| format!("opening {}", path.display()))?;
    Ok(Map::from_map_data(data)?)
}

fn hash<K: Pod, V: Pod>(dir: &Path, spec: &MapSpec) -> anyhow::Result<HashMap<MapData, K, V>> {
    Ok(HashMap::try_from(open(dir, spec)?)?)
}

/// A lookup that may race with a delete: absent is `None`, not an error.
fn get<T>(r: Result<T, MapError>) -> anyhow::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(MapError::KeyNotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The maps a program reads to translate a connection, opened once.
pub struct LbMaps {
    frontends: HashMap<MapData, Frontend4Key, FrontendId>,
    states: Array<MapData, Frontend4State>,
    slots: HashMap<MapData, SlotKey, Slot>,
    backends: HashMap<MapData, u32, Backend4>,
}

impl LbMaps {
    /// The maps pinned in `dir` (a pin directory's `maps/`).
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        Ok(Self {
            frontends: hash(dir, &FRONTENDS4)?,
            states: Array::try_from(open(dir, &FE_STATE4)?)?,
            slots: hash(dir, &SLOTS4)?,
            backends: hash(dir, &BACKENDS4)?,
        })
    }

    /// What the programs would do now for every frontend.
    pub fn view(&self) -> anyhow::Result<View> {
        let mut view = View::new();
        for entry in self.frontends.iter() {
            // A frontend deleted while the walk goes on is simply not seen.
            let Ok((key, id)) = entry else { continue };
            view.insert(parts(&key), self.frontend(&key, id)?);
        }
        Ok(view)
    }

    /// The same for these frontends only (those absent are not in it):
    /// a few lookups instead of a walk.
    pub fn view_of(&self, keys: &[FrontendKey]) -> anyhow::Result<View> {
        let mut view = View::new();
        for &(addr, port, proto) in keys {
            let key = Frontend4Key {
                addr_be: addr.octets(),
                port_be: port.to_be(),
                proto,
                scope: lb_common::SCOPE_INTERNAL,
            };
            if let Some(id) = get(self.frontends.get(&key, 0))? {
                view.insert((addr, port, proto), self.frontend(&key, id)?);
            }
        }
        Ok(view)
    }

    /// What a program finds behind frontend `key`, whose id is `id`.
    fn frontend(&self, key: &Frontend4Key, id: FrontendId) -> anyhow::Result<Frontend> {
        let Some(state) = get(self.states.get(&id.id, BPF_F_LOCK))? else {
            return Ok(Frontend::Removing);
        };
        let o = &state.owner;
        if (o.addr_be, o.port_be, o.proto, o.scope)
            != (key.addr_be, key.port_be, key.proto, key.scope)
        {
            return Ok(Frontend::Removing);
        }
        let mut list = Vec::with_capacity(usize::from(state.count));
        for slot in 0..state.count {
            let k = SlotKey {
                fe_id: id.id,
                rev: state.rev,
                slot,
            };
            let backend = match get(self.slots.get(&k, 0))? {
                Some(s) => get(self.backends.get(&s.backend_id, 0))?,
                None => None,
            };
            match backend {
                Some(b) => list.push(SocketAddrV4::new(
                    Ipv4Addr::from(b.addr_be),
                    u16::from_be(b.port_be),
                )),
                None => return Ok(Frontend::Broken),
            }
        }
        Ok(Frontend::Serving(list))
    }
}

fn parts(key: &Frontend4Key) -> FrontendKey {
    (
        Ipv4Addr::from(key.addr_be),
        u16::from_be(key.port_be),
        key.proto,
    )
}

/// What the programs would do now for every frontend of the maps pinned in
/// `dir` (a pin directory's `maps/`).
pub fn read_view(dir: &Path) -> anyhow::Result<View> {
    LbMaps::open(dir)?.view()
}

/// How many entries each map pinned in `dir` holds (the reverse-NAT map's
/// if `revnat`). Walks every key (the state array: every element).
pub fn count_entries(dir: &Path, revnat: bool) -> anyhow::Result<Entries> {
    fn count<K: Pod, V: Pod>(dir: &Path, spec: &MapSpec) -> anyhow::Result<usize> {
        Ok(hash::<K, V>(dir, spec)?
            .keys()
            .filter(Result::is_ok)
            .count())
    }
    let states: Array<MapData, Frontend4State> = Array::try_from(open(dir, &FE_STATE4)?)?;
    let free = Frontend4State::default();
    Ok(Entries {
        frontends: count::<Frontend4Key, FrontendId>(dir, &FRONTENDS4)?,
        states: states
            .iter()
            .filter(|s| s.as_ref().is_ok_and(|s| *s != free))
            .count(),
        slots: count::<SlotKey, Slot>(dir, &SLOTS4)?,
        members: count::<MemberKey, Member>(dir, &MEMBERS4)?,
        backends: count::<u32, Backend4>(dir, &BACKENDS4)?,
        affinity: count::<AffinityKey, AffinityValue>(dir, &AFFINITY4)?,
        revnat: if revnat {
            // The programs insert and evict while the walk goes on, and a
            // walk that loses its place starts over: count distinct keys.
            let map = hash::<RevNat4Key, RevNat4Value>(dir, &REVNAT4)?;
            let keys: std::collections::HashSet<RevNat4Key> =
                map.keys().filter_map(Result::ok).collect();
            Some(keys.len())
        } else {
            None
        },
    })
}

/// One family's maps, as far as a Maglev table needs them.
trait MaglevFamily {
    type Key: Pod + PartialEq;
    type State: Pod;
    type Backend: Pod;
    const FRONTENDS: MapSpec;
    const STATES: MapSpec;
    const BACKENDS: MapSpec;
    const MAGLEV: MapSpec;
    /// The frontend's address, and whether it is in the external scope.
    fn frontend(key: &Self::Key) -> (SocketAddr, u8, bool);
    /// The state's owner, revision, flags and table size.
    fn state(state: &Self::State) -> (Self::Key, u16, u16, u32);
    fn backend(b: &Self::Backend) -> SocketAddr;
}

struct V4;
struct V6;

impl MaglevFamily for V4 {
    type Key = Frontend4Key;
    type State = Frontend4State;
    type Backend = Backend4;
    const FRONTENDS: MapSpec = FRONTENDS4;
    const STATES: MapSpec = FE_STATE4;
    const BACKENDS: MapSpec = BACKENDS4;
    const MAGLEV: MapSpec = MAGLEV4;
    fn frontend(k: &Frontend4Key) -> (SocketAddr, u8, bool) {
        let addr = SocketAddr::new(Ipv4Addr::from(k.addr_be).into(), u16::from_be(k.port_be));
        (addr, k.proto, k.scope == SCOPE_EXTERNAL)
    }
    fn state(s: &Frontend4State) -> (Frontend4Key, u16, u16, u32) {
        (s.owner, s.rev, s.flags, s.maglev_size)
    }
    fn backend(b: &Backend4) -> SocketAddr {
        SocketAddr::new(Ipv4Addr::from(b.addr_be).into(), u16::from_be(b.port_be))
    }
}

impl MaglevFamily for V6 {
    type Key = Frontend6Key;
    type State = Frontend6State;
    type Backend = Backend6;
    const FRONTENDS: MapSpec = FRONTENDS6;
    const STATES: MapSpec = FE_STATE6;
    const BACKENDS: MapSpec = BACKENDS6;
    const MAGLEV: MapSpec = MAGLEV6;
    fn frontend(k: &Frontend6Key) -> (SocketAddr, u8, bool) {
        let ip = IpAddr::from(k.addr_be);
        (
            SocketAddr::new(ip, u16::from_be(k.port_be)),
            k.proto,
            k.scope == SCOPE_EXTERNAL,
        )
    }
    fn state(s: &Frontend6State) -> (Frontend6Key, u16, u16, u32) {
        (s.owner, s.rev, s.flags, s.maglev_size)
    }
    fn backend(b: &Backend6) -> SocketAddr {
        SocketAddr::new(IpAddr::from(b.addr_be), u16::from_be(b.port_be))
    }
}

/// A frontend seen from outside the node: its address and IP protocol.
pub type ExternalFrontend = (SocketAddr, u8);

/// The Maglev table of every frontend seen from outside the node that has
/// one, in both families, as a program reads it: the live revision's
/// entries (`LB4_MAGLEV`, `LB6_MAGLEV`), each as its backend's address.
/// Backend ids differ between nodes; addresses are what must agree.
pub fn maglev_tables(dir: &Path) -> anyhow::Result<BTreeMap<ExternalFrontend, Vec<SocketAddr>>> {
    let mut tables = family_tables::<V4>(dir)?;
    tables.extend(family_tables::<V6>(dir)?);
    Ok(tables)
}

fn family_tables<F: MaglevFamily>(
    dir: &Path,
) -> anyhow::Result<BTreeMap<ExternalFrontend, Vec<SocketAddr>>> {
    let frontends = hash::<F::Key, FrontendId>(dir, &F::FRONTENDS)?;
    let states: Array<MapData, F::State> = Array::try_from(open(dir, &F::STATES)?)?;
    let chunks = hash::<MaglevKey, MaglevChunk>(dir, &F::MAGLEV)?;
    let backends = hash::<u32, F::Backend>(dir, &F::BACKENDS)?;
    let mut tables = BTreeMap::new();
    for entry in frontends.iter() {
        let (key, id) = entry?;
        let (addr, proto, external) = F::frontend(&key);
        let Some(state) = get(states.get(&id.id, BPF_F_LOCK))? else {
            continue;
        };
        let (owner, rev, flags, size) = F::state(&state);
        if !external || owner != key || flags & FE_F_MAGLEV == 0 {
            continue;
        }
        let mut table = Vec::with_capacity(size as usize);
        for chunk in 0..(size as usize).div_ceil(MAGLEV_CHUNK) {
            let k = MaglevKey {
                fe_id: id.id,
                rev,
                chunk: chunk as u16,
            };
            let ids = get(chunks.get(&k, 0))?
                .with_context(|| format!("{addr}: chunk {chunk} of revision {rev} missing"))?;
            let n = (size as usize - chunk * MAGLEV_CHUNK).min(MAGLEV_CHUNK);
            for backend_id in &ids.backend_ids[..n] {
                let b = get(backends.get(backend_id, 0))?
                    .with_context(|| format!("{addr}: backend {backend_id} missing"))?;
                table.push(F::backend(&b));
            }
        }
        tables.insert((addr, proto), table);
    }
    Ok(tables)
}
