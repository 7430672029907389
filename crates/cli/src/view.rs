//! Choosing the view: `--json`, the plain labelled lines, or the live view on a terminal.

use choicewise::confidence::{Confidence, ConfidenceReport, Measure};
use choicewise::policy::PolicyLimits;
use choicewise::{Completions, PickRule, Policy, PolicyError, PolicyErrorKind, Selection};
use clap::Args;
use tokio::sync::watch;

use crate::Exit;

/// How a completion is shown (shared by `replay` and `chat`).
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("a_vote").args(["vote", "vote_by"]).multiple(true)))]
pub struct ViewArgs {
    /// Print the assembled completion as one `chat.completion` JSON object instead (exactly
    /// `collect()`).
    #[arg(long)]
    pub json: bool,
    /// Plain labelled lines even on a terminal (the view used when stdout is not one).
    #[arg(long, conflicts_with = "json")]
    pub plain: bool,
    /// Stop at the first choice that finishes with stop or tool_calls: the others are
    /// cancelled (their connection closed when none is wanted any more). Exit 0 when a
    /// choice was selected, 1 when none could be. The `first-finished` row of docs/picks.md
    /// (with --fan-out 4).
    #[arg(long, conflicts_with_all = ["vote", "vote_by"])]
    pub first: bool,
    /// A plurality vote over each finished choice's final content (trimmed), decided as soon
    /// as the choices still running can no longer change the winner; the rest are cancelled.
    /// Exit 0 when a key won, 1 when no choice could vote. The `vote-K` rows of
    /// docs/picks.md (with --fan-out K).
    #[arg(long)]
    pub vote: bool,
    /// Vote over the first capture group of REGEX in each finished choice's content (the
    /// whole match when it has no group) instead; choices without a match do not vote.
    #[arg(long, value_name = "REGEX")]
    pub vote_by: Option<String>,
    /// A key needs at least K votes to win; with fewer, nothing is selected (exit 1, the
    /// tally said) [default: 2, so that one vote out of several is no majority].
    #[arg(long, value_name = "K")]
    pub vote_min: Option<u32>,
    /// Compare the keys after Unicode case folding, trimming and dropping trailing
    /// punctuation ("no", "No" and "no." are one key).
    #[arg(long)]
    pub vote_normalize: bool,
    /// Vote window by window (early-stopping self-consistency): over K samples (--fan-out K,
    /// or -n K sent as one request per choice), start W samples at a time, the next W only
    /// while the vote is undecided; the first window that agrees unanimously decides and
    /// starts no more. The `adaptive` row of docs/picks.md
    /// (W = 4, at most 64 samples).
    #[arg(long, value_name = "W")]
    pub vote_window: Option<u32>,
    /// Guide the vote by the model's confidence (DeepConf online, arXiv 2508.15260): needs
    /// --vote or --vote-by, and choices with log-probabilities (chat asks its upstreams for
    /// logprobs: true, and top_logprobs: 5 with --measure top_k). The first --warmup samples
    /// run to their end and set a threshold; every later one is stopped (its connection
    /// closed) as soon as the mean confidence of its last --group-tokens tokens falls below
    /// it, shown as `low confidence`, and does not vote; the others vote with their
    /// confidence's weight (--measure sampled: exp of it; top_k: itself). The samples
    /// (--fan-out K, or -n K, one request per choice) start on demand: the rest only if the
    /// warmup leaves the vote undecided. Without log-probabilities, the plain vote decides
    /// and --json's "confidence" says why. The `sampled-low` row of docs/picks.md: the
    /// defaults with --vote-window 4 and --fan-out 64; `confidence-high` and
    /// `confidence-low`: --measure top_k --keep 0.9 / 0.1 --warmup 16 --group-tokens 16.
    #[arg(long, requires = "a_vote")]
    pub confidence: bool,
    /// With --confidence: how a token's confidence is measured: `sampled`, the sampled
    /// token's own log-probability (asks logprobs: true alone), or `top_k`, DeepConf's minus
    /// the mean of the top-5 log-probabilities. Each has its own defaults of --keep and
    /// --group-tokens [default: sampled].
    #[arg(long, value_name = "MEASURE", requires = "confidence", value_parser = parse_measure)]
    pub measure: Option<Measure>,
    /// With --confidence: the samples that run to their end and set the threshold, 1 to 64
    /// [default: 8].
    #[arg(long, value_name = "N", requires = "confidence")]
    pub warmup: Option<u32>,
    /// With --confidence: the share of warmup confidences that pass, above 0 and at most 1;
    /// the threshold is their (1 - F) quantile (0.9: conservative, 0.1: only the most
    /// confident tenth) [default: 0.1 with --measure sampled, 0.9 with top_k].
    #[arg(long, value_name = "F", requires = "confidence", value_parser = parse_share)]
    pub keep: Option<f64>,
    /// With --confidence: the tokens whose mean confidence is compared with the threshold (a
    /// sliding window), 1 to 100000 [default: 4 with --measure sampled, 64 with top_k].
    #[arg(long, value_name = "N", requires = "confidence")]
    pub group_tokens: Option<u32>,
}

