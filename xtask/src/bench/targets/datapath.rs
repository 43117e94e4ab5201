//! The datapath section's targets.

use super::super::{
    plan::Plan,
    results::datapath::{Load, Mode, Row, find},
};
use super::{Measured, Target};

/// The datapath section's targets.
pub(crate) fn targets(plan: &Plan, rows: &[Row]) -> Vec<Target> {
    let mut t = Vec::new();
    for &n in &plan.scales {
        let (d, us) = (find(rows, Mode::Direct, n), find(rows, Mode::Ours, n));
        let r = us.runs.rate(Load::Tcp) / d.runs.rate(Load::Tcp);
        t.push(Target::at_least(
            format!("ours >= 98% of direct at N={n} (TCP)"),
            r,
            0.98,
            Measured::Percent(r),
        ));
        let per_connect =
            |mode| f64::from(plan.concurrency) * 1e9 / find(rows, mode, n).runs.rate(Load::Connect);
        let adds = per_connect(Mode::Ours) - per_connect(Mode::Direct);
        t.push(Target::new(
            format!("a connect to no Service costs <= 100 ns more with ours at N={n}"),
            Measured::Nanos(adds),
            adds <= 100.0,
        ));
        if !Mode::Nftables.measured_at(n) {
            continue;
        }
        let rate = |mode, load| find(rows, mode, n).runs.rate(load);
        for (load, what) in [
            (Load::UdpLong, "UDP, long-lived sockets"),
            (Load::Tcp, "TCP"),
        ] {
            let (ours, nft) = (rate(Mode::Ours, load), rate(Mode::Nftables, load));
            t.push(Target::at_least(
                format!("ours >= nftables at N={n} ({what})"),
                ours,
                nft,
                Measured::Times(ours / nft),
            ));
        }
    }
    for &n in &plan.scales {
        let ratio = |ours, direct| {
            find(rows, ours, n).runs.rate(Load::Tcp) / find(rows, direct, n).runs.rate(Load::Tcp)
        };
        let (v4, v6) = (
            ratio(Mode::Ours, Mode::Direct),
            ratio(Mode::Ours6, Mode::Direct6),
        );
        t.push(Target::at_least(
            format!("IPv6: ours/direct within 5 points of IPv4's at N={n} (TCP)"),
            v6,
            v4 - 0.05,
            Measured::Text(format!("{:.1}% vs {:.1}%", v6 * 100.0, v4 * 100.0)),
        ));
    }
    if let Some(&n) = plan.scales.last() {
        let us = find(rows, Mode::Ours, n);
        for (mode, load, prog, limit) in [
            (Mode::Ours, Load::Tcp, "connect4", 400.0),
            (Mode::Ours, Load::UdpFresh, "connect4", 400.0),
            (Mode::Ours6, Load::Tcp, "connect6", 400.0),
            (Mode::Ours, Load::UdpLong, "sendmsg4", 300.0),
        ] {
            let ns = find(rows, mode, n)
                .programs
                .iter()
                .find(|&&(l, p, _)| (l, p) == (load, prog))
                .map_or(f64::NAN, |(.., runs)| runs.ns_per_run());
            t.push(Target::new(
                format!("{prog} <= {limit:.0} ns per call at N={n} ({load:?})"),
                Measured::Nanos(ns),
                ns <= limit,
            ));
        }
        let us = us.runs.rate(Load::Tcp);
        let r = find(rows, Mode::OursAffinity, n).runs.rate(Load::Tcp) / us;
        t.push(Target::new(
            format!("ClientIP affinity costs <= 3% of ours' rate at N={n} (TCP)"),
            Measured::Percent(1.0 - r),
            r >= 0.97,
        ));
    }
    // The 2x target is set at 10,000 Services; a smoke run does not go there.
    if plan.scales.contains(&10_000) {
        let ipt = find(rows, Mode::Iptables, 10_000).runs.rate(Load::Tcp);
        let r = find(rows, Mode::Ours, 10_000).runs.rate(Load::Tcp) / ipt;
        t.push(Target::at_least(
            "ours >= 2x iptables at N=10000 (TCP)",
            r,
            2.0,
            Measured::Times(r),
        ));
    }
    t
}
