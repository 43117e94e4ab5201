//! Reconciler behaviour over [`MemStore`]: exact writes, idempotence,
//! make-before-break after every single write, full maps, adoption and crashes.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use lb_common::{Service4Key, ServiceValue};

use super::{store::Op, *};
use crate::model::Proto;

type Table = BTreeMap<Frontend, Vec<Backend>>;

// ---------------------------------------------------------------- helpers

fn fe(last: u8, port: u16, proto: Proto) -> Frontend {
    Frontend {
        vip: Ipv4Addr::new(10, 96, 0, last),
        port,
        proto,
    }
}

fn be(last: u8, port: u16) -> Backend {
    Backend {
        ip: Ipv4Addr::new(10, 0, 0, last),
        port,
    }
}

fn apply_op(state: &mut MapState, op: &Op) {
    match op {
        Op::PutBackend(id, v) => {
            state.backends.insert(*id, *v);
        }
        Op::DeleteBackend(id) => {
            state.backends.remove(id);
        }
        Op::PutService(k, v) => {
            state.services.insert(*k, *v);
        }
        Op::DeleteService(k) => {
            state.services.remove(k);
        }
    }
}

/// What a datapath reader can reach: every slot-0 entry with count `n` has
/// slots `1..=n`, and every one of them names an existing backend whose
/// protocol is the frontend's.
fn check_consistent(state: &MapState) -> Result<(), String> {
    for (key0, v0) in state.frontends() {
        for slot in 1..=v0.count {
            let key = Service4Key { slot, ..*key0 };
            let Some(v) = state.services.get(&key) else {
                return Err(format!(
                    "{key0:?} count {} but slot {slot} missing",
                    v0.count
                ));
            };
            let Some(b) = state.backends.get(&v.backend_id) else {
                return Err(format!("{key:?} names missing backend {}", v.backend_id));
            };
            if b.proto != key0.proto {
                return Err(format!("{key:?} names backend {b:?} of another protocol"));
            }
        }
    }
    Ok(())
}

/// The table a datapath reader sees: each frontend's backends in slot order.
fn visible(state: &MapState) -> Table {
    state
        .frontends()
        .map(|(key0, v0)| {
            let fe = state::key_frontend(key0).expect("known protocol");
            let list = (1..=v0.count)
                .map(|slot| {
                    let id = state.services[&Service4Key { slot, ..*key0 }].backend_id;
                    let b = state.backends[&id];
                    Backend {
                        ip: Ipv4Addr::from(b.ip_be),
                        port: u16::from_be(b.port_be),
                    }
                })
                .collect();
            (fe, list)
        })
        .collect()
}

/// Replays `log` on `start`, checking after every single write that a reader
/// finds a consistent table, that no frontend serves a backend that is in
/// neither its old nor its new list, and that a frontend with backends before
/// and after never vanishes or rejects in between. Returns the final state.
fn replay_checked(start: &MapState, log: &[Op], old: &Table, new: &Table) -> MapState {
    let mut state = start.clone();
    for (i, op) in log.iter().enumerate() {
        apply_op(&mut state, op);
        if let Err(e) = check_consistent(&state) {
            panic!("after write {i} ({op:?}): {e}\nlog: {log:#?}");
        }
        let seen = visible(&state);
        for (f, list) in &seen {
            let allowed: BTreeSet<&Backend> =
                old.get(f).into_iter().chain(new.get(f)).flatten().collect();
            for b in list {
                assert!(
                    allowed.contains(b),
                    "after write {i} ({op:?}): {f} serves {b}, in neither old nor new list"
                );
            }
        }
        for (f, list) in new {
            if old.get(f).is_some_and(|o| !o.is_empty()) && !list.is_empty() {
                assert!(
                    seen.get(f).is_some_and(|l| !l.is_empty()),
                    "after write {i} ({op:?}): {f} stopped serving mid-update"
                );
            }
        }
    }
    state
}

/// Checks everything that must hold once a reconcile has succeeded.
fn assert_converged(r: &Reconciler<MemStore>, desired: &Table) {
    assert_eq!(&r.store().state, r.state(), "mirror and store disagree");
    check_consistent(r.state()).unwrap();
    assert_eq!(&visible(r.state()), desired);
    // Nothing stale: exactly count+1 entries per frontend, no unused backend.
    let entries: usize = desired.values().map(|l| l.len() + 1).sum();
    assert_eq!(r.state().services.len(), entries);
    let used: BTreeSet<u32> = r
        .state()
        .services
        .iter()
        .filter(|(k, _)| k.slot != 0)
        .map(|(_, v)| v.backend_id)
        .collect();
    assert_eq!(
        used,
        r.state().backends.keys().copied().collect::<BTreeSet<_>>()
    );
    // Every frontend has its own non-zero svc_id, repeated in its slots.
    let ids: BTreeSet<u32> = r.state().frontends().map(|(_, v)| v.svc_id).collect();
    assert_eq!(ids.len(), desired.len());
    assert!(!ids.contains(&0));
    for (k, v) in &r.state().services {
        assert_eq!(
            v.svc_id,
            r.state().services[&Service4Key { slot: 0, ..*k }].svc_id
        );
    }
}

fn svc_id(state: &MapState, f: &Frontend) -> u32 {
    state.services[&frontend_key(f, 0)].svc_id
}

fn backend_id(state: &MapState, b: &Backend, proto: Proto) -> u32 {
    let want = backend_key(b, proto);
    let ids: Vec<u32> = state
        .backends
        .iter()
        .filter(|(_, v)| **v == want)
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(ids.len(), 1, "{b}/{proto} should be stored exactly once");
    ids[0]
}

