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
//! - `GET /v1/models`: the model list of [`TestServerBuilder::models`], OpenAI's shape;
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

mod plan;

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::plan::{Shape, Write};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = BoxBody<Bytes, BoxError>;

/// How long a cut waits for the bytes before it to leave.
const FLUSH_BEFORE_CUT: Duration = Duration::from_millis(20);

/// The largest request body read; a larger one is answered with 413.
const MAX_REQUEST_BODY: usize = 4 << 20;

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

/// An error answer: a status with an OpenAI-style body
/// `{"error": {"message", "type", "param", "code"}}`, optionally a `Retry-After` header.
///
/// [`Failure::status`] fills in the message, type and code OpenAI uses for that status.
///
/// ```
/// use choicewise_testserver::Failure;
/// let f = Failure::status(429).retry_after("1");
/// assert_eq!(f.code.as_deref(), Some("rate_limit_exceeded"));
/// assert_eq!(f.body()["error"]["type"], "requests");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The HTTP status.
    pub status: u16,
    /// `error.message`.
    pub message: String,
    /// `error.type`.
    pub kind: String,
    /// `error.code` (`null` when `None`).
    pub code: Option<String>,
    /// The `Retry-After` header, as sent (seconds or an HTTP date).
    pub retry_after: Option<String>,
    /// A body sent as is instead of the JSON error (e.g. a proxy's HTML page).
    pub text_body: Option<String>,
}

impl Failure {
    /// The error OpenAI answers with this status (message, type, code), no `Retry-After`.
    ///
    /// ```
    /// use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(401).code.as_deref(), Some("invalid_api_key"));
    /// assert_eq!(Failure::status(500).kind, "server_error");
    /// ```
    pub fn status(status: u16) -> Self {
        let (message, kind, code) = match status {
            400 => (
                "Invalid request.",
                "invalid_request_error",
                Some("invalid_request"),
            ),
            401 => (
                "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
            404 => (
                "The model `gpt-test` does not exist or you do not have access to it.",
                "invalid_request_error",
                Some("model_not_found"),
            ),
            429 => (
                "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.",
                "requests",
                Some("rate_limit_exceeded"),
            ),
            500 => (
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
            503 => (
                "The engine is currently overloaded, please try again later.",
                "server_error",
                Some("overloaded"),
            ),
            _ => ("Request failed.", "server_error", None),
        };
        Failure {
            status,
            message: message.to_string(),
            kind: kind.to_string(),
            code: code.map(str::to_string),
            retry_after: None,
            text_body: None,
        }
    }

    /// Sets `error.message`.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(500).message("boom").body()["error"]["message"], "boom");
    /// ```
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Sets `error.type`.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(500).kind("api_error").body()["error"]["type"], "api_error");
    /// ```
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = kind.into();
        self
    }

    /// Sets `error.code`.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(500).code(Some("x")).body()["error"]["code"], "x");
    /// ```
    pub fn code(mut self, code: Option<&str>) -> Self {
        self.code = code.map(str::to_string);
        self
    }

    /// Sends `Retry-After: VALUE` (seconds, or an HTTP date).
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// assert_eq!(Failure::status(503).retry_after("2").retry_after.as_deref(), Some("2"));
    /// ```
    pub fn retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// Sends this text as the body (`text/plain`) instead of the JSON error.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// let f = Failure::status(502).text_body("<html>Bad gateway</html>");
    /// assert!(f.text_body.is_some());
    /// ```
    pub fn text_body(mut self, body: impl Into<String>) -> Self {
        self.text_body = Some(body.into());
        self
    }

    /// The JSON error body.
    ///
    /// ```
    /// # use choicewise_testserver::Failure;
    /// let body = Failure::status(401).body();
    /// assert_eq!(body["error"]["code"], "invalid_api_key");
    /// assert!(body["error"]["param"].is_null());
    /// ```
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": null,
            "code": self.code,
        }})
    }

    fn response(&self) -> Response<Body> {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut builder = Response::builder().status(status);
        if let Some(after) = &self.retry_after {
            builder = builder.header("retry-after", after.as_str());
        }
        let (content_type, body) = match &self.text_body {
            Some(text) => ("text/plain; charset=utf-8", text.clone().into_bytes()),
            None => ("application/json", self.body().to_string().into_bytes()),
        };
        builder
            .header("content-type", content_type)
            .body(full(body))
            .expect("a valid response")
    }
}

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

