//! IPv6 traffic from outside the node through the tc programs, with real
//! sockets in the dual-stack two-node bed (`lb_tests::two_nodes`) and two
//! real `lb-agent`s: NodePorts with SNAT to the node's IPv6 address and
//! with eTP Local, IPv6 external and load-balancer IPs with source ranges,
//! REJECT without endpoints, UDP answered from its frontend, Packet Too
//! Big through a smaller hop, fragments, and an agent killed under held
//! flows. Needs root; fails loudly without it.

use std::collections::BTreeSet;

use lb_fixtures::yaml;
use lb_tests::{
    agent::Agent,
    probe::{Held, HeldUdp, UdpAnswer},
    two_nodes::{
        Bed, CLIENT, CLIENT6, EXTERNAL_IP6, NODE1, NODE1_6, NODE2_6, NodeBed, P2_6, addr, answers,
        dual_stack, node_objects, node_port_svc, p1, p1_6, p2, p2_6, slice, slice6,
    },
};

/// `cluster`'s NodePort (dual-stack, eTP Cluster, an endpoint on each node
/// in each family), also on [`EXTERNAL_IP6`] port 80 and 53.
const CLUSTER: u16 = 30080;
/// `local`'s NodePort (dual-stack, eTP Local, an endpoint on each node).
const LOCAL: u16 = 30081;
/// `empty`'s NodePort (dual-stack, no endpoints).
const EMPTY: u16 = 30082;
/// `lonely`'s NodePort (IPv6, eTP Local, its one endpoint on node-1).
const LONELY: u16 = 30085;
/// `remote`'s NodePort (IPv6, its one endpoint p2 on node-2): every flow
/// through node-1 is SNATed.
const REMOTE: u16 = 30087;
/// `guarded`'s load-balancer IP: its source range admits the client.
const GUARDED: &str = "2001:db8:e::20";
/// `shut`'s load-balancer IP: its source range does not.
const SHUT: &str = "2001:db8:e::21";

/// The Nodes (an InternalIP of each family) and the Services above, each
/// with TCP port 80 (target 8080) and UDP port 53 (target 5353).
fn manifest() -> String {
    let [node1, node2] = node_objects();
    let v6 = |name: &str, ip: &str, node_port: u16| {
        node_port_svc(name, ip, node_port).ip_families(&["IPv6"])
    };
    let lb = |name: &str, ip: &str, node_port: u16, vip: &str, range: &str| {
        v6(name, ip, node_port)
            .type_("LoadBalancer")
            .lb_ingress(vip, Some("VIP"))
            .source_ranges(&[range])
    };
    yaml([
        node1,
        node2,
        dual_stack(
            node_port_svc("cluster", "10.96.61.1", CLUSTER),
            "fd00:96::61:1",
        )
        .external_ips(&[EXTERNAL_IP6])
        .into(),
        slice("cluster", vec![p1(), p2()]).into(),
        slice6("cluster", vec![p1_6(), p2_6()]).into(),
        dual_stack(node_port_svc("local", "10.96.61.2", LOCAL), "fd00:96::61:2")
            .external_traffic_policy("Local")
            .into(),
        slice("local", vec![p1(), p2()]).into(),
        slice6("local", vec![p1_6(), p2_6()]).into(),
        dual_stack(node_port_svc("empty", "10.96.61.3", EMPTY), "fd00:96::61:3").into(),
        v6("lonely", "fd00:96::61:5", LONELY)
            .external_traffic_policy("Local")
            .into(),
        slice6("lonely", vec![p1_6()]).into(),
        v6("remote", "fd00:96::61:7", REMOTE).into(),
        slice6("remote", vec![p2_6()]).into(),
        lb(
            "guarded",
            "fd00:96::61:8",
            30088,
            GUARDED,
            "2001:db8:c::/64",
        )
        .into(),
        slice6("guarded", vec![p1_6(), p2_6()]).into(),
        lb("shut", "fd00:96::61:9", 30089, SHUT, "2001:db8:ff::/64").into(),
        slice6("shut", vec![p1_6(), p2_6()]).into(),
    ])
}

