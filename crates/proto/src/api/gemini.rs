//! A request in Chat Completions' shape written as a Gemini `generateContent` request
//! ([`Dialect::Gemini`](super::Dialect::Gemini)): `contents` of `user` and `model` turns,
//! `systemInstruction`, tool calls and results as `functionCall` / `functionResponse`
//! parts, `tools.functionDeclarations`, `toolConfig`, and the sampling settings in
//! `generationConfig` (`n` is its `candidateCount`).

use serde_json::{Map, Value, json};

use super::Dialect;

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

/// `request` (a Chat Completions request's fields) as a Gemini request body.
pub(crate) fn request(body: &Map<String, Value>) -> Result<Value, String> {
    let mut out = Map::new();
    let mut config = Map::new();
    for (key, value) in body {
        if value.is_null() {
            continue;
        }
        let at = |name: &str| format!("{key} (Gemini's generationConfig.{name})");
        match key.as_str() {
            "messages" | "tools" | "tool_choice" | "max_tokens" | "max_completion_tokens" => {}
            "temperature" | "top_p" | "seed" | "presence_penalty" | "frequency_penalty" => {
                let name = match key.as_str() {
                    "temperature" => "temperature",
                    "top_p" => "topP",
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
    if let Some(max) = body
        .get("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| body.get("max_tokens").filter(|v| !v.is_null()))
    {
        if !max.is_u64() {
            return Err(format!(
                "max_tokens (Gemini's generationConfig.maxOutputTokens) must be a whole number, not {max}"
            ));
        }
        config.insert("maxOutputTokens".into(), max.clone());
    }
    let messages = match body.get("messages") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(list)) => list,
        Some(other) => {
            let found = super::messages::json_kind(other);
            return Err(super::MessagesError::NotAnArray { found }.to_string());
        }
    };
    let (contents, system) = contents(messages)?;
    out.insert("contents".into(), Value::Array(contents));
    if let Some(system) = system {
        out.insert("systemInstruction".into(), system);
    }
    if let Some(tools) = body.get("tools").filter(|t| !t.is_null()) {
        out.insert("tools".into(), declarations(tools)?);
    }
    if let Some(choice) = body.get("tool_choice").filter(|c| !c.is_null()) {
        out.insert("toolConfig".into(), tool_config(choice)?);
    }
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(out))
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

/// `messages` as Gemini's `contents` and `systemInstruction`: every system or developer
/// message's text is a part of the one system instruction; an assistant's `tool_calls` are
/// `functionCall` parts of its `model` turn; consecutive `tool` messages are one `user` turn
/// of `functionResponse` parts, each named by the call it answers.
fn contents(messages: &[Value]) -> Result<(Vec<Value>, Option<Value>), String> {
    let mut contents: Vec<Value> = Vec::with_capacity(messages.len());
    let mut system: Vec<Value> = Vec::new();
    // Call id → function name, for the results that answer them.
    let mut names: Vec<(String, String)> = Vec::new();
    let mut results_open = false;
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = m["role"].as_str().unwrap_or_default();
        if role != "tool" {
            results_open = false;
        }
        match role {
            "system" | "developer" => {
                system.push(json!({"text": text_of(&m["content"], &at)?}));
            }
            "user" => {
                let parts = user_parts(&m["content"], &at)?;
                contents.push(json!({"role": "user", "parts": parts}));
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
                    let args: Value = match text.trim() {
                        "" => json!({}),
                        text => serde_json::from_str(text)
                            .map_err(|e| format!("{at}.arguments are not JSON: {e}"))?,
                    };
                    if !args.is_object() {
                        return Err(format!(
                            "{at}.arguments must be a JSON object for the gemini API"
                        ));
                    }
                    let id = call["id"].as_str();
                    if let Some(id) = id {
                        names.push((id.to_string(), name.to_string()));
                    }
                    let mut part = json!({"functionCall": {"name": name, "args": args}});
                    // A Gemini call's thought signature, kept in its id by the reader.
                    if let Some((_, signature)) =
                        id.and_then(|id| id.split_once(super::THOUGHT_SIGNATURE_IN_ID))
                    {
                        part["thoughtSignature"] = json!(signature);
                    }
                    parts.push(part);
                }
                if parts.is_empty() {
                    parts.push(json!({"text": ""}));
                }
                contents.push(json!({"role": "model", "parts": parts}));
            }
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                let name = (names.iter().rev().find(|(i, _)| i == id))
                    .map(|(_, n)| n.clone())
                    .ok_or_else(|| {
                        format!(
                            "{at}: tool_call_id {id:?} answers no earlier assistant tool call \
                             (the gemini API names a result by its call's function)"
                        )
                    })?;
                let text = text_of(&m["content"], &at)?;
                let response = match serde_json::from_str::<Value>(&text) {
                    Ok(object @ Value::Object(_)) => object,
                    _ => json!({"result": text}),
                };
                let part = json!({"functionResponse": {"name": name, "response": response}});
                match contents.last_mut() {
                    Some(turn) if results_open => {
                        if let Some(parts) = turn["parts"].as_array_mut() {
                            parts.push(part);
                        }
                    }
                    _ => contents.push(json!({"role": "user", "parts": [part]})),
                }
                results_open = true;
            }
            other => {
                return Err(format!(
                    "{at}: role {other:?} has no equivalent in the gemini API (system, \
                     developer, user, assistant or tool)"
                ));
            }
        }
    }
    let system = (!system.is_empty()).then(|| json!({"parts": system}));
    Ok((contents, system))
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

/// Chat Completions `tools` (their JSON text) as Gemini's `tools`, as JSON text.
pub(crate) fn tools_text(tools: &[u8]) -> Result<Vec<u8>, String> {
    let tools: Value =
        serde_json::from_slice(tools).map_err(|e| format!("tools could not be read: {e}"))?;
    serde_json::to_vec(&declarations(&tools)?).map_err(|e| e.to_string())
}

/// Chat Completions `messages` (their JSON text) as Gemini's `contents`, written at the end
/// of `out`: the `systemInstruction`, as JSON text, when there are system messages.
pub(crate) fn write_contents(
    messages: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Vec<u8>>, super::MessagesError> {
    use super::MessagesError;
    let list: Value = serde_json::from_slice(messages)
        .map_err(|e| MessagesError::Invalid(format!("\"messages\" could not be read: {e}")))?;
    let Value::Array(list) = list else {
        let found = super::messages::json_kind(&list);
        return Err(MessagesError::NotAnArray { found });
    };
    let (contents, system) = contents(&list).map_err(MessagesError::Invalid)?;
    let write = |v: &Value, out: &mut Vec<u8>| serde_json::to_writer(out, v);
    write(&Value::Array(contents), out).map_err(|e| MessagesError::Invalid(e.to_string()))?;
    Ok(system.map(|s| s.to_string().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(request: Value) -> Result<Value, String> {
        Dialect::Gemini.request_from_chat(&request)
    }

    #[test]
    fn a_chat_request_is_written_as_gemini_s() {
        let out = write(json!({
            "model": "m", "stream": true, "n": 3, "temperature": 0.5, "top_p": 0.9,
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
            json!({"candidateCount": 3, "temperature": 0.5, "topP": 0.9, "maxOutputTokens": 100,
                "stopSequences": ["END"]})
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
        let e = write(
            json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "a",
            "function": {"name": "w", "arguments": "[1]"}}]}]}),
        )
        .unwrap_err();
        assert!(
            e.contains("messages[0].tool_calls[0].function.arguments must be a JSON object"),
            "{e}"
        );
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
}
