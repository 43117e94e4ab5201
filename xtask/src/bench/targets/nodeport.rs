//! The NodePort section's targets.

use super::super::{
    plan::Plan,
    results::nodeport::{Family, INGRESS_HIT, Load, Mode, NodePort, XDP_HIT, find},
};
use super::{Measured, Target};

/// The NodePort section's targets.
pub(crate) fn targets(plan: &Plan, np: &NodePort) -> Vec<Target> {
    // Over IPv4; the IPv6 rows are shown beside them, with no target.
    let row = |mode: Mode, n: usize| find(&np.rows, Family::V4, mode, n);
    let mut t = Vec::new();
    for (family, load) in Family::ALL
        .into_iter()
        .flat_map(|f| Load::ALL.map(|l| (f, l)))
    {
        let rate = |mode| {
            np.capacity
                .iter()
                .find(|c| c.family == family && c.mode == mode && c.load == load)
                .map(|c| (c.report.rate, c.report.failed))
        };
        if let (Some((us, us_failed)), Some((ipt, _))) = (rate(Mode::Ours), rate(Mode::Iptables)) {
            t.push(Target::new(
                format!(
                    "SNAT: fresh-port {load:?} flows to one remote endpoint over {} without a \
                     failure, at least kube-proxy's (iptables) rate within 10%",
                    family.name()
                ),
                Measured::Text(format!(
                    "{us:.0}/s, {us_failed} failed; iptables {ipt:.0}/s"
                )),
                us_failed == 0 && us >= ipt * 0.9,
            ));
        }
    }
    for &n in &plan.nodeport_scales {
        let us = row(Mode::Ours, n).runs.rate(Load::Tcp);
        let nft = row(Mode::Nftables, n).runs.rate(Load::Tcp);
        t.push(Target::at_least(
            format!("NodePort: ours >= nftables at N={n} (TCP)"),
            us,
            nft,
            Measured::Times(us / nft),
        ));
    }
    if plan.nodeport_scales.contains(&10_000) {
        let ipt = row(Mode::Iptables, 10_000).runs.rate(Load::Tcp);
        let r = row(Mode::Ours, 10_000).runs.rate(Load::Tcp) / ipt;
        t.push(Target::at_least(
            "NodePort: ours >= 2x iptables at N=10000 (TCP)",
            r,
            2.0,
            Measured::Times(r),
        ));
    }
    // The repeat table's per-packet means (the kernel's) against the
    // issue's bounds: tc ingress and the XDP fast path (forwarded), each
    // on a conntrack hit.
    for (id, path, bound, case) in [
        (INGRESS_HIT, "tc ingress", 150.0, "on a conntrack hit"),
        (XDP_HIT, "XDP", 100.0, "on a conntrack hit, forwarded"),
    ] {
        t.push(match np.tc_cost.figures.repeat_ns(id).map(|ns| ns as f64) {
            Some(ns) => Target::at_most(
                format!("{path} <= {bound} ns per packet {case} (BPF_PROG_TEST_RUN)"),
                ns,
                bound,
                Measured::Nanos(ns),
            ),
            None => Target::new(format!("{path} per-packet cost"), Measured::Missing, false),
        });
    }
    t
}
