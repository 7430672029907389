//! The gateway's Prometheus metrics (`GET /metrics`): what it served, what each choice became,
//! what the upstreams billed and what was generated for nothing, how long answers took, and
//! what is open now.
//!
//! Counted once per request, when its answer ends (or its client goes away): see
//! [`Metrics::finished`].

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod labels;
mod series;

use labels::*;
use series::Series;

fn seconds() -> Histogram {
    // 1 ms to about 2 min.
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// The most key names the metrics label their series with: the keys past them (keys made
/// over the admin API are not bounded by the configuration) are counted under
/// [`OTHER_KEYS`], so that `/metrics` stays bounded however many keys are made.
pub(crate) const MAX_KEY_LABELS: usize = 1000;

/// The `key` label of the keys past [`MAX_KEY_LABELS`].
pub(crate) const OTHER_KEYS: &str = "(other)";

/// The gateway's metrics and their registry.
pub(crate) struct Metrics {
    registry: Registry,
    /// The key names labelled so far (at most [`MAX_KEY_LABELS`]).
    key_labels: std::sync::RwLock<std::collections::HashSet<Arc<str>, foldhash::fast::RandomState>>,
    requests: Series<RequestLabels, Counter>,
    answers: Series<AnswerLabels, Counter>,
    choices: Series<ChoiceLabels, Counter>,
    tokens: Series<TokenLabels, Counter>,
    cancelled_tokens: Series<ModelLabels, Counter>,
    unselected_tokens: Series<ModelLabels, Counter>,
    first_chunk: Series<ModelLabels, Histogram, fn() -> Histogram>,
    duration: Series<ModelLabels, Histogram, fn() -> Histogram>,
    open_streams: Gauge<i64, AtomicI64>,
    open_upstreams: Gauge<i64, AtomicI64>,
    connections_refused: Counter,
    client_stalls: Counter,
    client_slow_drains: Counter,
    tries: Series<TryLabels, Counter>,
    ejected: Family<UpstreamLabels, Gauge<i64, AtomicI64>>,
    fallbacks: Family<FallbackLabels, Counter>,
    budget_exhausted: Counter,
    overload_refused: Counter,
    overloaded: Gauge<i64, AtomicI64>,
    panic_routed: Family<ModelLabels, Counter>,
    key_requests: Series<KeyLabels, Counter>,
    key_tokens: Series<KeyTokenLabels, Counter>,
    limit_refusals: Family<LimitLabels, Counter>,
    state_errors: Family<StateLabels, Counter>,
    state_failing: Gauge<i64, AtomicI64>,
    /// `[records]`'s writer: records written, spooled, dropped, and the spool's size.
    pub(crate) records: RecordsMetrics,
}

/// What `[records]`'s writer reports (`choicewise_records_*`).
#[derive(Clone, Default)]
pub(crate) struct RecordsMetrics {
    written: Counter,
    spooled: Counter,
    dropped: Family<DropLabels, Counter>,
    spool_bytes: Gauge<i64, AtomicI64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    /// `queue_full`, `spool_full`, `spool_error` or `rejected`.
    reason: &'static str,
}

impl choicewise_records::Observe for RecordsMetrics {
    fn written(&self, n: u64) {
        self.written.inc_by(n);
    }
    fn spooled(&self, n: u64) {
        self.spooled.inc_by(n);
    }
    fn dropped(&self, why: choicewise_records::Dropped, n: u64) {
        let reason = why.as_str();
        self.dropped.get_or_create(&DropLabels { reason }).inc_by(n);
    }
    fn spool_bytes(&self, bytes: u64) {
        self.spool_bytes.set(bytes.min(i64::MAX as u64) as i64);
    }
}

/// The finish reasons that are labels as they are; any other an upstream sends is `other`,
/// so that an upstream cannot grow the metrics without bound.
const FINISH_LABELS: &[&str] = &[
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "function_call",
    "error",
    "cancelled",
];

/// A finish reason as a label: a known one, else `other`.
fn finish_label(finish: &str) -> &'static str {
    (FINISH_LABELS.iter())
        .find(|known| **known == finish)
        .map_or("other", |known| known)
}

