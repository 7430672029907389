//! A run's accounting: every started sample's tokens counted once (reported where the
//! upstreams reported, estimated elsewhere, an upstream's shared total split among its
//! choices so that the parts add up to what it bills), the answer's `usage` object, and what
//! the request came to for the metrics and the span.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

use std::sync::{Arc, Mutex};

use choicewise_core::counting::counted;
use choicewise_core::{ChoiceUsage, Completions, Logprobs, Message, Usage, UsageSource};

use super::lock;
use crate::metrics::{Outcome, SampleEnd, SampleEnded, UpstreamTokens};
use crate::upstream::open::Opener;
use crate::upstream::resilience;

/// One upstream request of a run, as its accounting knows it: the upstream that answered it
/// (the planned one until one did), its first sample (its tries'), and how far it got.
#[derive(Debug, Clone)]
pub(super) struct Asked {
    label: Arc<str>,
    sample: u32,
    reached: Reached,
}

/// How far an upstream request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reached {
    /// Not opened (yet): its tries, if any, failed before a first byte.
    Planned,
    /// A try of it answered: its first byte came.
    Opened,
    /// It opened and then left a choice unfinished: its `cut` try is recorded.
    Cut,
}

impl Asked {
    /// Request of `sample` (its first), planned on the upstream `label`.
    pub(super) fn new(label: Arc<str>, sample: u32) -> Self {
        Asked {
            label,
            sample,
            reached: Reached::Planned,
        }
    }

    /// A try of it answered, on the upstream `label`.
    pub(super) fn opened(&mut self, label: Arc<str>) {
        self.label = label;
        self.reached = Reached::Opened;
    }
}

/// A run's accounting: what it needs to know of the run (how its samples are numbered, its
/// upstream requests' sizes and upstreams) and what it read of it, once.
pub(super) struct Ledger {
    pub(super) completions: Completions,
    /// Per library choice index, its sample number.
    pub(super) sample_of: Vec<u32>,
    /// Per upstream request, its number of samples.
    pub(super) sizes: Vec<usize>,
    /// Per upstream request, the upstream that answered it and how far it got.
    pub(super) asked: Arc<Mutex<Vec<Asked>>>,
    /// What records the run's tries (a `cut` one, [`Ledger::note_cuts`]).
    pub(super) opener: Opener,
    /// The samples' messages are kept for the request's span ([`Ledger::outcome`]).
    pub(super) keep_messages: bool,
    /// What the run came to, read once it is over.
    pub(super) read: tokio::sync::OnceCell<Accounting>,
    /// The request's Chat Completions fields, for an estimate of its prompt's tokens.
    pub(super) prompt: Arc<crate::request::Fields>,
    /// The prompt's tokens by encoding, once counted.
    pub(super) prompt_counts: Mutex<HashMap<&'static str, Result<u64, String>>>,
}

/// The largest prompt (its fields' bytes) counted at once, on the thread that records a
/// request whose client went away.
const PROMPT_COUNTED_NOW_BYTES: usize = 64 * 1024;

/// The parts of `usage` (each upstream request's, or the whole) estimated by the library.
fn estimated_parts(usage: &mut Usage) -> Vec<&mut Usage> {
    let parts: Vec<&mut Usage> = match usage.upstreams.is_empty() {
        true => vec![usage],
        false => usage.upstreams.iter_mut().collect(),
    };
    (parts.into_iter())
        .filter(|p| p.source == UsageSource::Estimated && p.estimate.is_some())
        .collect()
}

/// The encodings the estimated parts of `usage` count their prompts with.
fn prompt_encodings(usage: &mut Usage) -> Vec<choicewise_usage::EncodingName> {
    let mut encodings = Vec::new();
    for part in estimated_parts(usage) {
        let model = (part.estimate.as_ref()).and_then(|e| e.model.as_deref());
        let encoding = choicewise_usage::encoding_for_model(model.unwrap_or_default()).name;
        if !encodings.contains(&encoding) {
            encodings.push(encoding);
        }
    }
    encodings
}

