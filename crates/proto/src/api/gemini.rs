//! A request in Chat Completions' shape written as a Gemini `generateContent` request
//! ([`Dialect::Gemini`](super::Dialect::Gemini)): `contents` of `user` and `model` turns,
//! `systemInstruction`, tool calls and results as `functionCall` / `functionResponse`
//! parts, `tools.functionDeclarations`, `toolConfig`, and the sampling settings in
//! `generationConfig` (`n` is its `candidateCount`).

use serde_json::{Map, Value, json};

use super::tools::Sink;
use super::{Dialect, RequestError};

mod text;

pub(crate) use text::{write_contents, write_tools_text};

/// The Chat Completions fields a Gemini request has no place for and that change nothing
/// of the answer's content: left out.
const LEFT_OUT: &[&str] = &[
    "model",
    "stream",
    "stream_options",
    "user",
    "parallel_tool_calls",
    "store",
    "metadata",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
];

/// `request` (a Chat Completions request's fields) as a Gemini request body; an error names
/// the field at fault.
pub(crate) fn request(body: &Map<String, Value>) -> Result<Value, RequestError> {
    let mut out = Map::new();
    let mut config = Map::new();
    for (key, value) in body.iter().filter(|(_, v)| !v.is_null()) {
        generation_field(key, value, &mut config).map_err(|e| RequestError::at(key, e))?;
    }
    if let Some(max) = body
        .get("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| body.get("max_tokens").filter(|v| !v.is_null()))
    {
        if !max.is_u64() {
            return Err(RequestError::at(
                "max_tokens",
                format!(
                    "max_tokens (Gemini's generationConfig.maxOutputTokens) must be a whole number, not {max}"
                ),
            ));
        }
        config.insert("maxOutputTokens".into(), max.clone());
    }
    let messages = match body.get("messages") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(list)) => list,
        Some(other) => {
            let found = super::messages::json_kind(other);
            return Err(super::MessagesError::NotAnArray { found }.into());
        }
    };
    let (contents, system) = contents(messages).map_err(|e| RequestError::at("messages", e))?;
    out.insert("contents".into(), Value::Array(contents));
    if let Some(system) = system {
        out.insert("systemInstruction".into(), system);
    }
    if let Some(tools) = body.get("tools").filter(|t| !t.is_null()) {
        let tools = declarations(tools).map_err(|e| RequestError::at("tools", e))?;
        out.insert("tools".into(), tools);
    }
    if let Some(choice) = body.get("tool_choice").filter(|c| !c.is_null()) {
        let choice = tool_config(choice).map_err(|e| RequestError::at("tool_choice", e))?;
        out.insert("toolConfig".into(), choice);
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(out))
}

