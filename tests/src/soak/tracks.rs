//! The three disturbance tracks, each with its own random stream from the
//! seed, so that one track's choices do not shift another's: the agent
//! (SIGKILL and restart), the apiserver (outages and forced relists) and
//! the workload (rolling updates, Services created and deleted).

use super::{
    changes::{Create, Delete, Rollout},
    converge::{Block, Kind},
    cx::{AgentLife, Busy, Cx, after},
    observe,
    plan::draw,
    tasks::{Next, POLL_NS, Task},
    wire::now_ns,
};
use crate::{agent::SYNCS, apiserver::Verb};

/// SIGKILLs the agent every 20 to 40 s and starts a new one; the pinned
/// programs and maps serve meanwhile, and the new agent adopts them.
pub struct AgentTrack {
    rng: fastrand::Rng,
    state: AgentState,
    next_kill: u64,
    next_check: u64,
}

enum AgentState {
    /// Started, first sync not seen yet.
    Syncing,
    Up,
    Down,
}

/// How often a running agent is checked to be alive.
const CHECK_NS: u64 = 1_000_000_000;

impl AgentTrack {
    /// For the agent running now.
    pub fn new(cx: &Cx<'_>, mut rng: fastrand::Rng, now: u64) -> Self {
        let next_kill = after(now, draw(&mut rng, cx.plan.agent_every));
        Self {
            rng,
            state: AgentState::Up,
            next_kill,
            next_check: now,
        }
    }

    pub fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        match self.state {
            AgentState::Down => {
                let agent = cx.bed.spawn_agent_kube(cx.api, &[])?;
                let pid = agent.pid();
                cx.observer.set_pid(pid);
                let now = now_ns();
                {
                    let mut t = cx.observer.tracker();
                    t.block(Block::AgentDown, false, now);
                    t.expect_all(Kind::AgentRestart, now);
                }
                let back = WatchesBack::start(cx, Kind::AgentRestart, now);
                cx.spawned.push(back);
                cx.agents.push(AgentLife {
                    pid,
                    started_ns: now,
                    ..AgentLife::default()
                });
                cx.event(now, format!("agent started (pid {pid})"));
                self.state = AgentState::Syncing;
                self.next_kill = after(now, draw(&mut self.rng, cx.plan.agent_every));
                Ok(Next::At(now + POLL_NS))
            }
            AgentState::Syncing => {
                let synced = cx.bed.agent().metric(SYNCS)? >= 1.0;
                if synced {
                    let life = cx.agents.last_mut().expect("a started agent");
                    life.first_sync_ns = Some(now);
                    let took = (now - life.started_ns) as f64 / 1e6;
                    cx.event(
                        now,
                        format!("agent's first sync, {took:.0} ms after its start"),
                    );
                    self.state = AgentState::Up;
                } else if now >= self.next_kill && !cx.ending {
                    self.kill(cx, now)?;
                    return Ok(Next::At(after(
                        now,
                        draw(&mut self.rng, cx.plan.agent_down),
                    )));
                }
                Ok(Next::At(now + POLL_NS))
            }
            AgentState::Up if cx.ending => {
                self.observe_life(cx)?;
                Ok(Next::Done)
            }
            AgentState::Up if now >= self.next_kill => {
                self.kill(cx, now)?;
                Ok(Next::At(after(
                    now,
                    draw(&mut self.rng, cx.plan.agent_down),
                )))
            }
            AgentState::Up => {
                if now >= self.next_check {
                    cx.bed.agent().alive("the soak ran")?;
                    self.next_check = now + CHECK_NS;
                }
                Ok(Next::At(self.next_kill.min(self.next_check)))
            }
        }
    }

    /// Reads what the running agent's life is worth reporting.
    fn observe_life(&self, cx: &mut Cx<'_>) -> anyhow::Result<()> {
        let agent = cx.bed.agent.as_mut().expect("a running agent");
        let pid = agent.pid();
        let metrics = agent.metrics()?;
        let life = cx.agents.last_mut().expect("a started agent");
        life.rss_kib = observe::rss_kib(pid);
        life.fds = observe::fds(pid);
        life.syncs = metrics.get(SYNCS);
        life.udp_destroyed = metrics.get("lbagent_udp_sockets_destroyed_total");
        life.log = agent.log_text();
        Ok(())
    }

    fn kill(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<()> {
        self.observe_life(cx)?;
        // Dropping the agent SIGKILLs it and reaps it.
        let agent = cx.bed.agent.take().expect("a running agent");
        let pid = agent.pid();
        drop(agent);
        let now = now.max(now_ns());
        cx.observer.set_pid(0);
        cx.observer.tracker().block(Block::AgentDown, true, now);
        if let Some(life) = cx.agents.last_mut() {
            life.killed_ns = Some(now);
        }
        cx.event(now, format!("agent SIGKILLed (pid {pid})"));
        self.state = AgentState::Down;
        Ok(())
    }
}

