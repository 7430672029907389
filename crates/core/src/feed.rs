//! Inputs of the reader actor: raw SSE bytes from a stream or an `AsyncRead`, or chunks that
//! are already parsed. Each [`Feed`] pulls one read from upstream and routes what it holds.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use choicewise_sse::Framer;
use futures::{FutureExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::Error;
use crate::event::{Warning, WarningKind};
use crate::route::{Flow, Router, route_event};
use crate::wire::ChatCompletionChunk;

/// A boxed error from an input stream.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What one pull produced.
#[derive(Debug)]
pub(crate) enum Step {
    /// More may come.
    Continue,
    /// The stream is over: cleanly, or with the error that ended it.
    End(Result<(), Error>),
}

/// An upstream the reader pulls from.
pub(crate) trait Feed: Send + 'static {
    /// Waits for the next read and routes everything it completes.
    fn pull(&mut self, router: &mut Router) -> impl Future<Output = Step> + Send;
}

/// Waits for `fut`, failing with [`Error::IdleTimeout`] after `idle`.
async fn within<T>(
    idle: Option<Duration>,
    offset: u64,
    fut: impl Future<Output = T>,
) -> Result<T, Error> {
    match idle {
        None => Ok(fut.await),
        Some(after) => tokio::time::timeout(after, fut)
            .await
            .map_err(|_| Error::IdleTimeout { after, offset }),
    }
}

/// Framing and routing of SSE bytes, shared by the byte-stream and reader inputs.
#[derive(Debug)]
pub(crate) struct SseDecoder {
    framer: Framer,
    offset: u64,
    /// The warning about events without blank lines was given.
    warned_unterminated: bool,
}

impl SseDecoder {
    pub fn new(max_event_size: usize) -> Self {
        SseDecoder {
            framer: Framer::with_max_event_size(max_event_size),
            offset: 0,
            warned_unterminated: false,
        }
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Strict WHATWG framing (see `Framer::strict`).
    pub fn strict(self, strict: bool) -> Self {
        SseDecoder {
            framer: self.framer.strict(strict),
            ..self
        }
    }

    /// Routes every event `bytes` completes.
    pub fn process(&mut self, bytes: &[u8], router: &mut Router) -> Step {
        let mut stop: Option<Result<(), Error>> = None;
        let fed = self.framer.feed(bytes, |event| {
            match route_event(
                router,
                event.event,
                event.data,
                event.line,
                event.offset,
                event.data_lines,
            ) {
                Ok(Flow::Continue) => ControlFlow::Continue(()),
                Ok(Flow::Done) => {
                    stop = Some(Ok(()));
                    ControlFlow::Break(())
                }
                Err(e) => {
                    stop = Some(Err(e));
                    ControlFlow::Break(())
                }
            }
        });
        self.offset += bytes.len() as u64;
        self.warn_unterminated(router);
        match fed {
            Err(e) => Step::End(Err(e.into())),
            Ok(choicewise_sse::Feed::Consumed) => Step::Continue,
            Ok(choicewise_sse::Feed::Stopped { consumed }) => {
                let outcome = stop.unwrap_or(Ok(()));
                if outcome.is_ok() {
                    let rest = &bytes[consumed.min(bytes.len())..];
                    if rest.iter().any(|b| !b.is_ascii_whitespace()) {
                        router.warnings.push(Warning {
                            choice: None,
                            line: self.framer.position().line,
                            kind: WarningKind::DataAfterDone { bytes: rest.len() },
                        });
                    }
                }
                Step::End(outcome)
            }
        }
    }

    /// Warns (once per stream) when the framer dispatched events written without the blank
    /// line between them.
    fn warn_unterminated(&mut self, router: &mut Router) {
        if let Some(line) = self.framer.first_unterminated_line() {
            self.warn_unterminated_at(router, line);
        }
    }

    fn warn_unterminated_at(&mut self, router: &mut Router, line: u64) {
        if !self.warned_unterminated {
            self.warned_unterminated = true;
            router.warnings.push(Warning {
                choice: None,
                line,
                kind: WarningKind::EventsWithoutBlankLines,
            });
        }
    }

    /// The input ended without `[DONE]`: fine if nothing is pending and every choice
    /// finished, a truncation error otherwise.
    pub fn end_of_input(&mut self, router: &mut Router) -> Step {
        // The framer's tolerant mode may dispatch a last event written without its blank line.
        let mut routed = Ok(Flow::Continue);
        let mut dispatched = None;
        let tail = self.framer.finish_with(|event| {
            dispatched = Some(event.line);
            routed = route_event(
                router,
                event.event,
                event.data,
                event.line,
                event.offset,
                event.data_lines,
            );
            ControlFlow::Continue(())
        });
        if let Some(line) = dispatched {
            self.warn_unterminated_at(router, line);
        }
        if let Err(e) = routed {
            return Step::End(Err(e));
        }
        if tail.pending_data.as_deref().map(str::trim_ascii) == Some("[DONE]") {
            return Step::End(Ok(()));
        }
        let unfinished = router.unfinished();
        if tail.pending_bytes == 0 && unfinished.is_empty() {
            return Step::End(Ok(()));
        }
        Step::End(Err(Error::Truncated {
            line: tail.line,
            offset: tail.offset,
            pending_bytes: tail.pending_bytes,
            unfinished,
        }))
    }
}

/// SSE bytes from a stream of reads.
pub(crate) struct ByteStreamFeed<S> {
    stream: Pin<Box<S>>,
    decoder: SseDecoder,
    idle: Option<Duration>,
}

impl<S> ByteStreamFeed<S> {
    pub fn new(stream: S, max_event_size: usize, idle: Option<Duration>) -> Self {
        ByteStreamFeed {
            stream: Box::pin(stream),
            decoder: SseDecoder::new(max_event_size),
            idle,
        }
    }

