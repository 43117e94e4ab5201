//! What the soak's cluster holds: Services, their endpoints and the
//! conditions of each, as the apiserver should have them. Renders the
//! objects, and the frontends the agent must program for them
//! (kube-proxy's rules: the ready endpoints, or, when none is ready, the
//! serving terminating ones). No I/O.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
};

use lb_fixtures::{Ep, Slice, Svc, SvcPort, json};
use serde_json::Value;

use super::wire::Proto;

/// Every object lives in this namespace.
pub const NAMESPACE: &str = "soak";

/// One port of a Service: name, Service port, target port, protocol.
pub struct Port {
    pub name: &'static str,
    pub port: u16,
    pub target: u16,
    pub proto: Proto,
}

impl Port {
    fn number(&self) -> u8 {
        match self.proto {
            Proto::Tcp => lb_common::PROTO_TCP,
            Proto::Udp => lb_common::PROTO_UDP,
        }
    }

    fn proto_name(&self) -> &'static str {
        match self.proto {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        }
    }
}

/// The two kinds of Service in the soak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// TCP 80 to 8080.
    Web,
    /// UDP 53 and TCP 53 to 5353, as kube-dns.
    Dns,
}

const WEB: [Port; 1] = [Port {
    name: "http",
    port: 80,
    target: 8080,
    proto: Proto::Tcp,
}];
const DNS: [Port; 2] = [
    Port {
        name: "dns",
        port: 53,
        target: 5353,
        proto: Proto::Udp,
    },
    Port {
        name: "dns-tcp",
        port: 53,
        target: 5353,
        proto: Proto::Tcp,
    },
];

impl Shape {
    /// Every fifth Service is a DNS one: 50 Services are 40 TCP ones and
    /// 10 with a UDP and a TCP port.
    pub fn of(index: u32) -> Self {
        if index % 5 == 4 {
            Shape::Dns
        } else {
            Shape::Web
        }
    }

    pub fn ports(self) -> &'static [Port] {
        match self {
            Shape::Web => &WEB,
            Shape::Dns => &DNS,
        }
    }

    /// The ports a pod of this shape listens on: (TCP, UDP).
    pub fn listens(self) -> (Vec<u16>, Vec<u16>) {
        let ports = self.ports();
        let on = |p: Proto| {
            ports
                .iter()
                .filter(|x| x.proto == p)
                .map(|x| x.target)
                .collect()
        };
        (on(Proto::Tcp), on(Proto::Udp))
    }
}

/// An endpoint's conditions, as a Deployment's pod goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// `ready: true, serving: true, terminating: false`.
    Ready,
    /// `ready: false, serving: true, terminating: true`: the pod was
    /// deleted and still serves while it shuts down.
    Terminating,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The pod's name, which is also what its backend answers with.
    pub pod: String,
    pub ip: Ipv4Addr,
    pub cond: Cond,
}

#[derive(Clone, Debug)]
pub struct Service {
    pub name: String,
    pub vip: Ipv4Addr,
    pub shape: Shape,
    pub endpoints: Vec<Endpoint>,
    next_pod: u32,
}

/// What the agent must program for one Service's cluster IP: each port's
/// backends (an unordered set: slot order is the agent's choice).
pub type Frontends = BTreeMap<(u16, u8), BTreeSet<SocketAddrV4>>;

impl Service {
    pub fn service_object(&self) -> Value {
        let mut svc = Svc::new(NAMESPACE, &self.name).cluster_ip(&self.vip.to_string());
        for p in self.shape.ports() {
            svc = svc.with_port(
                SvcPort::new(p.name, i32::from(p.port), p.proto_name())
                    .target_port(i32::from(p.target)),
            );
        }
        json(svc)
    }

    /// The Service's one EndpointSlice.
    pub fn slice_name(&self) -> String {
        format!("{}-1", self.name)
    }

    pub fn slice_object(&self) -> Value {
        let mut slice = Slice::new(NAMESPACE, &self.slice_name()).service(&self.name);
        for p in self.shape.ports() {
            slice = slice.port(p.name, i32::from(p.target), p.proto_name());
        }
        let eps = self.endpoints.iter().map(|e| {
            let ep = Ep::new(&e.ip.to_string());
            match e.cond {
                Cond::Ready => ep.ready(true).serving(true).terminating(false),
                Cond::Terminating => ep.ready(false).serving(true).terminating(true),
            }
        });
        json(slice.endpoints(eps))
    }

    /// The endpoints kube-proxy would send new connections to: the ready
    /// ones, or if none is ready the serving (terminating) ones.
    pub fn serving(&self) -> Vec<&Endpoint> {
        let ready: Vec<&Endpoint> = self
            .endpoints
            .iter()
            .filter(|e| e.cond == Cond::Ready)
            .collect();
        if ready.is_empty() {
            self.endpoints.iter().collect()
        } else {
            ready
        }
    }

    /// What the agent must program for this Service.
    pub fn frontends(&self) -> Frontends {
        let serving = self.serving();
        self.shape
            .ports()
            .iter()
            .map(|p| {
                let backends = serving
                    .iter()
                    .map(|e| SocketAddrV4::new(e.ip, p.target))
                    .collect();
                ((p.port, p.number()), backends)
            })
            .collect()
    }

    /// The addresses clients send to: one per port.
    pub fn targets(&self) -> Vec<(Proto, SocketAddr)> {
        self.shape
            .ports()
            .iter()
            .map(|p| (p.proto, SocketAddr::from((self.vip, p.port))))
            .collect()
    }