/// How a sample ended: the records' `finish`, the metrics' label, the span's reason.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum SampleEnded {
    /// With its upstream's `finish_reason` (`stop`, `length`, `tool_calls`, or another).
    Finished(String),
    /// Stopped by the gateway: a pick decided, the client left, a deadline passed.
    Cancelled,
    /// Failed, or ended without a reason.
    #[default]
    Failed,
}

/// As the tests write an end: `cancelled`, `error`, or a finish reason.
#[cfg(test)]
impl From<&str> for SampleEnded {
    fn from(said: &str) -> Self {
        match said {
            "cancelled" => SampleEnded::Cancelled,
            "error" => SampleEnded::Failed,
            reason => SampleEnded::Finished(reason.to_string()),
        }
    }
}

impl SampleEnded {
    /// As the records and the labels say it: the reason, `cancelled` or `error`.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            SampleEnded::Finished(reason) => reason,
            SampleEnded::Cancelled => "cancelled",
            SampleEnded::Failed => "error",
        }
    }

    /// Whether its upstream stopped it at its token limit (`length`).
    pub(crate) fn at_length(&self) -> bool {
        matches!(self, SampleEnded::Finished(reason) if reason == "length")
    }
}

/// One upstream request's tokens, for [`Metrics::finished`].
#[derive(Debug, Clone)]
pub(crate) struct UpstreamTokens {
    /// `API:MODEL@HOST`.
    pub upstream: Arc<str>,
    pub prompt: u64,
    pub completion: u64,
    pub estimated: bool,
}

/// How one started sample ended, for [`Metrics::finished`], the request's span and its
/// record.
#[derive(Debug, Clone, Default)]
pub(crate) struct SampleEnd {
    /// Its sample number.
    pub sample: Option<u32>,
    /// How it ended.
    pub finish: SampleEnded,
    /// Its assembled message, as far as it got (kept for the span and the records' samples).
    pub message: choicewise_core::Message,
    /// Its log-probabilities, when the upstream sent them (kept as its message is).
    pub logprobs: Option<choicewise_core::Logprobs>,
    /// Its place in the order the samples finished (`0` first), if it finished.
    pub place: Option<u64>,
    /// The output choice it became (`0`: the answer's first), if it was one.
    pub output: Option<u32>,
    /// Its tokens: its upstream request's prompt (on its first sample), what it generated.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Its tokens are the gateway's estimate.
    pub estimated: bool,
}

