//! SIGKILL and restart of the agent.

use super::WatchesBack;
use crate::{
    agent::SYNCS,
    soak::{
        converge::{Block, Kind},
        cx::{AgentLife, Cx, after},
        observe,
        plan::draw,
        tasks::{Next, POLL_NS},
        wire::now_ns,
    },
};

/// SIGKILLs the agent every 20 to 40 s and starts a new one; the pinned
/// programs and maps serve meanwhile, and the new agent adopts them. In
/// the long soak it only checks that the one agent lives.
pub(crate) struct AgentTrack {
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
    pub(crate) fn new(cx: &Cx<'_>, mut rng: fastrand::Rng, now: u64) -> Self {
        let next_kill = if cx.plan.restarts() {
            after(now, draw(&mut rng, cx.plan.agent_every))
        } else {
            u64::MAX
        };
        Self {
            rng,
            state: AgentState::Up,
            next_kill,
            next_check: now,
        }
    }

    pub(crate) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
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
