//! The tc programs on crafted packets, through `BPF_PROG_TEST_RUN`: the
//! agent's own eBPF object, loaded with private (unpinned) maps that each
//! test fills as the agent would, and real packets in and out. Needs root
//! (CAP_BPF and CAP_NET_ADMIN); without it every test fails.

use etherparse::{
    Icmpv4Header, Icmpv4Type, NetHeaders, PacketHeaders, TransportHeader,
    icmpv4::DestUnreachableHeader,
};
use lb_agent::datapath::conntrack;
use lb_common::{
    At, CT_DIR_IN, CT_DIR_OUT, CT_F_SNAT, Ct4Key, Ct4Value, FE_F_EXTERNAL_LOCAL,
    FE_F_NO_LOCAL_ENDPOINTS, FE_F_SOURCE_RANGES, Nat4Key, Nat4Value, PROTO_TCP, PROTO_UDP, Reason,
};
use lb_testbed::bed::*;

#[test]
fn a_new_flow_to_an_external_frontend_is_dnated_and_tracked_both_ways() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);

    let (verdict, out) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(CLIENT, LOCAL_POD));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 1);

    let mut ct = bed.ct();
    ct.sort_by_key(|(k, _)| k.dir);
    let [(inbound, to_backend), (outbound, to_frontend)] = ct.as_slice() else {
        panic!("want one entry per direction: {ct:?}");
    };
    assert_eq!(inbound.dir, CT_DIR_IN);
    assert_eq!(
        (
            inbound.saddr_be,
            inbound.daddr_be,
            inbound.sport_be,
            inbound.dport_be,
            inbound.proto
        ),
        (
            CLIENT.0,
            NODE,
            CLIENT.1.to_be(),
            NODE_PORT.to_be(),
            PROTO_TCP
        )
    );
    assert_eq!(
        (to_backend.addr_be, to_backend.port_be),
        (LOCAL_POD.0, LOCAL_POD.1.to_be())
    );
    assert_eq!(to_backend.backend_id, 100);
    assert_eq!(to_backend.flags & CT_F_SNAT, 0, "eTP=Local: no SNAT");
    assert_eq!(outbound.dir, CT_DIR_OUT);
    assert_eq!(
        (
            outbound.saddr_be,
            outbound.daddr_be,
            outbound.sport_be,
            outbound.dport_be
        ),
        (LOCAL_POD.0, CLIENT.0, LOCAL_POD.1.to_be(), CLIENT.1.to_be())
    );
    assert_eq!(
        (to_frontend.addr_be, to_frontend.port_be),
        (NODE, NODE_PORT.to_be())
    );

    // The backend's answer leaves with the frontend as its source.
    let (verdict, out) = bed.egress(&tcp(LOCAL_POD, CLIENT, Tcp::SynAck));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(FRONTEND, CLIENT));
}

#[test]
fn every_packet_of_a_flow_goes_to_the_backend_its_first_one_picked() {
    let mut bed = Bed::new();
    let pods: Vec<Addr> = (1..=8).map(|i| ([10, 1, 0, i], 8080)).collect();
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &pods);

    let mut picked = std::collections::BTreeSet::new();
    for port in 0..64 {
        let client = (CLIENT.0, 20_000 + port);
        let (_, first) = bed.ingress(&tcp(client, FRONTEND, Tcp::Syn));
        let backend = seen(&first).dst;
        assert!(pods.contains(&backend), "{backend:?}");
        picked.insert(backend);
        for _ in 0..3 {
            let (verdict, next) = bed.ingress(&tcp(client, FRONTEND, Tcp::Ack));
            assert_eq!(verdict, PASS);
            assert_eq!(seen(&next), flow(client, backend));
        }
    }
    assert!(picked.len() > 1, "64 flows all picked one of 8 backends");
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 64);
}

