//! Builds the target map content of some frontends, reusing the ids already
//! in the maps so that unchanged entries compare equal.

use std::collections::HashMap;

use lb_common::{Backend4, MAX_BACKENDS_PER_SERVICE, ServiceValue};

use super::{MapState, backend_key, frontend_key, mirror::Mirror};
use crate::model::{Backend, Frontend};

/// The target of the given frontends only. New ids are the lowest free ones;
/// ids in the maps stay reserved for the whole pass, so a freed id is never
/// reused for another address while a not-yet-updated slot may still name it.
pub(super) fn build<'a>(
    desired: impl IntoIterator<Item = (&'a Frontend, &'a [Backend])>,
    current: &Mirror,
) -> MapState {
    let mut new_ids: HashMap<Backend4, u32> = HashMap::new();
    // Ids handed out in this pass lie below these.
    let (mut backend_floor, mut svc_floor) = (1, 1);

    let mut target = MapState::default();
    for (fe, backends) in desired {
        let key0 = frontend_key(fe, 0);
        let svc_id = match current.state().services.get(&key0) {
            Some(v) => v.svc_id,
            None => current.svc_ids().lowest_free(&mut svc_floor),
        };
        let backends = &backends[..backends.len().min(usize::from(MAX_BACKENDS_PER_SERVICE))];
        for (slot, be) in (1u16..).zip(backends) {
            let value = backend_key(be, fe.proto);
            let id = match current.id_of(&value) {
                Some(id) => id,
                None => *new_ids
                    .entry(value)
                    .or_insert_with(|| current.backend_ids().lowest_free(&mut backend_floor)),
            };
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
