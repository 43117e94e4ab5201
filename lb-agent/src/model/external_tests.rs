//! External frontends (node ports, external IPs, LB VIPs) as the socket
//! hooks serve them: for pods and processes on this node, which kube-proxy
//! short-circuits to the cluster endpoints.

use std::collections::BTreeSet;

use lb_fixtures::{Ep, Slice, Svc, SvcPort};

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn fe(vip: &str, port: u16, proto: Proto) -> Frontend {
    Frontend {
        vip: ip(vip),
        port,
        proto,
        scope: Scope::Internal,
    }
}

fn be(ip_: &str, port: u16) -> Backend {
    Backend { ip: ip(ip_), port }
}

/// A cache for node `node-a` whose NodePorts are served on `node_port_ips`.
fn cache(node_port_ips: &[&str]) -> Cache {
    let node = NodeContext {
        node_port_ips: node_port_ips.iter().map(|s| ip(s)).collect(),
        ..NodeContext::named("node-a")
    };
    Cache::new(ExcludedCidrs::parse(["10.244.0.0/16"]).unwrap(), node)
}

/// The backends of `f`, or `None` when it is not programmed.
fn backends(c: &Cache, f: Frontend) -> Option<Vec<Backend>> {
    c.desired(&f).map(|t| t.backends.clone())
}

fn slice(name: &str, family: &str, eps: &[Ep]) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    Slice::new("default", name)
        .service("web")
        .address_type(family)
        .port("http", 8080, "TCP")
        .port("dns", 5353, "UDP")
        .endpoints(eps.iter().cloned())
        .build()
}

/// Dual-stack NodePort Service `web`: http 80/TCP on 30080, dns 53/UDP on 30053.
fn node_port_web() -> Svc {
    Svc::new("default", "web")
        .type_("NodePort")
        .cluster_ips(&["10.96.0.20", "fd00:96::20"])
        .with_port(SvcPort::new("http", 80, "TCP").node_port(30080))
        .with_port(SvcPort::new("dns", 53, "UDP").node_port(30053))
}

#[test]
fn node_ports_are_served_on_the_node_addresses_of_each_cluster_ip_family() {
    let mut c = cache(&["192.0.2.10", "2001:db8::10"]);
    c.apply_service(&node_port_web().build());
    c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.0.0.1")]));
    c.apply_slice(&slice("web-6", "IPv6", &[Ep::new("fd00::1")]));
    c.flush();
    let (v4, v6) = (vec![be("10.0.0.1", 8080)], vec![be("fd00::1", 8080)]);
    assert_eq!(backends(&c, fe("192.0.2.10", 30080, Proto::Tcp)), Some(v4));
    assert_eq!(
        backends(&c, fe("2001:db8::10", 30080, Proto::Tcp)),
        Some(v6)
    );
    assert_eq!(
        backends(&c, fe("192.0.2.10", 30053, Proto::Udp)),
        Some(vec![be("10.0.0.1", 5353)])
    );
    // A node port is a port of the node's address, not of the cluster IP.
    assert_eq!(backends(&c, fe("10.96.0.20", 30080, Proto::Tcp)), None);
    assert_eq!(backends(&c, fe("192.0.2.10", 80, Proto::Tcp)), None);
    // No wildcard: the node's other ports are not ours.
    assert_eq!(c.desired(&Frontend::wildcard(ip("192.0.2.10"))), None);

    // The node's addresses change: the old frontends go, the new come.
    c.set_node_port_ips(vec![ip("192.0.2.11")]);
    let flush = c.flush();
    for gone in [
        fe("192.0.2.10", 30080, Proto::Tcp),
        fe("2001:db8::10", 30080, Proto::Tcp),
    ] {
        assert!(flush.touched.contains(&gone), "{gone}");
        assert_eq!(backends(&c, gone), None);
    }
    assert!(flush.touched.contains(&fe("192.0.2.11", 30080, Proto::Tcp)));
    assert_eq!(
        backends(&c, fe("192.0.2.11", 30053, Proto::Udp)),
        Some(vec![be("10.0.0.1", 5353)])
    );
    assert!(
        flush.stale.contains(&fe("192.0.2.10", 30053, Proto::Udp)),
        "a UDP node port that went away has stale sockets"
    );
}

