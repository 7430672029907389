//! A request's end, accounted: its metrics, its log line, its limits' settlement, its row and
//! its span, recorded when its answer's body ends or is dropped, synchronously (no task is
//! spawned for it).
//!
//! The record is data ([`Record`]: its [`Labels`], set as it arrives and once it is read,
//! and what its serving learned) beside its run ([`Running`], the one place its samples are
//! stopped); the [`Sinks`] make everything it leaves behind from it, once.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use axum::http::HeaderMap;

use crate::answer::closing::Closing;
use crate::answer::ending::{AnswerEnd, Ended, ErrorType};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::traces::{RequestSpan, Traces};
use crate::upstream::engine::{Picked, Run};
use crate::upstream::open::{LimitSet, TryRecord};

mod labels;
mod row;
mod running;
mod sinks;

use labels::Labels;
pub(crate) use labels::{Arrival, Asked};
pub(crate) use row::log_unrun;
pub(crate) use running::Running;
pub(crate) use running::Settled;
pub(crate) use sinks::Sinks;
use sinks::{End, Record};

/// A request's record, from its arrival: where it is in its life ([`Stage`]), its run once
/// it started, and what its record needs. It goes along the request's path by value: the
/// handler's future owns it, then its answer's body. The answer reads what the run came to
/// ([`settle`](Self::settle)) once its samples are over, before its last bytes; the record
/// is made, without waiting for anything and without a task, when the `Finish` is dropped
/// with the answer's body: when the body ended, or its client went away (then the samples
/// still running are stopped, closing their upstreams, and the record says what they had
/// received).
pub(crate) struct Finish(Box<State>);

/// A [`Finish`]'s fields, on the heap: moving the record moves a pointer.
struct State {
    sinks: Sinks,
    record: Record,
    stage: Stage,
    /// The count of a request whose client goes away before any answer
    /// (`admission::layers::count`), told its model once it is read.
    counted_as: Option<crate::metrics::RequestModel>,
}

/// Where a request is in its life: the one state its record is made from when it is
/// dropped, moved only by the transitions of [`Finish`] (as hyper's connection `State` or
/// h2's stream state).
///
/// ```text
/// Reading ──refused(e)──▶ Refused { code, status }
///    │
///    ├──relayed(settled, ended)──▶ Done   (a relayed answer: `api::chat::relay`)
///    │
///    └──started(run)──▶ Running { run, outputs, settled, ended }
///                          picked: its outputs; settle/settled: what it came to;
///                          answered(verdict) or fail(why): how it ended
///                          └──both known──▶ Done { settled, ended }   (the run let go)
///
/// dropped:  Reading ▶ its client gone · Refused ▶ the refusal · Done ▶ its record
///           Running ▶ closed: not decided, its samples stopped for its client (the
///                     one place a disconnect cancels), what they had read now
/// ```
// The stage lives in the record's one heap allocation (`Finish` is a pointer): a box for
// the running variant would be a second one per request for no gain.
#[allow(clippy::large_enum_variant)]
enum Stage {
    /// Its body being read, parsed and planned, its first samples opening: no run.
    Reading,
    /// Answered with an error before its run began: its code and status.
    Refused { code: String, status: u16 },
    /// Its run started.
    Running(Running),
    /// What its run came to and how it ended, both known: nothing is left to stop.
    Done { settled: Settled, ended: Ended },
}

/// What a request's serving learned once its upstreams are about to be tried.
pub(crate) struct Opening {
    /// Its tries, as they are made.
    pub(crate) tries: Arc<Mutex<Vec<TryRecord>>>,
    /// The limits the gateway set on its samples' requests, as they are made.
    pub(crate) limits_set: Arc<Mutex<Vec<LimitSet>>>,
    /// What it reserved of its limits (none without limits).
    pub(crate) reservation: Option<crate::quota::Reservation>,
}

