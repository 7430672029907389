//! A Gemini `generateContent` body read into a Chat Completions one (the table of
//! [`super`]): `contents` read one entry at a time (each entry's parts as their text, never a
//! tree of the list), the small fields parsed.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::api::{
    Hosted, IngressError, MessagesOut, Parts, each_block, field, raw_field, raw_object,
    read_fields, write_compact_as_string, write_function_tool,
};
use crate::request::{Fields, fields_of, kind_of};

use super::generation::{generation_config, json_schema_of, not_an_object};

/// A Gemini request read: the Chat Completions body's fields, its hosted tools, and whether
/// thoughts were asked for.
pub(super) struct Translated {
    pub chat: Fields,
    pub hosted: Vec<Hosted>,
    pub thoughts: bool,
}

/// The small fields a translation parses; `contents`, `systemInstruction` and `tools` are
/// read from their text.
const READ: [&str; 3] = ["generationConfig", "toolConfig", "cachedContent"];

/// What a body is read for: the answer it asks, or a count of its prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Every function response must answer a call of the model's content before it.
    Answer,
    /// A count (`countTokens`): a function response may stand alone (Gemini CLI counts a
    /// tool's result, an image included, without the call it answers), counted as a `tool`
    /// message of its own id or name.
    Count,
}

/// Reads a Gemini body (`model` and `stream`: from its path) into a Chat Completions one;
/// `max_n`: the most candidates a request may ask for.
pub(super) fn to_chat(
    body: &Fields,
    model: &str,
    stream: bool,
    max_n: u32,
) -> Result<Translated, IngressError> {
    read(body, model, stream, max_n, Purpose::Answer)
}

/// As [`to_chat`], for `purpose`.
pub(super) fn read(
    body: &Fields,
    model: &str,
    stream: bool,
    max_n: u32,
    purpose: Purpose,
) -> Result<Translated, IngressError> {
    let obj = &read_fields(body, &READ)?;
    if field(obj, "cachedContent").is_some() {
        return Err(IngressError::unsupported(
            "cachedContent",
            "cached contents are not served by this gateway (it keeps no state)",
        ));
    }
    let mut chat = Map::new();
    chat.insert("model".into(), json!(model));
    if stream {
        chat.insert("stream".into(), json!(true));
    }
    let thoughts = match field(obj, "generationConfig") {
        Some(Value::Object(config)) => generation_config(config, max_n, &mut chat)?,
        Some(other) => return Err(not_an_object("generationConfig", other)),
        None => false,
    };
    let mut messages = MessagesOut::with_capacity(body.get("contents").map_or(0, |c| c.len()));
    if let Some(system) = raw_field(body, "systemInstruction") {
        let text = system_text(system)?;
        messages.write(&json!({"role": "system", "content": text}));
    }
    contents(body, &mut messages, purpose)?;
    let mut hosted = Vec::new();
    let tools = tools(body, &mut hosted)?;
    if tools.is_some() {
        match field(obj, "toolConfig") {
            Some(Value::Object(config)) => tool_choice(config, &mut chat)?,
            Some(other) => return Err(not_an_object("toolConfig", other)),
            None => {}
        }
    }
    let mut chat = fields_of(chat);
    chat.insert("messages".into(), messages.finish());
    if let Some(tools) = tools {
        chat.insert("tools".into(), tools.into());
    }
    if let Some(ext) = body.get("choicewise") {
        chat.insert("choicewise".into(), ext.clone());
    }
    Ok(Translated {
        chat,
        hosted,
        thoughts,
    })
}

