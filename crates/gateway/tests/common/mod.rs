//! What the gateway's loopback tests share: a gateway served on 127.0.0.1, its
//! configuration's pieces, the requests a client posts and the reading of their answers, and
//! the upstreams (the test server's, and raw ones that read, stall or answer as told).
//!
//! Both test binaries include this module and each uses part of it.
#![allow(dead_code, unused_imports)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use choicewise_gateway::{Config, Gateway};
use choicewise_testserver::{Failure, TestServer, TestServerBuilder, answer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A gateway of this configuration (TOML), its environment read from `env`, served on a free
/// port of 127.0.0.1 with its connection bounds ([`Gateway::serve_on`]); and the gateway
/// itself.
pub async fn serve(toml: &str, env: impl Fn(&str) -> Option<String>) -> (SocketAddr, Gateway) {
    let config = Config::from_toml(toml).unwrap();
    let gateway = Gateway::with_env(&config, env).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = gateway.clone();
    tokio::spawn(async move { served.serve_on(listener, std::future::pending()).await });
    (addr, gateway)
}

/// A sample that sends `events` events, then stalls as long as the client stays.
pub fn stalled(events: usize) -> TestServerBuilder {
    TestServer::builder()
        .body(answer("let me think about it"))
        .stall_after_events(events)
}

/// An upstream that refuses connections, its port held (the workspace's test kit).
pub use choicewise_test_support::refusing;

/// A raw upstream on a free port of 127.0.0.1: each connection it takes handed to `serve` on
/// a task of its own. Its address.
pub async fn raw_upstream<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(serve(tcp));
        }
    });
    addr
}

/// Reads a request's head up to its blank line, byte by byte (nothing of its body): the
/// head, or `None` if the connection ended first.
pub async fn read_head(tcp: &mut TcpStream) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        if !matches!(tcp.read(&mut byte).await, Ok(1)) {
            return None;
        }
        seen.push(byte[0]);
    }
    Some(seen)
}

/// Reads and drops what the client sends until it closes.
pub async fn drain(tcp: &mut TcpStream) {
    let mut buf = vec![0; 65536];
    while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// An upstream that takes connections and never answers (no first byte): its base URL.
pub async fn silent() -> String {
    let addr = raw_upstream(|mut tcp| async move { drain(&mut tcp).await }).await;
    format!("http://{addr}/v1")
}

/// An upstream that reads each request, answers `head` (a status line and its headers,
/// without the blank line that ends them) and then sends nothing more while the connection
/// stays: its base URL.
pub async fn head_then_silent(head: &'static str) -> String {
    let addr = raw_upstream(move |mut tcp| async move {
        if read_head(&mut tcp).await.is_none() {
            return;
        }
        let _ = tcp.write_all(head.as_bytes()).await;
        let _ = tcp.write_all(b"\r\n\r\n").await;
        drain(&mut tcp).await;
    })
    .await;
    format!("http://{addr}/v1")
}

/// A line of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`); 0 where there is none.
pub fn status_bytes(key: &str) -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines())
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Resets the resident set's peak (`VmHWM`) to the resident set now; whether it could.
pub fn reset_rss_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// No environment: a gateway without keys.
pub fn no_env(_: &str) -> Option<String> {
    None
}

/// An environment whose client key (`CLIENT_KEYS`) is `sk-a`.
pub fn key_env(name: &str) -> Option<String> {
    (name == "CLIENT_KEYS").then(|| "sk-a".to_string())
}

/// One `[[models.upstreams]]` entry of model name `up` on this API and base URL, with extra
/// TOML lines after it.
pub fn upstream_toml(api: &str, url: &str, extra: &str) -> String {
    format!(
        "[[models.upstreams]]\napi = \"{api}\"\nbase_url = \"{url}\"\nmodel = \"up\"\n{extra}\n"
    )
}

/// A Chat Completions upstream entry asked one request per sample (`n = "fan-out"`).
pub fn fan_out_toml(url: &str, extra: &str) -> String {
    upstream_toml("chat", url, &format!("n = \"fan-out\"\n{extra}"))
}

