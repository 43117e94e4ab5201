//! Builds the target map content from desired frontends, reusing the ids
//! already in the maps so that unchanged entries compare equal.

use std::collections::{BTreeMap, HashMap, HashSet};

use lb_common::{Backend4, MAX_BACKENDS_PER_SERVICE, ServiceValue};

use super::{MapState, backend_key, frontend_key};
use crate::model::{Backend, Frontend};

/// Hands out the lowest ids (from 1) not in use. Ids present in the current
/// maps stay reserved for the whole pass, so a freed id is never reused for
/// another address while a not-yet-updated slot may still point at it.
struct IdAlloc {
    used: HashSet<u32>,
    next: u32,
}

impl IdAlloc {
    fn new(used: impl IntoIterator<Item = u32>) -> Self {
        Self {
            used: used.into_iter().collect(),
            next: 1,
        }
    }

    fn alloc(&mut self) -> u32 {
        while self.used.contains(&self.next) {
            self.next += 1;
        }
        self.used.insert(self.next);
        self.next
    }
}

pub(super) fn build(desired: &BTreeMap<Frontend, Vec<Backend>>, current: &MapState) -> MapState {
    let mut backend_ids: HashMap<Backend4, u32> =
        current.backends.iter().map(|(id, b)| (*b, *id)).collect();
    let mut backend_alloc = IdAlloc::new(current.backends.keys().copied());
    let mut svc_alloc = IdAlloc::new(current.frontends().map(|(_, v)| v.svc_id));

    let mut target = MapState::default();
    for (fe, backends) in desired {
        let key0 = frontend_key(fe, 0);
        let svc_id = match current.services.get(&key0) {
            Some(v) => v.svc_id,
            None => svc_alloc.alloc(),
        };
        let backends = &backends[..backends.len().min(usize::from(MAX_BACKENDS_PER_SERVICE))];
        for (slot, be) in (1u16..).zip(backends) {
            let value = backend_key(be, fe.proto);
            let id = *backend_ids
                .entry(value)
                .or_insert_with(|| backend_alloc.alloc());
            target.backends.insert(id, value);
            target.services.insert(
                frontend_key(fe, slot),
                ServiceValue {
                    backend_id: id,
                    svc_id,
                    ..ServiceValue::default()
                },
            );
        }
        target.services.insert(
            key0,
            ServiceValue {
                svc_id,
                // Bounded by MAX_BACKENDS_PER_SERVICE above.
                count: backends.len() as u16,
                ..ServiceValue::default()
            },
        );
    }
    target
}