/// Options of a [`TestServer`]; [`start`](Self::start) binds and starts it.
///
/// ```
/// use std::time::Duration;
/// use choicewise_testserver::{Failure, TestServer};
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let server = TestServer::builder()
///     .fixture("openai_n3_tools.sse")
///     .seed(42)
///     .random_writes(1, 64)
///     .max_write_delay(Duration::from_millis(1))
///     .pings(3)
///     .fail_first(1, Failure::status(429).retry_after("1"))
///     .start()
///     .await?;
/// assert!(server.base_url().starts_with("http://127.0.0.1:"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TestServerBuilder {
    body: Bytes,
    shape: Shape,
    end: End,
    failure: Option<Failure>,
    fail_first: usize,
    api_key: Option<String>,
    port: u16,
    models: Vec<String>,
    delay: Duration,
    /// The answers of the following requests, in turn (see `then`).
    next: Vec<TestServerBuilder>,
}

impl Default for TestServerBuilder {
    fn default() -> Self {
        TestServerBuilder {
            body: Bytes::from_static(b"data: [DONE]\n\n"),
            shape: Shape::default(),
            end: End::Complete,
            failure: None,
            fail_first: 0,
            api_key: None,
            port: 0,
            models: vec!["gpt-4o-mini".to_string()],
            delay: Duration::ZERO,
            next: Vec::new(),
        }
    }
}

impl TestServerBuilder {
    /// The SSE body streamed to each successful request (default `data: [DONE]\n\n`).
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().body(b"data: [DONE]\n\n".to_vec());
    /// # drop(builder);
    /// ```
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Serves a fixture of this repository (see [`fixture`]).
    ///
    /// # Panics
    ///
    /// If the fixture cannot be read.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().fixture("demo.sse");
    /// # drop(builder);
    /// ```
    pub fn fixture(self, name: &str) -> Self {
        self.body(fixture(name))
    }