fn big_store() -> MemStore {
    MemStore::new(10_000, 10_000)
}

/// xorshift64*: deterministic, good enough to shuffle test scenarios.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
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
            // Add (or replace) a frontend.
            0 => {
                let list = random_list(rng, 6);
                next.insert(random_frontend(rng), list);
            }
            // Remove a frontend.
            1 if !keys.is_empty() => {
                next.remove(&pick(rng));
            }
            // Grow.
            2 if !keys.is_empty() => {
                let list = next.get_mut(&pick(rng)).unwrap();
                let extra = random_list(rng, 4);
                let mut set: BTreeSet<Backend> = list.drain(..).collect();
                set.extend(extra);
                list.extend(set);
            }
            // Shrink, removing from anywhere in the list.
            3 if !keys.is_empty() => {
                let list = next.get_mut(&pick(rng)).unwrap();
                let cut = rng.below(list.len() + 1);
                for _ in 0..cut {
                    let i = rng.below(list.len());
                    list.remove(i);
                }
            }
            // Swap the lists of two frontends.
            4 if keys.len() >= 2 => {
                let (a, b) = (pick(rng), pick(rng));
                let la = next[&a].clone();
                let lb = next.insert(b, la).unwrap();
                next.insert(a, lb);
            }
            // Share: copy one list onto another frontend.
            5 if keys.len() >= 2 => {
                let (a, b) = (pick(rng), pick(rng));
                let la = next[&a].clone();
                next.insert(b, la);
            }
            // Replace every backend of one frontend.
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

// ---------------------------------------------------------------- exact writes

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

#[test]
fn fresh_reconcile_programs_the_expected_maps() {
    let desired = sample();
    let mut r = Reconciler::adopt(big_store()).unwrap();
    let out = r.reconcile(&desired);
    assert!(
        out.failed.is_empty() && out.delete_errors.is_empty(),
        "{out:?}"
    );

    let st = r.state();
    // 4 frontends + 3 + 2 + 2 + 0 slots.
    assert_eq!(st.services.len(), 11);
    // 10.0.0.1:8080 TCP and UDP, .2, .3, .4:53 UDP.
    assert_eq!(st.backends.len(), 5);
    assert_eq!(out.services_written, 11);
    assert_eq!(out.backends_written, 5);
    assert_eq!(out.services_deleted + out.backends_deleted, 0);
    assert_eq!(out.changed(), r.store().log.len());

    let counts: Vec<u16> = st.frontends().map(|(_, v)| v.count).collect();
    assert_eq!(counts, [3, 2, 2, 0]);
    for (_, v) in st.frontends() {
        assert_eq!(v.backend_id, 0);
        assert_eq!(v.flags, 0);
    }
    // Shared backends are stored once and named by both frontends.
    let id2 = backend_id(st, &be(2, 8080), Proto::Tcp);
    let id3 = backend_id(st, &be(3, 8080), Proto::Tcp);
    let f3 = fe(3, 80, Proto::Tcp);
    assert_eq!(st.services[&frontend_key(&f3, 1)].backend_id, id2);
    assert_eq!(st.services[&frontend_key(&f3, 2)].backend_id, id3);
    assert_ne!(
        backend_id(st, &be(1, 8080), Proto::Tcp),
        backend_id(st, &be(1, 8080), Proto::Udp)
    );
    let udp = st.backends[&backend_id(st, &be(4, 53), Proto::Udp)];
    assert_eq!(udp.proto, lb_common::PROTO_UDP);
    assert_eq!(udp.ip_be, [10, 0, 0, 4]);
    assert_eq!(udp.port_be, 53u16.to_be());
    assert_converged(&r, &desired);
    // Written in an order a reader could follow at every step.
    replay_checked(
        &MapState::default(),
        &r.store().log,
        &Table::new(),
        &desired,
    );
}

#[test]
fn same_desired_state_again_writes_nothing() {
    let desired = sample();
    let mut r = Reconciler::adopt(big_store()).unwrap();
    r.reconcile(&desired);
    let log = r.store().log.clone();
    let before = r.state().clone();
    for _ in 0..3 {
        let out = r.reconcile(&desired);
        assert_eq!(out.changed(), 0, "{out:?}");
        assert!(out.failed.is_empty() && out.delete_errors.is_empty());
    }
    assert_eq!(r.store().log, log);
    assert_eq!(r.state(), &before);
}

