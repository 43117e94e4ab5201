//! `lb-agent run`: serve metrics and health, start the sync thread, and
//! stop on SIGTERM or SIGINT.
//!
//! Threads: the main thread's tokio runtime (current-thread) serves HTTP
//! and waits for signals; it never runs anything that takes long. The sync
//! thread has a runtime of its own ([`sync_loop`]): it watches the
//! apiserver (or polls and parses the file), owns the model and the maps,
//! and applies each change as it is read, so a lone change is written
//! without a hand-off between threads and the objects are parsed where the
//! model keeps them. The programs load on a blocking thread meanwhile
//! ([`start`]). The conntrack collector ([`gc`]) and the socket reaper run
//! on threads of their own.

mod cold_start;
mod gc;
mod pods;
mod pods_state;
mod start;
mod sync_loop;
mod tc;
mod tc_settings;

use std::{future::Future, sync::Arc, thread};

use anyhow::Context as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::oneshot,
};
use tracing::{info, warn};

use crate::{
    config::RunConfig,
    http::{self, Role},
    shared::Shared,
};

/// Runs the agent until a signal or a fatal error; programs and maps stay.
pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    for field in &config.ignored {
        warn!(%field, "config field has no effect on the eBPF proxy; ignored");
    }
    let shared = Arc::new(Shared::default());
    let metrics = http::serve(config.metrics_addr, Role::Metrics, shared.clone())
        .await
        .with_context(|| format!("binding the metrics address {}", config.metrics_addr))?;
    let healthz = http::serve(config.healthz_addr, Role::Healthz, shared.clone())
        .await
        .with_context(|| format!("binding the healthz address {}", config.healthz_addr))?;
    info!(%metrics, %healthz, node = %config.node_name, "serving /metrics, /proxyMode, /healthz, /livez");
    tokio::spawn(http::health_listeners::serve(shared.clone()));

    let (stop_tx, stop_rx) = oneshot::channel();
    let (ended_tx, ended) = oneshot::channel();
    let sync_thread = thread::Builder::new()
        .name("sync".into())
        .spawn(move || {
            let result = sync_loop::sync_thread(&config, shared, stop_rx);
            let _ = ended_tx.send(result);
        })
        .context("starting the sync thread")?;

    let stop = shutdown()?;
    let outcome = tokio::select! {
        () = stop => {
            info!("signal received");
            Ok(())
        }
        r = ended => r.unwrap_or_else(|_| Err(anyhow::anyhow!("the sync thread panicked"))),
    };
    let _ = stop_tx.send(());
    let _ = sync_thread.join();
    info!("stopping; leaving programs and maps in place");
    outcome
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
