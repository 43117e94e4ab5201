//! Map layout 5, installed as the agent of commit `a961124` installed it for
//! the socket path: its eBPF object (`fixtures/lb-ebpf-layout5.o`), its
//! twenty-five maps pinned under `maps/` with `_V5` pin names, the
//! frontends written with the write protocol of layout 2 (unchanged since),
//! the socket programs attached through links pinned under `links/`.
//! Layout 5 kept every translated socket's reverse-NAT entry in the LRU
//! `LB4_REVNAT`; it had no `LB_SOCK_REVNAT`.

use std::path::Path;

pub use crate::install::Frontend;
use crate::{layout2::install_object, layout3};

/// The object of layout 5, as built then (at layout 5's default
/// capacities, which are also this layout's).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout5.o");

/// Layout 5's maps: symbol name in the object, pin name under `maps/`.
const MAPS: [(&str, &str); 25] = [
    ("LB4_FRONTENDS", "LB4_FRONTENDS_V5"),
    ("LB4_FE_STATE", "LB4_FE_STATE_V5"),
    ("LB4_SLOTS", "LB4_SLOTS_V5"),
    ("LB4_BACKENDS", "LB4_BACKENDS_V5"),
    ("LB4_MEMBERS", "LB4_MEMBERS_V5"),
    ("LB4_AFFINITY", "LB4_AFFINITY_V5"),
    ("LB4_REVNAT", "LB4_REVNAT_V5"),
    ("LB6_FRONTENDS", "LB6_FRONTENDS_V5"),
    ("LB6_FE_STATE", "LB6_FE_STATE_V5"),
    ("LB6_SLOTS", "LB6_SLOTS_V5"),
    ("LB6_BACKENDS", "LB6_BACKENDS_V5"),
    ("LB6_MEMBERS", "LB6_MEMBERS_V5"),
    ("LB6_AFFINITY", "LB6_AFFINITY_V5"),
    ("LB6_REVNAT", "LB6_REVNAT_V5"),
    ("LB_STATS", "LB_STATS_V5"),
    ("LB4_CT", "LB4_CT_V5"),
    ("LB4_NAT", "LB4_NAT_V5"),
    ("LB_CONFIG", "LB_CONFIG_V5"),
    ("LB4_SRC_RANGES", "LB4_SRC_RANGES_V5"),
    ("LB4_FRAG", "LB4_FRAG_V5"),
    ("LB4_REJECTS", "LB4_REJECTS_V5"),
    ("LB4_REVNAT_PREV", "LB4_REVNAT_PREV_V5"),
    ("LB6_REVNAT_PREV", "LB6_REVNAT_PREV_V5"),
    ("LB4_CT_PREV", "LB4_CT_PREV_V5"),
    ("LB4_NAT_PREV", "LB4_NAT_PREV_V5"),
];

/// Installs layout 5 under the pin directory `pins`, programs `frontends`
/// (layout 5's state has layout 3's shape), and attaches its socket
/// programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    install_object(
        OBJECT,
        &MAPS,
        "layout 5",
        layout3::state,
        pins,
        cgroup,
        frontends,
    )
}
