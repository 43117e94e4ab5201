//! kube-proxy's rules, checked on small object sets.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use lb_fixtures::{Ep, Object, Slice, Svc, SvcPort};

use crate::source::file::Objects;

// ---------------------------------------------------------------- helpers

/// A Service with these ports: (name, port, protocol), empty for unset.
fn svc(ns: &str, name: &str, cluster_ip: &str, ports: &[(&str, i32, &str)]) -> Object {
    let svc = Svc::new(ns, name).cluster_ip(cluster_ip);
    ports
        .iter()
        .fold(svc, |s, (n, p, proto)| s.port(n, *p, proto))
        .into()
}

/// An IPv4 EndpointSlice labelled for `service`.
fn slice(
    ns: &str,
    name: &str,
    service: &str,
    ports: &[(&str, i32, &str)],
    endpoints: &[Ep],
) -> Object {
    let slice = Slice::new(ns, name).service(service);
    ports
        .iter()
        .fold(slice, |s, (n, p, proto)| s.port(n, *p, proto))
        .endpoints(endpoints.iter().cloned())
        .into()
}

fn objects(docs: &[Object]) -> Objects {
    let mut out = Objects::default();
    for doc in docs {
        match doc {
            Object::Service(s) => out.services.push((**s).clone()),
            Object::Slice(s) => out.slices.push((**s).clone()),
            Object::Raw(v) => panic!("not a Service or EndpointSlice: {v}"),
        }
    }
    out
}

fn compute_docs(docs: &[Object], excluded: &ExcludedCidrs) -> (Desired, ModelReport) {
    let o = objects(docs);
    compute(
        &o.services,
        &o.slices,
        excluded,
        &NodeContext::named("node-a"),
    )
}

fn run(docs: &[Object]) -> (Desired, ModelReport) {
    compute_docs(docs, &ExcludedCidrs::default())
}

fn seed_exclusion() -> ExcludedCidrs {
    ExcludedCidrs::parse(["10.244.0.0/16,"]).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn tcp(vip: &str, port: u16) -> Frontend {
    Frontend {
        vip: ip(vip),
        port,
        proto: Proto::Tcp,
        scope: Scope::Internal,
    }
}

fn udp(vip: &str, port: u16) -> Frontend {
    Frontend {
        vip: ip(vip),
        port,
        proto: Proto::Udp,
        scope: Scope::Internal,
    }
}

fn be(addr: &str, port: u16) -> Backend {
    Backend { ip: ip(addr), port }
}

fn oref(kind: ObjectKind, ns: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: ns.into(),
        name: name.into(),
    }
}

fn backends_of(d: &Desired, fe: Frontend) -> &[Backend] {
    &d.frontends
        .get(&fe)
        .unwrap_or_else(|| panic!("{fe} is not programmed; have {:?}", d.frontends.keys()))
        .backends
}

/// The frontends of `d` that name a port (not the wildcards).
fn ports_of(d: &Desired) -> BTreeMap<Frontend, Vec<Backend>> {
    d.frontends
        .iter()
        .filter(|(fe, _)| !fe.is_wildcard())
        .map(|(fe, t)| (*fe, t.backends.clone()))
        .collect()
}

fn ignored_names(r: &ModelReport) -> BTreeSet<String> {
    r.ignored.iter().map(|(o, _)| o.to_string()).collect()
}

fn invalid_names(r: &ModelReport) -> BTreeSet<String> {
    r.invalid.iter().map(|i| i.object.to_string()).collect()
}

const HTTP: &[(&str, i32, &str)] = &[("http", 80, "")];
const HTTP_EP: &[(&str, i32, &str)] = &[("http", 8080, "TCP")];

// ---------------------------------------------------------------- slices -> Service

#[test]
fn slices_join_by_label_in_the_same_namespace_only() {
    let (d, r) = run(&[
        svc("a", "web", "10.96.0.1", HTTP),
        svc("b", "web", "10.96.0.2", HTTP),
        slice("a", "web-1", "web", HTTP_EP, &[Ep::new("10.0.1.1")]),
        // Same label value, other namespace: belongs to b/web only.
        slice("b", "web-1", "web", HTTP_EP, &[Ep::new("10.0.9.9")]),
        // Same namespace, other service.
        slice("a", "api-1", "api", HTTP_EP, &[Ep::new("10.0.8.8")]),
    ]);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.1.1", 8080)]
    );
    assert_eq!(
        backends_of(&d, tcp("10.96.0.2", 80)),
        [be("10.0.9.9", 8080)]
    );
    assert_eq!(ports_of(&d).len(), 2);
    assert_eq!(
        d.owners[&tcp("10.96.0.1", 80)],
        oref(ObjectKind::Service, "a", "web")
    );
    assert_eq!(
        d.owners[&tcp("10.96.0.2", 80)],
        oref(ObjectKind::Service, "b", "web")
    );
    assert!(r.invalid.is_empty(), "{:?}", r.invalid);
}

