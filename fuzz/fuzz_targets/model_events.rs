//! The model fed any sequence of Service and EndpointSlice events (upserts,
//! deletes, relists, zone changes) built from small pools of names,
//! addresses and ports, so that events collide: updates, conflicts,
//! relabelled slices, malformed updates. At every flush the incremental
//! [`Cache`] must agree with the naive oracle recomputing from scratch, and
//! report every frontend that changed (`model::oracle::check`, the check
//! `cache_tests.rs` makes on seeded random events).

#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use k8s_openapi::api::{
    core::v1::Service,
    discovery::v1::{Endpoint, EndpointConditions, EndpointSlice},
};
use lb_agent::model::{
    Admission, Cache, ExcludedCidrs, NodeContext,
    oracle::{self, Shown},
};
use lb_fixtures::{Slice, Svc};
use libfuzzer_sys::fuzz_target;

/// "" is no namespace: the same object as one in `default`.
const NAMESPACES: [&str; 3] = ["a", "default", ""];
/// "" is a Service without a name (malformed).
const SERVICE_NAMES: [&str; 4] = ["s0", "s1", "s2", ""];
const SLICE_NAMES: [&str; 4] = ["e0", "e1", "e2", "e3"];
/// Service-name labels; s3 never exists, "" is malformed.
const LABELS: [&str; 5] = ["s0", "s1", "s2", "s3", ""];
const TYPES: [Option<&str>; 6] = [
    None,
    Some("ClusterIP"),
    Some("NodePort"),
    Some("LoadBalancer"),
    Some("ExternalName"),
    Some("Bogus"),
];
/// `clusterIP`, then `clusterIPs`; few VIPs, so Services collide.
const CLUSTER_IPS: [(&str, &[&str]); 11] = [
    ("10.96.0.1", &[]),
    ("10.96.0.2", &[]),
    ("10.96.0.3", &[]),
    ("10.96.0.1", &["10.96.0.1", "fd00::1"]),
    ("fd00::1", &[]),
    ("None", &[]),
    ("", &[]),
    ("bogus", &[]),
    ("0.0.0.0", &[]),
    ("10.96.0.2", &["10.96.0.3"]),
    ("", &["10.96.0.1", ""]),
];
const PORT_NAMES: [&str; 4] = ["http", "dns", "", "web"];
const SERVICE_PORTS: [i32; 6] = [80, 53, 8443, 0, 70_000, -1];
const SLICE_PORTS: [Option<i32>; 6] = [
    Some(8080),
    Some(5353),
    Some(80),
    Some(0),
    Some(70_000),
    None,
];
const PROTOCOLS: [&str; 5] = ["", "TCP", "UDP", "SCTP", "tcp"];
const ADDRESS_TYPES: [&str; 4] = ["IPv4", "IPv6", "FQDN", "IPv5"];
/// 10.244/16 is excluded.
const ADDRESSES: [&str; 8] = [
    "10.0.0.1",
    "10.0.0.2",
    "10.0.0.3",
    "10.244.0.1",
    "10.244.0.2",
    "fd00::9",
    "fd00::a",
    "example.com",
];
const ZONES: [Option<&str>; 3] = [None, Some("zone-a"), Some("zone-b")];

fn pick<T: Copy>(pool: &[T], i: u8) -> T {
    pool[usize::from(i) % pool.len()]
}

#[derive(Arbitrary, Debug)]
struct Port {
    name: u8,
    port: u8,
    protocol: u8,
}

#[derive(Arbitrary, Debug)]
struct ServiceEvent {
    namespace: u8,
    name: u8,
    type_: u8,
    ips: u8,
    ports: Vec<Port>,
}

#[derive(Arbitrary, Debug)]
struct EndpointEvent {
    addresses: Vec<u8>,
    ready: Option<bool>,
    serving: Option<bool>,
    terminating: Option<bool>,
}

#[derive(Arbitrary, Debug)]
struct SliceEvent {
    namespace: u8,
    name: u8,
    /// Past the pool: no label.
    label: u8,
    address_type: u8,
    ports: Vec<Port>,
    endpoints: Vec<EndpointEvent>,
    /// 255: over the API's limit of 1,000 endpoints (malformed). Rare, as
    /// it costs a thousand allocations.
    oversized: u8,
}

#[derive(Arbitrary, Debug)]
enum Event {
    Service(ServiceEvent),
    Slice(SliceEvent),
    DeleteService {
        namespace: u8,
        name: u8,
    },
    DeleteSlice {
        namespace: u8,
        name: u8,
    },
    /// A relist of every Service in force but one.
    RelistServices {
        missing: u8,
    },
    RelistSlices {
        missing: u8,
    },
    Zone(u8),
    Flush,
}

fn service(e: &ServiceEvent) -> Service {
    let mut svc = Svc::new(pick(&NAMESPACES, e.namespace), pick(&SERVICE_NAMES, e.name));
    let (ip, ips) = pick(&CLUSTER_IPS, e.ips);
    if !ip.is_empty() {
        svc = svc.cluster_ip(ip);
    }
    if !ips.is_empty() {
        svc = svc.cluster_ips(ips);
    }
    match pick(&TYPES, e.type_) {
        Some("ExternalName") => svc = svc.external_name("example.com"),
        Some(t) => svc = svc.type_(t),
        None => {}
    }
    for p in e.ports.iter().take(4) {
        svc = svc.port(
            pick(&PORT_NAMES, p.name),
            pick(&SERVICE_PORTS, p.port),
            pick(&PROTOCOLS, p.protocol),
        );
    }
    svc.build()
}

