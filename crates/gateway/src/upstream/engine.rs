//! One client request, run: the upstream requests that make its samples (native `n` or one
//! request per sample, spread over the model's upstreams), opened before any byte is answered;
//! the pick among the samples while they stream; and the output choices, renumbered `0..n`.
//!
//! Every sample is a choice of one [`Completions`] made on demand
//! ([`CompletionsBuilder::samples`](choicewise_core::CompletionsBuilder::samples)): the
//! library numbers, cancels, accounts and closes them; this module decides which become the
//! client's choices.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use choicewise_core::confidence::ConfidenceReport;
use choicewise_core::plan::{Opening, Plan, PlanUpstream};
use choicewise_core::select::Tally;
use choicewise_core::{Completions, LogprobsKept, PickRule, Policy, Selection, Source};
use serde::Serialize;
use serde_json::Value;

use crate::config::NMode;
use crate::error::ApiError;
use crate::metrics::Outcome;
use crate::request::ChatRequest;
use crate::upstream::open::{Opened, Opener, TryRecord, UpstreamRoute, accounting, counted};
use crate::upstream::pace::{BoxError, Pace, bounded, paced};

mod accounting;

pub(crate) use accounting::{AnswerUsage, ChoiceTokens, UsageParts, share};
use accounting::{Asked, Ledger};

/// The plan of a request's samples over its model's upstreams, opened as its policy says
/// ([`Policy::opening`]: one at a time when hedged, window by window, or after a
/// confidence-guided vote's warmup).
fn plan(upstreams: &[UpstreamRoute], req: &ChatRequest) -> Plan {
    let upstreams: Vec<PlanUpstream> = (upstreams.iter())
        .map(|u| (PlanUpstream::new(u.weight).native_n(u.n_mode == NMode::Native)).max_n(u.max_n))
        .collect();
    req.policy.plan(&upstreams)
}

/// The upstream a request of one sample is first asked of, as its plan says.
pub(crate) fn first_upstream(upstreams: &[UpstreamRoute], req: &ChatRequest) -> usize {
    (plan(upstreams, req).requests().first()).map_or(0, |p| p.upstream())
}

/// Whether a request's plan asks all its samples of one upstream in one request (one
/// sample, or a native `n` that carries them all).
pub(crate) fn one_request(upstreams: &[UpstreamRoute], req: &ChatRequest) -> bool {
    let plan = plan(upstreams, req);
    match plan.requests() {
        [only] => only.samples().len() == req.samples as usize,
        _ => false,
    }
}

/// The upstream a request's `j`-th replacement sample is first asked of: the planned
/// requests' upstreams in turn (its tries then go on as every try does).
fn replacement_upstream(planned: &[choicewise_core::plan::PlannedRequest], j: usize) -> usize {
    planned[j % planned.len()].upstream()
}

/// The tokens of a sample's text, as the limits' bound counts them (the default encoding).
fn tokens(text: &str) -> u64 {
    choicewise_usage::count_text(choicewise_usage::DEFAULT_ENCODING, text)
}

/// Why a replacement sample was not started: the words a pick's failure counts it by.
const BUDGET_REFUSED: &str = "the retry budget is spent";

/// A request's samples, streaming.
pub(crate) struct Run {
    pub completions: Completions,
    /// Per sample, its library choice index.
    index_of: HashMap<u32, u32>,
    /// Every try of the run.
    pub tries: Arc<Mutex<Vec<TryRecord>>>,
    /// Its accounting: every sample's tokens and end, read once when first asked for.
    ledger: Ledger,
    pub samples: u32,
    /// How far its upstreams may read ahead of its client (back-pressure).
    pub pace: Arc<Pace>,
}

