//! # choicewise-client
//!
//! The HTTP side of choicewise: POST a chat-completion request with `"stream": true` to an
//! OpenAI-compatible endpoint (OpenAI, Azure OpenAI, vLLM, OpenRouter, ...) and get the
//! streamed answer as a [`choicewise_core::Completions`]: one handle per choice, each readable on
//! its own while the others stream.
//!
//! ```
//! use choicewise_client::Client;
//! use futures::{StreamExt, TryStreamExt};
//! use serde_json::json;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
//! # let base_url = server.base_url();
//! let client = Client::builder()
//!     .base_url(base_url)                  // default https://api.openai.com/v1
//!     .api_key("sk-...")
//!     .build()?;
//! let completions = client
//!     .chat(json!({
//!         "model": "gpt-4o-mini",
//!         "n": 3,
//!         "messages": [{"role": "user", "content": "What should I pack for Lisbon?"}],
//!     }))
//!     .await?;
//! let mut choices = completions.choices();
//! while let Some(choice) = choices.next().await {
//!     let text: Vec<_> = choice.content().try_collect().await?;
//!     println!("choice {}: {}", choice.index(), text.concat());
//! }
//! let whole = completions.collect().await?;
//! assert_eq!(whole.choices.len(), 3);
//! # Ok(()) }
//! ```
//!
//! ## Retries
//!
//! A chat completion is a POST that costs money, so [`Client::chat`] and [`Client::source`]
//! retry only when the
//! request certainly produced no answer:
//!
//! - **a failed connection** (refused, DNS, TLS, connect timeout), and
//! - **a `429 Too Many Requests` or `503 Service Unavailable`**, decided on the status line
//!   and headers alone, before any body byte is read;
//!
//! each up to [`max_retries`](ClientBuilder::max_retries) times (default 2, so at most 3
//! requests). Before a retry it waits what the server asked for (`retry-after-ms`, else
//! `Retry-After` in seconds or as an HTTP date), otherwise an exponential backoff of 0.5 s,
//! 1 s, 2 s, ..., the backoff capped by [`max_retry_wait`](ClientBuilder::max_retry_wait)
//! (default 20 s). A server that asks for a longer wait than that (a daily budget spent:
//! `Retry-After: 86400`) is not retried: its refusal is returned at once, the wait it asked
//! for in [`ClientError::retry_after`].
//!
//! With [`retry_server_errors`](ClientBuilder::retry_server_errors), `408`, `500`, `502`,
//! `504` and `529` are retried the same way (as a gateway retries between its upstreams).
//!
//! Nothing else is retried: any other status (400, 401, 404, 500, ...) is returned at once as
//! a [`ClientErrorKind::Status`] error with the provider's JSON error body; an error after the request was
//! sent (a connection reset, no response headers within the idle timeout) is returned as is;
//! and once a `2xx` response came, the stream is never restarted: a
//! failure mid-stream ends the [`Completions`] with a typed [`choicewise_core::Error`], keeping
//! everything received before it.
//!
//! ## Timeouts
//!
//! - [`connect_timeout`](ClientBuilder::connect_timeout) (default 10 s): establishing the
//!   connection (TCP and TLS).
//! - [`idle_timeout`](ClientBuilder::idle_timeout) (default 60 s): the longest silence
//!   allowed, while waiting for the response headers ([`ClientErrorKind::Timeout`]) and between
//!   two reads of the body ([`choicewise_core::ErrorDetail::IdleTimeout`]). There is no limit on the
//!   length of a stream that keeps sending.
//!
//! ## Connections, TLS and proxies
//!
//! One pool of HTTP/1.1 connections a client (hyper's, shared by its clones), at most
//! [`max_idle_connections`](ClientBuilder::max_idle_connections) of them kept idle to the
//! server. `https` is rustls (the ring provider) checked against the Mozilla roots of
//! webpki-roots, with no OpenSSL. Redirects are never followed: a `3xx` is the server's
//! failure. A base URL's `user:password@` is sent as `Authorization: Basic` (an API key's
//! `Authorization` wins), never in the request line.
//!
//! A proxy is taken from the environment when the client is built, as curl takes it:
//! `HTTPS_PROXY` for an `https` server (through a `CONNECT` tunnel), `HTTP_PROXY` for an
//! `http` one (each request in absolute form to the proxy), `ALL_PROXY` for both, and no proxy
//! for the hosts in `NO_PROXY`; the proxy's `user:password@` as `Proxy-Authorization`. Only
//! an `http://` proxy is used: with another (`https://`, `socks5://`), every connection
//! fails, naming it, rather than going around it.
//!
//! ## Many requests, one completion
//!
//! [`Client::source`] makes a request a [`Source`] of the core, opened when its completion
//! starts reading it: `Completions::builder().fan_out([...])` reads several, from one client
//! or several, as one completion.
//!
//! ## Without this client
//!
//! Any HTTP body is a [`Source::sse`] (a stream of byte reads); with the `async-openai`
//! feature, `async_openai_source` reads async-openai's chat stream.
#![deny(missing_docs)]

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use choicewise_core::{Completions, Source};
use http::StatusCode;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

