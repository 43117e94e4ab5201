//! kube-proxy's endpoint-selection tests, ported as tables and checked
//! against what a cluster IP frontend gets from [`compute`]. Addresses,
//! ports and names are our own.
//!
//! Sources, in kubernetes/kubernetes:
//!
//! * `pkg/proxy/topology_test.go`, `TestCategorizeEndpoints`: every case
//!   of the newest revision the reference index holds (commit 6c039d90),
//!   in [`categorize_endpoints`]. Hints are always honoured here, so the
//!   feature-gate knobs of that revision are gone.
//! * `pkg/proxy/topology.go` (commit 008b3652, with `PreferSameNode`): the
//!   same-node topology mode. The test cases upstream added with it were
//!   not in the reference index, so [`prefer_same_node`] is written from
//!   `topologyModeFromHints` itself.
//! * `pkg/proxy/nftables/proxier_test.go` (commit 030880a5): the flows
//!   that go to a cluster IP, in [`nftables_single_service`] and
//!   [`nftables_flows`].
//! * `pkg/proxy/endpointslicecache.go` (`addEndpoints`) and the rules the
//!   model documents: [`dedup_and_hint_edges`].
//!
//! The cases of those four tables are data, one txtar archive each in
//! `categorize_tests/` (the format is in [`data`]); the several-Services
//! scenarios of [`nftables_flows`] stay here.
//!
//! How kube-proxy's results map onto the cluster IP frontend: with
//! `internalTrafficPolicy: Cluster` its backends are kube-proxy's
//! `clusterEndpoints`; with `Local`, its `localEndpoints`. When
//! `localEndpoints` is empty, `hasAnyEndpoints` decides between the
//! nftables proxier's DROP (here `no_local_endpoints`: EHOSTUNREACH) and
//! its REJECT (here no backends: ECONNREFUSED). `allEndpoints` serves only
//! traffic from outside the node to NodePort/LoadBalancer/external IPs,
//! which the socket hooks never see; from inside the node those frontends
//! get `clusterEndpoints`, as kube-proxy short-circuits it.
//!
//! Not ported, and why:
//!
//! * `TestCategorizeEndpoints`, cases only an older revision (02756999)
//!   has: the `hintsAnnotation` variants ("hints annotation == disabled /
//!   aUto / empty, hints ignored", "hintsAnnotation empty / disabled, no
//!   filtering applied", "normal endpoint filtering, auto / Auto
//!   annotation") and the `ProxyTerminatingEndpoints`-disabled variants
//!   ("... PTE disabled ..."). Upstream deleted them when hints stopped
//!   depending on the annotation and the gates were locked on; the
//!   annotation-gated ones expect no filtering, which current kube-proxy no
//!   longer does. The "auto" ones equal the first case ported here.
//! * In `TestCategorizeEndpoints`, the `localEndpoints`/`allEndpoints`
//!   expectations of cases whose Service has `internalTrafficPolicy:
//!   Cluster` and `externalTrafficPolicy: Local` ("externalTrafficPolicy:
//!   Local, topology ignored for Local endpoints", "conflicting topology
//!   and localness require merging allEndpoints", "iTP: Cluster, eTP: Local,
//!   ...", "externalTrafficPolicy ignored if not externally accessible"),
//!   and the `clusterEndpoints` of cases with `internalTrafficPolicy: Local`
//!   and a node port: those sets serve external traffic only. The cluster
//!   IP half of each such case is ported.
//! * `nftables/proxier_test.go`: every flow to a node port, external IP or
//!   load-balancer IP; masquerading (`TestInternalExternalMasquerade`'s
//!   variants differ only in it, so its base flows to cluster IPs are
//!   ported once); "packet to unallocated cluster ip" (no Service owns
//!   it); SCTP and "hairpin" flows of `TestClusterIPGeneral`; the IPv6
//!   variants of `TestNodePorts` (IPv6 cluster IPs are not programmed yet);
//!   `TestHealthCheckNodePortWhenTerminating` (counts local ready endpoints
//!   for the health-check node port only; its "serving, not terminating,
//!   not ready" endpoint shape is covered in [`dedup_and_hint_edges`]);
//!   `TestUpdateEndpointsMap`, `TestSyncProxyRulesRepeated`,
//!   `TestSyncProxyRulesStartup` (change tracking, conntrack flags and
//!   nftables transactions); `TestBuildServiceMap*` (covered in
//!   `tests.rs`); `TestLoadBalancerIngressRouteTypeProxy` and the chain-name
//!   tests.

