//! The gateway serving the SDKs' own APIs, Anthropic Messages (`/v1/messages`) and OpenAI
//! Responses (`/v1/responses`), over a Chat Completions upstream: real loopback HTTP, the
//! project's test server as the upstream.

use std::net::SocketAddr;

use choicewise_testserver::{Failure, TestServer, tool_call_answer};
use serde_json::{Value, json};

use crate::common::{
    answering, chunk, fixture, key_env, metrics_with, post_chat_keyed, says, serve, start,
    upstream_toml,
};

/// A gateway whose client key is `sk-a`, with model `m` over one upstream of `api` at `url`
/// (extra TOML lines after it).
async fn keyed(api: &str, url: &str, extra: &str) -> SocketAddr {
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[[models]]\nname = \"m\"\n{}",
        upstream_toml(api, url, extra)
    );
    serve(&toml, key_env).await.0
}

/// A gateway whose client key is `sk-a`, with model `m` over this Chat Completions upstream.
async fn gateway(upstream: &TestServer) -> SocketAddr {
    keyed("chat", &upstream.base_url(), "").await
}

/// A test server answering in `api`'s terms: a recorded Anthropic Messages or Responses
/// answer, or "hi" in Chat Completions chunks.
async fn speaking(api: &str) -> TestServer {
    match api {
        "anthropic" => fixture("anthropic_tools.sse").await,
        "responses" => fixture("responses_text.sse").await,
        _ => answering("hi").await,
    }
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

/// A streamed answer's `message_start` names the prompt's tokens as `count_tokens` counts
/// them: a short prompt counted in place, a long one on a blocking thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_start_counts_short_and_long_prompts_alike() {
    let upstream = answering("Hello from chat").await;
    let addr = gateway(&upstream).await;
    for words in [3, 400] {
        let mut body = messages_request(true);
        body["messages"][0]["content"] = json!("word ".repeat(words));
        let frames = frames(post(addr, "/v1/messages", body.clone()).await).await;
        let input = &frames[0].1["message"]["usage"]["input_tokens"];
        let fields = body.as_object_mut().unwrap();
        fields.remove("max_tokens");
        fields.remove("stream");
        let counted: Value = post(addr, "/v1/messages/count_tokens", body)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(input, &counted["input_tokens"], "{words} words");
        assert!(
            input.as_u64().unwrap() >= words as u64,
            "{words} words: {input}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_streamed_and_not() {
    let upstream = answering("Hello from chat").await;
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
    let upstream =
        start(TestServer::builder().fail(Failure::status(503).message("down for maintenance")))
            .await;
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
    let upstream = answering("Hello from chat").await;
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
    let upstream = answering("Answer: 42").await;
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
    let upstream = start(TestServer::builder()).await;
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
        assert!(message.contains(path), "{message}");
        // Every route, from the one list of client APIs.
        let routes = "this gateway serves POST /v1/chat/completions, POST /v1/messages, \
            POST /v1/messages/count_tokens, POST /v1/responses, \
            POST /v1beta/models/{model}:generateContent, \
            POST /v1beta/models/{model}:streamGenerateContent, \
            POST /v1beta/models/{model}:countTokens, GET /v1/models, GET /v1/models/{id}, \
            GET /v1beta/models, GET /v1beta/models/{model}, GET /healthz and GET /metrics";
        assert!(message.ends_with(routes), "{message}");
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
    let upstream = start(
        TestServer::builder()
            .fixture("openai_n2_interleaved_tools.sse")
            .random_writes(1, 40),
    )
    .await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "n": 2, "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = post_chat_keyed(addr, &body, "sk-a").await;
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
    let upstream = start(says("a long enough answer to be cut").close_after_events(2)).await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}]});
    let r = post_chat_keyed(addr, &body, "sk-a").await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "every_choice_failed");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("choice 0"),
        "{v}"
    );
}