#[test]
fn removing_one_backend_rewrites_only_what_it_must() {
    let f1 = fe(1, 80, Proto::Tcp);
    let f2 = fe(2, 80, Proto::Tcp);
    let mut desired = Table::from([
        (f1, vec![be(1, 80), be(2, 80), be(3, 80), be(4, 80)]),
        (f2, vec![be(2, 80), be(5, 80)]),
    ]);
    let mut r = Reconciler::adopt(big_store()).unwrap();
    r.reconcile(&desired);
    let before = r.state().clone();
    let id = |b: Backend| backend_id(&before, &b, Proto::Tcp);
    let (id1, id2, id3, id4, id5) = (
        id(be(1, 80)),
        id(be(2, 80)),
        id(be(3, 80)),
        id(be(4, 80)),
        id(be(5, 80)),
    );
    let (svc1, svc2) = (svc_id(&before, &f1), svc_id(&before, &f2));
    let old = desired.clone();

    // Drop 10.0.0.3 from the middle of f1's list.
    desired.get_mut(&f1).unwrap().retain(|b| *b != be(3, 80));
    let mark = r.store().log.len();
    let out = r.reconcile(&desired);
    let new_ops = r.store().log[mark..].to_vec();
    let slot = |s: u16, backend_id: u32| {
        Op::PutService(
            frontend_key(&f1, s),
            ServiceValue {
                backend_id,
                svc_id: svc1,
                ..ServiceValue::default()
            },
        )
    };
    let count = Op::PutService(
        frontend_key(&f1, 0),
        ServiceValue {
            svc_id: svc1,
            count: 3,
            ..ServiceValue::default()
        },
    );
    assert_eq!(
        new_ops,
        [
            slot(3, id4),
            count,
            Op::DeleteService(frontend_key(&f1, 4)),
            Op::DeleteBackend(id3),
        ]
    );
    assert_eq!(out.changed(), 4);
    let st = r.state();
    assert_eq!(svc_id(st, &f1), svc1);
    assert_eq!(svc_id(st, &f2), svc2);
    for (b, want) in [
        (be(1, 80), id1),
        (be(2, 80), id2),
        (be(4, 80), id4),
        (be(5, 80), id5),
    ] {
        assert_eq!(backend_id(st, &b, Proto::Tcp), want, "{b} changed id");
    }
    // f2 is byte-for-byte untouched.
    let f2_entries = |s: &MapState| -> Vec<_> {
        s.services
            .iter()
            .filter(|(k, _)| state::key_frontend(k) == Some(f2))
            .map(|(k, v)| (*k, *v))
            .collect()
    };
    assert_eq!(f2_entries(st), f2_entries(&before));
    assert_converged(&r, &desired);
    replay_checked(&before, &new_ops, &old, &desired);

    // Removing the last backend needs no slot rewrite at all.
    let before = r.state().clone();
    desired.get_mut(&f1).unwrap().retain(|b| *b != be(4, 80));
    let mark = r.store().log.len();
    r.reconcile(&desired);
    let new_ops = &r.store().log[mark..];
    assert_eq!(new_ops.len(), 3, "{new_ops:?}");
    assert!(matches!(new_ops[0], Op::PutService(k, v) if k.slot == 0 && v.count == 2));
    assert_eq!(new_ops[1], Op::DeleteService(frontend_key(&f1, 3)));
    assert_eq!(new_ops[2], Op::DeleteBackend(id4));
    assert_eq!(svc_id(r.state(), &f1), svc1);
    assert_eq!(before.backends[&id1], r.state().backends[&id1]);
}

#[test]
fn removing_a_frontend_deletes_its_slot_zero_first() {
    let f1 = fe(1, 80, Proto::Tcp);
    let f2 = fe(2, 80, Proto::Tcp);
    let old = Table::from([(f1, vec![be(1, 80), be(2, 80)]), (f2, vec![be(2, 80)])]);
    let mut r = Reconciler::adopt(big_store()).unwrap();
    r.reconcile(&old);
    let before = r.state().clone();
    let new = Table::from([(f2, vec![be(2, 80)])]);
    let mark = r.store().log.len();
    r.reconcile(&new);
    let ops = &r.store().log[mark..];
    assert_eq!(
        ops,
        [
            Op::DeleteService(frontend_key(&f1, 0)),
            Op::DeleteService(frontend_key(&f1, 1)),
            Op::DeleteService(frontend_key(&f1, 2)),
            Op::DeleteBackend(backend_id(&before, &be(1, 80), Proto::Tcp)),
        ]
    );
    assert_converged(&r, &new);
}

// ---------------------------------------------------------------- make-before-break