#[test]
fn several_slices_are_merged_and_duplicates_removed() {
    let (d, _) = run(&[
        svc("default", "web", "10.96.0.1", HTTP),
        slice(
            "default",
            "web-1",
            "web",
            HTTP_EP,
            &[
                Ep::new("10.0.1.3"),
                Ep::new("10.0.1.1"),
                Ep::new("10.0.1.2"),
            ],
        ),
        // 10.0.1.2 again (an endpoint moving between slices), and twice within one slice.
        slice(
            "default",
            "web-2",
            "web",
            HTTP_EP,
            &[
                Ep::new("10.0.1.2"),
                Ep::new("10.0.2.1"),
                Ep::new("10.0.2.1"),
            ],
        ),
    ]);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [
            be("10.0.1.1", 8080),
            be("10.0.1.2", 8080),
            be("10.0.1.3", 8080),
            be("10.0.2.1", 8080),
        ]
    );
}

#[test]
fn service_port_matches_slice_port_by_name_and_protocol() {
    let (d, _) = run(&[
        svc(
            "kube-system",
            "dns",
            "10.96.0.10",
            &[("dns", 53, "UDP"), ("dns-tcp", 53, "TCP")],
        ),
        slice(
            "kube-system",
            "dns-1",
            "dns",
            &[("dns", 5353, "UDP"), ("dns-tcp", 5354, "TCP")],
            &[Ep::new("10.0.3.1")],
        ),
        // Right name, wrong protocol: must match neither port.
        slice(
            "kube-system",
            "dns-2",
            "dns",
            &[("dns", 9999, "TCP")],
            &[Ep::new("10.0.3.2")],
        ),
        // Right protocol, wrong name.
        slice(
            "kube-system",
            "dns-3",
            "dns",
            &[("other", 7777, "UDP")],
            &[Ep::new("10.0.3.3")],
        ),
    ]);
    assert_eq!(
        backends_of(&d, udp("10.96.0.10", 53)),
        [be("10.0.3.1", 5353)]
    );
    assert_eq!(
        backends_of(&d, tcp("10.96.0.10", 53)),
        [be("10.0.3.1", 5354)]
    );
    assert_eq!(ports_of(&d).len(), 2);
}

#[test]
fn unnamed_port_matches_unnamed_slice_port() {
    let (d, _) = run(&[
        svc("default", "one", "10.96.0.1", &[("", 80, "")]),
        slice(
            "default",
            "one-1",
            "one",
            &[("", 8000, "")],
            &[Ep::new("10.0.0.5")],
        ),
    ]);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.5", 8000)]
    );
}

#[test]
fn target_port_comes_from_each_slice() {
    // A rolling update that changed the container port: old pods on 8080, new on 9090.
    let (d, _) = run(&[
        svc("default", "web", "10.96.0.1", HTTP),
        slice("default", "web-old", "web", HTTP_EP, &[Ep::new("10.0.1.1")]),
        slice(
            "default",
            "web-new",
            "web",
            &[("http", 9090, "TCP")],
            &[Ep::new("10.0.2.1"), Ep::new("10.0.1.1")],
        ),
    ]);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [
            be("10.0.1.1", 8080),
            be("10.0.1.1", 9090),
            be("10.0.2.1", 9090),
        ]
    );
}

// ---------------------------------------------------------------- readiness

#[test]
fn ready_nil_counts_as_ready_and_not_ready_is_unused() {
    let (d, _) = run(&[
        svc("default", "web", "10.96.0.1", HTTP),
        slice(
            "default",
            "web-1",
            "web",
            HTTP_EP,
            &[
                Ep::new("10.0.0.1"),
                Ep::new("10.0.0.2").empty_conditions(),
                Ep::new("10.0.0.3").ready(true),
                Ep::new("10.0.0.4").ready(false),
                Ep::new("10.0.0.5")
                    .ready(false)
                    .serving(true)
                    .terminating(true),
            ],
        ),
    ]);
    // .5 is a fallback only; a ready endpoint exists, so it is not used.
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [
            be("10.0.0.1", 8080),
            be("10.0.0.2", 8080),
            be("10.0.0.3", 8080),
        ]
    );
}