    /// The seed of every random choice (default 0).
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().seed(7);
    /// # drop(builder);
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.shape.seed = seed;
        self
    }

    /// Writes the body in pieces of `min..=max` bytes (default: one write), cutting inside
    /// lines and, about every other write that holds one, inside a multi-byte UTF-8 character.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().random_writes(1, 16);
    /// # drop(builder);
    /// ```
    pub fn random_writes(mut self, min: usize, max: usize) -> Self {
        self.shape.writes = Some((min.max(1), max.max(min).max(1)));
        self
    }

    /// Waits a random time up to `max` before each write (default none).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().max_write_delay(Duration::from_millis(2));
    /// # drop(builder);
    /// ```
    pub fn max_write_delay(mut self, max: Duration) -> Self {
        self.shape.max_delay = max;
        self
    }

    /// Inserts a keep-alive comment (`: ping` and a blank line) after an event with
    /// probability `1 / one_in` (`1`: after every event but the last).
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().pings(2);
    /// # drop(builder);
    /// ```
    pub fn pings(mut self, one_in: u64) -> Self {
        self.shape.pings = Some(one_in.max(1));
        self
    }

    /// Cuts the connection after `bytes` body bytes (keep-alive comments included): the
    /// chunked body is never terminated, so the client sees a broken transfer, no `[DONE]`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().close_after(1000);
    /// # drop(builder);
    /// ```
    pub fn close_after(mut self, bytes: usize) -> Self {
        self.end = End::Close(bytes);
        self
    }

    /// Sends `bytes` body bytes, then nothing, keeping the connection open until the client
    /// goes away (or the server is dropped).
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().stall_after(1000);
    /// # drop(builder);
    /// ```
    pub fn stall_after(mut self, bytes: usize) -> Self {
        self.end = End::Stall(bytes);
        self
    }

    /// Sends the body's first `events` events (each up to and including its blank line),
    /// then nothing, as [`stall_after`](Self::stall_after): a provider that began and went
    /// quiet. Set the body first.
    ///
    /// ```
    /// # use choicewise_testserver::{TestServer, answer};
    /// let builder = TestServer::builder().body(answer("let me think")).stall_after_events(1);
    /// # drop(builder);
    /// ```
    pub fn stall_after_events(self, events: usize) -> Self {
        let bytes = self.event_bytes(events);
        self.stall_after(bytes)
    }

    /// Cuts the connection after the body's first `events` events, as
    /// [`close_after`](Self::close_after). Set the body first.
    ///
    /// ```
    /// # use choicewise_testserver::{TestServer, answer};
    /// let builder = TestServer::builder().body(answer("cut short")).close_after_events(1);
    /// # drop(builder);
    /// ```
    pub fn close_after_events(self, events: usize) -> Self {
        let bytes = self.event_bytes(events);
        self.close_after(bytes)
    }

    /// Answers every request with this error.
    ///
    /// ```
    /// # use choicewise_testserver::{Failure, TestServer};
    /// let builder = TestServer::builder().fail(Failure::status(500));
    /// # drop(builder);
    /// ```
    pub fn fail(mut self, failure: Failure) -> Self {
        self.failure = Some(failure);
        self.fail_first = usize::MAX;
        self
    }

    /// Answers the first `requests` requests with this error, then serves the body.
    ///
    /// ```
    /// # use choicewise_testserver::{Failure, TestServer};
    /// let builder = TestServer::builder().fail_first(2, Failure::status(503));
    /// # drop(builder);
    /// ```
    pub fn fail_first(mut self, requests: usize, failure: Failure) -> Self {
        self.failure = Some(failure);
        self.fail_first = requests;
        self
    }

    /// Requires this key (`Authorization: Bearer KEY`; `api-key: KEY` on the Azure path, `x-api-key: KEY` on `/v1/messages`);
    /// other requests get 401 (default: any key, or none, is accepted).
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().api_key("sk-test");
    /// # drop(builder);
    /// ```
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The model ids `GET /v1/models` lists, in order (default `gpt-4o-mini`), as
    /// `{"object": "list", "data": [{"id": ..., "object": "model", ...}]}`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().models(["smollm2", "qwen"]);
    /// # drop(builder);
    /// ```
    pub fn models<I: IntoIterator<Item = S>, S: Into<String>>(mut self, models: I) -> Self {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// The port to bind on 127.0.0.1 (default 0: any free port).
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().port(0);
    /// # drop(builder);
    /// ```
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Waits this long after the response headers before the first body byte (default
    /// none): a provider still thinking.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder().delay(Duration::from_millis(200));
    /// # drop(builder);
    /// ```
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Answers the next request as `next` says (its body, writes, delays, ending and
    /// failure; its port, key and models are ignored). With several, the requests take the
    /// answers in turn in the order they arrive: the first this builder's own, then each
    /// `then` in order, cycling after the last. For fan-out tests, where each upstream must
    /// behave differently.
    ///
    /// ```
    /// # use choicewise_testserver::{Failure, TestServer};
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder()
    ///     .fixture("demo.sse")
    ///     .then(TestServer::builder().fail(Failure::status(500)))
    ///     .start()
    ///     .await?;
    /// let client = reqwest::Client::new();
    /// let url = format!("{}/chat/completions", server.base_url());
    /// let statuses = [
    ///     client.post(&url).body("{}").send().await.unwrap().status(),
    ///     client.post(&url).body("{}").send().await.unwrap().status(),
    ///     client.post(&url).body("{}").send().await.unwrap().status(),
    /// ];
    /// assert_eq!(statuses.map(|s| s.as_u16()), [200, 500, 200]);
    /// # Ok(()) }
    /// ```
    pub fn then(mut self, next: TestServerBuilder) -> Self {
        let mut next = next;
        let after = std::mem::take(&mut next.next);
        self.next.push(next);
        self.next.extend(after);
        self
    }

    /// The bytes of the body's first `events` events (each up to and including its blank
    /// line); the whole body if it has fewer.
    fn event_bytes(&self, events: usize) -> usize {
        if events == 0 {
            return 0;
        }
        let mut ends = self
            .body
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w == b"\n\n");
        ends.nth(events - 1).map_or(self.body.len(), |(i, _)| i + 2)
    }

    /// This builder's own answer.
    fn reply(&self) -> Reply {
        Reply {
            writes: Arc::new(plan::plan(&self.body, &self.shape)),
            end: self.end,
            failure: self.failure.clone(),
            fail_first: self.fail_first,
            delay: self.delay,
        }
    }

    /// Binds `127.0.0.1` and starts serving on the current Tokio runtime.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.addr().ip().to_string(), "127.0.0.1");
    /// # Ok(()) }
    /// ```
    pub async fn start(self) -> std::io::Result<TestServer> {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await?;
        let addr = listener.local_addr()?;
        let replies = std::iter::once(self.reply())
            .chain(self.next.iter().map(TestServerBuilder::reply))
            .collect();
        let (disconnects, _) = watch::channel(0);
        let state = Arc::new(State {
            replies,
            api_key: self.api_key,
            models: self.models,
            requests: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            disconnects,
        });
        let task = tokio::spawn(accept_loop(listener, state.clone()));
        Ok(TestServer { addr, state, task })
    }
}

/// One request as the server received it.
///
/// ```
/// use choicewise_testserver::RecordedRequest;
/// let r = RecordedRequest {
///     method: "POST".into(),
///     path: "/v1/chat/completions".into(),
///     query: Some("api-version=2024-10-21&x=1".into()),
///     headers: vec![("api-key".into(), "k".into())],
///     body: b"{}".to_vec(),
///     json: Some(serde_json::json!({})),
///     connection: 0,
/// };
/// assert_eq!(r.header("API-Key"), Some("k"));
/// assert_eq!(r.query_param("api-version"), Some("2024-10-21"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `POST`, normally.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, without `?`.
    pub query: Option<String>,
    /// Every header, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
    /// The body as JSON, if it is JSON.
    pub json: Option<Value>,
    /// The number of the connection it came on (0 for the first accepted).
    pub connection: usize,
}

