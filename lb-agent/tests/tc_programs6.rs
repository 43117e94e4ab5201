//! The tc programs on crafted IPv6 packets, through `BPF_PROG_TEST_RUN`,
//! as `tc_programs.rs` does for IPv4: extension-header chains, fragments,
//! ICMPv6 errors with their quotes, rejects, SNAT, source ranges, every
//! checksum checked against etherparse's reference computation. Needs root
//! (CAP_BPF and CAP_NET_ADMIN); without it every test fails.

use etherparse::{Icmpv6Type, PacketHeaders, TransportHeader, icmpv6};
use lb_common::{
    At, CT_DIR_IN, CT_DIR_OUT, CT_F_SNAT, FE_F_EXTERNAL_LOCAL, FE_F_NO_LOCAL_ENDPOINTS,
    FE_F_SOURCE_RANGES, PROTO_TCP, PROTO_UDP, Reason,
};
use lb_testbed::bed::*;
use lb_testbed::packets6::*;

#[test]
fn a_new_ipv6_flow_is_dnated_tracked_both_ways_and_counted_as_ipv6() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD6]);

    let (verdict, out) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen6(&out), flow6(CLIENT6, LOCAL_POD6));
    assert_eq!(bed.stat(stat6(At::TC_IN, Reason::NewFlow)), 1);
    assert_eq!(
        bed.stat(stat4(At::TC_IN, Reason::NewFlow)),
        0,
        "not an IPv4 flow"
    );

    let mut ct = bed.ct6();
    ct.sort_by_key(|(k, _)| k.dir);
    let [(inbound, to_backend), (outbound, to_frontend)] = ct.as_slice() else {
        panic!("want one entry per direction: {ct:?}");
    };
    assert_eq!(inbound.dir, CT_DIR_IN);
    assert_eq!(
        (inbound.saddr_be, inbound.daddr_be, inbound.dport_be),
        (CLIENT6.0, NODE6, FRONTEND6.1.to_be())
    );
    assert_eq!(
        (to_backend.addr_be, to_backend.port_be),
        (LOCAL_POD6.0, LOCAL_POD6.1.to_be())
    );
    assert_eq!(to_backend.flags & CT_F_SNAT, 0, "eTP=Local: no SNAT");
    assert_eq!(outbound.dir, CT_DIR_OUT);
    assert_eq!(
        (outbound.saddr_be, outbound.daddr_be),
        (LOCAL_POD6.0, CLIENT6.0)
    );
    assert_eq!(to_frontend.addr_be, NODE6);

    // The backend's answer leaves with the frontend as its source, and the
    // flow's next packets keep their backend.
    let (verdict, out) = bed.egress(&tcp6(LOCAL_POD6, CLIENT6, Tcp::SynAck));
    assert_eq!(verdict, PASS);
    assert_eq!(seen6(&out), flow6(FRONTEND6, CLIENT6));
    let (_, out) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Ack));
    assert_eq!(seen6(&out), flow6(CLIENT6, LOCAL_POD6));
    assert!(bed.ct().is_empty(), "nothing in the IPv4 map");
}

#[test]
fn cluster_policy_snats_ipv6_towards_a_remote_backend_and_reverses_the_reply() {
    let mut bed = Bed::new();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_UDP, 0, &[REMOTE_POD6]);

    let (_, dnated) = bed.ingress(&udp6(CLIENT6, FRONTEND6));
    assert_eq!(seen6(&dnated), flow6(CLIENT6, REMOTE_POD6));
    let (verdict, snated) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    let on_wire = seen6(&snated);
    assert_eq!((on_wire.src.0, on_wire.dst), (NODE6, REMOTE_POD6));
    assert!((61_000..=61_010).contains(&on_wire.src.1), "{on_wire:?}");
    let nat_port = on_wire.src.1;
    let nat = bed.nat6();
    let [(key, client)] = nat.as_slice() else {
        panic!("want one SNAT entry: {nat:?}");
    };
    assert_eq!(
        (key.saddr_be, key.daddr_be, key.dport_be),
        (REMOTE_POD6.0, NODE6, nat_port.to_be())
    );
    assert_eq!(
        (client.addr_be, client.port_be),
        (CLIENT6.0, CLIENT6.1.to_be())
    );

    // The reply to the node's port: the client back at ingress, the
    // frontend restored at egress.
    let reply = udp6(REMOTE_POD6, (NODE6, nat_port));
    let (verdict, back) = bed.ingress(&reply);
    assert_eq!(verdict, PASS);
    assert_eq!(seen6(&back), flow6(REMOTE_POD6, CLIENT6));
    let (verdict, out) = bed.egress(&back);
    assert_eq!(verdict, PASS);
    assert_eq!(seen6(&out), flow6(FRONTEND6, CLIENT6));
}

