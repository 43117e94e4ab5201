//! The pure model: Services and EndpointSlices in, desired frontends out.
//!
//! No I/O happens here. The rules are kube-proxy's (see `claims.rs`), plus
//! the multi-CNI exclusion (ARCHITECTURE.md, "Excluded CIDRs").
//!
//! Modules depend one way: `service`/`slice` validate objects into specs,
//! `claims` turns one Service's specs into per-frontend claims, `cache` keeps
//! every spec and claim incrementally, and `desired` is the whole-state
//! entry point built on the cache. `node_nets` places every node's
//! addresses and pod CIDRs, and DSR endpoints, for the tc programs;
//! `sock_lb` says which pods opted out of socket load balancing.

mod cache;
mod claims;
mod desired;
mod exclusion;
mod few;
pub mod forwarding;
mod health_check;
pub mod maglev;
mod no_local;
pub mod node_nets;
mod nodeport_addresses;
mod service;
mod slice;
pub mod sock_lb;
mod topologies;
pub mod weight;

use std::{fmt, net::IpAddr, sync::Arc};

pub use cache::{Admission, Cache, Flush, ServiceReport};
pub use claims::{Claim, FrontendKind, Target};
pub use desired::{Desired, ModelReport, compute};
pub use exclusion::{ExcludedCidrs, ParseCidrError};
pub use health_check::HealthCheck;
pub use no_local::NoLocalEndpoints;
pub use nodeport_addresses::{NodePortAddresses, NodePortAddressesError};
pub use service::{
    Affinity, CILIUM_FORWARDING_MODE_ANNOTATION, CILIUM_LB_ALGORITHM_ANNOTATION,
    FORWARDING_MODE_ANNOTATION, HEADLESS_LABEL, LB_ALGORITHM_ANNOTATION, SERVICE_PROXY_NAME_LABEL,
    ServicePort, ServiceSpec, ServiceType, TrafficPolicy, object_ref as service_ref,
};
pub use slice::{SliceEndpoint, SlicePort, SliceSpec, object_ref as slice_ref};
pub use topologies::EndpointTopology;

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod categorize_tests;
#[cfg(test)]
mod external_tests;
#[cfg(test)]
mod health_check_tests;
#[cfg(test)]
mod no_local_tests;
#[cfg(any(test, feature = "fuzzing"))]
pub mod oracle;
#[cfg(test)]
mod tests;

/// Transport protocol of a frontend or backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Tcp,
    Udp,
    /// Kept in the model; never balanced (this kernel has no SCTP).
    Sctp,
    /// Every port and protocol of an address: its wildcard frontend.
    Any,
}

/// IANA protocol number of SCTP.
const PROTO_SCTP: u8 = 132;

impl Proto {
    /// The IP protocol number stored in the maps.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => lb_common::PROTO_TCP,
            Proto::Udp => lb_common::PROTO_UDP,
            Proto::Sctp => PROTO_SCTP,
            Proto::Any => lb_common::WILDCARD_PROTO,
        }
    }

    /// A protocol the datapath balances, from the number in a map key.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            lb_common::PROTO_TCP => Some(Proto::Tcp),
            lb_common::PROTO_UDP => Some(Proto::Udp),
            lb_common::WILDCARD_PROTO => Some(Proto::Any),
            _ => None,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
            Proto::Sctp => "SCTP",
            Proto::Any => "ANY",
        })
    }
}

/// An IP address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }
}

/// Which traffic a frontend serves (Cilium's `lb4_key.scope`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Pods and processes on this node (the socket hooks): every frontend.
    #[default]
    Internal,
    /// Traffic from outside the node (the tc programs): the external
    /// frontends again, with `externalTrafficPolicy` applied.
    External,
}

/// One `VIP:port/proto` the load balancer answers for, in one scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frontend {
    pub vip: IpAddr,
    pub port: u16,
    pub proto: Proto,
    pub scope: Scope,
}

impl Frontend {
    /// The frontend that stands for every port and protocol of `vip` that
    /// no other frontend names: connects to it are refused.
    pub fn wildcard(vip: IpAddr) -> Self {
        Self {
            vip,
            port: lb_common::WILDCARD_PORT,
            proto: Proto::Any,
            scope: Scope::Internal,
        }
    }

    /// This frontend as seen from outside the node.
    pub fn external(self) -> Self {
        Self {
            scope: Scope::External,
            ..self
        }
    }

    pub fn is_wildcard(&self) -> bool {
        self.proto == Proto::Any
    }
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_wildcard() {
            return match self.vip {
                IpAddr::V4(ip) => write!(f, "{ip}:*"),
                IpAddr::V6(ip) => write!(f, "[{ip}]:*"),
            };
        }
        write!(
            f,
            "{}/{}",
            std::net::SocketAddr::new(self.vip, self.port),
            self.proto
        )?;
        match self.scope {
            Scope::Internal => Ok(()),
            Scope::External => f.write_str(" (external)"),
        }
    }
}

