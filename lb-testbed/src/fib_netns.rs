//! A network namespace for the XDP program's FIB lookups under
//! `BPF_PROG_TEST_RUN`: a device `x0` (the node's external device;
//! backends on other nodes and clients behind a router on it), `x1` (local
//! pods) and `x2` (another external device, to a third network of
//! backends). Only routes and neighbours: no packet is ever sent in it.
//! Shared by the `xdp_programs` and `tc_dsr*` tests and the `tc_cost`
//! bench.

use lb_test_netns::{TestNetns, sysctl};

/// The test's network namespace (`lbt<pid>xdp<n>`, loopback up) with the
/// devices, routes and neighbours above; deleted on drop (also when the
/// test panics).
pub fn fib_netns() -> TestNetns {
    let ns = TestNetns::tagged("xdp");
    for cmd in [
        "link add x0 address 02:00:00:00:00:0a type veth peer name x0p",
        "link add x1 type veth peer name x1p",
        "link add x2 address 02:00:00:00:00:0b type veth peer name x2p",
        "link set x2 up",
        "link set x2p up",
        "addr add 192.0.3.10/24 dev x2",
        "neigh add 192.0.3.1 lladdr 02:00:00:00:00:33 dev x2 nud permanent",
        "route add 10.3.0.0/24 via 192.0.3.1 dev x2",
        "link set x0 up",
        "link set x0p up",
        "link set x1 up",
        "link set x1p up",
        "addr add 192.0.2.10/24 dev x0",
        "addr add fd00:57::1/64 dev x0 nodad",
        "addr add 10.1.0.1/24 dev x1",
        "addr add fd42:1::1/64 dev x1 nodad",
        "neigh add 192.0.2.1 lladdr 02:00:00:00:00:99 dev x0 nud permanent",
        "neigh add fd00:57::fe lladdr 02:00:00:00:00:99 dev x0 nud permanent",
        "neigh add 10.1.0.5 lladdr 02:00:00:00:00:55 dev x1 nud permanent",
        "neigh add fd42:1::5 lladdr 02:00:00:00:00:55 dev x1 nud permanent",
        "route add 10.2.0.0/24 via 192.0.2.1 dev x0",
        "route add 198.51.100.0/24 via 192.0.2.1 dev x0",
        "route add fd42:2::/64 via fd00:57::fe dev x0",
        "route add 2001:db8:c::/64 via fd00:57::fe dev x0",
    ] {
        ns.ip(&cmd.split(' ').collect::<Vec<_>>());
    }
    sysctl(
        ns.name(),
        &["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    ns
}
