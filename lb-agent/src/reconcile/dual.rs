//! Both families' reconcilers, addressed as one, as kube-proxy's
//! `NewDualStackProxier` wraps one proxier per family.
//!
//! Every call goes to both: each skips the frontends of the other family.

use std::collections::BTreeMap;

use super::{
    Family, Found, GracePeriods, LbTables, Outcome, Reconciler, StoreError, Tables, V4, V6,
    view::LbView,
};
use crate::model::{Frontend, IpFamily, Target, maglev::MaglevParams};

/// How many entries one family's frontends and backends maps hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapEntries {
    pub family: IpFamily,
    pub frontends: usize,
    pub backends: usize,
}

pub struct DualReconciler<T: Tables, G: GracePeriods> {
    v4: Reconciler<V4, T, G>,
    v6: Reconciler<V6, T, G>,
}

impl<T: Tables, G: GracePeriods + Clone> DualReconciler<T, G> {
    /// [`Reconciler::adopt`] for each family; both share the grace periods.
    pub fn adopt(
        v4: LbTables<V4, T>,
        v6: LbTables<V6, T>,
        grace: G,
        found: Found,
        maglev: MaglevParams,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            v4: Reconciler::adopt(v4, grace.clone(), found, maglev)?,
            v6: Reconciler::adopt(v6, grace, found, maglev)?,
        })
    }
}

impl<T: Tables, G: GracePeriods> DualReconciler<T, G> {
    /// [`Reconciler::reload`]: refused unless neither family has retired
    /// revisions waiting.
    pub fn reload(&mut self) -> Result<bool, StoreError> {
        if self.retiring() > 0 {
            return Ok(false);
        }
        Ok(self.v4.reload()? && self.v6.reload()?)
    }

    pub fn reconcile(&mut self, desired: &BTreeMap<Frontend, Target>) -> Outcome {
        let v4 = self.v4.reconcile(desired);
        v4.merge(self.v6.reconcile(desired))
    }

    pub fn reconcile_some(&mut self, changes: &[(&Frontend, Option<&Target>)]) -> Outcome {
        let v4 = self.v4.reconcile_some(changes.iter().copied());
        v4.merge(self.v6.reconcile_some(changes.iter().copied()))
    }

    pub fn reap(&mut self) -> Outcome {
        let v4 = self.v4.reap();
        v4.merge(self.v6.reap())
    }

    pub fn retiring(&self) -> usize {
        self.v4.retiring() + self.v6.retiring()
    }

    /// Whether `fe` has an entry in its family's frontends map.
    pub fn has(&self, fe: &Frontend) -> bool {
        self.v4.has(fe) || self.v6.has(fe)
    }

    /// Entries of each family's frontends and backends maps.
    pub fn entries(&self) -> [MapEntries; 2] {
        [
            MapEntries {
                family: IpFamily::V4,
                frontends: self.v4.maps().frontends().len(),
                backends: self.v4.maps().backends().len(),
            },
            MapEntries {
                family: IpFamily::V6,
                frontends: self.v6.maps().frontends().len(),
                backends: self.v6.maps().backends().len(),
            },
        ]
    }

    /// Every frontend in the maps that the model can express.
    pub fn frontends(&self) -> impl Iterator<Item = Frontend> + '_ {
        let v4 = self.v4.maps().frontends().keys().filter_map(V4::frontend);
        let v6 = self.v6.maps().frontends().keys().filter_map(V6::frontend);
        v4.chain(v6)
    }

    /// Both families' maps as the datapath sees them, in one listing.
    pub fn view(&self) -> LbView {
        self.v4.view().merge(self.v6.view())
    }

    #[cfg(test)]
    pub fn v4(&self) -> &Reconciler<V4, T, G> {
        &self.v4
    }

    #[cfg(test)]
    pub fn v4_mut(&mut self) -> &mut Reconciler<V4, T, G> {
        &mut self.v4
    }
}
