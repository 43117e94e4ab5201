//! The cold start's timeline, logged once after the first sync, so that the
//! time until programmed can be broken down (the bench reads the line):
//! the programs loaded, both initial lists received (and parsed), the model
//! built from them, the first sync computed and written. All are measured
//! from the start of the sync thread; the programs load while the lists
//! are read.

use std::time::{Duration, Instant};

use tracing::info;

pub(super) struct ColdStart {
    t0: Instant,
    programs: Option<Duration>,
    /// When the last change before both lists were in was received, and
    /// when the model had applied it.
    listed: Option<(Duration, Duration)>,
    logged: bool,
}

impl ColdStart {
    pub(super) fn new() -> Self {
        Self {
            t0: Instant::now(),
            programs: None,
            listed: None,
            logged: false,
        }
    }

    pub(super) fn programs_loaded(&mut self) {
        self.programs = Some(self.t0.elapsed());
    }

    /// After a batch of changes, the last of them received at `received`,
    /// was applied: the first time the model is `ready`, both lists are in.
    pub(super) fn applied(&mut self, ready: bool, received: Option<Instant>) {
        if self.listed.is_none() && ready {
            let received = received.map_or(Duration::ZERO, |r| r.duration_since(self.t0));
            self.listed = Some((received, self.t0.elapsed()));
        }
    }

    /// After a sync that took `took`: the first one ends the cold start.
    pub(super) fn synced(&mut self, took: Duration) {
        if self.logged {
            return;
        }
        self.logged = true;
        let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis() as u64);
        info!(
            programs_ms = ms(self.programs),
            lists_ms = ms(self.listed.map(|l| l.0)),
            model_ms = ms(self.listed.map(|l| l.1)),
            first_sync_ms = took.as_millis() as u64,
            programmed_ms = self.t0.elapsed().as_millis() as u64,
            "cold start timeline (from the sync thread's start)"
        );
    }
}
