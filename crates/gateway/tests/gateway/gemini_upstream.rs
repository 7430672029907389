//! A Gemini upstream (`api = "gemini"`): the gateway asks `streamGenerateContent?alt=sse`
//! with its key in `x-goog-api-key` and the samples as `candidateCount`, and reads the
//! candidates, interleaved out of order, as the choices of any multi-choice stream: a Chat
//! client streams `n = 3`, a vote picks among three candidates of one request, a Messages
//! client gets a function call as a `tool_use` block. Real loopback HTTP; the project's test
//! server plays Gemini from a script.

use std::net::SocketAddr;

use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{post_to, serve, upstream_toml};

/// Records as Gemini streams them: `data:` lines, no event names, no `[DONE]`.
fn sse(records: &[Value]) -> String {
    records
        .iter()
        .map(|r| format!("data: {r}\r\n\r\n"))
        .collect()
}

fn text(index: u32, t: &str) -> Value {
    json!({"index": index, "content": {"role": "model", "parts": [{"text": t}]}})
}

fn stop(index: u32) -> Value {
    json!({"index": index, "content": {"role": "model", "parts": []}, "finishReason": "STOP"})
}

fn record(candidates: Vec<Value>) -> Value {
    json!({"candidates": candidates, "modelVersion": "gemini-2.5-flash", "responseId": "g1"})
}

/// Three candidates, interleaved out of order (2 first, 1 finished first): "42", "41" and
/// "42" again, each in two pieces.
fn three() -> String {
    sse(&[
        record(vec![text(2, "4")]),
        record(vec![text(1, "4"), text(0, "4")]),
        record(vec![text(1, "1"), stop(1)]),
        record(vec![text(2, "2")]),
        record(vec![text(0, "2"), stop(2)]),
        json!({"candidates": [stop(0)], "usageMetadata": {"promptTokenCount": 7,
            "candidatesTokenCount": 6, "totalTokenCount": 13}}),
    ])
}

/// The key the upstream entry names.
fn env(name: &str) -> Option<String> {
    (name == "GEMINI_KEY").then(|| "g-key".to_string())
}

/// A gateway with model `m` over this Gemini test server (its model `up`).
async fn gateway(upstream: &TestServer) -> SocketAddr {
    let url = format!("{}beta", upstream.base_url());
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}",
        upstream_toml("gemini", &url, "api_key_env = \"GEMINI_KEY\"")
    );
    serve(&toml, env).await.0
}

async fn gemini(body: String) -> TestServer {
    TestServer::builder()
        .body(body)
        .api_key("g-key")
        .seed(7)
        .random_writes(1, 48)
        .start()
        .await
        .unwrap()
}

