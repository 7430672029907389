//! OpenAI Responses in (stateless): a `POST /v1/responses` body read into a Chat Completions
//! request, and errors in OpenAI's shape. The answer's encoder is in `responses/encode.rs`.
//!
//! | Responses | Chat Completions |
//! |---|---|
//! | `model`, `stream`, `temperature`, `top_p`, `parallel_tool_calls`, `user`, `safety_identifier`, `prompt_cache_key`, `service_tier` | the same |
//! | `instructions` | a first `system` message |
//! | `input` as a string | one user message |
//! | `message` items (`role` user, assistant, system; `developer` as `system`, which every compatible server knows) with a string or `input_text` / `output_text` / `refusal` / `input_image` parts | messages; text parts alone in one part as a string; images as `image_url` parts (`detail` kept) |
//! | `function_call` items (`call_id`, `name`, `arguments`) | `tool_calls` of the assistant message they follow (or of a new one) |
//! | `function_call_output` items | `tool` messages (`tool_call_id`; text parts joined) |
//! | `reasoning` items | dropped: no Chat Completions upstream takes them back |
//! | `tools` of type `function` (flat: `name`, `description`, `parameters`, `strict`) | function tools |
//! | `tools` of type `namespace` (a group of the client's functions: `name`, `tools`) | a function tool per function, named `NAMESPACE__NAME` (`_2`, `_3`, ... added if another tool has that name); the model's calls of them are given back as `function_call` items with `name` and `namespace`, and such items of the input are sent back under the flat name |
//! | `tools` of type `custom` (free-form input, a grammar or text) | a function tool of one string argument, `input` (the format in its description); the model's calls given back as `custom_tool_call` items, and `custom_tool_call` / `custom_tool_call_output` items of the input sent as a call and its `tool` message |
//! | hosted tools (any other type: `web_search`, `file_search`, `code_interpreter`, `computer_use*`, `image_generation`, `mcp`, ...) | left out, or the request refused, as the model's `hosted_tools` says ([`Translated::hosted`]) |
//! | `tool_choice` `auto` / `none` / `required`, `{"type": "function", "name"}`, `allowed_tools` | the same choices in Chat Completions' shape |
//! | `max_output_tokens` | `max_tokens`, the name every compatible server reads |
//! | `reasoning.effort` | `reasoning_effort`; the whole `reasoning` object also in [`Translated::native`] |
//! | `text.format` (`json_schema`, `json_object`; `text` is the default), `text.verbosity` | `response_format`, `verbosity` |
//! | `choicewise` | kept as sent |
//!
//! Refused (400 naming the field), since the gateway keeps no state and runs no tools:
//! `store: true`, `previous_response_id`, `conversation`, `background: true`, `prompt`,
//! `item_reference` and server-side tool items, `input_file` parts and `file_id` images,
//! tool choices of any type but `function`. Ignored: `metadata`, `include`,
//! `truncation`, `top_logprobs`, `max_tool_calls`, `stream_options`, and any field not named
//! here.

mod encode;
mod events;
mod object;
mod texts;
mod tools;

pub(crate) use encode::{CONTEXT_LENGTH_EXCEEDED, ResponsesEncoder};
#[cfg(test)]
pub(crate) use object::message;
pub(crate) use object::object_text;
use tools::{flat_name, text_options, tool_choice, tools};

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use choicewise_core::chunks::Envelope;
use choicewise_core::{Choice, Dialect};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use std::collections::{HashMap, HashSet};

use super::{
    BodyCost, ClientApi, Head, IngressError, MessagesOut, Parts, Read, Refused, Reply, Translated,
    each_block, field, lean, lean_object, raw_field, read_fields, write_compact_as_string,
};
use crate::Limits;
use crate::answer::ending::OutputEnd;
use crate::answer::translated::{self, ApiFraming};
use crate::config::ModelPick;
use crate::error::ApiError;
use crate::request::message_check;
use crate::request::{ChatRequest, Fields, fields_of, kind_of};
use crate::upstream::engine::{AnswerUsage, Summary};

/// OpenAI's Responses (stateless): a request translated onto Chat Completions, one output
/// choice answered as Responses events or a `response` object, errors in OpenAI's shape; a
/// streamed request whose prompt overflowed the model's context is answered as OpenAI
/// does then ([`overflow_answer`]).
pub(crate) struct Responses;

