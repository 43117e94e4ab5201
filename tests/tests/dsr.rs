//! Direct server return from outside the node, with real sockets in the
//! two-node bed (`lb_tests::two_nodes`) and two real agents: a client's
//! flow to node-1's NodePort reaches the pod on node-2 with the client's
//! own address, and the pod's answer goes from node-2 straight to the
//! router, as node-1's NodePort. With Maglev too, a connection goes on
//! when the router moves it to the other node mid-flow. Needs root; fails
//! loudly without it.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    time::Duration,
};

use lb_fixtures::{Svc, SvcPort, yaml};
use lb_tests::{
    maps::{ExternalFrontend, maglev_tables},
    probe::Held,
    two_nodes::{
        Bed, CLIENT, CLIENT6, NODE1, NODE1_6, NODE2, NODE2_6, addr, answers, dual_stack,
        node_objects, node_port_svc, p1, p1_6, p2, p2_6, slice, slice6,
    },
};

/// `direct` (NodePort 30090, TCP and UDP) and `snatted` (30091, annotated
/// `lb-agent.io/forwarding-mode: snat`), each with its one endpoint, p2, on
/// node-2; `direct6` (30093), dual-stack, with p2's IPv6 address.
fn manifest() -> String {
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        node_port_svc("direct", "10.96.58.1", 30090).into(),
        slice("direct", vec![p2()]).into(),
        node_port_svc("snatted", "10.96.58.2", 30091)
            .annotation("lb-agent.io/forwarding-mode", "snat")
            .into(),
        slice("snatted", vec![p2()]).into(),
        dual_stack(
            node_port_svc("direct6", "10.96.58.5", 30093),
            "fd00:96::58:5",
        )
        .into(),
        slice6("direct6", vec![p2_6()]).into(),
    ])
}

/// Packets node-1's `eth0` received so far.
fn node1_rx(bed: &Bed) -> anyhow::Result<u64> {
    let text = bed.exec("n1", &["cat", "/sys/class/net/eth0/statistics/rx_packets"])?;
    Ok(text.trim().parse()?)
}

/// The one answer of `r` (all `n` requests answered, from `to`).
fn only(r: &lb_tests::probe::Report, n: u32, to: &str) -> String {
    let got = answers(r, n, to);
    assert_eq!(got.len(), 1, "{r:?}");
    got.into_iter().next().unwrap_or_default().to_owned()
}

#[test]
fn dsr_flows_reach_the_remote_pod_with_the_clients_address_and_answer_around_the_node()
-> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let args = ["--bpf-lb-mode=dsr"];
    let _agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    let direct = format!("{NODE1}:30090");
    let snatted = format!("{NODE1}:30091");
    bed.wait_reachable(&direct)?;
    let p2_sees_client = format!("p2 from {CLIENT}");

    // TCP and UDP: p2 sees the client itself, the client sees the NodePort.
    let r = bed.client(&["tcp", "--to", &direct, "-n", "20", "--from"])?;
    assert_eq!(only(&r, 20, &direct), p2_sees_client);
    let r = bed.client(&["udp", "--to", &direct, "-n", "20", "--from"])?;
    assert_eq!(only(&r, 20, &direct), p2_sees_client);

    // The answers do not pass node-1: of 40 datagrams each way, node-1
    // receives the requests only (and a little neighbour discovery); the
    // Service annotated `snat` gets its answers back through node-1.
    let before = node1_rx(&bed)?;
    let r = bed.client(&["udp", "--to", &direct, "-n", "40"])?;
    assert_eq!((r.ok(), r.failed()), (40, 0), "{r:?}");
    let dsr_rx = node1_rx(&bed)? - before;
    let before = node1_rx(&bed)?;
    let r = bed.client(&["udp", "--to", &snatted, "-n", "40", "--from"])?;
    assert_eq!(only(&r, 40, &snatted), format!("p2 from {NODE1}"));
    let snat_rx = node1_rx(&bed)? - before;
    assert!(
        dsr_rx < 60,
        "node-1 received {dsr_rx} packets for 40 requests"
    );
    assert!(snat_rx >= 80, "node-1 received {snat_rx} packets, SNATed");

    // Node-1 records the flows as DSR, no SNAT; node-2 holds their frontend.
    let ct1 = bed.node1.pins.conntrack()?;
    let ct2 = bed.node2.pins.conntrack()?;
    let restored = |proto: &str, port: u16| {
        ct2.lines().any(|l| {
            l.starts_with(&format!("{proto} OUT 10.42.2.2:{port} -> {CLIENT}:"))
                && l.contains(&format!(" frontend {direct} "))
                && l.ends_with(" dsr")
        })
    };
    assert!(restored("TCP ", 8080), "{ct2}");
    assert!(restored("UDP ", 5353), "{ct2}");
    let dsr_in = format!(" -> {direct} backend 10.42.2.2:");
    assert!(
        ct1.lines()
            .any(|l| l.contains(&dsr_in) && l.ends_with(" dsr")),
        "{ct1}"
    );
    assert!(
        !ct1.lines()
            .any(|l| l.contains(&dsr_in) && l.contains(" snat")),
        "{ct1}"
    );

    // Full-sized segments both ways: the client's carry the option. One
    // segment per packet from the client (no GSO, which would let the
    // option's bytes be taken off the segment size after the fact): its
    // 1500-byte packets fit node-1's egress only with the MSS lowered.
    bed.exec("c", &["ip", "link", "set", "eth0", "gso_max_segs", "1"])?;
    let r = bed.client(&["tcp", "--to", &direct, "-n", "3", "--size", "60000"])?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "a 60 kB upload: {r:?}");
    let r = bed.client(&["tcp", "--to", &direct, "-n", "3", "--download", "400000"])?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "a 400 kB download: {r:?}");
    Ok(())
}

