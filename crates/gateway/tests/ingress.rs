//! The gateway serving the SDKs' own APIs, Anthropic Messages (`/v1/messages`) and OpenAI
//! Responses (`/v1/responses`), over a Chat Completions upstream: real loopback HTTP, the
//! project's test server as the upstream.

use std::net::SocketAddr;

use choicewise_testserver::{Failure, TestServer, answer};
use serde_json::{Value, json};

mod common;
use common::serve;

fn env(name: &str) -> Option<String> {
    (name == "CLIENT_KEYS").then(|| "sk-a".to_string())
}

async fn gateway(upstream: &TestServer) -> SocketAddr {
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
        upstream.base_url()
    );
    serve(&toml, env).await.0
}

async fn post(addr: SocketAddr, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("x-api-key", "sk-a")
        .json(&body)
        .send()
        .await
        .unwrap()
}

/// Each SSE frame's event name and data.
async fn frames(response: reqwest::Response) -> Vec<(String, Value)> {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    assert!(!text.contains("[DONE]"));
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|frame| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in frame.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            assert_eq!(data["type"], name.as_str(), "{frame}");
            (name, data)
        })
        .collect()
}

fn messages_request(stream: bool) -> Value {
    json!({"model": "m", "max_tokens": 100, "stream": stream,
           "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_streamed_and_not() {
    let upstream = TestServer::builder()
        .body(answer("Hello from chat"))
        .start()
        .await
        .unwrap();
    let addr = gateway(&upstream).await;
    let frames = frames(post(addr, "/v1/messages", messages_request(true)).await).await;
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let text: String = frames
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "Hello from chat");
    let delta = &frames[frames.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(frames[0].1["message"]["model"], "m");
    // The upstream got a Chat Completions request with the system message first.
    let sent = upstream.requests()[0].json.clone().unwrap();
    assert_eq!(sent["messages"][0]["role"], "system");
    assert_eq!(sent["max_tokens"], 100);

    let message: Value = post(addr, "/v1/messages", messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["content"][0]["text"], "Hello from chat");
    assert_eq!(message["stop_reason"], "end_turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_failures_in_anthropic_terms() {
    let upstream = TestServer::builder()
        .fail(Failure::status(503).message("down for maintenance"))
        .start()
        .await
        .unwrap();
    let addr = gateway(&upstream).await;
    let error = |v: &Value| (v["type"].clone(), v["error"]["type"].clone());
    // No max_tokens: 400, as at Anthropic.
    let mut body = messages_request(false);
    body.as_object_mut().unwrap().remove("max_tokens");
    let r = post(addr, "/v1/messages", body).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(error(&v), (json!("error"), json!("invalid_request_error")));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens")
    );
    // No key: 401, in Anthropic's shape.
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .json(&messages_request(false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(error(&v), (json!("error"), json!("authentication_error")));
    // The upstream fails: 502 in Anthropic's shape, naming the upstream.
    let r = post(addr, "/v1/messages", messages_request(false)).await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("503"),
        "{v}"
    );
    // An unknown route under /v1/messages: 404 in Anthropic's shape.
    let r = post(addr, "/v1/messages/batches", json!({})).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert_eq!(error(&v), (json!("error"), json!("not_found_error")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_streamed_and_not() {
    let upstream = TestServer::builder()
        .body(answer("Hello from chat"))
        .start()
        .await
        .unwrap();
    let addr = gateway(&upstream).await;
    let request = |stream: bool| {
        json!({"model": "m", "stream": stream, "instructions": "Be brief.", "input": "hi",
               "max_output_tokens": 50})
    };
    let frames = frames(post(addr, "/v1/responses", request(true)).await).await;
    let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["response.created", "response.in_progress"]);
    assert_eq!(names.last(), Some(&"response.completed"));
    for (k, (_, data)) in frames.iter().enumerate() {
        assert_eq!(data["sequence_number"], k as u64);
    }
    let text: String = frames
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "Hello from chat");
    let done = &frames.last().unwrap().1["response"];
    assert_eq!(done["status"], "completed");
    assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 0);

    let response: Value = post(addr, "/v1/responses", request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(response["object"], "response");
    let item = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "message")
        .unwrap();
    assert_eq!(item["content"][0]["text"], "Hello from chat");

    // State the gateway does not keep: 400 naming the field, in OpenAI's shape.
    let mut stored = request(false);
    stored["store"] = json!(true);
    let r = post(addr, "/v1/responses", stored).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_through_each_api() {
    let upstream = TestServer::builder()
        .body(answer("Answer: 42"))
        .start()
        .await
        .unwrap();
    let addr = gateway(&upstream).await;
    let extension = json!({"samples": 3, "select": "first_finished"});
    let mut body = messages_request(true);
    body["choicewise"] = extension.clone();
    let frames_m = frames(post(addr, "/v1/messages", body).await).await;
    let delta = &frames_m[frames_m.len() - 2].1;
    assert_eq!(delta["type"], "message_delta");
    assert_eq!(delta["choicewise"]["decision"], "first_finished", "{delta}");
    let body = json!({"model": "m", "stream": true, "input": "hi", "choicewise": extension});
    let frames_r = frames(post(addr, "/v1/responses", body).await).await;
    let last = &frames_r.last().unwrap().1;
    assert!(last["choicewise"].is_object(), "{last}");
    // One request with n = 3 each time (a chat upstream is native).
    let sent: Vec<u64> = upstream
        .requests()
        .iter()
        .map(|r| r.json.as_ref().unwrap()["n"].as_u64().unwrap_or(1))
        .collect();
    assert_eq!(sent, [3, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_counts_and_unknown_routes() {
    let upstream = TestServer::builder().start().await.unwrap();
    let addr = gateway(&upstream).await;
    let client = reqwest::Client::new();
    let get = |path: &str| {
        client
            .get(format!("http://{addr}{path}"))
            .bearer_auth("sk-a")
            .send()
    };
    let model: Value = get("/v1/models/m").await.unwrap().json().await.unwrap();
    assert_eq!(model["id"], "m");
    let missing = get("/v1/models/nope").await.unwrap();
    assert_eq!(missing.status(), 404);
    for path in ["/v1/completions", "/v1/embeddings", "/v1/chat/completion"] {
        let r = client
            .post(format!("http://{addr}{path}"))
            .bearer_auth("sk-a")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
        let v: Value = r.json().await.unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(path) && message.contains("/v1/chat/completions"),
            "{message}"
        );
    }
    let r = post(
        addr,
        "/v1/messages/count_tokens",
        json!({"model": "m", "messages": [{"role": "user", "content": "Hello there, how are you?"}]}),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-choicewise-token-count"], "estimated");
    let v: Value = r.json().await.unwrap();
    assert!(v["input_tokens"].as_u64().unwrap() > 5, "{v}");
    assert_eq!(upstream.request_count(), 0);
}

/// Clients that index choices by position (openai-python's stream helper): every choice's
/// opening comes first, in index order, with `content: null` (never `""`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choices_open_in_index_order_with_null_content() {
    let upstream = TestServer::builder()
        .fixture("openai_n2_interleaved_tools.sse")
        .random_writes(1, 40)
        .start()
        .await
        .unwrap();
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "n": 2, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth("sk-a")
        .json(&body)
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    for (k, chunk) in chunks[..2].iter().enumerate() {
        let c = &chunk["choices"][0];
        assert_eq!(c["index"], k as u64);
        assert_eq!(c["delta"]["role"], "assistant");
        assert!(c["delta"]["content"].is_null(), "{chunk}");
    }
    for chunk in &chunks {
        for c in chunk["choices"].as_array().unwrap() {
            assert_ne!(c["delta"]["content"], "", "{chunk}");
        }
    }
}

/// A non-streamed request whose every choice failed is a 502 naming why, not a 200 of
/// `finish_reason: "error"` choices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_choice_failed_is_a_502() {
    let upstream = TestServer::builder()
        .body(answer("a long enough answer to be cut"))
        .close_after_events(2)
        .start()
        .await
        .unwrap();
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}]});
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth("sk-a")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "every_choice_failed");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("choice 0"),
        "{v}"
    );
}

