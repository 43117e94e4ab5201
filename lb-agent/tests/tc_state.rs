//! The tc programs' connection state on crafted packets, through
//! `BPF_PROG_TEST_RUN` (the bed of `tc_programs.rs`): what starts a flow,
//! how long each flow lives and how both directions keep it alive, when a
//! SNAT port may go to another client, fragments, the previous maps of a
//! migration, reject rate limits, devices without a link-layer header,
//! flows left to the kernel, and the budget of unconfirmed flows. Needs root (CAP_BPF, CAP_NET_ADMIN); without
//! it every test fails.

use lb_agent::datapath::conntrack;
use lb_common::{
    At, CT_DIR_OUT, CT_SEEN, CT_SEEN_ACK, CT_TIME_WAIT, Ct4Value, DEFAULT_CT_TIMEOUT_ANY,
    DEFAULT_CT_TIMEOUT_TCP, DEFAULT_CT_TIMEOUT_TCP_FIN, DEFAULT_CT_TIMEOUT_TCP_SYN, DatapathConfig,
    FE_F_EXTERNAL_LOCAL, Nat4Value, PROTO_TCP, PROTO_UDP, REJECT_BURST, Reason,
};
use lb_testbed::bed::*;

/// Every entry's expiry, in seconds from now: conntrack entries by
/// direction, then SNAT entries.
fn left(bed: &Bed) -> (Vec<(u8, u32)>, Vec<u32>) {
    let now = conntrack::now();
    let mut ct: Vec<(u8, u32)> = bed
        .ct()
        .iter()
        .map(|(k, v)| (k.dir, v.expires.wrapping_sub(now)))
        .collect();
    ct.sort_unstable();
    let nat = bed
        .nat()
        .iter()
        .map(|(_, v)| v.expires.wrapping_sub(now))
        .collect();
    (ct, nat)
}

/// Whether `got` is `want` give or take the second the clock may tick.
fn about(got: u32, want: u32) -> bool {
    got.abs_diff(want) <= 1
}

/// A Cluster NodePort with its one endpoint on another node, one SNAT
/// port range of `ports`.
fn remote_bed(ports: (u16, u16)) -> Bed {
    let mut bed = Bed::new();
    bed.snat(NODE, ports.0, ports.1);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    bed.frontend(NODE_PORT, PROTO_UDP, 0, &[REMOTE_POD]);
    bed
}

/// A client's segment through the node: DNAT in, SNAT out.
fn out(bed: &Bed, client: Addr, flags: Tcp) -> (i32, Vec<u8>) {
    let (verdict, dnated) = bed.ingress(&tcp(client, FRONTEND, flags));
    if verdict != PASS {
        return (verdict, dnated);
    }
    bed.egress(&dnated)
}

/// The backend's segment back to `nat` (the node's SNAT address and
/// port), through the node to the client.
fn back(bed: &Bed, nat: Addr, flags: Tcp) -> (i32, Vec<u8>) {
    let (verdict, to_client) = bed.ingress(&tcp(REMOTE_POD, nat, flags));
    assert_eq!(verdict, PASS);
    bed.egress(&to_client)
}

#[test]
fn a_bare_ack_starts_no_flow_and_is_left_to_the_kernel() {
    let bed = remote_bed((2000, 2010));
    for flags in [Tcp::Ack, Tcp::Fin, Tcp::Rst, Tcp::SynAck] {
        let segment = tcp(CLIENT, FRONTEND, flags);
        assert_eq!(bed.ingress(&segment), (PASS, segment), "untouched");
    }
    assert!(bed.ct().is_empty());
    assert_eq!(
        bed.stat(stat4(At::TC_IN, Reason::PassedUntracked)),
        4,
        "to a frontend"
    );
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 0);
}

#[test]
fn a_packet_with_a_bad_ip_checksum_starts_no_flow() {
    let bed = remote_bed((2000, 2010));
    for mut packet in [tcp(CLIENT, FRONTEND, Tcp::Syn), udp(CLIENT, FRONTEND)] {
        packet[24] ^= 0x5a;
        assert_eq!(bed.ingress(&packet), (PASS, packet.clone()));
    }
    assert!(bed.ct().is_empty());
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 0);
}

