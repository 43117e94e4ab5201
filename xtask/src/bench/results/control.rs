//! The control plane's results: cold programming, one-endpoint updates,
//! the agent's memory and its health endpoints during the cold start.

use std::{collections::BTreeMap, time::Duration};

/// One way of programming, with its timings.
pub(crate) struct Cold {
    pub what: &'static str,
    /// Until the dataplane holds everything, from the start of the step.
    pub wall: Duration,
    /// Ours: where the time went, from the agent's timeline.
    pub phases: Option<Phases>,
    /// Ours: the agent's memory once programmed.
    pub rss: Option<Rss>,
    /// Ours: `/livez` and `/healthz` latencies during the cold start.
    pub health: Vec<Probes>,
}

/// Ours: the cold start's timeline, as the agent logs it, each from the
/// start of its sync thread (the programs load while the lists are read).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Phases {
    /// The programs loaded and verified, the maps opened or created.
    pub programs: Duration,
    /// Both initial lists received and parsed.
    pub lists: Duration,
    /// The model built from them.
    pub model: Duration,
    /// The first full sync (compute and write) alone.
    pub first_sync: Duration,
    /// The first full sync done.
    pub programmed: Duration,
}

impl Phases {
    /// The figures of the agent's `cold start timeline` log line.
    pub(crate) fn from_log(log: &str) -> Option<Self> {
        let line = log.lines().find(|l| l.contains("cold start timeline"))?;
        let ms = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
                .map(Duration::from_millis)
        };
        Some(Self {
            programs: ms("programs_ms")?,
            lists: ms("lists_ms")?,
            model: ms("model_ms")?,
            first_sync: ms("first_sync_ms")?,
            programmed: ms("programmed_ms")?,
        })
    }
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
