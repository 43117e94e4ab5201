//! Frontend lookup and backend selection, shared by every hook family.
//!
//! Why no lookup below can fail or read a recycled element (the agent's side
//! of the bargain is in ARCHITECTURE.md, "Readers see whole states"):
//!
//! * Every program runs inside an RCU read-side critical section, and the
//!   agent deletes a slot or backend only after an RCU grace period that
//!   started once no frontend state named it any more.
//! * `LB4_FRONTENDS`, `LB4_SLOTS` and `LB4_BACKENDS` entries are never
//!   updated, so their elements are never swapped for new ones while the key
//!   exists. Only a deleted `LB4_FRONTENDS` key frees an element that a
//!   reader may still hold; the id read from it is then checked against the
//!   state's owner.
//! * `LB4_FE_STATE` is an array (elements are never freed) written only in
//!   place under its spin lock, which the reader holds while it copies.

use aya_ebpf::{
    bindings::bpf_spin_lock,
    helpers::{bpf_spin_lock as lock, bpf_spin_unlock as unlock},
};
use lb_common::{Backend4, Frontend4Key, Frontend4State, SlotKey};

use crate::maps::{LB4_BACKENDS, LB4_FE_STATE, LB4_FRONTENDS, LB4_SLOTS};

/// What a frontend lookup decided.
pub enum Selection {
    /// Not one of our frontends: leave the address alone.
    NotFrontend,
    /// A frontend that is being removed right now: leave the address alone,
    /// as it will be once the removal completes.
    Removed,
    /// A frontend with no usable endpoint: refuse.
    NoEndpoints,
    /// Send to this backend.
    Backend(Backend4),
    /// The state named a slot or backend that is missing. The agent's write
    /// order rules this out; it is counted so that tests can show it.
    Inconsistent,
}

/// The fields of a [`Frontend4State`] a lookup uses, copied under its lock.
struct Snapshot {
    owner: Frontend4Key,
    rev: u16,
    count: u16,
}

/// Picks a backend of frontend `key`; `rand` chooses among its slots.
#[inline(always)]
pub fn select4(key: &Frontend4Key, rand: u32) -> Selection {
    let Some(frontend) = LB4_FRONTENDS.get_ptr(key) else {
        return Selection::NotFrontend;
    };
    // SAFETY: a hash value stays mapped while the program runs (RCU). Its
    // content is this key's id, unless the agent deleted the key since the
    // lookup and the kernel recycled the element: then the id may be anything,
    // and the owner check below rejects it.
    let fe_id = unsafe { core::ptr::read_volatile(&raw const (*frontend).id) };
    let Some(state) = LB4_FE_STATE.get_ptr_mut(fe_id) else {
        return Selection::Removed;
    };
    let snap = read_locked(state);
    if snap.owner != *key {
        return Selection::Removed;
    }
    if snap.count == 0 {
        return Selection::NoEndpoints;
    }
    let slot_key = SlotKey {
        fe_id,
        rev: snap.rev,
        // Below count, which is a u16.
        slot: (rand % u32::from(snap.count)) as u16,
    };
    let Some(slot) = LB4_SLOTS.get_ptr(slot_key) else {
        return Selection::Inconsistent;
    };
    // SAFETY: slots are never updated and are deleted only after a grace
    // period that began once no state named this revision; this program
    // read the state before that, so the element is live and unchanged.
    let backend_id = unsafe { (*slot).backend_id };
    let Some(backend) = LB4_BACKENDS.get_ptr(backend_id) else {
        return Selection::Inconsistent;
    };
    // SAFETY: as for the slot: backends are never updated, and deleted only
    // a grace period after the last revision naming them became unreachable.
    Selection::Backend(unsafe { *backend })
}

/// Copies the state's fields while holding its lock, so that a concurrent
/// `BPF_F_LOCK` update is seen either whole or not at all.
#[inline(always)]
fn read_locked(state: *mut Frontend4State) -> Snapshot {
    // SAFETY: `state` points into an array element, which lives as long as
    // the map. The lock is the value's first field, where the kernel's BTF
    // check found it; between lock and unlock only plain loads run, which
    // is all the verifier allows there.
    unsafe {
        let l = (&raw mut (*state).lock).cast::<bpf_spin_lock>();
        lock(l);
        let snap = Snapshot {
            owner: (*state).owner,
            rev: (*state).rev,
            count: (*state).count,
        };
        unlock(l);
        snap
    }
}
