//! Gemini's `streamGenerateContent?alt=sse` records, read as many choices.
//!
//! Each record is a whole `GenerateContentResponse`: the `candidates` it advances, each by
//! its `index` (a choice of the stream, in any order), `usageMetadata` (the running counts of
//! the whole request), `modelVersion`, `responseId`, and `promptFeedback` when the prompt was
//! blocked. There are no event names and no end marker.
//!
//! | Gemini | becomes |
//! |---|---|
//! | a candidate's `text` part | content |
//! | a `text` part with `thought: true` | reasoning |
//! | a `functionCall` part | a whole tool call (id, name, `args` as its arguments' text), finished there; its `thoughtSignature` kept in its id, after `__thought__` |
//! | `finishReason` `STOP` | `stop`, or `tool_calls` when the candidate called a function |
//! | `MAX_TOKENS` | `length` |
//! | `SAFETY`, `RECITATION`, `PROHIBITED_CONTENT`, `BLOCKLIST`, `SPII`, `IMAGE_SAFETY`, `IMAGE_PROHIBITED_CONTENT` | `content_filter` |
//! | `MALFORMED_FUNCTION_CALL`, `OTHER` and any other | that choice failed upstream, naming the reason |
//! | `usageMetadata` | reported usage (`thoughtsTokenCount` counted as output) |
//! | `promptFeedback.blockReason`, `{"error": ...}` | [`ErrorDetail::Upstream`](crate::ErrorDetail::Upstream) |

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{Decoded, EventReader, str_at, upstream};
use crate::api::Dialect;
use crate::error::{Error, ErrorDetail};
use crate::merge::{CallFragment, ChoiceUpdate, ToolFragment, text};

/// The state of a Gemini stream: per candidate, the function calls it made so far.
#[derive(Debug)]
pub(crate) struct Candidates {
    /// Candidate index → how many function calls it made (the next call's index).
    calls: BTreeMap<u32, u32>,
    /// This stream's own part of the ids of its calls ([`stream_token`]).
    token: String,
}

impl Default for Candidates {
    fn default() -> Self {
        Candidates {
            calls: BTreeMap::new(),
            token: stream_token(),
        }
    }
}

/// A token no other stream of this process has, nor (by the clock) one of an earlier run:
/// the microseconds since the epoch and the process's count of streams, in hex, `x` between.
/// Gemini's calls have no id (or one only some models send), and a `responseId` is only as
/// unique as the upstream makes it: the ids made from this are unique whatever it sends.
/// (Two replicas could make the same one only by starting a stream in the same microsecond at
/// the same count.)
fn stream_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STREAMS: AtomicU64 = AtomicU64::new(0);
    let n = STREAMS.fetch_add(1, Ordering::Relaxed);
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    format!("{micros:x}x{n:x}")
}

/// What a Gemini `finishReason` is as a Chat Completions finish: `Ok(reason)`, or `Err` for
/// a candidate that failed upstream.
fn finish(reason: &str, called: bool) -> Result<&'static str, ()> {
    match reason {
        "STOP" if called => Ok("tool_calls"),
        "STOP" => Ok("stop"),
        "MAX_TOKENS" => Ok("length"),
        "SAFETY"
        | "RECITATION"
        | "PROHIBITED_CONTENT"
        | "BLOCKLIST"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT" => Ok("content_filter"),
        _ => Err(()),
    }
}

