//! The XDP fast path (`lb_xdp`) on crafted packets of both families,
//! through `BPF_PROG_TEST_RUN`, in a network namespace of the test's own
//! whose FIB the program consults: a device `x0` (the node's external
//! device; backends on other nodes and clients behind a router on it),
//! `x1` (local pods) and `x2` (another external device, to a third
//! network of backends). Every checksum is checked against etherparse's
//! reference computation. Needs root (CAP_BPF, CAP_NET_ADMIN, setns);
//! without it every test fails.

use lb_common::{
    At, CT_SEEN, PROTO_TCP, PROTO_UDP, Reason, XDP_FOUND_FLOW, XDP_FOUND_KERNEL, XDP_META_FOUND,
    XdpFound,
};
use lb_testbed::bed::*;
use lb_testbed::fib_netns::fib_netns;
use lb_testbed::packets6::*;

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;
/// A backend behind `x2`.
const FAR_POD: Addr = ([10, 3, 0, 9], 8080);
/// The router's MAC address (the next hop to other nodes and clients),
/// and the node device's.
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x99];
const DEVICE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x0a];

/// The MAC addresses and the TTL (hop limit) of a frame.
fn hop(frame: &[u8], v6: bool) -> ([u8; 6], [u8; 6], u8) {
    let ttl = if v6 { frame[14 + 7] } else { frame[14 + 8] };
    (
        frame[..6].try_into().unwrap(),
        frame[6..12].try_into().unwrap(),
        ttl,
    )
}

fn bed() -> Bed {
    let mut bed = Bed::new();
    bed.load_xdp();
    bed
}

#[test]
fn xdp_sends_a_cluster_flow_to_a_remote_backend_translated_both_ways_back_out_of_its_device() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let frontend = (NODE, NODE_PORT);
    ns.run(|| {
        // The first packet: DNAT and SNAT, as tc ingress and egress would.
        let (action, out) = bed.xdp(&tcp(CLIENT, frontend, Tcp::Syn), x0);
        assert_eq!(action, XDP_TX);
        let on_wire = seen(&out);
        assert_eq!((on_wire.src.0, on_wire.dst), (NODE, REMOTE_POD));
        assert!((61_000..=61_010).contains(&on_wire.src.1), "{on_wire:?}");
        assert_eq!(hop(&out, false), (ROUTER_MAC, DEVICE_MAC, 63));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1);
        assert_eq!(
            bed.stat(stat4(At::TC_IN, Reason::NewFlow)),
            0,
            "tc saw nothing"
        );
        assert_eq!(bed.ct().len(), 2, "both directions recorded");
        assert_eq!(bed.nat().len(), 1, "the SNAT port held");

        // A conntrack hit: the same backend and SNAT port.
        let (action, next) = bed.xdp(&tcp(CLIENT, frontend, Tcp::Ack), x0);
        assert_eq!(action, XDP_TX);
        assert_eq!(seen(&next), on_wire);

        // The backend's reply to the node's port: back to the client, from
        // the frontend.
        let (action, back) = bed.xdp(&tcp(REMOTE_POD, on_wire.src, Tcp::SynAck), x0);
        assert_eq!(action, XDP_TX);
        assert_eq!(
            seen(&back),
            Seen {
                src: frontend,
                dst: CLIENT
            }
        );
        assert_eq!(hop(&back, false), (ROUTER_MAC, DEVICE_MAC, 63));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::Forwarded)), 3);
        assert_eq!(bed.stat(stat4(At::XDP, Reason::PassedToTc)), 0);
    });
}

/// Waits until the programs' clock (`bpf_ktime_get_coarse_ns`, the
/// coarse monotonic clock) is early in a second: cache entries written
/// then are used until the second ends, long after a test's few runs.
fn early_in_a_second() {
    loop {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec for the call to fill.
        let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &raw mut t) };
        assert_eq!(ret, 0);
        if t.tv_nsec < 200_000_000 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Forgets every flow the tc and XDP programs recorded in conntrack and
/// SNAT: a packet only the flow cache knows how to send.
fn forget_flows(bed: &mut Bed) {
    fn clear<K: aya::Pod, V: aya::Pod>(map: &mut aya::maps::HashMap<aya::maps::MapData, K, V>) {
        let keys: Vec<K> = map.keys().map(Result::unwrap).collect();
        for k in keys {
            map.remove(&k).unwrap();
        }
    }
    clear(&mut bed.ct);
    clear(&mut bed.nat);
    clear(&mut bed.ct6);
    clear(&mut bed.nat6);
}

