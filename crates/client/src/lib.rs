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
//! A chat completion is a POST that costs money, so [`Client::send`] retries only when the
//! request certainly produced no answer:
//!
//! - **a failed connection** (refused, DNS, TLS, connect timeout), and
//! - **a `429 Too Many Requests` or `503 Service Unavailable`**, decided on the status line
//!   and headers alone, before any body byte is read;
//!
//! each up to [`max_retries`](ClientBuilder::max_retries) times (default 2, so at most 3
//! requests). Before a retry it waits what the server asked for (`retry-after-ms`, else
//! `Retry-After` in seconds or as an HTTP date), otherwise an exponential backoff of 0.5 s,
//! 1 s, 2 s, ..., the wait capped by [`max_retry_wait`](ClientBuilder::max_retry_wait)
//! (default 20 s).
//!
//! Nothing else is retried: any other status (400, 401, 404, 500, ...) is returned at once as
//! [`ClientError::Status`] with the provider's JSON error body; an error after the request was
//! sent (a connection reset, no response headers within the idle timeout) is returned as is;
//! and once [`Client::send`] has returned a `2xx` response, the stream is never restarted: a
//! failure mid-stream ends the [`Completions`] with a typed [`choicewise_core::Error`], keeping
//! everything received before it.
//!
//! ## Timeouts
//!
//! - [`connect_timeout`](ClientBuilder::connect_timeout) (default 10 s): establishing the
//!   connection (TCP and TLS).
//! - [`idle_timeout`](ClientBuilder::idle_timeout) (default 60 s): the longest silence
//!   allowed, while waiting for the response headers ([`ClientError::Timeout`]) and between
//!   two reads of the body ([`choicewise_core::ErrorDetail::IdleTimeout`]). There is no limit on the
//!   length of a stream that keeps sending.
//!
//! ## Without this client
//!
//! [`completions`] turns any `reqwest::Response` carrying an SSE body into a [`Completions`];
//! with the `async-openai` feature, `from_async_openai` does the same for async-openai's
//! chat stream.
#![deny(missing_docs)]

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use choicewise_core::Completions;
use futures::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde_json::Value;

mod fan_out;
pub use fan_out::{DEFAULT_CONCURRENCY, FanOut};

#[cfg(feature = "async-openai")]
mod async_openai_compat;
#[cfg(feature = "async-openai")]
pub use async_openai_compat::from_async_openai;

/// The default base URL, OpenAI's API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default number of retries.
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// The default cap on one wait before a retry.
pub const DEFAULT_MAX_RETRY_WAIT: Duration = Duration::from_secs(20);

/// The Anthropic API version sent with [`Api::Messages`] requests (`anthropic-version`),
/// unless a [`header`](ClientBuilder::header) of that name is given.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Which streaming API a [`Client`] speaks: its endpoint and how the key is sent. The
/// request body is the caller's, in that API's shape; the streamed answer's dialect is
/// recognised by the [`Completions`] whatever the API, and `collect()` gives Chat
/// Completions' shape for every one.
///
/// ```
/// use choicewise_client::{Api, Client};
/// let client = Client::builder().api(Api::Messages).base_url("https://api.anthropic.com/v1").build().unwrap();
/// assert_eq!(client.url(), "https://api.anthropic.com/v1/messages");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Api {
    /// OpenAI Chat Completions and compatible servers: `POST {base}/chat/completions`, the
    /// key as `Authorization: Bearer KEY` (`api-key: KEY` in Azure mode).
    #[default]
    ChatCompletions,
    /// The OpenAI Responses API: `POST {base}/responses`, the key as a bearer token.
    Responses,
    /// The Anthropic Messages API: `POST {base}/messages`, the key as `x-api-key: KEY`, with
    /// `anthropic-version: ANTHROPIC_VERSION`.
    Messages,
}