/// Takes the apiserver down for a while, or holds its watches back and
/// forces a relist (410 Gone), in random order.
pub struct ApiTrack {
    rng: fastrand::Rng,
    state: ApiState,
    /// The kinds of the first disturbances, so that a short run has both.
    first: Vec<bool>,
    next: u64,
}

enum ApiState {
    Idle,
    Out { since: u64 },
    Held,
}

impl ApiTrack {
    pub fn new(cx: &Cx<'_>, mut rng: fastrand::Rng, now: u64) -> Self {
        let mut first = vec![true, false];
        rng.shuffle(&mut first);
        let next = after(now, draw(&mut rng, cx.plan.api_gap));
        Self {
            rng,
            state: ApiState::Idle,
            first,
            next,
        }
    }

    pub fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        match self.state {
            ApiState::Idle if cx.ending => Ok(Next::Done),
            ApiState::Idle if now < self.next => Ok(Next::At(self.next)),
            ApiState::Idle => {
                let outage = self.first.pop().unwrap_or_else(|| self.rng.bool());
                let until = if outage {
                    cx.api.stop();
                    cx.observer.tracker().block(Block::ApiserverDown, true, now);
                    cx.event(now, "apiserver down".into());
                    self.state = ApiState::Out { since: now };
                    // A change made during the outage, programmed after it.
                    if let Some(svc) = pick(&mut self.rng, cx.idle_services()) {
                        let rng = fastrand::Rng::with_seed(self.rng.u64(..));
                        let task = Rollout::start(cx, &svc, rng, now);
                        cx.spawned.push(task);
                    }
                    draw(&mut self.rng, cx.plan.outage)
                } else {
                    cx.api.pause_watches();
                    cx.observer.tracker().block(Block::WatchesHeld, true, now);
                    // A change the watches certainly have not sent, so that
                    // the relist is forced (the agent's position is then
                    // older than the compaction).
                    touch(cx, &mut self.rng)?;
                    cx.event(now, "watches held back".into());
                    self.state = ApiState::Held;
                    draw(&mut self.rng, cx.plan.hold)
                };
                Ok(Next::At(after(now, until)))
            }
            ApiState::Out { since } => {
                cx.api.restart()?;
                cx.observer
                    .tracker()
                    .block(Block::ApiserverDown, false, now);
                cx.observer.tracker().expect_all(Kind::OutageEnd, now);
                let back = WatchesBack::start(cx, Kind::OutageEnd, now);
                cx.spawned.push(back);
                let lasted = std::time::Duration::from_nanos(now - since);
                cx.counts.outages.push(lasted);
                cx.event(
                    now,
                    format!("apiserver back after {:.1} s", lasted.as_secs_f64()),
                );
                self.idle(cx, now)
            }
            ApiState::Held => {
                cx.api.compact();
                cx.api.close_watches();
                cx.api.resume_watches();
                {
                    let mut t = cx.observer.tracker();
                    t.block(Block::WatchesHeld, false, now);
                    t.expect_all(Kind::Relist, now);
                }
                let back = WatchesBack::start(cx, Kind::Relist, now);
                cx.spawned.push(back);
                cx.counts.relists += 1;
                cx.event(
                    now,
                    "history compacted, watches closed: relist forced".into(),
                );
                self.idle(cx, now)
            }
        }
    }

    fn idle(&mut self, cx: &Cx<'_>, now: u64) -> anyhow::Result<Next> {
        self.state = ApiState::Idle;
        if cx.ending {
            return Ok(Next::Done);
        }
        self.next = after(now, draw(&mut self.rng, cx.plan.api_gap));
        Ok(Next::At(self.next))
    }
}

