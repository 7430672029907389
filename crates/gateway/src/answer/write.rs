//! The one write loop of every streamed answer (Chat Completions, Messages, Responses): the
//! output choices' events as they come, framed by the answer's API ([`Framing`]), written
//! with back-pressure (the upstreams read no further ahead of the client than the pace
//! lets them), batched into writes, and cut short by the gateway's close or the request's
//! deadline ([`Closing`]).

use std::convert::Infallible;
use std::task::Poll;

use axum::body::{Body, Bytes};
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::response::Response;
use futures::StreamExt;
use futures::stream::BoxStream;

pub(crate) use crate::answer::closing::{Closing, closed, cut_short};
use crate::answer::ending::{AnswerEnd, Cut, OutputEnd, Seen, decide};
use crate::answer::finish::Finish;

/// How many bytes of events already made go into one write at most.
pub(crate) const WRITE_BYTES: usize = 16 * 1024;

/// A streamed answer's response: 200, `text/event-stream`, no caching or proxy buffering.
pub(crate) fn sse_response(
    body: impl futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");
    const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");
    const ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
    const NO: HeaderValue = HeaderValue::from_static("no");
    // Headers known when the program is built: none of them checked again a response.
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, EVENT_STREAM);
    headers.insert(header::CACHE_CONTROL, NO_CACHE);
    headers.insert(ACCEL_BUFFERING, NO);
    response
}

/// What an output choice's stream says.
pub(crate) enum Out {
    Event(choicewise_core::ChoiceEvent),
    /// It closed with an error: the upstream's.
    Failed(choicewise_core::Error),
    /// The upstream ended without it.
    Missing,
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
            yield Out::Missing;
            return;
        };
        let mut events = choice.events();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => yield Out::Event(event),
                Err(e) => {
                    yield Out::Failed(e);
                    return;
                }
            }
        }
        yield Out::Ended;
    }
    .boxed()
}

/// What ends a streamed answer, once every output choice has ended: the usage, the
/// provider's stop reason (of the first output choice) and the pick's summary, each when
/// the answer's API shows it.
#[derive(Default)]
pub(crate) struct Tail {
    /// The answer's usage, in Chat Completions' shape.
    pub(crate) usage: Option<crate::upstream::engine::AnswerUsage>,
    /// The provider's own stop reason of the first output choice.
    pub(crate) stop_reason: Option<String>,
    /// The pick's summary (`choicewise`).
    pub(crate) summary: Option<crate::upstream::engine::Summary>,
}

/// How an answer's API writes its events: its block framing, each output choice's decided
/// ending ([`OutputEnd`]), and its tail.
pub(crate) trait Framing: Send {
    /// The answer's opening events, written before any upstream is heard from.
    fn open(&mut self, write: &mut Vec<u8>);
    /// Appends what event of output choice `o` shows, if anything.
    fn event(&mut self, o: usize, event: &choicewise_core::ChoiceEvent, write: &mut Vec<u8>);
    /// Output choice `o` ended so.
    fn end(&mut self, o: usize, end: &OutputEnd, write: &mut Vec<u8>);
    /// The answer's last events, every output choice having ended (`ends`, in output
    /// order), as the answer's verdict (`answer`) says it ended.
    fn tail(&mut self, ends: &[OutputEnd], answer: &AnswerEnd, tail: Tail, write: &mut Vec<u8>);
    /// What the tail shows, to be read for it.
    fn needs(&self) -> Needs;
    /// Writes the next piece of what an earlier call left owed (a long event, written a
    /// piece at a time as the body is polled: see [`Encoder::more`](crate::api::Encoder::more));
    /// `false` when nothing is owed. The writer calls it after each write until it says
    /// `false`, before anything else.
    fn more(&mut self, _write: &mut Vec<u8>) -> bool {
        false
    }
}

/// What a framing's tail shows beyond the summary.
pub(crate) struct Needs {
    /// The usage.
    pub(crate) usage: bool,
    /// The first output choice's provider stop reason.
    pub(crate) stop_reason: bool,
}

/// The output choices' endings, as an answer learns them: what each one says is written
/// by the answer's framing, and its ending decided ([`decide`]) when it ends, or at the
/// cut.
pub(crate) struct Endings {
    seen: Vec<Seen>,
    ends: Vec<Option<OutputEnd>>,
}