#[test]
fn every_intermediate_state_is_consistent() {
    for seed in [1, 2, 3, 0xdead_beef, 0x1234_5678_9abc] {
        let states = scenario(seed, 120);
        let mut r = Reconciler::adopt(big_store()).unwrap();
        let mut writes = 0;
        for pair in states.windows(2) {
            let (old, new) = (&pair[0], &pair[1]);
            let start = r.state().clone();
            let mark = r.store().log.len();
            let before_ids: BTreeMap<Frontend, u32> = old
                .keys()
                .filter(|f| new.contains_key(f))
                .map(|f| (*f, svc_id(&start, f)))
                .collect();
            let out = r.reconcile(new);
            assert!(
                out.failed.is_empty() && out.delete_errors.is_empty(),
                "{out:?}"
            );
            let ops = &r.store().log[mark..];
            assert_eq!(out.changed(), ops.len());
            let end = replay_checked(&start, ops, old, new);
            assert_eq!(&end, r.state(), "replayed log differs from the store");
            assert_converged(&r, new);
            // Frontends that survive keep their svc_id.
            for (f, id) in before_ids {
                assert_eq!(svc_id(r.state(), &f), id, "{f} changed svc_id");
            }
            writes += ops.len();
            // And the new state is a fixed point.
            assert_eq!(r.reconcile(new).changed(), 0);
        }
        // The scenario really exercised the reconciler.
        assert!(writes > 300, "seed {seed}: only {writes} writes");
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

// ---------------------------------------------------------------- full maps

#[test]
fn full_services_map_fails_one_frontend_and_keeps_the_rest_intact() {
    let a = fe(1, 80, Proto::Tcp);
    let b = fe(2, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    let desired = Table::from([
        (a, vec![be(1, 80), be(2, 80)]), // 3 entries
        (
            b,
            vec![be(3, 80), be(4, 80), be(5, 80), be(6, 80), be(7, 80)],
        ), // 6 entries
        (c, vec![be(8, 80)]),            // 2 entries
    ]);
    // Room for a and c, not for b.
    let mut r = Reconciler::adopt(MemStore::new(7, 100)).unwrap();
    let out = r.reconcile(&desired);
    let failed: Vec<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, [b], "{out:?}");
    assert!(matches!(
        out.failed[0].1,
        StoreError::Full { map: "services" }
    ));
    check_consistent(&r.store().state).unwrap();
    let mut fitted = desired.clone();
    fitted.remove(&b);
    assert_eq!(visible(&r.store().state), fitted);
    // Nothing of b is left behind to hold room.
    assert_eq!(r.store().state.services.len(), 5);
    assert_eq!(r.store().state.backends.len(), 3);
    assert_eq!(&r.store().state, r.state());
    replay_checked(
        &MapState::default(),
        &r.store().log,
        &Table::new(),
        &desired,
    );

    // Retrying in place does not disturb what is programmed.
    let state = r.state().clone();
    let out = r.reconcile(&desired);
    assert_eq!(out.failed.len(), 1);
    assert_eq!(visible(r.state()), fitted);
    assert_eq!(r.state().frontends().count(), 2);
    assert_eq!(svc_id(r.state(), &a), svc_id(&state, &a));

    // A bigger map (say, after a restart with a larger max_entries) converges.
    let mut store = r.store().clone();
    store.max_services = 11;
    let mut r = Reconciler::adopt(store).unwrap();
    let start = r.state().clone();
    let mark = r.store().log.len();
    let out = r.reconcile(&desired);
    assert!(out.failed.is_empty(), "{out:?}");
    replay_checked(&start, &r.store().log[mark..], &fitted, &desired);
    assert_converged(&r, &desired);
    assert_eq!(svc_id(r.state(), &a), svc_id(&state, &a));
    assert_eq!(svc_id(r.state(), &c), svc_id(&state, &c));
}

#[test]
fn frontend_that_cannot_grow_keeps_its_old_count() {
    let a = fe(1, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    let old = Table::from([(a, vec![be(1, 80), be(2, 80)]), (c, vec![be(8, 80)])]);
    let mut r = Reconciler::adopt(MemStore::new(7, 100)).unwrap();
    assert!(r.reconcile(&old).failed.is_empty());
    let before = r.state().clone();

    // a wants six backends (7 entries): impossible with c present.
    let new = Table::from([
        (a, (1..=6).map(|i| be(i, 80)).collect()),
        (c, vec![be(8, 80), be(9, 80)]),
    ]);
    let mark = r.store().log.len();
    let out = r.reconcile(&new);
    let failed: Vec<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, [a], "{out:?}");
    replay_checked(&before, &r.store().log[mark..], &old, &new);
    let st = &r.store().state;
    check_consistent(st).unwrap();
    assert_eq!(st.services[&frontend_key(&a, 0)].count, 2);
    assert_eq!(visible(st)[&a], old[&a]);
    // c still had room for its second backend once a gave back its unused slots.
    assert_eq!(visible(st)[&c], new[&c]);
    assert_eq!(st.services.len(), 6);
    assert_eq!(st.backends.len(), 4);
}

#[test]
fn failed_update_keeps_the_backends_its_old_slots_name() {
    let a = fe(1, 80, Proto::Tcp);
    let old = Table::from([(a, vec![be(1, 80), be(2, 80)])]);
    let mut r = Reconciler::adopt(MemStore::new(100, 3)).unwrap();
    assert!(r.reconcile(&old).failed.is_empty());
    let before = r.state().clone();

    // Every backend replaced; only one new one fits beside the old two.
    let new = Table::from([(a, vec![be(3, 80), be(4, 80), be(5, 80)])]);
    let mark = r.store().log.len();
    let out = r.reconcile(&new);
    assert_eq!(out.failed.len(), 1, "{out:?}");
    replay_checked(&before, &r.store().log[mark..], &old, &new);
    // a keeps serving its old backends, and nothing it wrote is left over.
    assert_eq!(r.store().state, before);
    assert_eq!(r.state(), &before);
}

#[test]
fn full_backends_map_fails_one_frontend_only() {
    let a = fe(1, 80, Proto::Tcp);
    let b = fe(2, 80, Proto::Tcp);
    let c = fe(3, 80, Proto::Tcp);
    let desired = Table::from([
        (a, vec![be(1, 80)]),
        (b, vec![be(2, 80), be(3, 80), be(4, 80)]),
        (c, vec![be(1, 80), be(5, 80)]),
    ]);
    // 5 backends wanted, room for 3: a and c fit, b does not.
    let mut r = Reconciler::adopt(MemStore::new(100, 3)).unwrap();
    let out = r.reconcile(&desired);
    let failed: Vec<Frontend> = out.failed.iter().map(|(f, _)| *f).collect();
    assert_eq!(failed, [b], "{out:?}");
    assert!(matches!(
        out.failed[0].1,
        StoreError::Full { map: "backends" }
    ));
    check_consistent(&r.store().state).unwrap();
    let mut fitted = desired.clone();
    fitted.remove(&b);
    assert_eq!(visible(&r.store().state), fitted);
    assert_eq!(r.store().state.backends.len(), 2);
    replay_checked(
        &MapState::default(),
        &r.store().log,
        &Table::new(),
        &desired,
    );

    let mut store = r.store().clone();
    store.max_backends = 5;
    let mut r = Reconciler::adopt(store).unwrap();
    assert!(r.reconcile(&desired).failed.is_empty());
    assert_converged(&r, &desired);
}

// ---------------------------------------------------------------- adoption and crashes

#[test]
fn adopting_maps_that_already_match_writes_nothing() {
    let desired = sample();
    let mut first = Reconciler::adopt(big_store()).unwrap();
    first.reconcile(&desired);
    let mut store = first.store().clone();
    store.log.clear();

    let mut r = Reconciler::adopt(store).unwrap();
    assert_eq!(r.state(), first.state());
    let out = r.reconcile(&desired);
    assert_eq!(out.changed(), 0, "{out:?}");
    assert!(r.store().log.is_empty(), "{:?}", r.store().log);

    // A change after adoption keeps the adopted ids.
    let f1 = fe(1, 80, Proto::Tcp);
    let mut next = desired.clone();
    next.get_mut(&f1).unwrap().push(be(9, 8080));
    r.reconcile(&next);
    assert_converged(&r, &next);
    for f in desired.keys() {
        assert_eq!(svc_id(r.state(), f), svc_id(first.state(), f));
    }
    for (id, b) in &first.state().backends {
        assert_eq!(r.state().backends.get(id), Some(b));
    }
}

#[test]
fn adopt_cleans_up_leftovers() {
    let f1 = fe(1, 80, Proto::Tcp);
    let f9 = fe(9, 80, Proto::Tcp);
    let desired = Table::from([(f1, vec![be(1, 80)])]);
    let mut r = Reconciler::adopt(big_store()).unwrap();
    r.reconcile(&desired);
    let clean = r.state().clone();

    let mut store = r.store().clone();
    let value = |backend_id| ServiceValue {
        backend_id,
        svc_id: 77,
        ..ServiceValue::default()
    };
    // An orphan slot with no slot 0, a stale slot past f1's count, a backend nobody uses.
    store.state.services.insert(frontend_key(&f9, 1), value(50));
    store.state.services.insert(frontend_key(&f1, 2), value(50));
    store
        .state
        .backends
        .insert(50, backend_key(&be(50, 80), Proto::Tcp));
    store
        .state
        .backends
        .insert(51, backend_key(&be(51, 80), Proto::Tcp));
    let mut r = Reconciler::adopt(store).unwrap();
    let out = r.reconcile(&desired);
    assert_eq!(
        (out.services_deleted, out.backends_deleted),
        (2, 2),
        "{out:?}"
    );
    assert_eq!(out.services_written + out.backends_written, 0);
    assert_eq!(r.state(), &clean);
    assert_eq!(r.store().state, clean);
}

#[test]
fn crash_at_any_write_then_adopt_converges_to_the_same_maps() {
    let states = scenario(7, 40);
    let mut clean = Reconciler::adopt(big_store()).unwrap();
    let mut crashes = 0;
    for pair in states.windows(2) {
        let new = &pair[1];
        let start = clean.state().clone();
        let mark = clean.store().log.len();
        clean.reconcile(new);
        let log = clean.store().log[mark..].to_vec();
        for cut in 0..=log.len() {
            // The maps as a crash after `cut` writes leaves them.
            let mut store = big_store();
            store.state = start.clone();
            for op in &log[..cut] {
                apply_op(&mut store.state, op);
            }
            let crashed = store.state.clone();
            check_consistent(&crashed).unwrap();

            let mut r = Reconciler::adopt(store).unwrap();
            let out = r.reconcile(new);
            assert!(out.failed.is_empty(), "{out:?}");
            assert_eq!(
                r.state(),
                clean.state(),
                "crash after write {cut} of {log:#?}"
            );
            assert_eq!(r.store().state, *clean.state());
            // Recovery itself is make-before-break. Its "old" table is what
            // the crashed maps showed.
            let shown = visible(&crashed);
            let recovered = replay_checked(&crashed, &r.store().log, &shown, new);
            assert_eq!(&recovered, r.state());
            // Recovery does no more than what the crash left undone.
            assert!(r.store().log.len() <= log.len() - cut, "cut {cut}");
            crashes += 1;
        }
    }
    assert!(crashes > 200, "only {crashes} crash points");
}

// ---------------------------------------------------------------- partial passes

/// One partial pass's input: each frontend with its list, `None` to remove.
type Changes = BTreeMap<Frontend, Option<Vec<Backend>>>;

fn reconcile_changes(r: &mut Reconciler<MemStore>, changes: &Changes) -> Outcome {
    r.reconcile_some(changes.iter().map(|(f, b)| (f, b.as_deref())))
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

/// Checks that `ops`, written from `start` by a pass over `scope` alone,
/// touched no other frontend's entries and no backend another frontend uses.
fn assert_only_touches(start: &MapState, ops: &[Op], scope: &BTreeSet<Frontend>) {
    let mut state = start.clone();
    let named_outside = |state: &MapState| -> BTreeSet<u32> {
        state
            .services
            .iter()
            .filter(|(k, _)| k.slot != 0 && !scope.contains(&state::key_frontend(k).unwrap()))
            .map(|(_, v)| v.backend_id)
            .collect()
    };
    let outside_before = named_outside(start);
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::PutService(k, _) | Op::DeleteService(k) => {
                let f = state::key_frontend(k).unwrap();
                assert!(scope.contains(&f), "write {i} ({op:?}) outside the pass");
            }
            Op::PutBackend(id, v) => {
                // Only a new id, or the same content again.
                assert!(
                    state.backends.get(id).is_none_or(|old| old == v),
                    "write {i} ({op:?}) overwrites backend {id}"
                );
            }
            Op::DeleteBackend(id) => {
                assert!(
                    !outside_before.contains(id),
                    "write {i} ({op:?}) deletes a backend another frontend names"
                );
            }
        }
        apply_op(&mut state, op);
    }
    // Every other frontend is exactly as it was.
    let others = |s: &MapState| -> Vec<(Service4Key, ServiceValue)> {
        s.services
            .iter()
            .filter(|(k, _)| !scope.contains(&state::key_frontend(k).unwrap()))
            .map(|(k, v)| (*k, *v))
            .collect()
    };
    assert_eq!(others(&state), others(start));
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
        match goal.get(f) {
            Some(list) => changes.insert(*f, Some(list.clone())),
            // Removing one the maps do not hold must be harmless too.
            None => changes.insert(*f, None),
        };
    }
    if rng.below(4) == 0 {
        // A frontend that was never programmed, removed.
        changes.insert(fe(200, 9, Proto::Tcp), None);
    }
    changes
}

