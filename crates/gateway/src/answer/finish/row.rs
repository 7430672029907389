//! What a request leaves behind besides its metrics: its line in the operator's log, and its
//! row in the records (`[records]`), each sample's with it when `samples = true`.

use std::time::SystemTime;

use super::sinks::{Record, Sinks};
use crate::metrics::{Outcome, SampleEnded};
use crate::upstream::open::TryRecord;
use crate::upstream::resilience;

impl Sinks {
    /// `record`'s row, handed to `[records]`' writer (which never makes it wait), with
    /// records on: what it came to (`outcome`: none for a request that never ran), its
    /// status and why it ended.
    pub(super) fn write_row(
        &self,
        record: &Record,
        outcome: Option<&Outcome>,
        status: u16,
        ended: &str,
        took: std::time::Duration,
    ) {
        let Some(records) = &self.records else { return };
        let labels = &record.labels;
        let arrived_ms = SystemTime::now()
            .checked_sub(took)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as i64);
        let mut r =
            choicewise_records::RequestRecord::new(arrived_ms, &*labels.request_id, &labels.model);
        r.key = labels.key().to_string();
        r.api = labels.api.to_string();
        r.stream = labels.stream;
        if let Some((rule, decision)) = record.pick {
            r.pick = Some(rule.to_string());
            r.decision = Some(decision.to_string());
        }
        r.status = i64::from(status);
        r.ended = ended.to_string();
        r.first_byte_ms = record.first_byte.get().map(|d| d.as_secs_f64() * 1e3);
        r.total_ms = took.as_secs_f64() * 1e3;
        if let Some(outcome) = outcome {
            let count = |ended: SampleEnded| {
                (outcome.samples.iter())
                    .filter(|s| s.finish == ended)
                    .count()
            };
            r.samples_started = outcome.samples.len() as i64;
            r.samples_cancelled = count(SampleEnded::Cancelled) as i64;
            r.samples_failed = count(SampleEnded::Failed) as i64;
            r.prompt_tokens = outcome.prompt_tokens.min(i64::MAX as u64) as i64;
            r.completion_tokens = outcome.completion_tokens.min(i64::MAX as u64) as i64;
            r.estimated = outcome.estimated;
            r.sample_tokens = (outcome.samples.iter())
                .filter_map(|s| {
                    Some(choicewise_records::SampleTokens {
                        sample: s.sample?,
                        prompt: s.prompt_tokens,
                        completion: s.completion_tokens,
                        estimated: s.estimated,
                    })
                })
                .collect();
            r.cost_usd = records.cost(
                &labels.model,
                outcome.prompt_tokens,
                outcome.completion_tokens,
            );
            if records.samples() {
                r.samples = outcome.samples.iter().map(sample_row).collect();
            }
        }
        records.record(r);
    }
}

impl Record {
    /// The log line of a request that never ran: its tries, if any began, each failed.
    pub(super) fn log_unrun(&self, ended: &str) {
        let tries = match &self.tries {
            Some(tries) => tries.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            None => Vec::new(),
        };
        let labels = &self.labels;
        let took = self.arrived.elapsed();
        log_unrun(
            &labels.request_id,
            labels.key(),
            &labels.model,
            &tries,
            took,
            ended,
        );
    }

    /// Names in the log the samples that stopped at a limit the gateway set (`length`, the
    /// client having stated no limit): one line per request, with how many.
    pub(super) fn name_cut_by_default_limit(&self, outcome: &Outcome) {
        let Some(set) = &self.limits_set else { return };
        let set = set.lock().unwrap_or_else(|p| p.into_inner());
        let cut = cut_by_limits_set(outcome, &set);
        if let Some(first) = cut.first() {
            tracing::warn!(
                request_id = %self.labels.request_id,
                model = %self.labels.model,
                upstream = %first.upstream,
                max_tokens = first.max_tokens,
                samples = cut.len(),
                "an answer stopped at the max_tokens the gateway set (the request stated no limit): raise the upstream's max_tokens for more room"
            );
        }
    }
}

/// The `request` log line of a request that never ran (refused, or its client gone before
/// its run began): its tries, if any began, each failed; no sample, no token.
pub(crate) fn log_unrun(
    request_id: &str,
    key: &str,
    model: &str,
    tries: &[TryRecord],
    took: std::time::Duration,
    ended: &str,
) {
    tracing::info!(
        request_id = %request_id,
        key,
        model = %model,
        samples = 0,
        tries = tries.len(),
        failed_tries = tries.iter().filter(|t| t.outcome != resilience::Outcome::Ok).count(),
        prompt_tokens = 0,
        completion_tokens = 0,
        estimated = false,
        duration_ms = took.as_millis() as u64,
        ended,
        "request"
    );
}

/// A sample's row (`samples = true`): its texts kept up to
/// [`MAX_SAMPLE_TEXT`](crate::records::MAX_SAMPLE_TEXT) each.
fn sample_row(s: &crate::metrics::SampleEnd) -> choicewise_records::SampleRecord {
    use crate::records::{MAX_SAMPLE_TEXT, kept_text};
    let mut row = choicewise_records::SampleRecord::new(
        i64::from(s.sample.unwrap_or(u32::MAX)),
        s.finish.as_str(),
    );
    row.place = s.place.map(|p| p.min(i64::MAX as u64) as i64);
    row.output = s.output.map(i64::from);
    row.prompt_tokens = s.prompt_tokens.min(i64::MAX as u64) as i64;
    row.completion_tokens = s.completion_tokens.min(i64::MAX as u64) as i64;
    row.estimated = s.estimated;
    row.content = s.message.content.as_deref().map(kept_text);
    row.message = serde_json::to_string(&s.message)
        .ok()
        .filter(|m| m.len() <= MAX_SAMPLE_TEXT);
    row.logprobs = (s.logprobs.as_ref())
        .and_then(|l| serde_json::to_string(l).ok())
        .filter(|l| l.len() <= 4 * MAX_SAMPLE_TEXT);
    row
}

/// The limits set by the gateway that stopped a sample (`length`), one per such sample.
pub(super) fn cut_by_limits_set<'a>(
    outcome: &Outcome,
    set: &'a [crate::upstream::open::LimitSet],
) -> Vec<&'a crate::upstream::open::LimitSet> {
    (outcome.samples.iter())
        .filter(|s| s.finish.at_length())
        .filter_map(|s| set.iter().find(|l| Some(l.sample) == s.sample))
        .collect()
}