/// One endpoint address a frontend forwards to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend {
    pub ip: IpAddr,
    pub port: u16,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::net::SocketAddr::new(self.ip, self.port))
    }
}

/// The kinds of object the model reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    Service,
    EndpointSlice,
}

impl ObjectKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Service => "Service",
            ObjectKind::EndpointSlice => "EndpointSlice",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Service feature the model keeps but the datapath does not program
/// yet. A Service using one is still programmed as plain ClusterIP, and the
/// use is reported once (a warning and `lbagent_unsupported_features_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// An SCTP port (this kernel has no SCTP).
    Sctp,
    /// `loadBalancerSourceRanges` that guard some of its LB VIPs.
    LoadBalancerSourceRanges,
    /// An lb-algorithm annotation whose value is no algorithm we know.
    UnknownLbAlgorithm,
    /// A forwarding-mode annotation whose value is neither `snat` nor `dsr`.
    UnknownForwardingMode,
    /// An EndpointSlice of its whose weight annotation is no number from 0
    /// to 65535.
    InvalidEndpointWeight,
}

impl Feature {
    pub const ALL: [Feature; 5] = [
        Feature::Sctp,
        Feature::LoadBalancerSourceRanges,
        Feature::UnknownLbAlgorithm,
        Feature::UnknownForwardingMode,
        Feature::InvalidEndpointWeight,
    ];

    /// The label value in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Sctp => "sctp",
            Feature::LoadBalancerSourceRanges => "load_balancer_source_ranges",
            Feature::UnknownLbAlgorithm => "unknown_lb_algorithm",
            Feature::UnknownForwardingMode => "unknown_forwarding_mode",
            Feature::InvalidEndpointWeight => "invalid_endpoint_weight",
        }
    }

    /// What a Service using the feature gets meanwhile.
    pub fn effect(self) -> &'static str {
        match self {
            Feature::Sctp => "its SCTP ports are not programmed",
            Feature::LoadBalancerSourceRanges => {
                "its load-balancer IPs guarded by source ranges (and with --bpf-lb-source-range-all-types \
                 its node ports and external IPs) enforce them for traffic from outside only; \
                 pods and processes on this node are not intercepted at guarded load-balancer IPs \
                 (their traffic goes to the load balancer) and not checked at its node ports, nor at \
                 its cluster IP without --bpf-lb-source-range-all-types"
            }
            Feature::UnknownLbAlgorithm => {
                "its external frontends pick backends with --bpf-lb-algorithm, as if unannotated"
            }
            Feature::UnknownForwardingMode => {
                "its external frontends forward with --bpf-lb-mode, as if unannotated"
            }
            Feature::InvalidEndpointWeight => {
                "the endpoints of that EndpointSlice keep the default weight, as if unannotated"
            }
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// This node, as endpoint selection needs it (kube-proxy's `nodeName` and
/// topology labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeContext {
    /// This node's name: endpoints whose `nodeName` it is are local.
    pub name: String,
    /// Its `topology.kubernetes.io/zone` label; `None` when unlabelled,
    /// which no zone hint matches.
    pub zone: Option<String>,
    /// Its addresses that serve NodePorts (`--nodeport-addresses`), both
    /// families, sorted.
    pub node_port_ips: Vec<IpAddr>,
    /// `--bpf-lb-algorithm`: how external frontends of Services that do
    /// not choose pick backends for flows from outside.
    pub algorithm: maglev::Algorithm,
    /// `--bpf-lb-mode`: whether flows from outside to backends on other
    /// nodes go by DSR, for Services that do not choose.
    pub lb_mode: forwarding::LbMode,
    /// `--bpf-lb-source-range-all-types`: a Service's
    /// `loadBalancerSourceRanges` guard its node ports and external IPs
    /// from outside too, not only its load-balancer IPs.
    pub source_range_all_types: bool,
}

impl NodeContext {
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            ..Self::default()
        }
    }

    /// Whether `ep` runs on this node.
    pub fn is_local(&self, ep: &SliceEndpoint) -> bool {
        !self.name.is_empty()
            && ep.topology.as_deref().and_then(|t| t.node_name.as_deref())
                == Some(self.name.as_str())
    }
}

/// `namespace/name` of a Kubernetes object, for logs and reports. Cloned
/// into many indexes, so the names are shared, not copied.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ObjectRef {
    pub fn service(namespace: &str, name: &str) -> Self {
        Self {
            kind: ObjectKind::Service,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    pub fn slice(namespace: &str, name: &str) -> Self {
        Self {
            kind: ObjectKind::EndpointSlice,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// An object skipped because it is malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub object: ObjectRef,
    pub reason: String,
}