#[test]
fn without_an_ipv6_snat_address_cluster_flows_to_remote_backends_are_dropped() {
    let mut bed = Bed::new();
    // An IPv4 SNAT address only.
    bed.snat([192, 0, 2, 10], 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[REMOTE_POD6]);
    let (_, dnated) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    assert_eq!(bed.egress(&dnated).0, DROP);
}

#[test]
fn extension_header_chains_are_walked_to_the_l4_header() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD6]);
    for chain in [
        &[HOP_BY_HOP][..],
        &[DEST_OPTS],
        &[HOP_BY_HOP, ROUTING, DEST_OPTS],
        &[HOP_BY_HOP, DEST_OPTS, ROUTING, DEST_OPTS],
    ] {
        let (verdict, out) = bed.ingress(&udp6_behind(CLIENT6, FRONTEND6, chain));
        assert_eq!(verdict, PASS, "{chain:?}");
        assert_eq!(seen6(&out), flow6(CLIENT6, LOCAL_POD6), "{chain:?}");
    }
    // Beyond the bound: passed on untouched, and counted.
    let long = udp6_behind(
        CLIENT6,
        FRONTEND6,
        &[HOP_BY_HOP, DEST_OPTS, ROUTING, DEST_OPTS, DEST_OPTS],
    );
    assert_eq!(bed.ingress(&long), (PASS, long));
    assert_eq!(bed.stat(stat6(At::TC_IN, Reason::PassedExtHeaders)), 1);
}

#[test]
fn later_ipv6_fragments_follow_their_first_and_unknown_ones_are_dropped() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD6]);
    let fragments = udp6_fragments(CLIENT6, FRONTEND6, 0x0102_0304, 3000, 1280);
    assert!(fragments.len() >= 3);
    for (i, fragment) in fragments.iter().enumerate() {
        let (verdict, out) = bed.ingress(fragment);
        assert_eq!(verdict, PASS, "fragment {i}");
        assert_eq!(
            seen_ip6(&out),
            (CLIENT6.0, LOCAL_POD6.0),
            "fragment {i} goes where its first went"
        );
    }
    // A later fragment of a datagram whose first was not seen.
    let stray = udp6_fragments(CLIENT6, FRONTEND6, 0x0a0b_0c0d, 3000, 1280);
    assert_eq!(bed.ingress(&stray[1]).0, DROP);
    assert_eq!(bed.stat(stat6(At::TC_IN, Reason::DropFragmentUnknown)), 1);
}

#[test]
fn a_fragmented_datagram_is_translated_with_a_checksum_that_holds_once_reassembled() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD6]);
    let fragments = udp6_fragments(CLIENT6, FRONTEND6, 7, 2000, 1280);
    let translated: Vec<Vec<u8>> = fragments.iter().map(|f| bed.ingress(f).1).collect();
    // Reassemble: the first fragment's UDP header and every fragment's data.
    let mut datagram = Vec::new();
    for f in &translated {
        datagram.extend(&f[14 + 40 + 8..]);
    }
    let (src, dst) = seen_ip6(&translated[0]);
    assert_eq!((src, dst), (CLIENT6.0, LOCAL_POD6.0));
    let (udp, payload) = etherparse::UdpHeader::from_slice(&datagram).unwrap();
    assert_eq!(udp.destination_port, LOCAL_POD6.1);
    let want = udp.calc_checksum_ipv6_raw(src, dst, payload).unwrap();
    assert_eq!(udp.checksum, want, "UDP checksum of the whole datagram");
}

#[test]
fn packet_too_big_about_a_snated_packet_goes_back_to_the_client_quoting_its_frontend() {
    let mut bed = Bed::new();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[REMOTE_POD6]);
    let (_, dnated) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    let (_, snated) = bed.egress(&dnated);
    let nat_port = seen6(&snated).src.1;
    // A router on the way to the backend: too big.
    let router = v6([0xfd00, 0x57, 0, 0, 0, 0, 0, 0xfe]);
    let error = icmp6_error(router, NODE6, TOO_BIG, &snated);
    let (verdict, in_node) = bed.ingress(&error);
    assert_eq!(verdict, PASS);
    let (src, dst, kind, quote) = seen_icmp6(&in_node);
    assert_eq!((src, dst, kind), (router, CLIENT6.0, TOO_BIG));
    assert_eq!(quote, flow6(CLIENT6, REMOTE_POD6));
    // Leaving towards the client: the quote shows what the client sent,
    // and it comes from the frontend, as NAT sends it.
    let (verdict, out) = bed.egress(&in_node);
    assert_eq!(verdict, PASS);
    let (src, dst, _, quote) = seen_icmp6(&out);
    assert_eq!((src, dst), (FRONTEND6.0, CLIENT6.0));
    assert_eq!(quote, flow6(CLIENT6, FRONTEND6));
    assert_ne!(nat_port, 0);
}

