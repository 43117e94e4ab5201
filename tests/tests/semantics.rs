//! Service semantics at the socket hooks, with real sockets in network
//! namespaces and the real `lb-agent`: session affinity per client pod,
//! `internalTrafficPolicy: Local`, topology hints and this node's zone,
//! refusal of undefined ports, the listing, and stale UDP sockets. Needs
//! root; fails loudly without it.
//!
//! Addresses: VIPs 10.96.201-206.x, backends 10.42.201-206.x and
//! 10.245.0.0/16 (excluded), extra client pods 10.0.201-202.x.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use lb_fixtures::{Ep, Node, Object, Slice, Svc, json, yaml};
use lb_tests::{
    apiserver::ApiServer,
    netns,
    probe::{Report, UdpAnswer},
    scenario::{Bed, apply_yaml},
};

/// The agent's node name in these tests.
const NODE: &str = "node-1";
const AS_NODE: &str = "--hostname-override=node-1";

/// Backends `(id, ip)` answering on TCP 8080 and UDP 5353.
fn backends(bed: &mut Bed, pods: &[(&str, &str)]) -> anyhow::Result<()> {
    for (id, ip) in pods {
        bed.backend(id, ip.parse()?, &[8080], &[5353])?;
    }
    Ok(())
}

/// `n` client pods `<tag>0..` at `net.10..`, each its own namespace.
fn client_pods(bed: &mut Bed, tag: &str, net: [u8; 3], n: u8) -> anyhow::Result<Vec<String>> {
    (0..n)
        .map(|i| {
            let ip = Ipv4Addr::new(net[0], net[1], net[2], 10 + i);
            bed.client_pod(&format!("{tag}{i}"), ip)
        })
        .collect()
}

/// The one backend every request of `r` reached; fails unless all `n`
/// succeeded and reached the same one.
fn sticky(r: &Report, n: u32, who: &str) -> String {
    assert_eq!((r.ok(), r.failed()), (n, 0), "{who}: {r:?}");
    assert_eq!(r.replies.len(), 1, "{who} must stick to one backend: {r:?}");
    r.replies.keys().next().expect("one").clone()
}

/// The backends `r` reached; fails unless all `n` requests succeeded.
fn reached(r: &Report, n: u32) -> BTreeSet<&str> {
    assert_eq!((r.ok(), r.failed()), (n, 0), "{r:?}");
    r.replies.keys().map(String::as_str).collect()
}

/// Fails unless every one of `n` requests failed with error kind `kind`.
fn failed_with(r: &Report, kind: &str, n: u32) {
    assert_eq!(r.ok(), 0, "{r:?}");
    assert_eq!(r.errors, BTreeMap::from([(kind.to_owned(), n)]), "{r:?}");
}

/// The listing's line for frontend `addr` (`vip:port`, or `vip:*`).
fn dump_line<'a>(dump: &'a str, proto: &str, addr: &str) -> &'a str {
    dump.lines()
        .find(|l| {
            let mut f = l.split_whitespace();
            f.next() == Some(proto) && f.next() == Some(addr)
        })
        .unwrap_or_else(|| panic!("no {proto} {addr} in the listing:\n{dump}"))
}

/// A Service `name` at `vip` with `http` 80/TCP and `dns` 53/UDP, and
/// its slice with these endpoints (targets 8080 and 5353).
fn service(svc: Svc, name: &str, eps: Vec<Ep>) -> [Object; 2] {
    [
        svc.port("http", 80, "TCP").port("dns", 53, "UDP").into(),
        Slice::new("default", &format!("{name}-1"))
            .service(name)
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .endpoints(eps)
            .into(),
    ]
}

fn ready(ips: &[&str]) -> Vec<Ep> {
    ips.iter().map(|ip| Ep::new(ip).ready(true)).collect()
}

// ---- sessionAffinity: ClientIP ---------------------------------------------

const AFF_VIP: &str = "10.96.201.1";
const AFF_TO: &str = "10.96.201.1:80";
const AFF_PODS: [(&str, &str); 4] = [
    ("a1", "10.42.201.1"),
    ("a2", "10.42.201.2"),
    ("a3", "10.42.201.3"),
    ("a4", "10.42.201.4"),
];