#[test]
fn cluster_policy_snats_towards_a_remote_backend_and_reverses_both_halves_of_the_reply() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);

    // In: DNAT to the backend on the other node.
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!(seen(&dnated), flow(CLIENT, REMOTE_POD));
    // Out again (routed towards the other node): SNAT to the node address.
    let (verdict, snated) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    let on_wire = seen(&snated);
    assert_eq!(on_wire.src.0, NODE);
    assert!((61_000..=61_010).contains(&on_wire.src.1), "{on_wire:?}");
    assert_eq!(on_wire.dst, REMOTE_POD);
    let nat_port = on_wire.src.1;
    // The flow keeps its port.
    let (_, again) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Ack));
    let (_, again) = bed.egress(&again);
    assert_eq!(seen(&again).src, (NODE, nat_port));

    let nat = bed.nat();
    let [(key, client)] = nat.as_slice() else {
        panic!("want one SNAT entry: {nat:?}");
    };
    assert_eq!(
        (key.saddr_be, key.daddr_be, key.sport_be, key.dport_be),
        (REMOTE_POD.0, NODE, REMOTE_POD.1.to_be(), nat_port.to_be())
    );
    assert_eq!(
        (client.addr_be, client.port_be),
        (CLIENT.0, CLIENT.1.to_be())
    );

    // The reply comes back to the node port: ingress gives the client back,
    // egress (routed out to the client) the frontend.
    let (verdict, to_client) = bed.ingress(&tcp(REMOTE_POD, (NODE, nat_port), Tcp::SynAck));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&to_client), flow(REMOTE_POD, CLIENT));
    let (verdict, out) = bed.egress(&to_client);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(FRONTEND, CLIENT));
}

#[test]
fn local_policy_keeps_the_client_address() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    // Even if such a packet left through an external device, it keeps its
    // source: the backend sees the client.
    let (verdict, out) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    assert_eq!(out, dnated);
    assert!(bed.nat().is_empty());
}

#[test]
fn udp_is_translated_and_a_datagram_without_checksum_keeps_none() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    let (verdict, out) = bed.ingress(&udp(CLIENT, FRONTEND));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(CLIENT, LOCAL_POD));
    let (_, reply) = bed.egress(&udp(LOCAL_POD, CLIENT));
    assert_eq!(seen(&reply), flow(FRONTEND, CLIENT));

    let client = (CLIENT.0, 40_001);
    let (verdict, out) = bed.ingress(&udp_no_checksum(client, FRONTEND));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(client, LOCAL_POD));
    assert_eq!(&out[40..42], &[0, 0], "no checksum stays no checksum");
}

#[test]
fn no_local_endpoint_drops_and_is_counted() {
    let mut bed = Bed::new();
    bed.frontend(
        NODE_PORT,
        PROTO_TCP,
        FE_F_EXTERNAL_LOCAL | FE_F_NO_LOCAL_ENDPOINTS,
        &[],
    );
    let (verdict, _) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!(verdict, DROP);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropNoLocalEndpoints)), 1);
    assert!(bed.ct().is_empty());
}

#[test]
fn no_endpoints_at_all_rejects_tcp_with_a_reset_from_the_frontend() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[]);
    let syn = tcp(CLIENT, FRONTEND, Tcp::Syn);
    let (verdict, out) = bed.ingress(&syn);
    assert_eq!(verdict, REDIRECT, "sent back out of its device");
    assert_eq!(
        (&out[..6], &out[6..12]),
        (&syn[6..12], &syn[..6]),
        "MACs swapped"
    );
    assert_eq!(seen(&out), flow(FRONTEND, CLIENT));
    let t = tcp_header(&out);
    // The SYN (seq 1000) carried 9 bytes: they and the SYN are acknowledged.
    assert!(t.rst && t.ack && !t.syn, "{t:?}");
    assert_eq!((t.sequence_number, t.acknowledgment_number), (0, 1010));
    assert_eq!(out.len(), 14 + 20 + 20, "no payload");

    // A segment without SYN starts no flow: the kernel answers it (a
    // reset, from the node's own stack) or translates it (a flow of
    // kube-proxy's it tracks).
    let ack = tcp(CLIENT, FRONTEND, Tcp::Ack);
    assert_eq!(bed.ingress(&ack), (PASS, ack));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::RefusedNoEndpoints)), 1);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::PassedUntracked)), 1);
    assert!(bed.ct().is_empty());
}

