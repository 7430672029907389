//! One choice's answer as OpenAI's Responses stream (its `response` object and items: `object.rs`).
//!
//! The stream is the Responses sequence: `response.created`, `response.in_progress`; per
//! output item `response.output_item.added` and `.done` around its content: a `message`
//! item's parts (`response.content_part.added`, `response.output_text.delta` or
//! `response.refusal.delta`, their `.done`, `response.content_part.done`), a `reasoning`
//! item's summary (`response.reasoning_summary_part.added`,
//! `response.reasoning_summary_text.delta` / `.done`, `response.reasoning_summary_part.done`),
//! a `function_call` item's arguments (`response.function_call_arguments.delta` / `.done`);
//! items opened and closed in order (an item of another kind, or another call, closes the
//! open one); then `response.completed` with every output item and the usage
//! (`response.incomplete` for a `length` finish, reason `max_output_tokens`, or a
//! `content_filter` one), the `choicewise` summary as a top-level field. A failure is
//! `response.failed` instead. Every event has its `sequence_number`, from 0.
//!
//! Ids are made here (`resp_…`, `msg_…`, `rs_…`, `fc_…`, `ctc_…`); a call's `call_id` is the
//! upstream's tool call id (`call_…` made here only when it sent none). A call of a function
//! of one of the client's `namespace` tools is given back under its own name, with its
//! `namespace` ([`Reply::namespaced`]); a call of one of its `custom` tools as a
//! `custom_tool_call` item, its `input` sent whole when the call closes
//! (`response.custom_tool_call_input.delta` and `.done`).
//!
//! A text the API repeats whole (a part's text, a call's arguments, a reasoning summary) is
//! kept once, as its fragments ([`Pieces`]), and written into each event that repeats it a
//! bounded piece at a time ([`texts`](super::texts)): an event that carries long texts is
//! owed, and written as the body asks for more ([`Encoder::more`]).

use choicewise_core::{CallRef, ChoiceEvent, FunctionCallEvent, Text};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

use super::events::{ArgumentsDone, DeltaEvent, ItemDone, Part, PartDone, TextDone};
use super::object::{
    Echoed, ResponseParts, call_item, client_name, custom_input, custom_item, incomplete_reason,
    response_object, usage_of,
};
use super::texts::{Marks, Owed, Pieces, Seg};
use crate::answer::ending::OutputEnd;
use crate::api::{Encoder, Reply, Tokens, frame, new_id, unix_time};
use crate::request::Fields;
use crate::upstream::engine::Summary;

/// Where the stream is.
#[derive(Debug)]
enum Phase {
    /// Nothing written yet.
    Idle,
    /// `response.created` written; the open output item, if any.
    Open(Option<Item>),
    /// The choice finished; its last item closed.
    Finished,
    /// The last event is written; whether the choice had finished.
    Closed {
        #[allow(dead_code)] // shown by Debug, in the tests' messages
        finished: bool,
    },
}

/// An open output item.
#[derive(Debug)]
enum Item {
    /// A reasoning item: its summary text so far.
    Reasoning { id: String, text: Pieces },
    /// A message item: its closed parts, and the open one.
    Message {
        id: String,
        parts: Vec<Value>,
        part: Option<Part>,
    },
    /// A function call item (of a namespace's function: its namespace), or a custom tool's
    /// call (its arguments, `{"input": ...}`, held until it closes).
    Call {
        id: String,
        call: CallRef,
        call_id: String,
        name: String,
        namespace: Option<String>,
        custom: bool,
        arguments: Pieces,
    },
}

/// A message item's open content part: refusal or text, and its text so far.
/// The error code of a context overflow, in OpenAI's `error.code` and a Responses stream's
/// `response.failed`.
pub(crate) const CONTEXT_LENGTH_EXCEEDED: &str = "context_length_exceeded";

/// A streamed answer that failed before any output: `response.created`,
/// `response.in_progress`, then `response.failed` with `code` and `message` (see
/// [`super::overflow_answer`]).
pub(crate) fn failed_before_output(reply: &Reply, code: &str, message: &str) -> Vec<u8> {
    let mut encoder = ResponsesEncoder::new(reply);
    let mut out = Vec::new();
    encoder.start(&mut out);
    encoder.phase = Phase::Closed { finished: false };
    let error = json!({"code": code, "message": message});
    let response = encoder.response("failed", Value::Null, error, Value::Null);
    encoder.emit(&mut out, "response.failed", json!({"response": response}));
    while encoder.more(&mut out) {}
    out
}

/// How many bytes of owed events one write takes at most (a text's escapes may take it
/// past, by at most one run of escaped text).
const OWED_WRITE: usize = 256 * 1024;

