//! The incremental [`Cache`] against a naive oracle written from kube-proxy's
//! rules directly on the Kubernetes objects: same answer after any sequence
//! of events, and every change reported as touched.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr},
};

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

use lb_fixtures::{Ep, Slice, Svc, SvcPort};

use crate::test_rng::Rng;

use super::{
    oracle::{Shown, check, label_of, naive, shown},
    *,
};

// ---------------------------------------------------------------- helpers

/// Ports: (name, port, protocol), empty for unset.
type Ports<'a> = &'a [(&'a str, i32, &'a str)];

fn svc(ns: &str, name: &str, cluster_ip: &str, ports: Ports<'_>) -> Service {
    let svc = Svc::new(ns, name).cluster_ip(cluster_ip);
    with_ports(svc, ports).build()
}

fn with_ports(svc: Svc, ports: Ports<'_>) -> Svc {
    ports
        .iter()
        .fold(svc, |s, (n, p, proto)| s.port(n, *p, proto))
}

fn slice_ports(slice: Slice, ports: Ports<'_>) -> Slice {
    ports
        .iter()
        .fold(slice, |s, (n, p, proto)| s.port(n, *p, proto))
}

/// An IPv4 EndpointSlice labelled for `service`.
fn slice(ns: &str, name: &str, service: &str, ports: Ports<'_>, endpoints: &[Ep]) -> EndpointSlice {
    slice_ports(Slice::new(ns, name).service(service), ports)
        .endpoints(endpoints.iter().cloned())
        .build()
}

/// `s` with `n` more ready endpoints appended.
fn padded(mut s: EndpointSlice, n: u32) -> EndpointSlice {
    let eps = s.endpoints.get_or_insert_with(Vec::new);
    for i in 0..n {
        eps.push(k8s_openapi::api::discovery::v1::Endpoint {
            addresses: vec![Ipv4Addr::from(0x0a09_0000 + i).to_string()],
            ..Default::default()
        });
    }
    s
}

fn tcp(vip: &str, port: u16) -> Frontend {
    Frontend {
        vip: vip.parse().unwrap(),
        port,
        proto: Proto::Tcp,
        scope: Scope::Internal,
    }
}

fn be(addr: &str, port: u16) -> Backend {
    Backend {
        ip: addr.parse().unwrap(),
        port,
    }
}

const HTTP: Ports<'static> = &[("http", 80, "")];
const HTTP_EP: Ports<'static> = &[("http", 8080, "")];

fn eps(ips: &[&str]) -> Vec<Ep> {
    ips.iter().map(|ip| Ep::new(ip)).collect()
}

fn desired_of(c: &Cache, fe: &Frontend) -> Option<Vec<Backend>> {
    c.desired(fe).map(|t| t.backends.clone())
}

/// `touched` without the wildcard frontends every cluster IP also has.
fn ports(touched: &BTreeSet<Frontend>) -> BTreeSet<Frontend> {
    touched
        .iter()
        .filter(|fe| !fe.is_wildcard())
        .copied()
        .collect()
}

fn is_invalid(a: &Admission, object: &ObjectRef) -> bool {
    matches!(a, Admission::Invalid(inv) if inv.object == *object)
}

// ---------------------------------------------------------------- random events

/// Services: five in `a`, and one of the same name in `b`.
const SERVICES: [(&str, &str); 6] = [
    ("a", "s0"),
    ("a", "s1"),
    ("a", "s2"),
    ("a", "s3"),
    ("a", "s4"),
    ("b", "s0"),
];
/// Slices, labelled for any of these Services (s5 never exists).
const SLICES: [(&str, &str); 8] = [
    ("a", "e0"),
    ("a", "e1"),
    ("a", "e2"),
    ("a", "e3"),
    ("a", "e4"),
    ("a", "e5"),
    ("b", "e0"),
    ("b", "e1"),
];
const LABELS: [&str; 6] = ["s0", "s1", "s2", "s3", "s4", "s5"];

