//! What was done to the agent, the apiserver and the workload.

use std::fmt::Write as _;

use super::{ms, percentile};
use crate::soak::{converge::Kind, outcome::Results};

pub(super) fn render(o: &mut String, r: &Results) {
    let c = &r.counts;
    let mut sorted: Vec<u64> = r.agents[1..]
        .iter()
        .filter_map(|a| Some(a.first_sync_ns? - a.started_ns))
        .collect();
    sorted.sort_unstable();
    let killed_early = r.agents[1..]
        .iter()
        .filter(|a| a.first_sync_ns.is_none() && a.killed_ns.is_some())
        .count();
    let outages: Vec<f64> = c.outages.iter().map(|d| d.as_secs_f64()).collect();
    let _ = writeln!(o, "## Disturbances\n");
    let _ = writeln!(o, "| disturbance | count | details |\n|---|---:|---|");
    if r.plan.restarts() {
        let _ = writeln!(
            o,
            "| agent SIGKILL, restart | {} | first sync after the restart: p50 {}, max {}; killed before its first sync: {killed_early} |",
            r.agents.len() - 1,
            ms(percentile(&sorted, 50.0)),
            ms(sorted.last().copied().unwrap_or(0)),
        );
    } else {
        let _ = writeln!(
            o,
            "| agent SIGKILL, restart | {} | none planned: one agent through the run |",
            r.agents.len() - 1
        );
    }
    let _ = writeln!(
        o,
        "| apiserver outage | {} | {:.1} to {:.1} s, {:.0} s in all |",
        outages.len(),
        outages.iter().copied().fold(f64::INFINITY, f64::min),
        outages.iter().copied().fold(0.0, f64::max),
        outages.iter().sum::<f64>()
    );
    let _ = writeln!(
        o,
        "| forced relist (history compacted, watches closed: 410) | {} | LISTs of Services served in all: {} |",
        c.relists, r.lists
    );
    let _ = writeln!(
        o,
        "| rolling update | {} | pods replaced: {} |",
        c.rollouts, c.pods_replaced
    );
    let _ = writeln!(o, "| Service created | {} | |", c.created);
    let _ = writeln!(o, "| Service deleted | {} | |", c.deleted);
    let _ = writeln!(
        o,
        "\nSlice changes with nothing for the maps to show (a terminating endpoint leaving the slice): {}.\n",
        c.invisible_changes
    );
    let _ = writeln!(
        o,
        "The agent watching again (the stand-in apiserver saw a new watch of Services and of EndpointSlices, and both open) after:\n"
    );
    for kind in [Kind::AgentRestart, Kind::OutageEnd, Kind::Relist] {
        let mut took: Vec<u64> = c
            .back
            .iter()
            .filter(|(k, _, _)| *k == kind)
            .filter_map(|(_, from, to)| Some(to.as_ref()? - from))
            .collect();
        took.sort_unstable();
        let never = c
            .back
            .iter()
            .filter(|(k, _, to)| *k == kind && to.is_none())
            .count();
        let _ = writeln!(
            o,
            "* {}: p50 {}, max {} ({} times{})",
            match kind {
                Kind::AgentRestart => "an agent restart",
                Kind::OutageEnd => "the apiserver's return",
                _ => "a forced relist",
            },
            ms(percentile(&took, 50.0)),
            ms(took.last().copied().unwrap_or(0)),
            took.len(),
            if never > 0 {
                format!(", {never} never")
            } else {
                String::new()
            }
        );
    }
    o.push('\n');
    let mut starts: Vec<u64> = c.pod_starts.iter().map(|d| d.as_nanos() as u64).collect();
    starts.sort_unstable();
    let mut late = c.late_ns.clone();
    late.sort_unstable();
    let _ = writeln!(
        o,
        "One thread makes every change: a pod took {} to start (p50; p99 {}, max {}), and a step ran {} after its time (p50; p99 {}, max {}), so disturbances can last a little longer than drawn.\n",
        ms(percentile(&starts, 50.0)),
        ms(percentile(&starts, 99.0)),
        ms(starts.last().copied().unwrap_or(0)),
        ms(percentile(&late, 50.0)),
        ms(percentile(&late, 99.0)),
        ms(late.last().copied().unwrap_or(0)),
    );
}
