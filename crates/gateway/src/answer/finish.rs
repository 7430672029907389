//! A request's end, accounted: its metrics, its log line and its span, recorded when its
//! answer's body ends or is dropped, synchronously (no task is spawned for it).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use axum::http::HeaderMap;

use crate::answer::closing::{Closing, until_closed};
use crate::answer::ending::{AnswerEnd, Ended, ErrorType, Initiator};
use crate::error::ApiError;
use crate::metrics::{Metrics, Outcome};
use crate::traces::{RequestSpan, Traces};
use crate::upstream::engine::{Picked, Run};
use crate::upstream::open::TryRecord;
use crate::upstream::resilience;

mod row;

pub(crate) use row::log_unrun;

/// A request's record, from its arrival: where it is in its life ([`Stage`]), its run once
/// it started, and what its record needs. The answer reads what the run came to
/// ([`settle`](State::settle)) once its samples are over, before its last bytes; the record
/// (metrics, log line, span) is made, without waiting for anything and without a task, when
/// the `Finish` is dropped with the answer's body: when the body ended, or its client went
/// away (then the samples still running are cancelled, closing their upstreams, and the
/// record says what they had received: [`Run::outcome_now`]).
pub(crate) struct Finish(Box<State>);

/// Where a request is in its life: the one state its record is made from when it is
/// dropped, moved only by the transitions of [`State`] (as hyper's connection `State` or
/// h2's stream state).
///
/// ```text
/// Reading ──refused(e)──▶ Refused { code, status }
///    │
///    └──started(run)──▶ Running { run, outputs, settled, ended }
///                          picked: its outputs; settle/settled: what it came to;
///                          answered(verdict) or fail(why): how it ended
///                          └──both known──▶ Done { settled, ended }   (the run let go)
///
/// dropped:  Reading ▶ its client gone · Refused ▶ the refusal · Done ▶ its record
///           Running ▶ closed: not decided, its samples cancelled by its client (the
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
    /// What its run came to and how it ended, both known: nothing is left to cancel.
    Done { settled: Settled, ended: Ended },
}

/// A started run and what is known of it so far. A whole answer reads what it came to
/// before its verdict; a streamed one decides its verdict before its last upstream ends:
/// each is kept until both are known.
struct Running {
    run: Run,
    /// Its output samples, once picked (`None`: every sample is an output).
    outputs: Option<Vec<u32>>,
    settled: Option<Settled>,
    ended: Option<Ended>,
}

impl Running {
    /// The request is over with its run in this state: what it came to and how it ended.
    /// Not decided, its client went away: its samples still running are cancelled (their
    /// upstreams closed) and what they had received is read now.
    fn close(self) -> (Settled, Ended) {
        let Running {
            run,
            outputs,
            settled,
            ended,
        } = self;
        let ended = ended.unwrap_or_else(|| {
            run.stop(Initiator::Client);
            Ended::ClientGone
        });
        // No client waits any more: an upstream read held back for it goes on, so that its
        // reader sees the cancel and closes it rather than waiting on the gate for ever.
        run.pace.release();
        let settled = settled.unwrap_or_else(|| Settled::now(&run, outputs.as_deref()));
        (settled, ended)
    }
}

