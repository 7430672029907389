//! A Messages request's stop sequences, tools, tool choice and thinking, translated.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::api::{
    Hosted, IngressError, field, raw_entries, raw_field, raw_object, small, write_function_tool,
};
use crate::request::{Fields, kind_of};
use choicewise_core::Dialect;

/// `stop_sequences`: a list of strings.
pub(super) fn stop_sequences(obj: &Map<String, Value>) -> Result<Vec<String>, IngressError> {
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
pub(super) fn tools(
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
pub(super) fn tool_choice(
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
pub(super) fn thinking_effort(thinking: &Value) -> Result<Option<&'static str>, IngressError> {
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
