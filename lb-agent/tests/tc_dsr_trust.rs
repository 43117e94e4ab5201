//! What a packet carrying a DSR frontend may do, on crafted packets
//! (`BPF_PROG_TEST_RUN`), as `tc_dsr.rs`: anyone can put Cilium's option
//! (IPv6: destination-options header) in a packet, so a backend's node
//! trusts one only at an endpoint on this node of the DSR frontend it
//! names, from a client reached back through the device it came in on,
//! never over a live entry of another flow, and with a token of the
//! budget of unconfirmed flows; a client on its backend's node is SNATed,
//! not sent by DSR; a packet the option would take over the MTU gets ICMP
//! fragmentation needed (Packet Too Big), or SNAT when it may be
//! fragmented. The programs run in a namespace whose FIB has the clients
//! behind `x0` (`fib_netns`). Needs root; without it every test fails.

use etherparse::{Icmpv4Header, IpNumber, Ipv4Header, NetHeaders, PacketHeaders, TransportHeader};
use lb_common::{
    At, CT_DIR_OUT, CT_F_DSR, CT_F_SNAT, Ct4Key, Ct4Value, DatapathConfig, FE_F_DSR, PROTO_TCP,
    PROTO_UDP, Reason,
};
use lb_testbed::bed::*;
use lb_testbed::fib_netns::fib_netns;
use lb_testbed::packets6::*;

/// `TC_ACT_REDIRECT`: the answer was handed to the device the FIB named
/// (the kernel writes its link-layer header after the program).
const REDIRECT: i32 = 7;
/// Another node's address, on the node's network.
const NODE2: [u8; 4] = [192, 0, 2, 20];

/// Cilium's IPv4 option naming `frontend`: type 0x9a, length 8, port,
/// address.
fn option_of(frontend: Addr) -> [u8; 8] {
    let p = frontend.1.to_be_bytes();
    let a = frontend.0;
    [0x9a, 8, p[0], p[1], a[0], a[1], a[2], a[3]]
}

/// The IPv4 frame `frame` with `opt` as its IP options (IHL, total length
/// and header checksum made to match).
fn with_option(frame: &[u8], opt: [u8; 8]) -> Vec<u8> {
    let (mut ip, rest) = Ipv4Header::from_slice(&frame[14..]).unwrap();
    ip.options = opt[..].try_into().unwrap();
    ip.set_payload_len(rest.len()).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = frame[..14].to_vec();
    out.extend(ip.to_bytes());
    out.extend(rest);
    out
}

/// The IPv6 frame `frame` behind Cilium's destination-options header
/// naming `frontend`.
fn with_header6(frame: &[u8], frontend: Addr6) -> Vec<u8> {
    let mut out = frame[..14 + 40].to_vec();
    let next = out[14 + 6];
    let mut ext = vec![next, 2, 0x1b, 20];
    ext.extend(frontend.0);
    ext.extend(frontend.1.to_be_bytes());
    ext.extend([0, 0]);
    out[14 + 6] = 60;
    let len = u16::from_be_bytes([out[14 + 4], out[14 + 5]]) + 24;
    out[14 + 4..14 + 6].copy_from_slice(&len.to_be_bytes());
    out.extend(ext);
    out.extend(&frame[14 + 40..]);
    out
}

/// A UDP datagram of `len` payload bytes, don't fragment set or not.
fn udp_sized(src: Addr, dst: Addr, len: usize, df: bool) -> Vec<u8> {
    let payload = vec![b'x'; len];
    let mut ip = Ipv4Header::new(0, 64, IpNumber::UDP, src.0, dst.0).unwrap();
    ip.dont_fragment = df;
    let udp = etherparse::UdpHeader::with_ipv4_checksum(src.1, dst.1, &ip, &payload).unwrap();
    ip.set_payload_len(8 + len).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let mut out = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    out.extend(ip.to_bytes());
    out.extend(udp.to_bytes());
    out.extend(payload);
    out
}

