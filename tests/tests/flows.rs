//! The state the tc programs keep for traffic from outside the node, under
//! real traffic, with real sockets and an agent in each of two node
//! namespaces (`lb_tests::two_nodes`): path MTU through SNAT (also when the
//! router routes between the nodes, as kube-proxy's rules carry it),
//! fragments, SNAT ports under fresh-port queries, half-closed connections,
//! one-way streams, restarts that migrate the maps under held connections,
//! and terminating endpoints. Needs root; fails loudly without it.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use aya::maps::MapInfo;
use lb_common::{CT4, NAT4};
use lb_fixtures::{Ep, Svc, SvcPort, yaml};
use lb_tests::{
    kubeproxy::{self, NodePort, Proto, SvcSpec},
    layouts::{Frontend, layout},
    probe::{Held, HeldUdp, UdpAnswer, outside_bench},
    two_nodes::{
        Bed, CLIENT, EXTERNAL_IP, NODE1, NODE2, answers, node_objects, node_port_svc, p1, p2, slice,
    },
};

/// `remote`'s NodePort: its one endpoint, p2, is on node-2, so every flow
/// through node-1 is SNATed.
const REMOTE: u16 = 30087;
/// `local`'s NodePort (eTP Local, an endpoint on each node).
const LOCAL: u16 = 30081;
/// `cluster`'s NodePort (eTP Cluster, an endpoint on each node), also on
/// [`EXTERNAL_IP`] port 80.
const CLUSTER: u16 = 30080;
/// `guarded`'s load-balancer IP (its ranges admit the client).
const LB_IP: &str = "198.51.100.20";

/// The Nodes, and `remote`, `local`, `cluster` and `guarded`, each with TCP
/// port 80 (target 8080) and UDP port 53 (target 5353). `p2` is
/// `p2_endpoint` in every slice that has it (ready, or terminating, or
/// left out).
fn manifest(p2_endpoint: Option<Ep>) -> String {
    let p2 = || p2_endpoint.clone().into_iter().collect::<Vec<_>>();
    let both = || [vec![p1()], p2()].concat();
    let [node1, node2] = node_objects();
    yaml([
        node1,
        node2,
        node_port_svc("remote", "10.96.58.1", REMOTE).into(),
        slice("remote", p2()).into(),
        node_port_svc("local", "10.96.58.2", LOCAL)
            .external_traffic_policy("Local")
            .into(),
        slice("local", both()).into(),
        node_port_svc("cluster", "10.96.58.3", CLUSTER)
            .external_ips(&[EXTERNAL_IP])
            .into(),
        slice("cluster", both()).into(),
        Svc::new("default", "guarded")
            .type_("LoadBalancer")
            .cluster_ip("10.96.58.4")
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30088))
            .lb_ingress(LB_IP, Some("VIP"))
            .source_ranges(&["203.0.113.0/25"])
            .into(),
        slice("guarded", both()).into(),
    ])
}

fn ready_p2() -> Option<Ep> {
    Some(p2())
}

/// The bed with an agent on each node (`args` for both); they are
/// returned to be kept alive.
fn bed_with(args: &[&str]) -> anyhow::Result<(Bed, [lb_tests::agent::Agent; 2])> {
    let bed = Bed::new(&manifest(ready_p2()))?;
    let agents = [
        bed.agent_with(&bed.node1, args)?,
        bed.agent_with(&bed.node2, args)?,
    ];
    // Each node's agent programs its own node: wait for both, or a test's
    // first datagrams through node-2 race its tc programs' attach.
    bed.wait_reachable(&format!("{NODE1}:{REMOTE}"))?;
    bed.wait_reachable(&format!("{NODE2}:{CLUSTER}"))?;
    Ok((bed, agents))
}

