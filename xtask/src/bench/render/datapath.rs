//! The datapath section of the report.

use std::fmt::Write as _;

use super::super::{
    plan::Plan,
    results::datapath::{Load, Mode, Row, find},
};
use super::rate_cells;

/// The datapath tables, one per load, and our programs' cost per call.
pub(super) fn tables(o: &mut String, plan: &Plan, rows: &[Row]) {
    let _ = writeln!(
        o,
        "Datapath: {} endpoints per Service (identity servers, each in its own netns), {} \
         concurrent clients, {} s per measurement, {} rounds per mode in ABBA order; each figure \
         is the median over rounds, and \"spread\" is the slowest and fastest round. The \
         measured Service is the last in rule order. iptables/nftables: kube-proxy v1.31's \
         layouts, loaded in the client's netns; conntrack is flushed before each measurement. \
         Ratios: to direct / to ours. \"ours, ClientIP affinity\" and \"ours, iTP Local\" \
         reach the same pods through a Service with `sessionAffinity: ClientIP` (all of one \
         client's connections go to one pod) and one with `internalTrafficPolicy: Local` \
         (every endpoint on this node): two Services more in our maps.\n",
        plan.endpoints, plan.concurrency, plan.seconds, plan.rounds
    );
    for (load, title, unit) in [
        (
            Load::Tcp,
            "TCP short connections (connect, one request/response, close)",
            "conn/s",
        ),
        (
            Load::UdpFresh,
            "UDP request/response, a new socket per request (as a DNS resolver)",
            "req/s",
        ),
        (
            Load::UdpLong,
            "UDP request/response, one long-lived socket per client",
            "req/s",
        ),
    ] {
        let lat = if load == Load::Tcp {
            "connect"
        } else {
            "round trip"
        };
        let _ = writeln!(o, "### {title}\n");
        let _ = writeln!(
            o,
            "| N | mode | {unit} | vs direct | vs ours | spread | {lat} p50 µs | {lat} p99 µs |"
        );
        let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|---:|---:|");
        for &n in &plan.scales {
            let us = find(rows, Mode::Ours, n);
            for mode in Mode::EVERY
                .into_iter()
                .filter(|m| m.loads().contains(&load) && m.measured_at(n))
            {
                let r = find(rows, mode, n);
                let d = find(rows, mode.direct(), n);
                let cells = rate_cells(n, mode.name(), load, [&r.runs, &d.runs, &us.runs]);
                let _ = writeln!(o, "{cells}");
            }
        }
        o.push('\n');
    }
    connects(o, plan, rows);
    let failed: u64 = rows.iter().map(|r| r.runs.failed()).sum();
    let _ = writeln!(o, "Failed requests over all datapath runs: {failed}.\n");
    losses(o, rows);
    program_costs(o, plan, rows);
}

/// Every run that failed a request or in which the kernel dropped one: the
/// failures by cause (`TimedOut`, `WrongPeer <address>`, `ConnectionRefused`,
/// ...) beside the kernel's drop counters that rose in the client's and the
/// pods' namespaces meanwhile (`/proc/net/snmp`: `Udp.RcvbufErrors` is a
/// datagram dropped for a full receive buffer, outside our programs).
fn losses(o: &mut String, rows: &[Row]) {
    let mut lines = Vec::new();
    for row in rows {
        for (load, round, r) in row.runs.lossy() {
            lines.push(format!(
                "| {} | {load:?} | {} | {} | {} | {} |",
                row.mode.name(),
                row.n,
                round + 1,
                r.failed,
                super::super::rounds::losses(r)
                    .trim_start_matches(':')
                    .trim()
            ));
        }
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "Runs with a failed request or a kernel drop: the failures by cause, and the \
         kernel's drop counters that rose meanwhile in the client's namespace and the pods'.\n\n\
         | mode | load | N | round | failed | causes; kernel drops |\n|---|---|---:|---:|---:|---|"
    );
    for l in lines {
        let _ = writeln!(o, "{l}");
    }
    o.push('\n');
}

/// What a connect to an address that is no Service costs with our programs
/// attached and without: what every other connection of the node pays.
fn connects(o: &mut String, plan: &Plan, rows: &[Row]) {
    let _ = writeln!(
        o,
        "### Connects to addresses that are no Service

         UDP `socket()` + `connect()` + `close()` to the pods' addresses, nothing sent, {}          workers: direct from outside our cgroup (no program runs), ours from inside it          (`connect4` runs and finds no frontend). Wall time per connect is workers / rate;          \"ours adds\" is the difference of the medians.\n",
        plan.concurrency
    );
    let _ = writeln!(
        o,
        "| N | mode | connects/s | spread | ns per connect | ours adds ns |"
    );
    let _ = writeln!(o, "|---:|---|---:|---:|---:|---:|");
    let ns = |rate: f64| f64::from(plan.concurrency) * 1e9 / rate;
    for &n in &plan.scales {
        let direct = find(rows, Mode::Direct, n).runs.rate(Load::Connect);
        for mode in [Mode::Direct, Mode::Ours] {
            let runs = &find(rows, mode, n).runs;
            let (lo, hi) = runs.spread(Load::Connect);
            let rate = runs.rate(Load::Connect);
            let adds = if mode == Mode::Ours {
                format!("{:.0}", ns(rate) - ns(direct))
            } else {
                String::from("-")
            };
            let _ = writeln!(
                o,
                "| {n} | {} | {rate:.0} | {lo:.0}-{hi:.0} | {:.0} | {adds} |",
                mode.name(),
                ns(rate)
            );
        }
    }
    o.push('\n');
}

/// Our programs' mean run time per call during each of our runs.
fn program_costs(o: &mut String, plan: &Plan, rows: &[Row]) {
    let _ = writeln!(
        o,
        "### Our programs' cost per call\n\n\
         The kernel's BPF statistics (`run_time_ns` / `run_cnt`, as `bpftool prog show` prints \
         them with `kernel.bpf_stats_enabled=1`), enabled during our runs only, over all rounds; \
         programs that did not run are left out.\n"
    );
    let _ = writeln!(o, "| N | mode | load | program | calls | ns per call |");
    let _ = writeln!(o, "|---:|---|---|---|---:|---:|");
    for &n in &plan.scales {
        for row in rows.iter().filter(|r| r.n == n) {
            for (load, prog, runs) in row.programs.iter().filter(|(_, _, r)| r.count > 0) {
                let _ = writeln!(
                    o,
                    "| {n} | {} | {load:?} | {prog} | {} | {:.0} |",
                    row.mode.name(),
                    runs.count,
                    runs.ns_per_run()
                );
            }
        }
    }
    o.push('\n');
}
