//! Anthropic Messages in: a `POST /v1/messages` body read into a Chat Completions request,
//! and errors in Anthropic's shape. The answer's encoder is in `messages/encode.rs`.
//!
//! | Messages | Chat Completions |
//! |---|---|
//! | `model`, `stream`, `temperature`, `top_p`, `top_k` (vLLM, llama.cpp and Anthropic take it) | the same |
//! | `max_tokens` (required: missing is a 400 naming it, as at Anthropic) | `max_tokens`, the name every compatible server reads |
//! | `system` (a string or text blocks, joined by a blank line) | a first `system` message |
//! | a `system` turn inside `messages` (Claude Code's environment block; a string or text blocks) | a `system` message at its place |
//! | a system turn's `tool_addition` blocks (Claude Code's mid-conversation tool changes) | a `tool_definition`'s tool added to the function tools (unless one has its name); a `tool_reference`, and `tool_removal` blocks, change nothing |
//! | `tool_reference` blocks of a `tool_result` (a tool search's matches) | `Tool NAME is available.` in the tool message |
//! | `messages[].content` text blocks | text, a string when it is one block |
//! | `image` blocks (`base64` or `url` source) | `image_url` parts (a `data:` URL for base64) |
//! | assistant `tool_use` blocks | the message's `tool_calls` (`input` as JSON text) |
//! | user `tool_result` blocks | `tool` messages before the user's other blocks (text joined by newlines; its images go to the user message after it) |
//! | assistant `thinking` / `redacted_thinking` blocks | dropped: no Chat Completions upstream takes them back |
//! | `tools` (`input_schema`; `defer_loading`, `cache_control` left out) | function tools (`parameters`) |
//! | server tools and Anthropic-defined tools without a schema (any other `type`: `web_search_20250305`, `bash_20250124`, ...) | left out, or the request refused, as the model's `hosted_tools` says ([`Translated::hosted`]) |
//! | `tool_choice` `auto` / `any` / `tool` / `none`, `disable_parallel_tool_use` | `auto` / `required` / the named function / `none`, `parallel_tool_calls: false` |
//! | `stop_sequences` | `stop` |
//! | `thinking` `adaptive` | nothing (the upstream's default effort), and kept in [`Translated::native`] for an Anthropic upstream |
//! | `thinking` `enabled` with `budget_tokens` | `reasoning_effort` (`Dialect::thinking_effort`: below 2048 `low`, below 4096 `medium`, else `high`, the inverse of `Dialect::thinking_budget`), and kept in [`Translated::native`] for an Anthropic upstream: Chat Completions has no budget, and OpenAI-compatible servers refuse a `thinking` field |
//! | `choicewise` | kept as sent |
//!
//! Ignored: `metadata`, `service_tier`, `cache_control` on blocks, a `tool_result`'s
//! `is_error`, `context_management`, `output_config`, and any field not named here (as are
//! the `anthropic-beta` header and `?beta=true`). Refused (400 naming the field, in
//! Anthropic's shape): a role other than `user`, `assistant` and `system` (in Anthropic's
//! words, `Input should be 'user' or 'assistant'`), `mcp_servers`, `container`, `document`
//! and other block types, file sources.

mod encode;
mod tools;

pub(crate) use encode::{INPUT_AS_WRITTEN, MessagesEncoder, message};
use tools::{stop_sequences, thinking_effort, tool_choice, tools};

use axum::http::StatusCode;
use bytes::Bytes;
use choicewise_core::chunks::Envelope;
use choicewise_core::{Choice, ChoiceOutput, Dialect};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{
    AsWritten, BodyCost, ClientApi, Head, IngressError, MessagesOut, Parts, Read, Refused, Reply,
    Translated, each_block, field, lean, lean_object, raw_field, read_fields,
    write_compact_as_string,
};
use crate::Limits;
use crate::answer::ending::OutputEnd;
use crate::answer::translated::{self, ApiFraming};
use crate::config::ModelPick;
use crate::error::ApiError;
use crate::request::message_check;
use crate::request::{ChatRequest, Fields, fields_of, kind_of, too_large_to_parse};
use crate::upstream::engine::{AnswerUsage, Summary};

/// Anthropic's Messages: a request translated onto Chat Completions, one output choice
/// answered as Anthropic's events or `message` object, errors in Anthropic's shape.
pub(crate) struct Messages;

