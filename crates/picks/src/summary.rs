//! The figures as one JSON object, its table, and the pick it recommends.

use serde_json::{Value, json};

use crate::traces::TraceSet;
use crate::{Figures, Offline, Pick, Settings};

/// What [`summary`] puts together.
#[derive(Debug, Clone, Copy)]
pub struct Results<'a> {
    /// The set replayed.
    pub set: &'a TraceSet,
    /// The picks, in the table's order.
    pub picks: &'a [Pick],
    /// The settings the picks were run with ([`Pick::settings`] gives each its own).
    pub settings: &'a Settings,
    /// The votes' key.
    pub vote_by: &'a str,
    /// Each pick's reference ([`offline`](crate::offline)), in the order of `picks`.
    pub offline: &'a [Offline],
    /// The plain vote of the first k samples ([`vote_curve`](crate::vote_curve)).
    pub curve: &'a [(usize, f64, u64)],
    /// The runs through the gateway, each with one [`Figures`] per pick (none: offline only);
    /// the medians are reported.
    pub runs: &'a [Vec<Figures>],
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// A percentile (nearest rank) of some values; 0 without any.
fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    let rank = ((q / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The figures as one JSON object: `problems`, `samples` (the fewest a problem has), `picks`
/// (per pick: `name`, its `reference`, and with runs the medians of `accuracy`, `tokens`,
/// `requests`, `samples_started`, `cancelled`, `failed`, `undecided`, `wall_s`, the requests'
/// times to the first byte of their answer and to the whole answer, p50 and p99
/// (`first_byte_ms_p50`, `first_byte_ms_p99`, `answer_ms_p50`, `answer_ms_p99`), and `runs`;
/// `differing`, the ids of the problems whose answer through the gateway differed from the
/// reference's in some run; a confidence pick's `measure`; its `choicewise` extension),
/// `majority` (the plain vote of all the samples), `separation` (each measure's
/// within-problem AUROC, [`separation_json`](crate::separation::separation_json)) and
/// `vote_curve`.
pub fn summary(r: &Results<'_>) -> Value {
    let problems = r.set.problems.len();
    let samples = (r.set.problems.iter())
        .map(|p| p.samples.len())
        .min()
        .unwrap_or(0);
    let acc = |right: usize| right as f64 / problems.max(1) as f64;
    let runs = r.runs;
    let med =
        |i: usize, f: &dyn Fn(&Figures) -> f64| median(runs.iter().map(|r| f(&r[i])).collect());
    let mut rows = Vec::new();
    let problems_of = &r.set.problems;
    // Each item's score (0 to 1) of these answers, in the set's order.
    let scores_of = |answers: &dyn Fn(usize) -> f64| -> Vec<f64> {
        (0..problems_of.len()).map(answers).collect()
    };
    let with_interval = |row: &mut Value, scores: &[f64]| {
        if let Some((low, high)) = crate::interval::interval(scores) {
            row["accuracy_interval"] = json!([low, high]);
        }
    };
    for (i, (pick, off)) in r.picks.iter().zip(r.offline).enumerate() {
        let mut row = json!({
            "name": pick.name,
            "reference": {"accuracy": acc(off.right), "tokens": off.tokens, "samples_started": off.samples},
        });
        let single = pick.name == "single";
        // One sample is any of an item's samples: `single`'s accuracy is the mean over all
        // of them, on the gateway as offline, not the luck of the first (which is kept as
        // `first_sample_accuracy`, beside the spread of each position's accuracy).
        let each_sample = scores_of(&|p| {
            let samples = &problems_of[p].samples;
            let right = (samples.iter())
                .filter(|s| problems_of[p].is_right(&s.answer))
                .count();
            right as f64 / samples.len().max(1) as f64
        });
        let reference = match single {
            true => {
                row["reference"]["first_sample_accuracy"] = row["reference"]["accuracy"].clone();
                row["reference"]["accuracy"] =
                    json!(each_sample.iter().sum::<f64>() / each_sample.len().max(1) as f64);
                let by_position: Vec<f64> = (0..samples)
                    .map(|k| {
                        let right = (problems_of.iter())
                            .filter(|p| p.samples.get(k).is_some_and(|s| p.is_right(&s.answer)))
                            .count();
                        acc(right)
                    })
                    .collect();
                if let (Some(low), Some(high)) = (
                    by_position.iter().copied().reduce(f64::min),
                    by_position.iter().copied().reduce(f64::max),
                ) {
                    row["reference"]["sample_accuracy_range"] = json!([low, high]);
                }
                each_sample.clone()
            }
            false => scores_of(&|p| {
                let answer = off.answers.get(p).map_or("", String::as_str);
                f64::from(u8::from(problems_of[p].is_right(answer)))
            }),
        };
        with_interval(&mut row["reference"], &reference);
        if runs.is_empty() {
            // Offline only: its items' scores are what is compared ([`offline_summary`]).
            row["reference"]["item_accuracy"] = json!(reference);
        }
        if !runs.is_empty() {
            // Each item's share of the runs that answered it right.
            let mut scores = scores_of(&|p| {
                let right = (runs.iter())
                    .filter(|run| {
                        let answer = run[i].answers.get(p).map_or("", String::as_str);
                        problems_of[p].is_right(answer)
                    })
                    .count();
                right as f64 / runs.len() as f64
            });
            row["accuracy"] = json!(med(i, &|f| acc(f.right)));
            if single {
                row["first_sample_accuracy"] = row["accuracy"].clone();
                row["accuracy"] = row["reference"]["accuracy"].clone();
                row["sample_accuracy_range"] = row["reference"]["sample_accuracy_range"].clone();
                scores = each_sample.clone();
            }
            with_interval(&mut row, &scores);
            row["item_accuracy"] = json!(scores);
            row["tokens"] = json!(med(i, &|f| f.tokens as f64) as u64);
            row["requests"] = json!(med(i, &|f| f.requests as f64) as u64);
            row["samples_started"] = json!(med(i, &|f| f.samples_started as f64) as u64);
            row["cancelled"] = json!(med(i, &|f| f.cancelled as f64) as u64);
            row["failed"] = json!(med(i, &|f| f.failed as f64) as u64);
            row["undecided"] = json!(med(i, &|f| f.undecided as f64) as u64);
            row["wall_s"] = json!(med(i, &|f| f.wall_s));
            for (name, q) in [("p50", 50.0), ("p99", 99.0)] {
                row[format!("first_byte_ms_{name}")] =
                    json!(med(i, &|f| percentile(&f.first_byte_ms, q)));
                row[format!("answer_ms_{name}")] = json!(med(i, &|f| percentile(&f.answer_ms, q)));
            }
            row["runs"] = json!(runs.len());
            let differing: Vec<i64> = (r.set.problems.iter().enumerate())
                .filter(|(p, _)| {
                    runs.iter().any(|run| {
                        run[i].answers.get(*p).map(String::as_str)
                            != off.answers.get(*p).map(String::as_str)
                    })
                })
                .map(|(_, problem)| problem.id)
                .collect();
            row["differing"] = json!(differing);
        }
        if let Some(measure) = pick.measure() {
            row["measure"] = json!(measure.as_str());
        }
        if let Some(ext) = pick.extension(&pick.settings(r.settings), r.vote_by) {
            row["choicewise"] = ext;
        }
        rows.push(row);
    }
    compare(&mut rows);
    let curve = r.curve;
    let majority = curve.last().map_or(0.0, |c| c.1);
    json!({
        "problems": problems,
        "samples": samples,
        "picks": rows,
        "majority": {"accuracy": majority, "tokens": curve.last().map_or(0, |c| c.2)},
        "separation": crate::separation::separation_json(r.set, r.settings),
        "vote_curve": curve.iter().map(|(k, a, t)| json!({"k": k, "accuracy": a, "tokens": t})).collect::<Vec<_>>(),
    })
}

/// The picks of [`picks_for`](crate::picks_for) computed offline only on `set` (its samples'
/// answers read), no replay: [`summary`]'s object whose rows carry their reference's
/// figures as their own (`accuracy`, `tokens`, `samples_started`, `accuracy_interval`,
/// `item_accuracy`; `single`'s mean over every sample) and are compared as measured ones
/// are (`vs_best`, `vs_single`), with `"measured": "offline"`: what [`recommend`] and
/// [`plot::picks_svg`](crate::plot::picks_svg) take. No times: a recommendation preferring
/// latency falls back on tokens.
///
/// ```
/// use choicewise_picks::offline_summary;
/// use choicewise_picks::traces::{Problem, Sample, TraceSet};
/// let sample = |a: &str| Sample { tokens: vec![1, 0], answer: a.into(), finished: true, ..Sample::default() };
/// let problem = |answers: &[&str]| Problem {
///     answer: "4".into(),
///     samples: answers.iter().map(|a| sample(a)).collect(),
///     ..Problem::default()
/// };
/// let set = TraceSet {
///     vocab: vec!["<eos>".into(), "x".into()],
///     problems: vec![problem(&["4", "4", "5"]), problem(&["5", "4", "4"])],
///     ..TraceSet::default()
/// };
/// let out = offline_summary(&set, "(.*)", false);
/// assert_eq!(out["measured"], "offline");
/// let vote = choicewise_picks::find(&out, "vote-3").unwrap();
/// assert_eq!(vote["accuracy"].as_f64(), Some(1.0));
/// // At most every sample's two tokens: a vote decided early stops the samples left.
/// assert!(vote["tokens"].as_u64().unwrap() <= 12);
/// let single = choicewise_picks::find(&out, "single").unwrap();
/// assert!((single["accuracy"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
/// ```
pub fn offline_summary(set: &TraceSet, vote_by: &str, logprobs: bool) -> Value {
    let samples = (set.problems.iter())
        .map(|p| p.samples.len())
        .min()
        .unwrap_or(0);
    let (picks, settings) = crate::picks_for(&crate::SETTINGS, samples, logprobs);
    let offline: Vec<Offline> = (picks.iter())
        .map(|p| crate::offline(set, p, &p.settings(&settings)))
        .collect();
    let curve = crate::vote_curve(set, samples);
    let mut out = summary(&Results {
        set,
        picks: &picks,
        settings: &settings,
        vote_by,
        offline: &offline,
        curve: &curve,
        runs: &[],
    });
    if let Some(rows) = out["picks"].as_array_mut() {
        for row in rows.iter_mut() {
            let reference = row["reference"].clone();
            for field in [
                "accuracy",
                "tokens",
                "samples_started",
                "accuracy_interval",
                "item_accuracy",
                "first_sample_accuracy",
                "sample_accuracy_range",
            ] {
                if !reference[field].is_null() {
                    row[field] = reference[field].clone();
                }
            }
            if let Some(r) = row["reference"].as_object_mut() {
                r.remove("item_accuracy");
            }
        }
        compare(rows);
    }
    out["measured"] = json!("offline");
    out["logprobs"] = json!(logprobs);
    out
}

/// Each measured pick compared, over the same items, with the most accurate one
/// (`vs_best`) and with `single` (`vs_single`): the difference of their accuracies and its
/// interval ([`crate::interval::paired`]).
fn compare(rows: &mut [Value]) {
    let scores = |row: &Value| -> Option<Vec<f64>> {
        (row["item_accuracy"].as_array()?.iter())
            .map(Value::as_f64)
            .collect()
    };
    let best = (rows.iter())
        .filter(|r| r["accuracy"].is_number() && r["item_accuracy"].is_array())
        .max_by(|a, b| {
            let acc = |r: &Value| r["accuracy"].as_f64().unwrap_or(0.0);
            acc(a).total_cmp(&acc(b))
        })
        .and_then(|r| Some((r["name"].as_str()?.to_string(), scores(r)?)));
    let single = (rows.iter())
        .find(|r| r["name"] == "single")
        .and_then(scores);
    for row in rows.iter_mut() {
        let Some(mine) = scores(row) else { continue };
        let against = [
            ("vs_best", best.as_ref().map(|(_, s)| s)),
            ("vs_single", single.as_ref()),
        ];
        for (field, other) in against {
            if let Some(d) = other.and_then(|other| crate::interval::paired(&mine, other)) {
                row[field] = json!({"difference": d.difference, "interval": [d.low, d.high]});
            }
        }
        if let Some((name, _)) = &best {
            row["vs_best"]["best"] = json!(name);
        }
    }
}

/// A pick's row of a [`summary`].
pub fn find<'a>(out: &'a Value, name: &str) -> Option<&'a Value> {
    out["picks"]
        .as_array()?
        .iter()
        .find(|r| r["name"].as_str() == Some(name))
}