/// An upstream cut mid-answer is the same failure in every API, streamed or not: each
/// answer says it in its API's terms (an error event, a 502), and each request is labelled
/// and counted `every_choice_failed`, never `complete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upstream_is_counted_failed_in_every_api_streamed_or_not() {
    let upstream = start(says("a long enough answer to be cut").close_after_events(2)).await;
    let addr = gateway(&upstream).await;
    // Messages, streamed: the stream ends with Anthropic's error event.
    let streamed = frames(post(addr, "/v1/messages", messages_request(true)).await).await;
    assert_eq!(streamed.last().unwrap().0, "error", "{streamed:?}");
    assert!(!streamed.iter().any(|(name, _)| name == "message_stop"));
    // Messages, not streamed: a 502 in Anthropic's shape.
    let r = post(addr, "/v1/messages", messages_request(false)).await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error", "{v}");
    // Responses, streamed and not.
    let request = |stream: bool| json!({"model": "m", "stream": stream, "input": "hi"});
    let streamed = frames(post(addr, "/v1/responses", request(true)).await).await;
    assert_eq!(
        streamed.last().unwrap().0,
        "response.failed",
        "{streamed:?}"
    );
    let r = post(addr, "/v1/responses", request(false)).await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "every_choice_failed", "{v}");
    // Chat Completions, streamed and not.
    for stream in [true, false] {
        let body = json!({"model": "m", "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]});
        let r = post_chat_keyed(addr, &body, "sk-a").await;
        assert_eq!(r.status(), if stream { 200 } else { 502 });
        let text = r.text().await.unwrap();
        assert!(text.contains("every_choice_failed"), "{text}");
    }
    let text = metrics_with(
        addr,
        &[
            r#"choicewise_answers_total{model="m",api="messages",ended="every_choice_failed"} 2"#,
            r#"choicewise_answers_total{model="m",api="responses",ended="every_choice_failed"} 2"#,
            r#"choicewise_answers_total{model="m",api="chat",ended="every_choice_failed"} 2"#,
        ],
    )
    .await;
    assert!(!text.contains(r#"ended="complete""#), "{text}");
}

/// A shutdown mid-answer is answered alike in every API: a Messages answer cut before its
/// choice finished ends with Anthropic's error event (streamed) or is a 503 in Anthropic's
/// shape (not streamed), as a Chat Completions one is, and each is labelled and counted
/// `shut_down`, never `complete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_mid_answer_is_shut_down_in_every_api() {
    let upstream = start(crate::common::stalled(2)).await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[[models]]\nname = \"m\"\n{}",
        upstream_toml("chat", &upstream.base_url(), "")
    );
    let (addr, gateway) = serve(&toml, key_env).await;
    let streamed = tokio::spawn(async move {
        frames(post(addr, "/v1/messages", messages_request(true)).await).await
    });
    let whole =
        tokio::spawn(async move { post(addr, "/v1/messages", messages_request(false)).await });
    let chat = tokio::spawn(async move {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        post_chat_keyed(addr, &body, "sk-a").await
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while upstream.request_count() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "three upstream requests"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    gateway.close();
    let streamed = streamed.await.unwrap();
    let (name, error) = streamed.last().unwrap();
    assert_eq!(name, "error", "{streamed:?}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("shut down"),
        "{error}"
    );
    for r in [whole.await.unwrap(), chat.await.unwrap()] {
        assert_eq!(r.status(), 503);
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("shut down"),
            "{v}"
        );
    }
    let text = metrics_with(
        addr,
        &[
            r#"choicewise_answers_total{model="m",api="messages",ended="shut_down"} 2"#,
            r#"choicewise_answers_total{model="m",api="chat",ended="shut_down"} 1"#,
        ],
    )
    .await;
    assert!(!text.contains(r#"ended="complete""#), "{text}");
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
    for (name, api, path, dialect) in cases {
        let upstream = fixture(name).await;
        let addr = keyed(api, &upstream.base_url(), "").await;
        let body = match api {
            "anthropic" => json!({"model": "m", "max_tokens": 100, "stream": true,
                                  "messages": [{"role": "user", "content": "hi"}]}),
            _ => json!({"model": "m", "stream": true, "input": "hi"}),
        };
        let r = post(addr, path, body).await;
        assert_eq!(r.status(), 200, "{name}");
        let served = r.bytes().await.unwrap().to_vec();
        let original = read_as(choicewise_testserver::fixture(name), dialect).await;
        let back = read_as(served, dialect).await;
        assert_eq!(back, original, "{name}");
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
        ("anthropic", "/v1/messages"),
        ("responses", "/v1/responses"),
        ("chat", "/v1/messages"),
        ("chat", "/v1/responses"),
    ];
    for (api, path) in cases {
        let upstream = speaking(api).await;
        let addr = keyed(api, &upstream.base_url(), "").await;
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
    let counting = start(TestServer::builder()).await;
    let failing = start(TestServer::builder().fail(Failure::status(500).message("boom"))).await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n\
         [[models]]\nname = \"counted\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"up\"\n\
         [[models]]\nname = \"estimated\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
        counting.base_url(),
        failing.base_url()
    );
    let (addr, _) = serve(&toml, key_env).await;
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

/// A body as Claude Code 2.1 sends it (its shape and fields; shortened texts): a system
/// turn inside `messages`, adaptive thinking, `context_management`, `output_config`,
/// `cache_control`, a `defer_loading` tool, `metadata`, `max_tokens: 32000`.
fn claude_code_body(model: &str) -> Value {
    json!({
        "model": model, "max_tokens": 32000, "stream": true,
        "metadata": {"user_id": "{\"device_id\":\"d1\",\"session_id\":\"s1\"}"},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
            {"type": "text", "text": "You are a coding agent. Answer in one line.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>Be careful with files.</system-reminder>"},
                {"type": "text", "text": "List the files here.", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [
                {"type": "text", "text": "# Environment\nPrimary working directory: /tmp/w\nPlatform: linux"}]}],
        "tools": [
            {"name": "Bash", "description": "Runs a shell command.", "input_schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "properties": {"command": {"type": "string"}}, "required": ["command"]}},
            {"name": "DeferredToolPlaceholder", "description": "Never call this tool.",
             "input_schema": {"type": "object", "properties": {}}, "defer_loading": true}]
    })
}

/// Claude Code's request as it sends it (`?beta=true`, `anthropic-beta`, a system turn in
/// `messages`, ...) over each upstream API: the system turn reaches each at its place, the
/// answer's `message_start` names the prompt's tokens, `count_tokens` counts the same body;
/// the model list is one its model discovery reads; GET on a POST route is a 405 in the
/// route's API shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_as_sent_over_each_upstream_api() {
    let chat = answering("Here they are").await;
    let anthropic = fixture("anthropic_tools.sse").await;
    let responses = fixture("responses_text.sse").await;
    let mut toml = String::from("[auth]\nkeys_env = \"CLIENT_KEYS\"\n");
    for (name, api, server) in [
        ("claude-over-chat", "chat", &chat),
        ("claude-over-anthropic", "anthropic", &anthropic),
        ("claude-over-responses", "responses", &responses),
    ] {
        toml += &format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{}\"\nmodel = \"up\"\n",
            server.base_url()
        );
    }
    let (addr, _) = serve(&toml, key_env).await;
    let client = reqwest::Client::new();
    for (model, server) in [
        ("claude-over-chat", &chat),
        ("claude-over-anthropic", &anthropic),
        ("claude-over-responses", &responses),
    ] {
        let r = client
            .post(format!("http://{addr}/v1/messages?beta=true"))
            .header("x-api-key", "sk-a")
            .header("anthropic-version", "2023-06-01")
            .header(
                "anthropic-beta",
                "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
            )
            .json(&claude_code_body(model))
            .send()
            .await
            .unwrap();
        let frames = frames(r).await;
        let start = &frames[0].1;
        assert_eq!(start["type"], "message_start", "{model}");
        let input = start["message"]["usage"]["input_tokens"].as_u64().unwrap();
        assert!(
            input > 20,
            "{model}: message_start names {input} input tokens"
        );
        assert_eq!(frames.last().unwrap().0, "message_stop", "{model}");
        let sent = server.requests().last().unwrap().json.clone().unwrap();
        match model {
            "claude-over-chat" => {
                let roles: Vec<&str> = (sent["messages"].as_array().unwrap().iter())
                    .map(|m| m["role"].as_str().unwrap())
                    .collect();
                assert_eq!(roles, ["system", "user", "system"], "{sent}");
                assert!(
                    sent["messages"][2]["content"]
                        .as_str()
                        .unwrap()
                        .starts_with("# Environment")
                );
                assert_eq!(sent["max_tokens"], 32000);
                assert_eq!(sent["tools"].as_array().unwrap().len(), 2);
                let text = sent.to_string();
                for absent in [
                    "thinking",
                    "context_management",
                    "output_config",
                    "defer_loading",
                    "cache_control",
                ] {
                    assert!(
                        !text.contains(absent),
                        "{absent} sent to a chat upstream: {text}"
                    );
                }
            }
            "claude-over-anthropic" => {
                assert!(sent["system"].as_str().unwrap().contains("coding agent"));
                assert_eq!(sent["messages"][1]["role"], "system", "{sent}");
                assert_eq!(sent["thinking"]["type"], "adaptive");
                assert_eq!(sent["max_tokens"], 32000);
            }
            _ => {
                assert!(
                    sent["instructions"]
                        .as_str()
                        .unwrap()
                        .contains("coding agent")
                );
                assert_eq!(sent["input"][1]["role"], "system", "{sent}");
                assert_eq!(sent["max_output_tokens"], 32000);
            }
        }
        // count_tokens on the same body.
        let mut count = claude_code_body(model);
        let fields = count.as_object_mut().unwrap();
        fields.remove("max_tokens");
        fields.remove("stream");
        let r = post(addr, "/v1/messages/count_tokens?beta=true", count).await;
        assert_eq!(r.status(), 200, "{model}");
        let v: Value = r.json().await.unwrap();
        assert!(v["input_tokens"].as_u64().unwrap() > 5, "{model}: {v}");
    }
    // A role Messages does not take: Anthropic's own wording, which Claude Code's fallback
    // looks for.
    let mut body = claude_code_body("claude-over-chat");
    body["messages"][1]["role"] = json!("tool");
    let r = post(addr, "/v1/messages?beta=true", body).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v,
        json!({"type": "error", "error": {"type": "invalid_request_error",
               "message": "messages.1.role: Input should be 'user' or 'assistant'"}})
    );
    // Refusals and counts are in the metrics under their model when it is a configured one.
    let mut unknown = claude_code_body("nope");
    unknown["messages"][1]["role"] = json!("tool");
    assert_eq!(post(addr, "/v1/messages", unknown).await.status(), 400);
    let metrics = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "choicewise_requests_total{model=\"claude-over-chat\",status=\"400\",api=\"messages\"} 1",
        // The streamed answer and the count.
        "choicewise_requests_total{model=\"claude-over-anthropic\",status=\"200\",api=\"messages\"} 2",
        "choicewise_requests_total{model=\"\",status=\"400\",api=\"messages\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    // The model list, as Claude Code's gateway model discovery asks for it.
    let list: Value = client
        .get(format!("http://{addr}/v1/models?limit=1000"))
        .header("x-api-key", "sk-a")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["has_more"], false);
    assert_eq!(list["first_id"], "claude-over-chat");
    assert_eq!(list["data"][0]["id"], "claude-over-chat");
    assert_eq!(list["data"][0]["display_name"], "claude-over-chat");
    assert_eq!(list["data"][0]["type"], "model");
    // GET on a POST route: 405 in the route's API shape.
    for (path, anthropic_shape) in [
        ("/v1/messages", true),
        ("/v1/messages/count_tokens", true),
        ("/v1/chat/completions", false),
        ("/v1/responses", false),
    ] {
        let r = client
            .get(format!("http://{addr}{path}"))
            .header("x-api-key", "sk-a")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{path}");
        assert_eq!(r.headers()["allow"], "POST", "{path}");
        let v: Value = r.json().await.unwrap();
        let message = match anthropic_shape {
            true => {
                assert_eq!(v["type"], "error", "{path}: {v}");
                v["error"]["message"].as_str().unwrap().to_string()
            }
            false => {
                assert_eq!(v["error"]["code"], "method_not_allowed", "{path}: {v}");
                v["error"]["message"].as_str().unwrap().to_string()
            }
        };
        assert!(
            message.contains("GET") && message.contains("POST"),
            "{message}"
        );
    }
}

/// A body as Codex CLI 0.169 sends it: developer items, a `namespace` tool (a group of its own
/// functions), a hosted `web_search`, `store: false`, `include`, `prompt_cache_key`,
/// `client_metadata`, `reasoning` with a summary.
fn codex_body(model: &str, input: Value) -> Value {
    json!({
        "model": model, "stream": true, "store": false, "tool_choice": "auto",
        "parallel_tool_calls": true, "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "session-1",
        "client_metadata": {"x-codex-window-id": "session-1:0"},
        "input": input,
        "tools": [
            {"type": "function", "name": "exec_command", "description": "Runs a command.", "strict": false,
             "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.", "tools": [
                {"type": "function", "name": "close_agent", "description": "Close an agent.", "strict": false,
                 "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}]},
            {"type": "web_search", "external_web_access": false}
        ]
    })
}

/// Codex CLI's request as it sends it: the namespace's function reaches the upstream as a
/// flat function, the model's call of it comes back in its namespace (streamed and not),
/// the client's namespaced call goes back flat; the hosted tool is left out and named in
/// `x-choicewise-dropped-tools`, or refused where the model says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_as_sent_namespaces_and_hosted_tools() {
    let upstream = start(TestServer::builder().body(tool_call_answer(
        "multi_agent_v1__close_agent",
        "{\"id\":\"a1\"}",
    )))
    .await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n\
         [[models]]\nname = \"codex\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\n\
         [[models]]\nname = \"strict\"\nhosted_tools = \"refuse\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\n",
        url = upstream.base_url()
    );
    let (addr, _) = serve(&toml, key_env).await;
    let first_turn = json!([
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are a coding agent."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "close agent a1"}]}]);
    let r = post(
        addr,
        "/v1/responses",
        codex_body("codex", first_turn.clone()),
    )
    .await;
    assert_eq!(r.headers()["x-choicewise-dropped-tools"], "web_search");
    let frames = frames(r).await;
    let (name, done) = frames.last().unwrap();
    assert_eq!(name, "response.completed");
    let call = &done["response"]["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(
        (&call["name"], &call["namespace"]),
        (&json!("close_agent"), &json!("multi_agent_v1"))
    );
    assert_eq!(call["arguments"], "{\"id\":\"a1\"}");
    let added = frames
        .iter()
        .find(|(n, _)| n == "response.output_item.added")
        .unwrap();
    assert_eq!(added.1["item"]["namespace"], "multi_agent_v1");
    let sent = upstream.requests()[0].json.clone().unwrap();
    let names: Vec<&str> = (sent["tools"].as_array().unwrap().iter())
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["exec_command", "multi_agent_v1__close_agent"]);
    assert!(!sent.to_string().contains("web_search"), "{sent}");
    assert_eq!(sent["prompt_cache_key"], "session-1");
    assert_eq!(sent["messages"][0]["role"], "system");

    // The second turn sends the call back, in its namespace, with its output.
    let mut second = first_turn.as_array().unwrap().clone();
    second.push(call.clone());
    second.push(
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "closed"}),
    );
    let mut body = codex_body("codex", Value::Array(second));
    body["stream"] = json!(false);
    let r = post(addr, "/v1/responses", body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-choicewise-dropped-tools"], "web_search");
    let response: Value = r.json().await.unwrap();
    assert_eq!(response["output"][0]["namespace"], "multi_agent_v1");
    let sent = upstream.requests()[1].json.clone().unwrap();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["name"],
        "multi_agent_v1__close_agent"
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_7", "content": "closed"})
    );

    // hosted_tools = "refuse": a 400 naming the tool, nothing sent upstream.
    let r = post(addr, "/v1/responses", codex_body("strict", first_turn)).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "tools[2].type");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"web_search\"") && message.contains("refuse"),
        "{message}"
    );
    assert_eq!(upstream.request_count(), 2);
}

