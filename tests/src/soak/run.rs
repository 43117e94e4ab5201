//! One soak run: set up the bed, 50 Services and their pods, the agent and
//! the clients; run the tasks until the time is up and every change is
//! programmed; collect what everyone saw.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{
    clients::Clients,
    converge::{Kind, Tracker, Want},
    cx::{AgentLife, Counts, Cx, Life, after},
    observe::Observer,
    outcome::{Kernel, Results},
    plan::{Mode, Plan, draw},
    pods::Pods,
    tasks::{Next, Task},
    tracks::{AgentTrack, ApiTrack, WorkloadTrack},
    wire::{Phase, now_ns},
    world::{Cond, Endpoint, World},
};
use crate::{
    agent::agent_bin,
    apiserver::{ApiServer, Verb},
    maps,
    scenario::Bed,
    snmp::Snapshot,
};

/// The second client pod's address (the first is the bed's, 10.0.0.2).
const CLIENT2_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);
/// How long the agent gets to program what the run left pending: after a
/// long outage its watch backoff (30 s, jittered up to 60 s) may still be
/// running.
const SETTLE: Duration = Duration::from_secs(120);

fn interrupted(stop: &AtomicBool) -> anyhow::Result<()> {
    anyhow::ensure!(!stop.load(Ordering::SeqCst), "interrupted");
    Ok(())
}

/// Sleeps `d`, in steps that notice `stop`.
fn nap(d: Duration, stop: &AtomicBool) -> anyhow::Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        interrupted(stop)?;
        std::thread::sleep(
            until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
    }
    Ok(())
}