impl ClientApi for Responses {
    const LABEL: &'static str = "responses";
    const ROUTE: &'static str = "/v1/responses";
    const COST: BodyCost = BodyCost {
        heavy: &["input", "instructions", "tools"],
        sixteenths: 28,
    };
    const ONE_OUTPUT: bool = true;
    type Reply = Reply;
    type Framing = ApiFraming;

    fn read(
        _: &Head,
        bytes: &Bytes,
        limits: &Limits,
        picks: &crate::config::ByName<ModelPick>,
    ) -> Result<Read<Reply>, Box<Refused>> {
        // Its `reasoning` goes as sent to a Responses upstream.
        super::read_translated(bytes, (limits, picks), to_chat, Dialect::Responses, false)
    }

    fn framing(
        reply: Reply,
        _: &Envelope,
        _: &ChatRequest,
        _: usize,
        _: Option<u64>,
    ) -> ApiFraming {
        ApiFraming::new(Box::new(ResponsesEncoder::new(&reply)))
    }

    fn object(
        reply: &Reply,
        _: &Envelope,
        _: bool,
        choices: &[(Option<Choice>, OutputEnd)],
        usage: &AnswerUsage,
        summary: Option<&Summary>,
    ) -> axum::body::Bytes {
        translated::object(choices, usage, summary, |out, end, usage, summary| {
            object_text(reply, out, end, usage, summary)
        })
    }

    fn error_body(error: &ApiError) -> Value {
        error_object(
            error.status,
            &error.message,
            Some(error.kind),
            error.param.as_deref(),
            error.code.as_deref(),
        )
    }

    fn kept_for_errors(reply: &Reply, stream: bool) -> Option<Reply> {
        stream.then(|| reply.clone())
    }

    fn refused(kept: Option<&Reply>, error: ApiError) -> Response {
        // A streamed request whose prompt overflowed the model's context: the stream OpenAI
        // answers then, which Codex CLI recognises.
        let overflow = kept.and_then(|reply| overflow_answer(reply, &error));
        overflow.unwrap_or_else(|| Self::shaped(error))
    }
}

/// The fields a translation reads (parsed); `input` and `tools` are read entry by entry
/// (`choicewise_partial_json::for_each_raw_entry`, [`raw_entries`](super::raw_entries)),
/// the echoed ones are repeated as sent, the others are ignored, and `choicewise` is passed
/// on as sent.
const READ: [&str; 19] = [
    "store",
    "previous_response_id",
    "conversation",
    "prompt",
    "background",
    "model",
    "instructions",
    "stream",
    "max_output_tokens",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "tool_choice",
    "text",
    "reasoning",
];

/// Whether an upstream's error says the prompt did not fit the model's context, in the words
/// of the usual providers: OpenAI's code `context_length_exceeded` and its "maximum context
/// length" (vLLM says it too), llama.cpp's "exceeds the available context size" (its
/// `exceed_context_size_error`), Anthropic's "prompt is too long".
pub(crate) fn is_context_overflow(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        CONTEXT_LENGTH_EXCEEDED,
        "maximum context length",
        "exceeds the available context size",
        "exceed_context_size",
        "prompt is too long",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
}

/// The `error` of a response whose choice ended without finishing, from its decided
/// ending: its words, and its code from its cause. Codex CLI tells a context overflow by
/// its code alone (its "context window exceeded", and its compaction): an upstream's own
/// error saying so is `context_length_exceeded`; every other failure, and every stop (a
/// cut, the client, the pick), is the server's.
pub(crate) fn failure(end: &OutputEnd) -> Value {
    let code = match end {
        OutputEnd::Failed(crate::answer::ending::Failure::Upstream(e))
            if is_context_overflow(&e.to_string()) =>
        {
            CONTEXT_LENGTH_EXCEEDED
        }
        _ => "server_error",
    };
    json!({"code": code, "message": end.why().unwrap_or_default()})
}