#[test]
fn xdp_sends_a_flows_next_packets_both_ways_by_its_cache_alone_until_something_changes() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let frontend = (NODE, NODE_PORT);
    ns.run(|| {
        early_in_a_second();
        // A SYN changes the flow's state: never cached.
        let (action, out) = bed.xdp(&tcp(CLIENT, frontend, Tcp::Syn), x0);
        assert_eq!(action, XDP_TX);
        let on_wire = seen(&out);
        assert_eq!(bed.xdp_flows(), (0, 0));
        // The full path sends an ACK and each reply, and remembers how.
        let ack = tcp(CLIENT, frontend, Tcp::Ack);
        let reply = tcp(REMOTE_POD, on_wire.src, Tcp::Ack);
        let (_, sent) = bed.xdp(&ack, x0);
        let (_, back) = bed.xdp(&reply, x0);
        assert_eq!(bed.xdp_flows(), (2, 0), "both halves cached");

        // With conntrack and SNAT empty, the full path would leave both to
        // the kernel; the cache sends them as before, checksums included
        // (`seen` checks them), in the same second.
        forget_flows(&mut bed);
        assert_eq!(bed.xdp(&ack, x0), (XDP_TX, sent.clone()));
        assert_eq!(seen(&sent), on_wire);
        assert_eq!(bed.xdp(&reply, x0), (XDP_TX, back.clone()));
        assert_eq!(
            seen(&back),
            Seen {
                src: frontend,
                dst: CLIENT
            }
        );
        assert_eq!(hop(&back, false), (ROUTER_MAC, DEVICE_MAC, 63));
        let forwarded = bed.stat(stat4(At::XDP, Reason::Forwarded));
        assert_eq!(forwarded, 5);

        // A broken IPv4 header checksum: the full path's (which leaves it
        // to the kernel, which drops it), not sent on by the cache.
        let mut broken = ack.clone();
        broken[14 + 10] ^= 0xff;
        assert_eq!(bed.xdp(&broken, x0), (XDP_PASS, broken.clone()));

        // A FIN changes the flow's state: the full path's, which knows no
        // flow now and leaves it to the kernel untouched.
        let fin = tcp(CLIENT, frontend, Tcp::Fin);
        assert_eq!(bed.xdp(&fin, x0), (XDP_PASS, fin.clone()));
        // A new generation (a route, neighbour or flow changed): the
        // cache is not used.
        bed.bump_xdp_generation();
        assert_eq!(bed.xdp(&ack, x0), (XDP_PASS, ack.clone()));
        // (No flow and no frontend: not ours, tc is told.)
        assert_eq!(bed.xdp(&reply, x0), (XDP_PASS, not_ours(&reply)));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::Forwarded)), forwarded);
    });
}

/// A packet to no frontend's address (`LB_ADDRS`) and not to the SNAT
/// address is spared the cache's lookup, not the full path's: a flow whose
/// frontend's address lost its bit is still sent on, by its conntrack
/// entry, and no longer by the cache.
#[test]
fn the_cache_is_looked_up_only_for_frontends_addresses_and_the_snat_address() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    let frontend = ([198, 51, 100, 20], 80);
    bed.frontend_at(
        frontend,
        PROTO_UDP,
        lb_common::FE_F_EXTERNAL_LOCAL,
        &[REMOTE_POD],
    );
    ns.run(|| {
        early_in_a_second();
        let datagram = udp(CLIENT, frontend);
        let (action, sent) = bed.xdp(&datagram, x0);
        assert_eq!(action, XDP_TX);
        assert_eq!(bed.xdp_flows(), (0, 0), "a flow's first datagram");
        assert_eq!(bed.xdp(&datagram, x0), (XDP_TX, sent.clone()));
        assert_eq!(bed.xdp_flows(), (1, 0), "its second: cached");
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1);
        // The address's bit gone: the full path sends it, a known flow.
        bed.clear_addrs();
        assert_eq!(bed.xdp(&datagram, x0), (XDP_TX, sent));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1, "known");
        // With conntrack empty, the cache would send it as before in this
        // second; it is not looked up, and the full path records the flow
        // anew.
        forget_flows(&mut bed);
        assert_eq!(bed.xdp(&datagram, x0).0, XDP_TX);
        assert_eq!(
            bed.stat(stat4(At::XDP, Reason::NewFlow)),
            2,
            "the full path's"
        );
    });
}

