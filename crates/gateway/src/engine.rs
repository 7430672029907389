//! One client request, run: the upstream requests that make its samples (native `n` or one
//! request per sample, spread over the model's upstreams), opened before any byte is answered;
//! the pick among the samples while they stream; and the output choices, renumbered `0..n`.
//!
//! Every sample is a choice of one [`Completions`] made on demand
//! ([`CompletionsBuilder::samples`](choicewise_core::CompletionsBuilder::samples)): the
//! library numbers, cancels, accounts and closes them; this module decides which become the
//! client's choices.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use choicewise_core::{ChoiceOutput, Completions, Selection, Source, Usage, UsageSource};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::config::NMode;
use crate::error::ApiError;
use crate::metrics::{Metrics, Outcome, SampleEnd, UpstreamTokens};
use crate::open::{Opener, TryRecord, UpstreamRoute, request_body};
use crate::pace::{BoxError, Pace, paced};
use crate::request::{ChatRequest, Select};

/// One upstream request of a run.
#[derive(Debug, Clone)]
struct Planned {
    /// The upstream it is first tried at.
    upstream: usize,
    /// Its choices: these samples, in order.
    samples: Vec<u32>,
}

/// The requests that make the samples: each sample goes to the next upstream by smooth
/// weighted round robin (with equal weights, sample `i` to upstream `i mod k`); a native
/// upstream gets one request with its samples' count as `n`, any other (or every upstream
/// when samples start one at a time: hedged or windowed) one request per sample.
fn plan(upstreams: &[UpstreamRoute], req: &ChatRequest) -> Vec<Planned> {
    let one_by_one = matches!(
        req.select,
        Select::FirstToken {
            hedge_after: Some(_)
        } | Select::Vote {
            window: Some(_),
            ..
        } | Select::Vote {
            confidence: Some(_),
            ..
        }
    );
    // Smooth weighted round robin (nginx's): each turn every upstream gains its weight, the
    // one with the most is chosen and loses the total.
    let total: i64 = upstreams.iter().map(|u| i64::from(u.weight)).sum();
    let mut current = vec![0i64; upstreams.len()];
    let mut to = Vec::with_capacity(req.samples as usize);
    for _ in 0..req.samples {
        for (c, u) in current.iter_mut().zip(upstreams) {
            *c += i64::from(u.weight);
        }
        let (j, _) = (current.iter().enumerate())
            .max_by_key(|(j, c)| (**c, std::cmp::Reverse(*j)))
            .unwrap_or((0, &0));
        current[j] -= total;
        to.push(j);
    }
    let mut planned = Vec::new();
    if one_by_one {
        for (i, j) in to.iter().enumerate() {
            planned.push(Planned {
                upstream: *j,
                samples: vec![i as u32],
            });
        }
    } else {
        for (j, u) in upstreams.iter().enumerate() {
            let mine: Vec<u32> = (0..req.samples).filter(|i| to[*i as usize] == j).collect();
            if mine.is_empty() {
                continue;
            }
            match u.n_mode {
                NMode::Native => planned.push(Planned {
                    upstream: j,
                    samples: mine,
                }),
                NMode::FanOut => planned.extend(mine.into_iter().map(|i| Planned {
                    upstream: j,
                    samples: vec![i],
                })),
            }
        }
    }
    planned
}

/// A request's samples, streaming.
pub(crate) struct Run {
    pub completions: Completions,
    /// Per library choice index, its sample number.
    sample_of: Vec<u32>,
    /// Per sample, its library choice index.
    index_of: HashMap<u32, u32>,
    /// Per upstream request, its number of samples.
    sizes: Vec<usize>,
    /// Per upstream request, the label of the upstream that answered it.
    labels: Arc<Mutex<Vec<Arc<str>>>>,
    /// Every try of the run.
    pub tries: Arc<Mutex<Vec<TryRecord>>>,
    /// Every sample's tokens, counted once when first asked for.
    accounting: tokio::sync::OnceCell<Accounting>,
    pub samples: u32,
    /// How far its upstreams may read ahead of its client (back-pressure).
    pub pace: Arc<Pace>,
}