#[test]
fn a_family_without_a_cluster_ip_gets_no_external_frontends() {
    // kube-proxy skips a Service in a family it has no cluster IP of.
    let mut c = cache(&["192.0.2.10", "2001:db8::10"]);
    let svc = Svc::new("default", "web")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.20")
        .external_ips(&["192.0.2.50", "2001:db8::50"])
        .lb_ingress_ip("2001:db8::60")
        .with_port(SvcPort::new("http", 80, "TCP").node_port(30080));
    c.apply_service(&svc.build());
    c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.0.0.1")]));
    c.flush();
    let v6: Vec<Frontend> = c
        .programmed()
        .map(|(f, _, _)| *f)
        .filter(|f| f.vip.is_ipv6())
        .collect();
    assert!(v6.is_empty(), "{v6:?}");
    assert!(backends(&c, fe("192.0.2.50", 80, Proto::Tcp)).is_some());
}

#[test]
fn lb_vips_in_proxy_mode_or_behind_source_ranges_of_their_family_are_left_alone() {
    let mut c = cache(&[]);
    let svc = Svc::new("default", "web")
        .type_("LoadBalancer")
        .cluster_ips(&["10.96.0.20", "fd00:96::20"])
        .port("http", 80, "TCP")
        .lb_ingress("198.51.100.1", Some("VIP"))
        .lb_ingress("198.51.100.2", Some("Proxy"))
        .lb_ingress("2001:db8::1", None)
        .source_ranges(&[" 203.0.113.0/24"]);
    assert_eq!(c.apply_service(&svc.build()), Admission::Accepted);
    c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.0.0.1")]));
    c.apply_slice(&slice("web-6", "IPv6", &[Ep::new("fd00::1")]));
    let flush = c.flush();
    // Guarded by an IPv4 range: its firewall is not built at the socket
    // hooks, so the VIP is not intercepted there; from outside (tc) it is,
    // with the ranges of its family, and the state says to check them.
    assert_eq!(backends(&c, fe("198.51.100.1", 80, Proto::Tcp)), None);
    let outside = c
        .desired(&fe("198.51.100.1", 80, Proto::Tcp).external())
        .expect("served from outside");
    assert_eq!(outside.backends, vec![be("10.0.0.1", 8080)]);
    assert_eq!(
        outside.source_ranges,
        vec!["203.0.113.0/24".parse::<ipnet::IpNet>().unwrap()]
    );
    let open = c.desired(&fe("2001:db8::1", 80, Proto::Tcp).external());
    assert!(open.is_some_and(|t| t.source_ranges.is_empty()), "{open:?}");
    // ipMode Proxy: kube-proxy never intercepts it.
    assert_eq!(backends(&c, fe("198.51.100.2", 80, Proto::Tcp)), None);
    // No IPv6 range: the IPv6 VIP is open, so it is served.
    assert_eq!(
        backends(&c, fe("2001:db8::1", 80, Proto::Tcp)),
        Some(vec![be("fd00::1", 8080)])
    );
    let report = &flush.services[&ObjectRef::service("default", "web")];
    assert!(
        report
            .unsupported
            .contains(&Feature::LoadBalancerSourceRanges)
    );

    let bad = Svc::new("default", "web")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.20")
        .port("http", 80, "TCP")
        .source_ranges(&["203.0.113.0/33"]);
    assert!(matches!(
        c.apply_service(&bad.build()),
        Admission::Invalid(_)
    ));
}