#[test]
fn xdp_sends_an_ipv6_flows_next_datagrams_by_its_cache_at_its_generation_only() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_UDP, 0, &[REMOTE_POD6]);
    ns.run(|| {
        early_in_a_second();
        let datagram = udp6(CLIENT6, FRONTEND6);
        let (_, out) = bed.xdp(&datagram, x0);
        let on_wire = seen6(&out);
        let reply = udp6(REMOTE_POD6, on_wire.src);
        let (_, back) = bed.xdp(&reply, x0);
        assert_eq!(bed.xdp_flows(), (0, 1), "the first datagram is not cached");
        assert_eq!(bed.xdp(&datagram, x0), (XDP_TX, out.clone()));
        assert_eq!(bed.xdp_flows(), (0, 2), "both halves cached");
        forget_flows(&mut bed);
        assert_eq!(bed.xdp(&datagram, x0), (XDP_TX, out.clone()));
        assert_eq!(seen6(&out), on_wire);
        assert_eq!(bed.xdp(&reply, x0), (XDP_TX, back.clone()));
        assert_eq!(seen6(&back), flow6(FRONTEND6, CLIENT6));
        assert_eq!(hop(&back, true), (ROUTER_MAC, DEVICE_MAC, 63));
        assert_eq!(bed.stat(stat6(At::XDP, Reason::Forwarded)), 5);
        bed.bump_xdp_generation();
        // The full path again: a new flow, recorded anew.
        let (action, again) = bed.xdp(&datagram, x0);
        assert_eq!(action, XDP_TX);
        assert_eq!(seen6(&again).dst, REMOTE_POD6);
        assert_eq!(bed.stat(stat6(At::XDP, Reason::NewFlow)), 2);
    });
}

/// `frame` behind the metadata XDP leaves for tc on a packet it found no
/// frontend's nor flow's of ours.
fn not_ours(frame: &[u8]) -> Vec<u8> {
    [&lb_common::XDP_META_NOT_OURS.to_ne_bytes()[..], frame].concat()
}

/// `frame` behind the metadata XDP leaves for tc on a packet of a flow of
/// ours it passes up, whose destination becomes `to`.
fn handed_over<A: Copy + Default>(frame: &[u8], to: (A, u16)) -> Vec<u8> {
    found(frame, to, XDP_FOUND_FLOW)
}

/// `frame` behind the metadata [`XdpFound`] of `addr:port` and `what`.
fn found<A: Copy + Default>(frame: &[u8], (addr_be, port): (A, u16), what: u8) -> Vec<u8> {
    let found = XdpFound {
        tag: XDP_META_FOUND,
        addr_be,
        port_be: port.to_be(),
        what,
        addr_len: size_of::<A>() as u8,
    };
    // SAFETY: `XdpFound` is repr(C) plain data without padding (its size
    // asserts), and the slice covers exactly it.
    let bytes = unsafe {
        std::slice::from_raw_parts((&raw const found).cast::<u8>(), size_of::<XdpFound<A>>())
    };
    [bytes, frame].concat()
}

