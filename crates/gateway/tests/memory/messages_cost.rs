//! The gateway under attack, round three (issue 58): a body of many small messages costs a
//! few times its bytes on every route that reads its messages (count_tokens, the chat prompt
//! estimate, the Messages and Responses translations), the memory ceiling charges a request
//! what it will cost before it parses, and count_tokens forwarded to an Anthropic upstream is
//! bounded in size and in time. Each test starts a gateway over loopback HTTP; its bound is
//! asserted from the process's own figures: the resident set's growth above idle
//! (`/proc/self/status`: the peak `VmHWM`, reset through `/proc/self/clear_refs`, else
//! `VmRSS` after the requests).
//!
//! The figures are the whole process's (client, gateway and upstream): the tests run one at
//! a time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use choicewise_test_support::within;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{reset_rss_peak, serve, status_bytes};

use crate::HEAP;

use crate::ONE_AT_A_TIME as SERIAL;

const LIMIT: Duration = Duration::from_secs(120);

const MIB: i64 = 1024 * 1024;

/// Messages in each body: 6.2 MB of small objects.
const MESSAGES: usize = 200_000;

fn env(name: &str) -> Option<String> {
    (name == "CLIENT_KEYS").then(|| "sk-a".into())
}

/// An upstream that reads each request's head and body (keeping none of it) and answers
/// with `head` (status line and headers, without the blank line) and `answer`'s bytes; its
/// base URL.
async fn upstream(head: &'static str, answer: fn() -> Vec<u8>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut byte = [0u8; 1];
                while !seen.ends_with(b"\r\n\r\n") {
                    if !matches!(tcp.read(&mut byte).await, Ok(1)) {
                        return;
                    }
                    seen.push(byte[0]);
                }
                let seen = String::from_utf8_lossy(&seen).to_ascii_lowercase();
                let mut left: usize = (seen.lines())
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0);
                let mut buf = vec![0u8; 64 * 1024];
                while left > 0 {
                    let want = left.min(buf.len());
                    match tcp.read(&mut buf[..want]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => left -= n,
                    }
                }
                let _ = tcp.write_all(head.as_bytes()).await;
                let _ = tcp.write_all(b"\r\nconnection: close\r\n\r\n").await;
                let _ = tcp.write_all(&answer()).await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1")
}

/// A Chat Completions upstream answering one word without usage: the gateway estimates the
/// prompt's tokens from the request.
async fn no_usage_upstream() -> String {
    upstream("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream", || {
        choicewise_testserver::answer("ok").into_bytes()
    })
    .await
}