/// Writes one choice's answer as the Responses stream.
#[derive(Debug)]
pub(crate) struct ResponsesEncoder {
    id: String,
    model: String,
    created_at: u64,
    reasoning: bool,
    echo: std::sync::Arc<Fields>,
    namespaced: HashMap<String, (String, String)>,
    custom: HashSet<String>,
    /// The next event's `sequence_number`.
    seq: u64,
    phase: Phase,
    /// The finish reason seen, if any.
    finish: Option<Text>,
    /// The closed output items, in order (the open one's `output_index` is their count),
    /// their long texts as marks.
    items: Vec<Value>,
    /// The marks standing for the long texts in the items and events.
    marks: Marks,
    /// The long texts, by their marks' numbers.
    texts: Vec<Pieces>,
    /// What is written but not yet given to the body: events that carry long texts, and
    /// every event after them.
    owed: Owed,
}

impl ResponsesEncoder {
    /// An encoder for a request's answer.
    pub fn new(reply: &Reply) -> Self {
        ResponsesEncoder {
            id: new_id("resp"),
            model: reply.model.clone(),
            created_at: unix_time().as_secs(),
            reasoning: reply.reasoning,
            echo: reply.echo.clone(),
            namespaced: reply.namespaced.clone(),
            custom: reply.custom.clone(),
            seq: 0,
            phase: Phase::Idle,
            finish: None,
            items: Vec::new(),
            marks: Marks::new(),
            texts: Vec::new(),
            owed: Owed::default(),
        }
    }