/// The text of `systemInstruction`: its text parts joined by a blank line.
fn system_text(raw: &[u8]) -> Result<String, IngressError> {
    let at = "systemInstruction";
    let text = std::str::from_utf8(raw).map_err(|e| IngressError::invalid(at, e))?;
    let content: &RawValue = serde_json::from_str(text)
        .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}")))?;
    // A string is taken as one text part (as the SDKs send one).
    if text.starts_with('"') {
        return serde_json::from_str(text)
            .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}")));
    }
    let Some(fields) = raw_object(content) else {
        return Err(IngressError::invalid(
            at,
            format!(
                "must be a content object ({{\"parts\": [...]}}), not {}",
                kind_of(raw)
            ),
        ));
    };
    let Some(parts) = fields.get("parts") else {
        return Err(IngressError::missing(format!("{at}.parts")));
    };
    let mut joined = String::new();
    each_block(parts, &format!("{at}.parts"), |j, raw| {
        let at = format!("{at}.parts[{j}]");
        let part =
            raw_object(raw).ok_or_else(|| IngressError::invalid(&at, "must be an object"))?;
        let Some(text) = part.get("text") else {
            return Err(IngressError::unsupported(
                at,
                "a system instruction's parts must be text parts",
            ));
        };
        let text: String = serde_json::from_str(text.get())
            .map_err(|_| IngressError::invalid(format!("{at}.text"), "must be a string"))?;
        if !joined.is_empty() {
            joined.push_str("\n\n");
        }
        joined.push_str(&text);
        Ok(())
    })?;
    Ok(joined)
}

/// A function call of the conversation not answered yet: its name and the id it was sent
/// upstream under.
struct Pending {
    name: String,
    id: String,
}

/// `contents`, one entry at a time, written into `out`.
fn contents(body: &Fields, out: &mut MessagesOut, purpose: Purpose) -> Result<(), IngressError> {
    let Some(list) = raw_field(body, "contents") else {
        return Err(IngressError::missing("contents"));
    };
    if list.first() != Some(&b'[') {
        return Err(IngressError::invalid(
            "contents",
            format!("must be an array, not {}", kind_of(&list[..])),
        ));
    }
    let mut pending: Vec<Pending> = Vec::new();
    let mut any = false;
    let read = choicewise_partial_json::for_each_raw_entry(list, |i, raw| {
        any = true;
        content(i, raw, out, &mut pending, purpose)
    });
    match read {
        Ok(read) => read?,
        Err(e) => {
            return Err(IngressError::invalid(
                "contents",
                format!("could not be read: {e}"),
            ));
        }
    }
    if !any {
        return Err(IngressError::invalid(
            "contents",
            "must hold at least one content",
        ));
    }
    Ok(())
}

/// One content: its role and its parts.
fn content(
    i: usize,
    raw: &RawValue,
    out: &mut MessagesOut,
    pending: &mut Vec<Pending>,
    purpose: Purpose,
) -> Result<(), IngressError> {
    let at = format!("contents[{i}]");
    let Some(fields) = raw_object(raw) else {
        return Err(IngressError::invalid(
            at,
            format!("must be an object, not {}", kind_of(raw.get().as_bytes())),
        ));
    };
    let role = match fields
        .get("role")
        .map(|r| serde_json::from_str::<Value>(r.get()))
    {
        None | Some(Ok(Value::Null)) => "user".to_string(),
        Some(Ok(Value::String(r))) => r,
        Some(_) => {
            return Err(IngressError::invalid(
                format!("{at}.role"),
                "must be a string",
            ));
        }
    };
    let Some(parts) = fields.get("parts").filter(|p| p.get() != "null") else {
        return Err(IngressError::missing(format!("{at}.parts")));
    };
    if !parts.get().starts_with('[') {
        return Err(IngressError::invalid(
            format!("{at}.parts"),
            format!("must be an array, not {}", kind_of(parts.get().as_bytes())),
        ));
    }
    match role.as_str() {
        "user" | "function" => user_parts(&at, parts, out, pending, purpose),
        "model" => model_parts(i, &at, parts, out, pending),
        other => Err(IngressError::invalid(
            format!("{at}.role"),
            format!("must be \"user\" or \"model\", not {other:?}"),
        )),
    }
}

/// A part's one datum: which of the kinds it is, and its text.
fn datum<'a>(
    at: &str,
    part: &'a BTreeMap<String, &'a RawValue>,
) -> Result<(&'a str, &'a RawValue), IngressError> {
    const DATA: [&str; 7] = [
        "text",
        "inlineData",
        "functionCall",
        "functionResponse",
        "fileData",
        "executableCode",
        "codeExecutionResult",
    ];
    DATA.iter()
        .find_map(|k| part.get(*k).filter(|v| v.get() != "null").map(|v| (*k, *v)))
        .ok_or_else(|| {
            IngressError::invalid(
                at,
                "a part needs one of text, inlineData, functionCall or functionResponse",
            )
        })
}