/// A backend's node as the agent fills it: the backend `REMOTE_POD` is an
/// endpoint on this node of the DSR NodePort (`proto`).
fn backend_node(proto: u8) -> Bed {
    let mut bed = Bed::new();
    bed.snat([192, 0, 2, 10], 61_000, 61_010);
    bed.dsr_endpoint(([0; 4], NODE_PORT), REMOTE_POD, proto);
    bed
}

/// Runs `f` with the namespace's FIB, given `x0`'s index.
fn on_device(f: impl FnOnce(u32) + Send) {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    ns.run(|| f(x0));
}

#[test]
fn an_option_to_a_port_of_no_frontend_is_refused_and_the_nodes_own_traffic_stays_its_own() {
    // The default configuration: SNAT, no DSR frontend anywhere.
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    let client = (CLIENT.0, 5000);
    let spoof = with_option(
        &udp(client, (NODE, 6000)),
        option_of(([198, 51, 100, 99], 7777)),
    );
    on_device(|x0| {
        assert_eq!(bed.ingress_on(&spoof, x0).0, DROP);
        assert!(bed.ct().is_empty(), "{:?}", bed.ct());
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropDsrInvalid)), 1);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DsrRestored)), 0);
        // The node's own answer from port 6000 to the client's 5000 leaves
        // as it is, from the node.
        let own = udp((NODE, 6000), client);
        assert_eq!(bed.egress_on(&own, x0), (PASS, own.clone()));
    });
}

#[test]
fn an_option_is_trusted_only_at_its_frontends_endpoint_from_a_client_behind_the_device() {
    let bed = backend_node(PROTO_UDP);
    on_device(|x0| {
        let refused = |src: Addr, dst: Addr, fe: Addr, why: &str| {
            let before = bed.stat(stat4(At::TC_IN, Reason::DropDsrInvalid));
            let packet = with_option(&udp(src, dst), option_of(fe));
            assert_eq!(bed.ingress_on(&packet, x0).0, DROP, "{why}");
            assert_eq!(
                bed.stat(stat4(At::TC_IN, Reason::DropDsrInvalid)),
                before + 1,
                "{why}"
            );
            assert!(bed.ct().is_empty(), "{why}: {:?}", bed.ct());
        };
        let fe = ([192, 0, 2, 1], NODE_PORT);
        refused(CLIENT, (REMOTE_POD.0, 8081), fe, "another port of the pod");
        refused(
            CLIENT,
            REMOTE_POD,
            ([192, 0, 2, 1], 30081),
            "another NodePort",
        );
        refused(CLIENT, (NODE, 53), fe, "the node itself");
        refused(([192, 0, 2, 10], 5000), REMOTE_POD, fe, "a local address");
        refused(([10, 1, 0, 5], 5000), REMOTE_POD, fe, "a pod of this node");
        // A client behind the device, to the endpoint: learned.
        let packet = with_option(&udp(CLIENT, REMOTE_POD), option_of(fe));
        let (verdict, out) = bed.ingress_on(&packet, x0);
        assert_eq!(verdict, PASS);
        assert_eq!(seen(&out), flow(CLIENT, REMOTE_POD));
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DsrRestored)), 1);
        assert_eq!(bed.ct().len(), 1);
    });
}

#[test]
fn a_load_balancer_ips_option_is_trusted_at_its_own_endpoints_only() {
    let vip = ([198, 51, 100, 40], 80);
    let mut bed = Bed::new();
    bed.snat([192, 0, 2, 10], 61_000, 61_010);
    bed.dsr_endpoint(vip, REMOTE_POD, PROTO_UDP);
    on_device(|x0| {
        let named = |fe: Addr| with_option(&udp(CLIENT, REMOTE_POD), option_of(fe));
        assert_eq!(bed.ingress_on(&named(([198, 51, 100, 41], 80)), x0).0, DROP);
        assert_eq!(bed.ingress_on(&named((vip.0, NODE_PORT)), x0).0, DROP);
        assert_eq!(bed.ingress_on(&named(vip), x0).0, PASS);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropDsrInvalid)), 2);
    });
}

