//! The files a run writes under target/bench/ (the Markdown also to
//! stdout): the report, its chart, and the targets met or missed.

use std::{path::Path, time::Duration};

use super::{
    Plan,
    conditions::Conditions,
    render,
    results::{Results, nodeport::NodePort, scale},
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
    let chart_name = chart.as_ref().map(|c| c.display().to_string());
    let targets = targets::of(plan, results);
    let md = render::report::full(plan, results, &targets, cond, chart_name.as_deref());
    print!("{md}");
    std::fs::write(&md_path, &md)?;
    match &chart {
        Some(chart) => {
            render::chart::draw(plan, &results.datapath, chart)?;
            eprintln!("wrote {} and {}", md_path.display(), chart.display());
        }
        None => eprintln!("wrote {}", md_path.display()),
    }
    Ok(())
}

/// `--nodeport-only`: the NodePort section alone, in bench-nodeport.md.
pub(super) fn write_nodeport(plan: &Plan, np: &NodePort, cond: &Conditions) -> anyhow::Result<()> {
    std::fs::create_dir_all(&plan.out_dir)?;
    let targets = targets::nodeport::targets(plan, np);
    let md = render::report::nodeport_only(plan, np, &targets, cond);
    print!("{md}");
    let path = plan.out_dir.join("bench-nodeport.md");
    std::fs::write(&path, &md)?;
    eprintln!("wrote {}", path.display());
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
