//! The gateway over real loopback HTTP: the project's test server as the upstreams, the
//! gateway served on 127.0.0.1, reqwest as the client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::{Failure, TestServer, answer};

use crate::common::{
    answering, fixture, post_chat, says, serve, sse_data, stalled, start, votes_for_42,
};
use futures::StreamExt;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

/// The environment the gateways of these tests see.
fn env(name: &str) -> Option<String> {
    match name {
        "UPSTREAM_KEY" => Some("sk-upstream-secret".into()),
        "CLIENT_KEYS" => Some("sk-a, sk-b".into()),
        _ => None,
    }
}

/// A gateway of this configuration, served on a free port of 127.0.0.1.
async fn gateway(toml: &str) -> SocketAddr {
    serve(toml, env).await.0
}

/// One model named `m` over these upstreams (`api`, `base_url`, extra TOML lines).
fn config(upstreams: &[(&str, String, &str)]) -> String {
    let mut toml = String::from("[[models]]\nname = \"m\"\n");
    for (api, url, extra) in upstreams {
        toml.push_str(&format!(
            "[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{url}\"\nmodel = \"up\"\n{extra}\n"
        ));
    }
    toml
}

async fn post(addr: SocketAddr, body: Value) -> reqwest::Response {
    post_chat(addr, &body).await
}

/// The chunks of a streamed answer, and whether it ended with `[DONE]`.
async fn read_sse(response: reqwest::Response) -> (Vec<Value>, bool) {
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "an SSE answer"
    );
    let text = within(LIMIT, "the stream", response.text()).await.unwrap();
    sse_data(&text)
}

/// Each output choice's text, finish reason and `choicewise` error, from the chunks.
fn assemble(chunks: &[Value]) -> Vec<(String, Option<String>, Option<String>)> {
    let mut choices: Vec<(String, Option<String>, Option<String>)> = Vec::new();
    for chunk in chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "m", "the client's model name");
        for c in chunk["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            if choices.len() <= i {
                choices.resize(i + 1, (String::new(), None, None));
            }
            let entry = &mut choices[i];
            assert!(entry.1.is_none(), "nothing after a choice's finish");
            if let Some(t) = c["delta"]["content"].as_str() {
                entry.0.push_str(t);
            }
            if let Some(f) = c["finish_reason"].as_str() {
                entry.1 = Some(f.to_string());
            }
            if let Some(e) = c["choicewise"]["error"].as_str() {
                entry.2 = Some(e.to_string());
            }
        }
    }
    choices
}