#[test]
fn an_option_never_replaces_a_live_entry_of_another_flow() {
    let mut bed = backend_node(PROTO_TCP);
    let fe = ([192, 0, 2, 1], NODE_PORT);
    // The backend's reply tuple already belongs to another flow of ours.
    let key = Ct4Key {
        saddr_be: REMOTE_POD.0,
        daddr_be: CLIENT.0,
        sport_be: REMOTE_POD.1.to_be(),
        dport_be: CLIENT.1.to_be(),
        proto: PROTO_TCP,
        dir: CT_DIR_OUT,
        _pad0: [0; 2],
    };
    let theirs = Ct4Value {
        addr_be: [203, 0, 113, 80],
        port_be: 443u16.to_be(),
        flags: CT_F_SNAT,
        expires: lb_agent::datapath::conntrack::now() + 60,
        ..Ct4Value::default()
    };
    bed.ct.insert(key, theirs, 0).unwrap();
    on_device(|x0| {
        let syn = with_option(&tcp(CLIENT, REMOTE_POD, Tcp::Syn), option_of(fe));
        assert_eq!(bed.ingress_on(&syn, x0).0, DROP);
        assert_eq!(bed.ct(), vec![(key, theirs)], "untouched");
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropDsrInvalid)), 1);
    });
    // A DSR entry of another frontend is refused alike; once dead, either
    // is replaced.
    let dsr = Ct4Value {
        flags: CT_F_DSR,
        ..theirs
    };
    bed.ct.insert(key, dsr, 0).unwrap();
    on_device(|x0| {
        let syn = with_option(&tcp(CLIENT, REMOTE_POD, Tcp::Syn), option_of(fe));
        assert_eq!(bed.ingress_on(&syn, x0).0, DROP);
        assert_eq!(bed.ct(), vec![(key, dsr)]);
    });
    let dead = Ct4Value {
        expires: lb_agent::datapath::conntrack::now() - 1,
        ..theirs
    };
    bed.ct.insert(key, dead, 0).unwrap();
    on_device(|x0| {
        let syn = with_option(&tcp(CLIENT, REMOTE_POD, Tcp::Syn), option_of(fe));
        assert_eq!(bed.ingress_on(&syn, x0).0, PASS);
        let ct = bed.ct();
        assert_eq!(ct.len(), 1);
        assert_eq!((ct[0].1.addr_be, ct[0].1.flags), (fe.0, CT_F_DSR));
    });
}

#[test]
fn option_carrying_syns_take_tokens_of_the_budget_of_unconfirmed_flows() {
    let mut bed = backend_node(PROTO_TCP);
    let cfg = DatapathConfig {
        syn_budget: 2,
        ..bed.config()
    };
    bed.set_config(cfg);
    let fe = ([192, 0, 2, 1], NODE_PORT);
    on_device(|x0| {
        on_one_cpu(|| {
            for port in 40_000..40_003 {
                let syn = with_option(&tcp((CLIENT.0, port), REMOTE_POD, Tcp::Syn), option_of(fe));
                let want = if port < 40_002 { PASS } else { DROP };
                assert_eq!(bed.ingress_on(&syn, x0).0, want, "{port}");
            }
        });
        assert_eq!(bed.ct().len(), 2);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 1);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropDsrInvalid)), 0);
    });
}

