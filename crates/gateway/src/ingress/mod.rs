//! The SDKs' own APIs in front of the gateway: Anthropic Messages (`POST /v1/messages`) and
//! OpenAI Responses (`POST /v1/responses`, stateless), translated onto the Chat Completions
//! request the gateway already serves, and its one answer written back in the client's API.
//!
//! Nothing here does I/O: each part is a pure function or a small state machine over bytes,
//! tested without a server.
//!
//! **The request path.** [`to_chat`] reads the client's body into a [`Translated`]: the
//! Chat Completions body (`model`, `messages`, `stream`, the `choicewise` extension as sent,
//! and the sampling fields), which `ChatRequest::parse` accepts, and a [`Reply`]: what the
//! answer needs to know (the API, the model asked for, whether the client asked for thinking
//! or reasoning, its stop sequences). A request these APIs do not serve here is an
//! [`IngressError`] (400 naming the field), answered with [`IngressError::body`].
//!
//! **The answer path.** The gateway runs the request as usual (these APIs have no `n`: one
//! output choice) and then either
//!
//! - streams: `reply.encoder()` gives an [`Encoder`]; `start` once, `event` for every
//!   `ChoiceEvent` of the output choice, then exactly one of `failed` (the choice failed) or
//!   `end` (with the usage, the provider's own stop reason when known, and the `choicewise`
//!   summary); the bytes it appends are whole SSE frames, ready to write;
//! - or answers one JSON object: `reply.message(&output, &usage, choicewise)`.
//!
//! Failures before the answer starts (401, 404, 413, 429, 502, ...) are answered in the
//! client's terms with [`error_body`] or [`api_error_body`].

pub(crate) mod anthropic;
pub(crate) mod responses;

#[cfg(test)]
mod round_trip;

use std::fmt;

use std::collections::BTreeMap;

use axum::http::StatusCode;
use bytes::Bytes;
#[cfg(test)]
use choicewise_core::Usage;
use choicewise_core::{ChoiceEvent, ChoiceOutput, Dialect};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::answer::ending::OutputEnd;
use crate::error::ApiError;
use crate::request::{Fields, MAX_PARSED_FIELD, NotAnObject, split_object, too_large_to_parse};

/// A request refused before it runs, in the terms of the client's API: a status, the field
/// concerned when there is one, a message naming it, and (Responses) OpenAI's error code.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IngressError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The field concerned, in the API's own path notation (`messages.0.content.1.type`,
    /// `input[0].type`), if any.
    pub param: Option<String>,
    /// What is wrong, naming the field.
    pub message: String,
    /// OpenAI's `code` (`missing_required_parameter`, `invalid_value`, ...), if any.
    pub code: Option<&'static str>,
}

impl IngressError {
    /// 400: the field `param` is wrong; `what` says how (the message is `param: what`).
    pub fn invalid(param: impl Into<String>, what: impl fmt::Display) -> Self {
        let param = param.into();
        IngressError {
            status: StatusCode::BAD_REQUEST,
            message: format!("{param}: {what}"),
            param: Some(param),
            code: Some("invalid_value"),
        }
    }

    /// 400: the required field `param` is missing.
    pub fn missing(param: impl Into<String>) -> Self {
        let mut e = IngressError::invalid(param, "Field required");
        e.code = Some("missing_required_parameter");
        e
    }

    /// 400: a field naming something the gateway does not serve (server state, server-side
    /// tools); `what` says which and why.
    pub fn unsupported(param: impl Into<String>, what: impl fmt::Display) -> Self {
        let mut e = IngressError::invalid(param, what);
        e.code = Some("unsupported_parameter");
        e
    }

    /// 400 about the body as a whole (not JSON, not an object).
    pub fn body_error(message: impl Into<String>) -> Self {
        IngressError {
            status: StatusCode::BAD_REQUEST,
            param: None,
            message: message.into(),
            code: Some("invalid_json"),
        }
    }

