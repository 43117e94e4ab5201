//! The whole report, and the NodePort-only one.

use std::fmt::Write as _;

use super::super::{
    Plan,
    conditions::Conditions,
    results::{Results, nodeport::NodePort},
    targets::Target,
};
use super::{control, datapath, nodeport, write_targets};

/// The whole report: datapath, NodePort and control plane sections, then
/// every target. `chart` names the chart file, if one is drawn.
pub(crate) fn full(
    plan: &Plan,
    results: &Results,
    targets: &[Target],
    cond: &Conditions,
    chart: Option<&str>,
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# lb-agent benchmark{}{}\n",
        if plan.quick {
            " (--quick smoke run)"
        } else {
            ""
        },
        if plan.control_only {
            " (--control-only)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "{}\n", cond.machine);
    let _ = writeln!(
        o,
        "Agent: `{}`. Load average (1, 5, 15 min) at the start: {}, at the end: {}; \
         other work on the machine competes for the same cores.\n",
        plan.agent_bin.display(),
        cond.load_before,
        cond.load_after
    );
    if !plan.control_only {
        datapath::tables(&mut o, plan, &results.datapath);
    }
    if let Some(np) = &results.nodeport {
        nodeport::section(&mut o, plan, np);
    }
    control::tables(&mut o, plan, &results.control);
    write_targets(&mut o, targets);
    if let Some(chart) = chart {
        let _ = writeln!(o, "\nChart: {chart}.");
    }
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
    o
}

/// `--nodeport-only`: the NodePort section alone.
pub(crate) fn nodeport_only(
    plan: &Plan,
    np: &NodePort,
    targets: &[Target],
    cond: &Conditions,
) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# lb-agent NodePort benchmark\n\n{}\n", cond.machine);
    let _ = writeln!(
        o,
        "Load average (1, 5, 15 min) at the start: {}, at the end: {}.\n",
        cond.load_before, cond.load_after
    );
    nodeport::section(&mut o, plan, np);
    write_targets(&mut o, targets);
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
    o
}