/// A streamed Anthropic Messages answer of one word, with its usage.
const ANTHROPIC_ANSWER: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// The body of `path` (model `model`) with [`MESSAGES`] small messages in that API's shape.
fn body(path: &str, model: &str) -> Vec<u8> {
    let head = match path {
        "/v1/chat/completions" => format!(r#"{{"model":"{model}","messages":["#),
        "/v1/messages" => format!(r#"{{"model":"{model}","max_tokens":16,"messages":["#),
        "/v1/messages/count_tokens" => format!(r#"{{"model":"{model}","messages":["#),
        _ => format!(r#"{{"model":"{model}","input":["#),
    };
    let message = br#"{"role":"user","content":"hi"}"#;
    let mut out = head.into_bytes();
    out.reserve(MESSAGES * (message.len() + 1) + 2);
    for i in 0..MESSAGES {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(message);
    }
    out.extend_from_slice(b"]}");
    out
}

/// Posts `body` to `path`; its status and its answer's text.
async fn post(
    client: reqwest::Client,
    addr: SocketAddr,
    path: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let request = client
        .post(format!("http://{addr}{path}"))
        .bearer_auth("sk-a")
        .header("x-api-key", "sk-a")
        .header("content-type", "application/json")
        .body(body)
        .send();
    let response = within(LIMIT, "an answer", request).await.unwrap();
    let status = response.status().as_u16();
    let text = within(LIMIT, "the answer's body", response.text())
        .await
        .unwrap();
    (status, text)
}

/// Runs the requests at once; their answers, the resident set at idle and at its peak while
/// they ran (bytes). The bodies are made before the figures start.
async fn measured(
    addr: SocketAddr,
    requests: Vec<(&'static str, Vec<u8>)>,
) -> (Vec<(u16, String)>, i64, i64) {
    HEAP.start();
    let client = reqwest::Client::new();
    // A small request first: the connection pools and the gateway's lazily built state
    // exist before the figures start.
    let small = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.to_vec();
    let (status, text) = post(client.clone(), addr, "/v1/chat/completions", small).await;
    assert_eq!(status, 200, "{text}");
    let idle = status_bytes("VmRSS");
    let peak_reset = reset_rss_peak();
    let run = futures::future::join_all(
        (requests.into_iter()).map(|(path, body)| post(client.clone(), addr, path, body)),
    );
    let (answers, heap) = HEAP.peak_during(run).await;
    eprintln!(
        "the heap's peak above its start: {:.1} MiB",
        heap as f64 / MIB as f64
    );
    let peak = match peak_reset {
        true => status_bytes("VmHWM"),
        false => status_bytes("VmRSS"),
    };
    (answers, idle, peak)
}

/// A streamed Responses answer of one word, with its usage.
const RESPONSES_ANSWER: &str = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"in_progress\",\"model\":\"up\",\"output\":[]}}\n\nevent: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"ok\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":1,\"status\":\"completed\",\"model\":\"up\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"ok\"}]}],\"usage\":{\"input_tokens\":7,\"output_tokens\":1,\"total_tokens\":8}}}\n\n";

/// A gateway with model `m` over a Chat Completions upstream that reports no usage, `a`
/// over an Anthropic one and `r` over a Responses one, taking bodies of up to 16 MiB;
/// `limits`: more of its `[limits]`.
async fn gateway(limits: &str) -> SocketAddr {
    let url = no_usage_upstream().await;
    let anthropic = upstream("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream", || {
        ANTHROPIC_ANSWER.as_bytes().to_vec()
    })
    .await;
    let responses = upstream("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream", || {
        RESPONSES_ANSWER.as_bytes().to_vec()
    })
    .await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {}\n{limits}\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n\
         model = \"up\"\n\
         [[models]]\nname = \"a\"\n[[models.upstreams]]\napi = \"anthropic\"\n\
         base_url = \"{anthropic}\"\nmodel = \"up\"\n\
         [[models]]\nname = \"r\"\n[[models.upstreams]]\napi = \"responses\"\n\
         base_url = \"{responses}\"\nmodel = \"up\"\n",
        16 * MIB
    );
    serve(&toml, env).await.0
}

/// One body of [`MESSAGES`] messages to `path`: answered 200, the resident set's growth
/// under 64 MiB. Prints the growth per body byte (the route's factor in
/// docs/reliability.md's memory model).
async fn one(path: &'static str) -> Value {
    one_to(path, "m").await
}

/// [`one`] for the model `model`.
async fn one_to(path: &'static str, model: &str) -> Value {
    let _one = SERIAL.lock().await;
    let addr = gateway("").await;
    let body = body(path, model);
    let len = body.len();
    let (answers, idle, peak) = measured(addr, vec![(path, body)]).await;
    let (status, text) = &answers[0];
    assert_eq!(*status, 200, "{path}: {}", &text[..text.len().min(400)]);
    let grew = (peak - idle) as f64;
    eprintln!(
        "{path}: a body of {len} bytes ({MESSAGES} messages): resident +{:.1} MiB, {:.2} per body byte",
        grew / MIB as f64,
        grew / len as f64
    );
    assert!(
        grew < 64.0 * MIB as f64,
        "{path}: the resident set grew by {:.1} MiB",
        grew / MIB as f64
    );
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_of_many_messages() {
    let answer = one("/v1/messages/count_tokens").await;
    // Each message: 3 + "user" 1 + "hi" 1; the reply's priming 3.
    assert_eq!(
        answer["input_tokens"],
        (MESSAGES * 5 + 3) as u64,
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_of_many_messages_without_usage() {
    let answer = one("/v1/chat/completions").await;
    // The upstream reported no usage: the prompt was counted from the request.
    assert_eq!(
        answer["usage"]["prompt_tokens"],
        (MESSAGES * 5 + 3) as u64,
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_many_messages() {
    one("/v1/messages").await;
}

/// Messages to an Anthropic upstream: translated to Chat Completions and back, one message
/// at a time each way (`Dialect::messages_from_chat_json`, called by src/open.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_many_messages_to_an_anthropic_upstream() {
    let answer = one_to("/v1/messages", "a").await;
    assert_eq!(answer["content"][0]["text"], "ok", "{answer}");
}

/// Responses to a Responses upstream: translated to Chat Completions and back, one item at a
/// time each way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_of_many_items_to_a_responses_upstream() {
    let answer = one_to("/v1/responses", "r").await;
    assert_eq!(answer["output"][0]["content"][0]["text"], "ok", "{answer}");
}

/// Chat Completions to an Anthropic and to a Responses upstream: the client's messages
/// translated one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_of_many_messages_to_other_apis() {
    for model in ["a", "r"] {
        let answer = one_to("/v1/chat/completions", model).await;
        assert_eq!(answer["choices"][0]["message"]["content"], "ok", "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_of_many_items() {
    one("/v1/responses").await;
}

/// Eight such count_tokens at once under a 400 MB mark: each is answered 200 with its count,
/// or 503 by the ceiling, and the process stays under 600 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_count_tokens_at_once_under_the_mark() {
    let _one = SERIAL.lock().await;
    let addr = gateway("memory_high_watermark_mb = 400\nmemory_low_watermark_mb = 300").await;
    let requests = (0..8)
        .map(|_| {
            (
                "/v1/messages/count_tokens",
                body("/v1/messages/count_tokens", "m"),
            )
        })
        .collect();
    let (answers, idle, peak) = measured(addr, requests).await;
    let counted = answers.iter().filter(|(s, _)| *s == 200).count();
    eprintln!(
        "eight count_tokens at once: {counted} counted, {} refused; resident {} MiB at idle, {} MiB at the peak",
        8 - counted,
        idle / MIB,
        peak / MIB
    );
    for (status, text) in &answers {
        match status {
            200 => assert!(text.contains(&format!("{}", MESSAGES * 5 + 3)), "{text}"),
            503 => assert!(text.contains("memory_high_watermark_mb"), "{text}"),
            _ => panic!("{status}: {text}"),
        }
    }
    assert!(
        peak < 600 * MIB,
        "the process reached {} MiB under a 400 MB mark",
        peak / MIB
    );
}

/// A count_tokens body of one message of `blocks` tiny text blocks (issue 63: 260,000 of
/// them, 7.4 MB, took +518 MiB).
fn one_message_of_blocks(blocks: usize) -> Vec<u8> {
    let block = br#"{"type":"text","text":"a"}"#;
    let mut out = br#"{"model":"m","messages":[{"role":"user","content":["#.to_vec();
    out.reserve(blocks * (block.len() + 1) + 8);
    for i in 0..blocks {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(block);
    }
    out.extend_from_slice(b"]}]}");
    out
}

/// Four count_tokens of one message of 260,000 tiny text blocks at once under a 400 MB mark
/// (issue 63: 2,077 MiB, none refused): each counted or refused with 503, the process under
/// 600 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_counts_of_one_message_of_many_blocks_under_the_mark() {
    let _one = SERIAL.lock().await;
    let addr = gateway("memory_high_watermark_mb = 400\nmemory_low_watermark_mb = 300").await;
    let requests = (0..4)
        .map(|_| ("/v1/messages/count_tokens", one_message_of_blocks(260_000)))
        .collect();
    let (answers, idle, peak) = measured(addr, requests).await;
    let counted = answers.iter().filter(|(s, _)| *s == 200).count();
    eprintln!(
        "four counts of 260,000 blocks at once: {counted} counted, {} refused; resident {} MiB at idle, {} MiB at the peak",
        4 - counted,
        idle / MIB,
        peak / MIB
    );
    for (status, text) in &answers {
        match status {
            // Each block: "a", 1 token; the message 3 + "user" 1; the reply's priming 3.
            200 => assert!(text.contains(&format!("{}", 260_000 + 3 + 1 + 3)), "{text}"),
            503 => assert!(text.contains("memory_high_watermark_mb"), "{text}"),
            _ => panic!("{status}: {text}"),
        }
    }
    assert!(
        peak < 600 * MIB,
        "the process reached {} MiB under a 400 MB mark",
        peak / MIB
    );
}

/// A gateway with model `a` over an Anthropic upstream at `url`: one slot, a first byte
/// within 1 s, a deadline of 10 s.
async fn counting_gateway(url: &str) -> SocketAddr {
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_concurrent_requests = 1\n\
         request_deadline_s = 10\n\
         [[models]]\nname = \"a\"\n[models.retry]\nfirst_byte_timeout_s = 1\n\
         [[models.upstreams]]\napi = \"anthropic\"\nbase_url = \"{url}\"\nmodel = \"up\"\n"
    );
    serve(&toml, env).await.0
}

const SMALL_COUNT: &[u8] = br#"{"model":"a","messages":[{"role":"user","content":"hi there"}]}"#;

/// A count answered with 64 MiB: read no further than its bound (the process grows by less
/// than 32 MiB), and the client gets an error saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_answered_with_64_mib_is_cut_and_refused() {
    let _one = SERIAL.lock().await;
    let url = upstream("HTTP/1.1 200 OK\r\ncontent-type: application/json", || {
        let mut answer = br#"{"input_tokens":1,"pad":""#.to_vec();
        answer.resize(64 << 20, b'x');
        answer.extend_from_slice(br#""}"#);
        answer
    })
    .await;
    let addr = counting_gateway(&url).await;
    let client = reqwest::Client::new();
    let idle = status_bytes("VmRSS");
    let peak_reset = reset_rss_peak();
    let (status, text) = post(
        client,
        addr,
        "/v1/messages/count_tokens",
        SMALL_COUNT.to_vec(),
    )
    .await;
    let peak = match peak_reset {
        true => status_bytes("VmHWM"),
        false => status_bytes("VmRSS"),
    };
    // The upstream's answer is made whole before it is sent: its own 64 MiB are not the
    // gateway's.
    let grew = peak - idle - 64 * MIB;
    eprintln!(
        "a 64 MiB count: {status}, the gateway's share of the growth {} MiB",
        grew / MIB
    );
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("larger than 65536 bytes"), "{text}");
    assert!(grew < 32 * MIB, "the process grew by {} MiB", grew / MIB);
}

/// A count whose upstream never answers ends within first_byte_timeout_s (1 s) and 2 s,
/// estimated, and frees the gateway's one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_count_ends_in_time_and_frees_its_slot() {
    let _one = SERIAL.lock().await;
    let url = crate::common::silent().await;
    let addr = counting_gateway(&url).await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    let request = client
        .post(format!("http://{addr}/v1/messages/count_tokens"))
        .header("x-api-key", "sk-a")
        .header("content-type", "application/json")
        .body(SMALL_COUNT)
        .send();
    let response = within(LIMIT, "an answer", request).await.unwrap();
    let took = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-choicewise-token-count"], "estimated");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["input_tokens"], 3 + 1 + 2 + 3, "{answer}");
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    // The one slot is free again: the next request is served, not refused with 429.
    let (status, text) = post(
        client,
        addr,
        "/v1/messages/count_tokens",
        SMALL_COUNT.to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{text}");
}

/// The ceiling charges what a request will cost, not its body's size: with 12 MiB of room
/// under the mark, a count_tokens body of 5.9 MiB (which its size alone would fit) is
/// refused with 503 once its bytes pass its head's share (the rest drained, not kept), since its
/// route's bound is 2.5 times it; a small one is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_charges_the_cost_not_the_body() {
    let _one = SERIAL.lock().await;
    let large = body("/v1/messages/count_tokens", "m");
    let url = no_usage_upstream().await;
    // The token tables and the runtime's threads loaded by a first gateway's count: the
    // memory at idle is read after.
    let warm = gateway("").await;
    let small = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#.to_vec();
    let client = reqwest::Client::new();
    let counted = post(
        client.clone(),
        warm,
        "/v1/messages/count_tokens",
        small.clone(),
    )
    .await;
    assert_eq!(counted.0, 200, "{}", counted.1);
    let idle = status_bytes("VmRSS");
    let high = idle / MIB + 12;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {}\n\
         memory_high_watermark_mb = {high}\nmemory_low_watermark_mb = {}\n\
         [[models]]\nname = \"m\"\n[[models.upstreams]]\napi = \"chat\"\nbase_url = \"{url}\"\n",
        16 * MIB,
        high - 1
    );
    let addr = serve(&toml, env).await.0;
    // Sent whole, as a client sends it: the head holds its small charge, the refusal comes
    // once the bytes pass it, and the rest is read and dropped, so that the client reads
    // its 503 rather than a reset.
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/messages/count_tokens HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: sk-a\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        large.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&large).await.unwrap();
    let mut answer = vec![0; 4096];
    let n = within(LIMIT, "the refusal", tcp.read(&mut answer))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("memory_high_watermark_mb"), "{text}");
    let (status, text) = post(client, addr, "/v1/messages/count_tokens", small).await;
    assert_eq!(status, 200, "{text}");
}

/// A count whose upstream sends its head and then nothing is timed as a silent one: its
/// first byte within first_byte_timeout_s (1 s), not each read's upstream_idle_timeout_s
/// (300 s); estimated within 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_whose_head_comes_alone_ends_at_the_first_byte_timeout() {
    let _one = SERIAL.lock().await;
    let url = crate::common::head_then_silent(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 20",
    )
    .await;
    let addr = counting_gateway(&url).await;
    let started = Instant::now();
    let request = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages/count_tokens"))
        .header("x-api-key", "sk-a")
        .header("content-type", "application/json")
        .body(SMALL_COUNT)
        .send();
    let response = within(LIMIT, "an answer", request).await.unwrap();
    let took = started.elapsed();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-choicewise-token-count"], "estimated");
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
}
