//! `choicewise-bench picks`: do the picks pay? A set of a real model's recorded samples
//! (`../shared/data/arith-traces/set-*`: problems × 64 samples with their log-probabilities)
//! replayed through the real gateway process, pick by pick, each beside the same pick
//! simulated offline.
//!
//! One run starts the set's upstream (`serve`: each problem's samples as paced streamed chat
//! completions, counting requests, samples and tokens) and `choicewise serve` in front of it
//! (models `fanout`, one upstream request per sample, and `native`, one request of `n`), then
//! asks the gateway every problem once per pick, `--concurrency` problems at a time, and reads
//! the answer after `#### ` in the picked choice. Per pick: accuracy against the set's
//! answers, tokens the upstream sent (a cancelled sample counts what it sent before the
//! cancel), upstream requests, samples started, wall time; beside them the same pick computed
//! offline from the same samples one at a time (`reference`), and the plain majority of all
//! the samples.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use choicewise_picks::traces::TraceSet;
use choicewise_picks::{
    AnswerRule, Asker, Figures, Kind, Measure, Offline, Pick, Results, SETTINGS, Settings, VOTE_BY,
    find, gateway_config, latency_picks, offline, picks, upstream, vote_curve,
};
use serde_json::{Value, json};

use crate::procs;
use crate::{Report, Target, load, runtime};

#[derive(Debug, Clone, clap::Args)]
pub struct PicksArgs {
    /// The set's directory (`vocab.json` and `traces_*.npz`).
    #[arg(long)]
    pub traces: PathBuf,
    /// Print the figures as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Replay only the first N problems.
    #[arg(long)]
    pub problems: Option<usize>,
    /// Problems asked of the gateway at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Between two tokens of a sample, ms (a model server's pace).
    #[arg(long, default_value_t = 1.0)]
    pub token_ms: f64,
    /// Runs (each with fresh processes); the medians are reported.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// The gateway's upstream requests: `fan-out` (one per sample) or `native` (one of n).
    #[arg(long, default_value = "fan-out", value_parser = ["fan-out", "native"])]
    pub upstream_n: String,
    /// Only these picks (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// Only the offline figures: no gateway, no upstream.
    #[arg(long)]
    pub offline: bool,
    /// Also measure the confidence picks through the gateway at these windows (samples
    /// started at a time after the warmup) and these warmups: the curves of their cost.
    #[arg(long, value_delimiter = ',')]
    pub curve_windows: Vec<usize>,
    #[arg(long, value_delimiter = ',')]
    pub curve_warmups: Vec<usize>,
    /// Write the plot of accuracy against tokens (SVG) to this path.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The `choicewise` binary (default: next to this harness).
    #[arg(long)]
    pub choicewise: Option<PathBuf>,
    /// The `top_k` confidence picks' warmup (the table's: 16; the library's default: 8).
    #[arg(long, default_value_t = SETTINGS.warmup)]
    pub warmup: usize,
    /// The `top_k` confidence picks' group of tokens (the table's: 16; the library's
    /// default: 64).
    #[arg(long, default_value_t = SETTINGS.group_tokens)]
    pub group_tokens: usize,
    /// The `sampled` confidence picks' warmup (the table's and the library's default: 8).
    #[arg(long, default_value_t = SETTINGS.sampled_warmup)]
    pub sampled_warmup: usize,
    /// The `sampled` confidence picks' group of tokens (the table's and the library's
    /// default: 4).
    #[arg(long, default_value_t = SETTINGS.sampled_group_tokens)]
    pub sampled_group_tokens: usize,
    /// Samples at a time of `adaptive` and after the confidence picks' warmup.
    #[arg(long, default_value_t = SETTINGS.confidence_window)]
    pub window: usize,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// A slow upstream: one sample in `--slow-every` (by a hash of its problem and number)
    /// sends its first token this many ms late (0: none is slow).
    #[arg(long, default_value_t = 0.0)]
    pub slow_first_token_ms: f64,
    /// The least ms between two finishes of a problem (at least `--token-ms`): the larger, the
    /// surer the gateway reads them in the schedule's order, the reference's, over separate
    /// connections on a loaded machine, and the longer a large vote takes (4: answer times
    /// near a model server's).
    #[arg(long, default_value_t = 100.0)]
    pub finish_gap_ms: f64,
    /// One sample in this many is slow (with `--slow-first-token-ms`).
    #[arg(long, default_value_t = 4)]
    pub slow_every: u64,
    /// The `hedge` pick's `hedge_after_ms` (`first-token` and `hedge` run only when named in
    /// `--only`).
    #[arg(long, default_value_t = 50)]
    pub hedge_after_ms: u64,
}

impl PicksArgs {
    /// The table's settings with the command line's.
    pub fn settings(&self) -> Settings {
        Settings {
            warmup: self.warmup,
            group_tokens: self.group_tokens,
            sampled_warmup: self.sampled_warmup,
            sampled_group_tokens: self.sampled_group_tokens,
            confidence_window: self.window,
            adaptive_window: self.window,
            ..SETTINGS
        }
    }
}