#[test]
fn ipv6_dsr_flows_reach_the_remote_pod_with_the_clients_address_and_answer_around_the_node()
-> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let args = ["--bpf-lb-mode=dsr"];
    let _agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    let direct = addr(NODE1_6, 30093);
    bed.wait_reachable(&direct)?;
    let p2_sees_client = format!("p2 from {CLIENT6}");
    let r = bed.client(&["tcp", "--to", &direct, "-n", "20", "--from"])?;
    assert_eq!(only(&r, 20, &direct), p2_sees_client);
    let r = bed.client(&["udp", "--to", &direct, "-n", "20", "--from"])?;
    assert_eq!(only(&r, 20, &direct), p2_sees_client);

    // The answers do not pass node-1.
    let before = node1_rx(&bed)?;
    let r = bed.client(&["udp", "--to", &direct, "-n", "40"])?;
    assert_eq!((r.ok(), r.failed()), (40, 0), "{r:?}");
    let rx = node1_rx(&bed)? - before;
    assert!(rx < 60, "node-1 received {rx} packets for 40 requests");
    let ct2 = bed.node2.pins.conntrack()?;
    assert!(
        ct2.lines()
            .any(|l| l.contains(&format!(" frontend {direct} ")) && l.ends_with(" dsr")),
        "{ct2}"
    );

    // Full-sized segments both ways, one per packet from the client: its
    // 1500-byte packets fit node-1's egress with the 24 bytes only with the
    // MSS lowered.
    bed.exec("c", &["ip", "link", "set", "eth0", "gso_max_segs", "1"])?;
    let r = bed.client(&["tcp", "--to", &direct, "-n", "3", "--size", "60000"])?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "a 60 kB upload: {r:?}");
    let r = bed.client(&["tcp", "--to", &direct, "-n", "3", "--download", "400000"])?;
    assert_eq!((r.ok(), r.failed()), (3, 0), "a 400 kB download: {r:?}");
    Ok(())
}

#[test]
fn hybrid_mode_returns_tcp_directly_and_snats_udp() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest())?;
    let args = ["--bpf-lb-mode=hybrid"];
    let _agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    let direct = format!("{NODE1}:30090");
    bed.wait_reachable(&direct)?;
    let r = bed.client(&["tcp", "--to", &direct, "-n", "10", "--from"])?;
    assert_eq!(only(&r, 10, &direct), format!("p2 from {CLIENT}"));
    let r = bed.client(&["udp", "--to", &direct, "-n", "10", "--from"])?;
    assert_eq!(only(&r, 10, &direct), format!("p2 from {NODE1}"));
    let dump = bed.node1.pins.dump()?;
    let from_outside = |proto: &str| {
        dump.lines()
            .find(|l| l.starts_with(&format!("{proto} {direct} ")) && l.ends_with(" from-outside"))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(from_outside("TCP ").contains(" dsr"), "{dump}");
    assert!(!from_outside("UDP ").contains(" dsr"), "{dump}");
    Ok(())
}