    /// The error's JSON body in `api`'s shape (the gateway answers through
    /// [`ApiError`]'s conversion and [`api_error_body`]; the tests check this shape).
    #[cfg(test)]
    pub fn body(&self, api: Dialect) -> Value {
        match api {
            Dialect::Anthropic => anthropic::error_body(self.status, &self.message),
            _ => responses::error_object(
                self.status,
                &self.message,
                None,
                self.param.as_deref(),
                self.code,
            ),
        }
    }
}

impl fmt::Display for IngressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

/// Reads a request body as a JSON object's top-level fields ([`Fields`]: nothing below its
/// top level is parsed): not JSON, or not an object, is a 400.
pub(crate) fn parse_body(bytes: &Bytes) -> Result<Fields, IngressError> {
    split_object(bytes).map_err(|e| match e {
        NotAnObject::Json(e) => {
            IngressError::body_error(format!("the request body is not valid JSON: {e}"))
        }
        NotAnObject::Type => IngressError::body_error("the request body must be a JSON object"),
    })
}

/// The fields of a client's body that a translation reads, parsed (`null` ones included);
/// the others stay as they came. A field too deeply nested to parse, or an object or array
/// too large to ([`too_large_to_parse`]: checked for every field before any is parsed), is a
/// 400 naming it.
pub(crate) fn read_fields(
    body: &Fields,
    keys: &[&str],
) -> Result<Map<String, Value>, IngressError> {
    let mut obj = Map::new();
    for key in keys {
        if let Some(e) = body.get(*key).and_then(|t| too_large_to_parse(key, t)) {
            return Err(IngressError {
                status: StatusCode::BAD_REQUEST,
                param: Some(key.to_string()),
                message: e,
                code: Some("field_too_large"),
            });
        }
    }
    for key in keys {
        if let Some(text) = body.get(*key) {
            let value = serde_json::from_slice(text)
                .map_err(|e| IngressError::invalid(*key, format!("could not be read: {e}")))?;
            obj.insert(key.to_string(), value);
        }
    }
    Ok(obj)
}

/// A field's text, `None` when absent or `null` (these APIs treat both alike).
pub(crate) fn raw_field<'a>(body: &'a Fields, key: &str) -> Option<&'a Bytes> {
    body.get(key).filter(|t| &t[..] != b"null")
}

/// Writes one function tool in Chat Completions' shape,
/// `{"function":{"description":…,"name":…,"parameters":…,"strict":…},"type":"function"}`
/// (keys in order, as a parsed object writes them), from its parts' JSON text: the schema
/// is copied as the client sent it.
pub(crate) fn write_function_tool(out: &mut Vec<u8>, name: &str, parts: &[(&str, &[u8])]) {
    let mut fields: Vec<(&str, &[u8])> = parts.to_vec();
    let name_text = serde_json::to_vec(name).unwrap_or_else(|_| b"\"\"".to_vec());
    fields.push(("name", &name_text));
    fields.sort_by_key(|(k, _)| *k);
    out.extend_from_slice(b"{\"function\":{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b"\":");
        out.extend_from_slice(v);
    }
    out.extend_from_slice(b"},\"type\":\"function\"}");
}

/// A JSON array's entries, each its text (`what`: the field, for the error).
pub(crate) fn raw_entries<'a>(text: &'a [u8], at: &str) -> Result<Vec<&'a RawValue>, IngressError> {
    serde_json::from_slice(text)
        .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}")))
}

/// A Chat Completions `messages` array written as its messages are made, so the translated
/// list is text, never a tree: messages pushed onto [`made`](Self::made) are written out
/// by the next write; a message
/// written as text ([`write_with`](Self::write_with), [`write`](Self::write)) at once; an
/// assistant message that later tool calls may join is held as text
/// ([`hold_assistant`](Self::hold_assistant), [`call`](Self::call)) until the next
/// message.
#[derive(Debug)]
pub(crate) struct MessagesOut {
    text: Vec<u8>,
    /// Made and not yet written.
    pub made: Vec<Value>,
    /// An assistant message held for the tool calls that may join it: its text up to its
    /// `role` (`{"content":…,"role":"assistant"`), and its calls' text.
    held: Option<(Vec<u8>, Vec<u8>)>,
    any: bool,
}

