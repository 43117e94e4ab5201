//! The three disturbance tracks, each with its own random stream from the
//! seed, so that one track's choices do not shift another's: the agent
//! (SIGKILL and restart), the apiserver (outages and forced relists) and
//! the workload (rolling updates, Services created and deleted); and the
//! task that sees the agent watching again after a disturbance.

mod agent;
mod apiserver;
mod back;
mod workload;

pub(super) use agent::AgentTrack;
pub(super) use apiserver::ApiTrack;
pub(super) use back::WatchesBack;
pub(super) use workload::WorkloadTrack;

/// One of `from`, at random.
fn pick(rng: &mut fastrand::Rng, mut from: Vec<String>) -> Option<String> {
    (!from.is_empty()).then(|| from.swap_remove(rng.usize(..from.len())))
}