/// `moving`'s load-balancer IPs, in the ranges the router sends to node-1.
const MOVING_IP: &str = "198.51.100.40";
const MOVING_IP6: &str = "2001:db8:e::40";

/// `moving`, dual-stack, with a load-balancer IP of each family
/// ([`MOVING_IP`], [`MOVING_IP6`]) and one endpoint on each node.
fn moving_manifest() -> String {
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        dual_stack(
            Svc::new("default", "moving")
                .type_("LoadBalancer")
                .cluster_ip("10.96.58.3")
                .with_port(SvcPort::new("http", 80, "TCP").node_port(30092))
                .lb_ingress(MOVING_IP, Some("VIP"))
                .lb_ingress(MOVING_IP6, Some("VIP")),
            "fd00:96::58:3",
        )
        .into(),
        slice("moving", vec![p1(), p2()]).into(),
        slice6("moving", vec![p1_6(), p2_6()]).into(),
    ])
}

/// Mid-flow failover: with Maglev and DSR on both nodes, held connections
/// to a load-balancer IP of each family (one endpoint on each node) go on,
/// each with its pod, while the router sends the IPs to node-2 and back to
/// node-1, as a router in front of the cluster does when its ECMP set
/// changes.
#[test]
fn with_maglev_and_dsr_connections_survive_the_router_moving_them_to_another_node()
-> anyhow::Result<()> {
    let bed = Bed::new(&moving_manifest())?;
    let args = ["--bpf-lb-algorithm=maglev", "--bpf-lb-mode=dsr"];
    let _agent1 = bed.agent_with(&bed.node1, &args)?;
    let _agent2 = bed.agent_with(&bed.node2, &args)?;
    let targets = [addr(MOVING_IP, 80), addr(MOVING_IP6, 80)];
    for to in &targets {
        bed.wait_reachable(to)?;
    }

    // 16 connections of each family through node-1, each answered by its
    // pod.
    let c = bed.nodes.ns("c");
    let mut held = Vec::new();
    for to in &targets {
        let mut pods = BTreeSet::new();
        for _ in 0..16 {
            let mut h = Held::open_in(&c, None, to)?;
            let pod = h.request()?;
            pods.insert(pod.clone());
            held.push((h, pod));
        }
        assert_eq!(pods.len(), 2, "16 flows to {to} reach both pods");
    }
    let taken_over = |node: &lb_tests::two_nodes::NodeBed| -> anyhow::Result<usize> {
        let ct = node.pins.conntrack()?;
        Ok(ct
            .lines()
            .filter(|l| {
                l.starts_with("TCP  IN ")
                    && targets
                        .iter()
                        .any(|to| l.contains(&format!(" -> {to} backend ")))
            })
            .count())
    };
    assert_eq!(taken_over(&bed.node2)?, 0, "node-2 has seen none of them");

    // The router sends the IPs to node-2, then back to node-1: every
    // request on every connection is answered by the pod it had.
    let mut requests = 0;
    for (via, via6, node) in [(NODE2, NODE2_6, &bed.node2), (NODE1, NODE1_6, &bed.node1)] {
        for (ip, via) in [
            (format!("{MOVING_IP}/32"), via),
            (format!("{MOVING_IP6}/128"), via6),
        ] {
            bed.exec("r", &["ip", "route", "replace", &ip, "via", via])?;
        }
        for _ in 0..3 {
            for (h, pod) in &mut held {
                assert_eq!(h.request()?, *pod, "through {via}");
                requests += 1;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(taken_over(node)? >= 32, "{}", node.pins.conntrack()?);
    }
    assert_eq!(requests, 192);
    // Counted: node-2 took each flow over once, and learned those to p2
    // from node-1's option before.
    let stats = bed.node2.pins.stats()?;
    let taken = stats.of("tc midflow_taken_over");
    assert_eq!(taken, 32, "{stats:?}");
    assert!(stats.of("tc dsr_restored") > 0, "{stats:?}");
    // New connections are answered too.
    for to in &targets {
        let r = bed.client(&["tcp", "--to", to, "-n", "20"])?;
        assert_eq!((r.ok(), r.failed()), (20, 0), "{r:?}");
    }
    Ok(())
}

/// `moving`'s Maglev tables on `node` (its load-balancer IPs', the same
/// addresses on both nodes), each as endpoint addresses.
fn moving_tables(
    node: &lb_tests::two_nodes::NodeBed,
) -> anyhow::Result<BTreeMap<ExternalFrontend, Vec<SocketAddr>>> {
    let mut tables = maglev_tables(&node.pins.path().join("maps"))?;
    tables.retain(|(addr, _), _| [MOVING_IP, MOVING_IP6].contains(&addr.ip().to_string().as_str()));
    Ok(tables)
}

/// How many entries of `a` and `b` differ, per frontend; a frontend that
/// only one of them has counts whole.
fn differing(
    a: &BTreeMap<ExternalFrontend, Vec<SocketAddr>>,
    b: &BTreeMap<ExternalFrontend, Vec<SocketAddr>>,
) -> BTreeMap<String, usize> {
    a.keys()
        .chain(b.keys())
        .map(|fe| {
            let (x, y) = (a.get(fe), b.get(fe));
            let n = match (x, y) {
                (Some(x), Some(y)) if x.len() == y.len() => {
                    x.iter().zip(y).filter(|(p, q)| p != q).count()
                }
                _ => x.map_or(0, Vec::len).max(y.map_or(0, Vec::len)),
            };
            (format!("{}/{}", fe.0, fe.1), n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// A new `--bpf-lb-maglev-hash-seed` reaches every Maglev table: node-1's
/// agent restarts with it on its pinned maps, node-2 reboots (its bpffs
/// empty) and its agent starts with it. Both nodes then hold the same
/// tables, so that connections opened through node-1 go on with their pod
/// when the router moves them to node-2. (An agent that kept the tables it
/// had built with the old seed would send some of them to the other pod,
/// which resets them.)
#[test]
fn after_a_new_maglev_seed_both_nodes_build_the_same_tables_and_connections_survive_a_move()
-> anyhow::Result<()> {
    let bed = Bed::new(&moving_manifest())?;
    let old = ["--bpf-lb-algorithm=maglev", "--bpf-lb-mode=dsr"];
    let targets = [addr(MOVING_IP, 80), addr(MOVING_IP6, 80)];
    {
        let _agent1 = bed.agent_with(&bed.node1, &old)?;
        let _agent2 = bed.agent_with(&bed.node2, &old)?;
        let before = moving_tables(&bed.node1)?;
        assert_eq!(before.len(), 2, "{before:?}");
        assert_eq!(
            differing(&before, &moving_tables(&bed.node2)?),
            BTreeMap::new()
        );
        // The agents stop (their programs and maps stay).
    }
    // Node-2 reboots: its programs and maps are gone.
    bed.node2.pins.clean_up()?;
    let new = [
        "--bpf-lb-algorithm=maglev",
        "--bpf-lb-mode=dsr",
        "--bpf-lb-maglev-hash-seed=AAECAwQFBgcICQoL",
    ];
    let _agent1 = bed.agent_with(&bed.node1, &new)?;
    let _agent2 = bed.agent_with(&bed.node2, &new)?;
    for to in &targets {
        bed.wait_reachable(to)?;
    }
    let tables1 = moving_tables(&bed.node1)?;
    let tables2 = moving_tables(&bed.node2)?;
    assert_eq!(tables2.len(), 2, "{tables2:?}");

    // 16 connections of each family through node-1, then the router sends
    // the IPs to node-2: each must be answered by the pod it had.
    let c = bed.nodes.ns("c");
    let mut held = Vec::new();
    for to in &targets {
        for _ in 0..16 {
            let mut h = Held::open_in(&c, None, to)?;
            let pod = h.request()?;
            held.push((to.clone(), h, pod));
        }
    }
    for (ip, via) in [
        (format!("{MOVING_IP}/32"), NODE2),
        (format!("{MOVING_IP6}/128"), NODE2_6),
    ] {
        bed.exec("r", &["ip", "route", "replace", &ip, "via", via])?;
    }
    let mut broken = BTreeMap::new();
    for _ in 0..3 {
        for (i, (to, h, pod)) in held.iter_mut().enumerate() {
            if broken.contains_key(&i) {
                continue;
            }
            let what = match h.request() {
                Ok(got) if got == *pod => continue,
                Ok(got) => format!("answered by {got}"),
                Err(e) => format!("{e:#}"),
            };
            broken.insert(i, format!("{to}, had {pod}: {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let differ = differing(&tables1, &tables2);
    assert!(
        differ.is_empty() && broken.is_empty(),
        "entries that differ between the nodes' tables: {differ:?}; \
         {} of 32 connections broken by the move: {broken:#?}",
        broken.len()
    );
    Ok(())
}