#[test]
fn partial_passes_are_make_before_break_and_add_up_to_the_full_state() {
    let mut writes = 0;
    for seed in [1, 2, 3, 0xdead_beef, 0x1234_5678_9abc] {
        let mut rng = Rng(seed ^ 0x5555);
        let goals = scenario(seed, 100);
        let mut r = Reconciler::adopt(big_store()).unwrap();
        // What the maps should show: the changes passed so far.
        let mut applied = Table::new();
        for goal in &goals[1..] {
            let changes = random_changes(&mut rng, &applied, goal);
            let next = with_changes(&applied, &changes);
            let start = r.state().clone();
            let mark = r.store().log.len();
            let before_ids: BTreeMap<Frontend, u32> = applied
                .keys()
                .filter(|f| next.contains_key(f))
                .map(|f| (*f, svc_id(&start, f)))
                .collect();

            let out = reconcile_changes(&mut r, &changes);
            assert!(
                out.failed.is_empty() && out.delete_errors.is_empty(),
                "{out:?}"
            );
            let ops = r.store().log[mark..].to_vec();
            assert_eq!(out.changed(), ops.len());
            let end = replay_checked(&start, &ops, &applied, &next);
            assert_eq!(&end, r.state(), "replayed log differs from the store");
            let scope: BTreeSet<Frontend> = changes.keys().copied().collect();
            assert_only_touches(&start, &ops, &scope);
            assert_eq!(visible(r.state()), next, "seed {seed}");
            assert_converged(&r, &next);
            for (f, id) in before_ids {
                assert_eq!(svc_id(r.state(), &f), id, "{f} changed svc_id");
            }
            // Frontends whose list did not change cost nothing.
            let unchanged: BTreeSet<Frontend> = changes
                .keys()
                .filter(|f| applied.get(f) == next.get(f))
                .copied()
                .collect();
            assert_only_touches(&start, &ops, &(&scope - &unchanged));
            // The same pass again is a fixed point, and so is a full pass.
            assert_eq!(reconcile_changes(&mut r, &changes).changed(), 0);
            let full = r.reconcile(&next);
            assert_eq!(full.changed(), 0, "seed {seed}: {full:?}");
            writes += ops.len();
            applied = next;
        }
        // Catching up on everything left over converges on the goal.
        let last = goals.last().unwrap();
        let rest: Changes = applied
            .keys()
            .chain(last.keys())
            .map(|f| (*f, last.get(f).cloned()))
            .collect();
        let start = r.state().clone();
        let mark = r.store().log.len();
        reconcile_changes(&mut r, &rest);
        replay_checked(&start, &r.store().log[mark..], &applied, last);
        assert_converged(&r, last);
        assert_eq!(r.reconcile(last).changed(), 0);
    }
    assert!(writes > 1000, "only {writes} writes");
}