impl Api {
    /// The endpoint's path under the base URL.
    fn segments(self) -> &'static [&'static str] {
        match self {
            Api::ChatCompletions => &["chat", "completions"],
            Api::Responses => &["responses"],
            Api::Messages => &["messages"],
        }
    }
}

/// The first backoff, doubled at each further retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The most of an error body read (the rest is ignored).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Everything that can go wrong before a stream starts. Once [`Client::send`] or
/// [`Client::chat`] succeeded, errors are the stream's own [`choicewise_core::Error`].
///
/// ```
/// use choicewise_client::{Client, ClientError};
/// let err = Client::builder().base_url("no scheme").build().unwrap_err();
/// assert!(matches!(err, ClientError::InvalidUrl(_)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The provider answered with a non-2xx status.
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::Status { status: 401, message: "Incorrect API key".into(), body: None };
    /// assert_eq!(e.to_string(), "the provider answered 401: Incorrect API key");
    /// ```
    #[error("the provider answered {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The provider's message (`error.message` of its JSON body), else the body's text,
        /// else the status's reason.
        message: String,
        /// The provider's JSON error body, when it was JSON.
        body: Option<Value>,
    },
    /// Could not connect (refused, DNS, TLS), after the retries.
    ///
    /// ```no_run
    /// # use choicewise_client::{Client, ClientError};
    /// # #[tokio::main] async fn main() {
    /// let client = Client::builder().base_url("http://127.0.0.1:9/v1").build().unwrap();
    /// let err = client.send(&serde_json::json!({})).await.unwrap_err();
    /// assert!(matches!(err, ClientError::Connect { .. }));
    /// # }
    /// ```
    #[error("could not connect to {url}: {source}")]
    Connect {
        /// The URL requested.
        url: String,
        /// What failed.
        source: reqwest::Error,
    },
    /// The connection was not established within the connect timeout (after the retries),
    /// or the response headers did not arrive within the idle timeout.
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::Timeout { url: "https://api.openai.com/v1/chat/completions".into() };
    /// assert!(e.to_string().starts_with("timed out"));
    /// ```
    #[error("timed out waiting for {url}")]
    Timeout {
        /// The URL requested.
        url: String,
    },
    /// The request failed after it was sent (connection reset, invalid response, ...), or the
    /// HTTP client could not be built.
    ///
    /// ```
    /// # use choicewise_client::ClientError;
    /// fn is_transport(e: &ClientError) -> bool { matches!(e, ClientError::Request(_)) }
    /// # assert!(!is_transport(&ClientError::InvalidUrl(String::new())));
    /// ```
    #[error("the request failed: {0}")]
    Request(#[from] reqwest::Error),
    /// The base URL is not an absolute `http` or `https` URL.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// let err = Client::builder().base_url("ftp://example.com").build().unwrap_err();
    /// assert!(matches!(err, ClientError::InvalidUrl(_)));
    /// ```
    #[error("invalid base URL: {0}")]
    InvalidUrl(String),
    /// A header name or value given to the builder (or the API key) is not valid in HTTP.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// let err = Client::builder().header("bad name", "x").build().unwrap_err();
    /// assert!(matches!(err, ClientError::InvalidHeader(_)));
    /// ```
    #[error("invalid header: {0}")]
    InvalidHeader(String),
    /// The request body is not a JSON object.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// # #[tokio::main] async fn main() {
    /// let client = Client::builder().build().unwrap();
    /// let err = client.send(&serde_json::json!([1, 2])).await.unwrap_err();
    /// assert!(matches!(err, ClientError::InvalidRequest(_)));
    /// # }
    /// ```
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// A response that is not what the endpoint answers (e.g. `GET /models` that is not a
    /// JSON model list).
    ///
    /// ```
    /// use choicewise_client::ClientError;
    /// let e = ClientError::InvalidResponse("http://127.0.0.1:8080/v1/models: not a JSON model list".into());
    /// assert!(e.to_string().starts_with("invalid response: "));
    /// ```
    #[error("invalid response: {0}")]
    InvalidResponse(String),
}