/// A measure's name (`sampled`, `top_k`).
fn parse_measure(s: &str) -> Result<Measure, String> {
    s.parse::<Measure>().map_err(|e| e.to_string())
}

/// A share: a number from 0 to 1.
fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a share (a number from 0 to 1)")),
    }
}

/// The most choices one run's pick counts (`-n` × `--fan-out`): more would be planned one
/// by one to no purpose.
pub const MAX_SAMPLES: u32 = 65_536;

/// The flag that states a policy's field, for its refusal.
fn flag_of(field: &str) -> &str {
    match field {
        "samples" => "-n × --fan-out",
        "vote_by" => "--vote-by",
        "min_votes" => "--vote-min",
        "window" => "--vote-window",
        "vote_normalize" => "--vote-normalize",
        "confidence" => "--confidence",
        "confidence.measure" => "--measure",
        "confidence.warmup" => "--warmup",
        "confidence.keep" => "--keep",
        "confidence.group_tokens" => "--group-tokens",
        other => other,
    }
}

/// A refused policy as a usage error (exit 2) naming the flag.
fn refused(e: &PolicyError) -> Exit {
    let message = match e.kind() {
        // The samples are the choices asked for, at least one: only the cap refuses them.
        PolicyErrorKind::Samples => {
            format!("-n × --fan-out: at most {MAX_SAMPLES} choices in one run")
        }
        _ => format!(
            "{}: {}",
            flag_of(e.field()),
            e.problem_naming(|field| flag_of(field).to_string())
        ),
    };
    Exit { message, code: 2 }
}

/// How a pick's selection is shown: `--json`'s fields and the summary line.
pub struct Shown<'a>(pub &'a Policy);

impl Shown<'_> {
    /// The selection as `--json`'s top-level fields: `"selected"`, and for a vote `"vote"`
    /// (and, with samples started on demand, `"started"` and `"windows"`).
    pub fn json_fields(&self, selection: &Selection) -> Vec<(&'static str, serde_json::Value)> {
        let mut fields = vec![("selected", serde_json::json!(selection.selected))];
        if self.0.rule() == PickRule::Vote {
            fields.push(("vote", serde_json::json!(selection.vote)));
        }
        if let Some(started) = selection.started {
            fields.push(("started", serde_json::json!(started)));
        }
        if !selection.windows.is_empty() {
            fields.push(("windows", serde_json::json!(selection.windows)));
        }
        if let Some(report) = &selection.confidence {
            fields.push(("confidence", serde_json::json!(report)));
        }
        fields
    }

    /// One line saying what was picked, for the plain and live views.
    pub fn summary(&self, selection: &Selection) -> String {
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        let mut line = match (&selection.selected[..], self.0.rule()) {
            ([], _) => "selected: none".to_string(),
            (picked, PickRule::Vote) => format!("selected: choices {}", list(picked)),
            (picked, _) => format!("selected: choice {} (first finished)", list(picked)),
        };
        // Why nothing was selected is the run's error, said once on stderr (`picked_verdict`).
        if let Some(t) = &selection.vote {
            line.push_str(&format!(
                " (vote: {:?} with {} of {} votes counted, {} choices)",
                t.key, t.votes, t.counted, t.choices
            ));
        }
        if !selection.cancelled.is_empty() {
            line.push_str(&format!(
                "; cancelled {} (≈ {} tokens received)",
                list(&selection.cancelled),
                selection.cancelled_tokens
            ));
        }
        if let Some(started) = selection.started {
            let windows = selection.windows.len();
            let unanimous = (selection.windows.last())
                .is_some_and(|w| !w.is_empty() && w.iter().all(|i| selection.selected.contains(i)));
            let weighted = selection
                .confidence
                .as_ref()
                .is_some_and(|r| r.applied().is_some());
            let why = match (&selection.vote, unanimous, weighted) {
                (Some(_), _, true) => "the confidence-weighted vote was decided",
                (Some(_), true, false) => "a window agreed unanimously",
                (Some(_), false, false) => "the plurality was decided",
                (None, _, _) => "no key won",
            };
            line.push_str(&format!(
                "; {started} samples started in {windows} window(s), stopped because {why}"
            ));
        }
        if let Some(report) = &selection.confidence {
            line.push_str(&confidence_summary(report));
        }
        line
    }
}