#[test]
fn a_new_flow_lives_the_syn_timeout_until_its_handshake_completes() {
    let bed = remote_bed((2000, 2010));
    let (_, snated) = out(&bed, CLIENT, Tcp::Syn);
    let nat = seen(&snated).src;
    let (ct, nats) = left(&bed);
    assert!(
        ct.iter()
            .all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_TCP_SYN)),
        "{ct:?}"
    );
    assert!(about(nats[0], DEFAULT_CT_TIMEOUT_TCP_SYN), "{nats:?}");
    // The backend's answer alone changes nothing; the client's ACK makes
    // it established, in all three entries.
    back(&bed, nat, Tcp::SynAck);
    assert!(
        left(&bed)
            .0
            .iter()
            .all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_TCP_SYN))
    );
    out(&bed, CLIENT, Tcp::Ack);
    let (ct, nats) = left(&bed);
    assert!(
        ct.iter().all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_TCP)),
        "{ct:?}"
    );
    assert!(about(nats[0], DEFAULT_CT_TIMEOUT_TCP), "{nats:?}");
}

/// An established flow through `bed` from `client`: its SNAT address and
/// port.
fn established(bed: &Bed, client: Addr) -> Addr {
    let (verdict, snated) = out(bed, client, Tcp::Syn);
    assert_eq!(verdict, PASS);
    let nat = seen(&snated).src;
    back(bed, nat, Tcp::SynAck);
    out(bed, client, Tcp::Ack);
    nat
}

#[test]
fn a_half_closed_flow_stays_established_and_both_fins_close_it() {
    for client_first in [true, false] {
        let bed = remote_bed((2000, 2010));
        let nat = established(&bed, CLIENT);
        if client_first {
            out(&bed, CLIENT, Tcp::Fin);
        } else {
            back(&bed, nat, Tcp::Fin);
        }
        // Half-closed: the other side may go on for hours.
        let (ct, _) = left(&bed);
        assert!(
            ct.iter().all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_TCP)),
            "{ct:?}"
        );
        let (verdict, reply) = back(&bed, nat, Tcp::Ack);
        assert_eq!((verdict, seen(&reply)), (PASS, flow(FRONTEND, CLIENT)));
        if client_first {
            back(&bed, nat, Tcp::Fin);
        } else {
            out(&bed, CLIENT, Tcp::Fin);
        }
        // Closed: the FIN timeout, or TIME_WAIT's length when the backend
        // closed first (its socket waits on the SNAT port); in every entry.
        let hold = if client_first {
            DEFAULT_CT_TIMEOUT_TCP_FIN
        } else {
            CT_TIME_WAIT
        };
        let (ct, nats) = left(&bed);
        assert!(ct.iter().all(|(_, l)| about(*l, hold)), "{ct:?}");
        assert!(about(nats[0], hold), "{nats:?}");
        // Its last ACK does not extend it.
        out(&bed, CLIENT, Tcp::Ack);
        assert!(left(&bed).0.iter().all(|(_, l)| about(*l, hold)));
    }
}

#[test]
fn a_reset_from_either_side_closes_the_flow() {
    for from_client in [true, false] {
        let bed = remote_bed((2000, 2010));
        let nat = established(&bed, CLIENT);
        if from_client {
            out(&bed, CLIENT, Tcp::Rst);
        } else {
            back(&bed, nat, Tcp::Rst);
        }
        let (ct, nats) = left(&bed);
        assert!(
            ct.iter()
                .all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_TCP_FIN)),
            "{ct:?}"
        );
        assert!(about(nats[0], DEFAULT_CT_TIMEOUT_TCP_FIN), "{nats:?}");
    }
}

/// Sets every entry's expiry to `secs` from now, as if the flow had been
/// idle.
fn age(bed: &mut Bed, secs: u32) {
    let now = conntrack::now();
    for (k, v) in bed.ct() {
        let v = Ct4Value {
            expires: now + secs,
            ..v
        };
        bed.ct.insert(k, v, 0).unwrap();
    }
    for (k, v) in bed.nat() {
        let v = Nat4Value {
            expires: now + secs,
            ..v
        };
        bed.nat.insert(k, v, 0).unwrap();
    }
}

