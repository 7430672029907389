//! Custom tools (`"type": "custom"`, free-text input: Codex's `apply_patch`) of a Chat
//! Completions client, over every upstream API, both ways: the tool, a call of it in the
//! history, its result and a tool choice naming it reach the upstream with their name and
//! input (Responses' own `custom` tools and `custom_tool_call` items; for Anthropic, a tool
//! of one string property, `input`), and the upstream's call of it comes back to the client
//! as a Chat custom call, streamed and not.

use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{no_env, post_chat, serve, upstream_toml};

const PATCH: &str = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n";
const GRAMMAR: &str = "start: \"*** Begin Patch\" /(.|\\n)*/";

/// An SSE event named by its data's `type`.
fn named(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

/// The upstream's answer in `api`: one call of `apply_patch` whose input is PATCH, sent in
/// two pieces as each API streams it.
fn answer(api: &str) -> String {
    let (a, b) = PATCH.split_at(10);
    match api {
        "chat" => {
            let chunk = |delta: Value, finish: Value| {
                let c = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                format!("data: {c}\n\n")
            };
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
                    "type": "custom", "custom": {"name": "apply_patch", "input": a}}]}),
                Value::Null,
            ) + &chunk(
                json!({"tool_calls": [{"index": 0, "custom": {"input": b}}]}),
                Value::Null,
            ) + &chunk(json!({}), json!("tool_calls"))
                + "data: [DONE]\n\n"
        }
        "anthropic" => {
            let json = json!({ "input": PATCH }).to_string();
            let (x, y) = json.split_at(15);
            [
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                    "role": "assistant", "model": "up", "content": [], "stop_reason": null,
                    "usage": {"input_tokens": 5, "output_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block":
                    {"type": "tool_use", "id": "toolu_1", "name": "apply_patch", "input": {}}}),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": x}}),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": y}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 9}}),
                json!({"type": "message_stop"}),
            ]
            .into_iter()
            .map(named)
            .collect()
        }
        _ => {
            let item = |status: &str, input: &str| {
                json!({"id": "ctc_1", "type": "custom_tool_call", "status": status,
                    "call_id": "call_1", "name": "apply_patch", "input": input})
            };
            [
                json!({"type": "response.created", "sequence_number": 0, "response":
                    {"id": "resp_1", "object": "response", "created_at": 1,
                    "status": "in_progress", "model": "up", "output": []}}),
                json!({"type": "response.output_item.added", "sequence_number": 1,
                    "output_index": 0, "item": item("in_progress", "")}),
                json!({"type": "response.custom_tool_call_input.delta", "sequence_number": 2,
                    "item_id": "ctc_1", "output_index": 0, "delta": a}),
                json!({"type": "response.custom_tool_call_input.delta", "sequence_number": 3,
                    "item_id": "ctc_1", "output_index": 0, "delta": b}),
                json!({"type": "response.custom_tool_call_input.done", "sequence_number": 4,
                    "item_id": "ctc_1", "output_index": 0, "input": PATCH}),
                json!({"type": "response.output_item.done", "sequence_number": 5,
                    "output_index": 0, "item": item("completed", PATCH)}),
                json!({"type": "response.completed", "sequence_number": 6, "response":
                    {"id": "resp_1", "object": "response", "created_at": 1,
                    "status": "completed", "model": "up", "output": [item("completed", PATCH)],
                    "usage": {"input_tokens": 5, "output_tokens": 9, "total_tokens": 14}}}),
            ]
            .into_iter()
            .map(named)
            .collect()
        }
    }
}

/// A Chat client's request: the custom tool (with a grammar), a call of it and its result in
/// the history, the tool choice naming it.
fn request(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "add a.txt"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0",
                "type": "custom", "custom": {"name": "apply_patch", "input": PATCH}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "Done."},
            {"role": "user", "content": "again"}],
        "tools": [{"type": "custom", "custom": {"name": "apply_patch",
            "description": "Edit files.",
            "format": {"type": "grammar", "grammar": {"definition": GRAMMAR,
                "syntax": "lark"}}}}],
        "tool_choice": {"type": "custom", "custom": {"name": "apply_patch"}}})
}

/// What is wrong with the request the upstream of `api` was sent, if anything.
fn sent_wrong(api: &str, sent: &Value) -> Option<String> {
    let ok = match api {
        "chat" => {
            sent["tools"] == request(false)["tools"]
                && sent["messages"][1]["tool_calls"][0]["custom"]["input"] == PATCH
        }
        "anthropic" => {
            let tool = &sent["tools"][0];
            let call = &sent["messages"][1]["content"][0];
            tool["name"] == "apply_patch"
                && tool["input_schema"]["properties"]["input"]["type"] == "string"
                && tool["description"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("Edit files.") && d.contains(GRAMMAR))
                && call["type"] == "tool_use"
                && call["name"] == "apply_patch"
                && call["input"] == json!({ "input": PATCH })
                && sent["messages"][2]["content"][0]["tool_use_id"] == "call_0"
                && sent["tool_choice"] == json!({"type": "tool", "name": "apply_patch"})
        }
        _ => {
            sent["tools"][0]
                == json!({"type": "custom", "name": "apply_patch", "description": "Edit files.",
                    "format": {"type": "grammar", "definition": GRAMMAR, "syntax": "lark"}})
                && sent["input"][1]
                    == json!({"type": "custom_tool_call", "call_id": "call_0",
                        "name": "apply_patch", "input": PATCH})
                && sent["input"][2]
                    == json!({"type": "custom_tool_call_output", "call_id": "call_0",
                        "output": "Done."})
                && sent["tool_choice"] == json!({"type": "custom", "name": "apply_patch"})
        }
    };
    (!ok).then(|| sent.to_string())
}

/// The custom call the Chat client got (its name and input), streamed or not.
fn call_got(stream: bool, text: &str) -> Option<(String, String)> {
    if !stream {
        let v: Value = serde_json::from_str(text).ok()?;
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        (call["type"] == "custom").then_some(())?;
        return Some((
            call["custom"]["name"].as_str()?.into(),
            call["custom"]["input"].as_str()?.into(),
        ));
    }
    let (mut name, mut input, mut custom) = (String::new(), String::new(), false);
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        for call in v["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            custom |= call["type"] == "custom";
            if call.get("function").is_some() {
                return None;
            }
            name += call["custom"]["name"].as_str().unwrap_or_default();
            input += call["custom"]["input"].as_str().unwrap_or_default();
        }
    }
    custom.then_some((name, input))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_tool_reaches_every_upstream_api_and_comes_back_custom() {
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses"] {
        let upstream = TestServer::builder()
            .body(answer(api))
            .start()
            .await
            .unwrap();
        let toml = format!(
            "[[models]]\nname = \"m\"\n{}",
            upstream_toml(api, &upstream.base_url(), "")
        );
        let (addr, _) = serve(&toml, no_env).await;
        for stream in [false, true] {
            let r = post_chat(addr, &request(stream)).await;
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            let what = format!("over {api}, stream {stream}");
            let sent = upstream.requests().last().and_then(|r| r.json.clone());
            match sent {
                Some(sent) => {
                    if let Some(wrong) = sent_wrong(api, &sent) {
                        failed.push(format!("{what}: the upstream got {wrong}"));
                    }
                }
                None => failed.push(format!("{what}: the upstream got nothing")),
            }
            let got = call_got(stream, &text);
            if status != 200 || got != Some(("apply_patch".into(), PATCH.into())) {
                failed.push(format!("{what}: {status} {got:?} {text}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
