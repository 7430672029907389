//! The translation of Responses requests: each field, and each refusal a 400 naming it.

use super::*;
use crate::api::Encoder;
use crate::api::Hosted;

/// A test's body translated as the gateway translates it (split into its fields first).
fn to_chat(body: &Value) -> Result<Translated, IngressError> {
    super::to_chat(&crate::api::fields_of(body)?)
}

fn ok(body: Value) -> Translated {
    to_chat(&body).unwrap_or_else(|e| panic!("{body}: {e}"))
}

#[test]
fn a_responses_request_becomes_a_chat_request() {
    let t = ok(json!({
        "model": "gpt-5-mini", "instructions": "Be brief.", "stream": true,
        "max_output_tokens": 300, "temperature": 0.5, "top_p": 1, "store": false,
        "user": "u1", "metadata": {"k": "v"}, "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": true}, "verbosity": "low"},
        "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Weather here?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "low"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "4C"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "12:00"}]},
            {"type": "function_call", "call_id": "call_3", "name": "get_time", "arguments": "{}"}
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object"}, "strict": true}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "choicewise": {"samples": 2, "select": "vote"}
    }));
    assert_eq!(
        t.chat(),
        json!({
            "model": "gpt-5-mini", "stream": true, "max_tokens": 300, "temperature": 0.5,
            "top_p": 1, "user": "u1",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "Use tools."},
                {"role": "user", "content": [
                    {"type": "text", "text": "Weather here?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR", "detail": "low"}}]},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "4C"},
                {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_3", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}, "strict": true}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": true}},
            "verbosity": "low",
            "reasoning_effort": "low",
            "choicewise": {"samples": 2, "select": "vote"}
        })
    );
    assert!(t.stream && t.reply.reasoning);
    assert_eq!(t.native["reasoning"]["summary"], "auto");
    assert_eq!(&t.reply.echo["instructions"][..], br#""Be brief.""#);
    assert_eq!(&t.reply.echo["max_output_tokens"][..], b"300");
    // A string input is one user message; nothing asked, nothing added.
    // A tool choice without tools is not sent (Chat Completions refuses it).
    let t = ok(json!({"model": "m", "input": "hi", "tool_choice": "required", "reasoning": null}));
    assert_eq!(
        t.chat(),
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    );
    assert!(!t.stream && !t.reply.reasoning);
    let t = ok(
        json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}],
        "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}}),
    );
    assert_eq!(
        t.chat()["tool_choice"],
        json!({"type": "allowed_tools", "allowed_tools": {"mode": "required",
               "tools": [{"type": "function", "function": {"name": "f"}}]}})
    );
}

#[test]
fn each_refusal_is_a_400_naming_the_field() {
    for (body, param, says) in [
        (
            json!({"model": "m", "input": "hi", "store": true}),
            "store",
            "no state",
        ),
        (
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
            "no state",
        ),
        (
            json!({"model": "m", "input": "hi", "conversation": "conv_1"}),
            "conversation",
            "no state",
        ),
        (
            json!({"model": "m", "input": "hi", "background": true}),
            "background",
            "poll",
        ),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "namespace", "tools": []}]}),
            "tools[0].name",
            "Field required",
        ),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}),
            "tools[0].tools[0].name",
            "Field required",
        ),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search", "name": "w"}]}]}),
            "tools[0].tools[0].type",
            "only function tools",
        ),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "function"}]}),
            "tools[0].name",
            "Field required",
        ),
        (
            json!({"model": "m", "input": "hi", "tool_choice": {"type": "web_search_preview"}}),
            "tool_choice.type",
            "only function",
        ),
        (
            json!({"model": "m", "input": "hi", "tool_choice": "any"}),
            "tool_choice",
            "\"any\"",
        ),
        (json!({"model": "m"}), "input", "Field required"),
        (json!({"input": "hi"}), "model", "Field required"),
        (
            json!({"model": "m", "input": 3}),
            "input",
            "a string or an array",
        ),
        (
            json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}),
            "input[0].type",
            "item_reference",
        ),
        (
            json!({"model": "m", "input": [{"type": "web_search_call", "id": "ws_1"}]}),
            "input[0].type",
            "\"web_search_call\"",
        ),
        (
            json!({"model": "m", "input": [{"role": "tool", "content": "x"}]}),
            "input[0].role",
            "\"tool\"",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0].type",
            "\"input_file\"",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}),
            "input[0].content[0].file_id",
            "no files",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}),
            "input[0].call_id",
            "Field required",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "name": "f"}]}),
            "input[0]",
            "call_id",
        ),
        (
            json!({"model": "m", "input": "hi", "max_output_tokens": -1}),
            "max_output_tokens",
            "1 or more",
        ),
        (
            json!({"model": "m", "input": "hi", "text": {"format": {"type": "xml"}}}),
            "text.format.type",
            "\"xml\"",
        ),
        (
            json!({"model": "m", "input": "hi", "reasoning": "high"}),
            "reasoning",
            "an object",
        ),
        // A type missing is said so, never quoted as `""` (issue 63).
        (
            json!({"model": "m", "input": "hi", "text": {"format": {"name": "x"}}}),
            "text.format.type",
            "Field required",
        ),
        (
            json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}],
                   "tool_choice": {"name": "f"}}),
            "tool_choice.type",
            "Field required",
        ),
    ] {
        let e = match to_chat(&body) {
            Ok(t) => panic!("{body} was accepted: {}", t.chat()),
            Err(e) => e,
        };
        assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(e.param.as_deref(), Some(param), "{body}");
        assert!(e.message.contains(says), "{body}: {}", e.message);
        let shaped = e.body::<Responses>();
        assert_eq!(shaped["error"]["type"], "invalid_request_error");
        assert_eq!(shaped["error"]["param"], param);
        assert_eq!(shaped["error"]["message"], e.message.as_str());
        assert!(shaped["error"]["code"].is_string());
    }
    // `store: false` and a null previous_response_id are fine.
    ok(json!({"model": "m", "input": "hi", "store": false, "previous_response_id": null}));
}

