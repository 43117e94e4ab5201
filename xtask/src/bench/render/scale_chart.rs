//! The `--scale` chart: three panels against N.

use std::path::Path;

use plotters::prelude::*;

use super::{
    super::{
        results::scale::{API, FILE, Row},
        stats::percentile,
        units::{mib, millis},
    },
    plot,
};

/// Three panels against N: cold start, change latency, RSS.
pub(crate) fn draw(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (1320, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let xmax = rows.iter().map(|r| r.n).max().unwrap_or(1) as f64 * 1.05;
    type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);
    let line = |source: &'static str, f: &dyn Fn(&Row) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.source == source)
            .map(|r| (r.n as f64, f(r)))
            .collect()
    };
    let cold: Vec<Series<'_>> = vec![
        ("file", BLUE, line(FILE, &|r| r.cold.as_secs_f64())),
        ("apiserver", RED, line(API, &|r| r.cold.as_secs_f64())),
    ];
    let change: Vec<Series<'_>> = vec![
        (
            "p50",
            BLACK,
            line(API, &|r| millis(percentile(&r.changes, 50.0))),
        ),
        (
            "p99",
            RED,
            line(API, &|r| millis(percentile(&r.changes, 99.0))),
        ),
    ];
    let rss: Vec<Series<'_>> = vec![
        ("file", BLUE, line(FILE, &|r| mib(r.rss.current))),
        ("apiserver", RED, line(API, &|r| mib(r.rss.current))),
    ];
    for (area, (title, ylabel, series)) in panels.iter().zip([
        ("Cold programming", "seconds", cold),
        ("One-endpoint change (apiserver)", "ms", change),
        ("Agent RSS once programmed", "MiB", rss),
    ]) {
        let ymax = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .fold(0.0, f64::max)
            * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax.max(1e-3))?;
        chart
            .configure_mesh()
            .x_labels(6)
            .x_label_formatter(&|x| format!("{}k", (x / 1000.0).round()))
            .x_desc("Services (N)")
            .y_desc(ylabel)
            .draw()?;
        for (name, color, points) in series {
            plot::series(&mut chart, name, color, false, points)?;
        }
        plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    root.present()?;
    Ok(())
}
