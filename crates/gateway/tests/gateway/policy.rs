//! Picking per model: a model's `[models.choicewise]` table is the default policy of the
//! requests that carry no `choicewise` extension, on every ingress (Chat Completions,
//! Anthropic Messages, OpenAI Responses: an agent cannot send the extension); a request's
//! extension is merged over it (the fields it states replace the model's, its `deadline_ms`
//! may only lower the model's); the model's `max_samples` and `lock` are the operator's and
//! stay; a bad table is refused at start naming the model and the field. Real loopback HTTP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_gateway::Config;
use choicewise_test_support::within;
use choicewise_testserver::{TestServer, TestServerBuilder, tool_call_answer};
use serde_json::{Value, json};

use crate::common::{answering, fan_out_toml, no_env, post_to, says, serve, silent, start};

const LIMIT: Duration = Duration::from_secs(30);

/// Model `agents`: its first token hedged across two upstreams, the first of them silent.
fn agents(silent: &str, fine: &str, policy: &str) -> String {
    format!(
        "[[models]]\nname = \"agents\"\n[models.choicewise]\n{policy}\n{}{}",
        fan_out_toml(silent, ""),
        fan_out_toml(fine, "")
    )
}

const HEDGED: &str = "select = \"first_token\"\nsamples = 2\nhedge_after_ms = 200";

async fn answered(addr: SocketAddr, path: &str, body: &Value) -> Value {
    let started = Instant::now();
    let r = within(LIMIT, "the answer", post_to(addr, path, body)).await;
    assert_eq!(r.status(), 200, "{path}");
    let v: Value = r.json().await.unwrap();
    // The silent upstream holds its sample until the first-byte timeout (60 s): answered
    // well before, the answer came from the hedge.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{path}: {:?}",
        started.elapsed()
    );
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_default_policy_hedges_every_ingress() {
    let fine = answering("hedged").await;
    let toml = agents(&silent().await, &fine.base_url(), HEDGED);
    let (addr, _) = serve(&toml, no_env).await;
    let user = json!([{"role": "user", "content": "hi"}]);

    let chat = json!({"model": "agents", "messages": user});
    let v = answered(addr, "/v1/chat/completions", &chat).await;
    assert_eq!(v["choices"][0]["message"]["content"], "hedged", "{v}");
    assert_eq!(v["choicewise"]["decision"], "first_token", "{v}");
    assert_eq!(v["choicewise"]["samples"], 2, "{v}");
    assert_eq!(v["choicewise"]["selected"], json!([1]), "{v}");

    let messages = json!({"model": "agents", "max_tokens": 100, "messages": user});
    let v = answered(addr, "/v1/messages", &messages).await;
    assert_eq!(v["content"][0]["text"], "hedged", "{v}");

    let responses = json!({"model": "agents", "input": "hi"});
    let v = answered(addr, "/v1/responses", &responses).await;
    let message = (v["output"].as_array().unwrap().iter())
        .find(|i| i["type"] == "message")
        .unwrap();
    assert_eq!(message["content"][0]["text"], "hedged", "{v}");
    assert_eq!(fine.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_extension_is_merged_over_the_models_default() {
    let fine = answering("fine").await;
    let toml = agents(&silent().await, &fine.base_url(), HEDGED);
    let (addr, _) = serve(&toml, no_env).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    // Its own samples and hedge: three samples, the second started after 1 s, not 200 ms.
    let body = json!({"model": "agents", "messages": user,
                      "choicewise": {"samples": 3, "hedge_after_ms": 1000}});
    let started = Instant::now();
    let v = answered(addr, "/v1/chat/completions", &body).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(v["choices"][0]["message"]["content"], "fine", "{v}");
    assert_eq!(v["choicewise"]["samples"], 3, "{v}");
    assert_eq!(
        v["choicewise"]["decision"], "first_token",
        "the model's select, kept: {v}"
    );
    assert_eq!(v["choicewise"]["selected"], json!([1]), "{v}");
    // An empty extension keeps the model's pick, its hedge included: answered by the hedge
    // (`answered` asserts well before the silent upstream's timeout).
    for empty in [json!({}), json!({"hedge_after_ms": null, "select": null})] {
        let body = json!({"model": "agents", "messages": user, "choicewise": empty});
        let v = answered(addr, "/v1/chat/completions", &body).await;
        assert_eq!(v["choicewise"]["decision"], "first_token", "{v}");
        assert_eq!(v["choicewise"]["samples"], 2, "{v}");
    }
    // The request's own fields still go through the extension's checks.
    let bad = json!({"model": "agents", "messages": user,
                     "choicewise": {"samples": 2, "select": "vote", "hedge_after_ms": 200}});
    let r = post_to(addr, "/v1/chat/completions", &bad).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("\"choicewise.hedge_after_ms\" goes with \"select\": \"first_token\""),
        "{message}"
    );
    assert!(
        message.contains("merged over the default of model \"agents\""),
        "{message}"
    );
    assert_eq!(e["error"]["param"], "choicewise.hedge_after_ms");
    // A default of 2 samples cannot serve n = 3: 400 naming the model's default.
    let three = json!({"model": "agents", "n": 3, "messages": user});
    let r = post_to(addr, "/v1/chat/completions", &three).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("\"choicewise.samples\" must be an integer from n (3) to 16"),
        "{message}"
    );
    assert!(
        message.contains("the default of model \"agents\", its [models.choicewise]"),
        "{message}"
    );
    assert_eq!(e["error"]["code"], "invalid_samples");
}