/// The bed with an agent on each node, both serving (each node's agent
/// programs its own node: wait for both, or the first datagrams through
/// node-2 race its tc programs' attach).
fn bed() -> anyhow::Result<(Bed, [Agent; 2])> {
    let bed = Bed::new(&manifest())?;
    let agents = [bed.agent(&bed.node1)?, bed.agent(&bed.node2)?];
    bed.wait_reachable(&addr(NODE1_6, REMOTE))?;
    bed.wait_reachable(&addr(NODE2_6, CLUSTER))?;
    Ok((bed, agents))
}

/// `<pod> from <address>` for each pair.
fn seen(pairs: &[(&str, &str)]) -> BTreeSet<String> {
    pairs
        .iter()
        .map(|(pod, from)| format!("{pod} from {from}"))
        .collect()
}

/// The answers to `n` TCP connections to `to`, each asking `from?`.
fn tcp_from(bed: &Bed, to: &str, n: u32) -> anyhow::Result<BTreeSet<String>> {
    let r = bed.client(&["tcp", "--to", to, "-n", &n.to_string(), "--from"])?;
    Ok(answers(&r, n, to).into_iter().map(str::to_owned).collect())
}

/// The answers to `sockets` unconnected UDP sockets, 3 requests each, to
/// `to`: every reply comes from `to`, and a socket (one flow) always gets
/// the same backend.
fn udp_from(bed: &Bed, to: &str, sockets: u32) -> anyhow::Result<BTreeSet<String>> {
    let mut got = BTreeSet::new();
    for _ in 0..sockets {
        let r = bed.client(&["udp", "--to", to, "-n", "3", "--from"])?;
        let one = answers(&r, 3, to);
        assert_eq!(one.len(), 1, "one backend per flow: {r:?}");
        got.extend(one.into_iter().map(str::to_owned));
    }
    Ok(got)
}

/// `node`'s datapath counters of `labels` (see `Stats::of`).
fn stat(node: &NodeBed, labels: &str) -> anyhow::Result<u64> {
    Ok(node.pins.stats()?.of(labels))
}

#[test]
fn a_dual_stack_node_port_reaches_both_pods_over_ipv6_with_snat_to_the_node_ipv6_address()
-> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    let before = stat(&bed.node1, "tc ipv6 new_flow")?;

    // eTP Cluster: both pods; the one on node-1 sees the client, the one on
    // node-2 sees node-1's IPv6 address (SNAT), and every answer comes back
    // from the NodePort the client connected to.
    let node1 = addr(NODE1_6, CLUSTER);
    let want = seen(&[("p1", CLIENT6), ("p2", NODE1_6)]);
    assert_eq!(tcp_from(&bed, &node1, 60)?, want);
    assert_eq!(udp_from(&bed, &node1, 16)?, want);
    // Through node-2, the mirror image.
    let node2 = addr(NODE2_6, CLUSTER);
    let want2 = seen(&[("p1", NODE2_6), ("p2", CLIENT6)]);
    assert_eq!(tcp_from(&bed, &node2, 60)?, want2);
    // The same Service over IPv4, on the same node.
    let node1_v4 = addr(NODE1, CLUSTER);
    let want4 = seen(&[("p1", CLIENT), ("p2", NODE1)]);
    assert_eq!(tcp_from(&bed, &node1_v4, 60)?, want4);
    assert_eq!(udp_from(&bed, &node1_v4, 16)?, want4);

    // Counted as IPv6 flows, listed as IPv6 frontends seen from outside,
    // and a SNATed flow is listed with the client it stands for.
    assert!(stat(&bed.node1, "tc ipv6 new_flow")? >= before + 60 + 16);
    let dump = bed.node1.pins.dump()?;
    for proto in ["TCP ", "UDP "] {
        assert!(
            dump.lines()
                .any(|l| l.starts_with(&format!("{proto} {node1} "))
                    && l.ends_with(" NodePort from-outside")),
            "{dump}"
        );
    }
    let ct = bed.node1.pins.conntrack()?;
    let snat = format!("[{P2_6}]:8080 -> [{NODE1_6}]:");
    assert!(
        ct.lines().any(|l| l.starts_with("TCP  ")
            && l.contains(&snat)
            && l.contains(&format!(" client [{CLIENT6}]:"))),
        "{ct}"
    );
    Ok(())
}

