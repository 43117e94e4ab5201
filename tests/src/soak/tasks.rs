//! The soak runs as tasks on one thread: each task is a small state machine
//! whose step does something quick (an apiserver write, a pod started, a
//! SIGKILL) and says when it wants to run next. Waiting for the agent
//! (convergence, an acknowledgement) is a step that finds the wait not
//! over and asks to run again shortly.

use super::{
    changes::{Create, Delete, Rollout, StopPod},
    cx::Cx,
    tracks::{AgentTrack, ApiTrack, WatchesBack, WorkloadTrack},
};

/// When a task runs next.
pub(super) enum Next {
    /// At this time (`now_ns`).
    At(u64),
    Done,
}

pub(super) enum Task {
    Agent(AgentTrack),
    Api(ApiTrack),
    Workload(WorkloadTrack),
    Rollout(Rollout),
    Create(Create),
    Delete(Delete),
    StopPod(StopPod),
    WatchesBack(WatchesBack),
}

impl Task {
    pub(super) fn step(&mut self, cx: &mut Cx<'_>, now: u64) -> anyhow::Result<Next> {
        match self {
            Task::Agent(t) => t.step(cx, now),
            Task::Api(t) => t.step(cx, now),
            Task::Workload(t) => t.step(cx, now),
            Task::Rollout(t) => t.step(cx, now),
            Task::Create(t) => t.step(cx, now),
            Task::Delete(t) => t.step(cx, now),
            Task::StopPod(t) => t.step(cx, now),
            Task::WatchesBack(t) => t.step(cx, now),
        }
    }
}

/// How soon a task waiting for the agent looks again.
pub(super) const POLL_NS: u64 = 10_000_000;
