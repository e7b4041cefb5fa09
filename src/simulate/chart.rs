//! SVG charts of traffic share over time: one file per scenario, one panel per strategy.

use super::metrics::Series;
use super::scenario::Scenario;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// A chart that cannot be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct ChartError {
    /// The SVG file.
    pub path: PathBuf,
    /// What the drawing library reported.
    pub source: DrawingAreaErrorKind<std::io::Error>,
}

/// Line colours of the providers, in order.
const COLOURS: [RGBColor; super::scenario_file::MAX_PROVIDERS] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// Size of one panel in pixels.
const PANEL: (u32, u32) = (420, 240);

/// Panels per row.
const COLUMNS: usize = 3;

/// Height of the header (title and legend).
const HEADER: u32 = 56;

/// Writes `path`: each contender's share of attempts per provider over time (`subtitle` says
/// what the time axis covers), with the scenario's incident shaded.
pub fn share_chart(
    path: &Path,
    scenario: &Scenario,
    subtitle: &str,
    series: &[(String, Series)],
) -> Result<(), ChartError> {
    let rows = series.len().div_ceil(COLUMNS).max(1);
    let size = (PANEL.0 * COLUMNS as u32, PANEL.1 * rows as u32 + HEADER);
    let err = |source| ChartError {
        path: path.to_path_buf(),
        source,
    };
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (header, body) = root.split_vertically(HEADER);
    header
        .draw(&Text::new(
            format!("{} - {subtitle}", scenario.title),
            (12, 8),
            ("sans-serif", 17),
        ))
        .map_err(err)?;
    // One legend for all panels.
    let mut x = 12;
    for (p, spec) in scenario.providers.iter().enumerate() {
        let colour = COLOURS[p % COLOURS.len()];
        header
            .draw(&PathElement::new(
                vec![(x, 40), (x + 24, 40)],
                colour.stroke_width(3),
            ))
            .map_err(err)?;
        let label = format!("{} ({} ms)", spec.name, spec.median_ms);
        header
            .draw(&Text::new(label, (x + 30, 33), ("sans-serif", 14)))
            .map_err(err)?;
        x += 160;
    }
    if scenario.incident.is_some() {
        header
            .draw(&Rectangle::new(
                [(x, 32), (x + 24, 48)],
                BLACK.mix(0.1).filled(),
            ))
            .map_err(err)?;
        header
            .draw(&Text::new("incident", (x + 30, 33), ("sans-serif", 14)))
            .map_err(err)?;
    }
    for (panel, (label, s)) in body.split_evenly((rows, COLUMNS)).iter().zip(series) {
        let (from, to) = (s.start_s, s.start_s + s.bin_s * s.shares.len() as f64);
        let mut chart = ChartBuilder::on(panel)
            .caption(label, ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(from..to, 0f64..1f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_labels(5)
            .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
            .light_line_style(WHITE)
            .draw()
            .map_err(err)?;
        if let Some(inc) = scenario.incident {
            let a = (inc.start as f64 / 1e6).max(from);
            let b = (inc.end.unwrap_or(scenario.duration) as f64 / 1e6).min(to);
            if a < b {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(a, 0.0), (b, 1.0)],
                        BLACK.mix(0.07).filled(),
                    )))
                    .map_err(err)?;
            }
        }
        for p in 0..scenario.providers.len() {
            let colour = COLOURS[p % COLOURS.len()];
            let points = s.shares.iter().enumerate().map(|(i, b)| {
                (
                    from + (i as f64 + 0.5) * s.bin_s,
                    b.get(p).copied().unwrap_or(0.0),
                )
            });
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}
