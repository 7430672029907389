//! Counting a request's messages: each message shape (content string or parts, name,
//! refusal, legacy `function_call`, `tool_calls`) and the request-level `tool_choice` /
//! `function_call`, with the counts of images and uncounted parts met on the way.

use choicewise_partial_json::{for_each_raw_entry, for_each_raw_field};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{
    FUNCTION_CALL_PROMPT_OVERHEAD, IMAGE_PART_TOKENS, PARALLEL_TOOL_CALLS_OVERHEAD,
    TOKENS_PER_MESSAGE, TOKENS_PER_NAME, TOOL_CALL_PROMPT_OVERHEAD, optional_array, optional_str,
    required_str,
};
use crate::encoding::{EncodingName, count_text};
use crate::error::{Path, UsageError};

pub(super) struct Counter {
    pub(super) enc: EncodingName,
    pub(super) images: u32,
    pub(super) uncounted: u32,
}

impl Counter {
    pub(super) fn text(&self, s: &str) -> u64 {
        count_text(self.enc, s)
    }

    /// Tokens of one message; also returns its role.
    pub(super) fn message<'v>(
        &mut self,
        m: &'v Value,
        p: &Path<'_>,
        pad_system: bool,
    ) -> Result<(i64, &'v str), UsageError> {
        let obj = m
            .as_object()
            .ok_or_else(|| p.wrong_type("a message object", m))?;
        let role_path = p.key("role");
        let role = match obj.get("role") {
            None => return Err(role_path.missing()),
            Some(Value::String(s)) => s.as_str(),
            Some(v) => return Err(role_path.wrong_type("a string", v)),
        };
        let mut n = (TOKENS_PER_MESSAGE + self.text(role)) as i64;

        let content_path = p.key("content");
        match obj.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                n += if pad_system {
                    let mut padded = String::with_capacity(s.len() + 1);
                    padded.push_str(s);
                    padded.push('\n');
                    self.text(&padded)
                } else {
                    self.text(s)
                } as i64;
            }
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    n += self.content_part(part, &content_path.index(j))? as i64;
                }
            }
            Some(v) => {
                return Err(
                    content_path.wrong_type("a string, an array of content parts or null", v)
                );
            }
        }

        if let Some(name) = optional_str(obj, "name", p)? {
            n += (self.text(name) + TOKENS_PER_NAME) as i64;
        }
        if let Some(refusal) = optional_str(obj, "refusal", p)? {
            n += self.text(refusal) as i64;
        }

        let fc_path = p.key("function_call");
        match obj.get("function_call") {
            None | Some(Value::Null) => {}
            Some(v) => {
                let (name, args) = name_and_arguments(v, &fc_path)?;
                n += (self.text(name) + self.text(args) + FUNCTION_CALL_PROMPT_OVERHEAD) as i64;
            }
        }

        if let Some(calls) = optional_array(obj, "tool_calls", p)? {
            let calls_path = p.key("tool_calls");
            for (j, call) in calls.iter().enumerate() {
                n += self.tool_call(call, &calls_path.index(j))? as i64;
            }
            if calls.len() >= 2 {
                n += PARALLEL_TOOL_CALLS_OVERHEAD as i64;
            }
        }

        if role == "function" {
            n -= 2;
        }
        Ok((n, role))
    }

    /// [`message`](Self::message) of a message's JSON text, its fields read one at a time
    /// and its content parts and tool calls one at a time, each as an object of only the
    /// fields a count reads ([`lean_object`]): a message of any shape is never a tree of more
    /// than one part or call (issue 63). `pad_system`: pad its content if it is a system
    /// message. Returns its tokens and its role.
    pub(super) fn message_raw(
        &mut self,
        raw: &RawValue,
        p: &Path<'_>,
        pad_system: bool,
    ) -> Result<(i64, String), UsageError> {
        let not_json = |e: serde_json::Error| p.not_json(&e);
        if !raw.get().starts_with('{') {
            return Err(p.wrong_type("a message object", &lean(raw).map_err(not_json)?));
        }
        let mut head = Map::new();
        let (mut content, mut calls, mut function_call) = (None, None, None);
        let read = for_each_raw_field(raw.get().as_bytes(), |key, v| {
            match key {
                "role" | "name" | "refusal" => {
                    head.insert(key.to_string(), lean(v)?);
                }
                "content" => content = Some(v),
                "tool_calls" => calls = Some(v),
                "function_call" => function_call = Some(v),
                _ => {}
            }
            Ok(())
        });
        read.map_err(not_json)?.map_err(not_json)?;
        let role_path = p.key("role");
        let role = match head.get("role") {
            None => return Err(role_path.missing()),
            Some(Value::String(s)) => s.clone(),
            Some(v) => return Err(role_path.wrong_type("a string", v)),
        };
        let pad = pad_system && matches!(role.as_str(), "system" | "developer");
        let mut n = (TOKENS_PER_MESSAGE + self.text(&role)) as i64;

        let content_path = p.key("content");
        match content.map(|c| (c, c.get().as_bytes()[0])) {
            None | Some((_, b'n')) => {}
            Some((c, b'"')) => {
                // Borrowed from the text when it has no escape: never copied then.
                let s: std::borrow::Cow<'_, str> = match serde_json::from_str::<&str>(c.get()) {
                    Ok(s) => s.into(),
                    Err(_) => serde_json::from_str::<String>(c.get())
                        .map_err(not_json)?
                        .into(),
                };
                n += if pad {
                    let mut padded = String::with_capacity(s.len() + 1);
                    padded.push_str(&s);
                    padded.push('\n');
                    self.text(&padded)
                } else {
                    self.text(&s)
                } as i64;
            }
            Some((c, b'[')) => {
                let read = for_each_raw_entry(c.get().as_bytes(), |j, part| {
                    let part = lean_object(part, &["type", "text", "refusal"])
                        .map_err(|e| content_path.index(j).not_json(&e))?;
                    n += self.content_part(&part, &content_path.index(j))? as i64;
                    Ok(())
                });
                read.map_err(|e| content_path.not_json(&e))??;
            }
            Some((c, _)) => {
                let v = lean(c).map_err(not_json)?;
                return Err(
                    content_path.wrong_type("a string, an array of content parts or null", &v)
                );
            }
        }

        if let Some(name) = optional_str(&head, "name", p)? {
            n += (self.text(name) + TOKENS_PER_NAME) as i64;
        }
        if let Some(refusal) = optional_str(&head, "refusal", p)? {
            n += self.text(refusal) as i64;
        }

        let fc_path = p.key("function_call");
        if let Some(fc) = function_call.filter(|f| f.get() != "null") {
            let v = lean_object(fc, &["name", "arguments"]).map_err(|e| fc_path.not_json(&e))?;
            let (name, args) = name_and_arguments(&v, &fc_path)?;
            n += (self.text(name) + self.text(args) + FUNCTION_CALL_PROMPT_OVERHEAD) as i64;
        }

        let calls_path = p.key("tool_calls");
        match calls.map(|c| (c, c.get().as_bytes()[0])) {
            None | Some((_, b'n')) => {}
            Some((c, b'[')) => {
                let mut count = 0;
                let read = for_each_raw_entry(c.get().as_bytes(), |j, call| {
                    let call = lean_call(call).map_err(|e| calls_path.index(j).not_json(&e))?;
                    n += self.tool_call(&call, &calls_path.index(j))? as i64;
                    count += 1;
                    Ok(())
                });
                read.map_err(|e| calls_path.not_json(&e))??;
                if count >= 2 {
                    n += PARALLEL_TOOL_CALLS_OVERHEAD as i64;
                }
            }
            Some((c, _)) => {
                let v = lean(c).map_err(not_json)?;
                return Err(calls_path.wrong_type("an array", &v));
            }
        }

        if role == "function" {
            n -= 2;
        }
        Ok((n, role))
    }

    fn content_part(&mut self, part: &Value, p: &Path<'_>) -> Result<u64, UsageError> {
        let obj = part
            .as_object()
            .ok_or_else(|| p.wrong_type("a content part object", part))?;
        let type_path = p.key("type");
        let ty = match obj.get("type") {
            None => return Err(type_path.missing()),
            Some(Value::String(s)) => s.as_str(),
            Some(v) => return Err(type_path.wrong_type("a string", v)),
        };
        Ok(match ty {
            "text" | "refusal" => self.text(required_str(obj, ty, p)?),
            "image_url" => {
                self.images = self.images.saturating_add(1);
                IMAGE_PART_TOKENS
            }
            _ => {
                self.uncounted = self.uncounted.saturating_add(1);
                0
            }
        })
    }

    fn tool_call(&mut self, call: &Value, p: &Path<'_>) -> Result<u64, UsageError> {
        let obj = call
            .as_object()
            .ok_or_else(|| p.wrong_type("a tool call object", call))?;
        let ty = optional_str(obj, "type", p)?;
        if let (Some("function"), _) | (None, Some(_)) = (ty, obj.get("function")) {
            let fp = p.key("function");
            let f = obj.get("function").ok_or_else(|| fp.missing())?;
            let (name, args) = name_and_arguments(f, &fp)?;
            return Ok(self.text(name) + self.text(args) + TOOL_CALL_PROMPT_OVERHEAD);
        }
        if ty == Some("custom")
            && let Some(custom) = obj.get("custom")
        {
            let cp = p.key("custom");
            let cobj = custom
                .as_object()
                .ok_or_else(|| cp.wrong_type("an object", custom))?;
            let name = required_str(cobj, "name", &cp)?;
            let input = optional_str(cobj, "input", &cp)?.unwrap_or_default();
            return Ok(self.text(name) + self.text(input) + TOOL_CALL_PROMPT_OVERHEAD);
        }
        self.uncounted = self.uncounted.saturating_add(1);
        Ok(0)
    }

    /// `tool_choice` / `function_call` at the request level.
    pub(super) fn choice(
        &self,
        body: &Map<String, Value>,
        key: &str,
        root: &Path<'_>,
    ) -> Result<i64, UsageError> {
        let p = root.key(key);
        Ok(match body.get(key) {
            None | Some(Value::Null) => 0,
            Some(Value::String(s)) => i64::from(s == "none"),
            Some(Value::Object(obj)) => {
                // {"type": "function", "function": {"name": …}} or {"name": …}
                let named = match obj.get("function") {
                    Some(f) => {
                        let fp = p.key("function");
                        let fobj = f.as_object().ok_or_else(|| fp.wrong_type("an object", f))?;
                        Some(required_str(fobj, "name", &fp)?)
                    }
                    None => optional_str(obj, "name", &p)?,
                };
                named.map_or(0, |name| self.text(name) as i64 + 4)
            }
            Some(v) => return Err(p.wrong_type("a string or an object", v)),
        })
    }
}