    /// Strict WHATWG framing (see `Framer::strict`).
    pub fn strict_sse(self, strict: bool) -> Self {
        ByteStreamFeed {
            decoder: self.decoder.strict(strict),
            ..self
        }
    }
}

impl<S, B, E> Feed for ByteStreamFeed<S>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: Into<BoxError>,
{
    async fn pull(&mut self, router: &mut Router) -> Step {
        let offset = self.decoder.offset();
        match within(self.idle, offset, self.stream.next()).await {
            Err(e) => Step::End(Err(e)),
            Ok(None) => self.decoder.end_of_input(router),
            Ok(Some(Err(e))) => Step::End(Err(transport(e.into(), offset, router))),
            Ok(Some(Ok(bytes))) => self.decoder.process(bytes.as_ref(), router),
        }
    }
}

/// SSE bytes from an `AsyncRead`, read into one reused buffer.
pub(crate) struct ReaderFeed<R> {
    reader: Pin<Box<R>>,
    buf: Vec<u8>,
    decoder: SseDecoder,
    idle: Option<Duration>,
}

/// Size of the read buffer of [`ReaderFeed`].
const READ_BUFFER: usize = 16 * 1024;

impl<R> ReaderFeed<R> {
    pub fn new(reader: R, max_event_size: usize, idle: Option<Duration>) -> Self {
        ReaderFeed {
            reader: Box::pin(reader),
            buf: Vec::new(),
            decoder: SseDecoder::new(max_event_size),
            idle,
        }
    }

    /// Strict WHATWG framing (see `Framer::strict`).
    pub fn strict_sse(self, strict: bool) -> Self {
        ReaderFeed {
            decoder: self.decoder.strict(strict),
            ..self
        }
    }
}

impl<R: AsyncRead + Send + 'static> Feed for ReaderFeed<R> {
    async fn pull(&mut self, router: &mut Router) -> Step {
        if self.buf.is_empty() {
            self.buf.resize(READ_BUFFER, 0);
        }
        let offset = self.decoder.offset();
        match within(self.idle, offset, self.reader.read(&mut self.buf)).await {
            Err(e) => Step::End(Err(e)),
            Ok(Ok(0)) => self.decoder.end_of_input(router),
            Ok(Ok(n)) => self.decoder.process(&self.buf[..n], router),
            Ok(Err(e)) => Step::End(Err(transport(Box::new(e), offset, router))),
        }
    }
}

/// Chunks already parsed, e.g. by another client library.
pub(crate) struct ChunkFeed<S> {
    stream: Pin<Box<S>>,
    idle: Option<Duration>,
    /// Chunks routed so far; stands in for the line number in errors and warnings.
    count: u64,
}

/// How many ready chunks one pull routes at most, so that one actor message carries many.
const CHUNK_BATCH: usize = 256;

impl<S> ChunkFeed<S> {
    pub fn new(stream: S, idle: Option<Duration>) -> Self {
        ChunkFeed {
            stream: Box::pin(stream),
            idle,
            count: 0,
        }
    }
}

impl<S, E> Feed for ChunkFeed<S>
where
    S: Stream<Item = Result<ChatCompletionChunk<'static>, E>> + Send + 'static,
    E: Into<BoxError>,
{
    async fn pull(&mut self, router: &mut Router) -> Step {
        let mut next = match within(self.idle, self.count, self.stream.next()).await {
            Err(e) => return Step::End(Err(e)),
            Ok(item) => item,
        };
        for _ in 0..CHUNK_BATCH {
            match next {
                None => return Step::End(Ok(())),
                Some(Err(e)) => {
                    return Step::End(Err(transport(e.into(), self.count, router)));
                }
                Some(Ok(chunk)) => {
                    self.count += 1;
                    if let Err(e) = router.route(chunk, self.count) {
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

fn transport(e: BoxError, offset: u64, router: &Router) -> Error {
    Error::Transport {
        offset,
        message: e.to_string(),
        source: Some(Arc::from(e)),
        unfinished: router.unfinished(),
    }
}
