//! Where Services and EndpointSlices come from, and the changes the
//! sources hand to the sync loop.

pub mod file;
pub mod kube;
pub mod strip;

use k8s_openapi::api::{core::v1::Service, discovery::v1::EndpointSlice};

/// The one EndpointSlice annotation kept: when the change behind the slice
/// was triggered, which kube-proxy measures network-programming latency
/// from.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

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
}
