//! # choicewise-testserver
//!
//! A loopback HTTP server that serves recorded chat-completion streams (the `.sse` fixtures) as
//! real server-sent events, for tests of HTTP clients. It binds `127.0.0.1` (port 0 by
//! default), answers these endpoints:
//!
//! - `POST /v1/chat/completions` and `POST /v1/responses` (OpenAI style,
//!   `Authorization: Bearer KEY`), `POST /v1/messages` (Anthropic style, `x-api-key: KEY`),
//!   each answered with the configured body (serve a fixture of the matching dialect);
//! - `POST /openai/deployments/{deployment}/chat/completions?api-version=V` (Azure style,
//!   `api-key: KEY`);
//! - `POST /v1beta/models/{model}:streamGenerateContent` and `:generateContent` (Gemini
//!   style, `x-goog-api-key: KEY`), answered with the configured body;
//! - `GET /v1/models`: the model list of [`TestServerBuilder::models`], OpenAI's shape;
//! - `POST /v1/messages/count_tokens` (`x-api-key: KEY`): `{"input_tokens": N}`, N the
//!   words of the request's text (a stand-in for the provider's count), unless a configured
//!   failure answers first;
//!
//! and behaves as its [`TestServerBuilder`] says, deterministically for a seed: random write
//! boundaries (cutting lines and multi-byte UTF-8 characters), small delays, keep-alive
//! `: ping` comments between events, a connection closed or stalled after N bytes, error
//! statuses with OpenAI-style JSON bodies (optionally only for the first K requests). It
//! records every request ([`TestServer::requests`]), counts connections, and notices a client
//! that goes away mid-stream ([`TestServer::client_gone`]).
//!
//! Everything it starts ends when the [`TestServer`] is dropped.
//!
//! ```
//! use choicewise_testserver::TestServer;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! # #[tokio::main] async fn main() -> std::io::Result<()> {
//! let server = TestServer::builder()
//!     .body("data: {\"choices\":[]}\n\ndata: [DONE]\n\n")
//!     .start()
//!     .await?;
//! // Any HTTP client does; here, by hand.
//! let mut tcp = tokio::net::TcpStream::connect(server.addr()).await?;
//! let body = r#"{"model":"m","stream":true}"#;
//! let head = format!(
//!     "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer sk-test\r\n\
//!      content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
//!     body.len()
//! );
//! tcp.write_all(head.as_bytes()).await?;
//! let mut response = String::new();
//! tcp.read_to_string(&mut response).await?;
//! assert!(response.starts_with("HTTP/1.1 200 OK"));
//! assert!(response.contains("data: [DONE]"));
//!
//! let request = &server.requests()[0];
//! assert_eq!(request.path, "/v1/chat/completions");
//! assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
//! assert_eq!(request.json.as_ref().unwrap()["stream"], true);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod builder;
mod failure;
mod http;
mod plan;
mod server;

use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;

pub use builder::TestServerBuilder;
pub use failure::Failure;
pub use server::{RecordedRequest, TestServer};

use crate::plan::Write;

/// The path of a fixture of this repository: `tests/fixtures/NAME` at the workspace root.
///
/// ```
/// let path = choicewise_testserver::fixture_path("demo.sse");
/// assert!(path.ends_with("tests/fixtures/demo.sse"));
/// assert!(path.exists());
/// ```
pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// The bytes of a fixture of this repository (see [`fixture_path`]).
///
/// # Panics
///
/// If the file cannot be read: this is a test helper.
///
/// ```
/// let bytes = choicewise_testserver::fixture("demo.sse");
/// assert!(bytes.ends_with(b"data: [DONE]\n\n"));
/// ```
pub fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A one-choice Chat Completions stream answering `text`: one chunk per word (the first
/// with the role), then a chunk finishing with `stop`, then `[DONE]`. For fan-out tests and
/// examples, where each upstream answers something of its own.
///
/// ```
/// let sse = choicewise_testserver::answer("Hello there");
/// assert_eq!(sse.matches("data: ").count(), 4); // "Hello ", "there", the finish, [DONE]
/// assert!(sse.ends_with("data: [DONE]\n\n"));
/// ```
pub fn answer(text: &str) -> String {
    let mut sse = String::new();
    for (i, word) in text.split_inclusive(' ').enumerate() {
        let delta = match i {
            0 => json!({"role": "assistant", "content": word}),
            _ => json!({"content": word}),
        };
        let chunk = json!({"id": "chatcmpl-answer", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        sse.push_str(&format!("data: {chunk}\n\n"));
    }
    let end = json!({"id": "chatcmpl-answer", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    sse.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
    sse
}

/// A one-choice Chat Completions stream answering with one call of `name`: a chunk opening
/// the call (id `call_7`), one with its `arguments` text, a chunk finishing with
/// `tool_calls`, then `[DONE]`.
///
/// ```
/// let sse = choicewise_testserver::tool_call_answer("read", r#"{"path":"a.rs"}"#);
/// assert!(sse.contains(r#""finish_reason":"tool_calls""#));
/// assert!(sse.ends_with("data: [DONE]\n\n"));
/// ```
pub fn tool_call_answer(name: &str, arguments: &str) -> String {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        json!({"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": "up",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let start = chunk(
        json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_7",
               "type": "function", "function": {"name": name, "arguments": ""}}]}),
        serde_json::Value::Null,
    );
    let args = chunk(
        json!({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
        serde_json::Value::Null,
    );
    let end = chunk(json!({}), json!("tool_calls"));
    format!("data: {start}\n\ndata: {args}\n\ndata: {end}\n\ndata: [DONE]\n\n")
}

// What the builder sets up and the I/O (`http`) serves from: kept at the root, so that every
// module sees their fields.

/// How a streamed answer ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// After the whole body.
    Complete,
    /// The connection is cut after this many body bytes.
    Close(usize),
    /// This many body bytes, then nothing, the connection kept open.
    Stall(usize),
}

/// How one request is answered.
struct Reply {
    writes: Arc<Vec<Write>>,
    end: End,
    failure: Option<Failure>,
    fail_first: usize,
    /// Refused with this error when the body has all these fields.
    refused: Option<(Vec<String>, Failure)>,
    delay: Duration,
    /// Before the status line.
    head_delay: Duration,
}

struct State {
    /// Request `k` (in order of arrival) is answered by `replies[k % len]`.
    replies: Vec<Reply>,
    api_key: Option<String>,
    models: Vec<String>,
    requests: Mutex<Vec<RecordedRequest>>,
    connections: AtomicUsize,
    /// How many streamed answers the client abandoned before their end.
    disconnects: watch::Sender<usize>,
}