#[test]
fn errors_take_openais_shape() {
    let body = super::error_object(StatusCode::UNAUTHORIZED, "no key", None, None, None);
    assert_eq!(
        body,
        json!({"error": {"message": "no key", "type": "invalid_request_error", "param": null, "code": null}})
    );
    let body = super::error_object(StatusCode::BAD_GATEWAY, "down", None, None, None);
    assert_eq!(body["error"]["type"], "server_error");
    let gateway =
        crate::error::ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "busy")
            .code("too_many_requests");
    assert_eq!(
        Responses::error_body(&gateway),
        json!({"error": {"message": "busy", "type": "rate_limit_error", "param": null, "code": "too_many_requests"}})
    );
    let bad = super::super::parse_body(&bytes::Bytes::from_static(b"{")).unwrap_err();
    assert_eq!(bad.body::<Responses>()["error"]["code"], "invalid_json");
    assert!(super::super::parse_body(&bytes::Bytes::from_static(b"[]")).is_err());
}

#[test]
fn namespace_tools_are_flat_functions_whose_calls_keep_their_namespace() {
    let t = ok(json!({
        "model": "m", "stream": true, "store": false,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k1",
        "client_metadata": {"x-codex-window-id": "w"},
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "spawn one"}]},
            {"type": "function_call", "call_id": "call_1", "name": "spawn_agent", "namespace": "agents", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "spawned"}
        ],
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
            // A function of the client's own that already has the flat name.
            {"type": "function", "name": "agents__spawn_agent", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [
                {"type": "function", "name": "spawn_agent", "description": "Spawn.", "strict": false, "parameters": {"type": "object"}},
                {"type": "function", "name": "close_agent", "parameters": {"type": "object"}}]},
            {"type": "web_search", "external_web_access": false}
        ]
    }));
    let chat = t.chat();
    let names: Vec<&str> = (chat["tools"].as_array().unwrap().iter())
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "exec_command",
            "agents__spawn_agent",
            "agents__spawn_agent_2",
            "agents__close_agent"
        ]
    );
    assert_eq!(t.chat()["tools"][2]["function"]["description"], "Spawn.");
    assert_eq!(
        t.reply.namespaced["agents__spawn_agent_2"],
        ("agents".to_string(), "spawn_agent".to_string())
    );
    assert!(!t.reply.namespaced.contains_key("agents__spawn_agent"));
    // The client's namespaced call goes upstream under the flat name.
    assert_eq!(
        t.chat()["messages"][2]["tool_calls"][0]["function"]["name"],
        "agents__spawn_agent_2"
    );
    assert_eq!(t.chat()["messages"][0]["role"], "system");
    assert_eq!(t.chat()["prompt_cache_key"], "k1");
    // The hosted tool is left for the model's rule.
    assert_eq!(
        t.hosted,
        [Hosted {
            param: "tools[3].type".into(),
            kind: "web_search".into()
        }]
    );
    assert!(!t.chat().to_string().contains("web_search"));
    // A tool choice naming a namespace's function names its flat name.
    let mut body = json!({"model": "m", "input": "hi",
        "tool_choice": {"type": "function", "name": "close_agent", "namespace": "agents"},
        "tools": [{"type": "namespace", "name": "agents", "tools": [
            {"type": "function", "name": "close_agent"}]}]});
    assert_eq!(
        ok(body.clone()).chat()["tool_choice"],
        json!({"type": "function", "function": {"name": "agents__close_agent"}})
    );
    body["tool_choice"] = json!({"type": "allowed_tools", "mode": "auto", "tools": [
        {"type": "function", "name": "close_agent", "namespace": "agents"}]});
    assert_eq!(
        ok(body).chat()["tool_choice"]["allowed_tools"]["tools"][0]["function"]["name"],
        "agents__close_agent"
    );
    let refused = t.hosted[0].refused("m");
    assert_eq!(refused.param.as_deref(), Some("tools[3].type"));
    assert!(
        refused.message.contains("\"web_search\" is a hosted tool")
            && refused.message.contains("hosted_tools = \"refuse\""),
        "{}",
        refused.message
    );
}

