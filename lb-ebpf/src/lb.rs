//! Frontend lookup and backend selection, shared by every hook and both
//! address families ([`LbMaps`], which `crate::family` binds; the `LB4_*`
//! maps named below have `LB6_*` twins).
//!
//! Why no lookup below can fail or read a recycled element (the agent's side
//! of the bargain is in ARCHITECTURE.md, "Readers see whole states"):
//!
//! * Every program runs inside an RCU read-side critical section, and the
//!   agent deletes a slot or backend only after an RCU grace period that
//!   started once no frontend state named it any more.
//! * `LB4_FRONTENDS`, `LB4_SLOTS`, `LB4_MEMBERS` and `LB4_BACKENDS` entries
//!   are never updated, so their elements are never swapped for new ones while the key
//!   exists. Only a deleted `LB4_FRONTENDS` key frees an element that a
//!   reader may still hold; the id read from it is then checked against the
//!   state's owner.
//! * `LB4_FE_STATE` is an array (elements are never freed) written only in
//!   place under its spin lock, which the reader holds while it copies.

use aya_ebpf::{
    bindings::bpf_spin_lock,
    btf_maps::{Array, HashMap, LruHashMap},
    helpers::{bpf_ktime_get_coarse_ns, bpf_spin_lock as lock, bpf_spin_unlock as unlock},
};
use lb_common::{
    AffinityKey, AffinityValue, Backend, FE_F_AFFINITY, FE_F_MAGLEV, FE_F_NO_LOCAL_ENDPOINTS,
    FrontendId, FrontendKey, FrontendState, MAGLEV_CHUNK, MaglevChunk, MaglevKey, Member,
    MemberKey, Slot, SlotKey, WILDCARD_PROTO,
};

use crate::maps::{
    AFFINITY_MAX, BACKENDS_MAX, FE_STATE_MAX, FRONTENDS_MAX, MAGLEV_MAX, NO_PREALLOC, SLOTS_MAX,
};

/// What the lookup needs of an address family: its load-balancing maps
/// (`lb_common::lb`), which `family` binds.
pub trait LbMaps {
    /// An address as packets and sockets hold it.
    type LbAddr: Copy + PartialEq + 'static;
    fn frontends()
    -> &'static HashMap<FrontendKey<Self::LbAddr>, FrontendId, FRONTENDS_MAX, NO_PREALLOC>;
    fn fe_states() -> &'static Array<FrontendState<Self::LbAddr>, FE_STATE_MAX>;
    fn slots() -> &'static HashMap<SlotKey, Slot, SLOTS_MAX, NO_PREALLOC>;
    fn backends() -> &'static HashMap<u32, Backend<Self::LbAddr>, BACKENDS_MAX, NO_PREALLOC>;
    fn members() -> &'static HashMap<MemberKey, Member, SLOTS_MAX, NO_PREALLOC>;
    fn affinity() -> &'static LruHashMap<AffinityKey, AffinityValue, AFFINITY_MAX>;
    fn maglev() -> &'static HashMap<MaglevKey, MaglevChunk, MAGLEV_MAX, NO_PREALLOC>;
}

/// What a frontend lookup decided.
pub enum Selection<B> {
    /// Not one of our frontends: leave the address alone.
    NotFrontend,
    /// A frontend that is being removed right now: leave the address alone,
    /// as it will be once the removal completes.
    Removed,
    /// A frontend with no usable endpoint: refuse. `flags`: its `FE_F_*`.
    NoEndpoints { flags: u16 },
    /// `internalTrafficPolicy: Local` with endpoints, none on this node.
    NoLocalEndpoints { flags: u16 },
    /// A Service address, on a port or protocol its Service does not define.
    UnknownPort,
    /// Send to this backend (`id` in the backends map); `flags` are the
    /// frontend's `FE_F_*`; `sticky` when session affinity chose it.
    Backend {
        backend: B,
        id: u32,
        flags: u16,
        sticky: bool,
    },
    /// The state named a slot or backend that is missing. The agent's write
    /// order rules this out; it is counted so that tests can show it.
    Inconsistent,
}

/// The fields of a frontend state a lookup uses, copied under its lock.
pub struct Snapshot<A> {
    pub(crate) owner: FrontendKey<A>,
    pub(crate) rev: u16,
    pub(crate) count: u16,
    pub(crate) flags: u16,
    pub(crate) affinity_timeout: u32,
    pub(crate) maglev_size: u32,
}

