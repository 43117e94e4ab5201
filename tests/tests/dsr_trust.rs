//! Direct server return from outside the node when the packets are not
//! what they should be, with real sockets in the two-node bed
//! (`lb_tests::two_nodes`) and two real agents: a spoofed DSR option from
//! outside rewrites none of the node's own traffic, in the default
//! configuration; and a datagram the option (IPv6: destination-options
//! header) would take over the MTU is answered with ICMP so that the
//! client sends smaller, or SNATed when it may be fragmented, never lost
//! unsaid. Needs root; fails loudly without it.

use std::{
    net::{SocketAddr, UdpSocket},
    os::fd::AsRawFd as _,
    time::Duration,
};

use lb_fixtures::yaml;
use lb_tests::{
    netns::within,
    two_nodes::{
        Bed, CLIENT, CLIENT6, NODE1, NODE1_6, addr, dual_stack, node_objects, node_port_svc, p2,
        p2_6, slice, slice6,
    },
};

/// `direct` (NodePort 30090, TCP and UDP), dual-stack, with its endpoint
/// p2 on node-2.
fn manifest() -> String {
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        dual_stack(
            node_port_svc("direct", "10.96.59.1", 30090),
            "fd00:96::59:1",
        )
        .into(),
        slice("direct", vec![p2()]).into(),
        slice6("direct", vec![p2_6()]).into(),
    ])
}

/// Sets an IP-level socket option of `s` to the bytes `v`.
fn set_option(s: &UdpSocket, level: libc::c_int, name: libc::c_int, v: &[u8]) {
    // SAFETY: `v` is readable for its length; the socket is open.
    let ret = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            v.as_ptr().cast(),
            v.len() as libc::socklen_t,
        )
    };
    assert_eq!(ret, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// The client sends one datagram from port 5000 to port 6000 of node-1
/// (no Service uses it) carrying `option` (`level`/`name`: the socket
/// option that puts it in: IP options, IPv6 destination options); then
/// node-1's host sends from its address's port 6000 to the client's port
/// 5000. Where the client sees that datagram come from.
fn spoof_then_answer(
    bed: &Bed,
    (client, node): (&str, &str),
    (level, name, option): (libc::c_int, libc::c_int, &[u8]),
) -> anyhow::Result<SocketAddr> {
    let client: SocketAddr = addr(client, 5000).parse()?;
    let node: SocketAddr = addr(node, 6000).parse()?;
    let c = within(&bed.nodes.ns("c"), || Ok(UdpSocket::bind(client)?))?;
    c.set_read_timeout(Some(Duration::from_secs(3)))?;
    set_option(&c, level, name, option);
    c.send_to(b"spoof", node)?;
    std::thread::sleep(Duration::from_millis(200));
    within(&bed.nodes.ns("n1"), || {
        let n = UdpSocket::bind(node)?;
        n.send_to(b"own", client)?;
        Ok(())
    })?;
    let mut buf = [0u8; 16];
    let (_, from) = c.recv_from(&mut buf)?;
    Ok(from)
}

#[test]
fn a_spoofed_dsr_option_from_outside_rewrites_none_of_the_nodes_own_traffic() -> anyhow::Result<()>
{
    let bed = Bed::new(&manifest())?;
    // The default configuration: SNAT, no DSR frontend anywhere.
    let _agent1 = bed.agent(&bed.node1)?;
    let _agent2 = bed.agent(&bed.node2)?;
    bed.wait_reachable(&format!("{NODE1}:30090"))?;

    // Cilium's option naming 198.51.100.99:7777.
    let option = [0x9a, 8, 0x1e, 0x61, 198, 51, 100, 99];
    let from = spoof_then_answer(
        &bed,
        (CLIENT, NODE1),
        (libc::IPPROTO_IP, libc::IP_OPTIONS, &option),
    )?;
    assert_eq!(from, format!("{NODE1}:6000").parse()?, "the node's own");
    assert!(bed.node1.pins.stats()?.of("tc ipv4 drop_dsr_invalid") >= 1);

    // Its IPv6 destination-options header naming [2001:db8:e::99]:7777
    // (the kernel fills in the next header).
    let mut header = vec![0, 2, 0x1b, 20];
    header.extend("2001:db8:e::99".parse::<std::net::Ipv6Addr>()?.octets());
    header.extend(7777u16.to_be_bytes());
    header.extend([0, 0]);
    let from = spoof_then_answer(
        &bed,
        (CLIENT6, NODE1_6),
        (libc::IPPROTO_IPV6, libc::IPV6_DSTOPTS, &header),
    )?;
    assert_eq!(from, addr(NODE1_6, 6000).parse()?, "the node's own");
    assert!(bed.node1.pins.stats()?.of("tc ipv6 drop_dsr_invalid") >= 1);
    assert!(
        bed.node1.pins.conntrack()?.trim().is_empty() || {
            let ct = bed.node1.pins.conntrack()?;
            !ct.contains(":6000") && !ct.contains(":5000")
        },
        "no entry for the spoofed tuples"
    );
    Ok(())
}

#[test]
fn dsr_datagrams_the_option_takes_over_the_mtu_are_answered_or_snated_never_lost_unsaid()
-> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let args = ["--bpf-lb-mode=dsr"];
    let _agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    let (to, to6) = (format!("{NODE1}:30090"), addr(NODE1_6, 30090));
    bed.wait_reachable(&to)?;
    let udp = |to: &str, n: &str, size: &str, pmtu: &str| {
        bed.client(&[
            "udp",
            "--to",
            to,
            "-n",
            n,
            "--connected",
            "--size",
            size,
            "--pmtu",
            pmtu,
        ])
    };

    // 1,472 bytes fill the 1,500-byte links: the option's 8 would not fit.
    // Without don't fragment the datagram is SNATed instead, answered at
    // once.
    let r = udp(&to, "3", "1472", "dont")?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "{r:?}");
    assert!(bed.node1.pins.stats()?.of("tc ipv4 dsr_snat_too_big") >= 1);
    // A 3,000-byte datagram, fragmented by its sender at 1,500: SNATed,
    // answered.
    let r = udp(&to, "3", "3000", "want")?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "{r:?}");
    // With don't fragment, the client is told (its connected socket gets
    // EMSGSIZE, not a silence), learns the path MTU, and its next
    // datagram, fragmented to fit, is answered.
    let r = udp(&to, "2", "1472", "want")?;
    assert_eq!((r.ok(), r.failed()), (1, 1), "{r:?}");
    assert!(!r.errors.contains_key("WouldBlock"), "not a timeout: {r:?}");
    assert_eq!(bed.node1.pins.stats()?.of("tc ipv4 dsr_too_big"), 1);
    let route = bed.exec("c", &["ip", "route", "get", NODE1])?;
    assert!(route.contains("mtu 1492"), "{route}");

    // IPv6: 1,452 bytes fill 1,500; the 24-byte header would not fit.
    // Packet Too Big teaches the client the path MTU (a UDP socket is not
    // told), and its next datagram, fragmented to fit, is answered.
    let r = udp(&to6, "3", "1452", "want")?;
    assert!(r.ok() >= 2, "{r:?}");
    assert!(bed.node1.pins.stats()?.of("tc ipv6 dsr_too_big") >= 1);
    let route = bed.exec("c", &["ip", "-6", "route", "get", NODE1_6])?;
    assert!(route.contains("mtu 1476"), "{route}");
    // A 3,000-byte datagram now fragmented to the learned MTU: answered.
    let r = udp(&to6, "3", "3000", "want")?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "{r:?}");
    Ok(())
}
