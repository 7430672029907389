//! The translation of Messages requests: each field, and each refusal a 400 naming it.

use super::*;
use crate::api::Encoder;
use crate::api::Hosted;

/// A test's body translated as the gateway translates it (split into its fields first).
fn to_chat(body: &Value) -> Result<Translated, IngressError> {
    super::to_chat(&crate::api::fields_of(body)?)
}

fn to_chat_for_count(body: &Value) -> Result<Translated, IngressError> {
    super::to_chat_for_count(&crate::api::fields_of(body)?)
}

fn ok(body: Value) -> Translated {
    to_chat(&body).unwrap_or_else(|e| panic!("{body}: {e}"))
}

fn refused(body: Value) -> IngressError {
    match to_chat(&body) {
        Ok(t) => panic!("{body} was accepted: {}", t.chat()),
        Err(e) => e,
    }
}

#[test]
fn a_messages_request_becomes_a_chat_request() {
    let t = ok(json!({
        "model": "claude", "max_tokens": 512, "stream": true, "temperature": 0.3,
        "top_p": 0.9, "top_k": 40, "stop_sequences": ["END"], "metadata": {"user_id": "u1"},
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture, and the weather?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "text", "text": "A cat. Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}, {"type": "text", "text": "sunny"}]},
                {"type": "text", "text": "Thanks"}]},
            {"role": "assistant", "content": "You're welcome."}
        ],
        "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
        "thinking": {"type": "enabled", "budget_tokens": 3000},
        "choicewise": {"samples": 3, "select": "first_finished"}
    }));
    assert_eq!(
        t.chat(),
        json!({
            "model": "claude", "max_tokens": 512, "stream": true, "temperature": 0.3,
            "top_p": 0.9, "top_k": 40, "stop": ["END"],
            "messages": [
                {"role": "system", "content": "Be brief.\n\nBe kind."},
                {"role": "user", "content": [
                    {"type": "text", "text": "What is in this picture, and the weather?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}]},
                {"role": "assistant", "content": "A cat. Checking.", "tool_calls": [
                    {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "18C\nsunny"},
                {"role": "user", "content": "Thanks"},
                {"role": "assistant", "content": "You're welcome."}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": false,
            "reasoning_effort": "medium",
            "choicewise": {"samples": 3, "select": "first_finished"}
        })
    );
    assert!(t.stream && t.reply.reasoning);
    assert_eq!(t.reply.stop, ["END"]);
    assert_eq!(t.reply.model, "claude");
    assert_eq!(t.native["thinking"]["budget_tokens"], 3000);
}

#[test]
fn tool_choices_results_and_nulls() {
    for (choice, chat) in [
        (json!({"type": "auto"}), json!("auto")),
        (json!({"type": "any"}), json!("required")),
        (json!({"type": "none"}), json!("none")),
    ] {
        let t = ok(json!({"model": "m", "max_tokens": 1, "tool_choice": choice,
                          "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                          "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(t.chat()["tool_choice"], chat);
        assert!(t.chat().get("parallel_tool_calls").is_none());
        // Without tools, no tool choice is sent.
        let t = ok(json!({"model": "m", "max_tokens": 1, "tool_choice": choice,
                          "messages": [{"role": "user", "content": "hi"}]}));
        assert!(t.chat().get("tool_choice").is_none());
    }
    // Tool results only: tool messages, no empty user message; an image in a result
    // goes to a user message after them. Nulls are absent fields.
    let t = ok(
        json!({"model": "m", "max_tokens": 1, "temperature": null, "system": null,
        "stream": null, "thinking": {"type": "disabled"},
        "messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "1"},
            {"type": "tool_result", "tool_use_id": "b", "is_error": true},
            {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "image", "source": {"type": "url", "url": "u"}}]}]}]}),
    );
    assert_eq!(
        t.chat()["messages"],
        json!([
            {"role": "tool", "tool_call_id": "a", "content": "1"},
            {"role": "tool", "tool_call_id": "b", "content": ""},
            {"role": "tool", "tool_call_id": "c", "content": ""},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
        ])
    );
    assert!(!t.stream && !t.reply.reasoning);
    assert!(t.chat().get("temperature").is_none() && t.chat().get("reasoning_effort").is_none());
    // An assistant turn of tool calls only has null content.
    let t = ok(json!({"model": "m", "max_tokens": 1, "messages": [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]}]}));
    assert_eq!(
        t.chat()["messages"][0],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    );
    // max_tokens is not needed to count tokens.
    let count = to_chat_for_count(&json!({"model": "m", "messages": []})).unwrap();
    assert!(count.chat().get("max_tokens").is_none());
}

#[test]
fn each_refusal_is_a_400_naming_the_field() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    for (body, param, says) in [
        (
            json!({"model": "m", "messages": hi}),
            "max_tokens",
            "max_tokens: Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 0, "messages": hi}),
            "max_tokens",
            "1 or more",
        ),
        (
            json!({"max_tokens": 5, "messages": hi}),
            "model",
            "Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5}),
            "messages",
            "Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": {}}),
            "messages",
            "an array",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}),
            "messages.0.role",
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": [{"type": "image"}]}]}),
            "messages.0.content.0",
            "a text block",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}),
            "messages.0.content.0.type",
            "\"document\"",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}),
            "messages.0.content.0.source.type",
            "\"file\"",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}),
            "messages.0.content.0.tool_use_id",
            "Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "tools": [{"name": "f"}]}),
            "tools.0.input_schema",
            "Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "tool_choice": {"type": "some"}}),
            "tool_choice.type",
            "\"some\"",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "tool_choice": {"type": "tool"}}),
            "tool_choice.name",
            "Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "thinking": {"type": "enabled"}}),
            "thinking.budget_tokens",
            "Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "stop_sequences": "END"}),
            "stop_sequences",
            "an array",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "temperature": "hot"}),
            "temperature",
            "a number",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "system": 3}),
            "system",
            "a string",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": hi, "mcp_servers": [{}]}),
            "mcp_servers",
            "not served",
        ),
    ] {
        let e = refused(body.clone());
        assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(e.param.as_deref(), Some(param), "{body}");
        assert!(e.message.contains(says), "{body}: {}", e.message);
        let shaped = e.body::<Messages>();
        assert_eq!(shaped["type"], "error");
        assert_eq!(shaped["error"]["type"], "invalid_request_error");
        assert_eq!(shaped["error"]["message"], e.message.as_str());
    }
    assert_eq!(refused(json!([1])).status, StatusCode::BAD_REQUEST);
}

