//! Anthropic Messages in: a `POST /v1/messages` body read into a Chat Completions request,
//! and errors in Anthropic's shape. The answer's encoder is in `anthropic/encode.rs`.
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

pub(crate) use encode::{INPUT_AS_WRITTEN, MessagesEncoder, message};

use std::collections::HashSet;

use axum::http::StatusCode;
use bytes::Bytes;
use choicewise_core::Dialect;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{
    Hosted, IngressError, MessagesOut, Reply, Translated, field, for_each_raw_entry, raw_entries,
    raw_field, raw_object, read_fields, small, write_function_tool,
};
use crate::request::{Fields, fields_of, kind_of};

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
/// ([`for_each_raw_entry`], [`raw_entries`]), the others are
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
            for_each_raw_entry(text, "messages", |i, m, raw| {
                message_of(i, &m, raw, &mut messages.made, &mut added)?;
                messages.written();
                Ok(())
            })?;
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
            api: Dialect::Anthropic,
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

/// A system turn's content (at `at`): a string, or text blocks joined by a
/// blank line.
fn system_text(at: &str, system: &Value) -> Result<String, IngressError> {
    match system {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                match (b["type"].as_str(), b["text"].as_str()) {
                    (Some("text"), Some(t)) => texts.push(t),
                    _ => {
                        return Err(IngressError::invalid(
                            format!("{at}.{i}"),
                            "must be a text block ({\"type\": \"text\", \"text\": ...})",
                        ));
                    }
                }
            }
            Ok(texts.join("\n\n"))
        }
        v => Err(IngressError::invalid(
            at,
            format!(
                "must be a string or an array of text blocks, not {}",
                kind_of(v)
            ),
        )),
    }
}

/// A system turn's content (at `at`): a string, or blocks: text blocks joined by a blank line;
/// Claude Code's `tool_addition` blocks with a `tool_definition` go to `added` (with where
/// they are), those naming a tool already sent (`tool_reference`) and `tool_removal` blocks
/// change nothing (Chat Completions' tools are the request's).
fn system_turn(
    at: &str,
    content: &Value,
    added: &mut Vec<(String, Value)>,
) -> Result<String, IngressError> {
    let Value::Array(blocks) = content else {
        return system_text(at, content);
    };
    let mut texts = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        match b["type"].as_str() {
            Some("tool_addition") => {
                if b["tool"]["type"] == "tool_definition" {
                    added.push((
                        format!("{at}.{j}.tool.definition"),
                        b["tool"]["definition"].clone(),
                    ));
                }
            }
            Some("tool_removal") => {}
            _ => texts.push(b.clone()),
        }
    }
    system_text(at, &Value::Array(texts))
}