/// What a vote guided by confidence did, for the summary line: `; confidence: threshold
/// 2.2, low confidence 3, 5, weights "41" 7.5, "42" 6.3`, or `; confidence unavailable
/// (REASON): plain vote`.
fn confidence_summary(report: &ConfidenceReport) -> String {
    if let Some(reason) = report.unavailable() {
        return format!("; confidence unavailable ({reason}): plain vote");
    }
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let mut line = match report.threshold() {
        Some(s) => format!("; confidence: threshold {s:.3}"),
        None => "; confidence:".to_string(),
    };
    if !report.stopped().is_empty() {
        line.push_str(&format!(", low confidence {}", list(report.stopped())));
    }
    let weights: Vec<String> = (report.weights().iter())
        .map(|(k, w)| format!("{k:?} {w:.3}"))
        .collect();
    if !weights.is_empty() {
        line.push_str(&format!(", weights {}", weights.join(", ")));
    }
    line
}

impl ViewArgs {
    /// The options of `--confidence`, when asked for (checked with the pick, by
    /// [`policy`](Self::policy)).
    pub fn confidence(&self) -> Option<Confidence> {
        if !self.confidence {
            return None;
        }
        let mut options = Confidence::for_measure(self.measure.unwrap_or_default());
        if let Some(n) = self.warmup {
            options.warmup = n as usize;
        }
        if let Some(keep) = self.keep {
            options.keep = keep;
        }
        if let Some(n) = self.group_tokens {
            options.group_tokens = n as usize;
        }
        Some(options)
    }

    /// The pick asked for, if any (`--first`, or a vote's flags), as core's [`Policy`], with
    /// its defaults and its checks; a refusal is a usage error naming the flag. `samples`:
    /// the choices it picks among when known before they stream (`chat`'s `-n` × `--fan-out`;
    /// a replay's are not), so that a vote no key could win is refused before anything is
    /// sent.
    pub fn policy(&self, samples: Option<u32>) -> Result<Option<Policy>, Exit> {
        let vote = self.vote
            || self.vote_by.is_some()
            || self.vote_min.is_some()
            || self.vote_normalize
            || self.vote_window.is_some();
        let policy = if self.first {
            Policy::builder().select(PickRule::FirstFinished)
        } else if vote {
            let mut policy =
                (Policy::builder().select(PickRule::Vote)).vote_normalize(self.vote_normalize);
            if let Some(pattern) = &self.vote_by {
                policy = policy.vote_by(pattern);
            }
            if let Some(k) = self.vote_min {
                policy = policy.min_votes(k as usize);
            }
            if let Some(w) = self.vote_window {
                policy = policy.window(w as usize);
            }
            if let Some(options) = self.confidence() {
                policy = policy.confidence(options);
            }
            policy
        } else {
            return Ok(None);
        };
        let policy = match samples {
            Some(k) => policy.samples(k),
            None => policy,
        };
        policy
            .build(&PolicyLimits::default().max_samples(MAX_SAMPLES))
            .map(Some)
            .map_err(|e| refused(&e))
    }
}