#[test]
fn external_traffic_policy_local_over_ipv6_keeps_the_client_address_and_drops_without_a_local_endpoint()
-> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    // Each node sends the client to its own pod only, which sees the
    // client's real address.
    for (node, pod) in [(NODE1_6, "p1"), (NODE2_6, "p2")] {
        let to = addr(node, LOCAL);
        let want = seen(&[(pod, CLIENT6)]);
        assert_eq!(tcp_from(&bed, &to, 20)?, want, "{to}");
        assert_eq!(udp_from(&bed, &to, 4)?, want, "{to}");
    }
    // `lonely` has its one endpoint on node-1: node-1 serves it, node-2
    // drops (the connection times out) and counts the drop.
    let want = seen(&[("p1", CLIENT6)]);
    assert_eq!(tcp_from(&bed, &addr(NODE1_6, LONELY), 5)?, want);
    let before = stat(&bed.node2, "tc ipv6 drop_no_local_endpoints")?;
    let r = bed.client(&["tcp", "--to", &addr(NODE2_6, LONELY), "-n", "1"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    assert_eq!(
        r.errors.get("TimedOut"),
        Some(&1),
        "dropped, not refused: {r:?}"
    );
    assert!(stat(&bed.node2, "tc ipv6 drop_no_local_endpoints")? > before);
    let dump = bed.node2.pins.dump()?;
    let lonely = addr(NODE2_6, LONELY);
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("TCP  {lonely} "))
                && l.ends_with(" NodePort eTP=Local from-outside")),
        "{dump}"
    );
    Ok(())
}

#[test]
fn ipv6_external_and_load_balancer_ips_reach_the_pods_within_their_source_ranges()
-> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    // The router sends 2001:db8:e::/64 to node-1, which owns none of it:
    // only its tc programs answer there. eTP Cluster: p2 sees node-1.
    let both = seen(&[("p1", CLIENT6), ("p2", NODE1_6)]);
    let external = addr(EXTERNAL_IP6, 80);
    assert_eq!(tcp_from(&bed, &external, 60)?, both);
    let guarded = addr(GUARDED, 80);
    assert_eq!(tcp_from(&bed, &guarded, 40)?, both);

    // A range without the client: dropped, as kube-proxy's firewall drops
    // (the connect times out), and counted.
    let before = stat(&bed.node1, "tc ipv6 drop_source_range")?;
    let shut = addr(SHUT, 80);
    let r = bed.client(&["tcp", "--to", &shut, "-n", "1"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    assert_eq!(
        r.errors.get("TimedOut"),
        Some(&1),
        "dropped, not refused: {r:?}"
    );
    let r = bed.client(&["udp", "--to", &addr(SHUT, 53), "-n", "1", "--connected"])?;
    assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
    assert!(stat(&bed.node1, "tc ipv6 drop_source_range")? >= before + 2);
    let dump = bed.node1.pins.dump()?;
    for lb in [&guarded, &shut] {
        assert!(
            dump.lines().any(|l| l.starts_with(&format!("TCP  {lb} "))
                && l.ends_with(" LoadBalancer source-ranges from-outside")),
            "{dump}"
        );
    }
    assert!(
        dump.lines()
            .any(|l| l.starts_with(&format!("TCP  {external} "))
                && l.ends_with(" ExternalIP from-outside")),
        "{dump}"
    );
    Ok(())
}

#[test]
fn a_service_without_endpoints_rejects_ipv6_with_a_reset_and_port_unreachable() -> anyhow::Result<()>
{
    let (bed, _agents) = bed()?;
    for (node, host) in [(&bed.node1, NODE1_6), (&bed.node2, NODE2_6)] {
        let before = stat(node, "tc ipv6 refused_no_endpoints")?;
        let to = addr(host, EMPTY);
        // TCP: a reset, so refused at once (a drop would take the client's
        // 2 s connect timeout each).
        let r = bed.client(&["tcp", "--to", &to, "-n", "3"])?;
        assert_eq!(r.errors.get("ConnectionRefused"), Some(&3), "{r:?}");
        assert!(r.elapsed_ms < 1500, "refused at once: {r:?}");
        // UDP: ICMPv6 port unreachable, which the connected socket's recv
        // reports as ECONNREFUSED.
        let r = bed.client(&["udp", "--to", &to, "-n", "1", "--connected"])?;
        assert_eq!(r.errors.get("ConnectionRefused"), Some(&1), "{r:?}");
        let mut held = HeldUdp::open_in(&bed.nodes.ns("c"), None, &to)?;
        let answer = held.request()?;
        assert!(answer.is_error(libc::ECONNREFUSED), "{answer:?}");
        assert!(stat(node, "tc ipv6 refused_no_endpoints")? >= before + 5);
    }
    Ok(())
}

#[test]
fn udp_over_ipv6_is_answered_from_the_address_the_client_sent_to() -> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    // Unconnected sockets, so that a reply from any other address would be
    // received, and seen.
    for (to, want) in [
        (addr(NODE1_6, REMOTE), seen(&[("p2", NODE1_6)])),
        (addr(NODE1_6, LOCAL), seen(&[("p1", CLIENT6)])),
        (addr(NODE2_6, LOCAL), seen(&[("p2", CLIENT6)])),
        (addr(NODE1_6, LONELY), seen(&[("p1", CLIENT6)])),
        (
            addr(NODE2_6, CLUSTER),
            seen(&[("p1", NODE2_6), ("p2", CLIENT6)]),
        ),
        (
            addr(EXTERNAL_IP6, 53),
            seen(&[("p1", CLIENT6), ("p2", NODE1_6)]),
        ),
        (addr(GUARDED, 53), seen(&[("p1", CLIENT6), ("p2", NODE1_6)])),
    ] {
        let got = udp_from(&bed, &to, 12)?;
        assert!(got.is_subset(&want) && !got.is_empty(), "{to}: {got:?}");
        if want.len() == 2 {
            assert_eq!(got, want, "{to}: both backends over 12 flows");
        }
    }
    Ok(())
}

