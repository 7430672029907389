//! `choicewise picks report DIR --answer REGEX`: the set replayed through the gateway, in this
//! process: the trace upstream and the gateway on 127.0.0.1, every problem asked once per
//! pick, as `choicewise-bench picks` does.
//!
//! A set without answers (`record --from-records`) is measured against the grades its items
//! carry from production (`grades.json`) where they have one, and against the vote of all of
//! each item's samples elsewhere: two reports, each replayed on its own items, never one
//! figure over both.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use choicewise_picks::production::{self, Against, Graded, ItemGrade};
use choicewise_picks::traces::TraceSet;
use choicewise_picks::{
    AnswerRule, Asker, Offline, Prefer, Recommendation, Results, Rule, SETTINGS, Verdict,
    gateway_config, offline, picks_for, recommend, upstream, vote_curve,
};
use clap::Args;
use serde_json::{Value, json};

use crate::Exit;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The recorded set (`choicewise picks record --out DIR`; or any set in the format).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// The answer in a sample's text: this regular expression's first capture group (the
    /// whole match without a group). The votes' key (`vote_by`), and what is scored against
    /// each item's answer.
    #[arg(long, value_name = "REGEX")]
    answer: String,
    /// Print the figures as one JSON object (the shape of `choicewise-bench picks --json`,
    /// with `recommendation`) instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the plot of accuracy against tokens (SVG) to this file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Problems asked of the gateway at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    concurrency: usize,
    /// Between two tokens of a replayed sample, ms (a model server's pace).
    #[arg(long, value_name = "MS", default_value_t = 1.0)]
    token_ms: f64,
    /// Grade each sample with this command instead of comparing answers: run with `sh -c`
    /// per sample, the sample's text on its standard input and the item's answer in the
    /// environment's CHOICEWISE_ANSWER; exit 0 means right. For tasks a pattern cannot
    /// grade (code, free text). --answer still reads each sample's vote key: a key is right
    /// when a sample with it was graded right. A grader still running after 60 s is an
    /// error.
    #[arg(long, value_name = "CMD")]
    grade: Option<String>,
    /// Replay at the pace the server gave the samples when they were recorded (`record`
    /// keeps each sample's time to its first token and its total time): every sample's first
    /// token after the median time to a first token, then one token every median
    /// milliseconds a token, finishes no further apart; the answer times (and `--prefer
    /// latency`) are then your server's. Instead of --token-ms.
    #[arg(long, conflicts_with = "token_ms")]
    recorded_pace: bool,
    /// What the recommendation prefers among the picks within --within points of the most
    /// accurate: `accuracy` (the most accurate), `tokens` (the fewest) or `latency` (the
    /// shortest median answer time).
    #[arg(long, value_name = "WHAT", default_value = "tokens", value_parser = ["accuracy", "tokens", "latency"])]
    prefer: String,
    /// The points of accuracy the recommendation may give up for what --prefer asks, from 0
    /// to 100.
    #[arg(long, value_name = "POINTS", default_value_t = 1.0, value_parser = parse_points)]
    within: f64,
}

/// Points of accuracy: a number from 0 to 100.
fn parse_points(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=100.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a number of points from 0 to 100")),
    }
}