/// One field of a Chat Completions request (`key`, not null) into Gemini's
/// `generationConfig` (`config`), left out, or refused; the fields written elsewhere
/// (`messages`, `tools`, `tool_choice`, the limit) are passed over.
fn generation_field(
    key: &str,
    value: &Value,
    config: &mut Map<String, Value>,
) -> Result<(), String> {
    {
        let at = |name: &str| format!("{key} (Gemini's generationConfig.{name})");
        match key {
            "messages" | "tools" | "tool_choice" | "max_tokens" | "max_completion_tokens" => {}
            "temperature" | "top_p" | "top_k" | "seed" | "presence_penalty"
            | "frequency_penalty" => {
                // `top_k` is no OpenAI field, but servers of the Chat API take it (vLLM,
                // llama.cpp) and Gemini CLI always sends Gemini's `topK`, which the gateway
                // reads into it.
                let name = match key {
                    "temperature" => "temperature",
                    "top_p" => "topP",
                    "top_k" => "topK",
                    "seed" => "seed",
                    "presence_penalty" => "presencePenalty",
                    _ => "frequencyPenalty",
                };
                if !value.is_number() {
                    return Err(format!("{} must be a number", at(name)));
                }
                config.insert(name.into(), value.clone());
            }
            "n" => match value.as_u64() {
                Some(n) if n >= 1 => {
                    config.insert("candidateCount".into(), json!(n));
                }
                _ => {
                    return Err(format!(
                        "{} must be a whole number from 1",
                        at("candidateCount")
                    ));
                }
            },
            "stop" => {
                let list = match value {
                    Value::String(one) => vec![Value::String(one.clone())],
                    Value::Array(many) if many.iter().all(Value::is_string) => many.clone(),
                    _ => {
                        return Err(format!(
                            "{} must be a string or strings",
                            at("stopSequences")
                        ));
                    }
                };
                config.insert("stopSequences".into(), Value::Array(list));
            }
            "reasoning_effort" => {
                let effort = value.as_str().unwrap_or_default();
                let budget = Dialect::thinking_budget(effort).ok_or_else(|| {
                    format!(
                        "reasoning_effort {value} has no thinking budget in the gemini API: use \
                         none, minimal, low, medium or high"
                    )
                })?;
                config.insert(
                    "thinkingConfig".into(),
                    match budget {
                        None => json!({"thinkingBudget": 0}),
                        Some(b) => json!({"thinkingBudget": b, "includeThoughts": true}),
                    },
                );
            }
            "response_format" => match value["type"].as_str() {
                Some("text") => {}
                Some("json_object") => {
                    config.insert("responseMimeType".into(), json!("application/json"));
                }
                Some("json_schema") => {
                    config.insert("responseMimeType".into(), json!("application/json"));
                    if let Some(schema) = value["json_schema"].get("schema") {
                        config.insert("responseJsonSchema".into(), schema.clone());
                    }
                }
                _ => {
                    return Err(format!(
                        "response_format {value} has no equivalent in the gemini API (text, \
                         json_object or json_schema)"
                    ));
                }
            },
            k if LEFT_OUT.contains(&k) => {}
            other => {
                return Err(format!(
                    "the gemini API has no {other}: leave it out for it"
                ));
            }
        }
    }
    Ok(())
}

/// The text of a message's `content`: a string, or its text parts joined.
fn text_of(content: &Value, at: &str) -> Result<String, String> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match (part["type"].as_str(), part["text"].as_str()) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(format!(
                            "{at}.content[{j}]: only text parts can be given here"
                        ));
                    }
                }
            }
            Ok(text)
        }
        other => Err(format!(
            "{at}.content must be a string or a list of parts, not {}",
            super::messages::json_kind(other)
        )),
    }
}

/// A user message's content as Gemini parts: text, and images as `inlineData` (a `data:`
/// URL) or `fileData` (any other URL).
fn user_parts(content: &Value, at: &str) -> Result<Vec<Value>, String> {
    let Value::Array(parts) = content else {
        return Ok(vec![json!({"text": text_of(content, at)?})]);
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match part["type"].as_str() {
            Some("text") => match part["text"].as_str() {
                Some(t) => out.push(json!({"text": t})),
                None => return Err(format!("{at}.text must be a string")),
            },
            Some("image_url") => {
                let url = (part["image_url"]["url"].as_str())
                    .or(part["image_url"].as_str())
                    .ok_or_else(|| format!("{at}.image_url.url is missing"))?;
                out.push(match url.strip_prefix("data:") {
                    Some(rest) => {
                        let (mime, data) = rest
                            .split_once(";base64,")
                            .ok_or_else(|| format!("{at}: a data URL must be base64"))?;
                        json!({"inlineData": {"mimeType": mime, "data": data}})
                    }
                    None => json!({"fileData": {"fileUri": url}}),
                });
            }
            other => {
                return Err(format!(
                    "{at}: a part of type {} has no equivalent in the gemini API",
                    other.map_or("(none)".to_string(), |t| format!("{t:?}"))
                ));
            }
        }
    }
    Ok(out)
}

