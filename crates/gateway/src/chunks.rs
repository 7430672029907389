//! A choice's events as OpenAI `chat.completion.chunk` deltas, renumbered for the client.

use choicewise_core::{CallKind, ChoiceEvent, FunctionCallEvent};
use serde_json::{Value, json};

/// Turns one output choice's events into the `choices[]` elements of chunks.
#[derive(Debug)]
pub(crate) struct ChoiceChunks {
    /// The index the client sees.
    pub index: u32,
    /// The role was sent (the first chunk of a choice carries it).
    role_sent: bool,
    /// The choice's `finish_reason` was sent.
    pub finished: bool,
}

impl ChoiceChunks {
    pub fn new(index: u32) -> Self {
        ChoiceChunks {
            index,
            role_sent: false,
            finished: false,
        }
    }

    fn element(&mut self, mut delta: Value, finish: Option<&str>) -> Value {
        if !self.role_sent {
            self.role_sent = true;
            if delta.get("role").is_none() {
                delta["role"] = json!("assistant");
            }
        }
        if finish.is_some() {
            self.finished = true;
        }
        json!({"index": self.index, "delta": delta, "logprobs": null, "finish_reason": finish})
    }

    /// The element for one event, if it shows in a chunk.
    pub fn event(&mut self, event: &ChoiceEvent) -> Option<Value> {
        let delta = match event {
            ChoiceEvent::Role(role) => json!({"role": &**role, "content": ""}),
            ChoiceEvent::Content(t) => json!({"content": &**t}),
            ChoiceEvent::Reasoning(t) => json!({"reasoning_content": &**t}),
            ChoiceEvent::Refusal(t) => json!({"refusal": &**t}),
            ChoiceEvent::FunctionCall(call) => match call {
                FunctionCallEvent::Started { call, id, name } => match call.kind {
                    CallKind::Tool => json!({"tool_calls": [{
                        "index": call.position,
                        "id": id.as_deref().unwrap_or_default(),
                        "type": "function",
                        "function": {"name": name.as_deref().unwrap_or_default(), "arguments": ""},
                    }]}),
                    _ => {
                        json!({"function_call": {"name": name.as_deref().unwrap_or_default(), "arguments": ""}})
                    }
                },
                FunctionCallEvent::Arguments { call, fragment } => match call.kind {
                    CallKind::Tool => json!({"tool_calls": [{
                        "index": call.position,
                        "function": {"arguments": &**fragment},
                    }]}),
                    _ => json!({"function_call": {"arguments": &**fragment}}),
                },
                _ => return None,
            },
            ChoiceEvent::Finished(reason) => return Some(self.element(json!({}), Some(reason))),
            _ => return None,
        };
        Some(self.element(delta, None))
    }

    /// The element ending a choice that failed (or was cut short): `finish_reason: "error"`,
    /// and what went wrong in `choicewise.error`.
    pub fn failed(&mut self, message: &str) -> Value {
        let mut element = self.element(json!({}), Some("error"));
        element["choicewise"] = json!({"error": message});
        element
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use choicewise_core::CallRef;

    #[test]
    fn events_become_openai_deltas() {
        let mut c = ChoiceChunks::new(2);
        let first = c.event(&ChoiceEvent::Content("Hi".into())).unwrap();
        assert_eq!(
            first,
            json!({"index": 2, "delta": {"role": "assistant", "content": "Hi"}, "logprobs": null, "finish_reason": null})
        );
        let call = CallRef {
            kind: CallKind::Tool,
            position: 1,
        };
        let started = c
            .event(&ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
                call,
                id: Some("call_1".into()),
                name: Some("get_weather".into()),
            }))
            .unwrap();
        assert_eq!(started["delta"]["tool_calls"][0]["index"], 1);
        assert_eq!(
            started["delta"]["tool_calls"][0]["function"]["name"],
            "get_weather"
        );
        assert!(started["delta"].get("role").is_none());
        let fragment = c
            .event(&ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
                call,
                fragment: "{\"city\"".into(),
            }))
            .unwrap();
        assert_eq!(
            fragment["delta"]["tool_calls"][0]["function"]["arguments"],
            "{\"city\""
        );
        let done = c
            .event(&ChoiceEvent::Finished("tool_calls".into()))
            .unwrap();
        assert_eq!(done["finish_reason"], "tool_calls");
        assert!(c.finished);
        let mut d = ChoiceChunks::new(0);
        let failed = d.failed("the connection closed");
        assert_eq!(failed["finish_reason"], "error");
        assert_eq!(failed["choicewise"]["error"], "the connection closed");
    }
}