/// Whether the set's samples carry their log-probabilities: its `meta.json` says so when it
/// was recorded; else they are looked at.
fn has_logprobs(args: &ReportArgs, set: &TraceSet) -> bool {
    let meta = std::fs::read_to_string(args.dir.join("meta.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok());
    match meta.as_ref().and_then(|m| m["logprobs"].as_bool()) {
        Some(b) => b,
        None => set.has_logprobs(),
    }
}

/// The pace a set's samples were recorded at: the medians over the samples with their times.
struct Pace {
    /// Milliseconds a token after the first: (total - first token) / (tokens - 1).
    token: Duration,
    /// To the first token.
    first_token: Duration,
    /// The samples with their times.
    samples: usize,
}

/// The medians of the recorded times (`None`: no sample has them).
fn recorded_pace(set: &TraceSet) -> Option<Pace> {
    let (mut token, mut first) = (Vec::new(), Vec::new());
    for p in &set.problems {
        for (s, t) in p.samples.iter().zip(&p.times_ms) {
            let [f, total] = *t;
            if f < 0 || total < f {
                continue;
            }
            first.push(f64::from(f));
            if s.len() >= 2 {
                token.push(f64::from(total - f) / (s.len() - 1) as f64);
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let samples = first.len();
    let first_token = median(&mut first)?;
    let token = median(&mut token).unwrap_or(0.0);
    Some(Pace {
        token: Duration::from_secs_f64(token / 1000.0),
        first_token: Duration::from_secs_f64(first_token / 1000.0),
        samples,
    })
}

/// The longest a grader may take on one sample.
const GRADE_TIMEOUT: Duration = Duration::from_secs(60);

/// Grades every sample by `cmd` (see `--grade`): each problem's [`graded`] answers become
/// the keys of its samples graded right. Four commands at a time.
///
/// [`graded`]: choicewise_picks::traces::Problem::graded
async fn grade(set: &mut TraceSet, cmd: &str) -> Result<(), Exit> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let jobs: Vec<(usize, usize, String, String)> = (set.problems.iter().enumerate())
        .flat_map(|(i, p)| {
            let set = &*set;
            (p.samples.iter().enumerate()).map(move |(k, s)| (i, k, set.text(s), p.answer.clone()))
        })
        .collect();
    let graded: Vec<Result<(usize, usize, bool), Exit>> = futures::stream::iter(jobs)
        .map(|(i, k, text, answer)| async move {
            let cannot = |e: std::io::Error| Exit {
                message: format!("--grade {cmd:?}: cannot run it: {e}"),
                code: 2,
            };
            let mut child = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .env("CHOICEWISE_ANSWER", &answer)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(cannot)?;
            let run = async {
                if let Some(mut stdin) = child.stdin.take() {
                    // A grader that exits without reading its input is not an error.
                    let _ = stdin.write_all(text.as_bytes()).await;
                }
                child.wait().await
            };
            let status = tokio::time::timeout(GRADE_TIMEOUT, run)
                .await
                .map_err(|_| Exit {
                    message: format!(
                        "--grade {cmd:?}: still running after {} s on sample {} of item {} (killed)",
                        GRADE_TIMEOUT.as_secs(),
                        k + 1,
                        i + 1
                    ),
                    code: 2,
                })?
                .map_err(cannot)?;
            Ok((i, k, status.success()))
        })
        .buffer_unordered(4)
        .collect()
        .await;
    for p in &mut set.problems {
        p.graded = Some(Default::default());
    }
    for g in graded {
        let (i, k, right) = g?;
        let p = &mut set.problems[i];
        if right && !p.samples[k].answer.is_empty() {
            let key = p.samples[k].answer.clone();
            p.graded.get_or_insert_default().insert(key);
        }
    }
    Ok(())
}

/// What the separation says, in words: each measure's within-problem AUROC and the one to
/// use.
fn separation_line(sep: &Value) -> String {
    match (sep["sampled"].as_f64(), sep["top_k"].as_f64(), sep["use"].as_str()) {
        (Some(s), Some(t), Some(best)) => format!(
            "Confidence within a problem (AUROC of right over wrong samples, {} problems with both): \
             sampled {s:.3}, top_k {t:.3}. Use \"measure\": \"{best}\"{}.",
            sep["problems"],
            if s.max(t) < 0.6 {
                ", though neither tells right from wrong much better than a coin (0.5): a plain vote is as good"
            } else {
                ""
            }
        ),
        _ => "Confidence within a problem: no problem has both right and wrong samples, so no measure can be judged.".to_string(),
    }
}

/// A gateway in this process on 127.0.0.1: its base URL, and its task (aborted when done:
/// a shutdown would say so on stderr, and no answer is left open by then).
async fn start_gateway(upstream: &str) -> Result<(String, tokio::task::JoinHandle<()>), Exit> {
    let config =
        choicewise_gateway::Config::from_toml(&gateway_config(upstream, SETTINGS.max_samples))
            .map_err(|e| format!("the gateway's configuration: {e}"))?;
    let gateway = choicewise_gateway::Gateway::new(&config)
        .map_err(|e| format!("cannot start the gateway: {e}"))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
    let task = tokio::spawn(async move {
        let _ = gateway.serve_on(listener, std::future::pending()).await;
    });
    Ok((format!("http://{addr}"), task))
}

/// The grades of `DIR/grades.json` by item name: none when there is no such file.
fn read_grades(dir: &Path) -> Result<HashMap<String, ItemGrade>, Exit> {
    let path = dir.join("grades.json");
    let bad = |e: &dyn std::fmt::Display| Exit {
        message: format!("{}: {e}", path.display()),
        code: 2,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| bad(&e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
        Err(e) => Err(bad(&e)),
    }
}

/// One part of a report: its items, what they are measured against, then its figures.
struct Report {
    against: Against,
    out: Value,
    recommendation: Option<Recommendation>,
}

pub async fn run(args: ReportArgs) -> Result<(), Exit> {
    let rule = AnswerRule::pattern(&args.answer)
        .map_err(|e| format!("--answer {:?}: {e}", args.answer))?;
    // A set that cannot be read (missing, damaged, hostile) is bad input: exit 2.
    let mut set = TraceSet::read(&args.dir).map_err(|e| Exit {
        message: e.to_string(),
        code: 2,
    })?;
    if set.problems.is_empty() {
        return Err(format!("{}: no problem recorded", args.dir.display()).into());
    }
    set.read_answers(&rule);
    let all: usize = set.problems.iter().map(|p| p.samples.len()).sum();
    let matched = (set.problems.iter().flat_map(|p| &p.samples))
        .filter(|s| !s.answer.is_empty())
        .count();
    if matched == 0 {
        return Err(Exit {
            message: format!(
                "--answer {:?} matched 0 of the {all} samples of {}: every pick would score 0% (give the pattern of the answers in the samples' text, its first group the answer)",
                args.answer,
                args.dir.display()
            ),
            code: 2,
        });
    }
    if set.problems.iter().any(|p| p.samples.is_empty()) {
        return Err(format!("{}: a problem has no sample", args.dir.display()).into());
    }
    let logprobs = has_logprobs(&args, &set);
    let pace = match args.recorded_pace {
        true => Some(recorded_pace(&set).ok_or_else(|| Exit {
            message: format!(
                "--recorded-pace: {} has no sample's times (recorded before they were kept, or not by choicewise picks record)",
                args.dir.display()
            ),
            code: 2,
        })?),
        false => None,
    };
    let times_recorded = pace.is_some() || recorded_pace(&set).is_some();
    // The parts measured apart: a set without answers (production traffic: `record
    // --from-records`) is measured against its grades from production where it has them,
    // and against the vote of all of each item's samples elsewhere; never in one figure.
    let mut parts: Vec<(Against, TraceSet)> = Vec::new();
    let mut graded = Graded::default();
    if let Some(cmd) = &args.grade {
        grade(&mut set, cmd).await?;
        parts.push((Against::Answers, set));
    } else if set.problems.iter().all(|p| p.answer.is_empty()) {
        let grades = read_grades(&args.dir)?;
        let (split, counts) =
            production::parts(set, &grades).map_err(|message| Exit { message, code: 2 })?;
        parts = split;
        graded = counts;
    } else {
        parts.push((Against::Answers, set));
    }
    let split = parts.len() > 1;
    let mut reports = Vec::new();
    for (against, part) in parts {
        if split && !args.json {
            eprintln!(
                "{} ({} items):",
                match against {
                    Against::Feedback => "Graded by feedback",
                    _ => "Without a grade",
                },
                part.problems.len()
            );
        }
        let (mut out, recommendation) =
            measure(&args, &rule, part, logprobs, pace.as_ref()).await?;
        if let Some(label) = against.label() {
            out["measured_against"] = json!(label);
        }
        match against {
            Against::Answers | Against::Vote => {}
            Against::Feedback => {
                out["items_graded"] = out["problems"].clone();
                out["items_graded_right"] = json!(graded.right);
                if graded.unread > 0 {
                    out["items_graded_right_unread"] = json!(graded.unread);
                }
            }
        }
        reports.push(Report {
            against,
            out,
            recommendation,
        });
    }
    let first = &reports[0];
    if let Some(path) = &args.plot {
        choicewise_picks::plot::picks(&first.out, path)
            .map_err(|e| format!("the plot not written to {}: {e}", path.display()))?;
        if !args.json {
            eprintln!("plot: {}", path.display());
        }
    }
    if args.json {
        // The graded items' report, with the others' whole beside it.
        let mut reports = reports.into_iter();
        let mut out = reports.next().map(|r| r.out).unwrap_or_default();
        if let Some(rest) = reports.next() {
            out["agreement"] = rest.out;
        }
        println!("{out}");
        return Ok(());
    }
    for (i, r) in reports.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let samples = &r.out["samples"];
        match r.against {
            Against::Answers => {}
            Against::Feedback => println!(
                "Graded by feedback (POST /v1/feedback): {} items: accuracy ({} graded right, {} graded wrong; a pick answering otherwise on an item graded wrong counts wrong, so each accuracy is a lower bound).\n",
                r.out["problems"], graded.right, graded.wrong
            ),
            Against::Vote => println!(
                "No answers in {}{}: each pick's \"accuracy\" below is its agreement with the vote of all of an item's samples ({samples} or more), not a right answer.\n",
                args.dir.display(),
                match split {
                    true => format!(" for its {} items without a grade", r.out["problems"]),
                    false => String::new(),
                }
            ),
        }
        choicewise_picks::print_table(&r.out);
    }
    match &pace {
        Some(r) => println!(
            "\nReplayed at the recorded pace ({} samples' medians: first token after {:.0} ms, then {:.1} ms a token): the answer times are your server's.",
            r.samples,
            r.first_token.as_secs_f64() * 1000.0,
            r.token.as_secs_f64() * 1000.0
        ),
        None if times_recorded => println!(
            "\nThe answer times are the replay's ({} ms a token); --recorded-pace replays at your server's recorded pace.",
            args.token_ms
        ),
        None => {}
    }
    if matched < all {
        println!("\n--answer matched {matched} of the {all} samples: the others have no answer.");
    }
    if graded.unread > 0 {
        println!(
            "\n{} of the items graded right have no answer --answer reads in the sample graded: no pick counts right on them.",
            graded.unread
        );
    }
    if !logprobs {
        println!("\nNo log-probabilities recorded: no confidence picks.");
    } else {
        for r in &reports {
            let of = match (split, r.against) {
                (false, _) => "",
                (true, Against::Feedback) => "The graded items: ",
                (true, _) => "The items without a grade: ",
            };
            println!("\n{of}{}", separation_line(&r.out["separation"]));
        }
    }
    // The graded items' recommendation, when there are: they say what is right.
    let Report {
        against,
        out,
        recommendation,
    } = &reports[0];
    let measured = against.measured();
    match recommendation {
        Some(Recommendation {
            pick,
            accuracy,
            verdict:
                Verdict::Undecided {
                    versus,
                    difference,
                    interval,
                    items_needed,
                },
            ..
        }) => {
            println!(
                "\nNo recommendation: {pick} ({:.2}% {measured}) cannot be told apart from {versus} on {} items (the difference {:+.2} points, 95% interval [{:+.2}, {:+.2}]); {}.",
                100.0 * accuracy,
                out["problems"],
                100.0 * difference,
                100.0 * interval.0,
                100.0 * interval.1,
                match items_needed {
                    Some(n) => format!("about {n} items would tell them apart"),
                    None => "they tie".to_string(),
                }
            );
        }
        Some(r) => {
            println!(
                "\nRecommendation: {} ({:.2}% {measured}, {:.2}x the tokens of single): {}.",
                r.pick,
                100.0 * r.accuracy,
                r.tokens_vs_single,
                recommendation_rule(&args)?.describe()
            );
            if r.config.is_empty() {
                println!("It needs no configuration: one sample, a plain request.");
            } else {
                println!(
                    "To deploy it, put this in the model's [[models]] entry of choicewise serve's configuration:\n\n{}",
                    r.config
                );
            }
        }
        None => println!("\nNo recommendation: no pick could be replayed."),
    }
    Ok(())
}

/// The rule the recommendation follows (`--prefer`, `--within`).
fn recommendation_rule(args: &ReportArgs) -> Result<Rule, Exit> {
    Ok(Rule {
        prefer: args.prefer.parse::<Prefer>()?,
        within: args.within,
    })
}

/// `set` replayed through the gateway, in this process (its own trace upstream and gateway),
/// every problem once per pick: the figures (`summary`'s object, with the report's own
/// keys and `recommendation`), and the recommendation.
async fn measure(
    args: &ReportArgs,
    rule: &AnswerRule,
    set: TraceSet,
    logprobs: bool,
    pace: Option<&Pace>,
) -> Result<(Value, Option<Recommendation>), Exit> {
    let samples = (set.problems.iter())
        .map(|p| p.samples.len())
        .min()
        .unwrap_or(0);
    let all: usize = set.problems.iter().map(|p| p.samples.len()).sum();
    let matched = (set.problems.iter().flat_map(|p| &p.samples))
        .filter(|s| !s.answer.is_empty())
        .count();
    let (picks, settings) = picks_for(&SETTINGS, samples, logprobs);
    let offline_figures: Vec<Offline> = (picks.iter())
        .map(|p| offline(&set, p, &p.settings(&settings)))
        .collect();
    let curve = vote_curve(&set, samples);
    let set = Arc::new(set);
    let up = match pace {
        None => {
            let pace = Duration::from_secs_f64(args.token_ms.max(0.0) / 1000.0);
            upstream::start(set.clone(), pace)?
        }
        Some(r) => {
            let slow = upstream::Slow {
                first_token: r.first_token,
                every: 1,
            };
            upstream::start_slow(set.clone(), r.token, slow, r.token)?
        }
    };
    let (gateway, gateway_task) = start_gateway(&up.url).await?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| e.to_string())?;
    let asker = Asker {
        client,
        gateway,
        model: "fanout".into(),
        concurrency: args.concurrency,
        rule: rule.clone(),
        vote_by: args.answer.clone(),
    };
    let mut figures = Vec::new();
    for pick in &picks {
        let (f, failure) = asker.measure(&up, &set, pick, &settings, &pick.name).await;
        if !args.json {
            eprintln!(
                "{:<16} {:>6.1}%  {:>9} tokens  {:>6} requests  {:>5.1} s{}",
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
        figures.push(f);
    }
    gateway_task.abort();
    let runs = vec![figures];
    let mut out = choicewise_picks::summary(&Results {
        set: &set,
        picks: &picks,
        settings: &settings,
        vote_by: &args.answer,
        offline: &offline_figures,
        curve: &curve,
        runs: &runs,
    });
    out["token_ms"] = json!(pace.map_or(args.token_ms, |r| r.token.as_secs_f64() * 1000.0));
    if let Some(r) = pace {
        out["recorded_pace"] = json!({
            "token_ms": r.token.as_secs_f64() * 1000.0,
            "first_token_ms": r.first_token.as_secs_f64() * 1000.0,
            "samples": r.samples,
        });
    }
    out["concurrency"] = json!(args.concurrency);
    out["upstream_n"] = json!("fan-out");
    out["logprobs"] = json!(logprobs);
    out["answers_matched"] = json!({"samples": matched, "of": all});
    let recommendation = recommend(&out, &recommendation_rule(args)?);
    out["recommendation"] = recommendation.as_ref().map_or(Value::Null, |r| r.to_json());
    // The upstream's thread is joined off the runtime's workers.
    tokio::task::spawn_blocking(move || drop(up)).await.ok();
    Ok((out, recommendation))
}