/// A row's `accuracy` as a percentage of `decimals` decimals, with its 95% interval when it
/// has one (`accuracy_interval`): `77.71% [70.2, 84.6]`; `—` without an accuracy.
///
/// ```
/// let row = serde_json::json!({"accuracy": 0.7771, "accuracy_interval": [0.702, 0.846]});
/// assert_eq!(choicewise_picks::accuracy_text(&row, 2), "77.71% [70.2, 84.6]");
/// assert_eq!(choicewise_picks::accuracy_text(&serde_json::json!({}), 1), "—");
/// ```
pub fn accuracy_text(row: &Value, decimals: usize) -> String {
    let Some(accuracy) = row["accuracy"].as_f64() else {
        return "—".into();
    };
    let pct = format!("{:.*}%", decimals, 100.0 * accuracy);
    let interval = (row["accuracy_interval"].as_array())
        .and_then(|i| Some((i.first()?.as_f64()?, i.get(1)?.as_f64()?)));
    match interval {
        Some((low, high)) => format!("{pct} [{:.1}, {:.1}]", 100.0 * low, 100.0 * high),
        None => pct,
    }
}

/// Prints a [`summary`] as a Markdown table (tokens against the largest vote's).
pub fn print_table(out: &Value) {
    let samples = out["samples"].as_u64().unwrap_or(0);
    println!(
        "\n{} problems x {} samples; plain majority of all: {:.2}%\n",
        out["problems"],
        out["samples"],
        100.0 * out["majority"]["accuracy"].as_f64().unwrap_or(0.0)
    );
    // The largest vote run: vote-64 on the arithmetic sets.
    let largest = [64, 16, 8, 4]
        .into_iter()
        .find(|k| *k <= samples && find(out, &format!("vote-{k}")).is_some())
        .unwrap_or(64);
    let largest = format!("vote-{largest}");
    println!(
        "| pick | accuracy [95% interval] | tokens | vs {largest} | requests | samples started | wall s | answer ms p50 / p99 | reference accuracy | reference tokens | differing |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let vote = find(out, &largest)
        .and_then(|r| r["tokens"].as_f64())
        .filter(|&t| t > 0.0);
    for row in out["picks"].as_array().into_iter().flatten() {
        let pct_in = |v: &Value| accuracy_text(v, 2);
        let num = |v: &Value| v.as_u64().map_or("—".into(), |t| t.to_string());
        let ratio = match (row["tokens"].as_f64(), vote) {
            (Some(t), Some(v)) => format!("{:.3}x", t / v),
            _ => "—".into(),
        };
        let ms = |v: &Value| v.as_f64().map_or("—".into(), |m| format!("{m:.0}"));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            row["name"].as_str().unwrap_or(""),
            pct_in(row),
            num(&row["tokens"]),
            ratio,
            num(&row["requests"]),
            num(&row["samples_started"]),
            row["wall_s"]
                .as_f64()
                .map_or("—".into(), |w| format!("{w:.1}")),
            ms(&row["answer_ms_p50"]),
            ms(&row["answer_ms_p99"]),
            pct_in(&row["reference"]),
            num(&row["reference"]["tokens"]),
            row["differing"]
                .as_array()
                .map_or("—".into(), |d| d.len().to_string()),
        );
    }
}

