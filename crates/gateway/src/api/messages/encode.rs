//! One choice's answer as Anthropic's Messages stream, or as one `message` object.
//!
//! The stream is Anthropic's sequence: `message_start` (the prompt's input tokens as known
//! when the answer starts: [`Reply::input_tokens`]); per content block
//! `content_block_start`, its `content_block_delta`s (`text_delta`, `thinking_delta`,
//! `input_json_delta`) and `content_block_stop`, blocks opened and closed in order (a block
//! of another kind, or another tool call, closes the open one); one `ping` after the first
//! block's start; then `message_delta` (its `stop_reason` and `stop_sequence`, the usage,
//! and the `choicewise` summary as a top-level field) and `message_stop`. A failure is an
//! `error` event instead, and nothing follows it.
//!
//! Finish reasons map back as Anthropic's own: `stop` → `end_turn` (`stop_sequence` when
//! the provider said so; its `stop_sequence` is the request's when it named exactly one),
//! `length` → `max_tokens`, `tool_calls` (and `function_call`) → `tool_use`,
//! `content_filter` → `refusal`; Anthropic's own reasons pass as they are, any other is
//! `end_turn`. Refusal text is text (Anthropic has no refusal block). Thinking blocks carry
//! an empty `signature`: the gateway has none to give.

use choicewise_core::{CallRef, ChoiceEvent, ChoiceOutput, FunctionCallEvent, Text};
use serde::Serialize;
use serde_json::{Value, json};

use crate::answer::ending::OutputEnd;
use crate::api::{Encoder, Reply, Tokens, frame, new_id};
use crate::upstream::engine::Summary;

/// Where the stream is.
#[derive(Debug)]
enum Phase {
    /// Nothing written yet.
    Idle,
    /// `message_start` written; the open content block, if any.
    Open(Option<Block>),
    /// The choice finished; its last block closed.
    Finished,
    /// The last frame is written; whether the choice had finished.
    Closed {
        #[allow(dead_code)] // shown by Debug, in the tests' messages
        finished: bool,
    },
}

/// An open content block.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Block {
    index: u32,
    kind: Kind,
}

/// What a content block holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Text,
    Thinking,
    /// A tool call's `tool_use` block.
    Tool(CallRef),
}

/// Writes one choice's answer as Anthropic's Messages stream.
#[derive(Debug)]
pub(crate) struct MessagesEncoder {
    id: String,
    model: String,
    reasoning: bool,
    stop: Vec<String>,
    /// The prompt's tokens as known at the start, for `message_start`.
    input_tokens: u64,
    phase: Phase,
    /// The finish reason seen, if any.
    finish: Option<Text>,
    /// The next content block's index.
    next: u32,
    pinged: bool,
}

/// A `content_block_delta` event.
#[derive(Serialize)]
struct BlockDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u32,
    delta: Delta<'a>,
}

/// A content block delta's body.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

impl MessagesEncoder {
    /// An encoder for a request's answer.
    pub fn new(reply: &Reply) -> Self {
        MessagesEncoder {
            id: new_id("msg"),
            model: reply.model.clone(),
            reasoning: reply.reasoning,
            stop: reply.stop.clone(),
            input_tokens: reply.input_tokens.unwrap_or(0),
            phase: Phase::Idle,
            finish: None,
            next: 0,
            pinged: false,
        }
    }

    /// The open block, if the stream is open; `None` otherwise.
    fn open_block(&mut self, out: &mut Vec<u8>) -> Option<&mut Option<Block>> {
        if let Phase::Idle = self.phase {
            self.start(out);
        }
        match &mut self.phase {
            Phase::Open(block) => Some(block),
            _ => None,
        }
    }

    /// Makes a block of kind `want` the open block: the open one stays if it is of that kind
    /// (text, thinking), else it closes and a new one opens with `start` as its
    /// `content_block`. Returns the open block's index, or `None` after the finish.
    fn block(&mut self, want: Kind, start: Value, out: &mut Vec<u8>) -> Option<u32> {
        let next = self.next;
        let block = self.open_block(out)?;
        match *block {
            Some(b) if b.kind == want && !matches!(want, Kind::Tool(_)) => return Some(b.index),
            Some(b) => stop_block(b, out),
            None => {}
        }
        *block = Some(Block {
            index: next,
            kind: want,
        });
        self.next = self.next.saturating_add(1);
        frame(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": next, "content_block": start}),
        );
        if !std::mem::replace(&mut self.pinged, true) {
            frame(out, "ping", &json!({"type": "ping"}));
        }
        Some(next)
    }

