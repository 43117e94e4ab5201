//! The packets-per-second chart: frames per second received through each
//! mode against N, IPv4 solid and IPv6 dashed, on one bed.

use plotters::prelude::*;

use super::{
    super::{
        plan::Plan,
        results::pps::{Family, Pps, PpsBed, PpsMode, find},
    },
    plot,
};

pub(crate) fn draw(
    plan: &Plan,
    pps: &Pps,
    bed: PpsBed,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (860, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let ymax = pps
        .rows
        .iter()
        .filter(|r| r.bed == bed)
        .map(|r| r.pps())
        .fold(0.0, f64::max)
        * 1.15;
    let scales: Vec<usize> = plan.pps_scales().collect();
    let xs = scales.len().saturating_sub(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("UDP to a NodePort, {}: packets/s vs Services", bed.short()),
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.2..xs + 0.2, 0.0..ymax.max(1.0))?;
    plot::mesh_over_scales(&mut chart, &scales, "packets / s received")?;
    let colors = [BLACK, BLUE, RED, GREEN, MAGENTA, CYAN];
    for (mode, color) in PpsMode::ALL.into_iter().zip(colors.into_iter().cycle()) {
        for family in Family::ALL {
            let points: Vec<(f64, f64)> = scales
                .iter()
                .enumerate()
                .filter_map(|(i, &n)| {
                    Some((i as f64, find(&pps.rows, bed, family, mode, n)?.pps()))
                })
                .collect();
            let label = format!("{} ({})", mode.name(), family.name());
            let dashed = family == Family::V6;
            plot::series(&mut chart, label, color, dashed, points)?;
        }
    }
    plot::legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
    root.present()?;
    Ok(())
}
