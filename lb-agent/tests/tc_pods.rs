//! The tc programs of a pod's host-side interface (`lb_tc_pod_in`,
//! `lb_tc_pod_out`) on crafted packets, through `BPF_PROG_TEST_RUN`: a pod
//! that opted out of socket load balancing sends to cluster IPs, and its
//! packets are translated at its interface, its flows kept where no packet
//! from outside finds them. Needs root (CAP_BPF and CAP_NET_ADMIN);
//! without it every test fails.

use etherparse::{PacketHeaders, TransportHeader};
use lb_common::{
    At, CT_DIR_IN, CT_DIR_OUT, CT_DIR_POD_IN, CT_DIR_POD_OUT, CT_F_SNAT, PROTO_TCP, PROTO_UDP,
    Reason,
};
use lb_testbed::{bed::*, packets6::*};

/// The cluster IP the pod sends to.
const VIP: Addr = ([10, 96, 0, 10], 80);
/// The pod that opted out, a client on this node.
const POD: Addr = ([10, 1, 0, 7], 41000);

#[test]
fn a_pods_flow_to_a_cluster_ip_is_dnated_at_its_interface_and_its_replies_show_the_cluster_ip() {
    let mut bed = Bed::new();
    bed.cluster_ip_at(VIP, PROTO_TCP, 0, &[REMOTE_POD]);

    let (verdict, out) = bed.pod_in(&tcp(POD, VIP, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(POD, REMOTE_POD), "DNATed, not SNATed");
    assert_eq!(bed.stat(stat4(At::POD_IN, Reason::NewFlow)), 1);
    let mut ct = bed.ct();
    ct.sort_by_key(|(k, _)| k.dir);
    let [(inbound, to_backend), (outbound, to_frontend)] = ct.as_slice() else {
        panic!("want one entry per direction: {ct:?}");
    };
    assert_eq!((inbound.dir, outbound.dir), (CT_DIR_POD_IN, CT_DIR_POD_OUT));
    assert_eq!(
        (to_backend.addr_be, to_backend.port_be, to_backend.flags),
        (REMOTE_POD.0, REMOTE_POD.1.to_be(), 0)
    );
    assert_eq!(
        (outbound.saddr_be, outbound.daddr_be),
        (REMOTE_POD.0, POD.0)
    );
    assert_eq!(
        (to_frontend.addr_be, to_frontend.port_be),
        (VIP.0, VIP.1.to_be())
    );

    // The answer, on its way into the pod, comes from the cluster IP.
    let (verdict, out) = bed.pod_out(&tcp(REMOTE_POD, POD, Tcp::SynAck));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(VIP, POD));
    // The pod's next segment finds its flow.
    let (_, out) = bed.pod_in(&tcp(POD, VIP, Tcp::Ack));
    assert_eq!(seen(&out), flow(POD, REMOTE_POD));
    assert_eq!(bed.stat(stat4(At::POD_IN, Reason::NewFlow)), 1);
}

#[test]
fn no_packet_from_outside_finds_or_replaces_a_pods_flow() {
    let mut bed = Bed::new();
    bed.cluster_ip_at(VIP, PROTO_TCP, 0, &[REMOTE_POD]);
    // An external frontend to the same backend, which a spoofed client
    // with the pod's address and port could reach.
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    bed.pod_in(&tcp(POD, VIP, Tcp::Syn));
    let pods = bed.ct();

    // The pod's own packet, arriving from outside: not a flow of ours, and
    // a cluster IP is no external frontend.
    let spoofed = tcp(POD, VIP, Tcp::Ack);
    assert_eq!(bed.ingress(&spoofed), (PASS, spoofed));
    let syn = tcp(POD, VIP, Tcp::Syn);
    assert_eq!(bed.ingress(&syn), (PASS, syn));
    // The backend's answer leaving by a node's device is not reversed.
    let answer = tcp(REMOTE_POD, POD, Tcp::SynAck);
    assert_eq!(bed.egress(&answer), (PASS, answer));
    assert_eq!(bed.ct(), pods, "nothing changed");

    // A spoofed flow to the external frontend from the pod's address and
    // port gets entries of its own, beside the pod's, which stay.
    bed.ingress(&tcp(POD, FRONTEND, Tcp::Syn));
    let all = bed.ct();
    assert_eq!(all.len(), 4, "{all:?}");
    for entry in &pods {
        assert!(all.contains(entry), "the pod's {entry:?} stays");
    }
    let dirs: Vec<u8> = all.iter().map(|(k, _)| k.dir).collect();
    assert!(dirs.contains(&CT_DIR_IN) && dirs.contains(&CT_DIR_OUT));
    // The backend's answer to the pod still shows the cluster IP.
    let (_, out) = bed.pod_out(&tcp(REMOTE_POD, POD, Tcp::SynAck));
    assert_eq!(seen(&out), flow(VIP, POD));
}

