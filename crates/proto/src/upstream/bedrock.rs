//! AWS Bedrock's ConverseStream API: one choice per request, the model in its path
//! (`model/{model}/converse-stream`), its stream AWS's binary event stream, each request
//! signed with SigV4 (the client signs, as [`Authorisation::SigV4`] says); its reader
//! `dialect/bedrock.rs`.
//!
//! Its writer is Anthropic's, then reshaped: Converse's messages are Anthropic's turns with
//! blocks of another spelling (`{"text"}`, `{"toolUse"}`, `{"toolResult"}`,
//! `{"reasoningContent"}`, `{"image"}`), and what a Chat Completions request keeps at its
//! top is nested (`inferenceConfig`, `toolConfig`, `additionalModelRequestFields`), so a
//! request is translated whole ([`RequestWriting::Whole`]).

use serde_json::{Map, Value, json};

use super::{Authorisation, Framing, ReadsEvents, RequestWriting, UpstreamApi, sealed};
use crate::api::{Dialect, MessagesError, RequestError};
use crate::dialect::BedrockEvents;
use crate::dialect::bedrock::EVENT_TYPES;

/// AWS Bedrock's ConverseStream as an upstream API ([`Dialect::Bedrock`]).
#[derive(Debug)]
pub(crate) struct Bedrock;

impl sealed::Sealed for Bedrock {}

impl ReadsEvents for Bedrock {
    type Reader = BedrockEvents;
}

impl UpstreamApi for Bedrock {
    fn dialect(&self) -> Dialect {
        Dialect::Bedrock
    }

    fn name(&self) -> &'static str {
        "bedrock"
    }

    fn endpoint(&self) -> &'static str {
        "model"
    }

    /// The model id percent-encoded as one path segment (`anthropic.claude-v2:1` is
    /// `anthropic.claude-v2%3A1`), as AWS's own clients send it.
    fn endpoint_for(&self, model: &str) -> String {
        let mut path = String::with_capacity(model.len() + 24);
        path.push_str("model/");
        for b in model.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    path.push(char::from(b));
                }
                _ => path.push_str(&format!("%{b:02X}")),
            }
        }
        path.push_str("/converse-stream");
        path
    }

    fn has_n(&self) -> bool {
        false
    }

    fn system_field(&self) -> Option<&'static str> {
        Some("system")
    }

    fn request_writing(&self) -> RequestWriting {
        RequestWriting::Whole
    }

    /// Anthropic's translation (the same refusals: no `n`, no `seed`; OpenAI's own fields
    /// left out), reshaped for Converse. Its limit is sent only when the client stated one
    /// (or thinking needs one): Converse has the model's own default.
    fn request_from_chat(&self, body: &Map<String, Value>) -> Result<Value, RequestError> {
        let stated = ["max_tokens", "max_completion_tokens"]
            .iter()
            .any(|k| body.get(*k).is_some_and(|v| !v.is_null()));
        let anthropic = super::anthropic::request_as(Dialect::Bedrock, body)?;
        converse(anthropic, stated).map(Value::Object)
    }

    fn write_messages_from_chat_json(
        &self,
        messages: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Vec<u8>>, MessagesError> {
        let mut anthropic = Vec::with_capacity(messages.len());
        let system =
            crate::api::messages::write_messages(Dialect::Bedrock, messages, &mut anthropic)?;
        let turns: Vec<Value> = serde_json::from_slice(&anthropic)
            .map_err(|e| MessagesError::Invalid(e.to_string()))?;
        let turns = (turns.into_iter().enumerate())
            .map(|(i, turn)| message(i, turn))
            .collect::<Result<Vec<_>, _>>()
            .map_err(MessagesError::Invalid)?;
        serde_json::to_writer(&mut *out, &turns)
            .map_err(|e| MessagesError::Invalid(e.to_string()))?;
        let system = system
            .map(|s| serde_json::from_slice::<Value>(&s).map(|s| system_blocks(&s)))
            .transpose()
            .map_err(|e| MessagesError::Invalid(e.to_string()))?;
        Ok(system.map(|s| s.to_string().into_bytes()))
    }

    /// Converse's `toolConfig.tools`: each function a `toolSpec`.
    fn write_tools_from_chat_json(
        &self,
        tools: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RequestError> {
        let mut anthropic = Vec::with_capacity(tools.len());
        let at = |e: String| RequestError::at("tools", e);
        crate::api::tools::write_tools_text(tools, Dialect::Bedrock, &mut anthropic).map_err(at)?;
        let tools: Value = serde_json::from_slice(&anthropic).map_err(|e| at(e.to_string()))?;
        let specs = tool_specs(tools).map_err(at)?;
        serde_json::to_writer(out, &specs).map_err(|e| at(e.to_string()))
    }

    fn recognises(&self, kind: &str) -> bool {
        EVENT_TYPES.contains(&kind)
    }

    fn default_base_url(&self) -> &'static str {
        "https://bedrock-runtime.us-east-1.amazonaws.com"
    }

    /// A Bedrock API key's variable (sent as a bearer token; the signing credentials are
    /// AWS's own variables, `AWS_ACCESS_KEY_ID` and its kin), and the base URL's that AWS's
    /// SDKs read for this service.
    fn env_vars(&self) -> (&'static str, &'static str) {
        (
            "AWS_BEARER_TOKEN_BEDROCK",
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
        )
    }

    fn default_model(&self) -> &'static str {
        "anthropic.claude-3-5-haiku-20241022-v1:0"
    }

    fn bare_host_is_v1(&self) -> bool {
        false
    }

    fn path_names_model(&self) -> bool {
        true
    }

    fn stream_field(&self) -> bool {
        false
    }

    fn passes_other_fields(&self) -> bool {
        false
    }

    fn provider_name(&self) -> &'static str {
        "aws.bedrock"
    }

    fn framing(&self) -> Framing {
        Framing::EventStream
    }

    fn authorisation(&self) -> Authorisation {
        Authorisation::SigV4 { service: "bedrock" }
    }

    fn regional_base_url(&self, region: &str) -> Option<String> {
        Some(format!("https://bedrock-runtime.{region}.amazonaws.com"))
    }
}

