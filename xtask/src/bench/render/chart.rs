//! The bench's SVG chart: connection rate against N.

use plotters::prelude::*;

use super::super::{
    plan::Plan,
    results::datapath::{Load, Mode, Row, find},
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
    let scales = plan.scales.clone();
    chart
        .configure_mesh()
        .x_labels(scales.len())
        .x_label_formatter(&|x| {
            let i = x.round() as usize;
            if (x - x.round()).abs() < 1e-6 {
                scales.get(i).map_or(String::new(), |n| n.to_string())
            } else {
                String::new()
            }
        })
        .x_desc("Services (N)")
        .y_desc("connections / s")
        .draw()?;
    for (mode, color) in Mode::ALL.iter().zip([BLACK, BLUE, RED, GREEN]) {
        let points: Vec<(f64, f64)> = plan
            .scales
            .iter()
            .enumerate()
            .filter(|&(_, &n)| mode.measured_at(n))
            .map(|(i, &n)| (i as f64, find(rows, *mode, n).runs.rate(Load::Tcp)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(mode.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