/// What the recommendation prefers among the picks within reach of the best accuracy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefer {
    /// The most accurate (ties: the fewest tokens).
    Accuracy,
    /// The fewest tokens (the default).
    #[default]
    Tokens,
    /// The shortest median time to the whole answer.
    Latency,
}

impl std::str::FromStr for Prefer {
    type Err = String;

    fn from_str(s: &str) -> Result<Prefer, String> {
        match s {
            "accuracy" => Ok(Prefer::Accuracy),
            "tokens" => Ok(Prefer::Tokens),
            "latency" => Ok(Prefer::Latency),
            other => Err(format!("{other:?} is not accuracy, tokens or latency")),
        }
    }
}

/// The rule [`recommend`] follows: among the picks at most `within` points of accuracy
/// below the most accurate one measured, the one `prefer` says (ties to the earlier row).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// What to prefer.
    pub prefer: Prefer,
    /// The points of accuracy the user will give up (default 1).
    pub within: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule {
            prefer: Prefer::Tokens,
            within: 1.0,
        }
    }
}

impl Rule {
    /// The rule in words, for a report.
    ///
    /// ```
    /// assert_eq!(choicewise_picks::Rule::default().describe(),
    ///     "the fewest tokens within 1 point of the most accurate pick");
    /// ```
    pub fn describe(&self) -> String {
        let what = match self.prefer {
            Prefer::Accuracy => return "the most accurate pick".to_string(),
            Prefer::Tokens => "the fewest tokens",
            Prefer::Latency => "the shortest median answer time",
        };
        let points = if self.within == 1.0 {
            "point"
        } else {
            "points"
        };
        format!(
            "{what} within {} {points} of the most accurate pick",
            self.within
        )
    }
}