/// An Anthropic Messages request (`a`) as a Converse request; `stated`: the client stated
/// a limit of the answer's tokens.
fn converse(mut a: Map<String, Value>, stated: bool) -> Result<Map<String, Value>, RequestError> {
    let mut out = Map::new();
    let turns = match a.remove("messages") {
        Some(Value::Array(turns)) => turns,
        _ => Vec::new(),
    };
    let turns = (turns.into_iter().enumerate())
        .map(|(i, turn)| message(i, turn))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RequestError::at("messages", e))?;
    out.insert("messages".into(), Value::Array(turns));
    if let Some(system) = a.remove("system") {
        out.insert("system".into(), system_blocks(&system));
    }
    let mut inference = Map::new();
    let mut additional = Map::new();
    let thinking = a.remove("thinking");
    if let Some(max) = a.remove("max_tokens")
        && (stated || thinking.is_some())
    {
        inference.insert("maxTokens".into(), max);
    }
    if let Some(thinking) = thinking {
        additional.insert("thinking".into(), thinking);
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("stop_sequences", "stopSequences"),
    ] {
        if let Some(v) = a.remove(from).filter(|v| !v.is_null()) {
            inference.insert(to.into(), v);
        }
    }
    if let Some(k) = a.remove("top_k").filter(|v| !v.is_null()) {
        additional.insert("top_k".into(), k);
    }
    let mut tool_config = Map::new();
    if let Some(tools) = a.remove("tools") {
        let specs = tool_specs(tools).map_err(|e| RequestError::at("tools", e))?;
        tool_config.insert("tools".into(), specs);
    }
    if let Some(choice) = a.remove("tool_choice") {
        let choice = match choice["type"].as_str() {
            Some("auto") => Some(json!({"auto": {}})),
            Some("any") => Some(json!({"any": {}})),
            Some("tool") => Some(json!({"tool": {"name": choice["name"]}})),
            // Converse has no choice of none: the tools stay (a history with calls needs
            // them), and the model is asked nothing of them.
            _ => None,
        };
        if let Some(choice) = choice.filter(|_| tool_config.contains_key("tools")) {
            tool_config.insert("toolChoice".into(), choice);
        }
    }
    // Streaming is the endpoint's, the model is in the path, the metadata has no place.
    for own in ["model", "stream", "metadata"] {
        a.remove(own);
    }
    if let Some(field) = a.keys().next() {
        return Err(RequestError::at(
            field,
            format!("{field}: the bedrock API (Converse) has no such field: leave it out for it"),
        ));
    }
    if !inference.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inference));
    }
    if !tool_config.is_empty() {
        out.insert("toolConfig".into(), Value::Object(tool_config));
    }
    if !additional.is_empty() {
        out.insert(
            "additionalModelRequestFields".into(),
            Value::Object(additional),
        );
    }
    Ok(out)
}

