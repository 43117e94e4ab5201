//! The time from each change to the maps showing it.

use std::fmt::Write as _;

use super::{ms, percentile};
use crate::soak::{
    converge::{Kind, Record},
    outcome::Results,
};

pub(super) fn render(o: &mut String, r: &Results, t: &dyn Fn(u64) -> f64) {
    let _ = writeln!(o, "## Convergence\n");
    let _ = writeln!(
        o,
        "From each change (or, for a change the agent could not see yet, from the moment it could: the agent restarted, the apiserver back, the watches released) until a read of the pinned maps shows it. While a change is in flight its frontends are read every 2 ms ({}), while a disturbance waits for every Service all frontends are ({}): the figures include that much polling. A change a disturbance caught in flight has its clock restarted when the agent can see it again. Changes are shown apart by when they were made: with the agent settled; while it caught up after a disturbance (reconnecting, relisting); or during a disturbance.\n",
        reads(r, false),
        reads(r, true)
    );
    let _ = writeln!(
        o,
        "| change | count | p50 | p90 | p99 | max | over 1 s | never | clock restarted |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let records = r.tracker.records();
    for kind in Kind::ALL {
        let of: Vec<_> = records.iter().filter(|x| x.kind == kind).collect();
        if of.is_empty() {
            continue;
        }
        // A change made while the agent could see it and was not catching
        // up, apart from one made while it was, or during a disturbance,
        // or caught in flight by one.
        let during = |x: &&Record| x.clock_ns != Some(x.made_ns) || x.interrupted;
        let group = |f: &dyn Fn(&&Record) -> bool| of.iter().copied().filter(f).collect();
        let groups: Vec<(String, Vec<&Record>)> = if kind.is_change() {
            vec![
                (
                    kind.name().to_owned(),
                    group(&|x| !during(x) && !x.catching_up),
                ),
                (
                    format!(
                        "{}, while the agent caught up after a disturbance",
                        kind.name()
                    ),
                    group(&|x| !during(x) && x.catching_up),
                ),
                (
                    format!("{}, during a disturbance", kind.name()),
                    group(&during),
                ),
            ]
        } else {
            vec![(kind.name().to_owned(), of)]
        };
        for (name, of) in groups {
            if of.is_empty() {
                continue;
            }
            let mut took: Vec<u64> = of.iter().filter_map(|x| x.took_ns()).collect();
            took.sort_unstable();
            let never = of.iter().filter(|x| x.resolved_ns.is_none()).count();
            let interrupted = of.iter().filter(|x| x.interrupted).count();
            let over = took.iter().filter(|n| **n > 1_000_000_000).count();
            let _ = writeln!(
                o,
                "| {name} | {} | {} | {} | {} | {} | {over} | {never} | {interrupted} |",
                of.len(),
                ms(percentile(&took, 50.0)),
                ms(percentile(&took, 90.0)),
                ms(percentile(&took, 99.0)),
                ms(took.last().copied().unwrap_or(0)),
            );
        }
    }
    let mut slowest: Vec<_> = records.iter().filter(|x| x.took_ns().is_some()).collect();
    slowest.sort_by_key(|x| std::cmp::Reverse(x.took_ns()));
    let _ = writeln!(o, "\nSlowest:\n");
    for x in slowest.iter().take(8) {
        let _ = writeln!(
            o,
            "* {} ({}): {} from {:.2} s{}",
            x.kind.name(),
            x.svc.as_deref().unwrap_or("all Services"),
            ms(x.took_ns().unwrap_or(0)),
            t(x.clock_ns.unwrap_or(0)),
            if x.interrupted {
                ", clock restarted"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        o,
        "\nReads of the maps that differed from the Services with no change in flight (drift): {}.",
        r.tracker.drift.len()
    );
    for (at, vips) in r.tracker.drift.iter().take(10) {
        let _ = writeln!(o, "* {:.2} s: {vips:?}", t(*at));
    }
    let _ = writeln!(
        o,
        "\nReads of the maps that failed: {}{}.\n",
        r.read_errors.0,
        r.read_errors
            .1
            .first()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
}

/// How long reads of the maps took.
fn reads(r: &Results, full: bool) -> String {
    let mut us: Vec<u64> = r
        .reads
        .iter()
        .filter(|(f, _)| *f == full)
        .map(|(_, us)| u64::from(*us) * 1000)
        .collect();
    us.sort_unstable();
    format!(
        "{} reads, each took {} (p50; p99 {})",
        us.len(),
        ms(percentile(&us, 50.0)),
        ms(percentile(&us, 99.0))
    )
}
