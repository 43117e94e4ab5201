//! `cargo xtask bench`: our socket LB against kube-proxy's iptables and
//! nftables layouts and against the direct path, on the same machine, in one
//! run, with the same Services and backends.
//!
//! Layers, each importing only from those below it:
//! - [`args`] (the flags) and [`plan`] (what a run measures, from them);
//!   [`stats`], [`units`], [`conditions`], [`softirq`]: leaves.
//! - The beds' shared ground: [`cluster`] (pod network, map capacities),
//!   [`manifests`] and [`realistic`] (the Services as YAML).
//! - [`rounds`], the load: the ABBA rounds every datapath-like section
//!   drives its modes through.
//! - [`results`]: what was measured, as plain data.
//! - The measuring modules, which build the namespaces and return
//!   results: [`datapath`], [`connect`], [`nodeport`] (with [`tc_cost`]),
//!   and the control plane, [`control`] and [`scale`] over [`ours`] and
//!   [`health`].
//! - [`targets`], evaluated from results alone; [`render`], the Markdown
//!   and charts of results and targets; [`output`], the files written.
//! - This file: [`run`], which picks the sections a run measures.

mod args;
mod cluster;
mod conditions;
mod connect;
mod control;
mod datapath;
mod health;
mod manifests;
mod nodeport;
mod ours;
mod output;
mod plan;
mod realistic;
mod render;
mod results;
mod rounds;
mod scale;
mod softirq;
mod stats;
mod targets;
mod tc_cost;
#[cfg(test)]
mod tests;
mod units;

pub(crate) use self::args::BenchArgs;
use self::{conditions::Started, plan::Plan, results::Results};

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    lb_tests::require_root();
    let plan = Plan::new(args);
    if args.scale {
        let max = args.scale_max.unwrap_or(usize::MAX);
        let scales: Vec<usize> = scale::SCALES.into_iter().filter(|&n| n <= max).collect();
        let started = std::time::Instant::now();
        let rows = scale::measure(&scales)?;
        return output::write_scale(&plan.out_dir, &rows, started.elapsed());
    }
    let started = Started::now();
    if args.pps_only {
        let pps = nodeport::measure_pps(&plan)?;
        return output::write_pps(&plan, &pps, &started.end());
    }
    if args.nodeport_only {
        let np = nodeport::measure(&plan)?;
        return output::write_nodeport(&plan, &np, &started.end());
    }
    if args.connect_only {
        let rows = connect::measure(&plan, plan.connect_n)?;
        return output::write_connect(&plan, &rows, &started.end());
    }
    let mut rows = Vec::new();
    for &n in &plan.scales {
        eprintln!("== datapath, N = {n}");
        rows.extend(datapath::measure(&plan, n)?);
    }
    let connect = if plan.control_only {
        Vec::new()
    } else {
        eprintln!("== connect loop, N = {}", plan.connect_n);
        connect::measure(&plan, plan.connect_n)?
    };
    let nodeport = if plan.control_only || args.no_nodeport {
        None
    } else {
        Some(nodeport::measure(&plan)?)
    };
    eprintln!("== control plane, {} x {}", plan.cold.0, plan.cold.1);
    let control = control::measure(&plan)?;
    let results = Results {
        datapath: rows,
        connect,
        nodeport,
        control,
    };
    output::write(&plan, &results, &started.end())
}
