//! [`Source`]: where a completion's stream comes from. One type for every input (SSE bytes
//! from a stream of reads or an `AsyncRead`, values already parsed, or a source still to be
//! opened), accepted alike by [`CompletionsBuilder::start`](crate::CompletionsBuilder::start)
//! and [`CompletionsBuilder::fan_out`](crate::CompletionsBuilder::fan_out).
//!
//! Inside, a source is a [`Feed`]: polled by its reader actor, it hands each read to the
//! reader's splitter.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use choicewise_proto::driver::{Splitter, Step};
use choicewise_proto::{Error, ErrorDetail, Parsed};
use futures::{Stream, TryStreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// An error of an input: any error type.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One input stream of a completion.
///
/// - [`Source::sse`]: SSE bytes from a stream of reads (an HTTP body);
/// - [`Source::reader`]: SSE bytes from an `AsyncRead` (a file, a socket, stdin);
/// - [`Source::parsed`]: values already parsed, one per event: Chat Completions chunks, or
///   JSON events of any dialect;
/// - [`Source::open`]: a source still to be opened (an HTTP request resolving to its body),
///   opened when its completion starts reading it.
///
/// [`n`](Self::n) declares how many choices it will have (numbering a fan-out's choices and
/// accounting for choices that never appear), and [`request`](Self::request) the request it
/// answers (to count the prompt in estimated usage; its `"n"` declares the choice count
/// unless `n` is given).
///
/// ```
/// use choicewise_core::{Completions, Source};
/// # #[tokio::main] async fn main() {
/// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
/// let completions = Completions::new(Source::reader(sse.as_bytes()));
/// assert_eq!(completions.collect().await.unwrap().choices[0].message.content.as_deref(), Some("Hi"));
/// # }
/// ```
#[must_use = "a source does nothing until a completion reads it"]
pub struct Source {
    pub(crate) input: Input,
    pub(crate) n: Option<u32>,
    pub(crate) request: Option<Arc<Value>>,
    pub(crate) idle: Option<Duration>,
}

/// A source's input, before its reader starts.
pub(crate) enum Input {
    /// Ready to poll.
    Feed(Box<dyn Feed>),
    /// Still to be opened.
    Open(Pin<Box<dyn Future<Output = Result<Source, BoxError>> + Send>>),
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = match self.input {
            Input::Feed(_) => "ready",
            Input::Open(_) => "to open",
        };
        f.debug_struct("Source")
            .field("input", &input)
            .field("n", &self.n)
            .field("request", &self.request.is_some())
            .finish()
    }
}

impl Source {
    fn of(feed: impl Feed) -> Source {
        Source {
            input: Input::Feed(Box::new(feed)),
            n: None,
            request: None,
            idle: None,
        }
    }

    /// SSE bytes from a stream of reads (an HTTP body, for instance): any byte container, any
    /// error type.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let reads = futures::stream::iter([Ok::<_, std::io::Error>(b"data: [DONE]\n\n".to_vec())]);
    /// assert!(Completions::new(Source::sse(reads)).outcome().await.is_ok());
    /// # }
    /// ```
    pub fn sse<S, B, E>(reads: S) -> Source
    where
        S: Stream<Item = Result<B, E>> + Send + 'static,
        B: AsRef<[u8]> + Send,
        E: Into<BoxError>,
    {
        Source::of(ByteStreamFeed {
            stream: Box::pin(reads),
        })
    }