/// Options of a [`Client`].
///
/// ```
/// use std::time::Duration;
/// use choicewise_client::Client;
///
/// let client = Client::builder()
///     .base_url("https://example-resource.openai.azure.com/openai/deployments/gpt-4o")
///     .azure("2024-10-21")
///     .api_key("...")
///     .header("x-ms-client-request-id", "7a0f...")
///     .connect_timeout(Duration::from_secs(5))
///     .idle_timeout(Duration::from_secs(30))
///     .max_retries(3)
///     .max_retry_wait(Duration::from_secs(10))
///     .build()
///     .unwrap();
/// assert_eq!(client.url(),
///     "https://example-resource.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21");
/// ```
#[derive(Clone)]
pub struct ClientBuilder {
    api: Api,
    base_url: String,
    api_key: Option<String>,
    azure: Option<String>,
    headers: Vec<(String, String)>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    max_retries: u32,
    max_retry_wait: Duration,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("azure", &self.azure)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("max_retry_wait", &self.max_retry_wait)
            .finish()
    }
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            api: Api::ChatCompletions,
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            azure: None,
            headers: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            max_retry_wait: DEFAULT_MAX_RETRY_WAIT,
        }
    }
}

impl ClientBuilder {
    /// Which API to speak (default [`Api::ChatCompletions`]): the endpoint under the base URL
    /// and how the key is sent.
    ///
    /// ```
    /// # use choicewise_client::{Api, Client};
    /// let client = Client::builder().api(Api::Responses).build().unwrap();
    /// assert_eq!(client.url(), "https://api.openai.com/v1/responses");
    /// ```
    pub fn api(mut self, api: Api) -> Self {
        self.api = api;
        self
    }

    /// The API's base URL; requests go to `{base_url}/chat/completions` (default
    /// [`DEFAULT_BASE_URL`]). In Azure mode, the deployment's URL,
    /// `https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT`.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().base_url("http://localhost:8000/v1/").build().unwrap();
    /// assert_eq!(client.url(), "http://localhost:8000/v1/chat/completions");
    /// ```
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// The API key: sent as `Authorization: Bearer KEY`, as `api-key: KEY` in Azure mode, or
    /// as `x-api-key: KEY` to the Anthropic API ([`Api::Messages`]) (default: none).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().api_key("sk-...").build().unwrap();
    /// assert!(!format!("{client:?}").contains("sk-"));
    /// ```
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Azure OpenAI mode: the key goes in an `api-key` header and every request carries
    /// `?api-version=API_VERSION`; [`base_url`](Self::base_url) is then the deployment's URL.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder()
    ///     .base_url("https://r.openai.azure.com/openai/deployments/gpt-4o")
    ///     .azure("2024-10-21")
    ///     .build()
    ///     .unwrap();
    /// assert!(client.url().ends_with("/gpt-4o/chat/completions?api-version=2024-10-21"));
    /// ```
    pub fn azure(mut self, api_version: impl Into<String>) -> Self {
        self.azure = Some(api_version.into());
        self
    }

    /// An extra header sent with every request (e.g. `OpenAI-Organization`); checked by
    /// [`build`](Self::build).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().header("OpenAI-Organization", "org-123").build();
    /// assert!(client.is_ok());
    /// ```
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How long establishing a connection (TCP and TLS) may take (default 10 s); a timeout
    /// counts as a failed connection and is retried.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_client::Client;
    /// let client = Client::builder().connect_timeout(Duration::from_secs(3)).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest silence allowed (default 60 s): waiting this long for the response headers
    /// fails the request with [`ClientError::Timeout`]; receiving no byte of the body for this
    /// long ends the stream with [`choicewise_core::ErrorDetail::IdleTimeout`] (keep-alive comments
    /// count as bytes).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_client::Client;
    /// let client = Client::builder().idle_timeout(Duration::from_secs(20)).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How many times a request is retried (default 2; see [the retry policy](crate#retries)).
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_retries(0).build();   // never retry
    /// assert!(client.is_ok());
    /// ```
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The longest wait before a retry (default 20 s): caps both `Retry-After` and the
    /// backoff.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_client::Client;
    /// let client = Client::builder().max_retry_wait(Duration::from_secs(5)).build();
    /// assert!(client.is_ok());
    /// ```
    pub fn max_retry_wait(mut self, wait: Duration) -> Self {
        self.max_retry_wait = wait;
        self
    }

