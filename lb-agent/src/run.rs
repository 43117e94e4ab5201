//! `lb-agent run`: attach, serve metrics and health, then keep the maps in
//! sync with the source until SIGTERM or SIGINT.

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::{FutureExt as _, StreamExt as _};
use lb_agent::{
    config::{RunConfig, Source},
    datapath::{Datapath, Start, cgroup, grace::MembarrierGrace, pins::Pins, table::Bpf},
    http::{self, Endpoints, Role},
    memory,
    reconcile::Reconciler,
    source::{file, kube},
    syncer::{Change, Syncer},
};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

/// How often the source files are checked for edits.
const FILE_POLL: Duration = Duration::from_millis(200);
/// How often frontends whose write failed (a full map, say) are retried.
const RETRY: Duration = Duration::from_secs(2);
/// How often retired revisions are checked for a passed grace period.
const REAP: Duration = Duration::from_millis(50);

pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    for field in &config.ignored {
        warn!(%field, "config field has no effect on the eBPF proxy; ignored");
    }
    let endpoints = Arc::new(Endpoints::default());
    let metrics = http::serve(config.metrics_addr, Role::Metrics, endpoints.clone())
        .await
        .with_context(|| format!("binding the metrics address {}", config.metrics_addr))?;
    let healthz = http::serve(config.healthz_addr, Role::Healthz, endpoints.clone())
        .await
        .with_context(|| format!("binding the healthz address {}", config.healthz_addr))?;
    info!(%metrics, %healthz, node = %config.node_name, "serving /metrics, /proxyMode, /healthz, /livez");

    let cgroup = match &config.cgroup {
        Some(p) => p.clone(),
        None => {
            cgroup::cgroup2_mount().context("finding the cgroup2 mount (or pass --cgroup-path)")?
        }
    };
    let pins = Pins::new(&config.bpffs_dir);
    let datapath = Datapath::open(&pins, &config.capacities).with_context(|| {
        format!(
            "loading the programs and maps under {}",
            pins.dir().display()
        )
    })?;
    match datapath.start() {
        Start::Fresh => {
            info!(bpffs = %pins.dir().display(), capacities = ?config.capacities, "no pinned maps; created them")
        }
        Start::Adopted => info!(bpffs = %pins.dir().display(), "adopted the pinned maps"),
        Start::Resuming => {
            warn!("finishing a migration that was interrupted after the programs switched")
        }
        Start::Migrating(why) => warn!(
            differences = ?why,
            "the pinned maps differ from this build's; building new maps beside them, \
             the programs switch once they are filled"
        ),
    }
    let _ = endpoints.metrics.datapath_maps.set(pins.maps_dir());
    let grace = MembarrierGrace::start().context("starting the grace-period thread")?;
    if !MembarrierGrace::exact() {
        warn!(
            "membarrier(MEMBARRIER_CMD_GLOBAL) cannot wait for RCU readers here; deletions wait a fixed time instead"
        );
    }
    let reconciler = Reconciler::adopt(datapath.tables()?, grace)?;
    info!(
        frontends = reconciler.maps().frontends().len(),
        backends = reconciler.maps().backends().len(),
        "read the maps; only differences will be written"
    );
    let mut agent = Agent {
        syncer: Syncer::new(reconciler, config.excluded.clone(), endpoints.clone()),
        datapath,
        cgroup,
        attached: false,
    };
    if agent.datapath.attach_early() {
        agent.attach()?;
    }

    let stop = shutdown()?;
    match &config.source {
        Source::File(path) => run_file(&mut agent, path, stop).await,
        Source::Kube { kubeconfig, master } => {
            let client = kube::client(kubeconfig.as_deref(), master.as_deref()).await?;
            info!(node = %config.node_name, "watching Services, EndpointSlices and this Node");
            let events = kube::watch(client, &config.node_name);
            run_kube(&mut agent, events, &endpoints, stop).await;
        }
    }
    info!("stopping; leaving programs and maps in place");
    Ok(())
}

/// The sync loop's state: the syncer, and the programs it may still have
/// to switch to its maps.
struct Agent {
    syncer: Syncer<Bpf, MembarrierGrace>,
    datapath: Datapath,
    cgroup: std::path::PathBuf,
    attached: bool,
}

