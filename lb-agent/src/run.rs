//! `lb-agent run`: serve metrics and health, start the sources and the sync
//! thread, and stop on SIGTERM or SIGINT.
//!
//! Threads: the tokio runtime (current-thread) serves HTTP, watches the
//! apiserver and forwards changes; it never runs anything that takes long.
//! The sync thread loads and attaches the programs and owns the model and
//! the maps: everything that costs time at 10,000 Services runs there. The
//! file source polls and parses on a thread of its own.

use std::{
    future::Future,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use futures::StreamExt as _;
use lb_agent::{
    config::{RunConfig, Source},
    datapath::{Datapath, Start, cgroup, grace::MembarrierGrace, pins::Pins, table::Bpf},
    http::{self, Endpoints, Role},
    memory,
    model::ExcludedCidrs,
    reconcile::Reconciler,
    source::{Change, file, kube},
    syncer::{SyncStats, Syncer},
};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

/// How often the source files are checked for edits.
const FILE_POLL: Duration = Duration::from_millis(200);
/// How often retired revisions are checked for a passed grace period.
const REAP: Duration = Duration::from_millis(50);
/// How long a prune that had to wait (revisions in their grace period)
/// waits before trying again.
const PRUNE_RETRY: Duration = Duration::from_secs(1);

/// What the sync thread receives.
enum Input {
    Change(Change, Instant),
    Stop,
}

/// The sending side of the sync thread's queue.
#[derive(Clone)]
struct Feed {
    tx: mpsc::Sender<Input>,
    endpoints: Arc<Endpoints>,
}

impl Feed {
    /// Queues a change; `false` once the sync thread has ended.
    fn send(&self, change: Change) -> bool {
        // Counted as pending from here: a sync thread that stops keeping up
        // shows on /healthz.
        self.endpoints.health.queued();
        self.tx.send(Input::Change(change, Instant::now())).is_ok()
    }
}

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

    let (tx, rx) = mpsc::channel();
    let feed = Feed {
        tx,
        endpoints: endpoints.clone(),
    };
    let (ended_tx, ended) = tokio::sync::oneshot::channel();
    let sync_thread = {
        let config = config.clone();
        let endpoints = endpoints.clone();
        thread::Builder::new()
            .name("sync".into())
            .spawn(move || {
                let result = sync_thread(&config, endpoints, &rx);
                let _ = ended_tx.send(result);
            })
            .context("starting the sync thread")?
    };

    let mut stop = std::pin::pin!(shutdown()?);
    let stopping = Arc::new(AtomicBool::new(false));
    let mut ended = std::pin::pin!(ended);
    let file_thread = match &config.source {
        Source::File(path) => Some(file_source(path.clone(), feed.clone(), stopping.clone())?),
        Source::Kube { .. } => None,
    };
    let outcome = tokio::select! {
        () = &mut stop => {
            info!("signal received");
            Ok(())
        }
        r = &mut ended => r.unwrap_or_else(|_| Err(anyhow::anyhow!("the sync thread panicked"))),
        r = forward_kube(&config, &feed), if file_thread.is_none() => r,
    };
    stopping.store(true, Ordering::Relaxed);
    let _ = feed.tx.send(Input::Stop);
    let _ = sync_thread.join();
    if let Some(t) = file_thread {
        let _ = t.join();
    }
    info!("stopping; leaving programs and maps in place");
    outcome
}

/// Watches the apiserver and forwards its changes; returns when the
/// watch streams end (which they never should) or the sync thread is gone.
async fn forward_kube(config: &RunConfig, feed: &Feed) -> anyhow::Result<()> {
    let Source::Kube { kubeconfig, master } = &config.source else {
        unreachable!("only called for the apiserver source");
    };
    let client = kube::client(kubeconfig.as_deref(), master.as_deref()).await?;
    info!(node = %config.node_name, "watching Services, EndpointSlices and this Node");
    let mut events = kube::watch(client, &config.node_name);
    while let Some(ev) = events.next().await {
        match ev {
            kube::Event::Change(c) => {
                if !feed.send(c) {
                    return Ok(());
                }
            }
            kube::Event::NodeEligible(e) => feed.endpoints.health.set_node_eligible(e),
        }
    }
    anyhow::bail!("the watch streams ended")
}