impl MessagesOut {
    /// An empty list, its text's buffer sized for about `size` bytes.
    pub fn with_capacity(size: usize) -> Self {
        let mut text = Vec::with_capacity(size.saturating_add(2));
        text.push(b'[');
        MessagesOut {
            text,
            made: Vec::new(),
            held: None,
            any: false,
        }
    }

    /// Writes out every message made, then the message `write` writes at the end of the
    /// list's text (on its error, the list is left as it is: the request is refused).
    pub fn write_with<E>(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.write_made();
        if self.any {
            self.text.push(b',');
        }
        self.any = true;
        write(&mut self.text)
    }

    /// Writes out every message made, then `message`.
    pub fn write(&mut self, message: &Value) {
        self.write_made();
        if self.any {
            self.text.push(b',');
        }
        // A value always serialises.
        let _ = serde_json::to_writer(&mut self.text, message);
        self.any = true;
    }

    /// Writes out every message made, then holds an assistant message of `content` (its
    /// JSON text) for the tool calls that may follow ([`call`](Self::call)).
    pub fn hold_assistant(&mut self, content: &[u8]) {
        self.write_made();
        let mut head = Vec::with_capacity(content.len() + 32);
        head.extend_from_slice(br#"{"content":"#);
        head.extend_from_slice(content);
        head.extend_from_slice(br#","role":"assistant""#);
        self.held = Some((head, Vec::new()));
    }

    /// A tool call joining the assistant message just before it, as Chat Completions has
    /// it; after another message, a new assistant message of no content.
    pub fn call(&mut self, call: &Value) {
        // A value always serialises.
        self.call_text(&serde_json::to_vec(call).unwrap_or_default());
    }

    /// [`call_text`](Self::call_text) of a call's JSON text given whole: the first call of a
    /// message is kept as it is, not copied (a call of large arguments is not twice in
    /// memory).
    pub fn call_owned(&mut self, call: Vec<u8>) {
        if !self.made.is_empty() || self.held.is_none() {
            self.hold_assistant(b"null");
        }
        match &mut self.held {
            Some((_, calls)) if calls.is_empty() => *calls = call,
            _ => self.call_text(&call),
        }
    }

    /// [`call`](Self::call) of a call's JSON text.
    pub fn call_text(&mut self, call: &[u8]) {
        if !self.made.is_empty() || self.held.is_none() {
            self.hold_assistant(b"null");
        }
        if let Some((_, calls)) = &mut self.held {
            if !calls.is_empty() {
                calls.push(b',');
            }
            calls.extend_from_slice(call);
        }
    }

    fn put(&mut self, message: &[u8]) {
        if self.any {
            self.text.push(b',');
        }
        self.text.extend_from_slice(message);
        self.any = true;
    }

    fn write_held(&mut self) {
        if let Some((message, calls)) = self.held.take() {
            self.put(&message);
            if !calls.is_empty() {
                self.text.extend_from_slice(br#","tool_calls":["#);
                self.text.extend_from_slice(&calls);
                self.text.push(b']');
            }
            self.text.push(b'}');
        }
    }

    fn write_made(&mut self) {
        self.write_held();
        for m in std::mem::take(&mut self.made) {
            if self.any {
                self.text.push(b',');
            }
            // A value always serialises.
            let _ = serde_json::to_writer(&mut self.text, &m);
            self.any = true;
        }
    }

    /// The array's JSON text.
    pub fn finish(mut self) -> Bytes {
        self.write_made();
        self.text.push(b']');
        Bytes::from(self.text)
    }
}

/// A value's text as a tree when it is a scalar, or an object or array of at most 64 KiB; a
/// larger object or array as an empty one of its kind (where only a string or a small
/// object is read, its type is all that matters).
pub(crate) fn lean(raw: &RawValue) -> Result<Value, serde_json::Error> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'[') if text.len() > MAX_PARSED_FIELD => Ok(Value::Array(Vec::new())),
        Some(b'{') if text.len() > MAX_PARSED_FIELD => Ok(Value::Object(Map::new())),
        _ => serde_json::from_str(text),
    }
}