#[test]
fn a_pods_datagrams_to_a_cluster_ip_are_one_flow_and_other_traffic_passes_untouched() {
    let mut bed = Bed::new();
    let dns = (VIP.0, 53);
    let backend = ([10, 2, 0, 9], 5353);
    bed.cluster_ip_at(dns, PROTO_UDP, 0, &[backend]);

    let (verdict, out) = bed.pod_in(&udp(POD, dns));
    assert_eq!(verdict, PASS);
    assert_eq!(seen(&out), flow(POD, backend));
    let (_, out) = bed.pod_out(&udp(backend, POD));
    assert_eq!(seen(&out), flow(dns, POD));
    assert_eq!(bed.ct().len(), 2);

    // Neither a Service's address nor a flow of ours.
    let elsewhere = udp(POD, ([10, 2, 0, 9], 53));
    assert_eq!(bed.pod_in(&elsewhere), (PASS, elsewhere));
    let to_pod = udp(([10, 2, 0, 9], 53), POD);
    assert_eq!(bed.pod_out(&to_pod), (PASS, to_pod));
    let web = tcp(POD, ([93, 184, 215, 14], 443), Tcp::Syn);
    assert_eq!(bed.pod_in(&web), (PASS, web));
    assert_eq!(bed.ct().len(), 2, "nothing new tracked");
}

#[test]
fn an_undefined_port_or_no_endpoints_is_refused_to_the_pod_at_once() {
    let mut bed = Bed::new();
    bed.cluster_ip_at(VIP, PROTO_TCP, 0, &[REMOTE_POD]);
    let empty = ([10, 96, 0, 11], 80);
    bed.cluster_ip_at(empty, PROTO_TCP, 0, &[]);

    // Port 81 of the cluster IP: the socket path's ECONNREFUSED, as a reset.
    for (to, reason) in [
        ((VIP.0, 81), Reason::RefusedUnknownPort),
        (empty, Reason::RefusedNoEndpoints),
    ] {
        let (verdict, out) = bed.pod_in(&tcp(POD, to, Tcp::Syn));
        assert_eq!(verdict, REDIRECT, "sent back to the pod");
        assert_eq!(seen(&out), flow(to, POD));
        let Ok(Some(TransportHeader::Tcp(t))) =
            PacketHeaders::from_ethernet_slice(&out).map(|h| h.transport)
        else {
            panic!("not TCP");
        };
        assert!(t.rst, "{t:?}");
        assert_eq!(bed.stat(stat4(At::POD_IN, reason)), 1);
    }
    // A pod's refusals are not rate-limited: the answer goes to the pod
    // alone, never reflected at a spoofed source.
    for _ in 0..300 {
        assert_eq!(bed.pod_in(&tcp(POD, empty, Tcp::Syn)).0, REDIRECT);
    }
    assert!(bed.ct().is_empty());
}

#[test]
fn a_pod_reaching_itself_through_a_cluster_ip_is_snated_to_the_node_and_back() {
    let mut bed = Bed::new();
    bed.snat(NODE, 1024, 1100);
    let own = (POD.0, 8080);
    bed.cluster_ip_at(VIP, PROTO_TCP, 0, &[own]);

    // DNATed to itself: the kernel routes it back out of its interface,
    // where egress gives it the node's address.
    let (_, dnated) = bed.pod_in(&tcp(POD, VIP, Tcp::Syn));
    assert_eq!(seen(&dnated), flow(POD, own));
    assert_eq!(bed.stat(stat4(At::POD_IN, Reason::PodSnatHairpin)), 1);
    let (verdict, snated) = bed.pod_out(&dnated);
    assert_eq!(verdict, PASS);
    let on_wire = seen(&snated);
    assert_eq!((on_wire.src.0, on_wire.dst), (NODE, own));
    let nat_port = on_wire.src.1;
    assert!((1024..=1100).contains(&nat_port), "{nat_port}");
    let snat_entries = bed
        .ct()
        .iter()
        .filter(|(k, v)| k.dir == CT_DIR_POD_OUT && v.flags & CT_F_SNAT != 0)
        .count();
    assert_eq!(snat_entries, 1);

    // Its answer, as the backend, to the node's port comes back to it as
    // the client, and into it from the cluster IP.
    let (_, back) = bed.pod_in(&tcp(own, (NODE, nat_port), Tcp::SynAck));
    assert_eq!(seen(&back), flow(own, POD));
    let (_, into) = bed.pod_out(&back);
    assert_eq!(seen(&into), flow(VIP, POD));
}