impl Finish {
    /// The record of a request arriving now with these headers, as `arrival` says, made
    /// into `sinks`.
    pub(crate) fn new(sinks: Sinks, headers: &HeaderMap, arrival: Arrival) -> Finish {
        if let Some(counted) = &arrival.counted_as {
            counted.recorded();
        }
        let record = Record {
            labels: Labels::arriving(headers, &arrival),
            arrived: Instant::now(),
            arrived_at: SystemTime::now(),
            parent: sinks.traces.as_ref().map(|_| Traces::parent(headers)),
            tries: None,
            limits_set: None,
            span: None,
            reservation: None,
            first_byte: std::sync::OnceLock::new(),
            pick: None,
        };
        Finish(Box::new(State {
            sinks,
            record,
            stage: Stage::Reading,
            counted_as: arrival.counted_as,
        }))
    }

    /// The request was answered with `e`: before its run began, its span is made now (a
    /// run's is made with its record), and it is recorded as refused, its log line naming
    /// its code (and its tries, if any). A run that failed says how ([`fail`](Self::fail)).
    pub(crate) fn refused(&mut self, e: &ApiError) {
        let State {
            sinks,
            record,
            stage,
            ..
        } = &mut *self.0;
        sinks.refusal_span(record, e);
        if let Stage::Reading = stage {
            *stage = Stage::Refused {
                code: e.code.as_deref().unwrap_or("refused").to_string(),
                status: e.status.as_u16(),
            };
        }
    }

    /// The request was read (or far enough to say what it asked for): its labels, once.
    pub(crate) fn read(&mut self, asked: Asked) {
        if let (Some(counted), true) = (&self.0.counted_as, asked.configured) {
            counted.set(&asked.model);
        }
        self.0.record.labels.read(asked);
    }

    /// The request's upstreams are about to be tried: its tries and the limits the gateway
    /// sets on them as they are made, and what it reserved of its limits (settled by its
    /// record).
    pub(crate) fn opening(&mut self, opening: Opening) {
        let record = &mut self.0.record;
        record.tries = Some(opening.tries);
        record.limits_set = Some(opening.limits_set);
        record.reservation = opening.reservation;
    }

    /// The trace the request belongs to, for its span (once: with traces on).
    pub(crate) fn take_parent(&mut self) -> Option<opentelemetry::Context> {
        self.0.record.parent.take()
    }

    /// The run started (with its span, with traces on): the record holds it from now until
    /// its answer is sent, so that a client that goes away while its samples open or its
    /// pick is undecided is recorded as any other (its samples stopped, what they had
    /// received counted).
    pub(crate) fn started(&mut self, run: Run, span: Option<RequestSpan>) {
        debug_assert!(
            matches!(self.0.stage, Stage::Reading),
            "one run per request"
        );
        self.0.record.span = span;
        self.0.stage = Stage::Running(Running::new(run));
    }

    /// A relayed request ([`crate::answer::relay`]) came to `settled` and ended so: its
    /// record is made from them when it is dropped.
    pub(crate) fn relayed(&mut self, settled: Settled, ended: Ended) {
        if let Stage::Reading = self.0.stage {
            self.0.stage = Stage::Done { settled, ended };
        }
    }

    /// The run, until what it came to and how it ended are both known.
    pub(crate) fn running(&self) -> &Running {
        match &self.0.stage {
            Stage::Running(running) => running,
            _ => unreachable!("a Finish holds its run until its answer is built"),
        }
    }

    /// The run, to pick its samples.
    pub(crate) fn running_mut(&mut self) -> &mut Running {
        match &mut self.0.stage {
            Stage::Running(running) => running,
            _ => unreachable!("a Finish holds its run until its answer is built"),
        }
    }

    /// The run picked by `rule` (any but `all`, whose outputs are every sample): its output
    /// samples, and how the pick ended ([`Picked::how_decided`]).
    pub(crate) fn picked(&mut self, rule: &'static str, picked: &Picked) {
        self.0.record.pick = Some((rule, picked.how_decided()));
        if let Stage::Running(running) = &mut self.0.stage {
            running.outputs = Some(picked.samples.clone());
        }
    }

    /// The answer's id, named in the span.
    pub(crate) fn response_id(&mut self, id: &Arc<str>) {
        if let Some(span) = &mut self.0.record.span {
            span.response_id = Some(id.clone());
        }
    }

    /// The answer ended so: its verdict, which the record reads. The answer is decided:
    /// its samples are not its client's to stop any more.
    pub(crate) fn answered(&mut self, end: AnswerEnd) {
        if let Stage::Running(running) = &mut self.0.stage {
            running.ended = Some(Ended::Answer(end));
        }
        self.done_when_known();
    }