#[test]
fn serving_terminating_endpoints_are_the_fallback_when_none_is_ready() {
    let (d, _) = run(&[
        svc("default", "web", "10.96.0.1", HTTP),
        slice(
            "default",
            "web-1",
            "web",
            HTTP_EP,
            &[
                Ep::new("10.0.0.1")
                    .ready(false)
                    .serving(true)
                    .terminating(true),
                Ep::new("10.0.0.2")
                    .ready(false)
                    .serving(false)
                    .terminating(true),
                Ep::new("10.0.0.3")
                    .ready(false)
                    .serving(true)
                    .terminating(false),
                Ep::new("10.0.0.4").ready(false),
            ],
        ),
        // The fallback also merges across slices.
        slice(
            "default",
            "web-2",
            "web",
            HTTP_EP,
            &[Ep::new("10.0.0.9")
                .ready(false)
                .serving(true)
                .terminating(true)],
        ),
    ]);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.1", 8080), be("10.0.0.9", 8080)]
    );
}

#[test]
fn nothing_ready_nor_serving_means_reject() {
    let (d, r) = run(&[
        svc("default", "web", "10.96.0.1", HTTP),
        slice(
            "default",
            "web-1",
            "web",
            HTTP_EP,
            &[
                Ep::new("10.0.0.1").ready(false),
                Ep::new("10.0.0.2")
                    .ready(false)
                    .serving(false)
                    .terminating(true),
            ],
        ),
    ]);
    assert_eq!(backends_of(&d, tcp("10.96.0.1", 80)), []);
    assert!(r.passthrough.is_empty());
}

// ---------------------------------------------------------------- ignored objects

#[test]
fn objects_for_someone_else_are_ignored_not_invalid() {
    let labelled = |name: &str, label: &str| {
        Object::from(
            Svc::new("default", name)
                .label(label, "x")
                .cluster_ip(&format!("10.96.0.{}", name.len()))
                .port("http", 80, ""),
        )
    };
    let docs = [
        svc("default", "web", "10.96.0.1", HTTP),
        slice("default", "web-1", "web", HTTP_EP, &[Ep::new("10.0.0.1")]),
        svc("default", "headless", "None", HTTP),
        slice(
            "default",
            "headless-1",
            "headless",
            HTTP_EP,
            &[Ep::new("10.0.0.2")],
        ),
        Svc::new("default", "headless-ips")
            .cluster_ip("None")
            .cluster_ips(&["None"])
            .port("", 80, "")
            .into(),
        Svc::new("default", "extname")
            .external_name("example.com")
            .into(),
        labelled("other-proxy", "service.kubernetes.io/service-proxy-name"),
        slice(
            "default",
            "other-proxy-1",
            "other-proxy",
            HTTP_EP,
            &[Ep::new("10.0.0.3")],
        ),
        labelled("headless-label", "service.kubernetes.io/headless"),
        Slice::new("default", "web-fqdn")
            .service("web")
            .address_type("FQDN")
            .port("http", 8080, "")
            .endpoint(Ep::new("web.example.com"))
            .into(),
    ];
    let (d, r) = run(&docs);
    // Only the ordinary Service is programmed, and the FQDN slice added nothing to it.
    assert_eq!(ports_of(&d).len(), 1, "{:?}", d.frontends);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.1", 8080)]
    );
    assert_eq!(
        ignored_names(&r),
        [
            "EndpointSlice default/web-fqdn",
            "Service default/extname",
            "Service default/headless",
            "Service default/headless-ips",
            "Service default/headless-label",
            "Service default/other-proxy",
        ]
        .map(String::from)
        .into(),
    );
    assert!(r.invalid.is_empty(), "{:?}", r.invalid);
    assert!(r.passthrough.is_empty());
    // The labelled Services had valid cluster IPs; the label alone kept them out.
    assert!(!d.frontends.keys().any(|fe| fe.vip != ip("10.96.0.1")));
}