fn slice(e: &SliceEvent) -> EndpointSlice {
    let mut b = Slice::new(pick(&NAMESPACES, e.namespace), pick(&SLICE_NAMES, e.name))
        .address_type(pick(&ADDRESS_TYPES, e.address_type));
    if let Some(label) = LABELS.get(usize::from(e.label)) {
        b = b.service(label);
    }
    let mut s = b.build();
    let ports = e
        .ports
        .iter()
        .take(4)
        .map(|p| k8s_openapi::api::discovery::v1::EndpointPort {
            name: Some(pick(&PORT_NAMES, p.name).to_owned()).filter(|n| !n.is_empty()),
            port: pick(&SLICE_PORTS, p.port),
            protocol: Some(pick(&PROTOCOLS, p.protocol).to_owned()).filter(|p| !p.is_empty()),
            app_protocol: None,
        });
    s.ports = Some(ports.collect());
    let endpoints = e.endpoints.iter().take(8).map(|ep| Endpoint {
        addresses: ep
            .addresses
            .iter()
            .take(2)
            .map(|&a| pick(&ADDRESSES, a).to_owned())
            .collect(),
        conditions: Some(EndpointConditions {
            ready: ep.ready,
            serving: ep.serving,
            terminating: ep.terminating,
        }),
        ..Endpoint::default()
    });
    let mut endpoints: Vec<Endpoint> = endpoints.collect();
    if e.oversized == u8::MAX {
        endpoints.resize_with(1001, || Endpoint {
            addresses: vec!["10.0.0.1".to_owned()],
            ..Endpoint::default()
        });
    }
    s.endpoints = Some(endpoints);
    s
}

/// `namespace/name` as the model keys an object: no namespace is `default`.
fn key(namespace: &str, name: &str) -> (String, String) {
    let ns = if namespace.is_empty() {
        "default"
    } else {
        namespace
    };
    (ns.to_owned(), name.to_owned())
}

/// The cache, and the objects in force: a malformed update leaves the
/// previous version in force, as it does in the model.
struct World {
    cache: Cache,
    excluded: ExcludedCidrs,
    services: BTreeMap<(String, String), Service>,
    slices: BTreeMap<(String, String), EndpointSlice>,
    before: Shown,
    flushes: usize,
}

impl World {
    fn apply(&mut self, event: &Event) {
        match event {
            Event::Service(e) => {
                let svc = service(e);
                let k = key(pick(&NAMESPACES, e.namespace), pick(&SERVICE_NAMES, e.name));
                if !matches!(self.cache.apply_service(&svc), Admission::Invalid(_)) {
                    self.services.insert(k, svc);
                }
            }
            Event::Slice(e) => {
                let s = slice(e);
                let k = key(pick(&NAMESPACES, e.namespace), pick(&SLICE_NAMES, e.name));
                if !matches!(self.cache.apply_slice(&s), Admission::Invalid(_)) {
                    self.slices.insert(k, s);
                }
            }
            Event::DeleteService { namespace, name } => {
                let (ns, name) = key(pick(&NAMESPACES, *namespace), pick(&SERVICE_NAMES, *name));
                self.cache.delete_service(&ns, &name);
                self.services.remove(&(ns, name));
            }
            Event::DeleteSlice { namespace, name } => {
                let (ns, name) = key(pick(&NAMESPACES, *namespace), pick(&SLICE_NAMES, *name));
                self.cache.delete_slice(&ns, &name);
                self.slices.remove(&(ns, name));
            }
            Event::RelistServices { missing } => {
                if let Some(gone) = nth_key(&self.services, *missing) {
                    self.services.remove(&gone);
                }
                for (o, a) in self.cache.replace_services(self.services.values()) {
                    assert!(!matches!(a, Admission::Invalid(_)), "{o}: {a:?}");
                }
            }
            Event::RelistSlices { missing } => {
                if let Some(gone) = nth_key(&self.slices, *missing) {
                    self.slices.remove(&gone);
                }
                for (o, a) in self.cache.replace_slices(self.slices.values()) {
                    assert!(!matches!(a, Admission::Invalid(_)), "{o}: {a:?}");
                }
            }
            Event::Zone(z) => self.cache.set_zone(pick(&ZONES, *z).map(str::to_owned)),
            Event::Flush => self.flush(),
        }
    }

    fn flush(&mut self) {
        let flush = self.cache.flush();
        let oracle = oracle::naive(
            self.services.values(),
            self.slices.values(),
            &self.excluded,
            &self.cache.node().node_port_ips,
        );
        let context = format!("flush {}", self.flushes);
        self.before = oracle::check(&self.cache, &flush, &self.before, &oracle, &context);
        self.flushes += 1;
    }
}

fn nth_key<V>(map: &BTreeMap<(String, String), V>, n: u8) -> Option<(String, String)> {
    if map.is_empty() {
        return None;
    }
    map.keys().nth(usize::from(n) % map.len()).cloned()
}

fuzz_target!(|events: Vec<Event>| {
    let excluded = ExcludedCidrs::parse(["10.244.0.0/16"]).expect("a valid CIDR");
    let mut world = World {
        cache: Cache::new(excluded.clone(), NodeContext::named("node-a")),
        excluded,
        services: BTreeMap::new(),
        slices: BTreeMap::new(),
        before: Shown::new(),
        flushes: 0,
    };
    for e in events.iter().take(64) {
        world.apply(e);
    }
    world.flush();
});