    /// Checks the settings and builds the client.
    ///
    /// ```
    /// # use choicewise_client::{Client, ClientError};
    /// assert!(Client::builder().build().is_ok());
    /// assert!(matches!(Client::builder().base_url("").build(), Err(ClientError::InvalidUrl(_))));
    /// ```
    pub fn build(self) -> Result<Client, ClientError> {
        if self.azure.is_some() && self.api != Api::ChatCompletions {
            return Err(ClientError::InvalidUrl(format!(
                "{:?}: Azure mode serves Chat Completions only, not {:?}",
                self.base_url, self.api
            )));
        }
        let url = endpoint(&self.base_url, self.azure.as_deref(), self.api.segments())?;
        let models_url = endpoint(&self.base_url, self.azure.as_deref(), &["models"])?;
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ClientError::InvalidHeader(format!("name {name:?}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| ClientError::InvalidHeader(format!("value of {name}")))?;
            headers.append(name, value);
        }
        if self.api == Api::Messages && !headers.contains_key("anthropic-version") {
            headers.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
        }
        if let Some(key) = &self.api_key {
            let (name, value) = match (self.azure.as_ref(), self.api) {
                (Some(_), _) => (HeaderName::from_static("api-key"), key.clone()),
                (None, Api::Messages) => (HeaderName::from_static("x-api-key"), key.clone()),
                (None, _) => (AUTHORIZATION, format!("Bearer {key}")),
            };
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| ClientError::InvalidHeader("the API key".to_string()))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("choicewise-client/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                url,
                models_url,
                headers,
                azure: self.azure,
                has_key: self.api_key.is_some(),
                idle_timeout: self.idle_timeout,
                max_retries: self.max_retries,
                max_retry_wait: self.max_retry_wait,
            }),
        })
    }

    /// A builder set from the environment: `OPENAI_BASE_URL` (if set and not empty) and
    /// `OPENAI_API_KEY` (if set and not empty).
    ///
    /// ```no_run
    /// # use choicewise_client::ClientBuilder;
    /// let client = ClientBuilder::from_env().build().unwrap();
    /// ```
    pub fn from_env() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder = ClientBuilder::default();
        if let Some(url) = var("OPENAI_BASE_URL") {
            builder = builder.base_url(url.trim());
        }
        if let Some(key) = var("OPENAI_API_KEY") {
            builder = builder.api_key(key.trim());
        }
        builder
    }
}