/// What a stream of `dialect` says: each choice's text, tool calls (name, arguments) and
/// finish reason, and the usage's token counts.
async fn read_as(bytes: Vec<u8>, dialect: choicewise_core::Dialect) -> Value {
    let reads = futures::stream::iter([Ok::<_, std::io::Error>(bytes::Bytes::from(bytes))]);
    let completions = choicewise_core::Completions::builder()
        .dialect(dialect)
        .estimate_usage(false)
        .start(choicewise_core::Source::sse(reads));
    let whole = match completions.collect().await {
        Ok(c) => c,
        Err(incomplete) => incomplete.partial,
    };
    let choice = &whole.choices[0];
    let calls: Vec<Value> = (choice.message.tool_calls.iter())
        .map(|c| {
            let arguments: Value =
                serde_json::from_str(&c.function.arguments).unwrap_or(Value::Null);
            json!([c.function.name, arguments])
        })
        .collect();
    let usage = whole
        .usage
        .as_ref()
        .map(|u| json!([u.prompt_tokens, u.completion_tokens]));
    json!({"text": choice.message.content, "calls": calls, "finish": choice.finish_reason,
           "usage": usage})
}

/// Every recorded Messages and Responses stream, played by a test upstream of its dialect
/// and served back out in the same dialect by the gateway, says the same: text, tool
/// calls, finish reason and usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_streams_round_trip_through_the_gateway() {
    use choicewise_core::Dialect;
    let cases = [
        (
            "anthropic_tools.sse",
            "anthropic",
            "/v1/messages",
            Dialect::Anthropic,
        ),
        (
            "anthropic_max_tokens.sse",
            "anthropic",
            "/v1/messages",
            Dialect::Anthropic,
        ),
        (
            "anthropic_refusal.sse",
            "anthropic",
            "/v1/messages",
            Dialect::Anthropic,
        ),
        (
            "anthropic_stop_sequence.sse",
            "anthropic",
            "/v1/messages",
            Dialect::Anthropic,
        ),
        (
            "responses_text.sse",
            "responses",
            "/v1/responses",
            Dialect::Responses,
        ),
        (
            "responses_tools.sse",
            "responses",
            "/v1/responses",
            Dialect::Responses,
        ),
        (
            "responses_text_then_call.sse",
            "responses",
            "/v1/responses",
            Dialect::Responses,
        ),
        (
            "responses_max_output_tokens.sse",
            "responses",
            "/v1/responses",
            Dialect::Responses,
        ),
        (
            "responses_incomplete.sse",
            "responses",
            "/v1/responses",
            Dialect::Responses,
        ),
    ];
    for (fixture, api, path, dialect) in cases {
        let upstream = TestServer::builder()
            .fixture(fixture)
            .start()
            .await
            .unwrap();
        let toml = format!(
            "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, env).await;
        let body = match api {
            "anthropic" => json!({"model": "m", "max_tokens": 100, "stream": true,
                                  "messages": [{"role": "user", "content": "hi"}]}),
            _ => json!({"model": "m", "stream": true, "input": "hi"}),
        };
        let r = post(addr, path, body).await;
        assert_eq!(r.status(), 200, "{fixture}");
        let served = r.bytes().await.unwrap().to_vec();
        let original = read_as(choicewise_testserver::fixture(fixture), dialect).await;
        let back = read_as(served, dialect).await;
        assert_eq!(back, original, "{fixture}");
    }
}

