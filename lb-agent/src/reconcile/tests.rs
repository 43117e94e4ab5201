//! Reconciler behaviour over in-memory tables: exact writes, idempotence,
//! what a concurrent reader can see after every single write, grace periods
//! before every deletion a reader could notice, full maps, adoption, crashes.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    net::Ipv4Addr,
};

use lb_common::{
    Backend4, FE_STATE4, FRONTENDS4, Frontend4Key, Frontend4State, FrontendId, SLOTS4, Slot,
    SlotKey,
};

use crate::model::maglev::MaglevParams;

use super::{
    mem::{Journal, ManualGrace, Mem, MemTable, Step},
    table::Table as _,
    *,
};
use crate::{
    model::{Backend, Proto},
    test_rng::Rng,
};

type Table = BTreeMap<Frontend, Vec<Backend>>;

/// Plain targets (no affinity, no policy) of a table of backend lists.
fn targets(t: &Table) -> BTreeMap<Frontend, Target> {
    t.iter()
        .map(|(fe, b)| (*fe, Target::plain(b.clone())))
        .collect()
}

// ---------------------------------------------------------------- helpers

fn fe(last: u8, port: u16, proto: Proto) -> Frontend {
    Frontend {
        vip: Ipv4Addr::new(10, 96, 0, last).into(),
        port,
        proto,
        scope: crate::model::Scope::Internal,
    }
}

fn be(last: u8, port: u16) -> Backend {
    Backend {
        ip: Ipv4Addr::new(10, 0, 0, last).into(),
        port,
    }
}

fn key(f: &Frontend) -> Frontend4Key {
    V4::frontend_key(f).unwrap()
}

/// Capacities of the four tables: frontends, state ids, slots, backends.
#[derive(Clone, Copy)]
struct Caps(u32, u32, u32, u32);

const BIG: Caps = Caps(10_000, 10_000, 100_000, 10_000);

/// The four tables' content, typed.
#[derive(Clone, Debug, Default, PartialEq)]
struct Snapshot {
    frontends: BTreeMap<Frontend4Key, FrontendId>,
    states: BTreeMap<u32, Frontend4State>,
    slots: BTreeMap<SlotKey, Slot>,
    backends: BTreeMap<u32, Backend4>,
}

/// What a program can reach: slots and backends of live revisions.
#[derive(Default)]
struct Reach {
    slots: HashSet<SlotKey>,
    backends: HashSet<u32>,
}

impl Snapshot {
    fn apply(&mut self, step: &Step) {
        fn put<K: Ord + Copy + 'static, V: Copy + 'static>(
            m: &mut BTreeMap<K, V>,
            e: &dyn std::any::Any,
        ) {
            let (k, v) = e.downcast_ref::<(K, V)>().expect("entry type");
            m.insert(*k, *v);
        }
        fn del<K: Ord + Copy + 'static, V>(m: &mut BTreeMap<K, V>, e: &dyn std::any::Any) {
            m.remove(e.downcast_ref::<K>().expect("key type"));
        }
        match step {
            Step::Put(t, e) if *t == FRONTENDS4.name => put(&mut self.frontends, e.as_ref()),
            Step::Put(t, e) if *t == FE_STATE4.name => put(&mut self.states, e.as_ref()),
            Step::Put(t, e) if *t == SLOTS4.name => put(&mut self.slots, e.as_ref()),
            Step::Put(_, e) => put(&mut self.backends, e.as_ref()),
            Step::Delete(t, e) if *t == FRONTENDS4.name => del(&mut self.frontends, e.as_ref()),
            Step::Delete(t, e) if *t == FE_STATE4.name => del(&mut self.states, e.as_ref()),
            Step::Delete(t, e) if *t == SLOTS4.name => del(&mut self.slots, e.as_ref()),
            Step::Delete(_, e) => del(&mut self.backends, e.as_ref()),
            Step::Mark(_) | Step::Elapsed(_) => {}
        }
    }

    /// Frontends a program would translate: entry and state agree.
    fn live(&self) -> impl Iterator<Item = (Frontend4Key, u32, StateView<Frontend4Key>)> + '_ {
        self.frontends.iter().filter_map(|(k, v)| {
            let st = V4::view(self.states.get(&v.id)?);
            (st.owner == *k).then_some((*k, v.id, st))
        })
    }

    /// Every live revision is whole: all its slots, each naming a backend
    /// of the frontend's protocol. What `Selection::Inconsistent` needs.
    fn check_consistent(&self) -> Result<(), String> {
        for (k, id, st) in self.live() {
            for slot in 0..st.count {
                let sk = SlotKey {
                    fe_id: id,
                    rev: st.rev,
                    slot,
                };
                let s = self
                    .slots
                    .get(&sk)
                    .ok_or(format!("{k:?}: {sk:?} missing"))?;
                let b = self
                    .backends
                    .get(&s.backend_id)
                    .ok_or(format!("{sk:?} names missing backend {}", s.backend_id))?;
                if b.proto != k.proto {
                    return Err(format!("{sk:?} names backend {b:?} of another protocol"));
                }
            }
        }
        Ok(())
    }

    fn reach(&self) -> Reach {
        let mut r = Reach::default();
        for (_, id, st) in self.live() {
            for slot in 0..st.count {
                let sk = SlotKey {
                    fe_id: id,
                    rev: st.rev,
                    slot,
                };
                if let Some(s) = self.slots.get(&sk) {
                    r.slots.insert(sk);
                    r.backends.insert(s.backend_id);
                }
            }
        }
        r
    }

    /// The table a program sees: each live frontend's backends, slot order.
    fn visible(&self) -> Table {
        self.live()
            .map(|(k, id, st)| {
                let list = (0..st.count)
                    .map(|slot| {
                        let s = self.slots[&SlotKey {
                            fe_id: id,
                            rev: st.rev,
                            slot,
                        }];
                        V4::backend_model(&self.backends[&s.backend_id])
                    })
                    .collect();
                (V4::frontend(&k).expect("known protocol"), list)
            })
            .collect()
    }

    /// Nothing beyond what `desired` needs: no retired revision, no backend
    /// no slot names, no state without its frontend.
    fn assert_tidy(&self, desired: &Table) {
        assert_eq!(self.visible(), *desired);
        self.check_consistent().unwrap();
        let slots: usize = desired.values().map(Vec::len).sum();
        assert_eq!(self.slots.len(), slots, "retired revisions left");
        assert_eq!(self.frontends.len(), desired.len());
        assert_eq!(self.states.len(), desired.len());
        let named: BTreeSet<u32> = self.slots.values().map(|s| s.backend_id).collect();
        assert_eq!(
            named,
            self.backends.keys().copied().collect::<BTreeSet<_>>()
        );
        let ids: BTreeSet<u32> = self.frontends.values().map(|v| v.id).collect();
        assert_eq!(ids.len(), desired.len(), "frontend ids are unique");
        assert!(!ids.contains(&0));
    }
}

/// A reconciler over in-memory tables and a grace clock the test drives.
struct Fixture {
    journal: Journal,
    grace: ManualGrace,
    r: Reconciler<V4, Mem, ManualGrace>,
}

impl Fixture {
    fn new(caps: Caps) -> Self {
        Self::adopt(&Snapshot::default(), caps)
    }

