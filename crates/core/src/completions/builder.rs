//! The options of a completion stream, and the calls that start one.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tokio::io::AsyncRead;

use super::Completions;
use crate::config::Config;
use crate::feed::{BoxError, ByteStreamFeed, ParsedFeed, ReaderFeed};
use crate::wire::ChatCompletionChunk;

/// Options of a [`Completions`] stream.
///
/// ```
/// use std::time::Duration;
/// use choicewise_core::Completions;
///
/// # #[tokio::main] async fn main() {
/// let completions = Completions::builder()
///     .max_choices(16)
///     .max_event_size(1 << 20)
///     .idle_timeout(Duration::from_secs(30))
///     .from_reader(&b"data: [DONE]\n\n"[..]);
/// assert!(completions.collect().await.unwrap().choices.is_empty());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct CompletionsBuilder {
    config: Config,
}

impl CompletionsBuilder {
    /// The largest SSE event accepted, in bytes (default
    /// [`DEFAULT_MAX_EVENT_SIZE`](crate::DEFAULT_MAX_EVENT_SIZE)); a larger one ends the stream
    /// with [`ErrorDetail::Sse`](crate::ErrorDetail::Sse) instead of growing memory.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let big = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n", "x".repeat(100));
    /// let c = Completions::builder().max_event_size(64).from_reader(std::io::Cursor::new(big));
    /// assert!(c.collect().await.is_err());
    /// # }
    /// ```
    pub fn max_event_size(mut self, bytes: usize) -> Self {
        self.config.max_event_size = bytes;
        self
    }

    /// The stream's wire dialect: Chat Completions chunks, OpenAI Responses events or
    /// Anthropic Messages events. By default it is recognised from the stream's first event
    /// (its `type`, or its `event:` line); a Responses or Anthropic stream is one choice.
    ///
    /// ```
    /// use choicewise_core::{Completions, Dialect};
    /// # #[tokio::main] async fn main() {
    /// let sse = concat!(
    ///     "event: message_start\n",
    ///     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"role\":\"assistant\",\"usage\":{\"input_tokens\":5}}}\n\n",
    ///     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    ///     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    ///     "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    ///     "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n",
    ///     "data: {\"type\":\"message_stop\"}\n\n",
    /// );
    /// let c = Completions::builder().dialect(Dialect::Anthropic).from_reader(sse.as_bytes());
    /// let whole = c.collect().await.unwrap();
    /// assert_eq!(whole.id, "msg_1");
    /// assert_eq!(whole.choices[0].message.content.as_deref(), Some("Hi"));
    /// assert_eq!(whole.choices[0].finish_reason.as_deref(), Some("stop"));
    /// assert_eq!(whole.usage.unwrap().total_tokens, 6);
    /// # }
    /// ```
    pub fn dialect(mut self, dialect: crate::Dialect) -> Self {
        self.config.dialect = dialect;
        self
    }

    /// Strict WHATWG framing of the SSE bytes (default `false`: the tolerant mode). The
    /// tolerant mode also takes events written one `data:` line each without the blank line
    /// between them, applying each line that is a complete JSON object (or `[DONE]`) as an
    /// event, with a [`WarningKind::EventsWithoutBlankLines`](crate::WarningKind); the strict
    /// mode joins such lines into one event, as the standard says (see `choicewise_sse::Framer::strict`).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n";
    /// let tolerant = Completions::from_reader(sse.as_bytes()).collect().await.unwrap();
    /// assert_eq!(tolerant.choices[0].finish_reason.as_deref(), Some("stop"));
    /// let strict = Completions::builder().strict_sse(true).from_reader(sse.as_bytes());
    /// assert!(strict.collect().await.is_err()); // one event, never dispatched: truncated
    /// # }
    /// ```
    pub fn strict_sse(mut self, strict: bool) -> Self {
        self.config.strict_sse = strict;
        self
    }