    /// Writes an event: `data` gets its `type` and `sequence_number`.
    fn emit(&mut self, out: &mut Vec<u8>, name: &str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.next_seq());
        let echo = &*self.echo;
        let mut event = Vec::new();
        frame(&mut event, name, &Echoed { value: &data, echo });
        self.put(out, event, true);
    }

    /// Writes a frame: into `out` when it has no marks and nothing is owed; else owed, cut at
    /// its marks (`marked`: it may have some).
    fn put(&mut self, out: &mut Vec<u8>, event: Vec<u8>, marked: bool) {
        let segs = match marked {
            true => self.marks.split(event, self.texts.len()),
            false => vec![Seg::Json(event)],
        };
        match &segs[..] {
            [Seg::Json(bytes)] if self.owed.is_empty() => out.extend_from_slice(bytes),
            _ => self.owed.extend(segs),
        }
    }

    /// Writes an event of this kind (a delta, a `.done`; `marked`: it may carry marks).
    fn put_event(&mut self, out: &mut Vec<u8>, name: &str, event: &impl Serialize, marked: bool) {
        if !marked && self.owed.is_empty() {
            frame(out, name, event);
            return;
        }
        let mut bytes = Vec::new();
        frame(&mut bytes, name, event);
        self.put(out, bytes, marked);
    }

    /// Keeps a long text; its mark.
    fn keep(&mut self, text: Pieces) -> Value {
        self.texts.push(text);
        self.marks.mark(self.texts.len() - 1)
    }

    /// Writes the first piece of what is owed, if anything (the end of every call).
    fn pay(&mut self, out: &mut Vec<u8>) {
        if !self.owed.is_empty() {
            self.owed.write(&self.texts, out, OWED_WRITE);
        }
    }

    fn next_seq(&mut self) -> u64 {
        let seq = self.seq;
        self.seq = self.seq.saturating_add(1);
        seq
    }

    /// The response object in a state: `output` is the closed items.
    fn response(&self, status: &str, usage: Value, error: Value, incomplete: Value) -> Value {
        response_object(
            ResponseParts {
                id: &self.id,
                created_at: self.created_at,
                model: &self.model,
            },
            status,
            Value::Array(self.items.clone()),
            usage,
            error,
            incomplete,
        )
    }

    /// The open item slot, starting the stream if needed; `None` after the finish.
    fn slot(&mut self, out: &mut Vec<u8>) -> Option<&mut Option<Item>> {
        if let Phase::Idle = self.phase {
            self.start(out);
        }
        match &mut self.phase {
            Phase::Open(item) => Some(item),
            _ => None,
        }
    }

    /// Closes the open item, if any, with this status (`completed`, `incomplete`).
    fn close_item(&mut self, status: &str, out: &mut Vec<u8>) {
        let Phase::Open(slot) = &mut self.phase else {
            return;
        };
        let Some(item) = slot.take() else { return };
        let index = self.items.len();
        let done = match item {
            Item::Reasoning { id, text } => {
                let text = self.keep(text);
                let part = json!({"type": "summary_text", "text": text});
                self.emit(
                    out,
                    "response.reasoning_summary_text.done",
                    json!({
                        "item_id": id, "output_index": index, "summary_index": 0, "text": text
                    }),
                );
                self.emit(
                    out,
                    "response.reasoning_summary_part.done",
                    json!({
                        "item_id": id, "output_index": index, "summary_index": 0, "part": part
                    }),
                );
                json!({"id": id, "type": "reasoning", "summary": [part]})
            }
            Item::Message {
                id,
                mut parts,
                part,
            } => {
                if let Some(part) = part {
                    let closed = self.close_part(&id, index, parts.len(), part, out);
                    parts.push(closed);
                }
                // The parts move in (json! would copy them).
                let mut item = json!({"id": id, "type": "message", "status": status,
                                      "role": "assistant", "content": null});
                item["content"] = Value::Array(parts);
                item
            }
            Item::Call {
                id,
                call_id,
                name,
                custom: true,
                arguments,
                ..
            } => {
                let input = custom_input(&arguments.joined());
                let input = self.keep(Pieces::whole(input.into()));
                let at = json!({"item_id": id, "output_index": index});
                let mut delta = at.clone();
                delta["delta"] = input.clone();
                self.emit(out, "response.custom_tool_call_input.delta", delta);
                let mut done = at;
                done["input"] = input.clone();
                self.emit(out, "response.custom_tool_call_input.done", done);
                custom_item(&id, status, input, &call_id, &name)
            }
            Item::Call {
                id,
                call_id,
                name,
                namespace,
                arguments,
                ..
            } => {
                // Kept once (a call's may be megabytes), written by its mark in this event,
                // the item's and the last one.
                let arguments = self.keep(arguments);
                let kind = "response.function_call_arguments.done";
                let event = ArgumentsDone {
                    arguments: &arguments,
                    item_id: &id,
                    name: &name,
                    output_index: index,
                    sequence_number: self.next_seq(),
                    kind,
                };
                self.put_event(out, kind, &event, true);
                let mut item = call_item(&id, status, "", &call_id, &name, namespace.as_deref());
                item["arguments"] = arguments;
                item
            }
        };
        let kind = "response.output_item.done";
        let event = ItemDone {
            item: &done,
            output_index: index,
            sequence_number: self.next_seq(),
            kind,
        };
        self.put_event(out, kind, &event, true);
        self.items.push(done);
    }

    /// A content part's `.done` events.
    fn close_part(
        &mut self,
        id: &str,
        index: usize,
        content: usize,
        part: Part,
        out: &mut Vec<u8>,
    ) -> Value {
        // A part's text (megabytes, maybe) is kept once, written by its mark.
        let Part { refusal, text } = part;
        let text = self.keep(text);
        let kind = match refusal {
            true => "response.refusal.done",
            false => "response.output_text.done",
        };
        let event = TextDone {
            content_index: content,
            item_id: id,
            logprobs: (!refusal).then_some([]),
            output_index: index,
            refusal: refusal.then_some(&text),
            sequence_number: self.next_seq(),
            text: (!refusal).then_some(&text),
            kind,
        };
        self.put_event(out, kind, &event, true);
        let value = Part::value(refusal, text);
        let kind = "response.content_part.done";
        let event = PartDone {
            content_index: content,
            item_id: id,
            output_index: index,
            part: &value,
            sequence_number: self.next_seq(),
            kind,
        };
        self.put_event(out, kind, &event, true);
        value
    }

    /// Takes the open item out of the stream to work on it (put it back with
    /// [`put_back`]); the stream started if needed. `None` after the finish.
    ///
    /// [`put_back`]: Self::put_back
    fn take(&mut self, out: &mut Vec<u8>) -> Option<Option<Item>> {
        self.slot(out).map(Option::take)
    }

    /// Puts the open item back.
    fn put_back(&mut self, item: Item) {
        if let Phase::Open(slot) = &mut self.phase {
            *slot = Some(item);
        }
    }

    /// Text or refusal text: into the open message item's part of that kind (the item and
    /// the part opened as needed; a part of the other kind closes).
    fn message_text(&mut self, refusal: bool, text: &Text, out: &mut Vec<u8>) {
        let Some(open) = self.take(out) else { return };
        let (id, mut parts, mut part) = match open {
            Some(Item::Message { id, parts, part }) => (id, parts, part),
            other => {
                if let Some(other) = other {
                    self.put_back(other);
                }
                self.close_item("completed", out);
                let id = new_id("msg");
                let item = json!({"id": id, "type": "message", "status": "in_progress",
                                  "role": "assistant", "content": []});
                let index = self.items.len();
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                (id, Vec::new(), None)
            }
        };
        let index = self.items.len();
        if let Some(old) = part.take_if(|p| p.refusal != refusal) {
            let closed = self.close_part(&id, index, parts.len(), old, out);
            parts.push(closed);
        }
        if part.is_none() {
            let new = Part {
                refusal,
                text: Pieces::default(),
            };
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": id,
                "output_index": index, "content_index": parts.len(), "part": Part::value(refusal, json!(""))}),
            );
            part = Some(new);
        }
        if let Some(open) = &mut part {
            open.text.push(text);
        }
        let event = DeltaEvent {
            kind: match refusal {
                true => "response.refusal.delta",
                false => "response.output_text.delta",
            },
            sequence_number: self.next_seq(),
            item_id: &id,
            output_index: index,
            content_index: Some(parts.len()),
            summary_index: None,
            delta: text,
            logprobs: (!refusal).then_some([]),
        };
        self.put_event(out, event.kind, &event, false);
        self.put_back(Item::Message { id, parts, part });
    }

    /// Reasoning text: into the open reasoning item (opened as needed).
    fn reasoning_text(&mut self, text: &Text, out: &mut Vec<u8>) {
        let Some(open) = self.take(out) else { return };
        let (id, mut all) = match open {
            Some(Item::Reasoning { id, text }) => (id, text),
            other => {
                if let Some(other) = other {
                    self.put_back(other);
                }
                self.close_item("completed", out);
                let id = new_id("rs");
                let index = self.items.len();
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": index,
                    "item": {"id": id, "type": "reasoning", "summary": []}}),
                );
                self.emit(
                    out,
                    "response.reasoning_summary_part.added",
                    json!({"item_id": id,
                    "output_index": index, "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""}}),
                );
                (id, Pieces::default())
            }
        };
        all.push(text);
        let event = DeltaEvent {
            kind: "response.reasoning_summary_text.delta",
            sequence_number: self.next_seq(),
            item_id: &id,
            output_index: self.items.len(),
            content_index: None,
            summary_index: Some(0),
            delta: text,
            logprobs: None,
        };
        self.put_event(out, event.kind, &event, false);
        self.put_back(Item::Reasoning { id, text: all });
    }

    /// The choice's finish: the open item closes (`incomplete` for a `length` or
    /// `content_filter` finish); the end comes with [`Encoder::end`].
    fn finish(&mut self, reason: &Text, out: &mut Vec<u8>) {
        if self.slot(out).is_some() {
            let status = match incomplete_reason(reason) {
                Some(_) => "incomplete",
                None => "completed",
            };
            self.close_item(status, out);
            self.phase = Phase::Finished;
            self.finish = Some(reason.clone());
        }
    }

    fn call_event(&mut self, event: &FunctionCallEvent, out: &mut Vec<u8>) {
        match event {
            FunctionCallEvent::Started {
                call,
                id,
                name,
                custom: native,
            } => {
                if self.slot(out).is_none() {
                    return;
                }
                self.close_item("completed", out);
                let call_id = id.as_deref().map_or_else(|| new_id("call"), str::to_string);
                let (name, namespace) = client_name(&self.namespaced, name.as_deref());
                let custom = namespace.is_none() && (*native || self.custom.contains(&name));
                let item_id = new_id(if custom { "ctc" } else { "fc" });
                let index = self.items.len();
                let item = match custom {
                    true => custom_item(&item_id, "in_progress", json!(""), &call_id, &name),
                    false => call_item(
                        &item_id,
                        "in_progress",
                        "",
                        &call_id,
                        &name,
                        namespace.as_deref(),
                    ),
                };
                self.emit(
                    out,
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                if let Phase::Open(slot) = &mut self.phase {
                    *slot = Some(Item::Call {
                        id: item_id,
                        call: *call,
                        call_id,
                        name,
                        namespace,
                        custom,
                        arguments: Pieces::default(),
                    });
                }
            }
            FunctionCallEvent::Arguments { call, fragment } => {
                // A fragment belongs to the open call's item; one for a call already closed
                // cannot be sent (an item does not reopen) and is dropped.
                let index = self.items.len();
                let seq = self.seq;
                let owed = !self.owed.is_empty();
                let Phase::Open(Some(Item::Call {
                    id,
                    call: open,
                    arguments,
                    custom,
                    ..
                })) = &mut self.phase
                else {
                    return;
                };
                if open != call || fragment.is_empty() {
                    return;
                }
                arguments.push(fragment);
                if *custom {
                    // A custom call's input is its arguments' one string: sent when whole.
                    return;
                }
                let event = DeltaEvent {
                    kind: "response.function_call_arguments.delta",
                    sequence_number: seq,
                    item_id: id,
                    output_index: index,
                    content_index: None,
                    summary_index: None,
                    delta: fragment,
                    logprobs: None,
                };
                match owed {
                    false => frame(out, event.kind, &event),
                    true => {
                        let mut bytes = Vec::new();
                        frame(&mut bytes, event.kind, &event);
                        self.owed.extend([Seg::Json(bytes)]);
                    }
                }
                self.seq = self.seq.saturating_add(1);
            }
            FunctionCallEvent::Finished {
                call,
                arguments: whole,
                ..
            } => {
                if let Phase::Open(Some(Item::Call {
                    call: open,
                    arguments,
                    ..
                })) = &mut self.phase
                    && open == call
                {
                    // The event's text is the one the deltas spelled: kept shared with it,
                    // the fragments gathered let go.
                    if same_text(arguments, whole) {
                        *arguments = Pieces::whole(whole.clone());
                    }
                    self.close_item("completed", out);
                }
            }
            _ => {}
        }
    }
}