#[test]
fn cluster_ip_nodeport_and_loadbalancer_all_program_their_cluster_ip_and_lb_vip() {
    let docs = [
        Svc::new("", "c")
            .type_("ClusterIP")
            .cluster_ip("10.96.0.1")
            .port("http", 80, "")
            .into(),
        Svc::new("", "n")
            .type_("NodePort")
            .cluster_ip("10.96.0.2")
            .with_port(SvcPort::new("http", 80, "").node_port(30080))
            .into(),
        Svc::new("", "l")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.3")
            .with_port(SvcPort::new("http", 80, "").node_port(30081))
            .lb_ingress_ip("192.0.2.10")
            .into(),
        slice("default", "c-1", "c", HTTP_EP, &[Ep::new("10.0.0.1")]),
        slice("default", "n-1", "n", HTTP_EP, &[Ep::new("10.0.0.2")]),
        slice("default", "l-1", "l", HTTP_EP, &[Ep::new("10.0.0.3")]),
    ];
    let (d, r) = run(&docs);
    let got: Vec<_> = d
        .frontends
        .iter()
        .filter(|(fe, _)| !fe.is_wildcard())
        .map(|(fe, t)| (fe.to_string(), t.backends.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("10.96.0.1:80/TCP".to_owned(), vec![be("10.0.0.1", 8080)]),
            ("10.96.0.2:80/TCP".to_owned(), vec![be("10.0.0.2", 8080)]),
            ("10.96.0.3:80/TCP".to_owned(), vec![be("10.0.0.3", 8080)]),
            ("192.0.2.10:80/TCP".to_owned(), vec![be("10.0.0.3", 8080)]),
            (
                "192.0.2.10:80/TCP (external)".to_owned(),
                vec![be("10.0.0.3", 8080)]
            ),
        ]
    );
    assert!(r.invalid.is_empty() && r.ignored.is_empty(), "{r:?}");
}

#[test]
fn dual_stack_service_programs_each_family_with_its_own_endpoints() {
    let docs = [
        Svc::new("", "dual")
            .cluster_ip("10.96.0.7")
            .cluster_ips(&["10.96.0.7", "fd00::7"])
            .port("http", 80, "")
            .into(),
        slice("default", "dual-1", "dual", HTTP_EP, &[Ep::new("10.0.0.7")]),
        Slice::new("", "dual-2")
            .service("dual")
            .address_type("IPv6")
            .port("http", 8080, "")
            .endpoint(Ep::new("fd00::a"))
            .into(),
    ];
    let (d, r) = run(&docs);
    // Each cluster IP takes the endpoints of its own family only.
    let v6 = Frontend {
        vip: "fd00::7".parse().unwrap(),
        port: 80,
        proto: Proto::Tcp,
        scope: Scope::Internal,
    };
    assert_eq!(
        d.frontends[&tcp("10.96.0.7", 80)].backends,
        [be("10.0.0.7", 8080)]
    );
    assert_eq!(d.frontends[&v6].backends, [be("fd00::a", 8080)]);
    assert_eq!(ports_of(&d).len(), 2);
    assert!(r.invalid.is_empty(), "{:?}", r.invalid);
    assert!(r.unsupported.is_empty(), "{:?}", r.unsupported);
}

#[test]
fn ipv6_only_and_single_stack_services_use_their_own_family_and_ipv6_exclusions() {
    let docs = [
        Svc::new("", "v6")
            .cluster_ip("fd00:96::1")
            .port("http", 80, "")
            .into(),
        Slice::new("", "v6-1")
            .service("v6")
            .address_type("IPv6")
            .port("http", 8080, "")
            .endpoint(Ep::new("fd00:10:244::5"))
            .endpoint(Ep::new("fd00:42::5"))
            .into(),
        // Single-stack IPv4 with a stray IPv6 slice: nothing in IPv6.
        Svc::new("", "v4")
            .cluster_ip("10.96.0.9")
            .port("http", 80, "")
            .into(),
        slice(
            "default",
            "v4-1",
            "v4",
            HTTP_EP,
            &[Ep::new("10.244.0.9"), Ep::new("10.42.0.9")],
        ),
        Slice::new("", "v4-2")
            .service("v4")
            .address_type("IPv6")
            .port("http", 8080, "")
            .endpoint(Ep::new("fd00:42::9"))
            .into(),
    ];
    // Both families in one flag, as with two CNIs.
    let excluded = ExcludedCidrs::parse(["10.244.0.0/16,fd00:10:244::/56"]).unwrap();
    let (d, r) = compute_docs(&docs, &excluded);
    let v6 = Frontend {
        vip: ip("fd00:96::1"),
        port: 80,
        proto: Proto::Tcp,
        scope: Scope::Internal,
    };
    assert_eq!(backends_of(&d, v6), [be("fd00:42::5", 8080)]);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.9", 80)),
        [be("10.42.0.9", 8080)]
    );
    let families: BTreeSet<bool> = d.frontends.keys().map(|fe| fe.vip.is_ipv6()).collect();
    assert_eq!(families, BTreeSet::from([false, true]));
    assert!(
        !d.frontends
            .keys()
            .any(|fe| fe.vip.is_ipv6() && fe.vip != v6.vip),
        "{:?}",
        d.frontends.keys()
    );
    assert!(r.invalid.is_empty() && r.unsupported.is_empty(), "{r:?}");
}