/// Polls the source files and sends every edit, parsed, as two full lists.
fn file_source(
    path: PathBuf,
    feed: Feed,
    stopping: Arc<AtomicBool>,
) -> anyhow::Result<thread::JoinHandle<()>> {
    let body = move || {
        let mut seen = None;
        while !stopping.load(Ordering::Relaxed) {
            let now = file::fingerprint(&path);
            if seen.as_ref() != Some(&now) {
                seen = Some(now);
                match file::load(&path) {
                    Ok(objects) => {
                        for s in &objects.skipped {
                            warn!(document = %s.location, "skipping malformed document: {}", s.reason);
                        }
                        if !feed.send(Change::AllServices(objects.services))
                            || !feed.send(Change::AllSlices(objects.slices))
                        {
                            return;
                        }
                    }
                    // Keep the last programmed state; a half-written file is
                    // retried on the next edit.
                    Err(e) => {
                        error!(
                            error = &e as &dyn std::error::Error,
                            "keeping the current state"
                        );
                    }
                }
            }
            thread::sleep(FILE_POLL);
        }
    };
    thread::Builder::new()
        .name("file-source".into())
        .spawn(body)
        .context("starting the file source thread")
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

/// The sync thread: loads the programs, then applies changes and writes
/// the maps until told to stop.
fn sync_thread(
    config: &RunConfig,
    endpoints: Arc<Endpoints>,
    rx: &mpsc::Receiver<Input>,
) -> anyhow::Result<()> {
    let mut agent = Agent::start(config, endpoints)?;
    let mut next_prune = config.prune_interval.map(|d| Instant::now() + d);
    loop {
        let now = Instant::now();
        let mut wake = [
            agent.syncer.next_retry(),
            next_prune,
            agent.syncer.retiring().then(|| now + REAP),
        ]
        .into_iter()
        .flatten()
        .min();
        // Take what is queued: a burst becomes one sync, while a lone
        // event is written at once.
        let first = match wake.take() {
            Some(at) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        let mut inputs = match first {
            Ok(i) => vec![i],
            Err(mpsc::RecvTimeoutError::Timeout) => Vec::new(),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
        };
        inputs.extend(rx.try_iter());
        for input in inputs {
            match input {
                Input::Change(c, received) => agent.syncer.apply(c, received),
                Input::Stop => return Ok(()),
            }
        }
        if !agent.syncer.ready() && !agent.waiting_logged {
            agent.waiting_logged = true;
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
            agent.after_sync(&s, false);
        }
        if agent.syncer.retiring() {
            agent.syncer.reap();
        }
    }
}

/// The sync thread's state: the syncer, and the programs it may still have
/// to switch to its maps.
struct Agent {
    syncer: Syncer<Bpf, MembarrierGrace>,
    datapath: Datapath,
    cgroup: PathBuf,
    attached: bool,
    waiting_logged: bool,
}

impl Agent {
    /// Loads the programs and maps (migrating older ones), and attaches
    /// the programs unless a migration must fill new maps first.
    fn start(config: &RunConfig, endpoints: Arc<Endpoints>) -> anyhow::Result<Self> {
        let cgroup = match &config.cgroup {
            Some(p) => p.clone(),
            None => cgroup::cgroup2_mount()
                .context("finding the cgroup2 mount (or pass --cgroup-path)")?,
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
                info!(bpffs = %pins.dir().display(), capacities = ?config.capacities, "no pinned maps; created them");
            }
            Start::Adopted => info!(bpffs = %pins.dir().display(), "adopted the pinned maps"),
            Start::Resuming => {
                warn!("finishing a migration that was interrupted after the programs switched");
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
        let excluded: ExcludedCidrs = config.excluded.clone();
        let mut agent = Agent {
            syncer: Syncer::new(reconciler, excluded, endpoints),
            datapath,
            cgroup,
            attached: false,
            waiting_logged: false,
        };
        if agent.datapath.attach_early() {
            agent.attach()?;
        }
        Ok(agent)
    }

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

    /// Logs a sync; during a migration, switches the programs once the new
    /// maps hold the whole state.
    fn after_sync(&mut self, s: &SyncStats, prune: bool) {
        info!(
            prune,
            full = s.full,
            frontends = s.frontends,
            changed = s.outcome.changed(),
            failed = s.outcome.failed.len(),
            took_us = s.took.as_micros() as u64,
            latency_us = s.latency.as_micros() as u64,
            "sync complete"
        );
        if prune && s.outcome.changed() > 0 {
            warn!(
                changed = s.outcome.changed(),
                "the maps had drifted from the desired state; repaired"
            );
        }
        if s.full {
            // The (re)list it followed freed far more than the model keeps.
            memory::release_freed();
        }
        if self.attached {
            return;
        }
        if self.syncer.failing() > 0 {
            if s.full {
                error!(
                    failed = self.syncer.failing(),
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
