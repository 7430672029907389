//! The gateway under attack, round two (issue 52): what one request, one client or one
//! model's traffic could do to everyone else. Each finding is a test against a gateway the
//! test starts, over loopback HTTP, its bound asserted from the process's own figures (the
//! counting allocator's peak, the upstreams' request counts, the answers' statuses), never
//! from wall-clock timings.
//!
//! The allocator's peak is the whole process's: the tests run one at a time.

use std::net::SocketAddr;
use std::time::Duration;

use choicewise_test_support::within;
use choicewise_testserver::{TestServer, answer};
use serde_json::{Value, json};

use crate::common::{answering, failing, fan_out_toml, metrics, models_toml, says, serve, start};

use crate::HEAP;

use crate::ONE_AT_A_TIME as SERIAL;

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
    format!("{before}\n{}", models_toml(&[("m", "chat", url)]))
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
/// one a table of ranges once parsed) and a 2 MB pattern of nested optional
/// repetitions are refused as `vote_by_too_large` without parsing them: the request costs
/// less than 16 MiB of heap, its body included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_vote_by_is_refused_before_it_is_parsed() {
    let _serial = SERIAL.lock().await;
    let upstream = answering("4").await;
    let (addr, _) = serve(&config(&upstream.base_url(), ""), env).await;
    // Warm: the first request's one-off allocations (the client's pool, the router's
    // first use) are not the pattern's.
    let mut body = chat(false);
    body["choicewise"] =
        json!({"samples": 2, "select": "vote", "vote_by": "(\\d+)", "min_votes": 1});
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
        toml.push_str(&fan_out_toml(url, ""));
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
    let upstream = start(
        TestServer::builder()
            .body(answer("Answer: 4"))
            .close_after_events(1),
    )
    .await;
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
            // (The count of failed samples is read within a second of the pick's end: on a
            // loaded machine the last one may not have said yet.)
            message
                .contains("of 18 samples failed, 2 of them replacements the retry budget refused"),
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
    let upstream = start(crate::common::stalled(1)).await;
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

/// An upstream that answers 500 to any request whose prompt holds `poison`, and `answer`
/// to the others: a prompt one client can send to make it fail.
async fn poisoned_upstream() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |body: String| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                let status = match body.contains("poison") {
                    true => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    false => axum::http::StatusCode::OK,
                };
                let body = match status.is_success() {
                    true => answer("fine"),
                    false => r#"{"error": {"message": "boom", "type": "server_error"}}"#.into(),
                };
                let kind = match status.is_success() {
                    true => "text/event-stream",
                    false => "application/json",
                };
                (status, [(axum::http::header::CONTENT_TYPE, kind)], body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), requests)
}

/// Whether the metrics say some upstream is ejected now.
fn some_ejected(metrics: &str) -> bool {
    metrics
        .lines()
        .any(|l| l.starts_with("choicewise_upstream_ejected{") && l.ends_with(" 1"))
}

/// Of `count` requests of `key` (one after another), how many were answered 200.
async fn successes(addr: SocketAddr, key: &str, body: &Value, count: usize) -> usize {
    let mut ok = 0;
    for _ in 0..count {
        let r = post(addr, body, Some(key)).await;
        if r.status() == 200 {
            let _ = r.bytes().await;
            ok += 1;
        }
    }
    ok
}

/// Finding 4: one client cannot eject an upstream that serves others. The attacker's
/// prompts make the model's upstreams answer 500, many times in a row (eight samples,
/// three tries each, per request): the upstreams serve another client, so they are not
/// ejected, and that client's success rate during the attack is its baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_eject_an_upstream_for_others() {
    let _serial = SERIAL.lock().await;
    let (first, _) = poisoned_upstream().await;
    let (second, _) = poisoned_upstream().await;
    let toml = fan_out(
        &[first, second],
        "[auth]\nkeys_env = \"CLIENT_KEYS\"",
        "[models.health]\neject_after = 2\neject_for_s = 50",
    );
    let (addr, _) = serve(&toml, env).await;
    // Two samples, one on each upstream: both serve the victim.
    let mut victim = chat(false);
    victim["choicewise"] = json!({"samples": 2, "select": "first_finished"});
    let baseline = successes(addr, "sk-b", &victim, 10).await;
    assert_eq!(baseline, 10);

    let mut poison = chat(false);
    poison["messages"][0]["content"] = json!("poison");
    poison["choicewise"] = json!({"samples": 8, "select": "first_finished"});
    let mut during = 0;
    for _ in 0..5 {
        let r = post(addr, &poison, Some("sk-a")).await;
        assert_eq!(r.status(), 502, "the attacker's own requests fail");
        assert!(
            !some_ejected(&metrics(addr).await),
            "one client's failures ejected an upstream that serves another"
        );
        during += successes(addr, "sk-b", &victim, 4).await;
    }
    assert_eq!(
        during, 20,
        "the other client's success rate stays at its baseline"
    );
}