    /// SSE bytes from an `AsyncRead` (a file, a socket, stdin).
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source};
    /// # #[tokio::main] async fn main() {
    /// let c = Completions::new(Source::reader(&b"data: [DONE]\n\n"[..]));
    /// assert!(c.outcome().await.is_ok());
    /// # }
    /// ```
    pub fn reader<R: AsyncRead + Send + 'static>(reader: R) -> Source {
        Source::of(ReaderFeed {
            reader: Box::pin(reader),
            buf: Vec::new(),
        })
    }

    /// Values already parsed by the caller, one per event: Chat Completions chunks
    /// ([`ChatCompletionChunk`](crate::wire::ChatCompletionChunk)), or JSON events of any
    /// dialect (`serde_json::Value`: the Responses or Anthropic Messages API, or chunks),
    /// the dialect recognised from the first or set with
    /// [`dialect`](crate::CompletionsBuilder::dialect). Each value counts as one line in
    /// errors and warnings. Chat Completions chunks carry no end marker, so the end of the
    /// stream is the end of the completion; a typed dialect's stream says when it is
    /// complete, so choices still open at its end were cut short.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, wire::ChatCompletionChunk};
    /// # #[tokio::main] async fn main() {
    /// let chunk: ChatCompletionChunk = serde_json::from_str(
    ///     r#"{"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#).unwrap();
    /// let chunks = futures::stream::iter([Ok::<_, std::io::Error>(chunk.into_owned())]);
    /// let c = Completions::new(Source::parsed(chunks));
    /// assert_eq!(c.collect().await.unwrap().choices[0].message.content.as_deref(), Some("Hi"));
    ///
    /// let events = futures::stream::iter([
    ///     Ok::<_, std::io::Error>(serde_json::json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"})),
    ///     Ok(serde_json::json!({"type": "response.completed", "response": {"status": "completed"}})),
    /// ]);
    /// let c = Completions::new(Source::parsed(events));
    /// assert_eq!(c.collect().await.unwrap().choices[0].message.content.as_deref(), Some("Hi"));
    /// # }
    /// ```
    pub fn parsed<S, T, E>(values: S) -> Source
    where
        S: Stream<Item = Result<T, E>> + Send + 'static,
        T: Parsed,
        E: Into<BoxError> + 'static,
    {
        Source::of(ParsedFeed {
            stream: Box::pin(values.map_err(Into::into)),
            count: 0,
        })
    }

    /// A source still to be opened: `open` resolves to the source (an HTTP request resolving
    /// to its body, for instance). It is polled by the reader of the source, so the requests
    /// of a fan-out are sent when it starts and run concurrently; the idle timeout applies
    /// from the moment it resolves. If it fails, the source fails with
    /// [`ErrorDetail::Open`], and when its choice count is declared its choices
    /// appear, each failed with that error. Dropping the completion drops a pending `open`.
    ///
    /// ```
    /// # use choicewise_core::{Completions, ErrorKind, Source};
    /// # #[tokio::main] async fn main() {
    /// let refused = async { Err::<Source, _>("HTTP 500") };
    /// let c = Completions::new(Source::open(refused).n(1));
    /// let errors = c.choice_errors().await;
    /// assert_eq!((errors[0].0, errors[0].1.kind()), (0, ErrorKind::Open));
    /// # }
    /// ```
    pub fn open<F, E>(open: F) -> Source
    where
        F: Future<Output = Result<Source, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        Source {
            input: Input::Open(Box::pin(async move { open.await.map_err(Into::into) })),
            n: None,
            request: None,
            idle: None,
        }
    }

    /// Declares how many choices the source will have (the request's `n`).
    ///
    /// ```
    /// # use choicewise_core::Source;
    /// let source = Source::reader(&b""[..]).n(3);
    /// # drop(source);
    /// ```
    pub fn n(mut self, n: u32) -> Source {
        self.n = Some(n);
        self
    }

    /// The request this source answers: its prompt is counted in an estimated usage, and its
    /// `"n"` declares the choice count unless [`n`](Self::n) did.
    ///
    /// ```
    /// # use choicewise_core::{Completions, Source, UsageSource};
    /// # #[tokio::main] async fn main() {
    /// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n";
    /// let request = serde_json::json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello"}]});
    /// let c = Completions::new(Source::reader(sse.as_bytes()).request(request));
    /// let usage = c.usage().await;
    /// assert_eq!(usage.source, UsageSource::Estimated);
    /// assert!(usage.prompt_tokens > 0);
    /// # }
    /// ```
    pub fn request(mut self, request: Value) -> Source {
        self.request = Some(Arc::new(request));
        self
    }

    /// Ends this source with [`ErrorDetail::IdleTimeout`] when it sends nothing for this long
    /// once open (default: the completion's
    /// [`idle_timeout`](crate::CompletionsBuilder::idle_timeout)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use choicewise_core::{Completions, ErrorKind, Source};
    /// # #[tokio::main] async fn main() {
    /// let stalled = futures::stream::pending::<Result<Vec<u8>, std::io::Error>>();
    /// let c = Completions::new(Source::sse(stalled).idle_timeout(Duration::from_millis(10)));
    /// assert!(matches!(c.outcome().await, Err(e) if e.kind() == ErrorKind::Timeout));
    /// # }
    /// ```
    pub fn idle_timeout(mut self, after: Duration) -> Source {
        self.idle = Some(after);
        self
    }

    /// The declared choice count: `n`, else the request's.
    pub(crate) fn expected(&self) -> Option<u32> {
        self.n.or_else(|| {
            let n = self.request.as_deref()?.get("n")?.as_u64()?;
            u32::try_from(n).ok()
        })
    }
}

/// An input as its reader polls it: each ready read goes to the splitter.
pub(crate) trait Feed: Send + 'static {
    /// Polls the next read and hands it to `splitter`: what it produced, or `Pending`
    /// (having arranged for `cx`'s waker to be woken).
    fn poll_step(&mut self, cx: &mut Context<'_>, splitter: &mut Splitter) -> Poll<Step>;
}

/// SSE bytes from a stream of reads.
struct ByteStreamFeed<S> {
    stream: Pin<Box<S>>,
}

impl<S, B, E> Feed for ByteStreamFeed<S>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: Into<BoxError>,
{
    fn poll_step(&mut self, cx: &mut Context<'_>, splitter: &mut Splitter) -> Poll<Step> {
        let offset = splitter.offset();
        Poll::Ready(match ready!(self.stream.as_mut().poll_next(cx)) {
            None => splitter.end_of_input(),
            Some(Err(e)) => Step::End(Err(transport(e.into(), offset, splitter))),
            Some(Ok(bytes)) => splitter.feed(bytes.as_ref()),
        })
    }
}

/// SSE bytes from an `AsyncRead`.
struct ReaderFeed<R> {
    reader: Pin<Box<R>>,
    buf: Vec<u8>,
}

