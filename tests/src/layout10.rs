//! Map layout 10, installed as the agent of commit `d8e9301` installed it
//! for the socket path: its eBPF object (`fixtures/lb-ebpf-layout10.o`),
//! its forty-one maps pinned under `maps/` with `_V10` pin names (and
//! `LB_SOCK_REVNAT_V6`, which layout 10 kept), the frontends written with
//! the write protocol of layout 2 (unchanged since) in layout 8's state
//! (layout 10 kept it: [`layout9::state`]), the socket programs attached through links pinned
//! under `links/`. Layout 10 counted in a flat `LB_STATS` of 55 entries.

use std::path::Path;

pub use crate::install::Frontend;
use crate::{layout2::install_object, layout7, layout9::state};

/// The object of layout 10, as built then (at layout 10's default
/// capacities, which are also this layout's).
static OBJECT: &[u8] = aya::include_bytes_aligned!("../fixtures/lb-ebpf-layout10.o");

/// Layout 10's maps: symbol name in the object, pin name under `maps/`.
const MAPS: [(&str, &str); 41] = [
    ("LB4_FRONTENDS", "LB4_FRONTENDS_V10"),
    ("LB4_FE_STATE", "LB4_FE_STATE_V10"),
    ("LB4_SLOTS", "LB4_SLOTS_V10"),
    ("LB4_BACKENDS", "LB4_BACKENDS_V10"),
    ("LB4_MEMBERS", "LB4_MEMBERS_V10"),
    ("LB4_AFFINITY", "LB4_AFFINITY_V10"),
    ("LB4_REVNAT", "LB4_REVNAT_V10"),
    ("LB_SOCK_REVNAT", "LB_SOCK_REVNAT_V6"),
    ("LB_ADDRS", "LB_ADDRS_V10"),
    ("LB6_FRONTENDS", "LB6_FRONTENDS_V10"),
    ("LB6_FE_STATE", "LB6_FE_STATE_V10"),
    ("LB6_SLOTS", "LB6_SLOTS_V10"),
    ("LB6_BACKENDS", "LB6_BACKENDS_V10"),
    ("LB6_MEMBERS", "LB6_MEMBERS_V10"),
    ("LB6_AFFINITY", "LB6_AFFINITY_V10"),
    ("LB6_REVNAT", "LB6_REVNAT_V10"),
    ("LB_STATS", "LB_STATS_V10"),
    ("LB4_CT", "LB4_CT_V10"),
    ("LB4_NAT", "LB4_NAT_V10"),
    ("LB_CONFIG", "LB_CONFIG_V10"),
    ("LB4_SRC_RANGES", "LB4_SRC_RANGES_V10"),
    ("LB4_FRAG", "LB4_FRAG_V10"),
    ("LB4_REJECTS", "LB4_REJECTS_V10"),
    ("LB4_REVNAT_PREV", "LB4_REVNAT_PREV_V10"),
    ("LB6_REVNAT_PREV", "LB6_REVNAT_PREV_V10"),
    ("LB4_CT_PREV", "LB4_CT_PREV_V10"),
    ("LB4_NAT_PREV", "LB4_NAT_PREV_V10"),
    ("LB6_CT", "LB6_CT_V10"),
    ("LB6_NAT", "LB6_NAT_V10"),
    ("LB6_SRC_RANGES", "LB6_SRC_RANGES_V10"),
    ("LB6_FRAG", "LB6_FRAG_V10"),
    ("LB6_REJECTS", "LB6_REJECTS_V10"),
    ("LB6_CT_PREV", "LB6_CT_PREV_V10"),
    ("LB6_NAT_PREV", "LB6_NAT_PREV_V10"),
    ("LB4_MAGLEV", "LB4_MAGLEV_V10"),
    ("LB6_MAGLEV", "LB6_MAGLEV_V10"),
    ("LB_SYN_BUDGET", "LB_SYN_BUDGET_V10"),
    ("LB4_DSR_EPS", "LB4_DSR_EPS_V10"),
    ("LB6_DSR_EPS", "LB6_DSR_EPS_V10"),
    ("LB4_NODE_NETS", "LB4_NODE_NETS_V10"),
    ("LB6_NODE_NETS", "LB6_NODE_NETS_V10"),
];

/// Installs layout 10 under the pin directory `pins`, programs `frontends`
/// (and names their addresses in `LB_ADDRS`, which its connect4 tests
/// first), and attaches its socket programs to `cgroup`.
pub fn install(pins: &Path, cgroup: &Path, frontends: &[Frontend]) -> anyhow::Result<()> {
    install_object(OBJECT, &MAPS, "layout 10", state, pins, cgroup, frontends)?;
    layout7::mark_addrs(pins, "LB_ADDRS_V10", frontends)
}
