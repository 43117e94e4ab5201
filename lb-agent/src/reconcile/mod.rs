//! Diffs desired frontends against the maps and writes the difference so
//! that a program reading the maps concurrently never fails. Knows nothing
//! of Kubernetes; generic over the address family and the kind of table.

mod addresses;
mod dual;
mod family;
mod grace;
mod ids;
mod lb;
#[cfg(test)]
mod maglev_tests;
pub mod mem;
mod mirror;
mod pass;
mod settings;
mod table;
#[cfg(test)]
mod tests;
mod view;

use std::collections::{BTreeMap, HashSet};

pub use dual::{DualReconciler, MapEntries};
pub use family::{Family, StateView, V4, V6};
pub use grace::GracePeriods;
pub use lb::{LbMaps, LbTables, Tables, member_range, set_range};
pub use pass::Outcome;
pub use settings::{DsrEndpointKey, Settings, SettingsStore, SourceRangeKey};
pub use table::{BatchError, Found, MapKey, MapValue, StoreError, Table, WriteMode};
pub use view::{FrontendView, LbView, SlotView};

use grace::Retired;
use pass::{Change, Set};

use crate::model::{Frontend, Target, maglev::MaglevParams};

/// Owns one family's tables, a mirror of what they hold, and the revisions
/// waiting for their grace period.
pub struct Reconciler<F: Family, T: Tables, G: GracePeriods> {
    maps: LbMaps<F, T>,
    grace: G,
    retired: Retired<Set>,
}

impl<F: Family, T: Tables, G: GracePeriods> Reconciler<F, T, G> {
    /// Adopts whatever the tables already hold (after a restart) without
    /// flushing it; the next full reconcile fixes only the difference.
    /// Maglev tables are built with `maglev`.
    pub fn adopt(
        tables: LbTables<F, T>,
        grace: G,
        found: Found,
        maglev: MaglevParams,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            maps: LbMaps::adopt(tables, found, maglev)?,
            grace,
            retired: Retired::default(),
        })
    }

    /// Forgets what it knows of the tables and reads them again, so that
    /// the next [`Self::reconcile`] repairs whatever changed behind its back
    /// (an entry deleted by hand, say). Refused (`Ok(false)`) while retired
    /// revisions wait for their grace period: re-read, they would look
    /// unreferenced and be deleted before it passed.
    pub fn reload(&mut self) -> Result<bool, StoreError> {
        if self.retired.len() > 0 {
            return Ok(false);
        }
        self.maps.reload()?;
        Ok(true)
    }

    /// Brings the maps to `desired`, and cleans up whatever no desired
    /// frontend accounts for. Idempotent; after a failure (a full map, say)
    /// the maps are still consistent and the next call retries. Frontends
    /// of another family are not this reconciler's and are skipped.
    pub fn reconcile(&mut self, desired: &BTreeMap<Frontend, Target>) -> Outcome {
        let mut changes: Vec<Change<'_, F::FrontendKey>> = desired
            .iter()
            .filter_map(|(fe, t)| {
                Some(Change {
                    key: F::frontend_key(fe)?,
                    frontend: Some(*fe),
                    target: Some(t),
                })
            })
            .collect();
        let wanted: HashSet<F::FrontendKey> = changes.iter().map(|c| c.key).collect();
        changes.extend(
            self.maps
                .frontends()
                .keys()
                .filter(|k| !wanted.contains(*k))
                .map(|k| Change {
                    key: *k,
                    frontend: F::frontend(k),
                    target: None,
                }),
        );
        self.apply(changes, true)
    }

    /// Brings only the given frontends to their desired state (`None`:
    /// remove). Costs O(what they touch), whatever the size of the maps.
    /// Frontends of another family are skipped.
    pub fn reconcile_some<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a Frontend, Option<&'a Target>)>,
    ) -> Outcome {
        let changes: Vec<_> = changes
            .into_iter()
            .filter_map(|(fe, target)| {
                Some(Change {
                    key: F::frontend_key(fe)?,
                    frontend: Some(*fe),
                    target,
                })
            })
            .collect();
        self.apply(changes, false)
    }

    /// Writes `changes`, each port before its address's wildcard; `full`:
    /// they are every frontend.
    fn apply(&mut self, mut changes: Vec<Change<'_, F::FrontendKey>>, full: bool) -> Outcome {
        ports_before_wildcards(&mut changes);
        pass::apply(
            &mut self.maps,
            &mut self.grace,
            &mut self.retired,
            changes,
            full,
        )
    }

    /// Deletes retired revisions whose grace period has passed, and the
    /// backends only they named.
    pub fn reap(&mut self) -> Outcome {
        pass::reap(&mut self.maps, &self.grace, &mut self.retired)
    }

    /// Revisions waiting for their grace period.
    pub fn retiring(&self) -> usize {
        self.retired.len()
    }

    /// Whether `fe` has an entry in the frontends map.
    pub fn has(&self, fe: &Frontend) -> bool {
        F::frontend_key(fe).is_some_and(|k| self.maps.frontends().contains_key(&k))
    }

    /// What the maps hold, as far as this reconciler wrote or read them.
    pub fn maps(&self) -> &LbMaps<F, T> {
        &self.maps
    }

    #[cfg(test)]
    pub fn maps_mut(&mut self) -> &mut LbMaps<F, T> {
        &mut self.maps
    }

    /// The maps as the datapath sees them.
    pub fn view(&self) -> LbView {
        LbView::of::<F>(
            self.maps.frontends(),
            self.maps.states(),
            self.maps.slots(),
            self.maps.members(),
            self.maps.backends(),
        )
    }
}

/// Orders each address's wildcard frontend after its ports (addresses stay
/// in order). A pass that runs out of room then leaves a Service's
/// catch-all unwritten rather than one of its ports, which the wildcard
/// would refuse.
fn ports_before_wildcards<K>(changes: &mut [Change<'_, K>]) {
    changes.sort_by_key(|c| c.frontend.map(|f| (f.vip, f.is_wildcard())));
}