/// The prompt's tokens, from the request's fields.
fn count_prompt(
    fields: &crate::request::Fields,
    encoding: choicewise_usage::EncodingName,
) -> Result<u64, String> {
    let texts = fields.iter().map(|(k, v)| (k.as_str(), &v[..]));
    (choicewise_usage::count_prompt_fields(encoding, texts))
        .map(|count| count.total)
        .map_err(|e| e.to_string())
}

/// Each estimated part of `usage` given its prompt's tokens, by its encoding, and the totals
/// summed again.
fn apply_prompts(usage: &mut Usage, counts: &HashMap<&'static str, Result<u64, String>>) {
    let fan_out = !usage.upstreams.is_empty();
    for part in estimated_parts(usage) {
        let Some(estimate) = part.estimate.as_mut() else {
            continue;
        };
        let model = estimate.model.as_deref().unwrap_or_default();
        let encoding = choicewise_usage::encoding_for_model(model).name;
        let (prompt, error) = match counts.get(encoding.as_str()) {
            Some(Ok(tokens)) => (*tokens, None),
            Some(Err(e)) => (0, Some(e.clone())),
            None => continue,
        };
        estimate.prompt_counted = error.is_none();
        estimate.prompt_error = error;
        part.prompt_tokens = prompt;
        part.total_tokens = prompt.saturating_add(part.completion_tokens);
    }
    if fan_out {
        usage.prompt_tokens =
            (usage.upstreams.iter().map(|u| u.prompt_tokens)).fold(0, u64::saturating_add);
        usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
    }
}

impl Ledger {
    fn sample_of(&self, index: u32) -> Option<u32> {
        self.sample_of.get(index as usize).copied()
    }

    /// Every started sample's tokens and end, from one reading of the run once it is over
    /// (see [`Accounting`]). Core's usage gives the totals and each choice's part where it has
    /// one (a choice's own reported figure, or its estimate); tiktoken counts only where an
    /// upstream reported one total for several choices, to share it among them in proportion
    /// to their texts, so that the parts always add up to what the upstream bills (such a
    /// part is `estimated`). A request's prompt is billed to its first sample.
    async fn accounting(&self) -> &Accounting {
        self.read.get_or_init(|| self.count()).await
    }

    /// The run's usage: the library's, where a fan-out request that reported none (a sample
    /// cancelled before its usage came) takes its prompt tokens from a sibling request to the
    /// same upstream that reported them (the same prompt, the same tokenizer) rather than a
    /// tiktoken estimate; it stays flagged estimated, and the totals follow.
    async fn run_usage(&self) -> Usage {
        let mut usage: Usage = self.completions.usage().await;
        self.estimate_prompts(&mut usage).await;
        self.siblings(usage)
    }

    /// `usage`, a fan-out request that reported none taking its prompt tokens from a sibling
    /// (see [`run_usage`](Self::run_usage)).
    fn siblings(&self, mut usage: Usage) -> Usage {
        if usage.upstreams.len() < 2 {
            return usage;
        }
        let labels: Vec<Arc<str>> = lock(&self.asked).iter().map(|a| a.label.clone()).collect();
        let reported: HashMap<&str, u64> = (usage.upstreams.iter().enumerate())
            .filter(|(_, u)| u.source == UsageSource::Reported)
            .filter_map(|(r, u)| labels.get(r).map(|l| (&**l, u.prompt_tokens)))
            .collect();
        if reported.is_empty() {
            return usage;
        }
        for (r, u) in usage.upstreams.iter_mut().enumerate() {
            let sibling = labels.get(r).and_then(|l| reported.get(&**l));
            if let (false, Some(prompt)) = (u.source == UsageSource::Reported, sibling) {
                u.prompt_tokens = *prompt;
                u.total_tokens = u.prompt_tokens.saturating_add(u.completion_tokens);
            }
        }
        usage.prompt_tokens =
            (usage.upstreams.iter().map(|u| u.prompt_tokens)).fold(0, u64::saturating_add);
        usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        usage
    }