/// A model of this name over one upstream each of these (`api`, `base_url`).
pub fn models_toml(models: &[(&str, &str, &str)]) -> String {
    (models.iter())
        .map(|(name, api, url)| {
            format!(
                "[[models]]\nname = \"{name}\"\n{}",
                upstream_toml(api, url, "")
            )
        })
        .collect()
}

/// The test server started.
pub async fn start(builder: TestServerBuilder) -> TestServer {
    builder.start().await.unwrap()
}

/// A test server sample that answers `text` (Chat Completions chunks).
pub fn says(text: &str) -> TestServerBuilder {
    TestServer::builder().body(answer(text))
}

/// These samples served in turn, one per request (the last one again after them).
pub fn in_turn(samples: impl IntoIterator<Item = TestServerBuilder>) -> TestServerBuilder {
    let mut samples = samples.into_iter();
    let first = samples.next().expect("at least one sample");
    samples.fold(first, TestServerBuilder::then)
}

/// A vote's five samples in turn: "Answer: 42", one that stalls after its first event,
/// "Answer: 41", then "Answer: 42" twice.
pub fn votes_for_42() -> TestServerBuilder {
    in_turn([
        says("Answer: 42"),
        stalled(1),
        says("Answer: 41"),
        says("Answer: 42"),
        says("Answer: 42"),
    ])
}

/// A test server answering every request with `text`.
pub async fn answering(text: &str) -> TestServer {
    start(says(text)).await
}

/// A test server answering every request with a recorded fixture (`tests/fixtures`).
pub async fn fixture(name: &str) -> TestServer {
    start(TestServer::builder().fixture(name)).await
}

/// A test server failing every request with this status.
pub async fn failing(status: u16) -> TestServer {
    start(TestServer::builder().fail(Failure::status(status))).await
}

