//! SVG charts of traffic share over time: one file per scenario, one panel per strategy.

use super::metrics::Series;
use super::scenario::Scenario;
use plotters::prelude::*;
use std::path::Path;

/// Line colours of the providers, in order (fast, mid, slow).
const COLOURS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];

/// Size of one panel in pixels.
const PANEL: (u32, u32) = (420, 260);

/// Panels per row.
const COLUMNS: usize = 3;

/// Writes `path`: each contender's share of attempts per provider over time, the incident
/// shaded.
pub fn share_chart(
    path: &Path,
    scenario: &Scenario,
    series: &[(String, Series)],
) -> Result<(), String> {
    let rows = series.len().div_ceil(COLUMNS).max(1);
    let size = (PANEL.0 * COLUMNS as u32, PANEL.1 * rows as u32 + 40);
    let err = |e: DrawingAreaErrorKind<_>| format!("{}: {e}", path.display());
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(
            &format!("{} - traffic share over time", scenario.title),
            ("sans-serif", 18),
        )
        .map_err(err)?;
    let duration = scenario.duration as f64 / 1e6;
    for (panel, (label, s)) in root.split_evenly((rows, COLUMNS)).iter().zip(series) {
        let mut chart = ChartBuilder::on(panel)
            .caption(label, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(40)
            .build_cartesian_2d(0f64..duration, 0f64..1f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_labels(5)
            .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
            .light_line_style(WHITE)
            .draw()
            .map_err(err)?;
        if let Some(inc) = scenario.incident {
            let (a, b) = (
                inc.start as f64 / 1e6,
                inc.end.unwrap_or(scenario.duration) as f64 / 1e6,
            );
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, 0.0), (b, 1.0)],
                    BLACK.mix(0.07).filled(),
                )))
                .map_err(err)?;
        }
        for (p, spec) in scenario.providers.iter().enumerate() {
            let colour = COLOURS[p % COLOURS.len()];
            let points = s
                .shares
                .iter()
                .enumerate()
                .map(|(i, b)| ((i as f64 + 0.5) * s.bin_s, b.get(p).copied().unwrap_or(0.0)));
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(err)?
                .label(spec.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
