//! Direct server return through the tc programs, on crafted packets
//! (`BPF_PROG_TEST_RUN`), as `tc_programs.rs`: the node that load-balances
//! a flow of a `FE_F_DSR` frontend to a backend on another node DNATs its
//! packets without SNAT and carries the frontend in an IPv4 option; the
//! backend's node records the frontend, strips the option, and gives the
//! backend's replies the frontend as their source, the SYN-ACK's MSS
//! lowered by the option's 8 bytes (the client's segments carry it);
//! IPv6 alike, with a destination-options header of 24 bytes. A
//! frontend with Maglev and DSR takes a flow over mid-flow, at the backend
//! its table names.
//! Every checksum is checked against etherparse.
//! Needs root (CAP_BPF and CAP_NET_ADMIN); without it every test fails.

use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TcpOptionElement, TransportHeader};
use lb_common::{
    At, CFG_F_MIDFLOW, CT_DIR_IN, CT_DIR_OUT, CT_F_DSR, CT_F_SNAT, CT_SEEN, CT_SEEN_ACK,
    DatapathConfig, FE_F_DSR, FE_F_EXTERNAL_LOCAL, PROTO_TCP, PROTO_UDP, Reason, Timeouts,
};
use lb_testbed::bed::*;
use lb_testbed::fib_netns::fib_netns;
use lb_testbed::packets6::*;

/// The option as the backend's node must find it: Cilium's type 0x9a,
/// length 8, the frontend's port and address.
fn option_of(frontend: Addr) -> [u8; 8] {
    let p = frontend.1.to_be_bytes();
    let a = frontend.0;
    [0x9a, 8, p[0], p[1], a[0], a[1], a[2], a[3]]
}

/// A SYN announcing MSS `mss` (the option first, as Linux sends it).
fn syn_with_mss(src: Addr, dst: Addr, mss: u16) -> Vec<u8> {
    handshake_with_mss(src, dst, mss, false)
}

/// A SYN-ACK announcing MSS `mss`.
fn syn_ack_with_mss(src: Addr, dst: Addr, mss: u16) -> Vec<u8> {
    handshake_with_mss(src, dst, mss, true)
}

fn handshake_with_mss(src: Addr, dst: Addr, mss: u16, ack: bool) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src.0, dst.0, 64)
        .tcp(src.1, dst.1, 1000, 64_240)
        .syn();
    let builder = if ack { builder.ack(1001) } else { builder };
    let builder = builder
        .options(&[
            TcpOptionElement::MaximumSegmentSize(mss),
            TcpOptionElement::SelectiveAcknowledgementPermitted,
            TcpOptionElement::WindowScale(7),
        ])
        .unwrap();
    let mut out = Vec::with_capacity(builder.size(0));
    builder.write(&mut out, &[]).unwrap();
    out
}

/// What a packet of a DSR flow carries on the wire: its addresses (every
/// checksum checked), its IP options, and a SYN's MSS.
#[derive(Debug)]
struct OnWire {
    flow: Seen,
    ip_options: Vec<u8>,
    mss: Option<u16>,
}

fn on_wire(packet: &[u8]) -> OnWire {
    let flow = seen(packet);
    let headers = PacketHeaders::from_ethernet_slice(packet).unwrap();
    let Some(NetHeaders::Ipv4(ip, _)) = &headers.net else {
        panic!("not IPv4");
    };
    assert_eq!(
        usize::from(ip.total_len),
        packet.len() - 14,
        "IPv4 total length"
    );
    let mss = match &headers.transport {
        Some(TransportHeader::Tcp(t)) => t.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::MaximumSegmentSize(m)) => Some(m),
            _ => None,
        }),
        _ => None,
    };
    OnWire {
        flow,
        ip_options: ip.options.as_slice().to_vec(),
        mss,
    }
}

/// The load-balancing node: a DSR NodePort frontend whose only backend is
/// on another node; the node could SNAT (it has an address and ports).
fn lb_node(proto: u8) -> Bed {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, proto, FE_F_DSR, &[REMOTE_POD]);
    bed
}