/// Finding 4: a dead upstream is still ejected after `eject_after` failures, when those
/// failures come from one client and no other is served by it (a gateway with one client),
/// and when they come from two clients; the model's other upstream serves meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_upstream_is_still_ejected() {
    let _serial = SERIAL.lock().await;
    for keys in [&["sk-a", "sk-a"], &["sk-a", "sk-b"]] {
        let dead = failing(500).await;
        // The healthy sample's body comes late: the dead one's 500 is read before the
        // first finish, which would cancel it (a cancelled try is no failure of its
        // upstream's), however loaded the machine.
        let healthy = start(says("fine").delay(Duration::from_millis(300))).await;
        let toml = fan_out(
            &[dead.base_url(), healthy.base_url()],
            "[auth]\nkeys_env = \"CLIENT_KEYS\"",
            "[models.health]\neject_after = 2\neject_for_s = 50",
        );
        let (addr, _) = serve(&toml, env).await;
        let mut body = chat(false);
        body["choicewise"] = json!({"samples": 2, "select": "first_finished"});
        for key in keys {
            assert_eq!(post(addr, &body, Some(key)).await.status(), 200);
        }
        let text = metrics(addr).await;
        assert!(some_ejected(&text), "{keys:?}: {text}");
        // Ejected: the next requests do not reach it.
        let reached = dead.request_count();
        assert_eq!(successes(addr, keys[0], &body, 4).await, 4);
        assert_eq!(dead.request_count(), reached, "{keys:?}");
    }
}

/// Finding 4: when every upstream of a model would be ejected, they are tried anyway
/// (Envoy's panic threshold): a model is never out of service because of ejections alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_whose_every_upstream_is_ejected_is_still_tried() {
    let _serial = SERIAL.lock().await;
    // Fails its first four requests, then answers.
    let upstream = start(
        TestServer::builder()
            .body(answer("fine"))
            .fail_first(4, choicewise_testserver::Failure::status(500)),
    )
    .await;
    let toml = fan_out(
        &[upstream.base_url()],
        "",
        "[models.health]\neject_after = 2\neject_for_s = 300\n[models.retry]\nattempts = 2\nbackoff_ms = 1",
    );
    let (addr, _) = serve(&toml, env).await;
    let body = chat(false);
    // Two failed tries eject the only upstream.
    assert_eq!(post(addr, &body, None).await.status(), 502);
    assert!(some_ejected(&metrics(addr).await));
    // Ejected for 300 s, yet tried: the next request fails twice more, the one after is
    // answered (and restores it).
    assert_eq!(post(addr, &body, None).await.status(), 502);
    assert_eq!(post(addr, &body, None).await.status(), 200);
    assert_eq!(upstream.request_count(), 5);
    let text = metrics(addr).await;
    assert!(!some_ejected(&text), "{text}");
    assert!(
        text.contains("choicewise_panic_routed_total{model=\"m\"}"),
        "{text}"
    );
}

/// Finding 4: retry budgets are kept per model. Another model's failing traffic spends its
/// own budget: the victim model's requests, each needing one retry, fail no more than at
/// their baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_models_failures_do_not_spend_a_models_retries() {
    let _serial = SERIAL.lock().await;
    let failing = failing(500).await;
    let healthy = answering("fine").await;
    // The victim `m`: its first upstream always fails (never ejected), so each request
    // needs one retry; the attacker's model `x` only fails.
    let toml = format!(
        "{}\n[[models]]\nname = \"x\"\n[models.health]\neject_after = 1000\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        fan_out(
            &[failing.base_url(), healthy.base_url()],
            "",
            "[models.health]\neject_after = 1000"
        ),
        failing.base_url()
    );
    let victim = chat(false);
    let mut attack = chat(false);
    attack["model"] = json!("x");
    let count = |addr| {
        let victim = victim.clone();
        async move {
            let mut ok = 0;
            for _ in 0..8 {
                if post(addr, &victim, None).await.status() == 200 {
                    ok += 1;
                }
            }
            ok
        }
    };
    let (alone, _) = serve(&toml, env).await;
    let baseline = count(alone).await;
    assert_eq!(baseline, 8);
    let (addr, _) = serve(&toml, env).await;
    for _ in 0..10 {
        assert_eq!(post(addr, &attack, None).await.status(), 502);
    }
    let text = metrics(addr).await;
    assert!(
        text.contains("choicewise_retry_budget_exhausted_total"),
        "{text}"
    );
    assert_eq!(
        count(addr).await,
        baseline,
        "the victim's failures stay at baseline"
    );
}