/// One run: fresh processes, every pick (and the curves' points).
fn one_run(
    rt: &tokio::runtime::Runtime,
    set: &Arc<TraceSet>,
    picks: &[Pick],
    args: &PicksArgs,
    rep: usize,
) -> Result<Vec<Figures>, String> {
    let pace = Duration::from_secs_f64(args.token_ms.max(0.0) / 1000.0);
    let slow = upstream::Slow {
        first_token: Duration::from_secs_f64(args.slow_first_token_ms.max(0.0) / 1000.0),
        every: args.slow_every,
    };
    let gap = Duration::from_secs_f64(args.finish_gap_ms.max(0.0) / 1000.0);
    let up = upstream::start_slow(set.clone(), pace, slow, gap)?;
    let dir = procs::work_dir(&format!("picks-{rep}"));
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let gateway = procs::gateway(&dir, &bin, &gateway_config(&up.url, SETTINGS.max_samples))?;
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| e.to_string())?;
    let asker = Asker {
        client,
        gateway: gateway.url.clone(),
        model: if args.upstream_n == "native" {
            "native"
        } else {
            "fanout"
        }
        .into(),
        concurrency: args.concurrency,
        rule: AnswerRule::Marker,
        vote_by: VOTE_BY.into(),
    };
    let base = args.settings();
    let mut out = Vec::new();
    rt.block_on(async {
        for pick in picks {
            let run = format!("{}-{rep}", pick.name);
            let (f, failure) = asker.measure(&up, set, pick, &base, &run).await;
            if !args.json {
                eprintln!(
                    "run {}: {:<24} {:>6.1}%  {:>9} tokens  {:>6} requests  {:>5.1} s{}",
                    rep + 1,
                    pick.name,
                    100.0 * f.right as f64 / set.problems.len() as f64,
                    f.tokens,
                    f.requests,
                    f.wall_s,
                    failure.map_or(String::new(), |e| format!(
                        "  ({} failed, first: {e})",
                        f.failed
                    )),
                );
            }
            out.push(f);
        }
    });
    let panics = gateway.panics();
    if panics > 0 {
        return Err(format!(
            "the gateway panicked {panics} times (log: {})",
            gateway.log.display()
        ));
    }
    Ok(out)
}

/// The curves' extra picks: the confidence picks of both measures at other windows and
/// warmups.
fn curve_picks(args: &PicksArgs) -> Vec<Pick> {
    let mut out = Vec::new();
    let measures = [
        ("confidence", Measure::TopK, args.warmup),
        ("sampled", Measure::Sampled, args.sampled_warmup),
    ];
    for (prefix, measure, base_warmup) in measures {
        for (label, keep) in [("high", 0.9), ("low", 0.1)] {
            for &w in &args.curve_windows {
                out.push(Pick {
                    name: format!("{prefix}-{label}/window-{w}"),
                    kind: Kind::Confidence {
                        measure,
                        keep,
                        warmup: base_warmup,
                        window: w,
                    },
                });
            }
            for &warmup in &args.curve_warmups {
                out.push(Pick {
                    name: format!("{prefix}-{label}/warmup-{warmup}"),
                    kind: Kind::Confidence {
                        measure,
                        keep,
                        warmup,
                        window: args.window,
                    },
                });
            }
        }
    }
    out
}

