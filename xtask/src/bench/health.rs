//! `/livez` and `/healthz` latency while the agent starts cold: from the
//! moment its healthz listener is bound until a while after its first full
//! sync, which is when a blocked runtime would keep a probe waiting.
//!
//! Open loop: a new GET on a fresh connection every [`PERIOD`] per path,
//! whether or not the previous one has answered, as several kubelets and
//! load balancers would probe; a closed loop would wait out a stall and
//! record it once. Any status is an answer (`/livez` is 503 until the first
//! sync); the latency runs from `connect` to the end of the response.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use lb_tests::agent::Agent;

/// Time between two probes of one path.
const PERIOD: Duration = Duration::from_millis(10);
/// How long to keep probing after the first sync is done.
const AFTER: Duration = Duration::from_secs(2);
/// A cold start that takes longer than this is a failure of its own.
const LIMIT: Duration = Duration::from_secs(180);
const PATHS: [&str; 2] = ["/livez", "/healthz"];

/// A probe under way: which path, and its (status, latency) once answered.
type Pending = (usize, JoinHandle<Option<(u16, Duration)>>);

/// The answers one path gave.
pub struct Probes {
    pub path: &'static str,
    /// Latencies of the answered probes, sorted.
    pub latencies: Vec<Duration>,
    /// How many answers had each status.
    pub statuses: BTreeMap<u16, usize>,
    /// Probes that got no answer (refused, reset, timed out).
    pub failed: usize,
}

/// What a cold start looked like from outside.
pub struct ColdStart {
    /// From `start` until the first full sync was seen in the log.
    pub programmed: Duration,
    pub probes: Vec<Probes>,
}

/// Waits for the agent's healthz listener, then probes both paths until
/// [`AFTER`] past its first sync.
pub fn probe_cold_start(agent: &mut Agent, start: Instant) -> anyhow::Result<ColdStart> {
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
    let mut next = Instant::now();
    loop {
        for (i, path) in PATHS.iter().enumerate() {
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
        .map(|path| Probes {
            path,
            latencies: Vec::new(),
            statuses: BTreeMap::new(),
            failed: 0,
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

/// One GET on a fresh connection: (status, latency), or `None` if it got no
/// answer.
fn probe(addr: SocketAddr, path: &str) -> Option<(u16, Duration)> {
    let start = Instant::now();
    let (status, _) = lb_tests::http::get(addr, path).ok()?;
    Some((status, start.elapsed()))
}