impl ClientApi for Messages {
    const LABEL: &'static str = "messages";
    const ROUTE: &'static str = "/v1/messages";
    // Anthropic's token count is the Messages API's too (`count.rs` serves it).
    const SHOWN: &'static [&'static str] = &["/v1/messages", "/v1/messages/count_tokens"];
    const COST: BodyCost = BodyCost {
        heavy: &["messages", "system", "tools"],
        sixteenths: 28,
    };
    const ONE_OUTPUT: bool = true;
    const PATHS: crate::wellformed::Paths = crate::wellformed::Paths::Dotted;
    type Reply = Reply;
    type Framing = ApiFraming;

    fn read(
        _: &Head,
        bytes: &Bytes,
        limits: &Limits,
        picks: &crate::config::ByName<ModelPick>,
    ) -> Result<Read<Reply>, Box<Refused>> {
        // Its `thinking` goes as sent to an Anthropic upstream; a streamed answer names the
        // prompt's tokens in its first event.
        super::read_translated(bytes, (limits, picks), to_chat, Dialect::Anthropic, true)
    }

    fn framing(
        mut reply: Reply,
        _: &Envelope,
        _: &ChatRequest,
        _: usize,
        prompt_tokens: Option<u64>,
    ) -> ApiFraming {
        reply.input_tokens = prompt_tokens;
        ApiFraming::new(Box::new(MessagesEncoder::new(&reply)))
    }

    fn object(
        reply: &Reply,
        _: &Envelope,
        _: bool,
        choices: &[(Option<Choice>, OutputEnd)],
        usage: &AnswerUsage,
        summary: Option<&Summary>,
    ) -> axum::body::Bytes {
        // A message that did not finish is the verdict's error, never an object.
        translated::object(choices, usage, summary, |out, _, usage, summary| {
            object_text(reply, out, usage, summary)
        })
    }

    fn error_body(error: &ApiError) -> Value {
        error_body(error.status, &error.message)
    }
}

/// The non-streamed answer's text: the `message` object, each `tool_use` block's input as
/// the upstream wrote it ([`AsWritten`]).
pub(crate) fn object_text(
    reply: &Reply,
    output: &ChoiceOutput,
    usage: &super::Tokens,
    choicewise: Option<&Summary>,
) -> Vec<u8> {
    let body = message(reply, output, usage, choicewise);
    let m = &output.message;
    let calls: Vec<&str> = (m.tool_calls.iter().map(|c| &c.function))
        .chain(&m.function_call)
        .map(|f| f.arguments.as_str())
        .collect();
    super::to_vec_exact(&AsWritten {
        value: &body,
        calls: &calls,
    })
}

