//! The gateway under attack, round two (issue 52): what one request, one client or one
//! model's traffic could do to everyone else. Each finding is a test against a gateway the
//! test starts, over loopback HTTP, its bound asserted from the process's own figures (the
//! counting allocator's peak, the upstreams' request counts, the answers' statuses), never
//! from wall-clock timings.
//!
//! The allocator's peak is the whole process's: the tests run one at a time.

use std::net::SocketAddr;
use std::time::Duration;

use choicewise_test_support::{CountingAlloc, within};
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};
use tokio::sync::Mutex;

mod common;
use common::serve;

#[global_allocator]
static HEAP: CountingAlloc = CountingAlloc::new();

/// One test at a time: the heap's peak is the process's.
static SERIAL: Mutex<()> = Mutex::const_new(());

const LIMIT: Duration = Duration::from_secs(60);

const MIB: i64 = 1024 * 1024;

fn env(name: &str) -> Option<String> {
    match name {
        "CLIENT_KEYS" => Some("sk-a,sk-b,sk-c".into()),
        _ => None,
    }
}

/// A model `m` over one upstream, with extra TOML before it.
fn config(url: &str, before: &str) -> String {
    format!(
        "{before}\n[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\n"
    )
}

fn chat(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

async fn post(addr: SocketAddr, body: &Value, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    within(LIMIT, "an answer", request.send()).await.unwrap()
}

/// Finding 1: a `vote_by` is bounded before it is parsed. A 0.3 MB pattern of `\w` (each
/// one a table of ranges once parsed: 784 MiB before) and a 2 MB pattern of nested optional
/// repetitions are refused as `vote_by_too_large` without parsing them: the request costs
/// less than 16 MiB of heap, its body included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_vote_by_is_refused_before_it_is_parsed() {
    let _serial = SERIAL.lock().await;
    let upstream = TestServer::builder()
        .body(answer("4"))
        .start()
        .await
        .unwrap();
    let (addr, _) = serve(&config(&upstream.base_url(), ""), env).await;
    // Warm: the first request's one-off allocations (the client's pool, the router's
    // first use) are not the pattern's.
    let mut body = chat(false);
    body["choicewise"] = json!({"samples": 2, "select": "vote", "vote_by": "(\\d+)"});
    assert_eq!(post(addr, &body, None).await.status(), 200);

    let words = "\\w".repeat(150_000);
    let repetitions = format!("(?:{})", "a?".repeat(1_000_000));
    for (name, pattern) in [("\\w", words), ("(?:a?a?...)", repetitions)] {
        let mut body = chat(false);
        body["choicewise"] = json!({"samples": 2, "select": "vote", "vote_by": pattern});
        let (answer, peak) = HEAP
            .peak_during(async {
                let r = post(addr, &body, None).await;
                (r.status(), r.json::<Value>().await.unwrap())
            })
            .await;
        let (status, answer) = answer;
        assert_eq!(status, 400, "{name}: {answer}");
        assert_eq!(answer["error"]["code"], "vote_by_too_large", "{name}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("\"choicewise.vote_by\" is longer than 1024 bytes"),
            "{message}"
        );
        assert!(
            peak < 16 * MIB,
            "{name}: the refusal took {} MiB of heap",
            peak / MIB
        );
    }
    // Nested too deep, and a case-insensitive pattern of wide classes: refused alike.
    for pattern in [
        format!("{}a{}", "(".repeat(40), ")".repeat(40)),
        format!("(?i){}", "\\p{Any}".repeat(20)),
    ] {
        let mut body = chat(false);
        body["choicewise"] = json!({"samples": 2, "select": "vote", "vote_by": pattern});
        let r = post(addr, &body, None).await;
        assert_eq!(r.status(), 400);
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "vote_by_too_large", "{answer}");
    }
    assert_eq!(upstream.request_count(), 1, "only the warm-up reached it");
}

/// A model `m` over upstreams asked one request per sample, `[models.retry]` and
/// `[models.health]` as given.
fn fan_out(urls: &[String], before: &str, model: &str) -> String {
    let mut toml = format!("{before}\n[[models]]\nname = \"m\"\n{model}\n");
    for url in urls {
        toml.push_str(&format!(
            "[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\nmodel = \"up\"\nn = \"fan-out\"\n"
        ));
    }
    toml
}

/// The data of each event of an SSE text.
fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Finding 2: the windowed vote that hung. Windows of 1 and 2 over six samples, every
/// sample cut mid-stream, their replacements started until the retry budget refuses them:
/// the pick fails once the last sample has ended (no timer ends it: the request's deadline
/// is far), with a reason that says how the samples failed, the refused replacements
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_whose_samples_are_cut_and_replacements_refused_fails() {
    let _serial = SERIAL.lock().await;
    let upstream = TestServer::builder()
        .body(answer("Answer: 4"))
        .close_after_events(1)
        .start()
        .await
        .unwrap();
    for window in [1, 2] {
        // A gateway of its own each time: a budget of its own.
        let (addr, _) = serve(&fan_out(&[upstream.base_url()], "", ""), env).await;
        let before = upstream.request_count();
        let mut body = chat(false);
        body["choicewise"] = json!({"samples": 6, "select": "vote", "window": window});
        let r = post(addr, &body, None).await;
        assert_eq!(r.status(), 502, "window {window}");
        let answer: Value = r.json().await.unwrap();
        assert_eq!(answer["error"]["code"], "no_choice", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        // Six planned, twelve replacements (two more tries each); the budget's floor of ten
        // retries refuses the last two.
        assert!(
            message.contains(
                "18 of 18 samples failed, 2 of them replacements the retry budget refused"
            ),
            "{message}"
        );
        assert_eq!(upstream.request_count() - before, 16, "window {window}");
    }
}

/// Finding 2: the request's deadline ends what no other bound would: an upstream that
/// stalls mid-answer, with idle and stall timeouts far away. Before the answer began (a
/// first-finished pick still waiting), a 504 `request_deadline`; once it streams, its choice
/// ends with an error naming the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_deadline_ends_what_still_runs() {
    let _serial = SERIAL.lock().await;
    let upstream = common::stalled(1).start().await.unwrap();
    let limits = "[limits]\nrequest_deadline_s = 1\nupstream_idle_timeout_s = 3600\nclient_stall_timeout_s = 3600";
    let (addr, _) = serve(&config(&upstream.base_url(), limits), env).await;

    let mut body = chat(false);
    body["choicewise"] = json!({"samples": 2, "select": "first_finished"});
    let r = post(addr, &body, None).await;
    assert_eq!(r.status(), 504);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "request_deadline", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("request_deadline_s"), "{message}");

    let r = post(addr, &chat(true), None).await;
    assert_eq!(r.status(), 200);
    let text = within(LIMIT, "the streamed answer", r.text())
        .await
        .unwrap();
    let chunks = events(&text);
    let last_choice = (chunks.iter())
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .last()
        .unwrap();
    assert_eq!(last_choice["finish_reason"], "error", "{text}");
    assert!(
        last_choice["choicewise"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("request_deadline_s")),
        "{text}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"));
}
