//! Which Service owns each frontend in the maps, for
//! `lbagent_services_programmed`.

use foldhash::HashMap;

use crate::model::{Frontend, ObjectRef};

/// Each frontend in the maps -> the Service that owns it, and how many
/// each Service owns.
#[derive(Debug, Default)]
pub(super) struct Owners {
    owner_of: HashMap<Frontend, ObjectRef>,
    owned: HashMap<ObjectRef, usize>,
}

impl Owners {
    /// Forgets every owner (before a full sync sets them all again).
    pub(super) fn clear(&mut self) {
        self.owner_of.clear();
        self.owned.clear();
    }

    /// `fe`'s owner is now `owner` (`None`: it is not in the maps).
    pub(super) fn set(&mut self, fe: &Frontend, owner: Option<ObjectRef>) {
        if let Some(old) = self.owner_of.remove(fe)
            && let Some(n) = self.owned.get_mut(&old)
        {
            *n -= 1;
            if *n == 0 {
                self.owned.remove(&old);
            }
        }
        if let Some(owner) = owner {
            *self.owned.entry(owner.clone()).or_default() += 1;
            self.owner_of.insert(*fe, owner);
        }
    }

    /// The Services owning a frontend in the maps.
    #[cfg(test)]
    pub(super) fn services(&self) -> impl Iterator<Item = &ObjectRef> {
        self.owned.keys()
    }

    /// How many Services own a frontend in the maps.
    pub(super) fn len(&self) -> usize {
        self.owned.len()
    }

    /// No frontend has an owner, and no Service is counted.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.owner_of.is_empty() && self.owned.is_empty()
    }
}