/// Runs a soak of `plan` from `seed`. Everything it creates is removed
/// when it returns, also on error (drops), and when `stop` is set (Ctrl-C)
/// it returns at the next step.
pub fn run(plan: Plan, seed: u64, stop: &AtomicBool) -> anyhow::Result<Results> {
    crate::require_root();
    let mut seeds = fastrand::Rng::with_seed(seed);
    let mut track_rng = || fastrand::Rng::with_seed(seeds.u64(..));
    let (agent_rng, api_rng, mut work_rng) = (track_rng(), track_rng(), track_rng());
    let setup_started = Instant::now();

    let mut bed = Bed::new()?;
    let client2 = bed.client_pod("cl2", CLIENT2_IP)?;
    let api = ApiServer::start()?;
    let mut world = World::default();
    let mut pods = Pods::default();
    eprintln!(
        "soak: starting {} Services with {} pods each",
        plan.services, plan.replicas
    );
    for _ in 0..plan.services {
        interrupted(stop)?;
        let svc = world.add_service();
        for _ in 0..plan.replicas {
            let (pod, ip) = world.new_pod(&svc);
            let shape = world.service(&svc).shape;
            pods.start(&mut bed.topo, &pod, ip, shape)?;
            world.service_mut(&svc).endpoints.push(Endpoint {
                pod,
                ip,
                cond: Cond::Ready,
            });
        }
    }
    let t0 = now_ns();
    let mut tracker = Tracker::default();
    let mut lives = BTreeMap::new();
    for s in world.services.values() {
        tracker.assume(s.vip, Want::Serving(s.frontends()));
        for e in &s.endpoints {
            lives.insert(
                e.pod.clone(),
                Life {
                    added_ns: t0,
                    gone_ns: None,
                },
            );
        }
        api.apply(s.service_object())?;
        api.apply(s.slice_object())?;
    }
    let start_id = tracker.expect_all(Kind::Start, t0);

    eprintln!("soak: starting the agent");
    let started = now_ns();
    let agent = bed.start_agent_kube(&api, &[])?;
    let pid = agent.pid();
    let first = AgentLife {
        pid,
        started_ns: started,
        first_sync_ns: Some(now_ns()),
        ..AgentLife::default()
    };
    let observer = Observer::start(
        bed.pins.path().join("maps"),
        tracker,
        pid,
        plan.sample_every,
    );
    let deadline = Instant::now() + SETTLE;
    while observer.tracker().resolved(start_id).is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the agent did not program the first {} Services within {SETTLE:?}",
            plan.services
        );
        nap(Duration::from_millis(20), stop)?;
    }

    let client_nss = [bed.client_ns.clone(), client2];
    let clients_before = Snapshot::read(&client_nss)?;
    let mut clients = Clients::start(&client_nss, bed.cgroup.path())?;
    for s in world.services.values() {
        clients.add(s, Phase::Stable)?;
    }
    let setup = setup_started.elapsed();
    let traffic_from = now_ns();
    let traffic_unix = std::time::SystemTime::now();
    eprintln!(
        "soak: set up in {:.1} s; traffic and disturbances for {} min (seed {seed})",
        setup.as_secs_f64(),
        plan.minutes
    );

    let mut cx = Cx {
        plan: &plan,
        bed: &mut bed,
        api: &api,
        observer: &observer,
        clients: &mut clients,
        world,
        pods,
        lives,
        busy: BTreeMap::new(),
        agents: vec![first],
        counts: Counts::default(),
        events: Vec::new(),
        spawned: Vec::new(),
        ending: false,
    };
    let now = now_ns();
    let first_change = after(now, draw(&mut work_rng, plan.workload_gap));
    let mut tasks = vec![
        (now, Task::Agent(AgentTrack::new(&cx, agent_rng, now))),
        (now, Task::Api(ApiTrack::new(&cx, api_rng, now))),
        (first_change, Task::Workload(WorkloadTrack::new(work_rng))),
    ];
    let end = after(now, plan.run());
    let mut next_report = after(now, Duration::from_secs(60));
    loop {
        interrupted(stop)?;
        let now = now_ns();
        if !cx.ending && now >= end {
            cx.ending = true;
            cx.event(now, "time is up: the tracks wind down".into());
            for t in &mut tasks {
                t.0 = t.0.min(now);
            }
        }
        if now >= next_report {
            let minute = (now - traffic_from) / 60_000_000_000;
            // The long soak's one agent: how it fares so far.
            let agent = match (cx.plan.mode, observer.last_sample()) {
                (Mode::Long, Some(s)) => format!(
                    ", agent RSS {:.1} MiB, {} fds",
                    s.rss_kib.unwrap_or(0) as f64 / 1024.0,
                    s.fds.unwrap_or(0)
                ),
                _ => String::new(),
            };
            eprintln!(
                "soak: {minute} min: {} Services, {} pods, {} agent restarts, {} outages, {} relists{agent}",
                cx.world.services.len(),
                cx.pods.count(),
                cx.agents.len() - 1,
                cx.counts.outages.len(),
                cx.counts.relists
            );
            next_report = after(next_report, Duration::from_secs(60));
        }
        let mut i = 0;
        while i < tasks.len() {
            if tasks[i].0 <= now {
                // A step before may have taken a while (a pod started):
                // each step gets the time it runs at.
                let at = now_ns();
                cx.counts.late_ns.push(at - tasks[i].0);
                match tasks[i].1.step(&mut cx, at)? {
                    Next::At(t) => tasks[i].0 = t,
                    Next::Done => {
                        tasks.swap_remove(i);
                        continue;
                    }
                }
            }
            i += 1;
        }
        let spawned: Vec<Task> = cx.spawned.drain(..).collect();
        tasks.extend(spawned.into_iter().map(|t| (now, t)));
        if tasks.is_empty() {
            break;
        }
        cx.clients.check()?;
        let next = tasks.iter().map(|t| t.0).min().unwrap_or(now);
        let wait = Duration::from_nanos(next.saturating_sub(now_ns()));
        std::thread::sleep(wait.min(Duration::from_millis(50)));
    }
    let Cx {
        world: _,
        mut pods,
        lives,
        agents,
        counts,
        mut events,
        ..
    } = cx;

    eprintln!("soak: waiting for every change to be programmed");
    let deadline = Instant::now() + SETTLE;
    while observer.tracker().pending() > 0 && Instant::now() < deadline {
        nap(Duration::from_millis(20), stop)?;
    }
    // The clients run on for a moment on the settled state.
    nap(Duration::from_secs(1), stop)?;
    let received = clients.finish()?;
    let traffic_to = now_ns();
    let kernel = Kernel {
        clients: Snapshot::read(&client_nss)?.since(&clients_before),
        pods: pods.counters()?,
    };
    events.push((traffic_to, "clients stopped".into()));

    // Retired revisions go after their grace period: then the entries
    // must be exactly what the live Services need.
    let maps_dir = bed.pins.path().join("maps");
    let needed = observer.tracker().needed();
    let deadline = Instant::now() + Duration::from_secs(15);
    let final_entries = loop {
        let e = maps::count_entries(&maps_dir, true).ok();
        let settled = e.is_some_and(|e| (e.frontends, e.slots, e.backends) == needed);
        if settled || Instant::now() > deadline {
            break e;
        }
        nap(Duration::from_millis(200), stop)?;
    };
    let stats = bed.pins.stats().context("reading the datapath counters")?;
    let observed = observer.finish();
    // The pods go before the bed (its namespaces).
    drop(std::mem::take(&mut pods));
    Ok(Results {
        seed,
        plan,
        agent_bin: agent_bin(),
        setup,
        traffic_ns: (traffic_from, traffic_to),
        traffic_unix,
        received,
        tracker: observed.tracker,
        samples: observed.samples,
        read_errors: observed.read_errors,
        reads: observed.reads,
        lives,
        agents,
        counts,
        events,
        final_entries,
        final_needed: needed,
        stats,
        lists: api.request_count("services", Verb::List),
        kernel,
    })
}
