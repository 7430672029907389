//! Google's Gemini API as a client API (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`) over Chat Completions test upstreams: `candidateCount = 3`
//! streamed (server-sent events and a JSON array) and not, every candidate complete and in
//! index order; a vote; function calls both ways; Google's keys and error shape; the token
//! count (`:countTokens`) and the model list (`GET /v1beta/models`, `GET /v1beta/models/{model}`).

use std::net::SocketAddr;

use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{chunk, failing, says, serve, start, votes_for_42};

/// Native `n = 3`: the three choices' chunks interleaved out of order (choice 2 first), each
/// a text in two deltas, then `[DONE]`.
fn three_out_of_order() -> String {
    let text = |i: u32, t: &str| chunk(i, json!({"content": t}), Value::Null);
    let role = |i: u32| chunk(i, json!({"role": "assistant", "content": ""}), Value::Null);
    let stop = |i: u32, reason: &str| chunk(i, json!({}), json!(reason));
    [
        role(2),
        text(2, "two "),
        role(0),
        text(0, "zero "),
        text(2, "done"),
        role(1),
        text(1, "one "),
        stop(2, "stop"),
        text(0, "done"),
        text(1, "done"),
        stop(1, "length"),
        stop(0, "stop"),
    ]
    .concat()
        + "data: [DONE]\n\n"
}

/// A one-choice stream that reasons (`reasoning_content`), then answers `ok`.
fn thinking_then_ok() -> String {
    chunk(
        0,
        json!({"role": "assistant", "reasoning_content": "Let me see."}),
        Value::Null,
    ) + &chunk(0, json!({"content": "ok"}), Value::Null)
        + &chunk(0, json!({}), json!("stop"))
        + "data: [DONE]\n\n"
}

/// A one-choice stream calling `get_weather` with `{"city": "Paris"}`, in two fragments.
fn weather_call() -> String {
    let mut sse = chunk(
        0,
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
            "id": "call_weather", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]}),
        Value::Null,
    );
    for part in ["{\"city\": ", "\"Paris\"}"] {
        sse += &chunk(
            0,
            json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
            Value::Null,
        );
    }
    sse + &chunk(0, json!({}), json!("tool_calls")) + "data: [DONE]\n\n"
}

/// A gateway of Chat Completions test upstreams, by the model a Gemini client names: `three`
/// (and `team/three`) native `n = 3` out of order, `tools` a `get_weather` call, `vote` the
/// five samples of a vote for 42, `down` a 503, `cut` one choice cut after its first event,
/// `thinks` reasoning before its answer.
pub(crate) struct Gateway {
    pub(crate) addr: SocketAddr,
    pub(crate) three: TestServer,
    pub(crate) tools: TestServer,
    _servers: Vec<TestServer>,
}

/// The key of [`gateway`]'s clients.
pub(crate) const KEY: &str = "sk-gemini";

pub(crate) async fn gateway() -> Gateway {
    let three = start(TestServer::builder().body(three_out_of_order())).await;
    let tools = start(TestServer::builder().body(weather_call())).await;
    let vote = start(votes_for_42()).await;
    let down = failing(503).await;
    let cut = start(says("cut short").close_after_events(1)).await;
    let thinks = start(TestServer::builder().body(thinking_then_ok())).await;
    let model = |name: &str, url: &str, n: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"{n}\"\n"
        )
    };
    let mut toml = String::from("[auth]\nkeys_env = \"CLIENT_KEYS\"\n");
    toml += &model("three", &three.base_url(), "native");
    toml += &model("tools", &tools.base_url(), "native");
    toml += &model("vote", &vote.base_url(), "fan-out");
    toml += &model("down", &down.base_url(), "native");
    toml += &model("cut", &cut.base_url(), "native");
    toml += &model("thinks", &thinks.base_url(), "native");
    toml += &model("team/three", &three.base_url(), "native");
    let env = |name: &str| (name == "CLIENT_KEYS").then(|| KEY.to_string());
    let (addr, _) = serve(&toml, env).await;
    Gateway {
        addr,
        three,
        tools,
        _servers: vec![vote, down, cut, thinks],
    }
}

