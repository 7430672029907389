//! # choicewise-picks
//!
//! Do the picks pay? A pick (a vote of K samples, the first to finish, a windowed vote, a
//! confidence-guided vote) costs samples to give one answer. This crate measures what each
//! pick buys on a model's *recorded* samples, replayed through the real `choicewise` gateway.
//!
//! The concepts:
//!
//! - **A set** ([`traces::TraceSet`]): problems, each with its right answer and N samples a
//!   model drew for it, every token with its log-probability and top-5 alternatives (the
//!   `arith-traces` format: `traces_*.npz` and `vocab.json`). The `choicewise picks record`
//!   command writes one from any OpenAI-compatible endpoint ([`traces::TraceSet::write_npz`]).
//! - **The trace upstream** ([`upstream::start`]): a Chat Completions server on 127.0.0.1 that
//!   serves the k-th sample asked of a problem (in one run) as that problem's recorded sample
//!   k, streamed token by token with its `logprobs`, counting the tokens it sends. The gateway
//!   in front of it cannot tell it from a model server, and every pick sees the same samples.
//! - **The picks** ([`picks`], [`Pick::extension`]): each is a request's `choicewise`
//!   extension; `vote_by` is the pattern whose first capture group is the answer.
//! - **The run** ([`Asker::measure`]): asks a gateway every problem once per pick and
//!   measures accuracy, tokens the upstream sent, requests and samples started, wall time.
//! - **The reference** ([`mod@reference`], [`offline`]): the same pick computed offline, one
//!   sample at a time, as DeepConf's reference code does it: what the gateway's figures are
//!   set beside.
//! - **The summary** ([`summary`], [`print_table`], [`recommend`], [`plot::picks`]): one JSON
//!   object (the shape `choicewise-bench picks --json` prints), its table, the cheapest pick
//!   that keeps the vote's accuracy, and the plot of accuracy against tokens.
//!
//! ```
//! use choicewise_picks::{AnswerRule, SETTINGS, picks};
//! let names: Vec<String> = picks(&SETTINGS).into_iter().map(|p| p.name).collect();
//! assert_eq!(names[..3], ["single", "first-finished", "vote-4"]);
//! let rule = AnswerRule::pattern(r"#### (\d+)").unwrap();
//! assert_eq!(rule.of("12+5=17\n#### 17"), "17");
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod interval;
pub mod plot;
pub mod production;
pub mod reference;
mod run;
pub mod schedule;
pub mod separation;
mod summary;
pub mod traces;
pub mod upstream;
pub mod vocab;

pub use choicewise_proto::Measure;
use serde_json::{Value, json};

pub use run::{Asker, gateway_config};
pub use summary::{
    Prefer, Recommendation, Results, Rule, Verdict, accuracy_text, config_block, find,
    offline_summary, print_table, recommend, summary,
};

use reference::{DeepConf, Outcome};
use traces::{Problem, TraceSet};

/// The arithmetic sets' vote key: the answer after `#### `.
pub const VOTE_BY: &str = r"#### (\d+)";

/// How a sample's answer is read from its text.
#[derive(Debug, Clone)]
pub enum AnswerRule {
    /// The digits after the last `#### ` (the arithmetic sets' own `pred_answers`).
    Marker,
    /// The first capture group of the first match (the whole match without a group), as
    /// the gateway's `vote_by` reads it.
    Pattern(regex::Regex),
}

impl AnswerRule {
    /// A [`Pattern`](Self::Pattern) rule.
    ///
    /// ```
    /// let rule = choicewise_picks::AnswerRule::pattern(r"answer: (\w+)").unwrap();
    /// assert_eq!(rule.of("answer: Paris. answer: Rome"), "Paris");
    /// assert_eq!(rule.of("no idea"), "");
    /// ```
    pub fn pattern(pattern: &str) -> Result<AnswerRule, regex::Error> {
        regex::Regex::new(pattern).map(AnswerRule::Pattern)
    }

    /// The answer of a text (`""` when none).
    pub fn of(&self, text: &str) -> String {
        match self {
            AnswerRule::Marker => reference::answer_of(text),
            AnswerRule::Pattern(re) => re
                .captures(text)
                .and_then(|c| c.get(1).or_else(|| c.get(0)))
                .map_or(String::new(), |m| m.as_str().to_string()),
        }
    }
}