/// Service ports: `http` renumbered (81) or renamed (`web`), both clashing
/// with the first one when chosen together (an invalid Service).
const SERVICE_PORTS: [(&str, i32, &str); 7] = [
    ("http", 80, ""),
    ("dns", 53, "UDP"),
    ("http", 81, ""),
    ("web", 80, ""),
    ("", 8443, ""),
    ("dns-tcp", 53, "TCP"),
    ("assoc", 9, "SCTP"),
];
const SLICE_PORTS: [(&str, i32, &str); 6] = [
    ("http", 8080, ""),
    ("dns", 5353, "UDP"),
    ("web", 9090, ""),
    ("", 8443, ""),
    ("dns-tcp", 5354, "TCP"),
    ("http", 8081, "TCP"),
];
/// Endpoint addresses; 10.244/16 is excluded.
const ADDRESSES: [&str; 8] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.0.3",
    "10.0.0.4",
    "10.0.0.5",
    "10.0.0.6",
    "10.244.0.1",
    "10.244.0.2",
];
/// Endpoint conditions: none, ready, not ready, serving and terminating,
/// terminating only.
const CONDITIONS: [fn(Ep) -> Ep; 5] = [
    |e| e,
    |e| e.ready(true),
    |e| e.ready(false),
    |e| e.ready(false).serving(true).terminating(true),
    |e| e.ready(false).serving(false).terminating(true),
];

/// The external addresses the generator uses that are nobody's cluster IP.
const EXTERNAL: [&str; 4] = ["192.0.2.1", "fd00::7", "198.51.100.1", "198.51.100.2"];

fn random_service(rng: &mut Rng, ns: &str, name: &str) -> Service {
    let ports = rng.subset(&SERVICE_PORTS, 3);
    let svc = Svc::new(ns, name);
    let svc = match rng.below(20) {
        0 => svc.cluster_ip("bogus"),
        1 => svc.cluster_ip("None"),
        2 => return svc.external_name("example.com").build(),
        3 => svc
            .cluster_ip("10.96.0.4")
            .cluster_ips(&["10.96.0.4", "fd00::4"]),
        4 => svc,
        // Few VIPs, so Services often collide on one.
        _ => svc.cluster_ip(rng.pick::<&str>(&["10.96.0.1", "10.96.0.2", "10.96.0.3"])),
    };
    let svc = match rng.below(6) {
        // Few external addresses too, and some equal to a cluster IP.
        0 => svc.external_ips(&[rng.pick::<&str>(&[EXTERNAL[0], EXTERNAL[1], "10.96.0.3"])]),
        1 => svc.lb_ingress(
            rng.pick::<&str>(&EXTERNAL[2..]),
            *rng.pick(&[None, Some("VIP"), Some("Proxy")]),
        ),
        2 => svc
            .lb_ingress_ip("198.51.100.1")
            .source_ranges(&[rng.pick::<&str>(&["203.0.113.0/24", "2001:db8::/32"])]),
        _ => svc,
    };
    // Node ports on about a third of the ports, from a small range.
    ports
        .iter()
        .fold(svc, |s, (n, p, proto)| {
            let port = SvcPort::new(n, *p, proto);
            s.with_port(match rng.below(3) {
                0 => port.node_port(*rng.pick(&[30080, 30081])),
                _ => port,
            })
        })
        .build()
}

fn random_slice(rng: &mut Rng, ns: &str, name: &str) -> EndpointSlice {
    let ports = rng.subset(&SLICE_PORTS, 3);
    let n = rng.below(5);
    let endpoints: Vec<Ep> = (0..n)
        .map(|_| {
            let ep = Ep::new(rng.pick::<&str>(&ADDRESSES));
            rng.pick(&CONDITIONS)(ep)
        })
        .collect();
    let body = |s: Slice, kind: &str| {
        slice_ports(s.address_type(kind), &ports).endpoints(endpoints.iter().cloned())
    };
    let label = *rng.pick(&LABELS);
    // Weights: drained (ours or Cilium's), others, and none that is valid.
    let weight = *rng.pick(&[
        None,
        None,
        None,
        Some(("lb-agent.io/weight", "0")),
        Some(("service.cilium.io/weight", "0")),
        Some(("lb-agent.io/weight", "3")),
        Some(("lb-agent.io/weight", "-1")),
    ]);
    let labelled = weight
        .into_iter()
        .fold(Slice::new(ns, name).service(label), |s, (k, v)| {
            s.annotation(k, v)
        });
    match rng.below(25) {
        0 => body(Slice::new(ns, name), "IPv4").build(),
        1 => body(labelled, "FQDN").build(),
        2 => labelled
            .address_type("IPv6")
            .port("http", 8080, "")
            .port("", 8443, "")
            .endpoint(Ep::new("fd00::9"))
            .endpoint(Ep::new("fd00::8").ready(false))
            .build(),
        3 => padded(body(labelled, "IPv4").build(), 1001),
        4 => labelled
            .port("http", 8080, "")
            .endpoint(Ep::new("fd00::9"))
            .build(),
        _ => body(labelled, "IPv4").build(),
    }
}