/// Watches the stand-in apiserver after a disturbance until the agent
/// watches both Services and EndpointSlices again: a watch request since
/// the disturbance (two after a forced relist: the one that gets the 410,
/// then the one after the relist), and a watch of each kind open.
pub struct WatchesBack {
    at: usize,
    before: [u64; 2],
    need: u64,
}

const WATCHED: [&str; 2] = ["services", "endpointslices"];

impl WatchesBack {
    pub fn start(cx: &mut Cx<'_>, after: Kind, now: u64) -> Task {
        cx.observer.tracker().catch_up(true);
        cx.counts.back.push((after, now, None));
        Task::WatchesBack(Self {
            at: cx.counts.back.len() - 1,
            before: WATCHED.map(|w| cx.api.request_count(w, Verb::Watch)),
            need: if after == Kind::Relist { 2 } else { 1 },
        })
    }

    pub fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        let back = WATCHED.iter().zip(self.before).all(|(w, before)| {
            cx.api.request_count(w, Verb::Watch) >= before + self.need && cx.api.open_watches(w) > 0
        });
        if !back {
            return Ok(Next::At(now + POLL_NS));
        }
        cx.observer.tracker().catch_up(false);
        cx.counts.back[self.at].2 = Some(now);
        Ok(Next::Done)
    }
}

/// A Service's annotation changes: an event the agent receives that
/// changes nothing it programs.
fn touch(cx: &mut Cx<'_>, rng: &mut fastrand::Rng) -> anyhow::Result<()> {
    let settled: Vec<String> = cx
        .world
        .services
        .keys()
        .filter(|s| !matches!(cx.busy.get(*s), Some(Busy::Creating | Busy::Deleting)))
        .cloned()
        .collect();
    if let Some(svc) = pick(rng, settled) {
        let mut obj = cx.world.service(&svc).service_object();
        obj["metadata"]["annotations"] = serde_json::json!({"soak/touched": now_ns().to_string()});
        cx.api.apply(obj)?;
    }
    Ok(())
}

fn pick(rng: &mut fastrand::Rng, mut from: Vec<String>) -> Option<String> {
    (!from.is_empty()).then(|| from.swap_remove(rng.usize(..from.len())))
}

/// Rolling updates, Services created and deleted, at random gaps.
pub struct WorkloadTrack {
    rng: fastrand::Rng,
    /// The first changes (0: rolling update, 1: create, 2: delete), so
    /// that a short run has each.
    first: Vec<u8>,
}

impl WorkloadTrack {
    pub fn new(mut rng: fastrand::Rng) -> Self {
        let mut first = vec![0, 1, 2];
        rng.shuffle(&mut first);
        Self { rng, first }
    }

    pub fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        if cx.ending {
            return Ok(Next::Done);
        }
        let (roll, create, delete) = cx.plan.weights;
        let what = self.first.pop().unwrap_or_else(|| {
            let r = self.rng.u32(..roll + create + delete);
            if r < roll {
                0
            } else if r < roll + create {
                1
            } else {
                2
            }
        });
        let n = cx.world.services.len();
        let rng = fastrand::Rng::with_seed(self.rng.u64(..));
        let idle = pick(&mut self.rng, cx.idle_services());
        let task = match (what, idle) {
            (1, _) if n < cx.plan.max_services => Some(Create::start(cx, now)),
            (2, Some(svc)) if n > cx.plan.min_services => Some(Delete::start(cx, &svc, rng, now)),
            (_, Some(svc)) => Some(Rollout::start(cx, &svc, rng, now)),
            _ => None,
        };
        cx.spawned.extend(task);
        Ok(Next::At(after(
            now,
            draw(&mut self.rng, cx.plan.workload_gap),
        )))
    }
}
