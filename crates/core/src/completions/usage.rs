//! A completion's usage: the upstreams' reported figures, or an estimate of what was
//! received, counted on the calling thread when it is quick and elsewhere when it is not.

use std::sync::Arc;

use choicewise_proto::Usage;

use crate::completion::{ChoiceEntry, CompletionShared};

/// The usage reported, or the counting of an estimate of what was received (blocking: run
/// it where counting may block, unless it says it is quick: no prompt to count, and the
/// choices' text small enough, [`choicewise_usage::counts_quickly`]).
#[allow(clippy::type_complexity)]
pub(super) fn usage_counting(
    shared: &CompletionShared,
) -> Result<Usage, (bool, Box<dyn FnOnce() -> Usage + Send>)> {
    // A fan-out: each upstream's reported usage, or `None` and its choices.
    let (reported, parts) = {
        let state = shared.lock();
        let parts: Option<Vec<_>> = state.fan_out().then(|| {
            state
                .upstreams
                .iter()
                .map(|u| {
                    let indexes: Vec<u32> = u.map.values().copied().collect();
                    let own = (u.request.clone(), u.meta.model().map(str::to_string));
                    (u.reported_usage(), indexes, own)
                })
                .collect()
        });
        (state.reported_usage(), parts)
    };
    if let Some(reported) = reported {
        return Ok(reported);
    }
    // The choices' messages are counted where they are published, not copied.
    let entries = shared.lock().choices.clone();
    let model = shared.model();
    let request = shared
        .lock()
        .upstreams
        .first()
        .and_then(|u| u.request.clone());
    let mut left = QUICK_BYTES;
    let quick = quick_count(model.as_deref(), &entries, &mut left)
        && within(request.as_deref(), &mut left)
        && (parts.iter().flatten())
            .all(|(_, _, (request, _))| within(request.as_deref(), &mut left));
    Err((
        quick,
        Box::new(move || match parts {
            None => estimate(model, request.as_deref(), &entries, None),
            Some(parts) => Usage::sum(
                parts
                    .into_iter()
                    .map(|(reported, indexes, (own_request, own_model))| {
                        reported.unwrap_or_else(|| {
                            let request = own_request.as_deref();
                            let model = own_model.or_else(|| model.clone());
                            estimate(model, request, &entries, Some(&indexes))
                        })
                    })
                    .collect(),
            ),
        }),
    ))
}

/// Whether the text of `value` (its strings and keys) fits in `left` bytes, taken from it;
/// stops as soon as it does not.
fn within(value: Option<&serde_json::Value>, left: &mut usize) -> bool {
    use serde_json::Value;
    let Some(value) = value else { return true };
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        let bytes = match v {
            Value::String(s) => s.len(),
            Value::Array(items) => {
                stack.extend(items);
                0
            }
            Value::Object(map) => {
                stack.extend(map.values());
                map.keys().map(String::len).sum()
            }
            _ => 0,
        };
        match left.checked_sub(bytes) {
            Some(rest) => *left = rest,
            None => return false,
        }
    }
    true
}

/// The text an estimate may count on the calling thread, choices and prompt together.
#[cfg(feature = "estimate")]
const QUICK_BYTES: usize = choicewise_usage::QUICK_COUNT_BYTES;
#[cfg(not(feature = "estimate"))]
const QUICK_BYTES: usize = usize::MAX;

/// Whether the choices of `entries` are small enough to count on the calling thread (with
/// the `estimate` feature; without it nothing is counted), their bytes taken from `left`.
fn quick_count(model: Option<&str>, entries: &[Arc<ChoiceEntry>], left: &mut usize) -> bool {
    #[cfg(feature = "estimate")]
    {
        let encoding = choicewise_usage::encoding_for_model(model.unwrap_or_default());
        let mut bytes = 0usize;
        for c in entries {
            let output = c.log.lock().shared_output(c.index());
            let m = &output.message;
            let texts = [&m.content, &m.reasoning_content, &m.refusal];
            bytes += texts
                .iter()
                .filter_map(|t| t.as_deref())
                .map(str::len)
                .sum::<usize>();
            bytes += (m.tool_calls.iter())
                .map(|t| t.function.name.len() + t.function.arguments.len())
                .sum::<usize>();
            bytes += (m.function_call.iter())
                .map(|f| f.name.len() + f.arguments.len())
                .sum::<usize>();
            if bytes > *left {
                return false;
            }
        }
        *left -= bytes;
        encoding.name.loaded()
    }
    #[cfg(not(feature = "estimate"))]
    {
        let _ = (model, entries, left);
        true
    }
}

/// Counts an estimate of the choices of `entries` (those of `indexes`, when given) and of
/// the prompt (feature `estimate`), or says that none can be counted. Each message is counted
/// where it is published, under its log's lock (the completion is over: nothing writes).
fn estimate(
    model: Option<String>,
    request: Option<&serde_json::Value>,
    entries: &[Arc<ChoiceEntry>],
    indexes: Option<&[u32]>,
) -> Usage {
    #[cfg(feature = "estimate")]
    {
        let encoding = choicewise_usage::encoding_for_model(model.as_deref().unwrap_or_default());
        // The prompt's count, and the estimate's shape, from no choice.
        let mut usage = Usage::estimate(model, request, &[]);
        let counted = (entries.iter())
            .filter(|c| indexes.is_none_or(|i| i.contains(&c.index())))
            .map(|c| {
                let index = c.index();
                // Counted with the log's lock let go.
                let output = c.log.lock().shared_output(index);
                let tokens = output.completion_tokens(encoding.name);
                (index, tokens)
            });
        let choices: std::collections::BTreeMap<u32, u64> = counted.collect();
        usage.completion_tokens = choices.values().sum();
        usage.total_tokens = usage.prompt_tokens.saturating_add(usage.completion_tokens);
        if let Some(estimate) = &mut usage.estimate {
            estimate.choices = choices;
        }
        usage
    }
    #[cfg(not(feature = "estimate"))]
    {
        let _ = (model, request, entries, indexes);
        Usage::failed_estimate("token estimates are not compiled in (feature `estimate`)".into())
    }
}