/// How often each kind of event happened, to keep the generator honest.
#[derive(Debug, Default)]
struct Seen {
    invalid: usize,
    /// Invalid updates of an object that had a valid version in force.
    kept: usize,
    ignored: usize,
    relabelled: usize,
    conflicts: usize,
    takeovers: usize,
    /// IPv6 frontends shown, over all flushes.
    v6: usize,
    relists: usize,
    flushes: usize,
    /// Frontends programmed with at least one backend, over all flushes.
    served: usize,
    touched: usize,
    /// External frontends (external IPs, LB VIPs, node ports) shown.
    external: usize,
}

fn run_incremental_against_batch(seed: u64, steps: usize, seen: &mut Seen) {
    let excluded = ExcludedCidrs::parse(["10.244.0.0/16"]).unwrap();
    let mut rng = Rng(seed);
    let mut cache = Cache::new(excluded.clone(), NodeContext::named("node-a"));
    let mut node_port_ips: Vec<IpAddr> = Vec::new();
    // The objects in force: an invalid update leaves the previous version.
    let mut services: BTreeMap<(String, String), Service> = BTreeMap::new();
    let mut slices: BTreeMap<(String, String), EndpointSlice> = BTreeMap::new();
    let mut before = Shown::new();

    for step in 0..steps {
        match rng.below(22) {
            // The node's NodePort addresses change.
            21 => {
                node_port_ips = rng
                    .pick::<&[&str]>(&[&[], &["192.0.2.10"], &["192.0.2.10", "fd00::10"]])
                    .iter()
                    .map(|ip| ip.parse().unwrap())
                    .collect();
                cache.set_node_port_ips(node_port_ips.clone());
            }
            // A relist that misses one object: it is gone, delete seen or not.
            19 if !services.is_empty() => {
                let gone = services
                    .keys()
                    .nth(rng.below(services.len()))
                    .unwrap()
                    .clone();
                services.remove(&gone);
                for (_, a) in cache.replace_services(services.values()) {
                    assert!(!matches!(a, Admission::Invalid(_)), "{a:?}");
                }
                seen.relists += 1;
            }
            20 if !slices.is_empty() => {
                let gone = slices.keys().nth(rng.below(slices.len())).unwrap().clone();
                slices.remove(&gone);
                for (_, a) in cache.replace_slices(slices.values()) {
                    assert!(!matches!(a, Admission::Invalid(_)), "{a:?}");
                }
                seen.relists += 1;
            }
            0..=7 => {
                let (ns, name) = *rng.pick(&SERVICES);
                let s = random_service(&mut rng, ns, name);
                match cache.apply_service(&s) {
                    Admission::Invalid(inv) => {
                        assert_eq!(inv.object, ObjectRef::service(ns, name));
                        seen.invalid += 1;
                        seen.kept += usize::from(services.contains_key(&(ns.into(), name.into())));
                    }
                    a => {
                        seen.ignored += usize::from(matches!(a, Admission::Ignored(_)));
                        services.insert((ns.into(), name.into()), s);
                    }
                }
            }
            8..=15 => {
                let (ns, name) = *rng.pick(&SLICES);
                let s = random_slice(&mut rng, ns, name);
                match cache.apply_slice(&s) {
                    Admission::Invalid(inv) => {
                        assert_eq!(inv.object, ObjectRef::slice(ns, name));
                        seen.invalid += 1;
                        seen.kept += usize::from(slices.contains_key(&(ns.into(), name.into())));
                    }
                    a => {
                        seen.ignored += usize::from(matches!(a, Admission::Ignored(_)));
                        let old = slices.insert((ns.into(), name.into()), s.clone());
                        let old_label = old.as_ref().and_then(label_of);
                        seen.relabelled +=
                            usize::from(old_label.is_some() && old_label != label_of(&s));
                    }
                }
            }
            16 | 17 => {
                let (ns, name) = *rng.pick(&SERVICES);
                cache.delete_service(ns, name);
                services.remove(&(ns.into(), name.into()));
            }
            _ => {
                let (ns, name) = *rng.pick(&SLICES);
                cache.delete_slice(ns, name);
                slices.remove(&(ns.into(), name.into()));
            }
        }
        if rng.below(3) != 0 && step + 1 != steps {
            continue;
        }

        let flush = cache.flush();
        seen.flushes += 1;
        seen.touched += flush.touched.len();
        let oracle = naive(
            services.values(),
            slices.values(),
            &excluded,
            &node_port_ips,
        );
        let after = check(
            &cache,
            &flush,
            &before,
            &oracle,
            &format!("seed {seed} step {step}"),
        );
        seen.served += after.values().filter(|(b, _)| !b.is_empty()).count();
        seen.v6 += after.keys().filter(|fe| fe.vip.is_ipv6()).count();
        seen.external += after
            .keys()
            .filter(|fe| fe.port >= 30080 || EXTERNAL.contains(&fe.vip.to_string().as_str()))
            .count();
        seen.conflicts += oracle.conflicts.len();
        // A frontend that changed hands: its owner went away, another took over.
        seen.takeovers += after
            .iter()
            .filter(|(f, (_, o))| before.get(f).is_some_and(|(_, w)| w != o))
            .count();
        before = after;
    }
}