/// The backend's node: configured, no frontend of its own, the backend
/// one of its endpoints of the DSR NodePort (`proto`), as the agent writes
/// them.
fn backend_node(proto: u8) -> Bed {
    let mut bed = Bed::new();
    bed.snat([192, 0, 2, 20], 61_000, 61_010);
    bed.dsr_endpoint(([0; 4], NODE_PORT), REMOTE_POD, proto);
    bed
}

/// Runs `f` with the FIB of a namespace where the clients are behind the
/// device whose index it gets (`x0`, see `fib_netns`): the backend's node
/// checks that a DSR flow's client is reached back through its device.
fn on_device(f: impl FnOnce(u32) + Send) {
    let ns = fib_netns();
    let x0 = ns.ifindex("x0");
    ns.run(|| f(x0));
}

#[test]
fn a_dsr_flow_leaves_dnated_not_snated_with_the_frontend_in_an_ip_option() {
    let bed = lb_node(PROTO_TCP);

    let (verdict, dnated) = bed.ingress(&syn_with_mss(CLIENT, FRONTEND, 1460));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&dnated), flow(CLIENT, REMOTE_POD));
    let (verdict, out) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    let wire = on_wire(&out);
    assert_eq!(
        wire.flow,
        flow(CLIENT, REMOTE_POD),
        "the client's own source"
    );
    assert_eq!(wire.ip_options, option_of(FRONTEND));
    assert_eq!(wire.mss, Some(1460), "the client's MSS: for the replies");
    assert!(bed.nat().is_empty(), "no SNAT port: {:?}", bed.nat());

    let ct = bed.ct();
    assert_eq!(ct.len(), 2, "{ct:?}");
    for (k, v) in &ct {
        assert_eq!(v.flags & CT_F_SNAT, 0, "{k:?}");
        assert_ne!(v.flags & CT_F_DSR, 0, "{k:?}");
    }

    // A later packet of the flow carries it too, and it stays unSNATed.
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Ack));
    let (verdict, out) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    let wire = on_wire(&out);
    assert_eq!(wire.flow, flow(CLIENT, REMOTE_POD));
    assert_eq!(wire.ip_options, option_of(FRONTEND));
    assert_eq!(wire.mss, None);
    assert!(bed.nat().is_empty());
}

#[test]
fn a_dsr_udp_flow_carries_the_option_on_every_datagram() {
    let bed = lb_node(PROTO_UDP);
    for _ in 0..2 {
        let (_, dnated) = bed.ingress(&udp(CLIENT, FRONTEND));
        let (verdict, out) = bed.egress(&dnated);
        assert_eq!(verdict, PASS);
        let wire = on_wire(&out);
        assert_eq!(wire.flow, flow(CLIENT, REMOTE_POD));
        assert_eq!(wire.ip_options, option_of(FRONTEND));
    }
    assert!(bed.nat().is_empty());
}

#[test]
fn without_the_dsr_bit_the_same_flow_is_snated_as_before() {
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    let (_, dnated) = bed.ingress(&syn_with_mss(CLIENT, FRONTEND, 1460));
    let (_, out) = bed.egress(&dnated);
    let wire = on_wire(&out);
    assert_eq!(wire.flow.src.0, NODE);
    assert!(wire.ip_options.is_empty());
    assert_eq!(wire.mss, Some(1460));
}

#[test]
fn a_dsr_frontend_with_local_policy_neither_snats_nor_adds_the_option() {
    let bed = {
        let mut bed = Bed::new();
        bed.snat(NODE, 61_000, 61_010);
        bed.frontend(
            NODE_PORT,
            PROTO_TCP,
            FE_F_DSR | FE_F_EXTERNAL_LOCAL,
            &[LOCAL_POD],
        );
        bed
    };
    let (_, dnated) = bed.ingress(&syn_with_mss(CLIENT, FRONTEND, 1460));
    let (_, out) = bed.egress(&dnated);
    let wire = on_wire(&out);
    assert_eq!(wire.flow, flow(CLIENT, LOCAL_POD));
    assert!(wire.ip_options.is_empty());
    assert!(bed.ct().iter().all(|(_, v)| v.flags & CT_F_DSR == 0));
}