mod builder;
pub use builder::{
    ANTHROPIC_VERSION, ClientBuilder, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_IDLE_CONNECTIONS, DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_WAIT, IDLE_CONNECTION_LIFETIME,
};

pub use choicewise_core::Dialect;
pub use choicewise_core::defaults::DEFAULT_ANTHROPIC_MAX_TOKENS;

/// The most bytes [`Client::count_tokens_json`] reads of a token count's answer
/// (`{"input_tokens": N}`): past it, the answer is an error.
///
/// ```
/// assert_eq!(choicewise_client::MAX_COUNT_ANSWER_BYTES, 64 * 1024);
/// ```
pub const MAX_COUNT_ANSWER_BYTES: usize = 64 * 1024;

/// The bounds of a token count's exchange with its server
/// ([`Client::count_tokens_within`]).
///
/// ```
/// use std::time::Duration;
/// let bounds = choicewise_client::CountBounds {
///     first_byte: Duration::from_secs(10),
///     idle: Duration::from_secs(30),
///     max_bytes: choicewise_client::MAX_COUNT_ANSWER_BYTES,
/// };
/// assert!(bounds.first_byte < bounds.idle);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountBounds {
    /// The longest wait for the answer's head (its status line and headers) and the first
    /// byte of its body, from the request's start.
    pub first_byte: std::time::Duration,
    /// The longest silence between two reads of the answer's body.
    pub idle: std::time::Duration,
    /// The most bytes the answer's body may have.
    pub max_bytes: usize,
}

mod error;
use error::status_error;
pub use error::{ClientError, ClientErrorKind};

mod retry;
mod sigv4;
use retry::{backoff, retry_after};
pub use sigv4::AwsCredentials;

mod transport;
use transport::{Failure, Target, Transport};

#[cfg(feature = "async-openai")]
mod async_openai_compat;
#[cfg(feature = "async-openai")]
pub use async_openai_compat::async_openai_source;

struct Inner {
    transport: Transport,
    url: Target,
    /// `{base}/models`.
    models_url: Target,
    /// `{base}/messages/count_tokens`, for the Anthropic API.
    count_url: Option<Target>,
    /// The key, the extra headers, the user agent.
    headers: HeaderMap,
    /// `headers`, with a streamed request's `Accept` and `Content-Type`.
    stream_headers: HeaderMap,
    azure: Option<String>,
    /// The API its requests are in.
    api: Dialect,
    /// What signs each request, for an API whose requests are signed (Bedrock's).
    signer: Option<sigv4::Signer>,
    has_key: bool,
    idle_timeout: Duration,
    max_retries: u32,
    max_retry_wait: Duration,
    /// 408, 500, 502, 504 and 529 are retried too.
    retry_server_errors: bool,
    /// The slots of [`ClientBuilder::max_concurrent_requests`].
    slots: Option<Arc<tokio::sync::Semaphore>>,
}