#[test]
fn incremental_updates_match_the_batch_computation() {
    let mut seen = Seen::default();
    for seed in [1, 2, 3, 42, 0xdead_beef, 0x1234_5678_9abc] {
        run_incremental_against_batch(seed, 200, &mut seen);
    }
    // The generator really produced the interesting cases.
    for (what, n) in [
        ("invalid", seen.invalid),
        ("kept", seen.kept),
        ("served", seen.served),
        ("ignored", seen.ignored),
        ("relabelled", seen.relabelled),
        ("conflicts", seen.conflicts),
        ("takeovers", seen.takeovers),
        ("v6", seen.v6),
        ("relists", seen.relists),
        ("flushes", seen.flushes),
        ("touched", seen.touched),
        ("external", seen.external),
    ] {
        assert!(n >= 10, "only {n} {what}: {seen:?}");
    }
}

// ---------------------------------------------------------------- conflicts

#[test]
fn loser_takes_over_when_the_winner_goes_away() {
    let fe = tcp("10.96.0.1", 80);
    let (alpha, beta) = (
        ObjectRef::service("default", "alpha"),
        ObjectRef::service("default", "beta"),
    );
    let mut c = Cache::default();
    // The loser arrives first: arrival order must not matter.
    for s in [
        svc("default", "beta", "10.96.0.1", HTTP),
        svc("default", "alpha", "10.96.0.1", HTTP),
    ] {
        assert_eq!(c.apply_service(&s), Admission::Accepted);
    }
    for s in [
        slice("default", "alpha-1", "alpha", HTTP_EP, &eps(&["10.0.0.1"])),
        slice("default", "beta-1", "beta", HTTP_EP, &eps(&["10.0.0.2"])),
    ] {
        assert_eq!(c.apply_slice(&s), Admission::Accepted);
    }
    assert!(c.flush().touched.contains(&fe));
    assert_eq!(desired_of(&c, &fe), Some(vec![be("10.0.0.1", 8080)]));
    assert_eq!(c.winner(&fe).map(|(o, _)| o), Some(&alpha));
    assert_eq!(
        c.conflicts()
            .filter(|(f, _)| !f.is_wildcard())
            .collect::<Vec<_>>(),
        [(&fe, &beta)]
    );

    // The loser's own changes are tracked while it loses.
    c.apply_slice(&slice(
        "default",
        "beta-1",
        "beta",
        HTTP_EP,
        &eps(&["10.0.0.2", "10.0.0.3"]),
    ));
    c.flush();
    assert_eq!(desired_of(&c, &fe), Some(vec![be("10.0.0.1", 8080)]));

    c.delete_service("default", "alpha");
    let flush = c.flush();
    assert_eq!(ports(&flush.touched), BTreeSet::from([fe]));
    assert_eq!(
        desired_of(&c, &fe),
        Some(vec![be("10.0.0.2", 8080), be("10.0.0.3", 8080)])
    );
    assert_eq!(c.winner(&fe).map(|(o, _)| o), Some(&beta));
    assert_eq!(c.conflicts().count(), 0);
    assert_eq!(
        c.programmed()
            .map(|(_, _, o)| o)
            .collect::<BTreeSet<_>>()
            .len(),
        1
    );

    // Back again: the first by name wins again, whatever the arrival order.
    c.apply_service(&svc("default", "alpha", "10.96.0.1", HTTP));
    assert!(c.flush().touched.contains(&fe));
    assert_eq!(desired_of(&c, &fe), Some(vec![be("10.0.0.1", 8080)]));

    // The winner moving to another port (or becoming headless) hands over too.
    c.apply_service(&svc("default", "alpha", "10.96.0.1", &[("http", 8000, "")]));
    let flush = c.flush();
    assert!(flush.touched.contains(&fe) && flush.touched.contains(&tcp("10.96.0.1", 8000)));
    assert_eq!(c.winner(&fe).map(|(o, _)| o), Some(&beta));
    assert_eq!(
        desired_of(&c, &tcp("10.96.0.1", 8000)),
        Some(vec![be("10.0.0.1", 8080)])
    );
    c.apply_service(&svc("default", "alpha", "10.96.0.1", HTTP));
    c.flush();
    assert_eq!(c.winner(&fe).map(|(o, _)| o), Some(&alpha));
    let headless = svc("default", "alpha", "None", HTTP);
    assert!(matches!(c.apply_service(&headless), Admission::Ignored(_)));
    assert!(c.flush().touched.contains(&fe));
    assert_eq!(c.winner(&fe).map(|(o, _)| o), Some(&beta));
    assert_eq!(desired_of(&c, &fe).map(|b| b.len()), Some(2));

    // The last claimant gone: nothing left to program.
    c.delete_service("default", "beta");
    assert_eq!(ports(&c.flush().touched), BTreeSet::from([fe]));
    assert_eq!(c.desired(&fe), None);
    assert_eq!(c.programmed().count(), 0);
    assert_eq!(
        c.programmed()
            .map(|(_, _, o)| o)
            .collect::<BTreeSet<_>>()
            .len(),
        0
    );
}

