//! The write protocol.
//!
//! A frontend whose backends change gets a new revision: its backends and
//! slots are inserted beside the live revision, then one locked write of
//! its state publishes the new revision. A new frontend gets its state
//! before its frontend entry. What no state names any more (old revisions,
//! the revisions of removed frontends) is retired, and deleted only once a
//! grace period has passed; a backend goes when its last slot does. So a
//! program never finds a slot or backend missing, and never reads a hash
//! element the kernel recycled (ARCHITECTURE.md, "Readers see whole states").
//!
//! Each phase (backends, slots, states, frontend entries) is one batch over
//! all frontends of the pass. A failed write fails its frontend only: what
//! it wrote that no state published is deleted at once, so it does not hold
//! room that other frontends need, and the frontend keeps its live revision.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    net::SocketAddr,
    sync::Arc,
};

use lb_common::{
    FE_F_AFFINITY, FE_F_DSR, FE_F_EXTERNAL_LOCAL, FE_F_LOCAL, FE_F_MAGLEV, FE_F_NO_LOCAL_ENDPOINTS,
    FE_F_SOURCE_RANGES, FE_KIND_CLUSTER_IP, FE_KIND_EXTERNAL_IP, FE_KIND_LOAD_BALANCER,
    FE_KIND_NODE_PORT, FrontendId, MAGLEV_CHUNK, MAX_BACKENDS_PER_FRONTEND, MaglevChunk, MaglevKey,
    Member, MemberKey, Slot, SlotKey,
};

use super::{
    family::{Family, StateView},
    grace::{GracePeriods, Retired},
    lb::{ChunkDigest, LbMaps, Tables, chunk_digest, chunk_range, member_range, set_range},
    table::{BatchError, StoreError},
};
use crate::model::{
    Frontend, FrontendKind, Target,
    maglev::{MaglevParams, weighted_lookup_table},
    weight::slot_counts,
};

/// What one pass (or reap) changed, and what it could not.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Entries written, in all tables.
    pub written: usize,
    /// Entries deleted (states freed included).
    pub deleted: usize,
    /// Frontends left at their previous state because a write failed.
    pub failed: Vec<(Frontend, Arc<StoreError>)>,
    /// Failed deletes: the entries stay until a later pass.
    pub delete_errors: Vec<StoreError>,
}

impl Outcome {
    pub fn changed(&self) -> usize {
        self.written + self.deleted
    }

    /// Both outcomes, as of one pass.
    pub fn merge(mut self, other: Outcome) -> Outcome {
        self.written += other.written;
        self.deleted += other.deleted;
        self.failed.extend(other.failed);
        self.delete_errors.extend(other.delete_errors);
        self
    }
}

/// One frontend's desired state; `target: None` removes it.
pub(super) struct Change<'a, K> {
    pub key: K,
    /// The model's frontend, for reports; `None` for a key the model cannot
    /// express (a protocol it does not balance), which is only ever removed.
    pub frontend: Option<Frontend>,
    pub target: Option<&'a Target>,
}

/// The state bits and affinity timeout that express `t`.
fn state_bits(t: &Target) -> (u16, u32) {
    let mut flags = 0;
    let mut set = |cond: bool, bit: u16| {
        if cond {
            flags |= bit;
        }
    };
    set(t.affinity.is_some(), FE_F_AFFINITY);
    set(t.local, FE_F_LOCAL);
    set(t.no_local_endpoints, FE_F_NO_LOCAL_ENDPOINTS);
    set(t.external_local, FE_F_EXTERNAL_LOCAL);
    set(!t.source_ranges.is_empty(), FE_F_SOURCE_RANGES);
    set(t.maglev, FE_F_MAGLEV);
    set(t.dsr, FE_F_DSR);
    flags |= match t.kind {
        FrontendKind::ClusterIp => FE_KIND_CLUSTER_IP,
        FrontendKind::NodePort => FE_KIND_NODE_PORT,
        FrontendKind::ExternalIp => FE_KIND_EXTERNAL_IP,
        FrontendKind::LoadBalancer => FE_KIND_LOAD_BALANCER,
    };
    (flags, t.affinity.unwrap_or(0))
}

/// A retired revision: `(frontend id, revision)`.
pub(super) type Set = (u32, u16);

