//! Picking per model: a model's `[models.choicewise]` table is the default policy of the
//! requests that carry no `choicewise` extension, on every ingress (Chat Completions,
//! Anthropic Messages, OpenAI Responses: an agent cannot send the extension); a request's
//! extension replaces it wholly; a bad table is refused at start naming the model and the
//! field. Real loopback HTTP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_gateway::Config;
use choicewise_test_support::within;
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};

mod common;
use common::{serve, silent};

const LIMIT: Duration = Duration::from_secs(30);

fn env(_: &str) -> Option<String> {
    None
}

fn upstream(url: &str) -> String {
    format!(
        "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"fan-out\"\n"
    )
}

/// Model `agents`: its first token hedged across two upstreams, the first of them silent.
fn agents(silent: &str, fine: &str, policy: &str) -> String {
    format!(
        "[[models]]\nname = \"agents\"\n[models.choicewise]\n{policy}\n{}{}",
        upstream(silent),
        upstream(fine)
    )
}

const HEDGED: &str = "select = \"first_token\"\nsamples = 2\nhedge_after_ms = 200";

async fn post(addr: SocketAddr, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn answered(addr: SocketAddr, path: &str, body: &Value) -> Value {
    let started = Instant::now();
    let r = within(LIMIT, "the answer", post(addr, path, body)).await;
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
    let fine = TestServer::builder()
        .body(answer("hedged"))
        .start()
        .await
        .unwrap();
    let toml = agents(&silent().await, &fine.base_url(), HEDGED);
    let (addr, _) = serve(&toml, env).await;
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
async fn a_requests_extension_replaces_the_models_default() {
    let fine = TestServer::builder()
        .body(answer("fine"))
        .start()
        .await
        .unwrap();
    let toml = agents(&silent().await, &fine.base_url(), HEDGED);
    let (addr, _) = serve(&toml, env).await;
    // Its own samples and hedge: three samples, the second started after 1 s, not 200 ms.
    let body = json!({"model": "agents", "messages": [{"role": "user", "content": "hi"}],
                      "choicewise": {"samples": 3, "select": "first_token", "hedge_after_ms": 1000}});
    let started = Instant::now();
    let v = answered(addr, "/v1/chat/completions", &body).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(v["choices"][0]["message"]["content"], "fine", "{v}");
    assert_eq!(v["choicewise"]["samples"], 3, "{v}");
    assert_eq!(v["choicewise"]["selected"], json!([1]), "{v}");
    // The extension's own checks, not the default's fields: a hedge with a vote is refused.
    let bad = json!({"model": "agents", "messages": [{"role": "user", "content": "hi"}],
                     "choicewise": {"samples": 2, "select": "vote", "hedge_after_ms": 200}});
    let r = post(addr, "/v1/chat/completions", &bad).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(
        e["error"]["message"],
        "\"choicewise.hedge_after_ms\" goes with \"select\": \"first_token\""
    );
    assert_eq!(e["error"]["param"], "choicewise.hedge_after_ms");
    // A default of 2 samples cannot serve n = 3: 400 naming the model's default.
    let three = json!({"model": "agents", "n": 3, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(addr, "/v1/chat/completions", &three).await;
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
    ] {
        let toml = agents(here, here, policy);
        let e = Config::from_toml(&toml).unwrap_err().to_string();
        assert!(
            e.starts_with("model \"agents\", [models.choicewise]: "),
            "{policy}: {e}"
        );
        assert!(e.contains(says), "{policy}: {e}");
    }
    let ok = Config::from_toml(&agents(here, here, HEDGED)).unwrap();
    assert_eq!(
        ok.models[0].choicewise.as_ref().unwrap()["hedge_after_ms"],
        json!(200)
    );
}