/// The fields `keys` of the object `raw`, each [`lean`], the others skipped unparsed; `raw`
/// as [`lean`] when it is no object.
pub(crate) fn lean_object(raw: &RawValue, keys: &[&str]) -> Result<Value, serde_json::Error> {
    if !raw.get().starts_with('{') {
        return lean(raw);
    }
    let mut obj = Map::new();
    choicewise_partial_json::for_each_raw_field(raw.get().as_bytes(), |k, v| {
        if keys.contains(&k) {
            obj.insert(k.to_string(), lean(v)?);
        }
        Ok(())
    })??;
    Ok(Value::Object(obj))
}

/// Calls `each` with every entry of the array `text` (at `at`) as its text, one at a time.
pub(crate) fn each_block<'t>(
    text: &'t RawValue,
    at: &str,
    each: impl FnMut(usize, &'t RawValue) -> Result<(), IngressError>,
) -> Result<(), IngressError> {
    match choicewise_partial_json::for_each_raw_entry(text.get().as_bytes(), each) {
        Ok(read) => read,
        Err(e) => Err(IngressError::invalid(at, format!("could not be read: {e}"))),
    }
}

/// Content parts written as JSON text as they come, the first one held: one text part alone
/// becomes a plain string, none an empty one ([`Parts::content`]).
#[derive(Default)]
pub(crate) struct Parts {
    first: Option<Value>,
    rest: Vec<u8>,
    pub n: usize,
}

impl Parts {
    /// Parts whose text is given room for about `size` bytes (the client's parts' text) at
    /// once: a list of many parts grown by doubling would hold up to twice itself.
    pub fn with_capacity(size: usize) -> Self {
        Parts {
            rest: Vec::with_capacity(size.saturating_add(size / 16)),
            ..Parts::default()
        }
    }

    pub fn push(&mut self, part: Value) {
        match self.first.take() {
            None if self.n == 0 => self.first = Some(part),
            first => {
                for p in first.iter().chain([&part]) {
                    if !self.rest.is_empty() {
                        self.rest.push(b',');
                    }
                    // A value always serialises.
                    let _ = serde_json::to_writer(&mut self.rest, p);
                }
            }
        }
        self.n += 1;
    }

    pub fn extend(&mut self, other: Parts) {
        if let Some(first) = other.first {
            self.push(first);
        } else if !other.rest.is_empty() {
            if let Some(first) = self.first.take() {
                // Written out: the parts are more than one.
                self.push(first);
                self.n -= 1;
            }
            if !self.rest.is_empty() {
                self.rest.push(b',');
            }
            self.rest.extend_from_slice(&other.rest);
            self.n += other.n;
        }
    }

    /// The content's JSON text.
    pub fn content(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.rest.len() + 2);
        self.write_content(&mut out);
        out
    }

    /// The content's JSON text, written at the end of `out`.
    pub fn write_content(self, out: &mut Vec<u8>) {
        match (self.first, self.n) {
            (None, 0) => out.extend_from_slice(b"\"\""),
            (Some(first), 1) => {
                let value = match first["type"] == "text" {
                    true => &first["text"],
                    false => &Value::Array(vec![first.clone()]),
                };
                // A value always serialises.
                let _ = serde_json::to_writer(out, value);
            }
            _ => {
                out.push(b'[');
                out.extend_from_slice(&self.rest);
                out.push(b']');
            }
        }
    }
}

/// Writes the JSON text `json` (known to be JSON: a raw value's) as a JSON string of its
/// compact form: `choicewise_partial_json::compact_json` serialised as a string, written at
/// once without either in memory (a tool call's `arguments` from an `input`).
pub(crate) fn write_compact_as_string(out: &mut Vec<u8>, json: &str) {
    // At most its bytes and an escape for each quote and backslash: reserved exactly, so that
    // a buffer sized for a whole list is not doubled for it.
    let escapes = json.bytes().filter(|b| matches!(b, b'"' | b'\\')).count();
    out.reserve_exact(json.len() + escapes + 2);
    out.push(b'"');
    let (mut in_string, mut escaped) = (false, false);
    for &b in json.as_bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            continue;
        } else {
            in_string = b == b'"';
        }
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            // Not in valid JSON text but as whitespace, which is left out above.
            0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// An entry's top-level fields, each its text; `None` when it is not an object.