/// The settings of the picks (the table's rows).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Samples of `first-finished`.
    pub first_finished: usize,
    /// Samples at a time of `adaptive`.
    pub adaptive_window: usize,
    /// The most samples of `adaptive` and the confidence picks.
    pub max_samples: usize,
    /// Samples of a `top_k` confidence pick's warmup (they set its threshold).
    pub warmup: usize,
    /// Tokens of a `top_k` confidence group (a sample's confidence is its lowest group's).
    pub group_tokens: usize,
    /// Samples of a `sampled` confidence pick's warmup.
    pub sampled_warmup: usize,
    /// Tokens of a `sampled` confidence group.
    pub sampled_group_tokens: usize,
    /// Samples started at a time after a confidence pick's warmup (`window`).
    pub confidence_window: usize,
    /// The leader's share of the weighted vote that stops sampling.
    pub consensus: f64,
}

/// The settings of the table (docs/picks.md).
pub const SETTINGS: Settings = Settings {
    first_finished: 4,
    adaptive_window: 4,
    max_samples: 64,
    warmup: 16,
    group_tokens: 16,
    sampled_warmup: 8,
    sampled_group_tokens: 4,
    confidence_window: 4,
    consensus: 0.95,
};

impl Settings {
    /// These settings within `samples` recorded samples a problem: `adaptive` and the
    /// confidence picks take at most that many, and a confidence pick's warmup at most half
    /// of them (so that some samples are left to stop).
    ///
    /// ```
    /// let s = choicewise_picks::SETTINGS.within(8);
    /// assert_eq!((s.max_samples, s.warmup), (8, 4));
    /// assert_eq!(choicewise_picks::SETTINGS.within(64), choicewise_picks::SETTINGS);
    /// ```
    pub fn within(&self, samples: usize) -> Settings {
        Settings {
            max_samples: self.max_samples.min(samples),
            warmup: self.warmup.min((samples / 2).max(1)),
            sampled_warmup: self.sampled_warmup.min((samples / 2).max(1)),
            ..*self
        }
    }
}

/// One pick's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// One sample, a plain request.
    Single,
    /// K samples, the first to finish answers.
    FirstFinished(usize),
    /// A vote of K samples.
    Vote(usize),
    /// The windowed vote: `window` samples at a time, up to `max`, until a window agrees.
    Adaptive {
        /// The most samples.
        max: usize,
        /// Samples at a time.
        window: usize,
    },
    /// The first sample to produce a token answers (`first_token`), `samples` at once, or one
    /// more every `hedge_after_ms` while none has (a hedge).
    FirstToken {
        /// The most samples.
        samples: usize,
        /// Start the next sample after this many ms without a token (`None`: all at once).
        hedge_after_ms: Option<u64>,
    },
    /// The confidence-guided vote (DeepConf online).
    Confidence {
        /// How a token's confidence is measured (its window: the settings' group for it).
        measure: Measure,
        /// Share of the warmup's confidences at or above the threshold (0.9: high, 0.1: low).
        keep: f64,
        /// Samples of the warmup.
        warmup: usize,
        /// Samples started at a time after the warmup.
        window: usize,
    },
}

/// One pick: its name in the table and the JSON, and its kind.
#[derive(Debug, Clone)]
pub struct Pick {
    /// `single`, `vote-16`, ...
    pub name: String,
    /// What it does.
    pub kind: Kind,
}

/// The picks of the table, named as the JSON names them.
pub fn picks(s: &Settings) -> Vec<Pick> {
    let p = |name: &str, kind| Pick {
        name: name.into(),
        kind,
    };
    let confidence = |measure, keep| Kind::Confidence {
        measure,
        keep,
        warmup: match measure {
            Measure::TopK => s.warmup,
            _ => s.sampled_warmup,
        },
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
        p("confidence-high", confidence(Measure::TopK, 0.9)),
        p("confidence-low", confidence(Measure::TopK, 0.1)),
        p("sampled-high", confidence(Measure::Sampled, 0.9)),
        p("sampled-low", confidence(Measure::Sampled, 0.1)),
    ]
}

