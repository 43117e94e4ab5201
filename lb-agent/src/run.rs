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
    bpf::{cgroup, loader, pins::Pins, store::BpfStore},
    config::{RunConfig, Source},
    http::{self, Endpoints, Role},
    memory,
    reconcile::Reconciler,
    source::{file, kube},
    syncer::{Change, Syncer},
};
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

/// How often the source files are checked for edits.
const FILE_POLL: Duration = Duration::from_millis(200);
/// How often frontends whose write failed (a full map, say) are retried.
const RETRY: Duration = Duration::from_secs(2);

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
    loader::install(&pins, &cgroup)
        .with_context(|| format!("attaching to cgroup {}", cgroup.display()))?;
    info!(
        cgroup = %cgroup.display(),
        bpffs = %pins.dir().display(),
        "programs attached (links pinned; they stay when the agent exits)"
    );
    let reconciler = Reconciler::adopt(BpfStore::open(&pins)?)?;
    info!(
        frontends = reconciler.state().frontends().count(),
        backends = reconciler.state().backends.len(),
        "adopted the pinned maps; only differences will be written"
    );
    let mut syncer = Syncer::new(reconciler, config.excluded.clone(), endpoints.clone());

    let stop = shutdown()?;
    match &config.source {
        Source::File(path) => run_file(&mut syncer, path, stop).await,
        Source::Kube { kubeconfig, master } => {
            let client = kube::client(kubeconfig.as_deref(), master.as_deref()).await?;
            info!(node = %config.node_name, "watching Services, EndpointSlices and this Node");
            let events = kube::watch(client, &config.node_name);
            run_kube(&mut syncer, events, &endpoints, stop).await;
        }
    }
    info!("signal received; leaving programs and maps in place");
    Ok(())
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
    syncer: &mut Syncer<BpfStore>,
    mut events: futures::stream::BoxStream<'static, kube::Event>,
    endpoints: &Endpoints,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut retry = tokio::time::interval(RETRY);
    let mut waiting_logged = false;
    loop {
        tokio::select! {
            () = &mut stop => return,
            ev = events.next() => {
                let Some(ev) = ev else { return };
                // Take whatever else is already queued: a burst becomes one
                // sync, while a lone event is written at once.
                let mut batch = vec![ev];
                while let Some(Some(ev)) = events.next().now_or_never() {
                    batch.push(ev);
                }
                let now = Instant::now();
                for ev in batch {
                    match ev {
                        kube::Event::Change(c) => syncer.apply(c, now),
                        kube::Event::NodeEligible(e) => endpoints.health.set_node_eligible(e),
                    }
                }
                if !syncer.ready() && !waiting_logged {
                    waiting_logged = true;
                    info!("waiting for both initial lists before the first sync");
                }
                sync(syncer);
            }
            _ = retry.tick() => sync(syncer),
        }
    }
}

async fn run_file(
    syncer: &mut Syncer<BpfStore>,
    path: &std::path::Path,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut poll = tokio::time::interval(FILE_POLL);
    let mut retry = tokio::time::interval(RETRY);
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
                        tracing::error!("{e}; keeping the current state");
                        continue;
                    }
                };
                for s in &objects.skipped {
                    warn!(document = %s.location, "skipping malformed document: {}", s.reason);
                }
                let received = Instant::now();
                syncer.apply(Change::AllServices(objects.services), received);
                syncer.apply(Change::AllSlices(objects.slices), received);
                sync(syncer);
            }
            _ = retry.tick() => sync(syncer),
        }
    }
}

fn sync(syncer: &mut Syncer<BpfStore>) {
    if let Some(s) = syncer.sync() {
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
    }
}
