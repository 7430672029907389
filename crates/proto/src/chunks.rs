//! A choice's events written back as OpenAI `chat.completion.chunk` deltas, renumbered: the
//! one chunk encoder of the workspace (the gateway's streamed Chat Completions answers).
//!
//! [`ChoiceChunks`] turns one choice's [`ChoiceEvent`]s into the elements of a chunk's
//! `choices` array; an [`Element`] is typed and shares the event's text, so a chunk is written
//! straight into a buffer (no JSON tree per event), its keys in sorted order as a
//! `serde_json::Value` of the same element would write them; an [`Envelope`] holds what every
//! chunk of one answer repeats (its id, time and model). A relay that passes an upstream's
//! chunks on reads each one's facts with a [`ChunkScanner`], a scan rather than a parse, and
//! adds up their usages with a [`ReportedUsage`], as the general path adds them up.
//!
//! ```
//! use choicewise_proto::ChoiceEvent;
//! use choicewise_proto::chunks::{ChoiceChunks, Envelope};
//!
//! let envelope = Envelope::new("gpt-4o-mini");
//! let mut choice = ChoiceChunks::new(1); // the client sees this choice as index 1
//! let opening = choice.opening();
//! let text = choice.event(&ChoiceEvent::Content("Hi".into())).unwrap();
//! let chunk = envelope.chunk(vec![serde_json::to_value(&text).unwrap()]);
//! assert_eq!(chunk["choices"][0]["delta"]["content"], "Hi");
//! assert_eq!(chunk["choices"][0]["index"], 1);
//! assert_eq!(serde_json::to_value(&opening).unwrap()["delta"]["role"], "assistant");
//! ```

use std::sync::Arc;

pub use crate::relay::{ChoiceFacts, ChunkFacts, ChunkScanner, element_text};
pub use crate::usage::ReportedUsage;
use crate::{CallKind, CallRef, ChoiceEvent, FunctionCallEvent, Text};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};

/// Turns one output choice's events into the `choices[]` elements of chunks: the first
/// element carries the role, a finish ends it, a failure ends it with `finish_reason:
/// "error"` and the reason in `choicewise.error`.
///
/// ```
/// use choicewise_proto::ChoiceEvent;
/// use choicewise_proto::chunks::ChoiceChunks;
///
/// let mut choice = ChoiceChunks::new(0);
/// assert!(choice.event(&ChoiceEvent::Finished("stop".into())).is_some());
/// assert!(choice.is_finished());
/// ```
#[derive(Debug)]
pub struct ChoiceChunks {
    /// The index the client sees.
    index: u32,
    /// The role was sent (the first chunk of a choice carries it).
    role_sent: bool,
    /// The choice's `finish_reason` was sent.
    finished: bool,
    /// The client asked for log-probabilities: they pass through as the upstream sent them.
    logprobs: bool,
    /// The positions of the choice's tool calls that are custom tools' calls (written as
    /// `custom` with its `input`, not `function` with its `arguments`).
    custom_calls: Vec<u32>,
}

/// One element of a chunk's `choices` array, written by its [`Serialize`] implementation.
///
/// ```
/// use choicewise_proto::chunks::ChoiceChunks;
///
/// let element = ChoiceChunks::new(2).failed("cut short");
/// let written = serde_json::to_value(&element).unwrap();
/// assert_eq!(written["finish_reason"], "error");
/// assert_eq!(written["choicewise"]["error"], "cut short");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Element {
    index: u32,
    /// The author role, on a choice's first element.
    role: Option<Text>,
    delta: Delta,
    finish_reason: Option<Text>,
    /// Why the choice failed (`choicewise.error`), on the element that ends it with `error`.
    error: Option<Text>,
    /// The upstream's `logprobs` object, as it sent it (its text).
    logprobs: Option<crate::Logprobs>,
}

/// What a delta carries besides the role.
#[derive(Debug, Clone, PartialEq)]
enum Delta {
    Empty,
    /// A choice's opening: its role, and `content: null` as the upstream's own opening
    /// carries it (never `""`, which clients would take as a text part).
    Opening,
    Content(Text),
    Reasoning(Text),
    Refusal(Text),
    /// A step of a tool call or of the legacy function call: its start (`start`, with no
    /// arguments yet) or a fragment of its arguments.
    Call {
        call: CallRef,
        start: Option<Start>,
        arguments: Text,
        /// A custom tool's call: `custom.input` rather than `function.arguments`.
        custom: bool,
    },
}

