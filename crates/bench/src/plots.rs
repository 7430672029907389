//! SVG plots of the figures, for docs/benchmarks.md.

use std::path::Path;

use plotters::prelude::*;

use plotters::coord::ranged1d::Ranged;

use crate::latency::Summary;
use crate::throughput::ThroughputResult;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// Throughput (M chunks/s) against n, one line per contender.
pub fn throughput(
    results: &[ThroughputResult],
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = results
        .iter()
        .flat_map(|r| {
            r.figures
                .iter()
                .map(move |f| f.chunks_per_sec(r.chunks) / 1e6)
        })
        .fold(0.0, f64::max)
        * 1.15;
    let ns: Vec<f64> = results.iter().map(|r| f64::from(r.n)).collect();
    let x_max = ns.iter().copied().fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "End-to-end throughput against n (median)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d((0.5f64..x_max).log_scale(), 0f64..max)?;
    chart
        .configure_mesh()
        .x_desc("choices (n), log scale")
        .y_desc("M chunks/s")
        .draw()?;
    let Some(first) = results.first() else {
        return Ok(());
    };
    for (i, contender) in first.figures.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = results
            .iter()
            .filter_map(|r| {
                r.find(contender.name)
                    .map(|f| (f64::from(r.n), f.chunks_per_sec(r.chunks) / 1e6))
            })
            .collect();
        line_with_points(&mut chart, points, contender.name, color)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Added-latency percentiles (µs, log scale) of choicewise and the no-actor floor.
pub fn latency(series: &[(&str, Summary)], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = series.iter().map(|(_, s)| s.max).fold(100.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Added latency of a content delta (median of runs)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(0f64..3.5, (1f64..max).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(4)
        .x_label_formatter(&|x| match x.round() as i64 {
            0 => "p50".into(),
            1 => "p99".into(),
            2 => "p99.9".into(),
            3 => "max".into(),
            _ => String::new(),
        })
        .y_desc("µs, log scale")
        .draw()?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = vec![(0.0, s.p50), (1.0, s.p99), (2.0, s.p999), (3.0, s.max)];
        line_with_points(&mut chart, points, name, color)?;
    }
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 50.0), (3.5, 50.0)],
            BLACK.mix(0.4),
        ))?
        .label("target p99 = 50 µs")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.4)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// One labelled line with a dot at each point.
fn line_with_points<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    points: Vec<(f64, f64)>,
    label: &str,
    color: RGBColor,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    chart
        .draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 3, color.filled())),
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}