fn affinity_manifest(vip: &str, timeout: i32, ips: &[&str]) -> String {
    let svc = Svc::new("default", "sticky")
        .cluster_ip(vip)
        .client_ip_affinity(Some(timeout));
    yaml(service(svc, "sticky", ready(ips)))
}

#[test]
fn client_ip_affinity_sticks_per_pod_and_moves_only_off_a_removed_backend() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    backends(&mut bed, &AFF_PODS)?;
    let ips: Vec<&str> = AFF_PODS.iter().map(|p| p.1).collect();
    bed.write_manifest(&affinity_manifest(AFF_VIP, 300, &ips))?;
    let pods = client_pods(&mut bed, "c", [10, 0, 201], 10)?;
    bed.start_agent(&[AS_NODE])?;

    // Each pod (network namespace) is one client: 20 connections, 20 new
    // sockets, one backend.
    let mut pinned = Vec::new();
    for (i, ns) in pods.iter().enumerate() {
        let r = bed.tcp_from(ns, AFF_TO, 20)?;
        assert_eq!(r.peers.keys().collect::<Vec<_>>(), [AFF_TO], "{r:?}");
        pinned.push(sticky(&r, 20, &format!("pod {i}")));
    }
    let chosen: BTreeSet<&String> = pinned.iter().collect();
    assert!(
        chosen.len() > 1,
        "10 pods over 4 backends all picked one ({chosen:?}): the pick must be per client, not per Service"
    );
    // Unconnected UDP sends are pinned too, on their own port's frontend.
    let r = bed.udp_from(&pods[0], "10.96.201.1:53", 20, false)?;
    sticky(&r, 20, "unconnected UDP");
    assert_eq!(r.peers.keys().collect::<Vec<_>>(), ["10.96.201.1:53"]);
    // Every connect after each client's first went to its remembered backend.
    assert_eq!(bed.pins.stats()?.of("affinity_hit"), 10 * 19 + 19);

    let dump = bed.pins.dump()?;
    for (proto, addr) in [("TCP", AFF_TO), ("UDP", "10.96.201.1:53")] {
        let line = dump_line(&dump, proto, addr);
        assert!(line.ends_with(" persistent 300"), "{line}\n{dump}");
    }

    // Remove the first pod's backend: it moves (and sticks again), and
    // never reaches the removed one; pods pinned elsewhere keep theirs
    // across the new revision.
    let removed = pinned[0].clone();
    let rest: Vec<&str> = AFF_PODS
        .iter()
        .filter(|p| p.0 != removed)
        .map(|p| p.1)
        .collect();
    bed.update(&affinity_manifest(AFF_VIP, 300, &rest))?;
    for (i, ns) in pods.iter().enumerate() {
        let now = sticky(&bed.tcp_from(ns, AFF_TO, 20)?, 20, &format!("pod {i}"));
        assert_ne!(now, removed, "pod {i} still reaches the removed backend");
        if pinned[i] != removed {
            assert_eq!(
                now, pinned[i],
                "pod {i} lost its backend to another's removal"
            );
        }
    }
    Ok(())
}

#[test]
fn client_ip_affinity_expires_after_its_timeout() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    let pods = [
        ("e1", "10.42.202.1"),
        ("e2", "10.42.202.2"),
        ("e3", "10.42.202.3"),
        ("e4", "10.42.202.4"),
    ];
    backends(&mut bed, &pods)?;
    let ips: Vec<&str> = pods.iter().map(|p| p.1).collect();
    bed.write_manifest(&affinity_manifest("10.96.202.1", 2, &ips))?;
    let clients = client_pods(&mut bed, "x", [10, 0, 202], 8)?;
    bed.start_agent(&[AS_NODE])?;
    let to = "10.96.202.1:80";
    let dump = bed.pins.dump()?;
    assert!(
        dump_line(&dump, "TCP", to).ends_with(" persistent 2"),
        "{dump}"
    );

    let round = |bed: &Bed| -> anyhow::Result<Vec<String>> {
        clients
            .iter()
            .map(|ns| Ok(sticky(&bed.tcp_from(ns, to, 5)?, 5, ns)))
            .collect()
    };
    // Idle longer than the timeout, a client picks afresh: with 8 pods and
    // 4 backends, some pod lands elsewhere (all stay: (1/4)^8 per round).
    let mut before = round(&bed)?;
    let mut moved = 0;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_secs(3));
        let after = round(&bed)?;
        moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        if moved > 0 {
            break;
        }
        before = after;
    }
    assert!(moved > 0, "no client re-picked after its affinity expired");
    Ok(())
}

