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

/// Accuracy against tokens (`picks`): the plain vote of the first k samples, k = 1..=64, as a
/// line; one dot per pick through the gateway (labelled), a ring at its offline reference.
/// `figures` is the JSON `picks` prints.
pub fn picks(figures: &serde_json::Value, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let problems = figures["problems"].as_f64().unwrap_or(1.0).max(1.0);
    // Tokens per problem, thousands.
    let per = |t: f64| t / problems / 1000.0;
    let curve: Vec<(f64, f64)> = figures["vote_curve"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((per(c["tokens"].as_f64()?), 100.0 * c["accuracy"].as_f64()?)))
        .collect();
    let rows = figures["picks"].as_array().cloned().unwrap_or_default();
    let rows: Vec<_> = rows
        .iter()
        .filter(|r| !r["name"].as_str().unwrap_or("").contains('/'))
        .collect();
    let point = |r: &serde_json::Value| -> Option<(f64, f64)> {
        Some((per(r["tokens"].as_f64()?), 100.0 * r["accuracy"].as_f64()?))
    };
    let refpoint = |r: &serde_json::Value| -> Option<(f64, f64)> {
        Some((
            per(r["reference"]["tokens"].as_f64()?),
            100.0 * r["reference"]["accuracy"].as_f64()?,
        ))
    };
    let all: Vec<(f64, f64)> = curve
        .iter()
        .copied()
        .chain(rows.iter().filter_map(|r| point(r)))
        .chain(rows.iter().filter_map(|r| refpoint(r)))
        .collect();
    let x_min = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .max(1e-3)
        * 0.8;
    let x_max = all.iter().map(|p| p.0).fold(0.0, f64::max) * 1.25;
    let y_min = (all.iter().map(|p| p.1).fold(100.0, f64::min) - 2.0).floor();
    let y_max = (all.iter().map(|p| p.1).fold(0.0, f64::max) + 2.0)
        .ceil()
        .min(100.0);
    let root = SVGBackend::new(path, (820, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Do the picks pay? Accuracy against tokens generated",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d((x_min..x_max).log_scale(), y_min..y_max)?;
    chart
        .configure_mesh()
        .x_desc("thousand tokens per problem, log scale")
        .y_desc("accuracy, %")
        .x_label_formatter(&|v| format!("{v:.1}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    line_with_points(
        &mut chart,
        curve,
        "plain vote of the first k samples, k = 1..64 (offline)",
        COLORS[0],
    )?;
    let gateway = COLORS[3];
    chart
        .draw_series(
            rows.iter()
                .filter_map(|r| point(r))
                .map(|p| Circle::new(p, 5, gateway.filled())),
        )?
        .label("a pick through the gateway")
        .legend(move |(x, y)| Circle::new((x + 8, y), 5, gateway.filled()));
    let reference = COLORS[2];
    chart
        .draw_series(
            rows.iter()
                .filter_map(|r| refpoint(r))
                .map(|p| Circle::new(p, 7, reference.stroke_width(2))),
        )?
        .label("the same pick offline, one sample at a time")
        .legend(move |(x, y)| Circle::new((x + 8, y), 6, reference.stroke_width(2)));
    // Each pick's name beside its point, in the order of their tokens, above and below in
    // turn so that neighbours (adaptive and vote-16) do not write over each other.
    let mut named: Vec<(String, (f64, f64))> = (rows.iter())
        .filter_map(|r| Some((r["name"].as_str()?.to_string(), point(r)?)))
        .collect();
    named.sort_by(|a, b| a.1.0.total_cmp(&b.1.0));
    for (i, (name, p)) in named.into_iter().enumerate() {
        let dy = if i % 2 == 0 { -18 } else { 6 };
        let style = ("sans-serif", 13).into_font().color(&BLACK);
        chart.draw_series(std::iter::once(
            EmptyElement::at(p) + Text::new(name, (6, dy), style),
        ))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