/// A streamed answer whose every choice failed ends with OpenAI's mid-stream error event
/// before `[DONE]`; one choice failing beside one that finished keeps its per-choice finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_every_choice_failed_ends_with_an_error_event() {
    let cut = start(says("a long enough answer to be cut").close_after_events(2)).await;
    let half = start(
        says("a fine answer").then(says("a long enough answer to be cut").close_after_events(2)),
    )
    .await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n\
         [[models]]\nname = \"cut\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nn = \"fan-out\"\n\
         [[models]]\nname = \"half\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nn = \"fan-out\"\n",
        cut.base_url(),
        half.base_url()
    );
    let (addr, _) = serve(&toml, key_env).await;
    let events = |model: &'static str| async move {
        let body = json!({"model": model, "n": 2, "stream": true,
                          "messages": [{"role": "user", "content": "hi"}]});
        let r = post_chat_keyed(addr, &body, "sk-a").await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        text.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let all = events("cut").await;
    assert_eq!(all.last().unwrap(), "[DONE]");
    let error: Value = serde_json::from_str(&all[all.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "every_choice_failed", "{all:?}");
    assert_eq!(error["error"]["type"], "upstream_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("choice 0") && message.contains("choice 1"),
        "{message}"
    );
    assert_eq!(all.iter().filter(|e| e.contains("\"error\":{")).count(), 1);

    let some = events("half").await;
    assert!(
        !some.iter().any(|e| e.contains("every_choice_failed")),
        "{some:?}"
    );
    let finishes: Vec<String> = (some.iter())
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["finish_reason"].as_str().map(str::to_string))
        .collect();
    let mut sorted = finishes.clone();
    sorted.sort();
    assert_eq!(sorted, ["error", "stop"], "{some:?}");
}