    /// A reconciler adopting tables that hold `snap`.
    fn adopt(snap: &Snapshot, Caps(f, s, sl, b): Caps) -> Self {
        let journal = Journal::default();
        let mut tables = LbTables::<V4, Mem> {
            frontends: MemTable::hash(FRONTENDS4.name, f, &journal),
            states: MemTable::array(FE_STATE4.name, s, &journal),
            slots: MemTable::hash(SLOTS4.name, sl, &journal),
            members: MemTable::hash(lb_common::MEMBERS4.name, sl, &journal),
            backends: MemTable::hash(lb_common::BACKENDS4.name, b, &journal),
            maglev: MemTable::hash(lb_common::MAGLEV4.name, 1 << 20, &journal),
        };
        tables.frontends.content = snap.frontends.clone();
        tables.states.content = snap.states.clone();
        tables.slots.content = snap.slots.clone();
        tables.backends.content = snap.backends.clone();
        let grace = ManualGrace::new(&journal);
        let r = Reconciler::adopt(
            tables,
            grace.clone(),
            Found::Pinned,
            MaglevParams::default(),
        )
        .unwrap();
        Self { journal, grace, r }
    }

    /// What the reconciler believes the tables hold.
    fn snapshot(&self) -> Snapshot {
        let m = self.r.maps();
        Snapshot {
            frontends: m.frontends().clone(),
            states: m.states().clone(),
            slots: m.slots().clone(),
            backends: m.backends().clone(),
        }
    }

    fn at(&self) -> usize {
        self.journal.len()
    }

    /// A grace period passes; what waited for it is deleted.
    fn elapse_and_reap(&mut self) -> Outcome {
        self.grace.elapse();
        self.r.reap()
    }

    /// A full pass that must succeed, then a grace period and reap.
    fn settle(&mut self, desired: &Table) {
        let out = self.r.reconcile(&targets(desired));
        assert!(
            out.failed.is_empty() && out.delete_errors.is_empty(),
            "{out:?}"
        );
        let out = self.elapse_and_reap();
        assert!(out.delete_errors.is_empty(), "{out:?}");
    }

    fn frontend_id(&self, f: &Frontend) -> u32 {
        self.r.maps().frontends()[&key(f)].id
    }

    fn backend_id(&self, b: &Backend, proto: Proto) -> u32 {
        let want = V4::backend(b, proto).unwrap();
        let ids: Vec<u32> = self
            .r
            .maps()
            .backends()
            .iter()
            .filter(|(_, v)| **v == want)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(ids.len(), 1, "{b}/{proto} should be stored exactly once");
        ids[0]
    }
}

/// Replays the journal from step `from` on `start`, checking after every
/// step what a concurrent program could observe:
///
/// * every live revision is whole (no slot or backend missing);
/// * every frontend serves only backends of its `old` or `new` list, and one
///   with backends in both never stops serving in between;
/// * a slot is deleted only if no program could reach it since a grace
///   period that started after it became unreachable (slots written and
///   never published may go at once);
/// * a backend is deleted only once no slot names it.
///
/// Returns the final content.
fn replay_checked(
    start: &Snapshot,
    journal: &Journal,
    from: usize,
    old: &Table,
    new: &Table,
) -> Snapshot {
    let mut snap = start.clone();
    // Step index after which each unreachable slot became unreachable;
    // `None` for slots present at the start (unreachable since before).
    let mut unreachable_since: HashMap<SlotKey, Option<usize>> = HashMap::new();
    let reach = snap.reach();
    for k in snap.slots.keys().filter(|k| !reach.slots.contains(k)) {
        unreachable_since.insert(*k, None);
    }
    // Slots written in this window and never reachable so far.
    let mut never_reached: HashSet<SlotKey> = HashSet::new();
    let mut elapsed: Vec<usize> = Vec::new();
    journal.with_steps(from, |steps| {
        for (i, step) in steps.iter().enumerate() {
            let what = format!("step {i} ({step:?})");
            match step {
                Step::Delete(t, e) if *t == SLOTS4.name => {
                    let k = e.downcast_ref::<SlotKey>().unwrap();
                    if !never_reached.contains(k) {
                        let since = unreachable_since
                            .get(k)
                            .unwrap_or_else(|| panic!("{what}: deletes a reachable slot"));
                        let ok = elapsed.iter().any(|p| since.is_none_or(|q| *p > q));
                        assert!(ok, "{what}: no grace period since it became unreachable");
                    }
                }
                Step::Delete(t, e) if *t == lb_common::BACKENDS4.name => {
                    let id = e.downcast_ref::<u32>().unwrap();
                    assert!(
                        !snap.slots.values().any(|s| s.backend_id == *id),
                        "{what}: a slot still names backend {id}"
                    );
                }
                Step::Put(t, e) if *t == SLOTS4.name => {
                    let (k, _) = e.downcast_ref::<(SlotKey, Slot)>().unwrap();
                    never_reached.insert(*k);
                }
                Step::Elapsed(_) => elapsed.push(i),
                _ => {}
            }
            snap.apply(step);
            if let Err(e) = snap.check_consistent() {
                panic!("after {what}: {e}");
            }
            let reach = snap.reach();
            for k in snap.slots.keys() {
                if reach.slots.contains(k) {
                    unreachable_since.remove(k);
                    never_reached.remove(k);
                } else if !never_reached.contains(k) {
                    unreachable_since.entry(*k).or_insert(Some(i));
                }
            }
            let seen = snap.visible();
            for (f, list) in &seen {
                let allowed: BTreeSet<&Backend> =
                    old.get(f).into_iter().chain(new.get(f)).flatten().collect();
                for b in list {
                    assert!(
                        allowed.contains(b),
                        "after {what}: {f} serves {b}, in neither old nor new list"
                    );
                }
            }
            for (f, list) in new {
                if old.get(f).is_some_and(|o| !o.is_empty()) && !list.is_empty() {
                    assert!(
                        seen.get(f).is_some_and(|l| !l.is_empty()),
                        "after {what}: {f} stopped serving mid-update"
                    );
                }
            }
        }
    });
    snap
}

/// A random backend list drawn from a small pool, so frontends share backends.
fn random_list(rng: &mut Rng, max: usize) -> Vec<Backend> {
    let n = rng.below(max + 1);
    let set: BTreeSet<Backend> = (0..n)
        .map(|_| be(1 + rng.below(12) as u8, [80, 8080][rng.below(2)]))
        .collect();
    set.into_iter().collect()
}

fn random_frontend(rng: &mut Rng) -> Frontend {
    fe(
        1 + rng.below(8) as u8,
        [53, 80][rng.below(2)],
        [Proto::Tcp, Proto::Udp][rng.below(2)],
    )
}