/// An HTTP client for streamed chat completions; cheap to clone (the connection pool is
/// shared).
///
/// ```
/// use choicewise_client::Client;
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = choicewise_testserver::TestServer::builder().fixture("openai_n3_tools.sse").start().await?;
/// let client = Client::builder().base_url(server.base_url()).api_key("sk-...").build()?;
/// let completions = client.chat(serde_json::json!({"model": "gpt-4o-mini", "n": 3,
///     "messages": [{"role": "user", "content": "Weather in Paris and Tokyo?"}]})).await?;
/// let choice = completions.choice(1).await.unwrap();
/// let output = choice.message().await?;
/// assert_eq!(output.message.tool_calls.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        f.debug_struct("Client")
            .field("url", &i.url.url.as_str())
            .field("azure", &i.azure)
            .field("api_key", &i.has_key.then_some("<redacted>"))
            .field("idle_timeout", &i.idle_timeout)
            .field("max_retries", &i.max_retries)
            .field("max_retry_wait", &i.max_retry_wait)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Options for a new client.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().api_key("sk-...").build().unwrap();
    /// assert_eq!(client.url(), "https://api.openai.com/v1/chat/completions");
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The URL requests are posted to.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().base_url("http://127.0.0.1:8000/v1").build().unwrap();
    /// assert_eq!(client.url(), "http://127.0.0.1:8000/v1/chat/completions");
    /// ```
    pub fn url(&self) -> &str {
        self.inner.url.url.as_str()
    }

    /// The host the requests go to, with its port when the URL names one (`127.0.0.1:8080`,
    /// `api.openai.com`): no credentials, no path, no query. What a label or a log may name.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().base_url("http://user:pw@127.0.0.1:8000/v1?api-key=k").build().unwrap();
    /// assert_eq!(client.host(), "127.0.0.1:8000");
    /// ```
    pub fn host(&self) -> String {
        let url = &self.inner.url.url;
        let host = url.host_str().unwrap_or_default();
        match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        }
    }

    /// POSTs the request to `{base_url}/chat/completions` with `"stream": true` forced into
    /// it, retrying as described in [the retry policy](crate#retries). Returns once a `2xx`
    /// status and the headers arrived; the body is not read yet.
    async fn send(&self, request: &Value) -> Result<transport::Response, ClientError> {
        let Some(object) = request.as_object() else {
            return Err(ClientError::invalid(
                ClientErrorKind::InvalidRequest,
                "the body must be a JSON object".to_string(),
            ));
        };
        let mut body = object.clone();
        // Gemini streams by its URL's method and refuses a `stream` field.
        let api = self.inner.api.api();
        if api.stream_field() {
            body.insert("stream".to_string(), Value::Bool(true));
        }
        if api.usage_when_asked() {
            ask_for_usage(&mut body);
        }
        let body = serde_json::to_vec(&Value::Object(body))
            .map_err(|e| ClientError::invalid(ClientErrorKind::InvalidRequest, e.to_string()))?;
        self.send_bytes(bytes::Bytes::from(body)).await
    }

    /// [`send`](Self::send) of a body already serialised (with its `"stream": true`).
    async fn send_bytes(&self, body: bytes::Bytes) -> Result<transport::Response, ClientError> {
        let inner = &self.inner;
        // Errors name the URL without its credentials or query.
        let url_text = || inner.url.shown.to_string();
        let mut retry = 0;
        loop {
            // Signed at each try: a signature holds for its time.
            let signed = match &inner.signer {
                Some(signer) => Some(signer.sign(inner.url.uri(), &inner.stream_headers, &body)?),
                None => None,
            };
            let headers = signed.as_ref().unwrap_or(&inner.stream_headers);
            let sent = inner
                .transport
                .send(&inner.url, headers, Some(body.clone()));
            let sent = match tokio::time::timeout(inner.idle_timeout, sent).await {
                Ok(sent) => sent,
                Err(_) => return Err(ClientError::timeout(&url_text())),
            };
            let wait = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let retryable = status == StatusCode::TOO_MANY_REQUESTS
                        || status == StatusCode::SERVICE_UNAVAILABLE
                        || (inner.retry_server_errors && retryable_status(status.as_u16()));
                    if !retryable || retry >= inner.max_retries {
                        return Err(status_error(response, inner.idle_timeout).await);
                    }
                    // Decided on the status line and headers alone: the body is never read.
                    match retry_after(response.headers(), SystemTime::now()) {
                        // The server says no try passes before longer than this client
                        // waits: the refusal now, its wait in `ClientError::retry_after`.
                        Some(wait) if wait > inner.max_retry_wait => {
                            return Err(status_error(response, inner.idle_timeout).await);
                        }
                        Some(wait) => wait,
                        None => backoff(retry),
                    }
                }
                Err(Failure::Connect { .. }) if retry < inner.max_retries => backoff(retry),
                Err(failure) => return Err(ClientError::failed(&url_text(), failure)),
            };
            tokio::time::sleep(wait.min(inner.max_retry_wait)).await;
            retry += 1;
        }
    }

    /// The models the server offers: `GET {base_url}/models`, their ids in the order listed
    /// (OpenAI's `{"data": [{"id": ...}]}`; a list under `"models"` with `name` or `model`,
    /// as Ollama-style servers and llama.cpp also send, when `data` is absent). Not retried;
    /// bounded by the idle timeout. Useful against a local server, which serves one model or a
    /// few: `choicewise chat` asks it when no model is given.
    ///
    /// ```
    /// use choicewise_client::Client;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let models = client.models().await?;
    /// assert_eq!(models, ["gpt-4o-mini"]);
    /// # Ok(()) }
    /// ```
    pub async fn models(&self) -> Result<Vec<String>, ClientError> {
        let idle = self.inner.idle_timeout;
        // A provider's list of models may be long: its size is not bounded here.
        let bounds = CountBounds {
            first_byte: idle,
            idle,
            max_bytes: usize::MAX,
        };
        let list = (self.exchange(&self.inner.models_url, None, "model list", bounds)).await?;
        Ok(model_ids(&list))
    }

    /// The input tokens of a Messages request as the Anthropic API counts them: `POST
    /// {base_url}/messages/count_tokens` with `request` (its `model`, `system`, `messages`,
    /// `tools`), its `input_tokens`. Only a client of the Anthropic API
    /// ([`ClientBuilder::api`]) has the endpoint; others get an
    /// [`InvalidRequest`](ClientErrorKind::InvalidRequest) error. Not retried; bounded by the
    /// idle timeout.
    ///
    /// ```
    /// use choicewise_client::{Client, Dialect};
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().start().await?;
    /// let client = Client::builder().api(Dialect::Anthropic).base_url(server.base_url()).build()?;
    /// let request = serde_json::json!({"model": "claude-sonnet-4-5",
    ///     "messages": [{"role": "user", "content": "Hello, Claude"}]});
    /// let tokens = client.count_tokens(&request).await?; // the test server counts words: 2
    /// assert_eq!(tokens, 2);
    /// # Ok(()) }
    /// ```
    pub async fn count_tokens(&self, request: &Value) -> Result<u64, ClientError> {
        let body = serde_json::to_vec(request)
            .map_err(|e| ClientError::invalid(ClientErrorKind::InvalidRequest, e.to_string()))?;
        self.count_tokens_json(bytes::Bytes::from(body)).await
    }

    /// [`count_tokens`](Self::count_tokens) of a request already serialised: `body` is the
    /// JSON text of the request object, sent as it is (a gateway forwarding a client's body
    /// need not parse it).
    pub async fn count_tokens_json(&self, body: bytes::Bytes) -> Result<u64, ClientError> {
        let idle = self.inner.idle_timeout;
        let bounds = CountBounds {
            first_byte: idle,
            idle,
            max_bytes: MAX_COUNT_ANSWER_BYTES,
        };
        self.count_tokens_within(body, bounds).await
    }

    /// [`count_tokens_json`](Self::count_tokens_json) within `bounds`: the wait for the
    /// answer's head, the silence between its reads, and its size (a count is small: an
    /// answer past `max_bytes` is an [`InvalidResponse`](ClientErrorKind::InvalidResponse)
    /// error, read no further). A caller with a deadline of its own puts the call under it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use choicewise_client::{Client, CountBounds, Dialect};
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().start().await?;
    /// let client = Client::builder().api(Dialect::Anthropic).base_url(server.base_url()).build()?;
    /// let body = r#"{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello, Claude"}]}"#;
    /// let bounds = CountBounds {
    ///     first_byte: Duration::from_secs(5),
    ///     idle: Duration::from_secs(5),
    ///     max_bytes: 64 * 1024,
    /// };
    /// assert_eq!(client.count_tokens_within(body.into(), bounds).await?, 2);
    /// # Ok(()) }
    /// ```
    pub async fn count_tokens_within(
        &self,
        body: bytes::Bytes,
        bounds: CountBounds,
    ) -> Result<u64, ClientError> {
        let Some(url) = &self.inner.count_url else {
            return Err(ClientError::invalid(
                ClientErrorKind::InvalidRequest,
                "only the anthropic API counts tokens (messages/count_tokens)".to_string(),
            ));
        };
        let answer = self
            .exchange(url, Some(body), "token count", bounds)
            .await?;
        answer["input_tokens"].as_u64().ok_or_else(|| {
            ClientError::invalid(
                ClientErrorKind::InvalidResponse,
                format!("{}: no input_tokens in {answer}", url.shown),
            )
        })
    }

    /// A JSON exchange with the server: `GET url`, or `POST url` with `body`; the answer's
    /// JSON (`what` names it in errors). Not retried; its head and the first byte of its
    /// body awaited `bounds.first_byte` from the request, each later read of its body
    /// `bounds.idle`, and its body read up to `bounds.max_bytes`.
    async fn exchange(
        &self,
        url: &Target,
        body: Option<bytes::Bytes>,
        what: &str,
        bounds: CountBounds,
    ) -> Result<Value, ClientError> {
        let inner = &self.inner;
        let url_text = || url.shown.to_string();
        let mut headers = inner.headers.clone();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        if body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let sent = inner.transport.send(url, &headers, body);
        // The head and the first byte of the body within `first_byte` of the request (an
        // answer whose head comes and then nothing is timed as a silent one), later reads
        // within `idle` each.
        let first_by = tokio::time::Instant::now() + bounds.first_byte;
        let response = match tokio::time::timeout_at(first_by, sent).await {
            Err(_) => return Err(ClientError::timeout(&url_text())),
            Ok(Err(failure)) => return Err(ClientError::failed(&url_text(), failure)),
            Ok(Ok(r)) if !r.status().is_success() => {
                return Err(status_error(r, bounds.idle).await);
            }
            Ok(Ok(r)) => r,
        };
        let too_large = || {
            ClientError::invalid(
                ClientErrorKind::InvalidResponse,
                format!(
                    "{}: the {what} is larger than {} bytes",
                    url_text(),
                    bounds.max_bytes
                ),
            )
        };
        let declared = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|len| len > bounds.max_bytes as u64) {
            return Err(too_large());
        }
        let mut reads = http_body_util::BodyDataStream::new(response.into_body());
        let mut body = Vec::new();
        loop {
            let read_by = match body.is_empty() {
                true => first_by,
                false => tokio::time::Instant::now() + bounds.idle,
            };
            match tokio::time::timeout_at(read_by, futures::StreamExt::next(&mut reads)).await {
                Err(_) => return Err(ClientError::timeout(&url_text())),
                Ok(Some(Err(e))) => {
                    return Err(ClientError::request(Some(&url_text()), Box::new(e)));
                }
                Ok(None) => break,
                Ok(Some(Ok(chunk))) => {
                    if body.len() + chunk.len() > bounds.max_bytes {
                        return Err(too_large());
                    }
                    body.extend_from_slice(&chunk);
                }
            }
        }
        serde_json::from_slice(&body).map_err(|e| {
            ClientError::invalid(
                ClientErrorKind::InvalidResponse,
                format!("{}: not a JSON {what}: {e}", url_text()),
            )
        })
    }

    /// Sends the request and returns its completion once the provider answered `2xx` (an
    /// error status, a refused connection or a timeout before that is a [`ClientError`]),
    /// read with this client's idle timeout, the request counted in usage estimates: the
    /// usual entry point, shorthand for `Completions::new(client.open(request).await?)` (see
    /// [`open`](Self::open) to set the completion's options with
    /// [`Completions::builder`]).
    ///
    /// ```
    /// use choicewise_client::Client;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("vllm_n4_reasoning.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let completions = client.chat(serde_json::json!({"model": "Qwen/Qwen3-8B", "n": 4,
    ///     "messages": [{"role": "user", "content": "Is 221 prime?"}]})).await?;
    /// let whole = completions.collect().await?;
    /// assert_eq!(whole.choices[1].finish_reason.as_deref(), Some("length"));
    /// # Ok(()) }
    /// ```
    pub async fn chat(&self, request: Value) -> Result<Completions, ClientError> {
        Ok(Completions::new(self.open(request).await?))
    }

    /// Sends the request and returns its answer as a [`Source`] once the provider answered
    /// `2xx` (an error status, a refused connection or a timeout before that is a
    /// [`ClientError`]): read with this client's idle timeout, the request counted in usage
    /// estimates. For a completion with options of its own; [`source`](Self::source) is the
    /// same request still to be sent, for a fan-out.
    ///
    /// ```
    /// use choicewise_client::Client;
    /// use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let source = client.open(serde_json::json!({"model": "gpt-4o-mini", "n": 3, "messages": []})).await?;
    /// let completions = Completions::builder().max_choices(8).start(source);
    /// assert_eq!(completions.collect().await?.choices.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn open(&self, request: Value) -> Result<Source, ClientError> {
        let body = self.stream(&request).await?;
        Ok(Source::sse(body)
            .request(request)
            .idle_timeout(self.inner.idle_timeout))
    }

    /// Sends the request and returns the answer's body, raw, once the provider answered
    /// `2xx`: a stream of reads of SSE bytes, for a program that wants the bytes themselves
    /// (to record them, say) before making them a [`Source::sse`].
    ///
    /// ```
    /// use choicewise_client::Client;
    /// use choicewise_core::{Completions, Source};
    /// use futures::TryStreamExt;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let request = serde_json::json!({"model": "gpt-4o-mini", "n": 3, "messages": []});
    /// let body = client.stream(&request).await?;
    /// let bytes: Vec<u8> = body.map_ok(|read| read.to_vec()).try_concat().await?;
    /// let completions = Completions::new(Source::reader(std::io::Cursor::new(bytes)).request(request));
    /// assert_eq!(completions.collect().await?.choices.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn stream(
        &self,
        request: &Value,
    ) -> Result<
        impl futures::Stream<Item = Result<bytes::Bytes, ClientError>> + Send + 'static + use<>,
        ClientError,
    > {
        let slot = match &self.inner.slots {
            Some(slots) => slots.clone().acquire_owned().await.ok(),
            None => None,
        };
        let response = self.send(request).await?;
        Ok(self.held(response, slot))
    }

    /// [`stream`](Self::stream) of a request already serialised: `body` is the JSON text of
    /// the request object, sent as it is, so it must ask for a stream (`"stream": true`)
    /// itself. A gateway that writes its upstream's body from the client's raw fields sends
    /// it without building it as a [`Value`].
    pub async fn stream_json(
        &self,
        body: bytes::Bytes,
    ) -> Result<
        impl futures::Stream<Item = Result<bytes::Bytes, ClientError>> + Send + 'static + use<>,
        ClientError,
    > {
        let slot = match &self.inner.slots {
            Some(slots) => slots.clone().acquire_owned().await.ok(),
            None => None,
        };
        let response = self.send_bytes(body).await?;
        Ok(self.held(response, slot))
    }

    /// A response's body as a stream of reads, holding `slot` until it is dropped.
    fn held(
        &self,
        response: transport::Response,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> impl futures::Stream<Item = Result<bytes::Bytes, ClientError>> + Send + 'static + use<>
    {
        use futures::TryStreamExt;
        let url = self.inner.url.shown.clone();
        // The slot is held by the body: freed when it is dropped.
        http_body_util::BodyDataStream::new(response.into_body()).map_err(move |e| {
            let _held = &slot;
            ClientError::request(Some(&url), Box::new(e))
        })
    }

    /// The request as a [`Source`] still to be opened: sent when a completion starts reading
    /// it (retried as [`chat`](Self::chat) is), its answer's body read as SSE; a failure
    /// before the stream begins fails the source with
    /// [`ErrorDetail::Open`](choicewise_core::ErrorDetail::Open), this error as its source.
    /// Its choice count is the request's `n` (1 by default), so that a fan-out of sources
    /// numbers the choices of each request in a block of its own.
    ///
    /// ```
    /// use choicewise_client::Client;
    /// use choicewise_core::Completions;
    /// use serde_json::json;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let request = json!({"model": "gpt-4o-mini", "n": 3, "messages": [{"role": "user", "content": "Hi"}]});
    /// // Two requests of three choices each: one completion of six choices.
    /// let completions = Completions::builder()
    ///     .fan_out([client.source(request.clone()), client.source(request)]);
    /// let whole = completions.collect().await?;
    /// assert_eq!(whole.choices.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    /// # assert_eq!(server.request_count(), 2);
    /// # Ok(()) }
    /// ```
    pub fn source(&self, request: Value) -> Source {
        let client = self.clone();
        let n = request.get("n").and_then(Value::as_u64).unwrap_or(1);
        let body = request.clone();
        Source::open(async move {
            let reads = client.stream(&body).await?;
            Ok::<_, ClientError>(Source::sse(reads))
        })
        .n(u32::try_from(n).unwrap_or(u32::MAX))
        .request(request)
        .idle_timeout(self.inner.idle_timeout)
    }
}