/// Chat Completions `messages` as Gemini's `contents` and `systemInstruction`, one message
/// at a time, for the tree ([`request`]) and the text ([`text::write_contents`]) alike:
/// every system or developer message's text is a part of the one system instruction; an
/// assistant's `tool_calls` are `functionCall` parts of its `model` turn; consecutive `tool`
/// messages are one `user` turn of `functionResponse` parts, each named by the call it
/// answers.
#[derive(Debug, Default)]
pub(super) struct Contents {
    /// Call id → function name, for the results that answer them (the last call of an id).
    names: std::collections::HashMap<String, String>,
    /// The last turn written is a user turn of results: a result joins it.
    results_open: bool,
    /// The system instruction's parts so far, as JSON text (`{"text": ...}` each, separated
    /// by commas): a part per system message, never a tree of them.
    system: Vec<u8>,
}

impl Contents {
    /// Message `i`, whose role is `role`, begins: a turn of results stays open only for
    /// another result.
    fn begin(&mut self, role: &str) {
        if role != "tool" {
            self.results_open = false;
        }
    }

    /// A system or developer message's text, a part of the system instruction.
    fn system_text(&mut self, text: &str) {
        if !self.system.is_empty() {
            self.system.push(b',');
        }
        self.system.extend_from_slice(br#"{"text":"#);
        // A string always serialises.
        let _ = serde_json::to_writer(&mut self.system, text);
        self.system.push(b'}');
    }

    /// A call of function `name` whose id is `id` is written: its name kept for its result;
    /// the thought signature its id carries (`THOUGHT_SIGNATURE_IN_ID`), if any.
    fn call<'i>(&mut self, id: Option<&'i str>, name: &str) -> Option<&'i str> {
        let id = id?;
        self.names.insert(id.to_string(), name.to_string());
        id.split_once(super::THOUGHT_SIGNATURE_IN_ID)
            .map(|(_, signature)| signature)
    }

    /// The function a result (message `at`) of call `id` answers.
    fn answered(&self, id: &str, at: &str) -> Result<String, String> {
        self.names.get(id).cloned().ok_or_else(|| {
            format!(
                "{at}: tool_call_id {id:?} answers no earlier assistant tool call (the gemini \
                 API names a result by its call's function)"
            )
        })
    }

    /// A result's part is written (its own user turn, or joining the open one): a result
    /// that follows joins it.
    fn result(&mut self, part: Value, out: &mut impl Sink) {
        match self.results_open {
            true => out.join(part),
            false => out.results(vec![part]),
        }
        self.results_open = true;
    }

    /// Translates message `m`, the client's `i`th, into `out`.
    pub(super) fn message(
        &mut self,
        i: usize,
        m: Value,
        out: &mut impl Sink,
    ) -> Result<(), String> {
        let at = format!("messages[{i}]");
        let role = m["role"].as_str().unwrap_or_default();
        self.begin(role);
        match role {
            "system" | "developer" => self.system_text(&text_of(&m["content"], &at)?),
            "user" => {
                let parts = user_parts(&m["content"], &at)?;
                out.item(json!({"role": "user", "parts": parts}));
            }
            "assistant" => {
                let mut parts = Vec::new();
                let text = text_of(&m["content"], &at)?;
                if !text.is_empty() {
                    parts.push(json!({"text": text}));
                }
                let calls = match &m["tool_calls"] {
                    Value::Array(calls) => &calls[..],
                    _ => &[],
                };
                for (k, call) in calls.iter().enumerate() {
                    let at = format!("{at}.tool_calls[{k}].function");
                    let name = call["function"]["name"]
                        .as_str()
                        .ok_or_else(|| format!("{at}.name is missing"))?;
                    let text = call["function"]["arguments"].as_str().unwrap_or("{}");
                    // Arguments that are no JSON object (a sample's broken call, sent back
                    // in the history) are passed on under `raw_arguments`, as to Anthropic:
                    // the turn goes on rather than being refused.
                    let args: Value = match text.trim() {
                        "" => json!({}),
                        text => match serde_json::from_str::<Value>(text) {
                            Ok(args @ Value::Object(_)) => args,
                            _ => json!({"raw_arguments": text}),
                        },
                    };
                    let mut part = json!({"functionCall": {"name": name, "args": args}});
                    // A Gemini call's thought signature, kept in its id by the reader.
                    if let Some(signature) = self.call(call["id"].as_str(), name) {
                        part["thoughtSignature"] = json!(signature);
                    }
                    parts.push(part);
                }
                if parts.is_empty() {
                    parts.push(json!({"text": ""}));
                }
                out.item(json!({"role": "model", "parts": parts}));
            }
            "tool" => {
                let name = self.answered(m["tool_call_id"].as_str().unwrap_or_default(), &at)?;
                let text = text_of(&m["content"], &at)?;
                let response = match serde_json::from_str::<Value>(&text) {
                    Ok(object @ Value::Object(_)) => object,
                    _ => json!({"result": text}),
                };
                let part = json!({"functionResponse": {"name": name, "response": response}});
                self.result(part, out);
            }
            other => return Err(unknown_role(&at, other)),
        }
        Ok(())
    }

    /// The system instruction, when there were system messages.
    pub(super) fn system(self) -> Option<Value> {
        (self.system_json()).and_then(|text| serde_json::from_slice(&text).ok())
    }

    /// The system instruction as JSON text (`{"parts": [...]}`), when there were system
    /// messages.
    pub(super) fn system_json(self) -> Option<Vec<u8>> {
        (!self.system.is_empty()).then(|| {
            let mut text = Vec::with_capacity(self.system.len() + 12);
            text.extend_from_slice(br#"{"parts":["#);
            text.extend_from_slice(&self.system);
            text.extend_from_slice(b"]}");
            text
        })
    }
}

