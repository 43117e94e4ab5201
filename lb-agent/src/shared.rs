//! What the sync thread publishes and the HTTP listeners answer from:
//! metrics, the proxy's health, and each Service's health-check state.
//! Shared behind an `Arc`; every part is safe to read while written.

use crate::{health::Health, metrics::Metrics, service_health::ServiceHealth};

/// The agent's shared state.
#[derive(Debug, Default)]
pub struct Shared {
    pub metrics: Metrics,
    pub health: Health,
    pub service_health: ServiceHealth,
}