impl Endings {
    /// The endings of `outputs` output choices, none ended yet.
    pub(crate) fn new(outputs: usize) -> Self {
        Endings {
            seen: vec![Seen::default(); outputs],
            ends: vec![None; outputs],
        }
    }

    /// What output choice `o` says, written by `framing`; its ending decided and given to
    /// the framing when it ends.
    pub(crate) fn say<F: Framing + ?Sized>(
        &mut self,
        framing: &mut F,
        o: usize,
        out: Out,
        write: &mut Vec<u8>,
    ) {
        let end = match out {
            Out::Event(event) => {
                self.seen[o].event(&event);
                framing.event(o, &event, write);
                return;
            }
            Out::Failed(error) => {
                self.seen[o].error = Some(error);
                decide(Some(&self.seen[o]), None)
            }
            Out::Missing => decide(None, None),
            Out::Ended => decide(Some(&self.seen[o]), None),
        };
        framing.end(o, &end, write);
        self.ends[o] = Some(end);
    }

    /// Every output choice's ending, in output order: those not ended yet end now, as
    /// `cut` (why the answer was cut short, if it was) decides, and are given to the
    /// framing.
    pub(crate) fn cut<F: Framing + ?Sized>(
        self,
        framing: &mut F,
        cut: Option<Cut>,
        write: &mut Vec<u8>,
    ) -> Vec<OutputEnd> {
        let Endings { seen, ends, .. } = self;
        (ends.into_iter().zip(seen).enumerate())
            .map(|(o, (end, seen))| {
                end.unwrap_or_else(|| {
                    let end = decide(Some(&seen), cut);
                    framing.end(o, &end, write);
                    end
                })
            })
            .collect()
    }
}

/// Writes the answer's opening, then each output choice's events as they come, until every
/// choice ended or the answer is cut short; each choice's ending is decided
/// ([`decide`]) as it ends, or at the cut, given to the framing and kept in `ends`. The
/// upstreams read no further ahead of the client than the run's pace lets them while the
/// client is behind.
pub(crate) fn write_loop<'a, F: Framing + ?Sized>(
    framing: &'a mut F,
    outputs: Vec<BoxStream<'static, Out>>,
    finish: &'a Finish,
    closing: &'a mut Closing,
    ends: &'a mut Vec<OutputEnd>,
) -> impl futures::Stream<Item = Bytes> + Send + 'a {
    async_stream::stream! {
        let run = finish.running().run();
        let several = outputs.len() > 1;
        let mut endings = Endings::new(outputs.len());
        let mut cut = None;
        let mut merged = futures::stream::select_all(
            (outputs.into_iter().enumerate()).map(|(o, events)| events.map(move |out| (o, out))),
        );
        // Every choice's opening in the first write: waiting for no upstream.
        let mut opening = Vec::with_capacity(512);
        framing.open(&mut opening);
        // The answer begins here (its 200 goes with these bytes): a client that leaves
        // after it was answered, whatever content came.
        finish.first_byte();
        yield Bytes::from(opening);
        let mut first = true;
        // One watch of the cut for the whole loop (the gateway's close, the deadline's
        // timer), polled whenever the loop waits.
        let mut cut_short_by = std::pin::pin!(closed(closing));
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
                        why = &mut cut_short_by => {
                            cut = Some(why);
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
            endings.say(framing, o, out, &mut write);
            let mut stepped_aside = !several;
            while write.len() < WRITE_BYTES {
                match futures::poll!(merged.next()) {
                    Poll::Ready(Some((o, out))) => endings.say(framing, o, out, &mut write),
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
            // A long event owed: each piece made once hyper asks for more.
            loop {
                let mut more = Vec::new();
                if !framing.more(&mut more) {
                    break;
                }
                let len = more.len();
                yield Bytes::from(more);
                run.pace.sent(len);
            }
        }
        drop(merged);
        // Cut short: the choices not ended end now, as the cut decides.
        let mut write = Vec::new();
        ends.extend(endings.cut(framing, cut, &mut write));
        if !write.is_empty() {
            yield Bytes::from(write);
        }
        let mut more = Vec::new();
        while framing.more(&mut more) {
            yield Bytes::from(std::mem::take(&mut more));
        }
        // What follows (the usage, the summary) waits for the upstreams' ends, which write
        // nothing until then: read freely.
        run.pace.caught_up();
    }
}
