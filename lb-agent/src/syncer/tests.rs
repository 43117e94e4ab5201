//! The syncer over in-memory tables: what it counts, retries, repairs and
//! remembers.

use std::time::{Duration, Instant};

use super::{
    retries::{RETRY_FIRST, RETRY_MAX},
    *,
};
use lb_fixtures::{Ep, Slice, Svc};

use crate::model::maglev::MaglevParams;

use crate::{
    model::{Feature, ObjectKind},
    reconcile::{
        Found, LbView, SlotView, SourceRangeKey, Table as _, V4, V6,
        mem::{Journal, ManualGrace, Mem, MemSettings, lb_tables},
    },
};

/// Service `name` in `default` on `vip`, port `http` 80.
fn service(name: &str, vip: &str) -> Svc {
    Svc::new("default", name)
        .cluster_ip(vip)
        .port("http", 80, "TCP")
}

/// Slice `name` of Service `service`, port `http` 8080, `ips` ready.
fn slice(name: &str, service: &str, ips: &[&str]) -> EndpointSlice {
    Slice::new("default", name)
        .service(service)
        .port("http", 8080, "TCP")
        .ready(ips)
        .build()
}

fn deleted(name: &str) -> Change {
    Change::ServiceDeleted {
        namespace: "default".into(),
        name: name.into(),
    }
}

/// A syncer over in-memory maps holding at most `frontends` frontends,
/// with nothing to wait for before the first sync (as from files).
fn syncer(
    frontends: u32,
) -> (
    Syncer<Mem, ManualGrace, MemSettings>,
    Arc<Shared>,
    ManualGrace,
) {
    syncer_waiting(frontends, NodeWait::none())
}

/// [`syncer`] whose first sync waits for this node's Node as `node_wait`
/// says.
fn syncer_waiting(
    frontends: u32,
    node_wait: NodeWait,
) -> (
    Syncer<Mem, ManualGrace, MemSettings>,
    Arc<Shared>,
    ManualGrace,
) {
    let journal = Journal::default();
    let grace = ManualGrace::new(&journal);
    let reconciler = DualReconciler::adopt(
        lb_tables::<V4>(frontends, 1024, 1024, &journal),
        lb_tables::<V6>(frontends, 1024, 1024, &journal),
        grace.clone(),
        Found::Created,
        MaglevParams::default(),
    )
    .unwrap();
    let shared = Arc::new(Shared::default());
    let excluded = ExcludedCidrs::parse(["10.244.0.0/16"]).unwrap();
    (
        Syncer::new(
            reconciler,
            MemSettings::default(),
            excluded,
            NodeContext::named("node-a"),
            node_wait,
            NodePortAddresses::default(),
            shared.clone(),
        ),
        shared,
        grace,
    )
}

/// Streams both complete lists, as the sources do.
fn list(
    s: &mut Syncer<Mem, ManualGrace, MemSettings>,
    services: Vec<Svc>,
    slices: Vec<EndpointSlice>,
    now: Instant,
) {
    let services = services
        .into_iter()
        .map(|svc| Change::Service(Box::new(svc.build())));
    let slices = slices.into_iter().map(|sl| Change::Slice(Box::new(sl)));
    let changes = [Change::Relist(ListKind::Services)]
        .into_iter()
        .chain(services)
        .chain([
            Change::Listed(ListKind::Services),
            Change::Relist(ListKind::Slices),
        ])
        .chain(slices)
        .chain([Change::Listed(ListKind::Slices)]);
    for c in changes {
        s.apply(c, now);
    }
}

