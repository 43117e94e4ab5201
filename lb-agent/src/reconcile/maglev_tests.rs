//! The write protocol of Maglev tables: each revision of a frontend with
//! `FE_F_MAGLEV` gets its table beside its slots, published by the same
//! state write, and deleted with them a grace period after.

use std::{collections::BTreeMap, net::SocketAddr};

use lb_common::{FE_F_MAGLEV, FE_STATE4, MAGLEV_CHUNK, MAGLEV4, MaglevKey};

use super::{
    Family, Reconciler, V4,
    mem::{Journal, ManualGrace, Mem, Step, lb_tables},
    table::Found,
};
use crate::model::{
    Backend, Frontend, Proto, Scope, Target,
    maglev::{HashSeed, MaglevParams, TableSize, lookup_table},
};

fn frontend() -> Frontend {
    frontend_at(30080)
}

fn frontend_at(port: u16) -> Frontend {
    Frontend {
        vip: "192.0.2.10".parse().unwrap(),
        port,
        proto: Proto::Tcp,
        scope: Scope::External,
    }
}

fn key() -> lb_common::Frontend4Key {
    key_of(&frontend())
}

fn key_of(fe: &Frontend) -> lb_common::Frontend4Key {
    <V4 as Family>::frontend_key(fe).unwrap()
}

fn backends(n: u8) -> Vec<Backend> {
    (1..=n)
        .map(|i| Backend {
            ip: format!("10.42.0.{i}").parse().unwrap(),
            port: 8080,
        })
        .collect()
}

fn maglev(backends: Vec<Backend>) -> BTreeMap<Frontend, Target> {
    BTreeMap::from([(
        frontend(),
        Target {
            maglev: true,
            ..Target::plain(backends)
        },
    )])
}

struct Fixture {
    journal: Journal,
    grace: ManualGrace,
    r: Reconciler<V4, Mem, ManualGrace>,
    params: MaglevParams,
}

impl Fixture {
    fn new(size: u32) -> Self {
        Self::with(MaglevParams {
            size: TableSize::try_from(size).unwrap(),
            seed: HashSeed::default(),
        })
    }

    /// A new agent on empty maps, building tables with `params`.
    fn with(params: MaglevParams) -> Self {
        let journal = Journal::default();
        let grace = ManualGrace::new(&journal);
        let tables = lb_tables::<V4>(100, 1000, 100, &journal);
        let r = Reconciler::adopt(tables, grace.clone(), Found::Created, params).unwrap();
        Self {
            journal,
            grace,
            r,
            params,
        }
    }

    /// The agent restarted with `params`: a new reconciler adopts what the
    /// maps hold (pinned maps outlive the agent).
    fn restart(&self, params: MaglevParams) -> Self {
        let journal = Journal::default();
        let grace = ManualGrace::new(&journal);
        let maps = self.r.maps();
        let mut tables = lb_tables::<V4>(100, 1000, 100, &journal);
        tables.frontends.content = maps.frontends().clone();
        tables.states.content = maps.states().clone();
        tables.slots.content = maps.slots().clone();
        tables.members.content = maps.members().clone();
        tables.backends.content = maps.backends().clone();
        tables.maglev.content = maps.maglev_table().content.clone();
        let r = Reconciler::adopt(tables, grace.clone(), Found::Pinned, params).unwrap();
        Self {
            journal,
            grace,
            r,
            params,
        }
    }

    /// The table the map holds for the frontend's live revision, as
    /// backend addresses.
    fn live_table(&self) -> Vec<SocketAddr> {
        self.live_table_of(&frontend())
    }

    /// The same for `fe`.
    fn live_table_of(&self, fe: &Frontend) -> Vec<SocketAddr> {
        let maps = self.r.maps();
        let (id, st) = maps.live(&key_of(fe)).unwrap();
        assert_ne!(st.flags & FE_F_MAGLEV, 0);
        let chunks = &maps.maglev_table().content;
        (0..st.maglev_size)
            .map(|i| {
                let key = MaglevKey {
                    fe_id: id,
                    rev: st.rev,
                    chunk: (i / MAGLEV_CHUNK as u32) as u16,
                };
                let backend_id = chunks[&key].backend_ids[i as usize % MAGLEV_CHUNK];
                let b = maps.backends()[&backend_id];
                SocketAddr::new(b.addr_be.into(), u16::from_be(b.port_be))
            })
            .collect()
    }

    fn expected(&self, backends: &[Backend]) -> Vec<SocketAddr> {
        let addrs: Vec<SocketAddr> = backends
            .iter()
            .map(|b| SocketAddr::new(b.ip, b.port))
            .collect();
        lookup_table(&addrs, self.params.size, &self.params.seed)
            .into_iter()
            .map(|i| addrs[i as usize])
            .collect()
    }

    fn chunk_count(&self) -> usize {
        self.r.maps().maglev_chunks().len()
    }
}

