//! Rolling updates, Services created and deleted.

use super::pick;
use crate::soak::{
    changes::{Create, Delete, Rollout},
    cx::{Cx, after},
    plan::draw,
    tasks::Next,
};

/// Rolling updates, Services created and deleted, at random gaps.
pub(crate) struct WorkloadTrack {
    rng: fastrand::Rng,
    /// The first changes (0: rolling update, 1: create, 2: delete), so
    /// that a short run has each.
    first: Vec<u8>,
}

impl WorkloadTrack {
    pub(crate) fn new(mut rng: fastrand::Rng) -> Self {
        let mut first = vec![0, 1, 2];
        rng.shuffle(&mut first);
        Self { rng, first }
    }

    pub(crate) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
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
