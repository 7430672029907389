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

mod reference;
mod serve;
mod traces;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::procs;
use crate::{Report, Target, load, runtime};

use reference::{DeepConf, Outcome, answer_of};
use traces::TraceSet;

/// The vote's key: the answer after `#### `.
pub const VOTE_BY: &str = r"#### (\d+)";

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
    /// The confidence picks' warmup (the table's: 16; the library's default: 8).
    #[arg(long, default_value_t = SETTINGS.warmup)]
    pub warmup: usize,
    /// The confidence picks' group of tokens (the table's: 16; the library's default: 64).
    #[arg(long, default_value_t = SETTINGS.group_tokens)]
    pub group_tokens: usize,
    /// Samples at a time of `adaptive` and after the confidence picks' warmup.
    #[arg(long, default_value_t = SETTINGS.confidence_window)]
    pub window: usize,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
}

/// The settings of the picks (the table's rows).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Samples of `first-finished`.
    pub first_finished: usize,
    /// Samples at a time of `adaptive`.
    pub adaptive_window: usize,
    /// The most samples of `adaptive` and the confidence picks.
    pub max_samples: usize,
    pub warmup: usize,
    pub group_tokens: usize,
    /// Samples started at a time after a confidence pick's warmup (`window`).
    pub confidence_window: usize,
    pub consensus: f64,
}

impl PicksArgs {
    /// The table's settings with the command line's.
    pub fn settings(&self) -> Settings {
        Settings {
            warmup: self.warmup,
            group_tokens: self.group_tokens,
            confidence_window: self.window,
            adaptive_window: self.window,
            ..SETTINGS
        }
    }
}

/// The settings of the table.
pub const SETTINGS: Settings = Settings {
    first_finished: 4,
    adaptive_window: 4,
    max_samples: 64,
    warmup: 16,
    group_tokens: 16,
    confidence_window: 4,
    consensus: 0.95,
};

/// One pick.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Single,
    FirstFinished(usize),
    Vote(usize),
    Adaptive {
        max: usize,
        window: usize,
    },
    Confidence {
        keep: f64,
        warmup: usize,
        window: usize,
    },
}

#[derive(Debug, Clone)]
pub struct Pick {
    pub name: String,
    pub kind: Kind,
}

/// The picks of the table, named as the JSON names them.
pub fn picks(s: &Settings) -> Vec<Pick> {
    let p = |name: &str, kind| Pick {
        name: name.into(),
        kind,
    };
    let confidence = |keep| Kind::Confidence {
        keep,
        warmup: s.warmup,
        window: s.confidence_window,
    };
    vec![
        p("single", Kind::Single),
        p("first-finished", Kind::FirstFinished(s.first_finished)),
        p("vote-4", Kind::Vote(4)),
        p("vote-8", Kind::Vote(8)),
        p("vote-16", Kind::Vote(16)),
        p("vote-64", Kind::Vote(64)),
        p(
            "adaptive",
            Kind::Adaptive {
                max: s.max_samples,
                window: s.adaptive_window,
            },
        ),
        p("confidence-high", confidence(0.9)),
        p("confidence-low", confidence(0.1)),
    ]
}

impl Pick {
    /// The request's `choicewise` extension (`None`: a plain request of one sample).
    pub fn extension(&self, s: &Settings) -> Option<Value> {
        Some(match self.kind {
            Kind::Single => return None,
            Kind::FirstFinished(k) => json!({"samples": k, "select": "first_finished"}),
            Kind::Vote(k) => json!({"samples": k, "select": "vote", "vote_by": VOTE_BY}),
            Kind::Adaptive { max, window } => {
                json!({"samples": max, "select": "vote", "vote_by": VOTE_BY, "window": window})
            }
            Kind::Confidence {
                keep,
                warmup,
                window,
            } => json!({
                "samples": s.max_samples, "select": "vote", "vote_by": VOTE_BY, "window": window,
                "confidence": {"warmup": warmup, "keep": keep, "group_tokens": s.group_tokens,
                               "consensus": s.consensus},
            }),
        })
    }