/// `{base}/SEGMENTS` (`chat/completions`, `models`), with `?api-version=` in Azure mode.
fn endpoint(base: &str, azure: Option<&str>, segments: &[&str]) -> Result<Url, ClientError> {
    let invalid = |why: &str| ClientError::InvalidUrl(format!("{base:?}: {why}"));
    let mut url = Url::parse(base.trim()).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("not http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    url.path_segments_mut()
        .map_err(|()| invalid("not a base URL"))?
        .pop_if_empty()
        .extend(segments);
    if let Some(version) = azure {
        url.query_pairs_mut().append_pair("api-version", version);
    }
    Ok(url)
}

struct Inner {
    http: reqwest::Client,
    url: Url,
    /// `{base}/models`.
    models_url: Url,
    /// Accept, the key, the extra headers.
    headers: HeaderMap,
    azure: Option<String>,
    has_key: bool,
    idle_timeout: Duration,
    max_retries: u32,
    max_retry_wait: Duration,
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
            .field("url", &i.url.as_str())
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

    /// The idle timeout (see [`ClientBuilder::idle_timeout`]).
    pub(crate) fn idle_timeout(&self) -> Duration {
        self.inner.idle_timeout
    }

    /// The URL requests are posted to.
    ///
    /// ```
    /// # use choicewise_client::Client;
    /// let client = Client::builder().base_url("http://127.0.0.1:8000/v1").build().unwrap();
    /// assert_eq!(client.url(), "http://127.0.0.1:8000/v1/chat/completions");
    /// ```
    pub fn url(&self) -> &str {
        self.inner.url.as_str()
    }

    /// POSTs the request to `{base_url}/chat/completions` with `"stream": true` forced into
    /// it, retrying as described in [the retry policy](crate#retries). Returns once a `2xx`
    /// status and the headers arrived; the body is not read yet (pass the response to
    /// [`completions`]).
    ///
    /// ```
    /// use choicewise_client::{Client, completions};
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let request = serde_json::json!({"model": "gpt-4o-mini", "n": 3, "messages": []});
    /// let response = client.send(&request).await?;
    /// assert_eq!(response.status(), 200);
    /// let request_id = response.headers().get("x-request-id").cloned();
    /// let completions = completions(response, Some(request), None);
    /// assert_eq!(completions.collect().await?.choices.len(), 3);
    /// # assert!(request_id.is_some());
    /// # assert_eq!(server.requests()[0].json.as_ref().unwrap()["stream"], true);
    /// # Ok(()) }
    /// ```
    pub async fn send(&self, request: &Value) -> Result<reqwest::Response, ClientError> {
        let Some(object) = request.as_object() else {
            return Err(ClientError::InvalidRequest(
                "the body must be a JSON object".to_string(),
            ));
        };
        let mut body = object.clone();
        body.insert("stream".to_string(), Value::Bool(true));
        let body = Value::Object(body);
        let inner = &self.inner;
        let url_text = || inner.url.to_string();
        let mut retry = 0;
        loop {
            let sent = inner
                .http
                .post(inner.url.clone())
                .headers(inner.headers.clone())
                .json(&body)
                .send();
            let sent = match tokio::time::timeout(inner.idle_timeout, sent).await {
                Ok(sent) => sent,
                Err(_) => return Err(ClientError::Timeout { url: url_text() }),
            };
            let wait = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status();
                    let retryable = status == StatusCode::TOO_MANY_REQUESTS
                        || status == StatusCode::SERVICE_UNAVAILABLE;
                    if !retryable || retry >= inner.max_retries {
                        return Err(status_error(response, inner.idle_timeout).await);
                    }
                    // Decided on the status line and headers alone: the body is never read.
                    retry_after(response.headers(), SystemTime::now())
                        .unwrap_or_else(|| backoff(retry))
                }
                Err(e) if e.is_connect() => {
                    if retry >= inner.max_retries {
                        return Err(if e.is_timeout() {
                            ClientError::Timeout { url: url_text() }
                        } else {
                            ClientError::Connect {
                                url: url_text(),
                                source: e,
                            }
                        });
                    }
                    backoff(retry)
                }
                Err(e) => return Err(ClientError::Request(e)),
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
        let inner = &self.inner;
        let url_text = || inner.models_url.to_string();
        let sent = inner
            .http
            .get(inner.models_url.clone())
            .headers(inner.headers.clone())
            .header(ACCEPT, "application/json")
            .send();
        let response = match tokio::time::timeout(inner.idle_timeout, sent).await {
            Err(_) => return Err(ClientError::Timeout { url: url_text() }),
            Ok(Err(e)) if e.is_connect() => {
                return Err(ClientError::Connect {
                    url: url_text(),
                    source: e,
                });
            }
            Ok(Err(e)) => return Err(ClientError::Request(e)),
            Ok(Ok(r)) if !r.status().is_success() => {
                return Err(status_error(r, inner.idle_timeout).await);
            }
            Ok(Ok(r)) => r,
        };
        let body = match tokio::time::timeout(inner.idle_timeout, response.bytes()).await {
            Err(_) => return Err(ClientError::Timeout { url: url_text() }),
            Ok(body) => body?,
        };
        let list: Value = serde_json::from_slice(&body).map_err(|e| {
            ClientError::InvalidResponse(format!("{}: not a JSON model list: {e}", url_text()))
        })?;
        Ok(model_ids(&list))
    }

    /// [`send`](Self::send), then [`completions`] with this client's idle timeout and the
    /// request (so that a usage estimate counts the prompt): the usual entry point.
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
        let response = self.send(&request).await?;
        Ok(completions(
            response,
            Some(request),
            Some(self.inner.idle_timeout),
        ))
    }
}