#[test]
fn no_endpoints_at_all_rejects_udp_with_a_port_unreachable_quoting_it() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[]);
    let datagram = udp(CLIENT, FRONTEND);
    let (verdict, out) = bed.ingress(&datagram);
    assert_eq!(verdict, REDIRECT);
    let headers = PacketHeaders::from_ethernet_slice(&out).expect("a valid packet");
    let Some(NetHeaders::Ipv4(ip, _)) = &headers.net else {
        panic!("not IPv4: {headers:?}");
    };
    assert_eq!((ip.source, ip.destination), (NODE, CLIENT.0));
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    let Some(TransportHeader::Icmpv4(icmp)) = &headers.transport else {
        panic!("not ICMP: {headers:?}");
    };
    assert_eq!(
        icmp.icmp_type,
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port)
    );
    let quote = headers.payload.slice();
    assert_eq!(quote, &datagram[14..14 + 28], "its IPv4 and UDP headers");
    let want = Icmpv4Header::with_checksum(icmp.icmp_type.clone(), quote).checksum;
    assert_eq!(icmp.checksum, want, "ICMP checksum");
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::RefusedNoEndpoints)), 1);
}

#[test]
fn a_reset_to_a_frontend_without_endpoints_is_not_answered() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[]);
    let rst = tcp(CLIENT, FRONTEND, Tcp::Rst);
    assert_eq!(
        bed.ingress(&rst),
        (PASS, rst),
        "left to the kernel, unanswered"
    );
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::RefusedNoEndpoints)), 0);
}

/// The TCP header of a packet.
fn tcp_header(packet: &[u8]) -> etherparse::TcpHeader {
    match PacketHeaders::from_ethernet_slice(packet).map(|h| h.transport) {
        Ok(Some(TransportHeader::Tcp(t))) => t,
        other => panic!("not TCP: {other:?}"),
    }
}

#[test]
fn exhausted_snat_ports_drop_the_packet_and_are_counted() {
    let mut bed = Bed::new();
    // One port, already taken for this backend by another client.
    bed.snat(NODE, 61_000, 61_000);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let taken = Nat4Key {
        saddr_be: REMOTE_POD.0,
        daddr_be: NODE,
        sport_be: REMOTE_POD.1.to_be(),
        dport_be: 61_000_u16.to_be(),
        proto: PROTO_TCP,
        _pad0: [0; 3],
    };
    let live = Nat4Value {
        expires: conntrack::now() + 3600,
        ..Nat4Value::default()
    };
    bed.nat.insert(taken, live, 0).unwrap();

    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (verdict, _) = bed.egress(&dnated);
    assert_eq!(verdict, DROP);
    assert_eq!(bed.stat(stat4(At::TC_OUT, Reason::DropSnatExhausted)), 1);

    // Another backend may use the same port.
    let mut other = Bed::new();
    other.snat(NODE, 61_000, 61_000);
    other.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    other
        .nat
        .insert(
            Nat4Key {
                saddr_be: [10, 2, 0, 10],
                ..taken
            },
            live,
            0,
        )
        .unwrap();
    let (_, dnated) = other.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (verdict, out) = other.egress(&dnated);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out).src, (NODE, 61_000));
}

#[test]
fn without_a_snat_address_cluster_flows_to_remote_backends_are_dropped() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (verdict, _) = bed.egress(&dnated);
    assert_eq!(verdict, DROP);
    assert_eq!(bed.stat(stat4(At::TC_OUT, Reason::DropSnatExhausted)), 1);
}

#[test]
fn a_new_connection_on_a_closed_flows_port_picks_again() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    bed.egress(&tcp(LOCAL_POD, CLIENT, Tcp::SynAck));
    bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Fin));
    // Half-closed: a SYN is a retransmission or a confused peer, not a new
    // flow.
    bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 1);
    bed.egress(&tcp(LOCAL_POD, CLIENT, Tcp::Fin));
    let (verdict, out) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(CLIENT, LOCAL_POD));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 2);
}