/// Posts `body` to `/v1beta/models/{target}` (`target`: `MODEL:METHOD`, with its query) with
/// Google's key header.
async fn post(addr: SocketAddr, target: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}/v1beta/models/{target}"))
        .header("x-goog-api-key", KEY)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn asking(text: &str, config: Value) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}], "generationConfig": config})
}

/// The records of a streamed answer: server-sent events (`data: ` each, no `[DONE]`) or one
/// JSON array.
fn records(content_type: &str, text: &str) -> Vec<Value> {
    if content_type.starts_with("text/event-stream") {
        (text.split("\n\n").filter(|e| !e.trim().is_empty()))
            .map(|e| {
                let data = e.strip_prefix("data: ").unwrap_or_else(|| panic!("{e}"));
                assert_ne!(data, "[DONE]");
                serde_json::from_str(data).unwrap()
            })
            .collect()
    } else {
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        serde_json::from_str::<Vec<Value>>(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

/// Every candidate as the records build it: its texts joined, its function calls, its
/// finish reason (one, after which nothing of it comes), by index.
fn assembled(records: &[Value]) -> Vec<(String, Vec<Value>, String)> {
    let mut candidates: Vec<(String, Vec<Value>, String)> = Vec::new();
    for record in records {
        assert!(record.get("error").is_none(), "{record}");
        for c in record["candidates"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            if candidates.len() <= i {
                candidates.resize(i + 1, Default::default());
            }
            let entry = &mut candidates[i];
            assert!(
                entry.2.is_empty(),
                "candidate {i} after its finish: {record}"
            );
            for part in c["content"]["parts"].as_array().into_iter().flatten() {
                if let Some(t) = part["text"].as_str() {
                    entry.0.push_str(t);
                }
                if part.get("functionCall").is_some() {
                    entry.1.push(part["functionCall"].clone());
                }
            }
            if let Some(f) = c["finishReason"].as_str() {
                entry.2 = f.to_string();
            }
        }
    }
    candidates
}

/// What `three` answers: each candidate's text and finish reason, by index.
pub(crate) const THREE: [(&str, &str); 3] = [
    ("zero done", "STOP"),
    ("one done", "MAX_TOKENS"),
    ("two done", "STOP"),
];

fn expected_three() -> Vec<(String, Vec<Value>, String)> {
    [
        ("zero done", "STOP"),
        ("one done", "MAX_TOKENS"),
        ("two done", "STOP"),
    ]
    .map(|(t, f)| (t.to_string(), Vec::new(), f.to_string()))
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_candidates_streamed_both_ways_and_whole_complete_and_in_index_order() {
    let gw = gateway().await;
    let body = asking("count", json!({"candidateCount": 3, "maxOutputTokens": 50}));
    for (target, content_type) in [
        ("three:streamGenerateContent?alt=sse", "text/event-stream"),
        ("three:streamGenerateContent", "application/json"),
        (
            "team/three:streamGenerateContent?alt=sse",
            "text/event-stream",
        ),
    ] {
        let response = post(gw.addr, target, &body).await;
        assert_eq!(response.status(), 200, "{target}");
        let got_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(got_type, content_type, "{target}");
        let records = records(&got_type, &response.text().await.unwrap());
        assert_eq!(
            assembled(&records),
            expected_three(),
            "{target}: {records:?}"
        );
        let last = records.last().unwrap();
        let usage = &last["usageMetadata"];
        assert_eq!(
            usage["promptTokenCount"].as_u64().unwrap()
                + usage["candidatesTokenCount"].as_u64().unwrap(),
            usage["totalTokenCount"].as_u64().unwrap(),
            "{target}: {last}"
        );
        assert!(
            usage["candidatesTokenCount"].as_u64().unwrap() > 0,
            "{last}"
        );
        for r in &records {
            assert_eq!(r["modelVersion"], target.split(':').next().unwrap(), "{r}");
            assert!(r["responseId"].is_string(), "{r}");
        }
    }
    let response = post(gw.addr, "three:generateContent", &body).await;
    assert_eq!(response.status(), 200);
    let whole: Value = response.json().await.unwrap();
    let candidates = whole["candidates"].as_array().unwrap();
    let indexes: Vec<u64> = candidates
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2], "{whole}");
    assert_eq!(
        assembled(std::slice::from_ref(&whole)),
        expected_three(),
        "{whole}"
    );
    assert_eq!(candidates[0]["content"]["role"], "model");
    assert!(
        whole["usageMetadata"]["totalTokenCount"].as_u64().unwrap() > 0,
        "{whole}"
    );
    // The upstream was asked for n = 3, the answer's room, and was not told the Gemini names.
    let sent = gw.three.requests();
    let sent = sent.last().unwrap().json.clone().unwrap();
    assert_eq!(sent["n"], 3, "{sent}");
    assert_eq!(sent["max_tokens"], 50, "{sent}");
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "count"}]),
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_answers_one_candidate_with_the_summary() {
    let gw = gateway().await;
    let mut body = asking("what is 6 x 7?", json!({}));
    body["choicewise"] = json!({"samples": 5, "select": "vote", "vote_by": "Answer: (\\d+)"});
    for target in ["vote:streamGenerateContent?alt=sse", "vote:generateContent"] {
        let response = post(gw.addr, target, &body).await;
        assert_eq!(response.status(), 200, "{target}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        let records = match target.contains("stream") {
            true => records(&content_type, &response.text().await.unwrap()),
            false => vec![response.json().await.unwrap()],
        };
        let candidates = assembled(&records);
        assert_eq!(candidates.len(), 1, "{target}: {records:?}");
        assert_eq!(candidates[0].0, "Answer: 42", "{target}");
        assert_eq!(candidates[0].2, "STOP", "{target}");
        let summary = &records.last().unwrap()["choicewise"];
        assert_eq!(summary["decision"], "vote", "{target}: {summary}");
        assert_eq!(summary["samples"], 5, "{target}: {summary}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn function_calls_go_out_as_objects_and_come_back_as_tool_messages() {
    let gw = gateway().await;
    let tools = json!([{"functionDeclarations": [{"name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}},
                       "required": ["city"]}}]}]);
    let body = json!({
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
        "tools": tools,
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
    });
    let call = json!({"id": "call_weather", "name": "get_weather", "args": {"city": "Paris"}});
    for target in [
        "tools:streamGenerateContent?alt=sse",
        "tools:generateContent",
    ] {
        let response = post(gw.addr, target, &body).await;
        assert_eq!(response.status(), 200, "{target}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        let records = match target.contains("stream") {
            true => records(&content_type, &response.text().await.unwrap()),
            false => vec![response.json().await.unwrap()],
        };
        let candidates = assembled(&records);
        assert_eq!(
            candidates,
            [(String::new(), vec![call.clone()], "STOP".to_string())],
            "{target}"
        );
    }
    let sent = gw.tools.requests();
    let first = sent[0].json.clone().unwrap();
    assert_eq!(
        first["tools"],
        json!([{"type": "function", "function": {"name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]),
        "{first}"
    );
    assert_eq!(
        first["tool_choice"],
        json!({"type": "function", "function": {"name": "get_weather"}})
    );
    // The call and its result back, without ids: the result answers the call by its name.
    let round_trip = json!({
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {"role": "model", "parts": [{"text": "Let me look."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"sky": "sunny"}}},
                {"text": "Thanks"}]},
        ],
        "tools": tools,
    });
    let response = post(gw.addr, "tools:generateContent", &round_trip).await;
    assert_eq!(response.status(), 200);
    let sent = gw.tools.requests().last().unwrap().json.clone().unwrap();
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1_1", "content": "{\"sky\":\"sunny\"}"},
            {"role": "user", "content": "Thanks"},
        ]),
        "{sent}"
    );
}

