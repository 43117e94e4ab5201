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

impl Shared {
    /// What `/metrics` answers: [`Metrics::render`], with `lbagent_ready`
    /// set from what `/healthz` would answer now (its state ages: a change
    /// waiting too long turns it unready without any event).
    pub fn render_metrics(&self) -> String {
        let ready = self.health.healthz().status == 200;
        self.metrics.ready.set(f64::from(u8::from(ready)));
        self.metrics.render()
    }
}
