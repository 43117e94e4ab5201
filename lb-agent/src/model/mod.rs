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

/// `namespace/name` of a Kubernetes object, for logs and reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl ObjectRef {
    pub fn service(namespace: &str, name: &str) -> Self {
        Self {
            kind: "Service",
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub fn slice(namespace: &str, name: &str) -> Self {
        Self {
            kind: "EndpointSlice",
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