/// What one request came to, for [`Metrics::finished`] and the request's span
/// ([`Traces::record`](crate::traces::Traces::record)).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Each started sample's end, in the library's order.
    pub samples: Vec<SampleEnd>,
    pub upstreams: Vec<UpstreamTokens>,
    /// The request's tokens, every sample's (reported, or estimated where none came).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Some of those tokens are estimated.
    pub estimated: bool,
    /// The model the upstream named in its answer, if it named one.
    pub response_model: Option<String>,
    /// Completion tokens of cancelled samples (estimated).
    pub cancelled_tokens: u64,
    /// Completion tokens of samples that finished but were not selected.
    pub unselected_tokens: u64,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("choicewise");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by model, HTTP status and API (chat, messages, responses)",
            requests.clone(),
        );
        let answers = Family::<AnswerLabels, Counter>::default();
        registry.register(
            "answers",
            "Requests whose samples started, by model, API and how the answer ended (complete, every_choice_failed, shut_down, request_deadline, no_choice, client_gone)",
            answers.clone(),
        );
        let choices = Family::<ChoiceLabels, Counter>::default();
        registry.register(
            "choices",
            "Samples, by model and how each ended (its finish_reason, error or cancelled)",
            choices.clone(),
        );
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "tokens",
            "Tokens billed, by model, upstream, kind (prompt, completion) and source (reported, estimated)",
            tokens.clone(),
        );
        let cancelled_tokens = Family::<ModelLabels, Counter>::default();
        registry.register(
            "cancelled_tokens",
            "Completion tokens of cancelled samples (estimated), by model",
            cancelled_tokens.clone(),
        );
        let unselected_tokens = Family::<ModelLabels, Counter>::default();
        registry.register(
            "unselected_tokens",
            "Completion tokens of samples that finished but a selection did not pick, by model",
            unselected_tokens.clone(),
        );
        let first_chunk: Family<ModelLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(seconds);
        registry.register(
            "time_to_first_chunk_seconds",
            "From a streamed request's arrival to its first choice chunk, by model",
            first_chunk.clone(),
        );
        let duration: Family<ModelLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(seconds);
        registry.register(
            "request_duration_seconds",
            "From a request's arrival to the end of its answer, by model",
            duration.clone(),
        );
        let open_streams = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "open_streams",
            "Streamed answers being sent",
            open_streams.clone(),
        );
        let open_upstreams = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "open_upstream_connections",
            "Upstream responses being read",
            open_upstreams.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Client connections closed at once because max_connections were open",
            connections_refused.clone(),
        );
        let client_stalls = Counter::default();
        registry.register(
            "client_stalls",
            "Answers ended because their client took nothing for client_stall_timeout_s",
            client_stalls.clone(),
        );
        let tries = Family::<TryLabels, Counter>::default();
        registry.register(
            "upstream_tries",
            "Upstream tries up to their first byte, by model, upstream and outcome (ok, connect, timeout, 429, 5xx, 4xx; cut once more for a try that left a choice unfinished)",
            tries.clone(),
        );
        let ejected = Family::<UpstreamLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "upstream_ejected",
            "1 while an upstream is ejected for failing, else 0",
            ejected.clone(),
        );
        let fallbacks = Family::<FallbackLabels, Counter>::default();
        registry.register(
            "fallbacks",
            "Samples tried on a fallback model after every try of their model failed",
            fallbacks.clone(),
        );
        let budget_exhausted = Counter::default();
        registry.register(
            "retry_budget_exhausted",
            "Retries not made because the retry budget was spent",
            budget_exhausted.clone(),
        );
        let overload_refused = Counter::default();
        registry.register(
            "overload_refused",
            "Requests refused with 503 by the memory ceiling (memory_high_watermark_mb)",
            overload_refused.clone(),
        );
        let overloaded = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "overloaded",
            "1 while the memory ceiling refuses new requests, else 0",
            overloaded.clone(),
        );
        let panic_routed = Family::<ModelLabels, Counter>::default();
        registry.register(
            "panic_routed",
            "Samples tried on a model's ejected upstreams because every one was ejected",
            panic_routed.clone(),
        );
        let client_slow_drains = Counter::default();
        registry.register(
            "client_slow_drains",
            "Answers ended because their client took less than client_min_bytes_per_s while the answer waited for it",
            client_slow_drains.clone(),
        );
        let key_requests = Family::<KeyLabels, Counter>::default();
        registry.register(
            "key_requests",
            "Requests answered on the /v1 routes, by key name ((unnamed) for the keys of keys_env) and HTTP status",
            key_requests.clone(),
        );
        let key_tokens = Family::<KeyTokenLabels, Counter>::default();
        registry.register(
            "key_tokens",
            "Tokens of every sample, by key name and kind (prompt, completion)",
            key_tokens.clone(),
        );
        let limit_refusals = Family::<LimitLabels, Counter>::default();
        registry.register(
            "limit_refusals",
            "Requests refused with 429 by a limit, by scope (key:NAME, tag:NAME, model:NAME) and limit",
            limit_refusals.clone(),
        );
        let state_errors = Family::<StateLabels, Counter>::default();
        registry.register(
            "state_errors",
            "Calls to the store of the limits' counts that failed or passed state_timeout_ms, by op (reserve, settle, probe)",
            state_errors.clone(),
        );
        let state_failing = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "state_failing",
            "1 while the store of the limits' counts fails (on_state_error applies), else 0",
            state_failing.clone(),
        );
        let records = RecordsMetrics::default();
        registry.register(
            "records_written",
            "Request records written to the [records] database",
            records.written.clone(),
        );
        registry.register(
            "records_spooled",
            "Request records written to the spool while the [records] database was away",
            records.spooled.clone(),
        );
        registry.register(
            "records_dropped",
            "Request records dropped, by reason (queue_full, spool_full, spool_error, rejected)",
            records.dropped.clone(),
        );
        registry.register(
            "records_spool_bytes",
            "The size of the [records] spool, in bytes",
            records.spool_bytes.clone(),
        );
        Metrics {
            registry,
            key_labels: Default::default(),
            records,
            key_requests: Series::new(key_requests),
            key_tokens: Series::new(key_tokens),
            limit_refusals,
            state_errors,
            state_failing,
            overload_refused,
            overloaded,
            panic_routed,
            client_slow_drains,
            connections_refused,
            client_stalls,
            tries: Series::new(tries),
            ejected,
            fallbacks,
            budget_exhausted,
            requests: Series::new(requests),
            answers: Series::new(answers),
            choices: Series::new(choices),
            tokens: Series::new(tokens),
            cancelled_tokens: Series::new(cancelled_tokens),
            unselected_tokens: Series::new(unselected_tokens),
            first_chunk: Series::new(first_chunk),
            duration: Series::new(duration),
            open_streams,
            open_upstreams,
        }
    }

    /// The metrics in the Prometheus (OpenMetrics) text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// A request of `api` answered with this status (`model` empty when it named no
    /// configured model).
    pub fn answered(&self, api: &'static str, model: &str, status: u16) {
        self.requests.with((model, status, api), Counter::inc);
    }

    /// The label of the key `key`: its name while fewer than [`MAX_KEY_LABELS`] have
    /// been labelled, else [`OTHER_KEYS`].
    fn key_label(&self, key: &Arc<str>) -> Arc<str> {
        let labels = self.key_labels.read().unwrap_or_else(|p| p.into_inner());
        if labels.contains(key) {
            return key.clone();
        }
        drop(labels);
        let mut labels = self.key_labels.write().unwrap_or_else(|p| p.into_inner());
        if labels.len() < MAX_KEY_LABELS {
            labels.insert(key.clone());
            return key.clone();
        }
        static OTHER: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Arc::from(OTHER_KEYS));
        OTHER.clone()
    }

    /// A request of `key` (its label) answered with this status.
    pub fn key_answered(&self, key: &Arc<str>, status: u16) {
        let key = self.key_label(key);
        self.key_requests.with((&key, status), Counter::inc);
    }

    /// A request of `key` came to these tokens, every sample's.
    pub fn key_tokens(&self, key: &Arc<str>, prompt: u64, completion: u64) {
        let key = self.key_label(key);
        for (kind, count) in [("prompt", prompt), ("completion", completion)] {
            (self.key_tokens).with((&key, kind), |c| c.inc_by(count));
        }
    }

    /// A request refused by `limit` of `scope` (`key:team-a`).
    pub fn limit_refused(&self, scope: &str, limit: String) {
        let scope = match scope.strip_prefix("key:") {
            Some(name) => format!("key:{}", self.key_label(&Arc::from(name))),
            None => scope.to_string(),
        };
        self.limit_refusals
            .get_or_create(&LimitLabels { scope, limit })
            .inc();
    }

    /// A call to the store of the limits' counts failed or was late.
    pub fn state_error(&self, op: &'static str) {
        self.state_errors.get_or_create(&StateLabels { op }).inc();
    }

    /// The store of the limits' counts fails (or answers again).
    pub fn state_failing(&self, failing: bool) {
        self.state_failing.set(i64::from(failing));
    }

    /// A streamed answer's first chunk, this long after its request arrived.
    pub fn first_chunk(&self, model: &str, after: std::time::Duration) {
        let seconds = after.as_secs_f64();
        self.first_chunk.with((model,), |h| h.observe(seconds));
    }

    /// A request's answer to a client of `api` ended so (`ended`, its log label) or its
    /// client went away, this long after it arrived.
    pub fn finished(
        &self,
        model: &str,
        api: &'static str,
        ended: &'static str,
        took: std::time::Duration,
        outcome: &Outcome,
    ) {
        self.answers.with((model, api, ended), Counter::inc);
        let seconds = took.as_secs_f64();
        self.duration.with((model,), |h| h.observe(seconds));
        for sample in &outcome.samples {
            let finish_reason = finish_label(sample.finish.as_str());
            self.choices.with((model, finish_reason), Counter::inc);
        }
        for u in &outcome.upstreams {
            let source = if u.estimated { "estimated" } else { "reported" };
            let upstream = &*u.upstream;
            (self.tokens).with((model, upstream, "prompt", source), |c| c.add(u.prompt));
            (self.tokens).with((model, upstream, "completion", source), |c| {
                c.add(u.completion)
            });
        }
        (self.cancelled_tokens).with((model,), |c| c.add(outcome.cancelled_tokens));
        (self.unselected_tokens).with((model,), |c| c.add(outcome.unselected_tokens));
    }

    /// One try of an upstream, and how it ended.
    pub fn tried(&self, model: &str, upstream: &str, outcome: &'static str) {
        self.tries.with((model, upstream, outcome), Counter::inc);
    }

    /// An upstream was ejected (`true`) or restored.
    pub fn ejected(&self, upstream: &str, ejected: bool) {
        self.ejected
            .get_or_create(&UpstreamLabels {
                upstream: upstream.to_string(),
            })
            .set(i64::from(ejected));
    }

    /// A sample of `model` was tried on its upstreams although every one is ejected.
    pub fn panic_routed(&self, model: &str) {
        self.panic_routed
            .get_or_create(&ModelLabels {
                model: model.to_string(),
            })
            .inc();
    }

    /// A sample of `model` was tried on its fallback `to`.
    pub fn fallback(&self, model: &str, to: &str) {
        self.fallbacks
            .get_or_create(&FallbackLabels {
                model: model.to_string(),
                to: to.to_string(),
            })
            .inc();
    }

    /// A request refused by the memory ceiling; `now` whether it refuses new requests.
    pub fn overload(&self, refused: bool, now: bool) {
        if refused {
            self.overload_refused.inc();
        }
        self.overloaded.set(i64::from(now));
    }

    /// A retry was not made: the budget was spent.
    pub fn retry_budget_exhausted(&self) {
        self.budget_exhausted.inc();
    }

    /// A client connection closed at once: `max_connections` were open.
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// An answer ended because its client took less than `client_min_bytes_per_s`.
    pub fn client_drained_slowly(&self) {
        self.client_slow_drains.inc();
    }

    /// An answer ended because its client took nothing for `client_stall_timeout_s`.
    pub fn client_stalled(&self) {
        self.client_stalls.inc();
    }

    /// Counts a streamed answer as open until the guard is dropped.
    pub fn open_stream(self: &Arc<Self>) -> Open {
        self.open_streams.inc();
        Open {
            metrics: self.clone(),
            upstream: false,
        }
    }

    /// Counts an upstream response as open until the guard is dropped.
    pub fn open_upstream(self: &Arc<Self>) -> Open {
        self.open_upstreams.inc();
        Open {
            metrics: self.clone(),
            upstream: true,
        }
    }
}