fn name_and_arguments<'v>(v: &'v Value, p: &Path<'_>) -> Result<(&'v str, &'v str), UsageError> {
    let obj = v.as_object().ok_or_else(|| p.wrong_type("an object", v))?;
    let name = required_str(obj, "name", p)?;
    let args = optional_str(obj, "arguments", p)?.unwrap_or_default();
    Ok((name, args))
}

/// The most bytes of an object or array [`lean`] parses whole.
const LEAN: usize = 64 * 1024;

/// A value's JSON text as a tree when it is a string, a number, `true`, `false`, `null`, or
/// an object or array of at most [`LEAN`] bytes; a larger object or array as an empty one of
/// its kind: only its type is read then (the count wanted a string or a small object).
fn lean(raw: &RawValue) -> Result<Value, serde_json::Error> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'[') if text.len() > LEAN => Ok(Value::Array(Vec::new())),
        Some(b'{') if text.len() > LEAN => Ok(Value::Object(Map::new())),
        Some(b'"') if text.len() > LEAN => match unescaped(text) {
            Some(s) => Ok(Value::String(s)),
            None => serde_json::from_str(text),
        },
        _ => serde_json::from_str(text),
    }
}

/// The value of the JSON string `literal` (with its quotes, known to be a JSON string),
/// unescaped into a string of at most its own size, allocated once: the parser's own read
/// of a string with escapes copies it into a buffer that grows by doubling and then again
/// into the string, up to three times its size at once. `None` at a lone surrogate escape
/// (for the parser to refuse it).
fn unescaped(literal: &str) -> Option<String> {
    let inner = literal.get(1..literal.len().checked_sub(1)?)?;
    let bytes = inner.as_bytes();
    let mut out = String::with_capacity(inner.len());
    let hex = |at: usize| -> Option<u32> {
        u32::from_str_radix(std::str::from_utf8(bytes.get(at..at + 4)?).ok()?, 16).ok()
    };
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        out.push_str(&inner[start..i]);
        let (c, len) = match bytes.get(i + 1)? {
            b'"' => ('"', 2),
            b'\\' => ('\\', 2),
            b'/' => ('/', 2),
            b'b' => ('\u{8}', 2),
            b'f' => ('\u{c}', 2),
            b'n' => ('\n', 2),
            b'r' => ('\r', 2),
            b't' => ('\t', 2),
            b'u' => match hex(i + 2)? {
                unit @ 0xD800..=0xDBFF => match (bytes.get(i + 6..i + 8)?, hex(i + 8)?) {
                    (b"\\u", low @ 0xDC00..=0xDFFF) => {
                        let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                        (char::from_u32(code)?, 12)
                    }
                    _ => return None,
                },
                unit => (char::from_u32(unit)?, 6),
            },
            _ => return None,
        };
        out.push(c);
        i += len;
        start = i;
    }
    out.push_str(&inner[start..]);
    Some(out)
}

