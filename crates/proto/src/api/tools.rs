//! The parts of a Chat Completions request that the Anthropic Messages and OpenAI Responses
//! APIs write differently: tools and the tool choice, the turns of a tool call (an
//! assistant's `tool_calls`, a `tool` message's result), and images in a user's content.
//! Each function names the message or field it could not translate.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::Dialect;

/// Chat's `tools` (`{"type": "function", "function": {name, description, parameters}}`) in
/// Anthropic's shape (`{name, description, input_schema}`) or Responses' (`{"type":
/// "function", name, description, parameters}`).
pub(super) fn tools(tools: &Value, api: Dialect) -> Result<Value, String> {
    let anthropic = api.takes_anthropic_shape();
    let Some(list) = tools.as_array() else {
        return Err("\"tools\" must be a list".into());
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        if tool["type"] == "custom" {
            out.push(custom_tool(i, tool, anthropic)?);
            continue;
        }
        if tool["type"] != "function" {
            return Err(format!(
                "tools[{i}]: only function tools can be sent to the {api} API"
            ));
        }
        let f = &tool["function"];
        let Some(name) = f["name"].as_str() else {
            return Err(format!("tools[{i}].function.name is missing"));
        };
        let mut t = Map::new();
        if !anthropic {
            t.insert("type".into(), json!("function"));
        }
        t.insert("name".into(), json!(name));
        if let Some(d) = f.get("description").filter(|d| !d.is_null()) {
            t.insert("description".into(), d.clone());
        }
        let schema = match f.get("parameters") {
            Some(p) if !p.is_null() => p.clone(),
            _ => json!({"type": "object", "properties": {}}),
        };
        t.insert(
            if anthropic {
                "input_schema"
            } else {
                "parameters"
            }
            .into(),
            schema,
        );
        if !anthropic && let Some(strict) = f.get("strict").filter(|s| !s.is_null()) {
            t.insert("strict".into(), strict.clone());
        }
        out.push(Value::Object(t));
    }
    Ok(Value::Array(out))
}

/// A Chat Completions custom tool (`{"type": "custom", "custom": {name, description,
/// format}}`, free-text input) in the target's shape: Responses' own `custom` tool (its
/// grammar format `{"type": "grammar", definition, syntax}`); for Anthropic, which has none,
/// a tool of one string property, `input`, whose description says the input's format (a
/// grammar's definition, when it has one). Its calls come back as custom calls
/// ([`StreamConfig::custom_tools`](crate::StreamConfig::custom_tools)).
fn custom_tool(i: usize, tool: &Value, anthropic: bool) -> Result<Value, String> {
    let custom = &tool["custom"];
    let Some(name) = custom["name"].as_str() else {
        return Err(format!("tools[{i}].custom.name is missing"));
    };
    let description = custom.get("description").filter(|d| !d.is_null());
    let format = custom.get("format").filter(|f| !f.is_null());
    // A grammar: Chat's `{"type": "grammar", "grammar": {definition, syntax}}`.
    let grammar = format
        .filter(|f| f["type"] == "grammar")
        .map(|f| f.get("grammar").unwrap_or(f));
    if !anthropic {
        let mut t = Map::new();
        t.insert("type".into(), json!("custom"));
        t.insert("name".into(), json!(name));
        if let Some(d) = description {
            t.insert("description".into(), d.clone());
        }
        if let Some(format) = format {
            let format = match grammar {
                Some(g) => json!({"type": "grammar", "definition": g["definition"],
                    "syntax": g.get("syntax").cloned().unwrap_or(json!("lark"))}),
                None => format.clone(),
            };
            t.insert("format".into(), format);
        }
        return Ok(Value::Object(t));
    }
    let mut text = description
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    match grammar.and_then(|g| g["definition"].as_str()) {
        Some(definition) => text.push_str(&format!(
            "The input is free-form text following this {} grammar:\n{definition}",
            grammar.and_then(|g| g["syntax"].as_str()).unwrap_or("lark")
        )),
        None => text.push_str("The input is free-form text."),
    }
    Ok(
        json!({"name": name, "description": text, "input_schema": {"type": "object",
        "properties": {"input": {"type": "string"}}, "required": ["input"],
        "additionalProperties": false}}),
    )
}

