//! NodePorts, external IPs and LoadBalancer IPs reached from inside the
//! node, with real sockets in network namespaces and the real `lb-agent`:
//! kube-proxy short-circuits such traffic to the cluster endpoints, even
//! with `externalTrafficPolicy: Local`. Needs root; fails loudly without it.
//!
//! Addresses: VIP 10.96.207.1, backends 10.42.207.x, node addresses
//! 192.0.2.207 and .209, external IP 192.0.2.208, LB IPs 198.51.100.207-208.
//! None of them is routed out of the test's namespaces: a frontend that is
//! not intercepted is unreachable from the client (an ICMP error, or a
//! timeout once the router rate-limits them).

use std::collections::BTreeSet;

use lb_fixtures::{Ep, Node, Object, Slice, Svc, SvcPort, yaml};
use lb_tests::{probe::Report, scenario::Bed};

const NODE: &str = "node-1";
const NODE_PORT: i32 = 30207;

/// Node `node-1` with `address` as its InternalIP, and the LoadBalancer
/// Service `ext` (eTP Local, one endpoint here and one on `node-2`).
fn manifest(address: &str) -> String {
    let svc = Svc::new("default", "ext")
        .type_("LoadBalancer")
        .cluster_ip("10.96.207.1")
        .external_ips(&["192.0.2.208"])
        .lb_ingress("198.51.100.207", Some("VIP"))
        .lb_ingress("198.51.100.208", Some("Proxy"))
        .external_traffic_policy("Local")
        .health_check_node_port(32207)
        .with_port(SvcPort::new("http", 80, "TCP").node_port(NODE_PORT))
        .with_port(SvcPort::new("dns", 53, "UDP").node_port(NODE_PORT));
    yaml([
        Object::from(Node::new(NODE).address("InternalIP", address)),
        svc.into(),
        Slice::new("default", "ext-1")
            .service("ext")
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .endpoints([
                Ep::new("10.42.207.1").ready(true).node(NODE),
                Ep::new("10.42.207.2").ready(true).node("node-2"),
            ])
            .into(),
    ])
}

/// The backends `r` reached; fails unless all `n` requests succeeded and
/// the client saw only `to` as its peer.
fn reached<'a>(r: &'a Report, n: u32, to: &str) -> BTreeSet<&'a str> {
    assert_eq!((r.ok(), r.failed()), (n, 0), "{to}: {r:?}");
    let peers: BTreeSet<&str> = r
        .peers
        .keys()
        .map(|p| p.trim_start_matches("getpeername "))
        .collect();
    assert_eq!(peers, BTreeSet::from([to]), "{to}: {r:?}");
    r.replies.keys().map(String::as_str).collect()
}

#[test]
fn node_ports_external_ips_and_lb_ips_reach_every_endpoint_from_inside_the_node()
-> anyhow::Result<()> {
    let mut bed = Bed::new()?;
    bed.backend("e1", "10.42.207.1".parse()?, &[8080], &[5353])?;
    bed.backend("e2", "10.42.207.2".parse()?, &[8080], &[5353])?;
    bed.write_manifest(&manifest("192.0.2.207"))?;
    bed.start_agent(&["--hostname-override=node-1"])?;
    let both = BTreeSet::from(["e1", "e2"]);

    // Cluster endpoints, whatever the external traffic policy: a pod's
    // connection is short-circuited, its source address kept.
    for to in [
        "192.0.2.207:30207",
        "192.0.2.208:80",
        "198.51.100.207:80",
        "10.96.207.1:80",
    ] {
        let r = bed.tcp(to, 60)?;
        assert_eq!(reached(&r, 60, to), both, "{to}");
        let udp_to = to.replace(":80", ":53");
        let r = bed.udp(&udp_to, 60, false)?;
        assert_eq!(reached(&r, 60, &udp_to), both, "{udp_to}");
    }

    // Not frontends: ipMode Proxy (its traffic goes to the load balancer),
    // the cluster IP on the node port (refused, as any undefined port of
    // a cluster IP), the node port on another address of the Service.
    let r = bed.tcp("198.51.100.208:80", 1)?;
    assert_eq!(r.failed(), 1, "ipMode Proxy is not intercepted: {r:?}");
    let r = bed.tcp("10.96.207.1:30207", 5)?;
    assert_eq!(r.errors.get("ConnectionRefused"), Some(&5), "{r:?}");
    let r = bed.tcp("192.0.2.208:30207", 1)?;
    assert_eq!(
        r.failed(),
        1,
        "node ports are on node addresses only: {r:?}"
    );

    let dump = bed.pins.dump()?;
    for fe in ["192.0.2.207:30207", "192.0.2.208:80", "198.51.100.207:80"] {
        assert!(dump.contains(fe), "{fe} not listed:\n{dump}");
    }
    assert!(!dump.contains("198.51.100.208"), "{dump}");

    // The node's address changes: its node ports follow.
    bed.update(&manifest("192.0.2.209"))?;
    let r = bed.tcp("192.0.2.209:30207", 40)?;
    assert_eq!(reached(&r, 40, "192.0.2.209:30207"), both);
    let r = bed.tcp("192.0.2.207:30207", 1)?;
    assert_eq!(
        r.failed(),
        1,
        "the old node address serves no node port: {r:?}"
    );
    Ok(())
}