pub(crate) fn raw_object(entry: &RawValue) -> Option<BTreeMap<String, &RawValue>> {
    if !entry.get().starts_with('{') {
        return None;
    }
    serde_json::from_str(entry.get()).ok()
}

/// A small field of an entry, parsed (its `type`, `name`): `Null` when absent.
pub(crate) fn small(entry: &BTreeMap<String, &RawValue>, key: &str) -> Value {
    (entry.get(key))
        .and_then(|t| serde_json::from_str(t.get()).ok())
        .unwrap_or(Value::Null)
}

/// Any failure's JSON body in `api`'s shape: Anthropic's
/// `{"type": "error", "error": {"type", "message"}}` with the error type its status stands
/// for (`invalid_request_error` 400, `authentication_error` 401, `permission_error` 403,
/// `not_found_error` 404, `request_too_large` 413, `rate_limit_error` 429, `api_error` 500
/// and other 5xx, `overloaded_error` 529); OpenAI's `{"error": {"message", "type", "param",
/// "code"}}` for Responses (`invalid_request_error` below 500 but 429's `rate_limit_error`,
/// `server_error` from 500) for both OpenAI APIs. (The gateway answers with
/// [`api_error_body`]; its tests read the shapes through this.)
#[cfg(test)]
pub(crate) fn error_body(api: Dialect, status: StatusCode, message: &str) -> Value {
    match api {
        Dialect::Anthropic => anthropic::error_body(status, message),
        _ => responses::error_object(status, message, None, None, None),
    }
}

/// One of the gateway's own errors (the Chat Completions endpoint's [`ApiError`]: 401, 404,
/// 413, 429, 502, or a 400 of `ChatRequest::parse`) in `api`'s shape: the same status and
/// message; Responses keeps its OpenAI `type` and `code` too.
pub(crate) fn api_error_body(api: Dialect, error: &ApiError) -> Value {
    match api {
        Dialect::Anthropic => anthropic::error_body(error.status, &error.message),
        Dialect::Chat => error.body(),
        _ => responses::error_object(
            error.status,
            &error.message,
            Some(error.kind),
            error.param.as_deref(),
            error.code.as_deref(),
        ),
    }
}

/// A request translated: the Chat Completions body to run, and what its answer needs.
#[derive(Debug, Clone)]
pub(crate) struct Translated {
    /// The Chat Completions body's fields: `model`, `messages`, `stream` when sent, the
    /// `choicewise` extension as sent, and the translated sampling and tool fields. No `n`.
    /// The tools are written one by one, their schemas copied as sent.
    pub chat: Fields,
    /// The client asked for a streamed answer.
    #[allow(dead_code)] // the chat body carries it too; read by the tests
    pub stream: bool,
    /// The client's own fields that an upstream of the same API takes as they are but Chat
    /// Completions cannot carry: Anthropic's `thinking` (its budget), Responses'
    /// `reasoning` (with `summary`). An upstream of the client's API gets them over the Chat
    /// Completions approximation (`reasoning_effort`): [`crate::upstream::open::Opener::native`].
    pub native: Map<String, Value>,
    /// The client's hosted tools (server-side tools the gateway cannot run: Responses'
    /// `web_search`, `file_search`, ..., Messages' server and Anthropic-defined tools), left
    /// out of `chat`: the model's `hosted_tools` rule drops them or refuses the request.
    pub hosted: Vec<Hosted>,
    /// What the answer needs.
    pub reply: Reply,
}

/// A hosted tool of the request, left out of the Chat Completions body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hosted {
    /// Where it is, in the API's path notation (`tools[8].type`, `tools.2.type`).
    pub param: String,
    /// Its type (`web_search`, `web_search_20250305`, ...).
    pub kind: String,
}