    pub fn endpoint_mut(&mut self, pod: &str) -> Option<&mut Endpoint> {
        self.endpoints.iter_mut().find(|e| e.pod == pod)
    }
}

/// The whole cluster, and the counters that name new objects.
#[derive(Debug, Default)]
pub struct World {
    pub services: BTreeMap<String, Service>,
    next_service: u32,
    next_pod_ip: u32,
}

/// Services get cluster IPs from 10.96.0.0/16, pods addresses from
/// 10.42.0.0/16, neither ever reused within a run.
const VIP_BASE: u32 = u32::from_be_bytes([10, 96, 0, 1]);
const POD_BASE: u32 = u32::from_be_bytes([10, 42, 0, 1]);
const BLOCK: u32 = 1 << 16;

impl World {
    /// A new Service (no endpoints yet): its name.
    pub fn add_service(&mut self) -> String {
        let index = self.next_service;
        assert!(index + 1 < BLOCK, "out of cluster IPs");
        self.next_service += 1;
        let name = format!("s{index:03}");
        self.services.insert(
            name.clone(),
            Service {
                name: name.clone(),
                vip: Ipv4Addr::from(VIP_BASE + index),
                shape: Shape::of(index),
                endpoints: Vec::new(),
                next_pod: 0,
            },
        );
        name
    }

    /// A name and an address for a new pod of `svc`.
    pub fn new_pod(&mut self, svc: &str) -> (String, Ipv4Addr) {
        let s = self.services.get_mut(svc).expect("a live Service");
        let name = format!("{svc}-p{}", s.next_pod);
        s.next_pod += 1;
        let n = self.next_pod_ip;
        assert!(n + 1 < BLOCK, "out of pod addresses");
        self.next_pod_ip += 1;
        (name, Ipv4Addr::from(POD_BASE + n))
    }

    pub fn service(&self, name: &str) -> &Service {
        &self.services[name]
    }

    pub fn service_mut(&mut self, name: &str) -> &mut Service {
        self.services.get_mut(name).expect("a live Service")
    }
}

/// The Service a pod belongs to, from its name (`<svc>-p<n>`).
pub fn service_of(pod: &str) -> Option<&str> {
    pod.rsplit_once("-p").map(|(svc, _)| svc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(pod: &str, ip: [u8; 4], cond: Cond) -> Endpoint {
        Endpoint {
            pod: pod.into(),
            ip: Ipv4Addr::from(ip),
            cond,
        }
    }

    #[test]
    fn a_rolling_update_moves_new_connections_before_the_old_pod_goes() {
        let mut w = World::default();
        for _ in 0..5 {
            w.add_service();
        }
        let dns = w.service_mut("s004");
        assert_eq!(dns.shape, Shape::Dns);
        dns.endpoints = vec![ep("s004-p0", [10, 42, 0, 1], Cond::Ready)];
        let fe = |s: &Service| s.frontends();
        let one = BTreeSet::from([SocketAddrV4::new([10, 42, 0, 1].into(), 5353)]);
        assert_eq!(
            fe(dns),
            Frontends::from([((53, 6), one.clone()), ((53, 17), one.clone())])
        );
        // The new pod is ready: both serve.
        dns.endpoints
            .push(ep("s004-p1", [10, 42, 0, 2], Cond::Ready));
        assert_eq!(fe(dns)[&(53, 17)].len(), 2);
        // The old one terminates: only the new one gets new connections.
        dns.endpoint_mut("s004-p0").unwrap().cond = Cond::Terminating;
        let two = BTreeSet::from([SocketAddrV4::new([10, 42, 0, 2].into(), 5353)]);
        assert_eq!(fe(dns)[&(53, 17)], two);
        // With no ready endpoint left, the terminating ones serve.
        dns.endpoints.remove(1);
        assert_eq!(fe(dns)[&(53, 6)], one);
    }

    #[test]
    fn the_slice_carries_the_conditions_of_each_endpoint() {
        let mut w = World::default();
        let name = w.add_service();
        let (pod, ip) = w.new_pod(&name);
        assert_eq!(service_of(&pod), Some(name.as_str()));
        let s = w.service_mut(&name);
        s.endpoints = vec![Endpoint {
            pod,
            ip,
            cond: Cond::Terminating,
        }];
        let slice = s.slice_object();
        let conditions = &slice["endpoints"][0]["conditions"];
        assert_eq!(conditions["ready"], false);
        assert_eq!(conditions["serving"], true);
        assert_eq!(conditions["terminating"], true);
        assert_eq!(slice["ports"][0]["port"], 8080);
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "s000"
        );
        assert_eq!(s.service_object()["spec"]["clusterIP"], "10.96.0.1");
    }

    #[test]
    fn names_and_addresses_are_never_reused() {
        let mut w = World::default();
        let a = w.add_service();
        let b = w.add_service();
        assert_ne!(w.service(&a).vip, w.service(&b).vip);
        let (p0, ip0) = w.new_pod(&a);
        let (p1, ip1) = w.new_pod(&b);
        let (p2, _) = w.new_pod(&a);
        assert_ne!(ip0, ip1);
        assert_eq!((p0.as_str(), p2.as_str()), ("s000-p0", "s000-p1"));
        assert_eq!(p1, "s001-p0");
        w.services.remove(&a);
        assert_eq!(w.add_service(), "s002");
    }
}
