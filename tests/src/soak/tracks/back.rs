//! The agent watching again after a disturbance, as the stand-in apiserver
//! sees it.

use crate::{
    apiserver::Verb,
    soak::{
        converge::Kind,
        cx::Cx,
        tasks::{Next, POLL_NS, Task},
    },
};

/// Watches the stand-in apiserver after a disturbance until the agent
/// watches both Services and EndpointSlices again: a watch request since
/// the disturbance (two after a forced relist: the one that gets the 410,
/// then the one after the relist), and a watch of each kind open.
pub(crate) struct WatchesBack {
    at: usize,
    before: [u64; 2],
    need: u64,
}

const WATCHED: [&str; 2] = ["services", "endpointslices"];

impl WatchesBack {
    pub(crate) fn start(cx: &mut Cx<'_>, after: Kind, now: u64) -> Task {
        cx.observer.tracker().catch_up(true);
        cx.counts.back.push((after, now, None));
        Task::WatchesBack(Self {
            at: cx.counts.back.len() - 1,
            before: WATCHED.map(|w| cx.api.request_count(w, Verb::Watch)),
            need: if after == Kind::Relist { 2 } else { 1 },
        })
    }

    pub(crate) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
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