/// An error answer in Google's shape: its status, `error.code`, `error.status`, and a message
/// holding `names`.
async fn google_error(response: reqwest::Response, status: u16, name: &str, names: &str) {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], status, "{body}");
    assert_eq!(body["error"]["status"], name, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(names), "{names:?} not in {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_in_googles_shape() {
    let gw = gateway().await;
    let ok = asking("hi", json!({}));
    let bad_count = asking("hi", json!({"candidateCount": 0}));
    google_error(
        post(gw.addr, "three:generateContent", &bad_count).await,
        400,
        "INVALID_ARGUMENT",
        "generationConfig.candidateCount",
    )
    .await;
    let bad_role = json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]});
    google_error(
        post(gw.addr, "three:generateContent", &bad_role).await,
        400,
        "INVALID_ARGUMENT",
        "contents[0].role",
    )
    .await;
    let unanswered =
        json!({"contents": [{"parts": [{"functionResponse": {"name": "f", "response": {}}}]}]});
    google_error(
        post(gw.addr, "three:generateContent", &unanswered).await,
        400,
        "INVALID_ARGUMENT",
        "contents[0].parts[0].functionResponse",
    )
    .await;
    google_error(
        post(gw.addr, "nowhere:generateContent", &ok).await,
        404,
        "NOT_FOUND",
        "nowhere",
    )
    .await;
    google_error(
        post(gw.addr, "three:embedContent", &ok).await,
        404,
        "NOT_FOUND",
        "embedContent",
    )
    .await;
    google_error(
        post(gw.addr, "down:generateContent", &ok).await,
        502,
        "UNAVAILABLE",
        "503",
    )
    .await;
    let wrong_key = reqwest::Client::new()
        .post(format!(
            "http://{}/v1beta/models/three:generateContent",
            gw.addr
        ))
        .header("x-goog-api-key", "sk-wrong")
        .json(&ok)
        .send()
        .await
        .unwrap();
    google_error(wrong_key, 401, "UNAUTHENTICATED", "API key").await;
    // Another path under /v1beta is Google's 404, naming the routes; another method a 405.
    let unknown = reqwest::Client::new()
        .post(format!("http://{}/v1beta/files", gw.addr))
        .header("x-goog-api-key", KEY)
        .json(&ok)
        .send()
        .await
        .unwrap();
    google_error(unknown, 404, "NOT_FOUND", "POST /v1beta/models/").await;
    let get = reqwest::Client::new()
        .get(format!(
            "http://{}/v1beta/models/three:generateContent",
            gw.addr
        ))
        .header("x-goog-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let body: Value = get.json().await.unwrap();
    assert_eq!(body["error"]["code"], 405, "{body}");
    // The key in the query is a key.
    let by_query = reqwest::Client::new()
        .post(format!(
            "http://{}/v1beta/models/three:generateContent?key={KEY}",
            gw.addr
        ))
        .json(&asking("hi", json!({"candidateCount": 3})))
        .send()
        .await
        .unwrap();
    assert_eq!(by_query.status(), 200);
    // A stream whose only candidate is cut: it ends with OTHER and why, then Google's error
    // record, which the SDKs raise.
    let response = post(gw.addr, "cut:streamGenerateContent?alt=sse", &ok).await;
    assert_eq!(response.status(), 200);
    let records = records("text/event-stream", &response.text().await.unwrap());
    let (error, records) = records.split_last().unwrap();
    assert_eq!(error["error"]["code"], 502, "{error}");
    assert_eq!(error["error"]["status"], "UNAVAILABLE", "{error}");
    let end = &records.last().unwrap()["candidates"][0];
    assert_eq!(end["finishReason"], "OTHER", "{end}");
    assert!(
        end["finishMessage"].as_str().is_some_and(|m| !m.is_empty()),
        "{end}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_is_a_thought_part_when_thoughts_are_asked_for() {
    let gw = gateway().await;
    let thinking = |include: bool| {
        asking(
            "hi",
            json!({"thinkingConfig": {"includeThoughts": include, "thinkingBudget": 1024}}),
        )
    };
    for target in [
        "thinks:streamGenerateContent?alt=sse",
        "thinks:generateContent",
    ] {
        for include in [true, false] {
            let response = post(gw.addr, target, &thinking(include)).await;
            assert_eq!(response.status(), 200, "{target}");
            let content_type = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_string();
            let records = match target.contains("stream") {
                true => records(&content_type, &response.text().await.unwrap()),
                false => vec![response.json().await.unwrap()],
            };
            let parts: Vec<&Value> = (records.iter())
                .flat_map(|r| r["candidates"][0]["content"]["parts"].as_array().unwrap())
                .collect();
            let thoughts: Vec<&Value> = parts
                .iter()
                .filter(|p| p["thought"] == true)
                .copied()
                .collect();
            match include {
                true => assert_eq!(
                    thoughts,
                    [&json!({"text": "Let me see.", "thought": true})],
                    "{target}"
                ),
                false => assert!(thoughts.is_empty(), "{target}: {parts:?}"),
            }
            assert_eq!(
                assembled(&records)[0].0,
                match include {
                    true => "Let me see.ok",
                    false => "ok",
                },
                "{target}"
            );
        }
    }
}

/// `GET /v1beta/models/{path}` with Google's key header (`path` empty: the list).
async fn get(addr: SocketAddr, path: &str, key: &str) -> reqwest::Response {
    let url = match path {
        "" => format!("http://{addr}/v1beta/models"),
        path => format!("http://{addr}/v1beta/models/{path}"),
    };
    reqwest::Client::new()
        .get(url)
        .header("x-goog-api-key", key)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_counts_the_prompt_as_generate_content_reads_it() {
    let gw = gateway().await;
    let count = |body: Value| async move {
        let response = post(gw.addr, "three:countTokens", &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-choicewise-token-count"], "estimated");
        let body: Value = response.json().await.unwrap();
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["totalTokens"], "{body}");
        body["totalTokens"].as_u64().unwrap()
    };
    let short = count(asking("Hello there.", json!({}))).await;
    let long = count(asking(&"Hello there. ".repeat(50), json!({}))).await;
    assert!(short > 2, "{short}");
    // Fifty times the text (three tokens) is about fifty times its tokens, the message's
    // frame counted once.
    assert!(long > short + 49 * 3 - 10, "{short} then {long}");
    assert!(long < short + 49 * 3 + 10, "{short} then {long}");
    // A whole request: its system instruction and tools count too.
    let contents = json!([{"role": "user", "parts": [{"text": "Hello there."}]}]);
    let whole = count(json!({"generateContentRequest": {
        "model": "models/three",
        "contents": contents,
        "systemInstruction": {"parts": [{"text": "Answer in one careful, considered word."}]},
    }}))
    .await;
    assert!(whole > short + 4, "{short} then {whole}");
    assert_eq!(
        count(json!({"generateContentRequest": {"contents": contents}})).await,
        short
    );
    // Counted here: no upstream was asked.
    assert_eq!(gw.three.request_count(), 0);
    // Refusals, in Google's shape.
    google_error(
        post(gw.addr, "nowhere:countTokens", &asking("hi", json!({}))).await,
        404,
        "NOT_FOUND",
        "nowhere",
    )
    .await;
    google_error(
        post(gw.addr, "three:countTokens", &json!({})).await,
        400,
        "INVALID_ARGUMENT",
        "contents",
    )
    .await;
    let both = json!({"contents": contents, "generateContentRequest": {"contents": contents}});
    google_error(
        post(gw.addr, "three:countTokens", &both).await,
        400,
        "INVALID_ARGUMENT",
        "generateContentRequest",
    )
    .await;
    let no_json = reqwest::Client::new()
        .post(format!(
            "http://{}/v1beta/models/three:countTokens",
            gw.addr
        ))
        .header("x-goog-api-key", KEY)
        .body("{\"contents\": [")
        .send()
        .await
        .unwrap();
    google_error(no_json, 400, "INVALID_ARGUMENT", "JSON").await;
    let wrong_key = reqwest::Client::new()
        .post(format!(
            "http://{}/v1beta/models/three:countTokens",
            gw.addr
        ))
        .header("x-goog-api-key", "sk-wrong")
        .json(&asking("hi", json!({})))
        .send()
        .await
        .unwrap();
    google_error(wrong_key, 401, "UNAUTHENTICATED", "API key").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_are_listed_in_googles_model_shape() {
    let gw = gateway().await;
    let response = get(gw.addr, "", KEY).await;
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    let names: Vec<&str> = (list["models"].as_array().unwrap().iter())
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "models/three",
            "models/tools",
            "models/vote",
            "models/down",
            "models/cut",
            "models/thinks",
            "models/team/three",
        ]
    );
    let methods = json!(["generateContent", "streamGenerateContent", "countTokens"]);
    for model in list["models"].as_array().unwrap() {
        assert_eq!(model["supportedGenerationMethods"], methods, "{model}");
        let name = model["name"].as_str().unwrap();
        assert_eq!(
            Some(name),
            model["baseModelId"]
                .as_str()
                .map(|b| format!("models/{b}"))
                .as_deref()
        );
    }
    // One model, by its name (a `/` in it included).
    for name in ["three", "team/three"] {
        let response = get(gw.addr, name, KEY).await;
        assert_eq!(response.status(), 200, "{name}");
        let model: Value = response.json().await.unwrap();
        assert_eq!(model["name"], format!("models/{name}"), "{model}");
        assert_eq!(model["supportedGenerationMethods"], methods, "{model}");
    }
    google_error(
        get(gw.addr, "nowhere", KEY).await,
        404,
        "NOT_FOUND",
        "nowhere",
    )
    .await;
    // A model's POST method asked with GET; a wrong key.
    google_error(
        get(gw.addr, "three:countTokens", KEY).await,
        405,
        "INVALID_ARGUMENT",
        "POST",
    )
    .await;
    google_error(
        get(gw.addr, "", "sk-wrong").await,
        401,
        "UNAUTHENTICATED",
        "API key",
    )
    .await;
    google_error(
        get(gw.addr, "three", "sk-wrong").await,
        401,
        "UNAUTHENTICATED",
        "API key",
    )
    .await;
}

/// Google serves its API as v1 too, and google-genai without `api_version` asks there:
/// `POST /v1/models/{model}:{method}` is served as v1beta's (streamed, whole, counted), its
/// errors in Google's shape; a `POST` of a model without a method is a 405 that says what
/// to send (`Allow: GET`), and the OpenAI API's `GET /v1/models/{id}` is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn googles_v1_paths_are_served_as_v1beta() {
    let gw = gateway().await;
    let v1 = |target: &str, body: &Value| {
        reqwest::Client::new()
            .post(format!("http://{}/v1/models/{target}", gw.addr))
            .header("x-goog-api-key", KEY)
            .json(body)
            .send()
    };
    let body = asking("count", json!({"candidateCount": 3, "maxOutputTokens": 50}));
    let response = v1("three:streamGenerateContent?alt=sse", &body)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let got_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(got_type, "text/event-stream");
    let records = records(&got_type, &response.text().await.unwrap());
    assert_eq!(assembled(&records), expected_three(), "{records:?}");
    let response = v1("three:generateContent", &body).await.unwrap();
    assert_eq!(response.status(), 200);
    let whole: Value = response.json().await.unwrap();
    assert_eq!(
        whole["candidates"].as_array().map(Vec::len),
        Some(3),
        "{whole}"
    );
    let response = v1("three:countTokens", &json!({"contents": body["contents"]}))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let counted: Value = response.json().await.unwrap();
    assert!(counted["totalTokens"].as_u64().unwrap() > 0, "{counted}");
    google_error(
        v1("three:summarize", &body).await.unwrap(),
        404,
        "NOT_FOUND",
        "summarize",
    )
    .await;
    let response = v1("three", &body).await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "GET");
    let refused: Value = response.json().await.unwrap();
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains(":generateContent"), "{refused}");
    let response = reqwest::Client::new()
        .get(format!("http://{}/v1/models/three", gw.addr))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let model: Value = response.json().await.unwrap();
    assert_eq!(model["id"], "three", "{model}");
}

/// `alt` is `sse` or `json`: another value is a 400 naming it, not JSON the client did not
/// ask for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_alt_is_refused_naming_it() {
    let gw = gateway().await;
    let body = asking("count", json!({"candidateCount": 3}));
    let json = post(gw.addr, "three:streamGenerateContent?alt=json", &body).await;
    assert_eq!(json.status(), 200);
    assert_eq!(json.headers()["content-type"], "application/json");
    google_error(
        post(gw.addr, "three:streamGenerateContent?alt=proto", &body).await,
        400,
        "INVALID_ARGUMENT",
        "alt=proto",
    )
    .await;
}