/// `--bpf-lb-source-range-all-types`: the ranges of each family guard the
/// Service's node ports and external IPs from outside too; without it,
/// only its load-balancer IPs. From inside the node nothing changes.
#[test]
fn source_ranges_of_all_types_guard_node_ports_and_external_ips_from_outside_and_the_cluster_ip() {
    let ranges = |all_types: bool| {
        let node = NodeContext {
            node_port_ips: vec![ip("192.0.2.10"), ip("fd00:2::10")],
            source_range_all_types: all_types,
            ..NodeContext::named("node-a")
        };
        let mut c = Cache::new(ExcludedCidrs::default(), node);
        let svc = Svc::new("default", "web")
            .type_("LoadBalancer")
            .cluster_ips(&["10.96.0.20", "fd00:96::20"])
            .with_port(SvcPort::new("http", 80, "TCP").node_port(30080))
            .external_ips(&["198.51.100.9"])
            .lb_ingress("198.51.100.1", Some("VIP"))
            .source_ranges(&["203.0.113.0/24"]);
        c.apply_service(&svc.build());
        c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.0.0.1")]));
        c.apply_slice(&slice("web-6", "IPv6", &[Ep::new("fd00::1")]));
        c.flush();
        let of = |f: Frontend| c.desired(&f).expect("programmed").source_ranges.clone();
        [
            of(fe("198.51.100.1", 80, Proto::Tcp).external()),
            of(fe("192.0.2.10", 30080, Proto::Tcp).external()),
            of(fe("198.51.100.9", 80, Proto::Tcp).external()),
            // No IPv6 range: open.
            of(fe("fd00:2::10", 30080, Proto::Tcp).external()),
            // From inside: the cluster IP with all types (pods and the
            // node), nothing else.
            of(fe("192.0.2.10", 30080, Proto::Tcp)),
            of(fe("10.96.0.20", 80, Proto::Tcp)),
            of(fe("fd00:96::20", 80, Proto::Tcp)),
        ]
        .map(|r| !r.is_empty())
    };
    assert_eq!(
        ranges(false),
        [true, false, false, false, false, false, false]
    );
    assert_eq!(ranges(true), [true, true, true, false, false, true, false]);
}

#[test]
fn external_traffic_policy_local_still_sends_this_nodes_clients_to_every_endpoint() {
    let mut c = cache(&["192.0.2.10"]);
    let svc = Svc::new("default", "web")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.20")
        .external_ips(&["192.0.2.50"])
        .lb_ingress_ip("198.51.100.1")
        .external_traffic_policy("Local")
        .internal_traffic_policy("Local")
        .with_port(SvcPort::new("http", 80, "TCP").node_port(30080));
    c.apply_service(&svc.build());
    c.apply_slice(&slice(
        "web-4",
        "IPv4",
        &[
            Ep::new("10.0.0.1").node("node-b"),
            Ep::new("10.0.0.2").node("node-a"),
            Ep::new("10.0.0.3")
                .ready(false)
                .serving(true)
                .terminating(true),
        ],
    ));
    c.flush();
    let all = vec![be("10.0.0.1", 8080), be("10.0.0.2", 8080)];
    for f in [
        fe("192.0.2.50", 80, Proto::Tcp),
        fe("198.51.100.1", 80, Proto::Tcp),
        fe("192.0.2.10", 30080, Proto::Tcp),
    ] {
        let t = c
            .desired(&f)
            .unwrap_or_else(|| panic!("{f} not programmed"));
        assert_eq!(t.backends, all, "{f}");
        assert!(!t.local && !t.no_local_endpoints, "{f}: {t:?}");
    }
    // The cluster IP keeps its own policy.
    assert_eq!(
        backends(&c, fe("10.96.0.20", 80, Proto::Tcp)),
        Some(vec![be("10.0.0.2", 8080)])
    );
}

#[test]
fn external_addresses_refuse_without_endpoints_and_pass_through_when_all_are_excluded() {
    let mut c = cache(&["192.0.2.10"]);
    c.apply_service(&node_port_web().external_ips(&["192.0.2.50"]).build());
    c.flush();
    for f in [
        fe("192.0.2.50", 80, Proto::Tcp),
        fe("192.0.2.10", 30080, Proto::Tcp),
    ] {
        assert_eq!(backends(&c, f), Some(vec![]), "{f} refuses");
    }
    c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.244.1.1")]));
    let flush = c.flush();
    let passthrough: BTreeSet<Frontend> = flush
        .services
        .values()
        .flat_map(|r| r.passthrough.iter().copied())
        .collect();
    for f in [
        fe("192.0.2.50", 80, Proto::Tcp),
        fe("192.0.2.10", 30080, Proto::Tcp),
        fe("10.96.0.20", 80, Proto::Tcp),
    ] {
        assert_eq!(backends(&c, f), None, "{f} is left to the other CNI");
        assert!(passthrough.contains(&f), "{f}");
    }
}