/// Anthropic's error body for a status: `{"type": "error", "error": {"type", "message"}}`.
pub(crate) fn error_body(status: StatusCode, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

/// The Anthropic error type a status stands for.
pub(crate) fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Reads a Messages request body into a Chat Completions one (see the module's table).
pub(crate) fn to_chat(body: &Fields) -> Result<Translated, IngressError> {
    translate(body, true)
}

/// As [`to_chat`], for `POST /v1/messages/count_tokens`, whose body has no `max_tokens`:
/// the translated `messages` and `tools` are what a count reads.
pub(crate) fn to_chat_for_count(body: &Fields) -> Result<Translated, IngressError> {
    translate(body, false)
}

/// The fields a translation reads (parsed); `messages` and `tools` are read entry by entry
/// ([`for_each_raw_entry`], [`raw_entries`](super::raw_entries)), the others are
/// ignored, and `choicewise` passed on as sent.
const READ: [&str; 11] = [
    "mcp_servers",
    "container",
    "model",
    "max_tokens",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "tool_choice",
    "thinking",
];

fn translate(body: &Fields, needs_max_tokens: bool) -> Result<Translated, IngressError> {
    let obj = &read_fields(body, &READ)?;
    for refused in ["mcp_servers", "container"] {
        if field(obj, refused).is_some() {
            return Err(IngressError::unsupported(
                refused,
                "not served by this gateway (it runs no server-side tools)",
            ));
        }
    }
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
    match field(obj, "max_tokens") {
        None if needs_max_tokens => return Err(IngressError::missing("max_tokens")),
        None => {}
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => {
                chat.insert("max_tokens".into(), json!(n));
            }
            _ => {
                return Err(IngressError::invalid(
                    "max_tokens",
                    format!("must be an integer of 1 or more, not {v}"),
                ));
            }
        },
    }
    let list = raw_field(body, "messages");
    let mut messages = MessagesOut::with_capacity(list.map_or(0, |l| l.len() + l.len() / 8));
    // Tools a system turn adds mid-conversation (Claude Code's `tool_addition` blocks).
    let mut added = Vec::new();
    if let Some(content) = system_of(body)? {
        (messages.made).push(json!({"role": "system", "content": content}));
    }
    match list {
        None => return Err(IngressError::missing("messages")),
        // One message read, translated and written at a time: the list is never a tree.
        Some(text) if text.first() == Some(&b'[') => {
            let read = choicewise_partial_json::for_each_raw_entry(text, |i, raw| {
                message_of(i, raw, &mut messages, &mut added)
            });
            match read {
                Ok(read) => read?,
                Err(e) => {
                    return Err(IngressError::invalid(
                        "messages",
                        format!("could not be read: {e}"),
                    ));
                }
            }
        }
        Some(text) => {
            return Err(IngressError::invalid(
                "messages",
                format!("must be an array, not {}", kind_of(text)),
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
    for key in ["temperature", "top_p", "top_k"] {
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
    let stop = stop_sequences(obj)?;
    if !stop.is_empty() {
        chat.insert("stop".into(), json!(stop));
    }
    let mut hosted = Vec::new();
    let tools = tools(body, &added, &mut hosted)?;
    tool_choice(obj, tools.is_some(), &mut chat)?;
    let mut native = Map::new();
    let reasoning = match field(obj, "thinking") {
        None => false,
        Some(thinking) => {
            let effort = thinking_effort(thinking)?;
            native.insert("thinking".into(), thinking.clone());
            if let Some(effort) = effort {
                chat.insert("reasoning_effort".into(), json!(effort));
            }
            thinking["type"] != "disabled"
        }
    };
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
            stop,
            ..Reply::default()
        },
    })
}

/// `system`, read from its text: a string, or text blocks joined by a blank line, read one
/// at a time (never a tree of the list: a system prompt may be large).
fn system_of(body: &Fields) -> Result<Option<String>, IngressError> {
    #[derive(serde::Deserialize)]
    struct Block<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow)]
        text: Option<std::borrow::Cow<'a, str>>,
    }
    let Some(text) = raw_field(body, "system") else {
        return Ok(None);
    };
    match text.first() {
        Some(b'"') => serde_json::from_slice(text)
            .map(Some)
            .map_err(|e| IngressError::invalid("system", format!("could not be read: {e}"))),
        Some(b'[') => {
            let mut joined = String::with_capacity(text.len());
            let read = choicewise_partial_json::for_each_raw_entry(text, |i, raw| {
                let not_text = || {
                    IngressError::invalid(
                        format!("system.{i}"),
                        "must be a text block ({\"type\": \"text\", \"text\": ...})",
                    )
                };
                let block: Block<'_> = serde_json::from_str(raw.get()).map_err(|_| not_text())?;
                match (block.kind.as_deref(), block.text) {
                    (Some("text"), Some(t)) => {
                        if i > 0 {
                            joined.push_str("\n\n");
                        }
                        joined.push_str(&t);
                        Ok(())
                    }
                    _ => Err(not_text()),
                }
            });
            match read {
                Ok(read) => read.map(|()| Some(joined)),
                Err(e) => Err(IngressError::invalid(
                    "system",
                    format!("could not be read: {e}"),
                )),
            }
        }
        _ => Err(IngressError::invalid(
            "system",
            format!(
                "must be a string or an array of text blocks, not {}",
                kind_of(text)
            ),
        )),
    }
}

/// A block of a message's content (or of a tool result's, or of a system turn's), read from
/// its text one field at a time: the fields a translation reads, each small one parsed
/// ([`lean`]: strings whole, a larger object or array than 64 KiB as an empty one of its
/// kind), `source` as an object of its strings, and `input` and `content` kept as their
/// text. Its other fields are skipped unparsed. A block that is no object reads as one with
/// no fields.
#[derive(Default)]
struct Block<'t> {
    fields: Map<String, Value>,
    input: Option<&'t RawValue>,
    content: Option<&'t RawValue>,
}

