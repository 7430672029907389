//! [`FanOut`]: several streamed requests sent at once, their choices read as one
//! [`Completions`].

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use choicewise_core::Completions;
use futures::Stream;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{Client, ClientError};

/// How many requests of a [`FanOut`] stream at once unless told otherwise.
///
/// ```
/// assert_eq!(choicewise_client::DEFAULT_CONCURRENCY, 16);
/// ```
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Sends several streamed requests concurrently and reads every choice of every response
/// as one [`Completions`]: the requests' choices are numbered one after the other (request
/// `k`'s choice `i` comes after the `n` choices of each request before it; see
/// [`choicewise_core::FanOut`] for the rule), so `choices()`, `collect()`, cancelling and
/// the combinators ([`first_finished`](Completions::first_finished),
/// [`vote`](Completions::vote), ...) work across requests as across the choices of one.
///
/// Each request is sent with [`Client::send`] (so it is retried before its first byte as
/// that describes) once one of the [`concurrency`](Self::concurrency) slots is free, and
/// keeps its slot until its stream ends. A request that fails (an error status, a refused
/// connection, a cut stream) fails only its own choices, with
/// [`ErrorDetail::UpstreamFailed`](choicewise_core::ErrorDetail::UpstreamFailed) naming it; when every
/// choice of a request is finished or cancelled, its connection is closed at once, so the
/// provider stops generating. Dropping the completion and every handle taken from it closes
/// every connection and abandons the requests not yet sent.
///
/// Usage: each response's reported usage where it sent one, else an estimate of its own
/// choices with its own prompt, summed (see [`Usage::upstreams`](choicewise_core::Usage)).
///
/// ```
/// use choicewise_client::{Client, FanOut};
/// use serde_json::json;
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
/// let client = Client::builder().base_url(server.base_url()).build()?;
/// let request = json!({"model": "gpt-4o-mini", "n": 3, "messages": [{"role": "user", "content": "Hi"}]});
/// // Two requests of three choices each: one completion of six choices.
/// let completions = FanOut::new().requests(&client, request, 2).start();
/// let whole = completions.collect().await?;
/// assert_eq!(whole.choices.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
/// # assert_eq!(server.request_count(), 2);
/// # Ok(()) }
/// ```
#[must_use = "a fan-out sends nothing until `start`"]
#[derive(Clone)]
pub struct FanOut {
    requests: Vec<(Client, Value)>,
    concurrency: usize,
}

impl fmt::Debug for FanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanOut")
            .field("requests", &self.requests.len())
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

impl Default for FanOut {
    fn default() -> Self {
        FanOut {
            requests: Vec::new(),
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

impl FanOut {
    /// No request yet, [`DEFAULT_CONCURRENCY`] at once.
    ///
    /// ```
    /// let fan_out = choicewise_client::FanOut::new();
    /// # drop(fan_out);
    /// ```
    pub fn new() -> Self {
        FanOut::default()
    }

    /// Adds one request, sent by `client` (its endpoint, key, retries and timeouts). Its
    /// `"n"` (1 when absent) is how many choices it owns.
    ///
    /// ```
    /// # use choicewise_client::{Client, FanOut};
    /// let local = Client::builder().base_url("http://127.0.0.1:8080/v1").build().unwrap();
    /// let openai = Client::builder().api_key("sk-...").build().unwrap();
    /// let ask = |model: &str| serde_json::json!({"model": model, "messages": [{"role": "user", "content": "2+2?"}]});
    /// let fan_out = FanOut::new().request(&local, ask("qwen3")).request(&openai, ask("gpt-4o-mini"));
    /// # drop(fan_out);
    /// ```
    pub fn request(mut self, client: &Client, request: Value) -> Self {
        self.requests.push((client.clone(), request));
        self
    }

    /// Adds `copies` copies of one request, each with the request's `n`: `copies × n`
    /// choices (best-of-n or self-consistency against a provider that ignores `n`).
    ///
    /// ```
    /// # use choicewise_client::{Client, FanOut};
    /// let client = Client::builder().base_url("http://127.0.0.1:8080/v1").build().unwrap();
    /// let fan_out = FanOut::new().requests(&client, serde_json::json!({"messages": []}), 5);
    /// # drop(fan_out);
    /// ```
    pub fn requests(mut self, client: &Client, request: Value, copies: usize) -> Self {
        for _ in 0..copies {
            self.requests.push((client.clone(), request.clone()));
        }
        self
    }

    /// How many requests stream at once (at least 1; default [`DEFAULT_CONCURRENCY`]); the
    /// others wait for a slot before they are sent.
    ///
    /// ```
    /// let fan_out = choicewise_client::FanOut::new().concurrency(4);
    /// # drop(fan_out);
    /// ```
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = limit.max(1);
        self
    }

    /// Sends the requests (as slots allow) and returns the completion at once; the choices
    /// appear as the responses stream. Must be called inside a Tokio runtime. With no
    /// request, the completion ends at once with no choices.
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// let completions = choicewise_client::FanOut::new().start();
    /// assert!(completions.collect().await.unwrap().choices.is_empty());
    /// # }
    /// ```
    pub fn start(self) -> Completions {
        let slots = Arc::new(Semaphore::new(self.concurrency));
        // One idle timeout for the completion: the longest of the clients'.
        let idle: Option<Duration> = self.requests.iter().map(|(c, _)| c.idle_timeout()).max();
        let mut builder = Completions::builder();
        if let Some(idle) = idle {
            builder = builder.idle_timeout(idle);
        }
        let mut fan_out = builder.fan_out();
        for (client, request) in self.requests {
            let slots = slots.clone();
            let body = request.clone();
            let open = async move {
                let permit = slots
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed");
                let response = client.send(&body).await?;
                Ok::<_, ClientError>(Held {
                    body: Box::pin(response.bytes_stream()),
                    _slot: permit,
                })
            };
            fan_out = fan_out.open(open).request(request);
        }
        fan_out.start()
    }
}

impl Client {
    /// [`FanOut`] of `copies` copies of `request`, started: `copies × n` choices as one
    /// completion.
    ///
    /// ```
    /// use choicewise_client::Client;
    /// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = choicewise_testserver::TestServer::builder().fixture("demo.sse").start().await?;
    /// let client = Client::builder().base_url(server.base_url()).build()?;
    /// let completions = client.fan_out(serde_json::json!({"model": "gpt-4o-mini", "n": 3, "messages": []}), 3);
    /// let selection = completions.first_finished().await;
    /// assert_eq!(selection.selected.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn fan_out(&self, request: Value, copies: usize) -> Completions {
        FanOut::new().requests(self, request, copies).start()
    }
}

/// A response body holding its request's concurrency slot until it is dropped.
struct Held<S> {
    body: Pin<Box<S>>,
    _slot: OwnedSemaphorePermit,
}

impl<S: Stream> Stream for Held<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.body.as_mut().poll_next(cx)
    }
}