/// Copies the fields of state `fe_id` while holding its lock, so that a
/// concurrent `BPF_F_LOCK` update is seen either whole or not at all.
#[inline(always)]
pub fn read_state<F: LbMaps>(fe_id: u32) -> Option<Snapshot<F::LbAddr>> {
    let state = F::fe_states().get_ptr_mut(fe_id)?;
    // SAFETY: `state` points into an array element, which lives as long as
    // the map. The lock is the value's first field, where the kernel's BTF
    // check found it; between lock and unlock only plain loads run, which is
    // all the verifier allows there.
    unsafe {
        let l = (&raw mut (*state).lock).cast::<bpf_spin_lock>();
        lock(l);
        let snap = Snapshot {
            owner: (*state).owner,
            rev: (*state).rev,
            count: (*state).count,
            flags: (*state).flags,
            affinity_timeout: (*state).affinity_timeout,
            maglev_size: (*state).maglev_size,
        };
        unlock(l);
        Some(snap)
    }
}

/// How a new connection picks a backend of the current revision: one of
/// its `count` slots, or, for a frontend with a Maglev table, the table's
/// entry at the flow's hash.
pub trait Strategy {
    /// The slot, below `count` (which is not 0).
    fn slot(&self, fe_id: u32, count: u16) -> u16;
    /// The flow's hash (`lb_common::FlowHash`; `affinity`: the frontend
    /// has session affinity, so the source port is left out). `None` where
    /// flows are not hashed: the socket hooks, whose frontends have no
    /// table.
    fn flow_hash(&self, affinity: bool) -> Option<u32>;
}

/// A slot at random, as kube-proxy's iptables `statistic` rules.
pub struct Random(pub u32);

impl Strategy for Random {
    #[inline(always)]
    fn slot(&self, _fe_id: u32, count: u16) -> u16 {
        // Below count, which is a u16.
        (self.0 % u32::from(count)) as u16
    }

    #[inline(always)]
    fn flow_hash(&self, _affinity: bool) -> Option<u32> {
        None
    }
}

/// Picks a backend of frontend `key`; `strategy` chooses among its slots
/// and `client` names the client for session affinity (called only then).
/// `wildcard`: on a miss, try the key's wildcard (cluster IPs have them,
/// external frontends do not).
#[inline(always)]
pub fn select<F: LbMaps>(
    key: &FrontendKey<F::LbAddr>,
    wildcard: bool,
    strategy: &impl Strategy,
    client: impl FnOnce() -> u64,
) -> Selection<Backend<F::LbAddr>> {
    let (lookup, frontend) = match F::frontends().get_ptr(key) {
        Some(f) => (*key, f),
        None if !wildcard => return Selection::NotFrontend,
        None => {
            // Only Service addresses pay this second lookup's hit; other
            // traffic pays its miss.
            let any = key.wildcard();
            match F::frontends().get_ptr(any) {
                Some(f) => (any, f),
                None => return Selection::NotFrontend,
            }
        }
    };
    // SAFETY: a hash value stays mapped while the program runs (RCU). Its
    // content is this key's id, unless the agent deleted the key since the
    // lookup and the kernel recycled the element: then the id may be anything,
    // and the owner check below rejects it.
    let fe_id = unsafe { core::ptr::read_volatile(&raw const (*frontend).id) };
    let Some(snap) = read_state::<F>(fe_id) else {
        return Selection::Removed;
    };
    if snap.owner != lookup {
        return Selection::Removed;
    }
    if lookup.proto == WILDCARD_PROTO {
        return Selection::UnknownPort;
    }
    if snap.count == 0 {
        let flags = snap.flags;
        return if flags & FE_F_NO_LOCAL_ENDPOINTS != 0 {
            Selection::NoLocalEndpoints { flags }
        } else {
            Selection::NoEndpoints { flags }
        };
    }
    if snap.flags & FE_F_AFFINITY == 0 {
        return match pick::<F>(fe_id, &snap, strategy) {
            Some((id, backend)) => Selection::Backend {
                backend,
                id,
                flags: snap.flags,
                sticky: false,
            },
            None => Selection::Inconsistent,
        };
    }
    let aff_key = AffinityKey {
        netns_cookie: client(),
        fe_id,
        _pad0: [0; 4],
    };
    // SAFETY: the helper has no preconditions.
    let now = unsafe { bpf_ktime_get_coarse_ns() };
    if let Some((id, backend)) = remembered::<F>(&aff_key, &snap, now) {
        return Selection::Backend {
            backend,
            id,
            flags: snap.flags,
            sticky: true,
        };
    }
    let Some((backend_id, backend)) = pick::<F>(fe_id, &snap, strategy) else {
        return Selection::Inconsistent;
    };
    let value = AffinityValue {
        last_used_ns: now,
        backend_id,
        _pad0: [0; 4],
    };
    // A failed insert (no memory) only costs stickiness for this client.
    let _ = F::affinity().insert(aff_key, value, 0);
    Selection::Backend {
        backend,
        id: backend_id,
        flags: snap.flags,
        sticky: false,
    }
}