/// The pick [`recommend`] chooses.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// Its name.
    pub pick: String,
    /// Its accuracy.
    pub accuracy: f64,
    /// Its tokens over `single`'s.
    pub tokens_vs_single: f64,
    /// The configuration that deploys it: a model's `[models.choicewise]` block for
    /// `choicewise serve` (TOML), empty for `single` (a plain request needs none).
    pub config: String,
    /// Whether the items measured tell it apart from `single`.
    pub verdict: Verdict,
}

/// Whether a [`Recommendation`] stands on the items measured.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It is `single`, or better than `single` beyond the interval of their difference.
    Recommend,
    /// Its difference from `single` (`versus`) is within the interval of chance on these
    /// items: about `items_needed` items would tell them apart (none when they tie).
    Undecided {
        /// The pick it cannot be told apart from.
        versus: String,
        /// The difference of accuracies, and its interval.
        difference: f64,
        /// See `difference`.
        interval: (f64, f64),
        /// About how many items would tell them apart.
        items_needed: Option<u64>,
    },
}

impl Recommendation {
    /// As JSON: `{"pick", "accuracy", "accuracy_interval", "tokens_vs_single", "config",
    /// "verdict"}`, `"verdict"` being `"recommend"` or `"undecided"`; undecided, with
    /// `"versus"`, `"difference"`, `"difference_interval"` and `"items_needed"`.
    pub fn to_json(&self) -> Value {
        let mut out = json!({"pick": self.pick, "accuracy": self.accuracy,
               "tokens_vs_single": self.tokens_vs_single, "config": self.config});
        match &self.verdict {
            Verdict::Recommend => out["verdict"] = json!("recommend"),
            Verdict::Undecided {
                versus,
                difference,
                interval,
                items_needed,
            } => {
                out["verdict"] = json!("undecided");
                out["versus"] = json!(versus);
                out["difference"] = json!(difference);
                out["difference_interval"] = json!([interval.0, interval.1]);
                out["items_needed"] = json!(items_needed);
            }
        }
        out
    }
}