/// Anthropic's `system` (a string or text blocks) as Converse's list of text blocks.
fn system_blocks(system: &Value) -> Value {
    match system {
        Value::String(s) => json!([{ "text": s }]),
        Value::Array(blocks) => Value::Array(
            (blocks.iter())
                .filter_map(|b| b["text"].as_str())
                .map(|t| json!({ "text": t }))
                .collect(),
        ),
        other => json!([{ "text": other.to_string() }]),
    }
}

/// Anthropic's tools as Converse's `toolSpec`s.
fn tool_specs(tools: Value) -> Result<Value, String> {
    let Value::Array(tools) = tools else {
        return Err("tools: expected a list".to_string());
    };
    let specs = (tools.into_iter().enumerate()).map(|(i, tool)| {
        if let Some(kind) = tool["type"].as_str().filter(|t| *t != "custom") {
            return Err(format!(
                "tools[{i}]: the bedrock API takes functions only, not {kind:?}"
            ));
        }
        let mut spec = Map::new();
        spec.insert("name".into(), tool["name"].clone());
        if let Some(description) = tool.get("description").filter(|d| !d.is_null()) {
            spec.insert("description".into(), description.clone());
        }
        let schema = match tool.get("input_schema") {
            Some(schema) if !schema.is_null() => schema.clone(),
            _ => json!({"type": "object", "properties": {}}),
        };
        spec.insert("inputSchema".into(), json!({ "json": schema }));
        Ok(json!({ "toolSpec": spec }))
    });
    specs.collect::<Result<Vec<_>, _>>().map(Value::Array)
}