/// Flows from outside pick backends by `--bpf-lb-algorithm`, unless the
/// Service's annotation (ours, else Cilium's) says otherwise; the socket
/// hooks' view of the same addresses is never Maglev.
#[test]
fn the_lb_algorithm_annotation_chooses_maglev_for_flows_from_outside() {
    use super::maglev::Algorithm;
    /// The default, the annotations, Maglev from outside, reported.
    type Case = (
        Algorithm,
        &'static [(&'static str, &'static str)],
        bool,
        bool,
    );
    let cases: [Case; 7] = [
        (Algorithm::Random, &[], false, false),
        (
            Algorithm::Random,
            &[(LB_ALGORITHM_ANNOTATION, "maglev")],
            true,
            false,
        ),
        (
            Algorithm::Random,
            &[(CILIUM_LB_ALGORITHM_ANNOTATION, "Maglev")],
            true,
            false,
        ),
        (
            Algorithm::Random,
            &[
                (LB_ALGORITHM_ANNOTATION, "random"),
                (CILIUM_LB_ALGORITHM_ANNOTATION, "maglev"),
            ],
            false,
            false,
        ),
        (Algorithm::Maglev, &[], true, false),
        (
            Algorithm::Maglev,
            &[(CILIUM_LB_ALGORITHM_ANNOTATION, "random")],
            false,
            false,
        ),
        (
            Algorithm::Maglev,
            &[(LB_ALGORITHM_ANNOTATION, "ring-hash")],
            true,
            true,
        ),
    ];
    for (default, annotations, maglev, unknown) in cases {
        let node = NodeContext {
            node_port_ips: vec![ip("192.0.2.10")],
            algorithm: default,
            ..NodeContext::named("node-a")
        };
        let mut c = Cache::new(ExcludedCidrs::default(), node);
        let svc = annotations
            .iter()
            .fold(node_port_web(), |s, (k, v)| s.annotation(k, v));
        c.apply_service(&svc.build());
        c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.0.0.1")]));
        let flush = c.flush();
        let what = format!("{default:?} {annotations:?}");
        let outside = c.desired(&fe("192.0.2.10", 30080, Proto::Tcp).external());
        assert_eq!(outside.map(|t| t.maglev), Some(maglev), "{what}");
        let inside = c.desired(&fe("192.0.2.10", 30080, Proto::Tcp));
        assert_eq!(inside.map(|t| t.maglev), Some(false), "{what}");
        let report = &flush.services[&ObjectRef::service("default", "web")];
        assert_eq!(
            report.unsupported.contains(&Feature::UnknownLbAlgorithm),
            unknown,
            "{what}"
        );
    }
}

/// Flows from outside go DSR by `--bpf-lb-mode` (hybrid: TCP only), unless
/// the Service's annotation (ours, else Cilium's) says otherwise; never for
/// the socket hooks' view, nor under `externalTrafficPolicy: Local`.
#[test]
fn the_forwarding_mode_annotation_chooses_dsr_for_flows_from_outside() {
    use super::forwarding::LbMode;
    /// The default, the annotations, eTP Local, DSR for TCP and UDP from
    /// outside, reported.
    type Case = (
        LbMode,
        &'static [(&'static str, &'static str)],
        bool,
        [bool; 2],
        bool,
    );
    let cases: [Case; 9] = [
        (LbMode::Snat, &[], false, [false, false], false),
        (LbMode::Dsr, &[], false, [true, true], false),
        (LbMode::Hybrid, &[], false, [true, false], false),
        (LbMode::Dsr, &[], true, [false, false], false),
        (
            LbMode::Snat,
            &[(FORWARDING_MODE_ANNOTATION, "dsr")],
            false,
            [true, true],
            false,
        ),
        (
            LbMode::Hybrid,
            &[(CILIUM_FORWARDING_MODE_ANNOTATION, "SNAT")],
            false,
            [false, false],
            false,
        ),
        (
            LbMode::Snat,
            &[
                (FORWARDING_MODE_ANNOTATION, "snat"),
                (CILIUM_FORWARDING_MODE_ANNOTATION, "dsr"),
            ],
            false,
            [false, false],
            false,
        ),
        (
            LbMode::Hybrid,
            &[(FORWARDING_MODE_ANNOTATION, "geneve")],
            false,
            [true, false],
            true,
        ),
        (
            LbMode::Snat,
            &[(CILIUM_FORWARDING_MODE_ANNOTATION, "dsr")],
            true,
            [false, false],
            false,
        ),
    ];
    for (default, annotations, local, [tcp, udp], unknown) in cases {
        let node = NodeContext {
            node_port_ips: vec![ip("192.0.2.10")],
            lb_mode: default,
            ..NodeContext::named("node-a")
        };
        let mut c = Cache::new(ExcludedCidrs::default(), node);
        let svc = annotations
            .iter()
            .fold(node_port_web(), |s, (k, v)| s.annotation(k, v));
        let svc = if local {
            svc.external_traffic_policy("Local")
        } else {
            svc
        };
        c.apply_service(&svc.build());
        c.apply_slice(&slice("web-4", "IPv4", &[Ep::new("10.0.0.1")]));
        let flush = c.flush();
        let what = format!("{default:?} {annotations:?} local {local}");
        let outside = |port, proto| {
            c.desired(&fe("192.0.2.10", port, proto).external())
                .map(|t| t.dsr)
        };
        assert_eq!(outside(30080, Proto::Tcp), Some(tcp), "{what}");
        assert_eq!(outside(30053, Proto::Udp), Some(udp), "{what}");
        let inside = c.desired(&fe("192.0.2.10", 30080, Proto::Tcp));
        assert_eq!(inside.map(|t| t.dsr), Some(false), "{what}");
        let report = &flush.services[&ObjectRef::service("default", "web")];
        assert_eq!(
            report.unsupported.contains(&Feature::UnknownForwardingMode),
            unknown,
            "{what}"
        );
    }
}

