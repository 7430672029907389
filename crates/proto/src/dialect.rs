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
//! another dialect is an error naming it (both decided by the list of upstream APIs,
//! `upstream.rs`, which knows every API's events).
//!
//! Each API's reader is its own type ([`ResponsesEvents`], [`AnthropicEvents`],
//! [`gemini::Candidates`]) implementing [`EventReader`]; the tool-call bookkeeping the
//! one-choice readers share is [`Calls`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

pub use crate::api::Dialect;

mod anthropic;
pub(crate) mod bedrock;
pub(crate) mod gemini;
mod responses;

pub use anthropic::AnthropicEvents;
pub use bedrock::BedrockEvents;
pub use responses::ResponsesEvents;

use crate::error::{Error, ErrorDetail, UpstreamError};
use crate::event::WarningKind;
use crate::merge::{CallFragment, ChoiceUpdate, ToolFragment, text};

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
    /// The running usage of the whole request, every choice's (Gemini's `usageMetadata`):
    /// the last one is the usage.
    pub shared_usage: Option<Value>,
    /// The event ends the message (Anthropic's `message_stop`): its choices end, a finish
    /// reason or not.
    pub ends_message: bool,
    /// The event's type is not one this API knows (another API's, or none's).
    pub unknown: bool,
    pub warning: Option<WarningKind>,
}

/// One upstream API's event reader: the state of one stream of its events, each parsed
/// (a typed dialect's; Chat Completions' chunks are the splitter's own). Each API's
/// implementation is a type of its own, so that a stream's events are read by a `match`
/// on the reader, never a dynamic call per event.
pub trait EventReader: std::fmt::Debug + Sized {
    /// Whether the API's events are read by a reader of this type (false for Chat
    /// Completions, whose chunks the splitter reads itself).
    const TYPED: bool = true;

    /// The reader of a new stream; `custom_tools` the request's custom tools (whose calls
    /// an upstream that has no custom tools was sent as functions of one string). None for
    /// an API without one ([`EventReader::TYPED`] false).
    fn new(custom_tools: &Arc<[String]>) -> Option<Self>;

    /// One event, its data parsed: `typed` the `type` in its data, `event` its `event:`
    /// line (empty when none), `at` its line and offset.
    fn event(
        &mut self,
        typed: Option<&str>,
        event: &str,
        data: &Value,
        at: (u64, u64),
    ) -> Result<Decoded, Error>;
}

/// Chat Completions' events have no reader of this kind: its chunks are the splitter's
/// (`scan.rs`, `split.rs`). No value of this type exists.
#[derive(Debug)]
pub enum Chunks {}

impl EventReader for Chunks {
    const TYPED: bool = false;

    fn new(_: &Arc<[String]>) -> Option<Self> {
        None
    }

    fn event(
        &mut self,
        _: Option<&str>,
        _: &str,
        _: &Value,
        _: (u64, u64),
    ) -> Result<Decoded, Error> {
        match *self {}
    }
}

/// The tool calls of a one-choice stream (Responses' output items, Anthropic's content
/// blocks), by index.
#[derive(Debug, Default)]
pub struct Calls {
    /// Output items (Responses) or content blocks (Anthropic) that are tool calls, by index.
    calls: BTreeSet<u32>,
    /// Calls whose arguments arrived as fragments.
    fragmented: BTreeSet<u32>,
    /// Calls already finished.
    done: BTreeSet<u32>,
    /// Calls that are custom tools' calls (their arguments the tool's free-text input).
    custom: BTreeSet<u32>,
    /// Anthropic: the `{"input": ...}` of a custom tool's call while it arrives; its input
    /// is its one fragment when the block stops.
    custom_json: BTreeMap<u32, String>,
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

/// One event of a one-choice API (`kind` its type): an `error` event is the upstream's
/// error; else `read` fills the choice's update and the event's facts, and says whether
/// the update carries anything.
fn one_choice(
    kind: &str,
    data: &Value,
    (line, offset): (u64, u64),
    read: impl FnOnce(&mut ChoiceUpdate, &mut Decoded) -> Result<bool, Error>,
) -> Result<Decoded, Error> {
    if kind == "error" {
        return Err(upstream(data, line));
    }
    let mut update = ChoiceUpdate {
        line,
        offset,
        ..ChoiceUpdate::default()
    };
    let mut out = Decoded::default();
    if read(&mut update, &mut out)? {
        out.updates.push((0, update));
    }
    Ok(out)
}

impl Calls {
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
}