#[test]
fn either_direction_alone_keeps_every_entry_of_a_flow_alive() {
    let mut bed = remote_bed((2000, 2010));
    let udp_out = |bed: &Bed| {
        let (_, dnated) = bed.ingress(&udp(CLIENT, FRONTEND));
        bed.egress(&dnated)
    };
    let (_, first) = udp_out(&bed);
    let nat = seen(&first).src;
    // One-way from the client (statsd, syslog): every entry is refreshed,
    // the reply mapping included, and the SNAT stays.
    age(&mut bed, 2);
    let (_, again) = udp_out(&bed);
    assert_eq!(seen(&again).src, nat, "the same SNAT address and port");
    let (ct, nats) = left(&bed);
    assert!(
        ct.iter().all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_ANY)),
        "{ct:?}"
    );
    assert!(about(nats[0], DEFAULT_CT_TIMEOUT_ANY), "{nats:?}");
    // One-way from the backend: likewise, the client's entry included.
    age(&mut bed, 2);
    let (_, to_client) = bed.ingress(&udp(REMOTE_POD, nat));
    let (_, reply) = bed.egress(&to_client);
    assert_eq!(seen(&reply), flow(FRONTEND, CLIENT));
    let (ct, nats) = left(&bed);
    assert!(
        ct.iter().all(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_ANY)),
        "{ct:?}"
    );
    assert!(about(nats[0], DEFAULT_CT_TIMEOUT_ANY), "{nats:?}");
}

#[test]
fn a_snat_port_goes_to_another_client_only_once_its_flow_is_over() {
    // One port, so every flow to the backend needs the same one.
    let mut bed = remote_bed((2000, 2000));
    let nat = established(&bed, CLIENT);
    assert_eq!(nat, (NODE, 2000));
    let other: Addr = ([198, 51, 100, 8], 41000);
    // Half-closed, the flow still uses the port: the backend may answer
    // for long, and its answer must reach this client.
    out(&bed, CLIENT, Tcp::Fin);
    assert_eq!(out(&bed, other, Tcp::Syn).0, DROP);
    let (_, reply) = back(&bed, nat, Tcp::Ack);
    assert_eq!(seen(&reply), flow(FRONTEND, CLIENT));
    // Closed, it holds the port for the FIN timeout.
    back(&bed, nat, Tcp::Fin);
    assert_eq!(out(&bed, other, Tcp::Syn).0, DROP);
    assert_eq!(bed.stat(stat4(At::TC_OUT, Reason::DropSnatExhausted)), 2);
    // Once it expired, the port is the new flow's, and the backend's
    // replies on it go to the new client.
    age(&mut bed, 0);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (verdict, snated) = out(&bed, other, Tcp::Syn);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&snated).src, nat);
    let (verdict, to_other) = bed.ingress(&tcp(REMOTE_POD, nat, Tcp::SynAck));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&to_other).dst, other);
}

#[test]
fn a_client_coming_back_on_its_port_takes_its_mapping_over() {
    let bed = remote_bed((2000, 2000));
    let nat = established(&bed, CLIENT);
    out(&bed, CLIENT, Tcp::Rst);
    // The same client port reconnects at once (the kernel's NAT keeps the
    // tuple too): same SNAT port, so the backend sees the same client go
    // on, whatever its socket's state.
    let (verdict, snated) = out(&bed, CLIENT, Tcp::Syn);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&snated).src, nat);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 2);
    assert_eq!(bed.nat().len(), 1);
}

#[test]
fn the_clients_own_port_comes_first_then_the_next_ones() {
    let bed = remote_bed((2000, 2010));
    // A client port inside the range is kept.
    let a: Addr = ([198, 51, 100, 7], 2005);
    assert_eq!(seen(&out(&bed, a, Tcp::Syn).1).src, (NODE, 2005));
    // Another client with the same port gets the next one.
    let b: Addr = ([198, 51, 100, 8], 2005);
    assert_eq!(seen(&out(&bed, b, Tcp::Syn).1).src, (NODE, 2006));
    assert_eq!(bed.nat().len(), 2);
}

#[test]
fn two_cpus_taking_a_new_flows_first_packets_share_one_port() {
    let mut bed = remote_bed((2000, 2010));
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (_, first) = bed.egress(&dnated);
    let port = seen(&first).src;
    // The second CPU read the flow's entry before the first stored its
    // port: it allocates again, and must land on the same mapping.
    let (key, v) = bed
        .ct()
        .into_iter()
        .find(|(k, _)| k.dir == CT_DIR_OUT)
        .unwrap();
    let unallocated = Ct4Value {
        nat_port_be: 0,
        ..v
    };
    bed.ct.insert(key, unallocated, 0).unwrap();
    let (verdict, second) = bed.egress(&dnated);
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&second).src, port);
    assert_eq!(bed.nat().len(), 1, "one mapping: {:?}", bed.nat());
}