/// The size of one read from an `AsyncRead`.
const READ_BUFFER: usize = 16 * 1024;

impl<R: AsyncRead + Send + 'static> Feed for ReaderFeed<R> {
    fn poll_step(&mut self, cx: &mut Context<'_>, splitter: &mut Splitter) -> Poll<Step> {
        if self.buf.is_empty() {
            self.buf.resize(READ_BUFFER, 0);
        }
        let offset = splitter.offset();
        let mut buf = ReadBuf::new(&mut self.buf);
        Poll::Ready(match ready!(self.reader.as_mut().poll_read(cx, &mut buf)) {
            Err(e) => Step::End(Err(transport(Box::new(e), offset, splitter))),
            Ok(()) if buf.filled().is_empty() => splitter.end_of_input(),
            Ok(()) => splitter.feed(buf.filled()),
        })
    }
}

/// How many ready values one poll of a parsed input routes.
const PARSED_PER_STEP: usize = 256;

/// Values already parsed.
struct ParsedFeed<T> {
    stream: Pin<Box<dyn Stream<Item = Result<T, BoxError>> + Send>>,
    count: u64,
}

impl<T: Parsed> Feed for ParsedFeed<T> {
    fn poll_step(&mut self, cx: &mut Context<'_>, splitter: &mut Splitter) -> Poll<Step> {
        let mut next = ready!(self.stream.as_mut().poll_next(cx));
        for _ in 0..PARSED_PER_STEP {
            match next {
                None => return Poll::Ready(T::end(splitter, self.count)),
                Some(Err(e)) => {
                    return Poll::Ready(Step::End(Err(transport(e, self.count, splitter))));
                }
                Some(Ok(value)) => {
                    self.count += 1;
                    if let Err(e) = value.route(splitter, self.count) {
                        return Poll::Ready(Step::End(Err(e)));
                    }
                }
            }
            match self.stream.as_mut().poll_next(cx) {
                Poll::Ready(item) => next = item,
                Poll::Pending => break,
            }
        }
        Poll::Ready(Step::Continue)
    }
}

/// A source as its reader runs it: opening, then read, with the idle timeout.
pub(crate) struct Upstream {
    state: UpstreamInput,
    idle: Option<Duration>,
    /// When the idle timeout falls, while one is running: moved on only when it fires early
    /// (reads came since it was set), not at every read.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The last read's instant, for the idle timeout.
    last: tokio::time::Instant,
}

enum UpstreamInput {
    Opening(Pin<Box<dyn Future<Output = Result<Source, BoxError>> + Send>>),
    Reading(Box<dyn Feed>),
}

impl Upstream {
    pub fn new(input: Input, idle: Option<Duration>) -> Self {
        Upstream {
            state: match input {
                Input::Feed(feed) => UpstreamInput::Reading(feed),
                Input::Open(open) => UpstreamInput::Opening(open),
            },
            idle,
            deadline: None,
            last: tokio::time::Instant::now(),
        }
    }

    /// Polls the upstream for its next step; the idle timeout ends it with
    /// [`ErrorDetail::IdleTimeout`] once it has been open and quiet that long.
    pub fn poll_step(&mut self, cx: &mut Context<'_>, splitter: &mut Splitter) -> Poll<Step> {
        loop {
            match &mut self.state {
                UpstreamInput::Opening(open) => match ready!(open.as_mut().poll(cx)) {
                    Ok(source) => {
                        self.state = match source.input {
                            Input::Feed(feed) => UpstreamInput::Reading(feed),
                            Input::Open(open) => UpstreamInput::Opening(open),
                        };
                        self.last = tokio::time::Instant::now();
                    }
                    Err(e) => {
                        return Poll::Ready(Step::End(Err(Error::from(ErrorDetail::Open {
                            message: e.to_string(),
                            source: Some(Arc::from(e)),
                        }))));
                    }
                },
                UpstreamInput::Reading(feed) => {
                    if let Poll::Ready(step) = feed.poll_step(cx, splitter) {
                        self.last = tokio::time::Instant::now();
                        return Poll::Ready(step);
                    }
                    return self.poll_idle(cx, splitter.offset());
                }
            }
        }
    }

    /// `Pending` until the idle timeout falls.
    fn poll_idle(&mut self, cx: &mut Context<'_>, offset: u64) -> Poll<Step> {
        let Some(after) = self.idle else {
            return Poll::Pending;
        };
        let Some(due) = self.last.checked_add(after) else {
            return Poll::Pending;
        };
        let timer = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        loop {
            ready!(timer.as_mut().poll(cx));
            if tokio::time::Instant::now() >= due {
                self.deadline = None;
                return Poll::Ready(Step::End(Err(Error::from(ErrorDetail::IdleTimeout {
                    after,
                    offset,
                }))));
            }
            timer.as_mut().reset(due);
        }
    }
}

fn transport(e: BoxError, offset: u64, splitter: &Splitter) -> Error {
    Error::from(ErrorDetail::Transport {
        offset,
        message: e.to_string(),
        source: Some(Arc::from(e)),
        unfinished: splitter.unfinished(),
    })
}