#[test]
fn each_revision_gets_its_table_before_its_state_publishes_it() {
    let mut t = Fixture::new(16381);
    let from = t.journal.len();
    let out = t.r.reconcile(&maglev(backends(3)));
    assert!(out.failed.is_empty(), "{out:?}");
    assert_eq!(t.live_table(), t.expected(&backends(3)));
    // 16,381 entries: 64 chunks, the last one partly used and zero after.
    assert_eq!(t.chunk_count(), 64);
    let last = t.r.maps().maglev_table().content.values().last().unwrap();
    assert!(
        last.backend_ids[16381 % MAGLEV_CHUNK..]
            .iter()
            .all(|id| *id == 0)
    );
    assert!(
        last.backend_ids[..16381 % MAGLEV_CHUNK]
            .iter()
            .all(|id| *id != 0)
    );
    // Every chunk is written before the state that names its revision.
    let (last_chunk, state) = t.journal.with_steps(from, |steps| {
        let pos = |name| {
            steps
                .iter()
                .rposition(|s| matches!(s, Step::Put(t, _) if *t == name))
        };
        (pos(MAGLEV4.name).unwrap(), pos(FE_STATE4.name).unwrap())
    });
    assert!(last_chunk < state);

    // Unchanged: nothing is written again.
    let out = t.r.reconcile(&maglev(backends(3)));
    assert_eq!(out.changed(), 0, "{out:?}");

    // One backend fewer: a new revision with its own table; the old one
    // stays until a grace period has passed.
    let out = t.r.reconcile(&maglev(backends(2)));
    assert!(out.failed.is_empty(), "{out:?}");
    assert_eq!(t.live_table(), t.expected(&backends(2)));
    assert_eq!(t.chunk_count(), 128);
    t.grace.elapse();
    t.r.reap();
    assert_eq!(t.chunk_count(), 64);

    // Removed: its tables go with its revisions.
    t.r.reconcile(&BTreeMap::new());
    t.grace.elapse();
    t.r.reap();
    assert_eq!(t.chunk_count(), 0);
}

#[test]
fn a_frontend_switched_between_algorithms_gets_a_new_revision() {
    let mut t = Fixture::new(251);
    t.r.reconcile(&maglev(backends(4)));
    assert_eq!(t.chunk_count(), 1);
    let random = BTreeMap::from([(frontend(), Target::plain(backends(4)))]);
    let out = t.r.reconcile(&random);
    assert!(out.failed.is_empty() && out.changed() > 0, "{out:?}");
    let (_, st) = t.r.maps().live(&key()).unwrap();
    assert_eq!((st.flags & FE_F_MAGLEV, st.maglev_size), (0, 0));
    t.grace.elapse();
    t.r.reap();
    assert_eq!(t.chunk_count(), 0);
}

#[test]
fn a_frontend_without_endpoints_has_no_table() {
    let mut t = Fixture::new(251);
    t.r.reconcile(&maglev(Vec::new()));
    assert_eq!(t.chunk_count(), 0);
    let (_, st) = t.r.maps().live(&key()).unwrap();
    assert_eq!((st.count, st.maglev_size), (0, 0));
}

#[test]
fn a_full_maglev_map_fails_the_frontend_and_leaves_no_chunk_behind() {
    let journal = Journal::default();
    let grace = ManualGrace::new(&journal);
    let mut tables = lb_tables::<V4>(100, 1000, 100, &journal);
    // Room for half a table of 16,381 entries.
    tables.maglev = super::mem::MemTable::hash(MAGLEV4.name, 32, &journal);
    let mut r = Reconciler::adopt(tables, grace, Found::Created, MaglevParams::default()).unwrap();
    let out = r.reconcile(&maglev(backends(2)));
    assert_eq!(out.failed.len(), 1, "{out:?}");
    assert!(r.maps().maglev_chunks().is_empty());
    assert!(r.maps().slots().is_empty());
    assert!(r.maps().frontends().is_empty());
}

