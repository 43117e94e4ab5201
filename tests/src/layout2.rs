//! Map layout 2, installed as the agent of commit `8d1d4ae` installed it:
//! its eBPF object (`fixtures/lb-ebpf-layout2.o`), the maps pinned under
//! `maps/` with `_V2` pin names, the frontends written with layout 2's
//! write protocol, the programs attached to the cgroup through links pinned
//! under `links/`. The upgrade tests start from it.
//!
//! The types are layout 2's, copied here: `lb-common` follows the current
//! layout. Layout 3 (`layout3.rs`) is installed by the same code.

use std::{fs, path::Path};

use anyhow::Context as _;
use aya::{
    Ebpf, EbpfLoader, Pod,
    maps::{Array, HashMap, MapData},
};

pub use crate::install::Frontend;

/// The object of layout 2, as built then. Its maps' capacities are layout
/// 2's defaults, which that agent also set at load time unless flagged
/// otherwise, so loading it as it is makes the same maps.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout2.o");

/// Layout 2's maps: symbol name in the object, pin name under `maps/`.
const MAPS: [(&str, &str); 6] = [
    ("LB4_FRONTENDS", "LB4_FRONTENDS_V2"),
    ("LB4_FE_STATE", "LB4_FE_STATE_V2"),
    ("LB4_SLOTS", "LB4_SLOTS_V2"),
    ("LB4_BACKENDS", "LB4_BACKENDS_V2"),
    ("LB4_REVNAT", "LB4_REVNAT_V2"),
    ("LB_STATS", "LB_STATS_V2"),
];

/// `BPF_F_LOCK`: the state is written in place under its spin lock, so a
/// program reading it under the lock sees all of the write or none of it.
const BPF_F_LOCK: u64 = 4;

/// The revision every frontend starts at (the agent's first).
pub(crate) const FIRST_REV: u16 = 1;

/// Key of `LB4_FRONTENDS`, also the state's `owner`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Frontend4Key {
    addr_be: [u8; 4],
    port_be: u16,
    proto: u8,
    /// 0: the frontend as seen from inside the cluster.
    scope: u8,
}

/// Value of `LB4_FRONTENDS`: the index in `LB4_FE_STATE`, never 0.
#[repr(C)]
#[derive(Clone, Copy)]
struct FrontendId {
    id: u32,
}

/// Value of `LB4_FE_STATE`: the current revision and its slot count.
#[repr(C)]
#[derive(Clone, Copy)]
struct Frontend4State {
    /// The `bpf_spin_lock`; written as 0.
    lock: u32,
    owner: Frontend4Key,
    rev: u16,
    count: u16,
    flags: u16,
    _pad0: [u8; 2],
}

/// Key of `LB4_SLOTS`: one slot of one revision.
#[repr(C)]
#[derive(Clone, Copy)]
struct SlotKey {
    fe_id: u32,
    rev: u16,
    slot: u16,
}

/// Value of `LB4_SLOTS`: a key of `LB4_BACKENDS`, never 0.
#[repr(C)]
#[derive(Clone, Copy)]
struct Slot {
    backend_id: u32,
}

/// Value of `LB4_BACKENDS` (key: backend id).
#[repr(C)]
#[derive(Clone, Copy)]
struct Backend4 {
    addr_be: [u8; 4],
    port_be: u16,
    proto: u8,
    /// 0: active.
    state: u8,
}

const _: () = assert!(size_of::<Frontend4Key>() == 8);
const _: () = assert!(size_of::<FrontendId>() == 4);
const _: () = assert!(size_of::<Frontend4State>() == 20);
const _: () = assert!(size_of::<SlotKey>() == 8);
const _: () = assert!(size_of::<Slot>() == 4);
const _: () = assert!(size_of::<Backend4>() == 8);

// SAFETY: each is repr(C) with its padding spelled out as fields (the size
// asserts above equal the sums of the fields), and any bit pattern is a
// valid value.
unsafe impl Pod for Frontend4Key {}
// SAFETY: as above.
unsafe impl Pod for FrontendId {}
// SAFETY: as above.
unsafe impl Pod for Frontend4State {}
// SAFETY: as above.
unsafe impl Pod for SlotKey {}
// SAFETY: as above.
unsafe impl Pod for Slot {}
// SAFETY: as above.
unsafe impl Pod for Backend4 {}

