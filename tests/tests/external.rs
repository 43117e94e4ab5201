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

use std::{
    collections::BTreeSet,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener},
    time::{Duration, Instant},
};

use lb_fixtures::{Ep, Node, Object, Slice, Svc, SvcPort, yaml};
use lb_tests::{
    http::{Answer, request},
    probe::Report,
    scenario::Bed,
};

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

    // Each listed with its kind and external policy.
    let dump = bed.pins.dump()?;
    for (fe, kind) in [
        ("TCP  192.0.2.207:30207 ", "NodePort"),
        ("UDP  192.0.2.207:30207 ", "NodePort"),
        ("TCP  192.0.2.208:80 ", "ExternalIP"),
        ("UDP  198.51.100.207:53 ", "LoadBalancer"),
    ] {
        let line = dump.lines().find(|l| l.starts_with(fe));
        let tail = format!(" {kind} eTP=Local");
        assert!(
            line.is_some_and(|l| l.ends_with(&tail)),
            "{fe}{tail} not listed:\n{dump}"
        );
    }
    let cluster_ip = dump.lines().find(|l| l.starts_with("TCP  10.96.207.1:80 "));
    assert!(
        cluster_ip.is_some_and(|l| l.ends_with(')')),
        "the cluster IP has no kind:\n{dump}"
    );
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

/// Dual-stack LoadBalancer `hc` (eTP Local, health-check port `HC_PORT`):
/// `v4_local` is its IPv4 endpoint on this node, with `v4_ready` as its
/// ready condition (it terminates when not ready); one IPv4 endpoint is on
/// `node-2`, and the IPv6 endpoint is here and ready. LoadBalancer `taken`
/// has its health check on `TAKEN_PORT`.
fn health_manifest(v4_ready: bool, with_hc: bool) -> String {
    let lb = |name: &str, ips: &[&str], hc: u16| {
        Svc::new("default", name)
            .type_("LoadBalancer")
            .cluster_ips(ips)
            .external_traffic_policy("Local")
            .health_check_node_port(hc.into())
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30211))
    };
    let local = Ep::new("10.42.211.1")
        .ready(v4_ready)
        .serving(true)
        .terminating(!v4_ready)
        .node(NODE);
    let mut objects: Vec<Object> = vec![
        Slice::new("default", "hc-v4")
            .service("hc")
            .port("http", 8080, "TCP")
            .endpoints([local, Ep::new("10.42.211.2").ready(true).node("node-2")])
            .into(),
        Slice::new("default", "hc-v6")
            .service("hc")
            .address_type("IPv6")
            .port("http", 8080, "TCP")
            .endpoints([Ep::new("fd00:42::211:1").ready(true).node(NODE)])
            .into(),
        lb("taken", &["10.96.211.2"], TAKEN_PORT).into(),
    ];
    if with_hc {
        objects.push(lb("hc", &["10.96.211.1", "fd00:96::211:1"], HC_PORT).into());
    }
    yaml(objects)
}

const HC_PORT: u16 = 32211;
const TAKEN_PORT: u16 = 32212;

/// Asks `addr` until it answers with `status` (the listeners follow the
/// syncs asynchronously), for at most 20 s.
fn answer_with(addr: SocketAddr, path: &str, status: u16) -> anyhow::Result<Answer> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let last = request(addr, "GET", path);
        match &last {
            Ok(a) if a.status == status => return last,
            _ if Instant::now() > deadline => {
                anyhow::bail!("{addr}{path} never answered {status}; last: {last:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[test]
fn health_check_node_ports_answer_with_the_local_ready_endpoints_of_each_family()
-> anyhow::Result<()> {
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, HC_PORT));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, HC_PORT));
    let mut bed = Bed::new()?;
    // Another process holds `taken`'s port until the agent has tried it.
    let squatter = TcpListener::bind((Ipv4Addr::UNSPECIFIED, TAKEN_PORT))?;
    bed.write_manifest(&health_manifest(true, true))?;
    bed.start_agent(&["--hostname-override=node-1"])?;

    // Each family counts its own endpoints on this node; any path and
    // method gets kube-proxy's answer.
    let a = answer_with(v4, "/", 200)?;
    assert_eq!(
        a.body,
        "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"hc\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}"
    );
    assert_eq!(a.header("x-load-balancing-endpoint-weight"), Some("1"));
    assert_eq!(a.header("content-type"), Some("application/json"));
    let a = request(v4, "POST", "/any/path")?;
    assert_eq!(
        (a.status, a.header("x-load-balancing-endpoint-weight")),
        (200, Some("1")),
        "{a:?}"
    );
    let a = answer_with(v6, "/healthz", 200)?;
    assert!(a.body.contains("\"localEndpoints\": 1,"), "{a:?}");

    // The port of `taken` is held: counted, then opened once it is free.
    bed.agent()
        .wait_metric("lbagent_service_health_check_listen_errors_total", 1.0)?;
    drop(squatter);
    let a = answer_with(
        SocketAddr::from((Ipv4Addr::LOCALHOST, TAKEN_PORT)),
        "/",
        503,
    )?;
    assert!(a.body.contains("\"name\": \"taken\""), "{a:?}");
    assert!(a.body.contains("\"localEndpoints\": 0,"), "{a:?}");
    assert!(
        request(
            SocketAddr::from((Ipv6Addr::LOCALHOST, TAKEN_PORT)),
            "GET",
            "/"
        )
        .is_err(),
        "an IPv4-only Service has no IPv6 listener"
    );
    // hc: 2 families, taken: 1.
    bed.agent()
        .wait_metric("lbagent_service_health_check_listeners", 3.0)?;

    // The local IPv4 endpoint terminates (still serving): the node drains
    // for IPv4 load balancers, not for IPv6 ones.
    bed.update(&health_manifest(false, true))?;
    let a = answer_with(v4, "/", 503)?;
    assert_eq!(a.header("x-load-balancing-endpoint-weight"), Some("0"));
    assert!(a.body.contains("\"serviceProxyHealthy\": true"), "{a:?}");
    assert_eq!(request(v6, "GET", "/")?.status, 200);

    // The Service is deleted: both of its listeners close.
    bed.update(&health_manifest(false, false))?;
    bed.agent()
        .wait_metric("lbagent_service_health_check_listeners", 1.0)?;
    for addr in [v4, v6] {
        let e = request(addr, "GET", "/").expect_err("closed");
        let refused = e.downcast_ref::<std::io::Error>().map(std::io::Error::kind);
        assert_eq!(
            refused,
            Some(std::io::ErrorKind::ConnectionRefused),
            "{addr}: {e:#}"
        );
    }
    Ok(())
}
