//! A Responses request's tools (function, custom, namespace, hosted), tool choice and text
//! options, translated.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::api::{
    Hosted, IngressError, field, raw_entries, raw_field, raw_object, small, write_function_tool,
};
use crate::request::{Fields, kind_of};

/// A namespace's function as a function tool's name: `NAMESPACE__NAME`.
pub(super) fn flat_name(namespace: &str, name: &str) -> String {
    format!("{namespace}__{name}")
}

/// A function tool of the client's (`tools[i]`, or `tools[i].tools[j]` of a namespace) in
/// Chat Completions' shape, under `name`, appended to `out`: its `description`,
/// `parameters` and `strict` copied as sent.
fn function_tool(
    at: &str,
    t: &BTreeMap<String, &RawValue>,
    name: &str,
    out: &mut Vec<u8>,
) -> Result<(), IngressError> {
    match small(t, "type") {
        Value::String(kind) if kind == "function" => {}
        Value::String(other) => {
            return Err(IngressError::unsupported(
                format!("{at}.type"),
                format!("{other:?} tools are not served inside a namespace: only function tools"),
            ));
        }
        _ => return Err(IngressError::missing(format!("{at}.type"))),
    }
    let parts: Vec<(&str, &[u8])> = ["description", "parameters", "strict"]
        .into_iter()
        .filter_map(|key| {
            (t.get(key))
                .filter(|v| v.get() != "null")
                .map(|v| (key, v.get().as_bytes()))
        })
        .collect();
    write_function_tool(out, name, &parts);
    Ok(())
}

/// A `custom` (free-form) tool as a function tool of one string argument, `input`; its
/// description says the input's format (a grammar's definition, when it has one).
fn custom_tool(t: &Value, name: &str) -> Value {
    let mut description = t["description"].as_str().unwrap_or_default().to_string();
    let format = &t["format"];
    let note = match (format["type"].as_str(), format["definition"].as_str()) {
        (Some("grammar"), Some(definition)) => format!(
            "The input is free-form text following this {} grammar:\n{definition}",
            format["syntax"].as_str().unwrap_or("lark")
        ),
        _ => "The input is free-form text.".to_string(),
    };
    if !description.is_empty() {
        description.push_str("\n\n");
    }
    description.push_str(&note);
    json!({"type": "function", "function": {"name": name, "description": description,
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}},
                       "required": ["input"], "additionalProperties": false}}})
}

/// `tools`: function tools, `custom` tools (as functions of one string, `input`), and the
/// functions of `namespace` tools as function tools of
/// names no other tool has (`NAMESPACE__NAME`, with `_2`, `_3`, ... if that is taken); hosted
/// tools (any other type) go to `hosted`. Returns the Chat Completions `tools` array's text,
/// if there are any, and the namespaces' functions by their flat names. Each tool is read on
/// its own and written at once, its schema copied as sent: the list never exists as a parsed
/// tree.
type Tools = (Option<Bytes>, HashMap<String, (String, String)>);

pub(super) fn tools(
    body: &Fields,
    hosted: &mut Vec<Hosted>,
    custom: &mut HashSet<String>,
) -> Result<Tools, IngressError> {
    let mut namespaced = HashMap::new();
    let list = match raw_field(body, "tools") {
        None => return Ok((None, namespaced)),
        Some(text) if text.first() == Some(&b'[') => raw_entries(text, "tools")?,
        Some(text) => {
            return Err(IngressError::invalid(
                "tools",
                format!("must be an array, not {}", kind_of(text)),
            ));
        }
    };
    // The client's own function names: a namespace's flat names keep clear of them.
    let mut taken: HashSet<String> = HashSet::new();
    for t in &list {
        let t = raw_object(t).unwrap_or_default();
        if matches!(small(&t, "type").as_str(), Some("function" | "custom"))
            && let Value::String(name) = small(&t, "name")
        {
            taken.insert(name);
        }
    }
    // Room for the tools as sent and what their translation adds to each (a function
    // tool's key, a custom tool's schema and note), at most a quarter more: no more, since
    // the list is held while the request is served.
    let sent = body.get("tools").map_or(0, |t| t.len());
    let room = sent + (320 * list.len()).min(sent / 4) + 64;
    let mut out = Vec::with_capacity(room);
    out.push(b'[');
    let mut any = false;
    let mut next = |out: &mut Vec<u8>| {
        if std::mem::replace(&mut any, true) {
            out.push(b',');
        }
    };
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let t = raw_object(t).unwrap_or_default();
        match small(&t, "type").as_str() {
            Some("function") => {
                let Value::String(name) = small(&t, "name") else {
                    return Err(IngressError::missing(format!("{at}.name")));
                };
                next(&mut out);
                function_tool(&at, &t, &name, &mut out)?;
            }
            Some("custom") => {
                let Value::String(name) = small(&t, "name") else {
                    return Err(IngressError::missing(format!("{at}.name")));
                };
                let whole: Value = (t.iter())
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            serde_json::from_str(v.get()).unwrap_or(Value::Null),
                        )
                    })
                    .collect::<Map<String, Value>>()
                    .into();
                next(&mut out);
                // A value always serialises.
                let _ = serde_json::to_writer(&mut out, &custom_tool(&whole, &name));
                custom.insert(name);
            }
            Some("namespace") => {
                let Value::String(ns) = small(&t, "name") else {
                    return Err(IngressError::missing(format!("{at}.name")));
                };
                let inner = match t.get("tools").filter(|l| l.get().starts_with('[')) {
                    Some(inner) => raw_entries(inner.get().as_bytes(), &format!("{at}.tools"))?,
                    None => return Err(IngressError::missing(format!("{at}.tools"))),
                };
                for (j, f) in inner.into_iter().enumerate() {
                    let at = format!("{at}.tools[{j}]");
                    let f = raw_object(f).unwrap_or_default();
                    let Value::String(name) = small(&f, "name") else {
                        return Err(IngressError::missing(format!("{at}.name")));
                    };
                    let base = flat_name(&ns, &name);
                    let mut flat = base.clone();
                    let mut k = 1;
                    while taken.contains(&flat) {
                        k += 1;
                        flat = format!("{base}_{k}");
                    }
                    taken.insert(flat.clone());
                    next(&mut out);
                    function_tool(&at, &f, &flat, &mut out)?;
                    namespaced.insert(flat, (ns.clone(), name));
                }
            }
            Some(other) => hosted.push(Hosted {
                param: format!("{at}.type"),
                kind: other.to_string(),
            }),
            None => return Err(IngressError::missing(format!("{at}.type"))),
        }
    }
    out.push(b']');
    Ok((any.then(|| Bytes::from(out)), namespaced))
}

