//! The files a run writes under target/bench/ (the Markdown also to
//! stdout): the report, its chart, and the targets met or missed.

use std::{path::Path, time::Duration};

use super::{
    Plan,
    conditions::Conditions,
    render,
    results::{Results, nodeport::NodePort, pps::Pps, scale},
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
    let pps_chart = results
        .nodeport
        .as_ref()
        .map(|np| (np, plan.out_dir.join(format!("{name}-pps.svg"))));
    let charts: Vec<String> = chart
        .iter()
        .chain(pps_chart.as_ref().map(|(_, p)| p))
        .map(|c| c.display().to_string())
        .collect();
    let targets = targets::of(plan, results);
    let md = render::report::full(plan, results, &targets, cond, &charts);
    print!("{md}");
    std::fs::write(&md_path, &md)?;
    if let Some(chart) = &chart {
        render::chart::draw(plan, &results.datapath, chart)?;
    }
    if let Some((np, path)) = &pps_chart {
        render::pps_chart::draw(plan, &np.pps, path)?;
    }
    eprintln!("wrote {} {}", md_path.display(), charts.join(" "));
    Ok(())
}

/// `--nodeport-only`: the NodePort section alone, in bench-nodeport.md.
pub(super) fn write_nodeport(plan: &Plan, np: &NodePort, cond: &Conditions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let mut targets = targets::nodeport::targets(plan, np);
    targets.extend(targets::pps::targets(plan, &np.pps));
    let svg = plan.out_dir.join("bench-nodeport-pps.svg");
    let charts = [svg.display().to_string()];
    let md = render::report::nodeport_only(plan, np, &targets, cond, &charts);
    print!("{md}");
    let path = plan.out_dir.join("bench-nodeport.md");
    std::fs::write(&path, &md)?;
    render::pps_chart::draw(plan, &np.pps, &svg)?;
    eprintln!("wrote {} and {}", path.display(), svg.display());
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
    let svg = plan.out_dir.join(format!("{name}.svg"));
    let charts = [svg.display().to_string()];
    let md = render::report::pps_only(plan, pps, &targets, cond, &charts);
    print!("{md}");
    let path = plan.out_dir.join(format!("{name}.md"));
    std::fs::write(&path, &md)?;
    render::pps_chart::draw(plan, pps, &svg)?;
    eprintln!("wrote {} and {}", path.display(), svg.display());
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