impl Agent {
    /// Attaches this build's programs (switching from a migration's old maps).
    fn attach(&mut self) -> anyhow::Result<()> {
        let done = self
            .datapath
            .attach(&self.cgroup)
            .with_context(|| format!("attaching to cgroup {}", self.cgroup.display()))?;
        self.attached = true;
        info!(
            cgroup = %self.cgroup.display(),
            revnat_carried = done.revnat_carried,
            old_pins_removed = done.removed.len(),
            "programs attached (links pinned; they stay when the agent exits)"
        );
        Ok(())
    }

    /// Writes what is pending; during a migration, switches the programs
    /// once a full sync has filled the new maps without a failure.
    fn sync(&mut self) {
        let Some(s) = self.syncer.sync() else {
            return;
        };
        info!(
            full = s.full,
            frontends = s.frontends,
            changed = s.outcome.changed(),
            failed = s.outcome.failed.len(),
            took_us = s.took.as_micros() as u64,
            latency_us = s.latency.as_micros() as u64,
            "sync complete"
        );
        if s.full {
            // The (re)list it followed freed far more than the model keeps.
            memory::release_freed();
        }
        if !self.attached {
            // Every sync after the first full one retries whatever failed,
            // so a sync without failures means the new maps hold it all.
            if !s.outcome.failed.is_empty() {
                if s.full {
                    error!(
                        failed = s.outcome.failed.len(),
                        "the new maps cannot hold the whole state; the old programs and maps \
                         stay in use until they can"
                    );
                }
                return;
            }
            if let Err(e) = self.attach() {
                error!(
                    error = e.as_ref() as &dyn std::error::Error,
                    "switching the programs to the new maps failed; retrying"
                );
            }
        }
    }

    /// Deletes retired revisions whose grace period has passed.
    fn reap(&mut self) {
        if self.syncer.retiring() {
            self.syncer.reap();
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
fn shutdown() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

async fn run_kube(
    agent: &mut Agent,
    mut events: futures::stream::BoxStream<'static, kube::Event>,
    endpoints: &Endpoints,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut retry = tokio::time::interval(RETRY);
    let mut reap = tokio::time::interval(REAP);
    let mut waiting_logged = false;
    loop {
        tokio::select! {
            () = &mut stop => return,
            ev = events.next() => {
                let Some(ev) = ev else {
                    error!("the watch streams ended");
                    return;
                };
                // Take whatever else is already queued: a burst becomes one
                // sync, while a lone event is written at once.
                let mut batch = vec![ev];
                while let Some(Some(ev)) = events.next().now_or_never() {
                    batch.push(ev);
                }
                let now = Instant::now();
                for ev in batch {
                    match ev {
                        kube::Event::Change(c) => agent.syncer.apply(c, now),
                        kube::Event::NodeEligible(e) => endpoints.health.set_node_eligible(e),
                    }
                }
                if !agent.syncer.ready() && !waiting_logged {
                    waiting_logged = true;
                    info!("waiting for both initial lists before the first sync");
                }
                agent.sync();
            }
            _ = retry.tick() => agent.sync(),
            _ = reap.tick() => agent.reap(),
        }
    }
}

async fn run_file(agent: &mut Agent, path: &std::path::Path, stop: impl Future<Output = ()>) {
    let mut stop = std::pin::pin!(stop);
    let mut poll = tokio::time::interval(FILE_POLL);
    let mut retry = tokio::time::interval(RETRY);
    let mut reap = tokio::time::interval(REAP);
    let mut seen = None;
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = poll.tick() => {
                let now = file::fingerprint(path);
                if seen.as_ref() == Some(&now) {
                    continue;
                }
                seen = Some(now);
                let objects = match file::load(path) {
                    Ok(o) => o,
                    // Keep the last programmed state; a half-written file is retried on the next edit.
                    Err(e) => {
                        error!(error = &e as &dyn std::error::Error, "keeping the current state");
                        continue;
                    }
                };
                for s in &objects.skipped {
                    warn!(document = %s.location, "skipping malformed document: {}", s.reason);
                }
                let received = Instant::now();
                agent.syncer.apply(Change::AllServices(objects.services), received);
                agent.syncer.apply(Change::AllSlices(objects.slices), received);
                agent.sync();
            }
            _ = retry.tick() => agent.sync(),
            _ = reap.tick() => agent.reap(),
        }
    }
}
