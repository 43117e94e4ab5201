//! Map key/value types shared by the eBPF programs and the agent.
//!
//! Every type is `#[repr(C)]` with explicit `_pad` fields, holds no `bool`,
//! `Option` or enum, and carries a compile-time size assert, so that both
//! sides agree on the layout byte for byte. Addresses and ports are stored in
//! network byte order; fields say so with a `_be` suffix. Addresses are byte
//! arrays so that `bpftool map dump` prints them readably.
//!
//! One file per map family: [`addrs`] (which addresses have frontends),
//! [`lb`] (frontends, their state, backend slots,
//! backends, revision members), [`maglev`] (Maglev tables and the flow
//! hash), [`affinity`] (session affinity), [`revnat`]
//! (socket reverse NAT), and for the tc programs [`ct`] (conntrack),
//! [`nat`] (source NAT), [`frag`] (fragments), [`src_ranges`]
//! (`loadBalancerSourceRanges`), [`reject`] (reject rate limits),
//! [`dsr`] (the endpoints of DSR frontends and the nodes' networks),
//! [`syn_budget`] (the budget of unconfirmed TCP flows) and [`config`]
//! (their settings); [`stats`] (datapath counters); [`maps`] names
//! them, with the layout version in every pin name.
//! The IPv6 maps are parallel `*6` maps whose keys and values hold
//! `[u8; 16]` addresses; slots, members and affinity entries are shared
//! types, and the state has the same shape.
#![no_std]

pub mod address;
pub mod addrs;
pub mod affinity;
pub mod config;
pub mod ct;
pub mod dsr;
pub mod frag;
pub mod lb;
pub mod lock;
pub mod maglev;
pub mod maps;
pub mod nat;
pub mod reject;
pub mod revnat;
pub mod sock_netns;
pub mod src_ranges;
pub mod stats;
pub mod syn_budget;
pub mod xdp;

pub use address::Address;
pub use addrs::*;
pub use affinity::*;
pub use config::*;
pub use ct::*;
pub use dsr::*;
pub use frag::*;
pub use lb::*;
pub use lock::SpinLock;
pub use maglev::*;
pub use maps::*;
pub use nat::*;
pub use reject::*;
pub use revnat::*;
pub use sock_netns::*;
pub use src_ranges::*;
pub use stats::*;
pub use syn_budget::*;
pub use xdp::*;