/// What a call's first delta names.
#[derive(Debug, Clone, PartialEq)]
struct Start {
    id: Option<Text>,
    name: Option<Text>,
}

impl ChoiceChunks {
    /// The elements of the choice the client sees as `index`.
    ///
    /// ```
    /// # use choicewise_proto::chunks::ChoiceChunks;
    /// assert!(!ChoiceChunks::new(0).is_finished());
    /// ```
    pub fn new(index: u32) -> Self {
        ChoiceChunks {
            index,
            role_sent: false,
            finished: false,
            logprobs: false,
            custom_calls: Vec::new(),
        }
    }

    /// Whether the upstream's log-probabilities pass through (the client asked for them);
    /// by default they are left out.
    ///
    /// ```
    /// # use choicewise_proto::chunks::ChoiceChunks;
    /// let choice = ChoiceChunks::new(0).logprobs(true);
    /// # let _ = choice;
    /// ```
    pub fn logprobs(mut self, pass: bool) -> Self {
        self.logprobs = pass;
        self
    }

    fn element(&mut self, role: Option<Text>, delta: Delta, finish: Option<Text>) -> Element {
        let role = match std::mem::replace(&mut self.role_sent, true) {
            false => role.or_else(|| Some(Text::from("assistant"))),
            true => role,
        };
        if finish.is_some() {
            self.finished = true;
        }
        Element {
            index: self.index,
            role,
            delta,
            finish_reason: finish,
            error: None,
            logprobs: None,
        }
    }

    /// Whether the choice's `finish_reason` was written (a finish or a failure).
    ///
    /// ```
    /// # use choicewise_proto::chunks::ChoiceChunks;
    /// let mut choice = ChoiceChunks::new(0);
    /// choice.failed("cut short");
    /// assert!(choice.is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The choice's opening element (its role, `content: null`), written for every choice
    /// in index order before any upstream is heard from: clients that index choices by
    /// position (openai-python's stream helper) then find each one in place.
    ///
    /// ```
    /// # use choicewise_proto::chunks::ChoiceChunks;
    /// let opening = serde_json::to_value(ChoiceChunks::new(0).opening()).unwrap();
    /// assert_eq!(opening["delta"]["content"], serde_json::Value::Null);
    /// ```
    pub fn opening(&mut self) -> Element {
        self.element(None, Delta::Opening, None)
    }

    /// The element for one event, if it shows in a chunk (text, reasoning, refusal, a call's
    /// start or arguments, the finish; log-probabilities when passed through).
    ///
    /// ```
    /// # use choicewise_proto::{ChoiceEvent, chunks::ChoiceChunks};
    /// let mut choice = ChoiceChunks::new(0);
    /// let element = choice.event(&ChoiceEvent::Reasoning("Hmm".into())).unwrap();
    /// assert_eq!(serde_json::to_value(&element).unwrap()["delta"]["reasoning_content"], "Hmm");
    /// ```
    pub fn event(&mut self, event: &ChoiceEvent) -> Option<Element> {
        let (role, delta) = match event {
            // The opening was written already.
            ChoiceEvent::Role(_) if self.role_sent => return None,
            ChoiceEvent::Role(role) => (Some(role.clone()), Delta::Opening),
            ChoiceEvent::Content(t) => (None, Delta::Content(t.clone())),
            ChoiceEvent::Reasoning(t) => (None, Delta::Reasoning(t.clone())),
            ChoiceEvent::Refusal(t) => (None, Delta::Refusal(t.clone())),
            ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
                call,
                id,
                name,
                custom,
            }) => {
                let custom = *custom && call.kind == CallKind::Tool;
                if custom {
                    self.custom_calls.push(call.position);
                }
                (
                    None,
                    Delta::Call {
                        call: *call,
                        start: Some(Start {
                            id: id.clone(),
                            name: name.clone(),
                        }),
                        arguments: Text::from(""),
                        custom,
                    },
                )
            }
            ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments { call, fragment }) => (
                None,
                Delta::Call {
                    call: *call,
                    start: None,
                    arguments: fragment.clone(),
                    custom: call.kind == CallKind::Tool
                        && self.custom_calls.contains(&call.position),
                },
            ),
            ChoiceEvent::Logprobs(lp) if self.logprobs => {
                let mut element = self.element(None, Delta::Empty, None);
                element.logprobs = Some(lp.clone());
                return Some(element);
            }
            ChoiceEvent::Finished(reason) => {
                return Some(self.element(None, Delta::Empty, Some(reason.clone())));
            }
            _ => return None,
        };
        Some(self.element(role, delta, None))
    }

    /// The element ending a choice that failed (or was cut short): `finish_reason: "error"`,
    /// and what went wrong in `choicewise.error` (see [`Element`]).
    pub fn failed(&mut self, message: &str) -> Element {
        let mut element = self.element(None, Delta::Empty, Some(Text::from("error")));
        element.error = Some(Text::from(message));
        element
    }
}

