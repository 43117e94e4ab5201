//! Opens and closes the `healthCheckNodePort` listeners to match the table
//! that `service_health.rs` publishes.
//!
//! Each family has a listener of its own on the wildcard address
//! (`0.0.0.0:port`, and `[::]:port` with `IPV6_V6ONLY`), answering with that
//! family's count, as kube-proxy's per-family servers do since they stopped
//! sharing one dual-stack socket (kubernetes#137370). A port that cannot be
//! bound (another process holds it) is logged and counted once, and retried
//! every [`RETRY`], as kube-proxy retries it at every sync.

use std::{
    collections::{BTreeMap, BTreeSet},
    io,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::{net::TcpListener, task::JoinHandle};
use tracing::{info, warn};

use super::Role;
use crate::{model::IpFamily, shared::Shared};

/// How soon a listener that could not be opened is tried again.
pub const RETRY: Duration = Duration::from_secs(5);

/// Runs for the agent's lifetime.
pub async fn serve(shared: Arc<Shared>) {
    let mut open: BTreeMap<(u16, IpFamily), JoinHandle<()>> = BTreeMap::new();
    // Failing now, each logged and counted once until it opens.
    let mut failing: BTreeSet<(u16, IpFamily)> = BTreeSet::new();
    loop {
        let wanted: BTreeSet<(u16, IpFamily)> =
            shared.service_health.wanted().into_iter().collect();
        open.retain(|key, task| {
            let keep = wanted.contains(key);
            if !keep {
                task.abort();
                info!(port = key.0, family = ?key.1, "closed a Service health-check listener");
            }
            keep
        });
        failing.retain(|key| wanted.contains(key));
        for &(port, family) in wanted.difference(&open.keys().copied().collect()) {
            let role = Role::ServiceHealth { port, family };
            match bind(port, family).and_then(|l| super::spawn(l, role, shared.clone())) {
                Ok(task) => {
                    open.insert((port, family), task);
                    failing.remove(&(port, family));
                    info!(port, ?family, "serving a Service health check");
                }
                Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => {
                    // No IPv6 in this kernel: no IPv6 probe can arrive.
                }
                Err(e) => {
                    if failing.insert((port, family)) {
                        shared.metrics.service_health_listen_errors.inc();
                        let service = shared
                            .service_health
                            .lookup(port, family)
                            .map(|e| e.service.to_string())
                            .unwrap_or_default();
                        warn!(%service, port, ?family, "failed to start the Service's health check, retrying every {RETRY:?}: {e}");
                    }
                }
            }
        }
        shared
            .metrics
            .service_health_listeners
            .set(open.len() as f64);
        if failing.is_empty() {
            shared.service_health.changed().await;
        } else {
            let _ = tokio::time::timeout(RETRY, shared.service_health.changed()).await;
        }
    }
}

/// A listener on the wildcard address of `family` only.
fn bind(port: u16, family: IpFamily) -> io::Result<TcpListener> {
    let (domain, addr) = match family {
        IpFamily::V4 => (
            Domain::IPV4,
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
        ),
        IpFamily::V6 => (
            Domain::IPV6,
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
        ),
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    if family == IpFamily::V6 {
        socket.set_only_v6(true)?;
    }
    // A restarted agent rebinds while old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}
