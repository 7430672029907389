//! Streams of the OpenAI Responses API and the Anthropic Messages API, read as one choice,
//! and of Gemini's API, read as many ([`gemini`]). Pure and synchronous.
//!
//! Neither API has `n`: each stream is one choice (index 0 of its stream). Their typed events
//! map onto the same [`ChoiceUpdate`]s as a Chat Completions chunk, so a choice from any
//! dialect has the same sub-streams, message and errors:
//!
//! | Responses | Anthropic | becomes |
//! |---|---|---|
//! | `response.output_text.delta` | `content_block_delta` / `text_delta` | content |
//! | `response.refusal.delta` | — | refusal |
//! | `response.reasoning_summary_text.delta` | `thinking_delta` | reasoning |
//! | `response.output_item.added` (function call) | `content_block_start` (tool_use) | a tool call (id, name), keyed by `output_index` / block `index` |
//! | `response.output_item.added` (`custom_tool_call`) | `content_block_start` (tool_use of a tool in [`StreamConfig::custom_tools`](crate::StreamConfig::custom_tools)) | a custom tool's call (`type: "custom"`), its input as its arguments |
//! | `response.function_call_arguments.delta`, `response.custom_tool_call_input.delta` | `input_json_delta` (a custom tool's: its `{"input": TEXT}` gathered, TEXT given when the block stops) | argument fragments |
//! | `response.function_call_arguments.done`, `response.custom_tool_call_input.done`, `response.output_item.done` | `content_block_stop` | the call's `Finished`, exactly then |
//! | `response.completed` (`stop` or `tool_calls`), `response.incomplete` (`length`, `content_filter`) | `message_delta` `stop_reason` (`end_turn`, `stop_sequence` → `stop`; `tool_use` → `tool_calls`; `max_tokens` → `length`; `refusal` → `content_filter`; others kept as sent), there and then: a stream cut before `message_stop` finished all the same | the finish (a second one is passed on, and the merge keeps the first) |
//! | `response.failed`, `error` | `error` | [`ErrorDetail::Upstream`](crate::ErrorDetail::Upstream) |
//! | usage of the final response | `message_start` input, `message_delta` output (cumulative) | reported usage |
//!
//! The `type` inside an event's data is the truth, not its `event:` line (some servers write
//! the data line first). Unknown event types are tolerated with a warning; an event of
//! another dialect is an error naming it.

use std::collections::BTreeSet;

use serde_json::Value;

pub use crate::api::Dialect;

mod anthropic;
mod gemini;
mod responses;
use crate::error::{Error, ErrorDetail, UpstreamError};
use crate::event::WarningKind;
use crate::merge::{CallFragment, ChoiceUpdate, ToolFragment, text};

/// The dialect an event's type belongs to, if it is one of the typed dialects.
pub(crate) fn dialect_of(kind: &str) -> Option<Dialect> {
    if kind.starts_with("response.") {
        return Some(Dialect::Responses);
    }
    match kind {
        "message_start"
        | "message_delta"
        | "message_stop"
        | "content_block_start"
        | "content_block_delta"
        | "content_block_stop"
        | "ping" => Some(Dialect::Anthropic),
        _ => None,
    }
}

/// What one event of a typed dialect gave.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    /// The updates the event carried, each with its choice's index (the stream's one
    /// choice, 0, but for Gemini's candidates).
    pub updates: Vec<(u32, ChoiceUpdate)>,
    /// Completion facts, when the event named them.
    pub id: Option<String>,
    pub model: Option<String>,
    pub created: Option<i64>,
    /// The reported usage in Chat Completions' shape, when the event completes it.
    pub usage: Option<Value>,
    pub warning: Option<WarningKind>,
}