impl RecordedRequest {
    /// The first value of a header (name case-insensitive).
    ///
    /// ```
    /// # use choicewise_testserver::RecordedRequest;
    /// # let r = RecordedRequest { method: "POST".into(), path: "/".into(), query: None,
    /// #     headers: vec![("authorization".into(), "Bearer k".into())], body: vec![], json: None, connection: 0 };
    /// assert_eq!(r.header("Authorization"), Some("Bearer k"));
    /// assert_eq!(r.header("api-key"), None);
    /// ```
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The raw value of a query parameter (not percent-decoded).
    ///
    /// ```
    /// # use choicewise_testserver::RecordedRequest;
    /// # let r = RecordedRequest { method: "POST".into(), path: "/".into(),
    /// #     query: Some("a=1&b=2".into()), headers: vec![], body: vec![], json: None, connection: 0 };
    /// assert_eq!(r.query_param("b"), Some("2"));
    /// assert_eq!(r.query_param("c"), None);
    /// ```
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then_some(v)
        })
    }
}

/// How one request is answered.
struct Reply {
    writes: Arc<Vec<Write>>,
    end: End,
    failure: Option<Failure>,
    fail_first: usize,
    delay: Duration,
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

/// A running server; dropping it stops the server and closes every connection.
///
/// ```
/// use choicewise_testserver::TestServer;
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let server = TestServer::builder().fixture("demo.sse").start().await?;
/// let url = server.base_url();         // http://127.0.0.1:PORT/v1
/// # assert!(url.ends_with("/v1"));
/// assert_eq!(server.request_count(), 0);
/// drop(server);                        // stops accepting, cuts open connections
/// # Ok(()) }
/// ```
pub struct TestServer {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .field("requests", &self.request_count())
            .field("connections", &self.connections())
            .finish()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // The accept task owns the connections' tasks (a JoinSet): aborting it ends them all.
        self.task.abort();
    }
}