/// A model of one upstream with `extra` in its `[[models]]` entry and `policy` as its
/// `[models.choicewise]`.
fn one_model(url: &str, extra: &str, policy: &str) -> String {
    format!(
        "[[models]]\nname = \"m\"\n{extra}\n[models.choicewise]\n{policy}\n{}",
        fan_out_toml(url, "")
    )
}

async fn refusal(addr: SocketAddr, body: &Value) -> Value {
    let r = within(
        LIMIT,
        "the refusal",
        post_to(addr, "/v1/chat/completions", body),
    )
    .await;
    assert_eq!(r.status(), 400, "{body}");
    let e: Value = r.json().await.unwrap();
    e["error"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_max_samples_caps_every_request() {
    let fine = answering("fine").await;
    let toml = one_model(
        &fine.base_url(),
        "max_samples = 4",
        "select = \"vote\"\nsamples = 2",
    );
    let (addr, _) = serve(&toml, no_env).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    for (body, param, asked) in [
        (
            json!({"model": "m", "messages": user, "choicewise": {"samples": 16, "select": "vote"}}),
            "choicewise.samples",
            16,
        ),
        (
            json!({"model": "m", "messages": user, "choicewise": {"samples": 16}}),
            "choicewise.samples",
            16,
        ),
        (json!({"model": "m", "messages": user, "n": 16}), "n", 16),
        (
            json!({"model": "m", "messages": user, "n": 5, "choicewise": {}}),
            "n",
            5,
        ),
    ] {
        let e = refusal(addr, &body).await;
        assert_eq!(
            e["message"],
            format!(
                "model \"m\" takes at most 4 samples (its max_samples), and the request asks for {asked} ({param})"
            ),
            "{body}"
        );
        assert_eq!(
            (e["code"].as_str(), e["param"].as_str()),
            (Some("invalid_samples"), Some(param))
        );
    }
    assert_eq!(fine.request_count(), 0, "nothing refused went upstream");
    // Up to the cap is served.
    let four = json!({"model": "m", "messages": user, "choicewise": {"samples": 4}});
    let r = within(
        LIMIT,
        "the answer",
        post_to(addr, "/v1/chat/completions", &four),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choicewise"]["samples"], 4, "{v}");
    // Four samples asked for, never more. The vote is won at its second "fine": with two
    // samples left, another answer could at most tie it with a later first finish
    // (`Ballot::verdict`). It cancels the samples not finished by then, which may not have
    // been asked yet (the pick goes on at the first head).
    assert!(
        (2..=4).contains(&fine.request_count()),
        "{}",
        fine.request_count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_models_pick_refuses_every_extension() {
    let fine = answering("fine").await;
    let toml = one_model(
        &fine.base_url(),
        "",
        "lock = true\nselect = \"first_finished\"\nsamples = 2",
    );
    let (addr, _) = serve(&toml, no_env).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    for ext in [
        json!({}),
        json!({"samples": 2, "select": "first_finished"}),
        json!({"deadline_ms": 100}),
    ] {
        let body = json!({"model": "m", "messages": user, "choicewise": ext});
        let e = refusal(addr, &body).await;
        assert_eq!(
            e["message"],
            "the pick of model \"m\" is set by the operator (lock = true in its [models.choicewise]): leave out the \"choicewise\" extension",
            "{body}"
        );
        assert_eq!(
            (e["code"].as_str(), e["param"].as_str()),
            (Some("choicewise_locked"), Some("choicewise"))
        );
    }
    // On the other ingresses too: a Messages request carries the extension as a field.
    let messages = json!({"model": "m", "max_tokens": 10, "messages": user, "choicewise": {}});
    let r = within(
        LIMIT,
        "the refusal",
        post_to(addr, "/v1/messages", &messages),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("set by the operator"));
    assert_eq!(fine.request_count(), 0);
    // Without the extension, the model's pick.
    let body = json!({"model": "m", "messages": user});
    let r = within(
        LIMIT,
        "the answer",
        post_to(addr, "/v1/chat/completions", &body),
    )
    .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choicewise"]["decision"], "first_finished", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_deadline_is_a_ceiling_a_request_may_lower() {
    // A vote of two samples needing two votes, one of them stalled after its first event:
    // the vote waits for it until its deadline, then answers the one it has.
    let fine = answering("fine").await;
    let stalled = start(crate::common::stalled(1)).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.choicewise]\nselect = \"vote\"\nsamples = 2\nmin_votes = 2\ndeadline_ms = 1500\n{}{}",
        fan_out_toml(&fine.base_url(), ""),
        fan_out_toml(&stalled.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let user = json!([{"role": "user", "content": "hi"}]);
    // The four requests at once, each timed from its own start: each waits on its own
    // stalled sample.
    futures::future::join_all(
        [
            // Dropped or raised: the model's 1.5 s stays.
            (json!({"samples": 2, "select": "vote"}), 1.5, 10.0),
            (json!({"deadline_ms": 60000}), 1.5, 10.0),
            (json!({"deadline_ms": null}), 1.5, 10.0),
            // Lowered: the request's.
            (json!({"deadline_ms": 300}), 0.3, 1.4),
        ]
        .map(|(ext, at_least, under)| {
            let body = json!({"model": "m", "messages": user, "choicewise": ext});
            async move {
                let started = Instant::now();
                let r = within(
                    LIMIT,
                    "the answer",
                    post_to(addr, "/v1/chat/completions", &body),
                )
                .await;
                let took = started.elapsed().as_secs_f64();
                assert_eq!(r.status(), 200, "{ext}");
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["choices"][0]["message"]["content"], "fine", "{ext}: {v}");
                assert!(took >= at_least && took < under, "{ext}: {took} s");
            }
        }),
    )
    .await;
}

#[test]
fn a_bad_default_is_refused_at_start_naming_the_model_and_field() {
    let here = "http://127.0.0.1:9/v1";
    for (policy, says) in [
        (
            "select = \"vote\"\nsamples = 3\nhedge_after_ms = 200",
            "model \"agents\", [models.choicewise]: \"choicewise.hedge_after_ms\" goes with \"select\": \"first_token\"",
        ),
        (
            "select = \"first_token\"\nsamples = 2\nhedge_after_ms = 0",
            "\"choicewise.hedge_after_ms\" must be at least 10",
        ),
        (
            "select = \"first_token\"\nsamples = 17",
            "\"choicewise.samples\" must be an integer from n (1) to 16 (max_samples), not 17",
        ),
        (
            "samples = 2",
            "\"choicewise.samples\" above n needs \"choicewise.select\"",
        ),
        (
            "select = \"best\"\nsamples = 2",
            "unknown \"choicewise.select\": \"best\" (first_token, first_finished or vote)",
        ),
        (
            "hedge = 1",
            "unknown field \"choicewise.hedge\" (samples, select, vote_by",
        ),
        (
            "select = \"vote\"\nsamples = 3\n[models.choicewise.confidence]\nkeep = 2.0",
            "\"choicewise.confidence.keep\" must be a number above 0 and at most 1, not 2.0",
        ),
        (
            "select = \"vote\"\nsamples = 3\n[models.choicewise.confidence]\nmeasure = \"mean\"",
            "unknown \"choicewise.confidence.measure\": \"mean\" (sampled, top_k)",
        ),
    ] {
        let toml = agents(here, here, policy);
        let e = Config::from_toml(&toml).unwrap_err().to_string();
        assert!(
            e.starts_with("model \"agents\", [models.choicewise]: "),
            "{policy}: {e}"
        );
        assert!(e.contains(says), "{policy}: {e}");
    }
    for (extra, policy, says) in [
        (
            "",
            "lock = 1",
            "model \"m\", [models.choicewise]: lock must be true or false, not 1",
        ),
        (
            "max_samples = 0",
            "",
            "model \"m\": max_samples must be at least 1",
        ),
        (
            "max_samples = 2",
            "select = \"vote\"\nsamples = 3",
            "model \"m\", [models.choicewise]: \"choicewise.samples\" must be an integer from n (1) to 2 (max_samples), not 3",
        ),
    ] {
        let e = Config::from_toml(&one_model(here, extra, policy)).unwrap_err();
        assert_eq!(e.to_string(), says);
    }
    let ok = Config::from_toml(&agents(here, here, HEDGED)).unwrap();
    assert_eq!(
        ok.models[0].choicewise.as_ref().unwrap()["hedge_after_ms"],
        json!(200)
    );
}

/// Model `agents` with a vote of 3 samples over one Chat upstream that answers each request
/// as `script` says, in turn.
async fn vote_model(script: TestServerBuilder) -> (SocketAddr, TestServer) {
    let server = start(script).await;
    let toml = format!(
        "[[models]]\nname = \"agents\"\n[models.choicewise]\nselect = \"vote\"\nsamples = 3\n{}",
        fan_out_toml(&server.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    (addr, server)
}

/// The one function call of an answer, in whichever API it came: its name and arguments.
fn the_call(path: &str, v: &Value) -> (String, Value) {
    let (name, args) = match path {
        "/v1/chat/completions" => {
            assert_eq!(v["choices"].as_array().unwrap().len(), 1, "{v}");
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
            let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
            let args = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            (call["name"].clone(), args)
        }
        "/v1/messages" => {
            assert_eq!(v["stop_reason"], "tool_use", "{v}");
            let call = (v["content"].as_array().unwrap().iter())
                .find(|b| b["type"] == "tool_use")
                .unwrap();
            (call["name"].clone(), call["input"].clone())
        }
        _ => {
            let call = (v["output"].as_array().unwrap().iter())
                .find(|i| i["type"] == "function_call")
                .unwrap();
            let args = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
            (call["name"].clone(), args)
        }
    };
    (name.as_str().unwrap().to_string(), args)
}

/// Each ingress's request for model `agents`, with one tool to call.
fn tool_requests() -> [(&'static str, Value); 3] {
    let user = json!([{"role": "user", "content": "read a.rs"}]);
    let params = json!({"type": "object", "properties": {"path": {"type": "string"}}});
    [
        (
            "/v1/chat/completions",
            json!({"model": "agents", "messages": user, "tools": [{"type": "function",
                "function": {"name": "read", "parameters": params}}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "agents", "max_tokens": 100, "messages": user,
                "tools": [{"name": "read", "input_schema": params}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "agents", "input": "read a.rs",
                "tools": [{"type": "function", "name": "read", "parameters": params}]}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_decides_a_tool_call_on_every_ingress() {
    // Three samples make the same call, written three ways: one key, 3 votes.
    let (addr, server) = vote_model(
        TestServer::builder()
            .body(tool_call_answer("read", r#"{"path": "a.rs", "n": 1}"#))
            .then(TestServer::builder().body(tool_call_answer("read", r#"{"n":1,"path":"a.rs"}"#)))
            .then(TestServer::builder().body(tool_call_answer(
                "read",
                "{ \"path\" : \"a.rs\",\n \"n\": 1 }",
            ))),
    )
    .await;
    for (path, body) in tool_requests() {
        let v = answered(addr, path, &body).await;
        assert_eq!(
            the_call(path, &v),
            ("read".into(), json!({"path": "a.rs", "n": 1})),
            "{path}"
        );
        if path == "/v1/chat/completions" {
            let vote = &v["choicewise"]["vote"];
            assert_eq!(vote["decided"], true, "{v}");
            // Decided at the second vote: the third cannot change it.
            assert!(vote["votes"].as_u64().unwrap() >= 2, "{v}");
            assert_eq!(vote["key"], r#"[["read",{"n":1,"path":"a.rs"}]]"#, "{v}");
        }
        // Streamed: the same call, and the summary says the vote decided.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let r = within(LIMIT, "the streamed vote", post_to(addr, path, &streamed)).await;
        assert_eq!(r.status(), 200, "{path}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("read") && text.contains("a.rs"),
            "{path}: {text}"
        );
        if path == "/v1/chat/completions" {
            assert!(text.contains(r#""decided":true"#), "{text}");
        }
    }
    // 3 samples for each of 6 requests, but a vote decided at its second vote cancels the
    // third, which may not have been asked yet (the pick goes on at the first head).
    let asked = server.request_count();
    assert!(
        (12..=18).contains(&asked),
        "{asked} samples asked for 6 requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_calls_of_three_agreeing_win_and_text_shares_the_tally() {
    // Two samples call read(a.rs); the third answers text: the call wins, 2 votes of 3.
    let (addr, _server) = vote_model(
        TestServer::builder()
            .body(tool_call_answer("read", r#"{"path": "a.rs"}"#))
            .then(says("I cannot read files."))
            .then(TestServer::builder().body(tool_call_answer("read", r#"{"path":"a.rs"}"#))),
    )
    .await;
    let [(path, body), ..] = tool_requests();
    let v = answered(addr, path, &body).await;
    assert_eq!(the_call(path, &v).1, json!({"path": "a.rs"}));
    let vote = &v["choicewise"]["vote"];
    assert_eq!(
        (vote["decided"].clone(), vote["votes"].clone()),
        (json!(true), json!(2)),
        "{v}"
    );
    // The text sample votes too, when it finished before the calls decided.
    let tally = vote["tally"].as_array().unwrap();
    assert_eq!(tally[0]["votes"], 2, "{v}");
    if let Some(text) = tally.get(1) {
        assert_eq!(
            text,
            &json!({"key": "I cannot read files.", "votes": 1}),
            "{v}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_no_key_wins_answers_the_first_finished_sample() {
    // Three different calls: no key has 2 votes. The sample written at once finishes first
    // and is the answer, 200, the vote saying it did not decide; the other two trickle in
    // (their first bytes come at once: the gateway waits for every sample's first byte).
    // Writes of 8 to 16 bytes up to 40 ms apart: the slow ones end a second or more after
    // the one written at once, whatever the machine's load.
    let slowly = |b: TestServerBuilder| {
        b.random_writes(8, 16)
            .max_write_delay(Duration::from_millis(40))
    };
    let (addr, _server) = vote_model(
        slowly(TestServer::builder().body(tool_call_answer("read", r#"{"path": "a.rs"}"#)))
            .then(TestServer::builder().body(tool_call_answer("read", r#"{"path": "b.rs"}"#)))
            .then(slowly(
                TestServer::builder().body(tool_call_answer("list", "{}")),
            )),
    )
    .await;
    for (path, body) in tool_requests() {
        let v = answered(addr, path, &body).await;
        assert_eq!(
            the_call(path, &v),
            ("read".into(), json!({"path": "b.rs"})),
            "{path}: {v}"
        );
        if path == "/v1/chat/completions" {
            let vote = &v["choicewise"]["vote"];
            assert_eq!(vote["decided"], false, "{v}");
            assert_eq!(vote["key"], r#"[["read",{"path":"b.rs"}]]"#, "{v}");
            assert_eq!(
                (vote["votes"].clone(), vote["counted"].clone()),
                (json!(1), json!(3)),
                "{v}"
            );
            assert_eq!(vote["tally"].as_array().unwrap().len(), 3, "{v}");
            let reason = v["choicewise"]["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("no key has 2 votes (tally: "),
                "{reason}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_answers_502_only_when_no_sample_finished() {
    let (addr, _server) =
        vote_model(TestServer::builder().fail(choicewise_testserver::Failure::status(500))).await;
    for (path, body) in tool_requests() {
        let r = within(LIMIT, "the failed vote", post_to(addr, path, &body)).await;
        assert_eq!(r.status(), 502, "{path}");
    }
}

/// A model's `deadline_ms` counts from the request's start: over an upstream that sends its
/// head and then nothing (no first byte until `first_byte_timeout_s`, 8 s), a pick of 1.5 s
/// is a 504 within 2.5 s naming `deadline_ms` and its value, whatever the pick and the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_ms_counts_from_the_requests_start() {
    let url = crate::common::head_then_silent(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked",
    )
    .await;
    let user = json!([{"role": "user", "content": "hi"}]);
    let apis = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": user}),
        ),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 100, "messages": user}),
        ),
        ("/v1/responses", json!({"model": "m", "input": "hi"})),
    ];
    let mut asked = Vec::new();
    for policy in [
        "select = \"first_token\"\nsamples = 2",
        "select = \"vote\"\nsamples = 3",
        "select = \"first_finished\"\nsamples = 2",
    ] {
        let toml = format!(
            "[[models]]\nname = \"m\"\n[models.retry]\nfirst_byte_timeout_s = 8\n\
             [models.choicewise]\n{policy}\ndeadline_ms = 1500\n{}",
            fan_out_toml(&url, "")
        );
        let (addr, _) = serve(&toml, no_env).await;
        for (path, body) in &apis {
            asked.push((policy, addr, *path, body.clone()));
        }
    }
    // Every pick over every API at once: each request's deadline is its own.
    let answered = asked
        .into_iter()
        .map(|(policy, addr, path, body)| async move {
            let started = Instant::now();
            let r = within(LIMIT, "the answer", post_to(addr, path, &body)).await;
            let took = started.elapsed();
            let status = r.status();
            let text = r.text().await.unwrap();
            assert_eq!(status, 504, "{policy} {path}: {text}");
            assert!(
                took < Duration::from_millis(2500),
                "{policy} {path}: {took:?}"
            );
            assert!(text.contains("deadline_ms"), "{policy} {path}: {text}");
            assert!(text.contains("1500 ms"), "{policy} {path}: {text}");
            assert!(
                !text.contains("request_deadline_s"),
                "{policy} {path}: {text}"
            );
        });
    futures::future::join_all(answered).await;
}