/// `usageMetadata` in Chat Completions' shape: thoughts are output tokens (as billed),
/// also given as `completion_tokens_details.reasoning_tokens`; cached tokens as
/// `prompt_tokens_details.cached_tokens`.
fn usage(u: &Value) -> Option<Value> {
    let n = |key: &str| u.get(key).and_then(Value::as_u64);
    let prompt = n("promptTokenCount");
    let candidates = n("candidatesTokenCount");
    let thoughts = n("thoughtsTokenCount");
    if prompt.is_none() && candidates.is_none() && thoughts.is_none() {
        return None;
    }
    let (prompt, candidates, thoughts) = (
        prompt.unwrap_or(0),
        candidates.unwrap_or(0),
        thoughts.unwrap_or(0),
    );
    let completion = candidates.saturating_add(thoughts);
    let mut out = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": n("totalTokenCount").unwrap_or(prompt.saturating_add(completion)),
    });
    if thoughts > 0 {
        out["completion_tokens_details"] = json!({"reasoning_tokens": thoughts});
    }
    if let Some(cached) = n("cachedContentTokenCount") {
        out["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    Some(out)
}

impl EventReader for Candidates {
    fn new(_: &std::sync::Arc<[String]>) -> Option<Self> {
        Some(Candidates::default())
    }

    /// A record has no `type` (one is another API's event) and no event name; its
    /// `usageMetadata` is the running count of the whole request, all candidates'.
    fn event(
        &mut self,
        typed: Option<&str>,
        _: &str,
        data: &Value,
        at: (u64, u64),
    ) -> Result<Decoded, Error> {
        if let Some(kind) = typed {
            return Err(Error::from(ErrorDetail::WrongDialect {
                expected: Dialect::Gemini,
                found: kind.to_string(),
                line: at.0,
            }));
        }
        let mut out = self.record(data, at)?;
        out.shared_usage = out.usage.take();
        Ok(out)
    }
}

impl Candidates {
    /// One record, its data parsed: each candidate's update, by its index.
    pub fn record(&mut self, data: &Value, (line, offset): (u64, u64)) -> Result<Decoded, Error> {
        if let Some(error) = data.get("error") {
            // Google's shape: `{"code": 429, "message": ..., "status": "RESOURCE_EXHAUSTED"}`.
            let message = error
                .get("message")
                .cloned()
                .unwrap_or_else(|| error.clone());
            return Err(upstream(
                &json!({"error": {"message": message, "type": error.get("status"),
                    "code": error.get("code")}}),
                line,
            ));
        }
        if let Some(reason) = str_at(data, &["promptFeedback", "blockReason"]) {
            let message = match str_at(data, &["promptFeedback", "blockReasonMessage"]) {
                Some(why) => format!("the upstream blocked the prompt ({reason}): {why}"),
                None => format!("the upstream blocked the prompt ({reason})"),
            };
            return Err(upstream(
                &json!({"error": {"message": message, "type": "prompt_blocked", "code": reason}}),
                line,
            ));
        }
        let mut out = Decoded {
            id: str_at(data, &["responseId"]).map(str::to_string),
            model: str_at(data, &["modelVersion"]).map(str::to_string),
            usage: data.get("usageMetadata").and_then(usage),
            ..Decoded::default()
        };
        let candidates = match data.get("candidates") {
            Some(Value::Array(list)) => &list[..],
            _ => &[],
        };
        for candidate in candidates {
            // Proto3's JSON may write an integer as a string ("1"): read either.
            let index = match candidate.get("index") {
                None | Some(Value::Null) => 0,
                Some(i) => {
                    let read = match i {
                        Value::String(s) => s.trim().parse::<u64>().ok(),
                        _ => i.as_u64(),
                    };
                    match read.and_then(|i| u32::try_from(i).ok()) {
                        Some(i) => i,
                        None => {
                            let index = match i {
                                Value::String(s) => s.trim().parse::<i64>().unwrap_or(-1),
                                _ => i.as_i64().unwrap_or(-1),
                            };
                            return Err(Error::from(
                                crate::error::ErrorDetail::InvalidChoiceIndex { index, line },
                            ));
                        }
                    }
                }
            };
            let update = self.candidate(index, candidate, (line, offset));
            out.updates.push((index, update));
        }
        Ok(out)
    }

    /// One candidate of a record as its choice's update.
    fn candidate(
        &mut self,
        index: u32,
        candidate: &Value,
        (line, offset): (u64, u64),
    ) -> ChoiceUpdate {
        let mut update = ChoiceUpdate {
            line,
            offset,
            ..ChoiceUpdate::default()
        };
        let calls = match self.calls.get_mut(&index) {
            Some(calls) => calls,
            None => {
                update.role = Some(text("assistant"));
                self.calls.entry(index).or_default()
            }
        };
        let parts = match candidate.get("content").and_then(|c| c.get("parts")) {
            Some(Value::Array(parts)) => &parts[..],
            _ => &[],
        };
        let (mut content, mut reasoning) = (String::new(), String::new());
        for part in parts {
            if let Some(call) = part.get("functionCall") {
                let k = *calls;
                *calls += 1;
                // Gemini's calls have no id (or one only some models send): one is made,
                // unique to this stream, so that a call of the next turn is never taken for
                // this one by a client that keys calls by id (as Claude Code does).
                let mut id = match str_at(call, &["id"]) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => format!("call_{}_{index}_{k}", self.token),
                };
                // The call's thought signature, which Gemini wants back with the call in
                // the next turn, travels in its id (read back by the request writer).
                if let Some(signature) = str_at(part, &["thoughtSignature"]) {
                    id.push_str(crate::api::THOUGHT_SIGNATURE_IN_ID);
                    id.push_str(signature);
                }
                let arguments = match call.get("args") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(args) => args.to_string(),
                };
                update.tool_calls.push(ToolFragment {
                    index: Some(k),
                    id: Some(text(&id)),
                    kind: Some(text("function")),
                    function: CallFragment {
                        name: str_at(call, &["name"]).filter(|n| !n.is_empty()).map(text),
                        arguments: Some(text(&arguments)),
                        arguments_not_string: false,
                    },
                });
                update.calls_done.push(k);
            } else if let Some(t) = part.get("text").and_then(Value::as_str) {
                match part.get("thought").and_then(Value::as_bool) {
                    Some(true) => reasoning.push_str(t),
                    _ => content.push_str(t),
                }
            }
        }
        if !content.is_empty() {
            update.content = Some(text(&content));
        }
        if !reasoning.is_empty() {
            update.reasoning = Some(text(&reasoning));
        }
        let reason = str_at(candidate, &["finishReason"])
            .filter(|r| !r.is_empty() && *r != "FINISH_REASON_UNSPECIFIED");
        if let Some(reason) = reason {
            update.stop_reason = Some(text(reason));
            match finish(reason, *calls > 0) {
                Ok(finish) => update.finish_reason = Some(text(finish)),
                Err(()) => {
                    let mut why = format!("the upstream ended candidate {index} with {reason}");
                    if let Some(message) = str_at(candidate, &["finishMessage"]) {
                        why.push_str(": ");
                        why.push_str(message);
                    }
                    update.finish_reason = Some(text("error"));
                    update.gateway_error = Some(why.into());
                }
            }
        }
        update
    }
}
