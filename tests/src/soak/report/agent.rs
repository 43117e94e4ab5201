//! The agent's RSS and fds, and the maps' entries, over time.

use std::fmt::Write as _;

use super::{Unit, fmml, ms, percentile};
use crate::soak::{observe::Sample, outcome::Results};

pub(super) fn render(o: &mut String, r: &Results) {
    let _ = writeln!(o, "## The agent and its maps over time\n");
    let mut sample_ns: Vec<u64> = r.samples.iter().map(|s| s.took.as_nanos() as u64).collect();
    sample_ns.sort_unstable();
    let _ = writeln!(
        o,
        "Sampled every {} s (RSS: `VmRSS`, fds: `/proc/<pid>/fd`; while an agent runs; counting every map's entries took {} (p50; max {})).{}\n",
        r.plan.sample_every.as_secs(),
        ms(percentile(&sample_ns, 50.0)),
        ms(sample_ns.last().copied().unwrap_or(0)),
        if r.plan.restarts() {
            " Each agent lives 20 to 40 s, so RSS is also shown per agent, just before its SIGKILL."
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "| | first | min | max | last |\n|---|---:|---:|---:|---:|"
    );
    let s = &r.samples;
    let mib = |x: f64| format!("{:.1} MiB", x / 1024.0);
    let n = |x: f64| format!("{x:.0}");
    let series =
        |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<f64> { s.iter().filter_map(f).collect() };
    let rows: [(&str, Vec<f64>, Unit<'_>); 11] = [
        ("agent RSS", series(&|x| x.rss_kib.map(|v| v as f64)), &mib),
        ("agent open fds", series(&|x| x.fds.map(|v| v as f64)), &n),
        (
            "frontends",
            series(&|x| x.entries.map(|e| e.frontends as f64)),
            &n,
        ),
        ("frontends needed", series(&|x| Some(x.needed.0 as f64)), &n),
        (
            "states",
            series(&|x| x.entries.map(|e| e.states as f64)),
            &n,
        ),
        ("slots", series(&|x| x.entries.map(|e| e.slots as f64)), &n),
        ("slots needed", series(&|x| Some(x.needed.1 as f64)), &n),
        (
            "backends",
            series(&|x| x.entries.map(|e| e.backends as f64)),
            &n,
        ),
        ("backends needed", series(&|x| Some(x.needed.2 as f64)), &n),
        (
            "members",
            series(&|x| x.entries.map(|e| e.members as f64)),
            &n,
        ),
        (
            "reverse NAT (LRU, 262,144; keys seen in a walk every 30 s)",
            series(&|x| x.entries?.revnat.map(|v| v as f64)),
            &n,
        ),
    ];
    for (name, v, unit) in rows {
        let _ = writeln!(o, "| {name} {}", fmml(&v, unit));
    }
    let per_life: Vec<f64> = r
        .agents
        .iter()
        .filter_map(|a| a.rss_kib.map(|v| v as f64))
        .collect();
    let fds: Vec<f64> = r
        .agents
        .iter()
        .filter_map(|a| a.fds.map(|v| v as f64))
        .collect();
    let _ = writeln!(
        o,
        "| agent RSS before its SIGKILL (or at the end), per agent {}",
        fmml(&per_life, mib)
    );
    let _ = writeln!(
        o,
        "| agent fds before its SIGKILL (or at the end), per agent {}",
        fmml(&fds, n)
    );
    match r.final_entries {
        Some(e) => {
            let (f, sl, b) = r.final_needed;
            let _ = writeln!(
                o,
                "\nAt the end: {} frontends ({f} needed), {} states ({f} needed), {} slots ({sl} needed), {} members (0), {} backends ({b} needed), {} affinity entries (0), {} reverse-NAT entries (an LRU map: one per translated socket until it is full; a walk sees the keys the programs add and evict meanwhile too, so it can count more than the capacity).\n",
                e.frontends,
                e.states,
                e.slots,
                e.members,
                e.backends,
                e.affinity,
                e.revnat.unwrap_or(0)
            );
        }
        None => {
            let _ = writeln!(o, "\nThe entries could not be counted at the end.\n");
        }
    }
    let _ = writeln!(
        o,
        "| agent | pid | lived | first sync after | RSS before SIGKILL | fds | syncs | stale UDP sockets destroyed |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (i, a) in r.agents.iter().enumerate() {
        let end = a.killed_ns.unwrap_or(r.traffic_ns.1);
        let _ = writeln!(
            o,
            "| {i} | {} | {:.1} s | {} | {} | {} | {} | {} |",
            a.pid,
            end.saturating_sub(a.started_ns) as f64 / 1e9,
            a.first_sync_ns.map_or("-".into(), |f| ms(f - a.started_ns)),
            a.rss_kib.map_or("-".into(), |v| mib(v as f64)),
            a.fds.map_or("-".into(), |v| v.to_string()),
            a.syncs.map_or("-".into(), |v| format!("{v:.0}")),
            a.udp_destroyed.map_or("-".into(), |v| format!("{v:.0}")),
        );
    }
    o.push('\n');
}
