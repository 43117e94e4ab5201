//! Writes a target into the store in make-before-break order.
//!
//! Per frontend: backends it needs, then slots `1..=n`, then slot 0 (the
//! count), then its stale slots. Removed frontends lose slot 0 before their
//! slots. Backends go last, once nothing refers to them. A reader that sees
//! any intermediate state finds every slot below the count and every backend
//! a slot names. A failed write abandons only that frontend; its slot 0 keeps
//! the old count, so it keeps its old, consistent behaviour, and what it wrote
//! that no reader can reach is deleted again so it does not hold room others need.

use std::{collections::HashSet, ops::RangeInclusive};

use lb_common::{Backend4, Service4Key};

use super::{BatchError, MapState, MapStore, StoreError, mirror::Mirror, state::key_frontend};
use crate::model::Frontend;

/// What one reconcile changed, and what it could not.
#[derive(Debug, Default)]
pub struct Outcome {
    pub backends_written: usize,
    pub backends_deleted: usize,
    pub services_written: usize,
    pub services_deleted: usize,
    /// Frontends left at their previous state because a write failed.
    pub failed: Vec<(Frontend, StoreError)>,
    /// Failed deletes: stale entries that stay until the next reconcile.
    pub delete_errors: Vec<StoreError>,
}

impl Outcome {
    pub fn changed(&self) -> usize {
        self.backends_written
            + self.backends_deleted
            + self.services_written
            + self.services_deleted
    }
}

/// All keys of the frontend that `key` belongs to, slot 0 first.
fn frontend_range(key: &Service4Key) -> RangeInclusive<Service4Key> {
    let first = Service4Key { slot: 0, ..*key };
    let last = Service4Key {
        slot: u16::MAX,
        ..*key
    };
    first..=last
}

/// Which frontends a pass covers.
pub(super) enum Scope<'a> {
    /// Every frontend: those not in the target are removed, and orphan slots
    /// and unreferenced backends anywhere are cleaned up.
    All,
    /// Only the target's frontends and these (slot-0 keys), which are removed.
    Some { removed: &'a [Service4Key] },
}

pub(super) fn apply<S: MapStore>(
    store: &mut S,
    mirror: &mut Mirror,
    target: &MapState,
    scope: Scope<'_>,
) -> Outcome {
    let mut out = Outcome::default();

    let removed: Vec<Service4Key> = match scope {
        Scope::All => mirror
            .state()
            .frontends()
            .map(|(k, _)| *k)
            .filter(|k| !target.services.contains_key(k))
            .collect(),
        Scope::Some { removed } => removed
            .iter()
            .filter(|k| mirror.state().services.contains_key(k))
            .copied()
            .collect(),
    };
    // Backends the touched frontends name now; they may be unused afterwards.
    let mut candidates: Vec<u32> = match scope {
        Scope::All => Vec::new(),
        Scope::Some { .. } => target
            .frontends()
            .map(|(k, _)| k)
            .chain(&removed)
            .flat_map(|k| mirror.state().services.range(frontend_range(k)))
            .filter(|(k, _)| k.slot != 0)
            .map(|(_, v)| v.backend_id)
            .collect(),
    };

    let target_frontends: Vec<Service4Key> = target.frontends().map(|(k, _)| *k).collect();
    for key0 in &target_frontends {
        if let Err(e) = update_frontend(store, mirror, target, key0, &mut out) {
            roll_back(store, mirror, target, key0, &mut out);
            if let Some(fe) = key_frontend(key0) {
                out.failed.push((fe, e));
            }
        }
    }

    // Frontends that are gone: slot 0 first, so no new lookup starts on them.
    for key0 in removed {
        let keys: Vec<Service4Key> = mirror
            .state()
            .services
            .range(frontend_range(&key0))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            delete_service(store, mirror, &key, &mut out);
        }
    }

    if let Scope::All = scope {
        // Orphan slots (a crash between writes can leave them) with no slot 0.
        let services = &mirror.state().services;
        let orphans: Vec<Service4Key> = services
            .keys()
            .filter(|k| k.slot != 0 && !services.contains_key(&Service4Key { slot: 0, ..**k }))
            .copied()
            .collect();
        for key in orphans {
            delete_service(store, mirror, &key, &mut out);
        }
        candidates = mirror.state().backends.keys().copied().collect();
    }
    delete_unreferenced_backends(store, mirror, candidates, &mut out);
    out
}

