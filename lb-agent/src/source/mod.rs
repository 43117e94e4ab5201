//! Where Services and EndpointSlices come from.

pub mod file;
pub mod kube;
pub mod strip;