/// A DSR frontend from outside knows the node of each endpoint that names
/// one, ready or not, on this node or another (`LB4_NODE_NETS`); other
/// frontends, and the socket hooks' view, none.
#[test]
fn a_dsr_frontend_knows_which_node_each_endpoint_is_on() {
    let mut c = cache(&["192.0.2.10"]);
    c.apply_service(
        &node_port_web()
            .annotation(FORWARDING_MODE_ANNOTATION, "dsr")
            .build(),
    );
    c.apply_slice(&slice(
        "web-4",
        "IPv4",
        &[
            Ep::new("10.0.0.1").ready(true).node("node-a"),
            Ep::new("10.0.0.2").ready(false).node("node-b"),
            Ep::new("10.0.0.3").ready(true),
        ],
    ));
    c.flush();
    let nodes = |f: Frontend| {
        c.desired(&f)
            .map(|t| {
                t.dsr_nodes
                    .iter()
                    .map(|(ip, t)| (ip.to_string(), t.node_name.clone().unwrap_or_default()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let outside = fe("192.0.2.10", 30080, Proto::Tcp).external();
    assert_eq!(
        nodes(outside),
        [
            ("10.0.0.1".to_owned(), "node-a".to_owned()),
            ("10.0.0.2".to_owned(), "node-b".to_owned())
        ]
    );
    assert_eq!(nodes(fe("192.0.2.10", 30080, Proto::Tcp)), []);
    assert_eq!(nodes(fe("10.96.0.20", 80, Proto::Tcp)), []);
    // Without DSR, none.
    let mut c = cache(&["192.0.2.10"]);
    c.apply_service(&node_port_web().build());
    c.apply_slice(&slice(
        "web-4",
        "IPv4",
        &[Ep::new("10.0.0.1").node("node-a")],
    ));
    c.flush();
    assert_eq!(c.desired(&outside).map(|t| t.dsr_nodes.len()), Some(0));
}

/// Topology hints and Maglev, on two nodes in different zones. Inside the
/// node (the cluster IP, and the external addresses as the socket hooks
/// see them) each node follows the hints, as kube-proxy. From outside, the
/// Maglev frontends of an `externalTrafficPolicy: Cluster` Service get
/// every ready endpoint on both nodes, so both build the same table and a
/// flow the router moves between them keeps its endpoint; without Maglev
/// they follow the hints, as kube-proxy's rules; under `Local` each node's
/// table is its own endpoints, different by definition.
#[test]
fn maglev_frontends_from_outside_are_the_same_on_nodes_in_every_zone() {
    use std::net::SocketAddr;

    use super::maglev::{HashSeed, TableSize, lookup_table};
    let node = |name: &str, zone: &str, addr: &str| NodeContext {
        zone: Some(zone.to_owned()),
        node_port_ips: vec![ip(addr)],
        ..NodeContext::named(name)
    };
    let nodes = [
        node("node-a", "zone-a", "192.0.2.10"),
        node("node-b", "zone-b", "192.0.2.11"),
    ];
    // Name, LB IP, node port, Maglev, `externalTrafficPolicy`.
    let services: [(&str, &str, u16, bool, &str); 3] = [
        ("web", "198.51.100.7", 30080, true, "Cluster"),
        ("plain", "198.51.100.8", 30081, false, "Cluster"),
        ("local", "198.51.100.9", 30082, true, "Local"),
    ];
    let (a1, a2, b1) = (
        be("10.0.0.1", 8080),
        be("10.0.0.2", 8080),
        be("10.0.0.3", 8080),
    );
    // Zone hints as the EndpointSlice controller writes them; then node
    // hints (`trafficDistribution: PreferSameNode`).
    let by_zone = [
        Ep::new("10.0.0.1")
            .node("node-a")
            .zone("zone-a")
            .hint_zone("zone-a"),
        Ep::new("10.0.0.2")
            .node("node-a2")
            .zone("zone-a")
            .hint_zone("zone-a"),
        Ep::new("10.0.0.3")
            .node("node-b")
            .zone("zone-b")
            .hint_zone("zone-b"),
    ];
    let by_node = [
        Ep::new("10.0.0.1")
            .node("node-a")
            .zone("zone-a")
            .hint_node("node-a"),
        Ep::new("10.0.0.2")
            .node("node-a2")
            .zone("zone-a")
            .hint_node("node-a2"),
        Ep::new("10.0.0.3")
            .node("node-b")
            .zone("zone-b")
            .hint_node("node-b"),
    ];
    // What each node programs: (cluster IP, LB IP inside, from outside) per
    // Service.
    type Seen = Vec<[Target; 3]>;
    let seen = |node: &NodeContext, eps: &[Ep]| -> Seen {
        let mut c = Cache::new(ExcludedCidrs::default(), node.clone());
        for (i, (name, lb_ip, node_port, maglev, etp)) in services.iter().enumerate() {
            let mut svc = Svc::new("default", name)
                .type_("LoadBalancer")
                .cluster_ip(&format!("10.96.0.{}", 20 + i))
                .with_port(SvcPort::new("http", 80, "TCP").node_port(i32::from(*node_port)))
                .lb_ingress_ip(lb_ip)
                .external_traffic_policy(etp);
            if *maglev {
                svc = svc.annotation(LB_ALGORITHM_ANNOTATION, "maglev");
            }
            c.apply_service(&svc.build());
            let slice = Slice::new("default", &format!("{name}-1"))
                .service(name)
                .port("http", 8080, "TCP")
                .endpoints(eps.iter().cloned())
                .build();
            c.apply_slice(&slice);
        }
        c.flush();
        services
            .iter()
            .enumerate()
            .map(|(i, (_, lb_ip, node_port, _, _))| {
                let at = |f: Frontend| c.desired(&f).cloned().unwrap_or_else(|| panic!("{f}"));
                let outside = at(fe(lb_ip, 80, Proto::Tcp).external());
                // The node port from outside: as the LB IP.
                let node_port =
                    at(fe(&node.node_port_ips[0].to_string(), *node_port, Proto::Tcp).external());
                assert_eq!(node_port.backends, outside.backends, "{}", node.name);
                [
                    at(fe(&format!("10.96.0.{}", 20 + i), 80, Proto::Tcp)),
                    at(fe(lb_ip, 80, Proto::Tcp)),
                    outside,
                ]
            })
            .collect()
    };
    let table = |t: &Target| {
        let addrs: Vec<_> = t
            .backends
            .iter()
            .map(|b| SocketAddr::new(b.ip, b.port))
            .collect();
        let size = TableSize::try_from(251).unwrap();
        let seed = HashSeed::default();
        lookup_table(&addrs, size, &seed)
            .into_iter()
            .map(|i| addrs[i as usize])
            .collect::<Vec<_>>()
    };
    for (eps, hinted) in [
        (&by_zone, [vec![a1, a2], vec![b1]]),
        (&by_node, [vec![a1], vec![b1]]),
    ] {
        let [on_a, on_b] = [&nodes[0], &nodes[1]].map(|n| seen(n, eps));
        for (node, seen, hinted) in [
            (&nodes[0], &on_a, &hinted[0]),
            (&nodes[1], &on_b, &hinted[1]),
        ] {
            let [web, plain, local] = [&seen[0], &seen[1], &seen[2]];
            let what = &node.name;
            // Inside the node: the hints, for every Service.
            for [cluster_ip, lb_inside, _] in [web, plain, local] {
                assert_eq!(&cluster_ip.backends, hinted, "{what}");
                assert_eq!(&lb_inside.backends, hinted, "{what}");
                assert!(!lb_inside.maglev, "{what}");
            }
            // From outside: Maglev under Cluster takes every endpoint,
            // random follows the hints, Local takes this node's.
            assert!(web[2].maglev, "{what}");
            assert_eq!(web[2].backends, [a1, a2, b1], "{what}");
            assert!(!plain[2].maglev, "{what}");
            assert_eq!(&plain[2].backends, hinted, "{what}");
            assert!(local[2].maglev && local[2].external_local, "{what}");
            let own = if node.name == "node-a" { a1 } else { b1 };
            assert_eq!(local[2].backends, [own], "{what}");
        }
        // Both nodes build the same table for the Maglev frontend under
        // Cluster, and different ones under Local.
        assert_eq!(table(&on_a[0][2]), table(&on_b[0][2]));
        assert_ne!(table(&on_a[2][2]), table(&on_b[2][2]));
    }
}

/// A slice's weight annotation (ours, else Cilium's) weighs its endpoints
/// at every frontend, inside and outside; weight 0 leaves them serving but
/// takes them out of the backends; a value that is no weight is reported
/// and leaves the default.
#[test]
fn slice_weights_weigh_their_endpoints_and_zero_drains_them() {
    use super::weight::{CILIUM_WEIGHT_ANNOTATION, DEFAULT_WEIGHT, WEIGHT_ANNOTATION};
    let weighted = |name: &str, ip_: &str, annotations: &[(&str, &str)]| {
        annotations
            .iter()
            .fold(Slice::new("default", name), |s, (k, v)| s.annotation(k, v))
            .service("web")
            .address_type("IPv4")
            .port("http", 8080, "TCP")
            .port("dns", 5353, "UDP")
            .endpoint(Ep::new(ip_))
            .build()
    };
    let mut c = cache(&["192.0.2.10"]);
    c.apply_service(&node_port_web().build());
    c.apply_slice(&weighted("a", "10.0.0.1", &[(WEIGHT_ANNOTATION, "1")]));
    c.apply_slice(&weighted(
        "b",
        "10.0.0.2",
        &[(CILIUM_WEIGHT_ANNOTATION, "3")],
    ));
    c.apply_slice(&weighted("c", "10.0.0.3", &[]));
    let flush = c.flush();
    let web = ObjectRef::service("default", "web");
    assert!(flush.services[&web].unsupported.is_empty());
    let frontends = [
        fe("10.96.0.20", 80, Proto::Tcp),
        fe("192.0.2.10", 30080, Proto::Tcp),
        fe("192.0.2.10", 30080, Proto::Tcp).external(),
    ];
    for f in frontends {
        let t = c.desired(&f).unwrap();
        assert_eq!(
            t.backends,
            [
                be("10.0.0.1", 8080),
                be("10.0.0.2", 8080),
                be("10.0.0.3", 8080)
            ],
            "{f:?}"
        );
        assert_eq!(t.weights, [1, 3, DEFAULT_WEIGHT], "{f:?}");
    }

    // Drained: no new flows, its flows kept (UDP's serving set: kept).
    c.apply_slice(&weighted("b", "10.0.0.2", &[(WEIGHT_ANNOTATION, "0")]));
    c.flush();
    let dns = fe("10.96.0.20", 53, Proto::Udp);
    let t = c.desired(&dns).unwrap();
    assert_eq!(t.backends, [be("10.0.0.1", 5353), be("10.0.0.3", 5353)]);
    assert_eq!(t.weights, [1, DEFAULT_WEIGHT]);
    assert!(c.serving(&dns).contains(&ip("10.0.0.2")), "still serving");

    // Equal weights are no weights; an invalid one keeps the default.
    c.apply_slice(&weighted("a", "10.0.0.1", &[(WEIGHT_ANNOTATION, "100")]));
    c.apply_slice(&weighted("b", "10.0.0.2", &[(WEIGHT_ANNOTATION, "heavy")]));
    let flush = c.flush();
    let t = c.desired(&dns).unwrap();
    assert_eq!(t.backends.len(), 3);
    assert!(t.weights.is_empty(), "{:?}", t.weights);
    assert!(
        flush.services[&web]
            .unsupported
            .contains(&Feature::InvalidEndpointWeight)
    );
}