// ---- internalTrafficPolicy: Local -------------------------------------------

fn on(ip: &str, node: &str) -> Ep {
    Ep::new(ip).ready(true).node(node)
}

fn itp_manifest(remote_only_node: &str) -> String {
    let local = |name: &str, vip: &str| {
        Svc::new("default", name)
            .cluster_ip(vip)
            .internal_traffic_policy("Local")
    };
    yaml(
        [
            service(
                local("mixed", "10.96.203.1"),
                "mixed",
                vec![
                    on("10.42.203.1", NODE),
                    on("10.42.203.2", NODE),
                    on("10.42.203.3", "node-2"),
                    on("10.42.203.4", "node-2"),
                ],
            ),
            service(
                local("elsewhere", "10.96.203.2"),
                "elsewhere",
                vec![
                    on("10.42.203.3", remote_only_node),
                    on("10.42.203.4", "node-2"),
                ],
            ),
            service(local("none", "10.96.203.3"), "none", Vec::new()),
        ]
        .into_iter()
        .flatten(),
    )
}

#[test]
fn internal_traffic_policy_local_uses_only_this_nodes_endpoints_or_fails_fast() -> anyhow::Result<()>
{
    let mut bed = Bed::new()?;
    backends(
        &mut bed,
        &[
            ("l1", "10.42.203.1"),
            ("l2", "10.42.203.2"),
            ("r3", "10.42.203.3"),
            ("r4", "10.42.203.4"),
        ],
    )?;
    bed.write_manifest(&itp_manifest("node-2"))?;
    bed.start_agent(&[AS_NODE])?;

    // Local endpoints exist: only they are used, both of them.
    let local = BTreeSet::from(["l1", "l2"]);
    assert_eq!(reached(&bed.tcp("10.96.203.1:80", 60)?, 60), local);
    assert_eq!(reached(&bed.udp("10.96.203.1:53", 60, false)?, 60), local);

    // Endpoints, none on this node: EHOSTUNREACH at once, for connect(),
    // unconnected sendto() and UDP connect() alike.
    let r = bed.tcp("10.96.203.2:80", 3)?;
    failed_with(&r, "HostUnreachable", 3);
    let r = bed.udp("10.96.203.2:53", 3, false)?;
    failed_with(&r, "HostUnreachable", 3);
    let r = bed.udp("10.96.203.2:53", 1, true)?;
    failed_with(&r, "HostUnreachable", 1);
    // No endpoint at all: ECONNREFUSED, as without the policy.
    let r = bed.tcp("10.96.203.3:80", 3)?;
    failed_with(&r, "ConnectionRefused", 3);
    let r = bed.udp("10.96.203.3:53", 3, false)?;
    failed_with(&r, "ConnectionRefused", 3);

    let stats = bed.pins.stats()?;
    assert_eq!(stats.of("refused_no_local_endpoints"), 7, "{stats:?}");
    assert_eq!(stats.of("refused_no_endpoints"), 6, "{stats:?}");
    let dump = bed.pins.dump()?;
    let line = dump_line(&dump, "TCP", "10.96.203.1:80");
    assert!(
        line.contains(" random ") && line.ends_with(" local"),
        "{line}"
    );
    let line = dump_line(&dump, "UDP", "10.96.203.2:53");
    assert!(
        line.contains(" unreachable ") && line.ends_with(" local"),
        "{line}"
    );

    // One of `elsewhere`'s endpoints moves to this node: it takes the traffic.
    bed.update(&itp_manifest(NODE))?;
    assert_eq!(
        reached(&bed.tcp("10.96.203.2:80", 20)?, 20),
        BTreeSet::from(["r3"])
    );
    Ok(())
}