/// The picks of time to the first token, run only when asked for by name (`choicewise-bench
/// picks --only first-token,hedge`, on a slow upstream: `--slow-first-token-ms`):
/// `first-token` (4 samples at once, the first to produce answers) and `hedge` (one sample,
/// then one more every `hedge_after_ms` while none has produced, up to 4).
///
/// ```
/// let names: Vec<String> = choicewise_picks::latency_picks(50).into_iter().map(|p| p.name).collect();
/// assert_eq!(names, ["first-token", "hedge"]);
/// ```
pub fn latency_picks(hedge_after_ms: u64) -> Vec<Pick> {
    vec![
        Pick {
            name: "first-token".into(),
            kind: Kind::FirstToken {
                samples: 4,
                hedge_after_ms: None,
            },
        },
        Pick {
            name: "hedge".into(),
            kind: Kind::FirstToken {
                samples: 4,
                hedge_after_ms: Some(hedge_after_ms),
            },
        },
    ]
}

/// The picks a set of `samples` samples a problem can replay: those of the table whose
/// samples are recorded (`first-finished` and `vote-K` need K; `adaptive` and the confidence
/// picks take at most `samples`, [`Settings::within`]), the confidence picks only when the
/// samples have their log-probabilities. With the settings they use. A set of a number of
/// samples the table has no vote of (3, as requests of `n = 3` record) also has the vote of
/// all of them (`vote-3`).
///
/// ```
/// use choicewise_picks::{SETTINGS, picks_for};
/// let names = |samples| -> Vec<String> {
///     picks_for(&SETTINGS, samples, false).0.into_iter().map(|p| p.name).collect()
/// };
/// assert_eq!(names(8), ["single", "first-finished", "vote-4", "vote-8", "adaptive"]);
/// assert_eq!(names(3), ["single", "vote-3", "adaptive"]);
/// assert_eq!(picks_for(&SETTINGS, 8, false).1.max_samples, 8);
/// ```
pub fn picks_for(base: &Settings, samples: usize, logprobs: bool) -> (Vec<Pick>, Settings) {
    let s = base.within(samples);
    let mut all: Vec<Pick> = picks(&s)
        .into_iter()
        .filter(|p| match p.kind {
            Kind::Single => samples >= 1,
            Kind::FirstFinished(k) | Kind::Vote(k) => k <= samples,
            Kind::FirstToken { samples: k, .. } => k <= samples,
            Kind::Adaptive { .. } => samples >= 2,
            Kind::Confidence { .. } => logprobs && samples >= 2,
        })
        .collect();
    let voted = |p: &Pick| matches!(p.kind, Kind::Vote(k) if k == samples);
    if samples >= 2 && !all.iter().any(voted) {
        let at = (all.iter())
            .position(|p| matches!(p.kind, Kind::Adaptive { .. } | Kind::Confidence { .. }))
            .unwrap_or(all.len());
        let vote = Pick {
            name: format!("vote-{samples}"),
            kind: Kind::Vote(samples),
        };
        all.insert(at, vote);
    }
    (all, s)
}

impl Pick {
    /// The request's `choicewise` extension (`None`: a plain request of one sample), with
    /// `vote_by` as the votes' key.
    ///
    /// ```
    /// use choicewise_picks::{SETTINGS, VOTE_BY, picks};
    /// let vote4 = &picks(&SETTINGS)[2];
    /// assert_eq!(vote4.extension(&SETTINGS, VOTE_BY).unwrap()["samples"], 4);
    /// ```
    pub fn extension(&self, s: &Settings, vote_by: &str) -> Option<Value> {
        Some(match self.kind {
            Kind::Single => return None,
            Kind::FirstFinished(k) => json!({"samples": k, "select": "first_finished"}),
            Kind::FirstToken {
                samples,
                hedge_after_ms,
            } => {
                let mut ext = json!({"samples": samples, "select": "first_token"});
                if let Some(ms) = hedge_after_ms {
                    ext["hedge_after_ms"] = json!(ms);
                }
                ext
            }
            Kind::Vote(k) => json!({"samples": k, "select": "vote", "vote_by": vote_by}),
            Kind::Adaptive { max, window } => {
                json!({"samples": max, "select": "vote", "vote_by": vote_by, "window": window})
            }
            Kind::Confidence {
                measure,
                keep,
                warmup,
                window,
            } => json!({
                "samples": s.max_samples, "select": "vote", "vote_by": vote_by, "window": window,
                "confidence": {"measure": measure.as_str(), "warmup": warmup, "keep": keep,
                               "group_tokens": s.group_tokens, "consensus": s.consensus},
            }),
        })
    }

