//! Where Services and EndpointSlices come from, and the changes the
//! sources hand to the sync loop.

mod backoff;
pub mod file;
pub mod kube;
mod nesting;
pub mod strip;

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

/// This node's zone, from its Node object.
pub fn node_zone(node: &Node) -> Option<String> {
    node.metadata.labels.as_ref()?.get(ZONE_LABEL).cloned()
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
    /// The complete set of Services: a first list, a relist, a file re-read.
    AllServices(Vec<Service>),
    /// The complete set of EndpointSlices.
    AllSlices(Vec<EndpointSlice>),
    /// This node's zone label, as its Node now says (`None`: unlabelled).
    NodeZone(Option<String>),
}
