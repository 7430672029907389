//! The one write loop of every streamed answer (Chat Completions, Messages, Responses): the
//! output choices' events as they come, framed by the answer's API ([`Framing`]), written
//! with back-pressure (the upstreams read no further ahead of the client than the pace
//! lets them), batched into writes, and cut short by the gateway's close or the request's
//! deadline ([`Closing`]).

use std::convert::Infallible;
use std::task::Poll;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::stream::BoxStream;

pub(crate) use crate::closing::{
    Closing, PAST_DEADLINE, SHUT_DOWN, closed, cut_short, until_closed,
};
use crate::finish::Finish;

/// How many bytes of events already made go into one write at most.
pub(crate) const WRITE_BYTES: usize = 16 * 1024;

/// A streamed answer's response: 200, `text/event-stream`, no caching or proxy buffering.
pub(crate) fn sse_response(
    body: impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// What an output choice's stream says.
pub(crate) enum Out {
    Event(choicewise_core::ChoiceEvent),
    /// It failed: why.
    Failed(String),
    /// Its events ended.
    Ended,
}

/// One output choice's events, from its start.
pub(crate) fn output(
    completions: choicewise_core::Completions,
    index: Option<u32>,
) -> BoxStream<'static, Out> {
    async_stream::stream! {
        let choice = match index {
            Some(index) => completions.choice(index).await,
            None => None,
        };
        let Some(choice) = choice else {
            yield Out::Failed("the upstream ended without this choice".into());
            return;
        };
        let mut events = choice.events();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => yield Out::Event(event),
                Err(e) => {
                    yield Out::Failed(e.to_string());
                    return;
                }
            }
        }
        yield Out::Ended;
    }
    .boxed()
}

/// How an answer's API writes its events.
pub(crate) trait Framing: Send {
    /// The answer's opening events, written before any upstream is heard from.
    fn open(&mut self, write: &mut Vec<u8>);
    /// Appends what output choice `o` says, if it shows.
    fn out(&mut self, o: usize, out: Out, write: &mut Vec<u8>);
}

/// Writes the answer's opening, then each output choice's events as they come, until every
/// choice's events ended or the answer is cut short (`cut`: why). The upstreams read no
/// further ahead of the client than the run's pace lets them while the client is behind.
pub(crate) fn write_loop<'a, F: Framing>(
    framing: &'a mut F,
    outputs: Vec<BoxStream<'static, Out>>,
    finish: &'a Finish,
    closing: &'a mut Closing,
    cut: &'a mut Option<&'static str>,
) -> impl futures::Stream<Item = Bytes> + Send + 'a {
    async_stream::stream! {
        let run = finish.run();
        let several = outputs.len() > 1;
        let mut merged = futures::stream::select_all(
            (outputs.into_iter().enumerate()).map(|(o, events)| events.map(move |out| (o, out))),
        );
        // Every choice's opening in the first write: waiting for no upstream.
        let mut opening = Vec::with_capacity(512);
        framing.open(&mut opening);
        yield Bytes::from(opening);
        let mut first = true;
        // From here the upstreams read no further ahead of this client than pace::AHEAD.
        run.pace.streaming();
        let mut ended = false;
        while !ended {
            let next = match futures::poll!(merged.next()) {
                Poll::Ready(next) => next,
                Poll::Pending => {
                    // Everything received is written: the upstreams may read on.
                    run.pace.caught_up();
                    tokio::select! {
                        biased;
                        next = merged.next() => next,
                        why = closed(closing) => {
                            *cut = Some(why);
                            None
                        }
                    }
                }
            };
            let Some((o, out)) = next else { break };
            // Something to write: from here the upstreams wait while the client is behind.
            run.pace.writing();
            // One event per element, as the upstreams send them; every element already
            // there goes in the same write. The other choices of the same upstream read
            // are published by their own actors, which the runtime may run after this task
            // (a task woken by the running one runs next), so with several choices the
            // task steps aside once, behind the tasks already runnable, before it writes.
            let mut write = Vec::with_capacity(512);
            framing.out(o, out, &mut write);
            let mut stepped_aside = !several;
            while write.len() < WRITE_BYTES {
                match futures::poll!(merged.next()) {
                    Poll::Ready(Some((o, out))) => framing.out(o, out, &mut write),
                    Poll::Ready(None) => {
                        ended = true;
                        break;
                    }
                    Poll::Pending if !stepped_aside => {
                        stepped_aside = true;
                        tokio::task::yield_now().await;
                    }
                    Poll::Pending => break,
                }
            }
            if write.is_empty() {
                continue;
            }
            if std::mem::take(&mut first) {
                finish.first_chunk();
            }
            // Counted as taken once hyper asks for more, which it does when it can write.
            let len = write.len();
            yield Bytes::from(write);
            run.pace.sent(len);
        }
        drop(merged);
        // What follows (the usage, the summary) waits for the upstreams' ends, which write
        // nothing until then: read freely.
        run.pace.caught_up();
    }
}