    /// What the run came to, read by the answer ([`Running::read`]).
    pub(crate) fn settled(&mut self, settled: Settled) {
        if let Stage::Running(running) = &mut self.0.stage {
            running.settled = Some(settled);
        }
        self.done_when_known();
    }

    /// Once what the run came to and how it ended are both known, the run (and the samples'
    /// texts it holds) is let go: `Done`.
    fn done_when_known(&mut self) {
        let stage = &mut self.0.stage;
        if !matches!(stage, Stage::Running(r) if r.settled.is_some() && r.ended.is_some()) {
            return;
        }
        if let Stage::Running(running) = std::mem::replace(stage, Stage::Reading) {
            let (settled, ended) = running.close();
            *stage = Stage::Done { settled, ended };
        }
    }

    /// A streamed answer's last event is written: what the run came to is read, for at most
    /// a moment ([`Running::settle_after_answer`]).
    pub(crate) async fn settle_after_answer(&mut self, closing: &mut Closing) {
        if let Stage::Running(running) = &mut self.0.stage {
            running.settle_after_answer(closing).await;
        }
        self.done_when_known();
    }

    /// The request fails with `why` (the span's `error.type`) before its answer began: its
    /// samples are stopped and what they came to read.
    pub(crate) async fn fail(&mut self, why: ErrorType) {
        if let Stage::Running(running) = &mut self.0.stage {
            running.fail(why).await;
        }
        self.done_when_known();
    }

    /// The answer's first byte is being sent: its time, once.
    pub(crate) fn first_byte(&self) {
        let record = &self.0.record;
        if record.first_byte.get().is_none() {
            let _ = record.first_byte.set(record.arrived.elapsed());
        }
    }

    /// A streamed answer's first chunk is written: its time, in the metrics and the span.
    pub(crate) fn first_chunk(&self) {
        let record = &self.0.record;
        let after = record.arrived.elapsed();
        let _ = record.first_byte.set(after);
        self.0
            .sinks
            .metrics
            .first_chunk(&record.labels.model, after);
        if let Some(span) = &record.span {
            let _ = span.first_chunk.set(after);
        }
    }

    /// The request's labels.
    pub(crate) fn labels(&self) -> &Labels {
        &self.0.record.labels
    }

    /// When the request arrived.
    pub(crate) fn arrived(&self) -> Instant {
        self.0.record.arrived
    }

    /// The request's tries, once its upstreams are tried.
    pub(crate) fn tries(&self) -> Option<Arc<Mutex<Vec<TryRecord>>>> {
        self.0.record.tries.clone()
    }

    /// The request's metrics.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.0.sinks.metrics
    }

    /// Whether its samples' messages must be kept: for its record's samples (`samples =
    /// true`).
    pub(crate) fn records_samples(&self) -> bool {
        (self.0.sinks.records.as_ref()).is_some_and(|r| r.samples())
    }
}

impl Drop for Finish {
    /// Exactly one record, whenever the client left: as its stage says.
    fn drop(&mut self) {
        let State {
            sinks,
            record,
            stage,
            ..
        } = &mut *self.0;
        let end = match std::mem::replace(stage, Stage::Reading) {
            Stage::Reading => End::Gone,
            Stage::Refused { code, status } => End::Refused { code, status },
            Stage::Running(running) => {
                let (settled, ended) = running.close();
                End::Ran { settled, ended }
            }
            Stage::Done { settled, ended } => End::Ran { settled, ended },
        };
        sinks.write(record, end);
    }
}

/// An answer's body holding its request's [`Finish`] (as linkerd2-proxy's response bodies
/// hold what they report): the record is made when the body has been sent to its end, or
/// dropped. A JSON answer's and a refusal's; a streamed answer's body holds its record in
/// its stream, which writes to it as it goes.
pub(crate) struct Recorded<B> {
    body: B,
    finish: Option<Finish>,
}

impl<B> Recorded<B> {
    pub(crate) fn new(body: B, finish: Finish) -> Self {
        Recorded {
            body,
            finish: Some(finish),
        }
    }
}