// ---------------------------------------------------------------- invalid and ignored updates

#[test]
fn invalid_service_update_keeps_the_last_valid_version() {
    let fe = tcp("10.96.0.1", 80);
    let object = ObjectRef::service("default", "web");
    let mut c = Cache::default();
    c.apply_service(&svc("default", "web", "10.96.0.1", HTTP));
    c.apply_slice(&slice(
        "default",
        "web-1",
        "web",
        HTTP_EP,
        &eps(&["10.0.0.1"]),
    ));
    c.flush();
    let before = shown(&c);
    assert_eq!(desired_of(&c, &fe), Some(vec![be("10.0.0.1", 8080)]));

    for bad in [
        svc("default", "web", "banana", HTTP),
        svc("default", "web", "10.96.0.9", &[("http", 0, "")]),
        svc(
            "default",
            "web",
            "10.96.0.9",
            &[("http", 80, ""), ("http", 81, "")],
        ),
    ] {
        let a = c.apply_service(&bad);
        assert!(is_invalid(&a, &object), "{a:?}");
        assert_eq!(c.flush(), Flush::default());
        assert_eq!(shown(&c), before);
    }

    // A later valid update applies, and the old frontend goes.
    let a = c.apply_service(&svc("default", "web", "10.96.0.2", HTTP));
    assert_eq!(a, Admission::Accepted);
    let flush = c.flush();
    assert_eq!(
        ports(&flush.touched),
        BTreeSet::from([fe, tcp("10.96.0.2", 80)])
    );
    assert_eq!(c.desired(&fe), None);
    assert_eq!(
        desired_of(&c, &tcp("10.96.0.2", 80)),
        Some(vec![be("10.0.0.1", 8080)])
    );
}