#[test]
fn features_not_fully_programmed_are_reported_and_the_rest_served() {
    let docs = [
        Svc::new("", "rich")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.8")
            .external_ips(&["192.0.2.10"])
            .session_affinity("ClientIP")
            .internal_traffic_policy("Local")
            .external_traffic_policy("Local")
            .with_port(SvcPort::new("http", 80, "").node_port(30080))
            .port("assoc", 9, "SCTP")
            .lb_ingress_ip("198.51.100.7")
            .into(),
        slice("default", "rich-1", "rich", HTTP_EP, &[Ep::new("10.0.0.8")]),
    ];
    let (d, r) = run(&docs);
    // The cluster IP has no local endpoint (iTP Local); the external IP
    // and LB VIP serve this node's pods with the cluster set, and traffic
    // from outside with none (eTP Local: dropped). SCTP is not programmed,
    // nor node ports (`run` gives the node no addresses).
    assert_eq!(
        ports_of(&d),
        BTreeMap::from([
            (tcp("10.96.0.8", 80), vec![]),
            (tcp("192.0.2.10", 80), vec![be("10.0.0.8", 8080)]),
            (tcp("192.0.2.10", 80).external(), vec![]),
            (tcp("198.51.100.7", 80), vec![be("10.0.0.8", 8080)]),
            (tcp("198.51.100.7", 80).external(), vec![]),
        ])
    );
    for vip in ["192.0.2.10", "198.51.100.7"] {
        let outside = &d.frontends[&tcp(vip, 80).external()];
        assert!(
            outside.no_local_endpoints && outside.external_local,
            "{vip}: {outside:?}"
        );
    }
    // IPv4 traffic from outside is served (the tc programs): only SCTP is
    // reported.
    let rich = oref(ObjectKind::Service, "default", "rich");
    assert_eq!(r.unsupported, BTreeSet::from([(rich, Feature::Sctp)]));
}

#[test]
fn ipv6_external_frontends_are_programmed_for_traffic_from_outside_too() {
    let svc = Svc::new("", "dual")
        .type_("LoadBalancer")
        .cluster_ips(&["10.96.0.8", "fd00::8"])
        .external_ips(&["2001:db8::8"])
        .external_traffic_policy("Local")
        .with_port(SvcPort::new("http", 80, "").node_port(30080))
        .lb_ingress_ip("2001:db8::9")
        .into();
    let (d, r) = run(&[svc]);
    assert!(r.unsupported.is_empty(), "{:?}", r.unsupported);
    for vip in ["2001:db8::8", "2001:db8::9"] {
        let fe = Frontend {
            vip: vip.parse().unwrap(),
            port: 80,
            proto: Proto::Tcp,
            scope: Scope::External,
        };
        let target = d.frontends.get(&fe).unwrap_or_else(|| panic!("{fe:?}"));
        assert!(target.external_local, "{fe:?}");
    }
}

#[test]
fn two_services_claiming_one_frontend_first_by_name_wins() {
    let (d, r) = run(&[
        svc("default", "zeta", "10.96.0.1", HTTP),
        svc("default", "alpha", "10.96.0.1", HTTP),
        slice(
            "default",
            "zeta-1",
            "zeta",
            HTTP_EP,
            &[Ep::new("10.0.0.26")],
        ),
        slice(
            "default",
            "alpha-1",
            "alpha",
            HTTP_EP,
            &[Ep::new("10.0.0.1")],
        ),
    ]);
    let fe = tcp("10.96.0.1", 80);
    assert_eq!(backends_of(&d, fe), [be("10.0.0.1", 8080)]);
    assert_eq!(d.owners[&fe], oref(ObjectKind::Service, "default", "alpha"));
    // Both also claim the address's wildcard frontend.
    assert_eq!(
        r.conflicts,
        [
            (
                Frontend::wildcard(ip("10.96.0.1")),
                oref(ObjectKind::Service, "default", "zeta")
            ),
            (fe, oref(ObjectKind::Service, "default", "zeta"))
        ]
    );
}

