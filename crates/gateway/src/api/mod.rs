//! The client APIs the gateway serves, one [`ClientApi`] each: Chat Completions
//! ([`chat::Chat`], `POST /v1/chat/completions`), Anthropic Messages ([`messages::Messages`],
//! `POST /v1/messages`) and OpenAI Responses ([`responses::Responses`], `POST /v1/responses`,
//! stateless). Each reads its requests into the Chat Completions request the gateway runs,
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
pub(crate) mod messages;
pub(crate) mod responses;

mod translate;

#[cfg(test)]
mod round_trip;

pub(crate) use translate::{
    MessagesOut, Parts, each_block, lean, lean_object, raw_entries, raw_field, raw_object,
    read_fields, small, write_compact_as_string, write_function_tool,
};

use std::collections::HashMap;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use bytes::Bytes;
#[cfg(test)]
use choicewise_core::Usage;
use choicewise_core::chunks::Envelope;
use choicewise_core::{Choice, ChoiceEvent, Dialect};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::Limits;
use crate::answer::ending::OutputEnd;
use crate::answer::write::Framing;
use crate::config::ModelPick;
use crate::error::ApiError;
use crate::request::{ChatRequest, Fields, NotAnObject, split_object};
use crate::upstream::engine::{AnswerUsage, Summary};

/// A client API the gateway serves, as hyper's `Http1Transaction` is one side of HTTP/1:
/// how its requests are read, its answers framed and written, its errors shaped. Its route
/// is the one handler instantiated for it (`answer::<A>`).
pub(crate) trait ClientApi: Send + Sync + 'static {
    /// The `api` label of its requests in the metrics and the `request` log line: its
    /// endpoint's name (`chat`, `messages`, `responses`).
    const LABEL: &'static str;
    /// Whether its answer has one output choice (no `n`): the pick's first.
    const ONE_OUTPUT: bool;
    /// How its errors name a field's path (the rule of [`crate::wellformed`] says where a
    /// fault is in these terms).
    const PATHS: crate::wellformed::Paths = crate::wellformed::Paths::Indexed;
    /// What its answer needs of its request besides the request the gateway runs.
    type Reply: Clone + Send + Sync + 'static;
    /// Its streamed answer's framing.
    type Framing: Framing + Send + 'static;

    /// Reads a request body into the Chat Completions request the gateway runs and what
    /// its answer needs (`limits`, `picks`: the gateway's, which check it); a refusal names
    /// the model the body asked for when it could be read.
    fn read(
        bytes: &Bytes,
        limits: &Limits,
        picks: &HashMap<String, ModelPick>,
    ) -> Result<Read<Self::Reply>, Box<Refused>>;

    /// The streamed answer's framing, of `outputs` output choices of `req`, answered as
    /// `envelope` (its id, creation time, model); `prompt_tokens`: the prompt's tokens, when
    /// counted for the answer's first event ([`Read::prompt`]).
    fn framing(
        reply: Self::Reply,
        envelope: &Envelope,
        req: &ChatRequest,
        outputs: usize,
        prompt_tokens: Option<u64>,
    ) -> Self::Framing;

    /// The non-streamed answer as one object, of its output `choices` as they ended (the
    /// verdict says they are an answer; `logprobs`: the client asked for them).
    fn object(
        reply: &Self::Reply,
        envelope: &Envelope,
        logprobs: bool,
        choices: &[(Option<Choice>, OutputEnd)],
        usage: &AnswerUsage,
        summary: Option<&Summary>,
    ) -> axum::body::Bytes;

    /// One of the gateway's errors as its JSON body in this API's shape: the same status
    /// and message.
    fn error_body(error: &ApiError) -> Value;

    /// An error answered in this API's shape, with its `Retry-After` when it has one.
    fn shaped(error: ApiError) -> Response {
        let mut response = (error.status, axum::Json(Self::error_body(&error))).into_response();
        if let Some(wait) = error.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, wait.into());
        }
        response
    }

    /// What of a request read its errors need, when they are answered otherwise than
    /// [`shaped`](Self::shaped) (`stream`: the client asked for a streamed answer).
    fn kept_for_errors(_reply: &Self::Reply, _stream: bool) -> Option<Self::Reply> {
        None
    }

    /// An error of a request (`kept`: what [`kept_for_errors`](Self::kept_for_errors) kept
    /// of it, once it was read), answered.
    fn refused(_kept: Option<&Self::Reply>, error: ApiError) -> Response {
        Self::shaped(error)
    }
}

/// A request read by its [`ClientApi`]: the Chat Completions request the gateway runs, and
/// what its answer and its upstream requests need besides.
pub(crate) struct Read<R> {
    pub req: ChatRequest,
    pub reply: R,
    /// The client's own fields that an upstream of the API named takes as they are
    /// ([`Translated::native`]).
    pub native: Option<Arc<(Dialect, Map<String, Value>)>>,
    /// Its hosted tools, left out of the request.
    pub hosted: Vec<Hosted>,
    /// The Chat Completions body whose prompt tokens are counted for the answer's first
    /// event (a streamed Messages answer's `message_start`).
    pub prompt: Option<Fields>,
}

/// A request refused while it was read, with the model its body names when that could be
/// read: a refused Messages or Responses request is counted in the metrics under its
/// model.
pub(crate) struct Refused {
    pub error: ApiError,
    pub asked: Option<String>,
}

impl Refused {
    pub fn new(error: impl Into<ApiError>, asked: Option<String>) -> Box<Refused> {
        Box::new(Refused {
            error: error.into(),
            asked,
        })
    }
}

/// Reads a translated API's body (Messages, Responses) with its `translate`: its fields,
/// translated, then checked as a Chat Completions request; its `native` fields go to an
/// upstream of API `native_to`; `prompt`: its prompt's tokens are counted for a streamed
/// answer's first event.
pub(crate) fn read_translated(
    bytes: &Bytes,
    (limits, picks): (&Limits, &HashMap<String, ModelPick>),
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

/// A client API as the layers know it from a request's path, before any handler: its
/// label and its errors' shape.
#[derive(Clone, Copy)]
pub(crate) struct PathApi {
    /// [`ClientApi::LABEL`].
    pub label: &'static str,
    /// [`ClientApi::shaped`].
    pub shaped: fn(ApiError) -> Response,
}

impl PathApi {
    fn of<A: ClientApi>() -> PathApi {
        PathApi {
            label: A::LABEL,
            shaped: A::shaped,
        }
    }
}

/// The client API a path belongs to: its errors are answered in that API's shape (a path
/// of none is answered as Chat Completions).
pub(crate) fn of_path(path: &str) -> PathApi {
    let path = path
        .strip_prefix("/v1")
        .filter(|p| p.starts_with("/v1/"))
        .unwrap_or(path);
    if path.starts_with("/v1/messages") {
        PathApi::of::<messages::Messages>()
    } else if path.starts_with("/v1/responses") {
        PathApi::of::<responses::Responses>()
    } else {
        PathApi::of::<chat::Chat>()
    }
}

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

    /// The choice ended without finishing, as `end` (its decided ending, typed: an
    /// upstream's failure with its error, or who stopped it) says: Anthropic's `error`
    /// event, Responses' `response.failed`, each with the ending's words and what its cause
    /// means in the API's terms; `choicewise` rides on it when given. The last frame.
    fn failed(&mut self, end: &OutputEnd, choicewise: Option<&Value>, out: &mut Vec<u8>);

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
    /// when it finished, [`failed`](Self::failed) with the ending when not.
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
            other => self.failed(other, choicewise, out),
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