/// Asks a streamed Chat Completions request for the provider's own usage figures, as every
/// front end of choicewise does (this client, the CLI, Python's `stream()`; the Responses
/// and Messages APIs report usage unasked): a body without
/// `stream_options` gains `{"include_usage": true}`; one whose `stream_options` is `null`
/// sends none (for a server that refuses the field); any other `stream_options` is kept.
/// Without the provider's figures, [`Completions::usage`](choicewise_core::Completions::usage)
/// is an estimate.
///
/// ```
/// use serde_json::{json, Value};
/// let mut body = json!({"model": "m"}).as_object().unwrap().clone();
/// choicewise_client::ask_for_usage(&mut body);
/// assert_eq!(body["stream_options"], json!({"include_usage": true}));
/// let mut none = json!({"stream_options": null}).as_object().unwrap().clone();
/// choicewise_client::ask_for_usage(&mut none);
/// assert!(!none.contains_key("stream_options"));
/// let mut own = json!({"stream_options": {"include_usage": false}}).as_object().unwrap().clone();
/// choicewise_client::ask_for_usage(&mut own);
/// assert_eq!(own["stream_options"], json!({"include_usage": false}));
/// ```
pub fn ask_for_usage(body: &mut serde_json::Map<String, Value>) {
    match body.get("stream_options") {
        None => {
            body.insert(
                "stream_options".to_string(),
                serde_json::json!({"include_usage": true}),
            );
        }
        Some(Value::Null) => {
            body.remove("stream_options");
        }
        Some(_) => {}
    }
}