#[test]
fn a_packet_with_ip_options_is_translated_too() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    // Four option bytes (NOP NOP NOP EOL) after the 20-byte IPv4 header:
    // the programs read such headers by copy, not in place.
    let plain = tcp(CLIENT, FRONTEND, Tcp::Syn);
    let mut packet = plain[..34].to_vec();
    packet.extend([1, 1, 1, 0]);
    packet.extend(&plain[34..]);
    packet[14] = 0x46;
    let total = u16::from_be_bytes([packet[16], packet[17]]) + 4;
    packet[16..18].copy_from_slice(&total.to_be_bytes());
    packet[24..26].copy_from_slice(&[0, 0]);
    let sum = packet[14..38]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let folded = (sum & 0xffff) + (sum >> 16);
    packet[24..26].copy_from_slice(&(!((folded & 0xffff) + (folded >> 16)) as u16).to_be_bytes());

    let (verdict, out) = bed.ingress(&packet);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(CLIENT, LOCAL_POD));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 1);
}

#[test]
fn other_traffic_passes_untouched() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let packets = [
        // Another port of the node, the frontend's port over UDP, and the
        // node's own traffic out.
        tcp(CLIENT, (NODE, 22), Tcp::Syn),
        udp(CLIENT, FRONTEND),
        tcp((NODE, 45_000), CLIENT, Tcp::Syn),
        tcp(CLIENT, REMOTE_POD, Tcp::Syn),
    ];
    for packet in &packets {
        for (verdict, out) in [bed.ingress(packet), bed.egress(packet)] {
            assert_eq!(verdict, PASS);
            assert_eq!(&out, packet);
        }
    }
    assert!(bed.ct().is_empty());
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 0);
}

#[test]
fn icmp_errors_about_a_dnated_packet_reach_the_client_quoting_its_frontend() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));

    // The node could not forward it whole (path MTU to the pod is lower).
    let error = icmp_error(NODE, CLIENT.0, FRAG_NEEDED, &dnated);
    let (verdict, out) = bed.egress(&error);
    assert_eq!(verdict, PASS);
    assert_eq!(seen_icmp(&out), (NODE, CLIENT.0, flow(CLIENT, FRONTEND)));

    // The pod itself answers port unreachable: its address is hidden too.
    let error = icmp_error(LOCAL_POD.0, CLIENT.0, DestUnreachableHeader::Port, &dnated);
    let (verdict, out) = bed.egress(&error);
    assert_eq!(verdict, PASS);
    assert_eq!(seen_icmp(&out), (NODE, CLIENT.0, flow(CLIENT, FRONTEND)));
}

#[test]
fn icmp_errors_about_a_snated_packet_go_back_to_the_client_quoting_its_frontend() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (_, snated) = bed.egress(&dnated);
    let nat_port = seen(&snated).src.1;

    // A router between the nodes has a lower MTU.
    let router = [203, 0, 113, 1];
    let error = icmp_error(router, NODE, FRAG_NEEDED, &snated);
    let (verdict, in_node) = bed.ingress(&error);
    assert_eq!(verdict, PASS);
    assert_eq!(
        seen_icmp(&in_node),
        (router, CLIENT.0, flow(CLIENT, REMOTE_POD))
    );
    // It leaves from the frontend, as NAT sends it: with the router's
    // address, it would be dropped by that router if the way to the client
    // crossed it again (a martian source).
    let (verdict, out) = bed.egress(&in_node);
    assert_eq!(verdict, PASS);
    assert_eq!(seen_icmp(&out), (NODE, CLIENT.0, flow(CLIENT, FRONTEND)));
    assert_ne!(nat_port, 0);
}

