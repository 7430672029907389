//! What a failing model writes to the logs, and what an upstream's absurd usage does to the
//! counters: warnings are rate-limited (one of a kind per model per second, the next saying
//! how many were left out); reported usage is clamped and the sums saturate. Real loopback
//! HTTP; the log lines captured by a subscriber of this test binary.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use choicewise_testserver::TestServer;
use serde_json::{Value, json};

use crate::common::{
    failing, fan_out_toml, metrics, no_env, post_chat, serve, start, upstream_toml,
};

const LIMIT: Duration = Duration::from_secs(60);

/// The log lines written, shared with the subscriber.
#[derive(Clone, Default)]
pub(crate) struct Lines(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn post(addr: SocketAddr, body: &Value) -> reqwest::Response {
    within(LIMIT, "an answer", post_chat(addr, body)).await
}

/// The lines this test binary's subscriber writes (installed once, for every test here).
pub(crate) fn lines() -> Lines {
    static LINES: std::sync::OnceLock<Lines> = std::sync::OnceLock::new();
    LINES
        .get_or_init(|| {
            let lines = Lines::default();
            let writer = lines.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).unwrap();
            lines
        })
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_models_warnings_are_rate_limited() {
    let lines = lines();

    let mut servers = Vec::new();
    for _ in 0..2 {
        let server = failing(500).await;
        servers.push(server);
    }
    let toml = format!(
        "[[models]]\nname = \"warned\"\n[models.retry]\nbackoff_ms = 1\n[models.health]\neject_after = 1\neject_for_s = 60\n{}",
        servers
            .iter()
            .map(|s| fan_out_toml(&s.base_url(), ""))
            .collect::<String>()
    );
    let (addr, _) = serve(&toml, no_env).await;
    let body = json!({"model": "warned", "messages": [{"role": "user", "content": "hi"}]});
    let started = Instant::now();
    let mut answers = 0;
    // Every upstream ejected: each request is panic-routed, and its tries fail.
    while started.elapsed() < Duration::from_millis(2500) {
        let r = post(addr, &body).await;
        assert_eq!(r.status(), 502);
        answers += 1;
    }
    let seconds = started.elapsed().as_secs() + 1;
    let tries: usize = servers.iter().map(|s| s.request_count()).sum();
    assert!(
        answers >= 20 && tries >= answers,
        "{answers} answers, {tries} tries"
    );
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let of = |says: &str| {
        text.lines()
            // This test's model's lines: the subscriber is every test's of this binary.
            .filter(|l| l.contains(says) && l.contains("model=warned"))
            .collect::<Vec<_>>()
    };
    for says in ["a try failed", "every upstream is ejected"] {
        let written = of(says);
        assert!(
            !written.is_empty() && written.len() as u64 <= seconds + 1,
            "{} lines of {says:?} in {seconds} s:\n{text}",
            written.len()
        );
    }
    // The lines after the first say how many were left out.
    let left_out: u64 = (of("a try failed").iter())
        .filter_map(|l| {
            l.split("left_out=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(left_out > 0, "{text}");
    assert!(
        left_out + of("a try failed").len() as u64 <= tries as u64,
        "{left_out} left out of {tries} tries"
    );
}

/// A request answered 502 after every try failed: its `request` line names each try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_tries_failed_is_logged_with_every_try() {
    let lines = lines();
    let server = failing(500).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n[models.retry]\nattempts = 3\nbackoff_ms = 1\n{}",
        upstream_toml("chat", &server.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    for (id, stream) in [("all-failed-whole", false), ("all-failed-streamed", true)] {
        let body = json!({"model": "m", "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]});
        let request = reqwest::Client::new()
            .post(format!("http://{addr}/v1/chat/completions"))
            .header("x-request-id", id)
            .json(&body)
            .send();
        let r = within(LIMIT, "an answer", request).await.unwrap();
        assert_eq!(r.status(), 502, "{id}");
        assert_eq!(r.headers()["x-choicewise-tries"], "3", "{id}");
        let _ = r.bytes().await;
        // The line is written when the answer's body ends.
        let deadline = Instant::now() + Duration::from_secs(5);
        let line = loop {
            let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
            let line = (text.lines())
                .find(|l| l.contains(&format!("request_id={id} ")) && l.contains(" request "))
                .map(str::to_string);
            match line {
                Some(line) => break line,
                None if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                None => panic!("no request line of {id}:\n{text}"),
            }
        };
        assert!(line.contains(" tries=3 "), "{line}");
        assert!(line.contains(" failed_tries=3 "), "{line}");
    }
}

/// A chunk answer whose usage says `tokens` for every figure.
fn answer_with_usage(tokens: u64) -> String {
    let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]});
    let usage = json!({"id": "c", "object": "chat.completion.chunk", "model": "up", "choices": [],
        "usage": {"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": tokens}});
    format!("data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_absurd_usage_neither_wraps_nor_panics() {
    let huge = start(TestServer::builder().body(answer_with_usage(i64::MAX as u64))).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}",
        fan_out_toml(&huge.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    const CAP: u64 = 1 << 32;
    // Four samples, four upstream requests: each figure clamped to 2^32, then summed.
    let body = json!({"model": "m", "n": 4, "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..3 {
        let r = post(addr, &body).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let usage = &v["usage"];
        assert_eq!(usage["prompt_tokens"], 4 * CAP, "{v}");
        assert_eq!(usage["completion_tokens"], 4 * CAP, "{v}");
        assert_eq!(usage["total_tokens"], 8 * CAP, "{v}");
    }
    let m = metrics(addr).await;
    let prompt: u64 = (m.lines())
        .filter(|l| l.starts_with("choicewise_tokens_total{") && l.contains("kind=\"prompt\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(prompt, 3 * 4 * CAP, "{m}");
}

/// A request refused without `[auth]` (a Host not this gateway's: a DNS-rebound name) is
/// said in the log, naming the route and why, at most once a second however many come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_refusal_is_logged_once_a_while() {
    let lines = lines();
    let server = start(TestServer::builder()).await;
    let toml = format!(
        "[[models]]\nname = \"m\"\n{}",
        fan_out_toml(&server.base_url(), "")
    );
    let (addr, _) = serve(&toml, no_env).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..20 {
        let r = reqwest::Client::new()
            .post(format!("http://{addr}/v1/chat/completions"))
            .header("host", "rebound.example")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
    }
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let said: Vec<&str> = (text.lines())
        .filter(|l| l.contains("refused without [auth]") && l.contains("rebound.example"))
        .collect();
    assert!(
        (1..=2).contains(&said.len()),
        "{} lines:\n{text}",
        said.len()
    );
    assert!(
        said[0].contains("route=/v1/chat/completions") && said[0].contains("status=403"),
        "{}",
        said[0]
    );
}