/// Whether a status says a try failed before any answer and may pass on another try: 408,
/// 429, 500, 502, 503, 504 and 529. The client retries them with
/// [`retry_server_errors`](ClientBuilder::retry_server_errors) (429 and 503 always); a
/// gateway between upstreams classifies its tries by the same list.
///
/// ```
/// assert!(choicewise_client::retryable_status(529));
/// assert!(!choicewise_client::retryable_status(400));
/// ```
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// The model ids of a `/models` answer: `data[].id`, else `models[].name` / `models[].model`.
fn model_ids(list: &Value) -> Vec<String> {
    let ids = |key: &str, fields: &[&str]| -> Vec<String> {
        list.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| fields.iter().find_map(|f| m.get(*f)?.as_str()))
            .filter(|id| !id.is_empty())
            .map(str::to_string)
            .collect()
    };
    let data = ids("data", &["id"]);
    if data.is_empty() {
        ids("models", &["name", "model"])
    } else {
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists() {
        let ids = |v: Value| model_ids(&v);
        assert_eq!(
            ids(serde_json::json!({"object": "list", "data": [{"id": "a"}, {"id": "b"}]})),
            ["a", "b"]
        );
        assert_eq!(
            ids(serde_json::json!({"models": [{"name": "x", "model": "y"}], "data": []})),
            ["x"]
        );
        assert!(ids(serde_json::json!({"data": [{"id": ""}, {"name": 1}]})).is_empty());
        assert!(ids(serde_json::json!([1])).is_empty());
    }
}