fn string(at: &str, raw: &RawValue) -> Result<String, IngressError> {
    serde_json::from_str(raw.get()).map_err(|_| {
        IngressError::invalid(
            at,
            format!("must be a string, not {}", kind_of(raw.get().as_bytes())),
        )
    })
}

fn unsupported_part(at: &str, kind: &str) -> IngressError {
    IngressError::unsupported(
        format!("{at}.{kind}"),
        format!("{kind} parts are not served by this gateway"),
    )
}

/// Whether a part is a thought (`"thought": true`).
fn is_thought(part: &BTreeMap<String, &RawValue>) -> bool {
    part.get("thought").is_some_and(|t| t.get() == "true")
}

/// A user's parts: its function responses as `tool` messages, written first, then its text
/// and images as one user message.
fn user_parts(
    at: &str,
    parts: &RawValue,
    out: &mut MessagesOut,
    pending: &mut Vec<Pending>,
    purpose: Purpose,
) -> Result<(), IngressError> {
    let mut user = Parts::with_capacity(parts.get().len());
    let mut responses = false;
    each_block(parts, &format!("{at}.parts"), |j, raw| {
        let at = format!("{at}.parts[{j}]");
        let part =
            raw_object(raw).ok_or_else(|| IngressError::invalid(&at, "must be an object"))?;
        if is_thought(&part) {
            return Ok(());
        }
        match datum(&at, &part)? {
            ("text", text) => {
                user.push(json!({"type": "text", "text": string(&format!("{at}.text"), text)?}));
            }
            ("inlineData", data) => user.push(image(&format!("{at}.inlineData"), data)?),
            ("functionResponse", response) => {
                let at = format!("{at}.functionResponse");
                out.write(&tool_message(&at, response, pending, purpose)?);
                responses = true;
            }
            ("functionCall", _) => {
                return Err(IngressError::invalid(
                    format!("{at}.functionCall"),
                    "a function call is the model's: it belongs in a content of role \"model\"",
                ));
            }
            (kind, _) => return Err(unsupported_part(&at, kind)),
        }
        Ok(())
    })?;
    if user.n == 0 && responses {
        return Ok(());
    }
    out.write_with(|buf| {
        buf.extend_from_slice(br#"{"content":"#);
        user.write_content(buf);
        buf.extend_from_slice(br#","role":"user"}"#);
        Ok(())
    })
}

/// An `inlineData` part of an image as an `image_url` part of its `data:` URL.
fn image(at: &str, data: &RawValue) -> Result<Value, IngressError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Inline {
        mime_type: Option<String>,
        data: Option<String>,
    }
    let inline: Inline = serde_json::from_str(data.get())
        .map_err(|e| IngressError::invalid(at, format!("could not be read: {e}")))?;
    let Some(mime) = inline.mime_type else {
        return Err(IngressError::missing(format!("{at}.mimeType")));
    };
    let Some(data) = inline.data else {
        return Err(IngressError::missing(format!("{at}.data")));
    };
    if !mime.starts_with("image/") {
        return Err(IngressError::unsupported(
            format!("{at}.mimeType"),
            format!("only images are served by this gateway, not {mime:?}"),
        ));
    }
    Ok(json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}}))
}

/// A `functionResponse` as the `tool` message answering its call: the call of its `id`,
/// else the first unanswered call of its `name` (for a count, none: its own id or name).
fn tool_message(
    at: &str,
    response: &RawValue,
    pending: &mut Vec<Pending>,
    purpose: Purpose,
) -> Result<Value, IngressError> {
    let fields =
        raw_object(response).ok_or_else(|| IngressError::invalid(at, "must be an object"))?;
    let Some(name) = fields.get("name") else {
        return Err(IngressError::missing(format!("{at}.name")));
    };
    let name = string(&format!("{at}.name"), name)?;
    let id = match fields.get("id").filter(|v| v.get() != "null") {
        Some(id) => Some(string(&format!("{at}.id"), id)?),
        None => None,
    };
    let place = (id.as_ref())
        .and_then(|id| pending.iter().position(|p| &p.id == id))
        .or_else(|| pending.iter().position(|p| p.name == name));
    let call_id = match (place, purpose) {
        (Some(place), _) => pending.remove(place).id,
        (None, Purpose::Count) => id.unwrap_or(name),
        (None, Purpose::Answer) => {
            return Err(IngressError::invalid(
                at,
                format!("answers no function call of the model's last content (name {name:?})"),
            ));
        }
    };
    let content = match fields.get("response").filter(|v| v.get() != "null") {
        Some(r) => choicewise_partial_json::compact_json(r.get()),
        None => "{}".to_string(),
    };
    Ok(json!({"role": "tool", "tool_call_id": call_id, "content": content}))
}