impl Run {
    /// Plans the request's samples, opens the first ones (all of them, or the first one when
    /// hedged, or the first window), and fails as the client should see it if any of those
    /// fails before its stream begins.
    pub async fn start(opener: Opener, req: &ChatRequest) -> Result<Run, ApiError> {
        let prompt = opener.body.clone();
        let upstreams = &opener.model.routes;
        let plan = plan(upstreams, req);
        let planned = plan.requests().to_vec();
        let pace = Arc::new(Pace::default());
        let first = plan.opened_at_start();
        // Hedged, nothing is opened here: the first sample opens in the background like the
        // hedges after it, so that a first upstream that holds even its status line cannot
        // hold the hedge back.
        let eager = match plan.opening() {
            Opening::Hedged => 0,
            _ => first,
        };
        // Each planned request: its upstream's label once it answered (the planned one
        // until), and whether it opened.
        let labels: Arc<Mutex<Vec<Asked>>> = Arc::new(Mutex::new(
            (planned.iter())
                .map(|p| Asked::new(upstreams[p.upstream()].label.clone(), p.samples()[0]))
                .collect(),
        ));
        let opens: Vec<OpenFuture> = (planned[..eager].iter())
            .map(|p| {
                let (opener, samples) = (opener.clone(), p.samples().to_vec());
                let upstream = p.upstream();
                Box::pin(async move { opener.open(upstream, &samples).await }) as OpenFuture
            })
            .collect();
        // A pick goes on once one sample opened: the others go on opening in the
        // background, as later samples do, so that one upstream holding its status line
        // cannot hold back the samples already streaming (the first to finish is answered
        // when it finishes, a vote's ties go to the first finish on the wire, not to the
        // order the heads came in). A request that fails meanwhile fails its samples alone;
        // when every one fails, the first failure is the client's answer, in its own terms
        // (an upstream's 400 is a 400). Every sample is an output
        // without a pick (`all`): the answer waits for every head, so that a failure is
        // the client's before any of it is sent.
        let race = req.policy.rule() != PickRule::All;
        let mut sources: Vec<Option<Source>> = Vec::new();
        let openings = open_first(opens, race).await?;
        for (r, (p, opening)) in planned.iter().zip(openings).enumerate() {
            let n = p.samples().len() as u32;
            let source = match opening {
                Start::Done(opened) => {
                    let body = opened.body.clone();
                    reads_source(opened, &opener, p.samples(), &pace, &labels, r)
                        .n(n)
                        .request(body)
                }
                Start::Pending(pending) => {
                    let request = accounting(&upstreams[p.upstream()], p.samples().len());
                    let (opener, pace, labels) = (opener.clone(), pace.clone(), labels.clone());
                    let samples = p.samples().to_vec();
                    let source = Source::open(async move {
                        let opened = pending.await.map_err(|e| BoxError::from(e.message))?;
                        Ok::<_, BoxError>(reads_source(
                            opened, &opener, &samples, &pace, &labels, r,
                        ))
                    })
                    .n(n);
                    source.request(request)
                }
            };
            sources.push(Some(source));
        }
        // A sample that fails before any of it is sent (a vote or a first-finished pick has
        // exposed nothing until it decides; a first-token pick nothing of a sample it has not
        // chosen) is replaced by a new try while tries remain: one more single-sample
        // request, numbered after the planned samples (a native request that fails is
        // replaced sample by sample).
        let replacements = match req.policy.rule() {
            PickRule::All => 0,
            PickRule::FirstToken | PickRule::FirstFinished | PickRule::Vote => {
                req.samples as usize * (opener.model.retry.attempts as usize - 1)
            }
        };
        // The library numbers each request's choices as a block, in the order started; the
        // replacements' slots are reserved after the planned ones.
        let mut sample_of = Vec::new();
        let mut sizes = Vec::new();
        for p in &planned {
            sizes.push(p.samples().len());
            sample_of.extend(p.samples().iter().copied());
        }
        for j in 0..replacements {
            sizes.push(1);
            sample_of.push(req.samples + j as u32);
            let upstream = replacement_upstream(&planned, j);
            let sample = req.samples + j as u32;
            lock(&labels).push(Asked::new(upstreams[upstream].label.clone(), sample));
        }
        let index_of = sample_of
            .iter()
            .enumerate()
            .map(|(li, s)| (*s, li as u32))
            .collect();
        let sources = Mutex::new(sources);
        let paces = pace.clone();
        let tries = opener.tries.clone();
        let later_labels = labels.clone();
        let planned_samples = req.samples;
        // Log-probabilities: their text when the client asked for them, only each token's
        // confidence for a vote guided by it, else nothing (docs/reliability.md).
        let logprobs = match (req.logprobs, req.policy.confidence()) {
            (true, _) => LogprobsKept::Raw,
            (false, Some(c)) => LogprobsKept::Confidence(c.measure),
            (false, None) => LogprobsKept::Nothing,
        };
        // `max_answer_bytes` bounds each choice: one that goes on without end fails alone.
        let per_choice = (upstreams.iter().map(|u| u.max_answer_bytes)).max();
        let mut builder = Completions::builder()
            .replace_failed(replacements)
            .logprobs(logprobs)
            .max_choice_bytes(per_choice.unwrap_or(usize::MAX))
            // An answer is each choice as it was at its finish, streamed or not.
            .drop_after_finish(true)
            // Calls of the request's custom tools come back as custom calls from every API.
            .custom_tools(req.custom_tools());
        // Under a limit of tokens or dollars, a sample is held to the room it was charged
        // for: one past it is stopped there, however its upstream treats `max_tokens`.
        if let Some(room) = opener.bound {
            builder =
                builder.max_choice_tokens(choicewise_core::input::TokenBound::new(room, tokens));
        }
        let recorder = opener.clone();
        let completions = builder.samples(planned.len(), move |r| {
            if let Some(source) = lock(&sources).get_mut(r).and_then(Option::take) {
                return source;
            }
            // Started after the answer began: when every try fails, its choices' error. A
            // replacement is a retry: within the retry budget.
            let (upstream, samples): (usize, Vec<u32>) = match planned.get(r) {
                Some(p) => (p.upstream(), p.samples().to_vec()),
                None => {
                    let j = r - planned.len();
                    let sample = planned_samples + j as u32;
                    if !opener.budget.retry(std::time::Instant::now()) {
                        opener.metrics.retry_budget_exhausted();
                        let message = format!("sample {sample} not started: {BUDGET_REFUSED}");
                        let failed = async move { Err::<Source, BoxError>(message.into()) };
                        return Source::open(failed).n(1);
                    }
                    (replacement_upstream(&planned, j), vec![sample])
                }
            };
            let route = &opener.model.routes[upstream];
            let request = accounting(route, samples.len());
            let (opener, pace, labels) = (opener.clone(), paces.clone(), later_labels.clone());
            let n = samples.len() as u32;
            let source = Source::open(async move {
                let opened = opener
                    .open(upstream, &samples)
                    .await
                    .map_err(|e| BoxError::from(e.message))?;
                Ok::<_, BoxError>(reads_source(opened, &opener, &samples, &pace, &labels, r))
            })
            .n(n);
            source.request(request)
        });
        completions.start_more(first);
        Ok(Run {
            completions: completions.clone(),
            index_of,
            tries,
            ledger: Ledger {
                completions,
                sample_of,
                sizes,
                asked: labels,
                opener: recorder,
                keep_messages: false,
                read: tokio::sync::OnceCell::new(),
                prompt,
                prompt_counts: Mutex::default(),
            },
            samples: req.samples,
            pace,
        })
    }