impl Serialize for Element {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Error<'a>(&'a str);
        impl Serialize for Error<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("error", self.0)?;
                map.end()
            }
        }
        let mut map = s.serialize_map(None)?;
        if let Some(error) = &self.error {
            map.serialize_entry("choicewise", &Error(error))?;
        }
        map.serialize_entry("delta", &DeltaOut(self))?;
        map.serialize_entry("finish_reason", &self.finish_reason.as_deref())?;
        map.serialize_entry("index", &self.index)?;
        map.serialize_entry("logprobs", &self.logprobs)?;
        map.end()
    }
}

impl Element {
    /// Writes an element of text (content, reasoning or a refusal: most of an answer's
    /// elements) as its `Serialize` writes it, its keys as constant bytes rather than each
    /// escaped again; `false`, with nothing written, for any other element.
    fn write_text(&self, out: &mut Vec<u8>) -> bool {
        let (key, text): (&[u8], &str) = match &self.delta {
            Delta::Content(t) => (b"content", t),
            Delta::Reasoning(t) => (b"reasoning_content", t),
            Delta::Refusal(t) => (b"refusal", t),
            _ => return false,
        };
        if self.error.is_some() || self.logprobs.is_some() {
            return false;
        }
        // Strings and numbers serialise without error into memory.
        let string = |out: &mut Vec<u8>, text: &str| {
            let _ = serde_json::to_writer(&mut *out, text);
        };
        out.extend_from_slice(b"{\"delta\":{\"");
        out.extend_from_slice(key);
        out.extend_from_slice(b"\":");
        string(out, text);
        if let Some(role) = &self.role {
            out.extend_from_slice(b",\"role\":");
            string(out, role);
        }
        out.extend_from_slice(b"},\"finish_reason\":");
        match &self.finish_reason {
            Some(reason) => string(out, reason),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"index\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.index).as_bytes());
        out.extend_from_slice(b",\"logprobs\":null}");
        true
    }
}

/// An element's `delta` object.
struct DeltaOut<'a>(&'a Element);

impl Serialize for DeltaOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Element { role, delta, .. } = self.0;
        let mut map = s.serialize_map(None)?;
        // Keys in sorted order: the delta's own key goes before `role` except `tool_calls`.
        let mut tool_calls = None;
        match delta {
            Delta::Empty => {}
            Delta::Opening => map.serialize_entry("content", &None::<&str>)?,
            Delta::Content(t) => map.serialize_entry("content", &**t)?,
            Delta::Reasoning(t) => map.serialize_entry("reasoning_content", &**t)?,
            Delta::Refusal(t) => map.serialize_entry("refusal", &**t)?,
            Delta::Call {
                call,
                start,
                arguments,
                custom,
            } => {
                let function = Function {
                    arguments,
                    name: (start.as_ref()).map(|s| s.name.as_deref().unwrap_or_default()),
                    custom: *custom,
                };
                match call.kind {
                    CallKind::Tool => {
                        tool_calls = Some([ToolCall {
                            function,
                            id: (start.as_ref()).map(|s| s.id.as_deref().unwrap_or_default()),
                            index: call.position,
                        }]);
                    }
                    _ => map.serialize_entry("function_call", &function)?,
                }
            }
        }
        if let Some(role) = role.as_deref() {
            map.serialize_entry("role", role)?;
        }
        if let Some(calls) = &tool_calls {
            map.serialize_entry("tool_calls", calls)?;
        }
        map.end()
    }
}

/// A delta's `function` or `function_call` object (a custom tool's call's `custom`, its
/// `input`): `name` only when the call starts.
struct Function<'a> {
    arguments: &'a str,
    name: Option<&'a str>,
    custom: bool,
}

impl Serialize for Function<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let key = if self.custom { "input" } else { "arguments" };
        map.serialize_entry(key, self.arguments)?;
        if let Some(name) = self.name {
            map.serialize_entry("name", name)?;
        }
        map.end()
    }
}

