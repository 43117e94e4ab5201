//! The pure model: Services and EndpointSlices in, desired frontends out.
//!
//! No I/O happens here. The rules are kube-proxy's (see `desired.rs`), plus
//! the multi-CNI exclusion of DESIGN §1.

mod cache;
mod desired;
mod exclusion;
mod service;
mod slice;

use std::{fmt, net::Ipv4Addr};

pub use cache::{Admission, Cache, Claim, Flush};
pub use desired::{Desired, ModelReport, compute};
pub use exclusion::{ExcludedCidrs, ParseCidrError};
pub use service::object_ref as service_ref;
pub use slice::object_ref as slice_ref;

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod tests;

/// Transport protocol of a frontend or backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// The IP protocol number stored in the maps.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => lb_common::PROTO_TCP,
            Proto::Udp => lb_common::PROTO_UDP,
        }
    }

    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            lb_common::PROTO_TCP => Some(Proto::Tcp),
            lb_common::PROTO_UDP => Some(Proto::Udp),
            _ => None,
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        })
    }
}

/// One `VIP:port/proto` the load balancer answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Frontend {
    pub vip: Ipv4Addr,
    pub port: u16,
    pub proto: Proto,
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}/{}", self.vip, self.port, self.proto)
    }
}

/// One endpoint address a frontend forwards to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend {
    pub ip: Ipv4Addr,
    pub port: u16,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.port)
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
    /// `internalTrafficPolicy: Local`.
    InternalTrafficPolicyLocal,
    /// `externalTrafficPolicy: Local` (on a NodePort or LoadBalancer Service).
    ExternalTrafficPolicyLocal,
    /// `sessionAffinity: ClientIP`.
    SessionAffinity,
    /// An IPv6 ClusterIP.
    Ipv6,
    /// An SCTP port (this kernel has no SCTP).
    Sctp,
    /// A NodePort (type NodePort or LoadBalancer).
    NodePort,
    /// `spec.externalIPs`.
    ExternalIps,
    /// `status.loadBalancer.ingress` IPs.
    LoadBalancerIngress,
}

impl Feature {
    pub const ALL: [Feature; 8] = [
        Feature::InternalTrafficPolicyLocal,
        Feature::ExternalTrafficPolicyLocal,
        Feature::SessionAffinity,
        Feature::Ipv6,
        Feature::Sctp,
        Feature::NodePort,
        Feature::ExternalIps,
        Feature::LoadBalancerIngress,
    ];

    /// The label value in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::InternalTrafficPolicyLocal => "internal_traffic_policy_local",
            Feature::ExternalTrafficPolicyLocal => "external_traffic_policy_local",
            Feature::SessionAffinity => "session_affinity",
            Feature::Ipv6 => "ipv6",
            Feature::Sctp => "sctp",
            Feature::NodePort => "node_port",
            Feature::ExternalIps => "external_ips",
            Feature::LoadBalancerIngress => "load_balancer_ingress",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `namespace/name` of a Kubernetes object, for logs and reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: ObjectKind,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn service(namespace: &str, name: &str) -> Self {
        Self {
            kind: ObjectKind::Service,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub fn slice(namespace: &str, name: &str) -> Self {
        Self {
            kind: ObjectKind::EndpointSlice,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
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
