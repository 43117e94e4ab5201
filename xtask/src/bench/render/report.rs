//! The whole report, and the NodePort-only one.

use std::fmt::Write as _;

use super::super::{
    conditions::Conditions,
    plan::Plan,
    results::{Results, connect::Row as ConnectRow, nodeport::NodePort, pps::Pps},
    targets::Target,
};
use super::{connect, control, datapath, nodeport, pps, write_targets};

/// The whole report: datapath, NodePort and control plane sections, then
/// every target. `charts` names the chart files drawn.
pub(crate) fn full(
    plan: &Plan,
    results: &Results,
    targets: &[Target],
    cond: &Conditions,
    charts: &[String],
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
    connect::section(&mut o, &results.connect);
    if let Some(np) = &results.nodeport {
        nodeport::section(&mut o, plan, np);
    }
    control::tables(&mut o, plan, &results.control);
    write_targets(&mut o, targets);
    charts_line(&mut o, charts);
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
    o
}

fn charts_line(o: &mut String, charts: &[String]) {
    if !charts.is_empty() {
        let _ = writeln!(o, "\nCharts: {}.", charts.join(", "));
    }
}

/// `--nodeport-only`: the NodePort section alone.
pub(crate) fn nodeport_only(
    plan: &Plan,
    np: &NodePort,
    targets: &[Target],
    cond: &Conditions,
    charts: &[String],
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
    charts_line(&mut o, charts);
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
    o
}

/// `--connect-only`: the connect loop alone.
pub(crate) fn connect_only(rows: &[ConnectRow], targets: &[Target], cond: &Conditions) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# lb-agent connect-hook benchmark\n\n{}\n", cond.machine);
    let _ = writeln!(
        o,
        "Load average (1, 5, 15 min) at the start: {}, at the end: {}.\n",
        cond.load_before, cond.load_after
    );
    connect::section(&mut o, rows);
    write_targets(&mut o, targets);
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
    o
}

/// `--pps-only`: the packets-per-second section alone.
pub(crate) fn pps_only(
    plan: &Plan,
    pps: &Pps,
    targets: &[Target],
    cond: &Conditions,
    charts: &[String],
) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# lb-agent packets-per-second benchmark{}\n\n{}\n",
        if plan.quick { " (--quick)" } else { "" },
        cond.machine
    );
    let _ = writeln!(
        o,
        "Load average (1, 5, 15 min) at the start: {}, at the end: {}; other work on the \
         machine competes for the same cores.\n",
        cond.load_before, cond.load_after
    );
    pps::section(&mut o, plan, pps);
    write_targets(&mut o, targets);
    charts_line(&mut o, charts);
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
    o
}
