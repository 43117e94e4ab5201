//! What was logged about each Service and each contested frontend, so
//! that each thing is logged (and counted) once.

use std::collections::BTreeSet;

use foldhash::HashMap;

use tracing::{info, warn};

use crate::{
    metrics::Metrics,
    model::{Cache, Flush, Frontend, ObjectRef, ServiceReport},
};

#[derive(Debug, Default)]
pub(super) struct Reports {
    /// Only Services with something to report have an entry.
    services: HashMap<ObjectRef, ServiceReport>,
    /// Losers logged for each contested frontend.
    conflicts: HashMap<Frontend, BTreeSet<ObjectRef>>,
}

impl Reports {
    /// Logs (and counts) what is new in the model's reports since they were
    /// last logged, and forgets what no longer applies.
    pub(super) fn report(&mut self, flush: &Flush, cache: &Cache, m: &Metrics) {
        for (svc, now) in &flush.services {
            let before = self.services.remove(svc).unwrap_or_default();
            for be in now.excluded.difference(&before.excluded) {
                m.excluded_endpoints.inc();
                info!(service = %svc, endpoint = %be, "endpoint in excluded CIDR; not programmed");
            }
            for fe in now.passthrough.difference(&before.passthrough) {
                info!(service = %svc, frontend = %fe, "all endpoints excluded; frontend left to its own CNI");
            }
            for f in now.unsupported.difference(&before.unsupported) {
                m.unsupported(*f).inc();
                warn!(
                    service = %svc,
                    feature = %f,
                    "uses a feature this version does not program yet: {}",
                    f.effect()
                );
            }
            if !now.is_empty() {
                self.services.insert(svc.clone(), now.clone());
            }
        }
        for fe in &flush.touched {
            let losers: BTreeSet<ObjectRef> = cache.losers(fe).cloned().collect();
            let before = self.conflicts.remove(fe).unwrap_or_default();
            if let Some((winner, _)) = cache.winner(fe) {
                for loser in losers.difference(&before) {
                    warn!(frontend = %fe, owner = %winner, object = %loser, "frontend claimed by two Services; the first by name wins");
                }
            }
            if !losers.is_empty() {
                self.conflicts.insert(*fe, losers);
            }
        }
    }

    /// Services and contested frontends with something logged.
    #[cfg(test)]
    pub(super) fn entries(&self) -> (usize, usize) {
        (self.services.len(), self.conflicts.len())
    }
}