/// How one frontend gets its new revision.
struct Plan<K> {
    frontend: Frontend,
    key: K,
    id: u32,
    rev: u16,
    backend_ids: Vec<u32>,
    flags: u16,
    affinity_timeout: u32,
    /// The revision's Maglev table, for a frontend with [`FE_F_MAGLEV`]
    /// and backends.
    table: Option<Arc<BuiltTable>>,
    /// The live revision this one replaces.
    old_rev: Option<u16>,
    /// The frontend entry must be inserted (a new frontend, or one whose
    /// entry named another frontend's state and is replaced).
    insert_entry: bool,
    /// The frontend's entry names another frontend's state: delete it first.
    replace_entry: bool,
    failed: Option<Arc<StoreError>>,
    slots_written: u16,
    members_written: u16,
    chunks_written: u16,
    state_written: bool,
}

impl<K> Plan<K> {
    /// The state's `maglev_size`.
    fn maglev_size(&self) -> u32 {
        self.table.as_ref().map_or(0, |t| t.ids.len() as u32)
    }

    fn chunk_entries(&self) -> impl Iterator<Item = (MaglevKey, MaglevChunk)> + '_ {
        let table = self.table.as_deref().map_or(&[][..], |t| t.ids.as_slice());
        (0u16..).zip(chunks(table)).map(|(chunk, value)| {
            let key = MaglevKey {
                fe_id: self.id,
                rev: self.rev,
                chunk,
            };
            (key, value)
        })
    }

    /// Whether the revision gets members (session affinity).
    fn has_members(&self) -> bool {
        self.flags & FE_F_AFFINITY != 0
    }

    fn slot_entries(&self) -> impl Iterator<Item = (SlotKey, Slot)> + '_ {
        (0u16..).zip(&self.backend_ids).map(|(slot, &backend_id)| {
            let key = SlotKey {
                fe_id: self.id,
                rev: self.rev,
                slot,
            };
            (key, Slot { backend_id })
        })
    }

    /// A member per backend, at its first slot (a weighted backend holds
    /// several, one after the other).
    fn member_entries(&self) -> impl Iterator<Item = (MemberKey, Member)> + '_ {
        let firsts = (0u32..)
            .zip(&self.backend_ids)
            .filter(|&(slot, id)| slot == 0 || self.backend_ids[slot as usize - 1] != *id);
        firsts.map(|(slot, &backend_id)| {
            let key = MemberKey {
                fe_id: self.id,
                rev: self.rev,
                _pad0: [0; 2],
                backend_id,
            };
            (key, Member { slot })
        })
    }
}

/// Frontends planned and written at a time: the plans of a first sync of
/// 100,000 frontends at once were its largest allocation (132 MB of a
/// 524 MB heap peak); a chunk's are freed before the next is planned. A
/// handful in tests, so that every pass of theirs spans several.
const CHUNK: usize = if cfg!(test) { 3 } else { 8192 };

