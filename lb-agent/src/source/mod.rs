//! Where Services and EndpointSlices come from, and the changes the
//! sources hand to the sync loop.

pub mod apiserver;
mod backoff;
mod changes;
pub mod file;
pub mod file_poll;
pub mod interfaces;
pub mod kube;
mod nesting;
pub mod requests;
pub mod strip;

use std::net::IpAddr;

use ipnet::IpNet;

pub use changes::{Changes, SourceError};

use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

/// The one EndpointSlice annotation kept: when the change behind the slice
/// was triggered, which kube-proxy measures network-programming latency
/// from.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The Node label topology hints are matched against.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// What the model reads of this node's Node object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// Its zone label (`None`: unlabelled).
    pub zone: Option<String>,
    /// Its primary address of each family it has one of: the first
    /// `InternalIP`, else the first `ExternalIP` (kube-proxy's
    /// `GetNodeHostIPs`).
    pub primary_ips: Vec<IpAddr>,
}

impl NodeFacts {
    pub fn of(node: &Node) -> Self {
        let addresses = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_deref())
            .unwrap_or_default();
        let of_type = |t: &'static str| {
            addresses
                .iter()
                .filter(move |a| a.type_ == t)
                .filter_map(|a| a.address.trim().parse::<IpAddr>().ok())
        };
        let mut primary_ips: Vec<IpAddr> = Vec::new();
        for ip in of_type("InternalIP").chain(of_type("ExternalIP")) {
            if !primary_ips.iter().any(|p| p.is_ipv4() == ip.is_ipv4()) {
                primary_ips.push(ip);
            }
        }
        Self {
            zone: node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(ZONE_LABEL).cloned()),
            primary_ips,
        }
    }
}

/// Where a Node is on the network, as every node's agent reads every
/// Node (for DSR: a client on its backend's node is SNATed instead).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeNetworks {
    pub name: String,
    /// Its `InternalIP` and `ExternalIP` addresses, both families, in the
    /// Node's order, each once.
    pub addresses: Vec<IpAddr>,
    /// `spec.podCIDRs` (else `spec.podCIDR`), host bits cleared, each once.
    pub pod_cidrs: Vec<IpNet>,
}

impl NodeNetworks {
    /// What is read of `node`; an address or CIDR that does not parse is
    /// left out.
    pub fn of(node: &Node) -> Self {
        let mut addresses: Vec<IpAddr> = Vec::new();
        let listed = node.status.as_ref().and_then(|s| s.addresses.as_deref());
        for a in listed.unwrap_or_default() {
            if !matches!(a.type_.as_str(), "InternalIP" | "ExternalIP") {
                continue;
            }
            if let Ok(ip) = a.address.trim().parse::<IpAddr>()
                && !addresses.contains(&ip)
            {
                addresses.push(ip);
            }
        }
        let spec = node.spec.as_ref();
        let cidrs = spec
            .and_then(|s| s.pod_cidrs.clone())
            .filter(|c| !c.is_empty())
            .or_else(|| spec.and_then(|s| s.pod_cidr.clone()).map(|c| vec![c]))
            .unwrap_or_default();
        let mut pod_cidrs: Vec<IpNet> = Vec::new();
        for cidr in cidrs {
            if let Ok(net) = cidr.trim().parse::<IpNet>()
                && !pod_cidrs.contains(&net.trunc())
            {
                pod_cidrs.push(net.trunc());
            }
        }
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            addresses,
            pod_cidrs,
        }
    }
}

/// What a streamed (re)list lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    Services,
    Slices,
    /// Every Node, for [`NodeNetworks`]. The first sync does not wait for
    /// it.
    Nodes,
}

/// One change from a source.
#[derive(Clone, Debug)]
pub enum Change {
    Service(Box<Service>),
    ServiceDeleted {
        namespace: String,
        name: String,
    },
    Slice(Box<EndpointSlice>),
    SliceDeleted {
        namespace: String,
        name: String,
    },
    /// A (re)list (from the apiserver, or a file read) begins: its items
    /// follow as `Service` (or `Slice`) changes, so the list is never held
    /// whole, until `Listed` of the same kind.
    Relist(ListKind),
    /// The (re)list is complete: objects of its kind it did not name are gone.
    Listed(ListKind),
    /// What this node's Node now says (all `None`/empty: no Node).
    Node(NodeFacts),
    /// The apiserver refuses to show this node's Node (why): the first
    /// sync need not wait for it.
    NodeRefused(String),
    /// The addresses this node's interfaces hold now.
    LocalAddresses(Vec<IpAddr>),
    /// A Node (any node's) was listed or changed: where it is.
    NodeNetworks(NodeNetworks),
    /// A Node (any node's) was deleted.
    NodeNetworksDeleted(String),
}

#[cfg(test)]
mod tests {
    use lb_fixtures::Node;

    use super::*;

    #[test]
    fn a_nodes_primary_addresses_are_its_first_internal_ip_of_each_family() {
        let node = Node::new("node-a")
            .zone("zone-a")
            .address("Hostname", "node-a")
            .address("ExternalIP", "203.0.113.5")
            .address("InternalIP", "192.0.2.10")
            .address("InternalIP", "192.0.2.11")
            .address("ExternalIP", "2001:db8::5")
            .build();
        let facts = NodeFacts::of(&node);
        assert_eq!(facts.zone.as_deref(), Some("zone-a"));
        // No IPv6 InternalIP: the ExternalIP stands in, as in kube-proxy.
        let want: Vec<IpAddr> = vec![
            "192.0.2.10".parse().unwrap(),
            "2001:db8::5".parse().unwrap(),
        ];
        assert_eq!(facts.primary_ips, want);
        assert_eq!(
            NodeFacts::of(&Node::new("bare").build()),
            NodeFacts::default()
        );
    }

    #[test]
    fn a_nodes_networks_are_its_ip_addresses_and_pod_cidrs() {
        let node = Node::new("node-a")
            .address("Hostname", "node-a")
            .address("InternalIP", "192.0.2.10")
            .address("ExternalIP", "203.0.113.5")
            .address("InternalIP", "fd00::10")
            .address("InternalDNS", "node-a.example")
            .address("ExternalIP", "192.0.2.10")
            .address("InternalIP", "not-an-ip")
            .pod_cidr("10.42.1.0/24")
            .pod_cidr("fd42:1::1/64")
            .pod_cidr("bogus")
            .build();
        let nets = NodeNetworks::of(&node);
        assert_eq!(nets.name, "node-a");
        let ips: Vec<IpAddr> = ["192.0.2.10", "203.0.113.5", "fd00::10"]
            .map(|a| a.parse().unwrap())
            .into();
        assert_eq!(nets.addresses, ips);
        let cidrs: Vec<IpNet> = ["10.42.1.0/24", "fd42:1::/64"]
            .map(|c| c.parse().unwrap())
            .into();
        assert_eq!(nets.pod_cidrs, cidrs);

        // An older Node with `podCIDR` alone.
        let mut old = Node::new("node-b").build();
        old.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidr: Some("10.42.2.0/24".into()),
            ..Default::default()
        });
        assert_eq!(
            NodeNetworks::of(&old).pod_cidrs,
            ["10.42.2.0/24".parse::<IpNet>().unwrap()]
        );
        assert_eq!(
            NodeNetworks::of(&Node::new("bare").build()),
            NodeNetworks {
                name: "bare".into(),
                ..NodeNetworks::default()
            }
        );
    }
}