pub fn run(args: &PicksArgs) -> Report {
    let mut report = Report::default();
    let mut set = match TraceSet::read(&args.traces) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Some(n) = args.problems {
        set.problems.truncate(n);
    }
    let set = Arc::new(set);
    let samples = set
        .problems
        .iter()
        .map(|p| p.samples.len())
        .min()
        .unwrap_or(0);
    let base = args.settings();
    let mut all = picks(&base);
    if let Some(only) = &args.only {
        all.extend(latency_picks(args.hedge_after_ms));
        all.retain(|p| only.contains(&p.name));
    }
    all.extend(curve_picks(args));
    let offline_figures: Vec<Offline> = all
        .iter()
        .map(|p| offline(&set, p, &p.settings(&base)))
        .collect();
    let curve = vote_curve(&set, samples);
    let mut runs: Vec<Vec<Figures>> = Vec::new();
    if !args.offline {
        let rt = runtime(args.workers);
        for rep in 0..args.runs.max(1) {
            match one_run(&rt, &set, &all, args, rep) {
                Ok(r) => runs.push(r),
                Err(e) => eprintln!("run {} failed: {e}", rep + 1),
            }
        }
        if !args.json {
            load("end of picks");
        }
        if runs.is_empty() {
            eprintln!("error: no run of the picks completed");
            std::process::exit(1);
        }
    }
    let mut out = choicewise_picks::summary(&Results {
        set: &set,
        picks: &all,
        settings: &base,
        vote_by: VOTE_BY,
        offline: &offline_figures,
        curve: &curve,
        runs: &runs,
    });
    out["token_ms"] = json!(args.token_ms);
    // What `choicewise picks report` would recommend on these figures (the default rule).
    out["recommendation"] = choicewise_picks::recommend(&out, &choicewise_picks::Rule::default())
        .map_or(serde_json::Value::Null, |r| r.to_json());
    out["concurrency"] = json!(args.concurrency);
    out["upstream_n"] = json!(args.upstream_n);
    if args.slow_first_token_ms > 0.0 {
        out["slow_first_token_ms"] = json!(args.slow_first_token_ms);
        out["slow_every"] = json!(args.slow_every);
    }
    if let Some(path) = &args.plot {
        match choicewise_picks::plot::picks(&out, path) {
            Ok(()) => eprintln!("plot: {}", path.display()),
            Err(e) => eprintln!("plot not written: {e}"),
        }
    }
    if args.json {
        println!("{out}");
    } else {
        choicewise_picks::print_table(&out);
    }
    targets(&out, &mut report);
    if args.json {
        // stdout holds the JSON alone: the verdicts go to stderr.
        for t in &report.targets {
            eprintln!(
                "{} {} measured={:.3}{unit} target={}{unit}",
                if t.pass() { "PASS" } else { "FAIL" },
                t.name,
                t.measured,
                t.target,
                unit = t.unit
            );
        }
        for line in &report.info {
            eprintln!("{line}");
        }
        return Report::default();
    }
    report
}

/// The targets, judged on what was measured.
fn targets(out: &Value, report: &mut Report) {
    let get = |name: &str, field: &str| find(out, name).and_then(|r| r[field].as_f64());
    let reference =
        |name: &str, field: &str| find(out, name).and_then(|r| r["reference"][field].as_f64());
    let majority = out["majority"]["accuracy"].as_f64().unwrap_or(0.0);
    let mut push =
        |name: &'static str, measured: Option<f64>, target: f64, at_least: bool, unit| {
            if let Some(measured) = measured {
                report.targets.push(Target {
                    name,
                    measured,
                    target,
                    at_least,
                    unit,
                });
            }
        };
    let pts = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| 100.0 * (a - b));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    push(
        "picks: |vote-64 - plain majority of all|, points",
        get("vote-64", "accuracy").map(|a| (100.0 * (a - majority)).abs()),
        0.5,
        false,
        "",
    );
    push(
        "picks: vote-16 - single, points",
        pts(get("vote-16", "accuracy"), get("single", "accuracy")),
        3.0,
        true,
        "",
    );
    push(
        "picks: confidence-high - vote-64, points",
        pts(
            get("confidence-high", "accuracy"),
            get("vote-64", "accuracy"),
        ),
        -1.0,
        true,
        "",
    );
    push(
        "picks: confidence-high tokens / vote-64's",
        ratio(get("confidence-high", "tokens"), get("vote-64", "tokens")),
        0.6,
        false,
        "x",
    );
    push(
        "picks: confidence-high tokens / its reference's",
        ratio(
            get("confidence-high", "tokens"),
            reference("confidence-high", "tokens"),
        ),
        1.2,
        false,
        "x",
    );
    push(
        "picks: confidence-low tokens / vote-64's",
        ratio(get("confidence-low", "tokens"), get("vote-64", "tokens")),
        0.4,
        false,
        "x",
    );
    push(
        "picks: adaptive tokens / vote-64's",
        ratio(get("adaptive", "tokens"), get("vote-64", "tokens")),
        0.5,
        false,
        "x",
    );
    push(
        "picks: adaptive - vote-64, points",
        pts(get("adaptive", "accuracy"), get("vote-64", "accuracy")),
        -2.0,
        true,
        "",
    );
    push(
        "picks: sampled-low - vote-64, points",
        pts(get("sampled-low", "accuracy"), get("vote-64", "accuracy")),
        0.0,
        true,
        "",
    );
    push(
        "picks: sampled-low - vote-16, points",
        pts(get("sampled-low", "accuracy"), get("vote-16", "accuracy")),
        0.0,
        true,
        "",
    );
    push(
        "picks: sampled-low tokens / vote-64's",
        ratio(get("sampled-low", "tokens"), get("vote-64", "tokens")),
        0.35,
        false,
        "x",
    );
    if let (Some(s), Some(t)) = (
        out["separation"]["sampled"].as_f64(),
        out["separation"]["top_k"].as_f64(),
    ) {
        report.info.push(format!(
            "INFO picks: within-problem AUROC sampled {s:.3}, top_k {t:.3}"
        ));
    }
    if let Some(loss) = pts(
        get("confidence-low", "accuracy"),
        get("vote-64", "accuracy"),
    ) {
        report.info.push(format!(
            "INFO picks: confidence-low - vote-64 = {loss:.2} points"
        ));
    }
}