/// [`tools`] of a list given as its JSON text, written as JSON text: each tool is read on its
/// own and its schema (`parameters`), `description` and `strict` copied as sent, so that the
/// list never exists as a parsed tree. The same tools, keys in the same order (what the
/// upstream APIs' writers write with [`write_tools_text`]; the tests read it whole).
#[cfg(test)]
pub(crate) fn tools_text(tools: &[u8], api: Dialect) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(tools.len());
    write_tools_text(tools, api, &mut out)?;
    Ok(out)
}

/// `tools_text` written at the end of `out` (each schema copied once, straight from the
/// client's text); on an error, `out` holds part of the list.
pub(crate) fn write_tools_text(
    tools: &[u8],
    api: Dialect,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let anthropic = api.takes_anthropic_shape();
    use std::borrow::Cow;
    use std::collections::BTreeMap;
    type Fields<'a> = BTreeMap<String, &'a RawValue>;
    fn object<'a>(raw: Option<&&'a RawValue>) -> Fields<'a> {
        (raw.filter(|r| r.get().starts_with('{')))
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or_default()
    }
    let small = |fields: &Fields<'_>, key: &str| -> Value {
        (fields.get(key))
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or(Value::Null)
    };
    fn not_null<'a>(fields: &Fields<'a>, key: &str) -> Option<Cow<'a, [u8]>> {
        (fields.get(key))
            .filter(|r| r.get() != "null")
            .map(|r| Cow::Borrowed(r.get().as_bytes()))
    }
    let list: Vec<&RawValue> =
        serde_json::from_slice(tools).map_err(|_| "\"tools\" must be a list".to_string())?;
    out.push(b'[');
    for (i, raw) in list.iter().enumerate() {
        let tool = object(Some(raw));
        if small(&tool, "type") == "custom" {
            // Small (a name, a description, a format): read whole.
            let whole: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
            if i > 0 {
                out.push(b',');
            }
            let custom = custom_tool(i, &whole, anthropic)?;
            // A value always serialises.
            let _ = serde_json::to_writer(&mut *out, &custom);
            continue;
        }
        if small(&tool, "type") != "function" {
            return Err(format!(
                "tools[{i}]: only function tools can be sent to the {api} API"
            ));
        }
        let f = object(tool.get("function"));
        let Value::String(name) = small(&f, "name") else {
            return Err(format!("tools[{i}].function.name is missing"));
        };
        let mut t: BTreeMap<&str, Cow<'_, [u8]>> = BTreeMap::new();
        if !anthropic {
            t.insert("type", Cow::Borrowed(b"\"function\""));
        }
        t.insert("name", Cow::Owned(json!(name).to_string().into_bytes()));
        if let Some(d) = not_null(&f, "description") {
            t.insert("description", d);
        }
        let schema = not_null(&f, "parameters").unwrap_or_else(|| {
            Cow::Owned(
                json!({"type": "object", "properties": {}})
                    .to_string()
                    .into_bytes(),
            )
        });
        t.insert(
            if anthropic {
                "input_schema"
            } else {
                "parameters"
            },
            schema,
        );
        if !anthropic && let Some(strict) = not_null(&f, "strict") {
            t.insert("strict", strict);
        }
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        for (j, (k, v)) in t.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            out.extend_from_slice(format!("{k:?}:").as_bytes());
            out.extend_from_slice(v);
        }
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}

/// Chat's `tool_choice` (`"auto"`, `"none"`, `"required"`, or a named function) and
/// `parallel_tool_calls` in Anthropic's shape (`{"type": "auto" | "none" | "any" | "tool",
/// "name", "disable_parallel_tool_use"}`).
pub(super) fn anthropic_tool_choice(
    choice: Option<&Value>,
    parallel: Option<&Value>,
) -> Result<Option<Value>, String> {
    let mut out = match choice {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "none" => json!({"type": "none"}),
            "required" => json!({"type": "any"}),
            other => {
                return Err(format!(
                    "tool_choice {} is not auto, none or required",
                    json!(other)
                ));
            }
        }),
        // A named function, or a custom tool (sent as a tool of one string).
        Some(named) => {
            match (named["function"]["name"].as_str()).or(named["custom"]["name"].as_str()) {
                Some(name) => Some(json!({"type": "tool", "name": name})),
                None => return Err("tool_choice names no function".into()),
            }
        }
    };
    if parallel == Some(&Value::Bool(false)) {
        let choice = out.get_or_insert_with(|| json!({"type": "auto"}));
        if choice["type"] != "none" {
            choice["disable_parallel_tool_use"] = json!(true);
        }
    }
    Ok(out)
}