/// A streamed response's body into per-choice streams. `request` (optional) lets usage
/// estimates count the prompt; `idle_timeout` ends the stream with
/// [`choicewise_core::ErrorDetail::IdleTimeout`] when no byte arrives for that long.
///
/// Dropping the returned [`Completions`] and every handle taken from it drops the response,
/// which closes the connection.
///
/// # Panics
///
/// Outside a Tokio runtime, like [`Completions::from_sse`].
///
/// ```
/// use std::time::Duration;
/// use choicewise_client::completions;
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
/// # let url = format!("{}/chat/completions", server.base_url());
/// // Any reqwest response with an SSE body, e.g. from your own reqwest client:
/// let response = reqwest::Client::new()
///     .post(url)
///     .json(&serde_json::json!({"model": "gpt-4o-mini", "n": 3, "stream": true, "messages": []}))
///     .send()
///     .await?
///     .error_for_status()?;
/// let completions = completions(response, None, Some(Duration::from_secs(30)));
/// assert_eq!(completions.collect().await?.choices.len(), 3);
/// # Ok(()) }
/// ```
pub fn completions(
    response: reqwest::Response,
    request: Option<Value>,
    idle_timeout: Option<Duration>,
) -> Completions {
    let mut builder = Completions::builder();
    if let Some(request) = request {
        builder = builder.request(request);
    }
    if let Some(idle) = idle_timeout {
        builder = builder.idle_timeout(idle);
    }
    builder.from_sse(response.bytes_stream())
}

/// The wait before retry number `retry + 1`: 0.5 s, 1 s, 2 s, ...
fn backoff(retry: u32) -> Duration {
    FIRST_BACKOFF.saturating_mul(1u32 << retry.min(20))
}

