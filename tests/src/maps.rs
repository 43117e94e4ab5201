//! The agent's pinned load-balancing maps read in-process with aya: what
//! the programs see for each frontend, and how many entries each map
//! holds. `lb-agent dump` shows the same, but a dump process costs
//! ~170 ms in a debug build, too slow to poll for convergence. Walks the
//! maps as a program does (ARCHITECTURE.md, "How a program picks a
//! backend"), independently of the agent's own reader.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, SocketAddrV4},
    path::Path,
};

use anyhow::Context as _;
use aya::{
    Pod,
    maps::{Array, HashMap, Map, MapData, MapError},
};
use lb_common::{
    AFFINITY4, Affinity4Key, AffinityValue, BACKENDS4, Backend4, FE_STATE4, FRONTENDS4,
    Frontend4Key, Frontend4State, FrontendId, MEMBERS4, MapSpec, Member, MemberKey, REVNAT4,
    RevNat4Key, RevNat4Value, SLOTS4, Slot, SlotKey,
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
    pub revnat: usize,
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

/// What the programs would do now for every frontend of the maps pinned in
/// `dir` (a pin directory's `maps/`).
pub fn read_view(dir: &Path) -> anyhow::Result<View> {
    let frontends = hash::<Frontend4Key, FrontendId>(dir, &FRONTENDS4)?;
    let states: Array<MapData, Frontend4State> = Array::try_from(open(dir, &FE_STATE4)?)?;
    let slots = hash::<SlotKey, Slot>(dir, &SLOTS4)?;
    let backends = hash::<u32, Backend4>(dir, &BACKENDS4)?;
    let mut view = View::new();
    for entry in frontends.iter() {
        // A frontend deleted while the walk goes on is simply not seen.
        let Ok((key, id)) = entry else { continue };
        let fk = (
            Ipv4Addr::from(key.addr_be),
            u16::from_be(key.port_be),
            key.proto,
        );
        let Some(state) = get(states.get(&id.id, BPF_F_LOCK))? else {
            view.insert(fk, Frontend::Removing);
            continue;
        };
        let o = &state.owner;
        if (o.addr_be, o.port_be, o.proto, o.scope)
            != (key.addr_be, key.port_be, key.proto, key.scope)
        {
            view.insert(fk, Frontend::Removing);
            continue;
        }
        let mut list = Vec::with_capacity(usize::from(state.count));
        let mut broken = false;
        for slot in 0..state.count {
            let k = SlotKey {
                fe_id: id.id,
                rev: state.rev,
                slot,
            };
            let backend = match get(slots.get(&k, 0))? {
                Some(s) => get(backends.get(&s.backend_id, 0))?,
                None => None,
            };
            match backend {
                Some(b) => list.push(SocketAddrV4::new(
                    Ipv4Addr::from(b.addr_be),
                    u16::from_be(b.port_be),
                )),
                None => broken = true,
            }
        }
        view.insert(
            fk,
            if broken {
                Frontend::Broken
            } else {
                Frontend::Serving(list)
            },
        );
    }
    Ok(view)
}

/// How many entries each map pinned in `dir` holds. Walks every key (the
/// state array: every element), so it costs tens of milliseconds.
pub fn count_entries(dir: &Path) -> anyhow::Result<Entries> {
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
        affinity: count::<Affinity4Key, AffinityValue>(dir, &AFFINITY4)?,
        revnat: count::<RevNat4Key, RevNat4Value>(dir, &REVNAT4)?,
    })
}