#[test]
fn icmp_errors_about_a_reply_reach_the_backend_that_sent_it() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    bed.frontend(NODE_PORT + 1, PROTO_TCP, 0, &[REMOTE_POD]);
    let router = [198, 51, 100, 1];

    // eTP=Local: the client's router cannot take the reply whole.
    bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (_, reply) = bed.egress(&tcp(LOCAL_POD, CLIENT, Tcp::SynAck));
    let error = icmp_error(router, NODE, FRAG_NEEDED, &reply);
    let (verdict, out) = bed.ingress(&error);
    assert_eq!(verdict, PASS);
    assert_eq!(
        seen_icmp(&out),
        (router, LOCAL_POD.0, flow(LOCAL_POD, CLIENT))
    );

    // eTP=Cluster: the backend on the other node sent its reply to the
    // node's SNAT port, so the quote must say so.
    let frontend = (NODE, NODE_PORT + 1);
    let (_, dnated) = bed.ingress(&tcp(CLIENT, frontend, Tcp::Syn));
    let (_, snated) = bed.egress(&dnated);
    let nat = seen(&snated).src;
    let (_, back) = bed.ingress(&tcp(REMOTE_POD, nat, Tcp::SynAck));
    let (_, reply) = bed.egress(&back);
    assert_eq!(seen(&reply), flow(frontend, CLIENT));
    let error = icmp_error(router, NODE, FRAG_NEEDED, &reply);
    let (verdict, in_node) = bed.ingress(&error);
    assert_eq!(verdict, PASS);
    // In the node, between the halves, the quote is the flow as the
    // kernel's conntrack saw it, so that a firewall takes the error for
    // one of that flow's (RELATED, not INVALID)...
    assert_eq!(
        seen_icmp(&in_node),
        (router, REMOTE_POD.0, flow(REMOTE_POD, CLIENT))
    );
    // ...and it leaves for the other node with the SNAT port restored,
    // from the SNAT address as NAT sends it: with the router's address, it
    // would be dropped by that router if the way to the other node crossed
    // it again (a martian source).
    let (verdict, out) = bed.egress(&in_node);
    assert_eq!(verdict, PASS);
    assert_eq!(
        seen_icmp(&out),
        (nat.0, REMOTE_POD.0, flow(REMOTE_POD, nat))
    );
    assert_eq!(nat.0, NODE);
}

#[test]
fn icmp_errors_about_other_flows_pass_untouched() {
    let bed = Bed::new();
    let about = tcp(CLIENT, (NODE, 22), Tcp::Syn);
    let error = icmp_error([203, 0, 113, 1], CLIENT.0, FRAG_NEEDED, &about);
    for (verdict, out) in [bed.ingress(&error), bed.egress(&error)] {
        assert_eq!(verdict, PASS);
        assert_eq!(out, error);
    }
}

#[test]
fn a_flow_keeps_its_backend_until_the_collector_deletes_it() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    let (_, first) = bed.ingress(&udp(CLIENT, FRONTEND));
    assert_eq!(seen(&first).dst, LOCAL_POD);

    // The agent replaces the endpoint, and deletes the old backend after
    // its grace period: the flow goes on where it was (a terminating
    // endpoint keeps its flows; the agent deletes the flows of one that
    // stopped serving).
    let other = ([10, 1, 0, 6], 8080);
    bed.frontend(NODE_PORT, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[other]);
    bed.v4.backends.remove(&100).unwrap();
    let (_, still) = bed.ingress(&udp(CLIENT, FRONTEND));
    assert_eq!(seen(&still).dst, LOCAL_POD);

    let collected = collect_with(&bed, |_, ip| ip != std::net::IpAddr::from(LOCAL_POD.0));
    assert_eq!(collected.ct, 2, "both directions");
    let (verdict, moved) = bed.ingress(&udp(CLIENT, FRONTEND));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&moved).dst, other);
    let (_, reply) = bed.egress(&udp(other, CLIENT));
    assert_eq!(seen(&reply).src, FRONTEND);
}