/// A request that states no limit gets its upstream's answer room: the upstream entry's
/// `max_tokens`, else, for an Anthropic upstream (which requires one), 8192; a client's own
/// limit is passed as sent; an upstream of another API with no `max_tokens` gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_limit_gets_its_upstreams_answer_room() {
    let chat = |limit: Option<u64>| {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        if let Some(limit) = limit {
            body["max_tokens"] = json!(limit);
        }
        ("/v1/chat/completions", body)
    };
    // Codex: the Responses API, no max_output_tokens.
    let codex = (
        "/v1/responses",
        json!({"model": "m", "stream": true, "input": "hi"}),
    );
    let cases = [
        ("anthropic", "", codex.clone(), "max_tokens", json!(8192)),
        ("anthropic", "", chat(None), "max_tokens", json!(8192)),
        (
            "anthropic",
            "max_tokens = 20000",
            chat(None),
            "max_tokens",
            json!(20000),
        ),
        (
            "anthropic",
            "max_tokens = 20000",
            chat(Some(300)),
            "max_tokens",
            json!(300),
        ),
        (
            "chat",
            "max_tokens = 4096",
            chat(None),
            "max_tokens",
            json!(4096),
        ),
        ("chat", "", chat(None), "max_tokens", Value::Null),
        (
            "responses",
            "max_tokens = 5000",
            codex,
            "max_output_tokens",
            json!(5000),
        ),
    ];
    for (api, key, (path, body), field, expected) in cases {
        let upstream = speaking(api).await;
        let addr = keyed(api, &upstream.base_url(), key).await;
        let r = post(addr, path, body).await;
        assert_eq!(r.status(), 200, "{api} {key} {path}");
        let _ = r.bytes().await.unwrap();
        let sent: Value =
            serde_json::from_slice(&upstream.requests().last().unwrap().body).unwrap();
        assert_eq!(sent[field], expected, "{api} {key} {path}: {sent}");
    }
    // A limit of 0 is refused at start, naming the model and the upstream.
    let e = choicewise_gateway::Config::from_toml(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"http://127.0.0.1:1\"\nmax_tokens = 0\n",
    )
    .and_then(|c| choicewise_gateway::Gateway::with_env(&c, |_| None).map(|_| ()))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("upstream 1: max_tokens must be at least 1"),
        "{e}"
    );
}