// ---- Topology hints ---------------------------------------------------------

/// The pods behind `zoned` (za*, zb*) and `pinned` (n*).
const HINTED_PODS: [(&str, &str); 7] = [
    ("za1", "10.42.204.1"),
    ("za2", "10.42.204.2"),
    ("zb1", "10.42.204.3"),
    ("zb2", "10.42.204.4"),
    ("n1", "10.42.204.5"),
    ("n2", "10.42.204.6"),
    ("n3", "10.42.204.7"),
];

/// `zoned` (10.96.204.1) with two endpoints hinted for each of zone-a and
/// zone-b; `pinned` (10.96.204.2) hinted for nodes; this node's Node if
/// `zone` is given.
fn hints_manifest(zone: Option<&str>) -> String {
    let hinted = |ip: &str, zone: &str| Ep::new(ip).ready(true).zone(zone).hint_zone(zone);
    let for_node = |ip: &str, node: &str| Ep::new(ip).ready(true).node(node).hint_node(node);
    let mut objects: Vec<Object> = [
        service(
            Svc::new("default", "zoned").cluster_ip("10.96.204.1"),
            "zoned",
            vec![
                hinted("10.42.204.1", "zone-a"),
                hinted("10.42.204.2", "zone-a"),
                hinted("10.42.204.3", "zone-b"),
                hinted("10.42.204.4", "zone-b"),
            ],
        ),
        service(
            Svc::new("default", "pinned").cluster_ip("10.96.204.2"),
            "pinned",
            vec![
                for_node("10.42.204.5", NODE),
                for_node("10.42.204.6", "node-2"),
                for_node("10.42.204.7", "node-3"),
            ],
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(zone) = zone {
        objects.push(Node::new(NODE).zone(zone).into());
        // Another node's Node is not this node's zone.
        objects.push(Node::new("node-2").zone("zone-c").into());
    }
    yaml(objects)
}

#[test]
fn topology_hints_follow_this_nodes_zone_and_node_hints() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    backends(&mut bed, &HINTED_PODS)?;
    let to = "10.96.204.1:80";
    // No Node in the file: the node has no zone, which no hint matches, so
    // the hints are ignored.
    bed.write_manifest(&hints_manifest(None))?;
    bed.start_agent(&[AS_NODE])?;
    assert_eq!(
        reached(&bed.tcp(to, 80)?, 80),
        BTreeSet::from(["za1", "za2", "zb1", "zb2"])
    );
    // Node hints naming this node win, in any zone.
    assert_eq!(
        reached(&bed.tcp("10.96.204.2:80", 20)?, 20),
        BTreeSet::from(["n1"])
    );

    bed.update(&hints_manifest(Some("zone-a")))?;
    assert_eq!(
        reached(&bed.tcp(to, 60)?, 60),
        BTreeSet::from(["za1", "za2"])
    );
    assert_eq!(
        reached(&bed.udp("10.96.204.1:53", 60, false)?, 60),
        BTreeSet::from(["za1", "za2"])
    );

    // The node's zone label changes under traffic: no connection fails,
    // and traffic moves to the other zone.
    let churn = bed.churn(to)?;
    std::thread::sleep(Duration::from_secs(1));
    bed.update(&hints_manifest(Some("zone-b")))?;
    std::thread::sleep(Duration::from_secs(1));
    let r = churn.finish()?;
    assert_eq!(r.failed(), 0, "{r:?}");
    assert!(
        r.replies.contains_key("za1") || r.replies.contains_key("za2"),
        "{r:?}"
    );
    assert!(
        r.replies.contains_key("zb1") || r.replies.contains_key("zb2"),
        "{r:?}"
    );
    assert_eq!(
        reached(&bed.tcp(to, 60)?, 60),
        BTreeSet::from(["zb1", "zb2"])
    );
    assert_eq!(
        reached(&bed.tcp("10.96.204.2:80", 20)?, 20),
        BTreeSet::from(["n1"])
    );
    Ok(())
}

#[test]
fn the_zone_label_changes_in_the_apiserver_under_traffic() -> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    backends(&mut bed, &HINTED_PODS)?;
    let to = "10.96.204.1:80";
    let api = ApiServer::start()?;
    apply_yaml(&api, &hints_manifest(Some("zone-a")))?;
    bed.start_agent_kube(&api, &[])?;
    // The first sync waited for the Node: its zone is there from the start.
    assert_eq!(
        reached(&bed.tcp(to, 40)?, 40),
        BTreeSet::from(["za1", "za2"])
    );

    let churn = bed.churn(to)?;
    std::thread::sleep(Duration::from_millis(500));
    api.apply(json(Node::new(NODE).zone("zone-b")))?;
    bed.until_reached(to, &["zb1", "zb2"])?;
    // Another node's zone is not ours.
    api.apply(json(Node::new("node-2").zone("zone-a")))?;
    // The label removed: no zone, no hint matches, every endpoint serves.
    api.apply(json(Node::new(NODE)))?;
    bed.until_reached(to, &["za1", "za2", "zb1", "zb2"])?;
    let r = churn.finish()?;
    assert_eq!(r.failed(), 0, "{r:?}");
    for zone in [["za1", "za2"], ["zb1", "zb2"]] {
        assert!(zone.iter().any(|p| r.replies.contains_key(*p)), "{r:?}");
    }
    Ok(())
}

