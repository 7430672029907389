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

use serde_json::{Value, json};

pub use crate::api::Dialect;

mod gemini;
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

/// An Anthropic `stop_reason` as a Chat Completions `finish_reason`: `end_turn` and
/// `stop_sequence` are `stop`, `tool_use` is `tool_calls`, `max_tokens` is `length`,
/// `refusal` is `content_filter`; any other kept as sent.
fn anthropic_finish(reason: &str) -> &str {
    match reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
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
    fn call(
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

    fn fragment(update: &mut ChoiceUpdate, index: u32, arguments: &str) {
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
    fn finish_call(&mut self, update: &mut ChoiceUpdate, index: u32, all: Option<&str>) {
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

    fn responses(
        &mut self,
        kind: &str,
        data: &Value,
        update: &mut ChoiceUpdate,
        out: &mut Decoded,
        line: u64,
    ) -> Result<bool, Error> {
        let output_index = u32_at(data, "output_index");
        match kind {
            "response.created" | "response.in_progress" => {
                let r = &data["response"];
                out.id = str_at(r, &["id"]).map(str::to_string);
                out.model = str_at(r, &["model"]).map(str::to_string);
                out.created = r.get("created_at").and_then(Value::as_i64);
                return Ok(false);
            }
            "response.output_item.added" => {
                let item = &data["item"];
                let Some(index) = output_index else {
                    return Ok(false);
                };
                match str_at(item, &["type"]) {
                    Some(kind @ ("function_call" | "custom_tool_call")) => {
                        let named = (str_at(item, &["call_id"]), str_at(item, &["name"]));
                        self.call(update, index, named, kind == "custom_tool_call");
                    }
                    Some("message") => update.role = Some(text("assistant")),
                    _ => return Ok(false),
                }
            }
            "response.output_text.delta" => {
                update.content = data.get("delta").and_then(Value::as_str).map(text);
            }
            "response.refusal.delta" => {
                update.refusal = data.get("delta").and_then(Value::as_str).map(text);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                update.reasoning = data.get("delta").and_then(Value::as_str).map(text);
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                let (Some(index), Some(delta)) = (output_index, data["delta"].as_str()) else {
                    return Ok(false);
                };
                if !self.calls.contains(&index) || self.done.contains(&index) {
                    return Ok(false);
                }
                self.fragmented.insert(index);
                Self::fragment(update, index, delta);
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done" => {
                let Some(index) = output_index else {
                    return Ok(false);
                };
                let all = data["arguments"].as_str().or(data["input"].as_str());
                self.finish_call(update, index, all);
            }
            "response.output_item.done" => {
                let item = &data["item"];
                let Some(index) = output_index else {
                    return Ok(false);
                };
                if str_at(item, &["type"]) == Some("function_call") {
                    self.finish_call(update, index, item["arguments"].as_str());
                } else if str_at(item, &["type"]) == Some("custom_tool_call") {
                    self.finish_call(update, index, item["input"].as_str());
                } else {
                    return Ok(false);
                }
            }
            "response.completed" | "response.incomplete" => {
                let r = &data["response"];
                out.id = str_at(r, &["id"]).map(str::to_string);
                out.model = str_at(r, &["model"]).map(str::to_string);
                // The usage goes with the finish kept, the first.
                let first = !std::mem::replace(&mut self.ended, true);
                if let Some(u) = r.get("usage").filter(|u| u.is_object() && first) {
                    let input = u["input_tokens"].as_u64().unwrap_or(0);
                    let output = u["output_tokens"].as_u64().unwrap_or(0);
                    out.usage = Some(json!({
                        "prompt_tokens": input,
                        "completion_tokens": output,
                        "total_tokens": u["total_tokens"].as_u64().unwrap_or(input + output),
                    }));
                }
                for index in self.calls.clone() {
                    self.finish_call(update, index, None);
                }
                let raw = match kind {
                    "response.completed" => "completed",
                    _ => str_at(r, &["incomplete_details", "reason"]).unwrap_or("incomplete"),
                };
                let reason = match (kind, raw) {
                    ("response.completed", _) if self.calls.is_empty() => "stop",
                    ("response.completed", _) => "tool_calls",
                    (_, "content_filter") => "content_filter",
                    _ => "length",
                };
                update.finish_reason = Some(text(reason));
                update.stop_reason = Some(text(raw));
            }
            "response.failed" => {
                let r = &data["response"];
                let error = r.get("error").filter(|e| e.is_object()).unwrap_or(r);
                return Err(upstream(&json!({ "error": error }), line));
            }
            // Known events with nothing to merge (their content came as deltas).
            "response.content_part.added"
            | "response.content_part.done"
            | "response.output_text.done"
            | "response.output_text.annotation.added"
            | "response.refusal.done"
            | "response.reasoning_summary_part.added"
            | "response.reasoning_summary_part.done"
            | "response.reasoning_summary_text.done"
            | "response.reasoning_text.done"
            | "response.queued" => return Ok(false),
            other => return self.foreign(other, Dialect::Responses, out, line),
        }
        Ok(true)
    }

    fn anthropic(
        &mut self,
        kind: &str,
        data: &Value,
        update: &mut ChoiceUpdate,
        out: &mut Decoded,
        line: u64,
    ) -> Result<bool, Error> {
        let index = u32_at(data, "index");
        match kind {
            "ping" | "message_stop" => {
                if kind == "message_stop" {
                    return self.anthropic_stop(update, out);
                }
                return Ok(false);
            }
            "message_start" => {
                let m = &data["message"];
                out.id = str_at(m, &["id"]).map(str::to_string);
                out.model = str_at(m, &["model"]).map(str::to_string);
                self.input_tokens = m["usage"]["input_tokens"].as_u64();
                update.role = Some(text(str_at(m, &["role"]).unwrap_or("assistant")));
            }
            "content_block_start" => {
                let block = &data["content_block"];
                let Some(index) = index else {
                    return Ok(false);
                };
                match str_at(block, &["type"]) {
                    Some(kind @ ("tool_use" | "server_tool_use")) => {
                        let name = str_at(block, &["name"]);
                        let custom = kind == "tool_use"
                            && name.is_some_and(|n| self.custom_names.iter().any(|c| c == n));
                        self.call(update, index, (str_at(block, &["id"]), name), custom);
                        // A block may carry its whole input (`{}` when empty) at its start.
                        let whole = block
                            .get("input")
                            .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                        match (whole, custom) {
                            (Some(input), false) => {
                                self.fragmented.insert(index);
                                Self::fragment(update, index, &input.to_string());
                            }
                            (whole, true) => {
                                let json = whole.map(Value::to_string).unwrap_or_default();
                                self.custom_json.insert(index, json);
                            }
                            (None, false) => {}
                        }
                    }
                    Some("text") => {
                        update.content = block["text"].as_str().filter(|t| !t.is_empty()).map(text);
                    }
                    Some("thinking") => {
                        update.reasoning = block["thinking"]
                            .as_str()
                            .filter(|t| !t.is_empty())
                            .map(text);
                    }
                    _ => return Ok(false),
                }
            }
            "content_block_delta" => {
                let delta = &data["delta"];
                match str_at(delta, &["type"]) {
                    Some("text_delta") => update.content = delta["text"].as_str().map(text),
                    Some("thinking_delta") => {
                        update.reasoning = delta["thinking"].as_str().map(text);
                    }
                    Some("input_json_delta") => {
                        let Some(index) = index.filter(|i| self.calls.contains(i)) else {
                            return Ok(false);
                        };
                        let json = delta["partial_json"].as_str().unwrap_or_default();
                        if json.is_empty() || self.done.contains(&index) {
                            return Ok(false);
                        }
                        if let Some(whole) = self.custom_json.get_mut(&index) {
                            // A custom tool's input is given whole when its block stops.
                            whole.push_str(json);
                            return Ok(false);
                        }
                        self.fragmented.insert(index);
                        Self::fragment(update, index, json);
                    }
                    // The signature of a thinking block, and citations: nothing to merge.
                    _ => return Ok(false),
                }
            }
            "content_block_stop" => {
                let Some(index) = index else {
                    return Ok(false);
                };
                self.finish_call(update, index, None);
            }
            "message_delta" => {
                let usage = &data["usage"];
                if let Some(n) = usage["output_tokens"].as_u64() {
                    self.output_tokens = Some(n);
                }
                if let Some(n) = usage["input_tokens"].as_u64() {
                    self.input_tokens = Some(n);
                }
                let Some(reason) = str_at(data, &["delta", "stop_reason"]) else {
                    return Ok(false);
                };
                // The stop reason is the choice's finish, there and then: a stream cut
                // before its `message_stop` finished all the same (as a Chat Completions
                // choice whose `finish_reason` came before a missing `[DONE]`). A second
                // one is passed on as a second finish, which the merge leaves out.
                for index in self.calls.clone() {
                    self.finish_call(update, index, None);
                }
                update.finish_reason = Some(text(anthropic_finish(reason)));
                update.stop_reason = Some(text(reason));
            }
            other => return self.foreign(other, Dialect::Anthropic, out, line),
        }
        Ok(true)
    }

    /// An event this dialect does not know: another dialect's is an error naming it,
    /// anything else is skipped with a warning (once per type).
    fn foreign(
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

    /// `message_stop`: the usage (the finish came with `message_delta`'s stop reason).
    fn anthropic_stop(
        &mut self,
        update: &mut ChoiceUpdate,
        out: &mut Decoded,
    ) -> Result<bool, Error> {
        for index in self.calls.clone() {
            self.finish_call(update, index, None);
        }
        // The finish came with `message_delta`'s stop reason. A message that stops
        // without one has no finish: the choice ends as a Chat Completions choice whose
        // stream ended without its `finish_reason` does (failed), never as a clean stop.
        if self.input_tokens.is_some() || self.output_tokens.is_some() {
            let input = self.input_tokens.unwrap_or(0);
            let output = self.output_tokens.unwrap_or(0);
            out.usage = Some(json!({
                "prompt_tokens": input,
                "completion_tokens": output,
                "total_tokens": input + output,
            }));
        }
        Ok(true)
    }
}