/// Whether `pieces` spell `text`.
fn same_text(pieces: &Pieces, text: &str) -> bool {
    if pieces.len() != text.len() {
        return false;
    }
    let mut rest = text.as_bytes();
    pieces
        .iter()
        .all(|piece| match rest.split_at_checked(piece.len()) {
            Some((head, tail)) if head == piece.as_bytes() => {
                rest = tail;
                true
            }
            _ => false,
        })
}

impl Encoder for ResponsesEncoder {
    fn start(&mut self, out: &mut Vec<u8>) {
        if !matches!(self.phase, Phase::Idle) {
            return;
        }
        self.phase = Phase::Open(None);
        let response = self.response("in_progress", Value::Null, Value::Null, Value::Null);
        self.emit(out, "response.created", json!({"response": response}));
        self.emit(out, "response.in_progress", json!({"response": response}));
        self.pay(out);
    }

    fn event(&mut self, event: &ChoiceEvent, out: &mut Vec<u8>) {
        match event {
            ChoiceEvent::Content(t) if !t.is_empty() => self.message_text(false, t, out),
            ChoiceEvent::Refusal(t) if !t.is_empty() => self.message_text(true, t, out),
            ChoiceEvent::Reasoning(t) if self.reasoning && !t.is_empty() => {
                self.reasoning_text(t, out);
            }
            ChoiceEvent::FunctionCall(call) => self.call_event(call, out),
            ChoiceEvent::Finished(reason) => self.finish(reason, out),
            _ => {}
        }
        self.pay(out);
    }