/// A client whose base URL already ends in `/v1` asks `/v1/v1/...`: served as the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_doubled_v1_is_served_as_its_route() {
    let upstream = answering("hi there").await;
    let addr = gateway(&upstream).await;
    let v: Value = post(addr, "/v1/v1/messages", messages_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], "hi there", "{v}");
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let r = post(addr, "/v1/v1/chat/completions", chat).await;
    assert_eq!(r.status(), 200);
    let models = reqwest::Client::new()
        .get(format!("http://{addr}/v1/v1/models"))
        .header("x-api-key", "sk-a")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    // Still keyed; one /v1 too many is served, not any number.
    let unkeyed = reqwest::Client::new()
        .post(format!("http://{addr}/v1/v1/messages"))
        .json(&messages_request(false))
        .send()
        .await
        .unwrap();
    assert_eq!(unkeyed.status(), 401);
    let r = post(addr, "/v1/v1/v1/messages", messages_request(false)).await;
    assert_eq!(r.status(), 404);
}

/// The Responses stream Codex CLI reads: its request as it sends it (streamed), to the
/// gateway in front of `upstream`.
async fn codex_stream(upstream: &TestServer) -> Vec<(String, Value)> {
    let addr = gateway(upstream).await;
    let body = json!({"model": "m", "stream": true, "input": "hi", "instructions": "Be brief."});
    frames(post(addr, "/v1/responses", body).await).await
}