/// One entry of a delta's `tool_calls`: `id` and `type` only when the call starts.
struct ToolCall<'a> {
    function: Function<'a>,
    id: Option<&'a str>,
    index: u32,
}

impl Serialize for ToolCall<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let kind = if self.function.custom {
            "custom"
        } else {
            "function"
        };
        map.serialize_entry(kind, &self.function)?;
        if let Some(id) = self.id {
            map.serialize_entry("id", id)?;
        }
        map.serialize_entry("index", &self.index)?;
        if self.id.is_some() {
            map.serialize_entry("type", kind)?;
        }
        map.end()
    }
}

/// Appends `value` in lowercase hexadecimal, zero-padded to at least `width` digits: the
/// text `format!("{value:0width$x}")` writes, without the formatting machinery (ids made
/// for every request are written with it).
///
/// ```
/// let mut id = String::from("req-");
/// choicewise_proto::chunks::push_hex(&mut id, 0xbeef, 0);
/// choicewise_proto::chunks::push_hex(&mut id, 7, 4);
/// assert_eq!(id, "req-beef0007");
/// ```
pub fn push_hex(out: &mut String, value: u64, width: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        digits[start] = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    let written = digits.len() - start;
    out.extend(std::iter::repeat_n('0', width.saturating_sub(written)));
    out.extend(digits[start..].iter().map(|&d| char::from(d)));
}

/// What every chunk of one answer repeats: its id, its time and the model's name.
///
/// ```
/// use choicewise_proto::chunks::Envelope;
/// let envelope = Envelope::new("m");
/// assert!(envelope.id.starts_with("chatcmpl-"));
/// assert!(envelope.prefix().ends_with("\"choices\":["));
/// ```
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The answer's id (`chatcmpl-…`, unique within the process).
    pub id: Arc<str>,
    /// When it was made, in seconds since the Unix epoch.
    pub created: u64,
    /// The model's name, as the client asked for it.
    pub model: Arc<str>,
}

impl Envelope {
    /// A new answer's envelope for `model`: a fresh id, the time now.
    pub fn new(model: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut id = String::with_capacity(64);
        id.push_str("chatcmpl-cw");
        push_hex(&mut id, (nanos.as_nanos() & 0xffff_ffff_ffff) as u64, 0);
        push_hex(&mut id, n, 0);
        Envelope {
            id: Arc::from(id),
            created: nanos.as_secs(),
            model: Arc::from(model),
        }
    }

    /// A chunk's JSON up to the opening of its `choices` array, for writing chunks without
    /// building each one's envelope (`{"id":…,"object":…,"created":…,"model":…,"choices":[`);
    /// close it with the elements and `]}`.
    ///
    /// ```
    /// # use choicewise_proto::chunks::Envelope;
    /// let envelope = Envelope::new("m \"quoted\" ☕");
    /// let chunk: serde_json::Value =
    ///     serde_json::from_str(&format!("{}]}}", envelope.prefix())).unwrap();
    /// assert_eq!(chunk, envelope.chunk(Vec::new()));
    /// ```
    pub fn prefix(&self) -> String {
        let mut out = Vec::with_capacity(96 + self.id.len() + self.model.len());
        // Strings serialise without error into memory; no tree is made.
        out.extend_from_slice(b"{\"id\":");
        let _ = serde_json::to_writer(&mut out, &*self.id);
        out.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.created).as_bytes());
        out.extend_from_slice(b",\"model\":");
        let _ = serde_json::to_writer(&mut out, &*self.model);
        out.extend_from_slice(b",\"choices\":[");
        // JSON written from strings is UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }

    /// A chunk of these choices' elements, as a JSON value.
    ///
    /// ```
    /// # use choicewise_proto::chunks::Envelope;
    /// let chunk = Envelope::new("m").chunk(Vec::new());
    /// assert_eq!(chunk["object"], "chat.completion.chunk");
    /// ```
    pub fn chunk(&self, choices: Vec<Value>) -> Value {
        json!({
            "id": &*self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": &*self.model,
            "choices": choices,
        })
    }
}