/// Brings the frontends of `changes` to their desired state. With `full`,
/// also cleans up what no desired frontend accounts for.
///
/// The frontends go [`CHUNK`] at a time, each chunk's backends, slots,
/// members, Maglev chunks, states and entries in that order, so a program
/// reading any frontend sees it whole.
pub(super) fn apply<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    grace: &mut impl GracePeriods,
    retired: &mut Retired<Set>,
    changes: Vec<Change<'_, F::FrontendKey>>,
    full: bool,
) -> Outcome {
    let mut out = Outcome::default();
    let mut reserved_fe = Vec::new();
    let mut reserved_be: Vec<u32> = Vec::new();
    let mut removals = Vec::new();
    let mut retire: Vec<Set> = Vec::new();
    let mut stale_states = Vec::new();
    let mut changes = changes.into_iter().peekable();
    while changes.peek().is_some() {
        let mut new_backends: Vec<(u32, F::Backend)> = Vec::new();
        let mut plans = Vec::new();
        {
            let mut new_ids: HashMap<F::Backend, u32> = HashMap::new();
            let mut tables = BuiltTables::default();
            for change in changes.by_ref().take(CHUNK) {
                match (change.target, change.frontend) {
                    (Some(target), Some(frontend)) => {
                        let plan = plan::<F, T>(
                            maps,
                            frontend,
                            change.key,
                            target,
                            &mut new_ids,
                            &mut new_backends,
                            &mut reserved_fe,
                            &mut tables,
                        );
                        match plan {
                            Ok(Some(p)) => plans.push(p),
                            Ok(None) => {}
                            Err(e) => out.failed.push((frontend, Arc::new(e))),
                        }
                    }
                    _ => removals.push(change.key),
                }
            }
        }
        reserved_be.extend(new_backends.iter().map(|(id, _)| *id));

        write_backends(maps, &new_backends, &mut plans, &mut out);
        write_revisions(maps, &mut plans, &mut out);
        write_entries(maps, &mut plans, &mut out);

        for p in &mut plans {
            match (p.failed.take(), p.old_rev) {
                (Some(e), _) => {
                    // What the plan wrote and no state named is gone already. A
                    // state it did write, with no entry leading to it, is freed
                    // and its revision retired like any other: a program holding
                    // the element of an entry this pass replaced may read it.
                    if p.state_written {
                        stale_states.push(p.id);
                        retire.push((p.id, p.rev));
                    }
                    out.failed.push((p.frontend, e));
                }
                (None, Some(old)) => retire.push((p.id, old)),
                (None, None) => {}
            }
        }
    }
    remove(maps, retired, &removals, &mut retire, &mut out);
    if full {
        clean_up(maps, retired, &mut stale_states, &mut retire);
        delete_stray_members(maps, &mut out);
        delete_stray_chunks(maps, &mut out);
    }
    free_states(maps, &stale_states, &mut out);
    if !retire.is_empty() {
        // After every write that made these unreachable.
        retired.push(grace.mark(), retire);
    }
    // Backends that no slot names: written for failed frontends, or found
    // unreferenced by a full pass. No program can reach them.
    let unreferenced: Vec<u32> = if full {
        maps.backends().keys().copied().collect()
    } else {
        reserved_be.clone()
    };
    delete_unreferenced(maps, unreferenced, &mut out);
    maps.release_if_unused(&reserved_fe, &reserved_be);
    out
}

/// Deletes the revisions whose grace period has passed, then the backends
/// no slot names any more.
pub(super) fn reap<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    grace: &impl GracePeriods,
    retired: &mut Retired<Set>,
) -> Outcome {
    let mut out = Outcome::default();
    let sets = retired.take_passed(grace);
    if sets.is_empty() {
        return out;
    }
    let keys: Vec<SlotKey> = sets
        .iter()
        .flat_map(|(id, rev)| maps.slots().range(set_range(*id, *rev)))
        .map(|(k, _)| *k)
        .collect();
    let named: Vec<u32> = keys
        .iter()
        .filter_map(|k| maps.slots().get(k))
        .map(|s| s.backend_id)
        .collect();
    let members: Vec<MemberKey> = sets
        .iter()
        .flat_map(|(id, rev)| maps.members().range(member_range(*id, *rev)))
        .map(|(k, _)| *k)
        .collect();
    let chunks: Vec<MaglevKey> = sets
        .iter()
        .flat_map(|(id, rev)| maps.maglev_chunks().range(chunk_range(*id, *rev)))
        .map(|(k, _)| *k)
        .collect();
    // A revision a failed delete leaves behind is retired again by the
    // next full pass (stray members and chunks: deleted by it).
    delete(&mut out, maps.delete_chunks(&chunks), chunks.len());
    delete(&mut out, maps.delete_members(&members), members.len());
    delete(&mut out, maps.delete_slots(&keys), keys.len());
    delete_unreferenced(maps, named, &mut out);
    out
}

/// A Maglev table as this agent builds it for one set of backends.
struct BuiltTable {
    /// Its entries: backend ids.
    ids: Vec<u32>,
    /// The digest of each of its chunks, to compare with what the map holds.
    digests: Vec<ChunkDigest>,
}

/// The Maglev tables built in one pass, by backend ids: a Service's
/// frontends (its node ports on each address, its external IPs) share
/// their backends, and a table costs M·N steps to build.
type BuiltTables = HashMap<(Vec<u32>, Vec<u16>), Arc<BuiltTable>>;