#[test]
fn packet_too_big_about_a_snated_reply_reaches_the_remote_backend_from_the_node() {
    let mut bed = Bed::new();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[REMOTE_POD6]);
    let (_, dnated) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    let (_, snated) = bed.egress(&dnated);
    let nat = seen6(&snated).src;
    let (_, back) = bed.ingress(&tcp6(REMOTE_POD6, nat, Tcp::SynAck));
    let (_, reply) = bed.egress(&back);
    assert_eq!(seen6(&reply), flow6(FRONTEND6, CLIENT6));
    // A router towards the client: the reply was too big.
    let router = v6([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1]);
    let error = icmp6_error(router, NODE6, TOO_BIG, &reply);
    let (verdict, in_node) = bed.ingress(&error);
    assert_eq!(verdict, PASS);
    let (src, dst, kind, quote) = seen_icmp6(&in_node);
    assert_eq!((src, dst, kind), (router, REMOTE_POD6.0, TOO_BIG));
    assert_eq!(quote, flow6(REMOTE_POD6, CLIENT6), "as conntrack saw it");
    // Leaving for the backend's node: the quote shows the SNAT port the
    // backend sent to, and it comes from the SNAT address, as NAT sends it.
    let (verdict, out) = bed.egress(&in_node);
    assert_eq!(verdict, PASS);
    let (src, dst, kind, quote) = seen_icmp6(&out);
    assert_eq!((src, dst, kind), (NODE6, REMOTE_POD6.0, TOO_BIG));
    assert_eq!(quote, flow6(REMOTE_POD6, nat));
}

#[test]
fn packet_too_big_about_a_reply_reaches_the_backend_that_sent_it() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD6]);
    bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    let (_, reply) = bed.egress(&tcp6(LOCAL_POD6, CLIENT6, Tcp::SynAck));
    assert_eq!(seen6(&reply), flow6(FRONTEND6, CLIENT6));
    // A router towards the client: the reply was too big.
    let router = v6([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 1]);
    let error = icmp6_error(router, NODE6, TOO_BIG, &reply);
    let (verdict, out) = bed.ingress(&error);
    assert_eq!(verdict, PASS);
    let (src, dst, kind, quote) = seen_icmp6(&out);
    assert_eq!((src, dst, kind), (router, LOCAL_POD6.0, TOO_BIG));
    assert_eq!(quote, flow6(LOCAL_POD6, CLIENT6), "as the backend sent it");
}

#[test]
fn a_port_unreachable_from_a_backend_shows_the_client_the_frontend_only() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD6]);
    let (_, dnated) = bed.ingress(&udp6(CLIENT6, FRONTEND6));
    let unreachable = Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Port);
    let error = icmp6_error(LOCAL_POD6.0, CLIENT6.0, unreachable, &dnated);
    let (verdict, out) = bed.egress(&error);
    assert_eq!(verdict, PASS);
    let (src, dst, kind, quote) = seen_icmp6(&out);
    assert_eq!((src, dst, kind), (NODE6, CLIENT6.0, unreachable));
    assert_eq!(quote, flow6(CLIENT6, FRONTEND6));
}

#[test]
fn no_ipv6_endpoints_rejects_tcp_with_a_reset_and_udp_with_a_port_unreachable() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[]);
    bed.frontend_at(FRONTEND6, PROTO_UDP, 0, &[]);

    let (verdict, out) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    assert_eq!(verdict, REDIRECT);
    let reset = seen6(&out);
    assert_eq!(reset, flow6(FRONTEND6, CLIENT6));
    let headers = PacketHeaders::from_ethernet_slice(&out).unwrap();
    let Some(TransportHeader::Tcp(t)) = &headers.transport else {
        panic!("not TCP");
    };
    assert!(t.rst && t.ack, "{t:?}");
    // The SYN carried 9 bytes from sequence 1000: all acknowledged.
    assert_eq!(t.acknowledgment_number, 1000 + 9 + 1);

    let datagram = udp6(CLIENT6, FRONTEND6);
    let (verdict, out) = bed.ingress(&datagram);
    assert_eq!(verdict, REDIRECT);
    let headers = PacketHeaders::from_ethernet_slice(&out).unwrap();
    let quote = headers.payload.slice();
    assert_eq!(quote, &datagram[14..14 + 48], "its IPv6 and UDP headers");
    let (src, dst, kind, about) = seen_icmp6(&out);
    assert_eq!((src, dst), (NODE6, CLIENT6.0));
    assert_eq!(
        kind,
        Icmpv6Type::DestinationUnreachable(icmpv6::DestUnreachableCode::Port)
    );
    assert_eq!(about, flow6(CLIENT6, FRONTEND6));
    assert_eq!(bed.stat(stat6(At::TC_IN, Reason::RefusedNoEndpoints)), 2);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::RefusedNoEndpoints)), 0);
}

