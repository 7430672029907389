//! The Anthropic Messages API's events, read as one choice.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Calls, Decoded, EventReader, one_choice, str_at, u32_at};
use crate::error::Error;
use crate::merge::{ChoiceUpdate, text};

/// The reader of an Anthropic Messages stream: its one choice's tool calls (custom tools'
/// among them) and its usage so far.
#[derive(Debug, Default)]
pub struct AnthropicEvents {
    calls: Calls,
    /// The request's custom tools, which an Anthropic upstream was sent as tools of one
    /// string, `input`: their calls are given back as custom calls.
    custom_names: Arc<[String]>,
    /// Input tokens of `message_start`, output tokens of the last `message_delta`.
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl EventReader for AnthropicEvents {
    fn new(custom_tools: &Arc<[String]>) -> Option<Self> {
        Some(AnthropicEvents {
            custom_names: Arc::clone(custom_tools),
            ..AnthropicEvents::default()
        })
    }

    fn event(
        &mut self,
        typed: Option<&str>,
        event: &str,
        data: &Value,
        at: (u64, u64),
    ) -> Result<Decoded, Error> {
        let kind = typed.unwrap_or(event);
        let mut out = one_choice(kind, data, at, |update, out| {
            self.anthropic(kind, data, update, out)
        })?;
        // `message_stop` ends the message, its stop reason or not.
        out.ends_message = kind == "message_stop";
        Ok(out)
    }
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

impl AnthropicEvents {
    pub(super) fn anthropic(
        &mut self,
        kind: &str,
        data: &Value,
        update: &mut ChoiceUpdate,
        out: &mut Decoded,
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
                        self.calls
                            .call(update, index, (str_at(block, &["id"]), name), custom);
                        // A block may carry its whole input (`{}` when empty) at its start.
                        let whole = block
                            .get("input")
                            .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                        match (whole, custom) {
                            (Some(input), false) => {
                                self.calls.fragmented.insert(index);
                                Calls::fragment(update, index, &input.to_string());
                            }
                            (whole, true) => {
                                let json = whole.map(Value::to_string).unwrap_or_default();
                                self.calls.custom_json.insert(index, json);
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
                        let Some(index) = index.filter(|i| self.calls.calls.contains(i)) else {
                            return Ok(false);
                        };
                        let json = delta["partial_json"].as_str().unwrap_or_default();
                        if json.is_empty() || self.calls.done.contains(&index) {
                            return Ok(false);
                        }
                        if let Some(whole) = self.calls.custom_json.get_mut(&index) {
                            // A custom tool's input is given whole when its block stops.
                            whole.push_str(json);
                            return Ok(false);
                        }
                        self.calls.fragmented.insert(index);
                        Calls::fragment(update, index, json);
                    }
                    // The signature of a thinking block, and citations: nothing to merge.
                    _ => return Ok(false),
                }
            }
            "content_block_stop" => {
                let Some(index) = index else {
                    return Ok(false);
                };
                self.calls.finish_call(update, index, None);
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
                for index in self.calls.calls.clone() {
                    self.calls.finish_call(update, index, None);
                }
                update.finish_reason = Some(text(anthropic_finish(reason)));
                update.stop_reason = Some(text(reason));
            }
            _ => {
                out.unknown = true;
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `message_stop`: the usage (the finish came with `message_delta`'s stop reason).
    fn anthropic_stop(
        &mut self,
        update: &mut ChoiceUpdate,
        out: &mut Decoded,
    ) -> Result<bool, Error> {
        for index in self.calls.calls.clone() {
            self.calls.finish_call(update, index, None);
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
