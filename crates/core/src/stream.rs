//! [`EventStream`]: a choice's sub-stream, replaying its event log from the start.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use futures::stream::BoxStream;

use choicewise_proto::{ChoiceEvent, Error};

use crate::lifetime::Lifetime;
use crate::log::{ChoiceLog, Subscription};

/// A sub-stream of a [`Choice`](crate::Choice): yields `Ok` items from the start of the choice, then ends
/// (`None`) after the choice's finish, or yields one `Err` with the error that ended the
/// stream before the finish.
///
/// ```
/// # use choicewise_core::{Completions, Source};
/// # use futures::StreamExt;
/// # #[tokio::main] async fn main() {
/// let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n";
/// let c = Completions::new(Source::reader(sse.as_bytes())).choice(0).await.unwrap();
/// let mut content = c.content();
/// assert_eq!(&*content.next().await.unwrap().unwrap(), "Hi");
/// assert!(content.next().await.unwrap().is_err());
/// assert!(content.next().await.is_none());
/// # }
/// ```
pub struct EventStream<T> {
    inner: Inner<T>,
}

enum Inner<T> {
    /// Reads the choice's event log directly.
    Log(LogCursor<T>),
    /// Derived from another sub-stream (typed argument snapshots, a field's text).
    Derived(BoxStream<'static, Result<T, Error>>),
}

struct LogCursor<T> {
    sub: Subscription<ChoiceLog>,
    cursor: usize,
    done: bool,
    select: fn(&ChoiceEvent) -> Option<T>,
    _life: Arc<Lifetime>,
}

impl<T> EventStream<T> {
    /// A stream of what `select` picks from the choice's events, from the start.
    pub(crate) fn new(
        shared: Arc<ChoiceLog>,
        life: Arc<Lifetime>,
        select: fn(&ChoiceEvent) -> Option<T>,
    ) -> Self {
        EventStream {
            inner: Inner::Log(LogCursor {
                sub: Subscription::new(shared),
                cursor: 0,
                done: false,
                select,
                _life: life,
            }),
        }
    }

    /// A stream derived from other sub-streams.
    pub(crate) fn derived(stream: BoxStream<'static, Result<T, Error>>) -> Self {
        EventStream {
            inner: Inner::Derived(stream),
        }
    }
}

impl<T> fmt::Debug for EventStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Log(log) => f
                .debug_struct("EventStream")
                .field("choice", &log.sub.target.index)
                .field("cursor", &log.cursor)
                .field("done", &log.done)
                .finish(),
            Inner::Derived(_) => f.debug_struct("EventStream").finish_non_exhaustive(),
        }
    }
}

impl<T> Stream for EventStream<T> {
    type Item = Result<T, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = match &mut self.get_mut().inner {
            Inner::Log(log) => log,
            Inner::Derived(stream) => return stream.as_mut().poll_next(cx),
        };
        if this.done {
            return Poll::Ready(None);
        }
        let cursor = &mut this.cursor;
        let done = &mut this.done;
        let select = this.select;
        this.sub.poll_with(cx, |published| {
            while let Some(event) = published.events.get(*cursor) {
                *cursor += 1;
                if let Some(item) = select(event) {
                    return Poll::Ready(Some(Ok(item)));
                }
            }
            match published.closed() {
                None => Poll::Pending,
                Some(outcome) => {
                    *done = true;
                    Poll::Ready(outcome.err().map(Err))
                }
            }
        })
    }
}
