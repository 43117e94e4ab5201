//! The files a run writes under target/bench/ (the Markdown also to
//! stdout): the report, its chart, and the targets met or missed.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    conditions::Conditions,
    plan::Plan,
    render,
    results::{
        Results, connect,
        nodeport::NodePort,
        pps::{Pps, PpsBed},
        scale,
    },
    targets,
};

/// The main report, `bench.md` (`bench-quick`, `-control`), and its chart
/// unless `--control-only`.
pub(super) fn write(plan: &Plan, results: &Results, cond: &Conditions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let mut name = String::from(if plan.quick { "bench-quick" } else { "bench" });
    if plan.control_only {
        name += "-control";
    }
    let md_path = plan.out_dir.join(format!("{name}.md"));
    let chart = (!plan.control_only).then(|| plan.out_dir.join(format!("{name}.svg")));
    let pps_charts = results
        .nodeport
        .as_ref()
        .map(|np| (np, pps_chart_paths(plan, &format!("{name}-pps"))));
    let charts: Vec<String> = chart
        .iter()
        .chain(
            pps_charts
                .iter()
                .flat_map(|(_, p)| p.iter().map(|(_, p)| p)),
        )
        .map(|c| c.display().to_string())
        .collect();
    let targets = targets::all::of(plan, results);
    let md = render::report::full(plan, results, &targets, cond, &charts);
    print!("{md}");
    std::fs::write(&md_path, &md)?;
    if let Some(chart) = &chart {
        render::chart::draw(plan, &results.datapath, chart)?;
    }
    if let Some((np, paths)) = &pps_charts {
        draw_pps(plan, &np.pps, paths)?;
    }
    eprintln!("wrote {} {}", md_path.display(), charts.join(" "));
    Ok(())
}

/// `--nodeport-only`: the NodePort section alone, in bench-nodeport.md.
pub(super) fn write_nodeport(plan: &Plan, np: &NodePort, cond: &Conditions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let mut targets = targets::nodeport::targets(plan, np);
    targets.extend(targets::pps::targets(plan, &np.pps));
    let svgs = pps_chart_paths(plan, "bench-nodeport-pps");
    let charts = names(&svgs);
    let md = render::report::nodeport_only(plan, np, &targets, cond, &charts);
    print!("{md}");
    let path = plan.out_dir.join("bench-nodeport.md");
    std::fs::write(&path, &md)?;
    draw_pps(plan, &np.pps, &svgs)?;
    eprintln!("wrote {} and {}", path.display(), charts.join(" "));
    Ok(())
}

/// `--pps-only`: packets per second alone, in bench-pps-only.md
/// (bench-pps-only-quick with `--quick`) and its chart; the main run's
/// chart of the same section is bench-pps.svg.
pub(super) fn write_pps(plan: &Plan, pps: &Pps, cond: &Conditions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let name = if plan.quick {
        "bench-pps-only-quick"
    } else {
        "bench-pps-only"
    };
    let targets = targets::pps::targets(plan, pps);
    let svgs = pps_chart_paths(plan, name);
    let charts = names(&svgs);
    let md = render::report::pps_only(plan, pps, &targets, cond, &charts);
    print!("{md}");
    let path = plan.out_dir.join(format!("{name}.md"));
    std::fs::write(&path, &md)?;
    draw_pps(plan, pps, &svgs)?;
    eprintln!("wrote {} and {}", path.display(), charts.join(" "));
    Ok(())
}

/// `--connect-only`: the connect loop alone, in bench-connect.md
/// (bench-connect-quick with `--quick`).
pub(super) fn write_connect(
    plan: &Plan,
    rows: &[connect::Row],
    cond: &Conditions,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let name = if plan.quick {
        "bench-connect-quick"
    } else {
        "bench-connect"
    };
    let md = render::report::connect_only(rows, &targets::connect::targets(rows), cond);
    print!("{md}");
    let path = plan.out_dir.join(format!("{name}.md"));
    std::fs::write(&path, &md)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// The packets-per-second charts' paths, one per bed: `stem.svg` for the
/// end-to-end bed, `stem-sink.svg` for the XDP sink.
fn pps_chart_paths(plan: &Plan, stem: &str) -> Vec<(PpsBed, PathBuf)> {
    PpsBed::ALL
        .into_iter()
        .map(|bed| {
            let file = match bed {
                PpsBed::EndToEnd => format!("{stem}.svg"),
                PpsBed::Sink => format!("{stem}-sink.svg"),
            };
            (bed, plan.out_dir.join(file))
        })
        .collect()
}

fn names(paths: &[(PpsBed, PathBuf)]) -> Vec<String> {
    paths.iter().map(|(_, p)| p.display().to_string()).collect()
}

fn draw_pps(plan: &Plan, pps: &Pps, paths: &[(PpsBed, PathBuf)]) -> anyhow::Result<()> {
    for (bed, path) in paths {
        render::pps_chart::draw(plan, pps, *bed, path)?;
    }
    Ok(())
}

/// `--scale`: bench-scale.md and its chart.
pub(super) fn write_scale(
    out_dir: &Path,
    rows: &[scale::Row],
    took: Duration,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out_dir)?;
    let md_path = out_dir.join("bench-scale.md");
    let svg_path = out_dir.join("bench-scale.svg");
    let targets = targets::scale::targets(rows);
    let md = render::scale::report(rows, &targets, took, &svg_path);
    print!("{md}");
    std::fs::write(&md_path, &md)?;
    render::scale_chart::draw(rows, &svg_path)?;
    eprintln!("wrote {} and {}", md_path.display(), svg_path.display());
    Ok(())
}