/// A [`Finish`]'s fields, on the heap: the record goes along the request's path (its
/// handler, its answer, its body), and moving it moves a pointer.
pub(crate) struct State {
    metrics: Arc<Metrics>,
    /// The configured model asked for, once known (empty for any other): the metrics' label.
    model: String,
    /// The model asked for, configured or not, once read: the span's.
    asked: Option<String>,
    /// The API the client spoke, as the metrics name it (`chat`, `messages`, `responses`).
    api: &'static str,
    /// The request's id (`x-request-id`), named in its log line.
    request_id: String,
    arrived: Instant,
    /// The wall clock when it arrived: its span's start, the monotonic clock giving the rest.
    arrived_at: SystemTime,
    /// Who the request comes from, for the ejection rules.
    client: resilience::ClientId,
    /// With traces on, the traces and the trace the request belongs to, until its span is
    /// made.
    traces: Option<Arc<Traces>>,
    parent: Option<opentelemetry::Context>,
    /// The request's tries, once its upstreams are tried: counted in `x-choicewise-tries`,
    /// on a failure too.
    tries: Option<Arc<Mutex<Vec<TryRecord>>>>,
    /// The limits the gateway set on its samples' requests, the client having stated none.
    limits_set: Option<Arc<Mutex<Vec<crate::upstream::open::LimitSet>>>>,
    /// The request's span, with traces on.
    span: Option<RequestSpan>,
    /// Where it is in its life.
    stage: Stage,
    /// The model named, shared with the count of a request whose client goes away before
    /// any answer (`admission::layers::count`).
    counted_as: Option<crate::metrics::RequestModel>,
    /// The name of the key that sent the request (`(unnamed)` for a key of `keys_env`; none
    /// without `[auth]`): in the log line, the span and the metrics by key.
    key: Option<Arc<str>>,
    /// What the request reserved of its limits, replaced by what it came to when it is
    /// recorded.
    reservation: Option<crate::quota::Reservation>,
    /// `[records]`' writer, with records on: the request's row is handed to it.
    records: Option<Arc<crate::records::Records>>,
    /// The answer was asked streamed.
    stream: bool,
    /// From the request's arrival to its answer's first byte, once sent.
    first_byte: std::sync::OnceLock<std::time::Duration>,
    /// The pick asked for and how it decided (`decided`, `undecided`, `timed_out`, `none`),
    /// once picked (`None`: `all`).
    pick: Option<(&'static str, &'static str)>,
}

/// How long a failed request's answer waits for its cancelled samples to end, to account
/// for them as they ended.
const SETTLE_AFTER_CANCEL: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a streamed answer's body, its last event written, waits for its upstreams to end
/// (their usage), before those still open are closed and the run is read as it stands.
const SETTLE_AFTER_ANSWER: std::time::Duration = std::time::Duration::from_secs(2);

/// What a run came to, read when its samples are over.
pub(crate) struct Settled {
    outcome: Outcome,
    tries: Vec<TryRecord>,
    samples: u32,
    /// Updates whose message data came after their choice's finish, left out of the answer.
    after_finish: usize,
    /// The output samples of a selection (`None`: every sample is an output).
    outputs: Option<Vec<u32>>,
}

impl Settled {
    /// What `run` came to, once its samples are over (`outputs`: as [`Finish::outputs`]).
    pub(crate) async fn read(run: &Run, outputs: Option<&[u32]>) -> Settled {
        Settled {
            outcome: run.outcome(outputs).await,
            tries: run.tries(),
            samples: run.samples,
            after_finish: run.dropped_after_finish(),
            outputs: outputs.map(<[u32]>::to_vec),
        }
    }

    /// What `run` came to so far, without waiting: its samples still open counted as
    /// cancelled (they are being), their tokens what they had received.
    fn now(run: &Run, outputs: Option<&[u32]>) -> Settled {
        Settled {
            outcome: run.outcome_now(outputs),
            tries: run.tries(),
            samples: run.samples,
            after_finish: run.dropped_after_finish(),
            outputs: outputs.map(<[u32]>::to_vec),
        }
    }
}

/// Where a request's record goes: the metrics, the traces (with `[telemetry]`), the records
/// writer (with `[records]`, once started).
#[derive(Clone)]
pub(crate) struct Sinks {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) traces: Option<Arc<Traces>>,
    pub(crate) records: Option<Arc<crate::records::Records>>,
}

#[cfg(test)]
impl Sinks {
    /// Metrics of their own, no traces, no records: a unit test's.
    fn metrics_only() -> Sinks {
        Sinks {
            metrics: Arc::new(Metrics::new()),
            traces: None,
            records: None,
        }
    }
}