#[test]
fn the_backends_node_strips_the_option_and_replies_as_the_frontend() {
    let lb = lb_node(PROTO_TCP);
    let backend = backend_node(PROTO_TCP);
    on_device(|x0| {
        let (_, dnated) = lb.ingress(&syn_with_mss(CLIENT, FRONTEND, 1460));
        let (_, carried) = lb.egress(&dnated);

        let (verdict, delivered) = backend.ingress_on(&carried, x0);
        assert_eq!(verdict, PASS);
        let wire = on_wire(&delivered);
        assert_eq!(wire.flow, flow(CLIENT, REMOTE_POD));
        assert!(wire.ip_options.is_empty(), "{:?}", wire.ip_options);
        assert_eq!(wire.mss, Some(1460));
        assert_eq!(delivered.len(), carried.len() - 8);

        let ct = backend.ct();
        let [(key, value)] = ct.as_slice() else {
            panic!("want the reply's entry alone: {ct:?}");
        };
        assert_eq!(key.dir, CT_DIR_OUT);
        assert_eq!(
            (
                key.saddr_be,
                key.sport_be,
                key.daddr_be,
                key.dport_be,
                key.proto
            ),
            (
                REMOTE_POD.0,
                REMOTE_POD.1.to_be(),
                CLIENT.0,
                CLIENT.1.to_be(),
                PROTO_TCP
            )
        );
        assert_eq!((value.addr_be, value.port_be), (NODE, NODE_PORT.to_be()));
        assert_ne!(value.flags & CT_F_DSR, 0);

        // The backend's answer leaves its node as the frontend's, to the
        // client, announcing an MSS that leaves room for the option.
        let (verdict, reply) = backend.egress(&syn_ack_with_mss(REMOTE_POD, CLIENT, 1460));
        assert_eq!(verdict, PASS);
        let wire = on_wire(&reply);
        assert_eq!(wire.flow, flow(FRONTEND, CLIENT));
        assert_eq!(wire.mss, Some(1452), "MSS lowered by the option's bytes");
        assert!(wire.ip_options.is_empty());
        let (_, reply) = backend.egress(&tcp(REMOTE_POD, CLIENT, Tcp::Ack));
        assert_eq!(seen(&reply), flow(FRONTEND, CLIENT));

        // Later packets of the flow are stripped alike, the entry kept.
        let (_, dnated) = lb.ingress(&tcp(CLIENT, FRONTEND, Tcp::Ack));
        let (_, carried) = lb.egress(&dnated);
        let (verdict, delivered) = backend.ingress_on(&carried, x0);
        assert_eq!(verdict, PASS);
        let wire = on_wire(&delivered);
        assert_eq!(wire.flow, flow(CLIENT, REMOTE_POD));
        assert!(wire.ip_options.is_empty());
        assert_eq!(backend.ct().len(), 1);
        assert!(backend.ct().iter().all(|(k, _)| k.dir != CT_DIR_IN));
        assert_eq!(
            backend.stat(stat4(At::TC_IN, Reason::DsrRestored)),
            1,
            "one flow learned"
        );
    });
}

#[test]
fn a_packet_without_the_option_is_untouched_on_the_backends_node() {
    let backend = backend_node(PROTO_TCP);
    let packet = tcp(CLIENT, REMOTE_POD, Tcp::Syn);
    let (verdict, out) = backend.ingress(&packet);
    assert_eq!(verdict, PASS);
    assert_eq!(out, packet);
    assert!(backend.ct().is_empty());
}

/// An IPv6 SYN (or SYN-ACK) announcing MSS `mss`.
fn handshake6_with_mss(src: Addr6, dst: Addr6, mss: u16, ack: bool) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(src.0, dst.0, 64)
        .tcp(src.1, dst.1, 1000, 64_240)
        .syn();
    let builder = if ack { builder.ack(1001) } else { builder };
    let builder = builder
        .options(&[TcpOptionElement::MaximumSegmentSize(mss)])
        .unwrap();
    let mut out = Vec::with_capacity(builder.size(0));
    builder.write(&mut out, &[]).unwrap();
    out
}

