//! The plot of `picks`: accuracy against tokens generated (SVG), as a chart one reads at a
//! glance: its message in its title, round ticks, the picks apart from the vote-k curve, no
//! label over another.

use std::path::Path;

use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;

/// The vote-k curve: in the background.
const CURVE: RGBColor = RGBColor(160, 160, 160);
/// The picks through the gateway.
const GATEWAY: RGBColor = RGBColor(214, 39, 40);
/// Their offline references.
const REFERENCE: RGBColor = RGBColor(44, 120, 44);

/// Tokens as a round label: `100`, `2k`, `20k`.
pub fn tokens_label(t: f64) -> String {
    if t >= 1000.0 {
        let k = t / 1000.0;
        if (k - k.round()).abs() < 1e-6 {
            format!("{}k", k.round())
        } else {
            format!("{k:.1}k")
        }
    } else if t >= 1.0 {
        format!("{}", t.round())
    } else {
        format!("{}", (t * 100.0).round() / 100.0)
    }
}

/// The 1-2-5 ticks of a log axis between `lo` and `hi`.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.max(1e-9).log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = m * decade;
            if v >= lo && v <= hi {
                out.push(v);
            }
        }
        decade *= 10.0;
    }
    out
}

/// The title: what the chart says, from the figures (the pick [`recommend`](crate::recommend)
/// chooses).
fn message(figures: &serde_json::Value) -> String {
    match crate::recommend(figures, &crate::Rule::default()) {
        Some(r) => format!(
            "{} keeps the best accuracy (within 1 point: {:.1}%) with {:.1}x one sample's tokens",
            r.pick,
            100.0 * r.accuracy,
            r.tokens_vs_single
        ),
        None => "Accuracy against tokens generated, pick by pick".into(),
    }
}

/// A label's box in pixels: left, top, right, bottom.
type Rect = (i32, i32, i32, i32);

fn overlaps(a: Rect, b: Rect) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// Places each label (its point in pixels, its width) beside its point, at the first of a
/// few spots where it overlaps no label placed before, no point and stays within `area`;
/// the farther spots get a leader line. Returns each label's top-left corner and whether it
/// needs a leader.
pub fn place_labels(
    labels: &[((i32, i32), i32)],
    points: &[(i32, i32)],
    area: Rect,
    height: i32,
) -> Vec<((i32, i32), bool)> {
    let mut taken: Vec<Rect> = (points.iter())
        .map(|&(x, y)| (x - 7, y - 7, x + 7, y + 7))
        .collect();
    let mut out = Vec::new();
    for &((x, y), w) in labels {
        let h = height;
        let mut spots: Vec<((i32, i32), bool)> = vec![
            ((x + 9, y - h - 2), false),
            ((x + 9, y + 3), false),
            ((x - w - 9, y - h - 2), false),
            ((x - w - 9, y + 3), false),
            ((x - w / 2, y - h - 10), false),
            ((x - w / 2, y + 10), false),
        ];
        for step in 1..12 {
            let d = 10 + 12 * step;
            spots.extend([
                ((x - w / 2, y - h - d), true),
                ((x - w / 2, y + d), true),
                ((x + 9, y - h - d), true),
                ((x + 9, y + d), true),
            ]);
        }
        let fits = |&((lx, ly), _): &((i32, i32), bool)| {
            let r = (lx, ly, lx + w, ly + h);
            r.0 >= area.0
                && r.1 >= area.1
                && r.2 <= area.2
                && r.3 <= area.3
                && !taken.iter().any(|t| overlaps(r, *t))
        };
        let spot = spots.iter().copied().find(fits).unwrap_or(spots[0]);
        taken.push((spot.0.0, spot.0.1, spot.0.0 + w, spot.0.1 + h));
        out.push(spot);
    }
    out
}