impl<B> http_body::Body for Recorded<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let (Poll::Ready(Some(_)), Some(finish)) = (&frame, &this.finish) {
            finish.first_byte();
        }
        if let Poll::Ready(None) = frame {
            // Sent: recorded now.
            this.finish.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::row::cut_by_limits_set;
    use super::*;
    use crate::metrics::{Outcome, SampleEnd};
    use crate::upstream::open::LimitSet;

    use crate::test_log::Lines;

    /// A chat request's arrival, without a key.
    fn arrival() -> Arrival {
        Arrival {
            api: "chat",
            key: None,
            counted_as: None,
        }
    }

    #[test]
    fn a_recorded_body_makes_its_record_at_its_end_not_before() {
        use http_body::Body as _;
        use http_body_util::BodyExt;
        let sinks = Sinks::metrics_only();
        let lines = Lines::default();
        lines.capture(|| {
            // A request refused after its tries began: its record is its log line.
            let mut finish = Finish::new(sinks, &HeaderMap::new(), arrival());
            finish.opening(Opening {
                tries: Arc::default(),
                limits_set: Arc::default(),
                reservation: None,
            });
            let e = ApiError::new(
                axum::http::StatusCode::BAD_GATEWAY,
                "upstream_error",
                "down",
            )
            .code("upstream_failed");
            finish.refused(&e);
            let body = http_body_util::Full::new(Bytes::from_static(b"{}"));
            let mut body = Recorded::new(body, finish);
            assert_eq!(
                body.size_hint().exact(),
                Some(2),
                "its length is the body's"
            );
            futures::executor::block_on(async {
                let frame = body.frame().await.unwrap().unwrap();
                assert_eq!(frame.into_data().unwrap(), &b"{}"[..]);
                assert!(lines.text().is_empty(), "recorded before its end");
                assert!(body.frame().await.is_none());
            });
            let text = lines.text();
            assert!(
                text.contains(" request ") && text.contains("ended=\"upstream_failed\""),
                "{text}"
            );
            drop(body);
            assert_eq!(lines.text(), text, "recorded once");
        });
    }

    /// Each stage without a run is recorded once, as it says: a request dropped while it is
    /// read (its client gone), and one refused before its run (its code and tries).
    #[test]
    fn a_stage_without_a_run_is_recorded_once_as_it_says() {
        let sinks = Sinks::metrics_only();
        let lines = Lines::default();
        lines.capture(|| {
            let mut finish = Finish::new(sinks.clone(), &HeaderMap::new(), arrival());
            finish.read(Asked {
                model: "m".into(),
                configured: true,
                stream: false,
            });
            drop(finish);
            let text = lines.text();
            assert_eq!(text.matches(" request ").count(), 1, "{text}");
            assert!(text.contains("ended=\"client_gone\""), "{text}");
            let mut finish = Finish::new(sinks.clone(), &HeaderMap::new(), arrival());
            let e = ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "invalid_request_error",
                "no",
            )
            .code("model_not_found");
            finish.refused(&e);
            // A second refusal does not change what the first decided.
            finish.refused(&ApiError::invalid("late"));
            drop(finish);
            let text = lines.text();
            assert_eq!(text.matches(" request ").count(), 2, "{text}");
            let last = text.lines().last().unwrap_or_default();
            assert!(last.contains("ended=\"model_not_found\""), "{text}");
        });
    }

    #[test]
    fn a_length_stop_is_named_only_where_the_gateway_set_the_limit() {
        let end = |sample: u32, finish: &str| SampleEnd {
            sample: Some(sample),
            finish: finish.into(),
            message: choicewise_core::Message::assistant(""),
            ..SampleEnd::default()
        };
        let outcome = Outcome {
            samples: vec![end(0, "length"), end(1, "stop"), end(2, "length")],
            ..Outcome::default()
        };
        let set = |sample: u32| LimitSet {
            sample,
            upstream: "anthropic:claude@127.0.0.1:1".into(),
            max_tokens: 8192,
        };
        // Samples 0 and 1 had the gateway's limit; 2 its client's own.
        let limits = [set(0), set(1)];
        let cut = cut_by_limits_set(&outcome, &limits);
        assert_eq!(cut.iter().map(|l| l.sample).collect::<Vec<_>>(), [0]);
        assert!(cut_by_limits_set(&outcome, &[]).is_empty());
    }
}
