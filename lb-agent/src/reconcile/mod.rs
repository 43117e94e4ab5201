//! Diffs desired frontends against the maps and writes the difference in
//! make-before-break order. Knows nothing of Kubernetes.

mod apply;
mod mirror;
mod state;
mod store;
mod target;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use apply::Scope;
use mirror::Mirror;

pub use apply::Outcome;
pub use state::{MapState, backend_key, frontend_key};
pub use store::{BatchError, MapStore, MemStore, StoreError};

use crate::model::{Backend, Frontend};

/// Owns the store and a mirror of what the maps hold.
pub struct Reconciler<S> {
    store: S,
    mirror: Mirror,
}

impl<S: MapStore> Reconciler<S> {
    /// Adopts whatever the maps already hold (after a restart) without
    /// flushing it; the next reconcile fixes only the difference.
    pub fn adopt(store: S) -> Result<Self, StoreError> {
        let mirror = Mirror::new(store.read()?);
        Ok(Self { store, mirror })
    }

    /// Brings the maps to `desired`. Idempotent; after a failure (a full map,
    /// say) the maps are still consistent and the next call retries.
    pub fn reconcile(&mut self, desired: &BTreeMap<Frontend, Vec<Backend>>) -> Outcome {
        let target = target::build(
            desired.iter().map(|(fe, b)| (fe, b.as_slice())),
            &self.mirror,
        );
        apply::apply(&mut self.store, &mut self.mirror, &target, Scope::All)
    }

    /// Brings only the given frontends to their desired state (`None`:
    /// remove). Costs O(what they touch), whatever the size of the maps.
    pub fn reconcile_some<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a Frontend, Option<&'a [Backend]>)>,
    ) -> Outcome {
        let mut removed = Vec::new();
        let present = changes.into_iter().filter_map(|(fe, b)| {
            if b.is_none() {
                removed.push(frontend_key(fe, 0));
            }
            Some((fe, b?))
        });
        let target = target::build(present.collect::<Vec<_>>(), &self.mirror);
        apply::apply(
            &mut self.store,
            &mut self.mirror,
            &target,
            Scope::Some { removed: &removed },
        )
    }

    /// What the maps hold, as far as this reconciler wrote or read them.
    pub fn state(&self) -> &MapState {
        self.mirror.state()
    }

    pub fn store(&self) -> &S {
        &self.store
    }
}