impl Finish {
    /// The record of a request arriving now with these headers, from `client`, made into
    /// `sinks`; `counted_as` learns its model (the count layer's, when there is one).
    pub(crate) fn new(
        sinks: Sinks,
        headers: &HeaderMap,
        client: resilience::ClientId,
        counted_as: Option<crate::metrics::RequestModel>,
    ) -> Finish {
        let Sinks {
            metrics,
            traces,
            records,
        } = sinks;
        if let Some(counted) = &counted_as {
            counted.recorded();
        }
        Finish(Box::new(State {
            metrics,
            model: String::new(),
            asked: None,
            api: "",
            request_id: (headers.get("x-request-id"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .unwrap_or_default(),
            arrived: Instant::now(),
            arrived_at: SystemTime::now(),
            client,
            parent: traces.as_ref().map(|_| Traces::parent(headers)),
            traces,
            tries: None,
            limits_set: None,
            span: None,
            stage: Stage::Reading,
            counted_as,
            key: None,
            reservation: None,
            records,
            stream: false,
            first_byte: std::sync::OnceLock::new(),
            pick: None,
        }))
    }
}

impl std::ops::Deref for Finish {
    type Target = State;

    fn deref(&self) -> &State {
        &self.0
    }
}

impl std::ops::DerefMut for Finish {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.0
    }
}

impl State {
    /// The request was answered with `e`: before its run began, its span is made now (a
    /// run's is made with its record).
    pub(crate) fn refused(&mut self, e: &ApiError) {
        if let (Some(traces), Some(parent)) = (&self.traces, self.parent.take()) {
            traces.record_error(&parent, self.arrived.elapsed(), self.asked.as_deref(), e);
        }
        // A run that failed before its answer began says how ([`fail`](Self::fail)); a
        // request without one is recorded as refused, its log line naming its code (and its
        // tries, if any).
        if let Stage::Reading = self.stage {
            self.stage = Stage::Refused {
                code: e.code.as_deref().unwrap_or("refused").to_string(),
                status: e.status.as_u16(),
            };
        }
    }

    /// The request was sent with the key of this name (its label: `(unnamed)` for a key of
    /// `keys_env`).
    pub(crate) fn key(&mut self, name: Arc<str>) {
        self.key = Some(name);
    }

    /// What the request reserved of its limits: settled by its record.
    pub(crate) fn reserved(&mut self, reservation: crate::quota::Reservation) {
        self.reservation = Some(reservation);
    }

    /// The model asked for, configured or not, once read: the span's.
    pub(crate) fn asked(&mut self, model: &str) {
        self.asked = Some(model.to_string());
    }

    /// The answer was asked streamed (its record's `stream`).
    pub(crate) fn streamed(&mut self, stream: bool) {
        self.stream = stream;
    }

    /// Whether its samples' messages must be kept: for its record's samples (`samples =
    /// true`).
    pub(crate) fn records_samples(&self) -> bool {
        self.records.as_ref().is_some_and(|r| r.samples())
    }

    /// The answer's first byte is being sent: its time, once.
    pub(crate) fn first_byte(&self) {
        if self.first_byte.get().is_none() {
            let _ = self.first_byte.set(self.arrived.elapsed());
        }
    }

    /// The request is of this API (its metrics' `api` label).
    pub(crate) fn api(&mut self, api: &'static str) {
        self.api = api;
    }

    /// The request is for this configured model: its metrics' label.
    pub(crate) fn named(&mut self, model: String) {
        if let Some(counted) = &self.counted_as {
            counted.set(&model);
        }
        self.model = model;
    }

    /// The configured model asked for (empty for any other): the metrics' label.
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// The request's id (`x-request-id`).
    pub(crate) fn request_id(&self) -> &str {
        &self.request_id
    }

    /// When the request arrived.
    pub(crate) fn arrived(&self) -> Instant {
        self.arrived
    }