#[test]
fn a_namespaced_call_is_answered_in_its_namespace() {
    use choicewise_core::{CallRef, ChoiceEvent, ChoiceOutput, FunctionCallEvent};
    let t = ok(json!({"model": "m", "input": "hi", "tools": [
        {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "close_agent"}]},
        {"type": "function", "name": "plain"}]}));
    let reply = t.reply;
    // Streamed.
    let mut encoder = ResponsesEncoder::new(&reply);
    let mut out = Vec::new();
    encoder.start(&mut out);
    let call = CallRef {
        kind: choicewise_core::CallKind::Tool,
        position: 0,
    };
    for event in [
        ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
            call,
            id: Some("call_9".into()),
            name: Some("agents__close_agent".into()),
            custom: false,
        }),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
            call,
            fragment: "{\"id\":1}".into(),
        }),
        ChoiceEvent::Finished("tool_calls".into()),
    ] {
        encoder.event(&event, &mut out);
    }
    encoder.end(&crate::api::Tokens::default(), None, None, &mut out);
    let text = String::from_utf8(out).unwrap();
    let events: Vec<Value> = (text.lines())
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let added = events
        .iter()
        .find(|e| e["type"] == "response.output_item.added")
        .unwrap();
    assert_eq!(added["item"]["name"], "close_agent");
    assert_eq!(added["item"]["namespace"], "agents");
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "response.completed");
    let item = &completed["response"]["output"][0];
    assert_eq!(
        (
            &item["name"],
            &item["namespace"],
            &item["call_id"],
            &item["arguments"]
        ),
        (
            &json!("close_agent"),
            &json!("agents"),
            &json!("call_9"),
            &json!("{\"id\":1}")
        )
    );
    // Not streamed; a call of a plain function has no namespace.
    let mut output = ChoiceOutput::default();
    output.finish_reason = Some("tool_calls".into());
    output.message.tool_calls = serde_json::from_value(json!([
        {"id": "call_1", "type": "function", "function": {"name": "agents__close_agent", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "plain", "arguments": "{}"}}]))
    .unwrap();
    let end = OutputEnd::Finished("tool_calls".into());
    let body = message(&reply, &output, &end, &crate::api::Tokens::default(), None);
    assert_eq!(body["output"][0]["name"], "close_agent");
    assert_eq!(body["output"][0]["namespace"], "agents");
    assert_eq!(body["output"][1]["name"], "plain");
    assert!(body["output"][1].get("namespace").is_none());
}