/// A TOML value from a JSON scalar (a JSON string's escapes are a TOML basic string's).
fn toml_value(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.is_finite() {
                format!("{f:.1}")
            } else {
                n.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// A pick's `choicewise` extension as a model's `[models.choicewise]` block (with its
/// `[models.choicewise.confidence]`), to follow a `[[models]]` entry's own keys.
///
/// ```
/// let ext = serde_json::json!({"samples": 4, "select": "vote", "vote_by": "#### (\\d+)",
///     "confidence": {"measure": "sampled", "keep": 0.1}});
/// assert_eq!(choicewise_picks::config_block(&ext),
///     "[models.choicewise]\nsamples = 4\nselect = \"vote\"\nvote_by = \"#### (\\\\d+)\"\n\n[models.choicewise.confidence]\nkeep = 0.1\nmeasure = \"sampled\"\n");
/// ```
pub fn config_block(ext: &Value) -> String {
    let Some(fields) = ext.as_object() else {
        return String::new();
    };
    let mut out = String::from("[models.choicewise]\n");
    for (k, v) in fields.iter().filter(|(_, v)| !v.is_object()) {
        out.push_str(&format!("{k} = {}\n", toml_value(v)));
    }
    for (k, v) in fields.iter().filter(|(_, v)| v.is_object()) {
        out.push_str(&format!("\n[models.choicewise.{k}]\n"));
        for (k, v) in v.as_object().into_iter().flatten() {
            out.push_str(&format!("{k} = {}\n", toml_value(v)));
        }
    }
    out
}

/// The pick `rule` chooses among the picks measured through the gateway in a [`summary`]:
/// those at most `rule.within` points below the most accurate one, the most accurate, the
/// fewest tokens or the shortest median answer time among them (ties to the earlier row);
/// with the configuration that deploys it. `None` without `single` measured.
///
/// ```
/// use choicewise_picks::{Prefer, Rule, recommend};
/// use serde_json::json;
/// let out = json!({"picks": [
///     {"name": "single", "accuracy": 0.70, "tokens": 100, "answer_ms_p50": 10.0},
///     {"name": "vote-4", "accuracy": 0.80, "tokens": 400, "answer_ms_p50": 30.0},
///     {"name": "vote-8", "accuracy": 0.85, "tokens": 800, "answer_ms_p50": 50.0,
///      "choicewise": {"samples": 8, "select": "vote"}},
///     {"name": "adaptive", "accuracy": 0.845, "tokens": 300, "answer_ms_p50": 60.0},
/// ]});
/// let r = recommend(&out, &Rule::default()).unwrap();
/// assert_eq!((r.pick.as_str(), r.tokens_vs_single), ("adaptive", 3.0));
/// let r = recommend(&out, &Rule { prefer: Prefer::Accuracy, within: 1.0 }).unwrap();
/// assert_eq!(r.pick, "vote-8");
/// assert!(r.config.starts_with("[models.choicewise]\nsamples = 8\n"));
/// // Latency, giving up 5 points: vote-4 answers sooner than adaptive.
/// let r = recommend(&out, &Rule { prefer: Prefer::Latency, within: 5.0 }).unwrap();
/// assert_eq!(r.pick, "vote-4");
/// ```
pub fn recommend(out: &Value, rule: &Rule) -> Option<Recommendation> {
    let rows = out["picks"].as_array()?;
    let measured = |r: &&Value| r["accuracy"].is_number() && r["tokens"].is_number();
    let best = (rows.iter().filter(measured))
        .filter_map(|r| r["accuracy"].as_f64())
        .fold(None, |b: Option<f64>, a| Some(b.map_or(a, |b| b.max(a))))?;
    let single = find(out, "single")?["tokens"].as_f64()?;
    let within = if rule.within.is_finite() {
        rule.within.max(0.0)
    } else {
        1.0
    };
    let score = |r: &Value| -> (f64, f64) {
        let tokens = r["tokens"].as_f64().unwrap_or(f64::INFINITY);
        match rule.prefer {
            Prefer::Accuracy => (-r["accuracy"].as_f64().unwrap_or(0.0), tokens),
            Prefer::Tokens => (tokens, 0.0),
            Prefer::Latency => (r["answer_ms_p50"].as_f64().unwrap_or(f64::INFINITY), tokens),
        }
    };
    let mut chosen: Option<&Value> = None;
    for r in rows.iter().filter(measured) {
        // Within the points given up, with a little room for the rounding of the accuracies.
        if r["accuracy"].as_f64()? + within / 100.0 + 1e-9 < best {
            continue;
        }
        if chosen.is_none_or(|c| score(r) < score(c)) {
            chosen = Some(r);
        }
    }
    let c = chosen?;
    // Told apart from `single` over the same items, or not.
    let verdict = match (c["name"].as_str(), find(out, "single")) {
        (Some(name), Some(single)) if name != "single" => {
            let scores = |row: &Value| -> Option<Vec<f64>> {
                (row["item_accuracy"].as_array()?.iter())
                    .map(Value::as_f64)
                    .collect()
            };
            match (scores(c), scores(single)) {
                (Some(mine), Some(theirs)) => match crate::interval::paired(&mine, &theirs) {
                    Some(d) if d.low <= 0.0 => Verdict::Undecided {
                        versus: "single".into(),
                        difference: d.difference,
                        interval: (d.low, d.high),
                        items_needed: d.items_needed,
                    },
                    _ => Verdict::Recommend,
                },
                _ => Verdict::Recommend,
            }
        }
        _ => Verdict::Recommend,
    };
    Some(Recommendation {
        verdict,
        pick: c["name"].as_str()?.to_string(),
        accuracy: c["accuracy"].as_f64()?,
        tokens_vs_single: if single > 0.0 {
            c["tokens"].as_f64()? / single
        } else {
            0.0
        },
        config: config_block(&c["choicewise"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary of `single` and `vote-16` over `n` items: one sample right on 77.5% of
    /// each item's samples, the vote right on 80% of the items.
    fn over(n: usize) -> Value {
        let single: Vec<f64> = (0..n).map(|_| 0.775).collect();
        let vote: Vec<f64> = (0..n).map(|i| f64::from(u8::from(i % 10 < 8))).collect();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        json!({"problems": n, "picks": [
            {"name": "single", "accuracy": mean(&single), "tokens": 100, "item_accuracy": single},
            {"name": "vote-16", "accuracy": mean(&vote), "tokens": 1600, "item_accuracy": vote,
             "choicewise": {"samples": 16, "select": "vote"}},
        ]})
    }

    #[test]
    fn a_pick_that_thirty_items_cannot_tell_from_single_is_not_recommended() {
        let rule = Rule {
            prefer: Prefer::Tokens,
            within: 1.0,
        };
        let r = recommend(&over(30), &rule).unwrap();
        assert_eq!(r.pick, "vote-16");
        let Verdict::Undecided {
            versus,
            items_needed,
            interval,
            ..
        } = &r.verdict
        else {
            panic!("{r:?}")
        };
        assert_eq!(versus, "single");
        assert!(interval.0 < 0.0 && interval.1 > 0.0, "{interval:?}");
        let needed = items_needed.unwrap();
        assert!(needed > 30, "{needed}");
        let json = r.to_json();
        assert_eq!(json["verdict"], "undecided");
        assert_eq!(json["items_needed"], needed);
        // On enough items, the same rates are told apart: recommended.
        let r = recommend(&over(6_000), &rule).unwrap();
        assert_eq!(
            (r.pick.as_str(), &r.verdict),
            ("vote-16", &Verdict::Recommend)
        );
        assert_eq!(r.to_json()["verdict"], "recommend");
    }
}
