//! A Gemini request's `contents`, `systemInstruction` and `tools` written from the Chat
//! Completions request's text, as the Anthropic and Responses translations write theirs
//! ([`ListText`]): the messages read one at a time, each parsed, translated ([`Contents`])
//! and written before the next is read; a message larger than [`LARGE`] read one field and
//! one part at a time, its strings copied as written and a call's arguments unescaped once
//! into the list; the tools read one at a time, their schemas copied. Neither list ever
//! exists as a parsed tree: what is held is the text written and the largest small message.
//!
//! What is written reads as the tree's translation ([`super::request`]) does: the same bytes
//! for every message up to [`LARGE`] (the same code translates it), the same JSON for a
//! larger one and for the tools (their objects' keys in the client's order).

use std::borrow::Cow;

use choicewise_partial_json::{for_each_raw_entry, for_each_raw_field};
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{Contents, unknown_role};
use crate::api::MessagesError;
use crate::api::messages::{LARGE, ListText};

/// A message list that could not be read, as the tree's reading names it.
fn not_json(e: serde_json::Error) -> String {
    format!("\"messages\" could not be read: {e}")
}

/// What JSON text that is known to be JSON is, as an error names it, from its first byte.
fn kind(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// A string's value when the JSON text `raw` is one (as `as_str` reads a tree's).
fn string(raw: &RawValue) -> Option<String> {
    (raw.get().starts_with('"'))
        .then(|| serde_json::from_str(raw.get()).ok())
        .flatten()
}

/// Chat Completions `messages` (their JSON text) as Gemini's `contents`, written at the end
/// of `out`: the `systemInstruction`, as JSON text, when there are system messages. `null`
/// is no messages, as the tree reads it.
pub(crate) fn write_contents(
    messages: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Vec<u8>>, MessagesError> {
    let first = (messages.iter()).find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'[') {
        // Not a list: checked to be JSON (no tree of it), then named by what it is.
        let text = std::str::from_utf8(messages).unwrap_or_default();
        serde_json::from_slice::<IgnoredAny>(messages)
            .map_err(|e| MessagesError::Invalid(not_json(e)))?;
        return match kind(text) {
            "null" => {
                out.extend_from_slice(b"[]");
                Ok(None)
            }
            found => Err(MessagesError::NotAnArray { found }),
        };
    }
    let mut list = ListText::with_results_in(out, "parts");
    let mut contents = Contents::default();
    let read = for_each_raw_entry(messages, |i, raw| match raw.get().len() <= LARGE {
        true => {
            let m = serde_json::from_str::<Value>(raw.get()).map_err(not_json)?;
            contents.message(i, m, &mut list)
        }
        false => large(i, raw, &mut contents, &mut list),
    });
    match read {
        Ok(read) => read.map_err(MessagesError::Invalid)?,
        Err(e) => return Err(MessagesError::Invalid(not_json(e))),
    }
    list.finish();
    Ok(contents.system_json())
}

/// A message larger than [`LARGE`] (the client's `i`th, its text `raw`), translated as
/// [`Contents::message`] translates it without its tree: its `role` and `tool_call_id`
/// read, its `content` and `tool_calls` read one part and one call at a time, its other
/// fields left unread.
fn large(
    i: usize,
    raw: &RawValue,
    contents: &mut Contents,
    out: &mut ListText<'_>,
) -> Result<(), String> {
    if !raw.get().starts_with('{') {
        let m = serde_json::from_str::<Value>(raw.get()).map_err(not_json)?;
        return contents.message(i, m, out);
    }
    let at = format!("messages[{i}]");
    let (mut role, mut id) = (None, None);
    let (mut content, mut calls) = (None, None);
    for_each_raw_field(raw.get().as_bytes(), |k, v| {
        // A key given twice: the last one, as a tree keeps it.
        match k {
            "role" => role = string(v),
            "tool_call_id" => id = string(v),
            "content" => content = Some(v),
            "tool_calls" => calls = Some(v),
            _ => {}
        }
        Ok::<(), String>(())
    })
    .map_err(not_json)??;
    let content = content.filter(|c| c.get() != "null");
    let role = role.unwrap_or_default();
    contents.begin(&role);
    match role.as_str() {
        "system" | "developer" => contents.system_text(&text_of(content, &at)?),
        "user" => user(content, &at, out)?,
        "assistant" => assistant(content, calls, &at, contents, out)?,
        "tool" => {
            let name = contents.answered(id.as_deref().unwrap_or_default(), &at)?;
            let text = text_of(content, &at)?;
            // A result that is a JSON object is the response as it is (its whitespace left
            // out); any other, `{"result": TEXT}`.
            let object = text.trim_start().starts_with('{')
                && serde_json::from_str::<IgnoredAny>(&text).is_ok();
            let mut part = br#"{"functionResponse":{"name":"#.to_vec();
            part.extend_from_slice(json!(name).to_string().as_bytes());
            part.extend_from_slice(br#","response":"#);
            match object {
                true => {
                    let mut compact = choicewise_partial_json::Compacting::default();
                    part.extend(text.bytes().filter(|&b| compact.keeps(b)));
                }
                false => {
                    // A value always serialises.
                    let _ = serde_json::to_writer(&mut part, &json!({ "result": text }));
                }
            }
            part.extend_from_slice(b"}}");
            out.join_text(&part, contents.results_open);
            contents.results_open = true;
        }
        other => return Err(unknown_role(&at, other)),
    }
    Ok(())
}

/// The text of a message's `content` (`at`), as [`super::text_of`] reads it: a string, or
/// its text parts joined (any other part an error), read one part at a time.
fn text_of(content: Option<&RawValue>, at: &str) -> Result<String, String> {
    let Some(content) = content else {
        return Ok(String::new());
    };
    match content.get().as_bytes()[0] {
        b'"' => serde_json::from_str(content.get()).map_err(not_json),
        b'[' => {
            let mut text = String::new();
            for_each_raw_entry(content.get().as_bytes(), |j, part| {
                let (kind, piece) = part_fields(part, "text")?;
                match (kind.as_deref(), piece.and_then(string)) {
                    (Some("text"), Some(t)) => text.push_str(&t),
                    _ => {
                        return Err(format!(
                            "{at}.content[{j}]: only text parts can be given here"
                        ));
                    }
                }
                Ok(())
            })
            .map_err(not_json)??;
            Ok(text)
        }
        _ => Err(format!(
            "{at}.content must be a string or a list of parts, not {}",
            kind(content.get())
        )),
    }
}

/// A content part's `type` (when a string) and its field `key` as its text, the last of
/// each; none of either for a part that is not an object.
fn part_fields<'t>(
    part: &'t RawValue,
    key: &str,
) -> Result<(Option<String>, Option<&'t RawValue>), String> {
    let (mut kind, mut value) = (None, None);
    if part.get().starts_with('{') {
        for_each_raw_field(part.get().as_bytes(), |k, v| {
            if k == "type" {
                kind = string(v);
            } else if k == key {
                value = Some(v);
            }
            Ok::<(), ()>(())
        })
        .map_err(not_json)?
        .ok();
    }
    Ok((kind, value))
}

/// A large user message's turn, written into `out`: its string content as one text part
/// (the string as the client wrote it), its parts one at a time (text, and images as
/// `inlineData` or `fileData`), as [`super::user_parts`] writes them.
fn user(content: Option<&RawValue>, at: &str, out: &mut ListText<'_>) -> Result<(), String> {
    let first = content.map(|c| c.get().as_bytes()[0]);
    if !matches!(first, None | Some(b'"' | b'[')) {
        // Refused as the tree refuses it.
        text_of(content, at)?;
    }
    out.next();
    out.put(br#"{"parts":["#);
    match content {
        None => out.put(br#"{"text":""}"#),
        Some(c) if c.get().starts_with('"') => {
            out.put(br#"{"text":"#);
            out.put(c.get().as_bytes());
            out.put(b"}");
        }
        Some(parts) => {
            for_each_raw_entry(parts.get().as_bytes(), |j, part| {
                let at = format!("{at}.content[{j}]");
                if j > 0 {
                    out.put(b",");
                }
                user_part(part, &at, out)
            })
            .map_err(not_json)??;
        }
    }
    out.put(br#"],"role":"user"}"#);
    Ok(())
}

/// One part (`at`) of a large user message, written into `out`.
fn user_part(part: &RawValue, at: &str, out: &mut ListText<'_>) -> Result<(), String> {
    let (mut kind, mut text, mut image) = (None, None, None);
    if part.get().starts_with('{') {
        for_each_raw_field(part.get().as_bytes(), |k, v| {
            match k {
                "type" => kind = string(v),
                "text" => text = Some(v),
                "image_url" => image = Some(v),
                _ => {}
            }
            Ok::<(), ()>(())
        })
        .map_err(not_json)?
        .ok();
    }
    match kind.as_deref() {
        Some("text") => match text.filter(|t| t.get().starts_with('"')) {
            Some(t) => {
                out.put(br#"{"text":"#);
                out.put(t.get().as_bytes());
                out.put(b"}");
            }
            None => return Err(format!("{at}.text must be a string")),
        },
        Some("image_url") => {
            // Its `url`, or the image itself when a string.
            let mut url = None;
            if let Some(image) = image {
                if image.get().starts_with('{') {
                    for_each_raw_field(image.get().as_bytes(), |k, v| {
                        if k == "url" {
                            url = string(v);
                        }
                        Ok::<(), ()>(())
                    })
                    .map_err(not_json)?
                    .ok();
                }
                url = url.or_else(|| string(image));
            }
            let url = url.ok_or_else(|| format!("{at}.image_url.url is missing"))?;
            let part = match url.strip_prefix("data:") {
                Some(rest) => {
                    let (mime, data) = rest
                        .split_once(";base64,")
                        .ok_or_else(|| format!("{at}: a data URL must be base64"))?;
                    json!({"inlineData": {"mimeType": mime, "data": data}})
                }
                None => json!({"fileData": {"fileUri": url}}),
            };
            out.write(&part);
        }
        other => {
            return Err(format!(
                "{at}: a part of type {} has no equivalent in the gemini API",
                other.map_or("(none)".to_string(), |t| format!("{t:?}"))
            ));
        }
    }
    Ok(())
}

/// A large assistant message's `model` turn, written into `out`: its text, then each call as
/// a `functionCall` part (its arguments unescaped once into the list and checked to be a
/// JSON object there; its thought signature from its id), read one call at a time.
fn assistant(
    content: Option<&RawValue>,
    calls: Option<&RawValue>,
    at: &str,
    contents: &mut Contents,
    out: &mut ListText<'_>,
) -> Result<(), String> {
    let text = text_of(content, at)?;
    out.next();
    out.put(br#"{"parts":["#);
    let mut any = !text.is_empty();
    if any {
        out.write(&json!({ "text": text }));
    }
    drop(text);
    if let Some(calls) = calls.filter(|c| c.get().starts_with('[')) {
        for_each_raw_entry(calls.get().as_bytes(), |k, call| {
            let at = format!("{at}.tool_calls[{k}].function");
            let (mut id, mut function) = (None, None);
            if call.get().starts_with('{') {
                for_each_raw_field(call.get().as_bytes(), |key, v| {
                    match key {
                        "id" => id = string(v),
                        "function" => function = Some(v),
                        _ => {}
                    }
                    Ok::<(), ()>(())
                })
                .map_err(not_json)?
                .ok();
            }
            let (mut name, mut arguments) = (None, None);
            if let Some(f) = function.filter(|f| f.get().starts_with('{')) {
                for_each_raw_field(f.get().as_bytes(), |key, v| {
                    match key {
                        "name" => name = string(v),
                        "arguments" => arguments = Some(v),
                        _ => {}
                    }
                    Ok::<(), ()>(())
                })
                .map_err(not_json)?
                .ok();
            }
            let name = name.ok_or_else(|| format!("{at}.name is missing"))?;
            if std::mem::replace(&mut any, true) {
                out.put(b",");
            }
            out.put(br#"{"functionCall":{"args":"#);
            // Arguments that are not a string are none, as the tree reads them.
            match arguments.filter(|a| a.get().starts_with('"')) {
                Some(a) => write_arguments(a.get(), out)?,
                None => out.put(b"{}"),
            }
            out.put(br#","name":"#);
            out.put(json!(name).to_string().as_bytes());
            out.put(b"}");
            if let Some(signature) = contents.call(id.as_deref(), &name) {
                out.put(br#","thoughtSignature":"#);
                out.put(json!(signature).to_string().as_bytes());
            }
            out.put(b"}");
            Ok::<(), String>(())
        })
        .map_err(not_json)??;
    }
    if !any {
        out.put(br#"{"text":""}"#);
    }
    out.put(br#"],"role":"model"}"#);
    Ok(())
}

/// A call's `arguments` (`literal`, a JSON string) written as its `args`: unescaped and
/// compacted straight into the list and checked there to be a JSON object (whitespace alone
/// is `{}`); else read as the tree reads them (trimmed, then parsed). Arguments that are no
/// JSON object (a sample's broken call, sent back in the history) are passed on under
/// `raw_arguments`, as the tree writes them.
fn write_arguments(literal: &str, out: &mut ListText<'_>) -> Result<(), String> {
    let start = out.out.len();
    if out.put_unescaped_compact(literal) {
        match out.out.get(start) {
            None => out.put(b"{}"),
            Some(b'{') => {}
            Some(_) => {
                out.out.truncate(start);
                let text: Cow<'_, str> = serde_json::from_str(literal).map_err(not_json)?;
                out.put(json!({"raw_arguments": text.trim()}).to_string().as_bytes());
            }
        }
        return Ok(());
    }
    // Not JSON once unescaped (or whitespace JSON does not know around it).
    let text: Cow<'_, str> = serde_json::from_str(literal).map_err(not_json)?;
    match text.trim() {
        "" => out.put(b"{}"),
        trimmed => match serde_json::from_str::<IgnoredAny>(trimmed) {
            Ok(_) if trimmed.starts_with('{') => out.put_compact(trimmed),
            _ => out.put(json!({"raw_arguments": trimmed}).to_string().as_bytes()),
        },
    }
    Ok(())
}

/// Chat Completions `tools` (their JSON text) as Gemini's `tools`, written at the end of
/// `out`: one tool of `functionDeclarations`, each read on its own, its `description` and
/// schema (`parameters`, as `parametersJsonSchema`) copied without their whitespace. As
/// [`super::declarations`] writes them, and the same errors; on an error, `out` holds part of
/// the list.
pub(crate) fn write_tools_text(tools: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let unreadable = |e: serde_json::Error| format!("tools could not be read: {e}");
    let first = (tools.iter()).find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'[') {
        serde_json::from_slice::<IgnoredAny>(tools).map_err(unreadable)?;
        return Err("tools must be a list".into());
    }
    let copy = |out: &mut Vec<u8>, raw: &RawValue| {
        let mut compact = choicewise_partial_json::Compacting::default();
        out.extend(raw.get().bytes().filter(|&b| compact.keeps(b)));
    };
    out.extend_from_slice(br#"[{"functionDeclarations":["#);
    for_each_raw_entry(tools, |i, tool| {
        let (kind, function) = part_fields(tool, "function")?;
        if kind.as_deref() != Some("function") {
            return Err(format!(
                "tools[{i}]: only function tools have an equivalent in the gemini API"
            ));
        }
        let (mut name, mut description, mut parameters) = (None, None, None);
        if let Some(f) = function.filter(|f| f.get().starts_with('{')) {
            for_each_raw_field(f.get().as_bytes(), |k, v| {
                match k {
                    "name" => name = string(v),
                    "description" => description = Some(v),
                    "parameters" => parameters = Some(v),
                    _ => {}
                }
                Ok::<(), ()>(())
            })
            .map_err(|e| format!("tools could not be read: {e}"))?
            .ok();
        }
        let name = name.ok_or_else(|| format!("tools[{i}].function.name is missing"))?;
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        if let Some(d) = description.filter(|d| d.get() != "null") {
            out.extend_from_slice(br#""description":"#);
            copy(out, d);
            out.push(b',');
        }
        out.extend_from_slice(br#""name":"#);
        out.extend_from_slice(json!(name).to_string().as_bytes());
        if let Some(p) = parameters.filter(|p| p.get() != "null") {
            out.extend_from_slice(br#","parametersJsonSchema":"#);
            copy(out, p);
        }
        out.push(b'}');
        Ok(())
    })
    .map_err(unreadable)??;
    out.extend_from_slice(b"]}]");
    Ok(())
}
