//! Where a request's record goes ([`Sinks`]) and what it is made of ([`Record`]): the sinks
//! make, from the record and how the request ended ([`End`]), its metrics, its log line, the
//! settlement of its limits, its records row ([`super::row`]) and its span.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::labels::Labels;
use super::running::Settled;
use crate::answer::ending::{Ended, ErrorType};
use crate::error::ApiError;
use crate::metrics::{Metrics, Outcome};
use crate::traces::{RequestSpan, Traces};
use crate::upstream::open::{LimitSet, TryRecord};
use crate::upstream::resilience;

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
    pub(super) fn metrics_only() -> Sinks {
        Sinks {
            metrics: Arc::new(Metrics::new()),
            traces: None,
            records: None,
        }
    }
}

/// A request's record, as data: what is known of it besides its run, filled in as it is
/// served.
pub(crate) struct Record {
    pub(crate) labels: Labels,
    pub(crate) arrived: Instant,
    /// The wall clock when it arrived: its span's start, the monotonic clock giving the rest.
    pub(crate) arrived_at: SystemTime,
    /// With traces on, the trace the request belongs to, until its span is made.
    pub(crate) parent: Option<opentelemetry::Context>,
    /// The request's tries, once its upstreams are tried: counted in `x-choicewise-tries`,
    /// on a failure too.
    pub(crate) tries: Option<Arc<Mutex<Vec<TryRecord>>>>,
    /// The limits the gateway set on its samples' requests, the client having stated none.
    pub(crate) limits_set: Option<Arc<Mutex<Vec<LimitSet>>>>,
    /// The request's span, with traces on, once its run started.
    pub(crate) span: Option<RequestSpan>,
    /// What the request reserved of its limits, settled by what it came to.
    pub(crate) reservation: Option<crate::quota::Reservation>,
    /// From the request's arrival to its answer's first byte, once sent.
    pub(crate) first_byte: OnceLock<Duration>,
    /// The pick asked for and how it decided (`decided`, `undecided`, `timed_out`, `none`),
    /// once picked (`None`: `all`).
    pub(crate) pick: Option<(&'static str, &'static str)>,
}

/// How a request ended, for its record.
pub(crate) enum End {
    /// Its client went away before its run began.
    Gone,
    /// Answered with an error before its run began: its code and status.
    Refused { code: String, status: u16 },
    /// Its run came to `settled` and ended so.
    Ran { settled: Settled, ended: Ended },
}

impl Sinks {
    /// `record`'s span, for a request refused with `e` before its run began: made at once.
    pub(super) fn refusal_span(&self, record: &mut Record, e: &ApiError) {
        if let (Some(traces), Some(parent)) = (&self.traces, record.parent.take()) {
            let asked = record.labels.asked.as_deref();
            traces.record_error(&parent, record.arrived.elapsed(), asked, e);
        }
    }

    /// The request's metrics, log line, limits' settlement, row and span, from `record`
    /// and how it ended: once, when its record is dropped.
    pub(super) fn write(&self, record: &mut Record, end: End) {
        match end {
            End::Gone => self.gone(record),
            End::Refused { code, status } => self.refused(record, &code, status),
            End::Ran { settled, ended } => self.ran(record, settled, &ended),
        }
    }

    /// A request whose client went away before any answer and before its run began (its
    /// body still arriving, its samples opening): counted as gone, logged, and its span made.
    fn gone(&self, record: &Record) {
        let ended = ErrorType::ClientGone.as_str();
        let took = record.arrived.elapsed();
        let labels = &record.labels;
        (self.metrics).finished(&labels.model, labels.api, ended, took, &Outcome::default());
        record.log_unrun(ended);
        if let (Some(traces), Some(parent)) = (&self.traces, &record.parent) {
            traces.record_gone(parent, took, labels.asked.as_deref());
        }
        let status = ErrorType::ClientGone.status().as_u16();
        self.write_row(record, None, status, ended, took);
    }

    /// The log line of a request refused (its metrics are the refusal's, counted by the
    /// layers; its span was made when it was refused): every try, if any began, each failed.
    fn refused(&self, record: &Record, code: &str, status: u16) {
        record.log_unrun(code);
        self.write_row(record, None, status, code, record.arrived.elapsed());
    }

    /// A request that ran: what its run came to (`settled`) and how it ended.
    fn ran(&self, record: &mut Record, settled: Settled, ended: &Ended) {
        let ended_at = Instant::now();
        let took = ended_at.duration_since(record.arrived);
        let Settled {
            outcome,
            tries,
            samples,
            after_finish,
            outputs,
        } = settled;
        let labels = &record.labels;
        record.warn_left_out(&outcome, samples, after_finish);
        // Every label from the one verdict.
        let (label, span_error) = (ended.label(), ended.span_error());
        (self.metrics).finished(&labels.model, labels.api, label, took, &outcome);
        if let Some(key) = &labels.key {
            (self.metrics).key_tokens(key, outcome.prompt_tokens, outcome.completion_tokens);
        }
        if let Some(reservation) = record.reservation.take() {
            // Every started sample counts what it generated, a cancelled one too.
            reservation.settle(crate::quota::Counted {
                samples: outcome.samples.len() as u64,
                prompt_tokens: outcome.prompt_tokens,
                completion_tokens: outcome.completion_tokens,
            });
        }
        // The request's line in the operator's log.
        tracing::info!(
            request_id = %labels.request_id,
            key = labels.key(),
            model = %labels.model,
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
        record.name_cut_by_default_limit(&outcome);
        // A client that left after its answer began was answered: a stream's 200 went with
        // its first byte, and the row says so (its `ended`, why it ended).
        let status = match (ended.client_gone(), record.first_byte.get()) {
            (true, Some(_)) => 200,
            _ => ended.status(),
        };
        self.write_row(record, Some(&outcome), status, label, took);
        if let Some(mut span) = record.span.take() {
            span.key = record.labels.key.clone();
            let lasted = crate::traces::Lasted {
                arrived: record.arrived,
                arrived_at: record.arrived_at,
                ended: ended_at,
            };
            let answered = !ended.client_gone();
            span.end(
                lasted,
                &outcome,
                &tries,
                outputs.as_deref(),
                span_error,
                answered,
            );
        }
    }
}

impl Record {
    /// Warns of what the answer left out: choices no sample asked for (an upstream asked for
    /// 3 that sent a fourth: accounted with no sample), and data after a choice's finish
    /// (streamed or not, an answer is each choice as it was at its finish).
    fn warn_left_out(&self, outcome: &Outcome, samples: u32, after_finish: usize) {
        let Labels {
            request_id, model, ..
        } = &self.labels;
        let past_asked = (outcome.samples.iter())
            .filter(|s| s.sample.is_none())
            .count();
        if past_asked > 0 {
            tracing::warn!(
                request_id = %request_id,
                model = %model,
                choices = past_asked,
                asked = samples,
                "an upstream sent choices past those it was asked for: left out of the answer"
            );
        }
        if after_finish > 0 {
            tracing::warn!(
                request_id = %request_id,
                model = %model,
                updates = after_finish,
                "data after a choice's finish left out of the answer"
            );
        }
    }
}