/// `table`'s chunks, in order; entries past its end are 0.
fn chunks(table: &[u32]) -> impl Iterator<Item = MaglevChunk> + '_ {
    table.chunks(MAGLEV_CHUNK).map(|ids| {
        let mut value = MaglevChunk::default();
        value.backend_ids[..ids.len()].copy_from_slice(ids);
        value
    })
}

/// The Maglev table of `backend_ids` (whose addresses are `addrs`, whose
/// weights are `weights`: empty when equal), from `tables` or built.
fn maglev_table(
    params: MaglevParams,
    backend_ids: &[u32],
    addrs: &[SocketAddr],
    weights: &[u16],
    tables: &mut BuiltTables,
) -> Arc<BuiltTable> {
    let key = (backend_ids.to_vec(), weights.to_vec());
    if let Some(t) = tables.get(&key) {
        return t.clone();
    }
    let ids: Vec<u32> = weighted_lookup_table(addrs, weights, params.size, &params.seed)
        .into_iter()
        .map(|i| backend_ids[i as usize])
        .collect();
    let digests = chunks(&ids).map(|c| chunk_digest(&c)).collect();
    let table = Arc::new(BuiltTable { ids, digests });
    tables.insert(key, table.clone());
    table
}

/// The slots of a revision of `backend_ids`: one each, or with `weights`
/// (parallel, each nonzero) as many as [`slot_counts`] gives each, each
/// backend's together.
fn weighted_slots(backend_ids: Vec<u32>, weights: &[u16]) -> Vec<u32> {
    if weights.len() != backend_ids.len() {
        return backend_ids;
    }
    let counts = slot_counts(weights);
    let slots = backend_ids
        .iter()
        .zip(counts)
        .flat_map(|(&id, n)| std::iter::repeat_n(id, n as usize));
    slots.take(usize::from(MAX_BACKENDS_PER_FRONTEND)).collect()
}

/// The plan for one frontend, `None` when it already has what it needs.
#[expect(
    clippy::too_many_arguments,
    reason = "the pass's indexes, threaded through"
)]
fn plan<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    frontend: Frontend,
    key: F::FrontendKey,
    target: &Target,
    new_ids: &mut HashMap<F::Backend, u32>,
    new_backends: &mut Vec<(u32, F::Backend)>,
    reserved_fe: &mut Vec<u32>,
    tables: &mut BuiltTables,
) -> Result<Option<Plan<F::FrontendKey>>, StoreError> {
    let list = &target.backends;
    let list = &list[..list.len().min(usize::from(MAX_BACKENDS_PER_FRONTEND))];
    let (flags, affinity_timeout) = state_bits(target);
    let mut backend_ids = Vec::with_capacity(list.len());
    let mut addrs = Vec::new();
    let mut weights = Vec::new();
    // The model never mixes families; a backend of another one is skipped.
    for (i, be, value) in list
        .iter()
        .enumerate()
        .filter_map(|(i, be)| Some((i, be, F::backend(be, frontend.proto)?)))
    {
        if target.maglev {
            addrs.push(SocketAddr::new(be.ip, be.port));
        }
        if let Some(&w) = target.weights.get(i) {
            weights.push(w);
        }
        let id = match maps.id_of(&value).or_else(|| new_ids.get(&value).copied()) {
            Some(id) => id,
            None => {
                let id = maps.allocate_backend_id().ok_or(StoreError::Full {
                    map: lb_common::BACKENDS4.name,
                })?;
                new_ids.insert(value, id);
                new_backends.push((id, value));
                id
            }
        };
        backend_ids.push(id);
    }
    let table = (target.maglev && !backend_ids.is_empty())
        .then(|| maglev_table(maps.params(), &backend_ids, &addrs, &weights, tables));
    // Random picks a slot: weighted backends hold slots in proportion.
    let backend_ids = weighted_slots(backend_ids, &weights);
    let maglev_size = table.as_ref().map_or(0, |t| t.ids.len() as u32);
    let digests = table.as_ref().map_or(&[][..], |t| t.digests.as_slice());
    let proto = F::key_proto(&key);
    let live = maps.live(&key);
    // The live revision's Maglev table is compared by content: one an
    // earlier agent built with another seed (the flag changed across a
    // restart) is rebuilt, or nodes would disagree.
    if let Some((id, st)) = live
        && (st.flags, st.affinity_timeout, st.maglev_size) == (flags, affinity_timeout, maglev_size)
        && maps.complete_set(id, st.rev, st.count, proto).as_ref() == Some(&backend_ids)
        && maps.holds_table(id, st.rev, digests)
    {
        return Ok(None);
    }
    let entry = maps.frontends().get(&key).map(|v| v.id);
    let (id, old_rev, insert_entry, replace_entry) = match (live, entry) {
        (Some((id, st)), _) => (id, Some(st.rev), false, false),
        // The entry names a free state (a crash between writes): claim it.
        (None, Some(id)) if maps.state(id).is_none() => (id, None, false, false),
        (None, entry) => {
            let id = maps.allocate_fe_id().ok_or(StoreError::Full {
                map: lb_common::FE_STATE4.name,
            })?;
            reserved_fe.push(id);
            (id, None, true, entry.is_some())
        }
    };
    let rev = maps.next_rev(id, old_rev.unwrap_or(0));
    Ok(Some(Plan {
        frontend,
        key,
        id,
        rev,
        backend_ids,
        flags,
        affinity_timeout,
        table,
        old_rev,
        insert_entry,
        replace_entry,
        failed: None,
        slots_written: 0,
        members_written: 0,
        chunks_written: 0,
        state_written: false,
    }))
}

