//! Frontends whose last write failed, and when to try each again.
//!
//! A frontend refused by a full map waits for room: it is retried with
//! backoff, and at once whenever entries are deleted. Each full map is
//! logged once when it starts refusing and once when every frontend that
//! waited for it is written, however many frontends and retries lie
//! between; the metrics count each frontend once per wait. Other write
//! errors are logged within a budget and counted at every attempt.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use tracing::{debug, error, info};

use crate::{log_budget::LogBudget, metrics::Metrics, model::Frontend, reconcile::StoreError};

/// First retry of a frontend whose write failed; doubles up to [`RETRY_MAX`].
pub(super) const RETRY_FIRST: Duration = Duration::from_secs(1);
pub(super) const RETRY_MAX: Duration = Duration::from_secs(60);
/// At most this many write errors (other than a full map) are logged per
/// [`FAILURE_LOG_WINDOW`]; the metrics count every one.
const FAILURE_LOG_LINES: u32 = 10;
const FAILURE_LOG_WINDOW: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
struct Retry {
    attempts: u32,
    next: Instant,
    /// The map that refused the last attempt because it is full.
    full: Option<&'static str>,
}

#[derive(Debug)]
pub(super) struct Retries {
    failed: BTreeMap<Frontend, Retry>,
    /// Maps that refused a frontend still waiting, as last logged.
    full_maps: BTreeSet<&'static str>,
    log: LogBudget,
}

impl Default for Retries {
    fn default() -> Self {
        Self {
            failed: BTreeMap::new(),
            full_maps: BTreeSet::new(),
            log: LogBudget::new(FAILURE_LOG_LINES, FAILURE_LOG_WINDOW),
        }
    }
}

impl Retries {
    pub(super) fn len(&self) -> usize {
        self.failed.len()
    }

    /// When the earliest failed frontend is due.
    pub(super) fn next(&self) -> Option<Instant> {
        self.failed.values().map(|r| r.next).min()
    }

    pub(super) fn due(&self, now: Instant) -> impl Iterator<Item = Frontend> + '_ {
        self.failed
            .iter()
            .filter(move |(_, r)| r.next <= now)
            .map(|(fe, _)| *fe)
    }

    /// Entries were deleted: what waits for room is due now.
    pub(super) fn room_freed(&mut self, now: Instant) {
        for r in self.failed.values_mut().filter(|r| r.full.is_some()) {
            r.next = now;
        }
    }

    /// Forgets what was written (`touched`: the frontends a partial sync
    /// tried; `None`: a full sync, which tried everything), schedules what
    /// `failed`, and logs and counts it.
    pub(super) fn track(
        &mut self,
        touched: Option<&BTreeSet<Frontend>>,
        failed: &[(Frontend, Arc<StoreError>)],
        now: Instant,
        m: &Metrics,
    ) {
        let failing: BTreeSet<&Frontend> = failed.iter().map(|(fe, _)| fe).collect();
        match touched {
            None => self.failed.retain(|fe, _| failing.contains(fe)),
            Some(touched) => {
                for fe in touched.iter().filter(|fe| !failing.contains(fe)) {
                    self.failed.remove(fe);
                }
            }
        }
        for (fe, e) in failed {
            let before = self.failed.get(fe);
            let attempts = before.map_or(1, |r| r.attempts.saturating_add(1));
            let backoff = RETRY_FIRST
                .saturating_mul(1 << attempts.saturating_sub(1).min(16))
                .min(RETRY_MAX);
            let full = match e.as_ref() {
                StoreError::Full { map } => Some(*map),
                _ => None,
            };
            match full {
                Some(map) => {
                    if before.is_none_or(|r| r.full.is_none()) {
                        m.map_full_errors.inc();
                    }
                    debug!(frontend = %fe, map, attempts, "waits for room");
                }
                None => {
                    m.map_write_errors.inc();
                    if let Some(suppressed) = self.log.allow(now) {
                        error!(
                            frontend = %fe,
                            attempts,
                            retry_in_s = backoff.as_secs(),
                            suppressed,
                            error = e.as_ref() as &dyn std::error::Error,
                            "not updated, keeps its previous state"
                        );
                    }
                }
            }
            self.failed.insert(
                *fe,
                Retry {
                    attempts,
                    next: now + backoff,
                    full,
                },
            );
        }
        self.report_full_maps(m);
    }

    /// Logs each map that starts or stops refusing, and sets the gauge.
    fn report_full_maps(&mut self, m: &Metrics) {
        let mut waiting: BTreeMap<&'static str, usize> = BTreeMap::new();
        for map in self.failed.values().filter_map(|r| r.full) {
            *waiting.entry(map).or_default() += 1;
        }
        for (map, frontends) in &waiting {
            if !self.full_maps.contains(map) {
                error!(
                    map,
                    frontends,
                    "map is full: these frontends keep their previous state (none, if new) \
                     and are written as soon as entries are freed; programmed ones are \
                     untouched. Raise its --bpf-lb-*-map-max to make room"
                );
            }
        }
        for map in &self.full_maps {
            if !waiting.contains_key(map) {
                info!(map, "no frontend waits for room in this map any more");
            }
        }
        self.full_maps = waiting.keys().copied().collect();
        m.frontends_waiting_for_room
            .set(waiting.values().sum::<usize>() as f64);
    }
}