/// Installs layout 2 under the pin directory `pins`, programs `frontends`,
/// and attaches its programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    let state = |owner, count| Frontend4State {
        lock: 0,
        owner,
        rev: FIRST_REV,
        count,
        flags: 0,
        _pad0: [0; 2],
    };
    install_object(OBJECT, &MAPS, "layout 2", state, pins, cgroup, frontends)
}

/// Loads `object` (named `what`) with its maps pinned as `maps` (symbol,
/// pin name) under `pins`' `maps/`, writes `frontends` with states made by
/// `state` (owner, count), and attaches its programs to `cgroup`. Layouts 2
/// and 3 differ only in these; layout 4 loads its object itself, for its tc
/// programs, and writes its frontends with [`write`].
pub(crate) fn install_object<S: Pod>(
    object: &[u8],
    maps: &[(&str, &str)],
    what: &str,
    state: impl Fn(Frontend4Key, u16) -> S,
    pins: &Path,
    cgroup: &Path,
    frontends: &[Frontend],
) -> anyhow::Result<()> {
    let dir = pins.join("maps");
    fs::create_dir_all(&dir)?;
    let mut loader = EbpfLoader::new();
    for (name, pin) in maps {
        loader.map_pin_path(name, dir.join(pin));
    }
    let mut ebpf = loader
        .load(object)
        .with_context(|| format!("loading {what}"))?;
    write(&mut ebpf, frontends, state)?;
    crate::install::attach(&mut ebpf, pins, cgroup, what)
}

/// Writes `frontends` as the agents of layouts 2 to 4 did, make before
/// break, one map at a time: the backends, the slots of each frontend's
/// first revision, the states naming it, and last the entries naming the
/// states.
pub(crate) fn write<S: Pod>(
    ebpf: &mut Ebpf,
    frontends: &[Frontend],
    state: impl Fn(Frontend4Key, u16) -> S,
) -> anyhow::Result<()> {
    let key = |f: &Frontend| Frontend4Key {
        addr_be: f.vip.octets(),
        port_be: f.port.to_be(),
        proto: f.proto,
        scope: f.scope,
    };
    let mut backends = hash::<u32, Backend4>(ebpf, "LB4_BACKENDS")?;
    for (_, f, first) in ids(frontends) {
        for (id, (ip, port)) in (first..).zip(&f.backends) {
            let b = Backend4 {
                addr_be: ip.octets(),
                port_be: port.to_be(),
                proto: f.proto,
                state: 0,
            };
            backends.insert(id, b, 0)?;
        }
    }
    let mut slots = hash::<SlotKey, Slot>(ebpf, "LB4_SLOTS")?;
    for (fe_id, f, first) in ids(frontends) {
        for (slot, backend_id) in (0..).zip(first..).take(f.backends.len()) {
            let k = SlotKey {
                fe_id,
                rev: FIRST_REV,
                slot,
            };
            slots.insert(k, Slot { backend_id }, 0)?;
        }
    }
    let map = ebpf.map_mut("LB4_FE_STATE").context("LB4_FE_STATE")?;
    let mut states: Array<_, S> = Array::try_from(map)?;
    for (id, f, _) in ids(frontends) {
        let value = state(key(f), u16::try_from(f.backends.len())?);
        states.set(id, value, BPF_F_LOCK)?;
    }
    let mut entries = hash::<Frontend4Key, FrontendId>(ebpf, "LB4_FRONTENDS")?;
    for (id, f, _) in ids(frontends) {
        entries.insert(key(f), FrontendId { id }, 0)?;
    }
    Ok(())
}

/// Each frontend with its id and its first backend's id. Both count from 1
/// (0 is never an id); a frontend's backends take consecutive ids, in slot
/// order.
fn ids(frontends: &[Frontend]) -> impl Iterator<Item = (u32, &Frontend, u32)> {
    let mut next = 1;
    (1..).zip(frontends).map(move |(id, f)| {
        let first = next;
        next += f.backends.len() as u32;
        (id, f, first)
    })
}

/// The hash map `name` of `ebpf`, typed. Borrowed, not taken out: the
/// programs, loaded afterwards, are relocated against the maps' fds.
fn hash<'a, K: Pod, V: Pod>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> anyhow::Result<HashMap<&'a mut MapData, K, V>> {
    let map = ebpf.map_mut(name).with_context(|| name.to_owned())?;
    Ok(HashMap::try_from(map)?)
}