#[test]
fn an_ipv6_header_to_a_port_of_no_frontend_is_refused() {
    let mut bed = Bed::new();
    bed.snat(NODE6, 61_000, 61_010);
    let spoof = with_header6(&udp6((CLIENT6.0, 5000), (NODE6, 6000)), (NODE6, 7777));
    on_device(|x0| {
        assert_eq!(bed.ingress_on(&spoof, x0).0, DROP);
        assert!(bed.ct6().is_empty());
        assert_eq!(bed.stat(stat6(At::TC_IN, Reason::DropDsrInvalid)), 1);
        let own = udp6((NODE6, 6000), (CLIENT6.0, 5000));
        assert_eq!(bed.egress_on(&own, x0), (PASS, own.clone()));
    });
    // At an endpoint of the NodePort it names, it is learned.
    let mut backend = Bed::new();
    backend.dsr_endpoint(([0; 16], FRONTEND6.1), REMOTE_POD6, PROTO_UDP);
    on_device(|x0| {
        let packet = with_header6(&udp6(CLIENT6, REMOTE_POD6), FRONTEND6);
        assert_eq!(backend.ingress_on(&packet, x0).0, PASS);
        assert_eq!(backend.ct6().len(), 1);
    });
}

/// The balancing node of a DSR NodePort whose backend is on node 2
/// (`10.2.0.0/24` and `NODE2`, by `LB4_NODE_NETS`).
fn lb_node(proto: u8) -> Bed {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, proto, FE_F_DSR, &[REMOTE_POD]);
    bed.node_net([10, 2, 0, 0], 24, 2);
    bed.node_net(NODE2, 32, 2);
    bed.node_net(NODE, 32, 1);
    bed
}

#[test]
fn a_client_on_its_backends_node_is_snated_not_sent_by_dsr() {
    let bed = lb_node(PROTO_TCP);
    for client in [(NODE2, 41_000), ([10, 2, 0, 33], 41_001)] {
        let (_, dnated) = bed.ingress(&tcp(client, FRONTEND, Tcp::Syn));
        let (verdict, out) = bed.egress(&dnated);
        assert_eq!(verdict, PASS);
        let wire = seen(&out);
        assert_eq!((wire.src.0, wire.dst), (NODE, REMOTE_POD), "{client:?}");
        assert_eq!(out.len(), dnated.len(), "no option");
    }
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DsrSnatHairpin)), 2);
    // A client elsewhere goes by DSR, with its own address.
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (_, out) = bed.egress(&dnated);
    assert_eq!(seen(&out).src, CLIENT);
    assert_eq!(out.len(), dnated.len() + 8);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DsrSnatHairpin)), 2);
}

/// An ICMP error's outer source and destination.
type Outer = ([u8; 4], [u8; 4]);
/// An ICMP error's type, code and next-hop MTU.
type What = (u8, u8, u16);

/// The ICMP error `packet`: its addresses, type, code, its next-hop MTU,
/// and the flow it quotes; every checksum checked.
fn icmp4(packet: &[u8]) -> (Outer, What, Seen) {
    let headers = PacketHeaders::from_ethernet_slice(packet).expect("a valid packet");
    let Some(NetHeaders::Ipv4(ip, _)) = &headers.net else {
        panic!("not IPv4");
    };
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    let Some(TransportHeader::Icmpv4(icmp)) = &headers.transport else {
        panic!("not ICMP");
    };
    let quote = headers.payload.slice();
    let want = Icmpv4Header::with_checksum(icmp.icmp_type.clone(), quote).checksum;
    assert_eq!(icmp.checksum, want, "ICMP checksum");
    let bytes = icmp.to_bytes();
    let mtu = u16::from_be_bytes([bytes[6], bytes[7]]);
    let (inner, l4) = Ipv4Header::from_slice(quote).unwrap();
    assert_eq!(inner.header_checksum, inner.calc_header_checksum());
    let port = |at: usize| u16::from_be_bytes([l4[at], l4[at + 1]]);
    (
        (ip.source, ip.destination),
        (bytes[0], bytes[1], mtu),
        flow((inner.source, port(0)), (inner.destination, port(2))),
    )
}