#[test]
fn a_streamed_relist_takes_items_as_they_come_and_deletes_only_at_its_end() {
    let (mut s, e, _) = syncer(64);
    let now = Instant::now();
    let svc = |name, vip| Change::Service(Box::new(service(name, vip).build()));
    let programmed = || e.metrics.services_programmed.get();
    for c in [
        Change::Relist(ListKind::Services),
        svc("a", "10.96.0.1"),
        svc("b", "10.96.0.2"),
        Change::Listed(ListKind::Services),
        Change::Relist(ListKind::Slices),
        Change::Slice(Box::new(slice("a-1", "a", &["10.0.0.1"]))),
    ] {
        s.apply(c, now);
    }
    assert!(s.sync(now).is_none(), "the slices are still being listed");
    s.apply(Change::Listed(ListKind::Slices), now);
    assert!(s.sync(now).unwrap().full);
    assert_eq!(programmed(), 2.0);

    // A relist that restarts (the watch began it again) forgets what its
    // first try named; until it ends, nothing is deleted.
    for c in [
        Change::Relist(ListKind::Services),
        svc("x", "10.96.0.9"),
        Change::Relist(ListKind::Services),
        svc("b", "10.96.0.2"),
    ] {
        s.apply(c, now);
    }
    s.sync(now).unwrap();
    assert_eq!(programmed(), 3.0, "a, b and x until the list ends");
    s.apply(Change::Listed(ListKind::Services), now);
    assert!(s.sync(now).unwrap().full);
    assert_eq!(programmed(), 1.0, "only b was listed");

    // An end without a beginning judges nothing.
    s.apply(Change::Listed(ListKind::Services), now);
    s.sync(now);
    assert_eq!(programmed(), 1.0);
}

#[test]
fn services_programmed_counts_only_services_with_entries_in_the_maps() {
    let (mut s, e, _) = syncer(64);
    let now = Instant::now();
    let services = vec![
        service("a", "10.96.0.1"),
        // Every endpoint excluded: left to its own CNI, nothing in the maps.
        service("b", "10.96.0.2"),
        // Claims a's frontend and loses it (a sorts first).
        service("c", "10.96.0.1"),
        // No endpoints: programmed to refuse, so it is in the maps.
        service("d", "10.96.0.4"),
    ];
    let slices = vec![
        slice("a-1", "a", &["10.0.0.1"]),
        slice("b-1", "b", &["10.244.0.1"]),
        slice("c-1", "c", &["10.0.0.3"]),
    ];
    list(&mut s, services, slices, now);
    s.sync(now).unwrap();
    assert_eq!(e.metrics.services_programmed.get(), 2.0, "a and d");

    // a gone: c takes its frontend over.
    s.apply(deleted("a"), now);
    s.sync(now).unwrap();
    assert_eq!(e.metrics.services_programmed.get(), 2.0, "c and d");
    assert_eq!(
        s.owners
            .services()
            .map(|o| &*o.name)
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["c", "d"])
    );
}

#[test]
fn a_tick_runs_what_is_due_and_wakes_for_the_earliest_timer() {
    let (mut s, _, grace) = syncer(64);
    let minute = Duration::from_secs(60);
    s.prune_every(Some(minute));
    let t0 = Instant::now();
    // Before the lists nothing runs; the first prune is a period away.
    let tick = s.tick(t0);
    assert!(tick.pruned.is_none() && tick.synced.is_none());
    assert_eq!(tick.wake, Some(t0 + minute));
    list(
        &mut s,
        vec![service("a", "10.96.0.1")],
        vec![slice("a-1", "a", &["10.0.0.1"])],
        t0,
    );
    let tick = s.tick(t0);
    assert!(tick.synced.is_some() && tick.pruned.is_none());
    assert_eq!(tick.wake, Some(t0 + minute));
    // New endpoints retire the old revision: a reap is due soon, and a
    // prune cannot run until it is done, so it is tried again soon.
    s.apply(
        Change::Slice(Box::new(slice("a-1", "a", &["10.0.0.2"]))),
        t0,
    );
    let tick = s.tick(t0);
    assert!(tick.synced.is_some());
    let soon = tick.wake.expect("a reap is due");
    assert!(soon <= Instant::now() + Duration::from_millis(50));
    let due = t0 + minute;
    let tick = s.tick(due);
    assert!(tick.pruned.is_none(), "not while a revision retires");
    assert_eq!(
        tick.wake.map(|w| w <= due + Duration::from_secs(1)),
        Some(true)
    );
    grace.elapse();
    let retry = due + Duration::from_secs(1);
    let tick = s.tick(retry);
    let pruned = tick.pruned.expect("the prune runs once nothing retires");
    assert!(pruned.full);
    // Once it ran, the next is a whole period away.
    assert_eq!(tick.wake, Some(retry + minute));
}