#[test]
fn invalid_slice_update_keeps_the_last_valid_version() {
    let fe = tcp("10.96.0.1", 80);
    let other = tcp("10.96.0.2", 80);
    let object = ObjectRef::slice("default", "web-1");
    let mut c = Cache::default();
    c.apply_service(&svc("default", "web", "10.96.0.1", HTTP));
    c.apply_service(&svc("default", "api", "10.96.0.2", HTTP));
    let good = slice("default", "web-1", "web", HTTP_EP, &eps(&["10.0.0.1"]));
    assert_eq!(c.apply_slice(&good), Admission::Accepted);
    c.flush();
    let before = shown(&c);
    assert_eq!(desired_of(&c, &fe), Some(vec![be("10.0.0.1", 8080)]));
    assert_eq!(desired_of(&c, &other), Some(vec![]));

    let too_many = padded(
        slice("default", "web-1", "web", HTTP_EP, &eps(&["10.0.0.2"])),
        1000,
    );
    let no_label = slice_ports(Slice::new("default", "web-1"), HTTP_EP)
        .endpoints(eps(&["10.0.0.3"]))
        .build();
    let empty_label = slice("default", "web-1", "", HTTP_EP, &eps(&["10.0.0.3"]));
    let bad_address = slice("default", "web-1", "api", HTTP_EP, &eps(&["fd00::1"]));
    let bad_port = slice(
        "default",
        "web-1",
        "api",
        &[("http", 0, "")],
        &eps(&["10.0.0.4"]),
    );
    for bad in [too_many, no_label, empty_label, bad_address, bad_port] {
        let a = c.apply_slice(&bad);
        assert!(is_invalid(&a, &object), "{a:?}");
        assert_eq!(c.flush(), Flush::default());
        assert_eq!(shown(&c), before);
    }

    // A valid update applies, even straight after an invalid one.
    let grown = slice(
        "default",
        "web-1",
        "web",
        HTTP_EP,
        &eps(&["10.0.0.1", "10.0.0.5"]),
    );
    assert_eq!(c.apply_slice(&grown), Admission::Accepted);
    assert_eq!(ports(&c.flush().touched), BTreeSet::from([fe]));
    assert_eq!(
        desired_of(&c, &fe),
        Some(vec![be("10.0.0.1", 8080), be("10.0.0.5", 8080)])
    );
}

#[test]
fn ignored_update_drops_the_old_version() {
    let fe = tcp("10.96.0.1", 80);
    let mut c = Cache::default();
    c.apply_service(&svc("default", "web", "10.96.0.1", HTTP));
    c.apply_slice(&slice(
        "default",
        "web-1",
        "web",
        HTTP_EP,
        &eps(&["10.0.0.1"]),
    ));
    c.apply_slice(&slice(
        "default",
        "web-2",
        "web",
        HTTP_EP,
        &eps(&["10.0.0.2"]),
    ));
    c.flush();
    assert_eq!(desired_of(&c, &fe).map(|b| b.len()), Some(2));

    let fqdn = Slice::new("default", "web-2")
        .service("web")
        .address_type("FQDN")
        .port("http", 8080, "")
        .endpoint(Ep::new("example.com"))
        .build();
    assert!(matches!(c.apply_slice(&fqdn), Admission::Ignored(_)));
    assert_eq!(ports(&c.flush().touched), BTreeSet::from([fe]));
    assert_eq!(desired_of(&c, &fe), Some(vec![be("10.0.0.1", 8080)]));

    let external = Svc::new("default", "web")
        .external_name("example.com")
        .build();
    assert!(matches!(c.apply_service(&external), Admission::Ignored(_)));
    assert_eq!(ports(&c.flush().touched), BTreeSet::from([fe]));
    assert_eq!(c.desired(&fe), None);
    assert_eq!(c.programmed().count(), 0);
}

