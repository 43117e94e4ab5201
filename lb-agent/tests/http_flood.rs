//! The HTTP endpoints under abuse, on loopback; no root needed.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    sync::Arc,
    time::{Duration, Instant},
};

use lb_agent::http::{self, Endpoints, HEADER_TIMEOUT, Role};

async fn healthz_listener() -> SocketAddr {
    http::serve(
        "127.0.0.1:0".parse().unwrap(),
        Role::Healthz,
        Arc::new(Endpoints::default()),
    )
    .await
    .unwrap()
}

/// The status line of `GET path` on a fresh connection, or an error if no
/// answer came within `within`.
fn get(addr: SocketAddr, path: &str, within: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(within))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_while_a_thousand_idle_connections_are_held() {
    // Both ends live in this process.
    rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let addr = healthz_listener().await;
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    let status = tokio::task::spawn_blocking(move || get(addr, "/healthz", Duration::from_secs(2)))
        .await
        .unwrap()
        .expect("no answer while 1,000 idle connections are held");
    // Not synced yet, so 503; what matters is that it answers.
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let addr = healthz_listener().await;
    let closed = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
        s.set_read_timeout(Some(HEADER_TIMEOUT * 3)).unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 256];
        // Either a close (0) or an error response; never a wait past the limit.
        let n = s.read(&mut buf).unwrap_or(0);
        (
            start.elapsed(),
            String::from_utf8_lossy(&buf[..n]).into_owned(),
        )
    })
    .await
    .unwrap();
    assert!(
        closed.0 < HEADER_TIMEOUT * 2,
        "still open after {:?}: {:?}",
        closed.0,
        closed.1
    );
    assert!(!closed.1.contains("200 OK"), "{}", closed.1);
}
