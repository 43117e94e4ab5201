//! The metrics and healthz HTTP endpoints, as kube-proxy serves them.

use std::{convert::Infallible, net::SocketAddr, sync::Arc};

use http_body_util::Full;
use hyper::{Method, Request, Response, body::Bytes, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::{
    health::Health,
    metrics::{self, Metrics},
};

/// What the two listeners answer from.
#[derive(Debug, Default)]
pub struct Endpoints {
    pub metrics: Metrics,
    pub health: Health,
}

/// Which set of paths a listener serves.
#[derive(Clone, Copy, Debug)]
pub enum Role {
    /// `/metrics` and `/proxyMode` (kube-proxy's `--metrics-bind-address`).
    Metrics,
    /// `/healthz` and `/livez` (kube-proxy's `--healthz-bind-address`).
    Healthz,
}

/// Binds now (so a bad address fails the start), then serves in the background.
pub async fn serve(
    addr: SocketAddr,
    role: Role,
    endpoints: Arc<Endpoints>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, say: back off instead of spinning.
                    tracing::warn!(%local, "accepting a connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let endpoints = endpoints.clone();
                    async move { Ok::<_, Infallible>(answer(role, &endpoints, &req)) }
                });
                // A client that hangs up mid-request is its own problem.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(local)
}

fn answer<B>(role: Role, e: &Endpoints, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(405, "text/plain", "method not allowed\n".into());
    }
    match (role, req.uri().path()) {
        (Role::Metrics, "/metrics") => reply(200, metrics::CONTENT_TYPE, e.metrics.render()),
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

fn reply(status: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}