/// One Anthropic turn (the `i`th) as a Converse message.
fn message(i: usize, turn: Value) -> Result<Value, String> {
    let role = turn["role"].as_str().unwrap_or("user").to_string();
    let content = match &turn["content"] {
        Value::String(s) => vec![json!({ "text": s })],
        Value::Array(blocks) => (blocks.iter().enumerate())
            .map(|(k, b)| block(b).map_err(|e| format!("messages[{i}].content[{k}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    Ok(json!({ "role": role, "content": content }))
}

/// One Anthropic content block as a Converse content block.
fn block(b: &Value) -> Result<Value, String> {
    Ok(match b["type"].as_str() {
        Some("text") => json!({ "text": b["text"] }),
        Some("image") => image(&b["source"])?,
        Some("tool_use") => json!({"toolUse": {
            "toolUseId": b["id"],
            "name": b["name"],
            "input": b["input"],
        }}),
        Some("tool_result") => {
            let content = match &b["content"] {
                Value::String(s) => vec![json!({ "text": s })],
                Value::Array(parts) => (parts.iter())
                    .map(|p| match p["type"].as_str() {
                        Some("image") => image(&p["source"]),
                        _ => Ok(json!({ "text": p["text"].as_str().unwrap_or_default() })),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                _ => Vec::new(),
            };
            let status = match b["is_error"].as_bool() {
                Some(true) => "error",
                _ => "success",
            };
            json!({"toolResult": {
                "toolUseId": b["tool_use_id"],
                "content": content,
                "status": status,
            }})
        }
        Some("thinking") => json!({"reasoningContent": {"reasoningText": {
            "text": b["thinking"],
            "signature": b["signature"],
        }}}),
        Some("redacted_thinking") => json!({"reasoningContent": {"redactedContent": b["data"]}}),
        other => {
            return Err(format!(
                "a block of type {} has no place in the bedrock API",
                other.map_or("none".to_string(), |t| format!("{t:?}"))
            ));
        }
    })
}

/// An Anthropic image source as a Converse image: its bytes, base64, and their format.
fn image(source: &Value) -> Result<Value, String> {
    let (Some("base64"), Some(media), Some(data)) = (
        source["type"].as_str(),
        source["media_type"].as_str(),
        source["data"].as_str(),
    ) else {
        return Err("the bedrock API takes an image's bytes (a data: URL), not a link".to_string());
    };
    let format = media.strip_prefix("image/").unwrap_or(media);
    Ok(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> Result<Value, RequestError> {
        Bedrock.request_from_chat(body.as_object().unwrap())
    }

    #[test]
    fn a_tool_loop_is_written_in_converse_shape() {
        let r = request(json!({
            "model": "m",
            "stream": true,
            "max_tokens": 100,
            "temperature": 0.5,
            "stop": "END",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "list files"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{\"cmd\":\"ls\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "sh", "description": "run", "parameters": {"type": "object"}
            }}],
            "tool_choice": "required",
        }))
        .unwrap();
        assert_eq!(r["system"], json!([{"text": "be brief"}]));
        assert_eq!(
            r["inferenceConfig"],
            json!({"maxTokens": 100, "temperature": 0.5, "stopSequences": ["END"]})
        );
        assert_eq!(
            r["messages"][0],
            json!({"role": "user", "content": [{"text": "list files"}]})
        );
        assert_eq!(
            r["messages"][1]["content"][0],
            json!({"toolUse": {"toolUseId": "c1", "name": "sh", "input": {"cmd": "ls"}}})
        );
        assert_eq!(
            r["messages"][2]["content"][0],
            json!({"toolResult": {"toolUseId": "c1", "content": [{"text": "a.txt"}], "status": "success"}})
        );
        assert_eq!(
            r["toolConfig"],
            json!({
                "tools": [{"toolSpec": {"name": "sh", "description": "run", "inputSchema": {"json": {"type": "object"}}}}],
                "toolChoice": {"any": {}},
            })
        );
        for absent in ["model", "stream", "max_tokens", "tools", "tool_choice"] {
            assert!(r.get(absent).is_none(), "{absent}");
        }
    }

    #[test]
    fn no_limit_unless_stated_and_refusals_name_the_api_and_field() {
        let r = request(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert!(r.get("inferenceConfig").is_none(), "{r}");
        let e = request(json!({"messages": [], "seed": 1})).unwrap_err();
        assert_eq!(e.param(), Some("seed"));
        assert_eq!(
            e.message(),
            "the bedrock API has no seed: leave it out for it"
        );
        let e = request(json!({"messages": [], "n": 2})).unwrap_err();
        assert_eq!(e.param(), Some("n"));
        assert!(e.message().contains("bedrock API"), "{e}");
        let e = request(json!({"messages": [], "frequency_penalty": 1})).unwrap_err();
        assert_eq!(e.param(), Some("frequency_penalty"));
        assert!(
            e.message()
                .starts_with("frequency_penalty: the bedrock API"),
            "{e}"
        );
        // Anthropic's translation, which Converse is reshaped from, names this API too.
        let e = request(json!({"messages": [], "tools": [{"type": "web_search"}]})).unwrap_err();
        assert_eq!(e.param(), Some("tools"));
        assert_eq!(
            e.message(),
            "tools[0]: only function tools can be sent to the bedrock API"
        );
        let broken_result = crate::api::tools::a_tool_result_of_audio();
        let want = "messages[2].content[0]: a tool result's \"input_audio\" part cannot be sent to \
                    the bedrock API (text and images can)";
        let e = request(json!({"messages": broken_result})).unwrap_err();
        assert_eq!(e.message(), want);
        let e = Dialect::Bedrock
            .messages_from_chat_json(broken_result.to_string().as_bytes())
            .unwrap_err();
        assert_eq!(e.to_string(), want);
        let thinking = request(json!({"messages": [], "reasoning_effort": "low"})).unwrap();
        assert_eq!(
            thinking["additionalModelRequestFields"]["thinking"]["budget_tokens"],
            1024
        );
        assert!(thinking["inferenceConfig"]["maxTokens"].as_u64().unwrap() > 1024);
    }

    #[test]
    fn the_model_is_one_path_segment() {
        assert_eq!(
            Bedrock.endpoint_for("anthropic.claude-3-5-haiku-20241022-v1:0"),
            "model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
        );
        assert_eq!(
            Bedrock.endpoint_for("arn:aws:bedrock:us-east-1:1:inference-profile/x"),
            "model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse-stream"
        );
    }

    #[test]
    fn messages_and_tools_from_their_text() {
        let mut out = Vec::new();
        let system = Bedrock
            .write_messages_from_chat_json(
                br#"[{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]"#,
                &mut out,
            )
            .unwrap();
        let turns: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            turns,
            json!([{"role": "user", "content": [{"text": "hi"}]}])
        );
        assert_eq!(system.as_deref(), Some(&br#"[{"text":"s"}]"#[..]));
        let mut out = Vec::new();
        Bedrock
            .write_tools_from_chat_json(
                br#"[{"type": "function", "function": {"name": "f"}}]"#,
                &mut out,
            )
            .unwrap();
        let tools: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(tools[0]["toolSpec"]["name"], "f");
    }
}