/// Accuracy against tokens (`picks`): the plain vote of the first k samples, k = 1..=64, as a
/// grey line in the background; one red dot per pick through the gateway (named), a green
/// ring at its offline reference. `figures` is the JSON `picks` prints
/// ([`summary`](crate::summary)); the title says which pick keeps the best vote's accuracy
/// for the fewest tokens.
pub fn picks(figures: &serde_json::Value, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(path, picks_svg(figures)?)?;
    Ok(())
}

/// [`picks`]'s plot as an SVG document in a string (the console puts it in its page). A
/// summary measured offline only ([`offline_summary`](crate::offline_summary)) draws each
/// pick once, as computed on the recorded samples.
///
/// ```
/// let figures = serde_json::json!({"problems": 10, "picks": [
///     {"name": "single", "accuracy": 0.5, "tokens": 100, "reference": {"accuracy": 0.5, "tokens": 100}},
/// ]});
/// let svg = choicewise_picks::plot::picks_svg(&figures).unwrap();
/// assert!(svg.starts_with("<svg") && svg.contains("single"));
/// ```
pub fn picks_svg(figures: &serde_json::Value) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    draw(figures, SVGBackend::with_string(&mut svg, (900, 540)))?;
    Ok(svg)
}

fn draw(
    figures: &serde_json::Value,
    backend: SVGBackend<'_>,
) -> Result<(), Box<dyn std::error::Error>> {
    let offline = figures["measured"] == "offline";
    let problems = figures["problems"].as_f64().unwrap_or(1.0).max(1.0);
    // Tokens per problem.
    let per = |t: f64| t / problems;
    let curve_rows = figures["vote_curve"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let curve: Vec<(f64, f64)> = (curve_rows.iter())
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
    // A pick's 95% interval over the items, at its tokens.
    let bar = |r: &serde_json::Value| -> Option<Vec<(f64, f64)>> {
        let (x, _) = point(r)?;
        let i = r["accuracy_interval"].as_array()?;
        Some(vec![
            (x, 100.0 * i.first()?.as_f64()?),
            (x, 100.0 * i.get(1)?.as_f64()?),
        ])
    };
    let all: Vec<(f64, f64)> = (curve.iter().copied())
        .chain(rows.iter().filter_map(|r| point(r)))
        .chain(rows.iter().filter_map(|r| bar(r)).flatten())
        .chain(rows.iter().filter_map(|r| refpoint(r)))
        .collect();
    let lo = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let hi = all.iter().map(|p| p.0).fold(0.0, f64::max);
    let (x_min, x_max) = (lo.max(1.0) * 0.7, hi.max(1.0) * 1.6);
    // Room below for the legend.
    let y_min = (all.iter().map(|p| p.1).fold(100.0, f64::min) - 4.0).floor();
    let y_max = (all.iter().map(|p| p.1).fold(0.0, f64::max) + 1.5)
        .ceil()
        .min(100.0);
    let ticks = log_ticks(x_min, x_max);
    let root = backend.into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(message(figures), ("sans-serif", 17))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(52)
        .build_cartesian_2d(
            (x_min..x_max).log_scale().with_key_points(ticks),
            y_min..y_max,
        )?;
    let y_step = if y_max - y_min > 12.0 { 2.0 } else { 1.0 };
    chart
        .configure_mesh()
        .x_desc("tokens generated per problem (log scale)")
        .y_desc(match figures["measured_against"].as_str() {
            // A set without answers (recorded traffic): agreement, not accuracy.
            Some("feedback") => "accuracy by feedback (a lower bound), %",
            Some(_) => "agreement with the vote of all samples, %",
            None => "accuracy, %",
        })
        .x_label_formatter(&|v| tokens_label(*v))
        .y_labels(((y_max - y_min) / y_step) as usize + 1)
        .y_label_formatter(&|v| format!("{}", v.round()))
        .light_line_style(WHITE)
        .draw()?;
    let last = (curve_rows.last())
        .and_then(|c| c["k"].as_u64())
        .unwrap_or(1);
    chart
        .draw_series(LineSeries::new(curve.clone(), CURVE.stroke_width(2)))?
        .label(format!(
            "plain vote of the first k samples, k = 1..{last} (offline)"
        ))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], CURVE.stroke_width(2)));
    chart.draw_series(curve.iter().map(|&p| Circle::new(p, 2, CURVE.filled())))?;
    // The curve's k at a few points, small and grey.
    for c in &curve_rows {
        let k = c["k"].as_u64().unwrap_or(0);
        if [1, 2, 4, 8, 16, 32, 64].contains(&k)
            && let (Some(t), Some(a)) = (c["tokens"].as_f64(), c["accuracy"].as_f64())
        {
            let style = ("sans-serif", 11).into_font().color(&CURVE);
            chart.draw_series(std::iter::once(
                EmptyElement::at((per(t), 100.0 * a)) + Text::new(format!("k={k}"), (-8, 6), style),
            ))?;
        }
    }
    if !offline {
        chart
            .draw_series(
                rows.iter()
                    .filter_map(|r| refpoint(r))
                    .map(|p| Circle::new(p, 7, REFERENCE.stroke_width(2))),
            )?
            .label("the same pick offline (its reference)")
            .legend(|(x, y)| Circle::new((x + 8, y), 6, REFERENCE.stroke_width(2)));
    }
    if rows.iter().any(|r| bar(r).is_some()) {
        chart
            .draw_series(
                (rows.iter())
                    .filter_map(|r| bar(r))
                    .map(|b| PathElement::new(b, GATEWAY.stroke_width(1))),
            )?
            .label("its 95% interval over the items")
            .legend(|(x, y)| PathElement::new(vec![(x + 8, y - 6), (x + 8, y + 6)], GATEWAY));
    }
    chart
        .draw_series(
            rows.iter()
                .filter_map(|r| point(r))
                .map(|p| Circle::new(p, 5, GATEWAY.filled())),
        )?
        .label(match offline {
            true => "a pick on the recorded samples (offline)",
            false => "a pick through the gateway",
        })
        .legend(|(x, y)| Circle::new((x + 8, y), 5, GATEWAY.filled()));
    // The picks' names, placed in pixels clear of each other and of the points.
    let named: Vec<(String, (f64, f64))> = (rows.iter())
        .filter_map(|r| Some((r["name"].as_str()?.to_string(), point(r)?)))
        .collect();
    let px = |p: (f64, f64)| chart.backend_coord(&p);
    let mut points: Vec<(i32, i32)> = named.iter().map(|(_, p)| px(*p)).collect();
    points.extend(rows.iter().filter_map(|r| refpoint(r)).map(px));
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    // The legend's corner (lower right) is no place for a name.
    let legend: (i32, i32, i32, i32) = (xr.end - 330, yr.end - 80, xr.end, yr.end);
    let height = 14;
    let labels: Vec<((i32, i32), i32)> = (named.iter())
        .map(|(name, p)| (px(*p), 7 * name.len() as i32 + 4))
        .collect();
    // Nor the curve, nor its k labels.
    let mut blocked = points.clone();
    blocked.extend(curve.iter().map(|&p| px(p)));
    blocked.extend(
        (curve_rows.iter())
            .filter(|c| [1, 2, 4, 8, 16, 32, 64].contains(&c["k"].as_u64().unwrap_or(0)))
            .filter_map(|c| {
                Some(px((
                    per(c["tokens"].as_f64()?),
                    100.0 * c["accuracy"].as_f64()?,
                )))
            })
            .flat_map(|(x, y)| [(x, y + 12), (x + 14, y + 12)]),
    );
    blocked.extend(
        (0..8).flat_map(|i| (0..4).map(move |j| (legend.0 + 7 + 40 * i, legend.1 + 7 + 20 * j))),
    );
    let placed = place_labels(
        &labels,
        &blocked,
        (xr.start, yr.start, xr.end, yr.end),
        height,
    );
    let root = chart.plotting_area().strip_coord_spec();
    for ((name, p), (((lx, ly), leader), (_, w))) in named.iter().zip(placed.iter().zip(&labels)) {
        let (x, y) = px(*p);
        let (x, y) = (x - xr.start, y - yr.start);
        let (lx, ly) = (lx - xr.start, ly - yr.start);
        if *leader {
            let to = (lx + w / 2, if ly > y { ly } else { ly + height });
            root.draw(&PathElement::new(vec![(x, y), to], BLACK.mix(0.4)))?;
        }
        let style = ("sans-serif", 13).into_font().color(&BLACK);
        root.draw(&Text::new(name.clone(), (lx, ly), style))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.5))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(
            log_ticks(70.0, 12000.0),
            [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0]
        );
        let labels: Vec<String> = log_ticks(0.3, 3000.0)
            .into_iter()
            .map(tokens_label)
            .collect();
        assert_eq!(
            labels,
            [
                "0.5", "1", "2", "5", "10", "20", "50", "100", "200", "500", "1k", "2k"
            ]
        );
    }

    #[test]
    fn labels_do_not_overlap() {
        // Two picks a few pixels apart (adaptive and vote-16), and a third near by.
        let labels = [((100, 100), 60), ((104, 98), 56), ((110, 104), 50)];
        let placed = place_labels(
            &labels,
            &[(100, 100), (104, 98), (110, 104)],
            (0, 0, 400, 300),
            14,
        );
        for (i, a) in placed.iter().enumerate() {
            let ra = (a.0.0, a.0.1, a.0.0 + labels[i].1, a.0.1 + 14);
            for (j, b) in placed.iter().enumerate().skip(i + 1) {
                let rb = (b.0.0, b.0.1, b.0.0 + labels[j].1, b.0.1 + 14);
                assert!(!overlaps(ra, rb), "{ra:?} {rb:?}");
            }
        }
    }

    /// The figures of docs/picks.md's first table (set-b), enough to draw.
    fn figures() -> serde_json::Value {
        let row = |name: &str, acc: f64, tokens: u64, racc: f64, rtokens: u64| {
            serde_json::json!({"name": name, "accuracy": acc, "tokens": tokens,
                "accuracy_interval": [acc - 0.04, (acc + 0.04).min(1.0)],
                "reference": {"accuracy": racc, "tokens": rtokens}})
        };
        let curve: Vec<_> = (1..=64u64)
            .map(|k| serde_json::json!({"k": k, "accuracy": 0.78 + 0.05 * (k as f64).ln() / 64f64.ln(), "tokens": 44_000 * k}))
            .collect();
        serde_json::json!({"problems": 400, "picks": [
            row("single", 0.7825, 44_029, 0.7825, 44_029),
            row("first-finished", 0.7725, 175_531, 0.7625, 175_412),
            row("vote-4", 0.8025, 176_004, 0.7975, 176_016),
            row("vote-8", 0.8275, 351_858, 0.825, 351_874),
            row("vote-16", 0.83, 703_659, 0.8275, 703_702),
            row("vote-64", 0.83, 2_813_773, 0.8275, 2_814_606),
            row("adaptive", 0.83, 665_162, 0.83, 674_151),
            row("confidence-high", 0.8275, 1_353_906, 0.8275, 1_337_129),
            row("confidence-low", 0.775, 962_826, 0.775, 881_027),
        ], "vote_curve": curve})
    }

    #[test]
    fn draws_round_ticks_and_says_its_message() {
        let path = std::env::temp_dir().join(format!("picks-plot-{}.svg", std::process::id()));
        picks(&figures(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        if std::env::var_os("PICKS_PLOT_KEEP").is_none() {
            let _ = std::fs::remove_file(&path);
        }
        assert!(!svg.contains("0000000"), "a tick label is not round");
        // vote-8: within a point of the most accurate pick (83.00%), with the fewest tokens.
        assert!(
            svg.contains("vote-8 keeps the best accuracy"),
            "{}",
            &svg[..600]
        );
        for tick in [">\n100\n<", ">\n1k\n<"] {
            assert!(svg.contains(tick), "no tick {tick:?}");
        }
        // The intervals, and their legend.
        assert!(svg.contains("its 95% interval over the items"));
    }
}
