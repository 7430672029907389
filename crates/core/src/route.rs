//! Routing: from one parsed chunk to per-choice update batches. Pure and synchronous.
//!
//! The reader actor feeds every chunk of one network read through a [`Router`], then sends
//! each choice's batch to that choice's actor in one message.

use std::collections::HashMap;

use serde_json::Value;

use choicewise_sse::DataLines;

use crate::error::{Error, UpstreamError};
use crate::event::{Warning, WarningKind};
use crate::merge::{CallFragment, ChoiceUpdate, ToolFragment, text};
use crate::shared::Meta;
use crate::wire::{ChatCompletionChunk, ChunkChoice, FunctionCallDelta};

/// A choice as the router knows it.
#[derive(Debug)]
pub(crate) struct Slot {
    pub index: u32,
    /// Updates routed since the last flush.
    pub batch: Vec<ChoiceUpdate>,
    /// A non-empty `finish_reason` was seen for this choice.
    pub finished: bool,
}

/// Routes chunks to per-choice batches and gathers completion-level facts.
#[derive(Debug)]
pub(crate) struct Router {
    max_choices: usize,
    /// Choice index to slot, for small indexes (the usual case) ...
    small: Vec<u32>,
    /// ... and for the others.
    large: HashMap<u32, usize>,
    pub slots: Vec<Slot>,
    pub meta: Meta,
    /// Warnings not yet published.
    pub warnings: Vec<Warning>,
}

const SMALL_INDEXES: usize = 256;
const NO_SLOT: u32 = u32::MAX;

impl Router {
    pub fn new(max_choices: usize) -> Self {
        Router {
            max_choices,
            small: Vec::new(),
            large: HashMap::new(),
            slots: Vec::new(),
            meta: Meta::default(),
            warnings: Vec::new(),
        }
    }

    /// The choices that have not finished, in index order.
    pub fn unfinished(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| !s.finished)
            .map(|s| s.index)
            .collect();
        v.sort_unstable();
        v
    }

    fn slot_for(&mut self, index: u32, line: u64) -> Result<usize, Error> {
        let i = index as usize;
        let found = if i < SMALL_INDEXES {
            self.small
                .get(i)
                .copied()
                .filter(|&s| s != NO_SLOT)
                .map(|s| s as usize)
        } else {
            self.large.get(&index).copied()
        };
        if let Some(slot) = found {
            return Ok(slot);
        }
        if self.slots.len() >= self.max_choices {
            return Err(Error::TooManyChoices {
                index,
                limit: self.max_choices,
                line,
            });
        }
        let slot = self.slots.len();
        if i < SMALL_INDEXES {
            if self.small.len() <= i {
                self.small.resize(i + 1, NO_SLOT);
            }
            self.small[i] = slot as u32;
        } else {
            self.large.insert(index, slot);
        }
        self.slots.push(Slot {
            index,
            batch: Vec::new(),
            finished: false,
        });
        Ok(slot)
    }

    /// Routes one chunk. The choices of a chunk that also carries an error are routed first,
    /// so everything received before the error stays available.
    pub fn route(&mut self, chunk: ChatCompletionChunk<'_>, line: u64) -> Result<(), Error> {
        let meta = &mut self.meta;
        set_if_empty(&mut meta.id, chunk.id.as_deref());
        set_if_empty(&mut meta.model, chunk.model.as_deref());
        set_if_empty(
            &mut meta.system_fingerprint,
            chunk.system_fingerprint.as_deref(),
        );
        set_if_empty(&mut meta.service_tier, chunk.service_tier.as_deref());
        if meta.created.unwrap_or(0) == 0 {
            // Azure's prompt-filter chunk says `created: 0`.
            meta.created = chunk.created.filter(|&c| c != 0).or(meta.created);
        }
        if let Some(p) = chunk.prompt_filter_results.filter(|v| !v.is_null()) {
            meta.prompt_filter_results.push(p);
        }
        if let Some(usage) = chunk.usage.filter(is_usage) {
            let reported = &mut meta.usage;
            match &chunk.choices[..] {
                [] => {
                    let finished = self.slots.iter().filter(|s| s.finished).map(|s| s.index);
                    self.warnings
                        .extend(reported.record_usage_only(usage, finished, line));
                }
                [one] => {
                    if let Ok(index) = u32::try_from(one.index.unwrap_or(0)) {
                        reported.running.insert(index, usage);
                    }
                }
                _ => reported.last_shared = Some(usage),
            }
        }
        for choice in chunk.choices {
            let raw_index = choice.index.unwrap_or(0);
            let index = u32::try_from(raw_index).map_err(|_| Error::InvalidChoiceIndex {
                index: raw_index,
                line,
            })?;
            let slot = self.slot_for(index, line)?;
            let update = convert(choice, index, line)?;
            let slot = &mut self.slots[slot];
            slot.finished |= update.finish_reason.is_some();
            slot.batch.push(update);
        }
        match chunk.error {
            Some(e) if !e.is_null() => Err(Error::Upstream(std::sync::Arc::new(
                UpstreamError::from_value(&e, line),
            ))),
            _ => Ok(()),
        }
    }
}