// ---------------------------------------------------------------- exclusion

#[test]
fn excluded_endpoint_is_never_programmed_and_is_reported() {
    let (d, r) = compute_docs(
        &[
            svc("default", "mixed", "10.96.0.1", HTTP),
            slice(
                "default",
                "mixed-1",
                "mixed",
                HTTP_EP,
                &[
                    Ep::new("10.244.3.4"),
                    Ep::new("10.0.0.1"),
                    Ep::new("10.245.0.1"),
                ],
            ),
        ],
        &seed_exclusion(),
    );
    // 10.245.0.1 is just outside 10.244.0.0/16.
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.1", 8080), be("10.245.0.1", 8080)]
    );
    assert_eq!(
        r.excluded,
        [(
            oref(ObjectKind::Service, "default", "mixed"),
            be("10.244.3.4", 8080)
        )]
        .into()
    );
    assert!(r.passthrough.is_empty());
}

#[test]
fn frontend_with_only_excluded_endpoints_passes_through() {
    let (d, r) = compute_docs(
        &[
            svc("other", "flannel-app", "10.96.1.1", HTTP),
            slice(
                "other",
                "flannel-app-1",
                "flannel-app",
                HTTP_EP,
                &[Ep::new("10.244.1.5"), Ep::new("10.244.2.7").ready(false)],
            ),
            svc("default", "web", "10.96.0.1", HTTP),
            slice("default", "web-1", "web", HTTP_EP, &[Ep::new("10.0.0.1")]),
        ],
        &seed_exclusion(),
    );
    let fe = tcp("10.96.1.1", 80);
    assert!(!d.frontends.contains_key(&fe), "{:?}", d.frontends);
    assert!(!d.owners.contains_key(&fe));
    assert_eq!(
        r.passthrough,
        [(fe, oref(ObjectKind::Service, "other", "flannel-app"))].into()
    );
    let excluded: Vec<_> = r.excluded.iter().map(|(_, b)| *b).collect();
    assert_eq!(excluded, [be("10.244.1.5", 8080), be("10.244.2.7", 8080)]);
    // The unrelated Service is unaffected.
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.1", 8080)]
    );
    // Without the exclusion the same input programs the frontend.
    let (d, r) = run(&[
        svc("other", "flannel-app", "10.96.1.1", HTTP),
        slice(
            "other",
            "flannel-app-1",
            "flannel-app",
            HTTP_EP,
            &[Ep::new("10.244.1.5")],
        ),
    ]);
    assert_eq!(backends_of(&d, fe), [be("10.244.1.5", 8080)]);
    assert!(r.passthrough.is_empty() && r.excluded.is_empty());
}

#[test]
fn passthrough_is_decided_per_service_port() {
    // http is served only by excluded pods, metrics only by ours.
    let (d, r) = compute_docs(
        &[
            svc(
                "default",
                "split",
                "10.96.0.1",
                &[("http", 80, ""), ("metrics", 9100, "")],
            ),
            slice(
                "default",
                "split-1",
                "split",
                HTTP_EP,
                &[Ep::new("10.244.0.3")],
            ),
            slice(
                "default",
                "split-2",
                "split",
                &[("metrics", 9100, "")],
                &[Ep::new("10.0.0.3")],
            ),
        ],
        &seed_exclusion(),
    );
    assert_eq!(
        ports_of(&d).keys().copied().collect::<Vec<_>>(),
        [tcp("10.96.0.1", 9100)]
    );
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 9100)),
        [be("10.0.0.3", 9100)]
    );
    assert_eq!(
        r.passthrough.keys().copied().collect::<Vec<_>>(),
        [tcp("10.96.0.1", 80)]
    );
}

#[test]
fn service_without_any_endpoint_is_rejected_not_passed_through() {
    let (d, r) = compute_docs(
        &[
            svc("default", "empty", "10.96.0.30", HTTP),
            // A slice with ports but no endpoints is the same as none.
            svc("default", "empty2", "10.96.0.31", HTTP),
            slice("default", "empty2-1", "empty2", HTTP_EP, &[]),
        ],
        &seed_exclusion(),
    );
    assert_eq!(backends_of(&d, tcp("10.96.0.30", 80)), []);
    assert_eq!(backends_of(&d, tcp("10.96.0.31", 80)), []);
    assert!(r.passthrough.is_empty());
    assert!(r.excluded.is_empty());
}

