//! The report as Markdown (and its charts), from results and targets
//! alone: nothing here measures.

pub(super) mod chart;
pub(super) mod connect;
mod control;
mod datapath;
mod nodeport;
mod phases;
mod plot;
pub(super) mod pps;
pub(super) mod pps_chart;
pub(super) mod report;
pub(super) mod scale;
pub(super) mod scale_chart;

use std::fmt::Write as _;

use super::{
    rounds::Rounds,
    targets::{Measured, Target},
    units::{mib, ms},
};

/// The cells a rate table shows of one mode at `n` for `load`: its rate
/// (the median over rounds), that against direct's and ours', the spread
/// between rounds, its latency p50 and p99.
fn rate_cells<L: Copy + PartialEq>(
    n: usize,
    name: &str,
    load: L,
    [r, direct, ours]: [&Rounds<L>; 3],
) -> String {
    let (lo, hi) = r.spread(load);
    format!(
        "| {n} | {name} | {:.0} | {:.2} | {:.2} | {lo:.0}-{hi:.0} | {:.1} | {:.1} |",
        r.rate(load),
        r.rate(load) / direct.rate(load),
        r.rate(load) / ours.rate(load),
        r.p50(load),
        r.p99(load),
    )
}

/// The targets list of the report.
fn write_targets(o: &mut String, targets: &[Target]) {
    let _ = writeln!(o, "### Targets (measured, not asserted)\n");
    for t in targets {
        let _ = writeln!(
            o,
            "- [{}] {}: {}",
            if t.met { "met" } else { "MISSED" },
            t.goal,
            measured(&t.measured)
        );
    }
}

/// A measured figure as the targets list shows it.
pub(super) fn measured(m: &Measured) -> String {
    match m {
        Measured::Times(x) => format!("{x:.2}x"),
        Measured::Percent(f) => format!("{:.1}%", f * 100.0),
        Measured::Time(d) => ms(*d),
        Measured::Seconds(d) => format!("{:.1} s", d.as_secs_f64()),
        Measured::Mib(bytes) => format!("{:.0} MiB", mib(*bytes)),
        Measured::Nanos(ns) => format!("{ns:.0} ns"),
        Measured::Text(s) => s.clone(),
        Measured::Missing => "not measured".into(),
    }
}
