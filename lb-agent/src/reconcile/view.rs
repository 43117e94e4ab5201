//! The maps as the datapath sees them: each frontend with the backends of
//! its live revision, in slot order. What `lb-agent dump` prints.

use std::{
    collections::{BTreeMap, HashSet},
    net::IpAddr,
};

use lb_common::{FrontendId, Member, MemberKey, Slot, SlotKey};

use super::family::Family;

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
    pub slots: Vec<SlotView>,
}

/// One slot of a live revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotView {
    Backend {
        backend_id: u32,
        addr: IpAddr,
        port: u16,
    },
    /// Cannot happen when the agent wrote the maps; shown, not hidden.
    MissingSlot,
    MissingBackend(u32),
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
                let (addr, port, proto) = F::key_parts(key);
                let state = states.get(&id.id).map(F::view);
                let live = state.is_some_and(|s| s.owner == *key);
                let (rev, count, flags, affinity_timeout) = state.map_or((0, 0, 0, 0), |s| {
                    (s.rev, s.count, s.flags, s.affinity_timeout)
                });
                let slots = if live {
                    live_sets.insert((id.id, rev));
                    (0..count)
                        .map(|slot| {
                            let key = SlotKey {
                                fe_id: id.id,
                                rev,
                                slot,
                            };
                            match slots.get(&key) {
                                None => SlotView::MissingSlot,
                                Some(s) => match backends.get(&s.backend_id) {
                                    None => SlotView::MissingBackend(s.backend_id),
                                    Some(b) => {
                                        let (addr, port, _) = F::backend_parts(b);
                                        SlotView::Backend {
                                            backend_id: s.backend_id,
                                            addr,
                                            port,
                                        }
                                    }
                                },
                            }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                FrontendView {
                    addr,
                    port,
                    proto,
                    id: id.id,
                    live,
                    rev,
                    count,
                    flags: if live { flags } else { 0 },
                    affinity_timeout: if live { affinity_timeout } else { 0 },
                    slots,
                }
            })
            .collect();
        list.sort_by_key(|f| (f.addr, f.port, f.proto));
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
}
