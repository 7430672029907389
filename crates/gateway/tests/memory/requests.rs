//! The request side of the gateway's memory model (issue 52): a body of many small tools
//! costs a few times its bytes on each of the three APIs and `count_tokens`, never a parsed
//! tree of it per copy. Each test starts a gateway over loopback HTTP with an upstream that
//! reads the request and answers a few bytes; its bound is asserted from the process's own
//! figures: the counting allocator's peak above the heap at its start, and the resident set's
//! growth above idle (`/proc/self/status`: the peak `VmHWM`, reset through
//! `/proc/self/clear_refs`, else `VmRSS` after the request).
//!
//! The figures are the whole process's (client, gateway and upstream): the tests run one at
//! a time.

use std::net::SocketAddr;
use std::time::Duration;

use choicewise_test_support::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{reset_rss_peak, serve, status_bytes};

use crate::HEAP;

use crate::ONE_AT_A_TIME as SERIAL;

const LIMIT: Duration = Duration::from_secs(120);

const MIB: i64 = 1024 * 1024;

/// Tools in each body: 7.6 MB or more of small objects.
const TOOLS: usize = 95_000;

fn env(name: &str) -> Option<String> {
    (name == "CLIENT_KEYS").then(|| "sk-a".into())
}

/// A streamed Chat Completions answer of one word, with its usage.
const ANSWER: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"up\",\
\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"up\",\"choices\":[],\
\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\n\n\
data: [DONE]\n\n";

/// A streamed Anthropic Messages answer of one word, with its usage.
const ANTHROPIC_ANSWER: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// A Chat Completions upstream that reads each request's body into a small buffer (keeping
/// none of it) and answers [`ANSWER`]; its base URL.
async fn upstream() -> String {
    upstream_answering(ANSWER).await
}