/// Posts `body` as JSON to `path` of the gateway at `addr`, with no key.
pub async fn post_to(addr: SocketAddr, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Posts `body` as JSON to `/v1/chat/completions`, with no key.
pub async fn post_chat(addr: SocketAddr, body: &Value) -> reqwest::Response {
    post_to(addr, "/v1/chat/completions", body).await
}

/// Posts `body` as JSON to `/v1/chat/completions` with this key (`Authorization: Bearer`).
pub async fn post_chat_keyed(addr: SocketAddr, body: &Value, key: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Posts `body` (bytes already made) to `path` with the key `sk-a` in both of its headers.
pub async fn post_bytes(
    client: &reqwest::Client,
    addr: SocketAddr,
    path: &str,
    body: Vec<u8>,
) -> reqwest::Response {
    client
        .post(format!("http://{addr}{path}"))
        .bearer_auth("sk-a")
        .header("x-api-key", "sk-a")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The gateway's metrics page.
pub async fn metrics(addr: SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The gateway's metrics once they hold every line of `lines` (within 5 s).
pub async fn metrics_with(addr: SocketAddr, lines: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = metrics(addr).await;
        let missing: Vec<_> = lines.iter().filter(|l| !text.contains(**l)).collect();
        if missing.is_empty() {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{missing:?} not in\n{text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The data of each event of a Chat Completions SSE text, and whether it ended with
/// `[DONE]` (nothing may follow it).
pub fn sse_data(text: &str) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut done = false;
    for event in text.split("\n\n").filter(|e| !e.trim().is_empty()) {
        let data = event
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("{event}"));
        if data == "[DONE]" {
            done = true;
            continue;
        }
        assert!(!done, "nothing after [DONE]");
        out.push(serde_json::from_str(data).unwrap());
    }
    (out, done)
}

/// One Chat Completions chunk of choice `index` as an upstream sends it, an SSE event.
pub fn chunk(index: u32, delta: Value, finish: Value) -> String {
    let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "model": "up",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

/// An upstream that answers every request with `first` (SSE events), then choice 0's deltas
/// of 8 KiB without end, for as long as its connection takes them ([`endless`]).
pub struct Endless {
    /// Its base URL.
    pub url: String,
    requests: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
    sent: Arc<AtomicU64>,
}

impl Endless {
    /// The requests it took.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The answers it stopped writing because their connection went away.
    pub fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }

    /// The bytes of endless deltas it sent, over every answer.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }
}

/// Starts an [`Endless`] upstream that sends `first` before its endless deltas. Whatever the
/// sockets between can hold, they fill: a test that needs them full takes this upstream,
/// never a finite answer assumed larger than a host's buffers.
pub async fn endless(first: String) -> Endless {
    let requests = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let counts = (requests.clone(), ended.clone(), sent.clone());
    let first = Arc::new(format!("{SSE_HEAD}\r\nconnection: close\r\n\r\n{first}"));
    let more: Arc<String> = Arc::new(
        std::iter::repeat_n(
            chunk(
                0,
                json!({"content": "more ".repeat(8 * 1024 / 5)}),
                Value::Null,
            ),
            8,
        )
        .collect(),
    );
    let addr = raw_upstream(move |mut tcp| {
        let (requests, ended, sent) = counts.clone();
        let (first, more) = (first.clone(), more.clone());
        async move {
            if read_head(&mut tcp).await.is_none() {
                return;
            }
            requests.fetch_add(1, Ordering::SeqCst);
            let mut written = tcp.write_all(first.as_bytes()).await;
            while written.is_ok() {
                written = tcp.write_all(more.as_bytes()).await;
                if written.is_ok() {
                    sent.fetch_add(more.len() as u64, Ordering::SeqCst);
                }
            }
            ended.fetch_add(1, Ordering::SeqCst);
        }
    })
    .await;
    Endless {
        url: format!("http://{addr}/v1"),
        requests,
        ended,
        sent,
    }
}

/// The status line and header of a streamed answer, for [`reading_upstream`].
pub const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream";

/// An upstream that reads each request's head and body (its `content-length`, or chunked to
/// its last chunk), keeping none of it beyond a small buffer, then answers `head` (status
/// line and headers, without the blank line), `connection: close` and `answer`'s bytes: its
/// base URL.
pub async fn reading_upstream(head: &'static str, answer: fn() -> Vec<u8>) -> String {
    let addr = raw_upstream(move |mut tcp| async move {
        let Some(seen) = read_head(&mut tcp).await else {
            return;
        };
        let seen = String::from_utf8_lossy(&seen).to_ascii_lowercase();
        let chunked = seen.contains("transfer-encoding: chunked");
        let mut left: usize = (seen.lines())
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail: Vec<u8> = Vec::new();
        while chunked || left > 0 {
            let want = if chunked {
                buf.len()
            } else {
                left.min(buf.len())
            };
            let n = match tcp.read(&mut buf[..want]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if chunked {
                tail.extend_from_slice(&buf[..n]);
                if tail.ends_with(b"0\r\n\r\n") {
                    break;
                }
                let keep = tail.len().saturating_sub(8);
                tail.drain(..keep);
            } else {
                left -= n;
            }
        }
        let _ = tcp.write_all(head.as_bytes()).await;
        let _ = tcp.write_all(b"\r\nconnection: close\r\n\r\n").await;
        let _ = tcp.write_all(&answer()).await;
        let _ = tcp.shutdown().await;
    })
    .await;
    format!("http://{addr}/v1")
}

/// A streamed Chat Completions answer of one word, with its usage.
pub const CHAT_OK: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"up\",\"choices\":[],\
\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\n\
data: [DONE]\n\n";

/// A streamed Anthropic Messages answer of one word, with its usage.
pub const ANTHROPIC_ANSWER: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// A streamed Gemini answer (`streamGenerateContent?alt=sse`) of one word, with its usage.
pub const GEMINI_ANSWER: &str = "data: {\"candidates\":[{\"index\":0,\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"ok\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":7,\"candidatesTokenCount\":1,\"totalTokenCount\":8},\"modelVersion\":\"up\",\"responseId\":\"g1\"}\r\n\r\n";

/// A streamed Responses answer of one word, with its usage.
pub const RESPONSES_ANSWER: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"in_progress\",\"model\":\"up\",\"output\":[]}}\n\nevent: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"ok\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\",\"model\":\"up\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"}]}],\"usage\":{\"input_tokens\":7,\"output_tokens\":1,\"total_tokens\":8}}}\n\n";