#[test]
fn failed_frontends_are_retried_with_exponential_backoff() {
    // Room for one Service's two frontends (its port and its wildcard): the
    // second Service's writes fail.
    let (mut s, e, grace) = syncer(2);
    let t0 = Instant::now();
    let services = vec![service("a", "10.96.0.1"), service("b", "10.96.0.2")];
    list(&mut s, services, Vec::new(), t0);
    let first = s.sync(t0).unwrap();
    assert_eq!(first.outcome.failed.len(), 2);
    assert_eq!(s.failing(), 2);
    assert_eq!(s.next_retry(), Some(t0 + RETRY_FIRST));
    // Nothing due before the backoff has passed.
    assert!(s.sync(t0 + RETRY_FIRST / 2).is_none());
    let mut at = t0;
    for backoff in [1, 2, 4, 8] {
        at += Duration::from_secs(backoff);
        let retried = s.sync(at).expect("a retry is due");
        assert_eq!(retried.frontends, 2);
        assert_eq!(s.next_retry(), Some(at + Duration::from_secs(backoff * 2)));
    }
    // Counted once per frontend, not per attempt.
    assert_eq!(e.metrics.map_full_errors.get(), 2);
    assert_eq!(e.metrics.frontends_waiting_for_room.get(), 2.0);
    // Capped.
    for _ in 0..10 {
        at = s.next_retry().unwrap();
        s.sync(at).unwrap();
    }
    assert_eq!(s.next_retry(), Some(at + RETRY_MAX));
    // The holder of the room leaving makes the waiting frontends due at
    // once, not at the end of their backoff.
    s.apply(deleted("a"), at);
    s.sync(at).unwrap();
    grace.elapse();
    s.reap();
    let freed = s.next_retry().expect("b still waits");
    assert!(freed < at + Duration::from_secs(1), "due when room freed");
    s.sync(freed).unwrap();
    assert_eq!(s.failing(), 0);
    assert_eq!(e.metrics.services_programmed.get(), 1.0);
    assert_eq!(e.metrics.frontends_waiting_for_room.get(), 0.0);
    assert_eq!(e.metrics.map_full_errors.get(), 2);
}

#[test]
fn a_deleting_sync_makes_frontends_waiting_for_room_due() {
    // Frontends removed without a grace period (a Service without
    // endpoints has no revision to retire) free room in the sync itself.
    let (mut s, e, _) = syncer(2);
    let t0 = Instant::now();
    let services = vec![service("a", "10.96.0.1"), service("b", "10.96.0.2")];
    list(&mut s, services, Vec::new(), t0);
    s.sync(t0).unwrap();
    assert_eq!(s.failing(), 2);
    let at = t0 + Duration::from_millis(10);
    s.apply(deleted("a"), at);
    let sync = s.sync(at).unwrap();
    assert!(sync.outcome.deleted > 0);
    assert_eq!(s.next_retry(), Some(at));
    s.sync(at).unwrap();
    assert_eq!(s.failing(), 0);
    assert_eq!(e.metrics.frontends_waiting_for_room.get(), 0.0);
}

