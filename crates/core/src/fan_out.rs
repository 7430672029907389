//! [`FanOut`]: one [`Completions`] whose choices come from several upstreams, one reader
//! actor each, all publishing into the same completion.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use futures::Stream;
use ractor::ActorRef;
use serde_json::Value;
use tokio::io::AsyncRead;

use crate::actor::reader::ReaderMsg;
use crate::completions::{Completions, spawn_reader};
use crate::config::Config;
use crate::feed::{BoxError, ByteStreamFeed, OpeningFeed, ParsedFeed, ReaderFeed};
use crate::shared::{CompletionShared, Indexing};
use crate::wire::ChatCompletionChunk;

type Start = Box<
    dyn FnOnce(&Arc<CompletionShared>, usize, Option<u32>) -> Option<ActorRef<ReaderMsg>> + Send,
>;

/// One upstream waiting to start.
struct Upstream {
    n: Option<u32>,
    request: Option<Arc<Value>>,
    start: Start,
}

/// Builds one [`Completions`] from several upstreams: any mix of SSE byte streams
/// ([`sse`](Self::sse)), `AsyncRead`s ([`reader`](Self::reader)) and parsed chunk streams
/// ([`chunks`](Self::chunks)). Each upstream gets its own reader actor; all publish into the
/// same completion. Made by [`Completions::fan_out`] or [`CompletionsBuilder::fan_out`](crate::CompletionsBuilder::fan_out)
/// (whose options apply to every upstream).
///
/// **Numbering.** Upstream `k`'s choice `i` gets an index of the completion, after the choices
/// of the upstreams before it:
///
/// - while every upstream before it (and it) declared its choice count with [`n`](Self::n),
///   upstream `k` owns the block `offset_k .. offset_k + n_k`, where `offset_k` is the sum of
///   the `n` of the upstreams before it, and its choice `i < n_k` is `offset_k + i` — fixed,
///   whatever arrives first;
/// - every other choice (from the first upstream without a declared `n` on, or an index
///   `>= n` that an upstream sent anyway) is numbered in the order it is first seen, after all
///   the blocks.
///
/// **Ending.** [`Completions::choices`] yields every upstream's choices as they appear and
/// ends when every upstream has ended; [`Completions::collect`] lists them by index. An
/// upstream that fails fails only its own unfinished choices, with
/// [`ErrorDetail::UpstreamFailed`](crate::ErrorDetail::UpstreamFailed) naming it; the others go on, and
/// [`Completions::outcome`] reports the first failed upstream. When no choice of an upstream
/// is wanted any more (see [`Choice::cancel`](crate::Choice::cancel)), that upstream alone is
/// dropped.
///
/// **Usage.** [`Completions::usage`] sums the upstreams' usage (each request's prompt counted
/// once): the reported figures where an upstream reported them, an estimate of its own choices
/// where it did not; [`Usage::upstreams`](crate::Usage::upstreams) lists each upstream's part,
/// and the sum is [`Estimated`](crate::UsageSource::Estimated) if any part was.
///
/// ```
/// use choicewise_core::Completions;
///
/// # #[tokio::main] async fn main() {
/// let a = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"A\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// let b = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"B\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// let completions = Completions::fan_out()
///     .reader(a.as_bytes()).n(1)
///     .reader(b.as_bytes()).n(1)
///     .start();
/// let completion = completions.collect().await.unwrap();
/// let texts: Vec<_> = completion.choices.iter().map(|c| c.message.content.clone().unwrap()).collect();
/// assert_eq!(texts, ["A", "B"]);
/// # }
/// ```
#[must_use = "a fan-out does nothing until `start`"]
pub struct FanOut {
    config: Config,
    upstreams: Vec<Upstream>,
}

impl fmt::Debug for FanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns: Vec<_> = self.upstreams.iter().map(|u| u.n).collect();
        f.debug_struct("FanOut").field("upstreams", &ns).finish()
    }
}

impl FanOut {
    pub(crate) fn new(config: Config) -> Self {
        FanOut {
            config,
            upstreams: Vec::new(),
        }
    }

    fn push(mut self, start: Start) -> Self {
        self.upstreams.push(Upstream {
            n: None,
            request: None,
            start,
        });
        self
    }

