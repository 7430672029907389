//! The choice's share of the work: the typed parse of its raw updates. Pure and synchronous.
//!
//! The reader hands each choice its updates as raw JSON (see `split`); the choice's actor
//! parses them here, on whichever core it runs, into [`ChoiceUpdate`]s for the merge. A
//! malformed update is that choice's error ([`ErrorDetail::InvalidUpdate`](crate::ErrorDetail::InvalidUpdate),
//! [`ErrorDetail::InvalidToolCall`](crate::ErrorDetail::InvalidToolCall)), never the stream's.

use crate::error::{Error, ErrorDetail};
use crate::event::Text;
use crate::merge::{CallFragment, ChoiceUpdate, ToolFragment, text};
use crate::split::{Batch, Body, RawUpdate};
use crate::wire::{ChunkChoice, FunctionCallDelta};

/// A batch's parse error: the error, and how many updates followed the malformed one (not
/// parsed: the choice has failed) with the first one's line.
#[derive(Debug)]
pub(crate) struct DecodeError {
    pub error: Error,
    /// The line of the malformed update.
    pub line: u64,
    pub after: u64,
    pub after_line: u64,
}

/// Parses every update of `batch` into `out`, in order, and empties the batch, keeping its
/// buffers for the next one (see [`BatchPool`](crate::split::BatchPool)). On error, `out` holds the updates
/// before the malformed one.
pub(crate) fn decode_batch(
    index: u32,
    batch: &mut Batch,
    out: &mut Vec<ChoiceUpdate>,
) -> Result<(), DecodeError> {
    out.reserve(batch.updates.len());
    let Batch { text, updates } = batch;
    let total = updates.len() as u64;
    let mut updates = updates.drain(..).enumerate();
    let mut result = Ok(());
    while let Some((k, RawUpdate { line, offset, body })) = updates.next() {
        let update = match body {
            Body::Json(range) => match serde_json::from_str::<ChunkChoice<'_>>(&text[range]) {
                Ok(choice) => convert(choice, index, line, offset),
                Err(e) => Err(ErrorDetail::InvalidUpdate {
                    choice: index,
                    line,
                    offset,
                    message: without_position(&e),
                }
                .into()),
            },
            Body::Parsed(choice) => convert(*choice, index, line, offset),
            Body::Update(update) => Ok(*update),
        };
        match update {
            Ok(update) => out.push(update),
            Err(error) => {
                result = Err(DecodeError {
                    error,
                    line,
                    after: total - k as u64 - 1,
                    after_line: updates.next().map_or(0, |(_, u)| u.line),
                });
                break;
            }
        }
    }
    // The rest of a failed batch is dropped with the drain (counted in `after`).
    drop(updates);
    text.clear();
    result
}

/// serde_json's message without its " at line L column C": the position is within the
/// choice's rebuilt fields, not the stream, so the error names the stream line instead.
fn without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message,
    }
}

fn non_empty(s: Option<std::borrow::Cow<'_, str>>) -> Option<Text> {
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

/// One parsed chunk choice as an update: empty ids, names, types and roles dropped,
/// `finish_reason: ""` as none, every text one shared [`Text`].
pub(crate) fn convert(
    choice: ChunkChoice<'_>,
    index: u32,
    line: u64,
    offset: u64,
) -> Result<ChoiceUpdate, Error> {
    let mut update = ChoiceUpdate {
        line,
        offset,
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
            let call_index = match call.index {
                None => None,
                Some(i) => Some(u32::try_from(i).map_err(|_| ErrorDetail::InvalidToolCall {
                    choice: index,
                    what: format!("tool call index {i} is out of range (0..=4294967295)"),
                    line,
                    offset,
                })?),
            };
            update.tool_calls.push(ToolFragment {
                index: call_index,
                id: non_empty(call.id),
                kind: non_empty(call.kind),
                function: fragment(call.function),
            });
        }
    }
    Ok(update)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(jsons: &[&str]) -> Batch {
        let mut b = Batch::default();
        for (k, j) in jsons.iter().enumerate() {
            let start = b.text.len();
            b.text.push_str(j);
            b.updates.push(RawUpdate {
                line: 10 + k as u64,
                offset: 100 * k as u64,
                body: Body::Json(start..b.text.len()),
            });
        }
        b
    }

    #[test]
    fn parses_a_batch_in_order() {
        let mut out = Vec::new();
        decode_batch(
            3,
            &mut batch(&[
                r#"{"delta":{"role":"assistant","content":"a"}}"#,
                r#"{"delta":{"role":"","tool_calls":[{"index":0,"id":"","function":{"name":"","arguments":""}}]},"finish_reason":""}"#,
                r#"{"delta":{"content":"b"},"finish_reason":"stop"}"#,
            ]),
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].content.as_deref(), Some("a"));
        assert_eq!(out[1].role, None);
        assert_eq!(out[1].finish_reason, None);
        assert_eq!(out[1].tool_calls[0].id, None);
        assert_eq!(out[1].tool_calls[0].function.name, None);
        assert_eq!((out[2].line, out[2].offset), (12, 200));
        assert_eq!(out[2].finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn a_parsed_batch_is_left_empty_with_its_buffers() {
        for jsons in [
            &[
                r#"{"delta":{"content":"a"}}"#,
                r#"{"delta":{"content":"b"}}"#,
            ][..],
            // A malformed update ends the parse; what follows it is emptied all the same.
            &[r#"{"delta":{"content":5}}"#, r#"{"delta":{"content":"b"}}"#][..],
        ] {
            let mut b = batch(jsons);
            let (text, updates) = (b.text.capacity(), b.updates.capacity());
            let _ = decode_batch(0, &mut b, &mut Vec::new());
            assert!(b.is_empty() && b.text.is_empty(), "{jsons:?}");
            assert_eq!((b.text.capacity(), b.updates.capacity()), (text, updates));
        }
    }

    #[test]
    fn malformed_updates_are_the_choices_own_typed_errors() {
        for (json, what) in [
            (r#"{"delta":{"content":5}}"#, "invalid type: integer `5`"),
            (r#"{"delta":"x"}"#, "expected a JSON object"),
            (
                r#"{"delta":{"tool_calls":{"index":0}}}"#,
                "expected a sequence",
            ),
            (r#"{"finish_reason":7}"#, "invalid type: integer `7`"),
        ] {
            let mut out = Vec::new();
            let e = decode_batch(
                2,
                &mut batch(&[r#"{"delta":{"content":"kept"}}"#, json]),
                &mut out,
            )
            .unwrap_err()
            .error;
            match e.detail() {
                ErrorDetail::InvalidUpdate {
                    choice: 2,
                    line: 11,
                    offset: 100,
                    message,
                } => assert!(
                    message.contains(what) && !message.contains("column"),
                    "{json}: {message}"
                ),
                other => panic!("{json}: {other:?}"),
            }
            assert_eq!(out.len(), 1, "the update before the bad one is kept");
        }
        let mut out = Vec::new();
        let e = decode_batch(
            1,
            &mut batch(&[r#"{"delta":{"tool_calls":[{"index":-4}]}}"#]),
            &mut out,
        )
        .unwrap_err()
        .error;
        assert!(
            matches!(
                e.detail(),
                ErrorDetail::InvalidToolCall {
                    choice: 1,
                    line: 10,
                    offset: 0,
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