fn request(n: u32) -> Value {
    json!({"model": "m", "n": n, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_n_streams_every_choice_renumbered() {
    let upstream = start(
        TestServer::builder()
            .fixture("openai_n3_tools.sse")
            .random_writes(1, 40),
    )
    .await;
    let addr = gateway(&config(&[("chat", upstream.base_url(), "")])).await;
    let (chunks, done) = read_sse(post(addr, request(3)).await).await;
    assert!(done);
    let choices = assemble(&chunks);
    assert_eq!(choices.len(), 3);
    assert!(choices.iter().all(|c| c.1.is_some()), "{choices:?}");
    // One upstream request, with n and the upstream's model name.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].json.as_ref().unwrap();
    assert_eq!(
        (body["n"].as_u64(), body["model"].as_str()),
        (Some(3), Some("up"))
    );
    assert_eq!(body["stream"], true);
    assert!(body.get("choicewise").is_none());
    // Tool calls keep their own indexes per choice.
    let tool_chunks = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap().clone())
        .filter(|c| c["delta"].get("tool_calls").is_some())
        .count();
    assert!(tool_chunks > 0);

    // The same, not streamed: one chat.completion, with usage.
    let mut r = request(3);
    r["stream"] = json!(false);
    let whole: Value = post(addr, r).await.json().await.unwrap();
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"].as_array().unwrap().len(), 3);
    assert!(whole["usage"]["total_tokens"].as_u64().unwrap() > 0);
}

/// The client's fields reach the upstream as they were sent (unknown ones, `metadata`,
/// `null` ones, the tools' schemas), with the gateway's own written over them; and when the
/// upstream reports no usage, the prompt is estimated from those fields as the whole body
/// counts (issue 52: the body is never parsed whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_fields_are_forwarded_and_their_prompt_estimated() {
    let server = answering("hello there").await;
    let addr = gateway(&config(&[("chat", server.base_url(), "")])).await;
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "weather", "description": "Today's weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}}}}}],
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "metadata": null, "x_vendor": {"deep": [1, {"k": "é"}]}, "temperature": 0.25});
    let (chunks, done) = read_sse(post(addr, body.clone()).await).await;
    assert!(done);
    let sent = server.requests()[0].json.clone().unwrap();
    for key in [
        "messages",
        "tools",
        "tool_choice",
        "metadata",
        "x_vendor",
        "temperature",
    ] {
        assert_eq!(sent[key], body[key], "{key}");
    }
    assert_eq!(sent["model"], "up");
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    let usage = &chunks.last().unwrap()["usage"];
    let encoding = choicewise_usage::encoding_for_model("up").name;
    let prompt = choicewise_usage::count_prompt(encoding, &body)
        .unwrap()
        .total;
    assert!(prompt > 20, "{prompt}");
    assert_eq!(usage["prompt_tokens"], prompt, "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_sends_one_request_per_choice_and_mixes_dialects() {
    let chat = answering("from chat").await;
    let responses = fixture("responses_text.sse").await;
    let anthropic = fixture("anthropic_tools.sse").await;
    let addr = gateway(&config(&[
        ("chat", chat.base_url(), "n = \"fan-out\""),
        ("responses", responses.base_url(), ""),
        ("anthropic", anthropic.base_url(), ""),
    ]))
    .await;
    let mut r = request(6);
    r["stream_options"] = json!({"include_usage": true});
    let (chunks, done) = read_sse(post(addr, r).await).await;
    assert!(done);
    let choices = assemble(&chunks);
    assert_eq!(choices.len(), 6);
    // Choice i goes to upstream i mod 3.
    assert_eq!(choices[0].0, "from chat");
    assert_eq!(choices[3].0, "from chat");
    assert_eq!(chat.request_count(), 2);
    assert_eq!(responses.request_count(), 2);
    assert_eq!(anthropic.request_count(), 2);
    assert_eq!(choices[2].1.as_deref(), Some("tool_calls"));
    for r in chat.requests() {
        assert!(
            r.json.as_ref().unwrap().get("n").is_none(),
            "one choice per request"
        );
    }
    assert_eq!(responses.requests()[0].path, "/v1/responses");
    assert_eq!(anthropic.requests()[0].path, "/v1/messages");
    assert!(
        anthropic.requests()[0]
            .json
            .as_ref()
            .unwrap()
            .get("max_tokens")
            .is_some()
    );
    // The last chunk: no choices, the usage of every request, each choice's part.
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    let usage = &last["usage"];
    let per_choice = usage["choicewise"]["per_choice"].as_array().unwrap();
    assert_eq!(per_choice.len(), 6);
    let prompts: u64 = per_choice
        .iter()
        .map(|p| p["prompt_tokens"].as_u64().unwrap())
        .sum();
    let completions: u64 = per_choice
        .iter()
        .map(|p| p["completion_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(usage["prompt_tokens"].as_u64().unwrap(), prompts, "{usage}");
    assert_eq!(
        usage["completion_tokens"].as_u64().unwrap(),
        completions,
        "{usage}"
    );
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        prompts + completions
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_before_the_first_byte_and_mid_stream() {
    // A 5xx before any byte: 502 naming the model, the API and the host, never the key.
    let down = start(TestServer::builder().fail(Failure::status(500).message("boom"))).await;
    let addr = gateway(&config(&[(
        "chat",
        down.base_url(),
        "api_key_env = \"UPSTREAM_KEY\"",
    )]))
    .await;
    let response = post(addr, request(2)).await;
    assert_eq!(response.status(), 502);
    let text = response.text().await.unwrap();
    let error: Value = serde_json::from_str(&text).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"m\"")
            && message.contains("chat")
            && message.contains(&down.addr().to_string()),
        "{message}"
    );
    assert!(!text.contains("sk-upstream-secret"), "{text}");
    assert_eq!(error["error"]["type"], "upstream_error");
    assert_eq!(
        down.requests()[0].header("authorization"),
        Some("Bearer sk-upstream-secret")
    );
    // Its own 4xx: passed through with its status and message.
    let refusing = start(
        TestServer::builder().fail(
            Failure::status(400)
                .message("n is too large")
                .code(Some("invalid_n")),
        ),
    )
    .await;
    let addr = gateway(&config(&[("chat", refusing.base_url(), "")])).await;
    let response = post(addr, request(2)).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    // Named as the upstream's, so that a client tells it from the gateway's own errors; a
    // request of several samples in one names the model and max_n (issue 49).
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the chat upstream {} answered 400: n is too large (model \"m\" asked it for 2 samples in one request with n = 2, and it has no max_n: ",
            refusing.addr()
        )) && message.contains("set max_n on that upstream"),
        "{message}"
    );
    // One sample: the upstream's refusal alone.
    let error: Value = post(addr, request(1)).await.json().await.unwrap();
    assert_eq!(
        error["error"]["message"],
        format!(
            "the chat upstream {} answered 400: n is too large",
            refusing.addr()
        )
    );
    // Unreachable: 502.
    // Bound, not listening, and held: no later server can take its port.
    let (unreachable, _held) = crate::common::refusing();
    let addr = gateway(&config(&[("chat", unreachable, "")])).await;
    let response = post(addr, request(1)).await;
    assert_eq!(response.status(), 502);
    let message = response.text().await.unwrap();
    assert!(message.contains("connection refused"), "{message}");

    // Mid-stream: one request of a fan-out cut after its first event ends only its choice.
    let cut = start(
        says("fine")
            .then(says("cut short").close_after_events(1))
            .then(says("fine")),
    )
    .await;
    let addr = gateway(&config(&[("chat", cut.base_url(), "n = \"fan-out\"")])).await;
    let (chunks, done) = read_sse(post(addr, request(3)).await).await;
    assert!(done);
    let choices = assemble(&chunks);
    let errors: Vec<_> = choices
        .iter()
        .filter(|c| c.1.as_deref() == Some("error"))
        .collect();
    assert_eq!(errors.len(), 1, "{choices:?}");
    assert!(errors[0].2.is_some(), "the failed choice says why");
    assert_eq!(
        choices
            .iter()
            .filter(|c| c.1.as_deref() == Some("stop"))
            .count(),
        2,
        "{choices:?}"
    );
}