#[test]
fn ipv6_source_ranges_admit_their_sources_only() {
    let mut bed = Bed::new();
    bed.frontend_at(
        FRONTEND6,
        PROTO_TCP,
        FE_F_SOURCE_RANGES | FE_F_EXTERNAL_LOCAL,
        &[LOCAL_POD6],
    );
    bed.admit_at(
        FRONTEND6,
        PROTO_TCP,
        v6([0x2001, 0xdb8, 0xc, 0, 0, 0, 0, 0]),
        48,
    );
    let (verdict, out) = bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen6(&out), flow6(CLIENT6, LOCAL_POD6));
    let outsider = (v6([0x2001, 0xdb8, 0xd, 0, 0, 0, 0, 7]), 40000);
    assert_eq!(bed.ingress(&tcp6(outsider, FRONTEND6, Tcp::Syn)).0, DROP);
    assert_eq!(bed.stat(stat6(At::TC_IN, Reason::DropSourceRange)), 1);
}

#[test]
fn no_local_ipv6_endpoint_drops_and_is_counted() {
    let mut bed = Bed::new();
    bed.frontend_at(
        FRONTEND6,
        PROTO_TCP,
        FE_F_EXTERNAL_LOCAL | FE_F_NO_LOCAL_ENDPOINTS,
        &[],
    );
    assert_eq!(bed.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Syn)).0, DROP);
    assert_eq!(bed.stat(stat6(At::TC_IN, Reason::DropNoLocalEndpoints)), 1);
}

#[test]
fn neighbour_discovery_and_other_ipv6_traffic_pass_untouched() {
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_TCP, 0, &[LOCAL_POD6]);
    let solicitation = Icmpv6Type::Unknown {
        type_u8: 135,
        code_u8: 0,
        bytes5to8: [0; 4],
    };
    let ns = icmp6_error(CLIENT6.0, NODE6, solicitation, &udp6(CLIENT6, FRONTEND6));
    assert_eq!(bed.ingress(&ns), (PASS, ns.clone()));
    assert_eq!(bed.egress(&ns), (PASS, ns));
    let other = tcp6(CLIENT6, (NODE6, 22), Tcp::Syn);
    assert_eq!(bed.ingress(&other), (PASS, other));
    assert!(bed.ct6().is_empty());
}

/// IPv6 flows hash their source address's sixteen bytes: each flow goes to
/// the backend the frontend's Maglev table names at its hash.
#[test]
fn ipv6_maglev_frontends_send_each_flow_where_its_hash_points_in_the_table() {
    use lb_agent::model::maglev::{HashSeed, TableSize, lookup_table};
    use lb_common::{FlowHash, ports_word};

    let backends: Vec<Addr6> = (0..3).map(|i| (LOCAL_POD6.0, 8080 + i)).collect();
    let addrs: Vec<std::net::SocketAddr> = backends
        .iter()
        .map(|(ip, port)| (std::net::Ipv6Addr::from(*ip), *port).into())
        .collect();
    let seed = HashSeed::default();
    let table = lookup_table(&addrs, TableSize::try_from(509).unwrap(), &seed);
    let mut bed = Bed::new();
    bed.frontend_at(FRONTEND6, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &backends);
    bed.maglev_at(FRONTEND6, PROTO_UDP, &table, seed.flow[0]);
    let mut chosen = std::collections::BTreeSet::new();
    for sport in 40_000..40_064u16 {
        let client = (CLIENT6.0, sport);
        let words = client
            .0
            .chunks(4)
            .map(|w| u32::from_ne_bytes(w.try_into().unwrap()));
        let hash = words
            .fold(FlowHash::new(seed.flow[0]), FlowHash::word)
            .word(ports_word(sport.to_be(), FRONTEND6.1.to_be()))
            .word(u32::from(PROTO_UDP))
            .finish();
        let want = backends[table[(hash % 509) as usize] as usize];
        let (verdict, out) = bed.ingress(&udp6(client, FRONTEND6));
        assert_eq!(
            (verdict, seen6(&out)),
            (PASS, flow6(client, want)),
            "{sport}"
        );
        chosen.insert(want);
    }
    assert_eq!(chosen.len(), 3, "64 flows reach every backend");
}