mod data;

use std::net::{IpAddr, SocketAddr};

use lb_fixtures::{Ep, Slice, Svc, SvcPort};

use super::*;

const NS: &str = "shop";
const SVC: &str = "cart";
const VIP: &str = "10.96.30.10";
const LB_VIP: &str = "198.51.100.4";
const TARGET: u16 = 8080;
const THIS_NODE: &str = "node-here";

// ---------------------------------------------------------------- builders

/// A ClusterIP Service `shop/cart` at [`VIP`], port `http` 80/TCP.
fn svc() -> Svc {
    Svc::new(NS, SVC).cluster_ip(VIP).port("http", 80, "TCP")
}

/// The same as a NodePort Service (kube-proxy's `nodePort: ...` cases).
fn svc_node_port() -> Svc {
    Svc::new(NS, SVC)
        .type_("NodePort")
        .cluster_ip(VIP)
        .with_port(SvcPort::new("http", 80, "TCP").node_port(30080))
}

/// The same as a LoadBalancer Service with a health-check node port.
fn svc_lb() -> Svc {
    Svc::new(NS, SVC)
        .type_("LoadBalancer")
        .cluster_ip(VIP)
        .port("http", 80, "TCP")
        .health_check_node_port(30000)
        .lb_ingress_ip(LB_VIP)
}

trait SvcExt {
    fn itp_local(self) -> Self;
    fn etp_local(self) -> Self;
}

impl SvcExt for Svc {
    fn itp_local(self) -> Self {
        self.internal_traffic_policy("Local")
    }
    fn etp_local(self) -> Self {
        self.external_traffic_policy("Local")
    }
}

/// `ready`, `serving`, not `terminating`.
fn ready(ip: &str) -> Ep {
    Ep::new(ip).ready(true).serving(true).terminating(false)
}

/// Neither ready nor serving nor terminating.
fn unready(ip: &str) -> Ep {
    Ep::new(ip).ready(false).serving(false).terminating(false)
}

/// Not ready, serving and terminating: the fallback kind.
fn serving_terminating(ip: &str) -> Ep {
    Ep::new(ip).ready(false).serving(true).terminating(true)
}

/// Terminating and no longer serving.
fn terminating(ip: &str) -> Ep {
    Ep::new(ip).ready(false).serving(false).terminating(true)
}

trait EpExt {
    /// On this node.
    fn here(self) -> Self;
    fn on(self, node: &str) -> Self;
}

impl EpExt for Ep {
    fn here(self) -> Self {
        self.node(THIS_NODE)
    }
    fn on(self, node: &str) -> Self {
        self.node(node)
    }
}