/// An upstream that reads each request's body into a small buffer and answers `answer`.
async fn upstream_answering(answer: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if !matches!(tcp.read(&mut byte).await, Ok(1)) {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let chunked = head.contains("transfer-encoding: chunked");
                let mut left: usize = (head.lines())
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                let mut buf = vec![0u8; 64 * 1024];
                let mut tail: Vec<u8> = Vec::new();
                loop {
                    if !chunked && left == 0 {
                        break;
                    }
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
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1")
}

/// The body of `path` with [`TOOLS`] small tools in that API's shape.
fn body(path: &str) -> Vec<u8> {
    let (head, tail) = match path {
        "/v1/chat/completions" => (
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":["#,
            "]}",
        ),
        "/v1/messages" => (
            r#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}],"tools":["#,
            "]}",
        ),
        "/v1/messages/count_tokens" => (
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":["#,
            "]}",
        ),
        _ => (r#"{"model":"m","input":"hi","tools":["#, "]}"),
    };
    let mut out = head.as_bytes().to_vec();
    for i in 0..TOOLS {
        if i > 0 {
            out.push(b',');
        }
        let tool = match path {
            "/v1/chat/completions" => format!(
                r#"{{"type":"function","function":{{"name":"t{i}","description":"d","parameters":{{"type":"object","properties":{{}}}}}}}}"#
            ),
            "/v1/responses" => format!(
                r#"{{"type":"function","name":"t{i}","description":"d","parameters":{{"type":"object","properties":{{}}}}}}"#
            ),
            _ => format!(
                r#"{{"name":"t{i}","description":"d","input_schema":{{"type":"object","properties":{{}}}}}}"#
            ),
        };
        out.extend_from_slice(tool.as_bytes());
    }
    out.extend_from_slice(tail.as_bytes());
    out
}

/// A gateway with model `m` over [`upstream`] and model `a` over an Anthropic one, taking
/// bodies of up to 16 MiB.
async fn gateway() -> SocketAddr {
    let url = upstream().await;
    let anthropic = upstream_answering(ANTHROPIC_ANSWER).await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {}\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n\
         model = \"up\"\n\
         [[models]]\nname = \"a\"\n[[models.upstreams]]\napi = \"anthropic\"\n\
         base_url = \"{anthropic}\"\nmodel = \"up\"\n",
        16 * MIB
    );
    serve(&toml, env).await.0
}

/// Posts `body` to `path`; its status and the length of its answer, read whole.
async fn post(
    client: reqwest::Client,
    addr: SocketAddr,
    path: &str,
    body: Vec<u8>,
) -> (u16, usize) {
    let request = client
        .post(format!("http://{addr}{path}"))
        .bearer_auth("sk-a")
        .header("x-api-key", "sk-a")
        .header("content-type", "application/json")
        .body(body)
        .send();
    let response = within(LIMIT, "an answer", request).await.unwrap();
    let status = response.status().as_u16();
    let text = within(LIMIT, "the answer's body", response.bytes())
        .await
        .unwrap();
    assert!(
        status == 200,
        "{path}: {status} {}",
        String::from_utf8_lossy(&text[..text.len().min(400)])
    );
    (status, text.len())
}

/// Runs the requests and returns the heap's peak and the resident set's growth above idle
/// while they ran, MiB.
async fn measured(addr: SocketAddr, requests: &[(&'static str, Vec<u8>)]) -> (f64, f64) {
    let client = reqwest::Client::new();
    // A small request first: the connection pools and the gateway's lazily built state
    // exist before the figures start.
    let small = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.to_vec();
    post(client.clone(), addr, "/v1/chat/completions", small).await;
    let idle = status_bytes("VmRSS");
    let peak_reset = reset_rss_peak();
    let bodies: Vec<_> = requests.to_vec();
    let run = futures::future::join_all(
        (bodies.into_iter()).map(|(path, body)| post(client.clone(), addr, path, body)),
    );
    let (_, heap) = HEAP.peak_during(run).await;
    let rss = match peak_reset {
        true => status_bytes("VmHWM"),
        false => status_bytes("VmRSS"),
    };
    (heap as f64 / MIB as f64, (rss - idle) as f64 / MIB as f64)
}

async fn one(path: &'static str) {
    one_to(path, body(path)).await;
}

async fn one_to(path: &'static str, body: Vec<u8>) {
    let _one = SERIAL.lock().await;
    let addr = gateway().await;
    let len = body.len();
    let (heap, rss) = measured(addr, &[(path, body)]).await;
    eprintln!(
        "{path}: a body of {len} bytes ({TOOLS} tools): heap peak +{heap:.1} MiB, resident +{rss:.1} MiB"
    );
    assert!(heap < 64.0, "{path}: the heap grew by {heap:.1} MiB");
    assert!(rss < 64.0, "{path}: the resident set grew by {rss:.1} MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_tools_stay_raw() {
    one("/v1/chat/completions").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_tools_stay_raw() {
    one("/v1/messages").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_tools_stay_raw() {
    one("/v1/responses").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_counts_without_a_tree() {
    one("/v1/messages/count_tokens").await;
}

/// The same body to an Anthropic upstream: translated there and back, its tools one at a
/// time, their schemas copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_to_an_anthropic_upstream_keep_tools_raw() {
    let mut body = body("/v1/messages");
    let head = br#"{"model":"m""#;
    assert!(body.starts_with(head));
    body.splice(..head.len(), br#"{"model":"a""#.iter().copied());
    one_to("/v1/messages", body).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_at_once() {
    let _one = SERIAL.lock().await;
    let addr = gateway().await;
    let paths = [
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/responses",
        "/v1/messages/count_tokens",
    ];
    let requests: Vec<_> = paths.iter().map(|p| (*p, body(p))).collect();
    let (heap, rss) = measured(addr, &requests).await;
    eprintln!("four at once: heap peak +{heap:.1} MiB, resident +{rss:.1} MiB");
    assert!(heap < 256.0, "four at once: the heap grew by {heap:.1} MiB");
    assert!(
        rss < 256.0,
        "four at once: the resident set grew by {rss:.1} MiB"
    );
}