#[test]
fn with_room_for_one_more_frontend_a_services_port_goes_before_its_wildcard() {
    // A Service removed frees its wildcard at once and its port after the
    // grace period: a waiting Service then finds room for one frontend.
    // It must be its port; its wildcard alone would refuse the port. Here
    // the room is short from the start.
    let (mut s, _, _) = syncer(3);
    let t0 = Instant::now();
    let services = vec![service("a", "10.96.0.1"), service("b", "10.96.0.2")];
    let slices = vec![
        slice("a-1", "a", &["10.0.0.1"]),
        slice("b-1", "b", &["10.0.0.2"]),
    ];
    list(&mut s, services, slices, t0);
    s.sync(t0).unwrap();
    let vip = "10.96.0.2".parse().unwrap();
    let port = Frontend {
        vip,
        port: 80,
        proto: Proto::Tcp,
        scope: Scope::Internal,
    };
    assert!(s.reconciler.has(&port));
    assert!(!s.reconciler.has(&Frontend::wildcard(vip)));
    assert_eq!(s.failing(), 1, "the wildcard waits for room");
}

#[test]
fn prune_repairs_an_entry_deleted_behind_the_agents_back() {
    let (mut s, _, grace) = syncer(64);
    let now = Instant::now();
    let services = vec![service("a", "10.96.0.1")];
    list(
        &mut s,
        services,
        vec![slice("a-1", "a", &["10.0.0.1", "10.0.0.2"])],
        now,
    );
    s.sync(now).unwrap();
    let before = s.reconciler.view();
    // The port's entry (the wildcard has no revision to orphan).
    let key = *s
        .reconciler
        .v4()
        .maps()
        .frontends()
        .keys()
        .find(|k| k.port_be != 0)
        .unwrap();
    s.reconciler
        .v4_mut()
        .maps_mut()
        .frontends_table_mut()
        .delete(&[key])
        .unwrap();
    // Nothing pending: a plain sync does not see the drift.
    assert!(s.sync(now).is_none());
    let pruned = s.prune(now).expect("prune runs when nothing is retiring");
    assert!(pruned.full && pruned.outcome.changed() > 0, "{pruned:?}");
    assert!(pruned.outcome.failed.is_empty());
    // What a program sees is back: the same frontends, live, with the
    // same backends (ids and revisions are new).
    let seen = |v: &LbView| {
        v.frontends
            .iter()
            .map(|f| {
                let backends: Vec<_> = f
                    .slots
                    .iter()
                    .map(|s| match s {
                        SlotView::Backend { addr, port, .. } => Some((*addr, *port)),
                        _ => None,
                    })
                    .collect();
                (f.addr, f.port, f.proto, f.live, backends)
            })
            .collect::<Vec<_>>()
    };
    // The port and the address's wildcard (sorted first: port 0).
    assert_eq!(before.frontends.len(), 2);
    assert_eq!(before.frontends[1].slots.len(), 2);
    assert_eq!(seen(&s.reconciler.view()), seen(&before));
    assert!(s.reconciler.has(&Frontend {
        vip: "10.96.0.1".parse().unwrap(),
        port: 80,
        proto: Proto::Tcp,
        scope: Scope::Internal,
    }));
    // Not while revisions wait for their grace period; then, with nothing
    // drifted, a prune changes nothing.
    assert!(s.retiring(), "the repair retires the orphaned revision");
    assert!(s.prune(now).is_none());
    grace.elapse();
    s.reap();
    assert_eq!(s.prune(now).unwrap().outcome.changed(), 0);
}