/// What an IPv6 packet of a DSR flow carries on the wire: its addresses
/// (checksums and payload length checked), its destination-options
/// header's next header and options, and a SYN's MSS.
#[derive(Debug)]
struct OnWire6 {
    flow: Seen6,
    dest_opts: Option<(u8, Vec<u8>)>,
    mss: Option<u16>,
}

fn on_wire6(packet: &[u8]) -> OnWire6 {
    let flow = seen6(packet);
    let headers = PacketHeaders::from_ethernet_slice(packet).unwrap();
    let Some(NetHeaders::Ipv6(ip, exts)) = &headers.net else {
        panic!("not IPv6");
    };
    assert_eq!(
        usize::from(ip.payload_length),
        packet.len() - 14 - 40,
        "IPv6 payload length"
    );
    let mss = match &headers.transport {
        Some(TransportHeader::Tcp(t)) => t.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::MaximumSegmentSize(m)) => Some(m),
            _ => None,
        }),
        _ => None,
    };
    OnWire6 {
        flow,
        dest_opts: exts
            .destination_options
            .as_ref()
            .map(|d| (d.next_header.0, d.payload().to_vec())),
        mss,
    }
}

/// The header's options as the backend's node must find them: Cilium's
/// type 0x1b, length 20, the frontend's address and port, two bytes of
/// padding.
fn options6_of(frontend: Addr6) -> Vec<u8> {
    let mut opts = vec![0x1b, 20];
    opts.extend(frontend.0);
    opts.extend(frontend.1.to_be_bytes());
    opts.extend([0, 0]);
    opts
}

/// [`lb_node`] for IPv6.
fn lb_node6(proto: u8) -> Bed {
    let mut bed = Bed::new();
    bed.snat(NODE6, 61_000, 61_010);
    bed.frontend_at(FRONTEND6, proto, FE_F_DSR, &[REMOTE_POD6]);
    bed
}

#[test]
fn an_ipv6_dsr_flow_leaves_dnated_with_the_frontend_in_a_destination_options_header() {
    let bed = lb_node6(PROTO_TCP);
    let (verdict, dnated) = bed.ingress(&handshake6_with_mss(CLIENT6, FRONTEND6, 1440, false));
    assert_eq!(verdict, PASS);
    let (verdict, out) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    let wire = on_wire6(&out);
    assert_eq!(wire.flow, flow6(CLIENT6, REMOTE_POD6), "not SNATed");
    assert_eq!(
        wire.dest_opts,
        Some((PROTO_TCP, options6_of(FRONTEND6))),
        "{out:x?}"
    );
    assert_eq!(wire.mss, Some(1440));
    assert_eq!(out.len(), dnated.len() + 24);
    assert!(bed.nat6().is_empty());
    assert!(bed.ct6().iter().all(|(_, v)| v.flags & CT_F_DSR != 0));

    // UDP alike, on every datagram.
    let bed = lb_node6(PROTO_UDP);
    for _ in 0..2 {
        let (_, dnated) = bed.ingress(&udp6(CLIENT6, FRONTEND6));
        let (_, out) = bed.egress(&dnated);
        let wire = on_wire6(&out);
        assert_eq!(wire.flow, flow6(CLIENT6, REMOTE_POD6));
        assert_eq!(wire.dest_opts, Some((PROTO_UDP, options6_of(FRONTEND6))));
    }
    assert!(bed.nat6().is_empty());
}