impl TestServer {
    /// Options for a new server.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// let builder = TestServer::builder();
    /// # drop(builder);
    /// ```
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// The address it listens on.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_ne!(server.addr().port(), 0);
    /// # Ok(()) }
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The OpenAI-style base URL, `http://127.0.0.1:PORT/v1`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.base_url(), format!("http://{}/v1", server.addr()));
    /// # Ok(()) }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Azure-style base URL of a deployment,
    /// `http://127.0.0.1:PORT/openai/deployments/DEPLOYMENT`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert!(server.azure_base_url("gpt4o").ends_with("/openai/deployments/gpt4o"));
    /// # Ok(()) }
    /// ```
    pub fn azure_base_url(&self, deployment: &str) -> String {
        format!("http://{}/openai/deployments/{deployment}", self.addr)
    }

    /// Every request received so far, in order.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert!(server.requests().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().expect("requests lock").clone()
    }

    /// How many requests were received so far.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.request_count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn request_count(&self) -> usize {
        self.state.requests.lock().expect("requests lock").len()
    }

    /// How many TCP connections were accepted so far.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// let _tcp = tokio::net::TcpStream::connect(server.addr()).await?;
    /// # tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// assert_eq!(server.connections(), 1);
    /// # Ok(()) }
    /// ```
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// How many streamed answers ended because the client went away before their end
    /// (a dropped response, a closed connection), including stalled ones.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// assert_eq!(server.disconnects(), 0);
    /// # Ok(()) }
    /// ```
    pub fn disconnects(&self) -> usize {
        *self.state.disconnects.borrow()
    }

    /// Waits until a client has gone away mid-stream at least once (see
    /// [`disconnects`](Self::disconnects)). Wrap it in a timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_testserver::TestServer;
    /// # use tokio::io::AsyncWriteExt;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().stall_after(0).start().await?;
    /// let mut tcp = tokio::net::TcpStream::connect(server.addr()).await?;
    /// tcp.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}").await?;
    /// # tokio::time::sleep(Duration::from_millis(50)).await;
    /// drop(tcp);
    /// tokio::time::timeout(Duration::from_secs(5), server.client_gone()).await.unwrap();
    /// assert_eq!(server.disconnects(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn client_gone(&self) {
        self.wait_disconnects(1).await;
    }

    /// Waits until [`disconnects`](Self::disconnects) reaches `count`.
    ///
    /// ```
    /// # use choicewise_testserver::TestServer;
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder().start().await?;
    /// server.wait_disconnects(0).await; // at once
    /// # Ok(()) }
    /// ```
    pub async fn wait_disconnects(&self, count: usize) {
        let mut rx = self.state.disconnects.subscribe();
        // The sender lives in `self.state`, so this only ends when the count is reached.
        let _ = rx.wait_for(|n| *n >= count).await;
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors or the like: wait a little rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let number = state.connections.fetch_add(1, Ordering::SeqCst);
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| handle(state.clone(), request, number));
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// Which API a path belongs to.
enum Api {
    OpenAi,
    Azure,
    Anthropic,
}

fn route(path: &str) -> Option<Api> {
    match path {
        "/v1/chat/completions" | "/v1/responses" => return Some(Api::OpenAi),
        "/v1/messages" => return Some(Api::Anthropic),
        _ => {}
    }
    let deployment = path
        .strip_prefix("/openai/deployments/")?
        .strip_suffix("/chat/completions")?;
    (!deployment.is_empty() && !deployment.contains('/')).then_some(Api::Azure)
}

/// `GET /v1/models`.
fn models(state: &State, request: &RecordedRequest) -> Response<Body> {
    if request.method != "GET" {
        return Failure::status(405)
            .message(format!("Method {} not allowed", request.method))
            .kind("invalid_request_error")
            .response();
    }
    if let Some(key) = &state.api_key {
        let authorized = request
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|k| k == key);
        if !authorized {
            return Failure::status(401).response();
        }
    }
    let data: Vec<Value> = state
        .models
        .iter()
        .map(|id| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "choicewise-testserver"}))
        .collect();
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(full(
            serde_json::json!({"object": "list", "data": data}).to_string(),
        ))
        .expect("a valid response")
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
    connection: usize,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, MAX_REQUEST_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(Failure::status(413)
                .message("The request body is too large or was cut.")
                .response());
        }
    };
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_string(), value)
            })
            .collect(),
        json: serde_json::from_slice(&body).ok(),
        body: body.to_vec(),
        connection,
    };
    let number = {
        let mut requests = state.requests.lock().expect("requests lock");
        requests.push(recorded.clone());
        requests.len() - 1
    };

    if recorded.path == "/v1/models" {
        return Ok(models(&state, &recorded));
    }
    let Some(api) = route(&recorded.path) else {
        return Ok(Failure::status(404)
            .message(format!("Unknown path {}", recorded.path))
            .code(Some("not_found"))
            .response());
    };
    if recorded.method != "POST" {
        return Ok(Failure::status(405)
            .message(format!("Method {} not allowed", recorded.method))
            .kind("invalid_request_error")
            .response());
    }
    if matches!(api, Api::Azure)
        && recorded
            .query_param("api-version")
            .is_none_or(str::is_empty)
    {
        return Ok(Failure::status(400)
            .message("Missing required query parameter: api-version")
            .code(Some("missing_api_version"))
            .response());
    }
    if let Some(key) = &state.api_key {
        let authorized = match api {
            Api::OpenAi => recorded
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .is_some_and(|k| k == key),
            Api::Azure => recorded.header("api-key") == Some(key.as_str()),
            Api::Anthropic => recorded.header("x-api-key") == Some(key.as_str()),
        };
        if !authorized {
            return Ok(Failure::status(401).response());
        }
    }
    let reply = &state.replies[number % state.replies.len()];
    if let Some(failure) = reply.failure.as_ref().filter(|_| number < reply.fail_first) {
        return Ok(failure.response());
    }
    let response = Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .header("x-request-id", format!("req_{number}"))
        .body(sse_body(&state, number % state.replies.len()))
        .expect("a valid response");
    Ok(response)
}

