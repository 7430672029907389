//! The translation's helpers, shared by the Messages and Responses requests: their fields
//! read, written back as Chat Completions' text as they are made (its messages, content
//! parts, function tools), without a tree of the whole body.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::IngressError;
use crate::request::{Fields, MAX_PARSED_FIELD, too_large_to_parse};

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
    let mut compact = choicewise_partial_json::Compacting::default();
    for &b in json.as_bytes() {
        if !compact.keeps(b) {
            continue;
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