#[test]
fn the_backends_node_strips_the_ipv6_header_and_replies_as_the_frontend() {
    let lb = lb_node6(PROTO_TCP);
    let mut backend = Bed::new();
    backend.snat(v6([0xfd00, 0x57, 0, 0, 0, 0, 0, 2]), 61_000, 61_010);
    backend.dsr_endpoint(([0; 16], FRONTEND6.1), REMOTE_POD6, PROTO_TCP);
    on_device(|x0| {
        let (_, dnated) = lb.ingress(&handshake6_with_mss(CLIENT6, FRONTEND6, 1440, false));
        let (_, carried) = lb.egress(&dnated);
        let (verdict, delivered) = backend.ingress_on(&carried, x0);
        assert_eq!(verdict, PASS);
        assert_eq!(delivered, dnated, "the packet as it was before the header");

        let ct = backend.ct6();
        let [(key, value)] = ct.as_slice() else {
            panic!("want the reply's entry alone: {ct:?}");
        };
        assert_eq!(
            (key.dir, key.saddr_be, key.daddr_be),
            (CT_DIR_OUT, REMOTE_POD6.0, CLIENT6.0)
        );
        assert_eq!(
            (value.addr_be, value.port_be),
            (FRONTEND6.0, FRONTEND6.1.to_be())
        );
        assert_ne!(value.flags & CT_F_DSR, 0);

        // The answer leaves as the frontend's, its MSS lowered by the 24 bytes.
        let (verdict, reply) =
            backend.egress(&handshake6_with_mss(REMOTE_POD6, CLIENT6, 1440, true));
        assert_eq!(verdict, PASS);
        let wire = on_wire6(&reply);
        assert_eq!(wire.flow, flow6(FRONTEND6, CLIENT6));
        assert_eq!(wire.mss, Some(1416));
        assert_eq!(wire.dest_opts, None);

        // A later segment is stripped alike; one without the header is not
        // touched.
        let (_, dnated) = lb.ingress(&tcp6(CLIENT6, FRONTEND6, Tcp::Ack));
        let (_, carried) = lb.egress(&dnated);
        assert_eq!(backend.ingress_on(&carried, x0), (PASS, dnated));
        let plain = tcp6(CLIENT6, REMOTE_POD6, Tcp::Ack);
        assert_eq!(backend.ingress_on(&plain, x0), (PASS, plain.clone()));
        assert_eq!(backend.ct6().len(), 1);
        assert_eq!(
            backend.stat(stat6(At::TC_IN, Reason::DsrRestored)),
            1,
            "one flow learned"
        );
    });
}

/// Mid-flow failover: a node with a frontend of `flags` (DSR, Maglev or
/// both) whose two backends are on other nodes, told `config_flags`.
/// Returns the bed and the backend each client port's flow hashes to.
fn failover_node(flags: u16, maglev: bool, config_flags: u32) -> (Bed, impl Fn(u16) -> Addr) {
    use lb_agent::model::maglev::{HashSeed, TableSize, lookup_table};
    use lb_common::{FlowHash, ports_word};

    let backends = [REMOTE_POD, ([10, 3, 0, 4], 8080)];
    let addrs: Vec<std::net::SocketAddr> = backends
        .iter()
        .map(|(ip, port)| (std::net::Ipv4Addr::from(*ip), *port).into())
        .collect();
    let seed = HashSeed::default();
    let table = lookup_table(&addrs, TableSize::try_from(251).unwrap(), &seed);
    let mut bed = Bed::new();
    bed.snat(NODE, 61_000, 61_010);
    bed.frontend(NODE_PORT, PROTO_TCP, flags, &backends);
    if maglev {
        bed.maglev(NODE_PORT, PROTO_TCP, &table, seed.flow[0]);
    }
    let cfg = DatapathConfig {
        flags: config_flags,
        ..bed.config()
    };
    bed.set_config(cfg);
    let hashed = move |sport: u16| {
        let h = FlowHash::new(seed.flow[0])
            .word(u32::from_ne_bytes(CLIENT.0))
            .word(ports_word(sport.to_be(), NODE_PORT.to_be()))
            .word(u32::from(PROTO_TCP))
            .finish();
        backends[table[(h % 251) as usize] as usize]
    };
    (bed, hashed)
}