/// A streamed Responses request refused by its upstreams because its prompt overflowed the
/// model's context: the 200 stream that OpenAI's own Responses API answers then, ending in
/// `response.failed` with the code `context_length_exceeded` (what Codex CLI reads as a
/// context window exceeded; a 400 it reads as an invalid request). `None` for any other
/// error, answered with its status as before.
pub(crate) fn overflow_answer(reply: &Reply, e: &ApiError) -> Option<axum::response::Response> {
    let overflow = e.status.is_client_error()
        && (e.code.as_deref() == Some(CONTEXT_LENGTH_EXCEEDED) || is_context_overflow(&e.message));
    if !overflow {
        return None;
    }
    let bytes = encode::failed_before_output(reply, CONTEXT_LENGTH_EXCEEDED, &e.message);
    let body = futures::stream::once(async move { Ok(Bytes::from(bytes)) });
    Some(crate::answer::write::sse_response(body))
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`, the type the
/// status stands for unless `kind` is given.
pub(crate) fn error_object(
    status: StatusCode,
    message: &str,
    kind: Option<&str>,
    param: Option<&str>,
    code: Option<&str>,
) -> Value {
    let kind = kind.unwrap_or(match status.as_u16() {
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    });
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// The request's fields a response object repeats.
const ECHOED: [&str; 11] = [
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "reasoning",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "user",
];

/// Reads a Responses request body into a Chat Completions one (see the module's table).
pub(crate) fn to_chat(body: &Fields) -> Result<Translated, IngressError> {
    let obj = &read_fields(body, &READ)?;
    refuse_state(obj)?;
    let model = match field(obj, "model") {
        None => return Err(IngressError::missing("model")),
        Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(v) => {
            return Err(IngressError::invalid(
                "model",
                format!("must be a non-empty string, not {}", kind_of(v)),
            ));
        }
    };
    let mut chat = Map::new();
    chat.insert("model".into(), Value::String(model.clone()));
    // The tools first: the input's calls of a namespace's functions take their flat names.
    let mut hosted = Vec::new();
    let mut custom = HashSet::new();
    let (tools, namespaced) = tools(body, &mut hosted, &mut custom)?;
    let flat: HashMap<(&str, &str), &str> = (namespaced.iter())
        .map(|(flat, (ns, name))| ((ns.as_str(), name.as_str()), flat.as_str()))
        .collect();
    let input = raw_field(body, "input");
    let mut messages = MessagesOut::with_capacity(input.map_or(0, |l| l.len() + l.len() / 8));
    match field(obj, "instructions") {
        None => {}
        Some(Value::String(s)) => (messages.made).push(json!({"role": "system", "content": s})),
        Some(v) => {
            return Err(IngressError::invalid(
                "instructions",
                format!("must be a string, not {}", kind_of(v)),
            ));
        }
    }
    match input {
        None => return Err(IngressError::missing("input")),
        // One item read, translated and written at a time: the list is never a tree.
        Some(text) if text.first() == Some(&b'[') => {
            // Each item's fields and parts read one at a time too: no item is a tree.
            let read = choicewise_partial_json::for_each_raw_entry(text, |i, item| {
                item_of(i, item, &flat, &mut messages)
            });
            match read {
                Ok(read) => read?,
                Err(e) => {
                    return Err(IngressError::invalid(
                        "input",
                        format!("could not be read: {e}"),
                    ));
                }
            }
        }
        Some(text) if text.first() == Some(&b'"') => {
            let s: String = serde_json::from_slice(text)
                .map_err(|e| IngressError::invalid("input", format!("could not be read: {e}")))?;
            (messages.made).push(json!({"role": "user", "content": s}));
        }
        Some(text) => {
            return Err(IngressError::invalid(
                "input",
                format!(
                    "must be a string or an array of items, not {}",
                    kind_of(text)
                ),
            ));
        }
    }
    let messages = messages.finish();
    if let Some(stream) = field(obj, "stream") {
        let Value::Bool(_) = stream else {
            return Err(IngressError::invalid(
                "stream",
                format!("must be a boolean, not {}", kind_of(stream)),
            ));
        };
        chat.insert("stream".into(), stream.clone());
    }
    if let Some(v) = field(obj, "max_output_tokens") {
        match v.as_u64() {
            Some(n) if n >= 1 => chat.insert("max_tokens".into(), json!(n)),
            _ => {
                return Err(IngressError::invalid(
                    "max_output_tokens",
                    format!("must be an integer of 1 or more, not {v}"),
                ));
            }
        };
    }
    for key in ["temperature", "top_p"] {
        if let Some(v) = field(obj, key) {
            if !v.is_number() {
                return Err(IngressError::invalid(
                    key,
                    format!("must be a number, not {}", kind_of(v)),
                ));
            }
            chat.insert(key.into(), v.clone());
        }
    }
    for key in [
        "parallel_tool_calls",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "service_tier",
    ] {
        if let Some(v) = field(obj, key) {
            chat.insert(key.into(), v.clone());
        }
    }
    if let Some(choice) = field(obj, "tool_choice") {
        let choice = tool_choice(choice, &flat)?;
        // Chat Completions refuses a tool choice without tools.
        if tools.is_some() {
            chat.insert("tool_choice".into(), choice);
        }
    }
    text_options(obj, &mut chat)?;
    let mut native = Map::new();
    let reasoning = match field(obj, "reasoning") {
        None => false,
        Some(r @ Value::Object(o)) => {
            native.insert("reasoning".into(), r.clone());
            if let Some(effort) = field(o, "effort") {
                chat.insert("reasoning_effort".into(), effort.clone());
            }
            true
        }
        Some(v) => {
            return Err(IngressError::invalid(
                "reasoning",
                format!("must be an object, not {}", kind_of(v)),
            ));
        }
    };
    let echo = (ECHOED.iter())
        .filter_map(|k| body.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    let stream = chat.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let mut chat = fields_of(chat);
    chat.insert("messages".into(), messages);
    if let Some(tools) = tools {
        chat.insert("tools".into(), tools);
    }
    if let Some(ext) = body.get("choicewise") {
        chat.insert("choicewise".into(), ext.clone());
    }
    Ok(Translated {
        stream,
        chat,
        native,
        hosted,
        reply: Reply {
            model,
            reasoning,
            stop: Vec::new(),
            echo: std::sync::Arc::new(echo),
            namespaced,
            custom,
            ..Reply::default()
        },
    })
}

/// What needs a stateful server: `store: true`, `previous_response_id`, `conversation`,
/// `background: true`, `prompt`.
fn refuse_state(obj: &Map<String, Value>) -> Result<(), IngressError> {
    let stateless = "the gateway keeps no state: send the whole conversation in \"input\"";
    if obj.get("store") == Some(&Value::Bool(true)) {
        return Err(IngressError::unsupported(
            "store",
            format!("true is not served ({stateless}, with store false)"),
        ));
    }
    for key in ["previous_response_id", "conversation", "prompt"] {
        if field(obj, key).is_some() {
            return Err(IngressError::unsupported(
                key,
                format!("not served ({stateless})"),
            ));
        }
    }
    if obj.get("background") == Some(&Value::Bool(true)) {
        return Err(IngressError::unsupported(
            "background",
            "true is not served (the gateway keeps no responses to poll)",
        ));
    }
    Ok(())
}

/// An input item read from its text one field at a time: the fields its translation reads,
/// each small one parsed ([`lean`]), its `content`, `output` and `arguments` kept as their
/// text; its other fields skipped unparsed. An item that is no object has no fields.
#[derive(Default)]
struct Item<'t> {
    fields: Map<String, Value>,
    content: Option<&'t RawValue>,
    output: Option<&'t RawValue>,
    arguments: Option<&'t RawValue>,
}

impl<'t> Item<'t> {
    fn read(raw: &'t RawValue, at: &str) -> Result<Item<'t>, IngressError> {
        let mut item = Item::default();
        if !raw.get().starts_with('{') {
            return Ok(item);
        }
        let read = choicewise_partial_json::for_each_raw_field(raw.get().as_bytes(), |k, v| {
            let v = Some(v).filter(|v| v.get() != "null");
            match k {
                "type" | "role" | "call_id" | "name" | "namespace" | "input" => {
                    let value = v.map(lean).transpose()?.unwrap_or(Value::Null);
                    item.fields.insert(k.to_string(), value);
                }
                "content" => item.content = v,
                "output" => item.output = v,
                "arguments" => item.arguments = v,
                _ => {}
            }
            Ok::<(), serde_json::Error>(())
        });
        match read {
            Ok(Ok(())) => Ok(item),
            Ok(Err(e)) | Err(e) => {
                Err(IngressError::invalid(at, format!("could not be read: {e}")))
            }
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }
}

/// A string field's text parsed (at `at`).
fn string_of(raw: &RawValue, at: &str) -> Result<String, IngressError> {
    serde_json::from_str(raw.get())
        .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}")))
}

/// One input item as Chat Completions messages, written into `out`; `flat` names the
/// functions of the request's namespaces as they are sent upstream.
fn item_of(
    i: usize,
    raw: &RawValue,
    flat: &HashMap<(&str, &str), &str>,
    out: &mut MessagesOut,
) -> Result<(), IngressError> {
    let at = format!("input[{i}]");
    message_check::object(&at, raw.get())?;
    let item = Item::read(raw, &at)?;
    let kind = match item.str("type") {
        Some(kind) => kind,
        // A message may leave out its type (EasyInputMessage).
        None if item.fields.contains_key("role") => "message",
        None => return Err(IngressError::missing(format!("{at}.type"))),
    };
    match kind {
        "message" => message_item(&at, &item, out),
        "function_call" => {
            let (Some(call_id), Some(name)) = (item.str("call_id"), item.str("name")) else {
                return Err(IngressError::invalid(
                    at,
                    "a function_call item needs its \"call_id\" and \"name\"",
                ));
            };
            // A call of a namespace's function: the name its upstream knows it by.
            let name = match item.str("namespace") {
                Some(ns) => match flat.get(&(ns, name)) {
                    Some(flat) => (*flat).to_string(),
                    None => flat_name(ns, name),
                },
                None => name.to_string(),
            };
            // The arguments' string copied as the client wrote it (JSON already); any other
            // JSON as the string of its compact text. Calls join the assistant message just
            // before them, as Chat Completions has it.
            let size = item
                .arguments
                .map_or(0, |a| a.get().len() + a.get().len() / 8);
            let mut call = Vec::with_capacity(size + name.len() + call_id.len() + 64);
            call.extend_from_slice(br#"{"function":{"arguments":"#);
            match item.arguments {
                None => call.extend_from_slice(br#""{}""#),
                Some(a) if a.get().starts_with('"') => call.extend_from_slice(a.get().as_bytes()),
                Some(a) => write_compact_as_string(&mut call, a.get()),
            }
            // Strings always serialise.
            call.extend_from_slice(br#","name":"#);
            let _ = serde_json::to_writer(&mut call, &name);
            call.extend_from_slice(br#"},"id":"#);
            let _ = serde_json::to_writer(&mut call, call_id);
            call.extend_from_slice(br#","type":"function"}"#);
            out.call_owned(call);
            Ok(())
        }
        "custom_tool_call" => {
            let (Some(call_id), Some(name)) = (item.str("call_id"), item.str("name")) else {
                return Err(IngressError::invalid(
                    at,
                    "a custom_tool_call item needs its \"call_id\" and \"name\"",
                ));
            };
            let input = item.str("input").unwrap_or_default();
            out.call(&json!({"id": call_id, "type": "function",
                             "function": {"name": name, "arguments": json!({"input": input}).to_string()}}));
            Ok(())
        }
        "function_call_output" | "custom_tool_call_output" => {
            let Some(call_id) = item.str("call_id") else {
                return Err(IngressError::missing(format!("{at}.call_id")));
            };
            let content = match item.output.map(|o| (o, o.get().as_bytes()[0])) {
                Some((o, b'"')) => string_of(o, &format!("{at}.output"))?,
                Some((o, b'[')) => {
                    let mut joined = String::new();
                    each_block(o, &format!("{at}.output"), |k, p| {
                        let part_at = format!("{at}.output[{k}]");
                        let p = lean_object(p, &["type", "text"]).map_err(|e| {
                            IngressError::invalid(&part_at, format!("could not be read: {e}"))
                        })?;
                        match (p["type"].as_str(), p["text"].as_str()) {
                            (Some("input_text" | "output_text"), Some(t)) => {
                                if k > 0 {
                                    joined.push('\n');
                                }
                                joined.push_str(t);
                                Ok(())
                            }
                            _ => Err(IngressError::unsupported(
                                part_at,
                                "only text parts are served in a function_call_output",
                            )),
                        }
                    })?;
                    joined
                }
                None => return Err(IngressError::missing(format!("{at}.output"))),
                Some((o, _)) => choicewise_partial_json::compact_json(o.get()),
            };
            out.write(&json!({"role": "tool", "tool_call_id": call_id, "content": content}));
            Ok(())
        }
        "reasoning" => Ok(()),
        "item_reference" => Err(IngressError::unsupported(
            format!("{at}.type"),
            "item_reference is not served (the gateway keeps no items: send the item itself)",
        )),
        other => Err(IngressError::unsupported(
            format!("{at}.type"),
            format!(
                "{other:?} items are not served by this gateway (it runs no server-side tools)"
            ),
        )),
    }
}

/// A `message` item, its parts read one at a time and written as text: an assistant's held
/// for the calls that may follow.
fn message_item(at: &str, item: &Item<'_>, out: &mut MessagesOut) -> Result<(), IngressError> {
    let role = item.fields.get("role").unwrap_or(&Value::Null);
    let role = match message_check::role(at, role, message_check::RESPONSES_ROLES)? {
        "developer" => "system",
        role => role,
    };
    // The content's text: a string as the client wrote it (JSON already, never unescaped),
    // or its parts, read one at a time.
    let content = match item.content.map(|c| (c, c.get().as_bytes()[0])) {
        Some((c, b'"')) => Ok(c.get().as_bytes()),
        Some((c, b'[')) => {
            let mut parts = Parts::with_capacity(c.get().len());
            each_block(c, &format!("{at}.content"), |k, p| {
                let part_at = format!("{at}.content[{k}]");
                let p = lean_object(
                    p,
                    &["type", "text", "refusal", "image_url", "file_id", "detail"],
                )
                .map_err(|e| IngressError::invalid(&part_at, format!("could not be read: {e}")))?;
                parts.push(part_of(&part_at, &p)?);
                Ok(())
            })?;
            Err(parts)
        }
        None => return Err(IngressError::missing(format!("{at}.content"))),
        Some((c, _)) => {
            return Err(IngressError::invalid(
                format!("{at}.content"),
                format!(
                    "must be a string or an array of parts, not {}",
                    kind_of(c.get().as_bytes())
                ),
            ));
        }
    };
    if role == "assistant" {
        match content {
            Ok(text) => out.hold_assistant(text),
            Err(parts) => out.hold_assistant(&parts.content()),
        }
        return Ok(());
    }
    out.write_with(|buf| {
        buf.extend_from_slice(br#"{"content":"#);
        match content {
            Ok(text) => buf.extend_from_slice(text),
            Err(parts) => parts.write_content(buf),
        }
        buf.extend_from_slice(format!(r#","role":"{role}"}}"#).as_bytes());
        Ok::<(), IngressError>(())
    })
}

/// A content part as a Chat Completions part.
fn part_of(at: &str, p: &Value) -> Result<Value, IngressError> {
    match p["type"].as_str() {
        Some("input_text" | "output_text") => match p["text"].as_str() {
            Some(t) => Ok(json!({"type": "text", "text": t})),
            None => Err(IngressError::missing(format!("{at}.text"))),
        },
        Some("refusal") => match p["refusal"].as_str() {
            Some(t) => Ok(json!({"type": "text", "text": t})),
            None => Err(IngressError::missing(format!("{at}.refusal"))),
        },
        Some("input_image") => {
            let Some(url) = p["image_url"].as_str() else {
                return Err(match p.get("file_id").filter(|f| !f.is_null()) {
                    Some(_) => IngressError::unsupported(
                        format!("{at}.file_id"),
                        "images by file_id are not served (the gateway keeps no files): send image_url",
                    ),
                    None => IngressError::missing(format!("{at}.image_url")),
                });
            };
            let mut image = json!({"url": url});
            if let Some(detail) = p.get("detail").filter(|d| !d.is_null()) {
                image["detail"] = detail.clone();
            }
            Ok(json!({"type": "image_url", "image_url": image}))
        }
        Some(other) => Err(IngressError::unsupported(
            format!("{at}.type"),
            format!("{other:?} parts are not served by this gateway"),
        )),
        None => Err(IngressError::missing(format!("{at}.type"))),
    }
}

#[cfg(test)]
mod tests;