    /// The same pick offline, one sample at a time.
    pub fn reference(&self, p: &traces::Problem, s: &Settings) -> Outcome {
        match self.kind {
            Kind::Single => reference::vote(p, 1),
            Kind::FirstFinished(k) => reference::first_finished(p, k),
            Kind::Vote(k) => reference::vote(p, k),
            Kind::Adaptive { max, window } => reference::adaptive(p, max, window),
            Kind::Confidence { keep, warmup, .. } => reference::deepconf(
                p,
                &DeepConf {
                    warmup,
                    keep,
                    group_tokens: s.group_tokens,
                    max_samples: s.max_samples,
                    consensus: s.consensus,
                },
            ),
        }
    }
}

/// A pick's figures over the problems.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    pub right: usize,
    pub tokens: u64,
    pub requests: u64,
    pub samples_started: u64,
    pub cancelled: u64,
    /// Answers that were not 200.
    pub failed: usize,
    /// 200 answers whose vote said it was undecided.
    pub undecided: usize,
    pub wall_s: f64,
}

/// The reference's figures over the problems.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offline {
    pub right: usize,
    pub tokens: u64,
    pub samples: u64,
}

pub fn offline(set: &TraceSet, pick: &Pick, s: &Settings) -> Offline {
    let mut o = Offline::default();
    for p in &set.problems {
        let out = pick.reference(p, s);
        o.right += usize::from(out.answer == p.answer);
        o.tokens += out.tokens;
        o.samples += out.samples;
    }
    o
}

/// The plain vote of the first k samples, k = 1..=max: (k, accuracy, tokens).
pub fn vote_curve(set: &TraceSet, max: usize) -> Vec<(usize, f64, u64)> {
    (1..=max)
        .map(|k| {
            let mut right = 0;
            let mut tokens = 0;
            for p in &set.problems {
                let o = reference::vote(p, k);
                right += usize::from(o.answer == p.answer);
                tokens += o.tokens;
            }
            (k, right as f64 / set.problems.len() as f64, tokens)
        })
        .collect()
}

/// The gateway's configuration: the upstream as model `fanout` and `native`, up to 64
/// samples a request.
fn gateway_config(upstream: &str, max_samples: usize) -> String {
    let model = |name: &str, n: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{upstream}/v1\"\nmodel = \"arith-6m\"\nn = \"{n}\"\n\n"
        )
    };
    format!(
        "listen = \"127.0.0.1:0\"\nshutdown_grace_s = 1\n\n[limits]\nmax_n = {max_samples}\nmax_samples = {max_samples}\n\
         max_concurrent_requests = 4096\nmax_upstream_requests_per_request = {}\n\n{}{}",
        4 * max_samples,
        model("fanout", "fan-out"),
        model("native", "native"),
    )
}

/// What one problem's answer was.
struct Answer {
    right: bool,
    failed: Option<String>,
    undecided: bool,
}

