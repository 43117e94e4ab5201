//! Real sockets on 127.0.0.1; no root needed, except for the `privileged`
//! test, which listens on every address of a network namespace of its own.

use std::{
    io::ErrorKind,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Instant,
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::oneshot::error::TryRecvError,
    time::timeout,
};

use lb_test_netns::{TestNetns, require_root};

use super::*;

const ANY_PORT: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
/// Bounds the waits that only guard against a hang.
const HANG: Duration = Duration::from_secs(10);

/// Sends `request` on a new connection and reads until the server closes it.
async fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("write");
    read_to_close(&mut s).await
}

async fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    timeout(HANG, s.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .expect("read");
    String::from_utf8(out).expect("utf-8")
}

/// The status code of a raw HTTP/1.1 response.
fn status(response: &str) -> u16 {
    response
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP/1.1 response: {response:?}"))
}

/// Whether the server still holds `s` open (nothing to read, no EOF).
fn held_open(s: &TcpStream) -> bool {
    matches!(s.try_read(&mut [0; 1]), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

const GET_HEALTHZ: &str = "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

#[tokio::test]
async fn healthz_answers_while_1000_idle_connections_are_held_open() {
    // Both ends of every connection live in this process.
    let limit = crate::fd_limit::raise().expect("raising RLIMIT_NOFILE");
    assert!(
        limit >= 2_100,
        "RLIMIT_NOFILE's hard limit {limit} is too low for this test"
    );
    let shared = Arc::new(Shared::default());
    // A head timeout longer than the test, so the flood stays whole even on
    // a slow machine.
    let limits = Limits {
        header_timeout: Duration::from_secs(120),
        ..Limits::default()
    };
    let (addr, conns) = serve_with(ANY_PORT, Role::Healthz, shared.clone(), limits)
        .await
        .expect("bind");
    let mut idle = Vec::with_capacity(1_000);
    for _ in 0..1_000 {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
    }
    wait_for("the server to hold all 1,000", || conns.len() == 1_000).await;

    let start = Instant::now();
    let answer = timeout(Duration::from_secs(2), exchange(addr, GET_HEALTHZ))
        .await
        .expect("/healthz answered within 2 s");
    eprintln!(
        "/healthz answered in {:?} beside 1,000 idle connections",
        start.elapsed()
    );
    assert_eq!(status(&answer), shared.health.healthz().status, "{answer}");
    assert!(idle.iter().all(held_open), "an idle connection was dropped");
}

#[tokio::test]
async fn a_partial_request_head_is_closed_after_the_header_timeout() {
    let limits = Limits {
        max_connections: 16,
        header_timeout: Duration::from_millis(300),
    };
    let shared = Arc::new(Shared::default());
    let (addr, conns) = serve_with(ANY_PORT, Role::Healthz, shared, limits)
        .await
        .expect("bind");
    let got = exchange(addr, "GET /healthz HTTP/1.1\r\nHost: t\r\n").await;
    assert_eq!(got, "", "closed without an answer");
    wait_for("the table to empty", || conns.len() == 0).await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let limits = Limits {
        max_connections: 16,
        header_timeout: Duration::from_millis(300),
    };
    let shared = Arc::new(Shared::default());
    let (addr, _) = serve_with(ANY_PORT, Role::Healthz, shared, limits)
        .await
        .expect("bind");
    // HEAD: the answer is the head alone, so its end is plain to see.
    let got = exchange(addr, "HEAD /livez HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(got.matches("HTTP/1.1 ").count(), 1, "{got:?}");
    assert!(
        got.ends_with("\r\n\r\n"),
        "one whole answer, then the close: {got:?}"
    );
}

#[tokio::test]
async fn at_the_cap_the_oldest_connection_that_never_asked_is_closed() {
    let limits = Limits {
        max_connections: 4,
        header_timeout: Duration::from_secs(120),
    };
    let shared = Arc::new(Shared::default());
    let (addr, conns) = serve_with(ANY_PORT, Role::Healthz, shared.clone(), limits)
        .await
        .expect("bind");
    // A keep-alive client that has asked once, then three idle ones: full.
    let mut asked = TcpStream::connect(addr).await.expect("connect");
    let head = "HEAD /livez HTTP/1.1\r\nHost: t\r\n\r\n";
    asked.write_all(head.as_bytes()).await.expect("write");
    let mut buf = [0; 1024];
    let n = timeout(HANG, asked.read(&mut buf))
        .await
        .expect("answer")
        .expect("read");
    assert!(
        buf[..n].ends_with(b"\r\n\r\n"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    let mut idle = Vec::new();
    for i in 0..3 {
        idle.push(TcpStream::connect(addr).await.expect("connect"));
        wait_for("the server to hold it", || conns.len() == i + 2).await;
    }

    // A fifth client is answered ...
    let answer = exchange(addr, GET_HEALTHZ).await;
    assert_eq!(status(&answer), shared.health.healthz().status, "{answer}");
    // ... at the expense of the oldest idle connection alone.
    assert_eq!(read_to_close(&mut idle[0]).await, "");
    assert!(idle[1..].iter().all(held_open));
    asked.write_all(head.as_bytes()).await.expect("write");
    let n = timeout(HANG, asked.read(&mut buf))
        .await
        .expect("answer")
        .expect("read");
    let again = String::from_utf8_lossy(&buf[..n]);
    assert_eq!(status(&again), shared.health.livez().status, "{again}");
}

#[test]
fn eviction_prefers_connections_that_never_asked_then_the_longest_unused() {
    let conns = Arc::new(Conns::new(3));
    let (a, mut a_evicted) = Conns::admit(&conns);
    let (b, mut b_evicted) = Conns::admit(&conns);
    let (c, mut c_evicted) = Conns::admit(&conns);
    a.requested();
    c.requested();
    // b never asked: it goes first, though a is older.
    let (d, mut d_evicted) = Conns::admit(&conns);
    assert_eq!(b_evicted.try_recv(), Err(TryRecvError::Closed));
    // Then a, whose last request is older than c's.
    d.requested();
    let (_e, _) = Conns::admit(&conns);
    assert_eq!(a_evicted.try_recv(), Err(TryRecvError::Closed));
    assert_eq!(c_evicted.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(d_evicted.try_recv(), Err(TryRecvError::Empty));
    assert_eq!(conns.len(), 3);
    drop((b, c));
    assert_eq!(conns.len(), 2, "a dropped ticket leaves the table");
}

#[tokio::test]
async fn a_request_head_of_16_kib_is_refused() {
    let shared = Arc::new(Shared::default());
    let (addr, _) = serve_with(ANY_PORT, Role::Healthz, shared, Limits::default())
        .await
        .expect("bind");
    // Exactly the limit and unfinished, so the server reads all of it (a
    // close with unread bytes would reset the connection, and the answer
    // could be lost).
    let mut request = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: ".to_owned();
    request.push_str(&"x".repeat(MAX_HEAD - request.len()));
    let got = exchange(addr, &request).await;
    assert_eq!(status(&got), 431, "{got}");
}

/// kube-proxy's `0.0.0.0:10256` answers IPv6 probes too (Go listens on
/// both families for an unspecified address); an IPv6-only node's kubelet
/// probes the node's IPv6 address.
#[test]
fn privileged_an_unspecified_address_answers_both_families() {
    require_root();
    let ns = TestNetns::new();
    ns.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let any = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0);
            let shared = Arc::new(Shared::default());
            let (addr, _) = serve_with(any, Role::Healthz, shared, Limits::default())
                .await
                .expect("bind");
            for ip in [Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()] {
                let to = SocketAddr::new(ip, addr.port());
                let answer = timeout(HANG, exchange(to, GET_HEALTHZ))
                    .await
                    .unwrap_or_else(|_| panic!("{to} did not answer"));
                assert!(answer.starts_with("HTTP/1.1 "), "{to}: {answer:?}");
            }
        });
    });
}

#[tokio::test]
async fn a_service_health_check_answers_every_path_and_method_from_the_table() {
    let shared = Arc::new(Shared::default());
    let svc = crate::model::ObjectRef::service("shop", "web");
    let hc = crate::model::HealthCheck {
        port: 32000,
        v4: Some(2),
        v6: None,
    };
    shared.service_health.publish([(&svc, &hc)]);
    shared.health.updated();
    let role = Role::ServiceHealth {
        port: 32000,
        family: IpFamily::V4,
    };
    let listener = TcpListener::bind(ANY_PORT).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = spawn(listener, role, shared.clone()).expect("spawn");

    for request in [
        "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "POST /anything/else HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    ] {
        let r = exchange(addr, request).await;
        assert_eq!(status(&r), 200, "{r}");
        assert!(r.contains("x-load-balancing-endpoint-weight: 2\r\n"), "{r}");
        assert!(r.contains("content-type: application/json\r\n"), "{r}");
        assert!(
            r.ends_with("\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"),
            "{r}"
        );
    }

    // No local endpoint left: 503, with the count.
    let none = crate::model::HealthCheck { v4: Some(0), ..hc };
    shared.service_health.publish([(&svc, &none)]);
    let r = exchange(addr, GET_HEALTHZ).await;
    assert_eq!(status(&r), 503, "{r}");
    assert!(r.contains("\"localEndpoints\": 0"), "{r}");

    // The Service is gone: its listener is about to close and answers 503.
    shared.service_health.publish([]);
    assert_eq!(status(&exchange(addr, GET_HEALTHZ).await), 503);
    task.abort();
}
