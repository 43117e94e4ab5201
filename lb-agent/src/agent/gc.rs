//! The conntrack collector: deletes expired entries of the tc programs'
//! maps, and those of flows whose endpoint stopped serving.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        mpsc::{RecvTimeoutError, SyncSender},
    },
    thread,
    time::Duration,
};

use anyhow::Context as _;
use tracing::debug;

use crate::{
    datapath::{conntrack, xdp_generation::Generation},
    model::Frontend,
    shared::Shared,
    sockets::Serving,
};

/// How often expired conntrack and SNAT entries are deleted, and the maps
/// counted.
pub(super) const CONNTRACK_GC: Duration = Duration::from_secs(30);

/// Collects every [`CONNTRACK_GC`] and whenever asked through the returned
/// sender (after a sync that stopped an endpoint of an external frontend),
/// on a thread of its own: a large table takes a while to read, and
/// nothing else waits for it. The thread ends with the sender. Flows it
/// deletes leave XDP's flow cache (`generation`).
pub(super) fn spawn(
    maps_dir: PathBuf,
    serving: Arc<Serving<Frontend>>,
    shared: Arc<Shared>,
    generation: Generation,
) -> anyhow::Result<SyncSender<()>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    thread::Builder::new()
        .name("conntrack-gc".into())
        .spawn(move || {
            let m = &shared.metrics;
            loop {
                if let Err(RecvTimeoutError::Disconnected) = rx.recv_timeout(CONNTRACK_GC) {
                    return;
                }
                let serves = |fe: &Frontend, ip| serving.serves(fe, ip);
                match conntrack::collect(&maps_dir, conntrack::now(), serves) {
                    Ok(c) => {
                        m.conntrack_entries.set(c.ct_left as f64);
                        m.nat_entries.set(c.nat_left as f64);
                        m.conntrack_collected.inc_by(c.ct as u64);
                        if c.ct > 0
                            && let Err(e) = generation.bump()
                        {
                            debug!(
                                error = &e as &dyn std::error::Error,
                                "bumping the XDP flow cache's generation"
                            );
                        }
                        if c.ct + c.nat > 0 {
                            debug!(conntrack = c.ct, nat = c.nat, "deleted stale entries");
                        }
                    }
                    // During a migration from a layout without them, say.
                    Err(e) => debug!(
                        error = &e as &dyn std::error::Error,
                        "conntrack garbage collection"
                    ),
                }
            }
        })
        .context("starting the conntrack GC thread")?;
    Ok(tx)
}
