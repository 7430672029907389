//! The client APIs the gateway serves, one [`ClientApi`] each: Chat Completions
//! ([`chat::Chat`], `POST /v1/chat/completions`), Anthropic Messages ([`messages::Messages`],
//! `POST /v1/messages`), OpenAI Responses ([`responses::Responses`], `POST /v1/responses`,
//! stateless) and Google's Gemini ([`gemini::Gemini`], `POST
//! /v1beta/models/{model}:generateContent` and `:streamGenerateContent`). Each reads its requests into the Chat Completions request the gateway runs,
//! frames its answers and shapes its errors; the route of each is `answer::<A>`, so a new
//! client API is one module and one route.
//!
//! Nothing here does I/O: each part is a pure function or a small state machine over bytes,
//! tested without a server.
//!
//! **The request path.** A Messages or Responses body is read into a [`Translated`]: the
//! Chat Completions body (`model`, `messages`, `stream`, the `choicewise` extension as sent,
//! and the sampling fields), which `ChatRequest::from_fields` accepts, and a [`Reply`]: what
//! the answer needs to know (the model asked for, whether the client asked for thinking
//! or reasoning, its stop sequences). A request these APIs do not serve here is an
//! [`IngressError`] (400 naming the field), answered in the API's shape
//! ([`ClientApi::error_body`]).
//!
//! **The answer path.** The gateway runs the request as usual (these APIs have no `n`: one
//! output choice) and then either
//!
//! - streams: the API's [`Encoder`]; `start` once, `event` for every `ChoiceEvent` of the
//!   output choice, then `close` with the decided ending (the usage, the provider's own stop
//!   reason when known, and the `choicewise` summary); the bytes it appends are whole SSE
//!   frames, ready to write;
//! - or answers one JSON object ([`messages::message`], [`responses::message`]).
//!
//! Failures before the answer starts (401, 404, 413, 429, 502, ...) are answered in the
//! client's terms: [`ClientApi::shaped`].

pub(crate) mod chat;
pub(crate) mod gemini;
pub(crate) mod messages;
pub(crate) mod responses;

mod translate;

#[cfg(test)]
mod answers;
#[cfg(test)]
mod round_trip;

pub(crate) use translate::{
    MessagesOut, Parts, each_block, lean, lean_object, raw_entries, raw_field, raw_object,
    read_fields, small, write_compact_as_string, write_function_tool,
};

use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use choicewise_core::Dialect;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::Limits;
use crate::config::ModelPick;
use crate::error::ApiError;
use crate::request::{ChatRequest, Fields, NotAnObject, split_object};

/// Reads a translated API's body (Messages, Responses) with its `translate`: its fields,
/// translated, then checked as a Chat Completions request; its `native` fields go to an
/// upstream of API `native_to`; `prompt`: its prompt's tokens are counted for a streamed
/// answer's first event.
pub(crate) fn read_translated(
    bytes: &Bytes,
    (limits, picks): (&Limits, &crate::config::ByName<ModelPick>),
    translate: fn(&Fields) -> Result<Translated, IngressError>,
    native_to: Dialect,
    prompt: bool,
) -> Result<Read<Reply>, Box<Refused>> {
    let body = parse_body(bytes).map_err(|e| Refused::new(e, None))?;
    let asked = (body.get("model")).and_then(|m| serde_json::from_slice::<String>(m).ok());
    let translated = translate(&body).map_err(|e| Refused::new(e, asked.clone()))?;
    let native = (!translated.native.is_empty()).then(|| Arc::new((native_to, translated.native)));
    let prompt = (prompt && translated.stream).then(|| translated.chat.clone());
    let req = ChatRequest::from_fields(translated.chat, limits)
        .and_then(|r| r.with_model(picks, limits))
        .map_err(|e| Refused::new(e, asked))?;
    Ok(Read {
        req,
        reply: translated.reply,
        native,
        hosted: translated.hosted,
        prompt,
    })
}

/// Each client API the gateway serves, visited in turn: **the one list**. The router's
/// routes, the error shape of a path ([`of_path`]), the admission's cost of a body
/// ([`PathApi::cost`]) and the 404's list of routes all come from it, so that a new client
/// API is its module and one line here.
pub(crate) fn each(visit: &mut impl EachApi) {
    visit.api::<chat::Chat>();
    visit.api::<messages::Messages>();
    visit.api::<responses::Responses>();
    visit.api::<gemini::Gemini>();
}

/// What visits the client APIs ([`each`]): the router adds each one's route.
pub(crate) trait EachApi {
    fn api<A: ClientApi>(&mut self);
}

/// A client API as the layers know it from a request's path, before any handler: its
/// label, its routes as shown, its errors' shape and its bodies' cost.
#[derive(Clone, Copy)]
pub(crate) struct PathApi {
    /// [`ClientApi::LABEL`].
    pub label: &'static str,
    /// [`ClientApi::SHOWN`].
    pub shown: &'static [&'static str],
    /// [`ClientApi::owns`].
    pub owns: fn(&str) -> bool,
    /// [`ClientApi::shaped`].
    pub shaped: fn(ApiError) -> Response,
    /// [`ClientApi::COST`].
    pub cost: BodyCost,
    /// [`ClientApi::PATHS`].
    pub paths: crate::wellformed::Paths,
    /// [`ClientApi::MODELS`].
    pub models: Option<&'static str>,
}

