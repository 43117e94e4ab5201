//! Map layout 3, installed as the agent of commit `3a6996e` installed it:
//! its eBPF object (`fixtures/lb-ebpf-layout3.o`), the maps pinned under
//! `maps/` with `_V3` pin names, the frontends written with the write
//! protocol of layout 2 (unchanged in 3), the programs attached through
//! links pinned under `links/`. Layout 3 added the state's affinity
//! timeout, `LB4_MEMBERS` and `LB4_AFFINITY` (left empty here: no
//! frontend has affinity); it had no IPv6 maps.

use std::path::Path;

use aya::Pod;

pub use crate::install::Frontend;
use crate::layout2::{FIRST_REV, Frontend4Key, install_object};

/// The object of layout 3, as built then (at layout 3's default
/// capacities, which are also this layout's).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout3.o");

/// Layout 3's maps: symbol name in the object, pin name under `maps/`.
const MAPS: [(&str, &str); 8] = [
    ("LB4_FRONTENDS", "LB4_FRONTENDS_V3"),
    ("LB4_FE_STATE", "LB4_FE_STATE_V3"),
    ("LB4_SLOTS", "LB4_SLOTS_V3"),
    ("LB4_BACKENDS", "LB4_BACKENDS_V3"),
    ("LB4_MEMBERS", "LB4_MEMBERS_V3"),
    ("LB4_AFFINITY", "LB4_AFFINITY_V3"),
    ("LB4_REVNAT", "LB4_REVNAT_V3"),
    ("LB_STATS", "LB_STATS_V3"),
];

/// Value of layout 3's `LB4_FE_STATE`, layout 4's too.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Frontend4State {
    /// The `bpf_spin_lock`; written as 0.
    lock: u32,
    owner: Frontend4Key,
    rev: u16,
    count: u16,
    flags: u16,
    _pad0: [u8; 2],
    affinity_timeout: u32,
}

const _: () = assert!(size_of::<Frontend4State>() == 24);

// SAFETY: repr(C) with its padding spelled out as a field (the size assert
// equals the sum of the fields), and any bit pattern is a valid value.
unsafe impl Pod for Frontend4State {}

/// Installs layout 3 under the pin directory `pins`, programs `frontends`,
/// and attaches its programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    install_object(OBJECT, &MAPS, "layout 3", state, pins, cgroup, frontends)
}

/// The state of a frontend `owner` with `count` backends in its first
/// revision, as the agents of layouts 3 and 4 wrote it.
pub(crate) fn state(owner: Frontend4Key, count: u16) -> Frontend4State {
    Frontend4State {
        lock: 0,
        owner,
        rev: FIRST_REV,
        count,
        flags: 0,
        _pad0: [0; 2],
        affinity_timeout: 0,
    }
}