/// The error of message `at` whose role (`role`, empty when none) Gemini has no turn for.
fn unknown_role(at: &str, role: &str) -> String {
    format!(
        "{at}: role {role:?} has no equivalent in the gemini API (system, developer, user, \
         assistant or tool)"
    )
}

/// Translated turns as a tree: a user turn of results holds them in its `parts`.
struct Turns(Vec<Value>);

impl Sink for Turns {
    fn item(&mut self, item: Value) {
        self.0.push(item);
    }

    fn raw(&mut self, item: Box<serde_json::value::RawValue>) {
        self.0
            .push(serde_json::from_str(item.get()).unwrap_or(Value::Null));
    }

    fn results(&mut self, parts: Vec<Value>) {
        self.0.push(json!({"role": "user", "parts": parts}));
    }

    fn join(&mut self, part: Value) {
        match self.0.last_mut().and_then(|l| l["parts"].as_array_mut()) {
            Some(parts) => parts.push(part),
            None => self.results(vec![part]),
        }
    }
}

/// `messages` as Gemini's `contents` and `systemInstruction` ([`Contents`]).
fn contents(messages: &[Value]) -> Result<(Vec<Value>, Option<Value>), String> {
    let (mut turns, mut contents) = (
        Turns(Vec::with_capacity(messages.len())),
        Contents::default(),
    );
    for (i, m) in messages.iter().enumerate() {
        contents.message(i, m.clone(), &mut turns)?;
    }
    Ok((turns.0, contents.system()))
}

/// Chat Completions `tools` as Gemini's: one tool of `functionDeclarations`, each
/// function's JSON Schema as its `parametersJsonSchema`.
fn declarations(tools: &Value) -> Result<Value, String> {
    let Value::Array(tools) = tools else {
        return Err("tools must be a list".into());
    };
    let mut declarations = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        if tool["type"].as_str() != Some("function") {
            return Err(format!(
                "tools[{i}]: only function tools have an equivalent in the gemini API"
            ));
        }
        let f = &tool["function"];
        let name = f["name"]
            .as_str()
            .ok_or_else(|| format!("tools[{i}].function.name is missing"))?;
        let mut d = Map::new();
        d.insert("name".into(), json!(name));
        if let Some(description) = f.get("description").filter(|d| !d.is_null()) {
            d.insert("description".into(), description.clone());
        }
        if let Some(schema) = f.get("parameters").filter(|p| !p.is_null()) {
            d.insert("parametersJsonSchema".into(), schema.clone());
        }
        declarations.push(Value::Object(d));
    }
    Ok(json!([{ "functionDeclarations": declarations }]))
}