impl Hosted {
    /// The 400 of a model whose `hosted_tools` is `"refuse"`.
    pub fn refused(&self, model: &str) -> IngressError {
        IngressError::unsupported(
            self.param.clone(),
            format!(
                "{:?} is a hosted tool, which this gateway cannot run (model {model:?} has hosted_tools = \"refuse\"; with \"drop\" it is left out)",
                self.kind
            ),
        )
    }
}

/// What an answer in the client's API needs to know of its request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
    /// The API to answer in: Responses or Anthropic (only their requests are translated).
    pub api: Dialect,
    /// The model the client asked for, named in the answer.
    pub model: String,
    /// The client asked for thinking (Anthropic `thinking` enabled or adaptive) or reasoning
    /// (a Responses `reasoning` object): reasoning text is answered as thinking blocks or
    /// reasoning summary items. Otherwise it is left out, as those APIs do.
    pub reasoning: bool,
    /// The request's stop sequences (Anthropic's `stop_sequence` names the one that stopped
    /// the answer when it can be known).
    pub stop: Vec<String>,
    /// Responses: the request's parameters a response object repeats (`instructions`,
    /// `tools`, `tool_choice`, `temperature`, ...), as they were sent: written into every
    /// response object as their JSON text ([`responses::Echoed`]).
    pub echo: std::sync::Arc<Fields>,
    /// Responses: the functions of the client's `namespace` tools, by the flat name they
    /// were sent upstream under: their namespace and own name, as the model's calls of them
    /// are given back.
    pub namespaced: std::collections::HashMap<String, (String, String)>,
    /// Responses: the client's `custom` (free-form) tools, sent upstream as function tools
    /// of one string argument, `input`: the model's calls of them are given back as
    /// `custom_tool_call` items.
    pub custom: std::collections::HashSet<String>,
    /// Messages: the prompt's input tokens known when the answer starts (the gateway's
    /// estimate), for `message_start`.
    pub input_tokens: Option<u64>,
}

/// Translates a request body of `api` (see [`anthropic::to_chat`], [`responses::to_chat`]);
/// a Chat Completions body is not translated (a 400 says so).
pub(crate) fn to_chat(api: Dialect, body: &Fields) -> Result<Translated, IngressError> {
    match api {
        Dialect::Anthropic => anthropic::to_chat(body),
        Dialect::Responses => responses::to_chat(body),
        other => Err(IngressError::body_error(format!(
            "a {other} request is not translated"
        ))),
    }
}

#[cfg(test)]
impl Translated {
    /// The Chat Completions body, parsed: for the tests.
    pub fn chat(&self) -> Value {
        let fields = (self.chat.iter())
            .map(|(k, v)| (k.clone(), serde_json::from_slice(v).unwrap()))
            .collect();
        Value::Object(fields)
    }
}

/// A test's body as the gateway reads it.
#[cfg(test)]
pub(crate) fn fields_of(body: &Value) -> Result<Fields, IngressError> {
    parse_body(&Bytes::from(serde_json::to_vec(body).unwrap()))
}

impl Reply {
    /// A non-streamed answer ([`message`](Self::message)) as the JSON text sent: a
    /// Responses answer with the request's echoed parameters as they were sent.
    pub fn answer_text(&self, body: &Value) -> Vec<u8> {
        if self.api == Dialect::Anthropic {
            // A tool call's input as the upstream wrote it.
            return serde_json::to_vec(&AsWritten(body)).unwrap_or_default();
        }
        let echoed = responses::Echoed {
            value: body,
            echo: &self.echo,
        };
        // A value always serialises.
        serde_json::to_vec(&echoed).unwrap_or_default()
    }

    /// A new streamed-answer encoder for this request.
    pub fn encoder(&self) -> Box<dyn Encoder> {
        match self.api {
            Dialect::Anthropic => Box::new(anthropic::MessagesEncoder::new(self)),
            _ => Box::new(responses::ResponsesEncoder::new(self)),
        }
    }