#[test]
fn what_was_logged_is_forgotten_with_its_service_and_counted_once() {
    let (mut s, e, _) = syncer(64);
    let now = Instant::now();
    let external = || {
        service("a", "10.96.0.1")
            .type_("LoadBalancer")
            .lb_ingress_ip("192.0.2.1")
            .source_ranges(&["198.51.100.0/24"])
    };
    let slices = vec![slice("a-1", "a", &["10.0.0.1", "10.244.0.9"])];
    list(&mut s, vec![external()], slices, now);
    s.sync(now).unwrap();
    // The same Service again: nothing new to report.
    s.apply(Change::Service(Box::new(external().build())), now);
    s.sync(now).unwrap();
    assert_eq!(
        e.metrics
            .unsupported(Feature::LoadBalancerSourceRanges)
            .get(),
        1
    );
    assert_eq!(e.metrics.excluded_endpoints.get(), 1);
    assert_eq!(s.reports.entries(), (1, 0));
    s.apply(deleted("a"), now);
    s.sync(now).unwrap();
    assert_eq!(s.reports.entries(), (0, 0));
    assert!(s.owners.is_empty());
    assert_eq!(e.metrics.invalid(ObjectKind::Service).get(), 0);
}

#[test]
fn udp_serving_follows_every_sync_and_forgets_gone_frontends() {
    let (mut s, _, _) = syncer(64);
    let now = Instant::now();
    let udp = |ips: &[&str]| {
        Slice::new("default", "dns-1")
            .service("dns")
            .port("dns", 5353, "UDP")
            .ready(ips)
            .build()
    };
    let dns = Svc::new("default", "dns")
        .cluster_ip("10.96.0.10")
        .port("dns", 53, "UDP");
    list(&mut s, vec![dns], vec![udp(&["10.0.0.1", "10.0.0.2"])], now);
    s.sync(now).unwrap();
    let live = s.udp_serving();
    let fe: SocketAddr = "10.96.0.10:53".parse().unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    assert!(live.serves(&fe, ip("10.0.0.1")) && live.serves(&fe, ip("10.0.0.2")));
    assert!(s.take_stale().is_empty(), "nothing stopped serving");

    // 10.0.0.1 leaves: its sockets are stale, and stay stale for a pass
    // that runs late.
    s.apply(Change::Slice(Box::new(udp(&["10.0.0.2"]))), now);
    s.sync(now).unwrap();
    assert!(!live.serves(&fe, ip("10.0.0.1")));
    assert_eq!(s.take_stale().len(), 1);
    // It comes back before the pass runs: the pass must spare it.
    s.apply(Change::Slice(Box::new(udp(&["10.0.0.1", "10.0.0.2"]))), now);
    s.sync(now).unwrap();
    assert!(live.serves(&fe, ip("10.0.0.1")));
    assert!(s.take_stale().is_empty(), "an addition makes nothing stale");

    s.apply(deleted("dns"), now);
    s.sync(now).unwrap();
    assert_eq!(live.frontends(), 0, "a gone frontend serves nothing");
    assert_eq!(s.take_stale().len(), 1);
}

