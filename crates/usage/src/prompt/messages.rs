//! Counting a request's messages: each message shape (content string or parts, name,
//! refusal, legacy `function_call`, `tool_calls`) and the request-level `tool_choice` /
//! `function_call`, with the counts of images and uncounted parts met on the way.

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