/// Chat's `tool_choice` in Responses' shape (a named function is `{"type": "function",
/// "name"}`).
pub(super) fn responses_tool_choice(choice: &Value) -> Result<Value, String> {
    match choice {
        Value::String(_) | Value::Null => Ok(choice.clone()),
        named if named["type"] == "custom" => match named["custom"]["name"].as_str() {
            Some(name) => Ok(json!({"type": "custom", "name": name})),
            None => Err("tool_choice names no custom tool".into()),
        },
        named => match named["function"]["name"].as_str() {
            Some(name) => Ok(json!({"type": "function", "name": name})),
            None => Err("tool_choice names no function".into()),
        },
    }
}

/// The object an upstream's tool input must be, for a call whose arguments are not JSON (a
/// sample's broken call that a client sends back in its history): the text as it was, under
/// `raw_arguments`, so that the turn is passed on rather than refused.
pub(super) fn raw_input(text: &str) -> String {
    json!({"raw_arguments": text}).to_string()
}

/// A tool call's `arguments` (a JSON string) as JSON text, checked, without its
/// insignificant whitespace and otherwise as written: its numbers digit for digit (a tree
/// would make a 30-digit integer a float); `at` names the call. Arguments that are not JSON
/// are passed on as [`raw_input`].
fn arguments(call: &Value, at: &str) -> Result<Box<RawValue>, String> {
    let text = match &call["function"]["arguments"] {
        Value::String(text) if text.trim().is_empty() => "{}".to_string(),
        Value::String(text) => match serde_json::from_str::<&RawValue>(text) {
            Ok(raw) => choicewise_partial_json::compact_json(raw.get()),
            Err(_) => raw_input(text),
        },
        Value::Null => "{}".to_string(),
        other => other.to_string(),
    };
    RawValue::from_string(text).map_err(|e| format!("{at}.function.arguments is not JSON: {e}"))
}

/// A custom tool's call (`{"type": "custom", "custom": {name, input}}`): its name and its
/// input; `None` for a function's.
pub(super) fn custom_call(call: &Value) -> Option<(&str, &str)> {
    let custom = call.get("custom").filter(|_| call["type"] == "custom")?;
    Some((
        custom["name"].as_str().unwrap_or_default(),
        custom["input"].as_str().unwrap_or_default(),
    ))
}

/// A custom tool's input as the `input` of the Anthropic tool it is sent as:
/// `{"input": TEXT}`.
pub(super) fn custom_input(text: &str) -> Box<RawValue> {
    // A value always serialises.
    serde_json::value::to_raw_value(&json!({ "input": text }))
        .unwrap_or_else(|_| RawValue::from_string("{}".into()).unwrap_or_default())
}

/// An Anthropic `tool_use` block whose `input` is written as it came; its fields in the
/// order a tree's are serialised (sorted), so that it writes as the tree would.
#[derive(Serialize)]
struct ToolUse<'a> {
    id: &'a str,
    input: Box<RawValue>,
    name: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// A block of an assistant turn: a tree, or a [`ToolUse`].
#[derive(Serialize)]
#[serde(untagged)]
enum Block<'a> {
    Tree(Value),
    ToolUse(ToolUse<'a>),
}

/// An assistant turn of [`Block`]s (fields sorted as a tree's).
#[derive(Serialize)]
struct Turn<'a> {
    content: Vec<Block<'a>>,
    role: &'static str,
}

/// The error of message `at` whose `role` is none the translation knows, in words: `unknown
/// role "function"`, `no role`, `the role must be a string, not 3`.
fn unknown_role(at: &str, role: &Value) -> String {
    match role {
        Value::String(_) => format!("{at}: unknown role {role}"),
        Value::Null => format!("{at}: no role"),
        other => format!("{at}: the role must be a string, not {other}"),
    }
}

/// A message's content as text: a string, or its text parts joined.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => (parts.iter())
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// A `tool` message's content (message `at`) as a tool result's: its text (a string, or
/// its text parts joined) when it has only text; with images, its parts in the target's
/// shape (Anthropic's `tool_result` text and image blocks, or Responses'
/// `function_call_output` `input_text` and `input_image` parts), never an image dropped. A
/// part neither text nor image is refused, naming where.
fn tool_result_content(content: &Value, at: &str, api: Dialect) -> Result<Value, String> {
    let Value::Array(parts) = content else {
        return Ok(Value::String(text_of(content)));
    };
    let mut any_image = false;
    for (k, part) in parts.iter().enumerate() {
        match part["type"].as_str() {
            Some("text") => {}
            Some("image_url") => any_image = true,
            Some(other) => {
                return Err(format!(
                    "{at}.content[{k}]: a tool result's {} part cannot be sent to the {api} API (text and images can)",
                    json!(other),
                ));
            }
            None => return Err(format!("{at}.content[{k}]: a part without its type")),
        }
    }
    if !any_image {
        return Ok(Value::String(text_of(content)));
    }
    match api.takes_anthropic_shape() {
        true => anthropic_content(content, at),
        false => responses_content(content, at),
    }
}