#[test]
fn path_mtu_discovery_works_through_snat_and_every_kind_of_frontend() -> anyhow::Result<()> {
    let (bed, _agents) = bed_with(&[])?;
    // The router's way back to the client carries at most 1,280 bytes,
    // while every link is 1,500: the router's "fragmentation needed" for
    // the node's replies must reach the socket that sent them. And node-1
    // drops what its conntrack cannot place, as many firewalls do: an
    // error is let through only as RELATED to a flow it saw.
    bed.exec(
        "r",
        &[
            "ip",
            "route",
            "replace",
            "203.0.113.0/24",
            "dev",
            "eth0",
            "mtu",
            "1280",
        ],
    )?;
    bed.exec(
        "n1",
        &[
            "iptables",
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
        format!("{NODE1}:{REMOTE}"),
        format!("{NODE1}:{LOCAL}"),
        format!("{NODE1}:{CLUSTER}"),
        format!("{EXTERNAL_IP}:80"),
        format!("{LB_IP}:80"),
    ] {
        let r = bed.client(&["tcp", "--to", &to, "-n", "4", "--download", "400000"])?;
        assert_eq!((r.ok(), r.failed()), (4, 0), "400 kB from {to}: {r:?}");
    }
    Ok(())
}

/// The router's way back to the client and its way to p2 carry at most
/// 1,280 bytes (`mtu lock 1280`) while every link is 1,500, and it routes
/// between the nodes' pods too, so that an ICMP error node-1 passes on to
/// p2 or to the client crosses it a second time. Large downloads from
/// node-1's NodePorts (each 400 kB reply carried by path-MTU discovery
/// alone) and large uploads to p2 through them all complete: the
/// router's "fragmentation needed" reaches the socket that sent the
/// segment, through SNAT or not. Panics with the failed transfer.
fn path_mtu_through_a_routed_node_hop(bed: &Bed) -> anyhow::Result<()> {
    bed.route_pods_through_router()?;
    bed.narrow_way_to_client()?;
    bed.narrow_way_to_p2()?;
    // `remote` SNATed to p2, `local` to p1 unSNATed, `cluster` to either.
    for to in [
        format!("{NODE1}:{REMOTE}"),
        format!("{NODE1}:{LOCAL}"),
        format!("{NODE1}:{CLUSTER}"),
    ] {
        let r = bed.client(&["tcp", "--to", &to, "-n", "2", "--download", "400000"])?;
        assert_eq!((r.ok(), r.failed()), (2, 0), "400 kB from {to}: {r:?}");
    }
    let to = format!("{NODE1}:{REMOTE}");
    let r = bed.client(&["tcp", "--to", &to, "-n", "2", "--size", "400000"])?;
    assert_eq!((r.ok(), r.failed()), (2, 0), "400 kB to {to}: {r:?}");
    Ok(())
}

#[test]
fn path_mtu_discovery_works_through_snat_when_the_router_also_routes_between_the_nodes()
-> anyhow::Result<()> {
    let (bed, _agents) = bed_with(&[])?;
    path_mtu_through_a_routed_node_hop(&bed)
}

#[test]
fn kube_proxy_s_rules_carry_path_mtu_discovery_through_a_routed_node_hop() -> anyhow::Result<()> {
    // The behaviour to match: kube-proxy's rules in place of the agents,
    // for the same NodePorts.
    let bed = Bed::new(&manifest(ready_p2()))?;
    let (pod1, pod2) = (IpAddr::from([10, 42, 1, 2]), IpAddr::from([10, 42, 2, 2]));
    for (host, own) in [("n1", pod1), ("n2", pod2)] {
        let mut services = Vec::new();
        for (name, vip, node_port, endpoints) in [
            ("remote", [10, 96, 58, 1], REMOTE, vec![pod2]),
            ("local", [10, 96, 58, 2], LOCAL, vec![pod1, pod2]),
            ("cluster", [10, 96, 58, 3], CLUSTER, vec![pod1, pod2]),
        ] {
            services.push(SvcSpec {
                namespace: "default".into(),
                name: name.into(),
                port_name: "http".into(),
                vip: vip.into(),
                port: 80,
                proto: Proto::Tcp,
                endpoints: endpoints.iter().map(|&pod| (pod, 8080)).collect(),
                node_port: Some(if name == "local" {
                    NodePort::local(node_port, [own])
                } else {
                    NodePort::cluster(node_port)
                }),
            });
        }
        let rules = kubeproxy::iptables_restore(&services, "10.42.0.0/16");
        kubeproxy::load_iptables(&bed.nodes.ns(host), &rules)?;
    }
    bed.wait_reachable(&format!("{NODE1}:{REMOTE}"))?;
    path_mtu_through_a_routed_node_hop(&bed)
}

#[test]
fn datagrams_of_3000_bytes_are_answered_both_ways() -> anyhow::Result<()> {
    let (bed, _agents) = bed_with(&[])?;
    for (to, pods) in [
        (format!("{NODE1}:{REMOTE}"), &["p2"][..]),
        (format!("{NODE1}:{LOCAL}"), &["p1"]),
        (format!("{NODE2}:{CLUSTER}"), &["p1", "p2"]),
    ] {
        // Each socket is one flow: the later fragments of every datagram,
        // either way, follow their first.
        let mut seen = BTreeSet::new();
        for _ in 0..8 {
            let r = bed.client(&["udp", "--to", &to, "-n", "5", "--size", "3000"])?;
            assert_eq!((r.ok(), r.failed()), (5, 0), "{to}: {r:?}");
            let peers: Vec<&String> = r.peers.keys().collect();
            assert_eq!(peers, [&to], "answered from the frontend: {r:?}");
            seen.extend(r.replies.keys().cloned());
        }
        let want: BTreeSet<String> = pods.iter().map(|p| (*p).to_owned()).collect();
        assert!(seen.is_subset(&want) && !seen.is_empty(), "{to}: {seen:?}");
    }
    assert_eq!(
        bed.node1.pins.stats()?.of("tc ipv4 drop_fragment_unknown"),
        0
    );
    Ok(())
}

#[test]
fn fresh_port_queries_to_one_remote_backend_never_run_out_of_snat_ports() -> anyhow::Result<()> {
    let (bed, _agents) = bed_with(&[])?;
    // As a resolver asks: a new socket, so a new source port, per query;
    // every one SNATed to the same backend. Thousands within the UDP
    // timeout (the client cycles through its 28,232 ephemeral ports).
    let to = format!("{NODE1}:{REMOTE}");
    let c = bed.nodes.ns("c");
    for proto in ["bench-udp", "bench-tcp"] {
        let r = outside_bench(
            &c,
            &[
                proto,
                "--to",
                &to,
                "-c",
                "2",
                "--seconds",
                "6",
                "--socket-per-request",
            ],
        )?;
        eprintln!(
            "{proto}: {} flows, {:.0}/s, {} failed",
            r.ok, r.rate, r.failed
        );
        assert_eq!(r.failed, 0, "{proto}: {:?}", r.errors);
        assert!(
            r.ok > 5_000,
            "{proto}: more flows than the old 4,536 ports: {r:?}"
        );
        assert_eq!(r.replies.keys().collect::<Vec<_>>(), ["p2"]);
    }
    let stats = bed.node1.pins.stats()?;
    assert_eq!(stats.of("tc ipv4 drop_snat_exhausted"), 0, "{stats:?}");
    Ok(())
}

#[test]
fn a_half_closed_connection_is_answered_after_15_seconds_on_its_own_port() -> anyhow::Result<()> {
    // One SNAT port, so that a port given away too early would show; a
    // closed flow keeps it a second only, so that the check that the bed
    // is reachable does not hold it.
    let args = [
        "--snat-port-range=2000-2000",
        "--bpf-ct-timeout-regular-tcp-fin=1s",
    ];
    let (bed, _agents) = bed_with(&args)?;
    std::thread::sleep(Duration::from_secs(2));
    let remote = format!("{NODE1}:{REMOTE}");
    let bed = &bed;
    std::thread::scope(|s| -> anyhow::Result<()> {
        // The client sends its request and its FIN; the server answers 15 s
        // later, longer than a closed flow is kept.
        let half = [remote.clone(), format!("{NODE1}:{LOCAL}")].map(|to| {
            s.spawn(move || bed.client(&["tcp", "--to", &to, "--half-close-wait", "15"]))
        });
        std::thread::sleep(Duration::from_secs(3));
        // Meanwhile the half-closed flow still holds the one port: another
        // client's connection to the same backend finds none.
        let r = bed.client(&["tcp", "--to", &remote, "-n", "1"])?;
        assert_eq!((r.ok(), r.failed()), (0, 1), "{r:?}");
        for h in half {
            let r = h.join().expect("client thread")?;
            assert_eq!((r.ok(), r.failed()), (1, 0), "{r:?}");
        }
        Ok(())
    })?;
    assert!(bed.node1.pins.stats()?.of("tc ipv4 drop_snat_exhausted") > 0);
    Ok(())
}

#[test]
fn a_one_way_stream_keeps_its_snat_mapping_beyond_the_udp_timeout() -> anyhow::Result<()> {
    let (bed, _agents) = bed_with(&["--bpf-ct-timeout-regular-any=3s"])?;
    // statsd or syslog: datagrams one way only, for three UDP timeouts; the
    // backend must see the node's address all along (never the client's,
    // which it could not answer through the node).
    let to = format!("{NODE1}:{REMOTE}");
    let r = bed.client(&[
        "udp-push",
        "--to",
        &to,
        "--seconds",
        "9",
        "--interval-ms",
        "300",
        "--connected",
    ])?;
    let sent = r.sent.context("pushes sent")?;
    assert_eq!(r.failed(), 0, "{r:?}");
    let want = format!("p2 pushed {sent} from {NODE1}");
    assert_eq!(r.replies.keys().collect::<Vec<_>>(), [&want], "{r:?}");
    Ok(())
}

/// Flows from outside through node-1, held open: TCP to `remote` (SNATed
/// to p2) and `local` (p1), UDP to `remote`.
struct Held3 {
    tcp: [Held; 2],
    udp: HeldUdp,
}

impl Held3 {
    fn open(bed: &Bed) -> anyhow::Result<Self> {
        let c = bed.nodes.ns("c");
        let mut held = Self {
            tcp: [
                Held::open_in(&c, None, &format!("{NODE1}:{REMOTE}"))?,
                Held::open_in(&c, None, &format!("{NODE1}:{LOCAL}"))?,
            ],
            udp: HeldUdp::open_in(&c, None, &format!("{NODE1}:{REMOTE}"))?,
        };
        held.still_answer()?;
        Ok(held)
    }

    /// Each flow is answered by its backend, as when it was opened.
    fn still_answer(&mut self) -> anyhow::Result<()> {
        for (held, pod) in self.tcp.iter_mut().zip(["p2", "p1"]) {
            assert_eq!(held.request()?, pod, "the same backend, the same SNAT port");
        }
        assert_eq!(self.udp.request()?, UdpAnswer::Reply("p2".into()));
        Ok(())
    }
}

#[test]
fn a_restart_with_other_capacities_keeps_every_established_flow() -> anyhow::Result<()> {
    let (bed, [mut agent, _agent2]) = bed_with(&[])?;
    let mut held = Held3::open(&bed)?;

    // Another conntrack and SNAT capacity: new maps, filled and switched
    // to while the old programs serve; every flow carried over.
    let maps = bed.node1.pins.path().join("maps");
    let ct_before = MapInfo::from_pin(maps.join(CT4.pin))?.id();
    agent.kill();
    let _agent = bed.agent_with(
        &bed.node1,
        &["--bpf-ct-global-max=65536", "--bpf-nat-global-max=32768"],
    )?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while MapInfo::from_pin(maps.join(CT4.pin)).map_or(true, |m| m.max_entries() != 65_536)
        || bed.node1.pins.path().join("maps-next").exists()
    {
        if Instant::now() > deadline {
            bail!("the maps were not migrated");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_ne!(MapInfo::from_pin(maps.join(CT4.pin))?.id(), ct_before);
    assert_eq!(
        MapInfo::from_pin(maps.join(NAT4.pin))?.max_entries(),
        32_768
    );
    held.still_answer()?;
    let ct = bed.node1.pins.conntrack()?;
    assert!(
        ct.contains(&format!(" -> {NODE1}:{REMOTE} backend 10.42.2.2:8080")),
        "{ct}"
    );
    Ok(())
}

#[test]
fn a_terminating_endpoint_keeps_its_flows_while_new_ones_avoid_it() -> anyhow::Result<()> {
    let (bed, _agents) = bed_with(&[])?;
    let c = bed.nodes.ns("c");
    let to = format!("{NODE1}:{CLUSTER}");
    // A connection that landed on p2 (through node-1, so SNATed).
    let mut on_p2 = None;
    for _ in 0..40 {
        let mut held = Held::open_in(&c, None, &to)?;
        if held.request()? == "p2" {
            on_p2 = Some(held);
            break;
        }
    }
    let mut held = on_p2.context("no connection landed on p2 in 40 tries")?;

    // p2 terminates (still serving): new flows go to p1 only, its own flow
    // goes on.
    let terminating = Ep::new("10.42.2.2")
        .ready(false)
        .serving(true)
        .terminating(true)
        .node("node-2");
    bed.write_manifest(&manifest(Some(terminating)))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = bed.client(&["tcp", "--to", &to, "-n", "20", "--from"])?;
        if answers(&r, 20, &to) == BTreeSet::from([format!("p1 from {CLIENT}").as_str()]) {
            break;
        }
        if Instant::now() > deadline {
            bail!("new flows still reach p2: {r:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..3 {
        assert_eq!(held.request()?, "p2", "the terminating endpoint's flow");
        std::thread::sleep(Duration::from_millis(300));
    }

    // p2 goes: its flows are collected, and the next segment gets a reset
    // (from the node's stack, which has no such connection).
    bed.write_manifest(&manifest(None))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while held.request().is_ok() {
        if Instant::now() > deadline {
            bail!("a flow to a removed endpoint was kept");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let ct = bed.node1.pins.conntrack()?;
    assert!(!ct.contains("backend 10.42.2.2:8080"), "{ct}");
    Ok(())
}

#[test]
fn an_upgrade_from_layout_4_keeps_every_flow_from_outside() -> anyhow::Result<()> {
    let bed = Bed::new(&manifest(ready_p2()))?;
    let _agent2 = bed.agent(&bed.node2)?;
    // node-1 runs the first layout with tc programs, as its agent left it:
    // `remote` and `local`'s NodePorts seen from outside.
    let node1: std::net::Ipv4Addr = NODE1.parse()?;
    let (p1, p2) = ("10.42.1.2".parse()?, "10.42.2.2".parse()?);
    let frontend = |port, proto, backend, target| Frontend {
        vip: node1,
        port,
        proto,
        scope: 1,
        backends: vec![(backend, target)],
    };
    layout(4).install_on_node(
        bed.node1.pins.path(),
        bed.node1.cgroup.path(),
        &[
            frontend(REMOTE, 6, p2, 8080),
            frontend(REMOTE, 17, p2, 5353),
            frontend(LOCAL, 6, p1, 8080),
        ],
        &bed.nodes.ns("n1"),
        "eth0",
        node1,
    )?;
    let mut held = Held3::open(&bed)?;

    // Today's agent migrates: every conntrack and SNAT entry carried over
    // (the TCP state of each side merged), the old maps read meanwhile.
    let _agent1 = bed.agent(&bed.node1)?;
    let maps = bed.node1.pins.path().join("maps");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !maps.join(CT4.pin).exists() || bed.node1.pins.path().join("maps-next").exists() {
        if Instant::now() > deadline {
            bail!("no migration");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!maps.join("LB4_CT_V4").exists(), "the old maps are gone");
    for _ in 0..3 {
        held.still_answer()?;
        std::thread::sleep(Duration::from_millis(200));
    }
    let ct = bed.node1.pins.conntrack()?;
    assert!(ct.contains(&format!("TCP  IN  {CLIENT}:")), "{ct}");
    assert!(ct.contains(" established snat"), "{ct}");
    // New flows are the new programs'.
    let r = bed.client(&["tcp", "--to", &format!("{NODE1}:{REMOTE}"), "-n", "10"])?;
    assert_eq!((r.ok(), r.failed()), (10, 0), "{r:?}");
    Ok(())
}