/// A client's thinking or reasoning reaches each upstream in that upstream's own terms: an
/// upstream of the client's API gets the client's object as it was (Anthropic's exact
/// budget, Responses' summary), a chat upstream `reasoning_effort`, never a field it would
/// refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_reaches_each_upstream_in_its_own_terms() {
    let sent = |upstream: &TestServer| -> Value {
        let requests = upstream.requests();
        let last = requests.last().expect("the upstream was asked");
        serde_json::from_slice(&last.body).unwrap()
    };
    let thinking = json!({"type": "enabled", "budget_tokens": 3000});
    let reasoning = json!({"effort": "low", "summary": "auto"});
    let cases = [
        ("anthropic", "anthropic_tools.sse", "/v1/messages"),
        ("responses", "responses_text.sse", "/v1/responses"),
        ("chat", "", "/v1/messages"),
        ("chat", "", "/v1/responses"),
    ];
    for (api, fixture, path) in cases {
        let builder = TestServer::builder();
        let builder = match fixture {
            "" => builder.body(answer("hi")),
            f => builder.fixture(f),
        };
        let upstream = builder.start().await.unwrap();
        let toml = format!(
            "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            upstream.base_url()
        );
        let (addr, _) = serve(&toml, env).await;
        let body = match path {
            "/v1/messages" => json!({"model": "m", "max_tokens": 5000, "stream": true,
                "thinking": thinking, "messages": [{"role": "user", "content": "hi"}]}),
            _ => json!({"model": "m", "stream": true, "reasoning": reasoning, "input": "hi"}),
        };
        let r = post(addr, path, body).await;
        assert_eq!(r.status(), 200, "{api} {path}");
        let _ = r.bytes().await.unwrap();
        let got = sent(&upstream);
        match (api, path) {
            ("anthropic", _) => {
                assert_eq!(got["thinking"], thinking);
                assert!(got.get("reasoning_effort").is_none(), "{got}");
            }
            ("responses", _) => {
                assert_eq!(got["reasoning"], reasoning);
                assert!(got.get("reasoning_effort").is_none(), "{got}");
            }
            (_, "/v1/messages") => {
                assert_eq!(got["reasoning_effort"], "medium", "3000 tokens of budget");
                assert!(got.get("thinking").is_none(), "{got}");
            }
            _ => {
                assert_eq!(got["reasoning_effort"], "low");
                assert!(got.get("reasoning").is_none(), "{got}");
            }
        }
    }
}

