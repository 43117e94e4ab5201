//! The sync thread's loop, which only does I/O: changes in, the
//! interfaces polled, the syncer ticked ([`crate::syncer::Tick`]: it says
//! what it did and when it wants to be woken), until told to stop.

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
    let mut changes = Changes::open(
        &config.source,
        &config.node_name,
        // Every Pod of the node: all opted out, or each one's address
        // wanted for the cluster IPs' source ranges.
        config.sock_hostns_only || config.source_range_all_types,
        shared.clone(),
    )
    .await?;
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
    take(&mut agent, &mut cold, early);

    agent.syncer.prune_every(config.prune_interval);
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
            } else if agent.pods.retry {
                // A pod not found yet, or whose interface lacks the programs.
                agent.sync_pods();
            }
            next_interfaces = Instant::now() + INTERFACES_POLL;
        }
        if !agent.syncer.ready() && !waiting_logged {
            waiting_logged = true;
            info!("waiting for both initial lists before the first sync");
        }
        let tick = agent.syncer.tick(Instant::now());
        if let Some(s) = &tick.pruned {
            agent.after_sync(s, true);
        }
        if let Some(s) = &tick.synced {
            cold.synced(s.took);
            agent.after_sync(s, false);
        }
        let wake = tick
            .wake
            .map_or(next_interfaces, |at| at.min(next_interfaces));
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
                take(&mut agent, &mut cold, batch);
            }
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}

/// Hands `batch` to the syncer, each change with the moment it was read.
fn take(agent: &mut Agent, cold: &mut ColdStart, batch: Vec<(Change, Instant)>) {
    let last = batch.last().map(|(_, received)| *received);
    for (change, received) in batch {
        agent.syncer.apply(change, received);
    }
    cold.applied(agent.syncer.ready(), last);
}