/// Counts the answer as abandoned if it is dropped before its planned end.
struct Abandoned {
    state: Arc<State>,
    planned_end: bool,
}

impl Abandoned {
    /// The answer reached its planned end: dropping it now is no disconnect.
    fn planned_end(&mut self) {
        self.planned_end = true;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.planned_end {
            self.state.disconnects.send_modify(|n| *n += 1);
        }
    }
}

enum Phase {
    Writing(usize),
    Ending,
    Over,
}

struct BodyState {
    writes: Vec<Write>,
    phase: Phase,
    end: End,
    guard: Abandoned,
}

/// The writes of the plan, cut at `limit` bytes.
fn truncated(writes: &[Write], limit: usize) -> Vec<Write> {
    let mut out = Vec::new();
    let mut sent = 0;
    for w in writes {
        if sent >= limit {
            break;
        }
        let take = w.bytes.len().min(limit - sent);
        out.push(Write {
            delay: w.delay,
            bytes: w.bytes.slice(..take),
        });
        sent += take;
    }
    out
}

fn sse_body(state: &Arc<State>, reply: usize) -> Body {
    let reply = &state.replies[reply];
    let mut writes = match reply.end {
        End::Complete => reply.writes.as_ref().clone(),
        End::Close(n) | End::Stall(n) => truncated(&reply.writes, n),
    };
    if let Some(first) = writes.first_mut() {
        first.delay += reply.delay;
    } else if !reply.delay.is_zero() {
        writes.push(Write {
            delay: reply.delay,
            bytes: Bytes::new(),
        });
    }
    let body = BodyState {
        writes,
        phase: Phase::Writing(0),
        end: reply.end,
        guard: Abandoned {
            state: state.clone(),
            planned_end: false,
        },
    };
    let frames = futures::stream::unfold(body, |mut body| async move {
        loop {
            match body.phase {
                Phase::Writing(i) if i < body.writes.len() => {
                    let write = body.writes[i].clone();
                    if !write.delay.is_zero() {
                        tokio::time::sleep(write.delay).await;
                    }
                    body.phase = Phase::Writing(i + 1);
                    return Some((Ok(Frame::data(write.bytes)), body));
                }
                Phase::Writing(_) => body.phase = Phase::Ending,
                Phase::Ending => match body.end {
                    End::Complete => {
                        body.guard.planned_end();
                        return None;
                    }
                    End::Close(n) => {
                        // hyper flushes what it buffered when the body is pending; an error
                        // right away would drop those bytes with the connection.
                        tokio::time::sleep(FLUSH_BEFORE_CUT).await;
                        body.guard.planned_end();
                        body.phase = Phase::Over;
                        let cut: BoxError = format!("connection cut after {n} bytes").into();
                        return Some((Err(cut), body));
                    }
                    // Until the client goes away or the server is dropped.
                    End::Stall(_) => std::future::pending::<()>().await,
                },
                Phase::Over => return None,
            }
        }
    });
    StreamBody::new(frames).boxed()
}