// ---- Ports a Service does not define ----------------------------------------

#[test]
fn unknown_port_or_protocol_on_a_cluster_ip_is_refused_and_pass_through_stays() -> anyhow::Result<()>
{
    let mut bed = Bed::new()?;
    bed.backend("w1", "10.42.205.1".parse()?, &[8080], &[])?;
    bed.backend("ovnx", "10.245.0.11".parse()?, &[80], &[])?;
    // The CNI owning 10.245.0.0/16 balances service-x itself.
    netns::foreign_cni_dnat(bed.topo.hub(), "10.96.205.2", 10001, "10.245.0.11:80")?;
    bed.write_manifest(&yaml([
        Object::from(
            Svc::new("default", "tcp-only")
                .cluster_ip("10.96.205.1")
                .port("http", 80, "TCP"),
        ),
        Slice::new("default", "tcp-only-1")
            .service("tcp-only")
            .port("http", 8080, "TCP")
            .ready(&["10.42.205.1"])
            .into(),
        Svc::new("ovn-poc", "service-x")
            .cluster_ip("10.96.205.2")
            .port("", 10001, "TCP")
            .into(),
        Slice::new("ovn-poc", "service-x-1")
            .service("service-x")
            .port("", 80, "TCP")
            .ready(&["10.245.0.11"])
            .into(),
    ]))?;
    bed.start_agent(&[AS_NODE, "--exclude-cluster-cidr=10.245.0.0/16"])?;

    // Another port, or the same port over another protocol: refused at
    // once (it used to leave the node untranslated).
    let r = bed.tcp("10.96.205.1:81", 3)?;
    failed_with(&r, "ConnectionRefused", 3);
    let r = bed.udp("10.96.205.1:80", 2, false)?;
    failed_with(&r, "ConnectionRefused", 2);
    let r = bed.udp("10.96.205.1:80", 1, true)?;
    failed_with(&r, "ConnectionRefused", 1);
    assert_eq!(
        reached(&bed.tcp("10.96.205.1:80", 10)?, 10),
        BTreeSet::from(["w1"])
    );
    let stats = bed.pins.stats()?;
    assert_eq!(stats.of("refused_unknown_port"), 6, "{stats:?}");
    assert_eq!(stats.of("refused_no_endpoints"), 0, "{stats:?}");
    let dump = bed.pins.dump()?;
    let line = dump_line(&dump, "ANY", "10.96.205.1:*");
    assert!(line.contains(" reject "), "{line}");

    // A Service whose endpoints are all excluded passes through, on its
    // port and on the others: its address belongs to the other CNI.
    let r = bed.tcp("10.96.205.2:10001", 5)?;
    assert_eq!(r.replies, BTreeMap::from([("ovnx".into(), 5)]), "{r:?}");
    assert_eq!(netns::foreign_cni_hits(bed.topo.hub())?, 5);
    // Untranslated: the hub has no route for it.
    failed_with(&bed.tcp("10.96.205.2:10002", 1)?, "NetworkUnreachable", 1);
    assert_eq!(bed.pins.stats()?.of("refused_unknown_port"), 6);
    assert!(!bed.pins.dump()?.contains("10.96.205.2"), "{dump}");
    Ok(())
}