#[test]
fn errors_take_anthropics_types_by_status() {
    for (status, kind) in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (529, "overloaded_error"),
    ] {
        let status = StatusCode::from_u16(status).unwrap();
        assert_eq!(
            super::error_body(status, "why"),
            json!({"type": "error", "error": {"type": kind, "message": "why"}})
        );
    }
    let gateway = crate::error::ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "the model \"x\" does not exist here",
    );
    assert_eq!(
        Messages::error_body(&gateway)["error"]["type"],
        "not_found_error"
    );
}

/// A body as Claude Code 2.1 sends it (its shape and fields, shortened texts).
pub(crate) fn claude_code_body() -> Value {
    json!({
        "model": "claude-sonnet-gateway",
        "max_tokens": 32000,
        "stream": true,
        "metadata": {"user_id": "{\"device_id\":\"d1\",\"session_id\":\"s1\"}"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>Be careful.</system-reminder>"},
                {"type": "text", "text": "List the files.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [
                {"type": "text", "text": "# Environment\nPrimary working directory: /tmp/w"}]}
        ],
        "tools": [
            {"name": "Bash", "description": "Runs a shell command.", "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "properties": {"command": {"type": "string"}}, "required": ["command"]}},
            {"name": "ToolSearch", "description": "Fetches deferred tools.", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
             "cache_control": {"type": "ephemeral"}},
            {"name": "DeferredToolPlaceholder", "description": "Never call this tool.", "input_schema": {"type": "object", "properties": {}}, "defer_loading": true}
        ]
    })
}

