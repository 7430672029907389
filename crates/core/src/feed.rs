//! Inputs of the reader actor: raw SSE bytes from a stream or an `AsyncRead`, or chunks and
//! events that are already parsed. Each [`Feed`] pulls one read from upstream and hands it to the
//! [`Splitter`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{Error, ErrorDetail};
use crate::split::{Parsed, Splitter, Step};

/// A boxed error from an input stream.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An upstream the reader pulls from.
pub(crate) trait Feed: Send + 'static {
    /// Waits for the next read and splits everything it completes.
    fn pull(&mut self, splitter: &mut Splitter) -> impl Future<Output = Step> + Send;
}

/// Waits for `fut`, failing with [`ErrorDetail::IdleTimeout`](crate::ErrorDetail::IdleTimeout) after `idle`.
async fn within<T>(
    idle: Option<Duration>,
    offset: u64,
    fut: impl Future<Output = T>,
) -> Result<T, Error> {
    match idle {
        None => Ok(fut.await),
        Some(after) => tokio::time::timeout(after, fut)
            .await
            .map_err(|_| ErrorDetail::IdleTimeout { after, offset }.into()),
    }
}

/// SSE bytes from a stream of reads.
pub(crate) struct ByteStreamFeed<S> {
    stream: Pin<Box<S>>,
    idle: Option<Duration>,
}

impl<S> ByteStreamFeed<S> {
    pub fn new(stream: S, idle: Option<Duration>) -> Self {
        ByteStreamFeed {
            stream: Box::pin(stream),
            idle,
        }
    }
}

impl<S, B, E> Feed for ByteStreamFeed<S>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: Into<BoxError>,
{
    async fn pull(&mut self, splitter: &mut Splitter) -> Step {
        let offset = splitter.offset();
        match within(self.idle, offset, self.stream.next()).await {
            Err(e) => Step::End(Err(e)),
            Ok(None) => splitter.end_of_input(),
            Ok(Some(Err(e))) => Step::End(Err(transport(e.into(), offset, splitter))),
            Ok(Some(Ok(bytes))) => splitter.feed(bytes.as_ref()),
        }
    }
}

/// SSE bytes from a stream that is still to be opened (an HTTP request on its way): the
/// first pull waits for `open` with no idle timeout (a request may wait its turn or retry),
/// then the stream is read as a [`ByteStreamFeed`].
pub(crate) enum OpeningFeed<F, S> {
    Opening(Pin<Box<F>>, Option<Duration>),
    Open(ByteStreamFeed<S>),
}

impl<F, S> OpeningFeed<F, S> {
    pub fn new(open: F, idle: Option<Duration>) -> Self {
        OpeningFeed::Opening(Box::pin(open), idle)
    }
}

impl<F, O, S, B, E> Feed for OpeningFeed<F, S>
where
    F: Future<Output = Result<S, O>> + Send + 'static,
    O: Into<BoxError>,
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: Into<BoxError>,
{
    async fn pull(&mut self, splitter: &mut Splitter) -> Step {
        match self {
            OpeningFeed::Open(feed) => feed.pull(splitter).await,
            // Cancel-safe: the future lives in the feed, not in this pull.
            OpeningFeed::Opening(open, idle) => match open.as_mut().await {
                Ok(stream) => {
                    *self = OpeningFeed::Open(ByteStreamFeed::new(stream, *idle));
                    Step::Continue
                }
                Err(e) => {
                    let e: BoxError = e.into();
                    Step::End(Err(Error::from(ErrorDetail::Open {
                        message: e.to_string(),
                        source: Some(Arc::from(e)),
                    })))
                }
            },
        }
    }
}

/// SSE bytes from an `AsyncRead`, read into one reused buffer.
pub(crate) struct ReaderFeed<R> {
    reader: Pin<Box<R>>,
    buf: Vec<u8>,
    idle: Option<Duration>,
}

/// Size of the read buffer of [`ReaderFeed`].
const READ_BUFFER: usize = 16 * 1024;

impl<R> ReaderFeed<R> {
    pub fn new(reader: R, idle: Option<Duration>) -> Self {
        ReaderFeed {
            reader: Box::pin(reader),
            buf: Vec::new(),
            idle,
        }
    }
}

impl<R: AsyncRead + Send + 'static> Feed for ReaderFeed<R> {
    async fn pull(&mut self, splitter: &mut Splitter) -> Step {
        if self.buf.is_empty() {
            self.buf.resize(READ_BUFFER, 0);
        }
        let offset = splitter.offset();
        match within(self.idle, offset, self.reader.read(&mut self.buf)).await {
            Err(e) => Step::End(Err(e)),
            Ok(Ok(0)) => splitter.end_of_input(),
            Ok(Ok(n)) => splitter.feed(&self.buf[..n]),
            Ok(Err(e)) => Step::End(Err(transport(Box::new(e), offset, splitter))),
        }
    }
}

/// Values already parsed, e.g. by another client library. Their stream's end is the
/// completion's (a typed dialect's stream that stopped early is truncated, see
/// [`Splitter::end_of_events`]).
pub(crate) struct ParsedFeed<S> {
    stream: Pin<Box<S>>,
    idle: Option<Duration>,
    /// Values routed so far; stands in for the line number in errors and warnings.
    count: u64,
}

/// How many ready values one pull routes at most, so that one actor message carries many.
const CHUNK_BATCH: usize = 256;

impl<S> ParsedFeed<S> {
    pub fn new(stream: S, idle: Option<Duration>) -> Self {
        ParsedFeed {
            stream: Box::pin(stream),
            idle,
            count: 0,
        }
    }
}

impl<S, T, E> Feed for ParsedFeed<S>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: Parsed,
    E: Into<BoxError>,
{
    async fn pull(&mut self, splitter: &mut Splitter) -> Step {
        let mut next = match within(self.idle, self.count, self.stream.next()).await {
            Err(e) => return Step::End(Err(e)),
            Ok(item) => item,
        };
        for _ in 0..CHUNK_BATCH {
            match next {
                None => return T::end(splitter, self.count),
                Some(Err(e)) => {
                    return Step::End(Err(transport(e.into(), self.count, splitter)));
                }
                Some(Ok(value)) => {
                    self.count += 1;
                    if let Err(e) = value.route(splitter, self.count) {
                        return Step::End(Err(e));
                    }
                }
            }
            match self.stream.next().now_or_never() {
                Some(item) => next = item,
                None => break,
            }
        }
        Step::Continue
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
