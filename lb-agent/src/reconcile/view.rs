//! The maps as the datapath sees them: each frontend with the backends of
//! its live revision, in slot order. What `lb-agent dump` prints.

use std::{
    collections::{BTreeMap, HashSet},
    net::IpAddr,
    ops::Range,
};

use lb_common::{FrontendId, Member, MemberKey, Slot, SlotKey};

use super::{family::Family, lb::set_range};

/// Everything in one family's maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LbView {
    /// Frontend entries, sorted by address, port, protocol.
    pub frontends: Vec<FrontendView>,
    /// Revisions in the slots map that no state names: waiting for their
    /// grace period, or left by a crash until the next full sync.
    pub retired_revisions: usize,
    /// Entries in each map: frontends, states, slots, members, backends.
    pub entries: [usize; 5],
}

/// One frontend entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontendView {
    pub addr: IpAddr,
    pub port: u16,
    pub proto: u8,
    /// `SCOPE_INTERNAL` or `SCOPE_EXTERNAL`.
    pub scope: u8,
    pub id: u32,
    /// The state names this frontend back; if not, a program passes the
    /// address on (the frontend is being removed, or the maps are damaged).
    pub live: bool,
    pub rev: u16,
    /// 0: connections are refused.
    pub count: u16,
    /// `FE_F_*` bits of the state.
    pub flags: u16,
    /// Session affinity timeout in seconds (0: none).
    pub affinity_timeout: u32,
    /// Entries of the revision's Maglev table (0: none).
    pub maglev_size: u32,
    pub slots: Vec<SlotView>,
}

/// One slot of a live revision, or a run of missing ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotView {
    Backend {
        backend_id: u32,
        addr: IpAddr,
        port: u16,
    },
    /// Slots absent from the map. Cannot happen when the agent wrote the
    /// maps; shown, not hidden, but as one run: a damaged state may claim
    /// 65,535 slots that do not exist.
    MissingSlots(Range<u16>),
    MissingBackend(u32),
}

impl SlotView {
    /// How many slots of the revision this stands for.
    pub fn slots(&self) -> usize {
        match self {
            SlotView::MissingSlots(run) => run.len(),
            SlotView::Backend { .. } | SlotView::MissingBackend(_) => 1,
        }
    }
}

/// The slots `0..count` of revision `rev` of frontend `fe_id`, from the
/// entries present: as many views as entries, plus one per gap.
fn revision_slots<F: Family>(
    fe_id: u32,
    rev: u16,
    count: u16,
    slots: &BTreeMap<SlotKey, Slot>,
    backends: &BTreeMap<u32, F::Backend>,
) -> Vec<SlotView> {
    let mut out = Vec::new();
    let mut next = 0;
    for (key, s) in slots.range(set_range(fe_id, rev)) {
        if key.slot >= count {
            break;
        }
        if key.slot > next {
            out.push(SlotView::MissingSlots(next..key.slot));
        }
        out.push(match backends.get(&s.backend_id) {
            None => SlotView::MissingBackend(s.backend_id),
            Some(b) => {
                let (addr, port, _) = F::backend_parts(b);
                SlotView::Backend {
                    backend_id: s.backend_id,
                    addr,
                    port,
                }
            }
        });
        // Below `count`, so no overflow.
        next = key.slot + 1;
    }
    if next < count {
        out.push(SlotView::MissingSlots(next..count));
    }
    out
}

impl LbView {
    pub fn of<F: Family>(
        frontends: &BTreeMap<F::FrontendKey, FrontendId>,
        states: &BTreeMap<u32, F::State>,
        slots: &BTreeMap<SlotKey, Slot>,
        members: &BTreeMap<MemberKey, Member>,
        backends: &BTreeMap<u32, F::Backend>,
    ) -> Self {
        let mut live_sets = HashSet::new();
        let mut list: Vec<FrontendView> = frontends
            .iter()
            .map(|(key, id)| {
                let (addr, port, proto, scope) = F::key_parts(key);
                let state = states.get(&id.id).map(F::view);
                let live = state.is_some_and(|s| s.owner == *key);
                let (rev, count, flags, affinity_timeout, maglev_size) = state
                    .map_or((0, 0, 0, 0, 0), |s| {
                        (s.rev, s.count, s.flags, s.affinity_timeout, s.maglev_size)
                    });
                let slots = if live {
                    live_sets.insert((id.id, rev));
                    revision_slots::<F>(id.id, rev, count, slots, backends)
                } else {
                    Vec::new()
                };
                FrontendView {
                    addr,
                    port,
                    proto,
                    scope,
                    id: id.id,
                    live,
                    rev,
                    count,
                    flags: if live { flags } else { 0 },
                    affinity_timeout: if live { affinity_timeout } else { 0 },
                    maglev_size: if live { maglev_size } else { 0 },
                    slots,
                }
            })
            .collect();
        list.sort_by_key(|f| (f.addr, f.port, f.proto, f.scope));
        let sets: HashSet<(u32, u16)> = slots.keys().map(|k| (k.fe_id, k.rev)).collect();
        Self {
            frontends: list,
            retired_revisions: sets.difference(&live_sets).count(),
            entries: [
                frontends.len(),
                states.len(),
                slots.len(),
                members.len(),
                backends.len(),
            ],
        }
    }

    /// One listing of both families' views (IPv4 frontends sort first);
    /// entries are summed map by map.
    pub fn merge(mut self, other: LbView) -> Self {
        self.frontends.extend(other.frontends);
        self.frontends.sort_by_key(|f| (f.addr, f.port, f.proto));
        self.retired_revisions += other.retired_revisions;
        for (mine, theirs) in self.entries.iter_mut().zip(other.entries) {
            *mine += theirs;
        }
        self
    }
}
