//! What our programs cost per call, from the kernel's own BPF statistics:
//! the `run_time_ns` and `run_cnt` that `bpftool prog show` prints once
//! `kernel.bpf_stats_enabled` is on.

use std::{os::fd::OwnedFd, path::Path, time::Duration};

use anyhow::Context as _;
use aya::{
    programs::{
        ProgramInfo,
        links::{FdLink, PinnedLink},
        loaded_programs,
    },
    sys::{Stats, enable_stats},
};

/// The kernel counts run time and runs of every BPF program while this
/// lives (`BPF_ENABLE_STATS`; it adds two clock reads to each run).
pub struct StatsOn(#[expect(dead_code, reason = "held for its Drop")] OwnedFd);

impl StatsOn {
    pub fn enable() -> anyhow::Result<Self> {
        Ok(Self(
            enable_stats(Stats::RunTime).context("BPF_ENABLE_STATS (needs root)")?,
        ))
    }
}

/// A program's counters at one moment; the difference of two is what ran
/// in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Runs {
    pub time: Duration,
    pub count: u64,
}

impl Runs {
    /// The counters of the program attached through the link pinned at
    /// `link` (e.g. the agent's `links/connect4`).
    pub fn of_link(link: &Path) -> anyhow::Result<Self> {
        let pinned = PinnedLink::from_pin(link)
            .with_context(|| format!("opening the link pinned at {}", link.display()))?;
        let id = FdLink::from(pinned)
            .info()
            .with_context(|| format!("reading the link at {}", link.display()))?
            .program_id();
        let info: ProgramInfo = loaded_programs()
            .filter_map(Result::ok)
            .find(|p| p.id() == id)
            .with_context(|| format!("program {id} of {} is gone", link.display()))?;
        Ok(Self {
            time: info.run_time(),
            count: info.run_count(),
        })
    }

    /// What ran between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            time: self.time.saturating_sub(earlier.time),
            count: self.count.saturating_sub(earlier.count),
        }
    }

    /// Mean nanoseconds per run; NaN without runs.
    pub fn ns_per_run(self) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        self.time.as_nanos() as f64 / self.count as f64
    }
}