#[test]
fn partial_pass_leaves_other_frontends_and_their_leftovers_alone() {
    let (f1, f2, f3, f9) = (
        fe(1, 80, Proto::Tcp),
        fe(2, 80, Proto::Tcp),
        fe(3, 80, Proto::Tcp),
        fe(9, 80, Proto::Tcp),
    );
    let old = Table::from([
        (f1, vec![be(1, 80), be(2, 80)]),
        (f2, vec![be(2, 80), be(3, 80)]),
        (f3, vec![be(3, 80), be(4, 80)]),
    ]);
    let mut r = Reconciler::adopt(big_store()).unwrap();
    r.reconcile(&old);
    // Leftovers a full pass would clean: an orphan slot, a stale slot past
    // f3's count, and a backend nobody names.
    let mut store = r.store().clone();
    let value = |backend_id| ServiceValue {
        backend_id,
        svc_id: 77,
        ..ServiceValue::default()
    };
    store.state.services.insert(frontend_key(&f9, 1), value(50));
    store.state.services.insert(frontend_key(&f3, 3), value(50));
    for id in [50, 51] {
        store
            .state
            .backends
            .insert(id, backend_key(&be(id as u8, 80), Proto::Tcp));
    }
    let mut r = Reconciler::adopt(store).unwrap();
    let start = r.state().clone();

    // f1 goes, f2 changes entirely; f1 and f2 share 10.0.0.2, f2 and f3 10.0.0.3.
    let changes = Changes::from([(f1, None), (f2, Some(vec![be(5, 80)]))]);
    let mark = r.store().log.len();
    let out = reconcile_changes(&mut r, &changes);
    assert!(out.failed.is_empty() && out.delete_errors.is_empty());
    let ops = r.store().log[mark..].to_vec();
    assert_only_touches(&start, &ops, &BTreeSet::from([f1, f2]));
    let new = Table::from([(f2, vec![be(5, 80)]), (f3, old[&f3].clone())]);
    replay_checked(&start, &ops, &old, &new);
    assert_eq!(visible(r.state()), new);
    // 10.0.0.1 and .2 went with their last users; .3 stays for f3.
    let deleted: BTreeSet<u32> = ops
        .iter()
        .filter_map(|op| match op {
            Op::DeleteBackend(id) => Some(*id),
            _ => None,
        })
        .collect();
    let id = |b: Backend| backend_id(&start, &b, Proto::Tcp);
    assert_eq!(deleted, BTreeSet::from([id(be(1, 80)), id(be(2, 80))]));
    assert_eq!(
        r.state().backends.get(&id(be(3, 80))),
        start.backends.get(&id(be(3, 80)))
    );
    // The leftovers are still there: cleaning them is a full pass's job.
    for k in [frontend_key(&f9, 1), frontend_key(&f3, 3)] {
        assert_eq!(r.state().services.get(&k), start.services.get(&k));
    }
    assert!(r.state().backends.contains_key(&50) && r.state().backends.contains_key(&51));
    assert_eq!(&r.store().state, r.state());

    // A full pass does clean them.
    let out = r.reconcile(&new);
    assert_eq!(
        (out.services_deleted, out.backends_deleted),
        (2, 2),
        "{out:?}"
    );
    assert_converged(&r, &new);
}

