//! The Node builder: the agent reads its own Node's zone label and
//! addresses, and every Node's addresses and pod CIDRs.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Object;

/// The label topology hints are matched against.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A v1 Node with a name and labels. `build` gives the `k8s_openapi`
/// value; as an [`Object`] it is a raw document (the agent's sources read
/// Nodes, the stand-in apiserver stores them as given).
#[derive(Clone, Debug)]
#[must_use]
pub struct Node {
    node: k8s_openapi::api::core::v1::Node,
}

impl Node {
    pub fn new(name: &str) -> Self {
        Self {
            node: k8s_openapi::api::core::v1::Node {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Default::default()
            },
        }
    }

    pub fn build(self) -> k8s_openapi::api::core::v1::Node {
        self.node
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        let labels = self.node.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The `topology.kubernetes.io/zone` label.
    pub fn zone(self, zone: &str) -> Self {
        self.label(ZONE_LABEL, zone)
    }

    /// Appends a `status.addresses` entry: `type_` is `InternalIP`,
    /// `ExternalIP`, `Hostname`, ...
    pub fn address(mut self, type_: &str, address: &str) -> Self {
        let status = self.node.status.get_or_insert_with(Default::default);
        status.addresses.get_or_insert_with(Vec::new).push(
            k8s_openapi::api::core::v1::NodeAddress {
                type_: type_.to_owned(),
                address: address.to_owned(),
            },
        );
        self
    }

    /// Appends `cidr` to `spec.podCIDRs`; the first is `spec.podCIDR` too,
    /// as the node IPAM controller writes them.
    pub fn pod_cidr(mut self, cidr: &str) -> Self {
        let spec = self.node.spec.get_or_insert_with(Default::default);
        spec.pod_cidr.get_or_insert_with(|| cidr.to_owned());
        spec.pod_cidrs
            .get_or_insert_with(Vec::new)
            .push(cidr.to_owned());
        self
    }
}

impl From<Node> for Object {
    fn from(n: Node) -> Self {
        Object::Raw(serde_json::to_value(n.build()).expect("k8s-openapi types serialize to JSON"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_carries_its_kind_name_and_zone() {
        let v = Object::from(Node::new("node-1").zone("zone-a").label("a", "b")).json();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Node");
        assert_eq!(v["metadata"]["name"], "node-1");
        assert_eq!(v["metadata"]["labels"][ZONE_LABEL], "zone-a");
        assert_eq!(v["metadata"]["labels"]["a"], "b");
        let v = Object::from(
            Node::new("node-2")
                .pod_cidr("10.42.2.0/24")
                .pod_cidr("fd42:2::/64"),
        )
        .json();
        assert_eq!(v["spec"]["podCIDR"], "10.42.2.0/24");
        assert_eq!(
            v["spec"]["podCIDRs"],
            serde_json::json!(["10.42.2.0/24", "fd42:2::/64"])
        );
        assert_eq!(
            Object::from(Node::new("n")).id(),
            ("Node".into(), None, "n".into())
        );
    }
}
