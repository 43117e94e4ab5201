//! A target of the bench: what is aimed at, what was measured, and whether
//! it was met. Measured, not asserted: the report lists each as met or
//! missed. Each section's are evaluated from its results alone; [`all`]
//! gathers a run's.

pub(super) mod all;
pub(super) mod connect;
pub(super) mod control;
pub(super) mod datapath;
pub(super) mod nodeport;
pub(super) mod pps;
pub(super) mod scale;

use std::time::Duration;

/// One target, evaluated.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Target {
    /// What is aimed at, e.g. "ours >= nftables at N=1 (TCP)".
    pub goal: String,
    pub measured: Measured,
    pub met: bool,
}

/// A measured figure, typed by how the report shows it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Measured {
    /// A ratio, shown as "1.23x".
    Times(f64),
    /// A fraction, shown as a percentage: "97.5%".
    Percent(f64),
    /// A time, shown in ms.
    Time(Duration),
    /// A time, shown in s.
    Seconds(Duration),
    /// Bytes, shown in MiB.
    Mib(u64),
    /// Nanoseconds per packet.
    Nanos(f64),
    /// Several figures at once, already worded.
    Text(String),
    /// Nothing to compare.
    Missing,
}

impl Target {
    pub(super) fn new(goal: impl Into<String>, measured: Measured, met: bool) -> Self {
        Self {
            goal: goal.into(),
            measured,
            met,
        }
    }

    /// Met if `value >= bound`.
    pub(super) fn at_least(
        goal: impl Into<String>,
        value: f64,
        bound: f64,
        shown: Measured,
    ) -> Self {
        Self::new(goal, shown, value >= bound)
    }

    /// Met if `value <= bound`.
    pub(super) fn at_most(
        goal: impl Into<String>,
        value: f64,
        bound: f64,
        shown: Measured,
    ) -> Self {
        Self::new(goal, shown, value <= bound)
    }

    /// Met if `took <= bound`.
    pub(super) fn within(goal: impl Into<String>, took: Duration, bound: Duration) -> Self {
        Self::new(goal, Measured::Time(took), took <= bound)
    }
}