/// Each backend's id, by address, and each frontend's svc_id.
fn ids(state: &MapState) -> (BTreeMap<Backend, u32>, BTreeMap<Frontend, u32>) {
    let backends = state
        .backends
        .iter()
        .map(|(id, b)| {
            let addr = Backend {
                ip: Ipv4Addr::from(b.ip_be),
                port: u16::from_be(b.port_be),
            };
            (addr, *id)
        })
        .collect();
    let svcs = state
        .frontends()
        .map(|(k, v)| (state::key_frontend(k).unwrap(), v.svc_id))
        .collect();
    (backends, svcs)
}

#[test]
fn partial_passes_share_backend_ids_and_reuse_freed_ids_only_later() {
    let (f1, f2, f3, f4) = (
        fe(1, 80, Proto::Tcp),
        fe(2, 80, Proto::Tcp),
        fe(3, 80, Proto::Tcp),
        fe(4, 80, Proto::Tcp),
    );
    let (b1, b2, b3, b4, b5, b6) = (
        be(1, 80),
        be(2, 80),
        be(3, 80),
        be(4, 80),
        be(5, 80),
        be(6, 80),
    );
    let mut r = Reconciler::adopt(big_store()).unwrap();
    let pass = |r: &mut Reconciler<MemStore>, changes: Changes| {
        let start = r.state().clone();
        let mark = r.store().log.len();
        let out = reconcile_changes(r, &changes);
        assert!(out.failed.is_empty() && out.delete_errors.is_empty());
        let scope: BTreeSet<Frontend> = changes.keys().copied().collect();
        assert_only_touches(&start, &r.store().log[mark..], &scope);
        ids(r.state())
    };

    // b2 is shared: one entry, one id, named by both frontends.
    let (b, s) = pass(
        &mut r,
        Changes::from([(f1, Some(vec![b1, b2])), (f2, Some(vec![b2, b3]))]),
    );
    assert_eq!(b, BTreeMap::from([(b1, 1), (b2, 2), (b3, 3)]));
    assert_eq!(s, BTreeMap::from([(f1, 1), (f2, 2)]));
    assert_eq!(r.state().services[&frontend_key(&f1, 2)].backend_id, 2);
    assert_eq!(r.state().services[&frontend_key(&f2, 1)].backend_id, 2);

    // f1 goes: b1 with it, b2 stays for f2. In the same pass, new backends
    // and a new frontend must not take the ids being freed.
    let (b, s) = pass(
        &mut r,
        Changes::from([(f1, None), (f3, Some(vec![b4, b2]))]),
    );
    assert_eq!(b, BTreeMap::from([(b2, 2), (b3, 3), (b4, 4)]));
    assert_eq!(s, BTreeMap::from([(f2, 2), (f3, 3)]));

    // A later pass reuses the lowest free ids: backend 1, svc 1.
    let (b, s) = pass(&mut r, Changes::from([(f4, Some(vec![b5, b6]))]));
    assert_eq!(
        b,
        BTreeMap::from([(b2, 2), (b3, 3), (b4, 4), (b5, 1), (b6, 5)])
    );
    assert_eq!(s, BTreeMap::from([(f2, 2), (f3, 3), (f4, 1)]));

    // The other user of b2 goes: b2 goes too. b3 is f2's alone.
    let (b, _) = pass(&mut r, Changes::from([(f3, None)]));
    assert_eq!(b, BTreeMap::from([(b2, 2), (b3, 3), (b5, 1), (b6, 5)]));
    let (b, s) = pass(&mut r, Changes::from([(f2, None)]));
    assert_eq!(b, BTreeMap::from([(b5, 1), (b6, 5)]));
    assert_eq!(s, BTreeMap::from([(f4, 1)]));

    // Ids 2, 3, 4 are free again; they go lowest first (f1 comes first), and
    // f4 swapping new backends for old ones in one pass does not reuse ids 1
    // and 5, which it frees.
    let (b, s) = pass(
        &mut r,
        Changes::from([(f4, Some(vec![b1, b2, b3])), (f1, Some(vec![b4]))]),
    );
    assert_eq!(b, BTreeMap::from([(b4, 2), (b1, 3), (b2, 4), (b3, 6)]));
    assert_eq!(s, BTreeMap::from([(f1, 2), (f4, 1)]));
    assert_converged(&r, &Table::from([(f1, vec![b4]), (f4, vec![b1, b2, b3])]));
}