/// An upstream's context overflow reaches Codex CLI as OpenAI's Responses API says it: a
/// stream ending in `response.failed` with the code `context_length_exceeded`, which Codex
/// shows as its context window exceeded (a 400 it shows as an invalid request) — OpenAI's
/// own 400, llama.cpp's and Anthropic's words alike, before the answer or in its stream. A
/// request not streamed keeps its 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_reaches_codex_as_context_length_exceeded() {
    let refusals = [
        Failure::status(400)
            .message("This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.")
            .kind("invalid_request_error")
            .code(Some("context_length_exceeded")),
        Failure::status(400)
            .message("the request exceeds the available context size, try increasing it")
            .kind("exceed_context_size_error")
            .code(None),
        Failure::status(400)
            .message("prompt is too long: 210000 tokens > 200000 maximum")
            .kind("invalid_request_error")
            .code(None),
    ];
    for refusal in refusals {
        let said = refusal.body()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        let upstream = start(TestServer::builder().fail(refusal)).await;
        let frames = codex_stream(&upstream).await;
        let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.failed"
            ],
            "{frames:?}"
        );
        let response = &frames[2].1["response"];
        assert_eq!(response["status"], "failed");
        assert_eq!(
            response["error"]["code"], "context_length_exceeded",
            "{response}"
        );
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains(&said), "{message}");
        assert_eq!(
            response["instructions"], "Be brief.",
            "the request's fields echoed"
        );

        // Not streamed: the upstream's 400, in the Responses API's error shape.
        let addr = gateway(&upstream).await;
        let r = post(addr, "/v1/responses", json!({"model": "m", "input": "hi"})).await;
        assert_eq!(r.status(), 400);
        let error: Value = r.json().await.unwrap();
        assert!(
            error["error"]["message"].as_str().unwrap().contains(&said),
            "{error}"
        );
    }

    // Another 400 is not an overflow: answered as before, with its status.
    let upstream = start(
        TestServer::builder().fail(
            Failure::status(400)
                .message("Invalid value for 'temperature'")
                .code(None),
        ),
    )
    .await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "stream": true, "input": "hi"});
    assert_eq!(post(addr, "/v1/responses", body).await.status(), 400);

    // Said in the upstream's stream, after some text: the same code.
    let chunk = |delta: Value, finish: Value| chunk(0, delta, finish);
    let body = chunk(
        json!({"role": "assistant", "content": "Let me"}),
        Value::Null,
    ) + "data: {\"error\": {\"message\": \"This model's maximum context length is 4096 tokens\", \"type\": \"invalid_request_error\", \"code\": \"context_length_exceeded\"}}\n\n";
    let upstream = start(TestServer::builder().body(body)).await;
    let frames = codex_stream(&upstream).await;
    let (name, last) = frames.last().unwrap();
    assert_eq!(name, "response.failed", "{frames:?}");
    assert_eq!(
        last["response"]["error"]["code"], "context_length_exceeded",
        "{last}"
    );

    // Any other failure stays the server's.
    let upstream = start(says("a long enough answer to be cut").close_after_events(2)).await;
    let frames = codex_stream(&upstream).await;
    let (name, last) = frames.last().unwrap();
    assert_eq!(name, "response.failed", "{frames:?}");
    assert_eq!(last["response"]["error"]["code"], "server_error", "{last}");
}