/// What ends a Chat Completions stream: its `[DONE]` event.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Writes one answer's server-sent events: each chunk (the envelope around one element), the
/// last chunk (`choices: []`, the usage and the summary), an error event, `[DONE]`. Every
/// event is framed `data: {json}\n\n` and written straight into the caller's buffer.
///
/// ```
/// use choicewise_proto::chunks::{ChoiceChunks, Envelope, DONE};
///
/// let encoder = Envelope::new("m").encoder();
/// let mut out = Vec::new();
/// encoder.element(&mut out, &ChoiceChunks::new(0).opening());
/// encoder.last(&mut out, Some(&serde_json::json!({"total_tokens": 3})), None::<&()>);
/// out.extend_from_slice(DONE);
/// let text = String::from_utf8(out).unwrap();
/// let events: Vec<&str> = text.split_terminator("\n\n").collect();
/// let last: serde_json::Value = serde_json::from_str(&events[1]["data: ".len()..]).unwrap();
/// assert_eq!(last["usage"]["total_tokens"], 3);
/// assert_eq!(last["choices"], serde_json::json!([]));
/// assert_eq!(events[2], "data: [DONE]");
/// ```
#[derive(Debug, Clone)]
pub struct ChunkEncoder {
    envelope: Envelope,
    /// A chunk up to its `choices` array ([`Envelope::prefix`]).
    prefix: String,
}

impl Envelope {
    /// The encoder of this answer's events.
    ///
    /// ```
    /// # use choicewise_proto::chunks::Envelope;
    /// let encoder = Envelope::new("m").encoder();
    /// # let _ = encoder;
    /// ```
    pub fn encoder(&self) -> ChunkEncoder {
        ChunkEncoder {
            prefix: self.prefix(),
            envelope: self.clone(),
        }
    }
}