    /// How many updates brought message data after their choice's finish (left out).
    pub fn dropped_after_finish(&self) -> usize {
        let dropped = |w: &&choicewise_core::Warning| {
            w.kind == choicewise_core::WarningKind::DataAfterFinishDropped
        };
        self.completions.warnings().iter().filter(dropped).count()
    }

    /// Every try so far, in order.
    pub fn tries(&self) -> Vec<TryRecord> {
        lock(&self.tries).clone()
    }

    /// The `tries` of the final `choicewise` object.
    pub fn try_summaries(&self) -> Vec<TrySummary> {
        (self.tries().iter())
            .map(|t| TrySummary {
                outcome: t.outcome.as_str(),
                sample: t.sample,
                upstream: t.upstream.clone(),
            })
            .collect()
    }

    /// The final `choicewise` object of a request without the extension: its `tries`, when
    /// some try failed.
    pub fn tries_summary(&self) -> Option<Summary> {
        // Its output choices have ended: a request they were cut from is a `cut` try.
        self.ledger.note_cuts_so_far();
        let retried =
            (self.tries().iter()).any(|t| t.outcome != crate::upstream::resilience::Outcome::Ok);
        retried.then(|| Summary {
            tries: self.try_summaries(),
            ..Summary::default()
        })
    }

    pub fn index_of(&self, sample: u32) -> Option<u32> {
        self.index_of.get(&sample).copied()
    }

    pub fn sample_of(&self, index: u32) -> Option<u32> {
        self.ledger.sample_of.get(index as usize).copied()
    }

    /// Keeps the samples' messages for the request's span ([`outcome`](Self::outcome)).
    pub fn keep_messages(&mut self, keep: bool) {
        self.ledger.keep_messages = keep;
    }

    /// The `usage` object of the answer: the totals and each sample's part (`index`: its
    /// output choice, if it is one of `outputs`). Once the run is over.
    pub async fn usage(&self, outputs: &[u32]) -> AnswerUsage {
        self.ledger.usage(outputs).await
    }