#[test]
fn the_collector_deletes_expired_entries_and_keeps_live_ones() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_UDP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    bed.ingress(&udp(CLIENT, FRONTEND));
    // The programs' clock is the collector's: a new UDP entry lives 60 s.
    let now = conntrack::now();
    for (_, v) in bed.ct() {
        assert!((now + 59..=now + 61).contains(&v.expires), "{v:?} at {now}");
    }
    let dead = Ct4Key {
        saddr_be: [198, 51, 100, 8],
        ..bed.ct()[0].0
    };
    let expired = Ct4Value {
        expires: now - 5,
        ..bed.ct()[0].1
    };
    bed.ct.insert(dead, expired, 0).unwrap();
    bed.nat
        .insert(
            Nat4Key::default(),
            Nat4Value {
                expires: now - 1,
                ..Nat4Value::default()
            },
            0,
        )
        .unwrap();

    let collected = collect(&bed);
    assert_eq!((collected.ct, collected.nat), (1, 1));
    assert_eq!(bed.ct().len(), 2, "both directions of the live flow stay");
    assert!(bed.nat().is_empty());
}

/// Runs the collector on `bed`'s maps, pinned for it, every endpoint
/// serving.
fn collect(bed: &Bed) -> conntrack::Collected {
    collect_with(bed, |_, _| true)
}

/// Runs the collector on `bed`'s maps with `serves` as the frontends'
/// serving endpoints.
fn collect_with(
    bed: &Bed,
    serves: impl Fn(&lb_agent::model::Frontend, std::net::IpAddr) -> bool,
) -> conntrack::Collected {
    let dir = std::path::Path::new("/sys/fs/bpf").join(format!(
        "lbt-gc-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    bed.pin_conntrack(&dir);
    let collected = conntrack::collect(&dir, conntrack::now(), serves);
    let _ = std::fs::remove_dir_all(&dir);
    collected.unwrap()
}

#[test]
fn the_collector_deletes_the_flows_of_an_endpoint_that_stopped_serving_and_keeps_the_others() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_100);
    let remote = REMOTE_POD;
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[LOCAL_POD, remote]);
    let mut flows = Vec::new();
    for port in 0..32 {
        let client = (CLIENT.0, 20_000 + port);
        let (_, out) = bed.ingress(&tcp(client, FRONTEND, Tcp::Syn));
        // Those to the other node take a SNAT port on the way out (those
        // to the pod here leave through its veth, where no program runs).
        if seen(&out).dst == remote {
            bed.egress(&out);
        }
        flows.push((client, seen(&out).dst));
    }
    let to_remote = flows.iter().filter(|(_, b)| *b == remote).count();
    assert!(0 < to_remote && to_remote < 32, "{flows:?}");
    assert_eq!(bed.ct().len(), 64);
    assert_eq!(bed.nat().len(), to_remote);

    // The remote endpoint stops serving (a terminating one that still
    // serves would keep its flows).
    let frontend = lb_agent::model::Frontend {
        vip: std::net::IpAddr::from(NODE),
        port: NODE_PORT,
        proto: lb_agent::model::Proto::Tcp,
        scope: lb_agent::model::Scope::External,
    };
    let collected = collect_with(&bed, |fe, ip| {
        assert_eq!(*fe, frontend);
        ip == std::net::IpAddr::from(LOCAL_POD.0)
    });
    assert_eq!(collected.ct, 2 * to_remote, "both directions of each flow");
    assert_eq!(collected.nat, to_remote, "and its SNAT mapping");
    for (k, v) in bed.ct() {
        let backend = if k.dir == CT_DIR_IN {
            (v.addr_be, u16::from_be(v.port_be))
        } else {
            (k.saddr_be, u16::from_be(k.sport_be))
        };
        assert_eq!(backend, LOCAL_POD, "{k:?} {v:?}");
    }
    assert!(bed.nat().is_empty());
    // The others' flows go on where they were.
    for (client, backend) in flows.iter().filter(|(_, b)| *b == LOCAL_POD) {
        let (_, out) = bed.ingress(&tcp(*client, FRONTEND, Tcp::Ack));
        assert_eq!(seen(&out), flow(*client, *backend));
    }
}