/// Holds one open stream or upstream connection in its gauge.
pub(crate) struct Open {
    metrics: Arc<Metrics>,
    upstream: bool,
}

impl Drop for Open {
    fn drop(&mut self) {
        match self.upstream {
            true => self.metrics.open_upstreams.dec(),
            false => self.metrics.open_streams.dec(),
        };
    }
}

/// A counter that stays at `u64::MAX` rather than wrapping: token counts come from
/// upstreams, whose figures are clamped but whose sum over a long life is not bounded.
trait Saturating {
    /// Adds `v`, at most up to `u64::MAX`.
    fn add(&self, v: u64);
}

impl Saturating for Counter {
    fn add(&self, v: u64) {
        // Monotonic, as a counter must be: it only ever grows, up to u64::MAX.
        let _ = (self.inner()).fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |now| Some(now.saturating_add(v)),
        );
    }
}

/// What a request's handler learns that its count needs when the client leaves before any
/// answer (`admission::layers::count`): the configured model it named, and whether the handler keeps the
/// request's record (then the handler logs it; else the count does).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestModel(std::sync::Arc<std::sync::Mutex<(String, bool)>>);

impl RequestModel {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, (String, bool)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The request names this configured model.
    pub(crate) fn set(&self, model: &str) {
        let mut named = self.lock();
        named.0.clear();
        named.0.push_str(model);
    }