/// Phase 1: the new backends of every plan, in one batch. A full map fails
/// the rest; another error fails one entry.
fn write_backends<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    new_backends: &[(u32, F::Backend)],
    plans: &mut [Plan<F::FrontendKey>],
    out: &mut Outcome,
) {
    let mut failed: HashMap<u32, Arc<StoreError>> = HashMap::new();
    let mut rest = new_backends;
    while !rest.is_empty() {
        match maps.put_backends(rest) {
            Ok(()) => {
                out.written += rest.len();
                break;
            }
            Err(BatchError { written, error }) => {
                out.written += written;
                let full = matches!(error, StoreError::Full { .. });
                let error = Arc::new(error);
                let written = failed_at(written, rest.len());
                let end = if full { rest.len() } else { written + 1 };
                for (id, _) in &rest[written..end] {
                    failed.insert(*id, error.clone());
                }
                rest = &rest[end..];
            }
        }
    }
    if failed.is_empty() {
        return;
    }
    for p in plans.iter_mut() {
        if let Some(e) = p.backend_ids.iter().find_map(|id| failed.get(id)) {
            p.failed = Some(e.clone());
        }
    }
}

/// Phases 2 to 3: each new revision's slots, then the members of those
/// with session affinity, then the Maglev tables of those that have one,
/// each kind in one batch; a failure fails the plan it hit, whose partial
/// entries are deleted at once (no state names them), and the batch goes
/// on with the next plan. Then each revision is published with one locked
/// state write.
fn write_revisions<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    plans: &mut [Plan<F::FrontendKey>],
    out: &mut Outcome,
) {
    use OnFailure::RollBack;
    write_per_plan(
        maps,
        plans,
        out,
        |p| p.slot_entries().collect(),
        LbMaps::put_slots,
        |p| p.slots_written += 1,
        RollBack,
    );
    write_per_plan(
        maps,
        plans,
        out,
        |p| {
            if p.has_members() {
                p.member_entries().collect()
            } else {
                Vec::new()
            }
        },
        LbMaps::put_members,
        |p| p.members_written += 1,
        RollBack,
    );
    write_per_plan(
        maps,
        plans,
        out,
        |p| p.chunk_entries().collect(),
        LbMaps::put_chunks,
        |p| p.chunks_written += 1,
        RollBack,
    );
    write_per_plan(
        maps,
        plans,
        out,
        |p| {
            let view = StateView {
                owner: p.key,
                rev: p.rev,
                count: p.backend_ids.len() as u16,
                flags: p.flags,
                affinity_timeout: p.affinity_timeout,
                maglev_size: p.maglev_size(),
            };
            vec![(p.id, F::state(view))]
        },
        LbMaps::put_states,
        |p| p.state_written = true,
        RollBack,
    );
}

