//! What a translation between APIs keeps (issue 63): numbers as written (a 30-digit integer
//! in a tool call's arguments, a tool's input or schema arrives digit for digit, never as a
//! float), in every direction, requests and answers, streamed and not. Each test serves a
//! gateway over loopback HTTP with a model per upstream API.

use std::net::SocketAddr;

use choicewise_testserver::{TestServer, tool_call_answer};
use serde_json::Value;

use crate::common::{no_env, serve, start};

/// An SSE event named by its data's `type`, as the Anthropic and Responses APIs send them.
fn named_event(data: &str) -> String {
    let kind: Value = serde_json::from_str(data).unwrap();
    format!(
        "event: {}\ndata: {data}\n\n",
        kind["type"].as_str().unwrap()
    )
}

/// An Anthropic Messages stream of one call of `name` whose arguments are `quoted` (a JSON
/// string of them).
fn anthropic_call(name: &str, quoted: &str) -> String {
    [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"up","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#.to_string(),
        format!(r#"{{"type":"content_block_start","index":0,"content_block":{{"type":"tool_use","id":"toolu_1","name":"{name}","input":{{}}}}}}"#),
        format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"input_json_delta","partial_json":{quoted}}}}}"#),
        r#"{"type":"content_block_stop","index":0}"#.to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#.to_string(),
        r#"{"type":"message_stop"}"#.to_string(),
    ]
    .iter()
    .map(|d| named_event(d))
    .collect()
}

/// A 30-digit integer: no f64 holds it.
const BIG: &str = "123456789012345678901234567890";

/// The upstream's answer in its API: one call of `f` with `{"id": BIG}` as arguments.
fn upstream_answer(api: &str) -> String {
    let args = format!("{{\"id\":{BIG}}}");
    let quoted = serde_json::to_string(&args).unwrap();
    match api {
        "chat" => tool_call_answer("f", &args),
        "anthropic" => anthropic_call("f", &quoted),
        _ => {
            let item = format!(
                r#"{{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":{quoted}}}"#
            );
            [
                r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"up","output":[]}}"#.to_string(),
                r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"f","arguments":""}}"#.to_string(),
                format!(r#"{{"type":"response.function_call_arguments.delta","sequence_number":2,"item_id":"fc_1","output_index":0,"delta":{quoted}}}"#),
                format!(r#"{{"type":"response.function_call_arguments.done","sequence_number":3,"item_id":"fc_1","output_index":0,"arguments":{quoted}}}"#),
                format!(r#"{{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{item}}}"#),
                format!(r#"{{"type":"response.completed","sequence_number":5,"response":{{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"up","output":[{item}],"usage":{{"input_tokens":5,"output_tokens":9,"total_tokens":14}}}}}}"#),
            ]
            .iter()
            .map(|d| named_event(d))
            .collect()
        }
    }
}

/// A client's request in its API (written as text: the integer as written), with a tool
/// call of `f` in its history, its result, and the tool `f` whose schema names BIG.
fn client_request(path: &str, stream: bool) -> String {
    let args = serde_json::to_string(&format!("{{\"id\":{BIG}}}")).unwrap();
    let schema = format!(
        r#"{{"type":"object","properties":{{"id":{{"type":"integer","maximum":{BIG}}}}}}}"#
    );
    match path {
        "/v1/chat/completions" => format!(
            r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"hi"}},
            {{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"f","arguments":{args}}}}}]}},
            {{"role":"tool","tool_call_id":"c1","content":"ok"}}],
            "tools":[{{"type":"function","function":{{"name":"f","parameters":{schema}}}}}]}}"#
        ),
        "/v1/messages" => format!(
            r#"{{"model":"m","max_tokens":100,"stream":{stream},"messages":[{{"role":"user","content":"hi"}},
            {{"role":"assistant","content":[{{"type":"tool_use","id":"c1","name":"f","input":{{"id":{BIG}}}}}]}},
            {{"role":"user","content":[{{"type":"tool_result","tool_use_id":"c1","content":"ok"}}]}}],
            "tools":[{{"name":"f","input_schema":{schema}}}]}}"#
        ),
        _ => format!(
            r#"{{"model":"m","stream":{stream},"input":[{{"role":"user","content":"hi"}},
            {{"type":"function_call","call_id":"c1","name":"f","arguments":{args}}},
            {{"type":"function_call_output","call_id":"c1","output":"ok"}}],
            "tools":[{{"type":"function","name":"f","parameters":{schema}}}]}}"#
        ),
    }
}

