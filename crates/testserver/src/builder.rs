//! [`TestServerBuilder`]: what a server serves and how, and starting it.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::http::accept_loop;
use crate::plan::{self, Shape};
use crate::{End, Failure, Reply, State, TestServer, fixture};

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
    refused: Option<(Vec<String>, Failure)>,
    api_key: Option<String>,
    port: u16,
    models: Vec<String>,
    delay: Duration,
    head_delay: Duration,
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
            refused: None,
            api_key: None,
            port: 0,
            models: vec!["gpt-4o-mini".to_string()],
            delay: Duration::ZERO,
            head_delay: Duration::ZERO,
            next: Vec::new(),
        }
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

    /// Waits a random time up to `max` before each write (default none). The waits add up
    /// to what was planned: the timer counts in milliseconds, so a wait shorter than that is
    /// carried over to the next writes rather than rounded up to a whole one, and each write
    /// still leaves on its own.
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

    /// Answers this error to every request whose JSON body has all of `fields` (none of
    /// them `null`), as a server refuses a combination of options (llama.cpp's server:
    /// `logprobs` with `tools`); other requests are served as usual.
    ///
    /// ```
    /// # use choicewise_testserver::{Failure, TestServer};
    /// let refusal = Failure::status(400).message("logprobs is not supported with tools + stream");
    /// let builder = TestServer::builder().refuse_fields(["logprobs", "tools"], refusal);
    /// # drop(builder);
    /// ```
    pub fn refuse_fields<I, S>(mut self, fields: I, failure: Failure) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.refused = Some((fields.into_iter().map(Into::into).collect(), failure));
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

    /// Waits this long after reading a request before the response's status line (default
    /// none): an upstream whose first byte comes late (queued, loading, a slow network), as
    /// opposed to [`delay`](Self::delay), which comes after the headers.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// # use choicewise_testserver::{TestServer, answer};
    /// # #[tokio::main] async fn main() -> std::io::Result<()> {
    /// let server = TestServer::builder()
    ///     .body(answer("late"))
    ///     .head_delay(Duration::from_millis(100))
    ///     .start()
    ///     .await?;
    /// let asked = Instant::now();
    /// let url = format!("{}/chat/completions", server.base_url());
    /// let response = reqwest::Client::new().post(&url).body("{}").send().await.unwrap();
    /// assert_eq!(response.status(), 200);
    /// assert!(asked.elapsed() >= Duration::from_millis(100));
    /// # Ok(()) }
    /// ```
    pub fn head_delay(mut self, delay: Duration) -> Self {
        self.head_delay = delay;
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
            refused: self.refused.clone(),
            delay: self.delay,
            head_delay: self.head_delay,
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