    /// Who the request comes from.
    pub(crate) fn client(&self) -> resilience::ClientId {
        self.client
    }

    /// The request's tries, once its upstreams are tried.
    pub(crate) fn tries(&self) -> Option<Arc<Mutex<Vec<TryRecord>>>> {
        self.tries.clone()
    }

    /// The request's upstreams are tried: its tries, and the limits the gateway set on them,
    /// as they are made.
    pub(crate) fn opening(
        &mut self,
        tries: Arc<Mutex<Vec<TryRecord>>>,
        limits_set: Arc<Mutex<Vec<crate::upstream::open::LimitSet>>>,
    ) {
        self.tries = Some(tries);
        self.limits_set = Some(limits_set);
    }

    /// The trace the request belongs to, for its span (once: with traces on).
    pub(crate) fn take_parent(&mut self) -> Option<opentelemetry::Context> {
        self.parent.take()
    }

    /// The run started: the record holds it from now until its answer is sent, so that a
    /// client that goes away while its samples open or its pick is undecided is recorded
    /// as any other (its samples cancelled, what they had received counted).
    pub(crate) fn started(&mut self, run: Run) {
        debug_assert!(matches!(self.stage, Stage::Reading), "one run per request");
        self.stage = Stage::Running(Running {
            run,
            outputs: None,
            settled: None,
            ended: None,
        });
    }

    /// The run, while it runs.
    fn running(&self) -> Option<&Running> {
        match &self.stage {
            Stage::Running(running) => Some(running),
            _ => None,
        }
    }

    /// The run, while it runs, to be written.
    fn running_mut(&mut self) -> Option<&mut Running> {
        match &mut self.stage {
            Stage::Running(running) => Some(running),
            _ => None,
        }
    }

    /// The run, to pick its samples.
    pub(crate) fn run_mut(&mut self) -> &mut Run {
        let running = self.running_mut();
        &mut running
            .expect("a Finish holds its run until its answer is built")
            .run
    }

    /// The request's span, with traces on, made once its run started: ended with its
    /// record, whenever its client leaves.
    pub(crate) fn traced(&mut self, span: RequestSpan) {
        self.span = Some(span);
    }

    /// The run picked by `rule` (any but `all`, whose outputs are every sample): its output
    /// samples, and how the pick ended ([`Picked::how_decided`]).
    pub(crate) fn picked(&mut self, rule: &'static str, picked: &Picked) {
        self.pick = Some((rule, picked.how_decided()));
        if let Some(running) = self.running_mut() {
            running.outputs = Some(picked.samples.clone());
        }
    }

    /// The output samples of a selection (`None`: every sample is an output).
    pub(crate) fn outputs(&self) -> Option<&[u32]> {
        self.running().and_then(|r| r.outputs.as_deref())
    }

    /// The answer's id, named in the span.
    pub(crate) fn response_id(&mut self, id: &Arc<str>) {
        if let Some(span) = &mut self.span {
            span.response_id = Some(id.clone());
        }
    }

    /// The request's metrics.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The answer ended so: its verdict, which the record reads. The answer is decided:
    /// its samples are not its client's to cancel any more.
    pub(crate) fn answered(&mut self, end: AnswerEnd) {
        self.ended(Ended::Answer(end));
    }

    /// The run ended so (its answer's verdict, or a failure before its answer began).
    fn ended(&mut self, ended: Ended) {
        if let Some(running) = self.running_mut() {
            running.ended = Some(ended);
        }
        self.done_when_known();
    }

    /// What the run came to, read by the answer.
    pub(crate) fn settled(&mut self, settled: Settled) {
        if let Some(running) = self.running_mut() {
            running.settled = Some(settled);
        }
        self.done_when_known();
    }

    /// The run, until what it came to and how it ended are both known.
    pub(crate) fn run(&self) -> &Run {
        let running = self.running();
        &running
            .expect("a Finish holds its run until its answer is built")
            .run
    }

