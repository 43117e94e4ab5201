//! What the bench's SVG charts share: their series, the legend's box and
//! an x axis of Ns.

use plotters::{coord::types::RangedCoordf64, prelude::*};

/// A chart on an SVG file, both axes `f64`.
pub(super) type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A line through `points`, solid or `dashed`, with a legend entry
/// `label` and a dot at each point.
pub(super) fn series(
    chart: &mut Chart<'_, '_>,
    label: impl Into<String>,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
) -> anyhow::Result<()> {
    let style = color.stroke_width(2);
    let drawn = if dashed {
        chart.draw_series(DashedLineSeries::new(points.clone(), 8, 5, style))?
    } else {
        chart.draw_series(LineSeries::new(points.clone(), style))?
    };
    drawn
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    Ok(())
}

/// The legend of every series drawn, in a box at `position`.
pub(super) fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The mesh of a chart whose x axis is the Ns of `scales`, evenly spaced
/// (the i-th at x = i), each labelled with its N.
pub(super) fn mesh_over_scales<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    scales: &[usize],
    y_desc: &str,
) -> anyhow::Result<()> {
    chart
        .configure_mesh()
        .x_labels(scales.len())
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 {
                scales
                    .get(x.round() as usize)
                    .map_or(String::new(), |n| n.to_string())
            } else {
                String::new()
            }
        })
        .x_desc("Services (N)")
        .y_desc(y_desc)
        .draw()?;
    Ok(())
}