/// Each `data:` of a streamed Chat answer, `[DONE]` left out.
async fn chunks(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("data: [DONE]"), "{text}");
    (text.lines())
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_client_streams_three_candidates_of_one_request() {
    let upstream = gemini(three()).await;
    let addr = gateway(&upstream).await;
    // `top_k` (no OpenAI field, but what Gemini CLI's `topK` is read into) goes to Gemini as
    // `topK`.
    let body = json!({"model": "m", "n": 3, "stream": true, "temperature": 0.7, "top_k": 40,
        "max_tokens": 50, "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "6 times 7?"}]});
    let chunks = chunks(post_to(addr, "/v1/chat/completions", &body).await).await;
    let mut texts = [String::new(), String::new(), String::new()];
    let mut finishes = [None, None, None];
    let mut usage = None;
    for chunk in &chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            if let Some(t) = choice["delta"]["content"].as_str() {
                texts[i].push_str(t);
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                assert!(
                    finishes[i].replace(f.to_string()).is_none(),
                    "one finish each"
                );
            }
        }
        if chunk["usage"].is_object() {
            usage = Some(chunk["usage"].clone());
        }
    }
    assert_eq!(texts, ["42", "41", "42"]);
    assert_eq!(
        finishes,
        [
            Some("stop".into()),
            Some("stop".into()),
            Some("stop".into())
        ]
    );
    let usage = usage.expect("the usage chunk");
    assert_eq!(
        (
            usage["prompt_tokens"].as_u64(),
            usage["completion_tokens"].as_u64()
        ),
        (Some(7), Some(6))
    );

    // One request, in Gemini's shape, at its model's method, with its key.
    let sent = upstream.requests();
    assert_eq!(sent.len(), 1, "native candidates: one request");
    let sent = &sent[0];
    assert_eq!(sent.path, "/v1beta/models/up:streamGenerateContent");
    assert_eq!(sent.query_param("alt"), Some("sse"));
    assert_eq!(sent.header("x-goog-api-key"), Some("g-key"));
    assert_eq!(sent.header("authorization"), None);
    let json = sent.json.as_ref().unwrap();
    assert_eq!(
        json["generationConfig"],
        json!({"candidateCount": 3, "temperature": 0.7, "topK": 40, "maxOutputTokens": 50})
    );
    assert_eq!(
        json["systemInstruction"]["parts"][0]["text"],
        "Answer with a number."
    );
    assert_eq!(
        json["contents"],
        json!([{"role": "user", "parts": [{"text": "6 times 7?"}]}])
    );
    for gone in ["model", "stream", "stream_options", "messages", "n"] {
        assert!(json.get(gone).is_none(), "{gone} is not Gemini's: {json}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_among_the_candidates_of_one_request() {
    let upstream = gemini(three()).await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "6 times 7?"}],
        "choicewise": {"samples": 3, "select": "vote"}});
    let response = post_to(addr, "/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    let choices = answer["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 1, "{answer}");
    assert_eq!(
        choices[0]["message"]["content"], "42",
        "two of three: {answer}"
    );
    assert_eq!(choices[0]["finish_reason"], "stop");
    assert_eq!(answer["choicewise"]["samples"], 3, "{answer}");
    let sent = upstream.requests();
    assert_eq!(sent.len(), 1, "three samples, one request");
    assert_eq!(
        sent[0].json.as_ref().unwrap()["generationConfig"]["candidateCount"],
        3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_messages_client_gets_a_function_call_from_gemini() {
    let call = json!({"index": 0, "content": {"role": "model", "parts": [
        {"text": "Looking it up.", "thought": true},
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
        "finishReason": "STOP"});
    let upstream = gemini(sse(&[
        record(vec![text(0, "Let me check. ")]),
        json!({"candidates": [call], "usageMetadata": {"promptTokenCount": 9,
            "candidatesTokenCount": 4, "totalTokenCount": 13}}),
    ]))
    .await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "max_tokens": 100, "stream": false,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "weather", "input_schema": {"type": "object",
            "properties": {"city": {"type": "string"}}}}]});
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["stop_reason"], "tool_use", "{message}");
    let blocks = message["content"].as_array().unwrap();
    let tool = blocks
        .iter()
        .find(|b| b["type"] == "tool_use")
        .expect("a tool_use block");
    assert_eq!(
        (&tool["name"], &tool["input"]),
        (&json!("weather"), &json!({"city": "Paris"}))
    );
    let said = blocks
        .iter()
        .find(|b| b["type"] == "text")
        .expect("its text");
    assert_eq!(said["text"], "Let me check. ");
    assert_eq!(message["usage"]["input_tokens"], 9);
    let sent = upstream.requests()[0].json.clone().unwrap();
    assert_eq!(sent["generationConfig"], json!({"maxOutputTokens": 100}));
    assert_eq!(
        sent["tools"][0]["functionDeclarations"][0]["name"], "weather",
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_prompt_and_an_error_record_are_upstream_errors() {
    for (records, says) in [
        (
            vec![json!({"promptFeedback": {"blockReason": "SAFETY"}})],
            "blocked the prompt (SAFETY)",
        ),
        (
            vec![
                json!({"error": {"code": 500, "message": "Internal error encountered.",
                "status": "INTERNAL"}}),
            ],
            "Internal error encountered.",
        ),
    ] {
        let upstream = gemini(sse(&records)).await;
        let addr = gateway(&upstream).await;
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let response = post_to(addr, "/v1/chat/completions", &body).await;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 502, "{text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["type"], "upstream_error");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_that_fails_upstream_fails_alone() {
    let upstream = gemini(sse(&[
        record(vec![text(1, "half"), text(0, "4")]),
        record(vec![
            json!({"index": 1, "finishReason": "MALFORMED_FUNCTION_CALL"}),
            text(0, "2"),
        ]),
        record(vec![stop(0)]),
    ]))
    .await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "n": 2, "stream": true,
        "messages": [{"role": "user", "content": "6 times 7?"}]});
    let chunks = chunks(post_to(addr, "/v1/chat/completions", &body).await).await;
    let finishes: Vec<(u64, &str)> = (chunks.iter())
        .flat_map(|c| c["choices"].as_array().unwrap())
        .filter_map(|c| Some((c["index"].as_u64()?, c["finish_reason"].as_str()?)))
        .collect();
    assert!(finishes.contains(&(0, "stop")), "{finishes:?}");
    assert!(finishes.contains(&(1, "error")), "{finishes:?}");
    let failed = (chunks.iter())
        .flat_map(|c| c["choices"].as_array().unwrap())
        .find(|c| c["finish_reason"] == "error")
        .unwrap();
    let why = failed["choicewise"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("MALFORMED_FUNCTION_CALL"), "{failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_gemini_has_no_place_for_is_a_400_naming_it() {
    let upstream = gemini(three()).await;
    let addr = gateway(&upstream).await;
    let body = json!({"model": "m", "logprobs": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let response = post_to(addr, "/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the gemini API has no logprobs"),
        "{error}"
    );
    assert_eq!(upstream.request_count(), 0, "nothing sent");
}

/// A candidate past those asked for (Gemini asked 3 that sends an index 5): left out of the
/// answer, the three asked for answered whole, and the log says so once, naming the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_past_those_asked_for_is_left_out_and_said() {
    let lines = crate::warnings::lines();
    let body = sse(&[
        record(vec![text(0, "4"), text(5, "stray")]),
        record(vec![text(1, "4"), text(2, "4")]),
        record(vec![text(0, "2"), stop(0), stop(5)]),
        record(vec![text(1, "1"), stop(1), text(2, "2"), stop(2)]),
    ]);
    let upstream = gemini(body).await;
    let addr = gateway(&upstream).await;
    let id = "past-candidates-1";
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .header("x-request-id", id)
        .json(&json!({"model": "m", "n": 3, "stream": true,
            "messages": [{"role": "user", "content": "6 times 7?"}]}))
        .send()
        .await
        .unwrap();
    let chunks = chunks(r).await;
    let mut texts = [String::new(), String::new(), String::new()];
    for chunk in &chunks {
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap() as usize;
            assert!(i < 3, "{chunk}");
            if let Some(t) = choice["delta"]["content"].as_str() {
                texts[i].push_str(t);
            }
        }
    }
    assert_eq!(texts, ["42", "41", "42"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
        let said: Vec<&str> = (text.lines())
            .filter(|l| l.contains("past those it was asked for") && l.contains(id))
            .collect();
        if !said.is_empty() {
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(
                said[0].contains("choices=1") && said[0].contains("asked=3"),
                "{}",
                said[0]
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not said: {text}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
