//! Upstreams that fail on purpose, and answers that do not: tries across upstreams,
//! fallbacks, ejection and its probe, the retry budget. Real loopback HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::{Failure, TestServer, answer, tool_call_answer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{
    answering, failing, fan_out_toml, metrics, no_env, post_chat, raw_upstream, says, serve,
    silent, start,
};

const LIMIT: Duration = Duration::from_secs(30);

fn chat(n: u32, stream: bool) -> Value {
    json!({"model": "m", "n": n, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

/// A gateway with model `m` on the one upstream at `url`.
async fn one_upstream(url: &str) -> SocketAddr {
    let toml = format!("[[models]]\nname = \"m\"\n{}", fan_out_toml(url, ""));
    serve(&toml, no_env).await.0
}

/// The final `choicewise` object of an answer, streamed (in its last chunks) or not.
fn summary_of(text: &str, stream: bool) -> Value {
    match stream {
        false => serde_json::from_str::<Value>(text).unwrap()["choicewise"].clone(),
        true => (text.lines())
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find_map(|c| c.get("choicewise").cloned())
            .expect("a chunk with the choicewise object"),
    }
}

/// One upstream refusing connections, one answering 429 with `Retry-After: 1`, one fine:
/// every choice of every request is answered, and the tries say how.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_healthy_upstream_answers_every_choice() {
    let limited = start(TestServer::builder().fail(Failure::status(429).retry_after("1"))).await;
    let fine = answering("fine").await;
    let (refused, _refusing) = crate::common::refusing();
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nattempts = 3\nbackoff_ms = 10\n{}{}{}",
        fan_out_toml(&refused, ""),
        fan_out_toml(&limited.base_url(), ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    // Not streamed: every choice "fine", and the tries listed.
    let r = post_chat(addr, &chat(3, false)).await;
    assert_eq!(r.status(), 200);
    let tries: usize = r.headers()["x-choicewise-tries"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = r.json().await.unwrap();
    for c in body["choices"].as_array().unwrap() {
        assert_eq!(c["message"]["content"], "fine", "{body}");
        assert_eq!(c["finish_reason"], "stop");
    }
    let listed = body["choicewise"]["tries"].as_array().unwrap();
    assert_eq!(listed.len(), tries);
    let outcomes: Vec<&str> = listed
        .iter()
        .map(|t| t["outcome"].as_str().unwrap())
        .collect();
    assert!(
        outcomes.contains(&"connect") && outcomes.contains(&"429"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes.iter().filter(|o| **o == "ok").count(), 3);
    // Streamed: the same.
    let r = post_chat(addr, &chat(3, true)).await;
    assert_eq!(r.status(), 200);
    let text = within(LIMIT, "the streamed answer", r.text())
        .await
        .unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert!(!text.contains("\"error\""), "{text}");
    let m = metrics(addr).await;
    assert!(
        m.contains("choicewise_upstream_tries_total{model=\"m\",upstream=\"chat:up@127.0.0.1:"),
        "{m}"
    );
    assert!(m.contains("outcome=\"connect\""), "{m}");
}

/// A 503 then fine on the model's only upstream: retried after a backoff, answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_failure_is_retried_on_the_same_upstream() {
    let flaky = start(says("second time lucky").fail_first(1, Failure::status(503))).await;
    let addr = one_upstream(&flaky.base_url()).await;
    let r = post_chat(addr, &chat(1, false)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-choicewise-tries"], "2");
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "second time lucky"
    );
    assert_eq!(
        body["choicewise"]["tries"],
        json!([{"sample": 0, "upstream": format!("chat:up@{}", flaky.addr()), "outcome": "5xx"},
               {"sample": 0, "upstream": format!("chat:up@{}", flaky.addr()), "outcome": "ok"}])
    );
    assert_eq!(flaky.request_count(), 2);
}

/// An upstream that holds its first byte past first_byte_timeout_s: the try fails and the
/// next upstream answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_is_left_for_the_next() {
    let fine = answering("fine").await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nfirst_byte_timeout_s = 0.5\n{}{}",
        fan_out_toml(&silent().await, ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let started = Instant::now();
    let r = post_chat(addr, &chat(1, false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["choicewise"]["tries"][0]["outcome"], "timeout");
    assert_eq!(body["choicewise"]["tries"][1]["outcome"], "ok");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Every try of a model failed: its fallback answers. The client's own error is never
/// retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallbacks_answer_and_client_errors_pass_through() {
    let local = answering("from the fallback").await;
    let refusing =
        start(TestServer::builder().fail(Failure::status(400).message("bad parameter"))).await;
    let (refused, _refusing) = crate::common::refusing();
    let toml = format!(
        "[[models]]\nname = \"m\"\nfallbacks = [\"local\"]\n[models.retry]\nbackoff_ms = 1\n{}\
         [[models]]\nname = \"local\"\n{}\
         [[models]]\nname = \"strict\"\nfallbacks = [\"local\"]\n{}",
        fan_out_toml(&refused, ""),
        fan_out_toml(&local.base_url(), ""),
        fan_out_toml(&refusing.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let r = post_chat(addr, &chat(1, false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "from the fallback"
    );
    assert_eq!(body["model"], "m", "the client's model name");
    let m = metrics(addr).await;
    assert!(
        m.contains("choicewise_fallbacks_total{model=\"m\",to=\"local\"} 1"),
        "{m}"
    );
    // A 400 is the client's: passed through after one try, no fallback.
    let mut strict = chat(1, false);
    strict["model"] = json!("strict");
    let r = post_chat(addr, &strict).await;
    assert_eq!(r.status(), 400);
    assert_eq!(refusing.request_count(), 1);
    assert_eq!(local.request_count(), 1);
}

/// A server that answers its first request `first` (a streamed answer) at once, then every
/// request 503 after `after`, counting those: an upstream that served, going down under tries
/// already sent to it.
async fn failing_after(after: Duration, first: String) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        let mut first = Some(first);
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counted = counted.clone();
            let answer = first.take();
            tokio::spawn(async move {
                let mut buf = vec![0; 65536];
                let mut head = Vec::new();
                // The request's head and its body (a small JSON body comes with it).
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
                if let Some(answer) = answer {
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        answer.len()
                    );
                    let _ = tcp.write_all(head.as_bytes()).await;
                    let _ = tcp.write_all(answer.as_bytes()).await;
                    return;
                }
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(after).await;
                let _ = tcp
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (format!("http://{addr}/v1"), count)
}

/// A burst meets an upstream going down: the tries already sent to it fail after its
/// ejection. Their retries leave an ejected upstream for one that answers, so the budget
/// does not charge them, and no request of the burst fails even at a budget of 0 (its floor
/// of ten retries is less than the tries that failed). Both upstreams served a first request
/// of two samples (one each) before the burst, whose requests of one sample all go to the
/// first: however its failures and their retries interleave, the second is known to answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_leaving_an_ejected_upstream_are_not_charged() {
    let (failing, sent) = failing_after(Duration::from_millis(400), answer("fine")).await;
    let fine = answering("fine").await;
    let toml = format!(
        "[limits]\nretry_budget_percent = 0\n[[models]]\nname = \"m\"\n[models.retry]\nbackoff_ms = 1\n[models.health]\neject_after = 1\neject_for_s = 60\n{}{}",
        fan_out_toml(&failing, ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let warm = post_chat(addr, &chat(2, false)).await;
    assert_eq!(warm.status(), 200);
    assert_eq!(fine.request_count(), 1);
    let body = chat(1, false);
    let burst = (0..48).map(|_| post_chat(addr, &body));
    let answers = within(LIMIT, "the burst", futures::future::join_all(burst)).await;
    for r in answers {
        let status = r.status();
        assert_eq!(status, 200, "{}", r.text().await.unwrap_or_default());
    }
    let failed = sent.load(Ordering::SeqCst);
    assert!(failed > 10, "only {failed} tries met the failing upstream");
    let m = metrics(addr).await;
    assert!(
        !m.lines().any(
            |l| l.starts_with("choicewise_retry_budget_exhausted_total ") && !l.ends_with(" 0")
        ),
        "{m}"
    );
}

/// Every upstream down: the retry budget stops the tries, and the answers come at once;
/// every try a 429: the answer is a 429 with the smallest Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_stops_retry_storms() {
    let (refused, _refusing) = crate::common::refusing();
    let toml = format!(
        "[limits]\nretry_budget_percent = 0\n[[models]]\nname = \"m\"\n[models.retry]\nattempts = 5\nbackoff_ms = 1\n[models.health]\neject_after = 1000\n{}",
        fan_out_toml(&refused, "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let started = Instant::now();
    for _ in 0..8 {
        let r = post_chat(addr, &chat(1, false)).await;
        assert_eq!(r.status(), 502);
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains("connect"),
            "{v}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let m = metrics(addr).await;
    // 8 first tries, and only the floor of 10 retries in the window.
    let tries: u64 = m
        .lines()
        .filter(|l| l.starts_with("choicewise_upstream_tries_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(tries, 18, "{m}");
    assert!(m.contains("choicewise_retry_budget_exhausted_total"), "{m}");
    let exhausted = m
        .lines()
        .find_map(|l| l.strip_prefix("choicewise_retry_budget_exhausted_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(exhausted.is_some_and(|n| n > 0), "{m}");

    let limited = start(TestServer::builder().fail(Failure::status(429).retry_after("7"))).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nattempts = 2\nmax_backoff_ms = 100\n{}",
        fan_out_toml(&limited.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let r = post_chat(addr, &chat(1, false)).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
}

/// An upstream that keeps failing is ejected (skipped, its gauge at 1); once its time is
/// over one probe is sent, and its success restores it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ejection_and_recovery_by_probe() {
    let flaky = start(says("flaky is back").fail_first(2, Failure::status(500))).await;
    let fine = answering("fine").await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nbackoff_ms = 1\n[models.health]\neject_after = 2\neject_for_s = 1\n{}{}",
        fan_out_toml(&flaky.base_url(), ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let flaky_label = format!("chat:up@{}", flaky.addr());
    // Two requests, each first tried at the flaky upstream: two failures eject it.
    for _ in 0..2 {
        let r = post_chat(addr, &chat(1, false)).await;
        assert_eq!(r.status(), 200);
    }
    let m = metrics(addr).await;
    assert!(
        m.contains(&format!(
            "choicewise_upstream_ejected{{upstream=\"{flaky_label}\"}} 1"
        )),
        "{m}"
    );
    // Ejected: the next requests never try it.
    let before = flaky.request_count();
    for _ in 0..3 {
        let r = post_chat(addr, &chat(1, false)).await;
        assert_eq!(r.status(), 200);
    }
    assert_eq!(flaky.request_count(), before);
    // Its time over: one probe, which succeeds, and it is back.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = post_chat(addr, &chat(1, false)).await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"], "flaky is back",
        "{body}"
    );
    let m = metrics(addr).await;
    assert!(
        m.contains(&format!(
            "choicewise_upstream_ejected{{upstream=\"{flaky_label}\"}} 0"
        )),
        "{m}"
    );
}

/// A first-token pick without a hedge opens its samples at once, and goes on once one of
/// them opened: an upstream that holds even its status line (here, for longer than the
/// test waits) does not hold the other sample's first tokens back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_token_pick_does_not_wait_for_a_silent_upstream_to_open() {
    let fine = answering("first").await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nfirst_byte_timeout_s = 120\n{}{}",
        fan_out_toml(&silent().await, ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 2, "select": "first_token"});
    let r = within(LIMIT, "the first-token answer", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "first", "{v}");
    assert_eq!(v["choicewise"]["selected"], json!([1]));
}

/// An upstream that finishes its choice and then stays silent, without `[DONE]` or closing,
/// does not hold the streamed answer's end (and its slot) until `upstream_idle_timeout_s`:
/// the body ends a moment after its `[DONE]`, and one slot serves the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_silent_after_its_finish_does_not_hold_the_answers_end() {
    let silent_after = raw_upstream(|mut tcp| async move {
        let mut buf = vec![0; 65536];
        let _ = tcp.read(&mut buf).await;
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
                    "model": "up", "choices": [{"index": 0, "delta": {"content": "done"},
                    "finish_reason": "stop"}]});
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
        let _ = tcp
            .write_all(format!("{head}data: {chunk}\n\n").as_bytes())
            .await;
        // Silent from now on, the connection held open.
        tokio::time::sleep(Duration::from_secs(3600)).await;
    })
    .await;
    let toml = format!(
        "[limits]\nmax_concurrent_requests = 1\n[[models]]\nname = \"m\"\n{}",
        fan_out_toml(&format!("http://{silent_after}/v1"), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    for _ in 0..2 {
        let r = within(LIMIT, "the answer", post_chat(addr, &chat(1, true))).await;
        assert_eq!(r.status(), 200);
        let text = within(LIMIT, "the answer's end", r.text()).await.unwrap();
        assert!(text.contains("done"), "{text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }
}

/// A hedge exists for a first upstream that holds even its status line: the second sample
/// starts after `hedge_after_ms` and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_starts_when_the_first_upstream_is_silent() {
    let fine = answering("hedged").await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}{}",
        fan_out_toml(&silent().await, ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 3, "select": "first_token", "hedge_after_ms": 300});
    let started = Instant::now();
    let r = within(LIMIT, "the hedged answer", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "hedged", "{v}");
    assert_eq!(v["choicewise"]["selected"], json!([1]));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A one-choice Chat Completions stream of `tokens` (each with its top log-probabilities),
/// finishing with `stop`.
fn with_logprobs(tokens: &[&str], tops: &[f64]) -> String {
    let mut sse = String::new();
    for (i, t) in tokens.iter().enumerate() {
        let top: Vec<Value> = (tops.iter().enumerate())
            .map(|(j, lp)| json!({"token": format!("{t}{j}"), "logprob": lp}))
            .collect();
        let delta = match i {
            0 => json!({"role": "assistant", "content": t}),
            _ => json!({"content": t}),
        };
        let chunk = json!({"object": "chat.completion.chunk", "model": "up", "choices": [{
            "index": 0, "delta": delta, "finish_reason": null,
            "logprobs": {"content": [{"token": t, "logprob": tops[0], "top_logprobs": top}]}}]});
        sse.push_str(&format!("data: {chunk}\n\n"));
    }
    let end = json!({"object": "chat.completion.chunk", "model": "up",
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    sse.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
    sse
}

const SURE: [f64; 3] = [-0.01, -5.0, -6.0];
const UNSURE: [f64; 3] = [-0.7, -0.8, -0.9];

/// The DeepConf vote through the gateway, by DeepConf's measure: upstreams asked for top
/// log-probabilities, the warmup sets the threshold, an unsure sample is stopped, the vote
/// is weighted and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidence_vote_stops_unsure_samples() {
    confidence_vote_stops_unsure_samples("top_k", Some(5)).await;
}

/// The same by the sampled token's log-probability (the default measure): upstreams asked
/// for `logprobs: true` alone, no `top_logprobs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_confidence_vote_asks_no_top_logprobs() {
    confidence_vote_stops_unsure_samples("sampled", None).await;
}

async fn confidence_vote_stops_unsure_samples(measure: &str, top_logprobs: Option<u64>) {
    let answer_42 = ["Answer", ": ", "42", "."];
    let answer_41 = ["Answer", ": ", "41", "."];
    let unsure: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    let unsure: Vec<&str> = unsure.iter().map(String::as_str).collect();
    let server = start(
        TestServer::builder()
            .body(with_logprobs(&answer_42, &SURE))
            .then(TestServer::builder().body(with_logprobs(&answer_41, &SURE)))
            .then(
                TestServer::builder()
                    .body(with_logprobs(&unsure, &UNSURE))
                    .max_write_delay(Duration::from_millis(20)),
            )
            .then(TestServer::builder().body(with_logprobs(&answer_42, &SURE))),
    )
    .await;
    let addr = one_upstream(&server.base_url()).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 4, "select": "vote", "vote_by": "Answer: (\\d+)",
        "confidence": {"measure": measure, "warmup": 2, "keep": 0.9, "group_tokens": 2}});
    let r = within(LIMIT, "the confidence vote", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Answer: 42.", "{v}");
    assert!(
        v["choices"][0]["logprobs"].is_null(),
        "the client did not ask: {v}"
    );
    let report = &v["choicewise"]["confidence"];
    assert!(report["threshold"].as_f64().is_some(), "{v}");
    assert_eq!(report["warmup"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(report["stopped"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(
        report["weights"]["42"].as_f64().unwrap() > report["weights"]["41"].as_f64().unwrap_or(0.0),
        "{v}"
    );
    for request in server.requests() {
        let sent = request.json.unwrap();
        assert_eq!(
            (sent["logprobs"].as_bool(), sent["top_logprobs"].as_u64()),
            (Some(true), top_logprobs),
            "{measure}"
        );
    }
    // Confidence goes with a vote.
    let mut bad = chat(1, false);
    bad["choicewise"] = json!({"samples": 2, "select": "first_finished", "confidence": {}});
    assert_eq!(post_chat(addr, &bad).await.status(), 400);
}

/// A confidence-guided vote over an upstream that refuses log-probabilities with tools, as
/// llama.cpp's server does (400 "logprobs is not supported with tools + stream"): each
/// sample refused is asked again without them, the vote decides as a plain vote and the
/// answer says why in `confidence.unavailable`. The refusal is remembered: the next request
/// with tools is sent without them (not one refusal more), and a request without tools
/// still asks for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidence_vote_goes_on_where_the_upstream_refuses_logprobs() {
    let refusal = Failure::status(400).message("logprobs is not supported with tools + stream");
    let server = start(
        TestServer::builder()
            .body(tool_call_answer("read", r#"{"path": "a.rs"}"#))
            .refuse_fields(["logprobs", "tools"], refusal),
    )
    .await;
    let addr = one_upstream(&server.base_url()).await;
    let tools = json!([{"type": "function", "function": {"name": "read",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
    let vote = json!({"samples": 3, "select": "vote",
        "confidence": {"measure": "sampled", "warmup": 2}});
    let asked = |from: usize| -> (usize, usize) {
        let requests = server.requests();
        let with = (requests[from..].iter())
            .filter(|r| r.json.as_ref().unwrap().get("logprobs").is_some())
            .count();
        (with, requests.len() - from)
    };
    // The agents' request: streamed, with tools.
    let mut body = chat(1, true);
    (body["tools"], body["choicewise"]) = (tools.clone(), vote.clone());
    let r = within(LIMIT, "the first vote", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains(r#""decided":true"#), "{text}");
    assert!(
        text.contains("refuses log-probabilities for a streamed request with tools")
            && text.contains("logprobs is not supported with tools + stream"),
        "{text}"
    );
    // The samples asked at once may each be refused; each was asked again without (but the
    // third, when the vote decided at its second vote before it was asked again).
    let (refused, sent) = asked(0);
    assert!((1..=3).contains(&refused), "{refused} refused");
    assert!(
        (2..=3).contains(&(sent - refused)),
        "{refused} of {sent} refused"
    );
    // Remembered: the next request with tools asks none, and is refused none.
    let before = sent;
    body["stream"] = json!(false);
    let r = within(LIMIT, "the second vote", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "read",
        "{v}"
    );
    let unavailable = v["choicewise"]["confidence"]["unavailable"]
        .as_str()
        .unwrap();
    assert!(unavailable.contains("logprobs is not supported"), "{v}");
    assert!(
        v["choicewise"]["vote"]["votes"].as_u64().unwrap() >= 2,
        "{v}"
    );
    assert_eq!(
        asked(before).0,
        0,
        "a refusal remembered is not asked again"
    );
    // A request without tools is not of the shape refused: it asks for them still.
    let before = server.requests().len();
    let mut plain = chat(1, false);
    plain["choicewise"] = vote;
    let r = within(LIMIT, "a vote without tools", post_chat(addr, &plain)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let (with, sent) = asked(before);
    assert_eq!(with, sent, "{v}");
    let unavailable = v["choicewise"]["confidence"]["unavailable"]
        .as_str()
        .unwrap();
    assert!(!unavailable.contains("refuses"), "{v}");
}

/// A confidence-guided vote's warmup sample cut mid-stream is replaced within the warmup:
/// the warmup counts three samples (the cut one and its replacement among them) and the
/// threshold comes from the two that finished. Without the replacement the warmup would be
/// the two first samples, the cut one's partial confidence in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidence_vote_replaces_a_cut_warmup_sample() {
    let answer_42 = ["Answer", ": ", "42", "."];
    let server = start(
        TestServer::builder()
            .body(with_logprobs(&answer_42, &SURE))
            .then(
                TestServer::builder()
                    .body(with_logprobs(&answer_42, &SURE))
                    .close_after_events(1),
            )
            .then(TestServer::builder().body(with_logprobs(&answer_42, &SURE))),
    )
    .await;
    let addr = one_upstream(&server.base_url()).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 4, "select": "vote", "vote_by": "Answer: (\\d+)",
        "confidence": {"warmup": 2, "keep": 0.9, "group_tokens": 2}});
    let r = within(LIMIT, "the confidence vote", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Answer: 42.", "{v}");
    let summary = &v["choicewise"];
    assert_eq!(summary["confidence"]["warmup"], json!([0, 1, 2]), "{v}");
    assert_eq!(summary["started"], 3, "{v}");
    assert_eq!(summary["vote"]["votes"], 2, "{v}");
    let tries = summary["tries"].as_array().unwrap();
    assert!(tries.iter().any(|t| t["outcome"] == "cut"), "{v}");
    assert!(
        tries
            .iter()
            .any(|t| t["sample"] == 2 && t["outcome"] == "ok"),
        "the replacement: {v}"
    );
    assert_eq!(server.request_count(), 3);
}

/// Log-probabilities pass through to a client that asked for them, streamed and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_pass_through_when_asked() {
    let server = start(TestServer::builder().body(with_logprobs(&["Hi", " there"], &SURE))).await;
    let addr = one_upstream(&server.base_url()).await;
    let mut body = chat(1, true);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(3);
    let text = post_chat(addr, &body).await.text().await.unwrap();
    let tokens: Vec<String> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .flat_map(|c| c["choices"].as_array().cloned().unwrap_or_default())
        .flat_map(|c| {
            c["logprobs"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|t| t["token"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tokens, ["Hi", " there"]);
    body["stream"] = json!(false);
    let v: Value = post_chat(addr, &body).await.json().await.unwrap();
    assert_eq!(
        v["choices"][0]["logprobs"]["content"][1]["token"], " there",
        "{v}"
    );
}

/// A probe that ends in the client's own error (a 400) still ends the probe: the upstream
/// is tried again, not left ejected for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_ending_in_a_client_error_does_not_stick() {
    let a = start(
        TestServer::builder()
            .fail(Failure::status(500))
            .then(TestServer::builder().fail(Failure::status(500)))
            .then(TestServer::builder().fail(Failure::status(400).message("bad request")))
            .then(says("from a")),
    )
    .await;
    let b = answering("from b").await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nbackoff_ms = 1\n[models.health]\neject_after = 2\neject_for_s = 0.5\n{}{}",
        fan_out_toml(&a.base_url(), ""),
        fan_out_toml(&b.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    for _ in 0..2 {
        assert_eq!(post_chat(addr, &chat(1, false)).await.status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    // The probe: A's 400 is the client's.
    assert_eq!(post_chat(addr, &chat(1, false)).await.status(), 400);
    // A is tried again (and answers), not held as ejected.
    let v: Value = post_chat(addr, &chat(1, false)).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "from a", "{v}");
}

/// A try succeeds on its first event, not its headers: headers and then silence is a
/// failed try. An upstream that refuses the gateway's key is the gateway's failure (502),
/// its message left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_events_and_refused_credentials() {
    let mute = start(says("never").stall_after_events(0)).await;
    let fine = answering("fine").await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nfirst_byte_timeout_s = 0.5\n{}{}",
        fan_out_toml(&mute.base_url(), ""),
        fan_out_toml(&fine.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let v: Value = post_chat(addr, &chat(1, false)).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "fine", "{v}");
    assert_eq!(v["choicewise"]["tries"][0]["outcome"], "timeout", "{v}");

    let refusing = start(
        TestServer::builder()
            .fail(Failure::status(401).message("Incorrect API key provided: sk-abc1***wxyz")),
    )
    .await;
    let addr = one_upstream(&refusing.base_url()).await;
    let r = post_chat(addr, &chat(1, false)).await;
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(text.contains("refused the gateway's credentials"), "{text}");
    assert!(!text.contains("sk-abc1"), "{text}");
}

/// A sample cut mid-stream while a vote holds it (nothing of it sent) is replaced by a new
/// try, so the vote decides over three answers: 41, 42 and the replacement's 42 (without
/// it, 41 and 42 tie).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_cut_before_the_vote_decided_is_replaced() {
    let cut = start(
        says("Answer: 41")
            .then(says("Answer: 40").close_after_events(1))
            .then(says("Answer: 42"))
            .then(says("Answer: 42")),
    )
    .await;
    let addr = one_upstream(&cut.base_url()).await;
    // Four replies in turn, per request: each round of four requests gets them all.
    for (round, stream) in [false, true].into_iter().enumerate() {
        let mut body = chat(1, stream);
        body["choicewise"] = json!({"samples": 3, "select": "vote", "vote_by": "Answer: (\\d+)"});
        let r = within(LIMIT, "the answer", post_chat(addr, &body)).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        let (content, summary) = match stream {
            false => {
                let whole: Value = serde_json::from_str(&text).unwrap();
                let content = whole["choices"][0]["message"]["content"].clone();
                (
                    content.as_str().unwrap().to_string(),
                    whole["choicewise"].clone(),
                )
            }
            true => {
                let chunks: Vec<Value> = (text.lines())
                    .filter_map(|l| l.strip_prefix("data: "))
                    .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                    .collect();
                let content: String = (chunks.iter())
                    .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                    .collect();
                let summary = chunks.iter().find_map(|c| c.get("choicewise").cloned());
                (content, summary.unwrap())
            }
        };
        assert_eq!(content, "Answer: 42", "{text}");
        assert_eq!(summary["vote"]["key"], "42", "{summary}");
        assert_eq!(summary["vote"]["votes"], 2, "{summary}");
        assert_eq!(summary["started"], 4, "{summary}");
        let tries = summary["tries"].as_array().unwrap();
        let outcomes: Vec<&str> = tries
            .iter()
            .map(|t| t["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(
            outcomes.iter().filter(|o| **o == "cut").count(),
            1,
            "{summary}"
        );
        assert!(
            tries
                .iter()
                .any(|t| t["sample"] == 3 && t["outcome"] == "ok"),
            "the replacement is sample 3: {summary}"
        );
        assert_eq!(cut.request_count(), 4 * (round + 1));
    }
}

/// A windowed vote's sample cut before the vote decided is replaced within its window: the
/// replacement votes in its place, and the first window decides with three samples started
/// (without the replacement, the cut sample splits the first window and a second one runs:
/// four).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windowed_vote_replaces_a_cut_sample_within_its_window() {
    let cut = start(
        says("Answer: 42")
            .then(says("Answer: 40").close_after_events(1))
            .then(says("Answer: 42")),
    )
    .await;
    let addr = one_upstream(&cut.base_url()).await;
    // Three replies in turn: each request's three samples get them all.
    for (round, stream) in [false, true].into_iter().enumerate() {
        let mut body = chat(1, stream);
        body["choicewise"] = json!({"samples": 4, "select": "vote", "window": 2,
                                    "vote_by": "Answer: (\\d+)"});
        let r = within(LIMIT, "the answer", post_chat(addr, &body)).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        let summary = summary_of(&text, stream);
        assert_eq!(summary["vote"]["key"], "42", "{summary}");
        assert_eq!(summary["vote"]["votes"], 2, "{summary}");
        assert_eq!(summary["started"], 3, "{summary}");
        let outcomes: Vec<(u64, &str)> = (summary["tries"].as_array().unwrap().iter())
            .map(|t| {
                (
                    t["sample"].as_u64().unwrap(),
                    t["outcome"].as_str().unwrap(),
                )
            })
            .collect();
        // The first window's two requests race for the replies: either may be cut.
        assert!(
            outcomes.contains(&(0, "cut")) || outcomes.contains(&(1, "cut")),
            "{summary}"
        );
        assert!(outcomes.contains(&(2, "ok")), "the replacement: {summary}");
        assert_eq!(cut.request_count(), 3 * (round + 1));
    }
}

/// A first-token pick's sample cut before it produced anything is replaced: the
/// replacement's tokens are the answer (without it, nothing produced: a 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_token_sample_cut_before_its_first_token_is_replaced() {
    let role_only = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                     data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lost\"}}]}\n\n";
    let upstream_server = start(
        TestServer::builder()
            .body(role_only)
            .close_after_events(1)
            .then(says("replaced")),
    )
    .await;
    let addr = one_upstream(&upstream_server.base_url()).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 1, "select": "first_token"});
    let r = within(LIMIT, "the answer", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "replaced", "{v}");
    assert_eq!(v["choicewise"]["selected"], json!([1]), "{v}");
    assert_eq!(v["choicewise"]["started"], 2, "{v}");
}

/// A native upstream with `max_n` gets no request above it: five samples are planned as
/// requests of two, two and one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_above_max_n_are_split_over_requests() {
    // Each answer's head a second after its request is read: the requests are all sent and
    // read before the first finish decides the pick (in whatever order they arrive).
    let native = start(says("Answer: 42").head_delay(Duration::from_secs(1))).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"native\"\nmax_n = 2\n",
        native.base_url()
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 5, "select": "first_finished"});
    let r = within(LIMIT, "the answer", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Answer: 42", "{v}");
    let mut ns: Vec<u64> = (native.requests().iter())
        .map(|q| q.json.as_ref().unwrap()["n"].as_u64().unwrap_or(1))
        .collect();
    ns.sort_unstable();
    // Planned as requests of two, two and one, sent at once; none above max_n.
    assert!(
        !ns.is_empty() && ns.iter().all(|n| *n <= 2) && ns.iter().sum::<u64>() <= 5,
        "requests of at most max_n samples: {ns:?}"
    );
    assert!(ns.contains(&2), "a request carries max_n samples: {ns:?}");
}

/// A native request of three samples cut after two finished: its unfinished sample is
/// replaced by a single-sample request, and the vote counts it (42 twice, not a 42–41 tie).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_request_cut_mid_stream_is_replaced_sample_by_sample() {
    let chunk = |index: u32, text: &str, finish: bool| {
        let finish = if finish { "\"stop\"" } else { "null" };
        format!(
            "data: {{\"choices\":[{{\"index\":{index},\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let native_body = chunk(0, "Answer: 42", true)
        + &chunk(1, "Answer: 41", true)
        + &chunk(2, "Answer: ", false)
        + &chunk(2, "42", true)
        + "data: [DONE]\n\n";
    let server = start(
        TestServer::builder()
            .body(native_body)
            .close_after_events(3)
            .then(says("Answer: 42")),
    )
    .await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{}\"\nmodel = \"up\"\nn = \"native\"\n",
        server.base_url()
    );
    let (addr, _) = serve(&toml, no_env).await;
    let mut body = chat(1, false);
    body["choicewise"] = json!({"samples": 3, "select": "vote", "vote_by": "Answer: (\\d+)"});
    let r = within(LIMIT, "the answer", post_chat(addr, &body)).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    let summary = &v["choicewise"];
    assert_eq!(v["choices"][0]["message"]["content"], "Answer: 42", "{v}");
    assert_eq!(summary["vote"]["votes"], 2, "{summary}");
    assert_eq!(summary["started"], 4, "{summary}");
    let ns: Vec<u64> = (server.requests().iter())
        .map(|q| q.json.as_ref().unwrap()["n"].as_u64().unwrap_or(1))
        .collect();
    assert_eq!(ns, [3, 1], "one native request, then one replacement");
}

/// A total outage: every upstream of the model answers 500. Leaving an ejected upstream for
/// another that is failing too is a retry like any other, so the budget bounds the tries:
/// 40 requests at once at 20% make 40 first tries and at most 10 retries (the floor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_total_outage_the_budget_bounds_the_tries() {
    let mut servers = Vec::new();
    for _ in 0..3 {
        let server = failing(500).await;
        servers.push(server);
    }
    let toml = format!(
        "[limits]\nretry_budget_percent = 20\n[[models]]\nname = \"m\"\n[models.retry]\nattempts = 5\nbackoff_ms = 1\n[models.health]\neject_after = 2\n{}",
        servers
            .iter()
            .map(|s| fan_out_toml(&s.base_url(), ""))
            .collect::<String>()
    );
    let (addr, _) = serve(&toml, no_env).await;
    let body = chat(1, false);
    let burst = (0..40).map(|_| post_chat(addr, &body));
    let answers = within(LIMIT, "the burst", futures::future::join_all(burst)).await;
    for r in answers {
        assert_eq!(r.status(), 502);
    }
    let tries: usize = servers.iter().map(|s| s.request_count()).sum();
    assert!((40..=50).contains(&tries), "{tries} upstream tries");
}
