//! The sync thread's loop: changes in, syncs, prunes and polls on their
//! timers, until told to stop.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::FutureExt as _;
use tokio::sync::oneshot;
use tracing::info;

use super::{cold_start::ColdStart, start::Agent};
use crate::{
    config::RunConfig,
    shared::Shared,
    source::{Change, Changes, interfaces::Interfaces},
};

/// How often retired revisions are checked for a passed grace period.
const REAP: Duration = Duration::from_millis(50);
/// How long a prune that had to wait (revisions in their grace period)
/// waits before trying again.
const PRUNE_RETRY: Duration = Duration::from_secs(1);
/// How often the interface addresses are re-read for `--nodeport-addresses`.
const INTERFACES_POLL: Duration = Duration::from_secs(5);
/// The most changes read ahead while the programs load, before the model
/// can take them.
const EARLY_MAX: usize = 4096;
/// The most changes taken in one go before a sync: a burst becomes one
/// sync, but a source that never pauses cannot postpone syncs forever.
const BATCH: usize = 1024;

/// The sync thread: runs [`sync_loop`] on a runtime of its own.
pub(super) fn sync_thread(
    config: &RunConfig,
    shared: Arc<Shared>,
    stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the sync thread's runtime")?
        .block_on(sync_loop(config, shared, stop))
}

/// When the loop must wake next without a change: the earliest of the
/// `timers` (a retry, a prune, the end of the wait for this node's Node),
/// the interface poll and, while revisions retire, a reap.
fn next_wake(
    timers: &[Option<Instant>],
    interfaces: Instant,
    retiring: bool,
    now: Instant,
) -> Instant {
    timers
        .iter()
        .copied()
        .chain([Some(interfaces), retiring.then(|| now + REAP)])
        .flatten()
        .min()
        .unwrap_or(interfaces)
}

/// Loads the programs while the source lists, then applies changes and
/// writes the maps until told to stop.
async fn sync_loop(
    config: &RunConfig,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let mut cold = ColdStart::new();
    let mut loading = {
        let config = config.clone();
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || Agent::start(&config, shared))
    };
    let mut changes = Changes::open(config, shared.clone()).await?;
    let mut early = Vec::new();
    let mut agent = loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            r = &mut loading => break r.context("loading the programs panicked")??,
            // Past a bound, the rest of the list waits where it is (the
            // apiserver's response, the file's next chunk) rather than in
            // memory ahead of the model.
            batch = changes.next(), if early.len() < EARLY_MAX => early.extend(batch?),
        }
    };
    cold.programs_loaded();
    let last = early.last().map(|(_, received)| *received);
    for (change, received) in early {
        agent.syncer.apply(change, received);
    }
    cold.applied(agent.syncer.ready(), last);

    let mut next_prune = config.prune_interval.map(|d| Instant::now() + d);
    let mut interfaces = Interfaces::default();
    let mut next_interfaces = Instant::now();
    let mut waiting_logged = false;
    loop {
        if let Some(refused) = agent.refused.take() {
            return Err(refused);
        }
        if next_interfaces <= Instant::now() {
            if let Some(ips) = interfaces.changed() {
                agent
                    .syncer
                    .apply(Change::LocalAddresses(ips), Instant::now());
            }
            // A device named but missing may have appeared, or one been
            // created again (without our programs).
            if agent.attached() && agent.datapath.devices_stale() {
                agent.sync_tc();
            }
            next_interfaces = Instant::now() + INTERFACES_POLL;
        }
        if !agent.syncer.ready() && !waiting_logged {
            waiting_logged = true;
            info!("waiting for both initial lists before the first sync");
        }
        let now = Instant::now();
        if let (Some(at), Some(every)) = (next_prune, config.prune_interval)
            && at <= now
        {
            next_prune = Some(match agent.syncer.prune(now) {
                Some(s) => {
                    agent.after_sync(&s, true);
                    now + every
                }
                None => now + PRUNE_RETRY.min(every),
            });
        }
        if let Some(s) = agent.syncer.sync(now) {
            cold.synced(s.took);
            agent.after_sync(&s, false);
        }
        if agent.syncer.retiring() {
            agent.syncer.reap();
        }

        let wake = next_wake(
            &[
                agent.syncer.next_retry(),
                next_prune,
                agent.syncer.node_wait_until(),
            ],
            next_interfaces,
            agent.syncer.retiring(),
            Instant::now(),
        );
        tokio::select! {
            biased;
            _ = &mut stop => return Ok(()),
            batch = changes.next() => {
                // Take what is already read as well: a burst becomes one
                // sync, while a lone change is written at once.
                let mut batch = batch?;
                while batch.len() < BATCH
                    && let Some(more) = changes.next().now_or_never()
                {
                    batch.extend(more?);
                }
                let last = batch.last().map(|(_, received)| *received);
                for (change, received) in batch {
                    agent.syncer.apply(change, received);
                }
                cold.applied(agent.syncer.ready(), last);
            }
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_wakes_for_the_earliest_timer() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let interfaces = now + INTERFACES_POLL;
        assert_eq!(next_wake(&[None, None], interfaces, false, now), interfaces);
        assert_eq!(
            next_wake(
                &[Some(now + s(1)), Some(now + s(2))],
                interfaces,
                false,
                now
            ),
            now + s(1)
        );
        assert_eq!(
            next_wake(&[None, Some(now + s(2))], interfaces, false, now),
            now + s(2)
        );
        // Retiring revisions are reaped soon, whatever else waits.
        assert_eq!(
            next_wake(&[Some(now + s(1)), None], interfaces, true, now),
            now + REAP
        );
    }
}