/// The next desired state: grow, shrink, drop or add frontends, swap lists,
/// copy one frontend's list to another.
fn mutate(rng: &mut Rng, prev: &Table) -> Table {
    let mut next = prev.clone();
    let steps = 1 + rng.below(3);
    for _ in 0..steps {
        let keys: Vec<Frontend> = next.keys().copied().collect();
        let pick = |rng: &mut Rng| keys[rng.below(keys.len())];
        match rng.below(7) {
            0 => {
                let list = random_list(rng, 6);
                next.insert(random_frontend(rng), list);
            }
            1 if !keys.is_empty() => {
                next.remove(&pick(rng));
            }
            2 if !keys.is_empty() => {
                let list = next.get_mut(&pick(rng)).unwrap();
                let extra = random_list(rng, 4);
                let mut set: BTreeSet<Backend> = list.drain(..).collect();
                set.extend(extra);
                list.extend(set);
            }
            3 if !keys.is_empty() => {
                let list = next.get_mut(&pick(rng)).unwrap();
                let cut = rng.below(list.len() + 1);
                for _ in 0..cut {
                    let i = rng.below(list.len());
                    list.remove(i);
                }
            }
            4 if keys.len() >= 2 => {
                let (a, b) = (pick(rng), pick(rng));
                let la = next[&a].clone();
                let lb = next.insert(b, la).unwrap();
                next.insert(a, lb);
            }
            5 if keys.len() >= 2 => {
                let (a, b) = (pick(rng), pick(rng));
                let la = next[&a].clone();
                next.insert(b, la);
            }
            6 if !keys.is_empty() => {
                let list = random_list(rng, 6);
                next.insert(pick(rng), list);
            }
            _ => {}
        }
    }
    next
}

fn scenario(seed: u64, steps: usize) -> Vec<Table> {
    let mut rng = Rng(seed);
    let mut states = vec![Table::new()];
    for _ in 0..steps {
        let next = mutate(&mut rng, states.last().unwrap());
        states.push(next);
    }
    states
}

fn sample() -> Table {
    Table::from([
        (
            fe(1, 80, Proto::Tcp),
            vec![be(1, 8080), be(2, 8080), be(3, 8080)],
        ),
        // Same address and port as a TCP backend, but a UDP one: its own entry.
        (fe(2, 53, Proto::Udp), vec![be(1, 8080), be(4, 53)]),
        // Shares two backends with the first frontend.
        (fe(3, 80, Proto::Tcp), vec![be(2, 8080), be(3, 8080)]),
        // No endpoints: reject.
        (fe(4, 80, Proto::Tcp), vec![]),
    ])
}

// ---------------------------------------------------------------- key order

#[test]
fn slot_keys_sort_by_frontend_then_revision() {
    // `set_range` relies on this order.
    let k = |fe_id, rev, slot| SlotKey { fe_id, rev, slot };
    let mut keys = vec![
        k(2, 0, 0),
        k(1, 3, 0),
        k(1, 2, 9),
        k(1, 2, 0),
        k(1, 3, u16::MAX),
    ];
    keys.sort();
    assert_eq!(
        keys,
        [
            k(1, 2, 0),
            k(1, 2, 9),
            k(1, 3, 0),
            k(1, 3, u16::MAX),
            k(2, 0, 0)
        ]
    );
    let all: BTreeSet<SlotKey> = keys.iter().copied().collect();
    let got: Vec<SlotKey> = all.range(set_range(1, 3)).copied().collect();
    assert_eq!(got, [k(1, 3, 0), k(1, 3, u16::MAX)]);
}

// ---------------------------------------------------------------- exact writes

#[test]
fn fresh_reconcile_programs_the_expected_maps() {
    let desired = sample();
    let mut t = Fixture::new(BIG);
    let out = t.r.reconcile(&targets(&desired));
    assert!(
        out.failed.is_empty() && out.delete_errors.is_empty(),
        "{out:?}"
    );
    let snap = t.snapshot();
    // 4 frontends, 4 states, 3 + 2 + 2 slots, and 10.0.0.1:8080 TCP and
    // UDP, .2, .3, .4:53 UDP.
    assert_eq!(
        (
            snap.frontends.len(),
            snap.states.len(),
            snap.slots.len(),
            snap.backends.len()
        ),
        (4, 4, 7, 5)
    );
    assert_eq!(out.written, 4 + 4 + 7 + 5);
    assert_eq!(out.deleted, 0);
    assert_eq!(out.changed(), t.at());
    let counts: Vec<u16> = desired
        .keys()
        .map(|f| V4::view(&snap.states[&t.frontend_id(f)]).count)
        .collect();
    assert_eq!(counts, [3, 2, 2, 0]);
    // Shared backends are stored once and named by both frontends.
    let id2 = t.backend_id(&be(2, 8080), Proto::Tcp);
    let f3 = fe(3, 80, Proto::Tcp);
    let st3 = V4::view(&snap.states[&t.frontend_id(&f3)]);
    let slot = |n| {
        snap.slots[&SlotKey {
            fe_id: t.frontend_id(&f3),
            rev: st3.rev,
            slot: n,
        }]
            .backend_id
    };
    assert_eq!(slot(0), id2);
    assert_ne!(
        t.backend_id(&be(1, 8080), Proto::Tcp),
        t.backend_id(&be(1, 8080), Proto::Udp)
    );
    let udp = snap.backends[&t.backend_id(&be(4, 53), Proto::Udp)];
    assert_eq!(udp.proto, lb_common::PROTO_UDP);
    assert_eq!(udp.addr_be, [10, 0, 0, 4]);
    assert_eq!(udp.port_be, 53u16.to_be());
    snap.assert_tidy(&desired);
    replay_checked(&Snapshot::default(), &t.journal, 0, &Table::new(), &desired);
}

#[test]
fn same_desired_state_again_writes_nothing() {
    let desired = sample();
    let mut t = Fixture::new(BIG);
    t.settle(&desired);
    let (mark, before) = (t.at(), t.snapshot());
    for _ in 0..3 {
        let out = t.r.reconcile(&targets(&desired));
        assert_eq!(out.changed(), 0, "{out:?}");
        assert!(out.failed.is_empty() && out.delete_errors.is_empty());
        assert_eq!(t.r.reap().changed(), 0);
    }
    assert_eq!(t.at(), mark);
    assert_eq!(t.snapshot(), before);
}

