//! A run's accounting: every started sample's tokens counted once (reported where the
//! upstreams reported, estimated elsewhere, an upstream's shared total split among its
//! choices so that the parts add up to what it bills), the answer's `usage` object, and what
//! the request came to for the metrics and the span.

use std::collections::{BTreeMap, HashMap};

use choicewise_core::{ChoiceOutput, Usage, UsageSource};
use serde_json::{Value, json};

use super::{Run, lock};
use crate::metrics::{Outcome, SampleEnd, UpstreamTokens};

impl Run {
    /// Every started sample's tokens, counted once: the total (reported where the upstreams
    /// reported, estimated elsewhere: a cancelled sample's is an estimate) and each sample's
    /// part. A request's prompt is billed to its first sample. Where an upstream reported one
    /// total for several choices, its completion tokens are shared among them in proportion
    /// to their tiktoken counts, so that the parts always add up to what the upstream bills
    /// (such a part is `estimated`).
    async fn accounting(&self) -> &Accounting {
        self.accounting.get_or_init(|| self.count()).await
    }

    /// The run's usage: the library's, where a fan-out request that reported none (a sample
    /// cancelled before its usage came) takes its prompt tokens from a sibling request to the
    /// same upstream that reported them (the same prompt, the same tokenizer) rather than a
    /// tiktoken estimate; it stays flagged estimated, and the totals follow.
    async fn run_usage(&self) -> Usage {
        let mut usage: Usage = self.completions.usage().await;
        self.estimate_prompts(&mut usage).await;
        if usage.upstreams.len() < 2 {
            return usage;
        }
        let labels = lock(&self.labels).clone();
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
        usage.prompt_tokens = usage.upstreams.iter().map(|u| u.prompt_tokens).sum();
        usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        usage
    }

    /// The library estimates a request's tokens without its prompt when its upstream
    /// reported none (it is given the request's `model` and `n` only: the body stays the
    /// client's bytes): each estimated part's prompt is counted here from the request's Chat
    /// Completions fields, as the library would count the whole body, one tool at a time
    /// ([`choicewise_usage::count_prompt_fields`]), once per encoding.
    async fn estimate_prompts(&self, usage: &mut Usage) {
        let mut counted: HashMap<&'static str, Result<u64, String>> = HashMap::new();
        let fan_out = !usage.upstreams.is_empty();
        let parts: Vec<&mut Usage> = match fan_out {
            true => usage.upstreams.iter_mut().collect(),
            false => vec![&mut *usage],
        };
        for part in parts {
            if part.source != UsageSource::Estimated {
                continue;
            }
            let Some(estimate) = part.estimate.as_mut() else {
                continue;
            };
            let model = estimate.model.as_deref().unwrap_or_default();
            let encoding = choicewise_usage::encoding_for_model(model).name;
            let tokens = match counted.get(encoding.as_str()) {
                Some(tokens) => tokens.clone(),
                None => {
                    let fields = self.prompt.clone();
                    let tokens = tokio::task::spawn_blocking(move || {
                        let texts = fields.iter().map(|(k, v)| (k.as_str(), &v[..]));
                        (choicewise_usage::count_prompt_fields(encoding, texts))
                            .map(|count| count.total)
                            .map_err(|e| e.to_string())
                    })
                    .await
                    .unwrap_or_else(|_| Err("the prompt could not be counted".into()));
                    counted.insert(encoding.as_str(), tokens.clone());
                    tokens
                }
            };
            let (prompt, error) = match tokens {
                Ok(tokens) => (tokens, None),
                Err(e) => (0, Some(e)),
            };
            estimate.prompt_counted = error.is_none();
            estimate.prompt_error = error;
            part.prompt_tokens = prompt;
            part.total_tokens = prompt.saturating_add(part.completion_tokens);
        }
        if fan_out {
            usage.prompt_tokens = usage.upstreams.iter().map(|u| u.prompt_tokens).sum();
            usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        }
    }

    async fn count(&self) -> Accounting {
        let usage: Usage = self.run_usage().await;
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
                "estimated": estimated(usage, parts),
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
            false => (self.run_usage().await, &[][..]),
        };
        outcome.prompt_tokens = usage.prompt_tokens;
        outcome.completion_tokens = usage.completion_tokens;
        // As the answer's `usage.choicewise.estimated` says.
        outcome.estimated = estimated(&usage, parts);
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

/// Every started sample's tokens ([`Run::accounting`]).
#[derive(Debug)]
pub(super) struct Accounting {
    usage: Usage,
    parts: Vec<Part>,
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
