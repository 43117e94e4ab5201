//! The bench's SVG chart: connection rate against N.

use plotters::prelude::*;

use super::{
    super::{
        plan::Plan,
        results::datapath::{Load, Mode, Row, find},
    },
    plot,
};

/// TCP short connections per second of each mode against N.
pub(crate) fn draw(plan: &Plan, rows: &[Row], path: &std::path::Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (860, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = rows
        .iter()
        .map(|r| r.runs.rate(Load::Tcp))
        .fold(0.0, f64::max)
        * 1.15;
    let xs = plan.scales.len() as f64 - 1.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "TCP short connections per second vs number of Services",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.2..xs + 0.2, 0.0..ymax)?;
    plot::mesh_over_scales(&mut chart, &plan.scales, "connections / s")?;
    for (mode, color) in Mode::ALL.iter().zip([BLACK, BLUE, RED, GREEN]) {
        let points: Vec<(f64, f64)> = plan
            .scales
            .iter()
            .enumerate()
            .filter(|&(_, &n)| mode.measured_at(n))
            .map(|(i, &n)| (i as f64, find(rows, *mode, n).runs.rate(Load::Tcp)))
            .collect();
        plot::series(&mut chart, mode.name(), color, false, points)?;
    }
    plot::legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
    root.present()?;
    Ok(())
}