async fn post(addr: SocketAddr, path: &str, body: String) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The digits, and no float of them, in `text` (an arguments string escapes nothing in a
/// number, so the digits show as written in the raw text of either form).
fn keeps_digits(text: &str) -> bool {
    text.contains(BIG) && !text.contains("e+29") && !text.contains("1.2345678901234568")
}

/// A 30-digit integer in tool-call arguments, a tool's `input` and a tool's schema arrives
/// digit for digit in every translation: each client API over each upstream API, the
/// request the upstream gets and the answer the client gets, streamed and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_digit_integer_arrives_digit_for_digit_in_every_translation() {
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses"] {
        let upstream = start(TestServer::builder().body(upstream_answer(api))).await;
        let toml = format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, no_env).await;
        for path in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
            for stream in [true, false] {
                let what = format!("{path} over {api}, stream {stream}");
                let (status, answer) = post(addr, path, client_request(path, stream)).await;
                if status != 200 {
                    failed.push(format!("{what}: {status} {answer}"));
                    continue;
                }
                let sent = upstream.requests().last().unwrap().body.clone();
                let sent = String::from_utf8_lossy(&sent).to_string();
                // The history's call and the tool's schema: BIG twice in the request.
                if !keeps_digits(&sent) || sent.matches(BIG).count() < 2 {
                    failed.push(format!("{what}: the upstream got {sent}"));
                }
                if !keeps_digits(&answer) {
                    failed.push(format!("{what}: the client got {answer}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// An Anthropic message that stops without its `stop_reason` is failed as a Chat
/// Completions choice whose stream ends without its `finish_reason` is (never a clean stop
/// of what it had): streamed, the choice ends with `finish_reason: "error"` naming the
/// missing finish; not streamed, a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_without_its_reason_fails_as_a_chat_choice_without_its_finish() {
    let anthropic: String = [
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"up","content":[],"stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ]
    .iter()
    .map(|d| named_event(d))
    .collect();
    let chat = concat!(
        r#"data: {"id":"c","object":"chat.completion.chunk","model":"up","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}"#,
        "\n\ndata: [DONE]\n\n"
    );
    for (api, body) in [("anthropic", anthropic), ("chat", chat.to_string())] {
        let upstream = start(TestServer::builder().body(body)).await;
        let toml = format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, no_env).await;
        let request = |stream: bool| {
            format!(
                r#"{{"model":"m","stream":{stream},"messages":[{{"role":"user","content":"hi"}}]}}"#
            )
        };
        let (status, text) = post(addr, "/v1/chat/completions", request(true)).await;
        assert_eq!(status, 200, "{api}: {text}");
        assert!(text.contains(r#""finish_reason":"error""#), "{api}: {text}");
        assert!(text.contains("without a finish reason"), "{api}: {text}");
        let (status, text) = post(addr, "/v1/chat/completions", request(false)).await;
        assert_eq!(status, 502, "{api}: {text}");
        assert!(text.contains("without a finish reason"), "{api}: {text}");
    }
}

/// A Responses client's `custom` tool, called by the upstream (of any API, as the function
/// of one `input` string it is sent as): the client gets a `custom_tool_call` item with the
/// tool's name and its input, streamed and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_tool_call_keeps_its_name() {
    let args = r#"{"input":"*** Begin Patch\n"}"#;
    let quoted = serde_json::to_string(args).unwrap();
    let anthropic = anthropic_call("apply_patch", &quoted);
    let item = format!(
        r#"{{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"apply_patch","arguments":{quoted}}}"#
    );
    let responses: String = [
        r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"up","output":[]}}"#.to_string(),
        r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"apply_patch","arguments":""}}"#.to_string(),
        format!(r#"{{"type":"response.function_call_arguments.done","sequence_number":2,"item_id":"fc_1","output_index":0,"arguments":{quoted}}}"#),
        format!(r#"{{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":{item}}}"#),
        format!(r#"{{"type":"response.completed","sequence_number":4,"response":{{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"up","output":[{item}],"usage":{{"input_tokens":5,"output_tokens":9,"total_tokens":14}}}}}}"#),
    ]
    .iter()
    .map(|d| named_event(d))
    .collect();
    let mut failed = Vec::new();
    for (api, body) in [
        ("chat", tool_call_answer("apply_patch", args)),
        ("anthropic", anthropic),
        ("responses", responses),
    ] {
        let upstream = start(TestServer::builder().body(body)).await;
        let toml = format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, no_env).await;
        for stream in [true, false] {
            let request = format!(
                r#"{{"model":"m","stream":{stream},"input":"patch it","tools":[{{"type":"custom","name":"apply_patch","description":"Apply a patch"}}]}}"#
            );
            let (status, text) = post(addr, "/v1/responses", request).await;
            let items: Vec<Value> = match stream {
                true => (text.lines())
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .filter(|e| e["type"] == "response.output_item.done")
                    .map(|e| e["item"].clone())
                    .collect(),
                false => serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|r| r["output"].as_array().cloned())
                    .unwrap_or_default(),
            };
            let call = items.iter().find(|i| i["type"] == "custom_tool_call");
            let ok = status == 200
                && call.is_some_and(|c| {
                    c["name"] == "apply_patch" && c["input"] == "*** Begin Patch\n"
                });
            if !ok {
                failed.push(format!("over {api}, stream {stream}: {status} {text}"));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// A lone surrogate, a number beyond an f64's range and nesting deeper than 128 levels are
/// refused alike whatever the model's upstream speaks: each of them in a message, from each
/// client API (and Anthropic's token count), over an upstream of each API, is a 400 in the client's API's shape naming the
/// fault and its field, and never reaches the upstream; the same message without it is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_one_answer_over_every_upstream_api() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let faults = [
        (r#""fine""#, 200, ""),
        (r#""a\ud800b""#, 400, "invalid_unicode"),
        ("1e400", 400, "number_out_of_range"),
        (deep.as_str(), 400, "nesting_too_deep"),
    ];
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses"] {
        let upstream = TestServer::builder()
            .body(upstream_answer(api))
            .start()
            .await
            .unwrap();
        let toml = format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, no_env).await;
        for (path, field) in [
            ("/v1/chat/completions", "messages[0].x"),
            ("/v1/messages", "messages.0.x"),
            ("/v1/messages/count_tokens", "messages.0.x"),
            ("/v1/responses", "input[0].x"),
        ] {
            let list = if path == "/v1/responses" {
                "input"
            } else {
                "messages"
            };
            for (value, want, code) in &faults {
                if path.ends_with("count_tokens") && *want == 200 {
                    // Counted by the upstream or estimated: the faults alone are this test's.
                    continue;
                }
                let body = format!(
                    r#"{{"model":"m","max_tokens":50,"{list}":[{{"role":"user","content":"hi","x":{value}}}]}}"#
                );
                let what = format!("{path} over {api}, {code}");
                let before = upstream.requests().len();
                let (status, text) = post(addr, path, body).await;
                if status != *want {
                    failed.push(format!("{what}: {status} {text}"));
                    continue;
                }
                if *want == 200 {
                    continue;
                }
                let answer: Value = serde_json::from_str(&text).unwrap_or_default();
                let message = answer["error"]["message"].as_str().unwrap_or_default();
                let shaped = match path {
                    "/v1/messages" | "/v1/messages/count_tokens" => {
                        answer["type"] == "error"
                            && answer["error"]["type"] == "invalid_request_error"
                    }
                    _ => {
                        answer["error"]["code"] == *code
                            && (answer["error"]["param"].as_str())
                                .is_some_and(|p| p.starts_with(field))
                    }
                };
                if !shaped || !message.contains(field) {
                    failed.push(format!("{what}: not named in its API's shape: {text}"));
                }
                if upstream.requests().len() != before {
                    failed.push(format!("{what}: the upstream was sent the request"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// A sample's broken call (arguments that are not JSON) sent back in a client's history, as
/// Codex and the Chat clients do after a vote answered one: passed on to every upstream API,
/// its text kept (an Anthropic `input` and a Gemini `args` must be objects:
/// `{"raw_arguments": TEXT}`), never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_call_in_the_history_is_passed_on_to_every_upstream_api() {
    let broken = r#"{"cmd": "ls"#;
    let quoted = serde_json::to_string(broken).unwrap();
    let mut failed = Vec::new();
    for api in ["chat", "anthropic", "responses", "gemini"] {
        let (answer, base) = match api {
            "gemini" => (
                "data: {\"candidates\": [{\"index\": 0, \"content\": {\"role\": \"model\", \"parts\": [{\"text\": \"ok\"}]}, \"finishReason\": \"STOP\"}]}\n\n".to_string(),
                "beta",
            ),
            _ => (upstream_answer(api), ""),
        };
        let upstream = start(TestServer::builder().body(answer)).await;
        let toml = format!(
            "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}{base}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, no_env).await;
        for path in ["/v1/chat/completions", "/v1/responses"] {
            let request = match path {
                "/v1/responses" => format!(
                    r#"{{"model":"m","stream":false,"max_output_tokens":100,"input":[{{"role":"user","content":"hi"}},
                    {{"type":"function_call","call_id":"c1","name":"Bash","arguments":{quoted}}},
                    {{"type":"function_call_output","call_id":"c1","output":"bad arguments"}}]}}"#
                ),
                _ => format!(
                    r#"{{"model":"m","max_tokens":100,"messages":[{{"role":"user","content":"hi"}},
                    {{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"Bash","arguments":{quoted}}}}}]}},
                    {{"role":"tool","tool_call_id":"c1","content":"bad arguments"}}]}}"#
                ),
            };
            let (status, text) = post(addr, path, request).await;
            let sent = upstream.requests().last().and_then(|r| r.json.clone());
            let kept = sent.as_ref().is_some_and(|body| match api {
                "anthropic" => {
                    body["messages"][1]["content"][0]["input"]
                        == serde_json::json!({"raw_arguments": broken})
                }
                "chat" => body["messages"][1]["tool_calls"][0]["function"]["arguments"] == broken,
                "gemini" => {
                    body["contents"][1]["parts"][0]["functionCall"]["args"]
                        == serde_json::json!({"raw_arguments": broken})
                }
                _ => body["input"][1]["arguments"] == broken,
            });
            if status != 200 || !kept {
                failed.push(format!(
                    "{path} over {api}: {status} {text}\nsent: {sent:?}"
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
