//! Map layout 7, installed as the agent of commit `e11544a` installed it for
//! the socket path: its eBPF object (`fixtures/lb-ebpf-layout7.o`), its
//! thirty-four maps pinned under `maps/` with `_V7` pin names (and
//! `LB_SOCK_REVNAT_V6`, which layout 7 kept), the frontends written with
//! the write protocol of layout 2 (unchanged since), the socket programs
//! attached through links pinned under `links/`. Layout 7 had no Maglev
//! tables, and its frontend state had layout 3's shape.

use std::path::Path;

use aya::maps::{Array, Map, MapData};

pub use crate::install::Frontend;
use crate::{layout2::install_object, layout3};

/// The object of layout 7, as built then (at layout 7's default
/// capacities, which are also this layout's).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout7.o");

/// Layout 7's maps: symbol name in the object, pin name under `maps/`.
const MAPS: [(&str, &str); 34] = [
    ("LB4_FRONTENDS", "LB4_FRONTENDS_V7"),
    ("LB4_FE_STATE", "LB4_FE_STATE_V7"),
    ("LB4_SLOTS", "LB4_SLOTS_V7"),
    ("LB4_BACKENDS", "LB4_BACKENDS_V7"),
    ("LB4_MEMBERS", "LB4_MEMBERS_V7"),
    ("LB4_AFFINITY", "LB4_AFFINITY_V7"),
    ("LB4_REVNAT", "LB4_REVNAT_V7"),
    ("LB_SOCK_REVNAT", "LB_SOCK_REVNAT_V6"),
    ("LB_ADDRS", "LB_ADDRS_V7"),
    ("LB6_FRONTENDS", "LB6_FRONTENDS_V7"),
    ("LB6_FE_STATE", "LB6_FE_STATE_V7"),
    ("LB6_SLOTS", "LB6_SLOTS_V7"),
    ("LB6_BACKENDS", "LB6_BACKENDS_V7"),
    ("LB6_MEMBERS", "LB6_MEMBERS_V7"),
    ("LB6_AFFINITY", "LB6_AFFINITY_V7"),
    ("LB6_REVNAT", "LB6_REVNAT_V7"),
    ("LB_STATS", "LB_STATS_V7"),
    ("LB4_CT", "LB4_CT_V7"),
    ("LB4_NAT", "LB4_NAT_V7"),
    ("LB_CONFIG", "LB_CONFIG_V7"),
    ("LB4_SRC_RANGES", "LB4_SRC_RANGES_V7"),
    ("LB4_FRAG", "LB4_FRAG_V7"),
    ("LB4_REJECTS", "LB4_REJECTS_V7"),
    ("LB4_REVNAT_PREV", "LB4_REVNAT_PREV_V7"),
    ("LB6_REVNAT_PREV", "LB6_REVNAT_PREV_V7"),
    ("LB4_CT_PREV", "LB4_CT_PREV_V7"),
    ("LB4_NAT_PREV", "LB4_NAT_PREV_V7"),
    ("LB6_CT", "LB6_CT_V7"),
    ("LB6_NAT", "LB6_NAT_V7"),
    ("LB6_SRC_RANGES", "LB6_SRC_RANGES_V7"),
    ("LB6_FRAG", "LB6_FRAG_V7"),
    ("LB6_REJECTS", "LB6_REJECTS_V7"),
    ("LB6_CT_PREV", "LB6_CT_PREV_V7"),
    ("LB6_NAT_PREV", "LB6_NAT_PREV_V7"),
];

/// Installs layout 7 under the pin directory `pins`, programs `frontends`
/// (layout 7's state has layout 3's shape, and `LB_ADDRS` names their
/// addresses, which its connect4 tests first), and attaches its socket
/// programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    install_object(
        OBJECT,
        &MAPS,
        "layout 7",
        layout3::state,
        pins,
        cgroup,
        frontends,
    )?;
    mark_addrs(pins, "LB_ADDRS_V7", frontends)
}

/// Sets the bits of `frontends`' addresses in the `LB_ADDRS` map pinned as
/// `pin`, as the agents of layouts 6 on wrote them.
pub(crate) fn mark_addrs(pins: &Path, pin: &str, frontends: &[Frontend]) -> anyhow::Result<()> {
    let data = MapData::from_pin(pins.join("maps").join(pin))?;
    let mut words: Array<MapData, u64> = Array::try_from(Map::Array(data))?;
    for f in frontends {
        let (index, bit) = lb_common::addr_bit4(f.vip.octets());
        let word = words.get(&index, 0)?;
        words.set(index, word | bit, 0)?;
    }
    Ok(())
}