    /// The pick's measure: a confidence pick's, `None` for the others.
    pub fn measure(&self) -> Option<Measure> {
        match self.kind {
            Kind::Confidence { measure, .. } => Some(measure),
            _ => None,
        }
    }

    /// The pick's own settings: `base`, with its window and warmup, and a confidence pick's
    /// group of tokens its measure's (`group_tokens` for `top_k`, `sampled_group_tokens`
    /// for `sampled`).
    ///
    /// ```
    /// use choicewise_picks::{SETTINGS, picks};
    /// let all = picks(&SETTINGS);
    /// let sampled = all.iter().find(|p| p.name == "sampled-low").unwrap();
    /// let s = sampled.settings(&SETTINGS);
    /// assert_eq!((s.warmup, s.group_tokens), (8, 4));
    /// ```
    pub fn settings(&self, base: &Settings) -> Settings {
        match self.kind {
            Kind::Confidence {
                measure,
                warmup,
                window,
                ..
            } => Settings {
                warmup,
                confidence_window: window,
                group_tokens: match measure {
                    Measure::TopK => base.group_tokens,
                    _ => base.sampled_group_tokens,
                },
                ..*base
            },
            _ => *base,
        }
    }

    /// The same pick offline, one sample at a time.
    pub fn reference(&self, p: &Problem, s: &Settings) -> Outcome {
        match self.kind {
            Kind::Single => reference::single(p),
            Kind::FirstFinished(k) => reference::first_finished(p, k),
            Kind::FirstToken {
                samples,
                hedge_after_ms,
            } => reference::first_token(p, samples, hedge_after_ms.is_some()),
            Kind::Vote(k) => reference::vote(p, k),
            Kind::Adaptive { max, window } => reference::adaptive(p, max, window),
            Kind::Confidence {
                measure,
                keep,
                warmup,
                ..
            } => reference::deepconf(
                p,
                &DeepConf {
                    measure,
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

/// A pick's figures through the gateway, over the problems.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Problems answered right.
    pub right: usize,
    /// Tokens the upstream sent.
    pub tokens: u64,
    /// Upstream requests.
    pub requests: u64,
    /// Samples the upstream started.
    pub samples_started: u64,
    /// Samples whose stream the gateway closed before their end.
    pub cancelled: u64,
    /// Answers that were not 200.
    pub failed: usize,
    /// 200 answers whose vote said it was undecided.
    pub undecided: usize,
    /// Seconds from the first question to the last answer.
    pub wall_s: f64,
    /// Each problem's answer, in the set's order (`""`: none, or the request failed).
    pub answers: Vec<String>,
    /// Each request's milliseconds to the first byte of its answer's body.
    pub first_byte_ms: Vec<f64>,
    /// Each request's milliseconds to its whole answer.
    pub answer_ms: Vec<f64>,
}

/// The reference's figures over the problems.
#[derive(Debug, Clone, Default)]
pub struct Offline {
    /// Problems answered right.
    pub right: usize,
    /// Tokens generated.
    pub tokens: u64,
    /// Samples started.
    pub samples: u64,
    /// Each problem's answer, in the set's order (`""`: none).
    pub answers: Vec<String>,
}

/// The reference's figures of one pick over the set.
pub fn offline(set: &TraceSet, pick: &Pick, s: &Settings) -> Offline {
    let mut o = Offline::default();
    for p in &set.problems {
        let out = pick.reference(p, s);
        o.right += usize::from(p.is_right(&out.answer));
        o.tokens += out.tokens;
        o.samples += out.samples;
        o.answers.push(out.answer);
    }
    o
}

/// The plain vote of the first k samples, k = 1..=max: (k, accuracy, tokens), every sample
/// to its end, ties to the answer seen first ([`reference::plain_vote`]).
pub fn vote_curve(set: &TraceSet, max: usize) -> Vec<(usize, f64, u64)> {
    (1..=max)
        .map(|k| {
            let mut right = 0;
            let mut tokens = 0;
            for p in &set.problems {
                let o = reference::plain_vote(p, k);
                right += usize::from(p.is_right(&o.answer));
                tokens += o.tokens;
            }
            (k, right as f64 / set.problems.len().max(1) as f64, tokens)
        })
        .collect()
}