/// Every client API ([`each`]) as the layers know it.
pub(crate) fn all() -> &'static [PathApi] {
    struct Collect(Vec<PathApi>);
    impl EachApi for Collect {
        fn api<A: ClientApi>(&mut self) {
            self.0.push(PathApi {
                label: A::LABEL,
                shown: A::SHOWN,
                owns: A::owns,
                shaped: A::shaped,
                cost: A::COST,
                paths: A::PATHS,
                models: A::MODELS,
            });
        }
    }
    static ALL: std::sync::LazyLock<Vec<PathApi>> = std::sync::LazyLock::new(|| {
        let mut apis = Collect(Vec::new());
        each(&mut apis);
        apis.0
    });
    &ALL
}

/// The client API whose path this is (a doubled `/v1`, `/v1/v1/...`, read as one), if any.
pub(crate) fn find(path: &str) -> Option<&'static PathApi> {
    let path = path
        .strip_prefix("/v1")
        .filter(|p| p.starts_with("/v1/"))
        .unwrap_or(path);
    all().iter().find(|api| (api.owns)(path))
}

/// The client API a path belongs to: its errors are answered in that API's shape (a path
/// of none is answered as the first, Chat Completions).
pub(crate) fn of_path(path: &str) -> PathApi {
    *find(path).unwrap_or(&all()[0])
}

/// The gateway's routes, as a 404 names them: each client API's, then the others.
pub(crate) fn routes_named() -> &'static str {
    static NAMED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let mut routes: Vec<String> = (all().iter())
            .flat_map(|a| a.shown.iter().map(|route| format!("POST {route}")))
            .collect();
        routes.extend(["GET /v1/models", "GET /v1/models/{id}"].map(String::from));
        for list in all().iter().filter_map(|a| a.models) {
            routes.extend([format!("GET {list}"), format!("GET {list}/{{model}}")]);
        }
        routes.push("GET /healthz".into());
        format!("{} and GET /metrics", routes.join(", "))
    });
    &NAMED
}

pub(crate) use crate::answer::client::{
    Asks, BodyCost, ClientApi, Counted, Encoder, Head, Hosted, Read, Refused, Tokens,
};
pub(crate) use crate::error::IngressError;

/// The error's JSON body in a client API's shape (tests).
#[cfg(test)]
impl IngressError {
    /// The error's JSON body in `A`'s shape, as the gateway answers it.
    pub fn body<A: ClientApi>(&self) -> Value {
        A::error_body(&ApiError::from(self.clone()))
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

/// A request translated: the Chat Completions body to run, and what its answer needs.
#[derive(Debug, Clone)]
pub(crate) struct Translated {
    /// The Chat Completions body's fields: `model`, `messages`, `stream` when sent, the
    /// `choicewise` extension as sent, and the translated sampling and tool fields. No `n`.
    /// The tools are written one by one, their schemas copied as sent.
    pub chat: Fields,
    /// The client asked for a streamed answer.
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

/// What an answer in the client's API needs to know of its request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
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
    /// response object as their JSON text ([`responses::object_text`]).
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

/// The length of `value` serialised as JSON, counted by a pass that writes nothing (0 for a
/// value that does not serialise).
pub(crate) fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

/// `value` serialised into a buffer of exactly its length ([`json_len`]): a non-streamed
/// answer holding megabytes of arguments is not written into a buffer grown by doubling, up
/// to twice its size.
pub(crate) fn to_vec_exact<T: Serialize>(value: &T) -> Vec<u8> {
    let len = json_len(value);
    if len == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(len);
    // A value that serialised once serialises again.
    let _ = serde_json::to_writer(&mut out, value);
    out
}

/// The longest `tool_use` input that a non-streamed Anthropic answer writes compacted (a
/// copy without insignificant whitespace); a longer one is written as the upstream wrote it,
/// with no copy.
pub(crate) const COMPACTED_INPUT_BYTES: usize = 64 * 1024;

/// A non-streamed Anthropic answer written with each `tool_use` block's input as the
/// upstream wrote it, where the block names its call ([`messages::INPUT_AS_WRITTEN`]): the
/// text of `calls` at that place, its numbers digit for digit (compacted up to
/// [`COMPACTED_INPUT_BYTES`]).
pub(crate) struct AsWritten<'a> {
    /// The answer.
    pub value: &'a Value,
    /// The message's calls' arguments, in the order [`messages::message`] numbers them.
    pub calls: &'a [&'a str],
}

impl Serialize for AsWritten<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap, SerializeSeq};
        let inner = |value| AsWritten {
            value,
            calls: self.calls,
        };
        match self.value {
            Value::Object(o) => {
                let written = (o.get(messages::INPUT_AS_WRITTEN))
                    .and_then(Value::as_u64)
                    .and_then(|place| self.calls.get(place as usize));
                let mut map = s.serialize_map(None)?;
                for (k, v) in o {
                    match (k.as_str(), written) {
                        (messages::INPUT_AS_WRITTEN, _) => {}
                        ("input", Some(text)) if text.len() <= COMPACTED_INPUT_BYTES => {
                            let compact = choicewise_partial_json::compact_json(text.trim());
                            let raw = RawValue::from_string(compact).map_err(S::Error::custom)?;
                            map.serialize_entry(k, &raw)?;
                        }
                        ("input", Some(text)) => {
                            let raw: &RawValue =
                                serde_json::from_str(text.trim()).map_err(S::Error::custom)?;
                            map.serialize_entry(k, raw)?;
                        }
                        _ => map.serialize_entry(k, &inner(v))?,
                    }
                }
                map.end()
            }
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&inner(v))?;
                }
                seq.end()
            }
            v => v.serialize(s),
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