/// One Messages message as Chat Completions messages (a user message's tool results become
/// `tool` messages first).
fn message_of(
    i: usize,
    m: &Value,
    raw: &RawValue,
    out: &mut Vec<Value>,
    added: &mut Vec<(String, Value)>,
) -> Result<(), IngressError> {
    let at = format!("messages.{i}");
    let role = match m.get("role").and_then(Value::as_str) {
        Some(role @ ("user" | "assistant")) => role,
        // A system turn inside the conversation (Claude Code's environment block, after the
        // first user turn): a system message at the same place.
        Some("system") => {
            let content = match m.get("content") {
                None | Some(Value::Null) => {
                    return Err(IngressError::missing(format!("{at}.content")));
                }
                Some(content) => system_turn(&format!("{at}.content"), content, added)?,
            };
            if !content.is_empty() {
                out.push(json!({"role": "system", "content": content}));
            }
            return Ok(());
        }
        // Anthropic's own wording: Claude Code's fallback for servers that refuse a system
        // turn looks for it.
        Some(_) => {
            return Err(IngressError::invalid(
                format!("{at}.role"),
                "Input should be 'user' or 'assistant'",
            ));
        }
        None => return Err(IngressError::missing(format!("{at}.role"))),
    };
    let blocks = match m.get("content") {
        Some(Value::String(text)) => {
            out.push(json!({"role": role, "content": text}));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        None | Some(Value::Null) => return Err(IngressError::missing(format!("{at}.content"))),
        Some(v) => {
            return Err(IngressError::invalid(
                format!("{at}.content"),
                format!("must be a string or an array of blocks, not {}", kind_of(v)),
            ));
        }
    };
    match role {
        "user" => user_blocks(&at, blocks, out),
        _ => assistant_blocks(&at, blocks, &raw_inputs(raw), out),
    }
}

/// The `input` of each block of a message's `content`, as its JSON text as written (a tree
/// would round a 30-digit integer into a float); empty when the content is no list.
fn raw_inputs(message: &RawValue) -> Vec<Option<&RawValue>> {
    #[derive(serde::Deserialize)]
    struct Block<'a> {
        #[serde(borrow, default)]
        input: Option<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
    }
    let content = serde_json::from_str::<Message<'_>>(message.get())
        .ok()
        .and_then(|m| m.content);
    content
        .and_then(|c| serde_json::from_str::<Vec<Block<'_>>>(c.get()).ok())
        .map_or_else(Vec::new, |blocks| {
            blocks.into_iter().map(|b| b.input).collect()
        })
}

/// A user message's blocks: tool results as `tool` messages, then the rest as one user
/// message (its images with the tool results' images).
fn user_blocks(at: &str, blocks: &[Value], out: &mut Vec<Value>) -> Result<(), IngressError> {
    let mut parts = Vec::new();
    let mut results = Vec::new();
    let mut result_images = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        match b["type"].as_str() {
            Some("text") => parts.push(text_part(&at, b)?),
            Some("image") => parts.push(image_part(&at, b)?),
            Some("tool_result") => {
                let Some(id) = b["tool_use_id"].as_str() else {
                    return Err(IngressError::missing(format!("{at}.tool_use_id")));
                };
                let content = tool_result_text(&at, &b["content"], &mut result_images)?;
                results.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            other => return Err(unsupported_block(&at, other)),
        }
    }
    parts.extend(result_images);
    let only_results = parts.is_empty() && !results.is_empty();
    out.extend(results);
    if !only_results {
        // An empty user message stays one.
        out.push(json!({"role": "user", "content": collapse(parts)}));
    }
    Ok(())
}

/// An assistant message's blocks: its text joined, its `tool_use` blocks as `tool_calls`.
fn assistant_blocks(
    at: &str,
    blocks: &[Value],
    inputs: &[Option<&RawValue>],
    out: &mut Vec<Value>,
) -> Result<(), IngressError> {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("{at}.content.{j}");
        match b["type"].as_str() {
            Some("text") => {
                let t = text_part(&at, b)?;
                text.get_or_insert_default()
                    .push_str(t["text"].as_str().unwrap_or_default());
            }
            Some("tool_use") => {
                let (Some(id), Some(name)) = (b["id"].as_str(), b["name"].as_str()) else {
                    return Err(IngressError::invalid(
                        at,
                        "a tool_use block needs its \"id\" and \"name\"",
                    ));
                };
                // The input's text as the client wrote it (its numbers digit for digit),
                // without its insignificant whitespace.
                let arguments = match (b.get("input"), inputs.get(j).copied().flatten()) {
                    (None | Some(Value::Null), _) => "{}".to_string(),
                    (Some(_), Some(raw)) => choicewise_partial_json::compact_json(raw.get()),
                    (Some(input), None) => input.to_string(),
                };
                calls.push(json!({"id": id, "type": "function",
                                  "function": {"name": name, "arguments": arguments}}));
            }
            Some("thinking" | "redacted_thinking") => {}
            other => return Err(unsupported_block(&at, other)),
        }
    }
    let mut message = json!({"role": "assistant"});
    message["content"] = match (text, calls.is_empty()) {
        (Some(t), _) => Value::String(t),
        (None, true) => Value::String(String::new()),
        (None, false) => Value::Null,
    };
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    out.push(message);
    Ok(())
}