    /// The handler keeps the request's record from now on.
    pub(crate) fn recorded(&self) {
        self.lock().1 = true;
    }
}

/// The status a request is counted with when its client went away before any answer was
/// made (nginx's "client closed request").
pub(crate) const CLIENT_GONE_STATUS: u16 = 499;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_labels_are_bounded_however_many_keys_are_made() {
        let metrics = Metrics::new();
        for i in 0..MAX_KEY_LABELS + 50 {
            let key: Arc<str> = Arc::from(format!("k{i}"));
            metrics.key_answered(&key, 200);
            metrics.key_tokens(&key, 1, 1);
        }
        metrics.limit_refused("key:k5000", "requests_per_minute".into());
        let text = metrics.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("choicewise_key_requests_total{"))
            .count();
        assert_eq!(
            series,
            MAX_KEY_LABELS + 1,
            "every key up to the bound, then one"
        );
        assert!(
            text.contains("choicewise_key_requests_total{key=\"(other)\",status=\"200\"} 50"),
            "{text}"
        );
        assert!(text.contains("scope=\"key:(other)\""), "{text}");
        // A key labelled before the bound keeps its own label.
        metrics.key_answered(&Arc::from("k3"), 200);
        assert!(metrics.encode().contains("key=\"k3\",status=\"200\"} 2"));
    }

    #[test]
    fn unknown_finish_reasons_are_one_label() {
        let metrics = Metrics::new();
        for i in 0..50 {
            let outcome = Outcome {
                samples: vec![SampleEnd {
                    sample: Some(0),
                    finish: SampleEnded::Finished(format!("bomb-{i}")),
                    ..SampleEnd::default()
                }],
                ..Outcome::default()
            };
            metrics.finished("m", "chat", "complete", std::time::Duration::ZERO, &outcome);
        }
        let text = metrics.encode();
        assert!(!text.contains("bomb-"), "{text}");
        assert!(
            text.contains(r#"choicewise_choices_total{model="m",finish_reason="other"} 50"#),
            "{text}"
        );
    }

    #[test]
    fn counts_and_gauges_show_in_the_text_format() {
        let metrics = Arc::new(Metrics::new());
        metrics.answered("chat", "small", 200);
        metrics.answered("chat", "small", 200);
        metrics.answered("", "", 404);
        let end = |sample: u32, finish: &str| SampleEnd {
            sample: Some(sample),
            finish: finish.into(),
            ..SampleEnd::default()
        };
        let outcome = Outcome {
            samples: vec![end(0, "stop"), end(1, "cancelled")],
            upstreams: vec![UpstreamTokens {
                upstream: "chat:m@127.0.0.1:9".into(),
                prompt: 7,
                completion: 30,
                estimated: false,
            }],
            cancelled_tokens: 12,
            unselected_tokens: 0,
            ..Outcome::default()
        };
        metrics.finished(
            "small",
            "chat",
            "complete",
            std::time::Duration::from_millis(20),
            &outcome,
        );
        let stream = metrics.open_stream();
        let upstream = metrics.open_upstream();
        let text = metrics.encode();
        for line in [
            "choicewise_requests_total{model=\"small\",status=\"200\",api=\"chat\"} 2",
            "choicewise_requests_total{model=\"\",status=\"404\",api=\"\"} 1",
            "choicewise_answers_total{model=\"small\",api=\"chat\",ended=\"complete\"} 1",
            "choicewise_choices_total{model=\"small\",finish_reason=\"cancelled\"} 1",
            "choicewise_tokens_total{model=\"small\",upstream=\"chat:m@127.0.0.1:9\",kind=\"completion\",source=\"reported\"} 30",
            "choicewise_cancelled_tokens_total{model=\"small\"} 12",
            "choicewise_request_duration_seconds_count{model=\"small\"} 1",
            "choicewise_open_streams 1",
            "choicewise_open_upstream_connections 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        drop((stream, upstream));
        let text = metrics.encode();
        assert!(text.contains("choicewise_open_streams 0"), "{text}");
        assert!(text.contains("choicewise_open_upstream_connections 0"));
    }
}
