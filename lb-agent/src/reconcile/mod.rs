//! Diffs desired frontends against the maps and writes the difference in
//! make-before-break order. Knows nothing of Kubernetes.

mod apply;
mod state;
mod store;
mod target;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use apply::Outcome;
pub use state::{MapState, backend_key, frontend_key};
pub use store::{MapStore, MemStore, StoreError};

use crate::model::{Backend, Frontend};

/// Owns the store and a mirror of what the maps hold.
pub struct Reconciler<S> {
    store: S,
    mirror: MapState,
}

impl<S: MapStore> Reconciler<S> {
    /// Adopts whatever the maps already hold (after a restart) without
    /// flushing it; the next reconcile fixes only the difference.
    pub fn adopt(store: S) -> Result<Self, StoreError> {
        let mirror = store.read()?;
        Ok(Self { store, mirror })
    }

    /// Brings the maps to `desired`. Idempotent; after a failure (a full map,
    /// say) the maps are still consistent and the next call retries.
    pub fn reconcile(&mut self, desired: &BTreeMap<Frontend, Vec<Backend>>) -> Outcome {
        let target = target::build(desired, &self.mirror);
        apply::apply(&mut self.store, &mut self.mirror, &target)
    }

    /// What the maps hold, as far as this reconciler wrote or read them.
    pub fn state(&self) -> &MapState {
        &self.mirror
    }

    pub fn store(&self) -> &S {
        &self.store
    }
}