    /// Adds an upstream of SSE bytes from a stream of reads (an HTTP body, for instance).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let reads = futures::stream::iter([Ok::<_, std::io::Error>("data: [DONE]\n\n")]);
    /// let c = Completions::fan_out().sse(reads).start();
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn sse<S, B, E>(self, stream: S) -> Self
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send,
        E: Into<BoxError>,
    {
        let idle = self.config.idle_timeout;
        self.push(Box::new(move |shared, k, n| {
            spawn_reader(ByteStreamFeed::new(stream, idle), shared, k, n)
        }))
    }

    /// Adds an upstream of SSE bytes that is still to be opened: `open` resolves to the
    /// stream of reads (an HTTP request resolving to its body, for instance). It is polled by
    /// the upstream's reader, so requests start at [`start`](Self::start) and run
    /// concurrently; the idle timeout applies from the moment it resolves (waiting for a turn
    /// or retrying is not idleness). If it fails, the upstream fails with
    /// [`ErrorDetail::Open`](crate::ErrorDetail::Open), and when its `n` is declared its `n` choices
    /// appear, each failed with that error. Dropping the completion (or cancelling every
    /// choice) drops a pending `open` too.
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind};
    /// # #[tokio::main] async fn main() {
    /// let ok = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let reads = futures::stream::iter([Ok::<_, std::io::Error>(ok)]);
    /// type Reads = futures::stream::Empty<Result<&'static str, std::io::Error>>;
    /// let refused = async { Err::<Reads, _>("HTTP 500") };
    /// let c = Completions::fan_out()
    ///     .open(async move { Ok::<_, std::io::Error>(reads) }).n(1)
    ///     .open(refused).n(1)
    ///     .start();
    /// let partial = c.collect().await.unwrap_err().partial;
    /// assert_eq!(partial.choices[0].message.content.as_deref(), Some("hi"));
    /// let errors = c.choice_errors().await;
    /// assert_eq!(errors[0].0, 1); // choice 1, of the refused upstream, failed
    /// assert_eq!((errors[0].1.upstream(), errors[0].1.kind()), (Some(1), ErrorKind::Open));
    /// # }
    /// ```
    pub fn open<F, O, S, B, E>(self, open: F) -> Self
    where
        F: Future<Output = Result<S, O>> + Send + 'static,
        O: Into<BoxError>,
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send,
        E: Into<BoxError>,
    {
        let idle = self.config.idle_timeout;
        self.push(Box::new(move |shared, k, n| {
            spawn_reader(OpeningFeed::new(open, idle), shared, k, n)
        }))
    }

    /// Adds an upstream of SSE bytes from an `AsyncRead` (a file, a socket).
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::fan_out().reader(&b"data: [DONE]\n\n"[..]).start();
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn reader<R: AsyncRead + Send + 'static>(self, reader: R) -> Self {
        let idle = self.config.idle_timeout;
        self.push(Box::new(move |shared, k, n| {
            spawn_reader(ReaderFeed::new(reader, idle), shared, k, n)
        }))
    }

    /// Adds an upstream of chunks that are already parsed; its end is its completion's end.
    ///
    /// ```
    /// # use choicewise_core::{Completions, wire::ChatCompletionChunk};
    /// # #[tokio::main] async fn main() {
    /// let chunk: ChatCompletionChunk = serde_json::from_str(
    ///     r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#).unwrap();
    /// let chunks = futures::stream::iter([Ok::<_, std::io::Error>(chunk.into_owned())]);
    /// let c = Completions::fan_out().chunks(chunks).start();
    /// assert_eq!(c.collect().await.unwrap().choices[0].message.content.as_deref(), Some("Hi"));
    /// # }
    /// ```
    pub fn chunks<S, E>(self, chunks: S) -> Self
    where
        S: Stream<Item = Result<ChatCompletionChunk<'static>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let idle = self.config.idle_timeout;
        self.push(Box::new(move |shared, k, n| {
            spawn_reader(ParsedFeed::new(chunks, idle), shared, k, n)
        }))
    }

    /// Adds an upstream of events that are already parsed, as JSON values: a Responses or
    /// Anthropic Messages stream (one choice), or Chat Completions chunks; see
    /// [`CompletionsBuilder::from_events`](crate::CompletionsBuilder::from_events). Each
    /// upstream detects its own dialect, so one completion can mix them.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # use serde_json::json;
    /// # #[tokio::main] async fn main() {
    /// let anthropic = [
    ///     json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-sonnet-4-5"}}),
    ///     json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "4"}}),
    ///     json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
    ///     json!({"type": "message_stop"}),
    /// ];
    /// let chat = "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"content\":\"4\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let c = Completions::fan_out()
    ///     .events(futures::stream::iter(anthropic.map(Ok::<_, std::io::Error>)))
    ///     .reader(chat.as_bytes())
    ///     .start();
    /// let completion = c.collect().await.unwrap();
    /// let answers: Vec<_> = completion.choices.iter().map(|c| c.message.content.as_deref()).collect();
    /// assert_eq!(answers, [Some("4"), Some("4")]);
    /// # }
    /// ```
    pub fn events<S, E>(self, events: S) -> Self
    where
        S: Stream<Item = Result<serde_json::Value, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let idle = self.config.idle_timeout;
        self.push(Box::new(move |shared, k, n| {
            spawn_reader(ParsedFeed::new(events, idle), shared, k, n)
        }))
    }

    /// Declares how many choices the upstream added last will have (its request's `n`): it
    /// then owns a fixed block of indexes (see the numbering rule above), and cancelling
    /// choices drops it only once all `n` have appeared. Without an upstream, does nothing.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let two = "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// let one = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// let c = Completions::fan_out().reader(two.as_bytes()).n(2).reader(one.as_bytes()).n(1).start();
    /// let indexes: Vec<_> = c.collect().await.unwrap().choices.iter().map(|c| c.index).collect();
    /// assert_eq!(indexes, [1, 2]); // upstream 0 owns 0..2, upstream 1 owns 2..3
    /// # }
    /// ```
    pub fn n(mut self, n: u32) -> Self {
        if let Some(last) = self.upstreams.last_mut() {
            last.n = Some(n);
        }
        self
    }

    /// Declares the request the upstream added last answers: its prompt is counted in that
    /// upstream's usage estimate (instead of the builder's
    /// [`request`](crate::CompletionsBuilder::request)), and, unless [`n`](Self::n) says
    /// otherwise, its `"n"` (1 when absent, as for providers without `n`) is the upstream's
    /// choice count. Without an upstream, does nothing.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let one = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    /// let request = serde_json::json!({"model": "gpt-4o-mini", "n": 2, "messages": []});
    /// let c = Completions::fan_out()
    ///     .reader(one.as_bytes()).request(request)
    ///     .reader(one.as_bytes()).request(serde_json::json!({"messages": []}))
    ///     .start();
    /// let indexes: Vec<_> = c.collect().await.unwrap().choices.iter().map(|c| c.index).collect();
    /// assert_eq!(indexes, [0, 2]); // upstream 0 owns 0..2, upstream 1 owns 2..3
    /// # }
    /// ```
    pub fn request(mut self, request: Value) -> Self {
        if let Some(last) = self.upstreams.last_mut() {
            if last.n.is_none() {
                let n = request.get("n").and_then(Value::as_u64).unwrap_or(1);
                last.n = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            last.request = Some(Arc::new(request));
        }
        self
    }

    /// Starts a reader actor per upstream and returns the completion. Like the
    /// [`Completions`] constructors, must be called inside a Tokio runtime. With no upstream,
    /// the completion ends at once with no choices.
    ///
    /// ```
    /// # use choicewise_core::Completions;
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::fan_out().start();
    /// assert!(c.collect().await.unwrap().choices.is_empty());
    /// # }
    /// ```
    pub fn start(mut self) -> Completions {
        let mut indexing = Vec::with_capacity(self.upstreams.len());
        let mut offset = Some(0u32);
        for u in &self.upstreams {
            match (offset, u.n) {
                (Some(o), Some(n)) => {
                    indexing.push(Indexing::Block { offset: o, n });
                    offset = o.checked_add(n);
                }
                _ => {
                    indexing.push(Indexing::FirstSeen);
                    offset = None;
                }
            }
        }
        let shared = Arc::new(CompletionShared::with_upstreams(
            self.config,
            indexing,
            true,
        ));
        {
            let mut state = shared.lock();
            for (u, state) in self.upstreams.iter_mut().zip(&mut state.upstreams) {
                state.request = u.request.take();
            }
        }
        if self.upstreams.is_empty() {
            let mut state = shared.lock();
            state.end = Some(Ok(()));
        }
        let mut readers = Vec::with_capacity(self.upstreams.len());
        for (k, u) in self.upstreams.into_iter().enumerate() {
            readers.extend((u.start)(&shared, k, u.n));
        }
        Completions::with_readers(shared, readers)
    }
}