// ---- Stale UDP sockets --------------------------------------------------------

fn udp_manifest(eps: Vec<Ep>) -> String {
    yaml([
        Object::from(
            Svc::new("default", "dgram")
                .cluster_ip("10.96.206.1")
                .port("dns", 53, "UDP"),
        ),
        Slice::new("default", "dgram-1")
            .service("dgram")
            .port("dns", 5353, "UDP")
            .endpoints(eps)
            .into(),
    ])
}

#[test]
fn stale_udp_sockets_to_a_removed_backend_are_aborted_and_serving_ones_kept() -> anyhow::Result<()>
{
    const TO: &str = "10.96.206.1:53";
    let mut bed = Bed::new()?;
    backends(
        &mut bed,
        &[
            ("u1", "10.42.206.1"),
            ("u2", "10.42.206.2"),
            ("u3", "10.42.206.3"),
        ],
    )?;
    bed.write_manifest(&udp_manifest(ready(&[
        "10.42.206.1",
        "10.42.206.2",
        "10.42.206.3",
    ])))?;
    bed.start_agent(&[AS_NODE])?;

    // One long-lived connected socket on u1 (to be removed), one on u2 (to
    // be terminating but still serving).
    let (mut gone, mut kept) = (None, None);
    for _ in 0..100 {
        let mut h = bed.hold_udp(TO)?;
        assert_eq!(h.peer, TO);
        match h.request()? {
            UdpAnswer::Reply(id) if id == "u1" && gone.is_none() => gone = Some(h),
            UdpAnswer::Reply(id) if id == "u2" && kept.is_none() => kept = Some(h),
            UdpAnswer::Reply(_) => {}
            e => panic!("{e:?}"),
        }
        if gone.is_some() && kept.is_some() {
            break;
        }
    }
    let (mut gone, mut kept) = (
        gone.expect("no socket landed on u1 in 100 tries"),
        kept.expect("no socket landed on u2 in 100 tries"),
    );

    bed.update(&udp_manifest(vec![
        Ep::new("10.42.206.2")
            .ready(false)
            .serving(true)
            .terminating(true),
        Ep::new("10.42.206.3").ready(true),
    ]))?;
    // The removed backend's pod still answers: only the agent can make the
    // socket fail.
    let written = Instant::now();
    let deadline = written + Duration::from_secs(1);
    let mut aborted = None;
    while aborted.is_none() {
        assert!(
            Instant::now() < deadline,
            "the socket to the removed backend was not aborted within 1 s"
        );
        match gone.request()? {
            UdpAnswer::Reply(id) => assert_eq!(id, "u1"),
            e => aborted = Some(e),
        }
        assert_eq!(
            kept.request()?,
            UdpAnswer::Reply("u2".into()),
            "a socket to a serving, terminating endpoint must keep working"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let aborted = aborted.expect("set");
    eprintln!(
        "the socket to the removed backend got {aborted:?} {:?} after the change was written",
        written.elapsed()
    );
    assert!(aborted.is_error(libc::ECONNABORTED), "{aborted:?}");

    gone.reconnect()?;
    assert_eq!(gone.peer, TO);
    // Only u3 is ready: new sockets never pick the terminating u2.
    assert_eq!(gone.request()?, UdpAnswer::Reply("u3".into()));
    for _ in 0..5 {
        assert_eq!(kept.request()?, UdpAnswer::Reply("u2".into()));
    }
    Ok(())
}

// ---- Endpoint weights -------------------------------------------------------

/// Service `weighted` (10.96.207.1, TCP 80 and UDP 53) with `w1` in a slice
/// of weight `w1_weight` (ours) and `w2` in one of weight 3 (Cilium's).
fn weights_manifest(w1_weight: &str) -> String {
    let slice = |name: &str, ip: &str| {
        Slice::new("default", name)
            .service("weighted")
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .endpoints(ready(&[ip]))
    };
    yaml([
        Object::from(
            Svc::new("default", "weighted")
                .cluster_ip("10.96.207.1")
                .port("http", 80, "TCP")
                .port("dns", 53, "UDP"),
        ),
        slice("weighted-1", "10.42.207.1")
            .annotation("lb-agent.io/weight", w1_weight)
            .into(),
        slice("weighted-2", "10.42.207.2")
            .annotation("service.cilium.io/weight", "3")
            .into(),
    ])
}

/// At the socket hooks, connects pick endpoints in proportion to their
/// slices' weights (1 : 3); weight 0 drains `w1`: no new connection or
/// UDP socket reaches it, while a TCP connection and a connected UDP
/// socket held to it go on (it stays serving: no stale-socket abort).
#[test]
fn weighted_endpoints_share_connects_and_a_drained_one_keeps_its_sockets() -> anyhow::Result<()> {
    const TO: &str = "10.96.207.1:80";
    const UDP_TO: &str = "10.96.207.1:53";
    let mut bed = Bed::new()?;
    backends(&mut bed, &[("w1", "10.42.207.1"), ("w2", "10.42.207.2")])?;
    bed.write_manifest(&weights_manifest("1"))?;
    bed.start_agent(&[AS_NODE])?;

    let r = bed.tcp(TO, 400)?;
    assert_eq!((r.ok(), r.failed()), (400, 0), "{r:?}");
    let w2 = f64::from(r.replies.get("w2").copied().unwrap_or(0)) / 400.0;
    eprintln!("weights 1 : 3 at connect: w2 took {w2:.3} of 400 connections");
    // Binomial at 0.75 over 400: the standard deviation is 0.022.
    assert!((0.65..=0.85).contains(&w2), "{r:?}");
    let dump = bed.pins.dump()?;
    let line = dump_line(&dump, "TCP", "10.96.207.1:80");
    assert!(line.contains(" random      4 "), "{dump}");
    assert!(dump.contains(" weight 3 (75.0%)"), "{dump}");

    let mut tcp = None;
    for _ in 0..200 {
        let mut h = bed.hold(TO)?;
        if h.request()? == "w1" {
            tcp = Some(h);
            break;
        }
    }
    let mut tcp = tcp.expect("no connection landed on w1 in 200 tries");
    let mut udp = None;
    for _ in 0..200 {
        let mut h = bed.hold_udp(UDP_TO)?;
        if h.request()? == UdpAnswer::Reply("w1".into()) {
            udp = Some(h);
            break;
        }
    }
    let mut udp = udp.expect("no UDP socket landed on w1 in 200 tries");

    bed.update(&weights_manifest("0"))?;
    bed.until_reached(TO, &["w2"])?;
    assert_eq!(reached(&bed.tcp(TO, 100)?, 100), BTreeSet::from(["w2"]));
    let r = bed.udp(UDP_TO, 40, true)?;
    assert_eq!(reached(&r, 40), BTreeSet::from(["w2"]));
    // Past the stale-socket reaper's reaction time (its test: within 1 s).
    std::thread::sleep(Duration::from_millis(1500));
    for _ in 0..3 {
        assert_eq!(tcp.request()?, "w1", "the held connection after the drain");
        assert_eq!(
            udp.request()?,
            UdpAnswer::Reply("w1".into()),
            "the held UDP socket after the drain"
        );
    }
    Ok(())
}