/// A flow to a local backend is XDP's to record, not to send: it records
/// it, leaves the frame untouched and tells tc in the metadata where it
/// goes; the flow's next packets in that second are handed over the same
/// way by the flow cache alone, and later ones by the full path, which
/// advances the flow. tc, told nothing (a test run has no metadata), finds
/// the flow XDP recorded. A packet of no frontend is handed over as not
/// ours.
#[test]
fn xdp_records_local_backends_flows_and_hands_them_to_tc_and_strangers_as_not_ours() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[LOCAL_POD]);
    let second = std::time::Duration::from_millis(1_100);
    ns.run(|| {
        early_in_a_second();
        // A local backend: behind another device.
        let to_local = udp(CLIENT, (NODE, NODE_PORT));
        let up = handed_over(&to_local, LOCAL_POD);
        assert_eq!(bed.xdp(&to_local, x0), (XDP_PASS, up.clone()));
        assert_eq!(bed.ct().len(), 2, "the flow recorded both ways");
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1);
        assert_eq!(bed.stat(stat4(At::XDP, Reason::PassedToTc)), 1);
        assert_eq!(bed.xdp_flows(), (0, 0), "a flow's first packet: not cached");
        // Its second: known, handed over, and cached.
        assert_eq!(bed.xdp(&to_local, x0), (XDP_PASS, up.clone()));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1, "known");
        assert_eq!(bed.xdp_flows(), (1, 0), "the hand-over cached");
        // With conntrack empty, the full path would record the flow anew;
        // the cache hands its datagrams over as before, in this second.
        forget_flows(&mut bed);
        assert_eq!(bed.xdp(&to_local, x0), (XDP_PASS, up.clone()));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1, "by the cache");
        assert_eq!(bed.stat(stat4(At::XDP, Reason::PassedToTc)), 3);
        // The next second: the full path's, which records it again.
        std::thread::sleep(second);
        assert_eq!(bed.xdp(&to_local, x0), (XDP_PASS, up.clone()));
        assert_eq!(
            bed.stat(stat4(At::XDP, Reason::NewFlow)),
            2,
            "recorded again"
        );
        let expires = bed.ct()[0].1.expires;
        // And a second later, a known flow: advanced by XDP.
        std::thread::sleep(second);
        assert_eq!(bed.xdp(&to_local, x0), (XDP_PASS, up));
        assert!(bed.ct()[0].1.expires > expires, "advanced: {:?}", bed.ct());
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 2, "known");
        // No frontend: not ours, and tc is told so in the metadata (the
        // test run hands the frame back from its metadata on).
        let stranger = udp(CLIENT, (NODE, NODE_PORT + 1));
        assert_eq!(bed.xdp(&stranger, x0), (XDP_PASS, not_ours(&stranger)));
        assert_eq!(
            bed.stat(stat4(At::XDP, Reason::PassedToTc)),
            5,
            "not a flow of ours"
        );
        // tc without the metadata finds the flow XDP recorded.
        let (_, dnated) = bed.ingress(&to_local);
        assert_eq!(seen(&dnated).dst, LOCAL_POD);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 0);
        assert_eq!(bed.stat(stat4(At::XDP, Reason::Forwarded)), 0);
    });
}

/// A flow the kernel tracks (kube-proxy's, taken over) is left to tc,
/// told so: XDP advances its entry, tc passes it without a lookup.
#[test]
fn xdp_hands_a_flow_the_kernel_tracks_to_tc_as_the_kernels() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[REMOTE_POD]);
    let now = lb_agent::datapath::conntrack::now();
    bed.kernel_flow(CLIENT, (NODE, NODE_PORT), PROTO_UDP, (CT_SEEN, 0), 5);
    ns.run(|| {
        let datagram = udp(CLIENT, (NODE, NODE_PORT));
        let up = found(&datagram, ([0u8; 4], 0), XDP_FOUND_KERNEL);
        assert_eq!(bed.xdp(&datagram, x0), (XDP_PASS, up));
        let ct = bed.ct();
        assert_eq!(ct.len(), 1, "{ct:?}");
        assert!(ct[0].1.expires > now + 5, "advanced by XDP: {ct:?}");
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 0);
    });
}

#[test]
fn xdp_sends_an_ipv6_cluster_flow_to_a_remote_backend_translated_both_ways() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_UDP, 0, &[REMOTE_POD6]);
    ns.run(|| {
        let (action, out) = bed.xdp(&udp6(CLIENT6, FRONTEND6), x0);
        assert_eq!(action, XDP_TX);
        let on_wire = seen6(&out);
        assert_eq!((on_wire.src.0, on_wire.dst), (NODE6, REMOTE_POD6));
        assert!((61_000..=61_010).contains(&on_wire.src.1), "{on_wire:?}");
        assert_eq!(hop(&out, true), (ROUTER_MAC, DEVICE_MAC, 63));
        assert_eq!(bed.stat(stat6(At::XDP, Reason::NewFlow)), 1);
        assert_eq!(
            bed.stat(stat4(At::XDP, Reason::NewFlow)),
            0,
            "not an IPv4 flow"
        );

        let (action, next) = bed.xdp(&udp6(CLIENT6, FRONTEND6), x0);
        assert_eq!(action, XDP_TX);
        assert_eq!(seen6(&next), on_wire, "a conntrack hit");

        let (action, back) = bed.xdp(&udp6(REMOTE_POD6, on_wire.src), x0);
        assert_eq!(action, XDP_TX);
        assert_eq!(seen6(&back), flow6(FRONTEND6, CLIENT6));
        assert_eq!(hop(&back, true), (ROUTER_MAC, DEVICE_MAC, 63));
        assert_eq!(bed.stat(stat6(At::XDP, Reason::Forwarded)), 3);
    });
}