#[test]
fn custom_tools_are_functions_of_one_string_answered_as_custom_calls() {
    use choicewise_core::{CallKind, CallRef, ChoiceEvent, ChoiceOutput, FunctionCallEvent};
    let t = ok(json!({"model": "m", "stream": true,
        "input": [
            {"type": "message", "role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "call_p", "output": "Done!"}],
        "tools": [
            {"type": "custom", "name": "apply_patch", "description": "Edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"}},
            {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]}));
    let function = &t.chat()["tools"][0]["function"];
    assert_eq!(function["name"], "apply_patch");
    assert_eq!(
        function["parameters"]["properties"]["input"]["type"],
        "string"
    );
    let description = function["description"].as_str().unwrap();
    assert!(
        description.starts_with("Edit files.") && description.contains("start: begin_patch"),
        "{description}"
    );
    assert!(t.hosted.is_empty());
    assert_eq!(
        t.chat()["messages"][1]["tool_calls"][0]["function"],
        json!({"name": "apply_patch", "arguments": "{\"input\":\"*** Begin Patch\"}"})
    );
    assert_eq!(
        t.chat()["messages"][2],
        json!({"role": "tool", "tool_call_id": "call_p", "content": "Done!"})
    );
    // Streamed: a custom_tool_call item, its input whole when the call closes.
    let reply = t.reply;
    let mut encoder = ResponsesEncoder::new(&reply);
    let mut out = Vec::new();
    let call = CallRef {
        kind: CallKind::Tool,
        position: 0,
    };
    for event in [
        ChoiceEvent::FunctionCall(FunctionCallEvent::Started {
            call,
            id: Some("call_q".into()),
            name: Some("apply_patch".into()),
            custom: false,
        }),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
            call,
            fragment: "{\"input\": \"*** Begin".into(),
        }),
        ChoiceEvent::FunctionCall(FunctionCallEvent::Arguments {
            call,
            fragment: " Patch\\n\"}".into(),
        }),
        ChoiceEvent::Finished("tool_calls".into()),
    ] {
        encoder.event(&event, &mut out);
    }
    encoder.end(&crate::api::Tokens::default(), None, None, &mut out);
    let text = String::from_utf8(out).unwrap();
    let events: Vec<Value> = (text.lines())
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(
        !kinds.contains(&"response.function_call_arguments.delta"),
        "{kinds:?}"
    );
    let done = events
        .iter()
        .find(|e| e["type"] == "response.custom_tool_call_input.done")
        .unwrap();
    assert_eq!(done["input"], "*** Begin Patch\n");
    let item = &events.last().unwrap()["response"]["output"][0];
    assert_eq!(item["type"], "custom_tool_call");
    assert_eq!(
        (&item["name"], &item["call_id"], &item["input"]),
        (
            &json!("apply_patch"),
            &json!("call_q"),
            &json!("*** Begin Patch\n")
        )
    );
    assert!(item["id"].as_str().unwrap().starts_with("ctc_"));
    // Not streamed.
    let mut output = ChoiceOutput::default();
    output.finish_reason = Some("tool_calls".into());
    output.message.tool_calls = serde_json::from_value(json!([
        {"id": "call_r", "type": "function", "function": {"name": "apply_patch", "arguments": "{\"input\":\"x\"}"}}]))
    .unwrap();
    let end = OutputEnd::Finished("tool_calls".into());
    let body = message(&reply, &output, &end, &crate::api::Tokens::default(), None);
    assert_eq!(body["output"][0]["type"], "custom_tool_call");
    assert_eq!(body["output"][0]["input"], "x");
}

/// Every event of a streamed answer as the body writes it: each call's output and then
/// what it left owed, a piece at a time; the events, and the longest write.
fn drive(
    encoder: &mut ResponsesEncoder,
    events: &[choicewise_core::ChoiceEvent],
) -> (Vec<Value>, usize) {
    let mut writes: Vec<Vec<u8>> = Vec::new();
    let drain = |encoder: &mut ResponsesEncoder, out: Vec<u8>, writes: &mut Vec<Vec<u8>>| {
        writes.push(out);
        loop {
            let mut more = Vec::new();
            if !encoder.more(&mut more) {
                break;
            }
            writes.push(more);
        }
    };
    let mut out = Vec::new();
    encoder.start(&mut out);
    drain(encoder, out, &mut writes);
    for event in events {
        let mut out = Vec::new();
        encoder.event(event, &mut out);
        drain(encoder, out, &mut writes);
    }
    let mut out = Vec::new();
    encoder.end(&crate::api::Tokens::default(), None, None, &mut out);
    drain(encoder, out, &mut writes);
    let longest = writes.iter().map(Vec::len).max().unwrap_or(0);
    let text = String::from_utf8(writes.concat()).unwrap();
    let events = (text.split("\n\n"))
        .filter_map(|frame| frame.split_once("\ndata: "))
        .map(|(_, data)| serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data:.300}")))
        .collect();
    (events, longest)
}

