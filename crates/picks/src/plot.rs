//! The plot of `picks`: accuracy against tokens generated (SVG).

use std::path::Path;

use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// Accuracy against tokens (`picks`): the plain vote of the first k samples, k = 1..=64, as a
/// line; one dot per pick through the gateway (labelled), a ring at its offline reference.
/// `figures` is the JSON `picks` prints ([`summary`](crate::summary)).
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
    let last = figures["vote_curve"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(|c| c["k"].as_u64())
        .unwrap_or(1);
    line_with_points(
        &mut chart,
        curve,
        &format!("plain vote of the first k samples, k = 1..{last} (offline)"),
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