#[test]
fn packet_too_big_through_a_smaller_hop_reaches_the_ipv6_senders_behind_every_frontend()
-> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    // The router's way back to the client carries at most 1,280 bytes (the
    // IPv6 minimum), while every link is 1,500: the router's Packet Too
    // Big for the node's replies must reach the socket that sent them. And
    // node-1 drops what its conntrack cannot place, as many firewalls do.
    bed.exec(
        "r",
        &[
            "ip",
            "-6",
            "route",
            "replace",
            "2001:db8:c::/64",
            "dev",
            "eth0",
            "mtu",
            "1280",
            // The kernel's own route's metric: IPv6 routes are replaced
            // only with their metric (one without would add a route the
            // kernel's shadows).
            "metric",
            "256",
        ],
    )?;
    bed.exec(
        "n1",
        &[
            "ip6tables",
            "-A",
            "FORWARD",
            "-m",
            "conntrack",
            "--ctstate",
            "INVALID",
            "-j",
            "DROP",
        ],
    )?;
    for to in [
        addr(NODE1_6, REMOTE),
        addr(NODE1_6, LOCAL),
        addr(NODE1_6, CLUSTER),
        addr(EXTERNAL_IP6, 80),
        addr(GUARDED, 80),
    ] {
        let r = bed.client(&["tcp", "--to", &to, "-n", "4", "--download", "400000"])?;
        assert_eq!((r.ok(), r.failed()), (4, 0), "400 kB from {to}: {r:?}");
    }
    // The pods learned the path MTU from the translated Packet Too Big:
    // p1 towards the client it answered unSNATed, p2 towards node-1's
    // address, which its SNATed flows came from. Node-1 itself learned
    // nothing: no error reached its own stack (else it would have sent p1
    // Packet Too Big for its forwarding, untranslated errors or not).
    let route = |host: &str, towards: &str| bed.exec(host, &["ip", "-6", "route", "get", towards]);
    for (host, towards, learned) in [
        ("p1", CLIENT6, true),
        ("p2", NODE1_6, true),
        ("n1", CLIENT6, false),
    ] {
        let route = route(host, towards)?;
        assert_eq!(route.contains(" mtu 1280 "), learned, "{host}: {route}");
    }
    Ok(())
}