#[tokio::test]
async fn long_texts_are_written_whole_in_every_event_a_bounded_piece_at_a_time() {
    use futures::StreamExt;
    let reply = ok(json!({"model": "m", "input": "hi", "stream": true,
        "tools": [{"type": "function", "name": "edit"}]}))
    .reply;
    // Text with every kind of escape, in fragments short (copied) and long (shared).
    let unit = "é \"q\" \\ \n\t\u{1}x ";
    let content = unit.repeat(40_000);
    let arguments = format!("{{\"text\":{}}}", serde_json::to_string(&content).unwrap());
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    let mut sse = String::new();
    let mut rest = content.as_str();
    let mut size = 1;
    while !rest.is_empty() {
        let mut at = rest.len().min(size);
        while !rest.is_char_boundary(at) {
            at += 1;
        }
        sse.push_str(&chunk(json!({"content": &rest[..at]}), Value::Null));
        rest = &rest[at..];
        size = if size > 8192 { 1 } else { size * 3 };
    }
    sse.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "edit", "arguments": ""}}]}),
        Value::Null,
    ));
    for piece in arguments.as_bytes().chunks(20_000) {
        let piece = std::str::from_utf8(piece).unwrap();
        sse.push_str(&chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
            Value::Null,
        ));
    }
    sse.push_str(&chunk(json!({}), json!("tool_calls")));
    sse.push_str("data: [DONE]\n\n");
    let reads = futures::stream::iter([Ok::<_, std::io::Error>(sse)]);
    let completions = choicewise_core::Completions::new(choicewise_core::Source::sse(reads));
    let choice = completions.choice(0).await.unwrap();
    let events: Vec<_> = choice.events().map(Result::unwrap).collect().await;
    let mut encoder = ResponsesEncoder::new(&reply);
    let (written, longest) = drive(&mut encoder, &events);
    assert!(
        longest < 2 * 1024 * 1024,
        "a write of {longest} bytes, for texts of {} and {}",
        content.len(),
        arguments.len()
    );
    let of = |kind: &str| {
        (written.iter())
            .filter(|e| e["type"] == kind)
            .collect::<Vec<_>>()
    };
    let deltas: String = (of("response.output_text.delta").iter())
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, content);
    assert_eq!(of("response.output_text.done")[0]["text"], content);
    assert_eq!(of("response.content_part.done")[0]["part"]["text"], content);
    let arguments_deltas: String = (of("response.function_call_arguments.delta").iter())
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(arguments_deltas, arguments);
    assert_eq!(
        of("response.function_call_arguments.done")[0]["arguments"],
        arguments
    );
    let items = of("response.output_item.done");
    assert_eq!(items[0]["item"]["content"][0]["text"], content);
    assert_eq!(items[1]["item"]["arguments"], arguments);
    let completed = of("response.completed");
    let output = &completed[0]["response"]["output"];
    assert_eq!(output[0]["content"][0]["text"], content);
    assert_eq!(output[1]["arguments"], arguments);
    // Every event once, in order.
    let numbers: Vec<u64> = (written.iter())
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..numbers.len() as u64).collect::<Vec<_>>());
    assert_eq!(written.last().unwrap()["type"], "response.completed");
}

#[test]
fn the_whole_answer_is_written_as_its_tree_would_be() {
    use choicewise_core::ChoiceOutput;
    let reply = ok(
        json!({"model": "m", "input": "hi", "instructions": "be brief",
        "tools": [{"type": "function", "name": "edit"}]}),
    )
    .reply;
    let mut output = ChoiceOutput::default();
    output.finish_reason = Some("tool_calls".into());
    output.message.content = Some("a \"quoted\"\n text \u{1}".repeat(1000));
    output.message.refusal = Some("no\tway".into());
    output.message.tool_calls = serde_json::from_value(json!([
        {"id": "call_1", "type": "function", "function": {"name": "edit", "arguments": "{\"a\": \"\\u0000\"}"}}]))
    .unwrap();
    let usage = crate::api::Tokens::default();
    let end = OutputEnd::Finished("tool_calls".into());
    let summary = crate::upstream::engine::Summary {
        samples: Some(1),
        ..Default::default()
    };
    let written = object_text(&reply, &output, &end, &usage, Some(&summary));
    let tree = message(&reply, &output, &end, &usage, Some(&summary));
    let echoed = super::object::Echoed {
        value: &tree,
        echo: &reply.echo,
    };
    let mut tree = serde_json::to_value(&echoed).unwrap();
    let mut read: Value = serde_json::from_slice(&written).unwrap();
    // The ids are made anew for each answer.
    for value in [&mut tree, &mut read] {
        value["id"] = json!("resp");
        for item in value["output"].as_array_mut().unwrap() {
            item["id"] = json!("item");
        }
    }
    assert!(read == tree, "{read:.3000}\n{tree:.3000}");
    assert_eq!(read["instructions"], "be brief");
    assert_eq!(
        read["output"][1]["arguments"],
        output.message.tool_calls[0].function.arguments
    );
}
