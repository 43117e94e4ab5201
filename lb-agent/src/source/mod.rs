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

use std::{net::IpAddr, path::PathBuf};

pub use crate::model::node_nets::NodeNetworks;
use crate::model::sock_lb::{PodFacts, PodRef, SOCKET_LB_KEY, Setting};
pub use changes::{Changes, SourceError};

use k8s_openapi::{
    api::{
        core::v1::{Node, Pod, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// Where Services and EndpointSlices come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Watch the apiserver. `None` fields fall back to in-cluster config, then
    /// the default kubeconfig.
    Kube {
        kubeconfig: Option<PathBuf>,
        master: Option<String>,
    },
    /// Static manifests, polled for edits.
    File(PathBuf),
}

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

/// What an object's [`SOCKET_LB_KEY`] label and annotation say.
pub fn sock_lb_setting(meta: &ObjectMeta) -> Setting {
    fn get(m: Option<&std::collections::BTreeMap<String, String>>) -> Option<&str> {
        m.and_then(|m| m.get(SOCKET_LB_KEY)).map(String::as_str)
    }
    Setting::of(get(meta.labels.as_ref()), get(meta.annotations.as_ref()))
}

/// What socket load balancing needs of a Pod.
pub fn pod_facts(pod: &Pod) -> PodFacts {
    let status = pod.status.as_ref();
    let ips = status
        .and_then(|s| s.pod_ips.as_deref())
        .map(|ips| {
            ips.iter()
                .filter_map(|i| i.ip.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| {
            status
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.trim().parse().ok())
                .into_iter()
                .collect()
        });
    let spec = pod.spec.as_ref();
    PodFacts {
        pod: PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
        },
        node_name: spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        ips,
        setting: sock_lb_setting(&pod.metadata),
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
    /// The Pods of this node that may opt out of socket load balancing,
    /// and every Namespace ([`crate::model::sock_lb`]). Nothing waits for
    /// them.
    Pods,
    Namespaces,
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
    /// A Pod was listed or changed: what socket load balancing needs of it.
    Pod(PodFacts),
    PodDeleted(PodRef),
    /// A Namespace was listed or changed: its socket load balancing word.
    Namespace {
        name: String,
        setting: Setting,
    },
    NamespaceDeleted(String),
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
}
