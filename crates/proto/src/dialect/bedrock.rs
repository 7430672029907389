//! AWS Bedrock's ConverseStream events, read as one choice. Each event's type is its
//! event-stream message's `:event-type` header; its payload is the JSON read here.
//!
//! | Bedrock | becomes |
//! |---|---|
//! | `messageStart` | the role |
//! | `contentBlockDelta` `text` | content |
//! | `contentBlockDelta` `reasoningContent.text` | reasoning (its `signature`: nothing to merge) |
//! | `contentBlockStart` `toolUse` | a tool call (`toolUseId`, `name`), keyed by `contentBlockIndex` |
//! | `contentBlockDelta` `toolUse.input` | argument fragments |
//! | `contentBlockStop` | the call's `Finished`, exactly then |
//! | `messageStop` `stopReason` (`end_turn`, `stop_sequence` → `stop`; `tool_use` → `tool_calls`; `max_tokens` → `length`; `guardrail_intervened`, `content_filtered` → `content_filter`; others kept as sent) | the finish; the message ends |
//! | `metadata` `usage` (`inputTokens`, `outputTokens`), after `messageStop` | reported usage |
//! | an exception message (`:message-type: exception`) | [`ErrorDetail::Upstream`](crate::ErrorDetail::Upstream), read by the framing |

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Calls, Decoded, EventReader, one_choice, str_at, u32_at};
use crate::error::Error;
use crate::merge::{ChoiceUpdate, text};

/// The event types of ConverseStream.
pub(crate) const EVENT_TYPES: [&str; 6] = [
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
];

/// The reader of a Bedrock ConverseStream: its one choice's tool calls (custom tools'
/// among them).
#[derive(Debug, Default)]
pub struct BedrockEvents {
    calls: Calls,
    /// The request's custom tools, which a Bedrock upstream was sent as tools of one
    /// string, `input`: their calls are given back as custom calls.
    custom_names: Arc<[String]>,
}

impl EventReader for BedrockEvents {
    fn new(custom_tools: &Arc<[String]>) -> Option<Self> {
        Some(BedrockEvents {
            custom_names: Arc::clone(custom_tools),
            ..BedrockEvents::default()
        })
    }

    fn event(
        &mut self,
        typed: Option<&str>,
        event: &str,
        data: &Value,
        at: (u64, u64),
    ) -> Result<Decoded, Error> {
        // The payload has no `type`: the message's `:event-type` is the event's.
        let kind = typed.unwrap_or(event);
        let mut out = one_choice(kind, data, at, |update, out| {
            self.read(kind, data, update, out)
        })?;
        out.ends_message = kind == "messageStop";
        Ok(out)
    }
}

/// A Bedrock `stopReason` as a Chat Completions `finish_reason`.
fn finish_of(reason: &str) -> &str {
    match reason {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "guardrail_intervened" | "content_filtered" => "content_filter",
        other => other,
    }
}