    /// The library estimates a request's tokens without its prompt when its upstream
    /// reported none (it is given the request's `model` and `n` only: the body stays the
    /// client's bytes): each estimated part's prompt is counted here from the request's Chat
    /// Completions fields, as the library would count the whole body, one tool at a time
    /// ([`choicewise_usage::count_prompt_fields`]), once per encoding, on a blocking thread
    /// unless it is small ([`choicewise_usage::counts_quickly`]).
    async fn estimate_prompts(&self, usage: &mut Usage) {
        for encoding in prompt_encodings(usage) {
            if lock(&self.prompt_counts).contains_key(encoding.as_str()) {
                continue;
            }
            let quick = choicewise_usage::counts_quickly(encoding, self.prompt_bytes());
            let fields = self.prompt.clone();
            let tokens = counted(quick, move || count_prompt(&fields, encoding))
                .await
                .unwrap_or_else(|| Err("the prompt could not be counted".into()));
            lock(&self.prompt_counts).insert(encoding.as_str(), tokens);
        }
        apply_prompts(usage, &lock(&self.prompt_counts));
    }

    /// The bytes of the prompt's fields (what counting it reads).
    fn prompt_bytes(&self) -> usize {
        self.prompt.values().map(|v| v.len()).sum()
    }

    /// [`estimate_prompts`](Self::estimate_prompts) without waiting, for a request whose
    /// client went away: a prompt already counted, else counted here when it is small (at
    /// most [`PROMPT_COUNTED_NOW_BYTES`]); a larger one is left uncounted, and the estimate
    /// says so.
    fn estimate_prompts_now(&self, usage: &mut Usage) {
        let small = self.prompt_bytes() <= PROMPT_COUNTED_NOW_BYTES;
        let mut counts = lock(&self.prompt_counts);
        for encoding in prompt_encodings(usage) {
            counts
                .entry(encoding.as_str())
                .or_insert_with(|| match small {
                    true => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        count_prompt(&self.prompt, encoding)
                    }))
                    .unwrap_or_else(|_| Err("the prompt could not be counted".into())),
                    false => Err("the prompt was not counted: its client went away first".into()),
                });
        }
        apply_prompts(usage, &counts);
    }

    /// Each upstream request's block of library choice indexes, with the usage core gives
    /// for it (the whole usage when the run is one request).
    fn blocks<'u>(&self, usage: &'u Usage) -> Vec<(std::ops::Range<u32>, Option<&'u Usage>)> {
        let mut first = 0u32;
        (self.sizes.iter().enumerate())
            .map(|(r, size)| {
                let block = first..first + *size as u32;
                first = block.end;
                let upstream = match usage.upstreams.is_empty() {
                    true => Some(usage),
                    false => usage.upstreams.get(r),
                };
                (block, upstream)
            })
            .collect()
    }

    async fn count(&self) -> Accounting {
        let usage: Usage = self.run_usage().await;
        let choices = self.facts();
        self.note_cuts(unfinished(&choices, &[]));
        let weighed = self.weighed(&usage, &choices);
        let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
        if !weighed.is_empty() {
            let bytes = weighed_bytes(&self.completions, &weighed);
            let quick = choicewise_usage::counts_quickly(choicewise_usage::DEFAULT_ENCODING, bytes);
            let completions = self.completions.clone();
            // Counting panicked: equal shares.
            counts = counted(quick, move || weigh(&completions, &weighed))
                .await
                .unwrap_or_default();
        }
        self.tally(usage, choices, &counts)
    }

    /// What the run came to so far, read without waiting: for a request whose client went
    /// away mid-answer, its samples cancelled as it is recorded. The samples still open end
    /// cancelled (their cancel was asked for); the tokens are those reported so far, else an
    /// estimate of what was received, counted here in bounded time.
    fn accounting_now(&self) -> Accounting {
        let open = self.completions.open_choices();
        let mut usage = self.completions.usage_now();
        self.estimate_prompts_now(&mut usage);
        let usage = self.siblings(usage);
        let mut choices = self.facts();
        self.note_cuts(unfinished(&choices, &open));
        for c in choices.iter_mut().filter(|c| open.contains(&c.index)) {
            c.cancelled = true;
            c.finish_reason = None;
        }
        let weighed = self.weighed(&usage, &choices);
        let counted = weigh(&self.completions, &weighed);
        self.tally(usage, choices, &counted)
    }

    /// Records a `cut` try, once, for each upstream request that opened and left one of
    /// `unfinished` (choices closed without a finish and not cancelled): its stream was cut,
    /// ended without its end, failed or went silent after its first byte. The try's `ok`,
    /// recorded at its first byte, stays: a cut try is counted once more, as `cut`.
    fn note_cuts(&self, unfinished: Vec<u32>) {
        if unfinished.is_empty() {
            return;
        }
        let mut cut = Vec::new();
        {
            let mut asked = lock(&self.asked);
            let mut first = 0u32;
            for (r, size) in self.sizes.iter().enumerate() {
                let block = first..first + *size as u32;
                first = block.end;
                let Some(a) = asked.get_mut(r) else { continue };
                if a.reached == Reached::Opened && unfinished.iter().any(|i| block.contains(i)) {
                    a.reached = Reached::Cut;
                    cut.push((a.sample, a.label.clone()));
                }
            }
        }
        for (sample, label) in cut {
            self.opener.record(sample, &label, resilience::Outcome::Cut);
        }
    }

    /// [`note_cuts`](Self::note_cuts) of the choices closed so far, read where they are
    /// published: for the tries of an answer whose output choices have ended while its
    /// accounting is not read yet.
    pub(super) fn note_cuts_so_far(&self) {
        let open = self.completions.open_choices();
        let ends = self.completions.inspect(|c, _| {
            (!open.contains(&c.index) && c.finish_reason.is_none() && !c.cancelled)
                .then_some(c.index)
        });
        self.note_cuts(ends.into_iter().flatten().collect());
    }

    /// Each choice's end, read where it is published: its text is not copied (but for the
    /// span's output messages, with traces on).
    fn facts(&self) -> Vec<Facts> {
        let keep = self.keep_messages;
        self.completions.inspect(|c, usage| Facts {
            index: c.index,
            usage,
            cancelled: c.cancelled,
            finish_reason: c.finish_reason.clone(),
            message: keep.then(|| c.message.clone()),
            logprobs: c.logprobs.clone().filter(|_| keep),
            place: self.completions.finish_place(c.index),
        })
    }

    /// The choices whose upstream reported one total for several of them: shared out in
    /// proportion to their texts' tiktoken counts.
    fn weighed(&self, usage: &Usage, choices: &[Facts]) -> Vec<u32> {
        let by_index: HashMap<u32, &Facts> = choices.iter().map(|c| (c.index, c)).collect();
        let mut weighed: Vec<u32> = Vec::new();
        for (block, upstream) in self.blocks(usage) {
            if upstream.is_some_and(|u| u.source == UsageSource::Reported) {
                let rest: Vec<u32> = block
                    .filter(|i| by_index.get(i).is_some_and(|c| own(c).is_none()))
                    .collect();
                if rest.len() > 1 {
                    weighed.extend(rest);
                }
            }
        }
        weighed
    }

    /// Every started sample's tokens and end, from core's usage, each choice's end and the
    /// weights of the totals to share.
    fn tally(&self, usage: Usage, choices: Vec<Facts>, counted: &BTreeMap<u32, u64>) -> Accounting {
        let response_model = self.completions.response_model();
        let by_index: HashMap<u32, &Facts> = choices.iter().map(|c| (c.index, c)).collect();
        let mut parts = Vec::new();
        for (block, upstream) in self.blocks(&usage) {
            let Some(upstream) = upstream else { continue };
            let block: Vec<u32> = block.filter(|i| by_index.contains_key(i)).collect();
            // The upstream's total not already counted choice by choice, shared out.
            let shared: HashMap<u32, u64> = match upstream.source {
                UsageSource::Reported => {
                    let known: u64 = (block.iter())
                        .filter_map(|i| own(by_index[i]))
                        .map(|u| u.completion_tokens)
                        .sum();
                    let rest: Vec<u32> = (block.iter().copied())
                        .filter(|i| own(by_index[i]).is_none())
                        .collect();
                    let weights: Vec<u64> = (rest.iter())
                        .map(|i| counted.get(i).copied().unwrap_or(0))
                        .collect();
                    let left = upstream.completion_tokens.saturating_sub(known);
                    rest.into_iter().zip(share(left, &weights)).collect()
                }
                _ => HashMap::new(),
            };
            // An estimated upstream's choices: core's estimate of each.
            let estimate = upstream.estimate.as_ref().map(|e| &e.choices);
            for (k, i) in block.iter().enumerate() {
                let (completion, estimated) = match (own(by_index[i]), shared.get(i)) {
                    (Some(u), _) => (u.completion_tokens, false),
                    (None, Some(part)) => (*part, true),
                    (None, None) => (
                        (by_index[i].usage.map(|u| u.completion_tokens))
                            .or_else(|| estimate.and_then(|e| e.get(i).copied()))
                            .unwrap_or(0),
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
        drop(by_index);
        let ends: Vec<End> = (choices.into_iter())
            .map(|c| End {
                index: c.index,
                sample: self.sample_of(c.index),
                cancelled: c.cancelled,
                finish: match (c.cancelled, c.finish_reason) {
                    (true, _) => SampleEnded::Cancelled,
                    // Failed, or ended without a reason.
                    (false, None) => SampleEnded::Failed,
                    (false, Some(reason)) => SampleEnded::Finished(reason),
                },
                message: c.message,
                logprobs: c.logprobs,
                place: c.place,
            })
            .collect();
        let cancelled = (ends.iter().filter(|e| e.cancelled))
            .filter_map(|e| e.sample)
            .collect();
        Accounting {
            usage,
            parts,
            ends: Mutex::new(ends),
            cancelled,
            response_model,
        }
    }

    /// The samples that ended cancelled, by number, in start order: once the run is over.
    pub(super) async fn cancelled_samples(&self) -> Vec<u32> {
        let mut cancelled = self.accounting().await.cancelled.clone();
        cancelled.sort_unstable();
        cancelled
    }

    /// The `usage` object of the answer: the totals and each sample's part (`index`: its
    /// output choice, if it is one of `outputs`).
    pub(super) async fn usage(&self, outputs: &[u32]) -> AnswerUsage {
        let Accounting { usage, parts, .. } = self.accounting().await;
        let per_choice = (parts.iter())
            .map(|p| ChoiceTokens {
                completion_tokens: p.completion,
                estimated: p.estimated,
                index: outputs.iter().position(|s| *s == p.sample),
                prompt_tokens: p.prompt,
                sample: p.sample,
            })
            .collect();
        AnswerUsage {
            choicewise: UsageParts {
                estimated: estimated(usage, parts),
                per_choice,
            },
            completion_tokens: usage.completion_tokens,
            prompt_tokens: usage.prompt_tokens,
            total_tokens: usage.total_tokens,
        }
    }

    /// What the request came to, for the metrics and the span: how each sample ended and what
    /// it said (with traces on), the request's and each upstream request's tokens, and the
    /// completion tokens of samples cancelled or not selected. Once the run is over; asked
    /// once (the samples' messages move into it).
    /// `outputs` is `None` when every sample is an output (no selection).
    pub(super) async fn outcome(&self, outputs: Option<&[u32]>) -> Outcome {
        self.outcome_of(self.accounting().await, outputs)
    }

    /// As [`outcome`](Self::outcome), without waiting: what the run came to so far, its
    /// samples still open counted as cancelled (see [`accounting_now`](Self::accounting_now)).
    pub(super) fn outcome_now(&self, outputs: Option<&[u32]>) -> Outcome {
        self.outcome_of(&self.accounting_now(), outputs)
    }

    fn outcome_of(&self, accounting: &Accounting, outputs: Option<&[u32]>) -> Outcome {
        let ends = std::mem::take(&mut *lock(&accounting.ends));
        let unselected = |e: &End| {
            !e.cancelled
                && outputs.is_some_and(|o| e.sample.is_some_and(|sample| !o.contains(&sample)))
        };
        // Per-sample parts count only when some samples were not output.
        let wasted = ends.iter().any(|e| e.cancelled || unselected(e));
        let usage = &accounting.usage;
        let parts = match wasted {
            true => accounting.parts.as_slice(),
            false => &[][..],
        };
        let mut outcome = Outcome {
            response_model: accounting.response_model.clone(),
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            // As the answer's `usage.choicewise.estimated` says.
            estimated: estimated(usage, parts),
            ..Outcome::default()
        };
        let by_index: HashMap<u32, &End> = ends.iter().map(|e| (e.index, e)).collect();
        for part in parts {
            let Some(end) = by_index.get(&part.index) else {
                continue;
            };
            if end.cancelled {
                outcome.cancelled_tokens = outcome.cancelled_tokens.saturating_add(part.completion);
            } else if unselected(end) {
                outcome.unselected_tokens =
                    outcome.unselected_tokens.saturating_add(part.completion);
            }
        }
        drop(by_index);
        let all_parts = &accounting.parts;
        outcome.samples = (ends.into_iter())
            .map(|e| {
                let part = all_parts.iter().find(|p| p.index == e.index);
                // The output choice it became: its place among those selected, or, when
                // every sample is an output, its own number.
                let output = match outputs {
                    Some(o) => (e.sample).and_then(|s| o.iter().position(|x| *x == s)),
                    None => e.sample.filter(|_| !e.cancelled).map(|s| s as usize),
                };
                SampleEnd {
                    sample: e.sample,
                    output: output.map(|o| o as u32),
                    finish: e.finish,
                    message: e.message.unwrap_or_default(),
                    logprobs: e.logprobs,
                    place: e.place,
                    prompt_tokens: part.map_or(0, |p| p.prompt),
                    completion_tokens: part.map_or(0, |p| p.completion),
                    estimated: part.is_some_and(|p| p.estimated),
                }
            })
            .collect();
        let per_request: Vec<&Usage> = match usage.upstreams.is_empty() {
            true => vec![usage],
            false => usage.upstreams.iter().collect(),
        };
        for (r, u) in per_request.into_iter().enumerate() {
            let Some(label) = lock(&self.asked).get(r).map(|a| a.label.clone()) else {
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
}

/// A choice's own reported figure.
fn own(c: &Facts) -> Option<ChoiceUsage> {
    c.usage.filter(|u| u.source == UsageSource::Reported)
}

/// The choices of `choices` closed without a finish and not cancelled (`open`: those still
/// open, which are not).
fn unfinished(choices: &[Facts], open: &[u32]) -> Vec<u32> {
    (choices.iter())
        .filter(|c| c.finish_reason.is_none() && !c.cancelled && !open.contains(&c.index))
        .map(|c| c.index)
        .collect()
}

/// The bytes of the `weighed` choices' texts (what [`weigh`] counts), each read where it is
/// published.
fn weighed_bytes(completions: &Completions, weighed: &[u32]) -> usize {
    (completions.inspect(|c, _| match weighed.contains(&c.index) {
        true => c.text_bytes(),
        false => 0,
    }))
    .into_iter()
    .sum()
}

/// The tiktoken counts of the `weighed` choices' texts, each read where it is published.
/// Blocking unless few ([`choicewise_usage::counts_quickly`]).
fn weigh(completions: &Completions, weighed: &[u32]) -> BTreeMap<u32, u64> {
    if weighed.is_empty() {
        return BTreeMap::new();
    }
    let encoding = choicewise_usage::DEFAULT_ENCODING;
    (completions.inspect(|c, _| {
        (weighed.contains(&c.index)).then(|| (c.index, c.completion_tokens(encoding)))
    }))
    .into_iter()
    .flatten()
    .collect()
}

/// What the accounting reads of a choice.
struct Facts {
    index: u32,
    /// Its own usage, reported or core's estimate.
    usage: Option<ChoiceUsage>,
    cancelled: bool,
    finish_reason: Option<String>,
    /// Its message, with traces on.
    message: Option<Message>,
    /// Its log-probabilities, kept as its message is.
    logprobs: Option<Logprobs>,
    /// Its place in the finish order.
    place: Option<u64>,
}

/// How a started sample ended.
#[derive(Debug)]
pub(super) struct End {
    /// Its library choice index.
    index: u32,
    sample: Option<u32>,
    cancelled: bool,
    /// How it ended.
    finish: SampleEnded,
    /// Its message, as far as it got, with traces on.
    message: Option<Message>,
    logprobs: Option<Logprobs>,
    place: Option<u64>,
}

/// A started sample's tokens.
#[derive(Debug, Clone)]
pub(super) struct Part {
    /// Its library choice index.
    index: u32,
    sample: u32,
    prompt: u64,
    completion: u64,
    estimated: bool,
}

/// An answer's `usage` object: Chat Completions' totals, and the `choicewise` extension's
/// part of each sample. Part of the extension's public contract (docs/gateway.md); its
/// fields are written in this order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AnswerUsage {
    pub(crate) choicewise: UsageParts,
    pub(crate) completion_tokens: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) total_tokens: u64,
}

/// The `choicewise` part of an answer's usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct UsageParts {
    /// Some figure is the gateway's estimate, not an upstream's report.
    pub(crate) estimated: bool,
    /// Each sample's part.
    pub(crate) per_choice: Vec<ChoiceTokens>,
}

/// One sample's part of an answer's usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ChoiceTokens {
    pub(crate) completion_tokens: u64,
    pub(crate) estimated: bool,
    /// Its output choice, if it is one.
    pub(crate) index: Option<usize>,
    pub(crate) prompt_tokens: u64,
    pub(crate) sample: u32,
}

/// What a run came to, read once when it is over ([`Ledger::accounting`]).
#[derive(Debug)]
pub(super) struct Accounting {
    usage: Usage,
    /// Every started sample's tokens.
    parts: Vec<Part>,
    /// Every started sample's end, until [`Ledger::outcome`] takes them.
    ends: Mutex<Vec<End>>,
    /// The samples that ended cancelled.
    cancelled: Vec<u32>,
    /// The model the upstream named in its answer, if it named one.
    response_model: Option<String>,
}

/// Whether a usage's totals are (partly) estimated: estimated by the library, or any
/// sample's part is (an estimate, or a share of a total reported for several choices).
fn estimated(usage: &Usage, parts: &[Part]) -> bool {
    usage.source != UsageSource::Reported
        || usage
            .upstreams
            .iter()
            .any(|u| u.source != UsageSource::Reported)
        || parts.iter().any(|p| p.estimated)
}

/// `total` shared in proportion to `weights` (largest remainder, so the parts add up to
/// `total`); equal parts when every weight is zero.
pub(crate) fn share(total: u64, weights: &[u64]) -> Vec<u64> {
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