/// An `image_url` part's image in Anthropic's shape: a data URL's bytes, or the URL.
pub(super) fn anthropic_image(url: &str, at: &str) -> Result<Value, String> {
    if let Some(data) = url.strip_prefix("data:") {
        let Some((media, b64)) = data.split_once(";base64,") else {
            return Err(format!("{at}: a data URL must be base64"));
        };
        return Ok(
            json!({"type": "image", "source": {"type": "base64", "media_type": media, "data": b64}}),
        );
    }
    Ok(json!({"type": "image", "source": {"type": "url", "url": url}}))
}

/// A user's content in Anthropic's shape: a string as is; text parts as they are (the same
/// shape), images translated.
fn anthropic_content(content: &Value, at: &str) -> Result<Value, String> {
    let Value::Array(parts) = content else {
        return Ok(content.clone());
    };
    let mut out = Vec::with_capacity(parts.len());
    for (k, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{k}]");
        match part["type"].as_str() {
            Some("image_url") => match part["image_url"]["url"].as_str() {
                Some(url) => out.push(anthropic_image(url, &at)?),
                None => return Err(format!("{at}.image_url.url is missing")),
            },
            _ => out.push(part.clone()),
        }
    }
    Ok(Value::Array(out))
}

/// Where translated messages go, in order: [`Vec<Value>`] for a request given as a tree, or
/// [`super::messages::ListText`], which writes each as JSON text as it comes.
pub(super) trait Sink {
    /// A whole message (Anthropic) or input item (Responses).
    fn item(&mut self, item: Value);
    /// A whole message or item given as its JSON text (a tool call's input in it as the
    /// client wrote it): written as it is ([`Vec<Value>`] parses it, its numbers then
    /// rounded as any tree's).
    fn raw(&mut self, item: Box<RawValue>);
    /// An Anthropic user turn whose content is `blocks`, all `tool_result` blocks (or none),
    /// which the tool results that follow join ([`join`](Self::join)).
    fn results(&mut self, blocks: Vec<Value>);
    /// A `tool_result` block joining the last turn, opened by [`results`](Self::results).
    fn join(&mut self, block: Value);
}

impl Sink for Vec<Value> {
    fn item(&mut self, item: Value) {
        self.push(item);
    }

    fn raw(&mut self, item: Box<RawValue>) {
        self.push(serde_json::from_str(item.get()).unwrap_or(Value::Null));
    }

    fn results(&mut self, blocks: Vec<Value>) {
        self.push(json!({"role": "user", "content": blocks}));
    }

    fn join(&mut self, block: Value) {
        match self.last_mut().and_then(|l| l["content"].as_array_mut()) {
            Some(blocks) => blocks.push(block),
            None => self.results(vec![block]),
        }
    }
}

/// Chat's messages (the first system one already taken out) in Anthropic's shape, one at a
/// time: an assistant's `tool_calls` become `tool_use` blocks after its text, `tool`
/// messages become `tool_result` blocks of one user turn (consecutive ones together, and
/// joining a user turn made of tool results only), images become image blocks. A later
/// system or developer message stays a `system` turn at its place.
#[derive(Debug)]
pub(super) struct AnthropicMessages {
    /// The API its messages go to (its errors name it).
    api: Dialect,
    /// The last turn written is a user turn of `tool_result` blocks only: a tool result joins it.
    results_open: bool,
}

impl AnthropicMessages {
    /// The translation of a list of messages for `api`, which takes Anthropic's shape.
    pub(super) fn new(api: Dialect) -> AnthropicMessages {
        AnthropicMessages {
            api,
            results_open: false,
        }
    }

    /// A message was written without [`message`](Self::message) (a large one's user or
    /// system turn, `super::messages::large`): it is no turn of tool results.
    pub(super) fn wrote_turn(&mut self) {
        self.results_open = false;
    }