fn select(samples: u32, select: &str) -> Value {
    let mut r = request(1);
    r["choicewise"] = json!({"samples": samples, "select": select});
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_finished_streams_the_winner_and_closes_the_rest() {
    // "done" finishes once the stalled samples' answers have begun: they are closed, not
    // cancelled before they were asked.
    let done = says("done").delay(Duration::from_millis(300));
    let server = start(stalled(1).then(done).then(stalled(1))).await;
    let addr = gateway(&config(&[("chat", server.base_url(), "n = \"fan-out\"")])).await;
    let started = Instant::now();
    let (chunks, done) = read_sse(post(addr, select(3, "first_finished")).await).await;
    assert!(done && started.elapsed() < Duration::from_secs(10));
    let choices = assemble(&chunks);
    assert_eq!(choices.len(), 1);
    assert_eq!(
        (choices[0].0.as_str(), choices[0].1.as_deref()),
        ("done", Some("stop"))
    );
    let summary = &chunks.last().unwrap()["choicewise"];
    assert_eq!(summary["samples"], 3);
    assert_eq!(summary["decision"], "first_finished");
    assert_eq!(summary["selected"].as_array().unwrap().len(), 1);
    assert_eq!(summary["cancelled"].as_array().unwrap().len(), 2);
    within(
        Duration::from_secs(2),
        "the stalled connections closing",
        server.wait_disconnects(2),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_picks_the_majority_and_without_a_key_answers_the_first_finished() {
    let server = start(votes_for_42()).await;
    let addr = gateway(&config(&[("chat", server.base_url(), "n = \"fan-out\"")])).await;
    let mut r = select(5, "vote");
    r["choicewise"]["vote_by"] = json!(r"Answer: (\d+)");
    r["stream"] = json!(false);
    let whole: Value = within(LIMIT, "the vote", post(addr, r))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(whole["choices"].as_array().unwrap().len(), 1);
    assert_eq!(whole["choices"][0]["message"]["content"], "Answer: 42");
    assert_eq!(whole["choicewise"]["decision"], "vote");
    assert_eq!(whole["choicewise"]["vote"]["key"], "42");
    assert!(whole["usage"]["total_tokens"].as_u64().unwrap() > 0);
    within(
        Duration::from_secs(2),
        "the stalled connection closing",
        server.wait_disconnects(1),
    )
    .await;
    // No sample with a key, but every one finished: the first to finish is the answer,
    // the vote undecided (a 502 is only for a vote where no sample finished).
    let server = answering("no number").await;
    let addr = gateway(&config(&[("chat", server.base_url(), "n = \"fan-out\"")])).await;
    let mut r = select(3, "vote");
    r["choicewise"]["vote_by"] = json!(r"Answer: (\d+)");
    r["stream"] = json!(false);
    let response = post(addr, r).await;
    assert_eq!(response.status(), 200);
    let whole: Value = response.json().await.unwrap();
    assert_eq!(whole["choices"][0]["message"]["content"], "no number");
    let vote = &whole["choicewise"]["vote"];
    assert_eq!(
        (vote["decided"].clone(), vote["counted"].clone()),
        (json!(false), json!(0)),
        "{whole}"
    );
    assert_eq!(vote["tally"], json!([]), "{whole}");
    assert_eq!(
        whole["choicewise"]["reason"], "no choice finished with a key to vote on",
        "{whole}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_starts_samples_only_while_undecided() {
    // Samples 0..3 split (a "6" among "5"s), so the second window starts; it agrees, and
    // the third window never starts: 8 requests of the 12 allowed.
    let mut script = says("Answer: 5");
    for k in 1..12 {
        let text = if k == 2 { "Answer: 6" } else { "Answer: 5" };
        script = script.then(says(text));
    }
    let server = start(script).await;
    let addr = gateway(&config(&[("chat", server.base_url(), "n = \"fan-out\"")])).await;
    let mut r = select(12, "vote");
    r["choicewise"]["vote_by"] = json!(r"Answer: (\d+)");
    r["choicewise"]["window"] = json!(4);
    r["stream_options"] = json!({"include_usage": true});
    let (chunks, done) = read_sse(within(LIMIT, "the vote", post(addr, r.clone())).await).await;
    assert!(done);
    let last = chunks.last().unwrap();
    assert_eq!(last["choicewise"]["samples"], 12);
    assert_eq!(last["choicewise"]["started"], 8, "{last}");
    assert_eq!(last["choicewise"]["vote"]["key"], "5", "{last}");
    assert_eq!(assemble(&chunks)[0].0, "Answer: 5");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.request_count(), 8, "the third window never starts");
    // Usage counts the started samples only: 8 prompts.
    let per_choice = last["usage"]["choicewise"]["per_choice"]
        .as_array()
        .unwrap();
    assert_eq!(per_choice.len(), 8, "{last}");

    // A window is a positive integer.
    r["choicewise"]["window"] = json!(0);
    let response = post(addr, r).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("choicewise.window"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_token_hedges_only_when_the_first_sample_is_slow() {
    // A quick first sample: no second request.
    let quick = answering("fast").await;
    let addr = gateway(&config(&[("chat", quick.base_url(), "")])).await;
    let mut r = select(3, "first_token");
    r["choicewise"]["hedge_after_ms"] = json!(300);
    let (chunks, _) = read_sse(post(addr, r.clone()).await).await;
    assert_eq!(assemble(&chunks)[0].0, "fast");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        quick.request_count(),
        1,
        "no hedge after a quick first token"
    );
    // A first sample that thinks for 2 s: the second starts after 300 ms and wins.
    let slow = start(
        says("slow")
            .delay(Duration::from_secs(2))
            .then(says("hedged")),
    )
    .await;
    let addr = gateway(&config(&[("chat", slow.base_url(), "")])).await;
    let started = Instant::now();
    let (chunks, done) = read_sse(post(addr, r).await).await;
    assert!(done);
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(assemble(&chunks)[0].0, "hedged");
    assert_eq!(slow.request_count(), 2);
    let summary = &chunks.last().unwrap()["choicewise"];
    assert_eq!(summary["decision"], "first_token");
    assert_eq!(summary["selected"], json!([1]));
    assert_eq!(summary["cancelled"], json!([0]));
    assert_eq!(summary["started"], 2, "the third sample never started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_keys_limits_and_models() {
    let upstream = answering("hi").await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_n = 4\nmax_body_bytes = 2000\nmax_concurrent_requests = 1\n{}",
        config(&[("chat", upstream.base_url(), "")])
    );
    let addr = gateway(&toml).await;
    let url = format!("http://{addr}/v1/chat/completions");
    let send = |key: Option<&str>, body: String| {
        let url = url.clone();
        let key = key.map(str::to_string);
        async move {
            let mut r = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .body(body);
            if let Some(key) = key {
                r = r.bearer_auth(key);
            }
            let response = r.send().await.unwrap();
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let ok = request(1).to_string();
    assert_eq!(send(None, ok.clone()).await.0, 401);
    assert_eq!(send(Some("sk-c"), ok.clone()).await.0, 401);
    let (status, body) = send(Some("sk-b"), "{not json".into()).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(
        send(
            Some("sk-b"),
            json!({"model": "m", "n": 5, "messages": []}).to_string()
        )
        .await
        .0,
        400
    );
    let (status, body) = send(
        Some("sk-a"),
        json!({"model": "nope", "messages": []}).to_string(),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(3000)}]})
        .to_string();
    assert_eq!(send(Some("sk-a"), big).await.0, 413);
    let (status, _) = send(Some("sk-a"), ok.clone()).await;
    assert_eq!(status, 200);
    // One request at a time: a second while one streams is 429.
    let stalling = start(says("slow").stall_after_events(1)).await;
    let toml = format!(
        "[limits]\nmax_concurrent_requests = 1\n{}",
        config(&[("chat", stalling.base_url(), "")])
    );
    let addr = gateway(&toml).await;
    let first = post(addr, request(1)).await;
    assert_eq!(first.status(), 200);
    let second = post(addr, request(1)).await;
    assert_eq!(second.status(), 429);
    drop(first);
    // The models.
    let models: Value = reqwest::get(format!("http://{addr}/v1/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "m");
    assert_eq!(
        reqwest::get(format!("http://{addr}/healthz"))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_closes_every_upstream_within_100_ms() {
    let server = start(stalled(1)).await;
    let addr = gateway(&config(&[("chat", server.base_url(), "n = \"fan-out\"")])).await;
    let response = post(addr, request(3)).await;
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    // The first chunks arrived: every upstream is streaming.
    let first = within(LIMIT, "the first chunk", body.next())
        .await
        .unwrap()
        .unwrap();
    assert!(!first.is_empty());
    within(LIMIT, "three requests", async {
        while server.request_count() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let gone = Instant::now();
    drop(body);
    within(
        Duration::from_secs(2),
        "every upstream closing",
        server.wait_disconnects(3),
    )
    .await;
    assert!(
        gone.elapsed() < Duration::from_millis(100),
        "{:?}",
        gone.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_fails_its_choices_after_the_idle_timeout() {
    let server = start(says("fine").then(stalled(1))).await;
    let toml = format!(
        "[limits]\nupstream_idle_timeout_s = 0.3\n{}",
        config(&[("chat", server.base_url(), "n = \"fan-out\"")])
    );
    let addr = gateway(&toml).await;
    let started = Instant::now();
    let (chunks, done) = read_sse(post(addr, request(2)).await).await;
    assert!(done);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let mut finishes: Vec<_> = assemble(&chunks).into_iter().map(|c| c.1).collect();
    finishes.sort();
    assert_eq!(
        finishes,
        [Some("error".to_string()), Some("stop".to_string())],
        "the stalled choice fails alone"
    );
    // A first_finished pick with only a silent sample left ends too: never a hang.
    let stalled_only = start(stalled(1)).await;
    let toml = format!(
        "[limits]\nupstream_idle_timeout_s = 0.3\n{}",
        config(&[("chat", stalled_only.base_url(), "n = \"fan-out\"")])
    );
    let addr = gateway(&toml).await;
    let mut r = select(2, "first_finished");
    r["stream"] = json!(false);
    let response = within(LIMIT, "the pick", post(addr, r)).await;
    assert_eq!(response.status(), 502, "no sample finished");
}

/// `GET /metrics` in OpenMetrics text, once these lines are all in it (the accounting of an
/// answer lands just after its end).
async fn metrics_with(addr: SocketAddr, lines: &[&str]) -> String {
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    crate::common::metrics_with(addr, lines).await
}

/// Every answer carries the request's id (the client's `x-request-id`, else one the gateway
/// made) and is counted once in `choicewise_requests_total`, the layers' refusals included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_has_a_request_id_and_is_counted_once() {
    let upstream = answering("hi").await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n{}",
        config(&[("chat", upstream.base_url(), "")])
    );
    let addr = gateway(&toml).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/chat/completions");
    let mine = client
        .post(&url)
        .bearer_auth("sk-a")
        .header("x-request-id", "trace-me-42")
        .json(&request(1))
        .send()
        .await
        .unwrap();
    assert_eq!(mine.status(), 200);
    assert_eq!(mine.headers()["x-request-id"], "trace-me-42");
    let made = client.post(&url).json(&request(1)).send().await.unwrap();
    assert_eq!(made.status(), 401);
    let id = made.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(id.starts_with("req-") && id.len() > 8, "{id}");
    let again = client.post(&url).json(&request(1)).send().await.unwrap();
    assert_ne!(again.headers()["x-request-id"].to_str().unwrap(), id);
    let unknown = client
        .get(format!("http://{addr}/v2/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(unknown.headers().contains_key("x-request-id"));
    let text = metrics_with(
        addr,
        &[
            "choicewise_requests_total{model=\"m\",status=\"200\",api=\"chat\"} 1",
            "choicewise_requests_total{model=\"\",status=\"401\",api=\"chat\"} 2",
            "choicewise_requests_total{model=\"\",status=\"404\",api=\"\"} 1",
        ],
    )
    .await;
    assert!(!text.contains("trace-me-42"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_chat_request_is_counted_under_its_configured_model() {
    let server = TestServer::builder()
        .fixture("demo.sse")
        .start()
        .await
        .unwrap();
    let (addr, _gateway) = serve(&config(&[("chat", server.base_url(), "")]), env).await;
    // Refused while it is read (an `n` of 0), for a configured model and for another.
    let mut bad = request(1);
    bad["n"] = json!(0);
    assert_eq!(post(addr, bad.clone()).await.status(), 400);
    bad["model"] = json!("nope");
    assert_eq!(post(addr, bad).await.status(), 400);
    // A body that is not JSON names no model.
    let url = format!("http://{addr}/v1/chat/completions");
    let client = reqwest::Client::new();
    let broken = (client.post(&url).header("content-type", "application/json"))
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(broken.status(), 400);
    metrics_with(
        addr,
        &[
            "choicewise_requests_total{model=\"m\",status=\"400\",api=\"chat\"} 1",
            "choicewise_requests_total{model=\"\",status=\"400\",api=\"chat\"} 2",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_choices_tokens_and_open_connections() {
    let server = fixture("demo.sse").await;
    let host = server.base_url().split('/').nth(2).unwrap().to_string();
    let (addr, _gateway) = serve(&config(&[("chat", server.base_url(), "")]), env).await;
    let mut r = request(3);
    r["stream_options"] = json!({"include_usage": true});
    let (chunks, done) = read_sse(post(addr, r).await).await;
    assert!(done);
    let usage = &chunks.last().unwrap()["usage"];
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    let completion = usage["completion_tokens"].as_u64().unwrap();
    let unknown = post(addr, json!({"model": "nope", "messages": []})).await;
    assert_eq!(unknown.status(), 404);
    let text = metrics_with(
        addr,
        &[
            "choicewise_requests_total{model=\"m\",status=\"200\",api=\"chat\"} 1",
            "choicewise_requests_total{model=\"\",status=\"404\",api=\"chat\"} 1",
            "choicewise_choices_total{model=\"m\",finish_reason=\"stop\"} 2",
            "choicewise_choices_total{model=\"m\",finish_reason=\"tool_calls\"} 1",
            &format!(
                "choicewise_tokens_total{{model=\"m\",upstream=\"chat:up@{host}\",kind=\"completion\",source=\"reported\"}} {completion}"
            ),
            &format!(
                "choicewise_tokens_total{{model=\"m\",upstream=\"chat:up@{host}\",kind=\"prompt\",source=\"reported\"}} {prompt}"
            ),
            "choicewise_time_to_first_chunk_seconds_count{model=\"m\"} 1",
            "choicewise_request_duration_seconds_count{model=\"m\"} 1",
            "choicewise_open_streams 0",
            "choicewise_open_upstream_connections 0",
        ],
    )
    .await;
    assert!(!text.contains("sk-upstream-secret"));

    // A first_finished pick: the losers are cancelled, their tokens counted as such, and
    // while a stalled answer streams, its stream and upstream are open. The winner's head
    // comes late, so the loser has streamed its first events (tokens to count) by then.
    let picks = says("let me think about it")
        .stall_after_events(3)
        .then(says("done").head_delay(Duration::from_millis(500)))
        .start()
        .await
        .unwrap();
    let (addr, _gateway) = serve(
        &config(&[("chat", picks.base_url(), "n = \"fan-out\"")]),
        env,
    )
    .await;
    let (_, done) = read_sse(post(addr, select(2, "first_finished")).await).await;
    assert!(done);
    let text = metrics_with(
        addr,
        &[
            "choicewise_choices_total{model=\"m\",finish_reason=\"stop\"} 1",
            "choicewise_choices_total{model=\"m\",finish_reason=\"cancelled\"} 1",
            "choicewise_open_upstream_connections 0",
        ],
    )
    .await;
    let cancelled: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("choicewise_cancelled_tokens_total{model=\"m\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        cancelled > 0,
        "the cancelled sample's tokens, estimated: {text}"
    );
    let open = post(addr, request(1)).await;
    let mut body = open.bytes_stream();
    within(LIMIT, "the first chunk", body.next())
        .await
        .unwrap()
        .unwrap();
    metrics_with(
        addr,
        &[
            "choicewise_open_streams 1",
            "choicewise_open_upstream_connections 1",
        ],
    )
    .await;
    drop(body);
    metrics_with(
        addr,
        &[
            "choicewise_open_streams 0",
            "choicewise_open_upstream_connections 0",
            "choicewise_choices_total{model=\"m\",finish_reason=\"cancelled\"} 2",
        ],
    )
    .await;
}

/// A client that goes away mid-answer: the request is recorded when its answer is dropped,
/// its samples cancelled with the tokens they had received (estimated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_went_away_is_recorded_with_its_cancelled_tokens() {
    // The upstream reports no usage: the prompt is estimated from the request's fields at
    // once when it is small, and left uncounted (the record made without waiting) when it
    // is over 64 KiB.
    for (prompt, counted) in [("hi".to_string(), true), ("word ".repeat(20_000), false)] {
        let server = start(stalled(3)).await;
        let (addr, _gateway) = serve(&config(&[("chat", server.base_url(), "")]), env).await;
        let mut body = request(1);
        body["messages"][0]["content"] = json!(prompt);
        let response = post(addr, body).await;
        let mut body = response.bytes_stream();
        // The opening, then the upstream's first text.
        let mut read = Vec::new();
        within(LIMIT, "the upstream's text", async {
            while !String::from_utf8_lossy(&read).contains("\"content\":\"") {
                read.extend_from_slice(&body.next().await.unwrap().unwrap());
            }
        })
        .await;
        drop(body);
        let text = metrics_with(
            addr,
            &[
                "choicewise_choices_total{model=\"m\",finish_reason=\"cancelled\"} 1",
                "choicewise_open_streams 0",
            ],
        )
        .await;
        let cancelled: u64 = (text.lines())
            .find_map(|l| l.strip_prefix("choicewise_cancelled_tokens_total{model=\"m\"} "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(cancelled > 0, "what the sample had received: {text}");
        let prompt = (text.lines())
            .find(|l| l.contains("kind=\"prompt\"") && l.contains("source=\"estimated\""))
            .unwrap_or_else(|| panic!("no estimated prompt tokens: {text}"));
        let tokens: u64 = prompt.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(tokens > 0, counted, "{prompt}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_open_answers_with_an_error_and_closes_their_upstreams() {
    let server = start(stalled(1)).await;
    let (addr, gateway) = serve(
        &config(&[("chat", server.base_url(), "n = \"fan-out\"")]),
        env,
    )
    .await;
    let mut r = request(2);
    r["stream_options"] = json!({"include_usage": true});
    let streamed = tokio::spawn(async move { read_sse(post(addr, r).await).await });
    let mut whole = request(1);
    whole["stream"] = json!(false);
    let answered = tokio::spawn(async move { post(addr, whole).await });
    within(LIMIT, "three upstream requests", async {
        while server.request_count() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    gateway.close();
    let (mut chunks, done) = within(Duration::from_secs(5), "the streamed answer", streamed)
        .await
        .unwrap();
    assert!(done, "the answer still ends with [DONE]");
    // No choice finished: the stream ends with the error event the SDKs raise, naming the
    // shutdown, not as a success of truncated choices.
    let error = chunks.pop().unwrap();
    assert_eq!(error["error"]["code"], "shut_down", "{error}");
    assert_eq!(error["error"]["type"], "server_error", "{error}");
    let choices = assemble(&chunks);
    assert_eq!(choices.len(), 2);
    for (text, finish, error) in &choices {
        assert!(text.starts_with("let"), "what arrived stays: {text:?}");
        assert_eq!(finish.as_deref(), Some("error"));
        assert!(error.as_deref().unwrap().contains("shut down"), "{error:?}");
    }
    assert!(chunks.last().unwrap()["usage"]["completion_tokens"].as_u64() > Some(0));
    // Not streamed, no choice finished: a 503 the SDKs retry, as in every API.
    let answered = within(Duration::from_secs(5), "the JSON answer", answered)
        .await
        .unwrap();
    assert_eq!(answered.status(), 503);
    let answer: Value = answered.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "shut_down", "{answer}");
    assert!(
        (answer["error"]["message"].as_str()).is_some_and(|m| m.contains("shut down")),
        "{answer}"
    );
    // Both answers are labelled and counted as cut by the shutdown, never `complete`.
    let text = metrics_with(
        addr,
        &["choicewise_answers_total{model=\"m\",api=\"chat\",ended=\"shut_down\"} 2"],
    )
    .await;
    assert!(!text.contains("ended=\"complete\""), "{text}");
    within(
        Duration::from_secs(2),
        "every upstream closing",
        server.wait_disconnects(3),
    )
    .await;
}

/// A fan-out sample cancelled mid-stream (a pick's loser, before its usage came) takes its
/// prompt tokens from its sibling request's reported figure, flagged estimated; the total
/// says estimated whenever a part is (issue 49).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_samples_prompt_is_its_siblings_reported_figure() {
    let mut quick = answer("done quickly").replace("data: [DONE]\n\n", "");
    quick.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"id": "chatcmpl-answer", "object": "chat.completion.chunk", "model": "m", "choices": [],
               "usage": {"prompt_tokens": 37, "completion_tokens": 3, "total_tokens": 40}})
    ));
    // Whichever request comes first answers at once; the other begins and goes quiet.
    let server = start(TestServer::builder().body(quick).then(stalled(1))).await;
    let (addr, _gateway) = serve(
        &config(&[("chat", server.base_url(), "n = \"fan-out\"")]),
        env,
    )
    .await;
    let mut body = select(2, "first_finished");
    body["stream"] = json!(false);
    let answer: Value = post(addr, body).await.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "done quickly");
    let usage = &answer["usage"];
    let parts = usage["choicewise"]["per_choice"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{usage}");
    let (won, lost): (Vec<&Value>, Vec<&Value>) = parts.iter().partition(|p| p["index"] == 0);
    assert_eq!(won[0]["prompt_tokens"], 37, "{usage}");
    assert_eq!(won[0]["estimated"], false, "{usage}");
    assert_eq!(
        lost[0]["prompt_tokens"], 37,
        "the sibling's figure: {usage}"
    );
    assert_eq!(lost[0]["estimated"], true, "{usage}");
    assert_eq!(usage["prompt_tokens"], 74, "{usage}");
    assert_eq!(usage["choicewise"]["estimated"], true, "{usage}");
}

/// One total reported for several choices of a native request is shared among them, in
/// proportion to their texts' tokens: each part is an estimate, so the total says
/// `estimated: true` though its figures are the upstream's own (issue 49). Short texts are
/// counted in place, long ones on a blocking thread: the shares are the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_total_is_flagged_estimated() {
    let chunk = |i: u32, delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
               "choices": [{"index": i, "delta": delta, "finish_reason": finish}]})
    };
    let (short, long) = ("word ".repeat(20), "word ".repeat(200));
    for texts in [[short.as_str(), "one"], [long.as_str(), "one"]] {
        // The upstream's total is the texts' own counts added: each one's share is its count.
        let encoding = choicewise_usage::encoding_for_model("up").name;
        let counts = texts.map(|t| choicewise_usage::count_text(encoding, t));
        let mut sse = String::new();
        for c in [
            chunk(
                0,
                json!({"role": "assistant", "content": texts[0]}),
                Value::Null,
            ),
            chunk(
                1,
                json!({"role": "assistant", "content": texts[1]}),
                Value::Null,
            ),
            chunk(0, json!({}), json!("stop")),
            chunk(1, json!({}), json!("stop")),
            json!({"id": "c", "object": "chat.completion.chunk", "model": "up", "choices": [],
                   "usage": {"prompt_tokens": 5, "completion_tokens": counts[0] + counts[1],
                             "total_tokens": 5 + counts[0] + counts[1]}}),
        ] {
            sse.push_str(&format!("data: {c}\n\n"));
        }
        sse.push_str("data: [DONE]\n\n");
        let server = start(TestServer::builder().body(sse)).await;
        let addr = gateway(&config(&[("chat", server.base_url(), "")])).await;
        let mut body = request(2);
        body["stream"] = json!(false);
        let answer: Value = post(addr, body).await.json().await.unwrap();
        let usage = &answer["usage"];
        assert_eq!(
            (&usage["prompt_tokens"], &usage["completion_tokens"]),
            (&json!(5), &json!(counts[0] + counts[1])),
            "{usage}"
        );
        let parts = usage["choicewise"]["per_choice"].as_array().unwrap();
        assert!(parts.iter().all(|p| p["estimated"] == true), "{usage}");
        let shares: Vec<u64> = (parts.iter())
            .map(|p| p["completion_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(shares, counts, "{usage}");
        assert_eq!(usage["choicewise"]["estimated"], true, "{usage}");
    }
}

/// A steady load keeps its upstream connections: 40 clients, each sending its next request
/// as soon as its last one ended, open at most `upstream_idle_connections` (64 by default)
/// upstream connections over 12 rounds, where a gateway that keeps none opens one a request
/// (and one that keeps 8 opened 184 in a trial run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_load_reuses_its_upstream_connections() {
    const CLIENTS: usize = 40;
    const ROUNDS: usize = 12;
    async fn load(addr: SocketAddr) {
        let client = reqwest::Client::new();
        let url = format!("http://{addr}/v1/chat/completions");
        let mut clients = tokio::task::JoinSet::new();
        for _ in 0..CLIENTS {
            let (client, url) = (client.clone(), url.clone());
            clients.spawn(async move {
                for _ in 0..ROUNDS {
                    let r = client.post(&url).json(&request(1)).send().await.unwrap();
                    assert_eq!(r.status(), 200);
                    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
                }
            });
        }
        within(Duration::from_secs(60), "the load", async {
            while let Some(done) = clients.join_next().await {
                done.unwrap();
            }
        })
        .await;
    }
    let none = "[limits]\nupstream_idle_connections = 0\n";
    for (limits, most) in [("", 64), (none, usize::MAX)] {
        let upstream = start(TestServer::builder().fixture("openai_n3_tools.sse")).await;
        let toml = format!("{limits}{}", config(&[("chat", upstream.base_url(), "")]));
        let addr = gateway(&toml).await;
        load(addr).await;
        let opened = upstream.connections();
        if most == usize::MAX {
            assert_eq!(opened, CLIENTS * ROUNDS, "none kept: one a request");
        } else {
            assert!(
                opened <= most,
                "{opened} upstream connections for {CLIENTS} clients"
            );
        }
    }
}

/// An answer of known length keeps it through the layers (the slot held by its body): a
/// refusal after the body was read comes with its `content-length`, not chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_after_the_body_keeps_its_length() {
    let upstream = answering("hi").await;
    let addr = gateway(&config(&[("chat", upstream.base_url(), "")])).await;
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let length = (response.headers().get("content-length"))
        .map(|v| v.to_str().unwrap().parse::<usize>().unwrap());
    assert!(response.headers().get("transfer-encoding").is_none());
    let body = response.bytes().await.unwrap();
    assert_eq!(length, Some(body.len()));
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
}
