//! `/livez` and `/healthz` latency while the agent starts cold: from the
//! moment its healthz listener is bound until a while after its first full
//! sync, which is when a blocked runtime would keep a probe waiting.
//!
//! Open loop: a new GET on a fresh connection every [`PERIOD`] per path,
//! whether or not the previous one has answered, as several kubelets and
//! load balancers would probe; a closed loop would wait out a stall and
//! record it once. Any status is an answer (`/livez` is 503 until the first
//! sync); the latency runs from `connect` to the end of the response.
//!
//! But at most [`IN_FLIGHT`] probes per path are pending: while the agent
//! does not accept, connections queue in the listen backlog (128 for the
//! agent's listeners), and once it is full the kernel drops SYNs, which
//! the client resends after 1, 3, 7 s. Those delays are the prober's own
//! doing; they would hide how long the agent really did not answer. A
//! skipped probe is counted.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use lb_tests::agent::Agent;

use super::results::control::Probes;

/// Time between two probes of one path.
const PERIOD: Duration = Duration::from_millis(10);
/// How long to keep probing after the first sync is done.
const AFTER: Duration = Duration::from_secs(2);
/// A cold start that takes longer than this is a failure of its own.
const LIMIT: Duration = Duration::from_secs(180);
const PATHS: [&str; 2] = ["/livez", "/healthz"];
/// Pending probes per path, both paths well inside a backlog of 128.
const IN_FLIGHT: usize = 50;
/// A probe unanswered for this long is given up.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A probe under way: which path, and its (status, latency) once answered.
type Pending = (usize, JoinHandle<Option<(u16, Duration)>>);

/// What a cold start looked like from outside.
pub(super) struct ColdStart {
    /// From `start` until the first full sync was seen in the log.
    pub programmed: Duration,
    pub probes: Vec<Probes>,
}

/// Waits for the agent's healthz listener, then probes both paths until
/// [`AFTER`] past its first sync.
pub(super) fn probe_cold_start(agent: &mut Agent, start: Instant) -> anyhow::Result<ColdStart> {
    // The listener is bound just before the agent logs its address: poll
    // the (still short) log often, so probing starts right after the bind.
    while !agent.log_text().contains("serving /metrics") {
        anyhow::ensure!(
            start.elapsed() < LIMIT,
            "the agent never bound its listeners:\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let addr = agent.bound("healthz")?;
    let mut pending: Vec<Pending> = Vec::new();
    let mut programmed = None;
    let mut skipped = [0; PATHS.len()];
    let mut next = Instant::now();
    loop {
        for (i, path) in PATHS.iter().enumerate() {
            let in_flight = pending
                .iter()
                .filter(|(p, h)| *p == i && !h.is_finished())
                .count();
            if in_flight >= IN_FLIGHT {
                skipped[i] += 1;
                continue;
            }
            pending.push((i, std::thread::spawn(move || probe(addr, path))));
        }
        if programmed.is_none() && agent.syncs() > 0 {
            programmed = Some(start.elapsed());
        }
        if programmed.is_some_and(|p| start.elapsed() >= p + AFTER) {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < LIMIT,
            "no first sync within {LIMIT:?}:\n{}",
            agent.log_text()
        );
        next = (next + PERIOD).max(Instant::now());
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let mut probes: Vec<Probes> = PATHS
        .iter()
        .zip(skipped)
        .map(|(path, skipped)| Probes {
            path,
            latencies: Vec::new(),
            statuses: BTreeMap::new(),
            failed: 0,
            skipped,
        })
        .collect();
    for (i, handle) in pending {
        let p = &mut probes[i];
        match handle.join().expect("a probe thread panicked") {
            Some((status, latency)) => {
                p.latencies.push(latency);
                *p.statuses.entry(status).or_default() += 1;
            }
            None => p.failed += 1,
        }
    }
    for p in &mut probes {
        p.latencies.sort_unstable();
    }
    Ok(ColdStart {
        programmed: programmed.expect("the loop ends after the first sync"),
        probes,
    })
}

/// One GET on a fresh loopback connection: (status, latency), or `None` if
/// it got no answer.
fn probe(addr: SocketAddr, path: &str) -> Option<(u16, Duration)> {
    assert!(addr.ip().is_loopback(), "probing non-loopback {addr}");
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).ok()?;
    s.set_read_timeout(Some(TIMEOUT)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let latency = start.elapsed();
    // "HTTP/1.1 200 OK"
    let status = std::str::from_utf8(raw.get(9..12)?).ok()?.parse().ok()?;
    Some((status, latency))
}
