//! The packets-per-second section's targets, set for ours at XDP (issues
//! 31 and 42): at least 4x iptables per core at N = 10,000, and at least
//! 80% of the generator's ceiling, on the XDP sink bed (where XDP's gain
//! can show); on the end-to-end bed, ahead of ours at tc.

use super::super::{
    plan::Plan,
    results::{
        node::Mode,
        pps::{Family, Pps, PpsBed, PpsMode, find},
    },
};
use super::{Measured, Target};

/// The section's targets, at the largest N measured (10,000 in a full run).
pub(crate) fn targets(plan: &Plan, pps: &Pps) -> Vec<Target> {
    let Some(&n) = plan.nodeport_scales.iter().max() else {
        return Vec::new();
    };
    let mut t = Vec::new();
    for family in Family::ALL {
        let row = |mode| find(&pps.rows, PpsBed::Sink, family, mode, n);
        let over = format!("{} ({})", family.name(), PpsBed::Sink.short());
        {
            let mode = PpsMode::Node(Mode::OursXdp);
            let us = row(mode);
            let name = mode.name();
            let ipt = row(PpsMode::Node(Mode::Iptables));
            let goal = format!(
                "pps: {name} >= 4x iptables per core at N={n} over {over} (the XDP target)"
            );
            t.push(match (us, ipt) {
                (Some(us), Some(ipt)) => {
                    let r = us.per_core() / ipt.per_core();
                    Target::at_least(goal, r, 4.0, Measured::Times(r))
                }
                _ => Target::new(goal, Measured::Missing, false),
            });
            let goal = format!(
                "pps: {name} >= 80% of the generator ceiling at N={n} over {over} (the XDP target)"
            );
            t.push(match (us, row(PpsMode::Ceiling)) {
                (Some(us), Some(c)) => {
                    let r = us.pps() / c.pps();
                    Target::at_least(goal, r, 0.8, Measured::Percent(r))
                }
                _ => Target::new(goal, Measured::Missing, false),
            });
        }
        for &n in &plan.nodeport_scales {
            let row = |mode| find(&pps.rows, PpsBed::EndToEnd, family, mode, n);
            let goal = format!(
                "pps: ours (XDP) ahead of ours (tc) at N={n} over {} ({})",
                family.name(),
                PpsBed::EndToEnd.short()
            );
            t.push(
                match (
                    row(PpsMode::Node(Mode::OursXdp)),
                    row(PpsMode::Node(Mode::Ours)),
                ) {
                    (Some(xdp), Some(tc)) => {
                        let r = xdp.pps() / tc.pps();
                        Target::at_least(goal, r, 1.0, Measured::Times(r))
                    }
                    _ => Target::new(goal, Measured::Missing, false),
                },
            );
        }
    }
    t
}