    /// Translates message `m`, the client's `i`th, into `out`.
    pub(super) fn message(
        &mut self,
        i: usize,
        m: Value,
        out: &mut impl Sink,
    ) -> Result<(), String> {
        let at = format!("messages[{i}]");
        let mut results_open = false;
        match m["role"].as_str() {
            Some("tool") => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"].as_str().unwrap_or_default(),
                    "content": tool_result_content(&m["content"], &at, self.api)?,
                });
                match self.results_open {
                    true => out.join(block),
                    false => out.results(vec![block]),
                }
                results_open = true;
            }
            Some("assistant") => {
                let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                if calls.is_empty() {
                    let mut m = m;
                    if m["content"].is_null() {
                        m["content"] = json!("");
                    }
                    if let Some(o) = m.as_object_mut() {
                        o.remove("tool_calls");
                        o.remove("refusal");
                    }
                    out.item(m);
                } else {
                    let mut blocks = Vec::new();
                    let text = text_of(&m["content"]);
                    if !text.is_empty() {
                        blocks.push(Block::Tree(json!({"type": "text", "text": text})));
                    }
                    for (k, call) in calls.iter().enumerate() {
                        let call_at = format!("{at}.tool_calls[{k}]");
                        let (input, name) = match custom_call(call) {
                            // A custom tool's call, as the tool of one string it is sent as.
                            Some((name, input)) => (custom_input(input), name),
                            None => (
                                arguments(call, &call_at)?,
                                call["function"]["name"].as_str().unwrap_or_default(),
                            ),
                        };
                        blocks.push(Block::ToolUse(ToolUse {
                            id: call["id"].as_str().unwrap_or_default(),
                            input,
                            name,
                            kind: "tool_use",
                        }));
                    }
                    let turn = Turn {
                        content: blocks,
                        role: "assistant",
                    };
                    // The turn always serialises: its input is JSON already.
                    let text =
                        serde_json::value::to_raw_value(&turn).map_err(|e| format!("{at}: {e}"))?;
                    out.raw(text);
                }
            }
            Some("user") => match anthropic_content(&m["content"], &at)? {
                Value::Array(blocks) if blocks.iter().all(|b| b["type"] == "tool_result") => {
                    out.results(blocks);
                    results_open = true;
                }
                content => out.item(json!({"role": "user", "content": content})),
            },
            // A system turn inside the conversation, as Anthropic's API takes it (and
            // Claude Code sends it).
            Some("system" | "developer") => out.item(json!({
                "role": "system",
                "content": anthropic_content(&m["content"], &at)?,
            })),
            _ => return Err(unknown_role(&at, &m["role"])),
        }
        self.results_open = results_open;
        Ok(())
    }
}

/// [`AnthropicMessages`] of a whole list, for the tests.
#[cfg(test)]
fn anthropic_messages(messages: Vec<Value>) -> Result<Vec<Value>, String> {
    let (mut out, mut turns) = (Vec::new(), AnthropicMessages::new(Dialect::Anthropic));
    for (i, m) in messages.into_iter().enumerate() {
        turns.message(i, m, &mut out)?;
    }
    Ok(out)
}

/// A user's content in Responses' shape: a string as is; text parts as `input_text`,
/// images as `input_image`.
fn responses_content(content: &Value, at: &str) -> Result<Value, String> {
    let Value::Array(parts) = content else {
        return Ok(content.clone());
    };
    let mut out = Vec::with_capacity(parts.len());
    for (k, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{k}]");
        out.push(match part["type"].as_str() {
            Some("text") => json!({"type": "input_text", "text": part["text"]}),
            Some("image_url") => {
                let Some(url) = part["image_url"]["url"].as_str() else {
                    return Err(format!("{at}.image_url.url is missing"));
                };
                let mut image = json!({"type": "input_image", "image_url": url});
                if let Some(detail) = part["image_url"].get("detail") {
                    image["detail"] = detail.clone();
                }
                image
            }
            _ => part.clone(),
        });
    }
    Ok(Value::Array(out))
}