/// The UDP datagram `frames` (its fragments, in order) carry, after
/// checking its checksum: source and destination.
fn reassembled(frames: &[Vec<u8>]) -> Seen {
    let mut datagram = Vec::new();
    for f in frames {
        let (ip, rest) = etherparse::Ipv4Header::from_slice(&f[14..]).unwrap();
        datagram.extend(&rest[..usize::from(ip.total_len) - ip.header_len()]);
    }
    let (first, _) = etherparse::Ipv4Header::from_slice(&frames[0][14..]).unwrap();
    let (udp, payload) = etherparse::UdpHeader::from_slice(&datagram).unwrap();
    let want = udp.calc_checksum_ipv4(&first, payload).unwrap();
    assert_eq!(udp.checksum, want, "UDP checksum of the whole datagram");
    flow(
        (first.source, udp.source_port),
        (first.destination, udp.destination_port),
    )
}

#[test]
fn later_fragments_follow_their_first_both_ways() {
    let bed = remote_bed((2000, 2010));
    let frags = udp_fragments(CLIENT, FRONTEND, 7, 3000, 1500);
    assert_eq!(frags.len(), 3);
    let mut left_node = Vec::new();
    for frag in &frags {
        let (verdict, dnated) = bed.ingress(frag);
        assert_eq!(verdict, PASS);
        assert_eq!(seen_ip(&dnated).1, REMOTE_POD.0, "DNATed");
        let (verdict, snated) = bed.egress(&dnated);
        assert_eq!(verdict, PASS);
        left_node.push(snated);
    }
    assert_eq!(
        bed.stat(stat4(At::TC_IN, Reason::NewFlow)),
        1,
        "one datagram, one flow"
    );
    let sent = reassembled(&left_node);
    assert_eq!(sent.dst, REMOTE_POD);
    assert_eq!(sent.src.0, NODE);
    // The backend's 3,000-byte answer, fragmented on its way back.
    let mut to_client = Vec::new();
    for frag in udp_fragments(REMOTE_POD, sent.src, 9, 3000, 1500) {
        let (verdict, in_node) = bed.ingress(&frag);
        assert_eq!(verdict, PASS);
        assert_eq!(seen_ip(&in_node).1, CLIENT.0);
        let (verdict, out) = bed.egress(&in_node);
        assert_eq!(verdict, PASS);
        to_client.push(out);
    }
    assert_eq!(reassembled(&to_client), flow(FRONTEND, CLIENT));
    // A later fragment whose first one never came is dropped and counted.
    let orphan = &udp_fragments(CLIENT, FRONTEND, 8, 3000, 1500)[1];
    assert_eq!(bed.ingress(orphan).0, DROP);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropFragmentUnknown)), 1);
}

#[test]
fn rejects_are_rate_limited_per_frontend() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[]);
    let sent = (0..REJECT_BURST + 100)
        .filter(|i| {
            let client = (CLIENT.0, 10_000 + *i as u16);
            bed.ingress(&tcp(client, FRONTEND, Tcp::Syn)).0 == REDIRECT
        })
        .count();
    // Within a test of milliseconds, the burst and a token or two more.
    assert!(
        (REJECT_BURST as usize..REJECT_BURST as usize + 5).contains(&sent),
        "{sent}"
    );
    assert_eq!(
        bed.stat(stat4(At::TC_IN, Reason::DropRejectRateLimited)) as usize,
        REJECT_BURST as usize + 100 - sent
    );
    assert_eq!(
        bed.stat(stat4(At::TC_IN, Reason::RefusedNoEndpoints)),
        u64::from(REJECT_BURST + 100)
    );
    // Another frontend has its own budget.
    bed.frontend(NODE_PORT + 1, PROTO_TCP, 0, &[]);
    let other = tcp(CLIENT, (NODE, NODE_PORT + 1), Tcp::Syn);
    assert_eq!(bed.ingress(&other).0, REDIRECT);
}

#[test]
fn a_device_without_a_link_layer_header_is_translated_too() {
    let mut bed = Bed::new();
    bed.frontend(NODE_PORT, PROTO_TCP, FE_F_EXTERNAL_LOCAL, &[LOCAL_POD]);
    let frame = tcp(CLIENT, FRONTEND, Tcp::Syn);
    // The same packet without its Ethernet header, as on WireGuard or TUN.
    let (verdict, out) = bed.ingress_l3(&frame[14..]);
    assert_eq!(verdict, PASS);
    let mut as_frame = frame[..14].to_vec();
    as_frame.extend(&out);
    assert_eq!(seen(&as_frame), flow(CLIENT, LOCAL_POD));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 1);
}