    /// Closes the open block, if any.
    fn close(&mut self, out: &mut Vec<u8>) {
        if let Phase::Open(block) = &mut self.phase
            && let Some(b) = block.take()
        {
            stop_block(b, out);
        }
    }

    /// A delta of the open text or thinking block.
    fn delta(&mut self, want: Kind, start: Value, delta: Delta, out: &mut Vec<u8>) {
        if let Some(index) = self.block(want, start, out) {
            let event = BlockDelta {
                kind: "content_block_delta",
                index,
                delta,
            };
            frame(out, "content_block_delta", &event);
        }
    }

    fn call_event(&mut self, event: &FunctionCallEvent, out: &mut Vec<u8>) {
        match event {
            // A Messages client has no custom tools to be called.
            FunctionCallEvent::Started {
                call,
                id,
                name,
                custom: _,
            } => {
                let id = id
                    .as_deref()
                    .map_or_else(|| new_id("toolu"), str::to_string);
                let start = json!({"type": "tool_use", "id": id,
                                   "name": name.as_deref().unwrap_or_default(), "input": {}});
                self.block(Kind::Tool(*call), start, out);
            }
            FunctionCallEvent::Arguments { call, fragment } => {
                // A fragment belongs to the open call's block; one for a call already closed
                // cannot be sent (a block does not reopen) and is dropped.
                let Some(Some(open)) = self.open_block(out).map(|b| *b) else {
                    return;
                };
                if open.kind == Kind::Tool(*call) && !fragment.is_empty() {
                    let event = BlockDelta {
                        kind: "content_block_delta",
                        index: open.index,
                        delta: Delta::InputJson {
                            partial_json: fragment,
                        },
                    };
                    frame(out, "content_block_delta", &event);
                }
            }
            FunctionCallEvent::Finished { call, .. } => {
                if let Phase::Open(Some(open)) = self.phase
                    && open.kind == Kind::Tool(*call)
                {
                    self.close(out);
                }
            }
            _ => {}
        }
    }
}

impl MessagesEncoder {
    /// The choice's finish: the open block closes; the end comes with [`Encoder::end`].
    fn finish(&mut self, reason: &Text, out: &mut Vec<u8>) {
        if self.open_block(out).is_some() {
            self.close(out);
            self.phase = Phase::Finished;
            self.finish = Some(reason.clone());
        }
    }
}

/// `content_block_stop` of a block.
fn stop_block(block: Block, out: &mut Vec<u8>) {
    frame(
        out,
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": block.index}),
    );
}

impl Encoder for MessagesEncoder {
    fn start(&mut self, out: &mut Vec<u8>) {
        if !matches!(self.phase, Phase::Idle) {
            return;
        }
        self.phase = Phase::Open(None);
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        });
        frame(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
    }

    fn event(&mut self, event: &ChoiceEvent, out: &mut Vec<u8>) {
        let text_start = || json!({"type": "text", "text": ""});
        match event {
            ChoiceEvent::Content(t) | ChoiceEvent::Refusal(t) if !t.is_empty() => {
                self.delta(Kind::Text, text_start(), Delta::Text { text: t }, out);
            }
            ChoiceEvent::Reasoning(t) if self.reasoning && !t.is_empty() => {
                let start = json!({"type": "thinking", "thinking": "", "signature": ""});
                let delta = Delta::Thinking { thinking: t };
                self.delta(Kind::Thinking, start, delta, out);
            }
            ChoiceEvent::FunctionCall(call) => self.call_event(call, out),
            ChoiceEvent::Finished(reason) => self.finish(reason, out),
            _ => {}
        }
    }

    fn failed(&mut self, end: &OutputEnd, choicewise: Option<&Summary>, out: &mut Vec<u8>) {
        if matches!(self.phase, Phase::Closed { .. }) {
            return;
        }
        self.phase = Phase::Closed { finished: false };
        let why = end.why().unwrap_or_default();
        let mut event = json!({"type": "error", "error": {"type": "api_error", "message": why}});
        Summary::ride_on(choicewise, &mut event);
        frame(out, "error", &event);
    }

    fn completed(
        &mut self,
        reason: &str,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Summary>,
        out: &mut Vec<u8>,
    ) {
        if matches!(self.phase, Phase::Closed { .. }) {
            return;
        }
        let finish = reason;
        self.phase = Phase::Closed { finished: true };
        let (reason, sequence) = stop_reason_of(finish, stop_reason, &self.stop);
        let mut delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_of(usage),
        });
        Summary::ride_on(choicewise, &mut delta);
        frame(out, "message_delta", &delta);
        frame(out, "message_stop", &json!({"type": "message_stop"}));
    }

    fn finish_reason(&self) -> Option<&Text> {
        self.finish.as_ref()
    }
}