impl Run {
    /// Plans the request's samples, opens the first ones (all of them, or the first one when
    /// hedged, or the first window), and fails as the client should see it if any of those
    /// fails before its stream begins.
    pub async fn start(opener: Opener, req: &ChatRequest) -> Result<Run, ApiError> {
        let upstreams = &opener.model.routes;
        let planned = plan(upstreams, req);
        let pace = Arc::new(Pace::default());
        let first = match req.select {
            Select::FirstToken {
                hedge_after: Some(_),
            } => 1,
            // DeepConf: the warmup first; the pick starts the rest while it is undecided.
            Select::Vote {
                confidence: Some(c),
                ..
            } => c.warmup.min(planned.len()),
            Select::Vote {
                window: Some(w), ..
            } => w.min(planned.len()),
            _ => planned.len(),
        };
        // Hedged, nothing is opened here: the first sample opens in the background like the
        // hedges after it, so that a first upstream that holds even its status line cannot
        // hold the hedge back.
        let hedged = matches!(
            req.select,
            Select::FirstToken {
                hedge_after: Some(_)
            }
        );
        let eager = if hedged { 0 } else { first };
        let opened = futures::future::join_all(
            (planned[..eager].iter()).map(|p| opener.open(p.upstream, &p.samples)),
        )
        .await;
        // Each planned request's upstream label, once it answered (the planned one until).
        let labels: Arc<Mutex<Vec<Arc<str>>>> = Arc::new(Mutex::new(
            (planned.iter())
                .map(|p| upstreams[p.upstream].label.clone())
                .collect(),
        ));
        let mut sources: Vec<Option<Source>> = Vec::new();
        for (r, (p, opened)) in planned.iter().zip(opened).enumerate() {
            let opened = opened?;
            lock(&labels)[r] = opened.route.label.clone();
            let reads = cuts(opened.reads, &opener, p.samples[0], &opened.route.label);
            sources.push(Some(
                Source::sse(paced(
                    counted(reads, &opener.metrics),
                    pace.clone(),
                    opened.route.idle_timeout,
                ))
                .n(p.samples.len() as u32)
                .request(opened.body),
            ));
        }
        // The library numbers each request's choices as a block, in the order started.
        let mut sample_of = Vec::new();
        let mut sizes = Vec::new();
        for p in &planned {
            sizes.push(p.samples.len());
            sample_of.extend(p.samples.iter().copied());
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
        let completions = Completions::builder().samples(planned.len(), move |r| {
            if let Some(source) = lock(&sources).get_mut(r).and_then(Option::take) {
                return source;
            }
            // Started after the answer began: when every try fails, its choices' error.
            let p = planned[r].clone();
            let route = &opener.model.routes[p.upstream];
            let request = request_body(route, &opener.body, p.samples.len(), opener.logprobs).ok();
            let (opener, pace, labels) = (opener.clone(), paces.clone(), later_labels.clone());
            let n = p.samples.len() as u32;
            let source = Source::open(async move {
                let opened = opener
                    .open(p.upstream, &p.samples)
                    .await
                    .map_err(|e| BoxError::from(e.message))?;
                lock(&labels)[r] = opened.route.label.clone();
                let idle = opened.route.idle_timeout;
                let reads = cuts(opened.reads, &opener, p.samples[0], &opened.route.label);
                Ok::<_, BoxError>(Source::sse(paced(
                    counted(reads, &opener.metrics),
                    pace,
                    idle,
                )))
            })
            .n(n);
            match request {
                Some(request) => source.request(request),
                None => source,
            }
        });
        completions.start_more(first);
        Ok(Run {
            completions,
            sample_of,
            index_of,
            sizes,
            labels,
            tries,
            accounting: tokio::sync::OnceCell::new(),
            samples: req.samples,
            pace,
        })
    }

    /// Every try so far, in order.
    pub fn tries(&self) -> Vec<TryRecord> {
        lock(&self.tries).clone()
    }

    /// The `tries` of the final `choicewise` object.
    pub fn tries_json(&self) -> Value {
        let tries: Vec<Value> = (self.tries().iter())
            .map(|t| json!({"sample": t.sample, "upstream": &*t.upstream, "outcome": t.outcome.as_str()}))
            .collect();
        Value::Array(tries)
    }

    /// The final `choicewise` object of a request without the extension: its `tries`, when
    /// some try failed.
    pub fn tries_summary(&self) -> Option<Value> {
        let retried = (self.tries().iter()).any(|t| t.outcome != crate::resilience::Outcome::Ok);
        retried.then(|| json!({"tries": self.tries_json()}))
    }

    pub fn index_of(&self, sample: u32) -> Option<u32> {
        self.index_of.get(&sample).copied()
    }

    pub fn sample_of(&self, index: u32) -> Option<u32> {
        self.sample_of.get(index as usize).copied()
    }

    /// Picks the output samples as `select` says, waiting as long as the pick needs (a
    /// first-token pick until the first tokens, a vote or a first-finished pick until the
    /// decision); `None` if nothing could be picked. The samples not picked are cancelled.
    pub async fn pick(&mut self, req: &ChatRequest) -> Picked {
        match &req.select {
            Select::All => Picked::samples((0..req.n).collect(), "all"),
            // Core's first-* picks: decided at the n-th sample to produce (hedged: one more
            // sample every `hedge_after` while none has) or to finish well; the rest cancelled.
            Select::FirstToken { hedge_after } => {
                let mut pick = self.completions.first_token().take(req.n as usize);
                if let Some(after) = hedge_after {
                    pick = pick.hedge_after(*after);
                }
                let selection = pick.await;
                self.first_picked(&selection, "first_token")
            }
            Select::FirstFinished => {
                let selection = self.completions.first_finished().take(req.n as usize).await;
                self.first_picked(&selection, "first_finished")
            }
            Select::Vote {
                key,
                window,
                confidence,
            } => {
                let key = key.clone();
                let mut pick = self.completions.vote(move |o| key.of(o));
                if let Some(c) = confidence {
                    pick = pick.confidence(*c);
                }
                let selection = match window {
                    Some(w) => pick.window(*w).await,
                    None => pick.await,
                };
                let mut samples: Vec<u32> = (selection.selected.iter())
                    .filter_map(|i| self.sample_of(*i))
                    .collect();
                samples.sort_unstable();
                samples.truncate(req.n as usize);
                Picked {
                    samples,
                    decision: "vote",
                    reason: selection.reason.clone(),
                    vote: selection.vote.as_ref().map(|t| json!(t)),
                    confidence: selection.confidence.as_ref().map(|c| json!(c)),
                }
            }
        }
    }

    /// What a first-* pick chose, as samples in the order they qualified (the first to
    /// produce is output choice 0).
    fn first_picked(&self, selection: &Selection, decision: &'static str) -> Picked {
        let samples: Vec<u32> = (selection.selected.iter())
            .filter_map(|i| self.sample_of(*i))
            .collect();
        Picked {
            reason: samples.is_empty().then(|| match decision {
                "first_token" => "no sample produced content or a tool call".to_string(),
                _ => "no sample finished with stop or tool_calls".to_string(),
            }),
            samples,
            decision,
            vote: None,
            confidence: None,
        }
    }

    /// Every started sample's tokens, counted once: the total (reported where the upstreams
    /// reported, estimated elsewhere: a cancelled sample's is an estimate) and each sample's
    /// part. A request's prompt is billed to its first sample. Where an upstream reported one
    /// total for several choices, its completion tokens are shared among them in proportion
    /// to their tiktoken counts, so that the parts always add up to what the upstream bills
    /// (such a part is `estimated`).
    async fn accounting(&self) -> &Accounting {
        self.accounting.get_or_init(|| self.count()).await
    }

    async fn count(&self) -> Accounting {
        let usage: Usage = self.completions.usage().await;
        let whole = match self.completions.collect().await {
            Ok(c) => c,
            Err(incomplete) => incomplete.partial,
        };
        let choices = whole.choices.clone();
        let counted: BTreeMap<u32, u64> = tokio::task::spawn_blocking(move || {
            Usage::estimate(None, None, &choices)
                .estimate
                .map(|e| e.choices)
                .unwrap_or_default()
        })
        .await
        .unwrap_or_default();
        let by_index: HashMap<u32, &ChoiceOutput> =
            whole.choices.iter().map(|c| (c.index, c)).collect();
        let mut parts = Vec::new();
        let mut first = 0u32;
        for (r, size) in self.sizes.iter().enumerate() {
            let block: Vec<u32> = (first..first + *size as u32)
                .filter(|i| by_index.contains_key(i))
                .collect();
            first += *size as u32;
            let upstream = match usage.upstreams.is_empty() {
                true => Some(&usage),
                false => usage.upstreams.get(r),
            };
            let Some(upstream) = upstream else { continue };
            let own = |i: &u32| {
                by_index[i]
                    .usage
                    .filter(|u| u.source == UsageSource::Reported)
            };
            // The upstream's total not already counted choice by choice, shared out.
            let shared = match upstream.source {
                UsageSource::Reported => {
                    let known: u64 = block
                        .iter()
                        .filter_map(own)
                        .map(|u| u.completion_tokens)
                        .sum();
                    let rest: Vec<u32> =
                        block.iter().copied().filter(|i| own(i).is_none()).collect();
                    let weights: Vec<u64> = rest
                        .iter()
                        .map(|i| counted.get(i).copied().unwrap_or(0))
                        .collect();
                    rest.into_iter()
                        .zip(share(
                            upstream.completion_tokens.saturating_sub(known),
                            &weights,
                        ))
                        .collect()
                }
                _ => HashMap::new(),
            };
            for (k, i) in block.iter().enumerate() {
                let (completion, estimated) = match (own(i), shared.get(i)) {
                    (Some(u), _) => (u.completion_tokens, false),
                    (None, Some(part)) => (*part, true),
                    (None, None) => (
                        by_index[i].usage.map_or_else(
                            || counted.get(i).copied().unwrap_or(0),
                            |u| u.completion_tokens,
                        ),
                        true,
                    ),
                };
                parts.push(Part {
                    index: *i,
                    sample: self.sample_of[*i as usize],
                    prompt: if k == 0 { upstream.prompt_tokens } else { 0 },
                    completion,
                    estimated,
                });
            }
        }
        Accounting { usage, parts }
    }

    /// The `usage` object of the answer: the totals and each sample's part (`index`: its
    /// output choice, if it is one of `outputs`).
    pub async fn usage(&self, outputs: &[u32]) -> Value {
        let Accounting { usage, parts } = self.accounting().await;
        let per_choice: Vec<Value> = parts
            .iter()
            .map(|p| {
                json!({
                    "index": outputs.iter().position(|s| *s == p.sample),
                    "sample": p.sample,
                    "prompt_tokens": p.prompt,
                    "completion_tokens": p.completion,
                    "estimated": p.estimated,
                })
            })
            .collect();
        json!({
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "choicewise": {
                "per_choice": per_choice,
                "estimated": usage.source == UsageSource::Estimated,
            },
        })
    }

    /// What the request came to, for the metrics and the span: how each sample ended and what
    /// it said, the request's and each upstream request's tokens, and the completion tokens of
    /// samples cancelled or not selected.
    /// `outputs` is `None` when every sample is an output (no selection).
    pub async fn outcome(&self, outputs: Option<&[u32]>) -> Outcome {
        let mut whole = match self.completions.collect().await {
            Ok(c) => c,
            Err(incomplete) => incomplete.partial,
        };
        let samples: Vec<SampleEnd> = (whole.choices.iter_mut())
            .map(|c| SampleEnd {
                sample: self.sample_of(c.index),
                finish: match (c.cancelled, &c.finish_reason) {
                    (true, _) => "cancelled".to_string(),
                    // Failed, or ended without a reason.
                    (false, None) => "error".to_string(),
                    (false, Some(reason)) => reason.clone(),
                },
                // Moved: what follows needs no message.
                message: std::mem::take(&mut c.message),
            })
            .collect();
        let unselected = |c: &&ChoiceOutput| {
            !c.cancelled
                && outputs.is_some_and(|o| {
                    self.sample_of(c.index)
                        .is_some_and(|sample| !o.contains(&sample))
                })
        };
        let mut outcome = Outcome {
            samples,
            response_model: Some(whole.model.clone()).filter(|m| !m.is_empty()),
            ..Outcome::default()
        };
        // Per-sample parts need every choice counted: only when some were not output.
        let wasted = whole.choices.iter().any(|c| c.cancelled)
            || whole.choices.iter().any(|c| unselected(&c));
        let (usage, parts) = match wasted {
            true => {
                let Accounting { usage, parts } = self.accounting().await;
                (usage.clone(), parts.as_slice())
            }
            false => (self.completions.usage().await, &[][..]),
        };
        outcome.prompt_tokens = usage.prompt_tokens;
        outcome.completion_tokens = usage.completion_tokens;
        // As the answer's `usage.choicewise.estimated` says.
        outcome.estimated = usage.source == UsageSource::Estimated;
        let by_index: HashMap<u32, &ChoiceOutput> =
            whole.choices.iter().map(|c| (c.index, c)).collect();
        for part in parts {
            let Some(choice) = by_index.get(&part.index) else {
                continue;
            };
            if choice.cancelled {
                outcome.cancelled_tokens += part.completion;
            } else if unselected(choice) {
                outcome.unselected_tokens += part.completion;
            }
        }
        let per_request: Vec<&Usage> = match usage.upstreams.is_empty() {
            true => vec![&usage],
            false => usage.upstreams.iter().collect(),
        };
        for (r, u) in per_request.into_iter().enumerate() {
            let Some(label) = lock(&self.labels).get(r).cloned() else {
                continue;
            };
            outcome.upstreams.push(UpstreamTokens {
                upstream: label.clone(),
                prompt: u.prompt_tokens,
                completion: u.completion_tokens,
                estimated: u.source != UsageSource::Reported,
            });
        }
        outcome
    }

    /// The final `choicewise` object of a pick: the samples asked for, those selected and
    /// cancelled (sample numbers, in start order), how it was decided, and how many started.
    pub async fn summary(&self, picked: &Picked) -> Value {
        let whole = match self.completions.collect().await {
            Ok(c) => c,
            Err(incomplete) => incomplete.partial,
        };
        let mut cancelled: Vec<u32> = (whole.choices.iter())
            .filter(|c| c.cancelled)
            .filter_map(|c| self.sample_of(c.index))
            .collect();
        cancelled.sort_unstable();
        let mut summary = Map::new();
        summary.insert("samples".into(), json!(self.samples));
        summary.insert("selected".into(), json!(picked.samples));
        summary.insert("cancelled".into(), json!(cancelled));
        summary.insert("decision".into(), json!(picked.decision));
        summary.insert("started".into(), json!(self.started_samples()));
        summary.insert("tries".into(), self.tries_json());
        if let Some(vote) = &picked.vote {
            summary.insert("vote".into(), vote.clone());
        }
        if let Some(confidence) = &picked.confidence {
            summary.insert("confidence".into(), confidence.clone());
        }
        if let Some(reason) = &picked.reason {
            summary.insert("reason".into(), json!(reason));
        }
        Value::Object(summary)
    }

    /// Samples whose request started.
    fn started_samples(&self) -> usize {
        self.sizes[..self.completions.started().min(self.sizes.len())]
            .iter()
            .sum()
    }
}

/// A started sample's tokens.
#[derive(Debug, Clone)]
struct Part {
    /// Its library choice index.
    index: u32,
    sample: u32,
    prompt: u64,
    completion: u64,
    estimated: bool,
}

/// Every started sample's tokens ([`Run::accounting`]).
#[derive(Debug)]
struct Accounting {
    usage: Usage,
    parts: Vec<Part>,
}

/// An upstream's reads, a failure after the first byte recorded as a `cut` try.
fn cuts(
    reads: futures::stream::BoxStream<
        'static,
        Result<bytes::Bytes, choicewise_client::ClientError>,
    >,
    opener: &Opener,
    sample: u32,
    label: &Arc<str>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, choicewise_client::ClientError>> + Send + 'static
{
    let (opener, label) = (opener.clone(), label.clone());
    let mut cut = false;
    reads.inspect(move |read| {
        if read.is_err() && !std::mem::replace(&mut cut, true) {
            opener.record(sample, &label, crate::resilience::Outcome::Cut);
        }
    })
}

/// A mutex's value, even after a panic of another holder.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts an upstream response in the open-connections gauge for as long as it is read.
fn counted<S, T>(
    reads: S,
    metrics: &Arc<Metrics>,
) -> impl futures::Stream<Item = T> + Send + 'static
where
    S: futures::Stream<Item = T> + Send + 'static,
{
    let open = metrics.open_upstream();
    reads.map(move |read| {
        let _open = &open;
        read
    })
}

/// What a pick chose.
#[derive(Debug, Clone)]
pub(crate) struct Picked {
    /// The output choices' samples, in output order.
    pub samples: Vec<u32>,
    pub decision: &'static str,
    /// Why nothing (or too little) was picked.
    pub reason: Option<String>,
    /// The vote's tally.
    pub vote: Option<Value>,
    /// A confidence-guided vote's report (threshold, warmup, stopped, weights; or why it was
    /// unavailable).
    pub confidence: Option<Value>,
}

impl Picked {
    fn samples(samples: Vec<u32>, decision: &'static str) -> Self {
        Picked {
            samples,
            decision,
            reason: None,
            vote: None,
            confidence: None,
        }
    }
}

/// Shared by a run's output streams: the model's name and the answer's id and time.
#[derive(Debug, Clone)]
pub(crate) struct Envelope {
    pub id: Arc<str>,
    pub created: u64,
    pub model: Arc<str>,
}

impl Envelope {
    pub fn new(model: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Envelope {
            id: Arc::from(
                format!("chatcmpl-cw{:x}{n:x}", nanos.as_nanos() & 0xffff_ffff_ffff).as_str(),
            ),
            created: nanos.as_secs(),
            model: Arc::from(model),
        }
    }

    /// A chunk's JSON up to the opening of its `choices` array, for writing chunks without
    /// building each one's envelope (`{"id":…,"object":…,"created":…,"model":…,"choices":[`).
    pub fn prefix(&self) -> String {
        format!(
            "{{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"choices\":[",
            Value::from(&*self.id),
            self.created,
            Value::from(&*self.model),
        )
    }

    /// A chunk of these choices' elements.
    pub fn chunk(&self, choices: Vec<Value>) -> Value {
        json!({
            "id": &*self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": &*self.model,
            "choices": choices,
        })
    }
}

/// `total` shared in proportion to `weights` (largest remainder, so the parts add up to
/// `total`); equal parts when every weight is zero.
fn share(total: u64, weights: &[u64]) -> Vec<u64> {
    if weights.is_empty() {
        return Vec::new();
    }
    let sum: u64 = weights.iter().sum();
    let weights: Vec<u128> = match sum {
        0 => vec![1; weights.len()],
        _ => weights.iter().map(|w| u128::from(*w)).collect(),
    };
    let sum: u128 = weights.iter().sum();
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|w| {
            let scaled = u128::from(total) * w;
            ((scaled / sum) as u64, scaled % sum)
        })
        .collect();
    let mut parts: Vec<u64> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|a, b| exact[*b].1.cmp(&exact[*a].1).then(a.cmp(b)));
    for i in order.into_iter().cycle() {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_add_up_to_the_total() {
        assert_eq!(share(10, &[1, 1]), [5, 5]);
        assert_eq!(share(10, &[1, 2]), [3, 7]);
        assert_eq!(share(7, &[0, 0, 0]), [3, 2, 2]);
        assert_eq!(share(0, &[5, 9]), [0, 0]);
        assert_eq!(share(126, &[40, 60, 20]).iter().sum::<u64>(), 126);
        assert!(share(3, &[]).is_empty());
    }
}
