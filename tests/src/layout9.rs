//! Map layout 9, installed as the agent of commit `b73fe3b` installed it
//! for the socket path: its eBPF object (`fixtures/lb-ebpf-layout9.o`), its
//! thirty-seven maps pinned under `maps/` with `_V9` pin names (and
//! `LB_SOCK_REVNAT_V6`, which layout 9 kept), the frontends written with
//! the write protocol of layout 2 (unchanged since) in layout 8's state
//! (layout 9 kept it), the socket programs attached through links pinned
//! under `links/`. Layout 9 had no maps of DSR frontends' endpoints nor of
//! the nodes' networks.

use std::path::Path;

use aya::Pod;

pub use crate::install::Frontend;
use crate::{
    layout2::{FIRST_REV, Frontend4Key, install_object},
    layout7,
};

/// The object of layout 9, as built then (at layout 9's default
/// capacities, which are also this layout's).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout9.o");

/// Layout 9's maps: symbol name in the object, pin name under `maps/`.
const MAPS: [(&str, &str); 37] = [
    ("LB4_FRONTENDS", "LB4_FRONTENDS_V9"),
    ("LB4_FE_STATE", "LB4_FE_STATE_V9"),
    ("LB4_SLOTS", "LB4_SLOTS_V9"),
    ("LB4_BACKENDS", "LB4_BACKENDS_V9"),
    ("LB4_MEMBERS", "LB4_MEMBERS_V9"),
    ("LB4_AFFINITY", "LB4_AFFINITY_V9"),
    ("LB4_REVNAT", "LB4_REVNAT_V9"),
    ("LB_SOCK_REVNAT", "LB_SOCK_REVNAT_V6"),
    ("LB_ADDRS", "LB_ADDRS_V9"),
    ("LB6_FRONTENDS", "LB6_FRONTENDS_V9"),
    ("LB6_FE_STATE", "LB6_FE_STATE_V9"),
    ("LB6_SLOTS", "LB6_SLOTS_V9"),
    ("LB6_BACKENDS", "LB6_BACKENDS_V9"),
    ("LB6_MEMBERS", "LB6_MEMBERS_V9"),
    ("LB6_AFFINITY", "LB6_AFFINITY_V9"),
    ("LB6_REVNAT", "LB6_REVNAT_V9"),
    ("LB_STATS", "LB_STATS_V9"),
    ("LB4_CT", "LB4_CT_V9"),
    ("LB4_NAT", "LB4_NAT_V9"),
    ("LB_CONFIG", "LB_CONFIG_V9"),
    ("LB4_SRC_RANGES", "LB4_SRC_RANGES_V9"),
    ("LB4_FRAG", "LB4_FRAG_V9"),
    ("LB4_REJECTS", "LB4_REJECTS_V9"),
    ("LB4_REVNAT_PREV", "LB4_REVNAT_PREV_V9"),
    ("LB6_REVNAT_PREV", "LB6_REVNAT_PREV_V9"),
    ("LB4_CT_PREV", "LB4_CT_PREV_V9"),
    ("LB4_NAT_PREV", "LB4_NAT_PREV_V9"),
    ("LB6_CT", "LB6_CT_V9"),
    ("LB6_NAT", "LB6_NAT_V9"),
    ("LB6_SRC_RANGES", "LB6_SRC_RANGES_V9"),
    ("LB6_FRAG", "LB6_FRAG_V9"),
    ("LB6_REJECTS", "LB6_REJECTS_V9"),
    ("LB6_CT_PREV", "LB6_CT_PREV_V9"),
    ("LB6_NAT_PREV", "LB6_NAT_PREV_V9"),
    ("LB4_MAGLEV", "LB4_MAGLEV_V9"),
    ("LB6_MAGLEV", "LB6_MAGLEV_V9"),
    ("LB_SYN_BUDGET", "LB_SYN_BUDGET_V9"),
];

/// Layout 9's frontend state (layout 8's): layout 3's and the size of a
/// Maglev table.
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
    maglev_size: u32,
}

const _: () = assert!(size_of::<Frontend4State>() == 28);

// SAFETY: repr(C), padded explicitly (the size assert equals the sum of the
// fields), every bit pattern valid.
unsafe impl Pod for Frontend4State {}

/// A frontend `owner` with `count` backends in its first revision, at
/// random, as layout 9's agent wrote it.
pub(crate) fn state(owner: Frontend4Key, count: u16) -> Frontend4State {
    Frontend4State {
        lock: 0,
        owner,
        rev: FIRST_REV,
        count,
        flags: 0,
        _pad0: [0; 2],
        affinity_timeout: 0,
        maglev_size: 0,
    }
}

/// Installs layout 9 under the pin directory `pins`, programs `frontends`
/// (and names their addresses in `LB_ADDRS`, which its connect4 tests
/// first), and attaches its socket programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    install_object(OBJECT, &MAPS, "layout 9", state, pins, cgroup, frontends)?;
    layout7::mark_addrs(pins, "LB_ADDRS_V9", frontends)
}