    /// What the request came to, for the metrics and the span (`outputs`: `None` when every
    /// sample is an output). Once the run is over; asked once (the samples' messages move
    /// into it).
    pub async fn outcome(&self, outputs: Option<&[u32]>) -> Outcome {
        self.ledger.outcome(outputs).await
    }

    /// As [`outcome`](Self::outcome), without waiting: what the run came to so far, its
    /// samples still open counted as cancelled (for a client gone mid-answer).
    pub fn outcome_now(&self, outputs: Option<&[u32]>) -> Outcome {
        self.ledger.outcome_now(outputs)
    }

    /// Picks the output samples as the request's policy says, waiting as long as the pick needs (a
    /// first-token pick until the first tokens, a vote or a first-finished pick until the
    /// decision) and at most `left` (what is left of the request's deadline, or of its
    /// pick's `deadline_ms` when that comes first: both count from the request's start);
    /// nothing picked, the reason
    /// says why, with how its samples failed. The samples not picked are cancelled.
    pub async fn pick(&mut self, req: &ChatRequest, left: std::time::Duration) -> Picked {
        let mut picked = self.pick_within(req, left).await;
        if picked.samples.is_empty()
            && let Some(failed) = self.failures().await
        {
            let reason = picked.reason.take().unwrap_or_default();
            picked.reason = Some(format!("{reason}; {failed}"));
        }
        picked
    }

    /// How the samples failed, for a pick that chose nothing: how many, how many of them
    /// were replacements the retry budget refused, and the last other failure.
    async fn failures(&self) -> Option<String> {
        // The pick has concluded: every sample is settled or being cancelled.
        let errors = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            self.completions.choice_errors(),
        )
        .await
        .ok()?;
        if errors.is_empty() {
            return None;
        }
        let refused = (errors.iter())
            .filter(|(_, e)| e.to_string().contains(BUDGET_REFUSED))
            .count();
        let mut said = format!(
            "{} of {} samples failed",
            errors.len(),
            self.started_samples()
        );
        if refused > 0 {
            said.push_str(&format!(
                ", {refused} of them replacements the retry budget refused ({BUDGET_REFUSED})"
            ));
        }
        if let Some((index, e)) = (errors.iter())
            .rev()
            .find(|(_, e)| !e.to_string().contains(BUDGET_REFUSED))
        {
            let sample = self.sample_of(*index).unwrap_or(*index);
            said.push_str(&format!("; sample {sample}: {e}"));
        }
        Some(said)
    }

    async fn pick_within(&mut self, req: &ChatRequest, left: std::time::Duration) -> Picked {
        let rule = req.policy.rule();
        if rule == PickRule::All {
            return Picked::samples((0..req.n).collect(), "all");
        }
        // Core's picks: a first-* pick decided at the n-th sample to produce (hedged: one
        // more sample every `hedge_after` while none has) or to finish well; a vote early.
        // The policy's own deadline is in `left` already: it counts from the request's
        // start, not from here (opening its samples took part of it).
        let deadline = left;
        // A vote no key wins answers with the first sample that finished well: an answer
        // some sample gave is never turned into a failure.
        let selection = (self.completions.pick(&req.policy))
            .deadline(deadline)
            .or_first_finished()
            .await;
        match rule {
            PickRule::FirstToken => {
                let none = "no sample produced content or a tool call";
                self.first_picked(&selection, "first_token", none)
            }
            PickRule::FirstFinished => {
                let none = "no sample finished with stop or tool_calls";
                self.first_picked(&selection, "first_finished", none)
            }
            // Returned above, before any selection.
            PickRule::All => Picked::samples((0..req.n).collect(), "all"),
            PickRule::Vote => {
                // The winning key's voters in the order they finished: the first to finish
                // is output choice 0.
                let mut samples: Vec<u32> = (selection.selected.iter())
                    .filter_map(|i| self.sample_of(*i))
                    .collect();
                samples.truncate(req.n as usize);
                Picked {
                    samples,
                    decision: "vote",
                    timed_out: selection.timed_out,
                    reason: selection.reason.clone(),
                    vote: selection.vote.clone(),
                    confidence: selection.confidence.as_ref().map(|c| {
                        // No sample carried log-probabilities because an upstream refused
                        // them: the answer says so in the upstream's words.
                        match (c.unavailable(), self.ledger.opener.logprobs_refused.get()) {
                            (Some(_), Some(refused)) => {
                                ConfidenceReport::unavailable_for(refused.as_str())
                            }
                            _ => c.clone(),
                        }
                    }),
                }
            }
        }
    }

    /// What a first-* pick chose, as samples in the order they qualified (the first to
    /// produce is output choice 0); `none` says why when it chose nothing.
    fn first_picked(
        &self,
        selection: &Selection,
        decision: &'static str,
        none: &'static str,
    ) -> Picked {
        let samples: Vec<u32> = (selection.selected.iter())
            .filter_map(|i| self.sample_of(*i))
            .collect();
        Picked {
            reason: samples.is_empty().then(|| match selection.timed_out {
                true => format!("{none} before the request's deadline"),
                false => none.to_string(),
            }),
            samples,
            decision,
            timed_out: selection.timed_out,
            vote: None,
            confidence: None,
        }
    }

    /// The answer's final `choicewise` object: a pick's [`summary`](Self::summary), or,
    /// without a selection, the `tries` when some try failed.
    pub async fn final_summary(&self, picked: &Picked, policy: &Policy) -> Option<Summary> {
        match policy.rule() {
            PickRule::All => self.tries_summary(),
            PickRule::FirstToken | PickRule::FirstFinished | PickRule::Vote => {
                Some(self.summary(picked).await)
            }
        }
    }

    /// The final `choicewise` object of a pick: the samples asked for, those selected and
    /// cancelled (sample numbers, in start order), how it was decided, and how many started.
    pub async fn summary(&self, picked: &Picked) -> Summary {
        // Read once the run is over: its cut tries are recorded by then.
        let cancelled = self.ledger.cancelled_samples().await;
        Summary {
            cancelled: Some(cancelled),
            confidence: picked.confidence.clone(),
            decision: Some(picked.decision),
            reason: picked.reason.clone(),
            samples: Some(self.samples),
            selected: Some(picked.samples.clone()),
            started: Some(self.started_samples()),
            tries: self.try_summaries(),
            vote: picked.vote.clone(),
        }
    }

    /// Samples whose request started.
    fn started_samples(&self) -> usize {
        let sizes = &self.ledger.sizes;
        sizes[..self.completions.started().min(sizes.len())]
            .iter()
            .sum()
    }
}