/// What a failed write does to the plan it hit besides failing it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnFailure {
    /// Deletes its slots, members and chunks at once: no state names them.
    RollBack,
    /// Leaves them (its state names them).
    Keep,
}

/// Writes the `entries` of every plan not failed yet in one batch with
/// `put`, telling each plan of each of its entries written (`written`). A
/// failure fails the plan it hit, and the batch goes on with the next
/// plan.
fn write_per_plan<F: Family, T: Tables, K, V>(
    maps: &mut LbMaps<F, T>,
    plans: &mut [Plan<F::FrontendKey>],
    out: &mut Outcome,
    entries: impl Fn(&Plan<F::FrontendKey>) -> Vec<(K, V)>,
    put: impl Fn(&mut LbMaps<F, T>, &[(K, V)]) -> Result<(), BatchError>,
    written: impl Fn(&mut Plan<F::FrontendKey>),
    on_failure: OnFailure,
) {
    let mut start = 0;
    while start < plans.len() {
        let mut owners = Vec::new();
        let mut batch = Vec::new();
        for (i, p) in plans.iter().enumerate().skip(start) {
            if p.failed.is_some() {
                continue;
            }
            let mine = entries(p);
            owners.extend(std::iter::repeat_n(i, mine.len()));
            batch.extend(mine);
        }
        let result = put(maps, &batch);
        let count = result.as_ref().map_or_else(|e| e.written, |()| batch.len());
        out.written += count;
        for &i in &owners[..count] {
            written(&mut plans[i]);
        }
        match result {
            Ok(()) => break,
            Err(BatchError { written, error }) => {
                let hit = owners[failed_at(written, owners.len())];
                plans[hit].failed = Some(Arc::new(error));
                if on_failure == OnFailure::RollBack {
                    roll_back_slots(maps, &mut plans[hit], out);
                }
                start = hit + 1;
            }
        }
    }
}

/// Phase 4: frontend entries of new frontends, now that their state is in
/// place. An entry that named another frontend's state is replaced.
fn write_entries<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    plans: &mut [Plan<F::FrontendKey>],
    out: &mut Outcome,
) {
    let replace: Vec<F::FrontendKey> = plans
        .iter()
        .filter(|p| p.failed.is_none() && p.replace_entry)
        .map(|p| p.key)
        .collect();
    match maps.delete_frontends(&replace) {
        Ok(()) => out.deleted += replace.len(),
        Err(BatchError { written, error }) => {
            out.deleted += written;
            // The entry stays, so inserting over it would fail: the plan
            // fails now. The entries after it are retried by the next pass.
            let error = Arc::new(error);
            let rest = &replace[failed_at(written, replace.len())..];
            for p in plans.iter_mut().filter(|p| rest.contains(&p.key)) {
                p.failed = Some(error.clone());
            }
        }
    }

    write_per_plan(
        maps,
        plans,
        out,
        |p| {
            if p.insert_entry {
                vec![(p.key, FrontendId { id: p.id })]
            } else {
                Vec::new()
            }
        },
        LbMaps::put_frontends,
        |_| {},
        OnFailure::Keep,
    );
}

/// Deletes a failed plan's slots, members and chunks, which no state ever
/// named.
fn roll_back_slots<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    p: &mut Plan<F::FrontendKey>,
    out: &mut Outcome,
) {
    let chunks: Vec<MaglevKey> = p
        .chunk_entries()
        .take(usize::from(p.chunks_written))
        .map(|(k, _)| k)
        .collect();
    delete(out, maps.delete_chunks(&chunks), chunks.len());
    p.chunks_written = 0;
    let members: Vec<MemberKey> = p
        .member_entries()
        .take(usize::from(p.members_written))
        .map(|(k, _)| k)
        .collect();
    delete(out, maps.delete_members(&members), members.len());
    p.members_written = 0;
    let keys: Vec<SlotKey> = p
        .slot_entries()
        .take(usize::from(p.slots_written))
        .map(|(k, _)| k)
        .collect();
    delete(out, maps.delete_slots(&keys), keys.len());
    p.slots_written = 0;
}