#[test]
fn source_ranges_admit_their_sources_only_and_come_before_the_reject() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_SOURCE_RANGES, &[LOCAL_POD]);
    bed.frontend(NODE_PORT + 1, PROTO_TCP, FE_F_SOURCE_RANGES, &[]);
    bed.admit(NODE_PORT, PROTO_TCP, [198, 51, 100, 0], 24);
    bed.admit(NODE_PORT + 1, PROTO_TCP, [198, 51, 100, 0], 24);
    // Another frontend's range admits nobody here.
    bed.admit(NODE_PORT, PROTO_UDP, [203, 0, 113, 0], 24);

    let (verdict, out) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(CLIENT, LOCAL_POD));
    let stranger = ([203, 0, 113, 9], 40000);
    let (verdict, _) = bed.ingress(&tcp(stranger, FRONTEND, Tcp::Syn));
    assert_eq!(verdict, DROP);
    // Without endpoints, a stranger is dropped, not rejected.
    let (verdict, _) = bed.ingress(&tcp(stranger, (NODE, NODE_PORT + 1), Tcp::Syn));
    assert_eq!(verdict, DROP);
    let (verdict, _) = bed.ingress(&tcp(CLIENT, (NODE, NODE_PORT + 1), Tcp::Syn));
    assert_eq!(verdict, REDIRECT, "an admitted source is rejected");
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSourceRange)), 2);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::RefusedNoEndpoints)), 1);

    // A frontend with the flag and no range yet admits nobody.
    bed.frontend(NODE_PORT + 2, PROTO_TCP, FE_F_SOURCE_RANGES, &[LOCAL_POD]);
    let (verdict, _) = bed.ingress(&tcp(CLIENT, (NODE, NODE_PORT + 2), Tcp::Syn));
    assert_eq!(verdict, DROP);
}

/// A frontend with a Maglev table: each new flow goes to the backend the
/// table names at the flow's hash (source address and port, destination
/// port, protocol; `lb_common::FlowHash` with the configured seed), and
/// with session affinity the source port is left out.
#[test]
fn maglev_frontends_send_each_flow_where_its_hash_points_in_the_table() {
    use lb_agent::model::maglev::{HashSeed, TableSize, lookup_table};
    use lb_common::{FE_F_AFFINITY, FlowHash, ports_word};

    let backends: Vec<Addr> = (0..3).map(|i| (LOCAL_POD.0, 8080 + i)).collect();
    let addrs: Vec<std::net::SocketAddr> = backends
        .iter()
        .map(|(ip, port)| (std::net::Ipv4Addr::from(*ip), *port).into())
        .collect();
    let seed = HashSeed::default();
    let table = lookup_table(&addrs, TableSize::try_from(251).unwrap(), &seed);
    let hash = |(ip, _): Addr, sport: u16| {
        FlowHash::new(seed.flow[0])
            .word(u32::from_ne_bytes(ip))
            .word(ports_word(sport.to_be(), NODE_PORT.to_be()))
            .word(u32::from(PROTO_TCP))
            .finish()
            % 251
    };

    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &backends);
    bed.maglev(NODE_PORT, PROTO_TCP, &table, seed.flow[0]);
    let mut chosen = std::collections::BTreeSet::new();
    for sport in 40_000..40_064 {
        let client = (CLIENT.0, sport);
        let (verdict, out) = bed.ingress(&tcp(client, FRONTEND, Tcp::Syn));
        let want = backends[table[hash(client, sport) as usize] as usize];
        assert_eq!((verdict, seen(&out)), (PASS, flow(client, want)), "{sport}");
        chosen.insert(want);
    }
    assert_eq!(chosen.len(), 3, "64 flows reach every backend");

    // Session affinity: the hash leaves the source port out.
    let mut bed = Bed::new();
    bed.frontend(
        NODE_PORT,
        PROTO_TCP,
        FE_F_EXTERNAL_LOCAL | FE_F_AFFINITY,
        &backends,
    );
    bed.maglev(NODE_PORT, PROTO_TCP, &table, seed.flow[0]);
    for last in 1..=16u8 {
        let client = ([198, 51, 100, last], 40_000 + u16::from(last));
        let (_, out) = bed.ingress(&tcp(client, FRONTEND, Tcp::Syn));
        let want = backends[table[hash(client, 0) as usize] as usize];
        assert_eq!(seen(&out), flow(client, want), "client {last}");
    }
}
