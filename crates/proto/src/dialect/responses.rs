//! The OpenAI Responses API's typed events, read as one choice.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Calls, Decoded, EventReader, one_choice, str_at, u32_at, upstream};
use crate::error::Error;
use crate::merge::{ChoiceUpdate, text};

/// The reader of a Responses stream: its one choice's tool calls, and whether it ended.
#[derive(Debug, Default)]
pub struct ResponsesEvents {
    calls: Calls,
    /// A `response.completed` or `response.incomplete` came.
    ended: bool,
}

impl EventReader for ResponsesEvents {
    fn new(_: &Arc<[String]>) -> Option<Self> {
        Some(ResponsesEvents::default())
    }

    fn event(
        &mut self,
        typed: Option<&str>,
        event: &str,
        data: &Value,
        at: (u64, u64),
    ) -> Result<Decoded, Error> {
        let kind = typed.unwrap_or(event);
        one_choice(kind, data, at, |update, out| {
            self.responses(kind, data, update, out, at.0)
        })
    }
}

impl ResponsesEvents {
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
                        self.calls
                            .call(update, index, named, kind == "custom_tool_call");
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
                if !self.calls.calls.contains(&index) || self.calls.done.contains(&index) {
                    return Ok(false);
                }
                self.calls.fragmented.insert(index);
                Calls::fragment(update, index, delta);
            }
            "response.function_call_arguments.done" | "response.custom_tool_call_input.done" => {
                let Some(index) = output_index else {
                    return Ok(false);
                };
                let all = data["arguments"].as_str().or(data["input"].as_str());
                self.calls.finish_call(update, index, all);
            }
            "response.output_item.done" => {
                let item = &data["item"];
                let Some(index) = output_index else {
                    return Ok(false);
                };
                if str_at(item, &["type"]) == Some("function_call") {
                    self.calls
                        .finish_call(update, index, item["arguments"].as_str());
                } else if str_at(item, &["type"]) == Some("custom_tool_call") {
                    self.calls
                        .finish_call(update, index, item["input"].as_str());
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
                for index in self.calls.calls.clone() {
                    self.calls.finish_call(update, index, None);
                }
                let raw = match kind {
                    "response.completed" => "completed",
                    _ => str_at(r, &["incomplete_details", "reason"]).unwrap_or("incomplete"),
                };
                let reason = match (kind, raw) {
                    ("response.completed", _) if self.calls.calls.is_empty() => "stop",
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
            _ => {
                out.unknown = true;
                return Ok(false);
            }
        }
        Ok(true)
    }
}