impl BedrockEvents {
    fn read(
        &mut self,
        kind: &str,
        data: &Value,
        update: &mut ChoiceUpdate,
        out: &mut Decoded,
    ) -> Result<bool, Error> {
        let index = u32_at(data, "contentBlockIndex");
        match kind {
            "messageStart" => {
                update.role = Some(text(str_at(data, &["role"]).unwrap_or("assistant")));
            }
            "contentBlockStart" => {
                let (Some(index), Some(call)) = (index, data["start"].get("toolUse")) else {
                    return Ok(false);
                };
                let name = str_at(call, &["name"]);
                let custom = name.is_some_and(|n| self.custom_names.iter().any(|c| c == n));
                self.calls
                    .call(update, index, (str_at(call, &["toolUseId"]), name), custom);
                if custom {
                    self.calls.custom_json.insert(index, String::new());
                }
            }
            "contentBlockDelta" => {
                let delta = &data["delta"];
                if let Some(content) = delta["text"].as_str() {
                    update.content = Some(text(content));
                } else if let Some(reasoning) = delta["reasoningContent"]["text"].as_str() {
                    update.reasoning = Some(text(reasoning));
                } else if let Some(json) = delta["toolUse"]["input"].as_str() {
                    let Some(index) = index.filter(|i| self.calls.calls.contains(i)) else {
                        return Ok(false);
                    };
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
                } else {
                    // A reasoning block's signature, a citation: nothing to merge.
                    return Ok(false);
                }
            }
            "contentBlockStop" => {
                let Some(index) = index else {
                    return Ok(false);
                };
                self.calls.finish_call(update, index, None);
            }
            "messageStop" => {
                for index in self.calls.calls.clone() {
                    self.calls.finish_call(update, index, None);
                }
                // A message that stops without its reason has no finish: the choice ends
                // as a Chat Completions choice without its `finish_reason` does (failed).
                if let Some(reason) = str_at(data, &["stopReason"]) {
                    update.finish_reason = Some(text(finish_of(reason)));
                    update.stop_reason = Some(text(reason));
                }
            }
            "metadata" => {
                let usage = &data["usage"];
                let input = usage["inputTokens"].as_u64();
                let output = usage["outputTokens"].as_u64();
                if input.is_some() || output.is_some() {
                    let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
                    out.usage = Some(json!({
                        "prompt_tokens": input,
                        "completion_tokens": output,
                        "total_tokens": input + output,
                    }));
                }
                return Ok(false);
            }
            _ => {
                out.unknown = true;
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::ChoiceUpdate;

    fn read(events: &[(&str, Value)], custom: &[&str]) -> (Vec<ChoiceUpdate>, Option<Value>) {
        let names: Arc<[String]> = custom.iter().map(|s| s.to_string()).collect();
        let mut reader = BedrockEvents::new(&names).unwrap();
        let mut updates = Vec::new();
        let mut usage = None;
        for (k, (kind, data)) in events.iter().enumerate() {
            let decoded = reader.event(None, kind, data, (k as u64, 0)).unwrap();
            assert!(!decoded.unknown, "{kind}");
            updates.extend(decoded.updates.into_iter().map(|(i, u)| {
                assert_eq!(i, 0);
                u
            }));
            usage = decoded.usage.or(usage);
        }
        (updates, usage)
    }

    #[test]
    fn text_reasoning_a_call_its_finish_and_usage() {
        let (updates, usage) = read(
            &[
                ("messageStart", json!({"role": "assistant", "p": "abc"})),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hm"}}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "s"}}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 1, "delta": {"text": "Hi"}}),
                ),
                (
                    "contentBlockStart",
                    json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"a\":"}}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "1}"}}}),
                ),
                ("contentBlockStop", json!({"contentBlockIndex": 2})),
                ("messageStop", json!({"stopReason": "tool_use"})),
                (
                    "metadata",
                    json!({"usage": {"inputTokens": 7, "outputTokens": 5, "totalTokens": 12}}),
                ),
            ],
            &[],
        );
        assert_eq!(updates[0].role.as_deref(), Some("assistant"));
        assert_eq!(updates[1].reasoning.as_deref(), Some("hm"));
        assert_eq!(updates[2].content.as_deref(), Some("Hi"));
        let call = &updates[3].tool_calls[0];
        assert_eq!(
            (call.id.as_deref(), call.function.name.as_deref()),
            (Some("t1"), Some("f"))
        );
        let arguments: String = (updates[4..6].iter())
            .filter_map(|u| u.tool_calls[0].function.arguments.as_deref())
            .collect();
        assert_eq!(arguments, "{\"a\":1}");
        assert_eq!(updates[6].calls_done, [2]);
        assert_eq!(updates[7].finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(updates[7].stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(usage.unwrap()["total_tokens"], 12);
    }

    #[test]
    fn a_call_without_input_gets_an_empty_object_and_a_custom_call_its_text() {
        let (updates, _) = read(
            &[
                (
                    "contentBlockStart",
                    json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t", "name": "f"}}}),
                ),
                ("contentBlockStop", json!({"contentBlockIndex": 0})),
                (
                    "contentBlockStart",
                    json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "u", "name": "patch"}}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"input\": \"*** Be"}}}),
                ),
                (
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "gin\"}"}}}),
                ),
                ("contentBlockStop", json!({"contentBlockIndex": 1})),
                ("messageStop", json!({"stopReason": "tool_use"})),
            ],
            &["patch"],
        );
        assert_eq!(
            updates[1].tool_calls[0].function.arguments.as_deref(),
            Some("{}")
        );
        assert_eq!(updates[2].tool_calls[0].kind.as_deref(), Some("custom"));
        assert_eq!(
            updates[3].tool_calls[0].function.arguments.as_deref(),
            Some("*** Begin")
        );
    }

    #[test]
    fn stop_reasons_are_chat_finishes() {
        for (reason, finish) in [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("guardrail_intervened", "content_filter"),
            ("content_filtered", "content_filter"),
            ("tool_use", "tool_calls"),
            ("something_new", "something_new"),
        ] {
            let (updates, _) = read(&[("messageStop", json!({"stopReason": reason}))], &[]);
            assert_eq!(
                updates[0].finish_reason.as_deref(),
                Some(finish),
                "{reason}"
            );
        }
        let (updates, _) = read(&[("messageStop", json!({}))], &[]);
        assert!(updates[0].finish_reason.is_none());
    }
}