/// A mutex's value, even after a panic of another holder.
/// The most bytes an answer of `route` may send: `max_answer_bytes` for each sample it
/// carries.
pub(crate) fn max_bytes(route: &UpstreamRoute, samples: &[u32]) -> usize {
    (route.max_answer_bytes).saturating_mul(samples.len().max(1))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An answer's final `choicewise` object: a pick's summary (every field but those a pick
/// leaves out: `confidence`, `reason`, `vote`), or a request's `tries` alone. Part of the
/// extension's public contract (docs/gateway.md); its fields are written in this order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Summary {
    /// The samples that ended cancelled, in start order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cancelled: Option<Vec<u32>>,
    /// A confidence-guided vote's report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) confidence: Option<ConfidenceReport>,
    /// How the pick was decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) decision: Option<&'static str>,
    /// Why nothing (or too little) was picked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// The samples asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) samples: Option<u32>,
    /// The output choices' samples, in output order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) selected: Option<Vec<u32>>,
    /// How many samples started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) started: Option<usize>,
    /// Every try of the request's upstreams.
    pub(crate) tries: Vec<TrySummary>,
    /// The vote's tally.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vote: Option<Tally>,
}

impl Summary {
    /// `summary`, when there is one, as the `choicewise` field of `object`, an answer's
    /// object or event written as a tree (Messages, Responses). Its fields are plain data,
    /// which always serialise; `null` if one ever did not.
    pub(crate) fn ride_on(summary: Option<&Summary>, object: &mut Value) {
        if let Some(summary) = summary {
            object["choicewise"] = serde_json::to_value(summary).unwrap_or_default();
        }
    }
}

/// One try of an upstream, in an answer's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TrySummary {
    pub(crate) outcome: &'static str,
    pub(crate) sample: u32,
    pub(crate) upstream: Arc<str>,
}