#[test]
fn xdp_records_ipv6_local_backends_flows_and_hands_them_to_tc_and_strangers_as_not_ours() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[LOCAL_POD6]);
    ns.run(|| {
        let to_local = tcp6(CLIENT6, FRONTEND6, Tcp::Syn);
        let up = handed_over(&to_local, LOCAL_POD6);
        assert_eq!(bed.xdp(&to_local, x0), (XDP_PASS, up));
        assert_eq!(bed.ct6().len(), 2, "the flow recorded both ways");
        assert_eq!(bed.stat(stat6(At::XDP, Reason::NewFlow)), 1);
        let ack = tcp6(CLIENT6, FRONTEND6, Tcp::Ack);
        assert_eq!(bed.xdp(&ack, x0), (XDP_PASS, handed_over(&ack, LOCAL_POD6)));
        assert_eq!(bed.stat(stat6(At::XDP, Reason::PassedToTc)), 2);
        assert_eq!(
            bed.xdp_flows(),
            (0, 1),
            "the ACK's hand-over cached, not the SYN's"
        );
        let stranger = tcp6(CLIENT6, (NODE6, 9), Tcp::Syn);
        assert_eq!(bed.xdp(&stranger, x0), (XDP_PASS, not_ours(&stranger)));
        assert_eq!(bed.stat(stat6(At::XDP, Reason::PassedToTc)), 2);
    });
}

#[test]
fn xdp_redirects_to_another_device_it_runs_on_and_leaves_other_devices_to_tc() {
    let ns = fib_netns();
    let (x0, x2) = (ns.ifindex("x0"), ns.ifindex("x2"));
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[FAR_POD]);
    let request = udp(CLIENT, (NODE, NODE_PORT));
    // x2 is not one of the fast path's devices: tc egress runs there, and
    // SNATs. XDP records the flow and hands it over.
    let passed = ns.run(|| bed.xdp(&request, x0));
    assert_eq!(passed, (XDP_PASS, handed_over(&request, FAR_POD)));
    assert_eq!(bed.ct().len(), 2, "the flow recorded");
    assert!(bed.nat().is_empty(), "no SNAT port taken");
    assert_eq!(bed.stat(stat4(At::XDP, Reason::PassedToTc)), 1);

    // Now it is (and the cache's generation moves on, as the agent moves
    // it after each attachment): the flow's next packet goes out of x2
    // from XDP.
    bed.xdp_devices(&[x0, x2]);
    bed.bump_xdp_generation();
    ns.run(|| {
        let (action, out) = bed.xdp(&request, x0);
        assert_eq!(action, XDP_REDIRECT);
        let on_wire = seen(&out);
        assert_eq!((on_wire.src.0, on_wire.dst), (NODE, FAR_POD));
        assert!((61_000..=61_010).contains(&on_wire.src.1), "{on_wire:?}");
        assert_eq!(
            hop(&out, false),
            ([2, 0, 0, 0, 0, 0x33], [2, 0, 0, 0, 0, 0x0b], 63),
            "x2's next hop and address"
        );
        // The reply comes in on x2 and goes back out of x0.
        let (action, back) = bed.xdp(&udp(FAR_POD, on_wire.src), x2);
        assert_eq!(action, XDP_REDIRECT);
        assert_eq!(
            seen(&back),
            Seen {
                src: (NODE, NODE_PORT),
                dst: CLIENT
            }
        );
        assert_eq!(hop(&back, false), (ROUTER_MAC, DEVICE_MAC, 63));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::Forwarded)), 2);
    });
}

