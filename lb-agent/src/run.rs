//! `lb-agent run`: attach, then reconcile on every change until a signal.

use std::{collections::HashSet, time::Duration};

use anyhow::Context as _;
use lb_agent::{
    bpf::{loader, pins::Pins, store::BpfStore},
    model::{self, Backend, Frontend, ObjectRef},
    reconcile::Reconciler,
    source::file,
};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use crate::cli::RunConfig;

/// How often the source files are checked for edits.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    let pins = Pins::new(&config.bpffs_dir);
    loader::install(&pins, &config.cgroup)
        .with_context(|| format!("attaching to cgroup {}", config.cgroup.display()))?;
    info!(
        cgroup = %config.cgroup.display(),
        bpffs = %pins.dir().display(),
        "programs attached (links pinned; they stay when the agent exits)"
    );
    let store = BpfStore::open(&pins)?;
    let mut sync = Sync {
        reconciler: Reconciler::adopt(store)?,
        config: &config,
        logged_exclusions: HashSet::new(),
        logged_passthrough: HashSet::new(),
        generation: 0,
    };
    info!(
        frontends = sync.reconciler.state().frontends().count(),
        backends = sync.reconciler.state().backends.len(),
        "adopted existing maps"
    );

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    let mut seen = None;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tick.tick() => {
                let now = file::fingerprint(&config.from_file);
                if seen.as_ref() != Some(&now) {
                    seen = Some(now);
                    sync.once();
                }
            }
        }
    }
    info!("signal received; leaving programs and maps in place");
    Ok(())
}

/// State carried from one sync to the next.
struct Sync<'a> {
    reconciler: Reconciler<BpfStore>,
    config: &'a RunConfig,
    /// Exclusions and pass-throughs are logged once each, not on every sync.
    logged_exclusions: HashSet<(ObjectRef, Backend)>,
    logged_passthrough: HashSet<Frontend>,
    generation: u64,
}

impl Sync<'_> {
    fn once(&mut self) {
        let objects = match file::load(&self.config.from_file) {
            Ok(o) => o,
            // Keep the last programmed state; a half-written file is retried on the next edit.
            Err(e) => return error!("{e}; keeping the current state"),
        };
        for s in &objects.skipped {
            warn!(document = %s.location, "skipping malformed document: {}", s.reason);
        }
        let (desired, report) =
            model::compute(&objects.services, &objects.slices, &self.config.excluded);
        for inv in &report.invalid {
            warn!(object = %inv.object, "skipping malformed object: {}", inv.reason);
        }
        for (obj, why) in &report.ignored {
            tracing::debug!(object = %obj, "ignored: {why}");
        }
        for (fe, obj) in &report.conflicts {
            warn!(frontend = %fe, object = %obj, "frontend already claimed by another Service; skipped");
        }
        for (svc, be) in &report.excluded {
            if self.logged_exclusions.insert((svc.clone(), *be)) {
                info!(service = %svc, endpoint = %be, "endpoint in excluded CIDR; not programmed");
            }
        }
        for (fe, svc) in &report.passthrough {
            if self.logged_passthrough.insert(*fe) {
                info!(service = %svc, frontend = %fe, "all endpoints excluded; frontend left to its own CNI");
            }
        }
        let outcome = self.reconciler.reconcile(&desired.frontends);
        for (fe, e) in &outcome.failed {
            error!(frontend = %fe, "not updated, keeps its previous state: {e}");
        }
        for e in &outcome.delete_errors {
            warn!("stale entry left for the next sync: {e}");
        }
        self.generation += 1;
        info!(
            generation = self.generation,
            frontends = desired.frontends.len(),
            changed = outcome.changed(),
            failed = outcome.failed.len(),
            "sync complete"
        );
    }
}
