//! The long soak's judgement of its one agent, and the agent and its
//! maps over time.

use std::fmt::Write as _;

use crate::soak::{
    flatness::{EXCESS_GROWTH, FDS_GROWTH, MIN_PER_THIRD, RSS_GROWTH},
    observe::Sample,
    outcome::Results,
};

/// Rows of the table over time.
const ROWS: usize = 20;

pub(super) fn render(o: &mut String, r: &Results) {
    let Some(flat) = r.flatness() else {
        return;
    };
    let _ = writeln!(o, "## Flatness of the one agent\n");
    match flat {
        Err(e) => {
            let _ = writeln!(o, "Not judged: {e}.\n");
        }
        Ok(f) => {
            let _ = writeln!(
                o,
                "After a {:.0} s warm-up, the samples' first third ({:.0} to {:.0} s, {} samples) against their last ({:.0} to {:.0} s): the last third's median may exceed the first's by {:.0} % for RSS, {FDS_GROWTH:.0} for open fds and {EXCESS_GROWTH:.0} for each map's entries beyond what the live Services need; the fds and the entries at the settled samples only, taken with nothing in flight or held back ({} and {} of them: an outage closes the agent's watch connections, and a deletion made meanwhile stays in the maps until the apiserver is back). The reverse-NAT map is an LRU that fills to its capacity by design: shown below, not judged.\n",
                f.warmup.as_secs_f64(),
                f.first.0,
                f.first.1,
                f.per_third,
                f.last.0,
                f.last.1,
                RSS_GROWTH * 100.0,
                f.settled.0,
                f.settled.1,
            );
            let _ = writeln!(
                o,
                "| | first third (median) | last third (median) | limit | |\n|---|---:|---:|---:|---|"
            );
            for c in &f.checks {
                let _ = writeln!(
                    o,
                    "| {} | {:.1} | {:.1} | {:.1} | {} |",
                    c.name,
                    c.first,
                    c.last,
                    c.limit,
                    if c.ok() { "flat" } else { "**grew**" }
                );
            }
            if !f.unjudged.is_empty() {
                let _ = writeln!(
                    o,
                    "\nNot judged, for want of {MIN_PER_THIRD} settled samples in both thirds: {}.",
                    f.unjudged.join(", ")
                );
            }
            o.push('\n');
        }
    }
    over_time(o, r);
}

/// Up to [`ROWS`] samples spread over the run.
fn over_time(o: &mut String, r: &Results) {
    let live: Vec<&Sample> = r.samples.iter().filter(|s| s.pid != 0).collect();
    if live.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Over time ({} samples in all, every one in `samples.csv`; entries with what the live Services need in parentheses):\n",
        live.len()
    );
    let _ = writeln!(
        o,
        "| t | RSS | fds | frontends | states | slots | backends | members | affinity | reverse NAT (counted every 30 s) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    let step = live.len().div_ceil(ROWS).max(1);
    let mut rows: Vec<&Sample> = live.iter().step_by(step).copied().collect();
    if let Some(last) = live.last()
        && rows.last().map(|s| s.t_ns) != Some(last.t_ns)
    {
        rows.push(last);
    }
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    // Minutes in a long run, seconds in a short one.
    let ran = r.traffic_ns.1.saturating_sub(r.traffic_ns.0) as f64 / 1e9;
    let at = |t_ns: u64| {
        let s = t_ns.saturating_sub(r.traffic_ns.0) as f64 / 1e9;
        if ran >= 600.0 {
            format!("{:.1} min", s / 60.0)
        } else {
            format!("{s:.0} s")
        }
    };
    for s in rows {
        let (f, sl, b) = s.needed;
        let e = s.entries;
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            at(s.t_ns),
            opt(s.rss_kib.map(|v| format!("{:.1} MiB", v as f64 / 1024.0))),
            opt(s.fds.map(|v| v.to_string())),
            opt(e.map(|e| format!("{} ({f})", e.frontends))),
            opt(e.map(|e| format!("{} ({f})", e.states))),
            opt(e.map(|e| format!("{} ({sl})", e.slots))),
            opt(e.map(|e| format!("{} ({b})", e.backends))),
            opt(e.map(|e| e.members.to_string())),
            opt(e.map(|e| e.affinity.to_string())),
            opt(e.and_then(|e| e.revnat).map(|v| v.to_string())),
        );
    }
    o.push('\n');
}
