//! The soak's report, in Markdown (`render`), and its raw data as CSV
//! (`csv.rs`). One file per section.

mod agent;
mod convergence;
mod csv;
mod disturbances;
mod long;
mod requests;

use std::fmt::Write as _;

pub use csv::{changes_csv, samples_csv};

use super::{outcome::Results, plan::Mode};

/// How a figure is written.
pub(super) type Unit<'a> = &'a dyn Fn(f64) -> String;

/// Nearest-rank percentile of sorted values; 0 without any.
pub(super) fn percentile(sorted: &[u64], p: f64) -> u64 {
    crate::percentile::percentile(sorted, p).unwrap_or(0)
}

pub(super) fn ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// first, min, max, last of a series.
pub(super) fn fmml(v: &[f64], unit: impl Fn(f64) -> String) -> String {
    match (v.first(), v.last()) {
        (Some(f), Some(l)) => {
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!(
                "| {} | {} | {} | {} |",
                unit(*f),
                unit(min),
                unit(max),
                unit(*l)
            )
        }
        _ => "| - | - | - | - |".into(),
    }
}

pub fn render(r: &Results) -> String {
    let mut o = String::new();
    let t = |ns: u64| (ns.saturating_sub(r.traffic_ns.0)) as f64 / 1e9;
    let ran = (r.traffic_ns.1 - r.traffic_ns.0) as f64 / 1e9;
    let long = r.plan.mode == Mode::Long;
    let _ = writeln!(
        o,
        "# {}\n",
        if long {
            "Long soak: one agent through the run"
        } else {
            "Chaos soak"
        }
    );
    let _ = writeln!(
        o,
        "Seed {} (`cargo xtask soak{} --minutes {} --seed {}` replays the same sequence of \
         disturbances), {} min of disturbances; traffic ran {ran:.0} s from {} (the times below \
         count from then), after {:.0} s of setup. Agent: `{}`. Load average at the end: {}.\n",
        r.seed,
        if long { " --long" } else { "" },
        r.plan.minutes,
        r.seed,
        r.plan.minutes,
        jiff::Timestamp::try_from(r.traffic_unix)
            .map_or_else(|_| "?".into(), |t| format!("{t:.3}")),
        r.setup.as_secs_f64(),
        r.agent_bin.display(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let verdict = r.verdict();
    if verdict.is_empty() {
        let _ = writeln!(
            o,
            "**PASS**: no request to a Service with a serving endpoint failed, every answer came from a backend of its Service while it served, every change was programmed, and the maps hold exactly what the live Services need{}.\n",
            if long {
                "; the agent's RSS, open fds and the maps' entries beyond need stayed flat"
            } else {
                ""
            }
        );
    } else {
        let _ = writeln!(o, "**FAIL**:\n");
        for why in &verdict {
            let _ = writeln!(o, "* {why}");
        }
        o.push('\n');
    }

    disturbances::render(&mut o, r);
    requests::render(&mut o, r, &t);
    convergence::render(&mut o, r, &t);
    long::render(&mut o, r);
    agent::render(&mut o, r);
    let _ = writeln!(o, "## Datapath counters at the end\n");
    for (name, n) in r.stats.iter() {
        let _ = writeln!(o, "* `{name}`: {n}");
    }
    let _ = writeln!(o, "\n## Agent and apiserver log\n");
    for (at, what) in &r.events {
        if what.contains("agent")
            || what.contains("apiserver")
            || what.contains("watches")
            || what.contains("relist")
        {
            let _ = writeln!(o, "* {:.1} s: {what}", t(*at));
        }
    }
    o
}