    /// Once what the run came to and how it ended are both known, the run (and the samples'
    /// texts it holds) is let go: `Done`.
    fn done_when_known(&mut self) {
        let known = self
            .running()
            .is_some_and(|r| r.settled.is_some() && r.ended.is_some());
        if !known {
            return;
        }
        let Stage::Running(running) = std::mem::replace(&mut self.stage, Stage::Reading) else {
            return;
        };
        let (settled, ended) = running.close();
        self.stage = Stage::Done { settled, ended };
    }

    /// A streamed answer's first chunk is written: its time, in the metrics and the span.
    pub(crate) fn first_chunk(&self) {
        let after = self.arrived.elapsed();
        let _ = self.first_byte.set(after);
        self.metrics.first_chunk(&self.model, after);
        if let Some(span) = &self.span {
            let _ = span.first_chunk.set(after);
        }
    }

    /// Reads what the run came to, once its samples are over: the answer awaits it before
    /// its last bytes, so that the record needs nothing more.
    pub(crate) async fn settle(&mut self) {
        let Some(running) = self.running().filter(|r| r.settled.is_none()) else {
            return;
        };
        let settled = Settled::read(&running.run, running.outputs.as_deref()).await;
        self.settled(settled);
    }

    /// As [`settle`](Self::settle), unless the answer is cut short first (the gateway's
    /// close, the request's deadline): then the samples still running are cancelled, and
    /// what they came to is read.
    pub(crate) async fn settle_until_closed(&mut self, closing: &mut Closing) {
        let Some(running) = self.running().filter(|r| r.settled.is_none()) else {
            return;
        };
        let (run, outputs) = (&running.run, running.outputs.as_deref());
        let settled = until_closed(Settled::read(run, outputs), closing, run).await;
        self.settled(settled);
    }

    /// A streamed answer's last event is written: as [`settle_until_closed`](Self::settle_until_closed)
    /// for at most [`SETTLE_AFTER_ANSWER`], so that an upstream silent after its last
    /// choice's finish cannot hold the body's end (and its slot); then the samples still
    /// running are cancelled, and what they came to is read.
    pub(crate) async fn settle_after_answer(&mut self, closing: &mut Closing) {
        let settled = self.settle_until_closed(closing);
        if tokio::time::timeout(SETTLE_AFTER_ANSWER, settled)
            .await
            .is_ok()
        {
            return;
        }
        if let Some(running) = self.running() {
            // The answer is written: the samples still open are no longer needed.
            running.run.stop(Initiator::Pick);
        }
        let _ = tokio::time::timeout(SETTLE_AFTER_CANCEL, self.settle()).await;
    }

    /// The request fails with `why` (the span's `error.type`) before its answer began: its
    /// samples are cancelled and what they came to read.
    pub(crate) async fn fail(&mut self, why: ErrorType) {
        if let Some(running) = self.running_mut() {
            running.run.stop(match why {
                ErrorType::RequestDeadline => {
                    Initiator::Gateway(crate::answer::ending::Cut::PastDeadline)
                }
                _ => Initiator::Pick,
            });
            running.ended = Some(Ended::Failed(why));
        }
        // Cancelled, the samples end at once; what one that does not end in time had is read
        // as it stands when the record is made.
        let _ = tokio::time::timeout(SETTLE_AFTER_CANCEL, self.settle()).await;
    }