impl ChunkEncoder {
    /// Appends the event of one chunk holding `element`.
    pub fn element(&self, out: &mut Vec<u8>, element: &Element) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(self.prefix.as_bytes());
        if !element.write_text(out) {
            // An element serialises without error into memory.
            let _ = serde_json::to_writer(&mut *out, element);
        }
        out.extend_from_slice(b"]}\n\n");
    }

    /// Appends the answer's last chunk: no choice, its `usage` and its `choicewise` summary
    /// when given, each serialised from its own type (its keys in the order it writes
    /// them: in sorted order, as every other object of the chunk).
    pub fn last<U, C>(&self, out: &mut Vec<u8>, usage: Option<&U>, choicewise: Option<&C>)
    where
        U: Serialize + ?Sized,
        C: Serialize + ?Sized,
    {
        #[derive(serde::Serialize)]
        struct Last<'a, U: ?Sized, C: ?Sized> {
            choices: [(); 0],
            #[serde(skip_serializing_if = "Option::is_none")]
            choicewise: Option<&'a C>,
            created: u64,
            id: &'a str,
            model: &'a str,
            object: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            usage: Option<&'a U>,
        }
        let envelope = &self.envelope;
        let last = Last {
            choices: [],
            choicewise,
            created: envelope.created,
            id: &envelope.id,
            model: &envelope.model,
            object: "chat.completion.chunk",
            usage,
        };
        Self::event(out, &last);
    }

    /// Appends one event of `data` (an error event's `{"error": {...}}`).
    pub fn event(out: &mut Vec<u8>, data: &impl Serialize) {
        out.extend_from_slice(b"data: ");
        // A value in memory serialises without error.
        let _ = serde_json::to_writer(&mut *out, data);
        out.extend_from_slice(b"\n\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_what_format_writes() {
        let mut values = vec![
            0,
            1,
            9,
            10,
            15,
            16,
            255,
            256,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 64));
        }
        for value in values {
            for width in [0, 1, 4, 12, 16, 20] {
                let mut out = String::from("p-");
                push_hex(&mut out, value, width);
                assert_eq!(out, format!("p-{value:0width$x}"), "{value} at {width}");
            }
        }
    }

    #[test]
    fn an_element_of_text_is_written_as_it_serialises() {
        let texts = [
            "",
            "plain",
            "quote \" and \\ and \n\u{1}",
            "café ☕ \u{2028}",
        ];
        let reasons = [None, Some("stop"), Some("length \"cut\"")];
        let mut tried = 0;
        for (t, text) in texts.iter().enumerate() {
            let deltas = [
                Delta::Content(Text::from(*text)),
                Delta::Reasoning(Text::from(*text)),
                Delta::Refusal(Text::from(*text)),
            ];
            for delta in deltas {
                for reason in reasons {
                    for role in [None, Some(Text::from("assistant"))] {
                        let element = Element {
                            index: [0, 7, u32::MAX][t % 3],
                            role,
                            delta: delta.clone(),
                            finish_reason: reason.map(Text::from),
                            error: None,
                            logprobs: None,
                        };
                        let mut fast = Vec::new();
                        assert!(element.write_text(&mut fast));
                        assert_eq!(String::from_utf8(fast).unwrap(), written(&element));
                        tried += 1;
                    }
                }
            }
        }
        assert_eq!(tried, 72);
        // Anything else is left to serde.
        let element = Element {
            index: 0,
            role: None,
            delta: Delta::Content(Text::from("x")),
            finish_reason: None,
            error: Some(Text::from("failed")),
            logprobs: None,
        };
        assert!(!element.write_text(&mut Vec::new()));
        let opening = Element {
            delta: Delta::Opening,
            error: None,
            ..element
        };
        assert!(!opening.write_text(&mut Vec::new()));
    }

    /// The element as the client reads it.
    fn written(element: &Element) -> String {
        serde_json::to_string(element).unwrap()
    }

    /// A call's first event.
    fn call_start(kind: CallKind, position: u32, id: Option<&str>, name: &str) -> ChoiceEvent {
        ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
            call: CallRef { kind, position },
            id: id.map(Text::from),
            name: Some(name.into()),
            custom: false,
        })
    }

    #[test]
    fn events_become_openai_deltas() {
        let mut c = ChoiceChunks::new(2);
        let first = c.event(&ChoiceEvent::Content("Hi \"x\"\n".into())).unwrap();
        assert_eq!(
            written(&first),
            r#"{"delta":{"content":"Hi \"x\"\n","role":"assistant"},"finish_reason":null,"index":2,"logprobs":null}"#
        );
        let call = CallRef {
            kind: CallKind::Tool,
            position: 1,
        };
        let started = c
            .event(&call_start(
                CallKind::Tool,
                1,
                Some("call_1"),
                "get_weather",
            ))
            .unwrap();
        assert_eq!(
            written(&started),
            r#"{"delta":{"tool_calls":[{"function":{"arguments":"","name":"get_weather"},"id":"call_1","index":1,"type":"function"}]},"finish_reason":null,"index":2,"logprobs":null}"#
        );
        let fragment = c
            .event(&ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
                call,
                fragment: "{\"city\"".into(),
            }))
            .unwrap();
        assert_eq!(
            written(&fragment),
            r#"{"delta":{"tool_calls":[{"function":{"arguments":"{\"city\""},"index":1}]},"finish_reason":null,"index":2,"logprobs":null}"#
        );
        let done = c
            .event(&ChoiceEvent::Finished("tool_calls".into()))
            .unwrap();
        assert_eq!(
            written(&done),
            r#"{"delta":{},"finish_reason":"tool_calls","index":2,"logprobs":null}"#
        );
        assert!(c.finished);
        let mut d = ChoiceChunks::new(0);
        let failed = d.failed("the connection closed");
        assert_eq!(
            written(&failed),
            r#"{"choicewise":{"error":"the connection closed"},"delta":{"role":"assistant"},"finish_reason":"error","index":0,"logprobs":null}"#
        );
    }

    #[test]
    fn the_first_element_carries_the_role() {
        let mut c = ChoiceChunks::new(0);
        let role = c.event(&ChoiceEvent::Role("assistant".into())).unwrap();
        assert_eq!(
            written(&role),
            r#"{"delta":{"content":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}"#
        );
        let reasoning = c.event(&ChoiceEvent::Reasoning("hm".into())).unwrap();
        assert_eq!(
            written(&reasoning),
            r#"{"delta":{"reasoning_content":"hm"},"finish_reason":null,"index":0,"logprobs":null}"#
        );
        let mut legacy = ChoiceChunks::new(1);
        let started = legacy
            .event(&call_start(CallKind::Function, 0, None, "f"))
            .unwrap();
        assert_eq!(
            written(&started),
            r#"{"delta":{"function_call":{"arguments":"","name":"f"},"role":"assistant"},"finish_reason":null,"index":1,"logprobs":null}"#
        );
        let refusal = legacy.event(&ChoiceEvent::Refusal("no".into())).unwrap();
        assert_eq!(
            written(&refusal),
            r#"{"delta":{"refusal":"no"},"finish_reason":null,"index":1,"logprobs":null}"#
        );
        assert_eq!(
            legacy.event(&ChoiceEvent::Cancelled(crate::driver::CancelReason::Asked)),
            None
        );
    }
}