/// A model's parts: its text joined, its function calls as the message's `tool_calls`
/// (their `args` as compact JSON text, their `id` kept or made of where they are), which
/// the next user content's function responses answer.
fn model_parts(
    i: usize,
    at: &str,
    parts: &RawValue,
    out: &mut MessagesOut,
    pending: &mut Vec<Pending>,
) -> Result<(), IngressError> {
    pending.clear();
    let mut text: Option<String> = None;
    let mut calls: Vec<Vec<u8>> = Vec::new();
    each_block(parts, &format!("{at}.parts"), |j, raw| {
        let at = format!("{at}.parts[{j}]");
        let part =
            raw_object(raw).ok_or_else(|| IngressError::invalid(&at, "must be an object"))?;
        if is_thought(&part) {
            return Ok(());
        }
        match datum(&at, &part)? {
            ("text", t) => text
                .get_or_insert_default()
                .push_str(&string(&format!("{at}.text"), t)?),
            ("functionCall", call) => {
                let at = format!("{at}.functionCall");
                let fields = raw_object(call)
                    .ok_or_else(|| IngressError::invalid(&at, "must be an object"))?;
                let Some(name) = fields.get("name") else {
                    return Err(IngressError::missing(format!("{at}.name")));
                };
                let name = string(&format!("{at}.name"), name)?;
                let id = match fields.get("id").filter(|v| v.get() != "null") {
                    Some(id) => string(&format!("{at}.id"), id)?,
                    None => format!("call_{i}_{j}"),
                };
                let mut buf = Vec::new();
                buf.extend_from_slice(br#"{"function":{"arguments":"#);
                match fields.get("args").filter(|a| a.get() != "null") {
                    Some(args) if args.get().starts_with('{') => {
                        write_compact_as_string(&mut buf, args.get());
                    }
                    Some(args) => {
                        return Err(IngressError::invalid(
                            format!("{at}.args"),
                            format!("must be an object, not {}", kind_of(args.get().as_bytes())),
                        ));
                    }
                    None => buf.extend_from_slice(br#""{}""#),
                }
                // Strings always serialise.
                buf.extend_from_slice(br#","name":"#);
                let _ = serde_json::to_writer(&mut buf, &name);
                buf.extend_from_slice(br#"},"id":"#);
                let _ = serde_json::to_writer(&mut buf, &id);
                buf.extend_from_slice(br#","type":"function"}"#);
                calls.push(buf);
                pending.push(Pending { name, id });
            }
            ("functionResponse", _) => {
                return Err(IngressError::invalid(
                    format!("{at}.functionResponse"),
                    "a function response is the user's: it belongs in a content of role \"user\"",
                ));
            }
            (kind, _) => return Err(unsupported_part(&at, kind)),
        }
        Ok(())
    })?;
    let content = match (&text, calls.is_empty()) {
        (Some(t), _) => serde_json::to_vec(t).unwrap_or_default(),
        (None, true) => b"\"\"".to_vec(),
        (None, false) => b"null".to_vec(),
    };
    out.hold_assistant(&content);
    for call in calls {
        out.call_owned(call);
    }
    Ok(())
}

/// `tools`: each `functionDeclarations` entry as a function tool; other tools are hosted
/// ones (`googleSearch`, `codeExecution`, ...), added to `hosted`. The tools' JSON text,
/// if any function was declared.
fn tools(body: &Fields, hosted: &mut Vec<Hosted>) -> Result<Option<Vec<u8>>, IngressError> {
    let Some(list) = raw_field(body, "tools") else {
        return Ok(None);
    };
    if list.first() != Some(&b'[') {
        return Err(IngressError::invalid(
            "tools",
            format!("must be an array, not {}", kind_of(&list[..])),
        ));
    }
    let mut out = vec![b'['];
    let mut any = false;
    let read = choicewise_partial_json::for_each_raw_entry(list, |i, raw| {
        let at = format!("tools[{i}]");
        let tool =
            raw_object(raw).ok_or_else(|| IngressError::invalid(&at, "must be an object"))?;
        for (key, value) in &tool {
            if value.get() == "null" {
                continue;
            }
            if key != "functionDeclarations" {
                hosted.push(Hosted {
                    param: format!("{at}.{key}"),
                    kind: key.clone(),
                });
                continue;
            }
            each_block(value, &format!("{at}.functionDeclarations"), |j, raw| {
                let at = format!("{at}.functionDeclarations[{j}]");
                if any {
                    out.push(b',');
                }
                declaration(&at, raw, &mut out)?;
                any = true;
                Ok(())
            })?;
        }
        Ok::<(), IngressError>(())
    });
    match read {
        Ok(read) => read?,
        Err(e) => {
            return Err(IngressError::invalid(
                "tools",
                format!("could not be read: {e}"),
            ));
        }
    }
    out.push(b']');
    Ok(any.then_some(out))
}

/// One function declaration as a Chat Completions function tool, written into `out`.
fn declaration(at: &str, raw: &RawValue, out: &mut Vec<u8>) -> Result<(), IngressError> {
    let fields = raw_object(raw).ok_or_else(|| IngressError::invalid(at, "must be an object"))?;
    let Some(name) = fields.get("name") else {
        return Err(IngressError::missing(format!("{at}.name")));
    };
    let name = string(&format!("{at}.name"), name)?;
    let mut parts: Vec<(&str, Vec<u8>)> = Vec::new();
    if let Some(d) = fields.get("description").filter(|d| d.get() != "null") {
        string(&format!("{at}.description"), d)?;
        parts.push(("description", d.get().as_bytes().to_vec()));
    }
    let schema = match (
        fields
            .get("parametersJsonSchema")
            .filter(|p| p.get() != "null"),
        fields.get("parameters").filter(|p| p.get() != "null"),
    ) {
        (Some(schema), _) => Some(schema.get().as_bytes().to_vec()),
        (None, Some(schema)) => {
            let parsed: Value = serde_json::from_str(schema.get()).map_err(|e| {
                IngressError::invalid(
                    format!("{at}.parameters"),
                    format!("could not be read: {e}"),
                )
            })?;
            Some(serde_json::to_vec(&json_schema_of(parsed)).unwrap_or_default())
        }
        (None, None) => None,
    };
    if let Some(schema) = schema {
        if !schema.starts_with(b"{") {
            return Err(IngressError::invalid(
                format!("{at}.parameters"),
                "must be an object",
            ));
        }
        parts.push(("parameters", schema));
    }
    let parts: Vec<(&str, &[u8])> = parts.iter().map(|(k, v)| (*k, &v[..])).collect();
    write_function_tool(out, &name, &parts);
    Ok(())
}

/// `toolConfig.functionCallingConfig` as `tool_choice`.
fn tool_choice(
    config: &Map<String, Value>,
    chat: &mut Map<String, Value>,
) -> Result<(), IngressError> {
    let at = "toolConfig.functionCallingConfig";
    let Some(calling) = field(config, "functionCallingConfig") else {
        return Ok(());
    };
    let Value::Object(calling) = calling else {
        return Err(not_an_object(at, calling));
    };
    let allowed: Vec<&str> = match field(calling, "allowedFunctionNames") {
        None => Vec::new(),
        Some(v) => (v.as_array())
            .and_then(|a| a.iter().map(Value::as_str).collect())
            .ok_or_else(|| {
                IngressError::invalid(
                    format!("{at}.allowedFunctionNames"),
                    "must be an array of strings",
                )
            })?,
    };
    let choice = match field(calling, "mode").map(|m| m.as_str()) {
        None | Some(Some("MODE_UNSPECIFIED")) => return Ok(()),
        Some(Some("AUTO" | "VALIDATED")) => json!("auto"),
        Some(Some("NONE")) => json!("none"),
        Some(Some("ANY")) => match allowed[..] {
            [one] => json!({"type": "function", "function": {"name": one}}),
            _ => json!("required"),
        },
        Some(other) => {
            return Err(IngressError::invalid(
                format!("{at}.mode"),
                format!(
                    "must be AUTO, ANY, NONE or VALIDATED, not {}",
                    other.map_or_else(|| "a non-string".to_string(), |m| format!("{m:?}"))
                ),
            ));
        }
    };
    chat.insert("tool_choice".into(), choice);
    Ok(())
}
