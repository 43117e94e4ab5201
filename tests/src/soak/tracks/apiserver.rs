//! Apiserver outages and forced relists.

use super::{WatchesBack, pick};
use crate::soak::{
    changes::Rollout,
    converge::{Block, Kind},
    cx::{Busy, Cx, after},
    plan::draw,
    tasks::Next,
    wire::now_ns,
};

/// Takes the apiserver down for a while, or holds its watches back and
/// forces a relist (410 Gone), in random order.
pub(crate) struct ApiTrack {
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
    pub(crate) fn new(cx: &Cx<'_>, mut rng: fastrand::Rng, now: u64) -> Self {
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

    pub(crate) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
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