/// A text block as a Chat Completions text part.
fn text_part(at: &str, b: &Value) -> Result<Value, IngressError> {
    match b["text"].as_str() {
        Some(t) => Ok(json!({"type": "text", "text": t})),
        None => Err(IngressError::missing(format!("{at}.text"))),
    }
}

/// An image block as an `image_url` part.
fn image_part(at: &str, b: &Value) -> Result<Value, IngressError> {
    let source = &b["source"];
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

/// A `tool_result`'s content as text (its text blocks joined by newlines); its images are
/// added to `images`.
fn tool_result_text(
    at: &str,
    content: &Value,
    images: &mut Vec<Value>,
) -> Result<String, IngressError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut texts = Vec::new();
            for (k, b) in blocks.iter().enumerate() {
                let at = format!("{at}.content.{k}");
                match b["type"].as_str() {
                    Some("text") => texts.push(b["text"].as_str().unwrap_or_default().to_string()),
                    // A tool search's match (Claude Code's ToolSearch): the tool is among the
                    // request's tools already.
                    Some("tool_reference") => texts.push(format!(
                        "Tool {} is available.",
                        b["tool_name"].as_str().unwrap_or_default()
                    )),
                    Some("image") => images.push(image_part(&at, b)?),
                    other => return Err(unsupported_block(&at, other)),
                }
            }
            Ok(texts.join("\n"))
        }
        v => Err(IngressError::invalid(
            format!("{at}.content"),
            format!("must be a string or an array of blocks, not {}", kind_of(v)),
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

/// One text part becomes a plain string, none an empty one; anything else stays parts.
fn collapse(mut parts: Vec<Value>) -> Value {
    if parts.is_empty() {
        return Value::String(String::new());
    }
    if parts.len() == 1 && parts[0]["type"] == "text" {
        return parts.swap_remove(0)["text"].take();
    }
    Value::Array(parts)
}

/// `stop_sequences`: a list of strings.
fn stop_sequences(obj: &Map<String, Value>) -> Result<Vec<String>, IngressError> {
    match field(obj, "stop_sequences") {
        None => Ok(Vec::new()),
        Some(Value::Array(list)) => (list.iter().enumerate())
            .map(|(i, s)| match s {
                Value::String(s) => Ok(s.clone()),
                v => Err(IngressError::invalid(
                    format!("stop_sequences.{i}"),
                    format!("must be a string, not {}", kind_of(v)),
                )),
            })
            .collect(),
        Some(v) => Err(IngressError::invalid(
            "stop_sequences",
            format!("must be an array of strings, not {}", kind_of(v)),
        )),
    }
}

/// `tools` as function tools, then the tools system turns `added` (where `at` is), those of
/// a name not already there: the Chat Completions `tools` array's text, if there are any.
/// Server tools and Anthropic-defined tools (a `type` other than `custom`) are left for the
/// model's `hosted_tools` rule, in `hosted`. Each tool is read on its own and written at once,
/// its schema copied as sent: the list never exists as a parsed tree.
fn tools(
    body: &Fields,
    added: &[(String, Value)],
    hosted: &mut Vec<Hosted>,
) -> Result<Option<Bytes>, IngressError> {
    let list = match raw_field(body, "tools") {
        None => Vec::new(),
        Some(text) if text.first() == Some(&b'[') => raw_entries(text, "tools")?,
        Some(text) => {
            return Err(IngressError::invalid(
                "tools",
                format!("must be an array, not {}", kind_of(text)),
            ));
        }
    };
    let mut out = Vec::with_capacity(body.get("tools").map_or(0, |t| t.len() + t.len() / 4));
    out.push(b'[');
    let mut names: HashSet<String> = HashSet::new();
    let mut any = false;
    for (i, t) in list.into_iter().enumerate() {
        let at = format!("tools.{i}");
        let t = raw_object(t).unwrap_or_default();
        match small(&t, "type") {
            Value::Null => {}
            Value::String(kind) if kind == "custom" => {}
            Value::String(other) => {
                hosted.push(Hosted {
                    param: format!("{at}.type"),
                    kind: other,
                });
                continue;
            }
            // Not a string: read as no type, as a parsed tool's would be.
            _ => {}
        }
        let Value::String(name) = small(&t, "name") else {
            return Err(IngressError::missing(format!("{at}.name")));
        };
        let Some(schema) = t.get("input_schema").filter(|s| s.get().starts_with('{')) else {
            return Err(IngressError::missing(format!("{at}.input_schema")));
        };
        let mut parts = vec![("parameters", schema.get().as_bytes())];
        if let Some(d) = t.get("description").filter(|d| d.get() != "null") {
            parts.push(("description", d.get().as_bytes()));
        }
        if any {
            out.push(b',');
        }
        write_function_tool(&mut out, &name, &parts);
        names.insert(name);
        any = true;
    }
    for (at, t) in added {
        if t["name"].as_str().is_some_and(|name| names.contains(name)) {
            continue;
        }
        let tool = function_tool(at, t)?;
        if let Some(name) = tool["function"]["name"].as_str() {
            names.insert(name.to_string());
        }
        if any {
            out.push(b',');
        }
        // A value always serialises.
        let _ = serde_json::to_writer(&mut out, &tool);
        any = true;
    }
    out.push(b']');
    Ok(any.then(|| Bytes::from(out)))
}

/// A client tool (`at`: where it is) as a function tool.
fn function_tool(at: &str, t: &Value) -> Result<Value, IngressError> {
    let Some(name) = t["name"].as_str() else {
        return Err(IngressError::missing(format!("{at}.name")));
    };
    let Some(schema) = t.get("input_schema").filter(|s| s.is_object()) else {
        return Err(IngressError::missing(format!("{at}.input_schema")));
    };
    let mut function = json!({"name": name, "parameters": schema});
    if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
        function["description"] = d.clone();
    }
    Ok(json!({"type": "function", "function": function}))
}

/// `tool_choice`: `auto`, `any` (→ `required`), `tool` (→ that function), `none`;
/// `disable_parallel_tool_use: true` → `parallel_tool_calls: false`. Checked always, sent
/// with tools only.
fn tool_choice(
    obj: &Map<String, Value>,
    has_tools: bool,
    chat: &mut Map<String, Value>,
) -> Result<(), IngressError> {
    let Some(choice) = field(obj, "tool_choice") else {
        return Ok(());
    };
    let mapped = match choice["type"].as_str() {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match choice["name"].as_str() {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => return Err(IngressError::missing("tool_choice.name")),
        },
        Some(other) => {
            return Err(IngressError::invalid(
                "tool_choice.type",
                format!("must be \"auto\", \"any\", \"tool\" or \"none\", not {other:?}"),
            ));
        }
        None => return Err(IngressError::missing("tool_choice.type")),
    };
    if !has_tools {
        // Chat Completions refuses a tool choice without tools.
        return Ok(());
    }
    chat.insert("tool_choice".into(), mapped);
    if choice["disable_parallel_tool_use"] == true {
        chat.insert("parallel_tool_calls".into(), json!(false));
    }
    Ok(())
}

/// `thinking`'s `reasoning_effort`, if it asks for one: `enabled` with its budget
/// (`budget_tokens`), `adaptive` (the upstream's default effort: none), `disabled` (none).
fn thinking_effort(thinking: &Value) -> Result<Option<&'static str>, IngressError> {
    match thinking["type"].as_str() {
        Some("enabled") => match thinking["budget_tokens"].as_u64() {
            Some(budget) => Ok(Some(Dialect::thinking_effort(budget))),
            None => Err(IngressError::missing("thinking.budget_tokens")),
        },
        Some("adaptive" | "disabled") => Ok(None),
        Some(other) => Err(IngressError::invalid(
            "thinking.type",
            format!("must be \"enabled\", \"adaptive\" or \"disabled\", not {other:?}"),
        )),
        None => Err(IngressError::missing("thinking.type")),
    }
}

#[cfg(test)]
mod tests;