    /// The non-streamed answer: an Anthropic `message` object, or a Responses `response`
    /// object with its `output` items; `choicewise`, when given, as a top-level field.
    pub fn message(
        &self,
        output: &ChoiceOutput,
        usage: &Tokens,
        choicewise: Option<&Value>,
    ) -> Value {
        match self.api {
            Dialect::Anthropic => anthropic::message(self, output, usage, choicewise),
            _ => responses::message(self, output, usage, choicewise),
        }
    }
}

/// A non-streamed Anthropic answer written with each `tool_use` block's input as the
/// upstream wrote it, where the block carries that text
/// ([`anthropic::INPUT_AS_WRITTEN`]): its numbers digit for digit.
pub(crate) struct AsWritten<'a>(pub &'a Value);

impl Serialize for AsWritten<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(o) => {
                let written = o.get(anthropic::INPUT_AS_WRITTEN).and_then(Value::as_str);
                let mut map = s.serialize_map(None)?;
                for (k, v) in o {
                    match (k.as_str(), written) {
                        (anthropic::INPUT_AS_WRITTEN, _) => {}
                        ("input", Some(text)) => {
                            let raw: &RawValue =
                                serde_json::from_str(text).map_err(S::Error::custom)?;
                            map.serialize_entry(k, raw)?;
                        }
                        _ => map.serialize_entry(k, &AsWritten(v))?,
                    }
                }
                map.end()
            }
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&AsWritten(v))?;
                }
                seq.end()
            }
            v => v.serialize(s),
        }
    }
}

/// Writes one output choice's streamed answer in a client's API, as whole SSE frames
/// (`event: NAME\ndata: JSON\n\n`) appended to `out`: the API's block framing only; why
/// the choice ended is decided by [`crate::answer::ending::decide`] and written with
/// [`close`](Self::close).
///
/// Call `start` once, then `event` for each of the choice's events in order, then exactly
/// one of `failed`, `completed`, `close` and `end`. Each call is total: nothing panics, an
/// event that does not fit where it comes (after the finish, a fragment for a call already
/// closed) is dropped, and after the last frame nothing more is written.
pub(crate) trait Encoder: Send {
    /// The answer's opening frames (Anthropic `message_start`; Responses `response.created`
    /// and `response.in_progress`). Implied by the first other call if not made.
    fn start(&mut self, out: &mut Vec<u8>);

    /// The frames of one event: text, reasoning (when asked for), refusal, a tool call's
    /// start, argument fragments and end, the finish. Roles, log-probabilities, filter
    /// annotations and warnings show nothing.
    fn event(&mut self, event: &ChoiceEvent, out: &mut Vec<u8>);

    /// The choice failed (`why`): Anthropic's `error` event, Responses' `response.failed`;
    /// `choicewise` rides on it when given. The last frame.
    fn failed(&mut self, why: &str, choicewise: Option<&Value>, out: &mut Vec<u8>);

    /// The end of a choice that finished with `reason`: the open block or item closed, then
    /// Anthropic's `message_delta` (its `stop_reason`, the usage) and `message_stop`, or
    /// Responses' `response.completed` (`response.incomplete` for a `length` or
    /// `content_filter` finish) with the usage and every output item. `stop_reason` is the
    /// provider's own when known (`ChoiceOutput::stop_reason`: Anthropic's `stop_sequence`
    /// tells a stop sequence from an end of turn). `choicewise` rides on the last frame.
    fn completed(
        &mut self,
        reason: &str,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Value>,
        out: &mut Vec<u8>,
    );

    /// The finish reason seen (a `Finished` event), if any.
    fn finish_reason(&self) -> Option<&choicewise_core::Text>;

    /// Whether the choice's finish has been seen (a `Finished` event).
    #[cfg(test)]
    fn finished(&self) -> bool {
        self.finish_reason().is_some()
    }