#[test]
fn what_the_option_would_take_over_the_mtu_is_answered_or_snated_never_lost_unsaid() {
    // x0's MTU is 1,500: 1,472 bytes of UDP fill it, the option's 8 would
    // not fit.
    let bed = lb_node(PROTO_UDP);
    on_device(|x0| {
        let df = udp_sized(CLIENT, FRONTEND, 1472, true);
        let (_, dnated) = bed.ingress_on(&df, x0);
        let (verdict, out) = bed.egress_on(&dnated, x0);
        assert_eq!(verdict, REDIRECT);
        let (addrs, what, quoted) = icmp4(&out);
        assert_eq!(addrs, (NODE, CLIENT.0), "from the frontend to the client");
        assert_eq!(what, (3, 4, 1492), "fragmentation needed, the MTU less 8");
        assert_eq!(quoted, flow(CLIENT, FRONTEND), "as the client sent it");
        assert_eq!(bed.stat(stat4(At::TC_OUT, Reason::DsrTooBig)), 1);

        // One that fits goes by DSR as before.
        let small = udp_sized(CLIENT, FRONTEND, 1000, true);
        let (_, dnated) = bed.ingress_on(&small, x0);
        let (verdict, out) = bed.egress_on(&dnated, x0);
        assert_eq!(verdict, PASS);
        assert_eq!(out.len(), dnated.len() + 8);

        // Without don't fragment the datagram is SNATed, and its flow's
        // later datagrams with it.
        let client = (CLIENT.0, 40_100);
        let (_, dnated) = bed.ingress_on(&udp_sized(client, FRONTEND, 1472, false), x0);
        let (verdict, out) = bed.egress_on(&dnated, x0);
        assert_eq!(verdict, PASS);
        let snated = seen(&out);
        assert_eq!((snated.src.0, snated.dst), (NODE, REMOTE_POD));
        assert_eq!(out.len(), dnated.len());
        let (_, dnated) = bed.ingress_on(&udp_sized(client, FRONTEND, 100, false), x0);
        let (_, out) = bed.egress_on(&dnated, x0);
        assert_eq!(seen(&out).src, snated.src);
        assert_eq!(bed.stat(stat4(At::TC_OUT, Reason::DsrSnatTooBig)), 1);
        // Its reply comes back through this node, to the client, from the
        // frontend.
        let (_, back) = bed.ingress_on(&udp(REMOTE_POD, snated.src), x0);
        let (_, back) = bed.egress_on(&back, x0);
        assert_eq!(seen(&back), flow(FRONTEND, client));

        // A 3,000-byte datagram in fragments of 1,500: every fragment goes
        // SNATed, the later ones by the first one's port.
        let client = (CLIENT.0, 40_200);
        let mut sources = Vec::new();
        for fragment in udp_fragments(client, FRONTEND, 7, 3000, 1500) {
            let (verdict, dnated) = bed.ingress_on(&fragment, x0);
            assert_eq!(verdict, PASS);
            let (verdict, out) = bed.egress_on(&dnated, x0);
            assert_eq!(verdict, PASS);
            let (src, dst, _) = seen_ip(&out);
            assert_eq!(out.len(), dnated.len(), "no option in a fragment");
            sources.push((src, dst));
        }
        assert!(
            sources.iter().all(|s| *s == (NODE, REMOTE_POD.0)),
            "{sources:?}"
        );
    });
}