/// Anthropic's `stop_reason` and `stop_sequence` for a finish reason (and the provider's own
/// stop reason, when known).
fn stop_reason_of<'a>(
    finish: &'a str,
    provider: Option<&str>,
    stop: &'a [String],
) -> (&'a str, Option<&'a str>) {
    match finish {
        "stop" if provider == Some("stop_sequence") => (
            "stop_sequence",
            match stop {
                [one] => Some(one.as_str()),
                _ => None,
            },
        ),
        "stop" => ("end_turn", None),
        "length" => ("max_tokens", None),
        "tool_calls" | "function_call" => ("tool_use", None),
        "content_filter" => ("refusal", None),
        own @ ("end_turn"
        | "max_tokens"
        | "stop_sequence"
        | "tool_use"
        | "pause_turn"
        | "refusal"
        | "model_context_window_exceeded") => (own, None),
        _ => ("end_turn", None),
    }
}

/// The usage object: Anthropic counts cache reads apart from `input_tokens`.
fn usage_of(usage: &Tokens) -> Value {
    let cached = usage.cached_input.min(usage.input);
    json!({
        "input_tokens": usage.input - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": usage.output,
    })
}

/// The key under which a `tool_use` block of [`message`] names the place of its call among
/// the message's calls (its tool calls, then its legacy function call), whose arguments are
/// its input's JSON text, in place of a tree: [`crate::api::AsWritten`] writes that text
/// (compacted, up to 64 KiB; longer, as the upstream wrote it) as the block's `input`, its
/// numbers digit for digit, and never the key. No client's text makes a key of the blocks
/// built here.
pub(crate) const INPUT_AS_WRITTEN: &str = "\u{0}input as written";

/// The non-streamed answer: a `message` object, its content blocks in Anthropic's order
/// (thinking when asked for, text, then each tool call as `tool_use` with its arguments
/// parsed: `{}` when empty, the raw text as a string when not valid JSON). A choice that
/// did not finish has `stop_reason: null`.
pub(crate) fn message(
    reply: &Reply,
    output: &ChoiceOutput,
    usage: &Tokens,
    choicewise: Option<&Summary>,
) -> Value {
    let m = &output.message;
    let mut content = Vec::new();
    if let Some(thinking) = m
        .reasoning_content
        .as_deref()
        .filter(|t| reply.reasoning && !t.is_empty())
    {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": ""}));
    }
    let text: String = [m.content.as_deref(), m.refusal.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    if !text.is_empty() {
        // The text moves in (json! would copy it: an answer's text may be megabytes).
        let mut block = json!({"type": "text", "text": null});
        block["text"] = Value::String(text);
        content.push(block);
    }
    let calls = (m.tool_calls.iter())
        .map(|c| (Some(c.id.as_str()).filter(|id| !id.is_empty()), &c.function))
        .chain(m.function_call.iter().map(|f| (None, f)));
    for (place, (id, f)) in calls.enumerate() {
        // JSON arguments ride as their text, never as a tree (a tree costs 20 to 50 times
        // the text): `input` is a placeholder, and the block names its call's place among
        // the message's calls, whose text the answer's writer puts there
        // ([`AsWritten`](crate::api::AsWritten)), its numbers digit for digit.
        let (input, as_written) = match f.arguments.trim() {
            "" => (json!({}), None),
            raw => match serde_json::from_str::<serde::de::IgnoredAny>(raw) {
                Ok(_) => (json!({}), Some(place)),
                Err(_) => (Value::String(f.arguments.clone()), None),
            },
        };
        let id = id.map_or_else(|| new_id("toolu"), str::to_string);
        let mut block = json!({"type": "tool_use", "id": id, "name": f.name, "input": input});
        if let Some(place) = as_written {
            block[INPUT_AS_WRITTEN] = Value::from(place);
        }
        content.push(block);
    }
    let (reason, sequence) = match output.finish_reason.as_deref() {
        None | Some("error") => (None, None),
        Some(finish) => {
            let (r, s) = stop_reason_of(finish, output.stop_reason.as_deref(), &reply.stop);
            (Some(r), s)
        }
    };
    let mut body = json!({
        "id": new_id("msg"), "type": "message", "role": "assistant", "model": reply.model,
        "content": content, "stop_reason": reason, "stop_sequence": sequence,
        "usage": usage_of(usage),
    });
    Summary::ride_on(choicewise, &mut body);
    body
}