#[test]
fn a_pod_cannot_answer_another_flows_client_through_the_nodes_snat_port() {
    let mut bed = Bed::new();
    bed.snat(NODE, 1024, 1100);
    bed.frontend(NODE_PORT, PROTO_TCP, 0, &[REMOTE_POD]);
    // An outside client's flow, SNATed towards a remote backend.
    let (_, dnated) = bed.ingress(&tcp(CLIENT, FRONTEND, Tcp::Syn));
    let (_, snated) = bed.egress(&dnated);
    let nat_port = seen(&snated).src.1;

    // The pod forges the backend's answer to that port: it is not the
    // mapping's client, so it is left as it is.
    let forged = tcp(REMOTE_POD, (NODE, nat_port), Tcp::SynAck);
    assert_eq!(bed.pod_in(&forged), (PASS, forged));
    // The real answer, from outside, still finds the client.
    let (_, to_client) = bed.ingress(&tcp(REMOTE_POD, (NODE, nat_port), Tcp::SynAck));
    assert_eq!(seen(&to_client), flow(REMOTE_POD, CLIENT));
}

#[test]
fn an_ipv6_pods_flow_to_a_cluster_ip_is_translated_both_ways() {
    let mut bed = Bed::new();
    let vip = (v6([0xfd00, 0x96, 0, 0, 0, 0, 0, 0x10]), 80);
    let pod = (v6([0xfd42, 1, 0, 0, 0, 0, 0, 7]), 41000);
    bed.cluster_ip_at(vip, PROTO_TCP, 0, &[REMOTE_POD6]);

    let (verdict, out) = bed.pod_in(&tcp6(pod, vip, Tcp::Syn));
    assert_eq!(verdict, PASS);
    assert_eq!(seen6(&out), flow6(pod, REMOTE_POD6));
    assert_eq!(bed.stat(stat6(At::POD_IN, Reason::NewFlow)), 1);
    let dirs: Vec<u8> = bed.ct6().iter().map(|(k, _)| k.dir).collect();
    assert_eq!(dirs.len(), 2);
    assert!(dirs.contains(&CT_DIR_POD_IN) && dirs.contains(&CT_DIR_POD_OUT));
    let (_, out) = bed.pod_out(&tcp6(REMOTE_POD6, pod, Tcp::SynAck));
    assert_eq!(seen6(&out), flow6(vip, pod));
    // From outside, the same segment is no flow of ours.
    let spoofed = tcp6(pod, vip, Tcp::Ack);
    assert_eq!(bed.ingress(&spoofed), (PASS, spoofed));
}

#[test]
fn an_icmp_error_about_a_pods_packet_reaches_it_quoting_the_cluster_ip() {
    let mut bed = Bed::new();
    bed.cluster_ip_at(VIP, PROTO_TCP, 0, &[REMOTE_POD]);
    let (_, dnated) = bed.pod_in(&tcp(POD, VIP, Tcp::Syn));

    // A router on the way to the backend has a lower MTU: its error comes
    // back into the pod about the packet the pod sent, from the cluster IP
    // (the kernel's NAT gives an error the outer header of a reply).
    let router = [192, 168, 57, 254];
    let error = icmp_error(router, POD.0, FRAG_NEEDED, &dnated);
    let (verdict, out) = bed.pod_out(&error);
    assert_eq!(verdict, PASS);
    assert_eq!(seen_icmp(&out), (VIP.0, POD.0, flow(POD, VIP)));
    // The same error leaving by a node's device is not the pod's.
    let (_, untouched) = bed.egress(&error);
    assert_eq!(untouched, error);
}

#[test]
fn session_affinity_keeps_a_pod_on_one_backend_per_packet() {
    let mut bed = Bed::new();
    let pods: Vec<Addr> = (1..=8).map(|i| ([10, 2, 0, i], 8080)).collect();
    bed.cluster_ip_at(VIP, PROTO_TCP, lb_common::FE_F_AFFINITY, &pods);
    let mut seen_backends = std::collections::BTreeSet::new();
    for port in 0..20 {
        let (_, out) = bed.pod_in(&tcp((POD.0, 41000 + port), VIP, Tcp::Syn));
        seen_backends.insert(seen(&out).dst);
    }
    assert_eq!(seen_backends.len(), 1, "{seen_backends:?}");
}