#[test]
fn a_tcp_segment_the_option_would_take_over_the_mtu_gets_fragmentation_needed() {
    let bed = lb_node(PROTO_TCP);
    on_device(|x0| {
        let (_, dnated) = bed.ingress_on(&tcp(CLIENT, FRONTEND, Tcp::Syn), x0);
        bed.egress_on(&dnated, x0);
        // A full-sized segment, though its don't-fragment bit is clear.
        let mut segment = tcp(CLIENT, FRONTEND, Tcp::Ack);
        let (mut ip, rest) = Ipv4Header::from_slice(&segment[14..]).unwrap();
        let mut l4 = rest.to_vec();
        l4.resize(1500 - 20, 0);
        ip.dont_fragment = false;
        ip.set_payload_len(l4.len()).unwrap();
        ip.header_checksum = ip.calc_header_checksum();
        segment.truncate(14);
        segment.extend(ip.to_bytes());
        segment.extend(l4);
        let (_, dnated) = bed.ingress_on(&segment, x0);
        let (verdict, out) = bed.egress_on(&dnated, x0);
        assert_eq!(verdict, REDIRECT);
        let (addrs, what, _) = icmp4(&out);
        assert_eq!(addrs, (NODE, CLIENT.0));
        assert_eq!(what, (3, 4, 1492));
    });
}

#[test]
fn an_ipv6_packet_the_header_would_take_over_the_mtu_gets_packet_too_big() {
    let mut bed = Bed::new();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_UDP, FE_F_DSR, &[REMOTE_POD6]);
    on_device(|x0| {
        // 1,452 bytes of UDP fill a 1,500-byte packet.
        let mut big = udp6(CLIENT6, FRONTEND6);
        let payload = 1452 - 9;
        big.extend(vec![b'x'; payload]);
        let ip_len = u16::from_be_bytes([big[18], big[19]]) + payload as u16;
        big[18..20].copy_from_slice(&ip_len.to_be_bytes());
        big[14 + 40 + 4..14 + 40 + 6].copy_from_slice(&ip_len.to_be_bytes());
        // No UDP checksum: the test needs none, and etherparse checks none.
        big[14 + 40 + 6..14 + 40 + 8].copy_from_slice(&[0, 0]);
        let (_, dnated) = bed.ingress_on(&big, x0);
        let (verdict, out) = bed.egress_on(&dnated, x0);
        assert_eq!(verdict, REDIRECT);
        let (src, dst, kind, quoted) = seen_icmp6(&out);
        assert_eq!((src, dst), (NODE6, CLIENT6.0));
        assert_eq!(kind, etherparse::Icmpv6Type::PacketTooBig { mtu: 1476 });
        assert_eq!(quoted, flow6(CLIENT6, FRONTEND6));
        assert_eq!(bed.stat(stat6(At::TC_OUT, Reason::DsrTooBig)), 1);
    });
}

#[test]
fn a_dsr_flows_blind_ack_keeps_its_token_and_the_clients_close_gives_it_back() {
    let mut bed = lb_node(PROTO_TCP);
    bed.set_config(DatapathConfig {
        syn_budget: 2,
        syn_refill: 0,
        ..bed.config()
    });
    let client = |port| (CLIENT.0, port);
    on_one_cpu(|| {
        // Two flows take both tokens, each followed at once by an ACK, as
        // a blind spoofer's would be: no backend's answer can confirm a
        // flow this node sees one way, so neither gives its token back.
        for port in [41_000, 41_001] {
            assert_eq!(bed.ingress(&tcp(client(port), FRONTEND, Tcp::Syn)).0, PASS);
            assert_eq!(bed.ingress(&tcp(client(port), FRONTEND, Tcp::Ack)).0, PASS);
        }
        assert_eq!(
            bed.ingress(&tcp(client(41_002), FRONTEND, Tcp::Syn)).0,
            DROP
        );
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 1);
        // The ACK gave the flow the TCP timeout all the same: an idle
        // connection keeps its backend.
        let now = lb_agent::datapath::conntrack::now();
        let t = lb_common::Timeouts::DEFAULT;
        assert!(bed.ct().iter().all(|(_, v)| v.expires + 5 >= now + t.tcp));
        // The client closing its flow gives the token back.
        bed.ingress(&tcp(client(41_000), FRONTEND, Tcp::Fin));
        assert_eq!(
            bed.ingress(&tcp(client(41_002), FRONTEND, Tcp::Syn)).0,
            PASS
        );
    });
}