#[test]
fn source_ranges_are_written_when_they_change_new_ones_before_old_ones_go() {
    let (mut s, _, _) = syncer(64);
    let now = Instant::now();
    let lb = |ranges: &[&str]| {
        Svc::new("default", "lb")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.9")
            .lb_ingress_ip("192.0.2.9")
            .source_ranges(ranges)
            .port("http", 80, "TCP")
    };
    let ep = || slice("lb-1", "lb", &["10.0.0.1"]);
    list(&mut s, vec![lb(&["198.51.100.0/24"])], vec![ep()], now);
    s.sync(now).unwrap();
    // Nothing written before the first sync's call; an earlier agent's
    // entries would be reconciled by it.
    assert!(s.write_source_ranges().unwrap());
    let keys = |s: &Syncer<Mem, ManualGrace, MemSettings>| {
        s.settings()
            .store()
            .ranges
            .iter()
            .map(|key| match key {
                SourceRangeKey::V4(len, r) => (*len, r.addr_be, r.src_be),
                SourceRangeKey::V6(..) => panic!("an IPv6 range of an IPv4 VIP: {key:?}"),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&s), [(64 + 24, [192, 0, 2, 9], [198, 51, 100, 0])]);
    // Unchanged: nothing written.
    assert!(!s.write_source_ranges().unwrap());

    list(&mut s, vec![lb(&["203.0.113.0/25"])], vec![ep()], now);
    s.sync(now).unwrap();
    assert!(s.write_source_ranges().unwrap());
    assert_eq!(keys(&s), [(64 + 25, [192, 0, 2, 9], [203, 0, 113, 0])]);
    assert_eq!(s.settings().store().writes, [2, 1]);
}

#[test]
fn address_bits_are_set_for_every_frontend_address_and_cleared_once_none_is_left() {
    let (mut s, _, _) = syncer(64);
    let now = Instant::now();
    let bit = |s: &Syncer<Mem, ManualGrace, MemSettings>, ip: [u8; 4]| {
        let (word, mask) = lb_common::addr_bit4(ip);
        s.settings()
            .store()
            .address_words
            .get(&word)
            .copied()
            .unwrap_or(0)
            & mask
            != 0
    };
    list(
        &mut s,
        vec![service("a", "10.96.0.1"), service("b", "10.96.0.2")],
        vec![
            slice("a-1", "a", &["10.0.0.1"]),
            slice("b-1", "b", &["10.0.0.2"]),
        ],
        now,
    );
    s.sync(now).unwrap();
    assert!(bit(&s, [10, 96, 0, 1]) && bit(&s, [10, 96, 0, 2]));
    assert_eq!(
        s.settings().store().address_words.len(),
        lb_common::ADDR_WORDS as usize,
        "the first write is whole"
    );

    // b's frontends gone from the maps: its bit goes (unless a's shares it).
    s.apply(deleted("b"), now);
    s.sync(now).unwrap();
    assert!(bit(&s, [10, 96, 0, 1]));
    let (wa, ma) = lb_common::addr_bit4([10, 96, 0, 1]);
    let (wb, mb) = lb_common::addr_bit4([10, 96, 0, 2]);
    if (wa, ma) != (wb, mb) {
        assert!(!bit(&s, [10, 96, 0, 2]));
    }
    // A new Service's bit is set by the sync that writes its frontends.
    s.apply(
        Change::Service(Box::new(service("c", "10.96.0.3").build())),
        now,
    );
    s.sync(now).unwrap();
    assert!(bit(&s, [10, 96, 0, 3]));
}

/// Service `zoned` (10.96.0.9) with one endpoint hinted for each of
/// zone-a and zone-b.
fn zoned() -> (Svc, EndpointSlice) {
    let hinted = |ip: &str, zone: &str| Ep::new(ip).ready(true).zone(zone).hint_zone(zone);
    let slice = Slice::new("default", "zoned-1")
        .service("zoned")
        .port("http", 8080, "TCP")
        .endpoints([hinted("10.0.9.1", "zone-a"), hinted("10.0.9.2", "zone-b")])
        .build();
    (service("zoned", "10.96.0.9"), slice)
}

/// The backends the maps give the frontend on port 80.
fn port_80_backends(s: &Syncer<Mem, ManualGrace, MemSettings>) -> BTreeSet<IpAddr> {
    let view = s.view();
    let fe = view
        .frontends
        .iter()
        .find(|f| f.port == 80)
        .expect("the port is programmed");
    fe.slots
        .iter()
        .map(|slot| match slot {
            SlotView::Backend { addr, .. } => *addr,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn node_in(zone: &str) -> Change {
    Change::Node(crate::source::NodeFacts {
        zone: Some(zone.into()),
        primary_ips: Vec::new(),
    })
}

#[test]
fn the_first_sync_waits_for_this_nodes_node_and_programs_its_zone() {
    let (mut s, e, _) = syncer_waiting(64, NodeWait::new(NODE_WAIT));
    let t0 = Instant::now();
    let (svc, slice) = zoned();
    list(&mut s, vec![svc], vec![slice], t0);
    assert!(s.sync(t0).is_none(), "the lists are in, the Node is not");
    assert_eq!(s.node_wait_until(), Some(t0 + NODE_WAIT));
    let t1 = t0 + NODE_WAIT / 2;
    assert!(s.sync(t1).is_none());
    s.apply(node_in("zone-a"), t1);
    let first = s.sync(t1).expect("the Node is in");
    assert!(first.full);
    assert_eq!(
        port_80_backends(&s),
        BTreeSet::from(["10.0.9.1".parse().unwrap()]),
        "the first sync already picks this zone's endpoint"
    );
    assert_eq!(s.node_wait_until(), None);
    assert_eq!(e.metrics.node_missing.get(), 0.0);
}

#[test]
fn past_the_bound_the_first_sync_goes_without_the_node_until_it_arrives() {
    let (mut s, e, _) = syncer_waiting(64, NodeWait::new(NODE_WAIT));
    let t0 = Instant::now();
    let (svc, slice) = zoned();
    list(&mut s, vec![svc], vec![slice], t0);
    assert!(s.sync(t0).is_none(), "the wait begins");
    assert!(s.sync(t0 + NODE_WAIT - Duration::from_millis(1)).is_none());
    let at = t0 + NODE_WAIT;
    s.sync(at).expect("the bound has passed");
    assert_eq!(
        port_80_backends(&s),
        BTreeSet::from(["10.0.9.1".parse().unwrap(), "10.0.9.2".parse().unwrap()]),
        "no zone: every endpoint"
    );
    assert_eq!(e.metrics.node_missing.get(), 1.0);
    // It arrives: its zone applies at the next sync, and the gauge clears.
    s.apply(node_in("zone-b"), at);
    s.sync(at).expect("the zone changed");
    assert_eq!(
        port_80_backends(&s),
        BTreeSet::from(["10.0.9.2".parse().unwrap()])
    );
    assert_eq!(e.metrics.node_missing.get(), 0.0);
}

#[test]
fn a_node_the_apiserver_refuses_to_show_is_not_waited_for() {
    let (mut s, e, _) = syncer_waiting(64, NodeWait::new(NODE_WAIT));
    let t0 = Instant::now();
    let (svc, slice) = zoned();
    list(&mut s, vec![svc], vec![slice], t0);
    assert!(s.sync(t0).is_none());
    s.apply(Change::NodeRefused("HTTP 403: forbidden".into()), t0);
    s.sync(t0).expect("no wait for what cannot be read");
    assert_eq!(port_80_backends(&s).len(), 2);
    assert_eq!(e.metrics.node_missing.get(), 1.0);
}

/// Node `name`'s networks.
fn networks(name: &str, addresses: &[&str], pod_cidrs: &[&str]) -> Change {
    Change::NodeNetworks(crate::source::NodeNetworks {
        name: name.into(),
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        pod_cidrs: pod_cidrs.iter().map(|c| c.parse().unwrap()).collect(),
    })
}

/// `LB4_NODE_NETS` as the in-memory store holds it.
fn node_nets(s: &Syncer<Mem, ManualGrace, MemSettings>) -> BTreeMap<String, u32> {
    s.settings()
        .store()
        .node_nets
        .iter()
        .map(|(net, n)| (net.to_string(), *n))
        .collect()
}

fn nets(list: &[(&str, u32)]) -> BTreeMap<String, u32> {
    list.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

#[test]
fn node_networks_follow_the_nodes_and_the_dsr_endpoints_and_a_heartbeat_writes_nothing() {
    let (mut s, shared, _) = syncer(64);
    let now = Instant::now();
    let lb = Svc::new("default", "lb")
        .type_("LoadBalancer")
        .cluster_ip("10.96.0.9")
        .lb_ingress_ip("192.0.2.9")
        .annotation(crate::model::FORWARDING_MODE_ANNOTATION, "dsr")
        .port("http", 80, "TCP");
    let eps = |ips: &[(&str, &str)]| {
        Slice::new("default", "lb-1")
            .service("lb")
            .port("http", 8080, "TCP")
            .endpoints(
                ips.iter()
                    .map(|(ip, node)| Ep::new(ip).ready(true).node(node)),
            )
            .build()
    };
    let both = eps(&[("10.1.0.5", "node-b"), ("10.2.0.7", "node-a")]);
    list(&mut s, vec![lb.clone()], vec![both.clone()], now);
    for c in [
        Change::Relist(ListKind::Nodes),
        networks("node-a", &["192.0.2.1"], &["10.2.0.0/24"]),
        networks("node-b", &["192.0.2.2", "fd00::2"], &[]),
        Change::Listed(ListKind::Nodes),
    ] {
        s.apply(c, now);
    }
    s.sync(now).unwrap();
    assert!(s.write_node_nets().unwrap());
    // node-b has no pod CIDR: its endpoint has an entry of its own;
    // node-a's is in its CIDR.
    assert_eq!(
        node_nets(&s),
        nets(&[
            ("10.1.0.5/32", 2),
            ("10.2.0.0/24", 1),
            ("192.0.2.1/32", 1),
            ("192.0.2.2/32", 2),
            ("fd00::2/128", 2),
        ])
    );
    assert_eq!(shared.metrics.node_networks.get(), 5.0);
    assert!(!s.write_node_nets().unwrap(), "nothing changed");

    // A heartbeat: nothing pending, nothing written.
    s.apply(networks("node-b", &["192.0.2.2", "fd00::2"], &[]), now);
    assert!(!s.pending(now));
    // node-b gets its pod CIDR: its endpoint's entry goes, after the CIDR
    // came.
    s.apply(
        networks("node-b", &["192.0.2.2", "fd00::2"], &["10.1.0.0/24"]),
        now,
    );
    assert!(s.pending(now));
    s.sync(now).unwrap();
    let ops = s.settings().store().node_net_ops.len();
    assert!(s.write_node_nets().unwrap());
    let op = |insert, net: &str| (insert, net.parse::<IpNet>().unwrap());
    assert_eq!(
        s.settings().store().node_net_ops[ops..],
        [op(true, "10.1.0.0/24"), op(false, "10.1.0.5/32")]
    );

    // A relist that no longer names node-a: its Node's entries go; its
    // endpoint, named by the slice, keeps it placed (and numbered).
    for c in [
        Change::Relist(ListKind::Nodes),
        networks("node-b", &["192.0.2.2", "fd00::2"], &["10.1.0.0/24"]),
        Change::Listed(ListKind::Nodes),
    ] {
        s.apply(c, now);
    }
    s.sync(now).unwrap();
    assert!(s.write_node_nets().unwrap());
    assert_eq!(
        node_nets(&s),
        nets(&[
            ("10.1.0.0/24", 2),
            ("10.2.0.7/32", 1),
            ("192.0.2.2/32", 2),
            ("fd00::2/128", 2),
        ])
    );

    // The Service forwards by SNAT now: its endpoints' entries go.
    list(
        &mut s,
        vec![lb.annotation(crate::model::FORWARDING_MODE_ANNOTATION, "snat")],
        vec![both],
        now,
    );
    s.sync(now).unwrap();
    assert!(s.write_node_nets().unwrap());
    assert_eq!(
        node_nets(&s),
        nets(&[("10.1.0.0/24", 2), ("192.0.2.2/32", 2), ("fd00::2/128", 2)])
    );
    // node-b is deleted.
    s.apply(Change::NodeNetworksDeleted("node-b".into()), now);
    s.apply(Change::NodeNetworksDeleted("node-b".into()), now);
    s.sync(now).unwrap();
    assert!(s.write_node_nets().unwrap());
    assert!(node_nets(&s).is_empty());
    assert_eq!(shared.metrics.node_networks.get(), 0.0);
}