fn set_if_empty(slot: &mut Option<String>, value: Option<&str>) {
    if slot.is_none() {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            *slot = Some(v.to_string());
        }
    }
}

/// A usage object worth keeping: an object with at least one field (LiteLLM sends `{}`).
fn is_usage(v: &Value) -> bool {
    v.as_object().is_some_and(|o| !o.is_empty())
}

fn non_empty(s: Option<std::borrow::Cow<'_, str>>) -> Option<crate::event::Text> {
    s.filter(|s| !s.is_empty()).map(|s| text(&s))
}

fn fragment(f: Option<FunctionCallDelta<'_>>) -> CallFragment {
    let Some(f) = f else {
        return CallFragment::default();
    };
    let (arguments, arguments_not_string) = match f.arguments {
        None => (None, false),
        Some(crate::wire::Arguments::Text(t)) => (Some(text(&t)), false),
        Some(crate::wire::Arguments::Json(j)) => (Some(text(&j)), true),
    };
    CallFragment {
        name: non_empty(f.name),
        arguments,
        arguments_not_string,
    }
}

fn convert(choice: ChunkChoice<'_>, index: u32, line: u64) -> Result<ChoiceUpdate, Error> {
    let mut update = ChoiceUpdate {
        line,
        finish_reason: non_empty(choice.finish_reason),
        logprobs: choice.logprobs.filter(|v| !v.is_null()),
        content_filter_results: choice.content_filter_results.filter(|v| !v.is_null()),
        ..ChoiceUpdate::default()
    };
    let Some(delta) = choice.delta else {
        return Ok(update);
    };
    update.role = non_empty(delta.role);
    update.content = delta.content.map(|t| text(&t));
    update.refusal = delta.refusal.map(|t| text(&t));
    update.reasoning = delta
        .reasoning_content
        .or(delta.reasoning)
        .map(|t| text(&t));
    if let Some(f) = delta.function_call {
        update.function_call = Some(Box::new(fragment(Some(*f))));
    }
    if let Some(calls) = delta.tool_calls {
        update.tool_calls.reserve_exact(calls.len());
        for call in calls {
            let index = match call.index {
                None => None,
                Some(i) => Some(u32::try_from(i).map_err(|_| Error::InvalidToolCall {
                    choice: index,
                    what: format!("tool call index {i} is out of range (0..=4294967295)"),
                    line,
                })?),
            };
            update.tool_calls.push(ToolFragment {
                index,
                id: non_empty(call.id),
                kind: non_empty(call.kind),
                function: fragment(call.function),
            });
        }
    }
    Ok(update)
}

/// What one SSE event meant to the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Done,
}

