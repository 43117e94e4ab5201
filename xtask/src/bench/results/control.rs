//! The control plane's results: cold programming, one-endpoint updates,
//! the agent's memory and its health endpoints during the cold start.

use std::{collections::BTreeMap, time::Duration};

/// One way of programming, with its timings.
pub(crate) struct Cold {
    pub what: &'static str,
    /// Until the dataplane holds everything, from the start of the step.
    pub wall: Duration,
    /// The part spent computing and writing (ours: the first full sync).
    pub write: Option<Duration>,
    /// Ours: the agent's memory once programmed.
    pub rss: Option<Rss>,
    /// Ours: `/livez` and `/healthz` latencies during the cold start.
    pub health: Vec<Probes>,
}

/// Per-change latencies until the dataplane reflects one endpoint change.
pub(crate) struct Update {
    pub what: &'static str,
    pub samples: Vec<Duration>,
}

/// The control plane section: cold programming and endpoint updates of
/// N x E.
pub(crate) struct Control {
    pub services: usize,
    pub endpoints: usize,
    pub cold: Vec<Cold>,
    pub updates: Vec<Update>,
}

/// Resident set size in bytes: now, and the peak so far.
pub(crate) struct Rss {
    pub current: u64,
    pub peak: u64,
}

/// The answers one path gave.
pub(crate) struct Probes {
    pub path: &'static str,
    /// Latencies of the answered probes, sorted.
    pub latencies: Vec<Duration>,
    /// How many answers had each status.
    pub statuses: BTreeMap<u16, usize>,
    /// Probes that got no answer (refused, reset, or none within its timeout).
    pub failed: usize,
    /// Probes not sent because too many were pending.
    pub skipped: usize,
}