// ---------------------------------------------------------------- slices moving

#[test]
fn relabelled_slice_moves_its_endpoints_and_deleted_slice_takes_them_away() {
    let (fa, fb) = (tcp("10.96.0.1", 80), tcp("10.96.0.2", 80));
    let mut c = Cache::default();
    c.apply_service(&svc("default", "a", "10.96.0.1", HTTP));
    c.apply_service(&svc("default", "b", "10.96.0.2", HTTP));
    c.apply_slice(&slice("default", "a-1", "a", HTTP_EP, &eps(&["10.0.0.1"])));
    c.apply_slice(&slice("default", "x", "a", HTTP_EP, &eps(&["10.0.0.7"])));
    c.flush();
    assert_eq!(
        desired_of(&c, &fa),
        Some(vec![be("10.0.0.1", 8080), be("10.0.0.7", 8080)])
    );
    assert_eq!(desired_of(&c, &fb), Some(vec![]));

    // Relabelled from a to b.
    c.apply_slice(&slice("default", "x", "b", HTTP_EP, &eps(&["10.0.0.7"])));
    let flush = c.flush();
    assert_eq!(ports(&flush.touched), BTreeSet::from([fa, fb]));
    assert_eq!(desired_of(&c, &fa), Some(vec![be("10.0.0.1", 8080)]));
    assert_eq!(desired_of(&c, &fb), Some(vec![be("10.0.0.7", 8080)]));

    // To a Service that does not exist (yet): its endpoints wait there.
    c.apply_slice(&slice("default", "x", "c", HTTP_EP, &eps(&["10.0.0.7"])));
    assert_eq!(ports(&c.flush().touched), BTreeSet::from([fb]));
    assert_eq!(desired_of(&c, &fb), Some(vec![]));
    c.apply_service(&svc("default", "c", "10.96.0.3", HTTP));
    c.flush();
    assert_eq!(
        desired_of(&c, &tcp("10.96.0.3", 80)),
        Some(vec![be("10.0.0.7", 8080)])
    );

    // Deleted: its endpoints go; the Service stays, rejecting.
    c.delete_slice("default", "x");
    assert_eq!(
        ports(&c.flush().touched),
        BTreeSet::from([tcp("10.96.0.3", 80)])
    );
    assert_eq!(desired_of(&c, &tcp("10.96.0.3", 80)), Some(vec![]));
    c.delete_slice("default", "a-1");
    assert_eq!(ports(&c.flush().touched), BTreeSet::from([fa]));
    assert_eq!(desired_of(&c, &fa), Some(vec![]));
    // Deleting what is not there touches nothing.
    c.delete_slice("default", "a-1");
    c.delete_slice("other", "nope");
    assert_eq!(c.flush(), Flush::default());
}

// ---------------------------------------------------------------- flush

#[test]
fn flush_with_nothing_dirty_touches_nothing() {
    let mut c = Cache::default();
    assert_eq!(c.flush(), Flush::default());
    c.apply_service(&svc("default", "a", "10.96.0.1", HTTP));
    c.apply_service(&svc("default", "b", "10.96.0.2", HTTP));
    c.apply_slice(&slice("default", "a-1", "a", HTTP_EP, &eps(&["10.0.0.1"])));
    assert_eq!(ports(&c.flush().touched).len(), 2);
    let before = shown(&c);
    assert_eq!(c.flush(), Flush::default());
    assert_eq!(c.flush(), Flush::default());
    assert_eq!(shown(&c), before);

    // Only the Service an event concerns is recomputed.
    c.apply_slice(&slice("default", "a-1", "a", HTTP_EP, &eps(&["10.0.0.2"])));
    assert_eq!(
        ports(&c.flush().touched),
        BTreeSet::from([tcp("10.96.0.1", 80)])
    );
    assert_eq!(c.flush(), Flush::default());
}