/// The state of one typed-dialect stream.
#[derive(Debug, Default)]
pub(crate) struct DialectDecoder {
    /// Output items (Responses) or content blocks (Anthropic) that are tool calls, by index.
    calls: BTreeSet<u32>,
    /// Calls whose arguments arrived as fragments.
    fragmented: BTreeSet<u32>,
    /// Calls already finished.
    done: BTreeSet<u32>,
    /// Calls that are custom tools' calls (their arguments the tool's free-text input).
    custom: BTreeSet<u32>,
    /// The request's custom tools, which an Anthropic upstream was sent as tools of one
    /// string, `input`: their calls are given back as custom calls.
    custom_names: std::sync::Arc<[String]>,
    /// Anthropic: the `{"input": ...}` of a custom tool's call while it arrives; its input
    /// is its one fragment when the block stops.
    custom_json: std::collections::BTreeMap<u32, String>,
    /// Anthropic: input tokens of `message_start`, output tokens of the last `message_delta`.
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    /// Responses: a `response.completed` or `response.incomplete` came.
    ended: bool,
    /// Unknown event types already warned about (once each).
    unknown: BTreeSet<String>,
    /// Gemini: each candidate's state.
    gemini: gemini::Candidates,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn u32_at(v: &Value, key: &str) -> Option<u32> {
    v.get(key)?.as_u64().and_then(|i| u32::try_from(i).ok())
}

fn upstream(value: &Value, line: u64) -> Error {
    Error::from(ErrorDetail::Upstream(std::sync::Arc::new(
        UpstreamError::from_value(value, line),
    )))
}

impl DialectDecoder {
    /// A decoder that gives calls of `custom_names` (tools an Anthropic upstream was sent
    /// as functions of one string, `input`) back as custom tools' calls.
    pub fn new(custom_names: std::sync::Arc<[String]>) -> Self {
        DialectDecoder {
            custom_names,
            ..DialectDecoder::default()
        }
    }

    /// One event of `dialect`, its data parsed; `kind` its `type`.
    pub fn event(
        &mut self,
        dialect: Dialect,
        kind: &str,
        data: &Value,
        (line, offset): (u64, u64),
    ) -> Result<Decoded, Error> {
        if dialect == Dialect::Gemini {
            return self.gemini.record(data, (line, offset));
        }
        if kind == "error" {
            return Err(upstream(data, line));
        }
        let mut update = ChoiceUpdate {
            line,
            offset,
            ..ChoiceUpdate::default()
        };
        let mut out = Decoded::default();
        let touched = match dialect {
            Dialect::Responses => self.responses(kind, data, &mut update, &mut out, line)?,
            _ => self.anthropic(kind, data, &mut update, &mut out, line)?,
        };
        if touched {
            out.updates.push((0, update));
        }
        Ok(out)
    }

    /// Opens a tool call at `index` (a custom tool's call when `custom`).
    pub(super) fn call(
        &mut self,
        update: &mut ChoiceUpdate,
        index: u32,
        (id, name): (Option<&str>, Option<&str>),
        custom: bool,
    ) {
        self.calls.insert(index);
        if custom {
            self.custom.insert(index);
        }
        update.tool_calls.push(ToolFragment {
            index: Some(index),
            id: id.filter(|s| !s.is_empty()).map(text),
            kind: Some(text(if custom { "custom" } else { "function" })),
            function: CallFragment {
                name: name.filter(|s| !s.is_empty()).map(text),
                arguments: None,
                arguments_not_string: false,
            },
        });
    }

    pub(super) fn fragment(update: &mut ChoiceUpdate, index: u32, arguments: &str) {
        update.tool_calls.push(ToolFragment {
            index: Some(index),
            function: CallFragment {
                arguments: Some(text(arguments)),
                ..CallFragment::default()
            },
            ..ToolFragment::default()
        });
    }

    /// Finishes call `index` now (with `all` as its whole arguments when none came as
    /// fragments, or `{}` for a call without arguments; a custom tool's: its input, or
    /// none).
    pub(super) fn finish_call(&mut self, update: &mut ChoiceUpdate, index: u32, all: Option<&str>) {
        if !self.calls.contains(&index) || !self.done.insert(index) {
            return;
        }
        if let Some(json) = self.custom_json.remove(&index) {
            // An Anthropic call of a custom tool: the input of its `{"input": TEXT}`, or
            // the text as it came when it is not that object.
            #[derive(serde::Deserialize)]
            struct Input {
                input: String,
            }
            let input = serde_json::from_str::<Input>(&json).map_or(json, |i| i.input);
            Self::fragment(update, index, &input);
        } else if !self.fragmented.contains(&index) {
            let none = if self.custom.contains(&index) {
                ""
            } else {
                "{}"
            };
            Self::fragment(update, index, all.unwrap_or(none));
        }
        update.calls_done.push(index);
    }

    /// An event this dialect does not know: another dialect's is an error naming it,
    /// anything else is skipped with a warning (once per type).
    pub(super) fn foreign(
        &mut self,
        kind: &str,
        mine: Dialect,
        out: &mut Decoded,
        line: u64,
    ) -> Result<bool, Error> {
        match dialect_of(kind) {
            Some(other) if other != mine => Err(Error::from(ErrorDetail::WrongDialect {
                expected: mine,
                found: kind.to_string(),
                line,
            })),
            _ => {
                if self.unknown.insert(kind.to_string()) {
                    out.warning = Some(WarningKind::UnknownEvent {
                        kind: kind.to_string(),
                    });
                }
                Ok(false)
            }
        }
    }
}