// ---------------------------------------------------------------- malformed input

#[test]
fn malformed_objects_are_reported_and_the_rest_is_programmed() {
    let too_many: Vec<Ep> = (0..1001)
        .map(|i| Ep::new(&format!("10.9.{}.{}", i / 250, i % 250 + 1)))
        .collect();
    let docs = [
        svc("default", "good", "10.96.0.1", HTTP),
        slice("default", "good-1", "good", HTTP_EP, &[Ep::new("10.0.0.1")]),
        svc("default", "banana", "banana", HTTP),
        svc("default", "port-zero", "10.96.0.2", &[("http", 0, "")]),
        svc("default", "port-big", "10.96.0.3", &[("http", 70000, "")]),
        svc("default", "icmp", "10.96.0.4", &[("http", 80, "ICMP")]),
        // Slices claiming `good` that must not contribute endpoints.
        slice("default", "huge", "good", HTTP_EP, &too_many),
        slice(
            "default",
            "bad-proto",
            "good",
            &[("http", 8080, "ICMP")],
            &[Ep::new("10.0.0.66")],
        ),
        Slice::new("default", "no-label")
            .port("http", 8080, "")
            .endpoint(Ep::new("10.0.0.77"))
            .into(),
    ];
    let (d, r) = run(&docs);
    assert_eq!(
        invalid_names(&r),
        [
            "EndpointSlice default/bad-proto",
            "EndpointSlice default/huge",
            "EndpointSlice default/no-label",
            "Service default/banana",
            "Service default/icmp",
            "Service default/port-big",
            "Service default/port-zero",
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(r.invalid.len(), 7, "each object once: {:?}", r.invalid);
    assert_eq!(ports_of(&d).len(), 1, "{:?}", d.frontends);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.1", 8080)]
    );
    assert!(r.ignored.is_empty(), "{:?}", r.ignored);
}

#[test]
fn slice_with_two_ports_of_one_name_is_malformed() {
    // Found by the model_events fuzz target: `http` without a number, then
    // `http` 8081. The model skipped the first and took 8081, the oracle
    // took the first and gave no endpoint; the API refuses such a slice.
    let docs = |ports: &[(&str, Option<i32>, &str)]| {
        let slice = ports.iter().fold(
            Slice::new("default", "web-1").service("web"),
            |s, (name, port, proto)| {
                s.with_port(k8s_openapi::api::discovery::v1::EndpointPort {
                    name: Some((*name).to_owned()),
                    port: *port,
                    protocol: Some((*proto).to_owned()),
                    app_protocol: None,
                })
            },
        );
        [
            svc("default", "web", "10.96.0.1", HTTP),
            slice.endpoint(Ep::new("10.0.0.1")).into(),
        ]
    };
    for ports in [
        [("http", None, "TCP"), ("http", Some(8081), "TCP")],
        [("http", Some(8080), "TCP"), ("http", Some(8081), "TCP")],
        // Unique by name alone, as the API has it.
        [("http", Some(8080), "TCP"), ("http", Some(8081), "UDP")],
        [("", Some(8080), "TCP"), ("", Some(8081), "UDP")],
    ] {
        let (d, r) = run(&docs(&ports));
        assert_eq!(
            invalid_names(&r),
            BTreeSet::from(["EndpointSlice default/web-1".to_owned()]),
            "{ports:?}"
        );
        assert!(
            backends_of(&d, tcp("10.96.0.1", 80)).is_empty(),
            "{ports:?}"
        );
    }
    // Distinct names stay valid, a numberless one included.
    let (d, r) = run(&docs(&[("http", Some(8080), "TCP"), ("all", None, "TCP")]));
    assert!(r.invalid.is_empty(), "{:?}", r.invalid);
    assert_eq!(
        backends_of(&d, tcp("10.96.0.1", 80)),
        [be("10.0.0.1", 8080)]
    );
}

#[test]
fn slice_at_the_endpoint_limit_is_still_valid() {
    let eps: Vec<Ep> = (0..1000)
        .map(|i| Ep::new(&format!("10.9.{}.{}", i / 250, i % 250 + 1)))
        .collect();
    let (d, r) = run(&[
        svc("default", "big", "10.96.0.1", HTTP),
        slice("default", "big-1", "big", HTTP_EP, &eps),
    ]);
    assert!(r.invalid.is_empty(), "{:?}", r.invalid);
    assert_eq!(backends_of(&d, tcp("10.96.0.1", 80)).len(), 1000);
}

// ---------------------------------------------------------------- protocols

#[test]
fn udp_port_gives_a_udp_frontend() {
    let (d, _) = run(&[
        svc(
            "kube-system",
            "kube-dns",
            "10.96.0.10",
            &[("dns", 53, "UDP")],
        ),
        slice(
            "kube-system",
            "kube-dns-1",
            "kube-dns",
            &[("dns", 53, "UDP")],
            &[Ep::new("10.0.5.2"), Ep::new("10.0.5.1")],
        ),
    ]);
    assert_eq!(
        ports_of(&d).keys().copied().collect::<Vec<_>>(),
        [udp("10.96.0.10", 53)]
    );
    let fe = *ports_of(&d).keys().next().unwrap();
    let fe = &fe;
    assert_eq!(fe.proto, Proto::Udp);
    assert_eq!(fe.proto.number(), lb_common::PROTO_UDP);
    assert_eq!(
        backends_of(&d, udp("10.96.0.10", 53)),
        [be("10.0.5.1", 53), be("10.0.5.2", 53)]
    );
}

#[test]
fn proto_numbers_round_trip() {
    for p in [Proto::Tcp, Proto::Udp] {
        assert_eq!(Proto::from_number(p.number()), Some(p));
    }
    assert_eq!(Proto::from_number(132), None);
    assert_ne!(Proto::Tcp.number(), Proto::Udp.number());
}

#[test]
fn endpoint_topology_and_raw_conditions_are_kept() {
    let o = objects(&[Slice::new("", "web-1")
        .service("web")
        .port("http", 8080, "")
        .endpoint(
            Ep::new("10.0.0.1")
                .node("n1")
                .zone("z1")
                .hint_zone("z1")
                .hint_node("n1"),
        )
        .endpoint(Ep::new("10.0.0.2").ready(false).terminating(true))
        .into()]);
    let slice::Verdict::Use(spec) = slice::validate(&o.slices[0], &mut Default::default()) else {
        panic!("valid slice refused");
    };
    let [a, b] = &spec.endpoints[..] else {
        panic!("{spec:?}");
    };
    let t = a.topology.as_deref().expect("topology kept");
    assert!(b.topology.is_none());
    assert_eq!(
        (t.node_name.as_deref(), t.zone.as_deref()),
        (Some("n1"), Some("z1"))
    );
    assert_eq!(
        (&t.for_zones[..], &t.for_nodes[..]),
        (&["z1".to_owned()][..], &["n1".to_owned()][..])
    );
    assert_eq!((a.ready, a.serving, a.terminating), (None, None, None));
    assert!(a.is_ready() && a.is_serving() && !a.is_terminating());
    // Unset `serving` counts as true even when not ready, as in kube-proxy.
    assert_eq!(
        (b.ready, b.serving, b.terminating),
        (Some(false), None, Some(true))
    );
    assert!(!b.is_ready() && b.is_serving() && b.is_terminating());
}

#[test]
fn service_policies_affinity_and_external_addresses_are_kept() {
    let o = objects(&[Svc::new("", "rich")
        .type_("NodePort")
        .cluster_ip("10.96.0.8")
        .external_ips(&["192.0.2.10"])
        .client_ip_affinity(Some(60))
        .internal_traffic_policy("Local")
        .traffic_distribution("PreferClose")
        .with_port(SvcPort::new("http", 80, "").node_port(30080))
        .into()]);
    let service::Verdict::Program(spec) = service::validate(&o.services[0]) else {
        panic!("valid Service refused");
    };
    assert_eq!(spec.type_, ServiceType::NodePort);
    assert_eq!(spec.affinity, Affinity::ClientIp { timeout_secs: 60 });
    assert_eq!(spec.internal_policy, TrafficPolicy::Local);
    assert_eq!(spec.external_policy, TrafficPolicy::Cluster);
    assert_eq!(spec.external_ips, ["192.0.2.10".parse::<IpAddr>().unwrap()]);
    assert_eq!(spec.ports[0].node_port, Some(30080));
    assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferClose"));
}