/// `tool_choice` in Chat Completions' shape (a namespace's function, or a custom tool, as the
/// function it is sent upstream as).
pub(super) fn tool_choice(
    choice: &Value,
    flat: &HashMap<(&str, &str), &str>,
) -> Result<Value, IngressError> {
    let function = |t: &Value, at: &str| match (t["type"].as_str(), t["name"].as_str()) {
        (Some("function" | "custom"), Some(name)) => {
            // A namespace's function, by the name its upstream knows it by.
            let name = match t["namespace"].as_str() {
                Some(ns) => flat
                    .get(&(ns, name))
                    .map_or_else(|| flat_name(ns, name), |f| f.to_string()),
                None => name.to_string(),
            };
            Ok(json!({"type": "function", "function": {"name": name}}))
        }
        (Some("function" | "custom"), None) => Err(IngressError::missing(format!("{at}.name"))),
        (Some(other), _) => Err(IngressError::unsupported(
            format!("{at}.type"),
            format!(
                "{} is not served by this gateway: only function tools",
                json!(other)
            ),
        )),
        (None, _) => Err(IngressError::missing(format!("{at}.type"))),
    };
    match choice {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => {
            Ok(choice.clone())
        }
        Value::String(s) => Err(IngressError::invalid(
            "tool_choice",
            format!("must be \"auto\", \"none\", \"required\" or an object, not {s:?}"),
        )),
        Value::Object(_) if choice["type"] == "allowed_tools" => {
            let Some(list) = choice["tools"].as_array() else {
                return Err(IngressError::missing("tool_choice.tools"));
            };
            let tools = (list.iter().enumerate())
                .map(|(i, t)| function(t, &format!("tool_choice.tools[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            let mode = choice.get("mode").cloned().unwrap_or(json!("auto"));
            Ok(json!({"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}))
        }
        Value::Object(_) => function(choice, "tool_choice"),
        v => Err(IngressError::invalid(
            "tool_choice",
            format!("must be a string or an object, not {}", kind_of(v)),
        )),
    }
}

/// `text.format` → `response_format`; `text.verbosity` → `verbosity`.
pub(super) fn text_options(
    obj: &Map<String, Value>,
    chat: &mut Map<String, Value>,
) -> Result<(), IngressError> {
    let Some(text) = field(obj, "text") else {
        return Ok(());
    };
    if let Some(format) = text.get("format").filter(|f| !f.is_null()) {
        match format["type"].as_str() {
            Some("text") => {}
            Some("json_object") => {
                chat.insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let mut schema = Map::new();
                for key in ["name", "schema", "description", "strict"] {
                    if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                        schema.insert(key.into(), v.clone());
                    }
                }
                chat.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": schema}),
                );
            }
            Some(other) => {
                return Err(IngressError::invalid(
                    "text.format.type",
                    format!(
                        "must be \"text\", \"json_object\" or \"json_schema\", not {}",
                        json!(other)
                    ),
                ));
            }
            None => return Err(IngressError::missing("text.format.type")),
        }
    }
    if let Some(v) = text.get("verbosity").filter(|v| !v.is_null()) {
        chat.insert("verbosity".into(), v.clone());
    }
    Ok(())
}