    /// The most distinct choices accepted (default
    /// [`DEFAULT_MAX_CHOICES`](crate::DEFAULT_MAX_CHOICES)); one more ends the stream with
    /// [`ErrorDetail::TooManyChoices`](crate::ErrorDetail::TooManyChoices).
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{}},{\"index\":1,\"delta\":{}}]}\n\n";
    /// let c = Completions::builder().max_choices(1).from_reader(sse.as_bytes());
    /// let err = c.collect().await.unwrap_err();
    /// assert_eq!(err.error.kind(), ErrorKind::Limit);
    /// # }
    /// ```
    pub fn max_choices(mut self, choices: usize) -> Self {
        self.config.max_choices = choices;
        self
    }

    /// The most tool calls accepted in one choice (default
    /// [`DEFAULT_MAX_TOOL_CALLS`](crate::DEFAULT_MAX_TOOL_CALLS)); one more ends that choice
    /// with [`ErrorDetail::InvalidToolCall`](crate::ErrorDetail::InvalidToolCall).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().max_tool_calls(4).from_reader(&b"data: [DONE]\n\n"[..]);
    /// assert!(c.collect().await.is_ok());
    /// # }
    /// ```
    pub fn max_tool_calls(mut self, calls: usize) -> Self {
        self.config.max_tool_calls = calls;
        self
    }

    /// Ends the stream with [`ErrorDetail::IdleTimeout`](crate::ErrorDetail::IdleTimeout) when the upstream sends nothing for this
    /// long (default: wait forever).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::{Completions, ErrorKind};
    /// # #[tokio::main] async fn main() {
    /// let stalled = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
    /// let c = Completions::builder().idle_timeout(Duration::from_millis(10)).from_sse(stalled);
    /// assert!(matches!(c.outcome().await, Err(e) if e.kind() == ErrorKind::Timeout));
    /// # }
    /// ```
    pub fn idle_timeout(mut self, after: Duration) -> Self {
        self.config.idle_timeout = Some(after);
        self
    }

    /// Retires the choice actors when the upstream has sent nothing for this long (default:
    /// [`DEFAULT_HIBERNATE_AFTER`](crate::DEFAULT_HIBERNATE_AFTER), 250 ms). A choice keeps
    /// its state and its sub-streams while its actor is retired; the next update for it spawns
    /// a new actor, once the old one has applied everything it had queued. An idle completion
    /// then holds only its reader actor. `Duration::MAX` keeps the actors for the whole
    /// stream.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::Completions;
    /// # use futures::{StreamExt, stream};
    /// # #[tokio::main] async fn main() {
    /// let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    /// let rest = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\
    ///             \"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// // The upstream goes quiet for 50 ms after the first chunk: the actor retires.
    /// let reads = stream::iter([Ok::<_, std::io::Error>(first)]).chain(stream::once(async move {
    ///     tokio::time::sleep(Duration::from_millis(50)).await;
    ///     Ok(rest)
    /// }));
    /// let c = Completions::builder().hibernate_after(Duration::from_millis(5)).from_sse(reads);
    /// let completion = c.collect().await.unwrap();
    /// assert_eq!(completion.choices[0].message.content.as_deref(), Some("Hello"));
    /// # }
    /// ```
    pub fn hibernate_after(mut self, quiet: Duration) -> Self {
        self.config.hibernate_after = Some(quiet);
        self
    }

    /// The model, to choose the encoding of usage estimates (default: the request's
    /// `model`, else the model named by the stream).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let usage = Completions::builder().model("gpt-4").from_reader(sse.as_bytes()).usage().await;
    /// assert_eq!(usage.estimate.unwrap().encoding, "cl100k_base");
    /// # }
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = Some(model.into());
        self
    }

    /// The request body, so that a usage estimate counts the prompt too (messages, names,
    /// function and tool definitions; see `docs/usage.md`).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let request = serde_json::json!({"model": "gpt-4o-mini",
    ///     "messages": [{"role": "user", "content": "Say hello"}]});
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello!\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let usage = Completions::builder().request(request).from_reader(sse.as_bytes()).usage().await;
    /// assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (9, 2, 11));
    /// # }
    /// ```
    pub fn request(mut self, request: serde_json::Value) -> Self {
        self.config.request = Some(Arc::new(request));
        self
    }

    /// Whether [`Completions::collect`] estimates the usage when the stream carried none
    /// (default `true`). Estimating loads a BPE table once per process (some 100 ms) and
    /// encodes every choice's output; [`Completions::usage`] estimates regardless.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::builder().estimate_usage(false).from_reader(sse.as_bytes());
    /// assert!(c.collect().await.unwrap().usage.is_none());
    /// # }
    /// ```
    pub fn estimate_usage(mut self, estimate: bool) -> Self {
        self.config.estimate_usage = estimate;
        self
    }

    /// Reads SSE bytes from a stream of reads (for example an HTTP body's byte stream).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let reads = futures::stream::iter([Ok::<_, std::io::Error>("data: [DO"), Ok("NE]\n\n")]);
    /// let c = Completions::builder().from_sse(reads);
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn from_sse<S, B, E>(self, stream: S) -> Completions
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send,
        E: Into<BoxError>,
    {
        let feed = ByteStreamFeed::new(stream, self.config.idle_timeout);
        Completions::start(self.config, feed)
    }

    /// One completion from several upstreams, with these options for each (see [`FanOut`](crate::FanOut)).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().max_choices(4).fan_out()
    ///     .reader(&b"data: [DONE]\n\n"[..]).reader(&b"data: [DONE]\n\n"[..])
    ///     .start();
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn fan_out(self) -> crate::FanOut {
        crate::FanOut::new(self.config)
    }

    /// The same demultiplexer without a runtime, with these limits: a [`Demux`](crate::Demux) that the
    /// caller feeds bytes or chunks (the usage options do not apply: it counts no tokens).
    ///
    /// ```
    /// use choicewise_core::{Completions, ErrorKind};
    /// let mut demux = Completions::builder().max_choices(1).demux();
    /// let sse = b"data: {\"choices\":[{\"index\":0},{\"index\":1}]}\n\n";
    /// assert!(matches!(demux.feed(sse), Err(e) if e.kind() == ErrorKind::Limit));
    /// ```
    pub fn demux(self) -> crate::Demux {
        crate::Demux::with_config(self.config)
    }

    /// Reads SSE bytes from an `AsyncRead` (a file, a socket, a child's stdout).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::builder().from_reader(&b"data: [DONE]\n\n"[..]);
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn from_reader<R: AsyncRead + Send + 'static>(self, reader: R) -> Completions {
        let feed = ReaderFeed::new(reader, self.config.idle_timeout);
        Completions::start(self.config, feed)
    }

    /// Takes chunks that are already parsed. The end of the stream is the end of the
    /// completion (there is no `[DONE]` at this level).
    ///
    /// ```
    /// # use choicewise_core::{Completions, wire::ChatCompletionChunk};
    /// # #[tokio::main] async fn main() {
    /// let chunk: ChatCompletionChunk = serde_json::from_str(
    ///     r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#).unwrap();
    /// let chunks = futures::stream::iter([Ok::<_, std::io::Error>(chunk.into_owned())]);
    /// let c = Completions::builder().from_chunks(chunks);
    /// assert_eq!(c.collect().await.unwrap().choices[0].message.content.as_deref(), Some("Hi"));
    /// # }
    /// ```
    pub fn from_chunks<S, E>(self, chunks: S) -> Completions
    where
        S: Stream<Item = Result<ChatCompletionChunk<'static>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let feed = ParsedFeed::new(chunks, self.config.idle_timeout);
        Completions::start(self.config, feed)
    }

    /// Takes events that are already parsed, as JSON values: events of the OpenAI Responses
    /// API or the Anthropic Messages API (one choice; their `type` says which, unless
    /// [`dialect`](Self::dialect) forces one), or Chat Completions chunks. Use it when
    /// another client already decoded the stream. An event of another dialect than the
    /// stream's first is an [`ErrorDetail::WrongDialect`](crate::ErrorDetail::WrongDialect); positions
    /// in errors count events (the first is line 1). A typed dialect's stream that ends
    /// before its final event (`response.completed`, `message_delta` with a stop reason)
    /// ends [`Truncated`](crate::ErrorDetail::Truncated).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use serde_json::json;
    /// # #[tokio::main] async fn main() {
    /// let events = [
    ///     json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-sonnet-4-5",
    ///            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    ///     json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ///     json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
    ///     json!({"type": "content_block_stop", "index": 0}),
    ///     json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
    ///     json!({"type": "message_stop"}),
    /// ];
    /// let c = Completions::builder().from_events(futures::stream::iter(events.map(Ok::<_, std::io::Error>)));
    /// let completion = c.collect().await.unwrap();
    /// assert_eq!(completion.id, "msg_1");
    /// assert_eq!(completion.choices[0].message.content.as_deref(), Some("Hi"));
    /// assert_eq!(completion.choices[0].finish_reason.as_deref(), Some("stop"));
    /// assert_eq!(completion.usage.unwrap().total_tokens, 14);
    /// # }
    /// ```
    pub fn from_events<S, E>(self, events: S) -> Completions
    where
        S: Stream<Item = Result<serde_json::Value, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let feed = ParsedFeed::new(events, self.config.idle_timeout);
        Completions::start(self.config, feed)
    }
}