/// The wait a response asks for: `retry-after-ms` (OpenAI), else `Retry-After` in seconds or
/// as an HTTP date (a date in the past is no wait).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    /// Longer waits are capped anyway; this only keeps the conversion in range.
    const FAR: f64 = 86_400.0;
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let seconds = |s: f64| (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(FAR)));
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Some(wait) = seconds(ms / 1000.0) {
            return Some(wait);
        }
    }
    let value = text(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A non-2xx response as [`ClientError::Status`], with its body (read within `timeout`, at
/// most [`MAX_ERROR_BODY`] bytes).
async fn status_error(response: reqwest::Response, timeout: Duration) -> ClientError {
    let status = response.status();
    let mut bytes = Vec::new();
    let mut stream = response.bytes_stream();
    let read = async {
        while let Some(Ok(chunk)) = stream.next().await {
            bytes.extend_from_slice(&chunk);
            if bytes.len() >= MAX_ERROR_BODY {
                bytes.truncate(MAX_ERROR_BODY);
                break;
            }
        }
    };
    let _ = tokio::time::timeout(timeout, read).await;
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let message = body
        .as_ref()
        .and_then(json_message)
        .or_else(|| {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            (!text.is_empty()).then(|| text.chars().take(500).collect())
        })
        .unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("no reason given")
                .to_string()
        });
    ClientError::Status {
        status: status.as_u16(),
        message,
        body,
    }
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

/// The message of a provider's JSON error: `error.message`, `error` as text, `message`,
/// `detail`.
fn json_message(body: &Value) -> Option<String> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    body.pointer("/error/message")
        .and_then(text)
        .or_else(|| body.get("error").and_then(text))
        .or_else(|| body.get("message").and_then(text))
        .or_else(|| body.get("detail").and_then(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let wait = |pairs: &[(&str, &str)]| retry_after(&headers(pairs), now);
        assert_eq!(wait(&[("retry-after", "3")]), Some(Duration::from_secs(3)));
        assert_eq!(
            wait(&[("retry-after", "0.25")]),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            wait(&[("retry-after", "Wed, 21 Oct 2015 07:28:05 GMT")]),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            wait(&[("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT")]),
            Some(Duration::ZERO)
        );
        assert_eq!(
            wait(&[("retry-after-ms", "1500"), ("retry-after", "9")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(wait(&[("retry-after", "-1")]), None);
        assert_eq!(wait(&[("retry-after", "soon")]), None);
        assert_eq!(
            wait(&[("retry-after", "1e30")]),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(wait(&[]), None);
    }

    #[test]
    fn backoff_doubles() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert!(backoff(u32::MAX) > Duration::from_secs(3600));
    }

    #[test]
    fn endpoints() {
        let url = |base: &str, azure| {
            endpoint(base, azure, &["chat", "completions"]).map(|u| u.to_string())
        };
        assert_eq!(
            url("https://api.openai.com/v1", None).unwrap(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            url("http://h:1/v1/", None).unwrap(),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            url(
                "https://r.openai.azure.com/openai/deployments/d",
                Some("2024-10-21")
            )
            .unwrap(),
            "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
        );
        for bad in ["", "api.openai.com/v1", "ftp://x/v1", "mailto:a@b"] {
            assert!(
                matches!(url(bad, None), Err(ClientError::InvalidUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn each_api_has_its_endpoint_and_key_header() {
        let build = |api| {
            Client::builder()
                .api(api)
                .base_url("http://h:1/v1")
                .api_key("k")
                .build()
                .unwrap()
        };
        let chat = build(Api::ChatCompletions);
        assert_eq!(chat.url(), "http://h:1/v1/chat/completions");
        assert_eq!(chat.inner.headers["authorization"], "Bearer k");
        let responses = build(Api::Responses);
        assert_eq!(responses.url(), "http://h:1/v1/responses");
        assert_eq!(responses.inner.headers["authorization"], "Bearer k");
        let messages = build(Api::Messages);
        assert_eq!(messages.url(), "http://h:1/v1/messages");
        assert_eq!(messages.inner.headers["x-api-key"], "k");
        assert_eq!(
            messages.inner.headers["anthropic-version"],
            ANTHROPIC_VERSION
        );
        assert!(!messages.inner.headers.contains_key("authorization"));
        let pinned = Client::builder()
            .api(Api::Messages)
            .header("anthropic-version", "2024-01-01")
            .build()
            .unwrap();
        assert_eq!(pinned.inner.headers["anthropic-version"], "2024-01-01");
        let azure = Client::builder()
            .api(Api::Responses)
            .azure("2024-10-21")
            .build();
        assert!(matches!(azure, Err(ClientError::InvalidUrl(_))));
    }

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

    #[test]
    fn json_messages() {
        let m = |v: Value| json_message(&v);
        assert_eq!(
            m(serde_json::json!({"error": {"message": "a"}})).as_deref(),
            Some("a")
        );
        assert_eq!(m(serde_json::json!({"error": "b"})).as_deref(), Some("b"));
        assert_eq!(
            m(serde_json::json!({"object": "error", "message": "c"})).as_deref(),
            Some("c")
        );
        assert_eq!(m(serde_json::json!({"detail": "d"})).as_deref(), Some("d"));
        assert_eq!(m(serde_json::json!([1])), None);
    }
}