/// Chat's message `m` (the client's `i`th) as Responses `input`
/// items, into `out`: an assistant's `tool_calls` become `function_call` items (a custom
/// tool's, `custom_tool_call` items) after its text, a `tool` message a
/// `function_call_output` (the result of a custom tool's call, `custom_tool_call_output`),
/// images `input_image` parts. `custom_calls`: the ids of the custom tools' calls so far.
pub(super) fn responses_items(
    i: usize,
    m: Value,
    out: &mut impl Sink,
    custom_calls: &mut std::collections::HashSet<String>,
) -> Result<(), String> {
    let at = format!("messages[{i}]");
    match m["role"].as_str() {
        Some("tool") => {
            let call_id = m["tool_call_id"].as_str().unwrap_or_default();
            let kind = match custom_calls.contains(call_id) {
                true => "custom_tool_call_output",
                false => "function_call_output",
            };
            out.item(json!({
                "type": kind,
                "call_id": call_id,
                "output": tool_result_content(&m["content"], &at, Dialect::Responses)?,
            }))
        }
        Some("assistant") => {
            let text = text_of(&m["content"]);
            if !text.is_empty() {
                out.item(json!({"role": "assistant", "content": text}));
            }
            for (k, call) in (m["tool_calls"].as_array().into_iter().flatten()).enumerate() {
                let call_at = format!("{at}.tool_calls[{k}]");
                if let Some((name, input)) = custom_call(call) {
                    let id = call["id"].as_str().unwrap_or_default();
                    custom_calls.insert(id.to_string());
                    out.item(
                        json!({"type": "custom_tool_call", "call_id": id, "name": name,
                        "input": input}),
                    );
                    continue;
                }
                let args = match &call["function"]["arguments"] {
                    Value::String(s) => s.clone(),
                    _ => arguments(call, &call_at)?.get().to_string(),
                };
                out.item(json!({
                    "type": "function_call",
                    "call_id": call["id"].as_str().unwrap_or_default(),
                    "name": call["function"]["name"].as_str().unwrap_or_default(),
                    "arguments": args,
                }));
            }
        }
        Some(role @ ("user" | "system" | "developer")) => out.item(json!({
            "role": role,
            "content": responses_content(&m["content"], &at)?,
        })),
        _ => return Err(unknown_role(&at, &m["role"])),
    }
    Ok(())
}

/// [`responses_items`] of a whole list, for the tests.
#[cfg(test)]
fn responses_input(messages: Vec<Value>) -> Result<Vec<Value>, String> {
    let (mut out, mut custom) = (Vec::new(), std::collections::HashSet::new());
    for (i, m) in messages.into_iter().enumerate() {
        responses_items(i, m, &mut out, &mut custom)?;
    }
    Ok(out)
}