/// Finding 4, retry budgets per upstream entry: two models that fail and fall back to a
/// third's upstream each spend their own budget (its floor, ten retries), but that upstream
/// takes at most its own budget of retries from them, not the sum: no other model's
/// failures flood it. Its own model's first tries are not retries: they still succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallbacks_from_several_models_are_bounded_by_the_upstreams_budget() {
    let _serial = SERIAL.lock().await;
    let failing = failing(500).await;
    let shared = answering("fine").await;
    let mut toml = String::new();
    for name in ["x1", "x2"] {
        toml.push_str(&format!(
            "[[models]]\nname = \"{name}\"\nfallbacks = [\"y\"]\n[models.retry]\nattempts = 1\n\
             [models.health]\neject_after = 1000\n\
             [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
            failing.base_url()
        ));
    }
    toml.push_str(&format!(
        "[[models]]\nname = \"y\"\n[models.retry]\nattempts = 1\n\
         [[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\n",
        shared.base_url()
    ));
    let (addr, _) = serve(&toml, env).await;
    let mut fell_back = 0;
    for name in ["x1", "x2"] {
        let mut body = chat(false);
        body["model"] = json!(name);
        for _ in 0..15 {
            let r = post(addr, &body, None).await;
            if r.status() == 200 {
                fell_back += 1;
            }
        }
    }
    let reached = shared.requests().len();
    assert_eq!(
        reached, fell_back,
        "every request that reached y's upstream was answered"
    );
    assert_eq!(
        reached, 10,
        "y's upstream took its own budget's floor of retries, not each model's"
    );
    // y's own traffic: first tries, not charged as retries.
    let mut own = chat(false);
    own["model"] = json!("y");
    for _ in 0..5 {
        assert_eq!(post(addr, &own, None).await.status(), 200);
    }
}

/// Finding 4: every upstream request one client request may cause is bounded by
/// `max_upstream_requests_per_request`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_upstream_requests_are_bounded() {
    let _serial = SERIAL.lock().await;
    let failing = failing(500).await;
    let toml = fan_out(
        &[failing.base_url()],
        "[limits]\nmax_upstream_requests_per_request = 5",
        "[models.health]\neject_after = 1000\n[models.retry]\nattempts = 3\nbackoff_ms = 1",
    );
    let (addr, _) = serve(&toml, env).await;
    let mut body = chat(false);
    // Four samples of three tries each would be twelve requests.
    body["choicewise"] = json!({"samples": 4, "select": "first_finished"});
    let r = post(addr, &body, None).await;
    assert_eq!(r.status(), 502);
    // The first sample's three tries, at least; the answer fails as soon as a sample has
    // failed before any opened, so the others may not have reached the bound.
    let asked = failing.request_count();
    assert!((3..=5).contains(&asked), "{asked} upstream requests");
}

/// Finding 5: a client that keeps its stream open but drains it slower than
/// `client_min_bytes_per_s` (here about 1.6 MB/s against a minimum of 20 MB/s: scaled up so
/// that the gateway's writes, woken once a third of its socket's buffer is free, complete
/// well within the stall bound; the client never stops reading, so the stall bound alone
/// would not end it) ends its answer as a stalled one does: the stream is cut before its
/// end, counted, and the slot freed for the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_drain_releases_its_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _serial = SERIAL.lock().await;
    // 24 MB of answer in large events: more than the sockets between can hold, and more
    // than the client drains before the bound applies.
    let piece = "x".repeat(80_000);
    let mut sse = String::new();
    for _ in 0..300 {
        let chunk =
            json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
        sse.push_str(&format!("data: {chunk}\n\n"));
    }
    sse.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ));
    let upstream = start(TestServer::builder().body(sse)).await;
    // The 24 MB answer is over the default max_answer_bytes (16 MiB): raised for this test.
    let limits = "[limits]\nclient_stall_timeout_s = 4\nclient_min_bytes_per_s = 20000000\nmax_concurrent_requests = 1\nmax_answer_bytes = 67108864";
    let (addr, _) = serve(&config(&upstream.base_url(), limits), env).await;

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    let body = chat(true).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let drain = async {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        got
    };
    let got = within(LIMIT, "the slow drain's end", drain).await;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(
        !text.contains("[DONE]"),
        "the answer was cut before its end"
    );
    assert!(got.len() < 24_000_000);
    let metrics_text = metrics(addr).await;
    assert!(
        metrics_text.contains("choicewise_client_slow_drains_total 1"),
        "{metrics_text}"
    );
    // The slot is free again: the next request is served (not 429).
    let served = async {
        loop {
            let r = post(addr, &chat(false), None).await;
            if r.status() != 429 {
                return r.status();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert_eq!(within(LIMIT, "a free slot", served).await, 200);
}