/// The client's remembered backend and its id, if it used it within the
/// timeout and it is still in the current revision; refreshes its last use.
#[inline(always)]
fn remembered<F: LbMaps>(
    key: &AffinityKey,
    snap: &Snapshot<F::LbAddr>,
    now: u64,
) -> Option<(u32, Backend<F::LbAddr>)> {
    let entry = F::affinity().get_ptr_mut(key)?;
    // SAFETY: the value stays mapped while the program runs (RCU). If the LRU
    // evicts and recycles it meanwhile, the fields read may be another
    // client's: the member check below still only lets a current candidate
    // through.
    let (last, backend_id) = unsafe { ((*entry).last_used_ns, (*entry).backend_id) };
    if now.wrapping_sub(last) > u64::from(snap.affinity_timeout) * 1_000_000_000 {
        return None;
    }
    let member = MemberKey {
        fe_id: key.fe_id,
        rev: snap.rev,
        _pad0: [0; 2],
        backend_id,
    };
    F::members().get_ptr(member)?;
    // The member entry proves the revision this program read names the
    // backend, so it cannot be deleted before this program ends.
    let backend = F::backends().get_ptr(backend_id)?;
    // SAFETY: as above; a plain store to a live element, and a lost race
    // with another connect of the same client only keeps its time instead.
    unsafe { (*entry).last_used_ns = now };
    // SAFETY: backends are never updated, and deleted only a grace period
    // after the last revision naming them became unreachable.
    Some((backend_id, unsafe { *backend }))
}

/// The backend of the snapshot's revision `strategy` picks, with its id.
#[inline(always)]
fn pick<F: LbMaps>(
    fe_id: u32,
    snap: &Snapshot<F::LbAddr>,
    strategy: &impl Strategy,
) -> Option<(u32, Backend<F::LbAddr>)> {
    let hash = if snap.flags & FE_F_MAGLEV != 0 {
        strategy.flow_hash(snap.flags & FE_F_AFFINITY != 0)
    } else {
        None
    };
    let backend_id = match hash {
        Some(hash) => maglev_entry::<F>(fe_id, snap, hash)?,
        None => {
            let slot_key = SlotKey {
                fe_id,
                rev: snap.rev,
                slot: strategy.slot(fe_id, snap.count),
            };
            let slot = F::slots().get_ptr(slot_key)?;
            // SAFETY: slots are never updated and are deleted only after a
            // grace period that began once no state named this revision;
            // this program read the state before that, so the element is
            // live and unchanged.
            unsafe { (*slot).backend_id }
        }
    };
    let backend = F::backends().get_ptr(backend_id)?;
    // SAFETY: as for the slot: backends are never updated, and deleted only
    // a grace period after the last revision naming them became unreachable.
    Some((backend_id, unsafe { *backend }))
}

/// The backend id at entry `hash % maglev_size` of the snapshot's
/// revision's Maglev table.
#[inline(always)]
fn maglev_entry<F: LbMaps>(fe_id: u32, snap: &Snapshot<F::LbAddr>, hash: u32) -> Option<u32> {
    if snap.maglev_size == 0 {
        return None;
    }
    let entry = hash % snap.maglev_size;
    let key = MaglevKey {
        fe_id,
        rev: snap.rev,
        // Below 2^16: the largest table has 131,071 entries.
        chunk: (entry / MAGLEV_CHUNK as u32) as u16,
    };
    let chunk = F::maglev().get_ptr(key)?;
    // SAFETY: chunks are written with their revision's slots and, like
    // them, never updated and deleted only a grace period after no state
    // names the revision: live and unchanged while this program runs.
    let id = unsafe { (*chunk).backend_ids[entry as usize % MAGLEV_CHUNK] };
    (id != 0).then_some(id)
}
