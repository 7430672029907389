//! SVG plots of the figures, for docs/benchmarks.md.

use std::path::Path;

use plotters::prelude::*;

use plotters::coord::ranged1d::Ranged;

use crate::latency::Summary;
use crate::throughput::ThroughputResult;

/// One colour per contender (the throughput plot has six, the latency plot five), none of
/// them the grey of the target's mark.
const COLORS: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Throughput (M chunks/s) against n, one line per contender: a tick at each `n` measured,
/// the legend in headroom above the lines so that it hides no point.
pub fn throughput(
    results: &[ThroughputResult],
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let highest = results
        .iter()
        .flat_map(|r| {
            r.figures
                .iter()
                .map(move |f| f.chunks_per_sec(r.chunks) / 1e6)
        })
        .fold(0.0, f64::max);
    // Headroom for the legend: the lines stay in the lower 60% of the chart.
    let y_max = nice_ceiling(highest / 0.6);
    let ns: Vec<f64> = results.iter().map(|r| f64::from(r.n)).collect();
    let x_min = ns.iter().copied().fold(f64::INFINITY, f64::min).min(1.0) / 1.5;
    let x_max = ns.iter().copied().fold(1.0, f64::max) * 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(throughput_title(results), ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(
            (x_min..x_max).log_scale().with_key_points(ns.clone()),
            0f64..y_max,
        )?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("choices (n), log scale")
        .y_desc("M chunks/s (median of runs)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
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
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.5))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The throughput plot's message: choicewise's share of the hand-written loop's throughput
/// at the largest `n`.
fn throughput_title(results: &[ThroughputResult]) -> String {
    let share = results.iter().max_by_key(|r| r.n).and_then(|r| {
        let find = |prefix: &str| r.figures.iter().find(|f| f.name.starts_with(prefix));
        let (ours, floor) = (find("choicewise")?, find("hand-written loop")?);
        Some((
            r.n,
            ours.chunks_per_sec(r.chunks) / floor.chunks_per_sec(r.chunks),
        ))
    });
    match share {
        Some((n, share)) => format!(
            "Throughput against n: choicewise at n = {n} has {share:.2}x a hand-written loop's"
        ),
        None => "Throughput against n (median of runs)".to_string(),
    }
}

/// The latency plot's message: what choicewise adds at p50 and p99, against the target.
fn latency_title(series: &[(&str, Summary)]) -> String {
    match series
        .iter()
        .find(|(name, _)| name.starts_with("choicewise"))
    {
        Some((_, s)) => format!(
            "Latency a content delta adds: choicewise p50 {:.0} µs, p99 {:.0} µs (target 50)",
            s.p50, s.p99
        ),
        None => "Latency a content delta adds (median of runs)".to_string(),
    }
}

/// The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) at or
/// above `x`: an axis's top tick.
fn nice_ceiling(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let decade = 10f64.powf(x.log10().floor());
    [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|v| *v >= x)
        .unwrap_or(10.0 * decade)
}

/// Added-latency percentiles (µs, log scale) of choicewise and the no-actor floor: ticks at
/// each decade up to one above every point, the p99 target marked at p99 only.
pub fn latency(series: &[(&str, Summary)], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (760, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let highest = series.iter().map(|(_, s)| s.max).fold(100.0, f64::max);
    // The top of the axis is a decade, so that it carries a labelled tick.
    let top = 10f64.powf(highest.log10().ceil() + 1.0);
    let decades: Vec<f64> = (0..=top.log10() as i32).map(|e| 10f64.powi(e)).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(latency_title(series), ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(
            -0.3f64..3.3,
            (1f64..top).log_scale().with_key_points(decades),
        )?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .disable_x_mesh()
        .x_labels(4)
        .x_label_formatter(&|x| match x.round() as i64 {
            0 => "p50".into(),
            1 => "p99".into(),
            2 => "p99.9".into(),
            3 => "max".into(),
            _ => String::new(),
        })
        .x_desc("percentile of the deltas (median of runs)")
        .y_desc("µs added, log scale")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, (name, s)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = vec![(0.0, s.p50), (1.0, s.p99), (2.0, s.p999), (3.0, s.max)];
        line_with_points(&mut chart, points, name, color)?;
    }
    // The target applies to p99 alone: a dashed mark there, not a line across the chart.
    let target = RGBColor(120, 120, 120);
    chart
        .draw_series(DashedLineSeries::new(
            vec![(0.7, 50.0), (1.3, 50.0)],
            6,
            4,
            target.stroke_width(2),
        ))?
        .label("target: p99 at most 50 µs")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], target.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.5))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of an SVG's `<text>` elements, trimmed.
    fn texts_of(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                Some(
                    t.split_once('>')?
                        .1
                        .split_once("</text>")?
                        .0
                        .trim()
                        .to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(1.79 / 0.6), 3.0);
        assert_eq!(nice_ceiling(1.1), 1.5);
        assert_eq!(nice_ceiling(0.31), 0.4);
        assert_eq!(nice_ceiling(100.0), 100.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
    }

    /// Six contenders (as a run of the harness has): six lines of six colours.
    #[test]
    fn every_contender_has_a_colour_of_its_own() {
        use crate::throughput::Figures;
        let dir = std::env::temp_dir().join(format!("choicewise-colours-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let names = ["a", "b", "c", "d", "e", "f"];
        let results: Vec<ThroughputResult> = [1, 4, 16]
            .into_iter()
            .map(|n| ThroughputResult {
                n,
                chunks: 1_000_000,
                mb: 100.0,
                first_appearance: String::new(),
                figures: (names.iter().enumerate())
                    .map(|(i, &name)| Figures {
                        name,
                        secs: vec![0.5 + i as f64 / 10.0],
                        cpu_secs: vec![0.5],
                    })
                    .collect(),
            })
            .collect();
        let path = dir.join("throughput.svg");
        throughput(&results, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let mut strokes: Vec<&str> = (svg.split("<polyline").skip(1))
            .filter_map(|p| p.split("stroke=\"").nth(1)?.split('"').next())
            .filter(|stroke| *stroke != "#000000") // the axes
            .collect();
        strokes.sort_unstable();
        strokes.dedup();
        assert!(strokes.len() >= names.len(), "{strokes:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Both plots from figures shaped as a run's: every `n` and the top decade labelled,
    /// the p99 target named once.
    #[test]
    fn plots_label_every_n_and_the_top_decade() {
        use crate::throughput::Figures;
        let dir = std::env::temp_dir().join(format!("choicewise-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |n: u32, secs: [f64; 2]| ThroughputResult {
            n,
            chunks: 1_000_000,
            mb: 100.0,
            first_appearance: String::new(),
            figures: vec![
                Figures {
                    name: "hand-written loop",
                    secs: vec![secs[0]],
                    cpu_secs: vec![secs[0]],
                },
                Figures {
                    name: "choicewise",
                    secs: vec![secs[1]],
                    cpu_secs: vec![secs[1]],
                },
            ],
        };
        let results = [
            run(1, [0.56, 0.71]),
            run(4, [0.6, 0.9]),
            run(16, [0.64, 0.8767]),
        ];
        let path = dir.join("throughput.svg");
        throughput(&results, &path).unwrap();
        let texts = texts_of(&std::fs::read_to_string(&path).unwrap());
        for tick in ["1", "4", "16"] {
            assert!(texts.iter().any(|t| t == tick), "no tick {tick}: {texts:?}");
        }
        assert!(
            !texts.iter().any(|t| t.contains(".0") && t.len() > 4),
            "{texts:?}"
        );
        assert!(texts[0].contains("n = 16 has 0.73x"), "{texts:?}");
        let summary = |p50, p99, p999, max| Summary {
            p50,
            p99,
            p999,
            max,
            end_to_end_p50: 0.0,
            end_to_end_p99: 0.0,
            best_p99: p99,
            worst_p99: p99,
            over_50us: 0.0,
            over_1ms: 0.0,
            events_per_read: 1.0,
            offered_rate: 1.0,
        };
        let path = dir.join("latency.svg");
        let series = [("choicewise", summary(10.0, 30.0, 210.0, 590.0))];
        latency(&series, &path).unwrap();
        let texts = texts_of(&std::fs::read_to_string(&path).unwrap());
        for tick in ["1", "10", "100", "1000", "10000"] {
            assert!(texts.iter().any(|t| t == tick), "no tick {tick}: {texts:?}");
        }
        let target = texts
            .iter()
            .filter(|t| t.contains("target: p99 at most 50"));
        assert_eq!(target.count(), 1);
        assert!(texts[0].contains("p50 10 µs, p99 30 µs"), "{texts:?}");
        if std::env::var_os("CHOICEWISE_KEEP_PLOTS").is_none() {
            std::fs::remove_dir_all(&dir).ok();
        }
    }
}