/// The fields named `keys` of the object `raw`, each [`lean`] (the last of a key sent twice),
/// every other field skipped unparsed; `raw` itself as [`lean`] when it is no object.
fn lean_object(raw: &RawValue, keys: &[&str]) -> Result<Value, serde_json::Error> {
    if !raw.get().starts_with('{') {
        return lean(raw);
    }
    let mut obj = Map::new();
    for_each_raw_field(raw.get().as_bytes(), |key, v| {
        if keys.contains(&key) {
            obj.insert(key.to_string(), lean(v)?);
        }
        Ok(())
    })??;
    Ok(Value::Object(obj))
}

/// A tool call as [`lean_object`]: its `type`, and its `function` (`name`, `arguments`) and
/// `custom` (`name`, `input`) as lean objects.
fn lean_call(raw: &RawValue) -> Result<Value, serde_json::Error> {
    if !raw.get().starts_with('{') {
        return lean(raw);
    }
    let mut obj = Map::new();
    for_each_raw_field(raw.get().as_bytes(), |key, v| {
        let value = match key {
            "type" => lean(v)?,
            "function" => lean_object(v, &["name", "arguments"])?,
            "custom" => lean_object(v, &["name", "input"])?,
            _ => return Ok(()),
        };
        obj.insert(key.to_string(), value);
        Ok(())
    })??;
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long string is read as the parser reads it, escapes of every kind included; a lone
    /// surrogate is left to the parser, which refuses it.
    #[test]
    fn a_long_string_is_unescaped_as_the_parser_does() {
        let text = format!(
            "{}é😀 \u{1} \"q\" \\ / \t\n{}",
            "x".repeat(LEAN),
            "\u{e9}\u{1F600}"
        );
        let literal = serde_json::to_string(&text).unwrap();
        let escaped = format!(r#""\u0041\/\ud83d\ude00\b\f\r{}""#, "y".repeat(LEAN));
        for literal in [literal, escaped] {
            let raw: &RawValue = serde_json::from_str(&literal).unwrap();
            let want: String = serde_json::from_str(&literal).unwrap();
            assert_eq!(unescaped(&literal).as_deref(), Some(want.as_str()));
            assert_eq!(lean(raw).unwrap(), Value::String(want));
        }
        let lone = format!(r#""{}\ud800""#, "z".repeat(LEAN));
        assert_eq!(unescaped(&lone), None);
        let raw: &RawValue = serde_json::from_str(&lone).unwrap();
        assert!(lean(raw).is_err());
    }
}