    /// The request's metrics, log line and span, from what its run came to and how it
    /// ended.
    fn record(&mut self, settled: Settled, ended: &Ended) {
        let ended_at = Instant::now();
        let took = ended_at.duration_since(self.arrived);
        let Settled {
            outcome,
            tries,
            samples,
            after_finish,
            outputs,
        } = settled;
        // A choice no sample asked for (an upstream asked for 3 that sent a fourth) is
        // accounted with no sample, and left out of the answer.
        let past_asked = (outcome.samples.iter())
            .filter(|s| s.sample.is_none())
            .count();
        if past_asked > 0 {
            tracing::warn!(
                request_id = %self.request_id,
                model = %self.model,
                choices = past_asked,
                asked = samples,
                "an upstream sent choices past those it was asked for: left out of the answer"
            );
        }
        if after_finish > 0 {
            // Streamed or not, an answer is each choice as it was at its finish.
            tracing::warn!(
                request_id = %self.request_id,
                model = %self.model,
                updates = after_finish,
                "data after a choice's finish left out of the answer"
            );
        }
        // Every label from the one verdict.
        let (label, span_error) = (ended.label(), ended.span_error());
        self.metrics
            .finished(&self.model, self.api, label, took, &outcome);
        if let Some(key) = &self.key {
            (self.metrics).key_tokens(key, outcome.prompt_tokens, outcome.completion_tokens);
        }
        if let Some(reservation) = self.reservation.take() {
            // Every started sample counts what it generated, a cancelled one too.
            reservation.settle(crate::quota::Counted {
                samples: outcome.samples.len() as u64,
                prompt_tokens: outcome.prompt_tokens,
                completion_tokens: outcome.completion_tokens,
            });
        }
        // The request's line in the operator's log.
        tracing::info!(
            request_id = %self.request_id,
            key = self.key.as_deref().unwrap_or_default(),
            model = %self.model,
            samples,
            tries = tries.len(),
            failed_tries = tries.iter().filter(|t| t.outcome != resilience::Outcome::Ok).count(),
            prompt_tokens = outcome.prompt_tokens,
            completion_tokens = outcome.completion_tokens,
            estimated = outcome.estimated,
            duration_ms = took.as_millis() as u64,
            ended = label,
            "request"
        );
        self.name_cut_by_default_limit(&outcome);
        if self.records.is_some() {
            // A client that left after its answer began was answered: a stream's 200 went
            // with its first byte, and the row says so (its `ended`, why it ended).
            let status = match (ended.client_gone(), self.first_byte.get()) {
                (true, Some(_)) => 200,
                _ => ended.status(),
            };
            self.write_record(Some(&outcome), status, label, took);
        }
        if let Some(mut span) = self.span.take() {
            span.key = self.key.clone();
            span.end(
                crate::traces::Lasted {
                    arrived: self.arrived,
                    arrived_at: self.arrived_at,
                    ended: ended_at,
                },
                &outcome,
                &tries,
                outputs.as_deref(),
                span_error,
                !ended.client_gone(),
            );
        }
    }
}

impl Drop for Finish {
    /// Exactly one record, whenever the client left: as its stage says.
    fn drop(&mut self) {
        let this = &mut *self.0;
        match std::mem::replace(&mut this.stage, Stage::Reading) {
            Stage::Reading => this.record_gone(),
            Stage::Refused { code, status } => this.record_refused(&code, status),
            Stage::Running(running) => {
                let (settled, ended) = running.close();
                this.record(settled, &ended);
            }
            Stage::Done { settled, ended } => this.record(settled, &ended),
        }
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
    use crate::metrics::SampleEnd;
    use crate::upstream::open::LimitSet;

    use crate::test_log::Lines;

    #[test]
    fn a_recorded_body_makes_its_record_at_its_end_not_before() {
        use http_body::Body as _;
        use http_body_util::BodyExt;
        let sinks = Sinks::metrics_only();
        let lines = Lines::default();
        lines.capture(|| {
            // A request refused after its tries began: its record is its log line.
            let mut finish = Finish::new(sinks, &HeaderMap::new(), 0, None);
            finish.opening(Arc::default(), Arc::default());
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
            let mut finish = Finish::new(sinks.clone(), &HeaderMap::new(), 0, None);
            finish.named("m".into());
            drop(finish);
            let text = lines.text();
            assert_eq!(text.matches(" request ").count(), 1, "{text}");
            assert!(text.contains("ended=\"client_gone\""), "{text}");
            let mut finish = Finish::new(sinks.clone(), &HeaderMap::new(), 0, None);
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
