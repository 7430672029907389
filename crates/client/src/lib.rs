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

use choicewise_core::{Completions, CompletionsBuilder};
use reqwest::header::{ACCEPT, HeaderMap};
use reqwest::{StatusCode, Url};
use serde_json::Value;

mod builder;
pub use builder::{
    ANTHROPIC_VERSION, Api, ClientBuilder, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_RETRIES, DEFAULT_MAX_RETRY_WAIT,
};

mod error;
pub use error::ClientError;
use error::status_error;

mod retry;
use retry::{backoff, retry_after};

mod fan_out;
pub use fan_out::{DEFAULT_CONCURRENCY, FanOut};

#[cfg(feature = "async-openai")]
mod async_openai_compat;
#[cfg(feature = "async-openai")]
pub use async_openai_compat::from_async_openai;

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
    /// use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let request = serde_json::json!({"model": "gpt-4o-mini", "n": 3, "messages": []});
    /// let response = client.send(&request).await?;
    /// assert_eq!(response.status(), 200);
    /// let request_id = response.headers().get("x-request-id").cloned();
    /// let completions = completions(response, Completions::builder().request(request));
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
        let options = Completions::builder()
            .request(request)
            .idle_timeout(self.inner.idle_timeout);
        Ok(completions(response, options))
    }
}

/// A streamed response's body into per-choice streams, read with `options` (a
/// [`Completions::builder`]: the request, so that usage estimates count the prompt; an idle
/// timeout, ending the stream with [`choicewise_core::ErrorDetail::IdleTimeout`] when no byte
/// arrives for that long; limits; the dialect).
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
/// use choicewise_core::Completions;
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
/// let options = Completions::builder().idle_timeout(Duration::from_secs(30));
/// let completions = completions(response, options);
/// assert_eq!(completions.collect().await?.choices.len(), 3);
/// # Ok(()) }
/// ```
pub fn completions(response: reqwest::Response, options: CompletionsBuilder) -> Completions {
    options.from_sse(response.bytes_stream())
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