#[test]
fn a_changed_list_is_a_new_revision_published_by_one_state_write() {
    let f1 = fe(1, 80, Proto::Tcp);
    let f2 = fe(2, 80, Proto::Tcp);
    let old = Table::from([
        (f1, vec![be(1, 80), be(2, 80), be(3, 80), be(4, 80)]),
        (f2, vec![be(2, 80), be(5, 80)]),
    ]);
    let mut t = Fixture::new(BIG);
    t.settle(&old);
    let before = t.snapshot();
    let id = |b: Backend| t.backend_id(&b, Proto::Tcp);
    let (id1, id2, id3, id4) = (id(be(1, 80)), id(be(2, 80)), id(be(3, 80)), id(be(4, 80)));
    let fe1 = t.frontend_id(&f1);
    let rev = V4::view(&before.states[&fe1]).rev;

    // Drop 10.0.0.3 from the middle of f1's list.
    let mut new = old.clone();
    new.get_mut(&f1).unwrap().retain(|b| *b != be(3, 80));
    let mark = t.at();
    let out = t.r.reconcile(&targets(&new));
    assert_eq!(out.written, 4, "three slots and the state: {out:?}");
    assert_eq!(out.deleted, 0, "nothing goes before a grace period");
    let written = t.journal.with_steps(mark, |steps| {
        steps
            .iter()
            .map(|s| match s {
                Step::Put(t, e) if *t == SLOTS4.name => {
                    let (k, s) = e.downcast_ref::<(SlotKey, Slot)>().unwrap();
                    format!("slot {} {} {} -> {}", k.fe_id, k.rev, k.slot, s.backend_id)
                }
                Step::Put(t, e) if *t == FE_STATE4.name => {
                    let (id, st) = e.downcast_ref::<(u32, Frontend4State)>().unwrap();
                    format!("state {id} rev {} count {}", st.rev, st.count)
                }
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
    });
    let next = rev + 1;
    assert_eq!(
        written,
        [
            format!("slot {fe1} {next} 0 -> {id1}"),
            format!("slot {fe1} {next} 1 -> {id2}"),
            format!("slot {fe1} {next} 2 -> {id4}"),
            format!("state {fe1} rev {next} count 3"),
            "Mark(1)".to_owned(),
        ]
    );
    // The old revision and 10.0.0.3 wait for a grace period.
    assert_eq!(t.r.reap().changed(), 0);
    assert_eq!(t.snapshot().backends.get(&id3), before.backends.get(&id3));
    let out = t.elapse_and_reap();
    assert_eq!(out.deleted, 4 + 1, "old revision's four slots and 10.0.0.3");
    assert!(!t.snapshot().backends.contains_key(&id3));
    // Ids are stable: f2, and every backend that stays, are untouched.
    assert_eq!(t.frontend_id(&f1), fe1);
    for (b, want) in [(be(1, 80), id1), (be(2, 80), id2), (be(4, 80), id4)] {
        assert_eq!(t.backend_id(&b, Proto::Tcp), want, "{b} changed id");
    }
    let f2_id = t.frontend_id(&f2);
    assert_eq!(
        t.snapshot().states.get(&f2_id),
        before.states.get(&f2_id),
        "f2 untouched"
    );
    t.snapshot().assert_tidy(&new);
    replay_checked(&before, &t.journal, mark, &old, &new);
}

#[test]
fn removing_a_frontend_frees_its_state_before_its_entry_and_waits_to_delete() {
    let f1 = fe(1, 80, Proto::Tcp);
    let f2 = fe(2, 80, Proto::Tcp);
    let old = Table::from([(f1, vec![be(1, 80), be(2, 80)]), (f2, vec![be(2, 80)])]);
    let mut t = Fixture::new(BIG);
    t.settle(&old);
    let before = t.snapshot();
    let id1 = t.frontend_id(&f1);
    let new = Table::from([(f2, vec![be(2, 80)])]);
    let mark = t.at();
    t.r.reconcile(&targets(&new));
    let order = t.journal.with_steps(mark, |steps| {
        steps
            .iter()
            .map(|s| match s {
                Step::Delete(t, _) => format!("delete {t}"),
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(
        order,
        [
            format!("delete {}", FE_STATE4.name),
            format!("delete {}", FRONTENDS4.name),
            "Mark(1)".to_owned(),
        ]
    );
    t.elapse_and_reap();
    assert!(
        !t.snapshot()
            .backends
            .contains_key(&t_backend(&before, be(1, 80)))
    );
    assert!(
        !t.r.maps().fe_id_in_use(id1),
        "its id is free once all is gone"
    );
    t.snapshot().assert_tidy(&new);
    replay_checked(&before, &t.journal, mark, &old, &new);
}

/// The id of a TCP backend in `snap`.
fn t_backend(snap: &Snapshot, b: Backend) -> u32 {
    let want = V4::backend(&b, Proto::Tcp).unwrap();
    *snap.backends.iter().find(|(_, v)| **v == want).unwrap().0
}

// ---------------------------------------------------------------- make-before-break

#[test]
fn every_intermediate_state_is_safe_for_a_concurrent_reader() {
    for seed in [1, 2, 3, 0xdead_beef, 0x1234_5678_9abc] {
        let states = scenario(seed, 120);
        let mut rng = Rng(seed ^ 0xaaaa);
        let mut t = Fixture::new(BIG);
        let mut writes = 0;
        let mut reaped = 0;
        let mut checked_from = (Snapshot::default(), 0, Table::new());
        for pair in states.windows(2) {
            let (old, new) = (&pair[0], &pair[1]);
            let start = t.snapshot();
            let mark = t.at();
            let survivors: BTreeMap<Frontend, u32> = old
                .keys()
                .filter(|f| new.contains_key(f))
                .map(|f| (*f, t.frontend_id(f)))
                .collect();
            let out = t.r.reconcile(&targets(new));
            assert!(
                out.failed.is_empty() && out.delete_errors.is_empty(),
                "{out:?}"
            );
            // Grace periods pass at random moments, sometimes not for a while.
            if rng.below(3) == 0 {
                reaped += t.elapse_and_reap().deleted;
            }
            let end = replay_checked(&start, &t.journal, mark, old, new);
            assert_eq!(
                end,
                t.snapshot(),
                "replayed journal differs from the tables"
            );
            assert_eq!(end.visible(), *new);
            for (f, id) in survivors {
                assert_eq!(t.frontend_id(&f), id, "{f} changed id");
            }
            writes += out.changed();
            // The new state is a fixed point.
            assert_eq!(t.r.reconcile(&targets(new)).changed(), 0);
            checked_from = (start, mark, old.clone());
        }
        // Once grace periods pass, nothing is left over.
        let last = states.last().unwrap();
        t.elapse_and_reap();
        t.snapshot().assert_tidy(last);
        let (start, mark, old) = checked_from;
        replay_checked(&start, &t.journal, mark, &old, last);
        assert!(writes > 300, "seed {seed}: only {writes} writes");
        assert!(
            reaped > 50,
            "seed {seed}: only {reaped} deletions after grace periods"
        );
    }
}

#[test]
fn scenarios_cover_every_kind_of_change() {
    // Guards the generator: a scenario that never shrinks or shares proves little.
    let states = scenario(1, 120);
    let (mut grew, mut shrank, mut added, mut removed, mut shared) = (0, 0, 0, 0, 0);
    for pair in states.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        added += new.keys().filter(|f| !old.contains_key(f)).count();
        removed += old.keys().filter(|f| !new.contains_key(f)).count();
        for (f, l) in new {
            if let Some(o) = old.get(f) {
                grew += usize::from(l.len() > o.len());
                shrank += usize::from(l.len() < o.len());
            }
        }
        let lists: Vec<&Vec<Backend>> = new.values().filter(|l| !l.is_empty()).collect();
        shared += usize::from(lists.iter().enumerate().any(|(i, a)| {
            lists[i + 1..]
                .iter()
                .any(|b| a.iter().any(|x| b.contains(x)))
        }));
    }
    for (what, n) in [
        ("grew", grew),
        ("shrank", shrank),
        ("added", added),
        ("removed", removed),
        ("shared", shared),
    ] {
        assert!(n >= 5, "scenario {what} only {n} times");
    }
}

#[test]
fn the_checker_catches_a_deletion_without_a_grace_period() {
    // Guards the checker: replay_checked must reject a journal that deletes
    // an old revision's slots right after publishing the new one.
    let f1 = fe(1, 80, Proto::Tcp);
    let old = Table::from([(f1, vec![be(1, 80), be(2, 80)])]);
    let new = Table::from([(f1, vec![be(1, 80)])]);
    let mut t = Fixture::new(BIG);
    t.settle(&old);
    let start = t.snapshot();
    let id = t.frontend_id(&f1);
    let st = V4::view(&start.states[&id]);
    let b1 = t.backend_id(&be(1, 80), Proto::Tcp);

    let forge = |with_grace: bool| {
        let journal = Journal::default();
        let mut slots = MemTable::<SlotKey, Slot>::hash(SLOTS4.name, 100, &journal);
        let mut states = MemTable::<u32, Frontend4State>::array(FE_STATE4.name, 100, &journal);
        let grace = ManualGrace::new(&journal);
        let k = |rev, slot| SlotKey {
            fe_id: id,
            rev,
            slot,
        };
        slots
            .put(&[(k(st.rev + 1, 0), Slot { backend_id: b1 })])
            .unwrap();
        let published = StateView {
            rev: st.rev + 1,
            count: 1,
            ..st
        };
        states.put(&[(id, V4::state(published))]).unwrap();
        if with_grace {
            grace.elapse();
        }
        slots.content = start.slots.clone();
        slots.delete(&[k(st.rev, 0), k(st.rev, 1)]).unwrap();
        journal
    };
    let caught = std::panic::catch_unwind(|| {
        replay_checked(&start, &forge(false), 0, &old, &new);
    });
    assert!(
        caught.is_err(),
        "a deletion with no grace period went unnoticed"
    );
    replay_checked(&start, &forge(true), 0, &old, &new);
}

// ---------------------------------------------------------------- full maps

#[test]
fn full_slots_map_fails_one_frontend_and_keeps_the_rest_intact() {
    let a = fe(1, 80, Proto::Tcp);
    let b = fe(2, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    let desired = Table::from([
        (a, vec![be(1, 80), be(2, 80)]),
        (b, (3..=7).map(|i| be(i, 80)).collect()),
        (c, vec![be(8, 80)]),
    ]);
    // Room for a and c (3 slots), not for b (5) as well: the batch stops at
    // b's fifth slot, b's four are deleted, and c goes on.
    let mut t = Fixture::new(Caps(100, 100, 6, 100));
    let out = t.r.reconcile(&targets(&desired));
    let failed: Vec<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, [b], "{out:?}");
    assert!(matches!(
        *out.failed[0].1,
        StoreError::Full { map } if map == SLOTS4.name
    ));
    let mut fitted = desired.clone();
    fitted.remove(&b);
    let snap = t.snapshot();
    assert_eq!(snap.visible(), fitted);
    // Nothing of b is left behind to hold room.
    assert_eq!(snap.slots.len(), 3);
    assert_eq!(snap.backends.len(), 3);
    replay_checked(&Snapshot::default(), &t.journal, 0, &Table::new(), &desired);

    // Retrying in place does not disturb what is programmed.
    let ids = (t.frontend_id(&a), t.frontend_id(&c));
    let out = t.r.reconcile(&targets(&desired));
    assert_eq!(out.failed.len(), 1);
    assert_eq!(t.snapshot().visible(), fitted);
    assert_eq!((t.frontend_id(&a), t.frontend_id(&c)), ids);

    // Bigger maps (after a migration to larger capacities) converge.
    let mut t2 = Fixture::adopt(&t.snapshot(), BIG);
    let start = t2.snapshot();
    t2.settle(&desired);
    replay_checked(&start, &t2.journal, 0, &fitted, &desired);
    t2.snapshot().assert_tidy(&desired);
    assert_eq!((t2.frontend_id(&a), t2.frontend_id(&c)), ids);
}

#[test]
fn a_frontend_that_cannot_grow_keeps_its_live_revision() {
    let a = fe(1, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    let old = Table::from([(a, vec![be(1, 80), be(2, 80)]), (c, vec![be(8, 80)])]);
    let mut t = Fixture::new(Caps(100, 100, 7, 100));
    t.settle(&old);
    let before = t.snapshot();

    // a wants six backends: with its live two and c's one, they do not fit.
    let new = Table::from([
        (a, (1..=6).map(|i| be(i, 80)).collect()),
        (c, vec![be(8, 80), be(9, 80)]),
    ]);
    let mark = t.at();
    let out = t.r.reconcile(&targets(&new));
    let failed: Vec<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, [a], "{out:?}");
    replay_checked(&before, &t.journal, mark, &old, &new);
    let seen = t.snapshot().visible();
    assert_eq!(seen[&a], old[&a]);
    // c still had room once a gave back the slots it could not publish.
    assert_eq!(seen[&c], new[&c]);
    t.elapse_and_reap();
    let snap = t.snapshot();
    assert_eq!(snap.slots.len(), 4);
    assert_eq!(
        snap.backends.len(),
        4,
        "a's new backends went with its slots"
    );
}

#[test]
fn full_backends_map_fails_the_frontends_that_need_a_new_backend() {
    let a = fe(1, 80, Proto::Tcp);
    let b = fe(2, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    let desired = Table::from([
        (a, vec![be(1, 80)]),
        (b, vec![be(2, 80), be(3, 80), be(4, 80)]),
        (c, vec![be(1, 80), be(5, 80)]),
    ]);
    // 5 backends wanted, room for 3: the batch stops at the fourth.
    let mut t = Fixture::new(Caps(100, 100, 100, 3));
    let out = t.r.reconcile(&targets(&desired));
    let failed: BTreeSet<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, BTreeSet::from([b, c]), "{out:?}");
    assert!(out.failed.iter().all(|(_, e)| matches!(
        **e,
        StoreError::Full { map } if map == lb_common::BACKENDS4.name
    )));
    assert_eq!(t.snapshot().visible(), Table::from([(a, vec![be(1, 80)])]));
    // The new backends nobody could use are gone again.
    assert_eq!(t.snapshot().backends.len(), 1);
    replay_checked(&Snapshot::default(), &t.journal, 0, &Table::new(), &desired);

    let mut t2 = Fixture::adopt(&t.snapshot(), BIG);
    t2.settle(&desired);
    t2.snapshot().assert_tidy(&desired);
}

#[test]
fn full_state_array_and_frontends_map_fail_only_new_frontends() {
    let a = fe(1, 80, Proto::Tcp);
    let b = fe(2, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    // Ids 1 and 2 only (id 0 is never used).
    let mut t = Fixture::new(Caps(100, 3, 100, 100));
    let desired = Table::from([
        (a, vec![be(1, 80)]),
        (b, vec![be(2, 80)]),
        (c, vec![be(3, 80)]),
    ]);
    let out = t.r.reconcile(&targets(&desired));
    assert_eq!(out.failed.len(), 1, "{out:?}");
    assert_eq!(t.snapshot().visible().len(), 2);
    replay_checked(&Snapshot::default(), &t.journal, 0, &Table::new(), &desired);

    // Room for two frontend entries: the third's published state is freed
    // and its revision retired, as no entry leads to it.
    let mut t = Fixture::new(Caps(2, 100, 100, 100));
    let out = t.r.reconcile(&targets(&desired));
    let failed: Vec<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, [c], "{out:?}");
    assert!(matches!(*out.failed[0].1, StoreError::Full { map } if map == FRONTENDS4.name));
    t.elapse_and_reap();
    let mut fitted = desired.clone();
    fitted.remove(&c);
    t.snapshot().assert_tidy(&fitted);
    replay_checked(&Snapshot::default(), &t.journal, 0, &Table::new(), &desired);
}

// ---------------------------------------------------------------- adoption and crashes

#[test]
fn adopting_maps_that_already_match_writes_nothing() {
    let desired = sample();
    let mut first = Fixture::new(BIG);
    first.settle(&desired);
    let mut t = Fixture::adopt(&first.snapshot(), BIG);
    assert_eq!(t.snapshot(), first.snapshot());
    let out = t.r.reconcile(&targets(&desired));
    assert_eq!(out.changed(), 0, "{out:?}");
    assert!(t.journal.is_empty());

    // A change after adoption keeps the adopted ids.
    let f1 = fe(1, 80, Proto::Tcp);
    let mut next = desired.clone();
    next.get_mut(&f1).unwrap().push(be(9, 8080));
    t.settle(&next);
    t.snapshot().assert_tidy(&next);
    for f in desired.keys() {
        assert_eq!(t.frontend_id(f), first.frontend_id(f));
    }
    for (id, b) in first.snapshot().backends {
        assert_eq!(t.snapshot().backends.get(&id), Some(&b));
    }
}

#[test]
fn a_full_pass_after_adopting_cleans_up_what_nothing_accounts_for() {
    let f1 = fe(1, 80, Proto::Tcp);
    let f2 = fe(2, 80, Proto::Tcp);
    let desired = Table::from([(f1, vec![be(1, 80)]), (f2, vec![be(2, 80)])]);
    let mut t = Fixture::new(BIG);
    t.settle(&desired);
    let clean = t.snapshot();
    let mut dirty = clean.clone();
    let id1 = t.frontend_id(&f1);
    let id2 = t.frontend_id(&f2);
    let backend = |i| V4::backend(&be(i, 80), Proto::Tcp).unwrap();
    // An old revision of f1, a revision of an id nothing names, a state
    // nothing names, a backend nobody uses; f2's entry points at a freed
    // state (a crash while it was being added).
    let st1 = V4::view(&clean.states[&id1]);
    for (fe_id, rev) in [(id1, st1.rev.wrapping_sub(1)), (77, 1)] {
        dirty.slots.insert(
            SlotKey {
                fe_id,
                rev,
                slot: 0,
            },
            Slot { backend_id: 50 },
        );
    }
    dirty.backends.insert(50, backend(50));
    dirty.backends.insert(51, backend(51));
    dirty.states.insert(
        88,
        V4::state(StateView {
            owner: key(&fe(9, 80, Proto::Tcp)),
            rev: 1,
            count: 0,
            flags: 0,
            affinity_timeout: 0,
            maglev_size: 0,
        }),
    );
    dirty.states.remove(&id2);
    let mut t = Fixture::adopt(&dirty, BIG);
    let before = t.snapshot();
    let out = t.r.reconcile(&targets(&desired));
    assert!(out.failed.is_empty(), "{out:?}");
    // f2 claims its entry's free state again.
    assert_eq!(t.frontend_id(&f2), id2);
    assert_eq!(t.snapshot().visible(), desired);
    // The two stray revisions (and with them backend 50) wait for a grace period.
    assert!(t.snapshot().backends.contains_key(&50));
    assert!(
        !t.snapshot().backends.contains_key(&51),
        "51 was never named"
    );
    t.elapse_and_reap();
    let snap = t.snapshot();
    assert!(!snap.backends.contains_key(&50));
    snap.assert_tidy(&desired);
    let shown = before.visible();
    replay_checked(&before, &t.journal, 0, &shown, &desired);
}

#[test]
fn crash_at_any_step_then_adopt_converges() {
    let states = scenario(7, 40);
    let mut clean = Fixture::new(BIG);
    let mut crashes = 0;
    for pair in states.windows(2) {
        let new = &pair[1];
        let start = clean.snapshot();
        let mark = clean.at();
        clean.r.reconcile(&targets(new));
        clean.elapse_and_reap();
        let n = clean.at() - mark;
        for cut in 0..=n {
            // The tables as a crash after `cut` steps leaves them.
            let mut crashed = start.clone();
            clean.journal.with_steps(mark, |steps| {
                for step in &steps[..cut] {
                    crashed.apply(step);
                }
            });
            crashed.check_consistent().unwrap();
            let mut t = Fixture::adopt(&crashed, BIG);
            let out = t.r.reconcile(&targets(new));
            assert!(out.failed.is_empty(), "{out:?}");
            t.elapse_and_reap();
            assert_eq!(t.snapshot().visible(), *new, "crash after step {cut}");
            t.snapshot().assert_tidy(new);
            // Recovery is as safe for readers as any pass. Its "old" table
            // is what the crashed tables showed.
            replay_checked(&crashed, &t.journal, 0, &crashed.visible(), new);
            crashes += 1;
        }
    }
    assert!(crashes > 200, "only {crashes} crash points");
}

// ---------------------------------------------------------------- partial passes

/// One partial pass's input: each frontend with its list, `None` to remove.
type Changes = BTreeMap<Frontend, Option<Vec<Backend>>>;

fn reconcile_changes(t: &mut Fixture, changes: &Changes) -> Outcome {
    let targets: BTreeMap<Frontend, Option<Target>> = changes
        .iter()
        .map(|(f, b)| (*f, b.clone().map(Target::plain)))
        .collect();
    t.r.reconcile_some(targets.iter().map(|(f, t)| (f, t.as_ref())))
}

/// `table` with `changes` applied.
fn with_changes(table: &Table, changes: &Changes) -> Table {
    let mut out = table.clone();
    for (f, b) in changes {
        match b {
            Some(list) => out.insert(*f, list.clone()),
            None => out.remove(f),
        };
    }
    out
}

/// Checks that the steps from `mark`, written by a pass over `scope` alone,
/// touched no other frontend's entry, state or slots, and no backend another
/// frontend's live revision names.
fn assert_only_touches(
    t: &Fixture,
    start: &Snapshot,
    (mark, end): (usize, usize),
    scope: &BTreeSet<Frontend>,
) {
    let ids_outside: HashSet<u32> = start
        .frontends
        .iter()
        .filter(|(k, _)| !scope.iter().any(|f| key(f) == **k))
        .map(|(_, v)| v.id)
        .collect();
    let named_outside: HashSet<u32> = start
        .live()
        .filter(|(_, id, _)| ids_outside.contains(id))
        .flat_map(|(_, id, st)| {
            start
                .slots
                .range(set_range(id, st.rev))
                .map(|(_, s)| s.backend_id)
                .collect::<Vec<_>>()
        })
        .collect();
    t.journal.with_steps(mark, |steps| {
        for (i, step) in steps[..end - mark].iter().enumerate() {
            let outside = match step {
                Step::Put(n, e) if *n == FRONTENDS4.name => {
                    let (k, _) = e.downcast_ref::<(Frontend4Key, FrontendId)>().unwrap();
                    !scope.iter().any(|f| key(f) == *k)
                }
                Step::Delete(n, e) if *n == FRONTENDS4.name => {
                    let k = e.downcast_ref::<Frontend4Key>().unwrap();
                    !scope.iter().any(|f| key(f) == *k)
                }
                Step::Put(n, e) if *n == FE_STATE4.name => {
                    let (id, _) = e.downcast_ref::<(u32, Frontend4State)>().unwrap();
                    ids_outside.contains(id)
                }
                Step::Delete(n, e) if *n == FE_STATE4.name => {
                    ids_outside.contains(e.downcast_ref::<u32>().unwrap())
                }
                Step::Put(n, e) if *n == SLOTS4.name => {
                    let (k, _) = e.downcast_ref::<(SlotKey, Slot)>().unwrap();
                    ids_outside.contains(&k.fe_id)
                }
                Step::Delete(n, e) if *n == SLOTS4.name => {
                    ids_outside.contains(&e.downcast_ref::<SlotKey>().unwrap().fe_id)
                }
                Step::Delete(_, e) => named_outside.contains(e.downcast_ref::<u32>().unwrap()),
                _ => false,
            };
            assert!(!outside, "step {i} ({step:?}) outside the pass");
        }
    });
}

/// A random partial pass from `applied` towards `goal`: some of the
/// frontends that differ, plus some that do not (which must cost nothing).
fn random_changes(rng: &mut Rng, applied: &Table, goal: &Table) -> Changes {
    let mut changes = Changes::new();
    let keys: BTreeSet<&Frontend> = applied.keys().chain(goal.keys()).collect();
    for f in keys {
        if rng.below(3) == 0 {
            continue;
        }
        changes.insert(*f, goal.get(f).cloned());
    }
    if rng.below(4) == 0 {
        // A frontend that was never programmed, removed.
        changes.insert(fe(200, 9, Proto::Tcp), None);
    }
    changes
}

#[test]
fn partial_passes_are_safe_and_add_up_to_the_full_state() {
    let mut writes = 0;
    for seed in [1, 2, 3, 0xdead_beef, 0x1234_5678_9abc] {
        let mut rng = Rng(seed ^ 0x5555);
        let goals = scenario(seed, 100);
        let mut t = Fixture::new(BIG);
        // What the maps should show: the changes passed so far.
        let mut applied = Table::new();
        for goal in &goals[1..] {
            let changes = random_changes(&mut rng, &applied, goal);
            let next = with_changes(&applied, &changes);
            let start = t.snapshot();
            let mark = t.at();
            let survivors: BTreeMap<Frontend, u32> = applied
                .keys()
                .filter(|f| next.contains_key(f))
                .map(|f| (*f, t.frontend_id(f)))
                .collect();

            let out = reconcile_changes(&mut t, &changes);
            assert!(
                out.failed.is_empty() && out.delete_errors.is_empty(),
                "{out:?}"
            );
            let pass_end = t.at();
            if rng.below(2) == 0 {
                t.elapse_and_reap();
            }
            let end = replay_checked(&start, &t.journal, mark, &applied, &next);
            assert_eq!(end, t.snapshot());
            // Frontends whose list did not change cost nothing.
            let scope: BTreeSet<Frontend> = changes
                .keys()
                .filter(|f| applied.get(f) != next.get(f))
                .copied()
                .collect();
            assert_only_touches(&t, &start, (mark, pass_end), &scope);
            assert_eq!(end.visible(), next, "seed {seed}");
            for (f, id) in survivors {
                assert_eq!(t.frontend_id(&f), id, "{f} changed id");
            }
            // The same pass again is a fixed point, and so is a full pass
            // (but for old revisions it retires afresh, which a partial
            // pass leaves to the reap).
            assert_eq!(reconcile_changes(&mut t, &changes).written, 0);
            assert_eq!(t.r.reconcile(&targets(&next)).written, 0, "seed {seed}");
            writes += out.changed();
            applied = next;
        }
        t.elapse_and_reap();
        t.snapshot().assert_tidy(&applied);
    }
    assert!(writes > 1000, "only {writes} writes");
}

#[test]
fn partial_pass_leaves_other_frontends_and_their_leftovers_alone() {
    let (f1, f2, f3) = (
        fe(1, 80, Proto::Tcp),
        fe(2, 80, Proto::Tcp),
        fe(3, 80, Proto::Tcp),
    );
    let old = Table::from([
        (f1, vec![be(1, 80), be(2, 80)]),
        (f2, vec![be(2, 80), be(3, 80)]),
        (f3, vec![be(3, 80), be(4, 80)]),
    ]);
    let mut t = Fixture::new(BIG);
    t.settle(&old);
    // Leftovers a full pass would clean: a revision of an id nothing names,
    // and a backend nobody names.
    let mut dirty = t.snapshot();
    dirty.slots.insert(
        SlotKey {
            fe_id: 77,
            rev: 1,
            slot: 0,
        },
        Slot { backend_id: 50 },
    );
    dirty
        .backends
        .insert(50, V4::backend(&be(50, 80), Proto::Tcp).unwrap());
    dirty
        .backends
        .insert(51, V4::backend(&be(51, 80), Proto::Tcp).unwrap());
    let mut t = Fixture::adopt(&dirty, BIG);
    let start = t.snapshot();

    // f1 goes, f2 changes entirely; f1 and f2 share 10.0.0.2, f2 and f3 10.0.0.3.
    let changes = Changes::from([(f1, None), (f2, Some(vec![be(5, 80)]))]);
    let out = reconcile_changes(&mut t, &changes);
    assert!(out.failed.is_empty() && out.delete_errors.is_empty());
    t.elapse_and_reap();
    assert_only_touches(&t, &start, (0, t.at()), &BTreeSet::from([f1, f2]));
    let new = Table::from([(f2, vec![be(5, 80)]), (f3, old[&f3].clone())]);
    replay_checked(&start, &t.journal, 0, &old, &new);
    let snap = t.snapshot();
    assert_eq!(snap.visible(), new);
    // 10.0.0.1 and .2 went with their last users; .3 stays for f3.
    for (b, there) in [(1, false), (2, false), (3, true)] {
        let want = V4::backend(&be(b, 80), Proto::Tcp).unwrap();
        assert_eq!(
            snap.backends.values().any(|v| *v == want),
            there,
            "10.0.0.{b}"
        );
    }
    // The leftovers are still there: cleaning them is a full pass's job.
    assert!(snap.backends.contains_key(&50) && snap.backends.contains_key(&51));
    assert!(snap.slots.keys().any(|k| k.fe_id == 77));
    t.settle(&new);
    t.snapshot().assert_tidy(&new);
}

#[test]
fn ids_are_shared_and_reused_lowest_first_once_free() {
    let (f1, f2, f3) = (
        fe(1, 80, Proto::Tcp),
        fe(2, 80, Proto::Tcp),
        fe(3, 80, Proto::Tcp),
    );
    let (b1, b2, b3, b4) = (be(1, 80), be(2, 80), be(3, 80), be(4, 80));
    let mut t = Fixture::new(BIG);
    let ids = |t: &Fixture| -> (BTreeMap<Backend, u32>, BTreeMap<Frontend, u32>) {
        let snap = t.snapshot();
        let backends = snap
            .backends
            .iter()
            .map(|(id, b)| (V4::backend_model(b), *id))
            .collect();
        let frontends = snap
            .frontends
            .iter()
            .map(|(k, v)| (V4::frontend(k).unwrap(), v.id))
            .collect();
        (backends, frontends)
    };

    // b2 is shared: one entry, one id, named by both frontends.
    reconcile_changes(
        &mut t,
        &Changes::from([(f1, Some(vec![b1, b2])), (f2, Some(vec![b2, b3]))]),
    );
    let (b, s) = ids(&t);
    assert_eq!(b, BTreeMap::from([(b1, 1), (b2, 2), (b3, 3)]));
    assert_eq!(s, BTreeMap::from([(f1, 1), (f2, 2)]));

    // f1 goes: until a grace period passes, neither its id nor b1's is free.
    reconcile_changes(&mut t, &Changes::from([(f1, None), (f3, Some(vec![b4]))]));
    let (b, s) = ids(&t);
    assert_eq!(b, BTreeMap::from([(b1, 1), (b2, 2), (b3, 3), (b4, 4)]));
    assert_eq!(s, BTreeMap::from([(f2, 2), (f3, 3)]));
    t.elapse_and_reap();
    let (b, _) = ids(&t);
    assert_eq!(b, BTreeMap::from([(b2, 2), (b3, 3), (b4, 4)]));

    // Now they are: the lowest go first.
    reconcile_changes(&mut t, &Changes::from([(f1, Some(vec![b1]))]));
    let (b, s) = ids(&t);
    assert_eq!(b[&b1], 1);
    assert_eq!(s[&f1], 1);
}

#[test]
fn large_pass_hands_out_dense_ids_in_linear_time() {
    // 20k new backends in one pass; id allocation must not rescan.
    let n: u32 = 20_000;
    let list: Vec<Backend> = (0..n)
        .map(|i| Backend {
            ip: Ipv4Addr::from(0x0a01_0000 + i).into(),
            port: 80,
        })
        .collect();
    let (f1, f2) = (fe(1, 80, Proto::Tcp), fe(2, 80, Proto::Tcp));
    let mut t = Fixture::new(Caps(100, 100, 50_000, 50_000));
    let out = reconcile_changes(&mut t, &Changes::from([(f1, Some(list.clone()))]));
    assert!(out.failed.is_empty());
    // A second frontend with half the list shared and half new.
    let half = n as usize / 2;
    let mixed: Vec<Backend> = list[half..]
        .iter()
        .map(|b| Backend { port: 81, ..*b })
        .chain(list[..half].iter().copied())
        .collect();
    reconcile_changes(&mut t, &Changes::from([(f2, Some(mixed))]));
    let ids: Vec<u32> = t.snapshot().backends.keys().copied().collect();
    assert_eq!(ids, (1..=n + n / 2).collect::<Vec<_>>());
}

// ---------------------------------------------------------------- affinity and policy bits

/// The members of frontend `f`'s live revision, as backend addresses.
fn live_members(t: &Fixture, f: &Frontend) -> BTreeSet<Backend> {
    let maps = t.r.maps();
    let (id, st) = maps.live(&key(f)).expect("live");
    maps.members()
        .range(member_range(id, st.rev))
        .map(|(k, _)| V4::backend_model(&maps.backends()[&k.backend_id]))
        .collect()
}

#[test]
fn affinity_writes_members_with_each_revision_and_retires_them_with_it() {
    let f = fe(1, 80, Proto::Tcp);
    let sticky = |backends: Vec<Backend>| Target {
        backends,
        affinity: Some(10_800),
        ..Target::default()
    };
    let mut t = Fixture::new(BIG);
    let want = BTreeMap::from([(f, sticky(vec![be(1, 8080), be(2, 8080)]))]);
    let out = t.r.reconcile(&want);
    assert!(out.failed.is_empty(), "{out:?}");
    assert_eq!(
        live_members(&t, &f),
        BTreeSet::from([be(1, 8080), be(2, 8080)])
    );
    let (_, st) = t.r.maps().live(&key(&f)).unwrap();
    assert_eq!(
        (st.flags, st.affinity_timeout),
        (lb_common::FE_F_AFFINITY, 10_800)
    );

    // A backend leaves: the new revision's members lack it at once; the old
    // revision's members go with its slots, after the grace period.
    let want = BTreeMap::from([(f, sticky(vec![be(2, 8080)]))]);
    t.r.reconcile(&want);
    assert_eq!(live_members(&t, &f), BTreeSet::from([be(2, 8080)]));
    assert_eq!(
        t.r.maps().members().len(),
        3,
        "old revision kept for readers"
    );
    t.elapse_and_reap();
    assert_eq!(t.r.maps().members().len(), 1);

    // Only the timeout changes: a new revision carries it.
    let want = BTreeMap::from([(
        f,
        Target {
            affinity: Some(60),
            ..sticky(vec![be(2, 8080)])
        },
    )]);
    assert!(t.r.reconcile(&want).written > 0);
    assert_eq!(t.r.maps().live(&key(&f)).unwrap().1.affinity_timeout, 60);

    // Affinity off: no members for the new revision; the rest are reaped.
    let want = BTreeMap::from([(f, Target::plain(vec![be(2, 8080)]))]);
    t.r.reconcile(&want);
    let (_, st) = t.r.maps().live(&key(&f)).unwrap();
    assert_eq!((st.flags, st.affinity_timeout), (0, 0));
    assert!(live_members(&t, &f).is_empty());
    t.elapse_and_reap();
    assert!(t.r.maps().members().is_empty());
    // And an unchanged target writes nothing.
    assert_eq!(t.r.reconcile(&want).changed(), 0);
}

#[test]
fn no_local_endpoints_and_local_policy_are_state_bits() {
    let f = fe(1, 80, Proto::Tcp);
    let mut t = Fixture::new(BIG);
    let want = BTreeMap::from([(
        f,
        Target {
            local: true,
            no_local_endpoints: true,
            ..Target::default()
        },
    )]);
    t.r.reconcile(&want);
    let (_, st) = t.r.maps().live(&key(&f)).unwrap();
    assert_eq!(st.count, 0);
    assert_eq!(
        st.flags,
        lb_common::FE_F_LOCAL | lb_common::FE_F_NO_LOCAL_ENDPOINTS
    );
    assert_eq!(t.r.reconcile(&want).changed(), 0);
}

/// DSR is a state bit, and turning it on or off is a change like any other.
#[test]
fn dsr_is_a_state_bit() {
    let f = fe(1, 80, Proto::Tcp);
    let mut t = Fixture::new(BIG);
    let target = |dsr| {
        BTreeMap::from([(
            f,
            Target {
                backends: vec![be(10, 8080)],
                dsr,
                ..Target::default()
            },
        )])
    };
    t.r.reconcile(&target(true));
    let (_, st) = t.r.maps().live(&key(&f)).unwrap();
    assert_eq!(st.flags & lb_common::FE_F_DSR, lb_common::FE_F_DSR);
    assert_eq!(t.r.reconcile(&target(true)).changed(), 0);
    assert_ne!(t.r.reconcile(&target(false)).changed(), 0);
    let (_, st) = t.r.maps().live(&key(&f)).unwrap();
    assert_eq!(st.flags & lb_common::FE_F_DSR, 0);
}
