//! The metrics, healthz and Service health-check HTTP endpoints, as
//! kube-proxy serves them.
//!
//! The healthz listener usually binds 0.0.0.0 (both families), so every
//! listener is built to keep answering under a flood of connections: a
//! connection must send a complete request head within
//! [`Limits::header_timeout`] of connecting or of its previous answer, and
//! at [`Limits::max_connections`] the least useful open connection is closed
//! to admit the new one (see [`conns::Conns`]) rather than the listener
//! refusing everyone.

mod conns;
pub mod health_listeners;
#[cfg(test)]
mod tests;

use std::{
    convert::Infallible,
    io,
    net::{Ipv6Addr, SocketAddr},
    sync::Arc,
    time::{Duration, Instant},
};

use http_body_util::Full;
use hyper::{Method, Request, Response, body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};

use self::conns::Conns;
use crate::{log_budget::LogBudget, metrics, model::IpFamily, service_health, shared::Shared};

/// Which set of paths a listener serves.
#[derive(Clone, Copy, Debug)]
pub enum Role {
    /// `/metrics` and `/proxyMode` (kube-proxy's `--metrics-bind-address`).
    Metrics,
    /// `/healthz` and `/livez` (kube-proxy's `--healthz-bind-address`).
    Healthz,
    /// A Service's `healthCheckNodePort` in one family: every path.
    ServiceHealth { port: u16, family: IpFamily },
}

/// How much one listener lets its clients hold.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// Open connections at most; at the cap, a new one closes the least
    /// useful one (see [`conns::Conns`]).
    max_connections: usize,
    /// Time to send a whole request head, counted from the connection's
    /// start or from the previous answer (so it is also the keep-alive idle
    /// timeout).
    header_timeout: Duration,
}

impl Default for Limits {
    /// Far more connections than probes and scrapers need; a head timeout
    /// that a probe or scraper on a loaded node still meets.
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_timeout: Duration::from_secs(5),
        }
    }
}

/// A request head this large is refused with 431: it bounds the memory a
/// slow client can pin per connection (hyper's default is 400 KiB).
const MAX_HEAD: usize = 16 * 1024;

/// Binds now (so a bad address fails the start), then serves in the background.
pub async fn serve(addr: SocketAddr, role: Role, shared: Arc<Shared>) -> io::Result<SocketAddr> {
    Ok(serve_with(addr, role, shared, Limits::default()).await?.0)
}

/// Serves `listener` in the background until the task is aborted.
pub fn spawn(
    listener: TcpListener,
    role: Role,
    shared: Arc<Shared>,
) -> io::Result<tokio::task::JoinHandle<()>> {
    let local = listener.local_addr()?;
    let limits = Limits::default();
    let conns = Arc::new(Conns::new(limits.max_connections));
    Ok(tokio::spawn(accept(
        listener, local, role, shared, limits, conns,
    )))
}

/// [`serve`] with chosen limits; also returns the connection table.
async fn serve_with(
    addr: SocketAddr,
    role: Role,
    shared: Arc<Shared>,
    limits: Limits,
) -> io::Result<(SocketAddr, Arc<Conns>)> {
    let listener = bind(addr)?;
    let local = listener.local_addr()?;
    let conns = Arc::new(Conns::new(limits.max_connections));
    tokio::spawn(accept(listener, local, role, shared, limits, conns.clone()));
    Ok((local, conns))
}

/// Binds `addr`. An unspecified address (`0.0.0.0`, `::`) takes both
/// families, as kube-proxy's Go listener does for `0.0.0.0:10256`: on an
/// IPv6-only node the kubelet probes the node's IPv6 address. Without IPv6
/// in the kernel it takes IPv4 alone.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let both = if addr.ip().is_unspecified() {
        both_families()?
    } else {
        None
    };
    let (socket, addr) = match both {
        Some(s) => (
            s,
            SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), addr.port()),
        ),
        None => (
            Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?,
            addr,
        ),
    };
    // As std and tokio do: a restarted agent rebinds while the old
    // connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

/// An IPv6 socket that takes IPv4 too; `None` without IPv6 in the kernel.
fn both_families() -> io::Result<Option<Socket>> {
    match Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)) {
        Ok(s) => {
            s.set_only_v6(false)?;
            Ok(Some(s))
        }
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn accept(
    listener: TcpListener,
    local: SocketAddr,
    role: Role,
    shared: Arc<Shared>,
    limits: Limits,
    conns: Arc<Conns>,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(MAX_HEAD);
    // Out of descriptors, every accept fails: a few lines say so.
    let mut log = LogBudget::new(10, Duration::from_secs(30));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(connection(
                    stream,
                    role,
                    shared.clone(),
                    http.clone(),
                    &conns,
                ));
            }
            Err(e) => {
                if let Some(suppressed) = log.allow(Instant::now()) {
                    tracing::warn!(%local, suppressed, "accepting a connection: {e}");
                }
                // Out of descriptors: free one of ours if we can, and give
                // its task a moment to close it; else back off longer.
                // Either way, do not spin.
                let freed = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                    && conns.evict_one();
                let pause = if freed { 10 } else { 100 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }
}

/// Serves one connection until it ends, times out or is evicted.
fn connection(
    stream: TcpStream,
    role: Role,
    shared: Arc<Shared>,
    http: http1::Builder,
    conns: &Arc<Conns>,
) -> impl Future<Output = ()> + use<> {
    let (ticket, evicted) = Conns::admit(conns);
    let svc = service_fn(move |req| {
        ticket.requested();
        let answer = answer(role, &shared, &req);
        async move { Ok::<_, Infallible>(answer) }
    });
    async move {
        tokio::select! {
            // A client that hangs up mid-request is its own problem.
            _ = http.serve_connection(TokioIo::new(stream), svc) => {}
            _ = evicted => {}
        }
    }
}

fn answer<B>(role: Role, e: &Shared, req: &Request<B>) -> Response<Full<Bytes>> {
    if let Role::ServiceHealth { port, family } = role {
        return service_health_answer(e, port, family);
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(405, "text/plain", "method not allowed\n".into());
    }
    match (role, req.uri().path()) {
        (Role::Metrics, "/metrics") => reply(200, metrics::CONTENT_TYPE, e.render_metrics()),
        (Role::Metrics, "/proxyMode") => reply(200, "text/plain", "ebpf".into()),
        (Role::Healthz, "/healthz") => {
            let a = e.health.healthz();
            reply(a.status, "application/json", a.body)
        }
        (Role::Healthz, "/livez") => {
            let a = e.health.livez();
            reply(a.status, "application/json", a.body)
        }
        _ => reply(404, "text/plain", "404 page not found\n".into()),
    }
}

/// Any method and path: kube-proxy's health-check handler has no mux.
fn service_health_answer(e: &Shared, port: u16, family: IpFamily) -> Response<Full<Bytes>> {
    let Some(entry) = e.service_health.lookup(port, family) else {
        // The Service is gone and its listener about to close.
        return reply(503, "text/plain", "no such service\n".into());
    };
    let a = service_health::answer(
        &entry.service.namespace,
        &entry.service.name,
        entry.local_endpoints,
        e.health.proxy_healthy(),
    );
    let mut r = Response::builder().status(a.status);
    for (name, value) in a.headers {
        r = r.header(name, value);
    }
    r.body(Full::new(Bytes::from(a.body)))
        .expect("the answer's parts are valid")
}

fn reply(status: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}