#[test]
fn a_flow_the_kernel_tracks_is_left_to_it_until_its_client_opens_a_new_one() {
    let mut bed = remote_bed((2000, 2010));
    // As the agent seeds it at a takeover from kube-proxy: the client's
    // entry only, marked as the kernel's.
    for proto in [PROTO_UDP, PROTO_TCP] {
        let seen = (CT_SEEN | CT_SEEN_ACK, CT_SEEN);
        bed.kernel_flow(CLIENT, (NODE, NODE_PORT), proto, seen, 30);
    }
    let datagram = udp(CLIENT, FRONTEND);
    assert_eq!(bed.ingress(&datagram), (PASS, datagram), "untouched");
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::PassedUntracked)), 1);
    // Its packets keep it alive as any flow's.
    let (ct, _) = left(&bed);
    assert!(
        ct.iter().any(|(_, l)| about(*l, DEFAULT_CT_TIMEOUT_ANY)),
        "{ct:?}"
    );
    // A new connection from the same port is ours.
    let (verdict, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    assert_eq!((verdict, seen(&dnated).dst), (PASS, REMOTE_POD));
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 1);
}

#[test]
fn during_a_migration_the_previous_maps_answer_what_the_new_ones_lack() {
    // The old programs' maps hold an established flow and its mapping.
    let old = remote_bed((2000, 2010));
    let nat = established(&old, CLIENT);
    let mut bed = remote_bed((2000, 2010));
    bed.migrating_from(&old);
    // Its next packets, either way, find it: same backend, same port.
    let (verdict, snated) = out(&bed, CLIENT, Tcp::Ack);
    assert_eq!((verdict, seen(&snated)), (PASS, flow(nat, REMOTE_POD)));
    let (verdict, reply) = back(&bed, nat, Tcp::Ack);
    assert_eq!((verdict, seen(&reply)), (PASS, flow(FRONTEND, CLIENT)));
    // And they are carried into the new maps on the way.
    assert_eq!(bed.ct().len(), 2);
    assert_eq!(bed.nat().len(), 1);
    assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 0);
    // Its port is not handed to another client meanwhile.
    let other: Addr = ([198, 51, 100, 8], 2000);
    let mut tight = remote_bed((nat.1, nat.1));
    tight.migrating_from(&old);
    assert_eq!(out(&tight, other, Tcp::Syn).0, DROP);
}

#[test]
fn a_syn_flood_spends_the_budget_of_unconfirmed_flows_and_a_handshake_gives_its_token_back() {
    let mut bed = remote_bed((2000, 2010));
    bed.set_config(DatapathConfig {
        syn_budget: 3,
        syn_refill: 1,
        ..bed.config()
    });
    let client = |port| (CLIENT.0, port);
    on_one_cpu(|| {
        // Three unconfirmed flows start; the fourth SYN is dropped and
        // leaves nothing behind.
        let mut nats = Vec::new();
        for port in 41_000..41_003 {
            let (verdict, snated) = out(&bed, client(port), Tcp::Syn);
            assert_eq!(verdict, PASS, "{port}");
            nats.push(seen(&snated).src);
        }
        let entries = (bed.ct().len(), bed.nat().len());
        assert_eq!(out(&bed, client(41_003), Tcp::Syn).0, DROP);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 1);
        assert_eq!((bed.ct().len(), bed.nat().len()), entries);
        // A retransmitted SYN of a flow that has its entries needs none.
        assert_eq!(out(&bed, client(41_000), Tcp::Syn).0, PASS);

        // The first flow's handshake completes: its token comes back, and
        // one more flow may start.
        back(&bed, nats[0], Tcp::SynAck);
        out(&bed, client(41_000), Tcp::Ack);
        assert_eq!(out(&bed, client(41_004), Tcp::Syn).0, PASS);
        assert_eq!(out(&bed, client(41_005), Tcp::Syn).0, DROP);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 2);
        // UDP is not counted.
        let (verdict, _) = bed.ingress(&udp(client(41_006), FRONTEND));
        assert_eq!(verdict, PASS);
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::NewFlow)), 5);
    });
}

#[test]
fn without_a_budget_syns_are_not_counted() {
    let bed = remote_bed((2000, 2100));
    on_one_cpu(|| {
        for port in 41_000..41_050 {
            assert_eq!(out(&bed, (CLIENT.0, port), Tcp::Syn).0, PASS, "{port}");
        }
        assert_eq!(bed.stat(stat4(At::TC_IN, Reason::DropSynBudget)), 0);
    });
}