/// Interprets one SSE event: `[DONE]`, an `event: error`, or one or more chunks.
pub(crate) fn route_event(
    router: &mut Router,
    event: &str,
    data: &str,
    line: u64,
    offset: u64,
    data_lines: DataLines<'_>,
) -> Result<Flow, Error> {
    #[cfg(feature = "fault-injection")]
    if data == crate::fault::FAULT_PANIC_READER {
        panic!("injected fault in the reader at line {line}");
    }
    let trimmed = data.trim_ascii();
    if trimmed == "[DONE]" {
        return Ok(Flow::Done);
    }
    if event == "error" {
        let value = serde_json::from_str::<Value>(trimmed)
            .unwrap_or_else(|_| Value::String(trimmed.to_string()));
        return Err(Error::Upstream(std::sync::Arc::new(
            UpstreamError::from_value(&value, line),
        )));
    }
    if !trimmed.starts_with('{') {
        // An array would otherwise be read as the chunk's fields by position.
        let found = trimmed
            .chars()
            .next()
            .map_or("nothing".to_string(), |c| format!("{c:?}"));
        return Err(Error::Json {
            line: data_lines.line(0).unwrap_or(line),
            offset,
            message: format!("expected a JSON object, found {found}"),
        });
    }
    match serde_json::from_str::<ChatCompletionChunk<'_>>(data) {
        Ok(chunk) => router.route(chunk, line)?,
        Err(first_error) => {
            // Several objects on one line (seen in the wild): apply them all, in order.
            let mut count = 0;
            let mut objects =
                serde_json::Deserializer::from_str(data).into_iter::<ChatCompletionChunk<'_>>();
            for next in &mut objects {
                match next {
                    Ok(chunk) => {
                        count += 1;
                        router.route(chunk, line)?;
                    }
                    Err(e) => return Err(json_error(&e, line, offset, data_lines)),
                }
            }
            match count {
                0 => return Err(json_error(&first_error, line, offset, data_lines)),
                1 => {}
                count => router.warnings.push(Warning {
                    choice: None,
                    line,
                    kind: WarningKind::ConcatenatedObjects { count },
                }),
            }
        }
    }
    Ok(Flow::Continue)
}