#[test]
fn partial_pass_after_adopting_keeps_the_ids_in_the_maps() {
    let (f1, f2, f3) = (
        fe(1, 80, Proto::Tcp),
        fe(2, 53, Proto::Udp),
        fe(3, 80, Proto::Tcp),
    );
    // Maps as an earlier run left them, with gaps in both id spaces.
    let mut store = big_store();
    let mut install = |f: &Frontend, svc_id: u32, list: &[(u32, Backend)]| {
        store.state.services.insert(
            frontend_key(f, 0),
            ServiceValue {
                svc_id,
                count: list.len() as u16,
                ..ServiceValue::default()
            },
        );
        for (slot, (id, b)) in (1u16..).zip(list) {
            store.state.services.insert(
                frontend_key(f, slot),
                ServiceValue {
                    backend_id: *id,
                    svc_id,
                    ..ServiceValue::default()
                },
            );
            store.state.backends.insert(*id, backend_key(b, f.proto));
        }
    };
    install(&f1, 5, &[(3, be(1, 80)), (7, be(2, 80))]);
    install(&f2, 9, &[(4, be(1, 53))]);
    let adopted = store.state.clone();
    let old = visible(&adopted);
    let mut r = Reconciler::adopt(store).unwrap();
    assert_eq!(r.state(), &adopted);

    // f1 keeps 10.0.0.2 and gains two; f3 is new and shares 10.0.0.2.
    let changes = Changes::from([
        (f1, Some(vec![be(2, 80), be(5, 80), be(6, 80)])),
        (f3, Some(vec![be(2, 80)])),
        (f2, Some(vec![be(1, 53)])),
    ]);
    let out = reconcile_changes(&mut r, &changes);
    assert!(out.failed.is_empty() && out.delete_errors.is_empty());
    let new = with_changes(&old, &changes);
    let ops = r.store().log.clone();
    replay_checked(&adopted, &ops, &old, &new);
    assert_only_touches(&adopted, &ops, &BTreeSet::from([f1, f3]));
    assert_converged(&r, &new);
    let (b, s) = ids(r.state());
    assert_eq!(
        b,
        BTreeMap::from([
            (be(1, 53), 4),
            (be(2, 80), 7),
            (be(5, 80), 1),
            (be(6, 80), 2)
        ])
    );
    assert_eq!(s, BTreeMap::from([(f1, 5), (f2, 9), (f3, 1)]));
    // 10.0.0.1:80 went with its last slot; its id 3 is free for the next pass.
    assert!(ops.contains(&Op::DeleteBackend(3)));
    let out = reconcile_changes(
        &mut r,
        &Changes::from([(f2, Some(vec![be(1, 53), be(8, 53)]))]),
    );
    assert_eq!(out.changed(), 3, "{out:?}");
    assert_eq!(backend_id(r.state(), &be(8, 53), Proto::Udp), 3);
    // Removing an adopted frontend deletes what only it used.
    reconcile_changes(&mut r, &Changes::from([(f2, None)]));
    assert!(!r.state().backends.contains_key(&4) && !r.state().backends.contains_key(&3));
    assert_eq!(
        r.reconcile(&with_changes(&new, &Changes::from([(f2, None)])))
            .changed(),
        0
    );
}

#[test]
fn large_pass_hands_out_dense_ids_in_linear_time() {
    // 20k new backends in one pass. Handing out ids used to rescan every id
    // taken earlier in the pass: about 30 s here, against well under 1 s.
    let n: u32 = 20_000;
    let list: Vec<Backend> = (0..n)
        .map(|i| Backend {
            ip: Ipv4Addr::from(0x0a01_0000 + i),
            port: 80,
        })
        .collect();
    let (f1, f2) = (fe(1, 80, Proto::Tcp), fe(2, 80, Proto::Tcp));
    let mut r = Reconciler::adopt(MemStore::new(50_000, 50_000)).unwrap();
    let t = std::time::Instant::now();
    let out = reconcile_changes(&mut r, &Changes::from([(f1, Some(list.clone()))]));
    assert!(out.failed.is_empty());
    // A second frontend with half the list shared and half new.
    let half = n as usize / 2;
    let mixed: Vec<Backend> = list[half..]
        .iter()
        .map(|b| Backend { port: 81, ..*b })
        .chain(list[..half].iter().copied())
        .collect();
    reconcile_changes(&mut r, &Changes::from([(f2, Some(mixed))]));
    let elapsed = t.elapsed();
    let ids: Vec<u32> = r.state().backends.keys().copied().collect();
    assert_eq!(ids, (1..=n + n / 2).collect::<Vec<_>>());
    assert_eq!(r.state().services[&frontend_key(&f1, 1)].backend_id, 1);
    assert_eq!(r.state().services[&frontend_key(&f2, 1)].backend_id, n + 1);
    assert!(elapsed.as_secs() < 10, "{elapsed:?}");
}
