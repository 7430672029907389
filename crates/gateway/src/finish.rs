//! A request's end, accounted: its metrics, its log line and its span.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::Run;
use crate::metrics::Metrics;
use crate::resilience;
use crate::traces::RequestSpan;

/// A request's run, accounted in the metrics (and its span made, with traces on) when it is
/// dropped: when its answer ended, or its client went away (then its samples are cancelled
/// first, closing their upstreams).
pub(crate) struct Finish {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) model: String,
    /// The request's id (`x-request-id`), named in its log line.
    pub(crate) request_id: String,
    pub(crate) arrived: Instant,
    /// The output samples of a selection (`None`: every sample is an output).
    pub(crate) outputs: Option<Vec<u32>>,
    /// The answer was sent to its end.
    pub(crate) completed: bool,
    /// The request's span, with traces on.
    pub(crate) span: Option<RequestSpan>,
    /// Why the request was answered with an error, if it was (the span's `error.type`).
    pub(crate) failure: Option<&'static str>,
    pub(crate) run: Option<Run>,
}

impl Finish {
    pub(crate) fn run(&self) -> &Run {
        self.run
            .as_ref()
            .expect("a Finish holds its run until dropped")
    }

    /// A streamed answer's first chunk is written: its time, in the metrics and the span.
    pub(crate) fn first_chunk(&self) {
        let after = self.arrived.elapsed();
        self.metrics.first_chunk(&self.model, after);
        if let Some(span) = &self.span {
            let _ = span.first_chunk.set(after);
        }
    }

    /// The answer was sent to its end: its samples need no cancel.
    pub(crate) fn complete(&mut self) {
        self.completed = true;
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let Some(run) = self.run.take() else { return };
        if !self.completed {
            run.completions.cancel_except(&[]);
        }
        // No client waits any more: an upstream read held back for it goes on, so that its
        // reader sees the cancel and closes it rather than waiting on the gate for ever.
        run.pace.release();
        // When the answer ended: the span's end, even though it is made after the run's
        // upstreams have ended and been counted (`end - took` is then the request's arrival).
        let (took, ended_at) = (self.arrived.elapsed(), std::time::SystemTime::now());
        let request_id = std::mem::take(&mut self.request_id);
        let (metrics, model, outputs, span, failure, completed) = (
            self.metrics.clone(),
            std::mem::take(&mut self.model),
            self.outputs.take(),
            self.span.take(),
            self.failure,
            self.completed,
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let outcome = run.outcome(outputs.as_deref()).await;
                metrics.finished(&model, took, &outcome);
                // The request's line in the operator's log.
                let tries = run.tries();
                let ended = match (completed, failure) {
                    (_, Some(why)) => why,
                    (true, None) => "complete",
                    (false, None) => "client_gone",
                };
                tracing::info!(
                    request_id = %request_id,
                    model = %model,
                    samples = run.samples,
                    tries = tries.len(),
                    failed_tries = tries.iter().filter(|t| t.outcome != resilience::Outcome::Ok).count(),
                    prompt_tokens = outcome.prompt_tokens,
                    completion_tokens = outcome.completion_tokens,
                    estimated = outcome.estimated,
                    duration_ms = took.as_millis() as u64,
                    ended,
                    "request"
                );
                if let Some(span) = span {
                    let arrived_at = ended_at.checked_sub(took).unwrap_or(ended_at);
                    span.end(arrived_at..ended_at, &outcome, &tries, outputs.as_deref(), failure, completed);
                }
            });
        }
    }
}