    /// The answer's last frames for the choice's decided ending: [`completed`](Self::completed)
    /// when it finished, [`failed`](Self::failed) with why when not.
    fn close(
        &mut self,
        end: &OutputEnd,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Value>,
        out: &mut Vec<u8>,
    ) {
        match end {
            OutputEnd::Finished(reason) => {
                self.completed(reason, usage, stop_reason, choicewise, out);
            }
            other => self.failed(&other.why().unwrap_or_default(), choicewise, out),
        }
    }

    /// The answer's end after the choice's events ended: its ending decided from what the
    /// encoder saw ([`crate::answer::ending::decide`]: a choice that never finished, or finished
    /// with `error`, fails), then [`close`](Self::close).
    #[cfg(test)]
    fn end(
        &mut self,
        usage: &Tokens,
        stop_reason: Option<&str>,
        choicewise: Option<&Value>,
        out: &mut Vec<u8>,
    ) {
        let seen = crate::answer::ending::Seen {
            finish: self.finish_reason().cloned(),
            ..Default::default()
        };
        let end = crate::answer::ending::decide(Some(&seen), None);
        self.close(&end, usage, stop_reason, choicewise, out);
    }
}

/// An answer's token counts, as both APIs report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    /// Prompt tokens, cached ones included (Chat Completions' `prompt_tokens`).
    pub input: u64,
    /// Output tokens (`completion_tokens`).
    pub output: u64,
    /// Of the prompt tokens, those read from a cache (`prompt_tokens_details.cached_tokens`).
    pub cached_input: u64,
    /// Of the output tokens, reasoning ones (`completion_tokens_details.reasoning_tokens`).
    pub reasoning: u64,
}

impl Tokens {
    /// From the gateway's own usage object (which counts no cached or reasoning tokens).
    pub fn from_answer(usage: &crate::upstream::engine::AnswerUsage) -> Tokens {
        Tokens {
            input: usage.prompt_tokens,
            output: usage.completion_tokens,
            ..Tokens::default()
        }
    }

    /// From the library's [`Usage`].
    #[cfg(test)]
    pub fn from_usage(usage: &Usage) -> Tokens {
        let detail = |outer: &str, inner: &str| {
            (usage.details.get(outer))
                .and_then(|d| d.get(inner))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        Tokens {
            input: usage.prompt_tokens,
            output: usage.completion_tokens,
            cached_input: detail("prompt_tokens_details", "cached_tokens"),
            reasoning: detail("completion_tokens_details", "reasoning_tokens"),
        }
    }
}

/// A fresh id: `prefix`, then the time and a process-wide counter in hex (`msg_cw…`).
pub(crate) fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}_cw{:012x}{n:x}",
        unix_time().as_nanos() & 0xffff_ffff_ffff
    )
}

/// The time since the Unix epoch (zero if the clock is before it).
pub(crate) fn unix_time() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// Appends one SSE frame, `event: NAME\ndata: JSON\n\n`.
pub(crate) fn frame(out: &mut Vec<u8>, name: &str, data: &impl Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Serialising into memory fails only for a map with non-string keys, which no frame has.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// The field `key` of `obj`, `None` when absent or `null` (these APIs treat both alike).
pub(crate) fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// A refused request as the gateway answers it (its shape chosen by the API it came in).
impl From<IngressError> for ApiError {
    fn from(e: IngressError) -> Self {
        ApiError {
            status: e.status,
            message: e.message,
            kind: "invalid_request_error",
            code: e.code.map(str::to_string),
            param: e.param,
            retry_after: None,
        }
    }
}

#[cfg(test)]
mod compact_tests {
    /// Written at once, a raw value's compact text as a string is what serialising
    /// `compact_json`'s string writes.
    #[test]
    fn a_compact_string_is_written_as_serialised() {
        for json in [
            r#"{ "a" : [1, 2.50, 123456789012345678901234567890], "s": "x \" \\ \n é 😀 \u00e9" }"#,
            "[]",
            "\"a string\"",
            "  3  ",
        ] {
            let mut out = Vec::new();
            super::write_compact_as_string(&mut out, json);
            let expected =
                serde_json::to_vec(&choicewise_partial_json::compact_json(json)).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                String::from_utf8(expected).unwrap()
            );
        }
    }
}
