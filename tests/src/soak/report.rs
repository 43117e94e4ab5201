//! The soak's report, in Markdown.

use std::{collections::BTreeMap, fmt::Write as _};

use super::{
    converge::{Kind, Record},
    outcome::{Results, wrong_answers},
    wire::{Phase, Socket},
};

/// How a figure is written.
type Unit<'a> = &'a dyn Fn(f64) -> String;

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// first, min, max, last of a series.
fn fmml(v: &[f64], unit: impl Fn(f64) -> String) -> String {
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
    let _ = writeln!(o, "# Chaos soak\n");
    let _ = writeln!(
        o,
        "Seed {} (`cargo xtask soak --minutes {} --seed {}` replays the same sequence of \
         disturbances), {} min of disturbances; traffic ran {ran:.0} s from {} (the times below \
         count from then), after {:.0} s of setup. Agent: `{}`. Load average at the end: {}.\n",
        r.seed,
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
            "**PASS**: no request to a Service with a serving endpoint failed, every answer came from a backend of its Service while it served, every change was programmed, and the maps hold exactly what the live Services need.\n"
        );
    } else {
        let _ = writeln!(o, "**FAIL**:\n");
        for why in &verdict {
            let _ = writeln!(o, "* {why}");
        }
        o.push('\n');
    }

    disturbances(&mut o, r);
    requests(&mut o, r, &t);
    convergence(&mut o, r, &t);
    agent(&mut o, r);
    let _ = writeln!(o, "## Datapath counters at the end\n");
    for (name, n) in &r.stats {
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

fn disturbances(o: &mut String, r: &Results) {
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
    let _ = writeln!(
        o,
        "| agent SIGKILL, restart | {} | first sync after the restart: p50 {}, max {}; killed before its first sync: {killed_early} |",
        r.agents.len() - 1,
        ms(percentile(&sorted, 50.0)),
        ms(sorted.last().copied().unwrap_or(0)),
    );
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

fn requests(o: &mut String, r: &Results, t: &dyn Fn(u64) -> f64) {
    let rec = &r.received;
    let _ = writeln!(o, "## Requests\n");
    let _ = writeln!(
        o,
        "| socket | attempted | answered | failed, Service serving | failed, Service being created | failed, Service being deleted | answered after reconnecting a destroyed stale UDP socket |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    let mut total = [0u64; 6];
    for socket in Socket::ALL {
        let ok: u64 = rec
            .answers
            .iter()
            .filter(|((k, _), _)| k.socket == socket)
            .map(|(_, a)| a.n)
            .sum();
        let failed = |p: Phase| -> u64 {
            rec.failures
                .iter()
                .filter(|((k, _), _)| k.socket == socket && k.phase == p)
                .map(|(_, f)| f.n)
                .sum()
        };
        let (fs, fc, fd) = (
            failed(Phase::Stable),
            failed(Phase::Creating),
            failed(Phase::Deleting),
        );
        let reconnected: u64 = rec
            .reconnects
            .iter()
            .filter(|(k, _)| k.socket == socket)
            .map(|(_, n)| n)
            .sum();
        let row = [ok + fs + fc + fd, ok, fs, fc, fd, reconnected];
        for (sum, x) in total.iter_mut().zip(row) {
            *sum += x;
        }
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            socket.name(),
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5]
        );
    }
    let _ = writeln!(
        o,
        "| all | {} | {} | {} | {} | {} | {} |\n",
        total[0], total[1], total[2], total[3], total[4], total[5]
    );
    let _ = writeln!(
        o,
        "Late replies (to an earlier, timed-out request) read by the long-lived UDP sockets: {}.\n",
        rec.late_replies
    );

    let _ = writeln!(
        o,
        "### Failed requests to Services with a serving endpoint, by cause\n"
    );
    let stable: Vec<_> = rec
        .failures
        .iter()
        .filter(|((k, _), _)| k.phase == Phase::Stable)
        .collect();
    if stable.is_empty() {
        let _ = writeln!(o, "None.\n");
    } else {
        let mut by_cause: BTreeMap<(&str, Socket), (u64, Vec<&str>)> = BTreeMap::new();
        for ((k, cause), f) in &stable {
            let e = by_cause.entry((cause.as_str(), k.socket)).or_default();
            e.0 += f.n;
            e.1.push(k.svc.as_str());
        }
        let _ = writeln!(
            o,
            "| cause | socket | requests | Services |\n|---|---|---:|---|"
        );
        for ((cause, socket), (n, svcs)) in by_cause {
            let _ = writeln!(
                o,
                "| {cause} | {} | {n} | {} |",
                socket.name(),
                svcs.join(" ")
            );
        }
        let _ = writeln!(
            o,
            "\nWhen, with what happened within 3 s before (at most 30):\n"
        );
        for f in rec
            .failure_log
            .iter()
            .filter(|f| f.key.phase == Phase::Stable)
            .take(30)
        {
            let around: Vec<String> = r
                .events
                .iter()
                .filter(|(at, _)| *at + 3_000_000_000 >= f.first_start_ns && *at <= f.last_end_ns)
                .map(|(at, what)| format!("{:.2} s {what}", t(*at)))
                .collect();
            let _ = writeln!(
                o,
                "* {:.2}-{:.2} s: {} x {} to {} ({}); {}",
                t(f.first_start_ns),
                t(f.last_end_ns),
                f.n,
                f.cause,
                f.key.svc,
                f.key.socket.name(),
                if around.is_empty() {
                    "nothing".into()
                } else {
                    around.join("; ")
                }
            );
        }
        o.push('\n');
    }

    let _ = writeln!(
        o,
        "### Requests to Services being created or deleted that failed (expected, not counted as failures)\n"
    );
    let mut unsettled: BTreeMap<(Phase, &str), u64> = BTreeMap::new();
    for ((k, cause), f) in &rec.failures {
        if k.phase != Phase::Stable {
            *unsettled.entry((k.phase, cause.as_str())).or_default() += f.n;
        }
    }
    if unsettled.is_empty() {
        let _ = writeln!(o, "None.\n");
    } else {
        let _ = writeln!(o, "| phase | cause | requests |\n|---|---|---:|");
        for ((phase, cause), n) in unsettled {
            let _ = writeln!(o, "| {phase:?} | {cause} | {n} |");
        }
        o.push('\n');
    }

    let wrong = wrong_answers(rec, &r.lives);
    let _ = writeln!(
        o,
        "### Answers from a backend that was not serving the Service then\n"
    );
    if wrong.is_empty() {
        let backends = rec
            .answers
            .keys()
            .map(|(_, b)| b)
            .collect::<std::collections::BTreeSet<_>>();
        let _ = writeln!(
            o,
            "None: every answer came from a pod of its Service, between its endpoint's addition and the moment the maps stopped sending it new requests ({} pods answered).\n",
            backends.len()
        );
    } else {
        let _ = writeln!(
            o,
            "| Service | socket | phase | backend | requests | why |\n|---|---|---|---|---:|---|"
        );
        for w in wrong {
            let _ = writeln!(
                o,
                "| {} | {} | {:?} | {} | {} | {} |",
                w.key.svc,
                w.key.socket.name(),
                w.key.phase,
                w.backend,
                w.n,
                w.why
            );
        }
        o.push('\n');
    }
}

fn convergence(o: &mut String, r: &Results, t: &dyn Fn(u64) -> f64) {
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

fn agent(o: &mut String, r: &Results) {
    let _ = writeln!(o, "## The agent and its maps over time\n");
    let mut sample_ns: Vec<u64> = r.samples.iter().map(|s| s.took.as_nanos() as u64).collect();
    sample_ns.sort_unstable();
    let _ = writeln!(
        o,
        "Sampled every {} s (RSS: `VmRSS`, fds: `/proc/<pid>/fd`; while an agent runs; counting every map's entries took {} (p50; max {})). Each agent lives 20 to 40 s, so RSS is also shown per agent, just before its SIGKILL.\n",
        r.plan.sample_every.as_secs(),
        ms(percentile(&sample_ns, 50.0)),
        ms(sample_ns.last().copied().unwrap_or(0)),
    );
    let _ = writeln!(
        o,
        "| | first | min | max | last |\n|---|---:|---:|---:|---:|"
    );
    let s = &r.samples;
    let mib = |x: f64| format!("{:.1} MiB", x / 1024.0);
    let n = |x: f64| format!("{x:.0}");
    let series = |f: &dyn Fn(&super::observe::Sample) -> Option<f64>| -> Vec<f64> {
        s.iter().filter_map(f).collect()
    };
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
            "reverse NAT (LRU; counted every 30 s)",
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
                "\nAt the end: {} frontends ({f} needed), {} states ({f} needed), {} slots ({sl} needed), {} members (0), {} backends ({b} needed), {} affinity entries (0), {} reverse-NAT entries (an LRU map: one per connected socket until it is full).\n",
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

/// Every timed change, one per line: kind, Service, when it was made and
/// when its clock started and stopped (seconds from the start of traffic),
/// milliseconds to converge, and whether a disturbance restarted its clock.
pub fn changes_csv(r: &Results) -> String {
    let s = |ns: Option<u64>| {
        ns.map_or(String::new(), |ns| {
            format!("{:.4}", ns as f64 / 1e9 - r.traffic_ns.0 as f64 / 1e9)
        })
    };
    let mut o =
        String::from("kind,service,made_s,clock_s,resolved_s,took_ms,interrupted,catching_up\n");
    for x in r.tracker.records() {
        let _ = writeln!(
            o,
            "{:?},{},{},{},{},{},{},{}",
            x.kind,
            x.svc.as_deref().unwrap_or(""),
            s(Some(x.made_ns)),
            s(x.clock_ns),
            s(x.resolved_ns),
            x.took_ns()
                .map_or(String::new(), |n| format!("{:.2}", n as f64 / 1e6)),
            x.interrupted,
            x.catching_up
        );
    }
    o
}

/// Every sample, one per line.
pub fn samples_csv(r: &Results) -> String {
    let mut o = String::from(
        "t_s,pid,rss_kib,fds,frontends,states,slots,members,backends,affinity,revnat,\
         frontends_needed,slots_needed,backends_needed\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for x in &r.samples {
        let e = x.entries;
        let _ = writeln!(
            o,
            "{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            x.t_ns.saturating_sub(r.traffic_ns.0) as f64 / 1e9,
            x.pid,
            opt(x.rss_kib.map(|v| v.to_string())),
            opt(x.fds.map(|v| v.to_string())),
            opt(e.map(|e| e.frontends.to_string())),
            opt(e.map(|e| e.states.to_string())),
            opt(e.map(|e| e.slots.to_string())),
            opt(e.map(|e| e.members.to_string())),
            opt(e.map(|e| e.backends.to_string())),
            opt(e.map(|e| e.affinity.to_string())),
            opt(e.and_then(|e| e.revnat).map(|v| v.to_string())),
            x.needed.0,
            x.needed.1,
            x.needed.2
        );
    }
    o
}
