//! The topology builder: network namespaces owned by one test
//! ([`Namespaces`], removed on drop), veth pairs between them ([`veth`]),
//! and running commands inside them ([`ip`], [`exec`], [`within`]), all
//! from `lb-test-netns`, which lb-agent's tests share. The
//! ready-made [`Topology`] (a star of hosts around a router) and the
//! two-node bed (`crate::two_nodes`) are built from these. Nothing here
//! touches the root namespace: every interface, address and route is
//! created inside a namespace of the test.

mod foreign_cni;
mod star;
mod veth_xdp;

pub use foreign_cni::{foreign_cni_dnat, foreign_cni_hits};
pub use lb_test_netns::{End, Namespaces, exec, ip, no_dad, sysctl, veth, within};
pub use star::{Topology, v6_of};
pub use veth_xdp::{XdpPass, tx_checksum_off, xdp_pass};