/// Removes frontends: their state is freed (so a program that still finds
/// the entry leaves the address alone), then the entry deleted, and every
/// revision retired.
fn remove<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    retired: &Retired<Set>,
    keys: &[F::FrontendKey],
    retire: &mut Vec<Set>,
    out: &mut Outcome,
) {
    let queued: HashSet<Set> = retired.iter().copied().collect();
    let mut entries = Vec::new();
    let mut states = Vec::new();
    for key in keys {
        let Some(id) = maps.frontends().get(key).map(|v| v.id) else {
            continue;
        };
        entries.push(*key);
        if maps.state(id).is_some_and(|s| s.owner == *key) {
            states.push(id);
            let revs: Vec<Set> = maps
                .revs(id)
                .map(|rev| (id, rev))
                .filter(|set| !queued.contains(set))
                .collect();
            retire.extend(revs);
        }
    }
    free_states(maps, &states, out);
    delete(out, maps.delete_frontends(&entries), entries.len());
}

/// Full passes only: states, revisions and entries no live frontend
/// accounts for (a crash between writes, an agent of another version, a
/// hand edit).
fn clean_up<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    retired: &Retired<Set>,
    stale_states: &mut Vec<u32>,
    retire: &mut Vec<Set>,
) {
    let live: HashMap<u32, u16> = maps
        .frontends()
        .keys()
        .filter_map(|k| maps.live(k))
        .map(|(id, st)| (id, st.rev))
        .collect();
    for id in maps.states().keys() {
        if !live.contains_key(id) && !stale_states.contains(id) {
            stale_states.push(*id);
        }
    }
    let queued: HashSet<Set> = retired.iter().chain(retire.iter()).copied().collect();
    let orphans: BTreeSet<Set> = maps
        .sets()
        .filter(|(id, rev)| live.get(id) != Some(rev) && !queued.contains(&(*id, *rev)))
        .collect();
    retire.extend(orphans);
}

/// Full passes only: members of revisions without slots (a crash between
/// deletes). No state can name such a revision with a count above 0, so no
/// program looks them up.
fn delete_stray_members<F: Family, T: Tables>(maps: &mut LbMaps<F, T>, out: &mut Outcome) {
    let sets: HashSet<Set> = maps.sets().collect();
    let stray: Vec<MemberKey> = maps
        .members()
        .keys()
        .filter(|k| !sets.contains(&(k.fe_id, k.rev)))
        .copied()
        .collect();
    delete(out, maps.delete_members(&stray), stray.len());
}

/// Full passes only: Maglev chunks of revisions without slots, as stray
/// members.
fn delete_stray_chunks<F: Family, T: Tables>(maps: &mut LbMaps<F, T>, out: &mut Outcome) {
    let sets: HashSet<Set> = maps.sets().collect();
    let stray: Vec<MaglevKey> = maps
        .maglev_chunks()
        .keys()
        .filter(|k| !sets.contains(&(k.fe_id, k.rev)))
        .copied()
        .collect();
    delete(out, maps.delete_chunks(&stray), stray.len());
}

fn free_states<F: Family, T: Tables>(maps: &mut LbMaps<F, T>, ids: &[u32], out: &mut Outcome) {
    delete(out, maps.free_states(ids), ids.len());
}

/// Deletes those of `candidates` that exist and that no slot names.
fn delete_unreferenced<F: Family, T: Tables>(
    maps: &mut LbMaps<F, T>,
    candidates: Vec<u32>,
    out: &mut Outcome,
) {
    let ids: BTreeSet<u32> = candidates
        .into_iter()
        .filter(|id| !maps.is_referenced(*id) && maps.backends().contains_key(id))
        .collect();
    let ids: Vec<u32> = ids.into_iter().collect();
    delete(out, maps.delete_backends(&ids), ids.len());
}

/// Counts a batch delete and keeps its error.
fn delete(out: &mut Outcome, result: Result<(), BatchError>, all: usize) {
    match result {
        Ok(()) => out.deleted += all,
        Err(BatchError { written, error }) => {
            out.deleted += written;
            out.delete_errors.push(error);
        }
    }
}

/// The index of the entry a failed batch of `len` stopped at. A table
/// reports fewer than `len` written; clamped so a misreport cannot panic.
fn failed_at(written: usize, len: usize) -> usize {
    written.min(len.saturating_sub(1))
}