fn node(zone: Option<&str>) -> NodeContext {
    NodeContext {
        name: THIS_NODE.to_owned(),
        zone: zone.map(str::to_owned),
        ..NodeContext::default()
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn frontend(vip: &str, port: u16, proto: Proto) -> Frontend {
    Frontend {
        vip: ip(vip),
        port,
        proto,
        scope: Scope::Internal,
    }
}

fn tcp(vip: &str, port: u16) -> Frontend {
    frontend(vip, port, Proto::Tcp)
}

fn udp(vip: &str, port: u16) -> Frontend {
    frontend(vip, port, Proto::Udp)
}

fn backends(addrs: &[&str]) -> Vec<Backend> {
    let mut v: Vec<Backend> = addrs
        .iter()
        .map(|a| {
            let sa: SocketAddr = a.parse().unwrap_or_else(|_| panic!("bad address {a}"));
            Backend {
                ip: sa.ip(),
                port: sa.port(),
            }
        })
        .collect();
    v.sort();
    v
}

/// Panics listing every failed case of a table.
fn report(table: &str, total: usize, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{table}: {} of {total} cases failed:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

fn assert_unique_names<'a>(table: &str, names: impl Iterator<Item = &'a str>) {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        assert!(seen.insert(n), "{table}: duplicate case name {n:?}");
    }
}

// ---------------------------------------------------------------- one Service, one port

/// One Service (`shop/cart`, port `http`), its slices, this node, and what
/// its cluster IP frontend must get.
struct Case {
    name: String,
    /// This node's `topology.kubernetes.io/zone` label.
    zone: Option<String>,
    svc: Svc,
    /// One EndpointSlice per list (`cart-1`, `cart-2`, ...), port `http`
    /// 8080/TCP; none at all when empty.
    slices: Vec<Vec<Ep>>,
    want: Want,
    /// The expected `sessionAffinity: ClientIP` timeout.
    affinity: Option<u32>,
    /// What the LB VIP gets from outside the node (kube-proxy's external
    /// flows), when it is not the LB VIP's set from inside.
    outside: Option<Want>,
}

/// What the cluster IP frontend gets. Endpoint IPs, on port [`TARGET`].
#[derive(Debug, PartialEq)]
enum Want {
    /// `internalTrafficPolicy: Cluster`: kube-proxy's `clusterEndpoints`.
    Cluster(Vec<String>),
    /// `internalTrafficPolicy: Local`: kube-proxy's `localEndpoints`.
    Local(Vec<String>),
    /// `Local`, none here, some elsewhere (`hasAnyEndpoints`): DROP, EHOSTUNREACH.
    NoLocal,
    /// No usable endpoint anywhere: REJECT, ECONNREFUSED.
    Refused { local: bool },
}

impl Want {
    fn target(&self, affinity: Option<u32>) -> Target {
        let at = |ips: &[String]| {
            let addrs: Vec<String> = ips.iter().map(|i| format!("{i}:{TARGET}")).collect();
            let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
            backends(&refs)
        };
        let (backends, local, no_local_endpoints) = match self {
            Want::Cluster(ips) => (at(ips), false, false),
            Want::Local(ips) => (at(ips), true, false),
            Want::NoLocal => (Vec::new(), true, true),
            Want::Refused { local } => (Vec::new(), *local, false),
        };
        Target {
            backends,
            affinity,
            local,
            no_local_endpoints,
            ..Target::default()
        }
    }
}

impl Case {
    /// The LB VIP's frontend in the external scope (traffic from outside):
    /// `self.outside`'s endpoints, else those the LB VIP serves inside.
    fn check_outside(&self, d: &Desired) -> Result<(), String> {
        let fe = tcp(LB_VIP, 80).external();
        let Some(got) = d.frontends.get(&fe) else {
            // Only an LB VIP has one; and it has both.
            return match d.frontends.contains_key(&tcp(LB_VIP, 80)) {
                true => Err(format!("{fe} not programmed")),
                false => Ok(()),
            };
        };
        let (backends, no_local) = match &self.outside {
            Some(want) => {
                let t = want.target(self.affinity);
                (t.backends, t.no_local_endpoints)
            }
            None => {
                let inside = d.frontends.get(&tcp(LB_VIP, 80));
                (
                    inside.map(|t| t.backends.clone()).unwrap_or_default(),
                    false,
                )
            }
        };
        if got.backends != backends || got.no_local_endpoints != no_local {
            return Err(format!(
                "{fe}:\n      got  {got:?}\n      want {backends:?}, no_local_endpoints {no_local}"
            ));
        }
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        let services = [self.svc.clone().build()];
        let slices: Vec<_> = self
            .slices
            .iter()
            .enumerate()
            .map(|(i, eps)| {
                Slice::new(NS, &format!("{SVC}-{}", i + 1))
                    .service(SVC)
                    .port("http", i32::from(TARGET), "TCP")
                    .endpoints(eps.iter().cloned())
                    .build()
            })
            .collect();
        let (d, r) = compute(
            &services,
            &slices,
            &ExcludedCidrs::default(),
            &node(self.zone.as_deref()),
        );
        if !r.invalid.is_empty() {
            return Err(format!("objects rejected: {:?}", r.invalid));
        }
        let fe = tcp(VIP, 80);
        let want = self.want.target(self.affinity);
        let got = d
            .frontends
            .get(&fe)
            .ok_or_else(|| format!("{fe} not programmed; have {:?}", d.frontends.keys()))?;
        if *got != want {
            return Err(format!("{fe}:\n      got  {got:?}\n      want {want:?}"));
        }
        let wildcard = Frontend::wildcard(ip(VIP));
        if d.frontends.get(&wildcard) != Some(&Target::default()) {
            return Err(format!(
                "{wildcard} should refuse; got {:?}",
                d.frontends.get(&wildcard)
            ));
        }
        // The LB VIP (node ports need node addresses, which `compute` has
        // none of) serves pods and processes on this node: kube-proxy
        // short-circuits them to the cluster endpoints, whatever the
        // traffic policies.
        self.check_outside(&d)?;
        let inside = |fe: &&Frontend| fe.vip != ip(VIP) && fe.scope == Scope::Internal;
        for (fe, t) in d.frontends.iter().filter(|(fe, _)| inside(fe)) {
            let cluster = match &self.want {
                Want::Cluster(_) => Some(&want.backends),
                _ => None,
            };
            if *fe != tcp(LB_VIP, 80)
                || t.local
                || t.no_local_endpoints
                || cluster.is_some_and(|b| *b != t.backends)
            {
                return Err(format!("unexpected frontend {fe}: {t:?}"));
            }
        }
        if d.frontends.keys().filter(|fe| fe.vip == ip(VIP)).count() != 2 {
            return Err(format!("unexpected frontends {:?}", d.frontends.keys()));
        }
        Ok(())
    }
}

/// Runs every case of a table (a txtar archive, see [`data`]).
fn run_cases(table: &str, archive: &str) {
    let cases = data::cases(archive);
    assert_unique_names(table, cases.iter().map(|c| c.name.as_str()));
    let failures = cases
        .iter()
        .filter_map(|c| c.check().err().map(|e| format!("{:?}: {e}", c.name)))
        .collect();
    report(table, cases.len(), failures);
}

/// `TestCategorizeEndpoints`, every case, in order. kube-proxy's
/// 10.1.2.3-6 are 10.70.1.3-6 here, its 10.0.0.0-3 are 10.70.0.10-13.
#[test]
fn categorize_endpoints() {
    run_cases(
        "TestCategorizeEndpoints",
        include_str!("categorize_tests/categorize_endpoints.txtar"),
    );
}

/// `topologyModeFromHints` with `PreferSameNode`: same-node when every ready
/// endpoint has a node hint and one names this node; else same-zone by the
/// same rule; else no filtering. Written from `topology.go`, not ported.
#[test]
fn prefer_same_node() {
    run_cases(
        "PreferSameNode (topology.go)",
        include_str!("categorize_tests/prefer_same_node.txtar"),
    );
}

/// The cluster IP flows of the single-Service tests in
/// `nftables/proxier_test.go`, with kube-proxy's "endpoints deleted" pass
/// as a case of its own per test. kube-proxy's 10.0.1.x are 10.71.1.x.
#[test]
fn nftables_single_service() {
    run_cases(
        "nftables proxier_test (single Service)",
        include_str!("categorize_tests/nftables_single_service.txtar"),
    );
}

/// Deduplication across slices and addresses, and hint edge cases.
#[test]
fn dedup_and_hint_edges() {
    run_cases(
        "dedup and hint edges",
        include_str!("categorize_tests/dedup_and_hint_edges.txtar"),
    );
}

// ---------------------------------------------------------------- several Services

/// A packet to a frontend and what becomes of it: kube-proxy's
/// `packetFlowTest`, cluster IPs only.
struct Flow {
    name: &'static str,
    to: Frontend,
    want: Verdict,
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Balanced over these `IP:port`s, with this ClientIP affinity timeout.
    Forward(Vec<Backend>, Option<u32>),
    /// Refused (kube-proxy's REJECT): by the port's frontend or the address's wildcard.
    Refuse,
    /// kube-proxy's DROP for internalTrafficPolicy Local without local endpoints.
    Unreachable,
}

fn forward(addrs: &[&str]) -> Verdict {
    Verdict::Forward(backends(addrs), None)
}

/// What `d` does with a connect to `fe`: its own frontend, else the wildcard
/// of its address; `None` when neither exists.
fn verdict(d: &Desired, fe: &Frontend) -> Option<Verdict> {
    let t = d
        .frontends
        .get(fe)
        .or_else(|| d.frontends.get(&Frontend::wildcard(fe.vip)))?;
    Some(if !t.backends.is_empty() {
        Verdict::Forward(t.backends.clone(), t.affinity)
    } else if t.no_local_endpoints {
        Verdict::Unreachable
    } else {
        Verdict::Refuse
    })
}

/// One kube-proxy test's objects and the cluster IP flows checked against them.
struct Scenario {
    name: &'static str,
    services: Vec<Svc>,
    slices: Vec<Slice>,
    flows: Vec<Flow>,
}

fn flow(name: &'static str, to: Frontend, want: Verdict) -> Flow {
    Flow { name, to, want }
}

/// A slice for Service `ns/svc` with these ports (name, number, protocol).
fn slice_for(ns: &str, svc: &str, ports: &[(&str, i32, &str)], eps: Vec<Ep>) -> Slice {
    ports
        .iter()
        .fold(Slice::new(ns, &format!("{svc}-1")).service(svc), |s, p| {
            s.port(p.0, p.1, p.2)
        })
        .endpoints(eps)
}

const P80: &[(&str, i32, &str)] = &[("p80", 80, "TCP")];

/// The multi-Service tests of `nftables/proxier_test.go`, their flows to
/// cluster IPs. kube-proxy's 172.30.0.4x are 10.96.31.4x, its 10.180.x.y
/// are 10.73.x.y, its external and load-balancer IPs 192.0.2.x/198.51.100.x.
#[test]
fn nftables_flows() {
    let scenarios = vec![
        Scenario {
            name: "TestOverallNFTablesRules",
            services: vec![
                Svc::new("ns1", "svc1")
                    .cluster_ip("10.96.31.41")
                    .port("p80", 80, "TCP"),
                Svc::new("ns2", "svc2")
                    .type_("LoadBalancer")
                    .etp_local()
                    .cluster_ip("10.96.31.42")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3001))
                    .lb_ingress_ip("198.51.100.1")
                    .external_ips(&["192.0.2.22"])
                    .health_check_node_port(30000),
                Svc::new("ns3", "svc3")
                    .type_("NodePort")
                    .cluster_ip("10.96.31.43")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3003)),
                Svc::new("ns4", "svc4")
                    .type_("NodePort")
                    .cluster_ip("10.96.31.44")
                    .external_ips(&["192.0.2.33"])
                    .with_port(SvcPort::new("p80", 80, "TCP").target_port(80)),
                Svc::new("ns5", "svc5")
                    .type_("LoadBalancer")
                    .external_traffic_policy("Cluster")
                    .cluster_ip("10.96.31.45")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3002))
                    .lb_ingress_ip("198.51.100.5")
                    .health_check_node_port(30000)
                    .client_ip_affinity(Some(10_800)),
                Svc::new("ns6", "svc6")
                    .type_("ClusterIP")
                    .cluster_ip("10.96.31.46")
                    .with_port(SvcPort::new("p80", 80, "TCP").target_port(80)),
            ],
            slices: vec![
                slice_for("ns1", "svc1", P80, vec![Ep::new("10.73.0.1")]),
                // No node name: not local; eTP Local does not touch the cluster IP.
                slice_for("ns2", "svc2", P80, vec![Ep::new("10.73.0.2")]),
                slice_for("ns3", "svc3", P80, vec![Ep::new("10.73.0.3")]),
                slice_for(
                    "ns4",
                    "svc4",
                    P80,
                    vec![Ep::new("10.73.0.4"), Ep::new("10.73.0.5").here()],
                ),
                slice_for("ns5", "svc5", P80, vec![Ep::new("10.73.0.3")]),
            ],
            flows: vec![
                flow(
                    "svc1 cluster IP",
                    tcp("10.96.31.41", 80),
                    forward(&["10.73.0.1:80"]),
                ),
                flow(
                    "svc2 (LoadBalancer, eTP Local) cluster IP",
                    tcp("10.96.31.42", 80),
                    forward(&["10.73.0.2:80"]),
                ),
                flow(
                    "svc3 (NodePort) cluster IP",
                    tcp("10.96.31.43", 80),
                    forward(&["10.73.0.3:80"]),
                ),
                flow(
                    "svc4 (external IP) cluster IP",
                    tcp("10.96.31.44", 80),
                    forward(&["10.73.0.4:80", "10.73.0.5:80"]),
                ),
                flow(
                    "svc5 (session affinity) cluster IP",
                    tcp("10.96.31.45", 80),
                    Verdict::Forward(backends(&["10.73.0.3:80"]), Some(10_800)),
                ),
                flow(
                    "svc6 (no endpoints) cluster IP",
                    tcp("10.96.31.46", 80),
                    Verdict::Refuse,
                ),
            ],
        },
        Scenario {
            name: "TestNoEndpointsReject",
            services: vec![
                Svc::new("ns1", "svc1")
                    .type_("LoadBalancer")
                    .cluster_ip("10.96.31.41")
                    .external_ips(&["192.0.2.11"])
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3001))
                    .lb_ingress_ip("198.51.100.1"),
            ],
            slices: vec![],
            flows: vec![flow(
                "pod to cluster IP with no endpoints",
                tcp("10.96.31.41", 80),
                Verdict::Refuse,
            )],
        },
        Scenario {
            name: "TestClusterIPGeneral",
            services: vec![
                Svc::new("ns1", "svc1")
                    .cluster_ip("10.96.31.41")
                    .port("http", 80, "TCP"),
                Svc::new("ns2", "svc2")
                    .cluster_ip("10.96.31.42")
                    .port("http", 80, "TCP")
                    .with_port(SvcPort::new("https", 443, "TCP").target_port(8443))
                    .port("dns-udp", 53, "UDP")
                    .with_port(SvcPort::new("dns-tcp", 53, "TCP").target_port(5353))
                    .port("dns-sctp", 53, "SCTP"),
            ],
            slices: vec![
                slice_for(
                    "ns1",
                    "svc1",
                    &[("http", 80, "TCP")],
                    vec![Ep::new("10.73.0.1").here()],
                ),
                slice_for(
                    "ns2",
                    "svc2",
                    &[
                        ("http", 80, "TCP"),
                        ("https", 8443, "TCP"),
                        ("dns-udp", 53, "UDP"),
                        ("dns-tcp", 5353, "TCP"),
                        ("dns-sctp", 53, "SCTP"),
                    ],
                    vec![
                        Ep::new("10.73.0.1").here(),
                        Ep::new("10.73.2.1").on("node2"),
                    ],
                ),
            ],
            flows: vec![
                flow(
                    "simple clusterIP",
                    tcp("10.96.31.41", 80),
                    forward(&["10.73.0.1:80"]),
                ),
                flow(
                    "clusterIP with multiple endpoints",
                    tcp("10.96.31.42", 80),
                    forward(&["10.73.0.1:80", "10.73.2.1:80"]),
                ),
                flow(
                    "clusterIP with TargetPort",
                    tcp("10.96.31.42", 443),
                    forward(&["10.73.0.1:8443", "10.73.2.1:8443"]),
                ),
                flow(
                    "clusterIP with TCP, UDP, and SCTP on same port (TCP)",
                    tcp("10.96.31.42", 53),
                    forward(&["10.73.0.1:5353", "10.73.2.1:5353"]),
                ),
                flow(
                    "clusterIP with TCP, UDP, and SCTP on same port (UDP)",
                    udp("10.96.31.42", 53),
                    forward(&["10.73.0.1:53", "10.73.2.1:53"]),
                ),
                flow(
                    "TCP-only port does not match UDP traffic",
                    udp("10.96.31.42", 80),
                    Verdict::Refuse,
                ),
                flow(
                    "svc1 does not accept svc2's ports",
                    tcp("10.96.31.41", 443),
                    Verdict::Refuse,
                ),
            ],
        },
        Scenario {
            name: "TestLoadBalancer",
            services: vec![
                Svc::new("ns1", "svc1")
                    .type_("LoadBalancer")
                    .cluster_ip("10.96.31.41")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3001))
                    .lb_ingress_ip("198.51.100.1")
                    .lb_ingress_ip("198.51.100.2"),
            ],
            slices: vec![slice_for("ns1", "svc1", P80, vec![Ep::new("10.73.0.1")])],
            flows: vec![flow(
                "pod to cluster IP",
                tcp("10.96.31.41", 80),
                forward(&["10.73.0.1:80"]),
            )],
        },
        Scenario {
            name: "TestNodePorts/ipv4",
            services: vec![
                Svc::new("ns1", "svc1")
                    .type_("NodePort")
                    .cluster_ip("10.96.31.41")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3001)),
            ],
            slices: vec![slice_for(
                "ns1",
                "svc1",
                P80,
                vec![Ep::new("10.73.0.1"), Ep::new("10.73.2.1").here()],
            )],
            flows: vec![flow(
                "pod to cluster IP",
                tcp("10.96.31.41", 80),
                forward(&["10.73.0.1:80", "10.73.2.1:80"]),
            )],
        },
        Scenario {
            name: "TestExternalTrafficPolicyLocal",
            services: vec![
                Svc::new("ns1", "svc1")
                    .type_("LoadBalancer")
                    .etp_local()
                    .cluster_ip("10.96.31.41")
                    .external_ips(&["192.0.2.11"])
                    .with_port(
                        SvcPort::new("p80", 80, "TCP")
                            .node_port(3001)
                            .target_port(80),
                    )
                    .health_check_node_port(30000)
                    .lb_ingress_ip("198.51.100.1"),
            ],
            slices: vec![slice_for(
                "ns1",
                "svc1",
                P80,
                vec![Ep::new("10.73.0.1"), Ep::new("10.73.2.1").here()],
            )],
            flows: vec![flow(
                "pod to cluster IP hits both endpoints, unmasqueraded",
                tcp("10.96.31.41", 80),
                forward(&["10.73.0.1:80", "10.73.2.1:80"]),
            )],
        },
        Scenario {
            name: "TestExternalTrafficPolicyCluster",
            services: vec![
                Svc::new("ns1", "svc1")
                    .type_("LoadBalancer")
                    .external_traffic_policy("Cluster")
                    .cluster_ip("10.96.31.41")
                    .external_ips(&["192.0.2.11"])
                    .with_port(
                        SvcPort::new("p80", 80, "TCP")
                            .node_port(3001)
                            .target_port(80),
                    )
                    .lb_ingress_ip("198.51.100.1"),
            ],
            slices: vec![slice_for(
                "ns1",
                "svc1",
                P80,
                vec![Ep::new("10.73.0.1"), Ep::new("10.73.2.1").here()],
            )],
            flows: vec![flow(
                "pod to cluster IP hits both endpoints, unmasqueraded",
                tcp("10.96.31.41", 80),
                forward(&["10.73.0.1:80", "10.73.2.1:80"]),
            )],
        },
        Scenario {
            name: "TestInternalExternalMasquerade/base",
            services: vec![
                Svc::new("ns1", "svc1")
                    .type_("LoadBalancer")
                    .cluster_ip("10.96.31.41")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3001))
                    .health_check_node_port(30001)
                    .lb_ingress_ip("198.51.100.1"),
                Svc::new("ns2", "svc2")
                    .type_("LoadBalancer")
                    .etp_local()
                    .cluster_ip("10.96.31.42")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3002))
                    .health_check_node_port(30002)
                    .lb_ingress_ip("198.51.100.2"),
                Svc::new("ns3", "svc3")
                    .type_("LoadBalancer")
                    .itp_local()
                    .cluster_ip("10.96.31.43")
                    .with_port(SvcPort::new("p80", 80, "TCP").node_port(3003))
                    .health_check_node_port(30003)
                    .lb_ingress_ip("198.51.100.3"),
            ],
            slices: vec![
                slice_for(
                    "ns1",
                    "svc1",
                    P80,
                    vec![
                        Ep::new("10.73.0.1").here(),
                        Ep::new("10.73.1.1").on("remote"),
                    ],
                ),
                slice_for(
                    "ns2",
                    "svc2",
                    P80,
                    vec![
                        Ep::new("10.73.0.2").here(),
                        Ep::new("10.73.1.2").on("remote"),
                    ],
                ),
                slice_for(
                    "ns3",
                    "svc3",
                    P80,
                    vec![
                        Ep::new("10.73.0.3").here(),
                        Ep::new("10.73.1.3").on("remote"),
                    ],
                ),
            ],
            // pod, node and external sources get the same endpoints for a
            // cluster IP; only masquerading differs, which is not modelled.
            flows: vec![
                flow(
                    "pod/node/external to ClusterIP",
                    tcp("10.96.31.41", 80),
                    forward(&["10.73.0.1:80", "10.73.1.1:80"]),
                ),
                flow(
                    "pod/node/external to ClusterIP with eTP:Local",
                    tcp("10.96.31.42", 80),
                    forward(&["10.73.0.2:80", "10.73.1.2:80"]),
                ),
                flow(
                    "pod/node/external to ClusterIP with iTP:Local",
                    tcp("10.96.31.43", 80),
                    forward(&["10.73.0.3:80"]),
                ),
            ],
        },
    ];

    assert_unique_names("nftables flows", scenarios.iter().map(|s| s.name));
    let mut failures = Vec::new();
    let mut total = 0;
    for s in &scenarios {
        let services: Vec<_> = s.services.iter().map(|v| v.clone().build()).collect();
        let slices: Vec<_> = s.slices.iter().map(|v| v.clone().build()).collect();
        let (d, r) = compute(&services, &slices, &ExcludedCidrs::default(), &node(None));
        if !r.invalid.is_empty() {
            failures.push(format!("{}: objects rejected: {:?}", s.name, r.invalid));
            continue;
        }
        for f in &s.flows {
            total += 1;
            let got = verdict(&d, &f.to);
            if got.as_ref() != Some(&f.want) {
                failures.push(format!(
                    "{}/{} ({}): got {got:?}, want {:?}",
                    s.name, f.name, f.to, f.want
                ));
            }
        }
    }
    report("nftables flows", total, failures);
}