/// A JSON error at the line of the event it is on: serde_json counts lines within the data
/// (its data lines joined), which other fields and comments may stand between.
fn json_error(e: &serde_json::Error, line: u64, offset: u64, data_lines: DataLines<'_>) -> Error {
    let within = e.line().saturating_sub(1);
    Error::Json {
        line: data_lines.line(within).unwrap_or(line + within as u64),
        offset,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_str(router: &mut Router, data: &str) -> Result<Flow, Error> {
        route_event(router, "", data, 1, 0, DataLines::default())
    }

    #[test]
    fn routes_choices_by_index_in_order_of_first_appearance() {
        let mut r = Router::new(8);
        route_str(&mut r, r#"{"choices":[{"index":2,"delta":{"content":"a"}},{"index":0,"delta":{"content":"b"}}]}"#).unwrap();
        route_str(
            &mut r,
            r#"{"choices":[{"delta":{"content":"c"},"finish_reason":"stop"}]}"#,
        )
        .unwrap();
        let order: Vec<u32> = r.slots.iter().map(|s| s.index).collect();
        assert_eq!(order, vec![2, 0]);
        assert_eq!(r.slots[1].batch.len(), 2);
        assert!(r.slots[1].finished);
        assert_eq!(r.unfinished(), vec![2]);
    }

    #[test]
    fn invalid_and_excess_choice_indexes_are_typed_errors() {
        let mut r = Router::new(2);
        let e = route_str(&mut r, r#"{"choices":[{"index":-1,"delta":{}}]}"#).unwrap_err();
        assert!(matches!(e, Error::InvalidChoiceIndex { index: -1, .. }));
        let e = route_str(&mut r, r#"{"choices":[{"index":4294967296,"delta":{}}]}"#).unwrap_err();
        assert!(matches!(e, Error::InvalidChoiceIndex { .. }));
        route_str(
            &mut r,
            r#"{"choices":[{"index":4294967295,"delta":{}},{"index":0}]}"#,
        )
        .unwrap();
        let e = route_str(&mut r, r#"{"choices":[{"index":7,"delta":{}}]}"#).unwrap_err();
        assert!(matches!(
            e,
            Error::TooManyChoices {
                index: 7,
                limit: 2,
                ..
            }
        ));
    }

    #[test]
    fn usage_only_chunk_is_authoritative_and_empty_usage_is_ignored() {
        let mut r = Router::new(8);
        let running = r#"{"choices":[{"delta":{}}],"usage":{"completion_tokens":3}}"#;
        route_str(&mut r, running).unwrap();
        assert_eq!(r.meta.usage.usage().unwrap().completion_tokens, 3);
        route_str(&mut r, r#"{"choices":[],"usage":{"total_tokens":9}}"#).unwrap();
        let later = r#"{"choices":[{"delta":{}}],"usage":{"completion_tokens":5}}"#;
        route_str(&mut r, later).unwrap();
        route_str(&mut r, r#"{"choices":[{"delta":{}}],"usage":{}}"#).unwrap();
        route_str(&mut r, r#"{"choices":[{"delta":{}}],"usage":null}"#).unwrap();
        assert_eq!(r.meta.usage.usage().unwrap().total_tokens, 9);
    }

    #[test]
    fn running_per_choice_counts_combine_across_choices_not_within_one() {
        let mut r = Router::new(8);
        for (i, c) in [(0, 1), (1, 1), (0, 2), (1, 2), (0, 3), (1, 5)] {
            let usage = format!(
                r#"{{"prompt_tokens":10,"completion_tokens":{c},"total_tokens":{}}}"#,
                10 + c
            );
            let data = format!(r#"{{"choices":[{{"index":{i},"delta":{{}}}}],"usage":{usage}}}"#);
            route_str(&mut r, &data).unwrap();
        }
        let u = r.meta.usage.usage().unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (10, 8, 18)
        );
    }

    #[test]
    fn error_payload_after_choices_keeps_the_choices() {
        let mut r = Router::new(8);
        let e = route_str(&mut r, r#"{"choices":[{"delta":{"content":""},"finish_reason":"error"}],"error":{"code":502,"message":"upstream"}}"#).unwrap_err();
        let Error::Upstream(u) = e else {
            panic!("{e:?}")
        };
        assert_eq!(u.code.as_deref(), Some("502"));
        assert_eq!(r.slots[0].batch.len(), 1);
    }

    #[test]
    fn done_error_events_and_concatenated_objects() {
        let mut r = Router::new(8);
        assert_eq!(route_str(&mut r, " [DONE]").unwrap(), Flow::Done);
        let e = route_event(
            &mut r,
            "error",
            r#"{"error":{"message":"boom"}}"#,
            3,
            0,
            DataLines::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("boom"), "{e}");
        route_str(
            &mut r,
            r#"{"choices":[{"delta":{"content":"a"}}]}{"choices":[{"delta":{"content":"b"}}]}"#,
        )
        .unwrap();
        assert_eq!(r.slots[0].batch.len(), 2);
        assert!(matches!(
            r.warnings[0].kind,
            WarningKind::ConcatenatedObjects { count: 2 }
        ));
    }

    #[test]
    fn non_object_chunks_are_json_errors_with_their_line() {
        let mut r = Router::new(8);
        for data in [
            "[1,2]",
            "\"text\"",
            "{\"choices\": [",
            "{\"choices\":[{\"index\":\"0\"}]}",
        ] {
            let e = route_event(&mut r, "", data, 41, 1000, DataLines::default()).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Json {
                        line: 41,
                        offset: 1000,
                        ..
                    }
                ),
                "{data}: {e:?}"
            );
        }
    }

    #[test]
    fn empty_strings_and_null_finish_reasons_are_nothing() {
        let mut r = Router::new(8);
        route_str(&mut r, r#"{"choices":[{"delta":{"role":"","content":"","tool_calls":[{"index":0,"id":"","function":{"name":"","arguments":""}}]},"finish_reason":""}]}"#).unwrap();
        let u = &r.slots[0].batch[0];
        assert_eq!(u.role, None);
        assert_eq!(u.content.as_deref(), Some(""));
        assert_eq!(u.finish_reason, None);
        assert_eq!(u.tool_calls[0].id, None);
        assert_eq!(u.tool_calls[0].function.name, None);
        assert!(!r.slots[0].finished);
    }
}