#[test]
fn with_maglev_and_dsr_a_mid_flow_segment_starts_its_flow_at_the_backend_the_table_names() {
    let (bed, hashed) = failover_node(FE_F_DSR, true, CFG_F_MIDFLOW);
    let mut reached = std::collections::BTreeSet::new();
    for sport in 41_000..41_016 {
        let client = (CLIENT.0, sport);
        // The router moved the flow here: its next segment is an ACK.
        let (verdict, dnated) = bed.ingress(&tcp(client, FRONTEND, Tcp::Ack));
        assert_eq!(verdict, PASS);
        assert_eq!(seen(&dnated), flow(client, hashed(sport)), "{sport}");
        let (verdict, out) = bed.egress(&dnated);
        assert_eq!(verdict, PASS);
        let wire = on_wire(&out);
        assert_eq!(wire.flow, flow(client, hashed(sport)), "not SNATed");
        assert_eq!(wire.ip_options, option_of(FRONTEND));
        reached.insert(hashed(sport));
    }
    assert_eq!(reached.len(), 2, "16 flows reach both backends");
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 16);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::MidflowTakenOver)), 16);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::PassedUntracked)), 0);
    assert!(bed.nat().is_empty());

    // The flows live as established connections, not as a SYN's: this
    // node sees their client's side only, which an ACK continues.
    let syn_client = (CLIENT.0, 42_000);
    bed.ingress(&tcp(syn_client, FRONTEND, Tcp::Syn));
    let ct = bed.ct();
    let expires = |port: u16| {
        ct.iter()
            .find(|(k, _)| k.dir == CT_DIR_IN && k.sport_be == port.to_be())
            .map(|(_, v)| *v)
            .unwrap()
    };
    let (taken, syn) = (expires(41_000), expires(42_000));
    assert_ne!(taken.seen_client & CT_SEEN_ACK, 0);
    assert_eq!(taken.seen_backend, 0, "its backend answers elsewhere");
    let t = Timeouts::DEFAULT;
    assert!(
        taken.expires.wrapping_sub(syn.expires) >= t.tcp - t.tcp_syn - 1,
        "{taken:?} {syn:?}"
    );
}

#[test]
fn a_mid_flow_segment_stays_the_kernels_without_the_flag_maglev_or_dsr() {
    for (flags, maglev, config_flags, why) in [
        (FE_F_DSR, true, 0, "the agent has not taken over yet"),
        (FE_F_DSR, false, CFG_F_MIDFLOW, "no Maglev table"),
        (0, true, CFG_F_MIDFLOW, "SNATed, not DSR"),
    ] {
        let (bed, _) = failover_node(flags, maglev, config_flags);
        let segment = tcp(CLIENT, FRONTEND, Tcp::Ack);
        assert_eq!(bed.ingress(&segment), (PASS, segment), "{why}");
        assert!(bed.ct().is_empty(), "{why}");
        assert_eq!(
            bed.stat(stat4(At::TC_IN, Reason::PassedUntracked)),
            1,
            "{why}"
        );
        assert_eq!(
            bed.stat(stat4(At::TC_IN, Reason::MidflowTakenOver)),
            0,
            "{why}"
        );
    }
}

#[test]
fn a_flow_the_kernel_tracks_stays_the_kernels_at_a_failover_frontend() {
    let (mut bed, _) = failover_node(FE_F_DSR, true, CFG_F_MIDFLOW);
    // As the agent seeds kube-proxy's TCP flows when it takes over.
    bed.kernel_flow(CLIENT, (NODE, NODE_PORT), PROTO_TCP, (CT_SEEN, CT_SEEN), 30);
    let segment = tcp(CLIENT, FRONTEND, Tcp::Ack);
    assert_eq!(bed.ingress(&segment), (PASS, segment), "untouched");
    assert_eq!(bed.ct().len(), 1, "no entry of ours: {:?}", bed.ct());
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 0);
}