/// Chat messages whose third is a tool result with an audio part, which no API's tool
/// result takes: for the tests of its refusal.
#[cfg(test)]
pub(crate) fn a_tool_result_of_audio() -> Value {
    json!([
        {"role": "user", "content": "hear this"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "listen", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1",
         "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_ANTHROPIC_MAX_TOKENS, Dialect};

    #[test]
    fn reasoning_effort_becomes_each_apis_own_field() {
        let chat = |extra: Value| {
            let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body
        };
        let responses = Dialect::Responses
            .request_from_chat(&chat(json!({"reasoning_effort": "high"})))
            .unwrap();
        assert_eq!(responses["reasoning"], json!({"effort": "high"}));
        assert!(responses.get("reasoning_effort").is_none());
        // A Responses client's own object (summary and all) wins over the approximation.
        let own = json!({"effort": "low", "summary": "auto"});
        let responses = Dialect::Responses
            .request_from_chat(&chat(json!({"reasoning_effort": "low", "reasoning": own})))
            .unwrap();
        assert_eq!(responses["reasoning"], own);

        let anthropic = Dialect::Anthropic
            .request_from_chat(&chat(json!({"reasoning_effort": "medium"})))
            .unwrap();
        assert_eq!(
            anthropic["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(anthropic["max_tokens"], 2048 + DEFAULT_ANTHROPIC_MAX_TOKENS);
        assert!(anthropic.get("reasoning_effort").is_none());
        let anthropic = Dialect::Anthropic
            .request_from_chat(&chat(
                json!({"reasoning_effort": "low", "max_tokens": 3000}),
            ))
            .unwrap();
        assert_eq!(anthropic["thinking"]["budget_tokens"], 1024);
        assert_eq!(anthropic["max_tokens"], 3000);
        let none = Dialect::Anthropic
            .request_from_chat(&chat(json!({"reasoning_effort": "none"})))
            .unwrap();
        assert!(none.get("thinking").is_none());
        assert_eq!(none["max_tokens"], DEFAULT_ANTHROPIC_MAX_TOKENS);
        // An Anthropic client's own budget wins.
        let own = json!({"type": "enabled", "budget_tokens": 3000});
        let anthropic = Dialect::Anthropic
            .request_from_chat(&chat(
                json!({"reasoning_effort": "medium", "thinking": own, "max_tokens": 5000}),
            ))
            .unwrap();
        assert_eq!(anthropic["thinking"], own);

        let short = Dialect::Anthropic
            .request_from_chat(&chat(
                json!({"reasoning_effort": "high", "max_tokens": 500}),
            ))
            .unwrap_err();
        assert_eq!(short.param(), Some("max_tokens"));
        assert!(
            short
                .message()
                .contains("needs max_tokens above 4096, not 500"),
            "{short}"
        );
        let unknown = Dialect::Anthropic
            .request_from_chat(&chat(json!({"reasoning_effort": "extreme"})))
            .unwrap_err();
        assert_eq!(unknown.param(), Some("reasoning_effort"));
        assert!(unknown.message().contains("\"extreme\""), "{unknown}");
    }

    /// A tool result's part that is neither text nor an image is refused in one sentence,
    /// the same from the tree (a request) and from the text (its messages alone), for each
    /// API that has tool results of its own.
    #[test]
    fn a_tool_results_unknown_part_is_refused_alike_from_the_tree_and_the_text() {
        let messages = a_tool_result_of_audio();
        for api in [Dialect::Anthropic, Dialect::Responses] {
            let want = format!(
                "messages[2].content[0]: a tool result's \"input_audio\" part cannot be sent to \
                 the {api} API (text and images can)"
            );
            let body = json!({"messages": messages});
            let tree = api.request_from_chat(&body).unwrap_err();
            assert_eq!(tree.message(), want, "{api}");
            let text = api
                .messages_from_chat_json(messages.to_string().as_bytes())
                .unwrap_err();
            assert_eq!(text.to_string(), want, "{api}");
        }
    }

    #[test]
    fn consecutive_tool_results_are_one_user_turn() {
        let messages = vec![
            json!({"role": "user", "content": "two cities"}),
            json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{\"c\":1}"}},
                {"id": "b", "type": "function", "function": {"name": "w", "arguments": ""}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "1"}),
            json!({"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "2"}]}),
            json!({"role": "user", "content": "thanks"}),
        ];
        let out = anthropic_messages(messages).unwrap();
        assert_eq!(out.len(), 4);
        assert_eq!(
            out[1]["content"][0],
            json!({"type": "text", "text": "Looking."})
        );
        assert_eq!(out[1]["content"][2]["input"], json!({}));
        assert_eq!(out[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(out[2]["content"][1]["content"], "2");
        assert_eq!(out[3]["content"], "thanks");
    }

    #[test]
    fn images_and_bad_arguments() {
        let image = json!({"role": "user", "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}]});
        let a = anthropic_messages(vec![image.clone()]).unwrap();
        assert_eq!(
            a[0]["content"][1]["source"],
            json!({"type": "base64", "media_type": "image/png", "data": "iVBO"})
        );
        assert_eq!(
            a[0]["content"][2]["source"]["url"],
            "https://example.com/a.png"
        );
        let r = responses_input(vec![image]).unwrap();
        assert_eq!(r[0]["content"][0]["type"], "input_text");
        assert_eq!(
            r[0]["content"][2],
            json!({"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"})
        );
        // A broken call sent back in the history is passed on, its text kept.
        let bad = json!({"role": "assistant", "tool_calls": [
            {"id": "a", "function": {"name": "w", "arguments": "{oops"}}]});
        let a =
            anthropic_messages(vec![json!({"role": "user", "content": "x"}), bad.clone()]).unwrap();
        assert_eq!(
            a[1]["content"][0]["input"],
            json!({"raw_arguments": "{oops"})
        );
        let r = responses_input(vec![json!({"role": "user", "content": "x"}), bad]).unwrap();
        assert_eq!(r[1]["arguments"], "{oops");
        let late = anthropic_messages(vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "developer", "content": [{"type": "text", "text": "late"}]}),
        ])
        .unwrap();
        assert_eq!(
            late[1],
            json!({"role": "system", "content": [{"type": "text", "text": "late"}]})
        );
    }

    #[test]
    fn tool_choices() {
        let named = json!({"type": "function", "function": {"name": "w"}});
        assert_eq!(
            anthropic_tool_choice(Some(&json!("required")), None).unwrap(),
            Some(json!({"type": "any"}))
        );
        assert_eq!(
            anthropic_tool_choice(Some(&named), Some(&json!(false))).unwrap(),
            Some(json!({"type": "tool", "name": "w", "disable_parallel_tool_use": true}))
        );
        assert_eq!(
            anthropic_tool_choice(None, Some(&json!(false))).unwrap(),
            Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
        );
        assert_eq!(anthropic_tool_choice(None, None).unwrap(), None);
        assert_eq!(
            responses_tool_choice(&named).unwrap(),
            json!({"type": "function", "name": "w"})
        );
        let request = json!({"model": "m", "messages": [], "parallel_tool_calls": false,
            "tools": [{"type": "function", "function": {"name": "w", "strict": true}}]});
        let r = Dialect::Responses.request_from_chat(&request).unwrap();
        assert_eq!(r["parallel_tool_calls"], false, "Responses has it too");
        assert_eq!(r["tools"][0]["parameters"]["type"], "object");
        assert_eq!(r["tools"][0]["strict"], true);
        let a = Dialect::Anthropic.request_from_chat(&request).unwrap();
        assert!(a.get("parallel_tool_calls").is_none());
        // OpenAI's own fields are left out for Anthropic, kept for Responses.
        let mut openai = request.clone();
        openai["prompt_cache_key"] = json!("k");
        openai["user"] = json!("u");
        openai["service_tier"] = json!("flex");
        let a = Dialect::Anthropic.request_from_chat(&openai).unwrap();
        for key in ["prompt_cache_key", "user", "service_tier"] {
            assert!(a.get(key).is_none(), "{key}");
        }
        let r = Dialect::Responses.request_from_chat(&openai).unwrap();
        assert_eq!(r["prompt_cache_key"], "k");
        assert!(tools(&json!([{"type": "web_search"}]), Dialect::Anthropic).is_err());
        // A custom tool: Responses' own; Anthropic's tool of one string, `input`.
        let custom = json!([{"type": "custom", "custom": {"name": "apply_patch",
            "format": {"type": "grammar", "grammar": {"definition": "start: /.+/", "syntax": "regex"}}}}]);
        assert_eq!(
            tools(&custom, Dialect::Responses).unwrap()[0],
            json!({"type": "custom", "name": "apply_patch",
                "format": {"type": "grammar", "definition": "start: /.+/", "syntax": "regex"}})
        );
        let a = &tools(&custom, Dialect::Anthropic).unwrap()[0];
        assert_eq!(a["input_schema"]["required"], json!(["input"]));
        assert_eq!(
            a["description"],
            "The input is free-form text following this regex grammar:\nstart: /.+/"
        );
        let choice = json!({"type": "custom", "custom": {"name": "apply_patch"}});
        assert_eq!(
            anthropic_tool_choice(Some(&choice), None).unwrap(),
            Some(json!({"type": "tool", "name": "apply_patch"}))
        );
        assert_eq!(
            responses_tool_choice(&choice).unwrap(),
            json!({"type": "custom", "name": "apply_patch"})
        );
        // Written from their text, the tools are the same, errors included.
        let list = json!([
            {"type": "function", "function": {"name": "w", "strict": true}},
            {"type": "function", "function": {"name": "é\"", "description": "d", "strict": null,
                "parameters": {"type": "object", "properties": {"x": {"enum": [1, "a"]}}}}},
            {"type": "function", "function": {"name": "n", "description": null, "parameters": null}},
            {"type": "custom", "custom": {"name": "apply_patch", "description": "Edit.",
                "format": {"type": "grammar", "grammar": {"definition": "start: /.+/", "syntax": "lark"}}}},
            {"type": "custom", "custom": {"name": "free", "format": {"type": "text"}}}]);
        for api in [Dialect::Anthropic, Dialect::Responses] {
            let text = tools_text(list.to_string().as_bytes(), api).unwrap();
            assert_eq!(
                String::from_utf8(text).unwrap(),
                tools(&list, api).unwrap().to_string()
            );
            for bad in [
                json!([{"type": "custom", "custom": {}}]),
                json!([{"type": "web_search"}]),
                json!([{"type": "function", "function": {}}]),
                json!([{"type": "function"}]),
                json!({}),
                json!([3]),
            ] {
                assert_eq!(
                    tools_text(bad.to_string().as_bytes(), api).unwrap_err(),
                    tools(&bad, api).unwrap_err(),
                    "{bad}"
                );
            }
        }
    }
}