/// A run without a pick over `samples` choices, to plan: every sample a choice, checked as a
/// pick is (at most [`MAX_SAMPLES`]).
pub fn every_sample(samples: u32) -> Result<Policy, Exit> {
    Policy::builder()
        .samples(samples)
        .build(&PolicyLimits::new(samples).max_samples(MAX_SAMPLES))
        .map_err(|e| refused(&e))
}

/// The combinator's decision as the plain and live views see it: `None` until it is made,
/// then the [`Selection`] (published by `show::show` the moment the pick returns).
pub type Decision = watch::Receiver<Option<Selection>>;

/// Waits for the combinator's decision; `None` without a combinator, or if its task ended
/// without deciding (a panic).
pub async fn decided(decision: Option<Decision>) -> Option<Selection> {
    let mut decision = decision?;
    decision.wait_for(Option::is_some).await.ok()?.clone()
}

/// The exit of a run with a combinator: success when something was selected (the failures of
/// other choices are still said on stderr), else the reason.
pub fn picked_verdict(selection: &Selection, shown: Result<(), Exit>) -> Result<(), Exit> {
    if selection.selected.is_empty() {
        let reason = selection
            .reason
            .clone()
            .unwrap_or_else(|| "nothing selected".into());
        let mut message = format!("nothing selected: {reason}");
        if let Err(e) = shown {
            message.push('\n');
            message.push_str(&e.message);
        }
        return Err(Exit::from(message));
    }
    if let Err(e) = shown {
        for line in e.message.lines() {
            eprintln!("choicewise: {line}");
        }
    }
    Ok(())
}

/// How a shown completion ended: `Ok`, or one line per failure: the stream's error first,
/// then every choice that failed on its own, each naming its index and line.
pub async fn verdict(completions: &Completions) -> Result<(), String> {
    let stream = completions.outcome().await.err().map(|e| e.to_string());
    let mut lines: Vec<String> = stream.iter().cloned().collect();
    for (index, error) in completions.choice_errors().await {
        let text = error.to_string();
        if stream.as_ref() == Some(&text) {
            continue;
        }
        if text.contains(&format!("choice {index}")) {
            lines.push(text);
        } else {
            lines.push(format!("choice {index}: {text}"));
        }
    }
    match lines.is_empty() {
        true => Ok(()),
        false => Err(lines.join("\n")),
    }
}

/// One upstream of a fan-out, as the views name it: `API:MODEL@HOST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLabel {
    pub api: String,
    pub model: String,
    pub host: String,
}

impl std::fmt::Display for SourceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}@{}", self.api, self.model, self.host)
    }
}

/// The upstreams of a fan-out, in order, each with `per_request` choices.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    upstreams: Vec<SourceLabel>,
    per_request: usize,
}

impl Sources {
    pub fn new(upstreams: Vec<SourceLabel>, per_request: usize) -> Self {
        Sources {
            upstreams,
            per_request: per_request.max(1),
        }
    }

    /// Upstream `k`'s label.
    pub fn upstream(&self, k: usize) -> Option<&SourceLabel> {
        self.upstreams.get(k)
    }

    /// The label of the choice with this index, when the fan-out mixes sources (a fan-out of
    /// one source, or no fan-out, needs none).
    pub fn of_choice(&self, index: u32) -> Option<String> {
        let first = self.upstreams.first()?;
        if self.upstreams.iter().all(|u| u == first) {
            return None;
        }
        self.upstreams
            .get(index as usize / self.per_request)
            .map(ToString::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_over_too_many_choices_is_a_usage_error() {
        assert_eq!(every_sample(4).unwrap().samples(), 4);
        let e = every_sample(MAX_SAMPLES + 1).unwrap_err();
        assert_eq!(e.code, 2);
        assert_eq!(
            e.message,
            format!("-n × --fan-out: at most {MAX_SAMPLES} choices in one run")
        );
    }
}