#[test]
fn packet_too_big_reaches_the_ipv6_senders_when_the_router_also_routes_between_the_nodes()
-> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    // IPv4's shape in `flows`: the router's ways to the client and to p2
    // carry at most 1,280 bytes (`mtu lock 1280`), every link 1,500, and
    // it routes between the nodes' pods, so that an error node-1 passes on
    // to p2 or to the client crosses it a second time.
    bed.route_pods_through_router()?;
    bed.narrow_way_to_client()?;
    bed.narrow_way_to_p2()?;
    for to in [
        addr(NODE1_6, REMOTE),
        addr(NODE1_6, LOCAL),
        addr(NODE1_6, CLUSTER),
    ] {
        let r = bed.client(&["tcp", "--to", &to, "-n", "2", "--download", "400000"])?;
        assert_eq!((r.ok(), r.failed()), (2, 0), "400 kB from {to}: {r:?}");
    }
    let to = addr(NODE1_6, REMOTE);
    let r = bed.client(&["tcp", "--to", &to, "-n", "2", "--size", "400000"])?;
    assert_eq!((r.ok(), r.failed()), (2, 0), "400 kB to {to}: {r:?}");
    Ok(())
}

#[test]
fn ipv6_datagrams_of_3000_bytes_are_answered_both_ways() -> anyhow::Result<()> {
    let (bed, _agents) = bed()?;
    for (to, pods) in [
        (addr(NODE1_6, REMOTE), &["p2"][..]),
        (addr(NODE1_6, LOCAL), &["p1"]),
        (addr(NODE2_6, CLUSTER), &["p1", "p2"]),
        (addr(EXTERNAL_IP6, 53), &["p1", "p2"]),
    ] {
        // Each socket is one flow: the later fragments of every datagram,
        // either way, follow their first.
        let mut got = BTreeSet::new();
        for _ in 0..8 {
            let r = bed.client(&["udp", "--to", &to, "-n", "5", "--size", "3000"])?;
            assert_eq!((r.ok(), r.failed()), (5, 0), "{to}: {r:?}");
            let peers: Vec<&String> = r.peers.keys().collect();
            assert_eq!(peers, [&to], "answered from the frontend: {r:?}");
            got.extend(r.replies.keys().cloned());
        }
        let want: BTreeSet<String> = pods.iter().map(|p| (*p).to_owned()).collect();
        assert!(got.is_subset(&want) && !got.is_empty(), "{to}: {got:?}");
    }
    for node in [&bed.node1, &bed.node2] {
        assert_eq!(stat(node, "tc ipv6 drop_fragment_unknown")?, 0);
    }
    Ok(())
}

#[test]
fn held_ipv6_flows_outlive_a_sigkill_of_the_agent_and_its_restart() -> anyhow::Result<()> {
    let (bed, [mut agent, _agent2]) = bed()?;
    let c = bed.nodes.ns("c");
    // TCP to p1 (eTP Local, unSNATed) and to p2 (SNATed), UDP to p2.
    let mut local = Held::open_in(&c, None, &addr(NODE1_6, LOCAL))?;
    let mut remote = Held::open_in(&c, None, &addr(NODE1_6, REMOTE))?;
    let mut udp = HeldUdp::open_in(&c, None, &addr(NODE1_6, REMOTE))?;
    let mut still_answer = |when: &str| -> anyhow::Result<()> {
        assert_eq!(local.request()?, "p1", "{when}");
        assert_eq!(remote.request()?, "p2", "{when}");
        assert_eq!(udp.request()?, UdpAnswer::Reply("p2".into()), "{when}");
        Ok(())
    };
    still_answer("before")?;
    agent.kill();
    still_answer("the programs outlive the agent")?;
    let agent = bed.agent(&bed.node1)?;
    still_answer("a new agent keeps the flows")?;
    let ct = bed.node1.pins.conntrack()?;
    assert!(
        ct.contains(&format!(" -> [{NODE1_6}]:{REMOTE} backend [{P2_6}]:8080")),
        "{ct}"
    );
    drop(agent);
    still_answer("after the second agent")?;
    Ok(())
}