/// A Chat Completions `tool_choice` as Gemini's `toolConfig.functionCallingConfig`:
/// `none` → `NONE`, `auto` → `AUTO`, `required` → `ANY`, one function → `ANY` of it.
fn tool_config(choice: &Value) -> Result<Value, String> {
    let config = match choice {
        Value::String(mode) => match mode.as_str() {
            "none" => json!({"mode": "NONE"}),
            "auto" => json!({"mode": "AUTO"}),
            "required" => json!({"mode": "ANY"}),
            other => return Err(format!("tool_choice {other:?}: none, auto or required")),
        },
        Value::Object(_) => match choice["function"]["name"].as_str() {
            Some(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            None => return Err("tool_choice names no function (function.name)".into()),
        },
        _ => return Err("tool_choice must be a string or an object".into()),
    };
    Ok(json!({ "functionCallingConfig": config }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(request: Value) -> Result<Value, String> {
        Dialect::Gemini
            .request_from_chat(&request)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_chat_request_is_written_as_gemini_s() {
        let out = write(json!({
            "model": "m", "stream": true, "n": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "max_tokens": 100, "stop": "END", "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "c2__thought__c2sig", "type": "function", "function": {"name": "t", "arguments": ""}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "{\"c\":18}"},
                {"role": "tool", "tool_call_id": "c2__thought__c2sig", "content": "noon"},
                {"role": "assistant", "content": "18C at noon."}],
            "tools": [{"type": "function", "function": {"name": "w", "description": "weather",
                "parameters": {"type": "object", "additionalProperties": false}}}],
            "tool_choice": {"type": "function", "function": {"name": "w"}},
        }))
        .unwrap();
        assert_eq!(
            out["systemInstruction"],
            json!({"parts": [{"text": "Be brief."}]})
        );
        let contents = out["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 4, "{contents:?}");
        assert_eq!(contents[0]["role"], "user");
        assert_eq!(
            contents[0]["parts"][1]["inlineData"]["mimeType"],
            "image/png"
        );
        assert_eq!(contents[1]["role"], "model");
        assert_eq!(
            contents[1]["parts"][0]["functionCall"],
            json!({"name": "w", "args": {"city": "Paris"}})
        );
        assert_eq!(contents[1]["parts"][1]["functionCall"]["args"], json!({}));
        assert_eq!(contents[1]["parts"][1]["thoughtSignature"], "c2sig");
        assert!(contents[1]["parts"][0].get("thoughtSignature").is_none());
        assert_eq!(contents[2]["role"], "user", "the results are one user turn");
        assert_eq!(
            contents[2]["parts"][0]["functionResponse"],
            json!({"name": "w", "response": {"c": 18}})
        );
        assert_eq!(
            contents[2]["parts"][1]["functionResponse"]["response"],
            json!({"result": "noon"})
        );
        assert_eq!(
            contents[3],
            json!({"role": "model", "parts": [{"text": "18C at noon."}]})
        );
        assert_eq!(
            out["generationConfig"],
            json!({"candidateCount": 3, "temperature": 0.5, "topP": 0.9, "topK": 40,
                "maxOutputTokens": 100, "stopSequences": ["END"]})
        );
        assert_eq!(
            out["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"]["additionalProperties"],
            false
        );
        assert_eq!(
            out["toolConfig"]["functionCallingConfig"],
            json!({"mode": "ANY", "allowedFunctionNames": ["w"]})
        );
        for gone in ["model", "stream", "stream_options", "messages", "n"] {
            assert!(out.get(gone).is_none(), "{gone} left out");
        }
    }

    #[test]
    fn settings_without_a_place_are_errors_naming_them() {
        let e = write(json!({"messages": [], "logprobs": true})).unwrap_err();
        assert_eq!(e, "the gemini API has no logprobs: leave it out for it");
        let e = write(json!({"messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}]}))
            .unwrap_err();
        assert!(
            e.starts_with("messages[0]: tool_call_id \"x\" answers no"),
            "{e}"
        );
        // A broken call in the history (arguments no JSON object) is passed on, not refused.
        for (arguments, passed) in [("[1]", "[1]"), ("{\"path\": \"a.rs", "{\"path\": \"a.rs")] {
            let out = write(
                json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "a",
                "function": {"name": "w", "arguments": arguments}}]}]}),
            )
            .unwrap();
            assert_eq!(
                out["contents"][0]["parts"][0]["functionCall"]["args"],
                json!({"raw_arguments": passed})
            );
        }
        let e = write(json!({"messages": "hi"})).unwrap_err();
        assert_eq!(e, "\"messages\" must be an array, not a string");
        let e = write(json!({"n": 0})).unwrap_err();
        assert!(
            e.starts_with("n (Gemini's generationConfig.candidateCount)"),
            "{e}"
        );
    }

    #[test]
    fn effort_and_formats_go_in_the_generation_config() {
        let out = write(json!({"reasoning_effort": "medium", "max_completion_tokens": 9,
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}}))
        .unwrap();
        let config = &out["generationConfig"];
        assert_eq!(
            config["thinkingConfig"],
            json!({"thinkingBudget": 2048, "includeThoughts": true})
        );
        assert_eq!(config["maxOutputTokens"], 9);
        assert_eq!(config["responseMimeType"], "application/json");
        assert_eq!(config["responseJsonSchema"], json!({"type": "object"}));
        let none = write(json!({"reasoning_effort": "none"})).unwrap();
        assert_eq!(
            none["generationConfig"]["thinkingConfig"],
            json!({"thinkingBudget": 0})
        );
    }

    #[test]
    fn the_text_writers_agree_with_the_tree() {
        let messages = br#"[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]"#;
        let text = Dialect::Gemini.messages_from_chat_json(messages).unwrap();
        assert_eq!(text.key, "contents");
        let list: Value = serde_json::from_slice(&text.list).unwrap();
        assert_eq!(list, json!([{"role": "user", "parts": [{"text": "hi"}]}]));
        let (key, system) = text.system.unwrap();
        assert_eq!(key, "systemInstruction");
        assert_eq!(
            serde_json::from_slice::<Value>(&system).unwrap(),
            json!({"parts": [{"text": "Be brief."}]})
        );
        let tools = br#"[{"type": "function", "function": {"name": "w"}}]"#;
        let out: Value =
            serde_json::from_slice(&Dialect::Gemini.tools_from_chat_json(tools).unwrap()).unwrap();
        assert_eq!(out, json!([{"functionDeclarations": [{"name": "w"}]}]));
    }

    /// Every shape of message the translation reshapes, in an order that joins and splits
    /// the user turns of results.
    fn shapes() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "Weather in Paris and Rome? é \" \\ \u{1F600}"}),
            json!({"role": "user", "content": [
                {"type": "text", "text": "what is it?", "zz": [0, 0]},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO", "detail": "low"}},
                {"type": "image_url", "image_url": "https://example.com/a.png"},
                {"type": "image_url", "image_url": {"url": "gs://b/a.png"}}]}),
            json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{\"c\": \"Paris\"}"}},
                {"id": "b__thought__c2ln", "type": "function", "function": {"name": "w", "arguments": " "}},
                {"id": "c", "type": "function", "function": {"name": "t", "arguments": null}},
                {"type": "function", "function": {"name": "u", "arguments": {"c": 1}}},
                {"id": "d", "function": {"name": "w", "arguments": "\t{\"k\": [1, 2.5, \"x y\"]}\n"}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "{\"temp\": 18, \"unit\": \"C\"}"}),
            json!({"role": "tool", "tool_call_id": "b__thought__c2ln", "content": [
                {"type": "text", "text": "2"}, {"type": "text", "text": "1C"}]}),
            json!({"role": "system", "content": "between the results"}),
            json!({"role": "tool", "tool_call_id": "c", "content": null}),
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": []}),
            json!({"role": "assistant", "content": [{"type": "text", "text": "It is "},
                {"type": "text", "text": "warm."}], "name": "bot"}),
            json!({"role": "tool", "tool_call_id": "d", "content": "[1, 2]"}),
            json!({"role": "user", "content": null}),
            json!({"role": "tool", "tool_call_id": "a", "content": "after a user turn"}),
            json!({"role": "developer", "content": [{"type": "text", "text": "later"}]}),
            json!({"role": "tool", "tool_call_id": "d", "content": "é \" \\ \u{1F600}"}),
        ]
    }

    /// `m` made larger than a message read whole (`LARGE`): an unknown key of 70,000 zeros.
    fn large(m: &Value) -> Value {
        let mut m = m.clone();
        if let Some(o) = m.as_object_mut() {
            o.insert("zz".into(), json!(vec![0; 70_000]));
        }
        m
    }

    /// The contents and system instruction written from the text are the tree's: the same
    /// bytes (`bytes`), or the same JSON (a large message, its strings and arguments copied
    /// as the client wrote them); the same error.
    fn same_as_the_tree(messages: &Value, bytes: bool) {
        let text = Dialect::Gemini.messages_from_chat_json(messages.to_string().as_bytes());
        let tree = Dialect::Gemini.request_from_chat(&json!({"messages": messages}));
        let (text, tree) = match (text, tree) {
            (Ok(text), Ok(tree)) => (text, tree),
            (Err(text), Err(tree)) => {
                return assert_eq!(text.to_string(), tree.to_string(), "{messages}");
            }
            (text, tree) => panic!("{messages}: {text:?} but {tree:?}"),
        };
        assert_eq!(text.key, "contents");
        let system = text
            .system
            .map(|(key, s)| (key, String::from_utf8(s).unwrap()));
        let want = (tree.get("systemInstruction")).map(|s| ("systemInstruction", s.to_string()));
        assert_eq!(system, want, "{messages}");
        match bytes {
            true => assert_eq!(
                String::from_utf8(text.list).unwrap(),
                tree["contents"].to_string(),
                "{messages}"
            ),
            false => assert_eq!(
                serde_json::from_slice::<Value>(&text.list).unwrap(),
                tree["contents"],
                "{messages}"
            ),
        }
    }

    #[test]
    fn contents_are_written_from_the_text_as_the_tree_writes_them() {
        let all = shapes();
        same_as_the_tree(&json!(all), true);
        let mut with_system = vec![json!({"role": "system", "content": "Be brief."})];
        with_system.extend(all.clone());
        same_as_the_tree(&json!(with_system), true);
        // Each shape after the messages before it (its call answered), alone and large.
        for k in 0..all.len() {
            let mut list: Vec<Value> = all[..k].to_vec();
            list.push(all[k].clone());
            same_as_the_tree(&json!(list), true);
            *list.last_mut().unwrap() = large(&all[k]);
            same_as_the_tree(&json!(list), false);
            same_as_the_tree(&json!([large(&all[k])]), false);
        }
        // Every message large at once.
        same_as_the_tree(&json!(all.iter().map(large).collect::<Vec<_>>()), false);
        // No messages, `null` and not a list.
        for not_a_list in [
            json!([]),
            json!(null),
            json!("hi"),
            json!({"role": "user"}),
            json!(3),
        ] {
            same_as_the_tree(&not_a_list, true);
        }
        let e = Dialect::Gemini
            .messages_from_chat_json(b"[{oops")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("\"messages\" could not be read: "),
            "{e}"
        );
    }

    /// A large message's strings and parts are read one at a time: what it becomes is the
    /// tree's (its JSON), for long strings, many parts, long arguments and results.
    #[test]
    fn large_messages_are_written_as_the_tree_writes_them() {
        let long = format!("é \" \\ {}", "x".repeat(70_000));
        let texts: Vec<Value> = (0..5_000)
            .map(|i| json!({"type": "text", "text": format!("part {i} ")}))
            .collect();
        let mut with_image = texts.clone();
        with_image
            .push(json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}));
        let zeros = json!({"z": vec![0; 40_000], "s": "é \" x"}).to_string();
        let call = |id: &str, args: Value| json!({"id": id, "type": "function", "function": {"name": "w", "arguments": args}});
        let calls = json!({"role": "assistant", "content": texts, "tool_calls": [
            call("a", json!(zeros)), call("b__thought__c2ln", json!(" ")),
            call("c", Value::Null), call("d", json!({"k": 1}))]});
        let shapes = [
            json!({"role": "user", "content": with_image}),
            json!({"role": "user", "content": long}),
            json!({"role": "system", "content": long}),
            json!({"role": "developer", "content": texts}),
            json!({"role": "assistant", "content": long}),
            json!({"role": "assistant", "content": texts}),
            calls.clone(),
            json!({"role": "tool", "tool_call_id": "a", "content": texts}),
            json!({"role": "tool", "tool_call_id": "a", "content": zeros}),
            json!({"role": "tool", "tool_call_id": "a", "content": long}),
        ];
        for m in &shapes {
            same_as_the_tree(&json!([calls, m]), false);
            same_as_the_tree(&json!([calls, m, m]), false);
        }
        // What the tree refuses, refused alike (the same words).
        let bad = [
            json!({"role": "robot", "content": long}),
            json!({"content": long}),
            json!({"role": "user", "content": 3, "zz": long}),
            json!({"role": "user", "content": {"text": long}}),
            json!({"role": "user", "content": [{"type": "input_audio", "zz": long}]}),
            json!({"role": "user", "content": [{"type": "text", "text": 1, "zz": long}]}),
            json!({"role": "user", "content": [{"type": "image_url", "image_url": {}, "zz": long}]}),
            json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": format!("data:image/png,{long}")}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": with_image}),
            json!({"role": "tool", "tool_call_id": "nobody", "content": long}),
            json!({"role": "system", "content": [{"type": "image_url", "zz": long}]}),
            json!({"role": "assistant", "content": long, "tool_calls": [call("x", json!("{oops"))]}),
            json!({"role": "assistant", "content": long, "tool_calls": [call("x", json!(" [1] "))]}),
            json!({"role": "assistant", "content": long, "tool_calls": [{"id": "x", "function": {}}]}),
        ];
        for m in &bad {
            same_as_the_tree(&json!([calls, m]), false);
            same_as_the_tree(&json!([{"role": "user", "content": "x"}, m]), false);
        }
    }

    /// The tools written from their text are the tree's, a tool at a time; their errors
    /// too.
    #[test]
    fn tools_are_written_from_the_text_as_the_tree_writes_them() {
        let same = |tools: Value| {
            let text = Dialect::Gemini.tools_from_chat_json(tools.to_string().as_bytes());
            let tree = Dialect::Gemini.request_from_chat(&json!({"tools": tools}));
            match (text, tree) {
                (Ok(text), Ok(tree)) => {
                    assert_eq!(String::from_utf8(text).unwrap(), tree["tools"].to_string())
                }
                (Err(text), Err(tree)) => assert_eq!(text, tree),
                (text, tree) => panic!("{tools}: {text:?} but {tree:?}"),
            }
        };
        same(json!([
            {"type": "function", "function": {"name": "w", "description": "weather",
                "parameters": {"properties": {"c": {"type": "string"}}, "type": "object"}}},
            {"type": "function", "function": {"name": "n", "description": null, "parameters": null, "strict": true}},
            {"type": "function", "function": {"name": "d", "description": {"odd": [1, 2]}}, "zz": [0, 0]}]));
        same(json!([]));
        same(json!([{"type": "custom", "custom": {"name": "apply_patch"}}]));
        same(json!([{"type": "function", "function": {"description": "no name"}}]));
        same(json!(["a string"]));
        same(json!({"not": "a list"}));
        // The client's whitespace is left out of what is copied.
        let spaced = br#"[ {"type": "function", "function": {"name": "w", "parameters": {"type": "object", "required": [ "c" ] } } } ]"#;
        assert_eq!(
            Dialect::Gemini.tools_from_chat_json(spaced).unwrap(),
            br#"[{"functionDeclarations":[{"name":"w","parametersJsonSchema":{"type":"object","required":["c"]}}]}]"#
        );
        let e = Dialect::Gemini.tools_from_chat_json(b"[{oops").unwrap_err();
        assert_eq!(e.param(), Some("tools"));
        assert!(e.message().starts_with("tools could not be read: "), "{e}");
    }
}