    fn more(&mut self, out: &mut Vec<u8>) -> bool {
        self.owed.write(&self.texts, out, OWED_WRITE)
    }

    fn failed(&mut self, end: &OutputEnd, choicewise: Option<&Summary>, out: &mut Vec<u8>) {
        match self.phase {
            Phase::Closed { .. } => return,
            Phase::Idle => self.start(out),
            _ => {}
        }
        self.phase = Phase::Closed { finished: false };
        let error = super::failure(end);
        let mut event =
            json!({"response": self.response("failed", Value::Null, error, Value::Null)});
        Summary::ride_on(choicewise, &mut event);
        self.emit(out, "response.failed", event);
        self.pay(out);
    }

    fn completed(
        &mut self,
        reason: &str,
        usage: &Tokens,
        _stop_reason: Option<&str>,
        choicewise: Option<&Summary>,
        out: &mut Vec<u8>,
    ) {
        if matches!(self.phase, Phase::Closed { .. }) {
            return;
        }
        let finish = reason;
        self.phase = Phase::Closed { finished: true };
        let (name, status, incomplete) = match incomplete_reason(finish) {
            Some(reason) => (
                "response.incomplete",
                "incomplete",
                json!({"reason": reason}),
            ),
            None => ("response.completed", "completed", Value::Null),
        };
        // The last event: the closed items move into it rather than being copied.
        let output = Value::Array(std::mem::take(&mut self.items));
        let parts = ResponseParts {
            id: &self.id,
            created_at: self.created_at,
            model: &self.model,
        };
        let response = response_object(
            parts,
            status,
            output,
            usage_of(usage),
            Value::Null,
            incomplete,
        );
        let mut event = Value::Object(serde_json::Map::from_iter([("response".into(), response)]));
        Summary::ride_on(choicewise, &mut event);
        self.emit(out, name, event);
        self.pay(out);
    }

    fn finish_reason(&self) -> Option<&Text> {
        self.finish.as_ref()
    }
}
