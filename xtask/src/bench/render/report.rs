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
    let mut o = head(
        &format!(
            "lb-agent benchmark{}{}",
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
        ),
        cond,
    );
    let _ = write!(o, "Agent: `{}`. ", plan.agent_bin.display());
    load_line(&mut o, cond, true);
    if !plan.control_only {
        datapath::tables(&mut o, plan, &results.datapath);
    }
    connect::section(&mut o, &results.connect);
    if let Some(np) = &results.nodeport {
        nodeport::section(&mut o, plan, np);
    }
    control::tables(&mut o, plan, &results.control);
    tail(&mut o, targets, charts, cond);
    o
}

/// `--nodeport-only`: the NodePort section alone.
pub(crate) fn nodeport_only(
    plan: &Plan,
    np: &NodePort,
    targets: &[Target],
    cond: &Conditions,
    charts: &[String],
) -> String {
    let mut o = head("lb-agent NodePort benchmark", cond);
    load_line(&mut o, cond, false);
    nodeport::section(&mut o, plan, np);
    tail(&mut o, targets, charts, cond);
    o
}

/// `--connect-only`: the connect loop alone.
pub(crate) fn connect_only(rows: &[ConnectRow], targets: &[Target], cond: &Conditions) -> String {
    let mut o = head("lb-agent connect-hook benchmark", cond);
    load_line(&mut o, cond, false);
    connect::section(&mut o, rows);
    tail(&mut o, targets, &[], cond);
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
    let title = format!(
        "lb-agent packets-per-second benchmark{}",
        if plan.quick { " (--quick)" } else { "" }
    );
    let mut o = head(&title, cond);
    load_line(&mut o, cond, true);
    pps::section(&mut o, plan, pps);
    tail(&mut o, targets, charts, cond);
    o
}

/// A report's title and the machine it ran on.
fn head(title: &str, cond: &Conditions) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# {title}

{}
",
        cond.machine
    );
    o
}

/// The load average at the start and the end; `busy`: a note that other
/// work on the machine competes for the same cores.
fn load_line(o: &mut String, cond: &Conditions, busy: bool) {
    let _ = writeln!(
        o,
        "Load average (1, 5, 15 min) at the start: {}, at the end: {}{}\n",
        cond.load_before,
        cond.load_after,
        if busy {
            "; other work on the machine competes for the same cores."
        } else {
            "."
        }
    );
}

/// Every report's end: the targets, the charts drawn (if any), how long
/// the run took.
fn tail(o: &mut String, targets: &[Target], charts: &[String], cond: &Conditions) {
    write_targets(o, targets);
    if !charts.is_empty() {
        let _ = writeln!(o, "\nCharts: {}.", charts.join(", "));
    }
    let _ = writeln!(o, "\nRun took {:.0} s.", cond.took.as_secs_f64());
}