/// A restarted agent adopts the pinned maps. With another seed it builds
/// other tables, so it rebuilds every table it finds (a new revision each,
/// the old one retired): it then agrees with an agent that started
/// afresh with that seed, as on a node that rebooted. The seed's flow words
/// build no table: with only those changed, nothing is rewritten.
#[test]
fn a_restart_with_another_seed_rebuilds_every_table() {
    let mut t = Fixture::new(251);
    let (a, b, c) = (frontend_at(30080), frontend_at(30081), frontend_at(30082));
    let desired = BTreeMap::from([
        (a, maglev(backends(3)).remove(&frontend()).unwrap()),
        (b, maglev(backends(3)).remove(&frontend()).unwrap()),
        (c, maglev(backends(5)).remove(&frontend()).unwrap()),
        (frontend_at(80), Target::plain(backends(2))),
    ]);
    let out = t.r.reconcile(&desired);
    assert!(out.failed.is_empty(), "{out:?}");
    let revs = |t: &Fixture| -> Vec<u16> {
        [a, b, c]
            .iter()
            .map(|fe| t.r.maps().live(&key_of(fe)).unwrap().1.rev)
            .collect()
    };
    let before = revs(&t);

    // The same settings: nothing to write.
    let mut same = t.restart(t.params);
    let out = same.r.reconcile(&desired);
    assert_eq!(out.changed(), 0, "{out:?}");
    // Other flow words, the same permutation word: the same tables.
    let flow_only = MaglevParams {
        seed: HashSeed {
            flow: [1, 2],
            ..t.params.seed
        },
        ..t.params
    };
    let out = t.restart(flow_only).r.reconcile(&desired);
    assert_eq!(out.changed(), 0, "{out:?}");

    let seed: HashSeed = "AAECAwQFBgcICQoL".parse().unwrap();
    assert_ne!(seed.permutation, t.params.seed.permutation);
    let params = MaglevParams { seed, ..t.params };
    let mut restarted = t.restart(params);
    let out = restarted.r.reconcile(&desired);
    assert!(out.failed.is_empty(), "{out:?}");
    let mut fresh = Fixture::with(params);
    fresh.r.reconcile(&desired);
    // Entries of two tables that name different backends.
    let differ = |x: &[SocketAddr], y: &[SocketAddr]| -> usize {
        assert_eq!(x.len(), y.len());
        x.iter().zip(y).filter(|(p, q)| p != q).count()
    };
    for (fe, n) in [(a, 3), (b, 3), (c, 5)] {
        let table = restarted.live_table_of(&fe);
        let (new, old) = (restarted.expected(&backends(n)), t.expected(&backends(n)));
        assert!(
            differ(&new, &old) > 100,
            "{fe}: the seeds build other tables"
        );
        assert_eq!(
            (
                differ(&table, &new),
                differ(&table, &fresh.live_table_of(&fe))
            ),
            (0, 0),
            "{fe}: entries unlike the new seed's table, and unlike a new node's"
        );
    }
    let after = revs(&restarted);
    assert!(
        before.iter().zip(&after).all(|(x, y)| x != y),
        "{before:?} -> {after:?}"
    );
    // The old tables go a grace period later: one table per frontend is
    // left (251 entries, one chunk), and the next pass writes nothing.
    assert_eq!(restarted.chunk_count(), 6);
    restarted.grace.elapse();
    restarted.r.reap();
    assert_eq!(restarted.chunk_count(), 3);
    let out = restarted.r.reconcile(&desired);
    assert_eq!(out.changed(), 0, "{out:?}");
}

/// Weighted backends: the Maglev table and the random-selection slots in
/// proportion to the weights, one member per backend (session affinity),
/// and a change of weight alone is a new revision.
#[test]
fn weights_shape_the_table_and_the_slots_and_a_new_weight_is_a_new_revision() {
    use lb_common::FE_F_AFFINITY;
    let mut t = Fixture::new(4093);
    let weighted = |weights: Vec<u16>| {
        BTreeMap::from([(
            frontend(),
            Target {
                maglev: true,
                affinity: Some(60),
                weights,
                ..Target::plain(backends(3))
            },
        )])
    };
    let out = t.r.reconcile(&weighted(vec![1, 3, 4]));
    assert!(out.failed.is_empty(), "{out:?}");
    let table = t.live_table();
    let share = |i: usize| {
        let b = &backends(3)[i];
        let owned = table.iter().filter(|a| a.ip() == b.ip).count();
        owned as f64 / table.len() as f64
    };
    for (i, want) in [(0, 1.0 / 8.0), (1, 3.0 / 8.0), (2, 4.0 / 8.0)] {
        assert!((share(i) - want).abs() < 0.01, "backend {i}: {}", share(i));
    }
    let maps = t.r.maps();
    let (id, st) = maps.live(&key()).unwrap();
    assert_ne!(st.flags & FE_F_AFFINITY, 0);
    // Slots 1 : 3 : 4, each backend's together; a member each.
    let slots: Vec<u32> = maps
        .slots()
        .iter()
        .filter(|(k, _)| (k.fe_id, k.rev) == (id, st.rev))
        .map(|(_, s)| s.backend_id)
        .collect();
    assert_eq!(st.count, 8);
    let mut runs = slots.clone();
    runs.dedup();
    assert_eq!(runs.len(), 3, "{slots:?}");
    let counts: Vec<usize> = runs
        .iter()
        .map(|r| slots.iter().filter(|s| *s == r).count())
        .collect();
    assert_eq!(counts, [1, 3, 4]);
    let members: Vec<u32> = maps
        .members()
        .keys()
        .filter(|k| (k.fe_id, k.rev) == (id, st.rev))
        .map(|k| k.backend_id)
        .collect();
    assert_eq!(members.len(), 3, "{members:?}");

    // The same weights again: nothing; another weight: a new revision.
    assert_eq!(t.r.reconcile(&weighted(vec![1, 3, 4])).changed(), 0);
    let out = t.r.reconcile(&weighted(vec![1, 1, 2]));
    assert!(out.failed.is_empty() && out.changed() > 0, "{out:?}");
    let (_, st) = t.r.maps().live(&key()).unwrap();
    assert_eq!(st.count, 4);
}