#[test]
fn a_flow_taken_over_mid_flow_takes_a_token_and_one_that_starts_closed_lives_as_closed() {
    let (mut bed, _) = failover_node(FE_F_DSR, true, CFG_F_MIDFLOW);
    bed.set_config(DatapathConfig {
        syn_budget: 1,
        syn_refill: 0,
        ..bed.config()
    });
    let client = |port| (CLIENT.0, port);
    let t = Timeouts::DEFAULT;
    on_one_cpu(|| {
        // An ACK takes the budget's one token; the next flow's is dropped.
        assert_eq!(
            bed.ingress(&tcp(client(41_000), FRONTEND, Tcp::Ack)).0,
            PASS
        );
        assert_eq!(
            bed.ingress(&tcp(client(41_001), FRONTEND, Tcp::Ack)).0,
            DROP
        );
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 1);
        // A RST or a FIN starts a flow closing, which takes no token and
        // lives the closing timeouts, not the established one.
        assert_eq!(
            bed.ingress(&tcp(client(41_002), FRONTEND, Tcp::Rst)).0,
            PASS
        );
        assert_eq!(
            bed.ingress(&tcp(client(41_003), FRONTEND, Tcp::Fin)).0,
            PASS
        );
    });
    let now = lb_agent::datapath::conntrack::now();
    let expires = |port: u16| {
        bed.ct()
            .iter()
            .find(|(k, _)| k.dir == CT_DIR_IN && k.sport_be == port.to_be())
            .map(|(_, v)| v.expires.wrapping_sub(now))
            .unwrap()
    };
    assert!(expires(41_002) <= t.tcp_fin, "{}", expires(41_002));
    assert!(
        expires(41_003) <= lb_common::CT_TIME_WAIT,
        "{}",
        expires(41_003)
    );
    assert!(expires(41_000) >= t.tcp - 5, "{}", expires(41_000));
}

/// `BPF_F_TEST_SKB_CHECKSUM_COMPLETE`: the kernel gives the packet the
/// sum a NIC computes over all of it and, after the run, checks the skb's
/// sum against the packet. A program that changes bytes without updating
/// it makes the receiving stack log "hw csum failure" for every packet
/// (and recompute the sum), as a host-network endpoint showed for the
/// IPv6 header's strip.
#[test]
fn a_devices_complete_checksum_stays_right_through_dsr_both_ways_and_both_families() {
    let lb = lb_node6(PROTO_TCP);
    let mut backend = Bed::new();
    backend.snat(v6([0xfd00, 0x57, 0, 0, 0, 0, 0, 2]), 61_000, 61_010);
    backend.dsr_endpoint(([0; 16], FRONTEND6.1), REMOTE_POD6, PROTO_TCP);
    let lb4 = lb_node(PROTO_TCP);
    let backend4 = backend_node(PROTO_TCP);
    on_device(|x0| {
        let summed = |bed: &Bed, program: &str, packet: &[u8], what: &str| {
            let (verdict, out) = bed
                .run_summed(program, packet, x0)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(verdict, PASS, "{what}");
            out
        };
        let syn = handshake6_with_mss(CLIENT6, FRONTEND6, 1440, false);
        let dnated = summed(&lb, "lb_tc_ingress", &syn, "IPv6 DNAT");
        let carried = summed(&lb, "lb_tc_egress", &dnated, "IPv6 header in");
        summed(&backend, "lb_tc_ingress", &carried, "IPv6 header out");
        let answer = handshake6_with_mss(REMOTE_POD6, CLIENT6, 1440, true);
        summed(
            &backend,
            "lb_tc_egress",
            &answer,
            "IPv6 answer as the frontend",
        );

        let syn = syn_with_mss(CLIENT, FRONTEND, 1460);
        let dnated = summed(&lb4, "lb_tc_ingress", &syn, "IPv4 DNAT");
        let carried = summed(&lb4, "lb_tc_egress", &dnated, "IPv4 option in");
        summed(&backend4, "lb_tc_ingress", &carried, "IPv4 option out");
        let answer = syn_ack_with_mss(REMOTE_POD, CLIENT, 1460);
        summed(
            &backend4,
            "lb_tc_egress",
            &answer,
            "IPv4 answer as the frontend",
        );
    });
}