#[test]
fn what_xdp_drops_is_counted_by_reason_as_xdps() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    // One SNAT port: the first client's flow takes it.
    bed.snat(NODE, 61_000, 61_000);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[REMOTE_POD]);
    let other = ([198, 51, 100, 8], 40000);
    ns.run(|| {
        let (action, _) = bed.xdp(&udp(CLIENT, (NODE, NODE_PORT)), x0);
        assert_eq!(action, XDP_TX);
        let (action, _) = bed.xdp(&udp(other, (NODE, NODE_PORT)), x0);
        assert_eq!(action, XDP_DROP);
    });
    assert_eq!(bed.stat(stat4(At::XDP, Reason::DropSnatExhausted)), 1);
    assert_eq!(
        bed.stat(stat4(At::TC_OUT, Reason::DropSnatExhausted)),
        0,
        "XDP's, not tc's"
    );
    assert_eq!(bed.stat(stat4(At::XDP, Reason::Forwarded)), 1);
}

#[test]
fn xdp_sends_later_ipv4_fragments_where_their_first_went() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[REMOTE_POD]);
    let fragments = udp_fragments(CLIENT, (NODE, NODE_PORT), 7, 3000, 1280);
    assert!(fragments.len() >= 3);
    ns.run(|| {
        for (i, fragment) in fragments.iter().enumerate() {
            let (action, out) = bed.xdp(fragment, x0);
            assert_eq!(action, XDP_TX, "fragment {i}");
            let (src, dst, later) = seen_ip(&out);
            assert_eq!(
                (src, dst, later),
                (NODE, REMOTE_POD.0, i > 0),
                "fragment {i}"
            );
        }
    });
    assert_eq!(
        bed.stat(stat4(At::XDP, Reason::Forwarded)),
        fragments.len() as u64
    );
    assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1);
}

/// XDP picks a new flow's backend the way tc does, Maglev included: each
/// flow to a frontend with a table goes to the backend its hash names.
#[test]
fn xdp_sends_each_new_flow_of_a_maglev_frontend_where_its_hash_points() {
    use lb_agent::model::maglev::{HashSeed, TableSize, lookup_table};
    use lb_common::{FlowHash, ports_word};

    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let backends: Vec<Addr> = (0..3).map(|i| (REMOTE_POD.0, 8080 + i)).collect();
    let addrs: Vec<std::net::SocketAddr> = backends
        .iter()
        .map(|(ip, port)| (std::net::Ipv4Addr::from(*ip), *port).into())
        .collect();
    let seed = HashSeed::default();
    let table = lookup_table(&addrs, TableSize::try_from(251).unwrap(), &seed);
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_100);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &backends);
    bed.maglev(NODE_PORT, PROTO_UDP, &table, seed.flow[0]);
    ns.run(|| {
        let mut chosen = std::collections::BTreeSet::new();
        for sport in 40_000..40_032u16 {
            let client = (CLIENT.0, sport);
            let hash = FlowHash::new(seed.flow[0])
                .word(u32::from_ne_bytes(client.0))
                .word(ports_word(sport.to_be(), NODE_PORT.to_be()))
                .word(u32::from(PROTO_UDP))
                .finish();
            let want = backends[table[(hash % 251) as usize] as usize];
            let (action, out) = bed.xdp(&udp(client, (NODE, NODE_PORT)), x0);
            assert_eq!(action, XDP_TX, "{sport}");
            assert_eq!(seen(&out).dst, want, "{sport}");
            chosen.insert(want);
        }
        assert_eq!(chosen.len(), 3, "32 flows reach every backend");
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 32);
    });
}

/// A SYN flood meets the budget of unconfirmed flows in XDP: once this
/// CPU's tokens are spent, SYNs of new flows are dropped there, counted as
/// XDP's, before the kernel allocates anything.
#[test]
fn xdp_drops_syns_beyond_the_budget_of_unconfirmed_flows() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    bed.set_config(lb_common::DatapathConfig {
        syn_budget: 2,
        syn_refill: 1,
        ..bed.config()
    });
    ns.run(|| {
        on_one_cpu(|| {
            for port in [41_000, 41_001] {
                let syn = tcp((CLIENT.0, port), (NODE, NODE_PORT), Tcp::Syn);
                assert_eq!(bed.xdp(&syn, x0).0, XDP_TX, "{port}");
            }
            let syn = tcp((CLIENT.0, 41_002), (NODE, NODE_PORT), Tcp::Syn);
            assert_eq!(bed.xdp(&syn, x0).0, XDP_DROP);
            assert_eq!(bed.stat(stat4(At::XDP, Reason::DropSynBudget)), 1);
            assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 0);
            assert_eq!(bed.ct().len(), 4, "two flows, none for the dropped SYN");
        });
    });
}