#[test]
fn claude_codes_body_is_served_with_its_system_turn_in_place() {
    let t = ok(claude_code_body());
    let chat = t.chat();
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(
        messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["system", "user", "system"]
    );
    assert_eq!(
        messages[0]["content"],
        "x-anthropic-billing-header: cc_version=2.1.328;\n\nYou are a coding agent."
    );
    assert_eq!(
        messages[2]["content"],
        "# Environment\nPrimary working directory: /tmp/w"
    );
    assert_eq!(t.chat()["max_tokens"], 32000);
    // Adaptive thinking: no effort for Chat Completions, the object for an Anthropic upstream.
    assert!(t.chat().get("reasoning_effort").is_none());
    assert_eq!(t.native["thinking"]["type"], "adaptive");
    assert!(t.reply.reasoning);
    // Every tool is a function; what only Anthropic knows (`defer_loading`, `cache_control`,
    // `context_management`, `output_config`, `metadata`) is left out.
    let chat = t.chat();
    let tools = chat["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    assert!(t.hosted.is_empty());
    let text = t.chat().to_string();
    for absent in [
        "defer_loading",
        "cache_control",
        "context_management",
        "output_config",
        "metadata",
    ] {
        assert!(!text.contains(absent), "{absent} in {text}");
    }
    // The body counts too (count_tokens has no max_tokens).
    let mut count = claude_code_body();
    count.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(
        to_chat_for_count(&count).unwrap().chat()["messages"],
        t.chat()["messages"]
    );
    // Each upstream API takes the system turn at its place.
    let mut chat = t.chat().clone();
    chat.as_object_mut().unwrap().extend(t.native.clone());
    let anthropic = Dialect::Anthropic.request_from_chat(&chat).unwrap();
    assert_eq!(anthropic["system"], messages[0]["content"]);
    assert_eq!(anthropic["messages"][1]["role"], "system");
    assert_eq!(anthropic["thinking"]["type"], "adaptive");
    let responses = Dialect::Responses.request_from_chat(&t.chat()).unwrap();
    assert_eq!(responses["input"][1]["role"], "system");
    assert_eq!(responses["instructions"], messages[0]["content"]);
}

#[test]
fn server_tools_are_left_for_the_models_rule() {
    let t = ok(
        json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}},
                  {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}),
    );
    assert_eq!(t.chat()["tools"].as_array().unwrap().len(), 1);
    assert_eq!(
        t.hosted,
        [Hosted {
            param: "tools.1.type".into(),
            kind: "web_search_20250305".into()
        }]
    );
    let shaped = t.hosted[0].refused("m").body::<Messages>();
    assert_eq!(shaped["error"]["type"], "invalid_request_error");
}

#[test]
fn message_start_names_the_prompts_tokens() {
    let mut reply = ok(claude_code_body()).reply;
    reply.input_tokens = Some(1234);
    let mut encoder = MessagesEncoder::new(&reply);
    let mut out = Vec::new();
    encoder.start(&mut out);
    let text = String::from_utf8(out).unwrap();
    let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    let start: Value = serde_json::from_str(data).unwrap();
    assert_eq!(start["message"]["usage"]["input_tokens"], 1234);
}

#[test]
fn claude_codes_tool_changes_and_tool_references_are_served() {
    let t = ok(json!({"model": "m", "max_tokens": 5,
    "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "find the slack tool"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch", "input": {"query": "slack"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
            "content": [{"type": "tool_reference", "tool_name": "slack_send"}]}]},
        {"role": "system", "content": [
            {"type": "text", "text": "Tools changed."},
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition":
                {"name": "slack_send", "description": "Send.", "input_schema": {"type": "object"}}}},
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition":
                {"name": "Bash", "input_schema": {"type": "object"}}}},
            {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Read"}},
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Old"}}]},
        {"role": "system", "content": [
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Other"}}]}
    ]}));
    let chat = t.chat();
    let names: Vec<&str> = (chat["tools"].as_array().unwrap().iter())
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Bash", "slack_send"]);
    let chat = t.chat();
    let messages = chat["messages"].as_array().unwrap();
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "t1", "content": "Tool slack_send is available."})
    );
    // A system turn of tool changes alone leaves no message.
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[3],
        json!({"role": "system", "content": "Tools changed."})
    );
    // A definition without its schema is named where it is.
    let e = refused(json!({"model": "m", "max_tokens": 5, "messages": [
        {"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_definition",
            "definition": {"name": "x"}}}]}]}));
    assert_eq!(
        e.param.as_deref(),
        Some("messages.0.content.0.tool.definition.input_schema")
    );
}

/// A tool's schema is copied as the client sent it (its key order, its spacing), never
/// parsed: each tool is translated on its own, and `metadata` and unknown fields are not
/// read at all.
#[test]
fn tool_schemas_are_copied_as_sent() {
    let text = br#"{"model": "m", "max_tokens": 5, "metadata": {"user_id": "u"}, "x_unknown": [1],
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "b", "description": null, "input_schema": {"type": "object", "properties": {"z": {}, "a": {}}}},
                  {"name": "c", "description": "C", "input_schema": {"properties" :{}}, "cache_control": {"type": "ephemeral"}}]}"#;
    let body = crate::api::parse_body(&bytes::Bytes::from_static(text)).unwrap();
    let t = super::to_chat(&body).unwrap();
    assert_eq!(
        std::str::from_utf8(&t.chat["tools"]).unwrap(),
        r#"[{"function":{"name":"b","parameters":{"type": "object", "properties": {"z": {}, "a": {}}}},"type":"function"},{"function":{"description":"C","name":"c","parameters":{"properties" :{}}},"type":"function"}]"#
    );
    assert!(!t.chat.contains_key("metadata") && !t.chat.contains_key("x_unknown"));
}