/// `count_tokens` over an Anthropic upstream is that upstream's own count (no estimate
/// header), asked with the upstream's model name; an upstream that cannot answer leaves the
/// estimate, flagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_asks_an_anthropic_upstream() {
    let counting = TestServer::builder().start().await.unwrap();
    let failing = TestServer::builder()
        .fail(Failure::status(500).message("boom"))
        .start()
        .await
        .unwrap();
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n\
         [[models]]\nname = \"counted\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"up\"\n\
         [[models]]\nname = \"estimated\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
        counting.base_url(),
        failing.base_url()
    );
    let (addr, _) = serve(&toml, env).await;
    let body = |model: &str| {
        json!({"model": model, "system": "Be brief.",
               "messages": [{"role": "user", "content": "Hello there, how are you?"}],
               "choicewise": {"samples": 2}})
    };
    let r = post(addr, "/v1/messages/count_tokens", body("counted")).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("x-choicewise-token-count").is_none());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["input_tokens"], 7, "the upstream's count: its words");
    let asked = &counting.requests()[0];
    assert_eq!(asked.path, "/v1/messages/count_tokens");
    let sent = asked.json.as_ref().unwrap();
    assert_eq!(sent["model"], "up");
    assert!(sent.get("choicewise").is_none(), "{sent}");

    let r = post(addr, "/v1/messages/count_tokens", body("estimated")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-choicewise-token-count"], "estimated");
    let v: Value = r.json().await.unwrap();
    assert!(v["input_tokens"].as_u64().unwrap() > 5, "{v}");
    assert_eq!(failing.request_count(), 1, "asked once, then estimated");
}