/// XDP cannot insert DSR's IPv4 option or IPv6 header: a DSR frontend's
/// flows, new and known, go up to tc untouched (a known one with where it
/// goes in the metadata), which then carries them as DSR.
#[test]
fn xdp_leaves_dsr_flows_to_tc_untouched() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, lb_common::FE_F_DSR, &[REMOTE_POD]);
    let frontend = (NODE, NODE_PORT);
    ns.run(|| {
        let syn = tcp(CLIENT, frontend, Tcp::Syn);
        let (action, out) = bed.xdp(&syn, x0);
        assert_eq!(action, XDP_PASS);
        assert_eq!(out, syn, "untouched");
        assert!(bed.ct().is_empty(), "no flow recorded by XDP");
        // tc takes it: DNAT, and the option at egress.
        let (_, dnated) = bed.ingress(&syn);
        assert_eq!(seen(&dnated), flow(CLIENT, REMOTE_POD));
        let (_, carried) = bed.egress(&dnated);
        assert_eq!(seen(&carried), flow(CLIENT, REMOTE_POD));
        assert_eq!(carried.len(), syn.len() + 8, "the option added");
        // A known DSR flow: still tc's, told where it goes.
        let ack = tcp(CLIENT, frontend, Tcp::Ack);
        let (action, out) = bed.xdp(&ack, x0);
        assert_eq!(action, XDP_PASS);
        assert_eq!(out, handed_over(&ack, REMOTE_POD));
        assert_eq!(bed.stat(stat4(At::XDP, Reason::Forwarded)), 0);
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 0);
    });
}

#[test]
fn xdp_leaves_ipv6_dsr_flows_to_tc_untouched() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_TCP, lb_common::FE_F_DSR, &[REMOTE_POD6]);
    ns.run(|| {
        let syn = tcp6(CLIENT6, FRONTEND6, Tcp::Syn);
        assert_eq!(bed.xdp(&syn, x0), (XDP_PASS, syn.clone()), "untouched");
        assert!(bed.ct6().is_empty(), "no flow recorded by XDP");
        let (_, dnated) = bed.ingress(&syn);
        let (_, carried) = bed.egress(&dnated);
        assert_eq!(seen6(&carried), flow6(CLIENT6, REMOTE_POD6));
        assert_eq!(carried.len(), syn.len() + 24, "the header added");
        let ack = tcp6(CLIENT6, FRONTEND6, Tcp::Ack);
        assert_eq!(
            bed.xdp(&ack, x0),
            (XDP_PASS, handed_over(&ack, REMOTE_POD6))
        );
        assert_eq!(bed.stat(stat6(At::XDP, Reason::NewFlow)), 0);
    });
}

/// A frontend guarded by source ranges (a load-balancer IP, or with
/// `--bpf-lb-source-range-all-types` a NodePort): XDP passes a stranger's
/// packet to tc untouched and uncounted, and tc drops it; an admitted
/// source's flow is translated at XDP as any other.
#[test]
fn xdp_leaves_a_guarded_frontends_strangers_to_tc_which_drops_them() {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    let mut bed = bed();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(
        NODE_PORT,
        PROTO_TCP,
        lb_common::FE_F_SOURCE_RANGES,
        &[REMOTE_POD],
    );
    bed.admit(NODE_PORT, PROTO_TCP, [198, 51, 100, 0], 24);
    let frontend = (NODE, NODE_PORT);
    ns.run(|| {
        let stranger = ([203, 0, 113, 9], 40000);
        let syn = tcp(stranger, frontend, Tcp::Syn);
        let (action, out) = bed.xdp(&syn, x0);
        assert_eq!(action, XDP_PASS);
        assert_eq!(out, syn, "passed untouched");
        assert_eq!(bed.stat(stat4(At::XDP, Reason::DropSourceRange)), 0);
        assert_eq!(bed.ingress(&syn).0, DROP);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSourceRange)), 1);
        assert!(bed.ct().is_empty(), "no state for a stranger");

        let (action, out) = bed.xdp(&tcp(CLIENT, frontend, Tcp::Syn), x0);
        assert_eq!(action, XDP_TX, "an admitted flow is XDP's");
        assert_eq!(seen(&out).dst, REMOTE_POD);
        assert_eq!(bed.stat(stat4(At::XDP, Reason::NewFlow)), 1);
    });
}