impl<'t> Block<'t> {
    fn read(raw: &'t RawValue, at: &str) -> Result<Block<'t>, IngressError> {
        let mut b = Block::default();
        if !raw.get().starts_with('{') {
            return Ok(b);
        }
        let read = choicewise_partial_json::for_each_raw_field(raw.get().as_bytes(), |k, v| {
            match k {
                "type" | "text" | "id" | "name" | "tool_use_id" | "tool_name" => {
                    b.fields.insert(k.to_string(), lean(v)?);
                }
                "source" => {
                    let source = lean_object(v, &["type", "media_type", "data", "url"])?;
                    b.fields.insert(k.to_string(), source);
                }
                "tool" => {
                    if let Some(e) = too_large_to_parse(&format!("{at}.tool"), v.get().as_bytes()) {
                        return Err(serde::de::Error::custom(e));
                    }
                    b.fields
                        .insert(k.to_string(), serde_json::from_str(v.get())?);
                }
                "input" => b.input = Some(v),
                "content" => b.content = Some(v),
                _ => {}
            }
            Ok(())
        });
        match read {
            Ok(Ok(())) => Ok(b),
            Ok(Err(e)) | Err(e) => {
                Err(IngressError::invalid(at, format!("could not be read: {e}")))
            }
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }
}

/// A system turn's content (at `at`): a string, or blocks read one at a time: text blocks
/// joined by a blank line; Claude Code's `tool_addition` blocks with a `tool_definition` go to
/// `added` (with where they are), those naming a tool already sent (`tool_reference`) and
/// `tool_removal` blocks change nothing (Chat Completions' tools are the request's).
fn system_turn(
    at: &str,
    content: &RawValue,
    added: &mut Vec<(String, Value)>,
) -> Result<String, IngressError> {
    match content.get().as_bytes()[0] {
        b'"' => serde_json::from_str(content.get())
            .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}"))),
        b'[' => {
            let mut joined = String::new();
            let mut texts = 0;
            each_block(content, at, |j, raw| {
                let b = Block::read(raw, &format!("{at}.{j}"))?;
                match b.str("type") {
                    Some("tool_addition") => {
                        let tool = b.fields.get("tool").unwrap_or(&Value::Null);
                        if tool["type"] == "tool_definition" {
                            added.push((
                                format!("{at}.{j}.tool.definition"),
                                tool["definition"].clone(),
                            ));
                        }
                    }
                    Some("tool_removal") => {}
                    kind => {
                        let (Some("text"), Some(t)) = (kind, b.str("text")) else {
                            return Err(IngressError::invalid(
                                format!("{at}.{texts}"),
                                "must be a text block ({\"type\": \"text\", \"text\": ...})",
                            ));
                        };
                        if texts > 0 {
                            joined.push_str("\n\n");
                        }
                        joined.push_str(t);
                        texts += 1;
                    }
                }
                Ok(())
            })?;
            Ok(joined)
        }
        _ => Err(IngressError::invalid(
            at,
            format!(
                "must be a string or an array of text blocks, not {}",
                kind_of(content.get().as_bytes())
            ),
        )),
    }
}

/// One Messages message as Chat Completions messages, written into `out` as they are made (a
/// user message's tool results become `tool` messages first): its fields, and its blocks,
/// read one at a time from its text, never as a tree.
fn message_of(
    i: usize,
    raw: &RawValue,
    out: &mut MessagesOut,
    added: &mut Vec<(String, Value)>,
) -> Result<(), IngressError> {
    let at = format!("messages.{i}");
    let (mut role, mut content) = (Value::Null, None);
    message_check::object(&at, raw.get())?;
    {
        let read = choicewise_partial_json::for_each_raw_field(raw.get().as_bytes(), |k, v| {
            match k {
                "role" => role = lean(v)?,
                "content" => content = Some(v),
                _ => {}
            }
            Ok::<(), serde_json::Error>(())
        });
        match read {
            Ok(Ok(())) => {}
            Ok(Err(e)) | Err(e) => {
                return Err(IngressError::invalid(at, format!("could not be read: {e}")));
            }
        }
    }
    let content = content.filter(|c| c.get() != "null");
    let role = match message_check::role(&at, &role, message_check::MESSAGES_ROLES) {
        Ok(role) => role,
        // In Anthropic's own words (its `Field required`, or a wrong role's wording, which
        // Claude Code's fallback for servers that refuse a system turn looks for), with the
        // check's code.
        Err(mut e) => {
            if !role.is_null() {
                e.message = format!("{at}.role: Input should be 'user' or 'assistant'");
            } else {
                e.message = format!("{at}.role: Field required");
            }
            return Err(e);
        }
    };
    let role = match role {
        role @ ("user" | "assistant") => role,
        // A system turn inside the conversation (Claude Code's environment block, after the
        // first user turn): a system message at the same place.
        _ => {
            let content = match content {
                None => return Err(IngressError::missing(format!("{at}.content"))),
                Some(content) => system_turn(&format!("{at}.content"), content, added)?,
            };
            if !content.is_empty() {
                out.write(&json!({"role": "system", "content": content}));
            }
            return Ok(());
        }
    };
    let Some(content) = content else {
        return Err(IngressError::missing(format!("{at}.content")));
    };
    match content.get().as_bytes()[0] {
        b'"' => {
            // The string as the client wrote it (JSON already): copied, never unescaped.
            out.write_with(|buf| {
                buf.extend_from_slice(br#"{"content":"#);
                buf.extend_from_slice(content.get().as_bytes());
                buf.extend_from_slice(format!(r#","role":"{role}"}}"#).as_bytes());
                Ok(())
            })
        }
        b'[' if role == "user" => user_blocks(&at, content, out),
        b'[' => assistant_blocks(&at, content, out),
        _ => Err(IngressError::invalid(
            format!("{at}.content"),
            format!(
                "must be a string or an array of blocks, not {}",
                kind_of(content.get().as_bytes())
            ),
        )),
    }
}

/// A user message's blocks, one at a time: tool results as `tool` messages, written at once,
/// then the rest as one user message (its images with the tool results' images).
fn user_blocks(at: &str, blocks: &RawValue, out: &mut MessagesOut) -> Result<(), IngressError> {
    let mut parts = Parts::with_capacity(blocks.get().len());
    let mut result_images = Parts::default();
    let mut results = false;
    each_block(blocks, &format!("{at}.content"), |j, raw| {
        let at = format!("{at}.content.{j}");
        let b = Block::read(raw, &at)?;
        match b.str("type") {
            Some("text") => parts.push(text_part(&at, &b)?),
            Some("image") => parts.push(image_part(&at, &b)?),
            Some("tool_result") => {
                let Some(id) = b.str("tool_use_id") else {
                    return Err(IngressError::missing(format!("{at}.tool_use_id")));
                };
                let content = tool_result_text(&at, b.content, &mut result_images)?;
                out.write(&json!({"role": "tool", "tool_call_id": id, "content": content}));
                results = true;
            }
            other => return Err(unsupported_block(&at, other)),
        }
        Ok(())
    })?;
    parts.extend(result_images);
    let only_results = parts.n == 0 && results;
    if only_results {
        return Ok(());
    }
    // An empty user message stays one.
    out.write_with(|buf| {
        buf.extend_from_slice(br#"{"content":"#);
        parts.write_content(buf);
        buf.extend_from_slice(br#","role":"user"}"#);
        Ok(())
    })
}

/// An assistant message's blocks, one at a time: its `tool_use` blocks written as its
/// `tool_calls` straight into the list as they are read (an input as its compact text,
/// written as the `arguments` string at once: never a string of its own), its text joined
/// and written after them (`{"role":"assistant","tool_calls":[…],"content":…}`).
fn assistant_blocks(
    at: &str,
    blocks: &RawValue,
    out: &mut MessagesOut,
) -> Result<(), IngressError> {
    out.write_with(|buf| {
        let mut text: Option<String> = None;
        let mut calls = 0;
        buf.extend_from_slice(br#"{"role":"assistant""#);
        each_block(blocks, &format!("{at}.content"), |j, raw| {
            let at = format!("{at}.content.{j}");
            let b = Block::read(raw, &at)?;
            match b.str("type") {
                Some("text") => {
                    let t = text_part(&at, &b)?;
                    text.get_or_insert_default()
                        .push_str(t["text"].as_str().unwrap_or_default());
                }
                Some("tool_use") => {
                    let (Some(id), Some(name)) = (b.str("id"), b.str("name")) else {
                        return Err(IngressError::invalid(
                            at,
                            "a tool_use block needs its \"id\" and \"name\"",
                        ));
                    };
                    buf.extend_from_slice(match calls {
                        0 => br#","tool_calls":["#.as_slice(),
                        _ => b",",
                    });
                    // The input's text as the client wrote it (its numbers digit for
                    // digit), without its insignificant whitespace.
                    buf.extend_from_slice(br#"{"function":{"arguments":"#);
                    match b.input.filter(|i| i.get() != "null") {
                        None => buf.extend_from_slice(br#""{}""#),
                        Some(raw) => write_compact_as_string(buf, raw.get()),
                    }
                    // Strings always serialise.
                    buf.extend_from_slice(br#","name":"#);
                    let _ = serde_json::to_writer(&mut *buf, name);
                    buf.extend_from_slice(br#"},"id":"#);
                    let _ = serde_json::to_writer(&mut *buf, id);
                    buf.extend_from_slice(br#","type":"function"}"#);
                    calls += 1;
                }
                Some("thinking" | "redacted_thinking") => {}
                other => return Err(unsupported_block(&at, other)),
            }
            Ok(())
        })?;
        if calls > 0 {
            buf.push(b']');
        }
        buf.extend_from_slice(br#","content":"#);
        match (text, calls) {
            (Some(t), _) => {
                let _ = serde_json::to_writer(&mut *buf, &t);
            }
            (None, 0) => buf.extend_from_slice(b"\"\""),
            (None, _) => buf.extend_from_slice(b"null"),
        }
        buf.push(b'}');
        Ok(())
    })
}

/// A text block as a Chat Completions text part.
fn text_part(at: &str, b: &Block<'_>) -> Result<Value, IngressError> {
    match b.str("text") {
        Some(t) => Ok(json!({"type": "text", "text": t})),
        None => Err(IngressError::missing(format!("{at}.text"))),
    }
}

/// An image block as an `image_url` part.
fn image_part(at: &str, b: &Block<'_>) -> Result<Value, IngressError> {
    let source = b.fields.get("source").unwrap_or(&Value::Null);
    let url = match source["type"].as_str() {
        Some("base64") => match (source["media_type"].as_str(), source["data"].as_str()) {
            (Some(media), Some(data)) => format!("data:{media};base64,{data}"),
            _ => {
                return Err(IngressError::invalid(
                    format!("{at}.source"),
                    "a base64 source needs its \"media_type\" and \"data\"",
                ));
            }
        },
        Some("url") => match source["url"].as_str() {
            Some(url) => url.to_string(),
            None => return Err(IngressError::missing(format!("{at}.source.url"))),
        },
        Some(other) => {
            return Err(IngressError::unsupported(
                format!("{at}.source.type"),
                format!("{other:?} sources are not served by this gateway (base64, url)"),
            ));
        }
        None => return Err(IngressError::missing(format!("{at}.source.type"))),
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// A `tool_result`'s content as text (its text blocks joined by newlines, read one at a
/// time); its images are added to `images`.
fn tool_result_text(
    at: &str,
    content: Option<&RawValue>,
    images: &mut Parts,
) -> Result<String, IngressError> {
    let Some(content) = content.filter(|c| c.get() != "null") else {
        return Ok(String::new());
    };
    match content.get().as_bytes()[0] {
        b'"' => serde_json::from_str(content.get())
            .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}"))),
        b'[' => {
            let mut joined = String::new();
            each_block(content, &format!("{at}.content"), |k, raw| {
                let at = format!("{at}.content.{k}");
                let b = Block::read(raw, &at)?;
                let text = match b.str("type") {
                    Some("text") => b.str("text").unwrap_or_default().to_string(),
                    // A tool search's match (Claude Code's ToolSearch): the tool is among the
                    // request's tools already.
                    Some("tool_reference") => format!(
                        "Tool {} is available.",
                        b.str("tool_name").unwrap_or_default()
                    ),
                    Some("image") => {
                        images.push(image_part(&at, &b)?);
                        return Ok(());
                    }
                    other => return Err(unsupported_block(&at, other)),
                };
                if k > 0 && !joined.is_empty() {
                    joined.push('\n');
                }
                joined.push_str(&text);
                Ok(())
            })?;
            Ok(joined)
        }
        _ => Err(IngressError::invalid(
            format!("{at}.content"),
            format!(
                "must be a string or an array of blocks, not {}",
                kind_of(content.get().as_bytes())
            ),
        )),
    }
}

/// The 400 for a block type not served here.
fn unsupported_block(at: &str, kind: Option<&str>) -> IngressError {
    match kind {
        Some(kind) => IngressError::unsupported(
            format!("{at}.type"),
            format!("{kind:?} blocks are not served by this gateway here"),
        ),
        None => IngressError::missing(format!("{at}.type")),
    }
}

#[cfg(test)]
mod tests;