async fn ask(
    client: &reqwest::Client,
    url: &str,
    model: &str,
    run: &str,
    problem: &traces::Problem,
    extension: Option<&Value>,
) -> Answer {
    let mut body = json!({
        "model": model,
        "messages": [
            {"role": "system", "content": format!("{}{run}", serve::RUN_PREFIX)},
            {"role": "user", "content": problem.prompt},
        ],
        "temperature": 1.0,
        "stream": false,
    });
    if let Some(ext) = extension {
        body["choicewise"] = ext.clone();
    }
    let failed = |why: String| Answer {
        right: false,
        failed: Some(why),
        undecided: false,
    };
    let response = match client.post(url).json(&body).send().await {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    let status = response.status();
    let text = match response.text().await {
        Ok(t) => t,
        Err(e) => return failed(e.to_string()),
    };
    if !status.is_success() {
        return failed(format!("{status}: {text}"));
    }
    let Ok(answer) = serde_json::from_str::<Value>(&text) else {
        return failed(format!("not JSON: {text}"));
    };
    let content = answer
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    Answer {
        right: answer_of(content) == problem.answer,
        failed: None,
        undecided: answer.pointer("/choicewise/vote/decided") == Some(&Value::Bool(false)),
    }
}

/// One pick through the gateway, every problem once.
async fn measure(
    client: &reqwest::Client,
    gateway: &str,
    up: &serve::TraceUpstream,
    set: &TraceSet,
    pick: &Pick,
    args: &PicksArgs,
    run: &str,
) -> (Figures, Option<String>) {
    let s = &settings_of(pick, &args.settings());
    let model = if args.upstream_n == "native" {
        "native"
    } else {
        "fanout"
    };
    let url = format!("{gateway}/v1/chat/completions");
    let extension = pick.extension(s);
    let before = up.counters.counts();
    let start = Instant::now();
    let answers: Vec<Answer> = futures::stream::iter(&set.problems)
        .map(|p| ask(client, &url, model, run, p, extension.as_ref()))
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let wall_s = start.elapsed().as_secs_f64();
    // The cancelled samples' streams end when the gateway closes their connections.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let c = up.counters.counts() - before;
    let first_failure = answers.iter().find_map(|a| a.failed.clone());
    (
        Figures {
            right: answers.iter().filter(|a| a.right).count(),
            tokens: c.tokens,
            requests: c.requests,
            samples_started: c.samples,
            cancelled: c.cancelled,
            failed: answers.iter().filter(|a| a.failed.is_some()).count(),
            undecided: answers.iter().filter(|a| a.undecided).count(),
            wall_s,
        },
        first_failure,
    )
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
    let up = serve::start(set.clone(), pace)?;
    let dir = procs::work_dir(&format!("picks-{rep}"));
    let bin = procs::choicewise_bin(args.choicewise.as_deref());
    let gateway = procs::gateway(&dir, &bin, &gateway_config(&up.url, SETTINGS.max_samples))?;
    let client = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(300))
        .build()
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    rt.block_on(async {
        for pick in picks {
            let run = format!("{}-{rep}", pick.name);
            let (f, failure) = measure(&client, &gateway.url, &up, set, pick, args, &run).await;
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

/// A pick's own settings: the table's, with its window and warmup.
fn settings_of(pick: &Pick, base: &Settings) -> Settings {
    match pick.kind {
        Kind::Confidence { warmup, window, .. } => Settings {
            warmup,
            confidence_window: window,
            ..*base
        },
        _ => *base,
    }
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

/// The curves' extra picks: the confidence picks at other windows and warmups.
fn curve_picks(args: &PicksArgs) -> Vec<Pick> {
    let mut out = Vec::new();
    for (label, keep) in [("high", 0.9), ("low", 0.1)] {
        for &w in &args.curve_windows {
            out.push(Pick {
                name: format!("confidence-{label}/window-{w}"),
                kind: Kind::Confidence {
                    keep,
                    warmup: args.warmup,
                    window: w,
                },
            });
        }
        for &warmup in &args.curve_warmups {
            out.push(Pick {
                name: format!("confidence-{label}/warmup-{warmup}"),
                kind: Kind::Confidence {
                    keep,
                    warmup,
                    window: args.window,
                },
            });
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
    let problems = set.problems.len();
    let samples = set
        .problems
        .iter()
        .map(|p| p.samples.len())
        .min()
        .unwrap_or(0);
    let base = args.settings();
    let mut all = picks(&base);
    if let Some(only) = &args.only {
        all.retain(|p| only.contains(&p.name));
    }
    all.extend(curve_picks(args));
    let offline_figures: Vec<Offline> = all
        .iter()
        .map(|p| offline(&set, p, &settings_of(p, &base)))
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
    let acc = |right: usize| right as f64 / problems.max(1) as f64;
    let med =
        |i: usize, f: &dyn Fn(&Figures) -> f64| median(runs.iter().map(|r| f(&r[i])).collect());
    let mut rows = Vec::new();
    for (i, (pick, off)) in all.iter().zip(&offline_figures).enumerate() {
        let mut row = json!({
            "name": pick.name,
            "reference": {"accuracy": acc(off.right), "tokens": off.tokens, "samples_started": off.samples},
        });
        if !runs.is_empty() {
            row["accuracy"] = json!(med(i, &|f| acc(f.right)));
            row["tokens"] = json!(med(i, &|f| f.tokens as f64) as u64);
            row["requests"] = json!(med(i, &|f| f.requests as f64) as u64);
            row["samples_started"] = json!(med(i, &|f| f.samples_started as f64) as u64);
            row["cancelled"] = json!(med(i, &|f| f.cancelled as f64) as u64);
            row["failed"] = json!(med(i, &|f| f.failed as f64) as u64);
            row["undecided"] = json!(med(i, &|f| f.undecided as f64) as u64);
            row["wall_s"] = json!(med(i, &|f| f.wall_s));
            row["runs"] = json!(runs.len());
        }
        if let Some(ext) = pick.extension(&settings_of(pick, &base)) {
            row["choicewise"] = ext;
        }
        rows.push(row);
    }
    let majority = curve.last().map_or(0.0, |c| c.1);
    let out = json!({
        "problems": problems,
        "samples": samples,
        "picks": rows,
        "majority": {"accuracy": majority, "tokens": curve.last().map_or(0, |c| c.2)},
        "vote_curve": curve.iter().map(|(k, a, t)| json!({"k": k, "accuracy": a, "tokens": t})).collect::<Vec<_>>(),
        "token_ms": args.token_ms,
        "concurrency": args.concurrency,
        "upstream_n": args.upstream_n,
    });
    if let Some(path) = &args.plot {
        match crate::plots::picks(&out, path) {
            Ok(()) => eprintln!("plot: {}", path.display()),
            Err(e) => eprintln!("plot not written: {e}"),
        }
    }
    if args.json {
        println!("{out}");
    } else {
        print_table(&out);
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

fn print_table(out: &Value) {
    println!(
        "\n{} problems x {} samples; plain majority of all: {:.2}%\n",
        out["problems"],
        out["samples"],
        100.0 * out["majority"]["accuracy"].as_f64().unwrap_or(0.0)
    );
    println!(
        "| pick | accuracy | tokens | vs vote-64 | requests | samples started | wall s | reference accuracy | reference tokens |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let vote64 = find(out, "vote-64")
        .and_then(|r| r["tokens"].as_f64())
        .filter(|&t| t > 0.0);
    for row in out["picks"].as_array().into_iter().flatten() {
        let pct = |v: &Value| {
            v.as_f64()
                .map_or("—".into(), |a| format!("{:.2}%", 100.0 * a))
        };
        let num = |v: &Value| v.as_u64().map_or("—".into(), |t| t.to_string());
        let ratio = match (row["tokens"].as_f64(), vote64) {
            (Some(t), Some(v)) => format!("{:.3}x", t / v),
            _ => "—".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row["name"].as_str().unwrap_or(""),
            pct(&row["accuracy"]),
            num(&row["tokens"]),
            ratio,
            num(&row["requests"]),
            num(&row["samples_started"]),
            row["wall_s"]
                .as_f64()
                .map_or("—".into(), |w| format!("{w:.1}")),
            pct(&row["reference"]["accuracy"]),
            num(&row["reference"]["tokens"]),
        );
    }
}

fn find<'a>(out: &'a Value, name: &str) -> Option<&'a Value> {
    out["picks"]
        .as_array()?
        .iter()
        .find(|r| r["name"].as_str() == Some(name))
}

/// The issue's targets, judged on what was measured.
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
    if let Some(loss) = pts(
        get("confidence-low", "accuracy"),
        get("vote-64", "accuracy"),
    ) {
        report.info.push(format!(
            "INFO picks: confidence-low - vote-64 = {loss:.2} points"
        ));
    }
}
