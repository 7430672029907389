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

use crate::common::{
    ANTHROPIC_ANSWER, CHAT_OK, GEMINI_ANSWER, SSE_HEAD, key_env, models_toml, post_bytes,
    reading_upstream, reset_rss_peak, serve, status_bytes,
};

use crate::HEAP;

use crate::ONE_AT_A_TIME as SERIAL;

const LIMIT: Duration = Duration::from_secs(120);

const MIB: i64 = 1024 * 1024;

/// Tools in each body: 7.6 MB or more of small objects.
const TOOLS: usize = 95_000;

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

/// A gateway with model `m` over a Chat Completions upstream, `a` over an Anthropic one and
/// `g` over a Gemini one, taking bodies of up to 16 MiB.
async fn gateway() -> SocketAddr {
    let url = reading_upstream(SSE_HEAD, || CHAT_OK.as_bytes().to_vec()).await;
    let anthropic = reading_upstream(SSE_HEAD, || ANTHROPIC_ANSWER.as_bytes().to_vec()).await;
    let gemini = reading_upstream(SSE_HEAD, || GEMINI_ANSWER.as_bytes().to_vec()).await;
    let toml = format!(
        "[auth]\nkeys_env = \"CLIENT_KEYS\"\n[limits]\nmax_body_bytes = {}\n{}",
        16 * MIB,
        models_toml(&[
            ("m", "chat", &url),
            ("a", "anthropic", &anthropic),
            ("g", "gemini", &gemini)
        ])
    );
    serve(&toml, key_env).await.0
}

/// Posts `body` to `path`; its status and the length of its answer, read whole.
async fn post(
    client: reqwest::Client,
    addr: SocketAddr,
    path: &str,
    body: Vec<u8>,
) -> (u16, usize) {
    let response = within(LIMIT, "an answer", post_bytes(&client, addr, path, body)).await;
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

/// The Chat Completions body to a Gemini upstream: its tools written one at a time as
/// `functionDeclarations`, their schemas copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_to_a_gemini_upstream_keeps_tools_raw() {
    let mut body = body("/v1/chat/completions");
    let head = br#"{"model":"m""#;
    assert!(body.starts_with(head));
    body.splice(..head.len(), br#"{"model":"g""#.iter().copied());
    one_to("/v1/chat/completions", body).await;
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