/// What a pick chose.
#[derive(Debug, Clone)]
pub(crate) struct Picked {
    /// The output choices' samples, in output order.
    pub samples: Vec<u32>,
    pub decision: &'static str,
    /// The request's deadline passed before the pick was certain.
    pub timed_out: bool,
    /// Why nothing (or too little) was picked.
    pub reason: Option<String>,
    /// The vote's tally, as core decided it.
    pub vote: Option<Tally>,
    /// A confidence-guided vote's report (threshold, warmup, stopped, weights; or why it was
    /// unavailable).
    pub confidence: Option<ConfidenceReport>,
}

impl Picked {
    fn samples(samples: Vec<u32>, decision: &'static str) -> Self {
        Picked {
            samples,
            decision,
            timed_out: false,
            reason: None,
            vote: None,
            confidence: None,
        }
    }

    /// How the pick ended, as its record names it: `none` (nothing picked), `timed_out`
    /// (the deadline came first), `undecided` (picked without a decision, its `reason`
    /// says why) or `decided`.
    pub(crate) fn how_decided(&self) -> &'static str {
        match (&self.samples[..], self.timed_out, &self.reason) {
            ([], _, _) => "none",
            (_, true, _) => "timed_out",
            (_, false, Some(_)) => "undecided",
            (_, false, None) => "decided",
        }
    }
}

/// An upstream request being opened (its tries, [`Opener::open`]).
type OpenFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Opened, ApiError>> + Send>>;

/// A planned request opened at the start: opened, or (a first-token pick's others once one
/// opened) still opening.
enum Start {
    Done(Opened),
    Pending(OpenFuture),
}

/// Drives the requests opened at the start until every one opened or, with `race`, until
/// the first one did (the rest then go on opening where their samples are read). Without
/// `race` a failure is the client's answer, the first in plan order once every open ended (as
/// each sample's tries are bounded, a failing one ends anyway); with `race`, a request that
/// failed before the first opened fails its samples alone, and only when every one failed is
/// the first failure the client's answer.
async fn open_first(opens: Vec<OpenFuture>, race: bool) -> Result<Vec<Start>, ApiError> {
    if !race {
        let opened = futures::future::join_all(opens).await;
        return opened.into_iter().map(|o| o.map(Start::Done)).collect();
    }
    let mut starts: Vec<Option<Start>> = (0..opens.len()).map(|_| None).collect();
    let (mut indexes, mut pending): (Vec<usize>, Vec<OpenFuture>) =
        opens.into_iter().enumerate().unzip();
    // Until one opened: a sample that failed meanwhile fails alone (its source ends with
    // its error, and it may be replaced) while another may still open; when every one
    // failed, the first failure met is the client's answer.
    let mut failed: Vec<(usize, ApiError)> = Vec::new();
    while !pending.is_empty() {
        let (opened, i, rest) = futures::future::select_all(pending).await;
        // `select_all` swap-removes the one that finished: the indexes follow.
        let r = indexes.swap_remove(i);
        pending = rest;
        match opened {
            Ok(opened) => {
                starts[r] = Some(Start::Done(opened));
                break;
            }
            Err(e) => failed.push((r, e)),
        }
    }
    if starts.iter().all(Option::is_none) && !failed.is_empty() {
        return Err(failed.swap_remove(0).1);
    }
    for (r, e) in failed {
        starts[r] = Some(Start::Pending(Box::pin(async move { Err(e) })));
    }
    for (r, f) in indexes.into_iter().zip(pending) {
        starts[r] = Some(Start::Pending(f));
    }
    Ok((starts.into_iter())
        .map(|s| s.expect("every request is opened or still opening"))
        .collect())
}

/// An opened request's reads as a sample's source: cut at a client's sample's end, counted,
/// bounded (`max_answer_bytes`), paced by the client; its upstream's label recorded as
/// planned request `r`'s.
fn reads_source(
    opened: Opened,
    opener: &Opener,
    samples: &[u32],
    pace: &Arc<Pace>,
    labels: &Mutex<Vec<Asked>>,
    r: usize,
) -> Source {
    if let Some(asked) = lock(labels).get_mut(r) {
        asked.opened(opened.route.label.clone());
    }
    if let Some(max_tokens) = opened.limit_set {
        lock(&opener.limits_set).extend(samples.iter().map(|&sample| {
            crate::upstream::open::LimitSet {
                sample,
                upstream: opened.route.label.clone(),
                max_tokens,
            }
        }));
    }
    let idle = opened.route.idle_timeout;
    let max = max_bytes(&opened.route, samples);
    let reads = opened.reads;
    Source::sse(paced(
        bounded(counted(reads, &opener.metrics), max),
        pace.clone(),
        idle,
    ))
}