/// An answer cut at the token limit (`finish_reason: "length"`) reaches Codex CLI as the
/// Responses API's `response.incomplete` with `incomplete_details.reason:
/// "max_output_tokens"`, carrying the text written (Codex says "Incomplete response
/// returned, reason: max_output_tokens"), streamed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cut_at_the_token_limit_is_incomplete_with_its_text() {
    let chunk = |delta: Value, finish: Value| chunk(0, delta, finish);
    let body = chunk(
        json!({"role": "assistant", "content": "The answer is"}),
        Value::Null,
    ) + &chunk(json!({"content": " forty"}), json!("length"))
        + "data: [DONE]\n\n";
    let upstream = start(TestServer::builder().body(body)).await;
    let frames = codex_stream(&upstream).await;
    let (name, last) = frames.last().unwrap();
    assert_eq!(name, "response.incomplete", "{frames:?}");
    let response = &last["response"];
    assert_eq!(response["status"], "incomplete");
    assert_eq!(
        response["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert!(response["error"].is_null(), "{response}");
    let item = &response["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["status"], "incomplete");
    assert_eq!(item["content"][0]["text"], "The answer is forty");
    // The item as Codex reads it, from its `response.output_item.done`.
    let done = frames
        .iter()
        .find(|(n, _)| n == "response.output_item.done")
        .map(|(_, d)| d)
        .unwrap();
    assert_eq!(done["item"]["content"][0]["text"], "The answer is forty");

    let addr = gateway(&upstream).await;
    let r = post(addr, "/v1/responses", json!({"model": "m", "input": "hi"})).await;
    assert_eq!(r.status(), 200);
    let object: Value = r.json().await.unwrap();
    assert_eq!(object["status"], "incomplete");
    assert_eq!(object["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(
        object["output"][0]["content"][0]["text"],
        "The answer is forty"
    );
}