fn update_frontend<S: MapStore>(
    store: &mut S,
    mirror: &mut Mirror,
    target: &MapState,
    key0: &Service4Key,
    out: &mut Outcome,
) -> Result<(), StoreError> {
    let range = frontend_range(key0);
    // Backends this frontend needs.
    let backends: Vec<(u32, Backend4)> = target
        .services
        .range(range.clone())
        .filter(|(k, _)| k.slot != 0)
        .map(|(_, slot)| (slot.backend_id, target.backends[&slot.backend_id]))
        .filter(|(id, want)| mirror.state().backends.get(id) != Some(want))
        .collect();
    let result = store.put_backends(&backends);
    record(result, &backends, &mut out.backends_written, |(id, b)| {
        mirror.put_backend(id, b);
    })?;
    // Slots 1..=n, then slot 0 in a write of its own: the count only grows
    // once the slots exist.
    let (slots, slot0): (Vec<_>, Vec<_>) = target
        .services
        .range(range.clone())
        .filter(|(k, v)| mirror.state().services.get(k) != Some(v))
        .map(|(k, v)| (*k, *v))
        .partition(|(k, _)| k.slot != 0);
    for batch in [slots, slot0] {
        let result = store.put_services(&batch);
        record(result, &batch, &mut out.services_written, |(k, v)| {
            mirror.put_service(k, v);
        })?;
    }
    // Slots past the new count, now that the count excludes them.
    let stale: Vec<Service4Key> = mirror
        .state()
        .services
        .range(range)
        .map(|(k, _)| *k)
        .filter(|k| !target.services.contains_key(k))
        .collect();
    for key in stale {
        delete_service(store, mirror, &key, out);
    }
    Ok(())
}

/// Mirrors what a batch wrote (all of it, or the part before a failure)
/// and passes the failure on.
fn record<T: Copy>(
    result: Result<(), BatchError>,
    entries: &[T],
    written: &mut usize,
    mut mirror: impl FnMut(T),
) -> Result<(), StoreError> {
    let (done, failure) = match result {
        Ok(()) => (entries.len(), None),
        Err(BatchError { written, error }) => (written, Some(error)),
    };
    entries[..done].iter().for_each(|e| mirror(*e));
    *written += done;
    failure.map_or(Ok(()), Err)
}

/// Frees what a failed frontend update wrote but no reader can reach: slots
/// past its live count and backends no slot names. Left in place, they would
/// hold the room of a full map and fail every frontend after this one too.
fn roll_back<S: MapStore>(
    store: &mut S,
    mirror: &mut Mirror,
    target: &MapState,
    key0: &Service4Key,
    out: &mut Outcome,
) {
    let live = mirror.state().services.get(key0).map_or(0, |v| v.count);
    let unseen: Vec<Service4Key> = mirror
        .state()
        .services
        .range(frontend_range(key0))
        .map(|(k, _)| *k)
        .filter(|k| k.slot > live)
        .collect();
    for key in unseen {
        delete_service(store, mirror, &key, out);
    }
    let written: Vec<u32> = target
        .services
        .range(frontend_range(key0))
        .filter(|(k, _)| k.slot != 0)
        .map(|(_, v)| v.backend_id)
        .collect();
    delete_unreferenced_backends(store, mirror, written, out);
}

/// Deletes those of `candidates` that exist and that no slot names.
fn delete_unreferenced_backends<S: MapStore>(
    store: &mut S,
    mirror: &mut Mirror,
    candidates: Vec<u32>,
    out: &mut Outcome,
) {
    let mut seen = HashSet::new();
    for id in candidates {
        if mirror.is_referenced(id)
            || !mirror.state().backends.contains_key(&id)
            || !seen.insert(id)
        {
            continue;
        }
        match store.delete_backend(id) {
            Ok(()) => {
                mirror.remove_backend(id);
                out.backends_deleted += 1;
            }
            Err(e) => out.delete_errors.push(e),
        }
    }
}

fn delete_service<S: MapStore>(
    store: &mut S,
    mirror: &mut Mirror,
    key: &Service4Key,
    out: &mut Outcome,
) {
    match store.delete_service(key) {
        Ok(()) => {
            mirror.remove_service(key);
            out.services_deleted += 1;
        }
        Err(e) => out.delete_errors.push(e),
    }
}
